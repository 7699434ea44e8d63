"""Footprints: the files a brief's work touches, and the one ref that makes choosing by them a compare-and-swap.

A brief declares its footprint on main (`touches:`, path globs), or gets one from its first round's diff. The
footprints of briefs that were taken are kept at `refs/assay/footprints` (each commit's `footprints.json`). A
claim of a brief with a footprint moves that ref in the same atomic push as its claim commit, each with a lease:
of desks racing to take briefs whose footprints overlap, one push wins and the others re-read, find the winner
there and leave their brief queued behind it. A footprint blocks while its brief's claim is live (held, waiting
on review, or blocked); entries of briefs no longer live are dropped by the next claim that meets them.

A footprint learned from a first diff is kept on a ref of its brief's own, `refs/assay/learned/<brief>` (the
same file, one entry), written by the desk holding the brief with its work's push: after the fact (the work
ran before it was learned), it needs no compare-and-swap with other claims, and a ref only its holder writes
never turns that push away. A claim reads both; taking the brief again copies its learned footprint to the
shared ref, as a declared one is.

A glob covers what it matches and everything beneath (a name may be a folder: `src` is `src/**`); `**` is any
number of folders. Overlap errs towards "yes": two globs overlap unless no path can match both.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from assay.core.records import FORMAT_VERSION, LEARNED_PREFIX, NOT_JSON, validate_brief_id
from assay.core.records.recordtype import dataclass
from assay.errors import RecordInvalid, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a claim may read this module)
if TYPE_CHECKING:
    from typing import Any

    from assay.core.git import ForgeGit, RefUpdate

FOOTPRINTS_REF = "refs/assay/footprints"
FOOTPRINTS = "footprints.json"
SOURCES = ("declared", "diff")
MAX_GLOBS = 64  # declared on a brief
MAX_GLOB = 256  # characters
MAX_LEARNED = 500  # paths kept of a first round's diff (beyond: their folders)
_MAGIC = frozenset("*?[")


@dataclass(frozen=True)
class Footprint:
    """A brief's footprint as the chain holds it: its globs, where they came from, and the claim epoch then."""

    touches: tuple[str, ...]
    source: str
    epoch: int


# -- globs ------------------------------------------------------------------------------------


def glob_problem(glob: str) -> str:
    """What is wrong with one `touches:` glob ("" if nothing)."""
    if not glob.strip():
        return "an empty path"
    if len(glob) > MAX_GLOB:
        return f"a path of {len(glob)} characters; at most {MAX_GLOB}"
    if glob.startswith("/") or "\\" in glob:
        return f"{glob!r} is not a path relative to the repository's root with / between folders"
    parts = glob.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return f"{glob!r} has an empty, '.' or '..' folder"
    if any(_unclosed(part) for part in parts):
        return f"{glob!r} opens a '[' it never closes"
    return ""


def _unclosed(part: str) -> bool:
    """Whether a '[' in one folder's pattern opens a class no ']' closes (read as fnmatch reads it: a ']' right
    after '[' or '[!' belongs to the class)."""
    i = 0
    while i < len(part):
        if part[i] == "[":
            j = i + 1 + (part[i + 1:i + 2] == "!")
            j += part[j:j + 1] == "]"
            end = part.find("]", j)
            if end < 0:
                return True
            i = end
        i += 1
    return False


def _segments(glob: str) -> tuple[str, ...]:
    """A glob as segments, covering what it matches and everything beneath (a name may be a folder)."""
    parts = tuple(glob.strip().rstrip("/").split("/"))
    return parts if parts[-1] == "**" else (*parts, "**")


def _segment_overlap(p: str, q: str) -> bool:
    """Whether some file name matches both one-folder patterns (with a wildcard each: when their fixed starts and
    ends agree, which says yes more often than it must, never less)."""
    if not _MAGIC & set(p):
        return fnmatchcase(p, q)
    if not _MAGIC & set(q):
        return fnmatchcase(q, p)
    head_p, head_q = _fixed_head(p), _fixed_head(q)
    tail_p, tail_q = _fixed_tail(p), _fixed_tail(q)
    return (head_p.startswith(head_q) or head_q.startswith(head_p)) and \
        (tail_p.endswith(tail_q) or tail_q.endswith(tail_p))


def _fixed_head(p: str) -> str:
    return p[:min(p.index(c) for c in _MAGIC if c in p)]


def _fixed_tail(p: str) -> str:
    last = max(p.rindex(c) for c in _MAGIC if c in p)
    tail = p[last + 1:]
    return "" if "]" in tail or p[last] == "[" else tail


