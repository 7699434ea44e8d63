"""The worktree travels with the checkpoint: each agent-session checkpoint records the worktree as a snapshot commit
on refs/assay/wip/<brief>, in the same push as its entry; a successor elsewhere and a fork restore it, `review
show` shows it, the work branch never holds it, and retiring the brief deletes its ref. Checked with plain git."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from assay.core import wip
from assay.core.git import ForgeGit
from assay.core.records import JournalEntry
from assay.core.retired import entry_path
from assay.desk import sessions
from assay.errors import RecordInvalid
from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.desks import desk_env, publish, run_desk
from tests.helpers.sessiondesks import AGENT, BRIEF, DESK
from tests.journal_check import entries, invariants

QUICK = DESK.format(agent=AGENT).replace("heartbeat_s: 5", "heartbeat_s: 1")  # a checkpoint a second or so in


def _checkpoints(forge: Forge, brief: str) -> list[dict[str, Any]]:
    return [e for e in entries(forge.path, brief) if e["kind"] == "checkpoint"]


def _await_snapshot(forge: Forge, brief: str, desk: subprocess.Popen[str]) -> dict[str, Any]:
    """The first checkpoint that names a worktree snapshot, once it is on the forge (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        found = [e for e in _checkpoints(forge, brief) if (e.get("data") or {}).get("worktree")]
        if found:
            return found[0]
        assert desk.poll() is None and time.monotonic() < deadline, "no checkpoint with a worktree was journaled"
        time.sleep(0.05)


def _show(forge: Forge, rev: str) -> str:
    return git("--git-dir", str(forge.path), "show", rev)


def _files(forge: Forge, rev: str) -> list[str]:
    return git("--git-dir", str(forge.path), "ls-tree", "-r", "--name-only", rev).split()


def _own_bytes(forge: Forge, commit: str) -> int:
    """What a snapshot adds to the forge: its objects that its parents lack, as stored there."""
    parents = git("--git-dir", str(forge.path), "rev-parse", f"{commit}^@").split()
    listed = git("--git-dir", str(forge.path), "rev-list", "--objects", commit, "--not", *parents)
    names = "".join(line.split()[0] + "\n" for line in listed.splitlines())
    sizes = git("--git-dir", str(forge.path), "cat-file", "--batch-check=%(objectsize:disk)", input=names)
    return sum(int(n) for n in sizes.split())


def test_a_successor_elsewhere_has_the_files_the_dead_desk_had_not_pushed(forge: Forge, tmp_path: Path) -> None:
    """A desk is killed while its agent waits after a turn that wrote files it never committed. A successor with
    another HOME, worktree path and cache restores them before the agent resumes; `review show` showed them as
    unsaved work meanwhile; the branch it pushes holds no snapshot; retiring the brief deletes its wip ref."""
    publish(forge, {"desks/talker.yaml": QUICK,
                    "briefs/talk.md": BRIEF.format(check="grep -q 'talk turn 1' turn-1.txt && "
                                                         "grep -q 'saw 1 at' seen.txt")})
    first = tmp_path / "first"
    env = {**os.environ, **desk_env(first, HOME=str(first / "home"), ASSAY_CACHE_DIR=str(first / "cache"),
                                    SESSION_AGENT_HANG="1")}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "talker", "--once", "--forge", forge.url],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        saved = _await_snapshot(forge, "talk", desk)
    finally:
        desk.send_signal(signal.SIGKILL)
        desk.wait()
    snapshot = str(saved["data"]["worktree"])
    assert forge.tip("refs/assay/wip/talk") == snapshot  # moved in the checkpoint's own push
    assert "turn-1.txt" in _files(forge, snapshot) and _show(forge, f"{snapshot}:turn-1.txt") == "talk turn 1\n"
    shown = assay("review", "show", "talk", "--json", "--forge", forge.url).json()
    assert isinstance(shown, dict) and shown["unsaved"] == {"seq": saved["seq"], "commit": snapshot, "files": 3}
    text = assay("review", "show", "talk", "--forge", forge.url)
    assert f"unsaved work at checkpoint seq {saved['seq']}: 3 files" in text.out, text.out + text.err

    second = tmp_path / "second"  # another machine: another HOME, worktree path and cache
    run = run_desk(forge, "talker", second, HOME=str(second / "home"), ASSAY_CACHE_DIR=str(second / "cache"))
    assert run.code == 0 and "took over talk" in run.out and "review ready" in run.out, run.out + run.err
    assert f"worktree restored as checkpoint seq {saved['seq']} saved it" in run.out
    assert "talk attempt 1 failed" not in run.out  # the restored file passed verify at once
    branch = "refs/heads/assay/talk"
    assert _show(forge, f"{branch}:turn-1.txt") == "talk turn 1\n"  # written by the dead desk's agent only
    assert _show(forge, f"{branch}:turn-2.txt") == "talk turn 2\n"
    assert sessions.WORKTREE_SAID["restored"] in _show(forge, f"{branch}:prompt.txt").replace("\n", " ")
    snapshots = [str(e["data"]["worktree"]) for e in _checkpoints(forge, "talk")
                 if (e.get("data") or {}).get("worktree")]
    assert len(snapshots) >= 2 and forge.tip("refs/assay/wip/talk") == snapshots[-1]
    for sha in snapshots:  # the review branch never holds a snapshot
        assert subprocess.run(["git", "--git-dir", str(forge.path), "merge-base", "--is-ancestor", sha, branch]
                              ).returncode == 1
    assert git("--git-dir", str(forge.path), "merge-base", "--is-ancestor", snapshots[0],
               snapshots[-1]) == ""  # one chain, forward only
    shown = assay("review", "show", "talk", "--json", "--forge", forge.url).json()
    assert isinstance(shown, dict) and shown["unsaved"] is None  # the newest snapshot is what was pushed
    assert invariants(forge.path, "talk") == []
    assert audit_failures(forge.url, "talk") == {}
    sweep = assay("sweep", "--dry-run", "--json", "--forge", forge.url).json()
    assert isinstance(sweep, dict) and not [f for f in sweep["findings"] if f["kind"] == "junk"], sweep

    for line in (f"checkpoint seq {e['seq']}: transcript {e['data']['bytes']} bytes, "
                 f"worktree objects {_own_bytes(forge, str(e['data']['worktree']))} bytes"
                 for e in _checkpoints(forge, "talk") if (e.get("data") or {}).get("worktree")):
        print(line)

    assert assay("review", "merge", "talk", "--forge", forge.url).code == 0
    done = assay("release", "talk", "--desk", "talker", "--outcome", "done", "--reason", "merged",
                 "--forge", forge.url)
    assert done.code == 0, done.err
    retired = assay("retire", "talk", "--forge", forge.url)
    assert retired.code == 0, retired.err
    assert forge.tip("refs/assay/wip/talk") is None
    record = _show(forge, f"refs/assay/retired:{entry_path('talk')}")
    assert f'"refs/assay/wip/talk": "{snapshots[-1]}"' in record
    assert git("--git-dir", str(forge.path), "merge-base", "--is-ancestor", snapshots[-1],
               "refs/assay/retired-keep") == ""


