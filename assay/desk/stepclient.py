"""The agent's fast path, agent side: `assay step run|value|settle` through the desk's socket.

Imports next to nothing (no click, no git), so a journaled step costs little more than the
desk's push. Anything it does not handle (context flags, help, no desk listening) returns None
and the full command line takes over, talking to the forge directly.

A step belongs to its desk's life: while the command runs, the client watches its connection to
the desk. If the desk goes away (killed with its agent, say, while this process lives on in a
session of its own, as the agent CLIs start their tool commands), or the desk cancels the step,
the command and everything it started are stopped (SIGTERM, then SIGKILL), and they are killed
when this process is (procs.py keeps them). So no effect runs on with nobody left to journal its end.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time

from assay.core.credentials import SECRET_NAMES
from assay.desk import procs
from assay.errors import DESK_GONE

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: 2 ms of an agent's every step
if TYPE_CHECKING:
    import socket
    from typing import Any

TAIL_BYTES = 4000
STOP_GRACE_S = procs.STOP_GRACE_S  # a stopped command gets this long after SIGTERM before SIGKILL
INSPECT_TIMEOUT_S = 300  # an inspection given to `assay step settle`, as an outcome probe gets


class _Lines:
    """JSON lines over a socket, with a buffer this side can see (so a watcher knows what is already read)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buf = conn, b""

    def send(self, message: dict[str, Any]) -> None:
        self.conn.sendall(json.dumps(message).encode() + b"\n")

    def ready(self) -> bool:
        return b"\n" in self.buf

    def readline(self) -> bytes:
        """One line; b"" when the desk hung up."""
        while b"\n" not in self.buf:
            chunk = self.conn.recv(65536)
            if not chunk:
                line, self.buf = self.buf, b""
                return b""
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


def main(argv: list[str]) -> int | None:
    """`argv` after `assay`; an exit code, or None to fall back to the full CLI."""
    path = os.environ.get("ASSAY_SOCKET")
    if argv[:2] in (["step", "progress"], ["brief", "spawn"]) or argv[:1] == ["wait"]:  # the desk takes these
        path = path or os.environ.get("ASSAY_PROGRESS_SOCKET")  # also from inside a step's command
    if argv[:2] == ["brief", "spawn"] and path:
        request = _parse_spawn(argv[2:])
    elif argv[:1] == ["wait"] and path:
        request = _parse_wait(argv[1:])
    elif not path or argv[:1] != ["step"] or len(argv) < 2:
        return None
    else:
        parse = {"run": _parse_run, "value": _parse_value, "settle": _parse_settle,
                 "progress": _parse_progress, "turn": _parse_turn, "answer": _parse_answer}.get(argv[1])
        request = parse(argv[2:]) if parse else None
    if request is None:
        return None
    if request["op"] == "settle" and request.get("argv"):
        evidence = _inspect(request.pop("argv"))
        request["evidence"] = {**request.get("evidence", {}), **evidence}
        if not request.get("verdict"):
            request["verdict"] = {0: "happened", 1: "did-not"}.get(evidence["exit_code"])
            if request["verdict"] is None:
                sys.stderr.write(f"error: the inspection exited {evidence['exit_code']}: it tells neither way, "
                                 "so nothing is settled\nhint: exit 0 means the step happened, 1 that it did not; "
                                 "or say it with --happened/--did-not\n")
                return 2
    import socket  # here: a step run with no desk (which imports this module for `relay`) never opens one

    started: list[bool] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            lines = _Lines(conn)
            lines.send(request)
            return _converse(lines, request, started)
    except (OSError, ValueError):
        if not started:
            return None  # no desk listening, or it went before the step began: go to the forge
        return _desk_gone("")


def _desk_gone(what: str) -> int:
    sys.stderr.write(f"error: the desk went away while serving this step{what}\n"
                     "hint: the desk that takes the brief over records its outcome in the journal "
                     "(unknown, for an unsafe step); call it again then\n")
    return DESK_GONE


