"""The decoded-journal cache: a new process decodes only the journal commits after the log kept for it.

Journals are built with `git fast-import`; the kept log is read and written by real
processes and checked against a read of the whole chain through a separate cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from assay.core.git import ForgeGit
from assay.core.journal import KEEP_AFTER, JournalLog, read_log
from assay.core.journal import cache as journalcache
from assay.core.records import JournalEntry
from tests.conftest import Forge, assay, git
from tests.helpers.journals import append

AT = "2026-01-01T00:00:00Z"
REF = "refs/assay/journal/alpha"


def notes(first: int, count: int, text: str = "note") -> list[JournalEntry]:
    return [JournalEntry(seq=s, epoch=1, kind="note", at=AT, run="r1", data={"text": f"{text} {s}"})
            for s in range(first, first + count)]


def whole(forge: Forge, tmp_path: Path, brief: str = "alpha") -> JournalLog:
    """The journal decoded from every commit, through a new cache of its own."""
    port = ForgeGit(forge.url, Path(tempfile.mkdtemp(dir=tmp_path)))
    try:
        log = read_log(port, brief)
    finally:
        port.close()
    assert log.decoded == len(git("--git-dir", str(forge.path), "rev-list", f"refs/assay/journal/{brief}").split())
    return log


def read(forge: Forge, brief: str = "alpha") -> JournalLog:
    port = ForgeGit(forge.url)
    try:
        return read_log(port, brief)
    finally:
        port.close()


def _kept(brief: str) -> Path:
    """The kept log's file in the forge's cache (under ASSAY_CACHE_DIR, which the tests pin)."""
    found = list(Path(os.environ["ASSAY_CACHE_DIR"]).glob(f"*/{journalcache.FOLDER}/{brief}.json"))
    assert len(found) == 1, found
    return found[0]


def test_a_second_process_decodes_only_the_commits_after_the_kept_log(forge: Forge, tmp_path: Path) -> None:
    append(forge, notes(1, KEEP_AFTER + 6))
    first = assay("journal", "alpha", "--forge", forge.url, "--json")  # a process that decodes the whole chain
    assert first.code == 0, first.err
    kept = json.loads(_kept("alpha").read_text())
    assert kept["tip"] == forge.tip(REF) and len(kept["entries"]) == KEEP_AFTER + 6
    append(forge, notes(KEEP_AFTER + 7, 3, "later"))
    log = read(forge)
    assert log.decoded == 3  # the three new commits, not the whole chain
    full = whole(forge, tmp_path)
    assert log.entries == full.entries and log.commit_of == full.commit_of and log.tip == full.tip
    shown = assay("journal", "alpha", "--forge", forge.url, "--json")
    assert shown.code == 0, shown.err
    listed = shown.json()
    assert isinstance(listed, dict) and [e["seq"] for e in listed["entries"]] == list(range(1, KEEP_AFTER + 10))


def test_a_damaged_kept_log_is_ignored_and_written_again(forge: Forge, tmp_path: Path) -> None:
    append(forge, notes(1, KEEP_AFTER))
    read(forge)
    path = _kept("alpha")
    for damage in (path.read_bytes()[: path.stat().st_size // 2], b"\x00garbage", b'{"v": 1, "brief": "alpha"}',
                   json.dumps({**json.loads(path.read_text()), "fields": ["seq"]}).encode()):
        path.write_bytes(damage)
        log = read(forge)
        assert log.decoded == KEEP_AFTER
        assert log.entries == whole(forge, tmp_path).entries
        assert journalcache.load(str(path.parent.parent), "alpha") is not None  # written whole again


def test_a_kept_log_off_the_chain_is_not_used(forge: Forge, tmp_path: Path) -> None:
    """Someone force-rewrote the journal ref: the kept tip is no ancestor of the new one."""
    append(forge, notes(1, KEEP_AFTER))
    old_tip = forge.tip(REF)
    read(forge)
    append(forge, notes(1, 5, "rewritten"), new=True)
    assert forge.tip(REF) != old_tip
    log = read(forge)
    assert log.decoded == 5
    assert [(e.data or {})["text"] for e in log.entries] == [f"rewritten {s}" for s in range(1, 6)]
    assert log.entries == whole(forge, tmp_path).entries
    assert json.loads(_kept("alpha").read_text())["tip"] == old_tip  # too short a read to be kept


def test_another_briefs_kept_log_is_ignored(forge: Forge, tmp_path: Path) -> None:
    append(forge, notes(1, KEEP_AFTER))
    append(forge, notes(1, 4, "beta"), ref="refs/assay/journal/beta", new=True)
    read(forge)
    path = _kept("alpha")
    path.with_name("beta.json").write_bytes(path.read_bytes())
    log = read(forge, "beta")
    assert log.decoded == 4 and [e.seq for e in log.entries] == [1, 2, 3, 4]
    assert log.entries == whole(forge, tmp_path, "beta").entries


def test_a_cache_that_cannot_be_written_fails_nothing(forge: Forge, tmp_path: Path) -> None:
    append(forge, notes(1, KEEP_AFTER))
    port = ForgeGit(forge.url)
    (Path(port.cache) / journalcache.FOLDER).write_text("a file where the folder goes")
    try:
        log = read_log(port, "alpha")
    finally:
        port.close()
    assert log.decoded == KEEP_AFTER and len(log.entries) == KEEP_AFTER
    shown = assay("journal", "alpha", "--forge", forge.url, "--json")
    assert shown.code == 0, shown.err


RACER = """
import sys
from assay.core.journal import cache as journalcache
from assay.core.git import ForgeGit
from assay.core.journal import read_log

