"""`assay audit` on histories made by real desk runs, clean and tampered: each tampering is caught by its check."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.journal import Journal
from tests.conftest import Forge, assay, git
from tests.fakegithub import FakeGitHub
from tests.fakegithub.faults import Fault
from tests.fakegithub.state import Pull
from tests.helpers.desks import DESK, brief, publish, run_desk
from tests.helpers.fleet import make_fleet
from tests.helpers.github import NAME, OWNER, github_repo
from tests.helpers.gitlog import calls, logging_git
from tests.journal_check import claim_chain, entries

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
    # a brief with no verify rows: its desk runs none and marks the review ready; nothing is left to prove
    publish(desks, {"briefs/two.md": "---\ntitle: Two\nlabels: [work]\n---\nTwo.\n\n```assay-script\n"
                                     "write two.txt x\n```\n"})
    assert run_desk(desks, "builder", tmp_path).code == 0
    every = assay("audit", "--all", "--json", "--forge", desks.url)
    found = every.json()
    assert every.code == 0 and isinstance(found, list) and [v["brief"] for v in found] == ["one", "two"], every.out
    evidence = {c["name"]: c["reason"] for c in found[1]["checks"]}["verify-evidence"]
    assert evidence.startswith("marked ready ") and evidence.endswith(": main's brief has no verify rows")
    append(desks, "one", "intent", step="deploy", input_sha=first["input_sha"], ordinal=first["ordinal"],
           policy="unsafe", key=first["key"])
    every = assay("audit", "--all", "--forge", desks.url)
    assert every.code == 1 and "audit of one" in every.out and "audit of two" not in every.out  # passes are counted
    assert "2 briefs audited: 1 passed, 1 failed (one)" in every.out


def _plant(forge: Forge, ref: str, files: dict[str, str] | None = None, blob: str = "") -> None:
    """A record written straight into the forge with plumbing: a commit of `files`, or a ref at a blob."""
    bare = ["--git-dir", str(forge.path)]
    if files is None:
        sha = git(*bare, "hash-object", "-w", "--stdin", input=blob).strip()
    else:
        rows = "".join(f"100644 blob {git(*bare, 'hash-object', '-w', '--stdin', input=text).strip()}\t{name}\n"
                       for name, text in files.items())
        sha = git(*bare, "commit-tree", git(*bare, "mktree", input=rows).strip(), "-m", "planted").strip()
    git(*bare, "update-ref", ref, sha)


def test_junk_on_the_forge_fails_its_own_audit_and_spares_the_others(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "greet", ["write greet.txt hello"], "grep -q hello greet.txt")
    _plant(desks, "refs/assay/claims/blobref", blob="<script>alert(1)</script>")
    _plant(desks, "refs/assay/claims/notjson", {"claim.json": "{ not json"})
    _plant(desks, "refs/assay/journal/notjson", {"entries.jsonl": '{"seq": 1, "kind": "<b>hi</b>"'})
    run = assay("audit", "--all", "--json", "--forge", desks.url)
    views = run.json()
    assert run.code == 1 and isinstance(views, list) and "Traceback" not in run.err
    verdict = {v["brief"]: v["passed"] for v in views}
    assert verdict == {"blobref": False, "greet": True, "notjson": False}
    [blobref] = [v for v in views if v["brief"] == "blobref"]
    assert "points at a blob, not a commit" in blobref["checks"][0]["reason"]
    [notjson] = [v for v in views if v["brief"] == "notjson"]
    reasons = " ".join(c["reason"] for c in notjson["checks"] if not c["passed"])
    assert "refs/assay/claims/notjson" in reasons and "refs/assay/journal/notjson" in reasons
    table = assay("audit", "--all", "--forge", desks.url)
    assert table.code == 1 and "audit of notjson" in table.out and "Traceback" not in table.err
    assert "3 briefs audited: 1 passed, 2 failed (blobref, notjson)" in table.out


@pytest.mark.parametrize("args", [["nosuch"], ["Bad..Id"], [], ["greet", "--all"]])
def test_bad_input_is_exit_2_without_a_traceback(desks: Forge, args: list[str]) -> None:
    run = assay("audit", *args, "--forge", desks.url)
    assert run.code == 2 and "Traceback" not in run.err and run.err.strip()


@dataclass
class OnGitHub:
    fake: FakeGitHub
    env: dict[str, str]
    pull: Pull


def github_env(forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> dict[str, str]:
    """`forge`'s main pushed to the fake GitHub, and the environment a desk or a person works there with."""
    return {"ASSAY_FORGE": github_repo(fake_github, forge.seed), "ASSAY_GITHUB_API": fake_github.api_url,
            "GITHUB_TOKEN": fake_github.token, "ASSAY_STATE_DIR": str(tmp_path / "state"),
            "ASSAY_CACHE_DIR": str(tmp_path / "cache"), "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log")}


