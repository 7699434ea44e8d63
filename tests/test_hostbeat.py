"""Many desks on one host, under one supervisor (`assay desk run NAME --count N`), share one heartbeat: while their
agents run, one push renews every claim they hold. Counted on the forge's side: a post-receive hook logs the refs
of each push, and a push that moves claim refs alone is a heartbeat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import Forge, audit_failures, git
from tests.helpers.desks import brief, desk_env, publish
from tests.helpers.hosts import (
    BRIEFS,
    DESK,
    agent_runs,
    desk_children,
    heartbeats,
    late_brief_taken,
    logged_pushes,
)
from tests.journal_check import claim_chain, invariants


def test_a_hosts_desks_renew_their_claims_in_one_push(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK,
                    **{f"briefs/{b}.md": brief(b.upper(), ["sleep 4", f"write {b}.txt {b}"], f"test -f {b}.txt")
                       for b in BRIEFS}})
    log = logged_pushes(forge)
    run = subprocess.run([sys.executable, "-m", "assay", "desk", "run", "builder", "--count", "3", "--once",
                          "--forge", forge.url], env={**os.environ, **desk_env(tmp_path)}, capture_output=True,
                         text=True, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and out.count("review ready") == 3, out
    assert forge.url not in " ".join(os.listdir(tmp_path))  # (the forge reached the desks in their environment)
    beats = heartbeats(log)
    together = [p for p in beats if len(p) >= 2]
    assert together, f"no heartbeat renewed two claims at once: {beats}\n{out}"
    carried = sum(len(p) for p in beats)
    assert carried <= sum(renewed(forge, b) for b in BRIEFS)  # (journal pushes renew their claim too)
    assert len(beats) < carried, (beats, out)  # fewer pushes than claims they renewed: the host's beats are shared
    print(f"{carried} heartbeat renewals in {len(beats)} pushes")
    for b in BRIEFS:
        assert claim_chain(forge.path, b)[-1]["state"] == "waiting"
        assert invariants(forge.path, b) == [] and audit_failures(forge.url, b) == {}
    assert git("--git-dir", str(forge.path), "show", "refs/heads/assay/a:a.txt") == "a\n"


def test_a_hosts_desks_push_their_journals_together(forge: Forge, tmp_path: Path) -> None:
    """Under one supervisor the desks' pushes go through the host's push group (whose key each desk holds out of
    its environment, as every credential): with a window, one push of the forge carries several desks' journals,
    and each brief's story is whole."""
    publish(forge, {"desks/builder.yaml": DESK.replace("heartbeat_s: 1", "heartbeat_s: 5"),
                    **{f"briefs/{b}.md": brief(b.upper(), ["deploy", f"write {b}.txt {b}"], f"test -f {b}.txt")
                       for b in BRIEFS}})
    log = logged_pushes(forge)
    run = subprocess.run([sys.executable, "-m", "assay", "desk", "run", "builder", "--count", "3", "--once",
                          "--push-window", "1", "--forge", forge.url], env={**os.environ, **desk_env(tmp_path)},
                         capture_output=True, text=True, timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and out.count("review ready") == 3, out
    pushes = [set(line.split()) for line in log.read_text().splitlines() if line.strip()]
    together = [p for p in pushes if sum(r.startswith("refs/assay/journal/") for r in p) >= 2]
    assert together, f"no push carried two desks' journals: {pushes}"
    for b in BRIEFS:
        assert claim_chain(forge.path, b)[-1]["state"] == "waiting"
        assert invariants(forge.path, b) == [] and audit_failures(forge.url, b) == {}


def test_a_stop_reaches_every_desk_of_the_supervisor(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK,
                    **{f"briefs/{b}.md": brief(b.upper(), ["sleep 60"], "true") for b in BRIEFS[:2]}})
    supervisor = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--count", "2",
                                   "--forge", forge.url], env={**os.environ, **desk_env(tmp_path)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not all(agent_runs(forge, b) for b in BRIEFS[:2]):  # both desks' agents run
        assert supervisor.poll() is None and time.monotonic() < deadline, supervisor.communicate()[0]
        time.sleep(0.1)
    desks = forked_desks(supervisor.pid)
    assert len(desks) == 2, desks  # forked, each named as its command would be, most of its memory shared
    assert all(title.startswith("assay desk run builder") for title, _ in desks), desks
    assert all(private < 0.5 * rss for _, (private, rss) in desks), desks  # a started desk: about 17 MB of 28
    supervisor.send_signal(signal.SIGTERM)  # what `systemctl stop` sends the supervisor alone
    out, _ = supervisor.communicate(timeout=60)
    for b in BRIEFS[:2]:
        last = claim_chain(forge.path, b)[-1]
        assert last["state"] == "released" and "SIGTERM" in last["reason"], (last, out)
        assert invariants(forge.path, b) == []


def forked_desks(supervisor: int) -> list[tuple[str, tuple[int, int]]]:
    """The supervisor's children that are desks: each one's command line and (private, resident) memory in kB."""
    found = []
    for pid, title in desk_children(supervisor):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as smaps:
                sizes = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in smaps) if v.strip()}
        except (OSError, ValueError):
            continue
        found.append((title, (sizes.get("Private_Dirty", 0) + sizes.get("Private_Clean", 0), sizes["Rss"])))
    return found


