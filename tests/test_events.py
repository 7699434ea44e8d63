"""Forge events acted on exactly once (`assay event`, `signals.settle`), against the fake GitHub: a review that
requests changes starts one new round with its text, a comment command from someone who may not write is
refused, a merge settles the claim, finished checks wake a `checks` wait, a writer's review thread starts one
round that the desk answers in the thread; the same payload twice and a re-run act once (journal entries and API
calls counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.journal import read_log
from assay.core.records import JournalEntry
from tests.conftest import Forge, assay, git
from tests.fakegithub import FakeGitHub
from tests.fakegithub.faults import Fault
from tests.fakegithub.webhooks import payloads
from tests.fakegithub.webhooks.validate import problems
from tests.helpers.desks import DESK, brief, publish
from tests.helpers.github import NAME, OWNER, github_repo


@dataclass
class Fleet:
    gh: FakeGitHub
    env: dict[str, str]
    tmp: Path

    def desk(self, *extra: str) -> str:
        done = assay("desk", "run", "builder", "--once", *extra, env=self.env, timeout=180)
        assert done.code == 0, done.out + done.err
        return done.out

    def event(self, name: str, payload: dict[str, Any] | None, run: str = "1", attempt: str = "1",
              expect: int = 0) -> dict[str, Any]:
        args = ["event", name]
        if payload is not None:
            action = payload.get("action") if name not in ("push", "workflow_dispatch") else None
            assert problems(name, action, payload) == [], "the payload must be one GitHub could send"
            path = self.tmp / f"event-{name}-{run}-{attempt}.json"
            path.write_text(json.dumps(payload))
            args.append(str(path))
        done = assay(*args, "--json", env={**self.env, "GITHUB_RUN_ID": run, "GITHUB_RUN_ATTEMPT": attempt})
        assert done.code == expect, done.out + done.err
        report = done.json()
        assert isinstance(report, dict)
        return report

    def journal(self, brief_id: str) -> list[JournalEntry]:
        git = ForgeGit(str(self.gh.repo(OWNER, NAME).path))  # the repository on the fake's disk, read directly
        try:
            return read_log(git, brief_id).entries
        finally:
            git.close()

    def claim(self, brief_id: str) -> tuple[str, int, str]:
        git = ForgeGit(str(self.gh.repo(OWNER, NAME).path))
        try:
            found = Claims(git).read(brief_id)
            assert found is not None
            return found.record.state, found.record.epoch, str((found.record.wait or {}).get("on", ""))
        finally:
            git.close()

    def api_calls(self) -> int:
        return sum(self.gh.calls.values())


@pytest.fixture
def fleet(forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> Fleet:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log"),
           "ASSAY_PERSON": "github-actions"}
    made = Fleet(fake_github, env, tmp_path)
    assert "review ready" in made.desk()
    assert made.claim("gh") == ("waiting", 1, "review")
    return made


def _pull(fleet: Fleet) -> int:
    [pull] = fleet.gh.pulls(OWNER, NAME)
    return pull.number


def wakes(entries: list[JournalEntry]) -> list[JournalEntry]:
    return [e for e in entries if e.kind == "wake"]


def test_a_review_requesting_changes_starts_one_round_with_its_text(fleet: Fleet) -> None:
    gh, number = fleet.gh, _pull(fleet)
    gh.grant(OWNER, NAME, "alice")
    review = gh.review(OWNER, NAME, number, "CHANGES_REQUESTED", "Handle the empty file too.", by="alice")
    payload = payloads.review_submitted(gh, OWNER, NAME, number, review)
    before = fleet.api_calls()
    first = fleet.event("pull_request_review", payload)
    calls = fleet.api_calls() - before
    [settled] = first["briefs"]
    assert settled["woken"] and settled["state"] == "held" and first["desks"] == ["builder"]
    assert fleet.claim("gh")[:2] == ("held", 1)
    [wake] = wakes(fleet.journal("gh"))
    assert wake.data is not None and wake.data["signals"] == [f"review:{review}"]
    assert wake.data["event"] == {"event": "pull_request_review", "id": str(review), "run": "1", "attempt": "1"}
    assert "@alice requested changes" in wake.data["round"]["reason"]
    assert calls <= 6, gh.calls  # find, reviews, comments, alice's permission, the pull request (peek)

    # the same delivery again, and the workflow re-run: no second wake
    again = fleet.event("pull_request_review", payload)
    rerun = fleet.event("pull_request_review", payload, attempt="2")
    assert not again["briefs"][0]["woken"] and not rerun["briefs"][0]["woken"]
    assert len(wakes(fleet.journal("gh"))) == 1

    out = fleet.desk("--singleton")  # the desk's job: a new round, the review's text in its prompt
    assert "a new round" in out and "waiting for merge" in out, out
    [prompt] = (fleet.tmp / "state").glob("*/prompts/gh-2-1.md")
    assert "Handle the empty file too." in prompt.read_text() and "@alice requested changes" in prompt.read_text()
    assert fleet.claim("gh") == ("waiting", 2, "review")

    # waiting again: the old review's event, delivered late or re-run, wakes nothing
    late = fleet.event("pull_request_review", payload, run="2")
    assert not late["briefs"][0]["woken"] and fleet.claim("gh") == ("waiting", 2, "review")
    assert len(wakes(fleet.journal("gh"))) == 1


def test_a_comment_command_from_someone_who_may_not_write_is_refused(fleet: Fleet) -> None:
    gh, number = fleet.gh, _pull(fleet)
    comment = gh.comment(OWNER, NAME, number, "/assay retry", by="stranger")  # read access only
    report = fleet.event("issue_comment", payloads.comment_created(gh, OWNER, NAME, number, comment))
    [settled] = report["briefs"]
    assert not settled["woken"] and fleet.claim("gh")[0] == "waiting" and report["desks"] == []
    assert any("stranger may not write to the repository" in line for line in settled["did"])
    notes = [e for e in fleet.journal("gh") if e.kind == "note" and (e.data or {}).get("refused")]
    assert len(notes) == 1 and notes[0].data is not None and notes[0].data["signals"] == [f"comment:{comment}"]
    fleet.event("issue_comment", payloads.comment_created(gh, OWNER, NAME, number, comment), attempt="2")
    assert len([e for e in fleet.journal("gh") if e.kind == "note" and (e.data or {}).get("refused")]) == 1

    gh.grant(OWNER, NAME, "bob")  # a writer's steering: journaled once, and a new round
    steer = gh.comment(OWNER, NAME, number, "/assay steer Keep the file under ten lines.", by="bob")
    report = fleet.event("issue_comment", payloads.comment_created(gh, OWNER, NAME, number, steer))
    assert report["briefs"][0]["woken"] and report["desks"] == ["builder"]
    steering = [e for e in fleet.journal("gh") if e.kind == "steer"]
    assert [(e.data or {}).get("text") for e in steering] == ["Keep the file under ten lines."]


def test_a_merge_settles_the_claim_once(fleet: Fleet) -> None:
    gh, number = fleet.gh, _pull(fleet)
    gh.merge(OWNER, NAME, number, by="maintainer")
    payload = payloads.pull_closed(gh, OWNER, NAME, number, "maintainer")
    report = fleet.event("pull_request", payload)
    assert report["briefs"][0]["state"] == "done" and fleet.claim("gh")[0] == "done"
    assert report["desks"] == []
    again = fleet.event("pull_request", payload, attempt="2")
    assert again["briefs"][0]["did"] == []
    releases = [e for e in fleet.journal("gh") if e.kind == "claim" and (e.data or {}).get("outcome") == "done"]
    assert len(releases) == 1


def test_a_close_blocks_the_brief_with_the_closers_words(fleet: Fleet) -> None:
    gh, number = fleet.gh, _pull(fleet)
    gh.comment(OWNER, NAME, number, "We do not need this after all.", by="carol")
    gh.close(OWNER, NAME, number, by="carol")
    fleet.event("pull_request", payloads.pull_closed(gh, OWNER, NAME, number, "carol"))
    state = fleet.claim("gh")
    assert state[0] == "blocked"
    [block] = [e for e in fleet.journal("gh") if e.kind == "claim" and (e.data or {}).get("action") == "block"]
    assert block.data is not None
    assert "closed by @carol: We do not need this after all." in block.data["reason"]


def test_finished_checks_wake_a_checks_wait(fleet: Fleet) -> None:
    gh, number = fleet.gh, _pull(fleet)
    assert assay("wake", "gh", env=fleet.env).code == 0
    parked = assay("wait", "gh", "--on", "checks", env=fleet.env)
    assert parked.code == 0, parked.err
    head = gh.pull(OWNER, NAME, number).head_sha
    gh.check_run(OWNER, NAME, head, "test", status="in_progress", conclusion=None)
    running = payloads.check_suite_completed(gh, OWNER, NAME, branch="assay/gh", head_sha=head,
                                             conclusion="success", suite_id=1)
    report = fleet.event("check_suite", running)
    assert not report["briefs"][0]["woken"] and fleet.claim("gh")[0] == "waiting"  # one job still runs
    gh.check_run(OWNER, NAME, head, "test", conclusion="failure")
    run = payloads.workflow_run_completed(gh, OWNER, NAME, branch="assay/gh", head_sha=head, conclusion="failure",
                                          run_id=77)
    report = fleet.event("workflow_run", run)
    assert report["briefs"][0]["woken"] and report["desks"] == ["builder"]
    [wake] = wakes(fleet.journal("gh"))[-1:]
    assert wake.data is not None and "1 failed (test)" in wake.data["round"]["reason"]
    assert not fleet.event("workflow_run", run, attempt="2")["briefs"][0]["woken"]


def test_a_checks_wait_on_a_plain_forge_is_refused(forge: Forge) -> None:
    publish(forge, {"briefs/p.md": brief("P", ["write p.txt hi"], "true")})
    env = {"ASSAY_FORGE": forge.url}
    assert assay("claim", "p", "--desk", "d", env=env).code == 0
    done = assay("wait", "p", "--on", "checks", env=env)
    assert done.code == 2 and "no checks to wait on" in done.err and "Traceback" not in done.err


def test_an_event_about_no_assay_branch_does_nothing(fleet: Fleet) -> None:
    gh, number = fleet.gh, _pull(fleet)
    main = gh.pull(OWNER, NAME, number).base_sha
    run = payloads.workflow_run_completed(gh, OWNER, NAME, branch="feature/x", head_sha=main,
                                          conclusion="success", run_id=5)
    before = fleet.api_calls()
    report = fleet.event("workflow_run", run)
    assert "not about an Assay branch" in report["ignored"] and report["desks"] == []
    assert fleet.api_calls() == before


def test_a_bad_payload_is_a_clear_error_and_writes_nothing(fleet: Fleet) -> None:
    junk = fleet.tmp / "junk.json"
    junk.write_text("{not json")
    done = assay("event", "pull_request_review", str(junk), env=fleet.env)
    assert done.code == 2 and "is not JSON" in done.err and "Traceback" not in done.err
    unknown = assay("event", "gollum", env=fleet.env)
    assert unknown.code == 2 and "unknown event 'gollum'" in unknown.err
    assert fleet.claim("gh") == ("waiting", 1, "review")


def test_a_desk_between_passes_acts_on_requested_changes_itself(fleet: Fleet) -> None:
    """No event at all: a desk's own pass reads its waiting briefs' reviews (once a heartbeat) and works the
    new round."""
    gh, number = fleet.gh, _pull(fleet)
    gh.grant(OWNER, NAME, "alice")
    gh.review(OWNER, NAME, number, "CHANGES_REQUESTED", "Name the file hello.txt.", by="alice")
    out = fleet.desk()
    assert "woken: @alice requested changes" in out and "a new round" in out, out
    assert fleet.claim("gh") == ("waiting", 2, "review")
    assert len(wakes(fleet.journal("gh"))) == 1


def test_racing_deliveries_and_the_backstop_wake_the_brief_once(fleet: Fleet) -> None:
    """Four deliveries of the same review and a scheduled backstop, as five processes at once: one wake."""
    gh, number = fleet.gh, _pull(fleet)
    gh.grant(OWNER, NAME, "alice")
    review = gh.review(OWNER, NAME, number, "CHANGES_REQUESTED", "Shorter, please.", by="alice")
    path = fleet.tmp / "review.json"
    payload = payloads.review_submitted(gh, OWNER, NAME, number, review)
    assert problems("pull_request_review", "submitted", payload) == []
    path.write_text(json.dumps(payload))
    env = {**os.environ, **fleet.env}
    procs = [subprocess.Popen([sys.executable, "-m", "assay", "event", "pull_request_review", str(path), "--json"],
                              env={**env, "GITHUB_RUN_ATTEMPT": str(i)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    procs.append(subprocess.Popen([sys.executable, "-m", "assay", "event", "schedule", "--json"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    woke = [b for r in reports for b in r["briefs"] if b["woken"]]
    assert len(woke) == 1 and len(wakes(fleet.journal("gh"))) == 1
    assert sum(1 for r in reports if r["desks"] == ["builder"]) >= 1
    assert fleet.claim("gh")[:2] == ("held", 1)


@pytest.mark.parametrize("event", ["schedule", "push", "workflow_dispatch"])
def test_events_about_every_brief_list_the_desks_with_ready_work(forge: Forge, event: str) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "desks/idle.yaml": DESK.format(name="idle", attempts=2).replace("[work]", "[other]"),
                    "briefs/r.md": brief("R", ["write r.txt hi"], "test -f r.txt")})
    done = assay("event", event, "--json", env={"ASSAY_FORGE": forge.url})
    assert done.code == 0, done.err
    report = done.json()
    assert isinstance(report, dict) and report["desks"] == ["builder"]  # it takes the ready brief; idle takes none
    named = assay("event", event, "--desks", "idle", "--json", env={"ASSAY_FORGE": forge.url})
    assert named.code == 0 and named.json()["desks"] == ["idle"]  # type: ignore[index]
    unknown = assay("event", event, "--desks", "nobody", env={"ASSAY_FORGE": forge.url})
    assert unknown.code == 2 and "no desk named nobody on main" in unknown.err


def test_an_endless_or_oversized_payload_is_refused_and_writes_nothing(forge: Forge, tmp_path: Path) -> None:
    """GitHub caps a webhook payload at 25 MB: a larger file, or one that never ends, is bad input (exit 2)."""
    publish(forge, {"briefs/p.md": brief("P", ["write p.txt hi"], "true")})
    env = {"ASSAY_FORGE": forge.url}
    assert assay("claim", "p", "--desk", "d", env=env).code == 0
    before = git("for-each-ref", cwd=forge.path)
    big = tmp_path / "big.json"
    big.write_text('{"action": "created", "x": "' + "x" * (26 * 1024 * 1024) + '"}')
    for path in ("/dev/zero", str(big)):
        done = assay("event", "issue_comment", path, env=env, timeout=30)
        assert done.code == 2, done.out + done.err
        assert "larger than GitHub's 25 MB" in done.err and "Traceback" not in done.err
    assert git("for-each-ref", cwd=forge.path) == before


def test_a_second_checks_wait_in_the_same_epoch_is_woken_too(fleet: Fleet) -> None:
    """The same epoch waits on the same head's checks twice: each wait is woken once; a duplicate delivery of the
    event that woke the first wakes nothing more."""
    gh, number = fleet.gh, _pull(fleet)
    assert assay("wake", "gh", env=fleet.env).code == 0
    assert assay("wait", "gh", "--on", "checks", env=fleet.env).code == 0
    head = gh.pull(OWNER, NAME, number).head_sha
    gh.check_run(OWNER, NAME, head, "test", conclusion="success")
    run = payloads.workflow_run_completed(gh, OWNER, NAME, branch="assay/gh", head_sha=head, conclusion="success",
                                          run_id=81)
    assert fleet.event("workflow_run", run)["briefs"][0]["woken"]
    assert assay("wait", "gh", "--on", "checks", env=fleet.env).code == 0  # the agent waits on them again
    assert fleet.claim("gh") == ("waiting", 1, "checks")
    again = fleet.event("workflow_run", run, run="2")  # the checks finished (a re-run, or the backstop's look)
    assert again["briefs"][0]["woken"], again
    assert fleet.claim("gh")[:2] == ("held", 1)
    first, second = [(w.data or {}).get("signals") for w in wakes(fleet.journal("gh")) if (w.data or {}).get("signals")]
    assert first != second
    assert not fleet.event("workflow_run", run, run="2", attempt="2")["briefs"][0]["woken"]
    assert len(wakes(fleet.journal("gh"))) == 3  # `assay wake`'s, and one for each wait


def test_a_token_that_cannot_read_check_runs_stops_one_brief_not_the_pass(fleet: Fleet, forge: Forge) -> None:
    """GitHub refuses the check runs (403, the token has no Checks permission): the brief waiting on them is
    reported with the permission to add; the desk's pass goes on and works another brief."""
    gh = fleet.gh
    assert assay("wake", "gh", env=fleet.env).code == 0
    assert assay("wait", "gh", "--on", "checks", env=fleet.env).code == 0
    publish(forge, {"briefs/more.md": brief("More", ["write more.txt hi"], "test -f more.txt")})
    pushed = subprocess.run(["git", "push", "-q", gh.git_url(OWNER, NAME), "HEAD:refs/heads/main"], cwd=forge.seed,
                            env={**os.environ, **gh.git_env()}, capture_output=True, text=True)
    assert pushed.returncode == 0, pushed.stderr
    gh.faults.arm("GET", r"/check-runs$", Fault.NOT_ACCESSIBLE, times=1000, accepted="checks=read")
    out = fleet.desk()
    assert fleet.claim("more") == ("waiting", 1, "review"), out  # worked in the same pass
    assert fleet.claim("gh") == ("waiting", 1, "checks")
    lines = [ln for ln in out.splitlines() if "builder: gh:" in ln and "403" in ln]  # once a heartbeat
    assert lines and all("`checks: read`" in ln and "Checks: read" in ln for ln in lines), out
    report = fleet.event("schedule", None)  # the event job says so too, for that brief, and lists the desks
    [gh_report] = [b for b in report["briefs"] if b["brief"] == "gh"]
    assert any("checks: read" in d for d in gh_report["did"]) and not gh_report["woken"]


