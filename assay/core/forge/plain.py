"""Reviews on any git forge: the only writer of `refs/assay/reviews/*`.

A review is a commit chain that is never deleted: each change is a new commit
on the tip, pushed with a lease on that tip; a stale push re-reads and
re-applies. `review_transition` owns the table, so an illegal change is refused
before anything is pushed. A merge moves main and the review ref in one atomic
push, so main never holds a merge the review does not record, nor the reverse.
"""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from assay.core import retired
from assay.core.forge.base import (
    Checks,
    Clock,
    InvalidReview,
    Review,
    Signal,
    Thread,
    commit_id,
    note_threads,
    person_name,
    review_branch,
    review_title,
    thread_signals,
)
from assay.core.git import ForgeGit, RefUpdate, Signature
from assay.core.records import (
    REVIEWS_PREFIX,
    ReviewComment,
    ReviewRecord,
    chain,
    decode_review,
    review_ref,
    utc_now_iso,
    validate_brief_id,
)
from assay.core.records.recordtype import dataclass
from assay.errors import IllegalReviewChange, MergeConflict, NoReview, UsageError

# action -> the states it may start from (None: no review yet)
ACTIONS: dict[str, frozenset[str | None]] = {
    "open": frozenset({None, "closed", "draft", "ready", "merged"}),
    "mark_ready": frozenset({"draft", "ready"}),
    "comment": frozenset({"draft", "ready", "merged", "closed"}),
    "approve": frozenset({"draft", "ready"}),
    "merge": frozenset({"ready"}),
    "close": frozenset({"draft", "ready", "closed"}),
}
_WHY = {
    ("merge", "draft"): "mark it ready first",
    ("merge", "merged"): "it is already on main",
    ("mark_ready", "absent"): "open it first",
}


def check_action(current: ReviewRecord | None, action: str, brief: str) -> None:
    """Raise IllegalReviewChange if `action` may not start from `current`'s state."""
    if action not in ACTIONS:
        raise UsageError(f"unknown review action {action!r}")
    state = current.state if current else None
    if state is None and None not in ACTIONS[action]:
        raise NoReview(brief, action.replace("_", " "))
    if state not in ACTIONS[action]:
        shown = state or "absent"
        raise IllegalReviewChange(brief, action.replace("_", " "), shown, _WHY.get((action, shown), ""))


def review_transition(current: ReviewRecord | None, action: str, brief: str, *, at: str, by: str = "",
                      text: str = "", branch: str = "", title: str = "", head: str = "",
                      merged_commit: str = "", thread: str = "", path: str = "", line: str = "",
                      answer: str = "") -> ReviewRecord:
    """The one transition table. Returns the next record, `current` itself when nothing changes. A comment with
    `thread` is a review note: `new` opens a thread (on `path`, `line`), a number replies in that thread, and
    `answer` marks a desk's reply (posted once per key)."""
    check_action(current, action, brief)
    if action == "open":
        if current is not None and current.state != "closed":
            if current.branch != branch:
                raise IllegalReviewChange(brief, "open", current.state, f"its review is of {current.branch}")
            return current
        return ReviewRecord(brief=brief, branch=branch, title=title, state="draft", opened_at=at, at=at, head=head,
                            comments=current.comments if current else ())
    assert current is not None
    waiting = note_threads(current) if action in ("mark_ready", "merge") else []
    if waiting:  # every review note answered first: a note that lands before the push is never skipped
        raise IllegalReviewChange(brief, action.replace("_", "-"), current.state,
                                  f"review thread {waiting[0].id} waits on an answer from its desk")
    if action == "mark_ready":
        if current.state == "ready" and head in ("", current.head):
            return current
        return current.but(state="ready", head=head or current.head, at=at)
    if action == "comment":
        if answer and any(c.answer == answer for c in current.comments):
            return current
        return current.but(comments=(*current.comments, _note(current, by, at, text, thread, path, line, answer)),
                           at=at)
    if action == "approve":
        if by in current.approvals:
            return current
        return current.but(approvals=(*current.approvals, by), at=at)
    if action == "merge":
        return current.but(state="merged", head=head, merged_commit=merged_commit, at=at)
    if current.state == "closed":  # close
        return current
    comments = (*current.comments, ReviewComment(by, at, f"closed: {text}")) if text else current.comments
    return current.but(state="closed", comments=comments, at=at)


