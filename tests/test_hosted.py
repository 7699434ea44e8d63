"""Desks that are threads of their supervisor's process (`assay desk run NAME --count N --threads`): each is a desk
as a forked one is (its own life on the forge, its own stop, its own end), in one interpreter for the host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay.core import lives, stops
from assay.core.claims import holder_life
from assay.errors import Cancelled
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
from tests.journal_check import claim_chain, entries, invariants


def threads(forge: Forge, tmp_path: Path, count: int, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--count", str(count),
                             "--threads", *more, "--forge", forge.url], env={**os.environ, **desk_env(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def strays(tmp_path: Path) -> list[str]:
    """Processes still working in this test's folders (an agent, a step, a keeper): a desk's leftovers."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                args = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(str(tmp_path)) or str(tmp_path) in args:
            found.append(f"{entry} {args}")
    return found


def no_strays(tmp_path: Path, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while (left := strays(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def test_desks_that_are_threads_work_their_briefs_in_one_process_and_renew_together(forge: Forge,
                                                                                      tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK,
                    **{f"briefs/{b}.md": brief(b.upper(), ["sleep 4", f"write {b}.txt {b}"], f"test -f {b}.txt")
                       for b in BRIEFS}})
    log = logged_pushes(forge)
    supervisor = threads(forge, tmp_path, 3, "--once")
    out, _ = supervisor.communicate(timeout=180)
    assert supervisor.returncode == 0 and out.count("review ready") == 3, out
    assert "in one process" in out, out
    beats = heartbeats(log)
    assert [p for p in beats if len(p) >= 2], f"no heartbeat renewed two claims at once: {beats}\n{out}"
    holders = {b: claim_chain(forge.path, b)[-1]["holder"] for b in BRIEFS}
    life = {b: holder_life(str(h)) for b, h in holders.items()}
    # each desk's life is its own thread's: three lives, none the process's, each with its own start
    assert all(v is not None and v.start is not None for v in life.values()), holders
    assert len({v.pid for v in life.values() if v}) == 3 and supervisor.pid not in {v.pid for v in life.values() if v}
    for b in BRIEFS:
        assert claim_chain(forge.path, b)[-1]["state"] == "waiting"
        assert invariants(forge.path, b) == [] and audit_failures(forge.url, b) == {}
    assert git("--git-dir", str(forge.path), "show", "refs/heads/assay/b:b.txt") == "b\n"


def test_a_terminals_ctrl_c_reaches_every_desk_that_is_a_thread_and_strands_nothing(forge: Forge,
                                                                                    tmp_path: Path) -> None:
    """Ctrl-C reaches the terminal's whole foreground group: the supervisor, and nothing its desks started (their
    host is a process of its own group), so each desk is stopped by its supervisor, hands its brief back and
    records its agent's step as cancelled, not as an agent that exited on SIGINT."""
    publish(forge, {"desks/builder.yaml": DESK,
                    **{f"briefs/{b}.md": brief(b.upper(), ["sleep 60"], "true") for b in BRIEFS[:2]}})
    supervisor = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--count", "2",
                                   "--threads", "--forge", forge.url], env={**os.environ, **desk_env(tmp_path)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not all(agent_runs(forge, b) for b in BRIEFS[:2]):
        assert supervisor.poll() is None and time.monotonic() < deadline, supervisor.communicate()[0]
        time.sleep(0.1)
    [host] = hosts(supervisor.pid)  # one process for both desks
    tasks = set(os.listdir(f"/proc/{host}/task"))
    for b in BRIEFS[:2]:  # each claim is held by a thread of the host, alive
        life = holder_life(str(claim_chain(forge.path, b)[-1]["holder"]))
        assert life is not None and str(life.pid) in tasks and lives.life_state(life) == "alive", (life, tasks)
    os.killpg(supervisor.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, _ = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 130, out
    for b in BRIEFS[:2]:
        last = claim_chain(forge.path, b)[-1]
        assert last["state"] == "released" and "SIGTERM" in last["reason"], (last, out)
        agent = [e for e in entries(forge.path, b) if e.get("step") == "agent" and e["kind"] == "result"]
        assert [e["status"] for e in agent] == ["cancelled"], (agent, out)
        assert invariants(forge.path, b) == []
    no_strays(tmp_path, within_s=0.0)  # the agents ended with their desks, before the supervisor did


def hosts(supervisor: int) -> list[int]:
    """The supervisor's children that host desks."""
    return [pid for pid, _ in desk_children(supervisor)]


def test_a_host_killed_with_its_desks_leaves_nothing_running_and_its_claims_are_taken_over_at_once(
        forge: Forge, tmp_path: Path) -> None:
    """SIGKILL of the host process: its desks' agents die with it, its supervisor ends saying so, and its desks'
    threads are gone, so the next desk here takes their claims over at once (a dead life), not after their
    leases."""
    publish(forge, {"desks/builder.yaml": DESK.replace("lease_s: 20", "lease_s: 600").replace("attempts: 1",
                                                                                             "attempts: 3"),
                    **{f"briefs/{b}.md": brief(b.upper(), [f"sleep-once 60 {tmp_path}/slept-{b}",
                                                           f"write {b}.txt {b}"], f"test -f {b}.txt")
                       for b in BRIEFS[:2]}})
    supervisor = threads(forge, tmp_path, 2)
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"slept-{b}").exists() for b in BRIEFS[:2]):  # both agents are at work
        assert supervisor.poll() is None and time.monotonic() < deadline, supervisor.communicate()[0]
        time.sleep(0.05)
    [host] = hosts(supervisor.pid)
    os.kill(host, signal.SIGKILL)  # the host alone (the kernel's OOM killer, say): its supervisor says so
    out, _ = supervisor.communicate(timeout=30)  # (its output's pipe closes once no agent holds it)
    assert supervisor.returncode == 1 and "host process was killed by SIGKILL" in out, out
    no_strays(tmp_path)
    again = threads(forge, tmp_path, 2, "--once")
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0 and out.count("took over") == 2 and out.count("review ready") == 2, out
    for b in BRIEFS[:2]:
        chain = claim_chain(forge.path, b)
        assert [(c["state"], c["epoch"]) for c in chain][-2:] == [("held", 2), ("waiting", 2)], chain
        assert invariants(forge.path, b) == []


def test_an_idle_desk_that_is_a_thread_is_woken_when_work_lands_on_main(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK})
    supervisor = threads(forge, tmp_path, 2, "--poll", "60")
    try:
        deadline = time.monotonic() + 30
        while not git("--git-dir", str(forge.path), "for-each-ref", "refs/assay/sweeper").strip():
            assert supervisor.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        idle = tmp_path / "state"
        while not any(p.parent.name == "idle" for p in idle.rglob("*")):  # the desks wait, each by its own name
            assert supervisor.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        late_brief_taken(forge, supervisor)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        out, _ = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 128 + signal.SIGTERM, out


