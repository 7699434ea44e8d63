"""`assay land`: ready reviews merged into main one at a time, each verified on the very commit it lands as.

Two reviews that are each green alone can break main together. The lander holds a claim of its own
(`assay.landing`: a lease, an epoch, fencing, expired by the sweep like any claim) and, for each ready review
whose brief waits on it, most urgent first: merges its head into main's tip in the cache, runs the brief's verify
rows, and those of every brief merged into main before it (main's rows), on that merge commit, journals the
evidence on the brief, and pushes main, the review's merged record and a renewal of the landing claim in one
atomic push under leases. Main moved meanwhile: the review is merged and verified again on the new tip. A review
that no longer merges cleanly, or whose rows fail on the merge, is not landed: its brief is woken for a new round
with the reason as its agent's feedback, once per (main, head); offered again unchanged on the same main, it is
blocked for a person. Where reviews are refs (a plain forge); on GitHub every such review goes into main's
merge queue instead, whose merge groups run the verify rows before anything merges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from assay.core import custody, signals
from assay.core.briefs import Brief, VerifyRow
from assay.core.claims import Claim, Claims, holder_life
from assay.core.envs import scrubbed_env
from assay.core.forge.base import Review, Reviews
from assay.core.forge.plain import PlainReviews, PreparedMerge
from assay.core.git import Signature
from assay.core.journal import append_as_person, read_log
from assay.core.lives import life_state
from assay.core.records import LANDING_CLAIM, MAIN_REF, WORK_BRANCH_PREFIX, WORK_BRANCH_REF_PREFIX, JournalEntry, chain
from assay.core.records.recordtype import dataclass, field
from assay.desk.queue import read_snapshot
from assay.desk.verify import landed_briefs, run_row
from assay.errors import (
    AssayError,
    ClaimLost,
    Conflict,
    Fenced,
    IllegalReviewChange,
    MergeConflict,
    NoReview,
    UsageError,
)

LANDING = LANDING_CLAIM
BASE_LEASE_S = 300  # the landing claim's lease beyond the time limits of the rows it runs next
TRIES = 5  # merges of one review tried again because main moved under it


@dataclass
class Landed:
    """What `land` did with one review: `landed` (main's new commit), `woken` for a new round, `blocked` for a
    person (it failed on this main again, unchanged), or `skipped`."""

    brief: str
    outcome: str
    detail: str
    commit: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {"brief": self.brief, "outcome": self.outcome, "detail": self.detail, "commit": self.commit,
                "rows": [{k: r[k] for k in ("row", "brief", "passed", "exit_code")} for r in self.rows]}


def land(claims: Claims, reviews: Reviews, state_dir: Path, by: str, only: Sequence[str] = (),
         echo: Callable[[str], None] = lambda _: None) -> list[Landed]:
    """Land every ready review waiting on its merge (or those of `only`), one at a time; see the module."""
    if not isinstance(reviews, PlainReviews):
        return _queue(claims, reviews, by, only, echo)
    lander = _Lander(claims, reviews, state_dir, by, echo)
    if not lander.look(only):
        return []  # nothing waits to land: no claim taken, nothing written
    lander.claim = _take(claims, by)
    try:
        lander.look(only)  # again, under the claim: another lander may have landed some meanwhile
        return lander.run()
    finally:
        _release(claims, by, lander.claim)


def _queue(claims: Claims, reviews: Reviews, by: str, only: Sequence[str],
           echo: Callable[[str], None]) -> list[Landed]:
    """On GitHub: every ready review waiting on its merge goes into main's merge queue (each once), where the verify
    rows run on the queue's merge group (`verify.yml` on `merge_group`) before it merges."""
    if not reviews.merge_queue():
        raise UsageError("`assay land` on GitHub goes through main's merge queue, and main has none",
                         hint="require a merge queue for main in a ruleset (its required check: assay verify)")
    snapshot = read_snapshot(claims)
    waiting = sorted(b for b, c in snapshot.claims.items() if c.record.state == "waiting"
                     and str((c.record.wait or {}).get("on", "")) in ("review", "merge") and (not only or b in only))
    out: list[Landed] = []
    for brief, review in sorted(reviews.peek_many(waiting).items()):
        if review.state != "ready":
            continue
        try:
            reviews.enqueue(brief, by)
        except AssayError as exc:  # refused (a thread waits, GitHub says no): said, and the others are queued
            out.append(Landed(brief, "skipped", exc.message))
            echo(f"{brief}: not queued: {exc.message}")
            continue
        out.append(Landed(brief, "queued", f"in main's merge queue at {review.record.head[:10]}"))
        echo(f"{brief}: queued at {review.record.head[:10]}; it merges once its checks pass on the merge group")
    return out


class _Checked(Exception):
    """The journal says the rows were run on this main already."""


def rows_on_main(claims: Claims, brief: Brief, main: str, head: str, tree: str, state_dir: Path,
                 by: str) -> tuple[str, str] | None:
    """Run `brief`'s verify rows, and those of every brief landed on main (from main's copy: they must hold after
    the merge too), on its branch (`head`) merged into a main that moved (`tree`, the clean merge), once per (brief,
    main) however many desks look: a `note` naming the main is journaled first (under a check that no other names
    it), the evidence after. The reason and the rows' output when a row fails; else None."""

    def once(entries: list[JournalEntry]) -> None:
        if any(e.kind == "note" and ((e.data or {}).get("main_verify") or {}).get("main") == main for e in entries):
            raise _Checked()

    try:
        append_as_person(claims, brief.id, "note", {"main_verify": {"main": main, "head": head}}, by, check=once)
    except _Checked:
        return None
    git = claims.git
    commit = git.write_commit(tree, [main, head], f"Merge {WORK_BRANCH_PREFIX}{brief.id} into main (a check)\n",
                              Signature.of(by), 0)
    path = state_dir / "land" / "on-main" / brief.id
    with git.clean_checkout(path, commit):
        evidence = [{"brief": b.id, **run_row(row, path, row.timeout_s, {**scrubbed_env(), **dict(b.env)})}
                    for b in [brief, *landed_briefs(main, path, brief.id)] for row in b.verify]
    if not evidence:
        return None
    passed = all(r["passed"] for r in evidence)
    append_as_person(claims, brief.id, "note", {"land": {
        "main": main, "head": head, "commit": commit, "passed": passed, "on": "main moved",
        "rows": [{k: r.get(k) for k in ("brief", "row", "command", "exit_code", "passed", "tail")} for r in evidence]}},
        by)
    if passed:
        return None
    failed = [r for r in evidence if not r["passed"]]
    summary = "; ".join(f"{r['brief']}/{r['row']} exited {r['exit_code']}" for r in failed)
    said = "\n\n".join(f"{r['brief']}/{r['row']} exited {r['exit_code']} (expected {r['expect_exit']}):\n{r['tail']}"
                        for r in failed)
    return (f"the verify rows fail on the branch merged into it: {summary}; merge main into the branch and make them "
            "pass", said)

def _take(claims: Claims, by: str) -> Claim:
    """The landing claim; taken over from a lander whose process ended on this host (killed mid-pass), else
    ClaimLost while another lander holds it (its lease, expired by the sweep, ends a lander that died elsewhere)."""
    try:
        return claims.claim(LANDING, by, BASE_LEASE_S, require_brief=False)
    except ClaimLost as lost:
        life = holder_life(lost.holder)
        if life is None or life_state(life) != "dead" or lost.desk != by:
            raise
        return claims.claim(LANDING, by, BASE_LEASE_S, singleton=True, require_brief=False)  # a takeover, by CAS


def _release(claims: Claims, by: str, claim: Claim) -> None:
    try:
        claims.release(LANDING, by, reason="landing pass ended", epoch=claim.record.epoch)
    except Conflict:
        pass  # expired meanwhile (the pass outlived its lease): nothing of ours to release


class _Lander:
    def __init__(self, claims: Claims, reviews: PlainReviews, state_dir: Path, by: str,
                 echo: Callable[[str], None]) -> None:
        self.claims, self.reviews, self.by, self.echo = claims, reviews, by, echo
        self.checkout = state_dir / "land" / "checkout"
        self.claim: Claim | None = None
        self.landed_rows: list[tuple[str, VerifyRow]] = []  # rows of the briefs merged into main: they must hold
        self.order: list[str] = []
        self.briefs: dict[str, Brief] = {}

    def look(self, only: Sequence[str]) -> list[str]:
        """The ready reviews whose briefs wait on them (of `only`, if given), most urgent first."""
        snapshot = read_snapshot(self.claims)
        waiting = {b for b, c in snapshot.claims.items() if c.record.state == "waiting"}
        found = [r for r in self.reviews.list() if isinstance(r, Review)]
        ready = [r.brief for r in found if r.state == "ready" and r.brief in waiting and (not only or r.brief in only)]
        unknown = sorted(set(only) - {r.brief for r in found})
        if unknown:
            raise UsageError(f"no review to land for {', '.join(unknown)}", hint="`assay review list` lists them")
        self.order = sorted(ready, key=lambda b: (snapshot.briefs[b].priority if b in snapshot.briefs else 9, b))
        self.briefs = snapshot.briefs
        self.landed_rows = [(r.brief, row) for r in found if r.state == "merged" and r.brief in snapshot.briefs
                            for row in snapshot.briefs[r.brief].verify]  # main's rows: they must hold after
        return self.order

    def run(self) -> list[Landed]:
        out = []
        for brief_id in self.order:
            brief = self.briefs.get(brief_id)
            if brief is None:
                out.append(Landed(brief_id, "skipped", "its brief is not on main"))
                continue
            result = self._one(brief)
            self.echo(f"{brief_id}: {result.outcome}: {result.detail}")
            out.append(result)
        return out

    def _one(self, brief: Brief) -> Landed:
        for _ in range(TRIES):
            try:
                merge = self.reviews.prepare_merge(brief.id, self.by)
            except MergeConflict:
                return self._conflict(brief)
            except (IllegalReviewChange, NoReview) as exc:
                return Landed(brief.id, "skipped", exc.message)
            except chain.Moved:
                continue
            epoch = self._epoch(brief.id)
            judged = self._judged(brief.id, epoch, merge.main, merge.head)
            if judged is not None:  # this very head on this very main failed before, and its round changed nothing
                return self._block(brief, merge.main, merge.head, judged)
            rows = self._verify(brief, merge)
            failed = [r for r in rows if not r["passed"]]
            if failed:
                said = "\n\n".join(f"{r['brief']}/{r['row']} exited {r['exit_code']} (expected {r['expect_exit']}):"
                                   f"\n{r['tail']}" for r in failed)
                summary = "; ".join(f"{r['brief']}/{r['row']} exited {r['exit_code']}" for r in failed)
                return self._round(brief, epoch, merge.main, merge.head, f"the verify rows fail on its merge into "
                                   f"main at {merge.main[:10]}: {summary}", said, rows)
            assert self.claim is not None
            record, renewal = self.claims.transition_update(self.claim, "renew", desk=self.by,
                                                            epoch=self.claim.record.epoch)
            try:
                self.reviews.push_merge(merge, [renewal])
            except chain.Moved:
                self._refresh()
                continue  # main (or the landing claim) moved: merge and verify again on what is there now
            self.claim = Claim(record, renewal.new)
            self.landed_rows += [(brief.id, row) for row in brief.verify]
            return Landed(brief.id, "landed", f"main at {merge.commit[:10]}, verified on that commit", merge.commit,
                          rows)
        return Landed(brief.id, "skipped", f"main kept moving under it ({TRIES} tries); land it again")

    def _conflict(self, brief: Brief) -> Landed:
        """Its branch no longer merges into main: journaled like a failed verification, then a round, or a block
        when the same head conflicts with the same main after its round."""
        branch = WORK_BRANCH_REF_PREFIX + brief.id
        refs = self.reviews.git.ls_remote(MAIN_REF, branch)
        main, head = refs.get(MAIN_REF, ""), refs.get(branch, "")
        epoch = self._epoch(brief.id)
        judged = self._judged(brief.id, epoch, main, head)
        if judged is not None:
            return self._block(brief, main, head, judged)
        self._note(brief.id, {"main": main, "head": head, "commit": "", "passed": False, "conflict": True,
                              "rows": []})
        return self._round(brief, epoch, main, head, "its branch no longer merges cleanly into main: merge main into "
                           "it (or rebase onto it) and resolve the conflicts, then verify again", "")

    def _epoch(self, brief: str) -> int:
        current = self.claims.read(brief)
        return current.record.epoch if current else 0

    def _judged(self, brief: str, epoch: int, main: str, head: str) -> dict[str, Any] | None:
        """The land note of an earlier pass that found this head failing on this main under this claim epoch, and
        the round it started: a second look at the same tips after that round is for a person. A note without its
        round (the lander died between the two) is not: the round is started again."""
        entries = read_log(self.claims.git, brief).entries
        if f"land:{epoch}:{main}:{head}" not in signals.consumed(entries):
            return None
        for e in reversed(entries):
            land = (e.data or {}).get("land") if e.kind == "note" else None
            if isinstance(land, dict) and land.get("main") == main and land.get("head") == head:
                return land if land.get("passed") is False else None
        return None

    def _block(self, brief: Brief, main: str, head: str, judged: dict[str, Any]) -> Landed:
        """A head that failed on this main before, offered again unchanged after its round: a person's turn."""
        failed = ", ".join(f"{r.get('brief')}/{r.get('row')}" for r in judged.get("rows", []) if not r.get("passed"))
        what = "conflicts with" if judged.get("conflict") else f"fails {failed} on its merge into"
        reason = (f"its head {head[:10]} {what} main at {main[:10]}, again after a new round: a person decides "
                  "(change the brief, or close the review)")
        current = self.claims.read(brief.id)
        if current is None or current.record.state != "waiting":
            return Landed(brief.id, "skipped", reason)
        self._refresh()  # a lander that lost its claim blocks nothing
        try:
            custody.block(self.claims, brief.id, current.record.desk, current.record.epoch, reason, by=self.by)
        except Conflict as exc:
            return Landed(brief.id, "skipped", f"{reason} ({exc.message})")
        return Landed(brief.id, "blocked", reason)

    def _refresh(self) -> None:
        """Re-read the landing claim (Fenced if it is no longer ours)."""
        assert self.claim is not None
        current = self.claims.read(LANDING)
        if current is None or current.record.epoch != self.claim.record.epoch or not current.record.live:
            raise Fenced(LANDING, self.by, self.claim.record.epoch, "the landing claim was taken or expired")
        self.claim = current

    def _verify(self, brief: Brief, merge: PreparedMerge) -> list[dict[str, Any]]:
        """Run the rows at the merge commit, in a clean checkout; journal the evidence on the brief first."""
        rows = [(brief.id, r) for r in brief.verify] + [(b, r) for b, r in self.landed_rows if b != brief.id]
        self._renew(sum(r.timeout_s for _, r in rows))
        env = {**scrubbed_env(), **dict(brief.env)}
        evidence = []
        with self.reviews.git.clean_checkout(self.checkout, merge.commit):
            for owner, row in rows:
                started = time.monotonic()
                result = run_row(row, self.checkout, row.timeout_s, env)
                evidence.append({"brief": owner, **result, "duration_ms": int((time.monotonic() - started) * 1000)})
        self._note(brief.id, {"main": merge.main, "head": merge.head, "commit": merge.commit,
                              "passed": all(r["passed"] for r in evidence),
                              "rows": [{k: r[k] for k in ("brief", "row", "command", "exit_code", "passed",
                                                          "duration_ms", "tail")} for r in evidence]})
        return evidence

    def _note(self, brief: str, land: dict[str, Any]) -> None:
        self._refresh()  # a lander that lost its claim journals nothing
        append_as_person(self.claims, brief, "note", {"land": land}, self.by)

    def _renew(self, seconds: int) -> None:
        assert self.claim is not None
        self.claim = self.claims.renew(LANDING, self.by, epoch=self.claim.record.epoch,
                                       lease_s=min(BASE_LEASE_S + seconds, 7 * 24 * 3600))

    def _round(self, brief: Brief, epoch: int, main: str, head: str, reason: str, said: str,
               rows: list[dict[str, Any]] | None = None) -> Landed:
        self._refresh()  # a lander that lost its claim wakes nothing
        # the round merges this main into the branch before its agent runs: a conflict or a row that fails only
        # with main's latest work is the agent's to resolve, with both in its worktree
        settled = signals.new_round(self.claims, brief.id, f"land:{epoch}:{main}:{head}", reason, said, self.by,
                                    {"main": main})
        done = settled.did[-1] if settled.did else ""
        return Landed(brief.id, "woken" if settled.woken else "skipped", f"{reason} ({done})", "", rows or [])
