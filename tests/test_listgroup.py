"""A host's listings made together (`listgroup`): requests made while a listing is on its way go as one listing of
them all that begins after each was made (each requester answered with its own refs, as fresh as alone); a
stopped or killed leader strands nobody; the forge's refusal reaches every requester; an answer or request the
host's key did not sign is never taken. The last test lists a forge over HTTP (the fake GitHub's git side)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.core import listgroup, pushgroup
from tests.conftest import REPO, git
from tests.fakegithub.server import FakeGitHub
from tests.helpers import procs
from tests.helpers.procs import until

# One process's listing of PATTERNS through the host's group. Its `direct` lists the "forge", a JSON file of refs,
# as it is when the listing begins, notes the patterns it was asked for in `calls`, then: "hold" waits for the
# file `go` ("hold2": `go2`), "stop" stops itself (SIGSTOP), and a file `fail` makes it the forge's refusal.
PROGRAM = """
import json, os, signal, sys, time
from pathlib import Path
from assay.core import listgroup
from assay.errors import ForgeError
folder, patterns, work, mode = sys.argv[1], sys.argv[2].split(","), Path(sys.argv[3]), sys.argv[4]
def direct(asked):
    forge = json.loads((work / "forge.json").read_text())
    with open(work / "calls", "a") as f:
        f.write(f"{os.getpid()} {' '.join(sorted(asked))}\\n")
    if (work / "fail").exists():
        raise ForgeError("the forge said no", "try again later")
    if mode == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    while mode in ("hold", "hold2") and not (work / ("go" if mode == "hold" else "go2")).exists():
        time.sleep(0.005)
    return listgroup._only(forge, asked)
try:
    print(json.dumps(listgroup.listing(folder, patterns, direct, float(os.environ.get("WAIT_S", "60")))), flush=True)
except ForgeError as e:
    print(f"error: {e.message} | {e.hint}", flush=True)
"""

A, B = "a" * 40, "b" * 40


@pytest.fixture
def host(tmp_path: Path) -> Path:
    (tmp_path / "forge.json").write_text(json.dumps({"refs/heads/main": A, "refs/assay/claims/x": A,
                                                     "refs/assay/claims/y": A, "refs/assay/reviews/x": A}))
    (tmp_path / "calls").write_text("")
    return tmp_path


def env() -> dict[str, str]:
    """The host's key, and every listing on its way counting as slow (each request made meanwhile waits for it)."""
    return {**os.environ, "PYTHONPATH": str(REPO), pushgroup.KEY_ENV: "k" * 64, "ASSAY_LISTING_QUEUE_S": "0"}


def start(host: Path, patterns: str, mode: str = "plain", wait_s: float = 60) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", PROGRAM, str(host / "listings"), patterns, str(host), mode],
                            env={**env(), "WAIT_S": str(wait_s)}, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def answer(proc: subprocess.Popen[str]) -> dict[str, str] | str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip() if out.startswith("error:") else json.loads(out)


def calls(host: Path) -> list[tuple[int, str]]:
    return [(int(pid), asked) for pid, _, asked in
            (line.partition(" ") for line in (host / "calls").read_text().splitlines())]


def requests(host: Path) -> list[Path]:
    return sorted((host / "listings").glob("*.req"))


def moved(host: Path) -> None:
    """A ref moves on the forge: a listing begun before sees A, one begun after sees B."""
    (host / "forge.json").write_text(json.dumps({"refs/heads/main": B, "refs/assay/claims/x": B,
                                                 "refs/assay/claims/y": B, "refs/assay/reviews/x": B}))


