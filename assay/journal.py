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

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from assay.claims import Claim, Claims
from assay.crash import crash_point
from assay.errors import Conflict, ForgeError, ForgeRefused, RecordInvalid
from assay.git import ZERO, ForgeGit, GitObject, RefUpdate, Signature, TreeEntry, refusal_hint
from assay.records import (
    JournalEntry,
    check_tip,
    claim_ref,
    decode_entry,
    journal_ref,
    utc_now_iso,
    validate_brief_id,
)

INLINE_LIMIT = 4096  # larger outputs go to blobs/ of the entry's commit
MAX_PENDING = 256  # a group commit carries at most this many entries …
MAX_PENDING_S = 2.0  # … and waits at most this long for more
FLUSH_TRIES = 30  # pushes of one batch while other writers keep moving the journal


class Fenced(Conflict):
    """This desk no longer holds the brief at its epoch: stop, write nothing."""

    def __init__(self, brief: str, desk: str, epoch: int, now: str) -> None:
        super().__init__(f"desk {desk!r} is fenced off brief {brief!r} at epoch {epoch}: {now}",
                         hint="another desk or a sweeper took the claim; stop working on this brief")


@dataclass
class Draft:
    """An entry not yet on the forge; `entry` is set once it is."""

    kind: str
    fields: dict[str, Any]
    blobs: dict[str, bytes] = field(default_factory=dict)
    resolves: Draft | JournalEntry | None = None
    entry: JournalEntry | None = None

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


def read_log(git: ForgeGit, brief: str, tip: str | None = None, known: JournalLog | None = None) -> JournalLog:
    """All entries of a brief's journal: one ls-remote, one fetch, one rev-list, one cat-file batch.

    With `known` (an earlier read of the same journal), only the commits after it are read.
    """
    ref = journal_ref(brief)
    if tip is None:
        tip = git.ls_remote(ref).get(ref)
    if not tip:
        return JournalLog([], {}, None)
    git.ensure_objects({ref: tip})
    since = known.tip if known and known.tip and git.is_ancestor(known.tip, tip) else None
    commits = list(reversed(git.rev_list(tip, since=since)))  # empty if the tip is no commit
    head, *texts = git.read_typed([tip, *(f"{c}:entries.jsonl" for c in commits)])
    check_tip(ref, tip, head.kind if head else None)
    entries: list[JournalEntry] = list(known.entries) if since and known else []
    commit_of: dict[int, str] = dict(known.commit_of) if since and known else {}
    for commit, found in zip(commits, texts, strict=True):
        for line in _entry_lines(ref, commit, found):
            entry = decode_entry(line, ref)
            entries.append(entry)
            commit_of[entry.seq] = commit
    for expected, entry in enumerate(entries, start=1):
        if entry.seq != expected:
            raise RecordInvalid(ref, f"journal seq jumps from {expected - 1} to {entry.seq}")
    return JournalLog(entries, commit_of, tip)


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
        self.claim: Claim | None = None
        self.pending: list[Draft] = []
        self.extra_refs: list[RefUpdate] = []
        self._refs_draft: Draft | None = None
        self._oldest_pending = 0.0

    @classmethod
    def open(cls, claims: Claims, brief: str, desk: str, epoch: int, run: str,
             clock: Callable[[], float] = time.time) -> Journal:
        journal = cls(claims, brief, desk, epoch, run, clock)
        journal.reload()
        return journal

    # -- reading ------------------------------------------------------------------------

    def reload(self) -> None:
        """Re-read the claim and the journal (new entries only, when the journal grew)."""
        cref, jref = claim_ref(self.brief), journal_ref(self.brief)
        refs = self.git.ls_remote(cref, jref)
        if cref not in refs:
            raise Fenced(self.brief, self.desk, self.epoch, "the brief has never been claimed")
        self.claim = self.claims.load(cref, refs[cref])
        self._check_holder()
        tip = refs.get(jref)
        if tip != self.tip:
            log = read_log(self.git, self.brief, tip, JournalLog(self.entries, self.commit_of, self.tip))
            self.entries, self.commit_of, self.tip = log.entries, log.commit_of, log.tip

    def _check_holder(self) -> None:
        assert self.claim is not None
        r = self.claim.record
        if r.epoch != self.epoch or r.desk != self.desk or r.state not in ("held", "waiting"):
            raise Fenced(self.brief, self.desk, self.epoch,
                         f"the claim is now {r.state} at epoch {r.epoch} by desk {r.desk!r}")

    def blob(self, entry: JournalEntry, path: str) -> bytes:
        commit = self.commit_of.get(entry.seq)
        data = self.git.read_objects([f"{commit}:{path}"])[0] if commit else None
        if data is None:
            raise RecordInvalid(journal_ref(self.brief), f"entry {entry.seq} names {path}, which is missing")
        return data

    # -- writing ------------------------------------------------------------------------

    def add(self, kind: str, *, sync: bool = True, blobs: dict[str, bytes] | None = None,
            resolves: Draft | JournalEntry | None = None, refs: list[RefUpdate] | None = None,
            **fields: Any) -> Draft:
        """Draft an entry; with sync=True it is on the forge (with everything before it) on return.

        `refs` are moved in the same atomic push (a work branch, say), so they are
        fenced exactly like the entry: a desk that lost its claim moves nothing.
        """
        draft = Draft(kind, {k: v for k, v in fields.items() if v is not None}, dict(blobs or {}), resolves)
        if refs:
            self.extra_refs += refs
            self._refs_draft = draft
        if not self.pending:
            self._oldest_pending = time.monotonic()
        self.pending.append(draft)
        if sync or len(self.pending) >= MAX_PENDING or time.monotonic() - self._oldest_pending > MAX_PENDING_S:
            self.flush()
        return draft

    def flush(self) -> None:
        """Push every pending entry in one commit, renewing the claim in the same atomic push."""
        if not self.pending:
            return
        for attempt in range(FLUSH_TRIES):
            if attempt:  # others are appending too: back off a random while, so someone wins each round
                time.sleep(random.uniform(0, min(0.01 * 2 ** attempt, 0.5)))
            assert self.claim is not None
            entries = self._number(self.pending)
            commit = self._commit(entries)
            record, renewal = self.claims.renewal(self.claim, self.desk, self.epoch)
            jref = journal_ref(self.brief)
            step = next((e.step for e in entries if e.kind == "intent"), None)
            crash_point("journal.before-push", step)
            if len(entries) > 1:  # a group commit: named by the first step it carries
                crash_point("journal.group-flush", next((e.step for e in entries if e.step), None))
            results = self.git.push([RefUpdate(jref, commit, self.tip or ZERO), renewal, *self.extra_refs],
                                    atomic=True)
            if all(r.ok for r in results.values()):
                self._landed(entries, commit, Claim(record, renewal.new))
                for e in entries:
                    if e.kind == "intent":
                        crash_point("journal.after-intent", e.step)
                crash_point("journal.after-push", step)
                return
            moved = [u.ref for u in self.extra_refs if results[u.ref].status == "stale"]
            if moved:  # drop the entry that carried the refs; the rest stays pending, unnumbered
                self.pending = [d for d in self.pending if d is not self._refs_draft]
                for d in self.pending:
                    d.entry = None
                self.extra_refs.clear()
                self._refs_draft = None
                raise Conflict(f"{', '.join(moved)} moved under desk {self.desk!r}; nothing was written",
                               hint="another writer pushed to the work branch; inspect it before going on")
            if not any(r.status == "stale" for r in results.values()):
                detail = "; ".join(sorted({r.detail for r in results.values() if not r.ok}))
                raise ForgeRefused(f"the forge refused a journal append for {self.brief!r}: {detail}",
                                   hint=refusal_hint(detail))
            self.reload()  # the claim or the journal moved: ours (a heartbeat, a sibling process) or fenced
        raise ForgeError(f"the journal of {self.brief!r} kept moving; nothing more was written",
                         hint="many writers at once: run the command again")

    def _number(self, drafts: list[Draft]) -> list[JournalEntry]:
        next_seq = (self.entries[-1].seq + 1) if self.entries else 1
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

    def _commit(self, entries: list[JournalEntry]) -> str:
        text = "".join(e.encode() + "\n" for e in entries).encode("utf-8")
        tree: list[TreeEntry] = [TreeEntry("entries.jsonl", self.git.write_blob(text))]
        blob_entries = [TreeEntry(f"{e.seq}-{name}", self.git.write_blob(data))
                        for e, d in zip(entries, self.pending, strict=True) for name, data in d.blobs.items()]
        if blob_entries:
            tree.append(TreeEntry("blobs", self.git.write_tree(blob_entries), "40000"))
        kinds = ", ".join(sorted({e.kind for e in entries}))
        message = f"assay: journal {self.brief} seq {entries[0].seq}-{entries[-1].seq} ({kinds})"
        return self.git.write_commit(self.git.write_tree(tree), [self.tip] if self.tip else [], message,
                                     Signature.of(self.desk), self.clock())

    def _landed(self, entries: list[JournalEntry], commit: str, claim: Claim) -> None:
        self.entries.extend(entries)
        for e in entries:
            self.commit_of[e.seq] = commit
        self.tip = commit
        self.claim = claim
        self.pending.clear()
        self.extra_refs.clear()
        self._refs_draft = None


