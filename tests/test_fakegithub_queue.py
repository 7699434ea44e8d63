"""The fake GitHub's merge queue: a ruleset that requires one, the REST merge it refuses, `enqueuePullRequest`, and
merge groups built with real git on the fake's bare repository, merged in order once their checks are green.

Every answer (REST, GraphQL) and every `merge_group` delivery is checked against GitHub's published schemas when
each test ends (the `fake_github` fixture).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.fakegithub import FakeGitHub
from tests.fakegithub.state import Delivery

OWNER, NAME = "octo", "widgets"
CHECK = "assay verify"
ENQUEUE = """mutation($id: ID!, $head: GitObjectID) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) {
    mergeQueueEntry { id position state }
  }
}"""
READ = """query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) { isInMergeQueue merged headRefOid }
  }
}"""


@dataclass
class Site:
    """The fake with `octo/widgets`, and a clone whose `main` (one README) is pushed there."""

    gh: FakeGitHub
    work: Path

    @property
    def bare(self) -> Path:
        return self.gh.repo(OWNER, NAME).path

    def git(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(self.work), *args], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **self.gh.git_env()})

    def push(self, *refspecs: str) -> None:
        proc = self.git("push", "-q", self.gh.git_url(OWNER, NAME), *refspecs)
        assert proc.returncode == 0, proc.stderr

    def commit(self, branch: str, path: str, text: str, start: str = "main") -> str:
        """A commit writing `path` on `branch` (made from `start` when new), pushed; its sha."""
        exists = self.git("rev-parse", "--verify", "-q", branch).returncode == 0
        git("-C", str(self.work), "checkout", "-q", *([branch] if exists else ["-b", branch, start]))
        (self.work / path).write_text(text)
        git("-C", str(self.work), "add", path)
        git("-C", str(self.work), "commit", "-qm", f"write {path} on {branch}")
        self.push(branch)
        git("-C", str(self.work), "checkout", "-q", "main")
        return self.tip(branch)

    def tip(self, ref: str) -> str:
        proc = subprocess.run(["git", "--git-dir", str(self.bare), "rev-parse", "--verify", "-q", ref],
                              capture_output=True, text=True)
        return proc.stdout.strip()

    def pull(self, branch: str, path: str, text: str, base: str = "main", draft: bool = False) -> tuple[int, str]:
        """A pull request of a new branch writing `path`, into `base`: its number and head."""
        head = self.commit(branch, path, text, start=base)
        status, body = request(self.gh, "POST", f"/repos/{OWNER}/{NAME}/pulls",
                               {"title": branch, "head": branch, "base": base, "draft": draft})
        assert status == 201, body
        return int(body["number"]), head

    def node(self, number: int) -> str:
        return self.gh.pull(OWNER, NAME, number).node_id

    def status(self, sha: str, state: str, context: str = CHECK) -> None:
        status, body = request(self.gh, "POST", f"/repos/{OWNER}/{NAME}/statuses/{sha}",
                               {"state": state, "context": context})
        assert status == 201, body

    def events(self, number: int) -> list[tuple[str, str]]:
        status, body = request(self.gh, "GET", f"/repos/{OWNER}/{NAME}/issues/{number}/events")
        assert status == 200, body
        return [(e["event"], e["actor"]["login"]) for e in body]

    def read(self, number: int) -> dict[str, Any]:
        answer = graphql(self.gh, READ, owner=OWNER, name=NAME, number=number)
        assert "errors" not in answer, answer
        return dict(answer["data"]["repository"]["pullRequest"])

    def groups(self) -> list[tuple[tuple[int, ...], str]]:
        """Each live group's pull requests and parent."""
        return [(g.pulls, g.base_sha) for g in self.gh.merge_groups(OWNER, NAME)]


