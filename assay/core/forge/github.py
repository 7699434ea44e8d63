"""Reviews as draft pull requests on GitHub, through PyGithub (imported only when the forge is GitHub).

Claims, heartbeats and journals stay git refs pushed over HTTPS (no REST quota); this port
makes REST and GraphQL calls on state changes only, and repeats its reads conditionally
(`If-None-Match`), so reading an unchanged pull request again costs no quota. Every write a desk makes here is fenced
by the caller: its intent is journaled in the same atomic push that renews the claim, so a
desk that lost its claim never reaches the API (`work.py`). Outcomes the network leaves
unknown are settled by reading back: a pull request is found by its head branch, so opening
one twice, or after a crash between the request and its answer, never makes two.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from assay.core import stops
from assay.core.forge.base import (
    ANSWER,
    VERIFY_CONTEXT,
    Checks,
    InvalidReview,
    Review,
    Said,
    Signal,
    Thread,
    command_of,
    commit_id,
    person_name,
    review_branch,
    review_title,
    thread_signals,
    verify_status,
)
from assay.core.forge.budget import ForgeBudget
from assay.core.forge.etags import ETagStore, Kept, token_identity
from assay.core.git import OBJECT_ID, RefUpdate
from assay.core.records import (
    WORK_BRANCH_PREFIX,
    ReviewComment,
    ReviewRecord,
    brief_id_problem,
    validate_brief_id,
)
from assay.core.records.recordtype import dataclass
from assay.errors import (
    AssayError,
    ForgeDenied,
    ForgeError,
    IllegalReviewChange,
    MergeConflict,
    NoReview,
    Throttled,
    UsageError,
)

if TYPE_CHECKING:
    from github.PullRequest import PullRequest
    from github.Repository import Repository

T = TypeVar("T")
Echo = Callable[[str], None]
GITHUB_API = "https://api.github.com"
STATE_LABELS = ("assay:draft", "assay:ready", "assay:merged", "assay:closed")  # no "/": a label is a path part
MAX_WAIT_S = 900.0  # the longest a rate limit is waited out before the command gives up
KEEPALIVE_EVERY_S = 30.0  # a desk waiting out a rate limit renews its claim this often at least
TRIES = 4
_SLUG = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_STATUS_EPOCH = re.compile(r"; epoch (\d+)$")  # how a verify status names the epoch that posted it
MAX_LISTED = 10_000  # items of one list read before the rest is left unread
ENQUEUE_MUTATION = """mutation($id: ID!, $head: GitObjectID) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) {
    mergeQueueEntry { id position state }
  }
}"""
QUEUED_QUERY = """query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) { isInMergeQueue merged headRefOid }
  }
}"""
THREADS_QUERY = """query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { isResolved comments(first: 1) { nodes { databaseId } } }
      }
    }
  }
}"""


@dataclass(frozen=True)
class GitHubTarget:
    """Which repository, through which API."""

    repo: str  # owner/name
    api: str = GITHUB_API
    web: str = "https://github.com"  # the forge's own host, where its pull requests are seen


def target_of(url: str, api: str | None = None) -> GitHubTarget | None:
    """The GitHub repository a forge URL names: github.com, or any host when an API URL is given."""
    m = re.fullmatch(r"(?:(?P<scheme>https?)://(?:[^@/]+@)?(?P<host>[^/]+)/|git@(?P<ssh>[^:]+):)"
                     r"(?P<slug>[^/]+/[^/]+?)(?:\.git)?/?", url.strip())
    if m is None:
        return None
    host = m["host"] or m["ssh"]
    if api:
        return GitHubTarget(m["slug"], api.rstrip("/"), f"{m['scheme'] or 'https'}://{host}")
    if host in ("github.com", "www.github.com"):
        return GitHubTarget(m["slug"], GITHUB_API)
    return None


class GitHubReviews:
    """One pull request per brief, from `assay/<brief>` into main. Receives its target, token and clock.

    Reads it repeats (a pull request by head branch, its reviews and comments) are conditional:
    sent with the ETag of the last answer (kept in `cache_dir` across processes), so an
    unchanged one is a 304 and costs no quota. `calls` counts requests by operation,
    `not_modified` the 304s among them.
    """

    def __init__(self, target: GitHubTarget, token: str, echo: Echo | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = stops.sleep,
                 cache_dir: Path | None = None, budget: ForgeBudget | None = None) -> None:
        from github import Auth, Github

        if not _SLUG.fullmatch(target.repo):
            raise UsageError(f"{target.repo!r} is not a GitHub repository (OWNER/NAME)")
        self.target = target
        self.owner = target.repo.split("/")[0]
        self.echo = echo or (lambda text: print(text, file=sys.stderr))
        self.clock, self.sleep = clock, sleep
        # retries are ours (a visible wait on rate limits, a read-back after an unknown outcome);
        # GitHub asks clients to space out writes, which a fleet does on its own. Lazy: PyGithub
        # objects are built from answers read here and never fetch on their own.
        writes = 1.0 if target.api == GITHUB_API else None
        self._gh = Github(base_url=target.api, auth=Auth.Token(token), retry=None, per_page=100, timeout=30,
                          seconds_between_requests=None, seconds_between_writes=writes, lazy=True)
        self._path = f"/repos/{target.repo}"
        self.etags = ETagStore(cache_dir, token_identity(token))
        self.calls: Counter[str] = Counter()  # REST and GraphQL requests, by operation
        self._numbers: dict[str, int] = {}  # brief -> the pull request this object opened or found for it
        self._writers: dict[str, bool] = {}  # login -> may write to the repository
        self._keepalive: Callable[[], None] | None = None
        self.budget = budget  # the fleet's content-creating requests for this token, shared through the forge
        self._max_wait_s = MAX_WAIT_S
        self._keepalive_every_s = KEEPALIVE_EVERY_S
        self._limited_until = 0.0  # GitHub's limit asked for no call before this (by `clock`): none is made
        self.not_modified: Counter[str] = Counter()  # the 304s among them (no quota)

    # -- the calls, counted and retried ---------------------------------------------------------

    def _call(self, op: str, fn: Callable[[], T], write: bool = False,
              read_back: Callable[[], T | None] | None = None) -> T:
        """Call GitHub: rate limits waited out (said so), a 5xx retried, and an unknown write outcome
        (a dropped connection, a 5xx, an "already exists") settled by `read_back`, never by guessing."""
        from github import GithubException
        from requests.exceptions import ConnectionError as Dropped
        from requests.exceptions import Timeout

        last, waited, limited = "", 0.0, 0
        for attempt in range(TRIES):
            left = self._limited_until - self.clock()
            if left > 0:  # a wait GitHub asked for and a call of this port gave up: asking again only bans longer
                raise Throttled(f"GitHub's rate limit stops {doing(op)}: it resets in {left:.0f}s",
                                hint="run again later; `assay` spends API calls only on state changes", wait_s=left)
            if write:
                waited = self._spend(op, waited)
            self.calls[op] += 1
            try:
                return fn()
            except GithubException as exc:
                wait = _rate_wait(exc, self.clock(), limited)
                if wait is not None:
                    limited += 1
                    if waited + wait > self._max_wait_s:  # one bound for all the waits of one call
                        self._limited_until = self.clock() + wait
                        raise Throttled(f"GitHub's rate limit stops {doing(op)}: it resets in {wait:.0f}s"
                                        + (f", after {waited:.0f}s of waiting" if waited else ""),
                                        hint="run again later; `assay` spends API calls only on state changes",
                                        wait_s=wait) from None
                    self.echo(f"GitHub's {_limit_kind(exc)} stops {doing(op)}: waiting {wait:.0f}s as GitHub asks")
                    waited += wait
                    self._wait(wait)
                    last = f"rate limited, waited {wait:.0f}s"
                    if write and read_back is not None:  # never a blind repeat: the write may have landed
                        found = read_back()
                        if found is not None:
                            return found
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
        raise ForgeError(f"GitHub did not let {doing(op)} through in {TRIES} tries ({last}); nothing is assumed "
                         "written", hint="run the command again: it reads back before writing")

    def _spend(self, op: str, waited: float) -> float:
        """Take one content-creating request from the fleet's budget for this token (`budget.py`), waiting (said
        so, the claim renewed meanwhile) while the fleet has spent it; the call's waits so far, and these."""
        while self.budget is not None:
            wait = self.budget.wait_s()
            if wait <= 0:
                break
            if waited + wait > self._max_wait_s:
                raise Throttled(f"the fleet's GitHub write budget stops {doing(op)}: room again in {wait:.0f}s",
                                hint="run again later, or spread the desks over more tokens (GitHub App "
                                     "installations): GitHub limits each to 80 writes a minute, 500 an hour",
                                wait_s=wait)
            self.echo(f"the fleet's GitHub write budget stops {doing(op)}: waiting {wait:.0f}s")
            waited += wait
            self._wait(wait)
        return waited

    def hold(self, keepalive: Callable[[], None], max_wait_s: float,
             every_s: float = KEEPALIVE_EVERY_S) -> contextlib.AbstractContextManager[object]:
        was = (self._keepalive, self._max_wait_s, self._keepalive_every_s)
        self._keepalive, self._max_wait_s = keepalive, min(MAX_WAIT_S, max_wait_s)
        self._keepalive_every_s = max(0.5, min(every_s, KEEPALIVE_EVERY_S))

        def again() -> None:
            self._keepalive, self._max_wait_s, self._keepalive_every_s = was

        held = contextlib.ExitStack()
        held.callback(again)
        return held

    def _wait(self, seconds: float) -> None:
        """Wait out a rate limit in slices, renewing the claim between them and once more at the end: a desk
        whose claim was lost meanwhile stops here (the keepalive raises), before its write."""
        left = seconds
        while left > 0:
            if self._keepalive is not None:
                self._keepalive()
            self.sleep(min(left, self._keepalive_every_s))
            left -= self._keepalive_every_s
        if self._keepalive is not None:
            self._keepalive()

    def _get(self, op: str, path: str, params: dict[str, str | int] | None = None) -> Any:
        """GET `path` conditionally (see the class); a list's pages are read and joined."""
        url, query = path, params
        pages: builtins.list[Any] = []
        while True:
            key = url if "://" in url else self.target.api + url + ("?" + urlencode(sorted(query.items()))
                                                                    if query else "")
            body, following = self._get_page(op, key, url, query)
            if not isinstance(body, builtins.list):
                return body
            pages += body
            if following is None or len(pages) > MAX_LISTED:
                return pages
            url, query = following, None

    def _get_page(self, op: str, key: str, url: str, query: dict[str, str | int] | None) -> tuple[Any, str | None]:
        kept = self.etags.get(key)
        headers = {"If-None-Match": kept.etag} if kept is not None else {}
        requester = self._gh.requester

        def fetch() -> tuple[int, dict[str, Any], Any]:
            status, got, text = requester.requestJson("GET", url, dict(query) if query else None, headers)
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = {"message": str(text)[:200]}
            if status >= 400:
                raise requester.createException(status, got, data if isinstance(data, dict) else {})
            return status, {k.lower(): v for k, v in got.items()}, data

        status, got, data = self._call(op, fetch)
        if status == 304:
            if kept is None:
                raise ForgeError(f"GitHub answered {op} with 304 Not Modified to a plain request")
            self.not_modified[op] += 1
            return kept.body, kept.next
        following = _next_page(str(got.get("link", "")))
        etag = got.get("etag")
        if isinstance(etag, str) and etag:
            self.etags.put(key, Kept(etag, data, following))
        return data, following

    def repo(self) -> Repository:
        return self._gh.get_repo(self.target.repo)  # lazy: no request

    def _obj(self, pull: dict[str, Any]) -> PullRequest:
        """A PyGithub pull request made from an answer already read (no request), for its writes."""
        from github.PullRequest import PullRequest

        return self._gh.create_from_raw_data(PullRequest, pull)

    # -- reading --------------------------------------------------------------------------------

    def _pulls(self, brief: str) -> builtins.list[dict[str, Any]]:
        """Every pull request from `assay/<brief>`, in any state (one list read)."""
        branch = f"{WORK_BRANCH_PREFIX}{brief}"
        pulls = self._get("find", f"{self._path}/pulls", {"state": "all", "head": f"{self.owner}:{branch}",
                                                           "per_page": 100})
        return [p for p in pulls or [] if isinstance(p, dict) and _at(p, "head", "ref") == branch]

    def _find(self, brief: str) -> dict[str, Any] | None:
        """The newest pull request from `assay/<brief>` (open first), or None.

        Lists are served by replicas that may lag a write: a pull request this object opened or saw, missing
        from the list, is read by its number (which is consistent) rather than taken for gone."""
        return self._find_all(brief)[0]

    def _find_all(self, brief: str) -> tuple[dict[str, Any] | None, builtins.list[dict[str, Any]]]:
        """The newest pull request from `assay/<brief>` (see `_find`) and every one (one list read)."""
        pulls = self._pulls(brief)
        known = self._numbers.get(brief)
        if known is not None and not any(int(p.get("number") or 0) == known for p in pulls):
            pull = self._get("find", f"{self._path}/pulls/{known}")
            if isinstance(pull, dict) and _at(pull, "head", "ref") == f"{WORK_BRANCH_PREFIX}{brief}":
                pulls.append(pull)
        if not pulls:
            return None, pulls
        newest: dict[str, Any] = max(pulls, key=lambda p: (p.get("state") != "closed" or _merged(p),
                                                           int(p.get("number") or 0)))
        self._numbers[brief] = int(newest.get("number") or 0)
        return newest, pulls

    def get(self, brief: str) -> Review | None:
        pull = self._find(validate_brief_id(brief))
        return self._review(brief, pull) if pull is not None else None

    def peek(self, brief: str) -> Review | None:
        """State and head without comments and approvals: one conditional read."""
        pull = self._find(validate_brief_id(brief))
        return self._review(brief, pull, detail=False) if pull is not None else None

    def peek_many(self, briefs: builtins.list[str], tips: Mapping[str, str] | None = None) -> dict[str, Review]:
        """The open pull requests in one list (a page per 100), then one read for each brief not among them
        (merged, closed or never opened). Every answer about a pull request embeds its repository, whose
        counts change whenever any pull request opens or closes; so one list, not a read per brief, is what
        a change anywhere costs."""
        wanted = {validate_brief_id(b) for b in briefs}
        out: dict[str, Review] = {}
        if not wanted:
            return out
        pulls = self._get("open", f"{self._path}/pulls", {"state": "open", "per_page": 100})
        for pull in sorted((p for p in pulls or [] if isinstance(p, dict)), key=lambda p: -int(p.get("number") or 0)):
            ref = str(_at(pull, "head", "ref") or "")
            brief = ref.removeprefix(WORK_BRANCH_PREFIX)
            if ref.startswith(WORK_BRANCH_PREFIX) and brief in wanted and brief not in out:
                out[brief] = self._review(brief, pull, detail=False)
        for brief in sorted(wanted - set(out)):
            found = self.peek(brief)
            if found is not None:
                out[brief] = found
        return out

    def kept(self, brief: str) -> Review | None:
        return self.get(brief)  # pull requests outlive retirement

    def list(self, tips: Mapping[str, str] | None = None) -> builtins.list[Review | InvalidReview]:
        pulls = self._get("list", f"{self._path}/pulls", {"state": "all", "per_page": 100})
        out: builtins.list[Review | InvalidReview] = []
        seen: set[str] = set()
        for pull in sorted((p for p in pulls or [] if isinstance(p, dict)), key=lambda p: -int(p.get("number") or 0)):
            ref = str(_at(pull, "head", "ref") or "")
            brief = ref.removeprefix(WORK_BRANCH_PREFIX)
            if not ref.startswith(WORK_BRANCH_PREFIX) or brief in seen:
                continue
            seen.add(brief)
            out.append(self._review(brief, pull))
        return sorted(out, key=lambda r: r.ref if isinstance(r, InvalidReview) else r.brief)

    def _review(self, brief: str, pull: dict[str, Any], detail: bool = True) -> Review:
        number = int(pull.get("number") or 0)
        reviews = self._get("reviews", f"{self._path}/pulls/{number}/reviews", {"per_page": 100}) if detail else []
        comments = self._get("comments", f"{self._path}/issues/{number}/comments", {"per_page": 100}) \
            if detail else []
        try:
            merged = _merged(pull)
            approvals = tuple(sorted({str(r["user"]["login"]) for r in reviews or []
                                      if r.get("state") == "APPROVED" and r.get("user")}))
            record = ReviewRecord(
                brief=brief, branch=str(pull["head"]["ref"]), title=str(pull.get("title") or ""), state=_state(pull),
                opened_at=_iso(pull.get("created_at")), at=_iso(pull.get("updated_at")),
                base=str(pull["base"]["ref"]), head=str(pull["head"]["sha"]),
                merged_commit=str(pull.get("merge_commit_sha") or "") if merged else "", approvals=approvals,
                comments=tuple(_comment(c) for c in comments or []))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ForgeError(f"GitHub's answer about pull request #{number} lacks {exc}") from None
        return Review(record, f"pull/{number}")

    def link(self, review: Review) -> str | None:
        """The pull request's address on the forge's host (github.com, or the GitHub Enterprise host)."""
        return f"{self.target.web}/{self.target.repo}/{review.sha}" if review.sha.startswith("pull/") else None

    def signals(self, brief: str) -> builtins.list[Signal]:
        """Reviews that request changes on the newest pull request of the brief, and `/assay` comment commands on
        any of its pull requests (a command names the brief, not one round's code: `/assay retry` on the pull
        request of an earlier, closed round is one too), and each author's permission on the repository (one
        read per author and process): a payload's word for either is never taken. Conditional list reads: the
        reviews, and the comments of each pull request."""
        pull, pulls = self._find_all(validate_brief_id(brief))
        if pull is None:
            return []
        number = int(pull.get("number") or 0)
        found: builtins.list[tuple[str, str, str, str, str]] = []  # (at, id, kind, by, text)
        for r in self._get("reviews", f"{self._path}/pulls/{number}/reviews", {"per_page": 100}) or []:
            if isinstance(r, dict) and r.get("state") == "CHANGES_REQUESTED":
                found.append((_iso(r.get("submitted_at")), f"review:{r.get('id')}", "changes", _login(r.get("user")),
                              str(r.get("body") or "")))
        numbers = dict.fromkeys([number, *sorted({int(p.get("number") or 0) for p in pulls} - {number, 0})])
        for n in numbers:
            for c in self._get("comments", f"{self._path}/issues/{n}/comments", {"per_page": 100}) or []:
                command = command_of(str(c.get("body") or "")) if isinstance(c, dict) else None
                if command is not None and _signed(str(c.get("body") or ""))[0] is None:  # not one Assay posted
                    found.append((_iso(c.get("created_at")), f"comment:{c.get('id')}", command[0],
                                  _login(c.get("user")), command[1]))
        listed = [Signal(ident, kind, by, at, text, self.can_write(by)) for at, ident, kind, by, text in sorted(found)]
        return sorted([*listed, *thread_signals(self._threads(brief, pull))], key=lambda s: s.at)

    def threads(self, brief: str) -> builtins.list[Thread]:
        """From the newest pull request's review comments (a conditional list read); only when one of them waits
        on an answer, which of those threads are resolved (one GraphQL query)."""
        pull = self._find(validate_brief_id(brief))
        return self._threads(brief, pull) if pull is not None else []

    def _threads(self, brief: str, pull: dict[str, Any]) -> builtins.list[Thread]:
        number = int(pull.get("number") or 0)
        comments = [c for c in self._get("review comments", f"{self._path}/pulls/{number}/comments",
                                         {"per_page": 100}) or [] if isinstance(c, dict)]
        if not comments:
            return []
        pending = {r.get("id") for r in self._get("reviews", f"{self._path}/pulls/{number}/reviews",
                                                 {"per_page": 100}) or []
                   if isinstance(r, dict) and r.get("state") == "PENDING"}
        threads: dict[int, builtins.list[dict[str, Any]]] = {}
        for c in sorted(comments, key=lambda c: (_iso(c.get("created_at")), int(c.get("id") or 0))):
            if c.get("pull_request_review_id") in pending and c.get("pull_request_review_id") is not None:
                continue  # not published: nobody but its author sees it yet
            threads.setdefault(int(c.get("in_reply_to_id") or c.get("id") or 0), []).append(c)
        waiting: builtins.list[tuple[int, dict[str, Any], tuple[Said, ...]]] = []
        for root, members in threads.items():
            first = members[0]
            if int(first.get("id") or 0) != root or ANSWER.search(str(first.get("body") or "")):
                continue  # its first comment is not listed (pending, or deleted), or a desk's
            answered = max((i for i, c in enumerate(members) if ANSWER.search(str(c.get("body") or ""))), default=-1)
            said = tuple(Said(str(c.get("id")), *_person(c)) for i, c in enumerate(members)
                         if i > answered and not ANSWER.search(str(c.get("body") or "")))
            if said:
                waiting.append((root, first, said))
        if not waiting:
            return []
        resolved = self._resolved(number)
        return [Thread(str(root), str(first.get("path") or ""), int(first.get("line") or first.get("original_line")
                                                                    or 0), said, self.can_write(said[-1].by))
                for root, first, said in waiting if root not in resolved]

    def _resolved(self, number: int) -> set[int]:
        """The first comments' ids of the pull request's resolved review threads (GraphQL: REST does not say)."""
        requester = self._gh.requester
        owner, name = self.target.repo.split("/")
        resolved: set[int] = set()
        after: str | None = None
        for _ in range(MAX_LISTED // 100 + 1):
            variables: dict[str, Any] = {"owner": owner, "name": name, "number": number, "after": after}
            _, data = self._call("review threads", partial(requester.graphql_query, THREADS_QUERY, variables))
            found = _at(data, "data", "repository", "pullRequest", "reviewThreads") or {}
            for node in found.get("nodes") or [] if isinstance(found, dict) else []:
                first = _at(node, "comments", "nodes") or []
                if isinstance(node, dict) and node.get("isResolved") and first and isinstance(first[0], dict):
                    resolved.add(int(first[0].get("databaseId") or 0))
            page = found.get("pageInfo") or {} if isinstance(found, dict) else {}
            if not page.get("hasNextPage") or not page.get("endCursor"):
                break
            after = str(page["endCursor"])
        return resolved

    def can_write(self, login: str) -> bool | None:
        """Whether `login` may write to the repository (admin, maintain or write), as GitHub says; None when GitHub
        gave no verdict (a 404, which is also how it hides what a token may not see, or a 403), which uses up no
        command: it is asked again at the next look. A comment without an author may not write."""
        if login not in self._writers:
            if not login:
                return False
            try:
                answer = self._get("permission", f"{self._path}/collaborators/{quote(login, safe='')}/permission")
            except ForgeDenied:
                return None
            except ForgeError as exc:
                if "HTTP 404" not in exc.message:
                    raise
                return None
            if not isinstance(answer, dict) or not isinstance(answer.get("permission"), str):
                return None
            self._writers[login] = answer["permission"] in ("admin", "write")
        return self._writers[login]

    def checks(self, brief: str) -> Checks | None:
        """The head's combined commit statuses and its check runs (two conditional reads)."""
        pull = self._find(validate_brief_id(brief))
        if pull is None:
            return None
        head = str(_at(pull, "head", "sha") or "")
        combined = self._get("combined status", f"{self._path}/commits/{head}/status") or {}
        runs = self._get("check runs", f"{self._path}/commits/{head}/check-runs", {"per_page": 100}) or {}
        done: builtins.list[tuple[str, str]] = []  # (name, passed | failed)
        running = 0
        for s in combined.get("statuses") or [] if isinstance(combined, dict) else []:
            if s.get("state") == "pending":
                running += 1
            else:
                done.append((str(s.get("context") or ""), "passed" if s.get("state") == "success" else "failed"))
        for run in runs.get("check_runs") or [] if isinstance(runs, dict) else []:
            if run.get("status") != "completed":
                running += 1
            else:
                ok = run.get("conclusion") in ("success", "neutral", "skipped")
                done.append((str(run.get("name") or ""), "passed" if ok else "failed"))
        failed = sorted(name for name, how in done if how == "failed")
        summary = (f"{len(done) - len(failed)} passed, {len(failed)} failed" + (f" ({', '.join(failed)})" if failed
                                                                                   else "")
                   + (f", {running} still running" if running else ""))
        return Checks(head, finished=bool(done) and not running, summary=summary if done or running else "no checks")

    def brief_of(self, number: int) -> str | None:
        try:
            pull = self._get("find", f"{self._path}/pulls/{int(number)}")
        except ForgeError as exc:
            if "HTTP 404" in exc.message:
                return None
            raise
        ref = str(_at(pull, "head", "ref") or "") if isinstance(pull, dict) else ""
        brief = ref.removeprefix(WORK_BRANCH_PREFIX)
        if not ref.startswith(WORK_BRANCH_PREFIX) or brief_id_problem(brief):
            return None
        self._numbers.setdefault(brief, int(number))
        return brief

    def closer(self, brief: str) -> str:
        """Who closed the pull request (the issue's `closed_by`)."""
        pull = self._find(validate_brief_id(brief))
        if pull is None or pull.get("state") != "closed":
            return ""
        issue = self._get("issue", f"{self._path}/issues/{int(pull.get('number') or 0)}") or {}
        return _login(issue.get("closed_by")) if isinstance(issue, dict) else ""

    def counts(self) -> dict[str, int]:
        return {"api": sum(self.calls.values()), "api-304": sum(self.not_modified.values())}

    def history(self, brief: str, heads: Iterable[str] = ()) -> dict[str, Any] | None:
        """What an audit reads of the pull request: its state, head and merge; its issue events (labels,
        ready, merge, close) and reviews; and the statuses on its head and on `heads` (the other heads the
        journal names). Earlier pull requests from the same branch (closed ones) add their events and reviews.
        Every read is conditional."""
        pull = self._find(validate_brief_id(brief))
        if pull is None:
            return None
        number = int(pull.get("number") or 0)
        authors = {int(p.get("number") or 0): _login(p.get("user")) for p in self._pulls(brief)}
        authors.setdefault(number, _login(pull.get("user")))
        numbers = sorted(authors)
        head = str(_at(pull, "head", "sha") or "")
        statuses = []
        for sha in dict.fromkeys([h for h in (head, *heads) if OBJECT_ID.fullmatch(h)]):
            listed = self._get("statuses", f"{self._path}/commits/{sha}/statuses", {"per_page": 100}) or []
            statuses += [{"head": sha, "context": str(s.get("context") or ""), "state": str(s.get("state") or ""),
                          "at": _iso(s.get("created_at")), "by": _login(s.get("creator")),
                          "epoch": _status_epoch(s.get("description")),
                          "said": _STATUS_EPOCH.sub("", str(s.get("description") or ""))}
                         for s in reversed(listed) if isinstance(s, dict)]
        events = [{**e, "pull": n} for n in numbers for e in
                  self._get("events", f"{self._path}/issues/{n}/events", {"per_page": 100}) or []
                  if isinstance(e, dict)]
        reviews = [{**r, "pull": n} for n in numbers for r in
                   self._get("reviews", f"{self._path}/pulls/{n}/reviews", {"per_page": 100}) or []
                   if isinstance(r, dict)]
        return {"number": number, "state": str(pull.get("state") or ""), "author": _login(pull.get("user")),
                "authors": {str(n): login for n, login in authors.items()},
                "draft": bool(pull.get("draft")), "merged": _merged(pull), "head": head,
                "merge_commit": str(pull.get("merge_commit_sha") or "") if _merged(pull) else "",
                "opened_at": _iso(pull.get("created_at")), "merged_at": _iso(pull.get("merged_at")),
                "statuses": statuses,
                "events": [{"event": str(e.get("event") or ""), "at": _iso(e.get("created_at")),
                            "by": _login(e.get("actor")), "label": str(_at(e, "label", "name") or ""),
                            "commit": str(e.get("commit_id") or ""), "pull": e["pull"]} for e in events],
                "reviews": [{"state": str(r.get("state") or ""), "at": _iso(r.get("submitted_at")),
                             "by": _login(r.get("user")), "commit": str(r.get("commit_id") or ""),
                             "pull": r["pull"]} for r in reviews]}

    # -- changes --------------------------------------------------------------------------------

    def open(self, brief: str, branch: str, title: str, head: str) -> Review:
        """A draft pull request from `branch`; the one there already if it is not closed."""
        validate_brief_id(brief)
        review_branch(brief, branch)
        title, head = review_title(title), commit_id(head)
        existing = self._find(brief)
        if existing is not None and existing.get("state") != "closed":
            return self._review(brief, existing, detail=False)  # its state is what opening needs

        def read_back() -> dict[str, Any] | None:
            found = self._find(brief)
            return found if found is not None and found.get("state") != "closed" else None

        def create() -> dict[str, Any]:
            made = self.repo().create_pull(title=title, body=f"Assay-Brief: {brief}\n", base="main", head=branch,
                                           draft=True)
            return dict(made.raw_data)

        pull = self._call("open", create, write=True, read_back=read_back)
        self._numbers[brief] = int(pull.get("number") or 0)
        return self._review(brief, pull, detail=False)  # new: no reviews or comments to read yet

    def mark_ready(self, brief: str, head: str) -> Review:
        """Mark the pull request ready at `head` (ready already: unchanged)."""
        pull = self._require(brief, "mark_ready")
        if pull.get("state") == "closed":
            raise IllegalReviewChange(brief, "mark-ready", _state(pull))
        if head and _at(pull, "head", "sha") != head:
            raise IllegalReviewChange(brief, "mark-ready", _state(pull),
                                      f"its head is {str(_at(pull, 'head', 'sha'))[:10]}, not {head[:10]}")
        if not pull.get("draft"):
            return self._review(brief, pull)
        obj = self._obj(pull)
        self._call("ready", lambda: obj.mark_ready_for_review(), write=True)
        return self._review(brief, self._require(brief, "mark_ready"))

    def open_update(self, brief: str, branch: str, title: str, head: str) -> RefUpdate | None:
        return None  # a pull request is an API object: `open` makes it

    def ready_update(self, brief: str, head: str) -> RefUpdate | None:
        raise UsageError("a pull request is marked ready through the API, not by a ref update")

    @property
    def refs_backed(self) -> bool:
        return False

    def comment(self, brief: str, by: str, text: str) -> Review:
        person_name(by)
        if not text.strip():
            raise UsageError("a comment needs text")
        pull = self._require(brief, "comment")
        obj = self._obj(pull)
        body = f"{text}\n\n— {by}\n{_marker()}"  # the marker finds this comment again after an unknown outcome
        number = int(pull.get("number") or 0)
        self._call("comment", lambda: obj.create_issue_comment(body), write=True,
                   read_back=lambda: self._posted(f"{self._path}/issues/{number}/comments", body))
        return self._review(brief, pull)

    def _posted(self, path: str, body: str) -> Any | None:
        """The comment or review whose body is `body`, if it is there (it carries its own marker)."""
        found = [c for c in self._get("read back", path, {"per_page": 100}) or [] if c.get("body") == body]
        return found[0] if found else None

    def answer(self, brief: str, thread: str, by: str, text: str, key: str) -> str:
        """A reply in the thread, carrying the key's marker: a reply with it there already is not posted again."""
        pull = self._require(brief, "answer")
        number = int(pull.get("number") or 0)
        marker = f"<!-- assay:answer:{key} -->"
        path = f"{self._path}/pulls/{number}/comments"

        def there() -> Any | None:
            found = [c for c in self._get("read back", path, {"per_page": 100}) or []
                     if isinstance(c, dict) and marker in str(c.get("body") or "")]
            return found[0] if found else None

        posted = there()
        if posted is None:
            body = f"{text}\n\n— {by}\n{marker}"
            obj = self._obj(pull)
            posted = self._call("answer", lambda: obj.create_review_comment_reply(int(thread), body), write=True,
                                read_back=there)
        return str(posted.get("id") if isinstance(posted, dict) else getattr(posted, "id", ""))

    def _answered(self, brief: str, pull: dict[str, Any], action: str) -> None:
        """Refuse to merge or queue a pull request while a review thread of someone who may write waits on an
        answer from its desk (as a plain forge's transition table refuses it)."""
        waiting = [t for t in self._threads(brief, pull) if t.allowed is not False]
        if waiting:
            raise IllegalReviewChange(brief, action, _state(pull),
                                      f"review thread {waiting[0].id} waits on an answer from its desk")

    def answer_update(self, brief: str, thread: str, by: str, text: str, key: str) -> RefUpdate | None:
        raise UsageError("a pull request review comment is posted through the API, not by a ref update")

    def note(self, brief: str, by: str, text: str, path: str = "", line: int = 0, reply_to: str = "") -> str:
        """A review comment posted for a person (signed, as `comment` signs): a reply in `reply_to`'s thread, or a
        new thread on `path` at `line` of the head (a review of one comment, as GitHub's own UI makes)."""
        person_name(by)
        if not text.strip():
            raise UsageError("a review note needs text")
        pull = self._require(brief, "note")
        number = int(pull.get("number") or 0)
        body = f"{text}\n\n— {by}\n{_marker()}"
        listed = f"{self._path}/pulls/{number}/comments"
        obj = self._obj(pull)
        if reply_to:
            if path or line:
                raise UsageError("a reply stays on its thread's file and line", hint="leave out --on with --reply")
            if not reply_to.isdigit():
                raise UsageError(f"{reply_to!r} is not a review comment's id")
            made = self._call("note", lambda: obj.create_review_comment_reply(int(reply_to), body), write=True,
                              read_back=lambda: self._posted(listed, body))
        else:
            if not path:
                raise UsageError("a review thread on GitHub is on a file", hint="pass --on PATH[:LINE]")
            comment: Any = {"path": path, "line": line or 1, "body": body}
            self._call("note", lambda: obj.create_review(event="COMMENT", comments=[comment]), write=True,
                       read_back=lambda: self._posted(listed, body))
            made = self._posted(listed, body)
        return str(made.get("id") if isinstance(made, dict) else getattr(made, "id", ""))

    def approve(self, brief: str, by: str) -> Review:
        person_name(by)
        pull = self._require(brief, "approve")
        if pull.get("state") == "closed":
            raise IllegalReviewChange(brief, "approve", _state(pull))
        number = int(pull.get("number") or 0)
        reviews = self._get("reviews", f"{self._path}/pulls/{number}/reviews", {"per_page": 100}) or []
        if any(r.get("state") == "APPROVED" and _signed(str(r.get("body") or ""))[0] == by for r in reviews):
            return self._review(brief, pull)  # approved by `by` already: nothing to write
        obj = self._obj(pull)
        body = f"Approved by {by}\n{_marker()}"
        self._call("approve", lambda: obj.create_review(body=body, event="APPROVE"), write=True,
                   read_back=lambda: self._posted(f"{self._path}/pulls/{number}/reviews", body))
        return self._review(brief, pull)

    def merge_queue(self) -> bool:
        """Whether a ruleset on the base requires a merge queue (one conditional read of its rules)."""
        rules = self._get("rules", f"{self._path}/rules/branches/main") or []
        return any(isinstance(r, dict) and r.get("type") == "merge_queue" for r in rules)

    def enqueue(self, brief: str, by: str) -> Review:
        """`enqueuePullRequest` at the head read, so a head that moves since is not queued; a pull request in the
        queue already is left there. An unknown outcome is settled by reading whether it is queued (or merged)."""
        person_name(by)
        pull = self._require(brief, "enqueue")
        state = _state(pull)
        if state != "ready":
            raise IllegalReviewChange(brief, "queue", state, "it is already on main" if state == "merged" else "")
        self._answered(brief, pull, "queue")
        number, head = int(pull.get("number") or 0), str(_at(pull, "head", "sha") or "")
        requester = self._gh.requester
        owner, name = self.target.repo.split("/")

        def queued() -> dict[str, Any] | None:
            _, data = self._call("queued?", partial(requester.graphql_query, QUEUED_QUERY,
                                                    {"owner": owner, "name": name, "number": number}))
            found = _at(data, "data", "repository", "pullRequest") or {}
            return found if isinstance(found, dict) and (found.get("isInMergeQueue") or found.get("merged")) else None

        if queued() is None:
            if not self.merge_queue():
                raise UsageError("main has no merge queue on GitHub",
                                 hint="require one for main in a ruleset, or merge the pull request by hand")
            self._call("enqueue", partial(requester.graphql_query, ENQUEUE_MUTATION,
                                          {"id": str(pull.get("node_id") or ""), "head": head}),
                       write=True, read_back=queued)
        return self._review(brief, self._require(brief, "enqueue"))

    def merge(self, brief: str, by: str) -> Review:
        """Merge as a person does (a merge commit); GitHub's 405 or 409 is a conflict, nothing written. Where main
        requires a merge queue, the pull request is queued instead (`enqueue`)."""
        from github import GithubException

        pull = self._require(brief, "merge")
        state = _state(pull)
        if state == "merged":
            raise IllegalReviewChange(brief, "merge", "merged", "it is already on main")
        if state in ("closed", "draft"):
            raise IllegalReviewChange(brief, "merge", state)
        if self.merge_queue():
            return self.enqueue(brief, by)
        self._answered(brief, pull, "merge")
        obj, ref, base = self._obj(pull), str(_at(pull, "head", "ref")), str(_at(pull, "base", "ref"))

        def merge() -> Any:
            try:
                return obj.merge(merge_method="merge", commit_title=f"Merge {ref}: {pull.get('title') or ''}",
                                 commit_message=f"Assay-Brief: {brief}")
            except GithubException as exc:
                if exc.status in (405, 409):
                    raise MergeConflict(brief, ref, base) from None
                raise

        def merged() -> Any:
            now = self._require(brief, "merge")
            return now if _merged(now) else None

        self._call("merge", merge, write=True, read_back=merged)
        return self._review(brief, self._require(brief, "merge"))

    def close(self, brief: str, by: str, reason: str) -> Review:
        person_name(by)
        pull = self._require(brief, "close")
        if _state(pull) == "closed":
            return self._review(brief, pull)  # closed already: nothing to write
        if pull.get("state") == "closed":
            raise IllegalReviewChange(brief, "close", _state(pull))
        obj = self._obj(pull)
        if reason.strip():  # the marker finds the comment again after a lost answer: it is posted once
            body = f"Closed by {by}: {reason}\n{_marker()}"
            number = int(pull.get("number") or 0)
            self._call("comment", lambda: obj.create_issue_comment(body), write=True,
                       read_back=lambda: self._posted(f"{self._path}/issues/{number}/comments", body))
        self._call("close", lambda: obj.edit(state="closed"), write=True)
        return self._review(brief, self._require(brief, "close"))

    def label(self, brief: str, state: str, desk: str) -> None:
        """The state label (`assay:<state>`, the others removed) and the desk's (`desk:<name>`); the labels
        are read from the pull request's own answer, so this costs no read of its own."""
        pull = self._require(brief, "label")
        have = {str(lb.get("name")) for lb in pull.get("labels") or [] if isinstance(lb, dict)}
        wanted = (have - set(STATE_LABELS)) | {f"assay:{state}", f"desk:{desk}"}
        if wanted == have:
            return  # no write: the label set is as it should be
        obj = self._obj(pull)
        if have & set(STATE_LABELS) - wanted:  # a state label goes: the whole set in one write (idempotent)
            self._call("label", lambda: obj.set_labels(*sorted(wanted)), write=True)
        else:  # only additions: labels a person adds meanwhile are kept
            self._call("label", lambda: obj.add_to_labels(*sorted(wanted - have)), write=True)

    def post_statuses(self, brief: str, head: str, rows: builtins.list[dict[str, Any]], epoch: int) -> None:
        """One commit status (`assay/verify`) on `head` for all its verify rows: how many passed, a digest of their
        evidence and the epoch posting it ("; epoch N" ends the description), so the audit judges it by that
        epoch's custody. One content-creating request however many rows; evidence there already, from any epoch,
        is not posted again."""
        if not OBJECT_ID.fullmatch(head):
            raise UsageError(f"{head!r} is not a commit id")
        if not rows:
            return
        listed = f"{self._path}/commits/{head}/statuses"
        state, summary = verify_status(rows)
        status = {"state": state, "description": f"{summary}; epoch {epoch}", "context": VERIFY_CONTEXT}

        def same(s: Any) -> bool:
            """Whether `s` is this evidence's status, by whichever epoch posted it."""
            return (isinstance(s, dict) and s.get("state") == state and s.get("context") == VERIFY_CONTEXT
                    and _STATUS_EPOCH.sub("", str(s.get("description") or "")) == summary)

        def there() -> Any | None:
            """This status, if the head has it already (posted before a crash, or before a dropped answer)."""
            found = [s for s in self._get("read back", listed, {"per_page": 100}) or []
                     if all(s.get(k) == v for k, v in status.items())]
            return found[0] if found else None

        if not any(same(s) for s in self._get("statuses", listed, {"per_page": 100}) or []):
            self._call("status", partial(self._gh.requester.requestJsonAndCheck, "POST",
                                         f"{self._path}/statuses/{head}", input=status),
                       write=True, read_back=there)

    def _require(self, brief: str, action: str) -> dict[str, Any]:
        pull = self._find(validate_brief_id(brief))
        if pull is None:
            raise NoReview(brief, action.replace("_", "-"), f"no pull request from {WORK_BRANCH_PREFIX}{brief}")
        return pull


def _status_epoch(description: Any) -> int | None:
    """The epoch a verify status says posted it, if it says."""
    found = _STATUS_EPOCH.search(str(description or ""))
    return int(found.group(1)) if found else None


def _at(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None  # type: ignore[assignment]
    return data


def _login(user: object) -> str:
    return str(user.get("login") or "") if isinstance(user, dict) else ""


def _merged(pull: dict[str, Any]) -> bool:
    return bool(pull.get("merged") or pull.get("merged_at"))  # the list's answers carry merged_at only


def _state(pull: dict[str, Any]) -> str:
    if pull.get("state") == "closed":
        return "merged" if _merged(pull) else "closed"
    return "draft" if pull.get("draft") else "ready"


def _next_page(link: str) -> str | None:
    """The `rel="next"` URL of a Link header, if any."""
    for part in link.split(","):
        m = re.fullmatch(r'\s*<([^>]+)>\s*;\s*rel="next"\s*', part)
        if m:
            return m[1]
    return None


OPERATIONS = {  # what each operation is, in the words of errors a person reads
    "open": "opening the pull request", "ready": "marking the pull request ready", "label": "setting its labels",
    "status": "posting a commit status", "comment": "commenting on the pull request", "approve": "approving it",
    "merge": "merging it", "close": "closing it", "find": "reading the pull requests",
    "list": "listing the pull requests", "read back": "reading back a write", "reviews": "reading its reviews",
    "comments": "reading its comments", "events": "reading its events", "statuses": "reading commit statuses",
    "check runs": "reading the check runs", "combined status": "reading the combined commit status",
    "permission": "reading a collaborator's permission", "issue": "reading the pull request's issue",
}


def doing(op: str) -> str:
    return OPERATIONS.get(op, op)


def _graphql_rate_limited(exc: Any) -> bool:
    """GraphQL's rate limit: an answer (HTTP 200, which PyGithub raises as 400) whose errors say RATE_LIMITED."""
    data = exc.data if isinstance(exc.data, dict) else {}
    return any(isinstance(e, dict) and e.get("type") == "RATE_LIMITED" for e in data.get("errors") or [])


def _secondary(exc: Any) -> bool:
    """A secondary limit (too many writes, or requests at once, by this identity): a 429, or a 403 whose message
    says so; not a permission 403 (`ForgeDenied`), which says "Resource not accessible" or names a permission."""
    data = exc.data if isinstance(exc.data, dict) else {}
    return exc.status == 429 or (exc.status == 403 and "secondary rate limit" in str(data.get("message", "")).lower())


def _limit_kind(exc: Any) -> str:
    return "secondary rate limit" if _secondary(exc) else "rate limit"


def _rate_wait(exc: Any, now: float, before: int = 0) -> float | None:
    """Seconds GitHub asks us to wait (403/429 with Retry-After, a spent primary limit, GraphQL's RATE_LIMITED);
    None otherwise. A secondary limit without Retry-After waits a minute, doubled for each one before it in the
    same call (`before`), as GitHub's documentation asks."""
    if exc.status not in (403, 429) and not _graphql_rate_limited(exc):
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
    if _secondary(exc):
        return 60.0 * float(2 ** min(before, 4))
    message = str((exc.data or {}).get("message", "")) if isinstance(exc.data, dict) else ""
    if "rate limit" in message.lower() or _graphql_rate_limited(exc):
        return 60.0
    return None


def _already_exists(exc: Any) -> bool:
    data = exc.data if isinstance(exc.data, dict) else {}
    text = str(data.get("message", "")) + " " + " ".join(str(e.get("message", "")) for e in data.get("errors", [])
                                                          if isinstance(e, dict))
    return "already exists" in text.lower()


# what an operation needs of the token, where GitHub's answer does not say (`X-Accepted-GitHub-Permissions`)
NEEDS = {"check runs": "checks=read", "combined status": "statuses=read", "statuses": "statuses=read",
         "status": "statuses=write", "reviews": "pull_requests=read", "comments": "pull_requests=read",
         "find": "pull_requests=read", "open": "pull_requests=read"}
# a permission as a workflow job's `permissions:` spells it, and as a fine-grained token's settings do
PERMISSION_WORDS = {"checks": ("checks", "Checks"), "statuses": ("statuses", "Commit statuses"),
                    "pull_requests": ("pull-requests", "Pull requests"), "contents": ("contents", "Contents"),
                    "issues": ("issues", "Issues"), "metadata": ("metadata", "Metadata")}


def _needs(op: str, exc: Any) -> str:
    """What the token lacks, in GitHub's form (`checks=read`): as GitHub's answer says, else as the operation
    needs."""
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    return str(headers.get("x-accepted-github-permissions") or NEEDS.get(op, "")).strip()


def permission_hint(needs: str) -> str:
    """`checks=read` in the words of a workflow job and of a token's settings."""
    pairs = [p.partition("=") for p in re.split(r"[,;]", needs) if "=" in p]
    job = ", ".join(f"`{PERMISSION_WORDS.get(k.strip(), (k.strip(), ''))[0]}: {v.strip()}`" for k, _, v in pairs)
    token = ", ".join(f"{PERMISSION_WORDS.get(k.strip(), ('', k.strip()))[1]}: {v.strip()}" for k, _, v in pairs)
    return (f"give the token {job} (a workflow job's `permissions:`; a fine-grained token or GitHub App: {token})"
            if pairs else "check the token's permissions (contents, pull requests, statuses: write; checks: read)")


def _forge_error(op: str, exc: Any) -> AssayError:
    data = exc.data if isinstance(exc.data, dict) else {}
    said = "; ".join(str(e) for e in data.get("errors") or [] if isinstance(e, str))
    if "your own pull request" in said:
        return UsageError(f"GitHub refused {doing(op)}: {said}",
                          hint="the token belongs to the pull request's author (the desks' token); approve with "
                               "a token of the reviewer's own in GITHUB_TOKEN or GH_TOKEN")
    if exc.status == 403:  # rate limits were waited out before this: the token may not do it
        needs = _needs(op, exc)
        return ForgeDenied(f"GitHub refused {doing(op)}: HTTP 403 {data.get('message', '')}".strip(),
                           hint=permission_hint(needs), needs=needs)
    return ForgeError(f"GitHub refused {doing(op)}: HTTP {exc.status} {data.get('message', '')}".strip()
                      + (f" ({said})" if said else ""),
                      hint="check the token's permissions (contents, pull requests, statuses: write)")


def _iso(when: object) -> str:
    """GitHub's time (`2026-01-01T00:00:00Z`) in the records' form; "" when absent or unreadable."""
    if not isinstance(when, str) or not when:
        return ""
    try:
        at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_SIGNED = (re.compile(r"(?P<text>.*)\n\n— (?P<by>[^\n<>]+)\n<!-- assay:[0-9a-f]+ -->", re.S),  # a comment
           re.compile(r"Closed by (?P<by>[^\n<>:]+): (?P<text>.*)\n<!-- assay:[0-9a-f]+ -->", re.S),  # a close
           re.compile(r"Approved by (?P<by>[^\n<>]+)\n<!-- assay:[0-9a-f]+ -->", re.S))  # an approval


def _signed(body: str) -> tuple[str | None, str]:
    """Who wrote a body Assay posted for a person (the token's login posts it), and what they wrote; a close
    reads as the plain forge records it (`closed: <reason>`). (None, body) for a body Assay did not sign."""
    for i, pattern in enumerate(_SIGNED):
        m = pattern.fullmatch(body)
        if m:
            text = m.groupdict().get("text") or ""
            return m["by"], f"closed: {text}" if i == 1 else text
    return None, body


def _person(c: dict[str, Any]) -> tuple[str, str, str]:
    """Who wrote a comment (the person Assay signed it for, else its author), when, and what they wrote."""
    by, text = _signed(str(c.get("body") or ""))
    return by or _login(c.get("user")), _iso(c.get("created_at")), text


def _comment(c: dict[str, Any]) -> ReviewComment:
    by, text = _signed(str(c.get("body") or ""))
    return ReviewComment(by=by or str((c.get("user") or {}).get("login") or ""), at=_iso(c.get("created_at")),
                         text=text)


def _marker() -> str:
    """An invisible, unique marker for a comment or review body (Markdown hides HTML comments)."""
    return f"<!-- assay:{os.urandom(6).hex()} -->"
