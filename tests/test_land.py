"""`assay land`: two reviews each green alone never break main together. Real desks, real git, the forge read with
plain git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from assay.core import custody, signals
from assay.core.claims import Claims
from assay.core.journal import append_as_person
from tests.conftest import Forge, assay, git
from tests.helpers.desks import DESK, desk_env, green_alone_red_together, publish, run_desk, scripted
from tests.journal_check import claim_chain, entries


def main_files(forge: Forge) -> set[str]:
    return set(git("--git-dir", str(forge.path), "ls-tree", "--name-only", "main").split())


def test_two_reviews_green_alone_but_red_together_land_one_and_wake_the_other(forge: Forge, tmp_path: Path) -> None:
    """`strict` makes config.txt strict; `lenient` passes only while config.txt is not strict. Each is verified
    green on its own branch and marked ready. Landed one at a time, the second is verified on its merge with the
    first, fails there and is woken for a new round with the failing row as feedback: main never holds both."""
    green_alone_red_together(forge, tmp_path)
    assert [claim_chain(forge.path, b)[-1]["state"] for b in ("a-strict", "b-lenient")] == ["waiting", "waiting"]
    landed = assay("land", "--json", "--forge", forge.url, env=desk_env(tmp_path))
    assert landed.code == 0, landed.err
    done = {d["brief"]: d for d in json.loads(landed.out)["landed"]}
    assert done["a-strict"]["outcome"] == "landed" and done["b-lenient"]["outcome"] == "woken", done
    assert "fail on its merge into main" in done["b-lenient"]["detail"]
    assert {"config.txt"} <= main_files(forge) and "app.txt" not in main_files(forge)  # main holds only the first
    merged = git("--git-dir", str(forge.path), "rev-parse", "main").strip()
    assert done["a-strict"]["commit"] == merged
    wake = [e for e in entries(forge.path, "b-lenient") if e["kind"] == "wake"]
    assert len(wake) == 1 and "b-lenient/check exited 1" in wake[0]["data"]["round"]["reason"], wake
    notes = [e["data"]["land"] for e in entries(forge.path, "b-lenient") if "land" in (e.get("data") or {})]
    assert len(notes) == 1 and notes[0]["passed"] is False and notes[0]["head"] != notes[0]["commit"]
    assert claim_chain(forge.path, "b-lenient")[-1]["state"] == "held"  # its desk works a new round
    again = assay("land", "--json", "--forge", forge.url, env=desk_env(tmp_path))
    assert json.loads(again.out)["landed"] == []  # nothing waits to land: the woken one is being worked
    landing = claim_chain(forge.path, "assay.landing")
    assert [c["state"] for c in landing][-1] == "released" and {c["desk"] for c in landing} == {"lander"}


def test_a_review_that_no_longer_merges_is_woken_once_and_never_merged(forge: Forge, claims: Claims,
                                                                         tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/one.md": scripted("One", ["shared.txt from-one"], "test -f shared.txt"),
                    "briefs/two.md": scripted("Two", ["shared.txt from-two"], "test -f shared.txt")})
    for _ in range(2):
        assert run_desk(forge, "builder", tmp_path).code == 0
    landed = assay("land", "--forge", forge.url, env=desk_env(tmp_path))
    assert landed.code == 0 and "one: landed" in landed.out and "two: woken" in landed.out, landed.out + landed.err
    assert "no longer merges cleanly" in landed.out
    shown = git("--git-dir", str(forge.path), "show", "main:shared.txt")
    assert "from-one" in shown
    wakes = [e for e in entries(forge.path, "two") if e["kind"] == "wake"]
    ident = wakes[0]["data"]["signals"][0]
    assert len(wakes) == 1 and ident.startswith("land:")
    # waiting again (as after its desk's next round), and asked again for the same (main, head): nothing is written
    custody.wait(claims, "two", "review", by="builder", desk="builder")
    again = signals.new_round(claims, "two", ident, "again", "", "lander")
    assert not again.woken and "already done" in again.did[-1], again.did
    assert len([e for e in entries(forge.path, "two") if e["kind"] == "wake"]) == 1
    # and `assay land` meets the same head conflicting with the same main after that round: a person's turn
    blocked = assay("land", "--forge", forge.url, env=desk_env(tmp_path))
    assert blocked.code == 0 and "two: blocked" in blocked.out and "conflicts with main" in blocked.out, blocked.out
    assert claim_chain(forge.path, "two")[-1]["state"] == "blocked"


def test_a_lander_that_died_between_its_note_and_the_round_starts_the_round_again(forge: Forge, claims: Claims,
                                                                                  tmp_path: Path) -> None:
    """The failing verdict is journaled, the wake never pushed (the lander died between the two): the next pass
    starts the round (never blocks the brief as though a round had run)."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/one.md": scripted("One", ["shared.txt from-one"], "test -f shared.txt"),
                    "briefs/two.md": scripted("Two", ["shared.txt from-two"], "test -f shared.txt")})
    for _ in range(2):
        assert run_desk(forge, "builder", tmp_path).code == 0
    assert assay("review", "merge", "one", "--forge", forge.url, env=desk_env(tmp_path)).code == 0
    main = git("--git-dir", str(forge.path), "rev-parse", "main").strip()
    head = git("--git-dir", str(forge.path), "rev-parse", "refs/heads/assay/two").strip()
    append_as_person(claims, "two", "note", {"land": {"main": main, "head": head, "commit": "", "passed": False,
                                                      "conflict": True, "rows": []}}, "lander")
    landed = assay("land", "--forge", forge.url, env=desk_env(tmp_path))
    assert landed.code == 0 and "two: woken" in landed.out, landed.out + landed.err
    assert [e["kind"] for e in entries(forge.path, "two")].count("wake") == 1