def globs_overlap(a: str, b: str) -> bool:
    """Whether some path is covered by both globs."""
    x, y = _segments(a), _segments(b)

    @functools.cache
    def go(i: int, j: int) -> bool:
        if i == len(x) and j == len(y):
            return True
        if i < len(x) and x[i] == "**":
            return go(i + 1, j) or (j < len(y) and go(i, j + 1))
        if j < len(y) and y[j] == "**":
            return go(i, j + 1) or (i < len(x) and go(i + 1, j))
        if i == len(x) or j == len(y):
            return False
        return _segment_overlap(x[i], y[j]) and go(i + 1, j + 1)

    return go(0, 0)


def overlap(a: Iterable[str], b: Iterable[str]) -> list[tuple[str, str]]:
    """The pairs of globs, one of each footprint, that overlap (empty: the footprints are apart)."""
    b = list(b)
    return [(g, h) for g in a for h in b if globs_overlap(g, h)]


def learned(paths: Sequence[str]) -> tuple[str, ...]:
    """A footprint from the files a round changed: each file as a literal glob; a name no glob can hold (a
    backslash, say) as its folder, or everything; folders instead of files when there are very many, and
    everything (`**`) rather than a footprint cut short."""
    found: set[str] = set()
    for path in filter(None, paths):
        while path and (glob_problem(_literal(path)) or "\ufffd" in path):
            path = path.rsplit("/", 1)[0] if "/" in path else ""
        found.add(_literal(path) if path else "**")
    while len(found) > MAX_LEARNED and any("/" in p for p in found):
        found = {p.rsplit("/", 1)[0] if "/" in p else p for p in found}
    return ("**",) if len(found) > MAX_LEARNED or "**" in found else tuple(sorted(found))


def _literal(path: str) -> str:
    """A file name as a glob that matches exactly it."""
    return "".join(f"[{c}]" if c in _MAGIC else c for c in path)


# -- the chain --------------------------------------------------------------------------------


def blockers(brief: str, touches: Sequence[str], entries: Mapping[str, Footprint],
             live: Callable[[str], bool]) -> dict[str, list[tuple[str, str]]]:
    """The other briefs whose footprints overlap `touches` and whose claims are live, with the overlapping pairs."""
    out: dict[str, list[tuple[str, str]]] = {}
    for other, print_ in sorted(entries.items()):
        if other == brief:
            continue
        pairs = overlap(touches, print_.touches)
        if pairs and live(other):
            out[other] = pairs
    return out


def queued_behind(brief: str, declared: Mapping[str, Sequence[str]], entries: Mapping[str, Footprint],
                  live: Callable[[str], bool]) -> dict[str, str]:
    """For listings and the desk's choice (a hint: the claim decides): the live briefs whose footprints overlap
    `brief`'s, with the globs that do. A brief's own footprint is its declared one, else the one learned from its
    diff; another's is the one it was taken with (the chain's), else its declared one (`declared`: id -> touches
    on main)."""
    learned = entries.get(brief)
    own = tuple(declared.get(brief, ())) or (learned.touches if learned else ())
    if not own:
        return {}
    known = {b: tuple(t) for b, t in declared.items() if t}
    known.update({b: f.touches for b, f in entries.items()})
    out = {}
    for other, touches in sorted(known.items()):
        if other != brief and live(other):
            pairs = overlap(own, touches)
            if pairs:
                out[other] = described(pairs)
    return out


def encode(entries: Mapping[str, Footprint]) -> bytes:
    data = {"v": FORMAT_VERSION,
            "briefs": {b: {"touches": list(f.touches), "source": f.source, "epoch": f.epoch}
                       for b, f in sorted(entries.items())}}
    return (json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(data: bytes | None, ref: str) -> dict[str, Footprint]:
    """Parse footprints.json; anything that is not a valid v1 record raises RecordInvalid(ref, …)."""
    if data is None:
        raise RecordInvalid(ref, f"the commit has no {FOOTPRINTS}")
    try:
        obj = json.loads(data.decode("utf-8"))
    except NOT_JSON as exc:
        raise RecordInvalid(ref, f"{FOOTPRINTS} is not JSON ({exc})") from None
    if not isinstance(obj, dict) or set(obj) != {"v", "briefs"} or not isinstance(obj["briefs"], dict):
        raise RecordInvalid(ref, f'{FOOTPRINTS} must be an object with exactly "v" and "briefs"')
    if obj["v"] != FORMAT_VERSION:
        raise RecordInvalid(ref, f"{FOOTPRINTS} has format version {obj['v']!r}; this Assay reads version "
                                 f"{FORMAT_VERSION} (upgrade Assay to read newer records)")
    out = {}
    for brief, item in obj["briefs"].items():
        try:
            validate_brief_id(brief)
            out[brief] = _footprint(item)
        except (UsageError, TypeError, ValueError) as exc:
            raise RecordInvalid(ref, f"{FOOTPRINTS}: the entry {brief!r} is malformed ({exc})") from None
    return out


def _footprint(item: Any) -> Footprint:
    if not isinstance(item, dict) or set(item) != {"touches", "source", "epoch"}:
        raise TypeError('an entry must have exactly "touches", "source" and "epoch"')
    touches, source, epoch = item["touches"], item["source"], item["epoch"]
    if not isinstance(touches, list) or not all(isinstance(t, str) and not glob_problem(t) for t in touches):
        raise TypeError("touches must be a list of relative path globs")
    if source not in SOURCES or not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} and epoch a whole number >= 1")
    return Footprint(tuple(touches), source, epoch)


