"""Journal throughput and the cost of one unsafe step, against raw git measured in the same run.

    python benchmarks/journal.py [--safe 2000] [--samples 30]

Prints:
- safe steps/s with group commit (and, if the `dbos` package is installed, the same
  N-step workload on DBOS Transact with a SQLite system database, in the same run);
- one unsafe step (intent push + result push) as a ratio to one raw two-ref
  `git push --atomic` with leases (the floor: two commits made just before each
  push, dated now; interleaved with the steps; min, median and max; target <= 2.3);
- the wall time of a whole `assay step run --policy unsafe -- true` process outside
  a desk (it reads the journal and pushes itself) as a ratio to the same floor, with
  Python's own start-up for scale; under a desk, see benchmarks/fastpath.py.
"""

from __future__ import annotations

import argparse
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

from benchmarks.claims import fresh_commits, git, make_forge  # noqa: E402

ZERO = "0" * 40


def floor_push(repo: Path, forge: Path, i: int) -> list[str]:
    """Sample i's raw push: two commits made just now (untimed) to two new refs, atomic, with create-only leases."""
    a, b = fresh_commits(repo, 2, f"floor{i}")
    return ["git", "-C", str(repo), "push", "--porcelain", "--atomic", f"--force-with-lease=refs/f/{i}/a:{ZERO}",
            f"--force-with-lease=refs/f/{i}/b:{ZERO}", str(forge), f"{a}:refs/f/{i}/a", f"{b}:refs/f/{i}/b"]


def spread(values: list[float]) -> str:
    return (f"min {min(values) * 1000:6.1f}  median {statistics.median(values) * 1000:6.1f}  "
            f"max {max(values) * 1000:6.1f} ms")


def dbos_steps_per_s(n: int, tmp: Path) -> float | None:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return None
    script = textwrap.dedent(f"""
        import logging, time
        from dbos import DBOS
        DBOS(config={{"name": "bench", "system_database_url": "sqlite:///{tmp}/dbos.sqlite",
                     "log_level": "WARNING"}})
        @DBOS.step()
        def s(i): return i
        @DBOS.workflow()
        def wf(n):
            for i in range(n):
                s(i)
        DBOS.launch()
        t0 = time.perf_counter(); wf({n}); print({n} / (time.perf_counter() - t0))
        DBOS.destroy()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--safe", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as d:
        tmp = Path(d)
        os.environ["ASSAY_CACHE_DIR"] = str(tmp / "cache")
        forge = make_forge(tmp, 4)
        from assay.claims import Claims
        from assay.git import ForgeGit
        from assay.steps import open_session

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

        t0 = time.perf_counter()
        for i in range(args.safe):
            session.step("tick", lambda key: None, input=i, policy="safe")
        session.flush()
        safe_rate = args.safe / (time.perf_counter() - t0)

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
        dbos_rate = dbos_steps_per_s(args.safe, tmp)

        print(f"git {git('--version').split()[-1]}, {os.cpu_count()} cores")
        print(f"floor, one raw two-ref atomic push:       {spread(floor_times)}")
        print(f"one unsafe step (intent + result pushes): {spread(unsafe)}")
        print(f"unsafe step / floor (medians):            {unsafe_median / floor:.2f} (target <= 2.3)")
        print(f"safe steps/s with group commit:           {safe_rate:.0f} ({args.safe} steps)")
        if dbos_rate is not None:
            print(f"DBOS Transact, SQLite, same workload:     {dbos_rate:.0f} steps/s  (assay / dbos = "
                  f"{safe_rate / dbos_rate:.2f})")
        else:
            print("DBOS Transact:                            not installed (pip install dbos to compare)")
        print(f"whole `assay step run --policy unsafe -- true` outside a desk (straight to the forge): "
              f"{cli_median * 1000:.1f} ms  ratio {cli_median / floor:.2f} (under a desk: benchmarks/fastpath.py); "
              "python -c pass alone: "
              f"{statistics.median(bare_python) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
