"""The journal index in the forge's cache: a session asks it for what a step needs, and it is only a hint.

Journals are built with `git fast-import`; steps run through the real CLI or the Python API on real
forges, and what they decide is checked against a session that decodes the whole journal.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.journal import KEEP_AFTER, read_indexed, read_log
from assay.core.journal import index as journalindex
from assay.core.records import JournalEntry
from assay.core.steps import input_sha, open_session
from assay.errors import Fenced
from tests.conftest import Forge, assay
from tests.helpers.journals import append
from tests.journal_check import entries, invariants

AT = "2026-01-01T00:00:00Z"
REF = "refs/assay/journal/alpha"
CTX = {"ASSAY_BRIEF": "alpha", "ASSAY_DESK": "d", "ASSAY_EPOCH": "1"}


def step_run(forge: Forge, name: str, run: str, *cmd: str) -> tuple[int, str, str]:
    done = assay("step", "run", "--policy", "safe", "--name", name, "--", *(cmd or ("echo", f"ran {name}")),
                 env={**CTX, "ASSAY_FORGE": forge.url, "ASSAY_RUN": run})
    return done.code, done.out, done.err


def completed(first: int, name: str, run: str, tail: str) -> list[JournalEntry]:
    """An intent and its completed result, as `assay step run --name NAME -- echo ran NAME` writes them."""
    ids: dict[str, Any] = {"epoch": 1, "at": AT, "run": run, "step": name, "ordinal": 0,
                           "input_sha": input_sha({"argv": ["echo", f"ran {name}"]}), "key": f"alpha/1/{name}/0",
                           "policy": "safe"}
    return [JournalEntry(seq=first, kind="intent", **ids),
            JournalEntry(seq=first + 1, kind="result", status="completed", intent=first,
                         data={"output": {"exit_code": 0, "duration_ms": 1, "tail": tail}}, **ids)]


def steps(first: int, count: int, run: str = "old") -> list[JournalEntry]:
    out: list[JournalEntry] = []
    for i in range(count):
        out += completed(first + 2 * i, f"s{first + 2 * i}", run, f"recorded s{first + 2 * i}\n")
    return out


def index_file(brief: str = "alpha") -> Path:
    found = list(Path(os.environ["ASSAY_CACHE_DIR"]).glob(f"*/{journalindex.FOLDER}/{brief}.sqlite"))
    assert len(found) == 1, found
    return found[0]


def index_tip(brief: str = "alpha") -> str:
    with sqlite3.connect(index_file(brief)) as conn:
        return str(conn.execute("SELECT v FROM meta WHERE k = 'tip'").fetchone()[0])


@pytest.fixture
def big(forge: Forge, claims: Claims) -> Forge:
    """alpha held by desk d at epoch 1, with a journal of KEEP_AFTER + 1 completed steps (one commit each entry)."""
    claims.claim("alpha", "d")
    append(forge, steps(1, KEEP_AFTER + 1))
    return forge


def test_a_step_run_replays_from_the_index_and_reads_what_a_concurrent_writer_added(big: Forge) -> None:
    before = big.tip(REF)
    code, out, err = step_run(big, "s5", "again")  # the first read builds the index
    assert (code, out) == (0, "recorded s5\n") and "not run again" in err
    assert index_tip() == before  # the journal as read, before this run's call note
    last = len(entries(big.path, "alpha"))
    assert last == 2 * (KEEP_AFTER + 1) + 1  # the steps, and the call note of the run above
    append(big, [*completed(last + 1, "late", "other", "recorded late\n")])  # after the index was kept
    port = ForgeGit(big.url)
    try:
        read = read_indexed(port, "alpha")
        assert read.base is not None and read.tail.decoded == 2 + 1  # the writer's two, and the call note above
        assert [e.seq for e in read.tail.entries] == [last, last + 1, last + 2]
    finally:
        port.close()
    code, out, err = step_run(big, "late", "again-2")
    assert (code, out) == (0, "recorded late\n") and "not run again" in err  # read from after the index
    code, out, _ = step_run(big, "new", "again-2")
    assert (code, out) == (0, "ran new\n")
    assert index_tip() == before  # a few commits behind: decoded in memory, the index left as it was
    assert invariants(big.path, "alpha") == []


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other brief", "last row changed", "empty"])
def test_a_damaged_or_foreign_index_is_ignored_and_built_again(big: Forge, damage: str) -> None:
    built = big.tip(REF)
    assert step_run(big, "s3", "first")[0] == 0
    assert index_tip() == built
    path = index_file()
    if damage == "garbage":
        path.write_bytes(b"not a database at all" * 100)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:3000])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        with sqlite3.connect(path) as conn:
            if damage == "other brief":
                conn.execute("UPDATE meta SET v = 'beta' WHERE k = 'brief'")
            else:  # rows that do not end like the chain's tip commit: an index of some other journal
                conn.execute("UPDATE entries SET body = replace(body, 'recorded', 'forged') WHERE seq = "
                             "(SELECT max(seq) FROM entries)")
    last = 2 * (KEEP_AFTER + 1) - 1  # the last step's intent
    code, out, err = step_run(big, f"s{last}", "second")
    assert (code, out) == (0, f"recorded s{last}\n"), err
    assert index_tip() != built  # built again, up to the journal as the second run read it
    with sqlite3.connect(index_file()) as conn:
        assert conn.execute("SELECT v FROM meta WHERE k = 'brief'").fetchone()[0] == "alpha"
        body = conn.execute("SELECT body FROM entries WHERE seq = ?", (last + 1,)).fetchone()[0]
    assert "forged" not in body
    assert invariants(big.path, "alpha") == []


def test_an_index_of_a_rewritten_chain_is_off_the_chain_and_built_again(big: Forge) -> None:
    assert step_run(big, "s3", "first")[0] == 0
    old = index_tip()
    append(big, [JournalEntry(seq=1, epoch=1, kind="note", at=AT, run="x", data={"text": "start"}),
                 *steps(2, KEEP_AFTER, run="new")], new=True)  # same seqs, other steps at them
    code, out, _ = step_run(big, "s3", "second")  # s3 is not in the new chain (its steps start at s2, even)
    assert (code, out) == (0, "ran s3\n")
    code, out, _ = step_run(big, "s4", "second")
    assert (code, out) == (0, "recorded s4\n")
    assert index_tip() != old
    assert invariants(big.path, "alpha") == []


def test_an_index_ahead_of_the_reader_answers_only_up_to_the_readers_tip(big: Forge) -> None:
    reader_tip = big.tip(REF)
    assert reader_tip
    append(big, steps(2 * (KEEP_AFTER + 1) + 1, KEEP_AFTER))  # enough for the next read to extend the index
    port = ForgeGit(big.url)
    try:
        ahead = read_indexed(port, "alpha")
        assert ahead.base is not None and ahead.base.last_seq == 4 * KEEP_AFTER + 2 and ahead.tail.entries == []
        behind = read_indexed(port, "alpha", reader_tip)  # a process that read the forge before that writer
        assert behind.base is not None and behind.base.last_seq == 2 * KEEP_AFTER + 2
        late = f"s{2 * KEEP_AFTER + 3}"
        assert behind.base.calls_of((late, input_sha({"argv": ["echo", f"ran {late}"]}))) == []
        assert ahead.base.calls_of((late, input_sha({"argv": ["echo", f"ran {late}"]})))[0].seq == 2 * KEEP_AFTER + 3
        assert behind.base.totals() == (0, 0) and behind.base.open_intents() == []
        assert behind.base.commit_of(2 * KEEP_AFTER + 2) == reader_tip
    finally:
        port.close()


# -- the indexed session decides as the session that decodes everything -----------------------------

NAMES = {"build": "safe", "deploy": "unsafe", "notify": "idempotent"}
INPUTS = [{"v": 1}, {"v": 2}]
RUNS = ["r1", "r2", "r3"]


def random_journal(rng: random.Random, count: int) -> list[JournalEntry]:
    """Entries of the kinds a session reads, at random: calls, resolutions, refusals, values and notes."""
    out: list[JournalEntry] = [JournalEntry(seq=1, epoch=1, kind="claim", at=AT, run="person:d",
                                            data={"action": "claim"})]
    intents: list[JournalEntry] = []
    while len(out) < count:
        seq, run = len(out) + 1, rng.choice(RUNS)
        name = rng.choice(list(NAMES))
        sha = input_sha(rng.choice(INPUTS))
        ids: dict[str, Any] = {"epoch": 1, "at": AT, "run": run, "step": name, "input_sha": sha,
                               "ordinal": rng.randrange(3), "policy": NAMES[name], "key": f"alpha/1/{name}/{seq}"}
        roll = rng.random()
        if roll < 0.3 or not intents:
            entry = JournalEntry(seq=seq, kind="intent", **ids)
            intents.append(entry)
        elif roll < 0.55:
            intent = rng.choice(intents)
            ids.update(step=intent.step, input_sha=intent.input_sha, ordinal=intent.ordinal, policy=intent.policy)
            status = rng.choice(["completed", "completed", "failed", "cancelled"])
            outcomes: dict[str, dict[str, Any]] = {"completed": {"output": {"n": seq}}, "failed": {"error": "E: x"}}
            data = outcomes.get(status)
            entry = JournalEntry(seq=seq, kind="result", status=status, intent=intent.seq, data=data, **ids)
        elif roll < 0.62:
            intent = rng.choice(intents)
            ids.update(step=intent.step, input_sha=intent.input_sha, ordinal=intent.ordinal, policy=intent.policy)
            kind = rng.choice(["outcome_unknown", "refused"])
            entry = JournalEntry(seq=seq, kind=kind, intent=intent.seq, data={"reason": "interrupted"}, **ids)
        elif roll < 0.75:
            value: dict[str, Any] = rng.choice([{"name": "now", "arg": None, "value": 1.5},
                                                {"name": "uuid", "arg": None, "value": f"u{seq}"}])
            entry = JournalEntry(seq=seq, epoch=1, kind="nondeterminism", at=AT, run=run, data=value)
        elif roll < 0.85:
            entry = JournalEntry(seq=seq, epoch=1, kind="note", at=AT, run=run,
                                 data={"run": rng.choice(["start", "start", "end"])})
        elif roll < 0.95:
            entry = JournalEntry(seq=seq, kind="note", data={"call": "replay", "of": 1},
                                 **{k: v for k, v in ids.items() if k not in ("policy", "key")})
        else:
            entry = JournalEntry(seq=seq, epoch=1, kind="note", at=AT, run=run, data={"replay": "value", "of": 1})
        out.append(entry)
    return out


def probe(claims: Claims, run: str, rng: random.Random, indexed: bool) -> list[Any]:
    """A run's calls, in an order drawn from `rng`; what each returned or raised."""
    outcomes: list[Any] = []
    try:
        session = open_session(claims, "alpha", "d", 1, run=run, max_attempts=4, call_notes=True, indexed=indexed)
    except Fenced as exc:  # an earlier probe blocked the brief
        return [str(exc)]
    assert (session.journal.base is not None) == indexed
    for _ in range(8):
        name, value = rng.choice(list(NAMES)), rng.choice(INPUTS)
        try:
            if rng.random() < 0.2:
                outcomes.append(("value", session.uuid() if rng.random() < 0.5 else session.now()))
            elif rng.random() < 0.1:
                session.begin_run()
                outcomes.append("began")
            else:
                outcomes.append(("step", session.step(name, lambda key: {"key": key}, input=value,
                                                     policy=NAMES[name])))
            session.flush()
        except Exception as exc:  # noqa: BLE001 -- what was raised is the decision being compared
            session.journal.pending.clear()
            outcomes.append((type(exc).__name__, str(exc)))
            if type(exc).__name__ in ("ReplayMismatch", "NeedsPerson", "Fenced"):
                break
    return outcomes


