"""The webhook payloads GitHub would deliver for events on the fake, built from the fake's own state.

Each payload meets the vendored schema (`validate.problems(event, action, payload) == []`) and agrees
with what the fake's REST API answers: the same ids, numbers, logins, shas, branches and html urls,
built with the same `state.py` builders where the webhook schema accepts them. What the fake does
not model (workflows, workflow runs, check suites, the GitHub Actions app) is made up here, with ids
derived from what names them so the same workflow or run keeps its ids from one payload to the next.
"""

from __future__ import annotations

import calendar
import hashlib
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tests.fakegithub import gitside, state
from tests.fakegithub.state import Pull, Repo, Urls, User, node_id, now_iso

if TYPE_CHECKING:  # the fake's merge queue builds payloads here as it runs
    from tests.fakegithub.server import FakeGitHub

ZERO_SHA = "0" * 40
ACTIONS_APP_ID = 15368  # GitHub Actions, the app whose check suites workflow runs are
GITHUB_ORG = User("github", 9919)  # the Actions app's owner
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "eyes", "rocket")


# -- shared pieces -------------------------------------------------------------------------------------------

def derived_id(*parts: object) -> int:
    """A stable made-up id for what the fake does not model (a workflow, a check suite): same parts, same id."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "big") | 1 << 31


def workflow_path(workflow_name: str) -> str:
    return f".github/workflows/{workflow_name.lower().replace(' ', '-')}.yml"


def repository(r: Repo, urls: Urls) -> dict[str, Any]:
    """The webhook `repository`: the REST repository plus the keys only webhooks carry."""
    return {**state.repo_json(r, urls, full=True), "allow_forking": True, "web_commit_signoff_required": False,
            "custom_properties": {}}


def sender(u: User, urls: Urls) -> dict[str, Any]:
    return {**state.user_json(u, urls), "user_view_type": "public"}


def reactions(url: str) -> dict[str, Any]:
    return {"url": f"{url}/reactions", "total_count": 0, **dict.fromkeys(REACTIONS, 0)}


def _envelope(r: Repo, urls: Urls, by: User, action: str | None = None, **rest: Any) -> dict[str, Any]:
    head = {"action": action} if action is not None else {}
    return {**head, **rest, "repository": repository(r, urls), "sender": sender(by, urls)}


def _pull(r: Repo, p: Pull, urls: Urls, simple: bool) -> dict[str, Any]:
    """`pull_json` with the webhook repository on both sides (webhooks require `has_discussions` there)."""
    out = state.pull_json(r.refresh(p), r, urls, simple=simple)
    for side in ("head", "base"):
        out[side] = {**out[side], "repo": repository(r, urls)}
    return out


def _pull_ref(r: Repo, p: Pull, urls: Urls) -> dict[str, Any]:
    """A pull request as a workflow run or check suite lists it."""
    api = f"{urls.api}/repos/{r.full_name}"
    repo = {"id": r.id, "url": api, "name": r.name}
    return {"url": f"{api}/pulls/{p.number}", "id": p.id, "number": p.number,
            "head": {"ref": p.head, "sha": p.head_sha, "repo": repo},
            "base": {"ref": p.base, "sha": p.base_sha, "repo": repo}}


def _pulls_at(r: Repo, branch: str, head_sha: str, urls: Urls) -> list[dict[str, Any]]:
    """The open pull requests whose head is that branch at that commit, as GitHub lists them with a run."""
    pulls = [r.refresh(p) for p in sorted(r.pulls.values(), key=lambda p: p.number) if p.state == "open"]
    return [_pull_ref(r, p, urls) for p in pulls if p.head == branch and p.head_sha == head_sha]


def _commit(r: Repo, sha: str) -> gitside.CommitInfo:
    info = gitside.commit_info(r.path, sha)
    if info is None:
        raise ValueError(f"no commit {sha} in {r.full_name} on the fake")
    return info


def _head_commit(c: gitside.CommitInfo) -> dict[str, Any]:
    return {"id": c.sha, "tree_id": c.tree, "message": c.message, "timestamp": c.committer[2],
            "author": {"name": c.author[0], "email": c.author[1]},
            "committer": {"name": c.committer[0], "email": c.committer[1]}}


def _actions_app(r: Repo, urls: Urls) -> dict[str, Any]:
    at = r.created_at  # the fake has no clock of the app's own
    return {"id": ACTIONS_APP_ID, "slug": "github-actions", "name": "GitHub Actions",
            "node_id": node_id("A", ACTIONS_APP_ID), "client_id": "Iv1.github-actions",
            "owner": state.user_json(GITHUB_ORG, urls), "description": "Automate your workflow from idea to production",
            "external_url": "https://help.github.com/en/actions", "html_url": f"{urls.web}/apps/github-actions",
            "created_at": at, "updated_at": at, "events": [],
            "permissions": {"actions": "write", "checks": "write", "contents": "write", "metadata": "read"}}


def _actor(r: Repo, branch: str, head_sha: str) -> User:
    """Who set a run going: the author of the pull request at that head, else the repository's owner."""
    found = [p for p in r.pulls.values() if p.head == branch and p.head_sha == head_sha]
    return found[0].user if found else r.owner


