"""The findings of issue 33 as cases of the promise suite: each drives real desks, agents, `assay mcp` and git,
and judges from evidence outside Assay (effect logs, /proc, refs read with plain git, command output).

Each case failed before its finding was fixed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agentmodels import clis
from tests.agentmodels.server import ModelServer, Reply, Request, json_reply
from tests.conftest import REPO, Forge, assay, git
from tests.helpers.desks import DESK, brief, desk_env, publish, run_desk
from tests.promise import fleet as fl
from tests.promise import junk
from tests.promise.agent import SECRET_PREFIX
from tests.promise.fleet import read_jsonl
from tests.promise.reader import claim_chain, entries

REAL_CLIS = os.environ.get("ASSAY_PROMISE_REAL_CLIS") == "1"  # the cases with real CLIs that take minutes


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback (most recent call last)" not in text, text[-3000:]


def await_path(path: Path, proc: subprocess.Popen[bytes], deadline_s: float = 90) -> None:
    deadline = time.monotonic() + deadline_s
    while not path.exists():
        assert proc.poll() is None, f"the desk ended (exit {proc.returncode}) before {path} appeared"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def await_process(text: str, proc: subprocess.Popen[bytes], deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    while not processes_with(text):
        assert proc.poll() is None, f"the desk ended (exit {proc.returncode}) before a process with {text} ran"
        assert time.monotonic() < deadline, f"no process with {text} ran"
        time.sleep(0.02)


def start_desk(forge: Forge, name: str, tmp_path: Path, log: Path, **extra: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", name, "--poll", "0.5", "--forge",
                                 forge.url], env={**os.environ, **desk_env(tmp_path, **extra)}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def end_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def processes_with(text: str) -> list[tuple[int, str]]:
    return [(pid, cmd) for pid, (_, cmd) in fl.processes().items() if text in cmd]


def end_all(text: str) -> None:
    """End what a case left running (processes whose command line holds its unique text)."""
    for pid, _ in processes_with(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- 1: an effect made by a grandchild of an MCP step outlives a SIGKILL of the desk's group ------------------


MCP_DESK = """name: mcp
takes:
  labels: [work]
agent:
  command: [python, -m, tests.promise.agent, "{prompt}"]
