"""Stops of desks that are threads of one process (`desk/hosted.py`).

A signal reaches a process's main thread only. A desk that is a process raises its stop (Ctrl-C, SIGTERM,
SIGHUP) from its signal handler; a desk that is a thread of a host process is handed it by the host's main thread
(`stop`: it took the signal) and raises it itself, at its next wait of its own (`check`: its idle wait, its agent's
run, a command's end, each woken by the stop itself: each desk has a pipe the stop writes a byte to, which its
waits watch beside what they wait for; a wait on the forge, a git process or a push waiting for its group, is not
cut short), as the same exception:
KeyboardInterrupt named by the signal (Ctrl-C's unnamed), or Cancelled for SIGTERM while a step's effect runs
(`cancelling`, as `steps._sigterm_as_cancel` makes it). A stop is never raised inside a write (it is raised where
the desk waits), and one that comes while a step's intent is journaled is handed to that step (`holding`), which
ends it unbegun. In any other thread (a desk that is a process, the threads a desk starts) these are no-ops.
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (the step client's start-up)
if TYPE_CHECKING:
    import subprocess

TICK_S = 30.0  # the longest a desk that is a thread waits without looking for its stop (its pipe wakes it first)


class _Desk:
    __slots__ = ("pending", "holds", "cancelling", "wake")

    def __init__(self) -> None:
        self.pending: list[int] = []  # stops handed to the desk, not raised yet
        self.holds: list[list[int]] = []  # the steps' `held` lists, innermost last
        self.cancelling = 0
        self.wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # a byte each stop: its waits wake at once, not by looking


_desks: dict[int, _Desk] = {}  # thread -> its desk's stops, for each thread that is a desk
_pipes = _thread.RLock()  # held while a stop writes to a desk's pipe and while a desk's pipe closes: a byte never
# goes to a descriptor its number was given again (reentrant: the thread that hands stops on takes signals)


def host() -> None:
    """The calling thread is a desk: stops are handed to it (`stop`) and raised in it (`check`)."""
    _desks[_thread.get_ident()] = _Desk()


def unhost() -> None:
    with _pipes:
        desk = _desks.pop(_thread.get_ident(), None)
        if desk is not None:
            for fd in desk.wake:
                os.close(fd)


def waker() -> int | None:
    """The descriptor the calling desk's stops make readable (None in any thread that is not a desk): a wait that
    watches it beside what it waits for ends when a stop comes, then `check` raises it."""
    desk = _desks.get(_thread.get_ident())
    if desk is None:
        return None
    try:  # drained before the caller's `check`: a stop after it leaves its byte, and the wait ends at once
        os.read(desk.wake[0], 4096)
    except OSError:  # (BlockingIOError: nothing there)
        pass
    return desk.wake[0]


def hosted() -> bool:
    """Whether the calling thread is a desk that is a thread (its stops come from `stop`, not a signal)."""
    return _thread.get_ident() in _desks


def stop(ident: int, sig: int) -> None:
    """Hand stop `sig` to the desk that is thread `ident` (from the thread that took the signal)."""
    with _pipes:
        desk = _desks.get(ident)
        if desk is not None:
            desk.pending.append(sig)
            try:
                os.write(desk.wake[1], b"!")
            except OSError:  # (BlockingIOError: a full pipe wakes its desk as well)
                pass


def nudge() -> None:
    """Wake every desk that is a thread of this process from its wait, stopping none: each looks again at what it
    waits for (the host's watcher, having touched the `wake` file its idle desks wait on)."""
    with _pipes:
        for desk in list(_desks.values()):  # (a desk thread may begin meanwhile)
            try:
                os.write(desk.wake[1], b".")
            except OSError:  # a full pipe wakes its desk as well
                pass


def check() -> None:
    """Raise the stop handed to the calling desk, if one was and no step's intent is being journaled."""
    desk = _desks.get(_thread.get_ident())
    if desk is None or not desk.pending or desk.holds:
        return
    sig = desk.pending[0]
    desk.pending.clear()
    if sig == signal.SIGTERM and desk.cancelling:
        from assay.errors import Cancelled

        raise Cancelled()
    raise KeyboardInterrupt(*(() if sig == signal.SIGINT else (signal.Signals(sig).name,)))


def sleep(seconds: float) -> None:
    """`time.sleep`, in a desk that is a thread looking for its stop as it sleeps."""
    if not hosted():
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        wake = waker()
        check()
        readable([] if wake is None else [wake], min(TICK_S, left))
    check()


def wait_process(proc: subprocess.Popen[str]) -> int:
    """`proc.wait()`, in a desk that is a thread looking for its stop as it waits: woken by the process's end (a
    pidfd) or a stop (its pipe), never by a clock (`Popen.wait` with a timeout would look every 50 ms, and a look
    every quarter second did as much: a host's desks, each waiting for its agent, kept its interpreter busy)."""
    if not hosted():
        return proc.wait()
    try:
        fd: int | None = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):  # gone already (reaped), or no pidfd here: look every quarter second
        fd = None
    try:
        while (code := proc.poll()) is None:
            wake = waker()
            check()
            watched = [f for f in (fd, wake) if f is not None]
            # no pidfd: the process's end is seen at the next look, a quarter second on (a stop at once)
            readable(watched, TICK_S if fd is not None else 0.25)
        return code
    finally:
        if fd is not None:
            os.close(fd)


def readable(fds: list[int], timeout_s: float | None) -> list[int]:
    """The descriptors of `fds` ready to read (or at their end) within `timeout_s` (None: no limit); `poll`, not
    `select`: a host of many desks numbers its descriptors past `select`'s 1,023. (It imports nothing: a keeper
    forked from a threaded desk calls it.)"""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    # (a signal is retried by `poll` itself, PEP 475, unless its handler raises)
    return [fd for fd, _ in poller.poll(None if timeout_s is None else min(max(0, int(timeout_s * 1000)), 2 ** 31 - 1))]


@contextmanager
def holding(held: list[int]) -> Iterator[None]:
    """While a step's intent is journaled: a stop handed to this desk waits, and is put in `held` after (the step
    ends unbegun)."""
    desk = _desks.get(_thread.get_ident())
    if desk is None:
        yield
        return
    desk.holds.append(held)
    try:
        yield
    finally:
        desk.holds.pop()
        if not desk.holds and desk.pending:
            held.extend(desk.pending[:1])
            desk.pending.clear()


@contextmanager
def cancelling() -> Iterator[None]:
    """While a step's effect runs: SIGTERM is raised as Cancelled (its end is journaled)."""
    desk = _desks.get(_thread.get_ident())
    if desk is None:
        yield
        return
    desk.cancelling += 1
    try:
        yield
    finally:
        desk.cancelling -= 1
