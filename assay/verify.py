"""Verify rows: main's own commands, run by Assay on a clean checkout of the pushed commit, with evidence.

Never in the agent's worktree and never from the branch's copy of the brief: what is
judged is exactly what was pushed, by the rows the branch cannot edit.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

from assay.briefs import Brief
from assay.git import ForgeGit
from assay.steps import Session

TAIL_BYTES = 1000


def verify(git: ForgeGit, session: Session, brief: Brief, head: str, checkout: Path, timeout_s: int,
           env: dict[str, str]) -> dict[str, Any]:
    """Run every row at `head` in `checkout`; journal each row's evidence; return the verdict."""
    clean = git.worktree(checkout, head)
    clean.git("checkout", "-q", "--force", "--detach", head)
    clean.git("clean", "-q", "-ffdx")
    failures = []
    for row in brief.verify:
        started = time.monotonic()
        try:
            proc = subprocess.run(row.run, shell=True, cwd=checkout, capture_output=True,
                                  timeout=min(row.timeout_s, timeout_s), env=env)
            code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = -1, (exc.stdout or b"") + b"\n(timed out)"
        passed = code == row.expect_exit
        session.journal.add("verify", sync=False, data={
            "row": row.id, "command": row.run, "head": head, "exit_code": code, "expect_exit": row.expect_exit,
            "passed": passed, "duration_ms": int((time.monotonic() - started) * 1000),
            "output_sha256": hashlib.sha256(output).hexdigest(),
            "tail": output[-TAIL_BYTES:].decode("utf-8", "replace")})
        if not passed:
            failures.append(f"{row.id} exited {code}, expected {row.expect_exit}")
    session.flush()
    return {"passed": not failures, "summary": "; ".join(failures) or "all verify rows passed"}