lease_s: 120
heartbeat_s: 5
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG, PYTHONPATH, PROMISE_*]
"""


def test_1_a_grandchild_effect_of_an_mcp_step_ends_with_its_desk(forge: Forge, tmp_path: Path) -> None:
    mark = f"promise-f1-{os.getpid()}-{time.monotonic_ns()}"
    started, deployed = tmp_path / "started", tmp_path / "deployed.log"
    command = f"touch {started}; sh -c 'sleep 4; echo deployed >> {deployed}' {mark} & wait"
    calls = [{"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "command": command}}]
    publish(forge, {"desks/mcp.yaml": MCP_DESK, "briefs/ship.md": (
        "---\ntitle: Ship\nlabels: [work]\n---\nShip.\n\n```mcp-calls\n" + json.dumps(calls) + "\n```\n")})
    (tmp_path / "promise").mkdir()
    desk = start_desk(forge, "mcp", tmp_path, tmp_path / "desk.log", PYTHONPATH=str(REPO),
                      PROMISE_DIR=str(tmp_path / "promise"))
    try:
        await_path(started, desk)
        await_process(mark, desk)  # the child that makes the effect runs
        # the desk's whole group, and `assay mcp` with it (Claude Code's MCP server dies with its desk)
        deadline = time.monotonic() + 30
        while not (servers := [pid for pid, cmd in processes_with(" mcp") if cmd.endswith(" mcp") and "assay" in cmd]):
            assert time.monotonic() < deadline, "no assay mcp ran"
            time.sleep(0.05)
        os.killpg(desk.pid, signal.SIGKILL)
        for pid in servers:  # unless it went with the group already
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        desk.wait(timeout=30)
        deadline = time.monotonic() + 6
        while processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = processes_with(mark)
        time.sleep(0.5)
        assert left == [] and not deployed.exists(), f"the deploy outlived its desk: {left}, {deployed.exists()}"
    finally:
        end_group(desk) if desk.poll() is None else None
        end_all(mark)


def test_1_a_grandchild_effect_of_a_cli_step_ends_with_its_desk(forge: Forge, tmp_path: Path) -> None:
    """The same through `assay step run` (the Bash path): the step client runs its command in a process group of
    its own, which a SIGKILL of the desk's group does not reach; the parent-death signal reaches the direct child
    only. Found by the promise suite (seed 4041 of its long run)."""
    mark = f"promise-f1cli-{os.getpid()}-{time.monotonic_ns()}"
    started, deployed, script = tmp_path / "started", tmp_path / "deployed.log", tmp_path / "deploy.sh"
    script.write_text(f"touch {started}\nsh -c 'sleep 4; echo deployed >> {deployed}' {mark} &\nwait\n")
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1", "run assay step run --name deploy "
                                                     f"--policy unsafe -- sh {script}"], "test -f ship.txt")})
    desk = start_desk(forge, "builder", tmp_path, tmp_path / "desk.log")
    try:
        await_path(started, desk)
        await_process(mark, desk)  # the child that makes the effect runs
        os.killpg(desk.pid, signal.SIGKILL)
        desk.wait(timeout=30)
        deadline = time.monotonic() + 6
        while processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = processes_with(mark)
        time.sleep(0.5)
        assert left == [] and not deployed.exists(), f"the deploy outlived its desk: {left}, {deployed.exists()}"
    finally:
        end_all(mark)


# -- 2: a hook that leaves a background process holds the step until its time limit -------------------------


def test_2_a_hook_that_leaves_a_process_behind_does_not_hold_the_step(forge: Forge, tmp_path: Path) -> None:
    seconds = 100000 + os.getpid() % 89999
    hooks = f"hooks:\n  before_step: 'sleep {seconds} & echo gate-ok'\n"
    publish(forge, {"desks/gated.yaml": DESK.format(name="gated", attempts=1) + hooks,
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1", "deploy"], "test -f ship.txt")})
    try:
        try:
            run = assay("desk", "run", "gated", "--once", "--forge", forge.url, env=desk_env(tmp_path), timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the desk was still waiting on its hook after 30 s")
        assert run.code == 0, run.out + run.err
        assert processes_with(f"sleep {seconds}") == [], "the hook's process outlived its step"
    finally:
        end_all(f"sleep {seconds}")


# -- 3, 4: steering marked delivered must be in what the agent was sent ----------------------------------------


SESSION_DESK = """name: talker
takes:
  labels: [work]
agent:
  command: [python, -m, tests.promise.agent, "{placeholder}"]
  session:
    new: [--new, "{{session}}"]
    resume: [--resume, "{{session}}"]
    file: "{{home}}/t/{{cwd_slug}}/{{session}}.jsonl"
lease_s: 60
heartbeat_s: 1
attempts: 2
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, PYTHONPATH, PROMISE_*]
"""


def steered_while_working(forge: Forge, tmp_path: Path, placeholder: str) -> tuple[list[dict[str, Any]], str]:
    """The agent steers its own brief as a person would, then works on: the desk's heartbeat passes it on."""
    text = f"promise: use the staging database {os.getpid()}"
    folder = tmp_path / "promise"
    folder.mkdir()
    publish(forge, {"desks/talker.yaml": SESSION_DESK.format(placeholder=placeholder),
                    "briefs/talk.md": ("---\ntitle: Talk\nlabels: [work]\n---\nTalk.\n\n```promise-script\n"
                                       f"write talk.txt t\nsteer {text.replace(' ', '_')}\nthink 4\n```\n")})
    run = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"), PROMISE_DIR=str(folder),
                   PYTHONPATH=str(REPO))
    no_traceback(run.out, run.err)
    return entries(forge.path, "talk"), text


