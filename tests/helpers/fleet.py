"""A mixed fleet on a bare forge, written with `git fast-import` in one go: what an operator of twenty desks
sees after a while. By default 1,000 briefs: 620 done, 150 held (10 of them by a desk that stopped renewing
five minutes ago: overdue long before its 600 s lease ends), 100 waiting on a review that is ready to merge,
50 blocked with a reason, 30 with an unsafe step whose outcome is unknown, 50 never claimed; seven desks
defined on main (heartbeat 60 s)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from assay.core.records import ClaimRecord, JournalEntry, ReviewRecord, utc_now_iso
from tests.helpers.fastimport import data

MIX = {"done": 620, "held": 150, "waiting": 100, "blocked": 50, "unknown": 30, "unclaimed": 50}
OVERDUE = 10  # of the held briefs, whose desk stopped renewing
DESKS = 7
STALLED_S = 300  # how long ago the overdue desk last renewed


@dataclass
class Fleet:
    forge: Path
    now: float
    briefs: dict[str, list[str]] = field(default_factory=dict)  # kind -> brief ids
    overdue: list[str] = field(default_factory=list)


def _commit(ref: str, when: int, files: dict[str, bytes], parent: bool = False) -> bytes:
    out = f"commit {ref}\n".encode() + b"committer Fleet <fleet@example.invalid> %d +0000\n" % when + data(b"fleet")
    out += b"".join(f"M 100644 inline {name}\n".encode() + data(body) for name, body in files.items())
    return out + b"\n"


def make_fleet(path: Path, now: float, mix: dict[str, int] | None = None) -> Fleet:
    mix = mix or MIX
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(path)], check=True)
    fleet = Fleet(path, now)
    t, at = int(now), utc_now_iso(now - 3600)
    ids: list[tuple[str, str]] = []
    for kind, n in mix.items():
        fleet.briefs[kind] = [f"{kind[:4]}-{i:04d}" for i in range(n)]
        ids += [(kind, b) for b in fleet.briefs[kind]]
    main = {f"briefs/{b}.md": f"---\ntitle: {kind} work {b}\n---\nDo the {kind} thing.\n".encode() for kind, b in ids}
    for d in range(DESKS):
        main[f"desks/desk{d}.yaml"] = (f"name: desk{d}\nagent:\n  command: [\"true\"]\nlease_s: 600\n"
                                       "heartbeat_s: 60\n").encode()
    out = [_commit("refs/heads/main", t - 7200, main)]
    held = 0
    for kind, b in ids:
        if kind == "unclaimed":
            continue
        desk = f"desk{1 + int(b[-4:]) % (DESKS - 1)}"  # desk0 is the one that stops renewing
        state = {"unknown": "expired"}.get(kind, kind)
        record = ClaimRecord(brief=b, state=state, epoch=1, desk=desk, holder=f"{desk}-holder", lease_s=600,
                             branch=f"assay/{b}", at=at,
                             wait={"on": "review", "by": desk} if kind == "waiting" else None,
                             reason={"blocked": "verify failed 3 times: tests/test_api.py::test_search",
                                     "unknown": "expired by sweeper:default: no renewal for 600s"}.get(kind, ""))
        when = t - 20
        if kind == "held":
            held += 1
            if held <= OVERDUE:
                desk, when = "desk0", t - STALLED_S
                record = record.but(desk=desk, holder="desk0-holder")
                fleet.overdue.append(b)
        out.append(_commit(f"refs/assay/claims/{b}", when, {"claim.json": record.encode()}))
        if kind == "waiting":
            review = ReviewRecord(brief=b, branch=f"assay/{b}", title=f"waiting work {b}", state="ready",
                                  opened_at=at, at=at, head="1" * 40)
            out.append(_commit(f"refs/assay/reviews/{b}", t - 600, {"review.json": review.encode()}))
        if kind == "unknown":
            entries = [JournalEntry(seq=1, epoch=1, kind="intent", at=at, run="r1", step="deploy", ordinal=0,
                                    input_sha="0" * 64, key=f"{b}/1/deploy/0", policy="unsafe"),
                       JournalEntry(seq=2, epoch=2, kind="outcome_unknown", at=utc_now_iso(now - 2700), run="r2",
                                    step="deploy", ordinal=0,
                                    input_sha="0" * 64, key=f"{b}/1/deploy/0", policy="unsafe", intent=1,
                                    data={"reason": "interrupted"})]
            text = "".join(e.encode() + "\n" for e in entries).encode()
            out.append(_commit(f"refs/assay/journal/{b}", t - 900, {"entries.jsonl": text}))
    subprocess.run(["git", "--git-dir", str(path), "fast-import", "--quiet", "--date-format=raw"],
                   input=b"".join(out), check=True)
    return fleet
