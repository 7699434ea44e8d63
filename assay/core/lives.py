"""Process lives: a record names one run of one process, not a pid that may be reused.

A life is (host, boot id, pid, start time). On Linux the start time is field 22
of `/proc/<pid>/stat` (clock ticks since boot) and the boot id is
`/proc/sys/kernel/random/boot_id`; where they cannot be read they are None.

| the life                                  | judged here as                                    |
|-------------------------------------------|---------------------------------------------------|
| on another host                           | unknown: no evidence either way                   |
| same host, another boot                   | dead                                              |
| pid gone, a zombie, or another start time | dead                                              |
| pid there, not a zombie, same start       | alive                                             |
| no start recorded (an older record)       | alive if the pid is there and is not a zombie     |
| no /proc here                             | alive if `kill(pid, 0)` finds the pid             |
| pid there but hidden from /proc           | unknown                                           |

"Running now" is said only of a life judged alive.
"""

from __future__ import annotations

import _thread
import functools
import os
import re
import select
import time
from collections.abc import Callable, Mapping

from assay.core.records.recordtype import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from threading import Thread
    from typing import Any, Literal, TypeGuard

    LifeState = Literal["alive", "dead", "unknown"]

PROC = "/proc"
BOOT_PREFIX = 8  # a boot id shortened to this many characters still tells boots apart
_BOOT = re.compile(r"[0-9a-f][0-9a-f-]{7,35}")
_GONE_STATES = frozenset("ZXx")  # zombie, dead (x: older kernels)


@dataclass(frozen=True)
class Life:
    """One life of one process. `boot` may be a prefix of the boot id (at least 8 characters)."""

    host: str
    pid: int
    start: int | None = None
    boot: str | None = None

    def to_data(self) -> dict[str, Any]:
        """For a record: `host`, `pid`, and `start`, `boot` when known."""
        data: dict[str, Any] = {"host": self.host, "pid": self.pid}
        if self.start is not None:
            data["start"] = self.start
        if self.boot is not None:
            data["boot"] = self.boot
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Life | None:
        """The life a record names; None when it names no usable host and pid."""
        host, pid = data.get("host"), data.get("pid")
        if not isinstance(host, str) or not _is_count(pid) or pid < 1:
            return None
        start = data.get("start")
        boot = data.get("boot")
        return cls(host, pid, start if _is_count(start) else None,
                   boot if isinstance(boot, str) and _BOOT.fullmatch(boot) else None)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class _Stat:
    state: str
    start: int


def _read_stat(pid: int) -> _Stat | None:
    """State and start time from /proc/<pid>/stat; None when there is no such entry we may read."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            text = stat.read()
    except OSError:  # gone; or hidden from us (hidepid), which `life_state` tells apart
        return None
    # the command name in parentheses may hold spaces and ')': the fields start after the last ')'
    fields = text[text.rfind(")") + 1:].split()
    try:
        return _Stat(fields[0], int(fields[19]))  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP, a debugger): its state in /proc, `T` or `t`."""
    stat = _read_stat(pid) if pid > 0 else None
    return stat is not None and stat.state in ("T", "t")


@functools.cache
def _have_proc() -> bool:
    return os.path.isfile(f"{PROC}/self/stat")


@functools.cache
def boot_id() -> str | None:
    try:
        with open(f"{PROC}/sys/kernel/random/boot_id") as boot:
            text = boot.read().strip()
    except OSError:
        return None
    return text if _BOOT.fullmatch(text) else None


def life_of(pid: int) -> Life | None:
    """The life pid has now on this host; None when it has none we can see (gone, a zombie, hidden)."""
    host = os.uname().nodename
    if not _have_proc():
        return Life(host, pid) if pid_exists(pid) else None
    stat = _read_stat(pid)
    if stat is None or stat.state in _GONE_STATES:
        return None
    return Life(host, pid, stat.start, boot_id())


_mine: Life | None = None
_hosted: dict[int, Life] = {}  # thread -> the life of the desk it works for, where desks are threads (`hosted`)


