"""Desks running the real agent CLIs, with each preset exactly as `assay init` writes it.

Claude Code and Codex run against scripted model servers on 127.0.0.1 (tests/agentmodels/), installed by
tests/install-agents.sh. Their model (a brain deciding from the conversation) writes a file and deploys through
`assay step run`, reached over the desk's socket at the absolute path the prompt names. A second test SIGKILLs
the desk's whole process group inside the deploy, while the agent's tool command lives on in a session of its
own, and restarts the desk at once: the command is stopped with its desk, the model is told the outcome is
unknown, settles it by inspecting, deploys once, and the review is marked ready with nothing left unresolved.
aider edits a file under its preset (it runs no shell command unattended).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels.brain import Action, Brain, Call, Conversation, Edit, Finish, Run
from tests.agentmodels.chat import ChatServer
from tests.agentmodels.server import ModelServer
from tests.conftest import audit_failures, git
from tests.helpers.aider import AIDER, MODEL, model_metadata
from tests.helpers.clidesks import (
    AGENTS,
    DEPLOY,
    DEPLOY_BRIEF,
    INSPECT,
    TIMEOUT,
    desk,
    desk_env,
    finish,
    no_reader,
    project,
)
from tests.journal_check import claim_chain, entries, invariants

ASSAY_AT = re.compile(r"with Assay at `([^`]+)`")
BRIEF = DEPLOY_BRIEF.replace("deploy it.", "deploy it (an unsafe effect: through `assay step run`).")


def ship(conversation: Conversation) -> Action:
    """The model: write greet.txt, deploy; after a crash, inspect and settle the deploy, deploying only if it
    did not happen. Decided from everything the conversation holds: told of the crash in a fresh conversation's
    prompt or in the message that resumes a saved one (whose commands before it are the cut-off run's)."""
    found = ASSAY_AT.search(conversation.prompt)
    if found is None:
        return Finish("The prompt names no Assay to run steps with.")
    assay = found.group(1)
    write = "printf 'hello\\n' > greet.txt"
    deploy = (f"{assay} step run --name deploy --policy unsafe --input '{{\"target\": \"prod\"}}' -- "
              f"sh -c {shlex.quote(DEPLOY)}")
    settle = f"{assay} step settle deploy -- sh -c {shlex.quote(INSPECT)}"
    if conversation.texts and "The worktree is the work branch as last pushed" in conversation.texts[-1]:
        return Run(f"test -f greet.txt || {write}")  # resumed elsewhere: the files may not be what it wrote
    done = list(conversation.exchanges)
    wrote = [e for e in done if e.command == write]
    if not wrote:
        return Run(write)
    if wrote[-1].failed:
        return Finish(f"Stopping: {write!r} failed: {wrote[-1].output}")
    if any("`deploy` (unsafe): OUTCOME UNKNOWN" in text for text in told(conversation)):
        settles = [i for i, e in enumerate(done) if e.command == settle]
        if not settles:
            return Run(settle)
        if "settled as did-not" not in done[settles[0]].output:
            return Finish(f"It had deployed, or the settle failed: {done[settles[0]].output}")
        done = done[settles[0] + 1:]  # the deploy is decided from what came after the settle
    deployed = [e for e in done if e.command == deploy]
    if not deployed:
        return Run(deploy)
    if deployed[-1].failed:
        return Finish(f"Stopping: {deploy!r} failed: {deployed[-1].output}")
    return Finish("Deployed.")


def told(conversation: Conversation) -> tuple[str, ...]:
    return (conversation.prompt, *conversation.texts)


def deploys(forge: Path) -> list[dict[str, Any]]:
    return [e for e in entries(forge, "ship") if e.get("step") == "deploy"]


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_preset_runs_its_real_cli_to_a_ready_review(name: str, tmp_path: Path) -> None:
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    log = tmp_path / "effects.log"
    forge = project(tmp_path, BRIEF.format(log=log, gate=tmp_path / "no-gate"))
    with agent.server(ship) as server:
        started = time.monotonic()
        out = finish(desk(name, forge, desk_env(agent, server, tmp_path)), server)
        took = time.monotonic() - started
    detail = f"{out}\n{server.debug()}"
    assert "review ready; waiting for merge" in out, detail
    assert log.read_text() == "deployed\n", detail  # through `assay step run`, once
    [intent, result] = deploys(forge)
    assert intent["kind"] == "intent" and intent["policy"] == "unsafe"
    assert result["kind"] == "result" and result["status"] == "completed"
    data = intent["data"]
    assert isinstance(data, dict) and data["host"] == os.uname().nodename and data["pid"] > 2  # a real life
    verify = [e["data"] for e in entries(forge, "ship") if e["kind"] == "verify"]
    assert [(v["row"], v["passed"]) for v in verify] == [("greeting", True)]
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}
    final = server.transcript.conversations[-1]
    assert [e.failed for e in final.exchanges] == [False, False], detail
    assert not any("ghp_" in text for c in server.transcript.conversations for text in c.texts), detail
    print(f"{name}: one brief, claim to ready review, in {took:.1f}s")


