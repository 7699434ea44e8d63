"""One host's desks pushing together (`core/pushgroup.py`): forge pushes per brief and per busy desk-minute.

    python benchmarks/hostpush.py [--desks 20] [--windows 0,2] [--sim-windows 0,5,10,15,20]

1. **Measured.** `assay desk run scripted --count N --once --max-briefs 1 --push-window W` on a forge on disk
   with N typical briefs (two safe steps and an unsafe deploy, one verify row), every git call logged: the pushes
   the forge took (ref transactions: landed, and all attempts), per brief, and the run's wall time; beside one
   desk alone working one brief (`--count` not given: no grouping), the floor of pushes a brief.
   The desks start together, so their pushes meet more often than a fleet's whose briefs started at random.
2. **Simulated, from that floor.** N busy desks of one host, each working briefs of 10 and 30 minutes back to
   back, started at random: each brief's pushes (the floor's count) come as the desk makes them (a burst at the
   start and one at the end, half a second apart, the agent's steps at random between), each waiting for its
   round; a round opens with the first request and pushes `W` seconds later, taking every request made
   meanwhile. Printed: forge pushes per busy desk-minute (the host's heartbeat, one push every 5 minutes, counted)
   and the mean wait a push pays, for each `W`.

The floor for times: one raw `git push` to a small bare repository, measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.core import pushgroup  # noqa: E402
from benchmarks import compiled  # noqa: E402
from benchmarks.fleet import BURST_GAP_S, TYPICAL, floor_push, typical_forge  # noqa: E402
from tests.helpers.gitlog import calls  # noqa: E402

HEARTBEAT_S = 300.0  # the presets'
PUSH_S = 0.03  # a push's own time on the forge, in the simulation
LAZY_S = pushgroup.LAZY_S  # the longest an unhurried push waits for one that must go
ROUNDS_KEPT = pushgroup.ROUNDS_KEPT


def measured(tmp: Path, desks: int, window: str | None) -> tuple[int, int, int, float]:
    """(briefs ready, pushes landed, pushes tried, seconds) of one run: `window` None runs one desk alone."""
    forge, log, env = typical_forge(tmp, {f"t{i:02d}.md": TYPICAL.replace("title: Typical", f"title: T{i}")
                                          .replace("t.txt", f"t{i}.txt")
                                          for i in range(desks if window is not None else 1)})
    argv = [sys.executable, "-m", "assay", "desk", "run", "scripted", "--once", "--max-briefs", "1",
            "--forge", str(forge)]
    if window is not None:
        argv += ["--count", str(desks), "--push-window", window]
    started = time.perf_counter()
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if ran.returncode != 0:
        sys.exit(f"the desks failed ({ran.returncode}):\n{ran.stdout[-2000:]}\n{ran.stderr[-2000:]}")
    tried = [(code, args) for code, args in calls(log) if "update-ref --stdin" in args and str(forge) in args]
    return ran.stdout.count("review ready"), sum(1 for code, _ in tried if code == 0), len(tried), seconds


def simulate(desks: int, per_brief: int, brief_s: float, window: float, hours: float, seed: int,
             lazy: float = LAZY_S) -> tuple[float, float]:
    """(forge pushes per busy desk-minute, mean seconds a brief's pushes wait for their rounds in all) of `desks`
    busy desks. A brief's last push (the run's end and the wait) and its release as done once merged (at a random
    time during the next brief) are unhurried: each may wait as `pushgroup` reckons (twice the host's recent gap
    between rounds, at most `lazy` seconds); every other push the window."""
    rng = random.Random(seed)
    burst = max(1, per_brief // 3)
    middle = per_brief - 2 * burst
    horizon = hours * 3600

    def plan(start: float) -> list[tuple[float, float, bool]]:
        """(when, patience, on the desk's path) of each push a desk means to make in one brief that starts at
        `start` (before grouping delays them)."""
        head = [(start + i * BURST_GAP_S, window, True) for i in range(burst)]
        body = sorted((start + rng.uniform(0.1, 0.9) * brief_s, window, True) for _ in range(middle))
        tail = [(start + brief_s - (burst - i) * BURST_GAP_S, window if i < burst - 1 else max(window, lazy), True)
                for i in range(burst)]
        return head + body + tail

    queues = {d: plan(-rng.uniform(0, brief_s)) for d in range(desks)}
    releases: list[float] = []  # merged briefs' releases, made by a desk's next pass: nobody waits on them
    rounds, waited = 0, 0.0
    briefs = 0
    history: list[float] = []  # the host's last rounds (pushgroup.ROUNDS_KEPT)

    def patience(at: float, wait: float) -> float:
        """A push's wait: the window, or an unhurried push's as the push group reckons it."""
        return window if wait <= window else pushgroup.unhurried_wait(history, at, window, lazy)

    while True:
        due = sorted([(q[0][0], q[0][0] + patience(q[0][0], q[0][1]), d) for d, q in queues.items() if q]
                     + [(at, at + patience(at, lazy), -1) for at in releases])
        opened = due[0][0]
        if opened > horizon:
            break
        closes = due[0][1]
        for at, deadline, _ in due[1:]:  # a request made before the round pushes brings its deadline in
            if at > closes:
                break
            closes = min(closes, deadline)
        done = closes + PUSH_S
        takers = [(at, d) for at, _, d in due if at <= closes]
        rounds += 1 if opened >= 0 else 0
        history = [*history, closes][-ROUNDS_KEPT:]
        releases = [at for at in releases if at > closes]
        for at, d in takers:
            if d < 0:
                continue
            _, _, path = queues[d].pop(0)
            delay = done - at  # the desk's later pushes of this brief move by what this one waited
            if at >= 0 and path:
                waited += delay
            queues[d] = [(x + delay, p, o) for x, p, o in queues[d]]
            if not queues[d]:  # the brief is over: the next starts at once; a person merges this one meanwhile
                briefs += at >= 0
                releases.append(done + rng.uniform(0, brief_s))
                queues[d] = plan(done)
    busy_minutes = desks * horizon / 60
    beats = horizon / HEARTBEAT_S  # one a host
    return (rounds + beats) / busy_minutes, waited / max(briefs, 1)


def main() -> None:
    compiled()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--desks", type=int, default=20)
    parser.add_argument("--windows", default="0,2", help="push windows to run for real (seconds)")
    parser.add_argument("--sim-windows", default="0,5,10,15,20")
    parser.add_argument("--hours", type=float, default=8.0, help="simulated hours")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-bench-hostpush-") as name:
        tmp = Path(name)
        floor = floor_push(tmp)
        print(f"floor: one raw git push {floor * 1000:.1f} ms")
        ready, landed, tried, alone_s = measured(tmp / "alone", 1, None)
        per_brief = landed
        print(f"one desk alone: {landed} pushes a brief ({tried} tried), {alone_s:.1f} s "
              f"({alone_s / floor:.0f}x the floor push)")
        for w in args.windows.split(","):
            ready, landed, tried, seconds = measured(tmp / f"w{w}", args.desks, w)
            print(f"{args.desks} desks on one host, window {w} s: {ready} briefs ready, {landed / ready:.2f} pushes a "
                  f"brief ({tried / ready:.2f} tried; {landed / ready / per_brief:.2f}x alone), {seconds:.1f} s "
                  f"({seconds / alone_s:.1f}x one desk's one brief)")
    print(f"\nsimulated: {args.desks} busy desks of one host, {per_brief} pushes a brief and its release once "
          f"merged, the last and the release unhurried (up to {LAZY_S:g} s), one heartbeat push a host every "
          f"{HEARTBEAT_S:.0f} s")
    print("brief min  window s  pushes per busy desk-minute  (alone)  waits a brief s")
    for brief_min in (10, 30):
        alone = (per_brief + 1 + brief_min * 60 / HEARTBEAT_S - 1) / brief_min
        for w in (float(x) for x in args.sim_windows.split(",")):
            rate, wait = simulate(args.desks, per_brief, brief_min * 60, w, args.hours, 7)
            print(f"{brief_min:9d}  {w:8g}  {rate:27.3f}  {alone:7.2f}  {wait:15.1f}")


if __name__ == "__main__":
    main()
