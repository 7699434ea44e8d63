"""The agent's fast path: a whole `assay step run` process served by its desk, against raw git in the same run.

    python benchmarks/fastpath.py [--rounds 30]

A desk's step server (the one `assay desk run` starts for its agent) serves a claimed brief.
Each round measures, interleaved, on the same forge:
- the floor: one raw `git push` of a new commit (made just before, dated now) to a new ref;
- the floor for two refs: one raw `git push --atomic` of two new commits with leases;
- `assay step run --policy safe -- true` as a whole process (Python start-up included);
- `assay step run --policy unsafe -- true` as a whole process (its intent and result are two pushes);
- with no desk (the command line talking to the forge itself): whole `assay claim`, `assay renew` and
  `assay step run --policy safe -- true` processes, each on a brief of its own; and the claim again once
  released (its brief's text checked before on this machine: not read with PyYAML again).
Each `assay` process is pip's installed `assay` script (else `python -m assay`). Prints min / median / max
of each and the median ratios to the floors (targets: each whole process <= 3x one raw push; the unsafe
step under a desk <= 2.5x the raw two-ref push).
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

from benchmarks import compiled  # noqa: E402
from benchmarks.claims import git, make_forge  # noqa: E402

ZERO = "0" * 40


def new_commit(repo: Path, tag: str) -> str:
    """A commit made now (not at set-up), so the floor pays for no history the run has added."""
    blob = git("hash-object", "-w", "--stdin", cwd=repo, input=f"{tag}-{time.time_ns()}".encode()).strip()
    tree = git("mktree", cwd=repo, input=f"100644 blob {blob}\tx\n".encode()).strip()
    return git("-c", "user.name=b", "-c", "user.email=b@x", "commit-tree", tree, "-m", tag, cwd=repo).strip()


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:6]} failed: {proc.stderr.decode()[-500:]}")
    return elapsed * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    opts = ap.parse_args()
    compiled()
    from assay.core.claims import Claims
    from assay.core.git import ForgeGit
    from assay.desk.stepserver import StepServer

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["ASSAY_CACHE_DIR"] = str(tmp / "cache")
        forge = make_forge(tmp, 1 + 2 * opts.rounds)
        claims = Claims(ForgeGit(str(forge)))
        claims.claim("b0000", "bench")
        server = StepServer(claims.spare, "b0000", "bench", 1, "run1")
        server.start()
        scratch = tmp / "scratch.git"
        git("init", "-q", "--bare", str(scratch))
        # the `assay` command as installed (pip's script beside this Python), as people and agents run it;
        # `python -m assay` (its runpy costs a few ms more) where it is not installed
        script = Path(sys.executable).parent / "assay"
        cli = [str(script)] if script.is_file() else [sys.executable, "-m", "assay"]
        env = {**os.environ, "ASSAY_SOCKET": str(server.path), "ASSAY_BRIEF": "b0000", "ASSAY_DESK": "bench",
               "ASSAY_EPOCH": "1", "ASSAY_RUN": "run1"}
        step = [*cli, "step", "run"]
        bare = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_") or k == "ASSAY_CACHE_DIR"}
        figures: dict[str, list[float]] = {k: [] for k in ("push", "push2", "safe", "unsafe", "claim", "reclaim",
                                                            "renew", "direct")}
        for i in range(opts.rounds):
            sha = new_commit(scratch, f"floor{i}")
            figures["push"].append(timed(["git", "-C", str(scratch), "push", "-q",
                                          f"--force-with-lease=refs/f/{i}:{ZERO}", str(forge), f"{sha}:refs/f/{i}"]))
            a, b = new_commit(scratch, f"a{i}"), new_commit(scratch, f"b{i}")
            figures["push2"].append(timed(["git", "-C", str(scratch), "push", "-q", "--atomic",
                                           f"--force-with-lease=refs/g/{i}/a:{ZERO}",
                                           f"--force-with-lease=refs/g/{i}/b:{ZERO}", str(forge),
                                           f"{a}:refs/g/{i}/a", f"{b}:refs/g/{i}/b"]))
            figures["safe"].append(timed([*step, "--name", f"s{i}", "--policy", "safe", "--", "true"], env))
            figures["unsafe"].append(timed([*step, "--name", f"u{i}", "--policy", "unsafe", "--", "true"], env))
            mine, held = f"b{2 * i + 1:04d}", f"b{2 * i + 2:04d}"
            figures["claim"].append(timed([*cli, "claim", mine, "--desk", "solo", "--forge", str(forge)], bare))
            claims.release(mine, "solo")  # and claimed again: a brief whose text this machine checked before
            figures["reclaim"].append(timed([*cli, "claim", mine, "--desk", "solo", "--forge", str(forge)], bare))
            claims.claim(held, "held")
            figures["renew"].append(timed([*cli, "renew", held, "--desk", "held", "--forge", str(forge)], bare))
            figures["direct"].append(timed([*step, "--name", f"d{i}", "--policy", "safe", "--forge", str(forge),
                                            "--brief", held, "--desk", "held", "--epoch", "1", "--run", "r1", "--",
                                            "true"], bare))
        server.stop()
        claims.git.close()
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"git {git('--version').split()[-1]}, {os.cpu_count()} cores, {opts.rounds} interleaved rounds (ms)")
    for key, label in (("push", "raw push, one ref"), ("push2", "raw atomic push, two refs"),
                       ("safe", "desk's `assay step run --policy safe -- true`"),
                       ("unsafe", "desk's `assay step run --policy unsafe -- true`"),
                       ("claim", "`assay claim B` (no desk)"),
                       ("reclaim", "`assay claim B` again, after a release"), ("renew", "`assay renew B` (no desk)"),
                       ("direct", "`assay step run --policy safe -- true` (no desk)")):
        v = figures[key]
        print(f"{label:50s} min {min(v):6.1f}  median {med[key]:6.1f}  max {max(v):6.1f}")
    for key, label in (("safe", "desk's safe step"), ("claim", "assay claim"), ("reclaim", "assay claim again"),
                       ("renew", "assay renew"),
                       ("direct", "direct step run")):
        print(f"{label + ' process / one raw push:':50s} {med[key] / med['push']:.2f} (target <= 3)")
    label = "desk's unsafe step process / raw two-ref push:"
    print(f"{label:50s} {med['unsafe'] / med['push2']:.2f} "
          "(target <= 2.5; its two pushes are the floor)")


if __name__ == "__main__":
    main()
