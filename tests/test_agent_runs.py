"""How a desk runs any agent: preflight, stdin, the time limit, steps it cuts off, probes, settles, and a review
held back while an unsafe step has no known outcome. Real desk, agent and step processes on a forge on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Forge, assay, audit_failures, git
from tests.fakegithub import FakeGitHub
from tests.helpers import procs
from tests.helpers.desks import brief, desk_env, publish, run_desk
from tests.helpers.gitlog import lists_refs
from tests.helpers.journals import replace_journal
from tests.journal_check import claim_chain, entries, invariants

SH_DESK = """name: {name}
takes:
  labels: [work]
agent:
  command: {command}
  timeout_s: {timeout}
  install: {install}
lease_s: 120
heartbeat_s: 5
attempts: {attempts}
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, "ASSAY_EFFECTS_*"]
"""


def sh_desk(forge: Forge, name: str, script: str, timeout: int = 600, attempts: int = 1,
            install: str = "apt-get install nothing") -> None:
    command = json.dumps(["sh", "-c", script]) if script else json.dumps(["no-such-agent-cli", "-p", "{prompt}"])
    publish(forge, {f"desks/{name}.yaml": SH_DESK.format(name=name, command=command, timeout=timeout,
                                                          attempts=attempts, install=json.dumps(install))})


def refs(forge: Forge) -> str:
    return git("--git-dir", str(forge.path), "for-each-ref", "--format=%(refname) %(objectname)")


def test_a_missing_agent_is_a_clear_error_before_anything_is_claimed(forge: Forge, tmp_path: Path) -> None:
    sh_desk(forge, "ghost", "", install="npm install -g no-such-agent-cli")
    publish(forge, {"briefs/job.md": brief("Job", [], "true")})
    before = refs(forge)
    run = run_desk(forge, "ghost", tmp_path)
    assert run.code == 2, run.out + run.err
    assert "cannot start its agent 'no-such-agent-cli': it is not on PATH" in run.err
    assert "npm install -g no-such-agent-cli" in run.err and "Traceback" not in run.err
    assert refs(forge) == before  # nothing claimed, no sweep recorded: the forge untouched


def test_an_agent_that_exits_127_is_not_a_verify_failure(forge: Forge, tmp_path: Path) -> None:
    sh_desk(forge, "broken", "exec missing-interpreter-xyz", attempts=3)  # starts, then cannot run what it needs
    publish(forge, {"briefs/job.md": brief("Job", [], "true")})
    run = run_desk(forge, "broken", tmp_path)
    assert run.code == 2 and "cannot start its agent 'sh': it exited 127" in run.err, run.out + run.err
    assert "attempt" not in run.out.replace("agent attempt 1", "")  # no failed attempts, no verify rows run
    assert not [e for e in entries(forge.path, "job") if e["kind"] == "verify"]
    last = claim_chain(forge.path, "job")[-1]
    assert last["state"] == "released" and "exited 127" in str(last["reason"])  # another desk may take it


def test_an_agent_gets_no_stdin(forge: Forge, tmp_path: Path) -> None:
    sh_desk(forge, "reader", "cat > stdin.txt; echo read > done.txt")
    publish(forge, {"briefs/job.md": brief("Job", [], "test -f done.txt && test ! -s stdin.txt")})
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "reader", "--once", "--forge", forge.url],
                            env={**os.environ, **desk_env(tmp_path)}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # its stdin stays open
    out, err = desk.communicate(timeout=120)
    assert desk.returncode == 0 and "review ready" in out, out + err
    assert claim_chain(forge.path, "job")[-1]["state"] == "waiting"


def test_an_agent_past_its_time_limit_is_stopped_and_its_step_cancelled(forge: Forge, tmp_path: Path) -> None:
    effect = tmp_path / "effect"
    script = (f"{sys.executable} -m assay step run --name deploy -- sh -c 'touch {effect}.started; sleep 300; "
              f"touch {effect}.done'; sleep 300")
    sh_desk(forge, "slow", script, timeout=3)
    publish(forge, {"briefs/job.md": brief("Job", [], "true")})
    run = run_desk(forge, "slow", tmp_path)
    assert run.code == 5, run.err
    assert "agent stopped at its time limit (3s)" in run.out
    assert Path(f"{effect}.started").exists() and not Path(f"{effect}.done").exists()
    ends = [(e["kind"], (e.get("data") or {}).get("reason")) for e in entries(forge.path, "job")
            if e.get("step") == "deploy"]
    # an isolated agent's namespace ends with it, its step client too: the desk then journals the client gone
    assert ends[0] == ("intent", None) and ends[1:] in ([("outcome_unknown", "cancelled by its desk")],
                                                        [("outcome_unknown", "its process ended without a result")])
    if ends[1][1] == "cancelled by its desk":  # the desk cancelled it (else the client's end came first, on a slow
        assert "a step in flight" in run.out and "was cancelled; its end is journaled" in run.out  # machine)
    last = claim_chain(forge.path, "job")[-1]
    assert last["state"] == "blocked" and "time limit (3s)" in str(last["reason"])
    assert "`deploy` has no known outcome" in str(last["reason"])  # and the review is not marked ready
    assert invariants(forge.path, "job") == []


def step(forge: Forge, run: str, *args: str, crash: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": run, **({"ASSAY_CRASH_AT": crash} if crash else {})}
    return subprocess.run([sys.executable, "-m", "assay", "step", *args], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize(("crash", "verdict", "deployed"), [("step.after-execute:deploy", "happened", 1),
                                                             ("step.before-execute:deploy", "did-not", 1)])
def test_a_probe_settles_an_unknown_outcome_both_ways(forge: Forge, tmp_path: Path, crash: str, verdict: str,
                                                      deployed: int) -> None:
    assert assay("claim", "alpha", "--desk", "d", "--forge", forge.url).code == 0
    log = tmp_path / "effects.log"
    probe = f"test -f {log} && grep -q deployed {log}"  # exit 0: it happened, 1: it did not
    deploy = ("run", "--name", "deploy", "--policy", "unsafe", "--probe", probe, "--", "sh", "-c",
              f"echo deployed >> {log}")
    assert step(forge, "r1", *deploy, crash=crash).returncode < 0  # killed: cut off before or after the effect
    again = step(forge, "r2", *deploy)  # the writer is dead: its probe runs, and settles it
    assert again.returncode == 0, again.stderr
    assert log.read_text().count("deployed") == deployed  # once, whichever way it went
    journal = entries(forge.path, "alpha")
    settle = next(e for e in journal if (e.get("data") or {}).get("settled"))
    assert settle["data"]["settled"] == verdict and settle["data"]["by"] == "probe"
    assert settle["data"]["evidence"]["exit_code"] == (0 if verdict == "happened" else 1)
    intents = [e for e in journal if e["kind"] == "intent"]
    assert len(intents) == (1 if verdict == "happened" else 2)  # did not happen: this call ran it
    assert "already completed" in again.stderr if verdict == "happened" else "already completed" not in again.stderr
    assert invariants(forge.path, "alpha") == [] and audit_failures(forge.url, "alpha") == {}


def test_a_person_settles_an_unknown_with_evidence(forge: Forge, tmp_path: Path) -> None:
    assert assay("claim", "alpha", "--desk", "d", "--forge", forge.url).code == 0
    log = tmp_path / "effects.log"
    deploy = ("run", "--name", "deploy", "--", "sh", "-c", f"echo deployed >> {log}")
    step(forge, "r1", *deploy, crash="step.before-execute:deploy")
    nothing = assay("step", "settle", "deploy", "--brief", "alpha", "--forge", forge.url)
    assert nothing.code == 2 and "--happened or --did-not" in nothing.err
    other = assay("step", "settle", "migrate", "--brief", "alpha", "--did-not", "--forge", forge.url)
    assert other.code == 2 and "step 'migrate' has no unknown outcome to settle" in other.err
    done = assay("step", "settle", "deploy", "--brief", "alpha", "--forge", forge.url, "--",
                 "sh", "-c", f"test -f {log}", env={"ASSAY_PERSON": "ops"})
    assert done.code == 0 and "settled as did-not by person:ops" in done.out, done.err
    kinds = [(e["kind"], e["run"]) for e in entries(forge.path, "alpha")]
    assert kinds[-2:] == [("outcome_unknown", "person:ops"), ("result", "person:ops")]
    assert step(forge, "r2", *deploy).returncode == 0  # did not happen: the next call runs it
    assert log.read_text() == "deployed\n"
    assert invariants(forge.path, "alpha") == [] and audit_failures(forge.url, "alpha") == {}


def test_a_review_waits_until_every_unsafe_step_has_an_outcome(forge: Forge, tmp_path: Path) -> None:
    """The agent deploys, its step process dies after the effect, and the agent ignores it: the verify rows pass,
    yet the review is not marked ready and the brief is blocked. A person inspects and settles; released, the
    brief's next round replays the settled deploy and the review is marked ready."""
    publish(forge, {"desks/builder.yaml": SH_DESK.format(
        name="builder", command=json.dumps(["python", "-m", "assay.agents.scripted"]), timeout=600, attempts=2,
        install='""')})
    deploy = (f"run {sys.executable} -m assay step run --name deploy -- sh -c "
              "'echo deployed >> $ASSAY_EFFECTS_LOG' || true")
    publish(forge, {"briefs/ship.md": brief("Ship", ["write ship.txt v1", deploy], "test -f ship.txt")})
    first = run_desk(forge, "builder", tmp_path, ASSAY_CRASH_AT="step.after-execute:deploy")
    assert first.code == 5, first.err  # a brief now needs a person
    last = claim_chain(forge.path, "ship")[-1]
    assert last["state"] == "blocked" and "`deploy` has no known outcome" in str(last["reason"]), first.out
    assert "review ready" not in first.out
    assert (tmp_path / "effects.log").read_text() == "deployed\n"
    settled = assay("step", "settle", "deploy", "--brief", "ship", "--happened", "--evidence", "the log shows it",
                    "--forge", forge.url)
    assert settled.code == 0, settled.err
    assert assay("release", "ship", "--force", "--reason", "deploy checked", "--forge", forge.url).code == 0
    second = run_desk(forge, "builder", tmp_path)
    assert second.code == 0 and "review ready" in second.out, second.out + second.err
    assert (tmp_path / "effects.log").read_text() == "deployed\n"  # settled as happened: never run again
    assert invariants(forge.path, "ship") == [] and audit_failures(forge.url, "ship") == {}


