"""A forge that stays fast as work finishes: a raw push against 10,000 finished briefs, before and after
`assay retire`, against a raw push to an empty forge in the same run; and `assay retire` itself, on disk and over
HTTP, at 100 and 10,000 briefs, each beside one raw push to the same forge.

    python benchmarks/retire.py [--briefs 10000] [--small 100] [--rounds 15] [--no-http]

Two forges on disk: an empty one (main only) and one with N finished briefs, each with a `done` claim,
a journal and a work branch (3N refs, written as loose refs by `git fast-import`, as pushes leave them).
Phase 1 times raw pushes, interleaved, to both; then `assay retire` folds the finished briefs (and packs
the forge's refs); phase 2 times raw pushes to both again. Each raw push sends a new commit made just
before, dated now. Prints min / median / max and the median ratios (target after retiring: <= 1.5).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import compiled  # noqa: E402
from benchmarks.fleet import Backend  # noqa: E402  (`git http-backend` on loopback)

ZERO = "0" * 40
WHO = b"committer Bench <bench@example.invalid> 1767225600 +0000\n"
AT = "2026-01-01T00:00:00Z"


def git(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=True).stdout.decode()


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def build(path: Path, n: int) -> None:
    """main with n briefs; for each a done claim, a one-commit journal and a work branch."""
    git("init", "-q", "--bare", "--initial-branch=main", str(path))
    stream = b"commit refs/heads/main\n" + WHO + data(b"briefs")
    for i in range(n):
        stream += b"M 100644 inline briefs/b%05d.md\n" % i + data(b"---\ntitle: brief %d\n---\n" % i)
    for i in range(n):
        brief = f"b{i:05d}"
        claim = (f'{{"at": "{AT}", "branch": "assay/{brief}", "brief": "{brief}", "desk": "d", "epoch": 1, '
                 f'"holder": "d/h/1/abcd", "lease_s": 600, "reason": "", "state": "done", "v": 1, "wait": null}}\n')
        entry = (f'{{"at": "{AT}", "data": {{"action": "release", "outcome": "done", "reason": ""}}, "epoch": 1, '
                 f'"kind": "claim", "run": "desk:d", "seq": 1, "v": 1}}\n')
        stream += (b"commit refs/assay/claims/%s\n" % brief.encode() + WHO + data(b"done")
                   + b"M 100644 inline claim.json\n" + data(claim.encode()))
        stream += (b"commit refs/assay/journal/%s\n" % brief.encode() + WHO + data(b"journal")
                   + b"M 100644 inline entries.jsonl\n" + data(entry.encode()))
        stream += (b"commit refs/heads/assay/%s\n" % brief.encode() + WHO + data(b"work")
                   + b"from refs/heads/main\n" + b"M 100644 inline work/%s.txt\n" % brief.encode() + data(b"done\n"))
    git("--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw", input=stream)


def new_commit(repo: Path, tag: str) -> str:
    """A commit made now, so the push pays for no history the run has added."""
    blob = git("hash-object", "-w", "--stdin", cwd=repo, input=f"{tag}-{time.time_ns()}".encode()).strip()
    tree = git("mktree", cwd=repo, input=f"100644 blob {blob}\tx\n".encode()).strip()
    return git("-c", "user.name=b", "-c", "user.email=b@x", "commit-tree", tree, "-m", tag, cwd=repo).strip()


def raw_push(scratch: Path, forge: Path | str, ref: str) -> float:
    sha = new_commit(scratch, ref)
    started = time.perf_counter()
    subprocess.run(["git", "-C", str(scratch), "push", "-q", f"--force-with-lease={ref}:{ZERO}", str(forge),
                    f"{sha}:{ref}"], check=True, capture_output=True)
    return (time.perf_counter() - started) * 1000


def retire_run(forge: str, cache: Path) -> float:
    """Seconds one `assay retire` of every done brief takes, in a process of its own, its cache empty."""
    env = {**os.environ, "ASSAY_FORGE": forge, "ASSAY_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", "retire"], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"assay retire on {forge} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return time.perf_counter() - started


def growth(tmp: Path, scratch: Path, sizes: list[int], http: bool) -> None:
    """`assay retire` at each size, on disk and over HTTP, each beside a raw push to the same forge just before."""
    served = tmp / "served"
    served.mkdir()
    backend = Backend(served)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    times: dict[tuple[str, int], float] = {}
    for n in sizes:
        original = tmp / f"sized{n}.git"
        build(original, n)
        shutil.copytree(original, served / f"f{n}.git", symlinks=True)
        git("--git-dir", str(served / f"f{n}.git"), "config", "http.receivepack", "true")
        where = {"disk": str(original)}
        if http:
            where["http"] = f"http://127.0.0.1:{backend.server_address[1]}/f{n}.git"
        for kind, forge in where.items():
            subprocess.run(["sync"], check=False)  # the build's writes are on disk, not competing with the run
            floor = raw_push(scratch, forge, f"refs/bench/floor{n}") / 1000
            took = retire_run(forge, tmp / f"cache-{kind}-{n}")
            times[(kind, n)] = took
            print(f"`assay retire` of {n:5d} briefs ({kind:4s}): {took:7.2f} s; floor (one raw push) "
                  f"{floor * 1000:6.0f} ms; ratio {took / floor:7.1f}", flush=True)
    backend.shutdown()
    small, large = sizes[0], sizes[-1]
    for kind in ("disk", "http") if http else ("disk",):
        grew = times[(kind, large)] / times[(kind, small)]
        print(f"retire {kind}: {small} -> {large} briefs grows {grew:.1f}x for {large / small:.0f}x the briefs "
              f"(exponent {math.log(grew) / math.log(large / small):.2f}; linear: 1.00)")


def settle(forge: Path) -> float:
    """Seconds until the forge is quiet: the `git gc --auto` its receive-pack started after the last push (detached,
    holding `gc.pid`) has ended (at most 300 s), then its writes on disk, as the build's before phase 1."""
    started = time.perf_counter()
    while (forge / "gc.pid").exists() and time.perf_counter() - started < 300:
        time.sleep(0.1)  # a detached process of git's own: nothing to wait on but its lock file
    subprocess.run(["sync"], check=False)
    return time.perf_counter() - started


