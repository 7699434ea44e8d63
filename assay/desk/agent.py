"""The agent process: started with the brief as its prompt, an allow-listed environment and no forge
credentials, its lease renewed by a heartbeat while it works, its steps served by the desk over a local
socket (`stepserver.py`), and killed when its desk loses the claim."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from assay.core import lives, stops
from assay.core.briefs import Brief
from assay.core.claims import Claims, new_holder
from assay.core.crash import crash_point
from assay.core.credentials import strip_credentials
from assay.core.deskspec import DeskSpec
from assay.core.envs import agent_env
from assay.core.forge.base import Thread
from assay.core.journal import Journal, JournalLog
from assay.core.records.recordtype import dataclass
from assay.core.wip import Recorder
from assay.desk.effects import Hooks, probe_runner
from assay.desk.hostbeat import Member
from assay.desk.isolation import Isolated
from assay.desk.limits import MODEL_TROUBLE, STOP_GRACE_S, Limits, judge
from assay.desk.mcpserver import registration as mcp_registration
from assay.desk.sessions import MAX_BYTES, Saved, Transcript, desk_values, known_secrets, unfindable
from assay.desk.sessions import NAME as SESSION_CHECKPOINT
from assay.desk.stepclient import dies_with_parent
from assay.desk.stepserver import StepServer
from assay.errors import AgentCannotStart, AssayError, ConfigInvalid, Conflict, ForgeError

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
    assay_bin: Path | None = None  # the `assay` the agent calls, by absolute path (`assay_command`)
    checkpoint: Saved | None = None  # the round's newest agent-session checkpoint, to resume (`sessions.py`)
    steering: tuple[int, ...] = ()  # the seqs of the steering entries `prompt` holds
    state: Path | None = None  # this desk's own folder, `{state}` in its `env:` (a CLI's own home, say)
    threads: tuple[Thread, ...] = ()  # the review threads the prompt lists: what `assay step answer` may name
    step_key: str = ""  # the agent step's idempotency key: the same for a run resumed after a crash, new per attempt


def assay_command(state_dir: Path) -> Path:
    """An `assay` the agent reaches whatever shell it uses (a login shell resets PATH): a small script at an
    absolute path that runs this very Assay, on this interpreter."""
    folder = state_dir / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "assay"
    text = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m assay \"$@\"\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        partial = folder / f".assay.{lives.own_tag()}"
        partial.write_text(text, encoding="utf-8")
        partial.chmod(0o755)
        partial.replace(path)  # whole or not at all: another desk may be running it
    return path


def agent_argv(spec: DeskSpec, values: dict[str, str], session_args: Sequence[str] = ()) -> list[str]:
    """The agent's command line: placeholders filled in, and the session's arguments where `{session_args}`
    stands (after the rest when it stands nowhere)."""
    argv: list[str] = []
    for part in spec.command:
        argv += list(session_args) if part == "{session_args}" else [fill(part, values)]
    if "{session_args}" not in spec.command:
        argv += session_args
    if argv[0] == "python":
        argv[0] = sys.executable  # the scripted agent runs on this interpreter
    return argv


def preflight(spec: DeskSpec, env: dict[str, str] | None = None) -> str:
    """Before a desk claims anything: its agent command can be found and run, and its `agent.session` finds the
    transcripts it names (else the conversation would never be checkpointed: exit 2). Returns its path."""
    if spec.session is not None:
        values = {k: v.replace("{home}", os.environ.get("HOME", "")).replace("{state}", "/state") for k, v in spec.env}
        why = unfindable(spec.session, env if env is not None else agent_env(spec.env_allow, {}, extra=values))
        if why is not None:
            where = f"desks/{spec.name}.yaml" + (f":{spec.session.line}" if spec.session.line else "")
            raise ConfigInvalid(f"{where}: {why}: desk {spec.name!r} would never find its agent's sessions, so "
                                "never checkpoint or resume its conversation",
                                hint="set the variable in the desk's `env:` (desks/codex.yaml as `assay init` writes "
                                     "it: CODEX_HOME: \"{state}/codex\") or pass it in `env_allow`; or drop "
                                     "`agent.session`")
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
    exit 126 or 127) raises AgentCannotStart, one that went idle or whose model failed it AgentCannotWork
    (`limits.py`): neither is an attempt at the work. Steering journaled while it runs is handed to it before
    this returns (`_converse`). With `agent.session`, the
    run resumes the round's newest checkpoint and its conversation is checkpointed as it goes
    (`sessions.py`); a resume that fails is journaled and the run starts again fresh.
    """
    own = desk_values(spec.env, run.state, os.environ) if run.state is not None else dict(spec.env)
    env = agent_env(spec.env_allow, {}, extra={**own, **dict(run.brief.env)})
    files = Recorder(run.brief.id, run.worktree, known_secrets(dict(os.environ), claims.git.url),
                     lambda text: echo(f"{spec.name}: {run.brief.id}: {text}"), spec.name)
    if spec.protocol == "acp":
        return _run_acp(claims, spec, run, echo, env, files)
    saver = Saver(claims, spec, run, env, echo, run.checkpoint, files) if spec.session else None
    result = _run_agent(claims, spec, run, echo, env, saver, files)
    if saver is not None and saver.resumed is not None and not saver.grew():
        saver.failed(f"the resumed agent exited {result['exit_code']} without adding to the conversation")
        result = _run_agent(claims, spec, run, echo, env, Saver(claims, spec, run, env, echo, None, files), files)
    return result


