"""Reviews on a plain git forge, what only it has: a review is a chain of records on refs/assay/reviews/<brief>,
one commit per change, each by who made it; races between read and push; junk on review refs; the record's format.
Read back with plain git from a real bare forge. The contract itself runs on both forges in
tests/test_review_contract.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from itertools import count
from pathlib import Path

import pytest

from assay.core.forge.base import InvalidReview, Review
from assay.core.forge.plain import PlainReviews
from assay.core.git import ForgeGit, PushResult, RefUpdate
from assay.core.records import ReviewComment, ReviewRecord, decode_review
from assay.errors import Conflict, IllegalReviewChange, MergeConflict, RecordInvalid
from tests.conftest import Forge, git

REF = "refs/assay/reviews/alpha"
BRANCH = "refs/heads/assay/alpha"


class InterleavedGit(ForgeGit):
    """The real git port, with another writer's action slipped in before our next push."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.before_push: Callable[[], None] | None = None
        self.pushes = 0

    def push(self, updates: Sequence[RefUpdate], atomic: bool = False) -> dict[str, PushResult]:
        self.pushes += 1
        hook, self.before_push = self.before_push, None
        if hook is not None:
            hook()
        return super().push(updates, atomic)


@pytest.fixture
def port(forge: Forge) -> Iterator[InterleavedGit]:
    git_port = InterleavedGit(forge.url)
    yield git_port
    git_port.close()


@pytest.fixture
def reviews(port: InterleavedGit) -> PlainReviews:
    ticks = count()
    return PlainReviews(port, clock=lambda: 1_767_225_600.0 + next(ticks))


def commit_on(forge: Forge, where: Path, ref: str, files: dict[str, str], message: str) -> str:
    """Commit `files` on top of `ref` of the forge in a fresh clone and push it there; returns the commit."""
    if not where.exists():
        git("clone", "-q", forge.url, str(where))
    git("fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*", cwd=where)
    start = "origin/" + ref.removeprefix("refs/heads/")
    if not git("rev-parse", "--verify", "-q", start, cwd=where, check=False).strip():
        start = "origin/main"
    git("checkout", "-q", "--detach", start, cwd=where)
    for name, text in files.items():
        (where / name).write_text(text)
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", message, cwd=where)
    git("push", "-q", "origin", f"HEAD:{ref}", cwd=where)
    return git("rev-parse", "HEAD", cwd=where).strip()


@pytest.fixture
def branch(forge: Forge, tmp_path: Path) -> str:
    return commit_on(forge, tmp_path / "desk", BRANCH, {"feature.txt": "the feature\n"}, "add the feature")


def review_json(forge: Forge, rev: str = REF) -> dict[str, object]:
    data: dict[str, object] = json.loads(git("--git-dir", str(forge.path), "show", f"{rev}:review.json"))
    return data


def chain(forge: Forge, ref: str = REF) -> list[dict[str, object]]:
    shas = git("--git-dir", str(forge.path), "rev-list", "--reverse", ref).split()
    return [review_json(forge, sha) for sha in shas]


def opened(reviews: PlainReviews, head: str, ready: bool = True) -> Review:
    review = reviews.open("alpha", "assay/alpha", "Add the feature", head)
    return reviews.mark_ready("alpha", head) if ready else review


def test_a_review_is_one_sorted_json_record_on_its_ref(forge: Forge, reviews: PlainReviews, branch: str) -> None:
    """The record itself: review.json (keys sorted) in a commit on refs/assay/reviews/<brief>, whose tip is the
    review's sha; opening again adds no commit."""
    first = reviews.open("alpha", "assay/alpha", "Add the feature", branch)
    on_forge = review_json(forge)
    assert forge.tip(REF) == first.sha
    assert on_forge == {"v": 1, "brief": "alpha", "branch": "assay/alpha", "title": "Add the feature",
                        "state": "draft", "base": "main", "head": branch, "merged_commit": "", "approvals": [],
                        "comments": [], "opened_at": "2026-01-01T00:00:00Z", "at": "2026-01-01T00:00:00Z"}
    raw = git("--git-dir", str(forge.path), "show", f"{REF}:review.json")
    assert list(json.loads(raw)) == sorted(on_forge)  # keys sorted on the forge
    again = reviews.open("alpha", "assay/alpha", "Another title", branch)
    assert again == first and forge.tip(REF) == first.sha and len(chain(forge)) == 1


