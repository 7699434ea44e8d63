"""The queue as one read of the forge sees it: main's briefs and every claim, and what is ready.

A snapshot is a hint for choosing work, never the check: every write is a
compare-and-swap that fails if the forge moved since.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from assay.core import footprints
from assay.core.briefs import Brief, Problem
from assay.core.claims import Claim, Claims
from assay.core.footprints import FOOTPRINTS_REF, Footprint
from assay.core.records import CLAIMS_PREFIX, LEARNED_PREFIX, LIVE_STATES, TOMBSTONES
from assay.core.records.recordtype import dataclass, field
from assay.core.retired import RETIRED_REF
from assay.errors import RecordInvalid

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from assay.core.git import ForgeGit


@dataclass
class Snapshot:
    """What one read saw: main, its briefs, every claim record, and the junk among them."""

    main: str
    briefs: dict[str, Brief]
    claims: dict[str, Claim]
    problems: list[Problem] = field(default_factory=list)
    invalid: dict[str, RecordInvalid] = field(default_factory=dict)  # brief -> why its claim record is junk
    retired: frozenset[str] = frozenset()  # done briefs whose refs are folded into refs/assay/retired
    reviews: dict[str, str] = field(default_factory=dict)  # review ref -> tip, where reviews are refs
    footprints: Mapping[str, Footprint] = field(default_factory=dict)  # the shared ref's, and those learned of
    # briefs not done

    def state(self, brief: str) -> str | None:
        claim = self.claims.get(brief)
        if claim is None:
            return "done" if brief in self.retired else None
        return claim.record.state

    def ready(self, brief: Brief) -> bool:
        """Unclaimed (or released), its claim record readable, and every dependency done."""
        if brief.id in self.invalid or self.state(brief.id) not in (None, *TOMBSTONES):
            return False
        return all(self.state(dep) == "done" for dep in brief.depends_on)

    def behind(self, brief: Brief) -> dict[str, str]:
        """The live briefs whose footprints overlap this brief's: it is queued behind them (`footprints.py`). A brief
        that declares none and was never claimed has none (a footprint is learned under a claim): the footprints
        are not read for it."""
        if not brief.touches and brief.id not in self.claims and brief.id not in self.invalid:
            return {}
        return footprints.queued_behind(brief.id, {b.id: b.touches for b in self.briefs.values()}, self.footprints,
                                        lambda other: self.state(other) in LIVE_STATES)


def read_snapshot(claims: Claims, lazy_footprints: bool = False) -> Snapshot:
    """One scan of the claims, main and the retired index (`scan.py`), one fetch, one cat-file batch for the
    claims, one for main's briefs, one for the retired index. `lazy_footprints`: the footprints are read (and
    fetched) only when a look needs them (`LazyFootprints`), as a desk choosing work does: they move with the
    fleet's claims and first rounds, so reading them each pass would fetch at every host for each of those moves."""
    view = claims.read_view()
    found = view.scan
    found.fetch("main", "retired", *(() if lazy_footprints else ("footprints", "learned")))  # one fetch
    briefs, problems = found.briefs()
    good, bad = claims.load_tips(view.tips)
    invalid = {b.ref.removeprefix(CLAIMS_PREFIX): RecordInvalid(b.ref, b.problem)
               for b in [*found.junk, *bad] if b.ref.startswith(CLAIMS_PREFIX)}  # a junk ref of another kind: no claim
    try:
        retired = found.retired().names()
    except RecordInvalid as exc:  # a junk index hides nothing that is live: its briefs show as unclaimed
        retired, problems = frozenset(), [*problems, Problem(RETIRED_REF, None, exc.problem, "")]
    snapshot = Snapshot(view.main, {b.id: b for b in briefs}, {c.record.brief: c for c in good}, list(problems),
                        invalid, retired, dict(found.tips["reviews"]))
    learned = {ref: sha for ref, sha in view.learned.items()  # a done brief's, or one whose claim is gone, holds none
               if snapshot.state(brief := ref.removeprefix(LEARNED_PREFIX)) not in (None, "done")
               or brief in snapshot.invalid}
    snapshot.footprints = LazyFootprints(claims.git, view.footprints, learned, snapshot.problems)
    if not lazy_footprints:
        len(snapshot.footprints)  # read now: a junk ref is among the problems before anyone lists them
    return snapshot


class LazyFootprints(Mapping[str, Footprint]):
    """The footprints at `tip` of the shared ref and at `learned` (ref -> tip), read (and fetched) together when
    first asked. Junk reads as none and is added to `problems` (a brief with a footprint is refused by the claim
    while the shared ref is junk, which it says)."""

    def __init__(self, git: ForgeGit, tip: str | None, learned: Mapping[str, str], problems: list[Problem]) -> None:
        self._git, self._tip, self._learned, self._problems = git, tip, learned, problems
        self._read: dict[str, Footprint] | None = None

    def _entries(self) -> dict[str, Footprint]:
        if self._read is None:
            if self._tip and self._learned:  # one fetch for both
                self._git.ensure_objects({FOOTPRINTS_REF: self._tip, **self._learned})
            try:
                shared = footprints.read(self._git, self._tip)
            except RecordInvalid as exc:
                shared = {}
                self._problems.append(Problem(FOOTPRINTS_REF, None, exc.problem, ""))
            learned, junk = footprints.read_learned(self._git, self._learned)
            self._problems.extend(Problem(ref, None, problem, "") for ref, problem in junk)
            self._read = footprints.merged(shared, learned)
        return self._read

    def __getitem__(self, brief: str) -> Footprint:
        return self._entries()[brief]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())
