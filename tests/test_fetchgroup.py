"""A host's fetches made together (`fetchgroup`): requests made while a fetch is on its way go as one fetch of what the
cache still lacks of them all; a request whose objects the fetch on its way fetches waits for it and fetches nothing;
a stopped or killed leader strands nobody; the forge's refusal reaches each requester as its own; a request the
host's key did not sign is never fetched for. The last test fetches from a forge over HTTP (the fake GitHub's git
side) with real git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from assay.core import fetchgroup, pushgroup
from tests.conftest import REPO, git
from tests.fakegithub.server import FakeGitHub
from tests.helpers import procs
from tests.helpers.procs import until

# One process's fetch of WANTS ("ref=sha,...") through the host's group. The "cache" is a file of the object ids
# present (`cache`); `direct` notes the ids it was asked for in `calls`, then: "hold" waits for the file `go`, "stop"
# stops itself (SIGSTOP); then a file `fail` makes it the forge's refusal (its text the error; one that names an id
# fails only a fetch of that id, as git's "not our ref"), else the ids are added to the cache.
PROGRAM = """
import fcntl, json, os, signal, sys, time
from pathlib import Path
from assay.core import fetchgroup
from assay.errors import ForgeError
folder, work, mode = sys.argv[1], Path(sys.argv[3]), sys.argv[4]
wants = [tuple(w.split("=")) for w in sys.argv[2].split(",")]
def present():
    return set((work / "cache").read_text().split())
def missing(asked):
    have = present()
    return [w for w in asked if w[1] not in have]
