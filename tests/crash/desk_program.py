"""A desk program for the crash suite: durable steps of every policy, run to completion or to a crash point.

    python desk_program.py FORGE EFFECTS_LOG

Every effect appends one line `<step> <idempotency key>` to EFFECTS_LOG, so the
suite can count executions. After an outcome-unknown refusal the program does
what an agent should: it inspects (a safe `check_<step>` that reads the log)
and only calls the step again, deliberately, if the effect is not there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.steps import Session, open_session
from assay.errors import IllegalTransition, OutcomeUnknown

BRIEF, DESK = "alpha", "crashdesk"


def effect(log: Path, name: str) -> Any:
    def run(key: str) -> Any:
        with log.open("a") as fh:
            fh.write(f"{name} {key}\n")
        return {"done": name}
    return run


def inspect(log: Path, name: str, key: str) -> bool:
    """Look at the world (the log) for the effect; the look itself is logged so the suite can count it."""
    seen = any(line.split()[0] == name for line in log.read_text().splitlines())
    with log.open("a") as fh:
        fh.write(f"check_{name} {key}\n")
    return seen


def unsafe(s: Session, log: Path, name: str) -> None:
    try:
        s.step(name, effect(log, name), policy="unsafe")
    except OutcomeUnknown:
        seen = s.step(f"check_{name}", lambda key: inspect(log, name, key), policy="safe", reuse=False)
        if not seen:
            s.step(name, effect(log, name), policy="unsafe")  # the deliberate second call


def main(forge: str, log: Path) -> int:
    claims = Claims(ForgeGit(forge))
    try:
        held = claims.claim(BRIEF, DESK, singleton=True)
    except IllegalTransition:
        print("already done")
        return 0
    s = open_session(claims, BRIEF, DESK, held.record.epoch)
    s.begin_run()
    s.step("prepare", effect(log, "prepare"), policy="safe")
    s.step("charge", effect(log, "charge"), input={"amount": 42}, policy="idempotent")
    s.now()
    unsafe(s, log, "deploy")
    for i in range(5):
        s.step("tick", effect(log, "tick"), input=i, policy="safe")
    s.checkpoint("state", b"after ticks")
    unsafe(s, log, "notify")
    s.end_run()
    claims.release(BRIEF, DESK, outcome="done", epoch=held.record.epoch)
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
