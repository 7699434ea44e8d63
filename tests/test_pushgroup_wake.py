"""A round of a host's grouped pushes gathers the requests made in its window (`pushgroup._gather`): it looks at
the folder again when a request is made (the folder's FIFO wakes it), not on a clock, so a host whose desks wait
in windows costs its interpreter next to nothing; a request that must go now still ends the wait at once, and a
FIFO that cannot be had (junk planted in its place) leaves the wait looking on a clock, as before."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from assay.core import pushgroup


class Looks:
    """`os.listdir` of one folder, counted (the gathering's looks at it)."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.listdir

        def counted(path: str) -> list[str]:
            if os.path.abspath(path) == str(folder):
                self.count += 1
            return real(path)
        monkeypatch.setattr(os, "listdir", counted)


def gathering(folder: Path, due_in: float) -> threading.Thread:
    thread = threading.Thread(target=pushgroup._gather, args=(str(folder), time.time() + due_in), daemon=True)
    thread.start()
    return thread


def request(folder: Path, name: str, wait_s: float) -> int:
    """A requester's request, as `push` writes it (held locked: its requester waits), and its wake."""
    held = pushgroup._write(str(folder / f"{name}.req"), {"updates": [], "at": time.time(), "wait": wait_s},
                            keep_locked=True)
    pushgroup._wake(str(folder))
    return held


def test_a_gathering_sleeps_until_woken_and_a_request_that_must_go_ends_it(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pushgroup, "WAKE_MAX_S", 30.0)  # only a wake ends the sleep within the joins below
    folder = tmp_path / "pushes"
    folder.mkdir()
    looks = Looks(folder, monkeypatch)
    thread = gathering(folder, 60.0)
    thread.join(2.5)  # a quiet folder: looked at once, then asleep
    assert thread.is_alive() and looks.count == 1, looks.count
    patient = request(folder, "patient", 30.0)  # wakes it; its deadline is later than the first's: it waits on
    thread.join(0.5)
    assert thread.is_alive()
    urgent = request(folder, "urgent", 0.0)  # must go now: the wait ends at once, not at the first's deadline
    thread.join(10)
    assert not thread.is_alive()
    assert looks.count <= 4, looks.count
    os.close(patient)
    os.close(urgent)


def test_a_request_made_while_the_folder_is_looked_at_still_wakes_the_wait(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The request lands just after a look listed the folder without it: its wake, pending, ends the sleep."""
    monkeypatch.setattr(pushgroup, "WAKE_MAX_S", 30.0)
    folder = tmp_path / "pushes"
    folder.mkdir()
    held: list[int] = []
    real = os.listdir

    def listed_then_requested(path: str) -> list[str]:
        names = real(path)
        if os.path.abspath(path) == str(folder) and not held:
            held.append(request(folder, "urgent", 0.0))
        return names
    monkeypatch.setattr(os, "listdir", listed_then_requested)
    thread = gathering(folder, 60.0)
    thread.join(10)
    assert not thread.is_alive()
    os.close(held[0])


def test_junk_planted_as_the_fifo_leaves_the_wait_on_a_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pushgroup, "WAKE_MAX_S", 30.0)
    folder = tmp_path / "pushes"
    folder.mkdir()
    (folder / pushgroup.WAKE).write_text("not a fifo\n")
    looks = Looks(folder, monkeypatch)
    thread = gathering(folder, 60.0)
    urgent = request(folder, "urgent", 0.0)  # no wake to be had: the next look on the clock finds it
    thread.join(10)
    assert not thread.is_alive()
    assert (folder / pushgroup.WAKE).read_text() == "not a fifo\n"  # never written into
    os.close(urgent)
    assert looks.count >= 1


def test_the_fifo_is_never_taken_for_litter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests are listed with their litter removed (`requests_in`): the FIFO, however old, stays."""
    folder = tmp_path / "pushes"
    folder.mkdir()
    os.mkfifo(folder / pushgroup.WAKE, 0o600)
    (folder / "old.out").write_text("{}")
    long_ago = time.time() - pushgroup.STALE_S - 60
    for name in (pushgroup.WAKE, "old.out"):
        os.utime(folder / name, (long_ago, long_ago))
    assert list(pushgroup.requests_in(str(folder))) == []
    assert sorted(os.listdir(folder)) == [pushgroup.WAKE]