def direct(asked):
    with open(work / "calls", "a") as f:
        f.write(f"{os.getpid()} {' '.join(sorted({s[:1] for _, s in asked}))}\\n")
    if mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    while mode == "hold" and not (work / "go").exists():
        time.sleep(0.005)
    said = (work / "fail").read_text() if (work / "fail").exists() else None
    if said is not None and (not any(s in said for s in "abcd") or any(s in said for _, s in asked)):
        raise ForgeError(said or "the forge said no", "try again later")
    with open(work / "cache", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write("".join(f"{s}\\n" for _, s in asked))
try:
    fetchgroup.fetch(folder, wants, missing, direct, float(os.environ.get("WAIT_S", "60")))
    print("ok" if not missing(wants) else "missing", flush=True)
except ForgeError as e:
    print(f"error: {e.message}", flush=True)
"""

A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    (tmp_path / "cache").write_text("")
    (tmp_path / "calls").write_text("")
    return tmp_path


def env(**more: str) -> dict[str, str]:
    """The host's key, and every fetch on its way counting as slow (each request made meanwhile waits for it)."""
    return {**os.environ, "PYTHONPATH": str(REPO), pushgroup.KEY_ENV: "k" * 64, "ASSAY_LISTING_QUEUE_S": "0", **more}


def start(host: Path, wants: str, mode: str = "plain", **more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PROGRAM, str(host / "fetches"), wants, str(host), mode],
                            env=env(**more), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def said(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip()


def calls(host: Path) -> list[tuple[int, str]]:
    """(pid, the first letters of the ids it fetched, sorted) for each fetch made."""
    return [(int(pid), asked) for pid, _, asked in
            (line.partition(" ") for line in (host / "calls").read_text().splitlines())]


def requests(host: Path) -> list[Path]:
    return sorted((host / "fetches").glob("*.req"))


def test_fetches_asked_while_one_is_on_its_way_go_as_one_of_what_the_cache_still_lacks(host: Path) -> None:
    """A leads and fetches; B, C and D ask meanwhile (D for what A fetches): one fetch for what B and C lack,
    none for D; the folder is left empty."""
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    others = [start(host, w) for w in (f"refs/assay/claims/x={B}", f"refs/assay/claims/y={C},refs/heads/main={A}",
                                       f"refs/heads/main={A}")]
    until(lambda: len(requests(host)) == 4, "the three requests did not wait beside the leader's")
    (host / "go").touch()
    assert said(leader) == "ok" and [said(p) for p in others] == ["ok", "ok", "ok"]
    made = calls(host)
    assert [asked for _, asked in made] == ["a", "b c"], made  # the leader's, then one for what was still lacking
    assert made[1][0] in {p.pid for p in others}
    assert sorted(p.name for p in (host / "fetches").iterdir()) == [".lock"]


def test_a_request_for_what_the_fetch_on_its_way_fetches_waits_for_it_however_brisk_the_forge(host: Path) -> None:
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    same = start(host, f"refs/heads/main={A}", ASSAY_LISTING_QUEUE_S="60")
    until(lambda: len(requests(host)) == 2, "the request did not wait beside the leader's")
    (host / "go").touch()
    assert said(leader) == "ok" and said(same) == "ok"
    assert [pid for pid, _ in calls(host)] == [leader.pid]


def test_a_request_for_other_objects_while_a_young_fetch_is_on_its_way_fetches_alone_at_once(host: Path) -> None:
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    brisk = start(host, f"refs/assay/claims/x={B}", ASSAY_LISTING_QUEUE_S="60")
    assert said(brisk) == "ok"  # while A still holds the lock
    assert [pid for pid, _ in calls(host)] == [leader.pid, brisk.pid]
    (host / "go").touch()
    assert said(leader) == "ok"


def test_without_the_hosts_key_each_fetch_is_its_own(host: Path) -> None:
    proc = start(host, f"refs/heads/main={A}", **{pushgroup.KEY_ENV: ""})
    assert said(proc) == "ok"
    assert not (host / "fetches").exists()


def test_a_stopped_leader_is_passed_by(host: Path) -> None:
    leader = start(host, f"refs/heads/main={A}", "stop")
    try:
        procs.await_state(leader.pid, "T")
        other = start(host, f"refs/assay/claims/x={B}")
        assert said(other) == "ok"
        assert [pid for pid, _ in calls(host)] == [leader.pid, other.pid]
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    assert said(leader) == "ok"


def test_a_killed_leader_strands_no_request(host: Path) -> None:
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    others = [start(host, f"refs/assay/claims/x={B}"), start(host, f"refs/assay/claims/y={C}")]
    until(lambda: len(requests(host)) == 3, "the requests did not wait beside the leader's")
    leader.kill()
    leader.wait()
    assert [said(p) for p in others] == ["ok", "ok"]
    made = calls(host)
    assert len(made) == 2 and made[1][1] == "b c", made
    assert requests(host) == [] and not (host / "fetches" / fetchgroup.CURRENT).exists()


def test_the_forges_refusal_of_the_groups_fetch_reaches_every_requester_in_it(host: Path) -> None:
    """The group's fetch is refused: each requester it fetched for says the forge's error, and none asks the forge
    again alone (a forge in trouble meets one failing fetch, not one a desk); a mark of an error that the host's key
    did not sign is not taken: its requester fetches alone."""
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    others = [start(host, f"refs/assay/claims/x={B}"), start(host, f"refs/assay/claims/y={C}")]
    until(lambda: len(requests(host)) == 3, "the requests did not wait beside the leader's")
    (host / "fail").touch()
    (host / "go").touch()
    assert [said(p) for p in (leader, *others)] == ["error: the forge said no"] * 3
    assert [asked for _, asked in calls(host)] == ["a", "b c"]  # the leader's own, then one for both waiting
    from assay.errors import ForgeError

    folder = str(host / "fetches")
    assert fetchgroup._failed(os.path.join(folder, "1-x.out"), "1-x", b"k" * 64) is None  # no mark: none taken
    (host / "fetches" / "1-x.out").write_text(json.dumps({"id": "1-x", "error": "planted", "mac": "0" * 64}))
    assert fetchgroup._failed(os.path.join(folder, "1-x.out"), "1-x", b"k" * 64) is None
    body = {"id": "1-x", "error": "signed", "hint": "h"}
    (host / "fetches" / "1-x.out").write_text(json.dumps({**body, "mac": pushgroup._mac(b"k" * 64, body)}))
    got = fetchgroup._failed(os.path.join(folder, "1-x.out"), "1-x", b"k" * 64)
    assert isinstance(got, ForgeError) and got.message == "signed"
    assert fetchgroup._failed(os.path.join(folder, "1-x.out"), "2-y", b"k" * 64) is None  # another request's


def test_an_error_that_names_one_object_is_that_objects_the_others_fetch_alone(host: Path) -> None:
    """The group's fetch fails because the forge no longer serves one requester's object ("not our ref <id>": git
    then fetches none of the others): that requester says so, the others fetch alone and have theirs."""
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    others = [start(host, f"refs/assay/claims/x={B}"), start(host, f"refs/assay/claims/y={C}")]
    until(lambda: len(requests(host)) == 3, "the requests did not wait beside the leader's")
    (host / "fail").write_text(f"upload-pack: not our ref {B}")
    (host / "go").touch()
    assert said(leader) == "ok"
    assert [said(p) for p in others] == [f"error: upload-pack: not our ref {B}", "ok"]
    assert sorted(asked for _, asked in calls(host)) == ["a", "b", "b c", "c"]  # together, then each alone


def test_a_request_the_hosts_key_did_not_sign_is_never_fetched_for(host: Path) -> None:
    leader = start(host, f"refs/heads/main={A}", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its fetch")
    folder = host / "fetches"
    body = {"id": "999-planted", "wants": [["refs/heads/evil", D]]}
    planted = folder / "999-planted.req"
    planted.write_text(json.dumps({**body, "mac": "0" * 64}))
    import fcntl

    fd = os.open(planted, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a waiting requester holds its request
        other = start(host, f"refs/assay/claims/x={B}")
        until(lambda: len(requests(host)) == 3, "the request did not wait beside the leader's")
        (host / "go").touch()
        assert said(leader) == "ok" and said(other) == "ok"
    finally:
        os.close(fd)
    assert all("d" not in asked.split() for _, asked in calls(host)), calls(host)
    assert D not in (host / "cache").read_text()


def test_desks_of_a_host_fetch_from_a_forge_over_http_through_the_group(fake_github: FakeGitHub, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the host's key, a port's fetch from a forge over HTTP goes through the cache's `fetches/` and brings what
    it brings alone; a second port of the host on the same cache then fetches nothing; the folder is left empty."""
    from assay.core.git import ForgeGit

    gh = fake_github
    bare = gh.create_repo("o", "r").path
    blob = git("--git-dir", str(bare), "hash-object", "-w", "--stdin", input="hello\n").strip()
    tree = git("--git-dir", str(bare), "mktree", input=f"100644 blob {blob}\tf\n").strip()
    commit = git("--git-dir", str(bare), "commit-tree", tree, "-m", "x").strip()
    git("--git-dir", str(bare), "update-ref", "refs/heads/main", commit)
    monkeypatch.setenv("ASSAY_GITHUB_API", gh.api_url)
    monkeypatch.setenv("GITHUB_TOKEN", gh.token)
    monkeypatch.setenv(pushgroup.KEY_ENV, "k" * 64)
    first, second = (ForgeGit(gh.git_url("o", "r"), cache_root=tmp_path / "cache") for _ in range(2))
    try:
        first.ensure_objects({"refs/heads/main": commit})
        assert first.round_trips["fetch"] == 1 and first.read_objects([f"{commit}:f"]) == [b"hello\n"]
        second.ensure_objects({"refs/heads/main": commit})
        assert second.round_trips["fetch"] == 0
        folder = Path(first.cache) / "fetches"
        assert folder.is_dir() and sorted(p.name for p in folder.iterdir()) == [".lock"]
    finally:
        first.close()
        second.close()
