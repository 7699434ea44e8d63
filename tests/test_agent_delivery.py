"""What a desk hands its agent reaches it, and an agent that cannot work through no fault of the brief burns nothing.

A desk definition must name where its agent reads the text it is handed (`{prompt}`, `{prompt_file}`, or
`agent.prompt`); one that cannot deliver it is refused before anything is claimed. An agent whose model refuses
its key, or that shows no sign of work for its idle limit, is ended and the brief handed back with its attempts
unspent, in the CLI's own words. Real desk and agent processes on a forge on disk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assay.core.deskspec import check_desk
from tests.agentmodels.brain import Action, Conversation, Finish, Run
from tests.agentmodels.server import ModelServer, Reply, Request, json_reply
from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.aider import AIDER, MODEL, model_metadata
from tests.helpers.clidesks import AGENTS, TIMEOUT, finish, project
from tests.helpers.clidesks import desk as launch
from tests.helpers.clidesks import desk_env as clis_env
from tests.helpers.desks import brief, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants

DESK = """name: {name}
takes:
  labels: [work]
agent:
  command: {command}
{agent}lease_s: 120
heartbeat_s: 5
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ]
"""
SESSION = """  session:
    new: [--session-id, "{session}"]
    resume: [--resume, "{session}"]
    file: "{home}/t/{session}.jsonl"
