"""Verify rows: main's own commands, run by Assay on a clean checkout of the pushed commit, with evidence.

Never in the agent's worktree and never from the branch's copy of the brief: what is
judged is exactly what was pushed, by the rows the branch cannot edit.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from assay.core.briefs import DEFAULT_VERIFY_TIMEOUT_S, Brief, VerifyRow, brief_id_from_path, parse_brief
from assay.core.envs import scrubbed_env
from assay.core.git import ForgeGit
from assay.core.steps import Session
from assay.desk import isolation, procs
from assay.errors import UsageError

TAIL_BYTES = 1000


def run_row(row: VerifyRow, cwd: Path, timeout_s: int, env: dict[str, str]) -> dict[str, Any]:
    """Run one verify row in `cwd`: its evidence (exit code, output digest and tail, duration).

    The row runs under a keeper (procs.run), killed whole when the row's command ends or times out: nothing it
    started lives on, and a background child holding its output open does not hold the verdict up."""
    started = time.monotonic()
    argv = [*isolation.prefix(), "/bin/sh", "-c", row.run]  # the branch's code: it may not see the desk's /proc
    code, output = procs.run(argv, cwd, env, timeout_s=min(row.timeout_s, timeout_s))
    return {"row": row.id, "command": row.run, "exit_code": code, "expect_exit": row.expect_exit,
            "passed": code == row.expect_exit, "duration_ms": int((time.monotonic() - started) * 1000),
            "output_sha256": hashlib.sha256(output).hexdigest(),
            "tail": output[-TAIL_BYTES:].decode("utf-8", "replace")}


def verify(git: ForgeGit, session: Session, brief: Brief, head: str, checkout: Path, timeout_s: int,
           env: dict[str, str], landed_on: str = "") -> dict[str, Any]:
    """Run every row at `head` in `checkout`; journal each row's evidence (it rides the next push: the statuses'
    intent or the review's); return the verdict. With `landed_on` (the main a round woken as main moved merged in),
    the rows of every brief landed on it run too, each from main's copy (journaled in one note, `landed_rows`): they
    must hold after this merge as well."""
    failures = []
    with git.clean_checkout(checkout, head):
        for row in brief.verify:
            evidence = run_row(row, checkout, timeout_s, env)
            session.journal.add("verify", sync=False, data={"head": head, **evidence})
            if not evidence["passed"]:
                failures.append(f"{row.id} exited {evidence['exit_code']}, expected {row.expect_exit}")
        rows = [{"brief": other.id, **run_row(row, checkout, row.timeout_s, {**scrubbed_env(), **dict(other.env)})}
                for other in landed_briefs(landed_on, checkout, brief.id) for row in other.verify] if landed_on else []
    if landed_on:
        session.journal.add("note", sync=False, data={"landed_rows": {"main": landed_on, "head": head, "rows": [
            {k: r.get(k) for k in ("brief", "row", "command", "exit_code", "passed", "tail")} for r in rows]}})
        failures += [f"{r['brief']}/{r['row']} (landed on main) exited {r['exit_code']}" for r in rows
                     if not r["passed"]]
    return {"passed": not failures, "summary": "; ".join(failures) or "all verify rows passed"}


def on_main(git: ForgeGit, brief: Brief, main: str, checkout: Path, timeout_s: int,
            env: dict[str, str]) -> dict[str, Any]:
    """Run the brief's `done_when:` rows on a clean checkout of main's commit `main`: whether the work is there
    already. The verdict holds each row's evidence (as a verify row's), so the step's result is the evidence."""
    with git.clean_checkout(checkout, main):
        rows = [run_row(row, checkout, timeout_s, env) for row in brief.done_when]
    failures = [f"{r['row']} exited {r['exit_code']}, expected {r['expect_exit']}" for r in rows if not r["passed"]]
    return {"main": main, "passed": bool(rows) and not failures, "rows": rows,
            "summary": "; ".join(failures) or "all done_when rows passed"}


def verify_here(brief_file: Path, cwd: Path,
                timeout_s: int = DEFAULT_VERIFY_TIMEOUT_S) -> tuple[Brief, list[dict[str, Any]]]:
    """Run the rows of `brief_file` (the base branch's copy, which the change cannot edit) in `cwd`, as CI does
    on a pull request; forge credentials are kept out of the rows' environment."""
    try:
        text = brief_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read brief file {brief_file}: {exc}",
                         hint="pass the base branch's copy, e.g. git show BASE:briefs/ID.md > brief.md") from None
    brief = parse_brief(text, str(brief_file), brief_id_from_path(brief_file))
    return brief, [run_row(row, cwd, timeout_s, scrubbed_env()) for row in brief.verify]


def briefs_in(base: str, cwd: Path, span: str = "") -> list[str]:
    """The briefs whose commits are in BASE..HEAD here (their `Assay-Brief:` trailers), in order of first commit;
    with `span`, in that revision range instead (`BASE` alone: every brief landed on BASE)."""
    import subprocess

    span = span or f"{base}..HEAD"
    proc = subprocess.run(["git", "log", "--reverse", "--format=%(trailers:key=Assay-Brief,valueonly)", span],
                          cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        said = next((line for line in proc.stderr.splitlines() if line.strip()), f"git exited {proc.returncode}")
        raise UsageError(f"cannot read the commits {span} here: {said}",
                         hint="run it in a checkout that holds BASE (fetch-depth: 0)")
    return list(dict.fromkeys(line.strip() for line in proc.stdout.splitlines() if line.strip()))


def landed_briefs(main: str, cwd: Path, skip: str = "") -> list[Brief]:
    """The briefs landed on `main` (an `Assay-Brief:` trailer in its history) whose file `main` still holds, from
    main's copy, but `skip`: their rows must hold on whatever lands next."""
    import subprocess

    out = []
    for brief_id in briefs_in(main, cwd, main):
        if brief_id == skip:
            continue
        shown = subprocess.run(["git", "show", f"{main}:briefs/{brief_id}.md"], cwd=cwd, capture_output=True)
        if shown.returncode == 0:
            out.append(parse_brief(shown.stdout.decode("utf-8", "replace"), f"{main[:10]}:briefs/{brief_id}.md",
                                   brief_id))
    return out


def verify_group(base: str, cwd: Path,
                 timeout_s: int = DEFAULT_VERIFY_TIMEOUT_S) -> list[tuple[str, list[dict[str, Any]]]]:
    """A merge group's check: the rows of every brief whose commits the group holds (BASE..HEAD), then those of every
    brief landed on BASE already (they must hold after the merge too: two reviews green alone can break main
    together), each from BASE's copy of its brief (which the group cannot edit), run here on the group's head; a
    brief of the group that BASE lacks is said, not run. Returns (brief, rows) pairs, with no rows for a brief BASE
    lacks."""
    import subprocess

    out: list[tuple[str, list[dict[str, Any]]]] = []
    group = briefs_in(base, cwd)
    landed = [b for b in briefs_in(base, cwd, base) if b not in group]
    for brief_id in [*group, *landed]:
        shown = subprocess.run(["git", "show", f"{base}:briefs/{brief_id}.md"], cwd=cwd, capture_output=True)
        if shown.returncode != 0:
            if brief_id in group:
                out.append((brief_id, []))
            continue
        brief = parse_brief(shown.stdout.decode("utf-8", "replace"), f"{base[:10]}:briefs/{brief_id}.md", brief_id)
        out.append((brief_id, [run_row(row, cwd, timeout_s, scrubbed_env()) for row in brief.verify]))
    return out
