"""The worktree travels with the checkpoint: each agent-session checkpoint records the worktree as a snapshot commit
on refs/assay/wip/<brief>, in the same push as its entry; a successor elsewhere and a fork restore it, `review
show` shows it, the work branch never holds it, and retiring the brief deletes its ref. Checked with plain git."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay.core import wip
from assay.core.git import ForgeGit, WorkRepo
from assay.core.records import JournalEntry
from assay.core.records.codec import decode_entry
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
    assert f"unsaved work at journal entry {saved['seq']}: 3 files" in text.out, text.out + text.err

    second = tmp_path / "second"  # another machine: another HOME, worktree path and cache
    run = run_desk(forge, "talker", second, HOME=str(second / "home"), ASSAY_CACHE_DIR=str(second / "cache"))
    assert run.code == 0 and "took over talk" in run.out and "review ready" in run.out, run.out + run.err
    assert f"worktree restored as journal entry {saved['seq']} saved it" in run.out
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
    assert "worktree restored as journal entry 1 saved it" in run.out
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


def test_a_read_of_a_worktree_nothing_changed_in_hashes_nothing_again(forge: Forge, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Read again with nothing changed (each file older than the racy window): the same tree from one git
    process, its status (a whole read is four); a file grown, one of the same size with new times, a new file, a
    commit, a file written as the read ran, a repository in the worktree, or a file changed inside the window:
    read whole, and the tree says so."""
    port = ForgeGit(forge.url, tmp_path / "cache")
    try:
        main = str(forge.tip("refs/heads/main"))
        port.ensure_objects({"refs/heads/main": main})
        tree = tmp_path / "wt"
        repo = port.worktree(tree, main)
        (tree / "a.txt").write_text("one\n")
        calls: list[str] = []
        run = WorkRepo.git

        before_add: list[Callable[[], object]] = []  # what the agent writes while a read runs, before its `add`

        def counted(self: WorkRepo, *args: str, **kw: Any) -> Any:
            calls.append(args[0])
            if args[0] == "add" and before_add:
                before_add.pop()()
            return run(self, *args, **kw)

        monkeypatch.setattr(WorkRepo, "git", counted)
        monkeypatch.setattr(wip, "now_ns", lambda: time.time_ns() + 10 * wip.RACY_NS)  # every write is old
        seen = wip.Seen()

        def read() -> tuple[wip.Worktree, list[str]]:
            del calls[:]
            found = wip.read(port, tree, [], seen=seen)
            assert found is not None
            return found, list(calls)

        first, made = read()
        assert made == ["status", "add", "diff-index", "write-tree"]
        again, made = read()
        assert again == first and made == ["status"]
        (tree / "a.txt").write_text("one, two\n")
        grown, made = read()
        assert grown.tree != first.tree and "write-tree" in made
        (tree / "a.txt").write_text("ONE, TWO\n")  # the same size: its times tell
        os.utime(tree / "a.txt", ns=(1, 1))
        same_size, made = read()
        assert same_size.tree not in (first.tree, grown.tree) and "write-tree" in made
        assert read()[1] == ["status"]
        (tree / "b.txt").write_text("new\n")
        assert read()[0].files == 2
        repo.commit_all("the agent commits")
        committed, made = read()
        assert committed.head == repo.head() and committed.files == 0 and "write-tree" in made
        (tree / "a.txt").write_text("changed once more\n")
        before_add.append(lambda: (tree / "swap.tmp").write_text("written as the read ran\n"))
        mid, made = read()
        assert mid.files == 2 and "write-tree" in made  # the tree holds what `add` found
        (tree / "swap.tmp").unlink()  # gone again: the account is as before, the tree is not
        after, made = read()
        assert after.tree != mid.tree and after.files == 1 and "write-tree" in made
        git("init", "-q", str(tree / "nested"))  # a repository in the worktree: its commits leave its folder's times
        git("-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "one",
            cwd=tree / "nested")
        read()
        git("-c", "user.name=a", "-c", "user.email=a@x", "commit", "-q", "--allow-empty", "-m", "two",
            cwd=tree / "nested")
        assert "write-tree" in read()[1]
        monkeypatch.setattr(wip, "now_ns", time.time_ns)  # a file written just now may change unseen: read whole
        (tree / "c.txt").write_text("fresh\n")
        assert "write-tree" in read()[1] and "write-tree" in read()[1]
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
    assert sessions.newest_files([saved]) == sessions.Files(1, 1, snapshot)
    assert sessions.newest_files([saved, failed]) is None
    later = entry(3, "result", {"output": {"exit_code": 0}, "worktree": "cd" * 20})
    assert sessions.newest_files([saved, failed, later]) == sessions.Files(3, 1, "cd" * 20)
    assert sessions.newest_files([saved, later, entry(4, "note", {"worktree": "failed", "of": 3})]) == \
        sessions.Files(1, 1, snapshot)  # an older snapshot, when the newer one failed to restore


