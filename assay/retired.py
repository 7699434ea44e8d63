"""Retired briefs: the refs of finished work folded into one index, so they no longer cost every push.

Every push and every listing advertises every ref of the forge, so a forge that kept
the four refs of each finished brief (claim, journal, review, work branch) would slow
down with every brief ever done. Retiring a `done` brief records the tips of those refs
in `refs/assay/retired` (one small JSON file per brief) and deletes them, in one atomic
push under leases on every ref it touches. Their objects stay reachable from
`refs/assay/retired-keep`, whose commits have the retired tips as parents, so the custody
chain, the journal and the review of a retired brief are read exactly as before
(`tip_of`), while readers that only need to know *which* briefs are retired fetch the
index alone. The format is in docs/data-model.md.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from assay import chain
from assay.errors import IllegalTransition, NoSuchBrief, RecordInvalid, UsageError
from assay.git import ZERO, ForgeGit, RefUpdate, Signature, TreeEntry, parse_tree
from assay.records import (
    CLAIMS_PREFIX,
    JOURNAL_PREFIX,
    MAIN_REF,
    REVIEWS_PREFIX,
    brief_of_ref,
    check_tip,
    load_record,
    parse_iso,
    utc_now_iso,
    validate_brief_id,
)

if TYPE_CHECKING:
    from assay.claims import Claims

RETIRED_REF = "refs/assay/retired"
KEEP_REF = "refs/assay/retired-keep"
BRANCH_PREFIX = "refs/heads/assay/"
PREFIXES = (CLAIMS_PREFIX, JOURNAL_PREFIX, REVIEWS_PREFIX, BRANCH_PREFIX)  # the refs a brief has on the forge
BATCH = 500  # briefs per push: keeps the argument list and the keep commit's parents bounded
INDEX_DIR = "briefs"
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "v": int, "brief": str, "epoch": int, "desk": str, "done_at": str, "retired_at": str, "by": str, "refs": dict,
}


@dataclass(frozen=True)
class RetiredBrief:
    """One file of the index: a done brief, and the tip each of its refs had when it was retired."""

    brief: str
    epoch: int
    desk: str
    done_at: str
    retired_at: str
    by: str
    refs: dict[str, str] = field(default_factory=dict)
    v: int = 1

    def encode(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def decode_retired(data: bytes | None, where: str) -> RetiredBrief:
    obj = load_record(data, where, "the retired record", _FIELDS)
    validate_brief_id(obj["brief"])
    refs = obj["refs"]
    if not all(isinstance(k, str) and isinstance(v, str) and len(v) == 40 for k, v in refs.items()):
        raise RecordInvalid(where, "the retired record's refs must map ref names to commit ids")
    return RetiredBrief(**obj)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """Seconds in an age such as `90s`, `30m`, `12h` or `7d` (a bare number is seconds)."""
    value, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        seconds = float(value) * _UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"{text!r} is not an age", hint="write a number with s, m, h or d, such as 7d or 12h")
    return seconds


def shard(brief: str) -> str:
    """The folder of a brief's file in the index: two hex digits of the SHA-1 of its id."""
    return hashlib.sha1(brief.encode()).hexdigest()[:2]


def entry_path(brief: str) -> str:
    return f"{INDEX_DIR}/{shard(brief)}/{brief}.json"


class Index:
    """The retired briefs as one tip of `refs/assay/retired` has them (None: nothing retired yet)."""

    def __init__(self, git: ForgeGit, tip: str | None) -> None:
        self.git = git
        self.tip = tip
        self._names: frozenset[str] | None = None
        if tip:
            git.ensure_objects({RETIRED_REF: tip})
            head, folder = git.read_typed([tip, f"{tip}:{INDEX_DIR}"])
            check_tip(RETIRED_REF, tip, head.kind if head else None)
            if folder is None or folder.kind != "tree":
                raise RecordInvalid(RETIRED_REF, f"its tip {tip[:10]} has no {INDEX_DIR}/ folder")

    def names(self) -> frozenset[str]:
        """Every retired brief: the index's folders, read in one cat-file batch."""
        if self._names is None:
            self._names = frozenset(name for name, _ in self._files())
        return self._names

    def get(self, brief: str) -> RetiredBrief | None:
        if not self.tip:
            return None
        found = self.git.read_typed([f"{self.tip}:{entry_path(brief)}"])[0]
        if found is None:
            return None
        record = decode_retired(found.data if found.kind == "blob" else None, f"{RETIRED_REF}:{entry_path(brief)}")
        if record.brief != brief:
            raise RecordInvalid(RETIRED_REF, f"{entry_path(brief)} names brief {record.brief!r}")
        return record

    def _files(self) -> list[tuple[str, str]]:
        """(brief, blob id) of every file of the index."""
        if not self.tip:
            return []
        shards = self.git.read_tree(f"{self.tip}:{INDEX_DIR}") or []
        trees = self.git.read_typed([s.sha for s in shards])
        out = []
        for folder, tree in zip(shards, trees, strict=True):
            if tree is None or tree.kind != "tree":
                raise RecordInvalid(RETIRED_REF, f"{INDEX_DIR}/{folder.name} is not a folder")
            out += [(e.name.removesuffix(".json"), e.sha) for e in parse_tree(tree.data) if e.name.endswith(".json")]
        return out


def read_index(git: ForgeGit) -> Index:
    return Index(git, git.ls_remote(RETIRED_REF).get(RETIRED_REF))


