"""The footprint a brief's first diff shows rides the push of that work, to `refs/assay/learned/<brief>`; when junk
lands there in between (a pre-receive hook on the forge plants it here), the work lands without it and the desk
keeps it in a push of its own, replacing the junk. SIGKILLed around that push and run again: the brief reaches its
review and the footprint is on the forge, from the diff, read with plain git."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.conftest import Forge, audit_failures, git
from tests.helpers.desks import brief, publish, run_desk
from tests.journal_check import claim_chain, invariants

CASES: dict[str, tuple[list[str], str]] = {
    "footprint.before-push": (["footprint.before-push"], "the next run keeps it"),
    "footprint.after-push": (["footprint.after-push"], "kept already: the takeover leaves it as it is"),
}


def footprints(forge: Forge, brief: str = "ship") -> dict[str, dict[str, object]]:
    shown = git("--git-dir", str(forge.path), "show", f"refs/assay/learned/{brief}:footprints.json")
    return dict(json.loads(shown)["briefs"])


def race_the_first_footprint_push(forge: Forge, tmp_path: Path) -> Path:
    """A pre-receive hook that, the first time a push carries `refs/assay/learned/ship`, plants junk there first
    (a commit whose footprints.json holds another brief's entry)."""
    seed = tmp_path / "other"
    git("init", "-q", str(seed))
    (seed / "footprints.json").write_text('{"briefs":{"other":{"epoch":1,"source":"diff","touches":["x"]}},"v":1}\n')
    git("add", "-A", cwd=seed)
    git("-c", "user.name=o", "-c", "user.email=o@x", "commit", "-q", "-m", "junk", cwd=seed)
    git("push", "-q", forge.url, "HEAD:refs/test/other", cwd=seed)
    raced = tmp_path / "raced"
    hook = forge.path / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nif grep -q refs/assay/learned/ship && [ ! -e {raced} ]; then\n"
                    f"  touch {raced}\n  env -i PATH=\"$PATH\" git --git-dir={forge.path} "
                    "update-ref refs/assay/learned/ship refs/test/other || exit 1\nfi\nexit 0\n")
    hook.chmod(0o755)
    return raced


@pytest.mark.parametrize("case", list(CASES))
def test_a_desk_killed_around_keeping_a_footprint_keeps_it(work: Forge, tmp_path: Path, case: str) -> None:
    points, _ = CASES[case]
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    raced = race_the_first_footprint_push(work, tmp_path)
    for point in points:
        crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT=point)
        assert crashed.code == -signal.SIGKILL, crashed.out + crashed.err
    assert raced.exists()  # the work's push met the junk, and landed without the footprint
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "review ready" in again.out, again.out + again.err
    chain = claim_chain(work.path, "ship")
    assert chain[-1]["state"] == "waiting" and chain[-1]["epoch"] == 2
    kept = footprints(work)  # kept (the junk replaced) by the run that died after its push, or else the takeover
    assert kept == {"ship": {"touches": ["ship.txt"], "source": "diff", "epoch": 1 if "after" in case else 2}}, kept
    assert invariants(work.path, "ship") == [] and audit_failures(work.url, "ship") == {}


def test_the_footprint_rides_the_push_of_the_work_it_comes_from(work: Forge, tmp_path: Path) -> None:
    """No race: the footprint costs no push of its own; it is in the very push that moved the work branch."""
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    done = run_desk(work, "builder", tmp_path)
    assert done.code == 0 and "review ready" in done.out, done.out + done.err
    assert footprints(work) == {"ship": {"touches": ["ship.txt"], "source": "diff", "epoch": 1}}
    assert len(git("--git-dir", str(work.path), "rev-list", "refs/assay/learned/ship").split()) == 1
    shared = git("--git-dir", str(work.path), "rev-parse", "-q", "--verify", "refs/assay/footprints", check=False)
    assert not shared.strip()  # the fleet's shared ref is not moved by a first round
    journal = git("--git-dir", str(work.path), "log", "--format=%ct %s", "refs/assay/journal/ship")
    assert journal  # the journal moved; the footprints commit came with one of its pushes, not after
    assert invariants(work.path, "ship") == []
    forged = tmp_path / "forged"  # the check reads the forge with plain git: a footprint no holder wrote fails it
    git("init", "-q", str(forged))
    (forged / "footprints.json").write_text(
        '{"briefs":{"ship":{"epoch":7,"source":"diff","touches":["ship.txt"]}},"v":1}\n')
    git("add", "-A", cwd=forged)
    git("-c", "user.name=builder", "-c", "user.email=b@x", "commit", "-q", "-m", "forged", cwd=forged)
    git("push", "-q", "-f", work.url, "HEAD:refs/assay/learned/ship", cwd=forged)
    assert [p for p in invariants(work.path, "ship") if "refs/assay/learned/ship names epoch 7" in p]
