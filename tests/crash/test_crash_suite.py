"""SIGKILL at every named crash point, restart, and check invariants by reading the refs with plain git."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO, Forge, audit_failures
from tests.journal_check import claim_chain, entries, invariants

PROGRAM = REPO / "tests" / "crash" / "desk_program.py"
CLEAN = {"prepare": 1, "charge": 1, "deploy": 1, "tick": 5, "notify": 1}

# crash points armed one after another (one process each), then a clean restart;
# the effect counts expected once the brief is done.
CASES: dict[str, tuple[list[str], dict[str, int]]] = {
    "claim.before-push": (["claim.before-push"], CLEAN),
    "claim.after-push": (["claim.after-push"], CLEAN),
    "takeover.before-push": (["claim.after-push", "takeover.before-push"], CLEAN),
    "takeover.after-push": (["claim.after-push", "takeover.after-push"], CLEAN),
    "journal.group-flush:prepare": (["journal.group-flush:prepare"], {**CLEAN, "prepare": 2}),
    "step.after-execute:prepare": (["step.after-execute:prepare"], {**CLEAN, "prepare": 2}),
    "journal.after-intent:charge": (["journal.after-intent:charge"], CLEAN),
    "step.after-execute:charge": (["step.after-execute:charge"], {**CLEAN, "charge": 2}),
    "step.after-result:charge": (["step.after-result:charge"], CLEAN),
    "journal.before-push:deploy": (["journal.before-push:deploy"], CLEAN),
    "journal.after-push:deploy": (["journal.after-push:deploy"], {**CLEAN, "check_deploy": 1}),
    "journal.after-intent:deploy": (["journal.after-intent:deploy"], {**CLEAN, "check_deploy": 1}),
    "step.before-execute:deploy": (["step.before-execute:deploy"], {**CLEAN, "check_deploy": 1}),
    "step.after-execute:deploy": (["step.after-execute:deploy"], {**CLEAN, "check_deploy": 1}),
    "step.after-result:deploy": (["step.after-result:deploy"], CLEAN),
    "recovery.after-load": (["step.after-execute:deploy", "recovery.after-load"], {**CLEAN, "check_deploy": 1}),
    "recovery.before-outcome-unknown:deploy": (
        ["step.after-execute:deploy", "recovery.before-outcome-unknown:deploy"], {**CLEAN, "check_deploy": 1}),
    "recovery.after-outcome-unknown:deploy": (
        ["step.after-execute:deploy", "recovery.after-outcome-unknown:deploy"], {**CLEAN, "check_deploy": 1}),
    "step.after-execute:check_deploy": (
        ["journal.after-intent:deploy", "step.after-execute:check_deploy"], {**CLEAN, "check_deploy": 2}),
    "step.after-execute:tick": (["step.after-execute:tick"], {**CLEAN, "tick": 6}),
    "journal.group-flush:tick": (["journal.group-flush:tick"], {**CLEAN, "tick": 10}),
    "journal.after-checkpoint:state": (["journal.after-checkpoint:state"], CLEAN),
    "journal.after-intent:notify": (["journal.after-intent:notify"], {**CLEAN, "check_notify": 1}),
    "step.after-execute:notify": (["step.after-execute:notify"], {**CLEAN, "check_notify": 1}),
    "release.before-push": (["release.before-push"], CLEAN),
    "release.after-push": (["release.after-push"], CLEAN),
}


def run_program(forge: Forge, log: Path, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ASSAY_CRASH_AT", None)
    if crash_at:
        env["ASSAY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(PROGRAM), forge.url, str(log)], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("case", list(CASES))
def test_crash_and_recover(forge: Forge, tmp_path: Path, case: str) -> None:
    points, expected = CASES[case]
    log = tmp_path / "effects.log"
    log.touch()
    for point in points:
        crashed = run_program(forge, log, point)
        assert crashed.returncode == -signal.SIGKILL, (point, crashed.returncode, crashed.stderr[-2000:])
    recovered = run_program(forge, log, None)
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    lines = [line.split() for line in log.read_text().splitlines()]
    counts = Counter(name for name, _ in lines)
    assert dict(counts) == expected
    for name in ("charge",):  # an idempotent step re-ran with the same key
        assert len({key for n, key in lines if n == name}) == 1
    assert invariants(forge.path, "alpha") == []
    assert audit_failures(forge.url, "alpha") == {}  # the audit finds nothing amiss in a recovered history
    chain = claim_chain(forge.path, "alpha")
    assert chain[-1]["state"] == "done"
    kinds = Counter(e["kind"] for e in entries(forge.path, "alpha"))
    if "check_deploy" in expected or "check_notify" in expected:
        assert kinds["outcome_unknown"] == 1 and kinds["refused"] == 1


def test_a_finished_brief_restarted_does_nothing_more(forge: Forge, tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    log.touch()
    assert run_program(forge, log, None).returncode == 0
    before = log.read_text()
    again = run_program(forge, log, None)
    assert again.returncode == 0 and "already done" in again.stdout and log.read_text() == before
