"""Listings for an operator: every claim with when it was last written and its liveness, filtered; a review
with what it changes, its verify evidence, and the work its agent had not pushed at its newest checkpoint.

The claims come from one scan (claims, main, the retired index); the desks' heartbeats from their
definitions on main; each claim's age from its tip commit (a renewal repeats its record: only the
commit tells when). A forge with no main yet still lists its claims, with the default heartbeat.
"""

from __future__ import annotations

from typing import Any

from assay.core import landing, wip
from assay.core.claims import Claim, Claims, InvalidClaim, Liveness, liveness, renewal_key
from assay.core.deskspec import PERSON_HEARTBEAT_S, desks_on_main
from assay.core.forge.base import Review, Reviews, Thread
from assay.core.git import ForgeGit
from assay.core.journal import read_kept
from assay.core.records import MAIN_REF, ClaimRecord, JournalEntry, claim_ref
from assay.core.records.recordtype import dataclass, field
from assay.core.retired import RETIRED_REF, tip_of
from assay.errors import ForgeError, NoMainBranch, RecordInvalid, UsageError


@dataclass(frozen=True)
class ClaimRow:
    claim: Claim
    written_age_s: int | None  # seconds since its tip commit was written (the writer's clock)
    liveness: Liveness
    progress: str = ""  # what the agent last said of its long step, carried by the tip's renewal


def list_claims(claims: Claims, now: float, states: tuple[str, ...] = (), desk: str | None = None,
                limit: int | None = None, brief: str | None = None
                ) -> tuple[list[ClaimRow], list[InvalidClaim], int, int]:
    """The claims in brief order, those in `states` (all if none) of `desk` (any if None), at most `limit`, only
    `brief`'s when given (its tip alone is read); how many matched (the rest are never read further: at 1,000
    claims their ages cost most of a listing); and how many valid claims there are unfiltered (so that a filter
    matching none is not taken for an empty forge)."""
    try:
        view = claims.read_view()
        view.scan.fetch("main")
        tips = view.tips if brief is None else {r: sha for r, sha in view.tips.items() if r == claim_ref(brief)}
        good, bad = claims.load_tips(tips)
        bad = [*view.scan.junk, *bad]
        specs, _ = desks_on_main(claims.git, view.main)
    except NoMainBranch:
        (good, bad), specs = claims.list_all(), []
    if brief is not None:
        good, bad = [c for c in good if c.record.brief == brief], [b for b in bad if b.ref == claim_ref(brief)]
    beats = {s.name: s.heartbeat_s for s in specs}
    matched = [c for c in good if (not states or c.record.state in states) and (desk is None or c.record.desk == desk)]
    chosen = matched[:limit]
    written, progress = claims.written(chosen), claims.progress(chosen)
    rows = []
    for c in chosen:
        age = max(0, int(now - written[c.sha])) if c.sha in written else None
        rows.append(ClaimRow(c, age, liveness(c.record, age, beats.get(c.record.desk, PERSON_HEARTBEAT_S)),
                             progress.get(c.sha, "")))
    return rows, bad, len(matched), len(good)


def custody_reasons(history: list[Claim | InvalidClaim]) -> list[str]:
    """Why custody changed at each item of a claim chain (oldest first), as the board and `assay claim history`
    both say it: a record's own reason, else what the change from the record before it means (a takeover, a claim
    after an expiry, ...), which a takeover does not record. A renewal repeats the why of the record it renews; an
    invalid item has none."""
    whys: list[str] = []
    before: ClaimRecord | None = None  # the last record that changed custody
    last: object = None  # the renewal key of the item before (None after an invalid one: no renewal follows it)
    for item in history:
        if isinstance(item, InvalidClaim):
            whys.append("")
            last = None
            continue
        r = item.record
        if whys and renewal_key(r) == last:
            whys.append(whys[-1])
            continue
        whys.append(r.reason or _change_why(before, r))
        before, last = r, renewal_key(r)
    return whys


def _change_why(before: ClaimRecord | None, r: ClaimRecord) -> str:
    """Why custody changed, for a record that carries no reason of its own: from the record before it."""
    if before is None:
        return "first claimed" if r.state == "held" else ""
    if r.epoch == before.epoch:
        return {"waiting": "parked", "held": "woken", "done": "finished", "released": "released"}.get(r.state, "")
    was = f"epoch {before.epoch} of desk {before.desk}"
    said = f" ({before.reason})" if before.reason else ""
    if before.state == "expired":
        return f"claimed after a sweeper expired {was}{said}"
    if before.state in ("held", "waiting", "blocked"):
        return f"desk {r.desk} took over its own claim after a restart" if before.desk == r.desk else f"took over {was}"
    return f"claimed after {was} was {before.state}{said}"


