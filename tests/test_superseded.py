"""The superseded check a desk makes before marking a review ready (`landing.superseded`), against many ready
reviews: the same verdicts as merging against each of them, with a number of git processes that does not grow with
them (it ran two merges per ready review of the fleet for every review made ready). Real git, a real bare forge."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.core import custody, landing
from assay.core.claims import Claims
from assay.core.forge.plain import PlainReviews
from assay.core.git import ForgeGit
from tests.conftest import Forge, git


class CountingGit(ForgeGit):
    """The real git port, counting the git processes it starts by command."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.started: Counter[str] = Counter()

    def _git(self, *args: str, **kwargs: Any) -> Any:
        self.started[args[0]] += 1
        return super()._git(*args, **kwargs)


@pytest.fixture
def port(forge: Forge) -> Iterator[CountingGit]:
    git_port = CountingGit(forge.url)
    yield git_port
    git_port.close()


def branch(forge: Forge, where: Path, brief: str, files: dict[str, str], on: str = "main") -> str:
    """A commit of `files` on top of the forge's `on`, pushed as assay/<brief>; returns it."""
    if not where.exists():
        git("clone", "-q", forge.url, str(where))
    git("fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*", cwd=where)
    git("checkout", "-q", "--detach", f"origin/{on}", cwd=where)
    for name, text in files.items():
        (where / name).write_text(text)
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", f"{brief}'s work", cwd=where)
    git("push", "-q", "-f", "origin", f"HEAD:refs/heads/assay/{brief}", cwd=where)
    return git("rev-parse", "HEAD", cwd=where).strip()


def ready_and_waiting(claims: Claims, reviews: PlainReviews, brief: str, head: str) -> None:
    """A brief whose review is ready at `head` and whose claim waits on it, as a desk leaves one."""
    claims.claim(brief, "builder")
    reviews.open(brief, f"assay/{brief}", brief.title(), head)
    reviews.mark_ready(brief, head)
    custody.wait(claims, brief, "review", by="builder")


def test_superseded_judges_many_ready_reviews_with_a_few_processes(forge: Forge, port: CountingGit,
                                                                   tmp_path: Path) -> None:
    claims, reviews = Claims(port), PlainReviews(port)
    work = tmp_path / "work"
    heads = {b: branch(forge, work, b, {f"{b}.txt": f"{b}\n"}) for b in ("beta", "epsilon")}
    heads["delta"] = branch(forge, work, "delta", {"shared.txt": "delta's\n"})
    heads["gamma"] = branch(forge, work, "gamma", {"gamma.txt": "gamma\n"}, on="assay/delta")  # holds delta's work
    for brief, head in heads.items():
        ready_and_waiting(claims, reviews, brief, head)

    alpha = branch(forge, work, "alpha", {"alpha.txt": "alpha\n"})  # a change of its own
    port.started.clear()
    listed = port.round_trips["ls-remote"]
    assert landing.superseded(port, reviews, claims, "alpha", alpha)["verdict"] == "ready"
    assert port.round_trips["ls-remote"] - listed == 1  # main, the claims and the reviews in one listing (was 3)
    assert port.started["merge-tree"] == 1, port.started  # its own merge into main; none against the four others
    assert sum(port.started.values()) <= 8, port.started  # it was 14 with these four: two merges and more each

    elsewhere = ForgeGit(forge.url, tmp_path / "elsewhere")  # another host's desk takes a brief: a claim moved
    Claims(elsewhere).claim("hello", "other")
    elsewhere.close()
    port.started.clear()
    assert landing.superseded(port, reviews, claims, "alpha", alpha)["verdict"] == "ready"
    assert port.started["fetch"] == 0, port.started  # only the ready reviews' claims are read (every moved one was)

    copy = branch(forge, work, "hello", {"epsilon.txt": "epsilon\n"})  # epsilon's very change, made apart
    found = landing.superseded(port, reviews, claims, "hello", copy)
    assert (found["verdict"], found["by"], found["head"]) == ("superseded", "epsilon", heads["epsilon"])

    more = branch(forge, work, "hello", {"epsilon.txt": "epsilon\n", "more.txt": "and more\n"})  # more than it
    assert landing.superseded(port, reviews, claims, "hello", more)["verdict"] == "ready"

    # delta's branch is inside gamma's, which shares its commits: judged by the merges, as before
    found = landing.superseded(port, reviews, claims, "delta", heads["delta"])
    assert (found["verdict"], found["by"]) == ("superseded", "gamma")

    # epsilon's claim waits no more (released on another host since this port last read it): its ready review
    # stands for nobody's work in flight, and the copy of its change is made ready
    again = ForgeGit(forge.url, tmp_path / "elsewhere")
    Claims(again).release("epsilon", "builder", reason="taken back")
    again.close()
    assert landing.superseded(port, reviews, claims, "hello", copy)["verdict"] == "ready"