def test_ready_comment_and_approve_each_add_a_commit_by_its_author(forge: Forge, reviews: PlainReviews,
                                                                   branch: str) -> None:
    reviews.open("alpha", "assay/alpha", "Add the feature", "")
    ready = reviews.mark_ready("alpha", branch)
    assert reviews.mark_ready("alpha", branch) == ready  # nothing changed, nothing written
    reviews.comment("alpha", "ann", "looks right\nbut name the file better")
    approved = reviews.approve("alpha", "bob")
    assert reviews.approve("alpha", "bob") == approved
    states = [(c["state"], c["head"], c["approvals"]) for c in chain(forge)]
    assert states == [("draft", "", []), ("ready", branch, []), ("ready", branch, []), ("ready", branch, ["bob"])]
    tip = review_json(forge)
    text = "looks right\nbut name the file better"
    assert tip["comments"] == [{"by": "ann", "at": chain(forge)[2]["at"], "text": text}]
    authors = git("--git-dir", str(forge.path), "log", "--format=%an", REF).split()
    assert authors == ["bob", "ann", "assay", "assay"]
    got = reviews.get("alpha")
    assert got is not None and got.sha == forge.tip(REF) and got.record.approvals == ("bob",)


def test_a_merge_is_one_commit_on_main_and_one_on_the_review(forge: Forge, reviews: PlainReviews,
                                                               branch: str) -> None:
    opened(reviews, branch)
    before = git("--git-dir", str(forge.path), "rev-list", "--count", "main").strip()
    merged = reviews.merge("alpha", "carol")
    assert forge.tip(REF) == merged.sha
    on_forge = review_json(forge)
    assert on_forge["state"] == "merged" and on_forge["merged_commit"] == forge.tip("refs/heads/main")
    assert [c["state"] for c in chain(forge)] == ["draft", "ready", "merged"]
    assert int(git("--git-dir", str(forge.path), "rev-list", "--count", "main")) == int(before) + 2  # merge + branch


def test_main_moving_between_read_and_push_is_re_read_and_merged(forge: Forge, reviews: PlainReviews,
                                                                 port: InterleavedGit, branch: str,
                                                                 tmp_path: Path) -> None:
    opened(reviews, branch)
    racer: list[str] = []
    port.before_push = lambda: racer.append(
        commit_on(forge, tmp_path / "racer", "refs/heads/main", {"other.txt": "raced in\n"}, "raced"))
    pushes = port.pushes
    merged = reviews.merge("alpha", "carol")
    assert port.pushes - pushes == 2  # the first push was stale and nothing of it landed
    main = forge.tip("refs/heads/main")
    assert main == merged.record.merged_commit and review_json(forge)["merged_commit"] == main
    assert git("--git-dir", str(forge.path), "rev-parse", "main^1", "main^2").split() == [racer[0], branch]
    assert git("--git-dir", str(forge.path), "show", "main:other.txt") == "raced in\n"
    assert [c["state"] for c in chain(forge)] == ["draft", "ready", "merged"]


def test_a_review_changed_between_read_and_push_keeps_both_changes(forge: Forge, reviews: PlainReviews,
                                                                   port: InterleavedGit, branch: str) -> None:
    opened(reviews, branch)
    other = PlainReviews(ForgeGit(forge.url))

    def interleave() -> None:
        other.comment("alpha", "ann", "first")

    port.before_push = interleave
    reviews.comment("alpha", "bob", "second")
    got = reviews.get("alpha")
    assert got is not None and got.sha == forge.tip(REF)
    assert [(c.by, c.text) for c in got.record.comments] == [("ann", "first"), ("bob", "second")]
    assert [len(c["comments"]) for c in chain(forge)] == [0, 0, 1, 2]  # type: ignore[arg-type]
    other.git.close()


def test_close_and_a_reopen_continue_the_chain(forge: Forge, reviews: PlainReviews, branch: str) -> None:
    opened(reviews, branch)
    reviews.approve("alpha", "bob")
    closed = reviews.close("alpha", "carol", "superseded by beta")
    assert reviews.close("alpha", "carol", "again") == closed
    on_forge = review_json(forge)
    assert on_forge["state"] == "closed" and forge.tip(REF) == closed.sha
    assert on_forge["comments"] == [{"by": "carol", "at": on_forge["at"], "text": "closed: superseded by beta"}]
    reopened = reviews.open("alpha", "assay/alpha", "Add the feature, again", branch)
    assert reopened.record.state == "draft" and reopened.record.approvals == ()
    assert [c["state"] for c in chain(forge)] == ["draft", "ready", "ready", "closed", "draft"]


