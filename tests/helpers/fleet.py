"""A mixed fleet on a bare forge, written with `git fast-import` in one go: what an operator of twenty desks
sees after a while. By default 1,000 briefs: 620 done, 150 held (10 of them by a desk that stopped renewing
five minutes ago: overdue long before its 600 s lease ends; 1 by desk6, whose host has rebooted since: dead),
100 waiting on a review that is ready to merge, 50 blocked with a reason, 30 with an unsafe step whose outcome
is unknown, 50 never claimed; seven desks defined on main (heartbeat 60 s).

Every brief tells a story its evidence bears out, so `assay audit --all` passes on the whole fleet
(tests/test_audit.py checks it): a claim chain starts `held` at epoch 1; a waiting brief's desk created its
work branch from main, pushed a commit with its trailers, verified it with main's row and marked its review
ready, each in the journal at its epoch; an unknown outcome was recorded by the epoch that took over after a
sweeper expired the one that ran the step.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.core.lives import BOOT_PREFIX, boot_id
from assay.core.records import ClaimRecord, JournalEntry, ReviewRecord, utc_now_iso
from assay.core.steps import input_sha
from tests.helpers.fastimport import data

MIX = {"done": 620, "held": 150, "waiting": 100, "blocked": 50, "unknown": 30, "unclaimed": 50}
OVERDUE = 10  # of the held briefs, whose desk (desk0) stopped renewing
DEAD = 1  # of the held briefs, whose desk (desk6) ran on this host before it rebooted: its process is over
DESKS = 7  # desk0 and desk6 hold only those; desk1 to desk5 the rest
STALLED_S = 300  # how long ago the overdue and the dead desks last renewed
VERIFY = ("tests", "pytest -q")  # every brief's verify row on main
EXPIRED = "expired by sweeper:default: no renewal for 600s"


@dataclass
class Fleet:
    forge: Path
    now: float
    briefs: dict[str, list[str]] = field(default_factory=dict)  # kind -> brief ids
    overdue: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)


def _commit(ref: str, when: int, files: dict[str, bytes], message: bytes = b"fleet", mark: int = 0,
            start: str = "") -> bytes:
    """One commit on `ref` (after its previous one in this stream, or `start`: a mark or a commit)."""
    out = f"commit {ref}\n".encode() + (f"mark :{mark}\n".encode() if mark else b"")
    out += b"committer Fleet <fleet@example.invalid> %d +0000\n" % when + data(message)
    out += f"from {start}\n".encode() if start else b""
    out += b"".join(f"M 100644 inline {name}\n".encode() + data(body) for name, body in files.items())
    return out + b"\n"


def _import(path: Path, stream: list[bytes], marks: Path | None = None) -> dict[int, str]:
    """Run `git fast-import` on the stream; the commits of its marks, when `marks` is given."""
    extra = [f"--export-marks={marks}"] if marks else []
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw", *extra],
                   input=b"".join(stream), check=True)
    if marks is None:
        return {}
    return {int(m[1:]): sha for m, sha in (line.split() for line in marks.read_text().splitlines())}


def dead_holder(desk: str) -> str:
    """A holder naming a process of this host in a boot before this one: `lives.life_state` says dead."""
    this = (boot_id() or "")[:BOOT_PREFIX]
    boot = next(b for b in ("0badb007", "1badb007") if b != this)
    child = subprocess.Popen(["true"])
    child.wait()
    return f"{desk}/{os.uname().nodename}/{child.pid}/dead.1.{boot}"


class _Journal:
    """The entries a desk's steps write, in order: each step an intent and its result, numbered as pushed."""

    def __init__(self, brief: str, run: str) -> None:
        self.brief, self.run, self.entries = brief, run, list[JournalEntry]()

    def add(self, kind: str, epoch: int, at: str, **fields: Any) -> JournalEntry:
        entry = JournalEntry(seq=len(self.entries) + 1, epoch=epoch, kind=kind, at=at, run=self.run, **fields)
        self.entries.append(entry)
        return entry

    def step(self, name: str, epoch: int, at: str, value: Any, output: Any, policy: str = "idempotent",
             notes: tuple[tuple[str, dict[str, Any]], ...] = ()) -> None:
        sha = input_sha(value)
        call = {"step": name, "ordinal": 0, "input_sha": sha, "key": f"{self.brief}/{epoch}/{name}/{sha[:12]}/0",
                "policy": policy}
        intent = self.add("intent", epoch, at, **call)
        for kind, body in notes:
            self.add(kind, epoch, at, data=body)
        self.add("result", epoch, at, status="completed", intent=intent.seq, data={"output": output}, **call)

    def text(self) -> bytes:
        return "".join(e.encode() + "\n" for e in self.entries).encode()


def _waiting_journal(b: str, main: str, head: str, at: str) -> bytes:
    """A desk's one run: branch from main, open the review, push the work, verify it, mark the review ready, wait."""
    journal = _Journal(b, "r1")
    journal.step("branch", 1, at, {"main": main}, main, notes=(("note", {"branch": "created", "at_commit": main}),))
    journal.step("review", 1, at, {"branch": f"assay/{b}"}, "opened", notes=(("note", {"review": "opened"}),))
    journal.step("push", 1, at, {"head": head}, head, notes=(("note", {"pushed": head}),))
    row = {"head": head, "row": VERIFY[0], "command": VERIFY[1], "exit_code": 0, "expect_exit": 0, "passed": True,
           "duration_ms": 1200, "output_sha256": "0" * 64, "tail": "1 passed\n"}
    journal.step("verify", 1, at, {"head": head}, {"passed": True, "summary": "all verify rows passed"},
                 policy="safe", notes=(("verify", row),))
    journal.step("ready", 1, at, {"head": head}, "ready", notes=(("note", {"review": "ready", "head": head}),))
    journal.add("wait", 1, at, data={"on": "review"})
    return journal.text()


