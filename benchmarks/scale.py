"""Fleet scale: warm `assay briefs`, `assay claims` and a desk pass at N briefs against the same at 100.

    python benchmarks/scale.py [--large 10000] [--rounds 5]

Two forges are built with `git fast-import`: 100 and N briefs on main, each with a held claim.
Each round times, interleaved on both forges, a warm run (the cache already has the objects)
of `assay briefs`, `assay claims` and `assay desk run scripted --once` (a pass that finds
nothing to take). Prints min / median / max of each, and each large/small ratio of medians
(target <= 5).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.core.records import ClaimRecord  # noqa: E402
from benchmarks import compiled  # noqa: E402

AT = "2026-01-01T00:00:00Z"
WHO = b"committer Bench <bench@example.invalid> 1767225600 +0000\n"
DESK = (b"name: scripted\ntakes:\n  labels: [demo]\nagent:\n  command: [python, -m, assay.agents.scripted]\n"
        b"lease_s: 600\nheartbeat_s: 60\n")


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def build(path: Path, n: int) -> None:
    """main with n briefs (and a desk), and a held claim on each, in one fast-import run."""
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    main = b"commit refs/heads/main\n" + WHO + data(b"briefs")
    main += b"M 100644 inline desks/scripted.yaml\n" + data(DESK)
    for i in range(n):
        main += b"M 100644 inline briefs/b%05d.md\n" % i + data(b"---\ntitle: brief %d\nlabels: [demo]\n---\n" % i)
    claims = b"".join(
        b"commit refs/assay/claims/b%05d\n" % i + WHO + data(b"claim") + b"M 100644 inline claim.json\n"
        + data(ClaimRecord(brief=f"b{i:05d}", state="held", epoch=1, desk="other", holder="other/h/1/abcd",
                           lease_s=600, branch=f"assay/b{i:05d}", at=AT).encode()) + b"\n"
        for i in range(n))
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw"],
                   input=main + b"\n" + claims, check=True)


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", *args], env=env, capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} failed: {proc.stderr.decode()[-400:]}")
    return time.perf_counter() - started


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-scale-") as tmp_name:
        tmp = Path(tmp_name)
        forges = {"small": tmp / "small.git", "large": tmp / "large.git"}
        build(forges["small"], 100)
        build(forges["large"], opts.large)
        env = {**os.environ, "ASSAY_CACHE_DIR": str(tmp / "cache"), "ASSAY_STATE_DIR": str(tmp / "state"),
               "PYTHONPATH": str(ROOT)}
        commands = {"assay briefs": ["briefs"], "assay claims": ["claims"],
                    "a desk pass": ["desk", "run", "scripted", "--once"]}
        times: dict[tuple[str, str], list[float]] = {}
        for forge in forges.values():  # warm the caches first
            for args in commands.values():
                timed([*args, "--forge", str(forge)], env)
        for _ in range(opts.rounds):
            for name, args in commands.items():
                for size, forge in forges.items():
                    times.setdefault((name, size), []).append(timed([*args, "--forge", str(forge)], env))
    print(f"{os.cpu_count()} cores, warm, {opts.rounds} interleaved rounds: 100 briefs vs {opts.large} "
          "(min / median / max ms)")
    for name in commands:
        small, large = times[(name, "small")], times[(name, "large")]
        ratio = statistics.median(large) / statistics.median(small)
        print(f"{name:14s} 100: {spread(small)}  {opts.large}: {spread(large)}  ratio of medians {ratio:5.2f} "
              "(target <= 5)")


def spread(values: list[float]) -> str:
    return "/".join(f"{v * 1000:.0f}" for v in (min(values), statistics.median(values), max(values)))


if __name__ == "__main__":
    main()
