"""`assay desk run`: from a ready brief to a draft review with verify evidence, as durable steps.

One pass: sync (main and every claim); settle this desk's waiting briefs
(merged -> done, closed -> abandoned, a passed time -> woken); resume this
desk's orphaned claims; then claim the next ready brief and work it:

    branch (idempotent) -> worktree -> review (idempotent)
    -> [agent (idempotent) -> push (idempotent, fenced) -> verify (safe)] x attempts
    -> ready (idempotent) -> claim waits on the review

Everything that matters is journaled, so a desk killed at any point is
restarted and carries on from the forge.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from assay.agent import agent_env
from assay.briefs import Brief, Problem, briefs_on_main
from assay.claims import Claim, Claims, holder_life, new_holder
from assay.deskspec import DeskSpec
from assay.errors import AssayError, Conflict, ForgeError, ForgeRefused, NeedsPerson, RecordInvalid
from assay.forge.base import IllegalReviewChange, Reviews
from assay.git import ForgeGit, RefUpdate, Signature, redact, strip_credentials
from assay.journal import Fenced
from assay.lives import life_state
from assay.records import CLAIMS_PREFIX, MAIN_REF, TOMBSTONES, ClaimRecord, parse_iso
from assay.steps import Session, open_session

Echo = Callable[[str], None]
TAIL = 4000
REFUSALS = 3  # passes in a row that the forge refuses a brief's writes before the desk blocks it
MAX_REST_S = 300.0  # the longest a desk leaves a troubled brief alone before trying it again


@dataclass
class Board:
    """What one sync saw: main, its briefs, and every claim record."""

    main: str
    briefs: dict[str, Brief]
    claims: dict[str, Claim]
    problems: list[Problem] = field(default_factory=list)
    invalid: dict[str, RecordInvalid] = field(default_factory=dict)  # brief -> why its claim record is junk

    def state(self, brief: str) -> str | None:
        claim = self.claims.get(brief)
        return claim.record.state if claim else None

    def ready(self, brief: Brief) -> bool:
        """Unclaimed (or released), its claim record readable, and every dependency done."""
        if brief.id in self.invalid or self.state(brief.id) not in (None, *TOMBSTONES):
            return False
        return all(self.state(dep) == "done" for dep in brief.depends_on)


@dataclass
class DeskReport:
    worked: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)


def sync(git: ForgeGit, claims: Claims) -> Board:
    view = claims.sync()
    if not view.main:
        raise AssayError("the forge has no main branch", hint="push the repository's main to the forge first")
    git.ensure_objects({**view.tips, MAIN_REF: view.main})
    briefs, problems = briefs_on_main(git, view.main)
    loaded: dict[str, Claim] = {}
    invalid: dict[str, RecordInvalid] = {}
    for ref, sha in view.tips.items():
        try:
            loaded[ref.removeprefix(CLAIMS_PREFIX)] = claims.load(ref, sha)
        except RecordInvalid as exc:  # junk is a finding: that brief is left alone, every other one is worked
            invalid[ref.removeprefix(CLAIMS_PREFIX)] = exc
    return Board(view.main, {b.id: b for b in briefs}, loaded, problems, invalid)


class Desk:
    """One desk process. Receives its ports; owns no state that the forge does not have."""

    def __init__(self, git: ForgeGit, claims: Claims, reviews: Reviews, spec: DeskSpec, state_dir: Path,
                 echo: Echo = print, clock: Callable[[], float] = time.time) -> None:
        self.git, self.claims, self.reviews, self.spec = git, claims, reviews, spec
        self.state_dir = state_dir
        self.echo = echo
        self.clock = clock
        self.holder = new_holder(spec.name)
        self.poll_s = 5.0
        self._agent: subprocess.Popen[str] | None = None
        self._told: set[str] = set()  # findings already reported
        self._trouble: dict[str, list[float]] = {}  # brief -> [times in a row, resting until (monotonic)]

    # -- the loop -------------------------------------------------------------------------------

    def run(self, once: bool = False, max_briefs: int | None = None, poll_s: float = 5.0) -> DeskReport:
        report = DeskReport()
        self.poll_s = poll_s
        while max_briefs is None or len(report.worked) < max_briefs:
            try:
                board = sync(self.git, self.claims)
                self._report_findings(board)
                progressed = self._settle_waiting(board, report)
                skip = self._resting() | (set(report.worked) if once else set())
                brief, claim = self._next(board, skip)
            except ForgeError as exc:
                if once:
                    raise
                self.echo(f"{self.spec.name}: the forge cannot be read now ({exc.message}); trying again")
                time.sleep(poll_s)  # a long-running desk outlives a forge outage
                continue
            if brief is not None and claim is not None:
                report.worked.append(brief.id)
                report.outcomes[brief.id] = self.work(board, brief, claim)
                continue
            if once and not progressed:
                break
            if not progressed:
                time.sleep(poll_s)  # nothing to do: poll the forge again later
        return report

    def _tell_once(self, finding: str) -> None:
        if finding not in self._told:
            self._told.add(finding)
            self.echo(f"{self.spec.name}: {finding}")

    def _report_findings(self, board: Board) -> None:
        """Broken briefs and junk claim records are skipped, never silently."""
        for problem in board.problems:
            self._tell_once(f"skipping a brief on main: {problem}")
        for brief_id, exc in sorted(board.invalid.items()):
            self._tell_once(f"finding: leaving {brief_id} alone: {exc.message}")

    def _rest(self, brief_id: str) -> int:
        """Leave `brief_id` alone for a while (longer each time in a row); returns how many times in a row."""
        trouble = self._trouble.setdefault(brief_id, [0, 0.0])
        trouble[0] += 1
        trouble[1] = time.monotonic() + min(self.poll_s * 2 ** trouble[0], MAX_REST_S)
        return int(trouble[0])

    def _resting(self) -> set[str]:
        now = time.monotonic()
        return {brief_id for brief_id, (_, until) in self._trouble.items() if until > now}

    def _mine(self, record: ClaimRecord) -> bool:
        return record.desk == self.spec.name

    def _settle_waiting(self, board: Board, report: DeskReport) -> bool:
        """Waiting briefs of this desk whose condition the forge now shows as met."""
        progressed = False
        for brief_id, claim in sorted(board.claims.items()):
            r = claim.record
            if r.state != "waiting" or not self._mine(r):
                continue
            try:
                progressed = self._settle_one(brief_id, r, report) or progressed
            except Conflict as exc:  # another process of this desk, or a person, settled it first
                self.echo(f"{self.spec.name}: {brief_id} settled elsewhere: {exc.message}")
            except RecordInvalid as exc:  # a junk review: leave this brief waiting, settle the others
                self._tell_once(f"finding: cannot settle {brief_id}: {exc.message}")
        return progressed

    def _settle_one(self, brief_id: str, r: ClaimRecord, report: DeskReport) -> bool:
        on = str((r.wait or {}).get("on", ""))
        if on in ("review", "merge"):
            review = self.reviews.get(brief_id)
            state = review.record.state if review else "missing"
            if state == "merged":
                self.claims.release(brief_id, r.desk, outcome="done", reason="review merged", epoch=r.epoch)
                self.echo(f"{self.spec.name}: {brief_id} merged -> done")
                report.outcomes[brief_id] = "done"
                return True
            if state == "closed":
                report.outcomes[brief_id] = self._closed_by_person(brief_id, r.epoch, "the review was closed")
                return True
        elif on.startswith("time:") and self.clock() >= parse_iso(on[5:]).timestamp():
            self.claims.change(brief_id, "wake", desk=r.desk, epoch=r.epoch)
            return True
        return False

    def _orphaned(self, holder: str) -> bool:
        return holder != self.holder and _dead_here(holder)

    def _closed_by_person(self, brief_id: str, epoch: int, why: str) -> str:
        """A person closed the review: block the brief rather than redo it; they decide what comes next."""
        reason = f"{why}; release the claim to have it redone, or remove the brief from main"
        self.claims.change(brief_id, "block", desk=self.spec.name, epoch=epoch, reason=reason)
        self.echo(f"{self.spec.name}: {brief_id} blocked: {why}")
        return "blocked"

    def _next(self, board: Board, skip: set[str]) -> tuple[Brief | None, Claim | None]:
        """This desk's orphaned or woken claims first, then the most urgent ready brief (not in `skip`)."""
        for brief_id, claim in sorted(board.claims.items()):
            r = claim.record
            if r.state != "held" or not self._mine(r) or brief_id not in board.briefs or brief_id in skip:
                continue
            if r.holder == self.holder:
                return board.briefs[brief_id], claim  # woken, or left over from this process
            if self.spec.singleton or self._orphaned(r.holder):
                try:
                    taken = self.claims.claim(brief_id, self.spec.name, self.spec.lease_s, singleton=True,
                                              holder=self.holder)
                except (Conflict, RecordInvalid):
                    continue
                self.echo(f"{self.spec.name}: took over {brief_id} from {r.holder} (epoch {taken.record.epoch})")
                return board.briefs[brief_id], taken
        ready = sorted((b for b in board.briefs.values()
                        if self.spec.takes(b) and board.ready(b) and b.id not in skip),
                       key=lambda b: (b.priority, b.id))
        for brief in ready:
            try:
                claim = self.claims.claim(brief.id, self.spec.name, self.spec.lease_s, holder=self.holder)
            except Conflict:
                continue  # another desk won it: try the next one
            except RecordInvalid as exc:  # junk appeared since the sync
                self._tell_once(f"finding: leaving {brief.id} alone: {exc.message}")
                continue
            self.echo(f"{self.spec.name}: claimed {brief.id} (epoch {claim.record.epoch})")
            return brief, claim
        return None, None

    # -- one brief ------------------------------------------------------------------------------

    def work(self, board: Board, brief: Brief, claim: Claim) -> str:
        epoch = claim.record.epoch
        session: Session | None = None
        try:
            session = open_session(self.claims, brief.id, self.spec.name, epoch, max_attempts=self.spec.attempts)
            session.begin_run()
            outcome = self._work(session, board, brief, epoch)
            self._trouble.pop(brief.id, None)
            return outcome
        except RecordInvalid as exc:  # junk on the forge: a finding; the desk works on the rest meanwhile
            self._rest(brief.id)
            self.echo(f"{self.spec.name}: finding: {brief.id} paused: {exc.message}")
            if session is not None:
                session.stop_run(f"paused: {exc.message}")
            return "paused"
        except ForgeRefused as exc:
            return self._refused(brief.id, epoch, exc)
        except NeedsPerson as exc:
            self.echo(f"{self.spec.name}: {brief.id} needs a person: {exc.message}")
            return "blocked"
        except IllegalReviewChange as exc:  # a person closed the review while the desk worked
            return self._closed_by_person(brief.id, epoch, exc.message)
        except Conflict as exc:
            self.echo(f"{self.spec.name}: lost {brief.id}: {exc.message}")
            return "lost"
        except ForgeError as exc:  # the journal knows how far it got; the next pass resumes from there
            self._rest(brief.id)
            self.echo(f"{self.spec.name}: {brief.id} interrupted by the forge: {exc.message}")
            return "interrupted"

    def _refused(self, brief_id: str, epoch: int, exc: ForgeRefused) -> str:
        """The forge refuses this brief's writes: back off, and after `REFUSALS` in a row block it for a person."""
        count = self._rest(brief_id)
        if count < REFUSALS:
            self.echo(f"{self.spec.name}: {brief_id} interrupted ({count} of {REFUSALS}): {exc.message}")
            return "interrupted"
        reason = f"the forge refused this brief's writes {count} times in a row: {exc.message} ({exc.hint})"
        try:
            self.claims.block(brief_id, self.spec.name, epoch, reason)
        except AssayError as again:
            self._trouble[brief_id][1] = math.inf  # nothing can be written for it: leave it to a person
            self.echo(f"{self.spec.name}: {brief_id} left for a person: {exc.message} ({exc.hint}); "
                      f"blocking it failed too: {again.message}")
            return "interrupted"
        self.echo(f"{self.spec.name}: {brief_id} blocked: {reason}")
        return "blocked"

    def _work(self, session: Session, board: Board, brief: Brief, epoch: int) -> str:
        branch_ref = f"refs/heads/assay/{brief.id}"
        head = session.step("branch", lambda key: self._ensure_branch(session, branch_ref, board.main),
                            policy="idempotent")
        worktree = self.state_dir / "worktrees" / self.spec.name / brief.id
        tip = self.git.ls_remote(branch_ref).get(branch_ref) or head  # work goes on from the branch as it is now
        self.git.ensure_objects({branch_ref: tip})
        self.git.worktree(worktree, tip)
        session.step("review", lambda key: self._open_review(brief, head), policy="idempotent")
        feedback = ""
        for attempt in range(1, self.spec.attempts + 1):
            prompt = self._prompt(session, brief, feedback)
            agent = session.step("agent", partial(self._run_agent, brief, epoch, attempt, prompt, worktree),
                                 input={"attempt": attempt}, policy="idempotent")  # intent on the forge first
            head = session.step("push", lambda key: self._push(session, brief, epoch, worktree, branch_ref),
                                input={"attempt": attempt}, policy="idempotent")
            verdict = session.step("verify", partial(self._verify, session, brief, head),
                                   input={"attempt": attempt, "head": head}, policy="safe")
            if verdict["passed"] and agent["exit_code"] == 0:
                break
            feedback = f"Attempt {attempt} did not pass: agent exit {agent['exit_code']}; " + verdict["summary"]
            self.echo(f"{self.spec.name}: {brief.id} attempt {attempt} failed: {verdict['summary']}")
        else:
            reason = f"{self.spec.attempts} attempts failed verification"
            session.note(reason, sync=True)
            self.claims.change(brief.id, "block", desk=self.spec.name, epoch=epoch, reason=reason)
            self.echo(f"{self.spec.name}: {brief.id} blocked: {reason}")
            return "blocked"
        session.step("ready", lambda key: self._mark_ready(session, brief, head), input={"head": head},
                     policy="idempotent")
        session.end_run()
        session.journal.add("wait", sync=True, data={"on": "review"})
        self.claims.change(brief.id, "wait", desk=self.spec.name, epoch=epoch, wait={"on": "review"})
        self.echo(f"{self.spec.name}: {brief.id} verified at {head[:10]}; review ready; waiting for merge")
        return "waiting"

    def _ensure_branch(self, session: Session, branch_ref: str, main: str) -> str:
        """Adopt the work branch if the forge has it; otherwise create it at main (fenced)."""
        tip = self.git.ls_remote(branch_ref).get(branch_ref)
        if tip:
            return tip
        session.journal.add("note", sync=True, data={"branch": "created", "at_commit": main},
                            refs=[RefUpdate(branch_ref, main)])
        return main

    def _open_review(self, brief: Brief, head: str) -> str:
        return self.reviews.open(brief.id, f"assay/{brief.id}", brief.title, head).record.state

    def _mark_ready(self, session: Session, brief: Brief, head: str) -> str:
        """Mark the review ready in the same atomic push as a journal entry: a fenced desk cannot.

        A review that a person merged meanwhile (the desk died after marking it ready, say) is
        left as it is: the claim waits on it and the next pass settles it as done.
        """
        for _ in range(3):
            try:
                update = self.reviews.ready_update(brief.id, head)
            except IllegalReviewChange as exc:
                if exc.state == "merged":
                    session.note(f"the review was merged by a person before it was marked ready at {head[:10]}")
                    return "merged"
                raise
            if update is None:
                return "ready"
            try:
                session.journal.add("note", sync=True, data={"review": "ready", "head": head}, refs=[update])
                return "ready"
            except Fenced:
                raise
            except Conflict:
                continue  # the review moved (a comment, say): prepare again on its new tip
        raise Conflict(f"the review of {brief.id!r} kept changing; not marked ready")

    def _prompt(self, session: Session, brief: Brief, feedback: str) -> str:
        steering = [str((e.data or {}).get("text", "")) for e in session.journal.entries if e.kind == "steer"]
        parts = [f"# {brief.title}", "", brief.body, ""]
        if brief.verify:
            parts += ["## Verify rows (run by Assay from main's copy of this brief)", ""]
            parts += [f"- {row.id}: `{row.run}` (expects exit {row.expect_exit})" for row in brief.verify] + [""]
        if feedback:
            parts += ["## Feedback", "", feedback, ""]
        parts += ["## Steering", "", *steering]
        return "\n".join(parts) + "\n"

    def _run_agent(self, brief: Brief, epoch: int, attempt: int, prompt: str, worktree: Path,
                   key: str) -> dict[str, Any]:
        run_id = uuid.uuid4().hex[:12]
        prompt_file = self.state_dir / "prompts" / f"{brief.id}-{epoch}-{attempt}.md"
        prompt_file.parent.mkdir(parents=True, exist_ok=True)
        prompt_file.write_text(prompt, encoding="utf-8")
        values = {"prompt": prompt, "prompt_file": str(prompt_file), "brief": brief.id, "title": brief.title,
                  "worktree": str(worktree)}
        argv = [_fill(part, values) for part in self.spec.command]
        if argv[0] == "python":
            argv[0] = sys.executable  # the scripted agent runs on this interpreter
        env = agent_env(self.spec.env_allow, {
            "ASSAY_FORGE": strip_credentials(self.git.url), "ASSAY_BRIEF": brief.id, "ASSAY_DESK": self.spec.name,
            "ASSAY_EPOCH": str(epoch), "ASSAY_RUN": run_id, "ASSAY_ATTEMPT": str(attempt),
            "ASSAY_PROMPT_FILE": str(prompt_file)})
        self.echo(f"{self.spec.name}: {brief.id} agent attempt {attempt} (run {run_id})")
        started = time.monotonic()
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(brief.id, epoch, stop), daemon=True)
        tail = ""
        try:
            proc = subprocess.Popen(argv, cwd=worktree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, preexec_fn=_DIE_WITH_PARENT)
            self._agent = proc
            beat.start()  # after the fork: no thread runs while the child is set up
            assert proc.stdout is not None
            for line in proc.stdout:
                self.echo(f"  {brief.id} | {line.rstrip()}")
                tail = (tail + line)[-TAIL:]
            code = proc.wait()
        except OSError as exc:
            code, tail = 127, f"cannot start the agent {argv[0]!r}: {exc.strerror}"
            self.echo(f"{self.spec.name}: {tail}")
        finally:
            stop.set()
            if beat.is_alive():
                beat.join()
        return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": tail,
                "run": run_id}

    def _heartbeat(self, brief: str, epoch: int, stop: threading.Event) -> None:
        """Renew the lease while the agent works (its own port: the main one is busy)."""
        claims = Claims(ForgeGit(self.git.url, self.git.cache.parent))
        last_ok = time.monotonic()
        while not stop.wait(self.spec.heartbeat_s):
            try:
                claims.renew(brief, self.spec.name, epoch=epoch)
                last_ok = time.monotonic()
                continue
            except Conflict as exc:
                if self._still_ours(claims, brief, epoch):
                    continue  # lost a race with our own journal appends, not the claim
                why = f"fenced: {exc.message}"
            except AssayError as exc:
                if time.monotonic() - last_ok < self.spec.lease_s:
                    self.echo(f"{self.spec.name}: heartbeat for {brief} failed, will retry: {exc.message}")
                    continue
                why = f"no renewal for a whole lease ({self.spec.lease_s}s): {exc.message}"
            self.echo(f"{self.spec.name}: stopping the agent on {brief}: {why}")
            if self._agent is not None and self._agent.poll() is None:
                self._agent.kill()  # a desk that lost its claim stops working on its own
            break
        claims.git.close()

    def _still_ours(self, claims: Claims, brief: str, epoch: int) -> bool:
        try:
            current = claims.read(brief)
        except AssayError:
            return True  # cannot tell now: the lease rule decides later
        return current is not None and current.record.state in ("held", "waiting") \
            and current.record.epoch == epoch and current.record.desk == self.spec.name

    def _push(self, session: Session, brief: Brief, epoch: int, worktree: Path, branch_ref: str) -> str:
        """Commit what the agent left and push the branch, atomically with a journal entry (fenced)."""
        repo = self.git.worktree(worktree, "HEAD")
        message = f"{brief.title}\n\nAssay-Brief: {brief.id}\nAssay-Epoch: {epoch}\n"
        repo.commit_all(message, author=Signature.of(self.spec.name))
        head = repo.head()
        tip = self.git.ls_remote(branch_ref).get(branch_ref)
        if tip and tip != head:
            self.git.ensure_objects({branch_ref: tip})
            if not self.git.is_ancestor(tip, head):
                raise Conflict(f"{branch_ref} has commits that the worktree of {brief.id!r} lacks; not overwriting",
                               hint=f"merge {branch_ref} into the worktree at {worktree}, then run the desk again")
        if tip != head:
            session.journal.add("note", sync=True, data={"pushed": head},
                                refs=[RefUpdate(branch_ref, head, tip or "0" * 40)])
        return head

    def _verify(self, session: Session, brief: Brief, head: str, key: str) -> dict[str, Any]:
        """Run the verify rows of main's brief on a clean checkout of the pushed commit; journal the evidence.

        Never in the agent's worktree: what is judged is exactly what was pushed.
        """
        worktree = self.state_dir / "verify" / self.spec.name / brief.id
        clean = self.git.worktree(worktree, head)
        clean.git("checkout", "-q", "--force", "--detach", head)
        clean.git("clean", "-q", "-ffdx")
        failures = []
        for row in brief.verify:
            started = time.monotonic()
            try:
                proc = subprocess.run(row.run, shell=True, cwd=worktree, capture_output=True,
                                      timeout=min(row.timeout_s, self.spec.verify_timeout_s),
                                      env=agent_env(self.spec.env_allow, {}))
                code, output = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as exc:
                code, output = -1, (exc.stdout or b"") + b"\n(timed out)"
            passed = code == row.expect_exit
            session.journal.add("verify", sync=False, data={
                "row": row.id, "command": row.run, "head": head, "exit_code": code, "expect_exit": row.expect_exit,
                "passed": passed, "duration_ms": int((time.monotonic() - started) * 1000),
                "output_sha256": hashlib.sha256(output).hexdigest(),
                "tail": output[-1000:].decode("utf-8", "replace")})
            if not passed:
                failures.append(f"{row.id} exited {code}, expected {row.expect_exit}")
        session.flush()
        return {"passed": not failures, "summary": "; ".join(failures) or "all verify rows passed"}


