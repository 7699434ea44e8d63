"""What a desk asks of the forge, counted with a logging `git` first on PATH: no push rejected and retried after
an agent run that outlived heartbeats (its steps moved the journal and the heartbeat the claim meanwhile)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from assay.config import defaults_dir
from assay.core.deskspec import parse_desk
from assay.desk.loop import idle_wait
from tests.conftest import Forge, assay
from tests.helpers.desks import brief, publish
from tests.helpers.gitlog import calls, lists_refs, logging_git, pushes

DESK = """name: builder
takes:
  labels: [work]
agent:
  command: [python, -m, assay.agents.scripted]
lease_s: 60
heartbeat_s: 1
attempts: 2
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]
"""


def test_no_push_is_rejected_after_an_agent_run_that_outlived_heartbeats(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK,
                    "briefs/slow.md": brief("Slow", ["deploy", "sleep 3.5", "write slow.txt done"],
                                            "test -f slow.txt")})
    folder, log = logging_git(tmp_path)
    done = assay("desk", "run", "builder", "--once", timeout=180,
                 env={"ASSAY_FORGE": forge.url, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
                      "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log")})
    assert done.code == 0 and "review ready" in done.out, done.out + done.err
    made = pushes(log)
    renewals = [args for code, args in made if "refs/assay/claims/slow" in args and "journal" not in args]
    assert len(renewals) >= 3, made  # the heartbeat renewed the claim while the agent slept
    assert [args for code, args in made if code != 0] == []  # not one push on stale leases


def test_an_idle_desk_backs_off_to_one_ref_advertisement_a_heartbeat(forge: Forge, tmp_path: Path) -> None:
    """With nothing to do, a desk polling every 0.05 s backs off to its heartbeat (1 s here): over the last three
    heartbeats of a 6 s idle spell it reads the forge's refs once a heartbeat, its sweep and its look sharing one
    ref advertisement, where it read them every 0.05 s before (and twice a heartbeat after the first backoff)."""
    publish(forge, {"desks/builder.yaml": DESK})
    folder, log = logging_git(tmp_path)
    env = {**os.environ, "ASSAY_FORGE": forge.url, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
           "ASSAY_STATE_DIR": str(tmp_path / "state")}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--poll", "0.05"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert desk.stdout is not None and "desk started on" in desk.stdout.readline()
        time.sleep(3)  # a measuring window, not a wait for an event: the backoff's first doublings pass
        before = len(advertisements(log))
        time.sleep(3)
        during = len(advertisements(log)) - before
    finally:
        desk.kill()
        desk.wait()
    print(f"ref advertisements in 3 s, at a 1 s heartbeat: {during}")
    assert 1 <= during <= 3 + 1, during  # one a heartbeat (a pass may straddle the window's edge)


def test_an_idle_desk_with_a_preset_looks_at_most_once_a_minute_once_backed_off() -> None:
    """The shipped presets: polling every 5 s, an idle desk's waits double to `IDLE_MAX_S` (120 s), and each
    pass is one ref advertisement: 1,000 idle desks ask the forge for its refs about 8 times a second."""
    for path in sorted(defaults_dir("desks").glob("*.yaml")):
        waits = [idle_wait(5.0, idle, parse_desk(path.read_text(), str(path)).heartbeat_s) for idle in range(12)]
        assert waits[0] == 5.0 and waits == sorted(waits), path
        assert 60 / waits[-1] <= 1, (path, waits)  # looks a minute, once backed off


def advertisements(log: Path) -> list[str]:
    """The calls that ask the forge for its refs (ls-remote or ls-refs; fetch)."""
    return [args for _, args in calls(log) if lists_refs(args) or re.search(r"(^| )fetch ", args)]


def test_a_typical_brief_takes_seven_pushes_from_claim_to_waiting(forge: Forge, tmp_path: Path) -> None:
    """Two safe agent steps and one unsafe deploy: the claim and 6 journal pushes (the agent's intent, the deploy's
    intent and its result, the pushed work, the ready record, the wait). The desk's own steps ride the pushes their
    effects make or the next one, their results the next push: a first run's start, the branch and the draft review
    ride the agent's intent, the agent's safe steps its deploy's intent, the agent's result the pushed work, the
    verify rows' evidence the ready record."""
    safe = ['run "$ASSAY_BIN" step run --name lint --policy safe -- true',
            'run "$ASSAY_BIN" step run --name test --policy safe -- true']
    publish(forge, {"desks/builder.yaml": DESK.replace("heartbeat_s: 1", "heartbeat_s: 30"),
                    "briefs/t.md": brief("T", [*safe, "deploy", "write t.txt hi"], "test -f t.txt")})
    folder, log = logging_git(tmp_path)
    done = assay("desk", "run", "builder", "--once", timeout=180,
                 env={"ASSAY_FORGE": forge.url, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
                      "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log")})
    assert done.code == 0 and "review ready" in done.out, done.out + done.err
    made = [args for code, args in pushes(log) if code == 0]
    first = next(i for i, args in enumerate(made) if args.rstrip().endswith("refs/assay/claims/t"))
    assert len(made[first:]) == 7, "\n".join(made[first:])
    assert sum("refs/assay/journal/t" in args for args in made[first:]) == 6
    assert (tmp_path / "effects.log").read_text().count("deployed") == 1
