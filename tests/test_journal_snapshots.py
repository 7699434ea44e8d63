"""Journal snapshots: every few entries the journal chain carries its index, and a reader with no cache of its own
reads the newest snapshot and the commits after it, never the chain below. Only a shortcut: whatever the snapshot
holds, a reader decides exactly what a reader of the whole chain decides, or reads the whole chain.

Snapshots are made every `ASSAY_SNAPSHOT_EVERY` = 5 entries here; each journal is written by the real writers
(sessions, a person's entries) on a forge on disk, and each reader starts from an empty cache.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit, GitObject
from assay.core.journal import append_as_person, keys, read_indexed, read_log
from assay.core.journal import index as journalindex
from assay.core.journal.spacing import first_depth
from assay.core.records import JournalEntry
from assay.core.steps import Session, open_session
from tests.conftest import Forge, assay
from tests.conftest import git as plain_git
from tests.journal_check import invariants, snapshot_problems

EVERY = 5
REF = "refs/assay/journal/alpha"


def git(*args: str, input: bytes | None = None, check: bool = True) -> str:
    return plain_git(*args, input=input.decode() if input is not None else None, check=check).strip()


@pytest.fixture(autouse=True)
def often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_SNAPSHOT_EVERY", str(EVERY))


@pytest.fixture
def held(forge: Forge, claims: Claims) -> Claims:
    claims.claim("alpha", "d")
    return claims


def constant(value: int) -> Callable[[str], int]:
    return lambda key: value


def session(claims: Claims, run: str, indexed: bool = False) -> Session:
    return open_session(claims, "alpha", "d", 1, run=run, indexed=indexed)


def fresh_port(forge: Forge, tmp_path: Path, name: str) -> ForgeGit:
    """A port on a cache of its own: a new machine."""
    return ForgeGit(forge.url, tmp_path / f"cache-{name}")


@pytest.fixture
def written(forge: Forge, held: Claims) -> Forge:
    """alpha's journal: 23 entries from steps (a step's intent and result in one commit), clock and random values, a
    large output (a blob) and an unsafe intent left open, so snapshots were made as seq 5, 10, 15 and 20 landed."""
    s = session(held, "r1")
    s.step("build", lambda k: {"ok": True}, input={"n": 1})
    s.now()
    s.step("big", lambda k: "x" * 5000, input={"n": 2})  # over the inline limit: a blob
    for i in range(6):
        s.step("tick", constant(i), input=i)
        s.journal.flush()
    s.random_bytes(4)
    s.journal.add("intent", step="deploy", ordinal=0, input_sha="0" * 64, key="alpha/1/deploy/0", policy="unsafe")
    assert s.journal.last_seq == 19
    for i in range(2):
        s.note(f"after the open intent {i}", sync=True)
    s.step("last", lambda k: "done", input=None)
    s.journal.flush()
    assert s.journal.last_seq == 23
    return forge


def tree_names(forge: Forge, rev: str) -> list[str]:
    return git("--git-dir", str(forge.path), "ls-tree", "--name-only", rev).split()


def test_the_commit_that_crosses_a_boundary_carries_a_snapshot_of_every_entry_before_it(written: Forge) -> None:
    assert snapshot_problems(written.path, "alpha", every=EVERY) == []
    commits = git("--git-dir", str(written.path), "rev-list", "--reverse", REF).split()
    snapshots = [git("--git-dir", str(written.path), "rev-parse", "-q", "--verify", f"{c}:snapshot", check=False)
                 for c in commits]
    made = [c for c, before, now in zip(commits, ["", *snapshots], snapshots, strict=False) if now and now != before]
    assert len(made) >= 3  # as seq 5, 10, 15 and 20 landed (a group commit may cross two at once)
    newest = git("--git-dir", str(written.path), "ls-tree", "--name-only", f"{REF}:snapshot").split()
    assert "snapshot.json" in newest and sum(n.endswith(".jsonl") for n in newest) == len(made)
    assert any(n.endswith(".commits") for n in newest)  # the big output's commit, for its blob
    first = sorted(n for n in newest if n.startswith("1-"))[0]
    assert git("--git-dir", str(written.path), "rev-parse", f"{made[0]}:snapshot/{first}") == \
        git("--git-dir", str(written.path), "rev-parse", f"{REF}:snapshot/{first}")  # a segment is written once


def read_both(forge: Forge, tmp_path: Path, name: str) -> tuple[list[JournalEntry], list[JournalEntry], object]:
    """The journal read whole, and as a cold indexed reader reads it (its base asked entry by entry)."""
    whole_port, cold_port = fresh_port(forge, tmp_path, f"{name}-whole"), fresh_port(forge, tmp_path, name)
    try:
        whole = read_log(whole_port, "alpha").entries
        read = read_indexed(cold_port, "alpha")
        base = read.base
        got = [base.entry(seq) for seq in range(1, base.last_seq + 1)] if base is not None else []
        return whole, [e for e in got if e is not None] + read.tail.entries, base
    finally:
        whole_port.close()
        cold_port.close()


def test_a_cold_reader_reads_the_snapshot_and_the_commits_after_it(written: Forge, tmp_path: Path) -> None:
    whole, cold, base = read_both(written, tmp_path, "cold")
    assert isinstance(base, journalindex.Snapshot) and base.last_seq == 19
    assert cold == whole
    port = fresh_port(written, tmp_path, "asks")
    try:
        read = read_indexed(port, "alpha")
        assert [e.seq for e in read.tail.entries] == [20, 21, 22, 23]
        assert port.shallow_commits()  # the chain below the snapshot's tip was not fetched
        view = read.base
        assert isinstance(view, journalindex.Snapshot)
        by_step = {e.step: e for e in whole if e.kind == "intent"}
        assert view.calls_of(by_step["tick"].identity) == [e for e in whole if e.kind == "intent"
                                                            and e.identity == by_step["tick"].identity]
        assert view.resolution(by_step["build"].seq) == next(e for e in whole if e.intent == by_step["build"].seq)
        assert view.open_intents() == [by_step["deploy"].seq]
        assert view.totals() == (2, 0)  # the clock and the random value; no run start noted
        assert view.nondet(1) == [e for e in whole if e.kind == "nondeterminism"][1] and view.nondet(2) is None
        calls, values = view.run_counts("r1")
        assert values == 2 and sorted(n for (step, _), n in calls.items() if step == "tick") == [1] * 6
    finally:
        port.close()


def test_a_session_from_a_snapshot_replays_exactly_as_from_the_whole_chain(written: Forge, held: Claims,
                                                                          tmp_path: Path) -> None:
    cold = Claims(fresh_port(written, tmp_path, "session"))
    s = session(cold, "r2", indexed=True)
    assert isinstance(s.journal.base, journalindex.Snapshot) and s.journal.base.last_seq == 19
    ran: list[str] = []
    assert s.step("big", ran.append, input={"n": 2}) == "x" * 5000  # its blob, fetched alone
    assert s.step("tick", ran.append, input=3) == 3
    assert ran == []
    assert s._unresolved() == [19]  # the unsafe deploy left open, from the summary
    s.step("after", lambda k: 1, input=None)  # new entries land on the chain, after the snapshot
    cold.git.close()
    assert snapshot_problems(written.path, "alpha", every=EVERY) == []


def test_a_step_command_on_a_new_machine_replays_from_the_snapshot(written: Forge, held: Claims,
                                                                   tmp_path: Path) -> None:
    env = {"ASSAY_FORGE": written.url, "ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1",
           "ASSAY_RUN": "first"}
    assert assay("step", "run", "--policy", "safe", "--name", "cli", "--", "echo", "ran once", env=env).code == 0
    s = session(held, "r4")
    for i in range(EVERY):
        s.note(f"past the next boundary {i}", sync=True)
    assert '"step":"cli"' in git("--git-dir", str(written.path), "show", f"{REF}:snapshot/{segment_of(written, 24)}")
    again = {**env, "ASSAY_RUN": "again", "ASSAY_CACHE_DIR": str(tmp_path / "new-machine")}
    done = assay("step", "run", "--policy", "safe", "--name", "cli", "--", "echo", "ran once", env=again)
    assert (done.code, done.out) == (0, "ran once\n") and "not run again" in done.err  # the recorded output
    caches = list((tmp_path / "new-machine").iterdir())
    assert len(caches) == 1 and (caches[0] / "shallow").exists()  # the chain below the snapshot was not fetched
    assert snapshot_problems(written.path, "alpha", every=EVERY) == []


def segment_of(forge: Forge, seq: int) -> str:
    names = git("--git-dir", str(forge.path), "ls-tree", "--name-only", f"{REF}:snapshot").split()
    return next(n for n in names if n.endswith(".jsonl") and int(n.split("-")[0]) <= seq
                <= int(n.removesuffix(".jsonl").split("-")[1]))


JUNK = ["summary garbage", "unknown version", "other brief", "segment missing", "segment short", "junk line",
        "hidden line", "wrong line", "tip elsewhere", "not a tree"]
# a segment with a filter of its keys, not the last: read when a lookup needs it, a line checked when it is used
FOUND_WHEN_READ = {"segment short", "junk line", "hidden line"}


def plant(forge: Forge, junk: str) -> None:
    """A commit on alpha's journal whose `snapshot` is junk, adding one note as a person would."""
    tip = forge.tip(REF)
    assert tip
    gd = ["--git-dir", str(forge.path)]
    snap = git(*gd, "rev-parse", f"{tip}:snapshot")
    listing = git(*gd, "ls-tree", snap)
    rows = {line.split("\t")[1]: line for line in listing.splitlines()}
    summary = git(*gd, "show", f"{snap}:snapshot.json")

    def blob(text: str) -> str:
        return git(*gd, "hash-object", "-w", "--stdin", input=text.encode())

    def put(name: str, text: str) -> None:
        rows[name] = f"100644 blob {blob(text)}\t{name}"

    if junk == "summary garbage":  # noqa: SIM114
        put("snapshot.json", "{not json")
    elif junk == "unknown version":
        put("snapshot.json", summary.replace('"v":1', '"v":2'))
    elif junk == "other brief":
        put("snapshot.json", summary.replace('"brief":"alpha"', '"brief":"beta"'))
    segments = sorted((n for n in rows if n.endswith(".jsonl")), key=lambda n: int(n.split("-")[0]))
    if junk == "segment missing":
        del rows[segments[1]]
    elif junk == "segment short":
        put(segments[1], "\n".join(git(*gd, "show", f"{snap}:{segments[1]}").splitlines()[:-1]) + "\n")
    elif junk == "junk line":  # of the right length, first and last lines whole: a line between them is not JSON
        lines = git(*gd, "show", f"{snap}:{segments[1]}").splitlines()
        put(segments[1], "\n".join([*lines[:2], "{not json", *lines[3:]]) + "\n")
    elif junk == "hidden line":  # the line of the first step's intent, which its segment's filter still names
        name = next(n for n in segments if '"step":"build"' in git(*gd, "show", f"{snap}:{n}"))
        lines = git(*gd, "show", f"{snap}:{name}").splitlines()
        put(name, "\n".join("{junk" if '"step":"build"' in line and '"intent"' in line else line
                             for line in lines) + "\n")
    elif junk == "wrong line":  # a line that decodes, but says another thing than the chain: its last
        lines = git(*gd, "show", f"{snap}:{segments[-1]}").splitlines()
        put(segments[-1], "\n".join([*lines[:-1], lines[-1].replace('"at":"', '"at":"1999 ')]) + "\n")
    elif junk == "tip elsewhere":
        put("snapshot.json", summary.replace(summary.split('"tip":"')[1][:40], "1" * 40))
    new_snap = blob("not a tree") if junk == "not a tree" else \
        git(*gd, "mktree", input="".join(f"{row}\n" for row in rows.values()).encode())
    mode = "100644 blob" if junk == "not a tree" else "040000 tree"
    entries = git(*gd, "rev-parse", f"{tip}:entries.jsonl")
    last = int(git(*gd, "show", f"{tip}:entries.jsonl").splitlines()[-1].split('"seq":')[1].split(",")[0])
    note = JournalEntry(seq=last + 1, epoch=1, kind="note", at="2026-01-01T00:00:00Z", run="person:p",
                        data={"text": "after the junk"})
    entries = blob(note.encode() + "\n")
    tree = git(*gd, "mktree", input=f"100644 blob {entries}\tentries.jsonl\n{mode} {new_snap}\tsnapshot\n".encode())
    commit = git(*gd, "commit-tree", tree, "-p", tip, "-m", "assay: journal alpha (junk snapshot)")
    git(*gd, "update-ref", REF, commit, tip)