# -- the parts ----------------------------------------------------------------------------------------------------


def in_desk(body: Callable[[int], Any]) -> Any:
    """Run `body(ident)` in a thread that is a desk; what it returned or raised."""
    got: list[Any] = []

    def run() -> None:
        stops.host()
        lives.host_here()
        try:
            got.append(body(threading.get_ident()))
        except BaseException as exc:  # noqa: BLE001 - what it raised is the answer
            got.append(exc)
        finally:
            stops.unhost()
            lives.unhost()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    [answer] = got
    return answer


def test_a_desk_thread_raises_its_stop_where_it_waits_and_never_while_an_intent_is_journaled() -> None:
    def sleeps(ident: int) -> None:
        stops.stop(ident, signal.SIGTERM)
        stops.sleep(5)

    raised = in_desk(sleeps)
    assert isinstance(raised, KeyboardInterrupt) and raised.args == ("SIGTERM",)

    def held_then_cancelled(ident: int) -> tuple[list[int], BaseException | None]:
        held: list[int] = []
        with stops.holding(held):
            stops.stop(ident, signal.SIGTERM)
            stops.check()  # held: not raised inside
        with stops.cancelling():
            stops.stop(ident, signal.SIGTERM)
            try:
                stops.check()
            except Cancelled as exc:
                return held, exc
        return held, None

    held, cancelled = in_desk(held_then_cancelled)
    assert held == [signal.SIGTERM] and isinstance(cancelled, Cancelled)

    def ctrl_c(ident: int) -> None:
        stops.stop(ident, signal.SIGINT)
        stops.check()

    raised = in_desk(ctrl_c)
    assert isinstance(raised, KeyboardInterrupt) and raised.args == ()  # as Ctrl-C's default handler raises it
    stops.stop(threading.get_ident(), signal.SIGTERM)
    stops.check()  # not a desk: nothing handed, nothing raised


