"""The board for a fleet of N briefs with journals: build time, git round trips, page weight.

    python benchmarks/board.py [--briefs 1000] [--rounds 3]

One forge is built with `git fast-import`: N briefs on main, each with a claim chain (a claim and
three renewals) and a journal of four commits (intents and results of four steps, a verify row).
Each round times, interleaved, the floor (a plain `git fetch` of every ref into an empty repository:
what any reader of the whole fleet pays at least), a cold `assay board build` (empty cache), a warm
one (the cache from the cold build), then `assay audit --all` with that cache. Prints min / median /
max of each, each as a ratio of medians against the floor, the git round trips of a build and the
weight of the pages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
STEPS = ("branch", "review", "agent", "push")


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def journal(brief: str) -> list[bytes]:
    """Four commits of entries.jsonl: an intent and a result per step, and a verify row in the last."""
    commits, seq = [], 0
    for step in STEPS:
        lines = []
        for kind in ("intent", "result"):
            seq += 1
            lines.append(JournalEntry(seq=seq, epoch=1, kind=kind, at=AT, run="r1", step=step, ordinal=0,
                                      input_sha="0" * 64, key=f"{brief}/1/{step}/0", policy="idempotent",
                                      status="completed" if kind == "result" else None,
                                      intent=seq - 1 if kind == "result" else None).encode())
        if step == STEPS[-1]:
            seq += 1
            lines.append(JournalEntry(seq=seq, epoch=1, kind="verify", at=AT, run="r1",
                                      data={"head": "1" * 40, "row": "check", "passed": True, "exit_code": 0})
                         .encode())
        commits.append(("\n".join(lines) + "\n").encode())
    return commits


def build_forge(path: Path, n: int) -> None:
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    out = [b"commit refs/heads/main\n" + WHO + data(b"briefs")]
    out += [b"M 100644 inline briefs/b%05d.md\n" % i + data(b"---\ntitle: brief %d\n---\nwork.\n" % i)
            for i in range(n)]
    out.append(b"\n")
    for i in range(n):
        brief = f"b{i:05d}"
        record = ClaimRecord(brief=brief, state="held", epoch=1, desk=f"desk{i % 7}", holder=f"desk{i % 7}/h/1/ab",
                             lease_s=600, branch=f"assay/{brief}", at=AT).encode()
        for _ in range(4):  # consecutive commits to one ref chain in fast-import
            out.append(f"commit refs/assay/claims/{brief}\n".encode() + WHO + data(b"claim")
                       + b"M 100644 inline claim.json\n" + data(record) + b"\n")
        for text in journal(brief):
            out.append(f"commit refs/assay/journal/{brief}\n".encode() + WHO + data(b"journal")
                       + b"M 100644 inline entries.jsonl\n" + data(text) + b"\n")
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw"],
                   input=b"".join(out), check=True)


def floor(forge: Path, tmp: Path) -> float:
    repo = tmp / "floor.git"
    shutil.rmtree(repo, ignore_errors=True)
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    started = time.perf_counter()
    subprocess.run(["git", "--git-dir", str(repo), "fetch", "-q", "--no-tags", str(forge), "refs/*:refs/*"],
                   check=True)
    return time.perf_counter() - started


def board(forge: Path, tmp: Path, cache: Path) -> tuple[float, dict[str, object]]:
    env = {**os.environ, "ASSAY_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", "board", "build", "-o", str(tmp / "site"), "--forge",
                           str(forge), "--json"], env=env, capture_output=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"assay board build failed: {proc.stderr.decode()[-400:]}")
    return elapsed, json.loads(proc.stdout)


def audit_all(forge: Path, cache: Path) -> tuple[float, int]:
    """`assay audit --all --json` on the same forge (the cache warm from the board): seconds, briefs that passed."""
    env = {**os.environ, "ASSAY_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", "audit", "--all", "--json", "--forge", str(forge)],
                          env=env, capture_output=True)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"assay audit --all failed: {proc.stderr.decode()[-400:]}")
    return elapsed, sum(1 for a in json.loads(proc.stdout) if a["passed"])


def spread(values: list[float]) -> str:
    return "/".join(f"{v * 1000:.0f}" for v in (min(values), statistics.median(values), max(values)))


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser()
    ap.add_argument("--briefs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-board-") as tmp_name:
        tmp = Path(tmp_name)
        forge = tmp / "forge.git"
        build_forge(forge, opts.briefs)
        times: dict[str, list[float]] = {"floor": [], "cold": [], "warm": [], "audit": []}
        passed = 0
        report: dict[str, object] = {}
        warm_report: dict[str, object] = {}
        for r in range(opts.rounds):
            times["floor"].append(floor(forge, tmp))
            cache = tmp / f"cache{r}"
            cold, report = board(forge, tmp, cache)
            times["cold"].append(cold)
            warm, warm_report = board(forge, tmp, cache)
            times["warm"].append(warm)
            audited, passed = audit_all(forge, cache)
            times["audit"].append(audited)
        index = (tmp / "site" / "index.html").stat().st_size
        pages = sorted(p.stat().st_size for p in (tmp / "site" / "briefs").glob("*.html"))
    print(f"{os.cpu_count()} cores, {opts.briefs} briefs (4 claim commits, 4 journal commits each), "
          f"{opts.rounds} interleaved rounds (min / median / max ms)")
    base = statistics.median(times["floor"])
    print(f"floor (git fetch of every ref): {spread(times['floor'])}")
    for name in ("cold", "warm"):
        ratio = statistics.median(times[name]) / base
        print(f"board build, {name} cache: {spread(times[name])}  ratio to floor {ratio:5.2f}")
    audit_ratio = statistics.median(times["audit"]) / base
    print(f"assay audit --all: {spread(times['audit'])}  ratio to floor {audit_ratio:5.2f}  "
          f"({passed} of {opts.briefs} briefs pass every check)")
    print(f"git round trips of a build: cold {report['round_trips']}, warm {warm_report['round_trips']}")
    print(f"page weight: index.html {index} bytes, brief pages median {pages[len(pages) // 2]} bytes, "
          f"whole site {report['bytes']} bytes in {report['files']} files")


if __name__ == "__main__":
    main()
