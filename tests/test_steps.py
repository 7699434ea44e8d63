"""Durable steps through the Python API, on a real forge; journals read back with plain git."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.steps import Session, open_session
from assay.errors import Fenced, NeedsPerson, OutcomeUnknown, ReplayMismatch, StepFailed
from tests.conftest import Forge, git
from tests.journal_check import claim_chain, entries, invariants, journal_commits


class Crash(BaseException):
    """Stands in for the process dying inside an effect: nothing after it is written."""


@pytest.fixture
def held(forge: Forge, claims: Claims) -> Claims:
    claims.claim("alpha", "d")
    return claims


def session(claims: Claims, run: str, epoch: int = 1) -> Session:
    return open_session(claims, "alpha", "d", epoch, run=run)


def counter() -> tuple[list[str], Callable[[str], Any]]:
    calls: list[str] = []

    def fn(key: str) -> Any:
        calls.append(key)
        return {"n": len(calls)}
    return calls, fn


def crashing(key: str) -> Any:
    raise Crash()


def test_a_completed_step_is_not_redone(forge: Forge, held: Claims) -> None:
    calls, fn = counter()
    s1 = session(held, "r1")
    assert s1.step("build", fn, input={"v": 1}) == {"n": 1}
    s1.flush()
    s2 = session(held, "r2")
    assert s2.step("build", fn, input={"v": 1}) == {"n": 1}
    assert s2.step("build", fn, input={"v": 2}) == {"n": 2}  # another input: another step
    s2.flush()
    assert len(calls) == 2
    assert invariants(forge.path, "alpha") == []


def test_reuse_false_reruns_a_safe_step(held: Claims) -> None:
    calls, fn = counter()
    session(held, "r1").step("read", fn)
    assert session(held, "r2").step("read", fn, reuse=False) == {"n": 2}


def test_interrupted_safe_step_reruns(forge: Forge, held: Claims) -> None:
    s1 = session(held, "r1")
    s1.step("prep", lambda k: 1)
    s1.flush()
    with pytest.raises(Crash):
        s1.step("fetch", crashing)
    s1.flush()  # the safe intent reached the forge in a group commit; its result never will
    calls, fn = counter()
    assert session(held, "r2").step("fetch", fn) == {"n": 1}
    assert calls


def test_interrupted_idempotent_step_reruns_with_the_same_key(forge: Forge, held: Claims) -> None:
    with pytest.raises(Crash):
        session(held, "r1").step("charge", crashing, input={"amount": 5}, policy="idempotent")
    calls, fn = counter()
    s2 = session(held, "r2")
    s2.step("charge", fn, input={"amount": 5}, policy="idempotent")
    s2.flush()
    intent = next(e for e in entries(forge.path, "alpha") if e["kind"] == "intent")
    assert calls == [intent["key"]]
    assert invariants(forge.path, "alpha") == []


def test_interrupted_unsafe_step_is_unknown_refused_once_then_allowed(forge: Forge, held: Claims) -> None:
    with pytest.raises(Crash):
        session(held, "r1").step("deploy", crashing, policy="unsafe")
    calls, fn = counter()
    s2 = session(held, "r2")
    with pytest.raises(OutcomeUnknown) as info:
        s2.step("deploy", fn, policy="unsafe")
    assert "may or may not have completed" in info.value.message and info.value.code == 4
    assert calls == []
    assert s2.step("deploy", fn, policy="unsafe") == {"n": 1}  # the deliberate second call
    s2.flush()
    kinds = [e["kind"] for e in entries(forge.path, "alpha")]
    assert kinds.count("outcome_unknown") == 1 and kinds.count("refused") == 1
    assert invariants(forge.path, "alpha") == []


def test_a_stop_whose_end_cannot_be_journaled_is_still_the_stop(forge: Forge, held: Claims) -> None:
    """Ctrl-C or SIGTERM inside an unsafe step while the forge cannot be written: the stop goes on, with a note of
    what was not journaled, never replaced by the forge's error (a desk would take it for an interrupted pass);
    the intent left without its end is settled as any cut-off step's is."""
    s1 = session(held, "r1")
    away = forge.path.with_name("away.git")

    def stopped(key: str) -> Any:
        forge.path.rename(away)
        raise KeyboardInterrupt("SIGTERM")

    try:
        with pytest.raises(KeyboardInterrupt) as info:
            s1.step("deploy", stopped, policy="unsafe")
    finally:
        away.rename(forge.path)
    assert any("the step's end was not journaled" in note for note in info.value.__notes__)
    with pytest.raises(OutcomeUnknown):
        session(held, "r2").step("deploy", lambda key: 1, policy="unsafe")


