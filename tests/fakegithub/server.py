"""A fake GitHub on loopback: REST and GraphQL for the calls Assay makes, git over smart HTTP, faults.

State lives in memory per repository; the git side is a real bare repository per repository
served by `git http-backend`, so a pull request's head follows its branch as on GitHub.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.fakegithub import gitside, graphql, queue, rest, reviews
from tests.fakegithub.faults import DOCS, SECONDARY_MESSAGE, Fault, FaultQueue, fault_response
from tests.fakegithub.openapi import graphql_validate, validate
from tests.fakegithub.state import (
    CLOCK,
    Comment,
    Delivery,
    IssueEvent,
    MergeGroup,
    Pull,
    Repo,
    ReviewComment,
    Ruleset,
    Status,
    Urls,
    User,
    now_iso,
)
from tests.fakegithub.webhooks import validate as webhook_validate

API_PREFIX = "/api/v3"
GRAPHQL_PATHS = ("/api/graphql", "/graphql")
GIT_SERVICES = ("/info/refs", "/git-upload-pack", "/git-receive-pack")
FREE = {("GET", "/rate_limit")}  # GitHub does not charge a /rate_limit call to the quota


@dataclass
class Quota:
    resource: str
    limit: int
    reset: int
    used: int = 0

    def as_json(self) -> dict[str, int]:
        return {"limit": self.limit, "remaining": max(0, self.limit - self.used), "reset": self.reset,
                "used": self.used}

    def headers(self) -> dict[str, str]:
        q = self.as_json()
        return {"X-RateLimit-Limit": str(q["limit"]), "X-RateLimit-Remaining": str(q["remaining"]),
                "X-RateLimit-Reset": str(q["reset"]), "X-RateLimit-Used": str(q["used"]),
                "X-RateLimit-Resource": self.resource}


@dataclass(frozen=True)
class Sent:
    """One JSON answer the fake gave, kept to be checked against GitHub's description."""

    method: str
    spec_path: str
    status: int
    body: Any


