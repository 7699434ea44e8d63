"""Agent-session checkpoints: the agent's conversation, saved in the journal so that a successor resumes it.

A desk preset says how its CLI saves and continues a session (`agent.session` in the desk file: the arguments
of a fresh run and of a resumed one, and the transcript's path). While the agent runs, at each heartbeat where
the transcript changed, and once more when the agent ends, the desk journals the transcript as a `checkpoint`
entry named `agent-session` with the transcript as its blob: cut at the last turn boundary (whole lines, and no
tool call without its result: never the middle of a turn), every forge credential the desk knows replaced by
`[redacted]`, and at most `MAX_BYTES`.

The next agent run of the brief's round, on any machine, with any HOME and worktree path, writes the newest
checkpoint back where its CLI looks for it (the transcript path is filled in with this run's values) and
resumes it, with the desk's prompt (the journal's summary, the brief, feedback, steering) as the next message.
A restore that fails (the file cannot be written, or the resumed CLI ended without adding to the transcript)
is journaled as a note `{"checkpoint": "failed", "of": <seq>, "why"}`, and the run starts fresh: a failed
checkpoint is never tried again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from assay.core.credentials import SECRET_NAMES, secrets_in
from assay.core.deskspec import SessionSpec
from assay.core.records import JournalEntry

NAME = "agent-session"  # the `name` of a checkpoint entry holding an agent's transcript
MAX_BYTES = 32 * 1024 * 1024  # a transcript past this is not checkpointed (a note says so, once)
REDACTED = b"[redacted]"


def cwd_slug(path: Path | str) -> str:
    """The folder name a CLI derives from a working directory: each character other than a letter or digit
    made `-` (Claude Code's `$HOME/.claude/projects/<slug>`)."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


def _fill(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass(frozen=True)
class Saved:
    """A checkpoint in the journal: its entry's seq, the session it saved and the transcript."""

    seq: int
    session: str
    data: bytes


def latest(entries: Sequence[JournalEntry], read_blob: Callable[[JournalEntry], bytes]) -> Saved | None:
    """The newest `agent-session` checkpoint among `entries` (a round's) that no note marks failed."""
    failed = {(e.data or {}).get("of") for e in entries if e.kind == "note" and (e.data or {}).get("checkpoint")}
    for e in reversed(entries):
        data = e.data or {}
        if e.kind == "checkpoint" and data.get("name") == NAME and e.seq not in failed and data.get("session"):
            return Saved(e.seq, str(data["session"]), read_blob(e))
    return None


def resumed_note(saved: Saved) -> str:
    """What a resumed agent is told first: where its conversation comes from, and that the files may not match."""
    return ("## Resumed conversation\n\n"
            f"This conversation was saved by an earlier run of this brief (journal entry {saved.seq}) and is resumed "
            "here, maybe on another machine. The worktree is the work branch as last pushed: files changed after "
            "that push are not here. Check the files before relying on what this conversation says about them.\n\n")


def at_boundary(data: bytes) -> bytes:
    """The transcript up to its last turn boundary: whole JSON lines, ending where every tool call so far has its
    result (a line that is not JSON ends it too). A transcript of no such lines is empty."""
    open_calls: set[str] = set()
    end = 0
    position = 0
    for raw in data.splitlines(keepends=True):
        if not raw.endswith(b"\n"):
            break  # a line still being written
        position += len(raw)
        try:
            line = json.loads(raw)
        except ValueError:
            break
        for block in _blocks(line):
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                open_calls.add(str(block["id"]))
            elif block.get("type") == "tool_result":
                open_calls.discard(str(block.get("tool_use_id")))
        if not open_calls:
            end = position
    return data[:end]


def _blocks(line: object) -> Iterable[dict[str, object]]:
    message = line.get("message") if isinstance(line, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def known_secrets(environ: dict[str, str], forge_url: str) -> list[bytes]:
    """The credential values this desk holds: forge tokens in its environment, a password in the forge's URL."""
    values = {v for k, v in environ.items() if SECRET_NAMES.match(k) and len(v) >= 8} | secrets_in(forge_url)
    return sorted((v.encode() for v in values), key=len, reverse=True)


def scrub(data: bytes, secrets: Iterable[bytes]) -> bytes:
    for secret in secrets:
        data = data.replace(secret, REDACTED)
    return data


class Transcript:
    """One run's session: its id, the arguments that start or resume it, and the file its CLI writes."""

    def __init__(self, spec: SessionSpec, session: str, home: str, worktree: Path) -> None:
        values = {"session": session, "home": home, "worktree": str(worktree), "cwd_slug": cwd_slug(worktree)}
        self.session = session
        self.path = Path(_fill(spec.file, values))
        self.new_args = [_fill(a, values) for a in spec.new]
        self.resume_args = [_fill(a, values) for a in spec.resume]
        self._saved = ""  # the digest of what was last checkpointed or restored

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def changed(self, secrets: Sequence[bytes]) -> bytes | None:
        """The transcript to checkpoint now (at its last turn boundary, scrubbed), or None if that is what was
        checkpointed last, there is none yet, or it cannot be read."""
        try:
            raw = self.path.read_bytes()
        except OSError:
            return None
        data = scrub(at_boundary(raw), secrets)
        digest = hashlib.sha256(data).hexdigest()
        if not data or digest == self._saved:
            return None
        self._saved = digest
        return data

    def restore(self, data: bytes) -> None:
        """Write a checkpoint where the CLI looks for this session (whole or not at all). OSError if it cannot."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_bytes(data)
        partial.replace(self.path)
        self._saved = hashlib.sha256(data).hexdigest()
