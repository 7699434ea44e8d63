"""REST and GraphQL calls per operation on GitHub, counted by the fake GitHub, and what they mean for a fleet.

    python benchmarks/github_calls.py [--briefs 1000] [--waiting 100] [--held 100]

Every operation runs as `assay` does it (a new process per command, one answer cache shared by them,
as on one machine), against `tests.fakegithub` on loopback; the figures are the fake's own counters:
calls that cost quota and 304s (which cost none), REST and GraphQL apart. The operations:

- claim, heartbeat (`assay renew`), a journaled step (`assay step run`): git only;
- review open (a draft), statuses (three verify rows: one status), ready (with its labels), each as
  `work.py` makes them, in one process;
- a desk pass that works two briefs end to end (claim .. ready, waiting), per brief;
- the merge settle: a person merges one, and the next desk pass sees it (and polls the other);
- a sweep of `--briefs` briefs with claims and journals on the forge, `--waiting` of them waiting on
  ready pull requests and `--held` held with a branch and a draft one: cold (first sweep, empty
  cache), then unchanged, then after a person merged one pull request.

Then the arithmetic for a fleet on one repository inside a `GITHUB_TOKEN`'s 1,000 calls per hour.
Counts, not times: they are the same on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assay.core.forge.budget import Limits  # noqa: E402
from assay.core.forge.github import GitHubReviews, GitHubTarget  # noqa: E402
from assay.core.records import ClaimRecord, JournalEntry  # noqa: E402
from benchmarks import compiled  # noqa: E402
from tests.fakegithub import FakeGitHub  # noqa: E402
from tests.fakegithub.state import Pull  # noqa: E402

OWNER, NAME = "acme", "app"
AT = "2026-01-01T00:00:00Z"
WHO = b"committer Bench <bench@example.invalid> 1767225600 +0000\n"
GIT_ENV = {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "Bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_CONFIG_NOSYSTEM": "1", "TZ": "UTC", "LANG": "C", "GIT_TERMINAL_PROMPT": "0"}
DESK = ("name: builder\ntakes:\n  labels: [work]\nagent:\n  command: [python, -m, assay.agents.scripted]\n"
        "env_allow: [PATH, HOME, LANG, LC_ALL, TZ]\n")
GRAPHQL = ("POST", "/graphql")
BUDGET = 1000  # a GITHUB_TOKEN's REST requests per hour and repository


def brief_text(title: str) -> str:
    name = title.lower()
    return (f"---\ntitle: {title}\nlabels: [work]\nverify:\n  - id: check\n    run: \"test -f {name}.txt\"\n---\n"
            f"{title}.\n\n```assay-script\nwrite {name}.txt hi\n```\n")


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV, **(env or {})}, capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


class Meter:
    """The fake's counters between two moments: quota-costing REST and GraphQL calls, and 304s."""

    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.rows: list[tuple[str, int, int, int, str]] = []

    def snap(self) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
        with self.gh.lock:
            return Counter(self.gh.calls), Counter(self.gh.not_modified)

    def measure(self, label: str, before: tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]],
                per: int = 1, note: str = "") -> tuple[float, float, float]:
        calls, unchanged = self.snap()
        spent, free = calls - before[0], unchanged - before[1]
        graphql = spent.pop(GRAPHQL, 0)
        rest, cached = sum(spent.values()), sum(free.values())
        writes = sum(n for (method, _), n in spent.items() if method != "GET") + graphql
        self.rows.append((label, rest, graphql, cached, note or f"{writes} writes"))
        return rest / per, graphql / per, cached / per


def assay(args: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "assay", *args], env={**os.environ, **GIT_ENV, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"assay {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-600:]}")
    return proc.stdout


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def add_briefs(gh: FakeGitHub, n: int, waiting: int, held: int) -> None:
    """n more briefs on main with a claim and a two-entry journal each; the first `waiting` wait on a ready
    pull request, the next `held` are held with a branch and a draft pull request (one fast-import run)."""
    repo = gh.repo(OWNER, NAME)
    out = b"commit refs/heads/main\n" + WHO + data(b"more briefs") + b"from refs/heads/main^0\n"
    for i in range(n):
        out += b"M 100644 inline briefs/b%05d.md\n" % i + data(brief_text(f"B{i:05d}").encode())
    for i in range(n):
        brief = f"b{i:05d}"
        state, wait = ("waiting", {"on": "review"}) if i < waiting else ("held", None)
        claim = ClaimRecord(brief=brief, state=state, epoch=1, desk="far", holder="far/elsewhere/1/abcd",
                            lease_s=3600, branch=f"assay/{brief}", at=AT, wait=wait)
        out += (b"\ncommit refs/assay/claims/%s\n" % brief.encode() + WHO + data(b"claim")
                + b"M 100644 inline claim.json\n" + data(claim.encode()))
        lines = [JournalEntry(seq=1, epoch=1, kind="note", at=AT, run="r1", data={"run": "start"}),
                 JournalEntry(seq=2, epoch=1, kind="intent", at=AT, run="r1", step="build", ordinal=0,
                              input_sha="0" * 64, policy="safe")]
        out += (b"\ncommit refs/assay/journal/%s\n" % brief.encode() + WHO + data(b"journal")
                + b"M 100644 inline entries.jsonl\n" + data("".join(e.encode() + "\n" for e in lines).encode()))
        if i < waiting + held:
            out += (b"\ncommit refs/heads/assay/%s\n" % brief.encode() + WHO + data(b"work")
                    + b"from refs/heads/main^0\nM 100644 inline %s.txt\n" % brief.encode() + data(b"hi\n"))
    subprocess.run(["git", "--git-dir", str(repo.path), "fast-import", "--quiet", "--date-format=raw"],
                   input=out + b"\n", check=True, capture_output=True)
    main = git("--git-dir", str(repo.path), "rev-parse", "refs/heads/main", cwd=repo.path).strip()
    heads = dict(line.split() for line in git("--git-dir", str(repo.path), "for-each-ref",
                                              "--format=%(refname:lstrip=3) %(objectname)", "refs/heads/assay",
                                              cwd=repo.path).splitlines())
    with gh.lock:
        for i in range(waiting + held):
            brief = f"b{i:05d}"
            pull = Pull(repo.next_number, f"B{i:05d}", f"Assay-Brief: {brief}\n", f"assay/{brief}", "main",
                        heads[brief], main, gh.user, draft=i >= waiting)
            repo.pulls[pull.number] = pull
            repo.next_number += 1