def test_a_desk_threads_life_is_its_own_and_its_helpers_and_ends_with_it() -> None:
    def life(ident: int) -> tuple[lives.Life, lives.Life, str]:
        mine = lives.this_life()
        helper: list[lives.Life] = []
        thread = lives.thread(lambda: helper.append(lives.this_life()))
        thread.start()
        thread.join()
        return mine, helper[0], lives.life_state(mine)

    mine, helpers, state = in_desk(life)
    assert mine.pid != os.getpid() and mine.start is not None and helpers == mine and state == "alive"
    assert lives.await_end(mine, 10) and lives.life_state(mine) == "dead"  # its thread ended; the process lives on
    assert lives.this_life().pid == os.getpid()


def test_desk_threads_parse_yaml_each_with_their_own_constructor() -> None:
    import yaml

    from assay.core.briefs import construct_value

    node = yaml.compose("a: [1, 2, {b: c}]\nd: x\n")
    got: list[object] = []

    def parse() -> None:
        for _ in range(1000):
            got.append(construct_value(node))
    workers = [threading.Thread(target=parse) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert got == [{"a": [1, 2, {"b": "c"}], "d": "x"}] * 8000


def test_a_desk_thread_waiting_for_its_agent_takes_its_stop_and_one_handed_before_it_began() -> None:
    from assay.desk.hosted import DeskThread

    def waits(ident: int) -> tuple[int, BaseException | None]:
        done = subprocess.Popen(["true"], text=True)
        code = stops.wait_process(done)  # an agent that ends: its exit code
        agent = subprocess.Popen(["sleep", "30"], text=True)
        stops.stop(ident, signal.SIGTERM)
        try:
            stops.wait_process(agent)
        except KeyboardInterrupt as exc:
            return code, exc
        finally:
            agent.kill()
            agent.wait()
        return code, None

    code, stopped = in_desk(waits)
    assert code == 0 and isinstance(stopped, KeyboardInterrupt)

    def guard(call: Callable[[], int]) -> int:
        try:
            return call()
        except KeyboardInterrupt as exc:
            return 128 + signal.Signals[exc.args[0]].value

    def idles() -> int:
        stops.sleep(30)
        return 0

    desk = DeskThread("early", idles, guard)
    desk.send_signal(signal.SIGTERM)  # before its thread began: kept, and handed to it as it begins
    desk.start()
    assert desk.wait() == 128 + signal.SIGTERM and desk.pid not in (0, os.getpid())


def test_a_desk_thread_waiting_is_woken_by_its_stop_not_by_a_clock() -> None:
    """A desk that is a thread sleeps, waits for its agent or for a command's output without looking every so
    often (a host's thousand desks each looking four times a second kept its interpreter busy): a stop that comes
    while it waits (its thread seen blocked in `poll` by the kernel) wakes it at once, not at its next look
    (`TICK_S`, 30 s)."""
    from assay.desk import procs

    assert stops.TICK_S >= 30  # no look within the test's time: only the pipe can end the waits at once

    def stopped_in(wait: Callable[[], object]) -> Callable[[int], float]:
        def body(ident: int) -> float:
            tid = threading.get_native_id()

            def stop_once_it_waits() -> None:
                deadline = time.monotonic() + 10
                while "poll" not in Path(f"/proc/self/task/{tid}/wchan").read_text() and time.monotonic() < deadline:
                    time.sleep(0.01)  # a look at the kernel's account of the thread: no event says it waits
                stops.stop(ident, signal.SIGTERM)

            threading.Thread(target=stop_once_it_waits).start()
            began = time.monotonic()
            try:
                wait()
            except KeyboardInterrupt:
                return time.monotonic() - began
            return -1.0
        return body

    agent = subprocess.Popen(["sleep", "60"], text=True)
    group = procs.start(["sleep", "60"])
    try:
        for wait in (lambda: stops.sleep(60), lambda: stops.wait_process(agent), lambda: procs._read(group.output)):
            took = in_desk(stopped_in(wait))
            assert 0 <= took < 10, took
    finally:
        agent.kill()
        agent.wait()
        group.kill()
        group.close_output()


def test_an_idle_desk_thread_is_woken_by_its_hosts_watcher_not_by_looking(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle desk that is a thread waits for the `wake` file without looking at it five times a second: the host's
    watcher, having touched it, wakes the desk threads of its process (`stops.nudge`), which look at once. With
    every look a minute apart, the desk (its thread seen blocked in `poll`) is woken within the test's 10 s."""
    from types import SimpleNamespace

    from assay.desk import loop

    monkeypatch.setattr(loop, "WAKE_LOOK_S", 60.0)
    monkeypatch.setattr(loop, "NUDGED_LOOK_S", 60.0)
    waiting = SimpleNamespace(state_dir=tmp_path, _looked_at=time.time())

    def body(ident: int) -> tuple[bool, float]:
        tid = threading.get_native_id()

        def wake_once_it_waits() -> None:
            deadline = time.monotonic() + 10
            while "poll" not in Path(f"/proc/self/task/{tid}/wchan").read_text() and time.monotonic() < deadline:
                time.sleep(0.01)  # a look at the kernel's account of the thread: no event says it waits
            wake = tmp_path / loop.WAKE
            wake.touch()
            os.utime(wake, (time.time() + 1, time.time() + 1))
            stops.nudge()

        threading.Thread(target=wake_once_it_waits).start()
        began = time.monotonic()
        woken = loop.Desk._woken(waiting, 60)  # type: ignore[arg-type]
        return woken, time.monotonic() - began

    woken, took = in_desk(body)
    assert woken and took < 10, took
    assert not list((tmp_path / loop.IDLE).iterdir())  # its mark as idle is gone with the wait


def test_a_desk_thread_that_cannot_begin_ends_and_is_not_waited_for_ever(monkeypatch: pytest.MonkeyPatch) -> None:
    """A desk thread whose start fails (no descriptor left for its stop's pipe) ends with 1, said, and its host's
    `start` returns: the host goes on with its other desks."""
    import errno

    from assay.desk.hosted import DeskThread

    def no_descriptors() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(stops, "host", no_descriptors)
    desk = DeskThread("starved", lambda: 0, lambda call: call())
    finished = threading.Thread(target=desk.start)
    finished.start()
    finished.join(30)
    assert not finished.is_alive() and desk.wait() == 1


def test_a_second_stop_while_the_first_is_passed_on_still_reaches_every_desk() -> None:
    from assay.desk.supervisor import until_all_end

    class Desk:
        def __init__(self, second: bool) -> None:
            self.pid, self.second = 0, second
            self.told: list[int] = []

        def poll(self) -> int | None:
            return 143 if self.told else None

        def wait(self) -> int:
            return 143

        def send_signal(self, sig: int) -> None:
            if self.second:  # `systemctl stop` signals the host too, as its supervisor passes its stop on
                self.second = False
                raise KeyboardInterrupt("SIGTERM")
            self.told.append(sig)

    desks = [Desk(second=True), Desk(second=False)]

    def begin() -> None:
        raise KeyboardInterrupt("SIGTERM")

    try:
        until_all_end([("a", desks[0]), ("b", desks[1])], begin)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the stop did not go on")
    assert [d.told for d in desks] == [[signal.SIGTERM], [signal.SIGTERM]]


def test_a_desk_thread_waits_on_descriptors_past_select_s_limit(tmp_path: Path) -> None:
    """A host of many desks numbers its descriptors past 1,023, where `select` fails: a command's output, a
    keeper's pipes and an agent's end are waited for with `poll`."""
    from assay.desk import procs

    held: list[int] = []
    while not held or held[-1] < 1100:
        held.append(os.open(os.devnull, os.O_RDONLY))
    try:
        def run(ident: int) -> tuple[int, bytes, int]:
            code, out = procs.run(["sh", "-c", "echo high"])  # its pipes, and its keeper's, are numbered past 1,023
            agent = subprocess.Popen(["true"], text=True)
            return code, out, stops.wait_process(agent)

        code, out, agent = in_desk(run)
        assert (code, out, agent) == (0, b"high\n", 0)
    finally:
        for fd in held:
            os.close(fd)
