"""Pull request reviews and their review comment threads: the REST routes, and the writes the test helpers share.

A review comment belongs to a review, as on GitHub: a thread opened alone, or a reply, is a COMMENTED review
of one comment. A PENDING review (created without an `event`) and its comments are seen by its author alone,
and a person holds at most one pending review per pull request.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tests.fakegithub import gitside
from tests.fakegithub.rest import NOT_FOUND, Reply, Request, error, find_pull, invalid, route
from tests.fakegithub.state import Pull, Repo, Review, ReviewComment, Thread, User, review_comment_json, review_json

if TYPE_CHECKING:
    from tests.fakegithub.server import FakeGitHub

REVIEW_EVENTS = {"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED"}
ONE_PENDING = "User can only have one pending review per pull request"
NOT_IN_DIFF = ("Pull request review thread line must be part of the diff and Pull request review thread diff hunk "
               "can't be blank")
NO_PATH = "Path could not be resolved"
UNSUPPORTED = ("position", "start_line", "start_side")  # the fake takes single-line comments by `line`


def add_review(repo: Repo, pull: Pull, user: User, state: str, body: str) -> Review:
    review = Review(pull.number, user, state, body, repo.refresh(pull).head_sha)
    repo.reviews.append(review)
    return review


def pending_review(repo: Repo, pull: Pull, user: User) -> Review | None:
    return next((v for v in repo.reviews if v.pull == pull.number and v.state == "PENDING"
                 and v.user.login == user.login), None)


def locate(repo: Repo, pull: Pull, commit: str, path: str, line: int) -> tuple[str, int] | str:
    """The diff hunk and position of `line` of `path` in the pull request's diff at `commit`, or why GitHub
    would refuse a comment there."""
    diff = gitside.file_diff(repo.path, pull.base_sha, commit, path)
    if not diff:
        return NO_PATH
    return gitside.hunk_at(diff, line) or NOT_IN_DIFF


def outside_diff(repo: Repo, commit: str, path: str, line: int) -> tuple[str, int]:
    """A plausible hunk for a comment a test placed outside the diff (GitHub's web page lets a person expand it)."""
    text = gitside.line_of(repo.path, commit, path, line)
    return f"@@ -{line},1 +{line},1 @@" + ("" if text is None else f"\n {text}"), line


def add_comment(repo: Repo, pull: Pull, review: Review, path: str, line: int, body: str,
                commit: str | None = None, where: tuple[str, int] | None = None) -> ReviewComment:
    """A comment that opens a thread, in `review`, at the pull request's head unless `commit` says otherwise."""
    sha = commit or repo.refresh(pull).head_sha
    if where is None:
        found = locate(repo, pull, sha, path, line)
        where = found if isinstance(found, tuple) else outside_diff(repo, sha, path, line)
    comment = ReviewComment(pull.number, review.id, None, review.user, body, path, line, sha, sha, *where)
    repo.review_comments.append(comment)
    repo.threads[comment.id] = Thread()
    return comment


def add_reply(repo: Repo, pull: Pull, user: User, comment_id: int, body: str) -> ReviewComment | Reply:
    """A reply in the thread of `comment_id`, made as a COMMENTED review of one comment; GitHub's refusal as a
    Reply. A reply to a reply is attached to the thread's first comment."""
    target = next((c for c in repo.review_comments if c.id == comment_id and c.pull == pull.number
                   and repo.seen_by(c, user)), None)
    if target is None:
        return NOT_FOUND
    if pending_review(repo, pull, user) is not None:
        return _one_pending()
    root = next(c for c in repo.review_comments if c.id == target.thread)
    review = add_review(repo, pull, user, "COMMENTED", "")
    reply = ReviewComment(pull.number, review.id, root.id, user, body, root.path, root.line,
                          repo.refresh(pull).head_sha, root.original_commit_id, root.diff_hunk, root.position)
    repo.review_comments.append(reply)
    return reply


def resolve(repo: Repo, comment_id: int, user: User, resolved: bool) -> Thread | None:
    """Mark the thread of `comment_id` resolved (or not) by `user`; None when there is no such comment."""
    comment = next((c for c in repo.review_comments if c.id == comment_id), None)
    if comment is None:
        return None
    thread = repo.threads[comment.thread]
    thread.resolved, thread.resolved_by = resolved, user if resolved else None
    return thread


def _one_pending() -> Reply:
    """What GitHub answers a comment or reply made outside the pending review its author holds."""
    return invalid("PullRequestReview", "user_id", "custom",
                   "user_id can only have one pending review per pull request")


def _text(body: Any, key: str = "body") -> str | None:
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, str) and value else None


