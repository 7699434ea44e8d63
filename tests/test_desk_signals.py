"""A desk stopped the ways a machine stops it (SIGTERM from `timeout`, `systemctl stop` or a cancelled CI job; SIGHUP
when its terminal goes), paused (SIGSTOP) while a second process of it starts, or meeting a ref lock a killed push
left on the forge: real processes, real signals, the forge read with plain git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.lives import life_of
from assay.errors import ClaimLost
from tests.conftest import Forge, assay
from tests.helpers.desks import DESK, desk_env, publish
from tests.helpers.desks import brief as brief_text
from tests.helpers.gitdaemon import GitDaemon
from tests.helpers.procs import await_state
from tests.journal_check import claim_chain, entries

DESK_SLEEPY = """name: patient
takes:
  labels: [work]
agent:
  command: [sh, -c, "echo started > {mark}; sleep 60"]
lease_s: 600
heartbeat_s: 60
attempts: 3
env_allow: [PATH, HOME]
"""
SLOW_BRIEF = "---\ntitle: Slow\nlabels: [work]\n---\nTake your time.\n"


def start_desk(forge: Forge, tmp_path: Path, name: str, *args: str) -> subprocess.Popen[str]:
    """`assay desk run NAME ARGS` in a session of its own, as a service manager starts it."""
    return subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", name, "--forge", forge.url, *args],
                            env={**os.environ, **desk_env(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=_default_signals)


def _default_signals() -> None:
    """As a service manager or a terminal starts a command: the signals at their defaults, even when this test runs
    under `nohup` or `&` (an ignored signal stays ignored across exec)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def await_line(path: Path, timeout_s: float = 60) -> str:
    """The first line written to the FIFO at `path` (an agent saying it started), or "" after `timeout_s`."""
    said: list[str] = []
    heard = threading.Thread(target=lambda: said.append(path.read_text()), daemon=True)
    heard.start()
    heard.join(timeout=timeout_s)
    return said[0] if said else ""


def end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)


@pytest.mark.parametrize(("sig", "group"), [(signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGTERM, True)],
                         ids=["SIGTERM", "SIGHUP", "SIGTERM-to-the-group"])
def test_sigterm_and_sighup_hand_the_brief_back_as_ctrl_c_does(forge: Forge, tmp_path: Path, sig: int,
                                                               group: bool) -> None:
    """The signal reaches the desk alone (as `kill` sends it), or its whole process group, agent too (as `systemctl
    stop` does), mid-agent: the desk releases the brief with the reason in the claim chain and the journal, and
    exits 128 + the signal's number."""
    mark = tmp_path / "agent-started"
    os.mkfifo(mark)
    publish(forge, {"desks/patient.yaml": DESK_SLEEPY.format(mark=mark), "briefs/slow.md": SLOW_BRIEF})
    desk = start_desk(forge, tmp_path, "patient", "--poll", "1")
    try:
        assert await_line(mark) == "started\n", desk.poll()
        os.killpg(desk.pid, sig) if group else os.kill(desk.pid, sig)
        out, _ = desk.communicate(timeout=60)
    finally:
        end(desk)
    name = signal.Signals(sig).name
    assert desk.returncode == 128 + sig, out
    assert f"released slow (desk patient was stopped by {name})" in out and "Traceback" not in out
    chain = claim_chain(forge.path, "slow")
    assert chain[-1]["state"] == "released" and f"stopped by {name}" in chain[-1]["reason"], chain[-1]
    assert any(f"stopped by {name}" in json.dumps(e) for e in entries(forge.path, "slow"))


def test_a_stop_whose_journal_write_fails_still_stops_the_desk(forge: Forge, tmp_path: Path) -> None:
    """SIGTERM to the desk mid-agent while its forge cannot be reached (moved away here; a group signal that ends
    the desk's own git processes does the same by chance): the agent step's end cannot be journaled, and the
    error that says so must not hide the stop. The desk says the brief is still held and exits 143 at once; it
    does not take the stop for an interrupted pass and go on to claim again."""
    mark = tmp_path / "agent-started"
    os.mkfifo(mark)
    publish(forge, {"desks/patient.yaml": DESK_SLEEPY.format(mark=mark), "briefs/slow.md": SLOW_BRIEF})
    desk = start_desk(forge, tmp_path, "patient", "--poll", "1")
    away = forge.path.with_name("away.git")
    try:
        assert await_line(mark) == "started\n", desk.poll()
        forge.path.rename(away)
        os.killpg(desk.pid, signal.SIGTERM)
        out, _ = desk.communicate(timeout=60)
    finally:
        end(desk)
        if away.exists():
            away.rename(forge.path)
    assert desk.returncode == 143, out
    assert "slow is still held" in out and "interrupted by the forge" not in out and "Traceback" not in out, out
    assert out.count("agent attempt") == 1, out
    assert claim_chain(forge.path, "slow")[-1]["state"] == "held"  # its lease ends it; the sweep tells


