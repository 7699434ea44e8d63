"""Faults a test arms on the fake: "the next N requests matching METHOD PATH get fault F"."""

from __future__ import annotations

import enum
import re
import threading
from dataclasses import dataclass, field


class Fault(enum.Enum):
    VALIDATION_FAILED = "422 Validation Failed"
    NOT_FAST_FORWARD = "422 Update is not a fast forward"
    SECONDARY_RATE_LIMIT = "403 secondary rate limit, Retry-After"
    TOO_MANY_REQUESTS = "429 Too Many Requests, Retry-After"
    PRIMARY_RATE_LIMIT = "403 primary rate limit, X-RateLimit-Remaining: 0"
    BAD_GATEWAY = "502 Bad Gateway"
    DROP_AFTER_WRITE = "the write is applied, then the connection closes with no response"
    SECONDARY_AFTER_WRITE = "the write is applied, then a secondary-limit 403 answers it (a limit met mid-write)"
    STALE_LIST = "a list read from a lagging replica: 200, without what was written a moment ago"
    GRAPHQL_RATE_LIMITED = "GraphQL's spent limit: 200 with an error of type RATE_LIMITED"
    NOT_FOUND = "404 Not Found (what GitHub answers where the token may not look)"
    NOT_ACCESSIBLE = "403 Resource not accessible by integration: the token lacks the permission `accepted` names"


DOCS = "https://docs.github.com/rest"
SECONDARY_MESSAGE = ("You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
                     "If you reach out to GitHub Support for help, please include the request ID {rid}.")


@dataclass
class Armed:
    method: str
    path: re.Pattern[str]
    fault: Fault
    remaining: int
    retry_after: int
    fired: int = 0
    accepted: str = ""  # NOT_ACCESSIBLE: the permission GitHub names (`X-Accepted-GitHub-Permissions`)


@dataclass
class FaultQueue:
    """Armed faults, first armed first matched; each fires on its next `times` matching requests."""

    _armed: list[Armed] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arm(self, method: str, path: str, fault: Fault, times: int = 1, retry_after: int = 1,
            accepted: str = "") -> Armed:
        """`path` is a regex searched in the request path (without the API prefix or query)."""
        armed = Armed(method.upper(), re.compile(path), fault, times, retry_after, accepted=accepted)
        with self._lock:
            self._armed.append(armed)
        return armed

    def take(self, method: str, path: str) -> Armed | None:
        """The fault this request gets, if any (consuming one of its shots)."""
        with self._lock:
            for armed in self._armed:
                if armed.remaining > 0 and armed.method == method and armed.path.search(path):
                    armed.remaining -= 1
                    armed.fired += 1
                    return armed
        return None

    def pending(self) -> list[Armed]:
        with self._lock:
            return [a for a in self._armed if a.remaining > 0]


def fault_response(armed: Armed, request_id: str, reset: int) -> tuple[int, dict[str, str], dict[str, object]]:
    """Status, extra headers and the body GitHub sends for this fault (not DROP_AFTER_WRITE)."""
    fault = armed.fault
    if fault is Fault.VALIDATION_FAILED:
        return 422, {}, {"message": "Validation Failed", "documentation_url": DOCS,
                         "errors": [{"resource": "PullRequest", "code": "custom", "message": "Validation failed"}]}
    if fault is Fault.NOT_FAST_FORWARD:
        return 422, {}, {"message": "Update is not a fast forward", "documentation_url": DOCS}
    if fault in (Fault.SECONDARY_RATE_LIMIT, Fault.SECONDARY_AFTER_WRITE):
        return 403, {"Retry-After": str(armed.retry_after)}, {
            "message": SECONDARY_MESSAGE.format(rid=request_id), "documentation_url": DOCS}
    if fault is Fault.TOO_MANY_REQUESTS:
        return 429, {"Retry-After": str(armed.retry_after)}, {
            "message": SECONDARY_MESSAGE.format(rid=request_id), "documentation_url": DOCS}
    if fault is Fault.PRIMARY_RATE_LIMIT:
        return 403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}, {
            "message": "API rate limit exceeded for user ID 1.", "documentation_url": DOCS}
    if fault is Fault.NOT_FOUND:
        return 404, {}, {"message": "Not Found", "documentation_url": DOCS, "status": "404"}
    if fault is Fault.NOT_ACCESSIBLE:
        return 403, {"X-Accepted-GitHub-Permissions": armed.accepted}, {
            "message": "Resource not accessible by integration", "documentation_url": DOCS, "status": "403"}
    if fault is Fault.BAD_GATEWAY:
        return 502, {}, {"message": "Server Error"}
    if fault is Fault.GRAPHQL_RATE_LIMITED:
        limited = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset), "X-RateLimit-Resource": "graphql"}
        return 200, limited, {
            "data": None, "errors": [{"type": "RATE_LIMITED", "code": "graphql_rate_limit",
                                      "message": "API rate limit already exceeded for user ID 1."}]}
    raise ValueError(f"{fault} has no response")
