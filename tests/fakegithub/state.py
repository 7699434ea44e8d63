"""The fake's memory per repository, and the JSON GitHub would send for each object."""

from __future__ import annotations

import base64
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakegithub import gitside

_ids = itertools.count(1001)


CLOCK = {"offset_s": 0.0}  # GitHub's clock against this machine's: `FakeGitHub.clock_offset_s` sets it


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + CLOCK["offset_s"]))


def node_id(kind: str, ident: int) -> str:
    return f"{kind}_" + base64.b64encode(f"{kind}:{ident}".encode()).decode().rstrip("=")


@dataclass
class Urls:
    api: str  # http://127.0.0.1:PORT/api/v3
    web: str  # http://127.0.0.1:PORT


@dataclass
class User:
    login: str
    id: int = field(default_factory=lambda: next(_ids))
    type: str = "User"  # or "Bot", as GitHub's apps act


@dataclass
class Label:
    name: str
    color: str = "ededed"
    description: str | None = ""  # the pulls list's schema has a label's description as a string, never null
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Comment:
    issue: int
    user: User
    body: str
    at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Status:
    sha: str
    state: str
    target_url: str | None
    description: str | None
    context: str
    creator: User
    at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class Review:
    pull: int
    user: User
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED, or PENDING (not submitted: seen by its author alone)
    body: str
    commit_id: str | None
    at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))

    def seen_by(self, viewer: User) -> bool:
        return self.state != "PENDING" or self.user.login == viewer.login


@dataclass
class ReviewComment:
    """A comment on a line of a pull request's diff; one without `in_reply_to_id` opens a thread."""

    pull: int
    pull_request_review_id: int
    in_reply_to_id: int | None  # the thread's first comment (GitHub attaches a reply to a reply there)
    user: User
    body: str
    path: str
    line: int
    commit_id: str  # the pull request's head when the comment was made
    original_commit_id: str  # the thread's commit: a reply keeps its first comment's
    diff_hunk: str
    position: int
    created_at: str = field(default_factory=now_iso)
    updated_at: str = ""
    id: int = field(default_factory=lambda: next(_ids))

    def __post_init__(self) -> None:
        self.updated_at = self.updated_at or self.created_at

    @property
    def node_id(self) -> str:
        return node_id("PRRC", self.id)

    @property
    def thread(self) -> int:
        """The id of the thread's first comment, which names the thread."""
        return self.in_reply_to_id or self.id


@dataclass
class Thread:
    """What a review thread holds beyond its comments: whether someone resolved it, and who."""

    resolved: bool = False
    resolved_by: User | None = None


@dataclass
class CheckRun:
    """A check run on a commit, as a CI app (GitHub Actions) makes one per job."""

    sha: str
    name: str
    status: str  # queued, in_progress, completed
    conclusion: str | None  # success, failure, … once completed
    suite: int = field(default_factory=lambda: next(_ids))
    at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass
class IssueEvent:
    """One entry of a pull request's issue events: labeled, unlabeled, ready_for_review, merged, closed…"""

    issue: int
    actor: User
    event: str
    label: str | None = None
    commit_id: str | None = None
    at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(frozen=True)
class Delivery:
    """A webhook delivery the fake recorded (it sends none): the event, its action, and the payload."""

    event: str
    action: str | None
    payload: dict[str, Any]


@dataclass
class Ruleset:
    """A repository ruleset on one branch that sends merges through a merge queue and names the checks it needs."""

    branch: str
    checks: tuple[str, ...]
    name: str = "merge queue"
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(frozen=True)
class MergeGroup:
    """A merge queue's group: a commit on its temporary branch, tested before the base branch moves to it."""

    head_sha: str
    head_ref: str  # refs/heads/gh-readonly-queue/<base>/pr-<number>-<head sha>
    base_sha: str  # the group's parent: the group ahead of it, or the base branch's tip
    base_ref: str  # refs/heads/<base>
    pulls: tuple[int, ...]  # every pull request the commit holds, this entry's last


