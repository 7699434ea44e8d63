"""The agent's fast path: its steps are served by its desk over a local socket, with the same recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.claims import Claims
from assay.git import ForgeGit
from assay.stepserver import StepServer
from tests.conftest import Forge, assay, audit_failures
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
    assert audit_failures(work.url, "p") == {}


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
    assert audit_failures(work.url, "d") == {}


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


@pytest.fixture
def served(forge: Forge, claims: Claims, tmp_path: Path) -> Iterator[tuple[StepServer, dict[str, str]]]:
    """A desk's step server for brief alpha (run r1), as `assay desk run` starts one for its agent."""
    claims.claim("alpha", "d")
    server = StepServer(forge.url, tmp_path / "cache", "alpha", "d", 1, "r1")
    server.start()
    env = {**os.environ, "ASSAY_SOCKET": str(server.path), "ASSAY_FORGE": "/nowhere", "ASSAY_BRIEF": "alpha",
           "ASSAY_DESK": "d", "ASSAY_EPOCH": "1", "ASSAY_RUN": "r1"}
    yield server, env
    server.stop()


def client(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "assay", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_step_inside_a_step_does_not_wait_on_its_own_desk(served: tuple[StepServer, dict[str, str]],
                                                            forge: Forge) -> None:
    _, env = served
    nested = f"ASSAY_FORGE={forge.url} {sys.executable} -m assay step value uuid"
    outer = client(env, "step", "run", "--name", "outer", "--policy", "safe", "--", "sh", "-c", nested)
    out, err = outer.communicate(timeout=60)
    assert outer.returncode == 0, err
    assert out.strip() in [e["data"]["value"] for e in entries(forge.path, "alpha") if e["kind"] == "nondeterminism"]


def test_a_recorded_value_is_on_the_forge_before_it_is_printed(served: tuple[StepServer, dict[str, str]],
                                                               forge: Forge) -> None:
    _, env = served
    value = client(env, "step", "value", "random", "--bytes=8")
    out, _ = value.communicate(timeout=60)
    assert value.returncode == 0 and len(out.strip()) == 16
    assert [e["data"]["value"] for e in entries(forge.path, "alpha") if e["kind"] == "nondeterminism"] == [out.strip()]


def test_both_paths_read_a_step_command_line_alike(served: tuple[StepServer, dict[str, str]], forge: Forge,
                                                   tmp_path: Path) -> None:
    _, env = served
    args = ("step", "run", "--name", "x", "echo", "hi", "--policy", "safe")
    fast = client(env, *args)
    assert fast.wait(timeout=60) == 0
    direct_env = {**env, "ASSAY_FORGE": forge.url, "ASSAY_RUN": "r2"}
    del direct_env["ASSAY_SOCKET"]
    direct = client(direct_env, *args)
    assert direct.wait(timeout=60) == 0
    intents = [e for e in entries(forge.path, "alpha") if e["kind"] == "intent"]
    assert [(e["run"], e["policy"], e["data"]["input"]) for e in intents] == [
        ("r1", "unsafe", {"argv": ["echo", "hi", "--policy", "safe"]})]  # r2 replayed r1's result


def test_sigterm_to_a_served_step_stops_its_command_and_records_it(served: tuple[StepServer, dict[str, str]],
                                                                   forge: Forge, tmp_path: Path) -> None:
    _, env = served
    marker = tmp_path / "started"
    step = client(env, "step", "run", "--name", "long", "--policy", "idempotent", "--", "sh", "-c",
                  f"touch {marker}; exec sleep 60")
    while not marker.exists():  # the command runs: the intent is on the forge
        assert step.poll() is None, step.stderr.read() if step.stderr else ""
    step.send_signal(signal.SIGTERM)
    assert step.wait(timeout=30) == 143
    results = [e for e in entries(forge.path, "alpha") if e["kind"] == "result"]
    assert [(r["step"], r["status"]) for r in results] == [("long", "cancelled")]


def test_stopping_a_desk_cuts_off_a_step_in_flight(served: tuple[StepServer, dict[str, str]], forge: Forge,
                                                   tmp_path: Path) -> None:
    server, env = served
    marker = tmp_path / "started"
    step = client(env, "step", "run", "--name", "deploy", "--", "sh", "-c", f"touch {marker}; exec sleep 60")
    while not marker.exists():
        assert step.poll() is None
    server.stop()  # returns while the command still runs: the desk does not wait on its agent's effects
    assert step.poll() is None
    step.kill()
    step.wait()
    kinds = [e["kind"] for e in entries(forge.path, "alpha")]
    assert kinds == ["intent"]  # unresolved, as if the client had been killed: the next call says outcome unknown


def test_a_waiting_brief_the_forge_refuses_does_not_stop_the_desk(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/t.md": brief("T", ["write t.txt t"], "test -f t.txt"),
                   "briefs/u.md": brief("U", ["write u.txt u"], "test -f u.txt")})
    claims = Claims(ForgeGit(work.url))
    claims.claim("t", "builder")
    assert assay("wait", "t", "--on", "time:2020-01-01T00:00:00Z", "--forge", work.url).code == 0
    (work.path / "refs" / "assay" / "journal" / "t.lock").write_text("")
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert "cannot settle t now" in run.out and "u verified" in run.out
    forced = assay("release", "t", "--force", "--reason", "stuck", "--forge", work.url)
    assert forced.code == 0, forced.err  # a person is not stopped by the lock either
    assert "not journaled" in str(claim_chain(work.path, "t")[-1]["reason"])
    claims.git.close()
