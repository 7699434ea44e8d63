"""Listings for an operator: every claim with when it was last written and its liveness, filtered.

The claims come from one scan (claims, main, the retired index); the desks' heartbeats from their
definitions on main; each claim's age from its tip commit (a renewal repeats its record: only the
commit tells when). A forge with no main yet still lists its claims, with the default heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass

from assay.core.claims import Claim, Claims, InvalidClaim, Liveness, liveness
from assay.core.deskspec import DeskSpec, desks_on_main
from assay.errors import NoMainBranch


@dataclass(frozen=True)
class ClaimRow:
    claim: Claim
    written_age_s: int | None  # seconds since its tip commit was written (the writer's clock)
    liveness: Liveness


def list_claims(claims: Claims, now: float, states: tuple[str, ...] = (), desk: str | None = None,
                limit: int | None = None) -> tuple[list[ClaimRow], list[InvalidClaim]]:
    """The claims in brief order, those in `states` (all if none) of `desk` (any if None), at most `limit`."""
    try:
        view = claims.read_view()
        view.scan.fetch("main")
        good, bad = claims.load_tips(view.tips)
        bad = [*view.scan.junk, *bad]
        specs, _ = desks_on_main(claims.git, view.main)
    except NoMainBranch:
        (good, bad), specs = claims.list_all(), []
    beats = {s.name: s.heartbeat_s for s in specs}
    chosen = [c for c in good if (not states or c.record.state in states) and (desk is None or c.record.desk == desk)]
    chosen = chosen[:limit] if limit is not None else chosen
    written = claims.written(chosen)
    rows = []
    for c in chosen:
        age = max(0, int(now - written[c.sha])) if c.sha in written else None
        rows.append(ClaimRow(c, age, liveness(c.record, age, beats.get(c.record.desk, DeskSpec.heartbeat_s))))
    return rows, bad
