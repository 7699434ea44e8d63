"""The agent's fast path: its steps are served by its desk over a local socket, with the same recovery."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.desk.stepserver import LITTER_AGE_S, StepServer, _refused, clear_dead_sockets
from tests.conftest import Forge, assay, audit_failures
from tests.helpers.desks import brief, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants


def test_an_agents_steps_go_through_its_desk_not_the_forge(work: Forge, tmp_path: Path) -> None:
    probe = f"ASSAY_FORGE=/nowhere {sys.executable} -m assay step run --name probe --policy unsafe -- true"
    value = f"ASSAY_FORGE=/nowhere {sys.executable} -m assay step value uuid > {tmp_path / 'uuid.txt'}"
    publish(work, {"briefs/p.md": brief("P", [f"run {probe}", f"run {value}", "write p.txt p"], "test -f p.txt")})
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert "verified" in run.out  # the forge the agent names does not exist: only the desk could journal these
    journal = entries(work.path, "p")
    probe_entries = [e for e in journal if e.get("step") == "probe"]
    assert [e["kind"] for e in probe_entries] == ["intent", "result"]
    agent_run = next(e for e in journal if e.get("step") == "agent" and e["kind"] == "result")["data"]["output"]["run"]
    assert {e["run"] for e in probe_entries} == {agent_run}
    recorded = next(e for e in journal if e["kind"] == "nondeterminism")["data"]["value"]
    assert (tmp_path / "uuid.txt").read_text().strip() == recorded
    assert invariants(work.path, "p") == []
    assert audit_failures(work.url, "p") == {}


def test_an_agent_step_killed_after_its_effect_is_outcome_unknown_not_repeated(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/d.md": brief("D", ["write d.txt d", "deploy"], "test -f d.txt")})
    run = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="step.after-execute:deploy")
    assert run.code == 0, run.err  # the agent's step process died; the desk and its next attempt did not
    assert (tmp_path / "effects.log").read_text().count("deployed d") == 1
    deploys = [e for e in entries(work.path, "d") if e.get("step") == "deploy"]
    intent = next(e for e in deploys if e["kind"] == "intent")
    ended = [e for e in deploys if e.get("intent") == intent["seq"]]
    assert [(e["kind"], (e.get("data") or {}).get("settled")) for e in ended] == [
        ("outcome_unknown", None), ("refused", None), ("result", "happened")]  # inspected, then settled
    assert claim_chain(work.path, "d")[-1]["state"] == "waiting"  # settled: nothing holds the review back
    assert invariants(work.path, "d") == []
    assert audit_failures(work.url, "d") == {}


def test_with_no_desk_listening_the_step_goes_to_the_forge(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    claims.claim("alpha", "d")
    ctx = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "r1", "ASSAY_SOCKET": str(tmp_path / "no-desk.sock")}
    run = assay("step", "run", "--name", "x", "--", "echo", "direct", env=ctx)
    assert run.code == 0 and "direct" in run.out
    assert [e["kind"] for e in entries(forge.path, "alpha")] == ["intent", "result"]


def test_the_client_imports_neither_click_nor_git(tmp_path: Path) -> None:
    code = ("import sys, assay.entry, assay.desk.stepclient; "
            "print(sorted(m for m in sys.modules if m in ('click', 'assay.core.git', 'assay.cli', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture
def served(forge: Forge, claims: Claims, tmp_path: Path) -> Iterator[tuple[StepServer, dict[str, str]]]:
    """A desk's step server for brief alpha (run r1), as `assay desk run` starts one for its agent."""
    claims.claim("alpha", "d")
    server = StepServer(lambda: Claims(ForgeGit(forge.url, tmp_path / "cache")), "alpha", "d", 1, "r1")
    server.start()
    env = {**os.environ, "ASSAY_SOCKET": str(server.path), "ASSAY_FORGE": "/nowhere", "ASSAY_BRIEF": "alpha",
           "ASSAY_DESK": "d", "ASSAY_EPOCH": "1", "ASSAY_RUN": "r1"}
    yield server, env
    server.stop()


