"""The agent's fast path, desk side: `assay step run`, `assay step value` and `assay step settle` served over a
local socket.

While its agent runs, a desk listens on a Unix socket (named to the agent in `ASSAY_SOCKET`)
and serves the agent's steps from a session it keeps open for the agent's run: the journal is
read once, not per step, and the desk makes the fenced pushes, so the agent holds no forge
credentials. The effect itself runs in the agent's process (`steprequest.py`):

    client: {"op": "step", name, policy, input, fresh, argv, probe}   (one JSON line)
    server: {"do": "run", "key"}        the intent is durable; run the command now
    server: {"do": "cancel"}            (only when the desk stops) stop the command
    client: {"op": "done", "result"} | {"op": "cancelled"}
    server: {"do": "return", "result", "ran"} | {"do": "error", "code", "message", "hint"}

    client: {"op": "settle", name, verdict, input, evidence}  ->  server: {"do": "return", "settled"}
    client: {"op": "progress", text}  ->  server: {"do": "return", "progress"}   (answered at once, even mid-step)
    client: {"op": "spawn", title, body, labels, key}  ->  server: {"do": "return", "spawned": {brief, new}}  (too)
    client: {"op": "wait", on}  ->  server: {"do": "return", "waiting"}   (the desk parks its brief; too)
    client: {"op": "brief"}  ->  server: {"do": "return", "brief": {id, title, body, labels, verify, …}}   (too)
    client: {"op": "journal", last}  ->  server: {"do": "return", "journal": [entry, …]}   (too; read only)
    client: {"op": "steering"}  ->  server: {"do": "return", "steering": [{seq, text, by}]}   (too; each once)
    client: {"op": "turn", event}  ->  server: {"do": "return", "turn": event, "say": steering text or ""}   (too)
    client: {"op": "answer", thread, fixed | reason}  ->  server: {"do": "return", "answered": {thread, seq}}

A step belongs to its desk's life. The client's identity is read from the socket (`SO_PEERCRED`),
in the desk's own pid namespace, so a sandboxed agent's steps name real process lives. A client
watches its desk while its command runs and stops the command if the desk goes. When the desk
stops serving (the agent ended, ran out of time, or the claim was lost) it cancels a step in
flight and journals its end; a client that does not answer is killed first (its command dies
with it). A client that goes away mid-step leaves its intent to the next reader, which journals
`outcome_unknown` once the client's life is over. Calls are served one at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.core import lives
from assay.core.claims import Claims
from assay.core.journal import MAX_PENDING_S, JournalLog
from assay.core.lives import Life, await_end, life_of, life_state
from assay.core.outcomes import round_entries, unknown_outcomes
from assay.core.steps import Session, open_session
from assay.desk.effects import check_effect, check_settle, check_value
from assay.errors import AssayError, Cancelled, UsageError

if TYPE_CHECKING:
    from assay.core.forge.base import Thread
    from assay.core.steps import ProbeRunner, StepHooks
    from assay.core.wip import Recorder

CANCEL_GRACE_S = 10.0  # how long a cancelled client has to stop its command and say so
GONE_GRACE_S = 2.0  # how long a client that hung up has to end before its step is left to the next reader


SOCKET_PREFIX = "assay-"  # short: a socket path has ~100 characters
LITTER_AGE_S = 60.0  # a socket file this old that nothing listens on was left by a desk that died
_swept = threading.Event()


def socket_dir() -> Path:
    """A new private folder for a step server's socket. The first in a process also clears the folders that desks
    killed before they could stop serving left (`clear_dead_sockets`): a SIGKILL runs no clean-up."""
    if not _swept.is_set():
        _swept.set()
        clear_dead_sockets(Path(tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=SOCKET_PREFIX))


def clear_dead_sockets(parent: Path, now: float | None = None) -> int:
    """Remove this user's step-server folders in `parent` that hold only a socket nobody listens on, made more
    than `LITTER_AGE_S` ago (a folder being made has no socket yet, or a fresh one), or nothing at all for as
    long. The kernel's `/proc/net/unix` (bound sockets, of this network namespace) passes over the live ones at
    once; a connection refused at the path is the proof for each of the others (a paused server's still queues
    it). Returns how many; none where `/proc/net/unix` cannot be read."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            bound = {cols[7] for cols in (line.split(None, 7) for line in table.read().splitlines()[1:])
                     if len(cols) == 8}
    except OSError:
        return 0
    now, uid, cleared = time.time() if now is None else now, os.getuid(), 0
    try:
        names = [n for n in os.listdir(parent) if n.startswith(SOCKET_PREFIX) and len(n) == len(SOCKET_PREFIX) + 8]
    except OSError:
        return 0
    for name in names:
        folder = parent / name
        sock = folder / "s"
        try:
            held = folder.lstat()
            if held.st_uid != uid or not stat.S_ISDIR(held.st_mode):
                continue
            inside = os.listdir(folder)
            if not inside and now - held.st_mtime >= LITTER_AGE_S:  # a desk killed before it bound, or as it cleared
                folder.rmdir()
                cleared += 1
                continue
            if (inside != ["s"] or str(sock) in bound or not stat.S_ISSOCK((info := sock.lstat()).st_mode)
                    or now - info.st_mtime < LITTER_AGE_S or not _refused(sock)):
                continue
            sock.unlink()
            folder.rmdir()
            cleared += 1
        except OSError:
            continue  # gone meanwhile, or not ours to clear
    return cleared


