"""`done_when:` rows: a brief whose work is on main already is settled done with evidence, no agent run;
a waiting brief whose work lands on main by another route is closed and settled done by its desk's pass."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Forge, assay, audit_failures, git
from tests.fakegithub import FakeGitHub
from tests.helpers.desks import brief, publish, run_desk
from tests.helpers.github import DESK as GITHUB_DESK
from tests.helpers.github import NAME, OWNER, github_repo
from tests.journal_check import claim_chain, entries, invariants


def _with_done_when(text: str, run: str, expect: int = 0) -> str:
    rows = f"done_when:\n  - id: landed\n    run: \"{run}\"\n    expect_exit: {expect}\n    timeout_s: 60\n"
    return text.replace("verify:", rows + "verify:", 1)


def _main(forge: Forge) -> str:
    return git("--git-dir", str(forge.path), "rev-parse", "refs/heads/main").strip()


def test_a_brief_already_on_main_is_settled_done_without_an_agent(work: Forge, tmp_path: Path) -> None:
    ran = tmp_path / "agent-ran"
    text = _with_done_when(brief("Greet", [f"run touch {ran}", "write greet.txt hello"], "grep -q hello greet.txt"),
                           "grep -q hello greet.txt")
    publish(work, {"briefs/greet.md": text, "greet.txt": "hello\n"})
    main = _main(work)
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert not ran.exists()  # no agent ran
    assert f"already on main at {main[:10]} (done_when passed)" in run.out
    chain = claim_chain(work.path, "greet")
    assert chain[-1]["state"] == "done"
    assert chain[-1]["reason"] == f"already on main at {main[:10]} (done_when passed)"
    journal = entries(work.path, "greet")
    rows = [e["data"] for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("done_when") == "row"]
    assert len(rows) == 1 and rows[0]["main"] == main and rows[0]["exit_code"] == 0
    assert rows[0]["command"] == "grep -q hello greet.txt" and "duration_ms" in rows[0] and "tail" in rows[0]
    release = [e for e in journal if e["kind"] == "claim" and (e.get("data") or {}).get("outcome") == "done"]
    assert release and release[-1]["data"]["done_when"]["main"] == main
    assert not any(e["kind"] == "intent" and e.get("step") == "agent" for e in journal)
    refs = git("--git-dir", str(work.path), "for-each-ref", "--format=%(refname)").split()
    assert "refs/heads/assay/greet" not in refs and not any(r.startswith("refs/assay/reviews/") for r in refs)
    assert invariants(work.path, "greet") == []
    shown = assay("journal", "greet", "--forge", work.url, env={"COLUMNS": "400"})
    assert f"done: already on main at {main[:10]} (done_when passed)" in shown.out, shown.out
    history = assay("claim", "history", "greet", "--forge", work.url, env={"COLUMNS": "400"})
    assert f"already on main at {main[:10]} (done_when passed)" in history.out, history.out
    assert audit_failures(work.url, "greet") == {}
    built = assay("board", "build", "-o", str(tmp_path / "site"), "--forge", work.url,
                  env={"ASSAY_CACHE_DIR": str(tmp_path / "board-cache")})
    assert built.code == 0, built.err
    page = (tmp_path / "site" / "index.html").read_text()
    assert f"done: already on main at {main[:10]} (done_when passed)" in page


def test_a_brief_whose_done_when_fails_is_worked_as_before(work: Forge, tmp_path: Path) -> None:
    ran = tmp_path / "agent-ran"
    text = _with_done_when(brief("Greet", [f"run touch {ran}", "write greet.txt hello"], "grep -q hello greet.txt"),
                           "grep -q hello greet.txt")
    publish(work, {"briefs/greet.md": text})
    main = _main(work)
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    assert ran.exists() and "review ready; waiting for merge" in run.out
    assert claim_chain(work.path, "greet")[-1]["state"] == "waiting"
    journal = entries(work.path, "greet")
    rows = [e["data"] for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("done_when") == "row"]
    assert len(rows) == 1 and rows[0]["main"] == main and rows[0]["exit_code"] != 0 and not rows[0]["passed"]
    # the review merged: settled as merged (not as already on main), and nothing else changes for it
    assert assay("review", "merge", "greet", "--forge", work.url).code == 0
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0 and "greet merged -> done" in again.out
    assert claim_chain(work.path, "greet")[-1]["reason"] == "review merged"
    assert invariants(work.path, "greet") == []
    assert audit_failures(work.url, "greet") == {}


def test_a_waiting_brief_whose_work_lands_by_another_route_is_closed_and_done(work: Forge, tmp_path: Path) -> None:
    text = _with_done_when(brief("Greet", ["write greet.txt hello"], "grep -q hello greet.txt"),
                           "grep -q hello greet.txt")
    publish(work, {"briefs/greet.md": text})
    assert run_desk(work, "builder", tmp_path).code == 0
    assert claim_chain(work.path, "greet")[-1]["state"] == "waiting"

    def runs_of_rows() -> list[dict[str, Any]]:  # each run of the rows: before the agent, and while it waits
        return [e["data"] for e in entries(work.path, "greet")
                if (e.get("data") or {}).get("done_when") in ("row", "checked")]

    assert [r["done_when"] for r in runs_of_rows()] == ["row"]  # run once, before the agent
    for _ in range(2):  # main has not moved since: the rows are not run again, however often desks look
        idle = run_desk(work, "builder", tmp_path)
        assert idle.code == 0 and claim_chain(work.path, "greet")[-1]["state"] == "waiting"
    assert [r["done_when"] for r in runs_of_rows()] == ["row"]
    publish(work, {"other.txt": "unrelated\n"})  # main moves, the work is not on it: run once more, still waiting
    for _ in range(2):
        assert run_desk(work, "builder", tmp_path).code == 0
    assert [(r["done_when"], r.get("passed")) for r in runs_of_rows()][1:] == [("checked", False)]
    assert claim_chain(work.path, "greet")[-1]["state"] == "waiting"
    publish(work, {"greet.txt": "hello\n"})  # the same work lands on main by another commit
    main = _main(work)
    run = run_desk(work, "builder", tmp_path)
    assert run.code == 0, run.err
    reason = f"already on main at {main[:10]} (done_when passed)"
    assert reason in run.out
    chain = claim_chain(work.path, "greet")
    assert chain[-1]["state"] == "done" and chain[-1]["reason"] == reason
    review = assay("review", "show", "greet", "--forge", work.url, "--json").json()
    assert isinstance(review, dict) and review["state"] == "closed"
    assert reason in assay("review", "show", "greet", "--forge", work.url, env={"COLUMNS": "400"}).out
    checks = [r for r in runs_of_rows() if r["done_when"] == "checked"]
    assert len(checks) == 2 and checks[-1]["main"] == main and checks[-1]["passed"] is True
    assert checks[-1]["rows"][0]["command"] == "grep -q hello greet.txt"
    assert invariants(work.path, "greet") == []


def test_bad_done_when_rows_are_a_lint_error_with_their_line(tmp_path: Path) -> None:
    folder = tmp_path / "briefs"
    folder.mkdir()
    (folder / "bad.md").write_text("---\ntitle: Bad\ndone_when:\n  - id: landed\n    expect_exit: 300\n"
                                   "  - run: \"true\"\n---\nBody.\n")
    run = assay("brief", "lint", str(folder))
    assert run.code == 2, run.out + run.err
    said = run.out + run.err
    assert "bad.md:5" in said and "expect_exit" in said
    assert "bad.md:4" in said and "run" in said
    assert "a done_when row needs `id:`" in said and "bad.md:6" in said
    assert "Traceback" not in said


@pytest.mark.parametrize("point", ["step.after-result:done_when", "release.before-push"])
def test_a_desk_killed_in_the_check_and_its_successor_decide_the_same(work: Forge, tmp_path: Path,
                                                                       point: str) -> None:
    ran = tmp_path / "agent-ran"
    text = _with_done_when(brief("Greet", [f"run touch {ran}", "write greet.txt hello"], "grep -q hello greet.txt"),
                           "grep -q hello greet.txt")
    publish(work, {"briefs/greet.md": text, "greet.txt": "hello\n"})
    main = _main(work)
    killed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT=point)
    assert killed.code != 0 and claim_chain(work.path, "greet")[-1]["state"] == "held"
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0, again.err
    assert "took over greet" in again.out and not ran.exists()
    chain = claim_chain(work.path, "greet")
    assert chain[-1]["state"] == "done" and chain[-1]["reason"] == f"already on main at {main[:10]} (done_when passed)"
    releases = [e for e in entries(work.path, "greet")
                if e["kind"] == "claim" and (e.get("data") or {}).get("done_when")]
    assert len(releases) == 1 and releases[0]["data"]["done_when"]["main"] == main
    assert invariants(work.path, "greet") == []


def test_on_github_a_pull_request_whose_work_landed_on_main_is_closed_and_its_brief_done(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    text = _with_done_when(brief("Gh", ["write gh.txt hi"], "test -f gh.txt"), "test -f gh.txt")
    publish(forge, {"desks/builder.yaml": GITHUB_DESK, "briefs/gh.md": text})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    first = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert first.code == 0 and "review ready" in first.out, first.err
    [pull] = fake_github.pulls(OWNER, NAME)
    assert pull.state == "open" and not pull.draft
    (forge.seed / "gh.txt").write_text("hi\n")  # the work lands on main by another route
    git("add", "-A", cwd=forge.seed)
    git("commit", "-q", "-m", "gh by hand", cwd=forge.seed)
    pushed = subprocess.run(["git", "push", "-q", url, "HEAD:refs/heads/main"], cwd=forge.seed,
                            env={**os.environ, **fake_github.git_env()}, capture_output=True, text=True)
    assert pushed.returncode == 0, pushed.stderr
    main = git("rev-parse", "HEAD", cwd=forge.seed).strip()
    again = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    reason = f"already on main at {main[:10]} (done_when passed)"
    assert again.code == 0 and reason in again.out, again.out + again.err
    [pull] = fake_github.pulls(OWNER, NAME)
    assert pull.state == "closed"
    claims = assay("claims", "--json", env=env).json()
    assert isinstance(claims, dict)
    [claim] = claims["claims"]
    assert claim["state"] == "done" and claim["reason"] == reason


def test_a_desk_killed_after_closing_the_review_settles_it_done_not_blocked(work: Forge, tmp_path: Path) -> None:
    text = _with_done_when(brief("Greet", ["write greet.txt hello"], "grep -q hello greet.txt"),
                           "grep -q hello greet.txt")
    publish(work, {"briefs/greet.md": text})
    assert run_desk(work, "builder", tmp_path).code == 0
    publish(work, {"greet.txt": "hello\n"})
    main = _main(work)
    killed = run_desk(work, "builder", tmp_path, ASSAY_CRASH_AT="release.before-push")
    assert killed.code != 0
    review = assay("review", "show", "greet", "--forge", work.url, "--json").json()
    assert isinstance(review, dict) and review["state"] == "closed"
    assert claim_chain(work.path, "greet")[-1]["state"] == "waiting"
    again = run_desk(work, "builder", tmp_path)
    assert again.code == 0, again.err
    chain = claim_chain(work.path, "greet")
    assert chain[-1]["state"] == "done" and chain[-1]["reason"] == f"already on main at {main[:10]} (done_when passed)"
    checks = [e for e in entries(work.path, "greet") if (e.get("data") or {}).get("done_when") == "checked"]
    assert len(checks) == 1  # not run again: the journaled check decided
    assert invariants(work.path, "greet") == []
