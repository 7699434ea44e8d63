"""Recovery that tells the truth: merged reviews, fresh inspections, junk on the forge, stale locks, agents' env."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from assay.core.claims import Claims
from tests.conftest import Forge, assay, audit_failures, git
from tests.helpers.desks import brief, desk_env, publish, run_desk
from tests.journal_check import claim_chain, entries, invariants


def test_a_review_merged_while_its_desk_was_down_is_done_not_blocked(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/m.md": brief("M", ["write m.txt m"], "test -f m.txt")})
    crashed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="step.after-execute:ready")
    assert crashed.code == -signal.SIGKILL
    assert assay("review", "show", "m", "--forge", work.url, "--json").json()["state"] == "ready"  # type: ignore[index]
    assert assay("review", "merge", "m", "--forge", work.url).code == 0
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0, again.err
    assert "m merged -> done" in again.out and "blocked" not in again.out
    assert [c["state"] for c in claim_chain(work.path, "m")][-1] == "done"


def test_a_fresh_safe_step_looks_again_instead_of_replaying(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    claims.claim("alpha", "d")
    ctx = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1"}
    marker = tmp_path / "deployed"
    check = ("step", "run", "--name", "check", "--policy", "safe")
    probe = ("--", "test", "-f", str(marker))
    assert assay(*check, *probe, env={**ctx, "ASSAY_RUN": "r1"}).code == 1
    marker.write_text("yes")
    assert assay(*check, *probe, env={**ctx, "ASSAY_RUN": "r2"}).code == 1  # replayed: what run r1 saw
    fresh = assay(*check, "--fresh", *probe, env={**ctx, "ASSAY_RUN": "r3"})
    assert fresh.code == 0 and "not run again" not in fresh.err
    unsafe = assay("step", "run", "--name", "x", "--policy", "unsafe", "--fresh", "--", "true",
                   env={**ctx, "ASSAY_RUN": "r4"})
    assert unsafe.code == 2 and "--fresh" in unsafe.err


def test_the_scripted_agent_inspects_afresh_after_an_unknown_outcome(forge: Forge, claims: Claims,
                                                                    tmp_path: Path) -> None:
    """A deploy dies before running; the deliberate deploy of the next run dies after running; the third
    run must look at the system again, not replay the second run's "not deployed", and deploy nothing."""
    claims.claim("alpha", "d")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("# Ship\n\n```assay-script\ndeploy\n```\n")
    log = tmp_path / "effects.log"
    ctx = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_PROMPT_FILE": str(prompt), "ASSAY_EFFECTS_LOG": str(log)}
    agent = ("-c", "import sys; from assay.agents.scripted import main; sys.exit(main())")
    runs = [("r1", "step.before-execute:deploy"), ("r2", "step.after-execute:deploy"), ("r3", "")]
    codes = []
    for run, crash in runs:
        env = {**os.environ, **ctx, "ASSAY_RUN": run, **({"ASSAY_CRASH_AT": crash} if crash else {})}
        proc = subprocess.run([sys.executable, *agent], env=env, capture_output=True, text=True, timeout=60)
        codes.append(proc.returncode)
    assert codes[2] == 0
    assert log.read_text().count("deployed alpha") == 1
    kinds = [e["kind"] for e in entries(forge.path, "alpha") if e.get("step") == "deploy"]
    assert kinds.count("outcome_unknown") == 2 and kinds.count("refused") == 2


def test_step_run_checks_its_own_arguments_before_the_claim(forge: Forge, tmp_path: Path) -> None:
    ctx = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "r1"}  # nobody has claimed alpha: a claim check would say "fenced", exit 3
    cases = [("--name", "a/b", "--", "true"), ("--name", "x", "--input", "{nope", "--", "true"), ("--name", "x"),
             ("--name", "statuses", "--", "true"), ("--name", "review", "--policy", "idempotent", "--", "true")]
    for args in cases:
        run = assay("step", "run", *args, env=ctx)
        assert run.code == 2, (args, run.err)
        assert "Traceback" not in run.err and "fenced" not in run.err
    assert forge.tip("refs/assay/journal/alpha") is None