def learned_ref(brief: str) -> str:
    return LEARNED_PREFIX + brief


def decode_learned(data: bytes | None, ref: str) -> dict[str, Footprint]:
    """A learned footprint's file: `decode`, holding exactly one entry, for the ref's brief, from a diff."""
    from assay.core.records import brief_of_ref

    entries = decode(data, ref)
    brief = brief_of_ref(ref, LEARNED_PREFIX)
    if set(entries) != {brief} or entries[brief].source != "diff":
        raise RecordInvalid(ref, f"{FOOTPRINTS} must hold one entry, for {brief!r}, learned from its diff "
                                 f"(source \"diff\"); remove the ref (`git push <forge> :{ref}`): its brief's next "
                                 "round learns it again")
    return entries


_READ: dict[tuple[str, str], Footprint] = {}  # (ref, commit) -> the footprint there: a commit never changes
_READ_MOST = 50_000


def read_learned(git: ForgeGit, tips: Mapping[str, str]) -> tuple[dict[str, Footprint], list[tuple[str, str]]]:
    """The learned footprints at `tips` (ref -> sha under `refs/assay/learned/`): those read before by this
    process from memory, the others with one fetch and one cat-file batch; and the junk among them as (ref,
    problem), which holds no footprint."""
    from assay.core.records import chain

    known = {ref: _READ.get((ref, sha)) for ref, sha in tips.items()}  # (one look each: another thread may clear)
    out = {ref.removeprefix(LEARNED_PREFIX): found for ref, found in known.items() if found is not None}
    todo = {ref: sha for ref, sha in tips.items() if known[ref] is None}
    if not todo:
        return out, []
    good, bad = chain.read_tips(git, todo, LEARNED_PREFIX, FOOTPRINTS, decode_learned)
    if len(_READ) + len(good) > _READ_MOST:
        _READ.clear()
    for entries, sha in good:
        for brief, found in entries.items():
            _READ[(learned_ref(brief), sha)] = out[brief] = found
    return out, [(j.ref, j.problem) for j in bad]


def merged(shared: Mapping[str, Footprint], learned: Mapping[str, Footprint]) -> dict[str, Footprint]:
    """Every known footprint: the shared ref's (what a brief was taken with), else the one learned on its ref."""
    return {**learned, **shared}


def learned_update(git: ForgeGit, brief: str, tip: str | None, touches: tuple[str, ...], epoch: int, desk: str,
                   when: float) -> RefUpdate:
    """The commit setting `refs/assay/learned/<brief>` (from `tip`: junk there is replaced, not built on), written
    to the cache, not pushed."""
    from assay.core.git import ZERO, RefUpdate
    from assay.core.records import chain

    made = chain.commit(git, learned_ref(brief), None, {FOOTPRINTS: encode({brief: Footprint(touches, "diff", epoch)})},
                        f"assay: footprint of {brief} from its diff (epoch {epoch}, desk {desk})", desk, when)
    return RefUpdate(made.ref, made.new, tip or ZERO)


def read(git: ForgeGit, tip: str | None) -> dict[str, Footprint]:
    """The footprints at `tip` (fetched here if the cache lacks it); {} for no ref; RecordInvalid for junk."""
    if not tip:
        return {}
    from assay.core.records import chain

    git.ensure_objects({FOOTPRINTS_REF: tip})
    head, blob = git.read_typed([tip, f"{tip}:{FOOTPRINTS}"])
    try:
        return chain.decode_tip(FOOTPRINTS_REF, tip, head, blob, decode)
    except RecordInvalid as exc:
        raise RecordInvalid(FOOTPRINTS_REF, f"{exc.problem}; no brief with a footprint can be taken until it is "
                                            "mended (remove the ref: `git push <forge> :refs/assay/footprints`; "
                                            "briefs declare theirs again as they are taken)") from None


def update(git: ForgeGit, tip: str | None, entries: Mapping[str, Footprint], message: str, author: str,
           when: float) -> RefUpdate:
    """The commit moving `refs/assay/footprints` from `tip` to `entries`, written to the cache, not pushed."""
    from assay.core.records import chain

    return chain.commit(git, FOOTPRINTS_REF, tip, {FOOTPRINTS: encode(entries)}, message, author, when)


def described(pairs: Sequence[tuple[str, str]]) -> str:
    """Overlapping glob pairs, said briefly."""
    shown = [g if g == h else f"{g} ~ {h}" for g, h in pairs[:3]]
    return ", ".join(shown) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")