def test_a_permission_read_that_fails_does_not_use_up_a_writers_command(fleet: Fleet) -> None:
    """GitHub answers the collaborator permission read with 404 (no answer, not a "no"): the command is left for
    the next look, which acts on it."""
    gh, number = fleet.gh, _pull(fleet)
    gh.grant(OWNER, NAME, "alice")
    comment = gh.comment(OWNER, NAME, number, "/assay retry", by="alice")
    payload = payloads.comment_created(gh, OWNER, NAME, number, comment)
    gh.faults.arm("GET", r"/collaborators/alice/permission$", Fault.NOT_FOUND)
    first = fleet.event("issue_comment", payload)
    [settled] = first["briefs"]
    assert not settled["woken"] and fleet.claim("gh")[0] == "waiting" and first["desks"] == []
    assert any("alice" in line and "next look" in line for line in settled["did"]), settled["did"]
    assert [e for e in fleet.journal("gh") if f"comment:{comment}" in ((e.data or {}).get("signals") or [])] == []
    again = fleet.event("issue_comment", payload, attempt="2")  # the re-run, GitHub answering now
    assert again["briefs"][0]["woken"] and again["desks"] == ["builder"]
    [wake] = wakes(fleet.journal("gh"))
    assert wake.data is not None and wake.data["signals"] == [f"comment:{comment}"]


