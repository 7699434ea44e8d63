"""ACP desks under test: each preset, the adapter it runs and the scripted server its model is, and the pieces the
ACP tests share: a model that uses its own shell only (`native`), the deploy held at its FIFO gate, and the
journal's `shell` steps.

`ACP_PRESETS` is what the tests parametrize over; `PRESETS` says, per preset, which adapter binary must be
installed and which scripted server plays its model (tests/agentmodels/)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels import clis
from tests.agentmodels.brain import Action, Conversation, Finish, Run
from tests.agentmodels.server import ModelServer
from tests.conftest import git
from tests.helpers.clidesks import AGENTS, DEPLOY, INSPECT, Agent, no_reader
from tests.journal_check import entries

WRITE = "printf 'hello\\n' > greet.txt"
DEPLOY_CALL = f"sh -c {shlex.quote(DEPLOY)}"  # the model's deploy and inspection, as its shell tool runs them
INSPECT_CALL = f"sh -c {shlex.quote(INSPECT)}"
SETTLE = re.compile(r"`(\S+) step settle NAME --happened`")  # how the prompt says to record an inspection
START_S = 120  # how long a desk may take to reach the deploy, or to die at a crash point


@dataclass(frozen=True)
class AcpPreset:
    """One ACP desk preset (desks/NAME.yaml as `assay init` writes it), the adapter binary it starts, and the
    scripted model server (and the environment pointing the adapter at it) its model is."""

    name: str
    adapter: str
    agent: Agent

    def adapter_path(self) -> str | None:
        found = [Path(d) / self.adapter for d in clis.path_dirs()]
        return next((str(p) for p in found if p.is_file() and os.access(p, os.X_OK)), None)


PRESETS = {
    "claude-acp": AcpPreset("claude-acp", "claude-agent-acp", AGENTS["claude"]),  # the scripted Anthropic server
    "codex-acp": AcpPreset("codex-acp", "codex-acp", AGENTS["codex"]),  # the scripted Responses server
}
ACP_PRESETS = ["claude-acp", "codex-acp"]


def acp_preset(name: str) -> AcpPreset:
    """The preset, or a skip naming what is missing (its adapter, or node to run it)."""
    preset = PRESETS[name]
    if preset.adapter_path() is None:
        pytest.skip(f"{preset.adapter} is not installed (sh tests/install-agents.sh)")
    if shutil.which("node", path=os.pathsep.join([*clis.path_dirs(), os.environ.get("PATH", "")])) is None:
        pytest.skip(f"{preset.adapter} needs node, which is not on PATH")
    return preset


def brain(first: str = WRITE) -> Callable[[Conversation], Action]:
    """The model, with its own shell only: write greet.txt and deploy (`first` of the two first). Told a deploy's
    outcome is unknown, it inspects: it settles the step as having happened if the inspection found the deploy, and
    deploys again if not."""
    todo = [WRITE, DEPLOY_CALL] if first == WRITE else [DEPLOY_CALL, WRITE]

    def decide(conversation: Conversation) -> Action:
        said = [conversation.prompt, *conversation.texts]
        unknown = any("operation was interrupted" in t for t in said)
        order = [e.command for e in conversation.exchanges]
        if not unknown:
            return next((Run(c) for c in todo if c not in order), Finish("Deployed."))
        if WRITE not in order:
            return Run(WRITE)
        if INSPECT_CALL not in order:
            return Run(INSPECT_CALL)
        looked = len(order) - 1 - order[::-1].index(INSPECT_CALL)
        if not conversation.exchanges[looked].failed:  # it had deployed: recorded so, as the prompt asks
            settle = next((f"{m.group(1)} step settle shell --happened" for t in said if (m := SETTLE.search(t))),
                          None)
            if settle is not None and settle not in order:
                return Run(settle)
            return Finish("The greeting is deployed.")
        after = [e for e in conversation.exchanges[looked:] if e.command == DEPLOY_CALL]
        if not after:
            return Run(DEPLOY_CALL)  # inspected: it did not happen, so it deploys
        refused = after[-1].failed and any("call it again deliberately" in t for t in conversation.texts)
        if refused and len(after) == 1:
            return Run(DEPLOY_CALL)  # refused once, as the repeat of a cut-off call is: called again, on purpose
        return Finish("Deployed." if not after[-1].failed else f"The deploy failed: {after[-1].output}")

    return decide


native = brain()  # write, then deploy
deploy_first = brain(DEPLOY_CALL)  # deploy, then write: the deploy is the run's first `shell` step


def await_start(started: Path, proc: subprocess.Popen[str], server: ModelServer) -> None:
    """Until the deploy's command has started (its marker written); the desk's story if it ends or stalls first."""
    deadline = time.monotonic() + START_S
    while not started.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"the deploy never started\n{proc.communicate()[0]}\n{server.debug()}")
        time.sleep(0.01)


def open_gate(gate: Path) -> bool:
    """Let the command held at the gate go on; False when no command holds it."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        os.write(fd, b"go\n")
    finally:
        os.close(fd)
    return True


def await_no_reader(gate: Path, within_s: float = 15.0) -> bool:
    """Whether, within `within_s`, no process holds the gate (the deploy's command is gone)."""
    deadline = time.monotonic() + within_s
    while not no_reader(gate):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def shells(forge: Path, brief: str = "ship") -> list[dict[str, Any]]:
    return [e for e in entries(forge, brief) if e.get("step") == "shell"]


def desk_copy(tmp_path: Path, forge: Path, preset: AcpPreset, suffix: str, changes: dict[str, str]) -> str:
    """desks/PRESET-SUFFIX.yaml on main: the preset as `assay init` wrote it (in `project`), with each of `changes`'
    texts replaced; returns the new desk's name."""
    work = tmp_path / "project"
    name = f"{preset.name}-{suffix}"
    text = (work / "desks" / f"{preset.name}.yaml").read_text().replace(f"name: {preset.name}\n", f"name: {name}\n")
    for old, new in changes.items():
        assert old in text, f"desks/{preset.name}.yaml has no {old!r}"
        text = text.replace(old, new)
    (work / "desks" / f"{name}.yaml").write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-qm", f"desk {name}", cwd=work)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)
    return name


def running_in(folder: Path, word: str) -> list[int]:
    """The processes working in `folder` (or below it) whose command line holds `word`: an adapter, or a command
    it started, that a desk left alive."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                words = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if cwd.is_relative_to(folder) and word in words:
            found.append(int(entry))
    return found