def test_agents_get_an_allow_list_and_stale_agents_are_fenced(work: Forge, tmp_path: Path) -> None:
    dump = tmp_path / "agent-env.txt"
    publish(work, {"briefs/env.md": brief("Env", [f"run env > {dump}", "write ok.txt ok"], "test -f ok.txt")})
    extra = {"ASSAY_PASSWORD": "hunter2", "ASSAY_SECRET_KEY": "k", "DATABASE_URL": "postgres://u:p@h/db"}
    assert run_desk(work, "builder", tmp_path, **extra).code == 0
    seen = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert not set(extra) & set(seen)
    assert "hunter2" not in git("--git-dir", str(work.path), "log", "-p", "--all")
    assert seen["ASSAY_EPOCH"] == "1" and seen["ASSAY_FORGE"] == work.url and "PATH" in seen
    # the claim moves on to epoch 2; a process of epoch 1 is fenced in renew, release and wait
    assert assay("review", "merge", "env", "--forge", work.url).code == 0
    assert assay("release", "env", "--force", "--reason", "redo", "--forge", work.url).code == 0
    assert assay("claim", "env", "--desk", "builder", "--forge", work.url).code == 0
    stale = {"ASSAY_FORGE": work.url, "ASSAY_DESK": "builder", "ASSAY_EPOCH": "1"}
    for args in (("renew", "env"), ("wait", "env", "--on", "manual"), ("release", "env")):
        run = assay(*args, env=stale)
        assert run.code == 3 and "epoch" in run.err, (args, run.err)
    assert claim_chain(work.path, "env")[-1]["state"] == "held"
    assert assay("wait", "env", "--on", "manual", "--epoch", "2", env=stale).code == 0


def _desk_until(forge: Forge, tmp_path: Path, wanted: list[str], deadline_s: float = 90) -> list[str]:
    """Run a long-running desk until every text in `wanted` has appeared in its output (or the deadline)."""
    env = {**os.environ, **desk_env(tmp_path)}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--poll", "0.1", "--forge",
                             forge.url], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in desk.stdout or []:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    end = time.monotonic() + deadline_s
    try:
        while not all(any(w in ln for ln in seen) for w in wanted) and time.monotonic() < end:
            try:
                seen.append(lines.get(timeout=max(0.0, end - time.monotonic())))
            except queue.Empty:
                break
    finally:
        desk.kill()
        desk.wait()
    return seen


def test_a_stale_lock_on_the_forge_ends_in_a_blocked_brief_not_a_loop(work: Forge, tmp_path: Path) -> None:
    publish(work, {"briefs/stuck.md": brief("Stuck", ["write s.txt s"], "test -f s.txt").replace(
                       "labels:", "priority: 1\nlabels:"),
                   "briefs/fine.md": brief("Fine", ["write f.txt f"], "test -f f.txt")})
    lock = work.path / "refs" / "assay" / "journal" / "stuck.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")  # what a push killed mid-way leaves behind
    out = _desk_until(work, tmp_path, ["stuck blocked", "fine verified"])
    text = "".join(out)
    assert "fine verified" in text  # the desk moved on to other briefs
    assert sum("stuck interrupted" in ln for ln in out) == 2  # bounded: then blocked
    last = claim_chain(work.path, "stuck")[-1]
    assert last["state"] == "blocked"
    assert "cannot lock ref 'refs/assay/journal/stuck'" in str(last["reason"]) and "stuck.lock" in str(last["reason"])
    assert "remove the .lock file" in str(last["reason"])


