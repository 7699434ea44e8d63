"""The review port: draft pull requests, on a plain git forge or on GitHub.

Every implementation passes the same contract: an illegal change (approving a
merged review, merging a draft) raises `IllegalReviewChange` before anything
is written, and a merge lands on main together with its record or not at all.
"""

from __future__ import annotations

import builtins
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from assay.core.git import OBJECT_ID, RefUpdate
from assay.core.records import WORK_BRANCH_PREFIX, ReviewRecord
from assay.core.records.chain import InvalidRecord
from assay.core.records.recordtype import dataclass
from assay.errors import UsageError

Clock = Callable[[], float]


@dataclass(frozen=True)
class Review:
    """A review record and the commit (or forge object) that holds it."""

    record: ReviewRecord
    sha: str

    @property
    def brief(self) -> str:
        return self.record.brief

    @property
    def state(self) -> str:
        return self.record.state


InvalidReview = InvalidRecord  # a review ref whose record does not decode; listed, never fatal


# -- the input every review port refuses (UsageError, exit 2) before it writes anything ----------------


def review_branch(brief: str, branch: str) -> str:
    if branch != f"{WORK_BRANCH_PREFIX}{brief}":
        raise UsageError(f"invalid branch {branch!r} for a review of {brief!r}",
                         hint=f"desks use {WORK_BRANCH_PREFIX}{brief}")
    return branch


def review_title(title: str) -> str:
    if not title.strip():
        raise UsageError("a review needs a title")
    return title.strip()


def commit_id(head: str) -> str:
    if head and not OBJECT_ID.fullmatch(head):
        raise UsageError(f"{head!r} is not a full commit id")
    return head


@dataclass(frozen=True)
class Signal:
    """What a person did on a review that asks a desk to act: a review that requests changes (`changes`), or a
    comment command (`retry`, `steer`; `unknown` for an `/assay` line Assay does not know). `id` names it on the
    forge (`review:<id>`, `comment:<id>`): journaled with what it caused, it is acted on once. `allowed`: its
    author may write to the repository, as the forge says (never as the comment says); None when the forge gave
    no verdict, which leaves the signal for the next look."""

    id: str
    kind: str
    by: str
    at: str
    text: str
    allowed: bool | None


@dataclass(frozen=True)
class Said:
    """One person's comment in a review thread."""

    id: str
    by: str
    at: str
    text: str


@dataclass(frozen=True)
class Thread:
    """A review thread a person opened, not resolved, whose last word is not a desk's answer: it needs one (the
    commit that addresses it, or why nothing changes) before the review is marked ready again. `id` is its first
    comment's on the forge (a pull request review comment's id; a review note's number on a plain forge). `said`:
    the people's comments since a desk last answered (all of them before), oldest first. `allowed`: the last of
    them may write to the repository, as the forge says (None: no verdict yet)."""

    id: str
    path: str
    line: int
    said: tuple[Said, ...]
    allowed: bool | None

    @property
    def last(self) -> Said:
        return self.said[-1]

    @property
    def signal(self) -> str:
        """Its identity as a signal: one round per comment a person adds."""
        return f"thread:{self.id}:{self.last.id}"

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path and self.line else self.path or "the review"

    def view(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "line": self.line, "where": self.where, "last": self.last.id,
                "said": [{"id": s.id, "by": s.by, "at": s.at, "text": s.text} for s in self.said],
                "allowed": self.allowed}


def thread_signals(threads: Iterable[Thread]) -> builtins.list[Signal]:
    """A review thread waiting on an answer, as a signal (`thread`): it wakes a brief waiting on its review."""
    return [Signal(t.signal, "thread", t.last.by, t.last.at, f"{t.where}: {t.last.text}", t.allowed)
            for t in threads]


def note_threads(record: ReviewRecord) -> builtins.list[Thread]:
    """The review notes' threads whose last word is a person's (not a desk's answer), oldest first. Anyone who can
    push to a plain forge may write to it: every such thread needs an answer."""
    out: builtins.list[Thread] = []
    for n, opener in enumerate(record.comments, 1):
        if opener.thread != n:
            continue
        members = [(i, c) for i, c in enumerate(record.comments, 1) if c.thread == n]
        answered = max((i for i, c in members if c.answer), default=0)
        said = tuple(Said(str(i), c.by, c.at, c.text) for i, c in members if i > answered and not c.answer)
        if said:
            out.append(Thread(str(n), opener.path, opener.line, said, True))
    return out


ANSWER = re.compile(r"<!-- assay:answer:(?P<key>[0-9a-f]+) -->")


