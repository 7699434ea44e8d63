"""Claim throughput and latency on a local forge, against raw `git push` measured in the same run.

    python benchmarks/claims.py [--procs 50] [--briefs 200] [--rounds 3] [--solo 40]

Every floor is a raw create-only `git push --force-with-lease` of a commit made just before
that push (untimed, dated now), so it pays for nothing the run added before. Prints:
- double claims (must be 0): epochs held by more than one desk, read back with plain git;
- uncontended, SOLO interleaved samples of: a raw push (the floor), a claim after a sync (a desk
  that has just read the forge; target <= 1.5x the floor) and a claim reading tip and main itself
  (`assay claim`); min / median / max of each and the ratios of medians;
- the race, ROUNDS rounds, each PROCS processes racing for BRIEFS new briefs, once with plain git
  (every process pushing to every ref) and once with Assay, alternating: claims/s and the latency
  of one attempt, min / median / max over the rounds and attempts, and the ratios of medians.
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
from benchmarks import compiled  # noqa: E402

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


def new_commit(repo: Path, tag: str) -> str:
    """A commit made now, with a new claim.json: the next raw push's payload, made outside its timing."""
    return fresh_commits(repo, 1, tag)[0]


def spread(values: list[float], scale: float = 1000.0, unit: str = "ms") -> str:
    return (f"min {min(values) * scale:7.1f}  median {statistics.median(values) * scale:7.1f}  "
            f"max {max(values) * scale:7.1f} {unit}")


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
        from assay.core.claims import Claims
        from assay.core.git import ForgeGit
        from assay.core.records import CLAIMS_PREFIX
        from assay.errors import Conflict

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
        print("ready", flush=True)
        sys.stdin.readline()
        while True:
            taken = git("ls-remote", forge, "refs/raw/*", "refs/heads/main")
            free = [b for b in briefs if f"refs/raw/{b}" not in taken]
            if not free:
                break
            sha = new_commit(repo, f"{desk}-{free[0]}")  # as a desk makes its claim commit: after reading
            t0 = time.perf_counter()
            if raw_push(repo, Path(forge), sha, f"refs/raw/{free[0]}"):
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


def uncontended(forge: Path, tmp: Path, n: int) -> dict[str, list[float]]:
    """Interleave raw pushes (each of a commit made just before), claims after a sync and cold claims."""
    from assay.core.claims import Claims
    from assay.core.git import ForgeGit

    repo = tmp / "floor.git"
    git("init", "-q", "--bare", str(repo))
    cold, synced = Claims(ForgeGit(str(forge))), Claims(ForgeGit(str(forge)))
    cold.claim("warm-1", "bench", require_brief=False)  # start the cache and its cat-file process
    synced.claim("warm-2", "bench", require_brief=False)
    times: dict[str, list[float]] = {"floor": [], "synced": [], "cold": []}
    for i in range(n):
        sha = new_commit(repo, f"floor{i}")
        t0 = time.perf_counter()
        assert raw_push(repo, forge, sha, f"refs/floor/{i}")
        times["floor"].append(time.perf_counter() - t0)
        synced.read_view()
        t0 = time.perf_counter()
        synced.claim(f"b{2 * i + 1:04d}", "solo")
        times["synced"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cold.claim(f"b{2 * i:04d}", "solo")
        times["cold"].append(time.perf_counter() - t0)
    for port in (cold, synced):
        port.git.close()
    return times


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=50)
    ap.add_argument("--briefs", type=int, default=200, help="briefs raced for in each round")
    ap.add_argument("--rounds", type=int, default=3, help="race rounds, each with plain git and with Assay")
    ap.add_argument("--solo", type=int, default=40, help="interleaved samples for the uncontended ratios")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as d:
        tmp = Path(d)
        os.environ["ASSAY_CACHE_DIR"] = str(tmp / "cache")
        forge = make_forge(tmp, 2 * args.solo + args.rounds * args.briefs)
        solo = uncontended(forge, tmp, args.solo)
        rate: dict[str, list[float]] = {"raw": [], "assay": []}
        attempts: dict[str, list[float]] = {"raw": [], "assay": []}
        raced: list[str] = []
        won_all: list[str] = []
        for r in range(args.rounds):
            first = 2 * args.solo + r * args.briefs
            briefs = [f"b{i:04d}" for i in range(first, first + args.briefs)]
            raced += briefs
            for mode in ("raw", "assay") if r % 2 == 0 else ("assay", "raw"):
                wall, lat, won = race(mode, forge, args.procs, briefs, tmp / f"round{r}")
                rate[mode].append(len(won) / wall)
                attempts[mode] += lat
                if mode == "assay":
                    won_all += won
        doubles = double_claims(forge, raced)
    med = {k: statistics.median(v) for k, v in solo.items()}
    lat_med = {k: statistics.median(v) for k, v in attempts.items()}
    print(f"git {git('--version').split()[-1]}, {os.cpu_count()} cores; race: {args.procs} processes, "
          f"{args.briefs} briefs, {args.rounds} rounds; uncontended: {args.solo} interleaved samples")
    print(f"double claims:                      {doubles} (must be 0); winners {len(won_all)} of {len(raced)}, "
          f"distinct {len(set(won_all))}")
    print(f"floor, one raw create-only push:    {spread(solo['floor'])}")
    print(f"claim after a sync (desk):          {spread(solo['synced'])}  ratio {med['synced'] / med['floor']:.2f} "
          "(target <= 1.5)")
    print(f"claim reading tip+main itself:      {spread(solo['cold'])}  ratio {med['cold'] / med['floor']:.2f} "
          "(`assay claim`)")
    print(f"race, raw create-only pushes/s:     {spread(rate['raw'], 1, '/s')}")
    print(f"race, claims/s:                     {spread(rate['assay'], 1, '/s')}  ratio "
          f"{statistics.median(rate['assay']) / statistics.median(rate['raw']):.2f} of the raw rate")
    print(f"race, one raw push attempt:         {spread(attempts['raw'])}")
    print(f"race, one claim attempt:            {spread(attempts['assay'])}  ratio "
          f"{lat_med['assay'] / lat_med['raw']:.2f}")
    if doubles or len(set(won_all)) != len(won_all) or len(won_all) != len(raced):
        sys.exit("FAILED: a brief was claimed twice or not at all")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[6:], sys.argv[5])
    else:
        main()