@pytest.mark.parametrize("junk", JUNK)
def test_a_damaged_or_planted_snapshot_is_read_past_with_the_same_result(written: Forge, held: Claims,
                                                                         tmp_path: Path, junk: str) -> None:
    plant(written, junk)
    whole, cold, base = read_both(written, tmp_path, junk)
    assert cold == whole
    # a segment is checked when a lookup first needs it: one found junk then is read from the chain, and marked in
    # the cache, so that the next reader there takes the chain at once
    assert not isinstance(base, journalindex.Snapshot) or junk in FOUND_WHEN_READ
    if junk in FOUND_WHEN_READ:
        port = ForgeGit(written.url, tmp_path / f"cache-{junk}")  # read_both's cold reader's cache
        try:
            assert not isinstance(read_indexed(port, "alpha").base, journalindex.Snapshot)
        finally:
            port.close()
    s = session(Claims(fresh_port(written, tmp_path, f"{junk}-session")), "r3", indexed=True)
    assert not isinstance(s.journal.base, journalindex.Snapshot) or junk in FOUND_WHEN_READ
    assert s.step("tick", lambda k: -1, input=4) == 4  # replayed, from the chain
    s.journal.git.close()
    assert snapshot_problems(written.path, "alpha") != []  # the checker sees the junk for what it is