def test_a_command_on_an_older_pull_request_of_a_redone_brief_is_acted_on(fleet: Fleet) -> None:
    """The brief's first pull request was closed and the brief redone in a second one: `/assay retry` on the first
    is a command about the brief, acted on once."""
    gh, first = fleet.gh, _pull(fleet)
    gh.grant(OWNER, NAME, "alice")
    gh.close(OWNER, NAME, first, by="alice")
    fleet.event("pull_request", payloads.pull_closed(gh, OWNER, NAME, first, "alice"))
    retry = gh.comment(OWNER, NAME, first, "/assay retry", by="alice")
    assert fleet.event("issue_comment", payloads.comment_created(gh, OWNER, NAME, first, retry))["briefs"][0][
        "state"] == "released"
    fleet.desk()
    assert fleet.claim("gh")[0] == "waiting" and len(gh.pulls(OWNER, NAME)) == 2  # redone: a second pull request
    late = gh.comment(OWNER, NAME, first, "/assay retry", by="alice")
    payload = payloads.comment_created(gh, OWNER, NAME, first, late)
    report = fleet.event("issue_comment", payload)
    [settled] = report["briefs"]
    assert settled["woken"] and report["desks"] == ["builder"], settled
    assert wakes(fleet.journal("gh"))[-1].data["signals"] == [f"comment:{late}"]  # type: ignore[index]
    assert not fleet.event("issue_comment", payload, attempt="2")["briefs"][0]["woken"]