def _run_agent(claims: Claims, spec: DeskSpec, run: AgentRun, echo: Echo, env: dict[str, str],
               saver: Saver | None, files: Recorder) -> dict[str, Any]:
    run_id = saver.run_id if saver is not None else uuid.uuid4().hex[:12]
    run.prompt_file.parent.mkdir(parents=True, exist_ok=True)
    assay_bin = str(run.assay_bin) if run.assay_bin is not None else "assay"
    values = _placeholders(run, assay_bin)
    steps = _step_server(claims, spec, run, run_id, env, files)  # sees `env` filled in
    env.update(_context(claims, spec, run, run_id, steps, env))
    # the agent's own variables, by name, for an MCP server its CLI starts with only the names it is given (Codex)
    values["env_names"] = json.dumps(sorted(env))
    argv = agent_argv(spec, values, saver.arguments() if saver is not None else ())
    echo(f"{spec.name}: {run.brief.id} agent attempt {run.attempt} (run {run_id})")
    started = time.monotonic()
    steering = Steering(claims, spec, run, run_id, echo)
    heartbeat = Heartbeat(claims, spec, run.brief.id, run.epoch, echo, saver.save if saver is not None else None,
                          steering.at_boundary(saver) if saver is not None else None, lambda: steps.progress,
                          host_member(spec, run))
    heartbeat.at_boundary = saver.transcript.at_boundary if saver is not None else None
    heartbeat.moved = saver.transcript.turned if saver is not None else None

    def on_turn(event: str) -> str:
        """A turn ended (the CLI's hook, or notify program): checkpoint now; and to a hook that can hand the model
        text (`HOOK_STEERS`), the steering it has not been handed, once."""
        heartbeat.turn(event)
        return steering.offer() if saver is not None and event in HOOK_STEERS else ""

    steps.on_turn = on_turn
    out = _Output(run.brief.id, echo)
    watch = Limits(spec, lambda: (out.lines, steps.touched, saver.transcript.size() if saver else 0), steps.busy)
    start = partial(_start_agent, spec, run, env, watch)
    try:
        proc = heartbeat.agent = start(argv, run.prompt)
        heartbeat.start()  # after the fork: no thread runs while the child is set up
        steps.start()  # the agent's steps, served by this desk (it listened before the fork)
        watch.start()
        out.start(proc)
        code = _converse(proc, run, spec, values, saver, steering, heartbeat, watch, out, start)
        watch.stop()
    finally:
        heartbeat.stop()
        watch.stop()
        if saver is not None:
            saver.last()  # the conversation as the agent left it, whatever ended it
        for line in steps.stop():
            echo(f"{spec.name}: {run.brief.id}: {line}")
    judge(spec, code, watch.why, bool(heartbeat.fenced), out.tail, argv[0], env)
    if watch.why == "time":
        echo(f"{spec.name}: {run.brief.id} agent stopped at its time limit ({spec.timeout_s}s)")
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": out.tail,
            "run": run_id, "timed_out": watch.why == "time"}


def _placeholders(run: AgentRun, assay_bin: str) -> dict[str, str]:
    """What the agent's command line may name (`{prompt}`, `{worktree}`, …), but `env_names`, known once its
    environment is."""
    return {"prompt": run.prompt, "prompt_file": str(run.prompt_file), "brief": run.brief.id,
            "title": run.brief.title, "worktree": str(run.worktree), "assay_bin": assay_bin,
            "mcp_config": mcp_registration(assay_bin),  # `assay mcp` for the agent: Claude Code's --mcp-config
            **turn_events(assay_bin)}  # how its CLI tells the desk a turn ended: hooks, a notify program


def _start_agent(spec: DeskSpec, run: AgentRun, env: dict[str, str], watch: Limits, argv: list[str],
                 text: str) -> subprocess.Popen[str]:
    """The agent CLI started, isolated, handed `text` by its route; each start (a resumed run too) reads what it
    is handed now."""
    run.prompt_file.write_text(text, encoding="utf-8")  # each start reads what it is handed now, whatever the route
    try:
        proc = Isolated(argv, cwd=run.worktree, env=env,
                        stdin=subprocess.PIPE if spec.prompt == "stdin" else subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                        preexec_fn=dies_with_parent())  # the agent dies with its desk
    except OSError as exc:
        raise AgentCannotStart(spec.name, argv[0], exc.strerror or str(exc), spec.install) from None
    if proc.stdin is not None:
        lives.thread(_feed, proc.stdin, text).start()
    watch.agent = proc
    return proc