def delivered_unseen(journal: list[dict[str, Any]], folder: Path) -> list[str]:
    sent = [str(r.get("prompt", "")) for r in read_jsonl(folder / "requests.jsonl")]
    texts = {e["seq"]: str((e.get("data") or {}).get("text")) for e in journal if e["kind"] == "steer"}
    return [texts.get(d["of"], "?") for e in journal if e["kind"] == "note"
            and (d := e.get("data") or {}).get("steer") == "delivered"
            and not any(texts.get(d["of"], "?") in s for s in sent)]


def test_3_steering_passed_on_while_the_agent_works_reaches_it(forge: Forge, tmp_path: Path) -> None:
    """The control: an agent whose command takes {prompt} gets the steering the journal says it got."""
    journal, text = steered_while_working(forge, tmp_path, "{prompt}")
    assert [e for e in journal if e["kind"] == "steer"], journal
    assert delivered_unseen(journal, tmp_path / "promise") == []
    sent = [str(r.get("prompt", "")) for r in read_jsonl(tmp_path / "promise" / "requests.jsonl")]
    assert any(text in s for s in sent), "steering to a running brief never reached its agent"


def test_4_steering_marked_delivered_to_an_agent_without_prompt_reached_it(forge: Forge, tmp_path: Path) -> None:
    journal, text = steered_while_working(forge, tmp_path, "{prompt_file}")
    assert delivered_unseen(journal, tmp_path / "promise") == [], "steering marked delivered that no agent was sent"
    sent = [str(r.get("prompt", "")) for r in read_jsonl(tmp_path / "promise" / "requests.jsonl")]
    assert any(text in s for s in sent), "steering to a running brief never reached its agent"


# -- 5: a stale ref lock on a forge on disk ----------------------------------------------------------------------


def test_5_a_stale_claim_lock_neither_strands_the_brief_nor_is_called_a_read(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    junk.stale_lock(forge.path, "refs/assay/claims/ship")
    run = assay("desk", "run", "builder", "--once", "--forge", forge.url, env=desk_env(tmp_path), timeout=90)
    no_traceback(run.out, run.err)
    said = run.out + run.err
    assert "cannot be read" not in said, said  # a write was refused: not a read
    chain = claim_chain(forge.path, "ship") if forge.tip("refs/assay/claims/ship") else []
    board = assay("board", "build", "-o", str(tmp_path / "board"), "--forge", forge.url)
    needs = {n["brief"]: n for n in json.loads((tmp_path / "board" / "board.json").read_text())["needs_you"]}
    worked = bool(chain) and chain[-1]["state"] == "waiting"
    assert board.code == 0 and (worked or (needs.get("ship") and needs["ship"]["next"])), (said, chain, needs)


# -- 6: a paused predecessor must not burn the brief's attempts --------------------------------------------------


SHORT = DESK.replace("lease_s: 120", "lease_s: 3").replace("heartbeat_s: 5", "heartbeat_s: 1")


@pytest.mark.parametrize("successor", ["other", "builder --singleton"])
def test_6_taking_over_from_a_paused_desk_burns_no_attempts(forge: Forge, tmp_path: Path, successor: str) -> None:
    """Another desk once a sweep expired the paused one's claim, or a new process of the same desk at once. (Both
    pass on main: the finding's own repro is its fix's test; this guards the promise around it.)"""
    marker = tmp_path / "working"
    publish(forge, {"desks/builder.yaml": SHORT.format(name="builder", attempts=2),
                    "desks/other.yaml": SHORT.format(name="other", attempts=2),
                    "sweepers/default.yaml": "name: default\nexpire:\n  grace_s: 0\n",
                    "briefs/ship.md": brief("Ship", [f"sleep-once 60 {marker}", "write ship.txt v1"],
                                            "test -f ship.txt")})
    first = start_desk(forge, "builder", tmp_path, tmp_path / "builder.log")
    try:
        await_path(marker, first)
        os.killpg(first.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 40
        while successor == "other" and claim_chain(forge.path, "ship")[-1]["state"] == "held":
            assert time.monotonic() < deadline, "the paused desk's claim never expired"
            assay("sweep", "--forge", forge.url)
            time.sleep(0.5)
        run = assay("desk", "run", *successor.split(), "--once", "--forge", forge.url, env=desk_env(tmp_path),
                    timeout=120)
        no_traceback(run.out, run.err)
        last = claim_chain(forge.path, "ship")[-1]
        assert run.code != 5 and last["state"] != "blocked", (run.out, last)
    finally:
        end_group(first)


# -- 8: SIGTERM does what Ctrl-C does ------------------------------------------------------------------------------


def test_8_sigterm_releases_the_claim_as_ctrl_c_does(forge: Forge, tmp_path: Path) -> None:
    marker = tmp_path / "working"
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/ship.md": brief("Ship", [f"sleep-once 60 {marker}", "write ship.txt v1"],
                                            "test -f ship.txt")})
    desk = start_desk(forge, "builder", tmp_path, tmp_path / "desk.log")
    try:
        await_path(marker, desk)
        desk.send_signal(signal.SIGTERM)
        code = desk.wait(timeout=60)
        said = (tmp_path / "desk.log").read_text()
        no_traceback(said)
        assert claim_chain(forge.path, "ship")[-1]["state"] != "held", (code, said[-2000:])
    finally:
        end_group(desk) if desk.poll() is None else None
        end_all(str(marker))


