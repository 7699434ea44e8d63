"""The fake GitHub the GitHub adapter is tested against: its git side, its REST answers, its faults.

Every JSON answer the fake gives in these tests is checked against GitHub's published REST
description (the vendored subset of `@octokit/openapi`) when the test ends.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from github import Auth, Github, GithubException, GithubRetry, RateLimitExceededException, UnknownObjectException

from tests.conftest import git
from tests.fakegithub import FakeGitHub, Fault
from tests.fakegithub.graphql import RESOLVERS
from tests.fakegithub.openapi import extract, graphql_extract, graphql_validate, validate
from tests.fakegithub.rest import ROUTES

OWNER, NAME = "octo", "widgets"


@pytest.fixture
def gh(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.create_repo(OWNER, NAME)
    return fake_github


@pytest.fixture
def work(gh: FakeGitHub, tmp_path: Path) -> Path:
    """A clone with `main` and a work branch `assay/alpha` pushed over smart HTTP."""
    path = tmp_path / "work"
    git("init", "-q", "-b", "main", str(path))
    commit(path, "README", "hello\n")
    push(gh, path, "main")
    git("-C", str(path), "checkout", "-qb", "assay/alpha")
    commit(path, "alpha.txt", "alpha\n")
    push(gh, path, "assay/alpha")
    return path


def commit(path: Path, name: str, text: str) -> str:
    (path / name).write_text(text)
    git("-C", str(path), "add", name)
    git("-C", str(path), "commit", "-qm", f"write {name}")
    return git("-C", str(path), "rev-parse", "HEAD").strip()


def run_git(gh: FakeGitHub, path: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(gh.git_env(token) if token != "" else {})}
    return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, env=env, timeout=60)


def push(gh: FakeGitHub, path: Path, *refspecs: str) -> None:
    proc = run_git(gh, path, "push", "-q", gh.git_url(OWNER, NAME), *refspecs)
    assert proc.returncode == 0, proc.stderr


def client(gh: FakeGitHub, **kwargs: Any) -> Github:
    """PyGithub as the adapter would use it, without its pacing between calls (the fake needs none)."""
    return Github(base_url=gh.api_url, auth=Auth.Token(gh.token), seconds_between_requests=None,
                  seconds_between_writes=None, **kwargs)


def request(gh: FakeGitHub, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Message[str, str], bytes]:
    """A plain HTTP call to the API, without PyGithub's retries."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gh.api_url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {gh.token}", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def graphql(gh: FakeGitHub, query: str, token: str | None = None, **variables: Any) -> Any:
    """A plain GraphQL call, as a desk sends one."""
    req = urllib.request.Request(gh.graphql_url, data=json.dumps({"query": query, "variables": variables}).encode(),
                                 method="POST", headers={"Authorization": f"bearer {token or gh.token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def open_pull(gh: FakeGitHub, draft: bool = True) -> int:
    pull = client(gh).get_repo(f"{OWNER}/{NAME}").create_pull(
        title="alpha", body="brief alpha", base="main", head="assay/alpha", draft=draft)
    return pull.number


# git over smart HTTP ---------------------------------------------------------------

def test_git_over_http_needs_the_token(gh: FakeGitHub, tmp_path: Path) -> None:
    tmp_path.joinpath("empty").mkdir()
    where = tmp_path / "empty"
    url = gh.git_url(OWNER, NAME)
    assert run_git(gh, where, "ls-remote", url).returncode == 0
    missing = run_git(gh, where, "ls-remote", url, token="")
    wrong = run_git(gh, where, "ls-remote", url, token="ghs_wrong")
    assert missing.returncode == 128 and wrong.returncode == 128
    assert "could not read Username" in wrong.stderr, wrong.stderr  # the server asked for credentials
    for header in ({}, {"Authorization": "Basic " + base64.b64encode(b"x-access-token:ghs_wrong").decode()}):
        req = urllib.request.Request(url + "/info/refs?service=git-upload-pack", headers=header)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Basic")
    bearer = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
              "GIT_CONFIG_VALUE_0": f"Authorization: Bearer {gh.token}"}
    proc = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, env=bearer, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_an_atomic_push_with_leases_lands_whole_or_not_at_all(gh: FakeGitHub, work: Path) -> None:
    url, bare = gh.git_url(OWNER, NAME), gh.repo(OWNER, NAME).path
    first = commit(work, "claim.json", '{"epoch": 1}\n')
    zeros = "0" * 40
    created = run_git(gh, work, "push", "--porcelain", "--atomic",
                      f"--force-with-lease=refs/assay/claims/alpha:{zeros}",
                      f"--force-with-lease=refs/assay/journal/alpha:{zeros}", url,
                      f"{first}:refs/assay/claims/alpha", f"{first}:refs/assay/journal/alpha")
    assert created.returncode == 0, created.stderr
    second = commit(work, "claim.json", '{"epoch": 2}\n')
    stale = run_git(gh, work, "push", "--porcelain", "--atomic",
                    f"--force-with-lease=refs/assay/claims/alpha:{first}",
                    f"--force-with-lease=refs/assay/journal/alpha:{zeros}", url,
                    f"{second}:refs/assay/claims/alpha", f"{second}:refs/assay/journal/alpha")
    assert stale.returncode != 0 and "stale info" in stale.stdout, stale.stdout + stale.stderr
    tips = git("--git-dir", str(bare), "for-each-ref", "--format=%(objectname) %(refname)", "refs/assay/").split("\n")
    assert sorted(t for t in tips if t) == [f"{first} refs/assay/claims/alpha", f"{first} refs/assay/journal/alpha"]
    assert gh.git_requests["git-receive-pack"] >= 2


def test_a_push_larger_than_the_post_buffer_is_sent_chunked(gh: FakeGitHub, work: Path) -> None:
    (work / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    git("-C", str(work), "add", "blob.bin")
    git("-C", str(work), "commit", "-qm", "a large file")
    proc = subprocess.run(["git", "-C", str(work), "push", gh.git_url(OWNER, NAME), "assay/alpha"], text=True,
                          capture_output=True, env={**os.environ, **gh.git_env(), "GIT_TRACE_CURL": "1",
                                                    "GIT_TRACE_CURL_NO_DATA": "1"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Transfer-Encoding: chunked" in proc.stderr
    head = git("-C", str(work), "rev-parse", "HEAD").strip()
    assert git("--git-dir", str(gh.repo(OWNER, NAME).path), "rev-parse", "assay/alpha").strip() == head


# the pull request's life through PyGithub --------------------------------------------

def test_a_draft_pull_request_from_open_to_merged(gh: FakeGitHub, work: Path) -> None:
    repo = client(gh).get_repo(f"{OWNER}/{NAME}")
    assert repo.default_branch == "main"
    pull = repo.create_pull(title="alpha", body="brief alpha", base="main", head="assay/alpha", draft=True)
    with pytest.raises(GithubException) as exists:
        repo.create_pull(title="again", body="", base="main", head="assay/alpha", draft=True)
    assert exists.value.status == 422
    assert "A pull request already exists for octo:assay/alpha" in json.dumps(exists.value.data)
    assert [p.number for p in repo.get_pulls(state="all", head="octo:assay/alpha")] == [pull.number]
    assert list(repo.get_pulls(state="all", head="octo:assay/other")) == []

    got = repo.get_pull(pull.number)
    head = git("--git-dir", str(gh.repo(OWNER, NAME).path), "rev-parse", "assay/alpha").strip()
    assert (got.state, got.draft, got.merged) == ("open", True, False)
    assert got.merged_at is None and got.merge_commit_sha is None and got.mergeable_state == "draft"
    assert (got.head.sha, got.head.ref, got.base.ref, got.mergeable) == (head, "assay/alpha", "main", True)

    got.mark_ready_for_review()
    assert got.draft is False and gh.pull(OWNER, NAME, pull.number).draft is False
    got.create_issue_comment("verify rows pass")
    gh.comment(OWNER, NAME, pull.number, "looks good", by="maintainer")
    assert [c.body for c in got.get_issue_comments()] == ["verify rows pass", "looks good"]

    got.add_to_labels("assay:held", "desk:builder")
    got.remove_from_labels("desk:builder")
    got.add_to_labels("ASSAY:HELD")  # label names are case-insensitive
    assert [label.name for label in got.get_labels()] == ["assay:held"]
    got.set_labels("assay:done")
    assert gh.labels(OWNER, NAME, pull.number) == ["assay:done"]
    assert {label.name for label in repo.get_labels()} == {"assay:held", "desk:builder", "assay:done"}

    sha_commit = repo.get_commit(head)
    sha_commit.create_status("pending", "http://127.0.0.1/evidence/a", "running", "assay/verify/a")
    sha_commit.create_status("success", "http://127.0.0.1/evidence/a", "1 passed", "assay/verify/a")
    sha_commit.create_status("success", description="ok", context="assay/verify/b")
    assert [s.state for s in sha_commit.get_statuses()] == ["success", "success", "pending"]
    combined = sha_commit.get_combined_status()
    assert (combined.state, combined.total_count) == ("success", 2)

    gh.approve(OWNER, NAME, pull.number)
    assert [(r.state, r.user.login) for r in got.get_reviews()] == [("APPROVED", "reviewer")]
    result = got.merge()
    assert result.merged and got.is_merged()
    bare = gh.repo(OWNER, NAME).path
    assert git("--git-dir", str(bare), "rev-parse", "main").strip() == result.sha
    assert git("--git-dir", str(bare), "rev-parse", f"{result.sha}^2").strip() == head
    merged = repo.get_pull(pull.number)
    assert (merged.state, merged.merged, merged.merge_commit_sha, merged.merged_by.login) == (
        "closed", True, result.sha, "assay-bot")
    status, _, body = request(gh, "GET", f"/repos/{OWNER}/{NAME}/issues/{pull.number}/events")
    raw = json.loads(body)
    assert status == 200 and not gh.schema_problems()
    events = [(e["event"], e.get("label", {}).get("name"), e["actor"]["login"]) for e in raw]
    assert events == [("ready_for_review", None, "assay-bot"), ("labeled", "assay:held", "assay-bot"),
                      ("labeled", "desk:builder", "assay-bot"), ("unlabeled", "desk:builder", "assay-bot"),
                      ("unlabeled", "assay:held", "assay-bot"), ("labeled", "assay:done", "assay-bot"),
                      ("merged", None, "assay-bot"), ("closed", None, "assay-bot")]
    assert [e["commit_id"] for e in raw if e["event"] == "merged"] == [result.sha]


def test_the_head_follows_the_branch_and_the_person_merges(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh, draft=False)
    newer = commit(work, "alpha.txt", "alpha, again\n")
    push(gh, work, "assay/alpha")
    assert client(gh).get_repo(f"{OWNER}/{NAME}").get_pull(number).head.sha == newer
    sha = gh.merge(OWNER, NAME, number, method="squash")
    bare = gh.repo(OWNER, NAME).path
    assert git("--git-dir", str(bare), "rev-list", "--parents", "-n1", sha).split()[1:] == [
        git("--git-dir", str(bare), "rev-parse", "main~1").strip()]
    assert gh.pull(OWNER, NAME, number).merged_at is not None
    assert gh.calls[("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge")] == 0  # a person, not the API


def test_merging_is_refused_for_a_draft_a_conflict_a_moved_head_and_a_closed_pull(gh: FakeGitHub,
                                                                                  work: Path) -> None:
    repo = client(gh).get_repo(f"{OWNER}/{NAME}")
    pull = repo.get_pull(open_pull(gh, draft=True))
    with pytest.raises(GithubException) as draft:
        pull.merge()
    assert draft.value.status == 405
    pull.mark_ready_for_review()
    with pytest.raises(GithubException) as moved:
        pull.merge(sha="0" * 40)
    assert moved.value.status == 409
    git("-C", str(work), "checkout", "-q", "main")
    commit(work, "alpha.txt", "main wrote this first\n")
    push(gh, work, "main")
    assert repo.get_pull(pull.number).mergeable is False
    with pytest.raises(GithubException) as conflict:
        pull.merge()
    assert conflict.value.status == 405 and "not mergeable" in conflict.value.data["message"]
    pull.edit(state="closed")
    assert gh.pull(OWNER, NAME, pull.number).state == "closed"
    with pytest.raises(GithubException) as closed:
        pull.merge()
    assert closed.value.status == 405


def test_bad_input_is_answered_as_github_does(gh: FakeGitHub, work: Path) -> None:
    repo = client(gh).get_repo(f"{OWNER}/{NAME}")
    with pytest.raises(GithubException) as no_branch:
        repo.create_pull(title="x", body="", base="main", head="assay/missing")
    assert no_branch.value.status == 422
    with pytest.raises(GithubException) as no_commits:
        repo.create_pull(title="x", body="", base="main", head="main")
    assert "No commits between" in json.dumps(no_commits.value.data)
    with pytest.raises(UnknownObjectException):
        repo.get_pull(99)
    with pytest.raises(UnknownObjectException):
        client(gh).get_repo("octo/nothing")
    status, _, body = request(gh, "POST", f"/repos/{OWNER}/{NAME}/statuses/{'1' * 40}", {"state": "success"})
    assert status == 422 and b"No commit found" in body
    status, headers, body = request(gh, "GET", f"/repos/{OWNER}/{NAME}", headers={"Authorization": "token wrong"})
    assert status == 401 and json.loads(body)["message"] == "Bad credentials"
    assert int(headers["X-RateLimit-Limit"]) == 60  # the unauthenticated quota
    assert gh.calls[("GET", "/repos/{owner}/{repo}")] == 2  # a refused call is not counted as the token's
    pr = repo.get_pull(open_pull(gh))
    gh.pull(OWNER, NAME, pr.number).id = -1  # the node id PyGithub holds now names nothing
    with pytest.raises(UnknownObjectException):
        pr.mark_ready_for_review()
    assert gh.pull(OWNER, NAME, pr.number).draft


def test_lists_are_paginated_with_link_headers(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    for i in range(5):
        gh.comment(OWNER, NAME, number, f"comment {i}")
    pull = client(gh, per_page=2).get_repo(f"{OWNER}/{NAME}").get_pull(number)
    assert [c.body for c in pull.get_issue_comments()] == [f"comment {i}" for i in range(5)]
    assert gh.calls[("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments")] == 3
    _, headers, _ = request(gh, "GET", f"/repos/{OWNER}/{NAME}/issues/{number}/comments?per_page=2&page=2")
    assert 'rel="next"' in headers["Link"] and 'rel="prev"' in headers["Link"]


# conditional requests and the rate limit ----------------------------------------------

def test_a_matching_etag_gets_304_and_costs_no_quota(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    path = f"/repos/{OWNER}/{NAME}/pulls/{number}"
    status, headers, body = request(gh, "GET", path)
    assert status == 200 and headers["ETag"] and json.loads(body)["number"] == number
    remaining = int(headers["X-RateLimit-Remaining"])
    assert headers["X-RateLimit-Resource"] == "core" and int(headers["X-RateLimit-Used"]) >= 2
    again, headers2, body2 = request(gh, "GET", path, headers={"If-None-Match": headers["ETag"]})
    assert (again, body2, int(headers2["X-RateLimit-Remaining"])) == (304, b"", remaining)
    assert gh.not_modified[("GET", "/repos/{owner}/{repo}/pulls/{pull_number}")] == 1
    gh.comment(OWNER, NAME, number, "a change")  # the comment count changes the answer
    changed, headers3, _ = request(gh, "GET", path, headers={"If-None-Match": headers["ETag"]})
    assert (changed, int(headers3["X-RateLimit-Remaining"])) == (200, remaining - 1)
    assert headers3["ETag"] != headers["ETag"]


def test_rate_limit_headers_and_an_exhausted_quota(tmp_path: Path) -> None:
    with FakeGitHub(tmp_path, rate_limit=2) as fake:
        fake.create_repo(OWNER, NAME)
        seen = [request(fake, "GET", f"/repos/{OWNER}/{NAME}") for _ in range(3)]
        assert [s for s, _, _ in seen] == [200, 200, 403]
        assert [h["X-RateLimit-Remaining"] for _, h, _ in seen] == ["1", "0", "0"]
        assert b"API rate limit exceeded" in seen[2][2]
        overview = client(fake).get_rate_limit()  # free, as on GitHub
        assert (overview.resources.core.limit, overview.resources.core.remaining) == (2, 0)
        assert fake.schema_problems() == []


# faults -----------------------------------------------------------------------------

def test_validation_failed_and_not_fast_forward(gh: FakeGitHub, work: Path) -> None:
    gh.faults.arm("POST", r"/pulls$", Fault.VALIDATION_FAILED)
    gh.faults.arm("PATCH", r"/pulls/\d+$", Fault.NOT_FAST_FORWARD)
    status, _, body = request(gh, "POST", f"/repos/{OWNER}/{NAME}/pulls",
                              {"title": "t", "head": "assay/alpha", "base": "main"})
    assert status == 422 and json.loads(body)["message"] == "Validation Failed"
    assert gh.pulls(OWNER, NAME) == []
    number = open_pull(gh)
    status, _, body = request(gh, "PATCH", f"/repos/{OWNER}/{NAME}/pulls/{number}", {"title": "renamed"})
    assert status == 422 and json.loads(body)["message"] == "Update is not a fast forward"
    assert gh.pull(OWNER, NAME, number).title == "alpha"
    assert gh.faults.pending() == []


def test_secondary_limit_and_429_carry_retry_after(gh: FakeGitHub, work: Path) -> None:
    gh.faults.arm("GET", rf"^/repos/{OWNER}/{NAME}$", Fault.SECONDARY_RATE_LIMIT, retry_after=7)
    gh.faults.arm("GET", rf"^/repos/{OWNER}/{NAME}$", Fault.TOO_MANY_REQUESTS, retry_after=9)
    status, headers, body = request(gh, "GET", f"/repos/{OWNER}/{NAME}")
    assert (status, headers["Retry-After"]) == (403, "7")
    assert json.loads(body)["message"].startswith("You have exceeded a secondary rate limit")
    status, headers, _ = request(gh, "GET", f"/repos/{OWNER}/{NAME}")
    assert (status, headers["Retry-After"]) == (429, "9")
    assert request(gh, "GET", f"/repos/{OWNER}/{NAME}")[0] == 200
    gh.faults.arm("GET", rf"^/repos/{OWNER}/{NAME}$", Fault.SECONDARY_RATE_LIMIT, retry_after=0)
    with pytest.raises(RateLimitExceededException):
        client(gh, retry=None).get_repo(f"{OWNER}/{NAME}")
    gh.faults.arm("GET", rf"^/repos/{OWNER}/{NAME}$", Fault.SECONDARY_RATE_LIMIT, retry_after=0)
    before = gh.calls[("GET", "/repos/{owner}/{repo}")]
    assert client(gh, retry=GithubRetry(secondary_rate_wait=0)).get_repo(f"{OWNER}/{NAME}").name == NAME
    assert gh.calls[("GET", "/repos/{owner}/{repo}")] == before + 2  # PyGithub waited and asked again


def test_primary_limit_names_the_reset(gh: FakeGitHub) -> None:
    gh.faults.arm("GET", r"^/rate_limit$", Fault.PRIMARY_RATE_LIMIT)
    status, headers, body = request(gh, "GET", "/rate_limit")
    assert (status, headers["X-RateLimit-Remaining"]) == (403, "0")
    assert int(headers["X-RateLimit-Reset"]) == gh.quota(gh.user).reset
    assert json.loads(body)["message"].startswith("API rate limit exceeded")


def test_a_502_then_success(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    gh.faults.arm("GET", r"/pulls/\d+$", Fault.BAD_GATEWAY)
    assert request(gh, "GET", f"/repos/{OWNER}/{NAME}/pulls/{number}")[0] == 502
    assert request(gh, "GET", f"/repos/{OWNER}/{NAME}/pulls/{number}")[0] == 200


def test_a_dropped_connection_after_the_write_was_applied(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    gh.faults.arm("POST", r"/comments$", Fault.DROP_AFTER_WRITE)
    with pytest.raises((http.client.RemoteDisconnected, urllib.error.URLError, ConnectionError)):
        request(gh, "POST", f"/repos/{OWNER}/{NAME}/issues/{number}/comments", {"body": "once"})
    assert [c.body for c in gh.comments(OWNER, NAME, number)] == ["once"]
    gh.faults.arm("POST", r"/pulls$", Fault.DROP_AFTER_WRITE)
    git("-C", str(work), "checkout", "-qb", "assay/beta")
    commit(work, "beta.txt", "beta\n")
    push(gh, work, "assay/beta")
    repo = client(gh, retry=None).get_repo(f"{OWNER}/{NAME}")
    with pytest.raises(Exception) as dropped:
        repo.create_pull(title="beta", body="", base="main", head="assay/beta", draft=True)
    assert not isinstance(dropped.value, GithubException)
    assert [p.head for p in gh.pulls(OWNER, NAME)] == ["assay/alpha", "assay/beta"]
    with pytest.raises(GithubException) as again:  # the retry learns the write had landed
        repo.create_pull(title="beta", body="", base="main", head="assay/beta", draft=True)
    assert "already exists" in json.dumps(again.value.data)


def test_graphql_faults_and_unknown_mutations(gh: FakeGitHub, work: Path) -> None:
    pull = client(gh, retry=None).get_repo(f"{OWNER}/{NAME}").get_pull(open_pull(gh))
    gh.faults.arm("POST", r"^/graphql$", Fault.BAD_GATEWAY)
    with pytest.raises(GithubException) as bad:
        pull.mark_ready_for_review()
    assert bad.value.status == 502 and gh.pull(OWNER, NAME, pull.number).draft
    pull.mark_ready_for_review()
    assert not gh.pull(OWNER, NAME, pull.number).draft
    req = urllib.request.Request(gh.graphql_url, data=b'{"query": "query { viewer { login } }"}', method="POST",
                                 headers={"Authorization": f"bearer {gh.token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert "errors" in json.loads(resp.read())


# review comment threads ---------------------------------------------------------------

THREADS = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { isResolved comments(first: 1) { nodes { databaseId } } }
      }
    }
  }
}
"""


def threads(gh: FakeGitHub, number: int, token: str | None = None, after: str | None = None,
            name: str = NAME) -> Any:
    return graphql(gh, THREADS, token, owner=OWNER, name=name, number=number, after=after)


def firsts(answer: Any) -> list[tuple[int, bool]]:
    """Each thread of a reviewThreads answer: its first comment's id, and whether it is resolved."""
    nodes = answer["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"]
    return [(n["comments"]["nodes"][0]["databaseId"], n["isResolved"]) for n in nodes]


def test_review_threads_and_replies_through_pygithub(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    head = gh.pull(OWNER, NAME, number).head_sha
    first = gh.thread(OWNER, NAME, number, "Why alpha?", path="alpha.txt", line=1, by="alice")
    pull = client(gh).get_repo(f"{OWNER}/{NAME}").get_pull(number)
    [opened] = pull.get_review_comments()
    assert (opened.id, opened.body, opened.user.login) == (first, "Why alpha?", "alice")
    assert opened.in_reply_to_id is None  # absent from a thread's first comment, as on GitHub
    assert (opened.path, opened.line, opened.position, opened.commit_id) == ("alpha.txt", 1, 1, head)
    assert opened.diff_hunk == "@@ -0,0 +1 @@\n+alpha"
    answer = pull.create_review_comment_reply(first, "Because the brief says so.")
    again = gh.reply(OWNER, NAME, number, answer.id, "Which brief?", by="alice")  # a reply to a reply
    last = pull.create_review_comment_reply(again, "Brief alpha.")
    assert (answer.in_reply_to_id, last.in_reply_to_id, last.path, last.diff_hunk) == (
        first, first, "alpha.txt", opened.diff_hunk)
    listed = [(c.id, c.in_reply_to_id, c.user.login) for c in pull.get_review_comments()]
    assert listed == [(first, None, "alice"), (answer.id, first, "assay-bot"), (again, first, "alice"),
                      (last.id, first, "assay-bot")]
    assert [c.in_reply_to_id for c in gh.review_comments(OWNER, NAME, number)] == [None, first, first, first]
    made = {v.id: (v.state, v.user.login) for v in pull.get_reviews()}  # each comment made its own review
    assert [made[c.pull_request_review_id] for c in pull.get_review_comments()] == [
        ("COMMENTED", "alice"), ("COMMENTED", "assay-bot"), ("COMMENTED", "alice"), ("COMMENTED", "assay-bot")]
    paged = client(gh, per_page=3).get_repo(f"{OWNER}/{NAME}").get_pull(number)
    assert paged.review_comments == 4
    assert [c.id for c in paged.get_review_comments()] == [i for i, _, _ in listed]
    path = f"/repos/{OWNER}/{NAME}/pulls/{number}/comments"
    status, headers, _ = request(gh, "GET", path)
    assert status == 200 and request(gh, "GET", path, headers={"If-None-Match": headers["ETag"]})[0] == 304
    gh.reply(OWNER, NAME, number, first, "Thanks.", by="alice")
    assert request(gh, "GET", path, headers={"If-None-Match": headers["ETag"]})[0] == 200
    status, _, body = request(gh, "GET", path + "?sort=created&direction=desc")
    assert status == 200 and json.loads(body)[0]["body"] == "Thanks."
    assert gh.schema_problems() == []


def test_a_pending_review_is_seen_by_its_author_alone(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    draft = gh.pending_thread(OWNER, NAME, number, "Not sent yet", path="alpha.txt", by="alice")
    shown = gh.thread(OWNER, NAME, number, "Sent", path="alpha.txt", by="bob")
    alice = gh.token_of("alice")
    as_bot = client(gh).get_repo(f"{OWNER}/{NAME}").get_pull(number)
    as_alice = Github(base_url=gh.api_url, auth=Auth.Token(alice), seconds_between_requests=None,
                      seconds_between_writes=None).get_repo(f"{OWNER}/{NAME}").get_pull(number)
    assert [c.id for c in as_bot.get_review_comments()] == [shown]
    assert [c.id for c in as_alice.get_review_comments()] == [draft, shown]
    assert [v.state for v in as_bot.get_reviews()] == ["COMMENTED"]
    assert [v.state for v in as_alice.get_reviews()] == ["PENDING", "COMMENTED"]
    assert as_bot.review_comments == 1
    assert firsts(threads(gh, number)) == [(shown, False)]
    assert firsts(threads(gh, number, alice)) == [(draft, False), (shown, False)]
    with pytest.raises(UnknownObjectException):  # another's pending comment is not there for the bot
        as_bot.create_review_comment_reply(draft, "What draft?")
    with pytest.raises(GithubException) as held:  # GitHub: one pending review per person and pull request
        as_alice.create_review_comment_reply(shown, "A reply while my review waits")
    assert held.value.status == 422 and "one pending review" in json.dumps(held.value.data)
    status, _, body = request(gh, "POST", f"/repos/{OWNER}/{NAME}/pulls/{number}/reviews", {"event": "COMMENT"},
                              headers={"Authorization": f"Bearer {alice}"})
    assert (status, json.loads(body)["errors"]) == (422, ["User can only have one pending review per pull request"])
    status, _, body = request(gh, "POST", f"/repos/{OWNER}/{NAME}/pulls/{number}/reviews",
                              {"body": "", "comments": [{"path": "alpha.txt", "line": 1, "body": "Mine, unsent"}]})
    mine = json.loads(body)
    assert status == 200 and mine["state"] == "PENDING" and "submitted_at" not in mine
    assert [c.body for c in as_bot.get_review_comments()] == ["Sent", "Mine, unsent"]
    assert [c.body for c in as_alice.get_review_comments()] == ["Not sent yet", "Sent"]
    status, _, _ = request(gh, "GET", f"/repos/{OWNER}/{NAME}/pulls/{number}/reviews/{mine['id']}",
                           headers={"Authorization": f"Bearer {alice}"})
    assert status == 404
    assert len(gh.review_comments(OWNER, NAME, number)) == 3
    gh.review(OWNER, NAME, number, "COMMENTED", "Now sent", by="alice")  # her pending review, submitted
    assert [c.id for c in as_bot.get_review_comments()][:2] == [draft, shown]
    assert firsts(threads(gh, number, gh.token_of("bob"))) == [(draft, False), (shown, False)]


def test_review_comments_are_refused_where_github_refuses_them(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    other = gh.thread(OWNER, NAME, number, "On the first pull", path="alpha.txt")
    git("-C", str(work), "checkout", "-qb", "assay/beta")
    commit(work, "beta.txt", "one\ntwo\nthree\n")
    push(gh, work, "assay/beta")
    pull = client(gh).get_repo(f"{OWNER}/{NAME}").create_pull(title="beta", body="", base="main", head="assay/beta")
    base = f"/repos/{OWNER}/{NAME}/pulls/{pull.number}"
    assert request(gh, "POST", f"{base}/comments/{other}/replies", {"body": "x"})[0] == 404  # another pull's
    assert request(gh, "POST", f"{base}/comments/999999/replies", {"body": "x"})[0] == 404
    assert request(gh, "POST", f"/repos/{OWNER}/{NAME}/pulls/99/comments/{other}/replies", {"body": "x"})[0] == 404
    assert request(gh, "GET", f"/repos/{OWNER}/{NAME}/pulls/99/comments")[0] == 404
    assert request(gh, "POST", f"/repos/{OWNER}/{NAME}/pulls/{number}/comments/{other}/replies", {})[0] == 422
    for where, reason in ((("README", 1), "Path could not be resolved"), (("beta.txt", 9), "must be part of the diff")):
        status, _, body = request(gh, "POST", f"{base}/reviews", {"event": "COMMENT", "comments": [
            {"path": where[0], "line": where[1], "body": "here"}]})
        assert status == 422 and reason in json.loads(body)["errors"][0]
    assert request(gh, "POST", f"{base}/reviews", {"event": "MAYBE"})[0] == 422
    assert [c.id for c in pull.get_review_comments()] == [] and list(pull.get_reviews()) == []
    review = pull.create_review(body="Two notes", event="COMMENT", comments=[
        {"path": "beta.txt", "line": 2, "body": "Why two?"}, {"path": "beta.txt", "line": 3, "body": "And three?"}])
    notes = list(pull.get_review_comments())
    assert [(c.line, c.position, c.pull_request_review_id) for c in notes] == [(2, 2, review.id), (3, 3, review.id)]
    assert notes[0].diff_hunk == "@@ -0,0 +1,3 @@\n+one\n+two"
    single = {"body": "One more", "commit_id": pull.head.sha, "path": "beta.txt", "line": 1}
    status, _, body = request(gh, "POST", f"{base}/comments", single)
    assert status == 201 and "in_reply_to_id" not in json.loads(body)
    status, _, body = request(gh, "POST", f"{base}/comments", {"body": "Agreed", "in_reply_to": notes[1].id})
    assert status == 201 and json.loads(body)["in_reply_to_id"] == notes[1].id
    assert request(gh, "POST", f"{base}/comments", {**single, "commit_id": "1" * 40})[0] == 422
    assert request(gh, "POST", f"{base}/comments", {**single, "line": 7})[0] == 422
    assert len(list(pull.get_review_comments())) == 4
    assert gh.schema_problems() == []


def test_review_threads_in_graphql(gh: FakeGitHub, work: Path) -> None:
    number = open_pull(gh)
    review = gh.review(OWNER, NAME, number, "COMMENTED", by="alice",
                       comments=[("alpha.txt", 1, f"note {i}") for i in range(101)])
    ids = [c.id for c in gh.review_comments(OWNER, NAME, number)]
    assert len(ids) == 101 and {c.pull_request_review_id for c in gh.review_comments(OWNER, NAME, number)} == {review}
    gh.reply(OWNER, NAME, number, ids[1], "A reply is no thread")
    gh.resolve(OWNER, NAME, number, ids[1], by="alice")
    page = threads(gh, number)
    info = page["data"]["repository"]["pullRequest"]["reviewThreads"]["pageInfo"]
    assert firsts(page) == [(i, i == ids[1]) for i in ids[:100]] and info["hasNextPage"] is True
    rest = threads(gh, number, after=info["endCursor"])
    assert firsts(rest) == [(ids[100], False)]
    assert rest["data"]["repository"]["pullRequest"]["reviewThreads"]["pageInfo"]["hasNextPage"] is False
    gh.resolve(OWNER, NAME, number, ids[1], resolved=False)
    assert firsts(threads(gh, number))[1] == (ids[1], False)

    ask_id = """query($number: Int!) { repository(owner: "octo", name: "widgets") { pullRequest(number: $number) {
                  reviewThreads(last: 1) { totalCount nodes { id isResolved } } } } }"""
    [node] = graphql(gh, ask_id, number=number)["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"]
    resolve = """mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) { thread { id isResolved } } }"""
    assert graphql(gh, resolve, id=node["id"]) == {"data": {"resolveReviewThread": {"thread": {
        "id": node["id"], "isResolved": True}}}}
    assert firsts(threads(gh, number, after=info["endCursor"])) == [(ids[100], True)]
    assert gh.repo(OWNER, NAME).threads[ids[100]].resolved_by == gh.user
    unresolve = resolve.replace("resolveReviewThread", "unresolveReviewThread")
    assert graphql(gh, unresolve, id=node["id"])["data"]["unresolveReviewThread"]["thread"]["isResolved"] is False
    gone = graphql(gh, resolve, id="PRRT_nothing")
    assert gone["data"] == {"resolveReviewThread": None} and gone["errors"][0]["type"] == "NOT_FOUND"

    nowhere = threads(gh, number, name="nothing")
    assert nowhere == {"data": {"repository": None}, "errors": [{
        "type": "NOT_FOUND", "path": ["repository"], "message": "Could not resolve to a Repository with the name "
                                                                "'octo/nothing'."}]}
    no_pull = threads(gh, 99)
    assert no_pull["data"] == {"repository": {"pullRequest": None}}
    assert [(e["type"], e["path"]) for e in no_pull["errors"]] == [("NOT_FOUND", ["repository", "pullRequest"])]
    unknown = graphql(gh, THREADS.replace("isResolved", "isResolved isCollapsed"), owner=OWNER, name=NAME,
                      number=number)
    assert "data" not in unknown and unknown["errors"][0]["extensions"]["fieldName"] == "isCollapsed"
    unbounded = graphql(gh, THREADS.replace("first: 100, ", ""), owner=OWNER, name=NAME, number=number)
    assert unbounded["errors"][0]["type"] == "MISSING_PAGINATION_BOUNDARIES"
    assert "errors" in graphql(gh, THREADS, owner=OWNER, name=NAME)  # $number is required
    assert threads(gh, number, after="bogus")["errors"][0]["type"] == "INVALID_CURSOR_ARGUMENTS"
    assert gh.calls[("POST", "/graphql")] == 14 == gh.quota(gh.user, "graphql").used
    assert gh.schema_problems() == []


# checked against GitHub's description ---------------------------------------------------

def test_the_subset_covers_every_route_the_fake_serves() -> None:
    paths = validate.subset()["paths"]
    served = {(r.spec_path, r.method.lower()) for r in ROUTES}
    assert all(method in paths.get(path, {}) for path, method in served), served
    assert served == set(extract.OPERATIONS)
    source = validate.subset()["source"]
    assert source["package"] == "@octokit/openapi" and source["version"]


def test_the_schema_check_can_fail() -> None:
    label = {"id": 1, "node_id": "LA_1", "url": "http://x/labels/a", "name": "a", "color": "ededed",
             "default": False, "description": None}
    path = "/repos/{owner}/{repo}/labels/{name}"
    assert validate.problems(path, "get", 200, label) == []
    assert validate.problems(path, "get", 200, {**label, "description": 3})
    assert validate.problems(path, "get", 200, {k: v for k, v in label.items() if k != "name"})
    assert validate.problems(path, "get", 201, label)  # a status the operation does not list
    assert validate.problems("/repos/{owner}/{repo}/pulls/{pull_number}/merge", "get", 204, {"x": 1})
    nullable = validate.to_json_schema({"nullable": True, "allOf": [{"$ref": "#/components/schemas/label"}]})
    assert nullable["anyOf"][1] == {"type": "null"}


def test_the_extractor_keeps_only_what_the_fake_serves(tmp_path: Path) -> None:
    tiny: dict[str, Any] = {"openapi": "3.0.3", "paths": {}, "components": {"schemas": {
        "basic-error": {"type": "object"}, "validation-error": {"type": "object"},
        "thing": {"type": "object", "description": "prose", "properties": {
            "description": {"type": "string"}, "other": {"$ref": "#/components/schemas/other"}}},
        "other": {"type": "string", "example": "x"}, "unused": {"type": "string"}}}}
    for path, method in extract.OPERATIONS:
        tiny["paths"].setdefault(path, {})[method] = {"operationId": f"{method}{path}", "responses": {"200": {
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/thing"}}}}}}
    subset = extract.extract(tiny, "0.0.0-test")
    assert set(subset["components"]["schemas"]) == {"basic-error", "validation-error", "thing", "other"}
    assert subset["components"]["schemas"]["thing"]["properties"]["description"] == {"type": "string"}
    assert "description" not in subset["components"]["schemas"]["thing"]
    assert subset["components"]["schemas"]["other"] == {"type": "string"}


def test_the_graphql_cut_holds_every_field_the_fake_resolves() -> None:
    served = {(t, f) for t, fields in RESOLVERS.items() for f in fields}
    assert served == {(t, f) for t, fields in graphql_extract.FIELDS.items() for f in fields}
    assert all(graphql_validate.field_type(t, f) for t, f in served)
    assert graphql_validate.field_type("PullRequestReviewThread", "isResolved") == "Boolean!"
    assert graphql_validate.field_type("PullRequestReviewComment", "databaseId") == "Int"
    source = graphql_validate.subset()["source"]
    assert source["package"] == "@octokit/graphql-schema" and source["version"]


def test_the_graphql_check_can_fail() -> None:
    thread = {"isResolved": True, "comments": {"nodes": [{"databaseId": 7}]}}
    good = {"data": {"repository": {"pullRequest": {"reviewThreads": {
        "pageInfo": {"hasNextPage": False, "endCursor": None}, "nodes": [thread]}}}}}
    assert graphql_validate.problems(good) == []
    assert graphql_validate.problems({"data": {"repository": None}, "errors": [{"message": "gone"}]}) == []

    def broken(**changes: Any) -> Any:
        return {"data": {"repository": {"pullRequest": {"reviewThreads": {
            "pageInfo": {"hasNextPage": False, "endCursor": None}, "nodes": [{**thread, **changes}]}}}}}
    assert graphql_validate.problems(broken(isResolved="yes"))  # not a Boolean
    assert graphql_validate.problems(broken(isResolved=None))  # Boolean! is never null
    assert graphql_validate.problems(broken(isCollapsed=False))  # not in the cut
    assert graphql_validate.problems(broken(comments={"nodes": [{"databaseId": 2**40}]}))  # wider than an Int
    assert graphql_validate.problems(broken(comments={"nodes": {"databaseId": 1}}))  # not a list
    assert graphql_validate.problems({"data": None})  # no data and no errors
    assert graphql_validate.problems({"data": {"viewer": {"login": "x"}}})


def test_the_graphql_extractor_keeps_only_what_the_fake_resolves() -> None:
    """The committed cut, turned back into an introspection answer with extra types and fields, cuts to itself."""
    types = graphql_validate.subset()["types"]

    def ref(written: str) -> dict[str, Any]:
        if written.endswith("!"):
            return {"kind": "NON_NULL", "name": None, "ofType": ref(written[:-1])}
        if written.startswith("["):
            return {"kind": "LIST", "name": None, "ofType": ref(written[1:-1])}
        return {"kind": types.get(written, {"kind": "OBJECT"})["kind"], "name": written, "ofType": None}
    listed: list[dict[str, Any]] = [{"kind": "OBJECT", "name": "Unused", "fields": []}]
    for name, t in types.items():
        entry: dict[str, Any] = {"kind": t["kind"], "name": name,
                                 "enumValues": [{"name": v} for v in t.get("values", [])]}
        entry["fields"] = [{"name": f, "type": ref(v["type"]), "args": [{"name": a, "type": ref(w)}
                                                                       for a, w in v["args"].items()]}
                           for f, v in t.get("fields", {}).items()] + [{"name": "unused", "type": ref("Unused"),
                                                                        "args": []}]
        entry["inputFields"] = [{"name": f, "type": ref(w)} for f, w in t.get("inputFields", {}).items()]
        listed.append(entry)
    cut = graphql_extract.extract({"__schema": {"types": listed}}, "0.0.0-test")
    assert cut["types"] == types and cut["source"]["version"] == "0.0.0-test"
