"""Reviews as draft pull requests on GitHub, through PyGithub (imported only when the forge is GitHub).

Claims, heartbeats and journals stay git refs pushed over HTTPS (no REST quota); this port
makes REST and GraphQL calls on state changes only. Every write a desk makes here is fenced
by the caller: its intent is journaled in the same atomic push that renews the claim, so a
desk that lost its claim never reaches the API (`work.py`). Outcomes the network leaves
unknown are settled by reading back: a pull request is found by its head branch, so opening
one twice, or after a crash between the request and its answer, never makes two.
"""

from __future__ import annotations

import builtins
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from assay.errors import ForgeError, UsageError
from assay.forge.base import IllegalReviewChange, InvalidReview, MergeConflict, Review
from assay.git import RefUpdate
from assay.records import ReviewComment, ReviewRecord, validate_brief_id

if TYPE_CHECKING:
    from github.PullRequest import PullRequest
    from github.Repository import Repository

T = TypeVar("T")
Echo = Callable[[str], None]
GITHUB_API = "https://api.github.com"
BRANCH_PREFIX = "assay/"
STATE_LABELS = ("assay:draft", "assay:ready", "assay:merged", "assay:closed")  # no "/": a label is a path part
MAX_WAIT_S = 900.0  # the longest a rate limit is waited out before the command gives up
TRIES = 4
_SLUG = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class GitHubTarget:
    """Which repository, through which API."""

    repo: str  # owner/name
    api: str = GITHUB_API


def target_of(url: str, api: str | None = None) -> GitHubTarget | None:
    """The GitHub repository a forge URL names: github.com, or any host when an API URL is given."""
    m = re.fullmatch(r"(?:https?://(?:[^@/]+@)?(?P<host>[^/]+)/|git@(?P<ssh>[^:]+):)(?P<slug>[^/]+/[^/]+?)(?:\.git)?/?",
                     url.strip())
    if m is None:
        return None
    host = m["host"] or m["ssh"]
    if api:
        return GitHubTarget(m["slug"], api.rstrip("/"))
    if host in ("github.com", "www.github.com"):
        return GitHubTarget(m["slug"], GITHUB_API)
    return None