def test_changes_requested_while_the_desk_works_start_a_round_when_it_next_waits(fleet: Fleet, forge: Forge,
                                                                                  tmp_path: Path) -> None:
    """Changes requested while a desk works the brief are acted on as soon as the brief waits again, by the same
    desk pass (docs/github.md), not left for the schedule."""
    gh = fleet.gh
    hold, working = tmp_path / "hold", tmp_path / "working"
    script = ["write slow.txt hi", f"run [ ! -f {hold} ] || {{ touch {working}; while [ -f {hold} ]; do sleep 0.1; "
              "done; }"]
    publish(forge, {"briefs/slow.md": brief("Slow", script, "test -f slow.txt")})
    pushed = subprocess.run(["git", "push", "-q", gh.git_url(OWNER, NAME), "HEAD:refs/heads/main"], cwd=forge.seed,
                            env={**os.environ, **gh.git_env()}, capture_output=True, text=True)
    assert pushed.returncode == 0, pushed.stderr
    fleet.desk()
    assert fleet.claim("slow")[0] == "waiting"
    [number] = [p.number for p in gh.pulls(OWNER, NAME) if p.head == "assay/slow"]
    gh.grant(OWNER, NAME, "alice")
    first = gh.review(OWNER, NAME, number, "CHANGES_REQUESTED", "Say hello.", by="alice")
    assert fleet.event("pull_request_review", payloads.review_submitted(gh, OWNER, NAME, number, first))[
        "briefs"][0]["woken"]
    hold.write_text("")
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--singleton"],
                            env={**os.environ, **fleet.env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not working.exists():  # the agent is at work on the round
            assert desk.poll() is None and time.monotonic() < deadline, desk.communicate()[0]
            time.sleep(0.05)
        second = gh.review(OWNER, NAME, number, "CHANGES_REQUESTED", "Second thoughts: say goodbye.", by="alice")
        during = fleet.event("pull_request_review", payloads.review_submitted(gh, OWNER, NAME, number, second))
        assert not during["briefs"][0]["woken"] and during["briefs"][0]["state"] == "held"
        hold.unlink()
        out, _ = desk.communicate(timeout=120)
    finally:
        if desk.poll() is None:
            desk.kill()
            desk.wait()
    assert desk.returncode == 0, out
    slow = wakes(fleet.journal("slow"))
    assert [(w.data or {}).get("signals") for w in slow] == [[f"review:{first}"], [f"review:{second}"]], out
    assert fleet.claim("slow")[0] == "waiting", out  # the round the second review asked for was worked
    prompts = [p.read_text() for p in (fleet.tmp / "state").glob("*/prompts/slow-*.md")]
    assert any("Second thoughts: say goodbye." in p for p in prompts), out


def _publish_and_work(fleet: Fleet, forge: Forge, brief_id: str, text: str) -> int:
    """A second brief on the fake's main, worked by a desk pass to a waiting pull request; that pull's number."""
    gh = fleet.gh
    publish(forge, {f"briefs/{brief_id}.md": text})
    pushed = subprocess.run(["git", "push", "-q", gh.git_url(OWNER, NAME), "HEAD:refs/heads/main"], cwd=forge.seed,
                            env={**os.environ, **gh.git_env()}, capture_output=True, text=True)
    assert pushed.returncode == 0, pushed.stderr
    fleet.desk()
    assert fleet.claim(brief_id) == ("waiting", 1, "review")
    [number] = [p.number for p in gh.pulls(OWNER, NAME) if p.head == f"assay/{brief_id}"]
    return number


def test_a_review_thread_wakes_its_brief_once_and_the_desk_answers_it_in_the_thread(fleet: Fleet,
                                                                                     forge: Forge) -> None:
    """A writer's review thread, delivered as `pull_request_review_comment`, starts one round; the desk's reply in
    the thread names the commit that addresses it, and that reply's own event wakes nothing."""
    gh = fleet.gh
    number = _publish_and_work(fleet, forge, "th", brief("Th", ["append th.txt hi", "answer-threads fixed said hi "
                                                                "twice"], "grep -q hi th.txt"))
    before = gh.pull(OWNER, NAME, number).head_sha
    gh.grant(OWNER, NAME, "alice")
    opened = gh.thread(OWNER, NAME, number, "Say hi twice.", path="th.txt", by="alice")
    payload = payloads.review_comment_created(gh, OWNER, NAME, number, opened)
    first = fleet.event("pull_request_review_comment", payload)
    [settled] = first["briefs"]
    assert settled["brief"] == "th" and settled["woken"] and first["desks"] == ["builder"], first
    assert fleet.claim("th")[:2] == ("held", 1)
    [wake] = wakes(fleet.journal("th"))
    assert wake.data is not None and wake.data["signals"] == [f"thread:{opened}:{opened}"]
    assert wake.data["event"] == {"event": "pull_request_review_comment", "id": str(opened), "run": "1",
                                  "attempt": "1"}

    again = fleet.event("pull_request_review_comment", payload, attempt="2")  # the same delivery: nothing
    assert again["briefs"][0]["did"] == [] and not again["briefs"][0]["woken"] and again["desks"] == []
    assert len(wakes(fleet.journal("th"))) == 1

    out = fleet.desk("--singleton")  # the round: the agent answers the thread, the desk replies in it
    assert "a new round" in out and "review ready" in out, out
    assert fleet.claim("th") == ("waiting", 2, "review")
    head = gh.pull(OWNER, NAME, number).head_sha
    assert head != before
    [answer] = [c for c in gh.review_comments(OWNER, NAME, number) if c.id != opened]
    assert answer.in_reply_to_id == opened
    assert answer.body.startswith(f"Addressed in {head}: said hi twice\n") and "<!-- assay:answer:" in answer.body

    own = fleet.event("pull_request_review_comment",  # the desk's own reply is delivered too: it wakes nothing
                      payloads.review_comment_created(gh, OWNER, NAME, number, answer.id), run="2")
    assert not own["briefs"][0]["woken"] and own["desks"] == [] and fleet.claim("th") == ("waiting", 2, "review")
    assert len(wakes(fleet.journal("th"))) == 1
