"""Journal throughput and the cost of one unsafe step, against raw git measured in the same run.

    python benchmarks/journal.py [--safe 1000] [--rounds 5] [--samples 40]

Prints:
- one unsafe step (intent + result pushes) as a ratio to one raw two-ref
  `git push --atomic` with leases (the floor: two commits made just before each
  push, dated now; interleaved with the steps; min, median and max; target <= 2.3);
- safe steps/s with group commit, SAFE steps a round over ROUNDS rounds after a
  warm-up round; min, median and max;
- if the `dbos` package is installed (it is optional, and nothing else needs it:
  `pip install dbos`), the same workload on DBOS Transact with a SQLite system
  database in one long-lived process, warmed up by one untimed round, its rounds
  alternating with Assay's; min, median and max and the ratio of medians.
  Without it, a line says the comparison was skipped;
- the wall time of a whole `assay step run --policy unsafe -- true` process outside
  a desk (it reads the journal and pushes itself) as a ratio to the same floor, with
  Python's own start-up for scale; under a desk, see benchmarks/fastpath.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import compiled  # noqa: E402
from benchmarks.claims import fresh_commits, git, make_forge  # noqa: E402

ZERO = "0" * 40


def floor_push(repo: Path, forge: Path, i: int) -> list[str]:
    """Sample i's raw push: two commits made just now (untimed) to two new refs, atomic, with create-only leases."""
    a, b = fresh_commits(repo, 2, f"floor{i}")
    return ["git", "-C", str(repo), "push", "--porcelain", "--atomic", f"--force-with-lease=refs/f/{i}/a:{ZERO}",
            f"--force-with-lease=refs/f/{i}/b:{ZERO}", str(forge), f"{a}:refs/f/{i}/a", f"{b}:refs/f/{i}/b"]


def spread(values: list[float], scale: float = 1000.0, unit: str = "ms") -> str:
    return (f"min {min(values) * scale:7.1f}  median {statistics.median(values) * scale:7.1f}  "
            f"max {max(values) * scale:7.1f} {unit}")


DBOS_SERVER = textwrap.dedent("""
    import sys, time
    from dbos import DBOS
    DBOS(config={"name": "bench", "system_database_url": "sqlite:///" + sys.argv[1], "log_level": "WARNING",
                "application_version": "bench"})
    @DBOS.step()
    def s(i): return i
    @DBOS.workflow()
    def wf(n):
        for i in range(n):
            s(i)
    DBOS.launch()
    print("ready", flush=True)
    for line in sys.stdin:  # one workflow of n steps per line, timed here, without the process start
        t0 = time.perf_counter(); wf(int(line)); print("elapsed", time.perf_counter() - t0, flush=True)
    DBOS.destroy()
""")


class Dbos:
    """DBOS Transact on SQLite in a process of its own, timing one workflow of n steps on request."""

    def __init__(self, tmp: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", DBOS_SERVER, str(tmp / "dbos.sqlite")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer("ready")

    def _answer(self, word: str) -> str:
        assert self.proc.stdout
        for line in self.proc.stdout:
            if line.startswith(word):
                return line.removeprefix(word).strip()
        raise SystemExit(f"DBOS stopped before saying {word!r} (exit {self.proc.wait()})")

    def steps_per_s(self, n: int) -> float:
        assert self.proc.stdin
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return n / float(self._answer("elapsed"))

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--safe", type=int, default=1000, help="safe steps in each round")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds of safe steps (after one warm-up round)")
    ap.add_argument("--samples", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as d:
        tmp = Path(d)
        os.environ["ASSAY_CACHE_DIR"] = str(tmp / "cache")
        forge = make_forge(tmp, 4)
        from assay.core.claims import Claims
        from assay.core.git import ForgeGit
        from assay.core.steps import open_session

        claims = Claims(ForgeGit(str(forge)))
        claims.claim("b0000", "bench")
        session = open_session(claims, "b0000", "bench", 1, run="bench")
        repo = tmp / "floor.git"
        git("init", "-q", "--bare", str(repo))
        floor_times, unsafe = [], []
        for i in range(args.samples):  # interleaved, so drift in the machine hits both alike
            push = floor_push(repo, forge, i)
            t0 = time.perf_counter()
            subprocess.run(push, capture_output=True, check=True)
            floor_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            session.step("deploy", lambda key: None, input=i, policy="unsafe")
            unsafe.append(time.perf_counter() - t0)
        floor = statistics.median(floor_times)
        unsafe_median = statistics.median(unsafe)

        dbos = Dbos(tmp) if importlib.util.find_spec("dbos") is not None else None
        safe_rates: list[float] = []
        dbos_rates: list[float] = []
        for r in range(args.rounds + 1):  # round 0 warms both up and is not counted
            t0 = time.perf_counter()
            for i in range(args.safe):
                session.step("tick", lambda key: None, input=[r, i], policy="safe")
            session.flush()
            rate = args.safe / (time.perf_counter() - t0)
            dbos_rate = dbos.steps_per_s(args.safe) if dbos else None
            if r:
                safe_rates.append(rate)
                if dbos_rate is not None:
                    dbos_rates.append(dbos_rate)
        if dbos:
            dbos.close()

        claims.claim("b0001", "cli")
        env = {**os.environ, "ASSAY_FORGE": str(forge), "ASSAY_BRIEF": "b0001", "ASSAY_DESK": "cli",
               "ASSAY_EPOCH": "1", "PYTHONPATH": str(ROOT)}
        cli, bare_python = [], []
        for i in range(max(5, args.samples // 3)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "assay", "step", "run", "--name", f"s{i}", "--policy", "unsafe",
                            "--", "true"], env={**env, "ASSAY_RUN": f"r{i}"}, check=True, capture_output=True)
            cli.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare_python.append(time.perf_counter() - t0)
        cli_median = statistics.median(cli)

        print(f"git {git('--version').split()[-1]}, {os.cpu_count()} cores")
        print(f"floor, one raw two-ref atomic push:       {spread(floor_times)}")
        print(f"one unsafe step (intent + result pushes): {spread(unsafe)}")
        print(f"unsafe step / floor (medians):            {unsafe_median / floor:.2f} (target <= 2.3)")
        print(f"safe steps/s with group commit:           {spread(safe_rates, 1, 'steps/s')}  "
              f"({args.rounds} rounds of {args.safe} steps after a warm-up round)")
        if dbos_rates:
            print(f"DBOS Transact, SQLite, same rounds:       {spread(dbos_rates, 1, 'steps/s')}  (assay / dbos, "
                  f"medians = {statistics.median(safe_rates) / statistics.median(dbos_rates):.2f})")
        else:
            print("DBOS Transact:                            skipped, the `dbos` package is not installed "
                  "(optional: pip install dbos)")
        print(f"whole `assay step run --policy unsafe -- true` outside a desk (straight to the forge): "
              f"{spread(cli)}  ratio {cli_median / floor:.2f} (under a desk: benchmarks/fastpath.py)")
        print(f"python -c pass alone:                     {spread(bare_python)}")

if __name__ == "__main__":
    main()
