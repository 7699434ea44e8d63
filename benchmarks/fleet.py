"""A fleet of simulated desks on one forge: what it asks of the forge, and how large a fleet one repository carries.

    python benchmarks/fleet.py [--brief-min 30] [--desks 100,300,1000,2000,4000] [--transports disk,http]

1. **Profile, from a real desk.** One `assay desk run --once` (the scripted agent: two safe steps and an unsafe
   deploy, a typical brief) runs against a forge on disk with a logging `git` first on PATH: the pushes and ref
   advertisements (`ls-remote`) it makes from its claim to its review waiting, and in its next pass, once a
   person merged the review, settling the brief as done. The heartbeat is the shipped
   presets' (`desks/claude.yaml`), an idle desk's longest wait `loop.IDLE_MAX_S` (one ref advertisement a pass).
   From these, per desk and minute, for briefs of BRIEF_MIN minutes: pushes and ref advertisements of a busy
   desk, and of an idle one.
2. **The fleet, simulated.** (With `--per-host K --push-window W`, K desks a host push through its push group:
   their pushes in rounds, a round one atomic push W seconds after it opens; latency counted from then.)
   For each fleet size N: a forge (a bare repository on disk, or the same behind
   `git http-backend` on loopback) holding the refs of N briefs in flight (claim, journal, work branch, review:
   4 N refs, packed as the sweep leaves them). N desks, each at a random point of its brief's cycle, push what a
   desk pushes when it does: the claim, the desk's own steps in a burst, the agent's steps and a heartbeat every
   HEARTBEAT_S while a fake agent sleeps, the closing steps in a burst; each push atomic, with a lease on each
   ref (the journal and the claim renewed with it, or the claim alone), made as Assay makes it: on disk new
   commits written and pushed by `ForgeGit.push` (its own ref transaction), over HTTP prepared commits pushed by
   `ForgeGit.push` (one POST to the forge's receive-pack); each desk's pushes
   one after another; the ref advertisements of busy and idle desks as a desk's look reads the forge. A push's
   latency is from when its desk meant to push to when the forge answered, so a forge (or a machine) that falls
   behind shows.
3. **Prints** per transport and N: pushes and ref advertisements demanded per second, pushes accepted per second,
   p50/p95 push latency, and the largest N whose p95 stays under one second; then, from a fit of the CPU time a
   push cost against the refs on the forge, how many busy desks would fill 2, 8 and 32 cores.

The floor: one raw `git push` of a new commit to a small bare repository (median of 9), measured in the same run.

With `--all`, the other figures of a fleet follow in the same run, each benchmark beside its own floor: one host's
pushes together (`hostpush.py`), GitHub requests a brief and the briefs a token carries (`github_calls.py`),
sweep growth (`sweep.py`) and desk-pass growth (`scale.py`) from 100 to 10,000 briefs, retiring 10,000 briefs on
disk and over HTTP (`retire.py`) and a cold resume on a 100,000-entry journal (`journal_resume.py`).
"""

from __future__ import annotations

import argparse
import http.server
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.core.deskspec import parse_desk  # noqa: E402
from assay.core.git import ForgeGit, RefUpdate, Signature, TreeEntry, local_forge_path  # noqa: E402
from assay.core.scan import PREFIXES, QUEUE, SINGLES  # noqa: E402
from assay.desk import loop  # noqa: E402
from benchmarks import compiled  # noqa: E402
from tests.fakegithub.gitside import http_backend, request_body  # noqa: E402
from tests.helpers.gitlog import calls, is_push, lists_refs, logging_git  # noqa: E402

# `--all`, in this order
ALL = ("hostpush.py", "github_calls.py", "sweep.py", "scale.py", "retire.py", "journal_resume.py")
BURST_GAP_S = 0.5  # between a desk's own steps' pushes (measured: a desk-side step takes about this long)
WHO = b"committer Fleet <fleet@example.invalid> 1700000000 +0000\n"


def git(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=True).stdout.decode()