class FakeGitHub:
    """`with FakeGitHub(tmp_path) as gh:` serves on 127.0.0.1 until the block ends."""

    def __init__(self, root: Path, login: str = "assay-bot", rate_limit: int = 5000) -> None:
        self.root = Path(root) / "fakegithub"
        self.git_root = self.root / "git"
        self.token = "ghs_" + secrets.token_hex(18)
        self.user = User(login)
        self.merge_queue_bot = User("github-merge-queue[bot]", type="Bot")  # merges and drops queue entries
        self.people: dict[str, User] = {login: self.user, self.merge_queue_bot.login: self.merge_queue_bot}
        self.tokens: dict[str, User] = {self.token: self.user}
        self.repos: dict[tuple[str, str], Repo] = {}
        self.faults = FaultQueue()
        self.calls: Counter[tuple[str, str]] = Counter()  # (method, spec path) → answers that cost quota
        self.not_modified: Counter[tuple[str, str]] = Counter()  # 304s, which cost none
        self.git_requests: Counter[str] = Counter()  # smart-HTTP service → requests
        self.git_served: list[tuple[str, bytes, int]] = []  # each POST to a git service: (service, request, bytes)
        self.git_v0_only = False  # serve git as a forge that speaks protocol v0 only (it ignores Git-Protocol)
        self.sent: list[Sent] = []
        self.graphql_sent: list[Any] = []
        self.deliveries: list[Delivery] = []  # webhooks GitHub would send (the merge queue's merge_group)
        self.rate_limit = rate_limit
        self._quotas: dict[tuple[str, str], Quota] = {}
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.urls = Urls("", "")
        self.clock_offset_s = 0.0
        # GitHub's secondary limit on content-creating requests (REST writes, GraphQL mutations) per identity:
        # (requests, seconds) windows, none until a test sets them (`limit_content`)
        self.content_limits: tuple[tuple[int, float], ...] = ()
        self.limit_clock: Callable[[], float] = time.time
        self.limit_retry_after = True  # GitHub may leave Retry-After out; the client then backs off on its own
        self.created: dict[str, list[float]] = {}  # login -> when each content-creating request was answered
        self.secondary_refused: Counter[str] = Counter()  # login -> content-creating requests refused over the limit

    @property
    def clock_offset_s(self) -> float:
        """How far GitHub's clock runs ahead of this machine's (negative: behind), for every time it stamps."""
        return CLOCK["offset_s"]

    @clock_offset_s.setter
    def clock_offset_s(self, seconds: float) -> None:
        CLOCK["offset_s"] = seconds

    # lifecycle ---------------------------------------------------------------
    def start(self) -> FakeGitHub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        web = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.urls = Urls(web + API_PREFIX, web)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fakegithub",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # what a client needs -------------------------------------------------------
    @property
    def api_url(self) -> str:
        """PyGithub's `base_url`; its GraphQL endpoint is derived from it (`/api/graphql`)."""
        return self.urls.api

    @property
    def graphql_url(self) -> str:
        return self.urls.web + GRAPHQL_PATHS[0]

    def git_url(self, owner: str, repo: str) -> str:
        return f"{self.urls.web}/{owner}/{repo}.git"

    def git_env(self, token: str | None = None) -> dict[str, str]:
        """Environment that makes git send the token as GitHub expects, never in a URL or argument."""
        basic = base64.b64encode(f"x-access-token:{token or self.token}".encode()).decode()
        return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}

    def create_repo(self, owner: str, name: str, default_branch: str = "main") -> Repo:
        path = self.git_root / owner / f"{name}.git"
        gitside.init_bare(path, default_branch)
        repo = Repo(self.person(owner), name, path, default_branch)
        with self.lock:
            self.repos[(owner.lower(), name.lower())] = repo
        return repo

    # acting as a person ------------------------------------------------------
    def person(self, login: str) -> User:
        with self.lock:
            return self.people.setdefault(login, User(login))

    def repo(self, owner: str, name: str) -> Repo:
        return self.repos[(owner.lower(), name.lower())]

    def pull(self, owner: str, name: str, number: int) -> Pull:
        with self.lock:
            repo = self.repo(owner, name)
            return repo.refresh(repo.pulls[number])

    def merge(self, owner: str, name: str, number: int, by: str = "maintainer", method: str = "merge") -> str:
        """Press the merge button: the merge commit's sha; AssertionError when GitHub would refuse."""
        with self.lock:
            repo = self.repo(owner, name)
            reply = rest.merge(repo, repo.refresh(repo.pulls[number]), self.person(by), method, None)
        if reply.status != 200:
            raise AssertionError(f"merge of #{number} refused: {reply.status} {reply.body}")
        return str(reply.body["sha"])

    def review(self, owner: str, name: str, number: int, state: str = "APPROVED", body: str = "",
               by: str = "reviewer", comments: list[tuple[str, int, str]] | None = None) -> int:
        """Submit a review: APPROVED, CHANGES_REQUESTED or COMMENTED (PENDING: not submitted), each of its
        `comments` (path, line, body) opening a thread; its id. As on GitHub's web page, a person's pending review
        is the one they add to, or submit, with its comments."""
        with self.lock:
            repo = self.repo(owner, name)
            pull = repo.refresh(repo.pulls[number])
            review = reviews.pending_review(repo, pull, self.person(by))
            if review is None:
                review = reviews.add_review(repo, pull, self.person(by), state, body)
            elif state != "PENDING":
                review.state, review.body, review.commit_id, review.at = state, body, pull.head_sha, now_iso()
            for path, line, text in comments or []:
                reviews.add_comment(repo, pull, review, path, line, text)
            return review.id

    def thread(self, owner: str, name: str, number: int, body: str, path: str = "README.md", line: int = 1,
               by: str = "reviewer") -> int:
        """A person opens a review thread on a line (a COMMENTED review of that one comment); the comment's id.
        A line outside the pull request's diff is taken, with a hunk of that line alone."""
        with self.lock:
            repo = self.repo(owner, name)
            pull = repo.refresh(repo.pulls[number])
            review = reviews.add_review(repo, pull, self.person(by), "COMMENTED", "")
            return reviews.add_comment(repo, pull, review, path, line, body).id

    def pending_thread(self, owner: str, name: str, number: int, body: str, path: str = "README.md", line: int = 1,
                       by: str = "reviewer") -> int:
        """A comment in the person's pending review (made on first use), which only they see; the comment's id."""
        with self.lock:
            repo = self.repo(owner, name)
            pull = repo.refresh(repo.pulls[number])
            user = self.person(by)
            review = reviews.pending_review(repo, pull, user) or reviews.add_review(repo, pull, user, "PENDING", "")
            return reviews.add_comment(repo, pull, review, path, line, body).id

    def reply(self, owner: str, name: str, number: int, comment_id: int, body: str, by: str = "reviewer") -> int:
        """A person replies in the thread of `comment_id`; the reply's id. AssertionError when GitHub would refuse."""
        with self.lock:
            repo = self.repo(owner, name)
            made = reviews.add_reply(repo, repo.refresh(repo.pulls[number]), self.person(by), comment_id, body)
        if isinstance(made, rest.Reply):
            raise AssertionError(f"reply to {comment_id} on #{number} refused: {made.status} {made.body}")
        return made.id

    def resolve(self, owner: str, name: str, number: int, comment_id: int, by: str = "reviewer",
                resolved: bool = True) -> None:
        """A person resolves (or unresolves) the thread that holds `comment_id`."""
        with self.lock:
            repo = self.repo(owner, name)
            if not any(c.id == comment_id and c.pull == number for c in repo.review_comments):
                raise AssertionError(f"no review comment {comment_id} on #{number}")
            reviews.resolve(repo, comment_id, self.person(by), resolved)

    def approve(self, owner: str, name: str, number: int, by: str = "reviewer") -> None:
        self.review(owner, name, number, "APPROVED", "", by)

    def comment(self, owner: str, name: str, number: int, body: str, by: str = "reviewer") -> int:
        """A comment on the pull request; its id."""
        with self.lock:
            comment = Comment(number, self.person(by), body)
            self.repo(owner, name).comments.append(comment)
            return comment.id

    def close(self, owner: str, name: str, number: int, by: str = "maintainer") -> None:
        with self.lock:
            repo = self.repo(owner, name)
            pull = repo.pulls[number]
            pull.state, pull.closed_at, pull.closed_by = "closed", now_iso(), self.person(by)
            repo.events.append(IssueEvent(number, self.person(by), "closed"))
            queue.settle(self, repo)

    def grant(self, owner: str, name: str, login: str, level: str = "write") -> None:
        """Give a person admin, write or read access to the repository (read is everyone's default)."""
        with self.lock:
            self.repo(owner, name).permissions[self.person(login).login] = level

    def check_run(self, owner: str, name: str, sha: str, check: str, status: str = "completed",
                  conclusion: str | None = "success") -> int:
        """A CI job reports on a commit (queued, in_progress, or completed with a conclusion); its id."""
        with self.lock:
            repo = self.repo(owner, name)
            run = rest.add_check_run(repo, sha, check, status, conclusion)
            queue.settle(self, repo)
            return run.id

    # the merge queue ---------------------------------------------------------
    def require_merge_queue(self, owner: str, name: str, branch: str = "main",
                            checks: tuple[str, ...] = ("assay verify",)) -> int:
        """A repository ruleset on `branch`: merges go through a merge queue, whose groups need `checks` (commit
        status contexts or check run names) green; the ruleset's id."""
        with self.lock:
            ruleset = Ruleset(branch, tuple(checks))
            self.repo(owner, name).rulesets.append(ruleset)
            return ruleset.id

    def enqueue(self, owner: str, name: str, number: int, by: str = "maintainer",
                expected_head: str | None = None) -> int:
        """A person adds the pull request to the merge queue; its position. AssertionError when GitHub refuses."""
        with self.lock:
            repo = self.repo(owner, name)
            made = queue.enqueue(self, repo, repo.pulls[number], self.person(by), expected_head)
        if isinstance(made, str):
            raise AssertionError(f"enqueue of #{number} refused: {made}")
        return made.position

    def merge_groups(self, owner: str, name: str) -> list[MergeGroup]:
        """The live merge groups, first to merge first: what a test's CI runs the required checks on."""
        with self.lock:
            return [e.group for e in self.repo(owner, name).queue if e.group is not None]

    # inspecting state --------------------------------------------------------
    def pulls(self, owner: str, name: str) -> list[Pull]:
        with self.lock:
            repo = self.repo(owner, name)
            return [repo.refresh(p) for p in sorted(repo.pulls.values(), key=lambda p: p.number)]

    def comments(self, owner: str, name: str, number: int) -> list[Comment]:
        with self.lock:
            return [c for c in self.repo(owner, name).comments if c.issue == number]

    def review_comments(self, owner: str, name: str, number: int) -> list[ReviewComment]:
        """Every review comment on the pull request, pending ones too, oldest first."""
        with self.lock:
            return [c for c in self.repo(owner, name).review_comments if c.pull == number]

    def labels(self, owner: str, name: str, number: int) -> list[str]:
        with self.lock:
            return list(self.repo(owner, name).pulls[number].labels)

    def statuses(self, owner: str, name: str, sha: str) -> list[Status]:
        with self.lock:
            return [s for s in self.repo(owner, name).statuses if s.sha == sha]

    def pushed(self, path: str) -> None:
        """After a push to `/owner/name.git/…`: a merge queue follows its base branch and its pull requests' heads."""
        owner, _, rest_of_path = path.lstrip("/").partition("/")
        with self.lock:
            repo = self.repos.get((owner.lower(), rest_of_path.split("/", 1)[0].removesuffix(".git").lower()))
            if repo is not None and repo.queue:
                queue.settle(self, repo)

    def limit_content(self, per_minute: int = 80, per_hour: int = 500, clock: Callable[[], float] = time.time,
                      retry_after: bool = True) -> None:
        """Refuse an identity's content-creating requests beyond `per_minute` a minute and `per_hour` an hour with
        GitHub's secondary-limit 403 (`clock`: a test's own, so a minute need not pass in real time)."""
        with self.lock:
            self.content_limits = ((per_minute, 60.0), (per_hour, 3600.0))
            self.limit_clock, self.limit_retry_after = clock, retry_after

    def over_content_limit(self, user: User) -> dict[str, str] | None:
        """None when `user` may create content now (and it is counted); else the 403's extra headers."""
        now = self.limit_clock()
        made = self.created.setdefault(user.login, [])
        for limit, window in self.content_limits:
            recent = [t for t in made if t > now - window]
            if len(recent) >= limit:
                self.secondary_refused[user.login] += 1
                return {"Retry-After": str(max(1, int(recent[-limit] + window - now + 1)))} \
                    if self.limit_retry_after else {}
        made.append(now)
        return None

    def _secondary_refusal(self, method: str, spec: str, user: User,
                           quota: Quota) -> tuple[int, dict[str, str], bytes] | None:
        if method == "GET":
            return None
        if not self.content_limits:
            self.created.setdefault(user.login, []).append(self.limit_clock())  # counted, never refused
            return None
        extra = self.over_content_limit(user)
        if extra is None:
            return None
        body = {"message": SECONDARY_MESSAGE.format(rid=secrets.token_hex(8)), "documentation_url": DOCS}
        quota.used += 1
        if spec not in GRAPHQL_PATHS:  # checked against the REST description as every REST answer is
            self.sent.append(Sent(method, spec, 403, body))
        return 403, {**quota.headers(), **extra}, json.dumps(body).encode()

    def quota(self, user: User, resource: str = "core") -> Quota:
        with self.lock:
            key = (user.login, resource)
            if key not in self._quotas:
                self._quotas[key] = Quota(resource, self.rate_limit, int(time.time()) + 3600)
            return self._quotas[key]

    def schema_problems(self) -> list[str]:
        """Every JSON answer so far that does not meet GitHub's published REST description or GraphQL schema."""
        with self.lock:
            sent, answered, delivered = list(self.sent), list(self.graphql_sent), list(self.deliveries)
        return ([p for s in sent for p in validate.problems(s.spec_path, s.method, s.status, s.body)] +
                [f"POST /graphql: {p}" for a in answered for p in graphql_validate.problems(a)] +
                [f"webhook {p}" for d in delivered for p in webhook_validate.problems(d.event, d.action, d.payload)])

    # serving -----------------------------------------------------------------
    def authenticate(self, header: str | None) -> User | None:
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "basic":
            try:
                value = base64.b64decode(value).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return None
        elif scheme.lower() not in ("token", "bearer"):
            return None
        given = value.strip()
        return next((user for token, user in self.tokens.items() if secrets.compare_digest(given, token)), None)

    def token_of(self, login: str) -> str:
        """A token of a person's own (not the desks'), made on first use."""
        with self.lock:
            user = self.person(login)
            found = [token for token, owner in self.tokens.items() if owner is user]
            if found:
                return found[0]
            token = "ghp_" + secrets.token_hex(18)
            self.tokens[token] = user
            return token

    def unauthorized(self, method: str, path: str, message: str) -> tuple[int, dict[str, str], bytes]:
        payload = {"message": message, "documentation_url": DOCS}
        route = next((r for r in rest.ROUTES if r.method == method and r.pattern.match(path)), None)
        with self.lock:
            quota = self._quotas.setdefault(("", "core"), Quota("core", 60, int(time.time()) + 3600))
            quota.used += 1
            if route is not None:
                self.sent.append(Sent(method, route.spec_path, 401, payload))
        return 401, quota.headers(), json.dumps(payload).encode()

    def answer_api(self, method: str, path: str, query: dict[str, str], body: Any, user: User,
                   if_none_match: str | None) -> tuple[int, dict[str, str], bytes | None]:
        """Everything under the API prefix: route, faults, quota, ETag, pagination. None body = drop."""
        found = [(r, m) for r in rest.ROUTES if (m := r.pattern.match(path))]
        route, match = next(((r, m) for r, m in found if r.method == method), (None, None))
        spec = route.spec_path if route else path
        resource = "core"
        with self.lock:
            quota = self.quota(user, resource)
            armed = self.faults.take(method, path)
            if armed is not None and armed.fault not in (Fault.DROP_AFTER_WRITE, Fault.STALE_LIST,
                                                         Fault.SECONDARY_AFTER_WRITE):
                status, extra, fault_body = fault_response(armed, secrets.token_hex(8), quota.reset)
                quota.used += 1
                self.calls[(method, spec)] += 1
                self.sent.append(Sent(method, spec, status, fault_body))
                return status, {**quota.headers(), **extra}, json.dumps(fault_body).encode()
            if route is None or match is None:
                reply = rest.error(405 if found else 404, "Not Found" if not found else "Method Not Allowed")
                return reply.status, quota.headers(), json.dumps(reply.body).encode()
            if (method, spec) not in FREE and quota.used >= quota.limit:
                limited = {"message": f"API rate limit exceeded for user ID {user.id}.", "documentation_url": DOCS}
                self.sent.append(Sent(method, spec, 403, limited))
                return 403, quota.headers(), json.dumps(limited).encode()
            refused = self._secondary_refusal(method, spec, user, quota)
            if refused is not None:
                self.calls[(method, spec)] += 1
                return refused
            request = rest.Request(method, path, query, body, user)
            reply = route.handler(self, request, {k: v for k, v in match.groupdict().items()})
            if armed is not None and armed.fault is Fault.STALE_LIST and reply.items is not None:
                reply = rest.Reply(reply.status, [], dict(reply.headers), [])  # the replica has not caught up
            elif armed is not None and armed.fault is Fault.SECONDARY_AFTER_WRITE:  # applied; the answer is a 403
                status, extra, fault_body = fault_response(armed, secrets.token_hex(8), quota.reset)
                quota.used += 1
                self.calls[(method, spec)] += 1
                self.sent.append(Sent(method, spec, status, fault_body))
                return status, {**quota.headers(), **extra}, json.dumps(fault_body).encode()
            elif armed is not None:  # DROP_AFTER_WRITE: the write above is applied; no answer goes out
                self.calls[(method, spec)] += 1
                quota.used += 1
                return 0, {}, None
            headers = dict(reply.headers)
            payload = reply.body
            if reply.items is not None:
                payload, link = _page(reply.items, query, self.urls.api + path)
                if link:
                    headers["Link"] = link
            data = b"" if payload is None else json.dumps(payload).encode()
            etag = 'W/"' + hashlib.sha256(data).hexdigest()[:40] + '"'
            if method == "GET" and reply.status == 200:
                headers["ETag"] = etag
                if if_none_match and _etag_matches(if_none_match, etag):
                    self.not_modified[(method, spec)] += 1
                    return 304, {**quota.headers(), "ETag": etag}, b""
            if (method, spec) not in FREE:
                quota.used += 1
            self.calls[(method, spec)] += 1
            self.sent.append(Sent(method, spec, reply.status, payload))
            return reply.status, {**quota.headers(), **headers}, data

    def answer_graphql(self, body: Any, user: User) -> tuple[int, dict[str, str], bytes | None]:
        with self.lock:
            quota = self.quota(user, "graphql")
            armed = self.faults.take("POST", "/graphql")
            if armed is not None and armed.fault is not Fault.DROP_AFTER_WRITE:
                status, extra, payload = fault_response(armed, secrets.token_hex(8), quota.reset)
                quota.used += 1
                self.calls[("POST", "/graphql")] += 1
                return status, {**quota.headers(), **extra}, json.dumps(payload).encode()
            query = str(body.get("query") or "") if isinstance(body, dict) else ""
            if query.lstrip().startswith("mutation"):
                refused = self._secondary_refusal("POST", "/graphql", user, quota)
                if refused is not None:
                    self.calls[("POST", "/graphql")] += 1
                    return refused
            payload = graphql.answer(self, body, user)
            quota.used += 1
            self.calls[("POST", "/graphql")] += 1
            self.graphql_sent.append(payload)
            if armed is not None:
                return 0, {}, None
            return 200, quota.headers(), json.dumps(payload).encode()


