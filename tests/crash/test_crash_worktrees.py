"""A process SIGKILLed while it takes a spare worktree from its pool, or gives one back, at each crash point on the
way: the brief's path holds nothing or a clean worktree at its commit (never another brief's files), the next take
makes it right, and git keeps the record of every worktree in use through a prune. Checked with plain git."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from assay.core.git import SPARES, ForgeGit
from assay.core.git.worktrees import TAKING
from tests.conftest import Forge
from tests.helpers.desks import publish
from tests.helpers.worktrees import clean_at, listed

# a subprocess that takes (or gives back) a worktree of the cache, killed at a named crash point
PROGRAM = """
import sys, os
from pathlib import Path
from assay.core.git import ForgeGit
port = ForgeGit(sys.argv[1], sys.argv[2])
what, path, commit = sys.argv[3], Path(sys.argv[4]), sys.argv[5]
if what == "take":
    port.worktree(path, commit, path.parent / ".spare")
elif what == "full":  # a full pool: the worktree is removed as it is given back
    os.makedirs(path.parent / ".spare", exist_ok=True)
    for k in range(32):
        os.makedirs(path.parent / ".spare" / f"full{k:02d}", exist_ok=True)
    port.give_back(path, path.parent / ".spare")
else:
    port.give_back(path, path.parent / ".spare")
"""

CASES: dict[str, tuple[list[str], str]] = {
    "taken": (["worktree.spare-taken"], "a spare renamed out of the pool; not clean yet"),
    "cleaned": (["worktree.spare-cleaned"], "the spare clean at the commit; not at the brief's path"),
    "placed": (["worktree.spare-placed"], "the spare at the brief's path; its locked record points elsewhere"),
    "giving": (["worktree.giving-back"], "a record locked and pointed into the pool; the worktree not moved"),
    "given": (["worktree.given-back"], "a worktree in the pool; its record still locked"),
    "discarding": (["worktree.discarding"], "a worktree no spare renamed aside in the pool, its record naming it"),
}


@pytest.fixture
def port(forge: Forge, tmp_path: Path) -> ForgeGit:
    port = ForgeGit(forge.url, tmp_path / "cache")
    port.ensure_objects({"refs/heads/main": str(forge.tip("refs/heads/main"))})
    return port


def _killed(forge: Forge, tmp_path: Path, what: str, path: Path, commit: str, point: str) -> None:
    killed = subprocess.run([sys.executable, "-c", PROGRAM, forge.url, str(tmp_path / "cache"), what, str(path),
                             commit], env={**os.environ, "ASSAY_CRASH_AT": point}, capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr


@pytest.mark.parametrize("case", ["taken", "cleaned", "placed"])
def test_a_taker_killed_anywhere_leaves_nothing_or_a_clean_worktree(forge: Forge, port: ForgeGit, tmp_path: Path,
                                                                   case: str) -> None:
    main = str(forge.tip("refs/heads/main"))
    publish(forge, {"docs/two.md": "two\n", "briefs/alpha.md": "changed\n"})
    later = str(forge.tip("refs/heads/main"))
    port.ensure_objects({"refs/heads/main": later})
    pool, first, second = tmp_path / "wt" / SPARES, tmp_path / "wt" / "first", tmp_path / "wt" / "second"
    port.worktree(first, main, pool)
    (first / "left.txt").write_text("the first brief's\n")
    port.give_back(first, pool)
    [point], _ = CASES[case]
    _killed(forge, tmp_path, "take", second, later, point)
    found = listed(port.cache)  # a prune first: whatever the kill left in use keeps its record
    if second.exists():  # placed: its record, locked, is kept though it names where the spare was being cleaned
        assert len(found) == 1 and Path(found[0]).parent == pool and Path(found[0]).name.startswith(TAKING)
        clean_at(second, later)
    again = port.worktree(second, later, pool)
    clean_at(second, later)
    found = listed(port.cache)
    assert again.head() == later and str(second) in found
    assert all(Path(p).parent == pool and Path(p).name.startswith(TAKING) for p in found if p != str(second))


@pytest.mark.parametrize("case", ["giving", "given"])
def test_a_giver_killed_anywhere_leaves_its_worktree_in_place_or_a_spare(forge: Forge, port: ForgeGit,
                                                                         tmp_path: Path, case: str) -> None:
    """Killed before the worktree moved: it is adopted where it is (its record pointed back, unlocked), and given
    back again; killed after: the spare, its record still locked, is taken. A prune meanwhile removes neither."""
    main = str(forge.tip("refs/heads/main"))
    pool, first, second = tmp_path / "wt" / SPARES, tmp_path / "wt" / "first", tmp_path / "wt" / "second"
    port.worktree(first, main, pool)
    [point], _ = CASES[case]
    _killed(forge, tmp_path, "give", first, main, point)
    if case == "giving":
        assert first.exists() and not os.listdir(pool)
        (named,) = listed(port.cache)  # its record, locked, names its place in the pool: kept through a prune
        assert Path(named).parent == pool
        port.worktree(first, main, pool)  # adopted
        clean_at(first, main)
        assert listed(port.cache) == [str(first)]
        port.give_back(first, pool)
    assert not first.exists() and len(os.listdir(pool)) == 1
    (spare,) = os.listdir(pool)
    assert listed(port.cache) == [str(pool / spare)]
    port.worktree(second, main, pool)  # and the spare is taken
    clean_at(second, main)
    assert os.listdir(pool) == [] and listed(port.cache) == [str(second)]
    with open(second / ".git") as f:
        admin = f.read().split(":", 1)[1].strip()
    assert not os.path.exists(os.path.join(admin, "locked"))  # unlocked once placed


def test_a_remover_killed_leaves_litter_and_no_second_record_of_the_path(forge: Forge, port: ForgeGit,
                                                                       tmp_path: Path) -> None:
    """Killed as it removes a worktree given back to a full pool: the path is free, the worktree's record names
    the litter aside (never the path), so the path's next worktree is the only one recorded there, through a
    prune; the litter goes, with its record, once a minute old."""
    main = str(forge.tip("refs/heads/main"))
    pool, first = tmp_path / "wt" / SPARES, tmp_path / "wt" / "first"
    port.worktree(first, main, pool)
    [point], _ = CASES["discarding"]
    _killed(forge, tmp_path, "full", first, main, point)
    assert not first.exists()
    (litter,) = [n for n in os.listdir(pool) if n.startswith(".")]
    for name in os.listdir(pool):
        if not name.startswith("."):
            os.rmdir(pool / name)
    port.worktree(first, main, pool)
    assert listed(port.cache) == sorted([str(first), str(pool / litter)])  # one record names the path
    clean_at(first, main)
    stale = pool / litter.replace(litter.split("-")[1], str(int(litter.split("-")[1]) - 120), 1)
    os.rename(pool / litter, stale)  # as a minute later
    with open(stale / ".git") as f:
        admin = Path(f.read().split(":", 1)[1].strip())
    (admin / "gitdir").write_text(str(stale / ".git") + "\n")
    port.give_back(first, pool)  # looks at the pool: the litter is removed
    assert not stale.exists() and not admin.exists()
    assert [n for n in os.listdir(pool) if not n.startswith(".")] and listed(port.cache) == \
        [str(pool / n) for n in os.listdir(pool) if not n.startswith(".")]
