"""Every process an effect starts ends with its owner, however deep: a step's command whose effect is made by a
grandchild, run by `assay step run` (alone and under a desk) and by `assay mcp`, is gone with everything it
started once its owner is SIGKILLed; inspections (hooks, probes, settle) end with their command and leave
nothing running; a step has ended when all it started has. Judged from /proc and the effect's own log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from assay.core.claims import Claims
from assay.desk import effects, procs, stepclient
from tests.conftest import REPO, Forge, assay
from tests.helpers.desks import DESK, brief, desk_env, publish
from tests.helpers.procs import state
from tests.journal_check import entries

DEADLINE_S = 10  # how long the killed tree may take to be gone


def marked(marker: str) -> list[int]:
    """Pids of this user's processes whose command line holds `marker` (read from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(name))
    return found


def with_env(value: str, words: tuple[str, ...]) -> list[int]:
    """Pids whose command line holds every one of `words` and whose environment holds `value`."""
    found = []
    for pid in marked(words[0]):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if all(w.encode() in cmdline for w in words) and value.encode() in environ:
            found.append(pid)
    return found


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def await_true(check: object, what: str, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


class Effect:
    """`sh -c 'echo started >> LOG; sh -c "sleep S; echo done >> LOG" & wait'`: the effect is a grandchild's."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "deploy.log"
        self.sleep = f"sleep {30 + zlib.crc32(bytes(tmp_path)) % 100000 / 100000:.5f}"  # no other test's
        self.command = f'echo started >> {self.log}; sh -c "{self.sleep}; echo done >> {self.log}" & wait'

    def started(self) -> bool:
        return self.log.exists() and "started" in self.log.read_text() and bool(marked(self.sleep))

    def left(self) -> list[int]:
        return marked(self.sleep) + marked(str(self.log))

    def assert_gone(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while self.left():
            assert time.monotonic() < deadline, f"left running after its owner was killed: {self.left()}"
            time.sleep(0.02)
        assert "done" not in self.log.read_text()


@contextmanager
def killed_after(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_direct_step_run_killed_takes_its_grandchild_with_it(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    claims.claim("alpha", "d")
    effect = Effect(tmp_path)
    env = {**os.environ, "ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "r1"}
    owner = subprocess.Popen([sys.executable, "-m", "assay", "step", "run", "--name", "deploy", "--", "sh", "-c",
                              effect.command], env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    with killed_after(owner):
        await_true(effect.started, "the deploy never started")
        owner.kill()  # the owner alone: its command and the grandchild are in groups of their own
        owner.wait()
    effect.assert_gone()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_direct_step_run_stopped_stops_its_grandchild(sig: int, forge: Forge, claims: Claims,
                                                         tmp_path: Path) -> None:
    """SIGTERM (timeout, systemctl, a cancelled job) and Ctrl-C stop the whole tree before the end is journaled."""
    claims.claim("alpha", "d")
    effect = Effect(tmp_path)
    env = {**os.environ, "ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "r1"}
    owner = subprocess.Popen([sys.executable, "-m", "assay", "step", "run", "--name", "deploy", "--", "sh", "-c",
                              effect.command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
    with killed_after(owner):
        await_true(effect.started, "the deploy never started")
        owner.send_signal(sig)
        _, err = owner.communicate(timeout=30)
    assert effect.left() == [] and "Traceback" not in err.decode()  # gone by the time the owner exits
    assert "done" not in effect.log.read_text()
    journaled = [e["kind"] for e in entries(forge.path, "alpha") if e.get("step") == "deploy"]
    assert journaled == ["intent", "outcome_unknown"]  # an unsafe step stopped midway: its outcome is not known


def scripted_desk(forge: Forge, tmp_path: Path, effect: Effect) -> subprocess.Popen[bytes]:
    step = f"run {sys.executable} -m assay step run --name deploy -- sh -c '{effect.command}'"
    spec = DESK.format(name="d", attempts=2).replace("ASSAY_EFFECTS_LOG]", "ASSAY_EFFECTS_LOG, PYTHONPATH]")
    publish(forge, {"desks/d.yaml": spec,
                    "briefs/ship.md": brief("Ship", [step], "true")})
    return subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "d", "--once", "--forge", forge.url],
                            env={**os.environ, **desk_env(tmp_path), "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def test_a_desk_killed_whole_mid_step_leaves_no_grandchild(forge: Forge, tmp_path: Path) -> None:
    effect = Effect(tmp_path)
    desk = scripted_desk(forge, tmp_path, effect)
    with killed_after(desk):
        await_true(effect.started, "the deploy never started")
        clients = with_env(str(tmp_path / "effects.log"), ("step", "run", "deploy"))
        assert clients, "the step client is not found"  # served by the desk's socket, in the agent's group
        os.killpg(desk.pid, signal.SIGKILL)  # the desk, its agent and the step client, as a crash or `kill -9 -PGID`
        desk.wait()
    effect.assert_gone()
    assert [e["kind"] for e in entries(forge.path, "ship") if e.get("step") == "deploy"] == ["intent"]


MCP_DESK = f"""name: mcp
takes:
  labels: [work]
agent:
  command: [{sys.executable}, -m, tests.helpers.mcpagent]
lease_s: 120
heartbeat_s: 5
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG, PYTHONPATH]
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])  # SIGINT: a handled signal
def test_an_mcp_step_outlives_no_killed_server(sig: int, forge: Forge, tmp_path: Path) -> None:
    effect = Effect(tmp_path)
    calls = [{"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "command": effect.command}}]
    publish(forge, {"desks/mcp.yaml": MCP_DESK,
                    "briefs/ship.md": "---\ntitle: Ship\nlabels: [work]\nverify:\n  - id: ok\n    run: 'true'\n---\n"
                                      "Ship it.\n\n```mcp-calls\n" + json.dumps(calls) + "\n```\n"})
    env = {**os.environ, **desk_env(tmp_path), "PYTHONPATH": str(REPO)}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "mcp", "--once", "--forge", forge.url],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    with killed_after(desk):
        await_true(effect.started, "the deploy never started")
        found = with_env(str(tmp_path / "effects.log"), ("mcp",))
        servers = [p for p in found if p != desk.pid and parent(p) not in found]  # not a fork of the server
        assert servers, "`assay mcp` is not found"
        for pid in servers:
            os.kill(pid, sig)  # the owner of the step's command
        await_true(lambda: not [p for p in servers if Path(f"/proc/{p}").exists() and state(p) != "Z"],
                   "the server did not end")
        os.killpg(desk.pid, signal.SIGKILL)
        desk.wait()
    effect.assert_gone()


def test_a_step_has_ended_when_all_it_started_has(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    """A background writer that let go of the output still belongs to the step: its result waits for it."""
    claims.claim("alpha", "d")
    log = tmp_path / "late.log"
    ran = assay("step", "run", "--name", "deploy", "--", "sh", "-c",
                f"(sleep 1; echo late >> {log}) > /dev/null 2>&1 & echo quick",
                env={"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
                     "ASSAY_RUN": "r1"})
    assert ran.code == 0 and "quick" in ran.out, ran.err
    assert log.exists() and log.read_text() == "late\n"  # written before the result was journaled


@pytest.mark.parametrize("inspection", ["hook", "probe", "settle"])
def test_an_inspection_ends_with_its_command_and_leaves_nothing(inspection: str, tmp_path: Path,
                                                               capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    sleep = f"sleep 100003.{os.getpid() % 1000:03d}"
    command = f"{sleep} & echo gate-ok"
    started = time.monotonic()
    if inspection == "hook":
        said = effects.Hooks(command, "", tmp_path, dict(os.environ)).before("deploy", "unsafe", {}, "k")
        assert said is None  # it passed: exit 0
    elif inspection == "probe":
        found = effects.probe_runner(tmp_path, dict(os.environ))(command, "k")
        assert found["exit_code"] == 0 and "gate-ok" in found["tail"]
    else:
        found = stepclient._inspect(["sh", "-c", command])
        assert found["exit_code"] == 0 and "gate-ok" in found["tail"]
    assert time.monotonic() - started < 30  # not the 300 s timeout
    assert marked(sleep) == []  # nothing it started is left


def test_an_inspection_that_does_not_end_times_out_whole(tmp_path: Path) -> None:
    sleep = f"sleep 100004.{os.getpid() % 1000:03d}"
    code, output = procs.run(["sh", "-c", f"{sleep} & echo waiting; wait"], timeout_s=1)
    assert code == -1 and output.startswith(b"waiting") and output.endswith(b"(timed out)")
    assert marked(sleep) == []
    code, output = procs.run(["no-such-command-here"])
    assert code == 127 and output == b"cannot run no-such-command-here: No such file or directory"


def test_a_descendant_that_left_the_group_is_killed_too(tmp_path: Path) -> None:
    """A daemon-like grandchild (setsid: a session and group of its own) is still the keeper's to kill."""
    sleep = f"sleep 100005.{os.getpid() % 1000:03d}"
    group = procs.start(["sh", "-c", f"setsid {sleep} & sleep 600"])
    try:
        await_true(lambda: marked(sleep), "the daemon never started")
    finally:
        group.kill()
    assert group.finish() == -signal.SIGKILL
    assert marked(sleep) == []


def test_a_command_is_found_on_its_own_path_and_runs_in_its_folder(tmp_path: Path) -> None:
    """As exec would: the PATH searched is the command's environment's; a relative command is the folder's."""
    tool = tmp_path / "bin" / "only-here"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\npwd\n")
    tool.chmod(0o755)
    (tmp_path / "local.sh").write_text("#!/bin/sh\necho local\n")
    (tmp_path / "local.sh").chmod(0o755)
    env = {**os.environ, "PATH": f"{tool.parent}:/usr/bin:/bin"}
    assert procs.run(["only-here"], cwd=tmp_path, env=env) == (0, f"{tmp_path}\n".encode())
    assert procs.run(["./local.sh"], cwd=tmp_path) == (0, b"local\n")
    code, said = procs.run(["only-here"])  # not on this process's own PATH
    assert code == 127 and said == b"cannot run only-here: No such file or directory"
    code, said = procs.run(["true"], cwd=tmp_path / "missing")
    assert code == 127 and said.startswith(b"cannot run true: No such file or directory")
