"""What people and CI did on a brief's review, acted on exactly once, by whoever looks first.

A review that requests changes, a comment command (`/assay retry`, `/assay steer TEXT`), a merge, a close
and finished checks are **signals**. A desk between passes, the sweep and `assay event` (a GitHub Actions job
woken by a forge event) all call `settle`, which reads the forge (never the event's payload) and acts:

| signal | the brief is waiting | held | blocked |
|---|---|---|---|
| changes requested | a new round, the review's text its feedback | kept for when it waits | kept |
| `/assay retry` | a new round | noted: it is being worked | released for a desk to redo |
| `/assay steer TEXT` | steering, and a new round | steering (delivered to the running agent) | steering |
| a review thread waits on an answer | a new round, the thread its feedback | kept (the round answers it) | kept |
| merged / closed | done / blocked with the closer's words | (the desk sees it) | - |
| checks finished | a `checks` wait is woken, their result its feedback | - | - |

A signal from someone who may not write to the repository, or an `/assay` command Assay does not know, is
refused: a `note` says so, and nothing else happens. Each act is journaled with the identities of the signals
it consumed (`signals`) and the event that prompted the look (`event`), in the same compare-and-swap push as
its claim change, and the push is made only while the journal does not name those signals yet: the same event
delivered twice, a re-run, or an event and the backstop racing, act once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from assay.core import custody
from assay.core.claims import Claims
from assay.core.forge.base import Reviews, Signal
from assay.core.journal import append_as_person, read_log, transition_as
from assay.core.records import JournalEntry
from assay.core.records.recordtype import dataclass, field
from assay.errors import Conflict, ForgeDenied, IllegalTransition

ROUND_WAITS = custody.ROUND_WAITS  # waits that a person's signal turns into a new round
STATES = ("held", "waiting", "blocked")  # the claims a signal can move


class _Acted(Exception):
    """The journal already names a signal this act would consume: someone acted on it first."""


@dataclass
class Settled:
    """What `settle` did to one brief: a line per act, the claim's state and desk after it."""

    brief: str
    state: str = ""
    desk: str = ""
    did: list[str] = field(default_factory=list)
    woken: bool = False  # the brief is held again, for its desk to work a new round

    def view(self) -> dict[str, Any]:
        return {"brief": self.brief, "state": self.state, "desk": self.desk, "did": self.did, "woken": self.woken}


def consumed(entries: list[JournalEntry]) -> set[str]:
    """The signals the journal says were acted on."""
    return {str(s) for e in entries for s in ((e.data or {}).get("signals") or [])}


def _guard(ids: list[str]) -> Callable[[list[JournalEntry]], None]:
    def check(entries: list[JournalEntry]) -> None:
        if consumed(entries) & set(ids):
            raise _Acted()
    return check


def _who(s: Signal) -> str:
    return f"@{s.by}" if s.by else "someone"


def settle(claims: Claims, reviews: Reviews, brief: str, cause: Mapping[str, str], by: str,
           now: Callable[[], float] = time.time, states: tuple[str, ...] = STATES) -> Settled:
    """Act on every signal on `brief`'s review that its journal does not name yet (see the module), if its claim is
    in one of `states`. A read the forge refuses the token (a permission it lacks) is reported for this brief in
    `did`, with the permission to add, and raises nothing: the caller goes on with its other briefs."""
    out = Settled(brief)
    try:
        _settle(claims, reviews, brief, cause, by, now, states, out)
    except ForgeDenied as exc:
        out.did.append(f"cannot read what people and CI did: {exc.message}; {exc.hint}")
    return out


def new_round(claims: Claims, brief: str, ident: str, reason: str, said: str, by: str,
              extra: Mapping[str, Any] | None = None) -> Settled:
    """Wake a brief waiting on its review for a new round, with `reason` (and `said`, its details) as the agent's
    feedback: once per `ident` (the act is journaled naming it), however often or however concurrently asked.
    `extra`: more for the round's desk (`main`: the main commit to merge into the branch before the agent runs)."""
    out = Settled(brief)
    current = claims.read(brief)
    if current is None or current.record.state != "waiting":
        out.state = current.record.state if current else ""
        out.did.append(f"not waiting ({out.state or 'never claimed'}): no round started")
        return out
    r = current.record
    out.state, out.desk = r.state, r.desk
    _wake(claims, brief, r.epoch, dict(r.wait or {}), {**(extra or {}), "reason": reason, "said": said}, [ident],
          {"event": "round"}, by, out)
    return out


