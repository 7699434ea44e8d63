"""The fleet scenario of `benchmarks/fleetwork.py`, bounded: a dozen briefs or more (four on one shared file,
a pair that is green alone and red together, a duplicate pair, work main holds already), three real desks and a
reviewer that writes a review note on some reviews and lands every review as soon as it is ready; on a forge on
disk, and on the fake GitHub through main's merge queue. Judged with plain git (and, on GitHub, the fake's pull
requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakegithub import FakeGitHub
from tests.helpers.fleetgithub import GitHubFleet
from tests.helpers.fleetrun import Fleet


@pytest.mark.slow
def test_a_fleet_never_works_overlapping_briefs_at_once_nor_breaks_main(tmp_path: Path) -> None:
    outcome = Fleet(tmp_path, 16, 3, checks=True).run(timeout_s=400)
    view = outcome.view()
    assert outcome.overlapping_in_flight == [], view
    assert outcome.breaking_merges == [], view
    assert outcome.ready_unmerged == [], view  # nothing left ready that cannot merge
    assert outcome.ready_with_open_thread == [], view  # every review thread answered before ready
    assert outcome.threads_noted >= 1 and outcome.threads_answered == outcome.threads_noted, view
    assert sum(1 for s in outcome.states.values() if s == "done") >= 12, outcome.states
    # the group of four on one file all landed, one after another
    assert all(outcome.states[f"grp0-{i}"] == "done" for i in range(4)), outcome.states
    assert outcome.done_without_agent == ["done0"] and outcome.done_with_agent == [], view  # its work was on main
    # of the pair red together, one landed and the other waits for a person, never on main
    assert sorted(outcome.states[b] for b in ("strict0", "lenient0")) == ["blocked", "done"], outcome.states


@pytest.mark.slow
def test_the_same_fleet_on_github_through_the_merge_queue(tmp_path: Path, fake_github: FakeGitHub) -> None:
    """12 briefs, three desks on the fake GitHub; main requires a merge queue, `assay land` queues, the reviewer
    plays CI (`assay verify --group`) on each merge group. `ready_with_open_thread` cannot be judged there (see
    `GitHubFleet.judge_threads`): the reviewer lands nothing whose thread waits, and the threads are counted."""
    outcome = GitHubFleet(tmp_path, 12, 3, True, fake_github).run(timeout_s=400)
    view = outcome.view()
    pair = {b: outcome.states[b] for b in ("strict0", "lenient0")}
    assert outcome.overlapping_in_flight == [], view
    assert outcome.breaking_merges == [], view  # the merge groups kept both of the pair off main
    assert outcome.ready_unmerged == [], view  # one the queue dropped is woken, and blocked when it cannot be fixed
    assert outcome.threads_noted >= 1 and outcome.threads_answered == outcome.threads_noted, view
    assert sum(1 for s in outcome.states.values() if s == "done") >= 9, outcome.states
    assert all(outcome.states[f"grp0-{i}"] == "done" for i in range(4)), outcome.states
    assert outcome.done_without_agent == ["done0"] and outcome.done_with_agent == [], view
    assert sorted(pair.values()) == ["blocked", "done"], outcome.states