def test_a_second_lander_waits_for_the_first_and_nothing_to_land_takes_no_claim(forge: Forge, claims: Claims,
                                                                                  tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/one.md": scripted("One", ["one.txt 1"], "test -f one.txt")})
    idle = assay("land", "--forge", forge.url, env=desk_env(tmp_path))
    assert idle.code == 0 and "no ready review" in idle.out, idle.out + idle.err
    assert git("--git-dir", str(forge.path), "for-each-ref", "refs/assay/claims/assay.landing") == ""
    assert run_desk(forge, "builder", tmp_path).code == 0
    claims.claim("assay.landing", "someone", require_brief=False)
    busy = assay("land", "--forge", forge.url, env=desk_env(tmp_path))
    assert busy.code == 3 and "assay.landing" in busy.err and "someone" in busy.err and "Traceback" not in busy.err
    assert claim_chain(forge.path, "one")[-1]["state"] == "waiting"  # untouched


def test_a_lander_killed_mid_pass_is_taken_over_by_the_next_on_its_host(forge: Forge, tmp_path: Path) -> None:
    """SIGKILL `assay land` while it verifies a merge (its row waits on a FIFO the first time it runs on a merge
    commit): the landing claim stays held by a dead process. The next `assay land` here takes it over (a new epoch)
    and lands the review; nothing was merged by the killed one."""
    fifo, once = tmp_path / "verifying", tmp_path / "once"
    os.mkfifo(fifo)
    row = (f"if git rev-parse -q --verify HEAD^2 >/dev/null && [ ! -e {once} ]; then touch {once}; "
           f"echo started > {fifo}; sleep 60; fi; test -f one.txt")
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/one.md": scripted("One", ["one.txt 1"], row)})
    assert run_desk(forge, "builder", tmp_path).code == 0
    before = git("--git-dir", str(forge.path), "rev-parse", "main").strip()
    killed = subprocess.Popen([sys.executable, "-m", "assay", "land", "--forge", forge.url],
                              env={**os.environ, **desk_env(tmp_path)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.append(fifo.read_text()), daemon=True)
    reader.start()
    try:
        reader.join(timeout=120)  # the lander reached its verify row on the merge, or this fails, not hangs
        assert said == ["started\n"], (said, killed.poll())
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=30)
    assert git("--git-dir", str(forge.path), "rev-parse", "main").strip() == before
    assert claim_chain(forge.path, "assay.landing")[-1]["state"] == "held"
    landed = assay("land", "--forge", forge.url, env=desk_env(tmp_path))
    assert landed.code == 0 and "one: landed" in landed.out, landed.out + landed.err
    chain = claim_chain(forge.path, "assay.landing")
    assert [c["epoch"] for c in chain if c["state"] == "held"][-1] == 2 and chain[-1]["state"] == "released"
