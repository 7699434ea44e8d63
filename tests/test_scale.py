"""Readers at sizes well past the pipe buffers: thousands of briefs, claims and journal commits.

Each forge is built in one `git fast-import` run, and every reader runs as a real
process under a timeout, so a reader that deadlocks on its pipes fails instead of hanging.
"""

from __future__ import annotations

import json

import pytest

from assay.core.claims import Claims
from assay.core.records import ClaimRecord, JournalEntry
from assay.core.steps import input_sha
from tests.conftest import Forge, assay, brief_md, git
from tests.helpers.fastimport import commit, fast_import

TIMEOUT = 90  # generous for a loaded CI machine; a deadlocked reader never finishes at all
AT = "2026-01-01T00:00:00Z"


def claim_json(brief: str) -> bytes:
    return ClaimRecord(brief=brief, state="held", epoch=1, desk="d1", holder="d1/host/1/abcd", lease_s=600,
                       branch=f"assay/{brief}", at=AT).encode()


def test_briefs_lists_3000_briefs_on_main(forge: Forge) -> None:
    main = forge.tip("refs/heads/main")
    assert main
    files = {f"briefs/b{i:04d}.md": brief_md(f"Brief {i}").encode() for i in range(3000)}
    fast_import(forge, commit("refs/heads/main", files, parent=main))
    run = assay("briefs", "--forge", forge.url, "--json", timeout=TIMEOUT)
    assert run.code == 0, run.err
    listing = run.json()
    assert isinstance(listing, dict) and listing["problems"] == []
    assert len(listing["briefs"]) == 3006 and {"b0000", "b2999"} <= {b["brief"] for b in listing["briefs"]}


@pytest.mark.slow  # ~10 s, nearly all of it in git fetch matching 3,000 refspecs against 3,000 refs
def test_claims_lists_3000_claims(forge: Forge) -> None:
    briefs = [f"b{i:04d}" for i in range(3000)]
    fast_import(forge, b"".join(commit(f"refs/assay/claims/{b}", {"claim.json": claim_json(b)}) for b in briefs))
    run = assay("claims", "--forge", forge.url, "--json", timeout=TIMEOUT)
    assert run.code == 0, run.err
    listing = run.json()
    assert isinstance(listing, dict) and listing["invalid"] == []
    assert [c["brief"] for c in listing["claims"]] == briefs


def journal_of_5000_commits(forge: Forge) -> None:
    """4,999 notes, then an intent of an unsafe step that never got a result: one entry per commit."""
    entries = [JournalEntry(seq=seq, epoch=1, kind="note", at=AT, run="earlier", data={"text": f"n{seq}"})
               for seq in range(1, 5000)]
    entries.append(JournalEntry(seq=5000, epoch=1, kind="intent", at=AT, run="earlier", step="deploy", ordinal=0,
                                input_sha=input_sha({"x": 1}), key="alpha/1/deploy/0", policy="unsafe"))
    fast_import(forge, b"".join(commit("refs/assay/journal/alpha", {"entries.jsonl": (e.encode() + "\n").encode()})
                                for e in entries))


def test_journal_and_a_resume_read_a_5000_commit_journal(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d1")
    journal_of_5000_commits(forge)
    shown = assay("journal", "alpha", "--forge", forge.url, "--json", timeout=TIMEOUT)
    assert shown.code == 0, shown.err
    view = shown.json()
    assert isinstance(view, dict) and [e["seq"] for e in view["entries"]] == list(range(1, 5001))
    # a resume: the step session replays the whole journal and meets the interrupted intent at its end
    resumed = assay("step", "run", "--name", "deploy", "--policy", "unsafe", "--input", '{"x": 1}',
                    "--forge", forge.url, "--brief", "alpha", "--desk", "d1", "--epoch", "1", "--run", "later",
                    "--", "true", timeout=TIMEOUT)
    assert resumed.code == 4, resumed.err
    assert "may or may not have completed" in resumed.err
    added = [json.loads(line) for line in
             git("--git-dir", str(forge.path), "show", "refs/assay/journal/alpha:entries.jsonl").splitlines()]
    assert [(e["seq"], e["kind"], e.get("intent")) for e in added][-1] == (5002, "refused", 5000)
