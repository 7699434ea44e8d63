"""An independent reader of journals and claims: plain git only, never assay's own modules."""

from __future__ import annotations

import base64
import hashlib
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
    return problems + learned_problems(forge, brief, chain)


def learned_problems(forge: Path, brief: str, chain: list[dict[str, Any]]) -> list[str]:
    """A footprint learned from the brief's diff (`refs/assay/learned/<brief>`, when it holds one) was written by
    the desk that held the brief at the epoch it names: a fenced desk writes none."""
    ref = f"refs/assay/learned/{brief}"
    tip = _git(forge, "for-each-ref", "--format=%(objectname)", ref).strip()
    if not tip:
        return []
    shown = subprocess.run(["git", "--git-dir", str(forge), "show", f"{tip}:footprints.json"], capture_output=True,
                           text=True)
    try:
        entry = json.loads(shown.stdout)["briefs"][brief]
    except (ValueError, KeyError, TypeError):
        return []  # junk planted there: the readers report it, and the brief's next round replaces it
    author = _git(forge, "log", "-1", "--format=%an", tip).strip()
    held = {(c["epoch"], c["desk"]) for c in chain if c["state"] == "held"}
    return [] if (entry["epoch"], author) in held else \
        [f"{ref} names epoch {entry['epoch']}, written by {author!r}, which never held the brief then"]


def _commit_entries(forge: Path, sha: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _git(forge, "show", f"{sha}:entries.jsonl").splitlines() if line]


def snapshot_problems(forge: Path, brief: str, every: int | None = None) -> list[str]:
    """Each journal snapshot (`snapshot/` in a commit's tree) agrees with the entries it summarizes: its segments are
    the canonical lines of entries 1..last_seq, its tip is the commit that added entry last_seq, and its open intents,
    counts and blob commits are those of the entries. With `every`, a new snapshot appears exactly in the commits that
    cross a multiple of it (each covering the entries before it), and other commits carry their parent's on."""
    ref = f"refs/assay/journal/{brief}"
    if not _git(forge, "for-each-ref", ref).strip():
        return []
    commits = _git(forge, "rev-list", "--reverse", ref).split()
    problems: list[str] = []
    es: list[dict[str, Any]] = []
    commit_of: dict[int, str] = {}
    checked: set[str] = set()
    parent_snap = ""
    for sha in commits:
        mine = _commit_entries(forge, sha)
        first = len(es) + 1
        tree = subprocess.run(["git", "--git-dir", str(forge), "rev-parse", "-q", "--verify", f"{sha}:snapshot"],
                              capture_output=True, text=True).stdout.strip()
        if every is not None and mine:
            crossing = first > 1 and (first - 1) // every != (first + len(mine) - 1) // every
            if crossing and (not tree or tree == parent_snap):
                problems.append(f"commit {sha[:10]} crosses a multiple of {every} without a new snapshot")
            if not crossing and tree != parent_snap:
                problems.append(f"commit {sha[:10]} does not carry its parent's snapshot on")
        if tree and tree not in checked:
            checked.add(tree)
            problems += [f"snapshot {tree[:10]} (commit {sha[:10]}): {p}"
                         for p in _snapshot_disagrees(forge, brief, tree, es, commit_of)]
        for e in mine:
            es.append(e)
            commit_of[e["seq"]] = sha
        parent_snap = tree
    return problems


