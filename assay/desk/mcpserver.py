"""`assay mcp`: Assay's agent verbs as Model Context Protocol tools, over stdio, for an agent under a desk.

The agent starts it (its desk preset registers it); it talks to the desk over the same socket as `assay step`'s
fast path (`ASSAY_SOCKET`), so it holds no forge credentials and makes no fetch per call. The replay rules are
the CLI's, because the desk applies them: a call is matched by name, input and ordinal in the run; an
interrupted unsafe call is refused once with the same words; a deliberate second call runs. A step's command
runs here, in the agent's working directory, under a keeper that kills all it started when this server dies
(procs.py), and the desk going away stops it: the request and its answers are `assay step run`'s own
(steprequest.py). Arguments are checked against the
tool's schema first; errors come back as tool errors with the CLI's words, and a line that is no JSON-RPC
message gets JSON-RPC's error.

`TOOLS` is the one place each tool's name, description and input schema are written: the server lists them,
and `docgen` writes the table in docs/agents.md from them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from typing import Any

from assay.core.records.recordtype import dataclass
from assay.desk import procs, steprequest
from assay.desk.steprequest import Lines
from assay.errors import error_lines

SERVER_NAME = "assay"
_STRING = {"type": "string"}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]

    @property
    def arguments(self) -> str:
        """The arguments, for the docs: `name*` for a required one."""
        required = set(self.schema.get("required", []))
        return ", ".join(f"`{k}`" + ("*" if k in required else "") for k in self.schema.get("properties", {}))


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


TOOLS = (
    Tool("step_run", "Run a command as a journaled step: its intent is on the forge before it runs and its result "
         "after. A call already completed returns its recorded result without running again. An unsafe call that "
         "was cut off is refused once with what is known; call it again to run it on purpose.",
         _object({"name": {**_STRING, "description": "the step's name, e.g. deploy"},
                  "policy": {"type": "string", "enum": ["safe", "idempotent", "unsafe"], "default": "unsafe",
                             "description": "unsafe: never repeated blindly; idempotent: redone with the same key; "
                                            "safe: redone freely"},
                  "command": {**_STRING, "description": "a shell command (run with sh -c)"},
                  "argv": {"type": "array", "items": _STRING, "description": "or the command as words"},
                  "input": {**_STRING, "description": "JSON naming what the step acts on (default: the command)"},
                  "probe": {**_STRING, "description": "a command whose exit says if a cut-off call happened "
                                                      "(0 yes, 1 no)"},
                  "fresh": {"type": "boolean", "description": "run again even if a call completed"}},
                 ("name",))),
    Tool("value", "A value recorded in the journal: the same one again when the run is replayed after a crash.",
         _object({"kind": {"type": "string", "enum": ["now", "uuid", "random"]},
                  "bytes": {"type": "integer", "minimum": 1, "maximum": 4096, "description": "for random"}},
                 ("kind",))),
    Tool("settle", "Settle a step whose outcome is unknown: say whether it happened, with the evidence.",
         _object({"name": _STRING, "verdict": {"type": "string", "enum": ["happened", "did-not"]},
                  "input": {**_STRING, "description": "the step's input, when several calls share its name"},
                  "evidence": {**_STRING, "description": "what shows it"}}, ("name", "verdict"))),
    Tool("progress", "Say how a long piece of work is going: shown on the board, kept with the claim.",
         _object({"text": _STRING}, ("text",))),
    Tool("spawn", "Create a child brief on main for another desk. The same key gives the same child, however "
         "often this is called.", _object({"title": _STRING, "body": _STRING, "labels": {"type": "array",
                                                                                          "items": _STRING},
                                           "key": {**_STRING, "description": "names the child (default: its "
                                                                             "title)"}}, ("title",))),
    Tool("steering", "What people said about this brief since you were prompted: each message once.", _object({})),
    Tool("wait", "Park this brief on a condition (review, merge, checks, briefs:ID,ID, time:…): the run ends and "
         "the brief holds no compute until the condition is met.", _object({"on": _STRING}, ("on",))),
    Tool("journal", "This brief's journal: claims, intents, results, unknown outcomes, steering.",
         _object({"last": {"type": "integer", "minimum": 0, "description": "only the last N entries"}})),
    Tool("brief", "The brief you are working: title, body, labels, verify rows, epoch and attempt.", _object({})),
    Tool("answer", "Answer a review thread your prompt lists: what you changed for it (the desk replies naming the "
         "commit it pushes) or why nothing changes. The review is not marked ready while a thread has no answer.",
         _object({"thread": {**_STRING, "description": "the thread's id, as the prompt lists it"},
                  "fixed": {**_STRING, "description": "what you changed for it"},
                  "reason": {**_STRING, "description": "or why nothing changes"}}, ("thread",))),
)
BY_NAME = {t.name: t for t in TOOLS}


class ToolError(Exception):
    """A call that failed: its text is what the CLI would print."""


def _cli_error(message: str, hint: str = "") -> ToolError:
    return ToolError(error_lines(message, hint).rstrip("\n"))


def _desk_path() -> str:
    path = os.environ.get("ASSAY_SOCKET")
    if not path:
        raise _cli_error("no desk is serving this agent (ASSAY_SOCKET is not set)",
                         "`assay mcp` runs under `assay desk run`, started by the agent")
    return path


def _unreachable(exc: OSError) -> ToolError:
    return _cli_error(f"cannot reach the desk: {exc.strerror or exc}",
                      "the desk that takes the brief over records the step's outcome in the journal")


def _ask(request: dict[str, Any]) -> dict[str, Any]:
    """One request to the desk; its answer (or a ToolError with the CLI's words)."""
    path = _desk_path()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            lines = Lines(conn)
            lines.send(request)
            line = lines.readline()
    except OSError as exc:
        raise _unreachable(exc) from None
    if not line:
        raise _cli_error("the desk hung up before it answered", "call it again")
    reply: dict[str, Any] = json.loads(line)
    if reply.get("do") == "error":
        raise _cli_error(str(reply.get("message", "")), str(reply.get("hint", "")))
    return reply


def _step(arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A `step_run` call, as `assay step run` makes it (steprequest.py): the text the agent reads (a recorded
    result says so first), and the structured result; a ToolError with the CLI's words for any other answer."""
    argv = [str(a) for a in arguments.get("argv") or []]
    if arguments.get("command"):
        if argv:
            raise _cli_error("give `command` or `argv`, not both")
        argv = ["sh", "-c", str(arguments["command"])]
    request = steprequest.step_request(str(arguments.get("name", "")), arguments.get("policy", "unsafe"), argv,
                                       arguments.get("input"), bool(arguments.get("fresh", False)),
                                       arguments.get("probe"))
    path = _desk_path()
    try:
        answer = steprequest.ask(path, request, echo=False)
    except OSError as exc:
        raise _unreachable(exc) from None
    if answer.result is None:
        raise ToolError(answer.said.rstrip("\n"))
    output = str(answer.result.get("tail", ""))
    done = {"exit_code": answer.code, "ran": answer.ran, "output": output,
            "duration_ms": int(answer.result.get("duration_ms", 0))}
    return answer.said + f"exit {answer.code}\n{output}", done


def check(tool: Tool, arguments: dict[str, Any]) -> None:
    """The arguments against the tool's own schema (the CLI's limits: `bytes` 1 to 4096, `kind` one of three, a
    command as words is a list of strings); a ToolError in the CLI's words for the first that does not fit."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(tool.schema).iter_errors(arguments))
    if error is None:
        return
    where = ".".join(str(p) for p in error.absolute_path)
    rule, value = error.validator, error.instance
    if rule == "required":
        missing = next(k for k in tool.schema.get("required", []) if k not in arguments)
        problem = f"missing argument `{missing}`"
    elif rule == "additionalProperties":
        extra = sorted(set(arguments) - set(tool.schema.get("properties", {})))
        problem = f"no such argument: `{extra[0]}`"
    elif rule == "enum":
        problem = f"invalid value for `{where}`: {value!r} is not one of " + ", ".join(map(repr, error.validator_value))
    elif rule in ("minimum", "maximum"):
        limits = error.schema
        problem = f"invalid value for `{where}`: {value!r} is not in the range {limits.get('minimum', '')}<=x<=" \
                  f"{limits.get('maximum', '')}"
    elif rule == "type":
        wanted = {"integer": "a whole number", "string": "a string", "array": "a list", "boolean": "true or false",
                  "object": "an object"}.get(str(error.validator_value), str(error.validator_value))
        problem = f"invalid value for `{where or 'arguments'}`: {value!r} is not {wanted}"
    else:
        problem = f"invalid value for `{where or 'arguments'}`: {error.message}"
    raise _cli_error(problem, f"`{tool.name}` takes {tool.arguments} (* required)")


def call(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Run tool `name`: the text the agent reads, and the structured result. ToolError for a failure, and for
    arguments its schema does not allow (nothing is asked of the desk then)."""
    if name not in BY_NAME:
        raise _cli_error(f"no tool named {name!r}", "tools: " + ", ".join(BY_NAME))
    check(BY_NAME[name], arguments)
    if name == "step_run":
        return _step(arguments)
    if name == "value":
        bytes_ = int(arguments.get("bytes") or 16)
        value = str(_ask({"op": "value", "kind": arguments.get("kind"), "bytes": bytes_})["value"])
        return value, {"value": value}
    if name == "settle":
        evidence = arguments.get("evidence")
        settled = _ask({"op": "settle", "name": arguments.get("name", ""), "verdict": arguments.get("verdict"),
                        "input": arguments.get("input"), "evidence": {"said": evidence} if evidence else {}})["settled"]
        return (f"step {arguments.get('name')!r} (intent {settled['intent']}) settled as {settled['verdict']} "
                f"(seq {settled['seq']})"), dict(settled)
    if name == "progress":
        said = str(_ask({"op": "progress", "text": str(arguments.get("text", ""))})["progress"])
        return f"progress: {said}", {"progress": said}
    if name == "spawn":
        spawned = _ask({"op": "spawn", "title": str(arguments.get("title", "")), "body": str(arguments.get("body", "")),
                        "labels": [str(x) for x in arguments.get("labels") or []],
                        "key": str(arguments.get("key") or os.environ.get("ASSAY_IDEMPOTENCY_KEY", ""))})["spawned"]
        return f"{spawned['brief']}" + ("" if spawned.get("new") else " (already there)"), dict(spawned)
    if name == "steering":
        told = list(_ask({"op": "steering"})["steering"])
        text = "\n\n".join(f"{t['by'] or 'a person'} said: {t['text']}" for t in told) or "nothing new"
        return text, {"steering": told}
    if name == "wait":
        waiting = str(_ask({"op": "wait", "on": str(arguments.get("on", ""))})["waiting"])
        return waiting, {"waiting": waiting}
    if name == "journal":
        entries = list(_ask({"op": "journal", "last": int(arguments.get("last") or 0)})["journal"])
        return "\n".join(json.dumps(e, sort_keys=True) for e in entries), {"journal": entries}
    if name == "answer":
        answered = dict(_ask({"op": "answer", **{k: str(arguments[k]) for k in ("thread", "fixed", "reason")
                                                 if k in arguments}})["answered"])
        return (f"thread {answered['thread']}: answer journaled (seq {answered['seq']}); the desk replies on the "
                "review before it marks it ready"), answered
    about = dict(_ask({"op": "brief"})["brief"])
    rows = "\n".join(f"- {r['id']}: {r['run']}" for r in about.get("verify", []))
    return (f"{about.get('id')}: {about.get('title', '')}\n\n{about.get('body', '')}"
            + (f"\n\nVerify rows:\n{rows}" if rows else "")), about


def serve() -> None:
    """Serve the tools over this process's stdin and stdout until the agent closes them."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description, input_schema=t.schema)
                                            for t in TOOLS])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            text, structured = await anyio.to_thread.run_sync(call, params.name, dict(params.arguments or {}),
                                                              abandon_on_cancel=True)  # serve() ends its command
        except ToolError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))], is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=structured, is_error=False)

    from assay import __version__

    server: Server[Any] = Server(SERVER_NAME, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            checked_send, checked = anyio.create_memory_object_stream[Any](0)

            async def answer_bad_lines() -> None:
                """A line that is no JSON-RPC message gets JSON-RPC's error (the SDK drops it unanswered)."""
                async with checked_send:
                    async for item in read:
                        if isinstance(item, Exception):
                            await write.send(_bad_line(item))
                        else:
                            await checked_send.send(item)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(answer_bad_lines)
                await server.run(checked, write, server.create_initialization_options())
                tasks.cancel_scope.cancel()

    def end(signum: int, frame: object) -> None:
        """A stop signal ends the server at once: its steps' commands first (the SDK's threads would hold
        the exit until their reads and calls return)."""
        procs.kill_all(wait_s=5.0)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # one ignored on purpose (nohup) stays so
            signal.signal(sig, end)
    try:
        anyio.run(main)
    finally:  # its stdin closed: no step's command outlives the server
        procs.kill_all()


def _bad_line(exc: Exception) -> Any:
    """The JSON-RPC error for a line that is not JSON (-32700) or not a JSON-RPC message (-32600), id null."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    not_json = any(e.get("type") == "json_invalid" for e in getattr(exc, "errors", lambda: [])())
    error = types.ErrorData(code=-32700, message="Parse error: the line is not JSON") if not_json else \
        types.ErrorData(code=-32600, message="Invalid Request: the line is not a JSON-RPC 2.0 message")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error))


def registration(assay_bin: str) -> str:
    """Claude Code's `--mcp-config` JSON for this server, started as `assay_bin mcp`. `alwaysLoad`: its first turn
    waits for the server (up to `MCP_CONNECT_TIMEOUT_MS`) instead of starting without its tools."""
    return json.dumps({"mcpServers": {SERVER_NAME: {"command": assay_bin, "args": ["mcp"], "alwaysLoad": True}}})