def entry_view(entry: JournalEntry) -> dict[str, Any]:
    return {k: v for k, v in entry.__dict__.items() if v is not None}


def append_as_person(claims: Claims, brief: str, kind: str, data: dict[str, Any], by: str,
                     clock: Callable[[], float] = time.time) -> JournalEntry:
    """A person's entry (steering, a wait or wake by hand): the journal ref alone, under its lease.

    It renews no claim, so it needs none; it is stamped with the current claim's
    epoch (0 if the brief was never claimed) and kept for the next run.
    """
    git = claims.git
    jref, cref = journal_ref(brief), claim_ref(brief)
    for attempt in range(FLUSH_TRIES):
        if attempt:
            time.sleep(random.uniform(0, min(0.01 * 2 ** attempt, 0.5)))  # back off while others append
        refs = git.ls_remote(jref, cref)
        epoch = claims.load(cref, refs[cref]).record.epoch if cref in refs else 0
        log = read_log(git, brief, refs.get(jref))
        seq = (log.entries[-1].seq + 1) if log.entries else 1
        entry = JournalEntry(seq=seq, epoch=epoch, kind=kind, at=utc_now_iso(clock()), run=f"person:{by}",
                             data=data)
        tree = git.write_tree([TreeEntry("entries.jsonl", git.write_blob((entry.encode() + "\n").encode()))])
        commit = git.write_commit(tree, [log.tip] if log.tip else [], f"assay: journal {brief} seq {seq} ({kind})",
                                  Signature.of(by), clock())
        result = git.push([RefUpdate(jref, commit, log.tip or ZERO)])[jref]
        if result.ok:
            return entry
        if result.status != "stale":
            raise ForgeRefused(f"the forge refused a journal append for {brief!r}: {result.detail}",
                               hint=refusal_hint(result.detail))
    raise ForgeError(f"the journal of {brief!r} kept moving; nothing was written", hint="run the command again")
