"""Any ACP agent is a desk: the real Claude ACP adapter (`claude-agent-acp`, the `claude-acp` preset as `assay
init` writes it) against the scripted Anthropic server. The prompt never mentions `assay step`: the agent uses its
own shell tool, and the desk journals each command's intent before it lets the command run (on the forge while the
command is held at its gate), and its result after. A desk SIGKILLed inside the deploy leaves no process of the
command alive; its successor's agent is refused the repeat with the refusal's text, inspects, and the effect ran
at most once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.agentmodels.anthropic import AnthropicServer
from tests.conftest import audit_failures
from tests.helpers.acpdesks import DEPLOY_CALL, WRITE, acp_preset, await_start, native, shells
from tests.helpers.clidesks import DEPLOY_BRIEF, Agent, desk, desk_env, finish, no_reader, project
from tests.journal_check import claim_chain, invariants

BRIEF = DEPLOY_BRIEF


@pytest.fixture
def claude_acp() -> Agent:
    return acp_preset("claude-acp").agent


def test_every_native_shell_command_is_journaled_before_it_runs(claude_acp: Agent, tmp_path: Path) -> None:
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with AnthropicServer(native) as server:
        proc = desk("claude-acp", forge, desk_env(claude_acp, server, tmp_path))
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
    assert not any("assay step" in c.prompt for c in server.transcript.conversations), detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


def test_a_desk_killed_inside_a_native_deploy_strands_nothing_and_deploys_once(claude_acp: Agent,
                                                                               tmp_path: Path) -> None:
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with AnthropicServer(native) as server:
        env = desk_env(claude_acp, server, tmp_path)
        first = desk("claude-acp", forge, env)
        await_start(started, first, server)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 10
        while not no_reader(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert no_reader(gate), "the deploy's command outlived its desk"
        gate.unlink()
        out = finish(desk("claude-acp", forge, env), server)
    detail = f"{out}\n{server.debug()}"
    assert "took over ship" in out and "review ready; waiting for merge" in out, detail
    assert log.read_text() == "deployed\n", detail  # at most once: the cut-off command never deployed
    told = [t for c in server.transcript.conversations for t in [c.prompt, *c.texts]
            if "The previous `shell` operation was interrupted" in t]
    assert told, detail  # the successor's agent got the refusal's text
    kinds = [e["kind"] for e in shells(forge) if e["kind"] != "intent"]
    assert "outcome_unknown" in kinds and "refused" in kinds, detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == []
