"""Reviews held against the main they would land on, now.

Two questions, each answered with plain three-way merges (`git merge-tree`) in the cache:

- **Superseded at ready** (`superseded`): before a desk marks a review ready, is its work on main already (the
  merge of its branch into main's tip is main's own tree), or wholly inside another open ready review (the merge of
  the branch into main-with-that-review is that merge's own tree)? Then it is not marked ready.
- **Stale after a merge** (`wake_stale`): once main moved, each other ready review whose brief waits on it and whose
  branch no longer merges cleanly into the new main is woken for a new round, the conflicting files named in its
  feedback, once per (brief, main): the wake is journaled under the identity `main:<sha>`, in the same
  compare-and-swap push as the claim's change (`signals.new_round`), so a second or racing look writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from assay.core import signals
from assay.core.claims import Claims
from assay.core.forge.base import Review, Reviews
from assay.core.git import ForgeGit, Signature
from assay.core.records import (
    CLAIMS_PREFIX,
    MAIN_REF,
    REVIEWS_PREFIX,
    WORK_BRANCH_REF_PREFIX,
    JournalEntry,
    ReviewRecord,
)
from assay.errors import AssayError

_BRIEF_TRAILER = re.compile(r"^Assay-Brief: (\S+)$", re.M)
READY = "ready"
ON_MAIN = "on-main"
SUPERSEDED = "superseded"


def merged_brief(git: ForgeGit, commit: str) -> str:
    """The brief whose review's merge made `commit` (its `Assay-Brief` trailer), or ""."""
    found = _BRIEF_TRAILER.findall(git.message_of(commit))
    return found[-1] if found else ""


def _branch_ref(review: Review | ReviewRecord) -> str:
    return f"refs/heads/{review.branch if isinstance(review, ReviewRecord) else review.record.branch}"


def superseded(git: ForgeGit, reviews: Reviews, claims: Claims, brief: str, head: str) -> dict[str, Any]:
    """Whether the review of `brief` at `head` should be marked ready, judged against main's tip as the forge
    has it now: `{"verdict": "ready", "main": sha}`; `{"verdict": "on-main", "main": sha}` when merging it into
    main changes nothing; `{"verdict": "superseded", "main": sha, "by": other brief, "head": its head}` when
    another ready review (its brief waiting on it) already holds every change of this one."""
    # main, every claim and (where reviews are refs) every review in one listing: the claims' records mostly
    # known already, the candidates' heads read in one fetch; a read each would cost the forge ready reviews x
    # briefs made ready
    listed = git.ls_remote(MAIN_REF, CLAIMS_PREFIX + "*", *([REVIEWS_PREFIX + "*"] if reviews.refs_backed else []))
    main = listed.get(MAIN_REF, "")
    if not main:
        return {"verdict": READY, "main": ""}
    git.ensure_objects({MAIN_REF: main, WORK_BRANCH_REF_PREFIX + brief: head})
    if git.is_ancestor(head, main):
        return {"verdict": ON_MAIN, "main": main}
    tree, _ = git.merge_conflicts(main, head)
    if tree is not None and tree == git.tree_of(main):
        return {"verdict": ON_MAIN, "main": main}
    others = sorted((r for r in reviews.list(listed if reviews.refs_backed else None) if isinstance(r, Review)
                     and r.brief != brief and r.state == READY and r.record.head), key=lambda r: r.brief)
    # the claims of those briefs alone: a waiting claim seldom moves (no renewals), so they are mostly known; all
    # of them would be a fetch of every claim renewed since the last look, at every review made ready
    claimed = {ref: listed[ref] for ref in (CLAIMS_PREFIX + r.brief for r in others) if ref in listed}
    waiting = {c.record.brief for c in claims.load_tips(claimed, every=False)[0] if c.record.state == "waiting"}
    others = [r for r in others if r.brief in waiting]  # a ready review nobody waits on is no one's work in flight
    try:
        git.ensure_objects({_branch_ref(r): r.record.head for r in others})
    except AssayError:  # a branch gone: fetched one by one, the gone ones left out (nothing to compare with)
        others = [r for r in others if _fetched(git, _branch_ref(r), r.record.head)]
    candidates = _may_hold(git, main, head, tree, [r.record.head for r in others])
    for other in others:
        tip = other.record.head
        if tip not in candidates:
            continue
        if git.is_ancestor(head, tip):
            return {"verdict": SUPERSEDED, "main": main, "by": other.brief, "head": tip}
        theirs, _ = git.merge_conflicts(main, tip)
        if theirs is None:
            continue  # it conflicts with main itself: it is to be woken, not to stand in for this one
        both = git.write_commit(theirs, [main, tip], f"assay: {other.brief} merged into main (a test)\n",
                                Signature.of("assay"), 0)  # in the cache only, never pushed
        ours, _ = git.merge_conflicts(both, head)
        if ours is not None and ours == theirs:
            return {"verdict": SUPERSEDED, "main": main, "by": other.brief, "head": tip}
    return {"verdict": READY, "main": main}


