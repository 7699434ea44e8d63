"""Worktrees as plain git sees them: a worktree clean at a commit, the worktrees a cache records."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git


def files_of(tree: Path) -> set[str]:
    return {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts}


def clean_at(tree: Path, commit: str) -> None:
    """`tree` is a worktree of its cache at `commit` with exactly that commit's files, as `git worktree add` makes."""
    assert git("rev-parse", "HEAD", cwd=tree).strip() == commit
    assert git("status", "--porcelain", "--ignored", cwd=tree) == ""
    assert files_of(tree) == set(git("ls-tree", "-r", "--name-only", commit, cwd=tree).split())
    assert all(line.startswith("H ") for line in git("ls-files", "-v", cwd=tree).splitlines())


def listed(cache: str | Path) -> list[str]:
    """The worktrees git records in the cache (after a prune: those whose folder exists where the record says)."""
    git("--git-dir", str(cache), "worktree", "prune")
    out = git("--git-dir", str(cache), "worktree", "list", "--porcelain")
    return sorted(line[9:] for line in out.splitlines() if line.startswith("worktree ") and line[9:] != str(cache))
