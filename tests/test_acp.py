"""Any ACP agent is a desk: the real Claude ACP adapter (`claude-agent-acp`, the `claude-acp` preset as `assay
init` writes it) against the scripted Anthropic server. The prompt never mentions `assay step`: the agent uses its
own shell tool, and the desk journals each command's intent before it lets the command run (on the forge while the
command is held at its gate), and its result after. A desk SIGKILLed inside the deploy leaves no process of the
command alive; its successor's agent is refused the repeat with the refusal's text, inspects, and the effect ran
at most once."""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels import clis
from tests.agentmodels.anthropic import AnthropicServer
from tests.agentmodels.brain import Action, Conversation, Finish, Run
from tests.conftest import audit_failures
from tests.helpers.clidesks import AGENTS, DEPLOY, DEPLOY_BRIEF, INSPECT, desk, desk_env, finish, no_reader, project
from tests.journal_check import claim_chain, entries, invariants

WRITE = "printf 'hello\\n' > greet.txt"
BRIEF = DEPLOY_BRIEF


def adapter() -> str | None:
    found = Path(clis.path_dirs()[0]) / "claude-agent-acp" if clis.path_dirs() else None
    return str(found) if found is not None and found.exists() else None


def native(conversation: Conversation) -> Action:
    """The model, with its own shell only: write greet.txt, deploy. Told the deploy's outcome is unknown, it
    inspects, and deploys again only if the inspection found no deploy."""
    deploy, inspect = f"sh -c {shlex.quote(DEPLOY)}", f"sh -c {shlex.quote(INSPECT)}"
    said = [conversation.prompt, *conversation.texts]
    unknown = any("operation was interrupted" in t for t in said)
    order = [e.command for e in conversation.exchanges]
    if WRITE not in order:
        return Run(WRITE)
    if not unknown:
        return Run(deploy) if deploy not in order else Finish("Deployed.")
    if inspect not in order:
        return Run(inspect)
    looked = len(order) - 1 - order[::-1].index(inspect)
    if not conversation.exchanges[looked].failed:
        return Finish("The greeting is deployed.")
    after = [e for e in conversation.exchanges[looked:] if e.command == deploy]
    if not after:
        return Run(deploy)  # inspected: it did not happen, so it deploys
    refused = after[-1].failed and any("call it again deliberately" in t for t in conversation.texts)
    if refused and len(after) == 1:
        return Run(deploy)  # refused once, as the repeat of a cut-off call is: called again, on purpose
    return Finish("Deployed." if not after[-1].failed else f"The deploy failed: {after[-1].output}")


def await_start(started: Path, proc: Any, server: AnthropicServer) -> None:
    """Until the deploy's command has started (its marker written); the desk's story if it ends or stalls first."""
    deadline = time.monotonic() + 120
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the deploy never started\n{proc.communicate()[0]}\n{server.debug()}")
        time.sleep(0.01)


def shells(forge: Path) -> list[dict[str, Any]]:
    return [e for e in entries(forge, "ship") if e.get("step") == "shell"]


@pytest.fixture
def claude_acp() -> Any:
    if adapter() is None or AGENTS["claude"].installed is None:
        pytest.skip("claude-agent-acp is not installed (sh tests/install-agents.sh)")
    return AGENTS["claude"]


def test_every_native_shell_command_is_journaled_before_it_runs(claude_acp: Any, tmp_path: Path) -> None:
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with AnthropicServer(native) as server:
        proc = desk("claude-acp", forge, desk_env(claude_acp, server, tmp_path))
        await_start(started, proc, server)
        held = [e for e in shells(forge) if e["kind"] == "intent"]  # the deploy is running, held at its gate
        assert [(e["data"]["input"]["command"], e["policy"]) for e in held] == \
            [(WRITE, "unsafe"), (f"sh -c {shlex.quote(DEPLOY)}", "unsafe")], held
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


def test_a_desk_killed_inside_a_native_deploy_strands_nothing_and_deploys_once(claude_acp: Any,
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
