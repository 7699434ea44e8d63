"""Junk planted with plain git: in every ref kind, in every field of every journal entry kind, and stale ref lock
files (what a SIGKILL mid-push leaves on a forge on disk). Nothing here goes through Assay."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Any

AT = "2026-01-01T00:00:00Z"
SHA = "ab" * 32
LIFE = {"host": "gone", "pid": 999999, "start": 1, "boot": "0" * 36}
STEP = {"step": "deploy", "ordinal": 0, "input_sha": SHA, "key": f"BRIEF/1/deploy/{SHA[:12]}/0", "policy": "unsafe"}
# one valid entry of each kind (seq 2, after a claim at seq 1); BRIEF is replaced by the brief's id
KINDS: dict[str, dict[str, Any]] = {
    "claim": {"data": {"action": "block", "reason": "planted"}},
    "intent": {**STEP, "data": {**LIFE, "input": ["sh", "-c", "true"], "probe": "true"}},
    "result": {**STEP, "intent": 1, "status": "completed", "data": {"output": {"exit_code": 0, "duration_ms": 1,
                                                                             "tail": ""}}},
    "outcome_unknown": {**STEP, "intent": 1, "data": {"reason": "interrupted"}},
    "refused": {**STEP, "intent": 1, "data": {"message": "The previous `deploy` operation was interrupted."}},
    "nondeterminism": {"data": {"name": "uuid", "arg": None, "value": "0" * 32}},
    "wait": {"data": {"on": "review"}},
    "wake": {"data": {"by": "promise", "was": {"on": "review"}}},
    "verify": {"data": {"row": "check", "command": "true", "exit_code": 0, "passed": True, "head": "0" * 40}},
    "checkpoint": {"data": {"name": "agent-session", "checkpoint_blob": "blobs/2-checkpoint", "session": "s1",
                            "attempt": 1, "bytes": 3}},
    "steer": {"data": {"text": "planted steering", "by": "promise"}},
    "note": {"data": {"steer": "delivered", "of": 1}},
}
FIELDS = ("v", "seq", "epoch", "kind", "at", "run", "step", "ordinal", "input_sha", "key", "policy", "status",
          "intent", "data")
# what replaces a field: a value of another type, out of range, hostile, or huge
JUNK_VALUES: tuple[Any, ...] = (None, -1, 2**70, "", "../../../../tmp/PWNED", ["x"], {"x": 1}, True, 1.5,
                                "x" * 100_000, "\u202e\x00\x1b[31m")


def entry(kind: str, brief: str, seq: int = 2) -> dict[str, Any]:
    base = {"v": 1, "seq": seq, "epoch": 1, "kind": kind, "at": AT, "run": "r1"}
    text = json.dumps({**base, **KINDS[kind]}).replace("BRIEF", brief)
    return dict(json.loads(text))


def claim_entry(brief: str) -> dict[str, Any]:
    return {"v": 1, "seq": 1, "epoch": 1, "kind": "claim", "at": AT, "run": "r1",
            "data": {"action": "block", "reason": "planted"}}


def mutations(rng: random.Random | None = None) -> list[tuple[str, str, Any]]:
    """(kind, field, junk value) for every field of every kind: a value drawn from JUNK_VALUES (all of them in
    turn without `rng`), and the field's removal (`...`)."""
    out: list[tuple[str, str, Any]] = []
    for kind in KINDS:
        for name in FIELDS:
            out.append((kind, name, ...))
            out.append((kind, name, rng.choice(JUNK_VALUES) if rng else JUNK_VALUES[len(out) % len(JUNK_VALUES)]))
    return out


def mutated(kind: str, name: str, value: Any, brief: str) -> bytes:
    """A journal of two entries, the second of `kind` with `name` replaced by `value` (`...`: removed)."""
    e = entry(kind, brief)
    if value is ...:
        e.pop(name, None)
    else:
        e[name] = value
    return (json.dumps(claim_entry(brief)) + "\n" + json.dumps(e) + "\n").encode()


def _git(forge: Path, *args: str, data: bytes | None = None) -> str:
    return subprocess.run(["git", "--git-dir", str(forge), *args], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def commit(forge: Path, files: dict[str, bytes], message: str = "junk") -> str:
    """A root commit holding `files` (flat names), with plain git."""
    listing = "".join(f"100644 blob {_git(forge, 'hash-object', '-w', '--stdin', data=body)}\t{name}\n"
                      for name, body in sorted(files.items()))
    tree = _git(forge, "mktree", data=listing.encode())
    return _git(forge, "commit-tree", tree, "-m", message)


def point(forge: Path, ref: str, sha: str) -> None:
    """Point `ref` at `sha`; by hand where git refuses (a branch at a blob)."""
    try:
        _git(forge, "update-ref", ref, sha)
    except subprocess.CalledProcessError:
        path = forge / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sha + "\n")


def blob(forge: Path, body: bytes) -> str:
    return _git(forge, "hash-object", "-w", "--stdin", data=body)


# the junk of each ref kind: (name, what goes at the ref); `record` is the file the ref kind's commits hold
REF_KINDS = {"claims": "claim.json", "journal": "entries.jsonl", "reviews": "review.json",
             "learned": "footprints.json"}
BODIES: tuple[bytes, ...] = (b"", b"{", b"[]\n", b"null\n", b'{"v": 2}\n', b"\xff\xfe\n",
                             b'{"v": 1, "state": "held", "epoch": "1"}\n', b'{"v": 1}\n' * 5000)


def plant_ref(forge: Path, ref: str, rng: random.Random, record: str) -> str:
    """Junk at `ref`: a blob, a commit with the wrong file, or a commit with a junk record. Says which."""
    choice = rng.randrange(4)
    if choice == 0:
        point(forge, ref, blob(forge, rng.choice(BODIES)))
        return f"{ref}: a blob"
    if choice == 1:
        point(forge, ref, commit(forge, {"other.txt": b"no record here\n"}))
        return f"{ref}: a commit without {record}"
    body = rng.choice(BODIES)
    point(forge, ref, commit(forge, {record: body}))
    return f"{ref}: {record} = {body[:40]!r}"


def plant_every_ref_kind(forge: Path, rng: random.Random, briefs: list[str]) -> list[str]:
    """Junk in claims, journal, reviews and learned footprints of `briefs` (junk briefs, some on main), in the
    sweeper ref, and in a work branch; returns what was planted."""
    said = []
    for b in briefs:
        for kind, record in REF_KINDS.items():
            said.append(plant_ref(forge, f"refs/assay/{kind}/{b}", rng, record))
        said.append(plant_ref(forge, f"refs/heads/assay/{b}", rng, "work.txt"))
    said.append(plant_ref(forge, "refs/assay/sweeper", rng, "observations.json"))
    return said


def plant_journal_fields(forge: Path, rng: random.Random, briefs: list[str]) -> list[str]:
    """A journal whose one entry has one junk field, for each brief in `briefs` (a kind and field each)."""
    said = []
    for b, (kind, name, value) in zip(briefs, rng.sample(mutations(rng), len(briefs)), strict=True):
        point(forge, f"refs/assay/journal/{b}", commit(forge, {"entries.jsonl": mutated(kind, name, value, b)}))
        said.append(f"refs/assay/journal/{b}: {kind}.{name} = "
                    + ("(removed)" if value is ... else repr(value)[:40]))
    return said


def stale_lock(forge: Path, ref: str, age_s: float = 1800) -> Path:
    """The lock file a SIGKILL mid-push leaves beside a loose ref, `age_s` old."""
    path = forge / f"{ref}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path
