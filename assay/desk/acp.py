"""Agents over the Agent Client Protocol: the desk is the agent's client, and every tool call is journaled.

An `acp` desk (`agent.protocol: acp`) starts its adapter (`claude-agent-acp`, `codex-acp`) isolated like any agent
(its own PID namespace, which the desk ends as a unit: a command the adapter started in a session of its own dies
with it), speaks JSON-RPC to it over its stdin and stdout, and sends the brief's prompt as `session/prompt`.

    session/request_permission (a tool call, before it runs)
        -> the call's intent is journaled (a step: `shell` for `execute`, `edit`, `fetch`, … by its kind, the
           command or path its input), then the desk allows it and waits for its end, whose result is journaled
        -> a call that completed in an earlier run is not allowed again: the agent is told its recorded result;
           an unsafe call whose outcome is unknown is refused once, with the refusal's text (as `assay step run`)
    session/update tool_call with no permission asked (Claude's read-only commands, Codex's known-safe ones)
        -> journaled as observed, once it ends: a note, never an intent that came first

A refused or replayed call is rejected, and when the turn ends the next prompt tells the agent why. The desk
serves `fs/*` and `terminal/*` itself (`acpserve.py`: journaled before the effect, within the worktree), though
neither adapter measured sends them.
`POLICIES` is the default policy of each tool kind; a desk's `agent.tools` rules come first.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from assay.core import lives, stops
from assay.core.credentials import redact
from assay.desk.acpserve import ANSWERED, Served, ServeError
from assay.errors import AssayError, Cancelled, Refused

POLICIES = {"read": "safe", "search": "safe", "think": "safe", "edit": "safe", "delete": "safe", "move": "safe",
            "fetch": "idempotent", "execute": "unsafe", "other": "unsafe"}  # a tool kind's policy, by default
STEPS = {"execute": "shell", "edit": "edit", "delete": "delete", "move": "move", "fetch": "fetch", "read": "read",
         "search": "search", "think": "think", "other": "tool"}  # the journal's step name for a tool kind
ALLOW = ("allow_once", "allow_always")  # permission option kinds, by preference
REJECT = ("reject_once", "reject_always")
TAIL = 4000
EXIT_CODE = re.compile(r"^Exit code (\d+)", re.M)
PROTOCOL_VERSION = 1


class AcpError(Exception):
    """The adapter answered a request with an error, or went away before answering: the run ends (`_run_acp`
    catches it; never a command's error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def policy_of(kind: str, command: str, rules: tuple[tuple[str, str, str], ...]) -> str:
    """The journal policy of a tool call: the first of the desk's rules whose kind and pattern match, else its
    kind's default (`POLICIES`)."""
    for rule_kind, pattern, policy in rules:
        if rule_kind in (kind, "*") and fnmatch.fnmatchcase(command, pattern):
            return policy
    return POLICIES.get(kind, "unsafe")


def call_input(kind: str, raw: Any, title: str) -> dict[str, Any]:
    """What identifies a tool call in the journal: an `execute` call's command; another's path and a hash of its
    whole input (an edit's new text, say)."""
    raw = raw if isinstance(raw, dict) else {}
    if kind == "execute":
        return {"command": command_of(raw, title)}
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()
    path = raw.get("file_path") or raw.get("path") or raw.get("url") or title
    return {"path": str(path), "input_sha256": digest}


def command_of(raw: Any, title: str) -> str:
    """The shell command of an `execute` call, as its adapter gives it (Claude: a string; Codex: an argv)."""
    command = raw.get("command") if isinstance(raw, dict) else None
    if isinstance(command, list):
        words = [str(w) for w in command]
        if len(words) >= 3 and words[0].endswith("sh") and words[1] in ("-c", "-lc"):
            return words[2]
        return " ".join(words)
    return str(command or title or "")


def outcome_of(update: Mapping[str, Any]) -> dict[str, Any]:
    """A finished tool call's result, as `assay step run` records one: exit code (the adapter's, else the
    `Exit code N` it wrote, else 0 for completed and 1 for failed) and the output's tail."""
    meta = _dict(update.get("_meta"))
    raw = update.get("rawOutput")
    text = raw.get("aggregated_output") or raw.get("formatted_output") or "" if isinstance(raw, dict) else raw or ""
    exit_info = meta.get("terminal_exit") if isinstance(meta, dict) else None
    code: Any = exit_info.get("exit_code") if isinstance(exit_info, dict) else None
    if code is None and isinstance(raw, dict):
        code = raw.get("exit_code")
    if code is None:
        found = EXIT_CODE.search(str(text))
        code = int(found.group(1)) if found else (0 if update.get("status") == "completed" else 1)
    try:
        number = int(code)
    except (TypeError, ValueError):  # a signal's name, say: not an exit code
        number = 1 if update.get("status") != "completed" else 0
    return {"exit_code": number, "tail": redact(str(text))[-TAIL:], "status": str(update.get("status") or "")}


class Connection:
    """JSON-RPC 2.0 over newline-delimited JSON on an adapter's pipes. A reader thread reads its stdout; each request
    from the agent is answered on a thread of its own (a permission waits on the journal and on its command), so the
    notifications behind it are never held up."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], on_request: Callable[[str, Any, dict[str, Any]], Any],
                 on_notice: Callable[[str, dict[str, Any]], None]) -> None:
        self._in, self._out = stdin, stdout
        self.on_request, self.on_notice = on_request, on_notice
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self.closed = threading.Event()
        self.trace = os.environ.get("ASSAY_ACP_TRACE", "")
        self._reader = lives.thread(self._read)
        self._reader.start()

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        self._trace("->", data)
        with self._lock:
            try:
                self._in.write(data)
                self._in.flush()
            except (OSError, ValueError):
                pass  # the adapter is gone: its reader ends, and whoever waits is told

    def _trace(self, way: str, data: bytes) -> None:
        """Every message both ways, to the file `ASSAY_ACP_TRACE` names (for a person reading what happened)."""
        if self.trace:
            with open(self.trace, "ab") as out:
                out.write(f"{time.time():.3f} {way} ".encode() + data.rstrip(b"\n") + b"\n")

    def request(self, method: str, params: dict[str, Any], alive: Callable[[], bool]) -> Any:
        """Send a request; wait for its answer while `alive()`. An error answer, or an adapter gone, raises
        AcpError."""
        with self._lock:
            ident, self._next = self._next, self._next + 1
            box: tuple[threading.Event, list[dict[str, Any]]] = (threading.Event(), [])
            self._waiting[ident] = box
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while not box[0].wait(0.2):
            stops.check()  # a desk that is a thread: its host's stop
            if self.closed.is_set() or not alive():
                raise AcpError(f"the agent's adapter went away during {method}")
        answer = box[1][0]
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise AcpError(f"the agent's adapter refused {method}: {error.get('message', '')} "
                           f"({error.get('code', '?')})")
        return answer.get("result")

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def answer(self, ident: Any, result: Any = None, error: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident}
        message.update({"error": error} if error is not None else {"result": result})
        self.send(message)

    def _read(self) -> None:
        try:
            for raw in self._out:
                self._trace("<-", raw)
                try:
                    self._take(json.loads(raw))
                except Exception:  # noqa: BLE001 - one message the desk cannot take (a stray line, odd values)
                    continue  # must not end the reading: the adapter would seem gone
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()

    def _take(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        if "method" in message and "id" in message:
            lives.thread(self._serve, message).start()
        elif "method" in message:
            self.on_notice(str(message["method"]), message.get("params") or {})
        elif "id" in message:
            with self._lock:
                waiting = self._waiting.pop(message["id"], None) if isinstance(message["id"], int) else None
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()

    def _serve(self, message: dict[str, Any]) -> None:
        try:
            result = self.on_request(str(message["method"]), message["id"], message.get("params") or {})
        except AcpError as exc:
            self.answer(message["id"], error={"code": -32603, "message": exc.message})
            return
        except Exception as exc:  # noqa: BLE001 - a bug answered as an error, never as silence the agent waits on
            self.answer(message["id"], error={"code": -32603, "message": f"{type(exc).__name__}: {exc}"})
            return
        if result is not _ANSWERED:
            self.answer(message["id"], result)


_ANSWERED = ANSWERED  # a request handler that answered the request itself (a permission, before its effect)


class ToolCall:
    """One tool call the adapter announced, as its updates tell it."""

    def __init__(self, ident: str) -> None:
        self.id = ident
        self.kind, self.title, self.raw = "other", "", None
        self.status = ""
        self.asked = False  # a permission was asked for it: it is journaled as a step, not observed
        self.ended = threading.Event()
        self.result: dict[str, Any] = {}

    def update(self, data: Mapping[str, Any]) -> None:
        self.kind = str(data.get("kind") or self.kind)
        self.title = str(data.get("title") or self.title)
        if data.get("rawInput"):
            self.raw = data["rawInput"]
        status = str(data.get("status") or "")
        if status:
            self.status = status
        if status in ("completed", "failed") and not self.ended.is_set():
            self.result = outcome_of(data)
            self.ended.set()


Journaler = Callable[[str, str, dict[str, Any], Callable[[str], dict[str, Any]]], tuple[dict[str, Any], bool]]


class AcpAgent:
    """One adapter run: the connection, its tool calls and what the agent must be told at its next prompt.

    `journal_step(name, policy, input, effect)` journals a step around `effect(key)` and returns (result, ran)
    (the step server's `tool_step`); `observe(data)` journals a note; `say(line)` is the desk's echo."""

    def __init__(self, proc: Any, journal_step: Journaler, observe: Callable[[dict[str, Any]], None],
                 rules: tuple[tuple[str, str, str], ...], say: Callable[[str], None], scope: str = "",
                 assay_bin: str = "", worktree: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.proc = proc
        self.journal_step, self.observe, self.rules, self.say = journal_step, observe, rules, say
        self.scope = scope  # the agent step this run is (its key): a call's identity holds it, so a later attempt
        # or round runs its commands afresh, and only a run resumed after a crash meets its own journaled calls
        self.assay_bin = assay_bin  # the desk's own `assay`: a call of it journals itself
        self.calls: dict[str, ToolCall] = {}
        self._calls_lock = threading.Lock()
        self.notices: list[str] = []  # what the agent is told before it goes on: refusals, recorded results
        self.session = ""
        self.signs = 0  # messages and tool updates: signs of work, for the idle limit
        self.chunks: list[str] = []  # the agent's words, for the run's output tail
        self.stopping = threading.Event()
        self.loading = False  # a saved session is being loaded: its replayed updates are history, not new calls
        self.conn = Connection(proc.stdin, proc.stdout, self._request, self._notice)
        self.running: list[ToolCall] = []  # calls allowed and not ended: a file written or command run through the
        # desk that is the one running call's own is its effect, journaled with it
        self.served = Served(worktree, dict(env or {}), journal_step, lambda kind, text: policy_of(kind, text, rules),
                             self._inside, self.conn.answer, scope) if worktree is not None else None

    def _inside(self, kind: str, target: str) -> bool:
        """Whether a write through the desk (`edit`, its path) or a command (`execute`, its text) is the effect of
        the one permitted call running now: the same kind, and its path or command. Anything else is journaled as
        a step of its own."""
        with self._calls_lock:
            if len(self.running) != 1:
                return False
            call = self.running[0]
        if kind == "execute":
            return call.kind == "execute" and command_of(call.raw, call.title).strip() == target.strip()
        raw: dict[str, Any] = call.raw if isinstance(call.raw, dict) else {}
        named = str(raw.get("file_path") or raw.get("path") or "")
        return call.kind in ("edit", "delete", "move") and bool(named) and \
            os.path.normpath(named) == os.path.normpath(target)

    def working(self) -> bool:
        """Whether a tool call the adapter announced has not ended: a long quiet command is work, asked for or
        not (the idle limit)."""
        with self._calls_lock:
            return any(not call.ended.is_set() for call in self.calls.values())

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.stopping.is_set()

    def start(self, cwd: str, mode: str, load: str = "", failed: Callable[[str], None] | None = None) -> bool:
        """Initialize, then load the saved session `load` (its history, which the adapter replays as updates
        first, is not journaled again: those calls ran in the run that saved it) or open a new one. A load the
        adapter cannot do is told to `failed` (why), and a new session is opened. True if `load` was loaded."""
        hello = self.conn.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": {
            "fs": {"readTextFile": self.served is not None, "writeTextFile": self.served is not None},
            "terminal": self.served is not None,
            "_meta": {"terminal_output": True}}}, self.alive)
        loaded = False
        if load:
            can = _dict(_dict(hello).get("agentCapabilities")).get("loadSession")
            try:
                if not can:
                    raise AcpError("the agent's adapter cannot load sessions (no loadSession capability)")
                self.loading = True
                try:
                    self.conn.request("session/load", {"sessionId": load, "cwd": cwd, "mcpServers": []}, self.alive)
                finally:
                    self.loading = False
                self.session, loaded = load, True
            except AcpError as exc:
                if not self.alive():
                    raise
                if failed is not None:
                    failed(exc.message)
        if not loaded:
            started = self.conn.request("session/new", {"cwd": cwd, "mcpServers": []}, self.alive)
            self.session = str((started or {}).get("sessionId") or "")
            if not self.session:
                raise AcpError("the agent's adapter opened no session (no sessionId in its answer)")
        if mode:
            self.conn.request("session/set_mode", {"sessionId": self.session, "modeId": mode}, self.alive)
        return loaded

    def prompt(self, text: str) -> str:
        """One turn; its stop reason. A turn ended to tell the agent something (a refusal) goes on with that."""
        while True:
            answer = self.conn.request("session/prompt", {"sessionId": self.session,
                                                          "prompt": [{"type": "text", "text": text}]}, self.alive)
            self._close_open_calls()
            reason = str((answer or {}).get("stopReason") or "")
            if not self.notices or reason not in ("end_turn", "cancelled"):
                return reason
            text, self.notices = "\n\n".join(self.notices), []

    def _close_open_calls(self) -> None:
        """A cancelled turn leaves its tool calls without an end (neither adapter sends one): end them here."""
        with self._calls_lock:
            for call in self.calls.values():
                if not call.ended.is_set():
                    call.result = {"exit_code": 130, "tail": "", "status": "cancelled"}
                    call.ended.set()

    # -- the agent's side --------------------------------------------------------------------------------------

    def _call(self, ident: str) -> ToolCall:
        with self._calls_lock:
            return self.calls.setdefault(ident, ToolCall(ident))

    def _notice(self, method: str, params: dict[str, Any]) -> None:
        if method != "session/update" or self.loading:  # a loaded session's history: it happened before
            return
        update = _dict(params.get("update"))
        what = update.get("sessionUpdate")
        self.signs += 1
        if what == "agent_message_chunk":
            content = _dict(update.get("content"))
            if content.get("type") == "text":
                self.chunks.append(str(content.get("text") or ""))
        if what not in ("tool_call", "tool_call_update") or not update.get("toolCallId"):
            return
        call = self._call(str(update["toolCallId"]))
        was_ended = call.ended.is_set()
        call.update(update)
        if call.ended.is_set() and not was_ended and not call.asked:
            self._observed(call)

    def _observed(self, call: ToolCall) -> None:
        """A tool call that ran without asking: journaled as what it was, never as an intent before it."""
        # Codex names a known-safe command by what it does (kind read or search, "Read README"): its input holds it
        shell = call.kind == "execute" or bool(_dict(call.raw).get("command"))
        command = command_of(call.raw, call.title) if shell else call.title
        self.say(f"observed {call.kind}: {redact(command)[:120]} (exit {call.result.get('exit_code')})")
        data = {"observed": {"tool": call.kind, "id": call.id, "title": redact(call.title), "command": redact(command),
                             **call.result}}
        # journaled off the reader thread: a permitted call that runs now holds the step server, and its own end
        # comes through this thread
        lives.thread(self._observe, data).start()

    def _observe(self, data: dict[str, Any]) -> None:
        try:
            self.observe(data)
        except AssayError as exc:
            self.say(f"an observed call was not journaled: {exc.message}")

    def _request(self, method: str, ident: Any, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return self._permission(ident, params)
        if self.served is None:
            raise AcpError(f"the desk serves no {method}")
        try:
            return self.served.handle(method, ident, params)
        except ServeError as exc:
            raise AcpError(exc.message) from None
        except Refused as exc:  # the repeat of an unsafe command whose outcome is unknown: the agent reads why
            self.say(f"refused {method}: {exc.message}")
            raise AcpError(exc.message + (f"\n{exc.hint}" if exc.hint else "")) from None

    def _permission(self, ident: Any, params: dict[str, Any]) -> Any:
        """Journal the call's intent, then allow it and wait for its end (the step's effect); or refuse it."""
        tool = _dict(params.get("toolCall"))
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        call = self._call(str(tool.get("toolCallId") or f"unnamed-{ident}"))
        call.asked = True
        call.update({k: v for k, v in tool.items() if k != "status"})
        kind = call.kind if call.kind in STEPS else "other"
        given = call_input(kind, call.raw, call.title)
        command = given.get("command") or given.get("path") or call.title
        if kind == "execute" and self._own(str(command)):  # `assay step …`: it journals itself through the desk
            self.conn.answer(ident, {"outcome": {"outcome": "selected", "optionId": _option(options, ALLOW)}})
            return _ANSWERED
        policy = policy_of(kind, str(command), self.rules)
        given = {**{k: redact(v) if isinstance(v, str) else v for k, v in given.items()},
                 **({"within": self.scope} if self.scope else {})}
        answered: list[bool] = []

        def effect(key: str) -> dict[str, Any]:
            with self._calls_lock:
                self.running.append(call)
            try:
                self.conn.answer(ident, {"outcome": {"outcome": "selected", "optionId": _option(options, ALLOW)}})
                answered.append(True)
                while not call.ended.wait(0.2):
                    if not self.alive():
                        raise Cancelled("cancelled by its desk")  # the adapter is ended: the command with it
                return dict(call.result)
            finally:
                with self._calls_lock:
                    self.running.remove(call)

        try:
            result, ran = self.journal_step(STEPS[kind], policy, given, effect)
        except Cancelled:  # the run ended while the call ran: its end is journaled; nobody waits for an answer
            return _ANSWERED
        except Refused as exc:
            self._refuse(ident, options, answered, f"{exc.message}" + (f"\n{exc.hint}" if exc.hint else ""))
            self.say(f"refused {kind}: {str(command)[:120]}: {exc.message}")
            return _ANSWERED
        except AssayError as exc:
            self._refuse(ident, options, answered, f"The desk could not journal this call, so it did not run: "
                                                    f"{exc.message}")
            return _ANSWERED
        if not ran:  # completed in an earlier run: not run again, and the agent is told what it did then
            self._refuse(ident, options, answered,
                         f"`{command}` already ran in an earlier run of this brief (exit {result.get('exit_code')}); "
                         f"recorded result returned, not run again. Its output then:\n{result.get('tail', '')}")
            self.say(f"replayed {kind}: {str(command)[:120]} (recorded, not run again)")
        return _ANSWERED

    def _own(self, command: str) -> bool:
        """A call of the desk's own `assay` (its steps, waits, answers), which journals itself: journaled again as a
        tool call, it would wait on the step server that serves it."""
        return bool(re.match(r"\s*(?:\S*/)?assay\s+(step|wait|brief)\b", command)) or \
            bool(self.assay_bin and self.assay_bin in command)

    def _refuse(self, ident: Any, options: list[dict[str, Any]], answered: list[bool], why: str) -> None:
        """Refuse a call not yet allowed, and tell the agent why as its next prompt, once its turn ends (a cancel
        now would race the calls the agent makes next, and cut off one it was just allowed)."""
        if answered:
            return
        self.notices.append(why)
        self.conn.answer(ident, {"outcome": {"outcome": "selected", "optionId": _option(options, REJECT)}})

    def stop(self) -> None:
        self.stopping.set()
        if self.served is not None:
            self.served.stop()


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _option(options: list[dict[str, Any]], kinds: tuple[str, ...]) -> str:
    """The option to answer with, chosen by its kind (the ids differ between adapters)."""
    for kind in kinds:
        for option in options:
            if option.get("kind") == kind and option.get("optionId"):
                return str(option["optionId"])
    return str(options[0].get("optionId", "")) if options and kinds == ALLOW else "reject"


def exit_code(reason: str) -> int:
    """A turn's stop reason as an agent's exit code: 0 when it ended its turn, 1 otherwise."""
    return 0 if reason == "end_turn" else 1


__all__ = ["AcpAgent", "AcpError", "POLICIES", "STEPS", "call_input", "command_of", "exit_code", "outcome_of",
           "policy_of"]