def test_the_sweep_reports_a_step_that_outlives_its_desk(forge: Forge, tmp_path: Path) -> None:
    holder = subprocess.run([sys.executable, "-m", "assay", "claim", "alpha", "--desk", "d", "--forge", forge.url],
                            capture_output=True, text=True, timeout=60)  # held by a process now over
    assert holder.returncode == 0, holder.stderr
    assert step(forge, "r1", "run", "--name", "deploy", "--", "true", crash="step.before-execute:deploy").returncode
    [intent] = entries(forge.path, "alpha")
    with procs.sleeper() as stray:  # the step's writer, still running after its desk is gone
        life = {"pid": stray.pid, "start": procs.start_ticks(stray.pid)}
        replace_journal(forge, "alpha", [{**intent, "data": {**intent["data"], **life}}])
        swept = assay("sweep", "--dry-run", "--json", "--forge", forge.url)
    assert swept.code == 0, swept.err
    view = swept.json()
    assert isinstance(view, dict)
    strays = [f for f in view["findings"] if f["kind"] == "stray"]
    assert [f["brief"] for f in strays] == ["alpha"] and f"process {stray.pid}" in strays[0]["detail"]


def test_no_forge_credential_reaches_an_agent_whatever_it_is_named() -> None:
    from assay.core.envs import agent_env

    token = "ghs_" + "x" * 36
    desk = {"PATH": "/bin", "GITHUB_TOKEN": token, "MY_COPY": token, "ANTHROPIC_API_KEY": "sk-ant-model-key",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:1", "OTHER_PAT": "github_pat_" + "y" * 30,
            "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader", "GIT_CONFIG_VALUE_0": "x",
            "UNRELATED": "kept out"}
    env = agent_env(["PATH", "ANTHROPIC_*", "MY_*", "OTHER_*", "GIT_*", "GITHUB_TOKEN"], {},
                    base=desk, extra={"DEPLOY_TARGET": "staging", "LEAK": token})
    assert env == {"PATH": "/bin", "ANTHROPIC_API_KEY": "sk-ant-model-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
                   "DEPLOY_TARGET": "staging"}


