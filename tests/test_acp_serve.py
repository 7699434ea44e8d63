"""An ACP agent that writes files and runs commands through its client (`fs/*`, `terminal/*`) hands the desk the
effect itself: the desk journals each before it happens, confines files to the worktree, and owns each command's
process tree. Driven by a small ACP agent following a plan (tests/helpers/acp_fake_agent.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import REPO, audit_failures, git
from tests.helpers.clidesks import DEPLOY, DEPLOY_BRIEF, TIMEOUT, desk, no_reader, project
from tests.journal_check import claim_chain, entries, invariants

FAKE = REPO / "tests" / "helpers" / "acp_fake_agent.py"
DESK = f"""name: fake
takes:
  labels: [code]
agent:
  protocol: acp
  command: [python, {FAKE}]
  timeout_s: 120
  idle_s: 60
attempts: 2
env_allow: [PATH, HOME, LANG, "FAKE_ACP_*"]
"""
OUTSIDE = "/etc/assay-fake-agent-was-here"


def setup(tmp_path: Path, gate: Path) -> tuple[Path, dict[str, str], Path, Path]:
    """The project with the fake desk and the ship brief; the desk's environment, the effects log and the answers
    log."""
    log = tmp_path / "effects.log"
    forge = project(tmp_path, DEPLOY_BRIEF.format(log=log, gate=gate))
    work = tmp_path / "project"
    (work / "desks" / "fake.yaml").write_text(DESK)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "the fake ACP desk", cwd=work)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)
    plan, answers = tmp_path / "plan.json", tmp_path / "answers.jsonl"
    plan.write_text(json.dumps([{"write": "greet.txt", "text": "hello\n"}, {"read": "greet.txt"},
                                {"write": OUTSIDE, "text": "x"}, {"run": "sh", "args": ["-c", DEPLOY], "again": True}]))
    env = {**os.environ, "HOME": str(tmp_path / "home"), "ASSAY_STATE_DIR": str(tmp_path / "state"),
           "FAKE_ACP_PLAN": str(plan), "FAKE_ACP_LOG": str(answers), "GITHUB_TOKEN": "ghp_" + "s3cret" * 6}
    return forge, env, log, answers


def answered(answers: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in answers.read_text().splitlines()] if answers.exists() else []


def steps(forge: Path) -> list[tuple[str, str, str]]:
    return [(e["step"], e["kind"], e.get("policy", "")) for e in entries(forge, "ship")
            if e.get("step") in ("edit", "shell")]


def test_files_and_commands_through_the_client_are_journaled_before_they_happen(tmp_path: Path) -> None:
    forge, env, log, answers = setup(tmp_path, tmp_path / "no-gate")
    proc = desk("fake", forge, env)
    out, _ = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0 and "review ready; waiting for merge" in out, out
    moves = answered(answers)
    assert moves[0]["move"]["initialize"]["terminal"] is True  # the desk offers both
    assert moves[0]["move"]["initialize"]["fs"] == {"readTextFile": True, "writeTextFile": True}
    wrote, read, outside, ran = (m["answers"] for m in moves[1:5])
    assert "result" in wrote[0] and read[0]["result"] == {"content": "hello\n"}
    assert "outside the worktree" in outside[0]["error"]["message"] and not Path(OUTSIDE).exists()
    created, exited, output, released = ran
    assert exited["result"] == {"exitCode": 0, "signal": None} and "result" in released, ran
    assert log.read_text() == "deployed\n", out
    assert steps(forge) == [("edit", "intent", "safe"), ("edit", "result", "safe"), ("shell", "intent", "unsafe"),
                            ("shell", "result", "unsafe")], steps(forge)
    shell = [e for e in entries(forge, "ship") if e.get("step") == "shell" and e["kind"] == "intent"]
    assert shell[0]["data"]["input"]["command"] == DEPLOY
    assert git("--git-dir", str(forge), "show", "refs/heads/assay/ship:greet.txt") == "hello\n"
    assert claim_chain(forge, "ship")[-1]["state"] == "waiting"
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


def test_a_desk_killed_inside_a_command_it_runs_for_the_agent_strands_nothing(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    forge, env, log, answers = setup(tmp_path, gate)
    started = Path(f"{log}.started")
    first = desk("fake", forge, env)
    deadline = time.monotonic() + TIMEOUT
    while not started.exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
        time.sleep(0.01)
    held = [e for e in entries(forge, "ship") if e.get("step") == "shell"]
    assert [e["kind"] for e in held] == ["intent"]  # on the forge before the command started
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    deadline = time.monotonic() + 10
    while not no_reader(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert no_reader(gate), "the command outlived its desk"
    gate.unlink()
    second = subprocess.run([sys.executable, "-m", "assay", "desk", "run", "fake", "--once", "--forge", str(forge)],
                            env=env, capture_output=True, text=True, timeout=TIMEOUT)
    out = second.stdout + second.stderr
    assert "took over ship" in out, out
    runs = [m["answers"] for m in answered(answers) if m["move"].get("run")]
    told = runs[-1][0].get("error", {}).get("message", "")
    assert "The previous `shell` operation was interrupted" in told, f"{runs}\n{out}"  # the refusal's text
    assert "result" in runs[-1][1], runs[-1]  # called again on purpose, it ran
    assert log.read_text() == "deployed\n", out  # once across both desks: the cut-off command never got past its gate
    assert "review ready" in out, out
    ends = [kind for step, kind, _ in steps(forge) if step == "shell"]
    assert ends == ["intent", "outcome_unknown", "refused", "intent", "result"], ends
    assert invariants(forge, "ship") == []


def test_the_desk_follows_no_symlink_out_of_the_worktree(tmp_path: Path) -> None:
    """The desk holds the forge's credentials: an agent's symlink, at a file's name or among its folders, never
    leads a read or write through `fs/*` outside the worktree."""
    from assay.desk.acpserve import Served, ServeError

    worktree, outside = tmp_path / "worktree", tmp_path / "outside"
    worktree.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("token\n")
    (worktree / "folder").symlink_to(outside)
    (worktree / "secret-link").symlink_to(outside / "secret")
    (worktree / "victim").symlink_to(outside / "victim")
    journaled: list[str] = []

    def step(name: str, policy: str, given: dict[str, Any], effect: Any) -> tuple[dict[str, Any], bool]:
        journaled.append(given["path"])
        return effect("key"), True

    served = Served(worktree, {}, step, lambda kind, text: "safe", lambda kind, target: False,
                    lambda ident, result: None)
    for method, params in (("fs/read_text_file", {"path": f"{worktree}/secret-link"}),
                           ("fs/read_text_file", {"path": f"{worktree}/folder/secret"}),
                           ("fs/read_text_file", {"path": f"{worktree}/../outside/secret"}),
                           ("fs/write_text_file", {"path": f"{worktree}/folder/new", "content": "x"})):
        try:
            answer = served.handle(method, 1, {"sessionId": "s", **params})
        except ServeError as exc:
            answer = exc.message
        assert isinstance(answer, str) and ("outside the worktree" in answer or "symlink" in answer), (params, answer)
    # a write to a link's name replaces the link with the file, never writes through it
    assert served.handle("fs/write_text_file", 3, {"path": f"{worktree}/victim", "content": "x"}) == {}
    assert not (worktree / "victim").is_symlink() and (worktree / "victim").read_text() == "x"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"] and (outside / "secret").read_text() == "token\n"
    assert served.handle("fs/write_text_file", 2, {"path": f"{worktree}/sub/dir/ok.txt", "content": "fine"}) == {}
    assert (worktree / "sub" / "dir" / "ok.txt").read_text() == "fine"
    assert journaled[-1] == "sub/dir/ok.txt"