def test_a_junk_line_that_hides_what_a_lookup_asks_for_is_read_past_from_the_chain(written: Forge,
                                                                                    tmp_path: Path) -> None:
    """The filter of a segment names what its lines held when it was written: where the line that holds it is junk
    now, the lookup finds it in the chain (the segment is checked whole when a lookup is sent there), never nothing."""
    reader = fresh_port(written, tmp_path, "whole")
    build = next(e for e in read_log(reader, "alpha").entries if e.kind == "intent" and e.step == "build")
    reader.close()
    plant(written, "hidden line")
    port = fresh_port(written, tmp_path, "hidden")
    try:
        view = read_indexed(port, "alpha").base
        assert isinstance(view, journalindex.Snapshot)
        assert view.calls_of(build.identity) == [build]
    finally:
        port.close()


def test_an_older_writer_that_drops_the_snapshot_leaves_a_chain_read_whole(written: Forge, tmp_path: Path) -> None:
    tip = written.tip(REF)
    gd = ["--git-dir", str(written.path)]
    note = JournalEntry(seq=24, epoch=1, kind="note", at="2026-01-01T00:00:00Z", run="person:old",
                        data={"text": "written by an Assay that knows no snapshots"})
    blob = git(*gd, "hash-object", "-w", "--stdin", input=(note.encode() + "\n").encode())
    tree = git(*gd, "mktree", input=f"100644 blob {blob}\tentries.jsonl\n".encode())
    git(*gd, "update-ref", REF, git(*gd, "commit-tree", tree, "-p", str(tip), "-m", "old"), str(tip))
    whole, cold, base = read_both(written, tmp_path, "older")
    assert cold == whole and len(whole) == 24 and not isinstance(base, journalindex.Snapshot)