def test_listings_asked_while_one_is_on_its_way_go_as_one_that_begins_after_them(host: Path) -> None:
    """A leads and lists; B, C and D ask meanwhile, and the forge moves after they asked: one listing for the
    three (every prefix they named), each answered with its own refs as the forge is after its request, A with
    what its listing read. Without the key each lists alone."""
    leader = start(host, "refs/heads/main", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its listing")
    others = [start(host, p) for p in ("refs/assay/claims/x", "refs/assay/claims/*,refs/heads/main",
                                       "refs/assay/reviews/x")]
    until(lambda: len(requests(host)) == 4, "the three requests did not wait beside the leader's")
    moved(host)
    (host / "go").touch()
    assert answer(leader) == {"refs/heads/main": A}
    said = [answer(p) for p in others]
    assert said == [{"refs/assay/claims/x": B},
                    {"refs/assay/claims/x": B, "refs/assay/claims/y": B, "refs/heads/main": B},
                    {"refs/assay/reviews/x": B}]
    listed = calls(host)
    assert len(listed) == 2, listed  # the leader's, then one for the three
    assert listed[1][1] == "refs/assay/claims/* refs/assay/claims/x refs/assay/reviews/x refs/heads/main"
    assert listed[1][0] in {p.pid for p in others}
    assert list((host / "listings").glob("*.req")) == [] and list((host / "listings").glob("*.out")) == []


def test_a_request_made_while_a_young_listing_is_on_its_way_lists_alone_at_once(host: Path) -> None:
    """A forge that answers briskly is listed as without a group: B, asking while A's listing is younger than the
    queue threshold, lists at once beside it rather than after it."""
    leader = start(host, "refs/heads/main", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its listing")
    brisk = subprocess.Popen([sys.executable, "-c", PROGRAM, str(host / "listings"), "refs/assay/claims/x",
                              str(host), "plain"], env={**env(), "ASSAY_LISTING_QUEUE_S": "60"}, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert answer(brisk) == {"refs/assay/claims/x": A}  # while A still holds the lock
    assert [pid for pid, _ in calls(host)] == [leader.pid, brisk.pid]
    (host / "go").touch()
    assert answer(leader) == {"refs/heads/main": A}


def test_without_the_hosts_key_each_listing_is_its_own(host: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(host / "listings"), "refs/heads/main", str(host),
                             "plain"], env={**env(), pushgroup.KEY_ENV: ""}, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert answer(proc) == {"refs/heads/main": A}
    assert not (host / "listings").exists()


def test_a_stopped_leader_is_passed_by(host: Path) -> None:
    """The leader stops (SIGSTOP) mid-listing: a request waiting lists alone, and the leader, let go on, answers
    its own."""
    leader = start(host, "refs/heads/main", "stop")
    try:
        procs.await_state(leader.pid, "T")
        other = start(host, "refs/assay/claims/x")
        assert answer(other) == {"refs/assay/claims/x": A}
        assert [pid for pid, _ in calls(host)] == [leader.pid, other.pid]
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    assert answer(leader) == {"refs/heads/main": A}


def test_a_killed_leader_strands_no_request(host: Path) -> None:
    """The leader is SIGKILLed mid-listing: the kernel frees the folder's lock, a waiting request leads and lists
    for itself and the other waiting, each answered once."""
    leader = start(host, "refs/heads/main", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its listing")
    others = [start(host, "refs/assay/claims/x"), start(host, "refs/assay/claims/y")]
    until(lambda: len(requests(host)) == 3, "the requests did not wait beside the leader's")
    leader.kill()
    leader.wait()
    assert [answer(p) for p in others] == [{"refs/assay/claims/x": A}, {"refs/assay/claims/y": A}]
    assert len(calls(host)) == 2 and calls(host)[1][1] == "refs/assay/claims/x refs/assay/claims/y"
    assert requests(host) == []  # the dead leader's request too: its lock went with it


def test_the_forges_refusal_reaches_every_requester(host: Path) -> None:
    leader = start(host, "refs/heads/main", "hold")
    until(lambda: len(calls(host)) == 1, "the leader did not begin its listing")
    others = [start(host, "refs/assay/claims/x"), start(host, "refs/assay/claims/y")]
    until(lambda: len(requests(host)) == 3, "the requests did not wait beside the leader's")
    (host / "fail").touch()
    (host / "go").touch()
    assert answer(leader) == {"refs/heads/main": A}  # its listing began before the forge refused
    assert [answer(p) for p in others] == ["error: the forge said no | try again later"] * 2
    assert len(calls(host)) == 2  # refused once, for both


def plant(path: Path, body: dict[str, object], mac: str) -> int:
    """A request in the folder, held as a waiting requester holds its own (its lock): the open file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, json.dumps({**body, "mac": mac}).encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def signed(body: dict[str, object]) -> str:
    return pushgroup._mac(("k" * 64).encode(), body)


def test_an_answer_or_request_the_hosts_key_did_not_sign_for_it_is_never_taken(host: Path) -> None:
    """Anyone who can write into the cache (an agent) can write requests and answers: a request not signed with
    the key, or signed for another request's name, is never listed for; a waiting requester handed an answer
    unsigned, signed for another request, or for its name but other patterns lists alone."""
    folder = host / "listings"
    folder.mkdir(mode=0o700)
    held = [plant(folder / "1-unsigned.req", {"id": "1-unsigned", "patterns": ["refs/planted/a"]}, "0" * 64),
            plant(folder / "2-copied.req", {"id": "9-other", "patterns": ["refs/planted/b"]},
                  signed({"id": "9-other", "patterns": ["refs/planted/b"]}))]
    try:
        leader = start(host, "refs/heads/main", "hold")
        until(lambda: len(calls(host)) == 1, "the leader did not begin its listing")
        fakes = [lambda rid: ({"id": rid, "patterns": ["refs/assay/claims/x"], "refs": {"refs/assay/claims/x": B}},
                              "0" * 64),
                 lambda rid: ({"id": "1-elsewhere", "patterns": ["refs/assay/claims/x"],
                               "refs": {"refs/assay/claims/x": B}}, None),
                 lambda rid: ({"id": rid, "patterns": ["refs/assay/claims/*"], "refs": {"refs/assay/claims/x": B}},
                              None)]
        for fake in fakes:
            other = start(host, "refs/assay/claims/x")
            until(lambda: any(p.name.startswith(f"{other.pid}-") for p in requests(host)), "no request")  # noqa: B023
            rid = next(p.name[:-4] for p in requests(host) if p.name.startswith(f"{other.pid}-"))
            body, mac = fake(rid)
            (folder / f"{rid}.out").write_text(json.dumps({**body, "mac": mac or signed(body)}))
            assert answer(other) == {"refs/assay/claims/x": A}  # listed alone: the planted answer is not taken
            assert calls(host)[-1] == (other.pid, "refs/assay/claims/x")
        (host / "go").touch()
        assert answer(leader) == {"refs/heads/main": A}
        last = start(host, "refs/heads/main")  # it leads, and finds the planted requests waiting
        assert answer(last) == {"refs/heads/main": A}
        assert calls(host)[-1] == (last.pid, "refs/heads/main") and len(calls(host)) == 5
        assert all("refs/planted" not in asked for _, asked in calls(host)), calls(host)
        assert not list(folder.glob("[12]-*.out"))  # nobody answered them
    finally:
        for fd in held:
            os.close(fd)


def test_a_listing_begun_late_is_waited_for_from_its_start_not_listed_over(host: Path) -> None:
    """A request waits `wait_s` at most from when it was made or from when the last listing began, whichever is
    later: B and C wait 1.4 s for the listing on its way, then 1.4 s for the one begun for them, 2.8 s in all
    beside a 2-s wait, and still go in one listing of the forge (an overloaded forge's slow listings are waited
    for, not listed over by each requester)."""
    first = start(host, "refs/heads/main", "hold", wait_s=2)
    until(lambda: len(calls(host)) == 1, "the leader did not begin its listing")
    others = [start(host, p, "hold2", wait_s=2) for p in ("refs/assay/claims/x", "refs/assay/claims/y")]
    until(lambda: len(requests(host)) == 3, "the requests did not wait beside the leader's")
    time.sleep(1.4)  # the condition under test: time passing (each listing 1.4 s, both 2.8 s beside a 2-s wait)
    (host / "go").touch()
    until(lambda: len(calls(host)) == 2, "the second listing did not begin")
    time.sleep(1.4)
    (host / "go2").touch()
    assert [answer(p) for p in others] == [{"refs/assay/claims/x": A}, {"refs/assay/claims/y": A}]
    assert answer(first) == {"refs/heads/main": A}
    assert len(calls(host)) == 2, calls(host)


def test_desks_of_a_host_list_a_forge_over_http_through_the_group(fake_github: FakeGitHub, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With the host's key, a port's listing of a forge over HTTP goes through the cache's `listings/` and reads
    what it reads alone: the refs named, no others; nothing is left in the folder."""
    from assay.core.git import ForgeGit

    gh = fake_github
    bare = gh.create_repo("o", "r").path
    commit = git("--git-dir", str(bare), "commit-tree", git("--git-dir", str(bare), "mktree", input="").strip(),
                 "-m", "x").strip()
    git("--git-dir", str(bare), "update-ref", "--stdin",
        input=f"create refs/heads/main {commit}\ncreate refs/assay/claims/b1 {commit}\n"
              f"create refs/assay/claims/b2 {commit}\n")
    monkeypatch.setenv("ASSAY_GITHUB_API", gh.api_url)
    monkeypatch.setenv("GITHUB_TOKEN", gh.token)
    monkeypatch.setenv(pushgroup.KEY_ENV, "k" * 64)
    port = ForgeGit(gh.git_url("o", "r"), cache_root=tmp_path / "cache")
    try:
        served = len(gh.git_served)
        assert port.ls_remote("refs/assay/claims/b1", "refs/heads/*") == {"refs/assay/claims/b1": commit,
                                                                           "refs/heads/main": commit}
        assert len(gh.git_served) == served + 1
        folder = Path(port.cache) / "listings"
        assert folder.is_dir() and sorted(p.name for p in folder.iterdir()) == [".lock"]
        assert listgroup.key() is not None
    finally:
        port.close()
