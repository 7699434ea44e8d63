"""The adversarial suite for ACP desks: real adapters (`ACP_PRESETS`) against their scripted model servers, real desk
processes (`assay desk run PRESET --once`), and the deploy of tests/helpers/clidesks.py held at its FIFO gate.

- Crash points of the desk pass, armed a desk each (`ASSAY_CRASH_SCOPE=group`: the desk, its adapter and all die),
  then a desk run to the end: the review is ready, the deploy's command began and deployed exactly once, nothing
  holds its gate, and the forge passes the invariants and the audit. A pass with an ACP agent goes through the
  claim's push, the tool call's step (`journal.*-push:shell`, `journal.after-intent:shell`, `step.before-execute`,
  `step.after-execute`, `step.after-result`), `push.after-commit` and the claim parking on its review (`wait.*`);
  not through `review.*` (on a plain forge the review rides the journal's pushes), `release.*` (the pass ends
  waiting) or `renew.*` (no heartbeat falls in a pass).
- A cancel mid-deploy (a person takes the claim away; the desk gets SIGTERM) and a time limit mid-deploy: the
  adapter's namespace is ended with the command in it, the journal never says the deploy completed, and the agent
  that comes next is refused the repeat once, inspects, and deploys once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agentmodels.server import ModelServer
from tests.conftest import audit_failures
from tests.helpers.acpdesks import (
    ACP_PRESETS,
    DEPLOY_CALL,
    START_S,
    acp_preset,
    await_no_reader,
    await_start,
    deploy_first,
    desk_copy,
    open_gate,
    running_in,
)
from tests.helpers.clidesks import DEPLOY_BRIEF, desk, desk_env, finish, no_reader, project
from tests.journal_check import claim_chain, entries, invariants

INTERRUPTED = "The previous `shell` operation was interrupted"
REFUSAL = "Operation will NOT be replayed automatically"  # the refusal's hint: a repeat of the cut-off call
REPLAYED = "already ran in an earlier run of this brief"


@dataclass(frozen=True)
class Crash:
    """Crash points of a desk pass with an ACP agent, armed one after another (a desk process each) before a desk
    runs to the end, and what the first leaves for the desks after it."""

    points: tuple[str, ...]
    ran: bool  # the deploy had run through when the first desk died (its point is after the effect)
    ends: tuple[str, ...]  # how the deploy's intents end in the journal, in order (`deploy_ends`)
    told: str = ""  # what a later desk's agent is told of the first deploy ("" when nothing)


# The deploy is the run's first `shell` step (the model deploys first), so `:shell` names it. The desk's own points
# after the agent's run (the commit, the claim parking on its ready review) follow the agent's points in the desk
# that takes over from them: one test covers both, and a pass that first recovers goes through them too.
CRASHES = [
    Crash(("claim.after-push", "push.after-commit"), False, ("completed",)),
    Crash(("journal.after-push:shell", "wait.before-push"), False, ("outcome_unknown+refused", "completed"), REFUSAL),
    Crash(("journal.after-intent:shell", "wait.after-push"), False, ("outcome_unknown+refused", "completed"), REFUSAL),
    Crash(("step.before-execute:shell",), False, ("outcome_unknown+refused", "completed"), REFUSAL),
    Crash(("step.after-execute:shell",), True, ("outcome_unknown+happened",), INTERRUPTED),
    Crash(("step.after-result:shell",), True, ("completed",), REPLAYED),
]


@dataclass
class Deploy:
    """The ship brief of a project whose deploy is held at a FIFO gate."""

    forge: Path
    log: Path  # "deployed", once per deploy that ran through
    started: Path  # "started", once per deploy command that began
    gate: Path


def deploy_project(tmp_path: Path, brief: str = DEPLOY_BRIEF, **paths: Path) -> Deploy:
    """`project` with `brief` (its {log} and {gate}, and `paths`, filled in), the deploy's gate a FIFO."""
    log, gate = tmp_path / "effects.log", tmp_path / "gate"
    os.mkfifo(gate)
    forge = project(tmp_path, brief.format(log=log, gate=gate, **paths))
    return Deploy(forge, log, Path(f"{log}.started"), gate)


def deploy_ends(forge: Path) -> list[str]:
    """How each of the deploy's intents ended, in order: its result's status, `outcome_unknown`, a repeat `refused`
    and a settle's verdict, joined by "+"."""
    es = entries(forge, "ship")
    intents = [e["seq"] for e in es if e["kind"] == "intent" and e.get("step") == "shell"
               and (e.get("data") or {}).get("input", {}).get("command") == DEPLOY_CALL]
    ends: dict[int, list[str]] = {i: [] for i in intents}
    for e in es:
        if e["kind"] in ("result", "outcome_unknown", "refused") and e.get("intent") in ends:
            data = e.get("data") or {}
            ends[e["intent"]].append(data["settled"] if "settled" in data else e.get("status") or e["kind"])
    return ["+".join(ends[i]) or "open" for i in intents]


def told(server: ModelServer) -> list[str]:
    return [t for c in server.transcript.conversations for t in (c.prompt, *c.texts)]