class GitHubReviews:
    """One pull request per brief, from `assay/<brief>` into main. Receives its target, token and clock."""

    def __init__(self, target: GitHubTarget, token: str, echo: Echo | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        from github import Auth, Github

        if not _SLUG.fullmatch(target.repo):
            raise UsageError(f"{target.repo!r} is not a GitHub repository (OWNER/NAME)")
        self.target = target
        self.owner = target.repo.split("/")[0]
        self.echo = echo or (lambda text: print(text, file=sys.stderr))
        self.clock, self.sleep = clock, sleep
        # retries are ours (a visible wait on rate limits, a read-back after an unknown outcome);
        # GitHub asks clients to space out writes, which a fleet does on its own
        writes = 1.0 if target.api == GITHUB_API else None
        self._gh = Github(base_url=target.api, auth=Auth.Token(token), retry=None, per_page=100, timeout=30,
                          seconds_between_requests=None, seconds_between_writes=writes)
        self._repo: Repository | None = None
        self.calls: Counter[str] = Counter()  # REST and GraphQL calls, by operation

    # -- the calls, counted and retried ---------------------------------------------------------

    def _call(self, op: str, fn: Callable[[], T], write: bool = False,
              read_back: Callable[[], T | None] | None = None) -> T:
        """Call GitHub: rate limits waited out (said so), a 5xx retried, and an unknown write outcome
        (a dropped connection, a 5xx, an "already exists") settled by `read_back`, never by guessing."""
        from github import GithubException
        from requests.exceptions import ConnectionError as Dropped
        from requests.exceptions import Timeout

        last = ""
        for attempt in range(TRIES):
            self.calls[op] += 1
            try:
                return fn()
            except GithubException as exc:
                wait = _rate_wait(exc, self.clock())
                if wait is not None:
                    if wait > MAX_WAIT_S:
                        raise ForgeError(f"GitHub's rate limit for {op} resets in {wait:.0f}s",
                                         hint="run again later; `assay` spends REST calls only on state "
                                              "changes") from None
                    self.echo(f"GitHub rate limit on {op}: waiting {wait:.0f}s as GitHub asks")
                    self.sleep(wait)
                    continue
                unknown = exc.status >= 500 or (exc.status == 422 and _already_exists(exc))
                if unknown and read_back is not None:
                    found = read_back()
                    if found is not None:
                        return found
                if exc.status < 500 and not (exc.status == 422 and _already_exists(exc)):
                    raise _forge_error(op, exc) from None
                last = f"HTTP {exc.status}"
            except (Dropped, Timeout) as exc:
                if write and read_back is not None:
                    found = read_back()
                    if found is not None:
                        return found
                last = type(exc).__name__
            self.sleep(min(0.2 * 2 ** attempt, 5.0))
        raise ForgeError(f"GitHub did not answer {op} after {TRIES} tries ({last}); nothing is assumed written",
                         hint="run the command again: it reads back before writing")

    def repo(self) -> Repository:
        if self._repo is None:
            self._repo = self._call("repo", lambda: self._gh.get_repo(self.target.repo))
        return self._repo

    # -- reading --------------------------------------------------------------------------------

    def _find(self, brief: str) -> PullRequest | None:
        """The newest pull request from `assay/<brief>` (open first), or None."""
        head = f"{self.owner}:{BRANCH_PREFIX}{brief}"
        pulls = self._call("find", lambda: list(self.repo().get_pulls(state="all", head=head)))
        pulls = [p for p in pulls if p.head.ref == f"{BRANCH_PREFIX}{brief}"]
        if not pulls:
            return None
        return sorted(pulls, key=lambda p: (p.state != "closed" or p.merged, p.number))[-1]

    def get(self, brief: str) -> Review | None:
        pull = self._find(validate_brief_id(brief))
        return self._review(brief, pull) if pull is not None else None

    def kept(self, brief: str) -> Review | None:
        return self.get(brief)  # pull requests outlive retirement

    def list(self) -> builtins.list[Review | InvalidReview]:
        pulls = self._call("list", lambda: list(self.repo().get_pulls(state="all")))
        out: builtins.list[Review | InvalidReview] = []
        seen: set[str] = set()
        for pull in sorted(pulls, key=lambda p: -p.number):
            brief = pull.head.ref.removeprefix(BRANCH_PREFIX)
            if not pull.head.ref.startswith(BRANCH_PREFIX) or brief in seen:
                continue
            seen.add(brief)
            out.append(self._review(brief, pull))
        return sorted(out, key=lambda r: r.ref if isinstance(r, InvalidReview) else r.brief)

    def _review(self, brief: str, pull: PullRequest) -> Review:
        reviews = self._call("reviews", lambda: list(pull.get_reviews()))
        comments = self._call("comments", lambda: list(pull.get_issue_comments()))
        state = ("merged" if pull.merged else "closed") if pull.state == "closed" else \
            ("draft" if pull.draft else "ready")
        approvals = tuple(sorted({r.user.login for r in reviews if r.state == "APPROVED" and r.user}))
        record = ReviewRecord(
            brief=brief, branch=pull.head.ref, title=pull.title, state=state, opened_at=_iso(pull.created_at),
            at=_iso(pull.updated_at), base=pull.base.ref, head=pull.head.sha,
            merged_commit=(pull.merge_commit_sha or "") if pull.merged else "", approvals=approvals,
            comments=tuple(ReviewComment(by=c.user.login if c.user else "", at=_iso(c.created_at), text=c.body or "")
                           for c in comments))
        return Review(record, f"pull/{pull.number}")

    # -- changes --------------------------------------------------------------------------------

    def open(self, brief: str, branch: str, title: str, head: str) -> Review:
        """A draft pull request from `branch`; the one there already if it is not closed."""
        validate_brief_id(brief)
        if branch != f"{BRANCH_PREFIX}{brief}":
            raise UsageError(f"invalid branch name {branch!r}", hint=f"desks use {BRANCH_PREFIX}{brief}")
        existing = self._find(brief)
        if existing is not None and existing.state != "closed":
            return self._review(brief, existing)

        def read_back() -> PullRequest | None:
            found = self._find(brief)
            return found if found is not None and found.state != "closed" else None

        pull = self._call("open", lambda: self.repo().create_pull(
            title=title, body=f"Assay-Brief: {brief}\n", base="main", head=branch, draft=True),
            write=True, read_back=read_back)
        return self._review(brief, pull)

    def mark_ready(self, brief: str, head: str) -> Review:
        """Mark the pull request ready at `head` (ready already: unchanged)."""
        pull = self._require(brief, "mark_ready")
        if pull.state == "closed":
            raise IllegalReviewChange(brief, "mark-ready", "merged" if pull.merged else "closed")
        if head and pull.head.sha != head:
            raise IllegalReviewChange(brief, "mark-ready", "draft" if pull.draft else "ready",
                                      f"its head is {pull.head.sha[:10]}, not {head[:10]}")
        if pull.draft:
            self._call("ready", lambda: pull.mark_ready_for_review(), write=True)
        return self._review(brief, self._require(brief, "mark_ready"))

    def ready_update(self, brief: str, head: str) -> RefUpdate | None:
        raise UsageError("a pull request is marked ready through the API, not by a ref update")

    @property
    def refs_backed(self) -> bool:
        return False

    def comment(self, brief: str, by: str, text: str) -> Review:
        if not text.strip():
            raise UsageError("a comment needs text")
        pull = self._require(brief, "comment")
        self._call("comment", lambda: pull.create_issue_comment(f"{text}\n\n— {by}"), write=True)
        return self._review(brief, pull)

    def approve(self, brief: str, by: str) -> Review:
        pull = self._require(brief, "approve")
        if pull.state == "closed":
            raise IllegalReviewChange(brief, "approve", "merged" if pull.merged else "closed")
        self._call("approve", lambda: pull.create_review(body=f"Approved by {by}", event="APPROVE"), write=True)
        return self._review(brief, pull)

    def merge(self, brief: str, by: str) -> Review:
        """Merge as a person does (a merge commit); GitHub's 405 or 409 is a conflict, nothing written."""
        from github import GithubException

        pull = self._require(brief, "merge")
        if pull.merged:
            raise IllegalReviewChange(brief, "merge", "merged", "it is already on main")
        if pull.state == "closed" or pull.draft:
            raise IllegalReviewChange(brief, "merge", "closed" if pull.state == "closed" else "draft")

        def merge() -> Any:
            try:
                return pull.merge(merge_method="merge", commit_title=f"Merge {pull.head.ref}: {pull.title}",
                                  commit_message=f"Assay-Brief: {brief}")
            except GithubException as exc:
                if exc.status in (405, 409):
                    raise MergeConflict(brief, pull.head.ref, pull.base.ref) from None
                raise

        def merged() -> Any:
            now = self._require(brief, "merge")
            return now if now.merged else None

        self._call("merge", merge, write=True, read_back=merged)
        return self._review(brief, self._require(brief, "merge"))

    def close(self, brief: str, by: str, reason: str) -> Review:
        pull = self._require(brief, "close")
        if pull.state == "closed":
            raise IllegalReviewChange(brief, "close", "merged" if pull.merged else "closed")
        if reason.strip():
            self._call("comment", lambda: pull.create_issue_comment(f"Closed by {by}: {reason}"), write=True)
        self._call("close", lambda: pull.edit(state="closed"), write=True)
        return self._review(brief, self._require(brief, "close"))

    def label(self, brief: str, state: str, desk: str) -> None:
        """The state label (`assay:<state>`, the others removed) and the desk's (`desk:<name>`)."""
        pull = self._require(brief, "label")
        have = {lb.name for lb in self._call("labels", lambda: list(pull.get_labels()))}
        for stale in sorted(have & set(STATE_LABELS) - {f"assay:{state}"}):
            self._call("label", lambda stale=stale: pull.remove_from_labels(stale), write=True)  # type: ignore[misc]
        wanted = [name for name in (f"assay:{state}", f"desk:{desk}") if name not in have]
        if wanted:
            self._call("label", lambda: pull.add_to_labels(*wanted), write=True)

    def post_statuses(self, brief: str, head: str, rows: builtins.list[dict[str, Any]]) -> None:
        """One commit status per verify row (`assay/verify/<row>`) on `head`, with its evidence."""
        commit = self._call("commit", lambda: self.repo().get_commit(head))
        for row in rows:
            state = "success" if row["passed"] else "failure"
            summary = (f"exit {row['exit_code']} (expects {row['expect_exit']}) in {row['duration_ms']} ms; "
                       f"output sha256 {row['output_sha256'][:12]}")
            self._call("status", lambda row=row, state=state, summary=summary: commit.create_status(  # type: ignore[misc]
                state=state, description=summary[:140], context=f"assay/verify/{row['row']}"), write=True)

    def _require(self, brief: str, action: str) -> PullRequest:
        pull = self._find(validate_brief_id(brief))
        if pull is None:
            raise IllegalReviewChange(brief, action.replace("_", "-"), "absent", "no pull request from "
                                      f"{BRANCH_PREFIX}{brief}")
        return pull


def _rate_wait(exc: Any, now: float) -> float | None:
    """Seconds GitHub asks us to wait (403/429 with Retry-After, or a spent primary limit); None otherwise."""
    if exc.status not in (403, 429):
        return None
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    if "retry-after" in headers:
        try:
            return max(0.0, float(headers["retry-after"]))
        except ValueError:
            return 60.0
    if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
        try:
            return max(0.0, float(headers["x-ratelimit-reset"]) - now) + 1.0
        except ValueError:
            return 60.0
    message = str((exc.data or {}).get("message", "")) if isinstance(exc.data, dict) else ""
    if exc.status == 429 or "rate limit" in message.lower():
        return 60.0
    return None


def _already_exists(exc: Any) -> bool:
    data = exc.data if isinstance(exc.data, dict) else {}
    text = str(data.get("message", "")) + " " + " ".join(str(e.get("message", "")) for e in data.get("errors", [])
                                                          if isinstance(e, dict))
    return "already exists" in text.lower()


def _forge_error(op: str, exc: Any) -> ForgeError:
    data = exc.data if isinstance(exc.data, dict) else {}
    return ForgeError(f"GitHub refused {op}: HTTP {exc.status} {data.get('message', '')}".strip(),
                      hint="check the token's permissions (contents, pull requests, statuses: write)")


def _iso(when: datetime | None) -> str:
    if when is None:
        return ""
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
