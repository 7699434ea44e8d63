"""The REST operations the fake serves, each named by its path in GitHub's description (reviews and their
threads are in `reviews.py`, which registers its routes here; GraphQL is in `graphql.py`)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.fakegithub import gitside, queue
from tests.fakegithub.faults import DOCS
from tests.fakegithub.state import (
    CheckRun,
    Comment,
    IssueEvent,
    Pull,
    Repo,
    Status,
    User,
    check_run_json,
    combined_status_json,
    comment_json,
    commit_json,
    issue_event_json,
    issue_json,
    label_json,
    now_iso,
    permission_json,
    pull_json,
    repo_json,
    rules_json,
    status_json,
)

if TYPE_CHECKING:
    from tests.fakegithub.server import FakeGitHub


@dataclass
class Request:
    method: str
    path: str  # without the API prefix, still percent-encoded
    query: dict[str, str]
    body: Any
    user: User


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    items: list[Any] | None = None  # a list answer, paginated by the server


Handler = Callable[["FakeGitHub", Request, dict[str, str]], Reply]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    spec_path: str  # the operation in GitHub's REST description whose schemas the answer must meet
    handler: Handler


def error(status: int, message: str, **extra: Any) -> Reply:
    return Reply(status, {"message": message, "documentation_url": DOCS, **extra})


def invalid(resource: str, field_name: str | None, code: str, message: str | None = None) -> Reply:
    err: dict[str, Any] = {"resource": resource, "code": code}
    if field_name:
        err["field"] = field_name
    if message:
        err["message"] = message
    return error(422, "Validation Failed", errors=[err])


NOT_FOUND = Reply(404, {"message": "Not Found", "documentation_url": DOCS})
THROUGH_THE_QUEUE = "Repository rule violations found\n\nChanges must be made through the merge queue"
ROUTES: list[Route] = []
SEG = "[^/]+"


def route(method: str, spec_path: str, pattern: str | None = None) -> Callable[[Handler], Handler]:
    """Register a handler; the path regex is made from the spec path unless given."""
    regex = pattern or "^" + re.sub(r"\{(\w+)\}", rf"(?P<\1>{SEG})", spec_path) + "$"

    def register(fn: Handler) -> Handler:
        ROUTES.append(Route(method, re.compile(regex), spec_path, fn))
        return fn
    return register


def _repo(gh: FakeGitHub, m: dict[str, str]) -> Repo | None:
    return gh.repos.get((m["owner"].lower(), m["repo"].lower()))


def find_pull(gh: FakeGitHub, m: dict[str, str], key: str) -> tuple[Repo, Pull] | None:
    repo = _repo(gh, m)
    if repo is None or not m[key].isdigit() or int(m[key]) not in repo.pulls:
        return None
    return repo, repo.refresh(repo.pulls[int(m[key])])


@route("GET", "/rate_limit")
def rate_limit(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    resources = {name: gh.quota(req.user, name).as_json() for name in ("core", "search", "graphql")}
    return Reply(200, {"resources": resources, "rate": resources["core"]})


@route("GET", "/repos/{owner}/{repo}")
def get_repo(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    return Reply(200, repo_json(repo, gh.urls, full=True)) if repo else NOT_FOUND


@route("GET", "/repos/{owner}/{repo}/pulls")
def list_pulls(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    if repo is None:
        return NOT_FOUND
    state = req.query.get("state", "open")
    if state not in ("open", "closed", "all"):
        return invalid("PullRequest", "state", "invalid")
    head = req.query.get("head")
    pulls = [repo.refresh(p) for p in sorted(repo.pulls.values(), key=lambda p: -p.number)
             if state in ("all", p.state)
             and (head is None or f"{repo.owner.login}:{p.head}".lower() == head.lower())
             and req.query.get("base", p.base) == p.base]
    return Reply(200, items=[pull_json(p, repo, gh.urls, simple=True) for p in pulls])


@route("POST", "/repos/{owner}/{repo}/pulls")
def create_pull(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    if repo is None:
        return NOT_FOUND
    body = req.body if isinstance(req.body, dict) else {}
    for name in ("title", "head", "base"):
        if not isinstance(body.get(name), str) or not body[name]:
            return invalid("PullRequest", name, "missing_field")
    head = body["head"].split(":", 1)[1] if ":" in body["head"] else body["head"]
    head_sha = gitside.rev_parse(repo.path, f"refs/heads/{head}")
    base_sha = gitside.rev_parse(repo.path, f"refs/heads/{body['base']}")
    if head_sha is None:
        return invalid("PullRequest", "head", "invalid")
    if base_sha is None:
        return invalid("PullRequest", "base", "invalid")
    if any(p.state == "open" and p.head == head and p.base == body["base"] for p in repo.pulls.values()):
        return invalid("PullRequest", None, "custom", f"A pull request already exists for {repo.owner.login}:{head}.")
    if gitside.is_ancestor(repo.path, head_sha, base_sha):
        return invalid("PullRequest", None, "custom", f"No commits between {body['base']} and {head}")
    pull = Pull(repo.next_number, body["title"], body.get("body"), head, body["base"], head_sha, base_sha, req.user,
                draft=bool(body.get("draft", False)))
    repo.pulls[pull.number] = pull
    repo.next_number += 1
    return Reply(201, pull_json(pull, repo, gh.urls), {"Location": f"{gh.urls.api}/repos/{repo.full_name}/pulls/"
                                                                   f"{pull.number}"})


@route("GET", "/repos/{owner}/{repo}/pulls/{pull_number}")
def get_pull(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    return Reply(200, pull_json(found[1], found[0], gh.urls)) if found else NOT_FOUND


@route("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}")
def update_pull(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    body = req.body if isinstance(req.body, dict) else {}
    state = body.get("state")
    if state not in (None, "open", "closed"):
        return invalid("PullRequest", "state", "invalid")
    if state == "open" and pull.merged_at:
        return invalid("PullRequest", "state", "invalid", "state cannot be changed. The pull request has been merged.")
    if "base" in body and gitside.rev_parse(repo.path, f"refs/heads/{body['base']}") is None:
        return invalid("PullRequest", "base", "invalid")
    pull.title = body.get("title", pull.title)
    pull.body = body.get("body", pull.body)
    pull.base = body.get("base", pull.base)
    if state and state != pull.state:
        pull.state = state
        pull.closed_at = now_iso() if state == "closed" else None
        pull.closed_by = req.user if state == "closed" else None
        repo.events.append(IssueEvent(pull.number, req.user, "closed" if state == "closed" else "reopened"))
    pull.updated_at = now_iso()
    queue.settle(gh, repo)  # a closed pull request, or one on another base, leaves the merge queue
    return Reply(200, pull_json(repo.refresh(pull), repo, gh.urls))


@route("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/merge")
def is_merged(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    return Reply(204) if found and found[1].merged_at else Reply(404)


@route("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge")
def merge_pull(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    body = req.body if isinstance(req.body, dict) else {}
    return merge(found[0], found[1], req.user, body.get("merge_method", "merge"), body.get("sha"),
                 body.get("commit_title"), body.get("commit_message"))


def merge(repo: Repo, pull: Pull, user: User, method: str, sha: str | None, title: str | None = None,
          message: str | None = None) -> Reply:
    """Merge a pull request into its base branch in the bare repository, as GitHub's merge button does."""
    if method not in ("merge", "squash"):
        return invalid("PullRequest", "merge_method", "invalid", "the fake merges with `merge` or `squash` only")
    if pull.state != "open":
        return error(405, "Pull Request is not mergeable")
    if pull.draft:
        return error(405, "Pull Request is still a draft")
    if sha is not None and sha != pull.head_sha:
        return error(409, "Head branch was modified. Review and try the merge again.")
    if repo.merge_queue(pull.base) is not None:
        return error(405, THROUGH_THE_QUEUE)
    default = (f"Merge pull request #{pull.number} from {repo.owner.login}/{pull.head}" if method == "merge"
               else f"{pull.title} (#{pull.number})")
    text = (title or default) + (f"\n\n{message}" if message else "")
    # a merge commit is authored by whoever merged, a squashed one by the pull request's author; GitHub commits both
    who = user if method == "merge" else pull.user
    merged = gitside.merge(repo.path, f"refs/heads/{pull.base}", pull.head_sha, text, squash=method == "squash",
                           author=(who.login, f"{who.id}+{who.login}@users.noreply.github.com"))
    if merged is None:
        return error(405, "Pull Request is not mergeable")
    pull.state, pull.merged_at, pull.closed_at, pull.closed_by = "closed", now_iso(), now_iso(), user
    pull.merged_by, pull.merge_commit_sha, pull.updated_at = user, merged, now_iso()
    repo.events += [IssueEvent(pull.number, user, "merged", commit_id=merged), IssueEvent(pull.number, user, "closed")]
    return Reply(200, {"sha": merged, "merged": True, "message": "Pull Request successfully merged"})