def _context(claims: Claims, spec: DeskSpec, run: AgentRun, run_id: str, steps: StepServer,
             env: dict[str, str]) -> dict[str, str]:
    """What every agent's environment (`env`, before) gains: the brief's context, the desk's socket, its git
    identity, and the `assay` it calls first on PATH."""
    context = {"ASSAY_FORGE": strip_credentials(claims.git.url), "ASSAY_BRIEF": run.brief.id, "ASSAY_DESK": spec.name,
               "ASSAY_EPOCH": str(run.epoch), "ASSAY_RUN": run_id, "ASSAY_ATTEMPT": str(run.attempt),
               "ASSAY_PROMPT_FILE": str(run.prompt_file), "ASSAY_SOCKET": str(steps.path),
               **_git_identity(spec.name)}
    if run.assay_bin is not None:
        context["ASSAY_BIN"] = str(run.assay_bin)
        context["PATH"] = os.pathsep.join([str(run.assay_bin.parent), env.get("PATH", os.defpath)])
    return context


def _step_server(claims: Claims, spec: DeskSpec, run: AgentRun, run_id: str, env: dict[str, str],
                 files: Recorder) -> StepServer:
    """The desk's side of the agent's steps for this run: its hooks, the brief as the agent may ask for it, the
    review threads its prompt lists, and its worktree (`files`), a snapshot of which each push of results carries."""
    hooks = Hooks(spec.before_step, spec.after_step, run.worktree, env) if spec.before_step or spec.after_step \
        else None
    about = {"id": run.brief.id, "title": run.brief.title, "body": run.brief.body, "labels": list(run.brief.labels),
             "depends_on": list(run.brief.depends_on), "verify": [{"id": r.id, "run": r.run} for r in run.brief.verify],
             "epoch": run.epoch, "attempt": run.attempt}
    steps = StepServer(claims.spare, run.brief.id, spec.name, run.epoch, run_id, run.known,
                       probe_runner=probe_runner(run.worktree, env), hooks=hooks, about=about, recorder=files)
    steps.threads = {t.id: t for t in run.threads}
    return steps


def _run_acp(claims: Claims, spec: DeskSpec, run: AgentRun, echo: Echo, env: dict[str, str],
             files: Recorder) -> dict[str, Any]:
    """An ACP adapter (`desk/acp.py`), isolated like any agent: the brief's prompt as its first turn, steering
    journaled meanwhile as the next turns, each tool call journaled as a step of this run. Ended as a unit (its
    PID namespace) when the turns are done, at its time limit, or when the claim is lost.

    With `agent.session` (where the adapter keeps its transcript), the conversation is checkpointed as each prompt
    returns and at each turn boundary the transcript reaches, and the round's newest checkpoint is written back
    and loaded (`session/load`) by the next run, on any machine; a load the adapter refuses is journaled and the
    run opens a new session.

    Long: the adapter's life in the order it happens (started, watched, prompted turn after turn, torn down
    in an order that matters: its namespace killed before its commands are stopped), read as one story."""
    from assay.core.lives import life_of
    from assay.desk import acp

    saver = Saver(claims, spec, run, env, echo, run.checkpoint, files) if spec.session else None
    run_id = saver.run_id if saver is not None else uuid.uuid4().hex[:12]
    run.prompt_file.parent.mkdir(parents=True, exist_ok=True)
    run.prompt_file.write_text(run.prompt, encoding="utf-8")
    steps = _step_server(claims, spec, run, run_id, env, files)
    env.update(_context(claims, spec, run, run_id, steps, env))
    argv = agent_argv(spec, {"worktree": str(run.worktree), "brief": run.brief.id, "title": run.brief.title,
                             "prompt_file": str(run.prompt_file)})
    echo(f"{spec.name}: {run.brief.id} agent attempt {run.attempt} over ACP (run {run_id})")
    started = time.monotonic()
    try:
        proc = Isolated(argv, cwd=run.worktree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, preexec_fn=dies_with_parent())
    except OSError as exc:
        steps.stop()  # its socket and folder
        raise AgentCannotStart(spec.name, argv[0], exc.strerror or str(exc), spec.install) from None
    out = _Output(run.brief.id, echo)
    out.start(proc, proc.stderr)  # its stderr: the adapter's own words (its stdout is the protocol's)
    writer = life_of(proc.pid)

    def journal_step(name: str, policy: str, given: dict[str, Any],
                     effect: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        return steps.tool_step(name, policy, given, effect, writer)

    agent = acp.AcpAgent(proc, journal_step, steps.observe, run.brief.tools + spec.tools,  # the brief's rules first
                         lambda line: echo(f"{spec.name}: {run.brief.id}: {line}"), run.step_key,
                         str(run.assay_bin or ""), run.worktree, env)
    heartbeat = Heartbeat(claims, spec, run.brief.id, run.epoch, echo, saver.save if saver is not None else None,
                          None, lambda: steps.progress, host_member(spec, run))
    heartbeat.agent = proc
    if saver is not None:  # a checkpoint whenever the transcript reaches a turn boundary, inside a long prompt too
        heartbeat.at_boundary = lambda: saver.transcript.at_boundary()
        heartbeat.moved = lambda: saver.transcript.turned()
    watch = Limits(spec, lambda: (agent.signs, out.lines, steps.touched,
                                  saver.transcript.size() if saver is not None else 0),
                   lambda: steps.busy() or agent.working())
    watch.agent = proc
    steering = Steering(claims, spec, run, run_id, echo)
    reason, code = "", 1
    heartbeat.start()
    steps.start()
    watch.start()
    try:
        load = saver.resumed.session if saver is not None and saver.resumed is not None else ""
        if not agent.start(str(run.worktree), spec.mode, load, lambda why: _unloaded(saver, why)) and saver:
            saver.adopt(agent.session)
        text, handed = run.prompt, list(run.steering)
        while True:
            size, said = saver.transcript.size() if saver is not None else 0, len(agent.chunks)
            reason = agent.prompt(text)
            steering.delivered(handed)
            _checkpoint(saver, spec, run, echo, size, "".join(agent.chunks[said:]))
            told = steering.news(steering.claims) if reason == "end_turn" and not watch.why and not heartbeat.fenced \
                else []  # read on the desk's own port: this thread's, its agent waiting on it
            if not told:
                break
            steering.told |= {seq for seq, _ in told}
            text, handed = steering_prompt(told), [seq for seq, _ in told]
        code = acp.exit_code(reason)
    except acp.AcpError as exc:
        if not watch.why and not heartbeat.fenced:
            echo(f"{spec.name}: {run.brief.id}: {exc.message}")
    finally:
        ended = proc.poll()  # the adapter ended on its own (a command that could not start: 127)
        proc.kill()  # the namespace's init: every process of the adapter's ends with it, tool commands too
        proc.wait()
        agent.stop()  # and every command it ran through the desk; none starts after this
        watch.stop()
        heartbeat.stop()
        out.finish()
        if saver is not None:
            saver.last()  # the conversation as the adapter left it, whatever ended it
        for line in steps.stop():
            echo(f"{spec.name}: {run.brief.id}: {line}")
    if watch.why or heartbeat.fenced:
        code = 128 + 9
    elif not reason and ended:
        code = ended
    tail = ("".join(agent.chunks)[-TAIL:] + "\n" + out.tail)[-TAIL:]
    judge(spec, code, watch.why, bool(heartbeat.fenced), tail, argv[0], env)
    if watch.why == "time":
        echo(f"{spec.name}: {run.brief.id} agent stopped at its time limit ({spec.timeout_s}s)")
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": tail,
            "run": run_id, "timed_out": watch.why == "time", "stop_reason": reason}


