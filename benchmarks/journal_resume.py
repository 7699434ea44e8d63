"""Resuming on a 100,000-entry journal against the same on a fresh brief, warm.

    python benchmarks/journal_resume.py [--entries 100000] [--rounds 7]

One forge is built with `git fast-import`: two briefs on main, each held by desk `bench`
at epoch 1; `big` has a journal of ENTRIES commits of one entry each (the worst case:
no group commits), safe steps as `assay step run` writes them, intent then result;
`fresh` has none. After one warm-up run of each command on each brief, each round
times, interleaved on both briefs:

- resume: a run resumed after a crash: `assay step run --policy safe --name done -- true`
          in a new run (`ASSAY_RUN`) for a step completed in the warm-up, so the process
          reads the journal, finds the recorded result and returns it without running it (it
          journals the call, one push);
- step:   `assay step run --policy safe --name sN -- true`, a new step: the process reads
          the journal, runs `true` and appends its intent and result.

Both go straight to the forge (no desk), as a new process each.

Prints min/median/max of each and the big/fresh ratio of the medians (target <= 1.5). Before the rounds,
`--cold` times the first step of a new machine (an empty cache), a resume as above (in a new run each round),
interleaved with its floor, a plain `git fetch` of what it reads (the claim and the journal) into an empty
repository:

- `big` carries a journal snapshot every 1000 entries (`spacing.SNAPSHOT_EVERY`), as Assay writes them: a
  cold resume reads the tip's snapshot and the commits after its tip; its floor is the same two plain fetches
  (`--depth=1`, then `--depth` down to the snapshot's tip). Targets: <= 2 s and <= 1.2x the floor.
- `plain`, the same journal without snapshots (as an older Assay wrote it): the whole chain fetched, decoded and
  indexed; its floor is a plain `git fetch` of the chain.

`--tail N` adds N entries after the last boundary (at most 999: the worst case is 999 commits after a snapshot).
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

from assay.core.journal import index as journalindex  # noqa: E402
from assay.core.journal.keys import Keys  # noqa: E402
from assay.core.journal.spacing import SNAPSHOT_EVERY  # noqa: E402
from assay.core.records import ClaimRecord, JournalEntry  # noqa: E402
from assay.core.steps import input_sha  # noqa: E402
from benchmarks import compiled  # noqa: E402

AT = "2026-01-01T00:00:00Z"
WHO = b"committer Bench <bench@example.invalid> 1767225600 +0000\n"
BRIEFS = ("big", "fresh")
EVERY = SNAPSHOT_EVERY


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


def git(path: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(["git", "--git-dir", str(path), *args], input=input, capture_output=True,
                          check=True).stdout.decode().strip()


def build(path: Path, n: int) -> None:
    """main with both briefs and a held claim on each; big's journal with snapshots, plain's without."""
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    stream = [b"commit refs/heads/main\n", WHO, data(b"briefs")]
    for brief in (*BRIEFS, "plain"):
        stream += [b"M 100644 inline briefs/%s.md\n" % brief.encode(), data(b"---\ntitle: %s\n---\n" % brief.encode())]
    stream.append(b"\n")
    for brief in (*BRIEFS, "plain"):
        record = ClaimRecord(brief=brief, state="held", epoch=1, desk="bench", holder="bench/h/1/abcd", lease_s=600,
                             branch=f"assay/{brief}", at=AT)
        stream += [b"commit refs/assay/claims/%s\n" % brief.encode(), WHO, data(b"claim"),
                   b"M 100644 inline claim.json\n", data(record.encode()), b"\n"]
    every = entries(n)
    for entry in every:
        stream += [b"commit refs/assay/journal/plain\n", WHO, data(b"journal"), b"M 100644 inline entries.jsonl\n",
                   data(entry.encode().encode() + b"\n"), b"\n"]
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw"],
                   input=b"".join(stream), check=True)
    build_with_snapshots(path, every)
    subprocess.run(["git", "--git-dir", str(path), "repack", "-a", "-d", "-q"], check=True)  # as `gc --auto` keeps it


def build_with_snapshots(path: Path, every: list[JournalEntry]) -> None:
    """big's journal, one commit an entry, with a snapshot from each commit that crosses a multiple of EVERY on (made
    as `journalindex.snapshot_tree` makes it): one fast-import per stretch between boundaries."""
    state = {"tip": "", "tree": ""}
    files: list[str] = []
    opened: set[int] = set()
    counts = [0, 0]  # nondeterminism entries, run starts in a row
    segments: list[tuple[int, int]] = []

    def commit(stretch: list[JournalEntry]) -> None:
        stream: list[bytes] = []
        for i, entry in enumerate(stretch):
            stream += [b"commit refs/assay/journal/big\n", WHO, data(b"journal")]
            if i == 0 and state["tip"]:
                stream.append(b"from %s\n" % state["tip"].encode())
            stream += [b"M 100644 inline entries.jsonl\n", data(entry.encode().encode() + b"\n")]
            if state["tree"]:
                stream.append(b"M 040000 %s snapshot\n" % state["tree"].encode())
            stream.append(b"\n")
        subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw", "--force"],
                       input=b"".join(stream), check=True)
        state["tip"] = git(path, "rev-parse", "refs/assay/journal/big")

    def snapshot(upto: int) -> None:
        done = segments[-1][1] if segments else 0
        before = every[done:upto]
        for e in before:
            if e.kind == "intent":
                opened.add(e.seq)
            elif e.kind in ("result", "outcome_unknown") and e.intent is not None:
                opened.discard(e.intent)
            counts[0] += e.kind == "nondeterminism"
            event = journalindex.run_event(e)
            counts[1] = counts[1] + 1 if event == "start" else 0 if event == "end" else counts[1]
        blob = git(path, "hash-object", "-w", "--stdin", input="".join(e.encode() + "\n" for e in before).encode())
        files.append(f"100644 blob {blob}\t{journalindex.segment_name(done + 1, upto)}\n")
        keys = git(path, "hash-object", "-w", "--stdin", input=Keys.of(before).encode())
        files.append(f"100644 blob {keys}\t{journalindex.keys_name(done + 1, upto)}\n")
        segments.append((done + 1, upto))
        summary = journalindex.Summary("big", state["tip"], upto, tuple(segments), tuple(sorted(opened)), *counts)
        head = git(path, "hash-object", "-w", "--stdin", input=summary.encode())
        state["tree"] = git(path, "mktree", input="".join([*files, f"100644 blob {head}\t{journalindex.SUMMARY}\n"])
                            .encode())

    pending: list[JournalEntry] = []
    for entry in every:
        if entry.seq > 1 and entry.seq % EVERY == 0:  # this commit crosses: it carries the entries before it
            commit(pending)
            pending = []
            snapshot(entry.seq - 1)
        pending.append(entry)
    commit(pending)


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "assay", *args], env=env, capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} failed: {proc.stderr.decode()[-400:]}")
    return time.perf_counter() - started


def fetch_floor(forge: Path, into: Path, brief: str, *depths: int) -> float:
    """What a new reader pays at least: a plain `git fetch` of what it reads of `brief`'s journal into an empty bare
    repository: the whole chain, or (with `depths`) one shallow fetch of the tip each, as the reader of a snapshot
    makes them; the first also takes the claim's tip (it reads the claim too)."""
    subprocess.run(["git", "init", "-q", "--bare", str(into)], check=True)
    started = time.perf_counter()
    for n, depth in enumerate(depths or (0,)):
        claim = [f"refs/assay/claims/{brief}:refs/floor-claim"] if n == 0 else []
        subprocess.run(["git", "--git-dir", str(into), "fetch", "-q", "--no-tags", *([f"--depth={depth}"] if depth
                        else []), str(forge), f"refs/assay/journal/{brief}:refs/floor", *claim], check=True)
    return time.perf_counter() - started


