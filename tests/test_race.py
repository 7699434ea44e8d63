"""Twenty real processes race for the same five briefs, twenty rounds: one winner per brief per round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from assay.core.claims import Claims
from tests.conftest import REPO, Forge

RACERS = 20
ROUNDS = 20
BRIEFS = ["alpha", "beta", "gamma", "delta", "epsilon"]


@pytest.mark.slow
def test_twenty_processes_twenty_rounds_exactly_one_winner(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    racer = REPO / "tests" / "helpers" / "racer.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    logs = [(tmp_path / f"racer-{i}.err").open("w") for i in range(RACERS)]
    procs = [subprocess.Popen([sys.executable, str(racer), forge.url, f"desk-{i:02d}", *BRIEFS], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[i], text=True)
             for i in range(RACERS)]
    try:
        for p in procs:  # every racer is up, imported and waiting before any round starts
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for rnd in range(1, ROUNDS + 1):
            for p in procs:  # release them together: one short write each
                assert p.stdin is not None
                p.stdin.write(f"{rnd}\n")
                p.stdin.flush()
            reports = [json.loads(p.stdout.readline()) for p in procs if p.stdout]
            for brief in BRIEFS:
                codes = Counter(r[brief][0] for r in reports)
                assert codes == Counter({0: 1, 3: RACERS - 1}), (rnd, brief, codes)
                winner = next(r[brief][1] for r in reports if r[brief][0] == 0)
                on_forge = forge.claim_json(brief)  # plain git, not the module under test
                assert (on_forge["state"], on_forge["epoch"], on_forge["holder"]) == ("held", rnd, winner)
                claims.release(brief, str(on_forge["desk"]), epoch=rnd)
    finally:
        for p in procs:
            if p.stdin:
                p.stdin.close()
        for p in procs:
            p.wait(timeout=60)
        for log in logs:
            log.close()
    for brief in BRIEFS:
        chain = forge.chain(brief)
        assert len(chain) == 2 * ROUNDS
        held_per_epoch = Counter(c["epoch"] for c in chain if c["state"] == "held")
        assert held_per_epoch == Counter({e: 1 for e in range(1, ROUNDS + 1)})