def _refused(path: Path) -> bool:
    """Whether a connection to the socket at `path` is refused: nothing listens there."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        return True
    except OSError:
        return False  # a full backlog (a live server), or gone meanwhile
    finally:
        probe.close()
    return False


class ClientGone(BaseException):
    """The client went away mid-step: nothing is journaled for its effect (not even a failure)."""


class _InFlight:
    """The one step being run by a client: its connection, and who the client is."""

    def __init__(self, stream: Any, life: Life | None) -> None:
        self.stream, self.life = stream, life
        self.cancelled = False


class StepServer:
    """Serves one agent run's steps. Receives where its claims port comes from (`Claims.spare`: one of its own,
    as it serves from threads of its own)."""

    def __init__(self, claims: Callable[[], Claims], brief: str, desk: str, epoch: int, run: str,
                 known: JournalLog | None = None, probe_runner: ProbeRunner | None = None,
                 hooks: StepHooks | None = None, about: dict[str, Any] | None = None,
                 recorder: Recorder | None = None) -> None:
        self.open_claims, self.known = claims, known
        self.recorder = recorder  # the run's worktree: each result of a step that may change it carries a snapshot
        self.about = about or {"id": brief}  # the brief as this run was given it (the `brief` op)
        # steering journaled after this seq is news to the agent (earlier steering is in its prompt)
        self.prompted = known.entries[-1].seq if known and known.entries else 0
        self.brief, self.desk, self.epoch, self.run = brief, desk, epoch, run
        self.probe_runner = probe_runner
        self.hooks = hooks  # the desk's before_step and after_step, around each step it serves
        self.progress = ""  # what the agent said of a long step (`assay step progress`), until its result
        # told when the agent's CLI says a turn ended (its hooks); returns text for the model, if the hook can hand it
        self.on_turn: Callable[[str], str] | None = None
        self.threads: dict[str, Thread] = {}  # the review threads this run was prompted with, by id
        self._dir = socket_dir()
        self.path = self._dir / "s"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._left = threading.Event()  # an entry was left pending since the flusher last looked (`on_pending`)
        self._session: Session | None = None
        self._claims: Claims | None = None
        self._threads: list[threading.Thread] = []
        self._serving: list[threading.Thread] = []
        self._open_conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()  # the set is changed by serving threads while stop() reads it
        self._inflight: _InFlight | None = None
        self._send_lock = threading.Lock()  # stop() sends "cancel" while a serving thread may be replying
        self._tools = 0  # ACP tool calls running now (`tool_step`'s effects)
        self.touched = time.monotonic()  # when the agent last called

    def busy(self) -> bool:
        """Whether a call is being served now (a long step, or an ACP agent's tool call running): the agent is
        working, however quiet."""
        with self._conns_lock:
            return bool(self._open_conns) or self._tools > 0

    def start(self) -> None:
        for target in (self._accept, self._flusher):
            thread = lives.thread(target)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> list[str]:
        """Stop serving. A step in flight is cancelled and its end journaled; a client that does not answer
        within `CANCEL_GRACE_S` is killed first. What safe steps left pending is pushed (best effort: safe to
        redo). Returns what happened to steps in flight, a line each."""
        told: list[str] = []
        self._stop.set()
        self._left.set()  # the flusher, waiting for an entry, sees the stop
        self._close(self._listener)
        self._listener.close()
        inflight = self._inflight
        if inflight is not None:
            told.append(self._cancel(inflight))
        with self._conns_lock:
            open_now = list(self._open_conns)
        for sock in open_now:
            self._close(sock)
        for thread in self._threads + self._serving:
            thread.join(timeout=CANCEL_GRACE_S)
        if self._lock.acquire(timeout=10):
            try:
                self._discard(flush=True)
            finally:
                self._lock.release()
        shutil.rmtree(self._dir, ignore_errors=True)
        return told

    def _cancel(self, inflight: _InFlight) -> str:
        """Ask the client running a step to stop; kill it if it does not answer (its command dies with it)."""
        inflight.cancelled = True
        who = f"process {inflight.life.pid}" if inflight.life else "its client"
        try:
            with self._send_lock:
                _send(inflight.stream, {"do": "cancel"})
        except (OSError, ValueError):
            pass
        if self._lock.acquire(timeout=CANCEL_GRACE_S):  # the serving thread journals the end, then lets go
            self._lock.release()
            return f"a step in flight ({who}) was cancelled; its end is journaled"
        if inflight.life is None or life_state(inflight.life) != "alive":
            return f"a step in flight ({who}) did not answer its cancellation; its client is gone"
        try:
            os.kill(inflight.life.pid, signal.SIGKILL)
        except OSError:
            pass
        await_end(inflight.life, GONE_GRACE_S)
        return f"a step in flight ({who}) did not answer its cancellation and was killed"

    @staticmethod
    def _close(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes accept() and readline() (closing alone does not)
        except OSError:
            pass

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
            self.touched = time.monotonic()  # a sign of the agent's work, for its idle limit
            thread = lives.thread(self._serve, conn)
            self._serving = [t for t in self._serving if t.is_alive()] + [thread]
            thread.start()

    def _flusher(self) -> None:
        """Safe steps are group-committed; push them within MAX_PENDING_S even if no call follows. It sleeps until
        the journal leaves an entry pending (its `on_pending`: a step, a tool call, a note), not looking every
        second."""
        while True:
            self._left.wait()
            if self._stop.wait(MAX_PENDING_S / 2):
                return
            with self._lock:
                self._left.clear()  # an entry left from here on sets it again
                if self._session is not None and self._session.journal.pending:
                    try:
                        self._session.flush()
                    except AssayError:
                        self._discard(flush=False)  # safe entries only: redone if ever asked for again

    def _serve(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._open_conns.add(conn)
        try:
            with conn, conn.makefile("rwb") as stream:
                reply = self._reply(conn, stream)
                if reply is not None:
                    with self._send_lock:
                        _send(stream, reply)
        except (OSError, ValueError):
            pass  # the client hung up (a broken pipe, a reset): what it asked for is journaled or left to a reader
        finally:
            with self._conns_lock:
                self._open_conns.discard(conn)

    def _reply(self, conn: socket.socket, stream: Any) -> dict[str, Any] | None:
        life = _peer_life(conn)  # at once: a client that dies while it queues can name no writer later
        try:
            request = _object(json.loads(stream.readline() or b"{}"))
            if request.get("op") == "progress":  # not a call: kept for the next heartbeat, even while a step runs
                self.progress = progress_text(request.get("text"))
                return {"do": "return", "progress": self.progress}
            if request.get("op") == "spawn":  # from inside a step's command: no journal entry, a write to main
                return self._spawn(request)
            if request.get("op") == "wait":  # the agent parks its own brief; its desk ends the run after it
                return self._wait(str(request.get("on", "")))
            if request.get("op") == "brief":
                return {"do": "return", "brief": self.about}
            if request.get("op") == "journal":
                return self._journal(int(request.get("last") or 0))
            if request.get("op") == "steering":
                return self._steering()
            if request.get("op") == "turn":  # the CLI's own event (a hook, a notify program): answered at once
                event = str(request.get("event") or "turn")[:64]
                say = self.on_turn(event) if self.on_turn is not None else ""
                return {"do": "return", "turn": event, "say": say}
            if life is None and request.get("op") == "step":
                return {"do": "error", "code": 1, "message": "the desk cannot tell which process is calling "
                        "(no SO_PEERCRED), so it cannot name the step's writer", "hint": "run the step again"}
            with self._lock:
                if self._stop.is_set():
                    return None
                try:
                    return self._answer(request, stream, life)
                except ClientGone:
                    self._discard(flush=True)  # the gone client's intent goes on the forge: a repeat sees it
                    raise
                except BaseException:
                    self._discard(flush=False)  # what a failed push carried never rides a later one
                    raise
                finally:
                    self._inflight = None
        except ClientGone:
            return None
        except Cancelled as exc:
            return {"do": "error", "code": 143, "message": f"{exc.reason}; the step's end is recorded", "hint": ""}
        except AssayError as exc:
            return {"do": "error", "code": exc.code, "message": exc.message, "hint": exc.hint}
        except (ValueError, TypeError, KeyError, RecursionError) as exc:  # junk from the client
            return {"do": "error", "code": 1, "message": f"bad request to the desk: {exc}", "hint": ""}

    def _wait(self, on: str) -> dict[str, Any]:
        """Park this desk's brief on `on`, at this epoch (`custody.wait`), as its agent asked."""
        from assay.config import github_target
        from assay.core import custody

        claims = self.open_claims()
        try:
            parked = custody.wait(claims, self.brief, on, f"agent:{self.desk}", self.desk, self.epoch,
                                  checks=github_target(claims.git.url) is not None)
        finally:
            claims.git.close()
        return {"do": "return", "waiting": f"{self.brief} is waiting on {on} (epoch {parked.record.epoch})"}

    def _journal(self, last: int) -> dict[str, Any]:
        """This brief's journal as the forge has it (the last `last` entries, 0 for all), read only."""
        from assay.core.journal import entry_view, read_log

        claims = self.open_claims()
        try:
            entries = read_log(claims.git, self.brief).entries
        finally:
            claims.git.close()
        return {"do": "return", "journal": [entry_view(e) for e in (entries[-last:] if last > 0 else entries)]}

    def _steering(self) -> dict[str, Any]:
        """What people said since this run was prompted and the agent has not been told: returned once, its
        delivery journaled (`note` {"steer": "delivered"}), as the desk does when it resumes the agent with it."""
        from assay.core.journal import Journal

        claims = self.open_claims()
        try:
            journal = Journal.open(claims, self.brief, self.desk, self.epoch, self.run, indexed=True)
            told = {int((e.data or {}).get("of", 0)) for e in journal.entries
                    if e.kind == "note" and (e.data or {}).get("steer") == "delivered"}
            news = [e for e in journal.entries if e.kind == "steer" and e.seq > self.prompted and e.seq not in told]
            for e in news:
                journal.add("note", sync=False, data={"steer": "delivered", "of": e.seq, "via": "tool"})
            journal.flush()
        finally:
            claims.git.close()
        return {"do": "return", "steering": [{"seq": e.seq, "text": str((e.data or {}).get("text", "")),
                                              "by": str((e.data or {}).get("by", ""))} for e in news]}

    def _spawn(self, request: dict[str, Any]) -> dict[str, Any]:
        """A child brief of this desk's brief, named by the spawning step's key (`custody.spawn`)."""
        from assay.core import custody

        claims = self.open_claims()
        try:
            child, new = custody.spawn(claims, self.brief, str(request.get("key") or ""), str(request.get("title", "")),
                                       str(request.get("body", "")), tuple(str(x) for x in request.get("labels", [])),
                                       self.desk)
        finally:
            claims.git.close()
        return {"do": "return", "spawned": {"brief": child, "new": new}}

    def _answer(self, request: dict[str, Any], stream: Any, life: Life | None) -> dict[str, Any]:
        session = self._open()
        op = request.get("op")
        if op == "value":
            kind, n_bytes = check_value(request.get("kind"), request.get("bytes", 16))  # before anything is journaled
            if kind == "now":
                value: Any = f"{session.now():.6f}"
            elif kind == "uuid":
                value = session.uuid()
            else:
                value = session.random_bytes(n_bytes).hex()
            session.flush()  # recorded before it is used: a replay must get this very value
            return {"do": "return", "value": value}
        if op == "answer":
            return self._answer_thread(session, request)
        if op == "settle":
            settle = check_settle(str(request.get("name", "")), str(request.get("verdict", "")), request.get("input"))
            entry = session.settle(settle.name, settle.verdict, by=f"agent:{self.desk}",
                                   evidence=dict(request.get("evidence") or {}), sha=settle.sha)
            return {"do": "return", "settled": {"seq": entry.seq, "intent": entry.intent, "verdict": settle.verdict}}
        effect = check_effect(str(request.get("name", "")), str(request.get("policy", "unsafe")),
                              request.get("input"), request.get("argv") or [], bool(request.get("fresh")),
                              request.get("probe"))
        ran: list[bool] = []

        def remote(key: str) -> dict[str, Any]:
            ran.append(True)
            inflight = self._inflight = _InFlight(stream, life)
            try:
                with self._send_lock:
                    if self._stop.is_set():  # the desk stops: the command never starts, and that is known
                        raise Cancelled("the desk stopped before it started", started=False)
                    _send(stream, {"do": "run", "key": key})
            except OSError:  # a broken pipe or a reset: the client hung up before it was told to run
                raise Cancelled("its client hung up before it started", started=False) from None
            try:
                line = stream.readline()
            except OSError:
                line = b""
            if not line:
                raise self._gone(inflight, effect.policy)
            message = _object(json.loads(line))
            if message.get("op") == "cancelled":  # SIGTERM or Ctrl-C reached the client, or this desk stops
                if effect.policy != "unsafe":
                    raise ClientGone()  # left open: a later call resumes it with the same idempotency key
                raise Cancelled("cancelled by its desk" if inflight.cancelled else "cancelled")
            return dict(message.get("result") or {})

        try:
            result = session.step(effect.name, remote, input=effect.input, policy=effect.policy,
                                  reuse=not effect.fresh, writer=life.to_data() if life else None, probe=effect.probe)
        finally:
            self.progress = ""  # replaced by the step's result
        if effect.policy != "safe":
            session.flush()
        return {"do": "return", "result": result, "ran": bool(ran)}

    def tool_step(self, name: str, policy: str, input: dict[str, Any], effect: Callable[[str], dict[str, Any]],
                  writer: Life | None) -> tuple[dict[str, Any], bool]:
        """A tool call an ACP adapter asked to run, as a step of this run: its intent on the forge first, then
        `effect(key)` (which allows it and waits for its end), its result after; (result, whether it ran). A call
        that completed before returns its recorded result without running; an unsafe one whose outcome is unknown
        raises Refused once (`Session.step`), also when it was called under an earlier agent step (`unknown_before`).
        Served one at a time, as the agent's own steps are."""
        with self._lock:
            if self._stop.is_set():
                raise Cancelled("the desk stopped before it started", started=False)
            session = self._open()
            ran: list[bool] = []

            def run(key: str) -> dict[str, Any]:
                ran.append(True)
                with self._conns_lock:
                    self._tools += 1  # running: a sign of work for the idle limit, however long it is quiet
                try:
                    return effect(key)
                finally:
                    with self._conns_lock:
                        self._tools -= 1

            if policy == "unsafe":
                input = unknown_before(session, name, input) or input
            try:
                result = session.step(name, run, input=input, policy=policy,
                                      writer=writer.to_data() if writer else None)
                if policy != "safe":
                    session.flush()
            except BaseException:
                self._discard(flush=bool(ran))  # a cut-off call's intent stays on the forge for the next reader
                raise
            self.touched = time.monotonic()
            return dict(result), bool(ran)

    def observe(self, data: dict[str, Any]) -> None:
        """A note of this run (a tool call that ran without asking), pushed with the run's next write."""
        with self._lock:
            session = self._open()
            session.journal.add("note", sync=False, data=data)
            self.touched = time.monotonic()

    def _answer_thread(self, session: Session, request: dict[str, Any]) -> dict[str, Any]:
        """Journal the agent's answer to a review thread its prompt listed (the desk replies on the review, naming
        the commit it pushes, before it marks the review ready)."""
        ident, fixed, reason = (str(request.get(k) or "").strip() for k in ("thread", "fixed", "reason"))
        thread = self.threads.get(ident.lstrip("#"))
        if thread is None:
            waiting = ", ".join(self.threads) or "none"
            raise UsageError(f"no review thread {ident!r} waits on an answer in this run (threads: {waiting})",
                             hint="answer the threads listed under Review threads in your prompt")
        if bool(fixed) == bool(reason):
            raise UsageError("an answer says what changed (--fixed TEXT) or why nothing does (--reason TEXT): "
                             "one of them", hint=f"assay step answer {thread.id} --fixed 'what you changed'")
        said = {"thread": thread.id, "last": thread.last.id, **({"fixed": fixed} if fixed else {"reason": reason})}
        entry = session.journal.add("note", sync=True, data={"answer": said})
        return {"do": "return", "answered": {"thread": thread.id, "seq": entry.seq}}

    @staticmethod
    def _gone(inflight: _InFlight, policy: str) -> BaseException:
        """The client hung up mid-step. An unsafe step's end is journaled now, once the client's life is over
        (its command dies with it); a safe or idempotent one, or a client that lives on, leaves its intent to
        the next call, which resumes it with the same idempotency key or records the outcome."""
        if policy == "unsafe" and (inflight.cancelled or (inflight.life is not None
                                                          and await_end(inflight.life, GONE_GRACE_S))):
            return Cancelled("its process ended without a result")
        return ClientGone()

    def _open(self) -> Session:
        if self._session is None:
            self._claims = self.open_claims()
            self._session = open_session(self._claims, self.brief, self.desk, self.epoch, self.run,
                                         call_notes=True, known=self.known)  # notes: a reopened one counts
            self._session.probe_runner = self.probe_runner
            self._session.hooks = self.hooks
            self._session.journal.recorder = self.recorder
            self._session.journal.on_pending = self._left.set
        return self._session


def unknown_before(session: Session, name: str, given: dict[str, Any]) -> dict[str, Any] | None:
    """The input of this very tool call as an earlier agent step made it (another attempt, or a run that was
    cancelled: its `within` differs) when that call's outcome is unknown and nothing answered it since (no settle,
    no repeat). The call is then that call's repeat: refused once, and a deliberate repeat answers its unknown, as
    after a crash. Else a new attempt's agent would run the cut-off command again unrefused, its prompt saying
    otherwise, and the unknown would hold the review up until someone settled it."""
    journal = session.journal
    entries = journal.entries
    if journal.base is not None:  # an indexed session holds the tail: the rest from its index or snapshot
        entries = [e for e, _ in journal.base.between(0, journal.base.last_seq)] + \
            [e for e in entries if e.seq > journal.base.last_seq]
    bare = {k: v for k, v in given.items() if k != "within"}
    for end in reversed(unknown_outcomes(round_entries(entries))):
        intent = next((e for e in entries if e.seq == end.intent), None) if end.step == name else None
        recorded = (intent.data or {}).get("input") if intent is not None else None
        if isinstance(recorded, dict) and recorded != given and \
                {k: v for k, v in recorded.items() if k != "within"} == bare:
            return recorded
    return None


PROGRESS_LIMIT = 200  # characters of progress a heartbeat carries


def progress_text(text: object) -> str:
    """Progress as a heartbeat carries it: one line, printable, at most PROGRESS_LIMIT characters."""
    line = " ".join(str(text or "").split())
    return "".join(c for c in line if c.isprintable())[:PROGRESS_LIMIT]


def _peer_life(conn: socket.socket) -> Life | None:
    """The connecting process's life, from the kernel (`SO_PEERCRED`), in this process's pid namespace."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    pid = struct.unpack("3i", creds)[0]
    return life_of(pid) if pid > 0 else None


def _send(stream: Any, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def _object(value: Any) -> dict[str, Any]:
    """A client's message, which is a JSON object; ValueError (a bad request) if it is anything else."""
    if not isinstance(value, dict):
        raise ValueError(f"a message to the desk is a JSON object, not {type(value).__name__}")
    return value
