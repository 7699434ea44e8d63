"""`assay desk run`: the loop that picks work from the queue and hands each brief to `work.py`.

One pass: sweep the forge when a sweep is due (at start, then once a heartbeat); read
the queue; settle this desk's waiting briefs (merged -> done, closed -> blocked for a
person, a passed time -> woken); resume this desk's orphaned claims; then claim the next
ready brief and work it. Junk on the forge is a finding and a forge that refuses a
brief's writes backs the brief off; neither stops the desk from working on everything else.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.core import custody, landing, pushgroup, signals, stops
from assay.core.briefs import BRIEFS_DIR, Brief
from assay.core.claims import Claim, Claims, holder_life, new_holder
from assay.core.credentials import redact
from assay.core.deskspec import DeskSpec
from assay.core.envs import agent_env
from assay.core.forge.base import Review, Reviews, note_threads
from assay.core.git import ForgeGit
from assay.core.journal import read_log
from assay.core.lives import life_state, this_life
from assay.core.records import CLAIMS_PREFIX, ClaimRecord, claim_ref, decode_entry, journal_ref, parse_iso, recordtype
from assay.core.records.recordtype import dataclass, field
from assay.core.scan import Scan, scan
from assay.core.steps import Session, open_session
from assay.desk.land import rows_on_main
from assay.desk.queue import Snapshot, read_snapshot
from assay.desk.verify import on_main
from assay.desk.work import BriefWork
from assay.errors import (
    AgentCannotStart,
    AssayError,
    Cancelled,
    ClaimLost,
    Conflict,
    ForgeError,
    ForgeRefused,
    IllegalReviewChange,
    NeedsPerson,
    NoReview,
    Queued,
    RecordInvalid,
    Throttled,
)
from assay.observe.sweep import sweep

if TYPE_CHECKING:
    from assay.config import Ports

Echo = Callable[[str], None]
REFUSALS = 3  # passes in a row that the forge refuses a brief's writes before the desk blocks it
SWEEP_HELD_S = 600.0  # a desk of the host sweeping longer than this stops no other desk's sweep
MAX_REST_S = 300.0  # the longest a desk leaves a troubled brief alone before trying it again
IDLE_MAX_S = 120.0  # the longest an idle desk waits between looks at the forge
MAX_THROTTLED_S = 3720.0  # the longest a desk waits before it looks again when GitHub's limits ask for a wait
WAKE = "wake"  # in the state folder: touched by the host's supervisor when the forge moves (`supervisor.py`)
WAKE_LOOK_S = 0.2  # how often an idle desk looks at it
NUDGED_LOOK_S = 5.0  # how often an idle desk that is a thread looks at it: its host's watcher wakes it (`stops.nudge`)
IDLE = "idle"  # in the state folder: a file named by the pid of each desk waiting for the wake file, its time
# the time its last look at the forge began


@dataclass
class DeskReport:
    worked: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)

    def exit_code(self) -> int:
        """What the pass says to whoever runs it (docs/architecture.md, exit codes): 1 when the forge interrupted
        a brief, 5 when a brief now needs a person, else 0."""
        if "interrupted" in self.outcomes.values():
            return ForgeError.code
        if "blocked" in self.outcomes.values():
            return NeedsPerson.code
        return 0


class Desk:
    """One desk process. Receives its ports; owns no state that the forge does not have."""

    def __init__(self, git: ForgeGit, claims: Claims, reviews: Reviews, spec: DeskSpec, state_dir: Path,
                 echo: Echo = print, clock: Callable[[], float] = time.time, first: Scan | None = None,
                 slot: str = "") -> None:
        self.git, self.claims, self.reviews, self.spec = git, claims, reviews, spec
        self.slot = slot  # "i/N": this desk is its supervisor's i-th of N (`_spread`)
        self.state_dir = state_dir
        self.echo = echo
        self.clock = clock
        self.holder = new_holder(spec.name)
        self._run = f"desk:{spec.name}"  # how this desk's entries between runs name their writer
        self.poll_s = 5.0
        self._told: set[str] = set()  # findings already reported
        self._trouble: dict[str, list[float]] = {}  # brief -> [times in a row, resting until (monotonic)]
        self._refusals: dict[str, int] = {}  # brief -> passes in a row the forge refused its writes
        self._swept_at: float | None = None  # when this desk last swept (monotonic)
        self._first = first  # the scan its start made (the desk file's read): its first sweep's
        self._signals_at: float | None = None  # when this desk last read its reviews' signals (monotonic)
        self._stale_main = ""  # the main whose ready reviews this process last checked
        self._looked_at = 0.0  # when this desk's last pass began to read the forge (wall clock)
        self._steer_looked: set[str] = set()  # waiting claim tips whose journals were looked at for steering
        self._done_when_at: dict[str, tuple[str, bool]] = {}  # waiting brief -> (main its done_when ran on, passed)
        self._paused: tuple[float, Throttled] | None = None  # GitHub's limits asked for a wait: until when (monotonic)
        self._pause_said = 0.0  # the end of the longest such wait said (monotonic)
        git.lock_notes = lambda text: echo(f"{spec.name}: {text}")  # a stale ref lock it removed from the forge
        # between briefs a wait GitHub asks for renews nothing, and one past half a lease is a pause (`_pause`)
        reviews.hold(lambda: None, spec.lease_s / 2, spec.heartbeat_s)

    def _woken(self, wait_s: float) -> bool:
        """Wait up to `wait_s`; True as soon as the host's supervisor says the forge moved (it touches the state
        folder's `wake` file when main, a claim or a journal moves), so an idle desk looks at once. A desk that is a
        thread waits for its host's watcher to wake it (`stops.nudge`), looking at the file only now and then; a
        desk process looks at it five times a second."""
        wake = self.state_dir / WAKE
        since = _mtime(wake)
        deadline = time.monotonic() + wait_s
        idle = self.state_dir / IDLE / str(this_life().pid)  # the supervisor watches the forge while one is here
        with contextlib.suppress(OSError):
            idle.parent.mkdir(parents=True, exist_ok=True)
            idle.touch()
            os.utime(idle, (self._looked_at, self._looked_at))  # when its last look began
        try:
            while (left := deadline - time.monotonic()) > 0:
                fd = stops.waker()  # a desk that is a thread: drained first, so a nudge after the look below wakes it
                if fd is None:
                    stops.sleep(min(WAKE_LOOK_S, left))
                else:
                    stops.check()
                    if _mtime(wake) == since:
                        stops.readable([fd], min(NUDGED_LOOK_S, left))
                    stops.check()
                if _mtime(wake) != since:
                    return True
            return False
        finally:
            with contextlib.suppress(OSError):
                idle.unlink()

    # -- the loop -------------------------------------------------------------------------------

    def run(self, once: bool = False, max_briefs: int | None = None, poll_s: float = 5.0) -> DeskReport:
        report = DeskReport()
        self.poll_s = poll_s
        idle = 0  # passes in a row that found nothing to do
        again: set[str] = set()  # worked this pass, and woken for a new round as they began to wait
        passes = 0
        while max_briefs is None or len(report.worked) < max_briefs:
            # what the supervisor's wake for an idle desk is judged against: before the sweep, whose listing this
            # pass may read; the first pass reads the listing the desk made as it started (unknown: 0)
            self._looked_at = time.time() if passes else 0.0
            passes += 1
            stops.check()  # a desk that is a thread: a stop its host handed it ends it here, between passes
            self._sweep_if_due()  # (git alone: also while GitHub's limits ask for a wait)
            try:
                self._still_paused()  # GitHub's limits asked for a wait: nothing asked of it, no brief claimed
                snapshot = read_snapshot(self.claims, lazy_footprints=True)
                self._report_findings(snapshot)
                progressed = self._settle_waiting(snapshot, report)
                progressed = self._wake_stale(snapshot) or progressed
                skip = self._resting() | (set(report.worked) - again if once else set())
                brief, claim = self._next(snapshot, skip)
                self._report_findings(snapshot)  # again: the choice may have read the footprints, and junk there
            except Throttled as exc:  # GitHub's limits (or the fleet's budget) ask for a wait: no call before it
                if once:
                    raise
                wait = max(poll_s, min(exc.wait_s, MAX_THROTTLED_S))
                self._pause(exc, wait)
                stops.sleep(min(wait, max(poll_s, self.spec.heartbeat_s)))  # sweeping each heartbeat meanwhile
                continue
            except ForgeError as exc:
                if once:
                    raise
                what = "refused a write" if isinstance(exc, ForgeRefused) else "cannot be read now"
                self.echo(f"{self.spec.name}: the forge {what} ({exc.message}); trying again")
                stops.sleep(poll_s)  # a long-running desk outlives a forge outage
                continue
            if brief is not None and claim is not None:
                idle = 0
                report.worked.append(brief.id)
                again.discard(brief.id)
                report.outcomes[brief.id] = self.work(snapshot, brief, claim)
                if self._woken_as_it_waits(brief.id):
                    again.add(brief.id)
                continue
            if once and not progressed:
                break
            # nothing to do: poll the forge again later, less often the longer nothing comes; or at once when the
            # host's supervisor saw the forge move (`woken`)
            woken = not progressed and self._woken(idle_wait(poll_s, idle, self.spec.heartbeat_s))
            idle = 0 if progressed or woken else idle + 1
        return report

    def _pause(self, exc: Throttled, wait_s: float) -> None:
        """GitHub's limits (or the fleet's budget) ask for no call before `wait_s` from now: said once a wait, and
        kept, so each pass meanwhile only sweeps (`_still_paused`)."""
        until = time.monotonic() + wait_s
        if until > self._pause_said + self.poll_s:
            self.echo(f"{self.spec.name}: {exc.message}; looking again in {wait_s:.0f}s")
            self._pause_said = until
        if self._paused is None or until > self._paused[0]:
            self._paused = (until, exc)

    def _still_paused(self) -> None:
        """Raise `Throttled` while the wait GitHub's limits asked lasts (of a pass, or of a paused run): the limits
        are the token's, so a call now lengthens the wait, and the next brief's run would pause at its first call to
        GitHub and hand its claim back, a claim and a journal written for nothing."""
        if self._paused is None:
            return
        until, exc = self._paused
        left = until - time.monotonic()
        if left <= 0:
            self._paused = None
            return
        raise Throttled(exc.message, exc.hint, wait_s=left)

    def _sweep_if_due(self) -> None:
        """Sweep the forge when the desk starts and then once a heartbeat, so that recovery needs nothing
        else running: a dead desk's claim on any machine is expired from forge evidence once its lease
        has passed, and this desk can take the brief. One ref advertisement serves the sweep and the pass's
        look; a fleet sweeps about once a heartbeat, not once per desk: observations another sweeper recorded
        within the last heartbeat stand. A sweep that fails is a finding, never a stop."""
        now = time.monotonic()
        if self._swept_at is not None and now - self._swept_at < self.spec.heartbeat_s:
            return
        self._swept_at = now
        with _host_sweep(self.state_dir) as alone:
            if not alone:  # another desk of this host sweeps now: the fleet's sweep, not to be made twice at once
                if self._first is not None:
                    self.claims.keep(self._first)  # the start's read serves this pass's look, as the sweep's would
                    self._first = None
                return
            self._sweep()

    def _sweep(self) -> None:
        try:
            found, self._first = self._first or scan(self.git), None  # every kind: the sweep's, and the queue
            if self._swept_lately(found):
                self.claims.keep(found)
                return
            # liveness only: pull requests are read by `assay sweep` (one cache per repository, not one per desk)
            swept = sweep(self.claims, now=self.clock(), desk=self.spec.name, found=found)
        except AssayError as exc:
            self._tell_once(f"finding: the sweep failed: {exc.message}")
            return
        for f in swept.findings:
            if f.action:
                self.echo(f"{self.spec.name}: sweep: {f.kind} {f.brief}: {f.action}")
            elif f.new:
                self._tell_once(f"finding: {f.kind} {f.brief}: {f.detail}")
        if not any(f.action for f in swept.findings):
            self.claims.keep(found)  # nothing written to a claim: the look sees what the sweep saw

    def _swept_lately(self, found: Scan) -> bool:
        """Whether a sweeper recorded observations less than a heartbeat ago (by this desk's clock)."""
        if found.tip("sweeper") is None:
            return False
        found.fetch("sweeper")
        at = found.observations().observations.at
        return bool(at) and 0 <= self.clock() - parse_iso(at).timestamp() < self.spec.heartbeat_s

    def _tell_once(self, finding: str) -> None:
        if finding not in self._told:
            self._told.add(finding)
            self.echo(f"{self.spec.name}: {finding}")

    def _report_findings(self, snapshot: Snapshot) -> None:
        """Broken briefs and junk claim records are skipped, never silently."""
        for problem in snapshot.problems:  # a brief's, or a record the briefs are weighed by (junk footprints)
            self._tell_once(f"skipping a brief on main: {problem}" if problem.path.split("/")[0] == BRIEFS_DIR
                            else f"finding: {problem}")
        for brief_id, exc in sorted(snapshot.invalid.items()):
            self._tell_once(f"finding: leaving {brief_id} alone: {exc.message}")

    def _rest(self, brief_id: str, at_least_s: float = 0.0) -> int:
        """Leave `brief_id` alone for a while (longer each time in a row, and `at_least_s`, up to an hour and the
        clocks' slack: a wait GitHub asks for); returns how many times in a row."""
        trouble = self._trouble.setdefault(brief_id, [0, 0.0])
        trouble[0] += 1
        trouble[1] = time.monotonic() + max(min(self.poll_s * 2 ** trouble[0], MAX_REST_S),
                                            min(at_least_s, MAX_THROTTLED_S))
        return int(trouble[0])

    def _resting(self) -> set[str]:
        now = time.monotonic()
        return {brief_id for brief_id, (_, until) in self._trouble.items() if until > now}

    def _mine(self, record: ClaimRecord) -> bool:
        return record.desk == self.spec.name

    def _tends(self, record: ClaimRecord) -> bool:
        """Whether this process looks after a waiting claim between the sweeps (steering no run took, a review
        main left stale): one it holds, or one whose holder on this host is dead. A claim whose desk lives
        elsewhere is left to that desk: every desk looking at every claim would cost the forge desks x briefs."""
        return record.holder == self.holder or _dead_here(record.holder)

    def _settle_waiting(self, snapshot: Snapshot, report: DeskReport) -> bool:
        """Waiting briefs of this desk whose condition the forge now shows as met."""
        if not self.reviews.refs_backed and self._signals_due():
            return self._settle_signals(snapshot, report)
        progressed = False
        waiting = {b: c.record for b, c in sorted(snapshot.claims.items())
                   if c.record.state == "waiting" and self._mine(c.record) and b not in self._resting()}
        on_review = [b for b, r in waiting.items() if str((r.wait or {}).get("on", "")) in ("review", "merge")]
        # one read for all of them: on GitHub one list; review refs as the pass's look saw them. A brief left out
        # (a junk review ref) is read alone, so that the finding is about its brief alone
        reviews = self.reviews.peek_many(on_review, snapshot.reviews) if on_review else {}
        for brief_id, r in waiting.items():
            try:
                if self._steered_while_waiting(brief_id, snapshot.claims[brief_id]):
                    progressed = True
                    continue
                looked = brief_id in reviews or not self.reviews.refs_backed
                if self._landed_meanwhile(snapshot, brief_id, r, reviews.get(brief_id), report):
                    progressed = True
                    continue
                if self._noted(brief_id, reviews.get(brief_id)):
                    progressed = True
                    continue
                progressed = self._settle_one(brief_id, r, report, reviews.get(brief_id), looked) or progressed
            except Conflict as exc:  # another process of this desk, or a person, settled it first
                self.echo(f"{self.spec.name}: {brief_id} settled elsewhere: {exc.message}")
            except RecordInvalid as exc:  # a junk review: leave this brief waiting, settle the others
                self._tell_once(f"finding: cannot settle {brief_id}: {exc.message}")
            except ForgeRefused as exc:  # this brief's refs refuse writes: back off it, settle the others
                self._rest(brief_id)
                self.echo(f"{self.spec.name}: cannot settle {brief_id} now: {exc.message} ({exc.hint})")
        return progressed

    def _noted(self, brief_id: str, review: Review | None) -> bool:
        """Where reviews are refs: a review note that waits on an answer wakes its waiting brief for a round
        (`signals.settle`, once per note); True when it did."""
        if review is None or review.state not in ("draft", "ready") or not note_threads(review.record):
            return False
        settled = signals.settle(self.claims, self.reviews, brief_id, {"event": "desk-pass"}, self.spec.name,
                                 states=("waiting",))
        for line in settled.did:
            self.echo(f"{self.spec.name}: {brief_id}: {line}")
        return settled.woken

    def _wake_stale(self, snapshot: Snapshot) -> bool:
        """Once per main this process sees: ready reviews that no longer merge cleanly into it are woken for a new
        round, each once per (brief, main) however many desks look (`landing.wake_stale`). Those this process
        tends (`_tends`); the sweep looks at every one, once a heartbeat for the fleet."""
        if not snapshot.main or snapshot.main == self._stale_main:
            return False
        waiting = [b for b, c in snapshot.claims.items() if c.record.state == "waiting"
                   and str((c.record.wait or {}).get("on", "")) in ("review", "merge") and self._tends(c.record)]
        try:
            woken = landing.wake_stale(self.claims, self.reviews, waiting, self.spec.name,
                                       rows=lambda b, main, head, tree: self._rows_on_main(snapshot, b, main, head,
                                                                                           tree))
        except AssayError as exc:  # the next main, or the sweep, looks again
            self.echo(f"{self.spec.name}: ready reviews not checked against main: {exc.message}")
            return False
        self._stale_main = snapshot.main
        for w in woken:
            self.echo(f"{self.spec.name}: {w.brief}: {w.did[-1] if w.did else 'woken'}")
        return bool(woken)

    def _rows_on_main(self, snapshot: Snapshot, brief_id: str, main: str, head: str,
                      tree: str) -> tuple[str, str] | None:
        brief = snapshot.briefs.get(brief_id)
        if brief is None or not brief.verify:
            return None
        return rows_on_main(self.claims, brief, main, head, tree, self.state_dir, self.spec.name)

    def _landed_meanwhile(self, snapshot: Snapshot, brief_id: str, r: ClaimRecord, review: Review | None,
                          report: DeskReport) -> bool:
        """A brief waiting on its open review whose `done_when:` rows pass on main (its work landed by another
        route): its review is closed and it is settled `done`, naming main's commit. The rows run once per main
        (each run journaled, so a desk that starts again does not run them again on the same main); a merged
        review is left to settle as merged. A review closed after the rows passed (its desk killed before it
        settled the claim) is settled so too, rather than blocked."""
        brief = snapshot.briefs.get(brief_id)
        if brief is None or not brief.done_when or str((r.wait or {}).get("on", "")) not in ("review", "merge") \
                or review is None or review.record.state == "merged":
            return False
        checked = self._done_when_at.get(brief_id) or self._last_done_when(brief_id, r.epoch)
        if review.record.state == "closed" and not (checked and checked[1]):
            return False  # closed by a person: `_settle_one` blocks it
        if checked is None or (not checked[1] and checked[0] != snapshot.main):  # main moved since they ran
            checkout = self.state_dir / "verify" / self.spec.name / brief_id
            env = agent_env(self.spec.env_allow, {}, extra={**dict(self.spec.env), **dict(brief.env)})
            verdict = on_main(self.git, brief, snapshot.main, checkout, self.spec.verify_timeout_s, env)
            custody.note_done_when(self.claims, brief_id, verdict, self.spec.name, self._run)
            checked = (snapshot.main, bool(verdict["passed"]))
        self._done_when_at[brief_id] = checked
        if not checked[1]:
            return False
        reason = custody.done_on_main_reason(checked[0])
        if review.record.state in ("draft", "ready"):
            try:
                self.reviews.close(brief_id, self.spec.name, reason)
            except IllegalReviewChange as exc:  # merged meanwhile: settled as merged; closed: settled so below
                if exc.state != "closed":
                    return False
        custody.release_on_main(self.claims, brief_id, self.spec.name, r.epoch,
                                self._verdict_of(brief_id, r.epoch), run=self._run)
        self._done_when_at.pop(brief_id, None)
        report.outcomes[brief_id] = "done"
        self.echo(f"{self.spec.name}: {brief_id} {reason} -> done; its review closed")
        return True

    def _done_when_checks(self, brief_id: str, epoch: int) -> list[dict[str, Any]]:
        """What this claim (`epoch`) journaled of its `done_when:` rows, oldest first: the check its desk made
        before the agent (the `done_when` step's result) and those made while it waited (`note_done_when`),
        each as {main, passed, …}."""
        out: list[dict[str, Any]] = []
        for e in read_log(self.git, brief_id).entries:
            data = e.data or {}
            if e.epoch != epoch:
                continue
            if e.kind == "note" and data.get("done_when") == custody.DONE_WHEN_CHECKED:
                out.append(dict(data))
            elif e.kind == "result" and e.step == "done_when" and e.status == "completed" \
                    and isinstance(data.get("output"), dict):
                out.append(dict(data["output"]))
        return out

    def _last_done_when(self, brief_id: str, epoch: int) -> tuple[str, bool] | None:
        """The main this brief's `done_when:` rows last ran on under this claim, and whether they passed."""
        checks = self._done_when_checks(brief_id, epoch)
        return (str(checks[-1].get("main", "")), bool(checks[-1].get("passed"))) if checks else None

    def _verdict_of(self, brief_id: str, epoch: int) -> dict[str, Any]:
        """The evidence of the last `done_when` check journaled for this claim."""
        checks = self._done_when_checks(brief_id, epoch)
        return checks[-1] if checks else {}

    def _steered_while_waiting(self, brief_id: str, claim: Claim) -> bool:
        """Once per tip of a waiting claim this process tends (`_tends`): steering that no run took wakes the brief
        for a round. It finds a `steer` stopped between its entry and its wake."""
        if claim.sha in self._steer_looked or str((claim.record.wait or {}).get("on", "")) not in custody.ROUND_WAITS:
            return False
        if not self._tends(claim.record):
            return False
        self._steer_looked.add(claim.sha)
        if custody.wake_for_steering(self.claims, brief_id, self.spec.name, self._run) is None:
            return False
        self.echo(f"{self.spec.name}: {brief_id}: steering that no run took; woken for a new round")
        return True

    def _signals_due(self) -> bool:
        now = time.monotonic()
        if self._signals_at is not None and now - self._signals_at < self.spec.heartbeat_s:
            return False
        self._signals_at = now
        return True

    def _settle_signals(self, snapshot: Snapshot, report: DeskReport) -> bool:
        """On GitHub, once a heartbeat: what people and CI did on the reviews of this desk's waiting and blocked
        briefs (`signals.settle`: requested changes, comment commands, merges, closes, finished checks)."""
        progressed = False
        for brief_id, claim in sorted(snapshot.claims.items()):
            r = claim.record
            if r.state not in ("waiting", "blocked") or not self._mine(r) or brief_id in self._resting():
                continue
            try:
                brief = snapshot.briefs.get(brief_id)
                if r.state == "waiting" and brief is not None and brief.done_when \
                        and self._done_when_at.get(brief_id) != (snapshot.main, False) \
                        and self._landed_meanwhile(snapshot, brief_id, r, self.reviews.peek(brief_id), report):
                    progressed = True
                    continue
                settled = signals.settle(self.claims, self.reviews, brief_id, {"event": "desk-pass"}, self.spec.name)
            except Conflict as exc:  # another process of this desk, or a person, settled it first
                self.echo(f"{self.spec.name}: {brief_id} settled elsewhere: {exc.message}")
                continue
            except RecordInvalid as exc:
                self._tell_once(f"finding: cannot settle {brief_id}: {exc.message}")
                continue
            except ForgeRefused as exc:
                self._rest(brief_id)
                self.echo(f"{self.spec.name}: cannot settle {brief_id} now: {exc.message} ({exc.hint})")
                continue
            for line in settled.did:
                self.echo(f"{self.spec.name}: {brief_id}: {line}")
            if settled.state != r.state:
                progressed = True
                if settled.state in ("done", "blocked"):
                    report.outcomes[brief_id] = settled.state
        return progressed

    def _woken_as_it_waits(self, brief_id: str) -> bool:
        """What people did while the brief was worked (changes requested, steering) is acted on as soon as it waits
        (docs/github.md), not at the next look: True when that woke it for a new round. Steering journaled while
        the wait was being pushed (so after the run's last look at the journal) wakes it here, on every forge."""
        try:
            if custody.wake_for_steering(self.claims, brief_id, self.spec.name, self._run,
                                         looked=self._steer_looked) is not None:
                self.echo(f"{self.spec.name}: {brief_id}: steering came as it began to wait; woken for a new round")
                return True
            if self.reviews.refs_backed:
                return self._noted(brief_id, self.reviews.peek(brief_id))
            settled = signals.settle(self.claims, self.reviews, brief_id, {"event": "desk-pass"}, self.spec.name,
                                     states=("waiting",))
        except AssayError as exc:  # the next look settles it
            self.echo(f"{self.spec.name}: cannot settle {brief_id} now: {exc.message}")
            return False
        for line in settled.did:
            self.echo(f"{self.spec.name}: {brief_id}: {line}")
        return settled.woken

    def _settle_one(self, brief_id: str, r: ClaimRecord, report: DeskReport, review: Review | None,
                    looked: bool) -> bool:
        if str((r.wait or {}).get("on", "")) in ("review", "merge") and not looked:
            review = self.reviews.peek(brief_id)
        met = custody.wait_met(r.wait, review.record if review else None, self.clock(),
                               lambda names: {n: custody.state_of(self.claims, n) for n in names})
        if met is None:
            return False
        action, why = met
        if action == "done":
            report.outcomes[brief_id] = self._done(brief_id, r.epoch, "review merged")
        elif action == "block":
            report.outcomes[brief_id] = self._closed_by_person(brief_id, r.epoch, why)
        else:
            custody.wake(self.claims, brief_id, by=self.spec.name, desk=r.desk, epoch=r.epoch, run=self._run)
        return True

    def _merged(self, brief_id: str) -> bool:
        """What the forge already shows comes before a block: a merged review means the work is done."""
        review = self.reviews.peek(brief_id)
        return review is not None and review.record.state == "merged"

    def _done(self, brief_id: str, epoch: int, reason: str) -> str:
        with pushgroup.unhurried():  # nobody waits on it: it goes with the host's next push that must go
            custody.release(self.claims, brief_id, self.spec.name, outcome="done", reason=reason, epoch=epoch,
                            run=self._run)
        self.echo(f"{self.spec.name}: {brief_id} merged -> done")
        return "done"

    def _orphaned(self, holder: str) -> bool:
        return holder != self.holder and _dead_here(holder)

    def _closed_by_person(self, brief_id: str, epoch: int, why: str) -> str:
        """A person closed the review: block the brief rather than redo it; they decide what comes next."""
        reason = f"{why}; release the claim to have it redone, or remove the brief from main"
        custody.block(self.claims, brief_id, self.spec.name, epoch, reason, run=self._run)
        self.echo(f"{self.spec.name}: {brief_id} blocked: {why}")
        return "blocked"

    def _next(self, snapshot: Snapshot, skip: set[str]) -> tuple[Brief | None, Claim | None]:
        """This desk's orphaned or woken claims first, then the most urgent ready brief (not in `skip`)."""
        for brief_id, claim in sorted(snapshot.claims.items()):
            r = claim.record
            if r.state != "held" or not self._mine(r) or brief_id not in snapshot.briefs or brief_id in skip:
                continue
            if r.holder == self.holder:
                return snapshot.briefs[brief_id], claim  # woken, or left over from this process
            if self.spec.singleton or self._orphaned(r.holder):
                stops.check()  # (a stop never comes after a claim it could have spared)
                try:
                    taken = self.claims.claim(brief_id, self.spec.name, self.spec.lease_s, singleton=True,
                                              holder=self.holder, taking_from=frozenset({"held"}))
                except ClaimLost as exc:  # its holder lives here, paused perhaps: its lease decides, not this desk
                    self._tell_once(f"leaving {brief_id} alone: {exc.message}; {exc.hint}")
                    continue
                except ForgeRefused as exc:
                    self._unclaimable(brief_id, exc)
                    continue
                except (Conflict, RecordInvalid):
                    continue
                self.echo(f"{self.spec.name}: took over {brief_id} from {r.holder} (epoch {taken.record.epoch})")
                return snapshot.briefs[brief_id], taken
        ready = sorted((b for b in snapshot.briefs.values()
                        if self.spec.takes(b) and snapshot.ready(b) and b.id not in skip),
                       key=lambda b: (b.priority, b.id))
        moved: set[str] = set()  # briefs whose claims moved since the snapshot, as a lost race showed
        for brief in _spread(ready, self.slot):
            if brief.id in moved:
                continue
            behind = snapshot.behind(brief)
            if behind:
                self._queued(brief.id, behind)
                continue
            stops.check()
            try:
                claim = self.claims.claim(brief.id, self.spec.name, self.spec.lease_s, holder=self.holder)
            except Queued as exc:  # a brief overlapping it was taken since the snapshot: the claim said no
                self._queued(brief.id, dict.fromkeys(exc.behind, "footprints overlap"))
                continue
            except Conflict:  # another desk won it: the snapshot is older than its claim, and perhaps others'
                moved |= self._moved_since(snapshot)
                continue
            except RecordInvalid as exc:  # junk appeared since the snapshot
                self._tell_once(f"finding: leaving {brief.id} alone: {exc.message}")
                continue
            except ForgeRefused as exc:
                self._unclaimable(brief.id, exc)
                continue
            self.echo(f"{self.spec.name}: claimed {brief.id} (epoch {claim.record.epoch})")
            return brief, claim
        return None, None

    def _moved_since(self, snapshot: Snapshot) -> set[str]:
        """The briefs whose claims moved (or appeared) since `snapshot`, by one listing of the claims: what a
        desk that lost a race skips, instead of pushing against each claim taken since it looked. Nothing where
        the forge cannot be read now (each claim is still its own check)."""
        try:
            tips = self.git.ls_remote(CLAIMS_PREFIX + "*")
        except ForgeError:
            return set()
        if self.claims.view is not None:
            self.claims.view.tips.update(tips)  # a claim's first try trusts the view: now this one
        seen = {claim_ref(b): c.sha for b, c in snapshot.claims.items()}
        return {ref.removeprefix(CLAIMS_PREFIX) for ref, sha in tips.items() if seen.get(ref) != sha}

    def _queued(self, brief_id: str, behind: dict[str, str]) -> None:
        """Say once per blocker set that a brief waits for the briefs whose footprints overlap its own."""
        said = ", ".join(f"{other} ({globs})" for other, globs in behind.items())
        self._tell_once(f"{brief_id} queued behind {said}")

    def _unclaimable(self, brief_id: str, exc: ForgeRefused) -> None:
        """The forge refuses to write this brief's claim (a ref lock a killed push left on a forge this desk cannot
        clean, say): say why and what a person must do, and leave the brief alone a while, longer each time in a
        row, working on the others meanwhile."""
        times = self._rest(brief_id)
        rest = self._trouble[brief_id][1] - time.monotonic()
        self.echo(f"{self.spec.name}: cannot claim {brief_id} ({times} time(s) in a row): {exc.message}; "
                  f"{exc.hint}; working on other briefs, {brief_id} again in {rest:.0f}s")
        if exc.lock is not None:  # on the brief's journal too, for the board and `assay journal`
            custody.note_locked(self.claims, brief_id, exc.lock, f"desk {self.spec.name}", self._run)

    # -- one brief ------------------------------------------------------------------------------

    def work(self, snapshot: Snapshot, brief: Brief, claim: Claim) -> str:
        """Work `brief` under `claim`; how the pass ended for it ("waiting", "lost", "interrupted", ...).

        Long: every way a brief's work can end (junk, a refusal, a person, a lost claim, GitHub's limits, a stop,
        a fault of the desk's own) is answered here, one clause each, in one place."""
        epoch = claim.record.epoch
        session: Session | None = None
        begun = False  # the run was counted (`begin_run`): only a counted run is ended early (a stop before it
        # would end the runs in a row that died before it, and spare a brief its block)
        try:
            with _stops_first():
                stops.check()  # a desk that is a thread: a stop handed to it as it claimed hands the brief back
                session = open_session(self.claims, brief.id, self.spec.name, epoch, max_attempts=self.spec.attempts)
                # a rate limit waited out while this brief is worked renews its claim meanwhile (a desk that lost
                # it stops before it writes); after, the waits of this desk renew nothing of it (`__init__`)
                with self.reviews.hold(partial(self._renew, session, brief.id, epoch), self.spec.lease_s / 2,
                                       self.spec.heartbeat_s):
                    if session.dying_runs() >= self.spec.attempts and self._merged(brief.id):
                        return self._done(brief.id, epoch, "review merged (its runs had died before they could see it)")
                    session.begin_run()
                    begun = True
                    outcome = self._work(session, snapshot, brief, epoch)
            self._trouble.pop(brief.id, None)
            self._refusals.pop(brief.id, None)
            return outcome
        except RecordInvalid as exc:  # junk on the forge: a finding; the desk works on the rest meanwhile
            self._rest(brief.id)
            self.echo(f"{self.spec.name}: finding: {brief.id} paused: {exc.message}")
            if session is not None and begun:
                session.stop_run(f"paused: {exc.message}")
            return "paused"
        except ForgeRefused as exc:
            return self._refused(brief.id, epoch, exc)
        except NeedsPerson as exc:
            self.echo(f"{self.spec.name}: {brief.id} needs a person: {exc.message}")
            return "blocked"
        except NoReview as exc:  # not there: not a person's act (a list that lags a write, say); look again later
            self._rest(brief.id)
            self.echo(f"{self.spec.name}: {brief.id} interrupted: {exc.message}; looking again later")
            return "interrupted"
        except IllegalReviewChange as exc:  # a person closed the review while the desk worked
            return self._closed_by_person(brief.id, epoch, exc.message)
        except AgentCannotStart as exc:  # not an attempt at the work: hand the brief back, and stop this desk
            if session is not None:
                session.stop_run(exc.message)
            custody.release(self.claims, brief.id, self.spec.name, reason=exc.message, epoch=epoch, run=self._run)
            self.echo(f"{self.spec.name}: released {brief.id}: {exc.message}")
            raise
        except Conflict as exc:
            self.echo(f"{self.spec.name}: lost {brief.id}: {exc.message}")
            return "lost"
        except Throttled as exc:  # a wait GitHub's limits ask for is no failed attempt
            return self._throttled(brief.id, epoch, session if begun else None, exc)
        except ForgeError as exc:  # the journal knows how far it got; the next pass resumes from there
            self._rest(brief.id)
            self.echo(f"{self.spec.name}: {brief.id} interrupted by the forge: {exc.message}")
            return "interrupted"
        except (KeyboardInterrupt, Cancelled) as stop:  # Ctrl-C, SIGTERM, SIGHUP: hand the brief back now rather
            self._hand_back(brief.id, epoch, session, _stopped_by(stop))  # than leave it held until its lease ends
            raise
        except AssayError:  # said by the command that ends with it (a claim fenced, junk): the claim is its own
            raise
        except Exception as fault:  # a fault of the desk's own (a full disk, a bug) ends it as a stop does
            if (stopping := self._faulted(brief.id, epoch, session, fault)) is not None:
                raise stopping from None
            raise

    def _renew(self, session: Session, brief_id: str, epoch: int) -> None:
        """Renew the claim (Fenced when it is lost): a heartbeat while a forge call waits."""
        session.journal.claims.renew(brief_id, self.spec.name, epoch=epoch)

    def _faulted(self, brief_id: str, epoch: int, session: Session | None,
                 fault: Exception) -> KeyboardInterrupt | Cancelled | None:
        """An unexpected error ends the desk as a stop does: the brief handed back at once, not held until its
        lease ends (a desk of another host would wait for it). The stop it was raised while handling (a pipe the
        same signal broke), if any: that stop ends the desk, not the error."""
        stopping = _stop_within(fault)
        self._hand_back(brief_id, epoch, session, _stopped_by(stopping) if stopping else f"ended by {_fault(fault)}")
        return stopping

    def _throttled(self, brief_id: str, epoch: int, session: Session | None, exc: Throttled) -> str:
        """GitHub's limits ask for a longer wait than the desk may hold its claim: the run (`session`, if counted)
        ends paused, not dead, the claim is handed back (nothing would renew it while the brief rests), and the
        brief is tried again after the wait."""
        why = f"paused: {exc.message}"
        if session is not None:
            session.stop_run(why)
        self._rest(brief_id, exc.wait_s)
        self._paused = (time.monotonic() + min(exc.wait_s, MAX_THROTTLED_S), exc)
        try:
            custody.release(self.claims, brief_id, self.spec.name, reason=why, epoch=epoch, run=self._run)
        except AssayError as again:  # its lease ends it
            why += f" (still held: {again.message})"
        self.echo(f"{self.spec.name}: {brief_id} {why}; trying again then")
        return "interrupted"

    def _hand_back(self, brief_id: str, epoch: int, session: Session | None, how: str) -> None:
        why = f"desk {self.spec.name} was {how}"
        try:
            if session is not None:
                session.stop_run(why)
            custody.release(self.claims, brief_id, self.spec.name, reason=why, epoch=epoch, run=self._run)
            self.echo(f"{self.spec.name}: released {brief_id} ({why}); the next desk resumes it from its journal")
        except (AssayError, KeyboardInterrupt, Cancelled) as exc:
            what = exc.message if isinstance(exc, AssayError) else "interrupted again"
            self.echo(f"{self.spec.name}: {brief_id} is still held ({what}): release it with "
                      f"`assay release {brief_id} --force --reason '...'`, or its lease ends it")

    def _refused(self, brief_id: str, epoch: int, exc: ForgeRefused) -> str:
        """The forge refuses this brief's writes: back off, and after `REFUSALS` in a row block it for a person."""
        self._rest(brief_id)
        # counted in this process, and from the forge too, so that passes of `desk run --once` add up: every
        # epoch since the journal's last entry is a pass whose writes the forge refused
        count = max(self._refusals.get(brief_id, 0) + 1, self._silent_epochs(brief_id, epoch))
        self._refusals[brief_id] = count
        if count < REFUSALS:
            self.echo(f"{self.spec.name}: {brief_id} interrupted ({count} of {REFUSALS}): {exc.message}")
            return "interrupted"
        reason = f"the forge refused this brief's writes {count} times in a row: {exc.message} ({exc.hint})"
        try:
            custody.block(self.claims, brief_id, self.spec.name, epoch, reason, run=self._run)
        except AssayError as again:
            self._trouble[brief_id][1] = time.monotonic() + MAX_REST_S  # nothing can be written: a person's turn
            self.echo(f"{self.spec.name}: {brief_id} left for a person: {exc.message} ({exc.hint}); "
                      f"blocking it failed too: {again.message}")
            return "interrupted"
        self.echo(f"{self.spec.name}: {brief_id} blocked: {reason}")
        return "blocked"

    def _silent_epochs(self, brief_id: str, epoch: int) -> int:
        """How many epochs, up to `epoch`, came after the last one that wrote to the brief's journal."""
        try:
            tip = self.git.ls_remote(journal_ref(brief_id)).get(journal_ref(brief_id))
            if tip is None:
                return epoch
            self.git.ensure_objects({journal_ref(brief_id): tip})
            text = (self.git.read_objects([f"{tip}:entries.jsonl"])[0] or b"").decode("utf-8", "replace")
            last = decode_entry(text.splitlines()[-1], journal_ref(brief_id))
        except (AssayError, IndexError):
            return 0
        return max(0, epoch - last.epoch)

    def _work(self, session: Session, snapshot: Snapshot, brief: Brief, epoch: int) -> str:
        return BriefWork(self.git, self.reviews, self.spec, self.state_dir, self.echo, session, brief,
                         epoch).run(snapshot.main)


def idle_wait(poll_s: float, idle: int, heartbeat_s: float) -> float:
    """How long an idle desk waits before it looks again: `poll_s`, doubled for each idle pass in a row, up to a
    heartbeat (the cadence at which it sweeps anyway) or `IDLE_MAX_S`, whichever is shorter. A pass is one ref
    advertisement (the sweep's read is the look's), so an idle desk reads the forge at most once every
    `IDLE_MAX_S` once it has backed off, not once every `poll_s`; the first look after work comes at once."""
    return min(poll_s * (1 << min(idle, 20)), max(poll_s, min(heartbeat_s, IDLE_MAX_S)))


@contextmanager
def _stops_first() -> Iterator[None]:
    """An error raised while a stop (Ctrl-C, SIGTERM, SIGHUP) was being handled (its step's end journaled through a
    git process the same signal ended, say) gives way to that stop: a desk told to stop never takes it for an
    interrupted pass and claims again."""
    try:
        yield
    except AssayError as exc:
        stop = _stop_within(exc)
        if stop is not None:
            raise stop from None
        raise


def _stop_within(exc: BaseException) -> KeyboardInterrupt | Cancelled | None:
    """The stop `exc` was raised while handling, if any (its context, or theirs)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, (KeyboardInterrupt, Cancelled)):
            return cause
        cause = cause.__context__
    return None


def _fault(fault: Exception) -> str:
    """An unexpected error, named for a release's reason (on the forge: masked, one line, short)."""
    said = " ".join(str(fault).split())
    return redact(f"{type(fault).__name__}: {said}" if said else type(fault).__name__)[:200]


def _stopped_by(stop: KeyboardInterrupt | Cancelled) -> str:
    """How the desk was stopped, for the release's reason: Ctrl-C, or the signal `entry.stop_as_interrupt` names (a
    step running then turns SIGTERM into Cancelled)."""
    if isinstance(stop, Cancelled):
        return "stopped by SIGTERM"
    name = str(stop.args[0]) if stop.args else ""
    return f"stopped by {name}" if name.startswith("SIG") else "interrupted (Ctrl-C)"


@contextmanager
def _host_sweep(state_dir: Path) -> Iterator[bool]:
    """Whether this desk is the only one of its host (its state folder) sweeping now: a lock (`flock`, released by
    the kernel when its holder dies) held while it sweeps, naming its holder. A forge slow to answer would otherwise
    see every desk whose sweep fell due meanwhile sweep at once, each reading every claim and racing to record the
    same observations. A holder that is stopped (SIGSTOP), or has held it past `SWEEP_HELD_S`, stops no sweep: the
    desk sweeps beside it (sweeps are compare-and-swap writes: two at once cost, never conflict). Where the lock
    cannot be made, the desk sweeps as ever."""
    import fcntl

    from assay.core.lives import is_stopped

    path = state_dir / "sweep.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            stopped = holder.isdigit() and is_stopped(int(holder))
            yield stopped or time.time() - _mtime(path) > SWEEP_HELD_S
            return
        with contextlib.suppress(OSError):  # who sweeps, and since when (its time); a full disk: said by none
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield True
    finally:
        os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return 0.0


def _dead_here(holder: str) -> bool:
    """A holder on this host whose process life is over (gone, a zombie, or its pid reused): the claim is orphaned.

    An older holder without a start time that names this very process's pid
    (but, being another holder, an earlier life: a restarted container's pid 1,
    say) is over too.
    """
    life = holder_life(holder)
    if life is None:
        return False
    if life.pid == this_life().pid and life.start is None and life.host == os.uname().nodename:
        return True
    return life_state(life) == "dead"


def run_desk(ports: Ports, name: str, state_dir: Path | None, *, once: bool = False,
             max_briefs: int | None = None, poll_s: float = 5.0, echo: Echo = print,
             singleton: bool = False, slot: str | None = None, sealed: bool = False) -> DeskReport:
    """Run desk `name` on the forge of `ports` (`singleton`: as if its definition said so), the `slot`-th desk of
    its supervisor (`ASSAY_DESK_SLOT` by default; `_spread`). `sealed`: the process's credentials were sealed
    already (a desk that is a thread: its host sealed them before any desk began)."""
    from assay.config import state_dir_for
    from assay.core.deskspec import load_desk
    from assay.desk import isolation
    from assay.desk.agent import preflight, protect_environment

    first = scan(ports.git)  # one read for the desk's file, its first sweep and its first look
    spec = load_desk(ports.git, first.main, name)
    if singleton:
        spec = recordtype.replace(spec, singleton=True)
    preflight(spec)  # before anything is claimed: an agent that cannot start is exit 2, the forge untouched
    protect_environment()  # its agent runs as the same user: it may not read this process's token
    desk = Desk(ports.git, ports.claims, ports.reviews, spec, state_dir_for(ports.git.url, state_dir), echo,
                first=first, slot=os.environ.get("ASSAY_DESK_SLOT", "") if slot is None else slot)
    # the token is read (the ports above): out of this process's environment and /proc
    unisolated = isolation.warning() if sealed else isolation.seal_desk()
    echo(f"{name}: desk started on {redact(ports.git.url)} ({'one pass' if once else f'polling every {poll_s:g}s'})")
    if unisolated:
        echo(f"{name}: {unisolated}")
    return desk.run(once=once, max_briefs=max_briefs, poll_s=poll_s)


def _spread(ready: list[Brief], slot: str) -> list[Brief]:
    """The ready briefs in the order this desk tries them: the most urgent first, and among equally urgent ones,
    a desk of a supervisor's N (`slot`: "i/N") starts at its own share of them, so a host's desks started together
    each claim a brief of their own instead of all racing for the first; where in its share is drawn each pass,
    so that the desks of several hosts race seldom too. So for each level of urgency, not the first alone: once
    the most urgent are taken, a fleet's idle desks would otherwise all try the next level's first briefs in the
    same order (at 1,000 desks, a brief's claim refused up to 13 times)."""
    index, _, count = slot.partition("/")
    if not ready or not index.isdecimal() or not count.isdecimal() or int(count) < 2:
        return ready
    spread: list[Brief] = []
    for _, level in itertools.groupby(ready, key=lambda b: b.priority):
        same = list(level)
        # anywhere in its share: the desks of other hosts, which have the same slots, start elsewhere in theirs
        start = min(len(same) - 1, int((int(index) + random.random()) * len(same) / int(count)))
        spread += same[start:] + same[:start]
    return spread