def main() -> None:
    compiled()
    ap = argparse.ArgumentParser()
    ap.add_argument("--briefs", type=int, default=1000)
    ap.add_argument("--waiting", type=int, default=100)
    ap.add_argument("--held", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="assay-ghcalls-") as tmp_name, FakeGitHub(Path(tmp_name)) as gh:
        tmp = Path(tmp_name)
        gh.create_repo(OWNER, NAME)
        url = gh.git_url(OWNER, NAME)
        seed = tmp / "seed"
        seed.mkdir()
        git("init", "-q", "-b", "main", cwd=seed)
        for path, text in {"README.md": "bench\n", "desks/builder.yaml": DESK, "briefs/alpha.md": brief_text("Alpha"),
                           "briefs/beta.md": brief_text("Beta"), "briefs/gamma.md": brief_text("Gamma")}.items():
            (seed / path).parent.mkdir(parents=True, exist_ok=True)
            (seed / path).write_text(text)
        git("add", "-A", cwd=seed)
        git("commit", "-q", "-m", "briefs", cwd=seed)
        git("push", "-q", url, "HEAD:refs/heads/main", cwd=seed, env=gh.git_env())
        env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": gh.api_url, "GITHUB_TOKEN": gh.token,
               "ASSAY_STATE_DIR": str(tmp / "state"), "ASSAY_CACHE_DIR": str(tmp / "cache")}
        meter = Meter(gh)
        per: dict[str, tuple[float, float, float]] = {}

        # git-only operations, each a new process
        b = meter.snap()
        assay(["claim", "gamma", "--desk", "builder"], env, tmp)
        per["claim"] = meter.measure("claim (assay claim)", b)
        b = meter.snap()
        assay(["renew", "gamma", "--desk", "builder"], env, tmp)
        per["heartbeat"] = meter.measure("heartbeat (assay renew)", b)
        b = meter.snap()
        step_env = {**env, "ASSAY_BRIEF": "gamma", "ASSAY_DESK": "builder", "ASSAY_EPOCH": "1", "ASSAY_RUN": "bench"}
        assay(["step", "run", "--name", "build", "--policy", "unsafe", "--", "true"], step_env, tmp)
        per["step"] = meter.measure("journaled step (assay step run)", b)

        # the review's calls as work.py makes them, on a branch pushed for it
        git("checkout", "-q", "-b", "solo", cwd=seed)
        (seed / "solo.txt").write_text("solo\n")
        git("add", "-A", cwd=seed)
        git("commit", "-q", "-m", "solo", cwd=seed)
        git("push", "-q", url, "HEAD:refs/heads/assay/solo", cwd=seed, env=gh.git_env())
        head = git("rev-parse", "HEAD", cwd=seed).strip()
        reviews = GitHubReviews(GitHubTarget(f"{OWNER}/{NAME}", gh.api_url), gh.token, echo=lambda _: None,
                                cache_dir=tmp / "solo-cache")
        b = meter.snap()
        reviews.open("solo", "assay/solo", "Solo", head)  # a draft: labelled once ready
        per["open"] = meter.measure("review open (a draft pull request)", b)
        row = {"row": "check", "passed": True, "exit_code": 0, "expect_exit": 0, "duration_ms": 5,
               "output_sha256": "ab" * 32}
        b = meter.snap()
        reviews.post_statuses("solo", head, [row, {**row, "row": "lint"}, {**row, "row": "types"}], 1)
        per["statuses"] = meter.measure("statuses (3 verify rows, one status)", b)
        b = meter.snap()
        ready = reviews.mark_ready("solo", head)
        reviews.label("solo", ready.record.state, "builder")
        per["ready"] = meter.measure("ready (mark ready + labels)", b)

        # desks, end to end: two briefs worked in one pass, then a person merges one
        b = meter.snap()
        created, opened = len(gh.created.get(gh.user.login, [])), len(gh.pulls(OWNER, NAME))
        assay(["desk", "run", "builder", "--once"], env, tmp)
        worked = len(gh.pulls(OWNER, NAME)) - opened  # alpha, beta and gamma (claimed above): claim .. ready
        per["created"] = ((len(gh.created.get(gh.user.login, [])) - created) / worked, 0.0, 0.0)
        per["desk"] = meter.measure("desk pass working a brief, per brief", b, per=worked,
                                    note=f"{worked} briefs: claim .. ready, waiting")
        meter.rows[-1] = (meter.rows[-1][0], *(int(x) for x in per["desk"]), meter.rows[-1][4])  # type: ignore[assignment]
        [alpha] = [p for p in gh.pulls(OWNER, NAME) if p.head == "assay/alpha"]
        gh.merge(OWNER, NAME, alpha.number)
        b = meter.snap()
        assay(["desk", "run", "builder", "--once"], env, tmp)
        per["settle"] = meter.measure("merge settle (desk pass: alpha merged, beta polled)", b)
        b = meter.snap()
        assay(["desk", "run", "builder", "--once"], env, tmp)
        per["poll"] = meter.measure("desk pass, nothing changed (beta polled)", b)

        # the sweep of many briefs
        add_briefs(gh, args.briefs, args.waiting, args.held)
        total = args.briefs + 3
        b = meter.snap()
        assay(["sweep", "--json"], env, tmp)
        per["sweep-cold"] = meter.measure(f"sweep of {total} briefs, cold (empty cache)", b)
        b = meter.snap()
        trips = json.loads(assay(["sweep", "--json"], env, tmp))["round_trips"]
        per["sweep"] = meter.measure(f"sweep of {total} briefs, unchanged", b,
                                     note=f"git: {trips.get('ls-remote', 0)} ls-remote, {trips.get('fetch', 0)} "
                                          "fetch; 0 writes")
        gh.merge(OWNER, NAME, 1)
        b = meter.snap()
        assay(["sweep", "--json"], env, tmp)
        per["sweep-one"] = meter.measure(f"sweep of {total} briefs, one pull request merged", b)

        print(f"{'operation':58} {'REST':>6} {'GraphQL':>8} {'304s':>6}  notes")
        for label, rest, graphql, cached, note in meter.rows:
            print(f"{label:58} {rest:>6} {graphql:>8} {cached:>6}  {note}")
        arithmetic(per, args.waiting + args.held)


