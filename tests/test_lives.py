"""Process lives judged against real processes: live, zombie, reused pid, another boot, another host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from assay.core.claims import holder_life, new_holder
from assay.core.lives import Life, is_running, life_of, life_state, this_life
from assay.core.records.recordtype import replace
from tests.helpers import procs

HOST = os.uname().nodename


def test_a_live_child_is_alive() -> None:
    with procs.sleeper() as child:
        life = life_of(child.pid)
        assert life == Life(HOST, child.pid, procs.start_ticks(child.pid), procs.boot_id())
        assert life_state(life) == "alive" and is_running(life)


def test_a_zombie_child_is_dead() -> None:
    with procs.sleeper() as child:
        life = life_of(child.pid)
    assert life is not None and life_state(life) == "dead"  # reaped: the pid is gone
    with procs.zombie() as child:
        assert procs.state(child.pid) == "Z"
        assert life_of(child.pid) is None
        life = Life(HOST, child.pid, procs.start_ticks(child.pid), procs.boot_id())
        assert life_state(life) == "dead"
        assert life_state(Life(HOST, child.pid)) == "dead"  # an older record, pid only: a zombie is no better


def test_the_right_pid_with_another_start_time_is_another_life() -> None:
    with procs.sleeper() as child:
        life = life_of(child.pid)
        assert life is not None and life.start is not None
        assert life_state(replace(life, start=life.start + 1)) == "dead"
        assert life_state(replace(life, start=None, boot=None)) == "alive"  # an older record: the pid is there


def test_another_boot_on_this_host_is_dead() -> None:
    with procs.sleeper() as child:
        life = life_of(child.pid)
        assert life is not None
        assert life_state(replace(life, boot="00000000-0000-4000-8000-000000000000")) == "dead"
        assert life_state(replace(life, boot=procs.boot_id()[:8])) == "alive"  # a holder keeps 8 characters


def test_another_host_is_unknown_and_not_running() -> None:
    elsewhere = replace(this_life(), host=f"not-{HOST}")
    assert life_state(elsewhere) == "unknown" and not is_running(elsewhere)


def test_the_start_time_is_read_past_a_command_name_with_spaces_and_parentheses() -> None:
    script = "import sys; sys.stdin.readline(); open('/proc/self/comm', 'w').write('a) R 1 (b'); print('renamed', " \
             "flush=True); sys.stdin.readline()"
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        before = life_of(child.pid)
        child.stdin.write("rename\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "renamed"
        assert Path(f"/proc/{child.pid}/comm").read_text().strip() == "a) R 1 (b"
        assert before is not None and life_of(child.pid) == before and life_state(before) == "alive"
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def test_this_life_is_this_process_and_a_forked_child_gets_its_own() -> None:
    mine = this_life()
    assert mine == Life(HOST, os.getpid(), procs.start_ticks(os.getpid()), procs.boot_id())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it thinks it is, and leave without running pytest's exit handlers
        os.write(write, json.dumps(this_life().to_data()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert mine.start is not None and child["pid"] == pid != mine.pid and child["start"] >= mine.start


def test_records_round_trip_and_junk_names_no_life() -> None:
    assert Life.from_data(this_life().to_data()) == this_life()
    assert Life.from_data({"host": "h", "pid": 12}) == Life("h", 12)  # written before lives were recorded
    assert Life.from_data({"host": "h", "pid": 12, "start": "x", "boot": "nope"}) == Life("h", 12)
    for junk in ({"host": "h"}, {"host": "h", "pid": True}, {"host": "h", "pid": 0}, {"pid": 5}):
        assert Life.from_data(junk) is None


def test_a_holder_names_its_life_and_old_holders_still_parse() -> None:
    mine = this_life()
    assert mine.boot is not None
    assert holder_life(new_holder("builder")) == replace(mine, boot=mine.boot[:8])
    assert holder_life("builder/vm/17103/5f4e") == Life("vm", 17103)
    assert holder_life("builder/vm/17103/5f4e.99.f504e144") == Life("vm", 17103, 99, "f504e144")
    assert holder_life("builder/vm/x/5f4e") is None and holder_life("a/b/1/c/d") is None