def _fill(template: str, values: dict[str, str]) -> str:
    """Substitute {placeholders} in one pass: text brought in by a value is never expanded again."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def _dead_here(holder: str) -> bool:
    """A holder on this host whose process life is over (gone, a zombie, or its pid reused): the claim is orphaned.

    An older holder without a start time that names this very process's pid
    (but, being another holder, an earlier life: a restarted container's pid 1,
    say) is over too.
    """
    life = holder_life(holder)
    if life is None:
        return False
    if life.pid == os.getpid() and life.start is None and life.host == os.uname().nodename:
        return True
    return life_state(life) == "dead"


def _death_signal() -> Callable[[], None] | None:
    """A preexec function making the agent die with its desk (Linux), set up before any fork."""
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_pdeathsig() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a killed desk leaves no agent working unfenced
    return set_pdeathsig


_DIE_WITH_PARENT = _death_signal()


def run_desk(forge: str | None, name: str, state_dir: Path | None, *, once: bool = False,
             max_briefs: int | None = None, poll_s: float = 5.0, echo: Echo = print) -> DeskReport:
    """Wire a desk to its forge and run it."""
    from assay.config import open_claims, state_dir_for
    from assay.deskspec import load_desk
    from assay.forge.plain import PlainReviews

    claims = open_claims(forge)
    spec = load_desk(claims.git, claims.sync().main, name)
    desk = Desk(claims.git, claims, PlainReviews(claims.git), spec, state_dir_for(claims.git.url, state_dir), echo)
    echo(f"{name}: desk started on {redact(claims.git.url)} ({'one pass' if once else f'polling every {poll_s:g}s'})")
    return desk.run(once=once, max_briefs=max_briefs, poll_s=poll_s)
