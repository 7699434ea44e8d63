"""Agent-session checkpoints: the agent's conversation, saved in the journal so that a successor resumes it.

A desk preset says how its CLI saves and continues a session (`agent.session` in the desk file: the arguments
of a fresh run and of a resumed one, and the transcript's path). While the agent runs, as each turn ends (the
CLI's hook or notify program, or the transcript reaching a new turn boundary: `agent.Heartbeat`), at a
heartbeat where the transcript changed, and once more when the agent ends, the desk journals the transcript as
a `checkpoint` entry named `agent-session` with the transcript as its blob: only while it ends at a turn boundary
(whole lines, and no tool call without its result: never the middle of a turn, whose effects the worktree
recorded with it may show), every forge credential the desk knows replaced by `[redacted]`
(`credentials.scrub`), and at most `MAX_BYTES`.

The next agent run of the brief's round, on any machine, with any HOME and worktree path, writes the newest
checkpoint back where its CLI looks for it (the transcript path is filled in with this run's values) and
resumes it, with the desk's prompt (the journal's summary, the brief, feedback, steering) as the next message.
A restore that fails (the file cannot be written, or the resumed CLI ended without adding to the transcript)
is journaled as a note `{"checkpoint": "failed", "of": <seq>, "why"}`, and the run starts fresh: a failed
checkpoint is never tried again.

Each checkpoint also records the worktree at the moment its transcript was read (`core/wip.py`): the entry names
the snapshot (`"worktree": <commit>`), as does the last result of each push of the agent's steps. The run
that resumes it restores the newest snapshot of the round first (`newest_files`: a later step's result would be
replayed, not run again, so its files must be there); one that cannot be fetched or restored is journaled as
`{"worktree": "failed", "of": <seq>, "why"}`, and the one before it is tried (the run goes on with the branch as
pushed when none can be). `resumed_note` tells the agent which it got.

A restored transcript is moved to this run's paths (`moved`): the worktree the CLI recorded for the session (the
`cwd` of its lines), that path's `cwd_slug`, and the folder the transcript was filed under (HOME, found before
the pattern's `{cwd_slug}` folder) are rewritten to this run's. A CLI that keeps its working directory and its
system prompt in the transcript (Claude Code 2.1.332 does) would otherwise go on naming the dead desk's folders.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from assay.core.credentials import SECRET_NAMES, held, secrets_in
from assay.core.credentials import scrub as scrub  # a transcript is scrubbed as a worktree snapshot is
from assay.core.deskspec import SessionSpec
from assay.core.forgevalues import problem
from assay.core.lives import own_tag
from assay.core.records import JournalEntry
from assay.core.records.recordtype import dataclass

NAME = "agent-session"  # the `name` of a checkpoint entry holding an agent's transcript
MAX_BYTES = 32 * 1024 * 1024  # a transcript past this is not checkpointed (a note says so, once)
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def cwd_slug(path: Path | str) -> str:
    """The folder name a CLI derives from a working directory: each character other than a letter or digit
    made `-` (Claude Code's `$HOME/.claude/projects/<slug>`)."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(path))


# A CLI's own folder (its sessions, settings and login) that a desk may give its agent in `env:` under `{state}`:
# the variable, where the user's is when it is not set (below HOME), and the files copied from the user's at each run.
OWN_HOMES = {"CODEX_HOME": (".codex", ("config.toml", "auth.json", "AGENTS.md"))}


def desk_values(env: Iterable[tuple[str, str]], state: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """A desk's `env:` with `{home}` (the HOME the desk passes on) and `{state}` (this desk's own folder, `state`)
    filled in. A CLI folder of `OWN_HOMES` set under `{state}` is made, and the user's settings copied in (the
    variable in the desk's environment names the user's folder, else HOME's): the desk's sessions are its own,
    found where its `agent.session.file` looks, and no other desk's."""
    home = environ.get("HOME", "")
    values = {name: _fill(value, {"home": home, "state": str(state)}) for name, value in env}
    for name, (default, files) in OWN_HOMES.items():
        raw = dict(env).get(name, "")
        if "{state}" not in raw:
            continue
        folder, users = Path(values[name]), Path(environ.get(name) or Path(home or "/") / default)
        folder.mkdir(parents=True, exist_ok=True)
        for file in files:
            source, target = users / file, folder / file
            try:
                data = source.read_bytes()
                if target.is_file() and target.read_bytes() == data:
                    continue
            except OSError:
                continue  # the user has none: the CLI goes without
            partial = target.with_name(f".{file}.{own_tag()}")
            partial.write_bytes(data)
            partial.chmod(0o600)
            partial.replace(target)
    return values


def unfindable(spec: SessionSpec, env: Mapping[str, str]) -> str | None:
    """Why the transcripts `spec.file` names cannot be found with the agent's environment `env` (a variable it
    names unset, or a fixed part that is not an absolute path), or None. Such a desk would never checkpoint."""
    fixed = re.split(r"\*|\{session\}", spec.file)[0]
    values = {"home": env.get("HOME", ""), "worktree": "/worktree", "cwd_slug": "-worktree",
              **{k: v for k, v in env.items() if k.upper() == k}}
    unset = [name for name in re.findall(r"\{(\w+)\}", fixed) if not values.get(name)]
    if unset:
        return f"`agent.session.file` names {{{unset[0]}}}, which the agent's environment does not set"
    if not _fill(fixed, values).startswith("/"):
        return f"`agent.session.file` ({spec.file}) is not an absolute path in the agent's environment"
    return None


def _fill(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass(frozen=True)
class Saved:
    """A checkpoint in the journal: its entry's seq, the session it saved, the transcript, and its path below the
    transcript pattern's fixed part (for CLIs that file sessions by date, say)."""

    seq: int
    session: str
    data: bytes
    file: str = ""
    worktree: str = ""  # the snapshot of the worktree taken with it (`core/wip.py`), "" for none


def latest(entries: Sequence[JournalEntry], read_blob: Callable[[JournalEntry], bytes]) -> Saved | None:
    """The newest `agent-session` checkpoint among `entries` (a round's) that no note marks failed; its worktree
    snapshot left out if a note marks that failed."""
    notes = [e.data or {} for e in entries if e.kind == "note"]
    failed = {d.get("of") for d in notes if d.get("checkpoint")}
    lost = {d.get("of") for d in notes if d.get("worktree") == "failed"}
    for e in reversed(entries):
        data = e.data or {}
        if e.kind == "checkpoint" and data.get("name") == NAME and e.seq not in failed and data.get("session"):
            worktree = str(data.get("worktree") or "") if e.seq not in lost else ""
            return Saved(e.seq, str(data["session"]), read_blob(e), str(data.get("file") or ""), worktree)
    return None


@dataclass(frozen=True)
class Files:
    """A worktree snapshot in the journal (`core/wip.py`): the seq and epoch of the entry naming it (a checkpoint,
    or the result of a step whose effect left the files so), and the commit."""

    seq: int
    epoch: int
    commit: str


def newest_files(entries: Sequence[JournalEntry]) -> Files | None:
    """The newest worktree snapshot among `entries` (a round's) that no note marks failed: an `agent-session`
    checkpoint's, or a step result's (taken at the push that carried it, so later than a checkpoint before it)."""
    notes = [e.data or {} for e in entries if e.kind == "note"]
    lost = {d.get("of") for d in notes if d.get("worktree") == "failed"}
    for e in reversed(entries):
        data = e.data or {}
        named = data.get("worktree")
        if e.kind in ("checkpoint", "result") and isinstance(named, str) and named and e.seq not in lost \
                and (e.kind == "result" or data.get("name") == NAME):
            return Files(e.seq, e.epoch, named)
    return None


def files_note(files: Files, older: bool = False) -> str:
    """What an agent starting afresh is told when the worktree was restored from an earlier run's snapshot (`older`:
    a newer one could not be restored)."""
    which = "as its last recorded command ended" if not older else \
        "an older snapshot, as a newer one could not be restored"
    return ("## Worktree\n\n"
            f"The worktree was restored as an earlier run of this brief left it at journal entry {files.seq} "
            f"({which}): changes made after that are not here. Check the files before repeating work.\n\n")


OLDER_SAID = " A newer snapshot of the worktree could not be restored: commands recorded after this one may have " \
             "changed files that are not here."


WORKTREE_SAID = {
    "restored": "The worktree is as it was when this conversation was saved: its files, and the commits made by "
                "then, pushed or not.",
    "later": "The worktree is as a command recorded after this conversation was saved left it: it holds the "
             "changes of the commands that ran since, which this conversation may not show.",
    "newer": "The worktree is the work branch as pushed after this conversation was saved: it holds the files of "
             "that moment, and maybe later changes.",
    "": "The worktree is the work branch as last pushed: files changed after that push are not here.",
}


def resumed_note(saved: Saved, where: Path | str, worktree: str = "", older: bool = False) -> str:
    """What a resumed agent is told first: where its conversation comes from, where it works now (`where`), and
    what its worktree holds: `worktree` is "restored" (the checkpoint's snapshot), "later" (a step result's after
    it), "newer" (the branch as pushed after it) or "" (the branch as pushed: no snapshot, or one that could not be
    restored)."""
    check = "" if worktree == "restored" and not older else " Check the files before relying on what this " \
                                                             "conversation says about them."
    return ("## Resumed conversation\n\n"
            f"This conversation was saved by an earlier run of this brief (journal entry {saved.seq}) and is resumed "
            f"here, maybe on another machine. This run works in `{where}`: a path of the earlier run's worktree or "
            f"HOME means this run's. {WORKTREE_SAID[worktree]}{OLDER_SAID if older else ''}{check}\n\n")


def recorded_cwd(data: bytes) -> str:
    """The working directory a CLI recorded for a session: the first absolute `cwd` of its transcript's lines
    (Claude Code's on each line, Codex's in its `session_meta` payload), or ""."""
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        for part in (line, line.get("payload")) if isinstance(line, dict) else ():
            if isinstance(part, dict) and isinstance(part.get("cwd"), str) and part["cwd"].startswith("/"):
                return str(part["cwd"])
    return ""


def moved(data: bytes, paths: dict[str, str]) -> bytes:
    """`data` with each path in `paths` (old: new) replaced wherever it stands whole (not followed by another
    character of a name), as text inside JSON strings; the longest first, in one pass."""
    pairs = {json.dumps(old)[1:-1]: json.dumps(new)[1:-1] for old, new in paths.items()
             if old != new and len(old) > 1 and new}
    if not pairs:
        return data
    olds = sorted(pairs, key=len, reverse=True)
    pattern = re.compile("(?:" + "|".join(re.escape(o) for o in olds) + r")(?![A-Za-z0-9_.-])")
    return pattern.sub(lambda m: pairs[m.group(0)], data.decode("utf-8", "surrogateescape")).encode(
        "utf-8", "surrogateescape")


def at_boundary(data: bytes) -> bytes:
    """The transcript up to its last turn boundary: whole JSON lines, ending where every tool call so far has its
    result (Claude Code's `tool_use`/`tool_result`, Codex's `function_call`/`function_call_output`; a line that is
    not JSON ends it too). A transcript of no such lines is empty."""
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
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):  # Claude Code's
                open_calls.add(str(block["id"]))
            elif block.get("type") == "tool_result":
                open_calls.discard(str(block.get("tool_use_id")))
            elif block.get("type") == "function_call" and isinstance(block.get("call_id"), str):  # Codex's
                open_calls.add(str(block["call_id"]))
            elif block.get("type") == "function_call_output":
                open_calls.discard(str(block.get("call_id")))
        if not open_calls:
            end = position
    return data[:end]


def _blocks(line: object) -> Iterable[dict[str, object]]:
    """The parts of a transcript line that call a tool or answer one: Claude Code's message content blocks, or
    Codex's `payload` item."""
    if not isinstance(line, dict):
        return []
    message, payload = line.get("message"), line.get("payload")
    content = message.get("content") if isinstance(message, dict) else None
    found = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    return [*found, payload] if isinstance(payload, dict) else found


def known_secrets(environ: dict[str, str], forge_url: str) -> list[bytes]:
    """The credential values this desk holds: forge tokens in its environment, a password in the forge's URL."""
    values = {v for k, v in environ.items() if SECRET_NAMES.match(k) and len(v) >= 8} | secrets_in(forge_url) | held()
    return sorted((v.encode() for v in values), key=len, reverse=True)


class Transcript:
    """One run's session: its id, the arguments that start or resume it, and the file its CLI writes.

    `session` is None for a fresh run of a CLI that picks its own id (no `{session}` in `new`): the transcript
    is then the newest file matching `file` (with `*` for the id) that was written after `since`, and its id is
    the UUID in its name. A `file` with `*` in it keeps, in each checkpoint, its path below the part before the
    first `*` (`relative`), where a restore writes it again.
    """

    def __init__(self, spec: SessionSpec, session: str | None, env: dict[str, str], worktree: Path,
                 since: float = 0.0) -> None:
        self.values = {"home": env.get("HOME", ""), "worktree": str(worktree), "cwd_slug": cwd_slug(worktree),
                       **{k: v for k, v in env.items() if k.upper() == k}}
        self.spec, self.session, self.since = spec, session, since
        self.pattern = _fill(spec.file, self.values)
        self.globbed = "*" in self.pattern
        self.root = self.pattern.split("*", 1)[0].rsplit("/", 1)[0] if self.globbed else ""
        self.path: Path | None = None if self.globbed or session is None else Path(
            _fill(self.pattern, {"session": session}))
        self._saved = ""  # the digest of what was last checkpointed or restored
        self._looked = 0  # the transcript's size when `turned` last looked
        self.restored_size = 0

    def arguments(self, resume: bool) -> list[str]:
        values = {**self.values, "session": self.session or ""}
        return [_fill(a, values) for a in (self.spec.resume if resume else self.spec.new)]

    def relative(self) -> str:
        """The transcript's path below the pattern's fixed part ("" for a fixed path)."""
        return str(self.path.relative_to(self.root)) if self.globbed and self.path is not None else ""

    def _find(self) -> Path | None:
        if self.path is not None:
            return self.path
        if not self.globbed or not self.pattern.startswith("/"):
            return None
        wanted = _fill(self.pattern, {"session": self.session or "*"})
        found = [p for p in Path("/").glob(wanted.lstrip("/")) if _mtime(p) >= self.since]
        if not found:
            return None
        self.path = max(found, key=_mtime)
        if self.session is None:  # the id the CLI chose: the (last) UUID in the file's name
            ids = UUID.findall(self.path.name)
            self.session = ids[-1] if ids else self.path.stem
        return self.path

    def at_boundary(self) -> bool:
        """Whether the conversation is between turns now: its transcript ends at a turn boundary."""
        path = self._find()
        try:
            raw = path.read_bytes() if path is not None else b""
        except OSError:
            return False
        return bool(raw) and at_boundary(raw) == raw

    def turned(self) -> bool:
        """Whether the transcript grew since the last look and ends at a turn boundary now: a turn ended."""
        size = self.size()
        if size == self._looked:
            return False
        self._looked = size
        return self.at_boundary()

    def holds(self, text: str) -> bool:
        """Whether the conversation holds `text` (as the CLI wrote it: a JSON string's content)."""
        path = self._find()
        try:
            raw = path.read_bytes() if path is not None else b""
        except OSError:
            return False
        forms = (text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1])
        return any(form.encode() in raw for form in forms)

    def size(self) -> int:
        path = self._find()
        return path.stat().st_size if path is not None and path.exists() else 0

    def whole(self, secrets: Sequence[bytes]) -> tuple[bytes, int] | None:
        """The transcript to checkpoint now, scrubbed, and its size as read: only while it ends at a turn boundary
        (no tool call in flight, whose effects the worktree may already show), and if it is not what was
        checkpointed last (`saved`)."""
        path = self._find()
        try:
            raw = path.read_bytes() if path is not None else b""
        except OSError:
            return None
        if not raw or at_boundary(raw) != raw:
            return None
        data = scrub(raw, secrets)
        return None if hashlib.sha256(data).hexdigest() == self._saved else (data, len(raw))

    def saved(self, data: bytes) -> None:
        """`data` is checkpointed: `whole` offers it no more."""
        self._saved = hashlib.sha256(data).hexdigest()

    def restore(self, data: bytes, relative: str) -> None:
        """Write a checkpoint where the CLI looks for this session (whole or not at all). OSError if it cannot, or
        if the checkpoint's session id or path, read from the forge, is not safe to use (`forgevalues`)."""
        for kind, value in (("session id", self.session), ("transcript path", relative if self.globbed else "x")):
            if (why := problem(kind, value)) is not None:
                raise OSError(why)
        if self.globbed:
            if not relative or ".." in Path(relative).parts or not self.root.startswith("/"):
                raise OSError(f"no place for the transcript under {self.root or self.pattern}")
            self.path = Path(self.root) / relative
        assert self.path is not None
        data = moved(data, self.origin(data))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{own_tag()}")
        partial.write_bytes(data)
        partial.replace(self.path)
        self._saved = hashlib.sha256(data).hexdigest()
        self.restored_size = len(data)


    def origin(self, data: bytes) -> dict[str, str]:
        """The paths of the run that saved `data`, mapped to this run's: its worktree (as the CLI recorded it), that
        path's `cwd_slug`, and the value of the placeholder the pattern starts with (`{home}`, or a variable),
        where the transcript names a folder the pattern builds from it (`{home}/.claude/projects/<a cwd_slug>`;
        Claude Code 2.1.332 names its memory folder so): only a folder with a `{cwd_slug}` or the worktree in it is
        specific enough to be found."""
        worktree = recorded_cwd(data)
        if not worktree:
            return {}
        paths = {worktree: self.values["worktree"], cwd_slug(worktree): self.values["cwd_slug"]}
        first = re.match(r"\{(\w+)\}", self.spec.file)
        if first is None or first.group(1) in ("worktree", "cwd_slug", "session"):
            return paths
        rest = re.split(r"\*|\{session\}", self.spec.file[first.end():])[0].rsplit("/", 1)[0]
        parts = re.split(r"(\{\w+\})", rest)
        if not {"{cwd_slug}", "{worktree}"} & set(parts) or not set(parts) <= {"{cwd_slug}", "{worktree}"} | {
                p for p in parts if not p.startswith("{")}:
            return paths
        folder = "".join("-[A-Za-z0-9-]*" if p == "{cwd_slug}" else re.escape(json.dumps(worktree)[1:-1])
                         if p == "{worktree}" else re.escape(json.dumps(p)[1:-1]) for p in parts)
        found = re.search(r'(?<![\w./-])(/[^\s"\'`\\]*?)' + folder + r"(?![A-Za-z0-9_.-])",
                          data.decode("utf-8", "replace"))
        new = self.values.get(first.group(1), "")
        if found is not None and new.startswith("/"):
            paths[found.group(1)] = new
        return paths


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
