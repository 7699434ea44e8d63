"""`assay mcp` driven by the `mcp` SDK's own stdio client, as an agent under a real desk: every tool; an
unsafe `step_run` cut off by a SIGKILL of the desk is refused once after the restart and runs on the
deliberate repeat; a recorded `value` comes back equal after the crash; steering is told once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from assay.core.git import ForgeGit
from assay.core.journal import read_log
from tests.conftest import REPO, Forge, assay, git
from tests.helpers.desks import publish

DESK = f"""name: mcp
takes:
  labels: [work]
agent:
  command: [{sys.executable}, -m, tests.helpers.mcpagent]
lease_s: 120
heartbeat_s: 5
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG, PYTHONPATH]
"""


def brief(calls: list[dict[str, Any]]) -> str:
    return ("---\ntitle: Ship through tools\nlabels: [work]\nverify:\n  - id: check\n    run: test -f mcp-agent.txt\n"
            "---\nShip it, through Assay's tools.\n\n```mcp-calls\n" + json.dumps(calls) + "\n```\n")


def results(effects: Path) -> list[dict[str, Any]]:
    path = Path(str(effects) + ".mcp")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def await_file(path: Path, proc: subprocess.Popen[str], deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def crash_then_restart(forge: Forge, tmp_path: Path, calls: list[dict[str, Any]], steer: bool = False,
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Run the desk until the deploy is running inside its tool call, SIGKILL its whole group, run it again
    once: each run's tool results, and the second run's outcome. With `steer`, a person steers the brief
    while the first run waits for it (the calls `await` the file `steered`)."""
    effects, marker, steered = tmp_path / "effects.log", tmp_path / "deploying", tmp_path / "steered"
    publish(forge, {"desks/mcp.yaml": DESK, "briefs/ship.md": brief(calls)})
    env = {"ASSAY_FORGE": forge.url, "ASSAY_EFFECTS_LOG": str(effects), "ASSAY_STATE_DIR": str(tmp_path / "state"),
           "PYTHONPATH": str(REPO)}
    first = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "mcp", "--once"],
                             env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        if steer:
            deadline = time.monotonic() + 120
            while not [r for r in results(effects) if r["tool"] == "progress"]:
                assert first.poll() is None and time.monotonic() < deadline, first.communicate()
                time.sleep(0.02)
            said = assay("steer", "ship", "Deploy only to staging.", env={"ASSAY_FORGE": forge.url})
            assert said.code == 0, said.err
            steered.touch()
        await_file(marker, first)  # the deploy is running, inside the tool call
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    run1 = results(effects)
    second = assay("desk", "run", "mcp", "--once", env=env, timeout=180)
    return run1, results(effects)[len(run1):], second


def deploy_command(tmp_path: Path) -> str:
    """Appends to the effects log; the first time, it then runs until it is killed."""
    effects, marker = tmp_path / "effects.log", tmp_path / "deploying"
    return f"echo deployed >> {effects}; if [ ! -e {marker} ]; then touch {marker}; sleep 600; fi"


