"""Pushes to a forge over HTTP made from Assay's own process: one POST to the forge's `git-receive-pack`, its
leases checked by the forge, its pack only what the forge lacks; what it cannot do this way `git push` does, and
an outcome not heard is settled by re-reading, as for any push."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from assay.core.git import ZERO, ForgeGit, PushResult, RefUpdate, Signature, TreeEntry, listing
from assay.core.git import push as pushing
from assay.errors import WRITTEN_ALONE, ForgeError
from tests.conftest import git
from tests.fakegithub.server import FakeGitHub
from tests.helpers.github import repo_over_http
from tests.helpers.gitlog import spy_git

WHO = Signature("t", "t@example.invalid")


@pytest.fixture
def forge(fake_github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository on the fake GitHub whose main holds 30 files."""
    bare = repo_over_http(fake_github, monkeypatch)
    blobs = [git("--git-dir", str(bare), "hash-object", "-w", "--stdin", input=f"file {i}\n").strip()
             for i in range(30)]
    tree = git("--git-dir", str(bare), "mktree", input="".join(f"100644 blob {b}\tf{i}\n" for i, b in enumerate(blobs)))
    main = git("--git-dir", str(bare), "commit-tree", tree.strip(), "-m", "main").strip()
    git("--git-dir", str(bare), "update-ref", "refs/heads/main", main)
    return bare


@pytest.fixture
def port(fake_github: FakeGitHub, forge: Path, tmp_path: Path) -> Iterator[ForgeGit]:
    made = ForgeGit(fake_github.git_url("o", "r"), cache_root=tmp_path / "cache")
    yield made
    made.close()


def commands_posted(request: bytes) -> list[bytes]:
    """The command lines of a receive-pack request (each `old new ref`, the first with the capabilities)."""
    out, at = [], 0
    while (size := int(request[at:at + 4], 16)) >= 4:
        out.append(request[at + 4:at + size])
        at += size
    return out


def objects_posted(request: bytes) -> int:
    """How many objects the pack of a receive-pack request holds (0: none was sent)."""
    at = request.find(b"PACK\0\0\0")
    return int.from_bytes(request[at + 8:at + 12], "big") if at >= 0 else 0


def work_on(port: ForgeGit, base: str, text: bytes) -> str:
    """A commit on `base` changing one file of its tree."""
    tree = port.read_tree(port.tree_of(base)) or []
    entries = [e for e in tree if e.name != "f0"] + [TreeEntry("f0", port.write_blob(text))]
    return port.write_commit(port.write_tree(entries), [base], "work", WHO, 1_700_000_000)


def test_a_push_is_one_post_packing_only_what_the_forge_lacks(fake_github: FakeGitHub, forge: Path,
                                                            port: ForgeGit) -> None:
    """A desk's pushes to a forge over HTTP start no `git push` and read no advertisement of the forge's refs past
    the first: each is one POST, its pack only the objects the leases' commits and main (listed) do not reach.
    A branch made from main sends its commit, tree and one file, not main's 30."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    ran = spy_git(port)
    first = work_on(port, main, b"first\n")
    before = (len(fake_github.git_served), fake_github.git_requests["git-receive-pack"])
    assert port.push([RefUpdate("refs/heads/assay/b1", first), RefUpdate("refs/assay/t/b1", first)],
                     atomic=True)["refs/heads/assay/b1"].ok
    second = work_on(port, first, b"second\n")
    assert port.push([RefUpdate("refs/heads/assay/b1", second, first)])["refs/heads/assay/b1"].ok
    posted = fake_github.git_served[before[0]:]
    assert [service for service, _, _ in posted] == ["git-receive-pack"] * 2
    assert fake_github.git_requests["git-receive-pack"] - before[1] == 3  # one advertisement, for the capabilities
    assert [objects_posted(request) for _, request, _ in posted] == [3, 3]
    both, alone = (commands_posted(request) for _, request, _ in posted)
    assert b"\0report-status atomic" in both[0] and len(both) == 2
    assert len(alone) == 1 and b"atomic" not in alone[0].partition(b"\0")[2]  # one ref: atomic as it is
    assert "push" not in ran and ran.count("pack-objects") == 2
    assert git("--git-dir", str(forge), "rev-parse", "refs/heads/assay/b1", "refs/assay/t/b1").split() == \
        [second, first]
    git("--git-dir", str(forge), "fsck", "--strict", "--no-dangling")


def test_a_branch_made_where_main_was_never_seen_carries_main_and_past_the_guard_goes_through_git_push(
        fake_github: FakeGitHub, forge: Path, port: ForgeGit, monkeypatch: pytest.MonkeyPatch) -> None:
    """The branch tips this process saw are what keeps main out of a new branch's pack: unseen, main's objects go
    too (the pack is whole either way); past `PACK_GUARD` objects, `git push`, which reads what the forge has,
    sends it."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    monkeypatch.setattr(listing, "_HEADS", {})
    ran = spy_git(port)
    served = len(fake_github.git_served)
    assert port.push([RefUpdate("refs/heads/assay/b2", work_on(port, main, b"two\n"))])["refs/heads/assay/b2"].ok
    sent = [objects_posted(request) for _, request, _ in fake_github.git_served[served:]]
    assert sent == [3 + 1 + 1 + 30]  # and main's commit, tree and 30 files
    monkeypatch.setattr(pushing, "PACK_GUARD", 10)
    monkeypatch.setattr(listing, "_HEADS", {})
    third = work_on(port, main, b"three\n")
    assert port.push([RefUpdate("refs/heads/assay/b3", third)])["refs/heads/assay/b3"].ok
    assert "push" in ran  # git push sent it: its request is git's own
    assert b"report-status-v2" in fake_github.git_served[-1][1]  # git's request: ours asks for report-status
    assert git("--git-dir", str(forge), "rev-parse", "refs/heads/assay/b3").strip() == third
    git("--git-dir", str(forge), "fsck", "--strict", "--no-dangling")