def this_life() -> Life:
    """This process's life, computed once per process (a forked child computes its own); in a desk that is a
    thread of a host's process (`desk/hosted.py`), and in the threads it starts (`thread`), that desk's: its
    thread's life (Linux gives a thread an id from the pids' space and a `/proc/<id>/stat` of its own), which
    ends when the desk does, whatever the process does."""
    if _hosted:
        hosted = _hosted.get(_thread.get_ident())
        if hosted is not None:
            return hosted
    global _mine
    if _mine is None or _mine.pid != os.getpid():
        _mine = life_of(os.getpid()) or Life(os.uname().nodename, os.getpid())
    return _mine


def host_here() -> Life | None:
    """Make the calling thread a desk's own (its life, `this_life`'s answer in it and in the threads it starts),
    until `unhost`: its own thread's. None where the system shows none (no /proc), or the thread is the process's
    main one: then nothing changes."""
    tid = _thread.get_native_id()
    life = life_of(tid) if tid != os.getpid() else None
    if life is not None and life.start is None:  # (no /proc: a thread's id alone could name a later one)
        life = None
    if life is not None:
        _hosted[_thread.get_ident()] = life
    return life


def unhost() -> None:
    _hosted.pop(_thread.get_ident(), None)


def own_tag() -> str:
    """A part of a temporary file's name that no other thread here uses now (its pid, and its thread's id: the
    desks of a host may be threads of one process)."""
    return f"{os.getpid()}.{_thread.get_native_id()}"


def thread(target: Callable[..., object], *args: object) -> Thread:
    """A daemon thread running `target(*args)` for the desk whose thread starts it: `this_life` in it is that
    desk's (the step server's threads journal as their desk, as they do in a desk that is a process)."""
    import threading

    life = _hosted.get(_thread.get_ident())
    if life is None:
        return threading.Thread(target=target, args=args, daemon=True)

    def run() -> None:
        _hosted[_thread.get_ident()] = life
        try:
            target(*args)
        finally:
            _hosted.pop(_thread.get_ident(), None)
    return threading.Thread(target=run, daemon=True)


def life_state(life: Life) -> LifeState:
    """Whether `life` is still running, judged from this host."""
    if life.host != os.uname().nodename or life.pid < 1:
        return "unknown"
    here = boot_id()
    if life.boot is not None and here is not None and not here.startswith(life.boot):
        return "dead"
    if not _have_proc():
        return "alive" if pid_exists(life.pid) else "dead"
    stat = _read_stat(life.pid)
    if stat is None:  # gone, or hidden from us (/proc mounted with hidepid, another pid namespace)
        return "unknown" if pid_exists(life.pid) else "dead"
    if stat.state in _GONE_STATES or (life.start is not None and stat.start != life.start):
        return "dead"
    return "alive"


def is_running(life: Life) -> bool:
    return life_state(life) == "alive"


def await_end(life: Life, timeout_s: float) -> bool:
    """Wait until `life` is no longer judged alive (True), or `timeout_s` has passed (False).

    Waits on a pidfd (readable once the process has ended) where Linux gives one, so the wait is an event.
    """
    deadline = time.monotonic() + timeout_s
    try:
        fd: int | None = os.pidfd_open(life.pid)
    except (OSError, AttributeError):
        fd = None
    poller = select.poll()  # (not select: a host of many desks numbers its descriptors past 1,023)
    if fd is not None:
        poller.register(fd, select.POLLIN)
    try:
        while is_running(life):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd is not None:
                poller.poll(max(1, int(left * 1000)))
            else:
                time.sleep(min(0.05, left))
        return True
    finally:
        if fd is not None:
            os.close(fd)


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid runs on this host (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def flock_within(fd: int, wait_s: float) -> bool:
    """An exclusive `flock` on `fd` (let go by the kernel however its holder's life ends), waited for up to
    `wait_s`: whether it was had. A holder paused (SIGSTOP) keeps it: the caller decides what a wait in vain means.
    Waited for by looking, less often as the wait goes on: nothing wakes a waiter as it is let go."""
    import fcntl

    deadline, pause = time.monotonic() + wait_s, 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(0.05, pause * 2)