def _await_result(forge: Forge, brief: str, step: str, desk: subprocess.Popen[str]) -> dict[str, Any]:
    """The first result of `step` on the forge (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        found = [e for e in entries(forge.path, brief) if e["kind"] == "result" and e.get("step") == step]
        if found:
            return found[0]
        assert desk.poll() is None and time.monotonic() < deadline, f"no result of {step} was journaled"
        time.sleep(0.05)


def _killed_after_make(forge: Forge, tmp_path: Path, made: Path, checkpoint: bool) -> tuple[dict[str, Any], int]:
    """A desk whose agent runs step `make` (it writes made.txt, uncommitted) after its conversation's checkpoint,
    killed once the step's result is on the forge: (that result, the newest checkpoint's seq before it or 0)."""
    first = tmp_path / "first"
    env = {**os.environ, **desk_env(first, HOME=str(first / "home"), ASSAY_CACHE_DIR=str(first / "cache"),
                                    SESSION_AGENT_HANG="1", SESSION_AGENT_MAKE=str(made))}
    if not checkpoint:
        Path(f"{made}.go").write_text("")
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "talker", "--once", "--forge", forge.url],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        saved = _await_snapshot(forge, "talk", desk)["seq"] if checkpoint else 0
        Path(f"{made}.go").write_text("")
        result = _await_result(forge, "talk", "make", desk)
    finally:
        desk.send_signal(signal.SIGKILL)
        desk.wait()
    assert made.read_text() == "ran\n"
    assert max([0, *(e["seq"] for e in _checkpoints(forge, "talk"))]) == saved < result["seq"]  # none after it
    snapshot = str(result["data"]["worktree"])  # the files as the step left them ride its result
    assert forge.tip("refs/assay/wip/talk") == snapshot and _show(forge, f"{snapshot}:made.txt") == "made\n"
    return result, saved


@pytest.mark.parametrize("session", [True, False], ids=["resumed", "fresh"])
def test_a_successor_has_the_files_of_a_step_its_agent_is_replayed(forge: Forge, tmp_path: Path,
                                                                     session: bool) -> None:
    """The dead desk's agent ran step `make` after its conversation's last checkpoint (or, without sessions, at
    all): the successor elsewhere restores the files as the step left them, from the snapshot its result carries,
    before its agent calls `make` again and is handed the recorded result, not run again: made.txt is there, and
    the step ran once."""
    desk = QUICK if session else QUICK.replace('"{prompt_file}"]', '"{prompt_file}", --new, one]').replace(
        '  session:\n    new: [--new, "{session}"]\n    resume: [--resume, "{session}"]\n'
        '    file: "{home}/t/{cwd_slug}/{session}.jsonl"\n', "")
    assert ("session:" in desk) == session
    publish(forge, {"desks/talker.yaml": desk,
                    "briefs/talk.md": BRIEF.format(check="grep -q made made.txt && grep -q 'saw' seen.txt")})
    made = tmp_path / "made.log"
    result, checkpoint = _killed_after_make(forge, tmp_path, made, session)
    second = tmp_path / "second"  # another machine: another HOME, worktree path and cache
    run = run_desk(forge, "talker", second, HOME=str(second / "home"), ASSAY_CACHE_DIR=str(second / "cache"),
                   SESSION_AGENT_MAKE=str(made))
    assert run.code == 0 and "took over talk" in run.out and "review ready" in run.out, run.out + run.err
    assert f"worktree restored as journal entry {result['seq']} saved it" in run.out, run.out
    assert made.read_text() == "ran\n"  # replayed: the successor's call did not run the command
    assert "talk attempt 1 failed" not in run.out, run.out  # made.txt passed verify at once
    replays = [e for e in entries(forge.path, "talk")
               if e["kind"] == "note" and (e.get("data") or {}).get("call") == "replay"]
    assert [r["data"]["of"] for r in replays] == [result["seq"]]
    branch = "refs/heads/assay/talk"
    assert _show(forge, f"{branch}:made.txt") == "made\n"
    told = _show(forge, f"{branch}:prompt.txt").replace("\n", " ")
    if session:
        assert f"journal entry {checkpoint}" in told and sessions.WORKTREE_SAID["later"] in told
    else:
        assert sessions.files_note(sessions.Files(result["seq"], 1, "")).replace("\n", " ") in told
    assert invariants(forge.path, "talk") == [] and audit_failures(forge.url, "talk") == {}


def _recorded(forge: Forge, tmp_path: Path) -> tuple[Any, Any, wip.Recorder, Path]:
    """alpha claimed, a worktree of main, and a session whose journal records it: (claims, session, recorder,
    worktree)."""
    from assay.core.claims import Claims
    from assay.core.steps import open_session

    claims = Claims(ForgeGit(forge.url, tmp_path / "cache"))
    claims.claim("alpha", "d")
    main = str(forge.tip("refs/heads/main"))
    claims.git.ensure_objects({"refs/heads/main": main})
    tree = tmp_path / "wt"
    claims.git.worktree(tree, main)
    session = open_session(claims, "alpha", "d", 1, run="r")
    recorder = session.journal.recorder = wip.Recorder("alpha", tree, [], lambda text: None, "d")
    return claims, session, recorder, tree


def test_a_push_carrying_step_results_carries_the_files_they_left(forge: Forge, tmp_path: Path) -> None:
    """With a run's worktree recorded, the push that carries a step's result carries a snapshot of the files then
    (the wip ref moves in it), named by the last result it carries: a safe step's result still waits for the next
    push, and a checkpoint's snapshot taken meanwhile is older than the one it lands with."""
    from assay.core.journal import Journal

    claims, session, recorder, tree = _recorded(forge, tmp_path)
    try:

        def write(name: str) -> Any:
            return lambda key: (tree / name).write_text(f"{name}\n") and {"exit_code": 0}

        session.step("edit", write("one.txt"), input={"path": "one.txt"}, policy="safe")
        assert not [e for e in entries(forge.path, "alpha") if e["kind"] == "result"]  # a safe result waits
        (tree / "two.txt").write_text("two.txt\n")  # the agent's own edit, then its turn's checkpoint
        other = Journal.open(claims.spare(), "alpha", "d", 1, "r", indexed=True)
        with recorder.recording(other.git) as (files, refs):
            other.add("checkpoint", data={"name": "agent-session", **files}, refs=refs)
        saved = str(files["worktree"])
        (tree / "three.txt").write_text("three.txt\n")
        session.step("check", write("four.txt"), input=None, policy="unsafe")  # its intent's push takes the edit's
        results = {e["step"]: e for e in entries(forge.path, "alpha") if e["kind"] == "result"}
        after_edit, after_check = (str(results[s]["data"]["worktree"]) for s in ("edit", "check"))
        checkpoint = next(e["seq"] for e in entries(forge.path, "alpha") if e["kind"] == "checkpoint")
        assert results["edit"]["seq"] > checkpoint  # landed after the checkpoint: it must name newer files
        for snapshot, holds in ((saved, ["one.txt", "two.txt"]), (after_edit, ["one.txt", "three.txt", "two.txt"]),
                                (after_check, ["four.txt", "one.txt", "three.txt", "two.txt"])):
            assert [f for f in _files(forge, snapshot) if f.endswith(".txt")] == holds
        assert git("--git-dir", str(forge.path), "merge-base", "--is-ancestor", saved, after_edit) == ""
        assert forge.tip("refs/assay/wip/alpha") == after_check
        newest = sessions.newest_files([decode_entry(json.dumps(e), "j") for e in entries(forge.path, "alpha")])
        assert newest is not None and newest.commit == after_check
        assert invariants(forge.path, "alpha") == []
        other.git.close()
    finally:
        claims.git.close()


