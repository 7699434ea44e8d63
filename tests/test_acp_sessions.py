"""An ACP desk's conversation is checkpointed and loaded by its successor: the real Claude ACP adapter (the
`claude-acp` preset as `assay init` writes it) against the scripted Anthropic server. As the transcript reaches a
turn boundary inside the agent's prompt, the desk journals it; the desk is SIGKILLed; a desk with another HOME and
state directory (another worktree path, so another transcript folder) writes the checkpoint back and loads it
over the protocol (`session/load`). The model's next request holds the first run's tool results, the history the
adapter replays on load is not journaled again, and the brief ends with one deploy."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels.anthropic import AnthropicServer
from tests.agentmodels.brain import Action, Conversation, Finish, Run
from tests.agentmodels.server import ModelServer
from tests.conftest import audit_failures
from tests.helpers.acpdesks import ACP_PRESETS, WRITE, acp_preset
from tests.helpers.acpdesks import DEPLOY_CALL as DEPLOY_CMD
from tests.helpers.clidesks import DEPLOY_BRIEF, TIMEOUT, desk, desk_env, finish, project
from tests.journal_check import checkpoint_text, entries, invariants


class HeldAfterTwoCommands:
    """The model writes greet.txt and deploys with its own shell, then finishes; the first time it is asked for
    its third move (both commands done) it holds the request until `release` is set: the conversation is between
    tool calls, its transcript at a turn boundary."""

    def __init__(self) -> None:
        self.asked, self.release = threading.Event(), threading.Event()
        self.server: ModelServer | None = None

    def __call__(self, conversation: Conversation) -> Action:
        done = [e.command for e in conversation.exchanges]
        if WRITE not in done:
            return Run(WRITE)
        if DEPLOY_CMD not in done:
            return Run(DEPLOY_CMD)
        if not self.asked.is_set():
            self.asked.set()
            assert self.server is not None
            self.server.wait_unlocked(self.release, TIMEOUT)
        return Finish("Deployed.")


def checkpoints(forge: Path) -> list[dict[str, Any]]:
    return [e for e in entries(forge, "ship") if e["kind"] == "checkpoint"]


def installed(preset: str) -> Any:
    """The agent under test (its server and environment) for an ACP preset; skipped if its adapter is not here."""
    return acp_preset(preset).agent


@pytest.fixture
def claude_acp() -> Any:
    return installed("claude-acp")


@pytest.mark.parametrize("preset", ACP_PRESETS)
def test_a_successor_with_another_home_loads_the_acp_conversation(preset: str, tmp_path: Path) -> None:
    agent = installed(preset)
    log = tmp_path / "effects.log"
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=tmp_path / "no-gate"))
    brain = HeldAfterTwoCommands()
    with agent.server(brain) as server:
        brain.server = server
        first = desk(preset, forge, desk_env(agent, server, tmp_path))
        assert brain.asked.wait(TIMEOUT), server.debug()
        deadline = time.monotonic() + 60
        while not [c for c in checkpoints(forge) if "printf" in checkpoint_text(forge, c)
                   and "DEPLOY_LOG" in checkpoint_text(forge, c)]:
            # the transcript reached the boundary after the deploy's result: the desk saves it, inside the prompt
            assert first.poll() is None and time.monotonic() < deadline, server.debug()
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        brain.release.set()
        before = len(server.transcript.conversations)
        env = {**desk_env(agent, server, tmp_path), **agent.env(server, tmp_path / "home-2"),
               "ASSAY_STATE_DIR": str(tmp_path / "state-2")}
        out = finish(desk(preset, forge, env), server)
    detail = f"{out}\n{server.debug()}"
    assert "took over ship" in out and "resumes the agent's conversation" in out and "review ready" in out, detail
    assert "starting the agent afresh" not in out, detail
    resumed = server.transcript.conversations[before]
    assert [e.command for e in resumed.exchanges][:2] == [WRITE, DEPLOY_CMD], detail  # the first run's, loaded
    assert any("## Resumed conversation" in t for t in resumed.texts), detail
    assert log.read_text() == "deployed\n", detail  # one deploy, across both desks
    # the loaded history (which the adapter replays as updates) is not journaled again: two commands, two steps
    shells = [e for e in entries(forge, "ship") if e.get("step") == "shell" and e["kind"] == "intent"]
    assert [e["data"]["input"]["command"] for e in shells] == [WRITE, DEPLOY_CMD], detail
    assert not [e for e in entries(forge, "ship") if e["kind"] == "note" and "observed" in (e.get("data") or {})
                and e["epoch"] == 2], detail
    saved = [c for c in checkpoints(forge) if c["epoch"] == 1][-1]
    # written into the second HOME (Claude Code, under the folder named after the new worktree's path), or the
    # second desk's own CODEX_HOME in its state folder (Codex)
    if preset == "claude-acp":
        restored = list((tmp_path / "home-2").rglob(f"*{saved['data']['session']}.jsonl"))
        assert len(restored) == 1 and re.sub(r"[^A-Za-z0-9]", "-", str(tmp_path / "state-2")) in restored[0].parent.name
    else:
        restored = list((tmp_path / "state-2").rglob(f"rollout-*{saved['data']['session']}.jsonl"))
        assert len(restored) == 1 and "/desks/codex-acp/codex/sessions/" in str(restored[0]), restored
    assert [c for c in checkpoints(forge) if c["epoch"] == 2], detail  # the successor's turns are saved too
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


STEER = "Say hello in greet.txt, and mind the capital H."


def test_steering_is_the_acp_agents_next_prompt_and_its_delivery_is_journaled(claude_acp: Any,
                                                                             tmp_path: Path) -> None:
    """A person steers the brief while the agent's prompt runs (its model held after two commands): when the
    prompt ends, the desk sends the steering as the session's next prompt, in the same adapter and conversation,
    and journals its delivery once that prompt returned."""
    log = tmp_path / "effects.log"
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=tmp_path / "no-gate"))
    brain = HeldAfterTwoCommands()
    with AnthropicServer(brain) as server:
        brain.server = server
        running = desk("claude-acp", forge, desk_env(claude_acp, server, tmp_path))
        try:
            assert brain.asked.wait(TIMEOUT), server.debug()
            steered = subprocess.run([sys.executable, "-m", "assay", "steer", "ship", STEER, "--json", "--forge",
                                      str(forge)], capture_output=True, text=True, timeout=60)
            assert steered.returncode == 0, steered.stderr
        finally:
            brain.release.set()
        out = finish(running, server)
    detail = f"{out}\n{server.debug()}"
    assert out.count("agent attempt") == 1 and "review ready" in out, detail
    heard = [c for c in server.transcript.conversations if any(STEER in t for t in c.texts)]
    assert heard and [e.command for e in heard[0].exchanges] == [WRITE, DEPLOY_CMD], detail  # the same conversation
    seq = json.loads(steered.stdout)["seq"]
    journal = entries(forge, "ship")
    notes = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("steer")]
    assert [n["data"] for n in notes] == [{"steer": "delivered", "of": seq}], detail
    # a checkpoint after each prompt: the last one holds the steering the agent took
    assert STEER in checkpoint_text(forge, checkpoints(forge)[-1]), detail
    assert log.read_text() == "deployed\n", detail
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


def test_a_briefs_tool_rules_come_before_its_desks(claude_acp: Any, tmp_path: Path) -> None:
    """The brief says its `printf` commands are safe (a write of the worktree): journaled so, while the deploy keeps
    the desk's default for a command (unsafe)."""
    log = tmp_path / "effects.log"
    brief = DEPLOY_BRIEF.format(log=log, gate=tmp_path / "no-gate").replace(
        "verify:", 'tools:\n  - {kind: execute, match: "printf *", policy: safe}\nverify:', 1)
    forge = project(tmp_path, brief)
    brain = HeldAfterTwoCommands()
    brain.asked.set()  # never held
    with AnthropicServer(brain) as server:
        out = finish(desk("claude-acp", forge, desk_env(claude_acp, server, tmp_path)), server)
    shells = [e for e in entries(forge, "ship") if e.get("step") == "shell" and e["kind"] == "intent"]
    assert [(e["data"]["input"]["command"], e["policy"]) for e in shells] == \
        [(WRITE, "safe"), (DEPLOY_CMD, "unsafe")], f"{out}\n{server.debug()}"
