"""`assay demo`: a forge on disk, six briefs, and desks racing for them as real processes.

Each desk is a separate `python -m assay.demo desk …` process. Desks take ready
briefs (dependencies done) in priority order; a lost race is exit-3 business as
usual and the desk moves on. The summary is read back from the forge.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from assay.briefs import Brief, lint_folder
from assay.claims import Claims
from assay.errors import AssayError, Conflict, UsageError
from assay.git import ForgeGit, WorkRepo, init_bare

MARKER = ".assay-demo"
BRIEFS = {
    "setup-ci": ("Set up CI", 1, [], "true"),
    "fix-login": ("Fix the login redirect", 2, ["setup-ci"], "test -n login"),
    "add-search": ("Add search to the catalogue", 3, ["setup-ci"], "true"),
    "rate-limit": ("Rate-limit the public API", 3, ["fix-login"], "true"),
    "docs-api": ("Document the API", 5, ["add-search", "rate-limit"], "true"),
    "cleanup": ("Remove dead feature flags", 7, [], "true"),
}


def brief_text(title: str, priority: int, deps: list[str], verify: str) -> str:
    dep_line = f"depends_on: [{', '.join(deps)}]\n" if deps else ""
    return (f"---\ntitle: {title}\npriority: {priority}\n{dep_line}labels: [demo]\n"
            f"verify:\n  - id: check\n    run: \"{verify}\"\n---\n{title}.\n")


def prepare(directory: Path) -> tuple[Path, Path]:
    """Lay out DIR/forge.git with main holding the briefs; refuse a folder that is not ours."""
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise UsageError(f"{directory} is not empty and is not an earlier demo",
                             hint="pass --dir with a new or empty folder")
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by `assay demo`; safe to delete\n")
    forge = directory / "forge.git"
    init_bare(forge)
    seed = directory / "seed"
    repo = WorkRepo.init(seed)
    (seed / "briefs").mkdir()
    for brief_id, (title, prio, deps, verify) in BRIEFS.items():
        (seed / "briefs" / f"{brief_id}.md").write_text(brief_text(title, prio, deps, verify))
    (seed / ".assay.yaml").write_text("forge: ../forge.git\n")
    repo.commit_all("demo: six briefs")
    repo.push_new_branch(str(forge))
    return forge, seed


def run_demo(directory: Path, n_desks: int, echo: Callable[[str], None]) -> None:
    from assay import views

    directory = directory.resolve()
    forge, seed = prepare(directory)
    echo(f"forge: {forge}")
    echo(f"starting {n_desks} desks as separate processes …")
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "assay.demo", "desk", f"desk-{i + 1}", str(forge), str(seed)],
                              stdout=subprocess.PIPE, text=True) for i in range(n_desks)]
    for proc in procs:
        out, _ = proc.communicate()
        for line in out.splitlines():
            echo("  " + line)
    claims = Claims(ForgeGit(str(forge)))
    good, bad = claims.list_all()
    now = time.time()
    views.render_claims([views.claim_view(c, now) for c in good], [views.invalid_view(b) for b in bad])
    echo(f"all {len(good)} briefs done in {time.monotonic() - started:.1f}s; "
         f"custody: `assay claim history BRIEF --forge {forge}`")


def desk_loop(desk: str, forge: str, seed: Path) -> int:
    """One demo desk: claim ready briefs in priority order until every brief is done."""
    briefs, problems = lint_folder(seed / "briefs")
    if problems:
        print(f"{desk}: the briefs have problems: {problems[0]}", flush=True)
        return 2
    claims = Claims(ForgeGit(forge))
    races_lost = 0
    while True:
        good, _ = claims.list_all()
        states = {c.record.brief: c.record.state for c in good}
        if all(states.get(b.id) == "done" for b in briefs):
            break
        ready = [b for b in sorted(briefs, key=lambda b: (b.priority, b.id))
                 if states.get(b.id) in (None, "released", "expired", "abandoned")
                 and all(states.get(d) == "done" for d in b.depends_on)]
        if not ready and not any(state in ("held", "waiting") for state in states.values()):
            print(f"{desk}: nothing is ready and nothing is in progress; stopping", flush=True)
            return 1
        if not ready:
            time.sleep(0.05)  # a demo desk polling the forge for work, not test synchronisation
            continue
        for brief in ready:
            if _work_one(claims, desk, brief):
                break
            races_lost += 1
    print(f"{desk}: finished; lost {races_lost} race(s) to other desks", flush=True)
    return 0


def _work_one(claims: Claims, desk: str, brief: Brief) -> bool:
    try:
        held = claims.claim(brief.id, desk, lease_s=60)
    except Conflict:
        return False
    print(f"{desk}: claimed {brief.id} (epoch {held.record.epoch})", flush=True)
    ok = all(subprocess.run(row.run, shell=True, capture_output=True).returncode == row.expect_exit
             for row in brief.verify)
    claims.release(brief.id, desk, outcome="done" if ok else "released", reason="verify rows passed" if ok else "")
    print(f"{desk}: {brief.id} -> {'done' if ok else 'released'}", flush=True)
    return True


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "desk":
        try:
            sys.exit(desk_loop(sys.argv[2], sys.argv[3], Path(sys.argv[4])))
        except AssayError as exc:
            print(f"{sys.argv[2]}: error: {exc.message}", flush=True)
            sys.exit(exc.code)
    sys.exit("usage: python -m assay.demo desk NAME FORGE SEED")
