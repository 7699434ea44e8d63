"""The desks' worktrees of a cache: made by git, adopted as they are after a crash, moved in from another cache,
and kept in pools of clean spares, so that a brief's new worktree is a checkout of what differs, not of every file.

A pool is a folder beside the worktrees (`SPARES`). A worktree goes there whole (renamed) once nothing in it is
anything but a commit's files (`reusable`): its git record (`<cache>/worktrees/<id>`) holds no state of its own
(no rebase, merge or bisect under way, no sparse patterns, no submodules) and its index hides no file from git. A
taker renames a spare out of the pool (one taker has it), makes it clean at its commit (`checkout --force`,
`clean -ffdx`), and renames it to the brief's path. While a worktree moves, its record is locked (`git worktree
prune` leaves a locked record alone) and then pointed at its new place, in an order that leaves, whatever moment a
process is killed at, the brief's path empty or a clean worktree at its commit, and every worktree in use with a
record no prune removes.
"""

from __future__ import annotations

import contextlib
import os
import time

from assay.core.crash import crash_point
from assay.core.git.push import Pushing
from assay.core.git.run import rmtree, run_git
from assay.core.git.workrepo import WorkRepo
from assay.errors import AssayError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PRUNE_EVERY_S = 600.0  # a cache's worktrees' records of folders gone are pruned at most this often
_pruned: dict[str, float] = {}  # cache -> when this process last pruned them (monotonic)
SPARES = ".spare"  # beside a desk's worktrees: the pool of clean ones (a brief's id never begins with a dot)
SPARES_MAX = 32  # worktrees a pool keeps; one given back to a full pool is removed
TAKING = ".taking-"  # `.taking-<unix time>-<random>`: a spare being made clean, its taker holding a lock on it
DISCARDED = ".discarded-"  # `.discarded-<unix time>-<random>`: a worktree being removed
LITTER_S = 60.0  # a taking or discarded folder this old and nobody's (its process was killed) is removed
LOCKED = "locked"  # in a worktree's record while it moves; ours say "assay: <token>"
# what the record of a worktree that is only a commit's files holds; anything else (a rebase, a merge or a bisect
# under way, sparse patterns, its own config, submodules, refs of its own, a person's lock) is state no other brief
# may inherit, and such a worktree is never a spare
PLAIN_RECORD = frozenset({"HEAD", "commondir", "gitdir", "index"})
HISTORY = frozenset({"COMMIT_EDITMSG", "FETCH_HEAD", "ORIG_HEAD", "REBASE_HEAD", "logs"})  # forgotten when taken
PRIVATE_INDEX = "assay-index."  # a worktree reader's copy of the index (`wip.read`); one a killed reader left


