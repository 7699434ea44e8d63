"""A desk SIGKILLed around keeping the footprint its brief's first diff shows, then run again: the brief reaches its
review, and the footprint is on the forge once, from the diff, read with plain git."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import Forge, audit_failures, git
from tests.helpers.desks import brief, publish, run_desk
from tests.journal_check import claim_chain, invariants

CASES: dict[str, tuple[list[str], str]] = {
    "footprint.before-push": (["footprint.before-push"], "the next run keeps it"),
    "footprint.after-push": (["footprint.after-push"], "kept already: the takeover carries it on"),
}


def footprints(forge: Forge) -> dict[str, dict[str, object]]:
    shown = git("--git-dir", str(forge.path), "show", "refs/assay/footprints:footprints.json")
    return dict(json.loads(shown)["briefs"])


@pytest.mark.parametrize("case", list(CASES))
def test_a_desk_killed_around_keeping_a_footprint_keeps_it_once(work: Forge, tmp_path: Path, case: str) -> None:
    points, _ = CASES[case]
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    for point in points:
        crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT=point)
        assert crashed.code == -signal.SIGKILL, crashed.err
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "review ready" in again.out, again.out + again.err
    chain = claim_chain(work.path, "ship")
    assert chain[-1]["state"] == "waiting" and chain[-1]["epoch"] == 2
    # kept by the first run (a takeover carries it on, at its epoch) or by the second
    assert footprints(work) == {"ship": {"touches": ["ship.txt"], "source": "diff", "epoch": 2}}
    assert invariants(work.path, "ship") == [] and audit_failures(work.url, "ship") == {}