"""


def desk(name: str, command: list[str], agent: str = "") -> str:
    return DESK.format(name=name, command=json.dumps(command), agent=agent)


def refs(forge: Forge) -> str:
    return git("--git-dir", str(forge.path), "for-each-ref", "--format=%(refname) %(objectname)")


def problems(text: str) -> list[str]:
    return [str(p) for p in check_desk(text, "desks/d.yaml")[1]]


def test_a_desk_that_resumes_its_agent_must_say_where_the_agent_reads_its_prompt(forge: Forge,
                                                                                   tmp_path: Path) -> None:
    """`agent.session` set, and no {prompt} in the command: the resumed agent would get `--resume ID` only and the
    steering would reach no one. Refused before anything is claimed, with what to do; the forge is untouched."""
    publish(forge, {"desks/resumer.yaml": desk("resumer", ["sh", "-c", "true"], SESSION),
                    "briefs/job.md": brief("Job", [], "true")})
    before = refs(forge)
    run = run_desk(forge, "resumer", tmp_path)
    assert run.code == 2 and "Traceback" not in run.err, run.out + run.err
    assert "desks/resumer.yaml" in run.err and "names no {prompt} or {prompt_file}" in run.err, run.err
    assert "agent.prompt: stdin" in run.err  # the hint says how to fix it
    assert refs(forge) == before
    listed = assay("desk", "list", "--json", "--forge", forge.url).json()
    assert isinstance(listed, dict) and any("names no {prompt} or {prompt_file}" in p for p in listed["problems"])


def test_every_route_a_desk_names_is_one_its_agent_reads() -> None:
    assert problems(desk("d", ["claude", "-p", "{prompt}"], SESSION)) == []
    assert problems(desk("d", ["agent", "{prompt_file}"], SESSION)) == []
    assert problems(desk("d", ["agent"], SESSION + "  prompt: stdin\n")) == []
    assert problems(desk("d", ["agent"], SESSION + "  prompt: env\n")) == []  # said outright: it reads the file
    said = problems(desk("d", ["claude", "-p", "--permission-mode", "dontAsk"]))  # no session, but claude
    assert said and "claude reads its prompt from its arguments or stdin" in said[0], said
    said = problems(desk("d", ["codex", "exec"], "  prompt: env\n"))
    assert said and "codex reads its prompt from its arguments or stdin" in said[0], said
    said = problems(desk("d", ["claude", "-p", "{prompt_file}"]))
    assert said and "{prompt_file} would hand it a path" in said[0], said
    said = problems(desk("d", ["/opt/bin/aider", "--yes-always"], "  prompt: stdin\n"))
    assert said and "aider reads its prompt from its arguments, never from stdin" in said[0], said
    said = problems(desk("d", ["agent"], "  prompt: argument\n"))
    assert said and "names neither {prompt} nor {prompt_file}" in said[0], said
    said = problems(desk("d", ["agent"], "  prompt: mail\n"))
    assert said and "`agent.prompt` must be one of argument, stdin, env" in said[0], said


def test_a_prompt_on_stdin_reaches_the_agent(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/reader.yaml": desk("reader", ["sh", "-c", "cat > got.txt"], "  prompt: stdin\n"),
                    "briefs/job.md": brief("Read the prompt", [], "grep -q 'Read the prompt' got.txt")})
    run = run_desk(forge, "reader", tmp_path)
    assert run.code == 0 and "review ready" in run.out, run.out + run.err


def test_steering_that_arrives_during_verify_reaches_the_agent_before_the_review_is_ready(forge: Forge,
                                                                                        tmp_path: Path) -> None:
    """The agent has ended and its verify row runs (held at a FIFO) when a person steers: the desk runs the agent
    again with the steering before it marks the review ready; the agent's output shows it got the text."""
    gate, mark = tmp_path / "gate", tmp_path / "verifying"
    os.mkfifo(gate)
    held = f"test -e {mark}.done || {{ touch {mark}; cat {gate} > /dev/null; touch {mark}.done; }}; test -f out.txt"
    publish(forge, {"desks/steady.yaml": desk("steady", ["python", "-m", "assay.agents.scripted"]),
                    "briefs/job.md": brief("Job", ["steering", "write out.txt hi"], held)})
    env = {**os.environ, "ASSAY_STATE_DIR": str(tmp_path / "state")}
    running = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "steady", "--once", "--forge",
                                forge.url], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()[0]
        time.sleep(0.05)
    text = "Use the staging database"
    steered = subprocess.run([sys.executable, "-m", "assay", "steer", "job", text, "--json", "--forge", forge.url],
                             capture_output=True, text=True, timeout=60)
    assert steered.returncode == 0, steered.stderr
    release(gate)
    out, _ = running.communicate(timeout=120)
    assert running.returncode == 0 and "review ready" in out, out
    assert f"steering received: {text}" in out and "runs again with it before the review is marked ready" in out
    seq = json.loads(steered.stdout)["seq"]
    journal = entries(forge.path, "job")
    delivered = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("steer") == "delivered"]
    [ready] = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("review") == "ready"]
    assert [e["data"]["of"] for e in delivered] == [seq] and delivered[0]["seq"] < ready["seq"], journal
    assert invariants(forge.path, "job") == []


def delivered_then_ready(forge: Forge, seq: int) -> list[dict[str, object]]:
    """The journal, after checking that steering `seq` was delivered once, before the review was last marked ready."""
    journal = entries(forge.path, "job")
    delivered = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("steer") == "delivered"]
    ready = [e for e in journal if e["kind"] == "result" and e.get("step") == "ready"]
    assert [e["data"]["of"] for e in delivered] == [seq] and ready and delivered[0]["seq"] < ready[-1]["seq"], journal
    assert claim_chain(forge.path, "job")[-1]["state"] == "waiting" and invariants(forge.path, "job") == []
    return journal