def host_member(spec: DeskSpec, run: AgentRun) -> Member | None:
    """This run's place in the host's heartbeat: the forge's state folder's `beats/` (`run.state` is its
    `desks/<name>`), shared by every desk process here on that forge."""
    if run.state is None:
        return None
    return Member(run.state.parent.parent / "beats", run.brief.id, spec.name, run.epoch, new_holder(spec.name),
                  spec.heartbeat_s)


def _unloaded(saver: Saver | None, why: str) -> None:
    """The adapter would not load the checkpoint's session: journaled (never tried again), and a new one opened."""
    if saver is not None and saver.resumed is not None:
        saver.failed(f"the agent's adapter did not load it: {why}")
        saver.resumed = None


def _checkpoint(saver: Saver | None, spec: DeskSpec, run: AgentRun, echo: Echo, before: int, said: str) -> None:
    """A prompt returned: the conversation is between turns, so it is checkpointed now (with a renewal of the
    claim), before the next prompt moves it on; once the adapter has written the turn to its transcript (grown
    since the prompt was sent, at a boundary, holding the agent's last words), up to `TURN_SETTLE_S`. A failure
    is said: the heartbeat's next look, or the run's last checkpoint, saves it."""
    if saver is None:
        return
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    last = lines[-1][-60:] if lines else ""
    settle = time.monotonic() + TURN_SETTLE_S
    while time.monotonic() < settle and not (saver.transcript.size() > before and saver.transcript.at_boundary()
                                              and (not last or saver.transcript.holds(last))):
        time.sleep(0.05)
    claims = saver.claims.spare()
    try:
        saver.save(claims)
    except AssayError as exc:
        echo(f"{spec.name}: {run.brief.id}: the checkpoint at the turn's end was not written: {exc.message}")
    finally:
        claims.git.close()


