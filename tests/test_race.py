"""Twenty real processes race for the same five briefs, twenty rounds: one winner per brief per round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.journal import Journal
from tests.conftest import REPO, Forge

RACERS = 20
ROUNDS = 20
BRIEFS = ["alpha", "beta", "gamma", "delta", "epsilon"]


def race(forge: Forge, tmp_path: Path, racers: int, rounds: int, briefs: list[str],
         judge: Callable[[int, list[dict[str, Any]]], None]) -> None:
    """`racers` processes (tests/helpers/racer.py), each claiming every brief through the real CLI, released
    together `rounds` times; `judge(round, reports)` after each round ({brief: [exit code, holder]} per racer)."""
    racer = REPO / "tests" / "helpers" / "racer.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    logs = [(tmp_path / f"racer-{i}.err").open("w") for i in range(racers)]
    procs = [subprocess.Popen([sys.executable, str(racer), forge.url, f"desk-{i:02d}", *briefs], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs[i], text=True)
             for i in range(racers)]
    try:
        for p in procs:  # every racer is up, imported and waiting before any round starts
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for rnd in range(1, rounds + 1):
            for p in procs:  # release them together: one short write each
                assert p.stdin is not None
                p.stdin.write(f"{rnd}\n")
                p.stdin.flush()
            judge(rnd, [json.loads(p.stdout.readline()) for p in procs if p.stdout])
    finally:
        for p in procs:
            if p.stdin:
                p.stdin.close()
        for p in procs:
            p.wait(timeout=60)
        for log in logs:
            log.close()


@pytest.mark.slow
def test_twenty_processes_twenty_rounds_exactly_one_winner(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    def judge(rnd: int, reports: list[dict[str, Any]]) -> None:
        for brief in BRIEFS:
            codes = Counter(r[brief][0] for r in reports)
            assert codes == Counter({0: 1, 3: RACERS - 1}), (rnd, brief, codes)
            winner = next(r[brief][1] for r in reports if r[brief][0] == 0)
            on_forge = forge.claim_json(brief)  # plain git, not the module under test
            assert (on_forge["state"], on_forge["epoch"], on_forge["holder"]) == ("held", rnd, winner)
            claims.release(brief, str(on_forge["desk"]), epoch=rnd)

    race(forge, tmp_path, RACERS, ROUNDS, BRIEFS, judge)
    for brief in BRIEFS:
        chain = forge.chain(brief)
        assert len(chain) == 2 * ROUNDS
        held_per_epoch = Counter(c["epoch"] for c in chain if c["state"] == "held")
        assert held_per_epoch == Counter({e: 1 for e in range(1, ROUNDS + 1)})


def _state(forge: Forge, brief: str) -> str | None:
    """The claim's state read with plain git; None for a brief never claimed."""
    shown = subprocess.run(["git", "--git-dir", str(forge.path), "show", f"refs/assay/claims/{brief}:claim.json"],
                           capture_output=True, text=True)
    return json.loads(shown.stdout)["state"] if shown.returncode == 0 else None


OVERLAPPING = {"alpha": ["src/app.py"], "beta": ["src/*.py"], "gamma": ["docs/"], "delta": ["docs/guide/**"],
               "epsilon": ["tests/**"]}
PAIRS = [("alpha", "beta"), ("gamma", "delta")]


@pytest.mark.slow
def test_racing_desks_never_both_hold_briefs_whose_footprints_overlap(forge: Forge, claims: Claims,
                                                                      tmp_path: Path) -> None:
    """Ten processes race, ten rounds, for five briefs of which two pairs declare overlapping `touches:`: each
    round exactly one brief of each pair is held (the overlap check and the claim are one compare-and-swap), the
    lone brief has one winner, and every loser exits 3 (lost, or queued behind the winner)."""
    for brief, touches in OVERLAPPING.items():
        forge.add_brief(brief, f"---\ntitle: {brief}\ntouches: {json.dumps(touches)}\n---\nWrite.\n")
    racers = 10

    def judge(rnd: int, reports: list[dict[str, Any]]) -> None:
        held = {b for b in OVERLAPPING if _state(forge, b) == "held"}
        for pair in PAIRS:
            assert len(held & set(pair)) == 1, (rnd, held)
        assert "epsilon" in held
        for brief in OVERLAPPING:
            codes = Counter(r[brief][0] for r in reports)
            assert codes == (Counter({0: 1, 3: racers - 1}) if brief in held else Counter({3: racers})), \
                (rnd, brief, codes)
        for brief in held:
            on_forge = forge.claim_json(brief)
            claims.release(brief, str(on_forge["desk"]), epoch=int(str(on_forge["epoch"])))

    race(forge, tmp_path, racers, 10, list(OVERLAPPING), judge)
    prints = json.loads(subprocess.run(["git", "--git-dir", str(forge.path), "show", "refs/assay/footprints:"
                                        "footprints.json"], capture_output=True, text=True, check=True).stdout)
    assert set(prints["briefs"]) <= set(OVERLAPPING) and prints["briefs"]


def test_a_journal_push_that_loses_its_claim_to_an_identical_renewal_is_retried_not_refused(
        forge: Forge, tmp_path: Path) -> None:
    """The desk's heartbeat renews the claim in the same clock second as a journal push renews it: both build
    the same claim commit. The heartbeat lands between the journal push's ref advertisement and its ref
    transaction (a pre-receive hook on the forge runs it there), so the atomic push is rejected while the claim
    ref reads as "our" commit. An atomic push lands whole or not at all: the journal push is retried and lands,
    and is never reported as refused."""
    now = 1_900_000_000.0
    brief = "alpha"
    claims = Claims(ForgeGit(forge.url, tmp_path / "cache-desk"), clock=lambda: now)
    claims.claim(brief, "builder")
    heartbeat = tmp_path / "heartbeat.py"
    heartbeat.write_text(
        "from pathlib import Path\nfrom assay.core.claims import Claims\nfrom assay.core.git import ForgeGit\n"
        f"Claims(ForgeGit({forge.url!r}, Path({str(tmp_path / 'cache-heartbeat')!r})), clock=lambda: {now})"
        f".renew({brief!r}, 'builder', epoch=1)\n")
    raced = tmp_path / "raced"
    hook = forge.path / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nif grep -q refs/assay/journal/{brief} && [ ! -e {raced} ]; then\n"
                    f"  touch {raced}\n"
                    f"  env -i PATH=\"$PATH\" HOME=\"$HOME\" PYTHONPATH={REPO} {sys.executable} {heartbeat} || exit 1\n"
                    "fi\nexit 0\n")
    hook.chmod(0o755)
    Journal.open(claims, brief, "builder", 1, "run1").add("note", sync=True, data={"text": "hello"})
    assert raced.exists()  # the race happened
    log = subprocess.run(["git", "--git-dir", str(forge.path), "log", "--format=%s", f"refs/assay/journal/{brief}"],
                         capture_output=True, text=True, check=True).stdout
    assert len(log.splitlines()) == 1  # the entry landed, once
    claim = json.loads(subprocess.run(["git", "--git-dir", str(forge.path), "show",
                                       f"refs/assay/claims/{brief}:claim.json"],
                                      capture_output=True, text=True, check=True).stdout)
    assert claim["state"] == "held" and claim["epoch"] == 1
