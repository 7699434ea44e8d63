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
from pathlib import Path

import pytest

from tests.conftest import Forge
from tests.helpers.desks import desk_env, publish
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
def test_sigterm_and_sighup_hand_the_brief_back_as_ctrl_c_does(forge: Forge, tmp_path: Path, sig: int) -> None:
    """The signal reaches the desk alone (as `timeout` and `kill` send it), mid-agent: the desk releases the brief
    with the reason in the claim chain and the journal, and exits 128 + the signal's number."""
    mark = tmp_path / "agent-started"
    os.mkfifo(mark)
    publish(forge, {"desks/patient.yaml": DESK_SLEEPY.format(mark=mark), "briefs/slow.md": SLOW_BRIEF})
    desk = start_desk(forge, tmp_path, "patient", "--poll", "1")
    try:
        assert await_line(mark) == "started\n", desk.poll()
        os.kill(desk.pid, sig)
        out, _ = desk.communicate(timeout=60)
    finally:
        end(desk)
    name = signal.Signals(sig).name
    assert desk.returncode == 128 + sig, out
    assert f"released slow (desk patient was stopped by {name})" in out and "Traceback" not in out
    chain = claim_chain(forge.path, "slow")
    assert chain[-1]["state"] == "released" and f"stopped by {name}" in chain[-1]["reason"], chain[-1]
    assert any(f"stopped by {name}" in json.dumps(e) for e in entries(forge.path, "slow"))


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
