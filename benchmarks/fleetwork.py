"""Fleet correctness at work: overlapping, duplicate, already-done and only-together-broken briefs, with the checks
of `touches:`, `done_when:`, superseded reviews and `assay land` on, then off; on a forge on disk and on the fake
GitHub.

    python benchmarks/fleetwork.py [--briefs 60] [--desks 8] [--forge disk|github|both]

A forge on disk (or `acme/app` on the fake GitHub; `both`, the default, prints a table for each), N real desks
(`assay desk run`, the scripted agent writing the files its brief names) and a reviewer that lands each review as
soon as it is ready (`assay land`; with the checks off, `assay review merge` of each ready review). On GitHub with
the checks on, main requires a merge queue: `assay land` queues, and the reviewer plays CI on each merge group
(`assay verify --group`, its verdict a commit status); with them off there is no queue. The scenario is
`tests/helpers/fleetrun.py`'s: a third of the briefs in groups of four appending to one shared file each, pairs
green alone but red together, duplicates, work main holds already, the rest on files of their own. Judged
afterwards with plain git: briefs whose files overlap that were live at once, main's commits after which a merged
brief's verify row fails, duplicate or already-done work offered as a ready review, briefs settled done without an
agent run, reviews left ready that cannot merge, new rounds, agent runs and agent seconds (from the journals' agent
results). On GitHub, what merged and the review threads come from the fake's pull requests, and "marked ready with
a thread unanswered" is not judged (always 0; see `tests/helpers/fleetgithub.py`).

The floor: one raw `git push` of a new commit to a small bare repository (median of 9), measured in the same
run; the wall time per brief is printed against it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet import floor_push  # noqa: E402
from tests.fakegithub import FakeGitHub  # noqa: E402
from tests.helpers.fleetgithub import GitHubFleet  # noqa: E402
from tests.helpers.fleetrun import Fleet, Outcome  # noqa: E402

ROWS: list[tuple[str, Callable[[Outcome, float], object]]] = [
    ("overlapping briefs in flight at once", lambda o, _: len(o.overlapping_in_flight)),
    ("merges that broke main's verify rows", lambda o, _: len(o.breaking_merges)),
    ("duplicate or done work offered as ready", lambda o, _: len(o.duplicates_ready)),
    ("already-done briefs settled without an agent", lambda o, _: len(o.done_without_agent)),
    ("reviews left ready that cannot merge", lambda o, _: len(o.ready_unmerged)),
    ("review notes written / answered", lambda o, _: f"{o.threads_noted}/{o.threads_answered}"),
    ("marked ready with a thread unanswered", lambda o, _: len(o.ready_with_open_thread)),
    ("new rounds", lambda o, _: o.rounds), ("agent runs", lambda o, _: o.agent_runs),
    ("agent seconds", lambda o, _: o.agent_s), ("wall seconds", lambda o, _: o.seconds),
    ("wall per brief / floor", lambda o, base: round(o.seconds / o.briefs / base, 1))]
TITLES = {"disk": "forge on disk", "github": "fake GitHub (merge queue when checks on)"}


def run(forge: str, root: Path, briefs: int, desks: int, checks: bool) -> Outcome:
    """One fleet run on a fresh forge of its kind (a fake GitHub of its own)."""
    root.mkdir()
    if forge == "disk":
        return Fleet(root, briefs, desks, checks).run(timeout_s=1800)
    with FakeGitHub(root) as fake:
        return GitHubFleet(root, briefs, desks, checks, fake).run(timeout_s=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--briefs", type=int, default=60)
    parser.add_argument("--desks", type=int, default=8)
    parser.add_argument("--forge", choices=("disk", "github", "both"), default="both")
    args = parser.parse_args()
    forges = ("disk", "github") if args.forge == "both" else (args.forge,)
    results: dict[str, dict[str, Outcome]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = floor_push(Path(tmp))
        for forge in forges:
            results[forge] = {}
            for checks in (True, False):
                key = "on" if checks else "off"
                results[forge][key] = run(forge, Path(tmp) / f"{forge}-{key}", args.briefs, args.desks, checks)
    print(f"{args.briefs} briefs, {args.desks} desks; floor (one raw git push): {base * 1000:.1f} ms")
    for forge, outcomes in results.items():
        print(f"\n{TITLES[forge]:48} {'checks on':>10} {'checks off':>10}")
        for label, value in ROWS:
            print(f"{label:48} {value(outcomes['on'], base)!s:>10} {value(outcomes['off'], base)!s:>10}")
    print(json.dumps({forge: {k: v.view() for k, v in outcomes.items()} for forge, outcomes in results.items()}))


if __name__ == "__main__":
    main()
