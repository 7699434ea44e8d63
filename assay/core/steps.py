"""Durable steps: write the intent down, do the effect, write the result; replay after a crash.

A step's identity is (name, sha256 of its canonical JSON input); its ordinal is
its position among calls of that identity in one run. On recovery the program
runs again from the top and its k-th call of an identity meets the k-th
recorded call:

| policy     | completed                 | interrupted (intent, no result)                  |
|------------|---------------------------|--------------------------------------------------|
| safe       | recorded result returned  | re-run                                           |
| idempotent | recorded result returned  | re-run with the same idempotency key             |
| unsafe     | recorded result returned  | `outcome_unknown`; never re-run automatically    |

A call whose identity matches an interrupted intent is a repeat of it, in
whatever run it comes, unless the intent is an earlier run's later call and
this call's own (k-th) recorded call ended: that is replayed.
After `outcome_unknown` the first repeat is refused
(exit 4) and the refusal journaled; a second, deliberate call goes through.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from assay.core import stops
from assay.core.crash import crash_point
from assay.core.digests import sha256_hex
from assay.core.journal import INLINE_LIMIT, Draft, Journal, JournalLog
from assay.core.journal.index import counts_call, counts_value, run_event
from assay.core.lives import Life, await_end, life_state, this_life
from assay.core.outcomes import (
    DESK_STEPS,
    DID_NOT,
    HAPPENED,
    StepRunning,
    resolves,
    settle_fields,
    settle_target,
    settled,
    still_running,
    unknown_fields,
    verdict_of_exit,
)
from assay.core.records import NOT_JSON, POLICIES, JournalEntry, journal_ref
from assay.core.records.recordtype import dataclass
from assay.errors import (
    AssayError,
    Cancelled,
    HookRefused,
    NeedsPerson,
    OutcomeUnknown,
    RecordInvalid,
    Refused,
    ReplayMismatch,
    StepFailed,
    UsageError,
    unknown_message,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, NoReturn, Protocol, TypeVar

    from assay.core.claims import Claims

    T = TypeVar("T")
    ProbeRunner = Callable[[str, str], dict[str, Any]]  # (probe, the probed intent's key) -> the inspection's evidence

    class StepHooks(Protocol):
        """A desk's hooks around the steps it serves (`hooks:` in its definition)."""

        def before(self, step: str, policy: str, input: Any, key: str) -> dict[str, Any] | None:
            """Run before the step's intent is journaled: None to go on, else the evidence of a refusal."""

        def after(self, step: str, policy: str, key: str, status: str, result: Any) -> dict[str, Any] | None:
            """Run once the step's result is journaled: None, else the evidence of the hook's failure."""

CALL_MARKERS = frozenset({"intent", "refused"})
_STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_BEGUN: set[tuple[str, int, str]] = set()  # (brief, epoch, holder) of the runs this process began (`begin_run`)
DEFAULT_MAX_ATTEMPTS = 3
STRAY_WAIT_S = 10.0  # how long a recovery waits for a cut-off step's process, whose desk is gone, to end



def validate_step(name: str, policy: str) -> None:
    """A step's name and policy, checked before anything is read or written."""
    if not _STEP_NAME.fullmatch(name):
        raise UsageError(f"invalid step name {name!r}", hint="use 1-64 of A-Z a-z 0-9 . _ -, no '/'")
    if policy not in POLICIES:
        raise UsageError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")


def canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"step input must be JSON: {exc}") from None


def input_sha(value: Any) -> str:
    return sha256_hex(canonical(value).encode("utf-8"))


@dataclass
class Call:
    name: str
    sha: str
    ordinal: int
    policy: str
    input: Any
    writer: dict[str, Any] | None = None  # the process life running the effect, if not this process
    probe: str | None = None  # a shell command telling whether an unsafe effect happened (exit 0) or not (1)
    with_work: bool = False  # its result lands with the work its effect left in the worktree, or not at all