# -- 10: the agent must not find the desk's token in any process it can read ---------------------------------------


def test_10_the_agent_finds_no_token_in_any_process(forge: Forge, tmp_path: Path) -> None:
    token = SECRET_PREFIX + "f10" + "x" * 24
    folder = tmp_path / "promise"
    folder.mkdir()
    publish(forge, {"desks/talker.yaml": SESSION_DESK.format(placeholder="{prompt}"),
                    "briefs/talk.md": "---\ntitle: Talk\nlabels: [work]\n---\nTalk.\n\n```promise-script\n"
                                      "write talk.txt t\nvalue\n```\n"})
    run = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"), PROMISE_DIR=str(folder),
                   PYTHONPATH=str(REPO), GITHUB_TOKEN=token, ASSAY_TOKEN=token)
    assert run.code == 0 and token not in run.out + run.err, run.out + run.err
    assert read_jsonl(folder / "requests.jsonl"), "the agent never ran"
    assert read_jsonl(folder / "leaks.jsonl") == []


# -- 11: a password in a forge URL is never printed -----------------------------------------------------------------


def test_11_a_password_in_a_file_url_is_masked(forge: Forge, tmp_path: Path) -> None:
    password = "Pa55-f11-" + str(os.getpid())
    url = f"file://someone:{password}@{forge.path}"
    for args in (["claims"], ["briefs"], ["sweep", "--dry-run"], ["claim", "alpha", "--desk", "d1"]):
        run = assay(*args, "--forge", url)
        no_traceback(run.out, run.err)
        assert password not in run.out + run.err, (args, run.out + run.err)


# -- 12: a checkpoint's session id read from the forge is checked before it becomes a path or an argument --------


def checkpoint_commit(forge: Forge, entry: dict[str, Any], blob_name: str, blob: bytes) -> None:
    """Append `entry` to the journal with its blob, with plain git (what a hostile writer of the forge can do)."""
    tip = forge.tip("refs/assay/journal/talk")
    assert tip is not None
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    blob_sha = junk.blob(forge.path, blob)
    entries_sha = junk.blob(forge.path, line)
    blobs_tree = subprocess.run(["git", "--git-dir", str(forge.path), "mktree"], capture_output=True, check=True,
                                input=f"100644 blob {blob_sha}\t{blob_name}\n".encode()).stdout.decode().strip()
    tree = subprocess.run(["git", "--git-dir", str(forge.path), "mktree"], capture_output=True, check=True,
                          input=(f"040000 tree {blobs_tree}\tblobs\n100644 blob {entries_sha}\tentries.jsonl\n"
                                 ).encode()).stdout.decode().strip()
    commit = git("--git-dir", str(forge.path), "commit-tree", tree, "-p", tip, "-m", "planted").strip()
    git("--git-dir", str(forge.path), "update-ref", "refs/assay/journal/talk", commit)