def client(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "assay", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_step_inside_a_step_does_not_wait_on_its_own_desk(served: tuple[StepServer, dict[str, str]],
                                                            forge: Forge) -> None:
    _, env = served
    nested = f"ASSAY_FORGE={forge.url} {sys.executable} -m assay step value uuid"
    outer = client(env, "step", "run", "--name", "outer", "--policy", "safe", "--", "sh", "-c", nested)
    out, err = outer.communicate(timeout=60)
    assert outer.returncode == 0, err
    assert out.strip() in [e["data"]["value"] for e in entries(forge.path, "alpha") if e["kind"] == "nondeterminism"]


def test_a_recorded_value_is_on_the_forge_before_it_is_printed(served: tuple[StepServer, dict[str, str]],
                                                               forge: Forge) -> None:
    _, env = served
    value = client(env, "step", "value", "random", "--bytes=8")
    out, _ = value.communicate(timeout=60)
    assert value.returncode == 0 and len(out.strip()) == 16
    assert [e["data"]["value"] for e in entries(forge.path, "alpha") if e["kind"] == "nondeterminism"] == [out.strip()]


def test_a_safe_steps_entries_left_pending_reach_the_forge_with_no_call_after_them(
        served: tuple[StepServer, dict[str, str]], forge: Forge) -> None:
    """Safe steps are group-committed: the last one's entries wait for company, and the desk's flusher, asleep
    while nothing is served, pushes them within `MAX_PENDING_S` of the request that left them."""
    from assay.core.journal.writer import MAX_PENDING_S

    _, env = served
    step = client(env, "step", "run", "--name", "lint", "--policy", "safe", "--", "true")
    assert step.wait(timeout=60) == 0
    answered, deadline = time.monotonic(), time.monotonic() + 30
    while not [e for e in entries(forge.path, "alpha") if e["kind"] == "result" and e.get("step") == "lint"]:
        assert time.monotonic() < deadline, "the result never reached the forge"
        time.sleep(0.05)  # the forge has no event to await: looked at with plain git
    assert time.monotonic() - answered < MAX_PENDING_S + 5


def test_an_entry_left_pending_by_no_request_reaches_the_forge_too(served: tuple[StepServer, dict[str, str]],
                                                                   forge: Forge) -> None:
    """What the journal leaves pending wakes the flusher, whoever added it: an ACP agent's tool calls and their
    notes are journaled by the desk itself, with no request on the socket."""
    from assay.core.journal.writer import MAX_PENDING_S

    server, _ = served
    with server._lock:
        server._open().journal.add("note", sync=False, data={"observed": "a tool call"})
    left, deadline = time.monotonic(), time.monotonic() + 30
    while not [e for e in entries(forge.path, "alpha") if (e.get("data") or {}).get("observed") == "a tool call"]:
        assert time.monotonic() < deadline, "the note never reached the forge"
        time.sleep(0.05)  # the forge has no event to await: looked at with plain git
    assert time.monotonic() - left < MAX_PENDING_S + 5


def test_both_paths_read_a_step_command_line_alike(served: tuple[StepServer, dict[str, str]], forge: Forge,
                                                   tmp_path: Path) -> None:
    _, env = served
    args = ("step", "run", "--name", "x", "echo", "hi", "--policy", "safe")
    fast = client(env, *args)
    assert fast.wait(timeout=60) == 0
    direct_env = {**env, "ASSAY_FORGE": forge.url, "ASSAY_RUN": "r2"}
    del direct_env["ASSAY_SOCKET"]
    direct = client(direct_env, *args)
    assert direct.wait(timeout=60) == 0
    intents = [e for e in entries(forge.path, "alpha") if e["kind"] == "intent"]
    assert [(e["run"], e["policy"], e["data"]["input"]) for e in intents] == [
        ("r1", "unsafe", {"argv": ["echo", "hi", "--policy", "safe"]})]  # r2 replayed r1's result


def test_sigterm_to_a_served_step_stops_its_command_and_its_next_call_resumes_it(
        served: tuple[StepServer, dict[str, str]], forge: Forge, tmp_path: Path) -> None:
    _, env = served
    marker = tmp_path / "started"
    job = ("step", "run", "--name", "long", "--policy", "idempotent", "--input", '{"job": 1}', "--")
    step = client(env, *job, "sh", "-c", f"touch {marker}; exec sleep 60")
    while not marker.exists():  # the command runs: the intent is on the forge
        assert step.poll() is None, step.stderr.read() if step.stderr else ""
    step.send_signal(signal.SIGTERM)
    assert step.wait(timeout=30) == 143
    [intent] = entries(forge.path, "alpha")  # an idempotent step stays open: its next call resumes it
    again = subprocess.run([sys.executable, "-m", "assay", *job, "sh", "-c", "echo $ASSAY_IDEMPOTENCY_KEY"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.strip() == intent["key"]  # resumed, with the same key


def fifo_step(env: dict[str, str], tmp_path: Path, name: str = "deploy",
              policy: str = "unsafe") -> tuple[subprocess.Popen[str], Path, Path]:
    """A step whose command says it started, then waits for the test to write to a FIFO before it 'deploys'."""
    gate, done = tmp_path / "gate", tmp_path / "deployed"
    os.mkfifo(gate)
    started = tmp_path / "started"
    step = client(env, "step", "run", "--name", name, "--policy", policy, "--", "sh", "-c",
                  f"echo $$ > {started}.tmp && mv {started}.tmp {started}; read line < {gate}; touch {done}")
    while not started.exists():  # the command runs: its intent is on the forge
        assert step.poll() is None, step.stderr.read() if step.stderr else ""
    return step, gate, done


def test_stopping_a_desk_cancels_a_step_in_flight_and_journals_it(served: tuple[StepServer, dict[str, str]],
                                                                   forge: Forge, tmp_path: Path) -> None:
    server, env = served
    step, gate, done = fifo_step(env, tmp_path)
    told = server.stop()  # the agent ended (or ran out of time): its step is cancelled, its end journaled
    assert told == [f"a step in flight (process {step.pid}) was cancelled; its end is journaled"]
    assert step.wait(timeout=30) == 143 and not done.exists()
    journal = entries(forge.path, "alpha")
    assert [(e["kind"], (e.get("data") or {}).get("reason")) for e in journal] == [
        ("intent", None), ("outcome_unknown", "cancelled by its desk")]
    assert journal[0]["data"]["pid"] == step.pid  # the writer, as the kernel names it


def test_a_desk_that_dies_mid_step_takes_the_command_down_with_it(forge: Forge, claims: Claims,
                                                                  tmp_path: Path) -> None:
    """The desk is SIGKILLed while its agent's step runs in a session of its own: the client sees its desk gone,
    stops the command before it does anything more, and says so; the next reader journals outcome_unknown."""
    claims.claim("alpha", "d")
    desk = subprocess.Popen([sys.executable, "-c", DESK_PROGRAM, forge.url, str(tmp_path / "cache")],
                            stdout=subprocess.PIPE, text=True)
    assert desk.stdout is not None
    socket_path = desk.stdout.readline().strip()
    env = {**os.environ, "ASSAY_SOCKET": socket_path, "ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha",
           "ASSAY_DESK": "d", "ASSAY_EPOCH": "1", "ASSAY_RUN": "r1"}
    step, gate, done = fifo_step(env, tmp_path)
    desk.kill()
    desk.wait()
    out, err = step.communicate(timeout=30)
    assert step.returncode == 75 and "the desk went away while serving this step; its command was stopped" in err
    with pytest.raises(OSError) as nobody:  # nothing has the gate open for reading: the command is gone
        os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    assert nobody.value.errno == errno.ENXIO and not done.exists()
    [intent] = entries(forge.path, "alpha")
    again = client({**env, "ASSAY_RUN": "r2", "ASSAY_SOCKET": ""}, "step", "run", "--name", "deploy",
                   "--input", json.dumps(intent["data"]["input"]), "--", "true")  # the same call, from a new run
    _, err = again.communicate(timeout=60)
    assert again.returncode == 4 and "may or may not have completed" in err
    assert [e["kind"] for e in entries(forge.path, "alpha")] == ["intent", "outcome_unknown", "refused"]


def test_a_killed_desks_socket_folder_is_cleared_and_a_live_ones_kept(forge: Forge, tmp_path: Path) -> None:
    """A SIGKILLed desk runs no clean-up: its socket's folder stays behind in the temporary folder. The next step
    server of this user clears it once nothing is bound to it and it is a minute old; a live desk's (bound, even
    when its desk is paused) and one just made stay."""
    parent = Path(tempfile.mkdtemp(prefix="t-"))  # short: socket paths have ~100 characters
    desks: list[subprocess.Popen[str]] = []
    try:
        env = {**os.environ, "TMPDIR": str(parent)}
        desks += [subprocess.Popen([sys.executable, "-c", DESK_PROGRAM, forge.url, str(tmp_path / f"c{i}")],
                                  stdout=subprocess.PIPE, text=True, env=env) for i in range(2)]
        dead, live = (Path(d.stdout.readline().strip()) for d in desks if d.stdout is not None)
        desks[0].kill()
        desks[0].wait()
        os.kill(desks[1].pid, signal.SIGSTOP)  # paused: its socket is still bound, and takes a connection
        assert _refused(dead) and not _refused(live)  # the proof for a socket the kernel's table does not list
        other = parent / "assay-otherxyz"
        other.mkdir()
        (other / "s").write_text("not a socket")
        empty = parent / "assay-emptyxyz"  # a desk killed before it bound its socket (or as it cleared one)
        empty.mkdir()
        assert dead.parent.exists() and clear_dead_sockets(parent) == 0  # just made: maybe a server starting
        later = time.time() + LITTER_AGE_S + 1
        assert clear_dead_sockets(parent, now=later) == 2
        assert not dead.parent.exists() and not empty.exists() and live.exists() and (other / "s").exists()
        os.kill(desks[1].pid, signal.SIGCONT)
        desks[1].kill()
        desks[1].wait()
        assert clear_dead_sockets(parent, now=later) == 1 and sorted(os.listdir(parent)) == ["assay-otherxyz"]
    finally:
        for desk in desks:
            desk.kill()
            desk.wait()
        shutil.rmtree(parent)


DESK_PROGRAM = """
import sys, time
from pathlib import Path
from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.desk.stepserver import LITTER_AGE_S, StepServer, _refused, clear_dead_sockets
server = StepServer(lambda: Claims(ForgeGit(sys.argv[1], Path(sys.argv[2]))), "alpha", "d", 1, "r1")
server.start()
print(server.path, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Whether `pid` runs: not gone, and not a zombie (which holds no files open)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_client_that_hangs_up_mid_step_is_journaled_and_the_desk_serves_on(
        served: tuple[StepServer, dict[str, str]], forge: Forge, tmp_path: Path) -> None:
    server, env = served
    step, gate, done = fifo_step(env, tmp_path)
    command = int((tmp_path / "started").read_text())
    step.kill()  # a broken pipe for the desk; its command dies with it, soon after
    step.wait()
    deadline = time.monotonic() + 30
    while _alive(command):  # the kernel ends it (the parent-death signal) on its own time: await that
        assert time.monotonic() < deadline, f"the step's command {command} outlived its client"
        time.sleep(0.01)
    with pytest.raises(OSError) as nobody:
        os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    assert nobody.value.errno == errno.ENXIO
    value = client(env, "step", "value", "uuid")  # the desk is still serving
    out, err = value.communicate(timeout=60)
    assert value.returncode == 0 and len(out.strip()) == 36, err
    journal = entries(forge.path, "alpha")
    assert [(e["kind"], (e.get("data") or {}).get("reason")) for e in journal[:2]] == [
        ("intent", None), ("outcome_unknown", "its process ended without a result")]
    assert not done.exists()


def test_a_sandboxed_client_is_journaled_with_its_real_life(served: tuple[StepServer, dict[str, str]],
                                                             forge: Forge, tmp_path: Path) -> None:
    """In a pid namespace of its own (as Codex's sandbox runs commands) a client sees itself as pid 1 or 2; the
    desk names it by what the kernel says of the socket's peer, in the desk's namespace."""
    _, env = served
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {probe.stderr.decode().strip()}")
    step = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "assay", "step", "run",
                             "--name", "inside", "--policy", "idempotent", "--", "sh", "-c", "echo $PPID"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = step.communicate(timeout=60)
    assert step.returncode == 0, err
    [intent] = [e for e in entries(forge.path, "alpha") if e["kind"] == "intent"]
    inside = int(out.strip())
    assert inside <= 2  # the client's own pid, as the namespace shows it
    assert intent["data"]["pid"] > 2 and intent["data"]["pid"] != inside
    assert intent["data"]["start"] > 0 and intent["data"]["host"] == os.uname().nodename


def test_a_waiting_brief_the_forge_refuses_does_not_stop_the_desk(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/t.md": brief("T", ["write t.txt t"], "test -f t.txt"),
                   "briefs/u.md": brief("U", ["write u.txt u"], "test -f u.txt")})
    claims = Claims(ForgeGit(work.url))
    claims.claim("t", "builder")
    assert assay("wait", "t", "--on", "time:2020-01-01T00:00:00Z", "--forge", work.url).code == 0
    (work.path / "refs" / "assay" / "journal" / "t.lock").write_text("")
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert "cannot settle t now" in run.out and "u verified" in run.out
    forced = assay("release", "t", "--force", "--reason", "stuck", "--forge", work.url)
    assert forced.code == 0, forced.err  # a person is not stopped by the lock either
    assert "not journaled" in str(claim_chain(work.path, "t")[-1]["reason"])
    claims.git.close()


def test_a_request_that_is_junk_json_is_answered_as_a_bad_request(served: tuple[StepServer, dict[str, str]],
                                                                   forge: Forge) -> None:
    """What the desk's socket receives is the agent's to send: a JSON value that is no object, nesting past the
    stack, a number past int's digits: each answered as a bad request, no traceback, the desk serving on."""
    server, env = served
    for junk in (b"[1, 2]\n", b"[" * 100_000 + b"\n", b'{"op": ' + b"9" * 5000 + b"}\n", b"\xff\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(server.path))
            conn.sendall(junk)
            reply = json.loads(conn.makefile("rb").readline())
        assert reply["do"] == "error" and reply["message"].startswith("bad request to the desk"), (junk[:20], reply)
    value = client(env, "step", "value", "uuid")
    out, err = value.communicate(timeout=60)
    assert value.returncode == 0 and len(out.strip()) == 36, err