def _converse(proc: subprocess.Popen[str], run: AgentRun, spec: DeskSpec, values: dict[str, str],
              saver: Saver | None, steering: Steering, heartbeat: Heartbeat, watch: Limits, out: _Output,
              start: Callable[[list[str], str], subprocess.Popen[str]]) -> int:
    """Wait for the agent; while steering it has not taken is journaled, run it again with that steering (resuming
    its conversation where there is one), so that no steering is left behind when the run ends. Steering counts as
    delivered once a run that was handed it took it: it exited 0, or its conversation grew."""
    handed, size = list(run.steering), saver.transcript.restored_size if saver is not None else 0
    while True:
        code = stops.wait_process(proc)
        out.finish()
        if saver is not None:
            saver.last()
        if code == 0 or (saver is not None and saver.transcript.size() > size):
            steering.delivered(handed)
        if saver is not None:
            steering.confirm(saver.transcript)  # what hooks handed over counts once the conversation holds it
        if watch.why or heartbeat.fenced:
            return code
        # read on the desk's own port: the agent has ended, and this thread is the one that uses it
        told, heartbeat.steered = heartbeat.steered or (steering.news(steering.claims) if code == 0 else []), []
        if not told:
            return code
        if saver is not None:
            text, resume = steering_prompt(told), saver.transcript.arguments(True)
            size = saver.transcript.size()
        else:  # no conversation to go on with: the whole prompt again, with the new steering
            text, resume = run.prompt.rstrip("\n") + "\n" + "\n".join(t for _, t in told) + "\n", []
        handed = [seq for seq, _ in told]
        steering.told |= set(handed)  # handed now: not news to the heartbeat while this run takes it
        proc = heartbeat.agent = start(agent_argv(spec, {**values, "prompt": text}, resume), text)
        out.start(proc)


def _feed(stdin: Any, text: str) -> None:
    """Hand the prompt to an agent that reads it from stdin, then close it (the CLIs wait for its end)."""
    try:
        stdin.write(text)
        stdin.close()
    except (OSError, ValueError):
        pass  # the agent ended, or closed its stdin: what it read is what it got


def _git_identity(desk: str) -> dict[str, str]:
    """Who commits, should the agent commit (git asks, and some agents write a made-up name into the repository's
    shared config when it has none): the desk. Through GIT_CONFIG_*, which the desk's own environment never
    passes on."""
    return {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": desk,
            "GIT_CONFIG_KEY_1": "user.email", "GIT_CONFIG_VALUE_1": f"{desk}@assay.invalid"}


def steering_prompt(told: Sequence[tuple[int, str]]) -> str:
    """The next message of a conversation resumed to pass on steering."""
    return "\n\n".join(["## Steering, from a person, while you work", *(text for _, text in told),
                         "Take it into account, then carry on with the brief."]) + "\n"


class _Output:
    """The agent's output, echoed line by line as it comes, its tail kept. Read on a thread of its own, so that a
    process the agent left behind holding the pipe open cannot keep the desk waiting after the agent ended."""

    def __init__(self, brief: str, echo: Echo) -> None:
        self.brief, self.echo = brief, echo
        self.tail = ""
        self.lines = 0  # how many it said, but for its model's troubles: a sign of work
        self._thread: threading.Thread | None = None

    def start(self, proc: subprocess.Popen[str], stream: Any = None) -> None:
        """Read `proc`'s output (or `stream`: an ACP adapter's stderr, in bytes) on a thread of its own."""
        self._thread = lives.thread(self._read, proc, stream)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str], stream: Any = None) -> None:
        assert proc.stdout is not None
        for raw in stream if stream is not None else proc.stdout:
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            self.echo(f"  {self.brief} | {line.rstrip()}")
            self.tail = (self.tail + line)[-TAIL:]
            if not any(pattern.search(line) for _, pattern, _ in MODEL_TROUBLE):
                self.lines += 1  # a CLI retrying its model ("Reconnecting...") is not working: no sign of work

    def finish(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=STOP_GRACE_S)


def turn_events(assay_bin: str) -> dict[str, str]:
    """The placeholders a preset uses to have its CLI tell the desk each turn's end (`assay step turn`):
    `{turn_hooks}`, Claude Code's `--settings` JSON (its `PostToolUse`, `Stop` and `SubagentStop` hooks), and
    `{turn_notify}`, Codex's `notify` program (`-c notify=…`)."""
    def hook(event: str) -> list[dict[str, Any]]:
        return [{"hooks": [{"type": "command", "command": f"{shlex.quote(assay_bin)} step turn {event}",
                            "timeout": 30}]}]
    hooks = {event: hook(event) for event in ("PostToolUse", "Stop", "SubagentStop")}
    return {"turn_hooks": json.dumps({"hooks": hooks}), "turn_notify": json.dumps([assay_bin, "step", "turn"])}


TURN_SETTLE_S = 2.0  # after a turn event, how long the desk waits for the CLI to finish writing that turn
WATCH_S = 0.5  # how often the desk looks at the transcript for a turn that ended (a CLI without hooks: Codex's)
HOOK_STEERS = ("PostToolUse", "Stop")  # Claude Code's hooks whose answer hands the model text (`step turn`)


