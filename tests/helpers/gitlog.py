"""A `git` that runs the real one and logs each call, first on PATH: what a command asks of git, counted."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

# A push to a forge on this machine can be its own ref transaction (`update-ref --stdin`): its log line ends with
# what it moved, written as a push's refspecs (`<new>:<ref>`, `:<ref>` to delete). A protocol v2 request to a forge
# on this machine (`upload-pack --stateless-rpc`): its line ends with what it asked, `ls-refs` or `fetch`.
SCRIPT = """#!/bin/sh
case " $* " in
  *" update-ref --stdin "*)
    input=$(cat)
    printf '%s\\n' "$input" | "{real}" "$@"
    code=$?
    moves=$(printf '%s\\n' "$input" |
            awk '$1 == "update" {{printf " %s:%s", $3, $2}} $1 == "delete" {{printf " :%s", $2}}')
    echo "$code $*$moves" >> "{log}";;
  *" upload-pack --stateless-rpc "*)
    request=$(mktemp)
    cat > "$request"
    "{real}" "$@" < "$request"
    code=$?
    if grep -q "command=ls-refs" "$request"; then what=ls-refs; else what=fetch; fi
    rm -f "$request"
    echo "$code $* $what" >> "{log}";;
  *)
    "{real}" "$@"
    code=$?
    echo "$code $*" >> "{log}";;
esac
exit $code
"""


def logging_git(tmp_path: Path) -> tuple[Path, Path]:
    """A `git` that runs the real one and logs each call's exit code and arguments: (its folder, the log)."""
    real = shutil.which("git")
    assert real is not None
    folder, log = tmp_path / "gitlog-bin", tmp_path / "git.log"
    folder.mkdir(parents=True)
    (folder / "git").write_text(SCRIPT.format(real=real, log=log))
    (folder / "git").chmod(0o755)
    return folder, log


def calls(log: Path) -> list[tuple[int, str]]:
    """Each call's exit code and arguments (a call's arguments can span lines: a commit message)."""
    if not log.exists():
        return []
    return [(int(code), args) for code, args in re.findall(r"^(\d+) (.*)$", log.read_text(), re.M)]


def lists_refs(args: str) -> bool:
    """Whether a logged call asks the forge for its refs: `git ls-remote`, or the `ls-refs` request sent to a
    forge on this machine (`git upload-pack`; not its object fetches) or over HTTP (`git remote-http`,
    `git remote-https`)."""
    return re.match(r"(ls-remote|remote-https?) |upload-pack --stateless-rpc .* ls-refs$", args) is not None


def pushes(log: Path) -> list[tuple[int, str]]:
    """Each push's exit code and arguments: `git push`, or a forge on this machine's own ref transaction."""
    return [(code, args) for code, args in calls(log) if is_push(args)]


def is_push(args: str) -> bool:
    return re.search(r"(^| )push |(^| )update-ref --stdin", args) is not None


def spy_git(port: Any) -> list[str]:
    """The git commands a `ForgeGit` runs (through its `_git`) from now on, by name, in order."""
    ran: list[str] = []
    run = port._git

    def spied(*args: str, **kw: Any) -> Any:
        ran.append(args[0])
        return run(*args, **kw)

    port._git = spied
    return ran
