"""The promise suite: a small fleet (a forge on disk, three desks running the promise agent) under a seeded random
schedule of SIGKILLs (a desk's whole group, the desk alone, an agent, `assay mcp`, a step's command), SIGTERMs (a
person stopping a desk, which hands its brief back) and SIGSTOP/SIGCONT pauses, while steps run by CLI and by MCP
with effects made by grandchildren, conversations are checkpointed and resumed under another HOME, people steer,
briefs spawn children, hooks and probes run, and sweeps and events come; with junk planted in every ref kind and
stale ref locks. Then each invariant of the promise is
judged from evidence outside Assay (`tests/promise/judge.py`).

`ASSAY_PROMISE_TRIALS` (default 2) trials, seeds from `ASSAY_PROMISE_SEED` (default 1) on: a failure names the
seed to replay (`ASSAY_PROMISE_SEED=S ASSAY_PROMISE_TRIALS=1`). The figures are printed at the end of the run, and
written with every break to the file `ASSAY_PROMISE_FIGURES` names.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.promise.judge import INVARIANTS
from tests.promise.trial import Outcome, Trial

TRIALS = int(os.environ.get("ASSAY_PROMISE_TRIALS", "2"))
FIRST_SEED = int(os.environ.get("ASSAY_PROMISE_SEED", "1"))
FIGURES = os.environ.get("ASSAY_PROMISE_FIGURES", os.devnull)  # where to write the figures and every break, too
# invariants that break on main (7cedff2) for a finding of issue 33 that is fixed in its own branch: an entry goes
# once its fix is merged, and the invariant is held strictly from then on
KNOWN: dict[str, str] = {}  # an invariant a known, open finding breaks: its issue (none is open)

pytestmark = pytest.mark.slow


def figures(outcomes: list[Outcome]) -> str:
    faults: Counter[str] = Counter()
    for o in outcomes:
        faults.update(o.faults)
    kills = sum(n for k, n in faults.items() if k.startswith("kill"))
    pauses = faults["pauses"] + faults["long pauses"]
    breaks = Counter(b.invariant for o in outcomes for b in o.breaks)
    failed = [o.seed for o in outcomes if o.breaks]
    return (f"promise suite: {len(outcomes)} trials (seeds {FIRST_SEED}..{FIRST_SEED + TRIALS - 1}), {kills} kills, "
            f"{pauses} pauses, {sum(breaks.values())} breaks {dict(breaks)}; faults {dict(faults)}; "
            f"seeds with breaks {failed}")


def breaks_of(outcomes: list[Outcome], invariants: set[str]) -> str:
    said = [f"{o.report()}\n" + "\n".join(f"  {str(b)[:3000]}" for b in o.breaks if b.invariant in invariants)
            for o in outcomes if any(b.invariant in invariants for b in o.breaks)]
    return "\n\n".join(said)


def test_the_promise_holds_under_faults(tmp_path: Path) -> None:
    """One test for all the trials (the suite's cost is paid once, whatever pytest-xdist does). An invariant that
    breaks fails it, with the seed and the story; one that breaks only for a finding of issue 33 (`KNOWN`) makes it
    an expected failure naming the finding."""
    outcomes = [Trial(tmp_path / f"seed-{seed}", seed).play() for seed in range(FIRST_SEED, FIRST_SEED + TRIALS)]
    said = figures(outcomes)
    sys.stderr.write("\n" + said + "\n")
    Path(FIGURES).write_text(said + "\n" + breaks_of(outcomes, set(INVARIANTS)) + "\n")
    # a suite that killed and paused nothing tested nothing
    assert sum(n for o in outcomes for k, n in o.faults.items() if k.startswith("kill")) > 0, said
    assert sum(o.faults["pauses"] + o.faults["long pauses"] for o in outcomes) > 0, said
    unknown = set(INVARIANTS) - set(KNOWN)
    assert not breaks_of(outcomes, unknown), f"{said}\n{breaks_of(outcomes, unknown)}"
    known = sorted({KNOWN[b.invariant] for o in outcomes for b in o.breaks})
    if known:
        pytest.xfail(f"{', '.join(known)}: {said}\n{breaks_of(outcomes, set(KNOWN))[:20000]}")