def test_a_pack_missing_what_the_forge_lacks_is_refused_there_and_git_push_sends_it(
        fake_github: FakeGitHub, forge: Path, port: ForgeGit) -> None:
    """A tip of main believed on the forge that is not (main rewritten; here: written only in the cache) leaves
    objects out of the pack: the forge refuses it, nothing is written, and `git push` sends the push instead, once;
    the tips seen are forgotten."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    never = work_on(port, main, b"never pushed\n")
    listing.saw_heads(port.remote, {"refs/heads/main": never})
    ran = spy_git(port)
    on_top = work_on(port, never, b"on top\n")
    assert port.push([RefUpdate("refs/heads/assay/b4", on_top)])["refs/heads/assay/b4"].ok
    assert ran.count("push") == 1 and listing.heads_seen(port.remote) == []
    assert git("--git-dir", str(forge), "rev-parse", "refs/heads/assay/b4").strip() == on_top
    git("--git-dir", str(forge), "fsck", "--strict", "--no-dangling")


@pytest.mark.parametrize("case", ["lease holds", "stale lease", "built on meanwhile"])
def test_an_atomic_push_the_forge_wrote_in_part_is_finished_or_put_back(fake_github: FakeGitHub, forge: Path,
                                                                        port: ForgeGit, case: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The forge checks each new tip's objects alone, before any lease: where one lacks what the pack left out
    (main's tip seen a moment ago that the forge no longer has), it writes the other refs of an atomic push. The
    rest is then pushed alone under its lease: landed, the push has landed whole; refused (a stale lease), what
    was written is put back, so nothing was; where that cannot be, each ref is said as the forge holds it, the
    one written marked so, not the whole as refused nor that one as moved by another."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    if case != "lease holds":
        git("--git-dir", str(forge), "update-ref", "refs/heads/assay/lacking", main)  # its lease (none) is stale
    never = work_on(port, main, b"never pushed\n")
    listing.saw_heads(port.remote, {"refs/heads/main": never})
    lacking, fine = work_on(port, never, b"lacking\n"), work_on(port, main, b"fine\n")
    if case == "built on meanwhile":
        real = port._push_direct

        def no_undo(updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult]:
            if any(u.new == ZERO and u.expected == fine for u in updates):
                raise ForgeError("the forge went away")  # the written ref cannot be put back
            return real(updates, atomic)

        monkeypatch.setattr(port, "_push_direct", no_undo)
    said = port.push([RefUpdate("refs/heads/assay/lacking", lacking), RefUpdate("refs/heads/assay/fine", fine)],
                     atomic=True)
    on_forge = {ref: sha for sha, ref in (line.split() for line in git(
        "--git-dir", str(forge), "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/assay").splitlines())}
    if case == "lease holds":
        assert on_forge == {"refs/heads/assay/fine": fine, "refs/heads/assay/lacking": lacking}
        assert all(r.ok for r in said.values()), said
    elif case == "stale lease":
        assert on_forge == {"refs/heads/assay/lacking": main}
        assert said["refs/heads/assay/fine"].status == "rejected" and said["refs/heads/assay/lacking"].status == "stale"
    else:
        assert on_forge == {"refs/heads/assay/fine": fine, "refs/heads/assay/lacking": main}
        assert said["refs/heads/assay/fine"] == PushResult("refs/heads/assay/fine", "ok", WRITTEN_ALONE)
        assert said["refs/heads/assay/lacking"].status == "stale"
    git("--git-dir", str(forge), "fsck", "--strict", "--no-dangling")


def pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


REPORT = pkt(b"unpack ok\n") + pkt(b"ok refs/heads/x\n") + b"0000"


@pytest.mark.parametrize(("answer", "banded", "said"), [
    (REPORT, False, ""),
    (pkt(b"\x01") + pkt(b"\x01" + REPORT[:14]) + pkt(b"\x02hook says\n") + pkt(b"\x01" + REPORT[14:]) + b"0000", True,
     "hook says\n"),
    (pkt(b"\x03fatal: gone\n") + b"0000", True, "fatal: gone\n"),
])
def test_a_report_is_read_on_its_side_band_keepalives_and_all(answer: bytes, banded: bool, said: str) -> None:
    """receive-pack's report, plain or on side band 1 in packets that split it, with empty keepalives between and
    the forge's words on bands 2 and 3 (a fatal error: no report)."""
    report = ["unpack ok", "ok refs/heads/x"] if REPORT[:14] in answer else []
    assert pushing._report(answer, banded) == (report, said)


