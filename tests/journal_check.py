"""An independent reader of journals and claims: plain git only, never assay's own modules."""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def _git(forge: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(forge), *args], capture_output=True, text=True,
                          check=True).stdout


def entries(forge: Path, brief: str) -> list[dict[str, Any]]:
    ref = f"refs/assay/journal/{brief}"
    if not _git(forge, "for-each-ref", ref).strip():
        return []
    out: list[dict[str, Any]] = []
    for sha in _git(forge, "rev-list", "--reverse", ref).split():
        out += [json.loads(line) for line in _git(forge, "show", f"{sha}:entries.jsonl").splitlines() if line]
    return out


def journal_commits(forge: Path, brief: str) -> int:
    return len(_git(forge, "rev-list", f"refs/assay/journal/{brief}").split())


def claim_chain(forge: Path, brief: str) -> list[dict[str, Any]]:
    ref = f"refs/assay/claims/{brief}"
    shas = _git(forge, "rev-list", "--reverse", ref).split()
    return [json.loads(_git(forge, "show", f"{sha}:claim.json")) for sha in shas]


def invariants(forge: Path, brief: str) -> list[str]:
    """What must hold after any crash and recovery; returns the violations."""
    problems: list[str] = []
    es = entries(forge, brief)
    seqs = [e["seq"] for e in es]
    if seqs != list(range(1, len(es) + 1)):
        problems.append(f"seq has gaps or repeats: {seqs}")
    chain = claim_chain(forge, brief)
    holders: dict[int, set[str]] = defaultdict(set)
    for c in chain:
        if c["state"] == "held":
            holders[c["epoch"]].add(c["holder"])
    problems += [f"epoch {e} had holders {sorted(h)}" for e, h in holders.items() if len(h) > 1]
    def settles(e: dict[str, Any]) -> bool:  # a later verdict on an unknown outcome, not an end of its own
        return e["kind"] == "result" and "settled" in (e.get("data") or {})

    resolved = Counter(e["intent"] for e in es if e["kind"] in ("result", "outcome_unknown") and not settles(e))
    unknown = {e["intent"]: e["seq"] for e in es if e["kind"] == "outcome_unknown"}
    settled = Counter(e["intent"] for e in es if settles(e))
    for e in es:
        if e["kind"] == "intent" and resolved[e["seq"]] == 0:
            problems.append(f"intent {e['seq']} ({e['step']}) has neither a result nor an outcome_unknown")
        if e["kind"] == "intent" and resolved[e["seq"]] > 1:
            problems.append(f"intent {e['seq']} ({e['step']}) is resolved {resolved[e['seq']]} times")
        if e["kind"] == "intent" and settled[e["seq"]] > 1:
            problems.append(f"intent {e['seq']} ({e['step']}) is settled {settled[e['seq']]} times")
        if settles(e) and not unknown.get(e["intent"], e["seq"]) < e["seq"]:
            problems.append(f"entry {e['seq']} settles intent {e['intent']}, whose outcome was never unknown")
    epochs_seen = {c["epoch"] for c in chain}
    problems += [f"entry {e['seq']} has epoch {e['epoch']} that no claim had"
                 for e in es if e["epoch"] not in epochs_seen]
    return problems