def test_12_a_planted_session_id_never_becomes_a_path_or_an_argument(forge: Forge, tmp_path: Path) -> None:
    """A desk is killed mid-run after a checkpoint; a checkpoint naming a session outside HOME is planted after it;
    the next desk resumes the round's newest checkpoint."""
    folder, marker = tmp_path / "promise", tmp_path / "hanging"
    folder.mkdir()
    publish(forge, {"desks/talker.yaml": SESSION_DESK.format(placeholder="{prompt}"),
                    "briefs/talk.md": "---\ntitle: Talk\nlabels: [work]\n---\nTalk.\n\n"
                                      f"```promise-script\nwrite talk.txt t\nthink 2\nhang {marker}\n```\n"})
    env = {"HOME": str(tmp_path / "home"), "PROMISE_DIR": str(folder), "PYTHONPATH": str(REPO)}
    desk = start_desk(forge, "talker", tmp_path, tmp_path / "desk.log", **env)
    try:
        await_path(marker, desk)
        deadline = time.monotonic() + 30
        while not (saved := [e for e in entries(forge.path, "talk") if e["kind"] == "checkpoint"]):
            assert time.monotonic() < deadline, "no checkpoint was saved"
            time.sleep(0.2)
    finally:
        end_group(desk)
    hostile = "../../../../../../" + str(tmp_path / "PWNED").lstrip("/")
    last = entries(forge.path, "talk")[-1]
    seq = last["seq"] + 1
    blob = (tmp_path / "home").glob("t/**/*.jsonl")
    checkpoint_commit(forge, {**saved[-1], "seq": seq, "epoch": last["epoch"],
                              "data": {**saved[-1]["data"], "session": hostile,
                                       "checkpoint_blob": f"blobs/{seq}-checkpoint"}},
                      f"{seq}-checkpoint", next(blob).read_bytes())
    again = run_desk(forge, "talker", tmp_path, **{**env, "HOME": str(tmp_path / "home-2")})
    no_traceback(again.out, again.err)
    argvs = [" ".join(r.get("argv", [])) for r in read_jsonl(folder / "requests.jsonl")]
    assert len(argvs) >= 2, again.out + again.err
    assert not any("PWNED" in a for a in argvs), argvs
    assert not list(tmp_path.glob("**/PWNED*")), list(tmp_path.glob("**/PWNED*"))


# -- 13: `assay mcp` checks tool input against the tool's schema, and answers every line ------------------------------


class Pipe:
    """`assay mcp` over its stdio, line by line, each answer awaited with a deadline."""

    def __init__(self, tmp_path: Path) -> None:
        self.err = tmp_path / "mcp.err"
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "assay", "mcp"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, cwd=tmp_path)
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "promise", "version": "1"}}})
        assert "result" in self.answer()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((message if isinstance(message, str) else json.dumps(message)).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, deadline_s: float = 10) -> dict[str, Any]:
        import selectors

        assert self.proc.stdout is not None
        chooser = selectors.DefaultSelector()
        chooser.register(self.proc.stdout, selectors.EVENT_READ)
        if not chooser.select(deadline_s):
            return {"no answer": f"within {deadline_s}s"}
        line = self.proc.stdout.readline()
        return dict(json.loads(line)) if line.strip() else {"no answer": "end of output"}

    def close(self) -> str:
        self.proc.kill()
        self.proc.wait()
        return self.err.read_text(errors="replace")


HOSTILE_CALLS = [("value", {"kind": "random", "bytes": "abc"}), ("value", {"kind": "bad"}),
                 ("value", {"kind": "random", "bytes": 1_000_000_000}),
                 ("step_run", {"name": "hi", "policy": "safe", "argv": "echo hi"}),
                 ("step_run", {"name": "hi", "policy": "sometimes", "command": "true"})]


