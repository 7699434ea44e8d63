"""Forge events acted on exactly once (`assay event`, `signals.settle`), against the fake GitHub: a review that
requests changes starts one new round with its text, a comment command from someone who may not write is
refused, a merge settles the claim, finished checks wake a `checks` wait; the same payload twice and a re-run
act once (journal entries and API calls counted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.journal import read_log
from assay.core.records import JournalEntry
from tests.conftest import Forge, assay
from tests.fakegithub import FakeGitHub
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
