"""The Codex ACP adapter is a desk: the real `codex-acp` (the `codex-acp` preset as `assay init` writes it) against
the scripted Responses server. As with Claude's adapter (test_acp.py), the prompt never mentions `assay step`: every
command Codex asks to run is journaled before it runs (on the forge while the command is held at its gate) and its
result after; a known-safe command, which Codex runs without asking, is journaled once, as observed. Codex's refusal
option (`abort`) ends its turn, so a refused repeat reaches the agent as the next prompt. A desk SIGKILLed inside
the deploy leaves no process of the command alive, its successor's agent is refused the repeat with the refusal's
text, and the effect ran at most once."""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels.brain import Action, Conversation, Run
from tests.agentmodels.responses import ResponsesServer
from tests.conftest import audit_failures
from tests.helpers.acpdesks import WRITE, acp_preset, await_start, native, shells
from tests.helpers.clidesks import DEPLOY, DEPLOY_BRIEF, desk, desk_env, finish, no_reader, project
from tests.journal_check import claim_chain, entries, invariants

LOOK = "cat greet.txt"  # on Codex's known-safe list: it runs without asking
DEPLOYS = f"sh -c {shlex.quote(DEPLOY)}"


def looking(conversation: Conversation) -> Action:
    """The native model, which also reads greet.txt back once it wrote it (each conversation, once)."""
    order = [e.command for e in conversation.exchanges]
    if WRITE in order and LOOK not in order:
        return Run(LOOK)
    return native(conversation)


def observed(forge: Path) -> list[dict[str, Any]]:
    return [e["data"]["observed"] for e in entries(forge, "ship")
            if e["kind"] == "note" and isinstance((e.get("data") or {}).get("observed"), dict)]


@pytest.fixture
def codex_acp() -> Any:
    return acp_preset("codex-acp").agent


def test_every_codex_command_is_journaled_before_it_runs(codex_acp: Any, tmp_path: Path) -> None:
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with ResponsesServer(looking) as server:
        proc = desk("codex-acp", forge, desk_env(codex_acp, server, tmp_path))
        await_start(started, proc, server)
        held = [e for e in shells(forge) if e["kind"] == "intent"]  # the deploy is running, held at its gate
        assert [(e["data"]["input"]["command"], e["policy"]) for e in held] == \
            [(WRITE, "unsafe"), (DEPLOYS, "unsafe")], held
        with open(gate, "w") as release:
            release.write("go\n")
        out = finish(proc, server)
    detail = f"{out}\n{server.debug()}"
    assert "review ready; waiting for merge" in out, detail
    assert log.read_text() == "deployed\n", detail
    ends = [(e["kind"], e.get("status"), (e.get("data") or {}).get("output", {}).get("exit_code"))
            for e in shells(forge) if e["kind"] != "intent"]
    assert ends == [("result", "completed", 0), ("result", "completed", 0)], detail
    # the known-safe command: observed once, with its command; the asked ones are steps only, never observed too
    assert [(o["command"], o["exit_code"]) for o in observed(forge)] == [(LOOK, 0)], detail
    assert not any("assay step" in c.prompt for c in server.transcript.conversations), detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


def test_a_desk_killed_inside_a_codex_deploy_strands_nothing_and_deploys_once(codex_acp: Any,
                                                                              tmp_path: Path) -> None:
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with ResponsesServer(native) as server:
        env = desk_env(codex_acp, server, tmp_path)
        first = desk("codex-acp", forge, env)
        await_start(started, first, server)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 10
        while not no_reader(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert no_reader(gate), "the deploy's command outlived its desk"
        gate.unlink()
        out = finish(desk("codex-acp", forge, env), server)
    detail = f"{out}\n{server.debug()}"
    assert "took over ship" in out and "review ready; waiting for merge" in out, detail
    assert log.read_text() == "deployed\n", detail  # at most once: the cut-off command never deployed
    told = [t for c in server.transcript.conversations for t in [c.prompt, *c.texts]
            if "The previous `shell` operation was interrupted" in t]
    assert told, detail  # the successor's agent got the refusal's text (its turn ended by the refusal: next prompt)
    kinds = [e["kind"] for e in shells(forge) if e["kind"] != "intent"]
    assert "outcome_unknown" in kinds and "refused" in kinds, detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}
