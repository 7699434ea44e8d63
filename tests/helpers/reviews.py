"""A forge as the review contract sees it, plain or (a fake) GitHub: its review port, a person's own port, and
forge-neutral reads with plain git (main, its files and parents) and of the review as the forge itself holds it
(the record on its ref; the pull request in the fake's memory), so a contract test runs unchanged on each."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from assay.core.forge.base import Reviews
from assay.core.forge.github import GitHubReviews, GitHubTarget
from assay.core.forge.plain import PlainReviews
from assay.core.git import ForgeGit
from tests.conftest import Forge
from tests.fakegithub import FakeGitHub
from tests.helpers.github import NAME, OWNER, github_repo, github_reviews

FORGES = ["plain", "github"]


@dataclass(frozen=True)
class Held:
    """A review as the forge holds it, read without the port: its state, head and merge commit."""

    state: str
    head: str
    merged_commit: str


@dataclass
class ReviewForge:
    kind: str  # "plain" or "github"
    reviews: Reviews  # the desks' port
    url: str
    git_dir: Path  # the bare repository that holds main and the work branches
    env: dict[str, str]  # what git needs to push to `url`
    work: Path  # a clone commits are made in
    person: Callable[[str], Reviews]  # a port acting as that person (on GitHub: with a token of their own)
    held: Callable[[str], Held | None]
    written: Callable[[], object]  # everything a review change can write, to compare before and after

    def git(self, *args: str) -> str:
        """Plain git on the forge's bare repository."""
        return _git(*args, git_dir=self.git_dir)

    def tip(self, ref: str = "refs/heads/main") -> str | None:
        return self.git("for-each-ref", "--format=%(objectname)", ref).strip() or None

    def main(self) -> str:
        main = self.tip()
        assert main
        return main

    def commit(self, ref: str, files: dict[str, str], message: str) -> str:
        """Commit `files` on top of `ref` on the forge (of main if it has no `ref`) and push it there."""
        if not self.work.exists():
            self._run("clone", "-q", self.url, str(self.work))
        self._run("fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
        start = "origin/" + ref.removeprefix("refs/heads/")
        if self._run("rev-parse", "--verify", "-q", start, check=False).returncode != 0:
            start = "origin/main"
        self._run("checkout", "-q", "--detach", start)
        for name, text in files.items():
            (self.work / name).write_text(text)
        self._run("add", "-A")
        self._run("commit", "-q", "-m", message)
        self._run("push", "-q", "origin", f"HEAD:{ref}")
        return self._run("rev-parse", "HEAD").stdout.strip()

    def branch(self, brief: str, files: dict[str, str] | None = None) -> str:
        """Push the work branch `assay/<brief>` with a commit of `files` (a feature file by default)."""
        return self.commit(f"refs/heads/assay/{brief}", files or {"feature.txt": "the feature\n"},
                           "add the feature")

    def move_main(self, files: dict[str, str], message: str = "meanwhile on main") -> str:
        """Another writer's commit on main."""
        return self.commit("refs/heads/main", files, message)

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["git", *args], cwd=self.work if self.work.exists() else None, capture_output=True,
                              text=True, env={**os.environ, **self.env}, timeout=60)
        assert proc.returncode == 0 or not check, f"git {' '.join(args)}: {proc.stderr}"
        return proc


def _git(*args: str, git_dir: Path) -> str:
    proc = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def _refs(git_dir: Path) -> str:
    return _git("for-each-ref", "--format=%(refname) %(objectname)", git_dir=git_dir)


@contextmanager
def plain_forge(forge: Forge, tmp_path: Path) -> Iterator[ReviewForge]:
    """The plain forge: reviews are records on `refs/assay/reviews/*`, written with a clock that ticks a second."""
    port = ForgeGit(forge.url)
    ticks = count()
    reviews = PlainReviews(port, clock=lambda: 1_767_225_600.0 + next(ticks))

    def held(brief: str) -> Held | None:
        ref = f"refs/assay/reviews/{brief}"
        if not _git("for-each-ref", ref, git_dir=forge.path).strip():
            return None
        record = json.loads(_git("show", f"{ref}:review.json", git_dir=forge.path))
        return Held(record["state"], record["head"], record["merged_commit"])

    try:
        yield ReviewForge("plain", reviews, forge.url, forge.path, {}, tmp_path / "work", lambda _: reviews, held,
                          lambda: _refs(forge.path))
    finally:
        port.close()


@contextmanager
def github_forge(forge: Forge, tmp_path: Path) -> Iterator[ReviewForge]:
    """The fake GitHub: reviews are pull requests from `assay/<brief>`; a person acts with a token of their own
    (GitHub lets no one approve their own pull request, and the desks' token opens them)."""
    with FakeGitHub(tmp_path) as fake:
        url = github_repo(fake, forge.seed)
        repo = fake.repo(OWNER, NAME)

        def person(login: str) -> Reviews:
            return GitHubReviews(GitHubTarget(f"{OWNER}/{NAME}", fake.api_url), fake.token_of(login),
                                 echo=lambda _: None, sleep=lambda _: None)

        def held(brief: str) -> Held | None:
            pulls = [p for p in fake.pulls(OWNER, NAME) if p.head == f"assay/{brief}"]
            if not pulls:
                return None
            pull = max(pulls, key=lambda p: (p.state == "open", p.number))
            state = ("merged" if pull.merged_at else "closed") if pull.state == "closed" else \
                ("draft" if pull.draft else "ready")
            return Held(state, pull.head_sha, pull.merge_commit_sha or "")

        def written() -> object:
            with fake.lock:
                pulls = [(p.number, p.state, p.draft, p.title, p.head_sha, p.merged_at, tuple(p.labels))
                         for p in repo.pulls.values()]
                return (_refs(repo.path), pulls, len(repo.comments), len(repo.reviews), len(repo.statuses))

        yield ReviewForge("github", github_reviews(fake), url, repo.path, fake.git_env(), tmp_path / "work", person,
                          held, written)
        assert fake.schema_problems() == []