def test_a_failed_step_is_recorded_and_replayed_as_failed(held: Claims) -> None:
    def boom(key: str) -> Any:
        raise ValueError("disk full")
    with pytest.raises(StepFailed, match="disk full"):
        session(held, "r1").step("write", boom, policy="idempotent")
    calls, fn = counter()
    with pytest.raises(StepFailed, match="disk full"):
        session(held, "r2").step("write", fn, policy="idempotent")
    assert calls == []


def test_recorded_clock_uuid_and_random_replay_identically(held: Claims) -> None:
    s1 = session(held, "r1")
    first = (s1.now(), s1.uuid(), s1.random_bytes(8))
    s1.flush()
    s2 = session(held, "r2")
    assert (s2.now(), s2.uuid(), s2.random_bytes(8)) == first
    fresh = s2.uuid()  # past the recording: a new value, recorded in turn
    s2.flush()
    s3 = session(held, "r3")
    assert (s3.now(), s3.uuid(), s3.random_bytes(8), s3.uuid()) == (*first, fresh)


def test_a_replay_that_asks_for_something_else_halts_and_blocks(forge: Forge, held: Claims) -> None:
    s1 = session(held, "r1")
    s1.now()
    s1.flush()
    with pytest.raises(ReplayMismatch) as info:
        session(held, "r2").uuid()
    assert info.value.code == 5
    assert claim_chain(forge.path, "alpha")[-1]["state"] == "blocked"


def test_changing_a_steps_policy_is_a_replay_mismatch(held: Claims) -> None:
    session(held, "r1").step("deploy", lambda k: 1, policy="unsafe")
    with pytest.raises(ReplayMismatch, match="policy"):
        session(held, "r2").step("deploy", lambda k: 1, policy="safe")


def test_large_outputs_go_to_blobs_and_replay(forge: Forge, held: Claims) -> None:
    big = "x" * 20000
    s1 = session(held, "r1")
    s1.step("log", lambda k: big, policy="idempotent")
    assert session(held, "r2").step("log", lambda k: "other", policy="idempotent") == big
    result = next(e for e in entries(forge.path, "alpha") if e["kind"] == "result")
    assert result["data"]["output_blob"].startswith("blobs/")


def test_safe_steps_are_group_committed(forge: Forge, held: Claims) -> None:
    s1 = session(held, "r1")
    for i in range(50):
        s1.step("tick", lambda k: None, input=i)
    s1.flush()
    assert len(entries(forge.path, "alpha")) == 100
    assert journal_commits(forge.path, "alpha") == 1
    assert invariants(forge.path, "alpha") == []


def test_every_append_renews_the_claim(forge: Forge, held: Claims) -> None:
    before = len(claim_chain(forge.path, "alpha"))
    s1 = session(held, "r1")
    s1.step("deploy", lambda k: 1, policy="unsafe")
    chain = claim_chain(forge.path, "alpha")
    assert len(chain) == before + 2 and chain[-1]["state"] == "held" and chain[-1]["epoch"] == 1


