"""A desk's hooks around its agent's steps: `before_step` runs before the intent is journaled (a crash in it
leaves no intent, a refusal journals a note and runs nothing); `after_step` runs after the result is journaled
and its failure changes nothing that happened."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from assay.core.deskspec import check_desk
from tests.conftest import Forge
from tests.helpers.desks import DESK, brief, desk_env, publish, run_desk
from tests.journal_check import entries, invariants


def desk_file(hooks: str) -> str:
    """The tests' desk (helpers.desks.DESK), named gated, with 2 attempts and these hooks."""
    return DESK.format(name="gated", attempts=2) + f"hooks:\n{hooks}\n"


def gated(forge: Forge, hooks: dict[str, str]) -> None:
    lines = "\n".join(f"  {name}: '{command}'" for name, command in hooks.items())
    publish(forge, {"desks/gated.yaml": desk_file(lines),
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1", "deploy"], "test -f ship.txt")})


def deploy_entries(forge: Forge) -> list[dict[str, object]]:
    return [e for e in entries(forge.path, "ship") if e.get("step") == "deploy" and e["kind"] != "note"]


def test_a_before_hook_that_says_no_runs_nothing_and_journals_why(forge: Forge, tmp_path: Path) -> None:
    gated(forge, {"before_step": 'test "$ASSAY_STEP" != deploy || { echo "no deploys on Fridays"; exit 1; }'})
    run = run_desk(forge, "gated", tmp_path)
    assert "before_step hook refused step 'deploy'" in run.out, run.out + run.err
    assert deploy_entries(forge) == [] and not (tmp_path / "effects.log").exists()
    notes = [e["data"] for e in entries(forge.path, "ship") if (e.get("data") or {}).get("hook")]
    assert notes and {(n["hook"], n["refused"]) for n in notes} == {("before_step", "deploy")}  # each attempt
    assert "no deploys on Fridays" in notes[0]["evidence"]["tail"]
    assert invariants(forge.path, "ship") == []


def test_a_desk_killed_inside_its_before_hook_leaves_no_intent(forge: Forge, tmp_path: Path) -> None:
    mark = tmp_path / "hook-started"
    gated(forge, {"before_step": f'test -e {mark} || {{ touch {mark}; sleep 60; }}'})
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "gated", "--once", "--forge", forge.url],
                            env={**os.environ, **desk_env(tmp_path)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not mark.exists():  # the hook runs: the deploy has been asked for, and nothing is journaled of it yet
        assert desk.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(desk.pid, signal.SIGKILL)
    desk.wait()
    assert deploy_entries(forge) == []  # no intent, so no outcome to be unknown
    again = run_desk(forge, "gated", tmp_path)
    assert again.code == 0 and "review ready" in again.out, again.out + again.err
    assert (tmp_path / "effects.log").read_text().count("deployed ship") == 1
    assert [e["kind"] for e in deploy_entries(forge)] == ["intent", "result"]
    assert invariants(forge.path, "ship") == []


def test_a_failing_after_hook_changes_no_result(forge: Forge, tmp_path: Path) -> None:
    told = tmp_path / "told.log"
    gated(forge, {"after_step": f'echo "$ASSAY_STEP $ASSAY_STEP_STATUS" >> {told}; exit 3'})
    run = run_desk(forge, "gated", tmp_path)
    assert run.code == 0 and "review ready" in run.out, run.out + run.err
    assert told.read_text() == "deploy completed\n"
    assert [(e["kind"], e.get("status")) for e in deploy_entries(forge)] == [("intent", None), ("result", "completed")]
    notes = [e["data"] for e in entries(forge.path, "ship") if (e.get("data") or {}).get("hook")]
    assert [(n["hook"], n["failed"], n["evidence"]["exit_code"]) for n in notes] == [("after_step", "deploy", 3)]


def test_hooks_are_checked_with_their_line() -> None:
    text = desk_file("  before_deploy: 'true'")
    _, problems = check_desk(text, "desks/gated.yaml")
    assert problems and "`hooks` must map before_step and after_step" in str(problems[0])
    assert "desks/gated.yaml:" in str(problems[0])


def test_a_hook_that_leaves_a_background_process_ends_with_its_command(forge: Forge, tmp_path: Path) -> None:
    """`sleep N & echo gate-ok`: the hook has answered when its shell exits; the sleep is killed with it, and
    the step does not wait out the inspection's time limit."""
    sleep = f"sleep 100003.{os.getpid() % 1000:03d}"
    gated(forge, {"before_step": f"{sleep} & echo gate-ok", "after_step": f"{sleep} & echo gate-ok"})
    started = time.monotonic()
    run = run_desk(forge, "gated", tmp_path)
    assert run.code == 0 and "review ready" in run.out, run.out + run.err
    assert time.monotonic() - started < 60  # each hook would have waited 300 s for the sleep's end of output
    assert [(e["kind"], e.get("status")) for e in deploy_entries(forge)] == [("intent", None), ("result", "completed")]
    assert subprocess.run(["pgrep", "-f", sleep], capture_output=True).stdout == b""  # nothing of them is left
