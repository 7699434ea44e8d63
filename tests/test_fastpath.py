"""The agent's fast path: its steps are served by its desk over a local socket, with the same recovery."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from assay.claims import Claims
from tests.conftest import Forge, assay
from tests.journal_check import claim_chain, entries, invariants
from tests.test_desk import brief, publish, run_desk
from tests.test_desk import work as work  # noqa: F401  (the fixture)


def test_an_agents_steps_go_through_its_desk_not_the_forge(work: Forge, tmp_path: Path) -> None:
    probe = f"ASSAY_FORGE=/nowhere {sys.executable} -m assay step run --name probe --policy unsafe -- true"
    value = f"ASSAY_FORGE=/nowhere {sys.executable} -m assay step value uuid > {tmp_path / 'uuid.txt'}"
    publish(work, {"briefs/p.md": brief("P", [f"run {probe}", f"run {value}", "write p.txt p"], "test -f p.txt")})
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert "verified" in run.out  # the forge the agent names does not exist: only the desk could journal these
    journal = entries(work.path, "p")
    probe_entries = [e for e in journal if e.get("step") == "probe"]
    assert [e["kind"] for e in probe_entries] == ["intent", "result"]
    agent_run = next(e for e in journal if e.get("step") == "agent" and e["kind"] == "result")["data"]["output"]["run"]
    assert {e["run"] for e in probe_entries} == {agent_run}
    recorded = next(e for e in journal if e["kind"] == "nondeterminism")["data"]["value"]
    assert (tmp_path / "uuid.txt").read_text().strip() == recorded
    assert invariants(work.path, "p") == []


def test_an_agent_step_killed_after_its_effect_is_outcome_unknown_not_repeated(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/d.md": brief("D", ["write d.txt d", "deploy"], "test -f d.txt")})
    run = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="step.after-execute:deploy")
    assert run.code == 0, run.err  # the agent's step process died; the desk and its next attempt did not
    assert (tmp_path / "effects.log").read_text().count("deployed d") == 1
    deploys = [e for e in entries(work.path, "d") if e.get("step") == "deploy"]
    intent = next(e for e in deploys if e["kind"] == "intent")
    assert [e["kind"] for e in deploys if e.get("intent") == intent["seq"]] == ["outcome_unknown", "refused"]
    assert claim_chain(work.path, "d")[-1]["state"] == "waiting"
    assert invariants(work.path, "d") == []


def test_with_no_desk_listening_the_step_goes_to_the_forge(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    claims.claim("alpha", "d")
    ctx = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "r1", "ASSAY_SOCKET": str(tmp_path / "no-desk.sock")}
    run = assay("step", "run", "--name", "x", "--", "echo", "direct", env=ctx)
    assert run.code == 0 and "direct" in run.out
    assert [e["kind"] for e in entries(forge.path, "alpha")] == ["intent", "result"]


def test_the_client_imports_neither_click_nor_git(tmp_path: Path) -> None:
    code = ("import sys, assay.entry, assay.stepclient; "
            "print(sorted(m for m in sys.modules if m in ('click', 'assay.git', 'assay.cli', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
