"""Desks end to end on a temporary forge: real desk and agent processes, read back with plain git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers import procs
from tests.helpers.desks import DESK, brief, desk_env, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants

if TYPE_CHECKING:
    from assay.core.git import ForgeGit
    from assay.desk.loop import Desk


def test_a_brief_goes_from_ready_to_merged_and_done(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/greet.md": brief("Greet", ["write greet.txt hello", "deploy"], "grep -q hello greet.txt")})
    assert "greet" in assay("briefs", "--forge", work.url).out
    first = run_desk(work, "builder", tmp_path)
    assert first.code == 0, first.err
    assert "review ready; waiting for merge" in first.out
    assert claim_chain(work.path, "greet")[-1]["state"] == "waiting"
    branch_log = git("--git-dir", str(work.path), "log", "-1", "--format=%B", "refs/heads/assay/greet")
    assert "Assay-Brief: greet" in branch_log and "Assay-Epoch: 1" in branch_log
    assert assay("review", "merge", "greet", "--forge", work.url).code == 0
    second = run_desk(work, "builder", tmp_path)
    assert second.code == 0 and "greet merged -> done" in second.out
    chain = claim_chain(work.path, "greet")
    assert [c["state"] for c in chain][0] == "held" and chain[-1]["state"] == "done"
    assert git("--git-dir", str(work.path), "show", "main:greet.txt").strip() == "hello"
    review = assay("review", "show", "greet", "--forge", work.url, "--json").json()
    assert isinstance(review, dict) and review["state"] == "merged"
    kinds = [e["kind"] for e in entries(work.path, "greet")]
    assert "verify" in kinds and "wait" in kinds
    verify = next(e for e in entries(work.path, "greet") if e["kind"] == "verify")["data"]
    assert verify["passed"] is True and verify["command"] == "grep -q hello greet.txt" and len(verify["head"]) == 40
    assert invariants(work.path, "greet") == []
    assert audit_failures(work.url, "greet") == {}
    assert (tmp_path / "effects.log").read_text().count("deployed greet") == 1


def test_a_branch_cannot_weaken_its_own_verify_rows(work: Forge, tmp_path: Path) -> None:
    cheat = brief("Cheat", [], "true").replace("\n", "\\n")
    publish(work, {"briefs/cheat.md": brief("Cheat", [f"write briefs/cheat.md {cheat}"], "test -f proof.txt")})
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 5, run.err
    assert "blocked" in run.out
    assert claim_chain(work.path, "cheat")[-1]["state"] == "blocked"
    rows = [e["data"] for e in entries(work.path, "cheat") if e["kind"] == "verify"]
    assert len(rows) == 2 and all(r["command"] == "test -f proof.txt" and not r["passed"] for r in rows)
    on_branch = git("--git-dir", str(work.path), "show", "refs/heads/assay/cheat:briefs/cheat.md")
    assert 'run: "true"' in on_branch  # the branch did edit its copy; main's rows judged it


def test_the_agent_gets_no_forge_credentials(work: Forge, tmp_path: Path) -> None:
    dump = tmp_path / "agent-env.txt"
    publish(work, {"briefs/env.md": brief("Env", [f"run env > {dump}", "write ok.txt ok"], "test -f ok.txt")})
    secrets = {"GITHUB_TOKEN": "ghp_secret1", "GH_TOKEN": "gho_secret2", "ASSAY_GITHUB_TOKEN": "s3",
               "ASSAY_TOKEN": "s4"}
    assert run_desk(work, "builder", tmp_path, **secrets).code == 0
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert not set(secrets) & set(seen)
    assert seen["ASSAY_BRIEF"] == "env" and seen["ASSAY_EPOCH"] == "1" and seen["ASSAY_DESK"] == "builder"


def test_two_desks_never_share_a_worktree(work: Forge, tmp_path: Path) -> None:
    where = tmp_path / "where.log"
    publish(work, {f"briefs/{b}.md": brief(b, [f"run pwd >> {where}", f"write {b}.txt x"], f"test -f {b}.txt")
                   for b in ("left", "right")})
    env = {**os.environ, **desk_env(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", name, "--once", "--max-briefs", "1",
                               "--forge", work.url], env=env, stdout=subprocess.PIPE, text=True)
             for name in ("builder", "other")]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    paths = where.read_text().split()
    assert len(paths) == 2 and len(set(paths)) == 2
    assert {Path(p).parent.name for p in paths} == {"builder", "other"}
    claims = {c["desk"] for b in ("left", "right") for c in claim_chain(work.path, b)}
    assert claims == {"builder", "other"}


def test_sigkill_during_the_agent_then_restart_resumes_without_repeating(work: Forge, tmp_path: Path) -> None:
    marker = tmp_path / "slept-once"
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1", "deploy", f"sleep-once 60 {marker}"],
                                           "test -f ship.txt")})
    env = {**os.environ, **desk_env(tmp_path)}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", work.url],
                            env=env, stdout=subprocess.PIPE, text=True)
    assert desk.stdout is not None
    for line in desk.stdout:  # wait until the agent is mid-work, past its unsafe deploy
        if "working for up to" in line:
            break
    desk.send_signal(signal.SIGKILL)
    desk.wait()
    assert claim_chain(work.path, "ship")[-1]["state"] == "held"
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0, again.err
    assert "took over ship" in again.out and "review ready" in again.out
    chain = claim_chain(work.path, "ship")
    assert chain[-1]["state"] == "waiting" and chain[-1]["epoch"] == 2
    assert (tmp_path / "effects.log").read_text().count("deployed ship") == 1
    assert git("--git-dir", str(work.path), "for-each-ref", "--format=%(refname)", "refs/heads/assay/").split() \
        == ["refs/heads/assay/ship"]
    reviews = assay("review", "list", "--forge", work.url, "--json").json()
    assert isinstance(reviews, dict) and [r["brief"] for r in reviews["reviews"]] == ["ship"]
    assert invariants(work.path, "ship") == []
    assert audit_failures(work.url, "ship") == {}


def test_dependencies_and_priority_order(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/base.md": brief("Base", ["write base.txt b"], "test -f base.txt"),
                   "briefs/top.md": brief("Top", ["write top.txt t"], "test -f top.txt", deps="base")})
    listing = assay("briefs", "--forge", work.url, "--json").json()
    assert isinstance(listing, dict)
    states = {r["brief"]: r["state"] for r in listing["briefs"]}
    assert states["top"] == "needs base" and states["base"] == "ready"
    run = run_desk(work, "builder", tmp_path)
    assert "claimed base" in run.out and "claimed top" not in run.out


def test_waits_wakes_and_steering(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/w.md": brief("W", ["steering", "write w.txt w"], "test -f w.txt")})
    assert assay("steer", "w", "Use the staging database", "--forge", work.url).code == 0
    assert assay("claim", "w", "--desk", "builder", "--forge", work.url).code == 0
    bad = assay("wait", "w", "--on", "tomorrow", "--forge", work.url)
    assert bad.code == 2 and "unknown wait condition" in bad.err
    assert assay("wait", "w", "--on", "manual", "--forge", work.url).code == 0
    assert claim_chain(work.path, "w")[-1]["state"] == "waiting"
    assert assay("wake", "w", "--forge", work.url).code == 0
    assert claim_chain(work.path, "w")[-1]["state"] == "held"
    kinds = [e["kind"] for e in entries(work.path, "w")]
    assert kinds == ["steer", "wait", "wake"]
    steer = entries(work.path, "w")[0]["data"]
    assert steer["text"] == "Use the staging database"


def test_steering_reaches_the_agent(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/s.md": brief("S", ["steering", "write s.txt s"], "test -f s.txt")})
    assert assay("steer", "s", "Prefer small commits", "--forge", work.url).code == 0
    run = run_desk(work, "builder", tmp_path)
    assert "steering received: Prefer small commits" in run.out


def test_brief_new_writes_a_valid_skeleton(tmp_path: Path) -> None:
    made = assay("brief", "new", "add-cache", "--title", "Add a cache", "--label", "work", cwd=tmp_path)
    assert made.code == 0
    assert assay("brief", "lint", cwd=tmp_path).code == 0
    again = assay("brief", "new", "add-cache", "--title", "x", cwd=tmp_path)
    assert again.code == 2 and "already exists" in again.err
    bad = assay("brief", "new", "Bad_ID", "--title", "x", cwd=tmp_path)
    assert bad.code == 2


def test_an_unknown_desk_and_a_broken_desk_file_are_clear_errors(work: Forge, tmp_path: Path) -> None:
    missing = run_desk(work, "ghost", tmp_path)
    assert missing.code == 2 and "no desk 'ghost'" in missing.err and "builder" in missing.err
    publish(work, {"desks/broken.yaml": "name: broken\nagent: {command: []}\nlease_s: -1\n"})
    broken = run_desk(work, "broken", tmp_path)
    assert broken.code == 2 and "desks/broken.yaml:2" in broken.err and "Traceback" not in broken.err


def test_journal_json_of_a_desk_run_is_complete(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/j.md": brief("J", ["write j.txt j"], "test -f j.txt")})
    run_desk(work, "builder", tmp_path)
    data = json.loads(assay("journal", "j", "--forge", work.url, "--json").out)
    steps = [e.get("step") for e in data["entries"] if e["kind"] == "result"]
    assert steps == ["branch", "review", "agent", "push", "verify", "supersede", "ready"]


def test_a_fenced_desk_cannot_mark_its_review_ready(work: Forge, tmp_path: Path) -> None:
    from assay.core.briefs import briefs_on_main
    from assay.core.claims import Claims
    from assay.core.deskspec import DeskSpec
    from assay.core.forge.plain import PlainReviews
    from assay.core.git import ForgeGit
    from assay.core.steps import open_session
    from assay.desk.work import BriefWork
    from assay.errors import Fenced

    publish(work, {"briefs/f.md": brief("F", [], "true")})
    git_port = ForgeGit(work.url)
    claims, reviews = Claims(git_port), PlainReviews(git_port)
    claims.claim("f", "builder")
    main = claims.read_view().main
    assert main is not None
    head = git("--git-dir", str(work.path), "rev-parse", "main").strip()
    reviews.open("f", "assay/f", "F", head)
    session = open_session(claims, "f", "builder", 1)
    claims.force_release("f", "taken away", by="ops")
    claims.claim("f", "other")
    f = next(b for b in briefs_on_main(git_port, main)[0] if b.id == "f")
    pipeline = BriefWork(git_port, reviews, DeskSpec(name="builder", command=("true",)), tmp_path / "state", print,
                     session, f, 1)
    with pytest.raises(Fenced):
        pipeline._mark_ready(head)
    assert reviews.get("f") is not None and reviews.get("f").record.state == "draft"  # type: ignore[union-attr]


def test_the_shipped_desk_presets_are_valid() -> None:
    from assay.core.deskspec import check_desk
    from tests.conftest import REPO

    for path in sorted((REPO / "desks").glob("*.yaml")):
        spec, problems = check_desk(path.read_text(), str(path))
        assert problems == [] and spec is not None and spec.name == path.stem


def test_a_brief_waiting_on_a_past_time_is_woken_and_resumed(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/t.md": brief("T", ["write t.txt t"], "test -f t.txt")})
    assert assay("claim", "t", "--desk", "builder", "--forge", work.url).code == 0
    assert assay("wait", "t", "--on", "time:2020-01-01T00:00:00Z", "--forge", work.url).code == 0
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert "took over t" in run.out and "review ready" in run.out  # woken, then its dead holder's claim resumed
    states = [c["state"] for c in claim_chain(work.path, "t")]
    assert states[:3] == ["held", "waiting", "held"] and states[-1] == "waiting"


def test_desks_take_only_briefs_with_their_labels_or_name(work: Forge, tmp_path: Path) -> None:
    named = brief("Named", ["write n.txt n"], "test -f n.txt").replace("labels: [work]", "desk: other")
    publish(work, {"briefs/named.md": named,
                   "briefs/foreign.md": brief("Foreign", [], "true").replace("labels: [work]", "labels: [infra]")})
    run = run_desk(work, "builder", tmp_path)
    assert "claimed" not in run.out
    assert "claimed named" in run_desk(work, "other", tmp_path).out


def test_a_malformed_brief_on_main_is_reported_not_silently_skipped(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/broken.md": "---\ntitle: Broken\npriority: urgent\n---\n"})
    listing = assay("briefs", "--forge", work.url)
    assert listing.code == 0 and "briefs/broken.md:3" in listing.err
    run = run_desk(work, "builder", tmp_path)
    assert "skipping a brief on main: briefs/broken.md:3" in run.out


def test_a_desk_resuming_elsewhere_starts_from_the_branch_as_pushed(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/m.md": brief("M", ["write m.txt m"], "test -f m.txt")})
    first = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="step.before-execute:verify")
    assert first.code == -signal.SIGKILL
    pushed = git("--git-dir", str(work.path), "rev-parse", "refs/heads/assay/m").strip()
    other_machine = tmp_path / "elsewhere"
    again = assay("desk", "run", "builder", "--once", "--forge", work.url,
                  env=desk_env(tmp_path, ASSAY_STATE_DIR=str(other_machine)), timeout=120)
    assert again.code == 0, again.err
    assert "review ready" in again.out
    verify = [e["data"] for e in entries(work.path, "m") if e["kind"] == "verify"]
    assert verify and verify[-1]["passed"] is True and verify[-1]["head"] == pushed
    assert invariants(work.path, "m") == []
    assert audit_failures(work.url, "m") == {}


def test_a_review_closed_while_the_desk_works_blocks_the_brief(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/c.md": brief("C", [f"run {sys.executable} -m assay review close c --reason obsolete",
                                              "write c.txt c"], "test -f c.txt")})
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 5, run.err
    assert "c blocked: cannot mark ready the review of 'c': it is closed" in run.out
    assert claim_chain(work.path, "c")[-1]["state"] == "blocked"
    assert run_desk(work, "builder", tmp_path).out.count("claimed c") == 0  # not redone behind the person's back


def test_a_review_closed_by_a_person_then_released_is_worked_again_with_their_reason(work: Forge,
                                                                                     tmp_path: Path) -> None:
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    assert "review ready" in run_desk(work, "builder", tmp_path).out
    assert assay("review", "close", "ship", "--reason", "use v2 wording", "--forge", work.url).code == 0
    assert "ship blocked" in run_desk(work, "builder", tmp_path).out
    assert assay("release", "ship", "--force", "--reason", "redo it", "--forge", work.url).code == 0
    crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="step.before-execute:agent")  # the round began
    assert crashed.code == -signal.SIGKILL and "working it again" in crashed.out, crashed.out + crashed.err
    again = run_desk(work, "builder", tmp_path)  # resumes that round at epoch 3
    assert again.code == 0 and "working it again" not in again.out, again.out + again.err
    assert "ship agent attempt 1" in again.out and "review ready" in again.out and "blocked" not in again.out
    shown = assay("review", "show", "ship", "--json", "--forge", work.url).json()
    assert isinstance(shown, dict) and shown["state"] == "ready"
    assert [(c["state"], c["epoch"]) for c in claim_chain(work.path, "ship")][-1] == ("waiting", 3)
    [prompt_file] = (tmp_path / "state").glob("*/prompts/ship-3-1.md")  # the state of this forge
    prompt = prompt_file.read_text()  # the resumed run's prompt still carries the round's reason
    assert "The previous round was blocked: the review was closed" in prompt and "use v2 wording" in prompt
    redo = [e for e in entries(work.path, "ship") if (e.get("data") or {}).get("redo")]
    assert len(redo) == 1 and redo[0]["epoch"] == 2
    assert invariants(work.path, "ship") == []
    assert audit_failures(work.url, "ship") == {}
    assert run_desk(work, "builder", tmp_path).out.count("working it again") == 0  # one redo per closed review


def test_a_brief_blocked_by_failed_attempts_then_released_is_tried_again(work: Forge, tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], f"test -e {flag}")})
    first = run_desk(work, "builder", tmp_path)
    assert "ship blocked: 2 attempts failed verification" in first.out, first.out + first.err
    flag.touch()  # a person fixes what the rows need, then releases the brief
    assert assay("release", "ship", "--force", "--reason", "fixed the environment", "--forge", work.url).code == 0
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "working it again" in again.out and "ship agent attempt 1" in again.out, again.out
    assert "review ready" in again.out and "blocked" not in again.out.split("working it again", 1)[1]
    assert claim_chain(work.path, "ship")[-1]["state"] == "waiting"
    assert invariants(work.path, "ship") == [] and audit_failures(work.url, "ship") == {}


def test_desk_files_must_be_named_after_their_desk_and_keep_heartbeats_short(work: Forge, tmp_path: Path) -> None:
    publish(work, {"desks/misnamed.yaml": DESK.format(name="someone-else", attempts=1),
                   "desks/slow.yaml": DESK.format(name="slow", attempts=1).replace("heartbeat_s: 5",
                                                                                   "heartbeat_s: 400")})
    misnamed = run_desk(work, "misnamed", tmp_path)
    assert misnamed.code == 2 and "names desk 'someone-else'" in misnamed.err
    slow = run_desk(work, "slow", tmp_path)
    assert slow.code == 2 and "at most half of `lease_s`" in slow.err


def test_a_fenced_desk_stops_its_agent(work: Forge, tmp_path: Path) -> None:
    quick = DESK.format(name="quick", attempts=1).replace("lease_s: 120", "lease_s: 10").replace(
        "heartbeat_s: 5", "heartbeat_s: 1")
    marker = tmp_path / "slept"
    publish(work, {"desks/quick.yaml": quick,
                   "briefs/q.md": brief("Q", [f"sleep-once 120 {marker}", "write q.txt q"], "test -f q.txt")})
    env = {**os.environ, **desk_env(tmp_path)}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "quick", "--once", "--forge", work.url],
                            env=env, stdout=subprocess.PIPE, text=True)
    assert desk.stdout is not None
    for line in desk.stdout:
        if "working for up to" in line:
            break
    assert assay("release", "q", "--force", "--reason", "reassigned", "--forge", work.url).code == 0
    assert assay("claim", "q", "--desk", "other", "--forge", work.url).code == 0
    rest = desk.stdout.read()
    desk.wait(timeout=60)
    assert "stopping the agent on q: fenced" in rest and "lost q" in rest
    assert not (tmp_path / "state").joinpath("worktrees", "quick", "q", "q.txt").exists()
    assert claim_chain(work.path, "q")[-1]["desk"] == "other"


def test_a_brief_whose_runs_keep_dying_is_blocked(work: Forge, tmp_path: Path) -> None:
    # the desk dies at its agent's first heartbeat (an isolated agent cannot see its desk to kill it)
    killer = DESK.format(name="killer", attempts=3).replace("[python, -m, assay.agents.scripted]",
                                                           '[sleep, "60"]')
    publish(work, {"desks/killer.yaml": killer, "briefs/k.md": brief("K", ["write k.txt k"], "true")})
    codes = [run_desk(work, "killer", tmp_path, ASSAY_CRASH_AT="renew-batch.before-push").code
             for _ in range(3)]
    assert codes == [-signal.SIGKILL] * 3
    last = run_desk(work, "killer", tmp_path)
    assert last.code == 5 and "needs a person" in last.out
    chain = claim_chain(work.path, "k")
    assert chain[-1]["state"] == "blocked" and chain[-1]["epoch"] == 4
    publish(work, {"desks/killer.yaml": DESK.format(name="killer", attempts=3)})  # a person fixes the cause
    assert assay("release", "k", "--force", "--reason", "fixed the agent", "--forge", work.url).code == 0
    fixed = run_desk(work, "killer", tmp_path)  # the dead runs before the block no longer count
    assert fixed.code == 0 and "working it again" in fixed.out and "review ready" in fixed.out, fixed.out


def test_a_review_is_merged_only_at_the_commit_that_was_verified(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/v.md": brief("V", ["write v.txt v"], "test -f v.txt")})
    assert "review ready" in run_desk(work, "builder", tmp_path).out
    clone = tmp_path / "sneaky"
    git("clone", "-q", "--branch", "assay/v", work.url, str(clone))
    (clone / "evil.txt").write_text("unverified")
    git("add", "-A", cwd=clone)
    git("commit", "-q", "-m", "late change", cwd=clone)
    git("push", "-q", "origin", "HEAD:refs/heads/assay/v", cwd=clone)
    main_before = git("--git-dir", str(work.path), "rev-parse", "main").strip()
    merge = assay("review", "merge", "v", "--forge", work.url)
    assert merge.code == 3 and "not the" in merge.err and "marked ready" in merge.err
    assert git("--git-dir", str(work.path), "rev-parse", "main").strip() == main_before


def test_verify_judges_the_pushed_commit_not_the_worktree(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/g.md": brief("G", ["write .gitignore g.txt", "write g.txt only here"], "test -f g.txt")})
    run = run_desk(work, "builder", tmp_path)
    assert "blocked" in run.out
    rows = [e["data"] for e in entries(work.path, "g") if e["kind"] == "verify"]
    assert rows and not any(r["passed"] for r in rows)


def test_our_own_pid_under_another_holder_is_an_earlier_life() -> None:
    from assay.desk.loop import _dead_here

    host = os.uname().nodename
    assert _dead_here(f"d/{host}/{os.getpid()}/zzzz") is True
    assert _dead_here(f"d/{host}/{os.getppid()}/zzzz") is False  # alive
    assert _dead_here(f"d/another-host/{os.getpid()}/zzzz") is False  # no evidence elsewhere


def holder_of(pid: int, start: int) -> str:
    """A holder string for a process life on this host, written out by hand (the format in data-model.md)."""
    return f"builder/{os.uname().nodename}/{pid}/abcd.{start}.{procs.boot_id()[:8]}"


def test_a_holder_is_judged_by_its_process_life() -> None:
    from assay.core.claims import new_holder
    from assay.desk.loop import _dead_here

    with procs.sleeper() as other:
        start = procs.start_ticks(other.pid)
        assert _dead_here(holder_of(other.pid, start)) is False  # that very process runs
        assert _dead_here(holder_of(other.pid, start + 1)) is True  # its pid now belongs to another process
        assert _dead_here(f"builder/{os.uname().nodename}/{other.pid}/abcd.{start}.00000000") is True  # rebooted
    with procs.zombie() as gone:
        assert _dead_here(holder_of(gone.pid, procs.start_ticks(gone.pid))) is True
        assert _dead_here(f"d/{os.uname().nodename}/{gone.pid}/zzzz") is True  # an older holder: pid only
    assert _dead_here(new_holder("d")) is False  # another holder in this very process: alive


@pytest.mark.parametrize("holder_process", ["reused pid", "zombie"])
def test_a_desk_takes_over_a_claim_whose_holder_life_is_over(work: Forge, tmp_path: Path,
                                                             holder_process: str) -> None:
    from assay.core.claims import Claims
    from assay.core.git import ForgeGit

    publish(work, {"briefs/r.md": brief("R", ["write r.txt r"], "test -f r.txt")})
    with procs.sleeper() if holder_process == "reused pid" else procs.zombie() as other:
        start = procs.start_ticks(other.pid) + (1 if holder_process == "reused pid" else 0)
        planted = holder_of(other.pid, start)
        claims = Claims(ForgeGit(work.url))
        claims.claim("r", "builder", 120, holder=planted)
        claims.git.close()
        run = run_desk(work, "builder", tmp_path)
        assert procs.state(other.pid) == ("Z" if holder_process == "zombie" else "S")
    assert run.code == 0, run.err
    assert f"took over r from {planted} (epoch 2)" in run.out
    chain = claim_chain(work.path, "r")
    assert (chain[0]["holder"], chain[0]["epoch"]) == (planted, 1)
    taken = next(c for c in chain if c["epoch"] == 2)
    assert taken["state"] == "held" and taken["holder"] not in (planted, "") and taken["desk"] == "builder"
    assert invariants(work.path, "r") == []
    assert audit_failures(work.url, "r") == {}


def test_a_running_desk_outlives_a_forge_outage(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/o.md": brief("O", ["write o.txt o"], "test -f o.txt")})
    assert assay("claim", "o", "--desk", "other", "--forge", work.url).code == 0  # nothing ready for builder yet
    env = {**os.environ, **desk_env(tmp_path)}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--max-briefs", "1",
                             "--poll", "0.1", "--forge", work.url], env=env, stdout=subprocess.PIPE, text=True)
    assert desk.stdout is not None
    assert "desk started on" in desk.stdout.readline()
    away = work.path.with_name("forge-away.git")
    work.path.rename(away)  # the forge goes away while the desk polls
    for line in desk.stdout:
        if "the forge cannot be read now" in line:
            break
    away.rename(work.path)  # and comes back
    assert assay("release", "o", "--desk", "other", "--forge", work.url).code == 0
    rest = desk.stdout.read()
    desk.wait(timeout=60)
    assert desk.returncode == 0 and "claimed o" in rest and "review ready" in rest


def test_desk_list_shows_valid_desks_and_reports_broken_ones(work: Forge, tmp_path: Path) -> None:
    publish(work, {"desks/broken.yaml": "name: broken\nlease_s: nope\n"})
    listing = assay("desk", "list", "--forge", work.url, "--json").json()
    assert isinstance(listing, dict)
    assert [d["name"] for d in listing["desks"]] == ["builder", "other"]
    assert any(p.startswith("desks/broken.yaml") for p in listing["problems"])
    table = assay("desk", "list", "--forge", work.url)
    assert table.code == 0 and "builder" in table.out and "desks/broken.yaml" in table.err


def test_an_agent_that_changes_nothing_gets_no_ready_review(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/idle.md": brief("Idle", ["run true"], "true")})  # the rows pass on main as it is
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 5, run.err  # the pass blocked a brief: it needs a person
    assert "review ready" not in run.out
    last = claim_chain(work.path, "idle")[-1]
    assert last["state"] == "blocked" and "the agent changed nothing" in str(last["reason"])
    assert work.tip("refs/heads/assay/idle") == work.tip("refs/heads/main")  # no commit was made up
    reviews = assay("review", "list", "--forge", work.url, "--json").json()
    assert isinstance(reviews, dict) and [r["state"] for r in reviews["reviews"] if r["brief"] == "idle"] != ["ready"]


def test_a_desk_that_loses_a_race_reads_the_claims_again_before_its_next_try(forge: Forge, tmp_path: Path) -> None:
    """The desk's view of the queue is older than three claims another desk made: its first try is refused, and
    it then reads the claims again and claims the first brief nobody took, instead of pushing against each of the
    others (a refused push costs the forge what a landed one does)."""
    from collections.abc import Sequence

    from assay.core.claims import Claims
    from assay.core.deskspec import load_desk
    from assay.core.forge.plain import PlainReviews
    from assay.core.git import ForgeGit, PushResult, RefUpdate
    from assay.desk.loop import Desk
    from assay.desk.queue import read_snapshot

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    **{f"briefs/b{i}.md": brief(f"B{i}", ["run true"], "true") for i in range(5)}})

    class Racing(ForgeGit):
        """Another desk takes b0, b1 and b2 just before this port's first push."""
        pushes = 0

        def push(self, updates: Sequence[RefUpdate], atomic: bool = False) -> dict[str, PushResult]:
            self.pushes += 1
            if self.pushes == 1:
                other = ForgeGit(forge.url)
                for taken in ("b0", "b1", "b2"):
                    Claims(other).claim(taken, "builder", holder="another")
                other.close()
            return super().push(updates, atomic)

    port = Racing(forge.url)
    claims = Claims(port)
    desk = Desk(port, claims, PlainReviews(port), load_desk(port, claims.read_view().main, "builder"),
                tmp_path / "state", echo=lambda _: None)
    claims.view = None  # the snapshot reads it
    taken, claim = desk._next(read_snapshot(claims), set())
    assert taken is not None and claim is not None and taken.id == "b3"
    assert port.pushes == 2  # b0 refused, b3 landed; b1 and b2 never tried
    assert [forge.claim_json(b)["holder"] for b in ("b0", "b1", "b2")] == ["another"] * 3
    assert forge.claim_json("b3")["holder"] == desk.holder
    port.close()