def test_13_assay_mcp_answers_every_line_and_refuses_what_its_schema_refuses(tmp_path: Path) -> None:
    pipe = Pipe(tmp_path)
    answers = []
    try:
        pipe.send("not json")
        answers.append(("not json", pipe.answer(5)))
        for i, (tool, arguments) in enumerate(HOSTILE_CALLS, start=1):
            pipe.send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool,
                                                                                   "arguments": arguments}})
            answers.append((f"{tool} {arguments}", pipe.answer()))
    finally:
        said = pipe.close()
    no_traceback(said)
    refused = [(what, "error" in a or (a.get("result") or {}).get("isError") is True) for what, a in answers]
    assert all(ok for _, ok in refused), answers
    # a schema's refusal says what is wrong, in the CLI's words: never "not inside an agent"
    assert not any("ASSAY_SOCKET" in json.dumps(a) for _, a in answers[1:]), answers


# -- 14: an event's payload is read with a bound ---------------------------------------------------------------------


def test_14_an_endless_event_payload_is_refused(forge: Forge) -> None:
    import resource

    def bounded() -> None:  # on main it reads until memory runs out: not this machine's
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    try:
        run = subprocess.run([sys.executable, "-m", "assay", "event", "pull_request", "/dev/zero", "--forge",
                              forge.url], capture_output=True, text=True, timeout=10, preexec_fn=bounded)
    except subprocess.TimeoutExpired:
        pytest.fail("assay event read /dev/zero for 10 s")
    no_traceback(run.stdout, run.stderr)
    assert run.returncode == 2 and "error:" in run.stderr, run.stdout + run.stderr


# -- 15: a push to a forge on disk keeps the forge's object checks -----------------------------------------------------


GITMODULES = '[submodule "x"]\\n  path = x\\n  url = --upload-pack=touch /tmp/promise-f15\\n'


def test_15_a_forge_that_checks_objects_never_takes_a_hostile_gitmodules(forge: Forge, tmp_path: Path) -> None:
    git("--git-dir", str(forge.path), "config", "transfer.fsckObjects", "true")
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/ship.md": brief("Ship", [f"write .gitmodules {GITMODULES}", "write ship.txt v1"],
                                            "test -f ship.txt")})
    run = run_desk(forge, "builder", tmp_path)
    no_traceback(run.out, run.err)
    checked = subprocess.run(["git", "--git-dir", str(forge.path), "fsck"], capture_output=True, text=True)
    assert "gitmodulesUrl" not in checked.stdout + checked.stderr, (run.out, checked.stderr)


# -- 17: init works on the folder it is given ------------------------------------------------------------------------


def test_17_init_in_a_folder_of_another_repository_leaves_that_repository_alone(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    git("init", "-q", "--initial-branch=main", str(outer))
    (outer / "README").write_text("someone else's project\n")
    git("add", "-A", cwd=outer)
    git("commit", "-q", "-m", "theirs", cwd=outer)
    before = git("rev-parse", "HEAD", cwd=outer).strip()
    inner = outer / "mine"
    inner.mkdir()
    run = assay("init", "--local-forge", str(tmp_path / "forge.git"), cwd=inner)
    no_traceback(run.out, run.err)
    assert git("rev-parse", "HEAD", cwd=outer).strip() == before, run.out + run.err
    assert git("status", "--porcelain", cwd=outer).strip() in ("", "?? mine/"), run.out + run.err
    if run.code == 0:  # a new repository of its own, whose history is not the outer one's
        pushed = git("--git-dir", str(tmp_path / "forge.git"), "rev-list", "--all").split()
        assert before not in pushed, run.out
    else:
        assert run.code == 2 and "hint:" in run.err, run.err


# -- 18: a report says what it could not read ------------------------------------------------------------------------


def test_18_a_report_names_the_journal_it_could_not_read(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/one.md": brief("One", ["write one.txt 1"], "test -f one.txt"),
                    "briefs/two.md": brief("Two", ["write two.txt 2"], "test -f two.txt")})
    assert run_desk(forge, "builder", tmp_path).code == 0
    junk.point(forge.path, "refs/assay/journal/two", junk.commit(forge.path, {"entries.jsonl": b"{not json\n"}))
    run = assay("report", "--json", "--forge", forge.url)
    no_traceback(run.out, run.err)
    assert "two" in run.out + run.err and ("refs/assay/journal/two" in run.out + run.err), run.out + run.err


