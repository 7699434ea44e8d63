"""Claim changes by people and desks land with their journal entry, in one push, or not at all."""

from __future__ import annotations

from pathlib import Path

from assay.core.claims import Claims
from tests.conftest import Forge, assay
from tests.helpers.desks import brief, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants


def test_wait_wake_and_release_each_journal_their_change(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    steps = [(("wait", "alpha", "--on", "manual"), "waiting", "wait"),
             (("wake", "alpha"), "held", "wake"),
             (("release", "alpha", "--desk", "d", "--outcome", "done", "--reason", "shipped"), "done", "claim")]
    for args, state, kind in steps:
        run = assay(*args, "--forge", forge.url, env={"ASSAY_PERSON": "ada"})
        assert run.code == 0, run.err
        assert claim_chain(forge.path, "alpha")[-1]["state"] == state
        last = entries(forge.path, "alpha")[-1]
        assert last["kind"] == kind and last["epoch"] == 1
    assert entries(forge.path, "alpha")[-1]["data"] == {"action": "release", "outcome": "done", "reason": "shipped"}
    assert len(entries(forge.path, "alpha")) == 3 and invariants(forge.path, "alpha") == []


def test_a_refused_transition_writes_neither_ref(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    before = (forge.tip("refs/assay/claims/alpha"), forge.tip("refs/assay/journal/alpha"))
    wake = assay("wake", "alpha", "--forge", forge.url)  # it is held, not waiting
    assert wake.code == 3 and "cannot wake" in wake.err
    assert (forge.tip("refs/assay/claims/alpha"), forge.tip("refs/assay/journal/alpha")) == before


def test_a_desk_that_blocks_a_closed_review_journals_why(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/c.md": brief("C", ["write c.txt c"], "test -f c.txt")})
    assert run_desk(work, "builder", tmp_path).code == 0
    assert assay("review", "close", "c", "--reason", "not wanted", "--forge", work.url).code == 0
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 5 and "c blocked" in again.out
    assert claim_chain(work.path, "c")[-1]["state"] == "blocked"
    last = entries(work.path, "c")[-1]
    assert last["kind"] == "claim" and last["data"]["action"] == "block" and last["run"] == "desk:builder"
    assert "the review was closed" in last["data"]["reason"]
