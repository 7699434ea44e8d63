"""An agent cannot read its desk's secrets: not from its environment, not from any /proc entry it can open."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Forge
from tests.helpers.desks import brief, desk_env, publish
from tests.journal_check import entries

TOKENS = {"GITHUB_TOKEN": "ghp_" + "Tk1" * 12, "ASSAY_TOKEN": "assay-token-" + "Q7" * 10}
PASSWORD = "PaSsWoRd-" + "z9" * 8

# The agent's probe: every environ and cmdline it can read, then a pause (bounded) in which the test looks at the
# desk from outside.
SCAN = """for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  printf '== %s\\n' "$f"; tr '\\0' '\\n' < "$f" 2>/dev/null; printf '\\n'
done > {seen}
touch {ready}
i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"""

def _namespaces_work() -> bool:
    """Whether this machine lets a user start a process in PID and mount namespaces of its own (judged here with
    util-linux, not by the code under test)."""
    try:
        return subprocess.run(["unshare", "--user", "--map-current-user", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_isolation = pytest.mark.skipif(not _namespaces_work(), reason="no unprivileged user namespaces here")


def _wait_for(path: Path, proc: subprocess.Popen[str], deadline_s: float = 60) -> None:
    end = time.monotonic() + deadline_s
    while not path.exists():
        assert proc.poll() is None, f"the desk ended ({proc.returncode}) before its agent scanned"
        assert time.monotonic() < end, f"no {path.name} after {deadline_s}s"
        time.sleep(0.05)


def _scan_from_an_agent(work: Forge, tmp_path: Path, forge_arg: str) -> tuple[str, str, str]:
    """What the agent read, and what the desk's own /proc environ and cmdline showed meanwhile (from outside);
    then the desk's output."""
    seen, ready, go = tmp_path / "seen.txt", tmp_path / "ready", tmp_path / "go"
    script = tmp_path / "scan.sh"
    script.write_text(SCAN.format(seen=seen, ready=ready, go=go))
    publish(work, {"briefs/peek.md": brief("Peek", [f"run sh {script}", "write ok.txt ok"], "test -f ok.txt")})
    env = {**os.environ, **desk_env(tmp_path), **TOKENS}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", forge_arg],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(ready, desk)
        outside = Path(f"/proc/{desk.pid}/environ").read_bytes() + Path(f"/proc/{desk.pid}/cmdline").read_bytes()
        go.touch()
        out, _ = desk.communicate(timeout=120)
    finally:
        if desk.poll() is None:
            desk.kill()
            desk.wait()
    assert desk.returncode == 0, out
    return seen.read_text(errors="replace"), outside.decode(errors="replace"), out


@needs_isolation
def test_an_agent_scanning_proc_finds_no_token_and_the_desk_holds_none_in_its_environ(
        work: Forge, tmp_path: Path) -> None:
    seen, outside, out = _scan_from_an_agent(work, tmp_path, work.url)
    assert "ASSAY_BRIEF=peek" in seen  # the scan did read environments: its own
    for token in TOKENS.values():
        assert token not in seen, "the agent read a forge token from /proc"
        assert token not in outside, "the desk still shows its token in /proc/<desk>/environ"
        assert token not in out
    assert f"/proc/{os.getpid()}/" not in seen  # the test's (and desk's) processes are not in the agent's /proc


@needs_isolation
def test_a_password_in_a_file_forge_url_is_dropped_and_hidden_from_proc(work: Forge, tmp_path: Path) -> None:
    seen, outside, out = _scan_from_an_agent(work, tmp_path, f"file://user:{PASSWORD}@{work.path}")
    assert "ASSAY_BRIEF=peek" in seen
    assert PASSWORD not in seen and PASSWORD not in outside and PASSWORD not in out
    assert "desk started on" in out


def test_the_agent_is_signalled_itself_and_its_namespace_ends_with_it(tmp_path: Path) -> None:
    """SIGTERM reaches the agent (its handler runs, its exit code is the desk's answer); a process it left in a
    session of its own, as the agent CLIs start their tools, does not outlive it where isolation is on."""
    from assay.desk import isolation  # here: the other tests run where the module is missing

    started = tmp_path / "started"
    agent = isolation.Isolated(["sh", "-c", f"trap 'exit 3' TERM; setsid sleep {LEFT_BEHIND} & touch {started}; "
                                            "wait"], text=True)
    end = time.monotonic() + 30
    while not started.exists():
        assert time.monotonic() < end
        time.sleep(0.05)
    assert _left_behind(), "the agent's session-of-its-own child did not start"
    agent.terminate()
    assert agent.wait(timeout=30) == 3
    if agent.isolated:
        assert not _left_behind(), "a process of the agent's namespace outlived the agent"
    else:
        for pid in _left_behind():
            os.kill(pid, 9)


