"""The real aider (PyPI aider-chat 0.86.2) against a scripted chat-completions server on 127.0.0.1.

An unattended run in a git worktree that a desk commits and pushes afterwards: aider edits the file it was
asked to, exits 0, and leaves nothing else behind (no history files, no tags cache, no .gitignore edit, no
commit, no identity written into the repository's git config).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.agentmodels import clis
from tests.agentmodels.brain import Action, Conversation, Edit, Finish
from tests.agentmodels.chat import ChatServer
from tests.helpers.aider import AIDER, MODEL, model_metadata

PROMPT = "Please make the greeting friendlier."  # names no file: aider adds hello.txt when the reply names it
OLD = "hello\n"
NEW = "hello, friend\n"
TIMEOUT = 120  # seconds; a run takes about five


def aider_argv(aider: str, api_base: str, metadata: Path, prompt: str) -> list[str]:
    """aider for one unattended task: no questions, no network but the model, no files or commits of its own."""
    return [
        aider,
        "--model", MODEL, "--openai-api-base", api_base, "--openai-api-key", "sk-scripted-test-key",
        "--model-metadata-file", str(metadata),  # else: a GET of litellm's price list on GitHub (5 s timeout)
        "--edit-format", "whole",  # the reply is the path line and a fenced block with the whole file
        "--yes-always",  # every confirmation is yes, except running shell commands (those need an explicit yes)
        "--no-auto-commits", "--no-dirty-commits",  # the desk commits; aider would commit before and after edits
        "--no-gitignore",  # else it appends ".aider*" to .gitignore
        "--input-history-file", os.devnull, "--chat-history-file", os.devnull,  # else .aider.*.history* in the repo
        "--map-tokens", "0",  # no repo map, hence no .aider.tags.cache.v4/ in the repo
        "--no-check-update",  # else a GET of pypi.org without a timeout
        "--no-show-release-notes",  # else, on a version's first run, "yes" opens a web browser
        "--no-show-model-warnings",  # else, for an unknown model, "yes" opens a web browser
        "--no-analytics",  # else one fresh HOME in ten is asked, answers yes, and posts to PostHog
        "--no-detect-urls", "--disable-playwright",  # else a URL in the task is fetched (and playwright installed)
        "--no-auto-lint", "--no-auto-test",  # no linter or test runs, nor fix-up turns, inside aider
        "--no-pretty", "--no-fancy-input",  # plain output; no prompt_toolkit on a stdin that is /dev/null
        "--message", prompt,
    ]


def aider_env(home: Path) -> dict[str, str]:
    """The tests' basics, a HOME of the test's (aider writes ~/.aider/), litellm offline, a git identity."""
    home.mkdir(parents=True, exist_ok=True)
    return clis.base_env(home, {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else litellm's import GETs its price list (5 s timeout)
        # `git config user.name` must answer, else aider writes "Your Name" into the repository's .git/config
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "Scripted Desk",
        "GIT_CONFIG_KEY_1": "user.email", "GIT_CONFIG_VALUE_1": "desk@example.invalid",
    })


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def edit_then_finish(conversation: Conversation) -> Action:
    """Write hello.txt, and finish once aider reports the files updated (decided by the texts held)."""
    if conversation.prompt != PROMPT:
        return Finish("Stopping: unexpected conversation.")
    if any(text.startswith("I updated the files.") for text in conversation.texts):
        return Finish("The greeting is friendlier now.")
    return Edit("hello.txt", NEW)


@pytest.mark.skipif(AIDER is None, reason="aider is not installed (sh tests/install-agents.sh, or $ASSAY_AIDER_BIN)")
def test_aider_edits_a_file_unattended(tmp_path: Path) -> None:
    assert AIDER is not None
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "hello.txt").write_text(OLD)
    git(repo, "add", "hello.txt")
    git(repo, "commit", "-q", "-m", "hello")
    head = git(repo, "rev-parse", "HEAD")
    config = (repo / ".git" / "config").read_text()
    metadata = model_metadata(tmp_path / "model-metadata.json")

    with ChatServer(edit_then_finish) as server:
        argv = aider_argv(AIDER, server.url, metadata, PROMPT)
        try:
            proc = subprocess.run(argv, cwd=repo, env=aider_env(tmp_path / "home"), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"aider did not finish in {TIMEOUT}s\n{server.debug()}\n"
                                 f"stdout: {exc.stdout!r}\nstderr: {exc.stderr!r}") from exc

    detail = f"\nexit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}\n{server.debug()}"
    assert proc.returncode == 0, detail
    assert not server.errors, detail
    assert (repo / "hello.txt").read_text() == NEW, detail
    status = git(repo, "status", "--porcelain", "--ignored", "--untracked-files=all")
    assert status == " M hello.txt\n", detail
    assert git(repo, "rev-parse", "HEAD") == head, detail
    assert git(repo, "rev-list", "--all", "--count").strip() == "1", detail
    assert (repo / ".git" / "config").read_text() == config, detail
    conversations = server.transcript.conversations
    assert conversations and all(c.prompt == PROMPT for c in conversations), detail
    assert server.transcript.side_requests == 0, detail
