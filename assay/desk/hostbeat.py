"""One heartbeat for every desk on this host: one push renews every claim whose agent runs here.

Each agent run's heartbeat (`agent.Heartbeat`) is a member while its agent runs: a file `<brief>.json` in the
forge's state folder (`beats/`), holding its desk, epoch, holder, heartbeat and progress, which the member's own
heartbeat thread writes again each time it comes due (its check-in). When a member comes due, it takes the host's
lock (`beats/.lock`) and reads the last batch (`beats/.last`): if that batch renewed its claim within half a
heartbeat, it is done (and sets its next beat by the batch's); else it renews, in one atomic push
(`Claims.renew_all`, crash points `renew-batch.*`), the claim of every member that checked in lately (once a
member's own push moved its claim under the batch, those renewed within half a heartbeat are left out of the next
try: busy desks push their journals as the batch goes), and writes the batch's outcome for the others to read.
So a host's desks renew their claims with one push a heartbeat, however many there are.

Only members whose process life is alive on this host, not stopped, and whose own thread checked in within
`CHECK_IN` of a heartbeat (not in the future) are renewed: a desk paused (SIGSTOP) or killed is left out, and its
lease runs out as it would alone. Junk among the member files is skipped. A member that cannot have the lock
within `LOCK_WAIT_S` (another paused holding it), or whose batch the forge refuses, renews its own claim alone.
Each claim is fenced on its own: a member whose claim was taken, released or fenced meanwhile reads so in the
batch's outcome and stops its agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assay.core.claims import Claims, holder_life
from assay.core.lives import flock_within, is_stopped, life_state, own_tag
from assay.core.records import validate_brief_id
from assay.errors import AssayError, Conflict, ForgeRefused

CHECK_IN = 1.5  # a member renewed by another's batch must have checked in within this many of its heartbeats
LOCK_WAIT_S = 10.0  # the longest a member waits for the host's lock (at most half its heartbeat) before it renews alone
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
        partial = self.path.with_name(f".{self.path.name}.{own_tag()}")
        partial.write_text(json.dumps(data), encoding="utf-8")
        partial.replace(self.path)

    def leave(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

    def beat(self, claims: Claims, progress: str = "") -> tuple[str | None, float]:
        """Renew this member's claim, with every other member's in the same push, unless a batch did lately.
        (None, or why it was not renewed: "fenced: …" if the claim is no longer its own, "" to try again later;
        and the wall-clock time of the batch that renewed it.) A host's lock not had within `LOCK_WAIT_S` (a
        member paused holding it, a slow push), junk among the members or a batch the forge refuses: this claim
        is renewed alone. Raises as a renewal does when the forge cannot take the push."""
        with _locked(self.folder / ".lock", min(LOCK_WAIT_S, self.heartbeat_s / 2)) as held_lock:
            if not held_lock:
                return self._alone(claims, progress), time.time()
            last = _read(self.folder / ".last")
            claims_said = last.get("claims")
            mine = claims_said.get(self.brief) if isinstance(claims_said, dict) else None
            at = _number(last.get("at"))
            if isinstance(mine, dict) and mine.get("epoch") == self.epoch and at is not None and \
                    0 <= time.time() - at < FRESH * self.heartbeat_s:  # a clock stepped back reads nothing fresh
                return (None if mine.get("ok") else str(mine.get("why", ""))), at
            held = [(self.brief, self.desk, self.epoch, progress)]
            held += [(m["brief"], m["desk"], m["epoch"], m["progress"]) for m in _members(self.folder)
                     if m["brief"] != self.brief and _beating(m)]
            now = time.time()
            try:
                results = claims.renew_all(held, fresh_s=FRESH * self.heartbeat_s)
            except ForgeRefused:  # one claim's ref refused takes the batch with it: each renews itself
                return self._alone(claims, progress), now
            outcome = {brief: _said(results.get(brief), epoch) for brief, _, epoch, _ in held}
            _write(self.folder / ".last", {"at": now, "claims": outcome})
        said = outcome[self.brief]
        return (None if said["ok"] else str(said["why"])), now

    def _alone(self, claims: Claims, progress: str) -> str | None:
        try:
            claims.renew(self.brief, self.desk, epoch=self.epoch, progress=progress)
        except Conflict as exc:
            return f"fenced: {exc.message}"
        return None


def _said(result: Any, epoch: int) -> dict[str, Any]:
    if result is None:
        return {"ok": False, "why": "", "epoch": epoch}
    if isinstance(result, AssayError):
        fenced = isinstance(result, Conflict)
        return {"ok": False, "why": f"fenced: {result.message}" if fenced else "", "epoch": epoch}
    return {"ok": True, "epoch": epoch}


def _members(folder: Path) -> list[dict[str, Any]]:
    """The members' files that read whole and well-formed (junk is left out, never renewed)."""
    out = []
    for path in sorted(folder.glob("*.json")):
        data = _read(path)
        brief, desk, holder = data.get("brief"), data.get("desk"), data.get("holder")
        epoch, beat, at = data.get("epoch"), _number(data.get("heartbeat_s")), _number(data.get("at"))
        if not (isinstance(brief, str) and isinstance(desk, str) and isinstance(holder, str) and
                isinstance(epoch, int) and not isinstance(epoch, bool) and beat and at is not None):
            continue
        try:
            validate_brief_id(brief)
        except AssayError:
            continue
        progress = data.get("progress")
        out.append({"brief": brief, "desk": desk, "holder": holder, "epoch": epoch, "heartbeat_s": beat, "at": at,
                    "progress": progress if isinstance(progress, str) else ""})
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _beating(member: dict[str, Any]) -> bool:
    """A member whose process is alive here, not stopped (SIGSTOP), and whose own heartbeat checked in lately
    (and not in the future: a clock stepped back vouches for nothing)."""
    age = time.time() - member["at"]
    if not 0 <= age <= CHECK_IN * member["heartbeat_s"]:
        return False
    life = holder_life(member["holder"])
    return life is not None and life.host == os.uname().nodename and life_state(life) == "alive" and \
        not is_stopped(life.pid)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.{own_tag()}")
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)


@contextlib.contextmanager
def _locked(path: Path, wait_s: float) -> Iterator[bool]:
    """The host's heartbeat lock (`flock`: released by the kernel when its holder dies), waited for up to
    `wait_s`: True if had, False if not (a member paused holding it must not stop every other's heartbeat)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield flock_within(fd, wait_s)
    finally:
        os.close(fd)
