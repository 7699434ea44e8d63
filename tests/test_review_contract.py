"""The review port's contract, every test of it on each forge: a plain git forge (reviews are records on refs) and
(a fake) GitHub (reviews are pull requests), as huey runs one storage suite against each backend.

Each test reads what the forge holds with plain git (main, its files, parents and authors) and, for the review
itself, without the port (`side.held`); `side.written()` is everything a review change can write, so "refused
before anything is written" is checked the same way on both. People approve and merge through `side.person(name)`:
on GitHub a port with a token of their own, since no one may approve their own pull request and the desks' token
opened it. What only one forge has stays with it:
tests/test_reviews.py (the chain of records, races between read and push, junk refs), tests/test_github_forge.py
(faults, rate limits, labels and statuses)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.core.forge.base import Review
from assay.errors import IllegalReviewChange, MergeConflict, NoReview, UsageError
from tests.conftest import Forge
from tests.helpers.reviews import FORGES, Held, ReviewForge, github_forge, plain_forge

TEXT = "looks right\nbut name the file better"


@pytest.fixture(params=FORGES)
def side(request: pytest.FixtureRequest, forge: Forge, tmp_path: Path) -> Iterator[ReviewForge]:
    """One forge, plain or GitHub, with `main` holding the briefs and no review yet."""
    make = plain_forge if request.param == "plain" else github_forge
    with make(forge, tmp_path) as made:
        yield made


def opened(side: ReviewForge, head: str, brief: str = "alpha", ready: bool = True) -> Review:
    review = side.reviews.open(brief, f"assay/{brief}", "Add the feature", head)
    return side.reviews.mark_ready(brief, head) if ready else review


def said(review: Review | None) -> list[tuple[str, str]]:
    """The review's comments: who, and what."""
    assert review is not None
    return [(c.by, c.text) for c in review.record.comments]


# -- opening ------------------------------------------------------------------------------------------------