@pytest.fixture
def on_github(forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> OnGitHub:
    """A real desk works brief `gh` on the fake GitHub to a pull request marked ready; the claim waits on it."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi", "deploy"], "test -f gh.txt")})
    env = github_env(forge, fake_github, tmp_path)
    desk = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert desk.code == 0 and "review ready" in desk.out, desk.err
    [pull] = fake_github.pulls(OWNER, NAME)
    return OnGitHub(fake_github, env, pull)


def audited_on(gh: OnGitHub, brief_id: str = "gh") -> tuple[int, dict[str, Any]]:
    run = assay("audit", brief_id, "--json", env=gh.env)
    view = run.json()
    assert isinstance(view, dict), run.err
    return run.code, view


def api(gh: OnGitHub, method: str, path: str, body: Any) -> int:
    """A write to the fake's REST API with the desk's own token, as a misbehaving holder could make it."""
    request = urllib.request.Request(f"{gh.fake.api_url}/repos/{OWNER}/{NAME}/{path}", data=json.dumps(body).encode(),
                                     method=method, headers={"Authorization": f"token {gh.fake.token}",
                                                             "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(answer.status)


def test_a_status_posted_on_github_without_an_intent_fails_fenced_writes(on_github: OnGitHub) -> None:
    code, view = audited_on(on_github)
    assert failed(view) == {} and code == 0
    assert any(e["source"] == "review" and "status assay/verify success" in e["what"] for e in view["timeline"])
    [posted] = on_github.fake.statuses(OWNER, NAME, on_github.pull.head_sha)
    forged = (posted.description or "").replace("evidence ", "evidence f")  # other evidence, under the same intent
    assert api(on_github, "POST", f"statuses/{on_github.pull.head_sha}",
               {"state": "success", "context": "assay/verify", "description": forged}) == 201
    code, view = audited_on(on_github)
    assert code == 1 and set(failed(view)) == {"fenced-writes"}
    assert "is no verify evidence that the `statuses` intent posted" in failed(view)["fenced-writes"]
    assert api(on_github, "POST", f"statuses/{on_github.pull.head_sha}",
               {"state": "success", "context": "assay/verify/extra"}) == 201
    code, view = audited_on(on_github)
    assert "'assay/verify/extra'" in failed(view)["fenced-writes"]


def test_a_merged_pull_request_passes_with_its_labels_ready_and_merge_in_the_timeline(on_github: OnGitHub) -> None:
    on_github.fake.merge(OWNER, NAME, on_github.pull.number, by="maintainer")  # a person merges it on GitHub
    settle = assay("desk", "run", "builder", "--once", env=on_github.env, timeout=180)
    assert settle.code == 0, settle.err
    claims = assay("claims", "--json", env=on_github.env).json()
    assert isinstance(claims, dict) and [c["state"] for c in claims["claims"] if c["brief"] == "gh"] == ["done"]
    code, view = audited_on(on_github)
    assert code == 0 and failed(view) == {}, failed(view)
    reasons = {c["name"]: c["reason"] for c in view["checks"]}
    assert f"merged {on_github.pull.head_sha[:10]}" in reasons["verify-evidence"]
    writes = int(reasons["fenced-writes"].split()[0])
    labels = on_github.fake.labels(OWNER, NAME, on_github.pull.number)
    assert set(labels) == {"assay:ready", "desk:builder"}
    events = [e.event for e in on_github.fake.repo(OWNER, NAME).events]
    assert events.count("labeled") == 2 and events.count("unlabeled") == 0  # desk and ready, labelled once ready
    statuses = on_github.fake.statuses(OWNER, NAME, on_github.pull.head_sha)
    assert writes == len(statuses) + events.count("ready_for_review") + 2 == 4, reasons["fenced-writes"]
    review = [e["what"] for e in view["timeline"] if e["source"] == "review"]
    for expected in ("labeled assay:ready by assay-bot", "labeled desk:builder by assay-bot",
                     "ready_for_review by assay-bot", "merged by maintainer"):
        assert any(line.startswith(expected) for line in review), (expected, review)


def test_a_label_written_after_the_epoch_ended_fails_fenced_writes(on_github: OnGitHub) -> None:
    assert assay("release", "gh", "--force", "--reason", "reassigned", env=on_github.env).code == 0
    assert audited_on(on_github)[1]["passed"] is True
    on_github.fake.clock_offset_s = 3600  # GitHub stamps the next write an hour after the release
    assert api(on_github, "POST", f"issues/{on_github.pull.number}/labels", {"labels": ["assay:done"]}) == 200
    code, view = audited_on(on_github)
    assert code == 1 and set(failed(view)) == {"fenced-writes"}
    reason = failed(view)["fenced-writes"]
    assert "label 'assay:done' added by assay-bot" in reason
    assert "when no epoch that announced it or resumed its step held" in reason
    assert "epoch 1 (builder) held it" in reason


def test_a_merged_head_that_was_never_verified_fails_verify_evidence(on_github: OnGitHub, tmp_path: Path) -> None:
    clone = tmp_path / "person"
    git("clone", "-q", "--branch", "assay/gh", str(on_github.fake.repo(OWNER, NAME).path), str(clone))
    (clone / "gh.txt").write_text("changed after verification\n")
    git("commit", "-q", "-am", "a late change", cwd=clone)
    git("push", "-q", "origin", "HEAD:refs/heads/assay/gh", cwd=clone)
    head = git("rev-parse", "HEAD", cwd=clone).strip()
    on_github.fake.merge(OWNER, NAME, on_github.pull.number, by="maintainer")
    code, view = audited_on(on_github)
    assert code == 1 and "verify-evidence" in failed(view)
    assert f"the head merged ({head[:10]}) has no verify evidence" in failed(view)["verify-evidence"]
    assert "lacks the trailers" in failed(view)["branch-epochs"]  # and the commit came from no desk


def test_a_reviewers_approval_on_github_is_in_the_timeline_and_the_desks_token_cannot_approve(
        on_github: OnGitHub) -> None:
    own = assay("review", "approve", "gh", env=on_github.env)
    assert own.code == 2 and "your own pull request" in own.err and "reviewer's own" in own.err, own.err
    assert "Traceback" not in own.err and on_github.fake.repo(OWNER, NAME).reviews == []
    person = {**on_github.env, "GITHUB_TOKEN": on_github.fake.token_of("ana"), "ASSAY_PERSON": "ana"}
    approved = assay("review", "approve", "gh", env=person)
    assert approved.code == 0, approved.err
    shown = assay("review", "show", "gh", "--json", env=person).json()
    assert isinstance(shown, dict) and shown["approvals"] == ["ana"], shown
    code, view = audited_on(on_github)
    assert code == 0 and failed(view) == {}
    assert any(e["what"].startswith(f"review approved by ana at {on_github.pull.head_sha[:10]}")
               for e in view["timeline"])


def test_other_ci_statuses_and_peoples_edits_are_events_not_desk_writes(on_github: OnGitHub) -> None:
    ci = {**on_github.env, "GITHUB_TOKEN": on_github.fake.token_of("ci-bot")}
    person = on_github.fake.token_of("ana")
    for token, method, path, body in (
            (ci["GITHUB_TOKEN"], "POST", f"statuses/{on_github.pull.head_sha}",
             {"state": "success", "context": "ci/build"}),
            (person, "DELETE", f"issues/{on_github.pull.number}/labels/desk:builder", None),
            (person, "POST", f"issues/{on_github.pull.number}/labels", {"labels": ["assay:blocked"]})):
        request = urllib.request.Request(f"{on_github.fake.api_url}/repos/{OWNER}/{NAME}/{path}", method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Authorization": f"token {token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status in (200, 201)
    code, view = audited_on(on_github)
    assert code == 0 and failed(view) == {}, failed(view)
    review = [e["what"] for e in view["timeline"] if e["source"] == "review"]
    assert any("ci/build success" in line and "by ci-bot" in line for line in review), review
    assert "unlabeled desk:builder by ana" in review and "labeled assay:blocked by ana" in review
    assert api(on_github, "POST", f"issues/{on_github.pull.number}/labels", {"labels": ["assay:done"]}) == 200
    assert audited_on(on_github)[0] == 0  # still within the epoch's custody, announced: the desks' own write
    assert assay("release", "gh", "--force", "--reason", "reassigned", env=on_github.env).code == 0
    on_github.fake.clock_offset_s = 3600
    assert api(on_github, "DELETE", f"issues/{on_github.pull.number}/labels/assay:done", None) == 200
    code, view = audited_on(on_github)
    assert code == 1 and "label 'assay:done' removed by assay-bot" in failed(view)["fenced-writes"]


def test_a_step_resumed_by_another_desk_at_the_next_epoch_fences_its_writes(forge: Forge, fake_github: FakeGitHub,
                                                                            tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "desks/other.yaml": DESK.format(name="other", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f never.txt")})  # ends blocked
    env = github_env(forge, fake_github, tmp_path)
    crashed = assay("desk", "run", "builder", "--once", env={**env, "ASSAY_CRASH_AT": "step.before-execute:review"},
                    timeout=180)
    assert crashed.code < 0, crashed.err
    assert assay("release", "gh", "--force", "--reason", "builder is gone", env=env).code == 0
    other = assay("desk", "run", "other", "--once", env=env, timeout=180)
    assert other.code == 5 and "gh blocked" in other.out, other.out + other.err
    [pull] = fake_github.pulls(OWNER, NAME)
    assert fake_github.labels(OWNER, NAME, pull.number) == []  # a draft is labelled only once it is ready
    journal = entries(fake_github.repo(OWNER, NAME).path, "gh")
    assert any(e["kind"] == "intent" and e.get("step") == "review" and e["epoch"] == 1 for e in journal)
    notes = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("review")]
    assert notes == []  # and no ready note of desk other's epoch announced anything after it
    run = assay("audit", "gh", "--json", env=env)
    view = run.json()
    assert isinstance(view, dict) and run.code == 0, failed(view) if isinstance(view, dict) else run.err
    reasons = {c["name"]: c["reason"] for c in view["checks"]}
    assert "2 epoch(s)" in reasons["one-holder"]


def test_a_claim_chain_that_revives_an_ended_epoch_fails_one_holder(desks: Forge, tmp_path: Path) -> None:
    ready(desks, tmp_path, "ship", ["write ship.txt v1"], "test -f ship.txt")
    assert assay("release", "ship", "--force", "--reason", "reassigned", "--forge", desks.url).code == 0
    chain = claim_chain(desks.path, "ship")
    revived = {**chain[-1], "state": "held", "desk": "other", "holder": "other/host/1/x", "reason": ""}
    bare = ["--git-dir", str(desks.path)]
    blob = git(*bare, "hash-object", "-w", "--stdin", input=json.dumps(revived)).strip()
    tree = git(*bare, "mktree", input=f"100644 blob {blob}\tclaim.json\n").strip()
    tip = git(*bare, "rev-parse", "refs/assay/claims/ship").strip()
    commit = git(*bare, "commit-tree", tree, "-p", tip, "-m", "revived").strip()
    git(*bare, "update-ref", "refs/assay/claims/ship", commit)
    code, view = audited(desks, "ship")
    assert code == 1 and "one-holder" in failed(view)
    assert "goes on" in failed(view)["one-holder"] and "after it ended (released)" in failed(view)["one-holder"]


def test_a_row_that_fails_then_passes_on_one_head_leaves_two_statuses_each_with_its_evidence(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    flag = tmp_path / "flaky-once"
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], f"test -e {flag} || {{ touch {flag}; exit 1; }}"),
                    "briefs/idle.md": brief("Idle", [], "test -f nothing.txt")})  # no change, fails: blocked
    env = github_env(forge, fake_github, tmp_path)
    for _ in range(2):
        run = assay("desk", "run", "builder", "--once", env=env, timeout=180)
        assert run.code in (0, 5), run.err  # 5: a pass that blocked a brief (idle) for a person
    claims = assay("claims", "--json", env=env).json()
    assert isinstance(claims, dict) and {c["brief"]: c["state"] for c in claims["claims"]} == \
        {"gh": "waiting", "idle": "blocked"}
    [pull] = fake_github.pulls(OWNER, NAME)
    states = [s.state for s in fake_github.statuses(OWNER, NAME, pull.head_sha)]
    assert sorted(states) == ["failure", "success"]  # one head, both attempts' evidence
    main = git("--git-dir", str(fake_github.repo(OWNER, NAME).path), "rev-parse", "main").strip()
    assert fake_github.statuses(OWNER, NAME, main) == []  # the idle brief posted nothing on main's commit
    for brief_id in ("gh", "idle"):
        code, view = audited_on(OnGitHub(fake_github, env, pull), brief_id)
        assert code == 0 and failed(view) == {}, (brief_id, failed(view))


def test_an_earlier_closed_pull_request_of_the_brief_is_audited_too(on_github: OnGitHub) -> None:
    first = on_github.pull.number
    on_github.fake.close(OWNER, NAME, first)  # closed; a second one is opened from the same branch
    assert api(on_github, "POST", "pulls", {"title": "Gh again", "head": "assay/gh", "base": "main",
                                            "draft": True}) == 201
    numbers = [p.number for p in on_github.fake.pulls(OWNER, NAME)]
    assert len(numbers) == 2 and numbers[0] == first
    code, view = audited_on(on_github)
    assert code == 0 and failed(view) == {}, failed(view)
    assert any(e["what"].startswith("labeled desk:builder by assay-bot") and e["what"].endswith(f"(#{first})")
               for e in view["timeline"])
    assert assay("release", "gh", "--force", "--reason", "try again", env=on_github.env).code == 0
    on_github.fake.clock_offset_s = 3600  # a write to the closed one, an hour on: no epoch holds the claim
    assert api(on_github, "POST", f"issues/{first}/labels", {"labels": ["assay:merged"]}) == 200
    code, view = audited_on(on_github)
    assert code == 1 and "label 'assay:merged' added by assay-bot" in failed(view)["fenced-writes"]


def test_a_closed_pull_request_released_is_worked_again_in_a_new_one_and_both_are_audited(
        on_github: OnGitHub) -> None:
    first = on_github.pull.number
    person = {**on_github.env, "GITHUB_TOKEN": on_github.fake.token_of("ana"), "ASSAY_PERSON": "ana"}
    closed = assay("review", "close", "gh", "--reason", "use v2 wording", env=person)  # the brief is blocked
    assert closed.code == 0, closed.err
    assert "gh blocked" in assay("desk", "run", "builder", "--once", env=on_github.env, timeout=180).out
    assert assay("release", "gh", "--force", "--reason", "try again", env=on_github.env).code == 0
    again = assay("desk", "run", "builder", "--once", env=on_github.env, timeout=180)
    assert again.code == 0 and "working it again" in again.out and "review ready" in again.out, again.err
    [prompt] = Path(on_github.env["ASSAY_STATE_DIR"]).glob("*/prompts/gh-2-1.md")
    assert "use v2 wording" in prompt.read_text()  # the reviewer's words, read from the pull request
    pulls = on_github.fake.pulls(OWNER, NAME)
    assert [(p.number, p.state) for p in pulls] == [(first, "closed"), (first + 1, "open")] and not pulls[1].draft
    assert [s.state for s in on_github.fake.statuses(OWNER, NAME, pulls[1].head_sha)].count("success") >= 1
    code, view = audited_on(on_github)
    assert code == 0 and failed(view) == {}, failed(view)
    assert any(e["what"].endswith(f"(#{first})") for e in view["timeline"])  # the closed one's story too


def test_a_fenced_out_desks_label_write_during_the_next_epoch_fails_fenced_writes(on_github: OnGitHub) -> None:
    assert assay("release", "gh", "--force", "--reason", "reassigned", env=on_github.env).code == 0
    assert assay("claim", "gh", "--desk", "other", env=on_github.env).code == 0  # epoch 2 holds it now
    assert audited_on(on_github)[0] == 0
    on_github.fake.clock_offset_s = 3600  # stamped well inside epoch 2's custody, long after epoch 1 ended
    assert api(on_github, "POST", f"issues/{on_github.pull.number}/labels", {"labels": ["assay:draft"]}) == 200
    code, view = audited_on(on_github)
    assert code == 1 and set(failed(view)) == {"fenced-writes"}  # epoch 2 never announced or resumed it
    assert "label 'assay:draft' added by assay-bot" in failed(view)["fenced-writes"]


def test_with_the_api_limit_spent_the_board_is_built_and_no_audit_is_judged(on_github: OnGitHub,
                                                                            tmp_path: Path) -> None:
    """GitHub's REST limit is spent (its reset an hour away): `board build` still writes the board from the
    forge's refs, saying the pull requests were not read; `audit --all` stops and says why, judging no brief."""
    gh = on_github.fake
    gh.faults.arm("GET", r"/pulls", Fault.PRIMARY_RATE_LIMIT, times=50)
    out = tmp_path / "site"
    board = assay("board", "build", "-o", str(out), "--json", env=on_github.env)
    assert board.code == 0, board.err
    built = json.loads((out / "board.json").read_text())
    assert "gh" in json.dumps(built["briefs"]) and (out / "index.html").is_file()
    assert any("pull requests not read" in p and "rate limit" in p for p in built["problems"]), built["problems"]
    assert "pull requests not read" in (out / "index.html").read_text()
    audit_all = assay("audit", "--all", "--json", env=on_github.env)
    assert audit_all.code == 1 and "the audit stopped at 'gh'" in audit_all.err, audit_all.out + audit_all.err
    assert "rate limit" in audit_all.err and audit_all.out.strip() == ""  # no history reported as failed


def test_a_status_names_its_epoch_and_a_late_one_from_an_ended_epoch_fails_though_a_later_epoch_resumed_the_step(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    """Desk builder (epoch 1) journals its `statuses` intent and dies; desk other (epoch 2) resumes the step and
    posts them. A status builder's epoch posts later (as a desk that woke after a long wait would) is judged by
    epoch 1's custody, not covered by epoch 2 resuming the step."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "desks/other.yaml": DESK.format(name="other", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    env = github_env(forge, fake_github, tmp_path)
    crashed = assay("desk", "run", "builder", "--once", env={**env, "ASSAY_CRASH_AT": "step.before-execute:statuses"},
                    timeout=180)
    assert crashed.code < 0, crashed.err
    assert assay("release", "gh", "--force", "--reason", "builder is gone", env=env).code == 0
    other = assay("desk", "run", "other", "--once", env=env, timeout=180)
    assert other.code == 0 and "review ready" in other.out, other.out + other.err
    [pull] = fake_github.pulls(OWNER, NAME)
    [posted] = fake_github.statuses(OWNER, NAME, pull.head_sha)
    assert posted.context == "assay/verify" and (posted.description or "").endswith("; epoch 2")
    gh = OnGitHub(fake_github, env, pull)
    code, view = audited_on(gh)
    assert code == 0 and failed(view) == {}, failed(view)
    fake_github.clock_offset_s = 3600  # epoch 1 wakes an hour later and posts the same evidence again
    late = (posted.description or "").replace("; epoch 2", "; epoch 1")
    assert api(gh, "POST", f"statuses/{pull.head_sha}",
               {"state": posted.state, "context": posted.context, "description": late}) == 201
    code, view = audited_on(gh)
    assert code == 1 and set(failed(view)) == {"fenced-writes"}
    reason = failed(view)["fenced-writes"]
    assert "status 'assay/verify' on" in reason and "at epoch 1" in reason
    assert "when epoch 1, which posted it, did not hold the claim" in reason


def test_audit_all_runs_as_many_git_processes_for_thirty_briefs_as_for_ten(tmp_path: Path) -> None:
    """`audit --all` reads every chain with one rev-list, not a few per brief: counted with a logging `git`, a
    fleet three times as large costs the same number of git processes (a cold cache each time)."""
    counts = []
    for scale in (1, 3):
        forge = tmp_path / f"forge-{scale}.git"
        make_fleet(forge, time.time(), {"done": 4 * scale, "held": 2 * scale, "waiting": 2 * scale,
                                        "blocked": scale, "unknown": scale, "unclaimed": scale})
        folder, log = logging_git(tmp_path / f"log-{scale}")
        ran = assay("audit", "--all", "--json", "--forge", str(forge),
                    env={"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
                         "ASSAY_CACHE_DIR": str(tmp_path / f"cache-{scale}")})
        audited = ran.json()
        assert isinstance(audited, list) and len(audited) == 10 * scale, ran.out + ran.err
        # the generator's story is consistent with its evidence: every brief of the fleet passes its audit
        assert ran.code == 0 and [a["brief"] for a in audited if not a["passed"]] == [], ran.out
        counts.append(len(calls(log)))
    assert counts[0] == counts[1], counts
    assert counts[0] < 20, counts  # a handful: ls-remote, fetch, cat-file batches, one rev-list
