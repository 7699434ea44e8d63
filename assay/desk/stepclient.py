"""The agent's fast path, agent side: `assay step run|value|settle` through the desk's socket.

Imports next to nothing (no click, no git), so a journaled step costs little more than the
desk's push. Anything it does not handle (context flags, help, no desk listening) returns None
and the full command line takes over, talking to the forge directly. A step's run, with its
command here, and the words of its answer are `steprequest.py`'s, shared with `assay mcp`.
"""

from __future__ import annotations

import json
import os
import sys
import time

from assay.desk import procs, steprequest
from assay.desk.steprequest import TAIL_BYTES, Lines, effect_env
from assay.errors import error_lines

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing: 2 ms of an agent's every step
if TYPE_CHECKING:
    from typing import Any

INSPECT_TIMEOUT_S = 300  # an inspection given to `assay step settle`, as an outcome probe gets


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
                sys.stderr.write(error_lines(f"the inspection exited {evidence['exit_code']}: it tells neither "
                                             "way, so nothing is settled", "exit 0 means the step happened, 1 that "
                                             "it did not; or say it with --happened/--did-not"))
                return 2
    if request["op"] == "step":
        try:
            return steprequest.show(steprequest.ask(path, request))
        except (OSError, ValueError):
            return None  # no desk listening, or it went before the step began: go to the forge
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            lines = Lines(conn)
            lines.send(request)
            return _answer(lines, request)
    except (OSError, ValueError):
        return None  # no desk listening: the full command asks the forge


def _answer(lines: Lines, request: dict[str, Any]) -> int:
    """What the desk answers to a request other than a step's, as the command line says it."""
    line = lines.readline()
    if not line:
        return 1
    reply = json.loads(line)
    if reply["do"] == "error":
        sys.stderr.write(error_lines(str(reply["message"]), str(reply.get("hint") or "")))
        return int(reply["code"])
    if "progress" in reply:
        return 0
    if "turn" in reply:
        _hook_answer(str(reply["turn"]), str(reply.get("say") or ""))
        return 0
    if "answered" in reply:
        said = reply["answered"]
        sys.stdout.write(f"thread {said['thread']}: answer journaled (seq {said['seq']}); the desk replies on the "
                         "review before it marks it ready\n")
        return 0
    if "waiting" in reply:
        sys.stdout.write(f"{reply['waiting']}\n")
        return 0
    if "spawned" in reply:
        sys.stdout.write(f"{reply['spawned']['brief']}\n")
        return 0
    if "value" in reply:
        sys.stdout.write(f"{reply['value']}\n")
        return 0
    if "settled" in reply:
        done = reply["settled"]
        sys.stdout.write(f"step {request['name']!r} (intent {done['intent']}) settled as {done['verdict']} "
                         f"(seq {done['seq']})\n")
        return 0
    sys.stderr.write(error_lines(f"the desk answered {request['op']!r} with {sorted(reply)}, which this client does "
                                 "not take", "the desk and this `assay` must be the same version"))
    return 1


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
    if options is None:
        return None
    return steprequest.step_request(options["name"], options["policy"], options["argv"], options["input"],
                                    options["fresh"], options["probe"])


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
    code, output = procs.run(argv, env=effect_env(), timeout_s=INSPECT_TIMEOUT_S)
    sys.stdout.buffer.write(output)
    return {"command": argv, "exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000),
            "tail": output[-TAIL_BYTES:].decode("utf-8", "replace")}


dies_with_parent = procs.dies_with_parent  # the agent's process (agent.py) dies with its desk
