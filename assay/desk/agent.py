"""The agent process: started with the brief as its prompt, an allow-listed environment and no forge
credentials, its lease renewed by a heartbeat while it works, its steps served by the desk over a local
socket (`stepserver.py`), and killed when its desk loses the claim."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.core.briefs import Brief
from assay.core.claims import Claims
from assay.core.credentials import strip_credentials
from assay.core.deskspec import DeskSpec
from assay.core.envs import agent_env
from assay.core.journal import JournalLog
from assay.desk.effects import probe_runner
from assay.desk.stepclient import dies_with_parent
from assay.desk.stepserver import StepServer
from assay.errors import AgentCannotStart, AssayError, Conflict

Echo = Callable[[str], None]
TAIL = 4000
STOP_GRACE_S = 10.0  # an agent stopped for its time limit gets this long after SIGTERM before SIGKILL


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
    assay_bin: Path | None = None  # the `assay` the agent calls, by absolute path (`assay_command`)


def assay_command(state_dir: Path) -> Path:
    """An `assay` the agent reaches whatever shell it uses (a login shell resets PATH): a small script at an
    absolute path that runs this very Assay, on this interpreter."""
    folder = state_dir / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "assay"
    text = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m assay \"$@\"\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        partial = folder / f".assay.{os.getpid()}"
        partial.write_text(text, encoding="utf-8")
        partial.chmod(0o755)
        partial.replace(path)  # whole or not at all: another desk may be running it
    return path


def agent_argv(spec: DeskSpec, values: dict[str, str]) -> list[str]:
    argv = [fill(part, values) for part in spec.command]
    if argv[0] == "python":
        argv[0] = sys.executable  # the scripted agent runs on this interpreter
    return argv


def preflight(spec: DeskSpec, env: dict[str, str] | None = None) -> str:
    """Before a desk claims anything: its agent command can be found and run. Returns its path."""
    command = spec.command[0]
    if command == "python":
        return sys.executable
    path = (env if env is not None else agent_env(spec.env_allow, {})).get("PATH", os.defpath)
    found = shutil.which(command, path=path)
    if found is None:
        why = "it is not a file that can be run" if os.sep in command else f"it is not on PATH ({path})"
        raise AgentCannotStart(spec.name, command, why, spec.install)
    return found


def run_agent(claims: Claims, spec: DeskSpec, run: AgentRun, echo: Echo) -> dict[str, Any]:
    """Run the desk's agent command to its end, or to its time limit; the claim is renewed meanwhile.

    Returns its exit code, output tail and whether it timed out. An agent that cannot start (no such command,
    exit 126 or 127) raises AgentCannotStart: that is not an attempt at the work.
    """
    run_id = uuid.uuid4().hex[:12]
    run.prompt_file.parent.mkdir(parents=True, exist_ok=True)
    run.prompt_file.write_text(run.prompt, encoding="utf-8")
    values = {"prompt": run.prompt, "prompt_file": str(run.prompt_file), "brief": run.brief.id,
              "title": run.brief.title, "worktree": str(run.worktree)}
    argv = agent_argv(spec, values)
    env = agent_env(spec.env_allow, {}, extra={**dict(spec.env), **dict(run.brief.env)})
    steps = StepServer(claims.spare, run.brief.id, spec.name, run.epoch, run_id, run.known,
                       probe_runner=probe_runner(run.worktree, env))  # it sees `env` as the context fills it in
    context = {"ASSAY_FORGE": strip_credentials(claims.git.url), "ASSAY_BRIEF": run.brief.id, "ASSAY_DESK": spec.name,
               "ASSAY_EPOCH": str(run.epoch), "ASSAY_RUN": run_id, "ASSAY_ATTEMPT": str(run.attempt),
               "ASSAY_PROMPT_FILE": str(run.prompt_file), "ASSAY_SOCKET": str(steps.path),
               **_git_identity(spec.name)}
    if run.assay_bin is not None:
        context["ASSAY_BIN"] = str(run.assay_bin)
        context["PATH"] = os.pathsep.join([str(run.assay_bin.parent), env.get("PATH", os.defpath)])
    env.update(context)
    echo(f"{spec.name}: {run.brief.id} agent attempt {run.attempt} (run {run_id})")
    started = time.monotonic()
    heartbeat = Heartbeat(claims, spec, run.brief.id, run.epoch, echo)
    out = _Output(run.brief.id, echo)
    timed_out = threading.Event()
    try:
        try:
            proc = subprocess.Popen(argv, cwd=run.worktree, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                    preexec_fn=_DIE_WITH_PARENT)
        except OSError as exc:
            raise AgentCannotStart(spec.name, argv[0], exc.strerror or str(exc), spec.install) from None
        heartbeat.start(proc)  # after the fork: no thread runs while the child is set up
        steps.start()  # the agent's steps, served by this desk (it listened before the fork)
        timer = threading.Timer(spec.timeout_s, _stop_for_time, args=(proc, timed_out))
        timer.daemon = True
        timer.start()
        out.start(proc)
        code = proc.wait()
        timer.cancel()
        out.finish()
    finally:
        heartbeat.stop()
        for line in steps.stop():
            echo(f"{spec.name}: {run.brief.id}: {line}")
    if code in (126, 127) and not timed_out.is_set():
        raise AgentCannotStart(spec.name, argv[0], f"it exited {code}: {out.tail.strip()[-300:]}", spec.install)
    if timed_out.is_set():
        echo(f"{spec.name}: {run.brief.id} agent stopped at its time limit ({spec.timeout_s}s)")
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": out.tail,
            "run": run_id, "timed_out": timed_out.is_set()}


def _git_identity(desk: str) -> dict[str, str]:
    """Who commits, should the agent commit (git asks, and some agents write a made-up name into the repository's
    shared config when it has none): the desk. Through GIT_CONFIG_*, which the desk's own environment never
    passes on."""
    return {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": desk,
            "GIT_CONFIG_KEY_1": "user.email", "GIT_CONFIG_VALUE_1": f"{desk}@assay.invalid"}


def _stop_for_time(proc: subprocess.Popen[str], timed_out: threading.Event) -> None:
    """The agent's time is up: SIGTERM (the CLIs stop their own tool processes then), SIGKILL after a grace."""
    timed_out.set()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()


