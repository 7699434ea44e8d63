"""Commits in the cache: fetched from the forge (whole, or shallow), their first-parent chains (kept: commits
never change), ancestry, diffs and merges."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Sequence

from assay.core.credentials import redact
from assay.core.git.gitenv import git_timeout
from assay.core.git.objects import ObjectCache
from assay.core.git.refs import OBJECT_ID
from assay.core.git.run import first_error
from assay.errors import ForgeError

_PAIR = re.compile(r"([0-9a-f]{40}|[0-9a-f]{64}) (?:[0-9a-f]{40}|[0-9a-f]{64})\n")  # a line `changed_against` gave
# a depth no chain reaches, one below git's "infinite" (2^31 - 1), at which the forge unshallows every commit the
# cache holds shallow (a journal's 100,000 commits below its snapshot, to make a claim's chain whole)
WHOLE_DEPTH = 2**31 - 2
LOOK_LOOSE_AT_MOST = 64  # tips looked for by their loose files and the running cat-file batch; more: a batch-check
WALK_AT_MOST = 8  # commits of a chain read through the cat-file batch before `rev-list` is asked for the rest


class History(ObjectCache):
    """Commits fetched into the cache and read there: chains, ancestry, diffs, merges."""

    def __init__(self, url: str, cache_root: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        super().__init__(url, cache_root, token)
        self._parents: dict[str, str | None] = {}  # first-parent links read (None: a root); a commit absent: unknown
        # commits read whole that have one parent (None: none) -> it, as their objects say: `_not_below` walks them
        self._lone: dict[str, str | None] = {}

    def ensure_objects(self, refs: dict[str, str], force: bool = False, whole: bool = True) -> None:
        """Make the tips `refs` (ref -> sha) and their history present in the cache: one fetch at most (two in a
        cache a shallow read left cut short above one of these tips).

        The tips are fetched by object id: exactly what was read, and fast (git matches ref
        names against the advertisement one by one, slow with thousands). A forge that does
        not serve an id (it collected it, or refuses unadvertised wants) is asked by ref name.
        `whole=False`: the tips alone will do (the caller reads only commits it knows are there, as after a
        journal snapshot), so a shallow cache is not made whole.
        """
        if force:
            self._fetch(refs)
        elif missing := self._missing(refs):
            self._fetch_missing(missing)
        if whole and (shallow := self.shallow_commits()) and self._cut(list(refs.values()), shallow):
            self._fetch(refs, f"--depth={WHOLE_DEPTH}")  # these tips' histories whole; other cut chains stay cut
            self._parents.clear()  # links learned while it was cut (a shallow commit as a root) are stale

    def fetch_shallow(self, refs: dict[str, str], depth: int) -> None:
        """Fetch the tips `refs` with only the last `depth` commits of their history (`git fetch --depth`): the
        cache is shallow there (git's `shallow` file) until a reader that needs the whole chain makes it whole
        (`ensure_objects`). A journal snapshot's reader takes this, not the chain below the snapshot."""
        self._fetch(refs, f"--depth={max(1, depth)}")

    def holds_nothing(self) -> bool:
        """Whether the cache holds no object at all (no pack, nothing loose) and none is on its way (a fetch's
        `tmp_pack_*` into it): a new machine's."""
        objects = os.path.join(self.cache, "objects")
        try:
            loose, packs = os.listdir(objects), os.listdir(os.path.join(objects, "pack"))
        except OSError:
            return False
        return not any(len(n) == 2 for n in loose) and not any(n.endswith(".pack") or n.startswith("tmp_")
                                                               for n in packs)

    def shallow_commits(self) -> frozenset[str]:
        """The commits the cache holds without their parents (git's `shallow` file); empty when it is whole."""
        try:
            with open(os.path.join(self.cache, "shallow"), encoding="ascii") as listed:
                return frozenset(listed.read().split())
        except (OSError, ValueError):
            return frozenset()

    def _cut(self, tips: Sequence[str], shallow: frozenset[str]) -> bool:
        """Whether the history of any of `tips` (those in the cache) stops at a shallow commit."""
        present = [t for t, obj in zip(tips, self.read_typed(list(tips)), strict=True) if obj is not None]
        if not present:
            return False
        proc = self._git("rev-list", "--first-parent", "--stdin", check=False,
                         input="".join(f"{t}\n" for t in present).encode())
        return any(sha in shallow for sha in proc.stdout.decode().split())

    def _fetch_missing(self, refs: dict[str, str]) -> None:
        """Fetch tips the cache lacks; over HTTP, under a supervisor, with the host's other desks (`fetchgroup.py`):
        what another desk of the host fetched meanwhile is not fetched again."""
        if not self.remote.lower().startswith(("http://", "https://")):
            self._fetch(refs)
            return
        from assay.core import fetchgroup

        fetchgroup.fetch(os.path.join(self.cache, "fetches"), sorted(refs.items()), self._lacking, self._fetch_pairs,
                         git_timeout())

    def _fetch(self, refs: dict[str, str], *extra: str) -> None:
        self._fetch_pairs(list(refs.items()), *extra)

    def _fetch_pairs(self, wants: Sequence[tuple[str, str]], *extra: str) -> None:
        """One fetch of the tips `wants` (ref, object id) by their ids; by their refs where the forge refuses."""
        args = ["fetch", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-auto-maintenance", "-q", *extra,
                "--stdin", self.remote]
        by_id = self._fetch_git(args, "".join(f"{sha}\n" for sha in {s for _, s in wants}).encode())
        if by_id.returncode == 0:
            return
        proc = self._fetch_git(args, "".join(f"{ref}\n" for ref in {r for r, _ in wants}).encode())
        if proc.returncode != 0:
            raise ForgeError(f"cannot fetch from forge {redact(self.url)}: {first_error(proc.stderr)}")

    def _fetch_git(self, args: list[str], names: bytes) -> subprocess.CompletedProcess[bytes]:
        """`git fetch` into the cache; once more while no worktree's record is being made or removed
        (`_records`) where its check of what it fetched (which reads every worktree's HEAD) died on one that was."""
        proc = self._git(*args, check=False, input=names)
        if proc.returncode != 0 and b"worktrees/" in proc.stderr:
            with self._records():
                proc = self._git(*args, check=False, input=names)
        return proc

    def _missing(self, refs: dict[str, str]) -> dict[str, str]:
        """The refs whose tips the cache lacks."""
        return dict(self._lacking(list(refs.items())))

    def _lacking(self, wants: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (ref, tip) pairs whose tips the cache lacks: a few by their loose files, then through the cat-file
        batch already running; many by one `cat-file --batch-check`, which reads no object's contents."""
        if len(wants) > LOOK_LOOSE_AT_MOST:
            return self._absent(wants)
        objects = f"{self.cache}/objects/"
        unsure = [(ref, sha) for ref, sha in wants if not os.path.exists(f"{objects}{sha[:2]}/{sha[2:]}")]
        if not unsure:
            return []
        found = self.read_typed([sha for _, sha in unsure])
        return [want for want, obj in zip(unsure, found, strict=True) if obj is None]

    def _absent(self, wants: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (ref, tip) pairs whose tips git does not find in the cache (one `cat-file --batch-check`)."""
        return [want for want, kind in zip(wants, self.kinds([sha for _, sha in wants]), strict=True) if kind is None]

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether `older` is `newer` or in its history (both must be in the cache)."""
        if newer not in self._parents:
            self._walk_parents(newer, older, WALK_AT_MOST)  # a short chain: a yes needs no process either
        sha: str | None = newer if newer in self._parents else None
        while sha is not None:  # on a chain `learn_chains` (or a walk) read: a yes needs no process
            if sha == older:
                return True
            sha = self._parents.get(sha)
        if self._not_below(older, newer):  # nor does a no on a chain without merges (a push lost to another's)
            return False
        return self._git("merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def _not_below(self, older: str, newer: str) -> bool:
        """Whether the walk from `newer` proves `older` is not in its history: it reached `older`'s one parent, or a
        root, through commits of one parent each (as their objects say, never a link a shallow cache cut), none of
        them `older`. Then the history of `newer` is those commits and the history of that parent (or nothing),
        where `older`, that parent's child, cannot be."""
        found = self.read_typed([older])[0] if OBJECT_ID.fullmatch(older) else None
        if found is None or found.kind != "commit":
            return False
        parents = _parents_of(found.data)
        below = parents[0] if len(parents) == 1 else None
        sha: str | None = newer
        while sha is not None:
            if sha == older or sha not in self._lone:  # not read whole: unknown, so no proof
                return False
            if sha == below:
                return True
            sha = self._lone[sha]
        return True  # a root, through commits of one parent each

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two commits in the cache, or None if they share no history."""
        proc = self._git("merge-base", a, b, check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def diff(self, base: str, head: str, numstat: bool = False) -> str:
        """`git diff base head` of two commits in the cache: the patch, or `--numstat` lines (added, deleted,
        path; `-` counts for a binary file). Renames are followed; no colour, whatever the user's config."""
        args = ["-c", "core.quotepath=false", "diff", "--no-color", "--no-ext-diff", "-M"]
        out = self._git(*args, *(["--numstat"] if numstat else []), base, head, "--")
        return out.stdout.decode("utf-8", "replace")

    def changed_paths(self, base: str, head: str) -> list[str]:
        """Every path that differs between two commits in the cache (a rename as both its paths); a name that is no
        UTF-8 keeps U+FFFD where its bytes were."""
        out = self._git("diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", base, head, "--")
        return [p for p in out.stdout.decode("utf-8", "replace").split("\0") if p]

    def changed_against(self, base: str, others: Sequence[str]) -> dict[str, set[str]]:
        """For each of the trees `others` (in the cache), every path whose content differs from the tree `base` (a
        rename as both its paths): one process however many there are. An empty set for one that differs in no
        path."""
        wanted = list(dict.fromkeys(o for o in others if o != base))
        found: dict[str, set[str]] = {o: set() for o in others}
        if not wanted:
            return found
        out = self._git("diff-tree", "--stdin", "-r", "--name-only", "-z", "--no-renames",
                        input="".join(f"{o} {base}\n" for o in wanted).encode()).stdout.decode("utf-8", "replace")
        current: set[str] | None = None
        at = 0
        while at < len(out):  # each line given comes back first ("<tree> <base>\n"), then its paths, each \0-ended
            while (line := _PAIR.match(out, at)) and line.group(1) in found:
                current, at = found[line.group(1)], line.end()
            end = out.find("\0", at)
            end = len(out) if end < 0 else end
            if current is not None and end > at:
                current.add(out[at:end])
            at = end + 1
        return found

    def commits_outside(self, tips: Sequence[str], base: str) -> set[str]:
        """Every commit reachable from any of `tips` and not from `base` (all in the cache): one process."""
        if not tips:
            return set()
        out = self._git("rev-list", "--stdin", input="".join(f"{t}\n" for t in [*tips, f"^{base}"]).encode())
        return set(out.stdout.decode().split())

    def rev_list(self, tip: str, limit: int | None = None, since: str | None = None) -> list[str]:
        """Commits reachable from `tip` (and not from `since`), newest first (first-parent chain). From the
        chains `learn_chains` read, or a short chain read through the cat-file batch; else `rev-list` (from
        where those left off, when they followed the chain part of the way)."""
        if tip == since:
            return []
        if tip not in self._parents:
            self._walk_parents(tip, since, WALK_AT_MOST)  # a short chain: read through the batch, no process
        walked, rest = self._known_chain(tip, since, limit)
        if rest is None:
            return walked
        if walked:  # the chain known from `tip` down to `rest`: git gives the rest, with parents to check `since`
            args = ["rev-list", "--first-parent", "--parents", rest, *([f"^{since}"] if since else [])]
            if limit:
                args.insert(1, f"--max-count={limit - len(walked)}")
            lines = [line.split() for line in self._git(*args).stdout.decode().splitlines() if line.strip()]
            if lines and (not since or (len(lines[-1]) > 1 and lines[-1][1] == since)):  # else `since` is off
                return walked + [line[0] for line in lines]  # the first-parent chain: git decides from `tip`
        args = ["rev-list", "--first-parent", tip]
        if since:
            args.append(f"^{since}")
        if limit:
            args.insert(1, f"--max-count={limit}")
        return self._git(*args).stdout.decode().split()

    def _known_chain(self, tip: str, since: str | None, limit: int | None) -> tuple[list[str], str | None]:
        """`rev_list`'s answer from the first parents kept: (the commits, None) when they tell it whole, else
        (the commits they tell, the first commit whose parent is not kept), or ([], tip) when git must decide
        (a `since` off the chain)."""
        walked: list[str] = []
        sha: str | None = tip
        while sha is not None and sha != since:
            if limit and len(walked) >= limit:
                return (walked, None) if not since else ([], tip)
            if sha not in self._parents:
                return walked, sha
            walked.append(sha)
            sha = self._parents[sha]
        return (walked, None) if not since or sha == since else ([], tip)

    def _chain_known(self, tip: str) -> bool:
        """Whether the first parents kept reach from `tip` to a root."""
        sha: str | None = tip
        while sha is not None:
            if sha not in self._parents:
                return False
            sha = self._parents[sha]
        return True

    def _walk_parents(self, tip: str, since: str | None, most: int) -> None:
        """Learn the first parents from `tip` towards `since` (or the root) by reading the commits through the
        cat-file batch, at most `most` of them (what it learns is kept: commits never change)."""
        if not OBJECT_ID.fullmatch(tip):
            return  # a name that can move (a ref, `HEAD`): never kept as if it were a commit
        sha: str | None = tip
        child: str | None = None
        for _ in range(most):
            if sha is None or sha == since:
                return
            found = self.read_typed([sha])[0]
            if found is None or found.kind != "commit":
                if child is not None:  # a parent the cache lacks (a shallow read stopped there): git says what
                    del self._parents[child]  # its child's history is, not a link to nothing
                return  # not a commit here: rev-list says what it says
            parents = _parents_of(found.data)
            parent = parents[0] if parents else None
            self._parents[sha] = parent
            if len(parents) <= 1:
                self._lone[sha] = parent
            child, sha = sha, parent

    def chains(self, tips: Sequence[str]) -> dict[str, list[str]]:
        """The first-parent chain of each tip, newest first, from one `rev-list` over all of them.

        A tip that is no commit in the cache gets an empty chain.
        """
        wanted = [t for t in dict.fromkeys(tips) if t]
        if not wanted:
            return {}
        parent = self._first_parents(wanted)
        result: dict[str, list[str]] = {}
        for tip in wanted:
            chain: list[str] = []
            sha: str | None = tip if tip in parent else None
            while sha is not None:
                chain.append(sha)
                sha = parent.get(sha)
            result[tip] = chain
        return result

    def learn_chains(self, tips: Iterable[str]) -> None:
        """Read the first-parent chains of `tips` in one `rev-list` and keep them, so that `rev_list` and
        `is_ancestor` on those chains start no process: a reader of every brief (`audit --all`) runs a constant
        number of git processes, not a few per brief. Commits never change, so what is kept stays true."""
        wanted = [t for t in dict.fromkeys(tips) if t and not self._chain_known(t)]
        if wanted:
            self._parents.update(self._first_parents(wanted))

    def _first_parents(self, tips: list[str]) -> dict[str, str | None]:
        """Each commit on the first-parent chains of `tips` (full object ids; those that are commits in the cache)
        -> its first parent (None for a root): one cat-file batch (or batch-check) and one `rev-list`."""
        if len(tips) > LOOK_LOOSE_AT_MOST:
            commits = [t for t, kind in zip(tips, self.kinds(tips), strict=True) if kind == "commit"]
        else:
            commits = [t for t, obj in zip(tips, self.read_typed(tips), strict=True) if obj and obj.kind == "commit"]
        parent: dict[str, str | None] = {}
        if commits:
            out = self._git("rev-list", "--first-parent", "--parents", "--stdin",
                            input="".join(f"{c}\n" for c in commits).encode()).stdout.decode()
            for line in out.splitlines():
                shas = line.split()
                if shas:
                    parent[shas[0]] = shas[1] if len(shas) > 1 else None
            for sha in self.shallow_commits():  # git shows a shallow commit as a root: not a fact to keep
                parent.pop(sha, None)
        return parent

    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """The tree of merging commit `theirs` into `ours` (both in the cache), or None if they conflict."""
        proc = self._git("merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False)
        if proc.returncode == 1:
            return None
        if proc.returncode != 0:
            raise ForgeError(f"git merge-tree failed: {first_error(proc.stderr)}",
                             hint="merging reviews needs git 2.38 or newer")
        return proc.stdout.decode().split()[0]

    def merge_conflicts(self, ours: str, theirs: str) -> tuple[str | None, list[str]]:
        """The tree of merging `theirs` into `ours` (both in the cache) and, when they conflict, None and the paths
        in conflict."""
        proc = self._git("merge-tree", "--write-tree", "--no-messages", "--name-only", ours, theirs, check=False)
        if proc.returncode not in (0, 1):
            raise ForgeError(f"git merge-tree failed: {first_error(proc.stderr)}",
                             hint="merging reviews needs git 2.38 or newer")
        lines = [line for line in proc.stdout.decode("utf-8", "replace").splitlines() if line]
        if proc.returncode == 0:
            return lines[0], []
        return None, list(dict.fromkeys(lines[1:]))

    def tree_of(self, commit: str) -> str:
        """The tree of a commit in the cache (read through the object batch: no process of its own)."""
        found = self.read_typed([commit])[0]
        if found is not None and found.kind == "commit" and found.data.startswith(b"tree "):
            return found.data[5:found.data.index(b"\n")].decode()
        return self._git("rev-parse", f"{commit}^{{tree}}").stdout.decode().strip()


def _parents_of(commit: bytes) -> list[str]:
    """The parents of a raw commit object, first first (none for a root)."""
    return [line[7:].decode("ascii", "replace") for line in commit.partition(b"\n\n")[0].split(b"\n")
            if line.startswith(b"parent ")]
