"""A `git` that runs the real one and logs each call, first on PATH: what a command asks of git, counted."""

from __future__ import annotations

import re
import shutil
from pathlib import Path


def logging_git(tmp_path: Path) -> tuple[Path, Path]:
    """A `git` that runs the real one and logs each call's exit code and arguments: (its folder, the log)."""
    real = shutil.which("git")
    assert real is not None
    folder, log = tmp_path / "gitlog-bin", tmp_path / "git.log"
    folder.mkdir(parents=True)
    (folder / "git").write_text(f'#!/bin/sh\n"{real}" "$@"\ncode=$?\necho "$code $*" >> "{log}"\nexit $code\n')
    (folder / "git").chmod(0o755)
    return folder, log


def calls(log: Path) -> list[tuple[int, str]]:
    """Each call's exit code and arguments (a call's arguments can span lines: a commit message)."""
    if not log.exists():
        return []
    return [(int(code), args) for code, args in re.findall(r"^(\d+) (.*)$", log.read_text(), re.M)]


def lists_refs(args: str) -> bool:
    """Whether a logged call asks the forge for its refs: `git ls-remote`, or (for a forge on this machine) the
    `git upload-pack` that serves an `ls-refs` request."""
    return re.match(r"(ls-remote|upload-pack --stateless-rpc) ", args) is not None