# -- the payloads --------------------------------------------------------------------------------------------

def review_submitted(gh: FakeGitHub, owner: str, name: str, number: int, review_id: int) -> dict[str, Any]:
    """`pull_request_review` / `submitted` for a review the fake holds."""
    with gh.lock:
        r = gh.repo(owner, name)
        v = next(v for v in r.reviews if v.id == review_id and v.pull == number)
        p = r.refresh(r.pulls[number])
        review = {**state.review_json(v, r, gh.urls), "state": v.state.lower(), "commit_id": v.commit_id or p.head_sha,
                  "updated_at": v.at}
        return _envelope(r, gh.urls, v.user, "submitted", review=review,
                         pull_request=_pull(r, p, gh.urls, simple=True))


def review_comment_created(gh: FakeGitHub, owner: str, name: str, number: int, comment_id: int) -> dict[str, Any]:
    """`pull_request_review_comment` / `created` for a comment in a review thread the fake holds (a thread's first
    comment, or a reply in it: `in_reply_to_id`), sent by the comment's author."""
    with gh.lock:
        r = gh.repo(owner, name)
        c = next(c for c in r.review_comments if c.id == comment_id and c.pull == number)
        p = r.refresh(r.pulls[number])
        return _envelope(r, gh.urls, c.user, "created", comment=state.review_comment_json(c, r, gh.urls),
                         pull_request=_pull(r, p, gh.urls, simple=True))


def comment_created(gh: FakeGitHub, owner: str, name: str, number: int, comment_id: int) -> dict[str, Any]:
    """`issue_comment` / `created` for a comment on a pull request (the issue carries `pull_request`)."""
    with gh.lock:
        r = gh.repo(owner, name)
        c = next(c for c in r.comments if c.id == comment_id and c.issue == number)
        p = r.refresh(r.pulls[number])
        pull = state.pull_json(p, r, gh.urls, simple=True)
        api = f"{gh.urls.api}/repos/{r.full_name}/issues/{number}"
        issue = {  # the fake keeps no separate issue: it has the pull request's id
            "url": api, "repository_url": f"{gh.urls.api}/repos/{r.full_name}", "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments", "events_url": f"{api}/events", "timeline_url": f"{api}/timeline",
            "html_url": pull["html_url"], "id": p.id, "node_id": node_id("I", p.id), "number": number,
            "title": p.title, "user": pull["user"], "labels": pull["labels"],
            "state": p.state, "state_reason": None, "locked": False, "assignee": None, "assignees": [],
            "milestone": None, "comments": sum(1 for k in r.comments if k.issue == number),
            "created_at": p.created_at, "updated_at": p.updated_at, "closed_at": p.closed_at,
            "author_association": pull["author_association"], "active_lock_reason": None, "draft": p.draft,
            "body": p.body, "reactions": reactions(api), "performed_via_github_app": None,
            "pull_request": {"url": pull["url"], "html_url": pull["html_url"], "diff_url": pull["diff_url"],
                             "patch_url": pull["patch_url"], "merged_at": p.merged_at},
        }
        comment = {**state.comment_json(c, r, gh.urls), "performed_via_github_app": None}
        comment["reactions"] = reactions(comment["url"])
        return _envelope(r, gh.urls, c.user, "created", issue=issue, comment=comment)


