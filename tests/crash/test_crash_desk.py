"""A desk SIGKILLed between committing its work and pushing it, then run again: the commit is made again under the
new epoch, so every branch commit's `Assay-Epoch` is the epoch that pushed it and the audit passes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.conftest import Forge, audit_failures, git
from tests.test_desk import brief, publish, run_desk
from tests.test_desk import work as work  # noqa: F401  (the fixture)

# case -> (points armed one after another, then a clean run), as in test_crash_suite
CASES: dict[str, tuple[list[str], str]] = {
    "push.after-commit": (["push.after-commit"], "a takeover at epoch 2 pushes the work, committed again"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_desk_killed_before_its_push_recommits_under_the_new_epoch(work: Forge, tmp_path: Path,  # noqa: F811
                                                                     case: str) -> None:
    points, _ = CASES[case]
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    for point in points:
        crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT=point)
        assert crashed.code == -signal.SIGKILL, crashed.err
    assert work.tip("refs/heads/assay/ship") == git("--git-dir", str(work.path), "rev-parse", "main").strip()
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "review ready" in again.out, again.err
    bare = ["--git-dir", str(work.path)]
    messages = git(*bare, "log", "-z", "--format=%B", "main..refs/heads/assay/ship").split("\0")
    assert [m for m in messages if m.strip()] and all("Assay-Epoch: 2" in m for m in messages if m.strip())
    assert audit_failures(work.url, "ship") == {}