def test_open_writes_a_draft_and_opening_again_returns_it(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    first = side.reviews.open("alpha", "assay/alpha", "Add the feature", branch)
    record = first.record
    assert (record.brief, record.branch, record.title, record.state, record.base, record.head) == \
        ("alpha", "assay/alpha", "Add the feature", "draft", "main", branch)
    assert (record.merged_commit, record.approvals, record.comments) == ("", (), ())
    assert side.held("alpha") == Held("draft", branch, "")
    assert side.reviews.get("alpha") == first
    before = side.written()
    again = side.reviews.open("alpha", "assay/alpha", "Another title", branch)
    assert again == first and again.state == "draft" and side.written() == before
    assert [r.brief for r in side.reviews.list() if isinstance(r, Review)] == ["alpha"]


def test_opening_a_review_of_another_branch_is_refused(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    side.reviews.open("alpha", "assay/alpha", "Add the feature", branch)
    before = side.written()
    with pytest.raises(UsageError) as info:  # a brief's review is of its own branch, assay/<brief>
        side.reviews.open("alpha", "assay/other", "Other", branch)
    assert info.value.code == 2 and side.written() == before


# -- ready, comment, approve ----------------------------------------------------------------------------------

def test_ready_comment_and_approve(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    side.reviews.open("alpha", "assay/alpha", "Add the feature", "")
    ready = side.reviews.mark_ready("alpha", branch)
    assert ready.state == "ready" and ready.record.head == branch
    assert side.held("alpha") == Held("ready", branch, "")
    before = side.written()
    assert side.reviews.mark_ready("alpha", branch) == ready  # nothing changed, nothing written
    assert side.written() == before
    commented = side.reviews.comment("alpha", "ann", TEXT)
    assert any(TEXT in c.text for c in commented.record.comments)
    approved = side.person("bob").approve("alpha", "bob")
    assert approved.record.approvals == ("bob",)
    assert side.person("bob").approve("alpha", "bob") == approved
    got = side.reviews.get("alpha")
    assert got is not None and got.sha == approved.sha and got.record.approvals == ("bob",)
    assert got.state == "ready" and any(TEXT in c.text for c in got.record.comments)
    assert side.held("alpha") == Held("ready", branch, "")


def test_approving_again_writes_nothing(side: ReviewForge) -> None:
    opened(side, side.branch("alpha"))
    side.person("bob").approve("alpha", "bob")
    before = side.written()
    side.person("bob").approve("alpha", "bob")
    assert side.written() == before


def test_a_comment_reads_back_as_written(side: ReviewForge) -> None:
    opened(side, side.branch("alpha"))
    commented = side.reviews.comment("alpha", "ann", TEXT)
    assert said(commented) == [("ann", TEXT)]
    assert said(side.reviews.get("alpha")) == [("ann", TEXT)]


# -- merging --------------------------------------------------------------------------------------------------

def test_merge_puts_the_branch_on_main_and_records_it(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    old_main = side.main()
    opened(side, branch)
    merged = side.person("carol").merge("alpha", "carol")
    main = side.main()
    assert main == merged.record.merged_commit and main != old_main and merged.state == "merged"
    assert side.git("show", "main:feature.txt") == "the feature\n"
    assert side.git("rev-parse", "main^1", "main^2").split() == [old_main, branch]
    message = side.git("log", "-1", "--format=%B", "main")
    assert message.startswith("Merge assay/alpha: Add the feature\n")
    trailer = side.git("log", "-1", "--format=%(trailers:key=Assay-Brief,valueonly)", "main")
    assert trailer.strip() == "alpha"
    assert side.git("log", "-1", "--format=%an", "main").strip() == "carol"
    assert side.held("alpha") == Held("merged", branch, main)
    got = side.reviews.get("alpha")
    assert got is not None and got.sha == merged.sha and got.record.merged_commit == main
    with pytest.raises(IllegalReviewChange, match="already on main"):
        side.reviews.merge("alpha", "carol")
    with pytest.raises(IllegalReviewChange):
        side.person("bob").approve("alpha", "bob")
    with pytest.raises(IllegalReviewChange):
        side.reviews.close("alpha", "bob", "too late")
    assert side.main() == main
    side.reviews.comment("alpha", "bob", "thanks")  # discussion goes on after a merge
    assert side.held("alpha") == Held("merged", branch, main)
    later = side.reviews.get("alpha")
    assert later is not None and any("thanks" in c.text for c in later.record.comments)


def test_a_draft_is_not_merged(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    draft = opened(side, branch, ready=False)
    before = side.written()
    with pytest.raises(IllegalReviewChange, match="draft") as info:
        side.reviews.merge("alpha", "carol")
    assert info.value.code == 3
    assert side.written() == before and side.held("alpha") == Held("draft", branch, "")
    assert side.reviews.get("alpha") == draft


def test_a_conflicting_branch_is_refused_and_main_is_untouched(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    main = side.move_main({"feature.txt": "a different feature\n"}, "clash")
    ready = opened(side, branch)
    before = side.written()
    with pytest.raises(MergeConflict, match="does not merge cleanly into main; rebase it") as info:
        side.reviews.merge("alpha", "carol")
    assert info.value.code == 3
    assert side.main() == main and side.written() == before
    assert side.held("alpha") == Held("ready", branch, "")
    got = side.reviews.get("alpha")
    assert got is not None and got.sha == ready.sha and got.state == "ready"


def test_merge_onto_a_main_that_moved_since_the_review_was_read(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    opened(side, branch)
    side.reviews.get("alpha")
    moved = side.move_main({"other.txt": "unrelated\n"}, "unrelated")
    merged = side.reviews.merge("alpha", "carol")
    assert side.main() == merged.record.merged_commit
    assert side.git("rev-parse", "main^1", "main^2").split() == [moved, branch]
    assert side.git("show", "main:other.txt") == "unrelated\n" and side.git("show", "main:feature.txt")


# -- closing ----------------------------------------------------------------------------------------------------

def test_a_closed_review_refuses_changes_and_a_reopen_starts_a_new_draft(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    opened(side, branch)
    side.person("bob").approve("alpha", "bob")
    closed = side.reviews.close("alpha", "carol", "superseded by beta")
    assert closed.state == "closed" and side.held("alpha") == Held("closed", branch, "")
    before = side.written()
    for refused in (lambda: side.reviews.merge("alpha", "carol"), lambda: side.person("bob").approve("alpha", "bob"),
                    lambda: side.reviews.mark_ready("alpha", branch)):
        with pytest.raises(IllegalReviewChange):
            refused()
    assert side.written() == before
    reopened = side.reviews.open("alpha", "assay/alpha", "Add the feature, again", branch)
    assert reopened.record.state == "draft" and reopened.record.approvals == ()
    assert side.held("alpha") == Held("draft", branch, "")
    got = side.reviews.get("alpha")
    assert got is not None and got.sha == reopened.sha and got.state == "draft"


def test_close_records_its_reason(side: ReviewForge) -> None:
    opened(side, side.branch("alpha"))
    closed = side.reviews.close("alpha", "carol", "superseded by beta")
    assert said(closed) == [("carol", "closed: superseded by beta")]
    assert said(side.reviews.get("alpha")) == [("carol", "closed: superseded by beta")]


def test_closing_a_closed_review_again_returns_it(side: ReviewForge) -> None:
    opened(side, side.branch("alpha"))
    closed = side.reviews.close("alpha", "carol", "superseded by beta")
    before = side.written()
    assert side.reviews.close("alpha", "carol", "again") == closed
    assert side.written() == before


# -- refusals ---------------------------------------------------------------------------------------------------

def test_changes_to_a_missing_review_are_refused(side: ReviewForge) -> None:
    side.branch("beta")
    assert side.reviews.get("beta") is None and side.reviews.peek("beta") is None
    before = side.written()
    with pytest.raises(IllegalReviewChange, match="absent") as info:
        side.reviews.mark_ready("beta", "")
    assert isinstance(info.value, NoReview) and info.value.code == 2
    for change in (lambda: side.reviews.merge("beta", "carol"), lambda: side.reviews.comment("beta", "ann", "hello"),
                   lambda: side.person("bob").approve("beta", "bob"), lambda: side.reviews.close("beta", "ann", "no")):
        with pytest.raises(NoReview, match="absent"):
            change()
    assert side.held("beta") is None and side.written() == before


def test_bad_input_is_refused_before_anything_is_written(side: ReviewForge) -> None:
    branch = side.branch("alpha")
    before = side.written()
    for brief, name, title, head in (("alpha", "assay/../x", "t", branch), ("alpha", "assay/a", " ", ""),
                                     ("Bad", "b", "t", ""), ("alpha", "assay/alpha.lock", "t", "")):
        with pytest.raises(UsageError):
            side.reviews.open(brief, name, title, head)
    assert side.written() == before and side.held("alpha") is None
    opened(side, branch)
    before = side.written()
    with pytest.raises(UsageError):
        side.reviews.comment("alpha", "ann", "  ")
    assert side.written() == before


@pytest.mark.parametrize("bad", ["head", "title", "name"])
def test_bad_input_the_contract_also_refuses(side: ReviewForge, bad: str) -> None:
    branch = side.branch("alpha")
    if bad == "name":
        opened(side, branch)
    before = side.written()
    with pytest.raises(UsageError):
        if bad == "head":
            side.reviews.open("alpha", "assay/alpha", "t", "not-a-sha")
        elif bad == "title":
            side.reviews.open("alpha", "assay/alpha", " ", "")
        else:
            side.person("eve").approve("alpha", "eve <e@x>")
    assert side.written() == before


# -- reading ----------------------------------------------------------------------------------------------------

def test_peek_peek_many_kept_and_list_agree_with_get(side: ReviewForge) -> None:
    heads = {b: side.branch(b, {f"{b}.txt": f"{b}\n"}) for b in ("alpha", "beta", "gamma", "delta")}
    opened(side, heads["alpha"])
    side.reviews.merge("alpha", "carol")
    opened(side, heads["beta"], "beta")
    side.reviews.comment("beta", "ann", "a comment")
    opened(side, heads["gamma"], "gamma")
    side.reviews.close("gamma", "carol", "not needed")
    opened(side, heads["delta"], "delta", ready=False)
    states = {"alpha": "merged", "beta": "ready", "gamma": "closed", "delta": "draft"}
    got = {b: side.reviews.get(b) for b in states}
    assert {b: r.state for b, r in got.items() if r is not None} == states

    def gist(review: Review | None) -> tuple[str, str, str, str, str]:
        assert review is not None
        return review.brief, review.record.branch, review.state, review.record.head, review.sha

    assert {b: gist(side.reviews.peek(b)) for b in states} == {b: gist(r) for b, r in got.items()}
    assert {b: gist(r) for b, r in side.reviews.peek_many([*states, "epsilon"]).items()} == \
        {b: gist(r) for b, r in got.items()}
    assert side.reviews.peek_many([]) == {}
    assert {b: side.reviews.kept(b) for b in states} == got
    listed = side.reviews.list()
    assert listed == [got[b] for b in sorted(states)]
    assert side.reviews.peek("epsilon") is None and side.reviews.kept("epsilon") is None