@route("GET", "/repos/{owner}/{repo}/issues/{issue_number}")
def get_issue(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "issue_number")  # the fake's issues are its pull requests
    return Reply(200, issue_json(found[1], found[0], gh.urls)) if found else NOT_FOUND


@route("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}")
def get_comment(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    hit = [c for c in repo.comments if str(c.id) == m["comment_id"]] if repo else []
    return Reply(200, comment_json(hit[0], repo, gh.urls)) if repo and hit else NOT_FOUND


@route("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission")
def get_permission(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    user = gh.people.get(urllib.parse.unquote(m["username"])) if repo else None
    return Reply(200, permission_json(repo, user, gh.urls)) if repo and user else NOT_FOUND


@route("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs")
def list_check_runs(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    info = _commit(repo, m["ref"]) if repo else None
    if repo is None or info is None:
        return NOT_FOUND
    runs = [check_run_json(c, repo, gh.urls) for c in repo.check_runs if c.sha == info.sha]
    return Reply(200, {"total_count": len(runs), "check_runs": runs})


def add_check_run(repo: Repo, sha: str, name: str, status: str, conclusion: str | None) -> CheckRun:
    """A CI job's check run: a new one, or the one of that name on that commit moved on."""
    for run in repo.check_runs:
        if run.sha == sha and run.name == name:
            run.status, run.conclusion, run.at = status, conclusion, now_iso()
            return run
    run = CheckRun(sha, name, status, conclusion)
    repo.check_runs.append(run)
    return run


@route("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments")
def list_comments(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "issue_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    return Reply(200, items=[comment_json(c, repo, gh.urls) for c in repo.comments if c.issue == pull.number])


@route("GET", "/repos/{owner}/{repo}/issues/{issue_number}/events")
def list_issue_events(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "issue_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    return Reply(200, items=[issue_event_json(e, repo, gh.urls) for e in repo.events if e.issue == pull.number])


@route("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments")
def create_comment(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "issue_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    body = req.body.get("body") if isinstance(req.body, dict) else None
    if not isinstance(body, str) or not body:
        return invalid("IssueComment", "body", "missing_field")
    comment = Comment(pull.number, req.user, body)
    repo.comments.append(comment)
    return Reply(201, comment_json(comment, repo, gh.urls))


def _label_names(body: Any) -> list[str] | None:
    names = body.get("labels") if isinstance(body, dict) else body
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        return None
    return names


def _labels_reply(gh: FakeGitHub, repo: Repo, pull: Pull) -> Reply:
    return Reply(200, [label_json(repo.label(n), repo, gh.urls) for n in pull.labels])


@route("GET", "/repos/{owner}/{repo}/issues/{issue_number}/labels")
def list_issue_labels(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "issue_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    return Reply(200, items=[label_json(repo.label(n), repo, gh.urls) for n in pull.labels])


def _set_labels(gh: FakeGitHub, req: Request, m: dict[str, str], replace: bool) -> Reply:
    found = find_pull(gh, m, "issue_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    names = _label_names(req.body)
    if names is None:
        return invalid("Label", "labels", "invalid")
    keep = [] if replace else list(pull.labels)
    for name in names:
        canonical = repo.label(name).name
        if canonical not in keep:
            keep.append(canonical)
    repo.events += [IssueEvent(pull.number, req.user, "unlabeled", n) for n in pull.labels if n not in keep]
    repo.events += [IssueEvent(pull.number, req.user, "labeled", n) for n in keep if n not in pull.labels]
    pull.labels = keep
    return _labels_reply(gh, repo, pull)


@route("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels")
def add_labels(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    return _set_labels(gh, req, m, replace=False)


@route("PUT", "/repos/{owner}/{repo}/issues/{issue_number}/labels")
def set_labels(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    return _set_labels(gh, req, m, replace=True)


@route("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}")
def remove_label(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "issue_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    name = urllib.parse.unquote(m["name"])
    kept = [n for n in pull.labels if n.lower() != name.lower()]
    if len(kept) == len(pull.labels):
        return error(404, "Label does not exist")
    repo.events += [IssueEvent(pull.number, req.user, "unlabeled", n) for n in pull.labels if n not in kept]
    pull.labels = kept
    return _labels_reply(gh, repo, pull)


@route("GET", "/repos/{owner}/{repo}/labels")
def list_repo_labels(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    if repo is None:
        return NOT_FOUND
    return Reply(200, items=[label_json(label, repo, gh.urls) for label in repo.labels.values()])


@route("GET", "/repos/{owner}/{repo}/labels/{name}")
def get_repo_label(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    name = urllib.parse.unquote(m["name"]).lower()
    found = [label for key, label in repo.labels.items() if key.lower() == name] if repo else []
    return Reply(200, label_json(found[0], repo, gh.urls)) if repo and found else NOT_FOUND


def _commit(repo: Repo, ref: str) -> gitside.CommitInfo | None:
    ref = urllib.parse.unquote(ref)
    if ref.startswith("-"):
        return None
    for candidate in (f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
        sha = gitside.rev_parse(repo.path, candidate)
        if sha:
            return gitside.commit_info(repo.path, sha)
    return None


def _no_commit(ref: str) -> Reply:
    return error(422, f"No commit found for SHA: {urllib.parse.unquote(ref)}")


@route("GET", "/repos/{owner}/{repo}/commits/{ref}")
def get_commit(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    if repo is None:
        return NOT_FOUND
    info = _commit(repo, m["ref"])
    return Reply(200, commit_json(info, repo, gh.urls)) if info else _no_commit(m["ref"])


@route("GET", "/repos/{owner}/{repo}/commits/{ref}/status")
def combined_status(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    info = _commit(repo, m["ref"]) if repo else None
    if repo is None or info is None:
        return NOT_FOUND
    return Reply(200, combined_status_json(repo, info.sha, gh.urls))


@route("GET", "/repos/{owner}/{repo}/commits/{ref}/statuses")
def list_statuses(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    info = _commit(repo, m["ref"]) if repo else None
    if repo is None or info is None:
        return NOT_FOUND if repo is None else Reply(200, items=[])
    newest_first = [s for s in reversed(repo.statuses) if s.sha == info.sha]
    return Reply(200, items=[status_json(s, repo, gh.urls) for s in newest_first])


# PyGithub's `Commit.get_statuses()` reads the older spelling of the same list.
route("GET", "/repos/{owner}/{repo}/commits/{ref}/statuses",
      rf"^/repos/(?P<owner>{SEG})/(?P<repo>{SEG})/statuses/(?P<ref>{SEG})$")(list_statuses)

STATES = ("error", "failure", "pending", "success")


@route("POST", "/repos/{owner}/{repo}/statuses/{sha}")
def create_status(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    if repo is None:
        return NOT_FOUND
    body = req.body if isinstance(req.body, dict) else {}
    if body.get("state") not in STATES:
        return invalid("Status", "state", "custom", f"state is not included in the list {list(STATES)}")
    sha = gitside.rev_parse(repo.path, m["sha"]) if re.fullmatch(r"[0-9a-f]{7,40}", m["sha"]) else None
    if sha is None:
        return _no_commit(m["sha"])
    status = Status(sha, body["state"], body.get("target_url"), body.get("description"),
                    body.get("context") or "default", req.user)
    repo.statuses.append(status)
    queue.settle(gh, repo)  # a merge group's checks may have just passed or failed
    return Reply(201, status_json(status, repo, gh.urls))


@route("GET", "/repos/{owner}/{repo}/rules/branches/{branch}")
def branch_rules(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    repo = _repo(gh, m)
    if repo is None:
        return NOT_FOUND
    return Reply(200, items=rules_json(repo, urllib.parse.unquote(m["branch"])))