def _settle(claims: Claims, reviews: Reviews, brief: str, cause: Mapping[str, str], by: str,
            now: Callable[[], float], states: tuple[str, ...], out: Settled) -> None:
    current = claims.read(brief)
    if current is None or current.record.state not in states:
        out.state = current.record.state if current else ""
        return
    r = current.record
    out.state, out.desk = r.state, r.desk
    entries = read_log(claims.git, brief).entries
    done = consumed(entries)
    reviews_signals = reviews.signals(brief)
    fresh = [s for s in reviews_signals if s.id not in done]
    event = dict(cause)
    # no verdict on who may write (the forge did not answer) is no "no": such a command waits for the next look
    out.did += [f"{s.id} by {_who(s)}: the forge gave no answer on whether {s.by} may write to the repository; "
                "left for the next look" for s in fresh if s.allowed is None and s.kind != "unknown"]
    refused = [s for s in fresh if s.allowed is False or s.kind == "unknown"]
    if refused:
        lines = [f"{s.id} by {_who(s)}: " + (f"{s.by or 'they'} may not write to the repository"
                                             if s.allowed is False else f"`{s.text}` is not a command (use /assay "
                                                                        "retry or /assay steer TEXT)")
                 for s in refused]
        _journal(claims, brief, "note", {"refused": lines}, refused, event, by, out, "refused " + "; ".join(lines))
    allowed = [s for s in fresh if s.allowed and s.kind != "unknown"]
    # steering is journaled at once; while the brief waits on its review it also starts a round (its own
    # identity, `<id>:round`, so that a crash between the two still gets the round); otherwise it never will
    for s in (s for s in allowed if s.kind == "steer"):
        ids = [s.id] if r.state == "waiting" else [s.id, f"{s.id}:round"]
        _journal(claims, brief, "steer", {"text": s.text, "by": s.by}, ids, event, by, out,
                 f"steering from {_who(s)} ({s.id})")
    steered = [s for s in reviews_signals if s.allowed and s.kind == "steer" and f"{s.id}:round" not in done]
    rounds = [s for s in allowed if s.kind in ("changes", "retry", "thread")] + steered
    if r.state == "waiting":
        _settle_waiting(claims, reviews, brief, r.epoch, dict(r.wait or {}), _wait_entry(entries), rounds, event, by,
                        now, out)
    elif r.state == "blocked":
        retries = [s for s in rounds if s.kind == "retry"]
        if retries:
            why = f"{_who(retries[-1])} asked for a retry ({', '.join(s.id for s in retries)})"
            data = {"action": "force-release", "reason": why}
            if _transition(claims, brief, "force_release", "claim", data, retries, event, by, out,
                           f"released for a retry: {why}", reason=why):
                out.state = "released"
    else:  # held: its desk is working it; a retry asks for nothing more, a review waits for the round's end
        retries = [s for s in rounds if s.kind == "retry"]
        if retries:
            _journal(claims, brief, "note", {"retry": "the brief is being worked; nothing more to do"}, retries,
                     event, by, out, f"retry from {_who(retries[-1])}: the brief is being worked")