class Heartbeat:
    """Renews the lease every `heartbeat_s` while the agent works, on a port of its own (the desk's is busy), and
    checkpoints the conversation at each turn boundary its CLI reports (`turn`), passing on steering there.

    A checkpoint renews the claim in its push, so a beat that follows one within `heartbeat_s` is not needed.
    Fenced (any Conflict): the claim is gone, so the agent is killed. Other failures are retried until a
    whole lease has passed without a renewal; then the agent is killed too, as its claim may expire.
    """

    def __init__(self, claims: Claims, spec: DeskSpec, brief: str, epoch: int, echo: Echo,
                 save: Callable[[Claims], bool] | None = None,
                 steering: Callable[[Claims], list[tuple[int, str]]] | None = None,
                 progress: Callable[[], str] | None = None, member: Member | None = None) -> None:
        self.claims = claims  # the desk's: each beat renews on a spare of it
        self.member = member  # its place in the host's heartbeat (`hostbeat.py`): one push renews every desk's
        self._due_in: float | None = None  # when the host's batch says the next beat is due (seconds from now)
        self.spec, self.brief, self.epoch, self.echo = spec, brief, epoch, echo
        self.save = save  # journals a checkpoint (a renewal too) if the conversation changed; False if not
        self.steering = steering  # new steering the agent can take now (at a turn boundary), as (seq, text)
        self.agent: subprocess.Popen[str] | None = None  # the agent process now (a new one after steering)
        self.steered: list[tuple[int, str]] = []  # steering for which this heartbeat stopped the agent
        self.progress = progress  # what the agent last said of its long step ("" when none)
        self.published = ""  # the progress the last renewal carried
        self.fenced = ""  # why this heartbeat killed the agent: its claim is lost, or may be
        self.at_boundary: Callable[[], bool] | None = None  # whether the conversation is between turns now
        self.moved: Callable[[], bool] | None = None  # whether it reached a new turn boundary since the last look
        self._stop = threading.Event()
        self._turned = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.member is not None:
            with contextlib.suppress(OSError):
                self.member.check_in()
        self._thread = lives.thread(self._beat)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._turned.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()
        if self.member is not None:
            self.member.leave()

    def turn(self, event: str) -> None:
        """The agent's CLI says a turn ended (from the step server's thread): checkpoint and look for steering now.
        Turns that end while one is being saved are saved together."""
        self._turned.set()

    def _beat(self) -> None:
        claims = self.claims.spare()
        last_ok = due = time.monotonic()
        due += self.spec.heartbeat_s
        try:
            while not self._stop.is_set():
                wait = max(0.0, due - time.monotonic())
                turned = self._turned.wait(wait if self.moved is None else min(wait, WATCH_S))
                if self._stop.is_set():
                    return
                if turned:
                    self._turned.clear()
                elif self.moved is not None and time.monotonic() < due:
                    turned = self.moved()  # the transcript says a turn ended: an event of the CLI's own making
                    if not turned:
                        continue
                if turned:
                    why = self._at_turn(claims, last_ok)
                    if why is None:  # a checkpoint was pushed, with a renewal of the claim
                        last_ok = time.monotonic()
                        due = last_ok + self.spec.heartbeat_s
                        continue
                    if why:
                        self._fence(why)
                        return
                    if time.monotonic() < due:
                        continue
                why = self._renew(claims, last_ok)
                due = time.monotonic() + (self._due_in if self._due_in is not None else self.spec.heartbeat_s)
                if why is None:
                    last_ok = time.monotonic()
                    self._pass_on(claims)
                elif why:
                    self._fence(why)
                    return
        finally:
            claims.git.close()

    def _fence(self, why: str) -> None:
        self.fenced = why
        self.echo(f"{self.spec.name}: stopping the agent on {self.brief}: {why}")
        agent = self.agent
        if agent is not None and agent.poll() is None:
            agent.kill()  # a desk that lost its claim stops working on its own

    def _at_turn(self, claims: Claims, last_ok: float) -> str | None:
        """At a turn's end: let the CLI finish writing the turn (up to `TURN_SETTLE_S`), checkpoint it, and pass
        on steering. None if a checkpoint was pushed (it renewed the claim), "" if there was nothing new to save
        or the forge could not take it now, else why the agent must stop."""
        settle = time.monotonic() + TURN_SETTLE_S
        while self.at_boundary is not None and not self.at_boundary() and time.monotonic() < settle \
                and not self._stop.wait(0.05):
            pass
        saved: str | None = ""
        if self.save is not None:
            try:
                saved = None if self.save(claims) else ""
            except Conflict as exc:
                return f"fenced: {exc.message}"
            except AssayError as exc:  # the next turn or beat tries again; the lease rule decides
                if time.monotonic() - last_ok >= self.spec.lease_s:
                    return f"no renewal for a whole lease ({self.spec.lease_s}s): {exc.message}"
                self.echo(f"{self.spec.name}: checkpoint for {self.brief} failed, will retry: {exc.message}")
        self._pass_on(claims)
        return saved

    def _pass_on(self, claims: Claims) -> None:
        """Steering journaled while the agent runs: stop it at this turn boundary, so that the desk resumes the
        conversation with the steering as its next message. A failure to look is the next beat's to retry."""
        agent = self.agent
        if self.steering is None or self.steered or agent is None or agent.poll() is not None:
            return
        try:
            found = self.steering(claims)
        except AssayError:
            return
        if found:
            self.steered = found
            self.echo(f"{self.spec.name}: {self.brief}: passing on steering (seq {', '.join(str(s) for s, _ in found)})"
                      " to the running agent")
            agent.terminate()

    def _renew(self, claims: Claims, last_ok: float) -> str | None:
        """None if renewed; "" to try again later; else why the agent must stop."""
        self._due_in = None
        try:
            said = self.progress() if self.progress is not None else ""
            if self.member is not None:  # the host's batch: this claim with every other desk's here, in one push
                self.member.check_in(said)
                if not (said or self.published) and self.save is not None and self.save(claims):
                    return None  # the checkpoint's push renewed it
                why, at = self.member.beat(claims, said)
                hb = self.spec.heartbeat_s
                self._due_in = min(hb, max(0.1 * hb, at + hb - time.time()))  # in step with the host's batches
                if why is None:
                    self.published = said
                    return None
                if why:
                    return why
                raise ForgeError("the host's heartbeat did not renew this claim")  # the lease rule decides
            if said or self.published:  # progress rides the renewal (and its end, the next one): no push of its own
                claims.renew(self.brief, self.spec.name, epoch=self.epoch, progress=said)
                self.published = said
            elif self.save is None or not self.save(claims):
                claims.renew(self.brief, self.spec.name, epoch=self.epoch)
            return None
        except Conflict as exc:  # Fenced, or the claim moved to a state this desk may not renew
            return f"fenced: {exc.message}"
        except (AssayError, OSError, ValueError) as exc:  # the forge is away or busy: the lease rule decides
            message = exc.message if isinstance(exc, AssayError) else \
                f"the host's heartbeat folder: {getattr(exc, 'strerror', None) or exc}"
            if time.monotonic() - last_ok < self.spec.lease_s:
                self.echo(f"{self.spec.name}: heartbeat for {self.brief} failed, will retry: {message}")
                return ""
            return f"no renewal for a whole lease ({self.spec.lease_s}s): {message}"