def test_sigterm_to_an_idle_desk_ends_it_quietly(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/patient.yaml": DESK_SLEEPY.format(mark=tmp_path / "unused")})
    desk = start_desk(forge, tmp_path, "patient", "--poll", "1")
    try:
        assert desk.stdout is not None
        assert "desk started" in desk.stdout.readline()
        os.kill(desk.pid, signal.SIGTERM)
        out, _ = desk.communicate(timeout=60)
    finally:
        end(desk)
    assert desk.returncode == 143 and "Traceback" not in out, out


def test_a_desk_started_under_nohup_ignores_sighup(forge: Forge, tmp_path: Path) -> None:
    """`nohup assay desk run …` must outlive its terminal: SIGHUP, ignored at start, stays ignored. A SIGTERM sent
    right after it is what ends the desk (a handled SIGHUP, the lower number, would have come first)."""
    publish(forge, {"desks/patient.yaml": DESK_SLEEPY.format(mark=tmp_path / "unused")})

    def nohup() -> None:
        _default_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "patient", "--forge", forge.url],
                            env={**os.environ, **desk_env(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=nohup)
    try:
        assert desk.stdout is not None
        assert "desk started" in desk.stdout.readline()
        os.kill(desk.pid, signal.SIGHUP)
        os.kill(desk.pid, signal.SIGTERM)
        out, _ = desk.communicate(timeout=60)
    finally:
        end(desk)
    assert desk.returncode == 143 and "SIGTERM" in out and "SIGHUP" not in out, out


DESK_SOLO = """name: solo
takes:
  labels: [work]
agent:
  command: [sh, -c, "if mkdir {first} 2>/dev/null; then echo started > {mark}; sleep 600; fi;
    exec {python} -m assay.agents.scripted"]
lease_s: 30
heartbeat_s: 1
singleton: true
attempts: 1
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]
"""


def forge_refs(forge: Forge, brief: str = "") -> str:
    """Every ref on the forge (the brief's own, given `brief`), read with plain git."""
    patterns = [f"refs/assay/{kind}/{brief}" for kind in ("claims", "journal", "reviews")] + \
        [f"refs/heads/assay/{brief}"] if brief else []
    return subprocess.run(["git", "--git-dir", str(forge.path), "for-each-ref", *patterns], capture_output=True,
                          text=True, check=True).stdout


def run_assay(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **desk_env(tmp_path), **(env or {})})


