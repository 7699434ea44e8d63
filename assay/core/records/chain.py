"""Chains of versioned records: how every Assay ref is read, prepared and compare-and-swap-written.

A chain is a ref whose commits each hold a few files (`claim.json`, `review.json`,
a journal batch). A change is a new commit on the tip, pushed with a lease on that
tip (`push`); a push that finds a ref moved raises `Moved`, and `retrying` re-reads
and tries again after a random back-off, the one policy for every writer. Reading
many tips is one fetch and one cat-file batch (`read_tips`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence

from assay.core.crash import crash_point
from assay.core.git import ZERO, ForgeGit, GitObject, RefUpdate, Signature, TreeEntry, lock_named, refusal_hint
from assay.core.records.codec import brief_of_ref, check_tip
from assay.core.records.recordtype import dataclass
from assay.errors import Busy, ForgeRefused, RecordInvalid

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")
    R = TypeVar("R")

TRIES = 30  # attempts of one change while other writers keep moving its refs
BACKOFF_CAP_S = 0.5
Files = Mapping[str, "bytes | Mapping[str, bytes] | TreeEntry"]  # a file, a folder of files, or an object kept


class Moved(Exception):
    """A ref moved between our read and our push (`refs`: which); nothing was written."""

    def __init__(self, refs: Sequence[str]) -> None:
        super().__init__(", ".join(refs))
        self.refs = list(refs)


@dataclass(frozen=True)
class InvalidRecord:
    """A ref whose record does not decode: listed with what is wrong, never fatal to a listing."""

    ref: str
    sha: str
    problem: str


# -- reading ----------------------------------------------------------------------------------


def read_tips(git: ForgeGit, tips: Mapping[str, str], prefix: str, name: str,
              decode: Callable[[bytes | None, str], R]) -> tuple[list[tuple[R, str]], list[InvalidRecord]]:
    """The record `name` at each tip (ref -> sha under `prefix`): one fetch, one cat-file batch.

    Returns (record, sha) pairs in ref order, and the refs that hold junk: a ref that names
    no brief, a tip that is not a commit, a record that does not decode.
    """
    good_names: dict[str, str] = {}
    bad: list[InvalidRecord] = []
    for ref, sha in tips.items():
        try:
            brief_of_ref(ref, prefix)  # before fetching: git refuses to fetch a malformed ref name
            good_names[ref] = sha
        except RecordInvalid as exc:
            bad.append(InvalidRecord(ref, sha, exc.problem))
    git.ensure_objects(good_names)
    refs = sorted(good_names)
    objects = git.read_typed([n for r in refs for n in (good_names[r], f"{good_names[r]}:{name}")])
    good: list[tuple[R, str]] = []
    for i, ref in enumerate(refs):
        try:
            good.append((decode_tip(ref, good_names[ref], objects[2 * i], objects[2 * i + 1], decode),
                         good_names[ref]))
        except RecordInvalid as exc:
            bad.append(InvalidRecord(ref, good_names[ref], exc.problem))
    return good, sorted(bad, key=lambda b: b.ref)


def read_one(git: ForgeGit, ref: str, sha: str, prefix: str, name: str, decode: Callable[[bytes | None, str], R]) -> R:
    """The record `name` at commit `sha` of `ref`; RecordInvalid for junk. The tip is all it reads: a cache that holds
    the chain cut short below it (one shallow fetch with a journal's, `journal.writer.fetch_first`) is left so, for a
    reader of the chain's history to make whole (`ensure_objects`)."""
    brief_of_ref(ref, prefix)
    git.ensure_objects({ref: sha}, whole=False)
    tip, blob = git.read_typed([sha, f"{sha}:{name}"])
    return decode_tip(ref, sha, tip, blob, decode)


def decode_tip(ref: str, sha: str, tip: GitObject | None, blob: GitObject | None,
               decode: Callable[[bytes | None, str], R]) -> R:
    check_tip(ref, sha, tip.kind if tip else None)
    return decode(blob.data if blob and blob.kind == "blob" else None, ref)


# -- writing ----------------------------------------------------------------------------------


def commit(git: ForgeGit, ref: str, parent: str | None, files: Files, message: str, author: str,
           when: float, merged: Sequence[str] = ()) -> RefUpdate:
    """A commit on `parent` holding `files`, written to the cache (not pushed), as the update that moves `ref`;
    `merged`, more parents after it (the retired keep chain's commit of the tips it keeps)."""
    entries: list[TreeEntry] = []
    for name, content in files.items():
        if isinstance(content, bytes):
            entries.append(TreeEntry(name, git.write_blob(content)))
        elif isinstance(content, TreeEntry):  # one already in the cache (the parent's), kept by id
            entries.append(TreeEntry(name, content.sha, content.mode))
        else:
            folder = [TreeEntry(n, git.write_blob(data)) for n, data in content.items()]
            entries.append(TreeEntry(name, git.write_tree(folder), "40000"))
    parents = [*([parent] if parent else []), *merged]
    sha = git.write_commit(git.write_tree(entries), parents, message, Signature.of(author), when)
    return RefUpdate(ref, sha, parent or ZERO)


def push(git: ForgeGit, updates: Sequence[RefUpdate], what: str, step: str | None = None) -> None:
    """CAS-push `updates` (atomically if several); `Moved` if a ref moved, `ForgeRefused` if the forge said no.

    The crash points `<what>.before-push` and `<what>.after-push` frame it.
    """
    crash_point(f"{what}.before-push", step)
    results = git.push(updates, atomic=len(updates) > 1)
    crash_point(f"{what}.after-push", step)
    if all(r.ok for r in results.values()):
        return
    moved = [r.ref for r in results.values() if r.status == "stale"]
    if moved:
        raise Moved(moved)
    refused = [r for r in results.values() if not r.ok]
    detail = "; ".join(sorted({r.detail for r in refused}))
    why = locked_why(detail)
    raise ForgeRefused(f"the forge refused {what} ({', '.join(r.ref for r in refused)}): {why}",
                       hint=refusal_hint(detail), lock=lock_named(detail))


def locked_why(detail: str) -> str:
    """Git's reason for a refusal, said as a lock when a lock file is what refused it."""
    lock = lock_named(detail)
    if lock is None:
        return detail
    ref = re.search(r"cannot lock ref '([^']+)'", detail)
    return (f"a write refused: cannot lock ref '{ref.group(1)}' because its lock file {lock} exists" if ref
            else f"a write refused because the lock file {lock} exists ({detail})")


def back_off(attempt: int, base_s: float = 0.01, cap_s: float = BACKOFF_CAP_S) -> None:
    """Sleep a random while, longer after each try, so that among racing writers someone wins each round."""
    if attempt:
        import random  # here: a write that meets no race never needs it

        time.sleep(random.uniform(0, min(base_s * 2 ** attempt, cap_s)))


def retrying(attempt: Callable[[int], T], what: str, tries: int = TRIES, base_s: float = 0.01,
             cap_s: float = BACKOFF_CAP_S) -> T:
    """Run `attempt(n)` until it does not raise `Moved` (it re-reads each time); `Busy` after `tries`. A write
    nobody waits on gives racing writers room: a longer `base_s` and `cap_s` between its tries."""
    for n in range(tries):
        back_off(n, base_s, cap_s)
        try:
            return attempt(n)
        except Moved:
            continue
    raise Busy(f"{what}: other writers kept moving it; nothing more was written", hint="run the command again")
