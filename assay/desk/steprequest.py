"""One step request, for everything that runs `assay step run`'s step: the command line through its desk
(`stepclient.py`), the `step_run` tool of `assay mcp` (`mcpserver.py`), and the command line straight to the
forge when no desk serves it (`effects.py`).

The request (name, policy, command, input), the conversation with the desk's step server (it says run, with
the key; the command runs here; its result goes back) and the words of each answer are written here once:
a result recorded earlier, a refusal, a cancel, the desk gone, or the exit code of a command that ran now.

A step belongs to its desk's life: while the command runs, this side watches its connection to the desk. If
the desk goes away (killed with its agent, say, while this process lives on in a session of its own, as the
agent CLIs start their tool commands), or the desk cancels the step, the command and everything it started
are stopped (SIGTERM, then SIGKILL), and they are killed when this process is (procs.py keeps them). So no
effect runs on with nobody left to journal its end.

Imports next to nothing (no typing, no click): `assay step run` is on the agent's fast path.
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
from assay.errors import DESK_GONE, error_lines

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: 2 ms of an agent's every step
if TYPE_CHECKING:
    import socket
    from typing import Any

TAIL_BYTES = 4000
STOP_GRACE_S = procs.STOP_GRACE_S  # a stopped command gets this long after SIGTERM before SIGKILL
CANCELLED = ("cancelled: the command was stopped; an unsafe step's end is journaled as unknown, any other is "
             "resumed, with the same key, by its next call")
DESK_GONE_HINT = ("the desk that takes the brief over records its outcome in the journal (unknown, for an unsafe "
                  "step); call it again then")


def step_request(name: str, policy: str, argv: list[str], input: str | None = None, fresh: bool = False,
                 probe: str | None = None) -> dict[str, Any]:
    """What the desk's step server is asked; with no input, the command is what the step acts on."""
    if input is None and argv:
        input = json.dumps({"argv": argv})
    return {"op": "step", "name": name, "policy": policy, "input": input, "fresh": fresh, "probe": probe,
            "argv": argv}


class Answer:
    """What a step request came to: its exit code; `said`, the words for stderr (or a tool's error); `shown`, a
    recorded result's output, shown again as it ran then; and `result` when the step has one (None when it was
    refused, cancelled or cut off)."""

    __slots__ = ("code", "said", "shown", "result", "ran")

    def __init__(self, code: int, said: str = "", shown: str = "", result: dict[str, Any] | None = None,
                 ran: bool = False) -> None:
        self.code, self.said, self.shown, self.result, self.ran = code, said, shown, result, ran


def error(message: str, hint: str = "", code: int = 1) -> Answer:
    """An error the desk answered with (a refusal, a cancel before the command ran, bad input), as the CLI says it."""
    return Answer(code, error_lines(message, hint))


def desk_gone(what: str = "", started: bool = True) -> Answer:
    """The desk went away mid-step (`what`: what became of the command); `DESK_GONE` once the step had begun."""
    return error(f"the desk went away while serving this step{what}", DESK_GONE_HINT, DESK_GONE if started else 1)


def cancelled(code: int) -> Answer:
    """The command was stopped (a signal, or the desk's cancel): `code` is the exit to end with."""
    return Answer(code, CANCELLED + "\n")


def stopped(stop: BaseException) -> Answer:
    """The command was stopped by a signal in this process (no desk: `Cancelled` for SIGTERM, KeyboardInterrupt
    named by its signal), after the step's end was journaled: as a desk's step says it, with 128 + the signal."""
    name = "SIGTERM"
    if isinstance(stop, KeyboardInterrupt):
        name = stop.args[0] if stop.args and isinstance(stop.args[0], str) else "SIGINT"
    return cancelled(128 + int(getattr(signal.Signals, name, signal.SIGINT)))