def _unknown_journal(b: str, now: float) -> bytes:
    """Epoch 1 ran an unsafe deploy and stopped renewing; after a sweeper expired it, epoch 2 found the intent
    with no result and recorded its outcome as unknown."""
    journal = _Journal(b, "r1")
    call = {"step": "deploy", "ordinal": 0, "input_sha": "0" * 64, "key": f"{b}/1/deploy/0", "policy": "unsafe"}
    journal.add("intent", 1, utc_now_iso(now - 3600), **call)
    journal.run = "r2"
    journal.add("outcome_unknown", 2, utc_now_iso(now - 2700), intent=1, data={"reason": "interrupted"}, **call)
    return journal.text()


def make_fleet(path: Path, now: float, mix: dict[str, int] | None = None) -> Fleet:
    mix = mix or MIX
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    fleet = Fleet(path, now)
    t, at = int(now), utc_now_iso(now - 3600)
    ids: list[tuple[str, str]] = []
    for kind, n in mix.items():
        fleet.briefs[kind] = [f"{kind[:4]}-{i:04d}" for i in range(n)]
        ids += [(kind, b) for b in fleet.briefs[kind]]
    main = {f"briefs/{b}.md": (f"---\ntitle: {kind} work {b}\nverify:\n  - id: {VERIFY[0]}\n    run: {VERIFY[1]}\n"
                               f"---\nDo the {kind} thing.\n").encode() for kind, b in ids}
    for d in range(DESKS):
        main[f"desks/desk{d}.yaml"] = (f"name: desk{d}\nagent:\n  command: [\"true\"]\nlease_s: 600\n"
                                       "heartbeat_s: 60\n").encode()
    # first main and the work branches, whose commits the journals and reviews name
    work = fleet.briefs.get("waiting", [])
    marks = _import(path, [_commit("refs/heads/main", t - 7200, main, mark=1), *(
        _commit(f"refs/heads/assay/{b}", t - 3000, {f"work/{b}.txt": f"{b} done\n".encode()},
                f"waiting work {b}\n\nAssay-Brief: {b}\nAssay-Epoch: 1\n".encode(), mark=2 + n, start=":1")
        for n, b in enumerate(work))], path / "fleet-marks")
    heads = {b: marks[2 + n] for n, b in enumerate(work)}
    out = []
    held, dead = 0, dead_holder("desk6")
    for kind, b in ids:
        if kind == "unclaimed":
            continue
        desk = f"desk{1 + int(b[-4:]) % (DESKS - 2)}"
        first = ClaimRecord(brief=b, state="held", epoch=1, desk=desk, holder=f"{desk}-holder", lease_s=600,
                            branch=f"assay/{b}", at=at)
        out.append(_commit(f"refs/assay/claims/{b}", t - 3600, {"claim.json": first.encode()}))
        record, when = first, t - 20
        if kind == "held":
            held += 1
            if held <= DEAD:
                record, when = first.but(desk="desk6", holder=dead), t - STALLED_S
                fleet.dead.append(b)
            elif held <= DEAD + OVERDUE:
                record, when = first.but(desk="desk0", holder="desk0-holder"), t - STALLED_S
                fleet.overdue.append(b)
            out[-1] = _commit(f"refs/assay/claims/{b}", t - 3600, {"claim.json": record.encode()})
        elif kind == "unknown":  # epoch 1 expired; epoch 2 recorded the outcome unknown, then was expired too
            for r, w in ((first.but(state="expired", reason=EXPIRED), t - 2900),
                         (first.but(epoch=2, at=utc_now_iso(now - 2700)), t - 2700),
                         (first.but(epoch=2, state="expired", at=utc_now_iso(now - 2000), reason=EXPIRED), t - 2000)):
                out.append(_commit(f"refs/assay/claims/{b}", w, {"claim.json": r.encode()}))
            out.append(_commit(f"refs/assay/journal/{b}", t - 2700, {"entries.jsonl": _unknown_journal(b, now)}))
            continue
        elif kind != "held":
            record = first.but(state=kind, at=utc_now_iso(now - 600),
                               wait={"on": "review", "by": desk} if kind == "waiting" else None,
                               reason="verify failed 3 times: tests/test_api.py::test_search" if kind == "blocked"
                               else "")
        out.append(_commit(f"refs/assay/claims/{b}", when, {"claim.json": record.encode()}))
        if kind == "waiting":
            head, journal_at = heads[b], utc_now_iso(now - 3000)
            out.append(_commit(f"refs/assay/journal/{b}", t - 3000,
                               {"entries.jsonl": _waiting_journal(b, marks[1], head, journal_at)}))
            draft = ReviewRecord(brief=b, branch=f"assay/{b}", title=f"waiting work {b}", state="draft",
                                 opened_at=journal_at, at=journal_at, head=marks[1])
            for review in (draft, draft.but(state="ready", head=head)):
                out.append(_commit(f"refs/assay/reviews/{b}", t - 3000, {"review.json": review.encode()}))
    _import(path, out)
    (path / "fleet-marks").unlink()
    return fleet