@dataclass
class KilledInDeploy:
    """A desk SIGKILLed while its agent's deploy command was held at its gate, then run again to the end."""

    forge: Path
    log: Path  # what deployed ("deployed" once per deploy that ran through)
    started: Path  # "started" once per deploy command that began
    gate: Path
    out: str  # the second desk's output
    server: ModelServer


def killed_in_the_deploy(name: str, tmp_path: Path, brain: Brain) -> KilledInDeploy:
    """Preset NAME with the model `brain`: the first desk is killed (its whole group: the desk and its agent CLI;
    the deploy's command has a session of its own) once the deploy's command runs, held at a FIFO gate with its
    intent on the forge; the gate is removed and a second desk runs at once, to the end."""
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, BRIEF.format(log=log, gate=gate))
    started = Path(f"{log}.started")
    with agent.server(brain) as server:
        env = desk_env(agent, server, tmp_path)
        first = desk(name, forge, env)
        while not started.exists():
            assert first.poll() is None, f"{first.communicate()[0]}\n{server.debug()}"
            time.sleep(0.01)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        gate.unlink()  # the next deploy, if any, runs straight through
        out = finish(desk(name, forge, env), server)
    return KilledInDeploy(forge, log, started, gate, out, server)


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_desk_killed_inside_the_deploy_strands_nothing(name: str, tmp_path: Path) -> None:
    killed = killed_in_the_deploy(name, tmp_path, ship)
    forge, log, started, gate, out, server = (killed.forge, killed.log, killed.started, killed.gate, killed.out,
                                              killed.server)
    detail = f"{out}\n{server.debug()}"
    assert "took over ship" in out and "review ready; waiting for merge" in out, detail
    assert no_reader(Path(f"{gate}")) or not gate.exists()
    assert log.read_text() == "deployed\n", detail  # at most once: the cut-off command never deployed
    assert started.read_text() == "started\nstarted\n", detail
    # the model was told the truth: in a fresh conversation's prompt, or in the message resuming a saved one
    recovery = [c for c in server.transcript.conversations if any("OUTCOME UNKNOWN" in t for t in told(c))]
    assert recovery, detail
    assert any("The previous `deploy` operation was interrupted" in t for t in told(recovery[-1])), detail
    settled = [e for e in recovery[-1].exchanges if "step settle deploy" in e.command]
    assert settled and "settled as did-not" in settled[0].output, detail
    ends = [(e["kind"], (e.get("data") or {}).get("settled")) for e in deploys(forge) if e["kind"] != "intent"]
    assert ends == [("outcome_unknown", None), ("result", "did-not"), ("result", None)], detail
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


AIDER_BRIEF = """---
title: Greet
labels: [code]
verify:
  - id: greeting
    run: "grep -q hello greet.txt"
---
Create greet.txt saying hello.
"""


def greet(conversation: Conversation) -> Action:
    if any(text.startswith("I updated the files.") for text in conversation.texts):
        return Finish("greet.txt says hello.")
    return Edit("greet.txt", "hello\n")


