"""An index of a journal kept in the forge's cache: a session starts without decoding every entry.

One SQLite file per brief, `journal-index.v2/<brief>.sqlite` in the forge's cache directory
(`ForgeGit.cache`), holding the journal up to one commit (`tip`): one row per entry with its
encoded line and the columns a session asks by (step identity, the intent it resolves, run,
recorded values), and running counts (recorded values, unfinished runs in a row) at each
entry. A session reads the rows it needs (`View`), never all of them.

The file is only a hint. `journal.read_indexed` uses it when its tip is on the journal's chain
and its last row is the last line of that tip's `entries.jsonl`; otherwise it is built again.
Rows are only ever appended, each under a check that the file still ends where the appender
read it, and every query of a `View` is bounded by the seq of the commit the reader
stands on, so a concurrent appender never changes what a reader sees. A new file is
written aside and renamed into place, so a reader of the old one keeps reading it whole.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

from assay.core.git import OBJECT_ID, ForgeGit, TreeEntry, parse_tree
from assay.core.journal.keys import CALLS as _CALLS
from assay.core.journal.keys import NONDET_KEY, Keys, call_key, intent_key, run_key
from assay.core.journal.spacing import snapshot_every
from assay.core.lives import own_tag
from assay.core.records import JournalEntry, decode_entry, journal_ref
from assay.core.records.recordtype import dataclass
from assay.errors import IndexDamaged, RecordInvalid

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import sqlite3
    from typing import Any

FOLDER = "journal-index.v2"  # in the forge's cache: <brief>.sqlite per brief (v2: a block ends a run streak)
VERSION = "1"
_TIMEOUT_S = 2.0  # an appender waits this long for another one; then it keeps its entries in memory

_SCHEMA = """
CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    commit_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    run TEXT NOT NULL,
    step TEXT,
    input_sha TEXT,
    intent INTEGER,
    is_call INTEGER NOT NULL,      -- an intent, refusal or outcome_unknown of a step identity
    counts_call INTEGER NOT NULL,  -- counts towards its run's calls of its identity
    counts_value INTEGER NOT NULL, -- counts towards its run's recorded values
    nondet_no INTEGER,             -- a nondeterminism entry's number among them, from 0
    nondets INTEGER NOT NULL,      -- nondeterminism entries up to this one
    starts INTEGER NOT NULL,       -- run starts without an end in a row, after this entry
    resolved_at INTEGER,           -- an intent's first result or outcome_unknown
    body TEXT NOT NULL
);
"""
_INDEXES = """
CREATE INDEX by_identity ON entries (step, input_sha);
CREATE INDEX by_intent ON entries (intent);
CREATE INDEX by_run ON entries (run);
CREATE INDEX by_nondet ON entries (nondet_no);
CREATE INDEX by_open ON entries (kind, resolved_at);
"""



def path_for(cache: str, brief: str) -> str:
    return os.path.join(cache, FOLDER, f"{brief}.sqlite")


def counts_call(entry: JournalEntry) -> bool:
    """The entry is a call of its step identity in its run (a marker, or an `assay step run` call note)."""
    return entry.kind in ("intent", "refused") or (entry.kind == "note" and bool((entry.data or {}).get("call")))


def counts_value(entry: JournalEntry) -> bool:
    """The entry is a clock or random read of its run (recorded, or replayed by `assay step value`)."""
    return entry.kind == "nondeterminism" or (entry.kind == "note" and (entry.data or {}).get("replay") == "value")


def run_event(entry: JournalEntry) -> str | None:
    """`start` or `end` for a desk program's run notes; a block ends a streak of unfinished runs too (a person
    takes the brief over, and releasing it starts the count afresh)."""
    if entry.kind == "claim" and (entry.data or {}).get("action") == "block":
        return "end"
    event = (entry.data or {}).get("run") if entry.kind == "note" else None
    return event if isinstance(event, str) else None


@dataclass
class Index:
    """An open index file: the journal up to commit `tip`, whose last entry is `last_seq`."""

    path: str
    conn: sqlite3.Connection
    brief: str
    tip: str
    last_seq: int

    def last_body(self) -> str:
        row = self.conn.execute("SELECT body FROM entries WHERE seq = ?", (self.last_seq,)).fetchone()
        return str(row[0]) if row else ""

    def view(self, bound: int, tip: str) -> View:
        """The journal up to entry `bound`, added by commit `tip` (at most the index's own end)."""
        return View(self, min(bound, self.last_seq), tip)

    def append(self, since: str, entries: Sequence[JournalEntry], commit_of: dict[int, str], tip: str,
               lines: dict[int, str] | None = None) -> bool:
        """Add `entries` (all added after `since`, up to `tip`); False, and nothing added, if the file no
        longer ends at `since` (another process appended first) or cannot be written."""
        import sqlite3

        try:
            with _writing(self.conn):
                row = self.conn.execute("SELECT v FROM meta WHERE k = 'tip'").fetchone()
                if not row or row[0] != since:
                    return False
                _insert(self.conn, entries, commit_of, tip, lines)
        except sqlite3.Error:
            return False
        self.tip, self.last_seq = tip, (entries[-1].seq if entries else self.last_seq)
        return True


@dataclass
class View:
    """What a session asks of the journal's first `bound` entries (commit `tip` added the last)."""

    index: Index
    bound: int
    tip: str

    @property
    def last_seq(self) -> int:
        return self.bound

    def calls_of(self, identity: tuple[str, str]) -> list[JournalEntry]:
        """The intents, refusals and outcome_unknowns of a step identity, in seq order."""
        return self._entries("SELECT body FROM entries WHERE step = ? AND input_sha = ? AND is_call AND seq <= ? "
                             "ORDER BY seq", (*identity, self.bound))

    def resolution(self, intent: int) -> JournalEntry | None:
        """The last result or outcome_unknown of intent `intent`."""
        found = self._entries("SELECT body FROM entries WHERE intent = ? AND kind IN ('result', 'outcome_unknown') "
                              "AND seq <= ? ORDER BY seq DESC LIMIT 1", (intent, self.bound))
        return found[0] if found else None

    def refused(self, intent: int) -> bool:
        return bool(self._rows("SELECT 1 FROM entries WHERE intent = ? AND kind = 'refused' AND seq <= ? LIMIT 1",
                               (intent, self.bound)))

    def nondet(self, number: int) -> JournalEntry | None:
        """The `number`-th nondeterminism entry (from 0)."""
        found = self._entries("SELECT body FROM entries WHERE nondet_no = ? AND seq <= ?", (number, self.bound))
        return found[0] if found else None

    def totals(self) -> tuple[int, int]:
        """Nondeterminism entries, and run starts without an end in a row, up to the bound."""
        rows = self._rows("SELECT nondets, starts FROM entries WHERE seq = ?", (self.bound,))
        return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)

    def run_counts(self, run: str) -> tuple[dict[tuple[str, str], int], int]:
        """Calls by step identity, and recorded values, that run `run` made."""
        calls: dict[tuple[str, str], int] = {}
        values = 0
        for step, sha, is_call, is_value in self._rows(
                "SELECT step, input_sha, counts_call, counts_value FROM entries WHERE run = ? AND seq <= ? "
                "AND (counts_call OR counts_value) ORDER BY seq", (run, self.bound)):
            if is_call:
                identity = (str(step or ""), str(sha or ""))
                calls[identity] = calls.get(identity, 0) + 1
            if is_value:
                values += 1
        return calls, values

    def open_intents(self) -> list[int]:
        """Intents with neither a result nor an outcome_unknown up to the bound."""
        rows = self._rows("SELECT seq FROM entries WHERE kind = 'intent' AND resolved_at IS NULL AND seq <= ? "
                          "UNION SELECT seq FROM entries WHERE kind = 'intent' AND resolved_at > ? AND seq <= ?",
                          (self.bound, self.bound, self.bound))
        return sorted(int(r[0]) for r in rows)

    def entry(self, seq: int) -> JournalEntry | None:
        found = self._entries("SELECT body FROM entries WHERE seq = ? AND seq <= ?", (seq, self.bound))
        return found[0] if found else None

    def commit_of(self, seq: int) -> str | None:
        rows = self._rows("SELECT commit_id FROM entries WHERE seq = ? AND seq <= ?", (seq, self.bound))
        return str(rows[0][0]) if rows else None

    def between(self, after: int, upto: int) -> list[tuple[JournalEntry, str | None]]:
        """Entries after..upto (within the bound), each with the commit that added it."""
        ref = journal_ref(self.index.brief)
        return [(decode_entry(str(body), ref), str(commit)) for body, commit in self._rows(
            "SELECT body, commit_id FROM entries WHERE seq > ? AND seq <= ? AND seq <= ? ORDER BY seq",
            (after, upto, self.bound))]

    def _entries(self, sql: str, args: tuple[object, ...]) -> list[JournalEntry]:
        ref = journal_ref(self.index.brief)
        return [decode_entry(str(row[0]), ref) for row in self._rows(sql, args)]

    def _rows(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]]:
        import sqlite3

        try:
            return list(self.index.conn.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            with contextlib.suppress(OSError):
                os.unlink(self.index.path)
            raise IndexDamaged(f"the journal index of {self.index.brief!r} in the local cache failed: {exc}",
                               hint="it was dropped; run the command again") from None


def open_index(cache: str, brief: str) -> Index | None:
    """The index kept for `brief`, if there is one that can be used (its tip is checked by the caller)."""
    path = path_for(cache, brief)
    if not os.path.exists(path):
        return None
    import sqlite3  # here, not above: a journal too short for an index never loads SQLite

    conn: sqlite3.Connection | None = None
    try:
        conn = _connect(path)
        meta = dict(conn.execute("SELECT k, v FROM meta").fetchall())
        last = conn.execute("SELECT min(seq), max(seq) FROM entries").fetchone()
        tip, last_seq = meta.get("tip"), int(meta.get("last_seq", "-1"))
        if meta.get("v") != VERSION or meta.get("brief") != brief or not isinstance(tip, str) \
                or not OBJECT_ID.fullmatch(tip) or last_seq < 1 or tuple(last) != (1, last_seq):
            conn.close()
            return None
        return Index(path, conn, brief, tip, last_seq)
    except (sqlite3.Error, ValueError, TypeError):
        if conn is not None:
            conn.close()
        return None  # damaged, or written by another version: it is built again


def build(cache: str, brief: str, entries: Sequence[JournalEntry], commit_of: dict[int, str],
          tip: str, lines: dict[int, str] | None = None) -> Index | None:
    """A new index of `entries` (the whole journal up to `tip`), put in place of any other; None if it cannot
    be written (the cache is only a shortcut)."""
    import sqlite3

    path = path_for(cache, brief)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        import tempfile  # here: a process that writes no such file never loads it (and shutil, random)

        fd, tmp = tempfile.mkstemp(prefix=f".{brief}.", suffix=".tmp", dir=os.path.dirname(path))
        os.close(fd)
    except OSError:
        return None
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.executescript(_SCHEMA)
            with _writing(conn):
                conn.executemany("INSERT INTO meta VALUES (?, ?)",
                                 [("v", VERSION), ("brief", brief), ("tip", ""), ("last_seq", "0")])
                _insert(conn, entries, commit_of, tip, lines)
                for statement in _INDEXES.split(";"):  # after the rows: one sort each, not one insert a row
                    if statement.strip():
                        conn.execute(statement)
        finally:
            conn.close()
        os.replace(tmp, path)  # whole or not at all: a reader of the file it replaces keeps that one
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return open_index(cache, brief)


def _connect(path: str) -> sqlite3.Connection:
    import sqlite3

    conn = sqlite3.connect(path, timeout=_TIMEOUT_S, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # a hint: a torn file is only a miss
    return conn


@contextlib.contextmanager
def _writing(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _insert(conn: sqlite3.Connection, entries: Sequence[JournalEntry], commit_of: dict[int, str], tip: str,
            lines: dict[int, str] | None = None) -> None:
    """Append rows for `entries`, carrying the running counts on from the last row (inside a transaction); each
    row's body is the entry's line as the journal holds it (`lines`, by seq) or, without it, the entry encoded."""
    lines = lines or {}
    last = conn.execute("SELECT seq, nondets, starts FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
    seq, nondets, starts = (int(last[0]), int(last[1]), int(last[2])) if last else (0, 0, 0)
    rows: list[tuple[object, ...]] = []
    resolved: dict[int, int] = {}
    pending: dict[int, int] = {}  # intents among these entries -> their row's position
    for entry in entries:
        if entry.seq != seq + 1:
            import sqlite3

            raise sqlite3.IntegrityError(f"journal seq jumps from {seq} to {entry.seq}")
        seq = entry.seq
        nondet_no = None
        if entry.kind == "nondeterminism":
            nondet_no, nondets = nondets, nondets + 1
        event = run_event(entry)
        starts = starts + 1 if event == "start" else 0 if event == "end" else starts
        if entry.intent is not None and entry.kind in ("result", "outcome_unknown"):
            if entry.intent in pending:
                position = pending.pop(entry.intent)
                rows[position] = (*rows[position][:-2], entry.seq, rows[position][-1])
            else:
                resolved.setdefault(entry.intent, entry.seq)
        if entry.kind == "intent":
            pending[entry.seq] = len(rows)
        rows.append((entry.seq, commit_of[entry.seq], entry.kind, entry.run, entry.step, entry.input_sha,
                     entry.intent, entry.kind in _CALLS and entry.step is not None, counts_call(entry),
                     counts_value(entry), nondet_no, nondets, starts, None, lines.get(entry.seq) or entry.encode()))
    conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany("UPDATE entries SET resolved_at = ? WHERE seq = ? AND kind = 'intent' AND resolved_at IS NULL",
                     [(at, intent) for intent, at in resolved.items()])
    conn.executemany("UPDATE meta SET v = ? WHERE k = ?", [(tip, "tip"), (str(seq), "last_seq")])


# -- snapshots: the index carried on the journal chain ------------------------------------------------------
#
# Every `spacing.SNAPSHOT_EVERY` entries the journal commit that crosses the boundary carries `snapshot/`: the entries
# before it as segments of canonical lines (each written once, by the snapshot that added it, and kept by id in
# every later one) and a summary of what a session asks of them all at once (open intents, counts). Later commits
# carry the same tree on. A cold reader reads the tip's snapshot and only the commits after its `tip`; the chain
# stays the journal, and a snapshot that does not check out is no snapshot (the reader reads the chain).

SNAPSHOT_DIR = "snapshot"  # a tree in each journal commit from the first snapshot on
SUMMARY = "snapshot.json"
SNAPSHOT_VERSION = 1
_HOLDS_BLOB = "_blob"  # a `data` key naming a blob of the entry's commit ends so


@dataclass(frozen=True)
class Summary:
    """`snapshot/snapshot.json`: the journal up to commit `tip`, whose last entry is `last_seq`."""

    brief: str
    tip: str
    last_seq: int
    segments: tuple[tuple[int, int], ...]  # (first, last) of each segment file, in seq order
    open: tuple[int, ...]  # intents with neither a result nor an outcome_unknown
    nondets: int  # nondeterminism entries
    starts: int  # run starts without an end in a row, after the last entry

    def encode(self) -> bytes:
        import json

        body = {"v": SNAPSHOT_VERSION, "brief": self.brief, "tip": self.tip, "last_seq": self.last_seq,
                "segments": [list(s) for s in self.segments], "open": list(self.open), "nondets": self.nondets,
                "starts": self.starts}
        return (json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode()


def segment_name(first: int, last: int) -> str:
    return f"{first}-{last}.jsonl"


def commits_name(first: int, last: int) -> str:
    return f"{first}-{last}.commits"


def keys_name(first: int, last: int) -> str:
    return f"{first}-{last}.keys"


def decode_summary(data: bytes | None, brief: str) -> Summary | None:
    """A summary this Assay can use, or None (junk, another version, another brief, segments that do not tile
    1..last_seq)."""
    import json

    try:
        raw = json.loads(data or b"")
        if not isinstance(raw, dict) or set(raw) != {"v", "brief", "tip", "last_seq", "segments", "open", "nondets",
                                                     "starts"}:
            return None
        if raw["v"] != SNAPSHOT_VERSION or raw["brief"] != brief or not isinstance(raw["tip"], str) \
                or not OBJECT_ID.fullmatch(raw["tip"]):
            return None
        ints = [raw["last_seq"], raw["nondets"], raw["starts"], *raw["open"], *(n for s in raw["segments"] for n in s)]
        if any(type(n) is not int or n < 0 for n in ints) or any(len(s) != 2 for s in raw["segments"]):
            return None
        segments = tuple((int(a), int(b)) for a, b in raw["segments"])
        ends = [0, *(b for _, b in segments)]
        if not segments or ends[-1] != raw["last_seq"] or any(a != ends[i] + 1 or b < a
                                                              for i, (a, b) in enumerate(segments)):
            return None
        if sorted(set(raw["open"])) != raw["open"] or (raw["open"] and raw["open"][-1] > raw["last_seq"]):
            return None
        return Summary(brief, raw["tip"], raw["last_seq"], segments, tuple(raw["open"]), raw["nondets"], raw["starts"])
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None


def crosses(first: int, last: int, every: int) -> bool:
    """A commit adding entries first..last crosses a multiple of `every`, with entries before it to snapshot."""
    return first > 1 and (first - 1) // every != last // every


def snapshot_of(git: ForgeGit, commit: str | None) -> TreeEntry | None:
    """The `snapshot` tree of a journal commit in the cache, if it has one."""
    if commit is None:
        return None
    root = git.read_typed([f"{commit}^{{tree}}"])[0]
    if root is None or root.kind != "tree":
        return None
    return next((e for e in parse_tree(root.data) if e.name == SNAPSHOT_DIR and e.mode == "40000"), None)


def snapshot_tree(git: ForgeGit, brief: str, parent: str | None, first: int, last: int,
                  between: Callable[[int, int], list[tuple[JournalEntry, str | None]] | None]) -> TreeEntry | None:
    """The `snapshot` tree of a new journal commit on `parent` that adds entries first..last: the parent's carried
    on, or, when the commit crosses a multiple of `snapshot_every()`, a new one of every entry before it. `between(a,
    b)` gives the writer's entries a+1..b, each with the commit that added it (needed only for one naming a blob),
    or None if it does not hold them all: then the parent's is carried on and the next crossing tries again."""
    carried = snapshot_of(git, parent)
    if parent is None or not crosses(first, last, snapshot_every()):
        return carried
    found = _summary_at(git, brief, carried.sha) if carried else None
    prev, kept = found if found else (None, [])
    start = prev.last_seq if prev else 0
    got = between(start, first - 1) if start < first - 1 else None
    if not got or [e.seq for e, _ in got] != list(range(start + 1, first)):
        return carried
    opened = set(prev.open) if prev else set()
    nondets, starts = (prev.nondets, prev.starts) if prev else (0, 0)
    lines: list[str] = []
    commits: list[str] = []
    for entry, commit in got:
        lines.append(entry.encode() + "\n")
        if entry.kind == "intent":
            opened.add(entry.seq)
        elif entry.kind in ("result", "outcome_unknown") and entry.intent is not None:
            opened.discard(entry.intent)
        nondets += entry.kind == "nondeterminism"
        event = run_event(entry)
        starts = starts + 1 if event == "start" else 0 if event == "end" else starts
        if any(k.endswith(_HOLDS_BLOB) for k in entry.data or {}):
            if commit is None:
                return carried
            commits.append(f"{entry.seq} {commit}\n")
    files = [*kept, TreeEntry(segment_name(start + 1, first - 1), git.write_blob("".join(lines).encode("utf-8"))),
             TreeEntry(keys_name(start + 1, first - 1), git.write_blob(Keys.of(e for e, _ in got).encode()))]
    if commits:
        files.append(TreeEntry(commits_name(start + 1, first - 1), git.write_blob("".join(commits).encode())))
    summary = Summary(brief, parent, first - 1, (*(prev.segments if prev else ()), (start + 1, first - 1)),
                      tuple(sorted(opened)), nondets, starts)
    files.append(TreeEntry(SUMMARY, git.write_blob(summary.encode())))
    return TreeEntry(SNAPSHOT_DIR, git.write_tree(files), "40000")


def _summary_at(git: ForgeGit, brief: str, tree: str) -> tuple[Summary, list[TreeEntry]] | None:
    """A snapshot tree's summary and its segment files (every entry but the summary), if it checks out."""
    listed = git.read_typed([tree])[0]
    if listed is None or listed.kind != "tree":
        return None
    entries = parse_tree(listed.data)
    by_name = {e.name: e for e in entries}
    summary_file = by_name.get(SUMMARY)
    summary = decode_summary(git.read_objects([summary_file.sha])[0], brief) if summary_file else None
    if summary is None or any(segment_name(a, b) not in by_name for a, b in summary.segments):
        return None
    return summary, [e for e in entries if e.name != SUMMARY and e.mode == "100644"]


def open_snapshot(git: ForgeGit, brief: str, tree: str) -> Snapshot | None:
    """The snapshot in tree `tree` (its objects in the cache), or None if it does not check out: a summary of
    another version or junk, a segment missing or of the wrong length, a first or last line of the wrong seq, or a
    segment found junk by an earlier reader. A segment with a filter of its keys (`keys.py`) is read when a lookup
    needs it, and checked then (`Snapshot._segment`)."""
    found = _summary_at(git, brief, tree)
    if found is None:
        return None
    summary, files = found
    by_name = {e.name: e.sha for e in files}
    ids = [by_name[segment_name(a, b)] for a, b in summary.segments]
    folder = os.path.join(git.cache, SEGMENTS)
    if any(os.path.exists(os.path.join(folder, junk_name(sha, a, b)))
           for sha, (a, b) in zip(ids, summary.segments, strict=True)):
        return None  # a reader found junk in it: the chain is read instead
    extra = [by_name[commits_name(a, b)] for a, b in summary.segments if commits_name(a, b) in by_name]
    keyed = [(a, b) for a, b in summary.segments if keys_name(a, b) in by_name]
    small = git.read_typed([*extra, *(by_name[keys_name(a, b)] for a, b in keyed)])
    blobs, filters = small[:len(extra)], dict(zip(keyed, small[len(extra):], strict=True))
    if any(b is None or b.kind != "blob" for b in blobs):
        return None
    keys = [Keys.decode(found_keys.data if (found_keys := filters.get(s)) and found_keys.kind == "blob" else None)
            for s in summary.segments]
    segments = _segments(git, ids, [k is None for k in keys])
    if segments is None:
        return None
    snapshot = Snapshot(brief, summary, segments, keys, ids, git)
    try:
        for at, data in enumerate(segments):
            if data is not None and not snapshot.checks(at, data):
                return None
        for blob in blobs:
            for line in (blob.data if blob else b"").decode("ascii").splitlines():
                seq, commit = line.split(" ")
                if not OBJECT_ID.fullmatch(commit):
                    return None
                snapshot.commits[int(seq)] = commit
    except (IndexDamaged, ValueError):
        return None
    for sha, data in zip(ids, segments, strict=True):
        if isinstance(data, bytes):  # read from git and checked: kept for the next reader
            _keep(folder, sha, data)
    return snapshot


SEGMENTS = "journal-segments.v1"  # in the forge's cache: each segment's text by its blob id, read without inflating


def junk_name(sha: str, first: int, last: int) -> str:
    """Beside the kept segments: a reader found blob `sha` junk as entries first..last, so snapshots naming it so
    are not used."""
    return f"{sha}.{first}-{last}.junk"


def _segments(git: ForgeGit, ids: list[str], needed: list[bool]) -> list[bytes | None] | None:
    """The segments' texts: kept in the forge's cache (a file per blob id, written whole or not at all, mapped, not
    read: a lookup touches what it scans), else, where `needed`, read through git (None for the others: read when
    a lookup needs them). Only a hint: a line is checked as it is decoded, as git's would be."""
    import mmap

    folder = os.path.join(git.cache, SEGMENTS)
    found: dict[str, bytes] = {}
    for sha in ids:
        with contextlib.suppress(OSError, ValueError), open(os.path.join(folder, sha), "rb") as kept:
            found[sha] = mmap.mmap(kept.fileno(), 0, access=mmap.ACCESS_READ)  # type: ignore[assignment]
    missing = [sha for sha, need in zip(ids, needed, strict=True) if need and sha not in found]
    for sha, blob in zip(missing, git.read_typed(missing), strict=True):
        if blob is None or blob.kind != "blob":
            return None
        found[sha] = blob.data
    return [found.get(sha) for sha in ids]


def _keep(folder: str, name: str, data: bytes) -> None:
    """`data` kept as the file `name` in `folder`, whole or not at all (as `cachefile.save`; not tempfile, whose
    loading is a cold reader's 4 ms)."""
    tmp = os.path.join(folder, f".{name}.{own_tag()}.tmp")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, os.path.join(folder, name))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


class Snapshot:
    """A `View` of the journal's first `last_seq` entries from a snapshot: the summary answers for totals and open
    intents, and a lookup decodes only the lines holding what it asks for (found by their canonical text), in the
    segments whose filters say they may hold it; a segment not read yet is read then, through `git`."""

    def __init__(self, brief: str, summary: Summary, segments: list[bytes | None], keys: list[Keys | None],
                 ids: list[str], git: ForgeGit) -> None:
        self.brief = brief
        self.summary = summary
        self.tip = summary.tip
        self.bound = summary.last_seq
        self.commits: dict[int, str] = {}  # the commit of each entry naming a blob
        self._spans = summary.segments
        self._data = list(segments)
        self._keys = keys
        self._ids = ids
        self._git = git
        self._firsts = [a for a, _ in summary.segments]
        self._lines: dict[int, list[bytes]] = {}
        self._unchecked: set[int] = set()  # segments read through git whose lines are not all checked yet
        self._nondets: list[JournalEntry] | None = None
        # a segment's entries and their commits as the chain holds them, for one found junk (`_from_chain`)
        self.chain: Callable[[int, int], tuple[list[JournalEntry], dict[int, str]]] | None = None

    def checks(self, at: int, data: bytes) -> bool:
        """Whether segment `at`'s text has its length (a kept one was checked so when it was kept) and ends in
        lines of its first and last seqs (IndexDamaged where one is junk)."""
        first, last = self._spans[at]
        if isinstance(data, bytes) and not self._sized(at, data):
            return False
        self._decode(data[:data.find(b"\n")], first, at)
        self._decode(data[data.rfind(b"\n", 0, len(data) - 1) + 1:-1], last, at)
        return True

    def _sized(self, at: int, data: bytes) -> bool:
        """Whether segment `at`'s text is a line for each of its seqs."""
        first, last = self._spans[at]
        return data.count(b"\n") == last - first + 1 and data.endswith(b"\n")

    def _segment(self, at: int) -> bytes:
        """Segment `at`'s text, read now if it was not: one of the wrong length is junk, its entries read from the
        chain (`chain`) and the segment marked as junk in the cache, so that the next reader reads the chain at once.
        A segment read through git is checked whole when a lookup's filter sends it there (`_checked`: a junk line
        could hide what it asks for), and one line at a time where only entries are asked for (`entry`: the
        snapshot's last, which a cold reader checks against the chain, is one line of a thousand)."""
        data = self._data[at]
        if data is None:
            blob = self._git.read_typed([self._ids[at]])[0]
            if blob is None:  # not in the cache: no word on the segment, which is not marked
                data = self._from_chain(at, mark=False)
            elif blob.kind == "blob" and self._sized(at, blob.data):
                data = blob.data
                self._unchecked.add(at)
            else:
                data = self._from_chain(at)
            self._data[at] = data
        return data

    def _checked(self, at: int) -> bytes:
        """Segment `at`'s text, every line of it an entry of its seq: kept for the next reader; else its entries are
        read from the chain, and the segment marked as junk in the cache."""
        data = self._segment(at)
        if at in self._unchecked:
            if self._whole(at, data):
                _keep(os.path.join(self._git.cache, SEGMENTS), self._ids[at], data)
            else:
                data = self._data[at] = self._from_chain(at)
                self._lines.pop(at, None)
            self._unchecked.discard(at)  # (not before: a chain that cannot be read now leaves it to be checked)
        return data

    def _whole(self, at: int, data: bytes) -> bool:
        first, last = self._spans[at]
        lines = data.split(b"\n")
        if len(lines) != last - first + 2 or lines[-1]:
            return False
        ref = journal_ref(self.brief)
        try:
            return all(decode_entry(line.decode("utf-8"), ref).seq == seq for seq, line in enumerate(lines[:-1], first))
        except (RecordInvalid, UnicodeDecodeError):
            return False

    def _from_chain(self, at: int, mark: bool = True) -> bytes:
        if mark:
            self._mark(at)
        if self.chain is None:
            raise IndexDamaged(f"the snapshot of the journal of {self.brief!r} holds junk in entries "
                               f"{self._spans[at][0]}..{self._spans[at][1]}",
                               hint="run the command again: the journal is read from its chain")
        first, last = self._spans[at]
        entries, commits = self.chain(first, last)
        for seq in range(first, last + 1):
            self.commits.pop(seq, None)
        self.commits.update(commits)
        return b"".join(e.encode().encode("utf-8") + b"\n" for e in entries)

    def _mark(self, at: int) -> None:
        """Segment `at` holds junk: the cache's copy is dropped (git's is read next), or, read from git, its id
        marked so that no reader takes a snapshot holding it."""
        folder = os.path.join(self._git.cache, SEGMENTS)
        with contextlib.suppress(OSError):
            if self._data[at] is not None and not isinstance(self._data[at], bytes):
                os.unlink(os.path.join(folder, self._ids[at]))
            else:
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, junk_name(self._ids[at], *self._spans[at])), "w"):
                    pass

    @property
    def last_seq(self) -> int:
        return self.bound

    def calls_of(self, identity: tuple[str, str]) -> list[JournalEntry]:
        import json

        step, sha = identity
        needle = sha.encode() if sha else b'"step":' + json.dumps(step, ensure_ascii=False).encode()
        return [e for e in self._hits(needle, call_key(identity))
                if e.kind in _CALLS and e.step is not None and e.identity == identity]

    def resolution(self, intent: int) -> JournalEntry | None:
        found = [e for e in self._hits(b'"intent":%d' % intent, intent_key(intent))
                 if e.intent == intent and e.kind in ("result", "outcome_unknown")]
        return found[-1] if found else None

    def refused(self, intent: int) -> bool:
        return any(e.intent == intent and e.kind == "refused"
                   for e in self._hits(b'"intent":%d' % intent, intent_key(intent)))

    def nondet(self, number: int) -> JournalEntry | None:
        if self._nondets is None:
            self._nondets = [e for e in self._hits(b'"kind":"nondeterminism"', NONDET_KEY)
                             if e.kind == "nondeterminism"]
        return self._nondets[number] if 0 <= number < len(self._nondets) else None

    def totals(self) -> tuple[int, int]:
        return self.summary.nondets, self.summary.starts

    def run_counts(self, run: str) -> tuple[dict[tuple[str, str], int], int]:
        import json

        calls: dict[tuple[str, str], int] = {}
        values = 0
        for e in self._hits(b'"run":' + json.dumps(run, ensure_ascii=False).encode(), run_key(run)):
            if e.run != run:
                continue
            if counts_call(e):
                calls[e.identity] = calls.get(e.identity, 0) + 1
            if counts_value(e):
                values += 1
        return calls, values

    def open_intents(self) -> list[int]:
        return list(self.summary.open)

    def entry(self, seq: int) -> JournalEntry | None:
        if not 1 <= seq <= self.bound:
            return None
        import bisect

        at = bisect.bisect_right(self._firsts, seq) - 1
        if at not in self._lines:
            self._lines[at] = self._segment(at)[:].split(b"\n")
        if at in self._unchecked:  # this line alone is checked; a junk one sends the segment to the chain
            found = self._parse(self._lines[at][seq - self._firsts[at]], seq)
            if isinstance(found, JournalEntry):
                return found
            self._lines[at] = self._checked(at)[:].split(b"\n")
        return self._decode(self._lines[at][seq - self._firsts[at]], seq, at)

    def commit_of(self, seq: int) -> str | None:
        return self.tip if seq == self.bound else self.commits.get(seq)

    def between(self, after: int, upto: int) -> list[tuple[JournalEntry, str | None]]:
        out = []
        for seq in range(after + 1, min(upto, self.bound) + 1):
            entry = self.entry(seq)
            if entry is not None:
                out.append((entry, self.commit_of(seq)))
        return out

    def _hits(self, needle: bytes, key: str) -> Iterator[JournalEntry]:
        """The entries whose line holds `needle`, in seq order (a line is decoded once however often it does), in
        the segments that may hold `key` (each entry a lookup keeps has it among its `keys.keys_of`)."""
        for at, first in enumerate(self._firsts):
            found = self._keys[at]
            if found is not None and not found.may_hold(key):
                continue
            data = self._checked(at)  # whole, even where the needle is not found: a junk line may hide it
            where = data.find(needle)
            seq, counted = first, 0
            while where != -1:
                start = data.rfind(b"\n", 0, where) + 1
                end = data.find(b"\n", where)
                seq, counted = seq + data[counted:start].count(b"\n"), start
                yield self._decode(data[start:end], seq, at)
                where = data.find(needle, end)

    def _decode(self, line: bytes, seq: int, at: int) -> JournalEntry:
        """The entry on `line` of segment `at`: junk there stops the reader (IndexDamaged), the segment marked so
        that the next reads the chain (a segment read when a lookup needed it was checked whole then, or its lines are
        checked one at a time as `entry` asks for them)."""
        found = self._parse(line, seq)
        if isinstance(found, JournalEntry):
            return found
        self._mark(at)
        raise IndexDamaged(f"the snapshot of the journal of {self.brief!r} has {found}",
                           hint="run the command again: the journal is read from its chain")

    def _parse(self, line: bytes, seq: int) -> JournalEntry | str:
        """The entry on `line`, if it is one of seq `seq`; else what is wrong with it."""
        try:
            entry = decode_entry(line.decode("utf-8"), journal_ref(self.brief))
        except (RecordInvalid, UnicodeDecodeError) as exc:
            return f"junk at seq {seq}: {exc}"
        return entry if entry.seq == seq else f"entry {entry.seq} where {seq} goes"