class Worktrees(Pushing):
    """The worktrees of this cache at paths the caller names."""

    def worktree(self, path: Path, commit: str, spares: Path | None = None) -> WorkRepo:
        """A worktree of the cache at `path`: adopted as it is if it exists (work in progress survives a crash),
        and moved into this cache first if another cache made it, or its `.git` names another worktree's record
        (`_rehome`). A new one is a spare of the pool `spares` made clean at `commit` where the pool has one
        (`_take_spare`), else made by git."""
        if (path / ".git").exists():
            admin = self._admin(path)
            if admin is None or not self._ours(admin, path):
                self._rehome(path, commit)
            elif self._point_back(admin, path):  # a mover killed before it did: pointed here, before a prune
                _unlock(admin)
            return WorkRepo(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if spares is not None and not os.path.lexists(path) and self._take_spare(spares, path, commit):
            return WorkRepo(path)
        with self._records():
            self._prune()
            # twice forced: over a folder gone, and over a record of this path that a killed mover left locked
            self._git("worktree", "add", "--detach", "--force", "--force", str(path), commit)
        return WorkRepo(path)

    @contextlib.contextmanager
    def clean_checkout(self, path: Path, commit: str) -> Iterator[WorkRepo]:
        """A worktree at `path` holding `commit`'s files and nothing else, for rows to run in (verify, `done_when`,
        a landing's check), this thread's alone meanwhile (a lock beside it): a spare of the pool beside it
        (`SPARES`) made clean, or one a run cut short left there made clean again (removed instead if it is not
        `reusable`), or a new one; given back to the pool once the block is done with it."""
        import fcntl

        spares, named = path.parent / SPARES, path.parent / f".{path.name}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:  # another desk's rows in the same checkout: these wait for them to end
            lock = os.open(named, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX)
            with contextlib.suppress(OSError):
                if os.stat(named).st_ino == os.fstat(lock).st_ino:
                    break  # still the lock's file: not one its last holder removed as it let go
            os.close(lock)
        try:
            adopted = (path / ".git").exists()
            repo = self.worktree(path, commit, spares)
            if adopted and not self.reusable(path):  # rows cut short left state of their own: not cleaned, removed
                self._discard(path, spares)
                repo = self.worktree(path, commit, spares)
            elif adopted:
                repo.git("checkout", "-q", "--force", "--detach", commit)
                repo.git("clean", "-q", "-ffdx")
            yield repo
            self.give_back(path, spares)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(named)  # no lock file left a brief: removed while held, so no waiter keeps a stale one
            os.close(lock)

    def reusable(self, path: Path) -> bool:
        """Whether the worktree at `path` is this cache's and could be another brief's once made clean: its record
        is its own and holds nothing but a commit's files (`PLAIN_RECORD`, its `HISTORY`, a lock of ours), and its
        index hides no file from git (assumed unchanged, or skipped: `checkout --force` leaves such a file be)."""
        admin = self._admin(path)
        if admin is None or not self._points_here(admin, path):
            return False
        try:
            names = os.listdir(admin)
        except OSError:
            return False
        if any(n not in PLAIN_RECORD | HISTORY and not n.startswith(PRIVATE_INDEX) for n in names if n != LOCKED):
            return False
        if LOCKED in names and not _lock_of(admin).startswith("assay:"):
            return False  # a person's lock (`git worktree lock`): theirs
        marks = WorkRepo(path).git("ls-files", "-v", "-z", check=False)
        return marks.returncode == 0 and all(m.startswith(b"H ") for m in marks.stdout.split(b"\0") if m)

    def give_back(self, path: Path, spares: Path, keep_unfit: bool = False) -> None:
        """Give the worktree at `path` to the pool `spares` (a folder on the same file system): its record locked
        and pointed at its place in the pool, then the worktree renamed there, then the record unlocked; removed
        instead, with its record, when the pool is full or it is not `reusable` (left where it is with
        `keep_unfit`: it may hold work). Anything that is not this cache's own worktree at `path` is left alone; a
        failure leaves the worktree where it is (adopted there again)."""
        admin = self._admin(path)
        if admin is None or not self._points_here(admin, path):
            return
        with contextlib.suppress(AssayError, OSError):
            fit = self.reusable(path)
            if not fit and keep_unfit:
                return
            if not fit or len(self._spares_in(spares)) >= SPARES_MAX:
                self._discard(path, spares)
                return
            spares.mkdir(parents=True, exist_ok=True)
            to = spares / _random(8)
            token = _lock(admin)
            if not self._point_back(admin, to):
                _unlock(admin, token)
                return
            crash_point("worktree.giving-back")
            try:
                os.rename(path, to)
            except OSError:
                if self._point_back(admin, path):
                    _unlock(admin, token)
                return
            crash_point("worktree.given-back")
            _unlock(admin, token)

    def _take_spare(self, spares: Path, path: Path, commit: str) -> bool:
        """Take a spare of the pool and make it `path`: locked by its taker (an flock, held while the taker's
        process lives: `_spares_in` leaves it be) and renamed out of the pool (atomic: one taker has it), made clean
        at `commit` there (HEAD, the index and every file as a new worktree's: a checkout writes only what differs),
        then its record locked, the spare renamed to `path`, the record pointed there and unlocked. A spare that is
        no spare, or that git cannot make clean while the commit is in the cache, is removed and the next one
        tried; when the commit is missing it goes back to the pool, and the worktree is made by git (which says
        why it cannot be)."""
        import fcntl

        for name in self._spares_in(spares):
            try:
                held = os.open(spares / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # another desk took it first
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # this taker's, before it leaves the pool
                taking = spares / f"{TAKING}{int(time.time())}-{_random(6)}"
                os.rename(spares / name, taking)
            except OSError:
                os.close(held)
                continue  # another desk has it
            try:
                crash_point("worktree.spare-taken")
                placed = self._place(spares, spares / name, taking, path, commit)
            except (AssayError, OSError):  # git itself failing (a timeout): left for `_spares_in`, made by git
                return False
            finally:
                os.close(held)
            if placed is not None:
                return placed
        return False

    def _place(self, spares: Path, was: Path, taking: Path, path: Path, commit: str) -> bool | None:
        """`_take_spare`'s work on one spare taken: True once it is at `path`, False when the commit is not in the
        cache (the spare is back in the pool), None when it is no spare (removed)."""
        admin = self._admin(taking)
        if admin is None or not self._points_here(admin, was) or not self._point_back(admin, taking) \
                or not self.reusable(taking):
            self._discard(taking, spares)
            return None
        _forget(admin)
        try:
            repo = WorkRepo(taking)
            repo.git("checkout", "-q", "--force", "--detach", commit)
            repo.git("clean", "-q", "-ffdx")
            if not self.reusable(taking):  # the checkout met patterns that skip files: not a clean worktree
                self._discard(taking, spares)
                return None
            crash_point("worktree.spare-cleaned")
            token = _lock(admin)
            os.rename(taking, path)
        except (AssayError, OSError):
            if self._git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0:
                self._discard(taking, spares)  # the commit is here: the spare is what git could not make clean
                return None
            with contextlib.suppress(OSError):
                back = spares / _random(8)
                if self._point_back(admin, back):  # for another take, which makes it clean
                    os.rename(taking, back)
                    _unlock(admin)
            return False
        crash_point("worktree.spare-placed")
        if self._point_back(admin, path):  # else (killed, or failing) its adoption points it here and unlocks it
            _unlock(admin, token)
        return True

    def _spares_in(self, spares: Path) -> list[str]:
        """The pool's spares, ready to take; a spare a killed taker left half made clean (nobody holds its lock),
        or a worktree a killed process was removing, is removed with its record once `LITTER_S` old (by the time
        in its name)."""
        import fcntl

        try:
            names = sorted(os.listdir(spares))
        except OSError:
            return []
        ready = []
        for name in names:
            if not name.startswith("."):  # a spare's name (one being taken or removed begins with a dot)
                ready.append(name)
                continue
            kind = TAKING if name.startswith(TAKING) else DISCARDED if name.startswith(DISCARDED) else ""
            at = name[len(kind):].partition("-")[0] if kind else ""
            if not at.isdecimal() or time.time() - int(at) < LITTER_S:
                continue
            litter = spares / name
            if kind == TAKING:
                try:
                    held = os.open(litter, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its taker lives: it is being made clean
                finally:
                    os.close(held)
            self._discard(litter, None)
        return ready

    def _discard(self, tree: Path, spares: Path | None) -> None:
        """Remove a worktree that is no spare, with its record when the record names it: the record pointed at a
        place aside in the pool, the worktree renamed there, the record removed, then the files (a removal cut
        short leaves litter there, never a worktree half removed at a brief's path, nor a second record naming
        it)."""
        admin = self._admin(tree)
        own = admin if admin is not None and self._points_here(admin, tree) else None
        aside = tree
        if spares is not None and not tree.name.startswith(DISCARDED):
            with contextlib.suppress(OSError):
                spares.mkdir(parents=True, exist_ok=True)
                moved = spares / f"{DISCARDED}{int(time.time())}-{_random(6)}"
                if own is None or self._point_back(own, moved):
                    os.rename(tree, moved)
                    aside = moved
                    crash_point("worktree.discarding")
        if own is not None and self._points_here(own, aside):
            with self._records():
                rmtree(own)
        rmtree(aside)

    def _admin(self, path: str | os.PathLike[str]) -> str | None:
        """The folder in this cache that records the worktree at `path` (its `.git` file names it), if it exists."""
        try:
            with open(os.path.join(path, ".git"), encoding="utf-8") as f:
                pointer = f.read().strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not pointer.startswith("gitdir:"):
            return None
        admin = os.path.realpath(os.path.join(path, pointer.removeprefix("gitdir:").strip()))
        home = os.path.realpath(os.path.join(self.cache, "worktrees"))
        return admin if os.path.dirname(admin) == home and os.path.isdir(admin) else None

    @staticmethod
    def _recorded(admin: str) -> str:
        """Where the record `admin` says its worktree is (its `gitdir` less `/.git`, resolved as git resolves a
        relative one: from the record), "" if it cannot be read."""
        try:
            with open(os.path.join(admin, "gitdir"), encoding="utf-8") as f:
                named = f.read().strip()
        except (OSError, UnicodeDecodeError):
            return ""
        return os.path.realpath(os.path.dirname(os.path.join(admin, named))) if named else ""

    def _points_here(self, admin: str, path: Path) -> bool:
        return self._recorded(admin) == os.path.realpath(path)

    def _ours(self, admin: str, path: Path) -> bool:
        """Whether the record `admin` may be taken as that of the worktree at (or moved from) `path`: it names
        `path`; or a place where no worktree holds it (moved from there; or another worktree now, recorded apart);
        not a worktree that holds it, whose record a `.git` elsewhere was made to name."""
        recorded = self._recorded(admin)
        if not recorded:
            return False
        if recorded == os.path.realpath(path):
            return True
        if _lock_of(admin) and not _lock_of(admin).startswith("assay:"):
            return False  # another's lock (git's own as it makes a worktree, a person's): not this one's
        if not os.path.lexists(recorded):
            return True
        with contextlib.suppress(OSError):
            if os.path.samefile(recorded, path):
                return True  # the same folder by another name (a link, a mount)
        return self._admin(recorded) != admin

    def _point_back(self, admin: str, path: Path) -> bool:
        """Point the record `admin` at the worktree at (or about to be at) `path`: its `gitdir` file, as git writes
        it (see gitrepository-layout(5)), so that `git worktree prune` keeps it. True once it points there."""
        if self._points_here(admin, path):
            return True  # pointing here already: nothing written
        part = os.path.join(admin, f"gitdir.{_random(4)}")
        try:
            with open(part, "w", encoding="utf-8") as f:
                f.write(os.path.join(os.path.realpath(path), ".git") + "\n")
            os.replace(part, os.path.join(admin, "gitdir"))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(part)
            return False
        return True

    def _prune(self) -> None:
        """Forget the worktrees whose folders are gone (a git process), at most once every `PRUNE_EVERY_S` in a
        process: `add --force` takes a path whose folder is gone anyway, so this only keeps the records few. Its
        caller holds the records (`_records`)."""
        now, key = time.monotonic(), str(self.cache)
        if now - _pruned.get(key, -PRUNE_EVERY_S) >= PRUNE_EVERY_S:
            _pruned[key] = now
            self._git("worktree", "prune")

    def _rehome(self, path: Path, commit: str) -> None:
        """Make a worktree another cache made (ASSAY_CACHE_DIR changed), or one whose `.git` names another
        worktree's record, one of this cache's with a record of its own, keeping its files: its commits are fetched
        from it while the old cache still exists (else it starts from `commit`), a new worktree's `.git` takes the
        place of the old one, and the index is reset to HEAD, the files left as they are."""
        head = run_git(["rev-parse", "-q", "--verify", "HEAD"], cwd=path, check=False, env=self._env)
        start = head.stdout.decode().strip() if head.returncode == 0 else commit
        spare = path.parent / f".{path.name}.rehome"
        rmtree(spare)
        with self._records():  # the fetch (its check reads every record), the new record until it is whole
            if head.returncode == 0:
                self._git("fetch", "-q", "--no-tags", "--no-write-fetch-head", str(path), "HEAD", check=False)
            self._prune()
            self._git("worktree", "add", "--no-checkout", "--detach", "--force", str(spare), start)
            (path / ".git").unlink()
            os.replace(spare / ".git", path / ".git")
            spare.rmdir()
            self._git("worktree", "repair", str(path))
        run_git(["reset", "-q"], cwd=path, env=self._env)


def _random(size: int) -> str:
    """A name's random part (not `secrets`, whose import loads hashlib: `assay step run` goes without it)."""
    return os.urandom(size).hex()


def _lock_of(admin: str) -> str:
    try:
        with open(os.path.join(admin, LOCKED), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return ""


def _lock(admin: str) -> str:
    """Lock the record `admin` against a prune while its worktree moves; the lock's token."""
    token = _random(8)
    part = os.path.join(admin, f"{LOCKED}.{token}")
    with open(part, "w", encoding="utf-8") as f:
        f.write(f"assay: {token} moving to or from a pool of spares\n")
    os.replace(part, os.path.join(admin, LOCKED))
    return token


def _unlock(admin: str, token: str = "") -> None:
    """Remove our lock (`token`'s, or, with none, any of ours); a person's (`git worktree lock`) is theirs."""
    held = _lock_of(admin)
    if held.startswith(f"assay: {token}"):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(admin, LOCKED))


def _forget(admin: str) -> None:
    """A spare's past as another brief's worktree (its reflog, ORIG_HEAD, a reader's private index) removed."""
    with contextlib.suppress(OSError):
        for name in os.listdir(admin):
            if name == "logs":
                rmtree(os.path.join(admin, name))
            elif name in HISTORY or name.startswith(PRIVATE_INDEX):
                os.unlink(os.path.join(admin, name))
