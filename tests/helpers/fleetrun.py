"""A fleet on one forge doing work that overlaps, duplicates, is done already or breaks main only together, with a
reviewer that lands every review as soon as it is ready; then what happened, judged with plain git.

The briefs (scripted agents write the files their brief names):

- `grp<g>-<i>`: groups of four that each append their own line to one shared file (`shared<g>.txt`): worked at
  once, their branches conflict;
- `strict<k>` / `lenient<k>`: each green alone, red together (`lenient` needs `cfg<k>.txt` not strict);
- `dup<k>a` / `dup<k>b`: the same change asked twice;
- `done<k>`: work main holds already;
- `solo<i>`: the rest, each on a file of its own.

With `checks` on, briefs declare `touches:` and `done_when:` and the reviewer runs `assay land`; with them off,
briefs declare neither and the reviewer runs `assay review merge` on each ready review. `Fleet` is the forge on disk;
`tests/helpers/fleetgithub.py` runs the same scenario on the fake GitHub, through a merge queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.core.briefs import KEYS
from tests.journal_check import claim_chain, entries
from tests.promise.reader import review_chain

DESK = """name: {name}
takes:
  labels: [work]
agent:
  command: [{python}, -m, assay.agents.scripted]
lease_s: 120
heartbeat_s: 5
attempts: 2
env_allow: [PATH, HOME, LANG, LC_ALL, TZ]
"""


@dataclass(frozen=True)
class Spec:
    """One brief of the scenario: what it writes, what checks it, what it shares."""

    id: str
    writes: tuple[tuple[str, str, str], ...]  # (verb, path, text)
    verify: str
    touches: tuple[str, ...]
    done_when: str = ""
    kind: str = "solo"
    twin: str = ""  # a duplicate's other half

    @property
    def files(self) -> set[str]:
        """What its agent writes: briefs that write one file overlap, whatever their `touches:` say."""
        return {path for _, path, _ in self.writes}


def specs(total: int) -> list[Spec]:
    """`total` briefs: a third in groups of four on shared files, pairs that break main together, duplicates,
    work done already, and the rest on files of their own."""
    out: list[Spec] = []
    groups = max(1, total // 12)
    for g in range(groups):
        for i in range(4):
            line = f"grp{g}-line{i}"
            # declared as the folder, a glob in it, or the file itself: the footprints meet only as globs
            touches = (f"shared{g}/", f"shared{g}/*.txt", f"shared{g}/log.txt", f"shared{g}")[(g + i) % 4]
            out.append(Spec(f"grp{g}-{i}", (("append", f"shared{g}/log.txt", line),),
                            f"grep -q {line} shared{g}/log.txt", (touches,), kind="group"))
    pairs = max(1, total // 15)
    for k in range(pairs):
        out.append(Spec(f"strict{k}", (("write", f"cfg{k}.txt", "mode=strict"),), f"grep -q strict cfg{k}.txt",
                        (f"cfg{k}.txt",), kind="strict"))
        out.append(Spec(f"lenient{k}", (("write", f"app{k}.txt", "needs=lenient"),),
                        f"grep -q lenient app{k}.txt && ! grep -qs strict cfg{k}.txt", (f"app{k}.txt",),
                        kind="lenient"))
    dups = max(1, total // 30)
    for k in range(dups):
        for half, other in (("a", "b"), ("b", "a")):
            out.append(Spec(f"dup{k}{half}", (("write", f"dup{k}.txt", f"dup{k}"),), f"grep -q dup{k} dup{k}.txt",
                            (f"dup{k}.txt",), kind="dup", twin=f"dup{k}{other}"))
    done = max(1, total // 15)
    for k in range(done):
        out.append(Spec(f"done{k}", (("write", f"done{k}.txt", f"done{k}"),), f"grep -q done{k} done{k}.txt",
                        (f"done{k}.txt",), done_when=f"grep -q done{k} done{k}.txt", kind="done"))
    i = 0
    while len(out) < total:
        out.append(Spec(f"solo{i}", (("write", f"solo{i}.txt", f"solo{i}"),), f"grep -q solo{i} solo{i}.txt",
                        (f"solo{i}.txt",)))
        i += 1
    return out[:total]


def brief_text(spec: Spec, checks: bool) -> str:
    head = [f"title: {spec.id}", "labels: [work]"]
    if checks:
        head.append(f"touches: {json.dumps(list(spec.touches))}")
        if spec.done_when and "done_when" in KEYS:
            head.append(f"done_when:\n  - id: there\n    run: {json.dumps(spec.done_when)}")
    head.append(f"verify:\n  - id: check\n    run: {json.dumps(spec.verify)}")
    script = "\n".join([*(f"{verb} {path} {text}" for verb, path, text in spec.writes),
                        f"answer-threads fixed wrote {spec.id} as asked"])
    return "---\n" + "\n".join(head) + f"\n---\n{spec.id}.\n\n```assay-script\n{script}\n```\n"


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@dataclass
class Outcome:
    """What the run did, judged from the forge afterwards."""

    checks: bool
    briefs: int
    desks: int
    seconds: float
    states: dict[str, str] = field(default_factory=dict)
    overlapping_in_flight: list[tuple[str, str]] = field(default_factory=list)
    breaking_merges: list[str] = field(default_factory=list)
    duplicates_ready: list[str] = field(default_factory=list)
    done_without_agent: list[str] = field(default_factory=list)
    done_with_agent: list[str] = field(default_factory=list)
    ready_unmerged: list[str] = field(default_factory=list)
    threads_noted: int = 0  # review notes the reviewer wrote
    threads_answered: int = 0  # of those, answered by a desk
    ready_with_open_thread: list[str] = field(default_factory=list)  # marked ready while a thread waited
    rounds: int = 0
    agent_runs: int = 0
    agent_s: float = 0.0

    def view(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "states"} | {
            "by_state": {s: sum(1 for v in self.states.values() if v == s) for s in sorted(set(self.states.values()))}}


class Fleet:
    """A forge on disk seeded with the scenario, desks as real processes, and a reviewer. A subclass puts the forge
    elsewhere by overriding `publish`, `desk_env`, `fingerprint`, `review`, `merged_commits` and `judge_threads`."""

    def __init__(self, root: Path, total: int, desks: int, checks: bool) -> None:
        self.root, self.checks, self.ndesks = root, checks, desks
        self.specs = specs(total)
        solos = [s.id for s in self.specs if s.kind == "solo"]
        self.noted = set(solos[::3]) if checks else set()  # briefs whose review gets a reviewer's note
        self.asked: set[str] = set()
        self.forge = root / "forge.git"  # the bare repository judged with plain git
        self.env = {**os.environ, "ASSAY_FORGE": str(self.forge), "ASSAY_STATE_DIR": str(root / "state"),
                    "GIT_AUTHOR_NAME": "reviewer", "GIT_AUTHOR_EMAIL": "r@x", "GIT_COMMITTER_NAME": "reviewer",
                    "GIT_COMMITTER_EMAIL": "r@x", "ASSAY_PERSON": "reviewer"}

    def seed(self) -> None:
        seed = self.root / "seed"
        (seed / "briefs").mkdir(parents=True)
        (seed / "desks").mkdir()
        git("init", "-q", "--initial-branch=main", str(seed))
        (seed / "README.md").write_text("fleet\n")
        for spec in self.specs:
            (seed / "briefs" / f"{spec.id}.md").write_text(brief_text(spec, self.checks))
            if spec.kind == "done":  # its work is on main already
                for _, path, text in spec.writes:
                    (seed / path).write_text(text + "\n")
        for d in range(self.ndesks):
            (seed / "desks" / f"d{d}.yaml").write_text(DESK.format(name=f"d{d}", python=sys.executable))
        git("add", "-A", cwd=seed)
        git("-c", "user.name=s", "-c", "user.email=s@x", "commit", "-q", "-m", "seed", cwd=seed)
        self.publish(seed)
        self.base = git("--git-dir", str(self.forge), "rev-parse", "main").strip()

    def publish(self, seed: Path) -> None:
        """The forge, its main pushed from `seed`."""
        git("init", "-q", "--bare", "--initial-branch=main", str(self.forge))
        git("push", "-q", str(self.forge), "HEAD:refs/heads/main", cwd=seed)

    def desk_env(self, d: int) -> dict[str, str]:
        return {**self.env, "ASSAY_STATE_DIR": str(self.root / f"state-d{d}")}

    def fingerprint(self) -> str:
        """What changes while the fleet works: claims, reviews and main."""
        return git("--git-dir", str(self.forge), "for-each-ref", "--format=%(objectname) %(refname)",
                   "refs/assay/claims/", "refs/assay/reviews/", "refs/heads/main")

    def assay(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "assay", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def run(self, timeout_s: float = 600, quiet_s: float = 6.0) -> Outcome:
        """Desks and the reviewer until the forge stands still for `quiet_s` with no claim held and nothing
        `pending`: a stand-still may be a wait (an idle desk looks once a heartbeat; GitHub's write budget may ask
        a writer for most of a minute), not the end."""
        self.seed()
        started = time.monotonic()
        logs = [(self.root / f"d{d}.log").open("w") for d in range(self.ndesks)]
        procs = [subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", f"d{d}", "--poll", "0.3"],
                                  env=self.desk_env(d),
                                  stdout=logs[d], stderr=subprocess.STDOUT) for d in range(self.ndesks)]
        try:
            last, still = "", time.monotonic()
            while time.monotonic() - started < timeout_s:
                self.review()
                refs = self.fingerprint()
                states = self._states()
                held = any(s == "held" for s in states.values())
                if refs != last:
                    last, still = refs, time.monotonic()
                elif not held and time.monotonic() - still > quiet_s and not self.pending(states):
                    break
                time.sleep(0.3)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
            for log in logs:
                log.close()
        return self.judge(time.monotonic() - started)

    def pending(self, states: dict[str, str]) -> list[str]:
        """Briefs the fleet still owes an act: waiting on a review that merged (its desk settles it done)."""
        return sorted(b for b in self.merged_commits() if states.get(b) == "waiting")

    def review(self) -> None:
        """Land every ready review (or, checks off, merge each one as it is). With the checks on, the reviewer first
        writes a review note on the first ready review of every third `solo` brief: it lands once answered."""
        if self.checks:
            listed = self.assay("review", "list", "--json")
            for r in json.loads(listed.stdout or "{}").get("reviews", []):
                b = r.get("brief", "")
                if r.get("state") == "ready" and b in self.noted and b not in self.asked \
                        and self.assay("review", "note", b, f"Why {b}?", "--on", f"{b}.txt:1").returncode == 0:
                    self.asked.add(b)
            self.assay("land", "--as", "reviewer")
            return
        listed = self.assay("review", "list", "--json")
        for r in json.loads(listed.stdout or "{}").get("reviews", []):
            if r.get("state") == "ready":
                self.assay("review", "merge", r["brief"])

    def _states(self) -> dict[str, str]:
        out = {}
        for line in git("--git-dir", str(self.forge), "for-each-ref", "--format=%(refname)",
                        "refs/assay/claims/").split():
            brief = line.rsplit("/", 1)[-1]
            out[brief] = json.loads(git("--git-dir", str(self.forge), "show", f"{line}:claim.json"))["state"]
        return out

    # -- judging -------------------------------------------------------------------------------

    def judge(self, seconds: float) -> Outcome:
        out = Outcome(self.checks, len(self.specs), self.ndesks, round(seconds, 1))
        out.states = {s.id: self._states().get(s.id, "unclaimed") for s in self.specs}
        spans = {s.id: list(live_spans(self.forge, s.id)) for s in self.specs}
        for a in self.specs:
            for b in self.specs:
                if a.id < b.id and a.files & b.files and meet(spans[a.id], spans[b.id]):
                    out.overlapping_in_flight.append((a.id, b.id))
        out.breaking_merges = breaking_commits(self.forge, {s.id: s.verify for s in self.specs}, self.root / "check",
                                               self.base, self.merged_commits())
        for spec in self.specs:
            es = entries(self.forge, spec.id)
            readied = any(e["kind"] == "note" and (e.get("data") or {}).get("review") == "ready" for e in es)
            runs = [e for e in es if e["kind"] == "result" and e.get("step") == "agent"]
            out.agent_runs += len(runs)
            out.agent_s += sum(float(((e.get("data") or {}).get("output") or {}).get("duration_ms", 0)) / 1000
                               for e in runs)
            out.rounds += sum(1 for e in es if e["kind"] == "note" and (e.get("data") or {}).get("redo"))
            if spec.kind == "dup" and readied and spec.id > spec.twin:
                twin = entries(self.forge, spec.twin)
                if any(e["kind"] == "note" and (e.get("data") or {}).get("review") == "ready" for e in twin):
                    out.duplicates_ready.append(spec.id)
            if spec.kind == "done" and out.states[spec.id] == "done":
                (out.done_with_agent if runs else out.done_without_agent).append(spec.id)
            if spec.kind == "done" and readied:
                out.duplicates_ready.append(spec.id)  # work main had already, offered again as a review
            if out.states[spec.id] == "waiting" and readied:
                out.ready_unmerged.append(spec.id)
        self.judge_threads(out)
        out.agent_s = round(out.agent_s, 1)
        return out

    def merged_commits(self) -> dict[str, str]:
        """brief -> the commit its review merged as."""
        return merged_reviews(self.forge, [s.id for s in self.specs])

    def judge_threads(self, out: Outcome) -> None:
        """Review notes written and answered, and reviews marked ready while one waited, from the review chains."""
        for spec in self.specs:
            chain = review_chain(self.forge, spec.id)
            if spec.id in self.asked and chain:
                out.threads_noted += 1
                out.threads_answered += any(c.get("answer") for c in chain[-1][2].get("comments", []))
            for _, subject, record in chain:
                ends = {c["thread"]: c for c in record.get("comments", []) if c.get("thread")}
                if subject.startswith("assay: review mark-ready") and any(not c.get("answer") for c in ends.values()):
                    out.ready_with_open_thread.append(spec.id)


def meet(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    """Whether two sets of [start, end) spans share a moment."""
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


def live_spans(forge: Path, brief: str) -> Iterator[tuple[int, int]]:
    """When the brief's claim was live (held, waiting or blocked), by its commits' times (whole seconds)."""
    ref = f"refs/assay/claims/{brief}"
    if not git("--git-dir", str(forge), "for-each-ref", ref).strip():
        return
    times = [int(t) for t in git("--git-dir", str(forge), "log", "--reverse", "--format=%ct", ref).split()]
    start = None
    for record, at in zip(claim_chain(forge, brief), times, strict=True):
        live = record["state"] in ("held", "waiting", "blocked")
        if live and start is None:
            start = at
        elif not live and start is not None:
            yield start, at
            start = None
    if start is not None:
        yield start, 1 << 62


def merged_reviews(forge: Path, briefs: list[str]) -> dict[str, str]:
    """brief -> the commit its review merged as, from the review refs of a plain forge."""
    merged: dict[str, str] = {}
    for brief in briefs:
        ref = f"refs/assay/reviews/{brief}"
        if git("--git-dir", str(forge), "for-each-ref", ref).strip():
            record = json.loads(git("--git-dir", str(forge), "show", f"{ref}:review.json"))
            if record.get("state") == "merged" and record.get("merged_commit"):
                merged[brief] = record["merged_commit"]
    return merged


def breaking_commits(forge: Path, checks: dict[str, str], workdir: Path, since: str = "",
                     merged_at: dict[str, str] | None = None) -> list[str]:
    """Main's first-parent commits (after `since`) at which the check (a shell command: its verify row) of a brief
    whose review was merged by then fails. `checks`: brief -> command; `merged_at`: brief -> the commit its review
    merged as (from the pull requests on GitHub; by default, the review refs of a plain forge)."""
    if merged_at is None:
        merged_at = merged_reviews(forge, list(checks))
    commits = git("--git-dir", str(forge), "rev-list", "--first-parent", "--reverse",
                  f"{since}..main" if since else "main").split()
    if not workdir.exists():
        git("clone", "-q", str(forge), str(workdir))
    git("fetch", "-q", "origin", cwd=workdir)
    broken = []
    for commit in commits:
        git("checkout", "-q", "--force", commit, cwd=workdir)
        landed = [b for b, c in merged_at.items() if b in checks
                  if subprocess.run(["git", "merge-base", "--is-ancestor", c, commit], cwd=workdir).returncode == 0]
        if any(subprocess.run(["sh", "-c", checks[b]], cwd=workdir, capture_output=True).returncode for b in landed):
            broken.append(commit)
    return broken