def _converse(lines: _Lines, request: dict[str, Any], started: list[bool]) -> int:
    while True:
        line = lines.readline()
        if not line:
            return _desk_gone("") if started else 1
        reply = json.loads(line)
        if reply["do"] == "run":
            started.append(True)
            crashing = bool(os.environ.get("ASSAY_CRASH_AT"))  # the crash suite's points, here where the effect runs
            if crashing:
                from assay.core.crash import crash_point

                crash_point("step.before-execute", request["name"])
            result = _run(request["argv"], reply["key"], lines)
            if result == DESK_GONE:
                return _desk_gone("; its command was stopped")
            if isinstance(result, int):  # SIGTERM, Ctrl-C or the desk's cancel: the command is stopped
                lines.send({"op": "cancelled"})
                lines.readline()
                sys.stderr.write("cancelled: the command was stopped; an unsafe step's end is journaled as unknown, "
                                 "any other is resumed, with the same key, by its next call\n")
                return result
            if crashing:
                crash_point("step.after-execute", request["name"])
            lines.send({"op": "done", "result": result})
        elif reply["do"] == "error":
            sys.stderr.write(f"error: {reply['message']}\n" + (f"hint: {reply['hint']}\n" if reply.get("hint") else ""))
            return int(reply["code"])
        elif "progress" in reply:
            return 0
        elif "turn" in reply:
            _hook_answer(str(reply["turn"]), str(reply.get("say") or ""))
            return 0
        elif "answered" in reply:
            said = reply["answered"]
            sys.stdout.write(f"thread {said['thread']}: answer journaled (seq {said['seq']}); the desk replies on the "
                             "review before it marks it ready\n")
            return 0
        elif "waiting" in reply:
            sys.stdout.write(f"{reply['waiting']}\n")
            return 0
        elif "spawned" in reply:
            sys.stdout.write(f"{reply['spawned']['brief']}\n")
            return 0
        elif "value" in reply:
            sys.stdout.write(f"{reply['value']}\n")
            return 0
        elif "settled" in reply:
            done = reply["settled"]
            sys.stdout.write(f"step {request['name']!r} (intent {done['intent']}) settled as {done['verdict']} "
                             f"(seq {done['seq']})\n")
            return 0
        elif reply["do"] == "cancel":
            continue  # the command had already ended: its result is on its way
        else:
            return _returned(request["name"], reply)


def _returned(name: str, reply: dict[str, Any]) -> int:
    result = reply.get("result")
    if not isinstance(result, dict) or "exit_code" not in result:
        sys.stderr.write(f"error: step {name!r} was recorded by something other than `assay step run`\n")
        return 2
    if not reply.get("ran"):  # a recorded result: show what it printed then, and say it did not run again
        sys.stdout.write(str(result.get("tail", "")))
        sys.stderr.write(f"assay: step {name!r} already completed (exit {result['exit_code']}); "
                         "recorded result returned, not run again\n")
    return int(result["exit_code"])


def _options(args: list[str], options: dict[str, Any], valued: tuple[str, ...],
             flags: dict[str, tuple[str, Any]]) -> dict[str, Any] | None:
    """Parse `args` into `options` (None for anything the fast path does not take); the command after `--` (or
    the first bare word, with `bare`) goes to `argv`."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            options["argv"] = args[i + 1:]
            break
        if arg in flags:
            key, value = flags[arg]
            options[key] = value
        elif arg in valued and i + 1 < len(args):
            options[arg[2:]] = args[i + 1]
            i += 1
        elif arg.startswith(tuple(f"{v}=" for v in valued)):
            key, _, value = arg[2:].partition("=")
            options[key] = value
        elif arg.startswith("-"):
            return None
        elif options.get("_bare") == "argv":
            options["argv"] = args[i:]
            break
        elif options.get("_bare") == "name" and not options.get("name"):
            options["name"] = arg
            options["_bare"] = "argv" if options["op"] == "step" else ""
        else:
            return None
        i += 1
    options.pop("_bare", None)
    options.setdefault("argv", [])
    return options


def _parse_run(args: list[str]) -> dict[str, Any] | None:
    """The options of `assay step run` that the fast path takes; None for anything else (e.g. --brief)."""
    options = _options(args, {"op": "step", "name": "", "policy": "unsafe", "input": None, "fresh": False,
                              "probe": None, "_bare": "argv"},
                       ("--name", "--policy", "--input", "--probe"), {"--fresh": ("fresh", True)})
    if options is not None and options["input"] is None and options["argv"]:
        options["input"] = json.dumps({"argv": options["argv"]})
    return options


def _parse_settle(args: list[str]) -> dict[str, Any] | None:
    """`assay step settle NAME [--happened|--did-not] [--input JSON] [--evidence TEXT] [-- CMD]`."""
    options = _options(args, {"op": "settle", "name": "", "verdict": None, "input": None, "_bare": "name"},
                       ("--input", "--evidence"),
                       {"--happened": ("verdict", "happened"), "--did-not": ("verdict", "did-not")})
    if options is None or not options["name"] or (not options["verdict"] and not options["argv"]):
        return None  # the full CLI says what is missing
    said = options.pop("evidence", None)
    options["evidence"] = {"said": said} if said else {}
    return options


def _parse_spawn(args: list[str]) -> dict[str, Any] | None:
    """`assay brief spawn TITLE [--body TEXT] [--label L]...`, its key the calling step's."""
    request: dict[str, Any] = {"op": "spawn", "title": "", "body": "", "labels": [],
                               "key": os.environ.get("ASSAY_IDEMPOTENCY_KEY", "")}
    i = 0
    while i < len(args):
        if args[i] in ("--body", "--label") and i + 1 < len(args):
            if args[i] == "--body":
                request["body"] = args[i + 1]
            else:
                request["labels"].append(args[i + 1])
            i += 2
        elif not args[i].startswith("-") and not request["title"]:
            request["title"] = args[i]
            i += 1
        else:
            return None  # anything else (--parent, --json): the full command
    return request if request["title"] else None


