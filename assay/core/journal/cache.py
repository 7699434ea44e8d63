"""Decoded journals kept in the forge's cache: a new process reads only the commits after them.

One file per brief, `journal-decoded.v1/<brief>.json` in the forge's cache directory
(`ForgeGit.cache`), holding the log decoded up to one journal commit: its id (`tip`), the
commits in chain order, and each entry as a row of `JournalEntry`'s fields in order. Commits
are immutable, so a decoded log is a pure function of its tip; the file is only a hint.
`journal.read_log` uses it when the tip is an ancestor of (or equal to) the journal's current
tip, and reads everything otherwise. A file that is absent, damaged, of another version or
of another brief is ignored. Files are written whole or not at all (a temp file, then a
rename), so racing writers leave one complete file; a write that fails is dropped.
"""

from __future__ import annotations

import contextlib
import json
import os

from assay.core.git import OBJECT_ID
from assay.core.records import JournalEntry, recordtype

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

FOLDER = "journal-decoded.v1"  # in the forge's cache: <brief>.json per brief
FIELDS = tuple(f.name for f in recordtype.fields(JournalEntry))
_DEFAULTS = {f.name: f.default for f in recordtype.fields(JournalEntry)}


@recordtype.dataclass
class Decoded:
    """A journal decoded up to commit `tip`: its entries, and which commit added each (by seq)."""

    entries: list[JournalEntry]
    commit_of: dict[int, str]
    tip: str


def path_for(cache: str, brief: str) -> str:
    return os.path.join(cache, FOLDER, f"{brief}.json")


def load(cache: str, brief: str) -> Decoded | None:
    """The decoded log kept for `brief`, or None if there is none that can be used."""
    try:
        with open(path_for(cache, brief), "rb") as kept:
            raw = json.loads(kept.read())
        return _decoded(raw, brief)
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None  # absent, damaged, or written by another version: the journal is read again


def _decoded(raw: Any, brief: str) -> Decoded | None:
    if not isinstance(raw, dict) or raw.get("v") != 1 or raw.get("brief") != brief:
        return None
    tip, commits, rows = raw["tip"], raw["commits"], raw["entries"]
    if tuple(raw["fields"]) != FIELDS or not isinstance(tip, str) or not OBJECT_ID.fullmatch(tip):
        return None
    if not isinstance(commits, list) or not isinstance(rows, list):
        return None
    if any(len(row) != len(FIELDS) + 1 for row in rows) or [row[1] for row in rows] != list(range(1, len(rows) + 1)):
        return None  # every row whole, and seq gapless from 1
    new = JournalEntry.__new__
    entries: list[JournalEntry] = []
    for row in rows:
        entry = new(JournalEntry)
        entry.__dict__.update(zip(FIELDS, row[1:], strict=True))  # frozen: filled without re-validating
        entries.append(entry)
    commit_of = {row[1]: commits[row[0]] for row in rows}
    return Decoded(entries, commit_of, tip)


def save(cache: str, brief: str, entries: list[JournalEntry], commit_of: dict[int, str], tip: str) -> None:
    """Keep the log decoded up to `tip`; best effort: a cache that cannot be written is no error."""
    commits: list[str] = []
    index: dict[str, int] = {}
    rows: list[list[Any]] = []
    for entry in entries:
        commit = commit_of[entry.seq]
        if commit not in index:
            index[commit] = len(commits)
            commits.append(commit)
        values = entry.__dict__
        rows.append([index[commit], *(values.get(name, _DEFAULTS[name]) for name in FIELDS)])
    body = {"v": 1, "brief": brief, "tip": tip, "fields": list(FIELDS), "commits": commits, "entries": rows}
    folder = os.path.dirname(path_for(cache, brief))
    try:
        os.makedirs(folder, exist_ok=True)
        import tempfile  # here: a process that writes no such file never loads it (and shutil, random)

        fd, tmp = tempfile.mkstemp(prefix=f".{brief}.", suffix=".tmp", dir=folder)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out, ensure_ascii=False, separators=(",", ":"))
        os.replace(tmp, path_for(cache, brief))  # whole or not at all; the last of racing writers wins
    except (OSError, ValueError, TypeError):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