def until_dead(proc: subprocess.Popen[str], deploy: Deploy, server: ModelServer) -> str:
    """Wait for a desk armed with a crash point to die at it; the deploy's command, once started, is let through
    its gate (so that points after the effect are reached)."""
    deadline = time.monotonic() + START_S
    while proc.poll() is None:
        if deploy.started.exists():
            open_gate(deploy.gate)
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the desk never reached its crash point\n{proc.communicate()[0]}\n{server.debug()}")
        time.sleep(0.02)
    return proc.communicate()[0]


@pytest.mark.parametrize("crash", CRASHES, ids=lambda crash: "+".join(crash.points))
@pytest.mark.parametrize("name", ACP_PRESETS)
def test_a_desk_killed_at_crash_points_of_its_pass_deploys_once(name: str, crash: Crash, tmp_path: Path) -> None:
    """Each desk dies at its point, its whole group SIGKILLed (the adapter's namespace with it); the desk after the
    last runs to the end. Nothing holds the deploy's gate after the first, and its command began and deployed
    exactly once across them all."""
    preset = acp_preset(name)
    deploy = deploy_project(tmp_path)
    said, asked = [], 0
    with preset.agent.server(deploy_first) as server:
        env = desk_env(preset.agent, server, tmp_path)
        for point in crash.points:
            armed = desk(preset.name, deploy.forge, {**env, "ASSAY_CRASH_AT": point, "ASSAY_CRASH_SCOPE": "group"})
            said.append(until_dead(armed, deploy, server))
            assert armed.returncode == -signal.SIGKILL, f"{point} was not reached: exit {armed.returncode}\n{said}"
            if point == crash.points[0]:
                assert await_no_reader(deploy.gate), f"{point}: the deploy's command outlived its desk"
                assert deploy.log.exists() == crash.ran, f"{point}: deployed: {deploy.log.exists()}\n{said}"
                deploy.gate.unlink()  # the next deploy, if any, runs straight through (no later one is held)
                asked = len(server.transcript.conversations)
        out = finish(desk(preset.name, deploy.forge, env), server)
    detail = "\n---\n".join([*crash.points, *said, out, server.debug()])
    assert deploy.log.read_text() == "deployed\n", detail  # exactly once, across all the desks
    assert deploy.started.read_text() == "started\n", detail  # and its command began once
    assert tuple(deploy_ends(deploy.forge)) == crash.ends, f"{deploy_ends(deploy.forge)}\n{detail}"
    later = [t for c in server.transcript.conversations[asked:] for t in (c.prompt, *c.texts)]
    assert not crash.told or any(crash.told in t for t in later), detail
    assert crash.told == REFUSAL or not any(REFUSAL in t for t in later), detail  # refused only a real repeat
    ready = [e for e in entries(deploy.forge, "ship") if e.get("step") == "ready" and e["kind"] == "result"]
    assert ready and ready[-1]["status"] == "completed", detail  # the review was marked ready
    assert claim_chain(deploy.forge, "ship")[-1]["state"] == "waiting", detail  # and the claim waits on it
    assert invariants(deploy.forge, "ship") == [], detail
    assert audit_failures(str(deploy.forge), "ship") == {}, detail


def until_ended(proc: subprocess.Popen[str], server: ModelServer, within_s: float = 60) -> str:
    try:
        return proc.communicate(timeout=within_s)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"the desk did not end\n{proc.communicate()[0]}\n{server.debug()}") from None


# how the desk is stopped mid-deploy: what its journal then says of the deploy, and what the desk says
CANCELS = {
    # the desk sees the claim gone at its next heartbeat, ends the adapter, and can write nothing more: the intent
    # stays open, for the next holder to record as outcome_unknown
    "force-release": ("open", "stopping the agent on ship: fenced"),
    # the desk ends the adapter, journals the deploy's end as unknown itself, and hands the brief back
    "sigterm": ("outcome_unknown", "was stopped by SIGTERM); the next desk resumes it"),
}


