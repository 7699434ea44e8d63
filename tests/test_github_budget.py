"""GitHub's secondary limits, per identity: the fleet's write budget shared through the forge keeps the desks of
one token under 80 content-creating requests a minute together, a secondary-limit 403 is waited out (the claim
renewed meanwhile) and never makes a write twice, and label writes are made only when the label set changes.
Time is the test's own clock, shared with the fake's limit: no minute passes for real."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.core.forge.budget import BUDGET_REF, ForgeBudget, Limits
from assay.core.forge.etags import token_identity
from assay.core.forge.github import GitHubReviews, GitHubTarget
from assay.core.git import ForgeGit
from assay.errors import ForgeError, Throttled
from tests.conftest import Forge
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers.github import NAME, OWNER, World, github_repo, github_reviews


class Clock:
    """The test's time: sleeping moves it on at once."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)


@pytest.fixture
def fake(forge: Forge, tmp_path: Path) -> Iterator[tuple[FakeGitHub, World, Clock]]:
    clock = Clock()
    with FakeGitHub(tmp_path) as gh:
        url = github_repo(gh, forge.seed)
        gh.limit_content(MINUTE, 500, clock=clock)
        yield gh, World(github_reviews(gh), url, forge.seed, gh.git_env()), clock
        assert gh.schema_problems() == []


