"""On GitHub, landing holds through main's merge queue: `assay land` and `assay review merge` queue ready pull
requests (never merge them past the queue), and each merge group runs the verify rows of its briefs and of every
brief landed before it (`assay verify --group`, as verify.yml does on `merge_group`), so two reviews green alone
never break main together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import Forge, assay, git
from tests.fakegithub import FakeGitHub
from tests.helpers.desks import publish, scripted
from tests.helpers.github import DESK as GITHUB_DESK
from tests.helpers.github import NAME, OWNER, github_repo, post_status


def _ci(fake: FakeGitHub, url: str, checkout: Path) -> list[tuple[tuple[int, ...], str]]:
    """The verify workflow on every live merge group, first to merge first, until the queue is empty: its
    verdicts as (pull requests, state)."""
    env = {**os.environ, **fake.git_env()}
    if not checkout.exists():
        subprocess.run(["git", "clone", "-q", url, str(checkout)], env=env, check=True, capture_output=True)
    said: list[tuple[tuple[int, ...], str]] = []
    for _ in range(10):
        groups = fake.merge_groups(OWNER, NAME)
        if not groups:
            return said
        group = groups[0]
        subprocess.run(["git", "fetch", "-q", "origin", f"+{group.head_ref}:refs/remotes/group"], cwd=checkout,
                       env=env, check=True, capture_output=True)
        git("checkout", "-q", "--force", group.head_sha, cwd=checkout)
        ran = subprocess.run([sys.executable, "-m", "assay", "verify", "--group", group.base_sha, "--json"],
                             cwd=checkout, capture_output=True, text=True)
        state = "success" if ran.returncode == 0 else "failure"
        said.append((group.pulls, state))
        post_status(fake, group.head_sha, state)
    raise AssertionError(f"the merge queue never emptied: {said}")


def test_reviews_green_alone_and_red_together_never_both_land_through_the_merge_queue(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": GITHUB_DESK,
                    "briefs/a-strict.md": scripted("Strict", ["cfg.txt mode=strict"], "grep -q strict cfg.txt"),
                    "briefs/b-lenient.md": scripted("Lenient", ["app.txt needs=lenient"],
                                                    "grep -q lenient app.txt && ! grep -qs strict cfg.txt")})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    without = assay("land", env=env)
    assert without.code == 2 and "main has none" in without.err, without.err  # no queue: nothing merged by hand
    for _ in range(2):
        assert assay("desk", "run", "builder", "--once", env=env, timeout=180).code == 0
    pulls = {p.head.removeprefix("assay/"): p.number for p in fake_github.pulls(OWNER, NAME)}
    assert sorted(pulls) == ["a-strict", "b-lenient"]
    fake_github.require_merge_queue(OWNER, NAME)
    queued = assay("review", "merge", "a-strict", env=env)  # a person's merge goes through the queue too
    assert queued.code == 0 and "queued a-strict in main's merge queue" in queued.out, queued.out + queued.err
    landed = assay("land", "--json", env=env)
    assert landed.code == 0, landed.err
    assert [(d["brief"], d["outcome"]) for d in json.loads(landed.out)["landed"]] == \
        [("a-strict", "queued"), ("b-lenient", "queued")], landed.out + landed.err  # a queued one is left queued
    verdicts = _ci(fake_github, url, tmp_path / "ci")
    assert verdicts == [((pulls["a-strict"],), "success"), ((pulls["a-strict"], pulls["b-lenient"]), "failure")]
    state = {p.head.removeprefix("assay/"): p for p in fake_github.pulls(OWNER, NAME)}
    assert state["a-strict"].merged_at and not state["b-lenient"].merged_at and state["b-lenient"].state == "open"
    main = git("--git-dir", str(fake_github.repo(OWNER, NAME).path), "rev-parse", "main").strip()
    checkout = tmp_path / "ci"
    subprocess.run(["git", "fetch", "-q", "origin"], cwd=checkout, env={**os.environ, **fake_github.git_env()},
                   check=True)
    git("checkout", "-q", "--force", main, cwd=checkout)
    assert (checkout / "cfg.txt").read_text() == "mode=strict\n" and not (checkout / "app.txt").exists()
    # the review the queue dropped is woken for a new round by its desk's next pass, with the reason
    again = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert "a-strict: review merged: done" in again.out, again.out
    assert "b-lenient: woken: main moved to" in again.out and "b-lenient/check exited 1" in again.out, again.out
    assert again.code == 5 and "b-lenient blocked" in again.out  # its agent cannot make both hold: a person decides