def tail_depth(forge: Path, brief: str) -> int:
    """The commits from `brief`'s journal tip down to its newest snapshot's tip, both counted: what a cold reader
    reads of the chain."""
    ref = f"refs/assay/journal/{brief}"
    summary = journalindex.decode_summary(git(forge, "cat-file", "blob", f"{ref}:snapshot/{journalindex.SUMMARY}")
                                          .encode(), brief)
    assert summary is not None, "the tip carries no snapshot"
    return int(git(forge, "rev-list", "--count", f"{summary.tip}..{ref}")) + 1


def spread(values: list[float]) -> str:
    low, mid, high = min(values) * 1000, statistics.median(values) * 1000, max(values) * 1000
    return f"min {low:6.0f}  median {mid:6.0f}  max {high:6.0f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cold", type=int, default=3, help="cold first steps (each with an empty cache), and floors")
    ap.add_argument("--tail", type=int, default=0, help="entries after the last snapshot boundary (0 to 999)")
    opts = ap.parse_args()
    opts.entries += opts.tail
    compiled()
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

        cold: dict[str, list[float]] = {"big": [], "big-floor": [], "plain": [], "plain-floor": []}
        covered = (opts.entries // EVERY) * EVERY - 1  # the newest snapshot's last entry: one entry a commit
        depths: tuple[int, ...] = (1, opts.entries - covered + 1) if covered > 0 else ()
        for brief in ("big", "plain") if opts.cold else ():  # the step each cold round resumes, completed
            timed(step("done"), {**envs["big"], "ASSAY_BRIEF": brief, "ASSAY_CACHE_DIR": str(tmp / f"cache-{brief}")})
        for i in range(opts.cold):  # a new machine's first step: an empty cache, against fetching what it reads
            if depths:  # each round's replay adds an entry: the floor reads down to the snapshot's tip as it is now
                depths = (1, tail_depth(forge, "big"))
            for brief, floor_depths in (("big", depths), ("plain", ())):
                cold_env = {**envs["big"], "ASSAY_BRIEF": brief, "ASSAY_CACHE_DIR": str(tmp / f"cache-{brief}-{i}"),
                            "ASSAY_RUN": f"cold-{i}"}  # a run resumed on a new machine: the result is replayed
                cold[brief].append(timed(step("done"), cold_env))
                cold[f"{brief}-floor"].append(fetch_floor(forge, tmp / f"floor-{brief}-{i}.git", brief,
                                                          *floor_depths))
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
    if cold["big"]:
        tail = opts.entries - covered if covered > 0 else opts.entries
        print(f"cold resume on a new machine (an empty cache), {opts.cold} interleaved rounds:")
        print(f"  with snapshots (the newest covers {max(covered, 0)}, {tail} commits after it): {spread(cold['big'])}")
        print(f"    floor, plain `git fetch --depth` of what it reads (1, then down to the snapshot's tip: "
              f"{depths[1]} in the last round): {spread(cold['big-floor'])}  ratio "
              f"{statistics.median(cold['big']) / statistics.median(cold['big-floor']):.2f} (target <= 1.2; <= 2 s)")
        print(f"  without (the whole chain read, as before snapshots): {spread(cold['plain'])}")
        print(f"    floor, plain `git fetch` of the chain:           {spread(cold['plain-floor'])}  ratio "
              f"{statistics.median(cold['plain']) / statistics.median(cold['plain-floor']):.2f}")
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