def arithmetic(per: dict[str, tuple[float, float, float]], watched: int) -> None:
    def cost(name: str) -> float:
        return per[name][0] + per[name][1]

    git_only = cost("claim") + cost("heartbeat") + cost("step")
    lifecycle = cost("desk") + cost("settle") - cost("poll")  # a brief worked, then settled when merged
    sweeps = 60  # one a minute
    changed = cost("sweep-one")
    print()
    print(f"claim, heartbeat and step cost {git_only:.0f} calls: any number of heartbeats and steps are free.")
    print(f"a brief's lifecycle (worked to ready, settled once merged) = {cost('desk'):.1f} + "
          f"{cost('settle') - cost('poll'):.0f} = {lifecycle:.1f} calls")
    print(f"a sweep of unchanged briefs = {cost('sweep'):.0f} calls ({per['sweep'][2]:.0f} free 304s for the "
          f"{watched} pull requests it watches); each pull request that changed since = {changed:.0f}")
    spare = BUDGET - sweeps * cost("sweep")
    print(f"inside {BUDGET} calls/hour: {sweeps} sweeps/hour x {cost('sweep'):.0f} = {sweeps * cost('sweep'):.0f}; "
          f"the rest, {spare:.0f}, pays for {spare / lifecycle:.0f} briefs/hour at {lifecycle:.1f} calls each")
    print(f"(each brief's pull request changes ~3 times, re-read once by the sweep each time: "
          f"{spare / (lifecycle + 3 * changed):.0f} briefs/hour with one sweeper)")
    print("a fleet of 1,000 desks fits while its briefs finish at that rate: desks spend quota per brief, "
          "not per desk or per heartbeat;")
    created = per["created"][0]
    minute, hour = Limits().per_minute, Limits().per_hour
    print(f"content-creating requests per brief (GitHub's secondary limits count these per token): {created:.1f}; "
          f"the fleet's budget ({minute}/min, {hour}/h of GitHub's 80 and 500) carries {hour / created:.0f} "
          f"briefs/hour per token (bursts of {minute / created:.0f} a minute)")
    print(f"a desk polling its own waiting brief pays {cost('poll'):.0f} per unchanged pass, 1 per pass after "
          "its pull request (or, on the fake, any answer embedding the repository) changed.")


if __name__ == "__main__":
    main()