def answer_text(head: str, fixed: str, reason: str) -> str:
    """A desk's reply to a thread: the commit that addresses it, or why nothing changes."""
    return f"Addressed in {head}: {fixed}" if fixed else f"Not changed: {reason}"


@dataclass(frozen=True)
class Checks:
    """The checks on a commit: finished when there is at least one and none is pending or running."""

    head: str
    finished: bool
    summary: str  # e.g. "2 passed, 1 failed (lint)"


COMMAND = re.compile(r"^/assay[ \t]+(?P<verb>[a-z-]+)(?:[ \t]+(?P<rest>.*))?$", re.M | re.S)
COMMANDS = ("retry", "steer")
PREFIX = "/assay"


def command_of(body: str) -> tuple[str, str] | None:
    """The comment command a body starts with (`/assay retry`, `/assay steer TEXT`), as (kind, text); `unknown`
    for an `/assay` verb Assay does not know, or `steer` with no text; None for an ordinary comment.

    A command is a body that begins with `/assay` in any case, nothing before it: exactly the comments for which
    `desk.yml`'s `startsWith(github.event.comment.body, '/assay')` (case-insensitive) starts a job."""
    if len(body) < len(PREFIX) or any(a.upper() != b for a, b in zip(body, PREFIX.upper(), strict=False)):
        return None
    first = body.strip()
    m = COMMAND.match(first)
    if m is None:
        return ("unknown", first.splitlines()[0]) if first.splitlines()[0].strip() != "/assay" else ("unknown", "")
    verb, rest = m["verb"], (m["rest"] or "").strip()
    if verb not in COMMANDS or (verb == "steer" and not rest):
        return "unknown", first.splitlines()[0]
    return verb, rest


def person_name(by: str) -> str:
    if not by.strip() or any(c in by for c in "<>\n\r\0"):
        raise UsageError(f"invalid name {by!r}", hint="a name is non-empty text without <, > or line breaks")
    return by





