"""Ref locks a killed push left on a forge on disk: named from git's refusal, and removed once stale."""

from __future__ import annotations

import contextlib
import os
import re
import time


def refusal_hint(detail: str) -> str:
    """What a person can do about a refused push, from git's own reason."""
    if lock_named(detail):
        return (f"a push killed mid-way leaves its ref's .lock file on the forge (git holds one for milliseconds); "
                f"on a forge on this machine Assay removes it once it is {STALE_LOCK_S / 60:.0f} minutes old; "
                "elsewhere whoever runs the forge must remove the .lock file named above")
    return "a hook or a policy on the forge refused it; check the ref on the forge"


STALE_LOCK_S = 600.0  # a ref lock on a forge on disk this old was left by a killed push, far beyond any push's time
_LOCK_FILE = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def lock_named(detail: str) -> str | None:
    """The lock file a refused write names (git: "Unable to create '….lock': File exists"), if any."""
    found = _LOCK_FILE.search(detail)
    return found.group(1) if found else None


def clear_stale_lock(folder: str, lock: str, older_than_s: float = STALE_LOCK_S) -> float | None:
    """Remove `lock`, a lock file inside the forge on disk at `folder`, if it is older than `older_than_s`: the
    push that made it is gone. Its age when removed, else None (fresh, gone, or not the forge's). It is moved aside
    first and removed only if what was moved is the very file judged stale, so a live push's lock is never lost."""
    root, path = os.path.realpath(folder), os.path.realpath(lock)
    try:
        before = os.lstat(path)
    except OSError:
        return None
    age = time.time() - before.st_mtime
    if not path.startswith(root + os.sep) or age < older_than_s or not os.path.isfile(path) \
            or _git_at_work_since(root, before.st_mtime):
        return None
    aside = os.path.join(root, f"assay-stale-lock-{os.getpid()}-{os.urandom(4).hex()}")  # outside refs/: no ref
    try:
        os.rename(path, aside)
        moved = os.lstat(aside)
    except OSError:
        return None
    same = (moved.st_ino, moved.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    if not same:  # a live push's lock, made meanwhile: put back (unless yet another is there)
        with contextlib.suppress(OSError):
            os.link(aside, path)
    with contextlib.suppress(OSError):
        os.unlink(aside)
    return age if same else None


def _git_at_work_since(root: str, when: float) -> bool:
    """Whether a git process on this host, started before `when`, works in the repository at `root` (its working
    folder, or named among its arguments): a lock made then may be its own, paused (SIGSTOP), not a killed one's.
    A process started after the lock was made cannot hold it. Unreadable processes (another user's) are not seen."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            boot = next(float(line.split()[1]) for line in stat if line.startswith("btime "))
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except (OSError, StopIteration, ValueError):
        return False
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode("utf-8", "replace").split("\0")
            if "git" not in os.path.basename(argv[0]) or (
                    os.path.realpath(f"/proc/{pid}/cwd") != root and not any(root in arg for arg in argv)):
                continue
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat_file:
                fields = stat_file.read().rpartition(")")[2].split()
            if boot + int(fields[19]) / tick <= when:
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False
