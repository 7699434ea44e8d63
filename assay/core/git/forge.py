"""`ForgeGit`: a forge (any git URL or path) and its cache, built job by job (objects, history, listing, the
disk push, the push), with the worktrees of its desks on top (`worktrees`)."""

from __future__ import annotations

from assay.core.git.worktrees import Worktrees


class ForgeGit(Worktrees):
    """Reads and CAS-writes refs of one forge through a local cache repository."""

    def spare(self) -> ForgeGit:
        """A port to the same forge and cache on processes of its own, for another thread (the agent's heartbeat,
        its step server); the caller closes it."""
        return ForgeGit(self.url, *self._spawn)