def test_an_older_reader_reads_a_chain_with_snapshots(written: Forge) -> None:
    """What an Assay without snapshots reads of each commit: `entries.jsonl` only (its `blobs/` by name)."""
    commits = git("--git-dir", str(written.path), "rev-list", "--reverse", REF).split()
    lines = [line for c in commits for line in git("--git-dir", str(written.path), "show",
                                                   f"{c}:entries.jsonl").splitlines()]
    assert len(lines) == 23


def test_a_whole_read_after_a_cold_one_makes_the_cache_whole(written: Forge, tmp_path: Path) -> None:
    port = fresh_port(written, tmp_path, "both")
    try:
        assert isinstance(read_indexed(port, "alpha").base, journalindex.Snapshot)
        assert port.shallow_commits()
        assert [e.seq for e in read_log(port, "alpha").entries] == list(range(1, 24))
        assert not port.shallow_commits()
    finally:
        port.close()


def test_a_person_writer_crossing_a_boundary_writes_the_snapshot(forge: Forge, held: Claims) -> None:
    for i in range(12):
        append_as_person(held, "alpha", "steer", {"text": f"do {i}", "by": "p"}, "p")
    assert snapshot_problems(forge.path, "alpha") == []
    assert '"last_seq":9' in git("--git-dir", str(forge.path), "show", f"{REF}:snapshot/snapshot.json")


