"""How a requester of a host's push, listing or fetch group waits for its answer: asleep until a leader rings.

A requester makes a FIFO beside its request (`<id>.bell`), opened to read and to write (so it never reads as
ended) and non-blocking, and sleeps in `poll` on it. A leader rings every bell in the folder once it has let the
folder's lock go, its requests answered: each waiter then finds its answer, or takes the lock and leads the next
round. A waiter so wakes about once a round, not each few milliseconds while a slow forge keeps it waiting (a host
of 20 desks, each with a push, a listing or a fetch waiting at the forge's pace, kept its interpreter busy
looking). A ring that never comes (a leader killed mid-round) is made up by the waiter's own look at least each
`RING_MAX_S`. A bell that cannot be had (no FIFOs here; something else planted in its place: any writer of the
cache can) leaves the waiter looking on its clock, as it did before it had a bell; a ring writes only to a FIFO,
never waits for one, and a bell planted without a reader is passed over. Whoever held the folder's lock rings as it
lets go (a leader, or a requester that took the lock to find its answer there), and a push round's leader also
as soon as its answers are written.
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import time

BELL = ".bell"  # a requester's FIFO: `<id>.bell`
RING_MAX_S = 1.0  # the longest a waiter with a bell sleeps between two looks of its own
MIN_S = 0.01  # the shortest: a bell flooded wakes its waiter no faster than this


def listen(folder: str, rid: str) -> int | None:
    """Request `rid`'s bell, made in `folder` and open to wait on; None where none can be had."""
    path = os.path.join(folder, rid + BELL)
    try:
        os.mkfifo(path, 0o600)  # a new name: anything already there was planted, and is not waited on
    except OSError:
        return None
    fd = open_fifo(path)
    if fd is None:
        with contextlib.suppress(OSError):
            os.unlink(path)  # made here, and not to be had: not left behind
    return fd


def open_fifo(path: str) -> int | None:
    """The FIFO at `path` open to read (and to write: a reader alone sees its end each time a writer closes, and
    would wake at once ever after), non-blocking; None when it cannot be opened so, is a link, or is not a FIFO
    (anything can be planted in a folder of the cache)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def wait(bell: int | None, clock_s: float) -> None:
    """Sleep until the bell rings (its rings drained) or `RING_MAX_S` passed, and at least `MIN_S` (rings as fast
    as anyone writes them cost no more than a look each `MIN_S`, a waiter's first clock); without a bell,
    `clock_s`."""
    if bell is None:
        time.sleep(clock_s)
        return
    began = time.monotonic()
    poller = select.poll()
    poller.register(bell, select.POLLIN)
    if poller.poll(RING_MAX_S * 1000):
        with contextlib.suppress(OSError):
            os.read(bell, 65536)
        time.sleep(max(0.0, began + MIN_S - time.monotonic()))


def ring(folder: str) -> None:
    """Wake every requester waiting in `folder` (a byte into each bell that has a reader)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not name.endswith(BELL) or name.startswith("."):
            continue
        try:
            fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:  # its waiter is gone (ENXIO: no reader), a link, a folder
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b".")
        except OSError:  # full: it has a ring waiting already
            pass
        finally:
            os.close(fd)


def hang_up(folder: str, rid: str, bell: int | None) -> None:
    """Request `rid`'s wait is over: its bell closed and removed (-1 or None: never had)."""
    if bell is None or bell < 0:
        return
    os.close(bell)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, rid + BELL))