def test_steering_a_brief_waiting_on_its_review_wakes_it_for_a_round_that_takes_it(forge: Forge,
                                                                                  tmp_path: Path) -> None:
    """The review is ready and the brief waits on it when a person steers: `steer` wakes it for a new round (as
    requested changes do) and says so; the desk's next pass runs the agent with the steering, then waits again."""
    publish(forge, {"desks/steady.yaml": desk("steady", ["python", "-m", "assay.agents.scripted"]),
                    "briefs/job.md": brief("Job", ["steering", "write out.txt hi"], "test -f out.txt")})
    first = run_desk(forge, "steady", tmp_path)
    assert first.code == 0 and "review ready" in first.out, first.out + first.err
    assert claim_chain(forge.path, "job")[-1]["state"] == "waiting"
    text = "Use the staging database"
    steered = assay("steer", "job", text, "--json", "--forge", forge.url)
    assert steered.code == 0, steered.err
    told = json.loads(steered.out)
    assert "woken" in told["when"] and claim_chain(forge.path, "job")[-1]["state"] == "held", told
    again = run_desk(forge, "steady", tmp_path)
    assert again.code == 0 and f"steering received: {text}" in again.out and "review ready" in again.out, again.out
    journal = delivered_then_ready(forge, told["seq"])
    [wake] = [e for e in journal if e["kind"] == "wake"]
    data = wake["data"]
    assert isinstance(data, dict) and data["signals"] == [f"steer:{told['seq']}:round"], wake
    assert told["seq"] < int(str(wake["seq"])), wake


def test_steering_whose_wake_was_cut_off_is_taken_by_the_next_desk_pass(forge: Forge, tmp_path: Path) -> None:
    """`steer` killed after its entry landed and before it woke the waiting brief: the desk's next pass finds
    steering that no run took on a brief waiting on its review, wakes it and runs the agent with it."""
    publish(forge, {"desks/steady.yaml": desk("steady", ["python", "-m", "assay.agents.scripted"]),
                    "briefs/job.md": brief("Job", ["steering", "write out.txt hi"], "test -f out.txt")})
    assert run_desk(forge, "steady", tmp_path).code == 0
    text = "Keep the old flag"
    cut = assay("steer", "job", text, "--forge", forge.url, env={"ASSAY_CRASH_AT": "steer.after-entry"})
    assert cut.code == -9 and claim_chain(forge.path, "job")[-1]["state"] == "waiting", cut
    [seq] = [e["seq"] for e in entries(forge.path, "job") if e["kind"] == "steer"]
    again = run_desk(forge, "steady", tmp_path)
    assert "steering that no run took; woken for a new round" in again.out, again.out
    assert f"steering received: {text}" in again.out and again.code == 0, again.out
    delivered_then_ready(forge, seq)


def test_steering_whose_wake_was_cut_off_is_woken_by_the_sweep(forge: Forge, tmp_path: Path) -> None:
    """The same cut-off `steer`, for a brief whose desk lives on (elsewhere: it looked once, as the brief began to
    wait): the sweep, which reads every journal that moved, wakes it for a round, once, and the next pass takes it."""
    publish(forge, {"desks/steady.yaml": desk("steady", ["python", "-m", "assay.agents.scripted"]),
                    "briefs/job.md": brief("Job", ["steering", "write out.txt hi"], "test -f out.txt")})
    assert run_desk(forge, "steady", tmp_path).code == 0
    assert assay("sweep", "--forge", forge.url).code == 0  # the journal as observed before the steering
    text = "Keep the old flag"
    cut = assay("steer", "job", text, "--forge", forge.url, env={"ASSAY_CRASH_AT": "steer.after-entry"})
    assert cut.code == -9 and claim_chain(forge.path, "job")[-1]["state"] == "waiting", cut
    [seq] = [e["seq"] for e in entries(forge.path, "job") if e["kind"] == "steer"]
    swept = assay("sweep", "--forge", forge.url)
    assert swept.code == 0 and "steering no run took: woken for a new round" in swept.out, swept.out + swept.err
    assert claim_chain(forge.path, "job")[-1]["state"] == "held"
    [wake] = [e for e in entries(forge.path, "job") if e["kind"] == "wake"]
    assert isinstance(wake["data"], dict) and wake["data"]["signals"] == [f"steer:{seq}:round"], wake
    assert assay("sweep", "--forge", forge.url).code == 0
    assert len([e for e in entries(forge.path, "job") if e["kind"] == "wake"]) == 1  # once
    again = run_desk(forge, "steady", tmp_path)
    assert f"steering received: {text}" in again.out and again.code == 0, again.out
    delivered_then_ready(forge, seq)


