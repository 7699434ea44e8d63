"""A host's pushes made together (`pushgroup`): processes pushing at once make one push of the forge, each lands
whole and once, a stale lease among them is fenced alone, and a round's leader SIGKILLed before or after its push
strands nobody: the next requester leads, and what the dead one held lands once. Read back with plain git.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from assay.core import pushgroup
from assay.core.git import ZERO, ForgeGit, RefUpdate
from tests.conftest import REPO, Forge, git
from tests.helpers import procs
from tests.helpers.gitlog import calls, logging_git

# One process's push: a commit on `refs/assay/journal/<name>` and one on `refs/assay/claims/<name>`, atomic, each
# from what the forge has now (or from a wrong tip: "stale"), once the file `go` exists; "lazy": made unhurried.
PROGRAM = """
import os, sys, time
from pathlib import Path
from assay.core.git import ForgeGit, RefUpdate, ZERO
url, name, go, mode = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
g = ForgeGit(url)
refs = [f"refs/assay/journal/{name}", f"refs/assay/claims/{name}"]
updates = []
for ref in refs:
    old = g.ls_remote(ref).get(ref, ZERO)
    tree = g.write_object("tree", b"")
    body = f"tree {tree}\\n" + (f"parent {old}\\n" if old != ZERO else "")
    body += "author a <a@x> 1700000000 +0000\\ncommitter a <a@x> 1700000000 +0000\\n\\n" + name + "\\n"
    new = g.write_object("commit", body.encode())
    updates.append(RefUpdate(ref, new, "1" * 40 if mode == "stale" else old))
print("ready", flush=True)
while not go.exists():
    time.sleep(0.005)
if mode == "lazy":  # a push nobody waits on
    from assay.core.pushgroup import unhurried
    with unhurried():
        done = g.push(updates, atomic=True)
else:
    done = g.push(updates, atomic=True)