def test_a_restore_keeps_a_merge_of_main_under_way(forge: Forge, tmp_path: Path) -> None:
    """A woken round merges main into its worktree without committing (the round's push commits it); a snapshot
    taken after it, restored into a worktree where the same merge is under way, leaves it under way: the next
    commit is a merge of main, with the snapshot's files."""
    port = ForgeGit(forge.url, tmp_path / "cache")
    try:
        base = str(forge.tip("refs/heads/main"))
        port.ensure_objects({"refs/heads/main": base})
        first = port.worktree(tmp_path / "first", base)
        (forge.seed / "upstream.txt").write_text("main moved\n")
        publish(forge, {})
        main = str(forge.tip("refs/heads/main"))
        port.ensure_objects({"refs/heads/main": main})
        merge = ["-c", "user.name=a", "-c", "user.email=a@a", "merge", "--no-ff", "--no-commit", main]
        first.git(*merge)
        (tmp_path / "first" / "work.txt").write_text("the agent's\n")
        snap = wip.take(port, tmp_path / "first", [])
        assert snap is not None
        second = port.worktree(tmp_path / "second", base)  # another machine: the round merges main first too
        second.git(*merge)
        assert wip.restore(port, tmp_path / "second", "alpha", snap.commit)
        assert (tmp_path / "second" / "work.txt").read_text() == "the agent's\n"
        assert second.commit_all("round", author=None)
        parents = second.git("log", "-1", "--format=%P").stdout.decode().split()
        assert parents == [base, main]
        assert (tmp_path / "second" / "upstream.txt").read_text() == "main moved\n"
        said = port.read_typed([snap.commit])[0]
        assert said is not None and f"Merging: {main}\n".encode() in said.data  # what the restore compared

        first.git("merge", "--abort")  # the agent gave the merge up: a snapshot without it
        (tmp_path / "first" / "work.txt").write_text("the agent's\n")
        aborted = wip.take(port, tmp_path / "first", [])
        assert aborted is not None
        third = port.worktree(tmp_path / "third", base)
        third.git(*merge)  # the next round's merge, under way when that snapshot is restored
        assert wip.restore(port, tmp_path / "third", "alpha", aborted.commit)
        assert not (tmp_path / "third" / "upstream.txt").exists()  # the snapshot's files: no merge in them
        assert third.commit_all("round", author=None)
        assert third.git("log", "-1", "--format=%P").stdout.decode().split() == [base]  # so no merge is claimed
    finally:
        port.close()


