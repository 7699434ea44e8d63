"""Commands run as a whole: every process an effect starts ends with its owner, however deep.

A step's command, a hook, an outcome probe, a settle inspection and a verify row all start here. Each runs
under a keeper: a process forked from its owner (the step client, `assay mcp` or the desk) that leads a
session of its own and is a child subreaper, so whatever the command starts stays its descendant even after
its parent exits or it leaves the command's process group. The command runs in a process group of its own
under the keeper.

The owner holds the write end of the keeper's control pipe. When the owner dies, however (SIGKILL, a crash,
an exit on a time limit), the pipe reads end-of-file and the keeper kills the command's group and every
descendant at once; a SIGTERM, SIGHUP or SIGINT sent to the keeper does the same. The owner may ask for a
gentle stop (SIGTERM or SIGINT to all of them, SIGKILL after a grace). The keeper lives in no group anyone
kills as a unit, so a desk's whole process group going down takes the keeper's owner, never the keeper.

"The command ended" is judged by the keeper when no descendant is left (it reaps them all): it then writes
the command's exit code on the status pipe and exits. With `wait_all` (a step) that is when every process
the command started has ended on its own; without (an inspection: a hook, probe or verify row, which must
answer promptly) the direct child's exit ends the rest.

The keeper is forked, not executed (a step on the fast path pays for one fork, not an interpreter's start),
and it starts the command with posix_spawn. It makes only `os` calls, so forking from a threaded owner is
safe. The one death it cannot outlive is its own SIGKILL: it is named `assay-keeper` in `ps`, in a session
of its own, so a kill aimed at its owner (by pid, group or command line) does not reach it.
"""

from __future__ import annotations

import os
import signal
import time

