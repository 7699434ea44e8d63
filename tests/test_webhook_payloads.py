"""Webhook payloads built from the fake's state: valid against GitHub's published schemas, and saying what the
fake's REST API says about the same pull request, review, comment and commits."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import Forge
from tests.fakegithub import FakeGitHub
from tests.fakegithub.webhooks import payloads, validate
from tests.helpers.github import NAME, OWNER, World, github_repo, github_reviews


def api(gh: FakeGitHub, path: str) -> Any:
    """GET a path of the fake's REST API as a client would."""
    req = urllib.request.Request(f"{gh.api_url}/repos/{OWNER}/{NAME}{path}",
                                 headers={"Authorization": f"Bearer {gh.token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@dataclass
class Scene:
    """`acme/app` with #number from `assay/alpha` at `head`, changes requested, commented on, a review thread
    opened and replied to, then merged."""

    gh: FakeGitHub
    world: World
    number: int
    head: str
    main_before: str
    merge_sha: str
    review: dict[str, Any]
    comment: dict[str, Any]
    thread: dict[str, Any]  # a review thread's first comment, as the API lists it
    reply: dict[str, Any]  # a reply in that thread
    run: dict[str, Any]  # workflow_run / completed at the head while the pull request was open
    suite: dict[str, Any]  # check_suite / completed likewise


def _open(gh: FakeGitHub, w: World, brief: str) -> tuple[int, str]:
    head = w.push_branch(brief)
    w.reviews.open(brief, f"assay/{brief}", brief.title(), head)
    w.reviews.mark_ready(brief, head)
    return next(p.number for p in gh.pulls(OWNER, NAME) if p.head == f"assay/{brief}"), head


@pytest.fixture
def scene(fake_github: FakeGitHub, forge: Forge) -> Scene:
    gh = fake_github
    w = World(github_reviews(gh), github_repo(gh, forge.seed), forge.seed, gh.git_env())
    number, head = _open(gh, w, "alpha")
    gh.review(OWNER, NAME, number, "CHANGES_REQUESTED", "Please add a test.", by="reviewer")
    gh.comment(OWNER, NAME, number, "Added one.", by="author")
    [listed_review] = api(gh, f"/pulls/{number}/reviews")
    [listed_comment] = api(gh, f"/issues/{number}/comments")
    opened = gh.thread(OWNER, NAME, number, "Why alpha?", path="alpha.txt", by="reviewer")
    gh.reply(OWNER, NAME, number, opened, "Because it comes first.", by="author")
    listed_thread, listed_reply = api(gh, f"/pulls/{number}/comments")
    run = payloads.workflow_run_completed(gh, OWNER, NAME, branch="assay/alpha", head_sha=head,
                                          conclusion="failure", run_id=4242)
    suite = payloads.check_suite_completed(gh, OWNER, NAME, branch="assay/alpha", head_sha=head,
                                           conclusion="failure", suite_id=777)
    main_before = api(gh, "/commits/main")["sha"]
    merge_sha = gh.merge(OWNER, NAME, number, by="maintainer")
    return Scene(gh, w, number, head, main_before, merge_sha, listed_review, listed_comment, listed_thread,
                 listed_reply, run, suite)


def test_every_payload_meets_the_published_schema(scene: Scene) -> None:
    gh, n = scene.gh, scene.number
    built = {
        ("pull_request_review", "submitted"): payloads.review_submitted(gh, OWNER, NAME, n, scene.review["id"]),
        ("pull_request_review_comment", "created"): payloads.review_comment_created(gh, OWNER, NAME, n,
                                                                                    scene.thread["id"]),
        ("issue_comment", "created"): payloads.comment_created(gh, OWNER, NAME, n, scene.comment["id"]),
        ("pull_request", "closed"): payloads.pull_closed(gh, OWNER, NAME, n, by="maintainer"),
        ("workflow_run", "completed"): scene.run,
        ("check_suite", "completed"): scene.suite,
        ("push", None): payloads.push(gh, OWNER, NAME, before=scene.main_before, after=scene.merge_sha,
                                      added=["alpha.txt"]),
        ("workflow_dispatch", None): payloads.workflow_dispatch(gh, OWNER, NAME, {"brief": "alpha"}),
        ("merge_group", "checks_requested"): group(scene),
    }
    assert set(built) == set(validate.EVENTS)
    for (event, action), payload in built.items():
        assert validate.problems(event, action, payload) == [], (event, action)
        assert payload.get("action") == action
        assert payload["repository"]["full_name"] == f"{OWNER}/{NAME}"
    assert validate.problems("workflow_dispatch", None, payloads.workflow_dispatch(gh, OWNER, NAME, None)) == []
    reply = payloads.review_comment_created(gh, OWNER, NAME, n, scene.reply["id"])
    assert validate.problems("pull_request_review_comment", "created", reply) == []
    run = payloads.workflow_run_completed(gh, OWNER, NAME, branch="main", head_sha=scene.merge_sha,
                                          conclusion="success", run_id=4243, run_attempt=2, event="push")
    assert validate.problems("workflow_run", "completed", run) == []
    assert run["workflow_run"]["pull_requests"] == [] and run["workflow_run"]["previous_attempt_url"]


def group(scene: Scene) -> dict[str, Any]:
    """A merge group as the queue would have built #number's: its merge commit, on the main it merged into."""
    ref = f"refs/heads/gh-readonly-queue/main/pr-{scene.number}-{scene.head}"
    return payloads.merge_group_checks_requested(scene.gh, OWNER, NAME, head_sha=scene.merge_sha, head_ref=ref,
                                                 base_sha=scene.main_before, base_ref="refs/heads/main")


def test_a_merge_group_names_the_commit_the_api_has(scene: Scene) -> None:
    payload = group(scene)
    merge_group, commit = payload["merge_group"], api(scene.gh, f"/commits/{scene.merge_sha}")
    assert merge_group["head_commit"]["id"] == merge_group["head_sha"] == commit["sha"]
    assert merge_group["head_commit"]["tree_id"] == commit["commit"]["tree"]["sha"]
    assert merge_group["head_commit"]["message"] == commit["commit"]["message"]
    assert merge_group["base_sha"] == commit["parents"][0]["sha"] == scene.main_before
    assert merge_group["head_ref"].endswith(f"/pr-{scene.number}-{scene.head}")
    assert payload["sender"]["login"] == "github-merge-queue[bot]" and payload["sender"]["type"] == "Bot"
    with pytest.raises(ValueError, match="no commit"):
        payloads.merge_group_checks_requested(scene.gh, OWNER, NAME, head_sha="1" * 40, head_ref="x",
                                              base_sha=scene.main_before, base_ref="refs/heads/main")


def test_the_review_and_the_comment_are_the_ones_the_api_lists(scene: Scene) -> None:
    gh, n = scene.gh, scene.number
    payload = payloads.review_submitted(gh, OWNER, NAME, n, scene.review["id"])
    review, listed = payload["review"], scene.review
    assert review["state"] == "changes_requested" and listed["state"] == "CHANGES_REQUESTED"
    for key in ("id", "node_id", "html_url", "commit_id", "body", "submitted_at", "pull_request_url"):
        assert review[key] == listed[key], key
    assert review["user"]["login"] == listed["user"]["login"] == payload["sender"]["login"] == "reviewer"
    assert review["commit_id"] == scene.head
    pull = api(gh, f"/pulls/{n}")
    assert payload["pull_request"]["number"] == pull["number"] == n
    assert payload["pull_request"]["id"] == pull["id"]
    assert payload["pull_request"]["head"]["ref"] == pull["head"]["ref"] == "assay/alpha"
    assert payload["pull_request"]["html_url"] == pull["html_url"]
    assert payload["repository"]["id"] == api(gh, "")["id"]

    payload = payloads.comment_created(gh, OWNER, NAME, n, scene.comment["id"])
    comment, listed = payload["comment"], scene.comment
    for key in ("id", "html_url", "body", "created_at", "issue_url", "author_association"):
        assert comment[key] == listed[key], key
    assert comment["user"]["login"] == payload["sender"]["login"] == "author"
    assert payload["issue"]["number"] == n and payload["issue"]["url"] == listed["issue_url"]
    assert payload["issue"]["pull_request"]["html_url"] == pull["html_url"]
    assert payload["issue"]["pull_request"]["url"] == pull["url"]


def test_a_review_comment_is_the_one_the_api_lists_and_a_reply_names_its_thread(scene: Scene) -> None:
    gh, n = scene.gh, scene.number
    pull = api(gh, f"/pulls/{n}")
    for listed in (scene.thread, scene.reply):
        payload = payloads.review_comment_created(gh, OWNER, NAME, n, listed["id"])
        comment = payload["comment"]
        for key in ("id", "node_id", "pull_request_review_id", "body", "path", "line", "diff_hunk", "commit_id",
                    "original_commit_id", "html_url", "created_at", "pull_request_url"):
            assert comment[key] == listed[key], key
        assert comment.get("in_reply_to_id") == listed.get("in_reply_to_id")
        assert payload["sender"]["login"] == comment["user"]["login"] == listed["user"]["login"]
        assert payload["pull_request"]["number"] == n and payload["pull_request"]["id"] == pull["id"]
        assert payload["pull_request"]["head"]["ref"] == pull["head"]["ref"] == "assay/alpha"
    opened = payloads.review_comment_created(gh, OWNER, NAME, n, scene.thread["id"])
    replied = payloads.review_comment_created(gh, OWNER, NAME, n, scene.reply["id"])
    assert "in_reply_to_id" not in opened["comment"] and opened["sender"]["login"] == "reviewer"
    assert replied["comment"]["in_reply_to_id"] == scene.thread["id"] and replied["sender"]["login"] == "author"
    assert replied["comment"]["path"] == opened["comment"]["path"] == "alpha.txt"


def test_a_merged_pull_request_closes_merged_and_a_closed_one_not(scene: Scene) -> None:
    gh, n = scene.gh, scene.number
    payload = payloads.pull_closed(gh, OWNER, NAME, n, by="maintainer")
    pull = api(gh, f"/pulls/{n}")
    assert payload["number"] == n and payload["sender"]["login"] == "maintainer"
    assert payload["pull_request"]["merged"] is pull["merged"] is True
    for key in ("merge_commit_sha", "merged_at", "closed_at", "state"):
        assert payload["pull_request"][key] == pull[key], key
    assert payload["pull_request"]["merge_commit_sha"] == scene.merge_sha
    assert payload["pull_request"]["merged_by"]["login"] == pull["merged_by"]["login"] == "maintainer"

    other, _ = _open(gh, scene.world, "beta")
    with pytest.raises(ValueError, match="open"):
        payloads.pull_closed(gh, OWNER, NAME, other, by="maintainer")
    gh.close(OWNER, NAME, other)
    closed = payloads.pull_closed(gh, OWNER, NAME, other, by="maintainer")
    assert validate.problems("pull_request", "closed", closed) == []
    assert closed["pull_request"]["merged"] is False and closed["pull_request"]["merge_commit_sha"] is None


def test_runs_suites_and_pushes_name_the_commits_and_pull_requests_the_api_has(scene: Scene) -> None:
    gh, n = scene.gh, scene.number
    run = scene.run["workflow_run"]
    assert run["head_sha"] == scene.head and run["head_branch"] == "assay/alpha"
    assert run["conclusion"] == "failure" and run["id"] == 4242
    assert [(p["number"], p["head"]["sha"]) for p in run["pull_requests"]] == [(n, scene.head)]
    assert run["workflow_id"] == scene.run["workflow"]["id"]
    assert run["check_suite_id"] != scene.suite["check_suite"]["id"]
    commit = api(gh, f"/commits/{scene.head}")
    assert run["head_commit"]["tree_id"] == commit["commit"]["tree"]["sha"]
    assert run["head_commit"]["message"] == commit["commit"]["message"]
    again = payloads.workflow_run_completed(gh, OWNER, NAME, branch="assay/alpha", head_sha=scene.head,
                                            conclusion="success", run_id=4242, run_attempt=2)
    assert again["workflow"]["id"] == run["workflow_id"]  # the same workflow keeps its made-up id

    suite = scene.suite["check_suite"]
    assert suite["id"] == 777 and suite["head_sha"] == scene.head and suite["after"] == scene.head
    assert [p["number"] for p in suite["pull_requests"]] == [n]
    assert suite["before"] == commit["parents"][0]["sha"]

    pushed = payloads.push(gh, OWNER, NAME, before=scene.main_before, after=scene.merge_sha, added=["alpha.txt"])
    assert pushed["head_commit"]["id"] == scene.merge_sha == api(gh, "/commits/main")["sha"]
    assert pushed["head_commit"]["added"] == ["alpha.txt"] and pushed["commits"] == [pushed["head_commit"]]
    assert pushed["forced"] is False and pushed["created"] is False and pushed["sender"]["login"] == "maintainer"
    assert pushed["head_commit"]["tree_id"] == api(gh, f"/commits/{scene.merge_sha}")["commit"]["tree"]["sha"]


def test_a_payload_broken_on_purpose_has_problems(scene: Scene) -> None:
    payload = payloads.review_submitted(scene.gh, OWNER, NAME, scene.number, scene.review["id"])
    broken = {**payload, "review": {**payload["review"], "id": str(payload["review"]["id"])}}
    assert validate.problems("pull_request_review", "submitted", broken) == [
        f"pull_request_review.submitted: $.review.id: '{payload['review']['id']}' is not of type 'integer'"]
    no_sender = {k: v for k, v in payload.items() if k != "sender"}
    assert validate.problems("pull_request_review", "submitted", no_sender)
    bad_conclusion = {**scene.run, "workflow_run": {**scene.run["workflow_run"], "conclusion": "green"}}
    assert validate.problems("workflow_run", "completed", bad_conclusion)