def _snapshot_disagrees(forge: Path, brief: str, tree: str, es: list[dict[str, Any]],
                        commit_of: dict[int, str]) -> list[str]:
    try:
        summary = json.loads(_git(forge, "show", f"{tree}:snapshot.json"))
    except (subprocess.CalledProcessError, ValueError):
        return ["its snapshot.json does not read"]
    if summary.get("v") != 1 or summary.get("brief") != brief:
        return [f"its summary is of version {summary.get('v')!r}, brief {summary.get('brief')!r}"]
    last = summary["last_seq"]
    problems = []
    if last != len(es):
        problems.append(f"it ends at {last}, but {len(es)} entries come before its commit")
    if commit_of.get(last) != summary["tip"]:
        problems.append(f"its tip {summary['tip'][:10]} did not add entry {last}")
    lines: list[str] = []
    names = set(_git(forge, "ls-tree", "--name-only", tree).split())
    for a, b in summary["segments"]:
        if f"{a}-{b}.jsonl" not in names:
            problems.append(f"segment {a}-{b} is missing")
            continue
        lines += _git(forge, "show", f"{tree}:{a}-{b}.jsonl").splitlines()
    expected = [json.dumps(e, sort_keys=True, ensure_ascii=False, separators=(",", ":")) for e in es[:last]]
    if lines != expected:
        problems.append("its segments are not the canonical lines of the entries before it")
    open_intents = {e["seq"] for e in es[:last] if e["kind"] == "intent"} - \
        {e["intent"] for e in es[:last] if e["kind"] in ("result", "outcome_unknown")}
    if summary["open"] != sorted(open_intents):
        problems.append(f"its open intents {summary['open']} are not {sorted(open_intents)}")
    if summary["nondets"] != sum(e["kind"] == "nondeterminism" for e in es[:last]):
        problems.append("its nondeterminism count is off")
    starts = 0
    for e in es[:last]:
        data = e.get("data") or {}
        ended = e["kind"] == "note" and data.get("run") == "end"
        if ended or (e["kind"] == "claim" and data.get("action") == "block"):
            starts = 0
        elif e["kind"] == "note" and data.get("run") == "start":
            starts += 1
    if summary["starts"] != starts:
        problems.append(f"its run starts {summary['starts']} are not {starts}")
    blobs = {e["seq"]: commit_of[e["seq"]] for e in es[:last] if any(k.endswith("_blob") for k in e.get("data") or {})}
    kept: dict[int, str] = {}
    for a, b in summary["segments"]:
        if f"{a}-{b}.commits" in names:
            for line in _git(forge, "show", f"{tree}:{a}-{b}.commits").splitlines():
                seq, sha = line.split()
                kept[int(seq)] = sha
    if kept != blobs:
        problems.append("its blob commits are not those of the entries naming blobs")
    for a, b in summary["segments"]:
        if f"{a}-{b}.keys" in names:
            problems += _filter_lacks(_git(forge, "show", f"{tree}:{a}-{b}.keys"), es[a - 1:b], f"{a}-{b}")
    return problems


def _filter_lacks(text: str, segment: list[dict[str, Any]], name: str) -> list[str]:
    """A segment's filter of lookup keys (docs/snapshots.md) that says absent for a key one of its entries has."""
    try:
        raw = json.loads(text)
        bits, k, m = base64.b64decode(raw["bits"]), raw["k"], raw["m"]
        assert raw["v"] == 1 and m == len(bits) * 8 > 0
    except (ValueError, KeyError, TypeError, AssertionError):
        return [f"the filter of segment {name} does not read"]

    def holds(key: str) -> bool:
        digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
        h1, h2 = int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big") | 1
        return all(bits[n // 8] >> (n % 8) & 1 for n in ((h1 + i * h2) % m for i in range(k)))

    def key(*parts: object) -> str:
        return json.dumps(parts, ensure_ascii=False, separators=(",", ":"))

    for e in segment:
        keys = [key("run", e.get("run", ""))]
        if e["kind"] in ("intent", "refused", "outcome_unknown") and e.get("step") is not None:
            keys.append(key("call", e["step"], e.get("input_sha") or ""))
        if e.get("intent") is not None:
            keys.append(key("intent", e["intent"]))
        if e["kind"] == "nondeterminism":
            keys.append(key("nondeterminism"))
        if not all(holds(key) for key in keys):
            return [f"the filter of segment {name} lacks a key of entry {e['seq']}"]
    return []


def checkpoint_text(forge: Path, checkpoint: dict[str, Any], brief: str = "ship") -> str:
    """A checkpoint entry's transcript (its `checkpoint_blob`), as the forge holds it: "" if no commit has it."""
    path = str((checkpoint.get("data") or {}).get("checkpoint_blob"))
    for sha in _git(forge, "rev-list", f"refs/assay/journal/{brief}").split():
        found = subprocess.run(["git", "--git-dir", str(forge), "cat-file", "-p", f"{sha}:{path}"],
                               capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout
    return ""
