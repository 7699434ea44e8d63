"""Retired briefs: the refs of finished work folded into one index, so they no longer cost every push.

Every push and every listing advertises every ref of the forge, so a forge that kept
the refs of each finished brief (claim, journal, review, work branch, worktree snapshot, learned
footprint) would slow
down with every brief ever done. Retiring a `done` brief records the tips of those refs
in `refs/assay/retired` (one small JSON file per brief) and deletes them, in one atomic
push under leases on every ref it touches. Their objects stay reachable from
`refs/assay/retired-keep`, whose commits each have a commit with the retired tips as parents, so the custody
chain, the journal and the review of a retired brief are read exactly as before
(`tip_of`), while readers that only need to know *which* briefs are retired fetch the
index alone. The format is in docs/data-model.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from assay.core.digests import sha1_hex
from assay.core.git import ForgeGit, parse_tree
from assay.core.records import (
    CLAIMS_PREFIX,
    JOURNAL_PREFIX,
    LEARNED_PREFIX,
    MAIN_REF,
    REVIEWS_PREFIX,
    WIP_PREFIX,
    WORK_BRANCH_REF_PREFIX,
    brief_of_ref,
    check_tip,
    load_record,
    validate_brief_id,
)
from assay.core.records.recordtype import asdict, dataclass, field
from assay.errors import AssayError, IllegalTransition, NoSuchBrief, RecordInvalid, UsageError

RETIRED_REF = "refs/assay/retired"
KEEP_REF = "refs/assay/retired-keep"
PREFIXES = (CLAIMS_PREFIX, JOURNAL_PREFIX, REVIEWS_PREFIX, WORK_BRANCH_REF_PREFIX, WIP_PREFIX,  # the refs a brief has
            LEARNED_PREFIX)
BATCH = 500  # briefs per push: keeps the argument list and the keep commit's parents bounded
INDEX_DIR = "briefs"
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "v": int, "brief": str, "epoch": int, "desk": str, "done_at": str, "retired_at": str, "by": str, "refs": dict,
}


@dataclass(frozen=True)
class RetiredBrief:
    """One file of the index: a done brief, and the tip each of its refs had when it was retired."""

    brief: str
    epoch: int
    desk: str
    done_at: str
    retired_at: str
    by: str
    refs: dict[str, str] = field(default_factory=dict)
    v: int = 1

    def encode(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def decode_retired(data: bytes | None, where: str) -> RetiredBrief:
    obj = load_record(data, where, "the retired record", _FIELDS)
    validate_brief_id(obj["brief"])
    refs = obj["refs"]
    if not all(isinstance(k, str) and isinstance(v, str) and len(v) == 40 for k, v in refs.items()):
        raise RecordInvalid(where, "the retired record's refs must map ref names to commit ids")
    return RetiredBrief(**obj)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """Seconds in an age such as `90s`, `30m`, `12h` or `7d`. A bare number other than 0 is refused: `7` is as
    likely to mean days as seconds."""
    if text.strip() not in ("0", "") and text.strip().replace(".", "", 1).isdigit():
        raise UsageError(f"{text!r} has no unit", hint=f"write {text}d for days, {text}h, {text}m or {text}s")
    value, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        seconds = float(value) * _UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise UsageError(f"{text!r} is not an age", hint="write a number with s, m, h or d, such as 7d or 12h")
    return seconds


def shard(brief: str) -> str:
    """The folder of a brief's file in the index: two hex digits of the SHA-1 of its id."""
    return sha1_hex(brief.encode())[:2]


def entry_path(brief: str) -> str:
    return f"{INDEX_DIR}/{shard(brief)}/{brief}.json"


class Index:
    """The retired briefs as one tip of `refs/assay/retired` has them (None: nothing retired yet)."""

    def __init__(self, git: ForgeGit, tip: str | None) -> None:
        self.git = git
        self.tip = tip
        self._names: frozenset[str] | None = None
        if tip:
            git.ensure_objects({RETIRED_REF: tip})
            head, folder = git.read_typed([tip, f"{tip}:{INDEX_DIR}"])
            check_tip(RETIRED_REF, tip, head.kind if head else None)
            if folder is None or folder.kind != "tree":
                raise RecordInvalid(RETIRED_REF, f"its tip {tip[:10]} has no {INDEX_DIR}/ folder")

    def names(self) -> frozenset[str]:
        """Every retired brief: the index's folders, read in one cat-file batch."""
        if self._names is None:
            self._names = frozenset(name for name, _ in self._files())
        return self._names

    def get(self, brief: str) -> RetiredBrief | None:
        if not self.tip:
            return None
        found = self.git.read_typed([f"{self.tip}:{entry_path(brief)}"])[0]
        if found is None:
            return None
        record = decode_retired(found.data if found.kind == "blob" else None, f"{RETIRED_REF}:{entry_path(brief)}")
        if record.brief != brief:
            raise RecordInvalid(RETIRED_REF, f"{entry_path(brief)} names brief {record.brief!r}")
        return record

    def _files(self) -> list[tuple[str, str]]:
        """(brief, blob id) of every file of the index."""
        if not self.tip:
            return []
        shards = self.git.read_tree(f"{self.tip}:{INDEX_DIR}") or []
        trees = self.git.read_typed([s.sha for s in shards])
        out = []
        for folder, tree in zip(shards, trees, strict=True):
            if tree is None or tree.kind != "tree":
                raise RecordInvalid(RETIRED_REF, f"{INDEX_DIR}/{folder.name} is not a folder")
            out += [(e.name.removesuffix(".json"), e.sha) for e in parse_tree(tree.data) if e.name.endswith(".json")]
        return out