@dataclass(frozen=True)
class ReviewDetail:
    """A review with what it changes and the evidence for its head: `files` as (path, added, deleted), the counts
    None for a binary file, or None when the commits cannot be read; `verify`, the last verify run at the head."""

    review: Review
    base: str
    head: str
    files: list[tuple[str, int | None, int | None]] | None
    verify: list[dict[str, Any]]
    unsaved: dict[str, Any] | None = None  # the newest checkpoint's worktree, where it differs from the head
    superseded: str = ""  # "superseded by <brief>" / "already on main at <sha>": why it was closed, not marked ready
    threads: list[Thread] = field(default_factory=list)  # review threads waiting on a desk's answer


def _compared(git: ForgeGit, review: Review) -> tuple[str, str]:
    """The commits a review's change lies between, as a pull request shows it: where the head forked from main (from
    the merge's first parent, once merged) and the head. Until it is merged the head is the branch's tip, whatever
    the review's state: the record's `head` is only where the branch stood when the review was opened or last marked
    ready, so a draft (a brief blocked before ready, say) would show none of its agent's commits. The record's head
    once merged, or when the branch is gone. ("", "") if none."""
    r = review.record
    branch_ref = f"refs/heads/{r.branch}"
    refs = git.ls_remote(MAIN_REF, branch_ref, RETIRED_REF)
    main = refs.get(MAIN_REF, "")
    head = (r.head if r.state == "merged" else "") or tip_of(git, branch_ref, refs) or r.head
    if not head:
        return "", ""
    tips = {f"refs/heads/{r.branch}": head, **({MAIN_REF: main} if main else {})}
    git.ensure_objects(tips)
    against = f"{r.merged_commit}^1" if r.merged_commit and r.merged_commit != head else main
    return (git.merge_base(against, head) or against) if against else "", head


def review_detail(git: ForgeGit, reviews: Reviews, brief: str) -> ReviewDetail:
    """`assay review show`: the review (as kept, for a retired brief), its files and the verify evidence."""
    review = reviews.kept(brief)
    if review is None:
        raise UsageError(f"brief {brief!r} has no review", hint="`assay review list` shows the reviews")
    files: list[tuple[str, int | None, int | None]] | None = []
    try:
        base, head = _compared(git, review)
        if base and head:
            stat = git.diff(base, head, numstat=True).splitlines()
            files = [(path, int(a) if a != "-" else None, int(d) if d != "-" else None)
                     for a, d, path in (line.split("\t", 2) for line in stat)]
    except ForgeError:
        base, head, files = "", review.record.head, None
    rows: dict[str, dict[str, Any]] = {}
    entries = read_kept(git, brief).entries
    for e in entries:
        if e.kind == "verify" and e.data and head and e.data.get("head") == head:
            rows[str(e.data.get("row", ""))] = e.data
    evidence = landing.superseded_note(entries) if review.state == "closed" else None
    threads = reviews.threads(brief) if review.state in ("draft", "ready") else []
    return ReviewDetail(review, base, head, files, list(rows.values()), _unsaved(git, brief, entries, head),
                        landing.superseded_text(evidence) if evidence else "", threads)


def note_place(on: str | None) -> tuple[str, int]:
    """`--on PATH[:LINE]` of `assay review note`, as (path, line); line 0 when none is given."""
    if not on:
        return "", 0
    path, sep, line = on.rpartition(":")
    return (path, int(line)) if sep and path and line.isdigit() else (on, 0)


def _unsaved(git: ForgeGit, brief: str, entries: list[JournalEntry], head: str) -> dict[str, Any] | None:
    """The newest worktree snapshot of the brief (`core/wip.py`: a checkpoint's, or a step result's) if its files
    differ from the review's head: `{seq, commit, files}` (files: how many differ), or None."""
    saved = [e for e in entries if e.kind in ("checkpoint", "result") and (e.data or {}).get("worktree")]
    if not saved or not head:
        return None
    commit = str((saved[-1].data or {})["worktree"])
    try:
        wip.fetch(git, brief, commit)
        changed = git.diff(head, commit, numstat=True).splitlines()
    except (ForgeError, RecordInvalid):
        return {"seq": saved[-1].seq, "commit": commit, "files": None}  # named, but not on the forge
    return {"seq": saved[-1].seq, "commit": commit, "files": len(changed)} if changed else None


def review_diff(git: ForgeGit, reviews: Reviews, brief: str) -> str:
    """`assay review diff`: the patch a review proposes (or merged)."""
    review = reviews.kept(brief)
    if review is None:
        raise UsageError(f"brief {brief!r} has no review", hint="`assay review list` shows the reviews")
    base, head = _compared(git, review)
    return git.diff(base, head) if base and head else ""
