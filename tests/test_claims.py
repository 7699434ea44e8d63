"""Claims on a real bare forge, read back with plain git."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from assay.core.claims import Claims, InvalidClaim
from assay.errors import BriefNotFound, ClaimLost, Conflict, IllegalTransition, RecordInvalid, UsageError
from tests.conftest import Forge, brief_md, git


def test_claim_creates_epoch_one_on_the_forge(forge: Forge, claims: Claims) -> None:
    got = claims.claim("alpha", "builder", lease_s=120)
    assert forge.tip("refs/assay/claims/alpha") == got.sha
    on_forge = forge.claim_json("alpha")
    assert on_forge["state"] == "held" and on_forge["epoch"] == 1 and on_forge["desk"] == "builder"
    assert on_forge["lease_s"] == 120 and on_forge["v"] == 1 and on_forge["branch"] == "assay/alpha"


def test_a_second_desk_loses_and_learns_the_holder(forge: Forge, claims: Claims) -> None:
    first = claims.claim("alpha", "builder")
    with pytest.raises(ClaimLost) as info:
        claims.claim("alpha", "reviewer")
    assert (info.value.desk, info.value.holder, info.value.epoch) == ("builder", first.record.holder, 1)
    assert forge.tip("refs/assay/claims/alpha") == first.sha


def test_release_writes_a_tombstone_and_the_next_claim_rises_an_epoch(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "builder")
    claims.release("alpha", "builder", reason="handing over")
    again = claims.claim("alpha", "reviewer")
    assert again.record.epoch == 2
    chain = forge.chain("alpha")
    assert [(c["state"], c["epoch"], c["desk"]) for c in chain] == [
        ("held", 1, "builder"), ("released", 1, "builder"), ("held", 2, "reviewer")]
    assert chain[1]["reason"] == "handing over"


def test_renew_moves_the_tip_and_keeps_the_epoch(forge: Forge, claims: Claims) -> None:
    held = claims.claim("alpha", "builder")
    renewed = claims.renew("alpha", "builder", epoch=1, lease_s=900)
    assert renewed.sha != held.sha
    assert forge.claim_json("alpha")["epoch"] == 1 and forge.claim_json("alpha")["lease_s"] == 900
    assert git("--git-dir", str(forge.path), "rev-parse", f"{renewed.sha}^").strip() == held.sha


def test_a_fenced_desk_cannot_renew_or_release(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "builder")
    claims.force_release("alpha", "desk died", by="ops")
    claims.claim("alpha", "builder")  # epoch 2
    before = forge.tip("refs/assay/claims/alpha")
    with pytest.raises(Conflict, match="fenced"):
        claims.renew("alpha", "builder", epoch=1)
    with pytest.raises(Conflict, match="fenced"):
        claims.release("alpha", "builder", epoch=1)
    assert forge.tip("refs/assay/claims/alpha") == before


def test_done_is_final(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "builder")
    claims.release("alpha", "builder", outcome="done")
    with pytest.raises(IllegalTransition) as info:
        claims.claim("alpha", "builder")
    assert info.value.code == 3
    assert forge.claim_json("alpha")["state"] == "done"


def test_forced_release_records_who_and_why(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "builder")
    with pytest.raises(UsageError):
        claims.force_release("alpha", "", by="ops")
    claims.force_release("alpha", "machine is gone", by="ops")
    tip = forge.claim_json("alpha")
    assert tip["state"] == "released" and tip["reason"] == "forced by ops: machine is gone"
    author = git("--git-dir", str(forge.path), "log", "-1", "--format=%an", "refs/assay/claims/alpha").strip()
    assert author == "ops"


def test_singleton_takeover_of_its_own_claim_after_a_restart(forge: Forge, claims: Claims) -> None:
    old = claims.claim("alpha", "builder")
    with pytest.raises(ClaimLost):
        claims.claim("alpha", "builder")  # not singleton: must wait for the lease
    new = claims.claim("alpha", "builder", singleton=True)
    assert new.record.epoch == 2 and new.record.holder != old.record.holder
    with pytest.raises(ClaimLost):
        claims.claim("alpha", "other", singleton=True)  # only its own desk's claims


def test_a_brief_missing_from_main_is_refused_and_nothing_is_written(forge: Forge, claims: Claims) -> None:
    with pytest.raises(BriefNotFound) as info:
        claims.claim("nope", "builder")
    assert info.value.code == 2
    assert forge.tip("refs/assay/claims/nope") is None


def test_a_brief_added_to_main_later_becomes_claimable(forge: Forge, claims: Claims) -> None:
    with pytest.raises(BriefNotFound):
        claims.claim("late", "builder")
    forge.add_brief("late", brief_md("Late"))
    assert claims.claim("late", "builder").record.epoch == 1


def test_history_is_the_whole_chain_oldest_first(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "a")
    claims.renew("alpha", "a")
    claims.release("alpha", "a", outcome="abandoned", reason="too hard")
    claims.claim("alpha", "b")
    states = [(c.record.state, c.record.epoch) for c in claims.history("alpha") if not isinstance(c, InvalidClaim)]
    assert states == [("held", 1), ("held", 1), ("abandoned", 1), ("held", 2)]
    assert claims.history("beta") == []


def push_junk(forge: Forge, brief: str, content: bytes) -> None:
    forge.write_record(f"refs/assay/claims/{brief}", "claim.json", content)


def test_junk_and_future_records_are_listed_as_invalid_without_breaking_the_listing(
        forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "builder")
    push_junk(forge, "beta", b"not json at all")
    push_junk(forge, "gamma", b'{"v": 9, "brief": "gamma"}')
    good, bad = claims.list_all()
    assert [c.record.brief for c in good] == ["alpha"]
    problems = {b.ref: b.problem for b in bad}
    assert "not JSON" in problems["refs/assay/claims/beta"]
    assert "format version 9" in problems["refs/assay/claims/gamma"]


def test_claiming_over_a_junk_record_is_refused_cleanly(forge: Forge, claims: Claims) -> None:
    push_junk(forge, "beta", b"garbage")
    before = forge.tip("refs/assay/claims/beta")
    with pytest.raises(RecordInvalid, match="refs/assay/claims/beta"):
        claims.claim("beta", "builder")
    assert forge.tip("refs/assay/claims/beta") == before


def test_listing_reads_many_claims(forge: Forge, claims: Claims) -> None:
    for brief in ("alpha", "beta", "gamma", "delta"):
        claims.claim(brief, "builder")
    good, bad = claims.list_all()
    assert sorted(c.record.brief for c in good) == ["alpha", "beta", "delta", "gamma"] and bad == []


@pytest.mark.parametrize("lease", [0, -5, 10**9])
def test_out_of_range_leases_are_bad_input(forge: Forge, claims: Claims, lease: int) -> None:
    with pytest.raises(UsageError):
        claims.claim("alpha", "builder", lease_s=lease)
    assert forge.tip("refs/assay/claims/alpha") is None


def test_a_stale_synced_view_never_double_claims(forge: Forge, claims: Claims) -> None:
    from assay.core.git import ForgeGit

    other = Claims(ForgeGit(forge.url))
    claims.read_view()
    won = other.claim("alpha", "other")
    with pytest.raises(ClaimLost) as info:
        claims.claim("alpha", "mine")  # the view says absent; the lease says otherwise
    assert info.value.holder == won.record.holder
    other.release("alpha", "other")
    claims.read_view()
    other.claim("beta", "other")
    other.release("beta", "other")  # beta is a tombstone the view has not seen
    assert claims.claim("beta", "mine").record.epoch == 2
    assert [c["epoch"] for c in forge.chain("beta")] == [1, 1, 2]


def test_a_synced_view_older_than_a_release_does_not_lose_the_claim(forge: Forge, claims: Claims) -> None:
    from assay.core.git import ForgeGit

    other = Claims(ForgeGit(forge.url))
    other.claim("gamma", "other")
    claims.read_view()  # sees gamma held
    other.release("gamma", "other")
    assert claims.claim("gamma", "mine").record.epoch == 2



# a forge hook that, the first time a push moves alpha's and beta's claims together (a host's batch), renews
# alpha on its own first, as its desk's journal push would while the batch is on its way
RENEW_IN_FLIGHT = """#!/bin/sh
lines=$(cat)
test -e "{mark}" && exit 0
echo "$lines" | grep -q ' refs/assay/claims/alpha$' || exit 0
echo "$lines" | grep -q ' refs/assay/claims/beta$' || exit 0
touch "{mark}"
env -u GIT_DIR -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \\
    {python} -m assay renew alpha --desk builder --forge "{forge}" > "{mark}.out" 2>&1
