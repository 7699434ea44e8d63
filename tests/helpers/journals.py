"""Journals written behind the tool's back: entries appended with fast-import, or the whole journal replaced."""

from __future__ import annotations

import json

from assay.core.records import JournalEntry
from tests.conftest import Forge, git
from tests.helpers.fastimport import commit, fast_import

REF = "refs/assay/journal/alpha"


def append(forge: Forge, entries: list[JournalEntry], ref: str = REF, new: bool = False) -> None:
    """One commit per entry on `ref`, after its tip; `new`: a new chain put in its place (a forced rewrite)."""
    target = "refs/rewrite/chain" if new else ref
    parent = None if new else forge.tip(ref)
    fast_import(forge, b"".join(commit(target, {"entries.jsonl": (e.encode() + "\n").encode()},
                                       parent if i == 0 else None) for i, e in enumerate(entries)))
    if new:
        git("--git-dir", str(forge.path), "update-ref", ref, target)
        git("--git-dir", str(forge.path), "update-ref", "-d", target)


def replace_journal(forge: Forge, brief: str, entries_jsonl: list[dict[str, object]]) -> None:
    """Rewrite the journal as one root commit holding these entries, as an older or foreign writer might."""
    text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries_jsonl)
    forge.write_record(f"refs/assay/journal/{brief}", "entries.jsonl", text.encode())