MINUTE = 10  # GitHub's 80 a minute, scaled down with the fleet so that the test stays short
LIMITS = Limits(per_minute=MINUTE * 9 // 10, per_hour=450)


def desk(gh: FakeGitHub, w: World, clock: Clock, tmp: Path, name: str, budget: bool = True,
         renewals: list[str] | None = None) -> GitHubReviews:
    """One desk's review port on the fleet's token, with its own cache of the forge (as on its own host)."""
    git = ForgeGit(w.url, tmp / f"cache-{name}", token=gh.token)
    shared = ForgeBudget(git, token_identity(gh.token), name, LIMITS, clock) if budget else None
    reviews = GitHubReviews(GitHubTarget(f"{OWNER}/{NAME}", gh.api_url), gh.token, echo=lambda _: None, clock=clock,
                            sleep=clock.sleep, budget=shared)
    reviews.hold(lambda: (renewals if renewals is not None else []).append(name), 600)
    return reviews


def busiest_minute(times: list[float]) -> int:
    return max((sum(1 for u in times if t <= u < t + 60) for t in times), default=0)


def test_a_fleet_on_one_token_stays_under_githubs_minute_limit_together(
        fake: tuple[FakeGitHub, World, Clock], tmp_path: Path) -> None:
    gh, w, clock = fake
    head = w.push_branch("alpha")
    w.reviews.open("alpha", "assay/alpha", "Alpha", head)
    renewals: list[str] = []
    desks = [desk(gh, w, clock, tmp_path, f"d{i}", renewals=renewals) for i in range(3)]
    start = clock.now
    for round_ in range(6):  # 3 desks x 6 comments: 18 writes, twice the limit if made at once
        for i, reviews in enumerate(desks):
            reviews.comment("alpha", "ana", f"d{i} #{round_}")
    bodies = [c.body.split("\n")[0] for c in gh.comments(OWNER, NAME, 1)]
    assert sorted(bodies) == sorted(f"d{i} #{r}" for i in range(3) for r in range(6))  # each once, none lost
    assert gh.secondary_refused == {}  # never refused: the fleet kept itself under the limit
    made = gh.created[gh.user.login]
    assert busiest_minute(made) <= LIMITS.per_minute + 1 <= MINUTE  # and the one write made outside the fleet
    assert clock.now - start >= 60  # what it allows itself in a minute made the rest wait for the next one
    assert {"d0", "d1", "d2"} & set(renewals)  # the claims were renewed while the desks waited
    ledger = ForgeGit(w.url, tmp_path / "reader", token=gh.token).ls_remote(BUDGET_REF + "*")
    assert list(ledger) == [BUDGET_REF + token_identity(gh.token)]  # one ledger per token, no token in it


def test_writes_are_taken_in_blocks_while_the_ledger_has_room(
        fake: tuple[FakeGitHub, World, Clock], tmp_path: Path) -> None:
    """The common case costs no round trip per write: at GitHub's own limits a desk takes 8 at a time."""
    gh, w, clock = fake
    budget = ForgeBudget(ForgeGit(w.url, tmp_path / "c", token=gh.token), "t", "d0", Limits(), clock)
    assert [budget.wait_s() for _ in range(16)] == [0.0] * 16
    assert budget.pushes == 2


def test_without_the_budget_the_same_fleet_meets_the_secondary_limit(
        fake: tuple[FakeGitHub, World, Clock], tmp_path: Path) -> None:
    """The fake refuses as GitHub does once one identity passes 80 a minute; the desks wait by Retry-After and
    still post each comment once."""
    gh, w, clock = fake
    head = w.push_branch("alpha")
    w.reviews.open("alpha", "assay/alpha", "Alpha", head)
    desks = [desk(gh, w, clock, tmp_path, f"d{i}", budget=False) for i in range(3)]
    for round_ in range(6):
        for i, reviews in enumerate(desks):
            reviews.comment("alpha", "ana", f"d{i} #{round_}")
    assert gh.secondary_refused[gh.user.login] > 0
    assert len(gh.comments(OWNER, NAME, 1)) == 18
    assert busiest_minute(gh.created[gh.user.login]) <= MINUTE


@pytest.mark.parametrize("what", ["comment", "status"])
def test_a_secondary_limit_met_mid_write_neither_loses_nor_doubles_it(
        fake: tuple[FakeGitHub, World, Clock], tmp_path: Path, what: str) -> None:
    """The write was applied and the answer is a secondary-limit 403: after the wait it is read back, found, and
    not made again."""
    gh, w, clock = fake
    head = w.push_branch("alpha")
    reviews = desk(gh, w, clock, tmp_path, "d0")
    reviews.open("alpha", "assay/alpha", "Alpha", head)
    if what == "comment":
        gh.faults.arm("POST", r"/issues/\d+/comments$", Fault.SECONDARY_AFTER_WRITE, retry_after=5)
        reviews.comment("alpha", "ana", "looks right")
        assert [c.body.split("\n")[0] for c in gh.comments(OWNER, NAME, 1)] == ["looks right"]
    else:
        row = {"row": "tests", "passed": True, "exit_code": 0, "expect_exit": 0, "duration_ms": 12,
               "output_sha256": "ab" * 32}
        gh.faults.arm("POST", r"/statuses/", Fault.SECONDARY_AFTER_WRITE, retry_after=5)
        reviews.post_statuses("alpha", head, [row], 1)
        assert [s.context for s in gh.statuses(OWNER, NAME, head)] == ["assay/verify"]
    assert 5 in clock.slept


def test_a_secondary_limit_without_retry_after_backs_off_and_is_no_permission_problem(
        fake: tuple[FakeGitHub, World, Clock], tmp_path: Path) -> None:
    gh, w, clock = fake
    gh.limit_content(1, 500, clock=clock, retry_after=False)
    said: list[str] = []
    reviews = desk(gh, w, clock, tmp_path, "d0", budget=False)
    reviews.echo = said.append
    head = w.push_branch("alpha")
    reviews.open("alpha", "assay/alpha", "Alpha", head)  # the one write of this minute
    reviews.hold(lambda: None, 600)
    reviews.label("alpha", "draft", "builder")  # refused: a minute's wait, as GitHub documents, then made
    assert sorted(gh.labels(OWNER, NAME, 1)) == ["assay:draft", "desk:builder"]
    assert sum(clock.slept) == 60
    assert any("secondary rate limit" in s for s in said), said
    reviews.hold(lambda: None, 50)  # a wait past the bound: an error, and no ForgeDenied
    with pytest.raises(ForgeError) as raised:
        reviews.label("alpha", "ready", "builder")
    assert type(raised.value) is Throttled and "rate limit" in raised.value.message and raised.value.wait_s >= 50


def test_labels_are_written_once_per_change_of_the_set(fake: tuple[FakeGitHub, World, Clock]) -> None:
    gh, w, _ = fake
    reviews = github_reviews(gh)
    head = w.push_branch("alpha")
    reviews.open("alpha", "assay/alpha", "Alpha", head)
    reviews.label("alpha", "draft", "builder")
    reviews.label("alpha", "draft", "builder")  # unchanged: no write
    reviews.mark_ready("alpha", head)
    reviews.label("alpha", "ready", "builder")  # the state label swapped in one write
    assert sorted(gh.labels(OWNER, NAME, 1)) == ["assay:ready", "desk:builder"]
    assert reviews.calls["label"] == 2
