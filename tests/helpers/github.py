"""GitHub for tests: the fake's `acme/app` with main pushed, a review port on it, and a world a test pushes
work branches to."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.core.forge.base import Reviews
from assay.core.forge.github import GitHubReviews, GitHubTarget
from tests.conftest import git
from tests.fakegithub import FakeGitHub

OWNER, NAME = "acme", "app"


@dataclass
class World:
    """A forge, its review port, and a way to push a work branch to it (as a desk's push would)."""

    reviews: Reviews
    url: str
    seed: Path
    env: dict[str, str]

    def push_branch(self, brief_id: str, text: str = "work") -> str:
        git("checkout", "-q", "-B", f"w-{brief_id}", "main", cwd=self.seed)
        (self.seed / f"{brief_id}.txt").write_text(text + "\n")
        git("add", "-A", cwd=self.seed)
        git("commit", "-q", "-m", f"work on {brief_id}", cwd=self.seed)
        pushed = subprocess.run(["git", "push", "-q", self.url, f"HEAD:refs/heads/assay/{brief_id}"], cwd=self.seed,
                                env={**os.environ, **self.env}, capture_output=True, text=True)
        assert pushed.returncode == 0, pushed.stderr
        head = git("rev-parse", "HEAD", cwd=self.seed).strip()
        git("checkout", "-q", "main", cwd=self.seed)
        return head


def github_repo(fake: FakeGitHub, seed: Path) -> str:
    """`acme/app` on the fake, its main pushed from `seed` over smart HTTP with the token."""
    fake.create_repo(OWNER, NAME)
    url = fake.git_url(OWNER, NAME)
    pushed = subprocess.run(["git", "push", "-q", url, "HEAD:refs/heads/main"], cwd=seed,
                            env={**os.environ, **fake.git_env()}, capture_output=True, text=True)
    assert pushed.returncode == 0, pushed.stderr
    return url


def github_reviews(fake: FakeGitHub, said: list[str] | None = None, slept: list[float] | None = None) -> GitHubReviews:
    return GitHubReviews(GitHubTarget(f"{OWNER}/{NAME}", fake.api_url), fake.token,
                         echo=(said.append if said is not None else lambda _: None),
                         sleep=(slept.append if slept is not None else lambda _: None))


DESK = ("name: builder\ntakes:\n  labels: [work]\nagent:\n  command: [python, -m, assay.agents.scripted]\n"
        "env_allow: [PATH, HOME, LANG, LC_ALL, TZ]\n")  # a desk on GitHub


def post_status(fake: FakeGitHub, sha: str, state: str, context: str = "assay verify") -> None:
    """A CI job's commit status on `sha` of `acme/app`, through the fake's REST API with its token."""
    import json
    import urllib.request

    req = urllib.request.Request(f"{fake.api_url}/repos/{OWNER}/{NAME}/statuses/{sha}", method="POST",
                                 data=json.dumps({"state": state, "context": context}).encode(),
                                 headers={"Authorization": f"Bearer {fake.token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 201


def repo_over_http(fake_github: FakeGitHub, monkeypatch: Any) -> Path:
    """A new repository `o/r` on the fake GitHub, its token and API in this process's environment: a `ForgeGit`
    of `fake_github.git_url("o", "r")` reaches it over HTTP as a desk would. Its bare repository's folder."""
    monkeypatch.setenv("ASSAY_GITHUB_API", fake_github.api_url)
    monkeypatch.setenv("GITHUB_TOKEN", fake_github.token)
    return fake_github.create_repo("o", "r").path
