"""A scripted Anthropic Messages API for the real Claude Code CLI (`claude -p`).

Claude Code sends `HEAD /`, then `POST /v1/messages?beta=true` with `stream: true`. A main-turn request
(it offers the `Bash` tool and asks for no structured output) becomes a `Conversation` for the brain; the
brain's action goes back as an SSE stream: `Run`/`Edit` as a `Bash` tool_use (stop_reason `tool_use`),
`Finish` as text (`end_turn`). Anything else (the session title request, whose `output_config.format` is
a JSON schema, and any other request without the Bash tool) is a side request: answered briefly, counted,
never shown to the brain.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator
from typing import Any

from tests.agentmodels.brain import Action, Brain, Call, Conversation, Edit, Exchange, Finish
from tests.agentmodels.server import ModelServer, Reply, Request, json_reply, sse_event, sse_reply

MODEL = "claude-scripted"
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def edit_command(path: str, text: str) -> str:
    """A shell command that writes `text` to `path` exactly (any bytes but NUL), creating its folder."""
    write = f"printf '%s' {shlex.quote(text)} > {shlex.quote(path)}"
    folder = path.rsplit("/", 1)[0] if "/" in path.strip("/") else ""
    return f"mkdir -p {shlex.quote(folder)} && {write}" if folder else write


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _result_text(content: Any) -> str:
    """A tool_result's content: a string, or a list of blocks whose text blocks are joined."""
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in _blocks(content) if b.get("type") == "text")


def _command(block: dict[str, Any]) -> str:
    tool_input = block.get("input") or {}
    if block.get("name") == "Bash" and isinstance(tool_input, dict):
        return str(tool_input.get("command", ""))
    return f"{block.get('name')} {json.dumps(tool_input, sort_keys=True)}"


def conversation(body: dict[str, Any]) -> Conversation:
    """The task, the command exchanges and every user-side text of a Messages request (a mid-conversation system
    message too: the model reads it)."""
    prompt: str | None = None
    texts: list[str] = []
    calls: dict[str, str] = {}  # tool_use id -> command, in the order asked
    results: dict[str, tuple[str, bool]] = {}
    for message in body.get("messages", []):
        role = message.get("role")
        for block in _blocks(message.get("content")):
            kind = block.get("type")
            if role == "assistant" and kind == "tool_use":
                calls[str(block.get("id"))] = _command(block)
            elif role == "user" and kind == "tool_result":
                output = _result_text(block.get("content"))
                results[str(block.get("tool_use_id"))] = (output, bool(block.get("is_error")))
                texts.append(output)
            elif role == "system" and kind == "text":  # mid-conversation context (Claude Code 2.1.332's hooks')
                texts.append(str(block.get("text", "")))
            elif role == "user" and kind == "text":
                text = str(block.get("text", ""))
                texts.append(text)
                task = _REMINDER.sub("", text).strip()
                if prompt is None and task:
                    prompt = task
    exchanges = tuple(Exchange(command=command, output=results[use_id][0], failed=results[use_id][1])
                      for use_id, command in calls.items() if use_id in results)
    tools = tuple(str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict))
    return Conversation(prompt=prompt or "", exchanges=exchanges, texts=tuple(texts), tools=tools)


def is_main_turn(body: dict[str, Any]) -> bool:
    """A request the brain answers: it offers the Bash tool and asks for no structured output."""
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    output_format = (body.get("output_config") or {}).get("format")
    return "Bash" in tools and not output_format


def _schema_example(schema: Any) -> Any:
    """A small value matching a JSON schema (enough for the title request's `{title}`)."""
    if not isinstance(schema, dict):
        return "Task"
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {name: _schema_example(sub) for name, sub in props.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return "Scripted task"


def _stream(blocks: list[dict[str, Any]], stop_reason: str) -> Iterator[bytes]:
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    yield sse_event({"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}},
        event="message_start")
    yield sse_event({"type": "ping"}, event="ping")
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield sse_event({"type": "content_block_start", "index": index, "content_block": start},
                        event="content_block_start")
        yield sse_event({"type": "content_block_delta", "index": index, "delta": delta},
                        event="content_block_delta")
        yield sse_event({"type": "content_block_stop", "index": index}, event="content_block_stop")
    yield sse_event({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                     "usage": {"output_tokens": 10}}, event="message_delta")
    yield sse_event({"type": "message_stop"}, event="message_stop")


def action_stream(action: Action) -> Iterator[bytes]:
    if isinstance(action, Finish):
        return _stream([{"type": "text", "text": action.text}], "end_turn")
    if isinstance(action, Call):
        call = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": action.name, "input": action.input}
        return _stream([call], "tool_use")
    if isinstance(action, Edit):
        command, description = edit_command(action.path, action.text), f"Write {action.path}"
    else:
        command, description = action.command, "Run a command"
    tool_use = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": "Bash",
                "input": {"command": command, "description": description}}
    return _stream([tool_use], "tool_use")


class AnthropicServer(ModelServer):
    """`with AnthropicServer(brain) as server:` then `ANTHROPIC_BASE_URL=server.url`."""

    def __init__(self, brain: Brain) -> None:
        super().__init__()
        self.brain = brain

    def handle(self, request: Request) -> Reply:
        if request.method == "HEAD" or (request.method == "GET" and request.path in ("", "/")):
            return Reply()
        if request.method == "POST" and request.path == "/v1/messages":
            body = request.json()
            if not isinstance(body, dict):
                raise ValueError(f"not a JSON object: {request.body[:200]!r}")
            if not is_main_turn(body):
                return self._side(body)
            seen = conversation(body)
            self.transcript.conversations.append(seen)
            return sse_reply(action_stream(self.brain(seen)))
        if request.method == "POST" and request.path == "/v1/messages/count_tokens":
            return json_reply({"input_tokens": 100})
        return json_reply({"type": "error", "error": {"type": "not_found_error", "message": request.path}}, 404)

    def _side(self, body: dict[str, Any]) -> Reply:
        self.transcript.side_requests += 1
        output_format = (body.get("output_config") or {}).get("format") or {}
        schema = output_format.get("schema") if isinstance(output_format, dict) else None
        text = json.dumps(_schema_example(schema)) if schema else "OK"
        blocks = [{"type": "text", "text": text}]
        if body.get("stream"):
            return sse_reply(_stream(blocks, "end_turn"))
        return json_reply({"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                           "model": MODEL, "content": blocks, "stop_reason": "end_turn", "stop_sequence": None,
                           "usage": {"input_tokens": 10, "output_tokens": 10}})