class Session:
    """Durable steps for one brief, one run. Receives its journal."""

    def __init__(self, journal: Journal, max_attempts: int = DEFAULT_MAX_ATTEMPTS, call_notes: bool = False) -> None:
        """`call_notes`: journal replays and resumes too, for runs made of many processes
        (`assay step run`), which count their calls from the journal; one process counts in memory."""
        self.journal = journal
        self.max_attempts = max_attempts
        self.call_notes = call_notes
        self.probe_runner: ProbeRunner | None = None  # runs a step's outcome probe, where set
        self.hooks: StepHooks | None = None  # the desk's before_step and after_step, where set
        self._calls: dict[tuple[str, str], int] = {}
        self._nondet_used = 0
        self._indexed = 0
        self._base = journal.base
        self._resolutions: dict[int, JournalEntry] = {}
        self._refusals: set[int] = set()
        self._by_identity: dict[tuple[str, str], list[JournalEntry]] = {}
        self._nondet: list[JournalEntry] = []
        self._base_calls: dict[tuple[str, str], list[JournalEntry]] = {}
        self._base_resolutions: dict[int, JournalEntry | None] = {}
        if journal.base is not None:  # what came before the entries in memory: asked of the index
            self._calls, self._nondet_used = journal.base.run_counts(journal.run)
        for e in journal.entries:  # calls this run already made (each `assay step run` is its own process)
            if e.run == journal.run:
                if counts_call(e):
                    self._calls[e.identity] = self._calls.get(e.identity, 0) + 1
                if counts_value(e):
                    self._nondet_used += 1

    # -- the index over the journal (kept up to date as the journal grows) -------------------
    # Entries in `journal.entries` are indexed here; those before them (`journal.base`, an index kept
    # in the forge's cache) are asked of it, one identity or intent at a time, and remembered.

    def _index(self) -> None:
        entries = self.journal.entries
        if self._indexed > len(entries) or self._base is not self.journal.base:  # read afresh: index again
            self._indexed, self._by_identity, self._resolutions, self._refusals, self._nondet = 0, {}, {}, set(), []
            self._base, self._base_calls, self._base_resolutions = self.journal.base, {}, {}
        for e in entries[self._indexed:]:
            resolved = resolves(e)
            if resolved is not None:
                self._resolutions[resolved] = e
            if e.intent is not None and e.kind == "refused":
                self._refusals.add(e.intent)
            if e.step is not None and e.kind in ("intent", "refused", "outcome_unknown"):
                self._by_identity.setdefault(e.identity, []).append(e)
            if e.kind == "nondeterminism":
                self._nondet.append(e)
        self._indexed = len(entries)

    def _calls_of(self, identity: tuple[str, str]) -> list[JournalEntry]:
        self._index()
        recent = self._by_identity.get(identity, [])
        if self._base is None:
            return recent
        if identity not in self._base_calls:
            self._base_calls[identity] = self._base.calls_of(identity)
        return [*self._base_calls[identity], *recent]

    def _resolution(self, intent: JournalEntry | int) -> JournalEntry | None:
        """The latest result or outcome_unknown of an intent (a settle comes after its outcome_unknown)."""
        seq = intent if isinstance(intent, int) else intent.seq
        self._index()
        found = self._resolutions.get(seq)  # a later entry resolves it again: the latest counts
        if found is not None or self._base is None:
            return found
        if seq not in self._base_resolutions:
            self._base_resolutions[seq] = self._base.resolution(seq)
        return self._base_resolutions[seq]

    def _unresolved(self) -> list[int]:
        """Intents with neither a result nor an outcome_unknown (`open_intents`, with the index's help)."""
        self._index()
        opened = self._base.open_intents() if self._base is not None else []
        opened += [e.seq for e in self.journal.entries if e.kind == "intent"]
        return [seq for seq in opened if seq not in self._resolutions]

    def _recorded_value(self, number: int) -> JournalEntry | None:
        """The `number`-th recorded clock or random value of the journal (from 0), if there is one."""
        self._index()
        before = self._base.totals()[0] if self._base is not None else 0
        if number < before and self._base is not None:
            return self._base.nondet(number)
        return self._nondet[number - before] if number - before < len(self._nondet) else None

    def _interrupted(self, identity: tuple[str, str]) -> JournalEntry | None:
        for e in self._calls_of(identity):
            if e.kind == "intent" and self._resolution(e) is None:
                return e
        return None

    def _ended(self, call: Call) -> bool:
        """Whether this call's own slot (an earlier run's intent at its identity and ordinal) completed or failed."""
        slot = self._slot(call)
        resolution = self._resolution(slot) if slot is not None and slot.kind == "intent" else None
        return resolution is not None and resolution.kind == "result" and resolution.status in ("completed", "failed")

    def _refused(self, intent: JournalEntry) -> bool:
        self._index()
        return intent.seq in self._refusals or (self._base is not None and self._base.refused(intent.seq))

    def _slot(self, call: Call) -> JournalEntry | None:
        """The latest earlier-run intent or refusal at this identity and ordinal."""
        found = None
        for e in self._calls_of((call.name, call.sha)):
            if e.kind in CALL_MARKERS and e.ordinal == call.ordinal and e.run != self.journal.run:
                found = e
        return found

    def _unrefused_unknown(self, identity: tuple[str, str]) -> JournalEntry | None:
        calls = self._calls_of(identity)
        for e in calls:
            if e.kind == "outcome_unknown":
                intent = next((i for i in calls if i.kind == "intent" and i.seq == e.intent), None)
                if intent is not None and not self._refused(intent) and not self._settled(intent.seq):
                    return intent
        return None

    def _entry(self, seq: int) -> JournalEntry | None:
        """Entry `seq`, from memory or the index."""
        found = next((e for e in self.journal.entries if e.seq == seq), None)
        return found if found is not None or self._base is None else self._base.entry(seq)

    def _happened(self, identity: tuple[str, str]) -> JournalEntry | None:
        """The settle of the latest intent of `identity`, if it says the step happened."""
        intents = [e for e in self._calls_of(identity) if e.kind == "intent"]
        verdict = self._settled(intents[-1].seq) if intents else None
        return verdict if verdict is not None and settled(verdict) == HAPPENED else None

    def _settled(self, intent: int) -> JournalEntry | None:
        """The settle of an intent's unknown outcome, if it has one."""
        found = self._resolution(intent)
        return found if found is not None and settled(found) else None

    # -- steps --------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[[str], T], input: Any = None, policy: str = "safe",
             reuse: bool = True, writer: dict[str, Any] | None = None, probe: str | None = None,
             rides: bool = False, lazy_result: bool = False, with_work: bool = False) -> T:
        """Run `fn(idempotency_key)` as a durable step, or return what it returned before.

        `rides`: the step's effect is a ref moved in a journal push of its own (`journal.add(..., refs=…)`), so its
        intent rides that push instead of one before it: the effect is still never on the forge without its
        intent, and a push is saved. `lazy_result`: the result rides the next push; a crash before it leaves the
        intent open, and the step (idempotent) is resumed with its key. Neither applies to unsafe steps.
        `with_work` (with `lazy_result`): the effect is files in the worktree that only the work's push carries (an
        agent's run): a stop before that push drops the result (`Journal.drop_unlanded_files`), so the step runs
        again rather than being replayed where those files are not.

        `writer`: the life (`lives.Life.to_data()`) of the process that runs the effect when it is
        not this one (an agent's `assay step run` served by its desk), so a repeat can tell if it runs.
        `probe`: for an unsafe step, a shell command that tells whether its effect happened (exit 0) or
        not (exit 1); once the step's writer is proven dead, the next reader runs it to settle the unknown.

        Long: the replay rule read top to bottom, first match wins: an interrupted intent (running, cut off,
        resumed; not an earlier run's later call's when this call's own slot ended), this call's slot (replayed,
        refused), a settled or unknown earlier call, else the step runs.
        """
        validate_step(name, policy)
        if (rides or lazy_result) and policy == "unsafe":
            raise UsageError("an unsafe step's intent and result are pushed on their own, before and after its effect")
        if probe is not None and policy != "unsafe":
            raise UsageError(f"--probe settles an unknown outcome, which only unsafe steps have, not {policy} ones")
        identity = (name, input_sha(input))
        call = Call(name, identity[1], self._calls.get(identity, 0), policy, input, writer, probe,
                    with_work and lazy_result)
        self._calls[identity] = call.ordinal + 1
        interrupted = self._interrupted(identity)
        if interrupted is not None and (interrupted.ordinal or 0) > call.ordinal \
                and interrupted.run != self.journal.run and (reuse or policy != "safe") and self._ended(call):
            interrupted = None  # an earlier run's later call of it was cut off: this one replays its own end below
        if interrupted is not None and still_running(interrupted) \
                and (interrupted.epoch == self.journal.epoch or interrupted.policy == "unsafe"):
            # an earlier epoch's safe or idempotent step is fenced, whatever its process still does: resumed here
            self._calls[identity] = call.ordinal  # not a call: nothing ran, nothing is replayed
            raise self._running(interrupted)
        if interrupted is not None:
            self._check_policy(interrupted, call)
            if interrupted.policy == "unsafe":
                verdict = self._cut_off(interrupted)
                if verdict is None:
                    return self._refuse(call, interrupted)
                if settled(verdict) == HAPPENED:
                    self._mark(call, "replay", verdict.seq)
                    replayed: T = self._replay(call, verdict)
                    return replayed
                # its probe found it did not happen: this call runs it, under its key if it is that very call
                return self._execute(call, fn, None, key=interrupted.key if interrupted.ordinal == call.ordinal
                                     else None)
            self._mark(call, "resume", interrupted.seq)
            return self._execute(call, fn, interrupted, rides, lazy_result)
        slot, again = self._slot(call), None
        if slot is not None and slot.kind == "intent":
            self._check_policy(slot, call)
            resolution = self._resolution(slot)
            assert resolution is not None  # no interrupted intent is left for this identity
            if resolution.kind == "result" and resolution.status in ("completed", "failed") \
                    and (reuse or policy != "safe"):
                self._mark(call, "replay", resolution.seq)
                replayed = self._replay(call, resolution)  # what `fn` returned then, read back as JSON
                return replayed
            if resolution.kind == "result" and str((resolution.data or {}).get("reason", "")).startswith(CUT_OFF):
                return self._execute(call, fn, None, rides, lazy_result, key=slot.key)  # its key, as a resume's
            if resolution.kind == "result" and resolution.status == "cancelled":
                # stopped (its effect may have begun) or settled as not having happened: if it runs again below, it
                # runs under the key its effect began with, so that an effect keyed by it is never made twice
                again = slot.key
            if resolution.kind == "outcome_unknown":
                if not self._refused(slot):
                    return self._refuse(call, slot)
                self._mark(call, "replay", resolution.seq)
                raise OutcomeUnknown(name)
        elif slot is not None:  # an earlier run was refused here: it replays as refused, unless since settled
            verdict = self._settled(slot.intent) if slot.intent is not None else None  # as having happened
            if verdict is not None and settled(verdict) == HAPPENED:
                self._mark(call, "replay", verdict.seq)
                replayed = self._replay(call, verdict)
                return replayed
            self._mark(call, "replay", slot.seq)
            raise OutcomeUnknown(name)
        happened = self._happened(identity)
        if happened is not None:  # settled as having happened, and not run since: it is not run again
            self._mark(call, "replay", happened.seq)
            replayed = self._replay(call, happened)
            return replayed
        unknown = self._unrefused_unknown(identity)
        if unknown is not None:
            return self._refuse(call, unknown)
        return self._execute(call, fn, None, rides, lazy_result, key=again)

    def _running(self, intent: JournalEntry) -> Refused:
        """A call of a step whose writer runs now: refused, and the refusal journaled, with what will happen."""
        pid = (intent.data or {}).get("pid")
        if intent.epoch == self.journal.epoch:
            hint = "it runs under this claim, and its result is journaled when it ends: call again then to get it"
        else:
            hint = (f"it was started at epoch {intent.epoch}, whose desk is gone, so its result can never be "
                    "journaled; the process stops its effect when it finds its desk gone; once it has ended, "
                    "call again: its outcome is then recorded as unknown")
        message = f"step {intent.step!r} is running now (intent {intent.seq}, process {pid}); it is not started twice"
        self.journal.add("note", sync=True, data={"running": intent.seq, "writer": pid, "message": message,
                                                   "hint": hint})
        return Refused(message, hint=hint)

    def _cut_off(self, intent: JournalEntry) -> JournalEntry | None:
        """Journal `outcome_unknown` for an unsafe intent whose writer is not running; if the step declared an
        outcome probe and its writer is proven dead, run the probe and settle with what it found."""
        crash_point("recovery.before-outcome-unknown", intent.step)
        self.journal.add("outcome_unknown", sync=True, **unknown_fields(intent))
        crash_point("recovery.after-outcome-unknown", intent.step)
        probe = (intent.data or {}).get("probe")
        if not isinstance(probe, str) or self.probe_runner is None:
            return None
        life = Life.from_data(intent.data or {})
        if life is None or life_state(life) != "dead":
            self.note(f"the probe of {intent.step!r} (intent {intent.seq}) was not run: its process "
                      f"{life.pid if life else '?'} on {life.host if life else '?'} cannot be proven dead from here",
                      sync=True)
            return None
        found = self.probe_runner(probe, intent.key or "")
        verdict = verdict_of_exit(int(found.get("exit_code", -1)))
        if verdict is None:
            self.note(f"the probe of {intent.step!r} (intent {intent.seq}) was inconclusive: exit "
                      f"{found.get('exit_code')} (0 means it happened, 1 that it did not)", sync=True)
            return None
        return self._write_settle(intent, verdict, "probe", found)

    def settle(self, name: str, verdict: str, by: str, evidence: dict[str, Any] | None = None,
               sha: str | None = None) -> JournalEntry:
        """Settle the unknown outcome of unsafe step `name` (of input `sha`, when several are unknown) as
        `happened` or `did-not`, with the inspection's evidence. An intent still open whose writer is not
        running gets its `outcome_unknown` first. Needs the whole journal (a session opened without the index)."""
        if self.journal.base is not None:
            raise RuntimeError("settle reads the whole journal: open the session without the index")
        try:
            intent, cut_off = settle_target(self.journal.entries, name, sha)
        except StepRunning as running:
            raise self._running(running.intent) from None
        if cut_off:
            self.journal.add("outcome_unknown", sync=False, **unknown_fields(intent))
        return self._write_settle(intent, verdict, by, evidence or {})

    def _write_settle(self, intent: JournalEntry, verdict: str, by: str, evidence: dict[str, Any]) -> JournalEntry:
        draft = self.journal.add("result", sync=True, **settle_fields(intent, verdict, by, evidence))
        assert draft.entry is not None
        return draft.entry

    def recover(self, wait_s: float = STRAY_WAIT_S) -> list[str]:
        """Before an agent runs again: the unsafe steps of earlier runs that were cut off get their outcome.

        A writer still running is waited for (up to `wait_s`: its desk is gone, so it stops its effect on
        its own); then `outcome_unknown` is journaled, and a declared probe settles it where it can.
        Returns what it found, a line each.
        """
        told = []
        for seq in sorted(self._unresolved()):
            intent = self._entry(seq)
            if intent is None or intent.policy != "unsafe" or intent.step in DESK_STEPS \
                    or intent.run == self.journal.run:
                continue
            life = Life.from_data(intent.data or {})
            if life is not None and still_running(intent) and not await_end(life, wait_s):
                self._running(intent)
                told.append(f"step {intent.step!r} (intent {intent.seq}) still runs in process {life.pid}")
                continue
            verdict = self._cut_off(intent)
            found = {HAPPENED: "happened", DID_NOT: "did not happen"}.get(settled(verdict) or "") if verdict else None
            told.append(f"step {intent.step!r} (intent {intent.seq}) was cut off: outcome unknown"
                        + (f"; its probe found it {found}" if found else ""))
        return told

    def _check_policy(self, recorded: JournalEntry, call: Call) -> None:
        if recorded.policy and recorded.policy != call.policy:
            self.mismatch(f"step {call.name!r} was recorded with policy {recorded.policy}, now called as "
                          f"{call.policy}")

    def _ids(self, call: Call) -> dict[str, Any]:
        return {"step": call.name, "input_sha": call.sha, "ordinal": call.ordinal}

    def _mark(self, call: Call, what: str, of: int) -> None:
        if self.call_notes:
            self.journal.add("note", sync=False, **self._ids(call), data={"call": what, "of": of})

    def _refuse(self, call: Call, intent: JournalEntry) -> NoReturn:
        self.journal.add("refused", sync=True, resolves=intent, **self._ids(call), key=intent.key,
                         policy=intent.policy, data={"message": unknown_message(call.name)})
        raise OutcomeUnknown(call.name)

    def _execute(self, call: Call, fn: Callable[[str], T], resume: JournalEntry | None, rides: bool = False,
                 lazy_result: bool = False, key: str | None = None) -> T:
        durable_first = call.policy != "safe"
        ids = self._ids(call)
        held: list[int] = []  # stops that came while the intent was journaled
        if resume is not None:
            ids["ordinal"] = resume.ordinal  # the result belongs to the intent it resolves
            intent: Draft | JournalEntry = resume
            key = resume.key or ""
        else:
            key = key or f"{self.journal.brief}/{self.journal.epoch}/{call.name}/{call.sha[:12]}/{call.ordinal}"
            if self.hooks is not None:  # a gate, before anything is journaled: a crash in it leaves no intent
                refused = self.hooks.before(call.name, call.policy, call.input, key)
                if refused is not None:
                    self.journal.add("note", sync=True, **self._ids(call),
                                     data={"hook": "before_step", "refused": call.name, "evidence": refused})
                    raise HookRefused(call.name, f"it exited {refused.get('exit_code')}: "
                                                 f"{str(refused.get('tail', '')).strip()[-300:]}")
            data: dict[str, Any] = dict(call.writer or this_life().to_data())  # so a repeat can tell if it runs
            if len(canonical(call.input)) <= INLINE_LIMIT:
                data["input"] = call.input
            if call.probe is not None:
                data["probe"] = call.probe
            with _stops_held(held):  # a stop landing mid-push would leave the intent with nobody to end it
                intent = self.journal.add("intent", sync=durable_first and not rides, **self._ids(call), key=key,
                                          policy=call.policy, data=data)
        try:
            crash_point("step.before-execute", call.name)
            with _sigterm_as_cancel():
                if held:  # stopped while the intent was journaled: the effect never began; its end is journaled
                    raise Cancelled(f"stopped by {signal.Signals(held[0]).name}", started=False)
                with self.journal.acting_for(intent):  # a ref its effect moves, dropped as moved, takes its result
                    output = fn(key)
        except (KeyboardInterrupt, Cancelled) as stop:
            self._stopped(call, ids, intent, key, stop)
            raise
        except StepFailed as exc:
            self._result(call, ids, intent, key, "failed", {"error": exc.error}, durable_first)
            self._after(call, key, "failed", exc.error)
            raise
        except AssayError:
            raise
        except Exception as exc:
            self._result(call, ids, intent, key, "failed", {"error": f"{type(exc).__name__}: {exc}"}, durable_first)
            self._after(call, key, "failed", f"{type(exc).__name__}: {exc}")
            raise StepFailed(call.name, f"{type(exc).__name__}: {exc}") from exc
        crash_point("step.after-execute", call.name)
        self._result(call, ids, intent, key, "completed", {"output": output}, durable_first and not lazy_result)
        crash_point("step.after-result", call.name)
        self._after(call, key, "completed", output)
        return output

    def _stopped(self, call: Call, ids: dict[str, Any], intent: Draft | JournalEntry, key: str,
                 stop: KeyboardInterrupt | Cancelled) -> None:
        """A stop (Ctrl-C, SIGTERM) in a step: its end journaled (an unsafe effect that began: `outcome_unknown`;
        else `cancelled`), without a result that lands with the work's push or not at all; a note on the stop where
        the forge could not take it (an intent left without its end is settled as a cut-off one's)."""
        reason = stop.reason if isinstance(stop, Cancelled) else "cancelled"
        self.journal.drop_unlanded_files()
        try:
            if call.policy == "unsafe" and (not isinstance(stop, Cancelled) or stop.started):
                self.journal.add("outcome_unknown", sync=True, resolves=intent, **ids, key=key, policy=call.policy,
                                 data={"reason": reason})
            else:
                self.journal.add("result", sync=True, resolves=intent, **ids, key=key, policy=call.policy,
                                 status="cancelled", data={"reason": reason})
        except AssayError as exc:
            stop.add_note(f"the step's end was not journaled: {exc.message}")

    def _after(self, call: Call, key: str, status: str, result: Any) -> None:
        """The desk's after_step hook, once the result is on the forge: its failure is journaled as a note and
        changes nothing that happened."""
        if self.hooks is None:
            return
        failed = self.hooks.after(call.name, call.policy, key, status, result)
        if failed is not None:
            self.journal.add("note", sync=True, **self._ids(call),
                             data={"hook": "after_step", "failed": call.name, "evidence": failed})

    def _result(self, call: Call, ids: dict[str, Any], intent: Draft | JournalEntry, key: str, status: str,
                data: dict[str, Any], sync: bool) -> None:
        blobs: dict[str, bytes] = {}
        if "output" in data:
            text = canonical(data["output"])
            if len(text) > INLINE_LIMIT:
                blobs["output"] = text.encode("utf-8")
                data = {}
        self.journal.add("result", sync=sync, resolves=intent, blobs=blobs, **ids, key=key, policy=call.policy,
                         status=status, data=data or None, files=True,  # the files its effect left ride its push
                         with_work=call.with_work and status == "completed")

    def _replay(self, call: Call, result: JournalEntry) -> Any:
        data = result.data or {}
        if result.status == "failed":
            raise StepFailed(call.name, str(data.get("error", "failed")))
        if "output_blob" in data:
            blob = self.journal.blob(result, data["output_blob"])
            try:
                return json.loads(blob)
            except NOT_JSON as exc:
                raise RecordInvalid(journal_ref(self.journal.brief), f"entry {result.seq}'s output "
                                    f"{data['output_blob']} is not JSON ({exc})") from None
        return data.get("output")

    # -- recorded nondeterminism --------------------------------------------------------------

    def now(self) -> float:
        """The clock, recorded; a replay gets the same value."""
        value = self._value("now", None, lambda: self.journal.clock())
        return float(value)

    def uuid(self) -> str:
        import uuid  # here: uuid and secrets import platform and OpenSSL, which a step that asks for none skips

        return str(self._value("uuid", None, lambda: str(uuid.uuid4())))

    def random_bytes(self, n: int) -> bytes:
        import secrets

        return bytes.fromhex(str(self._value("random", n, lambda: secrets.token_hex(n))))

    def _value(self, name: str, arg: Any, make: Callable[[], Any]) -> Any:
        index = self._nondet_used
        self._nondet_used += 1
        recorded = self._recorded_value(index)
        if recorded is not None:
            r = (recorded.data or {})
            if r.get("name") != name or r.get("arg") != arg:
                want = f"{name}({arg})" if arg is not None else name
                got = f"{r.get('name')}({r.get('arg')})" if r.get("arg") is not None else r.get("name")
                self.mismatch(f"read #{index + 1} asked for {want}, but the journal recorded {got}")
            if self.call_notes:
                self.journal.add("note", sync=False, data={"replay": "value", "of": recorded.seq})
            return r.get("value")
        value = make()
        self.journal.add("nondeterminism", sync=False, data={"name": name, "arg": arg, "value": value})
        return value

    # -- the rest -----------------------------------------------------------------------------

    def mismatch(self, problem: str) -> None:
        """Halt: journal the mismatch, block the brief for a person, raise ReplayMismatch."""
        self.block(f"replay mismatch: {problem}", {"replay_mismatch": problem})
        raise ReplayMismatch(self.journal.brief, problem)

    def block(self, reason: str, data: dict[str, Any] | None = None) -> None:
        """Block the brief for a person: the claim change and its entry in one push, after all that is pending."""
        self.journal.transition("block", "claim", {"action": "block", "reason": reason, **(data or {})},
                                reason=reason)

    def wait(self, on: str) -> None:
        """Park the claim on a condition (`review`, say), with its entry, after all that is pending."""
        self.journal.transition("wait", "wait", {"on": on}, wait={"on": on})

    def note(self, text: str, sync: bool = False) -> None:
        self.journal.add("note", sync=sync, data={"text": text})

    def checkpoint(self, name: str, data: bytes) -> None:
        self.journal.add("checkpoint", sync=True, blobs={"checkpoint": data}, data={"name": name})
        crash_point("journal.after-checkpoint", name)

    def flush(self) -> None:
        self.journal.flush()

    def dying_runs(self) -> int:
        """Runs in a row, across epochs, that started and never finished (a restart is no fix). A run whose process
        still lives on this host (paused, say: its claim was expired or it is fenced) has not died: no failed
        attempt."""
        starts = self.journal.base.totals()[1] if self.journal.base is not None else 0
        for e in self.journal.entries:
            event = run_event(e)
            if event == "start" and not _runs_elsewhere_here(e):
                starts += 1
            elif event == "end":
                starts = 0
        return starts

    def begin_run(self) -> None:
        """Count this run; after `max_attempts` runs in a row that never finished (any epoch), block the brief,
        first journaling `outcome_unknown` for the unsafe steps those runs cut off: what a person is handed
        says what may have happened."""
        starts = self.dying_runs()
        if starts >= self.max_attempts:
            reason = f"{starts} runs in a row ended without finishing"
            self.recover(wait_s=STRAY_WAIT_S)
            self.block(reason)
            raise NeedsPerson(f"brief {self.journal.brief!r} is blocked: {reason}",
                              hint="inspect `assay journal`, fix the cause, then release the claim")
        # a first run's start rides its first push (the agent's intent goes first, so no agent runs uncounted); once
        # a run, another epoch or a pass of this process (one that failed before its first push) came before, it is
        # on the forge before anything else: a crash loop is counted (a restarted desk takes its claim over)
        claim = self.journal.claim
        begun = (self.journal.brief, self.journal.epoch, claim.record.holder if claim else "")
        first = self.journal.last_seq == 0 and self.journal.epoch == 1 and begun not in _BEGUN
        _BEGUN.add(begun)
        self.journal.add("note", sync=not first, data={"run": "start", "writer": this_life().to_data()})

    def end_run(self, sync: bool = True) -> None:
        """This run finished (sync=False: the note goes with the next push, a claim change say). A safe or
        idempotent step an earlier epoch's run began and nobody ended (its desk was cut off, and this run went
        another way: steering came, say) is ended first, as a stopped one is: `cancelled`, so that a later call
        runs it again, as its policy says. Its writer can never journal its end (fenced); one still running is left
        open, as is an unsafe one (`recover` gives those their outcome)."""
        ending = {d.resolves.seq for d in self.journal.pending if isinstance(d.resolves, JournalEntry)}
        for seq in sorted(set(self._unresolved()) - ending):  # a result this run holds back ends its intent
            intent = self._entry(seq)
            if intent is None or intent.policy not in ("safe", "idempotent") or intent.epoch >= self.journal.epoch \
                    or still_running(intent):
                continue
            self.journal.add("result", sync=False, resolves=intent, step=intent.step, input_sha=intent.input_sha,
                             ordinal=intent.ordinal, key=intent.key, policy=intent.policy, status="cancelled",
                             data={"reason": f"{CUT_OFF} {intent.epoch}; no later run called it again"})
        self.journal.add("note", sync=sync, data={"run": "end"})

    def stop_run(self, reason: str) -> None:
        """End this run early, not dead: it does not count towards blocking. Best effort (the forge may refuse)."""
        self.journal.drop_unlanded_files()
        try:
            self.journal.add("note", sync=True, data={"run": "end", "stopped": reason})
        except AssayError:
            self.journal.pending.clear()