def sweeping_desk(forge: Forge, tmp_path: Path) -> tuple[ForgeGit, Desk, Path]:
    """A desk whose sweep is due, a claim on the forge for it to observe, and its state folder: (its forge port,
    the desk, the folder)."""
    from assay.core.claims import Claims
    from assay.core.deskspec import load_desk
    from assay.core.forge.plain import PlainReviews
    from assay.core.git import ForgeGit
    from assay.desk.loop import Desk

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/b0.md": brief("B0", ["run true"], "true")})
    port = ForgeGit(forge.url)
    claims = Claims(port)
    claims.claim("b0", "builder", holder="elsewhere")  # a claim for the sweep to observe
    state = tmp_path / "state"
    state.mkdir()
    desk = Desk(port, claims, PlainReviews(port), load_desk(port, claims.read_view().main, "builder"), state,
                echo=lambda _: None)
    return port, desk, state


def test_a_desk_leaves_the_sweep_to_another_desk_of_its_host_that_sweeps_now(forge: Forge, tmp_path: Path) -> None:
    """Desks of one host (one state folder) whose sweeps fall due together, as on a forge slow to answer, make
    one sweep, not one each: the others skip it while the lock of the one sweeping is held, and the pass's look
    reads the forge as before."""
    import fcntl

    port, desk, state = sweeping_desk(forge, tmp_path)
    fd = os.open(state / "sweep.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another desk of the host sweeps now
    desk._sweep_if_due()
    assert forge.tip("refs/assay/sweeper") is None  # no second sweep at once: nothing observed, nothing written
    os.close(fd)
    desk._swept_at = None  # due again, and alone now
    desk._sweep_if_due()
    assert forge.tip("refs/assay/sweeper") is not None  # its sweep recorded what it observed
    port.close()


HOLDER = """
import sys, time
from pathlib import Path
from assay.desk.loop import _host_sweep
with _host_sweep(Path(sys.argv[1])) as alone:
    print("sweeping" if alone else "skipped", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("fate", ["paused", "killed", "stuck"])
def test_a_desk_holding_its_hosts_sweep_paused_or_killed_stops_no_sweep(forge: Forge, tmp_path: Path,
                                                                        fate: str) -> None:
    """The desk of the host that sweeps is SIGSTOPped or SIGKILLed mid-sweep, or stuck in it past
    `SWEEP_HELD_S`, holding the host's sweep lock: the next desk whose sweep falls due sweeps all the same (a
    stopped or stuck holder is seen as such; a dead one's lock the kernel freed), so no process of the host leaves
    its claims unswept."""
    port, desk, state = sweeping_desk(forge, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(state)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "sweeping"
        desk._sweep_if_due()
        assert forge.tip("refs/assay/sweeper") is None  # it sweeps, alive and running: no second sweep at once
        if fate == "paused":
            os.kill(holder.pid, signal.SIGSTOP)
            procs.await_state(holder.pid, "T", deadline_s=10)
        elif fate == "killed":
            holder.kill()
            holder.wait(timeout=30)
        else:  # it runs, and has held the lock longer than any sweep takes
            from assay.desk.loop import SWEEP_HELD_S

            held = time.time() - SWEEP_HELD_S - 60
            os.utime(state / "sweep.lock", (held, held))
        desk._swept_at = None  # due again
        desk._sweep_if_due()
        assert forge.tip("refs/assay/sweeper") is not None  # swept beside the paused one, or after the dead one
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait(timeout=30)
        port.close()


def test_a_dead_desks_claim_that_began_to_wait_meanwhile_is_not_taken_over(forge: Forge, tmp_path: Path) -> None:
    """A desk's look saw a claim of its name held by a process of its host that has ended since: orphaned work,
    to take over. But that process put the brief to wait before it ended (its review ready): the takeover, judged
    on a `held` claim, finds it waiting when it writes and leaves it; the brief is not run twice."""
    from assay.core import custody
    from assay.core.claims import Claims
    from assay.core.deskspec import load_desk
    from assay.core.forge.plain import PlainReviews
    from assay.core.git import ForgeGit
    from assay.desk.loop import Desk
    from assay.desk.queue import read_snapshot

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/b0.md": brief("B0", ["run true"], "true")})
    ended = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    holder = f"builder/{os.uname().nodename}/{int(ended.stdout)}/gone"  # a process of this host, ended
    port = ForgeGit(forge.url)
    claims = Claims(port)
    claims.claim("b0", "builder", holder=holder)
    desk = Desk(port, claims, PlainReviews(port), load_desk(port, claims.read_view().main, "builder"),
                tmp_path / "state", echo=lambda _: None)
    snapshot = read_snapshot(claims)
    assert snapshot.claims["b0"].record.state == "held"  # what the desk's look saw
    custody.wait(Claims(ForgeGit(forge.url)), "b0", "review", by="builder")  # what its holder did before it ended
    assert desk._next(snapshot, set()) == (None, None)
    last = forge.chain("b0")[-1]
    assert (last["state"], last["epoch"], last["holder"]) == ("waiting", 1, holder)
    port.close()


def test_a_desk_that_fails_unexpectedly_hands_its_brief_back_at_once(forge: Forge, tmp_path: Path) -> None:
    """An error no part of the desk expected (a full disk, a bug) in a brief's run ends the desk as a stop does:
    the run ended and the claim handed back with the error named, so the next desk resumes the brief now; its
    holder's life goes on (a desk that is a thread of a host), and its lease (120 s) would have held it."""
    from assay.core.claims import Claims
    from assay.core.deskspec import load_desk
    from assay.core.forge.plain import PlainReviews
    from assay.core.git import ForgeGit
    from assay.desk.loop import Desk

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/b0.md": brief("B0", ["write b0.txt hi"], "test -f b0.txt")})

    class Failing(Desk):
        def _work(self, *args: Any) -> str:
            raise OSError(28, f"No space left on device\n{token}")

    token = "ghp_" + "x" * 36  # an error's words are masked before they reach the forge
    port = ForgeGit(forge.url)
    claims = Claims(port)
    desk = Failing(port, claims, PlainReviews(port), load_desk(port, claims.read_view().main, "builder"),
                   tmp_path / "state", echo=lambda _: None)
    with pytest.raises(OSError, match="No space left"):
        desk.run(once=True)
    port.close()
    last = forge.chain("b0")[-1]
    assert last["state"] == "released" and last["holder"] == desk.holder, last
    assert "OSError: [Errno 28] No space left on device" in str(last["reason"]), last
    assert token not in json.dumps(forge.chain("b0")) and "\n" not in str(last["reason"])
    again = run_desk(forge, "builder", tmp_path)  # another desk, at once: no lease to wait out
    assert again.code == 0 and "review ready" in again.out, again.out + again.err


def test_an_error_raised_as_a_stop_was_handled_gives_way_to_the_stop(forge: Forge, tmp_path: Path) -> None:
    """An unexpected error raised while a stop was being handled (a pipe the same signal broke) is the stop's doing:
    the brief is handed back as stopped, and the stop, not the error, ends the desk."""
    from assay.core.claims import Claims
    from assay.core.deskspec import load_desk
    from assay.core.forge.plain import PlainReviews
    from assay.core.git import ForgeGit
    from assay.desk.loop import Desk

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/b0.md": brief("B0", ["write b0.txt hi"], "test -f b0.txt")})

    class Stopped(Desk):
        def _work(self, *args: Any) -> str:
            try:
                raise KeyboardInterrupt("SIGTERM")
            except KeyboardInterrupt:
                raise BrokenPipeError(32, "Broken pipe") from None  # (the context stays: what was being handled)

    port = ForgeGit(forge.url)
    claims = Claims(port)
    desk = Stopped(port, claims, PlainReviews(port), load_desk(port, claims.read_view().main, "builder"),
                   tmp_path / "state", echo=lambda _: None)
    with pytest.raises(KeyboardInterrupt):
        desk.run(once=True)
    port.close()
    last = forge.chain("b0")[-1]
    assert last["state"] == "released" and "stopped by SIGTERM" in str(last["reason"]), last
