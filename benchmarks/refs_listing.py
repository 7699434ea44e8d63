"""Listing a forge on disk's refs: protocol v2 `ls-refs` over `git upload-pack` (what `ForgeGit.ls_remote` does)
against `git for-each-ref` on the forge's folder, on a forge of 26,000 refs, packed and loose.

    python benchmarks/refs_listing.py [--briefs 5200] [--rounds 30]

Each forge has `--briefs` briefs with five refs each (claim, journal, review, work branch, worktree), main, a
peeled tag and a symref. Each round times, interleaved: the floor (`git rev-parse` on the forge: one git process),
one brief's five refs, and a full listing of every kind, each both ways. Prints min / median of each, the median
ratio to the floor, and for-each-ref's median over upload-pack's; first it checks that both give the same answers.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.core.git import ForgeGit, git_env  # noqa: E402
from assay.core.records import CLAIMS_PREFIX, JOURNAL_PREFIX, REVIEWS_PREFIX, WIP_PREFIX  # noqa: E402
from assay.core.records import WORK_BRANCH_REF_PREFIX as BRANCHES  # noqa: E402

KINDS = (CLAIMS_PREFIX, JOURNAL_PREFIX, REVIEWS_PREFIX, BRANCHES, WIP_PREFIX)


def git(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=True,
                          env=git_env()).stdout.decode()


def make_forge(path: Path, briefs: int, packed: bool) -> None:
    git("init", "-q", "--bare", str(path))
    env = ["-c", "user.name=b", "-c", "user.email=b@x"]
    tree = git("--git-dir", str(path), "mktree", input=b"").strip()
    commit = git("--git-dir", str(path), *env, "commit-tree", tree, "-m", "c").strip()
    tag = git("--git-dir", str(path), *env, "mktag", input=(
        f"object {commit}\ntype commit\ntag v1\ntagger b <b@x> 0 +0000\n\nv1\n").encode()).strip()
    lines = [f"create refs/heads/main {commit}", f"create refs/tags/v1 {tag}",
             *(f"create {kind}b{i:05d} {commit}" for i in range(briefs) for kind in KINDS)]
    git("--git-dir", str(path), "update-ref", "--stdin", input="\n".join(lines).encode() + b"\n")
    git("--git-dir", str(path), "symbolic-ref", "refs/assay/alias", "refs/heads/main")
    if packed:
        git("--git-dir", str(path), "pack-refs", "--all", "--prune")


def for_each_ref(folder: str, patterns: tuple[str, ...]) -> dict[str, str]:
    """What `ls_remote(*patterns)` answers, from `git for-each-ref` on the forge's folder."""
    prefixes = [p.removesuffix("*") for p in patterns]
    out = subprocess.run(["git", "--git-dir", folder, "for-each-ref", "--format=%(objectname) %(refname)",
                          *prefixes], capture_output=True, check=True, env=git_env()).stdout.decode()
    exact = {p for p in patterns if not p.endswith("*")}
    wild = tuple(p.removesuffix("*") for p in patterns if p.endswith("*"))
    refs = {}
    for line in out.splitlines():
        sha, _, ref = line.partition(" ")
        if ref in exact or (wild and ref.startswith(wild)):
            refs[ref] = sha
    return refs


def timed(fn: object, *args: object) -> float:
    started = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--briefs", type=int, default=5200)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    one = tuple(kind + "b02600" for kind in KINDS)
    full = (*(kind + "*" for kind in KINDS), "refs/heads/main", "refs/assay/sweeper", "refs/assay/retired",
            "refs/assay/alias", "refs/tags/*")
    with tempfile.TemporaryDirectory() as tmp:
        forges = {}
        for packed in (True, False):
            path = Path(tmp) / f"forge-{'packed' if packed else 'loose'}.git"
            make_forge(path, args.briefs, packed)
            forges["packed" if packed else "loose"] = (str(path), ForgeGit(str(path), Path(tmp) / f"cache-{packed}"))
        for name, (folder, forge) in forges.items():
            for patterns in (one, full):
                theirs, ours = forge.ls_remote(*patterns), for_each_ref(folder, patterns)
                assert theirs == ours, (name, set(theirs.items()) ^ set(ours.items()))
            print(f"{name}: {len(forge.ls_remote(*full))} refs; both ways give the same answers "
                  "(a tag unpeeled, a symref as its target's object)")
        times: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, (folder, forge) in forges.items():
                times.setdefault(f"{name} floor (git rev-parse)", []).append(
                    timed(git, "--git-dir", folder, "rev-parse", "--git-dir"))
                for what, patterns in (("one brief", one), ("full listing", full)):
                    times.setdefault(f"{name} {what}: upload-pack", []).append(timed(forge.ls_remote, *patterns))
                    times.setdefault(f"{name} {what}: for-each-ref", []).append(
                        timed(for_each_ref, folder, patterns))
        for name in forges:
            floor = statistics.median(times[f"{name} floor (git rev-parse)"])
            for key, values in times.items():
                if key.startswith(name + " "):
                    med = statistics.median(values)
                    print(f"{key:>40}: min {min(values) * 1e3:6.1f} ms  median {med * 1e3:6.1f} ms  "
                          f"({med / floor:4.2f}x floor)")
            for what in ("one brief", "full listing"):
                ratio = (statistics.median(times[f"{name} {what}: for-each-ref"])
                         / statistics.median(times[f"{name} {what}: upload-pack"]))
                print(f"{name} {what}: for-each-ref / upload-pack = {ratio:.2f}")


if __name__ == "__main__":
    main()