def _parse_wait(args: list[str]) -> dict[str, Any] | None:
    """`assay wait BRIEF --on CONDITION` for the agent's own brief: its desk parks it (the agent holds no forge
    credentials). Anything else goes to the full command."""
    if len(args) == 3 and args[1] == "--on" and args[0] == os.environ.get("ASSAY_BRIEF"):
        return {"op": "wait", "on": args[2]}
    if len(args) == 2 and args[1].startswith("--on=") and args[0] == os.environ.get("ASSAY_BRIEF"):
        return {"op": "wait", "on": args[1][5:]}
    return None


def _hook_answer(event: str, say: str) -> None:
    """What Claude Code's hook prints for the model to read next: after a tool call, context added to its result;
    at the reply's end, a `block` that makes it go on with the text as its next instruction."""
    if not say:
        return
    if event == "Stop":
        sys.stdout.write(json.dumps({"decision": "block", "reason": say}) + "\n")
    else:
        sys.stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": say}}) + "\n")


def _parse_turn(args: list[str]) -> dict[str, Any] | None:
    """`assay step turn [EVENT]`: a CLI's hook names its event; Codex's notify program gets a JSON payload."""
    event = args[0] if args else "turn"
    if event.startswith("{"):
        try:
            event = str(json.loads(event).get("type") or "notify")
        except (ValueError, AttributeError):
            event = "notify"
    return {"op": "turn", "event": event[:64]} if not event.startswith("-") else None


def _parse_answer(args: list[str]) -> dict[str, Any] | None:
    """`assay step answer THREAD --fixed TEXT | --reason TEXT` (or `--fixed=TEXT`); the desk checks the rest."""
    request: dict[str, Any] = {"op": "answer", "thread": ""}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in ("--fixed", "--reason") and (eq or i + 1 < len(args)):
            request[name[2:]] = value if eq else args[i + 1]
            i += 1 if eq else 2
        elif not args[i].startswith("-") and not request["thread"]:
            request["thread"] = args[i]
            i += 1
        else:
            return None  # --help, --json or a mistake: the full command says what it takes
    return request if request["thread"] else None


def _parse_progress(args: list[str]) -> dict[str, Any] | None:
    return {"op": "progress", "text": " ".join(args)} if args and not args[0].startswith("-") else None


def _parse_value(args: list[str]) -> dict[str, Any] | None:
    if not args or args[0] not in ("now", "uuid", "random"):
        return None
    request: dict[str, Any] = {"op": "value", "kind": args[0], "bytes": 16}
    rest = args[1:]
    if rest[:1] == ["--bytes"] and len(rest) == 2:
        rest = [f"--bytes={rest[1]}"]
    if len(rest) == 1 and rest[0].startswith("--bytes=") and rest[0][8:].isdigit() and 1 <= int(rest[0][8:]) <= 4096:
        request["bytes"] = int(rest[0][8:])
    elif rest:
        return None
    return request