@dataclass
class QueueEntry:
    """A pull request in its base branch's merge queue."""

    pull: int
    base: str
    head_sha: str  # the pull request's head when it was queued: a new head takes it out of the queue
    enqueuer: User
    state: str = "QUEUED"  # MergeQueueEntryState: QUEUED, AWAITING_CHECKS, MERGEABLE, UNMERGEABLE
    position: int = 1
    group: MergeGroup | None = None
    enqueued_at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def node_id(self) -> str:
        return node_id("MQE", self.id)


@dataclass
class Pull:
    number: int
    title: str
    body: str | None
    head: str
    base: str
    head_sha: str
    base_sha: str
    user: User
    draft: bool
    state: str = "open"
    merged_at: str | None = None
    merged_by: User | None = None
    merge_commit_sha: str | None = None
    closed_at: str | None = None
    closed_by: User | None = None
    labels: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def node_id(self) -> str:
        return node_id("PR", self.id)


@dataclass
class Repo:
    owner: User
    name: str
    path: Path
    default_branch: str
    pulls: dict[int, Pull] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    comments: list[Comment] = field(default_factory=list)
    statuses: list[Status] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)
    review_comments: list[ReviewComment] = field(default_factory=list)
    threads: dict[int, Thread] = field(default_factory=dict)  # first comment's id -> its thread
    events: list[IssueEvent] = field(default_factory=list)
    check_runs: list[CheckRun] = field(default_factory=list)
    permissions: dict[str, str] = field(default_factory=dict)  # login -> admin, write, read (default: read)
    rulesets: list[Ruleset] = field(default_factory=list)
    queue: list[QueueEntry] = field(default_factory=list)  # live merge queue entries, every base, in order
    next_number: int = 1
    created_at: str = field(default_factory=now_iso)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    def refresh(self, pull: Pull) -> Pull:
        """An open PR's head and base shas follow their branches in the bare repository."""
        if pull.state == "open":
            pull.head_sha = gitside.rev_parse(self.path, f"refs/heads/{pull.head}") or pull.head_sha
            pull.base_sha = gitside.rev_parse(self.path, f"refs/heads/{pull.base}") or pull.base_sha
        return pull

    def merge_queue(self, branch: str) -> Ruleset | None:
        """The ruleset that sends merges into `branch` through a merge queue, if one does."""
        return next((r for r in self.rulesets if r.branch == branch), None)

    def review(self, review_id: int) -> Review:
        return next(v for v in self.reviews if v.id == review_id)

    def seen_by(self, comment: ReviewComment, viewer: User) -> bool:
        """A comment of a pending review is seen by that review's author alone, as on GitHub."""
        return self.review(comment.pull_request_review_id).seen_by(viewer)

    def label(self, name: str) -> Label:
        """The repository's label of that name, created on first use as GitHub does."""
        for key, existing in self.labels.items():
            if key.lower() == name.lower():
                return existing
        self.labels[name] = Label(name)
        return self.labels[name]