def test_a_fenced_desk_writes_nothing(forge: Forge, held: Claims) -> None:
    s1 = session(held, "r1")
    s1.step("prep", lambda k: 1, policy="unsafe")
    other = Claims(ForgeGit(forge.url))
    other.force_release("alpha", "stuck", by="ops")
    other.claim("alpha", "d2")
    journal_before = entries(forge.path, "alpha")
    calls, fn = counter()
    with pytest.raises(Fenced) as info:
        s1.step("deploy", fn, policy="unsafe")
    assert info.value.code == 3 and calls == []
    assert entries(forge.path, "alpha") == journal_before
    with pytest.raises(Fenced):
        session(held, "r2")  # a fresh session at the old epoch is refused too


def test_runs_that_keep_failing_block_the_brief(forge: Forge, held: Claims) -> None:
    """A first run's start rides its first push: one that died before any push (no agent ran: its intent goes
    first) left nothing to count. Every run after it, in this process (a pass that failed early) or another (a
    restart takes the claim over: a new epoch), is counted on the forge before it does anything."""
    first = session(held, "r1")
    first.begin_run()  # and never end_run nor a push: it "crashed" early
    assert first.journal.pending and not journal_ref_tip(forge)
    again = session(held, "r2")
    again.begin_run()  # a pass of the same process at the same epoch: counted at once
    assert not again.journal.pending and journal_ref_tip(forge)
    current = held.read("alpha")
    assert current is not None
    held.expire(current, "its desk died", by="sweeper")
    assert held.claim("alpha", "d").record.epoch == 2  # its successor: a new epoch
    for run in ("r3", "r4"):
        session(held, run, epoch=2).begin_run()  # and never end_run: each one "crashed"
    with pytest.raises(NeedsPerson):
        session(held, "r5", epoch=2).begin_run()
    assert claim_chain(forge.path, "alpha")[-1]["state"] == "blocked"


def journal_ref_tip(forge: Forge) -> str:
    return git("--git-dir", str(forge.path), "rev-parse", "--verify", "-q", "refs/assay/journal/alpha",
               check=False).strip()


def test_a_run_that_ends_resets_the_count(held: Claims) -> None:
    for run in ("r1", "r2"):
        session(held, run).begin_run()
    s = session(held, "r3")
    s.begin_run()
    s.end_run()
    for run in ("r4", "r5", "r6"):
        session(held, run).begin_run()


def test_a_journal_of_thousands_of_entries_is_read_with_one_fetch(forge: Forge, held: Claims, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.core.git import run_git as real
    from assay.core.journal import read_log

    s1 = session(held, "r1")
    for i in range(1500):
        s1.step("tick", lambda k: None, input=i)
        if i % 100 == 99:
            s1.flush()  # 15 commits of 200 entries
    s1.flush()
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "fresh-cache"))
    seen: list[str] = []

    def counting(args, *a, **k):
        seen.append(args[0])
        return real(args, *a, **k)
    monkeypatch.setattr("assay.core.git.objects.run_git", counting)  # where the port runs its git commands
    port = ForgeGit(forge.url)
    log = read_log(port, "alpha")
    assert len(log.entries) == 3000  # every intent and result, nothing lost
    assert seen.count("fetch") == 1 and port.round_trips["ls-remote"] == 1  # one listing (git upload-pack here)


def test_a_group_commit_retried_after_a_sibling_append_keeps_its_references(forge: Forge, held: Claims) -> None:
    s1 = session(held, "r1")
    s1.step("tick", lambda k: 1)  # intent and result, both buffered, the result naming the intent
    s2 = session(Claims(ForgeGit(forge.url)), "r2")
    s2.note("a sibling process appends first", sync=True)
    s1.flush()  # stale: re-read, renumber, push again
    es = entries(forge.path, "alpha")
    intent = next(e for e in es if e["kind"] == "intent")
    result = next(e for e in es if e["kind"] == "result")
    assert result["intent"] == intent["seq"]
    assert invariants(forge.path, "alpha") == []


