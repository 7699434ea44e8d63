"""SIGKILL `assay sweep` at each of its durable boundaries, sweep again, and check with plain git that
the dead claim ends expired exactly once, its journal entry written once, and the observations whole."""

from __future__ import annotations

import json
import signal

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from tests.conftest import Forge, assay, git
from tests.helpers.desks import publish
from tests.journal_check import claim_chain, entries, invariants

T0 = 1_900_000_000.0
POLICY = "name: default\nexpire:\n  grace_s: 0\n"

# case -> (armed points, whether the expiry is on the forge when the process dies there)
CASES: dict[str, tuple[list[str], bool]] = {
    "before-observations": (["sweeper.before-push"], False),
    "after-observations": (["sweeper.after-push"], False),
    "after-observe": (["sweep.after-observe"], False),
    "before-expire": (["expire.before-push"], False),
    "after-expire": (["expire.after-push"], True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_sweep_killed_anywhere_expires_the_dead_claim_once(forge: Forge, case: str) -> None:
    (point,), landed = CASES[case]
    publish(forge, {"sweepers/default.yaml": POLICY})
    port = ForgeGit(forge.url)
    Claims(port).claim("alpha", "d", lease_s=1)
    port.close()
    base = {"ASSAY_FORGE": forge.url}
    assert assay("sweep", env={**base, "ASSAY_SWEEP_NOW": str(T0)}).code == 0
    crashed = assay("sweep", env={**base, "ASSAY_SWEEP_NOW": str(T0 + 5), "ASSAY_CRASH_AT": point})
    assert crashed.code == -signal.SIGKILL, crashed.err
    states = [c["state"] for c in claim_chain(forge.path, "alpha")]
    assert states == (["held", "expired"] if landed else ["held"])
    again = assay("sweep", "--json", env={**base, "ASSAY_SWEEP_NOW": str(T0 + 6)})
    assert again.code == 0, again.err
    assert [c["state"] for c in claim_chain(forge.path, "alpha")] == ["held", "expired"]
    expires = [e for e in entries(forge.path, "alpha") if (e.get("data") or {}).get("action") == "expire"]
    assert len(expires) == 1 and invariants(forge.path, "alpha") == []
    observed = json.loads(git("--git-dir", str(forge.path), "show", "refs/assay/sweeper:observations.json"))
    assert observed["v"] == 1 and "alpha" in observed["briefs"]