# a forge hook that steers the brief once, while the desk's push of its wait is in flight: the steering lands
# after every look the desk made at the journal and before its wait, which then lands on top of it
STEER_IN_FLIGHT = """#!/bin/sh
lines=$(cat)
test -e "{mark}" && exit 0
echo "$lines" | grep -q ' refs/assay/claims/job$' || exit 0
jtip=$(echo "$lines" | awk '$3 == "refs/assay/journal/job" {{print $2}}')
test -n "$jtip" && git log -1 --format=%s "$jtip" | grep -q 'wait)' || exit 0
touch "{mark}"
env -u GIT_DIR -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \
    {python} -m assay steer job "{text}" --json --forge "{forge}" > "{mark}.out" 2>&1
exit 0
"""


def test_steering_that_lands_as_the_wait_is_pushed_wakes_the_brief_for_a_round(forge: Forge, tmp_path: Path) -> None:
    """The race the promise suite found: steering whose entry lands just before the desk's wait (the desk had
    checked for late steering already, its wait then lands on top of it). The desk sees it as the brief begins to
    wait, wakes it for a round in the same pass, and the agent gets the text before the review is ready again."""
    text, mark = "Mind the cache", tmp_path / "steered"
    publish(forge, {"desks/steady.yaml": desk("steady", ["python", "-m", "assay.agents.scripted"]),
                    "briefs/job.md": brief("Job", ["steering", "write out.txt hi"], "test -f out.txt")})
    hook = forge.path / "hooks" / "pre-receive"
    hook.write_text(STEER_IN_FLIGHT.format(mark=mark, python=sys.executable, text=text, forge=forge.url))
    hook.chmod(0o755)
    run = run_desk(forge, "steady", tmp_path)
    assert mark.exists() and run.code == 0, run.out + run.err
    told = json.loads(Path(f"{mark}.out").read_text())
    journal = delivered_then_ready(forge, told["seq"])
    waits = [e["seq"] for e in journal if e["kind"] == "wait"]
    assert waits[0] > told["seq"] and len(waits) == 2, journal  # the first wait landed on the steering
    assert "woken for a new round" in run.out and f"steering received: {text}" in run.out, run.out


# Claude Code's words when its model answers 401 (measured: it retries, then says this and exits 1)
REFUSED = "Invalid API key · Fix external API key"


def test_a_model_that_refuses_the_key_burns_no_attempt(forge: Forge, tmp_path: Path) -> None:
    """The agent exits 1 saying its model refused the key: the desk stops with the CLI's words and what to fix,
    the brief is handed back (released, no verify run, no attempt failed) and the next desk can work it."""
    script = f"echo 'working on it'; echo '{REFUSED}' >&2; exit 1"
    publish(forge, {"desks/keyless.yaml": desk("keyless", ["sh", "-c", script]),
                    "briefs/job.md": brief("Job", [], "true")})
    run = run_desk(forge, "keyless", tmp_path)
    assert run.code == 2 and "Traceback" not in run.err, run.out + run.err
    assert "its model refused the agent's credentials (exit 1): Invalid API key" in run.err, run.err
    assert "give the agent a valid model key" in run.err and "assay desk run keyless" in run.err, run.err
    assert "attempt 1 failed" not in run.out and "agent attempt 2" not in run.out, run.out
    journal = entries(forge.path, "job")
    assert not [e for e in journal if e["kind"] == "verify"]
    assert [e["kind"] for e in journal if e.get("step") == "agent"] == ["intent"]  # no result: not an attempt spent
    last = claim_chain(forge.path, "job")[-1]
    assert last["state"] == "released" and "Invalid API key" in str(last["reason"]), last
    assert "then run `assay desk run keyless`" in str(last["reason"])  # what to do next, on the board too
    publish(forge, {"desks/keyless.yaml": desk("keyless", ["sh", "-c", "echo done > out.txt"])})  # a key, say
    again = run_desk(forge, "keyless", tmp_path)
    assert again.code == 0 and "job agent attempt 1 " in again.out and "review ready" in again.out, again.out
    assert invariants(forge.path, "job") == []


