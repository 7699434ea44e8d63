"""Running git: its environment (no prompts, stable messages, a token as a header), `run_git`, git's own words
when it fails, and where a forge on this machine is."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from assay.core.credentials import redact, strip_credentials
from assay.core.git.gitenv import git_env, git_timeout, is_local_path
from assay.errors import ForgeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path


def run_git(args: Sequence[str], cwd: str | os.PathLike[str] | None = None, input: bytes | None = None,
            timeout: float | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run one git command; a failure raises ForgeError with git's own words."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True,
                              env=env or git_env(), timeout=timeout or git_timeout())
    except subprocess.TimeoutExpired as exc:
        raise ForgeError(f"git {args[0]} timed out after {exc.timeout:.0f}s") from None
    except FileNotFoundError:
        raise ForgeError("the git binary was not found", hint="install git and put it on PATH") from None
    if check and proc.returncode != 0:
        raise ForgeError(f"git {args[0]} failed: {first_error(proc.stderr)}")
    return proc


def configured_person() -> str:
    """The person git names for commits from here: `user.name`, else `user.email`, as `git config` reads them in
    this directory (its repository's config, the global and system ones, GIT_CONFIG_*); "" if neither is set."""
    for key in ("user.name", "user.email"):
        try:
            value = run_git(["config", "--get", key], check=False).stdout.decode(errors="replace").strip()
        except ForgeError:  # no git, or it hung: no name from it
            return ""
        if value:
            return value
    return ""


def remote_error(stderr: bytes) -> str:
    """The forge's first `remote: error: …` line: why it refused (a stale lock names its file)."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        text = line.strip().removeprefix("remote:").strip()
        if text.startswith(("error:", "fatal:")) and line.strip().startswith("remote:"):
            return redact(text.removeprefix("error:").removeprefix("fatal:").strip())
    return ""


def note(text: str) -> None:
    import sys

    sys.stderr.write(f"note: {text}\n")


def first_error(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    text = (fatal or lines or ["no message"])[0]
    return redact(text.removeprefix("fatal: ").removeprefix("error: "))


LOCAL_REPO_ENV = (  # what `git push` leaves out of its receive-pack's environment on this machine (git 2.39's
    # `git rev-parse --local-env-vars`): a repository, its objects, config given on the command line
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR")


def forge_env() -> dict[str, str]:
    """git's environment as `git push` gives it to the receive-pack of a forge on this machine (without
    `LOCAL_REPO_ENV`): the fast path's git reads the forge's config as that receive-pack would."""
    env = git_env()
    for name in LOCAL_REPO_ENV:
        env.pop(name, None)
    return env


def rmtree(path: str | os.PathLike[str]) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def local_forge_path(url: str) -> str | None:
    """The directory of a forge on this machine (a path or a file:// URL); None for a remote forge."""
    if url.startswith("file://"):
        return strip_credentials(url).removeprefix("file://")
    return url if is_local_path(url) else None


def init_bare(path: Path) -> None:
    """Create a bare repository to serve as a forge on disk."""
    run_git(["init", "--bare", "-q", "--initial-branch=main", str(path)])


def local_repo_origin(start: str | os.PathLike[str]) -> str | None:
    proc = run_git(["config", "--get", "remote.origin.url"], cwd=start, check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def repo_root(start: Path) -> Path | None:
    from pathlib import Path

    proc = run_git(["rev-parse", "--show-toplevel"], cwd=start, check=False)
    return Path(proc.stdout.decode().strip()) if proc.returncode == 0 else None
