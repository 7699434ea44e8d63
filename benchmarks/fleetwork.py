"""Fleet correctness at work: overlapping, duplicate, already-done and only-together-broken briefs, with the checks
of `touches:`, `done_when:`, superseded reviews and `assay land` on, then off.

    python benchmarks/fleetwork.py [--briefs 60] [--desks 8]

A forge on disk, N real desks (`assay desk run`, the scripted agent writing the files its brief names) and a
reviewer that lands each review as soon as it is ready (`assay land`; with the checks off, `assay review merge`
of each ready review). The scenario is `tests/helpers/fleetrun.py`'s: a third of the briefs in groups of four
appending to one shared file each, pairs green alone but red together, duplicates, work main holds already, the
rest on files of their own. Judged afterwards with plain git: briefs whose files overlap that were live at once,
main's commits after which a merged brief's verify row fails, duplicate or already-done work offered as a ready
review, briefs settled done without an agent run, reviews left ready that cannot merge, new rounds, agent runs and
agent seconds (from the journals' agent results).

The floor: one raw `git push` of a new commit to a small bare repository (median of 9), measured in the same
run; the wall time per brief is printed against it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet import floor_push  # noqa: E402
from tests.helpers.fleetrun import Fleet  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--briefs", type=int, default=60)
    parser.add_argument("--desks", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = floor_push(Path(tmp))
        results = {}
        for checks in (True, False):
            root = Path(tmp) / ("on" if checks else "off")
            root.mkdir()
            results["on" if checks else "off"] = Fleet(root, args.briefs, args.desks, checks).run(timeout_s=1800)
    print(f"{args.briefs} briefs, {args.desks} desks; floor (one raw git push): {base * 1000:.1f} ms")
    rows = [("overlapping briefs in flight at once", lambda o: len(o.overlapping_in_flight)),
            ("merges that broke main's verify rows", lambda o: len(o.breaking_merges)),
            ("duplicate or done work offered as ready", lambda o: len(o.duplicates_ready)),
            ("already-done briefs settled without an agent", lambda o: len(o.done_without_agent)),
            ("reviews left ready that cannot merge", lambda o: len(o.ready_unmerged)),
            ("review notes written / answered", lambda o: f"{o.threads_noted}/{o.threads_answered}"),
            ("marked ready with a thread unanswered", lambda o: len(o.ready_with_open_thread)),
            ("new rounds", lambda o: o.rounds), ("agent runs", lambda o: o.agent_runs),
            ("agent seconds", lambda o: o.agent_s), ("wall seconds", lambda o: o.seconds),
            ("wall per brief / floor", lambda o: round(o.seconds / o.briefs / base, 1))]
    print(f"{'':48} {'checks on':>10} {'checks off':>10}")
    for label, value in rows:
        print(f"{label:48} {value(results['on']):>10} {value(results['off']):>10}")
    print(json.dumps({k: v.view() for k, v in results.items()}))


if __name__ == "__main__":
    main()
