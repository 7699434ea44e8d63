"""Every review thread answered: a person's review note on a waiting review wakes its brief for a round; the agent
answers each thread (`assay step answer`), the desk replies naming the commit that addresses it (or the reason
nothing changes), and the review is marked ready again only when every thread has its answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.core.forge.base import note_threads
from assay.core.records import ReviewComment, ReviewRecord, decode_review
from assay.errors import RecordInvalid
from tests.conftest import Forge, assay, audit_failures, git
from tests.fakegithub import FakeGitHub
from tests.helpers.desks import brief, publish, run_desk
from tests.helpers.github import DESK as GITHUB_DESK
from tests.helpers.github import NAME, OWNER, github_repo
from tests.journal_check import claim_chain, entries, invariants

REF = "refs/assay/reviews/greet"


def _review(forge: Forge) -> dict[str, Any]:
    return dict(json.loads(git("--git-dir", str(forge.path), "show", f"{REF}:review.json")))


def _note(forge: Forge, *args: str, by: str = "ann") -> str:
    done = assay("review", "note", "greet", *args, "--forge", forge.url, env={"ASSAY_PERSON": by})
    assert done.code == 0, done.err
    return done.out.strip()


def _threads(forge: Forge) -> list[dict[str, Any]]:
    shown = assay("review", "show", "greet", "--json", "--forge", forge.url)
    assert shown.code == 0, shown.err
    return list(json.loads(shown.out)["threads"])


def _landed(out: str) -> list[dict[str, Any]]:
    return list(json.loads(out)["landed"])


def _greet(script_tail: list[str]) -> str:
    return brief("Greet", ["append greet.txt hello", *script_tail], "grep -q hello greet.txt")


def test_a_note_on_a_waiting_review_is_answered_naming_the_commit_before_it_is_ready_again(
        work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/greet.md": _greet(["answer-threads fixed said hello once more"])})
    assert run_desk(work, "builder", tmp_path).code == 0
    first = _review(work)
    assert first["state"] == "ready" and claim_chain(work.path, "greet")[-1]["state"] == "waiting"

    assert _note(work, "Say it once more", "--on", "greet.txt:1") == "opened thread 1 on greet"
    waiting = _threads(work)
    assert [(t["id"], t["where"], t["said"][-1]["by"], t["said"][-1]["text"]) for t in waiting] == \
        [("1", "greet.txt:1", "ann", "Say it once more")]

    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert "wrote in review thread 1" in run.out, run.out
    after = _review(work)
    head = after["head"]
    assert after["state"] == "ready" and head != first["head"]
    note, answer = after["comments"]
    assert note == {"at": note["at"], "by": "ann", "text": "Say it once more", "thread": 1, "path": "greet.txt",
                    "line": 1}
    assert answer["thread"] == 1 and answer["by"] == "builder" and answer["answer"]
    assert answer["text"] == f"Addressed in {head}: said hello once more"
    assert _threads(work) == []
    journal = entries(work.path, "greet")
    said = [e["data"]["answer"] for e in journal if e["kind"] == "note" and "answer" in (e.get("data") or {})]
    assert said == [{"thread": "1", "last": "1", "fixed": "said hello once more"}]
    posted = [e for e in journal if e["kind"] == "result" and e.get("step") == "answer"]
    assert len(posted) == 1 and posted[0]["status"] == "completed"
    # the answer's reply came before the review was marked ready at the new head
    ready = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("review") == "ready"]
    assert posted[0]["seq"] < ready[-1]["seq"] and ready[-1]["data"]["head"] == head

    # a person's reply in the thread is news: another round, another answer; nothing is answered twice
    _note(work, "And a third time", "--reply", "1", by="bob")
    assert run_desk(work, "builder", tmp_path).code == 0
    final = _review(work)
    replies = [c for c in final["comments"] if c.get("answer")]
    assert len(replies) == 2 and replies[-1]["text"] == f"Addressed in {final['head']}: said hello once more"
    assert final["head"] != head and _threads(work) == []
    assert run_desk(work, "builder", tmp_path).code == 0  # nothing new: no round, no reply
    assert _review(work) == final
    assert claim_chain(work.path, "greet")[-1]["state"] == "waiting"
    assert invariants(work.path, "greet") == []
    assert audit_failures(work.url, "greet") == {}


def test_a_round_whose_agent_leaves_a_thread_unanswered_is_not_marked_ready(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/greet.md": _greet([])})
    assert run_desk(work, "builder", tmp_path).code == 0
    first = _review(work)
    _note(work, "Why hello?")
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 5, run.err  # a brief blocked
    assert "review threads without an answer: 1 on the review (@ann)" in run.out, run.out
    last = claim_chain(work.path, "greet")[-1]
    assert last["state"] == "blocked" and "review threads without an answer" in last["reason"]
    after = _review(work)
    assert after["head"] == first["head"]  # never marked ready at the round's new head
    assert not any(c.get("answer") for c in after["comments"])
    prompts = sorted((tmp_path / "state").rglob("greet-*-2.md")) or sorted(tmp_path.rglob("prompts/greet-*.md"))
    assert any("## Review threads" in p.read_text() and "- thread 1 on the review:" in p.read_text()
               for p in prompts), prompts
    assert invariants(work.path, "greet") == []


def test_an_answer_names_a_thread_the_prompt_lists(work: Forge, tmp_path: Path) -> None:
    out = tmp_path / "answer.out"
    publish(work, {"briefs/greet.md": _greet([f"run $ASSAY_BIN step answer 999 --fixed x > {out} 2>&1; true",
                                              "answer-threads reason hello is what the brief asks for"])})
    assert run_desk(work, "builder", tmp_path).code == 0
    _note(work, "Why hello?")
    assert run_desk(work, "builder", tmp_path).code == 0
    said = out.read_text()
    assert "no review thread '999' waits on an answer in this run (threads: 1)" in said, said
    answer = [c for c in _review(work)["comments"] if c.get("answer")]
    assert [c["text"] for c in answer] == ["Not changed: hello is what the brief asks for"]
    outside = assay("step", "answer", "1", "--fixed", "x")
    assert outside.code == 2 and "no desk is listening" in outside.err and "Traceback" not in outside.err


def test_review_notes_keep_the_format_of_plain_comments_and_refuse_broken_threads() -> None:
    plain = ReviewRecord(brief="greet", branch="assay/greet", title="Greet", state="draft", opened_at="t", at="t",
                         comments=(ReviewComment("ann", "t", "hi"),))
    assert json.loads(plain.encode())["comments"] == [{"at": "t", "by": "ann", "text": "hi"}]
    assert decode_review(plain.encode(), REF) == plain
    noted = plain.but(comments=(*plain.comments, ReviewComment("bob", "t", "why?", thread=2, path="a.py", line=3),
                                ReviewComment("desk", "t", "Not changed: because", thread=2, answer="ab12")))
    assert decode_review(noted.encode(), REF) == noted.but(v=2)
    assert json.loads(noted.encode())["v"] == 2 and json.loads(plain.encode())["v"] == 1
    assert note_threads(noted) == []  # the desk had the last word
    asked = noted.but(comments=(*noted.comments, ReviewComment("bob", "t", "really?", thread=2)))
    threads = note_threads(asked)
    assert [(t.id, t.where, [s.text for s in t.said], t.signal) for t in threads] == \
        [("2", "a.py:3", ["really?"], "thread:2:4")]
    for broken in ({"at": "t", "by": "x", "text": "y", "thread": 1},  # a reply in a thread no note opens
                   {"at": "t", "by": "x", "text": "y", "thread": 2, "v1": "a note in a version 1 record"},
                   {"at": "t", "by": "x", "text": "y", "thread": 2, "answer": "ab"},  # an answer that opens one
                   {"at": "t", "by": "x", "text": "y", "thread": 2, "line": "3"},  # a line that is no number
                   {"at": "t", "by": "x", "text": "y", "thread": True},
                   {"at": "t", "by": "x", "text": "y", "color": "red"}):
        record = json.loads(plain.encode())
        record["v"] = 1 if broken.pop("v1", None) else 2
        record["comments"].append(broken)
        with pytest.raises(RecordInvalid):
            decode_review(json.dumps(record).encode(), REF)
    legacy = json.loads(plain.encode())
    with pytest.raises(RecordInvalid, match="version 2 is a review with review notes"):
        decode_review(json.dumps({**legacy, "v": 2}).encode(), REF)  # version 2 without a note


def test_a_reply_names_a_thread_that_is_there(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/greet.md": _greet([])})
    assert run_desk(work, "builder", tmp_path).code == 0
    before = _review(work)
    wrong = assay("review", "note", "greet", "hm", "--reply", "7", "--forge", work.url)
    assert wrong.code == 2 and "no review thread 7 on the review of 'greet'" in wrong.err, wrong.err
    both = assay("review", "note", "greet", "hm", "--reply", "1", "--on", "x.py", "--forge", work.url)
    assert both.code == 2 and "a reply stays on its thread's file and line" in both.err
    assert _review(work) == before  # nothing written


def test_on_github_every_published_unresolved_thread_of_a_writer_is_answered_in_the_thread(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    text = brief("Gh", ["append gh.txt hi", "answer-threads fixed said hi again"], "grep -q hi gh.txt")
    publish(forge, {"desks/builder.yaml": GITHUB_DESK, "briefs/gh.md": text})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    first = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert first.code == 0 and "review ready" in first.out, first.out + first.err
    [pull] = fake_github.pulls(OWNER, NAME)
    fake_github.grant(OWNER, NAME, "carol")
    pending = fake_github.pending_thread(OWNER, NAME, pull.number, "not sent yet", path="gh.txt", by="carol")
    settled = fake_github.thread(OWNER, NAME, pull.number, "settled already", path="gh.txt", by="carol")
    fake_github.resolve(OWNER, NAME, pull.number, settled, by="carol")
    stranger = fake_github.thread(OWNER, NAME, pull.number, "rewrite it all", path="gh.txt", by="mallory")
    quiet = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert quiet.code == 0, quiet.out + quiet.err
    assert "mallory may not write to the repository" in quiet.out, quiet.out
    assert "a new round" not in quiet.out  # pending, resolved and a non-writer's threads start nothing
    asked = fake_github.thread(OWNER, NAME, pull.number, "Say hi twice", path="gh.txt", by="carol")
    early = assay("review", "merge", "gh", env=env)  # not merged while the thread waits on its desk's answer
    assert early.code == 3 and f"review thread {asked} waits on an answer from its desk" in early.err, early.err
    run = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert run.code == 0 and "review ready" in run.out, run.out + run.err
    [pull] = fake_github.pulls(OWNER, NAME)
    head = fake_github.pull(OWNER, NAME, pull.number).head_sha
    comments = fake_github.review_comments(OWNER, NAME, pull.number)
    replies = [c for c in comments if c.in_reply_to_id is not None]
    assert [c.in_reply_to_id for c in replies] == [asked]  # only the writer's published open thread
    assert replies[0].body.startswith(f"Addressed in {head}: said hi again\n\n— builder\n<!-- assay:answer:")
    assert not any(c.in_reply_to_id in (pending, settled, stranger) for c in comments)
    again = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert again.code == 0 and "a new round" not in again.out, again.out  # answered: nothing more to do
    assert len([c for c in fake_github.review_comments(OWNER, NAME, pull.number) if c.in_reply_to_id]) == 1


def test_a_review_is_never_marked_ready_while_a_note_waits_on_an_answer() -> None:
    from assay.core.forge.plain import review_transition
    from assay.errors import IllegalReviewChange

    draft = ReviewRecord(brief="greet", branch="assay/greet", title="Greet", state="draft", opened_at="t", at="t")
    noted = review_transition(draft, "comment", "greet", at="t", by="ann", text="why?", thread="new")
    with pytest.raises(IllegalReviewChange, match="review thread 1 waits on an answer"):
        review_transition(noted, "mark_ready", "greet", at="t", head="a" * 40)
    answered = review_transition(noted, "comment", "greet", at="t", by="builder", text="Not changed: x", thread="1",
                                 answer="ab12")
    assert review_transition(answered, "comment", "greet", at="t", by="builder", text="Not changed: x", thread="1",
                             answer="ab12") is answered  # an answer with its key there already: nothing
    assert review_transition(answered, "mark_ready", "greet", at="t", head="a" * 40).state == "ready"


def test_a_note_that_lands_while_the_desk_is_down_before_ready_is_answered_first(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/greet.md": _greet(["answer-threads reason hello is the greeting"])})
    assert run_desk(work, "builder", tmp_path).code == 0
    _note(work, "Why hello?")
    killed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="journal.before-push:supersede")
    assert killed.code != 0
    assert [c.get("answer") is not None for c in _review(work)["comments"]] == [False, True]  # answered, not ready
    _note(work, "And why once?")  # lands after the answers were posted, before the review is marked ready
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0, again.out + again.err
    final = _review(work)
    assert final["state"] == "ready" and _threads(work) == []
    threads = {c["thread"] for c in final["comments"] if c.get("answer")}
    assert threads == {1, 3}  # both notes answered before the ready at the new head
    assert invariants(work.path, "greet") == []


def test_a_review_whose_thread_waits_on_an_answer_is_not_merged_nor_landed(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/greet.md": _greet(["answer-threads fixed said it"])})
    assert run_desk(work, "builder", tmp_path).code == 0
    _note(work, "Is hello right?")
    merged = assay("review", "merge", "greet", "--forge", work.url)
    assert merged.code == 3 and "review thread 1 waits on an answer from its desk" in merged.err, merged.err
    landed = assay("land", "--json", "--forge", work.url, env={"ASSAY_STATE_DIR": str(tmp_path / "lander")})
    assert landed.code == 0, landed.err
    assert [(d["brief"], d["outcome"]) for d in _landed(landed.out)] == [("greet", "skipped")]
    assert run_desk(work, "builder", tmp_path).code == 0  # the desk answers it
    again = assay("land", "--json", "--forge", work.url, env={"ASSAY_STATE_DIR": str(tmp_path / "lander")})
    assert [(d["brief"], d["outcome"]) for d in _landed(again.out)] == [("greet", "landed")], again.out
