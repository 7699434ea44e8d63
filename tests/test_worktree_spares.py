"""A desk's worktrees are reused, never checked out whole again: a worktree whose work is all on the forge goes to a
pool of spares beside it as its run ends, a verify checkout as its rows end, and the next one is a spare made clean
at its commit (HEAD, index and files as a new worktree's). No file of one brief is ever seen by another; a spare
that cannot be made clean is removed (a process killed as it takes or gives one back: tests/crash/
test_crash_worktrees.py). Checked with plain git."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.core.git import SPARES, ForgeGit
from assay.core.git.worktrees import LITTER_S, SPARES_MAX, TAKING
from assay.errors import ForgeError
from tests.conftest import Forge, assay, git
from tests.helpers.desks import DESK, brief, desk_env, publish
from tests.helpers.worktrees import clean_at, listed


@pytest.fixture
def port(forge: Forge, tmp_path: Path) -> ForgeGit:
    port = ForgeGit(forge.url, tmp_path / "cache")
    port.ensure_objects({"refs/heads/main": str(forge.tip("refs/heads/main"))})
    return port


def _second_commit(forge: Forge) -> str:
    publish(forge, {"docs/two.md": "two\n", "briefs/alpha.md": "changed\n"})
    return str(forge.tip("refs/heads/main"))


def test_a_spare_is_made_clean_at_the_next_commit(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    """Given back, a worktree's folder goes to the pool whole; taken, it is clean at the new commit: a file of the
    old one's that is untracked, ignored, changed or staged is gone, and git keeps its record through a prune."""
    main = str(forge.tip("refs/heads/main"))
    later = _second_commit(forge)
    port.ensure_objects({"refs/heads/main": later})
    pool, first, second = tmp_path / "wt" / SPARES, tmp_path / "wt" / "first", tmp_path / "wt" / "second"
    repo = port.worktree(first, main, pool)
    (first / ".gitignore").write_text("*.log\n")
    (first / "build.log").write_text("ignored\n")
    (first / "left.txt").write_text("untracked\n")
    (first / "briefs" / "beta.md").write_text("changed, staged\n")
    repo.git("add", "briefs/beta.md")
    os.makedirs(first / "deep" / "er")
    (first / "deep" / "er" / "x").write_text("x\n")
    port.give_back(first, pool)
    assert not first.exists() and len(os.listdir(pool)) == 1
    assert listed(port.cache) == [str(pool / os.listdir(pool)[0])]  # the record points at its new place
    port.worktree(second, later, pool)
    clean_at(second, later)
    assert os.listdir(pool) == [] and listed(port.cache) == [str(second)]


