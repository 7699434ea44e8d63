"""A seeded kill-and-pause fuzzer: real desks work real briefs while their process groups are SIGKILLed and
SIGSTOPped at random moments, then run to the end without faults; the forge and the effects log are then read
with plain git and plain text, never through Assay's own word, and `assay audit --all` must agree.

Each brief's scripted agent runs an unsafe `deploy` (a journaled step that appends one line, with its
idempotency key, to the effects log). Three desks with 3-second leases run at once, each in a process group
of its own. The forge is served over git:// by a daemon this test owns (`tests/helpers/gitdaemon.py`), so a
desk killed or paused with its whole group never takes the forge's side of a push with it.

A `random.Random(seed)` plan says when each fault comes and what it is:

- kill: SIGKILL the desk's whole group (desk, agent, step client, git), wait for its exit, start it again;
- pause: SIGSTOP the group for less than a lease, then SIGCONT;
- long pause: SIGSTOP a desk that holds a claim, wait until the forge shows that claim expired or taken at a
  newer epoch (the other desks sweep, and so does `assay sweep` run here), then SIGCONT: the woken desk must
  find itself fenced.

Half of the faults come at a random moment; the other half at the moment the next deploy's line lands in the
effects log, on the desk working that brief, while the deploy's result is being journaled. Then the faults
stop, the desks run on until every brief is done, blocked or waiting on its review, and the checks read the
forge with plain git (`tests/journal_check.py`) and the effects log as plain text.

The plan is the seed's; which desk a fault meets depends on what the forge shows at that moment, so a run's
faults are listed in every failure message together with the seed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Forge, assay, git
from tests.helpers import procs
from tests.helpers.desks import brief, publish
from tests.helpers.gitdaemon import GitDaemon
from tests.journal_check import claim_chain, entries, invariants

SEEDS = (7, 1234, 90210)
DESKS = ("north", "south", "east")
BRIEFS = tuple(f"ship{i}" for i in range(1, 7))
LEASE_S = 3
DESK = f"""name: {{name}}
takes:
  labels: [work]
agent:
  command: [python, -m, assay.agents.scripted]
lease_s: {LEASE_S}
heartbeat_s: 1
attempts: 3
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]
"""
POLICY = "name: default\nexpire:\n  grace_s: 0\n"  # the desks' own sweeps expire a claim one lease after it stood still
TERMINAL = ("waiting", "blocked", "done")
TAKEOVER_DEADLINE_S = LEASE_S + 30.0  # a stopped holder's claim is expired by a sweep by then, at the latest
SETTLE_DEADLINE_S = 120.0  # every brief done, blocked or waiting on its review once the faults stop
REQUIRED = 3  # the first faults of every plan, played whatever happens
DEPLOYED = re.compile(r"deployed (\S+) key=(\S+)$")
OPEN_INTENT = re.compile(r"intent (\d+) \(\S+\) has neither a result nor an outcome_unknown")


# -- the plan -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    kind: str  # "kill", "pause" or "long-pause"
    after_s: float  # how long after the previous fault it comes
    at_deploy: bool  # then also: at the next deploy's line in the effects log (its result is being journaled)
    pick: float  # which of the candidate desks it meets, in [0, 1)
    holder_first: bool  # whether it meets a desk holding a claim, when one does
    pause_s: float  # a short pause's length
    restart_s: float  # how long a killed desk stays down


def plan(seed: int) -> list[Fault]:
    """Five or six faults: the first `REQUIRED` are a long pause (while there is surely a claim to lose), then a
    kill and a pause in a random order."""
    rng = random.Random(seed)
    kinds = ["kill", "pause"]
    rng.shuffle(kinds)
    kinds = ["long-pause", *kinds]
    kinds += rng.choices(["kill", "pause", "long-pause"], weights=[3, 3, 1], k=rng.randint(2, 3))
    return [Fault(kind, round(rng.uniform(0.2, 1.0), 2), rng.random() < 0.5, rng.random(), rng.random() < 0.8,
                  round(rng.uniform(0.2, LEASE_S * 0.6), 2), round(rng.choice([0.0, rng.uniform(0.1, 1.2)]), 2))
            for kind in kinds]


def scripts(seed: int) -> dict[str, str]:
    """Each brief: write its file, work a while, deploy (half of them with an outcome probe), work a while more."""
    rng = random.Random(f"{seed}/briefs")
    out = {}
    for b in BRIEFS:
        deploy = "deploy probed" if rng.random() < 0.5 else "deploy"
        script = [f"write {b}.txt {b}", f"sleep {rng.uniform(0.3, 1.5):.1f}", deploy,
                  f"sleep {rng.uniform(0.3, 1.5):.1f}"]
        out[f"briefs/{b}.md"] = brief(b.capitalize(), script, f"test -f {b}.txt")
    return out


# -- reading the forge with plain git -------------------------------------------------------------------


def claim_tips(forge: Path) -> dict[str, dict[str, Any]]:
    """Every brief's claim record at its tip: one for-each-ref and one cat-file batch."""
    listed = git("--git-dir", str(forge), "for-each-ref", "--format=%(refname:lstrip=3) %(objectname)",
                 "refs/assay/claims/")
    pairs = [line.split() for line in listed.splitlines() if line]
    if not pairs:
        return {}
    batch = subprocess.run(["git", "--git-dir", str(forge), "cat-file", "--batch"], capture_output=True, check=True,
                           input="".join(f"{sha}:claim.json\n" for _, sha in pairs).encode()).stdout
    out: dict[str, dict[str, Any]] = {}
    pos = 0
    for name, _ in pairs:
        end = batch.index(b"\n", pos)
        size = int(batch[pos:end].split()[2])
        out[name] = json.loads(batch[end + 1:end + 1 + size])
        pos = end + 1 + size + 1
    return out