from assay.core import stops

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (the step client's start-up)
if TYPE_CHECKING:
    from typing import Any

STOP_GRACE_S = 5.0  # a command stopped gently gets this long after SIGTERM (or SIGINT) before SIGKILL
_PR_SET_PDEATHSIG, _PR_SET_NAME, _PR_SET_CHILD_SUBREAPER = 1, 15, 36
_QUIT = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_RESET = (signal.SIGPIPE, signal.SIGXFSZ, *_QUIT, signal.SIGCHLD)  # what a Python process set, back to default
_GENTLY = {b"t": signal.SIGTERM, b"i": signal.SIGINT}


_LIVE: set[Group] = set()  # the groups this process started and has not seen end (`kill_all`)


def kill_all(wait_s: float = 0.0) -> None:
    """SIGKILL every tree this process still keeps (a process ending on a signal it handles, whose threads
    would otherwise wait for their commands), and give the threads that wait on them up to `wait_s` to see
    each one gone."""
    for group in list(_LIVE):
        group.kill()
    deadline = time.monotonic() + wait_s
    while _LIVE and time.monotonic() < deadline:
        time.sleep(0.01)


class Group:
    """A command running under its keeper. `output` is the read end of its stdout and stderr."""

    def __init__(self, argv: list[str], keeper: int, output: int, control: int, status: int) -> None:
        self.argv, self.keeper, self.output = argv, keeper, output
        self._control: int | None = control
        self._status = status
        self.exit_code: int | None = None  # once `finish` has read it
        self.timed_out = False
        self.failed = ""  # "cannot run ...": the command never started

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the whole tree gently: `sig` (SIGTERM or SIGINT) now, SIGKILL after the grace."""
        self._tell(b"i" if sig == signal.SIGINT else b"t")

    def kill(self) -> None:
        """SIGKILL the whole tree now (the same as this process dying)."""
        if self._control is not None:
            os.close(self._control)
            self._control = None

    def _tell(self, what: bytes) -> None:
        if self._control is not None:
            try:
                os.write(self._control, what)
            except OSError:
                pass  # the keeper is gone: so is the tree

    @property
    def status_fd(self) -> int:
        return self._status

    def finish(self) -> int:
        """Wait until the whole tree is gone; the command's exit code (-1 timed out, 127 did not start)."""
        if self.exit_code is not None:
            return self.exit_code
        said = b""
        while True:
            try:
                chunk = os.read(self._status, 256)
            except InterruptedError:
                continue
            if not chunk:
                break
            said += chunk
        os.close(self._status)
        self.kill()
        os.waitpid(self.keeper, 0)
        _LIVE.discard(self)
        self.exit_code = self._parse(said.decode("ascii", "replace").split())
        return self.exit_code

    def _parse(self, words: list[str]) -> int:
        if words == ["S"]:
            self.failed = "stopped before it started"
            return -1
        if words[:1] == ["E"] and len(words) == 2:
            self.failed = f"cannot run {self.argv[0]}: {os.strerror(int(words[1]))}"
            return 127
        if len(words) == 2:
            self.timed_out = words[1] == "1"
            return -1 if self.timed_out else int(words[0])
        self.failed = "its keeper was killed: what the command did is not known"  # SIGKILL of the keeper itself
        return -1

    def close_output(self) -> None:
        try:
            os.close(self.output)
        except OSError:
            pass


def start(argv: list[str], cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
          stdin: int | None = None, wait_all: bool = True, timeout_s: float | None = None,
          grace_s: float = STOP_GRACE_S) -> Group:
    """Start `argv` under a keeper (stdin: that descriptor, else the null device); its output on one pipe."""
    libc = _libc()
    if stdin is not None:
        try:
            os.fstat(stdin)
        except OSError:
            stdin = None  # closed here: the command reads the null device
    out_r, out_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    st_r, st_w = os.pipe()
    pid = os.fork()  # (a threaded owner is safe: the keeper makes only os calls)
    if pid == 0:  # the keeper: never returns
        code = 1
        try:
            _keep(argv, cwd, env, stdin, out_w, ctl_r, st_w, wait_all, timeout_s, grace_s, libc)
            code = 0
        finally:
            os._exit(code)
    for fd in (out_w, ctl_r, st_w):
        os.close(fd)
    group = Group(argv, pid, out_r, ctl_w, st_r)
    _LIVE.add(group)
    return group


def run(argv: list[str], cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
        timeout_s: float | None = None) -> tuple[int, bytes]:
    """Run an inspection to its end: its exit code (-1 timed out, 127 did not start) and output (ending in
    "(timed out)" or "cannot run ..." then). It ends when its direct child exits; what it left is killed then."""
    group = start(argv, cwd, env, wait_all=False, timeout_s=timeout_s)
    chunks: list[bytes] = []
    try:
        while chunk := _read(group.output):
            chunks.append(chunk)
        code = group.finish()
    finally:
        group.kill()
        group.close_output()
        if group.exit_code is None:  # interrupted (Ctrl-C, a cancel): the tree is killed; wait until it is gone
            group.finish()
    output = b"".join(chunks)
    if group.timed_out:
        output += b"\n(timed out)"
    return code, output + group.failed.encode()


def _read(fd: int) -> bytes:
    if stops.hosted():  # a desk that is a thread: its host's stop, as it waits
        while True:
            wake = stops.waker()
            stops.check()
            if fd in stops.readable([fd] if wake is None else [fd, wake], stops.TICK_S):
                break
    while True:
        try:
            return os.read(fd, 65536)
        except InterruptedError:
            continue


def _libc() -> Any:
    """prctl, or None where there is none (then only the group is killed; a process leaving it is not seen)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True)
    except (OSError, AttributeError):
        return None


def dies_with_parent() -> Any:
    """A preexec function making a child die with this process (Linux's parent-death signal), or None. Make it
    in the process that starts the child: a child whose parent died before the signal was armed ends itself."""
    libc = _libc()
    if libc is None:
        return None
    owner = os.getpid()

    def set_pdeathsig() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != owner:  # the owner died between the fork and the prctl: no signal will come
            os.kill(os.getpid(), signal.SIGKILL)
    return set_pdeathsig


def _keep(argv: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str] | None, stdin: int | None,
          out_w: int, ctl_r: int, st_w: int, wait_all: bool, timeout_s: float | None, grace_s: float,
          libc: Any) -> None:
    """The keeper's life: start the command, watch the owner and the tree, report once nothing is left."""
    os.setsid()  # out of the owner's group and session: a kill of the owner's group leaves the keeper to clean up
    if libc is not None:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _own_descriptors(stdin, (out_w, ctl_r, st_w))
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # whatever the forking thread blocked: the command gets none
    for sig in (*_QUIT, signal.SIGCHLD):
        signal.signal(sig, _noop)
    signal.set_wakeup_fd(wake_w)  # each signal's number arrives on wake_r: select wakes for children and quits
    if stops.readable([ctl_r], 0):  # the owner died or asked for a stop before the command started
        _report(st_w, "S")  # then it is not started at all (a pipe read has no race with the owner's death)
        return
    child, failed = _spawn(argv, cwd, env, stdin, out_w)
    os.close(out_w)
    if libc is not None:
        _retitle(libc, b"assay-keeper")  # after the start: the command does not wait for it
    if failed:
        _report(st_w, f"E {failed}")
        return
    code, timed_out = _watch(child, ctl_r, wake_r, wait_all, timeout_s, grace_s)
    _report(st_w, f"{code} {int(timed_out)}")


def retitle(title: bytes) -> None:
    """Name this process in `ps` and /proc (`_retitle`): a forked process that runs something of its own."""
    libc = _libc()
    if libc is not None:
        _retitle(libc, title)


def _retitle(libc: Any, title: bytes) -> None:
    """Name the keeper in `ps` and /proc (its name and command line): a fork shows its owner's command line,
    and whoever kills the owner by that line must not take the keeper that cleans up after it."""
    libc.prctl(_PR_SET_NAME, title)
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: the command line's own memory
    except (OSError, ValueError, IndexError):
        return
    if end > start:
        import ctypes

        ctypes.memset(start, 0, end - start)
        ctypes.memmove(start, title, min(len(title), end - start - 1))


def _own_descriptors(stdin: int | None, keep: tuple[int, ...]) -> None:
    """Hold only what the keeper needs: an owner's socket or pipe held here would hide the owner's death."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != stdin:
            os.dup2(null, fd)
    wanted = {0, 1, 2, null, *keep, *([stdin] if stdin is not None else [])}
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in wanted:
            try:
                os.close(int(name))
            except OSError:
                pass


def _spawn(argv: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str] | None, stdin: int | None,
           out_w: int) -> tuple[int, int]:
    """Start the command in a group of its own (posix_spawn: no copy of this interpreter to fault in, which a
    fork would make); (its pid, 0) or (0, the errno it failed with). Its PATH is searched, as exec does."""
    environ = os.environ if env is None else env
    actions: list[tuple[int, int, int]] = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)]
    if stdin is not None:
        actions.insert(0, (os.POSIX_SPAWN_DUP2, stdin, 0))  # else 0 is the null device already
    found = errno_enoent = 2
    try:
        if cwd is not None:
            os.chdir(cwd)  # the keeper's own: a relative command is found where the command runs
        paths = [argv[0]] if "/" in argv[0] else [os.path.join(d, argv[0]) for d in os.get_exec_path(environ)]
        for path in paths:
            try:
                return os.posix_spawn(path, argv, environ, file_actions=actions, setpgroup=0, setsigdef=_RESET), 0
            except OSError as exc:
                found = found if exc.errno in (errno_enoent, 20) else exc.errno or found  # ENOENT, ENOTDIR: go on
    except OSError as exc:
        return 0, exc.errno or errno_enoent
    return 0, found


def _watch(child: int, ctl_r: int, wake_r: int, wait_all: bool, timeout_s: float | None,
           grace_s: float) -> tuple[int, bool]:
    """Reap until no descendant is left, killing the tree when asked to or when the owner is gone."""
    code, timed_out, killing = -1, False, False
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    hard_stop: float | None = None  # after a gentle stop: when it turns into SIGKILL
    watched = [ctl_r, wake_r]
    while True:
        try:
            while (reaped := os.waitpid(-1, os.WNOHANG))[0]:
                if reaped[0] == child:
                    code = os.waitstatus_to_exitcode(reaped[1])
                    killing = killing or not wait_all
        except ChildProcessError:
            return code, timed_out  # the whole tree is gone
        now = time.monotonic()
        if deadline is not None and now >= deadline and not killing:
            timed_out = killing = True
        if hard_stop is not None and now >= hard_stop:
            killing = True
        if killing:
            _signal_tree(child, signal.SIGKILL)
        waits = [t - now for t in (deadline, hard_stop) if t is not None]
        if killing:
            waits.append(0.1)  # a dying process wakes this by SIGCHLD; this covers one its parent reaps
        ready = stops.readable(watched, max(0.0, min(waits)) if waits else None)  # (a host's fds pass 1,023)
        if wake_r in ready and any(sig in _QUIT for sig in os.read(wake_r, 256)):
            killing = True
        if ctl_r in ready:
            said = os.read(ctl_r, 64)
            if not said or b"k" in said:  # the owner is gone (or asks): nobody is left to journal what runs on
                killing = True
                watched.remove(ctl_r)
            elif hard_stop is None and said[:1] in _GENTLY:
                _signal_tree(child, _GENTLY[said[:1]])
                hard_stop = time.monotonic() + grace_s


def _signal_tree(group: int, sig: int) -> None:
    """`sig` to the command's group and to every descendant of this keeper (some may have left the group)."""
    try:
        os.killpg(group, sig)
    except OSError:
        pass
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _descendants(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def _report(st_w: int, text: str) -> None:
    try:
        os.write(st_w, text.encode())
    except OSError:
        pass  # the owner is gone: nobody to tell


def _noop(signum: int, frame: object) -> None:
    """A handler, so the signal wakes the keeper's select through the wakeup descriptor."""