def test_a_result_whose_push_failed_names_no_snapshot_that_did_not_land(forge: Forge, tmp_path: Path) -> None:
    """A push carrying a step's result fails after its snapshot was taken; when it is pushed again without one (the
    worktree's changes went over the limit), the entry names none, not the one that never reached the forge."""
    from assay.errors import AssayError

    claims, session, recorder, tree = _recorded(forge, tmp_path)
    try:
        session.step("first", lambda key: (tree / "one.txt").write_text("1\n"), input=None, policy="unsafe")
        session.step("second", lambda key: (tree / "two.txt").write_text("2\n"), input=None, policy="safe")
        away = forge.path.with_name("away.git")
        forge.path.rename(away)  # the forge cannot be reached: the push of the pending result fails
        with pytest.raises(AssayError):
            session.journal.flush()
        away.rename(forge.path)
        recorder.limit = 0  # and now the worktree's changes are over the limit: no snapshot at all
        session.journal.flush()
        second = next(e for e in entries(forge.path, "alpha") if e["kind"] == "result" and e["step"] == "second")
        assert "worktree" not in (second.get("data") or {}), second
        assert invariants(forge.path, "alpha") == []
    finally:
        claims.git.close()


def test_a_snapshot_that_fails_to_restore_gives_way_to_the_one_before_and_the_agent_is_told() -> None:
    """`BriefWork._files_note` tries the newest snapshot first; one that fails (journaled as failed) gives way to
    the one before, and the agent is told a newer one could not be restored; a conversation's own is the oldest
    tried, and a fresh conversation is given an earlier epoch's only in a worktree made new."""
    from types import SimpleNamespace

    from assay.desk.work import BriefWork

    def entry(seq: int, kind: str, data: dict[str, object], epoch: int = 1) -> JournalEntry:
        return JournalEntry(seq=seq, epoch=epoch, kind=kind, at="2030-01-01T00:00:00Z", data=data)

    def desk(entries: list[JournalEntry], broken: set[int], made: bool = True, epoch: int = 2) -> Any:
        journal = SimpleNamespace(entries=entries)
        tried: list[int] = []

        def restore(files: sessions.Files) -> str:
            tried.append(files.seq)
            if files.seq in broken:
                journal.entries = [*journal.entries, entry(99 + len(tried), "note",
                                                           {"worktree": "failed", "of": files.seq})]
                return ""
            return "restored"
        return SimpleNamespace(session=SimpleNamespace(journal=journal), _restore=restore, worktree="/w",
                               _made_worktree=made, epoch=epoch, tried=tried)

    saved = sessions.Saved(2, "s", b"t", "", "a" * 40)
    round_ = [entry(2, "checkpoint", {"name": sessions.NAME, "session": "s", "worktree": "a" * 40}),
              entry(5, "result", {"output": 1, "worktree": "b" * 40}),
              entry(7, "result", {"output": 2, "worktree": "c" * 40})]
    stub = desk(list(round_), broken={7})
    said = BriefWork._files_note(stub, saved)
    assert stub.tried == [7, 5] and sessions.WORKTREE_SAID["later"] in said and sessions.OLDER_SAID in said
    stub = desk(list(round_), broken={7, 5, 2})
    said = BriefWork._files_note(stub, saved)
    assert stub.tried == [7, 5, 2] and sessions.WORKTREE_SAID[""] in said  # none could be: the branch as pushed
    stub = desk(list(round_), broken={7})
    said = BriefWork._files_note(stub, None)
    assert stub.tried == [7, 5] and said == sessions.files_note(sessions.Files(5, 1, "b" * 40), older=True)
    for made, epoch in ((False, 2), (True, 1)):  # this machine's own files, or this epoch's own snapshot
        stub = desk(list(round_), broken=set(), made=made, epoch=epoch)
        assert BriefWork._files_note(stub, None) == "" and stub.tried == []


