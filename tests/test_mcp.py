"""`assay mcp` driven by the `mcp` SDK's own stdio client, as an agent under a real desk: every tool; an
unsafe `step_run` cut off by a SIGKILL of the desk is refused once after the restart and runs on the
deliberate repeat; a recorded `value` comes back equal after the crash; steering is told once."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from assay.core.git import ForgeGit
from assay.core.journal import read_log
from assay.desk.effects import check_effect, check_value
from assay.errors import UsageError
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
        {"tool": "answer", "arguments": {"thread": "7", "fixed": "done"}},
    ]
    run1, run2, second = crash_then_restart(forge, tmp_path, calls, steer=True)
    assert run1[0]["tool"] == "list_tools" and set(run1[0]["text"].split(",")) == {
        "step_run", "value", "settle", "progress", "spawn", "steering", "wait", "journal", "brief", "answer"}
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
    [answered] = [r for r in run2 if r["tool"] == "answer"]  # no review thread waits: the desk says so
    assert answered["is_error"] and "no review thread '7' waits on an answer in this run" in answered["text"]
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


JUNK: list[tuple[str, dict[str, Any], str]] = [  # (tool, arguments, the words the error must hold)
    ("value", {"kind": "random", "bytes": 5_000_000}, "invalid value for `bytes`: 5000000 is not in the range "
                                                      "1<=x<=4096"),
    ("value", {"kind": "random", "bytes": 1_000_000_000}, "is not in the range 1<=x<=4096"),
    ("value", {"kind": "random", "bytes": "abc"}, "invalid value for `bytes`: 'abc' is not a whole number"),
    ("value", {"kind": "bad"}, "invalid value for `kind`: 'bad' is not one of 'now', 'uuid', 'random'"),
    ("value", {}, "missing argument `kind`"),
    ("step_run", {"name": "hi", "argv": "echo hi"}, "invalid value for `argv`: 'echo hi' is not a list"),
    ("step_run", {"name": "hi", "argv": ["echo", 1]}, "invalid value for `argv.1`: 1 is not a string"),
    ("step_run", {"name": "hi", "command": "echo hi", "shell": True}, "no such argument: `shell`"),
    ("journal", {"last": -1}, "invalid value for `last`: -1 is not in the range 0<=x<="),
]


def test_tool_arguments_outside_the_schema_are_refused_in_the_clis_words(forge: Forge, tmp_path: Path) -> None:
    calls = [{"tool": tool, "arguments": arguments} for tool, arguments, _ in JUNK]
    calls.append({"tool": "value", "arguments": {"kind": "random", "bytes": 4}})  # the server still serves
    publish(forge, {"desks/mcp.yaml": DESK, "briefs/ship.md": brief(calls)})
    env = {"ASSAY_FORGE": forge.url, "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log"),
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    run = assay("desk", "run", "mcp", "--once", env=env, timeout=180)
    assert run.code == 0, run.out + run.err
    said = [r for r in results(tmp_path / "effects.log") if r["tool"] not in ("list_tools", "brief")]
    assert len(said) == len(JUNK) + 1, said
    good = said.pop()
    for (tool, arguments, words), result in zip(JUNK, said, strict=True):
        assert (result["tool"], result["arguments"]) == (tool, arguments)
        assert result["is_error"] and result["text"].startswith("error: ") and words in result["text"], result
        assert "hint: " in result["text"] and "Traceback" not in result["text"]
    assert not good["is_error"] and len(good["text"]) == 8  # 4 bytes, hex
    assert "Traceback" not in run.out + run.err
    port = ForgeGit(forge.url)
    try:
        logged = read_log(port, "ship").entries
    finally:
        port.close()
    values = [(e.data or {}).get("arg") for e in logged if e.kind == "nondeterminism"]
    assert values == [4] and not [e for e in logged if e.step == "hi"]  # only the good value's; no step ran


def test_a_line_that_is_no_json_rpc_message_gets_a_json_rpc_error(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-m", "assay", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert server.stdin is not None and server.stdout is not None
    out = server.stdout

    def reply() -> Any:
        ready, _, _ = select.select([out], [], [], 30)
        assert ready, "no reply"
        return json.loads(out.readline())

    try:
        replies = []
        for line in (b"this is not json\n", b'{"foo": 1}\n', b'[1, 2]\n'):
            server.stdin.write(line)
            server.stdin.flush()
            replies.append(reply())
        hello = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        server.stdin.write(json.dumps(hello).encode() + b"\n")
        server.stdin.flush()
        answered = reply()
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    assert [(r["id"], r["error"]["code"]) for r in replies] == [(None, -32700), (None, -32600), (None, -32600)]
    assert answered["id"] == 7 and answered["result"]["serverInfo"]["name"] == "assay"  # it serves on
    assert server.stderr is not None and b"Traceback" not in server.stderr.read()


def test_the_desk_holds_a_value_request_to_the_clis_limits_whoever_sends_it() -> None:
    """The desk's socket is open to anything the agent runs: its own check is the CLI's, not the tool's."""
    assert check_value("random", 4096) == ("random", 4096)
    for kind, n_bytes, words in (("random", 1_000_000_000, "1000000000 is not in the range 1<=x<=4096"),
                                 ("random", "abc", "'abc' is not in the range"), ("random", True, "True is not"),
                                 ("bad", 16, "'bad' is not one of 'now', 'uuid', 'random'")):
        with pytest.raises(UsageError, match=re.escape(words)):
            check_value(kind, n_bytes)
    with pytest.raises(UsageError, match="the command must be a list of words, not 'echo hi'"):
        check_effect("hi", "safe", None, "echo hi")  # type: ignore[arg-type]
