"""An agent cannot see its desk: it runs in PID and mount namespaces of its own, and the desk hides its secrets.

Any process of the same user can read `/proc/<pid>/environ` and `/proc/<pid>/cmdline` of the desk (the forge
token, a URL with a password), of the shell that started it, and of the git processes that carry Assay's
authorization header. So the agent is started under `unshare --user --map-current-user --pid --fork
--mount-proc`: its `/proc` shows only its own processes, the files, the network (the loopback model server)
and the desk's step socket stay as they are, and its user stays the desk's user. The kernel translates the pids
`SO_PEERCRED` names into the desk's namespace, so the step server still knows each caller.

The namespace's first process is a small init (`nsinit.py`, run by the desk's Python), not the agent: the
kernel drops a signal to a namespace's first process that has no handler for it, so the init passes SIGTERM,
SIGINT and the like on to the agent, reaps what is orphaned, and ends as the agent ends (exit 128+N for a death
by signal N). When it ends the kernel kills every process left in the namespace, sessions of their own included;
`--kill-child` ends it when `unshare` dies, which dies with the desk (its parent-death signal).

Where the machine refuses user namespaces, the agent runs as before, and `unavailable()` says why (the desk says
so when it starts). In either case `seal` drops the forge token from the desk's environment once it is read and
overwrites it, and any URL password, in the memory `/proc/<desk>/environ` and `cmdline` are read from.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Any

UNSHARE = ("--user", "--map-current-user", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", "--")
_probe: list[tuple[tuple[str, ...], str | None]] = []  # the one probe's answer: the prefix, or why there is none


def unavailable() -> str | None:
    """Why agents cannot be isolated on this machine; None when they are (probed once per process)."""
    return _probed()[1]


def _probed() -> tuple[tuple[str, ...], str | None]:
    if not _probe:
        _probe.append(_try())
    return _probe[0]


def _try() -> tuple[tuple[str, ...], str | None]:
    import shutil

    found = shutil.which("unshare")  # by the desk's PATH: an agent's environment may name none
    if found is None:
        return (), "`unshare` (util-linux) is not installed"
    init = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nsinit.py")  # a script: no import path needed
    prefix = (found, *UNSHARE, sys.executable, "-I", "-S", init)
    # the probe proves what the agent relies on: it is the init's child in a pid namespace with a /proc of its own
    check = f'test "$$" = 2 && test ! -e /proc/{os.getpid()}' if os.getpid() > 99 else 'test "$$" = 2'
    try:
        proc = subprocess.run([*prefix, "sh", "-c", check], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"`unshare` could not run ({exc})"
    if proc.returncode != 0:
        words = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return (), f"`unshare` failed: {words[-1] if words else f'exit {proc.returncode}'}"
    return prefix, None


def prefix() -> tuple[str, ...]:
    """What to put before a command's argv to run it isolated as an agent is (empty where isolation is
    unavailable): for commands that run code the agent wrote, such as verify rows."""
    return _probed()[0]


def warning() -> str | None:
    """The desk's words at start when its agents are not isolated; None when they are."""
    why = unavailable()
    if why is None:
        return None
    return (f"warning: agents run without isolation here ({why}): an agent running as this user can read the "
            "environment and command line of this user's other processes, the shell that started this desk "
            "and the git processes that carry the forge token included; allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1, or kernel.apparmor_restrict_unprivileged_userns=0) "
            "or run the desk as a user of its own")


class Isolated(subprocess.Popen[str]):
    """An agent process, isolated where the machine allows. A signal goes to the namespace's init, which passes
    it on to the agent: `unshare` itself waits with SIGTERM and SIGINT blocked."""

    def __init__(self, argv: Sequence[str], **kwargs: Any) -> None:
        prefix, why = _probed()
        self.isolated = why is None
        # text from the forge (a prompt quoting review comments or steering) may hold a NUL, which no argument or
        # environment value can carry: it reaches the agent as U+FFFD instead of failing the run
        if kwargs.get("env") is not None:
            kwargs["env"] = {k: v.replace("\0", "\ufffd") for k, v in kwargs["env"].items()}
        super().__init__([*prefix, *(a.replace("\0", "\ufffd") for a in argv)], **kwargs)

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is not None:
            return
        inner = _children(self.pid) if self.isolated else []
        for pid in inner:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not inner or sig == signal.SIGKILL:
            super().send_signal(sig)


def _children(pid: int) -> list[int]:
    """The direct children of `pid` (Linux), read from /proc."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listed:
            return [int(p) for p in listed.read().split()]
    except (OSError, ValueError):
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError), \
                    open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


def seal_desk() -> str | None:
    """At desk start, once its ports have read the token: the forge credentials out of this process's environment
    (kept in `credentials` for its own use), they and any URL password out of its `/proc` memory. Returns the
    warning the desk gives when its agents cannot be isolated."""
    from assay.core.credentials import hold, secrets_in

    in_urls = {secret for text in [*sys.argv, *os.environ.values()] for secret in secrets_in(text)}
    seal(hold() | in_urls)
    return warning()


def seal(secrets: Iterable[str]) -> None:
    """Overwrite each of `secrets` with `*` in the memory this process's `/proc/self/environ` and `cmdline` show
    (the kernel reads them from the process's first stack, which `os.environ` and `unsetenv` never change)."""
    wanted = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
    if not wanted:
        return
    try:
        with open("/proc/self/stat", encoding="utf-8", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        # fields 48-51 of proc(5): arg_start, arg_end, env_start, env_end (this list starts at field 3)
        regions = [(int(fields[45]), int(fields[46])), (int(fields[47]), int(fields[48]))]
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            for start, end in regions:
                mem.seek(start)
                block = mem.read(end - start)
                cleaned = block
                for secret in wanted:
                    cleaned = cleaned.replace(secret, b"*" * len(secret))
                if cleaned != block:
                    mem.seek(start)
                    mem.write(cleaned)
    except (OSError, ValueError, IndexError):
        pass  # no /proc here (not Linux): no other process reads it that way either