def push_junk(forge: Forge, brief: str, content: bytes) -> None:
    forge.write_record(f"refs/assay/reviews/{brief}", "review.json", content)


def test_junk_reviews_are_listed_as_invalid(forge: Forge, reviews: PlainReviews, branch: str) -> None:
    opened(reviews, branch)
    push_junk(forge, "beta", b"not json")
    push_junk(forge, "gamma", b'{"v": 3, "brief": "gamma"}')
    listed = reviews.list()
    assert [isinstance(r, InvalidReview) for r in listed] == [False, True, True]
    problems = {r.ref: r.problem for r in listed if isinstance(r, InvalidReview)}
    assert "not JSON" in problems["refs/assay/reviews/beta"]
    assert "format version 3" in problems["refs/assay/reviews/gamma"]
    before = forge.tip("refs/assay/reviews/beta")
    with pytest.raises(RecordInvalid, match="refs/assay/reviews/beta"):
        reviews.comment("beta", "ann", "hello")
    assert forge.tip("refs/assay/reviews/beta") == before


def test_a_pass_over_unchanged_reviews_reads_none_of_them_again(forge: Forge, reviews: PlainReviews,
                                                                  branch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a desk's pass reads of its waiting briefs' reviews: a review whose tip did not move is what was read
    before (a record at a commit never changes); a moved one, and junk, are read again."""
    from assay.core.records import chain as chains

    first = opened(reviews, branch, ready=False)
    push_junk(forge, "beta", b"not json")
    read: list[list[str]] = []
    real = chains.read_tips

    def counted(git: ForgeGit, tips: dict[str, str], *args: object) -> object:
        read.append(sorted(tips))
        return real(git, tips, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(chains, "read_tips", counted)
    assert reviews.peek_many(["alpha", "beta"]) == {"alpha": first}
    assert reviews.peek_many(["alpha", "beta"]) == {"alpha": first}
    assert read == [[REF, "refs/assay/reviews/beta"], ["refs/assay/reviews/beta"]]
    ready = reviews.mark_ready("alpha", branch)
    assert reviews.peek_many(["alpha"]) == {"alpha": ready} and read[-1] == [REF]
    assert reviews.peek_many(["beta"]) == {}  # what is not asked for is not answered


# -- the record ---------------------------------------------------------------------------

GOOD = ReviewRecord(brief="alpha", branch="assay/alpha", title="T", state="ready", opened_at="x", at="y",
                    head="a" * 40, approvals=("bob",), comments=(ReviewComment("ann", "x", "hi"),))


def test_a_review_record_round_trips() -> None:
    assert decode_review(GOOD.encode(), REF) == GOOD


@pytest.mark.parametrize("change, problem", [
    ({"extra": 1}, "unknown fields"),
    ({"v": 3}, "format version 3"),
    ({"brief": "beta"}, "not 'alpha'"),
    ({"approvals": "bob"}, "wrong type"),
    ({"approvals": [1]}, "names"),
    ({"comments": [{"by": "a", "text": "t"}]}, "and optionally"),
    ({"state": "open"}, "not one of"),
    ({"head": "main"}, "not a commit id"),
    ({"state": "merged"}, "no merged_commit"),
    ({"v": True}, "format version True"),
])
def test_a_bad_review_record_is_invalid(change: dict[str, object], problem: str) -> None:
    obj = {**json.loads(GOOD.encode()), **change}
    with pytest.raises(RecordInvalid, match=problem):
        decode_review(json.dumps(obj).encode(), REF)
    missing = json.loads(GOOD.encode())
    del missing["title"]
    with pytest.raises(RecordInvalid, match="lacks 'title'"):
        decode_review(json.dumps(missing).encode(), REF)


def test_conflict_errors_exit_3() -> None:
    assert MergeConflict("alpha", "assay/alpha", "main").code == 3
    assert issubclass(IllegalReviewChange, Conflict)