class Steering:
    """One agent run's steering: what it was handed (the prompt's, then what the desk passed on), what is news,
    and the `delivered` notes (`{"steer": "delivered", "of": seq}`) for what a run took."""

    def __init__(self, claims: Claims, spec: DeskSpec, run: AgentRun, run_id: str, echo: Echo) -> None:
        self.claims, self.spec, self.run, self.run_id, self.echo = claims, spec, run, run_id, echo
        self.told: set[int] = set(run.steering)  # handed to this run's agent, in a prompt
        self.offered: dict[int, str] = {}  # handed through a hook's answer, not yet seen in the conversation
        self._lock = threading.Lock()  # the step server's thread offers while the desk's reads `told`

    def offer(self) -> str:
        """For a hook's answer (`assay step turn`): the steering not handed yet, as the model's next words, marked
        handed; "" when there is none or the journal cannot be read now (a later turn looks again)."""
        try:
            found = self.news()
        except AssayError:
            return ""
        with self._lock:
            found = [(seq, text) for seq, text in found if seq not in self.told]
            self.told |= {seq for seq, _ in found}
            self.offered.update(found)
        if found:
            self.echo(f"{self.spec.name}: {self.run.brief.id}: steering (seq {', '.join(str(s) for s, _ in found)}) "
                      "handed to the agent at its turn's end")
        return steering_prompt(found) if found else ""

    def confirm(self, transcript: Transcript) -> None:
        """Steering handed through a hook is delivered once the conversation holds it; what it does not hold is news
        again (so the desk hands it over by resuming the conversation)."""
        with self._lock:
            offered, self.offered = self.offered, {}
        held = [seq for seq, text in offered.items() if transcript.holds(text)]
        if held:
            self.delivered(held)
        with self._lock:
            self.told -= set(offered) - set(held)

    def _journal(self, claims: Claims) -> Journal:
        return Journal.open(claims, self.run.brief.id, self.spec.name, self.run.epoch, self.run_id, indexed=True)

    def news(self, claims: Claims | None = None) -> list[tuple[int, str]]:
        """Steering journaled that this run's agent was not handed and no note says was delivered, as (seq, text)."""
        own = claims or self.claims.spare()
        try:
            entries = self._journal(own).entries
        finally:
            if claims is None:
                own.git.close()
        told = self.told | {int((e.data or {}).get("of", 0)) for e in entries
                            if e.kind == "note" and (e.data or {}).get("steer") == "delivered"}
        return [(e.seq, str((e.data or {}).get("text", ""))) for e in entries
                if e.kind == "steer" and e.seq not in told]

    def at_boundary(self, saver: Saver) -> Callable[[Claims], list[tuple[int, str]]]:
        """For the heartbeat: the news, if the conversation is at a turn boundary now (else nothing: the next beat
        looks again)."""
        return lambda claims: self.news(claims) if saver.transcript.at_boundary() else []

    def delivered(self, seqs: Sequence[int]) -> None:
        """Journal that a run took a prompt holding this steering (each once); said, not raised, if it cannot be:
        the steering is then handed again, never lost. None handed: nothing is read (a run without steering)."""
        if not seqs:
            return
        claims = self.claims.spare()
        try:
            journal = self._journal(claims)
            noted = {int((e.data or {}).get("of", 0)) for e in journal.entries
                     if e.kind == "note" and (e.data or {}).get("steer") == "delivered"}
            for seq in dict.fromkeys(seqs):
                if seq not in noted:
                    journal.add("note", sync=False, data={"steer": "delivered", "of": seq})
            journal.flush()
        except AssayError as exc:
            self.echo(f"{self.spec.name}: {self.run.brief.id}: steering delivered but not journaled: {exc.message}")
        finally:
            claims.git.close()
        self.told |= set(seqs)


