"""The only writer of journal entries: `refs/assay/journal/<brief>`.

Each append is one commit whose tree holds `entries.jsonl` (the entries that
commit adds) and optional `blobs/`, pushed with `--atomic` together with a
renewal of the claim, both under leases. So every append is a heartbeat and a
fencing check: a desk that lost its claim cannot write a single entry.

Entries are drafted first (`add`) and get their gapless `seq` when they are
pushed (`flush`): entries of safe steps can wait and go together (group
commit); anything passed `sync=True` is on the forge before `add` returns.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import assay.core.journal.cache as journalcache  # siblings by full name: `from assay.core.journal` is the package
import assay.core.journal.index as journalindex
from assay.core import retired
from assay.core.claims import Claim, Claims, fence
from assay.core.crash import crash_point
from assay.core.git import ForgeGit, GitObject, RefUpdate, TreeEntry
from assay.core.journal.spacing import first_depth
from assay.core.records import (
    JournalEntry,
    chain,
    check_tip,
    claim_ref,
    decode_entry,
    journal_ref,
    utc_now_iso,
    validate_brief_id,
    wip_ref,
)
from assay.core.records.recordtype import dataclass, field
from assay.errors import AssayError, Conflict, Fenced, IllegalTransition, IndexDamaged, RecordInvalid

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from assay.core.wip import Recorder

INLINE_LIMIT = 4096  # larger outputs go to blobs/ of the entry's commit
MAX_PENDING = 256  # a group commit carries at most this many entries …
MAX_PENDING_S = 2.0  # … and waits at most this long for more
KEEP_AFTER = 64  # a read that decoded this many commits keeps its log in the forge's cache


@dataclass
class Draft:
    """An entry not yet on the forge; `entry` is set once it is."""

    kind: str
    fields: dict[str, Any]
    blobs: dict[str, bytes] = field(default_factory=dict)
    resolves: Draft | JournalEntry | None = None
    entry: JournalEntry | None = None
    files: bool = False  # a step's result whose effect may have changed the worktree (`Journal.recorder`)
    with_work: bool = False  # a result that lands with the work's push or not at all (`drop_unlanded_files`)

    @property
    def seq(self) -> int:
        if self.entry is None:
            raise RuntimeError("draft has no seq before it is flushed")
        return self.entry.seq


@dataclass
class JournalLog:
    """A journal as read from the forge: entries in seq order, and which commit added each."""

    entries: list[JournalEntry]
    commit_of: dict[int, str]
    tip: str | None
    decoded: int = 0  # commits this read decoded from git (the rest came from an earlier read)


def read_log(git: ForgeGit, brief: str, tip: str | None = None, known: JournalLog | None = None,
             first: int = 1) -> JournalLog:
    """All entries of a brief's journal: one ls-remote, one fetch, one rev-list, one cat-file batch.

    With `known` (an earlier read of the same journal), only the commits after it are read. Without
    one, the log kept in the forge's cache (`journalcache`) is the earlier read, if it is on the chain;
    a read that decodes `KEEP_AFTER` commits or more keeps its log there for the next process.
    `first`: the seq of the first entry after `known` when `known` holds none (a read from an index).
    """
    ref = journal_ref(brief)
    if tip is None:
        tip = git.ls_remote(ref).get(ref)
    if not tip:
        return JournalLog([], {}, None)
    partial = known is not None and bool(known.tip)  # the caller read up to known.tip: only what came since
    git.ensure_objects({ref: tip}, whole=not partial)
    if known is None or not known.tip:
        kept = journalcache.load(git.cache, brief)
        known = JournalLog(kept.entries, kept.commit_of, kept.tip) if kept else known
    since = known.tip if known and known.tip and git.is_ancestor(known.tip, tip) else None
    if partial and since is None:  # what the caller read is not on this chain: it is read whole
        git.ensure_objects({ref: tip})
    commits = list(reversed(git.rev_list(tip, since=since)))  # empty if the tip is no commit
    head = git.read_typed([tip])[0]
    check_tip(ref, tip, head.kind if head else None)
    texts = git.stream_typed([f"{c}:entries.jsonl" for c in commits])  # decoded as git reads the next
    entries: list[JournalEntry] = list(known.entries) if since and known else []
    commit_of: dict[int, str] = dict(known.commit_of) if since and known else {}
    checked = len(entries)  # an earlier read checked its own entries
    try:
        _decode(ref, commits, texts, entries, commit_of)
    finally:
        texts.close()  # stopped early by a bad entry: its process ends now, not with the exception
    _check_seq(ref, entries[checked:], entries[checked - 1].seq + 1 if checked else first if since else 1)
    if len(commits) >= KEEP_AFTER and (not entries or entries[0].seq == 1):
        journalcache.save(git.cache, brief, entries, commit_of, tip)
    return JournalLog(entries, commit_of, tip, len(commits))


def read_logs(git: ForgeGit, tips: dict[str, str]) -> dict[str, JournalLog | RecordInvalid]:
    """Many journals whole (brief -> tip, objects already fetched): one rev-list and one cat-file batch for
    all of them, for readers of the whole forge (the board). A journal that holds junk is its error."""
    chains = git.chains(list(tips.values()))
    order = sorted(tips)
    # streamed: git finds the next journals' texts while these are decoded
    texts = git.stream_typed([f"{c}:entries.jsonl" for b in order for c in reversed(chains.get(tips[b], []))])
    out: dict[str, JournalLog | RecordInvalid] = {}
    try:
        for brief in order:
            ref, tip = journal_ref(brief), tips[brief]
            commits = list(reversed(chains.get(tip, [])))
            found = [next(texts) for _ in commits]
            try:
                if not commits:
                    raise RecordInvalid(ref, f"its tip {tip[:10]} is not a commit in the forge's objects")
                entries: list[JournalEntry] = []
                commit_of: dict[int, str] = {}
                _decode(ref, commits, found, entries, commit_of)
                _check_seq(ref, entries, 1)
                out[brief] = JournalLog(entries, commit_of, tip, len(commits))
            except RecordInvalid as exc:
                out[brief] = exc
        next(texts, None)  # past the last answer: the batch process is kept for the next read
    finally:
        texts.close()  # stopped early (an interrupt): its process ends now, not when the stream is collected
    return out


def _decode(ref: str, commits: list[str], texts: Iterable[GitObject | None], entries: list[JournalEntry],
            commit_of: dict[int, str]) -> None:
    for commit, found in zip(commits, texts, strict=True):
        for line in _entry_lines(ref, commit, found):
            entry = decode_entry(line, ref)
            entries.append(entry)
            commit_of[entry.seq] = commit


def _check_seq(ref: str, entries: list[JournalEntry], start: int) -> None:
    for expected, entry in enumerate(entries, start=start):
        if entry.seq != expected:
            raise RecordInvalid(ref, f"journal seq jumps from {expected - 1} to {entry.seq}")


@dataclass
class IndexedLog:
    """A journal as a session reads it: `base` answers for its first entries (None: there are none, or
    too few to index), and `tail` holds the entries after them, decoded in full."""

    base: journalindex.View | journalindex.Snapshot | None
    tail: JournalLog


def read_indexed(git: ForgeGit, brief: str, tip: str | None = None) -> IndexedLog:
    """A brief's journal through the index kept in the forge's cache (`journalindex`): only the commits after
    the index are decoded, and an index that falls `KEEP_AFTER` commits or more behind is brought up to date.

    The index is used only if its tip is on the chain (an ancestor of `tip`, or `tip` itself, or a
    descendant of `tip`, written by a process that read later) and its last row is the last line of its
    tip's `entries.jsonl`; otherwise the chain is decoded whole and the index built again.
    """
    ref = journal_ref(brief)
    if tip is None:
        tip = git.ls_remote(ref).get(ref)
    if not tip:
        return IndexedLog(None, JournalLog([], {}, None))
    index = journalindex.open_index(git.cache, brief)
    if index is None:
        found_snapshot = _from_snapshot(git, brief, tip)
        if found_snapshot is not None:
            return found_snapshot
    git.ensure_objects({ref: tip}, whole=index is None)  # with an index, the commits after its tip will do
    since: str | None = None
    if index is not None:
        if index.tip == tip or git.is_ancestor(index.tip, tip):
            since = index.tip
        elif git.is_ancestor(tip, index.tip):  # another process indexed further than we read: stop at our tip
            head, found = git.read_typed([tip, f"{tip}:entries.jsonl"])
            check_tip(ref, tip, head.kind if head else None)
            last = decode_entry(_entry_lines(ref, tip, found)[-1], ref)
            if index.view(last.seq, tip).commit_of(last.seq) == tip:
                return IndexedLog(index.view(last.seq, tip), JournalLog([], {}, tip))
            index = None
        else:
            index = None
        if index is None:
            git.ensure_objects({ref: tip})
    commits = list(reversed(git.rev_list(tip, since=since)))
    heads = git.read_typed([tip, *([f"{since}:entries.jsonl"] if since else [])])
    head, end = heads[0], (heads[1] if since else None)
    check_tip(ref, tip, head.kind if head else None)
    if index is not None and not _ends_with(ref, index, end):
        git.ensure_objects({ref: tip})
        index, commits, since = None, list(reversed(git.rev_list(tip))), None  # not this chain's: read it all
    entries, commit_of, lines = _decode_commits(git, ref, commits, index.last_seq + 1 if index is not None else 1)
    if index is None and len(commits) >= KEEP_AFTER:
        index = journalindex.build(git.cache, brief, entries, commit_of, tip, lines)
        if index is not None:
            entries, commit_of = [], {}
    elif index is not None and since and len(commits) >= KEEP_AFTER and \
            index.append(since, entries, commit_of, tip, lines):
        entries, commit_of = [], {}
    if index is None:
        return IndexedLog(None, JournalLog(entries, commit_of, tip, len(commits)))
    base = index.view(entries[0].seq - 1, since or tip) if entries else index.view(index.last_seq, tip)
    return IndexedLog(base, JournalLog(entries, commit_of, tip, len(commits)))


def _chain_span(git: ForgeGit, ref: str, tip: str, first: int, last: int) -> tuple[list[JournalEntry], dict[int, str]]:
    """Entries first..last of the chain up to `tip`, and the commit that added each: what a snapshot's segment
    found junk holds (the chain below the snapshot's tip fetched, and decoded)."""
    git.ensure_objects({ref: tip})
    commits = list(reversed(git.rev_list(tip)))
    entries, commit_of, _ = _decode_commits(git, ref, commits, 1)
    return entries[first - 1:last], {seq: commit_of[seq] for seq in range(first, last + 1) if seq in commit_of}


def _decode_commits(git: ForgeGit, ref: str, commits: list[str],
                    first: int) -> tuple[list[JournalEntry], dict[int, str], dict[int, str]]:
    """The entries `commits` added, in order and numbered on from `first` (RecordInvalid where a seq jumps), with
    the commit and the line as read of each by seq."""
    texts = git.stream_typed([f"{c}:entries.jsonl" for c in commits])  # decoded as git reads the next
    entries: list[JournalEntry] = []
    commit_of: dict[int, str] = {}
    lines: dict[int, str] = {}  # each entry's line as read: what the index keeps, not encoded again
    try:
        for commit, found in zip(commits, texts, strict=True):
            for line in _entry_lines(ref, commit, found):
                entry = decode_entry(line, ref)
                entries.append(entry)
                commit_of[entry.seq] = commit
                lines[entry.seq] = line
    finally:
        texts.close()  # stopped early by a bad entry: its process ends now, not with the exception
    for expected, entry in enumerate(entries, start=first):
        if entry.seq != expected:
            raise RecordInvalid(ref, f"journal seq jumps from {expected - 1} to {entry.seq}")
    return entries, commit_of, lines


def _ends_with(ref: str, index: journalindex.Index, end: GitObject | None) -> bool:
    """The index's last row is the last entry of its tip commit: the index is of this chain."""
    lines = _entry_lines(ref, index.tip, end) if end is not None and end.kind == "blob" else []
    return bool(lines) and decode_entry(lines[-1], ref) == decode_entry(index.last_body(), ref)


def fetch_first(git: ForgeGit, brief: str, claim_tip: str, tip: str | None) -> None:
    """A first read of a brief on a cache that holds nothing yet (a new machine's first step): one fetch of its claim
    and its journal, shallow as `_from_snapshot` fetches the journal (one round trip where there were two). A claim
    whose chain is deeper than that is made whole by its reader of custody (`ensure_objects`), as after any shallow
    fetch. Never on a cache that holds anything: a chain it holds whole (an older claim tip's) would be cut."""
    if tip is None or not git.holds_nothing():
        return
    git.fetch_shallow({claim_ref(brief): claim_tip, journal_ref(brief): tip}, first_depth())


def _from_snapshot(git: ForgeGit, brief: str, tip: str) -> IndexedLog | None:
    """The journal from the snapshot its tip carries (`journalindex.Snapshot`) and the commits after the snapshot's
    own tip, fetched alone when the cache lacks them (`fetch_shallow`: the tip and `first_depth()` - 1 commits below
    it first, for the snapshot and its last seq, then down to the snapshot's tip if that is further); None, and
    nothing decided, when the tip carries none that checks out."""
    ref = journal_ref(brief)
    fetched = not git.read_typed([tip])[0]
    if fetched:
        git.fetch_shallow({ref: tip}, first_depth())
    tree = journalindex.snapshot_of(git, tip)
    snapshot = journalindex.open_snapshot(git, brief, tree.sha) if tree else None
    if snapshot is None:
        return None
    try:
        last = decode_entry(_entry_lines(ref, tip, git.read_typed([f"{tip}:entries.jsonl"])[0])[-1], ref).seq
    except (RecordInvalid, IndexError):
        return None  # a junk tip: the chain's reader says what is wrong with it
    if last <= snapshot.last_seq:
        return None
    depth = last - snapshot.last_seq + 1  # each commit after the snapshot's tip adds an entry: at most this many
    if (fetched and depth > first_depth()) or not git.read_typed([snapshot.tip])[0]:
        git.fetch_shallow({ref: tip}, depth)
    if not git.is_ancestor(snapshot.tip, tip):
        return None
    end = git.read_typed([f"{snapshot.tip}:entries.jsonl"])[0]
    try:
        ends = _entry_lines(ref, snapshot.tip, end)
        if decode_entry(ends[-1], ref) != snapshot.entry(snapshot.last_seq):
            return None  # not this chain's snapshot
    except (RecordInvalid, IndexDamaged, IndexError):
        return None
    snapshot.chain = functools.partial(_chain_span, git, ref, snapshot.tip)
    commits = list(reversed(git.rev_list(tip, since=snapshot.tip)))
    texts = git.stream_typed([f"{c}:entries.jsonl" for c in commits])
    entries: list[JournalEntry] = []
    commit_of: dict[int, str] = {}
    try:
        _decode(ref, commits, texts, entries, commit_of)
    finally:
        texts.close()
    _check_seq(ref, entries, snapshot.last_seq + 1)
    return IndexedLog(snapshot, JournalLog(entries, commit_of, tip, len(commits)))


def read_kept(git: ForgeGit, brief: str, refs: Mapping[str, str] | None = None) -> JournalLog:
    """A brief's journal as the forge has it, or as it was when the brief was retired. `refs`: the forge's refs
    read already (see `retired.tip_of`)."""
    return read_log(git, brief, retired.tip_of(git, journal_ref(brief), refs) or "")


def _entry_lines(ref: str, commit: str, found: GitObject | None) -> list[str]:
    """The non-blank lines of one journal commit's `entries.jsonl`; RecordInvalid if it is not UTF-8 text."""
    if found is None or found.kind != "blob":
        raise RecordInvalid(ref, f"journal commit {commit[:10]} has no entries.jsonl")
    try:
        text = found.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordInvalid(ref, f"journal commit {commit[:10]}: entries.jsonl is not UTF-8 text "
                                 f"(byte {exc.start})") from None
    return [line for line in text.splitlines() if line.strip()]


class Journal:
    """Appends to one brief's journal as `desk` at `epoch`, in run `run`."""

    def __init__(self, claims: Claims, brief: str, desk: str, epoch: int, run: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.claims = claims
        self.git: ForgeGit = claims.git
        self.brief = validate_brief_id(brief)
        self.desk = desk
        self.epoch = epoch
        self.run = run
        self.clock = clock
        self.entries: list[JournalEntry] = []
        self.commit_of: dict[int, str] = {}
        self.tip: str | None = None
        self.base: journalindex.View | journalindex.Snapshot | None = None  # answers for those before `entries`
        self._indexed = False
        self.claim: Claim | None = None
        self.pending: list[Draft] = []
        self.extra_refs: list[RefUpdate] = []
        self.riders: list[RefUpdate] = []  # refs that go along if they can: dropped, not failed, when moved
        self.landed_riders: list[RefUpdate] = []  # the riders the last push carried
        self._ref_drafts: dict[str, Draft] = {}  # each of `extra_refs`: the entry that moves it
        self._ref_steps: dict[str, Draft | JournalEntry] = {}  # … and the intent of the step that moved it
        self.acting: list[Draft | JournalEntry] = []  # the intents of the steps whose effects run now (`steps`)
        self._oldest_pending = 0.0
        self._read_at = -math.inf  # when the forge last told this journal its claim's and journal's tips
        # an agent run's worktree (`core/wip.py`): a push carrying results of steps that ran here carries a snapshot
        # of the files then, named by the last of them, so that no result is on the forge without the files its
        # effect left (a successor replays it, not running it again, on the files it restores)
        self.recorder: Recorder | None = None
        self.on_pending: Callable[[], object] | None = None  # told each time an entry is left pending (a flusher)

    @classmethod
    def open(cls, claims: Claims, brief: str, desk: str, epoch: int, run: str,
             clock: Callable[[], float] = time.time, known: JournalLog | None = None,
             indexed: bool = False) -> Journal:
        """The journal as the forge has it now; with `known` (an earlier read), only what came since is read.

        `indexed`: without `known`, start from the index in the forge's cache (`read_indexed`), so that
        `entries` holds only what came after it and `base` answers for the rest.
        """
        journal = cls(claims, brief, desk, epoch, run, clock)
        journal._indexed = indexed and known is None
        if known is not None:
            journal.entries, journal.commit_of, journal.tip = list(known.entries), dict(known.commit_of), known.tip
        journal.reload()
        return journal

    def log(self) -> JournalLog:
        """What this journal has read and written so far, for another reader to start from."""
        if self.base is not None:
            raise RuntimeError("an indexed journal holds only its latest entries")
        return JournalLog(list(self.entries), dict(self.commit_of), self.tip)

    # -- reading ------------------------------------------------------------------------

    def reload(self, unless_within_s: float = 0.0) -> None:
        """Re-read the claim and the journal (new entries only, when the journal grew); not if this journal read
        them, or pushed them, within the last `unless_within_s` seconds (one look serves checks made together)."""
        if unless_within_s and time.monotonic() - self._read_at < unless_within_s:
            return
        cref, jref = claim_ref(self.brief), journal_ref(self.brief)
        asked = time.monotonic()
        refs = self.git.ls_remote(cref, jref)
        if cref not in refs:
            raise Fenced(self.brief, self.desk, self.epoch, "the brief has never been claimed")
        if self._indexed and self.tip is None and self.base is None:
            fetch_first(self.git, self.brief, refs[cref], refs.get(jref))
        self.claim = self.claims.load(cref, refs[cref])
        self._check_holder()
        tip = refs.get(jref)
        if tip != self.tip and self._indexed and (self.base is not None or self.tip is None):
            self._read_indexed(tip)
        elif tip != self.tip:
            log = read_log(self.git, self.brief, tip, JournalLog(self.entries, self.commit_of, self.tip))
            self.entries, self.commit_of, self.tip = log.entries, log.commit_of, log.tip
        self._read_at = asked  # read whole: only now may a check made together skip its own read

    def _read_indexed(self, tip: str | None) -> None:
        """Bring `entries` (what came after `base`) up to `tip`: the new commits only, if it follows ours."""
        if self.tip and tip and self.git.is_ancestor(self.tip, tip):
            since = read_log(self.git, self.brief, tip, JournalLog([], {}, self.tip), first=self.last_seq + 1)
            self.entries.extend(since.entries)
            self.commit_of.update(since.commit_of)
            self.tip = tip
            return
        read = read_indexed(self.git, self.brief, tip)
        self.base, self.tip = read.base, read.tail.tip
        self.entries, self.commit_of = read.tail.entries, read.tail.commit_of

    @property
    def last_seq(self) -> int:
        """The seq of the last entry on the forge, as far as this journal has read and written."""
        if self.entries:
            return self.entries[-1].seq
        return self.base.last_seq if self.base is not None else 0

    def _check_holder(self) -> None:
        assert self.claim is not None
        fence(self.claim.record, self.brief, self.desk, self.epoch)
        if self.claim.record.state == "blocked":
            raise Fenced(self.brief, self.desk, self.epoch, "the claim is blocked for a person")

    @contextlib.contextmanager
    def acting_for(self, intent: Draft | JournalEntry) -> Iterator[None]:
        """While a step's effect runs: a ref it moves is that step's (`_drop_moved_refs`)."""
        self.acting.append(intent)
        try:
            yield
        finally:
            self.acting.pop()

    def blob(self, entry: JournalEntry, path: str) -> bytes:
        commit = self.commit_of.get(entry.seq)
        if commit is None and self.base is not None:
            commit = self.base.commit_of(entry.seq)
        data = self.git.read_objects([f"{commit}:{path}"])[0] if commit else None
        if data is None and commit and self.base is not None and entry.seq <= self.base.last_seq:
            self.git.fetch_shallow({journal_ref(self.brief): commit}, 1)  # below a snapshot: that commit alone
            data = self.git.read_objects([f"{commit}:{path}"])[0]
        if data is None:
            raise RecordInvalid(journal_ref(self.brief), f"entry {entry.seq} names {path}, which is missing")
        return data

    # -- writing ------------------------------------------------------------------------

    def add(self, kind: str, *, sync: bool = True, blobs: dict[str, bytes] | None = None,
            resolves: Draft | JournalEntry | None = None, refs: list[RefUpdate] | None = None,
            riders: list[RefUpdate] | None = None, files: bool = False, with_work: bool = False,
            **fields: Any) -> Draft:
        """Draft an entry; with sync=True it is on the forge (with everything before it) on return.

        `refs` are moved in the same atomic push (a work branch, say), so they are
        fenced exactly like the entry: a desk that lost its claim moves nothing. With sync=False they wait
        with the entry for the next push (a ref already waiting to move is pushed first).
        `riders` go in that push too, fenced alike, but one that moved meanwhile is
        left out rather than failing the entry (`riders` then lacks it afterwards).
        """
        if refs and self._ref_drafts.keys() & {u.ref for u in refs}:
            self.flush()  # one move of a ref a push: the earlier one goes first
        self.riders += riders or []
        draft = Draft(kind, {k: v for k, v in fields.items() if v is not None}, dict(blobs or {}), resolves,
                      files=files, with_work=with_work)
        for u in refs or []:
            self.extra_refs.append(u)
            self._ref_drafts[u.ref] = draft
            if self.acting:
                self._ref_steps[u.ref] = self.acting[-1]
        if not self.pending:
            self._oldest_pending = time.monotonic()
        self.pending.append(draft)
        if sync or len(self.pending) >= MAX_PENDING or time.monotonic() - self._oldest_pending > MAX_PENDING_S:
            self.flush()
        elif self.on_pending is not None:
            self.on_pending()
        return draft

    def drop_unlanded_files(self) -> None:
        """Before a stop's own writes (a step's cancelled end, the run's end): the results that land with the work's
        push or not at all (`with_work`: an agent's finished run, whose files only the work branch carries) are
        dropped rather than pushed without those files, where this journal takes no snapshot of the worktree (it
        has no `recorder`). Their intents stay open, and a later run runs them again (they are idempotent), as
        after a crash before their push; replayed on a worktree without their files, an agent's finished run read
        as one that changed nothing."""
        if self.recorder is None:
            self.pending = [d for d in self.pending if not d.with_work]

    def flush(self, action: str = "renew", **args: Any) -> None:
        """Push every pending entry in one commit, with the claim change `action` (a renewal, unless a
        transition rides along) in the same atomic push: an append is a heartbeat and a fencing check."""
        if not self.pending:
            return
        named = [d for d in self.pending if d.files]
        if self.recorder is None or not named:
            self._flush(action, args)
            return
        for draft in named:  # a name a failed push gave it goes: only this push's snapshot is named
            kept = {k: v for k, v in (draft.fields.pop("data", None) or {}).items() if k != "worktree"}
            if kept:
                draft.fields["data"] = kept
        with self.recorder.recording(self.git) as (files, refs):  # one snapshot, one move of the ref, at a time
            if files:
                named[-1].fields["data"] = {**(named[-1].fields.get("data") or {}), **files}
            self.riders += refs  # the ref is this run's alone: a rider, so that the entries never fail with it
            self._flush(action, args)
            lost = bool(refs) and refs[0] not in self.landed_riders
        if lost:  # moved by another writer: read again next time (the entry names a snapshot a restore will not find,
            self.recorder.tip = None  # which it journals as failed, and takes the one before)

    def _flush(self, action: str, args: dict[str, Any]) -> None:
        try:
            chain.retrying(lambda n: self._flush_once(n, action, args), f"appending to the journal of {self.brief!r}")
        except BaseException:
            self.riders = []  # a rider goes with the push it was added for, or not at all
            raise

    def transition(self, action: str, kind: str, data: dict[str, Any], **args: Any) -> Claim:
        """The claim transition `action` (wait, block, release…) and its entry, with everything pending, in
        one atomic push: the journal never shows a change the claim lacks, nor the reverse."""
        self.add(kind, sync=False, data=data)
        self.flush(action, **args)
        assert self.claim is not None
        return self.claim

    def _flush_once(self, attempt: int, action: str, args: dict[str, Any]) -> None:
        if attempt:
            self.reload()  # the claim or the journal moved: ours (a heartbeat, a sibling process) or fenced
        assert self.claim is not None
        entries = self._number(self.pending)
        jref = journal_ref(self.brief)
        update = chain.commit(self.git, jref, self.tip, self._files(entries), _message(self.brief, entries),
                              self.desk, self.clock())
        record, claim_update = self.claims.transition_update(self.claim, action, desk=self.desk, epoch=self.epoch,
                                                             **args)
        step = next((e.step for e in entries if e.kind == "intent"), None)
        if len(entries) > 1:  # a group commit: named by the first step it carries
            crash_point("journal.group-flush", next((e.step for e in entries if e.step), None))
        try:
            chain.push(self.git, [update, claim_update, *self.extra_refs, *self.riders],
                       "journal" if action == "renew" else action.replace("_", "-"), step)
        except chain.Moved as moved:
            self.riders = [u for u in self.riders if u.ref not in moved.refs]
            self._drop_moved_refs(moved)
            raise
        self._landed(entries, update.new, Claim(record, claim_update.new))
        for e in entries:
            if e.kind == "intent":
                crash_point("journal.after-intent", e.step)

    def _drop_moved_refs(self, moved: chain.Moved) -> None:
        """A ref of ours (a work branch, a review) moved under us: drop the entries that moved the refs that moved,
        and the results of the steps that moved them (their intents stay open: the step did not happen as its
        result would say), and stop. The rest, and the other refs, stay pending."""
        mine = [u.ref for u in self.extra_refs if u.ref in moved.refs]
        if not mine:
            return
        steps = {id(self._ref_steps[ref]) for ref in mine if ref in self._ref_steps}
        dropped = {id(self._ref_drafts[ref]) for ref in mine}
        dropped |= {id(d) for d in self.pending if d.resolves is not None and id(d.resolves) in steps}
        self.pending = [d for d in self.pending if id(d) not in dropped]
        for d in self.pending:
            d.entry = None
        self.extra_refs = [u for u in self.extra_refs if id(self._ref_drafts[u.ref]) not in dropped]
        self._ref_drafts = {u.ref: self._ref_drafts[u.ref] for u in self.extra_refs}
        self._ref_steps = {u.ref: self._ref_steps[u.ref] for u in self.extra_refs if u.ref in self._ref_steps}
        raise Conflict(f"{', '.join(mine)} moved under desk {self.desk!r}; nothing was written",
                       hint="another writer pushed to the work branch; inspect it before going on")

    def _number(self, drafts: list[Draft]) -> list[JournalEntry]:
        next_seq = self.last_seq + 1
        at = utc_now_iso(self.clock())
        out: list[JournalEntry] = []
        for offset, draft in enumerate(drafts):
            seq = next_seq + offset
            fields = {k: v for k, v in draft.fields.items() if k != "data"}
            data = dict(draft.fields.get("data") or {})
            for name in draft.blobs:
                data[f"{name}_blob"] = f"blobs/{seq}-{name}"
            resolves = draft.resolves
            intent = None
            if isinstance(resolves, JournalEntry):
                intent = resolves.seq
            elif isinstance(resolves, Draft):
                in_batch = [i for i, d in enumerate(drafts) if d is resolves]  # numbered afresh on every try
                if in_batch:
                    intent = next_seq + in_batch[0]
                elif resolves.entry is not None:
                    intent = resolves.entry.seq
                else:
                    raise RuntimeError("an entry resolves a draft that was never journaled")
            entry = JournalEntry(seq=seq, epoch=self.epoch, kind=draft.kind, at=at, run=self.run, intent=intent,
                                 data=data or None, **fields)
            draft.entry = entry
            out.append(entry)
        return out

    def _files(self, entries: list[JournalEntry]) -> chain.Files:
        files: dict[str, bytes | dict[str, bytes] | TreeEntry] = {"entries.jsonl": _jsonl(entries)}
        blobs = {f"{e.seq}-{name}": data for e, d in zip(entries, self.pending, strict=True)
                 for name, data in d.blobs.items()}
        if blobs:
            files["blobs"] = blobs
        snapshot = journalindex.snapshot_tree(self.git, self.brief, self.tip, entries[0].seq, entries[-1].seq,
                                              self._between)
        if snapshot is not None:
            files[journalindex.SNAPSHOT_DIR] = snapshot
        return files

    def _between(self, after: int, upto: int) -> list[tuple[JournalEntry, str | None]] | None:
        """Entries after..upto read from the chain's own commits, each with the commit that added it: a snapshot
        is a copy of the chain, never of the local index (a hint, which a damaged cache could make false for every
        cold reader). The index names only where to start (the commit of entry `after`), checked: None, and no new
        snapshot, when the commits do not hold exactly these entries."""
        ref = journal_ref(self.brief)
        since: str | None = None
        if after > 0:
            since = self.commit_of.get(after)
            if since is None and self.base is not None:
                found = self.base.between(after - 1, after)
                since = found[0][1] if found else None
            if since is None:
                return None
        try:
            commits = list(reversed(self.git.rev_list(self.tip, since=since))) if self.tip else []
            read = self.git.read_typed([f"{c}:entries.jsonl" for c in [*([since] if since else []), *commits]])
            if since is not None:  # where it starts must end with entry `after`
                if decode_entry(_entry_lines(ref, since, read[0])[-1], ref).seq != after:
                    return None
                read = read[1:]
            out: list[tuple[JournalEntry, str | None]] = [
                (decode_entry(line, ref), commit) for commit, found in zip(commits, read, strict=True)
                for line in _entry_lines(ref, commit, found)]
        except (AssayError, IndexError):
            return None
        return out if [e.seq for e, _ in out] == list(range(after + 1, upto + 1)) else None

    def _landed(self, entries: list[JournalEntry], commit: str, claim: Claim) -> None:
        self.entries.extend(entries)
        for e in entries:
            self.commit_of[e.seq] = commit
        self.tip = commit
        self.claim = claim
        self.pending.clear()
        self.extra_refs.clear()
        self.landed_riders, self.riders = self.riders, []
        self._ref_drafts.clear()
        self._ref_steps.clear()
        self._read_at = time.monotonic()  # the tips are ours as of this push


def entry_view(entry: JournalEntry) -> dict[str, Any]:
    return {k: v for k, v in entry.__dict__.items() if v is not None}


Check = Callable[[list[JournalEntry]], None]


def append_as_person(claims: Claims, brief: str, kind: str, data: dict[str, Any], by: str,
                     clock: Callable[[], float] = time.time, run: str = "",
                     check: Check | None = None) -> JournalEntry:
    """A person's entry (steering): the journal ref alone, under its lease. It changes no claim, so it
    needs none; it is stamped with the current claim's epoch (0 if the brief was never claimed). `check`, given
    the journal as the forge has it at each try, may raise to write nothing (an act already journaled)."""
    return _append(claims, brief, kind, data, by, run or f"person:{by}", None, {}, clock, {}, check)[0]


def append_built_as_person(claims: Claims, brief: str, build: Callable[[list[JournalEntry]], list[dict[str, Any]]],
                           by: str, clock: Callable[[], float] = time.time) -> list[JournalEntry]:
    """A person's entries that depend on what the journal holds (settling a step's unknown outcome): `build`
    gets the journal as it is on the forge and returns the entries' fields (`kind`, `resolves`, …); they land
    in one push of the journal ref alone, under its lease, or `build` runs again on what moved it."""
    git = claims.git
    jref, cref = journal_ref(brief), claim_ref(brief)
    known = JournalLog([], {}, None)

    def attempt(_: int) -> list[JournalEntry]:
        nonlocal known
        refs = git.ls_remote(jref, cref, retired.RETIRED_REF)
        if jref not in refs:
            retired.refuse_if_retired(git, refs.get(retired.RETIRED_REF), brief, "settle")
        current = claims.load(cref, refs[cref]) if cref in refs else None
        known = read_log(git, brief, refs.get(jref), known)
        first = (known.entries[-1].seq + 1) if known.entries else 1
        entries = []
        for offset, fields in enumerate(build(known.entries)):
            resolves = fields.pop("resolves", None)
            entries.append(JournalEntry(seq=first + offset, epoch=current.record.epoch if current else 0,
                                        at=utc_now_iso(clock()), run=f"person:{by}",
                                        intent=resolves.seq if isinstance(resolves, JournalEntry) else None,
                                        **fields))
        update = chain.commit(git, jref, known.tip, _person_files(git, brief, known, entries),
                              _message(brief, entries), by, clock())
        chain.push(git, [update], "journal")
        return entries

    return chain.retrying(attempt, f"journaling on {brief!r}")


def transition_as(claims: Claims, brief: str, action: str, kind: str, data: dict[str, Any], by: str,
                  run: str = "", clock: Callable[[], float] = time.time, expect: Mapping[str, str] | None = None,
                  check: Check | None = None, **args: Any) -> Claim:
    """The claim transition `action` and its journal entry, written by a person or by a desk between runs,
    in one atomic push of both refs under their leases. `run` names the writer in the entry
    (default `person:<by>`; a desk passes `desk:<name>`).

    With `expect` (ref -> tip, "" for absent), nothing is written unless every one of those refs is
    still where the caller saw it: a sweeper expires only the claim tip it watched stand still, and a
    desk renewing at that moment wins (`Conflict`). `check`: as for `append_as_person`."""
    claim = _append(claims, brief, kind, data, by, run or f"person:{by}", action, args, clock, expect or {}, check)[1]
    assert claim is not None
    return claim


def _append(claims: Claims, brief: str, kind: str, data: dict[str, Any], by: str, run: str, action: str | None,
            args: dict[str, Any], clock: Callable[[], float], expect: Mapping[str, str],
            check: Check | None = None) -> tuple[JournalEntry, Claim | None]:
    git = claims.git
    jref, cref = journal_ref(brief), claim_ref(brief)
    known = JournalLog([], {}, None)

    def attempt(_: int) -> tuple[JournalEntry, Claim | None]:
        nonlocal known
        refs = git.ls_remote(jref, cref, retired.RETIRED_REF, *(r for r in expect if r not in (jref, cref)))
        moved = sorted(r for r, tip in expect.items() if refs.get(r, "") != tip)
        if moved:
            raise Conflict(f"{', '.join(moved)} moved since it was read; nothing was written",
                           hint="the writer that moved it is alive; look again")
        if jref not in refs:  # a new journal, unless the brief is retired (then it is read-only)
            retired.refuse_if_retired(git, refs.get(retired.RETIRED_REF), brief, action or kind)
        current = claims.load(cref, refs[cref]) if cref in refs else None
        known = read_log(git, brief, refs.get(jref), known)
        if check is not None:
            check(known.entries)
        updates: list[RefUpdate] = []
        claim = None
        if action is not None:
            if current is None:
                raise IllegalTransition(brief, action.replace("_", "-"), "absent", "nobody has claimed it")
            record, update = claims.transition_update(current, action, author=by, **args)
            updates.append(update)
            claim = Claim(record, update.new)
        epoch = claim.record.epoch if claim else current.record.epoch if current else 0
        seq = (known.entries[-1].seq + 1) if known.entries else 1
        entry = JournalEntry(seq=seq, epoch=epoch, kind=kind, at=utc_now_iso(clock()), run=run,
                             data=data)
        updates.insert(0, chain.commit(git, jref, known.tip, _person_files(git, brief, known, [entry]),
                                       _message(brief, [entry]), by, clock()))
        chain.push(git, updates, action.replace("_", "-") if action else "journal")
        return entry, claim

    return chain.retrying(attempt, f"{action or kind} on {brief!r}")


def _person_files(git: ForgeGit, brief: str, known: JournalLog, entries: list[JournalEntry]) -> chain.Files:
    """A commit's files on `known` (the whole journal, read): its entries, and the snapshot carried on or made."""
    def between(after: int, upto: int) -> list[tuple[JournalEntry, str | None]]:
        return [(e, known.commit_of.get(e.seq)) for e in known.entries[after:upto]]

    files: dict[str, bytes | dict[str, bytes] | TreeEntry] = {"entries.jsonl": _jsonl(entries)}
    snapshot = journalindex.snapshot_tree(git, brief, known.tip, entries[0].seq, entries[-1].seq, between)
    if snapshot is not None:
        files[journalindex.SNAPSHOT_DIR] = snapshot
    return files


def _jsonl(entries: list[JournalEntry]) -> bytes:
    return "".join(e.encode() + "\n" for e in entries).encode("utf-8")


def _message(brief: str, entries: list[JournalEntry]) -> str:
    kinds = ", ".join(sorted({e.kind for e in entries}))
    return f"assay: journal {brief} seq {entries[0].seq}-{entries[-1].seq} ({kinds})"


def fork_as_person(claims: Claims, brief: str, data: dict[str, Any], blob: bytes, branch: str, commit: str, by: str,
                   clock: Callable[[], float] = time.time) -> JournalEntry:
    """A fork's start: a new brief's journal, whose first entry is a checkpoint of another brief's agent session
    (with its transcript as the blob), its work branch at `commit`, and its worktree snapshot (`refs/assay/wip/`)
    at the one the entry's data names, if any, in one atomic push. All must be new: nothing is written if the
    brief has a journal, a claim, a branch or a snapshot already."""
    git = claims.git
    jref, cref, bref, wref = journal_ref(brief), claim_ref(brief), f"refs/heads/{branch}", wip_ref(brief)
    snapshot = str(data.get("worktree") or "")

    def attempt(_: int) -> JournalEntry:
        refs = git.ls_remote(jref, cref, bref, wref, retired.RETIRED_REF)
        taken = [r for r in (jref, cref, bref, wref) if r in refs]
        if taken or (retired.RETIRED_REF in refs and retired.Index(git, refs[retired.RETIRED_REF]).get(brief)):
            raise Conflict(f"brief {brief!r} exists on the forge already ({', '.join(taken) or 'retired'}); "
                           "nothing was written", hint="fork into a new brief id")
        entry = JournalEntry(seq=1, epoch=0, kind="checkpoint", at=utc_now_iso(clock()), run=f"person:{by}",
                             data={**data, "checkpoint_blob": "blobs/1-checkpoint"})
        update = chain.commit(git, jref, None, {"entries.jsonl": _jsonl([entry]), "blobs": {"1-checkpoint": blob}},
                              _message(brief, [entry]), by, clock())
        chain.push(git, [update, RefUpdate(bref, commit), *([RefUpdate(wref, snapshot)] if snapshot else [])],
                   "journal")
        return entry

    return chain.retrying(attempt, f"forking into {brief!r}")
