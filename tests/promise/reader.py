"""An independent reader of the forge: plain git only (never `assay`), for the promise suite's judge."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.journal_check import claim_chain, entries, invariants, snapshot_problems

__all__ = ["claim_chain", "entries", "invariants", "snapshot_problems", "refs", "safe_entries", "objects_holding",
           "briefs_on_main", "claim_tips", "review_chain"]


def _git(forge: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(["git", "--git-dir", str(forge), *args], capture_output=True, text=True,
                          check=check).stdout


def refs(forge: Path, prefix: str = "refs/") -> dict[str, tuple[str, str]]:
    """Every ref under `prefix`: name -> (object type, sha)."""
    out = _git(forge, "for-each-ref", "--format=%(refname) %(objecttype) %(objectname)", prefix)
    return {name: (kind, sha) for name, kind, sha in (line.split() for line in out.splitlines() if line)}


def safe_entries(forge: Path, brief: str) -> list[dict[str, Any]] | None:
    """The brief's journal entries, or None when the journal is junk (planted) and does not read as JSON lines."""
    try:
        found = entries(forge, brief)
    except (subprocess.CalledProcessError, ValueError):
        return None
    return found if all(isinstance(e, dict) for e in found) else None


def objects_holding(forge: Path, needle: bytes) -> list[str]:
    """Every object in the forge (reachable or not) whose content holds `needle`: their shas."""
    listed = _git(forge, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
    if not listed:
        return []
    batch = subprocess.run(["git", "--git-dir", str(forge), "cat-file", "--batch"], capture_output=True,
                           check=True, input="".join(f"{sha}\n" for sha in listed).encode()).stdout
    found, pos = [], 0
    for sha in listed:
        end = batch.index(b"\n", pos)
        size = int(batch[pos:end].split()[2])
        if needle in batch[end + 1:end + 1 + size]:
            found.append(sha)
        pos = end + 1 + size + 1
    return found


def briefs_on_main(forge: Path) -> list[str]:
    names = _git(forge, "ls-tree", "--name-only", "refs/heads/main", "briefs/", check=False).split()
    return sorted(n.removeprefix("briefs/").removesuffix(".md") for n in names if n.endswith(".md"))


def json_at(forge: Path, rev: str, path: str) -> Any:
    """A JSON file in a commit, or None when it is missing or not JSON."""
    try:
        return json.loads(_git(forge, "show", f"{rev}:{path}"))
    except (subprocess.CalledProcessError, ValueError):
        return None


def claim_tips(forge: Path) -> dict[str, dict[str, Any]]:
    """Each brief's claim record at its tip; a junk claim ref (planted) is left out."""
    out: dict[str, dict[str, Any]] = {}
    for b in _git(forge, "for-each-ref", "--format=%(refname:lstrip=3)", "refs/assay/claims/").split():
        record = json_at(forge, f"refs/assay/claims/{b}", "claim.json")
        if isinstance(record, dict) and isinstance(record.get("state"), str):
            out[b] = record
    return out


def review_chain(forge: Path, brief: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The brief's review chain, oldest first: (commit, subject, review.json); a record that is not JSON is left out."""
    log = _git(forge, "log", "--reverse", "--format=%H %s", f"refs/assay/reviews/{brief}", "--", check=False)
    out = []
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        record = json_at(forge, sha, "review.json")
        if isinstance(record, dict):
            out.append((sha, subject, record))
    return out
