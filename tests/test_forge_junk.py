"""Junk on the forge is bad input: readers name the ref or file, exit 2, and never show a traceback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from assay.core.briefs import briefs_on_main
from assay.core.claims import Claims
from assay.core.journal import read_log
from assay.core.records import ClaimRecord
from assay.errors import RecordInvalid
from tests.conftest import Forge, assay, git


def hash_object(forge: Forge, content: bytes) -> str:
    return subprocess.run(["git", "--git-dir", str(forge.path), "hash-object", "-w", "--stdin"], input=content,
                          capture_output=True, check=True).stdout.decode().strip()


def tree_with(forge: Forge, name: str, content: bytes) -> str:
    blob = hash_object(forge, content)
    listing = f"100644 blob {blob}\t{name}\n".encode()
    return subprocess.run(["git", "--git-dir", str(forge.path), "mktree"], input=listing, capture_output=True,
                          check=True).stdout.decode().strip()


def write_loose_ref(forge: Forge, ref: str, sha: str) -> None:
    """Write a ref file by hand, as git itself refuses to (a malformed name, a branch at a blob)."""
    path = forge.path / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(sha + "\n")


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and "unexpected" not in err


def test_a_file_named_briefs_on_main_is_a_problem_not_a_crash(forge: Forge, claims: Claims) -> None:
    git("rm", "-r", "-q", "briefs", cwd=forge.seed)
    (forge.seed / "briefs").write_text("not a folder\n")
    git("add", "-A", cwd=forge.seed)
    git("commit", "-q", "-m", "briefs as a file", cwd=forge.seed)
    git("push", "-q", forge.url, "HEAD:refs/heads/main", cwd=forge.seed)
    main = forge.tip("refs/heads/main")
    assert main
    briefs, problems = briefs_on_main(claims.git, main)
    assert briefs == [] and [(p.path, p.message) for p in problems] == [
        ("briefs", "main's `briefs` is a file, not a folder")]
    run = assay("briefs", "--forge", forge.url)
    assert run.code == 2 and "main's `briefs` is a file, not a folder" in run.err
    no_traceback(run.err)


def test_a_journal_that_is_not_utf8_is_invalid_naming_ref_and_commit(forge: Forge) -> None:
    forge.write_record("refs/assay/journal/alpha", "entries.jsonl", b'{"v": 1, "seq": 1, \xff\xfe}\n')
    commit = forge.tip("refs/assay/journal/alpha")
    assert commit
    run = assay("journal", "alpha", "--forge", forge.url)
    assert run.code == 2 and "refs/assay/journal/alpha" in run.err and commit[:10] in run.err
    assert "not UTF-8" in run.err
    no_traceback(run.err)


def test_a_claim_ref_that_names_no_brief_is_listed_invalid_and_the_rest_works(forge: Forge, claims: Claims) -> None:
    tip = claims.claim("alpha", "d1").sha
    write_loose_ref(forge, "refs/assay/claims/a..b", tip)
    good, bad = claims.list_all()
    assert [c.record.brief for c in good] == ["alpha"]
    assert [(b.ref, "not a valid brief id" in b.problem) for b in bad] == [("refs/assay/claims/a..b", True)]
    with pytest.raises(RecordInvalid, match=r"refs/assay/claims/a\.\.b: not a valid brief id"):
        claims.load("refs/assay/claims/a..b", tip)
    listing = assay("claims", "--forge", forge.url, "--json")
    assert listing.code == 0, listing.err
    shown = listing.json()
    assert isinstance(shown, dict) and [c["brief"] for c in shown["claims"]] == ["alpha"]
    assert shown["invalid"] == [{"ref": "refs/assay/claims/a..b", "commit": "0" * 40,
                                 "problem": "not a valid brief id (it contains '..')"}]
    board = assay("briefs", "--forge", forge.url, "--json")
    assert board.code == 0, board.err
    rows = board.json()
    assert isinstance(rows, dict)
    states = {row["brief"]: row["state"] for row in rows["briefs"]}
    assert states["alpha"] == "held" and states["beta"] == "ready"


def test_a_claim_ref_at_a_tree_is_invalid_not_held(forge: Forge, claims: Claims) -> None:
    claim = ClaimRecord(brief="beta", state="held", epoch=1, desk="d2", holder="d2/h/1/ab", lease_s=600,
                        branch="assay/beta", at="2026-01-01T00:00:00Z")
    tree = tree_with(forge, "claim.json", claim.encode())  # a valid record, in a tree with no commit
    git("--git-dir", str(forge.path), "update-ref", "refs/assay/claims/beta", tree)
    good, bad = claims.list_all()
    assert good == [] and [(b.ref, b.problem) for b in bad] == [
        ("refs/assay/claims/beta", "points at a tree, not a commit")]
    with pytest.raises(RecordInvalid, match="refs/assay/claims/beta: points at a tree, not a commit"):
        claims.read("beta")
    with pytest.raises(RecordInvalid, match="points at a tree"):
        claims.history("beta")
    run = assay("claim", "beta", "--desk", "d1", "--forge", forge.url)
    assert run.code == 2 and "refs/assay/claims/beta: points at a tree, not a commit" in run.err
    no_traceback(run.err)


def test_a_journal_ref_at_a_blob_is_invalid_not_empty(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d1")
    git("--git-dir", str(forge.path), "update-ref", "refs/assay/journal/alpha", hash_object(forge, b"junk\n"))
    with pytest.raises(RecordInvalid, match="refs/assay/journal/alpha: points at a blob, not a commit"):
        read_log(claims.git, "alpha")
    run = assay("journal", "alpha", "--forge", forge.url)
    assert run.code == 2 and "refs/assay/journal/alpha: points at a blob, not a commit" in run.err
    no_traceback(run.err)


def test_main_at_a_blob_is_bad_input_naming_main(forge: Forge) -> None:
    write_loose_ref(forge, "refs/heads/main", hash_object(forge, b"not a commit\n"))
    for args in (["briefs"], ["claim", "alpha", "--desk", "d1"], ["desk", "list"]):
        run = assay(*args, "--forge", forge.url)
        assert run.code == 2 and "refs/heads/main: points at a blob, not a commit" in run.err, (args, run.err)
        no_traceback(run.err)


def test_a_waiting_claim_with_a_junk_condition_stops_no_desk(forge: Forge, claims: Claims, tmp_path: Path) -> None:
    """`wait.on` that is no condition ("time:soon") is junk in claim.json: the desk reports it once, leaves that brief
    alone and works the rest; the sweep and `assay claims` name the ref too. Desk and sweep share one wait rule."""
    from tests.helpers.desks import DESK, brief, publish, run_desk

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/parked.md": brief("Parked", [], "true"),
                    "briefs/next.md": brief("Next", ["write next.txt n"], "true")})
    held = claims.claim("parked", "builder")
    record = {**held.record.__dict__, "state": "waiting", "wait": {"on": "time:soon"}, "holder": ""}
    forge.write_record("refs/assay/claims/parked", "claim.json", (json.dumps(record, sort_keys=True) + "\n").encode())
    run = run_desk(forge, "builder", tmp_path)
    assert run.code == 0, run.err
    no_traceback(run.err)
    assert "leaving parked alone: refs/assay/claims/parked: claim.json wait: 'soon' is not a real time" in run.out
    assert "next verified" in run.out
    swept = assay("sweep", "--dry-run", "--json", "--forge", forge.url)
    assert swept.code == 0
    view = swept.json()
    assert isinstance(view, dict)
    assert any(f["kind"] == "junk" and "'soon' is not a real time" in f["detail"] for f in view["findings"])


def _junk_on_top(forge: Forge, ref: str, name: str) -> str:
    """A commit on top of `ref` (or a first one) whose `name` is not JSON, made with plain git; its id."""
    tip = forge.tip(ref)
    parent = ["-p", tip] if tip else []
    commit = git("--git-dir", str(forge.path), "commit-tree", tree_with(forge, name, b"{junk"), *parent, "-m", "junk")
    git("--git-dir", str(forge.path), "update-ref", ref, commit.strip())
    return commit.strip()


def test_a_claim_whose_tip_does_not_read_is_a_problem_on_the_board_not_a_blocked_brief(forge: Forge, claims: Claims,
                                                                                         tmp_path: Path) -> None:
    claims.claim("alpha", "d1")
    _junk_on_top(forge, "refs/assay/claims/alpha", "claim.json")
    assert assay("release", "alpha", "--force", "--reason", "gone", "--forge", forge.url).code == 2  # no way on
    run = assay("board", "build", "-o", str(tmp_path / "site"), "--forge", forge.url)
    data = json.loads((tmp_path / "site" / "board.json").read_text())
    card = next(c for c in data["briefs"] if c["id"] == "alpha")
    assert [n["kind"] for n in card["next"]] == ["problem"], card["next"]  # not "blocked: no reason recorded"
    assert run.code == 0 and "1 problem(s) on the forge (a record or file that does not read)" in run.err, run.err
    assert card["next"][0]["why"].startswith("refs/assay/claims/alpha: claim.json is not JSON")
    assert card["next"][0]["next"].startswith("git show refs/assay/claims/alpha")
    assert "claim.json is not JSON" in (tmp_path / "site" / "briefs" / "alpha.html").read_text()


def test_audit_all_names_the_review_records_and_refs_it_could_not_read(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d1")
    junk = _junk_on_top(forge, "refs/assay/reviews/alpha", "review.json")
    git("--git-dir", str(forge.path), "update-ref", "refs/assay/journal/Bad_Name", junk)
    run = assay("audit", "--all", "--json", "--forge", forge.url)
    found = run.json()
    assert run.code == 1 and isinstance(found, list), run.err
    checks = {a["brief"]: {c["name"]: c for c in a["checks"]} for a in found}
    fenced = checks["alpha"]["fenced-writes"]
    assert not fenced["passed"] and f"refs/assay/reviews/alpha at {junk[:10]}: review.json is not JSON" in \
        fenced["reason"] and "cannot be judged" in fenced["reason"]
    bad_name = checks["refs/assay/journal/Bad_Name"]["read"]
    assert not bad_name["passed"] and "not a valid brief id" in bad_name["reason"]
    no_traceback(run.err)


def test_one_pass_over_the_listing_sorts_every_ref_by_kind_and_sets_junk_aside(forge: Forge, claims: Claims) -> None:
    """The scan files each listed ref under its prefix in one pass (a ref's folder finds it): refs whose name is no
    brief id (a `/` in it, upper case) are junk of that kind, in the order of the kinds asked; refs under no
    prefix are filed nowhere."""
    from assay.core.scan import WHOLE, scan

    tip = forge.tip("refs/heads/main")
    assert tip
    for ref in ("refs/assay/claims/a", "refs/assay/claims/b/c", "refs/assay/claims/Up", "refs/assay/journal/a",
                "refs/assay/journal/Up", "refs/heads/assay/a", "refs/heads/assay/x/y", "refs/assay/reviews/r",
                "refs/assay/learned/a", "refs/assay/other/a", "refs/heads/feature"):
        write_loose_ref(forge, ref, tip)
    found = scan(claims.git, WHOLE)
    assert found.by_brief("claims") == {"a": tip} and found.by_brief("journals") == {"a": tip}
    assert found.by_brief("branches") == {"a": tip} and found.by_brief("reviews") == {"r": tip}
    assert found.by_brief("learned") == {"a": tip}
    assert [j.ref for j in found.junk] == ["refs/assay/claims/Up", "refs/assay/claims/b/c", "refs/assay/journal/Up",
                                           "refs/heads/assay/x/y"]
    assert "upper-case" in found.junk[0].problem and "path separator" in found.junk[1].problem
    only = scan(claims.git, ("journals", "claims"))
    assert [j.ref for j in only.junk] == ["refs/assay/journal/Up", "refs/assay/claims/Up", "refs/assay/claims/b/c"]
