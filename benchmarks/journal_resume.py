"""Resuming on a 100,000-entry journal against the same on a fresh brief, warm.

    python benchmarks/journal_resume.py [--entries 100000] [--rounds 7]

One forge is built with `git fast-import`: two briefs on main, each held by desk `bench`
at epoch 1; `big` has a journal of ENTRIES commits of one entry each (the worst case:
no group commits), safe steps as `assay step run` writes them, intent then result;
`fresh` has none. After one warm-up run of each command on each brief, each round
times, interleaved on both briefs:

- resume: a run resumed after a crash: `assay step run --policy safe --name done -- true`
          in a new run (`ASSAY_RUN`) for a step completed in the warm-up, so the process
          reads the journal, finds the recorded result and returns it without running it;
- step:   `assay step run --policy safe --name sN -- true`, a new step: the process reads
          the journal, runs `true` and appends its intent and result.

Both go straight to the forge (no desk), as a new process each.

Prints min/median/max of each and the big/fresh ratio of the medians (target <= 1.5). Before the rounds,
`--cold` times the first step of a new machine (an empty cache: the whole chain fetched, decoded and
indexed), interleaved with its floor, a raw `git fetch` of the chain into an empty repository.
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

from assay.core.records import ClaimRecord, JournalEntry  # noqa: E402
from assay.core.steps import input_sha  # noqa: E402

AT = "2026-01-01T00:00:00Z"
WHO = b"committer Bench <bench@example.invalid> 1767225600 +0000\n"
BRIEFS = ("big", "fresh")


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def entries(n: int) -> list[JournalEntry]:
    """n valid entries: a claim, then safe `assay step run` calls (intent, result), fifty runs' worth at a time."""
    out = [JournalEntry(seq=1, epoch=1, kind="claim", at=AT, run="desk:bench", data={"action": "claim"})]
    while len(out) < n:
        seq = len(out) + 1
        name, run = f"step{seq}", f"run{seq // 100}"
        sha = input_sha({"argv": ["make", name]})
        ids = {"epoch": 1, "at": AT, "run": run, "step": name, "ordinal": 0, "input_sha": sha,
               "key": f"big/1/{name}/0", "policy": "safe"}
        out.append(JournalEntry(seq=seq, kind="intent", **ids))  # type: ignore[arg-type]
        if len(out) < n:
            out.append(JournalEntry(seq=seq + 1, kind="result", status="completed", intent=seq,
                                    data={"output": {"exit_code": 0, "duration_ms": 12, "tail": "ok\n"}},
                                    **ids))  # type: ignore[arg-type]
    return out


def build(path: Path, n: int) -> None:
    """main with both briefs, a held claim on each, and big's journal, in one fast-import run."""
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    stream = [b"commit refs/heads/main\n", WHO, data(b"briefs")]
    for brief in BRIEFS:
        stream += [b"M 100644 inline briefs/%s.md\n" % brief.encode(), data(b"---\ntitle: %s\n---\n" % brief.encode())]
    stream.append(b"\n")
    for brief in BRIEFS:
        record = ClaimRecord(brief=brief, state="held", epoch=1, desk="bench", holder="bench/h/1/abcd", lease_s=600,
                             branch=f"assay/{brief}", at=AT)
        stream += [b"commit refs/assay/claims/%s\n" % brief.encode(), WHO, data(b"claim"),
                   b"M 100644 inline claim.json\n", data(record.encode()), b"\n"]
    for entry in entries(n):
        stream += [b"commit refs/assay/journal/big\n", WHO, data(b"journal"), b"M 100644 inline entries.jsonl\n",
                   data(entry.encode().encode() + b"\n"), b"\n"]
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw"],
                   input=b"".join(stream), check=True)


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", *args], env=env, capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} failed: {proc.stderr.decode()[-400:]}")
    return time.perf_counter() - started


def fetch_floor(forge: Path, into: Path) -> float:
    """What any new reader pays at least: `git fetch` of big's journal chain into an empty bare repository."""
    subprocess.run(["git", "init", "-q", "--bare", str(into)], check=True)
    started = time.perf_counter()
    subprocess.run(["git", "--git-dir", str(into), "fetch", "-q", "--no-tags", str(forge),
                    "refs/assay/journal/big:refs/floor"], check=True)
    return time.perf_counter() - started


def spread(values: list[float]) -> str:
    low, mid, high = min(values) * 1000, statistics.median(values) * 1000, max(values) * 1000
    return f"min {low:6.0f}  median {mid:6.0f}  max {high:6.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cold", type=int, default=3, help="cold first steps (each with an empty cache), and floors")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-resume-") as tmp_name:
        tmp = Path(tmp_name)
        forge = tmp / "forge.git"
        started = time.perf_counter()
        build(forge, opts.entries)
        built = time.perf_counter() - started
        env = {**os.environ, "ASSAY_CACHE_DIR": str(tmp / "cache"), "ASSAY_STATE_DIR": str(tmp / "state"),
               "ASSAY_FORGE": str(forge), "ASSAY_DESK": "bench", "ASSAY_EPOCH": "1", "PYTHONPATH": str(ROOT)}
        envs = {brief: {**env, "ASSAY_BRIEF": brief, "ASSAY_RUN": f"bench-{brief}"} for brief in BRIEFS}

        def step(name: str) -> list[str]:
            return ["step", "run", "--policy", "safe", "--name", name, "--", "true"]

        colds: list[float] = []
        floors: list[float] = []
        for i in range(opts.cold):  # a new machine's first step: an empty cache, against fetching the chain alone
            cold_env = {**envs["big"], "ASSAY_CACHE_DIR": str(tmp / f"cache-cold-{i}")}
            colds.append(timed(step("done"), cold_env))
            floors.append(fetch_floor(forge, tmp / f"floor-{i}.git"))
        first = {brief: timed(step("done"), envs[brief]) for brief in BRIEFS}  # a cold read fills the caches
        for brief in BRIEFS:
            timed(step("s0"), envs[brief])
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(1, opts.rounds + 1):
            for brief in BRIEFS:
                again = {**envs[brief], "ASSAY_RUN": f"resume-{i}"}
                times.setdefault(("resume", brief), []).append(timed(step("done"), again))
                times.setdefault(("step", brief), []).append(timed(step(f"s{i}"), envs[brief]))
    print(f"{os.cpu_count()} cores; journal of {opts.entries} entries, one per commit (built in {built:.0f} s); "
          f"first read {first['big'] * 1000:.0f} ms (fresh: {first['fresh'] * 1000:.0f} ms)")
    if colds:
        print(f"cold first step on a new machine: {spread(colds)}; `git fetch` of the chain alone: {spread(floors)}; "
              f"ratio {statistics.median(colds) / statistics.median(floors):.2f}")
    print(f"warm, {opts.rounds} interleaved rounds")
    for name, what in (("resume", "resume: `assay step run --policy safe --name done -- true`, recorded"),
                       ("step", "new step: `assay step run --policy safe --name sN -- true`")):
        fresh, big = times[(name, "fresh")], times[(name, "big")]
        print(f"{what}")
        print(f"  fresh brief: {spread(fresh)}")
        print(f"  big brief:   {spread(big)}")
        print(f"  ratio big/fresh (medians) {statistics.median(big) / statistics.median(fresh):5.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
