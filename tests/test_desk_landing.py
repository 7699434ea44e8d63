"""Reviews judged against the main they would land on: a review superseded at ready is never marked ready, and a
ready review that a merge left conflicting is woken once per (brief, main) and merges cleanly after its round.
Real desks, real git; the forge read with plain git."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.desks import DESK, desk_env, green_alone_red_together, publish, run_desk, scripted
from tests.journal_check import claim_chain, entries, invariants


def main_sha(forge: Forge) -> str:
    return git("--git-dir", str(forge.path), "rev-parse", "main").strip()


def review_state(forge: Forge, brief: str) -> str:
    import json

    text = git("--git-dir", str(forge.path), "show", f"refs/assay/reviews/{brief}:review.json")
    return str(json.loads(text)["state"])


def wakes(forge: Forge, brief: str) -> list[dict[str, Any]]:
    return [e for e in entries(forge.path, brief) if e["kind"] == "wake"]


def test_a_ready_review_left_conflicting_by_a_merge_is_woken_once_and_merges_after_its_round(
        forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/one.md": scripted("One", ["shared.txt from-one"], "test -f shared.txt"),
                    "briefs/two.md": scripted("Two", ["shared.txt from-two", "two.txt also"], "test -f two.txt")})
    for _ in range(2):
        assert run_desk(forge, "builder", tmp_path).code == 0
    assert [claim_chain(forge.path, b)[-1]["state"] for b in ("one", "two")] == ["waiting", "waiting"]
    merged = assay("review", "merge", "one", "--forge", forge.url, env=desk_env(tmp_path))
    assert merged.code == 0, merged.err
    main = main_sha(forge)
    swept = assay("sweep", "--forge", forge.url, env=desk_env(tmp_path))  # the sweep finds it first
    assert swept.code == 0 and "stale" in swept.out, swept.out + swept.err
    again = assay("sweep", "--forge", forge.url, env=desk_env(tmp_path))
    assert again.code == 0
    woken = wakes(forge, "two")
    assert len(woken) == 1, woken
    data = woken[0]["data"]
    assert isinstance(data, dict) and data["signals"] == [f"main:{main}"]
    reason = data["round"]["reason"]
    assert f"main moved to {main[:10]} (merge of one)" in reason and "resolve shared.txt" in reason, reason
    assert data["round"]["main"] == main
    # the desk passes that follow: one settles done, two is worked a round from the new main
    first = run_desk(forge, "builder", tmp_path)
    ran = run_desk(forge, "builder", tmp_path)
    assert first.code == 0 and ran.code == 0, first.err + ran.err
    assert "main at " + main[:10] + " merged into the worktree (conflicts in shared.txt)" in first.out, first.out
    assert len(wakes(forge, "two")) == 1  # exactly once, however many looks
    chain = claim_chain(forge.path, "two")
    woke = [(a["state"], b["state"]) for a, b in zip(chain, chain[1:], strict=False)].count(("waiting", "held"))
    assert woke == 1, [c["state"] for c in chain]
    assert [claim_chain(forge.path, b)[-1]["state"] for b in ("one", "two")] == ["done", "waiting"]
    assert review_state(forge, "two") == "ready"
    branch = git("--git-dir", str(forge.path), "rev-parse", "refs/heads/assay/two").strip()
    assert git("--git-dir", str(forge.path), "merge-base", main, branch).strip() == main  # the round began from it
    prompts = sorted((tmp_path / "state").glob("*/prompts/two-*.md")) + sorted(
        (tmp_path / "state").glob("prompts/two-*.md"))
    assert any("resolve shared.txt" in p.read_text() for p in prompts), prompts
    landed = assay("review", "merge", "two", "--forge", forge.url, env=desk_env(tmp_path))
    assert landed.code == 0, landed.err
    assert git("--git-dir", str(forge.path), "show", "main:shared.txt").strip() == "from-two"
    assert invariants(forge.path, "two") == [] and audit_failures(forge.url, "two") == {}


def test_a_review_inside_another_ready_one_is_released_and_done_once_that_one_is_merged(
        forge: Forge, tmp_path: Path) -> None:
    """`copy` makes the same change as `first`, whose review is ready: it is not marked ready but released, superseded
    by `first`. Once `first` is merged, the desk that takes `copy` again finds its work on main: done, no review."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/a-first.md": scripted("First", ["same.txt value"], "test -f same.txt"),
                    "briefs/b-copy.md": scripted("Copy", ["same.txt value"], "test -f same.txt")})
    for _ in range(2):
        assert run_desk(forge, "builder", tmp_path).code == 0
    chain = claim_chain(forge.path, "b-copy")
    assert chain[-1]["state"] == "released", chain[-1]
    assert "superseded by a-first" in str(chain[-1]["reason"])
    assert review_state(forge, "b-copy") == "closed" and review_state(forge, "a-first") == "ready"
    notes = [e["data"]["superseded"] for e in entries(forge.path, "b-copy") if "superseded" in (e.get("data") or {})
             and e["kind"] == "note"]
    assert len(notes) == 1 and notes[0]["by"] == "a-first" and notes[0]["verdict"] == "superseded"
    assert not [e for e in entries(forge.path, "b-copy") if (e.get("data") or {}).get("review") == "ready"]
    shown = assay("review", "show", "b-copy", "--forge", forge.url)
    assert shown.code == 0 and "not marked ready: superseded by a-first" in shown.out, shown.out + shown.err
    brief_shown = assay("brief", "show", "b-copy", "--forge", forge.url)
    assert brief_shown.code == 0 and "superseded by a-first" in brief_shown.out, brief_shown.out + brief_shown.err
    site = tmp_path / "site"
    built = assay("board", "build", "-o", str(site), "--forge", forge.url,
                  env={"ASSAY_CACHE_DIR": str(tmp_path / "bc")})
    assert built.code == 0, built.err
    page = (site / "briefs" / "b-copy.html").read_text()
    assert "superseded by a-first" in page and "not marked ready" in page
    assert assay("review", "merge", "a-first", "--forge", forge.url).code == 0
    main = main_sha(forge)
    for _ in range(2):
        assert run_desk(forge, "builder", tmp_path).code == 0
    chain = claim_chain(forge.path, "b-copy")
    assert chain[-1]["state"] == "done", chain[-1]
    assert f"already on main at {main[:10]}" in str(chain[-1]["reason"])
    assert review_state(forge, "b-copy") == "closed"
    shown = assay("review", "show", "b-copy", "--forge", forge.url)
    assert f"not marked ready: already on main at {main[:10]}" in shown.out, shown.out
    assert invariants(forge.path, "b-copy") == [] and audit_failures(forge.url, "b-copy") == {}


