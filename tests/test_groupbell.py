"""A requester of a host's push, listing or fetch group sleeps until a leader rings its bell (`groupbell`), not
looking on a clock while a slow forge keeps it waiting: the leader's ring wakes it to its answer, or to the lock
let go; a ring that never comes is made up by a look each `RING_MAX_S`; junk planted as a bell is never written,
and a bell whose request is gone is litter."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from assay.core import fetchgroup, groupbell, listgroup, pushgroup

KEY = "k" * 40
SHA = "a" * 40


OWNER: dict[str, int] = {}  # a request's id -> the thread that listens for its ring (the `folder` fixture's)
ASLEEP: set[int] = set()  # the threads gone to sleep on their bell since they began listening


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A group's folder, its clocks so slow that within the joins below only a ring wakes a waiter; which thread
    listens for each request, and whether it is asleep on its bell yet, noted for `request_of`."""
    monkeypatch.setenv(pushgroup.KEY_ENV, KEY)
    monkeypatch.setenv("ASSAY_LISTING_QUEUE_S", "0")  # a listing on its way is waited for however young
    monkeypatch.setattr(groupbell, "RING_MAX_S", 30.0)  # (their clocks, a look each 0.25 s at most, are not used)
    listen, wait = groupbell.listen, groupbell.wait
    OWNER.clear()
    ASLEEP.clear()

    def listening(where: str, rid: str) -> int | None:
        ASLEEP.discard(threading.get_ident())
        OWNER[rid] = threading.get_ident()
        return listen(where, rid)

    def sleeping(bell: int | None, clock_s: float) -> None:
        ASLEEP.add(threading.get_ident())  # (its last look for an answer made: only a ring wakes it now)
        wait(bell, clock_s)

    monkeypatch.setattr(groupbell, "listen", listening)
    monkeypatch.setattr(groupbell, "wait", sleeping)
    where = tmp_path / "group"
    where.mkdir()
    return where


def holding(folder: Path) -> int:
    """The folder's lock, held as a leader holds it (another open file: `flock` refuses every other)."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def noting(calls: list[Any], answer: Any = None, then: Any = None) -> Any:
    """A `direct` that notes each call's argument in `calls` (and runs `then` on it), answering `answer`."""
    def direct(*args: Any) -> Any:
        calls.append(list(args[0]))
        if then is not None:
            then(args[0])
        return answer
    return direct


def ring_only(folder: Path, rid: str) -> None:
    """Ring request `rid`'s bell alone."""
    bell = os.open(folder / f"{rid}{groupbell.BELL}", os.O_WRONLY | os.O_NONBLOCK)
    os.write(bell, b".")
    os.close(bell)


def in_thread(target: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(target(*args)), daemon=True)
    thread.start()
    return thread, got