def test_a_fork_at_a_checkpoint_has_that_checkpoints_files_and_none_written_later(forge: Forge,
                                                                                  tmp_path: Path) -> None:
    """`talk`'s attempt 1 writes turn-1.txt, its attempt 2 (resumed) turn-2.txt. A fork at the first checkpoint
    gets that checkpoint's snapshot as its own: turn-1.txt as talk wrote it, and no turn-2.txt of talk's."""
    publish(forge, {"desks/talker.yaml": DESK.format(agent=AGENT),
                    "briefs/talk.md": BRIEF.format(check="grep -q 'saw 1 at attempt 2' seen.txt")})
    assert run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home")).code == 0
    saved = [e for e in _checkpoints(forge, "talk") if (e.get("data") or {}).get("worktree")]
    first, last = saved[0], saved[-1]
    assert "turn-2.txt" in _files(forge, str(last["data"]["worktree"]))
    forked = assay("brief", "fork", "early", "--from", "talk", "--at", str(first["seq"]), "--json",
                   "--forge", forge.url, cwd=forge.seed)
    said = forked.json()
    snapshot = str(first["data"]["worktree"])
    assert forked.code == 0 and isinstance(said, dict) and said["worktree"] == snapshot, forked.err
    assert forge.tip("refs/assay/wip/early") == snapshot
    assert "turn-1.txt" in _files(forge, snapshot) and "turn-2.txt" not in _files(forge, snapshot)
    text = (forge.seed / "briefs" / "early.md").read_text()
    (forge.seed / "briefs" / "early.md").write_text(text.replace(
        "grep -q 'saw 1 at attempt 2' seen.txt", "grep -q 'talk turn 1' turn-1.txt && grep -q 'saw 1 at' seen.txt"))
    publish(forge, {})
    run = run_desk(forge, "talker", tmp_path / "elsewhere", HOME=str(tmp_path / "home-2"))
    assert run.code == 0 and "review ready" in run.out, run.out + run.err
    assert "worktree restored as checkpoint seq 1 saved it" in run.out
    branch = "refs/heads/assay/early"
    assert _show(forge, f"{branch}:turn-1.txt") == "talk turn 1\n"
    assert _show(forge, f"{branch}:turn-2.txt") == "early turn 2\n"  # its own second turn, not talk's


