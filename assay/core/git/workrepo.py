"""A working repository (a person's checkout, a desk's worktree), through plain git porcelain."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from assay.core.credentials import redact
from assay.core.git.gitenv import git_env
from assay.core.git.objects import Signature
from assay.core.git.refs import OBJECT_ID, ZERO, parse_porcelain
from assay.core.git.run import first_error, run_git
from assay.errors import ForgeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path


class WorkRepo:
    """A working repository (a person's checkout, a desk's worktree): plain git porcelain."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._git_dir = ""

    def git_dir(self) -> str:
        """Its own git folder (HEAD, the index, MERGE_HEAD), found from its `.git` as git finds it: that folder, or
        a file naming it (a worktree's); asked of git when `.git` is neither."""
        if not self._git_dir:
            dot = os.path.join(os.path.realpath(self.path), ".git")
            try:
                with open(dot, encoding="utf-8") as f:
                    line = f.read().rstrip("\r\n")
            except IsADirectoryError:
                line = f"gitdir: {dot}"
            except (OSError, UnicodeDecodeError):
                line = ""
            # a relative name is taken from the worktree's real folder, each link resolved, as git takes it
            self._git_dir = os.path.realpath(os.path.join(os.path.dirname(dot), line[8:])) \
                if line.startswith("gitdir: ") else self.git("rev-parse", "--absolute-git-dir").stdout.decode().strip()
        return self._git_dir

    def merging(self) -> bool:
        """Whether a merge is under way: MERGE_HEAD beside HEAD."""
        return os.path.isfile(os.path.join(self.git_dir(), "MERGE_HEAD"))

    @classmethod
    def init(cls, path: Path) -> WorkRepo:
        run_git(["init", "-q", "--initial-branch=main", str(path)])
        return cls(path)

    def git(self, *args: str, check: bool = True, index: str | None = None,
            input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """git in this repository only: a folder that holds none is an error, never an enclosing repository's.
        `index`: an index file of the caller's own (absolute path) instead of the repository's, which is then
        neither read nor locked (a snapshot taken while an agent works in it)."""
        ceiling = os.path.dirname(os.path.abspath(self.path))
        env = {**git_env(), "GIT_CEILING_DIRECTORIES": ceiling}
        if index is not None:
            env.update({"GIT_INDEX_FILE": index, "GIT_OPTIONAL_LOCKS": "0"})
        return run_git(list(args), cwd=self.path, check=check, env=env, input=input)

    def commit_all(self, message: str, paths: Sequence[str] = (".",), author: Signature | None = None) -> bool:
        """Stage `paths` and commit; False when there was nothing to commit. A merge under way is committed (a merge
        commit) even when its result is HEAD's tree: its other parent is what it records."""
        self.git("add", "-A", "--", *paths)
        merging = self.merging()
        if not merging and self.git("diff", "--cached", "--quiet", check=False).returncode == 0:
            return False
        ident = ["-c", "user.name=assay", "-c", "user.email=assay@assay.invalid"]
        if author is not None:
            ident = ["-c", f"user.name={author.name}", "-c", f"user.email={author.email}"]
        elif self.git("config", "user.email", check=False).returncode == 0:
            ident = []
        self.git(*ident, "commit", "-q", "-m", message)
        return True

    def head(self) -> str:
        """HEAD's commit: read from the git folder when HEAD is detached (a desk's worktree: no git process), else
        asked of git (a branch's tip, which may be packed)."""
        try:
            with open(os.path.join(self.git_dir(), "HEAD"), encoding="ascii") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError):
            text = ""
        return text if OBJECT_ID.fullmatch(text) else self.git("rev-parse", "HEAD").stdout.decode().strip()

    def messages_since(self, base: str) -> list[str]:
        """The messages of the commits on HEAD that `base` lacks, newest first."""
        out = self.git("log", "-z", "--format=%B", f"{base}..HEAD").stdout.decode("utf-8", "replace")
        return [m for m in out.split("\0") if m.strip()]

    def reset_soft(self, commit: str) -> None:
        """Move HEAD to `commit`, keeping every change staged (to commit it again)."""
        self.git("reset", "-q", "--soft", commit)

    def push_new_branch(self, url: str, branch: str = "main") -> None:
        """Push HEAD to `branch` of `url` only if the forge does not have that branch yet."""
        proc = self.git("push", "--porcelain", f"--force-with-lease=refs/heads/{branch}:{ZERO}", url,
                        f"HEAD:refs/heads/{branch}", check=False)
        result = parse_porcelain(proc.stdout.decode("utf-8", "replace")).get(f"refs/heads/{branch}")
        if result is None or not result.ok:
            raise ForgeError(f"could not push {branch} to {redact(url)}: "
                             f"{result.detail if result else first_error(proc.stderr)}")

    def set_remote(self, name: str, url: str) -> None:
        if self.git("remote", "get-url", name, check=False).returncode == 0:
            self.git("remote", "set-url", name, url)
        else:
            self.git("remote", "add", name, url)