def test_a_paused_desk_keeps_its_brief_and_burns_no_attempt_and_wakes_fenced(forge: Forge, tmp_path: Path) -> None:
    """SIGSTOP a singleton desk mid-agent and start the same desk again: the new process does not take the brief
    from a holder whose process still lives here, and blocks nothing. Once the sweeper expires the paused one's
    lease, the new process claims the brief and works it to ready: the paused run is no failed attempt (the desk
    has one attempt). SIGCONT the paused one: it finds itself fenced and writes nothing to the forge."""
    mark = tmp_path / "agent-started"
    os.mkfifo(mark)
    publish(forge, {"desks/solo.yaml": DESK_SOLO.format(first=tmp_path / "first", mark=mark, python=sys.executable),
                    "briefs/ship.md": brief_text("Ship", ["write ship.txt v1"], "grep -q v1 ship.txt")})
    paused = start_desk(forge, tmp_path, "solo", "--poll", "1")
    try:
        assert await_line(mark) == "started\n", paused.poll()
        os.kill(paused.pid, signal.SIGSTOP)
        before = forge_refs(forge, "ship")
        second = run_assay(tmp_path, "desk", "run", "solo", "--once", "--forge", forge.url)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "took over" not in second.stdout and "blocked" not in second.stdout, second.stdout
        assert "by a process still running here" in second.stdout, second.stdout
        assert forge_refs(forge, "ship") == before  # nothing written: the brief stays with its living holder
        assert {(c["state"], c["epoch"]) for c in claim_chain(forge.path, "ship")} == {("held", 1)}

        now = float(subprocess.run(["date", "+%s"], capture_output=True, text=True, check=True).stdout)
        for at in (now, now + 30 + 60 + 1):  # the sweeper sees the tip stand still for longer than lease + grace
            swept = run_assay(tmp_path, "sweep", "--forge", forge.url, env={"ASSAY_SWEEP_NOW": str(at)})
            assert swept.returncode == 0, swept.stderr
        assert claim_chain(forge.path, "ship")[-1]["state"] == "expired"

        third = run_assay(tmp_path, "desk", "run", "solo", "--once", "--forge", forge.url)
        assert third.returncode == 0, third.stdout + third.stderr
        assert "claimed ship (epoch 2)" in third.stdout and "review ready" in third.stdout, third.stdout
        states = [c["state"] for c in claim_chain(forge.path, "ship")]
        assert "blocked" not in states and states[-1] == "waiting", states
        settled = forge_refs(forge, "ship")

        os.kill(paused.pid, signal.SIGCONT)
        assert paused.stdout is not None
        said = []
        bound = threading.Timer(90, lambda: os.killpg(paused.pid, signal.SIGKILL))  # a woken desk that hangs
        bound.start()  # ends the read below (its heartbeat is due at once when it wakes: seconds, not this)
        for line in paused.stdout:
            said.append(line)
            if "lost ship" in line:  # its run's end: it has written all it will write on this brief
                break
        bound.cancel()
        assert any("fenced" in line for line in said), said
        assert forge_refs(forge, "ship") == settled  # the woken desk wrote nothing of the brief's
    finally:
        end(paused)
    assert "Traceback" not in "".join(said)


def test_a_singleton_takes_over_only_from_a_holder_whose_life_is_over(forge: Forge) -> None:
    """`assay claim --singleton` as the desk uses it: a holder running here, even stopped, keeps its claim; once
    its process has ended, the takeover goes through with a new epoch."""
    holder = subprocess.Popen(["sleep", "600"])
    git_port = ForgeGit(forge.url)
    try:
        life = life_of(holder.pid)
        assert life is not None and life.start is not None and life.boot is not None
        claims = Claims(git_port)
        claims.claim("alpha", "solo", holder=f"solo/{life.host}/{life.pid}/beef.{life.start}.{life.boot[:8]}")
        os.kill(holder.pid, signal.SIGSTOP)
        await_state(holder.pid, "T")
        with pytest.raises(ClaimLost, match=f"still running here \\(pid {holder.pid}"):
            claims.claim("alpha", "solo", singleton=True)
        assert [c["epoch"] for c in claim_chain(forge.path, "alpha")] == [1]
        holder.kill()
        holder.wait()
        assert claims.claim("alpha", "solo", singleton=True).record.epoch == 2
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        git_port.close()