def read_index(git: ForgeGit) -> Index:
    return Index(git, git.ls_remote(RETIRED_REF).get(RETIRED_REF))


def tip_of(git: ForgeGit, ref: str, refs: Mapping[str, str] | None = None) -> str | None:
    """The tip of a brief's `ref` on the forge, or the tip it had when the brief was retired. `refs`: the forge's
    refs read already (one ls-remote for many briefs, with RETIRED_REF among them); else they are read now."""
    refs = git.ls_remote(ref, RETIRED_REF) if refs is None else refs
    if ref in refs:
        return refs[ref]
    prefix = next((p for p in PREFIXES if ref.startswith(p)), None)
    if prefix is None or RETIRED_REF not in refs:
        return None
    record = Index(git, refs[RETIRED_REF]).get(brief_of_ref(ref, prefix))
    return record.refs.get(ref) if record else None


def refuse_if_retired(git: ForgeGit, retired_tip: str | None, brief: str, action: str) -> None:
    """IllegalTransition if `brief` is retired: it is done, and its refs are read-only."""
    if retired_tip and Index(git, retired_tip).get(brief) is not None:
        raise IllegalTransition(brief, action.replace("_", "-"), "done",
                                "a done brief is finished and retired; reopen it on main as a new brief")


def check_not_retired(git: ForgeGit, brief: str, action: str) -> None:
    """For a brief with no claim ref: IllegalTransition if that is because it is retired."""
    refuse_if_retired(git, git.ls_remote(RETIRED_REF).get(RETIRED_REF), brief, action)


def require_known(git: ForgeGit, brief: str) -> None:
    """NoSuchBrief unless the forge knows `brief`: on main, claimed or journaled, or retired. For readers that
    found nothing of it, so that a mistyped name is bad input, not an empty history."""
    brief = validate_brief_id(brief)
    refs = git.ls_remote(MAIN_REF, CLAIMS_PREFIX + brief, JOURNAL_PREFIX + brief, RETIRED_REF)
    if CLAIMS_PREFIX + brief in refs or JOURNAL_PREFIX + brief in refs:
        return
    if RETIRED_REF in refs and Index(git, refs[RETIRED_REF]).get(brief) is not None:
        return
    main = refs.get(MAIN_REF)
    if main:
        git.ensure_objects({MAIN_REF: main})
        found = git.read_typed([f"{main}:briefs/{brief}.md"])[0]
        if found is not None and found.kind == "blob":
            return
    raise NoSuchBrief(brief)


def name_near_briefs(git: ForgeGit, error: AssayError) -> None:
    """When `error` says the forge does not know a brief, name the briefs whose ids are close to it in its hint: a
    typo is the likeliest reason. Only words: a forge that cannot be read now adds none."""
    if error.unknown_brief:
        try:
            error.near(near_briefs(git, error.unknown_brief))
        except AssayError:
            pass


def near_briefs(git: ForgeGit, brief: str, most: int = 3) -> list[str]:
    """The ids of the briefs on main and of the claims whose spelling is closest to `brief`, best first; none when
    `brief` itself is one of them (a real brief, only never claimed)."""
    import difflib

    refs = git.ls_remote(MAIN_REF, CLAIMS_PREFIX + "*")
    names = {ref.removeprefix(CLAIMS_PREFIX) for ref in refs if ref.startswith(CLAIMS_PREFIX)}
    main = refs.get(MAIN_REF)
    if main:
        git.ensure_objects({MAIN_REF: main})
        names |= {e.name.removesuffix(".md") for e in git.read_tree(f"{main}:briefs") or [] if e.name.endswith(".md")}
    if brief in names:
        return []
    return difflib.get_close_matches(brief.lower(), sorted(names), n=most)
