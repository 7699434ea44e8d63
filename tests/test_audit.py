"""`assay audit` on histories made by real desk runs, clean and tampered: each tampering is caught by its check."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from assay.claims import Claims
from assay.git import ForgeGit
from assay.journal import Journal
from tests.conftest import Forge, assay, git
from tests.fakegithub import FakeGitHub
from tests.journal_check import entries
from tests.test_desk import DESK, brief, publish, run_desk
from tests.test_github_forge import NAME, OWNER, github_repo

CHECKS = ["branch-epochs", "unsafe-once", "fenced-writes", "verify-evidence", "seq-epochs", "one-holder"]


@pytest.fixture
def desks(forge: Forge) -> Forge:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "desks/other.yaml": DESK.format(name="other", attempts=2)})
    return forge


def audited(forge: Forge, brief_id: str) -> tuple[int, dict[str, Any]]:
    run = assay("audit", brief_id, "--json", "--forge", forge.url)
    view = run.json()
    assert isinstance(view, dict), run.err
    return run.code, view


def failed(view: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["reason"] for c in view["checks"] if not c["passed"]}


def ready(forge: Forge, tmp_path: Path, brief_id: str, script: list[str], verify: str) -> None:
    """A real desk works the brief to a verified review marked ready; the claim waits on it (epoch 1)."""
    publish(forge, {f"briefs/{brief_id}.md": brief(brief_id.title(), script, verify)})
    run = run_desk(forge, "builder", tmp_path)
    assert run.code == 0 and "review ready" in run.out, run.err


def append(forge: Forge, brief_id: str, kind: str, **fields: Any) -> None:
    """An entry written through the journal API under the live claim, as a misbehaving holder could."""
    git_port = ForgeGit(forge.url)
    try:
        claims = Claims(git_port)
        claim = claims.read(brief_id)
        assert claim is not None
        journal = Journal.open(claims, brief_id, claim.record.desk, claim.record.epoch, "tampering")
        journal.add(kind, **fields)
    finally:
        git_port.close()


def test_a_clean_history_passes_every_check(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "greet", ["write greet.txt hello", "deploy"], "grep -q hello greet.txt")
    assert assay("review", "merge", "greet", "--forge", desks.url).code == 0
    assert run_desk(desks, "builder", tmp_path).code == 0
    code, view = audited(desks, "greet")
    assert [c["name"] for c in view["checks"]] == CHECKS
    assert failed(view) == {} and view["passed"] is True and code == 0
    sources = {e["source"] for e in view["timeline"]}
    assert sources == {"claim", "journal", "branch", "review"}
    branch = [e for e in view["timeline"] if e["source"] == "branch"]
    assert len(branch) == 1 and branch[0]["epoch"] == 1
    table = assay("audit", "greet", "--forge", desks.url)
    assert table.code == 0 and "timeline of greet" in table.out and "FAIL" not in table.out


def test_a_retired_brief_is_audited_from_the_tips_its_index_keeps(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "greet", ["write greet.txt hello", "deploy"], "grep -q hello greet.txt")
    assert assay("review", "merge", "greet", "--forge", desks.url).code == 0
    assert run_desk(desks, "builder", tmp_path).code == 0
    code, before = audited(desks, "greet")
    assert code == 0
    assert assay("retire", "greet", "--forge", desks.url).code == 0
    assert desks.tip("refs/assay/claims/greet") is None and desks.tip("refs/assay/journal/greet") is None
    code, after = audited(desks, "greet")
    assert code == 0 and failed(after) == {}
    assert [c["name"] for c in after["checks"]] == CHECKS
    assert len(after["timeline"]) == len(before["timeline"])  # the same story, read from the retired tips
    whole = assay("audit", "--all", "--json", "--forge", desks.url)
    assert whole.code == 0, whole.err
    assert "greet" in whole.out


def test_a_commit_pushed_with_a_stale_epoch_fails_branch_epochs(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "ship", ["write ship.txt v1"], "test -f ship.txt")
    assert assay("release", "ship", "--force", "--reason", "reassigned", "--forge", desks.url).code == 0
    assert assay("claim", "ship", "--desk", "other", "--forge", desks.url).code == 0  # epoch 2
    assert audited(desks, "ship")[1]["passed"] is True
    clone = tmp_path / "attacker"
    git("clone", "-q", "--branch", "assay/ship", desks.url, str(clone))
    (clone / "ship.txt").write_text("v2 from the old holder\n")
    git("commit", "-q", "-am", "late work\n\nAssay-Brief: ship\nAssay-Epoch: 1", cwd=clone)
    git("push", "-q", "origin", "HEAD:refs/heads/assay/ship", cwd=clone)
    code, view = audited(desks, "ship")
    assert code == 1 and set(failed(view)) == {"branch-epochs"}
    assert "Assay-Epoch: 1" in failed(view)["branch-epochs"] and "live epoch 2" in failed(view)["branch-epochs"]


def test_evidence_from_rows_edited_on_the_branch_fails_verify_evidence(desks: Forge, tmp_path: Path) -> None:
    weak = brief("Cheat", [], "true").replace("\n", "\\n")
    ready(desks, tmp_path, "cheat", [f"write briefs/cheat.md {weak}", "write proof.txt ok"], "test -f proof.txt")
    on_branch = git("--git-dir", str(desks.path), "show", "refs/heads/assay/cheat:briefs/cheat.md")
    assert 'run: "true"' in on_branch
    code, view = audited(desks, "cheat")
    assert code == 0, failed(view)  # the desk ran main's rows, whatever the branch's copy says
    head = next(e["data"]["head"] for e in entries(desks.path, "cheat") if e["kind"] == "verify")
    append(desks, "cheat", "verify", data={"head": head, "row": "check", "command": "true", "exit_code": 0,
                                           "expect_exit": 0, "passed": True})
    code, view = audited(desks, "cheat")
    assert code == 1 and set(failed(view)) == {"verify-evidence"}
    assert "not main's: check `true`" in failed(view)["verify-evidence"]


def test_an_unsafe_effect_run_twice_without_a_refusal_fails_unsafe_once(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "deploy", ["write d.txt x", "deploy"], "test -f d.txt")
    first = next(e for e in entries(desks.path, "deploy") if e["kind"] == "intent" and e.get("step") == "deploy")
    assert audited(desks, "deploy")[1]["passed"] is True
    append(desks, "deploy", "intent", step="deploy", input_sha=first["input_sha"], ordinal=first["ordinal"],
           policy="unsafe", key=first["key"])
    code, view = audited(desks, "deploy")
    assert code == 1 and set(failed(view)) == {"unsafe-once"}
    assert f"after #{first['seq']} with no recorded refusal" in failed(view)["unsafe-once"]


def test_audit_all_reports_each_brief_and_fails_if_any_does(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "one", ["write one.txt x", "deploy"], "test -f one.txt")
    first = next(e for e in entries(desks.path, "one") if e["kind"] == "intent" and e.get("step") == "deploy")
    publish(desks, {"briefs/two.md": brief("Two", ["write two.txt x"], "test -f two.txt")})
    assert run_desk(desks, "builder", tmp_path).code == 0
    every = assay("audit", "--all", "--json", "--forge", desks.url)
    found = every.json()
    assert every.code == 0 and isinstance(found, list) and [v["brief"] for v in found] == ["one", "two"]
    append(desks, "one", "intent", step="deploy", input_sha=first["input_sha"], ordinal=first["ordinal"],
           policy="unsafe", key=first["key"])
    every = assay("audit", "--all", "--forge", desks.url)
    assert every.code == 1 and "audit of one" in every.out and "audit of two" in every.out


@pytest.mark.parametrize("args", [["nosuch"], ["Bad..Id"], [], ["greet", "--all"]])
def test_bad_input_is_exit_2_without_a_traceback(desks: Forge, args: list[str]) -> None:
    run = assay("audit", *args, "--forge", desks.url)
    assert run.code == 2 and "Traceback" not in run.err and run.err.strip()


def test_a_status_posted_on_github_without_an_intent_fails_fenced_writes(forge: Forge, fake_github: FakeGitHub,
                                                                          tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi", "deploy"], "test -f gh.txt")})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache"),
           "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log")}
    desk = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert desk.code == 0 and "review ready" in desk.out, desk.err
    [pull] = fake_github.pulls(OWNER, NAME)
    clean = assay("audit", "gh", "--json", env=env)
    view = clean.json()
    assert isinstance(view, dict) and failed(view) == {} and clean.code == 0
    assert any(e["source"] == "review" and "status assay/verify/check success" in e["what"] for e in view["timeline"])
    body = json.dumps({"state": "success", "context": "assay/verify/extra"}).encode()
    request = urllib.request.Request(f"{fake_github.api_url}/repos/{OWNER}/{NAME}/statuses/{pull.head_sha}",
                                     data=body, method="POST",
                                     headers={"Authorization": f"token {fake_github.token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 201
    tampered = assay("audit", "gh", "--json", env=env)
    view = tampered.json()
    assert isinstance(view, dict) and tampered.code == 1 and set(failed(view)) == {"fenced-writes"}
    assert "'assay/verify/extra'" in failed(view)["fenced-writes"]
