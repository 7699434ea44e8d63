"""The promise fleet: a forge on disk, desks running the promise agent (tests/promise/agent.py) in process groups
of their own, and the processes a fault can hit, found in /proc.

As the kill fuzzer's fleet (tests/crash/test_kill_fuzz.py): one process group per desk, each life logged to a file;
here with an environment per desk and per life: every life of a desk has a HOME of its own, so a checkpointed
conversation is always resumed under another HOME than the one that wrote it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import PINNED, REPO
from tests.helpers import procs

from .agent import SECRET_PREFIX

DESKS = ("north", "south", "east")
LABEL = "promise"
LEASE_S = 3
DESK = """name: {name}
takes:
  labels: [promise]
agent:
  command: [python, -m, tests.promise.agent, "{{prompt}}"]
  session:
    new: [--new, "{{session}}"]
    resume: [--resume, "{{session}}"]
    file: "{{home}}/t/{{cwd_slug}}/{{session}}.jsonl"
lease_s: {lease}
heartbeat_s: 1
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG, PYTHONPATH, PROMISE_*]
"""
HOOKS = """hooks:
  before_step: 'echo "before $ASSAY_STEP" >> {log}'
  after_step: 'echo "after $ASSAY_STEP" >> {log}'
"""
POLICY = "name: default\nexpire:\n  grace_s: 0\n"
# the step's command: a started line, then the effect made two processes down, after DELAY seconds
EFFECT_SH = """# promise effect: LOG DELAY MARK
echo "start $ASSAY_IDEMPOTENCY_KEY $ASSAY_RUN" >> "$1.started"
sh -c 'sleep "$2"; echo "$ASSAY_IDEMPOTENCY_KEY $ASSAY_RUN" >> "$1"' "promise-effect-$3" "$1" "$2" &
wait
"""


SNAPSHOT_EVERY = 6  # journal snapshots every few entries: the judge checks each one a faulted run leaves


def base_env() -> dict[str, str]:
    """The test's environment without any ASSAY_* of the caller, with git pinned."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_") and not k.startswith("PROMISE_")}
    return {**env, **PINNED}


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env=base_env()).stdout


@dataclass
class Setup:
    """One trial's folders, forge, secret and marker."""

    root: Path
    seed: int
    forge: Path = field(init=False)
    main: Path = field(init=False)
    dir: Path = field(init=False)  # PROMISE_DIR: the agents' logs and the effects
    logs: Path = field(init=False)
    secret: str = field(init=False)
    mark: str = field(init=False)

    def __post_init__(self) -> None:
        self.forge, self.main, self.dir, self.logs = (self.root / "forge.git", self.root / "main",
                                                      self.root / "promise", self.root / "logs")
        for folder in (self.dir / "effects", self.logs):
            folder.mkdir(parents=True)
        (self.dir / "effect.sh").write_text(EFFECT_SH)
        self.secret = SECRET_PREFIX + secrets.token_hex(16)
        self.mark = f"{self.seed}-{secrets.token_hex(4)}"
        git("init", "-q", "--bare", "--initial-branch=main", str(self.forge))
        git("init", "-q", "--initial-branch=main", str(self.main))

    def env(self, desk: str = "", life: int = 0) -> dict[str, str]:
        """A desk's environment holds the token a desk on GitHub would hold; a person's command's (`desk` "") not."""
        home = self.root / "homes" / f"{desk or 'person'}-{life}"
        home.mkdir(parents=True, exist_ok=True)
        return {**base_env(), "HOME": str(home), "PYTHONPATH": str(REPO), "PROMISE_DIR": str(self.dir),
                "PROMISE_MARK": self.mark, "ASSAY_EFFECTS_LOG": str(self.dir / "mcp"),
                "ASSAY_CACHE_DIR": str(self.root / "cache" / (desk or "person")),
                "ASSAY_STATE_DIR": str(self.root / "state" / (desk or "person")),
                "ASSAY_PERSON": "promise-person",
                "ASSAY_SNAPSHOT_EVERY": str(SNAPSHOT_EVERY),
                **({"GITHUB_TOKEN": self.secret, "ASSAY_TOKEN": self.secret} if desk else {})}

    def publish(self, files: dict[str, str]) -> None:
        for path, text in files.items():
            target = self.main / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git("add", "-A", cwd=self.main)
        git("commit", "-q", "-m", "promise work", cwd=self.main)
        git("push", "-q", str(self.forge), "HEAD:refs/heads/main", cwd=self.main)