class _MovedOn(Exception):
    """The conversation moved on while a checkpoint read the worktree."""


class Saver:
    """One agent run's session: the arguments that start or resume it, and its checkpoints in the journal."""

    def __init__(self, claims: Claims, spec: DeskSpec, run: AgentRun, env: dict[str, str], echo: Echo,
                 resume: Saved | None, worktree: Recorder) -> None:
        assert spec.session is not None
        self.claims, self.spec, self.run, self.echo = claims, spec, run, echo
        self.run_id = uuid.uuid4().hex[:12]
        self.secrets = worktree.secrets
        self.worktree = worktree  # the run's: its steps' results record it too, one chain of snapshots
        self.resumed: Saved | None = None
        self.env = env
        self._lock = threading.Lock()  # the heartbeat's thread and the desk's both save (an ACP turn's end)
        if resume is not None:
            transcript = Transcript(spec.session, resume.session, env, run.worktree)
            try:
                transcript.restore(resume.data, resume.file)
                self.resumed, self.transcript = resume, transcript
                echo(f"{spec.name}: {run.brief.id} resumes the agent's conversation (checkpoint seq {resume.seq}, "
                     f"{len(resume.data)} bytes)")
                return
            except OSError as exc:
                self.transcript = transcript
                self.failed(f"cannot write the transcript: {exc.strerror or exc}", resume)
        chosen = any("{session}" in a for a in spec.session.new)  # else the CLI picks the id, found by its file
        self.transcript = Transcript(spec.session, str(uuid.uuid4()) if chosen else None, env, run.worktree,
                                     since=time.time() - 1)

    def adopt(self, session: str) -> None:
        """The id of the session the agent opened (an ACP adapter picks it): its transcript is that session's."""
        if session != self.transcript.session:
            self.transcript = Transcript(self.transcript.spec, session, self.env, self.run.worktree,
                                         since=self.transcript.since)

    def arguments(self) -> list[str]:
        return self.transcript.arguments(resume=self.resumed is not None)

    def grew(self) -> bool:
        """Whether the run added to a resumed conversation (else its restore did not take)."""
        return self.transcript.size() > self.transcript.restored_size

    def save(self, claims: Claims) -> bool:
        """Journal the conversation if it changed since the last checkpoint (with a renewal of the claim, in the
        same push); False if there was nothing new. Raises as a renewal does."""
        with self._lock:
            return self._save(claims)

    def _save(self, claims: Claims) -> bool:
        found = self.transcript.whole(self.secrets)  # between turns only: the files then are that turn's
        if found is None:
            return False
        data, size = found
        if len(data) > MAX_BYTES:
            self.echo(f"{self.spec.name}: {self.run.brief.id}: the agent's conversation ({len(data)} bytes) is over "
                      f"{MAX_BYTES} bytes and is not checkpointed")
            self.transcript.saved(data)
            return False
        try:
            with self.worktree.recording(claims.git) as (worktree, refs):  # the files as the transcript was read
                if self.transcript.size() != size:  # the CLI went on while the files were read: not one moment
                    raise _MovedOn()
                journal = Journal.open(claims, self.run.brief.id, self.spec.name, self.run.epoch, self.run_id,
                                       indexed=True)
                about: dict[str, Any] = {"name": SESSION_CHECKPOINT, "session": self.transcript.session,
                                         "attempt": self.run.attempt, "bytes": len(data), **worktree}
                if self.transcript.relative():
                    about["file"] = self.transcript.relative()
                journal.add("checkpoint", blobs={"checkpoint": data}, data=about, refs=refs)  # the wip ref rides
        except _MovedOn:
            return False  # the next turn's end saves it
        self.transcript.saved(data)
        crash_point("journal.after-checkpoint", SESSION_CHECKPOINT)
        return True

    def last(self) -> None:
        """The last checkpoint of the run, once the agent has ended; a failure to write it is said, not raised
        (the run's result comes first, and the previous checkpoint stands)."""
        claims = self.claims.spare()
        try:
            self.save(claims)
        except AssayError as exc:
            self.echo(f"{self.spec.name}: {self.run.brief.id}: the last checkpoint was not written: {exc.message}")
        finally:
            claims.git.close()

    def failed(self, why: str, checkpoint: Saved | None = None) -> None:
        """Journal that a checkpoint could not be resumed, so that no run tries it again."""
        saved = checkpoint or self.resumed
        assert saved is not None
        self.echo(f"{self.spec.name}: {self.run.brief.id}: checkpoint seq {saved.seq} could not be resumed ({why}); "
                  "starting the agent afresh")
        claims = self.claims.spare()
        try:
            Journal.open(claims, self.run.brief.id, self.spec.name, self.run.epoch, self.run_id, indexed=True).add(
                "note", data={"checkpoint": "failed", "of": saved.seq, "why": why})
        finally:
            claims.git.close()


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


