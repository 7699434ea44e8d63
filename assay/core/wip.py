"""A brief's worktree as its agent-session checkpoints recorded it: `refs/assay/wip/<brief>`.

Each checkpoint of an agent's conversation records the worktree at the same moment, as a commit (a
*snapshot*): its tree is every tracked file and every untracked file that is not ignored (`git add -A` into an
index of its own: the worktree's index is neither written nor locked while the agent works), its first parent
the worktree's HEAD (so the agent's own commits, pushed or not, travel too), and its second the brief's previous
snapshot, so the ref is a chain that only moves forward and keeps every checkpoint's files for a fork. Every
file that differs from HEAD is scrubbed of the forge credentials the desk knows, as a transcript is
(`credentials.scrub`). Changes (changed and untracked files) over `MAX_BYTES` make no snapshot: that checkpoint
holds the conversation alone, and the desk says so once.

Each journal push carrying results of steps the agent ran through its desk records one too, named by the last of
them (`Journal.recorder`): a successor that replays a result instead of running the step again has its files.
The ref moves only in the journal push of the checkpoint or result entry that names the snapshot (`"worktree":
<commit>`), fenced like it (`Recorder.recording`), in a fork's first push, and is deleted when the brief is
retired.
The work branch never holds a snapshot: `restore` makes a worktree's files a snapshot's and its HEAD the
snapshot's first parent, so what is committed next has the agent's HEAD as its parent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from assay.core.credentials import scrub
from assay.core.git import OBJECT_ID, ZERO, ForgeGit, RefUpdate, Signature, WorkRepo
from assay.core.lives import own_tag
from assay.core.records import wip_ref
from assay.core.records.recordtype import dataclass
from assay.errors import AssayError, RecordInvalid

MAX_BYTES = 64 * 1024 * 1024  # changed and untracked files past this make no snapshot (said once per run)


@dataclass(frozen=True)
class Snapshot:
    """A snapshot commit, with how many files (and bytes of them) differ from its first parent, the agent's HEAD."""

    commit: str
    files: int
    bytes: int


def _parents_and_tree(git: ForgeGit, commit: str, where: str) -> tuple[str, list[str]]:
    tree, parents, _ = _read_commit(git, commit, where)
    return tree, parents


def _read_commit(git: ForgeGit, commit: str, where: str) -> tuple[str, list[str], str]:
    """A snapshot's tree, parents, and the merge under way it was taken in (its `Merging:` line, "" for none)."""
    found = git.read_typed([commit])[0]
    if found is None or found.kind != "commit":
        raise RecordInvalid(where, f"snapshot {commit[:10]} is not a commit in the forge's objects")
    header, _, message = found.data.partition(b"\n\n")
    head = header.decode("ascii", "replace").splitlines()
    tree = next((line[5:] for line in head if line.startswith("tree ")), "")
    merging = next((line[9:].strip() for line in message.decode("utf-8", "replace").splitlines()
                    if line.startswith("Merging: ")), "")
    return tree, [line[7:] for line in head if line.startswith("parent ")], merging


@dataclass(frozen=True)
class Worktree:
    """A worktree as read for a snapshot: its tree (written to the cache), its HEAD, how many files (and bytes
    of them) differ from HEAD, and the commit a merge under way merges ("" for none)."""

    tree: str
    head: str
    files: int
    bytes: int
    merging: str = ""


RACY_NS = 2_500_000_000  # a file changed this close before a read began may change after it, unseen in its times
# (file systems keep times as coarse as 2 s)
now_ns = time.time_ns  # the clock file times are on


class Seen:
    """What the last `read` of one worktree saw, so that the next read, finding git's account of the worktree and
    the times of every file it lists unchanged, answers the same tree without hashing anything again (an agent's
    step results pushed one after another, nothing written between them: one git process, not five). Kept
    only when the tree holds nothing the account did not list (a file written after `status`, before `add`)."""

    def __init__(self) -> None:
        self.key: tuple[object, ...] = ()
        self.found: Worktree | None = None

    def same(self, key: tuple[object, ...]) -> Worktree | None:
        return self.found if self.found is not None and key == self.key else None