def test_an_agent_with_no_sign_of_work_is_ended_as_idle_not_failed(forge: Forge, tmp_path: Path) -> None:
    """An agent that says nothing and calls nothing (a model that never answers) is ended after `agent.idle_s`,
    reported as idle, and the brief handed back unburned; not held for `timeout_s` x attempts."""
    publish(forge, {"desks/stuck.yaml": desk("stuck", ["sh", "-c", "exec sleep 300"], "  idle_s: 2\n"),
                    "briefs/job.md": brief("Job", [], "true")})
    started = time.monotonic()
    run = run_desk(forge, "stuck", tmp_path)
    took = time.monotonic() - started
    assert run.code == 2 and "Traceback" not in run.err, run.out + run.err
    assert "showed no sign of work for 2s" in run.err and "ended as idle" in run.err, run.err
    assert "agent.idle_s" in run.err and took < 60, (took, run.err)
    assert not [e for e in entries(forge.path, "job") if e["kind"] == "verify"]
    last = claim_chain(forge.path, "job")[-1]
    assert last["state"] == "released" and "idle" in str(last["reason"]), last
    assert "agent.idle_s" in str(last["reason"]) and "assay desk run" in str(last["reason"]), last


def test_an_agent_that_only_retries_its_model_is_idle(forge: Forge, tmp_path: Path) -> None:
    """Codex out of reach of its model prints `Reconnecting... waiting for network` for ever: lines about the
    model's trouble are no sign of work, so the idle limit ends it, and its words are quoted."""
    script = "while :; do echo 'ERROR: Reconnecting... waiting for network'; sleep 0.3; done"
    publish(forge, {"desks/offline.yaml": desk("offline", ["sh", "-c", script], "  idle_s: 2\n"),
                    "briefs/job.md": brief("Job", [], "true")})
    run = run_desk(forge, "offline", tmp_path)
    assert run.code == 2 and "ended as idle; it last said: ERROR: Reconnecting..." in run.err, run.out + run.err
    assert claim_chain(forge.path, "job")[-1]["state"] == "released"


def test_a_quiet_agent_whose_step_runs_long_is_not_idle(forge: Forge, tmp_path: Path) -> None:
    """A step in flight is work, however quiet: an agent inside a 4 s step outlives an idle limit of 2 s."""
    step = f"{sys.executable} -m assay step run --name build -- sleep 4"
    publish(forge, {"desks/builder.yaml": desk("builder", ["sh", "-c", f"{step} > /dev/null && touch built"],
                                               "  idle_s: 2\n"),
                    "briefs/job.md": brief("Job", [], "test -f built")})
    run = run_desk(forge, "builder", tmp_path)
    assert run.code == 0 and "review ready" in run.out, run.out + run.err


# -- the real CLIs, as the presets run them, against scripted models -----------------------------------------

STEER = "Also say hello in capitals, HELLO."
GATED = """---
title: Ship the greeting
labels: [code]
env:
  STEER_GATE: {gate}
  STEER_MARK: {mark}
verify:
  - id: greeting
    run: "grep -q hello greet.txt"
---
Write greet.txt saying hello.
"""
# the gate (a FIFO) holds the tool call until the test has steered; the mark says the call has begun
IN_TOOL = 'printf "hello\\n" > greet.txt; echo in-tool > "$STEER_MARK"; cat "$STEER_GATE" > /dev/null; echo through'


