"""An OpenAI chat-completions server on 127.0.0.1 that aider (`--openai-api-base`) talks to.

aider sends every turn as one `POST /chat/completions` (streaming by default) whose messages are its own
system prompt, canned example turns, file listings and reminders around the user's task. This server turns
such a request into a `Conversation`, asks the `Brain`, and renders the action in the edit format the request
asks for:

- `Edit(path, text)`: in the "whole" format (pin it with `--edit-format whole`), the path line and a fenced
  block with the whole content, using the fence aider's system prompt names; in the "diff" format (SEARCH/REPLACE
  blocks), one block that replaces the file's content as the chat shows it (an empty SEARCH for a file it does
  not show, which creates a new file).
- `Finish(text)`: the text as a plain answer.
- `Run(command)`: in the "diff" format a ```bash block, which aider offers to run ("Run shell command?"); under
  `--yes-always` aider answers no to that (it needs an explicit yes). The "whole" format has no shell
  commands: there a fenced block would be taken for a file listing, so the command is only shown, indented.

aider's side requests (commit messages, chat summaries: two messages, a known system prompt, never streamed)
get a short harmless answer and are counted in `transcript.side_requests`; they never reach the brain.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tests.agentmodels.brain import Action, Brain, Call, Conversation, Exchange, Finish, Run
from tests.agentmodels.server import ModelServer, Reply, Request, json_reply, sse_event, sse_reply

MODEL = "scripted"  # aider's `--model openai/scripted` arrives as "scripted"

# The openings of the user-side messages aider writes itself (aider 0.86: coders/base_prompts.py, prompts.py,
# linter.py); anything else a user message holds came from the person (or program) giving the task.
AIDER_OWN = (
    "I switched to a new code base.",
    "Here are summaries of some files present in my git repository.",
    "Here are some READ ONLY files, provided for your reference.",
    "I have *added these files to the chat*",
    "I am not sharing any files that you can edit yet.",
    "Don't try and edit any existing code without asking me to add the files to the chat!",
    "I committed the changes with git hash",
    "I updated the files.",
    "I didn't see any properly formatted edits in your reply?!",
    "I edited the files myself.",
    "I spoke to you previously about a number of things.",
    "I added these files to the chat:",
    "I did `git reset --hard HEAD~1` to discard the last edits.",
    "I ran this command:",
    "Output from ",
    "# Fix any errors below, if possible.",
    "## Running: ",
    "^C KeyboardInterrupt",
)
EXAMPLES_END = "I switched to a new code base."
# The system prompts of aider's side requests (aider/prompts.py: commit_system, summarize).
COMMIT_MARK = "commit message"
SUMMARY_MARK = "summarize this partial conversation"
COMMIT_ANSWER = "chore: scripted change"
SUMMARY_ANSWER = "I asked you to make a change to the repository."

FILES_PREFIX = "I have *added these files to the chat*"


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts of which the text parts count."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def common_suffix(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def strip_reminder(text: str, systems: list[str]) -> str:
    """The user text without the system reminder aider appends to the last user message.

    aider sends `task + "\\n\\n" + reminder` as the last user message and `main prompt + "\\n" + reminder` as the
    system message (when the model's reminder goes to the user side), so the reminder is their long common tail.
    """
    best = max((common_suffix(text, s) for s in systems), default=0)
    if best < 40:  # no real shared tail: the reminder, if any, went into its own system message
        return text
    cut = text.find("\n\n", max(0, len(text) - best - 2))
    return text[:cut] if cut >= 0 else text


def parse_outputs(text: str) -> list[Exchange]:
    """Shell output aider put in the chat: "Output from CMD\\nOUTPUT\\n" once per command."""
    exchanges: list[Exchange] = []
    parts = re.split(r"(?m)^Output from ", text)
    for part in parts[1:]:
        command, _, output = part.partition("\n")
        exchanges.append(Exchange(command=command.strip(), output=output.strip("\n")))
    return exchanges


def conversation_of(messages: list[dict[str, Any]]) -> Conversation:
    """A main-turn request's messages as the brain sees them."""
    systems = [text_of(m.get("content")) for m in messages if m.get("role") == "system"]
    users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    start = 0
    for i, text in enumerate(users):
        if text.startswith(EXAMPLES_END):
            start = i + 1  # what comes before it are aider's canned example turns
    own = [strip_reminder(text, systems) for text in users[start:]]
    tasks = [text for text in own if not text.startswith(AIDER_OWN)]
    prompt = tasks[0] if tasks else (own[-1] if own else "")  # the task; else aider's last word
    exchanges = [e for text in own if text.startswith("Output from ") for e in parse_outputs(text)]
    return Conversation(prompt=prompt.strip(), exchanges=tuple(exchanges), texts=tuple(users))


def is_side_request(messages: list[dict[str, Any]]) -> bool:
    if not messages or messages[0].get("role") != "system":
        return False
    system = text_of(messages[0].get("content")).lower()
    return COMMIT_MARK in system or SUMMARY_MARK in system


def fences_of(system: str) -> tuple[str, str]:
    """The fence aider's whole-file prompt asks for ("Second line: opening ```", "Final line: closing ```")."""
    opening = re.search(r"Second line: opening (\S+)", system)
    closing = re.search(r"Final line: closing (\S+)", system)
    return (opening.group(1) if opening else "```", closing.group(1) if closing else "```")


def chat_file_contents(users: list[str], fence: tuple[str, str]) -> dict[str, str]:
    """The files aider shows as added to the chat: "\\nPATH\\n<fence>\\nCONTENT<fence>\\n" after its prefix."""
    files: dict[str, str] = {}
    for text in users:
        if not text.startswith(FILES_PREFIX):
            continue
        pattern = re.compile(
            rf"\n([^\n]+)\n{re.escape(fence[0])}\n(.*?){re.escape(fence[1])}\n(?=\n|\Z)", re.DOTALL)
        for match in pattern.finditer(text):
            files[match.group(1)] = match.group(2)
    return files


def render(action: Action, messages: list[dict[str, Any]]) -> str:
    """The assistant's reply for `action`, in the edit format the request's system prompt describes."""
    system = "\n".join(text_of(m.get("content")) for m in messages if m.get("role") == "system")
    diff_format = "SEARCH/REPLACE" in system
    if isinstance(action, Finish):
        return action.text
    if isinstance(action, Run):
        if diff_format:
            return f"Run this command:\n\n```bash\n{action.command}\n```\n"
        indented = "\n".join("    " + line for line in action.command.splitlines())
        return f"Run this command:\n\n{indented}\n"
    if isinstance(action, Call):
        raise ValueError("a chat model here calls no tools: aider has none")
    text = action.text if action.text.endswith("\n") or not action.text else action.text + "\n"
    if diff_format:
        users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
        current = chat_file_contents(users, ("```", "```")).get(action.path, "")
        return (f"{action.path}\n```\n<<<<<<< SEARCH\n{current}=======\n{text}>>>>>>> REPLACE\n```\n")
    opening, closing = fences_of(system)
    return f"{action.path}\n{opening}\n{text}{closing}\n"


def side_answer(messages: list[dict[str, Any]]) -> str:
    system = text_of(messages[0].get("content")).lower()
    return COMMIT_ANSWER if COMMIT_MARK in system else SUMMARY_ANSWER


def completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chunks(model: str, text: str, usage: bool) -> Iterator[bytes]:
    """The SSE stream of one answer: a role chunk, the text a line at a time, the finish chunk, `[DONE]`."""
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": model}
    yield sse_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "finish_reason": None}]})
    for line in text.splitlines(keepends=True):
        yield sse_event({**base, "choices": [{"index": 0, "delta": {"content": line}, "finish_reason": None}]})
    yield sse_event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage:
        yield sse_event({**base, "choices": [],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
    yield sse_event("[DONE]")


class ChatServer(ModelServer):
    """`with ChatServer(brain) as server:` then `aider --openai-api-base server.url --model openai/scripted`."""

    def __init__(self, brain: Brain) -> None:
        super().__init__()
        self.brain = brain

    def handle(self, request: Request) -> Reply:
        path = request.path.rstrip("/")
        if request.method == "HEAD" or (request.method == "GET" and path == ""):
            return Reply()
        if request.method == "GET" and path.endswith("/models"):
            return json_reply({"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "assay-tests"}]})
        if request.method == "POST" and path.endswith("/chat/completions"):
            body = request.json()
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise ValueError(f"not a chat completions request: {request.body[:200]!r}")
            text = self.answer(body["messages"])
            model = str(body.get("model") or MODEL)
            if not body.get("stream"):
                return json_reply(completion(model, text))
            options = body.get("stream_options")
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            return sse_reply(chunks(model, text, usage))
        return json_reply({"error": {"message": f"no such endpoint: {request.method} {request.path}",
                                     "type": "invalid_request_error", "param": None, "code": None}}, 404)

    def answer(self, messages: list[dict[str, Any]]) -> str:
        if is_side_request(messages):
            self.transcript.side_requests += 1
            return side_answer(messages)
        seen = conversation_of(messages)
        self.transcript.conversations.append(seen)
        return render(self.brain(seen), messages)