def test_a_ref_a_step_moved_that_moved_under_it_takes_the_steps_result_along(forge: Forge, held: Claims) -> None:
    """A step whose effect is a ref moved with the next push (the work branch, riding the agent's intent), its result
    pending too: another writer moves the ref first. The push drops the move and the step's result, never says the
    step completed; its intent stays open for the next run, which resumes it."""
    from assay.core.git import ZERO, RefUpdate
    from assay.errors import Conflict

    s = session(held, "r1")
    branch = "refs/heads/assay/alpha"
    main = git("--git-dir", str(forge.path), "rev-parse", "refs/heads/main").strip()

    def create(key: str) -> str:
        s.journal.add("note", sync=False, data={"branch": "created"}, refs=[RefUpdate(branch, main, ZERO)])
        return main
    assert s.step("branch", create, policy="idempotent", rides=True, lazy_result=True) == main
    git("--git-dir", str(forge.path), "update-ref", branch, main)  # another writer, before the push
    with pytest.raises(Conflict):
        s.note("next", sync=True)
    s.note("after", sync=True)  # what stayed pending goes
    written = entries(forge.path, "alpha")
    assert [(e["kind"], e.get("step")) for e in written if e.get("step") == "branch" or "branch" in
            (e.get("data") or {})] == [("intent", "branch")], written  # open: no note, no result
    again = session(held, "r2")  # the next run resumes it: the branch is there now, adopted as it is
    assert again.step("branch", lambda key: main, policy="idempotent", rides=True, lazy_result=True) == main
    again.note("done", sync=True)
    assert invariants(forge.path, "alpha") == []


def test_a_run_that_ends_ends_what_a_cut_off_epoch_began_and_nobody_called_again(forge: Forge, held: Claims) -> None:
    """A desk cut off inside an idempotent step, whose successor's run went another way (steering came, say),
    leaves no intent open once that run ends: the step is ended as a stopped one is, and runs again if called."""
    first = session(held, "r1")
    with pytest.raises(Crash):
        first.step("agent", crashing, input={"attempt": 3}, policy="idempotent")
    with pytest.raises(Crash):
        first.step("deploy", crashing, policy="unsafe")
    current = held.read("alpha")
    assert current is not None
    held.expire(current, "its desk died", by="sweeper")
    assert held.claim("alpha", "d").record.epoch == 2
    second = session(held, "r2", epoch=2)
    second.recover(wait_s=0)  # the unsafe one: outcome unknown
    second.step("agent", lambda k: "steered", input={"attempt": 2, "steered": 1}, policy="idempotent")
    with pytest.raises(Crash):
        second.step("check", crashing)  # this epoch's own open intent: not ended by its own run's end
    second.end_run()
    cancelled = [e for e in entries(forge.path, "alpha") if e["kind"] == "result" and e.get("status") == "cancelled"]
    assert [(e["step"], e["epoch"]) for e in cancelled] == [("agent", 2)]
    assert [p for p in invariants(forge.path, "alpha") if "(check)" not in p] == []  # nothing else left open
    calls, fn = counter()
    third = session(held, "r3", epoch=2)
    assert third.step("agent", fn, input={"attempt": 3}, policy="idempotent") == {"n": 1}  # called again: it runs
    third.flush()
    first_key = next(e["key"] for e in entries(forge.path, "alpha") if e["kind"] == "intent" and e["epoch"] == 1
                     and e["step"] == "agent")
    assert calls == [first_key]  # with the key it began with, as a resumed step: its effect is not made twice
    assert all("(check)" in p for p in invariants(forge.path, "alpha"))


def test_a_run_that_ends_leaves_a_resumed_step_whose_result_it_holds_back(forge: Forge, held: Claims) -> None:
    with pytest.raises(Crash):
        session(held, "r1").step("agent", crashing, input={"attempt": 1}, policy="idempotent")
    current = held.read("alpha")
    assert current is not None
    held.expire(current, "its desk died", by="sweeper")
    held.claim("alpha", "d")
    second = session(held, "r2", epoch=2)
    second.step("agent", lambda k: "done", input={"attempt": 1}, policy="idempotent", lazy_result=True)
    second.end_run()  # the resumed step's result is still held back when the run ends
    assert invariants(forge.path, "alpha") == []
    assert [e.get("status") for e in entries(forge.path, "alpha") if e["kind"] == "result"] == ["completed"]