def test_every_tool_under_a_real_desk_with_a_crash_inside_an_unsafe_call(forge: Forge, tmp_path: Path) -> None:
    deploy = deploy_command(tmp_path)
    calls: list[dict[str, Any]] = [
        {"tool": "value", "arguments": {"kind": "uuid"}},
        {"tool": "progress", "arguments": {"text": "half way"}},
        {"await": str(tmp_path / "steered")},
        {"tool": "steering"},
        {"tool": "steering"},
        {"tool": "journal", "arguments": {"last": 3}},
        {"tool": "spawn", "arguments": {"title": "Write the docs", "key": "docs-1", "labels": ["later"]}},
        {"tool": "step_run", "arguments": {"name": "build", "policy": "idempotent", "command": "echo built"}},
        {"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "command": deploy}},
        {"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "command": deploy}},
        {"tool": "settle", "arguments": {"name": "deploy", "verdict": "happened"}},
        {"tool": "wait", "arguments": {"on": "bogus"}},
    ]
    run1, run2, second = crash_then_restart(forge, tmp_path, calls, steer=True)
    assert run1[0]["tool"] == "list_tools" and set(run1[0]["text"].split(",")) == {
        "step_run", "value", "settle", "progress", "spawn", "steering", "wait", "journal", "brief"}
    by_tool = {r["tool"]: r for r in reversed(run1)}  # the first of each
    uuid_before = by_tool["value"]["text"]
    steering = [r for r in run1 if r["tool"] == "steering"]
    assert "Deploy only to staging." in steering[0]["text"] and steering[1]["text"] == "nothing new"
    assert not by_tool["journal"]["is_error"] and len(by_tool["journal"]["structured"]["journal"]) == 3
    assert by_tool["spawn"]["structured"]["new"] is True
    child = by_tool["spawn"]["structured"]["brief"]
    assert by_tool["step_run"]["structured"]["ran"] is True and "built" in by_tool["step_run"]["text"]

    assert second.code == 0, second.out + second.err + json.dumps(run2, indent=1)
    assert [r["text"] for r in run2 if r["tool"] == "value"] == [uuid_before]  # replayed, equal
    assert [r["text"] for r in run2 if r["tool"] == "steering"] == ["nothing new"] * 2  # told once, in run 1
    [spawned] = [r for r in run2 if r["tool"] == "spawn"]
    assert spawned["structured"] == {"brief": child, "new": False}  # the same child, not a second
    build, refused, repeat = [r for r in run2 if r["tool"] == "step_run"]
    assert build["structured"]["ran"] is False and "already completed" in build["text"]  # recorded, not rerun
    assert refused["is_error"] and refused["text"].startswith("error: The previous `deploy` operation was "
                                                              "interrupted")
    assert "Operation will NOT be replayed automatically" in refused["text"]
    assert not repeat["is_error"] and repeat["structured"]["ran"] is True  # the deliberate repeat runs
    assert (tmp_path / "effects.log").read_text().count("deployed") == 2
    # nothing left to settle once the repeat ran; the tool says so in the CLI's words
    [settled] = [r for r in run2 if r["tool"] == "settle"]
    assert settled["is_error"] and settled["text"].startswith("error: step 'deploy' has no unknown outcome")
    [waited] = [r for r in run2 if r["tool"] == "wait"]
    assert waited["is_error"] and "unknown wait condition 'bogus'" in waited["text"]
    assert "review ready" in second.out, second.out
    assert f"briefs/{child}.md" in git("ls-tree", "-r", "--name-only", "main", cwd=forge.path)


def test_settling_an_unknown_outcome_through_the_tool(forge: Forge, tmp_path: Path) -> None:
    deploy = deploy_command(tmp_path)
    calls: list[dict[str, Any]] = [
        {"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "command": deploy}},
        {"tool": "settle", "arguments": {"name": "deploy", "verdict": "happened", "evidence": "it is live"}},
        {"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "command": deploy}},
        {"tool": "wait", "arguments": {"on": "manual"}},
    ]
    _, run2, second = crash_then_restart(forge, tmp_path, calls)
    assert second.code == 0, second.out + second.err + json.dumps(run2, indent=1)
    refused, settled, after, parked = run2[1:]
    assert not parked["is_error"] and parked["text"] == "ship is waiting on manual (epoch 2)"
    assert "ship is waiting on manual, as its agent asked" in second.out, second.out  # the run ends there
    assert refused["is_error"] and "was interrupted" in refused["text"]
    assert not settled["is_error"] and "settled as happened" in settled["text"]
    assert not after["is_error"] and after["structured"]["ran"] is False  # settled: it happened, not run again
    assert (tmp_path / "effects.log").read_text().count("deployed") == 1
    port = ForgeGit(forge.url)
    try:
        entries = read_log(port, "ship").entries
    finally:
        port.close()
    said = [e for e in entries if "it is live" in json.dumps(e.data)]
    assert len(said) == 1 and said[0].run.startswith(run2[0]["run"] or "-")  # journaled by the agent's run