port = ForgeGit(sys.argv[1])
log = read_log(port, "alpha")
sys.stdin.readline()  # released together with the other racers
bad = 0
for _ in range(30):
    journalcache.save(port.cache, "alpha", log.entries, log.commit_of, log.tip)
    kept = journalcache.load(port.cache, "alpha")
    bad += kept is None or kept.entries != log.entries or kept.tip != log.tip
print(bad)
"""


def test_racing_writers_leave_one_whole_file(forge: Forge, tmp_path: Path) -> None:
    append(forge, notes(1, KEEP_AFTER * 4))
    read(forge)  # the cache repository exists before the racers start
    racers = [subprocess.Popen([sys.executable, "-c", RACER, forge.url], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(4)]
    for racer in racers:
        assert racer.stdin
        racer.stdin.write("go\n")
        racer.stdin.flush()
    outs = [racer.communicate(timeout=120)[0] for racer in racers]
    assert [racer.returncode for racer in racers] == [0] * 4
    assert [int(out) for out in outs] == [0] * 4  # no racer ever read a partial or mixed file
    kept = journalcache.load(str(_kept("alpha").parent.parent), "alpha")
    assert kept is not None and kept.entries == whole(forge, tmp_path).entries
    assert [p.name for p in _kept("alpha").parent.iterdir()] == ["alpha.json"]  # no temp files left


def test_many_journals_read_in_one_batch_equal_each_read_alone(forge: Forge, tmp_path: Path) -> None:
    """`read_logs` (the board's and a first sweep's reader) decodes what `read_log` does, and a junk journal
    is its own error, not the others'."""
    for brief, count in (("alpha", 5), ("beta", 1), ("gamma", 12)):
        append(forge, notes(1, count, brief), ref=f"refs/assay/journal/{brief}")
    append(forge, notes(1, 2) + notes(4, 1), ref="refs/assay/journal/delta")  # seq jumps from 2 to 4
    from assay.core.journal import read_logs
    from assay.errors import RecordInvalid

    port = ForgeGit(forge.url, Path(tempfile.mkdtemp(dir=tmp_path)))
    try:
        tips = {b: str(forge.tip(f"refs/assay/journal/{b}")) for b in ("alpha", "beta", "gamma", "delta")}
        port.ensure_objects({f"refs/assay/journal/{b}": t for b, t in tips.items()})
        logs = read_logs(port, tips)
    finally:
        port.close()
    for brief in ("alpha", "beta", "gamma"):
        one = whole(forge, tmp_path, brief)
        many = logs[brief]
        assert isinstance(many, JournalLog)
        assert (many.entries, many.commit_of, many.tip) == (one.entries, one.commit_of, one.tip)
    assert isinstance(logs["delta"], RecordInvalid) and "seq jumps from 2 to 4" in logs["delta"].problem