def test_a_step_stopped_or_settled_as_not_done_runs_again_under_its_first_key(forge: Forge, held: Claims) -> None:
    """An idempotent step stopped mid-effect (SIGTERM: its effect may have begun) and an unsafe one settled as not
    having happened run again in the next epoch under the keys their effects began with, as a resumed step does:
    an effect that dedupes by its key is never made twice."""
    from assay.errors import Cancelled

    def stopped(key: str) -> Any:
        raise Cancelled("cancelled")

    first = session(held, "r1")
    with pytest.raises(Cancelled):
        first.step("publish", stopped, input={"v": 1}, policy="idempotent")
    with pytest.raises(Crash):
        first.step("deploy", crashing, input={"v": 1}, policy="unsafe")
    current = held.read("alpha")
    assert current is not None
    held.expire(current, "its desk died", by="sweeper")
    assert held.claim("alpha", "d").record.epoch == 2
    second = open_session(held, "alpha", "d", 2, run="r2")
    second.settle("deploy", "did-not", by="person:p", evidence={"said": "nothing was deployed"})
    calls, fn = counter()
    third = session(held, "r3", epoch=2)
    assert third.step("publish", fn, input={"v": 1}, policy="idempotent") == {"n": 1}
    assert third.step("deploy", fn, input={"v": 1}, policy="unsafe") == {"n": 2}
    began = {e["step"]: e["key"] for e in entries(forge.path, "alpha") if e["kind"] == "intent" and e["epoch"] == 1}
    assert calls == [began["publish"], began["deploy"]]
    assert invariants(forge.path, "alpha") == []


