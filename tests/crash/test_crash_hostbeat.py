"""SIGKILL a host's heartbeat inside its batch: every claim it renews is renewed, or none is (one atomic push).

Two desks' agent runs on one host (two members of `beats/`, this process's life), each holding a claim; the first
member comes due and renews both in one push, killed before or after that push. Read with plain git: both claim
chains gained one renewal commit, or neither did; the epochs and holders are unchanged (no claim changes hands).
Run again, the batch renews both, once each. A member whose process is gone, or that stopped checking in, is left
out of a batch: its lease runs out as it would alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.core.claims import Claims, new_holder
from assay.core.git import ForgeGit
from assay.desk.hostbeat import Member
from tests.conftest import REPO, Forge, git
from tests.helpers import procs
from tests.journal_check import claim_chain

PROGRAM = """
import sys
from pathlib import Path
from assay.core.claims import Claims, new_holder
from assay.core.git import ForgeGit
from assay.desk.hostbeat import Member

url, folder, first = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "claim"
claims = Claims(ForgeGit(url))
members = []
for brief, desk in (("a", "one"), ("b", "two")):
    held = claims.claim(brief, desk, require_brief=False) if first else claims.read(brief)
    member = Member(folder, brief, desk, held.record.epoch, new_holder(desk), 300)
    member.check_in("working")
    members.append(member)
print(members[0].beat(claims)[0])
"""

CASES: dict[str, tuple[list[str], int]] = {
    "renew-batch.before-push": (["renew-batch.before-push"], 0),  # armed; renewals that landed
    "renew-batch.after-push": (["renew-batch.after-push"], 1),
}


def run(forge: Forge, folder: Path, first: bool, crash_at: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ASSAY_CRASH_AT", None)
    if crash_at:
        env["ASSAY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-c", PROGRAM, forge.url, str(folder), "claim" if first else "again"],
                          env=env, capture_output=True, text=True, timeout=60)


def lengths(forge: Forge) -> list[int]:
    return [len(claim_chain(forge.path, brief)) for brief in ("a", "b")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_batch_renews_every_claim_or_none(forge: Forge, tmp_path: Path, case: str) -> None:
    [point], landed = CASES[case]
    folder = tmp_path / "beats"
    killed = run(forge, folder, True, point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert lengths(forge) == [1 + landed, 1 + landed]  # the claims, and the batch's renewal of both or of neither
    before = [(c["epoch"], c["holder"]) for b in ("a", "b") for c in claim_chain(forge.path, b)[-1:]]
    again = run(forge, folder, False)
    assert again.returncode == 0 and again.stdout.strip() == "None", again.stderr
    assert lengths(forge) == [2 + landed, 2 + landed]  # one more renewal each, in one push
    after = [(c["epoch"], c["holder"]) for b in ("a", "b") for c in claim_chain(forge.path, b)[-1:]]
    assert after == before  # nobody's claim changed hands
    assert git("--git-dir", str(forge.path), "log", "-1", "--format=%B", "refs/assay/claims/b").count("working")


def test_a_member_that_stopped_checking_in_or_died_is_left_out(forge: Forge, tmp_path: Path) -> None:
    claims = Claims(ForgeGit(forge.url))
    folder = tmp_path / "beats"
    members = []
    for brief in ("a", "b", "c"):
        held = claims.claim(brief, brief, require_brief=False)
        members.append(Member(folder, brief, brief, held.record.epoch, new_holder(brief), 300))
    for member in members:
        member.check_in()
    stale = json.loads(members[1].path.read_text())  # b's own heartbeat stopped (paused, say): no check-in lately
    members[1].path.write_text(json.dumps({**stale, "at": time.time() - 2 * 300}))
    dead = json.loads(members[2].path.read_text())  # c's process is gone
    members[2].path.write_text(json.dumps({**dead, "holder": "c/" + os.uname().nodename + "/999999999/abcd"}))
    assert members[0].beat(claims)[0] is None
    assert lengths(forge) == [2, 1]  # a renewed; b left out
    assert len(claim_chain(forge.path, "c")) == 1
    # a batch that renewed b lately spares b its own push: b is due, reads the batch, pushes nothing
    members[1].check_in()
    assert members[1].beat(claims)[0] is None and lengths(forge) == [3, 2]  # b's beat renewed a too
    pushed = [len(claim_chain(forge.path, b)) for b in ("a", "b", "c")]
    assert members[0].beat(claims)[0] is None  # within half a heartbeat of that batch: nothing pushed
    assert [len(claim_chain(forge.path, b)) for b in ("a", "b", "c")] == pushed
    claims.git.close()


def test_a_claim_taken_away_is_fenced_alone(forge: Forge, tmp_path: Path) -> None:
    claims = Claims(ForgeGit(forge.url))
    folder = tmp_path / "beats"
    members = []
    for brief in ("a", "b"):
        held = claims.claim(brief, brief, require_brief=False)
        members.append(Member(folder, brief, brief, held.record.epoch, new_holder(brief), 300))
        members[-1].check_in()
    claims.force_release("b", "a person took it", "ana")
    why, _ = members[0].beat(claims)
    assert why is None and lengths(forge) == [2, 2]  # a renewed; b's release is its tip, not renewed over
    assert claim_chain(forge.path, "b")[-1]["state"] == "released"
    why_b, _ = members[1].beat(claims)  # b reads the batch's verdict on it: fenced
    assert why_b is not None and why_b.startswith("fenced:"), why_b
    claims.git.close()


def test_junk_a_stopped_member_or_a_lock_held_by_a_paused_desk_never_stalls_a_heartbeat(forge: Forge,
                                                                                       tmp_path: Path) -> None:
    claims = Claims(ForgeGit(forge.url))
    folder = tmp_path / "beats"
    held = claims.claim("a", "one", require_brief=False)
    me = Member(folder, "a", "one", held.record.epoch, new_holder("one"), 300)
    me.check_in()
    (folder / "junk.json").write_text(json.dumps({"brief": "../x", "desk": 1, "epoch": "x", "holder": "h",
                                                  "heartbeat_s": "300", "at": "now"}))
    (folder / "garbage.json").write_text("{not json")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:  # a member whose process is stopped (SIGSTOP) is not vouched for, however fresh its check-in
        claims.claim("b", "two", require_brief=False)
        stopped = Member(folder, "b", "two", 1, f"two/{os.uname().nodename}/{sleeper.pid}/abcd", 300)
        stopped.check_in()
        os.kill(sleeper.pid, signal.SIGSTOP)
        procs.await_state(sleeper.pid, "T", deadline_s=10)
        assert me.beat(claims)[0] is None
        assert lengths(forge) == [2, 1]  # a renewed; b (stopped) left out; the junk skipped
    finally:
        sleeper.kill()
        sleeper.wait()
    # a desk paused while it holds the host's lock: the others renew alone, they do not wait for it
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n",
                               str(folder / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        quick = Member(folder, "a", "one", held.record.epoch, new_holder("one"), 2)  # waits at most 1 s
        assert quick.beat(claims)[0] is None and lengths(forge)[0] == 3  # renewed alone
    finally:
        holder.kill()
        holder.wait()
    claims.git.close()