def _inspect(argv: list[str]) -> dict[str, Any]:
    """An agent's inspection for `assay step settle`, run here: its evidence. Nothing it starts outlives it."""
    started = time.monotonic()
    code, output = procs.run(argv, env=_effect_env(), timeout_s=INSPECT_TIMEOUT_S)
    sys.stdout.buffer.write(output)
    return {"command": argv, "exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000),
            "tail": output[-TAIL_BYTES:].decode("utf-8", "replace")}


def _effect_env(key: str | None = None) -> dict[str, str]:
    """A nested `assay step` in the command goes to the forge (no ASSAY_SOCKET): its desk is busy serving this one.
    Only `assay step progress`, which the desk answers at once, still reaches it (ASSAY_PROGRESS_SOCKET)."""
    env = {k: v for k, v in os.environ.items() if not SECRET_NAMES.match(k) and k != "ASSAY_SOCKET"}
    if os.environ.get("ASSAY_SOCKET"):
        env["ASSAY_PROGRESS_SOCKET"] = os.environ["ASSAY_SOCKET"]
    if key is not None:
        env["ASSAY_IDEMPOTENCY_KEY"] = key
    return env


def _run(argv: list[str], key: str, desk: _Lines | None = None, echo: bool = True) -> dict[str, Any] | int:
    """Run the effect here, in the agent's process and directory, its output passed through (`echo`; else only
    kept, as the MCP server does: its stdout is the protocol's).

    The command runs under a keeper (procs.py): it and everything it starts die with this process, and it has
    ended when all of them have. SIGTERM or Ctrl-C stops them and returns the exit code to end with (on the
    main thread, which alone takes signals); so does a cancel from the desk (`desk`), and the desk hanging up
    returns `DESK_GONE`.
    """
    import threading

    started = time.monotonic()
    stopped: list[int] = []
    running: list[procs.Group] = []

    def stop(signum: int, frame: object) -> None:
        stopped.append(128 + signum)
        for group in running:
            group.stop(signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        running.append(procs.start(argv, env=_effect_env(key), grace_s=STOP_GRACE_S))
        group = running[0]
        if stopped:
            group.stop(stopped[0] - 128)
        code, text, desk_said = relay(group, desk, echo)
        if desk_said is not None:
            stopped.append(DESK_GONE if desk_said == "gone" else 143)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for group in running:
            group.kill()  # a no-op once it has ended; else (an error here) nothing of it runs on
    if stopped:
        return stopped[0]
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": text}


def relay(group: procs.Group, desk: _Lines | None = None, echo: bool = True) -> tuple[int, str, str | None]:
    """Pass a command's output through as it comes; its exit code once every process of it has ended, the last
    `TAIL_BYTES` of output, and, when the desk hung up ("gone") or cancelled the step ("cancel") meanwhile, that
    (the command was stopped)."""
    tail = bytearray()
    said: str | None = None

    def take() -> bool:
        chunk = os.read(group.output, 65536)
        if echo:
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        tail.extend(chunk)
        del tail[:-TAIL_BYTES]
        return bool(chunk)

    try:
        with selectors.DefaultSelector() as watch:
            watch.register(group.output, selectors.EVENT_READ, "out")
            watch.register(group.status_fd, selectors.EVENT_READ, "ended")
            if desk is not None:
                watch.register(desk.conn, selectors.EVENT_READ, "desk")
            while True:
                events = [("desk", None)] if desk is not None and desk.ready() else watch.select()
                for what, _ in events:
                    name = what if isinstance(what, str) else what.data
                    if name == "out" and not take():
                        watch.unregister(group.output)
                    elif name == "ended":  # nothing of it is left, so what it wrote is all in the pipe
                        while take():
                            pass
                        code = group.finish()
                        return code, group.failed or tail.decode("utf-8", "replace"), said
                    elif name == "desk" and desk is not None and said is None:
                        said = _desk_says(desk)
                        if said is not None:
                            watch.unregister(desk.conn)
                            group.stop()  # what is left of its output is still relayed until it has ended
    finally:
        group.close_output()


def _desk_says(desk: _Lines) -> str | None:
    """"gone" when the desk hung up, "cancel" when it cancels the step; None for anything else."""
    try:
        line = desk.readline()
    except OSError:
        return "gone"
    if not line:
        return "gone"
    try:
        return "cancel" if json.loads(line).get("do") == "cancel" else None
    except ValueError:
        return None


dies_with_parent = procs.dies_with_parent  # the agent's process (agent.py) dies with its desk
