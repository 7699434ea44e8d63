"""A scripted OpenAI Responses API for the real Codex CLI (`codex exec`) with a custom model provider.

Codex calls `POST {base_url}/responses` with `stream: true`. A main-turn request (it offers Codex's shell
tool) becomes a `Conversation` for the brain, and the brain's action goes back as an SSE stream: `Run` and
`Edit` as a function call of the shell tool the request offers, `Finish` as an assistant message. Other
requests (any without the shell tool) are side requests: answered with a short message and counted;
`GET {base_url}/models` gets a list with the one scripted model.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from tests.agentmodels.anthropic import edit_command
from tests.agentmodels.brain import Action, Brain, Call, Conversation, Edit, Exchange, Finish
from tests.agentmodels.server import ModelServer, Reply, Request, json_reply, sse_event, sse_reply

MODEL = "gpt-scripted"
# Codex's shell tools, newest first, and the name of their command argument.
SHELL_TOOLS = {"exec_command": "cmd", "shell_command": "command", "shell": "command"}
# User-role messages Codex writes itself (project docs, environment); the task is the first other one.
_CONTEXT = re.compile(r"^\s*(<environment_context>|<user_instructions>|# AGENTS\.md instructions|<permissions)",
                      re.IGNORECASE)
_EXIT = re.compile(r"(?:Process exited with code|Exit code:?|\"exit_code\":)\s*(-?\d+)")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [c for c in content or [] if isinstance(c, dict)]
    return "\n".join(str(p.get("text", "")) for p in parts if "text" in p)


def _arguments(item: dict[str, Any]) -> dict[str, Any]:
    try:
        value = json.loads(item.get("arguments") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _command(item: dict[str, Any]) -> str:
    name = str(item.get("name", ""))
    if item.get("namespace"):  # an MCP server's tool: named as the Anthropic side names it, mcp__<server>__<tool>
        return f"{item['namespace']}__{name} {json.dumps(_arguments(item), sort_keys=True)}"
    if item.get("type") == "custom_tool_call":
        return f"{name} {item.get('input', '')}"
    args = _arguments(item)
    command = args.get(SHELL_TOOLS.get(name, "cmd"))
    if isinstance(command, list):  # the old `shell` tool: ["bash", "-lc", "..."]
        return str(command[-1]) if command else ""
    if isinstance(command, str):
        return command
    return f"{name} {json.dumps(args, sort_keys=True)}"


def _failed(output: Any, text: str) -> bool:
    """A non-zero exit, or a command Codex refused to start ("exec_command failed: ... Rejected", "approval
    policy is Never; reject command"): its output has no "Process exited/running" line."""
    if isinstance(output, dict) and output.get("success") is False:
        return True
    match = _EXIT.search(text)
    if match:
        return match.group(1) != "0"
    return "Process running with session ID" not in text


def conversation(body: dict[str, Any]) -> Conversation:
    """The task, the command exchanges and every user-side text of a Responses request."""
    prompt: str | None = None
    texts: list[str] = []
    calls: dict[str, str] = {}  # call_id -> command, in the order asked
    mcp: set[str] = set()  # the calls of an MCP server's tools: their output has no exit code
    results: dict[str, tuple[str, bool]] = {}
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind in ("function_call", "custom_tool_call"):
            calls[str(item.get("call_id"))] = _command(item)
            if item.get("namespace"):
                mcp.add(str(item.get("call_id")))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            raw = item.get("output")
            output = _text(raw.get("content", "")) if isinstance(raw, dict) else _text(raw)
            failed = bool(re.search(r"(?m)^error: ", output)) if str(item.get("call_id")) in mcp \
                else _failed(raw, output)
            results[str(item.get("call_id"))] = (output, failed)
            texts.append(output)
        elif kind == "message" and item.get("role") == "user":
            text = _text(item.get("content"))
            texts.append(text)
            if prompt is None and text.strip() and not _CONTEXT.match(text):
                prompt = text.strip()
    exchanges = tuple(Exchange(command=command, output=results[call_id][0], failed=results[call_id][1])
                      for call_id, command in calls.items() if call_id in results)
    tools: list[str] = []
    for tool in (t for t in body.get("tools") or [] if isinstance(t, dict)):
        if tool.get("type") == "namespace":  # an MCP server's tools
            tools += [f"{tool.get('name')}__{t.get('name')}" for t in tool.get("tools") or [] if isinstance(t, dict)]
        else:
            tools.append(str(tool.get("name")))
    return Conversation(prompt=prompt or "", exchanges=exchanges, texts=tuple(texts), tools=tuple(tools))


def shell_tool(body: dict[str, Any]) -> str | None:
    """The name of the shell tool the request offers (None: a side request)."""
    names = {str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)}
    return next((name for name in SHELL_TOOLS if name in names), None)


