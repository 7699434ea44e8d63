"""What a journal says became of its steps: read-only, for the session, the desk, the sweep, the board and the audit.

An intent ends with a `result` or an `outcome_unknown`; an `outcome_unknown` is settled later by a
`result` whose `data.settled` says what an inspection found: `happened` (status `completed`: a later
call returns it and does not run the step again) or `did-not` (status `cancelled`: a later call runs
the step). A settle carries its evidence (the inspection's command, exit code and output tail) and
who settled it: the agent, a person, or the step's own outcome probe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from assay.core.lives import Life, is_running, this_life
from assay.core.records import JournalEntry
from assay.core.records.recordtype import dataclass
from assay.errors import UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

HAPPENED, DID_NOT = "happened", "did-not"
DESK_STEPS = frozenset({"branch", "review", "agent", "push", "verify", "statuses", "ready",
                        "done_when", "supersede", "close", "answer"})  # work.py's own
TAIL_CHARS = 300  # how much of a step's recorded output the recovery summary quotes


def verdict_of_exit(code: int) -> str | None:
    """What an inspection's exit code says (an outcome probe, or `assay step settle -- CMD`): 0 that the effect
    happened, 1 that it did not; anything else says neither."""
    return {0: HAPPENED, 1: DID_NOT}.get(code)


def resolves(entry: JournalEntry) -> int | None:
    """The seq of the intent `entry` resolves: a result or an outcome_unknown ends an intent; nothing else does
    (a refusal follows an outcome_unknown, it never stands for one)."""
    return entry.intent if entry.intent is not None and entry.kind in ("result", "outcome_unknown") else None


def settled(entry: JournalEntry) -> str | None:
    """`happened` or `did-not` when `entry` settles an unknown outcome; None otherwise."""
    if entry.kind != "result":
        return None
    verdict = (entry.data or {}).get("settled")
    return verdict if verdict in (HAPPENED, DID_NOT) else None


def unknown_outcomes(entries: Sequence[JournalEntry]) -> list[JournalEntry]:
    """The `outcome_unknown` entries that nothing answered since: no settle of their intent, and no later
    intent of the same step identity (a deliberate repeat). Effects a person or the agent must look at
    (the sweep's `unknown` findings, the board's "outcome unknown" column, the desk's ready check)."""
    later: dict[tuple[str, str], int] = {}
    settles: set[int] = set()
    for e in entries:
        if e.kind == "intent":
            later[e.identity] = e.seq
        if settled(e) and e.intent is not None:
            settles.add(e.intent)
    return [e for e in entries if e.kind == "outcome_unknown" and later.get(e.identity, 0) < e.seq
            and e.intent not in settles]


def open_intents(entries: Iterable[JournalEntry]) -> list[JournalEntry]:
    """The intents in `entries` that no later entry resolves: steps interrupted, or running now.

    A session finds them the same way over its index (`Session._unresolved`); readers of a whole
    journal (the board) call this.
    """
    opened: dict[int, JournalEntry] = {}
    for e in entries:
        if e.kind == "intent":
            opened[e.seq] = e
        resolved = resolves(e)
        if resolved is not None:
            opened.pop(resolved, None)
    return list(opened.values())


def round_entries(entries: Sequence[JournalEntry]) -> Sequence[JournalEntry]:
    """The entries of the brief's current round: after the last `redo` note (a released block), or all."""
    start = 0
    for i, e in enumerate(entries):
        if e.kind == "note" and (e.data or {}).get("redo"):
            start = i
    return entries[start:]


def unsettled_unsafe(entries: Sequence[JournalEntry]) -> list[JournalEntry]:
    """The agent's unsafe steps that stand in the way of a ready review: intents still open, and unknown
    outcomes (cut off, or cancelled) that no settle or deliberate repeat answered. In seq order."""
    stuck = [e for e in open_intents(entries) if e.policy == "unsafe" and e.step not in DESK_STEPS]
    stuck += [e for e in unknown_outcomes(entries) if e.step not in DESK_STEPS]
    return sorted(stuck, key=lambda e: e.seq)


@dataclass(frozen=True)
class StepFate:
    """The last word of the journal on an agent's step (one step name and input)."""

    step: str
    policy: str
    state: str  # completed, failed, cancelled, unknown, refused, settled-happened, settled-did-not, running
    detail: str


def fates(entries: Sequence[JournalEntry]) -> list[StepFate]:
    """Each agent step (by name and input) as the journal last ends it, in the order of their latest calls."""
    intents = {e.seq: e for e in entries if e.kind == "intent" and e.step not in DESK_STEPS}
    last: dict[int, JournalEntry] = {}
    refused: set[int] = set()
    for e in entries:
        if e.intent in intents and e.kind in ("result", "outcome_unknown"):
            last[e.intent] = e
        if e.intent in intents and e.kind == "refused":
            refused.add(e.intent)
    latest: dict[tuple[str, str], JournalEntry] = {}
    for intent in intents.values():
        latest.pop(intent.identity, None)  # keep the order of the latest calls
        latest[intent.identity] = intent
    return [StepFate(i.step or "", i.policy or "", *_fate(last.get(i.seq), i.seq in refused))
            for i in latest.values()]


def _fate(end: JournalEntry | None, was_refused: bool) -> tuple[str, str]:
    if end is None:
        return "running", "no result: cut off, or running now"
    data = end.data or {}
    verdict = settled(end)
    if verdict:
        evidence = data.get("evidence") or {}
        how = f" (evidence: exit {evidence['exit_code']}, {_tail(evidence)!r})" if "exit_code" in evidence else ""
        return f"settled-{verdict}", f"settled by {data.get('by', '?')}: {verdict.replace('-', ' ')}{how}"
    if end.kind == "outcome_unknown":
        return ("refused" if was_refused else "unknown"), str(data.get("reason", "interrupted"))
    output = data.get("output")
    if end.status == "completed" and isinstance(output, dict) and "exit_code" in output:
        return "completed", f"exit {output['exit_code']}; its output ended: {_tail(output)!r}"
    if end.status == "failed":
        return "failed", str(data.get("error", "failed"))
    return str(end.status or "ended"), str(data.get("reason", ""))


def _tail(data: dict[str, object]) -> str:
    text = str(data.get("tail", "")).strip()
    return text[-TAIL_CHARS:]


def summary(entries: Sequence[JournalEntry], assay: str, unknown_text: Callable[[str], str],
            limit: int = 20) -> list[str]:
    """The journal's account of the agent's steps, for the prompt of a run that comes after another: what
    completed (with the tail of its output), what was refused, cut off or cancelled, and how unknowns were
    settled. Empty when no agent step was ever journaled."""
    told = fates(entries)[-limit:]
    if not told:
        return []
    lines = ["## What the journal shows (read this first)", "",
             "Earlier runs of this brief journaled these steps; the journal, not memory, says what happened:", ""]
    settle = (f"Inspect first, then record what you found: `{assay} step settle NAME --happened` or "
              f"`--did-not`, or pass your inspection after `--` (exit 0: it happened, 1: it did not).")
    for fate in told:
        head = f"- `{fate.step}` ({fate.policy}): "
        if fate.state in ("unknown", "refused"):
            again = (" A repeat was already refused once; a deliberate call runs it again." if fate.state == "refused"
                     else " Calling it again is refused once.")
            lines.append(f"{head}OUTCOME UNKNOWN ({fate.detail}). {unknown_text(fate.step)}{again} {settle}")
        elif fate.state == "running":
            lines.append(f"{head}{fate.detail}.")
        else:
            lines.append(f"{head}{fate.state.replace('-', ' ')}: {fate.detail}")
    return [*lines, ""]


def still_running(intent: JournalEntry) -> bool:
    """The intent's writer is provably still running: the step is in progress, not interrupted.

    A writer that is gone, a zombie, or whose pid now belongs to another process
    is not; nor is one on another host, where there is no evidence either way.
    """
    life = Life.from_data(intent.data or {})
    if life is None or life.pid == this_life().pid:
        return False  # our own pid: this process (this desk) is past its earlier intent, or that was an earlier life
    return is_running(life)


class StepRunning(Exception):
    """The step asked for runs now: its writer's life is provably alive."""

    def __init__(self, intent: JournalEntry) -> None:
        super().__init__(intent.step)
        self.intent = intent


def settle_target(entries: Sequence[JournalEntry], name: str, sha: str | None) -> tuple[JournalEntry, bool]:
    """Which intent `assay step settle NAME` settles: the latest unknown outcome of unsafe step `name` (of input
    `sha`), or an intent nothing resolved whose writer is not running (True: it needs its outcome_unknown first).
    Bad input (nothing to settle, several inputs) is a UsageError; a writer running now raises StepRunning."""
    candidates = [e for e in (*open_intents(entries), *unknown_outcomes(entries))
                  if e.step == name and e.policy == "unsafe" and (sha is None or e.input_sha == sha)]
    running = [e for e in candidates if e.kind == "intent" and still_running(e)]
    if running:
        raise StepRunning(running[0])
    if not candidates:
        raise UsageError(f"step {name!r} has no unknown outcome to settle",
                         hint="`assay journal BRIEF` shows each step's outcome")
    inputs = {e.input_sha for e in candidates}
    if len(inputs) > 1:
        raise UsageError(f"step {name!r} has unknown outcomes with {len(inputs)} different inputs",
                         hint="pass --input with the step's input (as `assay step run` got it) to pick one")
    latest = max(candidates, key=lambda e: e.seq)
    if latest.kind == "intent":
        return latest, True
    return next(e for e in entries if e.seq == latest.intent), False


def unknown_fields(intent: JournalEntry, reason: str = "interrupted") -> dict[str, Any]:
    """The fields of the `outcome_unknown` entry that ends `intent`."""
    return {"resolves": intent, "step": intent.step, "input_sha": intent.input_sha, "ordinal": intent.ordinal,
            "key": intent.key, "policy": "unsafe", "data": {"reason": reason}}


def settle_fields(intent: JournalEntry, verdict: str, by: str, evidence: dict[str, Any]) -> dict[str, Any]:
    """The fields of the `result` entry that settles `intent`'s unknown outcome (`outcomes.settled` reads it):
    `completed` when it happened (a later call returns this and does not run the step), `cancelled` when it did
    not (a later call runs it). The evidence's output is kept to its last 1,000 characters."""
    if verdict not in (HAPPENED, DID_NOT):
        raise UsageError(f"a step is settled as {HAPPENED} or {DID_NOT}, not {verdict!r}")
    said = str(evidence.get("tail", "")).strip()[-1000:]
    data: dict[str, Any] = {"settled": verdict, "by": by, "evidence": {**evidence, "tail": said}}
    if verdict == HAPPENED:
        told = f"(settled by {by}: the step happened)" + (f"\n{said}" if said else "")
        data["output"] = {"exit_code": 0, "duration_ms": 0, "tail": told}
    return {"resolves": intent, "step": intent.step, "input_sha": intent.input_sha, "ordinal": intent.ordinal,
            "key": intent.key, "policy": "unsafe", "status": "completed" if verdict == HAPPENED else "cancelled",
            "data": data}