def test_a_worktrees_git_folder_head_and_merge_are_read_as_git_reads_them(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout's `.git` folder, a worktree's `.git` file (named from another folder, relatively): the git folder,
    HEAD and a merge under way, read without git, are what git says of them."""
    who = ["-c", "user.name=a", "-c", "user.email=a@x"]
    main = tmp_path / "main"
    git("init", "-q", "--initial-branch=main", str(main))
    git(*who, "commit", "-q", "--allow-empty", "-m", "one", cwd=main)
    repo = WorkRepo(main)
    assert repo.git_dir() == git("rev-parse", "--absolute-git-dir", cwd=main).strip()
    assert repo.head() == git("rev-parse", "HEAD", cwd=main).strip()  # a branch's tip: asked of git
    git("worktree", "add", "-q", "--detach", str(tmp_path / "wt"), "HEAD", cwd=main)
    (main / "f.txt").write_text("main\n")
    git("add", "f.txt", cwd=main)
    git(*who, "commit", "-q", "-m", "two", cwd=main)
    monkeypatch.chdir(tmp_path)
    wt = WorkRepo(Path("wt"))
    assert wt.git_dir() == git("rev-parse", "--absolute-git-dir", cwd=tmp_path / "wt").strip() != repo.git_dir()
    assert wt.head() == git("rev-parse", "HEAD", cwd=tmp_path / "wt").strip() and not wt.merging()
    git(*who, "merge", "-q", "--no-ff", "--no-commit", "main", cwd=tmp_path / "wt")
    assert wt.merging() and not repo.merging()
    (tmp_path / "deep" / "er").mkdir(parents=True)  # a `.git` naming its folder relatively, reached through a link
    os.symlink(tmp_path / "deep" / "er", tmp_path / "link")
    wt2 = tmp_path / "link" / "wt2"
    git("worktree", "add", "-q", "--detach", str(wt2), "HEAD", cwd=main)
    real = git("rev-parse", "--absolute-git-dir", cwd=wt2).strip()
    (wt2 / ".git").write_text(f"gitdir: {os.path.relpath(real, tmp_path / 'deep' / 'er' / 'wt2')}\n")
    assert WorkRepo(wt2).git_dir() == git("rev-parse", "--absolute-git-dir", cwd=wt2).strip() == real


def test_a_reader_killed_mid_read_leaves_its_index_copy_only_in_the_worktrees_git_folder(forge: Forge,
                                                                                          tmp_path: Path) -> None:
    """The index a read copies is kept beside the worktree's own, not in the temporary folder: a reader killed
    while git reads it (a desk SIGKILLed) leaves it where it goes with the worktree, and no read leaves it when
    it ends."""
    port = ForgeGit(forge.url, tmp_path / "cache")
    try:
        main = str(forge.tip("refs/heads/main"))
        port.ensure_objects({"refs/heads/main": main})
        tree = tmp_path / "wt"
        port.worktree(tree, main)
        (tree / "a.txt").write_text("one\n")
        shims, scratch = tmp_path / "shims", tmp_path / "tmp"
        shims.mkdir()
        scratch.mkdir()
        real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout
        (shims / "git").write_text(f'#!/bin/sh\ncase " $* " in *" status "*) kill -9 $PPID;; esac\n'
                                   f'exec {real.strip()} "$@"\n')
        (shims / "git").chmod(0o755)
        reader = ("import sys; from pathlib import Path; from assay.core import wip; from assay.core.git import "
                  "ForgeGit; wip.read(ForgeGit(sys.argv[1], sys.argv[2]), Path(sys.argv[3]), [])")
        killed = subprocess.run([sys.executable, "-c", reader, forge.url, str(tmp_path / "cache"), str(tree)],
                                env={**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "TMPDIR": str(scratch)},
                                capture_output=True, text=True)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert list(scratch.iterdir()) == []
        folder = Path(WorkRepo(tree).git_dir())
        [left] = folder.glob("assay-index.*")
        assert wip.read(port, tree, []) is not None  # a read that ends leaves nothing of its own
        assert list(folder.glob("assay-index.*")) == [left]
        shutil.rmtree(tree)  # the brief's work over: its worktree removed, and git's record of it pruned
        git("--git-dir", str(port.cache), "worktree", "prune")
        assert not folder.exists()  # and what the killed one left went with it
    finally:
        port.close()