def gated(conversation: Conversation) -> Action:
    """The model: one command that blocks inside the tool call, then done; steered, it says it heard."""
    if any(STEER in text for text in conversation.texts):
        return Finish("Heard the steering.")
    if not any(e.command == IN_TOOL for e in conversation.exchanges):
        return Run(IN_TOOL)
    return Finish("Done.")


def release(gate: Path) -> None:
    """Let the blocked tool call go on: open the FIFO for writing (waiting for its reader) and close it."""
    opened = threading.Thread(target=lambda: os.close(os.open(gate, os.O_WRONLY)), daemon=True)
    opened.start()
    opened.join(60)
    assert not opened.is_alive(), "the tool call never opened its gate"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "route"), [*((name, "argument") for name in sorted(AGENTS)), ("claude", "stdin")])
def test_steering_sent_inside_a_tool_call_reaches_the_model_before_the_review_is_ready(name: str, route: str,
                                                                                       tmp_path: Path) -> None:
    """The preset as shipped (a heartbeat every 300 s: none passes during the run), and Claude Code's given its
    prompt on stdin instead. A person steers while the agent's only tool call is blocked; the call then ends. Claude
    Code's hook hands the steering over with the call's result; Codex is resumed with it at its turn's end. The
    model's request log holds it within one turn, the journal notes it delivered, and only after that is the review
    marked ready, in the same attempt."""
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    gate, mark = tmp_path / "gate", tmp_path / "in-tool"
    os.mkfifo(gate)
    forge = project(tmp_path, GATED.format(gate=gate, mark=mark))
    if route == "stdin":
        preset_with(forge, tmp_path, name, 'command: [claude, -p, "{prompt}",',
                    "prompt: stdin\n  command: [claude, -p,")
    with agent.server(gated) as server:
        running = launch(name, forge, clis_env(agent, server, tmp_path))
        deadline = time.monotonic() + TIMEOUT
        while not mark.exists():
            assert running.poll() is None and time.monotonic() < deadline, f"{running.communicate()[0]}" \
                f"\n{server.debug()}"
            time.sleep(0.05)
        steered = subprocess.run([sys.executable, "-m", "assay", "steer", "ship", STEER, "--json", "--forge",
                                  str(forge)], capture_output=True, text=True, timeout=60)
        assert steered.returncode == 0, steered.stderr
        release(gate)
        out = finish(running, server)
    detail = f"{out}\n{server.debug()}"
    posts = [line for line in server.debug().splitlines() if "POST /v1/" in line]
    if name == "claude":  # its hook hands the text over with the tool call's result: the very next request holds it
        assert "handed to the agent at its turn's end" in out and len(posts) == 2, detail
    else:  # no such hook: stopped at its turn's end (or its run's) and resumed with it, within one model turn
        assert len(posts) <= 3, detail
    assert "Write greet.txt saying hello." in server.transcript.conversations[0].prompt, detail  # by its route
    heard = [c for c in server.transcript.conversations if any(STEER in t for t in c.texts)]
    assert heard and any(e.command == IN_TOOL for e in heard[0].exchanges), detail  # the same conversation
    assert "review ready" in out and "agent attempt 2" not in out, detail
    seq = json.loads(steered.stdout)["seq"]
    journal = entries(forge, "ship")
    delivered = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("steer") == "delivered"]
    [ready] = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("review") == "ready"]
    assert [e["data"]["of"] for e in delivered] == [seq] and delivered[0]["seq"] < ready["seq"], detail
    assert invariants(forge, "ship") == [] and audit_failures(str(forge), "ship") == {}


class Refusing(ModelServer):
    """A model API that answers every model request 401, in the API's own error shape."""

    def __init__(self, brain: object = None, anthropic: bool = True) -> None:
        super().__init__()
        self.anthropic = anthropic

    def handle(self, request: Request) -> Reply:
        if request.method == "HEAD" or request.method == "GET":
            return Reply()
        if self.anthropic:
            return json_reply({"type": "error", "error": {"type": "authentication_error",
                                                          "message": "invalid x-api-key"}}, 401)
        return json_reply({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                     "code": "invalid_api_key"}}, 401)

    @property
    def base_url(self) -> str:
        return self.url if self.anthropic else f"{self.url}/v1"


