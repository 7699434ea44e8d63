"""A desk SIGKILLed between committing its work and pushing it, then run again: the commit is made again under the
new epoch, so every branch commit's `Assay-Epoch` is the epoch that pushed it and the audit passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.desks import DESK, brief, desk_env, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants

# case -> (points armed one after another, then a clean run), as in test_crash_suite
CASES: dict[str, tuple[list[str], str]] = {
    "push.after-commit": (["push.after-commit"], "a takeover at epoch 2 pushes the work, committed again"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_desk_killed_before_its_push_recommits_under_the_new_epoch(work: Forge, tmp_path: Path,
                                                                     case: str) -> None:
    points, _ = CASES[case]
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    for point in points:
        crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT=point)
        assert crashed.code == -signal.SIGKILL, crashed.err
    assert work.tip("refs/heads/assay/ship") == git("--git-dir", str(work.path), "rev-parse", "main").strip()
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "review ready" in again.out, again.err
    bare = ["--git-dir", str(work.path)]
    messages = git(*bare, "log", "-z", "--format=%B", "main..refs/heads/assay/ship").split("\0")
    assert [m for m in messages if m.strip()] and all("Assay-Epoch: 2" in m for m in messages if m.strip())
    assert audit_failures(work.url, "ship") == {}


def desk_in_own_group(work: Forge, tmp_path: Path, name: str, **extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, **desk_env(tmp_path, **extra)}
    return subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", name, "--once", "--forge", work.url],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.parametrize("attempts", [1, 2])
def test_runs_that_died_at_ready_then_a_merge_end_done_not_blocked(work: Forge, tmp_path: Path,
                                                                  attempts: int) -> None:
    """Every run the desk may make dies right after marking the review ready (the whole machine goes), and a person
    merges it: the next pass sees the merge before it counts the dying runs, so the brief is done, not blocked."""
    publish(work, {"desks/single.yaml": DESK.format(name="single", attempts=attempts),
                   "briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    for _ in range(attempts):
        crashed = desk_in_own_group(work, tmp_path, "single", ASSAY_CRASH_AT="step.after-execute:ready",
                                    ASSAY_CRASH_SCOPE="group")
        assert crashed.wait(timeout=120) == -signal.SIGKILL, crashed.communicate()[1]
    assert assay("review", "merge", "ship", "--forge", work.url).code == 0
    again = run_desk(work, "single", tmp_path)
    assert again.code == 0 and "ship merged -> done" in again.out, again.out + again.err
    chain = claim_chain(work.path, "ship")
    assert chain[-1]["state"] == "done" and "blocked" not in [c["state"] for c in chain]
    assert audit_failures(work.url, "ship") == {}


def test_a_takeover_from_a_paused_predecessor_fences_it_and_goes_on(work: Forge, tmp_path: Path) -> None:
    """A desk is paused (SIGSTOP) mid-agent, a person takes its claim away, and the desk runs again: it does not stop
    at "step 'agent' is running now" but works the brief at the next epoch; the paused one, woken, is fenced."""
    marker = tmp_path / "slept"
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1", f"sleep-once 600 {marker}"],
                                           "test -f ship.txt")})
    old = desk_in_own_group(work, tmp_path, "builder")
    assert old.stdout is not None
    for line in old.stdout:
        if "working for up to" in line:
            break
    os.killpg(old.pid, signal.SIGSTOP)
    try:
        forced = assay("release", "ship", "--force", "--reason", "its desk hangs", "--forge", work.url)
        assert forced.code == 0, forced.err
        again = run_desk(work, "builder", tmp_path)
        assert again.code == 0 and "review ready" in again.out, again.out + again.err
        assert claim_chain(work.path, "ship")[-1]["epoch"] == 2
    finally:
        os.killpg(old.pid, signal.SIGCONT)
    out, err = old.communicate(timeout=120)
    assert "lost ship" in out or "fenced" in out + err, out + err
    assert claim_chain(work.path, "ship")[-1]["state"] == "waiting"
    assert invariants(work.path, "ship") == [] and audit_failures(work.url, "ship") == {}


def test_a_brief_blocked_for_dying_runs_journals_its_cut_off_unsafe_step(work: Forge, tmp_path: Path) -> None:
    """The last run the desk may make dies inside its deploy: the block that follows first records the deploy's
    outcome as unknown, so the journal, the board and the sweep tell the same story."""
    publish(work, {"desks/single.yaml": DESK.format(name="single", attempts=1),
                   "briefs/ship.md": brief("Ship", ["write ship.txt v1", "deploy"], "test -f ship.txt")})
    crashed = desk_in_own_group(work, tmp_path, "single", ASSAY_CRASH_AT="step.after-execute:deploy",
                                ASSAY_CRASH_SCOPE="group")
    assert crashed.wait(timeout=120) == -signal.SIGKILL
    again = run_desk(work, "single", tmp_path)
    assert again.code in (0, 5), again.err
    assert claim_chain(work.path, "ship")[-1]["state"] == "blocked"
    kinds = [e["kind"] for e in entries(work.path, "ship") if e.get("step") == "deploy"]
    assert kinds == ["intent", "outcome_unknown"]
    # only the desk's own `agent` step stays open: idempotent, it is resumed when a person releases the brief
    assert [p for p in invariants(work.path, "ship") if "(agent)" not in p] == []


def test_the_next_desk_runs_a_cut_off_steps_probe_and_the_agent_is_told(work: Forge, tmp_path: Path) -> None:
    """The whole machine dies right after the deploy (desk, agent and step client): the desk that takes over runs the
    deploy's probe before its agent, which settles it as having happened; the agent's deploy returns that, and
    its prompt starts with it. Deployed once."""
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1", "deploy probed"], "test -f ship.txt")})
    crashed = desk_in_own_group(work, tmp_path, "builder", ASSAY_CRASH_AT="step.after-execute:deploy",
                                ASSAY_CRASH_SCOPE="group")
    assert crashed.wait(timeout=120) == -signal.SIGKILL
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "its probe found it happened" in again.out, again.out + again.err
    assert "review ready" in again.out
    assert (tmp_path / "effects.log").read_text().count("deployed ship") == 1
    ends = [(e["kind"], (e.get("data") or {}).get("by")) for e in entries(work.path, "ship")
            if e.get("step") == "deploy" and e["kind"] in ("result", "outcome_unknown")]
    assert ends == [("outcome_unknown", None), ("result", "probe")]
    prompts = sorted((tmp_path / "state").glob("*/prompts/ship-2-*.md"))
    assert prompts and "`deploy` (unsafe): settled happened: settled by probe" in prompts[0].read_text()
    assert invariants(work.path, "ship") == [] and audit_failures(work.url, "ship") == {}
