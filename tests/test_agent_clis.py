"""The real agent CLIs against scripted model servers on 127.0.0.1: one test per CLI.

Each test runs the installed CLI (sh tests/install-agents.sh) in a fresh git repository, with stdin from
/dev/null and a HOME of its own, against a server whose brain runs two shell commands and then finishes.
It checks what the commands did on disk, that the CLI exited 0, and that the brain was shown the first
command's output when it chose the second.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.agentmodels import clis
from tests.agentmodels.anthropic import AnthropicServer
from tests.agentmodels.brain import Action, Conversation, Finish, Run, Transcript
from tests.agentmodels.responses import ResponsesServer
from tests.agentmodels.server import ModelServer

PROMPT = "Write first.txt, then copy AGENT_TEST_VALUE into second.txt."
VALUE = "value with spaces, 'quotes' and $dollars"
FIRST = "printf 'first line\\n' > first.txt && cat first.txt"
SECOND = 'echo "$AGENT_TEST_VALUE" > second.txt'
TIMEOUT = 120  # seconds; a run takes about one


def two_commands(conversation: Conversation) -> Action:
    """Run FIRST, then (having seen its output) SECOND, then finish: decided by the exchanges held."""
    done = [exchange.command for exchange in conversation.exchanges]
    if conversation.prompt != PROMPT or any(exchange.failed for exchange in conversation.exchanges):
        return Finish("Stopping: unexpected conversation.")
    if not done:
        return Run(FIRST)
    if done == [FIRST] and "first line" in conversation.exchanges[0].output:
        return Run(SECOND)
    return Finish("Both files are written.")


def git_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    return path


def run_cli(argv: list[str], cwd: Path, env: dict[str, str], server: ModelServer) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{argv[0]} did not finish in {TIMEOUT}s\n{server.debug()}\n"
                             f"stdout: {exc.stdout!r}\nstderr: {exc.stderr!r}") from exc


def check_run(proc: subprocess.CompletedProcess[str], repo: Path, server: ModelServer) -> None:
    transcript: Transcript = server.transcript
    detail = f"\nexit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}\n{server.debug()}"
    assert proc.returncode == 0, detail
    assert not server.errors, detail
    assert (repo / "first.txt").read_text() == "first line\n", detail
    assert (repo / "second.txt").read_text() == VALUE + "\n", detail
    conversations = transcript.conversations
    assert conversations and conversations[0].prompt == PROMPT, detail
    second_turn = [c for c in conversations if len(c.exchanges) == 1]
    assert second_turn and "first line" in second_turn[0].exchanges[0].output, detail
    final = conversations[-1]
    assert [e.command for e in final.exchanges] == [FIRST, SECOND], detail
    assert not any(e.failed for e in final.exchanges), detail


@pytest.mark.skipif(clis.claude_bin() is None, reason="Claude Code is not installed (sh tests/install-agents.sh)")
def test_claude_code_runs_two_commands(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    with AnthropicServer(two_commands) as server:
        env = clis.claude_env(server.url, tmp_path / "home", {"AGENT_TEST_VALUE": VALUE})
        proc = run_cli(clis.claude_argv(PROMPT), repo, env, server)
    check_run(proc, repo, server)
    assert "Both files are written." in proc.stdout


@pytest.mark.skipif(clis.codex_bin() is None, reason="Codex (or node) is not installed (sh tests/install-agents.sh)")
def test_codex_runs_two_commands(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    with ResponsesServer(two_commands) as server:
        env = clis.codex_env(server.base_url, tmp_path / "home", {"AGENT_TEST_VALUE": VALUE})
        proc = run_cli(clis.codex_argv(PROMPT), repo, env, server)
    check_run(proc, repo, server)
    assert "Both files are written." in proc.stdout