class Silent(ModelServer):
    """A model API that takes every model request and never answers it (until the test ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.done = threading.Event()

    def handle(self, request: Request) -> Reply:
        if request.method in ("HEAD", "GET"):
            return Reply()
        self.wait_unlocked(self.done, TIMEOUT)
        return json_reply({}, 503)


def preset_with(forge: Path, tmp_path: Path, name: str, old: str, new: str) -> None:
    work = tmp_path / "project"
    preset = (work / "desks" / f"{name}.yaml").read_text()
    assert old in preset
    (work / "desks" / f"{name}.yaml").write_text(preset.replace(old, new))
    git("commit", "-qam", f"{name}: {new.strip()}", cwd=work)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=work)


WORDS = {"claude": "Invalid API key", "codex": "401 Unauthorized"}  # each CLI's own words for a 401


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_model_answering_401_leaves_the_brief_unburned_in_the_clis_words(name: str, tmp_path: Path) -> None:
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    forge = project(tmp_path, GATED.format(gate=tmp_path / "no-gate", mark=tmp_path / "mark"))
    with Refusing(anthropic=name == "claude") as server:
        env = {**clis_env(agent, server, tmp_path), "CLAUDE_CODE_MAX_RETRIES": "0"}  # its 10 retries take minutes
        running = launch(name, forge, env)
        out, _ = running.communicate(timeout=TIMEOUT)
    detail = f"{out}\n{server.debug()}"
    assert running.returncode == 2 and "Traceback" not in out, detail
    assert "its model refused the agent's credentials" in out and WORDS[name] in out, detail
    assert f"assay desk run {name}" in out and "attempt 1 failed" not in out, detail
    journal = entries(forge, "ship")
    assert not [e for e in journal if e["kind"] == "verify"], detail
    assert [e["kind"] for e in journal if e.get("step") == "agent"] == ["intent"], detail  # no attempt spent
    last = claim_chain(forge, "ship")[-1]
    assert last["state"] == "released" and WORDS[name] in str(last["reason"]), last


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_model_out_of_reach_hands_the_brief_back_in_the_clis_words(name: str, tmp_path: Path) -> None:
    """The model's address refuses connections: Claude Code says so and exits 1; Codex says `Reconnecting...` for
    ever, so the idle limit ends it. Either way the brief is handed back unburned, with the CLI's words."""
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    forge = project(tmp_path, GATED.format(gate=tmp_path / "no-gate", mark=tmp_path / "mark"))
    preset_with(forge, tmp_path, name, "idle_s: 600", "idle_s: 15")
    with Refusing() as server:
        env = {**clis_env(agent, server, tmp_path), "CLAUDE_CODE_MAX_RETRIES": "0"}
    running = launch(name, forge, env)  # the server is gone: its port refuses connections
    out, _ = running.communicate(timeout=TIMEOUT)
    assert running.returncode == 2 and "Traceback" not in out, out
    # the CLI's own words: Claude Code 2.1.197 says "Unable to connect to API", 2.1.332 "Connection refused"
    said = {"claude": r"its model could not be reached \(exit 1\): API Error: (Unable to connect to API|Connection "
                      r"refused)",
            "codex": r"ended as idle; it last said: ERROR: Reconnecting\.\.\. waiting for network"}[name]
    assert re.search(said, out), out
    assert not [e for e in entries(forge, "ship") if e["kind"] == "verify"]
    assert claim_chain(forge, "ship")[-1]["state"] == "released"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_a_model_that_never_answers_is_ended_by_the_idle_limit(name: str, tmp_path: Path) -> None:
    agent = AGENTS[name]
    if agent.installed is None:
        pytest.skip(f"{name} is not installed (sh tests/install-agents.sh)")
    forge = project(tmp_path, GATED.format(gate=tmp_path / "no-gate", mark=tmp_path / "mark"))
    preset_with(forge, tmp_path, name, "idle_s: 600", "idle_s: 15")  # a CLI may take seconds to ask its model
    with Silent() as server:
        started = time.monotonic()
        try:
            running = launch(name, forge, clis_env(agent, server, tmp_path))
            out, _ = running.communicate(timeout=TIMEOUT)
        finally:
            server.done.set()
        took = time.monotonic() - started
    detail = f"{out}\n{server.debug()}"
    assert running.returncode == 2 and "Traceback" not in out, detail
    assert "showed no sign of work for 15s" in out and "ended as idle" in out and took < 120, (took, detail)
    assert [r for r in server.log if "POST" in r], detail  # the model was asked, and never answered
    assert not [e for e in entries(forge, "ship") if e["kind"] == "verify"], detail
    last = claim_chain(forge, "ship")[-1]
    assert last["state"] == "released" and "idle" in str(last["reason"]), last
    assert "agent.idle_s" in str(last["reason"]) and "assay desk run" in str(last["reason"]), last


