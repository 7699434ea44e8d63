"""Any ACP agent is a desk: the real ACP adapters (`claude-agent-acp` and `codex-acp`, the `claude-acp` and
`codex-acp` presets as `assay init` writes them) against the scripted model servers (Anthropic's, and the Responses
API for Codex). The prompt never mentions `assay step`: the agent uses its own shell tool, and the desk journals
each command it asks to run before it lets the command run (on the forge while the command is held at its gate),
and its result after; a command the adapter runs without asking (Claude's read-only ones, Codex's known-safe
list: `cat`) is journaled once it ends, as observed. Codex's refusal option (`abort`) ends its turn, so a refused
repeat reaches its agent as the next prompt. A desk SIGKILLed inside the deploy leaves no process of the command
alive; its successor's agent is refused the repeat with the refusal's text, inspects, and the effect ran at most
once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels.brain import Action, Conversation, Run
from tests.conftest import audit_failures
from tests.helpers.acpdesks import ACP_PRESETS, DEPLOY_CALL, WRITE, acp_preset, await_start, native, shells
from tests.helpers.clidesks import DEPLOY_BRIEF, desk, desk_env, finish, no_reader, project
from tests.journal_check import claim_chain, entries, invariants

LOOK = "cat greet.txt"  # read-only (Claude), known-safe (Codex): it runs without asking


def looking(conversation: Conversation) -> Action:
    """The native model, which also reads greet.txt back once it wrote it (each conversation, once)."""
    order = [e.command for e in conversation.exchanges]
    if WRITE in order and LOOK not in order:
        return Run(LOOK)
    return native(conversation)


def observed(forge: Path) -> list[dict[str, Any]]:
    return [e["data"]["observed"] for e in entries(forge, "ship")
            if e["kind"] == "note" and isinstance((e.get("data") or {}).get("observed"), dict)]


@pytest.mark.parametrize("preset", ACP_PRESETS)
def test_every_native_shell_command_is_journaled_before_it_runs(preset: str, tmp_path: Path) -> None:
    agent = acp_preset(preset).agent
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with agent.server(looking) as server:
        proc = desk(preset, forge, desk_env(agent, server, tmp_path))
        await_start(started, proc, server)
        held = [e for e in shells(forge) if e["kind"] == "intent"]  # the deploy is running, held at its gate
        assert [(e["data"]["input"]["command"], e["policy"]) for e in held] == \
            [(WRITE, "unsafe"), (DEPLOY_CALL, "unsafe")], held
        with open(gate, "w") as release:
            release.write("go\n")
        out = finish(proc, server)
    detail = f"{out}\n{server.debug()}"
    assert "review ready; waiting for merge" in out, detail
    assert log.read_text() == "deployed\n", detail
    ends = [(e["kind"], e.get("status"), (e.get("data") or {}).get("output", {}).get("exit_code"))
            for e in shells(forge) if e["kind"] != "intent"]
    assert ends == [("result", "completed", 0), ("result", "completed", 0)], detail
    # the command run without asking: observed once, with its command; the asked ones are steps only
    assert [(o["command"], o["exit_code"]) for o in observed(forge)] == [(LOOK, 0)], detail
    assert not any("assay step" in c.prompt for c in server.transcript.conversations), detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


@pytest.mark.parametrize("preset", ACP_PRESETS)
def test_a_desk_killed_inside_a_native_deploy_strands_nothing_and_deploys_once(preset: str, tmp_path: Path) -> None:
    agent = acp_preset(preset).agent
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with agent.server(native) as server:
        env = desk_env(agent, server, tmp_path)
        first = desk(preset, forge, env)
        await_start(started, first, server)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 10
        while not no_reader(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert no_reader(gate), "the deploy's command outlived its desk"
        gate.unlink()
        out = finish(desk(preset, forge, env), server)
    detail = f"{out}\n{server.debug()}"
    assert "took over ship" in out and "review ready; waiting for merge" in out, detail
    assert log.read_text() == "deployed\n", detail  # at most once: the cut-off command never deployed
    told = [t for c in server.transcript.conversations for t in [c.prompt, *c.texts]
            if "The previous `shell` operation was interrupted" in t]
    assert told, detail  # the successor's agent got the refusal's text
    kinds = [e["kind"] for e in shells(forge) if e["kind"] != "intent"]
    assert "outcome_unknown" in kinds and "refused" in kinds, detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}