LEFT_BEHIND = 3171  # seconds a left-behind `sleep` would run: its argv names it


def _left_behind() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/cmdline").read_bytes() == f"sleep\x00{LEFT_BEHIND}\x00".encode():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_desk_where_namespaces_are_refused_says_so_at_start_and_still_works(work: Forge, tmp_path: Path) -> None:
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (shim / "unshare").chmod(0o755)
    publish(work, {"briefs/plain.md": brief("Plain", ["write ok.txt ok"], "test -f ok.txt")})
    env = {**os.environ, **desk_env(tmp_path), "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", work.url],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "review ready" in run.stdout, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "desk started on" in lines[0]
    assert lines[1] == ("builder: warning: agents run without isolation here (`unshare` failed: unshare: unshare "
                        "failed: Operation not permitted): an agent running as this user can read the environment "
                        "and command line of this user's other processes, the shell that started this desk and the "
                        "git processes that carry the forge token included; allow unprivileged user namespaces "
                        "(sysctl kernel.unprivileged_userns_clone=1, or kernel.apparmor_restrict_unprivileged_userns"
                        "=0) or run the desk as a user of its own")


@needs_isolation
def test_neither_the_agent_nor_a_verify_row_finds_the_token_in_the_shell_that_started_the_desk(
        work: Forge, tmp_path: Path) -> None:
    """As on Actions, where the step's shell holds the token: the desk runs under a shell that keeps it in its
    environment. The agent and the verify rows (which run the code the agent wrote) each look for the token
    in every /proc entry they can read."""
    secret = tmp_path / "secret"  # the token, for the probe to compare with (never on its command line)
    secret.write_text(TOKENS["GITHUB_TOKEN"])
    probe = tmp_path / "probe.sh"
    probe.write_text(f'tok=$(cat {secret}); n=0\nfor f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do\n'
                     '  n=$((n+1)); tr "\\0" "\\n" < "$f" 2>/dev/null | grep -qF "$tok" && echo "FOUND $f"\n'
                     'done > "$1"; echo "read $n" >> "$1"\n')
    found_by = {who: tmp_path / f"{who}.txt" for who in ("agent", "row")}
    publish(work, {"briefs/peek.md": brief("Peek", [f"run sh {probe} {found_by['agent']}", "write ok.txt ok"],
                                           f"sh {probe} {found_by['row']}")})
    env = {**os.environ, **desk_env(tmp_path), **TOKENS}
    shell = subprocess.run(["sh", "-c", '"$@"; code=$?; exit $code', "sh", sys.executable, "-m", "assay", "desk",
                            "run", "builder", "--once", "--forge", work.url], env=env, capture_output=True,
                           text=True, timeout=120)
    assert shell.returncode == 0 and "review ready" in shell.stdout, shell.stdout + shell.stderr
    for who, path in found_by.items():
        text = path.read_text()
        assert "FOUND" not in text, f"the {who} read the token: {text}"
        assert "read " in text and int(text.split("read ")[1]) >= 2, text  # it did look


@needs_isolation
def test_a_step_run_by_an_isolated_agent_names_its_client_by_the_desks_pid(work: Forge, tmp_path: Path) -> None:
    """The step's intent names the life that runs its effect: the client's pid as the desk sees it (the kernel
    translates SO_PEERCRED), not the small pid the client has inside the agent's namespace."""
    inner, stat = tmp_path / "inner.pid", tmp_path / "client.stat"
    # the command's parent is the client's keeper (procs.py): the client is the keeper's parent
    command = f"sh -c 'c=$(cut -d\" \" -f4 /proc/$PPID/stat); echo $c > {inner}; cat /proc/$c/stat > {stat}'"
    publish(work, {"briefs/st.md": brief("St", [f"run {sys.executable} -m assay step run --name probe -- {command}",
                                                "write ok.txt ok"], "test -f ok.txt")})
    run = subprocess.run([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", work.url],
                         env={**os.environ, **desk_env(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "review ready" in run.stdout, run.stdout + run.stderr
    seen_inside = int(inner.read_text())
    intent = next(e for e in entries(work.path, "st") if e["kind"] == "intent" and e.get("step") == "probe")
    start_inside = int(stat.read_text().rsplit(")", 1)[1].split()[19])  # field 22 of proc(5)
    assert seen_inside < 100 and intent["data"]["pid"] != seen_inside  # the namespace's pid is not recorded
    assert intent["data"]["start"] == start_inside  # the same process: its start time, read on either side