def pull_closed(gh: FakeGitHub, owner: str, name: str, number: int, by: str) -> dict[str, Any]:
    """`pull_request` / `closed`, merged or not as the fake's pull request says; ValueError while it is open."""
    with gh.lock:
        r = gh.repo(owner, name)
        p = r.pulls[number]
        if p.state != "closed":
            raise ValueError(f"#{number} of {r.full_name} is {p.state}, not closed")
        pull = {**_pull(r, p, gh.urls, simple=False), "allow_auto_merge": False, "delete_branch_on_merge": False,
                "use_squash_pr_title_as_default": False}
        return _envelope(r, gh.urls, gh.person(by), "closed", number=number, pull_request=pull)


def workflow_run_completed(gh: FakeGitHub, owner: str, name: str, *, branch: str, head_sha: str, conclusion: str,
                           run_id: int, run_attempt: int = 1, workflow_name: str = "CI",
                           event: str = "pull_request") -> dict[str, Any]:
    """`workflow_run` / `completed` of a run at `head_sha` on `branch`; the workflow and its ids are made up."""
    with gh.lock:
        r = gh.repo(owner, name)
        urls, api = gh.urls, f"{gh.urls.api}/repos/{r.full_name}"
        c = _commit(r, head_sha)
        path = workflow_path(workflow_name)
        workflow_id = derived_id(r.id, "workflow", path)
        suite_id = derived_id(r.id, "check_suite", run_id, run_attempt)
        run_url = f"{api}/actions/runs/{run_id}"
        at = now_iso()
        actor = sender(_actor(r, branch, c.sha), urls)
        workflow = {"id": workflow_id, "node_id": node_id("W", workflow_id), "name": workflow_name, "path": path,
                    "state": "active", "created_at": r.created_at, "updated_at": r.created_at,
                    "url": f"{api}/actions/workflows/{workflow_id}",
                    "html_url": f"{urls.web}/{r.full_name}/blob/{r.default_branch}/{path}",
                    "badge_url": f"{urls.web}/{r.full_name}/workflows/{workflow_name}/badge.svg"}
        run = {
            "id": run_id, "node_id": node_id("WFR", run_id), "name": workflow_name, "display_title":
            c.message.splitlines()[0] if c.message else "", "path": path, "event": event, "status": "completed",
            "conclusion": conclusion, "head_branch": branch, "head_sha": c.sha, "head_commit": _head_commit(c),
            "workflow_id": workflow_id, "check_suite_id": suite_id, "check_suite_node_id": node_id("CS", suite_id),
            "run_number": run_id, "run_attempt": run_attempt, "created_at": at, "updated_at": at,
            "run_started_at": at, "actor": actor, "triggering_actor": actor,
            "url": run_url, "html_url": f"{urls.web}/{r.full_name}/actions/runs/{run_id}",
            "jobs_url": f"{run_url}/jobs", "logs_url": f"{run_url}/logs", "artifacts_url": f"{run_url}/artifacts",
            "cancel_url": f"{run_url}/cancel", "rerun_url": f"{run_url}/rerun",
            "check_suite_url": f"{api}/check-suites/{suite_id}", "workflow_url": workflow["url"],
            "previous_attempt_url": f"{run_url}/attempts/{run_attempt - 1}" if run_attempt > 1 else None,
            "pull_requests": _pulls_at(r, branch, c.sha, urls), "referenced_workflows": [],
            "repository": state.minimal_repo_json(r, urls), "head_repository": state.minimal_repo_json(r, urls),
        }
        return _envelope(r, urls, _actor(r, branch, c.sha), "completed", workflow=workflow, workflow_run=run)


