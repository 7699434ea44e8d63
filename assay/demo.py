"""`assay demo`: a forge on disk, six briefs, three desks running the scripted agent as real processes.

The demo plays the person too: it merges each review once the desk marked it
ready. With `--crash-at POINT` every desk runs with that crash point armed and
the demo stops at the first crash; running `assay demo` again recovers from
what the forge holds.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from assay.config import Ports
from assay.core.claims import Claims
from assay.core.forge.base import Reviews
from assay.core.git import WorkRepo, init_bare
from assay.errors import AssayError, NeedsPerson, UsageError

Echo = Callable[[str], None]
MARKER = ".assay-demo"
TIMEOUT_S = 180
DESKS = ("demo-1", "demo-2", "demo-3")

# id: (title, priority, depends_on, script lines, verify command)
BRIEFS: dict[str, tuple[str, int, list[str], list[str], str]] = {
    "setup-ci": ("Set up CI", 1, [], ["write ci.txt CI is ready"], "grep -q ready ci.txt"),
    "fix-login": ("Fix the login redirect", 2, ["setup-ci"],
                  ["write login.txt redirect to the page asked for", "run test -f ci.txt"], "test -f login.txt"),
    "add-search": ("Add search to the catalogue", 3, ["setup-ci"], ["write search.txt search: enabled"],
                   "grep -q enabled search.txt"),
    "rate-limit": ("Rate-limit the public API", 3, ["fix-login"],
                   ["write ratelimit.txt 100 requests per minute", "deploy"], "test -f ratelimit.txt"),
    "docs-api": ("Document the API", 5, ["add-search", "rate-limit"],
                 ["steering", "write docs/api.md # API\\nsearch and rate limits"], "test -f docs/api.md"),
    "cleanup": ("Remove dead feature flags", 7, [], ["fail-attempts 1", "write cleanup.txt flags removed"],
                "test -f cleanup.txt"),
}


def brief_text(title: str, priority: int, deps: list[str], script: list[str], verify: str) -> str:
    dep_line = f"depends_on: [{', '.join(deps)}]\n" if deps else ""
    body = "\n".join(script)
    return (f"---\ntitle: {title}\npriority: {priority}\n{dep_line}labels: [demo]\nverify:\n"
            f"  - id: check\n    run: \"{verify}\"\n    timeout_s: 30\n---\n{title}.\n\n"
            f"```assay-script\n{body}\n```\n")


def desk_text(name: str) -> str:
    return (f"name: {name}\ntakes:\n  labels: [demo]\nagent:\n  command: [python, -m, assay.agents.scripted]\n"
            "lease_s: 120\nheartbeat_s: 10\nsingleton: false\nattempts: 2\nverify_timeout_s: 60\n"
            "env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]\n")


def prepare(directory: Path, echo: Echo) -> Path:
    """A new demo in an empty folder, or the earlier demo found there; refuses anything else."""
    forge = directory / "forge.git"
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is a file, not a folder", hint="pass --dir with a new or empty folder")
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise UsageError(f"{directory} is not empty and is not an earlier demo",
                             hint="pass --dir with a new or empty folder")
        echo(f"resuming the demo in {directory}: recovering from what the forge holds")
        return forge
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by `assay demo`; safe to delete\n")
    init_bare(forge)
    seed = directory / "seed"
    repo = WorkRepo.init(seed)
    (seed / "briefs").mkdir()
    (seed / "desks").mkdir()
    for brief_id, (title, prio, deps, script, verify) in BRIEFS.items():
        (seed / "briefs" / f"{brief_id}.md").write_text(brief_text(title, prio, deps, script, verify))
    for name in DESKS:
        (seed / "desks" / f"{name}.yaml").write_text(desk_text(name))
    (seed / "README.md").write_text("The demo project.\n")
    repo.commit_all("demo: six briefs and three desks")
    repo.push_new_branch(str(forge))
    echo(f"new demo in {directory}: forge {forge}, {len(BRIEFS)} briefs, {len(DESKS)} desks")
    return forge


def run_demo(directory: Path, crash_at: str | None, echo: Echo) -> int:
    directory = directory.resolve()
    forge = prepare(directory, echo)
    cache = directory / "cache"
    os.environ["ASSAY_CACHE_DIR"] = str(cache)
    with Ports(str(forge)) as ports:
        return _play(directory, forge, cache, crash_at, ports.claims, ports.reviews, echo)


def _play(directory: Path, forge: Path, cache: Path, crash_at: str | None, claims: Claims, reviews: Reviews,
          echo: Echo) -> int:
    """Three desks as real processes, the demo as their reviewer, until every brief is done (or a crash)."""
    from assay.core.custody import steer

    if not (directory / "steered").exists():  # once per demo: steering typed before any desk runs
        steer(claims, "docs-api", "Mention the rate limits next to search.", "demo")
        (directory / "steered").write_text("yes\n")
    env = {**os.environ, "ASSAY_CACHE_DIR": str(cache), "ASSAY_EFFECTS_LOG": str(directory / "effects.log")}
    if crash_at:
        env.update({"ASSAY_CRASH_AT": crash_at, "ASSAY_CRASH_SCOPE": "group"})
    started = time.monotonic()
    procs = {name: subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", name, "--forge", str(forge),
                                     "--state-dir", str(directory / "state"), "--poll", "0.2"],
                                    env=env, start_new_session=True) for name in DESKS}
    try:
        crashed = _review_until_done(procs, directory, forge, claims, reviews, echo, started)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            proc.wait()
    if crashed:
        echo(f"crash injected at {crash_at} (desk {crashed} and its agent were SIGKILLed)")
        echo(f"run `{invoked_as()} demo --dir {shlex.quote(str(directory))}` again to recover from the forge")
        return 0
    _report_done(directory, forge, claims, echo, started)
    return 0


def _review_until_done(procs: dict[str, subprocess.Popen[bytes]], directory: Path, forge: Path, claims: Claims,
                       reviews: Reviews, echo: Echo, started: float) -> str | None:
    """Merge the desks' reviews as they are ready until every brief is done (None) or a desk was SIGKILLed by an
    injected crash (its name); a desk that fails, a blocked brief and the demo's time limit are errors."""
    crashed = None
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                crashed = crashed or (name if proc.returncode == -signal.SIGKILL else None)
                if proc.returncode not in (0, -signal.SIGKILL):
                    raise AssayError(f"desk {name} exited with {proc.returncode}")
        if crashed:
            return crashed
        _merge_ready(reviews, echo)
        good, _ = claims.list_all()
        if len([c for c in good if c.record.state == "done"]) == len(BRIEFS):
            return None
        blocked = [c.record for c in good if c.record.state == "blocked"]
        if blocked:  # a person's turn: say so now, rather than wait out the demo's time
            run, on = invoked_as(), f"--forge {shlex.quote(str(forge))}"
            raise NeedsPerson(f"brief {blocked[0].brief!r} is blocked: {blocked[0].reason}",
                              hint=f"`{run} journal {blocked[0].brief} {on}` shows why; "
                                   f"`{run} release {blocked[0].brief} --force --reason ... {on}` then "
                                   f"`{run} demo --dir {shlex.quote(str(directory))}` works it again")
        if time.monotonic() - started > TIMEOUT_S:
            raise AssayError(f"the demo did not finish in {TIMEOUT_S}s",
                             hint=f"see `{invoked_as()} claims --forge {shlex.quote(str(forge))}`")
        time.sleep(0.2)  # the demo's reviewer polls the forge like a person refreshing a page