def test_junk_claims_and_reviews_never_stop_a_desk(work: Forge, tmp_path: Path) -> None:
    publish(work, {f"briefs/{b}.md": brief(b, [f"write {b}.txt {b}"], f"test -f {b}.txt")
                   for b in ("junkclaim", "junkreview", "good")})
    work.write_record("refs/assay/claims/junkclaim", "claim.json", b"not json {")
    work.write_record("refs/assay/reviews/junkreview", "review.json", b'{"v": 1}')
    listing = assay("briefs", "--forge", work.url, "--json").json()
    rows = {r["brief"]: r for r in listing["briefs"]}  # type: ignore[index]
    assert rows["junkclaim"]["state"] == "invalid"
    assert rows["junkclaim"]["invalid"]["ref"] == "refs/assay/claims/junkclaim"
    assert "not JSON" in rows["junkclaim"]["invalid"]["problem"]
    for _ in range(4):  # more passes than a brief's attempts: junk must not end in a blocked brief
        run = run_desk(work, "builder", tmp_path)
        assert run.code == 0, run.err
        assert "refs/assay/claims/junkclaim" in run.out and "refs/assay/reviews/junkreview" in run.out
    assert claim_chain(work.path, "good")[-1]["state"] == "waiting"
    assert claim_chain(work.path, "junkreview")[-1]["state"] == "held"
    git("--git-dir", str(work.path), "update-ref", "-d", "refs/assay/reviews/junkreview")  # a person mends it
    assert "junkreview verified" in run_desk(work, "builder", tmp_path).out
    assert claim_chain(work.path, "junkreview")[-1]["state"] == "waiting"
    assert git("--git-dir", str(work.path), "show", "refs/assay/claims/junkclaim:claim.json") == "not json {"


def test_the_reserved_step_names_are_the_ones_a_desk_runs() -> None:
    import re

    from assay.core.outcomes import DESK_STEPS
    from tests.conftest import REPO

    used = set(re.findall(r'session\.step\("([a-z_]+)"', (REPO / "assay" / "desk" / "work.py").read_text()))
    assert used == DESK_STEPS


def test_a_stale_lock_blocks_its_brief_across_passes_of_desk_run_once(work: Forge, tmp_path: Path) -> None:
    """Scheduled desks run `--once`, a new process each pass: the refusals add up from the forge (epochs that
    wrote nothing to the journal), so the third pass blocks the brief instead of saying "(1 of 3)" for ever."""
    publish(work, {"briefs/stuck.md": brief("Stuck", ["write s.txt s"], "test -f s.txt")})
    lock = work.path / "refs" / "assay" / "journal" / "stuck.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    said = []
    for _ in range(3):
        run = run_desk(work, "builder", tmp_path)
        said.append((run.code, next((ln for ln in run.out.splitlines() if "stuck interrupted" in ln
                                     or "stuck blocked" in ln), "")))
    assert [code for code, _ in said] == [1, 1, 5], said
    assert "(1 of 3)" in said[0][1] and "(2 of 3)" in said[1][1] and "stuck blocked" in said[2][1]
    last = claim_chain(work.path, "stuck")[-1]
    assert last["state"] == "blocked" and "3 times in a row" in str(last["reason"])


@pytest.mark.parametrize("old_cache", ["kept", "deleted"])
def test_a_desk_resumed_with_another_cache_folder_keeps_the_work_of_the_first(work: Forge, tmp_path: Path,
                                                                              old_cache: str) -> None:
    """The desk is killed right after committing the agent's work in its worktree, unpushed; it is restarted with
    another ASSAY_CACHE_DIR (a new machine image, a cleaned cache). The worktree is adopted into the new cache, the
    work is pushed, and nothing is reported lost, whether the old cache is still there or not."""
    publish(work, {"briefs/ship.md": brief("Ship", ["write ship.txt v1"], "test -f ship.txt")})
    killed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="push.after-commit",
                      ASSAY_CACHE_DIR=str(tmp_path / "cache-a"))
    assert killed.code == -9, killed.out + killed.err
    if old_cache == "deleted":
        shutil.rmtree(tmp_path / "cache-a")
    again = run_desk(work, "builder", tmp_path, ASSAY_CACHE_DIR=str(tmp_path / "cache-b"))
    assert again.code == 0 and "review ready" in again.out, again.out + again.err
    assert "lacks" not in again.out + again.err
    pushed = git("--git-dir", str(work.path), "show", "refs/heads/assay/ship:ship.txt")
    assert pushed.strip() == "v1"
    assert invariants(work.path, "ship") == [] and audit_failures(work.url, "ship") == {}