class _Output:
    """The agent's output, echoed line by line as it comes, its tail kept. Read on a thread of its own, so that a
    process the agent left behind holding the pipe open cannot keep the desk waiting after the agent ended."""

    def __init__(self, brief: str, echo: Echo) -> None:
        self.brief, self.echo = brief, echo
        self.tail = ""
        self._thread: threading.Thread | None = None

    def start(self, proc: subprocess.Popen[str]) -> None:
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.echo(f"  {self.brief} | {line.rstrip()}")
            self.tail = (self.tail + line)[-TAIL:]

    def finish(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=STOP_GRACE_S)


class Heartbeat:
    """Renews the lease every `heartbeat_s` while the agent works, on a port of its own (the desk's is busy).

    Fenced (any Conflict): the claim is gone, so the agent is killed. Other failures are retried until a
    whole lease has passed without a renewal; then the agent is killed too, as its claim may expire.
    """

    def __init__(self, claims: Claims, spec: DeskSpec, brief: str, epoch: int, echo: Echo) -> None:
        self.claims = claims  # the desk's: each beat renews on a spare of it
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
        claims = self.claims.spare()
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


def protect_environment() -> None:
    """Make this process non-dumpable (Linux): a process of the same user, an agent or anything it runs, can then
    read neither its environment (where the forge token is) nor its memory through /proc or ptrace."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(4, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


_DIE_WITH_PARENT = dies_with_parent()  # the agent dies with its desk: a killed desk leaves no agent working unfenced
