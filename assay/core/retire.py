"""Retiring done briefs: the one writer of the retired index (`retired.py` reads it).

One atomic push per `BATCH` briefs moves the index and the keep chain and deletes each
brief's refs, every ref under a lease; see `retired.py` for the format and why.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence

from assay.core.claims import Claims
from assay.core.git import ZERO, ForgeGit, RefUpdate, TreeEntry, committed_at, parse_tree
from assay.core.records import (
    CLAIMS_PREFIX,
    LEARNED_PREFIX,
    brief_id_problem,
    chain,
    parse_iso,
    utc_now_iso,
    validate_brief_id,
)
from assay.core.records.recordtype import dataclass, field
from assay.core.retired import BATCH, INDEX_DIR, KEEP_REF, PREFIXES, RETIRED_REF, Index, RetiredBrief, shard
from assay.errors import IllegalTransition, NotATree


@dataclass
class Retirement:
    """What one `retire` did (or, dry, would do)."""

    retired: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # done briefs left alone, and why
    pushes: int = 0
    packed: bool = False
    cleared: list[str] = field(default_factory=list)  # learned footprints an older retire left, deleted with them


def retire(claims: Claims, briefs: Sequence[str] = (), *, older_than_s: float = 0.0, by: str = "assay",
           dry_run: bool = False) -> Retirement:
    """Retire `briefs` (default: every done brief whose `done` is older than `older_than_s`).

    One atomic push per `BATCH` briefs moves the index and the keep chain and deletes each
    brief's refs, every ref under a lease, so a brief that changed meanwhile is never lost:
    the push fails whole and the briefs are read again. Naming a brief that is not done is
    refused before anything is written. On a forge on disk the refs are packed afterwards.
    """
    git = claims.git
    wanted = [validate_brief_id(b) for b in briefs]
    result = Retirement()

    def attempt(_: int) -> Retirement:
        nonlocal result
        result = Retirement(retired=list(result.retired), pushes=result.pushes,  # what landed before stays said
                            cleared=list(result.cleared))
        refs = git.ls_remote(*(p + "*" for p in PREFIXES), RETIRED_REF, KEEP_REF)
        tips = {r: s for r, s in refs.items() if r.startswith(CLAIMS_PREFIX)}
        good, _bad = claims.load_tips(tips)
        done = {c.record.brief: c for c in good if c.record.state == "done"}
        index = Index(git, refs.get(RETIRED_REF))
        for brief in wanted:
            if brief not in done and index.get(brief) is None:
                state = next((c.record.state for c in good if c.record.brief == brief), "absent")
                raise IllegalTransition(brief, "retire", state, "only a done brief is retired")
        now = claims.clock()
        chosen = []
        for brief, claim in sorted(done.items()):
            if wanted and brief not in wanted:
                continue
            if now - parse_iso(claim.record.at).timestamp() < older_than_s:
                result.kept[brief] = f"done at {claim.record.at}, not yet {older_than_s:.0f}s ago"
                continue
            chosen.append(brief)
        orphans = _orphans(refs, index) if chosen else {}  # they go with a retirement's push
        if dry_run:
            result.retired, result.cleared = chosen, sorted(orphans)
            return result
        retired_tip, keep_tip = refs.get(RETIRED_REF), refs.get(KEEP_REF)
        # the keep chain's commits reach every tip (as parents of one of their own): git needs them in the cache
        git.ensure_objects({p + b: refs[p + b] for b in chosen for p in PREFIXES if p + b in refs})
        for start in range(0, len(chosen), BATCH):
            batch = chosen[start:start + BATCH]
            records = [RetiredBrief(brief=b, epoch=done[b].record.epoch, desk=done[b].record.desk,
                                    done_at=done[b].record.at, retired_at=utc_now_iso(now), by=by,
                                    refs={p + b: refs[p + b] for p in PREFIXES if p + b in refs}) for b in batch]
            updates = _retire_updates(git, records, retired_tip, keep_tip, by, now)
            updates += [RefUpdate(ref, ZERO, sha) for ref, sha in sorted(orphans.items())] if start == 0 else []
            chain.push(git, updates, "retire")
            retired_tip, keep_tip = updates[0].new, updates[1].new
            result.cleared += sorted(orphans) if start == 0 else []
            result.retired += batch
            result.pushes += 1
        return result

    chain.retrying(attempt, "retiring done briefs")
    if result.retired and not dry_run:
        result.packed = git.pack_forge_refs() is not None
    return result


def _orphans(refs: Mapping[str, str], index: Index) -> dict[str, str]:
    """Learned footprints of briefs retired already (an older Assay's retire leaves them), deleted with the next
    retirement under a lease each: a retired brief is never taken again, so they hold nothing back."""
    briefs = {ref: ref.removeprefix(LEARNED_PREFIX) for ref in refs if ref.startswith(LEARNED_PREFIX)}
    return {ref: refs[ref] for ref, brief in briefs.items()  # a ref that names no brief: junk, the readers report it
            if brief_id_problem(brief) is None and CLAIMS_PREFIX + brief not in refs and index.get(brief) is not None}


def _retire_updates(git: ForgeGit, records: list[RetiredBrief], retired_tip: str | None, keep_tip: str | None,
                    by: str, now: float) -> list[RefUpdate]:
    """The index commit, the keep commit, and a deletion of every ref of every brief in `records`."""
    root = (git.read_tree(f"{retired_tip}:{INDEX_DIR}") or []) if retired_tip else []
    folders = {e.name: e.sha for e in root}
    touched = sorted({shard(r.brief) for r in records})
    kept = [name for name in touched if name in folders]
    shards: dict[str, dict[str, TreeEntry]] = {name: {} for name in touched}
    for name, tree in zip(kept, git.read_typed([folders[name] for name in kept]), strict=True):  # one batch
        if tree is not None:
            if tree.kind != "tree":
                raise NotATree(folders[name], tree.kind)
            shards[name] = {e.name: e for e in parse_tree(tree.data)}
    for record in records:
        file = f"{record.brief}.json"
        shards[shard(record.brief)][file] = TreeEntry(file, git.write_blob(record.encode()))
    for name, entries in shards.items():
        folders[name] = git.write_tree(entries.values())
    index_dir = git.write_tree([TreeEntry(n, s, "40000") for n, s in folders.items()])
    names = ", ".join(r.brief for r in records[:5]) + (f" and {len(records) - 5} more" if len(records) > 5 else "")
    # the retirer's own token: two retirers making the same change in the same second would write the same
    # commits, and each would read the other's push as its own
    message = (f"assay: retire {len(records)} done brief{'s' if len(records) != 1 else ''}: {names}\n\n"
               f"Assay-Retirer: {secrets.token_hex(8)}\n")
    index = chain.commit(git, RETIRED_REF, retired_tip, {INDEX_DIR: TreeEntry(INDEX_DIR, index_dir, "40000")},
                         message, by, now)
    kept = list(dict.fromkeys(sha for r in records for sha in r.refs.values()))
    # the tips under one commit of their own, as old as the oldest of them, below the chain's: a push's check of what
    # it brings walks the forge's refs from the newest commit down a few commits, and parses each one's parents, so
    # the chain's commits (two parents each) are what it meets, never a bundle's hundreds of tips
    stamps = [t for obj in git.read_typed(kept) if obj and obj.kind == "commit" and (t := committed_at(obj.data))]
    bundle = chain.commit(git, KEEP_REF, kept[0], {}, message, by, min([*stamps, now]), merged=kept[1:])
    keep = chain.commit(git, KEEP_REF, keep_tip, {}, message, by, now, merged=[bundle.new])
    deletions = [RefUpdate(ref, ZERO, sha) for r in records for ref, sha in sorted(r.refs.items())]
    return [index, keep, *deletions]
