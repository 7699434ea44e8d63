"""Desks as threads of one process: `assay desk run NAME... --count N --threads`.

A desk that is a process of its own costs its host about 14 MB however little it does: the interpreter writes
into every page of code and data it uses (reference counts), so each forked desk soon has its own copy of them.
Threads of one process share one interpreter, one copy of what they load, and each desk costs only its own state.
The supervisor forks one host process (a group of its own, dying with the supervisor, as a forked desk is: a
terminal's Ctrl-C reaches the supervisor alone, never a desk's agent or git), whose threads are the desks
(`supervisor.host_desks`). What a desk is, it stays (`supervisor.py`: one heartbeat, pushes and listings together,
the same wake):

- **its life** is its thread's (`lives.host_here`: Linux gives a thread an id from the pids' space, its own
  `/proc/<id>/stat` and start time), so its claims' holder, its journal's writers and its idle file name the desk,
  and the desk is over when its thread is, even while the process lives on; the threads it starts (its step
  server's, its heartbeat's) are its too (`lives.thread`). Where a thread has no life of its own to show (no
  /proc), a desk that is a thread refuses to start.
- **its stop** comes from the host's main thread, which takes the signal (only a process's main thread does) and
  hands it to each desk (`core/stops.py`); the desk raises it at its next wait, never inside a write, and hands its
  brief back as a desk that is a process does.
- **its end** is a thread's: its exit code is what `assay desk run NAME` would have exited with.
- **its agent** is started by its own thread and dies with it (the parent-death signal follows the thread that
  started the process).

A host that dies (SIGKILL, a crash point) takes all its desks together: their claims expire together, as a
host's forked desks' do. The forge's credentials are sealed once, before any desk starts (`isolation.seal_desk`).
A wait on the forge (a git process, a push waiting for its group) is not cut short by a stop: the stop is raised
when it ends.
"""

from __future__ import annotations

import _thread
import contextlib
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from assay.core import lives, stops

Echo = Callable[[str], None]
MAX_OPEN = 65536  # the open files a host of desks asks for at most (its commands inherit the limit)
Guard = Callable[[Callable[[], int]], int]  # runs a desk: its exit code, its error said as the command line says it


class DeskThread:
    """A desk run as a thread of this process, waited for as a forked desk is (`supervisor.Child`): its exit code,
    once it has ended; `pid` its life's (its thread's id), once it has begun."""

    def __init__(self, name: str, body: Callable[[], int], guard: Guard) -> None:
        self.name, self._body, self._guard = name, body, guard
        self.pid = 0
        self.returncode: int | None = None
        self._ident = 0
        self._early: list[int] = []  # stops handed to it before it began
        self._lock = threading.Lock()
        self._begun = threading.Event()
        self._thread = threading.Thread(target=self._life, name=f"desk {name}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._begun.wait()

    def _life(self) -> None:
        code = 1
        try:
            life = lives.host_here()
            with self._lock:
                self.pid, self._ident = (life or lives.this_life()).pid, _thread.get_ident()
                stops.host()  # (may fail: no descriptor left for its pipe; the desk then ends, said)
                for sig in self._early:
                    stops.stop(self._ident, sig)
            self._begun.set()
            code = self._guard(self._body if life is not None else _lifeless)
        except BaseException:  # noqa: BLE001 - a desk's end is its own: the supervisor and the other desks go on
            import traceback

            traceback.print_exc()
        finally:
            self._begun.set()  # a desk that could not begin is over, not begun for ever
            stops.unhost()
            lives.unhost()
            self.returncode = code
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()

    def poll(self) -> int | None:
        return None if self._thread.is_alive() else self.returncode if self.returncode is not None else 1

    def wait(self) -> int:
        while self._thread.is_alive():
            self._thread.join(0.2)  # a signal to the supervisor is taken between the joins
        return self.returncode if self.returncode is not None else 1

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self._ident:
                stops.stop(self._ident, sig)
            else:
                self._early.append(sig)


def _lifeless() -> int:
    from assay.errors import UsageError

    raise UsageError("a desk that is a thread needs a life of its own, and this system shows none for a thread "
                     "(no /proc/<thread>/stat)", hint="run the desks as processes: drop --threads")


def start_desks(forge: str, names: list[str], count: int, *, once: bool, max_briefs: int | None, poll_s: float,
                state_dir: Path | None, echo: Echo, guard: Guard,
                started: Callable[[str, DeskThread], object]) -> None:
    """Start `count` desks of each of `names` as threads of this process, each on ports of its own, each handed to
    `started` as it starts; the process's credentials sealed first (every desk's ports read what they need of
    them before)."""
    from assay.config import Ports
    from assay.desk.isolation import seal_desk
    from assay.desk.loop import run_desk

    total = count * len(names)
    _open_files_enough()
    ports = [Ports(forge) for _ in range(total)]
    for port in ports:
        port.git  # noqa: B018 - the forge's URL and its credentials, read before they are sealed
    unisolated = seal_desk()
    if unisolated:
        echo(f"supervisor: {unisolated}")

    def body(name: str, index: int) -> Callable[[], int]:
        def run() -> int:
            try:
                report = run_desk(ports[index], name, state_dir, once=once, max_briefs=max_briefs, poll_s=poll_s,
                                  echo=echo, slot=f"{index}/{total}", sealed=True)
            finally:
                ports[index].close()
            echo(f"{name}: worked {len(report.worked)} brief(s): "
                 + (", ".join(f"{b} {o}" for b, o in report.outcomes.items()) or "none"))
            return report.exit_code()
        return run

    index = 0
    for name in names:
        for _ in range(count):
            desk = DeskThread(name, body(name, index), guard)
            started(name, desk)  # before it begins: a stop that comes meanwhile reaches it
            desk.start()
            index += 1


def _open_files_enough() -> None:
    """The host's desks share one process's limit of open files: raised to its hard limit (at most `MAX_OPEN`, a
    limit many systems give by default) where the soft one is lower (often 1,024: a desk at work holds tens of
    pipes, sockets and pidfds)."""
    import resource

    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = MAX_OPEN if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