def _unsupported(given: dict[str, Any]) -> Reply | None:
    named = [k for k in UNSUPPORTED if given.get(k) is not None]
    if given.get("side", "RIGHT") != "RIGHT" or given.get("subject_type", "line") != "line":
        named.append("side LEFT or subject_type file")
    if named:
        return error(422, "Unprocessable Entity", errors=[f"the fake takes one-line comments by `line` on the "
                                                          f"RIGHT side, not {', '.join(named)}"])
    return None


# -- reviews -------------------------------------------------------------------------------------------------

@route("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews")
def list_reviews(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    return Reply(200, items=[review_json(v, repo, gh.urls) for v in repo.reviews
                             if v.pull == pull.number and v.seen_by(req.user)])


def _review_comments(repo: Repo, pull: Pull, given: Any) -> list[tuple[str, int, str, tuple[str, int]]] | Reply:
    """The `comments` of a new review, each placed in the diff; GitHub's 422 when one cannot be."""
    if given is None:
        return []
    if not isinstance(given, list) or not all(isinstance(c, dict) for c in given):
        return invalid("PullRequestReview", "comments", "invalid")
    placed = []
    for c in given:
        path, text, line = _text(c, "path"), _text(c), c.get("line")
        if path is None or text is None or not isinstance(line, int) or isinstance(line, bool) or line < 1:
            return invalid("PullRequestReview", "comments", "invalid", "each comment needs path, line and body")
        refused = _unsupported(c)
        if refused is not None:
            return refused
        where = locate(repo, pull, pull.head_sha, path, line)
        if isinstance(where, str):
            return error(422, "Unprocessable Entity", errors=[where])
        placed.append((path, line, text, where))
    return placed


@route("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews")
def create_review(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    body = req.body if isinstance(req.body, dict) else {}
    event = body.get("event")
    if event is not None and event not in REVIEW_EVENTS:
        return error(422, "Unprocessable Entity", errors=["the fake takes APPROVE, REQUEST_CHANGES, COMMENT, or no "
                                                          "event for a pending review"])
    if pull.state != "open":
        return error(422, "Unprocessable Entity", errors=["Can not review a closed pull request"])
    if event in ("APPROVE", "REQUEST_CHANGES") and pull.user.login == req.user.login:
        what = "approve" if event == "APPROVE" else "request changes on"
        return error(422, "Unprocessable Entity", errors=[f"Review Can not {what} your own pull request"])
    if pending_review(repo, pull, req.user) is not None:
        return error(422, "Unprocessable Entity", errors=[ONE_PENDING])
    placed = _review_comments(repo, pull, body.get("comments"))
    if isinstance(placed, Reply):
        return placed
    review = add_review(repo, pull, req.user, REVIEW_EVENTS[event] if event else "PENDING", _text(body) or "")
    for path, line, text, where in placed:
        add_comment(repo, pull, review, path, line, text, where=where)
    return Reply(200, review_json(review, repo, gh.urls))


@route("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}")
def get_review(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    hit = [v for v in repo.reviews if v.pull == pull.number and str(v.id) == m["review_id"] and v.seen_by(req.user)]
    return Reply(200, review_json(hit[0], repo, gh.urls)) if hit else NOT_FOUND


# -- review comments -----------------------------------------------------------------------------------------

@route("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/comments")
def list_review_comments(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    """Oldest first; `sort` (created, updated) with `direction` (desc unless asc) and `since` as GitHub takes."""
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    sort = req.query.get("sort")
    if sort not in (None, "created", "updated"):
        return invalid("PullRequestReviewComment", "sort", "invalid")
    since = req.query.get("since", "")
    shown = [c for c in repo.review_comments
             if c.pull == pull.number and repo.seen_by(c, req.user) and c.updated_at >= since]
    if sort is not None:
        shown.sort(key=lambda c: (c.created_at if sort == "created" else c.updated_at, c.id),
                   reverse=req.query.get("direction", "desc") != "asc")
    return Reply(200, items=[review_comment_json(c, repo, gh.urls) for c in shown])


@route("GET", "/repos/{owner}/{repo}/pulls/comments/{comment_id}")
def get_review_comment(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    """One review comment by id (PyGithub reads it to complete a comment whose `in_reply_to_id` is absent)."""
    repo = gh.repos.get((m["owner"].lower(), m["repo"].lower()))
    hit = [c for c in repo.review_comments if str(c.id) == m["comment_id"]] if repo else []
    if repo is None or not hit or not repo.seen_by(hit[0], req.user):
        return NOT_FOUND
    return Reply(200, review_comment_json(hit[0], repo, gh.urls))


def _created(gh: FakeGitHub, repo: Repo, made: ReviewComment | Reply) -> Reply:
    return made if isinstance(made, Reply) else Reply(201, review_comment_json(made, repo, gh.urls))


@route("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies")
def create_reply(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    found = find_pull(gh, m, "pull_number")
    if found is None or not m["comment_id"].isdigit():
        return NOT_FOUND
    repo, pull = found
    text = _text(req.body)
    if text is None:
        return invalid("PullRequestReviewComment", "body", "missing_field")
    return _created(gh, repo, add_reply(repo, pull, req.user, int(m["comment_id"]), text))


@route("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments")
def create_review_comment(gh: FakeGitHub, req: Request, m: dict[str, str]) -> Reply:
    """One comment opening a thread (or, with `in_reply_to`, a reply), made as a COMMENTED review of it."""
    found = find_pull(gh, m, "pull_number")
    if found is None:
        return NOT_FOUND
    repo, pull = found
    body: dict[str, Any] = req.body if isinstance(req.body, dict) else {}
    text = _text(body)
    if text is None:
        return invalid("PullRequestReviewComment", "body", "missing_field")
    if isinstance(body.get("in_reply_to"), int):
        return _created(gh, repo, add_reply(repo, pull, req.user, body["in_reply_to"], text))
    path, given, line = _text(body, "path"), _text(body, "commit_id"), body.get("line")
    for name, value in (("commit_id", given), ("path", path)):
        if value is None:
            return invalid("PullRequestReviewComment", name, "missing_field")
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        return invalid("PullRequestReviewComment", "line", "missing_field")
    refused = _unsupported(body)
    if refused is not None:
        return refused
    sha = gitside.rev_parse(repo.path, str(given)) if re.fullmatch(r"[0-9a-f]{7,40}", str(given)) else None
    if sha is None or not gitside.is_ancestor(repo.path, sha, pull.head_sha):
        return invalid("PullRequestReviewComment", "commit_id", "custom", "commit_id is not part of the pull request")
    if pending_review(repo, pull, req.user) is not None:
        return _one_pending()
    where = locate(repo, pull, sha, str(path), line)
    if isinstance(where, str):
        field = "path" if where == NO_PATH else "line"
        return invalid("PullRequestReviewComment", f"pull_request_review_thread.{field}", "custom", where)
    review = add_review(repo, pull, req.user, "COMMENTED", "")
    comment = add_comment(repo, pull, review, str(path), line, text, commit=sha, where=where)
    return Reply(201, review_comment_json(comment, repo, gh.urls))