@pytest.mark.skipif(AIDER is None, reason="aider is not installed (sh tests/install-agents.sh)")
def test_the_aider_preset_edits_to_a_ready_review(tmp_path: Path) -> None:
    assert AIDER is not None
    forge = project(tmp_path, AIDER_BRIEF)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aider").symlink_to(AIDER)  # aider on PATH, as installed; its venv's python3 not
    with ChatServer(greet) as server:
        env = {**os.environ, "HOME": str(tmp_path / "home"), "ASSAY_STATE_DIR": str(tmp_path / "state"),
               "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]), "AIDER_MODEL": MODEL,
               "OPENAI_API_BASE": server.url, "OPENAI_API_KEY": "sk-scripted-test-key",
               "AIDER_MODEL_METADATA_FILE": str(model_metadata(tmp_path / "model-metadata.json")),
               "AIDER_EDIT_FORMAT": "whole"}
        started = time.monotonic()
        out = finish(desk("aider", forge, env), server)
        took = time.monotonic() - started
    detail = f"{out}\n{server.debug()}"
    assert "review ready; waiting for merge" in out, detail
    files = git("--git-dir", str(forge), "ls-tree", "--name-only", "refs/heads/assay/ship").split()
    assert "greet.txt" in files and not [f for f in files if f.startswith(".aider")], detail
    assert git("--git-dir", str(forge), "show", "refs/heads/assay/ship:greet.txt") == "hello\n"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}
    print(f"aider: one brief, claim to ready review, in {took:.1f}s")


class HeldAfterTwoTurns:
    """`ship`, but the first time the model is asked for its third turn (write and deploy done) it holds the
    request until `release` is set: the agent is between turns, its conversation two turns long."""

    def __init__(self) -> None:
        self.asked, self.release = threading.Event(), threading.Event()
        self.server: ModelServer | None = None  # set once the server is up: other requests are served meanwhile

    def __call__(self, conversation: Conversation) -> Action:
        if len(conversation.exchanges) == 2 and not self.asked.is_set():
            self.asked.set()
            assert self.server is not None
            self.server.wait_unlocked(self.release, TIMEOUT)
        return ship(conversation)


def beating_project(name: str, tmp_path: Path, log: Path) -> Path:
    """`project` with the ship brief and preset NAME beating every 2 s (its checkpoints and steering come soon)."""
    forge = project(tmp_path, BRIEF.format(log=log, gate=tmp_path / "no-gate"))
    work = tmp_path / "project"
    preset = (work / "desks" / f"{name}.yaml").read_text()
    (work / "desks" / f"{name}.yaml").write_text(preset.replace("heartbeat_s: 300", "heartbeat_s: 2"))
    git("commit", "-qam", "beat every 2 s", cwd=work)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)
    return forge


def checkpoints(forge: Path) -> list[dict[str, Any]]:
    return [e for e in entries(forge, "ship") if e["kind"] == "checkpoint"]