def test_six_briefs_on_one_file_three_desks_no_conflicting_review_stays_ready_after_a_merge(
        forge: Forge, tmp_path: Path) -> None:
    """The issue's reproduction: six briefs write one file, three desks work them to ready. After the first merge,
    every other ready review conflicts with main and is woken, once; none is left ready and waiting."""
    names = [f"b{i}" for i in range(6)]
    publish(forge, {"desks/scripted.yaml": DESK.format(name="scripted", attempts=1),
                    **{f"briefs/{n}.md": scripted(n.upper(), [f"shared.txt from-{n}"], "test -f shared.txt")
                       for n in names}})
    for _ in range(3):
        assert run_desk(forge, "scripted", tmp_path).code == 0
    ready = [n for n in names if claim_chain(forge.path, n)[-1]["state"] == "waiting"]
    assert len(ready) >= 2, [claim_chain(forge.path, n)[-1] for n in names]
    first = ready[0]
    assert assay("review", "merge", first, "--forge", forge.url).code == 0
    main = main_sha(forge)
    racing = [subprocess.Popen([sys.executable, "-m", "assay", "sweep", "--forge", forge.url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    assert [p.wait(timeout=120) for p in racing] == [0, 0], [p.communicate() for p in racing]
    assert assay("sweep", "--forge", forge.url).code == 0  # and a later one
    for n in ready[1:]:
        woken = wakes(forge, n)
        assert len(woken) == 1 and woken[0]["data"]["signals"] == [f"main:{main}"], (n, woken)
        assert claim_chain(forge.path, n)[-1]["state"] == "held"
    left = [n for n in names if n != first and claim_chain(forge.path, n)[-1]["state"] == "waiting"
            and review_state(forge, n) == "ready"]
    assert left == []


def test_a_ready_review_whose_rows_fail_on_the_new_main_is_woken_once(forge: Forge, tmp_path: Path) -> None:
    """`strict` makes config.txt strict; `lenient` passes only while config.txt is not strict. Both are ready; once
    `strict` is merged, a desk pass runs `lenient`'s rows on its clean merge into the new main, once, and wakes it."""
    green_alone_red_together(forge, tmp_path)
    assert assay("review", "merge", "a-strict", "--forge", forge.url).code == 0
    main = main_sha(forge)
    passes = [run_desk(forge, "builder", tmp_path) for _ in range(2)]
    assert all(p.code in (0, 5) for p in passes), [p.err for p in passes]
    woken = wakes(forge, "b-lenient")
    assert len(woken) == 1 and woken[0]["data"]["signals"] == [f"main:{main}"], woken
    reason = woken[0]["data"]["round"]["reason"]
    assert "(merge of a-strict)" in reason and "b-lenient/check exited 1" in reason, reason
    checked = [e["data"] for e in entries(forge.path, "b-lenient") if "main_verify" in (e.get("data") or {})]
    assert [c["main_verify"]["main"] for c in checked] == [main]  # the rows ran once on this main
    land = [e["data"]["land"] for e in entries(forge.path, "b-lenient") if "land" in (e.get("data") or {})]
    assert len(land) == 1 and land[0]["passed"] is False and land[0]["main"] == main
    assert claim_chain(forge.path, "b-lenient")[-1]["state"] != "waiting"  # worked again, not left ready
