"""Fetches from a forge over HTTP made from Assay's own process: one protocol v2 `fetch` POST saying which tips of
the refs asked for the cache holds, the pack indexed by `git index-pack`; `git fetch` where that will not do."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.core.git import ForgeGit, Signature
from assay.errors import ForgeError
from tests.conftest import git
from tests.fakegithub.server import FakeGitHub
from tests.helpers.gitlog import spy_git

WHO = Signature("t", "t@example.invalid")


@pytest.fixture
def forge(fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository on the fake GitHub with a journal-like chain of 20 commits, a file each."""
    monkeypatch.setenv("ASSAY_GITHUB_API", fake_github.api_url)
    monkeypatch.setenv("GITHUB_TOKEN", fake_github.token)
    bare = fake_github.create_repo("o", "r").path
    tip = ""
    for i in range(20):
        tip = grow(bare, tip, i)
    git("--git-dir", str(bare), "update-ref", "refs/assay/journal/b1", tip)
    return bare


def grow(bare: Path, parent: str, i: int) -> str:
    """A commit on `parent` holding one file of its own."""
    blob = git("--git-dir", str(bare), "hash-object", "-w", "--stdin", input=f"entry {i}\n").strip()
    tree = git("--git-dir", str(bare), "mktree", input=f"100644 blob {blob}\tentry\n").strip()
    return git("--git-dir", str(bare), "commit-tree", tree, *(["-p", parent] if parent else []), "-m", f"e{i}").strip()


@pytest.fixture
def port(fake_github: FakeGitHub, forge: Path, tmp_path: Path) -> Iterator[ForgeGit]:
    made = ForgeGit(fake_github.git_url("o", "r"), cache_root=tmp_path / "cache")
    yield made
    made.close()


def newest_pack_objects(port: ForgeGit) -> int:
    """How many objects the cache's newest pack holds."""
    packs = sorted((Path(port.cache) / "objects" / "pack").glob("*.idx"), key=lambda p: p.stat().st_mtime_ns)
    return len(subprocess.run(["git", "show-index"], stdin=packs[-1].open("rb"), capture_output=True,
                              check=True).stdout.splitlines())


def test_a_fetch_is_one_post_asking_only_for_what_is_new(fake_github: FakeGitHub, forge: Path,
                                                         port: ForgeGit) -> None:
    """The first fetch of a chain brings it whole; once the forge adds two commits, the next says the tip it
    holds and brings those two (commit, tree, file each), not the chain again. Neither starts `git fetch`."""
    ref = "refs/assay/journal/b1"
    ran = spy_git(port)
    tip = port.ls_remote(ref)[ref]
    port.ensure_objects({ref: tip})
    assert newest_pack_objects(port) == 20 * 3
    newer = grow(forge, grow(forge, tip, 20), 21)
    git("--git-dir", str(forge), "update-ref", ref, newer)
    served = len(fake_github.git_served)
    port.ensure_objects(port.ls_remote(ref))
    fetches = [request for service, request, _ in fake_github.git_served[served:] if b"command=fetch" in request]
    assert len(fetches) == 1 and f"have {tip}\n".encode() in fetches[0]
    assert newest_pack_objects(port) == 2 * 3
    assert "fetch" not in ran and ran.count("index-pack") == 2
    assert port.rev_list(newer)[:3] == [newer, git("--git-dir", str(forge), "rev-parse", f"{newer}^").strip(), tip]
    subprocess.run(["git", "fsck", "--connectivity-only", newer], cwd=port.cache, check=True, capture_output=True)


def test_what_the_forge_will_not_serve_goes_to_git_fetch(fake_github: FakeGitHub, forge: Path,
                                                         port: ForgeGit) -> None:
    """An id the forge does not have is refused there: `git fetch` is asked, and says why; a cache a shallow read
    cut short is fetched into by `git fetch` alone."""
    ran = spy_git(port)
    with pytest.raises(ForgeError, match="cannot fetch"):
        port.ensure_objects({"refs/assay/journal/b2": "1" * 40})
    assert "fetch" in ran
    ref = "refs/assay/journal/b1"
    port.fetch_shallow(port.ls_remote(ref), depth=2)
    ran.clear()
    port.ensure_objects(port.ls_remote(ref))
    assert "fetch" in ran and "index-pack" not in ran