@pytest.mark.parametrize("how", list(CANCELS))
@pytest.mark.parametrize("name", ACP_PRESETS)
def test_a_cancel_mid_deploy_ends_the_command_and_the_journal_says_unknown(name: str, how: str,
                                                                          tmp_path: Path) -> None:
    """A person takes the claim away while the deploy is held at its gate (`assay release --force`; the desk beats
    every second here), or the desk gets SIGTERM: the adapter's namespace is ended with the command in it, the
    deploy is never journaled as completed, and the desk that takes the brief next is refused the repeat once,
    inspects, and deploys once."""
    preset, (cut_as, says) = acp_preset(name), CANCELS[how]
    deploy = deploy_project(tmp_path)
    held = desk_copy(tmp_path, deploy.forge, preset, "beating", {"heartbeat_s: 300": "heartbeat_s: 1"})
    with preset.agent.server(deploy_first) as server:
        env = desk_env(preset.agent, server, tmp_path)
        first = desk(held, deploy.forge, env)
        await_start(deploy.started, first, server)
        if how == "sigterm":
            os.kill(first.pid, signal.SIGTERM)
        else:
            taken = subprocess.run([sys.executable, "-m", "assay", "release", "ship", "--force", "--reason",
                                    "a person stops the deploy", "--forge", str(deploy.forge)],
                                   capture_output=True, text=True, timeout=60)
            assert taken.returncode == 0, taken.stderr
        said = until_ended(first, server)
        assert says in said, said
        assert await_no_reader(deploy.gate), f"the deploy's command outlived its cancel\n{said}"
        assert not deploy.log.exists() and deploy_ends(deploy.forge) == [cut_as], f"{deploy_ends(deploy.forge)}\n{said}"
        deploy.gate.unlink()
        out = finish(desk(held, deploy.forge, env), server)
    detail = f"{how}\n{said}\n---\n{out}\n{server.debug()}"
    assert "review ready; waiting for merge" in out, detail
    assert deploy.log.read_text() == "deployed\n", detail
    assert deploy.started.read_text() == "started\nstarted\n", detail  # the cut-off command, and the deploy
    assert deploy_ends(deploy.forge) == ["outcome_unknown+refused", "completed"], detail
    assert any(REFUSAL in t for t in told(server)), detail
    assert claim_chain(deploy.forge, "ship")[-1]["state"] == "waiting", detail
    assert invariants(deploy.forge, "ship") == [], detail
    assert audit_failures(str(deploy.forge), "ship") == {}, detail


# the verify row waits at a gate of its own (held open read-write, as the deploy's is): the desk is then past its
# agent's run, and still running
HELD_VERIFY = DEPLOY_BRIEF.replace('run: "grep -q hello greet.txt"',
                                   'run: "exec 3<> {verifying}; read x <&3; grep -q hello greet.txt"')


@pytest.mark.parametrize("name", ACP_PRESETS)
def test_a_time_limit_mid_deploy_ends_the_adapter_and_the_command(name: str, tmp_path: Path) -> None:
    """The deploy is held at its gate past the agent's time limit, and past its idle limit (a tool call running is
    the agent at work): the desk ends the adapter with the command, journals the deploy's outcome as unknown and
    judges the attempt as timed out. Seen while the desk verifies that attempt: nothing of the agent is left. The
    next attempt's agent (its calls are another agent step's) is refused the repeat once, inspects, deploys once."""
    preset = acp_preset(name)
    verifying = tmp_path / "verifying"
    os.mkfifo(verifying)
    deploy = deploy_project(tmp_path, HELD_VERIFY, verifying=verifying)
    timed = desk_copy(tmp_path, deploy.forge, preset, "timed", {"timeout_s: 3600": "timeout_s: 12",
                                                                "idle_s: 600": "idle_s: 5"})
    with preset.agent.server(deploy_first) as server:
        proc = desk(timed, deploy.forge, desk_env(preset.agent, server, tmp_path))
        await_start(deploy.started, proc, server)
        running = [running_in(tmp_path / "state", word) for word in (preset.adapter, "DEPLOY_GATE")]
        deadline = time.monotonic() + START_S
        while no_reader(verifying):  # until the desk verifies the attempt
            if proc.poll() is not None or time.monotonic() > deadline:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                raise AssertionError(f"the desk never verified\n{proc.communicate()[0]}\n{server.debug()}")
            time.sleep(0.05)
        left = running_in(tmp_path / "state", preset.adapter) + running_in(tmp_path / "state", "DEPLOY_GATE")
        held, cut = not no_reader(deploy.gate), deploy_ends(deploy.forge)
        deploy.gate.unlink()  # the next attempt's deploy runs straight through
        open_gate(verifying)
        verifying.unlink()  # and its verify row does not wait (`<>` opens an empty file)
        out = finish(proc, server)
    detail = f"{out}\n{server.debug()}"
    assert all(running), f"the adapter and the deploy were not seen running: {running}\n{detail}"
    assert left == [] and not held, f"left alive: {left}, the gate held: {held}\n{detail}"
    assert cut == ["outcome_unknown"], f"{cut}\n{detail}"
    assert "agent stopped at its time limit (12s)" in out, detail
    assert "attempt 1 failed: the agent was stopped at its time limit (12s)" in out, detail
    agent = [e for e in entries(deploy.forge, "ship") if e["kind"] == "result" and e.get("step") == "agent"]
    assert agent[0]["data"]["output"]["timed_out"] is True, detail  # the first attempt's run
    assert "review ready; waiting for merge" in out, detail
    assert deploy.log.read_text() == "deployed\n", detail
    assert deploy.started.read_text() == "started\nstarted\n", detail
    assert deploy_ends(deploy.forge) == ["outcome_unknown+refused", "completed"], detail
    assert any(REFUSAL in t for t in told(server)), detail
    assert claim_chain(deploy.forge, "ship")[-1]["state"] == "waiting", detail
    assert invariants(deploy.forge, "ship") == [], detail
    assert audit_failures(str(deploy.forge), "ship") == {}, detail
