"""The agent's fast path, desk side: `assay step run` and `assay step value` served over a local socket.

While its agent runs, a desk listens on a Unix socket (named to the agent in `ASSAY_SOCKET`)
and serves the agent's steps from a session it keeps open for the agent's run: the journal is
read once, not per step, and the desk makes the fenced pushes, so the agent holds no forge
credentials. The effect itself runs in the agent's process (`stepclient.py`):

    client: {"op": "step", name, policy, input, fresh, argv, life}   (one JSON line)
    server: {"do": "run", "key"}        the intent is durable; run the command now
    client: {"op": "done", "result"}    exit code, tail, duration
    server: {"do": "return", "result", "ran"} | {"do": "error", "code", "message", "hint"}

A client that goes away between "run" and "done" leaves its intent unresolved, exactly as a
killed `assay step run` does; its life (pid, start time) is the intent's writer, so the next
call sees that it is over. Calls are served one at a time.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

from assay.claims import Claims
from assay.effects import check_effect
from assay.errors import AssayError, Cancelled
from assay.git import ForgeGit
from assay.journal import MAX_PENDING_S, JournalLog
from assay.steps import Session, open_session


class ClientGone(BaseException):
    """The client went away mid-step: nothing is journaled for its effect (not even a failure)."""


class StepServer:
    """Serves one agent run's steps. Receives the forge's URL and cache root (its own git port)."""

    def __init__(self, url: str, cache_root: Path, brief: str, desk: str, epoch: int, run: str,
                 known: JournalLog | None = None) -> None:
        self.url, self.cache_root, self.known = url, cache_root, known
        self.brief, self.desk, self.epoch, self.run = brief, desk, epoch, run
        self._dir = Path(tempfile.mkdtemp(prefix="assay-"))  # short: a socket path has ~100 characters
        self.path = self._dir / "s"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._session: Session | None = None
        self._claims: Claims | None = None
        self._threads: list[threading.Thread] = []
        self._open_conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()  # the set is changed by serving threads while stop() reads it

    def start(self) -> None:
        for target in (self._accept, self._flusher):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop serving at once. A step still in flight is cut off: its intent stays unresolved, as if
        its client had been killed. What safe steps left pending is pushed (best effort: safe to redo)."""
        self._stop.set()
        with self._conns_lock:
            open_now = [self._listener, *self._open_conns]
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes accept() and readline() (closing alone does not)
            except OSError:
                pass
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._lock.acquire(timeout=10):
            try:
                self._discard(flush=True)
            finally:
                self._lock.release()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _discard(self, flush: bool) -> None:
        """Drop the session (the next call reads the journal afresh), pushing what it left pending if asked.

        After any failure the session is dropped, so that drafts of a failed push never ride a later one.
        """
        if self._session is not None and flush:
            try:
                self._session.flush()
            except AssayError:
                pass
        if self._claims is not None:
            self._claims.git.close()
        self._session, self._claims = None, None

    # -- serving ------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _flusher(self) -> None:
        """Safe steps are group-committed; push them within MAX_PENDING_S even if no call follows."""
        while not self._stop.wait(MAX_PENDING_S / 2):
            with self._lock:
                if self._session is not None and self._session.journal.pending:
                    try:
                        self._session.flush()
                    except AssayError:
                        self._discard(flush=False)  # safe entries only: redone if ever asked for again

    def _serve(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._open_conns.add(conn)
        with conn, conn.makefile("rwb") as stream:
            try:
                request = json.loads(stream.readline() or b"{}")
                with self._lock:
                    if self._stop.is_set():
                        raise ClientGone()
                    try:
                        reply = self._answer(request, stream)
                    except ClientGone:
                        self._discard(flush=True)  # the gone client's intent goes on the forge: a repeat sees it
                        raise
                    except BaseException:
                        self._discard(flush=False)  # what a failed push carried never rides a later one
                        raise
            except ClientGone:
                return
            except Cancelled:
                reply = {"do": "error", "code": 143, "message": "cancelled; the step's end is recorded", "hint": ""}
            except AssayError as exc:
                reply = {"do": "error", "code": exc.code, "message": exc.message, "hint": exc.hint}
            except (ValueError, OSError) as exc:
                reply = {"do": "error", "code": 1, "message": f"bad request to the desk: {exc}", "hint": ""}
            finally:
                with self._conns_lock:
                    self._open_conns.discard(conn)
            try:
                _send(stream, reply)
            except OSError:
                pass

    def _answer(self, request: dict[str, Any], stream: Any) -> dict[str, Any]:
        session = self._open()
        if request.get("op") == "value":
            kind = request.get("kind")
            if kind == "now":
                value: Any = f"{session.now():.6f}"
            elif kind == "uuid":
                value = session.uuid()
            else:
                value = session.random_bytes(int(request.get("bytes", 16))).hex()
            session.flush()  # recorded before it is used: a replay must get this very value
            return {"do": "return", "value": value}
        effect = check_effect(str(request.get("name", "")), str(request.get("policy", "unsafe")),
                              request.get("input"), list(request.get("argv") or []), bool(request.get("fresh")))
        ran: list[bool] = []

        def remote(key: str) -> dict[str, Any]:
            ran.append(True)
            _send(stream, {"do": "run", "key": key})
            line = stream.readline()
            if not line:
                raise ClientGone()
            message = json.loads(line)
            if message.get("op") == "cancelled":  # SIGTERM or Ctrl-C reached the client mid-effect
                raise Cancelled()
            return dict(message.get("result") or {})

        result = session.step(effect.name, remote, input=effect.input, policy=effect.policy,
                              reuse=not effect.fresh, writer=request.get("life"))
        if effect.policy != "safe":
            session.flush()
        return {"do": "return", "result": result, "ran": bool(ran)}

    def _open(self) -> Session:
        if self._session is None:
            self._claims = Claims(ForgeGit(self.url, self.cache_root))
            self._session = open_session(self._claims, self.brief, self.desk, self.epoch, self.run,
                                         call_notes=True, known=self.known)  # notes: a reopened one counts
        return self._session


def _send(stream: Any, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()