def request_of(folder: Path, others: int = 0) -> str:
    """The id of a request waiting in `folder` with its bell, once there are `others` + 1 (the newest) and, where
    the `folder` fixture notes it, its requester sleeps on its bell (so that an answer written now is not found by
    a look it had still to make)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = sorted((entry.stat().st_mtime_ns, entry.name[:-4]) for entry in os.scandir(folder)
                       if entry.name.endswith(".req") and os.path.exists(folder / f"{entry.name[:-4]}{groupbell.BELL}"))
        if len(found) > others and (found[-1][1] not in OWNER or OWNER[found[-1][1]] in ASLEEP):
            return found[-1][1]  # (and, in a `folder`, its requester asleep on its bell)
        time.sleep(0.01)
    raise AssertionError(f"no {others + 1} requests with their bells in {os.listdir(folder)}")


def test_a_ring_wakes_a_waiter_and_nothing_else_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupbell, "RING_MAX_S", 30.0)
    bell = groupbell.listen(str(tmp_path), "r1")
    assert bell is not None
    thread, _ = in_thread(groupbell.wait, bell, 0.0)
    thread.join(1.0)
    assert thread.is_alive()  # its clock (0 s) is not its wait's: it sleeps until rung
    groupbell.ring(str(tmp_path))
    thread.join(10)
    assert not thread.is_alive()
    groupbell.hang_up(str(tmp_path), "r1", bell)
    assert os.listdir(tmp_path) == []


def test_a_ring_never_comes_a_look_makes_it_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupbell, "RING_MAX_S", 0.2)
    bell = groupbell.listen(str(tmp_path), "r1")
    started = time.monotonic()
    groupbell.wait(bell, 30.0)
    assert time.monotonic() - started < 5
    groupbell.hang_up(str(tmp_path), "r1", bell)


def test_a_listing_waiter_wakes_to_its_answer_at_the_ring(folder: Path) -> None:
    lock = holding(folder)
    direct_calls: list[list[str]] = []
    thread, got = in_thread(listgroup.listing, str(folder), ["refs/heads/b"],
                            noting(direct_calls, {}), 600.0)
    rid = request_of(folder)
    listgroup._reply(str(folder), rid, ["refs/heads/b"], KEY.encode(), {"refs": {"refs/heads/b": SHA}})
    thread.join(1.0)
    assert thread.is_alive()  # answered, not rung: asleep still
    groupbell.ring(str(folder))
    thread.join(10)
    assert not thread.is_alive()
    assert got == [{"refs/heads/b": SHA}] and direct_calls == []
    assert not [n for n in os.listdir(folder) if n.endswith(groupbell.BELL)]  # its bell went with it
    os.close(lock)


def test_a_waiter_rung_as_the_lock_goes_leads_and_a_leader_rings_as_it_lets_go(folder: Path) -> None:
    """A fetch waits on a leader; the leader lets go and rings: it leads its own fetch. Then a listing waits on a
    leader that lets go without a ring; the next request leads, lists for both and rings as it lets go: the
    waiter wakes to its answer."""
    lock = holding(folder)
    fetched: list[list[tuple[str, str]]] = []
    have: set[str] = set()

    def direct(wants: list[tuple[str, str]]) -> None:
        fetched.append(wants)
        have.update(s for _, s in wants)
    thread, _ = in_thread(fetchgroup.fetch, str(folder), [("refs/heads/b", SHA)],
                          lambda wants: [w for w in wants if w[1] not in have], direct, 600.0)
    request_of(folder)
    os.close(lock)  # let go, not rung: it sleeps on
    thread.join(1.0)
    assert thread.is_alive() and fetched == []
    groupbell.ring(str(folder))
    thread.join(10)
    assert not thread.is_alive() and fetched == [[("refs/heads/b", SHA)]]

    lock = holding(folder)
    listed: list[list[str]] = []
    waiter, got = in_thread(listgroup.listing, str(folder), ["refs/heads/c"],
                            noting(listed, {"refs/heads/c": SHA}), 600.0)
    request_of(folder)
    os.close(lock)
    waiter.join(1.0)
    assert waiter.is_alive()
    leader, led = in_thread(listgroup.listing, str(folder), ["refs/heads/d"],
                            lambda p: {"refs/heads/c": SHA, "refs/heads/d": SHA}, 600.0)
    leader.join(10)  # it takes the lock (free), lists for both, lets go and rings: the waiter wakes to its answer
    waiter.join(10)
    assert not leader.is_alive() and not waiter.is_alive()
    assert led == [{"refs/heads/d": SHA}] and got == [{"refs/heads/c": SHA}] and listed == []


def test_a_push_waiter_wakes_at_the_ring_of_a_round_that_answered_it(folder: Path) -> None:
    lock = holding(folder)
    update = ("refs/heads/b", SHA, "0" * 40)
    pushed: list[Any] = []
    thread, got = in_thread(pushgroup.push, str(folder), [update], False,
                            noting(pushed, {}), lambda refs: {}, lambda u, a, t: {}, 0.0)
    rid = request_of(folder)
    pushgroup._write(str(folder / f"{rid}.out"), {"results": {"refs/heads/b": ["ok", ""]}})
    thread.join(1.0)
    assert thread.is_alive()
    groupbell.ring(str(folder))
    thread.join(10)
    assert not thread.is_alive() and got == [{"refs/heads/b": ("ok", "")}] and pushed == []
    os.close(lock)


def test_junk_planted_as_a_bell_is_never_written_nor_waited_on(tmp_path: Path) -> None:
    (tmp_path / "planted.bell").write_text("junk\n")
    os.mkfifo(tmp_path / "readerless.bell", 0o600)  # no reader: a ring passes it over, never blocks on it
    os.symlink(tmp_path / "planted.bell", tmp_path / "link.bell")
    ringing, _ = in_thread(groupbell.ring, str(tmp_path))
    ringing.join(10)
    assert not ringing.is_alive()
    assert (tmp_path / "planted.bell").read_text() == "junk\n"
    (tmp_path / "r2.bell").write_text("junk\n")  # in a requester's own place, a file or a FIFO: not its bell
    os.mkfifo(tmp_path / "r3.bell", 0o600)
    assert groupbell.listen(str(tmp_path), "r2") is None and groupbell.listen(str(tmp_path), "r3") is None


def test_a_flooded_bell_wakes_its_waiter_no_faster_than_its_first_clock(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groupbell, "MIN_S", 0.2)
    bell = groupbell.listen(str(tmp_path), "r1")
    assert bell is not None
    writer = os.open(tmp_path / "r1.bell", os.O_WRONLY | os.O_NONBLOCK)
    started = time.monotonic()
    for _ in range(5):
        os.write(writer, b"." * 100)  # rung before each wait: each wakes at once, and sleeps out its least
        groupbell.wait(bell, 0.0)
    assert time.monotonic() - started >= 5 * 0.2
    os.close(writer)
    groupbell.hang_up(str(tmp_path), "r1", bell)


UPDATE_A, UPDATE_B, UPDATE_C = (("refs/heads/a", SHA, "0" * 40), ("refs/heads/b", SHA, "0" * 40),
                                ("refs/heads/c", SHA, "0" * 40))


def pushing(folder: Path, update: tuple[str, str, str], direct: Any, window_s: float = 0.0,
            read: Any = None, refuse: Any = None) -> tuple[threading.Thread, list[Any]]:
    return in_thread(pushgroup.push, str(folder), [update], False, direct, read or (lambda refs: {}),
                     refuse or (lambda u, a, t: {}), window_s)


def ok(updates: Any, atomic: bool) -> dict[str, tuple[str, str]]:
    return {u[0]: ("ok", "") for u in updates}


def held_push() -> tuple[threading.Event, threading.Event, Any]:
    """A `direct` push that says it began (`entered`) and lands once `go` is set."""
    entered, go = threading.Event(), threading.Event()

    def slow(updates: Any, atomic: bool) -> dict[str, tuple[str, str]]:
        entered.set()
        go.wait(30)
        return ok(updates, atomic)
    return entered, go, slow


def test_a_push_leader_rings_as_it_lets_go_and_the_next_request_leads(folder: Path) -> None:
    entered, go, slow = held_push()
    leader, led = pushing(folder, UPDATE_A, slow)
    assert entered.wait(10)  # its push is on its way (alone, its request withdrawn): a request made now waits
    waiter, got = pushing(folder, UPDATE_B, ok)
    request_of(folder)
    waiter.join(1.0)
    assert waiter.is_alive()
    go.set()
    leader.join(10)
    waiter.join(10)  # rung as the leader let go (its bell's own look would come in 30 s)
    assert not waiter.is_alive()
    assert led == [{"refs/heads/a": ("ok", "")}] and got == [{"refs/heads/b": ("ok", "")}]


def test_a_push_round_rings_its_requesters_as_soon_as_they_are_answered(folder: Path) -> None:
    """The leader's own request is refused (its ref moved): it settles that holding the lock; the other request,
    answered, wakes to its answer meanwhile."""
    settling, go = threading.Event(), threading.Event()

    def refuse(updates: Any, atomic: bool, tips: dict[str, str]) -> dict[str, tuple[str, str]]:
        settling.set()
        go.wait(30)
        return {u[0]: ("stale", "") for u in updates}
    leader, _ = pushing(folder, UPDATE_A, ok, window_s=2.0, read=lambda refs: {"refs/heads/a": "b" * 40},
                        refuse=refuse)
    deadline = time.monotonic() + 10
    while not (folder / pushgroup.WAKE).exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the leader holds the lock and gathers its round (its FIFO made)
    waiter, got = pushing(folder, UPDATE_B, ok, window_s=2.0)  # gathered into the leader's round
    assert settling.wait(20)
    waiter.join(10)
    assert not waiter.is_alive() and got == [{"refs/heads/b": ("ok", "")}]
    go.set()
    leader.join(10)
    assert not leader.is_alive()


def test_a_requester_that_took_the_lock_for_its_answer_rings_as_it_lets_go(folder: Path) -> None:
    """Answered "alone", it pushes holding the lock it took to find its answer; a request waiting for the next
    round sleeps meanwhile, and is rung when that lock goes."""
    lock = holding(folder)
    entered, go, slow = held_push()
    first, _ = pushing(folder, UPDATE_A, slow)
    rid = request_of(folder)
    pushgroup._write(str(folder / f"{rid}.out"), {"alone": True})
    later, got = pushing(folder, UPDATE_C, ok)
    request_of(folder, others=1)
    os.close(lock)  # let go, and only the first requester rung: it takes the lock, finds its answer, pushes alone
    ring_only(folder, rid)
    assert entered.wait(10)
    later.join(1.0)
    assert later.is_alive()
    go.set()
    first.join(10)
    later.join(10)
    assert not later.is_alive() and got == [{"refs/heads/c": ("ok", "")}]


def test_a_fetch_leader_rings_as_it_lets_go(folder: Path) -> None:
    entered, go = threading.Event(), threading.Event()
    have: set[str] = set()

    def missing(wants: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [w for w in wants if w[1] not in have]

    def slow(wants: list[tuple[str, str]]) -> None:
        entered.set()
        go.wait(30)
        have.update(s for _, s in wants)
    leader, _ = in_thread(fetchgroup.fetch, str(folder), [("refs/heads/a", SHA)], missing, slow, 600.0)
    assert entered.wait(10)
    fetched: list[Any] = []
    waiter, _ = in_thread(fetchgroup.fetch, str(folder), [("refs/heads/b", "b" * 40)], missing,
                          noting(fetched, then=lambda wants: have.update(s for _, s in wants)), 600.0)
    request_of(folder, others=1)
    waiter.join(1.0)
    assert waiter.is_alive()
    go.set()
    leader.join(10)
    waiter.join(10)
    assert not waiter.is_alive() and fetched == [[("refs/heads/b", "b" * 40)]]


def test_a_bell_whose_request_is_gone_is_litter(tmp_path: Path) -> None:
    for rid in ("alive", "dead"):
        os.mkfifo(tmp_path / f"{rid}{groupbell.BELL}", 0o600)
    (tmp_path / "alive.req").write_text("{}")
    assert [rid for rid, _ in pushgroup.requests_in(str(tmp_path))] == ["alive"]
    assert sorted(os.listdir(tmp_path)) == ["alive.bell", "alive.req"]


def test_a_listing_requester_that_took_the_lock_for_its_answer_rings_as_it_lets_go(folder: Path) -> None:
    lock = holding(folder)
    answered_first, first = in_thread(listgroup.listing, str(folder), ["refs/heads/a"], noting([], {}), 600.0)
    rid = request_of(folder)
    listed: list[Any] = []
    waiter, got = in_thread(listgroup.listing, str(folder), ["refs/heads/b"], noting(listed, {"refs/heads/b": SHA}),
                            600.0)
    request_of(folder, others=1)
    listgroup._reply(str(folder), rid, ["refs/heads/a"], KEY.encode(), {"refs": {"refs/heads/a": SHA}})
    os.close(lock)  # let go, and only the first requester rung: it takes the lock, finds its answer, lets go
    ring_only(folder, rid)
    answered_first.join(10)
    waiter.join(10)  # rung as the lock went: it leads its own listing
    assert not waiter.is_alive() and first == [{"refs/heads/a": SHA}]
    assert got == [{"refs/heads/b": SHA}] and listed == [["refs/heads/b"]]
