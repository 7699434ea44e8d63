"""Child briefs: an agent spawns them from inside journaled steps (named by the step's key, so a parent killed
while spawning still has one child each), parks its brief on them holding no compute, and is worked on once
they end, with their outcome in its prompt."""

from __future__ import annotations

from pathlib import Path

from assay.core.claims import Claims
from tests.conftest import Forge, assay, git
from tests.helpers.desks import DESK, brief, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants

BODY = r"$(printf 'Do {n}.\n\n\140\140\140assay-script\nwrite {n}.txt {n}\n\140\140\140\n')"


def spawn(n: str) -> str:
    return (f'$(assay step run --name spawn-{n} --policy idempotent -- assay brief spawn "Child {n}" --label work '
            f'--body "{BODY.format(n=n)}")')


def children(forge: Forge) -> list[str]:
    names = git("--git-dir", str(forge.path), "ls-tree", "--name-only", "main", "briefs/").split()
    return sorted(n.removeprefix("briefs/").removesuffix(".md") for n in names if n.startswith("briefs/plan-"))


def test_a_parent_killed_twice_while_spawning_has_two_children_and_goes_on_when_they_end(work: Forge,
                                                                                         tmp_path: Path) -> None:
    mark = tmp_path / "asked-to-wait"
    line = (f"run a={spawn('a')} && b={spawn('b')} && "
            f'{{ test -e {mark} || {{ touch {mark} && assay wait "$ASSAY_BRIEF" --on "briefs:$a,$b"; }}; }}')
    publish(work, {"briefs/plan.md": brief("Plan", [line, "write plan.txt done"], "test -f plan.txt"),
                   "desks/builder.yaml": DESK.format(name="builder", attempts=3)})  # 2 runs die, the 3rd goes on
    for _ in range(2):  # killed right after a child is pushed to main: first a's, then b's
        killed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="spawn.after-push")
        assert killed.code == -9, killed.out + killed.err
    parked = run_desk(work, "builder", tmp_path)
    assert parked.code == 0 and "plan is waiting on briefs:" in parked.out, parked.out + parked.err
    kids = children(work)
    assert len(kids) == 2  # one child each, however many times the parent died
    waits = [e["data"] for e in entries(work.path, "plan") if e["kind"] == "wait"]
    assert waits and waits[-1]["by"] == "agent:builder"  # parked by its desk, over the socket
    assert claim_chain(work.path, "plan")[-1]["wait"] == {"on": f"briefs:{kids[0]},{kids[1]}"} or \
        claim_chain(work.path, "plan")[-1]["wait"] == {"on": f"briefs:{kids[1]},{kids[0]}"}
    for _ in range(2):  # the children are worked to ready reviews (they were on main after the pass began)
        run_desk(work, "builder", tmp_path)
    for kid in kids:
        assert claim_chain(work.path, kid)[-1]["state"] == "waiting", kid
        assert assay("review", "merge", kid, "--forge", work.url).code == 0
    assert claim_chain(work.path, "plan")[-1]["state"] == "waiting"  # holding no compute meanwhile
    outs = [run_desk(work, "builder", tmp_path).out for _ in range(2)]  # children done; then the parent wakes
    assert any("its child briefs have ended; working it on" in o for o in outs), outs
    assert claim_chain(work.path, "plan")[-1]["state"] == "waiting" and "review ready" in "".join(outs)
    prompts = sorted((p for p in (tmp_path / "state").rglob("plan-*.md") if p.parent.name == "prompts"),
                     key=lambda p: p.stat().st_mtime)  # the agents' prompts, not the brief files in worktrees
    told = prompts[-1].read_text()
    assert "## Child briefs" in told and all(f"`{k}`: done, merged as" in told for k in kids), told
    assert invariants(work.path, "plan") == []


def test_a_wait_on_briefs_is_met_when_each_is_done_or_blocked() -> None:
    from assay.core.custody import wait_met

    wait = {"on": "briefs:a,b"}
    assert wait_met(wait, None, 0, lambda names: {"a": "done", "b": "held"}) is None
    assert wait_met(wait, None, 0, lambda names: {"a": "done"}) is None  # b never claimed yet
    assert wait_met(wait, None, 0, lambda names: {"a": "done", "b": "done"}) == ("wake", "a, b are done")
    assert wait_met(wait, None, 0, lambda names: {"a": "done", "b": "blocked"}) == ("wake", "a, b: b blocked")
    assert wait_met(wait, None, 0) is None  # no states to judge by: not met


def test_a_wait_on_briefs_names_real_brief_ids(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    bad = assay("wait", "alpha", "--on", "briefs:ok,Not_OK", "--forge", forge.url)
    assert bad.code == 2 and "'Not_OK' in 'briefs:ok,Not_OK' is not a brief id" in bad.err
    assert claim_chain(forge.path, "alpha")[-1]["state"] == "held"  # nothing written
