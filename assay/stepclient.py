"""The agent's fast path, agent side: `assay step run` / `assay step value` through the desk's socket.

Imports next to nothing (no click, no git), so a journaled step costs little more than the
desk's push. Anything it does not handle (context flags, help, no desk listening) returns None
and the full command line takes over, talking to the forge directly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from assay.credentials import SECRET_NAMES

TAIL_BYTES = 4000


def main(argv: list[str]) -> int | None:
    """`argv` after `assay`; an exit code, or None to fall back to the full CLI."""
    path = os.environ.get("ASSAY_SOCKET")
    if not path or argv[:1] != ["step"] or len(argv) < 2:
        return None
    if argv[1] == "run":
        request = _parse_run(argv[2:])
    elif argv[1] == "value":
        request = _parse_value(argv[2:])
    else:
        return None
    if request is None:
        return None
    started: list[bool] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            with conn.makefile("rwb") as stream:
                _send(stream, request)
                return _converse(stream, request, started)
    except (OSError, ValueError):
        if not started:
            return None  # no desk listening, or it went before the step began: go to the forge
        return _desk_gone()


def _desk_gone() -> int:
    sys.stderr.write("error: the desk went away while serving this step\n"
                     "hint: run it again; the journal knows whether it ran\n")
    return 1


def _converse(stream: Any, request: dict[str, Any], started: list[bool]) -> int:
    while True:
        line = stream.readline()
        if not line:
            return _desk_gone() if started else 1
        reply = json.loads(line)
        if reply["do"] == "run":
            started.append(True)
            crashing = bool(os.environ.get("ASSAY_CRASH_AT"))  # the crash suite's points, here where the effect runs
            if crashing:
                from assay.crash import crash_point

                crash_point("step.before-execute", request["name"])
            result = _run(request["argv"], reply["key"])
            if isinstance(result, int):  # SIGTERM or Ctrl-C: the command is stopped; the desk records it
                _send(stream, {"op": "cancelled"})
                stream.readline()
                sys.stderr.write("cancelled; the step's end is recorded in the journal\n")
                return result
            if crashing:
                crash_point("step.after-execute", request["name"])
            _send(stream, {"op": "done", "result": result})
        elif reply["do"] == "error":
            sys.stderr.write(f"error: {reply['message']}\n" + (f"hint: {reply['hint']}\n" if reply.get("hint") else ""))
            return int(reply["code"])
        elif "value" in reply:
            sys.stdout.write(f"{reply['value']}\n")
            return 0
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


def _parse_run(args: list[str]) -> dict[str, Any] | None:
    """The options of `assay step run` that the fast path takes; None for anything else (e.g. --brief)."""
    options: dict[str, Any] = {"op": "step", "name": "", "policy": "unsafe", "input": None, "fresh": False}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            options["argv"] = args[i + 1:]
            break
        if arg == "--fresh":
            options["fresh"] = True
        elif arg in ("--name", "--policy", "--input") and i + 1 < len(args):
            options[arg[2:]] = args[i + 1]
            i += 1
        elif arg.startswith(("--name=", "--policy=", "--input=")):
            key, _, value = arg[2:].partition("=")
            options[key] = value
        elif arg.startswith("-"):
            return None
        else:
            options["argv"] = args[i:]
            break
        i += 1
    options.setdefault("argv", [])
    if options["input"] is None and options["argv"]:
        options["input"] = json.dumps({"argv": options["argv"]})
    options["life"] = _life()
    return options


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


def _run(argv: list[str], key: str) -> dict[str, Any] | int:
    """Run the effect here, in the agent's process and directory, its output passed through.

    A nested `assay step` in the command goes to the forge (no ASSAY_SOCKET): its desk is busy
    serving this one. SIGTERM or Ctrl-C stops the command and returns the exit code to end with.
    """
    env = {k: v for k, v in os.environ.items() if not SECRET_NAMES.match(k) and k != "ASSAY_SOCKET"}
    env["ASSAY_IDEMPOTENCY_KEY"] = key
    started = time.monotonic()
    stopped: list[int] = []
    running: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, frame: object) -> None:
        stopped.append(128 + signum)
        for proc in running:
            proc.terminate()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}  # before the command
    try:
        try:
            running.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env))
        except OSError as exc:
            return {"exit_code": 127, "duration_ms": 0, "tail": f"cannot run {argv[0]}: {exc.strerror}"}
        proc = running[0]
        if stopped:
            proc.terminate()
        code, text = relay(proc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        return stopped[0]
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": text}


def relay(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Pass a command's output through as it comes; its exit code and the last `TAIL_BYTES` of output."""
    out = proc.stdout
    assert out is not None
    tail = bytearray()
    for chunk in iter(lambda: os.read(out.fileno(), 65536), b""):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        tail += chunk
        del tail[:-TAIL_BYTES]
    return proc.wait(), tail.decode("utf-8", "replace")


def _life() -> dict[str, Any]:
    """This process's life, as `assay.lives` records it (host, pid, start, boot), without importing it."""
    life: dict[str, Any] = {"host": os.uname().nodename, "pid": os.getpid()}
    try:
        with open(f"/proc/{os.getpid()}/stat") as fh:
            stat = fh.read()
        life["start"] = int(stat[stat.rindex(")") + 2:].split()[19])
        with open("/proc/sys/kernel/random/boot_id") as fh:
            life["boot"] = fh.read().strip()
    except (OSError, ValueError, IndexError):
        pass
    return life


def _send(stream: Any, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()