exit 0
"""


def test_a_hosts_batch_refused_for_a_desks_own_push_leaves_that_claim_out_of_its_next_try(
        forge: Forge, claims: Claims, tmp_path: Path) -> None:
    """The host's heartbeat renews in one atomic push; a desk's own push that moved its claim as the batch went
    has the forge refuse the batch. The next try leaves out claims renewed within `fresh_s` (pushing them again
    would meet the next move of a busy desk), renews the rest, and a fenced one is still told so."""
    claims.claim("alpha", "builder")
    Claims(claims.git, clock=lambda: time.time() - 300).claim("beta", "builder")  # renewed 5 minutes ago
    claims.claim("gamma", "builder")
    claims.force_release("gamma", "desk died", by="ops")
    claims.claim("gamma", "builder")  # epoch 2: the batch's epoch 1 is fenced
    mark = tmp_path / "renewed"
    hook = forge.path / "hooks" / "pre-receive"
    hook.write_text(RENEW_IN_FLIGHT.format(mark=mark, python=sys.executable, forge=forge.url))
    hook.chmod(0o755)
    beta_before = len(forge.chain("beta"))
    out = claims.renew_all([("alpha", "builder", 1, ""), ("beta", "builder", 1, ""), ("gamma", "builder", 1, "")],
                           fresh_s=60)
    assert mark.exists(), "the batch never went"
    alpha = out["alpha"]
    assert not isinstance(alpha, Exception) and alpha.sha == forge.tip("refs/assay/claims/alpha")
    assert [c["state"] for c in forge.chain("alpha")] == ["held", "held"]  # the desk's renewal alone
    assert len(forge.chain("beta")) == beta_before + 1  # renewed by the second try
    assert isinstance(out["gamma"], Conflict)