@pytest.mark.slow
@pytest.mark.skipif(AIDER is None, reason="aider is not installed (sh tests/install-agents.sh)")
def test_aider_exiting_0_on_a_refused_key_leaves_the_brief_unburned(tmp_path: Path) -> None:
    """aider says `litellm.AuthenticationError` and exits 0 when its model answers 401: its own error line, not
    the exit code, tells the desk the model failed it; the brief is handed back unburned in aider's words."""
    assert AIDER is not None
    forge = project(tmp_path, GATED.format(gate=tmp_path / "no-gate", mark=tmp_path / "mark"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aider").symlink_to(AIDER)
    with Refusing(anthropic=False) as server:
        env = {**os.environ, "HOME": str(tmp_path / "home"), "ASSAY_STATE_DIR": str(tmp_path / "state"),
               "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]), "AIDER_MODEL": MODEL,
               "OPENAI_API_BASE": server.url, "OPENAI_API_KEY": "sk-scripted-wrong-key",
               "AIDER_MODEL_METADATA_FILE": str(model_metadata(tmp_path / "model-metadata.json"))}
        running = launch("aider", forge, env)
        out, _ = running.communicate(timeout=TIMEOUT)
    detail = f"{out}\n{server.debug()}"
    assert running.returncode == 2 and "Traceback" not in out, detail
    assert "its model refused the agent's credentials (exit 0): litellm.AuthenticationError" in out, detail
    assert "attempt 1 failed" not in out, detail
    assert not [e for e in entries(forge, "ship") if e["kind"] == "verify"], detail
    last = claim_chain(forge, "ship")[-1]
    assert last["state"] == "released" and "AuthenticationError" in str(last["reason"]), last


def test_a_run_handed_no_steering_reads_nothing_to_note_its_delivery() -> None:
    """Every agent run that ends notes the steering it took as delivered; a run handed none (most) makes no port of
    its own and reads no journal for it (it did: a listing and a `git cat-file` process every run)."""
    from types import SimpleNamespace

    from assay.desk.agent import Steering

    class NoPort:
        def spare(self) -> None:
            raise AssertionError("a port was made to note no steering")

    said: list[str] = []
    run = SimpleNamespace(steering=(), brief=SimpleNamespace(id="b"))
    steering = Steering(NoPort(), SimpleNamespace(name="d"), run, "run", said.append)  # type: ignore[arg-type]
    steering.delivered([])
    assert steering.told == set() and said == []
    with pytest.raises(AssertionError, match="a port was made"):
        steering.delivered([3])  # handed some: its note is journaled, through a port of its own
