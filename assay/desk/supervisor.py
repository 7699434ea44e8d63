"""`assay desk run NAME... --count N`: many desks on one host, under one supervisor.

Each desk is a process of its own (`assay desk run NAME`, its isolation, its stop and its claims as ever), in a
process group of its own (a terminal's Ctrl-C reaches the supervisor alone, which passes one stop on to each), and
dies with the supervisor: a host that dies lets all its desks' claims expire together. With `--threads` the desks
are threads of one such process instead (`hosted.py`), which the supervisor passes its stop on to, and which
passes it on to each of its desks. The desks of a host share
one heartbeat (`hostbeat.py`: one push renews the claim of every desk whose agent runs), and an idle desk runs no
agent. A stop (Ctrl-C, SIGTERM, SIGHUP) is passed on to every desk, each hands its brief back, and the supervisor
waits for them all.

Idle desks back off to a look every 2 minutes; while one idles, the supervisor (with `--threads`, the host process)
looks for them all, every
`WATCH_S` (one ref advertisement of main and the claims, for the host; none while every desk works), and when main
moved, a claim came or went, or a claim changed state (its new commit is not a renewal: a release, a wake, a
block), it touches the state folder's `wake` file, which an idle desk watches: it looks at once, and a brief put on
main starts its agent within about a second. Renewals, which busy desks push all the time, wake nobody.

Their pushes go together (`core/pushgroup.py`): a push made while another desk's is on its way waits for it and
goes with the next, one push of the forge for all; `--push-window S` makes each wait up to S seconds for others.
Their listings of a forge over HTTP go together where the forge is slow (`core/listgroup.py`): a listing asked
for while another has been on its way a while goes with the next, one listing of the host at a time, each as fresh
as a desk's own.

The forge reaches each desk in its environment (`ASSAY_FORGE`), never in its arguments.

A desk is forked from the supervisor once the supervisor has loaded what a desk runs (`Forked`), not started as
a new interpreter: the desks share those pages with it, and no desk loads or compiles them again. A page a desk
touches becomes its own (the interpreter writes reference counts into the objects it uses), so a desk's own memory
grows as it works: measured at 800 desks, about 8 MB between briefs and 16 MB while its agent runs. Each is
named `assay desk run NAME` in `ps` and /proc. Where forking is not safe (a thread already running) the desks are
started as commands.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

from assay.core import pushgroup, stops
from assay.core.git import ForgeGit
from assay.core.lives import pid_exists
from assay.desk.procs import dies_with_parent, retitle
from assay.errors import ConfigInvalid, ForgeError, NeedsPerson

Echo = Callable[[str], None]
WATCH_S = 1.0  # how often the supervisor reads main and the claims for its idle desks
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LOOKS_KEPT = 16  # the supervisor's last looks that read something new, for desks that begin to idle
# what a desk loads as it runs, loaded once by the supervisor so that every desk forked from it shares it
DESK_MODULES = ("assay.desk.loop", "assay.desk.work", "assay.desk.agent", "assay.desk.stepserver",
                "assay.desk.verify", "assay.desk.hostbeat", "assay.desk.sessions", "assay.core.pushgroup",
                "assay.core.forge.github", "assay.core.git.smarthttp", "dataclasses", "copy", "yaml")


class Child(Protocol):
    """A desk under the supervisor: a `subprocess.Popen`, or a `Forked` desk."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class Forked:
    """A desk forked from the supervisor (`fork_desk`), waited for as `subprocess.Popen` waits for a command: its
    exit code, or minus the signal that ended it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)


def desk_argv(name: str, *, once: bool, max_briefs: int | None, poll_s: float, state_dir: Path | None) -> list[str]:
    argv = [sys.executable, "-m", "assay", "desk", "run", name, "--poll", f"{poll_s:g}"]
    if once:
        argv.append("--once")
    if max_briefs is not None:
        argv += ["--max-briefs", str(max_briefs)]
    if state_dir is not None:
        argv += ["--state-dir", str(state_dir.absolute())]
    return argv


def run_desks(forge: str, names: Sequence[str], count: int, *, once: bool = False, max_briefs: int | None = None,
              poll_s: float = 5.0, state_dir: Path | None = None, push_window: float | None = None,
              echo: Echo = print, entry: Callable[[list[str]], object] | None = None,
              threads: Callable[[Callable[[], int]], int] | None = None) -> int:
    """Run `count` desks of each of `names` until they all end (each `--once`, or stopped); the exit code the
    worst of theirs says (2 a desk could not start, 1 the forge interrupted one, 5 a brief needs a person).
    Their pushes go together (`core/pushgroup.py`), each waiting up to `push_window` seconds for the others'.
    With `entry` (the command line's: it runs `assay ARGS`) the desks are forked from this process; with `threads`
    (the command line's guard: it runs a desk, saying its error as the command line would), they are threads of it
    (`hosted.py`)."""
    env = {**os.environ, "ASSAY_FORGE": forge}
    if push_window is not None or not env.get("ASSAY_PUSH_WINDOW_S", "").strip():
        env["ASSAY_PUSH_WINDOW_S"] = f"{push_window or 0:g}"
    env[pushgroup.KEY_ENV] = pushgroup.new_key()  # this supervisor's desks' requests, and no one else's
    echo(f"supervisor: {count} desk(s) of {', '.join(names)} on this host, one heartbeat"
         + (", in one process" if threads is not None else ""))
    forking = entry is not None and can_fork()
    children: list[tuple[str, Child]] = []
    if threads is not None:
        def host() -> int:
            return host_desks(forge, list(names), count, once=once, max_briefs=max_briefs, poll_s=poll_s,
                              state_dir=state_dir, echo=echo, guard=threads)

        if not forking:  # (this process hosts them: a terminal's Ctrl-C reaches their agents and git too)
            os.environ.update(env)
            return host()
        # one host process, a group of its own as a forked desk is: a terminal's stop reaches this one alone
        def hosting(_: list[str]) -> NoReturn:
            sys.exit(host())

        args = ["desk", "run", *names, "--threads"]
        code = until_all_end(children, lambda: children.append(("host", fork_desk(args, env, hosting))))
        if code and children[0][1].wait() < 0:  # killed (the kernel's OOM killer, say): its desks with it
            echo(f"supervisor: the desks' host process was killed by "
                 f"{signal.Signals(-children[0][1].wait()).name}; its claims are taken over by the next desk here")
        return code

    def begin() -> None:
        total = count * len(names)
        for name in names:
            for _ in range(count):
                argv = desk_argv(name, once=once, max_briefs=max_briefs, poll_s=poll_s, state_dir=state_dir)
                slot = {"ASSAY_DESK_SLOT": f"{len(children)}/{total}"}  # where it starts among equal briefs
                children.append((name, fork_desk(argv[3:], env | slot, entry) if entry and forking else
                                 subprocess.Popen(argv, env=env | slot, stdin=subprocess.DEVNULL, process_group=0,
                                                  preexec_fn=dies_with_parent())))
    return until_all_end(children, begin, (forge, state_dir))


def host_desks(forge: str, names: list[str], count: int, *, once: bool, max_briefs: int | None, poll_s: float,
               state_dir: Path | None, echo: Echo, guard: Callable[[Callable[[], int]], int]) -> int:
    """`count` desks of each of `names` as threads of this process (`hosted.py`), supervised as forked desks are:
    watched for while they idle, each handed a stop; the exit code the worst of theirs says."""
    from assay.desk import hosted

    children: list[tuple[str, Child]] = []
    return until_all_end(children, lambda: hosted.start_desks(
        forge, names, count, once=once, max_briefs=max_briefs, poll_s=poll_s, state_dir=state_dir, echo=echo,
        guard=guard, started=lambda name, desk: children.append((name, desk))), (forge, state_dir))


def until_all_end(children: list[tuple[str, Child]], begin: Callable[[], object],
                  watching: tuple[str, Path | None] | None = None) -> int:
    """`begin` (which puts each child it starts in `children`), then wait until every child has ended, watching the
    forge for them while one idles (`watching`: the forge and the state folder); the worst of their exit codes. A
    stop (Ctrl-C, SIGTERM, SIGHUP) is passed on to every child as SIGTERM, each hands its brief back, and the stop
    goes on once they all have ended."""
    try:
        begin()
        if watching is not None:
            watch(*watching, WATCH_S, [child for _, child in children])
        codes = [child.wait() for _, child in children]
    except KeyboardInterrupt:
        kept = _stops_taken()  # a second stop (`systemctl stop` signals the host and its supervisor) changes nothing
        try:
            told = 0
            while told < len(children):  # each hands its brief back, as it would alone
                try:
                    if children[told][1].poll() is None:
                        children[told][1].send_signal(signal.SIGTERM)
                    told += 1
                except KeyboardInterrupt:  # (one that came before its handler was replaced)
                    continue
            for _, child in children:
                _wait(child)
        finally:
            for sig, handler in kept.items():
                signal.signal(sig, handler)
        raise
    return worst(codes)


def _stops_taken() -> dict[signal.Signals, Any]:
    """Stops that come from now on are taken and dropped (their handlers replaced); the handlers they had."""
    kept: dict[signal.Signals, Any] = {}
    with contextlib.suppress(ValueError):  # (not the main thread: its signals are another's)
        for sig in STOPS:
            kept[sig] = signal.signal(sig, _dropped)
    return kept


def _dropped(signum: int, frame: object) -> None:
    """A stop that comes while one is being passed on: that one does what it asks."""


def can_fork() -> bool:
    """Whether desks can be forked from this process: Linux (or any `os.fork`), and no thread but this one (a
    fork copies one thread; a lock another held would stay held in the desk for ever). Loads what a desk runs
    first, and freezes it out of the collector's reach, so that the desks' copies of it stay shared pages."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    import importlib

    for module in DESK_MODULES:
        importlib.import_module(module)
    gc.freeze()
    return True


def fork_desk(args: Sequence[str], env: dict[str, str], entry: Callable[[list[str]], object]) -> Forked:
    """A desk forked from this process, running `assay ARGS` with `env` as its whole environment, as a desk
    started as that command would: a process group of its own, dying with this process, reading nothing."""
    arm = dies_with_parent()
    sys.stdout.flush()
    sys.stderr.flush()
    # a stop that comes before the desk has a group of its own waits (it would unwind the supervisor's frames)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        pid = os.fork()
        if pid == 0:
            _desk_life(list(args), env, arm, entry, held)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return Forked(pid)


def _desk_life(args: list[str], env: dict[str, str], arm: Callable[[], None] | None,
               entry: Callable[[list[str]], object], mask: set[int | signal.Signals]) -> NoReturn:
    """A forked desk's life: what a new `python -m assay ARGS` would be, then its exit (never a return into the
    supervisor's code)."""
    code = 1
    try:
        os.setpgid(0, 0)
        if arm is not None:
            arm()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(env)
        atexit._clear()  # the supervisor's exit work is its own
        retitle(" ".join(["assay", *args[:3]]).encode())
        sys.argv = ["assay", *args]
        entry(args)
        code = 0
    except KeyboardInterrupt as stop:  # a stop before the command could take it: 128 + its signal, as a shell says
        name = stop.args[0] if stop.args and stop.args[0] in signal.Signals.__members__ else "SIGINT"
        code = 128 + signal.Signals[name].value
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - whatever ends a desk ends it here, never in the supervisor's frames
        import traceback

        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def watch(forge: str, state_dir: Path | None, poll_s: float, children: Sequence[Child]) -> None:
    """Until every desk has ended: while a desk idles, read main and the claims every `poll_s` (one
    advertisement), and touch the `wake` file when they moved since the last look. A forge that cannot be read now
    is read again next time. While every desk works, the host reads nothing for them; a desk new to idling is
    woken when the forge moved since its own last look began (`woken`)."""
    from assay.config import state_dir_for
    from assay.desk.loop import IDLE, WAKE

    folder = state_dir_for(forge, state_dir)
    wake = folder / WAKE
    git = ForgeGit(forge)
    # what the looks read: (when the first of a run of looks that read the same refs was answered, those refs)
    looks: list[tuple[float, dict[str, str]]] = []
    judged: set[tuple[int, float]] = set()  # idle desks (pid, its last look) already judged against a look
    try:
        while any(child.poll() is None for child in children):
            try:
                waiting = idle_desks(folder / IDLE, children)
                if waiting:
                    refs = git.ls_remote("refs/heads/main", "refs/assay/claims/*")
                    if woken(git, looks, refs, [looked for _, looked in waiting - judged]):
                        wake.touch()
                        os.utime(wake)  # a new mtime, whatever the file system's resolution did with the last one
                        stops.nudge()  # desks that are threads of this process look at it at once
                    if not looks or looks[-1][1] != refs:
                        looks = [*looks, (time.time(), refs)][-LOOKS_KEPT:]
                    judged = waiting
            except Exception as exc:  # noqa: BLE001 - a forge away, a full disk: the desks poll on their own
                echo_once(f"supervisor: cannot watch the forge for the idle desks now ({exc})")
            deadline = time.monotonic() + poll_s
            while time.monotonic() < deadline and any(child.poll() is None for child in children):
                time.sleep(min(0.2, poll_s))
    finally:
        git.close()


def woken(git: ForgeGit, looks: Sequence[tuple[float, dict[str, str]]], refs: dict[str, str],
          new: Sequence[float]) -> bool:
    """Whether the idle desks are to be woken by what a look read (`refs`): it moved since the last look, or since
    what a desk new to idling saw, judged by the last look answered before that desk's own look began (when the
    looks kept reach back that far; else it is woken)."""
    if looks and moved(git, looks[-1][1], refs):
        return True
    for looked in new:
        before = [seen for answered, seen in looks if answered <= looked]
        if not before or moved(git, before[-1], refs):
            return True
    return False


def idle_desks(folder: Path, children: Sequence[Child]) -> set[tuple[int, float]]:
    """The desks of this supervisor that wait for the wake file now, each with when its last look at the forge
    began (`loop.IDLE`: a file named by its pid, its time that look's; a desk killed as it waited leaves its file
    behind, which counts no more once that desk has ended)."""
    try:
        found = {entry.name: entry.stat().st_mtime for entry in os.scandir(folder)}
    except OSError:
        return set()
    ours = {str(child.pid) for child in children}
    for name in found.keys() - ours:  # a desk killed as it waited: its file goes once no process has its pid
        if name.isdigit() and not pid_exists(int(name)):
            with contextlib.suppress(OSError):
                os.unlink(folder / name)
    return {(child.pid, found[str(child.pid)]) for child in children
            if str(child.pid) in found and child.poll() is None}



def moved(git: ForgeGit, seen: dict[str, str], refs: dict[str, str]) -> bool:
    """Whether idle desks may find work: main moved, a claim came or went, or a claim's new commit is not a
    renewal (a renewal's subject is `assay: renew …`; what else moved is read, one fetch of the new tips)."""
    if refs.get("refs/heads/main") != seen.get("refs/heads/main") or set(refs) != set(seen):
        return True
    changed = {ref: sha for ref, sha in refs.items() if seen.get(ref) != sha}
    if not changed:
        return False
    git.ensure_objects(changed)
    return any(not git.message_of(sha).startswith("assay: renew ") for sha in changed.values())


_said: set[str] = set()


def echo_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)


def _wait(child: Child) -> int:
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # a second Ctrl-C while the desks stop: they stop all the same
            continue


def worst(codes: Sequence[int]) -> int:
    """The exit code of many desks: a desk that could not start, then an interrupted one, then a blocked brief."""
    for code in (ConfigInvalid.code, ForgeError.code, NeedsPerson.code):
        if code in codes:
            return code
    return next((c if c > 0 else ForgeError.code for c in codes if c != 0), 0)