def renewed(forge: Forge, brief_id: str) -> int:
    """The renewal commits on a claim's chain."""
    subjects = git("--git-dir", str(forge.path), "log", "--format=%s", f"refs/assay/claims/{brief_id}").splitlines()
    return sum(1 for s in subjects if s.startswith(f"assay: renew {brief_id} "))


def test_an_idle_desk_is_woken_when_work_lands_on_main(forge: Forge, tmp_path: Path) -> None:
    """Desks polling once a minute: a brief put on main is claimed long before that, because the supervisor reads
    main and the claims every second for its desks and wakes them when either moves."""
    publish(forge, {"desks/builder.yaml": DESK})
    supervisor = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--count", "2",
                                   "--poll", "60", "--forge", forge.url], env={**os.environ, **desk_env(tmp_path)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not git("--git-dir", str(forge.path), "for-each-ref", "refs/assay/sweeper").strip():
            assert supervisor.poll() is None and time.monotonic() < deadline  # the desks' first pass swept
            time.sleep(0.1)
        late_brief_taken(forge, supervisor)
    finally:
        os.killpg(supervisor.pid, signal.SIGTERM)
        out, _ = supervisor.communicate(timeout=60)
    assert "supervisor: 2 desk(s) of builder" in out, out


def test_a_hosts_desks_started_together_start_at_their_own_share_of_the_most_urgent_briefs() -> None:
    from types import SimpleNamespace

    from assay.desk.loop import _spread

    ready: list[Any] = [SimpleNamespace(id=f"b{i}", priority=1) for i in range(4)] + [SimpleNamespace(id="late",
                                                                                                      priority=2)]
    orders = [[b.id for b in _spread(ready, slot)] for slot in ("0/4", "1/4", "2/4", "3/4")]
    assert [o[0] for o in orders] == ["b0", "b1", "b2", "b3"]  # each desk tries a brief of its own first
    assert all(sorted(o[:4]) == ["b0", "b1", "b2", "b3"] and o[4] == "late" for o in orders)  # urgency first
    many: list[Any] = [SimpleNamespace(id=f"m{i:02d}", priority=1) for i in range(40)]
    starts = {_spread(many, "1/4")[0].id for _ in range(200)}
    # anywhere in its own share (m10..m19): the same slot of another host's supervisor starts elsewhere
    assert starts <= {f"m{i}" for i in range(10, 20)} and len(starts) > 1, starts
    assert [b.id for b in _spread(ready, "")] == ["b0", "b1", "b2", "b3", "late"]  # a desk alone: as ever
    # the most urgent taken, the next level is spread as well: the fleet's idle desks do not all try its first
    levels: list[Any] = [SimpleNamespace(id="urgent", priority=1)] + [SimpleNamespace(id=f"n{i:02d}", priority=5)
                                                                     for i in range(40)]
    for slot, share in (("0/4", range(0, 10)), ("3/4", range(30, 40))):
        orders = [[b.id for b in _spread(levels, slot)] for _ in range(200)]
        assert all(o[0] == "urgent" and sorted(o[1:]) == [f"n{i:02d}" for i in range(40)] for o in orders)
        nexts = {o[1] for o in orders}
        assert nexts <= {f"n{i:02d}" for i in share} and len(nexts) > 1, nexts