def request(gh: FakeGitHub, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gh.api_url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {gh.token}", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


def graphql(gh: FakeGitHub, query: str, **variables: Any) -> Any:
    req = urllib.request.Request(gh.graphql_url, data=json.dumps({"query": query, "variables": variables}).encode(),
                                 method="POST", headers={"Authorization": f"bearer {gh.token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def enqueue(site: Site, number: int, head: str | None = None) -> Any:
    """The mutation a desk sends, by the pull request's node id and the head it means to merge."""
    return graphql(site.gh, ENQUEUE, id=site.node(number), head=head)


@pytest.fixture
def site(fake_github: FakeGitHub, tmp_path: Path) -> Site:
    fake_github.create_repo(OWNER, NAME)
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", str(work))
    (work / "README").write_text("hello\n")
    git("-C", str(work), "add", "README")
    git("-C", str(work), "commit", "-qm", "write README")
    made = Site(fake_github, work)
    made.push("main")
    return made


@pytest.fixture
def queued(site: Site) -> Site:
    """`main` requires the merge queue, its groups the check `assay verify`."""
    site.gh.require_merge_queue(OWNER, NAME)
    return site


# the ruleset and the REST answers it changes ---------------------------------------------------------

def test_the_branch_rules_name_the_merge_queue_and_its_checks(site: Site) -> None:
    path = f"/repos/{OWNER}/{NAME}/rules/branches/main"
    assert request(site.gh, "GET", path) == (200, [])
    ruleset = site.gh.require_merge_queue(OWNER, NAME, checks=(CHECK, "lint"))
    status, rules = request(site.gh, "GET", path)
    assert status == 200 and [r["type"] for r in rules] == ["merge_queue", "required_status_checks"]
    assert {(r["ruleset_id"], r["ruleset_source_type"], r["ruleset_source"]) for r in rules} == {
        (ruleset, "Repository", f"{OWNER}/{NAME}")}
    assert rules[0]["parameters"]["merge_method"] == "MERGE"
    assert [c["context"] for c in rules[1]["parameters"]["required_status_checks"]] == [CHECK, "lint"]
    assert request(site.gh, "GET", f"/repos/{OWNER}/{NAME}/rules/branches/other") == (200, [])
    assert request(site.gh, "GET", f"/repos/{OWNER}/nothing/rules/branches/main")[0] == 404

    req = urllib.request.Request(site.gh.api_url + path, headers={"Authorization": f"Bearer {site.gh.token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        etag = resp.headers["ETag"]
    assert etag and request(site.gh, "GET", path, headers={"If-None-Match": etag}) == (304, None)
    assert site.gh.not_modified[("GET", "/repos/{owner}/{repo}/rules/branches/{branch}")] == 1
    assert site.gh.schema_problems() == []


def test_the_rest_merge_is_refused_where_a_merge_queue_is_required(queued: Site) -> None:
    number, head = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    main = queued.tip("main")
    status, body = request(queued.gh, "PUT", f"/repos/{OWNER}/{NAME}/pulls/{number}/merge", {"sha": head})
    assert (status, body["message"]) == (405, "Repository rule violations found\n\n"
                                              "Changes must be made through the merge queue")
    with pytest.raises(AssertionError, match="merge queue"):
        queued.gh.merge(OWNER, NAME, number)  # the merge button is refused alike
    assert queued.tip("main") == main and queued.gh.pull(OWNER, NAME, number).state == "open"
    assert request(queued.gh, "GET", f"/repos/{OWNER}/{NAME}/pulls/{number}/merge")[0] == 404
    queued.commit("dev", "dev.txt", "dev\n")
    other, _ = queued.pull("assay/dev-work", "dev-work.txt", "work\n", base="dev")
    assert request(queued.gh, "PUT", f"/repos/{OWNER}/{NAME}/pulls/{other}/merge")[0] == 200  # no queue on dev


# enqueuePullRequest ------------------------------------------------------------------------------------

def test_a_pull_request_enqueued_by_graphql_gets_a_merge_group(queued: Site) -> None:
    number, head = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    main = queued.tip("main")
    assert queued.read(number) == {"isInMergeQueue": False, "merged": False, "headRefOid": head}
    answer = enqueue(queued, number, head)
    entry = answer["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    assert "errors" not in answer and (entry["position"], entry["state"]) == (1, "AWAITING_CHECKS")
    assert entry["id"].startswith("MQE_")
    assert queued.read(number) == {"isInMergeQueue": True, "merged": False, "headRefOid": head}
    assert queued.events(number) == [("added_to_merge_queue", "assay-bot")]

    [group] = queued.gh.merge_groups(OWNER, NAME)
    assert group.head_ref == f"refs/heads/gh-readonly-queue/main/pr-{number}-{head}"
    assert (group.base_sha, group.base_ref, group.pulls) == (main, "refs/heads/main", (number,))
    assert queued.tip(group.head_ref) == group.head_sha
    parents = git("--git-dir", str(queued.bare), "rev-list", "--parents", "-n1", group.head_sha).split()[1:]
    assert parents == [main, head]  # a real merge of the base's tip and the head
    assert queued.tip("main") == main  # nothing merged yet
    [delivery] = queued.gh.deliveries
    assert (delivery.event, delivery.action) == ("merge_group", "checks_requested")
    assert {k: delivery.payload["merge_group"][k] for k in ("head_sha", "head_ref", "base_sha", "base_ref")} == {
        "head_sha": group.head_sha, "head_ref": group.head_ref, "base_sha": main, "base_ref": "refs/heads/main"}
    assert queued.gh.schema_problems() == []


def test_enqueueing_is_refused_as_github_refuses_it(queued: Site) -> None:
    def refused(answer: Any) -> tuple[str, str]:
        assert answer["data"] == {"enqueuePullRequest": None}, answer
        [error] = answer["errors"]
        return error["type"], error["message"]

    number, head = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    assert refused(graphql(queued.gh, ENQUEUE, id="PR_nothing")) == (
        "NOT_FOUND", "Could not resolve to a node with the global id of 'PR_nothing'")
    assert refused(enqueue(queued, number, "0" * 40)) == (
        "UNPROCESSABLE", "Head branch was modified. Review and try the merge again.")
    draft, _ = queued.pull("assay/draft", "draft.txt", "draft\n", draft=True)
    assert refused(enqueue(queued, draft)) == ("UNPROCESSABLE", "Pull request is in draft status")
    queued.commit("dev", "dev.txt", "dev\n")
    elsewhere, _ = queued.pull("assay/on-dev", "on-dev.txt", "on dev\n", base="dev")
    assert refused(enqueue(queued, elsewhere)) == ("UNPROCESSABLE", "Base branch does not have a merge queue enabled")
    assert "errors" not in enqueue(queued, number)  # no expected head: whatever it is now
    assert refused(enqueue(queued, number, head)) == ("UNPROCESSABLE", "Pull request is already in the merge queue")
    closed, _ = queued.pull("assay/closed", "closed.txt", "closed\n")
    queued.gh.close(OWNER, NAME, closed)
    assert refused(enqueue(queued, closed)) == ("UNPROCESSABLE", "Pull request is closed")
    assert request(queued.gh, "PUT", f"/repos/{OWNER}/{NAME}/pulls/{elsewhere}/merge")[0] == 200
    assert refused(enqueue(queued, elsewhere)) == ("UNPROCESSABLE", "Pull request is already merged")
    with pytest.raises(AssertionError, match="draft"):
        queued.gh.enqueue(OWNER, NAME, draft)
    assert [g.pulls for g in queued.gh.merge_groups(OWNER, NAME)] == [(number,)]
    assert queued.gh.schema_problems() == []


# merge groups: stacked, merged in order, dropped and rebuilt ---------------------------------------------

def test_two_queued_pull_requests_build_stacked_groups_and_merge_in_order(queued: Site) -> None:
    alpha, alpha_head = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    beta, beta_head = queued.pull("assay/beta", "beta.txt", "beta\n")
    main = queued.tip("main")
    assert queued.gh.enqueue(OWNER, NAME, alpha) == 1
    assert queued.gh.enqueue(OWNER, NAME, beta, by="reviewer") == 2
    first, second = queued.gh.merge_groups(OWNER, NAME)
    assert (first.pulls, first.base_sha, second.pulls, second.base_sha) == ((alpha,), main, (alpha, beta),
                                                                           first.head_sha)
    parents = git("--git-dir", str(queued.bare), "rev-list", "--parents", "-n1", second.head_sha).split()[1:]
    assert parents == [first.head_sha, beta_head]
    assert [d.payload["merge_group"]["head_sha"] for d in queued.gh.deliveries] == [first.head_sha, second.head_sha]

    queued.status(second.head_sha, "success")  # the group behind waits for the one ahead
    assert queued.tip("main") == main and queued.read(beta)["isInMergeQueue"] is True
    queued.gh.check_run(OWNER, NAME, first.head_sha, CHECK, status="in_progress", conclusion=None)
    assert queued.tip("main") == main
    queued.gh.check_run(OWNER, NAME, first.head_sha, CHECK)  # a check run counts as a status does
    assert queued.tip("main") == second.head_sha
    assert queued.gh.merge_groups(OWNER, NAME) == []
    assert queued.tip(first.head_ref) == "" and queued.tip(second.head_ref) == ""  # temporary branches deleted
    for number, head, group in ((alpha, alpha_head, first), (beta, beta_head, second)):
        status, pull = request(queued.gh, "GET", f"/repos/{OWNER}/{NAME}/pulls/{number}")
        assert (pull["state"], pull["merged"], pull["merge_commit_sha"]) == ("closed", True, group.head_sha)
        assert pull["merged_by"]["login"] == "github-merge-queue[bot]" and pull["merged_at"]
        assert queued.read(number) == {"isInMergeQueue": False, "merged": True, "headRefOid": head}
        assert [e for e, _ in queued.events(number)] == ["added_to_merge_queue", "merged", "closed"]
    assert queued.gh.schema_problems() == []


def test_a_failing_group_leaves_the_queue_and_the_next_is_rebuilt(queued: Site) -> None:
    alpha, _ = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    beta, _ = queued.pull("assay/beta", "beta.txt", "beta\n")
    gamma, _ = queued.pull("assay/gamma", "gamma.txt", "gamma\n")
    main = queued.tip("main")
    for number in (alpha, beta, gamma):
        queued.gh.enqueue(OWNER, NAME, number)
    first, second, third = queued.gh.merge_groups(OWNER, NAME)
    queued.status(first.head_sha, "pending")
    queued.status(first.head_sha, "failure")
    assert queued.events(alpha)[-1] == ("removed_from_merge_queue", "github-merge-queue[bot]")
    pull = queued.gh.pull(OWNER, NAME, alpha)
    assert (pull.state, pull.merged_at) == ("open", None) and queued.read(alpha)["isInMergeQueue"] is False
    rebuilt, kept = queued.gh.merge_groups(OWNER, NAME)
    assert (rebuilt.pulls, rebuilt.base_sha) == ((beta,), main) and rebuilt.head_sha != second.head_sha
    assert (kept.pulls, kept.base_sha) == ((beta, gamma), rebuilt.head_sha)
    assert queued.tip(first.head_ref) == "" and queued.tip(second.head_ref) == rebuilt.head_sha
    assert len(queued.gh.deliveries) == 5

    queued.status(kept.head_sha, "error")  # a group further back fails: only its entry goes
    assert queued.groups() == [((beta,), main)] and queued.events(gamma)[-1][0] == "removed_from_merge_queue"
    queued.status(rebuilt.head_sha, "success")
    assert queued.tip("main") == rebuilt.head_sha and queued.gh.pull(OWNER, NAME, beta).merged_at
    assert queued.gh.pull(OWNER, NAME, alpha).state == "open" == queued.gh.pull(OWNER, NAME, gamma).state

    assert "errors" not in enqueue(queued, alpha)  # queued again: a new group, not the failed commit again
    [again] = queued.gh.merge_groups(OWNER, NAME)
    assert again.base_sha == rebuilt.head_sha and again.head_sha != first.head_sha
    assert queued.gh.schema_problems() == []


def test_a_pull_request_queued_again_gets_a_fresh_group(queued: Site) -> None:
    number, _ = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    queued.gh.enqueue(OWNER, NAME, number)
    [failed] = queued.gh.merge_groups(OWNER, NAME)
    queued.status(failed.head_sha, "failure")
    queued.gh.enqueue(OWNER, NAME, number)  # the same head on the same main, where git's dates are pinned
    [again] = queued.gh.merge_groups(OWNER, NAME)
    assert (again.head_ref, again.base_sha) == (failed.head_ref, failed.base_sha)
    assert again.head_sha != failed.head_sha and queued.gh.statuses(OWNER, NAME, again.head_sha) == []
    queued.status(again.head_sha, "success")
    assert queued.tip("main") == again.head_sha


def test_a_group_that_conflicts_leaves_the_queue(queued: Site) -> None:
    alpha, _ = queued.pull("assay/alpha", "README", "alpha's README\n")
    clash, _ = queued.pull("assay/clash", "README", "another README\n")
    beta, _ = queued.pull("assay/beta", "beta.txt", "beta\n")
    main = queued.tip("main")
    for number in (alpha, clash, beta):
        queued.gh.enqueue(OWNER, NAME, number)
    first, second = queued.gh.merge_groups(OWNER, NAME)
    assert (first.pulls, second.pulls, second.base_sha) == ((alpha,), (alpha, beta), first.head_sha)
    assert [e for e, _ in queued.events(clash)] == ["added_to_merge_queue", "removed_from_merge_queue"]
    assert queued.read(clash)["isInMergeQueue"] is False
    assert git("--git-dir", str(queued.bare), "for-each-ref", "--format=%(refname)",
               "refs/heads/gh-readonly-queue/").split() == [first.head_ref, second.head_ref]
    queued.status(first.head_sha, "success")
    queued.status(second.head_sha, "success")
    assert queued.tip("main") == second.head_sha and queued.groups() == []
    answer = enqueue(queued, clash)  # taken, then dropped at once: it conflicts with main now
    assert answer["data"]["enqueuePullRequest"]["mergeQueueEntry"]["state"] == "UNMERGEABLE"
    assert queued.groups() == [] and queued.tip("main") == second.head_sha != main


def test_a_push_outside_the_queue_rebuilds_its_groups(queued: Site) -> None:
    alpha, _ = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    beta, _ = queued.pull("assay/beta", "beta.txt", "beta\n")
    queued.gh.enqueue(OWNER, NAME, alpha)
    queued.gh.enqueue(OWNER, NAME, beta)
    before, _ = queued.gh.merge_groups(OWNER, NAME)
    pushed = queued.commit("main", "hotfix.txt", "fix\n")  # someone allowed to bypass the ruleset
    first, second = queued.gh.merge_groups(OWNER, NAME)
    assert (first.base_sha, second.base_sha) == (pushed, first.head_sha) and first.head_sha != before.head_sha
    queued.status(before.head_sha, "success")  # a result for a group that is gone changes nothing
    assert queued.tip("main") == pushed and len(queued.gh.merge_groups(OWNER, NAME)) == 2

    queued.commit("assay/alpha", "alpha.txt", "alpha, again\n")  # a new head takes its pull request out
    assert queued.events(alpha)[-1][0] == "removed_from_merge_queue"
    [only] = queued.gh.merge_groups(OWNER, NAME)
    assert (only.pulls, only.base_sha) == ((beta,), pushed)
    queued.status(only.head_sha, "success")
    assert queued.tip("main") == only.head_sha and queued.read(beta)["merged"] is True


def test_a_delivery_that_departs_from_the_schema_is_a_problem(queued: Site) -> None:
    number, _ = queued.pull("assay/alpha", "alpha.txt", "alpha\n")
    queued.gh.enqueue(OWNER, NAME, number)
    assert queued.gh.schema_problems() == []
    [delivery] = queued.gh.deliveries
    broken = {**delivery.payload, "merge_group": {k: v for k, v in delivery.payload["merge_group"].items()
                                                  if k != "head_sha"}}
    queued.gh.deliveries.append(Delivery("merge_group", "checks_requested", broken))
    assert queued.gh.schema_problems() == [
        "webhook merge_group.checks_requested: $.merge_group: 'head_sha' is a required property"]
    queued.gh.deliveries.pop()
