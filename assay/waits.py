"""Waits, wakes and steering: what a person (or a desk) says about a brief between runs."""

from __future__ import annotations

import re

from assay.claims import Claim, Claims
from assay.errors import IllegalTransition, UsageError
from assay.journal import append_as_person
from assay.records import parse_iso

_TIME = re.compile(r"time:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def parse_condition(on: str) -> str:
    if on in ("review", "merge", "manual") or _TIME.fullmatch(on):
        if on.startswith("time:"):
            try:
                parse_iso(on[5:])
            except ValueError:
                raise UsageError(f"{on[5:]!r} is not a real time", hint="use YYYY-MM-DDTHH:MM:SSZ, in UTC") from None
        return on
    raise UsageError(f"unknown wait condition {on!r}",
                     hint="use review, merge, manual or time:YYYY-MM-DDTHH:MM:SSZ (UTC)")


def _holder_claim(claims: Claims, brief: str, desk: str | None, action: str) -> Claim:
    current = claims.read(brief)
    if current is None:
        raise IllegalTransition(brief, action, "absent", "nobody has claimed it")
    if desk and current.record.desk != desk:
        raise IllegalTransition(brief, action, current.record.state, f"it belongs to desk {current.record.desk!r}")
    return current


def wait(claims: Claims, brief: str, on: str, by: str, desk: str | None = None, epoch: int | None = None) -> Claim:
    """Park a held brief on a condition: the claim stays, no process works on it.

    With `epoch` (an agent's ASSAY_EPOCH), a process from an older epoch is fenced (exit 3).
    """
    condition = parse_condition(on)
    current = _holder_claim(claims, brief, desk, "wait")
    r = current.record
    parked = claims.change(brief, "wait", desk=r.desk, epoch=r.epoch if epoch is None else epoch,
                           wait={"on": condition})
    append_as_person(claims, brief, "wait", {"on": condition, "by": by}, by)
    return parked


def wake(claims: Claims, brief: str, by: str, desk: str | None = None) -> Claim:
    """Wake a waiting brief; its desk resumes it from the journal on its next pass."""
    current = _holder_claim(claims, brief, desk, "wake")
    r = current.record
    woken = claims.change(brief, "wake", desk=r.desk, epoch=r.epoch)
    append_as_person(claims, brief, "wake", {"by": by, "was": r.wait}, by)
    return woken


def steer(claims: Claims, brief: str, text: str, by: str) -> int:
    """Journal guidance for the agent's next run (and every run after a recovery). Returns its seq."""
    if not text.strip():
        raise UsageError("steering text is empty", hint='assay steer BRIEF "what the agent should know"')
    return append_as_person(claims, brief, "steer", {"text": text, "by": by}, by).seq