def test_desk_and_brief_env_settings_are_checked_with_their_line(tmp_path: Path) -> None:
    from assay.core.briefs import check_brief
    from assay.core.deskspec import check_desk

    text = ('name: d\nagent:\n  command: [x]\n  timeout_s: 0\n  shell: bash\nenv_allow: ["A B"]\n'
            'env: {GITHUB_TOKEN: x}\n')
    _, problems = check_desk(text, "desks/d.yaml")
    said = [f"{p.line}: {p.message}" for p in problems]
    assert any("`agent.timeout_s` must be a whole number above 0" in s for s in said), said
    assert any("unknown agent key 'shell'" in s for s in said), said
    assert any(s.startswith("6: `env_allow` must be a list of variable names or patterns") for s in said), said
    assert any(s.startswith("7: `env` may not set GITHUB_TOKEN") for s in said), said
    brief, found = check_brief("---\ntitle: T\nenv:\n  ASSAY_EPOCH: 9\n  bad name: x\n  OK: [1]\n---\nT\n",
                               "briefs/t.md", "t")
    assert brief is None
    assert [(p.line, p.message.split(":")[0]) for p in found] == [
        (4, "`env` may not set ASSAY_EPOCH"), (5, "`env` name 'bad name' is not a variable name"),
        (6, "`env.OK` must be a string")]