def written(forge: Forge, after: int) -> list[dict[str, Any]]:
    port = ForgeGit(forge.url, forge.path.parent / "reader-cache")
    try:
        return [{k: v for k, v in e.__dict__.items() if k != "at"} for e in read_log(port, "alpha").entries[after:]]
    finally:
        port.close()


@pytest.mark.parametrize("seed", range(6))
def test_an_indexed_session_decides_as_a_session_that_reads_every_entry(tmp_path: Path, forge: Forge,
                                                                         claims: Claims, seed: int) -> None:
    rng = random.Random(seed)
    claims.claim("alpha", "d")
    journal = random_journal(rng, KEEP_AFTER + rng.randrange(10, 120))
    split = rng.randrange(KEEP_AFTER, len(journal) + 1)
    append(forge, journal[:split])
    port = ForgeGit(forge.url)  # the indexed side's cache: the index kept at `split`, the rest after it
    try:
        assert read_indexed(port, "alpha").base is not None
    finally:
        port.close()
    append(forge, journal[split:])
    other = Forge(tmp_path / "copy.git", forge.seed)
    shutil.copytree(forge.path, other.path)
    copy_claims = Claims(ForgeGit(other.url))
    try:
        for run in [*rng.sample(RUNS, 2), "fresh"]:
            probe_seed = rng.randrange(1 << 30)
            indexed = probe(claims, run, random.Random(probe_seed), indexed=True)
            full = probe(copy_claims, run, random.Random(probe_seed), indexed=False)
            assert indexed == full, (seed, run)
    finally:
        copy_claims.git.close()
    assert written(forge, len(journal)) == written(other, len(journal))
