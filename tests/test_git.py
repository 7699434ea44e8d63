"""The git port against real git: objects, porcelain parsing, CAS pushes and ambiguous outcomes."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from assay.core.credentials import redact
from assay.core.git import ZERO, ForgeGit, GitObject, RefUpdate, Signature, TreeEntry, parse_porcelain
from assay.core.git.history import LOOK_LOOSE_AT_MOST
from assay.errors import ForgeError, NotATree
from tests.conftest import Forge, git
from tests.fakegithub.server import FakeGitHub
from tests.helpers.gitlog import spy_git


@pytest.fixture
def port(forge: Forge):
    p = ForgeGit(forge.url)
    yield p
    p.close()


def test_objects_we_write_are_the_objects_git_would_write(port: ForgeGit) -> None:
    blob = port.write_blob(b"hello\n")
    assert blob == subprocess.run(["git", "hash-object", "--stdin"], input=b"hello\n",
                                  capture_output=True).stdout.decode().strip()
    sub = port.write_tree([TreeEntry("x", blob)])
    entries = [TreeEntry("b.txt", blob), TreeEntry("a", sub, "40000"), TreeEntry("a.txt", blob)]
    tree = port.write_tree(entries)
    mktree = subprocess.run(["git", "mktree"], cwd=Path(port.cache), capture_output=True, input=(
        f"100644 blob {blob}\tb.txt\n040000 tree {sub}\ta\n100644 blob {blob}\ta.txt\n").encode()).stdout
    assert tree == mktree.decode().strip()
    commit = port.write_commit(tree, [], "msg", Signature("n", "e@x"), when=0)
    assert git("cat-file", "-t", commit, cwd=Path(port.cache)).strip() == "commit"
    assert git("fsck", "--no-dangling", cwd=Path(port.cache)) == ""


def test_a_new_cache_takes_no_template_hooks(forge: Forge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's git template (`GIT_TEMPLATE_DIR`, `init.templateDir`) may hold hooks: a cache is made without any, so
    no hook of theirs runs as the cache's refs and objects change, and no samples are copied into each new cache."""
    template = tmp_path / "template"
    (template / "hooks").mkdir(parents=True)
    hook = template / "hooks" / "reference-transaction"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\n")
    hook.chmod(0o755)
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    made = ForgeGit(forge.url, tmp_path / "cache")
    try:
        assert not (Path(made.cache) / "hooks").exists()
        assert (Path(made.cache) / "objects" / "pack").is_dir()  # what `holds_nothing` lists
        made.ls_remote("refs/heads/main")
        made.ensure_objects(made.ls_remote("refs/heads/main"))
    finally:
        made.close()
    assert not (tmp_path / "ran").exists()