def test_a_verify_row_runs_in_its_own_group_and_leaves_nothing_behind(tmp_path: Path) -> None:
    from assay.core.briefs import VerifyRow
    from assay.desk.verify import run_row

    held = tmp_path / "held"
    os.mkfifo(held)
    quick = run_row(VerifyRow("bg", f"cat {held} > /dev/null & echo ok"), tmp_path, 60, dict(os.environ))
    assert quick["passed"] and quick["tail"].strip() == "ok" and quick["duration_ms"] < 30000  # not its timeout
    with pytest.raises(OSError):  # the background reader was killed with the row's group
        os.close(os.open(held, os.O_WRONLY | os.O_NONBLOCK))
    slow = run_row(VerifyRow("slow", f"cat {held} > /dev/null & sleep 300", timeout_s=1), tmp_path, 60,
                   dict(os.environ))
    assert slow["exit_code"] == -1 and not slow["passed"] and "(timed out)" in slow["tail"]
    with pytest.raises(OSError):
        os.close(os.open(held, os.O_WRONLY | os.O_NONBLOCK))


def test_a_password_in_the_forge_url_is_in_no_argument_list(fake_github: FakeGitHub, tmp_path: Path) -> None:
    """`--forge https://user:TOKEN@host/...`: git gets the credential as a header from its environment, and a
    listing from Assay's own process sends it as that header, so no process's argument list shows it (a shim `git`
    first on PATH records every argv), and the command works."""
    fake_github.create_repo("o", "r")
    token = fake_github.token
    shim_dir, seen = tmp_path / "shim", tmp_path / "argv.log"
    shim_dir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    (shim_dir / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {seen}\nexec {real} "$@"\n')
    (shim_dir / "git").chmod(0o755)
    url = fake_github.git_url("o", "r").replace("http://", f"http://x-access-token:{token}@")
    env = {"PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}", "ASSAY_FORGE": url}
    served = len(fake_github.git_served)
    run = assay("claims", "--json", env=env)
    assert run.code == 0, run.err
    logged = seen.read_text()
    read = [line for line in logged.splitlines() if lists_refs(line)]
    assert read or len(fake_github.git_served) > served  # it read the forge (which takes no request without it)
    assert token not in logged and token not in run.out + run.err, logged


@pytest.mark.parametrize(("crash", "verdict"), [("step.before-execute:deploy", "--did-not"),
                                                ("step.after-execute:deploy", "--happened")])
def test_a_settled_step_runs_at_most_once_across_replayed_runs(forge: Forge, tmp_path: Path, crash: str,
                                                              verdict: str) -> None:
    """Run A is cut off in its deploy; run B's repeat is refused, the agent settles the deploy and calls again;
    run C replays B's calls from the top. The deploy ran once in all, whichever way it was settled."""
    assert assay("claim", "alpha", "--desk", "d", "--forge", forge.url).code == 0
    log = tmp_path / "effects.log"
    deploy = ("run", "--name", "deploy", "--", "sh", "-c", f"echo deployed >> {log}")
    assert step(forge, "A", *deploy, crash=crash).returncode < 0
    assert step(forge, "B", *deploy).returncode == 4  # refused once
    assert step(forge, "B", "settle", "deploy", verdict).returncode == 0
    assert step(forge, "B", *deploy).returncode == 0  # did not: runs now; happened: returns the settle
    first = step(forge, "C", *deploy)
    assert first.returncode in (0, 4), first.stderr  # happened: the settle; did not: B's refusal, replayed
    assert step(forge, "C", *deploy).returncode == 0  # what B's second call got, not run again
    if verdict == "--happened":  # settled as having happened: no later call of it runs it
        assert step(forge, "C", *deploy).returncode == 0
    assert log.read_text() == "deployed\n"
    assert invariants(forge.path, "alpha") == [] and audit_failures(forge.url, "alpha") == {}
