"""Desks running the real agent CLIs (Claude Code, Codex) against scripted model servers: the presets as
`assay init` writes them, a desk started in a session of its own, and the environment a user gives it."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.agentmodels import clis
from tests.agentmodels.anthropic import AnthropicServer
from tests.agentmodels.brain import Brain
from tests.agentmodels.responses import ResponsesServer
from tests.agentmodels.server import ModelServer
from tests.conftest import git

TIMEOUT = 240
# a deploy whose command is held at a gate (a FIFO, opened before `started` is written, so a command seen started
# is held there) and an inspection of whether it happened; the brief that asks for both
DEPLOY = ('gated=; if [ -p "$DEPLOY_GATE" ]; then exec 3<> "$DEPLOY_GATE"; gated=1; fi; '
          'echo started >> "$DEPLOY_LOG.started"; if [ -n "$gated" ]; then read x <&3; fi; '
          'echo deployed >> "$DEPLOY_LOG"')
INSPECT = 'test -f "$DEPLOY_LOG" && grep -q deployed "$DEPLOY_LOG"'
DEPLOY_BRIEF = """---
title: Ship the greeting
labels: [code]
env:
  DEPLOY_LOG: {log}
  DEPLOY_GATE: {gate}
verify:
  - id: greeting
    run: "grep -q hello greet.txt"
---
Write greet.txt saying hello, then deploy it.
"""

class Agent:
    """One CLI under test: its server, and the environment a user gives the desk to point it there."""

    def __init__(self, name: str, server: Callable[[Brain], ModelServer], env: Callable[[ModelServer, Path],
                 dict[str, str]], installed: str | None) -> None:
        self.name, self.server, self.env, self.installed = name, server, env, installed


AGENTS = {
    "claude": Agent("claude", AnthropicServer, lambda s, home: clis.claude_env(s.url, home), clis.claude_bin()),
    "codex": Agent("codex", ResponsesServer, lambda s, home: clis.codex_env(s.base_url, home),
                   clis.codex_bin()),
}


def project(tmp_path: Path, brief: str) -> Path:
    """`assay init --local-forge` (the presets as shipped), plus one brief on main; returns the forge."""
    work, forge = tmp_path / "project", tmp_path / "forge.git"
    work.mkdir()
    init = subprocess.run([sys.executable, "-m", "assay", "init", "--local-forge", str(forge)], cwd=work,
                          capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    (work / "briefs" / "ship.md").write_text(brief)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "ship", cwd=work)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)
    return forge


def no_reader(gate: Path) -> bool:
    """Whether no process has the FIFO open for reading (the deploy's command is gone)."""
    try:
        os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        return exc.errno == errno.ENXIO
    return False


def desk(name: str, forge: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`assay desk run NAME --once`, in a session of its own (so its whole process group can be killed)."""
    return subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", name, "--once", "--forge", str(forge)],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def finish(proc: subprocess.Popen[str], server: ModelServer) -> str:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the desk did not finish in {TIMEOUT}s\n{out}\n{server.debug()}") from None
    assert proc.returncode == 0, f"{out}\n{server.debug()}"
    return out


def desk_env(agent: Agent, server: ModelServer, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, **agent.env(server, tmp_path / "home"), "ASSAY_STATE_DIR": str(tmp_path / "state")}
    env["PATH"] = os.pathsep.join([*clis.path_dirs(), os.environ["PATH"]])
    env["GITHUB_TOKEN"] = "ghp_" + "s3cret" * 6  # a forge token the desk holds: it must never reach the agent
    return env