def test_a_new_cache_is_of_the_formats_assay_writes_whatever_the_user_sets(forge: Forge, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A user whose git makes SHA-256 repositories by default (`GIT_DEFAULT_HASH`) still gets a cache of the forge's
    SHA-1 objects, refs as files: its reads, writes and fetches work, `git fsck` finds it whole, and its core
    settings are those `git init` writes on the same file system."""
    monkeypatch.setenv("GIT_DEFAULT_HASH", "sha256")
    made = ForgeGit(forge.url, tmp_path / "cache")
    try:
        tip = made.ls_remote("refs/heads/main")
        made.ensure_objects(tip)
        blob = made.write_blob(b"cached\n")
        assert made.read_objects([blob, tip["refs/heads/main"]])[0] == b"cached\n"
        assert made.read_typed([tip["refs/heads/main"]])[0].kind == "commit"  # type: ignore[union-attr]
    finally:
        made.close()
    monkeypatch.delenv("GIT_DEFAULT_HASH")
    assert git("--git-dir", made.cache, "rev-parse", "--show-object-format").strip() == "sha1"
    git("--git-dir", made.cache, "fsck", "--strict", "--no-dangling")
    git("init", "-q", "--bare", "--template=", str(tmp_path / "by-git"))  # what git finds of this file system
    ours, theirs = ({line for line in git("config", "--file", str(folder / "config"), "--list").splitlines()
                     if line.startswith("core.") and "logallrefupdates" not in line}
                    for folder in (Path(made.cache), tmp_path / "by-git"))
    assert ours == theirs and any(line.startswith("core.filemode=") for line in ours)


def test_read_objects_batches_and_reports_missing(port: ForgeGit) -> None:
    a = port.write_blob(b"a")
    b = port.write_blob(b"")
    assert port.read_objects([a, "0" * 40, b]) == [b"a", None, b""]


def test_read_typed_answers_far_more_names_than_the_pipes_hold(port: ForgeGit) -> None:
    blobs = [port.write_blob(f"blob {i}\n".encode() * 20) for i in range(2000)]
    tree = port.write_tree([TreeEntry("f", blobs[0])])
    names = [*blobs, tree, f"{tree}:f", f"{tree}:absent"] * 10  # ~1 MB of names, ~6 MB of answers
    answers = port.read_typed(names)
    assert [a.kind if a else None for a in answers[2000:2003]] == ["tree", "blob", None]
    assert answers[-4] == GitObject("blob", b"blob 1999\n" * 20) and len(answers) == len(names)
    assert port.read_tree(f"{tree}") == [TreeEntry("f", blobs[0])]
    with pytest.raises(NotATree, match="is a blob, not a folder"):
        port.read_tree(blobs[0])


def test_a_name_with_a_newline_does_not_put_the_batch_out_of_step(port: ForgeGit) -> None:
    a, b, c = (port.write_blob(text) for text in (b"a", b"b", b"c"))
    assert port.read_objects([f"{a}\n{b}"]) == [None]
    assert port.read_objects([c]) == [b"c"]


def test_a_stream_of_objects_left_half_read_never_answers_another_read(port: ForgeGit) -> None:
    """A reader that stops early (an invalid journal line, say) leaves answers in the pipe: the next read gets
    a process of its own, and a stream read to the end hands its process back."""
    blobs = [port.write_blob(f"blob {i}\n".encode() * 50) for i in range(300)]
    stream = port.stream_typed(blobs)
    assert next(stream) == GitObject("blob", b"blob 0\n" * 50)
    assert port.read_objects([blobs[7], blobs[299]]) == [b"blob 7\n" * 50, b"blob 299\n" * 50]  # not blob 1
    assert next(stream) == GitObject("blob", b"blob 1\n" * 50)  # the stream reads on where it stood
    stream.close()
    assert port.read_objects([blobs[3]]) == [b"blob 3\n" * 50]
    stream = port.stream_typed(blobs[:40])
    assert next(stream) == GitObject("blob", b"blob 0\n" * 50)
    assert port.read_objects([blobs[5]]) == [b"blob 5\n" * 50]  # a process of its own, kept by the port
    assert len(list(stream)) == 39  # the stream read to its end: its process closed, not waited on while alive
    assert port.read_objects([blobs[6]]) == [b"blob 6\n" * 50]
    whole = list(port.stream_typed(blobs[:5]))
    assert [o.data if o else None for o in whole] == [f"blob {i}\n".encode() * 50 for i in range(5)]
    kept = port._batch
    assert kept is not None and kept.poll() is None and port.read_objects([blobs[9]]) == [b"blob 9\n" * 50]
    assert port._batch is kept  # one process, reused


def test_a_short_chain_is_read_through_the_batch_and_a_long_one_by_rev_list(port: ForgeGit) -> None:
    """`rev_list` and `is_ancestor` on a chain of a few commits read them through the object batch (no process);
    a long chain, or a `since` off it, is git's to answer: the same answers either way."""
    from assay.core.git import WALK_AT_MOST

    shas: list[str] = []
    for i in range(WALK_AT_MOST * 2):
        shas.append(new_commit(port, f"c{i}", shas[-1:]))
    side = new_commit(port, "side")
    fresh = ForgeGit(port.url, cache_root=Path(port.cache).parent)
    try:
        assert fresh.rev_list(shas[4]) == shas[4::-1]  # five commits to the root: walked
        assert set(fresh._parents) == set(shas[:5])
        assert fresh.rev_list(shas[-1], since=shas[-3]) == [shas[-1], shas[-2]]  # two down to `since`: walked
        assert fresh.rev_list(shas[-1]) == shas[::-1]  # longer than a walk: rev-list, from a chain known in part
        assert fresh.rev_list(shas[-1], since=side) == shas[::-1] and fresh.rev_list(shas[3], since=shas[3]) == []
        assert fresh.rev_list(shas[-1], limit=3) == shas[-1:-4:-1]
        assert fresh.rev_list(shas[-1], limit=12) == shas[-1:-13:-1]
        other = ForgeGit(port.url, cache_root=Path(port.cache).parent)  # the chain read part of the way, git the rest
        try:
            assert other.rev_list(shas[-1], since=shas[1]) == shas[-1:1:-1]
            assert other.rev_list(shas[-1], since=side) == shas[::-1]
        finally:
            other.close()
        assert fresh.is_ancestor(shas[-4], shas[-1]) and not fresh.is_ancestor(shas[-1], shas[-4])
        assert not fresh.is_ancestor(side, shas[2])
    finally:
        fresh.close()


def test_a_commit_beside_a_chain_is_known_not_on_it_without_a_process(port: ForgeGit) -> None:
    """A push that lost to another writer's: its commit and theirs share a parent. Walking theirs down to that
    parent through commits of one parent each proves ours is not in their history (no `merge-base`); a merge on
    the way, or a chain longer than a walk, is git's to answer, and the answers are git's either way."""
    from assay.core.git import WALK_AT_MOST

    base = new_commit(port, "base")
    ours, theirs = new_commit(port, "ours", [base]), new_commit(port, "theirs", [base])
    built = new_commit(port, "built", [theirs])
    merged = new_commit(port, "merged", [built, ours])  # ours, as a second parent
    far = [theirs]
    for i in range(WALK_AT_MOST + 2):
        far.append(new_commit(port, f"far{i}", far[-1:]))
    fresh = ForgeGit(port.url, cache_root=Path(port.cache).parent)
    ran: list[str] = []
    run = fresh._git

    def counted(*args: str, **kwargs: Any) -> Any:
        ran.append(args[0])
        return run(*args, **kwargs)

    fresh._git = counted  # type: ignore[method-assign]
    try:
        assert not fresh.is_ancestor(ours, built) and not fresh.is_ancestor(ours, theirs)
        assert not fresh.is_ancestor(built, base) and "merge-base" not in ran
        assert fresh.is_ancestor(ours, merged) and ran.count("merge-base") == 1  # through a second parent: git's
        assert not fresh.is_ancestor(ours, far[-1]) and ran.count("merge-base") == 2  # too far to walk: git's
        assert fresh.is_ancestor(base, far[-1])
    finally:
        fresh.close()


def new_commit(port: ForgeGit, text: str, parents: list[str] | None = None) -> str:
    tree = port.write_tree([TreeEntry("f", port.write_blob(text.encode()))])
    return port.write_commit(tree, parents or [], text, Signature("t", "t@x"), when=0)


def test_cas_create_then_stale_then_update(port: ForgeGit, forge: Forge) -> None:
    first = new_commit(port, "one")
    assert port.push([RefUpdate("refs/assay/t", first)])["refs/assay/t"].ok
    second = new_commit(port, "two", [first])
    stale = port.push([RefUpdate("refs/assay/t", second)])["refs/assay/t"]  # expects absent: stale
    assert stale.status == "stale"
    assert forge.tip("refs/assay/t") == first
    assert port.push([RefUpdate("refs/assay/t", second, first)])["refs/assay/t"].ok
    assert forge.tip("refs/assay/t") == second


def test_atomic_push_moves_both_refs_or_neither(port: ForgeGit, forge: Forge) -> None:
    a, b = new_commit(port, "a"), new_commit(port, "b")
    assert port.push([RefUpdate("refs/assay/x", a)])["refs/assay/x"].ok
    out = port.push([RefUpdate("refs/assay/x", b), RefUpdate("refs/assay/y", b)], atomic=True)
    assert out["refs/assay/x"].status == "stale" and not out["refs/assay/y"].ok
    assert forge.tip("refs/assay/y") is None and forge.tip("refs/assay/x") == a
    out = port.push([RefUpdate("refs/assay/x", b, a), RefUpdate("refs/assay/y", b)], atomic=True)
    assert all(r.ok for r in out.values())


def test_a_prefetched_listing_answers_the_next_read_of_its_refs_once(port: ForgeGit, forge: Forge) -> None:
    """A short command starts listing its brief's refs while its code loads: the next read of refs among them
    takes that answer (what the forge held then), once; a read of others, or a push, drops it."""
    a, b, c = new_commit(port, "a"), new_commit(port, "b"), new_commit(port, "c")
    out = port.push([RefUpdate("refs/assay/p", a), RefUpdate("refs/keep/b", b), RefUpdate("refs/keep/c", c)],
                    atomic=True)
    assert all(r.ok for r in out.values())  # every commit on the forge, for another writer to move refs to

    def listed() -> None:  # the prefetch's listing is done: it holds what the forge held before what follows
        assert port._prefetched is not None
        port._prefetched[1].wait()

    port.prefetch("refs/assay/p", "refs/assay/q")
    listed()
    git("update-ref", "refs/assay/p", b, cwd=forge.path)  # another writer moves it afterwards
    assert port.ls_remote("refs/assay/p") == {"refs/assay/p": a}  # a subset of its refs: taken from it
    assert port.ls_remote("refs/assay/p") == {"refs/assay/p": b}  # once: then the forge is asked
    port.prefetch("refs/assay/p")
    listed()
    git("update-ref", "refs/assay/q", a, cwd=forge.path)
    assert port.ls_remote("refs/assay/p", "refs/assay/q") == {"refs/assay/p": b, "refs/assay/q": a}  # not its refs
    assert port._prefetched is None  # dropped, not kept for later
    port.prefetch("refs/assay/p")
    listed()
    assert port.push([RefUpdate("refs/assay/p", c, b)])["refs/assay/p"].ok
    assert port.ls_remote("refs/assay/p") == {"refs/assay/p": c}  # a push drops it: the port reads its own write
    many = [f"refs/assay/none/{i:05d}" for i in range(4000)]  # a request larger than a pipe holds, written whole
    assert port.ls_remote(*many, "refs/assay/p") == {"refs/assay/p": c}
    port.prefetch("refs/assay/p")
    assert "refs/assay/p" in port.ls_remote()  # every ref, listed by `git ls-remote`: that drops it too
    assert port._prefetched is None
    port.prefetch("refs/assay/*")  # a pattern, not a ref: nothing is started
    assert port._prefetched is None


def test_a_listing_of_a_missing_forge_is_unreadable_however_soon_git_gives_up(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """git may exit before the listing's request is written to it: the same error as ever, never a broken pipe
    (which the command line would end on without a word)."""
    class GivesUpFirst(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, args: list[str], **kwargs: Any) -> None:
            super().__init__(args, **kwargs)
            if "upload-pack" in args:
                self.wait()  # git has read nothing and exited before a word of the request is written

    port = ForgeGit(str(tmp_path / "nowhere.git"), cache_root=tmp_path / "cache")
    monkeypatch.setattr(subprocess, "Popen", GivesUpFirst)
    try:
        with pytest.raises(ForgeError, match="cannot read forge"):
            port.ls_remote("refs/heads/main")
        port.prefetch("refs/heads/main", "refs/assay/claims/b")
        with pytest.raises(ForgeError, match="cannot read forge"):
            port.ls_remote("refs/heads/main")
    finally:
        port.close()


def test_porcelain_parsing() -> None:
    text = ("To /f.git\n*\tabc:refs/a\t[new reference]\n!\tabc:refs/b\t[rejected] (stale info)\n"
            "!\tabc:refs/c\t[remote rejected] (hook declined)\n=\tabc:refs/d\t[up to date]\nDone\n")
    got = {ref: r.status for ref, r in parse_porcelain(text).items()}
    assert got == {"refs/a": "ok", "refs/b": "stale", "refs/c": "rejected", "refs/d": "ok"}


def hook(forge: Forge, body: str) -> None:
    path = forge.path / "hooks" / "reference-transaction"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_ambiguous_push_that_landed_is_resolved_as_landed(port: ForgeGit, forge: Forge) -> None:
    # the update is committed, then receive-pack dies: the client never hears the outcome
    hook(forge, '[ "$1" = committed ] && kill -9 $PPID\nexit 0\n')
    sha = new_commit(port, "landed")
    result = port.push([RefUpdate("refs/assay/amb", sha)])["refs/assay/amb"]
    assert result.ok and "re-reading" in result.detail
    assert forge.tip("refs/assay/amb") == sha


def test_a_push_that_never_lands_fails_clearly_and_writes_nothing(port: ForgeGit, forge: Forge) -> None:
    # the forge aborts every update before committing it, and hangs up: the client hears nothing
    hook(forge, '[ "$1" = prepared ] && exit 1\nexit 0\n')
    sha = new_commit(port, "refused")
    with pytest.raises(ForgeError, match="nothing was written"):
        port.push([RefUpdate("refs/assay/no", sha)])
    assert forge.tip("refs/assay/no") is None


def test_a_policy_refusal_is_reported_as_rejected(port: ForgeGit, forge: Forge) -> None:
    path = forge.path / "hooks" / "pre-receive"
    path.write_text("#!/bin/sh\necho 'no pushes today' >&2\nexit 1\n")
    path.chmod(0o755)
    result = port.push([RefUpdate("refs/assay/no", new_commit(port, "x"))])["refs/assay/no"]
    assert result.status == "rejected" and "hook declined" in result.detail
    assert forge.tip("refs/assay/no") is None


def test_a_dropped_connection_before_the_update_is_retried_once(port: ForgeGit, forge: Forge, tmp_path: Path) -> None:
    # receive-pack dies before applying the first push; the retry (same commit, same lease) lands
    flag = tmp_path / "dropped-once"
    path = forge.path / "hooks" / "pre-receive"
    path.write_text(f"#!/bin/sh\nif [ ! -e {flag} ]; then touch {flag}; kill -9 $PPID; fi\nexit 0\n")
    path.chmod(0o755)
    sha = new_commit(port, "retry")
    assert port.push([RefUpdate("refs/assay/r", sha)])["refs/assay/r"].ok
    assert flag.exists() and forge.tip("refs/assay/r") == sha


def test_an_unreachable_forge_is_a_forge_error(tmp_path: Path) -> None:
    port = ForgeGit(str(tmp_path / "missing.git"))
    with pytest.raises(ForgeError, match="does not appear to be a git repository"):
        port.ls_remote("refs/heads/main")


def test_credentials_in_urls_are_redacted() -> None:
    assert redact("https://x-access-token:ghp_secret@github.com/o/r") == "https://***@github.com/o/r"
    assert "ghp_secret" not in redact("fatal: unable to access 'https://u:ghp_secret@host/r/': 403")


def test_the_cache_is_shared_safely_by_name(forge: Forge) -> None:
    a, b = ForgeGit(forge.url), ForgeGit(forge.url)
    assert a.cache == b.cache and (Path(a.cache) / "objects").is_dir()
    assert os.environ["ASSAY_CACHE_DIR"] in str(a.cache)
    assert ZERO == "0" * 40


def test_a_push_that_landed_and_was_built_upon_before_we_looked_is_ok(forge: Forge) -> None:
    class Unheard(ForgeGit):
        """The push lands, another writer pushes on top, and then we learn nothing."""

        def _push_once(self, updates, atomic):
            super()._push_once(updates, atomic)
            u = updates[0]
            other = new_commit(self, "on top", [u.new])
            assert super()._push_once([RefUpdate(u.ref, other, u.new)], False) is not None
            return None

    port = Unheard(forge.url)
    sha = new_commit(port, "ours")
    result = port.push([RefUpdate("refs/assay/j", sha)])["refs/assay/j"]
    assert result.ok and "built upon" in result.detail
    assert git("--git-dir", str(forge.path), "rev-parse", "refs/assay/j^").strip() == sha


def test_tips_are_fetched_by_id_and_by_name_when_the_forge_lacks_one(port: ForgeGit, forge: Forge) -> None:
    bare = ["--git-dir", str(forge.path)]
    tree = subprocess.run(["git", *bare, "mktree"], input=b"", capture_output=True, check=True).stdout.decode().strip()
    first = git(*bare, "commit-tree", tree, "-m", "first").strip()
    git(*bare, "update-ref", "refs/t/a", first)
    port.ensure_objects({"refs/t/a": first})  # by id: the forge advertises it
    assert port.read_typed([first])[0] is not None
    second = git(*bare, "commit-tree", tree, "-p", first, "-m", "second").strip()
    git(*bare, "update-ref", "refs/t/a", second)
    gone = "1" * 40  # a tip the forge no longer has (collected since it was read): fetched by name instead
    port.ensure_objects({"refs/t/a": gone})
    assert port.read_typed([second])[0] is not None


def test_the_cache_is_packed_as_it_grows_and_keeps_every_object(port: ForgeGit,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import assay.core.git.objects as git_module  # where the cache is written and packed

    monkeypatch.setattr(git_module, "MAINTAIN_EVERY", 200)
    monkeypatch.setattr(git_module, "LOOSE_LIMIT", 256)
    monkeypatch.setattr(git_module, "PACK_LIMIT", 2)
    shas = [port.write_blob(f"object {i}\n".encode()) for i in range(10)]
    assert None not in port.read_typed(shas)  # a batch reader is running before the cache is packed
    shas += [port.write_blob(f"object {i}\n".encode()) for i in range(10, 3000)]
    loose = sum(len([n for n in os.listdir(d) if len(n) == 38]) for d in (Path(port.cache) / "objects").iterdir()
                if len(d.name) == 2)
    packs = [n for n in os.listdir(Path(port.cache) / "objects" / "pack") if n.endswith(".pack")]
    assert loose < 3000 - 2000 and 1 <= len(packs) <= 2
    found = port.read_typed(shas)
    assert all(o is not None and o.data == f"object {i}\n".encode() for i, o in enumerate(found))


def test_chains_walks_many_first_parent_chains_in_one_rev_list(port: ForgeGit) -> None:
    def chain(n: int, tag: str) -> list[str]:
        shas: list[str] = []
        for i in range(n):
            tree = port.write_tree([TreeEntry("f", port.write_blob(f"{tag}{i}".encode()))])
            shas.append(port.write_commit(tree, shas[-1:], f"{tag}{i}", Signature.of("t"), 1_700_000_000 + i))
        return shas

    a, b = chain(3, "a"), chain(5, "b")
    blob = port.write_blob(b"not a commit")
    found = port.chains([a[-1], b[-1], blob, a[-1]])
    assert found == {a[-1]: a[::-1], b[-1]: b[::-1], blob: []}
    assert found[a[-1]] == port.rev_list(a[-1]) and port.chains([]) == {}


def test_many_objects_are_looked_for_by_type_alone_and_many_chains_walked_the_same(port: ForgeGit) -> None:
    """Past `LOOK_LOOSE_AT_MOST` names, presence and type come from one `cat-file --batch-check` (no object read
    whole); what it answers is what the batch that reads them answers: absent, malformed and non-commit names
    included."""
    commits = _many(port, LOOK_LOOSE_AT_MOST + 20, "k")
    blob, tree = port.write_blob(b"b"), port.write_tree([TreeEntry("f", port.write_blob(b"f"))])
    absent = "0" * 40
    names = [*commits, blob, tree, absent, f"{blob}\n{tree}", "nothex", commits[0][:10]]
    kinds = port.kinds(names)
    assert kinds == [*(["commit"] * len(commits)), "blob", "tree", None, None, None, None]
    assert kinds[:-3] == [o.kind if o else None for o in port.read_typed(names[:-3])]
    wants = [(f"refs/x/{i}", sha) for i, sha in enumerate([*commits, blob, absent, "nothex"])]
    assert port._lacking(wants) == [(f"refs/x/{len(commits) + 1}", absent), (f"refs/x/{len(commits) + 2}", "nothex")]
    assert port._lacking(wants[:3] + wants[-2:]) == wants[-2:]  # a few: through the batch, the same answer
    found = port.chains([*commits, blob, absent])
    assert found == {**{c: [c] for c in commits}, blob: [], absent: []}


def _many(port: ForgeGit, n: int, tag: str) -> list[str]:
    """`n` new commits in the port's cache, not on the forge."""
    who = Signature("t", "t@example.invalid")
    return [port.write_commit(port.write_tree([TreeEntry("f", port.write_blob(f"{tag} {i}".encode()))]), [],
                              tag, who, 1_700_000_000) for i in range(n)]


def test_an_atomic_push_to_a_forge_on_disk_lands_whole_as_its_own_transaction(forge: Forge,
                                                                               port: ForgeGit) -> None:
    """To a forge on disk with no hooks: one pack (unpacked loose when small) and one ref transaction, not
    `git push` (which would match each ref against every ref the forge has). New commits arrive with their
    objects; a ref moved by another writer meanwhile fails the whole push: nothing written, that ref stale."""
    from assay.core.git import UNPACK_BELOW

    n = UNPACK_BELOW // 3 + 6  # three objects a commit: over the limit, so a pack is kept
    first = _many(port, n, "first")
    made = port.push([RefUpdate(f"refs/t/r{i}", sha) for i, sha in enumerate(first)], atomic=True)
    assert all(r.ok for r in made.values()) and len(made) == n
    assert git("--git-dir", str(forge.path), "rev-parse", f"refs/t/r{n - 1}").strip() == first[-1]
    assert git("--git-dir", str(forge.path), "cat-file", "-p", f"refs/t/r{n - 1}:f") == f"first {n - 1}"
    assert list((forge.path / "objects" / "pack").glob("*.pack"))  # a big push's objects: kept as a pack
    git("--git-dir", str(forge.path), "fsck", "--strict")
    small = _many(port, 1, "small")[0]
    assert port.push([RefUpdate("refs/s/small", small)])["refs/s/small"].ok
    loose = forge.path / "objects" / small[:2] / small[2:]
    assert loose.is_file()  # a small push's objects: loose, as receive-pack leaves them
    second = _many(port, n, "second")
    git("--git-dir", str(forge.path), "update-ref", "refs/t/r3", first[4])  # another writer moves one ref
    moved = port.push([RefUpdate(f"refs/t/r{i}", sha, first[i]) for i, sha in enumerate(second)], atomic=True)
    assert moved["refs/t/r3"].status == "stale" and not any(r.ok for r in moved.values()), moved
    assert "but expected" in moved["refs/t/r5"].detail  # the forge's own transaction said why
    assert git("--git-dir", str(forge.path), "rev-parse", "refs/t/r5").strip() == first[5]  # nothing written
    gone = port.push([RefUpdate(f"refs/t/r{i}", ZERO, first[i]) for i in range(n) if i != 3], atomic=True)
    assert all(r.ok for r in gone.values())
    assert git("--git-dir", str(forge.path), "for-each-ref", "--format=%(refname)", "refs/t/").split() == ["refs/t/r3"]


def test_a_forge_on_disk_with_rules_of_its_own_gets_every_push_through_git(forge: Forge, port: ForgeGit) -> None:
    """A forge that denies deletions, or has hooks, decides on each push itself, from the push after the rule or
    the hook appeared (the same port pushed before it did): the refs stay."""
    made = _many(port, 8, "kept")
    assert all(r.ok for r in port.push([RefUpdate(f"refs/heads/k{i}", sha) for i, sha in enumerate(made)],
                                       atomic=True).values())
    git("--git-dir", str(forge.path), "config", "receive.denyDeletes", "true")  # of branches
    refused = port.push([RefUpdate(f"refs/heads/k{i}", ZERO, sha) for i, sha in enumerate(made)], atomic=True)
    assert not any(r.ok for r in refused.values()), refused
    kept = git("--git-dir", str(forge.path), "for-each-ref", "--format=%(refname)", "refs/heads/").split()
    assert len(kept) == 8 + 1  # and main
    git("--git-dir", str(forge.path), "config", "--unset", "receive.denyDeletes")
    assert port.push([RefUpdate("refs/heads/k0", ZERO, made[0])])["refs/heads/k0"].ok
    hook = forge.path / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'no pushes today' >&2\nexit 1\n")
    assert port.push([RefUpdate("refs/heads/k1", ZERO, made[1])])["refs/heads/k1"].ok  # not executable: not run
    hook.chmod(0o755)  # made executable in place: its own stamp changes, not its folder's
    refused = port.push([RefUpdate("refs/heads/k2", ZERO, made[2])])
    assert not refused["refs/heads/k2"].ok and "hook declined" in refused["refs/heads/k2"].detail, refused


def test_a_forge_config_git_cannot_read_is_taken_to_vet_pushes_and_asked_again(forge: Forge,
                                                                                 tmp_path: Path) -> None:
    """A config that includes a broken file: git cannot say, so pushes go through git and nothing is kept; once
    the file is mended (with a rule in it), the rule decides."""
    from assay.core.git import vetting

    rules = forge.path / "rules.cfg"
    rules.write_text("[receive\n")
    git("--git-dir", str(forge.path), "config", "include.path", "rules.cfg")
    cache = tmp_path / "vetting-cache"
    cache.mkdir()
    vetting._VETTING.clear()
    assert vetting.forge_vetting(str(forge.path), str(cache)).vets is True
    assert not (cache / vetting.VETTING_FILE).exists()
    rules.write_text("[receive]\n\tdenyDeletes = true\n")
    vetting._VETTING.clear()
    assert vetting.forge_vetting(str(forge.path), str(cache)).vets is True
    rules.write_text("")
    os.utime(rules, (1_700_000_000, 1_700_000_000))  # mended long ago: the answer is kept
    vetting._VETTING.clear()
    assert vetting.forge_vetting(str(forge.path), str(cache)).vets is False
    assert (cache / vetting.VETTING_FILE).exists()
    vetting._VETTING.clear()


def test_a_forge_over_http_is_asked_for_only_the_refs_a_read_names(fake_github: FakeGitHub, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Through git's own HTTP transport, protocol v2's `ls-refs` with a `ref-prefix` for each ref read: one claim
    on a forge of 300 comes back, not 300 (the token sent as a header, as to git). A forge that speaks protocol v0
    only is read with `git ls-remote`, and not asked in v2 again."""
    gh = fake_github
    bare = gh.create_repo("o", "r").path
    commit = git("--git-dir", str(bare), "commit-tree", git("--git-dir", str(bare), "mktree", input="").strip(),
                 "-m", "x").strip()
    refs = "".join(f"create refs/assay/claims/b{i:03d} {commit}\n" for i in range(300))
    git("--git-dir", str(bare), "update-ref", "--stdin", input=refs + f"create refs/heads/main {commit}\n")
    monkeypatch.setenv("ASSAY_GITHUB_API", gh.api_url)
    monkeypatch.setenv("GITHUB_TOKEN", gh.token)
    from assay.core.git.listing import Listing

    through_git: list[Sequence[str]] = []  # listings that started git's transport, a process each
    transport = Listing._ls_refs_http

    def spied(self: Listing, patterns: Sequence[str]) -> dict[str, str] | None:
        through_git.append(patterns)
        return transport(self, patterns)

    monkeypatch.setattr(Listing, "_ls_refs_http", spied)
    port = ForgeGit(gh.git_url("o", "r"), cache_root=tmp_path / "cache")
    try:
        assert port.ls_remote("refs/assay/claims/b007", "refs/heads/*") == {"refs/assay/claims/b007": commit,
                                                                             "refs/heads/main": commit}
        service, request, answered = gh.git_served[-1]
        assert service == "git-upload-pack" and b"ref-prefix refs/assay/claims/b007\n" in request
        assert answered < 300, answered  # two refs' lines, where all 301 are some 20,000 bytes
        assert len(port.ls_remote("refs/assay/claims/*")) == 300
        assert through_git == []  # asked from this process (`smarthttp.py`), the token a header as to git
        gh.git_v0_only = True
        served = len(gh.git_served)
        assert port.ls_remote("refs/assay/claims/b008") == {"refs/assay/claims/b008": commit}
        assert port.ls_remote("refs/assay/claims/b009") == {"refs/assay/claims/b009": commit}
        # the first was asked in v2 from here, then through git's transport, which learned the forge speaks v0
        # only: git ls-remote listed it (a GET of every ref), and the next was asked in v2 neither way
        assert len(gh.git_served) == served + 1 and len(through_git) == 1
    finally:
        port.close()


def test_gits_http_settings_are_read_again_when_a_config_file_changes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A desk makes ports for its forge again and again: git's settings are read once (two `git config` processes)
    and again only when one of the files git reads them from changed (one they include too), or after `KEEP_S`."""
    from assay.core.git import smarthttp
    from assay.core.git.gitenv import git_env
    from assay.core.git.run import run_git as real

    cache, home = tmp_path / "cache", tmp_path / "home"
    home.mkdir()
    git("init", "-q", "--bare", str(cache))
    env = {**{k: v for k, v in git_env().items() if not k.startswith(("GIT_SSL_", "GIT_CONFIG"))},
           "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    runs: list[list[str]] = []

    def counted(args: list[str], **kwargs: Any) -> Any:
        runs.append(args)
        return real(args, **kwargs)

    monkeypatch.setattr(smarthttp, "run_git", counted)
    remote = "http://127.0.0.1:1/forge.git"
    first = smarthttp.settings_for(remote, env, str(cache))
    assert first is not None and first.headers == {} and len(runs) == 2
    assert smarthttp.settings_for(remote, env, str(cache)) is first and len(runs) == 2  # nothing changed: kept
    (home / ".gitconfig").write_text("[http]\n\tproxy = http://proxy.example:3128\n")
    assert smarthttp.settings_for(remote, env, str(cache)) is None and len(runs) == 4  # this user's file: read again
    (home / ".gitconfig").unlink()
    git("--git-dir", str(cache), "config", "http.extraHeader", "X-A: 1")
    again = smarthttp.settings_for(remote, env, str(cache))
    assert again is not None and again.headers == {"X-A": "1"} and len(runs) == 6  # the repository's: again
    git("--git-dir", str(cache), "config", "include.path", str(home / "more.gitconfig"))  # absent as yet
    assert smarthttp.settings_for(remote, env, str(cache)) == again and len(runs) == 8
    assert smarthttp.settings_for(remote, env, str(cache)) == again and len(runs) == 8
    (home / "more.gitconfig").write_text("[http]\n\tproxy = http://proxy.example:3128\n")
    assert smarthttp.settings_for(remote, env, str(cache)) is None and len(runs) == 10  # a file it includes: again
    monkeypatch.setattr(smarthttp, "KEEP_S", 0.0)
    assert smarthttp.settings_for(remote, env, str(cache)) is None and len(runs) == 12  # and after KEEP_S


def test_a_listing_over_http_leaves_to_git_what_git_would_send_another_way(tmp_path: Path) -> None:
    """Refs are listed from Assay's own process only where git would send the very same request: a proxy, a TLS
    setting (but where the certificate authorities are), another `http.*` setting, a rewritten URL or an older
    protocol leaves the listing to git; the headers git would send to this forge (a token, as `auth_env` hands it
    to git) are sent, those for another forge are not, and an empty value forgets the ones before it, as in git."""
    from assay.core.git.gitenv import auth_env, git_env
    from assay.core.git.smarthttp import Settings
    from assay.core.git.smarthttp import read_settings as settings_for

    remote = "https://forge.example/o/r"
    plain = {k: v for k, v in git_env().items() if not k.startswith(("GIT_SSL_", "GIT_CONFIG_"))}

    def settings(*config: tuple[str, str], env: dict[str, str] | None = None, url: str = remote) -> Settings | None:
        base = dict(env or plain)
        n = int(base.get("GIT_CONFIG_COUNT", "0") or 0)
        for i, (key, value) in enumerate(config):
            base.update({f"GIT_CONFIG_KEY_{n + i}": key, f"GIT_CONFIG_VALUE_{n + i}": value})
        base["GIT_CONFIG_COUNT"] = str(n + len(config))
        return settings_for(url, base, str(tmp_path))

    def headers(*config: tuple[str, str], env: dict[str, str] | None = None) -> dict[str, str] | None:
        found = settings(*config, env=env)
        return None if found is None else found.headers

    assert headers() == {}
    token = headers(env={**auth_env(remote, "sekrit"), **{k: v for k, v in plain.items() if k.startswith("PATH")}})
    assert token is not None and list(token) == ["Authorization"] and token["Authorization"].startswith("Basic ")
    assert headers(("http.https://other.example/.extraHeader", "X-A: 1")) == {}
    assert headers(("http.https://forge.example/o.extraHeader", "X-A: 1")) == {"X-A": "1"}
    assert headers(("http.https://forge.example/o/rr.extraHeader", "X-A: 1")) == {}  # a path is matched whole
    assert headers(("http.extraHeader", "X-A: 1"), ("http.extraHeader", "")) == {}
    assert headers(("http.proxy", "http://proxy.example:3128")) is None
    assert headers(("http.https://forge.example/.sslVerify", "false")) is None
    assert headers(("url.https://mirror.example/.insteadOf", "https://forge.example/")) is None
    assert headers(("protocol.version", "1")) is None
    assert headers(env={**plain, "HTTPS_PROXY": "http://proxy.example:3128"}) is None
    assert headers(env={**plain, "GIT_SSL_NO_VERIFY": "1"}) is None
    authorities = settings(("http.sslCAInfo", "/etc/from-config.pem"), env={**plain, "GIT_SSL_CAPATH": "/etc/certs"})
    assert authorities is not None and (authorities.cafile, authorities.capath) == ("/etc/from-config.pem",
                                                                                     "/etc/certs")
    overridden = settings(("http.sslCAInfo", "/etc/from-config.pem"), env={**plain, "GIT_SSL_CAINFO": "/etc/a.pem"})
    assert overridden is not None and overridden.cafile == "/etc/a.pem"  # the environment's, as in git
    loopback = settings(("http.sslVerify", "false"), env={**plain, "GIT_SSL_NO_VERIFY": "1"}, url="http://h/o/r")
    assert loopback is not None and loopback.headers == {}  # TLS settings do not matter without TLS
    assert settings_for("ssh://forge.example/o/r", plain, str(tmp_path)) is None
    # where git's own matching and this reading disagree, git lists: a wildcard host, another spelling of it
    assert headers(("http.https://*.example/.extraHeader", "X-A: 1")) is None
    assert headers(("http.https://FORGE.example/.extraHeader", "X-A: 1")) is None
    assert headers(("http.https://*.example/.proxy", "http://proxy.example:3128")) is None
    assert settings(("http.sslCAInfo", "certs/ca.pem")) is None  # relative to where git runs
    home = settings(("http.sslCAInfo", "~/ca.pem"))
    assert home is not None and home.cafile == os.path.expanduser("~/ca.pem")
    assert "sekrit" not in repr(settings(env={**auth_env(remote, "sekrit"), "PATH": plain["PATH"]}))


def test_a_listing_over_http_survives_a_dropped_connection_and_gives_up_on_a_silent_forge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection a listing keeps may be closed by the forge meanwhile: the next listing is sent again on a
    new one, and answers. A forge that accepts a connection and then sends nothing is an error after the stall
    time, as through git, not a wait for ever."""
    import http.server
    import socket
    import threading

    from assay.core.git.refs import pkt_line
    from assay.core.git.smarthttp import RESULT

    sha = "a" * 40
    connections: list[object] = []

    class Forgetful(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            connections.append(self.client_address)
            super().setup()

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = pkt_line(f"{sha} refs/heads/main\n") + b"0000"
            self.send_response(200)
            self.send_header("Content-Type", RESULT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True  # without saying so: the client keeps a connection that is gone

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forgetful)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = ForgeGit(f"http://127.0.0.1:{server.server_address[1]}/o/r.git", cache_root=tmp_path / "cache")
    try:
        for _ in range(3):
            assert port.ls_remote("refs/heads/main") == {"refs/heads/main": sha}
        assert len(connections) == 3  # each after the first found its kept connection closed, and made another
    finally:
        port.close()
        server.shutdown()

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    monkeypatch.setenv("ASSAY_GIT_STALL_S", "1")
    port = ForgeGit(f"http://127.0.0.1:{silent.getsockname()[1]}/o/r.git", cache_root=tmp_path / "cache")
    try:
        with pytest.raises(ForgeError, match="nothing came for 1s"):
            port.ls_remote("refs/heads/main")
    finally:
        port.close()
        silent.close()


def test_a_push_to_a_forge_on_disk_sends_the_loose_objects_it_wrote_or_else_a_pack(forge: Forge,
                                                                                     port: ForgeGit) -> None:
    """A commit this port wrote, whose every object is its own, loose on the forge or named by the tree of the
    commit its ref is expected at (a journal's snapshot, carried on), arrives as those loose files; one that reaches
    another object the forge holds only in a pack arrives through `pack-objects`. Either way the forge has every
    object its refs reach (`git fsck`), and no pack is made for a small push."""
    who = Signature("t", "t@example.invalid")
    blob = port.write_blob(b"one\n")
    first = port.write_commit(port.write_tree([TreeEntry("f", blob)]), [], "first", who, 1_700_000_000)
    assert port.push([RefUpdate("refs/t/x", first)])["refs/t/x"].ok
    packs = set((forge.path / "objects" / "pack").glob("*.pack"))
    for sha in (first, blob):
        assert (forge.path / "objects" / sha[:2] / sha[2:]).is_file()
    two = port.write_blob(b"two\n")
    second = port.write_commit(port.write_tree([TreeEntry("f", blob), TreeEntry("g", two)]), [first], "second", who,
                               1_700_000_001)
    assert port.push([RefUpdate("refs/t/x", second, first)])["refs/t/x"].ok  # its parent and blob: loose there
    assert set((forge.path / "objects" / "pack").glob("*.pack")) == packs
    git("--git-dir", str(forge.path), "repack", "-a", "-d", "-q")  # now the forge has them only in a pack
    ran = spy_git(port)
    third = port.write_commit(port.write_tree([TreeEntry("f", blob)]), [second], "third", who, 1_700_000_002)
    assert port.push([RefUpdate("refs/t/x", third, second)])["refs/t/x"].ok
    assert "pack-objects" not in ran  # its file, packed on the forge, is one the tree of `second` names
    fourth = port.write_commit(port.write_tree([TreeEntry("g", two)]), [third], "fourth", who, 1_700_000_003)
    assert port.push([RefUpdate("refs/t/x", fourth, third)])["refs/t/x"].ok
    assert "pack-objects" in ran  # "two", packed there, is named by an older commit's tree: not the expected one's
    git("--git-dir", str(forge.path), "fsck", "--strict", "--no-dangling")
    assert git("--git-dir", str(forge.path), "rev-list", "refs/t/x").split() == [fourth, third, second, first]


def test_the_sweeps_tidy_up_packs_the_loose_objects_pushes_leave(forge: Forge, port: ForgeGit) -> None:
    """Pushes to a forge on disk leave their objects loose, as receive-pack does; `pack_forge_refs` (the sweep's
    tidy-up) runs the forge's `gc --auto`, which receive-pack ran after each push: past its limit, they go in a
    pack. (git estimates the loose objects from the folder `objects/17`: the pushed blobs are picked to land
    there; `gc.auto` is set low, and not detached, so the test sees it happen.)"""
    from assay.core.digests import sha1_hex

    git("--git-dir", str(forge.path), "config", "gc.auto", "1")
    git("--git-dir", str(forge.path), "config", "gc.autoDetach", "false")
    picked = [data for data in (f"blob {i}\n".encode() for i in range(100_000))
              if sha1_hex(b"blob %d\0" % len(data) + data).startswith("17")][:3]
    entries = [TreeEntry(f"f{i}", port.write_blob(data)) for i, data in enumerate(picked)]
    commit = port.write_commit(port.write_tree(entries), [], "loose", Signature("t", "t@example.invalid"), 1)
    assert port.push([RefUpdate("refs/t/g", commit)])["refs/t/g"].ok
    fanout = forge.path / "objects" / "17"
    assert len(list(fanout.iterdir())) >= 3  # loose, as they came
    port.pack_forge_refs()
    assert not fanout.exists() or not list(fanout.iterdir())
    assert list((forge.path / "objects" / "pack").glob("*.pack"))
    git("--git-dir", str(forge.path), "fsck", "--strict", "--no-dangling")


def test_a_push_over_http_is_one_exchange_with_receive_pack_under_its_leases(
        fake_github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An atomic push to a forge over HTTP is posted to its receive-pack from this process, not through `git push`
    (which reads every ref advertised first): the new commit arrives with its objects, every deletion lands,
    atomically; one ref that moved under its lease refuses the whole push, the forge checking it."""
    gh = fake_github
    bare = gh.create_repo("o", "r").path
    tree = git("--git-dir", str(bare), "mktree", input="").strip()
    base = git("--git-dir", str(bare), "commit-tree", tree, "-m", "x").strip()
    n = 40
    refs = "".join(f"create refs/assay/claims/b{i:03d} {base}\n" for i in range(n))
    git("--git-dir", str(bare), "update-ref", "--stdin", input=refs + f"create refs/heads/main {base}\n")
    monkeypatch.setenv("ASSAY_GITHUB_API", gh.api_url)
    monkeypatch.setenv("GITHUB_TOKEN", gh.token)
    port = ForgeGit(gh.git_url("o", "r"), cache_root=tmp_path / "cache")
    try:
        port.ensure_objects({"refs/heads/main": base})
        who = Signature("t", "t@example.invalid")
        new = port.write_commit(port.write_tree([TreeEntry("f", port.write_blob(b"kept\n"))]), [base], "keep", who, 1)
        gone = [RefUpdate(f"refs/assay/claims/b{i:03d}", ZERO, base) for i in range(1, n)]
        moved = RefUpdate("refs/assay/claims/b000", new, tree)  # its lease names what it never was
        refused = port.push([moved, *gone], atomic=True)
        assert refused[moved.ref].status == "stale" and all(refused[u.ref].status == "rejected" for u in gone)
        assert len(port.ls_remote("refs/assay/claims/*")) == n  # nothing was written
        served = len(gh.git_served)
        landed = port.push([moved._replace(expected=base), *gone], atomic=True)
        assert all(r.ok for r in landed.values()), landed
        assert [s for s, _, _ in gh.git_served[served:]] == ["git-receive-pack"]
        assert b"\0report-status atomic" in gh.git_served[-1][1]  # ours, not git push's (report-status-v2 …)
        assert port.ls_remote("refs/assay/claims/*") == {"refs/assay/claims/b000": new}
        git("--git-dir", str(bare), "fsck", "--strict", "--no-dangling")
    finally:
        port.close()


def test_listing_a_forge_on_disk_answers_as_for_each_ref_does(tmp_path: Path) -> None:
    """`ls_remote` of a forge on disk speaks protocol v2 `ls-refs` to `git upload-pack` (see `ForgeGit._ls_refs`):
    its answers are for-each-ref's, refs packed and loose, a tag unpeeled, a symref as its target's object, an
    exact ref beside its prefix, a ref that is not there; and a ref whose name git refuses, which for-each-ref
    skips, is listed (junk the sweep reports)."""
    forge = tmp_path / "forge.git"
    env = ["-c", "user.name=t", "-c", "user.email=t@x"]
    run = lambda *a, data=b"": subprocess.run(["git", "--git-dir", str(forge), *a], input=data,  # noqa: E731
                                              capture_output=True, check=True).stdout.decode().strip()
    subprocess.run(["git", "init", "-q", "--bare", str(forge)], check=True)
    commit = run(*env, "commit-tree", run("mktree"), "-m", "c")
    tag = run("mktag", data=f"object {commit}\ntype commit\ntag v1\ntagger t <t@x> 0 +0000\n\nv1\n".encode())
    run("update-ref", "--stdin", data="".join(f"create refs/assay/claims/b{i} {commit}\n" for i in range(6)).encode())
    run("pack-refs", "--all")
    other = run(*env, "commit-tree", run("mktree"), "-p", commit, "-m", "d")
    for ref, sha in (("refs/assay/claims/b1", other), ("refs/assay/claims/b9", other), ("refs/tags/v1", tag),
                     ("refs/heads/main", commit), ("refs/heads/assay/b2", other)):
        run("update-ref", ref, sha)  # loose: b1 over its packed self
    run("symbolic-ref", "refs/assay/alias", "refs/heads/main")
    port = ForgeGit(str(forge), tmp_path / "cache")

    def for_each_ref(*patterns: str) -> dict[str, str]:
        out = run("for-each-ref", "--format=%(objectname) %(refname)", *(p.removesuffix("*") for p in patterns))
        exact = {p for p in patterns if not p.endswith("*")}
        wild = tuple(p.removesuffix("*") for p in patterns if p.endswith("*"))
        return {r: s for s, r in (line.split(" ", 1) for line in out.splitlines())
                if r in exact or (wild and r.startswith(wild))}

    for patterns in [("refs/assay/claims/*",), ("refs/assay/claims/b1", "refs/assay/claims/b7"),
                     ("refs/tags/*", "refs/assay/alias", "refs/heads/main"), ("refs/heads/*", "refs/assay/*"),
                     ("refs/assay/claims/b1", "refs/assay/claims/*")]:
        assert port.ls_remote(*patterns) == for_each_ref(*patterns), patterns
    every = port.ls_remote("refs/*")
    assert every["refs/tags/v1"] == tag and every["refs/assay/alias"] == commit and len(every) == 11
    (forge / "refs" / "assay" / "claims" / "a..b").write_text(commit + "\n")  # junk a hand or a bug left
    assert "refs/assay/claims/a..b" not in for_each_ref("refs/assay/claims/*")
    assert "refs/assay/claims/a..b" in port.ls_remote("refs/assay/claims/*")  # named, so the sweep can say it
