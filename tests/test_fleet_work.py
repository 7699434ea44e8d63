"""The fleet scenario of `benchmarks/fleetwork.py`, bounded: 16 briefs (four on one shared file, a pair that is
green alone and red together, a duplicate pair, work main holds already), three real desks and a reviewer that
writes a review note on some reviews and lands every review as soon as it is ready. Judged with plain git."""

from __future__ import annotations

from pathlib import Path

import pytest

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