def _usage() -> dict[str, Any]:
    return {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20}


def _stream(item: dict[str, Any]) -> Iterator[bytes]:
    response_id = f"resp_{uuid.uuid4().hex[:24]}"
    response: dict[str, Any] = {"id": response_id, "object": "response", "created_at": int(time.time()),
                                "status": "in_progress", "model": MODEL, "output": []}
    yield sse_event({"type": "response.created", "response": response}, event="response.created")
    added = {**item, "status": "in_progress"}
    if item["type"] == "message":
        added["content"] = []
    yield sse_event({"type": "response.output_item.added", "output_index": 0, "item": added},
                    event="response.output_item.added")
    if item["type"] == "message":
        text = item["content"][0]["text"]
        yield sse_event({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                         "content_index": 0, "delta": text}, event="response.output_text.delta")
    yield sse_event({"type": "response.output_item.done", "output_index": 0, "item": item},
                    event="response.output_item.done")
    done = {**response, "status": "completed", "output": [item], "usage": _usage()}
    yield sse_event({"type": "response.completed", "response": done}, event="response.completed")


def message_item(text: str) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{uuid.uuid4().hex[:24]}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def action_item(action: Action, tool: str) -> dict[str, Any]:
    if isinstance(action, Finish):
        return message_item(action.text)
    if isinstance(action, Call):  # an MCP server's tool: Codex offers them in a namespace (`mcp__assay`)
        namespace, _, name = action.name.rpartition("__")
        return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": f"call_{uuid.uuid4().hex[:24]}", "name": name, "namespace": namespace,
                "arguments": json.dumps(dict(action.input)), "status": "completed"}
    command = edit_command(action.path, action.text) if isinstance(action, Edit) else action.command
    if tool == "exec_command":
        # login=false: a login shell (bash -lc) runs /etc/profile, which resets PATH on Debian.
        arguments: dict[str, Any] = {"cmd": command, "login": False, "yield_time_ms": 30000}
    elif tool == "shell":
        arguments = {"command": ["bash", "-c", command]}
    else:
        arguments = {"command": command, "login": False}
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:24]}", "call_id": f"call_{uuid.uuid4().hex[:24]}",
            "name": tool, "arguments": json.dumps(arguments), "status": "completed"}


class ResponsesServer(ModelServer):
    """`with ResponsesServer(brain) as server:` then a Codex provider with `base_url = server.base_url`."""

    def __init__(self, brain: Brain) -> None:
        super().__init__()
        self.brain = brain

    @property
    def base_url(self) -> str:
        """What a Codex provider's `base_url` is set to (Codex appends `/responses`)."""
        return f"{self.url}/v1"

    def handle(self, request: Request) -> Reply:
        path = request.path.rstrip("/")
        if request.method == "POST" and path.endswith("/responses"):
            body = request.json()
            if not isinstance(body, dict):
                raise ValueError(f"not a JSON object: {request.body[:200]!r}")
            tool = shell_tool(body)
            if tool is None:
                self.transcript.side_requests += 1
                return sse_reply(_stream(message_item("OK")))
            seen = conversation(body)
            self.transcript.conversations.append(seen)
            return sse_reply(_stream(action_item(self.brain(seen), tool)))
        if request.method == "GET" and path.endswith("/models"):
            return json_reply({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "scripted"}],
                               "models": []})
        if request.method in ("HEAD", "GET") and path in ("", "/v1"):
            return Reply()
        return json_reply({"error": {"type": "not_found", "message": f"{request.method} {request.path}"}}, 404)
