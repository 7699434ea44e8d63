"""The waste ledger: what the fleet spent that did not become the work that stands, read from the journal alone.

A desk's agent runs inside the `agent` step of an attempt (`{"attempt": N}` in its input, with `"after":
"block-<seq>"` in a redone round). Each such call ends in one of these fates:

| fate | meaning |
|---|---|
| `kept` | its attempt passed verify in the brief's last round: the work that stands (or is in review) |
| `died` | no result: its run was killed or lost its claim, and a later run started over |
| `failed_verify` | it finished, and its attempt failed verify |
| `redone` | it passed, but a person sent the brief round again (a closed review, a release after a block) |
| `open` | no result yet and nothing after it: running now, or waiting for a desk to notice |

Its time is the agent's own `duration_ms` when it finished, else from its intent to the last entry its run
wrote. Beside the agent time the ledger counts runs that died (a `{"run": "start"}` with no end, wait or block
before the next start), refused and unknown step calls, failed verify attempts (`verify_failed`) and rounds redone. A
desk's share is the part written at the epochs its claims held (`epoch_desks`, from the claim chain).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from assay.core.records import JournalEntry, parse_iso
from assay.core.records.recordtype import dataclass, field

FATES = ("kept", "died", "failed_verify", "redone", "open")
WASTED = ("died", "failed_verify", "redone")
COUNTS = ("runs_died", "refused", "unknown", "verify_failed", "rounds_redone")
BETWEEN_RUNS = ("person:", "desk:", "sweeper:")  # runs that are not a desk's work run


@dataclass(frozen=True)
class Item:
    """One thing the ledger counts: an agent call's seconds by fate, or one count, at the epoch it was written."""

    kind: str  # a fate (with seconds) or one of COUNTS
    epoch: int
    seconds: float = 0.0
    seq: int = 0


def _at(e: JournalEntry) -> float:
    return parse_iso(e.at).timestamp()


def _input(e: JournalEntry) -> dict[str, Any]:
    found = (e.data or {}).get("input")
    return found if isinstance(found, dict) else {}


def items(entries: list[JournalEntry]) -> list[Item]:
    """Everything the ledger counts in one brief's journal, in seq order."""
    ends = {e.intent: e for e in entries if e.intent and e.kind in ("result", "outcome_unknown")}
    starts = [i for i, e in enumerate(entries) if e.kind == "note" and (e.data or {}).get("run") == "start"]
    verdicts: dict[tuple[str, Any], bool] = {}
    for e in entries:
        end = ends.get(e.seq) if e.kind == "intent" and e.step == "verify" else None
        if end is not None and end.kind == "result" and end.status == "completed":
            output = (end.data or {}).get("output")
            key = (str(_input(e).get("after", "")), _input(e).get("attempt"))
            verdicts[key] = isinstance(output, dict) and output.get("passed") is True
    rounds = [str((e.data or {})["redo"]) for e in entries if e.kind == "note" and (e.data or {}).get("redo")]
    last_round = rounds[-1] if rounds else ""
    where = {e.seq: n for n, e in enumerate(entries)}
    found: list[Item] = []
    for i, e in enumerate(entries):
        if e.kind in ("refused", "outcome_unknown"):
            found.append(Item("refused" if e.kind == "refused" else "unknown", e.epoch, seq=e.seq))
        elif e.kind == "note" and (e.data or {}).get("redo"):
            found.append(Item("rounds_redone", e.epoch, seq=e.seq))
        elif e.kind == "result" and e.step == "verify" and e.status == "completed" and _failed(e):
            found.append(Item("verify_failed", e.epoch, seq=e.seq))
        if e.kind == "intent" and e.step == "agent":
            end = ends.get(e.seq)
            found += _agent_call(entries, i, end, where[end.seq] if end else None, starts, verdicts, last_round)
    for n, s in enumerate(starts):
        run = entries[s].run
        if n + 1 == len(starts):
            continue  # the last run: running now, or it ended (its end note is after it)
        ended = any(e.run == run and (e.kind in ("claim", "wait") or (e.data or {}).get("run") == "end")
                    for e in entries[s:starts[n + 1]])  # an end note, or the run parked or blocked its brief
        if not ended:
            found.append(Item("runs_died", entries[s].epoch, seq=entries[s].seq))
    return found


def _agent_call(entries: list[JournalEntry], i: int, end: JournalEntry | None, stop: int | None, starts: list[int],
                verdicts: dict[tuple[str, Any], bool], last_round: str) -> list[Item]:
    """The fates of one agent call: a resumed call keeps its intent, so each run that started while it had no
    result died in it (from its start to the last entry that run wrote); the part that ended it is `kept`,
    `failed_verify` or `redone` by its attempt's verify, `died` if it failed or was cut off, `open` if nothing
    ended it yet."""
    e = entries[i]
    parts = [i, *(s for s in starts if s > i and (stop is None or s < stop))]
    found = [Item("died", entries[a].epoch, max(0.0, _at(_last_of_run(entries, a, b)) - _at(entries[a])), e.seq)
             for a, b in zip(parts, parts[1:], strict=False)]
    began = entries[parts[-1]]
    if end is None:
        return [*found, Item("open", began.epoch, max(0.0, _at(_last_of_run(entries, parts[-1], None)) - _at(began)),
                             e.seq)]
    if end.kind != "result" or end.status != "completed":
        return [*found, Item("died", end.epoch, max(0.0, _at(end) - _at(began)), e.seq)]
    output = (end.data or {}).get("output")
    ms = output.get("duration_ms") if isinstance(output, dict) else None
    seconds = ms / 1000 if isinstance(ms, (int, float)) else max(0.0, _at(end) - _at(began))
    key = (str(_input(e).get("after", "")), _input(e).get("attempt"))
    passed = verdicts.get(key)
    fate = "failed_verify" if passed is False else "redone" if key[0] != last_round else "kept" if passed else "open"
    return [*found, Item(fate, end.epoch, seconds, e.seq)]