def user_json(u: User, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/users/{u.login}"
    return {
        "login": u.login, "id": u.id, "node_id": node_id("U", u.id), "avatar_url": f"{urls.web}/avatars/{u.login}",
        "gravatar_id": "", "url": api, "html_url": f"{urls.web}/{u.login}", "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}", "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}", "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs", "repos_url": f"{api}/repos", "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events", "type": u.type, "site_admin": False,
    }


_REPO_TEMPLATES = {
    "archive_url": "{archive_format}{/ref}", "assignees_url": "assignees{/user}", "blobs_url": "git/blobs{/sha}",
    "branches_url": "branches{/branch}", "collaborators_url": "collaborators{/collaborator}",
    "comments_url": "comments{/number}", "commits_url": "commits{/sha}", "compare_url": "compare/{base}...{head}",
    "contents_url": "contents/{+path}", "contributors_url": "contributors", "deployments_url": "deployments",
    "downloads_url": "downloads", "events_url": "events", "forks_url": "forks", "git_commits_url": "git/commits{/sha}",
    "git_refs_url": "git/refs{/sha}", "git_tags_url": "git/tags{/sha}", "hooks_url": "hooks",
    "issue_comment_url": "issues/comments{/number}", "issue_events_url": "issues/events{/number}",
    "issues_url": "issues{/number}", "keys_url": "keys{/key_id}", "labels_url": "labels{/name}",
    "languages_url": "languages", "merges_url": "merges", "milestones_url": "milestones{/number}",
    "notifications_url": "notifications{?since,all,participating}", "pulls_url": "pulls{/number}",
    "releases_url": "releases{/id}", "stargazers_url": "stargazers", "statuses_url": "statuses/{sha}",
    "subscribers_url": "subscribers", "subscription_url": "subscription", "tags_url": "tags", "teams_url": "teams",
    "trees_url": "git/trees{/sha}",
}


def minimal_repo_json(r: Repo, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/repos/{r.full_name}"
    out: dict[str, Any] = {k: f"{api}/{v}" for k, v in _REPO_TEMPLATES.items()}
    out.update({"id": r.id, "node_id": node_id("R", r.id), "name": r.name, "full_name": r.full_name,
                "owner": user_json(r.owner, urls), "private": True, "html_url": f"{urls.web}/{r.full_name}",
                "description": None, "fork": False, "url": api})
    return out


def repo_json(r: Repo, urls: Urls, full: bool = False) -> dict[str, Any]:
    out = minimal_repo_json(r, urls)
    open_count = sum(1 for p in r.pulls.values() if p.state == "open")
    out.update({
        "clone_url": f"{urls.web}/{r.full_name}.git", "git_url": f"{urls.web}/{r.full_name}.git",
        "ssh_url": f"{urls.web}/{r.full_name}.git", "svn_url": f"{urls.web}/{r.full_name}", "mirror_url": None,
        "homepage": None, "language": None, "license": None, "default_branch": r.default_branch,
        "forks": 0, "forks_count": 0, "stargazers_count": 0, "watchers": 0, "watchers_count": 0, "size": 0,
        "open_issues": open_count, "open_issues_count": open_count, "has_issues": True, "has_projects": False,
        "has_wiki": False, "has_pages": False, "has_downloads": False, "archived": False, "disabled": False,
        "pushed_at": r.created_at, "created_at": r.created_at, "updated_at": r.created_at,
        "visibility": "private", "topics": [], "is_template": False,
        "permissions": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
    })
    if full:
        out.update({"subscribers_count": 0, "network_count": 0, "has_discussions": False})
    return out


def label_json(label: Label, r: Repo, urls: Urls) -> dict[str, Any]:
    return {"id": label.id, "node_id": node_id("LA", label.id), "url": f"{urls.api}/repos/{r.full_name}/labels/"
            f"{label.name}", "name": label.name, "color": label.color, "default": False,
            "description": label.description}


def pull_json(p: Pull, r: Repo, urls: Urls, simple: bool = False) -> dict[str, Any]:
    api = f"{urls.api}/repos/{r.full_name}"
    web = f"{urls.web}/{r.full_name}/pull/{p.number}"
    links = {"self": f"{api}/pulls/{p.number}", "html": web, "issue": f"{api}/issues/{p.number}",
             "comments": f"{api}/issues/{p.number}/comments", "review_comments": f"{api}/pulls/{p.number}/comments",
             "review_comment": f"{api}/pulls/comments{{/number}}", "commits": f"{api}/pulls/{p.number}/commits",
             "statuses": f"{api}/statuses/{p.head_sha}"}
    out: dict[str, Any] = {
        "url": links["self"], "id": p.id, "node_id": p.node_id, "html_url": web, "diff_url": f"{web}.diff",
        "patch_url": f"{web}.patch", "issue_url": links["issue"], "commits_url": links["commits"],
        "review_comments_url": links["review_comments"], "review_comment_url": links["review_comment"],
        "comments_url": links["comments"], "statuses_url": links["statuses"], "number": p.number,
        "state": p.state, "locked": False, "title": p.title, "user": user_json(p.user, urls), "body": p.body,
        "labels": [label_json(r.label(n), r, urls) for n in p.labels], "milestone": None,
        "active_lock_reason": None, "created_at": p.created_at, "updated_at": p.updated_at,
        "closed_at": p.closed_at, "merged_at": p.merged_at, "merge_commit_sha": p.merge_commit_sha,
        "assignee": None, "assignees": [], "requested_reviewers": [], "requested_teams": [],
        "head": {"label": f"{r.owner.login}:{p.head}", "ref": p.head, "sha": p.head_sha,
                 "user": user_json(r.owner, urls), "repo": repo_json(r, urls)},
        "base": {"label": f"{r.owner.login}:{p.base}", "ref": p.base, "sha": p.base_sha,
                 "user": user_json(r.owner, urls), "repo": repo_json(r, urls)},
        "_links": {k: {"href": v} for k, v in links.items()}, "author_association": "CONTRIBUTOR",
        "auto_merge": None, "draft": p.draft,
    }
    if simple:
        return out
    mergeable = None if p.state != "open" else gitside.merge_tree(r.path, p.base_sha, p.head_sha) is not None
    out.update({
        "merged": p.merged_at is not None, "mergeable": mergeable, "rebaseable": mergeable,
        "mergeable_state": "draft" if p.draft and mergeable else {None: "unknown", True: "clean",
                                                                   False: "dirty"}[mergeable],
        "merged_by": user_json(p.merged_by, urls) if p.merged_by else None,
        "comments": sum(1 for c in r.comments if c.issue == p.number),
        "review_comments": sum(1 for c in r.review_comments if c.pull == p.number
                               and r.review(c.pull_request_review_id).state != "PENDING"),
        "maintainer_can_modify": False, "commits": 1, "additions": 0, "deletions": 0, "changed_files": 0,
    })
    return out


def comment_json(c: Comment, r: Repo, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/repos/{r.full_name}"
    return {"id": c.id, "node_id": node_id("IC", c.id), "url": f"{api}/issues/comments/{c.id}",
            "html_url": f"{urls.web}/{r.full_name}/pull/{c.issue}#issuecomment-{c.id}", "body": c.body,
            "user": user_json(c.user, urls), "created_at": c.at, "updated_at": c.at,
            "issue_url": f"{api}/issues/{c.issue}", "author_association": "CONTRIBUTOR"}


def status_json(s: Status, r: Repo, urls: Urls, creator: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "url": f"{urls.api}/repos/{r.full_name}/statuses/{s.sha}", "avatar_url": None, "id": s.id,
        "node_id": node_id("SC", s.id), "state": s.state, "description": s.description, "target_url": s.target_url,
        "context": s.context, "created_at": s.at, "updated_at": s.at}
    if creator:
        out["creator"] = user_json(s.creator, urls)
    return out


def combined_status_json(r: Repo, sha: str, urls: Urls) -> dict[str, Any]:
    latest: dict[str, Status] = {}
    for s in r.statuses:
        if s.sha == sha:
            latest[s.context] = s  # the newest status of each context counts
    states = {s.state for s in latest.values()}
    state = ("failure" if states & {"failure", "error"} else
             "pending" if not states or "pending" in states else "success")
    api = f"{urls.api}/repos/{r.full_name}"
    return {"state": state, "sha": sha, "total_count": len(latest),
            "statuses": [status_json(s, r, urls, creator=False) for s in sorted(latest.values(), key=lambda s: s.id)],
            "repository": minimal_repo_json(r, urls), "commit_url": f"{api}/commits/{sha}",
            "url": f"{api}/commits/{sha}/status"}


def review_json(v: Review, r: Repo, urls: Urls) -> dict[str, Any]:
    web = f"{urls.web}/{r.full_name}/pull/{v.pull}#pullrequestreview-{v.id}"
    api = f"{urls.api}/repos/{r.full_name}/pulls/{v.pull}"
    out: dict[str, Any] = {
        "id": v.id, "node_id": node_id("PRR", v.id), "user": user_json(v.user, urls), "body": v.body,
        "state": v.state, "html_url": web, "pull_request_url": api, "commit_id": v.commit_id, "submitted_at": v.at,
        "author_association": "COLLABORATOR", "_links": {"html": {"href": web}, "pull_request": {"href": api}}}
    if v.state == "PENDING":  # not submitted yet
        del out["submitted_at"]
    return out


def review_comment_json(c: ReviewComment, r: Repo, urls: Urls) -> dict[str, Any]:
    """GitHub's `pull-request-review-comment`: a single-line comment on the RIGHT side of the diff."""
    api = f"{urls.api}/repos/{r.full_name}"
    url, web = f"{api}/pulls/comments/{c.id}", f"{urls.web}/{r.full_name}/pull/{c.pull}#discussion_r{c.id}"
    out: dict[str, Any] = {
        "url": url, "pull_request_review_id": c.pull_request_review_id, "id": c.id, "node_id": c.node_id,
        "diff_hunk": c.diff_hunk, "path": c.path, "position": c.position, "original_position": c.position,
        "commit_id": c.commit_id, "original_commit_id": c.original_commit_id, "user": user_json(c.user, urls),
        "body": c.body, "created_at": c.created_at, "updated_at": c.updated_at, "html_url": web,
        "pull_request_url": f"{api}/pulls/{c.pull}", "author_association": "COLLABORATOR",
        "_links": {"self": {"href": url}, "html": {"href": web}, "pull_request": {"href": f"{api}/pulls/{c.pull}"}},
        "start_line": None, "original_start_line": None, "start_side": None, "line": c.line,
        "original_line": c.line, "side": "RIGHT", "subject_type": "line",
        "reactions": {"url": f"{url}/reactions", "total_count": 0, "+1": 0, "-1": 0, "laugh": 0, "confused": 0,
                      "heart": 0, "hooray": 0, "eyes": 0, "rocket": 0},
    }
    if c.in_reply_to_id is not None:  # GitHub leaves the key out of a thread's first comment
        out["in_reply_to_id"] = c.in_reply_to_id
    return out


def issue_event_json(e: IssueEvent, r: Repo, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/repos/{r.full_name}"
    out: dict[str, Any] = {
        "id": e.id, "node_id": node_id("IE", e.id), "url": f"{api}/issues/events/{e.id}",
        "actor": user_json(e.actor, urls), "event": e.event, "commit_id": e.commit_id,
        "commit_url": f"{api}/commits/{e.commit_id}" if e.commit_id else None, "created_at": e.at,
        "performed_via_github_app": None}
    if e.label is not None:
        out["label"] = {"name": e.label, "color": r.label(e.label).color}
    return out


def commit_json(c: gitside.CommitInfo, r: Repo, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/repos/{r.full_name}"
    return {
        "url": f"{api}/commits/{c.sha}", "sha": c.sha, "node_id": node_id("C", int(c.sha[:12], 16)),
        "html_url": f"{urls.web}/{r.full_name}/commit/{c.sha}", "comments_url": f"{api}/commits/{c.sha}/comments",
        "commit": {
            "url": f"{api}/git/commits/{c.sha}", "message": c.message, "comment_count": 0,
            "author": {"name": c.author[0], "email": c.author[1], "date": c.author[2]},
            "committer": {"name": c.committer[0], "email": c.committer[1], "date": c.committer[2]},
            "tree": {"sha": c.tree, "url": f"{api}/git/trees/{c.tree}"},
            "verification": {"verified": False, "reason": "unsigned", "signature": None, "payload": None,
                             "verified_at": None}},
        "author": None, "committer": None,
        "parents": [{"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{urls.web}/{r.full_name}/commit/{p}"}
                    for p in c.parents],
        "stats": {"additions": 0, "deletions": 0, "total": 0}, "files": [],
    }


ROLES = {"admin": "admin", "write": "write", "read": "read"}


def permission_json(r: Repo, u: User, urls: Urls) -> dict[str, Any]:
    """GET …/collaborators/{username}/permission: `permission` is admin, write, read or none."""
    level = r.permissions.get(u.login, "admin" if u.login == r.owner.login else "read")
    flags = {"admin": level == "admin", "maintain": level == "admin", "push": level in ("admin", "write"),
             "triage": level in ("admin", "write"), "pull": True}
    return {"permission": level, "role_name": ROLES[level],
            "user": {**user_json(u, urls), "permissions": flags, "role_name": ROLES[level], "name": None,
                     "email": None}}


def issue_json(p: Pull, r: Repo, urls: Urls) -> dict[str, Any]:
    """A pull request read as an issue (GET …/issues/{n}): with `pull_request` and `closed_by`."""
    api = f"{urls.api}/repos/{r.full_name}"
    web = f"{urls.web}/{r.full_name}/pull/{p.number}"
    return {
        "id": p.id, "node_id": node_id("I", p.id), "url": f"{api}/issues/{p.number}", "repository_url": api,
        "labels_url": f"{api}/issues/{p.number}/labels{{/name}}", "comments_url": f"{api}/issues/{p.number}/comments",
        "events_url": f"{api}/issues/{p.number}/events", "html_url": web, "number": p.number, "state": p.state,
        "title": p.title, "body": p.body, "user": user_json(p.user, urls),
        "labels": [label_json(r.label(n), r, urls) for n in p.labels], "assignee": None, "assignees": [],
        "milestone": None, "locked": False, "active_lock_reason": None,
        "comments": sum(1 for c in r.comments if c.issue == p.number), "created_at": p.created_at,
        "updated_at": p.updated_at, "closed_at": p.closed_at, "author_association": "CONTRIBUTOR",
        "closed_by": user_json(p.closed_by, urls) if p.closed_by else None,
        "pull_request": {"url": f"{api}/pulls/{p.number}", "html_url": web, "diff_url": f"{web}.diff",
                         "patch_url": f"{web}.patch", "merged_at": p.merged_at},
    }


def check_run_json(c: CheckRun, r: Repo, urls: Urls) -> dict[str, Any]:
    api = f"{urls.api}/repos/{r.full_name}"
    done = c.status == "completed"
    return {
        "id": c.id, "node_id": node_id("CR", c.id), "head_sha": c.sha, "name": c.name, "external_id": "",
        "url": f"{api}/check-runs/{c.id}", "html_url": f"{urls.web}/{r.full_name}/runs/{c.id}",
        "details_url": f"{urls.web}/{r.full_name}/actions/runs/{c.suite}", "status": c.status,
        "conclusion": c.conclusion if done else None, "started_at": c.at, "completed_at": c.at if done else None,
        "check_suite": {"id": c.suite}, "app": None, "pull_requests": [],
        "output": {"title": None, "summary": None, "text": None, "annotations_count": 0,
                   "annotations_url": f"{api}/check-runs/{c.id}/annotations"},
    }


# GitHub's defaults for a new merge queue, but one pull request per merged group, as the fake merges them
MERGE_QUEUE_PARAMETERS = {"check_response_timeout_minutes": 60, "grouping_strategy": "ALLGREEN",
                          "max_entries_to_build": 5, "max_entries_to_merge": 1, "merge_method": "MERGE",
                          "min_entries_to_merge": 1, "min_entries_to_merge_wait_minutes": 5}


def rules_json(r: Repo, branch: str) -> list[dict[str, Any]]:
    """GET …/rules/branches/{branch}: each rule in effect there (`repository-rule-detailed`)."""
    out: list[dict[str, Any]] = []
    for ruleset in r.rulesets:
        if ruleset.branch != branch:
            continue
        source = {"ruleset_source_type": "Repository", "ruleset_source": r.full_name, "ruleset_id": ruleset.id}
        out.append({"type": "merge_queue", "parameters": dict(MERGE_QUEUE_PARAMETERS), **source})
        if ruleset.checks:
            out.append({"type": "required_status_checks", "parameters": {
                "do_not_enforce_on_create": False, "strict_required_status_checks_policy": False,
                "required_status_checks": [{"context": c} for c in ruleset.checks]}, **source})
    return out
