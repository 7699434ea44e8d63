"""What a scripted model sees and says: the conversation in, one action out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exchange:
    """One shell command the model asked for, and what came back."""

    command: str
    output: str  # the tool result's text, as the CLI reported it
    failed: bool = False  # the CLI marked the result as an error (denied, or a non-zero exit)


@dataclass(frozen=True)
class Conversation:
    """A main-turn request: the task and every command exchanged so far, in order."""

    prompt: str  # the task: the text of the first user message
    exchanges: tuple[Exchange, ...] = ()
    texts: tuple[str, ...] = ()  # every user-side text in the request (prompt, reminders, tool output)
    tools: tuple[str, ...] = ()  # the names of the tools the request offers


@dataclass(frozen=True)
class Run:
    """Ask the CLI to run a shell command."""

    command: str


@dataclass(frozen=True)
class Edit:
    """Write a whole file (aider: an edit block; the tool CLIs get it as a shell command)."""

    path: str
    text: str


@dataclass(frozen=True)
class Call:
    """Call a tool by name (an MCP server's, `mcp__assay__step_run`) with this input."""

    name: str
    input: Mapping[str, object]


@dataclass(frozen=True)
class Finish:
    """End the turn with a text answer."""

    text: str = "Done."


Action = Run | Edit | Call | Finish
Brain = Callable[[Conversation], Action]


@dataclass
class Transcript:
    """What a server saw: every main-turn conversation, and how many side requests it answered."""

    conversations: list[Conversation] = field(default_factory=list)
    side_requests: int = 0