# -- 1. the profile of one desk ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    pushes_per_brief: int  # from the claim to the review waiting, and the brief settled as done once merged
    ads_per_brief: int  # ref advertisements over the same passes
    heartbeat_s: int  # the presets'
    idle_s: float  # an idle desk's longest wait between looks
    brief_s: float

    def busy_pushes_per_min(self) -> float:
        beats = max(0, math.floor(self.brief_s / self.heartbeat_s) - 1)  # the agent's steps renew in between
        return (self.pushes_per_brief + beats) / (self.brief_s / 60)

    def busy_ads_per_min(self) -> float:
        return (self.ads_per_brief + self.brief_s / self.heartbeat_s) / (self.brief_s / 60)

    def idle_ads_per_min(self) -> float:
        return 60 / self.idle_s


TYPICAL = """---
title: Typical
labels: [demo]
verify:
  - id: check
    run: "test -f t.txt"
---
Typical.

```assay-script
run "$ASSAY_BIN" step run --name lint --policy safe -- true
run "$ASSAY_BIN" step run --name test --policy safe -- true
deploy
write t.txt hi
```
"""


def typical_forge(tmp: Path, briefs: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    """A forge on disk made by `assay init` with `briefs` (file name: text) on main instead of its sample, and the
    environment of a desk on it whose every git call is logged: (the forge, the log, the environment)."""
    forge, seed = tmp / "forge.git", tmp / "seed"
    seed.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "assay", "init", "--local-forge", str(forge)], cwd=seed, check=True,
                   capture_output=True)
    for sample in (seed / "briefs").glob("*.md"):  # `init`'s sample brief: only these are worked
        sample.unlink()
    for name, text in briefs.items():
        (seed / "briefs" / name).write_text(text)
    git("add", "-A", cwd=seed)
    git("-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "briefs", cwd=seed)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=seed)
    shim, log = logging_git(tmp)
    env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}", "ASSAY_STATE_DIR": str(tmp / "state"),
           "ASSAY_EFFECTS_LOG": str(tmp / "effects.log"), "ASSAY_CACHE_DIR": str(tmp / "cache")}
    env.pop("ASSAY_PUSH_WINDOW_S", None)
    return forge, log, env


def calibrate(tmp: Path) -> Profile:
    """One real desk pass over a typical brief, every git call logged."""
    forge, log, env = typical_forge(tmp, {"typical.md": TYPICAL})
    desk = [sys.executable, "-m", "assay", "desk", "run", "scripted", "--once", "--forge", str(forge)]
    ran = subprocess.run(desk, env=env, capture_output=True, text=True, timeout=300)
    if ran.returncode != 0 or "review ready" not in ran.stdout:
        sys.exit(f"the calibrating desk failed:\n{ran.stdout}\n{ran.stderr}")
    made = calls(log)
    first = next(i for i, (code, args) in enumerate(made) if code == 0 and is_push(args)
                 and args.rstrip().endswith("refs/assay/claims/typical"))
    pushes = [args for code, args in made[first:] if code == 0 and is_push(args)]
    ads = [args for _, args in made[first:] if lists_refs(args)]
    # a person merges the review; the desk's next pass settles the brief as done
    subprocess.run([sys.executable, "-m", "assay", "review", "merge", "typical", "--forge", str(forge)], check=True,
                   capture_output=True, env={**os.environ, "ASSAY_CACHE_DIR": str(tmp / "person-cache")})
    log.write_text("")
    settled = subprocess.run(desk, env=env, capture_output=True, text=True, timeout=300)
    if "typical merged -> done" not in settled.stdout:
        sys.exit(f"the calibrating desk did not settle the merged brief:\n{settled.stdout}\n{settled.stderr}")
    pushes += [args for code, args in calls(log) if code == 0 and is_push(args)]
    ads += [args for _, args in calls(log) if lists_refs(args)]
    spec = parse_desk((ROOT / "desks" / "claude.yaml").read_text(), "desks/claude.yaml")
    idle = min(float(spec.heartbeat_s), float(getattr(loop, "IDLE_MAX_S", 5.0)))  # before the backoff: every poll
    return Profile(len(pushes), len(ads), spec.heartbeat_s, idle, 0.0)


# -- 2. the fleet ---------------------------------------------------------------------------------------------

@dataclass
class Push:
    due: float  # seconds into the window
    refs: tuple[tuple[int, str], ...]  # (desk, "claim"), or its "journal" and "claim"; a host's round: several desks'