print(" ".join(f"{r.ref}={r.status}:{u.new}" for u, r in zip(updates, done.values())), flush=True)
"""

CASES: dict[str, tuple[list[str]]] = {  # a round's leader killed before or after its push
    "push-group.before-push": (["push-group.before-push"],),
    "push-group.after-push": (["push-group.after-push"],),
}


def start(forge: Forge, name: str, go: Path, env: dict[str, str], mode: str = "fresh") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, forge.url, name, str(go), mode], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    return proc


def said(proc: subprocess.Popen[str]) -> dict[str, tuple[str, str]]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return {ref: tuple(rest.split(":")) for ref, _, rest in (w.partition("=") for w in out.split())}  # type: ignore


def await_request(cache: Path, deadline_s: float = 30.0) -> None:
    """Until a request waits in the host's push folder (the leader's, written before it takes the lock)."""
    end = time.monotonic() + deadline_s
    while not list(cache.rglob("pushes/*.req")):
        assert time.monotonic() < end, "no push request appeared"
        time.sleep(0.01)


def tip(forge: Forge, ref: str) -> str:
    return git("--git-dir", str(forge.path), "rev-parse", "--verify", "-q", ref, check=False).strip() or ZERO


def warmed(forge: Forge, tmp_path: Path, env: dict[str, str]) -> Path:
    """The host's push folder, made by one push that went before (`warm`'s)."""
    warm = start(forge, "warm", tmp_path / "go0", env)
    (tmp_path / "go0").touch()
    said(warm)
    [pushes] = list((tmp_path / "cache").rglob("pushes"))
    return pushes


def landed_in_one_write(forge: Forge, log: Path, procs: dict[str, subprocess.Popen[str]]) -> None:
    """Each process's push landed whole, and all of them in one write of the forge (after `warm`'s)."""
    for proc in procs.values():
        result = said(proc)
        assert [s for s, _ in result.values()] == ["ok", "ok"]
        assert all(tip(forge, ref) == new for ref, (_, new) in result.items())
    writes = [args for code, args in calls(log) if code == 0 and "update-ref --stdin" in args and str(forge.path)
              in args and "refs/assay/claims/warm" not in args]
    assert len(writes) == 1 and all(f"refs/assay/claims/{name}" in writes[0] for name in procs), writes


def group_env(tmp_path: Path, window: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ASSAY_PUSH_WINDOW_S": window,
           "ASSAY_PUSH_GROUP_TOKEN": "k" * 64, "ASSAY_CACHE_DIR": str(tmp_path / "cache"), **extra}
    env.pop("ASSAY_CRASH_AT", None)
    return env | extra


def test_processes_pushing_at_once_make_one_push_and_a_stale_lease_is_fenced_alone(forge: Forge,
                                                                                  tmp_path: Path) -> None:
    folder, log = logging_git(tmp_path)
    env = group_env(tmp_path, "1.0", PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")
    go = tmp_path / "go"
    procs = [start(forge, f"d{i}", go, env) for i in range(6)]
    go.touch()
    results = [said(p) for p in procs]
    for i, result in enumerate(results):
        assert {r: s for r, (s, _) in result.items()} == {f"refs/assay/journal/d{i}": "ok",
                                                         f"refs/assay/claims/d{i}": "ok"}
        assert all(tip(forge, ref) == new for ref, (_, new) in result.items())  # landed, each ref once
    writes = [args for code, args in calls(log) if code == 0 and "update-ref --stdin" in args and str(forge.path)
              in args]
    assert 1 <= len(writes) <= 2, writes  # six processes' twelve refs, in one push (two if one came late)

    go2 = tmp_path / "go2"
    fresh = [start(forge, f"d{i}", go2, env) for i in range(2)]
    stale = start(forge, "d2", go2, env, mode="stale")
    before = len(calls(log))
    go2.touch()
    assert [s for s, _ in said(stale).values()] == ["stale", "stale"]  # its lease was wrong: fenced, never pushed
    for proc in fresh:
        result = said(proc)
        assert [s for s, _ in result.values()] == ["ok", "ok"]  # the others landed all the same
        assert all(tip(forge, ref) == new for ref, (_, new) in result.items())
    tries = [args for _, args in calls(log)[before:] if "update-ref --stdin" in args and str(forge.path) in args]
    assert len(tries) == 1 and "refs/assay/claims/d2" not in tries[0], tries  # the two fresh ones' round alone
    kept = (".lock", ".rounds", pushgroup.WAKE)  # the folder's own
    assert not [p for p in (tmp_path / "cache").rglob("pushes/*") if p.name not in kept]  # no litter


def test_a_round_refused_for_one_moved_ref_lands_the_rest_as_one_round(forge: Forge, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Three requests of one round; between the leader's reading of the forge and its push, another writer moves
    the ref of one of them (plain git). The forge refuses the round: that request is told "stale" (as its own push
    would be, from the forge's tips read after it) and the other two are pushed again as one round, landing whole;
    no request is pushed alone."""
    for name, value in group_env(tmp_path, "1.0").items():
        monkeypatch.setenv(name, value)
    writers = [ForgeGit(forge.url) for _ in range(3)]
    requests = []
    for i, g in enumerate(writers):
        ref = f"refs/assay/claims/r{i}"
        tree = g.write_object("tree", b"")
        body = f"tree {tree}\nauthor a <a@x> 1700000000 +0000\ncommitter a <a@x> 1700000000 +0000\n\nr{i}\n"
        requests.append((ref, g.write_object("commit", body.encode()), ZERO))
    empty = git("--git-dir", str(forge.path), "hash-object", "-t", "tree", "-w", "--stdin", input="").strip()
    other = git("--git-dir", str(forge.path), "-c", "user.name=o", "-c", "user.email=o@x", "commit-tree", empty,
                "-m", "another writer's").strip()
    pushed: list[list[str]] = []
    lock = threading.Lock()

    def read_then_race(g: ForgeGit) -> Callable[[Sequence[str]], dict[str, str]]:
        def read(refs: Sequence[str]) -> dict[str, str]:
            tips = g.ls_remote(*refs)
            with lock:
                if not pushed:  # the first round's reading: the ref moves now
                    git("--git-dir", str(forge.path), "update-ref", "refs/assay/claims/r1", other, "")
            return tips
        return read

    def direct(g: ForgeGit) -> Callable[[Sequence[tuple[str, str, str]], bool], dict[str, tuple[str, str]]]:
        def push(group: Sequence[tuple[str, str, str]], whole: bool) -> dict[str, tuple[str, str]]:
            with lock:
                pushed.append(sorted(u[0] for u in group))
            done = g._push_direct([RefUpdate(*u) for u in group], whole)
            return {ref: (r.status, r.detail) for ref, r in done.items()}
        return push

    def refuse(g: ForgeGit) -> Callable[[Sequence[tuple[str, str, str]], bool, dict[str, str]],
                                        dict[str, tuple[str, str]]]:
        def settle(group: Sequence[tuple[str, str, str]], whole: bool,
                   tips: dict[str, str]) -> dict[str, tuple[str, str]]:
            return {ref: (r.status, r.detail) for ref, r in g.refused([RefUpdate(*u) for u in group], whole,
                                                                      tips).items()}
        return settle

    barrier = threading.Barrier(3)
    outcomes: dict[int, dict[str, tuple[str, str]]] = {}

    def run(i: int) -> None:
        barrier.wait()
        outcomes[i] = pushgroup.push(str(tmp_path / "pushes"), [requests[i]], True, direct(writers[i]),
                                     read_then_race(writers[i]), refuse(writers[i]), 1.0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcomes[1]["refs/assay/claims/r1"][0] == "stale"
    assert tip(forge, "refs/assay/claims/r1") == other
    for i in (0, 2):
        assert outcomes[i] == {f"refs/assay/claims/r{i}": ("ok", outcomes[i][f"refs/assay/claims/r{i}"][1])}
        assert tip(forge, f"refs/assay/claims/r{i}") == requests[i][1]
    assert pushed == [[f"refs/assay/claims/r{i}" for i in range(3)], ["refs/assay/claims/r0",
                                                                       "refs/assay/claims/r2"]], pushed


SLOW_GIT = """#!/bin/sh
case " $* " in
  *"{forge}"*" update-ref --stdin "*)
    input=$(cat)
    echo "begin $(date +%s.%N) $input" >> "{log}"
    if mkdir "{marker}" 2>/dev/null; then sleep 16; fi  # the forge's first ref transaction is slow
    printf '%s\\n' "$input" | "{real}" "$@"
    code=$?
    echo "end $(date +%s.%N)" >> "{log}"
    exit $code;;
esac
exec "{real}" "$@"
"""


def test_a_round_slow_to_land_is_waited_for_not_pushed_over(forge: Forge, tmp_path: Path) -> None:
    """A round whose push the forge takes 16 s to land (beyond the window and `LOCK_WAIT_S`): a request made
    meanwhile waits for it, as a live leader's round, and then goes in the next round; it is not pushed alone on
    top of the slow one (which an overloaded forge would meet from every waiting desk at once)."""
    import shutil

    folder, log, marker = tmp_path / "slow-bin", tmp_path / "slow.log", tmp_path / "slow-marker"
    folder.mkdir()
    (folder / "git").write_text(SLOW_GIT.format(forge=forge.path, marker=marker, log=log, real=shutil.which("git")))
    (folder / "git").chmod(0o755)
    env = group_env(tmp_path, "0", PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")
    go = tmp_path / "go"
    first = start(forge, "first", go, env)
    go.touch()
    end = time.monotonic() + 30
    while not marker.exists():  # its round's push has begun, and is slow
        assert time.monotonic() < end, "the first push never began"
        time.sleep(0.01)
    second = start(forge, "second", go, env)
    for proc in (first, second):
        assert [s for s, _ in said(proc).values()] == ["ok", "ok"]
    text = log.read_text()
    marks = [line.split()[0] for line in text.splitlines() if line.startswith(("begin ", "end "))]
    assert marks == ["begin", "end", "begin", "end"], text  # one after the other, never at once
    assert text.index("claims/first") < text.index("claims/second"), text  # the slow one first: waited for


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_round_leader_killed_strands_no_request(forge: Forge, tmp_path: Path, case: str) -> None:
    [point], = CASES[case]
    go = tmp_path / "go"
    leader = start(forge, "dead", go, group_env(tmp_path, "3.0", ASSAY_CRASH_AT=point))
    go.touch()  # it leads a round, its window open 3 s: the other's request joins it
    await_request(tmp_path / "cache")
    follower = start(forge, "live", go, group_env(tmp_path, "0"))
    leader.wait(timeout=60)
    assert leader.returncode == -signal.SIGKILL
    result = said(follower)  # it took the lock the kernel freed, found no answer, and went alone
    assert [s for s, _ in result.values()] == ["ok", "ok"]
    assert all(tip(forge, ref) == new for ref, (_, new) in result.items())
    landed = case == "push-group.after-push"  # the round's push made, or not: whole either way
    for ref in ("refs/assay/journal/dead", "refs/assay/claims/dead"):  # a dead requester's request: no one's
        assert (tip(forge, ref) != ZERO) == landed
        if landed:
            assert git("--git-dir", str(forge.path), "rev-list", "--count", ref).strip() == "1"
    assert not [p for p in (tmp_path / "cache").rglob("pushes/*.req")]  # the dead one's request: cleared


def test_a_request_not_signed_with_the_groups_key_is_never_pushed(forge: Forge, tmp_path: Path) -> None:
    """A request an agent (or another supervisor's desks) writes into the shared cache, waited on and naming main,
    is not signed with this group's key: the round ignores it, answers it nothing, and main stays as it was."""
    main = tip(forge, "refs/heads/main")
    env = group_env(tmp_path, "0.5")
    first = start(forge, "own", tmp_path / "go", env)  # makes the cache and its push folder, then waits
    [folder] = {p.parent for p in (tmp_path / "cache").rglob("objects")}
    pushes = folder / "pushes"
    pushes.mkdir(exist_ok=True)
    forged = pushes / "1-forged.req"
    tree = git("--git-dir", str(folder), "hash-object", "-t", "tree", "-w", "--stdin", input="").strip()
    other = git("--git-dir", str(folder), "-c", "user.name=a", "-c", "user.email=a@x", "commit-tree", tree, "-m",
                "not main").strip()  # in the shared cache: a round that took the request could push it
    forged.write_text(json.dumps({"updates": [["refs/heads/main", other, main]], "atomic": True,
                                  "at": time.time(), "mac": "0" * 64}))
    with forged.open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # its writer waits on it, as a requester does
        (tmp_path / "go").touch()
        assert [s for s, _ in said(first).values()] == ["ok", "ok"]
        assert tip(forge, "refs/heads/main") == main
        assert not (pushes / "1-forged.out").exists()


def test_a_paused_round_leader_stalls_no_push(forge: Forge, tmp_path: Path) -> None:
    """A leader SIGSTOPped holding the folder's lock (its window open): the next push sees it stopped and goes
    alone at once, and the paused one, resumed, still lands its own request (whole, once)."""
    go = tmp_path / "go"
    paused = start(forge, "paused", go, group_env(tmp_path, "4"))
    go.touch()
    await_request(tmp_path / "cache")
    os.kill(paused.pid, signal.SIGSTOP)
    procs.await_state(paused.pid, "T", deadline_s=10)
    try:
        other = start(forge, "other", go, group_env(tmp_path, "0"))
        begun = time.monotonic()
        result = said(other)
        assert time.monotonic() - begun < 8  # not LOCK_WAIT_S (10 s) for a leader that never answers: alone
        assert [s for s, _ in result.values()] == ["ok", "ok"]
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    assert [s for s, _ in said(paused).values()] == ["ok", "ok"]  # its window over, it pushed its own
    for name in ("paused", "other"):
        assert git("--git-dir", str(forge.path), "rev-list", "--count", f"refs/assay/claims/{name}").strip() == "1"


def test_an_unhurried_push_waits_for_one_that_must_go_and_goes_with_it(forge: Forge, tmp_path: Path) -> None:
    """A push nobody waits on (a run's last entries), on a host whose rounds came 10 s apart lately, may wait 20 s
    for company; a push that must go now comes meanwhile: the round goes at once, both in one push of the forge
    (held the full 20 s, the second would have given up on the lock after 10 s and pushed alone: two)."""
    folder, log = logging_git(tmp_path)
    env = group_env(tmp_path, "0", PATH=f"{folder}{os.pathsep}{os.environ['PATH']}", ASSAY_PUSH_LAZY_S="30")
    pushes = warmed(forge, tmp_path, env)
    now = time.time()
    (pushes / ".rounds").write_text(json.dumps({"at": [now - 20, now - 10, now]}))
    go = tmp_path / "go"
    lazy = start(forge, "lazy", go, env, mode="lazy")
    go.touch()
    await_request(tmp_path / "cache")
    urgent = start(forge, "urgent", go, env)
    landed_in_one_write(forge, log, {"urgent": urgent, "lazy": lazy})


def test_an_unhurried_push_on_a_quiet_host_does_not_wait(forge: Forge, tmp_path: Path) -> None:
    """No round of the host lately: no push is coming to take it along, so it goes at once (not in 60 s)."""
    env = group_env(tmp_path, "0", ASSAY_PUSH_LAZY_S="60")
    go = tmp_path / "go"
    lazy = start(forge, "lazy", go, env, mode="lazy")
    begun = time.monotonic()
    go.touch()
    assert [s for s, _ in said(lazy).values()] == ["ok", "ok"]
    assert time.monotonic() - begun < 30


def test_junk_in_the_push_folder_harms_no_round(forge: Forge, tmp_path: Path) -> None:
    """Any writer of the cache can leave files in the folder: a `.rounds` of numbers no float holds, a request
    nested past any parser's depth. Rounds and unhurried pushes go on as if they were not there."""
    env = group_env(tmp_path, "0.5", ASSAY_PUSH_LAZY_S="30")
    pushes = warmed(forge, tmp_path, env)
    (pushes / ".rounds").write_text('{"at": [1' + "0" * 400 + ', "x", null, true, 1e999]}')
    (pushes / "1-deep.req").write_text("[" * 100000 + "]" * 100000)
    go = tmp_path / "go"
    procs_ = [start(forge, "lazy", go, env, mode="lazy"), start(forge, "plain", go, env)]
    go.touch()
    for proc in procs_:
        result = said(proc)
        assert [s for s, _ in result.values()] == ["ok", "ok"]
        assert all(tip(forge, ref) == new for ref, (_, new) in result.items())


def test_another_supervisors_push_ends_an_unhurried_wait(forge: Forge, tmp_path: Path) -> None:
    """Two supervisors' desks share the cache's push folder and its lock, each group with its own key. An
    unhurried leader of one waits no longer once the other's push that must go is there: it goes, and lets go of
    the lock (not `LOCK_WAIT_S` later)."""
    env = group_env(tmp_path, "0", ASSAY_PUSH_LAZY_S="30")
    pushes = warmed(forge, tmp_path, env)
    now = time.time()
    (pushes / ".rounds").write_text(json.dumps({"at": [now - 40, now - 20, now]}))  # it may wait 30 s
    go = tmp_path / "go"
    lazy = start(forge, "lazy", go, env, mode="lazy")
    go.touch()
    await_request(tmp_path / "cache")
    other = start(forge, "other", go, group_env(tmp_path, "0", ASSAY_PUSH_GROUP_TOKEN="o" * 64))
    begun = time.monotonic()
    assert [s for s, _ in said(other).values()] == ["ok", "ok"]
    assert time.monotonic() - begun < 8  # not the unhurried wait (30 s) nor LOCK_WAIT_S (10 s)
    assert [s for s, _ in said(lazy).values()] == ["ok", "ok"]


def test_an_answered_request_not_yet_collected_ends_no_later_rounds_wait(forge: Forge, tmp_path: Path) -> None:
    """The last round's requests stay in the folder until their requesters collect their answers, their deadlines
    past. A request made meanwhile leads the next round: it still waits its window for company (it took their
    deadlines for its own and pushed alone at once, then the next request alone too: a push each)."""
    folder, log = logging_git(tmp_path)
    env = group_env(tmp_path, "5", PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")
    pushes = warmed(forge, tmp_path, env)
    (pushes / "1-answered.req").write_text(json.dumps({"updates": [], "at": time.time() - 100, "wait": 0}))
    (pushes / "1-answered.out").write_text(json.dumps({"alone": True}))
    go, later = tmp_path / "go", tmp_path / "later"
    first, second = start(forge, "first", go, env), start(forge, "second", later, env)  # both ready to push
    go.touch()
    end = time.monotonic() + 30
    while len(list(pushes.glob("*.req"))) < 2:  # the first's request is there, beside the answered one
        assert time.monotonic() < end, "no push request appeared"
        time.sleep(0.01)
    later.touch()
    landed_in_one_write(forge, log, {"first": first, "second": second})