@pytest.mark.parametrize(("answer", "banded"), [
    (REPORT[:-6], False), (REPORT[:-4], False), (b"zz" + REPORT[2:], False), (pkt(b"\x01" + REPORT), True),
    (pkt(b"\x01" + REPORT[:-4]) + b"0000", True)])
def test_a_report_cut_short_is_no_report(answer: bytes, banded: bool) -> None:
    """An answer cut off (the forge's process killed mid-way, a connection closed) is not read as whole."""
    with pytest.raises(ValueError):
        pushing._report(answer, banded)


def test_the_lease_is_the_forges_to_check(fake_github: FakeGitHub, forge: Path, port: ForgeGit) -> None:
    """A lease that no longer holds is refused by the forge, the ref where it was; one naming a ref that is
    already there refuses its creation. Neither goes through `git push`."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    ran = spy_git(port)
    one, two = work_on(port, main, b"one\n"), work_on(port, main, b"two\n")
    assert port.push([RefUpdate("refs/heads/assay/b5", one)])["refs/heads/assay/b5"].ok
    assert port.push([RefUpdate("refs/heads/assay/b5", two)])["refs/heads/assay/b5"].status == "stale"
    assert port.push([RefUpdate("refs/heads/assay/b5", two, main)])["refs/heads/assay/b5"].status == "stale"
    both = port.push([RefUpdate("refs/heads/assay/b5", two, one), RefUpdate("refs/heads/main", two, two)],
                     atomic=True)
    assert {r.status for r in both.values()} == {"stale", "rejected"}
    assert "push" not in ran
    assert git("--git-dir", str(forge), "rev-parse", "refs/heads/assay/b5", "refs/heads/main").split() == [one, main]


def test_a_push_whose_answer_is_lost_after_it_landed_is_settled_as_landed(fake_github: FakeGitHub, forge: Path,
                                                                         port: ForgeGit) -> None:
    """The forge writes the ref and its receive-pack dies before it reports: the push re-reads and finds it
    landed, once. A forge's hook refusing it is a refusal, nothing written."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    hook = forge / "hooks" / "reference-transaction"
    hook.write_text('#!/bin/sh\n[ "$1" = committed ] && kill -9 $PPID\nexit 0\n')
    hook.chmod(0o755)
    ran = spy_git(port)
    landed = work_on(port, main, b"landed\n")
    result = port.push([RefUpdate("refs/heads/assay/b6", landed)])["refs/heads/assay/b6"]
    assert result.ok and "re-reading" in result.detail, result
    assert "push" not in ran
    hook.unlink()
    refusal = forge / "hooks" / "pre-receive"
    refusal.write_text("#!/bin/sh\necho 'error: no pushes today' >&2\nexit 1\n")
    refusal.chmod(0o755)
    refused = port.push([RefUpdate("refs/heads/assay/b7", work_on(port, main, b"refused\n"))])["refs/heads/assay/b7"]
    assert refused.status == "rejected" and refused.detail == "no pushes today"  # the forge's words, beside its report
    assert "push" not in ran
    assert git("--git-dir", str(forge), "for-each-ref", "--format=%(refname)", "refs/heads/assay").split() == \
        ["refs/heads/assay/b6"]


