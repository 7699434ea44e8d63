"""A small ACP agent for tests: it reads and writes files and runs commands through its client (`fs/*`,
`terminal/*`), as some adapters do, following a plan.

    FAKE_ACP_PLAN  a JSON file: a list of moves, each {"write": PATH, "text": T}, {"read": PATH} or
                   {"run": COMMAND, "args": [...], "again": true|false} (PATH relative to the session's cwd unless
                   absolute; `again`: a run refused as the repeat of a cut-off call is called again, on purpose)
    FAKE_ACP_LOG   a file each move's request and the client's answer are appended to, as JSON lines

Each `session/prompt` runs the whole plan, then ends its turn. A run command is waited for, its output read, and
its terminal released.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

_next = 0


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Ask the client; its answer (a `result` or an `error`), skipping anything else it sends meanwhile."""
    global _next
    _next += 1
    ident = f"fake-{_next}"
    send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
    for raw in sys.stdin:
        message: dict[str, Any] = json.loads(raw)
        if message.get("id") == ident and "method" not in message:
            return message
    raise SystemExit("the client went away")


def log(move: dict[str, Any], answers: list[dict[str, Any]]) -> None:
    with open(os.environ["FAKE_ACP_LOG"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"move": move, "answers": answers}) + "\n")


def play(session: str, cwd: str) -> None:
    with open(os.environ["FAKE_ACP_PLAN"], encoding="utf-8") as plan:
        moves = json.load(plan)
    for move in moves:
        if "write" in move:
            path = os.path.join(cwd, move["write"])
            log(move, [request("fs/write_text_file", {"sessionId": session, "path": path, "content": move["text"]})])
        elif "read" in move:
            path = os.path.join(cwd, move["read"])
            log(move, [request("fs/read_text_file", {"sessionId": session, "path": path})])
        elif "run" in move:
            create = {"sessionId": session, "command": move["run"], "args": move.get("args", []), "cwd": cwd}
            created = request("terminal/create", create)
            answers = [created]
            if move.get("again") and "call it again deliberately" in created.get("error", {}).get("message", ""):
                created = request("terminal/create", create)
                answers.append(created)
            if "result" in created:
                terminal = {"sessionId": session, "terminalId": created["result"]["terminalId"]}
                answers.append(request("terminal/wait_for_exit", terminal))
                answers.append(request("terminal/output", terminal))
                answers.append(request("terminal/release", terminal))
            log(move, answers)


def main() -> None:
    cwd = os.getcwd()
    for raw in sys.stdin:
        message = json.loads(raw)
        method, ident, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            log({"initialize": params.get("clientCapabilities")}, [])
            send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1, "agentCapabilities": {}}})
        elif method == "session/new":
            cwd = params.get("cwd") or cwd
            send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "fake-session"}})
        elif method == "session/prompt":
            play(params["sessionId"], cwd)
            send({"jsonrpc": "2.0", "id": ident, "result": {"stopReason": "end_turn"}})
        elif ident is not None and method is not None:
            send({"jsonrpc": "2.0", "id": ident, "result": {}})


if __name__ == "__main__":
    main()
