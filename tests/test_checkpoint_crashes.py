"""Nothing of an agent's work is lost when its machine dies: the real Claude Code and Codex, their presets as
`assay init` writes them (a heartbeat every 300 s: none passes here), scripted models that think a random while
each turn, and the desk's whole process group SIGKILLed at a random moment of the run. A successor desk with
another HOME and state directory (so another worktree path and transcript folder) takes over: its first model
request carries every turn that had completed before the crash, and its worktree holds every file those turns
wrote (uncommitted, never pushed to the work branch: the checkpoint's worktree, `refs/assay/wip/<brief>`).

`ASSAY_CHECKPOINT_CRASHES` crashes per CLI (default 1), at moments drawn from `ASSAY_CHECKPOINT_SEED` (default
1), no sooner than `ASSAY_CHECKPOINT_AFTER` seconds into the run (default 0.5) and within `ASSAY_CHECKPOINT_WINDOW`
seconds after that (default: to the run's expected end); `ASSAY_CHECKPOINT_TURNS` (default 6) turns and
`ASSAY_CHECKPOINT_THINK` (default 1.5, the longest think) make longer runs. The figures are printed.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.agentmodels.brain import Action, Conversation, Finish, Run
from tests.agentmodels.server import ModelServer
from tests.conftest import assay, git
from tests.helpers.clidesks import AGENTS, TIMEOUT, desk, desk_env, finish, project
from tests.journal_check import checkpoint_text, entries, invariants

CRASHES = int(os.environ.get("ASSAY_CHECKPOINT_CRASHES", "1"))
SEED = int(os.environ.get("ASSAY_CHECKPOINT_SEED", "1"))
TURNS = int(os.environ.get("ASSAY_CHECKPOINT_TURNS", "6"))
THINK_S = (0.3, float(os.environ.get("ASSAY_CHECKPOINT_THINK", "1.5")))  # how long the model takes over an answer
AFTER_S = float(os.environ.get("ASSAY_CHECKPOINT_AFTER", "0.5"))
WINDOW_S = float(os.environ.get("ASSAY_CHECKPOINT_WINDOW", "0")) or max(0.0, TURNS * sum(THINK_S) / 2 - AFTER_S) + 2
MARGIN_S = 3.0  # a turn that completed this long before the crash has had its time to be checkpointed

BRIEF = """---
title: Write the files
labels: [code]
verify:
  - id: files
    run: "test -f f{turns}.txt"
---
Write the files f1.txt to f{turns}.txt, one command a turn.
"""

pytestmark = pytest.mark.slow


def command(turn: int) -> str:
    return f"echo turn {turn} > f{turn}.txt"


class Thinking:
    """The model: turn k writes f<k>.txt, then it finishes; each answer after a random think. It notes when each
    request came and how many turns it carried."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.server: ModelServer | None = None
        self.seen: list[tuple[float, int]] = []  # (monotonic time, turns the request carried)
        self.firsts: list[tuple[Conversation, list[str]]] = []  # the successor's requests, and its files then
        self.files: Path | None = None  # where the successor's worktrees are, once it starts
        self.mark = threading.Event()
        self.never = threading.Event()

    def __call__(self, conversation: Conversation) -> Action:
        done = len(conversation.exchanges)
        self.seen.append((time.monotonic(), done))
        if self.mark.is_set() and self.files is not None:
            found = sorted(p.name for w in self.files.rglob("worktrees") for p in w.rglob("f*.txt"))
            self.firsts.append((conversation, found))
        assert self.server is not None
        self.server.wait_unlocked(self.never, self.rng.uniform(*THINK_S))  # thinking, while others are answered
        return Run(command(done + 1)) if done < TURNS else Finish("Done.")


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_successor_resumes_every_completed_turn_and_its_files(name: str, tmp_path: Path) -> None:
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    rng = random.Random(f"{SEED}-{name}")
    figures = []
    for n in range(CRASHES):
        root = tmp_path / f"crash-{n}"
        root.mkdir()
        figures.append(one_crash(name, root, rng))
    print(f"\n{name}: {CRASHES} crashes (seed {SEED}): " + "; ".join(figures))