def desk_lines(argv: list[str], tmp_path: Path, until: str, timeout_s: int = 40) -> tuple[list[str], int | None]:
    """Run `timeout TIMEOUT_S ARGV` (the bound, as a person would run it) and read its output until a line holds
    `until`; then stop it. The lines read and its exit code (None when stopped by this test)."""
    proc = subprocess.Popen(["timeout", str(timeout_s), *argv], env={**os.environ, **desk_env(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if until in line:
                return lines, None
        return lines, proc.wait(timeout=30)
    finally:
        end(proc)


DESK_KILLED = """name: crashy
takes:
  labels: [work]
agent:
  command: [sh, -c, "if mkdir {first} 2>/dev/null; then echo started > {mark}; sleep 600; fi;
    exec {python} -m assay.agents.scripted"]
lease_s: 600
heartbeat_s: 60
attempts: 2
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]
"""


def test_a_stale_ref_lock_on_a_forge_on_disk_is_removed_said_and_the_brief_worked(forge: Forge,
                                                                                  tmp_path: Path) -> None:
    """A desk SIGKILLed mid-agent, and the lock a killed push leaves on its claim ref, 30 minutes old: the next desk
    removes the lock (and says so, naming it), takes the brief over and works it, instead of looping for ever."""
    mark = tmp_path / "agent-started"
    os.mkfifo(mark)
    publish(forge, {"desks/crashy.yaml": DESK_KILLED.format(first=tmp_path / "first", mark=mark,
                                                             python=sys.executable),
                    "briefs/hello.md": brief_text("Hello", ["write hello.txt hi"], "grep -q hi hello.txt")})
    first = start_desk(forge, tmp_path, "crashy", "--poll", "1")
    try:
        assert await_line(mark) == "started\n", first.poll()
    finally:
        end(first)  # SIGKILL, its agent with it
    lock = forge.path / "refs" / "assay" / "claims" / "hello.lock"
    lock.touch()
    subprocess.run(["touch", "-d", "-30 minutes", str(lock)], check=True)
    lines, code = desk_lines([sys.executable, "-m", "assay", "desk", "run", "crashy", "--poll", "1", "--forge",
                              forge.url], tmp_path, until="review ready")
    text = "".join(lines)
    assert code is None, text  # it got there before its time ran out
    assert f"removed the stale ref lock {lock} from the forge (30 minutes old" in text, text
    assert "took over hello" in text and "cannot be read" not in text and "Traceback" not in text, text
    assert not lock.exists()
    chain = claim_chain(forge.path, "hello")
    assert chain[-1]["state"] == "waiting" and chain[-1]["epoch"] == 2, chain[-1]


def test_a_ref_lock_on_a_remote_forge_is_reported_and_the_desk_works_on(forge: Forge, tmp_path: Path) -> None:
    """Over git:// Assay cannot remove a lock file on the forge: the desk says a write was refused because of the
    lock, names the lock file and what a person must do, leaves that brief alone for longer each time, and works
    the others; never a loop that works nothing."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/stuck.md": brief_text("Stuck", ["write s.txt s"], "test -f s.txt").replace(
                        "labels:", "priority: 1\nlabels:"),
                    "briefs/fine.md": brief_text("Fine", ["write f.txt f"], "test -f f.txt")})
    lock = forge.path / "refs" / "assay" / "claims" / "stuck.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    subprocess.run(["touch", "-d", "-30 minutes", str(lock)], check=True)
    with GitDaemon(forge.path.parent) as daemon:
        lines, code = desk_lines([sys.executable, "-m", "assay", "desk", "run", "builder", "--poll", "1",
                                  "--forge", daemon.url(forge.path.name)], tmp_path, until="fine verified")
    text = "".join(lines)
    assert code is None, text
    refused = [line for line in lines if "cannot claim stuck" in line]
    assert refused and len(refused) <= 3, text  # said, then left alone while the other brief is worked
    assert "a write refused: cannot lock ref 'refs/assay/claims/stuck' because its lock file " in refused[0]
    assert "refs/assay/claims/stuck.lock exists" in refused[0]  # the path as the forge's git names it
    assert "whoever runs the forge must remove the .lock file" in refused[0]
    assert "cannot be read" not in text and "Traceback" not in text, text
    assert lock.exists()  # not Assay's to remove over the network
    said = [e for e in entries(forge.path, "stuck") if (e.get("data") or {}).get("locked")]
    assert len(said) == 1 and said[0]["data"]["locked"].endswith("refs/assay/claims/stuck.lock"), said  # once
    built = subprocess.run([sys.executable, "-m", "assay", "board", "build", "-o", str(tmp_path / "site"), "--forge",
                            forge.url], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    needs = json.loads((tmp_path / "site" / "board.json").read_text())["needs_you"]
    [locked] = [n for n in needs if n["kind"] == "locked"]
    assert locked["brief"] == "stuck" and "stuck.lock" in locked["next"] and "remove" in locked["next"], locked


def test_any_command_removes_a_stale_ref_lock_on_a_forge_on_disk_and_never_a_fresh_one(forge: Forge) -> None:
    """The lock is handled where every write is pushed: `assay claim`, not only a desk. A fresh lock (a push
    running now, for all Assay can tell) is left alone and the refusal says what refused it."""
    lock = forge.path / "refs" / "assay" / "claims" / "hello.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    fresh = assay("claim", "hello", "--desk", "d", "--forge", forge.url)
    assert fresh.code == 1 and lock.exists(), fresh.err
    assert f"a write refused: cannot lock ref 'refs/assay/claims/hello' because its lock file {lock} exists" \
        in fresh.err and "Traceback" not in fresh.err
    assert forge.tip("refs/assay/claims/hello") is None
    subprocess.run(["touch", "-d", "-30 minutes", str(lock)], check=True)
    stale = assay("claim", "hello", "--desk", "d", "--forge", forge.url)
    assert stale.code == 0 and not lock.exists(), stale.err
    assert f"note: removed the stale ref lock {lock} from the forge (30 minutes old" in stale.err
    assert [c["epoch"] for c in claim_chain(forge.path, "hello")] == [1]


def test_a_lock_a_paused_git_process_may_hold_is_never_removed(forge: Forge) -> None:
    """However old, a lock is kept while a git process that works on the forge and started before the lock was
    made lives here (a push paused mid-way: its lock, not a killed one's); once that process is gone it is removed."""
    from assay.core.git import clear_stale_lock

    paused = subprocess.Popen(["git", "--git-dir", str(forge.path), "cat-file", "--batch"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL)
    try:
        os.kill(paused.pid, signal.SIGSTOP)
        await_state(paused.pid, "T")
        lock = forge.path / "refs" / "heads" / "main.lock"
        lock.touch()
        assert clear_stale_lock(str(forge.path), str(lock), older_than_s=0) is None and lock.exists()
    finally:
        paused.kill()
        paused.wait()
    assert clear_stale_lock(str(forge.path), str(lock), older_than_s=0) is not None and not lock.exists()
    outside = forge.path.parent / "elsewhere.lock"
    outside.touch()
    assert clear_stale_lock(str(forge.path), str(outside), older_than_s=0) is None and outside.exists()


def test_a_sweep_that_cannot_expire_a_locked_claim_puts_the_lock_on_the_board(forge: Forge, claims: Claims,
                                                                             tmp_path: Path) -> None:
    """A dead desk's claim, its ref locked on a forge Assay reaches over git://: the sweep's expiry is refused; the
    brief's journal says once which lock file refuses it, and the board lists it under needs you."""
    claims.claim("alpha", "gone", lease_s=60, holder="gone/elsewhere/1/beef")
    lock = forge.path / "refs" / "assay" / "claims" / "alpha.lock"
    lock.touch()
    subprocess.run(["touch", "-d", "-30 minutes", str(lock)], check=True)
    now = time.time()

    with GitDaemon(forge.path.parent) as daemon:
        for at in (now, now + 200, now + 400):
            swept = run_assay(tmp_path, "sweep", "--json", "--forge", daemon.url(forge.path.name),
                              env={"ASSAY_SWEEP_NOW": str(at)})
            assert swept.returncode == 0, swept.stderr
    acts = [f for f in json.loads(swept.stdout)["findings"] if f["kind"] == "lease"]
    assert acts and acts[0]["action"].startswith("failed:") and "alpha.lock exists" in acts[0]["action"], acts
    said = [e for e in entries(forge.path, "alpha") if (e.get("data") or {}).get("locked")]
    assert len(said) == 1 and said[0]["data"]["locked"].endswith("refs/assay/claims/alpha.lock"), said
    assert lock.exists() and claim_chain(forge.path, "alpha")[-1]["state"] == "held"
    built = run_assay(tmp_path, "board", "build", "-o", str(tmp_path / "site"), "--forge", forge.url)
    assert built.returncode == 0, built.stderr
    needs = json.loads((tmp_path / "site" / "board.json").read_text())["needs_you"]
    assert [n["brief"] for n in needs if n["kind"] == "locked"] == ["alpha"], needs


def test_a_stop_that_comes_while_the_code_loads_exits_quietly() -> None:
    """SIGTERM before any command can take it (a demo stopping its desks as they start): 143, no traceback."""
    probe = ("import os, signal\nfrom assay import entry\nloading = entry._main\n"
             "def _main():\n    entry.stop_as_interrupt()\n    os.kill(os.getpid(), signal.SIGTERM)\n    loading()\n"
             "entry._main = _main\nentry.main()\n")
    run = subprocess.run([sys.executable, "-c", probe, "claims"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 143 and "Traceback" not in run.stderr, run.stderr