def test_a_call_settled_by_its_probe_keeps_its_key_and_no_other_call_takes_it(forge: Forge, held: Claims) -> None:
    """r1 deploys twice (the same input): the first completes, the second is cut off, its writer dead, and its probe
    says it did not happen. In r2 the first call replays the first's result (not taking the cut-off intent, and
    not deploying again); the second runs again under its key; a single call cut off and settled so runs again
    under its own."""
    import subprocess

    from assay.core.lives import life_of

    sleeper = subprocess.Popen(["sleep", "60"])
    writer = life_of(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    assert writer is not None
    first = session(held, "r1")
    first.step("deploy", lambda k: "one", input={"v": 1}, policy="unsafe", probe="false")
    with pytest.raises(Crash):
        first.step("deploy", crashing, input={"v": 1}, policy="unsafe", probe="false", writer=writer.to_data())
    current = held.read("alpha")
    assert current is not None
    held.expire(current, "its desk died", by="sweeper")
    held.claim("alpha", "d")
    second = session(held, "r2", epoch=2)
    second.probe_runner = lambda probe, key: {"command": probe, "exit_code": 1, "tail": ""}
    calls, fn = counter()
    assert second.step("deploy", fn, input={"v": 1}, policy="unsafe", probe="false") == "one"  # replayed: its own
    second.step("deploy", fn, input={"v": 1}, policy="unsafe", probe="false")
    began = [e["key"] for e in entries(forge.path, "alpha") if e["kind"] == "intent" and e["epoch"] == 1]
    assert calls == [began[1]], (calls, began)  # only the call that did not happen ran, under its key
    assert invariants(forge.path, "alpha") == []
    third = session(held, "r3", epoch=2)  # the very call cut off, settled by its probe: its own key
    with pytest.raises(Crash):
        third.step("notify", crashing, input=None, policy="unsafe", probe="false", writer=writer.to_data())
    current = held.read("alpha")
    assert current is not None
    held.expire(current, "its desk died", by="sweeper")
    held.claim("alpha", "d")
    fourth = session(held, "r4", epoch=3)
    fourth.probe_runner = second.probe_runner
    fourth.step("notify", fn, input=None, policy="unsafe", probe="false")
    cut = next(e["key"] for e in entries(forge.path, "alpha") if e["kind"] == "intent" and e["step"] == "notify")
    assert calls[-1] == cut


def _stopped_before_start(key: str) -> Any:
    from assay.errors import Cancelled

    raise Cancelled("stopped", started=False)


@pytest.mark.parametrize("policy", ["unsafe", "idempotent"])
def test_a_retry_in_the_same_run_meets_its_own_cut_off_intent_not_an_older_runs_end(forge: Forge, held: Claims,
                                                                                    policy: str) -> None:
    """r1's first call was stopped before its effect began and its second completed. r2's first call runs again
    and is cut off; r2's retry (the next ordinal, whose slot r1 completed) meets that intent of its own run:
    refused as unknown (unsafe) or resumed (idempotent), never handed r1's result."""
    from assay.errors import Cancelled

    first = session(held, "r1")
    with pytest.raises(Cancelled):
        first.step("deploy", _stopped_before_start, input={"v": 1}, policy=policy)
    assert first.step("deploy", lambda k: "r1-second", input={"v": 1}, policy=policy) == "r1-second"
    second = session(held, "r2")
    with pytest.raises(Crash):
        second.step("deploy", crashing, input={"v": 1}, policy=policy)
    calls, fn = counter()
    if policy == "unsafe":
        with pytest.raises(OutcomeUnknown):
            second.step("deploy", fn, input={"v": 1}, policy=policy)
        assert calls == []
    else:
        assert second.step("deploy", fn, input={"v": 1}, policy=policy) == {"n": 1}
        cut = [e["key"] for e in entries(forge.path, "alpha") if e["kind"] == "intent" and e["run"] == "r2"]
        assert calls == cut[:1]  # resumed under its intent's key
        second.end_run()
        assert invariants(forge.path, "alpha") == []


def test_a_stop_never_pushes_a_result_whose_files_ride_the_work_still_to_come(forge: Forge, held: Claims) -> None:
    """An agent's run finished, its result waiting for the push of its work (`lazy_result`); a stop in the push:
    the stop's writes (the push's cancelled end, the run's end) leave that result out, so the agent's intent stays
    open and the next run runs the agent again, rather than replaying a finished run on a worktree without its
    files (which reads as an agent that changed nothing)."""
    s1 = session(held, "r1")
    s1.begin_run()
    agent_calls, agent = counter()
    s1.step("agent", agent, input={"attempt": 1}, policy="idempotent", lazy_result=True, with_work=True)
    s1.step("verify", lambda key: {"passed": True}, input={"attempt": 1}, lazy_result=True)  # not with the work

    def stopped(key: str) -> Any:
        raise KeyboardInterrupt("SIGTERM")

    with pytest.raises(KeyboardInterrupt):
        s1.step("push", stopped, input={"attempt": 1}, policy="idempotent", rides=True, lazy_result=True)
    s1.stop_run("stopped by SIGTERM")
    on_forge = entries(forge.path, "alpha")
    agent_intent = next(e for e in on_forge if e["kind"] == "intent" and e.get("step") == "agent")
    assert not [e for e in on_forge if e.get("intent") == agent_intent["seq"]]  # no result: the intent is open
    assert [e["data"].get("status") or e.get("status") for e in on_forge if e.get("step") == "push"
            and e["kind"] == "result"] == ["cancelled"]
    assert any((e.get("data") or {}).get("stopped") for e in on_forge)  # the run's end, so no death is counted
    assert [e["kind"] for e in on_forge if e.get("step") == "verify"] == ["intent", "result"]  # it went
    s2 = session(held, "r2")
    list(s2.recover())
    assert s2.step("agent", agent, input={"attempt": 1}, policy="idempotent", lazy_result=True,
                   with_work=True) == {"n": 2}
    assert len(agent_calls) == 2  # run again, not replayed
    s2.flush()
    assert invariants(forge.path, "alpha") == []
