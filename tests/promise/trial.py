"""One seeded trial of the promise suite: set up a fleet, plant junk, play a random schedule of faults while the
wings are in use, let the fleet settle, then hand the evidence to the judge.

The schedule is the seed's (`random.Random(seed)`); which process a fault meets depends on what runs at that
moment, so every fault is told in the story printed with a failure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import fleet as fl
from . import junk
from .judge import Break, Evidence, judge
from .reader import briefs_on_main, claim_tips, review_chain

FAULTS = ("group", "desk", "agent", "mcp", "client", "step", "pause", "long-pause", "term")
WEIGHTS = (3, 2, 2, 2, 2, 2, 3, 1, 2)
TERMINAL = ("waiting", "blocked", "done")
SETTLE_S = 60.0  # past the usual 10-35 s; a brief stuck by a stale lock (finding 5) stays so
EFFECT_DELAYS = (0.3, 1.5, 3.0)  # how long an effect's grandchild works before it writes
# how long a killed owner's effect processes may take to go: past the 5 s a step client whose desk went gives its
# command between SIGTERM and SIGKILL (procs.STOP_GRACE_S), on a loaded machine
ORPHAN_S = 6.0


@dataclass
class Outcome:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)  # what was done: kill kinds, pauses, steers, sweeps
    breaks: list[Break] = field(default_factory=list)
    story: list[str] = field(default_factory=list)
    root: Path | None = None

    def tell(self, started: float, line: str) -> None:
        self.story.append(f"+{time.monotonic() - started:5.1f}s {line}")

    def report(self) -> str:
        return (f"seed {self.seed} (replay: ASSAY_PROMISE_SEED={self.seed} ASSAY_PROMISE_TRIALS=1); files in "
                f"{self.root}; {dict(self.faults)}\n  " + "\n  ".join(self.story))


SHARED = "promise"  # the folder cli1 and cli2 both declare they touch: they never run at once
CHECKS = {"cli1": "test -f cli1.txt", "cli2": "test -f cli2.txt", "mcp1": "test -f mcp-agent.txt"}


def briefs(setup: fl.Setup, rng: random.Random) -> dict[str, str]:
    """Two briefs worked through the CLI, whose footprints overlap, one through MCP tools; each makes an effect two
    processes down."""
    out: dict[str, str] = {}
    for i in (1, 2):
        name = f"cli{i}"
        script = [f"write {name}.txt {name}", "value", f"think {rng.uniform(0.2, 1.2):.1f}",
                  f"effect deploy {rng.choice(EFFECT_DELAYS)}", f"think {rng.uniform(0.2, 1.2):.1f}",
                  *(["spawn c" + name] if rng.random() < 0.5 else []), "steering", "answer"]
        out[f"briefs/{name}.md"] = (f"---\ntitle: Ship {name}\nlabels: [{fl.LABEL}]\ntouches: [{SHARED}/]\n"
                                    f"verify:\n  - id: check\n"
                                    f"    run: test -f {name}.txt\n---\nShip {name}.\n\n```promise-script\n"
                                    + "\n".join(script) + "\n```\n")
    target = setup.dir / "effects" / "mcp1.deploy.log"
    argv = ["sh", str(setup.dir / "effect.sh"), str(target), str(rng.choice(EFFECT_DELAYS)), setup.mark]
    calls = [{"tool": "value", "arguments": {"kind": "uuid"}},
             {"tool": "progress", "arguments": {"text": "half way"}},
             {"tool": "steering"},
             {"tool": "step_run", "arguments": {"name": "build", "policy": "idempotent",
                                                "command": f"sleep {rng.uniform(0.5, 2.0):.1f}"}},
             {"tool": "step_run", "arguments": {"name": "deploy", "policy": "unsafe", "argv": argv,
                                                "probe": f"test -s {target}"}},
             {"tool": "steering"},
             *([{"tool": "spawn", "arguments": {"title": "Child of mcp1", "key": "cmcp1", "labels": ["promise"],
                                                 "body": "Child.\n\n```promise-script\nwrite child.txt c\n```\n"}}]
               if rng.random() < 0.5 else []),
             {"tool": "journal", "arguments": {"last": 3}}]
    out["briefs/mcp1.md"] = (f"---\ntitle: Ship through tools\nlabels: [{fl.LABEL}]\nverify:\n  - id: check\n"
                             f"    run: test -f mcp-agent.txt\n---\nShip it.\n\n```mcp-calls\n{json.dumps(calls)}\n"
                             "```\n")
    out["briefs/junk-a.md"] = "---\ntitle: Junk on the forge\nlabels: [nobody]\n---\nNo desk takes this.\n"
    return out


def plant(setup: fl.Setup, rng: random.Random, real: list[str]) -> list[str]:
    said = junk.plant_every_ref_kind(setup.forge, rng, ["junk-a", "junk-b"])
    said += junk.plant_journal_fields(setup.forge, rng, ["junk-f1", "junk-f2", "junk-f3"])
    said += [f"stale lock {junk.stale_lock(setup.forge, 'refs/assay/claims/junk-c')}"]
    if rng.random() < 0.3:  # issue 33 finding 5: a lock on a brief the desks work
        said += [f"stale lock {junk.stale_lock(setup.forge, f'refs/assay/claims/{rng.choice(real)}')}"]
    return said


class Trial:
    def __init__(self, root: Path, seed: int, faults: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.setup = fl.Setup(root, seed)
        self.fleet = fl.PromiseFleet(self.setup)
        self.run = fl.Commands(self.setup)
        self.out = Outcome(seed, root=root)
        self.n_faults = faults if faults is not None else self.rng.randint(4, 7)
        self.started = time.monotonic()
        self.steers = 0
        self.notes = 0
        self.real: list[str] = []
        self.orphaned: list[tuple[int, str, str]] = []  # (pid, command line, the kill after which it ran on)

    def tell(self, line: str) -> None:
        self.out.tell(self.started, line)

    def play(self) -> Outcome:
        files = briefs(self.setup, self.rng)
        self.real = sorted(p.removeprefix("briefs/").removesuffix(".md") for p in files if "junk" not in p)
        self.setup.publish({**fl.desk_files(self.setup), **files})
        for line in plant(self.setup, self.rng, self.real):
            self.tell(f"planted {line}")
        try:
            self.tell(f"{self.fleet.threaded} is a thread of its supervisor's process")
            for d in fl.DESKS:
                self.fleet.start(d)
            for _ in range(self.n_faults):
                time.sleep(self.rng.uniform(0.3, 1.5))  # a random moment: not a synchronisation
                self.fleet.revive()
                self.side_acts()
                self.fault(self.rng.choices(FAULTS, WEIGHTS)[0])
            self.tell("faults over")
            self.settle()
        finally:
            self.fleet.shutdown()
        stranded = self.await_no_effects()
        self.out.breaks = judge(Evidence(self.setup, self.real_and_children(), self.fleet, self.run.ran, stranded,
                                         self.board(), self.orphaned, [("cli1", "cli2")], CHECKS))
        return self.out

    # -- the wings in use ----------------------------------------------------------------------------------

    def side_acts(self) -> None:
        """Steering to a brief a desk works now, sweeps and events, at random."""
        if self.rng.random() < 0.5:
            tips = claim_tips_safe(self.setup.forge)
            held = [b for b, r in tips.items() if b in self.real and r.get("state") == "held"]
            if held:
                b = self.rng.choice(sorted(held))
                self.steers += 1
                text = f"promise-steer {b} {self.steers}"
                done = self.run("steer", b, text)
                self.out.faults["steers"] += 1
                self.tell(f"steer {b} {text!r}: exit {done.returncode}")
        if self.rng.random() < 0.3:  # a person's review note on a review a desk opened
            reviewed = [b for b in self.real if review_chain(self.setup.forge, b)]
            if reviewed:
                b = self.rng.choice(sorted(reviewed))
                self.notes += 1
                threads = [c["thread"] for c in review_chain(self.setup.forge, b)[-1][2].get("comments", [])
                           if isinstance(c, dict) and c.get("thread")]
                reply = ["--reply", str(self.rng.choice(threads))] if threads and self.rng.random() < 0.4 else []
                done = self.run("review", "note", b, f"promise-note {self.notes}", *reply)
                self.out.faults["notes"] += 1
                self.tell(f"review note on {b}{' (a reply)' if reply else ''}: exit {done.returncode}")
        if self.rng.random() < 0.25:
            done = self.run("sweep")
            self.out.faults["sweeps"] += 1
            self.tell(f"assay sweep: exit {done.returncode}")
        if self.rng.random() < 0.3:
            self.land(kill=self.rng.random() < 0.5)
        if self.rng.random() < 0.15:
            done = self.run("event", "schedule", "--json")
            self.out.faults["events"] += 1
            self.tell(f"assay event schedule: exit {done.returncode}")

    def land(self, kill: bool) -> None:
        """`assay land`, as a person or a CI job runs it; with `kill`, SIGKILLed (its group) at a random moment."""
        proc = subprocess.Popen([sys.executable, "-m", "assay", "land", "--forge", str(self.setup.forge)],
                                env=self.setup.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=self.rng.uniform(0.1, 1.5) if kill else 120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
            self.out.faults["kill lander"] += 1
        self.run.ran.append({"argv": ["land"], "code": proc.returncode, "out": out, "err": ""})
        self.out.faults["lands"] += 1
        self.tell(f"assay land: exit {proc.returncode}{' (SIGKILL)' if proc.returncode == -signal.SIGKILL else ''}")

    def target(self) -> str:
        """A desk holding a claim, when one does (mostly); else any desk."""
        holding = sorted(self.fleet.holding(claim_tips_safe(self.setup.forge)))
        pool = holding if holding and self.rng.random() < 0.8 else list(fl.DESKS)
        return self.rng.choice(pool)

    def fault(self, kind: str) -> None:
        if kind in ("agent", "mcp", "client", "step"):
            self.kill_role(kind)
            return
        name = self.target()
        if kind == "group":
            died = self.fleet.kill(name)
            self.out.faults["kill group"] += int(died)
            self.tell(f"SIGKILL group of {name}: {'died' if died else 'had ended'}")
            self.orphans(f"SIGKILL group of {name}")
        elif kind == "desk":
            died = self.fleet.kill_alone(name)
            self.out.faults["kill desk"] += int(died)
            self.tell(f"SIGKILL {name} alone: {'died' if died else 'had ended'}")
            self.orphans(f"SIGKILL {name} alone")
        elif kind == "term":  # a person stops the desk (systemctl stop, a cancelled CI job): it hands its brief back
            said = self.fleet.terminate(name)
            self.out.faults["stops"] += 1
            self.tell(f"SIGTERM {name}: {said}")
            self.orphans(f"SIGTERM {name}")
        else:
            self.pause(name, long=kind == "long-pause")
            return
        time.sleep(self.rng.choice([0.0, self.rng.uniform(0.1, 1.0)]))
        self.fleet.start(name)

    def kill_role(self, role: str) -> None:
        """SIGKILL an agent, an `assay mcp` or a step's command, once one runs (up to 4 s); else a pause."""
        deadline = time.monotonic() + 4
        while not (found := fl.role_pids(self.fleet, role)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not found:
            self.tell(f"no {role} ran: a pause instead")
            self.pause(self.target(), long=False)
            return
        name, pid = self.rng.choice(found)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            self.tell(f"{role} {pid} of {name} ended before its SIGKILL")
            return
        self.out.faults[f"kill {role}"] += 1
        self.tell(f"SIGKILL {role} {pid} of {name}")
        if role in ("mcp", "client"):  # each runs its steps itself: they go with it (an agent's or a step
            self.orphans(f"SIGKILL {role} {pid} of {name}")  # command's death leaves the step to its end)

    def orphans(self, after: str) -> None:
        """Effect processes that run on, ORPHAN_S after a kill, under no live desk: their owner is gone."""
        deadline = time.monotonic() + ORPHAN_S
        while True:
            table = fl.processes()
            desks = {p.pid for p in self.fleet.procs.values() if p.poll() is None}
            left = [(pid, cmd) for pid, cmd in fl.marked(self.setup.mark)
                    if not desks & set(fl.ancestors(pid, table))]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for pid, cmd in left:
            self.orphaned.append((pid, cmd, after))
            self.tell(f"pid {pid} ran on {ORPHAN_S}s after {after}: {cmd}")

    def pause(self, name: str, long: bool) -> None:
        seconds = self.rng.uniform(fl.LEASE_S + 2, fl.LEASE_S * 3) if long else self.rng.uniform(0.2, fl.LEASE_S * 0.6)
        self.fleet.stop(name)
        self.out.faults["long pauses" if long else "pauses"] += 1
        self.tell(f"SIGSTOP {name} for {seconds:.1f}s")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if long and self.rng.random() < 0.2:
                self.run("sweep")
            time.sleep(0.3)
        self.fleet.cont(name)
        self.tell(f"SIGCONT {name}")

    # -- the end ---------------------------------------------------------------------------------------------

    def real_and_children(self) -> list[str]:
        return sorted(b for b in briefs_on_main(self.setup.forge) if not b.startswith("junk"))

    def settled(self) -> bool:
        tips = claim_tips_safe(self.setup.forge)
        return all(b in tips and tips[b].get("state") in TERMINAL for b in self.real_and_children())

    def settle(self) -> None:
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            self.fleet.revive()
            if self.settled():
                self.tell("every brief done, blocked or waiting")
                return
            self.land(kill=False)  # a reviewer lands what is ready: a brief queued behind another goes next
            time.sleep(0.5)
        tips = claim_tips_safe(self.setup.forge)
        self.tell(f"not settled after {SETTLE_S}s: "
                  f"{ {b: tips.get(b, {}).get('state') for b in self.real_and_children()} }")

    def await_no_effects(self) -> list[tuple[int, str]]:
        """Once the desks are gone, an effect's process lives at most its delay; what is left after that is
        stranded (and ended here, after it is recorded)."""
        deadline = time.monotonic() + max(EFFECT_DELAYS) + 3
        while (left := fl.marked(self.setup.mark)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def board(self) -> dict[str, object]:
        out = self.setup.root / "board"
        done = self.run("board", "build", "-o", str(out))
        path = out / "board.json"
        if done.returncode != 0 or not path.exists():
            return {}
        data: dict[str, object] = json.loads(path.read_text())
        return data


def claim_tips_safe(forge: Path) -> dict[str, dict[str, object]]:
    """Claim tips of real briefs: junk claim refs (planted) are left out."""
    return {b: r for b, r in claim_tips(forge).items() if not b.startswith("junk")}