def _report_done(directory: Path, forge: Path, claims: Claims, echo: Echo, started: float) -> None:
    """The board of claims, the time taken and the deploys run, and the commands to look closer with."""
    from assay import views

    good, bad = claims.list_all()
    now = time.time()
    views.render_claims([views.claim_view(c, now) for c in good], [views.invalid_view(b) for b in bad])
    deploys = [line for line in (directory / "effects.log").read_text().splitlines() if line.startswith("deployed")] \
        if (directory / "effects.log").exists() else []
    echo(f"all {len(BRIEFS)} briefs done in {time.monotonic() - started:.1f}s; deploy ran {len(deploys)} time(s)")
    echo("look closer:")
    for line in closing_lines(invoked_as(), forge):
        echo(f"  {line}")


def closing_lines(run: str, forge: Path) -> list[str]:
    """The commands the demo ends with, each to be pasted into a shell as it is."""
    on = f"--forge {shlex.quote(str(forge))}"
    return [f"{run} journal rate-limit {on}", f"{run} review list {on}", f"{run} claim history docs-api {on}"]


def invoked_as(argv0: str | None = None, which: Callable[[str], str | None] = shutil.which) -> str:
    """This Assay as a shell runs it: `assay` when that is what the shell finds, else the script that ran (a
    virtualenv's bin/assay, not on PATH), else this Python's `-m assay` (the demo run as `python -m assay`)."""
    script = Path(sys.argv[0] if argv0 is None else argv0)
    if script.name == "assay" and script.is_file():
        found = which("assay")
        if found is not None and Path(found).resolve() == script.resolve():
            return "assay"
        return shlex.quote(str(script.absolute()))
    return f"{shlex.quote(sys.executable)} -m assay"


def _merge_ready(reviews: Reviews, echo: Echo) -> None:
    for review in reviews.list():
        if hasattr(review, "record") and review.record.state == "ready":
            try:
                reviews.approve(review.record.brief, "demo-reviewer")
                merged = reviews.merge(review.record.brief, "demo-reviewer")
            except AssayError as exc:
                echo(f"reviewer: could not merge {review.record.brief}: {exc.message}")
                continue
            echo(f"reviewer: merged {merged.record.brief} into main ({merged.record.merged_commit[:10]})")