def holder_pid(record: dict[str, Any]) -> int:
    return int(str(record["holder"]).split("/")[2])


def review_state(forge: Path, name: str) -> str | None:
    if not git("--git-dir", str(forge), "for-each-ref", f"refs/assay/reviews/{name}").strip():
        return None
    return str(json.loads(git("--git-dir", str(forge), "show", f"refs/assay/reviews/{name}:review.json"))["state"])


# -- the desks ------------------------------------------------------------------------------------------

Holding = dict[str, dict[str, dict[str, Any]]]  # desk -> {brief: claim record} its running life holds


@dataclass
class Fleet:
    """One running process per desk, each the leader of its own process group; every life logged to a file."""

    url: str
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    lives: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)  # desks that ended without being told to

    def start(self, name: str) -> None:
        self.lives[name] += 1
        with (self.logs / f"{name}-{self.lives[name]}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "assay", "desk", "run", name, "--poll", "0.3", "--forge", self.url],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def log(self, name: str) -> Path:
        return self.logs / f"{name}-{self.lives[name]}.log"

    def revive(self) -> None:
        """A desk that ended on its own is a finding (a desk polls until stopped); it is started again."""
        for name, proc in sorted(self.procs.items()):
            if proc.poll() is not None:
                tail = self.log(name).read_text(errors="replace")[-1500:]
                self.unexpected.append(f"{name} life {self.lives[name]} exited {proc.returncode}:\n{tail}")
                self.start(name)

    def holding(self, tips: dict[str, dict[str, Any]]) -> Holding:
        """The claims each desk's running life holds in `tips` (its pid is in the holder)."""
        pids = {proc.pid: name for name, proc in self.procs.items()}
        out: Holding = {}
        for b, r in tips.items():
            if r["state"] == "held" and holder_pid(r) in pids:
                out.setdefault(pids[holder_pid(r)], {})[b] = r
        return out

    def kill(self, name: str) -> bool:
        """SIGKILL the desk's whole group; whether the desk died of it (else it had ended on its own: a finding)."""
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        if proc.wait(timeout=30) == -signal.SIGKILL:
            return True
        self.unexpected.append(f"{name} life {self.lives[name]} exited {proc.returncode} before it was killed")
        return False

    def stop(self, name: str) -> None:
        """SIGSTOP the desk's whole group; returns once /proc shows the desk stopped or stopping.

        A desk in D (a kernel call held up by a slow disk, for minutes on a busy machine) has the stop pending:
        it runs no code of its own before it is stopped, so for the pause it counts as stopped.
        """
        os.killpg(self.procs[name].pid, signal.SIGSTOP)
        procs.await_state(self.procs[name].pid, "TD", deadline_s=60)

    def cont(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGCONT)

    def shutdown(self) -> None:
        """End every desk (woken first, in case one is paused), its whole group."""
        for proc in self.procs.values():
            for sig in (signal.SIGCONT, signal.SIGTERM):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


@dataclass
class Chaos:
    seed: int
    forge: Path
    fleet: Fleet
    effects: Path
    started: float = field(default_factory=time.monotonic)
    story: list[str] = field(default_factory=list)
    kills: int = 0  # desks that died of a SIGKILL to their group
    pauses: int = 0  # desks seen stopped (state T) after a SIGSTOP to their group
    takeovers: int = 0  # claims of stopped desks that the forge showed expired or taken at a newer epoch

    def tell(self, line: str) -> None:
        self.story.append(f"+{time.monotonic() - self.started:5.1f}s {line}")

    def context(self) -> str:
        return (f"seed {self.seed} (reproduce: pytest 'tests/crash/test_kill_fuzz.py::test_kill_and_pause_fuzz"
                f"[{self.seed}]'); desk logs in {self.fleet.logs}; faults:\n  " + "\n  ".join(self.story))

    def holding(self) -> Holding:
        return self.fleet.holding(claim_tips(self.forge))

    def finished(self, tips: dict[str, dict[str, Any]] | None = None) -> bool:
        """Every brief done, blocked or waiting on its review: no desk will deploy or hold a claim again."""
        tips = claim_tips(self.forge) if tips is None else tips
        return all(b in tips and tips[b]["state"] in TERMINAL for b in BRIEFS)

    def run(self, faults: list[Fault]) -> None:
        """The first `REQUIRED` faults come whatever happens; the others only while there is work left."""
        for i, fault in enumerate(faults):
            time.sleep(fault.after_s)  # a random moment: not a synchronisation
            self.fleet.revive()
            if i >= REQUIRED and self.finished():
                self.tell(f"the work is finished: {len(faults) - i} fault(s) left out")
                return
            deployed, holding = self.moment(fault)
            if fault.kind == "kill":
                self.kill(fault, deployed, holding)
            elif fault.kind == "pause":
                self.pause(fault, deployed, holding)
            else:
                self.long_pause(fault, deployed, holding, required=i < REQUIRED)

    def moment(self, fault: Fault) -> tuple[str | None, Holding]:
        """Now, or (`at_deploy`) the moment the next deploy's line lands in the effects log: its step client is
        reporting the result to its desk, which journals it. Returns the brief deployed, if any, and who holds what
        (read at most 0.1 s before)."""
        holding = self.holding()
        if not fault.at_deploy:
            return None, holding
        seen = self.effects.stat().st_size if self.effects.exists() else 0
        deadline = time.monotonic() + 10
        read_at = time.monotonic()
        while time.monotonic() < deadline:
            size = self.effects.stat().st_size if self.effects.exists() else 0
            if size > seen:
                with self.effects.open("rb") as fh:
                    fh.seek(seen)
                    line = fh.read().decode().splitlines()[0]
                m = DEPLOYED.fullmatch(line)
                return (m[1] if m else None), holding
            if time.monotonic() - read_at > 0.1:
                tips, read_at = claim_tips(self.forge), time.monotonic()
                holding = self.fleet.holding(tips)
                if self.finished(tips):
                    break  # no deploy will come
            time.sleep(0.005)
        self.tell("no deploy came: the fault comes now")
        return None, self.holding()

    def target(self, fault: Fault, deployed: str | None, holding: Holding) -> str:
        """The desk holding the brief just deployed; else, mostly, one holding a claim; else any desk."""
        if deployed is not None:
            for name, held in sorted(holding.items()):
                if deployed in held:
                    return name
        candidates = sorted(holding) if holding and fault.holder_first else list(DESKS)
        return candidates[int(fault.pick * len(candidates))]

    def kill(self, fault: Fault, deployed: str | None, holding: Holding) -> None:
        name = self.target(fault, deployed, holding)
        group = self.fleet.procs[name].pid
        died = self.fleet.kill(name)
        self.kills += int(died)
        at = f" as {deployed} deployed" if deployed else ""
        self.tell(f"SIGKILL {name}{at} (group {group}, holding {sorted(holding.get(name, {}))}, "
                  f"{'died of it' if died else 'had already ended'}); restart in {fault.restart_s}s")
        time.sleep(fault.restart_s)
        self.fleet.start(name)

    def pause(self, fault: Fault, deployed: str | None, holding: Holding) -> None:
        name = self.target(fault, deployed, holding)
        self.fleet.stop(name)
        self.pauses += 1
        held = self.holding().get(name, {})
        at = f" as {deployed} deployed" if deployed else ""
        self.tell(f"SIGSTOP {name}{at} for {fault.pause_s}s (holding {sorted(held)})")
        time.sleep(fault.pause_s)
        self.fleet.cont(name)
        self.tell(f"SIGCONT {name}")

    def long_pause(self, fault: Fault, deployed: str | None, holding: Holding, required: bool) -> None:
        """Stop a desk that holds a claim (as the forge shows once it is stopped) until the claim is taken."""
        deadline = time.monotonic() + 30
        while True:
            if holding:
                name = self.target(replace(fault, holder_first=True), deployed, holding)
                self.fleet.stop(name)
                self.pauses += 1
                held = self.holding().get(name, {})  # stopped: these cannot move now, but for a sweep's expiry
                if held:
                    break
                self.fleet.cont(name)  # its claim ended as it stopped: a short pause, and another try
                self.tell(f"SIGSTOP {name} and SIGCONT at once: its claim ended as it stopped")
            if not required and self.finished():
                self.tell("the work is finished: no claim left to lose, the long pause left out")
                return
            assert time.monotonic() < deadline and not self.finished(), (
                f"no desk holds a claim to lose (the work ended before the first faults)\n{self.context()}")
            time.sleep(0.1)
            deployed, holding = None, self.holding()
        at = f" as {deployed} deployed" if deployed else ""
        self.tell(f"SIGSTOP {name}{at} (group {self.fleet.procs[name].pid}) holding {sorted(held)}, "
                  "until the forge shows them taken")
        self.await_takeover(name, held)
        self.fleet.cont(name)
        self.tell(f"SIGCONT {name}")

    def await_takeover(self, name: str, held: dict[str, dict[str, Any]]) -> None:
        """Until every claim the stopped desk held is expired or held at a newer epoch, as plain git reads it.

        The other desks sweep between their briefs; a sweep is also run here, at once (it records the tips it
        sees) and every 0.7 s once a lease has passed, so the expiry does not wait for a desk to be between briefs.
        """
        stopped = time.monotonic()
        swept = 0.0
        while True:
            tips = claim_tips(self.forge)
            left = {b for b, r in held.items()
                    if tips[b]["epoch"] == r["epoch"] and tips[b]["state"] in ("held", "waiting")}
            if not left:
                break
            now = time.monotonic()
            assert now - stopped < TAKEOVER_DEADLINE_S, (
                f"{name} was stopped for {TAKEOVER_DEADLINE_S}s, and its claims on {sorted(left)} were never expired: "
                f"{[tips[b] for b in sorted(left)]}\n{self.context()}")
            if swept == 0.0 or (now - stopped > LEASE_S and now - swept > 0.7):
                run = assay("sweep", "--forge", str(self.forge))
                assert run.code == 0, f"assay sweep failed: {run.err}\n{self.context()}"
                swept = time.monotonic()
            else:
                time.sleep(0.1)
        self.takeovers += 1
        self.tell("taken: " + ", ".join(f"{b} {tips[b]['state']} at epoch {tips[b]['epoch']} by {tips[b]['desk']}"
                                        for b in sorted(held)))

    def settle(self) -> dict[str, dict[str, Any]]:
        """No more faults: the desks run on until every brief is done, blocked or waiting on its review."""
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        while True:
            self.fleet.revive()
            tips = claim_tips(self.forge)
            if self.finished(tips):
                return tips
            assert time.monotonic() < deadline, (
                f"briefs not finished {SETTLE_DEADLINE_S}s after the last fault: "
                f"{ {b: (r['state'], r['epoch'], r['desk']) for b, r in tips.items()} }\n{self.context()}")
            time.sleep(0.3)


@pytest.fixture
def daemon(forge: Forge) -> Iterator[GitDaemon]:
    with GitDaemon(forge.path.parent) as served:
        yield served


# -- the checks, with plain git and plain text -----------------------------------------------------------


def effects_by_brief(effects: Path, why: str) -> dict[str, Counter[str]]:
    """brief -> {idempotency key: how many times a deploy under it ran}, from the effects log."""
    ran: dict[str, Counter[str]] = {b: Counter() for b in BRIEFS}
    for line in effects.read_text().splitlines() if effects.exists() else []:
        m = DEPLOYED.fullmatch(line)
        assert m is not None and m[1] in ran, f"an effects log line of no brief: {line!r}\n{why}"
        ran[m[1]][m[2]] += 1
    return ran


def check_brief(forge: Path, b: str, last: dict[str, Any], ran: Counter[str], why: str) -> None:
    chain = claim_chain(forge, b)
    es = entries(forge, b)
    where = f"brief {b}: chain {[(c['state'], c['epoch'], c['desk']) for c in chain]}\n{why}"

    # it ends done, blocked or waiting on a ready review, with a reason
    assert chain[-1] == last and last["state"] in TERMINAL, where
    if last["state"] == "blocked":
        assert str(last.get("reason") or "").strip(), where
    if last["state"] == "waiting":
        assert (last.get("wait") or {}).get("on") == "review" and review_state(forge, b) == "ready", where

    # claim epochs only rise, each new one starting held; journal epochs only rise, never past the claim's
    epochs = [c["epoch"] for c in chain]
    assert epochs == sorted(epochs), where
    assert all(c["state"] == "held" for i, c in enumerate(chain) if i == 0 or c["epoch"] != epochs[i - 1]), where
    journal_epochs = [e["epoch"] for e in es]
    assert journal_epochs == sorted(journal_epochs) and max(journal_epochs) <= last["epoch"], where

    # seq without gaps, one holder per epoch, every intent resolved once (a blocked brief may leave the desk's own
    # safe or idempotent steps open, to resume when a person releases it; never an unsafe one)
    policy = {e["seq"]: e.get("policy") for e in es if e["kind"] == "intent"}
    problems = [p for p in invariants(forge, b) if not (
        last["state"] == "blocked" and (o := OPEN_INTENT.match(p)) and policy[int(o[1])] != "unsafe")]
    assert problems == [], f"{problems}\n{where}"

    # the unsafe deploy: each intent's effect ran at most once, only under an intent on the forge, never where the
    # journal says it did not happen or never started; more than once a brief only as a deliberate repeat after
    # a `did-not` settle
    deploys = {e["seq"]: str(e["key"]) for e in es if e["kind"] == "intent" and e.get("step") == "deploy"}
    ends = [e for e in es if e["kind"] == "result" and e.get("intent") in deploys]
    verdicts = [(e, (e.get("data") or {}).get("settled")) for e in ends]
    did_not = {deploys[e["intent"]] for e, v in verdicts if v == "did-not"}
    cancelled = {deploys[e["intent"]] for e, v in verdicts if v is None and e.get("status") == "cancelled"}
    completed = {deploys[e["intent"]] for e, v in verdicts if v is None and e.get("status") == "completed"
                 and ((e.get("data") or {}).get("output") or {}).get("exit_code") == 0}
    effect = f"effects {dict(ran)}; deploy intents {deploys}; their ends {ends}\n{where}"
    assert all(n == 1 for n in ran.values()), f"one intent's deploy ran twice: {effect}"
    assert set(ran) <= set(deploys.values()), f"a deploy ran without its intent on the forge: {effect}"
    assert not set(ran) & did_not, f"the journal says a deploy that ran did not happen: {effect}"
    assert not set(ran) & cancelled, f"the journal says a deploy that ran never started: {effect}"
    assert completed <= set(ran), f"the journal says a deploy completed that never ran: {effect}"
    assert sum(ran.values()) <= 1 + len(did_not), f"deployed more often than deliberately: {effect}"
    if last["state"] == "waiting":
        assert sum(ran.values()) >= 1, f"a review is ready, and its deploy never ran: {effect}"


def check_no_errors(forge: Path, b: str, why: str) -> None:
    """Nothing in this test refuses a write or breaks the forge: an agent's attempt may fail because its desk was
    fenced (exit 3), its deploy was refused as unknown (4) or cut off (75, 143), never with an error (1, 2) in its
    steps; and no brief is blocked for writes the forge refused."""
    es = entries(forge, b)
    errors = [(e["seq"], e["epoch"], out.get("exit_code"), out.get("tail")) for e in es
              if e["kind"] == "result" and e.get("step") == "agent"
              and (out := (e.get("data") or {}).get("output") or {}).get("exit_code") in (1, 2)]
    assert errors == [], f"brief {b}: an agent attempt failed with an error in its steps: {errors}\n{why}"
    reason = str(claim_chain(forge, b)[-1].get("reason") or "")
    assert "refused" not in reason, f"brief {b} is blocked for writes the forge refused: {reason}\n{why}"


def summary(forge: Path) -> str:
    """What the journals show of the faults: epochs, expiries, and how the deploys ended."""
    kinds: Counter[str] = Counter()
    for b in BRIEFS:
        chain = claim_chain(forge, b)
        kinds.update({"epochs": chain[-1]["epoch"], f"ends {chain[-1]['state']}": 1,
                      "expired": sum(c["state"] == "expired" for c in chain)})
        for e in entries(forge, b):
            if e.get("step") == "deploy" and e["kind"] in ("intent", "outcome_unknown", "refused"):
                kinds[f"deploy {e['kind']}"] += 1
            if e.get("step") == "deploy" and e["kind"] == "result":
                verdict = (e.get("data") or {}).get("settled")
                kinds[f"deploy settled {verdict} by {(e.get('data') or {}).get('by')}" if verdict
                      else f"deploy result {e.get('status')}"] += 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items()))


