"""One read of the whole forge: one ls-remote, one fetch, then local cat-file batches.

The sweep, the board, the audit and the desk's queue all start from a `Scan`: the refs
Assay keeps, sorted by kind (claims, journals, reviews, work branches, learned footprints, and the single refs
main, the sweeper's observations, the retired index and its keep), with the refs under an
Assay prefix that name no brief set aside as junk. `fetch` brings the tips a reader needs
in one fetch; the decoders below read them from the cache. A scan is a hint for choosing
and judging, never the check: every write compares and swaps.
"""

from __future__ import annotations

from assay.core.briefs import Brief, Problem, briefs_on_main
from assay.core.footprints import FOOTPRINTS_REF
from assay.core.git import ForgeGit
from assay.core.observations import OBSERVATIONS, SWEEPER_REF, Observations, decode_observations
from assay.core.records import (
    CLAIMS_PREFIX,
    JOURNAL_PREFIX,
    LEARNED_PREFIX,
    MAIN_REF,
    REVIEWS_PREFIX,
    WORK_BRANCH_REF_PREFIX,
    ReviewRecord,
    brief_of_ref,
    chain,
    decode_review,
)
from assay.core.records.chain import InvalidRecord
from assay.core.records.recordtype import dataclass, field
from assay.core.retired import KEEP_REF, RETIRED_REF, Index
from assay.errors import NoMainBranch, RecordInvalid

PREFIXES = {"claims": CLAIMS_PREFIX, "journals": JOURNAL_PREFIX, "reviews": REVIEWS_PREFIX,
            "branches": WORK_BRANCH_REF_PREFIX, "learned": LEARNED_PREFIX}
SINGLES = {"main": MAIN_REF, "sweeper": SWEEPER_REF, "retired": RETIRED_REF, "keep": KEEP_REF,
           "footprints": FOOTPRINTS_REF}
WHOLE = (*PREFIXES, *SINGLES)  # every kind: the board, the sweep, the audit of every brief
QUEUE = ("claims", "reviews", "main", "retired", "footprints", "learned")  # what a desk chooses work from and settles


@dataclass
class Scan:
    """What one ls-remote showed, by kind: each prefix's refs that name a brief (ref -> sha), the single refs'
    tips, and the junk (refs under a prefix that name no brief)."""

    git: ForgeGit
    kinds: tuple[str, ...]
    refs: dict[str, str]  # every ref listed, junk included
    tips: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> ref -> sha
    junk: list[InvalidRecord] = field(default_factory=list)

    @property
    def main(self) -> str:
        return self.refs[MAIN_REF]

    def tip(self, kind: str) -> str | None:
        """The tip of a single ref (`main`, `sweeper`, `retired`, `keep`, `footprints`), if the forge has it."""
        return self.refs.get(SINGLES[kind])

    def by_brief(self, kind: str) -> dict[str, str]:
        """A prefix kind's tips by brief id."""
        prefix = PREFIXES[kind]
        return {ref.removeprefix(prefix): sha for ref, sha in self.tips[kind].items()}

    def fetch(self, *kinds: str) -> None:
        """Make the tips of `kinds` (all the scanned kinds if none) present in the cache: one fetch at most."""
        wanted: dict[str, str] = {}
        for kind in kinds or self.kinds:
            if kind in PREFIXES:
                wanted.update(self.tips[kind])
            elif self.tip(kind):
                wanted[SINGLES[kind]] = self.refs[SINGLES[kind]]
        self.git.ensure_objects(wanted)

    # -- decoded (fetched first) --------------------------------------------------------------

    def briefs(self) -> tuple[list[Brief], list[Problem]]:
        return briefs_on_main(self.git, self.main)

    def reviews(self) -> tuple[list[tuple[ReviewRecord, str]], list[InvalidRecord]]:
        """The review records at the review refs' tips (where reviews are refs), and the junk among them."""
        return chain.read_tips(self.git, self.tips["reviews"], REVIEWS_PREFIX, "review.json", decode_review)

    def retired(self) -> Index:
        """The retired index; RecordInvalid if its tip is junk."""
        return Index(self.git, self.tip("retired"))

    def observations(self) -> ObservationsRead:
        """The sweeper's observations; junk there is reported and reads as none."""
        tip = self.tip("sweeper")
        return read_observations(self.git, tip)


@dataclass
class ObservationsRead:
    observations: Observations
    tip: str | None
    is_commit: bool = False
    problem: InvalidRecord | None = None


def read_observations(git: ForgeGit, tip: str | None) -> ObservationsRead:
    """The observations at `tip` (fetched already); junk there reads as none, with its problem."""
    if not tip:
        return ObservationsRead(Observations(), None)
    head, blob = git.read_typed([tip, f"{tip}:{OBSERVATIONS}"])
    is_commit = head is not None and head.kind == "commit"
    try:
        return ObservationsRead(chain.decode_tip(SWEEPER_REF, tip, head, blob, decode_observations), tip, is_commit)
    except RecordInvalid as exc:
        return ObservationsRead(Observations(), tip, is_commit, InvalidRecord(SWEEPER_REF, tip, exc.problem))


def scan(git: ForgeGit, kinds: tuple[str, ...] = WHOLE) -> Scan:
    """One ls-remote for the refs of `kinds`; NoMainBranch (exit 2) if the forge has no main."""
    patterns = [PREFIXES[k] + "*" if k in PREFIXES else SINGLES[k] for k in kinds]
    if "main" not in kinds:
        patterns.append(MAIN_REF)
    refs = git.ls_remote(*patterns)
    if not refs.get(MAIN_REF):
        raise NoMainBranch()
    out = Scan(git, tuple(kinds), refs)
    prefixes = [PREFIXES[k] for k in kinds if k in PREFIXES]
    named, junk = _named(refs, prefixes)
    for kind in kinds:
        if kind in PREFIXES:
            out.tips[kind] = named[PREFIXES[kind]]
            out.junk += junk[PREFIXES[kind]]
    return out


def _named(refs: dict[str, str],
           prefixes: list[str]) -> tuple[dict[str, dict[str, str]], dict[str, list[InvalidRecord]]]:
    """By prefix, the refs under it that name a brief, and the others (junk): one pass over `refs` (no prefix is
    another's; a ref's folder finds its prefix where its brief has no `/`)."""
    named: dict[str, dict[str, str]] = {p: {} for p in prefixes}
    junk: dict[str, list[InvalidRecord]] = {p: [] for p in prefixes}
    for ref, sha in refs.items():
        prefix = ref[:ref.rfind("/") + 1]
        if prefix not in named:
            prefix = next((p for p in prefixes if ref.startswith(p)), "")
            if not prefix:
                continue
        try:
            brief_of_ref(ref, prefix)
            named[prefix][ref] = sha
        except RecordInvalid as exc:
            junk[prefix].append(InvalidRecord(ref, sha, exc.problem))
    return named, junk
