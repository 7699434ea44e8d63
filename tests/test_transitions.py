"""Every allowed and every refused claim transition, checked against a table written out here."""

from __future__ import annotations

import pytest

from assay.core.claims import transition
from assay.core.records import STATES, ClaimRecord
from assay.errors import ClaimLost, Conflict, IllegalTransition, UsageError

AT = "2026-11-29T08:00:00Z"
FROM: list[str | None] = [None, *STATES]

# (action, from state) -> resulting state; every pair not listed must be refused.
ALLOWED: dict[tuple[str, str | None], str] = {
    ("claim", None): "held", ("claim", "released"): "held", ("claim", "expired"): "held",
    ("claim", "abandoned"): "held",
    ("takeover", "held"): "held", ("takeover", "waiting"): "held",
    ("renew", "held"): "held", ("renew", "waiting"): "waiting",
    ("wait", "held"): "waiting",
    ("wake", "waiting"): "held",
    ("block", "held"): "blocked", ("block", "waiting"): "blocked",
    ("release", "held"): "done", ("release", "waiting"): "done", ("release", "blocked"): "done",
    ("expire", "held"): "expired", ("expire", "waiting"): "expired",
    ("force_release", "held"): "released", ("force_release", "waiting"): "released",
    ("force_release", "blocked"): "released",
}
ACTIONS = sorted({a for a, _ in ALLOWED})
NEW_EPOCH = {"claim", "takeover"}


def current(state: str | None) -> ClaimRecord | None:
    if state is None:
        return None
    return ClaimRecord(brief="b", state=state, epoch=4, desk="d", holder="d/h/1/aa", lease_s=60,
                       branch="assay/b", at="2026-11-29T07:00:00Z")


def apply(action: str, state: str | None) -> ClaimRecord:
    return transition(current(state), action, "b", at=AT, desk="d", outcome="done", reason="r")


@pytest.mark.parametrize(("action", "state"), [(a, s) for a in ACTIONS for s in FROM])
def test_transition_table(action: str, state: str | None) -> None:
    if (action, state) in ALLOWED:
        after = apply(action, state)
        assert after.state == ALLOWED[(action, state)]
        old_epoch = current(state).epoch if state else 0  # type: ignore[union-attr]
        assert after.epoch == (old_epoch + 1 if action in NEW_EPOCH else old_epoch)
        assert after.at == (current(state).at if action == "renew" else AT)  # type: ignore[union-attr]
    else:
        with pytest.raises(Conflict) as info:
            apply(action, state)
        assert info.value.code == 3
        if action == "claim" and state in ("held", "waiting", "blocked"):
            assert isinstance(info.value, ClaimLost)
            assert "held" not in info.value.message or state == "held"
            assert "desk 'd'" in info.value.message
        else:
            assert isinstance(info.value, IllegalTransition)


def test_a_done_brief_cannot_be_claimed_and_says_why() -> None:
    with pytest.raises(IllegalTransition, match="done brief is finished"):
        apply("claim", "done")


@pytest.mark.parametrize("action", ["renew", "wait", "block", "release", "takeover"])
def test_another_desk_is_not_the_holder(action: str) -> None:
    with pytest.raises(ClaimLost) as info:
        transition(current("held"), action, "b", at=AT, desk="intruder", outcome="done")
    assert info.value.desk == "d"


def test_stale_epoch_is_fenced() -> None:
    with pytest.raises(Conflict, match="fenced"):
        transition(current("held"), "renew", "b", at=AT, desk="d", epoch=3)


@pytest.mark.parametrize("outcome", ["released", "done", "abandoned"])
def test_release_outcomes(outcome: str) -> None:
    after = transition(current("held"), "release", "b", at=AT, desk="d", outcome=outcome, reason="why")
    assert (after.state, after.reason, after.epoch) == (outcome, "why", 4)


def test_release_with_an_unknown_outcome_is_bad_input() -> None:
    with pytest.raises(UsageError):
        transition(current("held"), "release", "b", at=AT, desk="d", outcome="expired")


def test_forced_release_needs_a_reason() -> None:
    with pytest.raises(UsageError, match="reason"):
        transition(current("held"), "force_release", "b", at=AT, reason="  ")


def test_wait_records_the_condition_and_wake_clears_it() -> None:
    waiting = transition(current("held"), "wait", "b", at=AT, desk="d", wait={"on": "review"})
    assert waiting.wait == {"on": "review"}
    assert transition(waiting, "wake", "b", at=AT, desk="d").wait is None


def test_new_claims_get_a_fresh_holder_and_branch() -> None:
    after = transition(None, "claim", "b", at=AT, desk="d", lease_s=30)
    assert after.holder.startswith("d/") and after.branch == "assay/b" and after.lease_s == 30
