"""`ForgeGit`: a forge (any git URL or path) and its cache, built job by job (objects, history, listing, the
disk push, the push), with the worktrees of its desks on top."""

from __future__ import annotations

import os
import time

from assay.core.git.push import Pushing
from assay.core.git.run import rmtree, run_git
from assay.core.git.workrepo import WorkRepo

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path

PRUNE_EVERY_S = 600.0  # a cache's worktrees' records of folders gone are pruned at most this often
_pruned: dict[str, float] = {}  # cache -> when this process last pruned them (monotonic)


class ForgeGit(Pushing):
    """Reads and CAS-writes refs of one forge through a local cache repository."""

    def spare(self) -> ForgeGit:
        """A port to the same forge and cache on processes of its own, for another thread (the agent's heartbeat,
        its step server); the caller closes it."""
        return ForgeGit(self.url, *self._spawn)

    def worktree(self, path: Path, commit: str) -> WorkRepo:
        """A worktree of the cache at `path`: adopted as it is if it exists (work in progress survives a crash),
        and moved into this cache first if another cache made it (`_rehome`)."""
        if (path / ".git").exists():
            if not self._owns(path):
                self._rehome(path, commit)
            return WorkRepo(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._prune()
        self._git("worktree", "add", "--detach", "--force", str(path), commit)  # --force: over a folder gone
        return WorkRepo(path)

    def _prune(self) -> None:
        """Forget the worktrees whose folders are gone (a git process), at most once every `PRUNE_EVERY_S` in a
        process: `add --force` takes a path whose folder is gone anyway, so this only keeps the records few."""
        now, key = time.monotonic(), str(self.cache)
        if now - _pruned.get(key, -PRUNE_EVERY_S) >= PRUNE_EVERY_S:
            _pruned[key] = now
            self._git("worktree", "prune")

    def _owns(self, path: Path) -> bool:
        """Whether the worktree at `path` is one of this cache's (its `.git` file points into the cache)."""
        try:
            pointer = (path / ".git").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return False
        from pathlib import Path  # here: the commands a desk's agent runs in loops do not load pathlib

        target = Path(pointer.removeprefix("gitdir:").strip())
        return target.resolve().is_relative_to(Path(self.cache, "worktrees").resolve())

    def _rehome(self, path: Path, commit: str) -> None:
        """Make a worktree another cache made (ASSAY_CACHE_DIR changed) one of this cache's, keeping its files:
        its commits are fetched from it while the old cache still exists (else it starts from `commit`), a new
        worktree's `.git` takes the place of the old one, and the index is reset to HEAD, the files left as
        they are."""
        head = run_git(["rev-parse", "-q", "--verify", "HEAD"], cwd=path, check=False, env=self._env)
        start = head.stdout.decode().strip() if head.returncode == 0 else commit
        if head.returncode == 0:
            self._git("fetch", "-q", "--no-tags", "--no-write-fetch-head", str(path), "HEAD", check=False)
        spare = path.parent / f".{path.name}.rehome"
        rmtree(spare)
        self._prune()
        self._git("worktree", "add", "--no-checkout", "--detach", "--force", str(spare), start)
        (path / ".git").unlink()
        os.replace(spare / ".git", path / ".git")
        spare.rmdir()
        self._git("worktree", "repair", str(path))
        run_git(["reset", "-q"], cwd=path, env=self._env)
