"""GitHub inside its rate limits: repeated reads are conditional (a 304 costs no quota) across processes,
and the sweep reads pull requests only for the claims that need them, for free when nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Forge, assay
from tests.fakegithub import FakeGitHub
from tests.helpers.desks import brief, publish
from tests.helpers.github import DESK, NAME, OWNER, World, github_repo, github_reviews


@dataclass
class Fleet:
    gh: FakeGitHub
    world: World
    env: dict[str, str]  # what `assay` processes on this fake need, one cache directory for all of them

    def costly(self) -> Counter[tuple[str, str]]:
        """Requests that cost quota so far, by (method, operation)."""
        with self.gh.lock:
            return Counter(self.gh.calls)

    def unchanged(self) -> Counter[tuple[str, str]]:
        with self.gh.lock:
            return Counter(self.gh.not_modified)

    def used(self) -> int:
        return self.gh.quota(self.gh.user).used


@pytest.fixture
def fleet(forge: Forge, tmp_path: Path) -> Iterator[Fleet]:
    with FakeGitHub(tmp_path) as gh:
        url = github_repo(gh, forge.seed)
        env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": gh.api_url, "GITHUB_TOKEN": gh.token,
               "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
        yield Fleet(gh, World(github_reviews(gh), url, forge.seed, gh.git_env()), env)
        assert gh.schema_problems() == []


def publish_on(fleet: Fleet, forge: Forge, files: dict[str, str]) -> None:
    """Commit `files` to main and push it to the fake GitHub (over smart HTTP, with the token)."""
    publish(forge, files)
    pushed = subprocess.run(["git", "push", "-q", fleet.world.url, "HEAD:refs/heads/main"], cwd=forge.seed,
                            env={**os.environ, **fleet.gh.git_env()}, capture_output=True, text=True)
    assert pushed.returncode == 0, pushed.stderr


def show(fleet: Fleet, brief_id: str) -> dict[str, object]:
    done = assay("review", "show", brief_id, "--json", env=fleet.env)
    assert done.code == 0, done.err
    shown: dict[str, object] = json.loads(done.out)
    return shown


def test_a_second_process_reading_an_unchanged_pull_request_pays_no_quota(fleet: Fleet, tmp_path: Path) -> None:
    head = fleet.world.push_branch("alpha")
    fleet.world.reviews.open("alpha", "assay/alpha", "Alpha", head)
    first = show(fleet, "alpha")  # a new process, an empty cache: answers with ETags
    calls, unchanged, used = fleet.costly(), fleet.unchanged(), fleet.used()
    assert show(fleet, "alpha") == first  # another process: the same answer, from 304s
    assert fleet.costly() == calls and fleet.used() == used
    # the pull request (found twice: the review, then its threads), its reviews, its comments, its review comments
    assert sum((fleet.unchanged() - unchanged).values()) == 5

    fleet.gh.comment(OWNER, NAME, 1, "please add a test")  # a person comments: only that list is read again
    calls, unchanged = fleet.costly(), fleet.unchanged()
    assert "please add a test" in json.dumps(show(fleet, "alpha"))
    assert fleet.costly() - calls == Counter({("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): 1})
    assert sum((fleet.unchanged() - unchanged).values()) == 4

    kept = list((tmp_path / "cache").rglob("github/*/*.json"))
    assert len(kept) == 4 and not [p for p in kept if fleet.gh.token in p.read_text()]


def test_a_damaged_answer_cache_is_only_a_miss(fleet: Fleet, tmp_path: Path) -> None:
    head = fleet.world.push_branch("alpha")
    fleet.world.reviews.open("alpha", "assay/alpha", "Alpha", head)
    first = show(fleet, "alpha")
    kept = sorted((tmp_path / "cache").rglob("github/*/*.json"))
    kept[0].write_text('{"v": 1, "url": "elsewhere", "etag": "W/\\"x\\"", "body": []}')  # another URL's answer
    kept[1].write_bytes(b"\x00\xffnot json")
    kept[2].write_text(kept[2].read_text().replace('"etag":"', '"etag":"W/stale'))  # an ETag GitHub never gave
    calls = fleet.costly()
    assert show(fleet, "alpha") == first
    assert sum((fleet.costly() - calls).values()) == 3  # each read again in full, none trusted
    calls = fleet.costly()
    assert show(fleet, "alpha") == first and fleet.costly() == calls  # and kept again


def test_the_sweep_settles_a_merged_pull_request_and_an_unchanged_sweep_costs_nothing(forge: Forge,
                                                                                       fleet: Fleet) -> None:
    publish_on(fleet, forge, {"desks/builder.yaml": DESK,
                    "briefs/alpha.md": brief("Alpha", ["write alpha.txt hi"], "test -f alpha.txt"),
                    "briefs/beta.md": brief("Beta", ["write beta.txt hi"], "test -f beta.txt")})
    done = assay("desk", "run", "builder", "--once", env=fleet.env, timeout=240)
    assert done.code == 0, done.err
    claims = json.loads(assay("claims", "--json", env=fleet.env).out)["claims"]
    assert {c["brief"]: c["state"] for c in claims} == {"alpha": "waiting", "beta": "waiting"}
    [alpha] = [p for p in fleet.gh.pulls(OWNER, NAME) if p.head == "assay/alpha"]
    fleet.gh.merge(OWNER, NAME, alpha.number)  # a person merges alpha; beta stays as it is

    swept = assay("sweep", "--json", env=fleet.env)
    assert swept.code == 0, swept.err
    waits = [f for f in json.loads(swept.out)["findings"] if f["kind"] == "wait"]
    assert [(f["brief"], f["action"]) for f in waits] == [("alpha", "released as done")]
    claims = json.loads(assay("claims", "--json", env=fleet.env).out)["claims"]
    assert {c["brief"]: c["state"] for c in claims} == {"alpha": "done", "beta": "waiting"}

    calls, unchanged, used = fleet.costly(), fleet.unchanged(), fleet.used()
    again = assay("sweep", "--json", env=fleet.env)
    assert again.code == 0, again.err
    assert fleet.costly() == calls and fleet.used() == used  # nothing changed: nothing paid
    assert fleet.unchanged() - unchanged == Counter({("GET", "/repos/{owner}/{repo}/pulls"): 1})  # beta's, a 304
    trips = json.loads(again.out)["round_trips"]
    assert trips["api"] == trips["api-304"] == 1
    assert not [f for f in json.loads(again.out)["findings"] if f["action"]]


def test_a_merge_under_a_held_claim_is_found_on_github(forge: Forge, fleet: Fleet) -> None:
    publish_on(fleet, forge, {"desks/builder.yaml": DESK,
                    "briefs/alpha.md": brief("Alpha", ["write alpha.txt hi"], "test -f alpha.txt")})
    took = assay("claim", "alpha", "--desk", "builder", env=fleet.env)
    assert took.code == 0, took.err
    head = fleet.world.push_branch("alpha")
    fleet.world.reviews.open("alpha", "assay/alpha", "Alpha", head)
    fleet.world.reviews.mark_ready("alpha", head)
    fleet.gh.merge(OWNER, NAME, 1)
    swept = assay("sweep", "--json", env=fleet.env)
    assert swept.code == 0, swept.err
    found = [f for f in json.loads(swept.out)["findings"] if f["kind"] == "merged-held"]
    assert [f["brief"] for f in found] == ["alpha"] and found[0]["key"].endswith(":pull/1")