# -- 16: the disk fast path syncs what the forge's core.fsync asks, as receive-pack would -----------------------------


@pytest.mark.skipif(not shutil.which("strace"), reason="strace is not installed")
def test_16_objects_pushed_to_a_forge_that_asks_for_fsync_are_synced(forge: Forge, tmp_path: Path) -> None:
    """A power loss cannot be made here: the system calls show instead whether each object reached the disk."""
    git("--git-dir", str(forge.path), "config", "core.fsync", "all")
    traced = tmp_path / "trace"
    run = subprocess.run(["strace", "-f", "-y", "-e", "trace=fsync,fdatasync", "-o", str(traced), sys.executable,
                          "-m", "assay", "claim", "alpha", "--desk", "d1", "--forge", forge.url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    objects = str(forge.path / "objects")
    synced = [line for line in traced.read_text().splitlines() if objects in line]
    assert synced, "the claim's objects were written into a forge that asks for fsync, and none was synced"


# -- 7: a failure that is not the brief's fault (a wrong model key) stops the run and burns nothing -------------------


class Unauthorized(ModelServer):
    """A model that answers every request 401, as Anthropic's API answers a wrong key."""

    def handle(self, request: Request) -> Reply:
        return json_reply({"type": "error", "error": {"type": "authentication_error",
                                                      "message": "invalid x-api-key"}}, status=401)


@pytest.mark.slow
@pytest.mark.skipif(clis.claude_bin() is None, reason="claude is not installed (sh tests/install-agents.sh)")
@pytest.mark.skipif(not REAL_CLIS, reason="Claude Code retries a 401 for minutes: set ASSAY_PROMISE_REAL_CLIS=1")
def test_7_a_wrong_model_key_leaves_the_brief_unburned(tmp_path: Path) -> None:
    work, forge = tmp_path / "project", tmp_path / "forge.git"
    work.mkdir()
    assert assay("init", "--local-forge", str(forge), cwd=work).code == 0  # the presets as shipped
    (work / "briefs" / "greet.md").write_text("---\ntitle: Greet\nlabels: [code]\nverify:\n  - id: greeted\n"
                                              "    run: test -f greet.txt\n---\nWrite greet.txt saying hello.\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "greet", cwd=work)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)
    with Unauthorized() as server:
        env = {**os.environ, **clis.claude_env(server.url, tmp_path / "home"), "ASSAY_STATE_DIR": str(tmp_path / "s")}
        env["PATH"] = os.pathsep.join([*clis.path_dirs(), os.environ["PATH"]])
        out = subprocess.run([sys.executable, "-m", "assay", "desk", "run", "claude", "--once", "--forge",
                              str(forge)], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=900).stdout
    no_traceback(out)
    last = claim_chain(forge, "greet")[-1] if fl.git("--git-dir", str(forge), "for-each-ref",
                                                     "refs/assay/claims/greet").strip() else {"state": "unclaimed"}
    agents = [e for e in entries(forge, "greet") if e["kind"] == "intent" and e.get("step") == "agent"]
    assert last["state"] != "blocked" and len(agents) <= 1, (out[-3000:], last)
    assert "401" in out or "key" in out.lower(), out[-3000:]


# -- 9: a comment command the parser obeys starts the desk's job -------------------------------------------------------


def test_9_the_desk_job_starts_for_exactly_the_comments_the_parser_obeys() -> None:
    """The job's `if:` as GitHub evaluates it for a comment on a pull request (`startsWith` and `contains` on the
    comment's body, case-insensitive): a comment starts a job exactly when the command parser takes it as a command,
    so no command the parser obeys (a leading space was one) goes without a job."""
    import re

    import yaml

    from assay.core.forge.base import command_of

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "desk.yml").read_text())
    condition = " ".join(str(job.get("if", "")) for job in workflow["jobs"].values())
    tests = re.findall(r"(startsWith|contains)\(github\.event\.comment\.body,\s*'([^']*)'\)", condition)
    assert tests, condition
    for body in (" /assay retry", "/assay retry", "/ASSAY retry", "\n/assay retry", "please /assay retry", "/assay"):
        low = body.lower()
        passes = {"startsWith": lambda text, low=low: low.startswith(text.lower()),
                  "contains": lambda text, low=low: text.lower() in low}
        starts = all(passes[function](text) for function, text in tests)
        assert starts == (command_of(body) is not None), (body, tests)


# -- the suite's own: a step whose command is killed alone is journaled over only once its whole group is gone


def test_a_step_whose_command_is_killed_ends_only_when_its_whole_group_is_gone(forge: Forge, tmp_path: Path) -> None:
    """The command of `assay step run` dies (killed by a person, or by the kernel's OOM killer); its child, which
    makes the effect, must not run on after the journal says the step ended."""
    mark = f"promise-outlived-{os.getpid()}-{time.monotonic_ns()}"
    started, log = tmp_path / "started", tmp_path / "deployed.log"
    script = tmp_path / "deploy.sh"
    script.write_text(f"touch {started}\nsh -c 'sleep 3; echo deployed >> {log}' {mark} &\nwait\n")
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1", "run assay step run --name deploy "
                                                     f"--policy unsafe -- sh {script}"], "test -f ship.txt")})
    desk = start_desk(forge, "builder", tmp_path, tmp_path / "desk.log")
    try:
        await_path(started, desk)
        await_process(mark, desk)  # the child that makes the effect runs
        [(outer, _)] = [p for p in processes_with(f"sh {script}") if "step run" not in p[1]]
        os.kill(outer, signal.SIGKILL)
        deadline, alive = time.monotonic() + 30, processes_with(mark)
        while not (ended := [e for e in entries(forge.path, "ship") if e["kind"] == "result"
                             and e.get("step") == "deploy"]):
            alive = processes_with(mark)
            assert time.monotonic() < deadline, "the step was never journaled over"
            time.sleep(0.05)
        # the result is journaled only once the command's whole group is gone (here: the child made its effect)
        assert processes_with(mark) == [], f"the step was journaled over ({ended}) while its child ran on"
        assert alive == [] or log.exists(), alive
    finally:
        end_group(desk) if desk.poll() is None else None
        end_all(mark)


