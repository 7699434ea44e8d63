"""One `assay sweep` at 100, 1,000 and 10,000 briefs: its time against a floor, its git round trips, and its
growth from the smallest size to the largest (target <= 5 from 100 to 10,000 briefs).

    python benchmarks/sweep.py [--sizes 100,1000,10000] [--rounds 5]

Each forge is built with `git fast-import`: N briefs on main, each with a held claim (lease 600 s,
so nothing expires) and a journal of two entries, each journal its own commit (its own run id).
Each round times, interleaved over all sizes:

- the floor: `assay claims --json`, the least read of every claim (one ls-remote, one fetch, one
  cat-file batch), in the same process setup;
- a steady sweep: observations already recorded and no journal moved, so none is decoded;
- a full sweep: the observations deleted first, so every journal is decoded again.

Prints min/median/max of each, the sweeps as ratios to the floor, and the ls-remote, fetch and push
invocations each sweep made (from `--json`): they must not grow with the number of briefs. Last, each one's
growth (the ratio of medians, largest size to smallest) beside the floor's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.core.records import ClaimRecord, JournalEntry  # noqa: E402
from benchmarks import compiled  # noqa: E402

AT = "2026-01-01T00:00:00Z"
WHO = b"committer Bench <bench@example.invalid> 1767225600 +0000\n"


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def build(path: Path, n: int) -> None:
    """main with n briefs, a held claim and a two-entry journal for each, in one fast-import run."""
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    out = b"commit refs/heads/main\n" + WHO + data(b"briefs")
    for i in range(n):
        out += b"M 100644 inline briefs/b%05d.md\n" % i + data(b"---\ntitle: brief %d\n---\n" % i)
    for i in range(n):
        brief = f"b{i:05d}"
        claim = ClaimRecord(brief=brief, state="held", epoch=1, desk="d", holder="d/far/1/abcd", lease_s=600,
                            branch=f"assay/{brief}", at=AT)
        out += (b"\ncommit refs/assay/claims/%s\n" % brief.encode() + WHO + data(b"claim")
                + b"M 100644 inline claim.json\n" + data(claim.encode()))
        run = f"r{i:05d}"  # each journal its own run: its own blob, tree and commit, as on a real forge
        lines = [JournalEntry(seq=1, epoch=1, kind="note", at=AT, run=run, data={"run": "start"}),
                 JournalEntry(seq=2, epoch=1, kind="intent", at=AT, run=run, step="build", ordinal=0,
                              input_sha="0" * 64, policy="safe")]
        jsonl = "".join(e.encode() + "\n" for e in lines).encode()
        out += (b"\ncommit refs/assay/journal/%s\n" % brief.encode() + WHO + data(b"journal")
                + b"M 100644 inline entries.jsonl\n" + data(jsonl))
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw"],
                   input=out + b"\n", check=True)


def run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} failed: {proc.stderr[-400:]}")
    return took, proc.stdout


def spread(values: list[float]) -> str:
    return f"{min(values) * 1000:6.0f} / {statistics.median(values) * 1000:6.0f} / {max(values) * 1000:6.0f} ms"


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--rounds", type=int, default=5)
    opts = ap.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="assay-sweep-") as tmp_name:
        tmp = Path(tmp_name)
        forges = {n: tmp / f"f{n}.git" for n in sizes}
        for n, path in forges.items():
            build(path, n)
        env = {**os.environ, "ASSAY_CACHE_DIR": str(tmp / "cache"), "PYTHONPATH": str(ROOT)}
        times: dict[tuple[str, int], list[float]] = {}
        trips: dict[tuple[str, int], set[str]] = {}
        for path in forges.values():  # warm the caches: every object fetched once
            run(["claims", "--json", "--forge", str(path)], env)
            run(["sweep", "--json", "--forge", str(path)], env)
        for _ in range(opts.rounds):
            for n, path in forges.items():
                times.setdefault(("floor", n), []).append(run(["claims", "--json", "--forge", str(path)], env)[0])
                for kind in ("steady", "full"):
                    if kind == "full":
                        subprocess.run(["git", "--git-dir", str(path), "update-ref", "-d", "refs/assay/sweeper"],
                                       check=True)
                    took, out = run(["sweep", "--json", "--forge", str(path)], env)
                    times.setdefault((kind, n), []).append(took)
                    report = json.loads(out)
                    assert report["briefs"] == n and report["findings"] == [], report["findings"][:3]
                    trips.setdefault((kind, n), set()).add(json.dumps(report["round_trips"], sort_keys=True))
    print(f"{os.cpu_count()} cores, warm cache, min / median / max of {opts.rounds} interleaved rounds")
    print("floor: `assay claims --json` at the same size (one ls-remote, one fetch, one cat-file batch)")
    for n in sizes:
        floor = statistics.median(times[("floor", n)])
        print(f"{n:5d} briefs  floor {spread(times[('floor', n)])}")
        for kind in ("steady", "full"):
            ratio = statistics.median(times[(kind, n)]) / floor
            print(f"{'':13s}{kind:6s} sweep {spread(times[(kind, n)])}  ratio {ratio:5.2f}  "
                  f"git round trips {' | '.join(sorted(trips[(kind, n)]))}")
    small, large = sizes[0], sizes[-1]
    grown = {kind: statistics.median(times[(kind, large)]) / statistics.median(times[(kind, small)])
             for kind in ("floor", "steady", "full")}
    print(f"growth {small} -> {large} briefs (ratio of medians): floor {grown['floor']:.2f}, steady sweep "
          f"{grown['steady']:.2f}, full sweep {grown['full']:.2f} (target <= 5)")


if __name__ == "__main__":
    main()
