"""The CLI as an operator of many desks uses it: listings filtered like gh's, liveness before a lease ends, output
that fits 80 columns."""

from __future__ import annotations

import time
from typing import Any

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.steps import open_session
from tests.conftest import Forge, assay, git


def listed(*args: str) -> list[dict[str, Any]]:
    """The claims `assay claims ARGS --json` lists."""
    run = assay("claims", *args, "--json")
    data = run.json()
    assert run.code == 0 and isinstance(data, dict), run.err
    return list(data["claims"])


def test_claims_filter_by_state_desk_and_limit(forge: Forge, claims: Claims) -> None:
    for brief, desk in (("alpha", "one"), ("beta", "one"), ("gamma", "two"), ("delta", "two")):
        claims.claim(brief, desk)
    claims.block("delta", "two", 1, "needs a person")
    assert [c["brief"] for c in listed("--forge", forge.url)] == ["alpha", "beta", "delta", "gamma"]
    assert [c["brief"] for c in listed("--state", "held", "--forge", forge.url)] == ["alpha", "beta", "gamma"]
    two = listed("--desk", "two", "--state", "blocked", "--state", "held", "--forge", forge.url)
    assert [c["brief"] for c in two] == ["delta", "gamma"]
    assert [c["brief"] for c in listed("--limit", "1", "--forge", forge.url)] == ["alpha"]
    bad = assay("claims", "--state", "sleeping", "--forge", forge.url)
    assert bad.code == 2 and "'sleeping' is not one of" in bad.err


def test_a_claim_its_desk_stopped_renewing_is_overdue_long_before_its_lease_ends(forge: Forge) -> None:
    """A desk renews every heartbeat (60 s by default); a claim last written 5 minutes ago is overdue, though its
    lease (600 s) still runs. The age is the claim commit's, so no sweeper has to have run."""
    git_port = ForgeGit(forge.url)
    Claims(git_port, clock=lambda: time.time() - 300).claim("alpha", "quiet", holder="quiet/elsewhere")
    Claims(git_port).claim("beta", "busy", holder="busy/elsewhere")
    git_port.close()
    found = {c["brief"]: c for c in listed("--forge", forge.url)}
    assert found["alpha"]["liveness"] == "overdue" and found["alpha"]["lease_s"] == 600
    assert found["alpha"]["written_age_s"] >= 300 and "has not renewed for 5m (heartbeat 60s" in found["alpha"]["why"]
    assert found["beta"]["liveness"] == "live" and found["beta"]["written_age_s"] < 60
    table = assay("claims", "--forge", forge.url)
    row = next(line for line in table.out.splitlines() if line.split()[:1] == ["alpha"])
    assert "overdue" in row and "5m" in row
    assert "1 claim(s) overdue or dead" in table.err and "alpha" in table.err


def test_briefs_filter_by_state_desk_and_limit(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "one")
    claims.claim("beta", "two")
    run = assay("briefs", "--state", "held", "--json", "--forge", forge.url)
    data = run.json()
    assert isinstance(data, dict) and [b["brief"] for b in data["briefs"]] == ["alpha", "beta"]
    run = assay("briefs", "--state", "ready", "--limit", "2", "--json", "--forge", forge.url)
    data = run.json()
    assert isinstance(data, dict) and len(data["briefs"]) == 2 and {b["state"] for b in data["briefs"]} == {"ready"}
    run = assay("briefs", "--desk", "two", "--json", "--forge", forge.url)
    data = run.json()
    assert isinstance(data, dict) and [b["brief"] for b in data["briefs"]] == ["beta"]


def test_listings_fit_80_columns(forge: Forge, claims: Claims) -> None:
    for brief in ("alpha", "beta", "hello"):
        claims.claim(brief, "a-desk-with-a-long-name")
    session = open_session(claims, "alpha", "a-desk-with-a-long-name", 1, "run-with-a-long-name")
    session.step("deploy-the-service-to-the-staging-cluster", lambda key: {"out": "x" * 300}, policy="unsafe")
    session.flush()
    env = {"COLUMNS": "80"}
    for args in (["claims"], ["briefs"], ["claim", "history", "alpha"], ["journal", "alpha"]):
        run = assay(*args, "--forge", forge.url, env=env)
        assert run.code == 0, (args, run.err)
        wide = [line for line in run.out.splitlines() if len(line) > 80]
        assert wide == [], (args, wide)


def test_a_bare_number_of_seconds_is_refused_where_days_were_likely_meant(forge: Forge) -> None:
    before = git("--git-dir", str(forge.path), "for-each-ref")
    run = assay("retire", "--older-than", "7", "--forge", forge.url)
    assert run.code == 2 and "'7' has no unit" in run.err and "write 7d for days" in run.err
    assert git("--git-dir", str(forge.path), "for-each-ref") == before
    assert assay("retire", "--older-than", "7d", "--dry-run", "--forge", forge.url).code == 0