def holds_the_deploy(forge: Path, checkpoint: dict[str, Any]) -> bool:
    """Whether a checkpoint's transcript holds the deploy's call: the CLI writes its transcript on its own time, so
    a checkpoint journaled after the deploy's result may still end at the turn before."""
    path = checkpoint["data"]["checkpoint_blob"]
    for sha in git("--git-dir", str(forge), "rev-list", "refs/assay/journal/ship").split():
        found = subprocess.run(["git", "--git-dir", str(forge), "cat-file", "-p", f"{sha}:{path}"],
                               capture_output=True, text=True)
        if found.returncode == 0:
            return "step run --name deploy" in found.stdout
    return False


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_successor_with_another_home_resumes_the_agents_conversation(name: str, tmp_path: Path) -> None:
    """Each preset as shipped (a heartbeat every 300 s: none passes here): as the agent's second turn ends, its
    conversation is checkpointed in the journal (the CLI's turn event: a hook, or its transcript); the desk is
    SIGKILLed; a desk with another HOME and state directory (so another worktree path, and so another transcript
    folder) takes over, restores the checkpoint and resumes it. The model's next request holds the first run's tool
    results and, as its newest message, the journal's summary; the brief is finished with one deploy."""
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    log = tmp_path / "effects.log"
    forge = project(tmp_path, BRIEF.format(log=log, gate=tmp_path / "no-gate"))
    brain = HeldAfterTwoTurns()
    with agent.server(brain) as server:
        brain.server = server
        first = desk(name, forge, desk_env(agent, server, tmp_path))
        assert brain.asked.wait(TIMEOUT), server.debug()
        deadline = time.monotonic() + 60
        deployed = max(e["seq"] for e in deploys(forge) if e["kind"] == "result")
        while not [c for c in checkpoints(forge) if c["seq"] > deployed and holds_the_deploy(forge, c)]:
            # the turn's end saves both turns, once the CLI has written the second to its transcript
            assert first.poll() is None and time.monotonic() < deadline, server.debug()
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        brain.release.set()
        before, asked_before = len(server.transcript.conversations), len(server.requests)
        env = {**desk_env(agent, server, tmp_path), **agent.env(server, tmp_path / "home-2"),
               "ASSAY_STATE_DIR": str(tmp_path / "state-2")}
        out = finish(desk(name, forge, env), server)
    detail = f"{out}\n{server.debug()}"
    saved = [c for c in checkpoints(forge) if c["epoch"] == 1][-1]  # the newest of the first desk: resumed
    assert saved["epoch"] == 1 and saved["data"]["name"] == "agent-session", detail
    assert "took over ship" in out and "resumes the agent's conversation" in out and "review ready" in out, detail
    resumed = server.transcript.conversations[before]
    assert [e.command.split(" ")[0] for e in resumed.exchanges][:1] == ["printf"], detail
    assert len(resumed.exchanges) == 2 and "step run --name deploy" in resumed.exchanges[1].command, detail
    assert "## What the journal shows" in resumed.texts[-1] and "`deploy` (unsafe): completed" in resumed.texts[-1]
    assert log.read_text() == "deployed\n", detail  # one deploy, across both desks
    session = saved["data"]["session"]
    # written into the second HOME (Claude Code), or the second desk's own CODEX_HOME in its state folder (Codex)
    restored = [p for p in (tmp_path / ("home-2" if name == "claude" else "state-2")).rglob(f"*{session}.jsonl")]
    assert len(restored) == 1, detail
    if name == "claude":  # under the folder named after the new worktree's path
        assert re.sub(r"[^A-Za-z0-9]", "-", str(tmp_path / "state-2")) in restored[0].parent.name
    else:  # each desk files its sessions in a CODEX_HOME of its own, never the user's
        assert restored[0].is_relative_to(next((tmp_path / "state-2").glob("*/desks/codex/codex")))
        assert not list((tmp_path / "home").rglob("rollout-*.jsonl")), detail
    # the successor's model is never pointed at the dead desk's worktree or HOME (Claude Code 2.1.332 keeps both in
    # its transcript: its working directory, and its memory folder in the system prompt)
    [old_worktree] = (tmp_path / "state").glob(f"*/worktrees/{name}/ship")
    dead = [str(old_worktree), str(tmp_path / "home")] if name == "claude" else [str(old_worktree)]
    named = re.compile("|".join(re.escape(d) for d in dead) + r"(?![A-Za-z0-9_.-])")
    asked = b"".join(r.body for r in server.requests[asked_before:]).decode("utf-8", "replace")
    where = [asked[max(0, m.start() - 200):m.end() + 100] for m in named.finditer(asked)]
    assert not where, f"{where}\n{detail}"
    assert str(tmp_path / "state-2") in asked, detail
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


STEER = "Say hello in greet.txt, and mind the capital H."


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_steering_reaches_the_running_agent_inside_its_run(name: str, tmp_path: Path) -> None:
    """While the agent waits on its model after two turns, a person steers the brief. At its next heartbeat the
    desk stops the CLI (between turns), checkpoints the conversation and resumes it with the steering as the
    next message: the model reads it in the same agent run, and the journal says it was delivered."""
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    log = tmp_path / "effects.log"
    forge = beating_project(name, tmp_path, log)
    brain = HeldAfterTwoTurns()
    with agent.server(brain) as server:
        brain.server = server
        running = desk(name, forge, desk_env(agent, server, tmp_path))
        try:
            assert brain.asked.wait(TIMEOUT), server.debug()
            steered = subprocess.run([sys.executable, "-m", "assay", "steer", "ship", STEER, "--json", "--forge",
                                      str(forge)], capture_output=True, text=True, timeout=60)
            assert steered.returncode == 0, steered.stderr
            deadline = time.monotonic() + 90
            while not any(STEER in text for c in server.transcript.conversations for text in c.texts):
                if running.poll() is not None or time.monotonic() > deadline:
                    os.killpg(running.pid, signal.SIGKILL)
                    raise AssertionError(f"the steering never reached the model\n{running.communicate()[0]}\n"
                                         f"{server.debug()}")
                time.sleep(0.1)
        finally:
            brain.release.set()
        out = finish(running, server)
    detail = f"{out}\n{server.debug()}"
    assert out.count("agent attempt") == 1 and "passing on steering" in out and "review ready" in out, detail
    heard = next(c for c in server.transcript.conversations if any(STEER in t for t in c.texts))
    assert len(heard.exchanges) == 2 and STEER in heard.texts[-1], detail  # the conversation went on, steered
    seq = json.loads(steered.stdout)["seq"]
    notes = [e for e in entries(forge, "ship") if e["kind"] == "note" and (e.get("data") or {}).get("steer")]
    assert [n["data"] for n in notes] == [{"steer": "delivered", "of": seq}], detail
    assert log.read_text() == "deployed\n", detail
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