def check_suite_completed(gh: FakeGitHub, owner: str, name: str, *, branch: str, head_sha: str, conclusion: str,
                          suite_id: int) -> dict[str, Any]:
    """`check_suite` / `completed` of GitHub Actions' suite at `head_sha` on `branch`."""
    with gh.lock:
        r = gh.repo(owner, name)
        api = f"{gh.urls.api}/repos/{r.full_name}"
        c = _commit(r, head_sha)
        at = now_iso()
        suite = {
            "id": suite_id, "node_id": node_id("CS", suite_id), "head_branch": branch, "head_sha": c.sha,
            "status": "completed", "conclusion": conclusion, "url": f"{api}/check-suites/{suite_id}",
            "check_runs_url": f"{api}/check-suites/{suite_id}/check-runs",
            "before": c.parents[0] if c.parents else ZERO_SHA, "after": c.sha,
            "pull_requests": _pulls_at(r, branch, c.sha, gh.urls), "app": _actions_app(r, gh.urls),
            "created_at": at, "updated_at": at, "latest_check_runs_count": 1, "rerequestable": True,
            "runs_rerequestable": True, "head_commit": _head_commit(c),
        }
        return _envelope(r, gh.urls, _actor(r, branch, c.sha), "completed", check_suite=suite)


def _epoch(iso: str) -> int:
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


def push(gh: FakeGitHub, owner: str, name: str, *, before: str, after: str, added: Iterable[str] = (),
         modified: Iterable[str] = (), removed: Iterable[str] = (), ref: str = "refs/heads/main",
         by: str = "maintainer") -> dict[str, Any]:
    """`push` of `ref` from `before` to `after` (all zeros: created / deleted), one commit listing those paths."""
    with gh.lock:
        r = gh.repo(owner, name)
        web = f"{gh.urls.web}/{r.full_name}"
        pusher = gh.person(by)
        commits: list[dict[str, Any]] = []
        if after != ZERO_SHA:
            c = _commit(r, after)
            commits.append({**_head_commit(c), "url": f"{web}/commit/{c.sha}", "distinct": True,
                            "added": list(added), "modified": list(modified), "removed": list(removed)})
        forced = ZERO_SHA not in (before, after) and not gitside.is_ancestor(r.path, before, after)
        # a push payload's repository stamps created_at and pushed_at in epoch seconds, as GitHub's does
        repo = {**repository(r, gh.urls), "created_at": _epoch(r.created_at), "pushed_at": _epoch(now_iso()),
                "stargazers": 0, "master_branch": r.default_branch}
        return {"ref": ref, "before": before, "after": after, "created": before == ZERO_SHA,
                "deleted": after == ZERO_SHA, "forced": forced, "base_ref": None,
                "compare": f"{web}/compare/{before[:12]}...{after[:12]}", "commits": commits,
                "head_commit": commits[0] if commits else None,
                "pusher": {"name": pusher.login, "email": f"{pusher.id}+{pusher.login}@users.noreply.github.com"},
                "repository": repo, "sender": sender(pusher, gh.urls)}


def workflow_dispatch(gh: FakeGitHub, owner: str, name: str, inputs: dict[str, str] | None,
                      ref: str = "refs/heads/main", by: str = "maintainer") -> dict[str, Any]:
    """`workflow_dispatch` of the CI workflow (`.github/workflows/ci.yml`) at `ref`."""
    with gh.lock:
        r = gh.repo(owner, name)
        return _envelope(r, gh.urls, gh.person(by), inputs=dict(inputs) if inputs is not None else None, ref=ref,
                         workflow=workflow_path("CI"))


def merge_group_checks_requested(gh: FakeGitHub, owner: str, name: str, *, head_sha: str, head_ref: str,
                                 base_sha: str, base_ref: str) -> dict[str, Any]:
    """`merge_group` / `checks_requested` for a merge queue's group (`FakeGitHub.merge_groups` lists the live
    ones): its commit, its temporary branch, its parent and the branch it merges into, sent by the queue's bot."""
    with gh.lock:
        r = gh.repo(owner, name)
        c = _commit(r, head_sha)
        group = {"head_sha": c.sha, "head_ref": head_ref, "base_sha": base_sha, "base_ref": base_ref,
                 "head_commit": _head_commit(c)}
        return _envelope(r, gh.urls, gh.merge_queue_bot, "checks_requested", merge_group=group)