def _note(current: ReviewRecord, by: str, at: str, text: str, thread: str, path: str, line: str,
          answer: str) -> ReviewComment:
    if not thread:
        return ReviewComment(by, at, text)
    n = len(current.comments) + 1
    if thread == "new":
        if answer:
            raise UsageError("a desk's answer replies in a thread; it opens none")
        return ReviewComment(by, at, text, thread=n, path=path, line=int(line or 0))
    opened = [i for i, c in enumerate(current.comments, 1) if c.thread == i]
    if not thread.isdigit() or int(thread) not in opened:
        raise UsageError(f"no review thread {thread} on the review of {current.brief!r}",
                         hint=f"its threads: {', '.join(map(str, opened))}" if opened
                         else "open one with `assay review note BRIEF TEXT`")
    return ReviewComment(by, at, text, thread=int(thread), answer=answer)


@dataclass(frozen=True)
class PreparedMerge:
    """A review's merge into its base, built in the cache and not pushed (`PlainReviews.prepare_merge`)."""

    brief: str
    main: str  # the base's tip it merges into
    head: str  # the review's head
    commit: str  # main after the merge
    updates: list[RefUpdate]  # the base (unless the head is in it already), then the review ref
    after: ReviewRecord


class PlainReviews:
    """Reviews kept in `refs/assay/reviews/<brief>` on the forge. Receives its git port and clock."""

    def __init__(self, git: ForgeGit, clock: Clock = time.time) -> None:
        self.git = git
        self.clock = clock
        self._peeked: dict[tuple[str, str], Review] = {}  # what `peek_many` read last, by (ref, tip): a desk's
        # pass looks at the reviews of its waiting briefs each time, most of them unchanged

    # -- reading --------------------------------------------------------------------

    def get(self, brief: str) -> Review | None:
        ref = review_ref(brief)
        tip = self.git.ls_remote(ref).get(ref)
        if not tip:
            return None
        return Review(chain.read_one(self.git, ref, tip, REVIEWS_PREFIX, "review.json", decode_review), tip)

    def peek(self, brief: str) -> Review | None:
        return self.get(brief)

    def peek_many(self, briefs: builtins.list[str], tips: Mapping[str, str] | None = None) -> dict[str, Review]:
        refs = {review_ref(b) for b in briefs}
        if not refs:
            return {}
        found = tips if tips is not None else self.git.ls_remote(*sorted(refs))  # one read for all of them
        wanted = {r: sha for r, sha in found.items() if r in refs}
        known = {key: self._peeked[key] for key in wanted.items() if key in self._peeked}
        good, _ = chain.read_tips(self.git, {r: sha for r, sha in wanted.items() if (r, sha) not in known},
                                  REVIEWS_PREFIX, "review.json", decode_review)  # a record at a commit never changes
        self._peeked = known | {(review_ref(record.brief), sha): Review(record, sha) for record, sha in good}
        return {review.record.brief: review for review in self._peeked.values()}

    def kept(self, brief: str) -> Review | None:
        """The review, or the review as it was when its brief was retired (read-only)."""
        ref = review_ref(brief)
        tip = retired.tip_of(self.git, ref)
        if not tip:
            return None
        return Review(chain.read_one(self.git, ref, tip, REVIEWS_PREFIX, "review.json", decode_review), tip)

    def hold(self, keepalive: Callable[[], None], max_wait_s: float,
             every_s: float = 30.0) -> contextlib.AbstractContextManager[object]:
        """Reviews on a plain forge are refs: their writes never wait."""
        return contextlib.nullcontext()

    def list(self, tips: Mapping[str, str] | None = None) -> builtins.list[Review | InvalidReview]:
        """Every review tip on the forge, by ref (junk listed as invalid): one ls-remote (none given `tips`), one
        fetch, one cat-file."""
        listed = {r: s for r, s in tips.items() if r.startswith(REVIEWS_PREFIX)} if tips is not None else \
            self.git.ls_remote(REVIEWS_PREFIX + "*")
        good, bad = chain.read_tips(self.git, listed, REVIEWS_PREFIX, "review.json", decode_review)
        found: builtins.list[Review | InvalidReview] = [Review(record, sha) for record, sha in good]
        return sorted([*found, *bad], key=lambda r: r.ref if isinstance(r, InvalidReview) else review_ref(r.brief))

    @property
    def refs_backed(self) -> bool:
        return True

    def label(self, brief: str, state: str, desk: str) -> None:
        """A plain forge has no labels: the state is the review record's, the desk the claim's."""

    def post_statuses(self, brief: str, head: str, rows: builtins.list[dict[str, Any]], epoch: int) -> None:
        """A plain forge has no commit statuses: verify evidence is in the journal."""

    def link(self, review: Review) -> str | None:
        """A plain forge has no web pages."""
        return None

    def history(self, brief: str, heads: Iterable[str] = ()) -> dict[str, Any] | None:
        """A review's history is its chain of commits, which the audit reads as refs."""
        return None

    def signals(self, brief: str) -> builtins.list[Signal]:
        """Review threads waiting on an answer; people act through the CLI otherwise (`assay steer`, `assay
        wake`)."""
        return thread_signals(self.threads(brief))

    def threads(self, brief: str) -> builtins.list[Thread]:
        review = self.get(brief)
        return note_threads(review.record) if review is not None else []

    def answer(self, brief: str, thread: str, by: str, text: str, key: str) -> str:
        review = self._change(brief, "comment", by, text=text, thread=thread, answer=key)
        return str(next(i for i, c in enumerate(review.record.comments, 1) if c.answer == key))

    def answer_update(self, brief: str, thread: str, by: str, text: str, key: str) -> RefUpdate | None:
        person_name(by)
        current = self.get(brief)
        before = current.record if current else None
        record = review_transition(before, "comment", brief, at=self._now(), by=by, text=text, thread=thread,
                                   answer=key)
        if current is None or record is before:
            return None
        return self._prepare(current, record, "comment", by, text)

    def note(self, brief: str, by: str, text: str, path: str = "", line: int = 0, reply_to: str = "") -> str:
        if not text.strip():
            raise UsageError("a review note needs text")
        if reply_to and (path or line):
            raise UsageError("a reply stays on its thread's file and line", hint="leave out --on with --reply")
        review = self._change(brief, "comment", by, text=text, thread=reply_to or "new", path=path,
                              line=str(line or ""))
        return str(len(review.record.comments))

    def checks(self, brief: str) -> Checks | None:
        return None

    def brief_of(self, number: int) -> str | None:
        return None  # reviews here are refs named by their brief, not numbered

    def closer(self, brief: str) -> str:
        review = self.get(brief)
        return review.record.comments[-1].by if review and review.state == "closed" and review.record.comments \
            else ""

    def counts(self) -> dict[str, int]:
        return {}

    # -- changes --------------------------------------------------------------------

    def open(self, brief: str, branch: str, title: str, head: str) -> Review:
        validate_brief_id(brief)
        return self._change(brief, "open", "assay", branch=review_branch(brief, branch), title=review_title(title),
                            head=commit_id(head))

    def mark_ready(self, brief: str, head: str) -> Review:
        return self._change(brief, "mark_ready", "assay", head=commit_id(head))

    def open_update(self, brief: str, branch: str, title: str, head: str) -> RefUpdate | None:
        validate_brief_id(brief)
        current = self.get(brief)
        before = current.record if current else None
        record = review_transition(before, "open", brief, at=self._now(), by="assay",
                                   branch=review_branch(brief, branch), title=review_title(title), head=commit_id(head))
        if current is not None and record is before:
            return None
        return self._prepare(current, record, "open", "assay")

    def ready_update(self, brief: str, head: str) -> RefUpdate | None:
        """The ref update that marks the review ready, unpushed: a desk pushes it with its journal, fenced.

        None when the review is ready at `head` already.
        """
        current = self.get(brief)
        before = current.record if current else None
        record = review_transition(before, "mark_ready", brief, at=self._now(), by="assay", head=commit_id(head))
        if current is not None and record is before:
            return None
        return self._prepare(current, record, "mark_ready", "assay")

    def comment(self, brief: str, by: str, text: str) -> Review:
        if not text.strip():
            raise UsageError("a comment needs text")
        return self._change(brief, "comment", by, text=text)

    def approve(self, brief: str, by: str) -> Review:
        return self._change(brief, "approve", by)

    def close(self, brief: str, by: str, reason: str) -> Review:
        return self._change(brief, "close", by, text=reason.strip())

    def merge_queue(self) -> bool:
        return False  # `assay land` verifies each merge on the tip it lands on instead

    def enqueue(self, brief: str, by: str) -> Review:
        raise UsageError("a plain forge has no merge queue", hint="`assay land` merges ready reviews one at a time, "
                                                                  "each verified on the main it lands on")

    def merge(self, brief: str, by: str) -> Review:
        person_name(by)
        return chain.retrying(lambda _: self._merge_once(brief, by), f"merging {brief!r}")

    def _merge_once(self, brief: str, by: str) -> Review:
        """One try: main and the review ref in one atomic push, under leases on both."""
        return self.push_merge(self.prepare_merge(brief, by))

    def prepare_merge(self, brief: str, by: str) -> PreparedMerge:
        """The merge of a ready review into its base's tip, written to the cache, not pushed: the merge commit
        (main itself when the branch is in it already) and the updates of main and the review ref, under leases
        on what was read. MergeConflict if it does not merge cleanly; `chain.Moved` if the review moved."""
        ref = review_ref(brief)
        current = self.get(brief)
        check_action(current.record if current else None, "merge", brief)
        assert current is not None
        record = current.record
        base_ref, branch_ref = f"refs/heads/{record.base}", f"refs/heads/{record.branch}"
        refs = self.git.ls_remote(ref, base_ref, branch_ref)
        main, tip = refs.get(base_ref), refs.get(branch_ref)
        if refs.get(ref) != current.sha:
            raise chain.Moved([ref])  # the review changed between our two reads: look again
        if not main or not tip:
            missing = base_ref if not main else branch_ref
            raise UsageError(f"cannot merge the review of {brief!r}: the forge has no {missing}",
                             hint=f"push {record.branch} to the forge first" if main else "")
        if record.head and tip != record.head:
            raise IllegalReviewChange(brief, "merge", record.state,
                                      f"{record.branch} is at {tip[:10]}, not the {record.head[:10]} that was "
                                      "marked ready; verify it and mark it ready again")
        self.git.ensure_objects({base_ref: main, branch_ref: tip})
        updates: list[RefUpdate] = []
        if self.git.is_ancestor(tip, main):
            merged = main  # nothing to merge: the branch is already in main
        else:
            tree = self.git.merge_tree(main, tip)
            if tree is None:
                raise MergeConflict(brief, record.branch, record.base)
            message = f"Merge {record.branch}: {record.title}\n\nAssay-Brief: {brief}\n"
            merged = self.git.write_commit(tree, [main, tip], message, Signature.of(by), self.clock())
            updates.append(RefUpdate(base_ref, merged, main))
        after = review_transition(record, "merge", brief, at=self._now(), by=by, head=tip, merged_commit=merged)
        return PreparedMerge(brief, main, tip, merged, [*updates, self._prepare(current, after, "merge", by)], after)

    def push_merge(self, merge: PreparedMerge, riders: Sequence[RefUpdate] = ()) -> Review:
        """Push a prepared merge, with `riders` (a lander's claim renewal) in the same atomic push; `chain.Moved`
        if main or the review moved since it was prepared: nothing is written then."""
        chain.push(self.git, [*merge.updates, *riders], "merge")
        return Review(merge.after, merge.updates[-1].new)

    def _change(self, brief: str, action: str, by: str, **fields: str) -> Review:
        validate_brief_id(brief)
        person_name(by)

        def attempt(_: int) -> Review:
            current = self.get(brief)
            before = current.record if current else None
            record = review_transition(before, action, brief, at=self._now(), by=by, **fields)
            if current is not None and record is before:
                return current
            update = self._prepare(current, record, action, by, fields.get("text", ""))
            chain.push(self.git, [update], "review", action)
            return Review(record, update.new)

        return chain.retrying(attempt, f"the review of {brief!r} ({action.replace('_', ' ')})")

    def _prepare(self, current: Review | None, record: ReviewRecord, action: str, by: str,
                 note: str = "") -> RefUpdate:
        message = f"assay: review {action.replace('_', '-')} {record.brief} -> {record.state}"
        if note:
            message += f"\n\n{note}"
        return chain.commit(self.git, review_ref(record.brief), current.sha if current else None,
                            {"review.json": record.encode()}, message, by, self.clock())

    def _now(self) -> str:
        return utc_now_iso(self.clock())
