"""Fetches from a forge over HTTP made from Assay's own process: one protocol v2 `fetch` POST saying which tips of
the refs asked for the cache holds, the pack indexed by `git index-pack`; `git fetch` where that will not do."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.core.git import ForgeGit, Signature
from assay.core.git.httpfetch import packfile
from assay.errors import ForgeError
from tests.conftest import git
from tests.fakegithub.server import FakeGitHub
from tests.helpers.github import repo_over_http
from tests.helpers.gitlog import spy_git

WHO = Signature("t", "t@example.invalid")


@pytest.fixture
def forge(fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository on the fake GitHub with a journal-like chain of 20 commits, a file each."""
    bare = repo_over_http(fake_github, monkeypatch)
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


def test_an_answer_too_large_to_hold_goes_to_git_fetch_which_streams_it(fake_github: FakeGitHub, forge: Path,
                                                                       port: ForgeGit,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch answer past `ANSWER_AT_MOST` (the first fetch of a big repository's history) is not held in memory:
    its connection is closed unread, `git fetch` brings the same objects, and the next fetch, a small one, is this
    process's own again."""
    from assay.core.git import smarthttp

    ref = "refs/assay/journal/b1"
    tip = port.ls_remote(ref)[ref]
    monkeypatch.setattr(smarthttp, "ANSWER_AT_MOST", 1000)  # the chain's 60 objects are a pack of some kilobytes
    ran = spy_git(port)
    port.ensure_objects({ref: tip})
    assert "fetch" in ran and ran.count("index-pack") == 0 and len(port.rev_list(tip)) == 20
    assert port._fetch_failures == 0  # no failure of the way: the next fetch is tried this way again
    subprocess.run(["git", "fsck", "--connectivity-only", tip], cwd=port.cache, check=True, capture_output=True)
    assert any(b"command=fetch" in request for _, request, _ in fake_github.git_served)  # asked, then left to git
    monkeypatch.setattr(smarthttp, "ANSWER_AT_MOST", 64 * 2**20)
    newer = grow(forge, tip, 20)
    git("--git-dir", str(forge), "update-ref", ref, newer)
    ran.clear()
    port.ensure_objects(port.ls_remote(ref))
    assert "fetch" not in ran and ran.count("index-pack") == 1 and port.rev_list(newer)[1] == tip


def test_what_the_forge_will_not_serve_goes_to_git_fetch(fake_github: FakeGitHub, forge: Path,
                                                         port: ForgeGit) -> None:
    """An id the forge does not have is refused there: `git fetch` is asked, and says why."""
    ran = spy_git(port)
    with pytest.raises(ForgeError, match="cannot fetch"):
        port.ensure_objects({"refs/assay/journal/b2": "1" * 40})
    assert "fetch" in ran


def test_a_cache_a_shallow_read_cut_short_says_where_it_ends(fake_github: FakeGitHub, forge: Path,
                                                            port: ForgeGit) -> None:
    """A cache cut short by a shallow read says its shallow commits, as `git fetch` does: the forge packs what is
    new above them, the cache stays cut where it was, and what the fetch brought is whole down to there."""
    ran = spy_git(port)
    ref = "refs/assay/journal/b1"
    tip = port.ls_remote(ref)[ref]
    port.fetch_shallow({ref: tip}, depth=2)
    cut = port.shallow_commits()
    assert cut
    made = [tip]
    for i in range(3):
        made.append(grow(forge, made[-1], 20 + i))
    git("--git-dir", str(forge), "update-ref", ref, made[-1])
    ran.clear()
    port.ensure_objects(port.ls_remote(ref), whole=False)  # the new tip alone will do: one request, no git fetch
    assert "fetch" not in ran and ran.count("index-pack") == 1
    assert port.shallow_commits() == cut
    newer = made[-1]
    assert port.rev_list(newer)[:4] == made[::-1]  # the three new commits, then the tip the shallow read fetched
    subprocess.run(["git", "fsck", "--connectivity-only", newer], cwd=port.cache, check=True, capture_output=True)


@pytest.mark.parametrize(("answer", "whole"), [
    (b"000dpackfile\n" + b"0005\x01" + b"0007\x02x\n" + b"0009\x01PACK" + b"0000", True),
    (b"000dpackfile\n" + b"0009\x01PACK", False),  # cut short: no flush
    (b"000dpackfile\n" + b"0009\x01PACK" + b"0008\x03no\n" + b"0000", False),  # the forge's error on band 3
    (b"0011ERR not ours\n0000", False),
    (b"0011shallow-info\n" + b"0001" + b"000dpackfile\n" + b"0009\x01PACK" + b"0000", False),  # not asked for
])
def test_a_fetch_answer_is_a_pack_only_when_whole(answer: bytes, whole: bool) -> None:
    """A `fetch` answer's pack: its `packfile` section on side band 1, keepalives and progress between; anything
    else, or an answer cut short, is none."""
    assert packfile(answer) == (b"PACK" if whole else None)


@pytest.mark.parametrize(("answer", "whole"), [
    (b"0011shallow-info\n" + b"0001" + b"000dpackfile\n" + b"0009\x01PACK" + b"0000", True),
    (b"000dpackfile\n" + b"0009\x01PACK" + b"0000", True),
    (b"0011shallow-info\n" + b"0035unshallow " + b"1" * 40 + b"\n" + b"0001" + b"000dpackfile\n" + b"0009\x01PACK"
     + b"0000", False),  # the cache's shallow file would change: git fetch's to do
    (b"0011shallow-info\n" + b"000dpackfile\n" + b"0009\x01PACK" + b"0000", False),  # the section not ended
])
def test_a_shallow_caches_fetch_takes_an_empty_shallow_info_section(answer: bytes, whole: bool) -> None:
    assert packfile(answer, shallow_said=True) == (b"PACK" if whole else None)


@pytest.mark.parametrize(("declared", "sent", "whole"), [(100, 8, False), (8, 8, True), (2000, 0, False)])
def test_an_answer_is_whole_as_its_length_says_or_not_taken(declared: int, sent: int, whole: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer that stops short of the length it declared is no answer (not a good one cut), and one that
    declares more than `ANSWER_AT_MOST` is not read at all: too large, no failure of the way."""
    import socket
    import threading

    from assay.core.git import smarthttp

    monkeypatch.setattr(smarthttp, "ANSWER_AT_MOST", 1000)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-result\r\n"
                         b"Content-Length: %d\r\n\r\n" % declared + b"0008abcd"[:sent])

    threading.Thread(target=answer, daemon=True).start()
    try:
        direct = smarthttp.SmartHTTP(f"http://127.0.0.1:{port}/o/r.git", smarthttp.Settings(), 10.0)
        reply = direct.request(smarthttp.UPLOAD, b"0000")
    finally:
        server.close()
    assert reply.sent and (reply.data == b"0008abcd") == whole and (reply.data is None) != whole
    assert reply.too_large == (declared > 1000)
    assert direct.failures.get(smarthttp.UPLOAD, 0) == (0 if whole or declared > 1000 else 1)
