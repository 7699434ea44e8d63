"""Sweeps on a real forge: dead desks expired from observation, races at the lease edge, and every finding."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assay.core import custody
from assay.core.claims import Claims
from assay.core.forge.plain import PlainReviews
from assay.core.git import PACK_REFS_AT, ForgeGit
from assay.core.journal import Journal
from assay.errors import Conflict
from assay.observe.sweep import sweep
from tests.conftest import Forge, Run, assay, audit_failures, git
from tests.helpers.desks import DESK, brief, desk_env, publish
from tests.helpers.fastimport import commit, fast_import
from tests.helpers.gitlog import calls, is_push, lists_refs, logging_git
from tests.journal_check import claim_chain, entries, invariants

POLICY = """name: default
expire:
  grace_s: 0
stuck:
  after_s: 100
unknown:
  after_s: 100
"""
T0 = 1_900_000_000.0  # the sweeper's clock in these tests: far from the desks' own


def sweep_cli(forge: Forge, now: float, *args: str, **env: str) -> Run:
    return assay("sweep", "--forge", forge.url, "--json", *args, env={"ASSAY_SWEEP_NOW": str(now), **env})


def findings(run: Run, kind: str | None = None) -> list[dict[str, object]]:
    assert run.code == 0, run.err
    data = run.json()
    assert isinstance(data, dict)
    return [f for f in data["findings"] if kind is None or f["kind"] == kind]


@pytest.fixture
def policed(forge: Forge) -> Forge:
    publish(forge, {"sweepers/default.yaml": POLICY})
    return forge


def desk_dies_on_another_host(work: Forge, tmp_path: Path) -> None:
    """Desk `builder` (lease 2 s) works `ship` on host `laptop-far-away` and is SIGKILLed right after its deploy:
    no pid check on this host can tell whether it lives."""
    desk = "name: builder\ntakes:\n  labels: [work]\nagent:\n  command: [python, -m, assay.agents.scripted]\n" \
           "lease_s: 2\nheartbeat_s: 1\nenv_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]\n"
    publish(work, {"desks/builder.yaml": desk, "sweepers/default.yaml": POLICY,
                   "briefs/ship.md": brief("Ship", ["write notes.txt hi", "deploy"], "test -f notes.txt")})
    env = {**os.environ, **desk_env(tmp_path, ASSAY_CRASH_AT="step.after-result:deploy", ASSAY_CRASH_SCOPE="group")}
    command = [sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", work.url]
    laptop = subprocess.Popen(["unshare", "--uts", "sh", "-c", 'hostname laptop-far-away && exec "$@"', "sh",
                               *command], env=env, start_new_session=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    _, err = laptop.communicate(timeout=120)
    assert laptop.returncode == -signal.SIGKILL, err.decode()


def test_a_desk_killed_on_another_host_is_expired_and_its_brief_resumed_at_the_next_epoch(
        work: Forge, tmp_path: Path) -> None:
    desk_dies_on_another_host(work, tmp_path)
    held = work.claim_json("ship")
    assert held["state"] == "held" and str(held["holder"]).split("/")[1] == "laptop-far-away"
    assert (tmp_path / "effects.log").read_text().count("deployed ship") == 1

    first = sweep_cli(work, T0)  # the first sight of the tip: nothing can be said of it yet
    assert findings(first, "lease") == [] and work.claim_json("ship")["state"] == "held"
    second = sweep_cli(work, T0 + 3)  # lease 2 s + grace 0 s later, by the sweeper's clock
    [lease] = findings(second, "lease")
    assert lease["action"] == "expired" and lease["new"] is True
    assert [c["state"] for c in claim_chain(work.path, "ship")][-2:] == ["held", "expired"]

    again = assay("desk", "run", "builder", "--once", "--forge", work.url, env=desk_env(tmp_path), timeout=120)
    assert again.code == 0, again.err
    chain = claim_chain(work.path, "ship")
    assert chain[-1]["epoch"] == 2 and chain[-1]["state"] == "waiting"
    assert (tmp_path / "effects.log").read_text().count("deployed ship") == 1  # resumed, not redone
    expire = [e for e in entries(work.path, "ship") if (e.get("data") or {}).get("action") == "expire"]
    assert len(expire) == 1 and expire[0]["epoch"] == 1 and str(expire[0]["run"]).startswith("sweeper:default:")
    assert invariants(work.path, "ship") == []
    assert audit_failures(work.url, "ship") == {}


def test_a_desk_renewing_at_the_lease_edge_is_never_expired_wrongly(policed: Forge) -> None:
    ports = [ForgeGit(policed.url) for _ in range(2)]
    desk, sweeper = Claims(ports[0]), Claims(ports[1])
    desk.claim("alpha", "d", lease_s=1)
    outcomes = {"renewed": 0, "expired": 0}
    lead = 0.0  # how far the desk's renewal starts ahead of the sweep (behind it, below 0): moved after each round
    # toward the side that lost, so that both win some rounds however this machine's load favours one
    try:
        for k in range(16):
            now = T0 + 10 * k
            sweep(sweeper, now=now)  # records the tip as it is
            observed = policed.tip("refs/assay/claims/alpha")
            barrier = threading.Barrier(2)
            result: dict[str, object] = {}

            racer = threading.Thread(target=_renew_at_once, args=(desk, barrier, result, max(0.0, -lead)))
            racer.start()
            barrier.wait()
            threading.Event().wait(max(0.0, lead))
            report = sweep(sweeper, now=now + 2)  # past lease 1 s + grace 0 s for the observed tip
            racer.join()
            tip = policed.claim_json("alpha")
            lease = [f for f in report.findings if f.kind == "lease"]
            if tip["state"] == "expired":
                parent = git("--git-dir", str(policed.path), "rev-parse", "refs/assay/claims/alpha^").strip()
                assert parent == observed  # the tombstone sits on the tip that stood still, not on a renewal
                assert result["renew"] is not True and lease[0].action == "expired"
                outcomes["expired"] += 1
                lead += 0.02
                desk.claim("alpha", "d", lease_s=1)
            else:
                assert result["renew"] is True and tip["state"] == "held"
                assert not lease or lease[0].action.startswith("kept")
                outcomes["renewed"] += 1
                lead -= 0.02
                desk.renew("alpha", "d")  # a tip the next round's first sweep sees for the first time
    finally:
        for p in ports:
            p.close()
    print(f"lease-edge races: {outcomes}")
    assert sum(outcomes.values()) == 16 and outcomes["renewed"] > 0 and outcomes["expired"] > 0
    assert invariants(policed.path, "alpha") == []


def _renew_at_once(desk: Claims, barrier: threading.Barrier, result: dict[str, object], behind: float) -> None:
    barrier.wait()
    # vary which side reaches the forge first: the sweep reads, then writes a tombstone some 10 to 30 ms later
    threading.Event().wait(behind + random.uniform(0, 0.03))
    try:
        desk.renew("alpha", "d")
        result["renew"] = True
    except Conflict as exc:  # the sweeper expired it first: the desk is fenced
        result["renew"] = exc


def test_two_sweepers_at_once_make_one_tombstone_and_record_the_finding_once(policed: Forge,
                                                                               claims: Claims) -> None:
    claims.claim("alpha", "d", lease_s=1)
    assert findings(sweep_cli(policed, T0)) == []
    env = {**os.environ, "ASSAY_SWEEP_NOW": str(T0 + 5)}
    racers = [subprocess.Popen([sys.executable, "-m", "assay", "sweep", "--forge", policed.url, "--json"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [r.communicate(timeout=120) for r in racers]
    assert all(r.returncode == 0 for r in racers), [e for _, e in outs]
    leases = [f for out, _ in outs for f in json.loads(out)["findings"] if f["kind"] == "lease"]
    assert [c["state"] for c in claim_chain(policed.path, "alpha")] == ["held", "expired"]
    assert sum(1 for f in leases if f["new"]) == 1
    assert sum(1 for f in leases if f["action"] == "expired") == 1, leases
    assert len([e for e in entries(policed.path, "alpha") if e["kind"] == "claim"]) == 1
    assert invariants(policed.path, "alpha") == []


def test_a_renewing_desk_without_progress_is_stuck_and_released_when_the_policy_says_so(
        policed: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d", lease_s=600)
    custody.steer(claims, "alpha", "go", "ana")  # a journal that then stands still
    assert findings(sweep_cli(policed, T0), "stuck") == []
    claims.renew("alpha", "d")
    [stuck] = findings(sweep_cli(policed, T0 + 101), "stuck")
    assert stuck["brief"] == "alpha" and stuck["action"] == "" and stuck["new"] is True
    claims.renew("alpha", "d")
    [again] = findings(sweep_cli(policed, T0 + 102), "stuck")
    assert again["new"] is False  # recorded once
    assert policed.claim_json("alpha")["state"] == "held"
    publish(policed, {"sweepers/release.yaml": POLICY.replace("default", "release")
                      .replace("after_s: 100\nunknown", "after_s: 100\n  release: true\nunknown")})
    [released] = findings(sweep_cli(policed, T0 + 103, "--policy", "release"), "stuck")
    assert released["action"] == "released"
    last = policed.claim_json("alpha")
    assert last["state"] == "released" and "forced by sweeper:release: stuck" in str(last["reason"])
    assert invariants(policed.path, "alpha") == []


def test_an_orphan_branch_and_review_are_adoptable(policed: Forge, claims: Claims) -> None:
    main = policed.tip("refs/heads/main")
    assert main
    git("--git-dir", str(policed.path), "update-ref", "refs/heads/assay/beta", main)
    git("--git-dir", str(policed.path), "update-ref", "refs/heads/assay/gamma", main)
    claims.claim("gamma", "d")
    claims.release("gamma", "d")
    claims.claim("delta", "d")
    git("--git-dir", str(policed.path), "update-ref", "refs/heads/assay/delta", main)  # live claim: not an orphan
    orphans = findings(sweep_cli(policed, T0), "orphan")
    assert sorted(str(f["brief"]) for f in orphans) == ["beta", "gamma"]
    assert all("adoptable" in str(f["detail"]) for f in orphans)
    assert "never claimed" in str(next(f for f in orphans if f["brief"] == "beta")["detail"])


def test_an_old_unknown_outcome_is_raised_for_a_person_once(policed: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    ctx = {"ASSAY_FORGE": policed.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1"}
    step = ("step", "run", "--name", "deploy", "--policy", "unsafe", "--", "true")
    assert assay(*step, env={**ctx, "ASSAY_RUN": "r1", "ASSAY_CRASH_AT": "step.after-execute:deploy"}).code < 0
    assert assay(*step, env={**ctx, "ASSAY_RUN": "r2"}).code == 4  # outcome_unknown, then refused
    assert findings(sweep_cli(policed, T0), "unknown") == []
    [unknown] = findings(sweep_cli(policed, T0 + 101), "unknown")
    assert unknown["brief"] == "alpha" and "deploy" in str(unknown["detail"]) and unknown["new"] is True
    assert [f["new"] for f in findings(sweep_cli(policed, T0 + 102), "unknown")] == [False]
    assert assay(*step, env={**ctx, "ASSAY_RUN": "r2"}).code == 0  # the deliberate second call of that run
    assert findings(sweep_cli(policed, T0 + 103), "unknown") == []


@pytest.mark.parametrize("others", [0, 17])  # 17 more stopped journals: read in one batch
def test_an_unsafe_step_cut_off_with_its_holder_is_raised_once_the_claim_is_a_tombstone(policed: Forge,
                                                                                        claims: Claims,
                                                                                        others: int) -> None:
    many = [f"cut{i:02d}" for i in range(others)]
    for brief_id in many:  # each: an unsafe intent journaled by its holder, which then stopped
        claims.claim(brief_id, "e", require_brief=False)
        Journal.open(claims, brief_id, "e", 1, "r1").add("intent", step="charge", input_sha="0" * 64, ordinal=0,
                                                         policy="unsafe", key=f"{brief_id}/1/charge/0")
        claims.force_release(brief_id, "desk gone", "ops")
    claims.claim("alpha", "d")
    ctx = {"ASSAY_FORGE": policed.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1"}
    step = ("step", "run", "--name", "deploy", "--policy", "unsafe", "--", "true")
    assert assay(*step, env={**ctx, "ASSAY_RUN": "r1", "ASSAY_CRASH_AT": "step.after-execute:deploy"}).code < 0
    assert [e["kind"] for e in entries(policed.path, "alpha")][-1] == "intent"  # no result, nothing else yet
    held = findings(sweep_cli(policed, T0), "unknown")
    assert [f["brief"] for f in held if f["brief"] == "alpha"] == []  # a held claim's desk may be running it still
    assert assay("release", "alpha", "--force", "--reason", "desk gone", "--forge", policed.url).code == 0
    found = findings(sweep_cli(policed, T0 + 1), "unknown")
    assert sorted(str(f["brief"]) for f in found) == ["alpha", *many]
    [cut] = [f for f in found if f["brief"] == "alpha"]
    assert cut["new"] is True and "'deploy'" in str(cut["detail"]) and "claim is released" in str(cut["detail"])
    assert all("'charge'" in str(f["detail"]) for f in found if f["brief"] != "alpha")
    assert [f["new"] for f in found if f["brief"] != "alpha"] == [False] * others  # recorded by the first sweep
    assert [f["new"] for f in findings(sweep_cli(policed, T0 + 2), "unknown")] == [False] * (1 + others)


def test_met_waits_are_settled_and_a_merged_but_held_claim_is_found(policed: Forge, claims: Claims) -> None:
    main = policed.tip("refs/heads/main")
    assert main
    reviews = PlainReviews(claims.git)
    for b in ("alpha", "beta"):
        git("--git-dir", str(policed.path), "update-ref", f"refs/heads/assay/{b}", main)
        claims.claim(b, "d")
        reviews.open(b, f"assay/{b}", b, main)
        reviews.mark_ready(b, main)
        reviews.merge(b, "ana")
    custody.wait(claims, "beta", "review", "d")
    claims.claim("gamma", "d")
    custody.wait(claims, "gamma", "time:2030-01-01T00:00:00Z", "d")
    claims.claim("delta", "d")
    custody.wait(claims, "delta", "time:2031-01-01T00:00:00Z", "d")
    claims.claim("epsilon", "d")
    custody.block(claims, "epsilon", "d", 1, "needs a database password")
    run = sweep_cli(policed, T0)  # 2030-03-17, by the sweeper's clock
    waits = {f["brief"]: f["action"] for f in findings(run, "wait")}
    assert waits == {"beta": "released as done", "gamma": "woken"}
    assert policed.claim_json("beta")["state"] == "done" and policed.claim_json("gamma")["state"] == "held"
    assert policed.claim_json("delta")["state"] == "waiting"
    assert [f["brief"] for f in findings(run, "merged-held")] == ["alpha"]
    [blocked] = findings(run, "blocked")
    assert blocked["brief"] == "epsilon" and blocked["detail"] == "needs a database password"
    for b in ("beta", "gamma"):
        assert invariants(policed.path, b) == []


def test_junk_is_a_finding_and_a_dry_run_writes_nothing(policed: Forge, claims: Claims, tmp_path: Path) -> None:
    claims.claim("alpha", "d", lease_s=1)
    policed.write_record("refs/assay/claims/beta", "claim.json", b"{not json")
    policed.write_record("refs/assay/sweeper", "observations.json", b'{"v": 9}')
    summary = tmp_path / "summary.md"
    dry = sweep_cli(policed, T0, "--dry-run", GITHUB_STEP_SUMMARY=str(summary))
    junk = findings(dry, "junk")
    assert {str(f["brief"]) for f in junk} == {"beta", ""}
    assert policed.tip("refs/assay/sweeper") == git("--git-dir", str(policed.path), "rev-parse",
                                                   "refs/assay/sweeper").strip()
    sweeper_before = policed.tip("refs/assay/sweeper")
    assert sweep_cli(policed, T0 + 9, "--dry-run").code == 0
    assert policed.tip("refs/assay/sweeper") == sweeper_before and policed.claim_json("alpha")["state"] == "held"
    assert "## Assay sweep" in summary.read_text() and "| junk | `beta` |" in summary.read_text()
    real = sweep_cli(policed, T0 + 10)
    assert {str(f["brief"]) for f in findings(real, "junk")} == {"beta", ""}
    assert policed.tip("refs/assay/sweeper") != sweeper_before  # observations start afresh over the junk
    assert findings(sweep_cli(policed, T0 + 20), "junk") == [
        f for f in findings(sweep_cli(policed, T0 + 20, "--dry-run"), "junk")]


def test_a_sweep_reads_the_forge_in_a_constant_number_of_round_trips(policed: Forge, tmp_path: Path) -> None:
    for n, cache in ((2, "a"), (6, "b")):
        port = ForgeGit(policed.url, tmp_path / cache)
        claims = Claims(port)
        for b in ("alpha", "beta", "gamma", "delta", "epsilon", "hello")[:n]:
            if policed.tip(f"refs/assay/claims/{b}") is None:
                claims.claim(b, "d")
                custody.steer(claims, b, "hi", "ana")
        fresh = ForgeGit(policed.url, tmp_path / f"fresh-{cache}")
        report = sweep(Claims(fresh), now=T0 + n)
        assert report.briefs == n
        assert report.round_trips == {"ls-remote": 1, "fetch": 1, "push": 1}
        port.close()
        fresh.close()


def test_a_bad_policy_is_refused_with_file_and_line(policed: Forge) -> None:
    publish(policed, {"sweepers/default.yaml": "name: default\nexpire:\n  grace_s: soon\nstuck: {after: 3}\n"})
    run = assay("sweep", "--forge", policed.url)
    assert run.code == 2 and "sweepers/default.yaml:3" in run.err and "Traceback" not in run.err
    publish(policed, {"sweepers/default.yaml": POLICY})
    missing = assay("sweep", "--forge", policed.url, "--policy", "nightly")
    assert missing.code == 2 and "no sweeper policy 'nightly'" in missing.err and "default" in missing.err


def test_briefs_done_long_enough_are_retired_by_the_sweep(policed: Forge, claims: Claims) -> None:
    """The default policy retires briefs done for a week (by the sweeper's clock); a dry run only says so."""
    for b in ("alpha", "beta"):
        claims.claim(b, "d")
        custody.release(claims, b, "d", outcome="done")
    week_later = time.time() + 7 * 86400 + 60
    assert findings(sweep_cli(policed, time.time()), "retire") == []  # not a week yet
    dry = findings(sweep_cli(policed, week_later, "--dry-run"), "retire")
    assert [(f["brief"], f["action"]) for f in dry] == [("alpha", "would retire"), ("beta", "would retire")]
    assert policed.tip("refs/assay/claims/alpha") is not None
    done = findings(sweep_cli(policed, week_later), "retire")
    assert [(f["brief"], f["action"]) for f in done] == [("alpha", "retired"), ("beta", "retired")]
    assert policed.tip("refs/assay/claims/alpha") is None and policed.tip("refs/assay/retired") is not None
    assert findings(sweep_cli(policed, week_later + 60), "retire") == []  # nothing left to retire
    assert assay("claim", "alpha", "--desk", "x", env={"ASSAY_FORGE": policed.url}).code == 3


def test_a_desk_on_a_fresh_machine_sweeps_and_takes_a_dead_desks_brief(work: Forge, tmp_path: Path) -> None:
    """Nothing else runs: a desk started after another machine's desk died sweeps at start and once a
    heartbeat, expires the dead claim once its lease has passed, and resumes the brief at the next epoch."""
    desk_dies_on_another_host(work, tmp_path)
    assert work.claim_json("ship")["state"] == "held"

    fresh = assay("desk", "run", "builder", "--max-briefs", "1", "--poll", "0.2", "--forge", work.url,
                  env=desk_env(tmp_path), timeout=120)
    assert fresh.code == 0, fresh.err
    assert "sweep: lease ship: expired" in fresh.out, fresh.out
    states = [(c["state"], c["epoch"]) for c in claim_chain(work.path, "ship")]
    assert ("expired", 1) in states and states[-1] == ("waiting", 2), states
    assert (tmp_path / "effects.log").read_text().count("deployed ship") == 1  # resumed, not redone
    assert invariants(work.path, "ship") == []
    assert audit_failures(work.url, "ship") == {}


def test_a_retirement_the_forge_refuses_is_a_finding_not_a_failed_sweep(policed: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    custody.release(claims, "alpha", "d", outcome="done")
    lock = policed.path / "refs" / "assay" / "claims" / "alpha.lock"  # a push killed mid-way left it
    lock.write_text("")
    [retire] = findings(sweep_cli(policed, time.time() + 8 * 86400), "retire")
    assert retire["action"] == "failed" and "lock" in str(retire["detail"]), retire
    assert policed.tip("refs/assay/claims/alpha") is not None and policed.tip("refs/assay/retired") is None
    lock.unlink()
    [retire] = findings(sweep_cli(policed, time.time() + 8 * 86400 + 60), "retire")
    assert retire["action"] == "retired" and policed.tip("refs/assay/claims/alpha") is None


def test_the_sweep_packs_the_loose_refs_of_a_forge_on_this_machine(forge: Forge) -> None:
    """Every push to a forge on disk stats each loose ref, so the sweep packs them once there are `PACK_REFS_AT`:
    the refs keep their values, none is left loose; a dry run packs nothing."""
    stream = b"".join(commit(f"refs/heads/assay/w{i}", {"f": b"%d" % i}) for i in range(PACK_REFS_AT + 4))
    fast_import(forge, stream)
    refs = ["--git-dir", str(forge.path), "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"]
    before = git(*refs)
    loose = sum(len(files) for _, _, files in os.walk(forge.path / "refs"))
    assert loose >= PACK_REFS_AT + 4
    dry = sweep_cli(forge, time.time(), "--dry-run", "--json")
    assert dry.code == 0 and json.loads(dry.out)["packed_refs"] == 0, dry.err
    done = sweep_cli(forge, time.time(), "--json")
    assert done.code == 0 and json.loads(done.out)["packed_refs"] >= loose, done.err  # with its own observations
    assert sum(len(files) for _, _, files in os.walk(forge.path / "refs")) == 0
    assert git(*refs) == before
    again = sweep_cli(forge, time.time(), "--json")
    assert json.loads(again.out)["packed_refs"] == 0  # fewer than PACK_REFS_AT loose: nothing to do


def test_a_desk_leaves_the_sweep_to_a_sweeper_that_swept_within_its_heartbeat(forge: Forge, tmp_path: Path) -> None:
    """A fleet sweeps about once a heartbeat, not once per desk: a desk whose pass finds observations younger
    than its heartbeat sweeps not (nothing pushed to the sweeper's ref, though a claim moved since); once they
    are older, its pass sweeps (the new claim is observed and pushed), still with one ref advertisement."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2).replace("heartbeat_s: 5",
                                                                                        "heartbeat_s: 30"),
                    "briefs/b.md": brief("B", ["write b.txt b"], "true").replace("[work]", "[other]"),
                    "briefs/c.md": brief("C", ["write c.txt c"], "true").replace("[work]", "[other]")})
    folder, log = logging_git(tmp_path)
    env = desk_env(tmp_path, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")

    def desk_pass() -> list[str]:
        log.unlink(missing_ok=True)
        ran = assay("desk", "run", "builder", "--once", "--forge", forge.url, env=env)
        assert ran.code == 0, ran.out + ran.err
        return [args for code, args in calls(log)]

    now = time.time()
    assert assay("sweep", "--forge", forge.url, env={"ASSAY_SWEEP_NOW": str(now)}).code == 0
    assert assay("claim", "b", "--desk", "person", "--forge", forge.url).code == 0
    fresh = desk_pass()
    assert not [a for a in fresh if is_push(a) and "refs/assay/sweeper" in a], fresh
    assert sum(lists_refs(a) for a in fresh) == 1, fresh  # the sweep's read is the look's

    assert assay("sweep", "--forge", forge.url, env={"ASSAY_SWEEP_NOW": str(now - 100)}).code == 0
    assert assay("claim", "c", "--desk", "person", "--forge", forge.url).code == 0
    stale = desk_pass()
    assert [a for a in stale if is_push(a) and "refs/assay/sweeper" in a], stale
    assert sum(lists_refs(a) for a in stale) == 1, stale