def phase(scratch: Path, empty: Path, full: Path, rounds: int, tag: str) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for i in range(rounds):
        a.append(raw_push(scratch, empty, f"refs/bench/{tag}/{i}"))
        b.append(raw_push(scratch, full, f"refs/bench/{tag}/{i}"))
    return a, b


def show(label: str, v: list[float]) -> None:
    print(f"  {label:40s} min {min(v):7.1f}  median {statistics.median(v):7.1f}  max {max(v):7.1f}")


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser()
    ap.add_argument("--briefs", type=int, default=10000)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-http", action="store_true", help="retire on disk only")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        empty, full, scratch = tmp / "empty.git", tmp / "full.git", tmp / "scratch.git"
        git("init", "-q", "--bare", str(scratch))
        growth(tmp, scratch, [opts.small, opts.briefs], not opts.no_http)
        build(empty, 0)
        build(full, opts.briefs)
        subprocess.run(["sync"], check=False)
        loose = sum(1 for p in (full / "refs").rglob("*") if p.is_file())
        print(f"git {git('--version').split()[-1]}, {os.cpu_count()} cores, {opts.briefs} finished briefs "
              f"({loose} loose refs), {opts.rounds} interleaved rounds (ms)")
        e1, f1 = phase(scratch, empty, full, opts.rounds, "before")
        print("before retiring:")
        show("raw push, empty forge", e1)
        show(f"raw push, {opts.briefs} finished briefs", f1)
        retire_s = retire_run(str(full), tmp / "cache")
        waited = settle(full)
        left = git("ls-remote", str(full)).count("\n")
        print(f"`assay retire` of {opts.briefs} briefs: {retire_s:.1f} s; the forge now advertises {left} refs "
              f"(quiet {waited:.1f} s after it)")
        e2, f2 = phase(scratch, empty, full, opts.rounds, "after")
        print("after retiring:")
        show("raw push, empty forge", e2)
        show(f"raw push, {opts.briefs} retired briefs", f2)
        before = statistics.median(f1) / statistics.median(e1)
        after = statistics.median(f2) / statistics.median(e2)
        print(f"raw push with {opts.briefs} finished briefs / empty forge: before retiring {before:.2f}, "
              f"after {after:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