CUT_OFF = "cut off at epoch"  # how `end_run` ends an earlier epoch's step nobody called again: its key is kept


def _runs_elsewhere_here(start: JournalEntry) -> bool:
    """The run a `start` note begins is another process's on this host, provably still running."""
    writer = (start.data or {}).get("writer")
    life = Life.from_data(writer) if isinstance(writer, dict) else None
    return life is not None and life.pid != this_life().pid and life_state(life) == "alive"


@contextmanager
def _stops_held(held: list[int]) -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (each one not ignored) while a step's intent is journaled, noting them in
    `held`: the step raises the stop once its end can be journaled. (A stop raised inside the intent's push would
    leave it on the forge unended, the claim handed back.) A desk that is a thread holds what its host hands it."""
    if stops.hosted():
        with stops.holding(held):
            yield
        return

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    previous: dict[signal.Signals, Any] = {}
    try:
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(number) != signal.SIG_IGN:
                previous[number] = signal.signal(number, hold)
    except ValueError:  # not the main thread: its signals are the main thread's to take
        for kept, old in previous.items():
            signal.signal(kept, old)
        previous = {}
    try:
        yield
    finally:
        for kept, old in previous.items():
            signal.signal(kept, old)


@contextmanager
def _sigterm_as_cancel() -> Iterator[None]:
    """Turn SIGTERM into Cancelled while a step runs, so its end is recorded (in a desk that is a thread, the
    SIGTERM its host hands it)."""
    if stops.hosted():
        with stops.cancelling():
            yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Cancelled()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def open_session(claims: Claims, brief: str, desk: str, epoch: int, run: str | None = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS, call_notes: bool = False,
                 known: JournalLog | None = None, indexed: bool = False) -> Session:
    """A session on `brief` for the desk holding it at `epoch`; a new run id unless one is given.

    `known`: an earlier read of the journal (the desk's, for its agent's run), so only what came since is read.
    `indexed`: start from the journal's index in the forge's cache, reading only the entries the session
    asks for (`journal.entries` then holds only the latest).
    """
    journal = Journal.open(claims, brief, desk, epoch, run or os.urandom(6).hex(), known=known,
                           indexed=indexed)
    session = Session(journal, max_attempts, call_notes)
    if session._unresolved():
        crash_point("recovery.after-load")  # a recovery has read the journal and decided nothing yet
    return session