# -- the test -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_and_pause_fuzz(forge: Forge, daemon: GitDaemon, tmp_path: Path, seed: int) -> None:
    publish(forge, {**{f"desks/{d}.yaml": DESK.format(name=d) for d in DESKS}, "sweepers/default.yaml": POLICY,
                    **scripts(seed)})
    effects = tmp_path / "effects.log"
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, "ASSAY_EFFECTS_LOG": str(effects), "ASSAY_STATE_DIR": str(tmp_path / "state")}
    fleet = Fleet(daemon.url(forge.path.name), env, logs)
    chaos = Chaos(seed, forge.path, fleet, effects)
    try:
        for d in DESKS:
            fleet.start(d)
        chaos.run(plan(seed))
        chaos.tell(f"faults over: {chaos.kills} kills, {chaos.pauses} pauses, {chaos.takeovers} claims taken")
        tips = chaos.settle()
        chaos.tell("every brief done, blocked or waiting")
    finally:
        fleet.shutdown()
    chaos.tell(summary(forge.path))
    why = chaos.context()
    print(why)

    # the faults happened, as the processes and the forge show: a fuzzer that never killed, paused or lost a
    # claim tested nothing
    assert chaos.kills >= 1 and chaos.pauses >= 1 and chaos.takeovers >= 1, why
    assert any(c["state"] == "expired" for b in BRIEFS for c in claim_chain(forge.path, b)), why
    # no desk ended on its own, or died of an error
    assert fleet.unexpected == [], "\n".join(fleet.unexpected) + "\n" + why
    for name in DESKS:
        for life in range(1, fleet.lives[name] + 1):
            text = (logs / f"{name}-{life}.log").read_text(errors="replace")
            assert not any(line.startswith("Traceback") for line in text.splitlines()), \
                f"{name} life {life} died of an error:\n{text[-3000:]}\n{why}"

    ran = effects_by_brief(effects, why)
    for b in BRIEFS:
        check_brief(forge.path, b, tips[b], ran[b], why)

    audit = assay("audit", "--all", "--json", "--forge", forge.url)
    views = audit.json()
    assert isinstance(views, list), audit.err
    failed = {v["brief"]: [c for c in v["checks"] if not c["passed"]] for v in views if not v["passed"]}
    assert audit.code == 0 and failed == {}, f"{json.dumps(failed, indent=1)}\n{why}"
    assert sorted(v["brief"] for v in views) == sorted(BRIEFS), why

    # last, as the other checks hold whatever failed here: no write was refused, no step failed with an error
    for b in BRIEFS:
        check_no_errors(forge.path, b, why)
    for name in DESKS:
        for life in range(1, fleet.lives[name] + 1):
            refused = [line for line in (logs / f"{name}-{life}.log").read_text(errors="replace").splitlines()
                       if "the forge refused" in line]
            assert refused == [], f"{name} life {life} says the forge refused a write (nothing here refuses one): " \
                                  f"{refused}\n{why}"