@dataclass
class DeskPlan:
    index: int  # a desk's, or a host's (`by_host`)
    pushes: list[Push] = field(default_factory=list)


def plan(profile: Profile, n: int, window: float, rng: random.Random) -> list[DeskPlan]:
    """What each of `n` busy desks pushes within the window, each at a random point of its brief's cycle."""
    burst = profile.pushes_per_brief // 2  # the claim and the desk's own steps before the agent
    after = profile.pushes_per_brief // 3  # its closing steps
    during = profile.pushes_per_brief - burst - after  # the agent's steps
    agent_s = profile.brief_s - (burst + after) * BURST_GAP_S
    cycle: list[tuple[float, tuple[str, ...]]] = [(0.0, ("claim",))]
    cycle += [(i * BURST_GAP_S, ("journal", "claim")) for i in range(1, burst)]
    start = burst * BURST_GAP_S
    cycle += [(start + agent_s * (i + 1) / (during + 1), ("journal", "claim")) for i in range(during)]
    cycle += [(start + k * profile.heartbeat_s, ("claim",)) for k in range(1, int(agent_s // profile.heartbeat_s))]
    cycle += [(start + agent_s + i * BURST_GAP_S, ("journal", "claim")) for i in range(after)]
    cycle.sort()
    plans = []
    for d in range(n):
        phase = rng.uniform(0, profile.brief_s)  # the window opens `phase` seconds into this desk's cycle
        desk = DeskPlan(d)
        for offset in (0.0, profile.brief_s):
            desk.pushes += [Push(at + offset - phase, tuple((d, kind) for kind in refs)) for at, refs in cycle
                            if 0 <= at + offset - phase < window]
        if desk.pushes:
            plans.append(desk)
    return plans


def by_host(plans: list[DeskPlan], per_host: int, push_window: float) -> list[DeskPlan]:
    """The desks' pushes as their hosts' push groups make them (`core/pushgroup.py`): `per_host` desks a host; a
    round opens at a desk's push and goes `push_window` seconds later with the next push of each desk of the host
    due by then (a desk's pushes one after another, each in a round after its last)."""
    hosts = []
    for h in range(0, len(plans), per_host):
        pending = {p.index: list(p.pushes) for p in plans[h:h + per_host]}
        free = dict.fromkeys(pending, -math.inf)  # when each desk's last round went
        host = DeskPlan(h // per_host)
        while any(pending.values()):
            opened = min(max(q[0].due, free[d]) for d, q in pending.items() if q)
            goes = opened + push_window
            refs: tuple[tuple[int, str], ...] = ()
            for d, q in pending.items():
                if q and max(q[0].due, free[d]) <= goes:
                    refs += q.pop(0).refs
                    free[d] = goes
            host.pushes.append(Push(goes, refs))
        hosts.append(host)
    return hosts


def _commit(mark: int, ref: str, parent: int | None, body: bytes) -> bytes:
    out = f"commit {ref}\nmark :{mark}\n".encode() + WHO + b"data 5\nfleet\n"
    if parent:
        out += f"from :{parent}\n".encode()
    name = b"claim.json" if "claims" in ref else b"entries.jsonl"
    return out + b"M 100644 inline " + name + b"\n" + b"data %d\n" % len(body) + body + b"\n\n"


def build(tmp: Path, n: int, plans: list[DeskPlan]) -> tuple[Path, Path, dict[tuple[int, str], list[str]]]:
    """The forge (4 refs for each of n briefs, packed) and a desk-side repository holding each push's commits."""
    forge, local = tmp / f"forge-{n}.git", tmp / f"desks-{n}"
    git("init", "-q", "--bare", "--initial-branch=main", str(forge))
    git("config", "http.receivepack", "true", cwd=forge)
    git("init", "-q", "--bare", str(local))
    needed = {(d, kind): 0 for d in range(n) for kind in ("claim", "journal")}
    for p in plans:
        for push in p.pushes:
            for d, kind in push.refs:
                needed[(d, kind)] += 1
    marks: dict[tuple[int, str, int], int] = {}  # (desk, kind, k) -> fast-import's mark (a number)

    def mark(d: int, kind: str, k: int) -> int:
        return marks.setdefault((d, kind, k), len(marks) + 1)

    base, chains = [], []
    for d in range(n):
        for kind, prefix in (("claim", "refs/assay/claims"), ("journal", "refs/assay/journal")):
            base.append(_commit(mark(d, kind, 0), f"{prefix}/b{d}", None, b"0\n"))
            for k in range(1, needed.get((d, kind), 0) + 1):
                chains.append(_commit(mark(d, kind, k), f"refs/sim/{kind}/b{d}/{k}", mark(d, kind, k - 1),
                                      b"%d\n" % k))
        base.append(_commit(mark(d, "branch", 0), f"refs/heads/assay/b{d}", None, b"work\n"))
        base.append(_commit(mark(d, "review", 0), f"refs/assay/reviews/b{d}", None, b"{}\n"))
    base.append(_commit(mark(-1, "main", 0), "refs/heads/main", None, b"main\n"))
    stream = b"".join(base)
    subprocess.run(["git", "fast-import", "--quiet"], cwd=forge, input=stream, check=True)
    git("pack-refs", "--all", cwd=forge)
    subprocess.run(["git", "fast-import", "--quiet", "--export-marks=marks"], cwd=local,
                   input=stream + b"".join(chains), check=True)
    written = dict(line.split() for line in (local / "marks").read_text().splitlines())
    shas = {(d, kind): [written[f":{mark(d, kind, k)}"] for k in range(needed.get((d, kind), 0) + 1)]
            for d in range(n) for kind in ("claim", "journal")}
    return forge, local, shas


class Backend(http.server.ThreadingHTTPServer):
    """`git http-backend` on loopback, a CGI process per request (as a forge's front end forks one)."""

    daemon_threads = True
    request_queue_size = 1024  # a forge's front end takes every connection; the default 5 drops SYNs (1-s retries)

    def __init__(self, root: Path, upkeep_every: int = 0) -> None:
        self.root = root
        self.served: list[tuple[str, float, float]] = []  # (what, when, seconds): each request the forge answered
        self.listed: list[tuple[float, str]] = []  # (when, the ref prefixes asked for): each listing the forge answered
        self.upkeep_every = upkeep_every  # `git maintenance run` after this many pushes to a repository (0: never)
        self.upkeeps: list[tuple[float, float]] = []  # (when, seconds): each upkeep run, as `Backend.upkeep` ran it
        self.upkeeping: list[threading.Thread] = []  # the upkeeps started, to be joined
        self._pushes: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self._upkeep_locks: dict[str, threading.Lock] = {}  # a repository's: held by its upkeep under way
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                body = request_body(self)
                url = urllib.parse.urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                started = time.time()
                status, out, payload = http_backend(server.root, self.command, urllib.parse.unquote(url.path),
                                                    url.query, headers, body, "fleet")
                kind = ("listing" if b"command=ls-refs" in body else "fetch" if "upload-pack" in url.path else
                        "push" if "receive-pack" in url.path else "advertisement")
                server.served.append((kind, started, time.time() - started))
                if kind == "push" and server.upkeep_every:
                    server.pushed(urllib.parse.unquote(url.path).split("/git-receive-pack")[0].strip("/"))
                if kind == "listing":
                    asked = sorted(p.decode(errors="replace") for p in re.findall(rb"ref-prefix (\S+)\n", body))
                    server.listed.append((started, " ".join(asked) or "everything"))
                self.send_response(status)
                for name, value in out:
                    if name.lower() not in ("content-length", "transfer-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

        super().__init__(("127.0.0.1", 0), Handler)

    def pushed(self, repo: str) -> None:
        """Count a push to `repo`; each `upkeep_every`-th starts its upkeep (unless one runs), as a forge's
        housekeeping does after so many pushes (GitLab's repacks after every N pushes; GitHub's maintenance)."""
        with self._count_lock:
            self._pushes[repo] = self._pushes.get(repo, 0) + 1
            if self._pushes[repo] % self.upkeep_every:
                return
            lock = self._upkeep_locks.setdefault(repo, threading.Lock())
        thread = threading.Thread(target=self.upkeep, args=(self.root / repo, lock), daemon=True)
        self.upkeeping.append(thread)
        thread.start()

    def upkeep(self, repo: Path, lock: threading.Lock) -> None:
        """`git maintenance run` of a served repository, one at a time (a run already under way there is enough):
        its loose objects packed, its refs packed, its commit graph written, its packs combined; recorded unless git
        skipped it (saying so, where another maintenance holds the repository). Without it every push's
        connectivity check (`rev-list --not --all`) reads each loose ref and each ref tip's commit whole (measured
        here: 67 ms of CPU a push at 6,100 refs with 3,300 loose objects and 965 loose refs; 25 ms kept)."""
        if not lock.acquire(blocking=False):
            return
        try:
            began = time.time()
            done = subprocess.run(["git", "--git-dir", str(repo), "maintenance", "run", "--task=loose-objects",
                                   "--task=pack-refs", "--task=commit-graph", "--task=incremental-repack"],
                                  capture_output=True, check=False)
            if b"skipping" not in done.stderr:  # a task that fails (no pack yet to combine) leaves the rest run
                self.upkeeps.append((began, time.time() - began))
        finally:
            lock.release()

    def close(self) -> None:
        """Stop serving, and wait for the upkeeps under way (their repositories are removed next)."""
        self.shutdown()
        self.server_close()
        for thread in self.upkeeping:
            thread.join()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that gave up (its git timed out) is counted by the client; anything else is printed."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass
class Result:
    n: int
    window: float
    demanded_pushes: float  # per second, from the profile
    demanded_ads: float
    latencies: list[float]
    failed: int
    cpu_s: float  # user + system CPU of this process's children (git, the backend's CGI) over the window, and this
    # process's own (the desks' pushes are made here; over HTTP it also serves the backend's requests)

    def p(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_fleet(root: Path, url_for: Callable[[Path], str], profile: Profile, n: int, window: float,
              seed: int, per_host: int = 1, push_window: float = 0.0) -> Result:
    rng = random.Random(seed)
    plans = plan(profile, n, window, rng)
    if per_host > 1:
        plans = by_host(plans, per_host, push_window)
    forge, local, shas = build(root, n, plans)
    url = url_for(forge)
    ads_per_s = n * profile.busy_ads_per_min() / 60
    ad_times = sorted(rng.uniform(0, window) for _ in range(int(round(ads_per_s * window))))
    latencies: list[float] = []
    failed = [0]
    lock = threading.Lock()
    threading.stack_size(256 * 1024)
    prefix = {"claim": "refs/assay/claims", "journal": "refs/assay/journal"}
    started_at = [0.0]

    own = ForgeGit(url, root / "desk-cache")
    on_disk = local_forge_path(url) is not None
    if not on_disk:  # the desks' prepared commits, read by the port's cache where they are
        (Path(own.cache) / "objects" / "info" / "alternates").write_text(f"{local / 'objects'}\n")
    else:  # the forge's objects loose, as pushes leave them between two `gc --auto`
        for pack in (forge / "objects" / "pack").glob("*.pack"):
            data = pack.read_bytes()
            for part in pack.parent.glob(pack.stem + ".*"):
                part.unlink()
            subprocess.run(["git", "unpack-objects", "-q"], cwd=forge, input=data, check=True)
    tips = {key: chain[0] for key, chain in shas.items()}
    who = Signature("fleet", "fleet@example.invalid")

    def desk(p: DeskPlan) -> None:
        done = {(d, kind): 0 for d, kind in {r for push in p.pushes for r in push.refs}}
        port = own.spare()  # a desk's (or host's) own: a port serves one thread
        for push in p.pushes:
            delay = started_at[0] + push.due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the simulated desk's own clock: when it means to push
            if on_disk:  # as Assay pushes to a forge on disk: the commits it writes, its own transaction
                updates = []
                for d, kind in push.refs:
                    old = tips[(d, kind)]
                    blob = port.write_blob(b"%d %s %d\n" % (d, kind.encode(), done[(d, kind)] + 1))
                    new = port.write_commit(port.write_tree([TreeEntry("claim.json" if kind == "claim" else
                                                                       "entries.jsonl", blob)]), [old], "fleet", who)
                    updates.append(RefUpdate(f"{prefix[kind]}/b{d}", new, old))
                ok = all(r.ok for r in port.push(updates, atomic=True).values())
                if ok:
                    for u, key in zip(updates, push.refs, strict=True):
                        tips[key] = u.new
            else:  # over HTTP as Assay pushes: one POST to the forge's receive-pack (`Pushing._push_http`)
                updates = [RefUpdate(f"{prefix[kind]}/b{d}", shas[(d, kind)][done[(d, kind)] + 1],
                                     shas[(d, kind)][done[(d, kind)]]) for d, kind in push.refs]
                ok = all(r.ok for r in port.push(updates, atomic=True).values())
            finished = time.monotonic()
            with lock:
                if ok:
                    latencies.append(finished - started_at[0] - push.due)
                    for key in push.refs:
                        done[key] += 1
                else:
                    failed[0] += 1
        port.close()

    reader = ForgeGit(url, root / "reader-cache")  # reads as a desk's look does (ls-refs on a forge on disk)
    look = [PREFIXES[k] + "*" if k in PREFIXES else SINGLES[k] for k in QUEUE]

    looks: list[threading.Thread] = []  # each a desk's look, joined before the forge goes

    def advertiser() -> None:
        for at in ad_times:
            delay = started_at[0] + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            looking = threading.Thread(target=reader.ls_remote, args=look, daemon=True)
            looking.start()
            looks.append(looking)

    threads = [threading.Thread(target=desk, args=(p,), daemon=True) for p in plans]
    threads.append(threading.Thread(target=advertiser, daemon=True))
    cpu = _children_cpu() + time.process_time()
    started_at[0] = time.monotonic() + 0.5
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t in looks:
        t.join()
    cpu = _children_cpu() + time.process_time() - cpu
    own.close()
    return Result(n, window, sum(len(p.pushes) for p in plans) / window, ads_per_s, latencies, failed[0], cpu)


def floor_push(tmp: Path) -> float:
    """One raw `git push` of a new commit (median of 9), to a small bare repository."""
    repo = tmp / "floor.git"
    git("init", "-q", "--bare", str(repo))
    times = []
    for i in range(9):
        blob = git("hash-object", "-w", "--stdin", cwd=repo, input=f"floor {i} {random.random()}".encode()).strip()
        tree = git("mktree", cwd=repo, input=f"100644 blob {blob}\tclaim.json\n".encode()).strip()
        sha = git("-c", "user.name=b", "-c", "user.email=b@x", "commit-tree", tree, "-m", "f", cwd=repo).strip()
        started = time.perf_counter()
        git("push", "-q", str(repo), f"{sha}:refs/heads/f{i}", cwd=repo)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    compiled()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brief-min", type=float, default=30.0, help="a brief's length, claim to review waiting")
    parser.add_argument("--desks", default="100,300,1000,2000,4000", help="the fleet sizes to ramp through")
    parser.add_argument("--transports", default="disk,http")
    parser.add_argument("--window", type=float, default=0.0, help="seconds per fleet size (default: 60 pushes' "
                        "worth, 8 to 40 s)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--heartbeat-s", type=int, default=0, help="instead of the presets' heartbeat")
    parser.add_argument("--all", action="store_true", help="then the other fleet benchmarks, in this run")
    parser.add_argument("--per-host", type=int, default=1, help="desks a host, whose pushes go together")
    parser.add_argument("--push-window", type=float, default=0.0, help="the hosts' push window (seconds)")
    parser.add_argument("--idle-ads-per-min", type=float, default=0.0,
                        help="instead of one ref advertisement per longest idle wait")
    args = parser.parse_args()
    sizes = [int(x) for x in args.desks.split(",")]
    with tempfile.TemporaryDirectory(prefix="assay-bench-fleet-") as name:
        tmp = Path(name)
        (tmp / "calibrate").mkdir()
        measured = calibrate(tmp / "calibrate")
        profile = Profile(measured.pushes_per_brief, measured.ads_per_brief, args.heartbeat_s or measured.heartbeat_s,
                          60 / args.idle_ads_per_min if args.idle_ads_per_min else measured.idle_s,
                          args.brief_min * 60)
        floor = floor_push(tmp)
        print(f"one desk, measured: {profile.pushes_per_brief} pushes and {profile.ads_per_brief} ref "
              "advertisements from its claim to its review waiting and the brief settled as done; heartbeat "
              f"{profile.heartbeat_s}s, an idle desk looks every {profile.idle_s:g}s")
        print(f"per desk a minute, {args.brief_min:g}-minute briefs: busy {profile.busy_pushes_per_min():.2f} "
              f"pushes and {profile.busy_ads_per_min():.2f} ref advertisements; idle {profile.idle_ads_per_min():.2f} "
              f"ref advertisements")
        print(f"1,000 desks: busy {1000 * profile.busy_pushes_per_min() / 60:.1f} pushes/s, "
              f"{1000 * profile.busy_ads_per_min() / 60:.1f} ref advertisements/s; idle "
              f"{1000 * profile.idle_ads_per_min() / 60:.1f} ref advertisements/s")
        print(f"floor: one raw git push {floor * 1000:.1f} ms")
        backend = Backend(tmp / "http")
        threading.Thread(target=backend.serve_forever, daemon=True).start()
        url_of: dict[str, Callable[[Path], str]] = {
            "disk": str, "http": lambda forge: f"http://127.0.0.1:{backend.server_address[1]}/{forge.name}"}
        for transport in args.transports.split(","):
            print(f"\n{transport}: desks  demanded pushes/s  ref ads/s  accepted pushes/s  p50 ms  p95 ms  failed  "
                  "CPU ms/push")
            carried = 0
            points: list[tuple[int, float]] = []  # (refs on the forge, CPU seconds a push)
            rates: list[float] = []  # pushes a desk a second, as the forge gets them (its host's rounds, shared)
            for n in sizes:
                demanded = n * profile.busy_pushes_per_min() / 60
                window = args.window or min(40.0, max(8.0, 60 / demanded))
                (tmp / transport).mkdir(exist_ok=True)
                result = run_fleet(tmp / transport, url_of[transport], profile, n, window, args.seed + n,
                                   args.per_host, args.push_window)
                accepted = len(result.latencies) / result.window
                cpu_per_push = result.cpu_s / max(1, len(result.latencies) + result.failed)
                points.append((4 * n, cpu_per_push))
                rates.append(result.demanded_pushes / n)
                print(f"{transport:>9} {n:6d}  {result.demanded_pushes:17.1f}  {result.demanded_ads:9.1f}  "
                      f"{accepted:17.1f}  {result.p(0.5) * 1000:6.0f}  {result.p(0.95) * 1000:6.0f}  "
                      f"{result.failed:6d}  {cpu_per_push * 1000:11.1f}")
                shutil.rmtree(tmp / transport, ignore_errors=True)
                if result.p(0.95) < 1.0 and not result.failed:
                    carried = n
                else:
                    break
            print(f"{transport}: the largest fleet run with p95 under 1 s: {carried} desks")
            extrapolate(transport, points, rates[-1] if rates else profile.busy_pushes_per_min() / 60)
    if args.all:
        for script in ALL:
            print(f"\n== {script}", flush=True)
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / script)], check=True)


def extrapolate(transport: str, points: list[tuple[int, float]], d: float) -> None:
    """The CPU a push costs (its share of the ref advertisements included) grows with the refs on the forge:
    fit cost = a + b * refs to the measured points, then the fleet whose demand fills C cores is the N with
    N * pushes_per_desk_per_s * (a + b * 4N) = C."""
    if len(points) < 2:
        return
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    var = sum((x - mean_x) ** 2 for x, _ in points)
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
    a = max(mean_y - b * mean_x, 0.0)
    print(f"{transport}: CPU a push = {a * 1000:.1f} ms + {b * 1e6:.1f} us per ref on the forge (fit to "
          f"{len(points)} sizes); busy desks that fill the cores, at 4 refs a desk:")
    for cores in (os.cpu_count() or 1, 8, 32):
        if b > 0:
            n = (-a * d + math.sqrt((a * d) ** 2 + 4 * 4 * b * d * cores)) / (2 * 4 * b * d)
        else:
            n = cores / (a * d) if a else 0.0
        print(f"{transport}:   {cores:3d} cores: about {n:,.0f} desks ({n * d:.0f} pushes/s)")


if __name__ == "__main__":
    main()
