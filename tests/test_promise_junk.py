"""Junk planted with plain git in every field of every journal entry kind, and in every ref kind, read by every
reader at once: none may show a traceback or fail with an unexpected error, and each names what it could not read
(the promise suite's junk, without its fleet)."""

from __future__ import annotations

import random
import re

import pytest

from tests.conftest import Forge, Run, assay
from tests.promise import junk

READERS = (["board", "build", "-o", "{tmp}/board", "--json"], ["sweep", "--dry-run", "--json"],
           ["report", "--json"], ["audit", "--all", "--json"], ["claims", "--json"], ["briefs", "--json"])


def judged(run: Run, what: str) -> None:
    said = run.out + run.err
    assert "Traceback" not in said and "unexpected" not in said, f"{what}: {said[-3000:]}"
    assert run.code in (0, 1, 2), f"{what}: exit {run.code}: {said[-2000:]}"
    failed_checks = run.code == 1 and what.startswith("audit") and run.out.lstrip()[:1] in "[{"  # a verdict
    if run.code and not failed_checks:
        assert run.err.startswith("error:") or "\nerror:" in run.err, f"{what}: {said[-2000:]}"


def plant_every_field(forge: Forge) -> dict[str, str]:
    """One brief per (kind, field, junk value), its journal holding that one junk entry: brief -> what."""
    planted = {}
    for i, (kind, name, value) in enumerate(junk.mutations()):
        brief = f"j{i:03d}-{kind.replace('_', '-')}-{name.replace('_', '-')}"
        junk.point(forge.path, f"refs/assay/journal/{brief}",
                   junk.commit(forge.path, {"entries.jsonl": junk.mutated(kind, name, value, brief)}))
        planted[brief] = f"{kind}.{name} = " + ("(removed)" if value is ... else repr(value)[:40])
    return planted


@pytest.mark.slow
def test_every_reader_over_junk_in_every_field_of_every_journal_entry_kind(forge: Forge, tmp_path: object) -> None:
    planted = plant_every_field(forge)
    assert len(planted) == len(junk.KINDS) * len(junk.FIELDS) * 2
    for args in READERS:
        argv = [a.format(tmp=tmp_path) for a in args]
        judged(assay(*argv, "--forge", forge.url, timeout=300), " ".join(argv))
    for brief in random.Random(33).sample(sorted(planted), 24):
        for args in (["journal", brief], ["audit", brief, "--json"], ["steer", brief, "hello"]):
            judged(assay(*args, "--forge", forge.url), f"{' '.join(args)} ({planted[brief]})")


def test_junk_in_every_ref_kind_and_stale_locks_are_findings(forge: Forge, tmp_path: object) -> None:
    rng = random.Random(33)
    said = junk.plant_every_ref_kind(forge.path, rng, ["alpha", "beta", "gamma"])
    junk.stale_lock(forge.path, "refs/assay/claims/delta")
    junk.stale_lock(forge.path, "refs/assay/sweeper")
    for args in READERS:
        argv = [a.format(tmp=tmp_path) for a in args]
        judged(assay(*argv, "--forge", forge.url, timeout=120), f"{' '.join(argv)} over {said}")
    swept = assay("sweep", "--forge", forge.url)
    judged(swept, f"sweep over {said}")
    assert not re.search(r"Traceback|unexpected", swept.out + swept.err)
