"""One GitHub write budget per token, shared by every desk of the fleet through a ref on the forge.

GitHub's secondary limits are per identity: 80 content-creating requests a minute and 500 an hour,
however many desks share the token. Each desk takes writes from a ledger, `refs/assay/budget/<token hash>`
(a commit holding `ledger.json`: the grants of the last hour), in blocks: a grant of up to `BLOCK` writes is
pushed with a compare-and-swap on the ledger's tip, so two desks never both take the last writes of a minute,
and the writes of a block cost no round trip of their own. Near the limit blocks shrink to a quarter of the room
left (at least one write), so what a desk takes and does not use wastes little of the minute. A grant counts in
full from when it was taken, used or not, and is used only for `GRANT_S` seconds; so a minute's writes never
exceed what its grants allow.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from assay.core.forge.etags import token_identity
from assay.core.git import ZERO, ForgeGit, RefUpdate, Signature, TreeEntry

BUDGET_REF = "refs/assay/budget/"
PER_MINUTE, PER_HOUR = 80, 500  # GitHub's secondary limits on content-creating requests, per identity
SHARE = 0.9  # of each limit the fleet takes: writes made with the token outside Assay get the rest
BLOCK = 8  # writes one grant takes at most: about one brief's content-creating requests
GRANT_S = 20.0  # a grant's writes are made within this long of taking it, or not at all
TRIES = 8  # compare-and-swap attempts on a ledger other desks keep moving


@dataclass(frozen=True)
class Limits:
    """How many content-creating requests the fleet makes per window (seconds)."""

    per_minute: int = int(PER_MINUTE * SHARE)
    per_hour: int = int(PER_HOUR * SHARE)
    minute_s: float = 60.0
    hour_s: float = 3600.0

    @classmethod
    def from_env(cls) -> Limits:
        """`ASSAY_GITHUB_BUDGET=MINUTE/HOUR` (say `72/450`): a token shared with other tools leaves them room."""
        given = os.environ.get("ASSAY_GITHUB_BUDGET", "").strip()
        if not given:
            return cls()
        minute, _, hour = given.partition("/")
        return cls(max(1, int(minute)), max(1, int(hour or PER_HOUR)))


@dataclass(frozen=True)
class Grant:
    at: float
    n: int
    holder: str


class ForgeBudget:
    """The writes this process may make with its token: `wait_s()` is 0 when one may go now (and takes it), else
    how long until the fleet's ledger has room. Receives the forge's git, the token's identity and the clock."""

    def __init__(self, git: ForgeGit, identity: str, holder: str, limits: Limits | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.git, self.ref, self.holder = git, BUDGET_REF + identity, holder
        self.limits = limits or Limits()
        self.clock = clock
        self._left, self._until = 0, 0.0  # writes left of this process's grant, and until when
        self.pushes = 0  # grants taken (a push each), for the benchmark and tests

    def wait_s(self, wanted: int = 1) -> float:
        """Take one write: 0.0 when taken (from this process's grant, or a new one), else the seconds to wait."""
        now = self.clock()
        if self._left > 0 and now < self._until:
            self._left -= 1
            return 0.0
        for _ in range(TRIES):
            tip = self.git.ls_remote(self.ref).get(self.ref, ZERO)
            grants = self._read(tip)
            room, wait = self._room(grants, now)
            if room <= 0:
                return wait
            n = min(room, max(wanted, min(BLOCK, room // 4)))  # blocks while there is room; one by one near the end
            kept = [g for g in grants if g.at > now - self.limits.hour_s - GRANT_S]
            if self.git.push([RefUpdate(self.ref, self._write([*kept, Grant(now, n, self.holder)]), tip)])[
                    self.ref].ok:
                self.pushes += 1
                self._left, self._until = n - 1, now + GRANT_S
                return 0.0
        return 1.0  # other desks kept taking: look again in a moment

    def _room(self, grants: list[Grant], now: float) -> tuple[int, float]:
        """Writes the ledger has room for now, and when there is room again if none."""
        room, wait = 1 << 30, 0.0
        for limit, window in ((self.limits.per_minute, self.limits.minute_s),
                              (self.limits.per_hour, self.limits.hour_s)):
            counted = sorted((g for g in grants if g.at > now - window - GRANT_S), key=lambda g: g.at)
            used = sum(g.n for g in counted)
            room = min(room, limit - used)
            if used >= limit:  # room again once enough of the oldest grants age out of the window
                freed, at = used, now
                for g in counted:
                    freed, at = freed - g.n, g.at + window + GRANT_S
                    if freed < limit:
                        break
                wait = max(wait, at - now + 0.01)
        return room, wait

    def _read(self, tip: str) -> list[Grant]:
        if tip == ZERO:
            return []
        self.git.ensure_objects({self.ref: tip}, whole=False)
        [data] = self.git.read_objects([f"{tip}:ledger.json"])
        try:
            record = json.loads(data or b"{}")
            return [Grant(float(at), int(n), str(holder)) for at, n, holder in record.get("grants") or []]
        except (ValueError, TypeError, RecursionError):
            return []  # an unreadable ledger is replaced: the limits hold again from the next grant

    def _write(self, grants: list[Grant]) -> str:
        blob = self.git.write_blob(json.dumps({"v": 1, "grants": [[round(g.at, 3), g.n, g.holder] for g in grants]},
                                              separators=(",", ":")).encode())
        tree = self.git.write_tree([TreeEntry("ledger.json", blob, "100644")])
        who = Signature.of("assay budget")
        return self.git.write_commit(tree, [], f"budget: {grants[-1].n} writes for {grants[-1].holder}", who)


def fleet_budget(git: ForgeGit, token: str) -> ForgeBudget | None:
    """The budget of `token` on this forge; None when `ASSAY_GITHUB_BUDGET=off` (a token no fleet shares)."""
    if os.environ.get("ASSAY_GITHUB_BUDGET", "").strip().lower() == "off":
        return None
    import socket

    return ForgeBudget(git, token_identity(token), f"{socket.gethostname()}/{os.getpid()}", Limits.from_env())
