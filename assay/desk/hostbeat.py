"""One heartbeat for every desk on this host: one push renews every claim whose agent runs here.

Each agent run's heartbeat (`agent.Heartbeat`) is a member while its agent runs: a file `<brief>.json` in the
forge's state folder (`beats/`), holding its desk, epoch, holder, heartbeat and progress, which the member's own
heartbeat thread writes again each time it comes due (its check-in). When a member comes due, it takes the host's
lock (`beats/.lock`) and reads the last batch (`beats/.last`): if that batch renewed its claim within half a
heartbeat, it is done (and sets its next beat by the batch's); else it renews, in one atomic push
(`Claims.renew_all`, crash points `renew-batch.*`), the claim of every member that checked in lately, and
writes the batch's outcome for the others to read. So a host's desks renew their claims with one push a
heartbeat, however many there are.

Only members whose process life is alive on this host and whose own thread checked in within `CHECK_IN` of a
heartbeat are renewed: a desk paused (SIGSTOP) or killed stops checking in, its claim stops being renewed, and
its lease runs out as it would alone. Each claim is fenced on its own: a member whose claim was taken, released
or fenced meanwhile reads so in the batch's outcome and stops its agent.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assay.core.claims import Claims, holder_life
from assay.core.lives import life_state
from assay.errors import AssayError, Conflict

CHECK_IN = 1.5  # a member renewed by another's batch must have checked in within this many of its heartbeats
FRESH = 0.5  # a batch that renewed a member within this part of its heartbeat spares it its own


class Member:
    """One agent run's claim in the host's heartbeat."""

    def __init__(self, folder: Path, brief: str, desk: str, epoch: int, holder: str, heartbeat_s: float) -> None:
        self.folder, self.brief, self.desk, self.epoch = folder, brief, desk, epoch
        self.holder, self.heartbeat_s = holder, heartbeat_s
        self.path = folder / f"{brief}.json"

    def check_in(self, progress: str = "") -> None:
        """Say this member still beats (its own thread, each time it comes due), with its progress now."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {"brief": self.brief, "desk": self.desk, "epoch": self.epoch, "holder": self.holder,
                "heartbeat_s": self.heartbeat_s, "progress": progress, "at": time.time()}
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(json.dumps(data), encoding="utf-8")
        partial.replace(self.path)

    def leave(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

    def beat(self, claims: Claims) -> tuple[str | None, float]:
        """Renew this member's claim, with every other member's in the same push, unless a batch did lately.
        (None, or why it was not renewed: "fenced: …" if the claim is no longer its own, "" to try again later;
        and the wall-clock time of the batch that renewed it.) Raises as a renewal does when the forge cannot
        take the push."""
        with _locked(self.folder / ".lock"):
            last = _read(self.folder / ".last")
            mine = last.get("claims", {}).get(self.brief)
            at = float(last.get("at", 0))
            if isinstance(mine, dict) and mine.get("epoch") == self.epoch and \
                    time.time() - at < FRESH * self.heartbeat_s:
                return (None if mine.get("ok") else str(mine.get("why", ""))), at
            members = [m for m in _members(self.folder) if m["brief"] != self.brief and _beating(m)]
            mine_now = _read(self.path)
            held = [(self.brief, self.desk, self.epoch, str(mine_now.get("progress", "")))]
            held += [(str(m["brief"]), str(m["desk"]), int(m["epoch"]), str(m.get("progress", ""))) for m in members]
            now = time.time()
            results = claims.renew_all(held)
            outcome = {brief: _said(results.get(brief), epoch) for brief, _, epoch, _ in held}
            _write(self.folder / ".last", {"at": now, "claims": outcome})
        said = outcome[self.brief]
        return (None if said["ok"] else str(said["why"])), now


def _said(result: Any, epoch: int) -> dict[str, Any]:
    if result is None:
        return {"ok": False, "why": "", "epoch": epoch}
    if isinstance(result, AssayError):
        fenced = isinstance(result, Conflict)
        return {"ok": False, "why": f"fenced: {result.message}" if fenced else "", "epoch": epoch}
    return {"ok": True, "epoch": epoch}


def _members(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob("*.json")):
        data = _read(path)
        if all(k in data for k in ("brief", "desk", "epoch", "holder", "heartbeat_s", "at")):
            out.append(data)
    return out


def _beating(member: dict[str, Any]) -> bool:
    """A member whose process is alive here and whose own heartbeat checked in lately."""
    try:
        fresh = time.time() - float(member["at"]) <= CHECK_IN * float(member["heartbeat_s"])
    except (TypeError, ValueError):
        return False
    life = holder_life(str(member["holder"]))
    return fresh and life is not None and life.host == os.uname().nodename and life_state(life) == "alive"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The host's heartbeat lock (`flock`: released by the kernel when its holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
