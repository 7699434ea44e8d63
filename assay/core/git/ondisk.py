"""A push to a forge on this machine without `git push`: its objects put there (loose, or one pack) and its refs
moved by the forge's own ref transaction; and packing a forge's refs."""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Sequence

from assay.core.digests import sha1_hex
from assay.core.git.gitenv import git_timeout
from assay.core.git.listing import Listing
from assay.core.git.objects import FRESH_LIMIT
from assay.core.git.refs import ZERO, PushResult, RefUpdate
from assay.core.git.run import first_error, forge_env, local_forge_path, run_git
from assay.errors import ForgeError

PACK_REFS_AT = 256  # loose refs on a forge on this machine that make a sweep pack them
UNPACK_BELOW = 100  # objects in a push to a forge on this machine that arrive loose (git's transfer.unpackLimit)


class DiskPush(Listing):
    """Gives a forge on this machine a push's objects and moves its refs in one transaction."""

    def __init__(self, url: str, cache_root: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        super().__init__(url, cache_root, token)
        self._last_push_error = ""  # why the last push, or the sending of its objects, failed
        self._sent: set[str] = set()  # objects this process sent to a forge on disk in a pack, with all they reach

    def _send_loose(self, folder: str, updates: Sequence[RefUpdate], sync: bool) -> bool:
        """Give a forge on this machine the objects of `updates` as the objects this process wrote, when that is
        all they need: every object the new tips reach is one of those (read back from the cache, so what it
        reaches is followed), a blob the forge holds loose, an expected tip it holds (a ref names it, so all it
        reaches is there) or an object that tip's tree names (a journal's snapshot, which each commit carries on).
        Any other object the forge holds may be one a push cut short left there without what it reaches (a commit
        without its tree): then, as for an object written by another process, nothing is sent and False returned,
        and `pack-objects --revs` works out what to send. Fewer than `UNPACK_BELOW` go as the loose files the cache
        holds, each synced before it is named when `sync` (the forge asks git to sync its loose objects), as git
        does: the file, not its folder; more go as one pack of exactly those objects.
        Two processes fewer than `pack-objects | unpack-objects` for the commits a push of Assay's own makes, and
        for a big one (a retirement) no walk of the history below the expected tips, which grows with the forge."""
        found = self._fresh_closure(folder, updates)
        if found is None:
            return False
        send, packed_tips = found
        if packed_tips and not _forge_has(folder, packed_tips):
            return False
        if len(send) >= UNPACK_BELOW or any(stored is None for stored in send.values()):
            try:  # exactly these objects (no --revs): nothing below the expected tips is walked
                pack = self._git("pack-objects", "--stdout", "-q", input="".join(f"{sha}\n" for sha in send).encode())
            except ForgeError as exc:
                self._last_push_error = exc.message
                return False
            if not self._deliver(folder, pack.stdout):
                return False
            if len(self._sent) >= FRESH_LIMIT:  # a bound, as for `_fresh`
                self._sent.clear()
            self._sent.update(send)
        else:
            for sha, stored in send.items():
                if stored is None or not _put_loose(f"{folder}/objects/{sha[:2]}", sha[2:], stored, sync):
                    return False
        self._fresh.difference_update(send)
        return True

    def _fresh_closure(self, folder: str, updates: Sequence[RefUpdate]) -> tuple[dict[str, bytes | None],
                                                                                   list[str]] | None:
        """What `_send_loose` sends: every object the new tips reach down to what the forge holds (sha -> its
        loose file in the cache, or None where the cache holds it packed), and the expected tips reached that the
        forge holds in a pack (to be looked up there); None if some object is neither written here nor held."""
        tips = {u.expected for u in updates if u.expected != ZERO}
        send: dict[str, bytes | None] = {}
        packed_tips: list[str] = []
        todo: list[tuple[str, str]] = [(u.new, "tip") for u in updates if u.new != ZERO]  # (sha, kind named)
        seen: set[str] = set()
        named: dict[str, str] | None = None  # object -> the expected tip whose tree names it (read when needed)
        while todo:
            sha, kind = todo.pop()
            if sha in seen:
                continue
            seen.add(sha)
            if sha not in self._fresh:
                if (kind == "blob" or sha in tips) and os.path.isfile(f"{folder}/objects/{sha[:2]}/{sha[2:]}"):
                    continue
                if sha in tips:
                    packed_tips.append(sha)
                    continue
                if sha in self._sent:  # sent before with all it reaches
                    continue
                if named is None:
                    named = self._named_by_tips(tips)
                if sha in named:  # a tree or file the new commit carries on (a journal's snapshot): held with it
                    todo.append((named[sha], "tip"))
                    continue
                return None
            stored = self._loose_in_cache(sha)
            if stored is not None:
                raw = zlib.decompress(stored)
            else:  # packed by `maintain` meanwhile: read from the pack, and sent in one
                obj = self.read_typed([sha])[0]
                if obj is None:
                    return None
                raw = f"{obj.kind} {len(obj.data)}\0".encode() + obj.data
            send[sha] = stored
            todo += _links(raw)
        return send, packed_tips

    def _named_by_tips(self, tips: set[str]) -> dict[str, str]:
        """Each object the root tree of one of the commits `tips` names (those in the cache) -> that commit. Sound
        as the tips themselves are: the refs move only from those commits (`_transact`'s compare-and-swap), so the
        forge then holds all they reach, these among it (two reads of the object batch)."""
        commits = [(tip, obj) for tip, obj in zip(tips, self.read_typed(list(tips)), strict=True)
                   if obj is not None and obj.kind == "commit"]
        trees = {line[5:].decode("ascii", "replace"): tip for tip, obj in commits
                 if (line := obj.data.split(b"\n", 1)[0]).startswith(b"tree ")}
        named: dict[str, str] = {}
        for tip, obj in zip(trees.values(), self.read_typed(list(trees)), strict=True):
            if obj is not None and obj.kind == "tree":
                named.update((sha, tip) for sha, _ in _links(b"tree %d\0" % len(obj.data) + obj.data))
        return named

    def _loose_in_cache(self, sha: str) -> bytes | None:
        """The cache's loose file of `sha`, if it is there and holds that very object."""
        try:
            with open(f"{self.cache}/objects/{sha[:2]}/{sha[2:]}", "rb") as loose:
                stored = loose.read()
            return stored if sha1_hex(zlib.decompress(stored)) == sha else None
        except (OSError, zlib.error):
            return None

    def _send_objects(self, folder: str, updates: Sequence[RefUpdate]) -> bool:
        """Give a forge on this machine the objects of `updates` it lacks, as one pack (`pack-objects --revs`,
        leaving out what the expected tips hold); False if that could not be done."""
        news = [u.new for u in updates if u.new != ZERO]
        if not news:
            return True
        olds = [u.expected for u in updates if u.expected != ZERO]
        present = [sha for sha, obj in zip(olds, self.read_typed(olds), strict=True) if obj is not None]
        wanted = "".join([*(f"{sha}\n" for sha in news), *(f"^{sha}\n" for sha in present)])
        try:
            pack = self._git("pack-objects", "--revs", "--stdout", "-q", input=wanted.encode()).stdout
        except ForgeError as exc:
            self._last_push_error = exc.message
            return False
        return self._deliver(folder, pack)

    def _deliver(self, folder: str, pack: bytes) -> bool:
        """Put `pack` into a forge on this machine, unpacked loose when small, as `receive-pack` does, or kept as a
        pack (`index-pack`); False if that could not be done."""
        if pack[:4] != b"PACK":
            return False
        count = int.from_bytes(pack[8:12], "big")  # the pack header: "PACK", version, object count
        try:
            run_git(["--git-dir", folder, *(["unpack-objects", "-q"] if count < UNPACK_BELOW
                                             else ["index-pack", "--stdin"])], input=pack, timeout=git_timeout(),
                    env=forge_env())
        except ForgeError as exc:
            self._last_push_error = exc.message
            return False
        return True

    def _transact(self, folder: str, updates: Sequence[RefUpdate]) -> dict[str, PushResult] | None:
        """An atomic push to a forge on this machine (its objects there already), as the forge's own ref
        transaction: `update-ref --stdin` moves every ref at once, each only from its expected value, or none:
        the compare-and-swap `receive-pack` makes, without its four processes (a third of a small push's
        time) or its cost that grows with the refs the forge advertises times the refs pushed. None when the
        outcome was not heard (the caller re-reads)."""
        commands = "".join(f"update {u.ref} {u.new} {u.expected}\n" if u.new != ZERO
                           else f"delete {u.ref} {u.expected}\n" for u in updates)
        try:
            proc = run_git(["--git-dir", folder, "update-ref", "--stdin"], input=commands.encode(),
                           check=False, timeout=git_timeout() + 0.01 * len(updates), env=forge_env())
        except ForgeError as exc:
            self._last_push_error = exc.message
            return None
        self.round_trips["push"] += 1
        if proc.returncode == 0:
            self._last_push_error = ""
            return {u.ref: PushResult(u.ref, "ok", "") for u in updates}
        self._last_push_error = first_error(proc.stderr)  # "cannot lock ref '…': is at … but expected …"
        return {u.ref: PushResult(u.ref, "rejected", self._last_push_error) for u in updates}

    def pack_forge_refs(self, loose_at_least: int = 0) -> int | None:
        """On a forge on disk, pack its refs into one file (deleted refs leave none behind), once at least
        `loose_at_least` of them are loose files; how many were loose, or None if nothing was packed. Its
        loose objects are packed as `git gc --auto` decides.

        A forge on disk with thousands of loose ref files reads every one of them for each push
        and listing; packed, it reads one file. A concurrent push that meets the lock is retried.
        A forge whose refs are a reftable has no loose refs.
        """
        path = local_forge_path(self.url)
        if path is None or not os.path.isdir(os.path.join(path, "refs")):
            return None
        # the objects pushes left loose, as receive-pack does after each push (a repack it starts goes on in the
        # background: a desk's pass does not wait for it)
        run_git(["--git-dir", path, "gc", "--auto", "--quiet"], check=False)
        loose = sum(len(files) for _, _, files in os.walk(os.path.join(path, "refs")))
        if loose_at_least and loose < loose_at_least:
            return None
        proc = run_git(["--git-dir", path, "pack-refs", "--all", "--prune"], check=False)
        return loose if proc.returncode == 0 else None


def _links(raw: bytes) -> list[tuple[str, str]]:
    """The objects a raw object (header and body) names, each with the kind it names it as: a commit its tree and
    parents, a tree its entries (not a submodule's commit, which is not this repository's), a tag its object."""
    header, _, body = raw.partition(b"\0")
    kind = header.split(b" ", 1)[0]
    if kind == b"tag":
        first = body.split(b"\n", 1)[0].decode("ascii", "replace")
        return [(first[7:], "object")] if first.startswith("object ") else []
    if kind == b"commit":
        head = body.split(b"\n\n", 1)[0].decode("ascii", "replace").splitlines()
        return [(line[5:], "tree") if line.startswith("tree ") else (line[7:], "commit")
                for line in head if line.startswith(("tree ", "parent "))]
    found: list[tuple[str, str]] = []
    at = 0
    while kind == b"tree" and at < len(body):
        nul = body.index(b"\0", at)
        mode = body[at:nul].split(b" ", 1)[0]
        if mode != b"160000":
            found.append((body[nul + 1:nul + 21].hex(), "tree" if mode == b"40000" else "blob"))
        at = nul + 21
    return found


def _forge_has(folder: str, shas: Sequence[str]) -> bool:
    """Whether a forge on this machine holds every object of `shas` (one `cat-file --batch-check`)."""
    try:
        proc = run_git(["--git-dir", folder, "cat-file", "--batch-check=%(objectname)"], check=False,
                       input="".join(f"{sha}\n" for sha in shas).encode(), timeout=git_timeout(), env=forge_env())
    except ForgeError:
        return False
    return proc.returncode == 0 and proc.stdout.decode().split() == list(shas)


def _put_loose(folder: str, name: str, stored: bytes, sync: bool) -> bool:
    """Write a loose object file into a forge's fan-out folder under its name (temp file, then rename), synced
    first when `sync`; True if it is there (written now, or before). Only the fan-out folder is made: a forge
    moved away stays away."""
    if os.path.exists(f"{folder}/{name}"):
        return True
    partial = f"{folder}/tmp_obj_{os.getpid()}_{os.urandom(6).hex()}"
    try:
        if not os.path.isdir(folder):
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            if os.write(fd, stored) != len(stored):
                raise OSError(f"short write to {partial}")
            if sync:
                _harden(fd)
        finally:
            os.close(fd)
        os.replace(partial, f"{folder}/{name}")
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        return False
    return True


def _harden(fd: int) -> None:
    """Flush a file to the disk as git's `core.fsyncMethod=fsync` does (on macOS a full flush, F_FULLFSYNC, which
    `fsync` there is not); at least what git's other methods do."""
    import fcntl

    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
            return
        except OSError:  # a file system without it: git falls back to fsync too
            pass
    os.fsync(fd)