def _settle_waiting(claims: Claims, reviews: Reviews, brief: str, epoch: int, wait: dict[str, Any], entry: int,
                    rounds: list[Signal], event: dict[str, str], by: str, now: Callable[[], float],
                    out: Settled) -> None:
    on = str(wait.get("on", ""))
    review = reviews.peek(brief)
    if review is not None and review.state in ("merged", "closed"):
        ident = [f"{review.state}:{review.sha}"]
        if review.state == "merged":
            data = {"action": "release", "outcome": "done", "reason": "review merged"}
            if _transition(claims, brief, "release", "claim", data, ident, event, by, out, "review merged: done",
                           outcome="done", reason="review merged", desk=out.desk, epoch=epoch):
                out.state = "done"
            return
        closer = reviews.closer(brief)
        full = reviews.get(brief) or review  # with its comments: the closer's last words
        words = [c.text for c in full.record.comments if not closer or c.by == closer]
        said = words[-1] if words else ""
        why = (f"the review was closed{f' by @{closer}' if closer else ''}" + (f": {said}" if said else "")
               + "; release the claim to have it redone, or remove the brief from main")
        data = {"action": "block", "reason": why}
        if _transition(claims, brief, "block", "claim", data, ident, event, by, out, f"blocked: {why}",
                       reason=why, desk=out.desk, epoch=epoch):
            out.state = "blocked"
        return
    if rounds and on in ROUND_WAITS:
        changes = [s for s in rounds if s.kind == "changes"]
        threads = [s for s in rounds if s.kind == "thread"]
        parts = ([f"{_who(s)} requested changes" for s in changes]
                 + [f"{_who(s)} asked for a retry" for s in rounds if s.kind == "retry"]
                 + [f"{_who(s)} steered the work (see Steering)" for s in rounds if s.kind == "steer"]
                 + [f"{_who(s)} wrote in review thread {s.id.split(':')[1]} (see Review threads)" for s in threads])
        said = "\n\n".join([f"{_who(s)}: {s.text}" for s in changes if s.text.strip()]
                             + [f"{_who(s)} on {s.text}" for s in threads])
        ids = [f"{s.id}:round" if s.kind == "steer" else s.id for s in rounds]
        _wake(claims, brief, epoch, wait, {"reason": "; ".join(parts), "said": said}, ids, event, by, out)
        return
    if on == "checks":
        checks = reviews.checks(brief)
        if checks is not None and checks.finished:
            ident = [f"checks:{checks.head}:{epoch}:{entry}"]  # once per wait, however often delivered
            reason = f"the checks on {checks.head[:10]} finished: {checks.summary}"
            _wake(claims, brief, epoch, wait, {"reason": reason, "said": ""}, ident, event, by, out)
        return
    met = custody.wait_met(wait, review.record if review else None, now(),
                           lambda names: {n: custody.state_of(claims, n) for n in names})
    if met is not None and met[0] == "wake":
        _wake(claims, brief, epoch, wait, None, [], event, by, out, met[1])


def _wait_entry(entries: list[JournalEntry]) -> int:
    """The seq of the journal entry that began the current wait (written in the same push as the claim's wait):
    what tells one wait from the next of the same epoch on the same head."""
    return next((e.seq for e in reversed(entries) if e.kind == "wait"), 0)


def _ids(signals: list[Signal] | list[str]) -> list[str]:
    return [s if isinstance(s, str) else s.id for s in signals]


def _wake(claims: Claims, brief: str, epoch: int, wait: dict[str, Any], round_: dict[str, Any] | None,
          signals: list[Signal] | list[str], event: dict[str, str], by: str, out: Settled, why: str = "") -> None:
    data: dict[str, Any] = {"by": by, "was": wait}
    if round_ is not None:
        data["round"] = round_
    line = f"woken: {round_['reason'] if round_ else why}"
    if _transition(claims, brief, "wake", "wake", data, signals, event, by, out, line, desk=out.desk, epoch=epoch):
        out.state, out.woken = "held", True


def _transition(claims: Claims, brief: str, action: str, kind: str, data: dict[str, Any],
                signals: list[Signal] | list[str], event: dict[str, str], by: str, out: Settled, line: str,
                **args: Any) -> bool:
    """The claim change and its entry, naming the signals, in one push; False when another writer acted
    first (the signals are journaled already, or the claim moved on)."""
    ids = _ids(signals)
    try:
        transition_as(claims, brief, action, kind, {**data, "signals": ids, "event": event}, by, f"event:{by}",
                      check=_guard(ids), **args)
    except _Acted:
        out.did.append(f"already done: {', '.join(ids)}")
        return False
    except (Conflict, IllegalTransition) as exc:
        out.did.append(f"settled elsewhere: {exc.message}")
        return False
    out.did.append(line)
    return True


def _journal(claims: Claims, brief: str, kind: str, data: dict[str, Any], signals: list[Signal] | list[str],
             event: dict[str, str], by: str, out: Settled, line: str) -> None:
    ids = _ids(signals)
    try:
        append_as_person(claims, brief, kind, {**data, "signals": ids, "event": event}, by, run=f"event:{by}",
                         check=_guard(ids))
    except _Acted:
        out.did.append(f"already done: {', '.join(ids)}")
        return
    out.did.append(line)