def _etag_matches(header: str, etag: str) -> bool:
    def bare(tag: str) -> str:
        return tag.strip().removeprefix("W/")
    return header.strip() == "*" or bare(etag) in {bare(t) for t in header.split(",")}


def _page(items: list[Any], query: dict[str, str], url: str) -> tuple[list[Any], str | None]:
    """One page of a list, and GitHub's Link header to the others."""
    per_page = min(100, max(1, int(query.get("per_page", "30")))) if query.get("per_page", "30").isdigit() else 30
    page = max(1, int(query["page"])) if query.get("page", "").isdigit() else 1
    last = max(1, -(-len(items) // per_page))
    links = []

    def link(n: int, rel: str) -> str:
        return f'<{url}?{urllib.parse.urlencode({**query, "per_page": per_page, "page": n})}>; rel="{rel}"'
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    return items[(page - 1) * per_page:page * per_page], ", ".join(links) or None


def _handler_for(gh: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "FakeGitHub"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._serve()

        do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        def _send(self, status: int, headers: dict[str, str] | list[tuple[str, str]], body: bytes | None) -> None:
            if body is None:  # the write happened; the client never hears
                self.close_connection = True
                return
            self.send_response(status)
            items = headers.items() if isinstance(headers, dict) else headers
            for name, value in items:
                if name.lower() not in ("content-length", "transfer-encoding"):
                    self.send_header(name, value)
            if body and not any(n.lower() == "content-type" for n, _ in items):
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _serve(self) -> None:
            raw = gitside.request_body(self)
            url = urllib.parse.urlsplit(self.path)
            user = gh.authenticate(self.headers.get("Authorization"))
            if url.path.endswith(GIT_SERVICES) and not url.path.startswith(API_PREFIX):
                self._serve_git(url, raw, user)
                return
            if user is None:
                message = "Requires authentication" if not self.headers.get("Authorization") else "Bad credentials"
                self._send(*gh.unauthorized(self.command, url.path.removeprefix(API_PREFIX), message))
                return
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._send(400, {}, json.dumps({"message": "Problems parsing JSON", "documentation_url": DOCS})
                           .encode())
                return
            if url.path in GRAPHQL_PATHS and self.command == "POST":
                self._send(*gh.answer_graphql(body, user))
                return
            if not url.path.startswith(API_PREFIX + "/"):
                self._send(404, {}, json.dumps({"message": "Not Found", "documentation_url": DOCS}).encode())
                return
            query = dict(urllib.parse.parse_qsl(url.query))
            self._send(*gh.answer_api(self.command, url.path.removeprefix(API_PREFIX), query, body, user,
                                      self.headers.get("If-None-Match")))

        def _serve_git(self, url: urllib.parse.SplitResult, raw: bytes, user: User | None) -> None:
            if user is None:
                self._send(401, {"WWW-Authenticate": 'Basic realm="GitHub"', "Content-Type": "text/plain"},
                           b"Invalid username or token.\n")
                return
            service = url.path.rsplit("/", 1)[1]
            with gh.lock:
                gh.git_requests[urllib.parse.parse_qs(url.query).get("service", [service])[0]] += 1
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "git-protocol" or
                       not gh.git_v0_only}
            status, out, payload = gitside.http_backend(gh.git_root, self.command, urllib.parse.unquote(url.path),
                                                        url.query, headers, raw, user.login)
            if self.command == "POST":
                with gh.lock:
                    gh.git_served.append((service, raw, len(payload)))
                    if service == "git-receive-pack":
                        gh.pushed(urllib.parse.unquote(url.path))
            self._send(status, out, payload)

    return Handler