def desk_files(setup: Setup) -> dict[str, str]:
    out = {f"desks/{d}.yaml": DESK.format(name=d, lease=LEASE_S) for d in DESKS}
    out["desks/north.yaml"] += HOOKS.format(log=setup.dir / "hooks.log")
    out["sweepers/default.yaml"] = POLICY
    return out


@dataclass
class Commands:
    """Every command the harness runs itself (steer, sweep, event, board, claims): its output kept for the judge."""

    setup: Setup
    ran: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run([sys.executable, "-m", "assay", *args, "--forge", str(self.setup.forge)],
                                  env=self.setup.env(), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            self.ran.append({"argv": list(args), "code": "timeout", "out": str(exc.stdout), "err": str(exc.stderr)})
            return subprocess.CompletedProcess(list(args), 124, "", f"timed out after {timeout}s")
        self.ran.append({"argv": list(args), "code": done.returncode, "out": done.stdout, "err": done.stderr})
        return done


class PromiseFleet:
    """One running process per desk, each the leader of its own process group; every life logged to a file. One
    desk of the three, the seed's (`threaded`), is a thread of its supervisor's process (`--threads`): its process
    is that supervisor, killed, paused and stopped as a desk's is."""

    def __init__(self, setup: Setup) -> None:
        self.setup, self.url, self.logs = setup, str(setup.forge), setup.logs
        self.threaded = random.Random(setup.seed).choice(DESKS)  # its own draw: the trial's schedule is as ever
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: dict[str, list[int]] = {}  # the process groups of each desk paused now
        self.lives: Counter[str] = Counter()
        self.unexpected: list[str] = []  # desks that ended without being told to

    def start(self, name: str) -> None:
        self.lives[name] += 1
        with (self.logs / f"{name}-{self.lives[name]}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "assay", "desk", "run", name, "--poll", "0.3", "--forge", self.url,
                 *(["--threads"] if name == self.threaded else [])],
                env=self.setup.env(name, self.lives[name]), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def revive(self) -> None:
        """A desk that ended on its own (a desk polls until stopped) is noted and started again."""
        for name, proc in sorted(self.procs.items()):
            if proc.poll() is not None:
                self.unexpected.append(f"{name} life {self.lives[name]} exited {proc.returncode}")
                self.start(name)

    def holding(self, tips: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
        """The claims each desk's running life holds in `tips` (its pid, or a thread's of its process, is in the
        holder)."""
        pids = {pid: name for name, proc in self.procs.items() for pid in lives_in(proc.pid)}
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for b, r in tips.items():
            parts = str(r.get("holder", "")).split("/")
            if r.get("state") == "held" and len(parts) > 2 and parts[2].isdigit() and int(parts[2]) in pids:
                out.setdefault(pids[int(parts[2])], {})[b] = r
        return out

    def groups(self, name: str) -> list[int]:
        """The process groups the desk is: its process's, and for the threaded desk that of the host process it is
        a thread of (a group of its own, as a forked desk's is)."""
        pid = self.procs[name].pid
        return [pid, *(hosts_of(pid) if name == self.threaded else [])]

    def kill(self, name: str) -> bool:
        """SIGKILL the desk's whole group; whether the desk died of it (else it had ended on its own)."""
        proc = self.procs[name]
        for group in self.groups(name):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        return proc.wait(timeout=30) == -signal.SIGKILL

    def terminate(self, name: str) -> str:
        """SIGTERM the desk (a threaded desk's host, with it), as a person stops it; how it ended (SIGKILL after 30 s:
        a stop that never ends is no stop)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            return f"ended with {proc.wait(timeout=30)}"
        except subprocess.TimeoutExpired:
            self.kill(name)
            return "did not end in 30 s: SIGKILLed"

    def kill_alone(self, name: str) -> bool:
        """SIGKILL the desk process only: its children learn of it as they can."""
        proc = self.procs[name]
        os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=30) == -signal.SIGKILL

    def stop(self, name: str) -> None:
        """SIGSTOP the desk's whole group; returns once /proc shows the desk stopped (or in D, stopping)."""
        self.paused[name] = self.groups(name)
        for group in self.paused[name]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGSTOP)
        for group in self.paused[name]:
            procs.await_state(group, "TDZ", deadline_s=60, gone_ok=True)

    def cont(self, name: str) -> None:
        for group in self.paused.pop(name, None) or self.groups(name):  # (the groups it paused)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGCONT)

    def shutdown(self) -> None:
        """End every desk (woken first, in case one is paused), its whole group."""
        for name, proc in self.procs.items():
            for group in self.groups(name):  # (a host paused with its supervisor could not take the stop)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGCONT)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


# -- processes, from /proc ------------------------------------------------------------------------------------


def lives_in(pid: int) -> set[int]:
    """A desk process's pid, and the threads' of the host process it runs its desks in (a desk that is a thread
    names its thread's in its claims)."""
    found = {pid}
    for host in hosts_of(pid):
        with contextlib.suppress(OSError):
            found |= {int(t) for t in os.listdir(f"/proc/{host}/task")}
    return found


def hosts_of(pid: int) -> list[int]:
    """The children of `pid` that host desks as threads (`assay desk run ... --threads`, forked: each the leader
    of a group of its own)."""
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as kids:
                for kid in kids.read().split():
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        with open(f"/proc/{kid}/stat") as stat:
                            fields = stat.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
                        with open(f"/proc/{kid}/cmdline", "rb") as cmdline:
                            named = b"desk run" in cmdline.read().replace(b"\0", b" ")
                        if named and int(fields[1]) == pid and int(fields[2]) == int(kid):
                            found.append(int(kid))
    return found


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line joined by spaces), of every process /proc shows."""
    out: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            out[int(entry.name)] = (int(fields[1]), cmdline)
    return out


def descendants(root: int, table: dict[int, tuple[int, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def ancestors(pid: int, table: dict[int, tuple[int, str]]) -> list[int]:
    out = []
    while pid in table and pid not in out and pid > 1:
        pid = table[pid][0]
        out.append(pid)
    return out


def marked(mark: str) -> list[tuple[int, str]]:
    """Processes of a trial's effects (their command line holds the trial's mark): a step's command and the child
    that makes its effect, never the `assay step run` that runs them."""
    return [(pid, cmd) for pid, (_, cmd) in processes().items()
            if (f"promise-effect-{mark}" in cmd or (f" {mark}" in cmd and cmd.startswith("sh ")))
            and "assay" not in cmd.split(" ", 1)[0] and " -m assay" not in cmd]


ROLES = {  # what a fault can hit inside a desk's tree, by its command line
    "agent": lambda cmd: "tests.promise.agent" in cmd,
    "mcp": lambda cmd: cmd.endswith(" mcp") and "assay" in cmd,
    "client": lambda cmd: "step run" in cmd and "effect.sh" in cmd,  # `assay step run`, which runs a step
    "step": lambda cmd: cmd.startswith("sh ") and "effect.sh" in cmd,  # the step's command
}


def role_pids(fleet: PromiseFleet, role: str) -> list[tuple[str, int]]:
    """(desk, pid) of each live process in that role under a desk."""
    table = processes()
    return [(name, pid) for name, proc in sorted(fleet.procs.items()) if proc.poll() is None
            for pid in descendants(proc.pid, table) if ROLES[role](table[pid][1])]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"unreadable": line})
    return out
