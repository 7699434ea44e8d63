"""What a process tree made durable in a repository, as the kernel saw it: `strace -f` of its fsync-family calls
(each names its file, `-y`) and of the links and renames that put files in place. Power loss cannot be made in a
test; which files were synced before they were named can be read."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

SYSCALLS = ("execve,fsync,fdatasync,sync_file_range,link,linkat,rename,renameat,renameat2,chdir,fchdir,clone,clone3,"
            "fork,vfork")
CATEGORIES = {  # a file put in place under the repository -> what it is (git's core.fsync components)
    "loose-object": re.compile(r"objects/[0-9a-f]{2}/[0-9a-f]{38,62}"),
    "pack": re.compile(r"objects/pack/pack-[0-9a-f]+\.pack"),
    "pack-metadata": re.compile(r"objects/pack/pack-[0-9a-f]+\.idx"),
    "reference": re.compile(r"refs/.+|packed-refs"),
}
_SYNC = re.compile(r"^(?:fsync|fdatasync|sync_file_range)\(\d+<([^>]*)>")
_PLAIN = re.compile(r'^(?:rename|link)\("((?:[^"\\]|\\.)*)", "((?:[^"\\]|\\.)*)"\) = 0')
_AT = re.compile(r'^(?:renameat2?|linkat)\((?:AT_FDCWD|\d+)(?:<([^>]*)>)?, "((?:[^"\\]|\\.)*)", '
                 r'(?:AT_FDCWD|\d+)(?:<([^>]*)>)?, "((?:[^"\\]|\\.)*)".*\) = 0')
_EXEC = re.compile(r'^execve\("[^"]*", \[((?:"(?:[^"\\]|\\.)*"(?:, )?)*)')
_CHDIR = re.compile(r'^chdir\("((?:[^"\\]|\\.)*)"\) = 0|^fchdir\(\d+<([^>]*)>\) = 0')
_CHILD = re.compile(r"^(?:clone3?|v?fork)\(.*\) = (\d+)$")


def available() -> bool:
    """Whether strace is installed and may trace here (a container may forbid ptrace)."""
    if shutil.which("strace") is None:
        return False
    return subprocess.run(["strace", "-qq", "-e", "trace=none", "true"], capture_output=True).returncode == 0


class Trace:
    """One traced run: the files put in place under `root` by category, each with whether it was synced; the
    commands it ran (argument lists)."""

    def __init__(self, folder: Path, root: Path, cwd: Path) -> None:
        self.root = os.path.realpath(root)
        self.synced: set[str] = set()
        self.moves: list[tuple[str, str]] = []
        self.commands: list[list[str]] = []
        lines = {int(p.name.rsplit(".", 1)[1]): p.read_text(errors="replace").splitlines() for p in folder.iterdir()}
        children = {int(m.group(1)) for ls in lines.values() for m in map(_CHILD.match, ls) if m}
        todo = [(pid, os.path.realpath(cwd)) for pid in lines if pid not in children]  # the first process
        while todo:  # each process starts where its parent was when it forked
            pid, where = todo.pop()
            for line in lines.get(pid, []):
                where = self._read(line, where, todo)
        grew = True
        while grew:  # a file synced under one name is synced under the names it is linked or renamed to
            grew = False
            for old, new in self.moves:
                if old in self.synced and new not in self.synced:
                    self.synced.add(new)
                    grew = True
        self.placed: dict[str, list[bool]] = {name: [] for name in CATEGORIES}
        for _, new in self.moves:
            inside = os.path.relpath(new, self.root)
            if inside.endswith(".lock"):  # a lock put in place is not yet the file
                continue
            for name, pattern in CATEGORIES.items():
                if pattern.fullmatch(inside):
                    self.placed[name].append(new in self.synced)

    def _read(self, line: str, where: str, todo: list[tuple[int, str]]) -> str:
        """Take in one line of a process's trace; where the process is after it."""
        if found := _SYNC.match(line):
            self.synced.add(os.path.normpath(found.group(1)))
        elif found := _PLAIN.match(line):
            self.moves.append((_full(where, found.group(1)), _full(where, found.group(2))))
        elif found := _AT.match(line):
            self.moves.append((_full(found.group(1) or where, found.group(2)),
                               _full(found.group(3) or where, found.group(4))))
        elif found := _EXEC.match(line):
            self.commands.append(re.findall(r'"((?:[^"\\]|\\.)*)"', found.group(1)))
        elif found := _CHDIR.match(line):
            return _full(where, found.group(1) or found.group(2))
        elif found := _CHILD.match(line):
            todo.append((int(found.group(1)), where))
        return where

    def ran(self, word: str) -> bool:
        return any(word in arg for argv in self.commands for arg in argv)


def _full(where: str, path: str) -> str:
    return os.path.normpath(os.path.join(where, path))


def traced(argv: list[str], root: Path, folder: Path, env: dict[str, str] | None = None,
           cwd: Path | None = None, stdin: str | None = None) -> Trace:
    """Run `argv` under `strace -f` (one file a process, in `folder`) and read what it did under `root`."""
    folder = folder.resolve()
    folder.mkdir(parents=True)
    proc = subprocess.run(["strace", "-f", "-ff", "-y", "-qq", "-s", "4096", "-e", f"trace={SYSCALLS}",
                           "-e", "signal=none", "-o", str(folder / "t"), "--", *argv],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=120, input=stdin)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Trace(folder, root, cwd or Path.cwd())
