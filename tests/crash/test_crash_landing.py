"""A desk SIGKILLed while it decides that a review is superseded at ready, or while it acts on that verdict, then run
again: the verdict is the one journaled (decided once), the review is closed once, the brief released once, and the
review is never marked ready. A sweep SIGKILLed as it wakes a ready review that main moved under, run again: one
wake."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.desks import DESK, desk_env, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants

# case -> (points armed one after another, then a clean run), as in test_crash_suite
CASES: dict[str, tuple[list[str], str]] = {
    "decided": (["step.after-result:supersede"], "the verdict is journaled; nothing is closed or released"),
    "closing": (["step.after-execute:close"], "the review is closed; the close's result is not journaled"),
    "releasing": (["release.before-push"], "the release with its note is about to be pushed"),
}
SWEEP_CASES: dict[str, tuple[list[str], str]] = {
    "waking": (["wake.before-push"], "the wake of a ready review main moved under is about to be pushed"),
    "woken": (["wake.after-push"], "the wake is on the forge; the sweep has not said so"),
}


def scripted(title: str, writes: list[str]) -> str:
    return (f"---\ntitle: {title}\nlabels: [work]\nverify:\n  - id: check\n    run: \"true\"\n---\n{title}.\n\n"
            "```assay-script\n" + "\n".join(f"write {w}" for w in writes) + "\n```\n")


def review_state(forge: Forge, brief: str) -> str:
    import json

    return str(json.loads(git("--git-dir", str(forge.path), "show", f"refs/assay/reviews/{brief}:review.json"))
               ["state"])


@pytest.mark.parametrize("case", list(CASES))
def test_a_desk_killed_while_a_review_is_superseded_releases_it_once(work: Forge, tmp_path: Path, case: str) -> None:
    points, _ = CASES[case]
    publish(work, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                   "briefs/a-first.md": scripted("First", ["same.txt value"]),
                   "briefs/b-copy.md": scripted("Copy", ["same.txt value"])})
    first = assay("desk", "run", "builder", "--once", "--max-briefs", "1", "--forge", work.url,
                  env=desk_env(tmp_path), timeout=120)
    assert first.code == 0 and review_state(work, "a-first") == "ready", first.out + first.err
    for point in points:
        crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT=point)
        assert crashed.code == -signal.SIGKILL, crashed.out + crashed.err
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0, again.out + again.err
    chain = claim_chain(work.path, "b-copy")
    assert chain[-1]["state"] == "released" and "superseded by a-first" in str(chain[-1]["reason"]), chain[-1]
    assert [c["state"] for c in chain].count("released") == 1
    log = entries(work.path, "b-copy")
    verdicts = [e for e in log if e.get("step") == "supersede" and e["kind"] == "result"]
    assert len(verdicts) == 1, verdicts  # decided once, replayed after the crash
    assert len([e for e in log if e["kind"] == "note" and "superseded" in (e.get("data") or {})]) == 1
    assert not [e for e in log if (e.get("data") or {}).get("review") == "ready"]
    assert review_state(work, "b-copy") == "closed" and review_state(work, "a-first") == "ready"
    assert invariants(work.path, "b-copy") == [] and audit_failures(work.url, "b-copy") == {}


@pytest.mark.parametrize("case", list(SWEEP_CASES))
def test_a_sweep_killed_as_it_wakes_a_stale_review_wakes_it_once(work: Forge, tmp_path: Path, case: str) -> None:
    points, _ = SWEEP_CASES[case]
    publish(work, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                   "briefs/one.md": scripted("One", ["shared.txt from-one"]),
                   "briefs/two.md": scripted("Two", ["shared.txt from-two"])})
    for _ in range(2):
        assert run_desk(work, "builder", tmp_path).code == 0
    assert assay("review", "merge", "one", "--forge", work.url).code == 0
    for point in points:
        crashed = assay("sweep", "--forge", work.url, env=desk_env(tmp_path, ASSAY_CRASH_AT=point))
        assert crashed.code == -signal.SIGKILL, crashed.out + crashed.err
    for _ in range(2):
        assert assay("sweep", "--forge", work.url).code == 0
    wakes = [e for e in entries(work.path, "two") if e["kind"] == "wake"]
    assert len(wakes) == 1 and wakes[0]["data"]["signals"][0].startswith("main:"), wakes
    assert [c["state"] for c in claim_chain(work.path, "two")].count("held") >= 1
    assert claim_chain(work.path, "two")[-1]["state"] == "held"
    assert invariants(work.path, "two") == []


CASES.update(SWEEP_CASES)  # every point these cases arm counts as armed