def _failed(result: JournalEntry) -> bool:
    output = (result.data or {}).get("output")
    return isinstance(output, dict) and output.get("passed") is False


def _last_of_run(entries: list[JournalEntry], i: int, stop: int | None) -> JournalEntry:
    """The last entry a run wrote after entry `i` and before entry `stop` (the next run's start): the agent's own
    steps count, a person's, a desk's or a sweeper's entries between runs do not."""
    last = entries[i]
    for e in entries[i + 1:stop]:
        if not e.run.startswith(BETWEEN_RUNS):
            last = e
    return last


def summary(found: Iterable[Item]) -> dict[str, Any]:
    """A ledger: agent seconds by fate (`agent_s` their sum, `wasted_s` the wasted ones) and the counts."""
    seconds = dict.fromkeys(FATES, 0.0)
    counts = dict.fromkeys(COUNTS, 0)
    for item in found:
        if item.kind in FATES:
            seconds[item.kind] += item.seconds
        else:
            counts[item.kind] += 1
    out: dict[str, Any] = {f"{fate}_s": round(s, 3) for fate, s in seconds.items()}
    out["agent_s"] = round(sum(seconds.values()), 3)
    out["wasted_s"] = round(sum(seconds[f] for f in WASTED), 3)
    out.update(counts)
    return out


@dataclass(frozen=True)
class Unread:
    """A record the ledger could not read, and which sums leave out what it holds: `every total` (a journal),
    `desk shares` (a claim record: the time of its epoch counts in the totals, under no desk)."""

    brief: str
    ref: str
    problem: str
    left_out: str


@dataclass
class Ledgers:
    """The ledger of each brief with a journal, of each desk that held one, in total, which briefs each desk
    held (at some epoch), and what could not be read (`unread`), which the sums leave out."""

    briefs: dict[str, dict[str, Any]]
    desks: dict[str, dict[str, Any]]
    total: dict[str, Any]
    held: dict[str, list[str]]
    unread: list[Unread] = field(default_factory=list)


def ledgers(journals: Mapping[str, list[JournalEntry]], epoch_desks: Mapping[str, Mapping[int, str]],
            unread: Iterable[Unread] = ()) -> Ledgers:
    """Per brief, per desk and in total. A brief with no journal has no ledger; one whose journal is in
    `unread` is in none of the sums, and the ledgers say so."""
    briefs: dict[str, dict[str, Any]] = {}
    by_desk: dict[str, list[Item]] = {}
    held: dict[str, list[str]] = {}
    every: list[Item] = []
    for brief, entries in sorted(journals.items()):
        found = items(entries)
        briefs[brief] = summary(found)
        every += found
        desks = epoch_desks.get(brief, {})
        for desk in sorted(set(desks.values())):
            held.setdefault(desk, []).append(brief)
        for item in found:
            if item.epoch in desks:
                by_desk.setdefault(desks[item.epoch], []).append(item)
    return Ledgers(briefs, {d: summary(found) for d, found in sorted(by_desk.items())}, summary(every), held,
                   sorted(unread, key=lambda u: (u.brief, u.ref)))


def wasted(ledger: Mapping[str, Any]) -> bool:
    """Whether a ledger shows anything lost."""
    return bool(ledger["wasted_s"] or any(ledger[k] for k in COUNTS))


def duration(seconds: float) -> str:
    """Agent time: milliseconds below 1 s (a scripted agent's), tenths below 10 s, else `human_age`'s 90s, 12m, 5h."""
    from assay.core.records import human_age

    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    return f"{seconds:.1f}s" if seconds < 10 else human_age(int(round(seconds)))


def text(ledger: Mapping[str, Any]) -> str:
    """One line: `agent 12m · kept 4m · wasted 8m (died 3m, failed verify 5m) · 2 refused`."""
    parts = [f"agent {duration(ledger['agent_s'])}", f"kept {duration(ledger['kept_s'])}"]
    lost = [f"{fate.replace('_', ' ')} {duration(ledger[f'{fate}_s'])}" for fate in WASTED if ledger[f"{fate}_s"]]
    if lost:
        parts.append(f"wasted {duration(ledger['wasted_s'])} ({', '.join(lost)})")
    names = {"runs_died": "runs died", "refused": "refused", "unknown": "unknown",
             "verify_failed": "verify failed", "rounds_redone": "rounds redone"}
    parts += [f"{ledger[k]} {names[k]}" for k in COUNTS if ledger[k]]
    return " · ".join(parts)