def _times(worktree: Path, status: list[bytes], began_ns: int) -> tuple[tuple[object, ...], int, bool]:
    """For each file `status` lists, its identity and times (None for one gone); the bytes of the regular ones;
    and whether its times cannot tell a later change: one changed too close to `began_ns` (git's racy entries),
    or a folder (a repository in the worktree: a commit in it leaves the folder's times as they were)."""
    out: list[object] = []
    size, racy = 0, False
    for record in status:
        if len(record) <= 3:
            continue
        try:
            st = os.lstat(worktree / os.fsdecode(record[3:]))
        except OSError:
            out.append(None)
            continue
        racy = racy or max(st.st_mtime_ns, st.st_ctime_ns) >= began_ns - RACY_NS or stat.S_ISDIR(st.st_mode)
        out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return tuple(out), size, racy


def read(git: ForgeGit, worktree: Path, secrets: Sequence[bytes], limit: int = MAX_BYTES,
         seen: Seen | None = None) -> Worktree | None:
    """The worktree's files that are not ignored, as a tree in the cache, each one that differs from HEAD
    scrubbed of `secrets`; None when the changes are over `limit` bytes (nothing of them is hashed then). `seen`:
    the last read of this worktree, answered again when nothing it read has changed (and then updated)."""
    repo = WorkRepo(worktree)
    began = now_ns()
    real, head = os.path.join(repo.git_dir(), "index"), repo.head()
    # the copy of the index beside it, not in /tmp: one a desk killed while it read leaves goes with the worktree
    index = os.path.join(os.path.dirname(real), f"assay-index.{own_tag()}")
    for leftover in (index, f"{index}.lock"):  # what a reader killed mid-read left, in a life whose ids this one
        with contextlib.suppress(OSError):  # took again: never read as this read's index, nor a lock in its way
            os.unlink(leftover)
    try:
        try:
            at = os.stat(real)
            shutil.copy2(real, index)  # its stat data spares hashing the files that did not change (its time too:
            # git reads an entry as old as the index itself as racy, and compares its contents)
            marks: tuple[int, ...] = (at.st_ino, at.st_size, at.st_mtime_ns, at.st_ctime_ns)
        except FileNotFoundError:
            marks = ()
        status = repo.git("status", "--porcelain", "-z", "--untracked-files=all", "--no-renames",
                          index=index).stdout.split(b"\0")
        times, size, racy = _times(worktree, status, began)
        key = (head, marks, b"\0".join(status), tuple(secrets), limit, times, began if racy else 0)
        again = seen.same(key) if seen is not None else None
        if again is not None:
            return Worktree(again.tree, again.head, again.files, again.bytes, _merging(real))
        if size > limit:
            return None
        repo.git("add", "-A", index=index)
        changed = _changed(repo, index)
        files = [(mode, sha, path) for mode, sha, path in changed if mode not in ("000000", "160000")]
        if secrets and files:  # HEAD's files go to the work branch as they are at its next push: only changes
            blobs = git.read_objects([sha for _, sha, _ in files])
            fixed = b""
            for (mode, _, path), data in zip(files, blobs, strict=True):
                clean = scrub(data, secrets) if data is not None else None
                if clean is not None and clean != data:
                    fixed += f"{mode} {git.write_blob(clean)}\t".encode() + path + b"\0"
            if fixed:
                repo.git("update-index", "-z", "--index-info", index=index, input=fixed)
        tree = repo.git("write-tree", index=index).stdout.decode().strip()
    finally:
        for leftover in (index, f"{index}.lock"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
    found = Worktree(tree, head, len(changed), size, _merging(real))
    listed = {r[3:] for r in status if len(r) > 3}
    if seen is not None:  # kept only if it holds no change the status did not list (one made after it, then undone)
        kept = all(path in listed and mode != "160000" for mode, _, path in changed)
        seen.key, seen.found = (key, found) if kept else ((), None)
    return found


def _merging(index: str) -> str:
    """The commit a merge under way merges, from beside the index (the worktree's own git folder), or ""."""
    try:
        merging = Path(index).with_name("MERGE_HEAD").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return merging if OBJECT_ID.fullmatch(merging) else ""


def commit(git: ForgeGit, found: Worktree, previous: str = "", who: str = "assay") -> Snapshot:
    """`found` as a snapshot commit in the cache (not pushed), on `previous` (the brief's last snapshot, "" for
    none); `previous` itself when it holds the same files on the same HEAD."""
    if previous:
        before, parents, merging = _read_commit(git, previous, "the previous snapshot")
        if before == found.tree and parents[:1] == [found.head] and merging == found.merging:
            return Snapshot(previous, found.files, found.bytes)
    message = f"assay: worktree of a checkpoint\n\n{found.files} files differ from {found.head}\n"
    if found.merging:
        message += f"Merging: {found.merging}\n"  # a merge under way, kept by a restore in the same merge
    sha = git.write_commit(found.tree, [found.head, *([previous] if previous else [])], message, Signature.of(who),
                           time.time())
    return Snapshot(sha, found.files, found.bytes)


def take(git: ForgeGit, worktree: Path, secrets: Sequence[bytes], previous: str = "", who: str = "assay",
         limit: int = MAX_BYTES) -> Snapshot | None:
    """`read`, then `commit`: the worktree as a snapshot commit on `previous`, or None over `limit`."""
    found = read(git, worktree, secrets, limit)
    return commit(git, found, previous, who) if found is not None else None


def _changed(repo: WorkRepo, index: str) -> list[tuple[str, str, bytes]]:
    """(mode, blob, path) of each file in `index` that differs from HEAD; a deleted one's mode is 000000."""
    out = repo.git("diff-index", "--cached", "-z", "--no-renames", "HEAD", index=index).stdout.split(b"\0")
    found = []
    for meta, path in zip(out[0::2], out[1::2], strict=False):
        fields = meta.decode("ascii", "replace").lstrip(":").split()
        if len(fields) == 5:
            found.append((fields[1], fields[3], path))
    return found


class Recorder:
    """One agent run's snapshots of its worktree, one per checkpoint or step result: `recording` takes one and
    gives what the entry's journal push carries. Never fails the entry: a snapshot that cannot be taken is said,
    and the entry is journaled without one."""

    def __init__(self, brief: str, worktree: Path, secrets: Sequence[bytes], echo: Callable[[str], None],
                 who: str, limit: int = MAX_BYTES) -> None:
        self.ref, self.worktree, self.secrets, self.echo, self.who = wip_ref(brief), worktree, secrets, echo, who
        self.limit = limit
        self.tip: str | None = None  # the ref's tip as this run last read or wrote it ("" absent; None: read it)
        self.said: set[str] = set()  # what was said once already
        self.taken: Snapshot | None = None  # the last snapshot taken (for measuring)
        self._lock = threading.Lock()  # one checkpoint at a time: each snapshot is on the one before
        self._seen = Seen()  # the last read, answered again while nothing changed

    def _say(self, key: str, text: str) -> None:
        if key not in self.said:
            self.said.add(key)
            self.echo(text)

    @contextmanager
    def recording(self, git: ForgeGit) -> Iterator[tuple[dict[str, str], list[RefUpdate]]]:
        """A snapshot of the worktree now, as the checkpoint entry's data (`{"worktree": <commit>}`, or nothing)
        and the ref update to push with it. The body pushes them; if it raises, the ref is read again next time."""
        with self._lock:
            data: dict[str, str] = {}
            refs: list[RefUpdate] = []
            try:
                found = read(git, self.worktree, self.secrets, self.limit, self._seen)  # as the transcript was read
                if self.tip is None and found is not None:
                    self.tip = git.ls_remote(self.ref).get(self.ref, "")
                    if self.tip:
                        git.ensure_objects({self.ref: self.tip})
                self.taken = snap = commit(git, found, self.tip or "", self.who) if found is not None else None
                if snap is None:
                    self._say("over", f"the worktree's changes are over {self.limit} bytes: checkpoints and step "
                                      "results go without the worktree")
                else:
                    data = {"worktree": snap.commit}
                    refs = [RefUpdate(self.ref, snap.commit, self.tip or ZERO)] if snap.commit != self.tip else []
            except (AssayError, OSError) as exc:
                self.tip = None
                self._say("failed", f"the worktree could not be recorded, checkpoints and step results go without "
                                    f"it: {getattr(exc, 'message', None) or exc}")
            try:
                yield data, refs
            except BaseException:
                self.tip = None  # the push's outcome is not known here: read the ref again
                raise
            if data:
                self.tip = data["worktree"]


def fetch(git: ForgeGit, brief: str, commit: str) -> tuple[str, list[str]]:
    """Bring snapshot `commit` of `brief` (a value read from the journal) into the cache: its tree and parents.
    RecordInvalid if it is no commit id, or not a commit."""
    ref = wip_ref(brief)
    if not OBJECT_ID.fullmatch(commit):
        raise RecordInvalid(ref, f"a checkpoint names {commit[:50]!r} as its worktree, which is no commit id")
    git.ensure_objects({ref: commit})  # by id: an earlier snapshot is in the chain's history, a retired one kept
    return _parents_and_tree(git, commit, ref)


def restore(git: ForgeGit, worktree: Path, brief: str, commit: str) -> bool:
    """Make the worktree hold snapshot `commit`: its files the snapshot's (files not in it removed, ignored ones
    kept), HEAD its first parent, a merge under way still under way. True if restored; False if the worktree's
    HEAD is past that parent already (the branch was pushed after the snapshot, which it holds), when it is left
    as it is. Raises if the snapshot cannot be fetched or the worktree moved elsewhere."""
    ref = wip_ref(brief)
    fetch(git, brief, commit)
    _, parents, merged = _read_commit(git, commit, ref)
    if not parents:
        raise RecordInvalid(ref, f"snapshot {commit[:10]} has no parent")
    repo = WorkRepo(worktree)
    head, parent = repo.head(), parents[0]
    if head != parent and not git.is_ancestor(head, parent):
        if git.is_ancestor(parent, head):
            return False
        raise RecordInvalid(ref, f"snapshot {commit[:10]} is not on the worktree's history (HEAD {head[:10]})")
    folder = Path(repo.git_dir())  # the worktree's own
    merge = _merge_notes(folder)
    repo.git("read-tree", "--reset", "-u", commit)  # HEAD stays where it is until the files are the snapshot's
    repo.git("clean", "-fdq")
    repo.git("reset", "-q", parent)
    if merged and merge.get("MERGE_HEAD", b"").decode("ascii", "replace").strip() == merged:
        # the snapshot was taken in the merge under way here (a woken round's of main, not committed): its files hold
        # that merge, and the reset dropped only git's notes of it, put back so that the next commit is that merge
        for name, text in merge.items():
            (folder / name).write_bytes(text)
    return True


MERGE_NOTES = ("MERGE_HEAD", "MERGE_MODE", "MERGE_MSG")  # what git keeps of a merge under way (`--no-ff` in the mode)


def _merge_notes(folder: Path) -> dict[str, bytes]:
    """Git's notes of a merge under way in a worktree's git folder, by name (none: empty)."""
    found = {}
    for name in MERGE_NOTES:
        with contextlib.suppress(OSError):
            found[name] = (folder / name).read_bytes()
    return found
