"""Shared plumbing for the scripted model servers: a loopback HTTP server in a thread, requests, SSE.

A concrete server subclasses `ModelServer` and implements `handle(request) -> Reply`. Requests are
handled one at a time (a lock), so `handle` may update `self.transcript` freely. Every request is kept
(`.requests`) and logged (`.log`: "SECONDS METHOD /path", seconds since the server started) for
debugging; an exception in `handle` is kept in `.errors` and answered with a 400, which the CLIs do
not retry.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from tests.agentmodels.brain import Transcript


@dataclass(frozen=True)
class Request:
    """One HTTP request as the server received it."""

    method: str
    path: str  # without the query string
    query: dict[str, list[str]]
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON."""
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True)
class Reply:
    """What to send back. `body` is sent as is, with a Content-Length."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


def json_reply(value: Any, status: int = 200) -> Reply:
    return Reply(status=status, body=json.dumps(value).encode())


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `data` is sent as JSON unless it is already a string (e.g. "[DONE]")."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event is not None else ""
    return (head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n").encode()


def sse_reply(events: Iterable[bytes], headers: Mapping[str, str] | None = None) -> Reply:
    """A whole event stream as one reply (the CLIs accept a Content-Length on an SSE body)."""
    return Reply(body=b"".join(events), content_type="text/event-stream",
                 headers={"Cache-Control": "no-cache", **(headers or {})})


class ModelServer:
    """A `ThreadingHTTPServer` on 127.0.0.1, an ephemeral port, in a daemon thread; a context manager."""

    def __init__(self) -> None:
        self.transcript = Transcript()
        self.requests: list[Request] = []
        self.log: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- to implement ------------------------------------------------------------------------------
    def handle(self, request: Request) -> Reply:
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "the server is not running"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What a client of this API is pointed at (the root, unless the API says otherwise)."""
        return self.url

    def start(self) -> None:
        server = self
        self._started = time.monotonic()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                request = Request(method=self.command, path=parts.path, query=parse_qs(parts.query),
                                  headers={k.lower(): v for k, v in self.headers.items()}, body=body)
                reply = server._dispatch(request)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(reply.body)
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"{type(self).__name__}:{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _dispatch(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            self.log.append(f"{time.monotonic() - self._started:7.2f}s {request.method} {request.path}")
            try:
                return self.handle(request)
            except Exception:  # kept for the test to show; a 400 is not retried by the CLIs
                detail = traceback.format_exc()
                self.errors.append(f"{request.method} {request.path}: {detail}")
                return json_reply({"error": {"type": "invalid_request_error", "message": detail}}, status=400)

    def wait_unlocked(self, event: threading.Event, timeout: float) -> bool:
        """For a brain, inside a request: wait for `event` while the server answers other requests (the request
        being held keeps its place; what it answers is decided after the wait)."""
        self._lock.release()
        try:
            return event.wait(timeout)
        finally:
            self._lock.acquire()

    def debug(self) -> str:
        """What a failing test prints: the request log and any handler errors."""
        return "\n".join(["requests:", *self.log, *(["errors:", *self.errors] if self.errors else [])])
