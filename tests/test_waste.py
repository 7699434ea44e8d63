"""The waste ledger: agent time kept and lost, per brief and per desk, from the journal alone; on the board and in
`assay report`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from assay.core.records import JournalEntry
from assay.observe import waste
from tests.conftest import Forge, assay, git
from tests.helpers.desks import brief, desk_env, publish, run_desk


def _entry(seq: int, kind: str, at: float, run: str = "r1", **fields: Any) -> JournalEntry:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_800_000_000 + at))
    return JournalEntry(seq=seq, epoch=fields.pop("epoch", 1), kind=kind, at=stamp, run=run, **fields)


def _agent(seq: int, at: float, attempt: int, run: str = "r1", after: str = "", epoch: int = 1) -> JournalEntry:
    return _entry(seq, "intent", at, run, step="agent", policy="idempotent", epoch=epoch,
                  data={"input": {"attempt": attempt, **({"after": after} if after else {})}})


def _done(seq: int, at: float, of: int, step: str, output: dict[str, Any], run: str = "r1",
          epoch: int = 1) -> JournalEntry:
    return _entry(seq, "result", at, run, step=step, status="completed", intent=of, epoch=epoch,
                  data={"output": output})


def _verify(seq: int, at: float, attempt: int, run: str = "r1", after: str = "", epoch: int = 1) -> JournalEntry:
    return _entry(seq, "intent", at, run, step="verify", policy="safe", epoch=epoch,
                  data={"input": {"attempt": attempt, "head": "a" * 40, **({"after": after} if after else {})}})


def _note(seq: int, at: float, run: str, data: dict[str, Any], epoch: int = 1) -> JournalEntry:
    return _entry(seq, "note", at, run, epoch=epoch, data=data)


def test_each_agent_call_gets_its_fate_from_the_journal() -> None:
    """Run r1 dies inside the agent after 10 s of journaled work; run r2, at epoch 2, resumes the call under its
    intent, which fails verify (30 s), then passes the next attempt (20 s); a person closes the review and
    releases it; the redo round's agent (40 s) passes and is kept, and the first round's passing 20 s are
    `redone`; a last call runs now."""
    e = [_note(1, 0, "r1", {"run": "start"}), _agent(2, 0, 1),
         _entry(3, "intent", 10, "agent-r1", step="deploy", policy="unsafe"),  # the agent's own step: its run's work
         _entry(4, "claim", 90, "sweeper:default:1", data={"action": "expire"}),  # between runs: not the agent's
         _note(5, 100, "r2", {"run": "start"}, 2),
         _done(6, 130, 2, "agent", {"duration_ms": 30_000}, "r2", 2),
         _verify(7, 131, 1, "r2", epoch=2), _done(8, 132, 7, "verify", {"passed": False}, "r2", 2),
         _agent(9, 140, 2, "r2", epoch=2), _done(10, 160, 9, "agent", {"duration_ms": 20_000}, "r2", 2),
         _verify(11, 161, 2, "r2", epoch=2), _done(12, 162, 11, "verify", {"passed": True}, "r2", 2),
         _note(13, 163, "r2", {"run": "end"}, 2),
         _entry(14, "refused", 170, "r2", step="deploy", epoch=2, data={"message": "interrupted"}),
         _note(15, 200, "desk:b", {"redo": "block-14", "reason": "closed", "said": ""}, 3),
         _note(16, 200, "r3", {"run": "start"}, 3),
         _agent(17, 200, 1, "r3", after="block-14", epoch=3),
         _done(18, 240, 17, "agent", {"duration_ms": 40_000}, "r3", 3),
         _verify(19, 241, 1, "r3", after="block-14", epoch=3),
         _done(20, 242, 19, "verify", {"passed": True}, "r3", 3),
         _agent(21, 250, 2, "r3", after="block-14", epoch=3)]  # running now: no result, nothing after
    found = waste.items(e)
    fates = sorted((i.seq, i.kind, i.seconds, i.epoch) for i in found if i.kind in waste.FATES)
    assert fates == [(2, "died", 10.0, 1), (2, "failed_verify", 30.0, 2), (9, "redone", 20.0, 2),
                     (17, "kept", 40.0, 3), (21, "open", 0.0, 3)]
    ledger = waste.summary(found)
    assert (ledger["agent_s"], ledger["kept_s"], ledger["wasted_s"]) == (100.0, 40.0, 60.0)
    assert {k: ledger[k] for k in waste.COUNTS} == {"runs_died": 1, "refused": 1, "unknown": 0,
                                                   "verify_failed": 1, "rounds_redone": 1}
    per = waste.ledgers({"b": e}, {"b": {1: "one", 2: "two", 3: "two"}})
    assert per.desks["one"]["died_s"] == 10.0 and per.desks["one"]["agent_s"] == 10.0
    assert per.desks["two"]["kept_s"] == 40.0 and per.desks["two"]["wasted_s"] == 50.0
    assert per.held == {"one": ["b"], "two": ["b"]} and per.total == per.briefs["b"]
    assert waste.text(ledger) == ("agent 100s · kept 40s · wasted 60s (died 10s, failed verify 30s, redone 20s) · "
                                  "1 runs died · 1 refused · 1 verify failed · 1 rounds redone")


def test_a_killed_run_and_failed_attempts_show_in_the_report_and_on_the_board(work: Forge, tmp_path: Path) -> None:
    marker = tmp_path / "slept-once"
    flag = tmp_path / "fixed"
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1", "sleep 1.2", "deploy",
                                                    f"sleep-once 60 {marker}"], "test -f ship.txt"),
                   "briefs/fix.md": brief("Fix", ["write fix.txt v1"], f"test -e {flag}", deps="ship")})
    env = {**os.environ, **desk_env(tmp_path)}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", work.url],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not marker.exists():  # the agent deployed, then began its long sleep
        assert desk.poll() is None and time.monotonic() < deadline, "the agent never reached its sleep"
        time.sleep(0.05)
    desk.send_signal(signal.SIGKILL)
    desk.wait()
    assert run_desk(work, "builder", tmp_path).code == 0  # takes ship over and finishes it
    assert assay("review", "merge", "ship", "--forge", work.url).code == 0
    first = run_desk(work, "builder", tmp_path)  # ship is done; fix fails both attempts and is blocked
    assert "fix blocked: 2 attempts failed verification" in first.out, first.out + first.err
    flag.touch()
    assert assay("release", "fix", "--force", "--reason", "fixed the environment", "--forge", work.url).code == 0
    assert run_desk(work, "builder", tmp_path).code == 0

    run = assay("report", "--json", "--forge", work.url)
    report = run.json()
    assert run.code == 0 and isinstance(report, dict), run.err
    ship, fix = report["briefs"]["ship"], report["briefs"]["fix"]
    assert ship["runs_died"] == 1 and ship["died_s"] >= 1.0 and ship["kept_s"] > 0 and ship["verify_failed"] == 0
    assert fix["verify_failed"] == 2 and fix["rounds_redone"] == 1 and fix["runs_died"] == 0
    assert fix["failed_verify_s"] > 0 and fix["kept_s"] > 0
    assert report["worst"][:2] == sorted(["ship", "fix"], key=lambda b: -report["briefs"][b]["wasted_s"])
    assert set(report["desks"]) == {"builder"} and report["desks"]["builder"] == report["total"]
    assert abs(report["total"]["wasted_s"] - ship["wasted_s"] - fix["wasted_s"]) < 0.002

    table = assay("report", "--forge", work.url, env={"COLUMNS": "80"})
    assert table.code == 0 and table.out.startswith("the fleet: agent ") and "2 verify failed" in table.out
    assert max(len(line) for line in table.out.splitlines()) <= 80
    assert "builder" in table.out and "ship" in table.out
    idle = assay("report", "--desk", "other", "--forge", work.url)  # defined on main, never worked a brief
    assert idle.code == 0 and "no agent time journaled for desk other" in idle.out

    out = tmp_path / "site"
    assert assay("board", "build", "-o", str(out), "--forge", work.url).code == 0
    data = json.loads((out / "board.json").read_text())
    cards = {c["id"]: c for c in data["briefs"]}
    assert cards["ship"]["waste"] == ship and cards["fix"]["waste"] == fix and data["waste"] == report["total"]
    assert [a["passed"] for a in cards["fix"]["verify_attempts"]] == [False, False, True]
    assert "test -e" in cards["fix"]["verify_attempts"][0]["rows"][0]["command"]
    assert all(row["why"] for c in ("ship", "fix") for row in cards[c]["custody"]), cards["ship"]["custody"]
    assert "took over" in cards["ship"]["custody"][1]["why"]
    page = (out / "briefs" / "ship.html").read_text()
    assert "agent time" in page and "runs died" in page
    fix_page = (out / "briefs" / "fix.html").read_text()
    assert fix_page.count("<h3>Verify ") == 3 and "forced by" in fix_page
    assert 'id="waste"' in (out / "index.html").read_text()


def _plant_junk_journal(forge: Forge, brief_id: str) -> str:
    """A commit on top of `brief_id`'s journal whose entries.jsonl is junk, made with plain git; the ref."""
    ref = f"refs/assay/journal/{brief_id}"
    tip = forge.tip(ref)
    assert tip
    bare = ["--git-dir", str(forge.path)]
    blob = git(*bare, "hash-object", "-w", "--stdin", input="this is not json\n").strip()
    tree = git(*bare, "mktree", input=f"100644 blob {blob}\tentries.jsonl\n").strip()
    commit = git(*bare, "commit-tree", tree, "-p", tip, "-m", "junk").strip()
    git(*bare, "update-ref", ref, commit, tip)
    return ref


