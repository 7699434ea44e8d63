"""Named crash points: `ASSAY_CRASH_AT=<point>[:<step>]` SIGKILLs the process there
(its whole process group with `ASSAY_CRASH_SCOPE=group`).

They sit at the durable boundaries so the crash suite can prove that a process
killed at any of them loses nothing and repeats no unsafe effect. `POINTS` is the
whole list (docs/crash-points.md is made from it); naming any other point is a bug.
"""

from __future__ import annotations

import os
import signal
import sys

# every compare-and-swap write (chain.push) is framed by <what>.before-push and <what>.after-push
PUSHES = {
    "claim": "a desk or a person claims a brief (claims.py)",
    "takeover": "a desk takes over its own orphaned claim, with a new epoch (claims.py)",
    "footprint": "a desk keeps the footprint of a brief that declared none, from its first diff (claims.py)",
    "renew": "a heartbeat renews a lease, the claim alone (agent.py)",
    "renew-batch": "a host's heartbeat renews every claim its desks hold, in one atomic push (claims.py, hostbeat.py)",
    "journal": "journal entries, with a renewal of the claim in the same atomic push (journal/writer.py)",
    "wait": "a claim parks on a condition, with its journal entry (custody.py, work.py)",
    "wake": "a waiting claim is woken, with its journal entry (custody.py, desk/loop.py)",
    "block": "a claim is blocked for a person, with its journal entry (custody.py, steps.py)",
    "release": "a claim ends released, done or abandoned, with its journal entry (custody.py, desk/loop.py)",
    "force-release": "a person takes a claim away, with its journal entry (custody.py)",
    "expire": "a sweeper expires a claim whose tip stood still past its lease, with its journal entry (sweep.py)",
    "sweeper": "a sweeper records its observations and findings at refs/assay/sweeper (observations.py, for sweep.py)",
    "review": "a review record changes: open, comment, approve, close (forge/plain.py)",
    "merge": "main and the review record move together in one atomic push (forge/plain.py)",
    "retire": "done briefs' refs are deleted as the retired index records them, in one atomic push (retired.py)",
    "spawn": "a child brief is added to main, a compare-and-swap on main (custody.py)",
}
POINTS: dict[str, str] = {
    **{f"{what}.{when}-push": why for what, why in PUSHES.items() for when in ("before", "after")},
    "journal.group-flush": "before pushing a batch of several entries (named by its first step)",
    "push-group.before-push": "a host's push round leader holds its requests; nothing pushed (pushgroup.py)",
    "push-group.after-push": "a host's push round landed; no requester is answered yet (pushgroup.py)",
    "journal.after-intent": "an intent is on the forge; its effect has not run",
    "journal.after-checkpoint": "a checkpoint is on the forge",
    "step.before-execute": "the intent is durable; the effect is about to run",
    "step.after-execute": "the effect ran; its result is not journaled",
    "step.after-result": "the result is journaled",
    "worktree.spare-taken": "a spare worktree is renamed out of its pool for a brief; not clean yet (worktrees.py)",
    "worktree.spare-cleaned": "the spare is clean at the brief's commit; not at the brief's path yet",
    "worktree.spare-placed": "the spare is at the brief's path; its record, locked, does not point there yet",
    "worktree.giving-back": "a worktree's record is locked and points into the pool; the worktree is not there yet",
    "worktree.given-back": "a worktree is in its pool; its record is still locked",
    "worktree.discarding": "a worktree that is no spare is renamed aside, its record pointing there; neither removed",
    "push.after-commit": "a desk committed its work with its epoch's trailer; the branch is not pushed (work.py; "
                         "its `:<step>` is the brief)",
    "steer.after-entry": "steering is journaled; the waiting brief it is for is not woken yet (custody.py)",
    "sweep.after-observe": "a sweeper's observations are on the forge; nothing they call for is done yet",
    "recovery.after-load": "a recovery read the journal and found an interrupted intent; nothing decided",
    "recovery.before-outcome-unknown": "about to journal outcome_unknown for an interrupted unsafe step",
    "recovery.after-outcome-unknown": "outcome_unknown is journaled; the refusal is not",
}


def crash_point(point: str, step: str | None = None) -> None:
    if point not in POINTS:
        raise RuntimeError(f"unknown crash point {point!r}: add it to assay.core.crash.POINTS")
    spec = os.environ.get("ASSAY_CRASH_AT")
    if not spec:
        return
    name, _, wanted_step = spec.partition(":")
    if name != point or (wanted_step and wanted_step != step):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if os.environ.get("ASSAY_CRASH_SCOPE") == "group":  # the whole machine "dies": desk, agent and all
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
