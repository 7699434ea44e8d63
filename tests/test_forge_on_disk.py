"""A push to a forge on this machine keeps every promise `git push` keeps: the forge's object checks, its other
rules, connectivity, and syncing to the disk as the forge's `core.fsync` asks (read from the syscalls)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay.core.git import ForgeGit, RefUpdate, Signature, TreeEntry, vetting
from assay.core.git import run as gitrun
from assay.errors import ForgeError
from tests.conftest import Forge, git
from tests.helpers import synctrace
from tests.helpers.desks import brief, publish, run_desk

WHO = Signature("t", "t@example.invalid")
BAD_GITMODULES = '[submodule "x"]\n\tpath = x\n\turl = --upload-pack=touch PWNED\n'


def fsck(forge: Forge) -> str:
    """`git fsck --strict` of the forge: its errors, or "" when clean."""
    proc = subprocess.run(["git", "--git-dir", str(forge.path), "fsck", "--strict", "--no-dangling"],
                          capture_output=True, text=True)
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


def commit(port: ForgeGit, files: dict[str, str], parents: tuple[str, ...] = ()) -> str:
    tree = port.write_tree([TreeEntry(name, port.write_blob(text.encode())) for name, text in files.items()])
    return port.write_commit(tree, list(parents), "c", WHO, 1_700_000_000)


def raw_push(forge: Forge, files: dict[str, str], ref: str) -> subprocess.CompletedProcess[str]:
    """`git push` of a commit holding `files`, from the seed clone: what the forge itself says to it."""
    for name, text in files.items():
        (forge.seed / name).write_text(text)
    git("add", "-A", cwd=forge.seed)
    git("commit", "-q", "-m", "raw", cwd=forge.seed)
    return subprocess.run(["git", "push", "--porcelain", forge.url, f"HEAD:{ref}"], cwd=forge.seed,
                          capture_output=True, text=True)


@pytest.mark.parametrize("key", ["transfer.fsckObjects", "receive.fsckObjects"])
def test_a_forge_that_checks_objects_refuses_what_git_push_would(forge: Forge, key: str) -> None:
    """A `.gitmodules` whose url is an option (git's gitmodulesUrl check): refused as `git push` is refused, with
    git's reason, nothing of it on the forge; a clean commit still lands. (receive.fsckObjects was vetted before;
    transfer.fsckObjects, which receive-pack reads the same, was not.)"""
    git("--git-dir", str(forge.path), "config", key, "true")
    port = ForgeGit(forge.url)
    try:
        bad = commit(port, {".gitmodules": BAD_GITMODULES})
        refused = port.push([RefUpdate("refs/heads/bad", bad)])["refs/heads/bad"]
        assert refused.status == "rejected" and "gitmodulesUrl" in refused.detail, refused
        assert forge.tip("refs/heads/bad") is None
        assert fsck(forge) == ""
        good = commit(port, {"README": "fine\n"})
        assert port.push([RefUpdate("refs/heads/good", good)])["refs/heads/good"].ok
    finally:
        port.close()
    assert raw_push(forge, {".gitmodules": BAD_GITMODULES}, "refs/heads/raw").returncode != 0  # git's own say
    assert fsck(forge) == ""


def test_an_agents_branch_the_forge_checks_is_refused_with_gits_reason(work: Forge, tmp_path: Path) -> None:
    """Through a desk: the agent commits a `.gitmodules` that smuggles an option; the forge checks objects
    (transfer.fsckObjects), so the push of its branch is refused, the desk says why in git's words, and the
    forge holds nothing of it."""
    git("--git-dir", str(work.path), "config", "transfer.fsckObjects", "true")
    modules = BAD_GITMODULES.replace("\t", "").replace("\n", "\\n")  # the scripted agent's `write` takes `\n`
    publish(work, {"briefs/sub.md": brief("Sub", [f"write .gitmodules {modules}"], "test -f .gitmodules")})
    run = run_desk(work, "builder", tmp_path)
    assert "Traceback" not in run.err + run.out
    assert "gitmodulesUrl" in run.out + run.err, (run.out, run.err)
    assert ".gitmodules" not in git("--git-dir", str(work.path), "ls-tree", "--name-only", "refs/heads/assay/sub")
    assert fsck(work) == ""


def test_a_forge_with_other_rules_of_its_own_gets_the_push_through_git(forge: Forge, tmp_path: Path) -> None:
    """Hidden refs (transfer.hideRefs) and a branch checked out in a worktree of the forge: receive-pack refuses
    to move them, so the fast path is not taken and they stay."""
    port = ForgeGit(forge.url)
    try:
        git("--git-dir", str(forge.path), "config", "transfer.hideRefs", "refs/hidden")
        hidden = port.push([RefUpdate("refs/hidden/x", commit(port, {"h": "h\n"}))])["refs/hidden/x"]
        assert hidden.status == "rejected" and "hidden" in hidden.detail, hidden
        git("--git-dir", str(forge.path), "config", "--unset", "transfer.hideRefs")
        main = forge.tip("refs/heads/main")
        assert main is not None
        git("--git-dir", str(forge.path), "worktree", "add", "-q", str(tmp_path / "checkout"), "main")
        port.ensure_objects({"refs/heads/main": main})
        moved = port.push([RefUpdate("refs/heads/main", commit(port, {"m": "m\n"}, (main,)), main)])
        assert not moved["refs/heads/main"].ok, moved
        assert forge.tip("refs/heads/main") == main and forge.tip("refs/hidden/x") is None
    finally:
        port.close()


def test_settings_only_a_client_reads_leave_the_fast_path_open(forge: Forge, tmp_path: Path) -> None:
    """transfer.credentialsInUrl and transfer.bundleURI are a fetching client's: the forge's receive-pack reads
    neither, so a forge (or a person's global config) with them still takes the fast path; fsckObjects does not."""
    for key, value in (("transfer.credentialsInUrl", "die"), ("transfer.bundleURI", "file:///nowhere")):
        git("--git-dir", str(forge.path), "config", key, value)
    assert vetting.forge_vetting(str(forge.path), str(tmp_path)) == vetting.Vetting(False, False)
    git("--git-dir", str(forge.path), "config", "transfer.fsckObjects", "true")
    assert vetting.forge_vetting(str(forge.path), str(tmp_path)).vets


def test_a_prefetch_reads_the_vetting_and_a_change_made_after_it_is_still_seen(forge: Forge, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A short command's prefetch starts reading how the forge takes a push (`vetting.warm`): its push then finds
    the answer read, no `git` of its own for it; a rule the forge gained after that reading is seen all the same
    (its config's stamp changed: read again)."""
    monkeypatch.setattr(vetting, "_VETTING", {})
    port = ForgeGit(forge.url, tmp_path / "cache")
    try:
        port.prefetch("refs/heads/main")
        reading = vetting._WARMING[str(forge.path)]
        reading.join(30)
        read_by: list[list[str]] = []
        real = gitrun.run_git

        def spied(args: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
            read_by.append(args)
            return real(args, **kw)
        monkeypatch.setattr(vetting, "run_git", spied)
        assert vetting.forge_vetting(str(forge.path), port.cache) == vetting.Vetting(False, False)
        assert read_by == [] and str(forge.path) not in vetting._WARMING

        port.prefetch("refs/heads/main")  # read already: nothing started again
        assert str(forge.path) not in vetting._WARMING
        git("--git-dir", str(forge.path), "config", "receive.denyDeletes", "true")
        assert vetting.forge_vetting(str(forge.path), port.cache).vets
        assert any("config" in args for args in read_by)
    finally:
        port.close()


def test_a_prefetched_vetting_that_failed_is_said_once_and_one_never_started_is_read_by_the_push(
        forge: Forge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The error a prefetch's reading met (git's timeout, say) is the push's: said, not met a second time; and a
    reading whose thread could not be started (a process limit) leaves the push to read the vetting itself."""
    monkeypatch.setattr(vetting, "_VETTING", {})
    monkeypatch.setattr(vetting, "_WARMING", {})
    folder = str(forge.path)
    calls: list[str] = []
    real = vetting._forge_vetting

    def timed_out(where: str, cache: str) -> vetting.Vetting:
        calls.append(where)
        raise ForgeError("git timed out after 120 s")
    monkeypatch.setattr(vetting, "_forge_vetting", timed_out)
    vetting.warm(folder, str(tmp_path))
    with pytest.raises(ForgeError, match="timed out"):
        vetting.forge_vetting(folder, str(tmp_path))
    assert calls == [folder] and not vetting._WARMING

    monkeypatch.setattr(vetting, "_forge_vetting", real)
    monkeypatch.setattr(vetting._Warming, "start", lambda self: (_ for _ in ()).throw(RuntimeError("no thread")))
    vetting.warm(folder, str(tmp_path))
    assert not vetting._WARMING
    assert vetting.forge_vetting(folder, str(tmp_path)) == vetting.Vetting(False, False)


def test_a_commit_the_forge_holds_without_its_tree_is_sent_whole(forge: Forge) -> None:
    """A push cut short can leave a commit on the forge without what it reaches (its tree still to come). Another
    port (a process of its own) pushing that commit sends what it reaches too, as `git push` would: the forge is
    whole after."""
    writer = ForgeGit(forge.url)
    lone = commit(writer, {"f": "made by another process\n"})
    writer.close()
    [cached] = Path(os.environ["ASSAY_CACHE_DIR"]).glob(f"*/objects/{lone[:2]}/{lone[2:]}")
    target = forge.path / "objects" / lone[:2] / lone[2:]
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(cached.read_bytes())  # the commit alone, as a push killed after writing it leaves it
    port = ForgeGit(forge.url)
    try:
        assert port.push([RefUpdate("refs/t/lone", lone)])["refs/t/lone"].ok
    finally:
        port.close()
    assert fsck(forge) == ""
    assert git("--git-dir", str(forge.path), "cat-file", "-p", "refs/t/lone:f") == "made by another process\n"


def test_the_environment_the_fast_paths_git_runs_in_is_the_one_git_push_gives_receive_pack() -> None:
    listed = git("rev-parse", "--local-env-vars").split()
    assert set(listed) <= set(gitrun.LOCAL_REPO_ENV), set(listed) - set(gitrun.LOCAL_REPO_ENV)


ASSAY_PUSHES = """
import sys
from assay.core.claims import Claims
from assay.core.git import ForgeGit, RefUpdate, Signature, TreeEntry

forge = sys.argv[1]
who = Signature("t", "t@example.invalid")

def commit(port, tag):
    return port.write_commit(port.write_tree([TreeEntry("f", port.write_blob(tag.encode()))]), [], tag, who, 1)

port = ForgeGit(forge)
Claims(port).claim("alpha", "d")  # a record: the loose files this process wrote, sent as they are
tips = [commit(port, f"big {i}") for i in range(40)]  # past the unpack limit: a pack, through index-pack
assert all(r.ok for r in port.push([RefUpdate(f"refs/t/big{i}", t) for i, t in enumerate(tips)], atomic=True).values())
lone = commit(ForgeGit(forge), "another's")  # written by another port: through pack-objects | unpack-objects
assert ForgeGit(forge).push([RefUpdate("refs/t/lone", lone)])["refs/t/lone"].ok
"""

RAW_COMMITS = """
set -e
git checkout -q -b small && echo small > small && git add small && git commit -q -m small
git checkout -q -b big main
for i in $(seq 40); do echo "big $i" > big && git add big && git commit -q -m "big $i"; done
"""
RAW_PUSHES = 'git push -q "$1" small:refs/t/small && git push -q "$1" big:refs/t/big'  # past the unpack limit

SYNC_CASES = [  # (the forge's config, core.fsync given in the environment of both pushes)
    ({}, None),
    ({"core.fsync": "loose-object"}, None),
    ({"core.fsync": "committed,-loose-object"}, None),  # git adds what it names after it takes away: synced
    ({"core.fsync": "-loose-object"}, None),
    ({"core.fsync": "obj,reference"}, None),  # a prefix names the components it starts
    ({"core.fsync": "none"}, None),
    ({"core.fsync": "none", "core.fsyncObjectFiles": "true"}, None),
    ({"core.fsync": "loose-object", "core.fsyncMethod": "batch"}, None),  # git: written out, one flush at the end
    ({"core.fsync": "all"}, "none"),  # receive-pack never sees config given in the environment
]


@pytest.mark.skipif(not synctrace.available(), reason="strace is not installed, or may not trace here")
@pytest.mark.parametrize(("config", "given"), SYNC_CASES,
                         ids=[str(c) + (f" env {g}" if g else "") for c, g in SYNC_CASES])
def test_every_write_the_fast_path_makes_is_synced_as_git_push_would_sync_it(
        forge: Forge, tmp_path: Path, config: dict[str, str], given: str | None) -> None:
    """Under strace: the loose objects, packs, pack indexes and refs a push through Assay puts on a forge on disk
    (without `git push`: its own loose files, then `index-pack`, `unpack-objects` and `update-ref`) are synced
    exactly as those `git push` puts there under the same config are; and the forge is whole after."""
    for key, value in config.items():
        git("--git-dir", str(forge.path), "config", key, value)
    env = {**os.environ}
    if given is not None:
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsync", "GIT_CONFIG_VALUE_0": given})
    subprocess.run(["sh", "-c", RAW_COMMITS], cwd=forge.seed, check=True, capture_output=True)
    raw = synctrace.traced(["sh", "-c", RAW_PUSHES, "raw", forge.url], forge.path, tmp_path / "raw", env=env,
                           cwd=forge.seed)
    ours = synctrace.traced([sys.executable, "-c", ASSAY_PUSHES, forge.url], forge.path, tmp_path / "ours", env=env)
    assert raw.ran("receive-pack") and not ours.ran("receive-pack")  # the fast path was taken
    for category in synctrace.CATEGORIES:
        assert raw.placed[category] and ours.placed[category], (category, raw.placed, ours.placed)
        assert set(raw.placed[category]) == {all(raw.placed[category])}, (category, raw.placed)  # git: all or none
        assert set(ours.placed[category]) == set(raw.placed[category]), (category, ours.placed, raw.placed)
    assert fsck(forge) == ""
    assert forge.claim_json("alpha")["state"] == "held"
    assert None not in {forge.tip("refs/t/lone"), forge.tip("refs/t/big39"), forge.tip("refs/t/big")}


FSYNC_VALUES = ["", "none", "loose", "l", "o", "p", "added", "derived-metadata", "bogus", "-", "-,loose-object",
                "-loose-object", "committed,-loose-object", "-loose-object,committed", "all,-loose-object", "-all",
                "none,loose-object", "loose-object,none", ",,loose-object", " loose-object", "loose-object ",
                "reference,-objects", "objects,-"]
FILES_VALUES = ["true", "false", "1", "0", "", "yes", "off"]


@pytest.mark.skipif(not synctrace.available(), reason="strace is not installed, or may not trace here")
def test_loose_objects_are_synced_exactly_when_git_syncs_them(tmp_path: Path) -> None:
    """git itself is the oracle: for each value of core.fsync (odd ones too: prefixes, `none` first or last, a
    `-` alone, blanks) and of core.fsyncObjectFiles, whether `git hash-object -w` syncs the object it writes is
    what the fast path decides."""
    repo = tmp_path / "r.git"
    git("init", "-q", "--bare", str(repo))
    cases = [{"core.fsync": v} for v in FSYNC_VALUES] + [{"core.fsync": "none", "core.fsyncobjectfiles": v}
                                                        for v in FILES_VALUES]
    for n, settings in enumerate(cases):
        given = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        trace = synctrace.traced(["git", *given, "--git-dir", str(repo), "hash-object", "-w", "--stdin"], repo,
                                 tmp_path / f"t{n}", stdin=f"case {n}\n")
        assert len(trace.placed["loose-object"]) == 1, settings
        assert vetting._syncs_loose(dict(settings)) is trace.placed["loose-object"][0], settings