def test_a_snapshot_holds_the_worktree_scrubbed_and_is_skipped_over_its_limit(forge: Forge, tmp_path: Path) -> None:
    """A snapshot is the worktree's files that are not ignored (an untracked one too, a deleted one gone), on the
    agent's own commit, a known credential replaced by [redacted]; nothing changed: the same snapshot; over the
    limit: none, said once."""
    port = ForgeGit(forge.url, tmp_path / "cache")
    try:
        main = str(forge.tip("refs/heads/main"))
        port.ensure_objects({"refs/heads/main": main})
        tree = tmp_path / "wt"
        repo = port.worktree(tree, main)
        (tree / ".gitignore").write_text("*.log\n")
        repo.commit_all("the agent's own commit")
        own = repo.head()
        token = "ghp_" + "T0ken" * 8
        (tree / "notes.txt").write_text(f"the token is {token}\n")
        (tree / "run.log").write_text(f"ignored {token}\n")
        (tree / "briefs" / "alpha.md").unlink()
        snap = wip.take(port, tree, [token.encode()])
        assert snap is not None and snap.files == 2
        files = git("--git-dir", str(port.cache), "ls-tree", "-r", "--name-only", snap.commit).split()
        assert "notes.txt" in files and "run.log" not in files and "briefs/alpha.md" not in files
        assert git("--git-dir", str(port.cache), "show", f"{snap.commit}:notes.txt") == "the token is [redacted]\n"
        assert git("--git-dir", str(port.cache), "rev-parse", f"{snap.commit}^@").split() == [own]
        assert (tree / "notes.txt").read_text() == f"the token is {token}\n"  # the worktree itself is untouched
        assert git("status", "--porcelain", cwd=tree).split() == ["D", "briefs/alpha.md", "??", "notes.txt"]
        again = wip.take(port, tree, [token.encode()], previous=snap.commit)
        assert again is not None and again.commit == snap.commit  # nothing changed since: no new commit
        (tree / "more.txt").write_text("more\n")
        later = wip.take(port, tree, [token.encode()], previous=snap.commit)
        assert later is not None and git("--git-dir", str(port.cache), "rev-parse", f"{later.commit}^@").split() \
            == [own, snap.commit]

        elsewhere = tmp_path / "elsewhere"  # a successor's worktree, at main, with files of its own
        other = port.worktree(elsewhere, main)
        (elsewhere / "stale.txt").write_text("not in the snapshot\n")
        (elsewhere / "keep.log").write_text("ignored: kept\n")
        assert wip.restore(port, elsewhere, "alpha", later.commit) is True
        assert other.head() == own and (elsewhere / "more.txt").read_text() == "more\n"
        assert (elsewhere / "notes.txt").read_text() == "the token is [redacted]\n"
        assert not (elsewhere / "stale.txt").exists() and not (elsewhere / "briefs" / "alpha.md").exists()
        assert (elsewhere / "keep.log").exists()
        assert git("status", "--porcelain", cwd=elsewhere).split() == ["D", "briefs/alpha.md", "??", "more.txt",
                                                                       "??", "notes.txt"]
        repo.commit_all("pushed after the snapshot")
        assert wip.restore(port, tree, "alpha", later.commit) is False  # past it already: left as it is
        assert (tree / "notes.txt").read_text() == f"the token is {token}\n"
        with pytest.raises(RecordInvalid):
            wip.restore(port, tree, "alpha", "HEAD\nrefs/heads/main")

        (tree / "big.txt").write_text("x" * 100)
        said: list[str] = []
        recorder = wip.Recorder("alpha", tree, [], said.append, "talker", limit=10)
        for _ in range(2):
            with recorder.recording(port) as (data, refs):
                assert data == {} and refs == []
        assert len(said) == 1 and "over 10 bytes" in said[0], said
    finally:
        port.close()


def test_a_snapshot_that_failed_to_restore_is_not_tried_again() -> None:
    def entry(seq: int, kind: str, data: dict[str, object]) -> JournalEntry:
        return JournalEntry(seq=seq, epoch=1, kind=kind, at="2030-01-01T00:00:00Z", data=data)

    snapshot = "ab" * 20
    saved = entry(1, "checkpoint", {"name": sessions.NAME, "session": "a", "worktree": snapshot})
    assert sessions.latest([saved], lambda e: b"t") == sessions.Saved(1, "a", b"t", "", snapshot)
    failed = entry(2, "note", {"worktree": "failed", "of": 1, "why": "gone"})
    assert sessions.latest([saved, failed], lambda e: b"t") == sessions.Saved(1, "a", b"t")  # the conversation stays
    assert "as last pushed" in sessions.resumed_note(sessions.Saved(1, "a", b"t"), "/w")
    assert sessions.WORKTREE_SAID["restored"] in sessions.resumed_note(sessions.Saved(1, "a", b"t"), "/w", "restored")