def test_a_step_client_killed_takes_its_commands_children_with_it(forge: Forge, tmp_path: Path) -> None:
    """`assay step run` SIGKILLed (by the kernel's OOM killer, or a person): the step is journaled
    `outcome_unknown`; the child of its command that makes the effect must not run on, or the agent's inspection
    settles `did-not` before the effect lands, the step runs again, and the effect happens twice."""
    mark = f"promise-client-{os.getpid()}-{time.monotonic_ns()}"
    started, log, script = tmp_path / "started", tmp_path / "deployed.log", tmp_path / "deploy.sh"
    script.write_text(f"touch {started}\nsh -c 'sleep 3; echo deployed >> {log}' {mark} &\nwait\n")
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1", "run assay step run --name deploy "
                                                     f"--policy unsafe -- sh {script}"], "test -f ship.txt")})
    desk = start_desk(forge, "builder", tmp_path, tmp_path / "desk.log")
    try:
        await_path(started, desk)
        await_process(mark, desk)
        [(client, _)] = [p for p in processes_with(f"sh {script}") if "step run" in p[1]
                         and not p[1].startswith(("sh ", "/bin/sh "))]
        os.kill(client, signal.SIGKILL)
        deadline = time.monotonic() + 2
        while processes_with(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = processes_with(mark)
        time.sleep(1.5)  # past the child's own end, had it lived
        assert left == [] and not log.exists(), f"the effect outlived its step client: {left}, {log.exists()}"
    finally:
        end_group(desk) if desk.poll() is None else None
        end_all(mark)