STEP_RUN, SETTLE = "mcp__assay__step_run", "mcp__assay__settle"
DEPLOY_CALL = {"name": "deploy", "policy": "unsafe", "input": '{"target": "prod"}', "command": DEPLOY}
# Claude Code reads exit 1 of `test` or `grep` as "no match", not as a failure: the inspection says it in words
LOOK = f'if {INSPECT}; then echo DEPLOYED; else echo NOT-DEPLOYED; fi'


def ship_with_tools(conversation: Conversation) -> Action:
    """The model reaches Assay through its MCP tools only: write greet.txt (Bash), deploy (`step_run`); told the
    deploy was interrupted, it inspects, settles (`settle`) and deploys again only if it did not happen."""
    if STEP_RUN not in conversation.tools:
        return Finish(f"No {STEP_RUN} tool is offered.")
    write = "printf 'hello\\n' > greet.txt"
    done = list(conversation.exchanges)
    if not any(e.command == write for e in done):
        return Run(write)
    deploys = [i for i, e in enumerate(done) if e.command.startswith(f"{STEP_RUN} ")]
    if not deploys:
        return Call(STEP_RUN, DEPLOY_CALL)
    last = done[deploys[-1]]
    if not last.failed:
        return Finish("Deployed.")
    if "was interrupted" not in last.output:
        return Finish(f"Stopping: the deploy failed: {last.output}")
    after = done[deploys[-1] + 1:]
    inspected = [e for e in after if e.command == LOOK]
    if not inspected:
        return Run(LOOK)
    settled = [e for e in after if e.command.startswith(f"{SETTLE} ")]
    if not settled:
        verdict = "did-not" if "NOT-DEPLOYED" in inspected[0].output else "happened"
        return Call(SETTLE, {"name": "deploy", "verdict": verdict, "input": DEPLOY_CALL["input"],
                             "evidence": f"inspection: {inspected[0].output.strip()[-200:]}"})
    if re.search(r'settled as did-not|"verdict": ?"did-not"', settled[0].output):
        return Call(STEP_RUN, DEPLOY_CALL)  # the deliberate call: it runs
    return Finish(f"It had deployed ({settled[0].output}).")


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_the_agent_reaches_assay_through_its_mcp_tools_and_a_crash_inside_the_call_strands_nothing(
        name: str, tmp_path: Path) -> None:
    """The preset as shipped registers `assay mcp`; the scripted model deploys with `mcp__assay__step_run`. A
    SIGKILL of the desk's group inside that call, then a restart: the model's repeated call gets the
    outcome-unknown text as the tool's result, it settles, and the deploy ran once."""
    killed = killed_in_the_deploy(name, tmp_path, ship_with_tools)
    forge, log, out, server = killed.forge, killed.log, killed.out, killed.server
    detail = f"{out}\n{server.debug()}\n" + "\n".join(f"{e.command[:80]} -> {e.failed} {e.output[:300]!r}"
                                                  for c in server.transcript.conversations[-1:] for e in c.exchanges)
    assert "review ready; waiting for merge" in out, detail
    assert log.exists() and log.read_text() == "deployed\n", detail  # once: the cut-off call never deployed
    calls = [e for c in server.transcript.conversations for e in c.exchanges if e.command.startswith(STEP_RUN)]
    told = [e for e in calls if e.failed and "The previous `deploy` operation was interrupted" in e.output]
    assert told and "Operation will NOT be replayed automatically" in told[-1].output, detail
    ends = [(e["kind"], (e.get("data") or {}).get("settled")) for e in deploys(forge) if e["kind"] != "intent"]
    # cut off, refused once (the model's repeat), settled by the model, then the deliberate deploy
    assert ends == [("outcome_unknown", None), ("refused", None), ("result", "did-not"), ("result", None)], \
        f"{ends}\n{detail}"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}
