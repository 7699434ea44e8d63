"""The pushes of one host's processes to one forge, made together (group commit).

With `ASSAY_PUSH_WINDOW_S` set (`assay desk run --count N` sets it for its desks), a push goes through the folder
`pushes/` of the forge's cache, which every process of the host using that cache shares (their commits are
already in its object store). A process writes its request (`<id>.req`: its ref updates, whether atomic) and
takes the folder's lock (`flock`, released by the kernel when its holder dies). Whoever has the lock answers:

- if its own request was answered meanwhile (`<id>.out`), it reads the answer and goes;
- else it leads a round: it waits the window (0 s: only requests made while the last round pushed share this
  one), then pushes every request waiting, at most one per ref (a later one waits for the next round), as one
  atomic push, and writes each requester its outcome before it lets the lock go. A request whose leases the
  forge no longer matches (read once for the round: a claim race lost, say), or all of them if the forge refuses
  the push, is pushed on its own, so each is fenced on its own as if it had pushed alone.

So 20 desks of a host, each pushing when it must, make one push a round instead of 20. Nothing is lost or
made twice: a leader killed mid-round leaves the requests it held, and the next leader pushes them again,
where each lease lets it land once (a ref already at its new commit reads as landed); a requester that
cannot have the lock within `window + LOCK_WAIT_S` (a leader paused holding it) withdraws its request and
pushes alone, and a paused leader that resumes and pushes it too is refused by its lease. A requester that
died is pushed for anyway: as for a desk killed after its push, the journal says what it meant.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from assay.core.crash import crash_point
from assay.errors import ForgeError

LOCK_WAIT_S = 30.0  # beyond the window, the longest a requester waits for the lock before it pushes alone
POLL_S = 0.01
STALE_S = 600.0  # answers and requests older than this are litter (their process is gone)

Update = tuple[str, str, str]  # ref, new, expected
Results = dict[str, tuple[str, str]]  # ref -> (status, detail)
Direct = Callable[[Sequence[Update], bool], Results]  # push these updates now, alone
Read = Callable[[Sequence[str]], dict[str, str]]  # the forge's tips of these refs now (absent: no such ref)
ZERO = "0" * 40


def window() -> float | None:
    """The host's push window in seconds, or None when pushes are not grouped."""
    raw = os.environ.get("ASSAY_PUSH_WINDOW_S", "").strip()
    if not raw:
        return None
    try:
        return max(0.0, min(float(raw), 60.0))
    except ValueError:
        return None


def push(folder: str, updates: Sequence[Update], atomic: bool, direct: Direct, read: Read, wait_s: float) -> Results:
    """Push `updates` with the host's other requests to the same forge (see the module's text); each ref's
    (status, detail) as `direct` would say it. Raises ForgeError as `direct` does when the outcome is unknown."""
    os.makedirs(folder, exist_ok=True)
    rid = f"{os.getpid()}-{secrets.token_hex(6)}"
    req, out = os.path.join(folder, f"{rid}.req"), os.path.join(folder, f"{rid}.out")
    _write(req, {"updates": [list(u) for u in updates], "atomic": atomic, "at": time.time()})
    fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if os.path.exists(out):  # answered by the leader, who still holds the lock for the others
                    return _answer(out)
                if time.monotonic() >= deadline:  # a leader paused holding the lock: alone, withdrawn first
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(req)
                    return direct(updates, atomic)
                time.sleep(POLL_S)
        if os.path.exists(out):
            return _answer(out)
        if wait_s:
            time.sleep(wait_s)  # the window: others' requests gather while this one waits
        _lead(folder, rid, direct, read)
        return _answer(out)
    finally:
        os.close(fd)


def _lead(folder: str, own: str, direct: Direct, read: Read) -> None:
    """One round: the waiting requests (this one first, then by age), one per ref, those whose leases the forge
    matches now pushed as one."""
    waiting: list[tuple[str, dict[str, Any]]] = []
    now = time.time()
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".out") and now - _mtime(path) > STALE_S:
            with contextlib.suppress(OSError):
                os.unlink(path)  # an answer whose requester is gone
        if not name.endswith(".req") or os.path.exists(path[:-4] + ".out"):
            continue
        data = _read(path)
        if data is None or now - float(data.get("at", 0)) > STALE_S:
            with contextlib.suppress(OSError):
                os.unlink(path)  # junk, or a request older than any push waits
            continue
        waiting.append((name[:-4], data))
    waiting.sort(key=lambda w: (w[0] != own, float(w[1].get("at", 0))))
    taken: list[tuple[str, list[Update], bool]] = []
    refs: set[str] = set()
    for rid, data in waiting:
        updates = [(str(u[0]), str(u[1]), str(u[2])) for u in data.get("updates", [])]
        if not updates or refs & {u[0] for u in updates}:
            continue  # one update per ref a push: this request goes in the next round
        refs |= {u[0] for u in updates}
        taken.append((rid, updates, bool(data.get("atomic"))))
    answers: dict[str, dict[str, Any]] = {}
    try:  # a lease the forge no longer matches (a claim race lost, a push a dead leader made) is settled alone
        now_at = read(sorted(refs)) if len(taken) > 1 else {}
    except ForgeError:
        now_at = {}
    fits = [t for t in taken if all(now_at.get(ref, ZERO) == expected for ref, _, expected in t[1])]
    together = [u for _, updates, _ in fits for u in updates]
    crash_point("push-group.before-push")
    try:
        landed = direct(together, True) if len(fits) > 1 else None
    except ForgeError:
        landed = None
    alone = taken
    if landed is not None and all(status == "ok" for status, _ in landed.values()):
        answers = {rid: {"results": {u[0]: landed[u[0]] for u in updates}} for rid, updates, _ in fits}
        alone = [t for t in taken if t not in fits]
    if alone:  # refused together (a lease moved meanwhile), or not to go together: each on its own, fenced alone
        for rid, updates, atomic in alone:
            try:
                answers[rid] = {"results": direct(updates, atomic)}
            except ForgeError as exc:
                answers[rid] = {"error": exc.message, "hint": exc.hint}
    crash_point("push-group.after-push")
    for rid, answer in answers.items():
        _write(os.path.join(folder, f"{rid}.out"), answer)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, f"{rid}.req"))


def _answer(out: str) -> Results:
    data = _read(out) or {}
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out)
    if "error" in data:
        raise ForgeError(str(data["error"]), hint=str(data.get("hint") or ""))
    results = data.get("results")
    if not isinstance(results, dict):
        raise ForgeError("a grouped push left no readable outcome", hint="run the command again: it re-reads the forge")
    return {str(ref): (str(r[0]), str(r[1])) for ref, r in results.items()}


def _write(path: str, data: dict[str, Any]) -> None:
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(partial, path)


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()