def returned(name: str, result: object, ran: bool) -> Answer:
    """A step's result: its command's exit code; for one recorded earlier, its output again and the words that
    say it was not run again."""
    if not isinstance(result, dict) or "exit_code" not in result:
        return error(f"step {name!r} was recorded by something other than `assay step run`", code=2)
    code = int(result["exit_code"])
    if ran:
        return Answer(code, result=result, ran=True)
    return Answer(code, f"assay: step {name!r} already completed (exit {code}); recorded result returned, not run "
                        "again\n", str(result.get("tail", "")), result)


def show(answer: Answer) -> int:
    """Write an answer as the command line does (a recorded output on stdout, the words on stderr): its exit code."""
    if answer.shown:
        sys.stdout.write(answer.shown)
    if answer.said:
        sys.stderr.write(answer.said)
    return answer.code


class Lines:
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


def ask(path: str, request: dict[str, Any], echo: bool = True) -> Answer:
    """A step request to the desk listening at `path`, its command run here (its output passed through with
    `echo`; else only kept, as `assay mcp` does: its stdout is the protocol's). Raises OSError (or ValueError)
    when no desk is listening, or it went before the step began: nothing ran."""
    import socket  # here: a step run with no desk (which imports this module for `relay`) never opens one

    started: list[bool] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            lines = Lines(conn)
            lines.send(request)
            return converse(lines, request, started, echo)
    except (OSError, ValueError):
        if not started:
            raise
        return desk_gone()


def converse(lines: Lines, request: dict[str, Any], started: list[bool], echo: bool = True) -> Answer:
    """Serve the desk's side of a step request sent on `lines`: run the command when it says run (`started` then
    holds True), send back its result, and stop it if the desk cancels the step or hangs up."""
    while True:
        line = lines.readline()
        if not line:
            return desk_gone("", bool(started))
        reply = json.loads(line)
        if reply["do"] == "run":
            started.append(True)
            crashing = bool(os.environ.get("ASSAY_CRASH_AT"))  # the crash suite's points, here where the effect runs
            if crashing:
                from assay.core.crash import crash_point

                crash_point("step.before-execute", request["name"])
            result = run_here(request["argv"], reply["key"], lines, echo)
            if result == DESK_GONE:
                return desk_gone("; its command was stopped")
            if isinstance(result, int):  # SIGTERM, Ctrl-C or the desk's cancel: the command is stopped
                lines.send({"op": "cancelled"})
                lines.readline()
                return cancelled(result)
            if crashing:
                crash_point("step.after-execute", request["name"])
            lines.send({"op": "done", "result": result})
        elif reply["do"] == "error":
            return error(str(reply.get("message", "")), str(reply.get("hint") or ""), int(reply["code"]))
        elif reply["do"] == "cancel":
            continue  # the command had already ended: its result is on its way
        else:
            return returned(request["name"], reply.get("result"), bool(reply.get("ran")))


def effect_env(key: str | None = None) -> dict[str, str]:
    """A nested `assay step` in the command goes to the forge (no ASSAY_SOCKET): its desk is busy serving this one.
    Only `assay step progress`, which the desk answers at once, still reaches it (ASSAY_PROGRESS_SOCKET)."""
    env = {k: v for k, v in os.environ.items() if not SECRET_NAMES.match(k) and k != "ASSAY_SOCKET"}
    if os.environ.get("ASSAY_SOCKET"):
        env["ASSAY_PROGRESS_SOCKET"] = os.environ["ASSAY_SOCKET"]
    if key is not None:
        env["ASSAY_IDEMPOTENCY_KEY"] = key
    return env


def run_here(argv: list[str], key: str, desk: Lines | None = None, echo: bool = True) -> dict[str, Any] | int:
    """Run the effect here, in the agent's process and directory, its output passed through (`echo`; else only
    kept).

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
        running.append(procs.start(argv, env=effect_env(key), grace_s=STOP_GRACE_S))
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


def relay(group: procs.Group, desk: Lines | None = None, echo: bool = True) -> tuple[int, str, str | None]:
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


def _desk_says(desk: Lines) -> str | None:
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
