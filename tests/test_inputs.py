"""Bad input and bad surroundings are clear errors (what, where, how to fix; exit 2) before anything is written:
a broken or oversized brief, a bad setting, an unusable cache or state folder; a forge that stalls fails fast."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from tests.conftest import Forge, assay, brief_md, git
from tests.helpers.desks import brief, desk_env, publish


def refs(forge: Forge) -> str:
    return git("--git-dir", str(forge.path), "for-each-ref", "--format=%(refname) %(objectname)")


def test_a_brief_that_does_not_validate_is_never_claimed(forge: Forge) -> None:
    publish(forge, {"briefs/open.md": "---\ntitle: Never closed\nlabels: [x]\n",
                    "briefs/long.md": brief_md("T" * 201)})
    before = refs(forge)
    broken = assay("claim", "open", "--desk", "me", "--forge", forge.url)
    assert broken.code == 2 and "briefs/open.md:1: the front matter is never closed" in broken.err
    long = assay("claim", "long", "--desk", "me", "--forge", forge.url)
    assert long.code == 2 and "briefs/long.md:2: `title` is 201 characters; at most 200" in long.err
    assert refs(forge) == before


def test_a_huge_brief_is_a_lint_problem(forge: Forge) -> None:
    publish(forge, {"briefs/huge.md": brief_md("Huge") + "x" * (300 * 1024)})
    lint = assay("brief", "lint", str(forge.seed / "briefs"))
    assert lint.code == 2 and "briefs/huge.md: the brief is 307," in lint.out + lint.err


def test_bad_settings_and_unusable_folders_are_bad_input(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/job.md": brief("Job", ["write job.txt j"], "test -f job.txt")})
    before = refs(work)
    timeout = assay("claims", "--forge", work.url, env={"ASSAY_GIT_TIMEOUT": "abc"})
    assert timeout.code == 2 and "ASSAY_GIT_TIMEOUT='abc' is not a number of seconds above 0" in timeout.err
    cache = assay("claims", "--forge", work.url, env={"ASSAY_CACHE_DIR": "/dev/null/cache"})
    assert cache.code == 2 and "cannot use /dev/null/cache as Assay's cache" in cache.err
    state = assay("desk", "run", "builder", "--once", "--state-dir", "/dev/null/state", "--forge", work.url,
                  env=desk_env(tmp_path))
    assert state.code == 2 and "cannot use /dev/null/state as the desk's state folder" in state.err
    assert "Traceback" not in timeout.err + cache.err + state.err
    assert refs(work) == before  # nothing claimed


def test_a_relative_state_dir_works(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/job.md": brief("Job", ["write job.txt j"], "test -f job.txt")})
    here = tmp_path / "here"
    here.mkdir()
    run = assay("desk", "run", "builder", "--once", "--state-dir", "rel", "--forge", work.url, cwd=here,
                env=desk_env(tmp_path))
    assert run.code == 0 and "review ready" in run.out, run.out + run.err
    assert (here / "rel" / "worktrees").is_dir()


def test_a_forge_that_accepts_and_never_answers_fails_fast(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)  # never answered
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/silent.git"
        run = assay("claims", "--forge", url, env={"ASSAY_GIT_STALL_S": "2"}, timeout=60)
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes accept(): closed under it, its number could be reused
        listener.close()
        thread.join(timeout=10)
        for conn in held:
            conn.close()
    assert run.code == 1 and "cannot read forge" in run.err, run.err
    assert "too slow" in run.err.lower() or "timed out" in run.err.lower(), run.err


def test_a_forge_with_no_main_branch_is_one_error_with_one_exit_code(tmp_path: Path) -> None:
    """Every command that needs main says the same thing with the same code (2, bad input: push main first),
    and writes nothing."""
    bare = tmp_path / "empty.git"
    git("init", "-q", "--bare", "--initial-branch=main", str(bare))
    env = {"ASSAY_FORGE": str(bare), "ASSAY_STATE_DIR": str(tmp_path / "state"),
           "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    for args in (["briefs"], ["sweep"], ["board", "build", "--out", str(tmp_path / "site")], ["desk", "list"],
                 ["desk", "run", "builder", "--once"], ["claim", "fix-login", "--desk", "builder"], ["audit", "--all"]):
        run = assay(*args, env=env)
        assert run.code == 2, (args, run.code, run.err)
        assert "the forge has no main branch" in run.err and "push the repository's main" in run.err, (args, run.err)
        assert "Traceback" not in run.err
    assert git("--git-dir", str(bare), "for-each-ref").strip() == ""  # nothing written
