"""Real processes in states a pid check gets wrong: live, zombie, reused. Read from /proc, not from assay."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of /proc/<pid>/stat (state first); None when the pid has no entry."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return text[text.rindex(")") + 1:].split()


def state(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[0] if fields else None


def start_ticks(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"pid {pid} is gone"
    return int(fields[19])


def boot_id() -> str:
    return BOOT_ID.read_text().strip()


def await_state(pid: int, wanted: str, deadline_s: float = 60, gone_ok: bool = False) -> None:
    """Poll /proc until `pid` is in one of the states in `wanted` (one letter each; bounded); with `gone_ok`, or
    gone."""
    deadline = time.monotonic() + deadline_s
    while ((now := state(pid)) is None and not gone_ok) or (now is not None and now not in wanted):
        assert time.monotonic() < deadline, f"pid {pid} never reached state {wanted} (now {state(pid)})"
        time.sleep(0.01)


def until(done: Callable[[], bool], what: str, deadline_s: float = 30.0) -> None:
    """Poll `done` until it holds (bounded): what another process did, seen in the files it leaves."""
    end = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < end, what
        time.sleep(0.005)


@contextmanager
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process unrelated to assay."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def zombie() -> Iterator[subprocess.Popen[bytes]]:
    """A child killed and not yet reaped: /proc shows it as Z until the context ends."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        os.kill(proc.pid, signal.SIGKILL)  # not proc.kill(): nothing may reap it before the test is done
        await_state(proc.pid, "Z")
        yield proc
    finally:
        proc.wait()