def test_a_spare_that_hides_a_file_from_git_is_removed(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    """A worktree whose index marks a file assumed unchanged (or skipped) would, as a spare, keep that file as the
    old brief left it: it is removed as it is given back, with its record, and the next worktree made by git."""
    main = str(forge.tip("refs/heads/main"))
    pool, first, second = tmp_path / "wt" / SPARES, tmp_path / "wt" / "first", tmp_path / "wt" / "second"
    repo = port.worktree(first, main, pool)
    repo.git("update-index", "--assume-unchanged", "briefs/alpha.md")
    (first / "briefs" / "alpha.md").write_text("the old brief's secret edit\n")
    assert not port.reusable(first)
    port.give_back(first, pool, keep_unfit=True)  # a brief's worktree: it may hold work, so it stays
    assert (first / "briefs" / "alpha.md").read_text() == "the old brief's secret edit\n"
    port.give_back(first, pool)
    assert not first.exists() and os.listdir(pool) == [] and listed(port.cache) == []
    port.worktree(second, main, pool)
    clean_at(second, main)
    assert "secret" not in (second / "briefs" / "alpha.md").read_text()
    assert listed(port.cache) == [str(second)]


def _one_spare(forge: Forge, port: ForgeGit, tmp_path: Path) -> tuple[str, Path, Path, str]:
    """A worktree at main given back to an empty pool: (main, the pool, a path for the next one, the spare)."""
    main = str(forge.tip("refs/heads/main"))
    pool, first = tmp_path / "wt" / SPARES, tmp_path / "wt" / "first"
    port.worktree(first, main, pool)
    port.give_back(first, pool)
    (spare,) = os.listdir(pool)
    return main, pool, tmp_path / "wt" / "second", spare


def test_a_spare_whose_record_was_pruned_is_removed(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    main, pool, second, spare = _one_spare(forge, port, tmp_path)
    with open(pool / spare / ".git") as f:
        admin = Path(f.read().split(":", 1)[1].strip())
    (admin / "gitdir").write_text(str(tmp_path / "gone" / ".git") + "\n")  # as a kill before it was pointed back
    git("--git-dir", str(port.cache), "worktree", "prune")
    assert not admin.exists()
    port.worktree(second, main, pool)
    clean_at(second, main)
    assert os.listdir(pool) == []


def test_a_take_git_cannot_finish_puts_the_spare_back(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    """A commit the cache lacks: the take fails as a new worktree would, and the spare goes back to the pool (its
    record pointed at it there), to be made clean by the next take."""
    main, pool, second, _ = _one_spare(forge, port, tmp_path)
    with pytest.raises(ForgeError):
        port.worktree(second, "1" * 40, pool)
    (spare,) = os.listdir(pool)
    assert not second.exists() and listed(port.cache) == [str(pool / spare)]
    port.worktree(second, main, pool)
    clean_at(second, main)
    assert os.listdir(pool) == [] and listed(port.cache) == [str(second)]


def test_a_spare_another_taker_holds_is_left_to_it(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    main, pool, second, spare = _one_spare(forge, port, tmp_path)
    other = os.open(pool / spare, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)  # another taker, between its lock and its rename
        port.worktree(second, main, pool)
    finally:
        os.close(other)
    clean_at(second, main)
    assert os.listdir(pool) == [spare] and sorted(listed(port.cache)) == sorted([str(pool / spare), str(second)])


def test_a_full_pool_takes_no_more_and_a_taker_s_leftover_is_litter(forge: Forge, port: ForgeGit,
                                                                     tmp_path: Path) -> None:
    """A worktree given back to a full pool is removed with its record; a spare a killed taker left half made clean
    is never taken, and removed with its record once it is `LITTER_S` old (by the time in its name) and no taker
    holds its lock."""
    main = str(forge.tip("refs/heads/main"))
    pool = tmp_path / "wt" / SPARES
    pool.mkdir(parents=True)
    for k in range(SPARES_MAX):
        (pool / f"junk{k:02d}").mkdir()  # not worktrees: a taker removes each as it finds it no spare
    extra = tmp_path / "wt" / "extra"
    port.worktree(extra, main)
    port.give_back(extra, pool)
    assert not extra.exists() and len(os.listdir(pool)) == SPARES_MAX and listed(port.cache) == []
    for name in os.listdir(pool):
        os.rmdir(pool / name)
    now = int(time.time())
    fresh, stale, held = (pool / f"{TAKING}{at}-{n}" for at, n in ((now, "fresh"), (now - int(LITTER_S) - 60, "stale"),
                                                                    (now - int(LITTER_S) - 60, "held")))
    for leftover in (fresh, stale, held):
        port.worktree(leftover, main)
    taker = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(taker, fcntl.LOCK_EX)  # a taker alive, however long it takes
        taken = tmp_path / "wt" / "taken"
        port.worktree(taken, main, pool)
    finally:
        os.close(taker)
    clean_at(taken, main)
    assert sorted(os.listdir(pool)) == sorted([fresh.name, held.name])  # the stale one removed, with its record
    assert sorted(listed(port.cache)) == sorted([str(fresh), str(held), str(taken)])


def test_a_worktree_with_git_state_of_its_own_is_no_spare(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    """A worktree whose record holds more than a commit's files (a rebase under way here) is removed as it is given
    back, with its record; one whose history is all it holds beyond them (a reflog, ORIG_HEAD) is taken, that
    history forgotten."""
    main = str(forge.tip("refs/heads/main"))
    pool, first, second, third = (tmp_path / "wt" / n for n in (SPARES, "first", "second", "third"))
    port.worktree(first, main, pool)
    with open(first / ".git") as f:
        admin = Path(f.read().split(":", 1)[1].strip())
    (admin / "rebase-merge").mkdir()
    assert not port.reusable(first)
    port.give_back(first, pool)
    assert not first.exists() and not admin.exists() and os.listdir(pool) == []
    repo = port.worktree(second, main, pool)
    repo.git("-c", "user.name=a", "-c", "user.email=a@a", "-c", "core.logAllRefUpdates=true", "commit", "-q",
             "--allow-empty", "-m", "its own")
    with open(second / ".git") as f:
        admin = Path(f.read().split(":", 1)[1].strip())
    assert (admin / "logs" / "HEAD").exists() and port.reusable(second)
    port.give_back(second, pool)
    port.worktree(third, main, pool)
    clean_at(third, main)
    assert not {"logs", "COMMIT_EDITMSG", "ORIG_HEAD"} & set(os.listdir(admin))
    assert git("rev-parse", "--git-dir", cwd=third).strip() == str(admin)  # the same record, taken


def test_a_git_file_made_to_name_another_worktree_s_record_moves_nothing(forge: Forge, port: ForgeGit,
                                                                        tmp_path: Path) -> None:
    """A checkout whose `.git` was made to name another worktree's record is not given back (the other one's
    record is left as it is), and adopted it gets a record of its own."""
    main = str(forge.tip("refs/heads/main"))
    pool, victim, rows = tmp_path / "wt" / SPARES, tmp_path / "wt" / "victim", tmp_path / "wt" / "rows"
    port.worktree(victim, main, pool)
    port.worktree(rows, main, pool)
    (rows / ".git").write_text((victim / ".git").read_text())
    port.give_back(rows, pool)
    assert rows.exists() and not pool.exists() and listed(port.cache) == sorted([str(rows), str(victim)])
    clean_at(victim, main)
    port.worktree(rows, main, pool)  # adopted: rehomed, with a record of its own
    assert git("rev-parse", "--git-dir", cwd=rows).strip() != git("rev-parse", "--git-dir", cwd=victim).strip()
    assert str(rows) in listed(port.cache) and str(victim) in listed(port.cache)


def test_a_clean_checkout_is_one_thread_s_at_a_time(forge: Forge, port: ForgeGit, tmp_path: Path) -> None:
    """Rows in a clean checkout hold its lock; it is given back as they end, and no lock file is left."""
    import fcntl

    main = str(forge.tip("refs/heads/main"))
    checkout = tmp_path / "verify" / "desk" / "brief"
    lock = checkout.parent / ".brief.lock"
    with port.clean_checkout(checkout, main) as repo:
        assert repo.head() == main
        other = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another thread's rows would wait here
        finally:
            os.close(other)
    assert not checkout.exists() and not lock.exists() and len(os.listdir(checkout.parent / SPARES)) == 1


def test_a_desk_s_next_brief_is_worked_in_the_last_one_s_worktree_made_clean(forge: Forge, tmp_path: Path) -> None:
    """One desk, two briefs in turn: the second's worktree and verify checkout are the first's, given back and made
    clean (no `git worktree add` in the second run); neither its agent nor its verify row sees a file of the first
    brief's (committed, ignored or made by the first's verify row), and its branch holds only its own work."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1), ".gitignore": "*.log\n",
                    "briefs/a-one.md": brief("One", ["write one.txt one", "write build.log ignored"],
                                             "touch made-by-verify.txt && test -f one.txt"),
                    "briefs/b-two.md": brief("Two", ["run ! test -e one.txt -o -e build.log -o -e made-by-verify.txt",
                                                     "write two.txt two"],
                                             "! test -e one.txt -o -e made-by-verify.txt && test -f two.txt")})
    for brief_id in ("a-one", "b-two"):
        log = tmp_path / f"{brief_id}.git.log"
        ran = assay("desk", "run", "builder", "--once", "--max-briefs", "1", "--forge", forge.url,
                    env=desk_env(tmp_path, GIT_TRACE2_EVENT=str(log)), timeout=120)
        assert ran.code == 0 and "review ready" in ran.out, ran.out + ran.err
        made = '"worktree","add"' in log.read_text()  # git's trace of each command it ran
        assert made == (brief_id == "a-one")  # the first brief's worktrees made by git; none for the second
    state = next((tmp_path / "state").iterdir())
    for kind in ("worktrees", "verify"):
        folder = state / kind / "builder"
        assert sorted(os.listdir(folder)) == [SPARES], kind  # each given back as its run or rows ended
        assert len(os.listdir(folder / SPARES)) == 1, kind  # the first one's, taken and given back again
    main = str(forge.tip("refs/heads/main"))
    changed = git("--git-dir", str(forge.path), "diff", "--name-only", main, "refs/heads/assay/b-two").split()
    assert changed == ["two.txt"]


def test_processes_making_worktrees_of_one_cache_at_once_all_make_theirs(forge: Forge, port: ForgeGit,
                                                                          tmp_path: Path) -> None:
    """Desks of one host (processes) make their worktrees of a shared cache at the same moment, each pruning first
    (a new process's first) the records of the last round's, whose folders are gone: git's `worktree add` reads every
    record as it makes its own, and dies on one another process has half made or half removed; `worktree prune`
    removes the records' folder under an add. Each makes its own, whole, round after round."""
    main = str(forge.tip("refs/heads/main"))
    for round in range(4):
        folders = [tmp_path / "wt" / f"r{round}-{i:02d}" for i in range(12)]
        failed = _at_once(forge.url, tmp_path / "cache", folders, main)
        assert not failed, failed[:2]
        assert sorted(listed(port.cache))[-len(folders):] == [str(f) for f in folders]
        for folder in folders:
            clean_at(folder, main)
            shutil.rmtree(folder)  # its record left for the next round's prunes


def _at_once(url: str, cache: Path, folders: list[Path], commit: str) -> list[str]:
    """A process a folder, each making its worktree of `cache` there, all at once (each loaded, then let go
    together); what those that failed said."""
    wait, go = os.pipe()  # each child, loaded, says so on `ready`, then reads `wait` until the parent closes `go`
    said, ready = os.pipe()
    code = ("import os, sys\nfrom pathlib import Path\nfrom assay.core.git import ForgeGit\n"
            "port = ForgeGit(sys.argv[1], sys.argv[2])\nimport assay.core.git.worktrees\n"
            "os.write(int(sys.argv[6]), b'.')\nos.read(int(sys.argv[3]), 1)\n"
            "port.worktree(Path(sys.argv[4]), sys.argv[5])\n")
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, url, str(cache), str(wait), str(folder), commit,
                                   str(ready)], stderr=subprocess.PIPE, text=True, pass_fds=(wait, ready))
                 for folder in folders]
    finally:
        os.close(wait)
        os.close(ready)
    loaded = b""
    while len(loaded) < len(folders) and (more := os.read(said, len(folders))):  # an early end: a child failed
        loaded += more
    os.close(said)
    os.close(go)  # all at once
    ended = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    return [err for code, err in ended if code]


def test_a_process_paused_holding_the_worktrees_lock_is_said_not_waited_for(forge: Forge, port: ForgeGit,
                                                                           tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process of the cache holds its worktrees' lock and does not let go (paused, SIGSTOP): a new worktree
    waits for it up to twice git's time limit, then says which lock and what to do; nothing is made meanwhile."""
    from assay.core.git.objects import RECORDS_LOCK

    monkeypatch.setenv("ASSAY_GIT_TIMEOUT", "0.2")
    held = os.open(os.path.join(port.cache, RECORDS_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ForgeError) as raised:
            port.worktree(tmp_path / "wt" / "paused", str(forge.tip("refs/heads/main")))
        assert RECORDS_LOCK in raised.value.message and "paused" in (raised.value.hint or "")
        assert not (tmp_path / "wt" / "paused" / ".git").exists() and listed(port.cache) == []
    finally:
        os.close(held)
    port.worktree(tmp_path / "wt" / "paused", str(forge.tip("refs/heads/main")))  # let go: made at once
    assert listed(port.cache) == [str(tmp_path / "wt" / "paused")]