def test_writers_racing_across_a_boundary_leave_one_snapshot_that_agrees(forge: Forge, held: Claims) -> None:
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            s = session(Claims(ForgeGit(forge.url)), name)
            for i in range(7):
                s.step(f"{name}-{i}", constant(i), input=None)
            s.journal.git.close()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert snapshot_problems(forge.path, "alpha") == [] and invariants(forge.path, "alpha") == []


def test_a_damaged_local_index_never_reaches_a_snapshot(written: Forge, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The local index is a hint: entries it holds wrongly (a damaged cache) never become part of a snapshot on the
    forge; the writer copies the entries a new snapshot holds from the chain's own commits."""
    from assay.core.records.recordtype import replace

    for kind in (journalindex.View, journalindex.Snapshot):
        honest = kind.between

        def damaged(self: object, after: int, upto: int, honest: Callable[..., list[tuple[JournalEntry, str | None]]]
                    = honest) -> list[tuple[JournalEntry, str | None]]:
            return [(replace(e, run="tock"), c) for e, c in honest(self, after, upto)]

        monkeypatch.setattr(kind, "between", damaged)
    writer = session(Claims(fresh_port(written, tmp_path, "cold")), "r2", indexed=True)  # from the snapshot of 1..20
    assert writer.journal.base is not None
    for i in range(3):
        writer.note(f"across the boundary {i}", sync=True)  # 24, 25, 26: seq 25 lands, with a snapshot of 1..24
    assert snapshot_problems(written.path, "alpha", EVERY) == []
    assert git("--git-dir", str(written.path), "grep", "-c", "tock", REF, check=False) == ""


def test_a_cold_reader_of_a_tip_that_made_its_snapshot_fetches_once(forge: Forge, held: Claims,
                                                                     tmp_path: Path) -> None:
    """A writer crossing the interval makes the snapshot in that commit, so the tip's parent is the snapshot's own
    tip: the first fetch of a cold reader (the tip and the few commits below it) is all it fetches (it fetched the
    tip, then its parent). Where more commits follow the snapshot, a second fetch goes down to its tip, as before."""
    s = session(held, "r1")
    s.note("one entry, one commit", sync=True)
    while s.journal.last_seq % EVERY:
        s.note("one entry, one commit", sync=True)
    assert git("--git-dir", str(forge.path), "rev-parse", f"{REF}:snapshot") != \
        git("--git-dir", str(forge.path), "rev-parse", "-q", "--verify", f"{REF}~1:snapshot", check=False)
    whole = read_log(fresh_port(forge, tmp_path, "whole"), "alpha").entries
    for more, fetches in ((0, 1), (first_depth(), 2)):  # here (an interval of 5) the tip and its parent first
        for _ in range(more):
            s.note("after the snapshot", sync=True)
            whole = read_log(fresh_port(forge, tmp_path, f"whole{more}"), "alpha").entries
        port = fresh_port(forge, tmp_path, f"cold{more}")
        try:
            read = read_indexed(port, "alpha")
            assert port.round_trips["fetch"] == fetches, port.round_trips
            assert isinstance(read.base, journalindex.Snapshot) and port.shallow_commits()
            assert [read.base.entry(q) for q in range(1, read.base.last_seq + 1)] + read.tail.entries == whole
        finally:
            port.close()


def test_a_cold_reader_reads_only_the_segments_its_lookups_need(written: Forge, tmp_path: Path) -> None:
    """Each segment carries a filter of its entries' lookup keys: a lookup reads the segments that may hold what it
    asks for (and the snapshot's last, whose last line is checked against the chain), and finds there what the chain
    holds. A segment is checked whole, and kept for the next reader, where a lookup's filter sends it; the last, read
    at once, is checked at its last line alone."""
    reader = fresh_port(written, tmp_path, "whole")
    whole = read_log(reader, "alpha").entries
    reader.close()
    names = git("--git-dir", str(written.path), "ls-tree", "--name-only", f"{REF}:snapshot").split()
    assert sorted(n for n in names if n.endswith(".keys")) == sorted(n.replace(".jsonl", ".keys")
                                                                    for n in names if n.endswith(".jsonl"))
    ids = {n: git("--git-dir", str(written.path), "rev-parse", f"{REF}:snapshot/{n}") for n in names}
    segments = {ids[n] for n in names if n.endswith(".jsonl")}
    port = fresh_port(written, tmp_path, "lazy")
    asked: list[str] = []
    reads = port.read_typed

    def read_typed(specs: list[str]) -> list[GitObject | None]:
        asked.extend(s for s in specs if s in segments)
        return reads(specs)

    port.read_typed = read_typed  # type: ignore[method-assign,assignment]
    try:
        view = read_indexed(port, "alpha").base
        assert isinstance(view, journalindex.Snapshot)
        kept = Path(port.cache) / journalindex.SEGMENTS
        last = segment_of(written, 19)
        assert asked == [ids[last]] and not kept.exists()  # the last, one line of it checked against the chain
        build = next(e for e in whole if e.kind == "intent" and e.step == "build")
        assert view.calls_of(build.identity) == [build]
        assert {p.name for p in kept.iterdir()} == {ids[segment_of(written, build.seq)]}  # used: checked, kept
        assert view.calls_of(("never-run", "")) == [] and view.run_counts("no-such-run") == ({}, 0)
        assert len(set(asked)) <= 3  # the filters said the others hold neither (a false hit is rare)
    finally:
        port.close()


def test_a_filter_never_misses_a_key_it_holds_and_seldom_claims_one_it_does_not() -> None:
    entries = [JournalEntry(seq=i + 1, epoch=1, kind="intent", at="2026-01-01T00:00:00Z", run=f"r{i % 7}",
                            step=f"step-{i}", input_sha=f"{i:064x}", intent=None) for i in range(1000)]
    made = keys.Keys.of(entries)
    again = keys.Keys.decode(made.encode())
    assert again is not None and again.bits == made.bits
    assert all(again.may_hold(k) for e in entries for k in keys.keys_of(e))
    false = sum(again.may_hold(keys.call_key((f"other-{i}", ""))) for i in range(10_000))
    assert false < 40  # about 1 in 1,000
    for junk in (b"", b"{}", b'{"bits":"!!","k":7,"m":8,"v":1}', made.encode().replace(b'"v":1', b'"v":2'),
                 made.encode().replace(b'"k":10', b'"k":0')):
        assert keys.Keys.decode(junk) is None  # its segment is then read for every lookup


def test_the_checker_finds_a_filter_that_lacks_a_key(written: Forge) -> None:
    gd = ["--git-dir", str(written.path)]
    tip = written.tip(REF)
    snap = git(*gd, "rev-parse", f"{tip}:snapshot")
    rows = git(*gd, "ls-tree", snap).splitlines()
    name = next(r.split("\t")[1] for r in rows if r.endswith(".keys"))
    raw = json.loads(git(*gd, "show", f"{snap}:{name}"))
    raw["bits"] = base64.b64encode(bytes(len(base64.b64decode(raw["bits"])))).decode()  # says absent for every key
    empty = git(*gd, "hash-object", "-w", "--stdin", input=json.dumps(raw).encode())
    new = git(*gd, "mktree", input="".join(f"100644 blob {empty}\t{name}\n" if r.endswith(f"\t{name}") else f"{r}\n"
                                           for r in rows).encode())
    tree = git(*gd, "mktree", input=f"100644 blob {git(*gd, 'rev-parse', f'{tip}:entries.jsonl')}\tentries.jsonl\n"
                                    f"040000 tree {new}\tsnapshot\n".encode())
    git(*gd, "update-ref", REF, git(*gd, "commit-tree", tree, "-p", str(tip), "-m", "planted"), str(tip))
    assert any("lacks a key" in p for p in snapshot_problems(written.path, "alpha"))


def test_a_new_machines_first_step_fetches_its_claim_with_the_journal_once(forge: Forge, held: Claims,
                                                                            tmp_path: Path) -> None:
    """A session opened on a cache that holds neither the claim nor the journal fetches both in one shallow fetch
    (a round trip, not two), reads the claim from its tip even where the claim's chain goes deeper than that fetch,
    and a reader of the claim's custody still gets the whole chain."""
    s = session(held, "r1")
    while len(git("--git-dir", str(forge.path), "rev-list", "refs/assay/claims/alpha").split()) <= first_depth() + 2:
        s.note("each push renews the claim", sync=True)
    while s.journal.last_seq % EVERY:  # the tip made its snapshot: the journal needs no second fetch
        s.note("one entry, one commit", sync=True)
    custody = [c.sha for c in held.history("alpha") if not hasattr(c, "problem")]
    port = fresh_port(forge, tmp_path, "new-machine")
    try:
        cold = open_session(Claims(port), "alpha", "d", 1, run="r2", indexed=True)
        assert port.round_trips["fetch"] == 1, port.round_trips
        assert cold.journal.claim is not None and cold.journal.claim.sha == forge.tip("refs/assay/claims/alpha")
        assert isinstance(cold.journal.base, journalindex.Snapshot)
        cold.note("the new machine's step", sync=True)  # a push on top of a claim chain the cache holds cut short
        assert [c.sha for c in Claims(port).history("alpha")][:len(custody)] == custody
        assert invariants(forge.path, "alpha") == []
    finally:
        port.close()


def test_making_one_chain_whole_leaves_the_other_cut_chains_of_the_cache_cut(forge: Forge, held: Claims,
                                                                          tmp_path: Path) -> None:
    """Git unshallows every commit a cache holds shallow when asked for an "infinite" depth: a reader making one
    journal whole would fetch every other journal's chain below its snapshot too (a 100,000-commit one with it)."""
    held.claim("beta", "d")
    for brief in ("alpha", "beta"):
        s = open_session(held, brief, "d", 1, run="r1")
        for i in range(3 * EVERY + 2):
            s.note(f"{brief} {i}", sync=True)
    port = fresh_port(forge, tmp_path, "both")
    try:
        for brief in ("alpha", "beta"):
            assert isinstance(read_indexed(port, brief).base, journalindex.Snapshot)
        beta_cut = port.shallow_commits() & set(git("--git-dir", str(forge.path), "rev-list",
                                                    "refs/assay/journal/beta").split())
        assert beta_cut
        assert len(read_log(port, "alpha").entries) == 3 * EVERY + 2
        assert beta_cut <= port.shallow_commits()  # beta's chain still stops where it did
        assert not port.shallow_commits() & set(git("--git-dir", str(forge.path), "rev-list", REF).split())
    finally:
        port.close()


def deep_claim(held: Claims, forge: Forge) -> list[str]:
    """alpha's claim renewed past the first fetch's depth, its journal's tip the commit that made a snapshot; the
    claim's chain, newest first."""
    s = session(held, "r1")
    while len(git("--git-dir", str(forge.path), "rev-list", "refs/assay/claims/alpha").split()) <= first_depth() + 2:
        s.note("each push renews the claim", sync=True)
    while s.journal.last_seq % EVERY:
        s.note("one entry, one commit", sync=True)
    return git("--git-dir", str(forge.path), "rev-list", "refs/assay/claims/alpha").split()


def test_a_cache_that_holds_anything_never_fetches_a_claim_shallow(forge: Forge, held: Claims, tmp_path: Path) -> None:
    """The claim goes into the journal's shallow fetch only on a cache that holds nothing: one that holds an older
    claim tip with its whole chain would have that chain cut (and fetched whole again by its next reader)."""
    port = fresh_port(forge, tmp_path, "warm")
    try:
        Claims(port).history("alpha")  # the claim's chain, whole, as it is now
        chain = deep_claim(held, forge)
        open_session(Claims(port), "alpha", "d", 1, run="r2", indexed=True)
        assert not port.shallow_commits() & set(chain)
        assert [c.sha for c in Claims(port).history("alpha")] == list(reversed(chain))
    finally:
        port.close()


def test_a_retired_claims_custody_is_whole_on_the_board_of_a_machine_whose_first_step_cut_it(
        forge: Forge, held: Claims, tmp_path: Path) -> None:
    """A retired claim is reached from the retired index through a second parent, which no first-parent walk from
    that index sees cut: the board makes every custody chain it shows whole first."""
    from assay.config import open_reviews
    from assay.core.custody import release
    from assay.core.retire import retire
    from assay.observe.board import read_forge

    held.claim("beta", "d")
    release(held, "beta", "d", outcome="done", epoch=1)
    assert retire(held, ["beta"]).retired  # the retired index's chain begins: alpha's claim joins it second
    chain = deep_claim(held, forge)
    port = fresh_port(forge, tmp_path, "new-machine")
    try:
        open_session(Claims(port), "alpha", "d", 1, run="r2", indexed=True)
        assert port.shallow_commits() & set(chain)  # the first step's fetch cut the claim's chain
        release(held, "alpha", "d", outcome="done", epoch=1)
        assert retire(held, ["alpha"]).retired
        assert not git("--git-dir", str(forge.path), "for-each-ref", "refs/assay/claims/").strip()
        whole = git("--git-dir", str(forge.path), "rev-list", git("--git-dir", str(forge.path), "rev-parse",
                                                                  "refs/assay/retired-keep")).split()
        read = read_forge(port, open_reviews(port))
        custody = [c.sha for c in read.chains["alpha"] if not hasattr(c, "problem")]
        assert len(custody) == len(chain) + 1 and set(custody) <= set(whole)  # the release is the newest
    finally:
        port.close()


def test_a_cache_a_fetch_is_filling_does_not_hold_nothing(forge: Forge, tmp_path: Path) -> None:
    """A fetch into a new cache writes its pack as `tmp_pack_*` and names it at its end: meanwhile the cache is not
    a new machine's, whose first step may fetch its claim shallow (that would cut what the fetch brings)."""
    port = fresh_port(forge, tmp_path, "filling")
    try:
        port.read_typed(["0" * 40])  # the cache is made
        assert port.holds_nothing()
        arriving = Path(port.cache) / "objects" / "pack" / "tmp_pack_XYZ"
        arriving.write_bytes(b"PACK")
        assert not port.holds_nothing()
        arriving.unlink()
        main = forge.tip("refs/heads/main")
        assert main is not None
        port.ensure_objects({"refs/heads/main": main})
        assert not port.holds_nothing()
    finally:
        port.close()