def one_crash(name: str, root: Path, rng: random.Random) -> str:
    agent = AGENTS[name]
    forge = project(root, BRIEF.format(turns=TURNS))
    brain = Thinking(rng)
    with agent.server(brain) as server:
        brain.server = server
        first = desk(name, forge, desk_env(agent, server, root))
        deadline = time.monotonic() + TIMEOUT
        while not brain.seen:
            assert first.poll() is None and time.monotonic() < deadline, server.debug()
            time.sleep(0.05)
        crash_after = rng.uniform(AFTER_S, AFTER_S + WINDOW_S)  # a random moment of the run
        crashed = brain.seen[0][0] + crash_after
        while time.monotonic() < crashed and first.poll() is None:
            time.sleep(0.02)
        if first.poll() is not None:  # the run was over before its moment came: nothing to resume
            assert first.returncode == 0, server.debug()
            return f"run over before its crash at {crash_after:.1f}s"
        os.killpg(first.pid, signal.SIGKILL)
        crashed = time.monotonic()
        first.wait()
        done_then = max([turns for at, turns in brain.seen if at <= crashed - MARGIN_S], default=0)
        brain.files = root / "state-2"
        brain.mark.set()
        env = {**desk_env(agent, server, root), **agent.env(server, root / "home-2"),
               "ASSAY_STATE_DIR": str(root / "state-2")}
        successor = desk(name, forge, env)
        out = finish(successor, server)
    detail = f"crash at {crash_after:.1f}s, {done_then} turns completed\n{out}\n{server.debug()}"
    assert brain.firsts, detail
    resumed, files = brain.firsts[0]
    carried = [e.command for e in resumed.exchanges]
    assert carried[:done_then] == [command(k) for k in range(1, done_then + 1)], detail
    # the files of every turn it carries were there before its agent started (and nothing after them)
    assert files == sorted(f"f{k}.txt" for k in range(1, len(carried) + 1)), f"{files}\n{detail}"
    assert "review ready" in out and invariants(forge, "ship") == [], detail
    return f"crash at {crash_after:.1f}s: {done_then} turns completed, {len(carried)} resumed with their files"


class Forked:
    """The model for the fork test: the source brief's run writes f1.txt to f<TURNS>.txt; the fork's run (its
    prompt names the fork's brief) notes what its first request carried and which files its worktree held then."""

    def __init__(self, files: Path) -> None:
        self.files = files
        self.first: tuple[Conversation, list[str]] | None = None
        self.server: ModelServer | None = None
        self.never = threading.Event()

    def __call__(self, conversation: Conversation) -> Action:
        done = len(conversation.exchanges)
        assert self.server is not None
        self.server.wait_unlocked(self.never, 1.0)  # the model thinks: the CLI waits between turns meanwhile
        if "(fork of ship" in " ".join(conversation.texts) and self.first is None:
            found = sorted(p.name for w in self.files.rglob("worktrees") for p in w.rglob("f*.txt"))
            self.first = (conversation, found)
        return Run(command(done + 1)) if done < TURNS else Finish("Done.")


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_fork_after_turn_k_has_turn_ks_conversation_and_files_and_nothing_later(name: str, tmp_path: Path) -> None:
    """The brief runs to its ready review, checkpointed at each turn. `assay brief fork` at the checkpoint that
    holds turn 2 and not turn 3; a desk with another HOME works the fork: its first request carries turns 1 and 2,
    and its worktree held f1.txt and f2.txt, no later file, before its agent started."""
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    forge = project(tmp_path, BRIEF.format(turns=TURNS))
    brain = Forked(tmp_path / "state-2")
    with agent.server(brain) as server:
        brain.server = server
        out = finish(desk(name, forge, desk_env(agent, server, tmp_path)), server)
        assert "review ready" in out, out
        saved = [e for e in entries(forge, "ship") if e["kind"] == "checkpoint"]
        at = [e for e in saved
              if command(2) in (text := checkpoint_text(forge, e)) and command(3) not in text]
        assert at, [e["seq"] for e in saved]
        work = tmp_path / "project"
        git("pull", "-q", str(forge), "main", cwd=work)
        forked = assay("brief", "fork", "early", "--from", "ship", "--at", str(at[-1]["seq"]), "--forge",
                       str(forge), cwd=work)
        assert forked.code == 0, forked.err
        git("add", "-A", cwd=work)
        git("commit", "-qm", "fork", cwd=work)
        git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)
        env = {**desk_env(agent, server, tmp_path), **agent.env(server, tmp_path / "home-2"),
               "ASSAY_STATE_DIR": str(tmp_path / "state-2")}
        second = finish(desk(name, forge, env), server)
    detail = f"{second}\n{server.debug()}"
    assert brain.first is not None, detail
    resumed, files = brain.first
    assert [e.command for e in resumed.exchanges] == [command(1), command(2)], detail
    assert files == ["f1.txt", "f2.txt"], f"{files}\n{detail}"