def test_a_forge_that_cannot_take_such_a_push_gets_git_push(fake_github: FakeGitHub, forge: Path,
                                                           port: ForgeGit, tmp_path: Path) -> None:
    """A forge that does not offer atomic pushes (it would write the refs of a request for one one by one) is
    pushed to with `git push`, its capabilities read once for both pushes; a token it refuses is `git push`'s to
    report: nothing is written."""
    git("--git-dir", str(forge), "config", "receive.advertiseAtomic", "false")
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    ran = spy_git(port)
    asked = fake_github.git_requests["git-receive-pack"]
    one = work_on(port, main, b"one\n")
    assert port.push([RefUpdate("refs/heads/assay/b8", one)])["refs/heads/assay/b8"].ok
    assert port.push([RefUpdate("refs/heads/assay/b8", work_on(port, one, b"two\n"), one)])["refs/heads/assay/b8"].ok
    assert ran.count("push") == 2
    assert fake_github.git_requests["git-receive-pack"] - asked == 1 + 2 * 2  # ours once; git's, two each
    stranger = ForgeGit(fake_github.git_url("o", "r"), cache_root=tmp_path / "other",
                        token="not-a-token")
    try:
        with pytest.raises(ForgeError):
            stranger.push([RefUpdate("refs/heads/assay/b9", stranger.write_commit(
                stranger.write_tree([]), [], "x", WHO, 1), ZERO)])
    finally:
        stranger.close()
    assert "refs/heads/assay/b9" not in git("--git-dir", str(forge), "for-each-ref")


def test_a_deletion_is_checked_against_the_forges_refs_before_it_is_sent(fake_github: FakeGitHub, forge: Path,
                                                                        port: ForgeGit) -> None:
    """The forge deletes a ref whose expected id it lacks without checking it: a push that deletes reads the
    forge's refs first, as `git push` does. A stale lease deletes nothing; one that holds deletes, from here; a
    deletion expecting no ref at all is `git push`'s."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    one = work_on(port, main, b"one\n")
    assert port.push([RefUpdate("refs/heads/assay/d1", one)])["refs/heads/assay/d1"].ok
    ran = spy_git(port)
    elsewhere = port.write_commit(port.write_tree([]), [], "never on the forge", WHO, 5)
    assert port.push([RefUpdate("refs/heads/assay/d1", ZERO, elsewhere)])["refs/heads/assay/d1"].status == "stale"
    assert git("--git-dir", str(forge), "rev-parse", "refs/heads/assay/d1").strip() == one
    assert port.push([RefUpdate("refs/heads/assay/d1", ZERO, one)])["refs/heads/assay/d1"].ok
    assert "push" not in ran and "refs/heads/assay/d1" not in git("--git-dir", str(forge), "for-each-ref")
    port.push([RefUpdate("refs/heads/assay/d2", ZERO, ZERO)])
    assert ran.count("push") == 1


def test_a_lease_found_stale_after_an_outcome_not_heard_is_read_again(fake_github: FakeGitHub, forge: Path,
                                                                     port: ForgeGit) -> None:
    """A push whose answer was lost and which reads as not landed may land still (the forge was slow to take it):
    if the next try then finds its lease stale, that may be the first try's doing, so the refs are read again, and
    the push is reported landed, not moved."""
    main = port.ls_remote("refs/heads/main")["refs/heads/main"]
    port.ensure_objects({"refs/heads/main": main})
    tries: list[str] = []
    real = port._push_once

    def lost_then_stale(updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult] | None:
        if tries:
            tries.append("stale")
            real(updates, atomic)  # the first try lands late, before this one's lease is checked
            return {u.ref: PushResult(u.ref, "stale", "stale info") for u in updates}  # as git push says it
        tries.append("lost")
        return None

    port._push_once = lost_then_stale  # type: ignore[method-assign]
    landed = work_on(port, main, b"landed\n")
    result = port.push([RefUpdate("refs/heads/assay/l1", landed)])["refs/heads/assay/l1"]
    assert tries == ["lost", "stale"] and result.ok and "re-reading" in result.detail
