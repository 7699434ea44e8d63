"""Claim throughput and latency on a local forge, against raw `git push` measured in the same run.

    python benchmarks/claims.py [--procs 50] [--briefs 200]

Prints:
- double claims (must be 0): epochs held by more than one desk, read back with plain git;
- claims/s for PROCS processes racing for BRIEFS briefs;
- the median latency of one uncontended claim as a ratio to one uncontended raw create-only
  `git push --force-with-lease` of a fresh commit (the floor; target <= 1.5);
- the median latency of a claim attempt in the race as a ratio to a raw create-only push
  attempt in the same race run with raw git (every process pushing to every ref).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ZERO = "0" * 40


def git(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=True).stdout.decode()


def make_forge(tmp: Path, n_briefs: int) -> Path:
    forge = tmp / "forge.git"
    git("init", "-q", "--bare", "--initial-branch=main", str(forge))
    seed = tmp / "seed"
    git("init", "-q", "--initial-branch=main", str(seed))
    (seed / "briefs").mkdir()
    for i in range(n_briefs):
        (seed / "briefs" / f"b{i:04d}.md").write_text(f"---\ntitle: brief {i}\n---\n")
    git("add", "-A", cwd=seed)
    git("-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "briefs", cwd=seed)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=seed)
    return forge


def fresh_commits(repo: Path, n: int, tag: str) -> list[str]:
    """n distinct commits in `repo`, made beforehand so the raw push measures only the push."""
    out = []
    for i in range(n):
        blob = git("hash-object", "-w", "--stdin", cwd=repo, input=f"{tag}-{i}-{random.random()}".encode()).strip()
        tree = git("mktree", cwd=repo, input=f"100644 blob {blob}\tclaim.json\n".encode()).strip()
        out.append(git("-c", "user.name=b", "-c", "user.email=b@x", "commit-tree", tree, "-m", tag, cwd=repo).strip())
    return out


def raw_push(repo: Path, forge: Path, sha: str, ref: str) -> bool:
    proc = subprocess.run(["git", "push", "--porcelain", f"--force-with-lease={ref}:{ZERO}", str(forge),
                           f"{sha}:{ref}"], cwd=repo, capture_output=True)
    return proc.returncode == 0


# -- workers (separate processes, released together by one line on stdin) --------------------

def worker(mode: str, forge: str, desk: str, briefs: list[str], scratch: str) -> None:
    """A desk loop: read the forge, try the first brief in my order that looks free, repeat."""
    random.Random(desk).shuffle(briefs)
    lat: list[float] = []
    won: list[str] = []
    if mode == "assay":
        from assay.claims import Claims
        from assay.errors import Conflict
        from assay.git import ForgeGit
        from assay.records import CLAIMS_PREFIX

        claims = Claims(ForgeGit(forge))
        print("ready", flush=True)
        sys.stdin.readline()
        while True:
            view = claims.read_view()
            free = [b for b in briefs if CLAIMS_PREFIX + b not in view.tips]
            if not free:
                break
            t0 = time.perf_counter()
            try:
                claims.claim(free[0], desk)
                won.append(free[0])
            except Conflict:
                pass
            lat.append(time.perf_counter() - t0)
    else:
        repo = Path(scratch)
        git("init", "-q", "--bare", str(repo))
        shas = dict(zip(briefs, fresh_commits(repo, len(briefs), desk), strict=True))
        print("ready", flush=True)
        sys.stdin.readline()
        while True:
            taken = git("ls-remote", forge, "refs/raw/*", "refs/heads/main")
            free = [b for b in briefs if f"refs/raw/{b}" not in taken]
            if not free:
                break
            t0 = time.perf_counter()
            if raw_push(repo, Path(forge), shas[free[0]], f"refs/raw/{free[0]}"):
                won.append(free[0])
            lat.append(time.perf_counter() - t0)
    print(json.dumps({"lat": lat, "won": won}), flush=True)


def race(mode: str, forge: Path, procs: int, briefs: list[str], tmp: Path) -> tuple[float, list[float], list[str]]:
    ps = [subprocess.Popen([sys.executable, __file__, "--worker", mode, str(forge), f"desk-{i:02d}",
                            str(tmp / f"scratch-{mode}-{i}"), *briefs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}) for i in range(procs)]
    for p in ps:
        assert p.stdout and p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    for p in ps:
        assert p.stdin
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.stdout.readline()) for p in ps if p.stdout]
    wall = time.perf_counter() - t0
    for p in ps:
        p.wait()
    return wall, [x for r in results for x in r["lat"]], [b for r in results for b in r["won"]]


def double_claims(forge: Path, briefs: list[str]) -> int:
    """Epochs with more than one `held` commit, read from the chains with plain git."""
    doubles = 0
    for b in briefs:
        ref = f"refs/assay/claims/{b}"
        shas = git("--git-dir", str(forge), "rev-list", ref).split()
        epochs = Counter(json.loads(git("--git-dir", str(forge), "show", f"{s}:claim.json"))["epoch"] for s in shas)
        doubles += sum(n - 1 for n in epochs.values() if n > 1)
    return doubles


def uncontended(forge: Path, tmp: Path, n: int) -> tuple[float, float, float]:
    """Alternate raw pushes, cold claims (own read of tip and main) and claims after a sync."""
    from assay.claims import Claims
    from assay.git import ForgeGit

    repo = tmp / "floor.git"
    git("init", "-q", "--bare", str(repo))
    shas = fresh_commits(repo, n, "floor")
    cold, synced = Claims(ForgeGit(str(forge))), Claims(ForgeGit(str(forge)))
    cold.claim("warm-1", "bench", require_brief=False)  # start the cache and its cat-file process
    synced.claim("warm-2", "bench", require_brief=False)
    floor, ours_cold, ours_synced = [], [], []
    for i, sha in enumerate(shas):
        t0 = time.perf_counter()
        assert raw_push(repo, forge, sha, f"refs/floor/{i}")
        floor.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cold.claim(f"b{2 * i:04d}", "solo")
        ours_cold.append(time.perf_counter() - t0)
        synced.read_view()
        t0 = time.perf_counter()
        synced.claim(f"b{2 * i + 1:04d}", "solo")
        ours_synced.append(time.perf_counter() - t0)
    return statistics.median(floor), statistics.median(ours_cold), statistics.median(ours_synced)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=50)
    ap.add_argument("--briefs", type=int, default=200)
    ap.add_argument("--solo", type=int, default=40, help="sequential claims for the uncontended ratio")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as d:
        tmp = Path(d)
        os.environ["ASSAY_CACHE_DIR"] = str(tmp / "cache")
        forge = make_forge(tmp, args.briefs + 2 * args.solo)
        floor, cold, synced = uncontended(forge, tmp, args.solo)
        briefs = [f"b{i:04d}" for i in range(2 * args.solo, 2 * args.solo + args.briefs)]
        raw_wall, raw_lat, raw_won = race("raw", forge, args.procs, briefs, tmp)
        wall, lat, won = race("assay", forge, args.procs, briefs, tmp)
        doubles = double_claims(forge, briefs)
        print(f"git {git('--version').split()[-1]}, {os.cpu_count()} cores, {args.procs} processes, "
              f"{args.briefs} briefs")
        print(f"double claims:                {doubles} (must be 0); winners {len(won)} of {args.briefs}, "
              f"distinct {len(set(won))}")
        print(f"claims/s (race):              {len(won) / wall:.1f}  (raw git pushes: {len(raw_won) / raw_wall:.1f}/s)")
        print(f"floor, one raw create-only push:      {floor * 1000:.1f} ms")
        print(f"median claim after a sync (desk):     {synced * 1000:.1f} ms  ratio {synced / floor:.2f} "
              "(target <= 1.5)")
        print(f"median claim reading tip+main itself: {cold * 1000:.1f} ms  ratio {cold / floor:.2f} (`assay claim`)")
        print(f"median claim attempt in the race:     {statistics.median(lat) * 1000:.1f} ms  ratio "
              f"{statistics.median(lat) / statistics.median(raw_lat):.2f} to a raw create-only push attempt in the "
              f"same race run with plain git ({statistics.median(raw_lat) * 1000:.1f} ms)")
        if doubles or len(set(won)) != len(won) or len(won) != args.briefs:
            sys.exit("FAILED: a brief was claimed twice or not at all")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[6:], sys.argv[5])
    else:
        main()