def _may_hold(git: ForgeGit, main: str, head: str, tree: str | None, tips: Sequence[str]) -> set[str]:
    """Those of `tips` (ready reviews' heads, in the cache) that may hold every change of `head`, found with a
    few git processes however many there are, so that the merges judge only them: a tip whose branch shares a
    commit with head's that main lacks (then the merges decide, as for all of them when head does not merge
    cleanly into main: `tree` None), and a tip that differs from main in every path that merging head into main
    changes (a branch that leaves such a path as main has it cannot hold that change: merged after it, head
    would still change the path). Where main renamed a path since head's branch began, the merges' rename
    detection may pair paths otherwise and find a tip left out here to hold head; it then counts as not holding
    it, and the review is marked ready (the safe side: a person sees both)."""
    if not tips:
        return set()
    if tree is None or git.commits_outside([head], main) & git.commits_outside(tips, main):
        return set(tips)
    trees = {tip: git.tree_of(tip) for tip in tips}  # through the object batch
    changed = git.changed_against(git.tree_of(main), [tree, *trees.values()])
    return {tip for tip, theirs in trees.items() if changed[tree] <= changed[theirs]}


def _fetched(git: ForgeGit, ref: str, sha: str) -> bool:
    try:
        git.ensure_objects({ref: sha})
    except AssayError:
        return False
    return True


def superseded_note(entries: Sequence[JournalEntry]) -> dict[str, Any] | None:
    """The evidence of the newest round whose review was not marked ready because it was superseded (its `note`),
    if no round began since: None otherwise."""
    for e in reversed(entries):
        data = e.data or {}
        if e.kind == "note" and isinstance(data.get("superseded"), dict):
            return dict(data["superseded"])
        if e.kind == "note" and data.get("redo"):
            return None
    return None


def superseded_text(evidence: Mapping[str, Any]) -> str:
    """The board's words for it: "already on main at <sha>" or "superseded by <brief>"."""
    if evidence.get("verdict") == ON_MAIN:
        return f"already on main at {str(evidence.get('main', ''))[:10]}"
    return f"superseded by {evidence.get('by', '?')}"


def stale_reason(main: str, by_brief: str, files: list[str]) -> str:
    merge = f" (merge of {by_brief})" if by_brief else ""
    return (f"main moved to {main[:10]}{merge}; the branch no longer merges cleanly: rebase onto main and resolve "
            f"{', '.join(files) or 'the conflicts'}")


RowsOnMain = Callable[[str, str, str, str], "tuple[str, str] | None"]


def wake_stale(claims: Claims, reviews: Reviews, waiting: Iterable[str], by: str,
               known: Mapping[str, ReviewRecord] | None = None,
               rows: RowsOnMain | None = None) -> list[signals.Settled]:
    """Wake, for a new round, each brief of `waiting` (briefs whose claims wait on their reviews) whose review is
    ready and whose branch no longer merges cleanly into main's tip: once per (brief, main). `known`: the reviews
    as the caller read them already (a sweep's), else they are read. Returns the wakes made (briefs already woken
    for this main, or merging cleanly, are left out). `rows(brief, main, head, tree)`, for a branch that merges
    cleanly (into `tree`): the reason and details to wake it with when its verify rows fail on that merge, else
    None (it decides once per (brief, main) itself)."""
    briefs = sorted(set(waiting))
    if not briefs:
        return []
    git = claims.git
    records = {b: known[b] for b in briefs if b in known} if known is not None else \
        {b: r.record for b, r in reviews.peek_many(briefs).items()}
    ready = {b: r for b, r in records.items() if r.state == READY and r.head}
    if not ready:
        return []
    found = git.ls_remote(MAIN_REF, *sorted({_branch_ref(r) for r in ready.values()}))
    main = found.get(MAIN_REF, "")
    if not main:
        return []
    git.ensure_objects({MAIN_REF: main, **{_branch_ref(r): r.head for r in ready.values()}})
    out: list[signals.Settled] = []
    source: str | None = None
    for brief, review in sorted(ready.items()):
        head = review.head
        if found.get(_branch_ref(review)) != head or git.is_ancestor(head, main):
            continue  # its branch moved on (a round under way), or it is on main already (merged)
        if git.is_ancestor(main, head):
            continue  # main has not moved under it: its own verify ran on this very merge
        tree, files = git.merge_conflicts(main, head)
        if source is None:
            source = merged_brief(git, main)
        if tree is not None:
            failed = rows(brief, main, head, tree) if rows is not None else None
            if failed is None:
                continue
            merge = f" (merge of {source})" if source else ""
            reason, said = f"main moved to {main[:10]}{merge}; {failed[0]}", failed[1]
        else:
            reason = stale_reason(main, source, files)
            said = ("Main was merged into the branch in your worktree and these files hold conflict markers: "
                    f"{', '.join(files)}. Resolve them so that both this brief's change and main's hold.")
        settled = signals.new_round(claims, brief, f"main:{main}", reason, said, by,
                                    {"main": main, "files": files})
        if settled.woken:
            out.append(settled)
    return out
