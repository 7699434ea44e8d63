"""The agent process: started with the brief as its prompt, an allow-listed environment and no forge
credentials, its lease renewed by a heartbeat while it works, its steps served by the desk over a local
socket (`stepserver.py`), and killed when its desk loses the claim."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.briefs import Brief
from assay.claims import Claims
from assay.credentials import strip_credentials
from assay.deskspec import DeskSpec
from assay.envs import agent_env
from assay.errors import AssayError, Conflict
from assay.git import ForgeGit
from assay.journal import JournalLog
from assay.stepserver import StepServer

Echo = Callable[[str], None]
TAIL = 4000


@dataclass(frozen=True)
class AgentRun:
    """One attempt: where it works, what it is told, and who it works for."""

    brief: Brief
    epoch: int
    attempt: int
    prompt: str
    worktree: Path
    prompt_file: Path
    known: JournalLog | None = None  # the desk's read of the journal, where the agent's steps start from


def run_agent(git: ForgeGit, spec: DeskSpec, run: AgentRun, echo: Echo) -> dict[str, Any]:
    """Run the desk's agent command to its end; the claim is renewed meanwhile. Returns its exit and tail."""
    run_id = uuid.uuid4().hex[:12]
    run.prompt_file.parent.mkdir(parents=True, exist_ok=True)
    run.prompt_file.write_text(run.prompt, encoding="utf-8")
    values = {"prompt": run.prompt, "prompt_file": str(run.prompt_file), "brief": run.brief.id,
              "title": run.brief.title, "worktree": str(run.worktree)}
    argv = [fill(part, values) for part in spec.command]
    if argv[0] == "python":
        argv[0] = sys.executable  # the scripted agent runs on this interpreter
    steps = StepServer(git.url, git.cache.parent, run.brief.id, spec.name, run.epoch, run_id, run.known)
    env = agent_env(spec.env_allow, {
        "ASSAY_FORGE": strip_credentials(git.url), "ASSAY_BRIEF": run.brief.id, "ASSAY_DESK": spec.name,
        "ASSAY_EPOCH": str(run.epoch), "ASSAY_RUN": run_id, "ASSAY_ATTEMPT": str(run.attempt),
        "ASSAY_PROMPT_FILE": str(run.prompt_file), "ASSAY_SOCKET": str(steps.path)})
    echo(f"{spec.name}: {run.brief.id} agent attempt {run.attempt} (run {run_id})")
    started = time.monotonic()
    heartbeat = Heartbeat(git, spec, run.brief.id, run.epoch, echo)
    tail = ""
    try:
        proc = subprocess.Popen(argv, cwd=run.worktree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, preexec_fn=_DIE_WITH_PARENT)
        heartbeat.start(proc)  # after the fork: no thread runs while the child is set up
        steps.start()  # the agent's steps, served by this desk (it listened before the fork)
        assert proc.stdout is not None
        for line in proc.stdout:
            echo(f"  {run.brief.id} | {line.rstrip()}")
            tail = (tail + line)[-TAIL:]
        code = proc.wait()
    except OSError as exc:
        code, tail = 127, f"cannot start the agent {argv[0]!r}: {exc.strerror}"
        echo(f"{spec.name}: {tail}")
    finally:
        heartbeat.stop()
        steps.stop()
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": tail,
            "run": run_id}


class Heartbeat:
    """Renews the lease every `heartbeat_s` while the agent works, on a port of its own (the desk's is busy).

    Fenced (any Conflict): the claim is gone, so the agent is killed. Other failures are retried until a
    whole lease has passed without a renewal; then the agent is killed too, as its claim may expire.
    """

    def __init__(self, git: ForgeGit, spec: DeskSpec, brief: str, epoch: int, echo: Echo) -> None:
        self.url, self.cache_root = git.url, git.cache.parent
        self.spec, self.brief, self.epoch, self.echo = spec, brief, epoch, echo
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, agent: subprocess.Popen[str]) -> None:
        self._thread = threading.Thread(target=self._beat, args=(agent,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()

    def _beat(self, agent: subprocess.Popen[str]) -> None:
        claims = Claims(ForgeGit(self.url, self.cache_root))
        last_ok = time.monotonic()
        try:
            while not self._stop.wait(self.spec.heartbeat_s):
                why = self._renew(claims, last_ok)
                if why is None:
                    last_ok = time.monotonic()
                    continue
                if why:
                    self.echo(f"{self.spec.name}: stopping the agent on {self.brief}: {why}")
                    if agent.poll() is None:
                        agent.kill()  # a desk that lost its claim stops working on its own
                    return
        finally:
            claims.git.close()

    def _renew(self, claims: Claims, last_ok: float) -> str | None:
        """None if renewed; "" to try again later; else why the agent must stop."""
        try:
            claims.renew(self.brief, self.spec.name, epoch=self.epoch)
            return None
        except Conflict as exc:  # Fenced, or the claim moved to a state this desk may not renew
            return f"fenced: {exc.message}"
        except AssayError as exc:  # the forge is away or busy: the lease rule decides
            if time.monotonic() - last_ok < self.spec.lease_s:
                self.echo(f"{self.spec.name}: heartbeat for {self.brief} failed, will retry: {exc.message}")
                return ""
            return f"no renewal for a whole lease ({self.spec.lease_s}s): {exc.message}"


def fill(template: str, values: dict[str, str]) -> str:
    """Substitute {placeholders} in one pass: text brought in by a value is never expanded again."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def _death_signal() -> Callable[[], None] | None:
    """A preexec function making the agent die with its desk (Linux), set up before any fork."""
    try:
        import ctypes
        import signal

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_pdeathsig() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a killed desk leaves no agent working unfenced
    return set_pdeathsig


_DIE_WITH_PARENT = _death_signal()