class Reviews(Protocol):
    """Reviews of work branches, one per brief."""

    def get(self, brief: str) -> Review | None: ...

    def peek(self, brief: str) -> Review | None:
        """The review's state and head; comments and approvals may be left out (cheaper where the forge
        charges for reads)."""
        ...

    def peek_many(self, briefs: builtins.list[str], tips: Mapping[str, str] | None = None) -> dict[str, Review]:
        """`peek` of each brief that has a review, in as few reads as the forge allows; a junk review is left
        out (its `peek` says what is wrong). `tips`: the review refs' tips as a scan just read them, where
        reviews are refs (no read of the refs then)."""
        ...

    def kept(self, brief: str) -> Review | None:
        """The review, or the review as it was when its brief was retired (read-only)."""
        ...

    def list(self, tips: Mapping[str, str] | None = None) -> builtins.list[Review | InvalidReview]:
        """Every review (junk listed as invalid). `tips`: the review refs' tips as a listing just read them, where
        reviews are refs (no read of the refs then)."""
        ...

    def hold(self, keepalive: Callable[[], None], max_wait_s: float,
             every_s: float = 30.0) -> AbstractContextManager[object]:
        """While a call waits (a rate limit), call `keepalive` (a claim's renewal, which raises when the claim is
        lost) every `every_s` (a desk's heartbeat: the sweep calls a claim not renewed for three overdue) and
        once before writing, and wait no longer than `max_wait_s` in all: until the `with` block it opens ends,
        when what was held before is held again (a brief's run: a wait after it, for another brief, renews
        nothing of this one), or for good, called alone. A forge whose calls never wait ignores it."""
        ...

    def open(self, brief: str, branch: str, title: str, head: str) -> Review:
        """Open a draft; if a review of `branch` exists and is not closed, return it unchanged."""
        ...

    def mark_ready(self, brief: str, head: str) -> Review: ...

    def open_update(self, brief: str, branch: str, title: str, head: str) -> RefUpdate | None:
        """Where reviews are refs: the unpushed update opening the draft (a desk pushes it with its journal),
        None when it is open already; None where reviews are API objects (`open` makes them)."""
        ...

    def ready_update(self, brief: str, head: str) -> RefUpdate | None:
        """Where reviews are refs: the unpushed update marking it ready (a desk pushes it fenced)."""
        ...

    def comment(self, brief: str, by: str, text: str) -> Review: ...

    def approve(self, brief: str, by: str) -> Review: ...

    def merge(self, brief: str, by: str) -> Review:
        """Merge the branch's tip on the forge into main; requires state ready, refuses conflicts. Where main
        requires a merge queue, the review is queued instead (`enqueue`) and merges when its checks pass."""
        ...

    def close(self, brief: str, by: str, reason: str) -> Review: ...

    def merge_queue(self) -> bool:
        """Whether main requires a merge queue (on GitHub, a ruleset's); False where the forge has none."""
        ...

    def enqueue(self, brief: str, by: str) -> Review:
        """Put the ready review in main's merge queue at its head (once: a queued one is left queued); it merges
        when its checks pass on the queue's merge group. UsageError where there is no merge queue."""
        ...

    @property
    def refs_backed(self) -> bool:
        """Reviews are refs on the forge (marked ready by `ready_update` inside a journal push), or API
        objects (marked ready by `mark_ready` after the intent is journaled)."""
        ...

    def label(self, brief: str, state: str, desk: str) -> None:
        """Show the review's state and desk where the forge has labels (nothing elsewhere)."""
        ...

    def post_statuses(self, brief: str, head: str, rows: builtins.list[dict[str, Any]], epoch: int) -> None:
        """Post each verify row's evidence as a commit status where the forge has them (nothing elsewhere)."""
        ...

    def link(self, review: Review) -> str | None:
        """The review's page on the forge's web host (a pull request's address), or None where it has none."""
        ...

    def history(self, brief: str, heads: Iterable[str] = ()) -> dict[str, Any] | None:
        """What an audit reads of a review that is an API object (a pull request): its writes and events, each
        with the forge's time and author; None where reviews are refs (their chain is the history)."""
        ...

    def signals(self, brief: str) -> builtins.list[Signal]:
        """Reviews requesting changes, comment commands and review threads waiting on an answer on the brief's
        review, oldest first, with whether each author may write to the repository (where reviews are refs,
        anyone who can push may: only threads)."""
        ...

    def threads(self, brief: str) -> builtins.list[Thread]:
        """The review threads on the brief's review that need a desk's answer (see `Thread`), oldest first: a
        person opened them, they are published (a review still pending is not) and not resolved."""
        ...

    def answer(self, brief: str, thread: str, by: str, text: str, key: str) -> str:
        """Reply to `thread` as desk `by`, once per `key` (a reply with that key there already is not posted
        again); the reply's id."""
        ...

    def answer_update(self, brief: str, thread: str, by: str, text: str, key: str) -> RefUpdate | None:
        """Where reviews are refs: `answer`'s update, unpushed (a desk pushes it with its journal, fenced); None
        when the reply with `key` is there already."""
        ...

    def note(self, brief: str, by: str, text: str, path: str = "", line: int = 0, reply_to: str = "") -> str:
        """A person's review note: a new thread (on `path` and `line` where given) or, with `reply_to`, a reply
        in that thread; the note's id."""
        ...

    def checks(self, brief: str) -> Checks | None:
        """The checks on the head of the brief's review; None where the forge has no checks or no review."""
        ...

    def closer(self, brief: str) -> str:
        """Who closed the brief's review, as the forge says ("" where unknown)."""
        ...

    def brief_of(self, number: int) -> str | None:
        """The brief whose review is the forge's pull request `number` (None: not an Assay one, or none)."""
        ...

    def counts(self) -> dict[str, int]:
        """Requests made to the forge's API so far (`api`) and the answers among them that cost no quota
        (`api-304`); empty where reviews are refs (git's round trips are counted by the git port)."""
        ...


# -- verify evidence as one commit status (GitHub's; a plain forge keeps it in the journal only) ------------

VERIFY_CONTEXT = "assay/verify"  # one status a head for all its verify rows: one content-creating request


def verify_status(rows: Iterable[Mapping[str, Any]]) -> tuple[str, str]:
    """The state and description (without its epoch) of the one status saying how a head's verify rows went:
    `success` only when every row passed, and a digest of each row's evidence, so the audit can tell this status
    from one made of other evidence. Rows are the last run of each, as the journal has them."""
    last = {str(r["row"]): r for r in rows}
    failed = sorted(name for name, r in last.items() if not r.get("passed"))
    lines = "".join(f"{name}\t{bool(r.get('passed'))}\t{r.get('exit_code')}\t{r.get('output_sha256')}\n"
                    for name, r in sorted(last.items()))
    digest = hashlib.sha256(lines.encode()).hexdigest()[:12]
    passed = len(last) - len(failed)
    said = f"{passed} of {len(last)} rows passed" + (f" (failed: {', '.join(failed)})" if failed else "")
    if len(said) > 96:
        said = said[:93] + "...)"
    return ("failure" if failed or not last else "success"), f"{said}; evidence {digest}"
