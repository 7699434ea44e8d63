"""The cache: a local bare repository holding a forge's objects, read through one `cat-file --batch` and written
loose (atomic: temp file, then rename), packed as it grows."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import select
import subprocess
import threading
import time
import zlib
from collections import Counter
from collections.abc import Generator, Iterable, Iterator, Sequence

import assay.core.git.ahead as ahead  # by its full name: `from assay.core.git` is the package
from assay.core.credentials import token_for
from assay.core.digests import sha1_hex
from assay.core.git.ahead import cache_folder, make_cache
from assay.core.git.gitenv import cache_env, default_cache_root, forge_access, git_timeout, is_local_path
from assay.core.git.refs import OBJECT_ID
from assay.core.git.run import local_forge_path, run_git
from assay.core.lives import flock_within
from assay.core.records.recordtype import NamedTuple
from assay.errors import ForgeError, NotATree

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import IO

NETWORK_COMMANDS = frozenset({"ls-remote", "fetch", "push"})  # the git commands that talk to the forge
MAINTAIN_EVERY = 512  # objects a process writes between looks at the cache's size
LOOSE_LIMIT = 6700  # loose objects in the cache before they are packed (git's gc.auto)
PACK_LIMIT = 50  # packs in the cache before they are folded into one (git's gc.autoPackLimit)
RECORDS_LOCK = "assay-worktrees.lock"  # in the cache: held while a process makes or removes worktrees' records
GIT_TYPES = frozenset({"commit", "tree", "blob", "tag"})
FRESH_LIMIT = 100_000  # objects written and not yet pushed that a port remembers, for sending them loose


class TreeEntry(NamedTuple):
    name: str
    sha: str
    mode: str = "100644"


class GitObject(NamedTuple):
    """An object as `cat-file --batch` gives it: its type (blob, tree, commit, tag) and contents."""

    kind: str
    data: bytes


class Signature(NamedTuple):
    name: str
    email: str

    @classmethod
    def of(cls, name: str) -> Signature:
        """The identity of a desk or a person in a commit: the name (no <, > or line breaks), a valid email."""
        clean = re.sub(r"[<>\x00-\x1f]", "", name).strip() or "assay"
        local = re.sub(r"[^A-Za-z0-9._-]+", "-", clean).strip("-.") or "assay"
        return cls(clean, f"{local}@assay.invalid")


class ObjectCache:
    """A forge's objects in a local bare repository: read through one `cat-file --batch`, written loose."""

    def __init__(self, url: str, cache_root: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        self.url = url
        token = token if token is not None or is_local_path(url) else token_for(url)
        self.remote, self._env = forge_access(url, token)  # the env: for the commands that reach the forge
        root = os.fspath(cache_root) if cache_root else default_cache_root()
        self._spawn = (root, token)  # what `spare` builds a twin from
        self._folder = cache_folder(url, root)
        self._batch: subprocess.Popen[bytes] | None = None
        self._written = 0
        self._local = local_forge_path(url) is not None
        self._fresh: set[str] = set()  # objects written here (loose in the cache) not yet pushed to a forge on disk
        self.round_trips: Counter[str] = Counter()  # ls-remote, fetch and push invocations, for measuring
        make_cache(self._folder, url)

    @property
    def cache(self) -> str:
        """The cache's folder, once the first fetch this process started into it ahead of this port has ended."""
        self._await_ahead()
        return self._folder

    def _await_ahead(self) -> None:
        """Wait for the first fetch this process started into the cache ahead of this port (`ahead.fetch`), if
        one was: nothing is read or written there while it runs (but the object batch's process, which reads
        when asked: `_exchange` awaits it first)."""
        if ahead.PENDING and ahead.settle(self._folder):
            self.round_trips["fetch"] += 1

    @contextlib.contextmanager
    def _records(self) -> Iterator[None]:
        """The worktrees' records (`<cache>/worktrees/`) made and removed by one process of this cache at a time
        (an flock, let go however its holder ends): git's `worktree add` reads every record as it makes its own and
        dies on one another process has half made or half removed (`failed to read …/commondir`), as does any
        command that reads every worktree's HEAD (a fetch's connectivity check), and `worktree prune` removes the
        folder of records once it is empty, under an add making its record there. Waited for up to twice git's
        time limit (a prune and an add); a holder paused longer (SIGSTOP) is a ForgeError, not a wait for ever."""
        path = os.path.join(self.cache, RECORDS_LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if not flock_within(fd, 2 * git_timeout()):
                raise ForgeError(f"the cache's worktrees are locked by another process: {path}",
                                 hint="a process of this cache is paused or hung: resume or end it")
            yield
        finally:
            os.close(fd)

    def _git(self, *args: str, input: bytes | None = None, check: bool = True,
             timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
        if args[0] in NETWORK_COMMANDS:
            self.round_trips[args[0]] += 1
        return run_git(list(args), cwd=self.cache, input=input, check=check, timeout=timeout,
                       env=self._cache_env(self._env))

    def _cache_env(self, env: dict[str, str] | None) -> dict[str, str]:
        return cache_env(self.cache, env)

    def kinds(self, names: Sequence[str]) -> list[str | None]:
        """The type of each object (`sha`; `commit`, `tree`, `blob`, `tag`), None where the cache has none (or the
        name is none a batch can carry): one `cat-file --batch-check`, which reads no object's contents."""
        asked = [n for n in names if OBJECT_ID.fullmatch(n)]
        if not asked:
            return [None] * len(names)
        lines = self._git("cat-file", "--batch-check=%(objectname) %(objecttype)", "--buffer",
                          input="".join(f"{n}\n" for n in asked).encode()).stdout.decode().splitlines()
        found: dict[str, str] = {}
        for line in lines:
            name, _, kind = line.partition(" ")
            if kind in GIT_TYPES:  # else "<name> missing" (or ambiguous)
                found[name] = kind
        return [found.get(n) for n in names]

    def read_objects(self, names: Sequence[str]) -> list[bytes | None]:
        """Contents of many objects (`sha` or `sha:path`) through one `cat-file --batch`."""
        return [obj.data if obj else None for obj in self.read_typed(names)]

    def read_typed(self, names: Sequence[str]) -> list[GitObject | None]:
        """Type and contents of many objects (`sha` or `sha:path`) through one `cat-file --batch`.

        None for a name git cannot find, and for a name with a newline, which the
        batch protocol cannot carry.
        """
        return list(self.stream_typed(names))

    def stream_typed(self, names: Sequence[str]) -> Generator[GitObject | None, None, None]:
        """`read_typed`'s answers one by one, as git gives them: the caller's work on one overlaps git's reading
        of the next. Nothing else may be read through this port until the stream ends (or is closed)."""
        asked = [n for n in names if "\n" not in n]
        answers = self._exchange(asked) if asked else iter(())
        for n in names:
            yield None if "\n" in n else next(answers)
        next(answers, None)  # past the last answer: the exchange ends, and its process is kept for the next read

    def _exchange(self, names: Sequence[str]) -> Generator[GitObject | None, None, None]:
        """Ask the batch process for `names` and yield every answer.

        Names are written while answers are read (by a writer thread, unless they fit
        in the pipe at once), so neither side ever waits on a full pipe, whatever the
        count. A process left out of step by an error, or by a reader that stopped
        before the last answer, is killed, never reused.
        """
        self._await_ahead()
        proc = self._batch_process()
        self._batch = None  # this exchange's until its last answer: a read meanwhile starts a process of its own
        assert proc.stdin and proc.stdout
        payload = "".join(f"{n}\n" for n in names).encode()
        writer = None
        if len(payload) <= select.PIPE_BUF:  # an empty pipe takes this much without blocking
            try:
                proc.stdin.write(payload)
                proc.stdin.flush()
            except BrokenPipeError:  # git ended before it read a name (a cache that is no repository)
                close_quietly(proc)
                raise ForgeError(f"git cat-file in the cache {self.cache} ended before it read a name",
                                 hint="if git said it is no repository, remove that folder: it is made again") from None
        else:
            writer = threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True)
            writer.start()
        try:
            for _ in names:
                yield _read_answer(proc.stdout)
        except BaseException:  # an error, or the reader stopped early (GeneratorExit): out of step, never reused
            proc.kill()
            raise
        else:
            if self._batch is None:
                self._batch = proc  # in step again: kept for the next read
        finally:
            if writer is not None:
                writer.join()
            if proc is not self._batch:
                close_quietly(proc)

    def _batch_process(self) -> subprocess.Popen[bytes]:
        if self._batch is None or self._batch.poll() is not None:
            self._batch = subprocess.Popen(["git", "cat-file", "--batch"], cwd=self._folder,  # (started unsettled)
                                           env=cache_env(self._folder, None), stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE)
            atexit.register(self.close)
        return self._batch

    def close(self) -> None:
        if self._batch is not None:
            if self._batch.stdin:
                self._batch.stdin.close()
            self._batch.wait()
            if self._batch.stdout:
                self._batch.stdout.close()
            self._batch = None

    def message_of(self, commit: str) -> str:
        """The message of a commit in the cache ("" if it is absent)."""
        raw = self.read_objects([commit])[0]
        return raw.decode("utf-8", "replace").partition("\n\n")[2] if raw else ""

    def read_tree(self, spec: str) -> list[TreeEntry] | None:
        """The entries of a tree (`sha` or `sha:path`); None if absent, NotATree if it is another object."""
        obj = self.read_typed([spec])[0]
        if obj is None:
            return None
        if obj.kind != "tree":
            raise NotATree(spec, obj.kind)
        return parse_tree(obj.data)

    def write_object(self, kind: str, data: bytes) -> str:
        """Store a loose object in the cache; atomic (temp file, then rename)."""
        raw = f"{kind} {len(data)}\0".encode() + data
        sha = sha1_hex(raw)
        folder = f"{self.cache}/objects/{sha[:2]}"
        final = f"{folder}/{sha[2:]}"
        if self._local:
            if len(self._fresh) >= FRESH_LIMIT:  # a bound, not a cache: an object forgotten goes in a pack instead
                self._fresh.clear()
            self._fresh.add(sha)
        if os.path.exists(final):
            return sha
        tmp = f"{folder}/tmp_obj_{os.getpid()}_{os.urandom(6).hex()}"
        fd = _create(tmp, folder)
        try:
            os.write(fd, zlib.compress(raw, 1))
        finally:
            os.close(fd)
        os.replace(tmp, final)
        self._written += 1
        if self._written % MAINTAIN_EVERY == 0:
            self.maintain()
        return sha

    def maintain(self) -> None:
        """Keep the cache from growing loose files without bound, as `git gc --auto` would.

        Loose objects go into a pack once there are more than `LOOSE_LIMIT` (estimated from one
        fan-out folder, as git does); many packs are folded into one, keeping every object: the
        cache has no refs, so nothing in it counts as reachable. Safe while other processes write:
        a loose object is removed only once it is in a pack.
        """
        objects = os.path.join(self.cache, "objects")
        sample = os.path.join(objects, "17")
        loose = sum(1 for name in os.listdir(sample) if len(name) == 38) * 256 if os.path.isdir(sample) else 0
        if loose > LOOSE_LIMIT:  # by name: `git repack` would pack only what refs reach, and the cache has none
            folders = [d for d in os.listdir(objects) if len(d) == 2 and os.path.isdir(os.path.join(objects, d))]
            names = [d + f for d in folders for f in os.listdir(os.path.join(objects, d)) if len(f) == 38]
            packed = self._git("pack-objects", "-q", os.path.join(objects, "pack", "pack"), check=False,
                               input="".join(f"{n}\n" for n in names).encode())
            if packed.returncode == 0:
                self._git("prune-packed", "-q", check=False)
        packs = os.path.join(objects, "pack")
        if os.path.isdir(packs) and sum(1 for n in os.listdir(packs) if n.endswith(".pack")) > PACK_LIMIT:
            self._git("repack", "-a", "-d", "-q", "--keep-unreachable", "--no-write-bitmap-index", check=False)

    def write_blob(self, data: bytes) -> str:
        return self.write_object("blob", data)

    def write_tree(self, entries: Iterable[TreeEntry]) -> str:
        def key(e: TreeEntry) -> bytes:  # git sorts trees as if directory names end in "/"
            return e.name.encode() + (b"/" if e.mode == "40000" else b"")
        body = b"".join(f"{e.mode} {e.name}".encode() + b"\0" + bytes.fromhex(e.sha)
                        for e in sorted(entries, key=key))
        return self.write_object("tree", body)

    def write_commit(self, tree: str, parents: Sequence[str], message: str, author: Signature,
                     when: float | None = None) -> str:
        stamp = f"{int(when if when is not None else time.time())} +0000"
        who = f"{author.name} <{author.email}> {stamp}"
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {who}", f"committer {who}", "", message]
        return self.write_object("commit", ("\n".join(lines).rstrip("\n") + "\n").encode())


def committed_at(commit: bytes | None) -> int | None:
    """The committer time of a raw commit object, in seconds since the epoch (the writer's clock), or None."""
    header = (commit or b"").decode("utf-8", "replace").partition("\n\n")[0]
    for line in header.splitlines():
        if line.startswith("committer "):
            stamp = line.rsplit(" ", 2)[-2]
            return int(stamp) if stamp.isdigit() else None
    return None


def parse_tree(data: bytes) -> list[TreeEntry]:
    """The entries of a tree object, from git's binary format (`<mode> <name>\\0<20-byte sha>`)."""
    entries: list[TreeEntry] = []
    i = 0
    while i < len(data):
        space = data.index(b" ", i)
        nul = data.index(b"\0", space)
        mode = data[i:space].decode()
        name = data[space + 1:nul].decode("utf-8", "replace")
        entries.append(TreeEntry(name, data[nul + 1:nul + 21].hex(), mode))
        i = nul + 21
    return entries


def _feed(stream: IO[bytes], payload: bytes) -> None:
    """Write `payload` to the batch process; a process killed meanwhile just ends the writing."""
    try:
        stream.write(payload)
        stream.flush()
    except (OSError, ValueError):
        pass


def close_quietly(proc: subprocess.Popen[bytes]) -> None:
    """End a batch process: its input closed first (a live one then ends), then waited for."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    proc.wait()


def _read_answer(out: IO[bytes]) -> GitObject | None:
    """One answer of `cat-file --batch`: `<sha> <type> <size>` and the contents, or `<name> missing`."""
    header = out.readline()
    if not header.endswith(b"\n"):
        raise ForgeError("git cat-file stopped answering", hint="run the command again")
    parts = header.decode("utf-8", "replace").split()
    if len(parts) != 3 or not parts[2].isdigit():  # "<name> missing" or "<name> ambiguous"
        return None
    data = out.read(int(parts[2]))
    if len(data) != int(parts[2]) or out.read(1) != b"\n":
        raise ForgeError("git cat-file stopped answering", hint="run the command again")
    return GitObject(parts[1], data)


def _create(path: str, folder: str) -> int:
    """Open a new file in a fan-out folder, which a repack of the cache may have removed meanwhile."""
    for _ in range(10):
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
