"""Ref updates and their outcomes: what a compare-and-swap push asks for and what it hears back."""

from __future__ import annotations

import re

from assay.core.records.recordtype import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Literal

    PushStatus = Literal["ok", "stale", "rejected"]

ZERO = "0" * 40
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a full object id (SHA-1 or SHA-256)


class RefUpdate(NamedTuple):
    """Move `ref` to `new` (ZERO: delete it) only if it is now `expected` (ZERO: only if absent)."""

    ref: str
    new: str
    expected: str = ZERO


class PushResult(NamedTuple):
    ref: str
    status: PushStatus
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def parse_porcelain(text: str) -> dict[str, PushResult]:
    """Per-ref results of `git push --porcelain` (`<flag>\\t<from>:<to>\\t<summary>`)."""
    results: dict[str, PushResult] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1:
            continue
        flag, spec, summary = parts[0], parts[1], parts[2]
        ref = spec.rpartition(":")[2]
        if flag in " +*=-":
            results[ref] = PushResult(ref, "ok", summary)
        elif "stale info" in summary:
            results[ref] = PushResult(ref, "stale", summary)
        else:
            results[ref] = PushResult(ref, "rejected", summary)
    return results


def pkt_line(text: str) -> bytes:
    """One pkt-line of git's wire protocol: its length in four hex digits, then `text`."""
    data = text.encode()
    return b"%04x" % (len(data) + 4) + data
