"""`assay step run`, `assay step value` and `assay journal` as an agent's shell meets them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from assay.core.claims import Claims
from tests.conftest import REPO, Forge, Run, assay
from tests.helpers import procs
from tests.helpers.journals import replace_journal
from tests.journal_check import claim_chain, entries, invariants


@pytest.fixture
def ctx(forge: Forge, claims: Claims) -> dict[str, str]:
    claims.claim("alpha", "d")
    return {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
            "ASSAY_RUN": "r1"}


def deploy_args(log: Path, name: str = "deploy") -> list[str]:
    return ["step", "run", "--name", name, "--", "sh", "-c", f'echo "deployed $ASSAY_IDEMPOTENCY_KEY" >> {log}; '
            'echo shipped']


def deploy(log: Path, ctx: dict[str, str], run: str = "r1", crash: str | None = None, name: str = "deploy") -> Run:
    env = {**ctx, "ASSAY_RUN": run}
    if crash:
        env["ASSAY_CRASH_AT"] = crash
    return assay(*deploy_args(log, name), env=env)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_completed_step_is_replayed_not_rerun(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    first = deploy(log, ctx)
    assert first.code == 0 and "shipped" in first.out
    again = deploy(log, ctx, run="r2")
    assert again.code == 0 and "shipped" in again.out and "not run again" in again.err
    assert len(lines(log)) == 1
    assert lines(log)[0].startswith("deployed alpha/1/deploy/")
    assert invariants(forge.path, "alpha") == []


def test_the_exit_code_is_the_commands_and_is_recorded(ctx: dict[str, str]) -> None:
    args = ("step", "run", "--name", "fail", "--", "sh", "-c", "echo nope; exit 7")
    assert assay(*args, env=ctx).code == 7
    replay = assay(*args, env={**ctx, "ASSAY_RUN": "r2"})
    assert replay.code == 7 and "nope" in replay.out


def test_crashed_step_run_then_refused_then_allowed(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    crashed = deploy(log, ctx, crash="step.after-execute:deploy")
    assert crashed.code == -signal.SIGKILL and len(lines(log)) == 1
    refused = deploy(log, ctx)  # the agent tries again, same run
    assert refused.code == 4
    assert "The previous `deploy` operation was interrupted" in refused.err
    assert "Do not repeat it blindly" in refused.err and "NOT be replayed automatically" in refused.err
    assert len(lines(log)) == 1
    deliberate = deploy(log, ctx)
    assert deliberate.code == 0 and len(lines(log)) == 2
    kinds = [e["kind"] for e in entries(forge.path, "alpha")]
    assert kinds == ["intent", "outcome_unknown", "refused", "intent", "result"]
    assert invariants(forge.path, "alpha") == []


def test_an_interrupted_idempotent_command_reruns_with_its_key(forge: Forge, ctx: dict[str, str],
                                                               tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    args = ("step", "run", "--name", "charge", "--policy", "idempotent", "--input", '{"amount": 5}', "--",
            "sh", "-c", f'echo "$ASSAY_IDEMPOTENCY_KEY" >> {log}')
    assert assay(*args, env={**ctx, "ASSAY_CRASH_AT": "step.after-execute:charge"}).code == -signal.SIGKILL
    assert assay(*args, env={**ctx, "ASSAY_RUN": "r2"}).code == 0
    keys = lines(log)
    assert len(keys) == 2 and keys[0] == keys[1]


def test_recorded_values_replay_and_a_mismatch_blocks(forge: Forge, ctx: dict[str, str]) -> None:
    now = assay("step", "value", "now", env=ctx)
    rnd = assay("step", "value", "random", "--bytes", "8", env=ctx)
    assert now.code == 0 and rnd.code == 0 and len(rnd.out.strip()) == 16
    assert assay("step", "value", "now", env={**ctx, "ASSAY_RUN": "r2"}).out == now.out
    assert assay("step", "value", "random", "--bytes", "8", env={**ctx, "ASSAY_RUN": "r2"}).out == rnd.out
    wrong = assay("step", "value", "uuid", env={**ctx, "ASSAY_RUN": "r3"})
    assert wrong.code == 5 and "replay mismatch" in wrong.err and "Traceback" not in wrong.err
    assert claim_chain(forge.path, "alpha")[-1]["state"] == "blocked"


def test_a_fenced_agent_cannot_run_an_unsafe_effect(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    assert assay("release", "alpha", "--force", "--reason", "taken over", "--forge", forge.url).code == 0
    assert assay("claim", "alpha", "--desk", "d", "--forge", forge.url).code == 0  # epoch 2
    run = deploy(log, ctx)  # still says epoch 1
    assert run.code == 3 and "fenced" in run.err
    assert lines(log) == []
    assert [(e["kind"], e["data"]["action"]) for e in entries(forge.path, "alpha")] == [("claim", "force-release")]


def test_missing_context_is_bad_input(forge: Forge) -> None:
    run = assay("step", "run", "--name", "x", "--", "true", env={"ASSAY_FORGE": forge.url})
    assert run.code == 2 and "ASSAY_BRIEF" in run.err and "ASSAY_EPOCH" in run.err


def test_bad_input_json_is_bad_input(ctx: dict[str, str]) -> None:
    run = assay("step", "run", "--name", "x", "--input", "{nope", "--", "true", env=ctx)
    assert run.code == 2 and "--input is not JSON" in run.err


def test_the_command_gets_no_forge_credentials(ctx: dict[str, str], tmp_path: Path) -> None:
    dump = tmp_path / "env.json"
    secrets = {"GITHUB_TOKEN": "ghp_x", "GH_TOKEN": "gho_y", "ASSAY_GITHUB_TOKEN": "z", "ASSAY_TOKEN": "w"}
    run = assay("step", "run", "--name", "env", "--", sys.executable, "-c",
                f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))", env={**ctx, **secrets})
    assert run.code == 0
    seen = json.loads(dump.read_text())
    assert not set(secrets) & set(seen)
    assert seen["ASSAY_IDEMPOTENCY_KEY"].startswith("alpha/1/env/")


@pytest.mark.parametrize(("policy", "kind"), [("unsafe", "outcome_unknown"), ("safe", "result")])
def test_sigterm_during_a_step_is_recorded(forge: Forge, ctx: dict[str, str], policy: str, kind: str) -> None:
    env = {**os.environ, **ctx}
    proc = subprocess.Popen([sys.executable, "-m", "assay", "step", "run", "--name", "slow", "--policy", policy,
                             "--", "sh", "-c", "echo started; exec sleep 60"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"  # the effect is running
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 143
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert "Traceback" not in err and err.startswith("cancelled: the command was stopped")  # a desk's step's words
    last = entries(forge.path, "alpha")[-1]
    assert last["kind"] == kind
    if kind == "result":
        assert last["status"] == "cancelled"
    assert invariants(forge.path, "alpha") == []


def test_journal_timeline_and_json(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    deploy(tmp_path / "log", ctx)
    data = assay("journal", "alpha", "--forge", forge.url, "--json").json()
    assert isinstance(data, dict)
    assert [e["kind"] for e in data["entries"]] == ["intent", "result"]
    table = assay("journal", "alpha", "--forge", forge.url)
    assert table.code == 0 and "deploy#0" in table.out and "completed exit 0" in table.out


def test_a_step_running_now_is_not_started_twice(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    env = {**os.environ, **ctx}
    args = ["step", "run", "--name", "pay", "--", "sh", "-c", f"echo paid >> {log}; echo started; exec sleep 60"]
    first = subprocess.Popen([sys.executable, "-m", "assay", *args], env=env, stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None and first.stdout.readline().strip() == "started"
    second = assay(*args, env=ctx)
    assert second.code == 4 and "is running now" in second.err
    first.terminate()
    first.wait(timeout=30)
    assert lines(log) == ["paid"]
    assert invariants(forge.path, "alpha") == []


def refused_as_interrupted(forge: Forge, repeat: Run) -> None:
    assert repeat.code == 4 and "running now" not in repeat.err, repeat.err
    assert "It may or may not have completed successfully" in repeat.err
    assert [e["kind"] for e in entries(forge.path, "alpha")] == ["intent", "outcome_unknown", "refused"]
    assert entries(forge.path, "alpha")[1]["data"] == {"reason": "interrupted"}
    assert invariants(forge.path, "alpha") == []


def test_a_zombie_writer_is_not_running_now(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    env = {**os.environ, **ctx, "ASSAY_CRASH_AT": "step.before-execute:deploy"}
    parent = subprocess.Popen([sys.executable, str(REPO / "tests" / "helpers" / "no_reaper.py"), sys.executable,
                               "-m", "assay", *deploy_args(log)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdin is not None and parent.stdout is not None
    try:
        writer = int(parent.stdout.readline())
        procs.await_state(writer, "Z")  # killed itself after the intent; its parent does not reap it
        life = (os.uname().nodename, writer, procs.start_ticks(writer), procs.boot_id())
        repeat = deploy(log, ctx)
        assert procs.state(writer) == "Z"
    finally:
        parent.stdin.close()
        parent.wait(timeout=30)
    refused_as_interrupted(forge, repeat)
    assert lines(log) == []
    intent = entries(forge.path, "alpha")[0]["data"]
    assert (intent["host"], intent["pid"], intent.get("start"), intent.get("boot")) == life


def test_a_writer_whose_pid_was_reused_is_not_running_now(forge: Forge, ctx: dict[str, str],
                                                          tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    assert deploy(log, ctx, crash="step.before-execute:deploy").code == -signal.SIGKILL
    [intent] = entries(forge.path, "alpha")
    with procs.sleeper() as other:  # a live process, unrelated to the writer, now holds a pid
        start = procs.start_ticks(other.pid)
        replace_journal(forge, "alpha", [{**intent, "data": {**intent["data"], "pid": other.pid, "start": start}}])
        same_life = deploy(log, ctx)
        assert same_life.code == 4 and "is running now" in same_life.err  # the very life named: it runs
        assert "its result is journaled when it ends" in same_life.err  # same epoch: the claim still holds it
        refusal = entries(forge.path, "alpha")[1:]  # the refusal is journaled; the intent stays open
        assert [(e["kind"], e["data"]["running"]) for e in refusal] == [("note", intent["seq"])]
        replace_journal(forge, "alpha", [intent])
        replace_journal(forge, "alpha", [{**intent, "data": {**intent["data"], "pid": other.pid, "start": start - 1}}])
        repeat = deploy(log, ctx)
        assert procs.state(other.pid) in ("S", "R")
    refused_as_interrupted(forge, repeat)
    assert lines(log) == []


def test_replayed_refusals_keep_the_run_count(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    assert deploy(log, ctx, crash="step.after-execute:deploy").code == -signal.SIGKILL
    assert deploy(log, ctx).code == 4  # refused
    assert deploy(log, ctx).code == 0  # deliberate
    # a later run replays: refused (call 0 was interrupted), refused (call 1), then the recorded success
    codes = [deploy(log, ctx, run="r2").code for _ in range(3)]
    assert codes == [4, 4, 0]
    assert len(lines(log)) == 2


def test_a_credentialed_forge_url_is_stripped_for_the_command(ctx: dict[str, str], tmp_path: Path) -> None:
    from assay.core.envs import scrubbed_env

    env = scrubbed_env({"ASSAY_FORGE": "https://x-access-token:ghs_abc@github.com/o/r.git", "PATH": "/bin"})
    assert env["ASSAY_FORGE"] == "https://github.com/o/r.git"


def test_concurrent_step_runs_of_one_brief_all_land_without_gaps(forge: Forge, ctx: dict[str, str],
                                                                 tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    env = {**os.environ, **ctx}
    procs = [subprocess.Popen([sys.executable, "-m", "assay", "step", "run", "--name", f"tool{i}", "--policy",
                               "unsafe", "--", "sh", "-c", f"echo tool{i} >> {log}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(8)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert sorted(lines(log)) == sorted(f"tool{i}" for i in range(8))
    es = entries(forge.path, "alpha")
    assert sorted(e["step"] for e in es if e["kind"] == "result") == sorted(f"tool{i}" for i in range(8))
    assert invariants(forge.path, "alpha") == []


def test_a_person_steers_while_an_agent_appends(forge: Forge, ctx: dict[str, str], tmp_path: Path) -> None:
    env = {**os.environ, **ctx}
    procs = [subprocess.Popen([sys.executable, "-m", "assay", "step", "run", "--name", f"t{i}", "--", "true"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    procs += [subprocess.Popen([sys.executable, "-m", "assay", "steer", "alpha", f"note {i}", "--forge", forge.url],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for i in range(3)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 7, errors
    es = entries(forge.path, "alpha")
    assert sorted(e["data"]["text"] for e in es if e["kind"] == "steer") == ["note 0", "note 1", "note 2"]
    assert invariants(forge.path, "alpha") == []