def tip_of(git: ForgeGit, ref: str, refs: Mapping[str, str] | None = None) -> str | None:
    """The tip of a brief's `ref` on the forge, or the tip it had when the brief was retired. `refs`: the forge's
    refs read already (one ls-remote for many briefs, with RETIRED_REF among them); else they are read now."""
    refs = git.ls_remote(ref, RETIRED_REF) if refs is None else refs
    if ref in refs:
        return refs[ref]
    prefix = next((p for p in PREFIXES if ref.startswith(p)), None)
    if prefix is None or RETIRED_REF not in refs:
        return None
    record = Index(git, refs[RETIRED_REF]).get(brief_of_ref(ref, prefix))
    return record.refs.get(ref) if record else None


def refuse_if_retired(git: ForgeGit, retired_tip: str | None, brief: str, action: str) -> None:
    """IllegalTransition if `brief` is retired: it is done, and its refs are read-only."""
    if retired_tip and Index(git, retired_tip).get(brief) is not None:
        raise IllegalTransition(brief, action.replace("_", "-"), "done",
                                "a done brief is finished and retired; reopen it on main as a new brief")


def check_not_retired(git: ForgeGit, brief: str, action: str) -> None:
    """For a brief with no claim ref: IllegalTransition if that is because it is retired."""
    refuse_if_retired(git, git.ls_remote(RETIRED_REF).get(RETIRED_REF), brief, action)


def require_known(git: ForgeGit, brief: str) -> None:
    """NoSuchBrief unless the forge knows `brief`: on main, claimed or journaled, or retired. For readers that
    found nothing of it, so that a mistyped name is bad input, not an empty history."""
    brief = validate_brief_id(brief)
    refs = git.ls_remote(MAIN_REF, CLAIMS_PREFIX + brief, JOURNAL_PREFIX + brief, RETIRED_REF)
    if CLAIMS_PREFIX + brief in refs or JOURNAL_PREFIX + brief in refs:
        return
    if RETIRED_REF in refs and Index(git, refs[RETIRED_REF]).get(brief) is not None:
        return
    main = refs.get(MAIN_REF)
    if main:
        git.ensure_objects({MAIN_REF: main})
        found = git.read_typed([f"{main}:briefs/{brief}.md"])[0]
        if found is not None and found.kind == "blob":
            return
    raise NoSuchBrief(brief)


# -- retiring -------------------------------------------------------------------------------------


@dataclass
class Retirement:
    """What one `retire` did (or, dry, would do)."""

    retired: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # done briefs left alone, and why
    pushes: int = 0
    packed: bool = False


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
        result = Retirement(retired=list(result.retired), pushes=result.pushes)  # what landed before stays said
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
        if dry_run:
            result.retired = chosen
            return result
        retired_tip, keep_tip = refs.get(RETIRED_REF), refs.get(KEEP_REF)
        # the keep commit names every tip as a parent: git needs them in the cache to push it
        git.ensure_objects({p + b: refs[p + b] for b in chosen for p in PREFIXES if p + b in refs})
        for start in range(0, len(chosen), BATCH):
            batch = chosen[start:start + BATCH]
            records = [RetiredBrief(brief=b, epoch=done[b].record.epoch, desk=done[b].record.desk,
                                    done_at=done[b].record.at, retired_at=utc_now_iso(now), by=by,
                                    refs={p + b: refs[p + b] for p in PREFIXES if p + b in refs}) for b in batch]
            updates = _retire_updates(git, records, retired_tip, keep_tip, by, now)
            chain.push(git, updates, "retire")
            retired_tip, keep_tip = updates[0].new, updates[1].new
            result.retired += batch
            result.pushes += 1
        return result

    chain.retrying(attempt, "retiring done briefs")
    if result.retired and not dry_run:
        result.packed = git.pack_forge_refs()
    return result


def _retire_updates(git: ForgeGit, records: list[RetiredBrief], retired_tip: str | None, keep_tip: str | None,
                    by: str, now: float) -> list[RefUpdate]:
    """The index commit, the keep commit, and a deletion of every ref of every brief in `records`."""
    shards: dict[str, list[TreeEntry]] = {}
    root = (git.read_tree(f"{retired_tip}:{INDEX_DIR}") or []) if retired_tip else []
    folders = {e.name: e.sha for e in root}
    for record in records:
        name = shard(record.brief)
        if name not in shards:
            shards[name] = (git.read_tree(folders[name]) or []) if name in folders else []
        shards[name] = [e for e in shards[name] if e.name != f"{record.brief}.json"]
        shards[name].append(TreeEntry(f"{record.brief}.json", git.write_blob(record.encode())))
    for name, entries in shards.items():
        folders[name] = git.write_tree(entries)
    index_dir = git.write_tree([TreeEntry(n, s, "40000") for n, s in folders.items()])
    names = ", ".join(r.brief for r in records[:5]) + (f" and {len(records) - 5} more" if len(records) > 5 else "")
    # the retirer's own token: two retirers making the same change in the same second would write the same
    # commits, and each would read the other's push as its own
    message = (f"assay: retire {len(records)} done brief{'s' if len(records) != 1 else ''}: {names}\n\n"
               f"Assay-Retirer: {secrets.token_hex(8)}\n")
    who = Signature.of(by)
    index = git.write_commit(git.write_tree([TreeEntry(INDEX_DIR, index_dir, "40000")]),
                             [retired_tip] if retired_tip else [], message, who, now)
    kept = list(dict.fromkeys(sha for r in records for sha in r.refs.values()))
    keep = git.write_commit(git.write_tree([]), [*([keep_tip] if keep_tip else []), *kept], message, who, now)
    deletions = [RefUpdate(ref, ZERO, sha) for r in records for ref, sha in sorted(r.refs.items())]
    return [RefUpdate(RETIRED_REF, index, retired_tip or ZERO), RefUpdate(KEEP_REF, keep, keep_tip or ZERO),
            *deletions]
