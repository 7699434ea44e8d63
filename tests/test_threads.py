"""Every review thread answered: a person's review note on a waiting review wakes its brief for a round; the agent
answers each thread (`assay step answer`), the desk replies naming the commit that addresses it (or the reason
nothing changes), and the review is marked ready again only when every thread has its answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.core.forge.plain import note_threads
from assay.core.records import ReviewComment, ReviewRecord, decode_review
from assay.errors import RecordInvalid
from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.desks import brief, publish, run_desk
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
