"""SIGKILL the CLI at the crash points of what people and agents write directly: renewals, the claim
transitions journaled with their entry (wait, wake, block, release, force-release), reviews and merges.

Each case arms one point in a real `python -m assay …` process, checks with plain git that the
write landed whole or not at all, runs the command again as a user would, and checks that the
forge ends in the same state either way, with nothing written twice.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import pytest

from assay.core.claims import Claims
from assay.core.custody import wait, wake_for_steering
from assay.core.forge.plain import PlainReviews
from assay.core.git import ForgeGit
from assay.core.retired import entry_path
from tests.conftest import Forge, Run, assay, git
from tests.journal_check import claim_chain, entries, invariants

BRIEF, DESK, PERSON = "alpha", "d", "ana"
SIGKILLED = -signal.SIGKILL


@dataclass
class World:
    """The forge, the environment every command of a case runs with, and a port for setting things up."""

    forge: Forge
    env: dict[str, str]
    port: ForgeGit

    def run(self, *args: str, crash_at: str | None = None, **env: str) -> Run:
        extra = {**self.env, **env}
        if crash_at:
            extra["ASSAY_CRASH_AT"] = crash_at
        return assay(*args, env=extra)

    def ok(self, *args: str, **env: str) -> Run:
        done = self.run(*args, **env)
        assert done.code == 0, (args, done.code, done.err)
        return done


@pytest.fixture
def world(forge: Forge) -> Iterator[World]:
    port = ForgeGit(forge.url)
    yield World(forge, {"ASSAY_FORGE": forge.url, "ASSAY_PERSON": PERSON}, port)
    port.close()


# -- reading the forge with plain git -------------------------------------------------------------

def chain_len(forge: Forge, ref: str) -> int:
    if not forge.tip(ref):
        return 0
    return len(git("--git-dir", str(forge.path), "rev-list", ref).split())


def review(forge: Forge) -> dict[str, object]:
    data: dict[str, object] = json.loads(git("--git-dir", str(forge.path), "show",
                                             f"refs/assay/reviews/{BRIEF}:review.json"))
    return data


def merges_of_brief(forge: Forge) -> list[str]:
    log = git("--git-dir", str(forge.path), "log", "--merges", "--format=%H", f"--grep=Assay-Brief: {BRIEF}",
              "refs/heads/main")
    return log.split()


def transition_entries(forge: Forge, kind: str, action: str | None) -> list[dict[str, object]]:
    """The journal entries of one claim transition: `wait`/`wake` entries, or `claim` entries by action."""
    return [e for e in entries(forge.path, BRIEF)
            if e["kind"] == kind and (action is None or (e.get("data") or {}).get("action") == action)]


def lands(point: str) -> bool:
    """Whether the write is on the forge when the process dies at `point`."""
    return point.partition(":")[0].endswith(".after-push")


# -- the claim transitions a command journals with its entry ---------------------------------------

@dataclass(frozen=True)
class Transition:
    """A command that moves the claim from `before` to `after` and journals one entry, in one push."""

    setup: Callable[[World], None]
    argv: tuple[str, ...]
    before: str
    after: str
    kind: str
    action: str | None = None
    rerun_landed: int = 3  # the exit of the same command run again once the change is on the forge
    rerun_not_landed: int = 0
    env: tuple[tuple[str, str], ...] = ()


def claimed(w: World) -> None:
    Claims(w.port).claim(BRIEF, DESK)


def claimed_and_waiting(w: World) -> None:
    claimed(w)
    wait(Claims(w.port), BRIEF, "manual", "setup", desk=DESK)


STEP_CTX = (("ASSAY_BRIEF", BRIEF), ("ASSAY_DESK", DESK), ("ASSAY_EPOCH", "1"))


def claimed_with_a_recorded_unsafe_step(w: World) -> None:
    claimed(w)
    w.ok("step", "run", "--name", "deploy", "--policy", "unsafe", "--", "true", **dict(STEP_CTX), ASSAY_RUN="r1")


TRANSITIONS: dict[str, Transition] = {
    "wait": Transition(claimed, ("wait", BRIEF, "--on", "manual", "--desk", DESK), "held", "waiting", "wait"),
    "wake": Transition(claimed_and_waiting, ("wake", BRIEF, "--desk", DESK), "waiting", "held", "wake"),
    "release": Transition(claimed, ("release", BRIEF, "--desk", DESK, "--outcome", "abandoned", "--reason", "no"),
                          "held", "abandoned", "claim", "release"),
    "force-release": Transition(claimed, ("release", BRIEF, "--force", "--reason", "stuck"), "held", "released",
                                "claim", "force-release"),
    # a replay that calls a recorded unsafe step as safe is a mismatch: the run blocks the brief (exit 5);
    # run again once blocked, it is fenced (exit 3)
    "block": Transition(claimed_with_a_recorded_unsafe_step,
                        ("step", "run", "--name", "deploy", "--policy", "safe", "--", "true"), "held", "blocked",
                        "claim", "block", rerun_landed=3, rerun_not_landed=5,
                        env=(*STEP_CTX, ("ASSAY_RUN", "r2"))),
}


def check_transition(w: World, point: str, t: Transition) -> None:
    t.setup(w)
    env = dict(t.env)
    cref, jref = f"refs/assay/claims/{BRIEF}", f"refs/assay/journal/{BRIEF}"
    claims_before, journal_before = chain_len(w.forge, cref), chain_len(w.forge, jref)
    assert w.forge.claim_json(BRIEF)["state"] == t.before

    crashed = w.run(*t.argv, crash_at=point, **env)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    landed = lands(point)
    # the claim change and its entry landed together, in one commit each, or neither did
    assert w.forge.claim_json(BRIEF)["state"] == (t.after if landed else t.before)
    assert len(transition_entries(w.forge, t.kind, t.action)) == int(landed)
    assert chain_len(w.forge, cref) == claims_before + landed
    assert chain_len(w.forge, jref) == journal_before + landed

    again = w.run(*t.argv, **env)
    assert again.code == (t.rerun_landed if landed else t.rerun_not_landed), again.err
    if landed:  # told why, and nothing more written
        assert t.after in again.err, again.err
    assert w.forge.claim_json(BRIEF)["state"] == t.after
    assert len(transition_entries(w.forge, t.kind, t.action)) == 1
    assert chain_len(w.forge, cref) == claims_before + 1
    assert chain_len(w.forge, jref) == journal_before + 1
    assert invariants(w.forge.path, BRIEF) == []
    last = claim_chain(w.forge.path, BRIEF)[-1]
    if last["state"] in ("released", "abandoned"):  # the next claim gets the next epoch
        w.ok("claim", BRIEF, "--desk", "other")
        assert w.forge.claim_json(BRIEF)["epoch"] == last["epoch"] + 1
        assert invariants(w.forge.path, BRIEF) == []


# -- renewals, reviews, merges -----------------------------------------------------------------------

def check_renew(w: World, point: str) -> None:
    claimed(w)
    ref = f"refs/assay/claims/{BRIEF}"
    argv = ("renew", BRIEF, "--desk", DESK, "--epoch", "1", "--lease", "900")
    crashed = w.run(*argv, crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    landed = lands(point)
    assert chain_len(w.forge, ref) == 1 + landed
    assert w.forge.claim_json(BRIEF)["lease_s"] == (900 if landed else 600)
    w.ok(*argv)
    assert chain_len(w.forge, ref) == 2 + landed
    assert [c["state"] for c in claim_chain(w.forge.path, BRIEF)] == ["held"] * (2 + landed)
    assert {c["epoch"] for c in claim_chain(w.forge.path, BRIEF)} == {1}
    assert w.forge.claim_json(BRIEF)["lease_s"] == 900
    assert invariants(w.forge.path, BRIEF) == []


def open_review(w: World, ready: bool) -> str:
    """A work branch one commit ahead of main, on the forge, and its review (marked ready at its tip)."""
    seed = w.forge.seed
    git("checkout", "-q", "-b", "work", cwd=seed)
    (seed / "feature.txt").write_text("the feature\n")
    git("add", "-A", cwd=seed)
    git("commit", "-q", "-m", "add the feature", cwd=seed)
    git("push", "-q", w.forge.url, f"HEAD:refs/heads/assay/{BRIEF}", cwd=seed)
    head = git("rev-parse", "HEAD", cwd=seed).strip()
    reviews = PlainReviews(w.port)
    reviews.open(BRIEF, f"assay/{BRIEF}", "Alpha", head)
    if ready:
        reviews.mark_ready(BRIEF, head)
    return head


def check_comment(w: World, point: str) -> None:
    open_review(w, ready=False)
    ref = f"refs/assay/reviews/{BRIEF}"
    crashed = w.run("review", "comment", BRIEF, "looks right", crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    assert not lands(point)  # a comment is not idempotent: only this side may be re-run blindly
    assert review(w.forge)["comments"] == [] and chain_len(w.forge, ref) == 1
    w.ok("review", "comment", BRIEF, "looks right")
    comments = review(w.forge)["comments"]
    assert isinstance(comments, list) and [c["text"] for c in comments] == ["looks right"]
    assert chain_len(w.forge, ref) == 2


def check_approve(w: World, point: str) -> None:
    open_review(w, ready=False)
    ref = f"refs/assay/reviews/{BRIEF}"
    crashed = w.run("review", "approve", BRIEF, crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    landed = lands(point)
    assert review(w.forge).get("approvals", []) == ([PERSON] if landed else [])
    assert chain_len(w.forge, ref) == 1 + landed
    w.ok("review", "approve", BRIEF)
    assert review(w.forge)["approvals"] == [PERSON]
    assert chain_len(w.forge, ref) == 2  # approving again changed nothing


def check_merge(w: World, point: str) -> None:
    head = open_review(w, ready=True)
    main = w.forge.tip("refs/heads/main")
    ref = f"refs/assay/reviews/{BRIEF}"
    reviews_before = chain_len(w.forge, ref)
    crashed = w.run("review", "merge", BRIEF, crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    landed = lands(point)
    # main and the review moved together, or neither did
    assert (w.forge.tip("refs/heads/main") != main) == landed
    assert review(w.forge)["state"] == ("merged" if landed else "ready")
    assert chain_len(w.forge, ref) == reviews_before + landed
    again = w.run("review", "merge", BRIEF)
    if landed:
        assert again.code == 3 and "already on main" in again.err, again.err
    else:
        assert again.code == 0, again.err
    tip = w.forge.tip("refs/heads/main")
    assert merges_of_brief(w.forge) == [tip]
    parents = git("--git-dir", str(w.forge.path), "rev-list", "--parents", "-n1", str(tip)).split()[1:]
    assert parents == [main, head]
    merged = review(w.forge)
    assert merged["state"] == "merged" and merged["merged_commit"] == tip
    assert chain_len(w.forge, ref) == reviews_before + 1


def check_retire(w: World, point: str) -> None:
    claimed(w)
    w.ok("release", BRIEF, "--desk", DESK, "--outcome", "done")
    refs = [f"refs/assay/claims/{BRIEF}", f"refs/assay/journal/{BRIEF}"]
    tips = {ref: w.forge.tip(ref) for ref in refs}
    crashed = w.run("retire", crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    landed = lands(point)
    # the index and the deletions landed together, or nothing did
    assert (w.forge.tip("refs/assay/retired") is not None) == landed
    assert all((w.forge.tip(ref) is None) == landed for ref in refs)
    again = w.ok("retire", "--json")
    assert json.loads(again.out)["retired"] == ([] if landed else [BRIEF])
    assert all(w.forge.tip(ref) is None for ref in refs)
    assert chain_len(w.forge, "refs/assay/retired") == 1  # retired once
    record = json.loads(git("--git-dir", str(w.forge.path), "show", f"refs/assay/retired:{entry_path(BRIEF)}"))
    assert record["refs"] == tips
    assert w.run("claim", BRIEF, "--desk", "other").code == 3  # still done


def check_spawn(w: World, point: str) -> None:
    """A person spawns a child brief: main moves by exactly one commit adding it, whether the first try was cut
    off before or after its push."""
    before = chain_len(w.forge, "refs/heads/main")
    crashed = w.run("brief", "spawn", "Split the parser", "--parent", BRIEF, "--key", "k1", crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    landed = lands(point)
    assert chain_len(w.forge, "refs/heads/main") == before + landed
    child = w.ok("brief", "spawn", "Split the parser", "--parent", BRIEF, "--key", "k1").out.strip()
    assert chain_len(w.forge, "refs/heads/main") == before + 1  # one child, written once
    files = git("--git-dir", str(w.forge.path), "ls-tree", "--name-only", "main", "briefs/").split()
    assert [f for f in files if f.startswith(f"briefs/{BRIEF}-")] == [f"briefs/{child}.md"]


def check_steer(w: World, point: str) -> None:
    """`assay steer` on a brief waiting on its review, cut off after its entry and before the wake: the entry is
    on the forge once and the claim still waits; the desk's look (`wake_for_steering`, each pass) wakes it for a
    round once, and looking again changes nothing."""
    claimed(w)
    wait(Claims(w.port), BRIEF, "review", "setup", desk=DESK)
    crashed = w.run("steer", BRIEF, "Use the staging database", crash_at=point)
    assert crashed.code == SIGKILLED, (point, crashed.code, crashed.err)
    assert len(transition_entries(w.forge, "steer", None)) == 1
    assert claim_chain(w.forge.path, BRIEF)[-1]["state"] == "waiting"
    assert wake_for_steering(Claims(w.port), BRIEF, DESK) is not None
    assert wake_for_steering(Claims(w.port), BRIEF, DESK) is None  # woken: nothing more to do
    [woken] = [e for e in entries(w.forge.path, BRIEF) if e["kind"] == "wake"]
    assert (woken.get("data") or {}).get("round") and claim_chain(w.forge.path, BRIEF)[-1]["state"] == "held"
    assert invariants(w.forge.path, BRIEF) == []


# -- the cases ------------------------------------------------------------------------------------

Check = Callable[[World, str], None]
SCENARIOS: dict[str, Check] = {
    **{what: partial(check_transition, t=t) for what, t in TRANSITIONS.items()},
    "renew": check_renew,
    "comment": check_comment,
    "approve": check_approve,
    "merge": check_merge,
    "retire": check_retire,
    "spawn": check_spawn,
    "steer": check_steer,
}

# case -> (the crash points armed, one process each; the scenario that drives the command)
CASES: dict[str, tuple[list[str], str]] = {
    **{f"{what}.{when}-push": ([f"{what}.{when}-push"], what)
       for what in ("renew", "wait", "wake", "block", "release", "force-release", "merge", "retire", "spawn")
       for when in ("before", "after")},
    "review.before-push:comment": (["review.before-push:comment"], "comment"),
    "review.after-push:approve": (["review.after-push:approve"], "approve"),
    "steer.after-entry": (["steer.after-entry"], "steer"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cli_crash_and_recover(world: World, case: str) -> None:
    points, scenario = CASES[case]
    (point,) = points
    SCENARIOS[scenario](world, point)