def test_a_journal_that_cannot_be_read_is_named_and_left_out_of_every_total(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/one.md": brief("One", ["write one.txt 1", "sleep 0.2"], "test -f one.txt"),
                   "briefs/two.md": brief("Two", ["write two.txt 2", "sleep 0.2"], "test -f two.txt")})
    assert run_desk(work, "builder", tmp_path).code == 0
    assert run_desk(work, "other", tmp_path).code == 0
    before = assay("report", "--json", "--forge", work.url).json()
    assert isinstance(before, dict) and set(before["briefs"]) == {"one", "two"}, before
    ref = _plant_junk_journal(work, "two")
    copy = "refs/assay/journal/Bad_Name"  # a journal under a name no brief has: counted nowhere either
    git("--git-dir", str(work.path), "update-ref", copy, str(work.tip("refs/assay/journal/one")))

    run = assay("report", "--json", "--forge", work.url)
    after = run.json()
    assert run.code == 0 and isinstance(after, dict), run.err
    assert [(u["brief"], u["ref"], u["left_out"]) for u in after["unread"]] == [
        ("Bad_Name", copy, "every total"), ("two", ref, "every total")]
    assert after["unread"][1]["problem"].startswith("journal line is not JSON")
    assert set(after["briefs"]) == {"one"} and after["total"] == before["briefs"]["one"]

    table = assay("report", "--forge", work.url)
    assert table.code == 0 and table.out.startswith("the fleet (without 2 unread: Bad_Name, two): agent "), table.out
    assert f"warning: could not read {ref} (brief two): " in table.err and "left out of every total" in table.err
    desk = assay("report", "--desk", "other", "--forge", work.url)  # a desk's share names it too
    assert desk.code == 0 and f"could not read {ref}" in desk.err
