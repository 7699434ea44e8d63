"""Brief ids and claim records: the v1 format, and junk that must never crash a reader."""

from __future__ import annotations

import json

import pytest

from assay.core.records import ClaimRecord, JournalEntry, decode_claim, validate_brief_id
from assay.errors import BriefIdInvalid, RecordInvalid

GOOD_IDS = ["a", "fix-login", "v1.2_patch", "0day", "x" * 64, "a.b-c_d"]
BAD_IDS = {
    "": "empty",
    "../etc": "path separator",
    "a/b": "path separator",
    "a\\b": "path separator",
    "a..b": "'..'",
    "main.lock": ".lock",
    "trailing.": "ends in '.'",
    "Fix-Login": "upper-case",
    "x" * 65: "65 characters",
    "café": "non-ASCII",
    "-leading": "start with",
    ".hidden": "start with",
    "sp ace": "only a-z",
    "semi;colon": "only a-z",
}


@pytest.mark.parametrize("brief", GOOD_IDS)
def test_valid_brief_ids_pass(brief: str) -> None:
    assert validate_brief_id(brief) == brief


@pytest.mark.parametrize(("brief", "problem"), BAD_IDS.items())
def test_invalid_brief_ids_are_refused_with_the_reason(brief: str, problem: str) -> None:
    with pytest.raises(BriefIdInvalid) as info:
        validate_brief_id(brief)
    assert problem in info.value.message
    assert info.value.code == 2


def record(**changes: object) -> ClaimRecord:
    base = ClaimRecord(brief="fix-login", state="held", epoch=3, desk="builder", holder="builder/h/1/ab",
                       lease_s=600, branch="assay/fix-login", at="2026-11-29T07:00:00Z")
    return base.but(**changes)


def test_claim_record_round_trips_with_sorted_keys() -> None:
    rec = record(wait={"on": "review"}, reason="x")
    data = rec.encode()
    assert list(json.loads(data)) == sorted(json.loads(data))
    assert decode_claim(data, "refs/assay/claims/fix-login") == rec


def test_encoding_matches_the_documented_example() -> None:
    expected = ('{"at": "2026-11-29T07:00:00Z", "branch": "assay/fix-login", "brief": "fix-login", '
                '"desk": "builder", "epoch": 3, "holder": "builder/h/1/ab", "lease_s": 600, "reason": "", '
                '"state": "held", "v": 1, "wait": null}\n')
    assert record().encode().decode() == expected


def good() -> dict[str, object]:
    data: dict[str, object] = json.loads(record().encode())
    return data


JUNK: dict[str, tuple[bytes | None, str]] = {
    "missing file": (None, "no claim.json"),
    "not json": (b"{nope", "not JSON"),
    "not utf8": (b"\xff\xfe", "not JSON"),
    "a list": (b"[1, 2]", "not a JSON object"),
    "future version": (json.dumps({**good(), "v": 2}).encode(), "format version 2"),
    "no version": (json.dumps({k: v for k, v in good().items() if k != "v"}).encode(), "format version None"),
    "missing field": (json.dumps({k: v for k, v in good().items() if k != "holder"}).encode(), "lacks 'holder'"),
    "wrong type": (json.dumps({**good(), "epoch": "3"}).encode(), "'epoch' has the wrong type"),
    "bool epoch": (json.dumps({**good(), "epoch": True}).encode(), "'epoch' has the wrong type"),
    "unknown state": (json.dumps({**good(), "state": "stolen"}).encode(), "state 'stolen'"),
    "extra field": (json.dumps({**good(), "owner": "x"}).encode(), "unknown fields"),
    "zero epoch": (json.dumps({**good(), "epoch": 0}).encode(), "epoch must be >= 1"),
    "other brief": (json.dumps({**good(), "brief": "other"}).encode(), "names brief 'other'"),
}


@pytest.mark.parametrize("case", JUNK)
def test_junk_records_raise_record_invalid_naming_the_ref(case: str) -> None:
    data, problem = JUNK[case]
    with pytest.raises(RecordInvalid) as info:
        decode_claim(data, "refs/assay/claims/fix-login")
    assert info.value.ref == "refs/assay/claims/fix-login"
    assert problem in info.value.problem


def test_a_journal_entry_encodes_every_field_it_has_and_nothing_else() -> None:
    """`JournalEntry.encode` writes the set fields, nested data as it is, keys sorted, compact."""
    from assay.core.records.recordtype import asdict

    entry = JournalEntry(seq=3, epoch=2, kind="result", at="2026-01-01T00:00:00Z", run="r", step="s", ordinal=0,
                         input_sha="ab", key="k", policy="safe", status="completed", intent=2,
                         data={"output": {"b": [1, {"c": "ü"}], "a": None}})
    expected = {k: v for k, v in asdict(entry).items() if v is not None}
    assert json.loads(entry.encode()) == expected
    assert entry.encode() == json.dumps(expected, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    bare = JournalEntry(seq=1, epoch=1, kind="note", at="2026-01-01T00:00:00Z")
    assert set(json.loads(bare.encode())) == {"seq", "epoch", "kind", "at", "run", "v"}


def _refused_by_the_rules(brief: str) -> bool:
    """The brief-id rules as `docs` state them, one by one, without the pattern that checks most of them at once."""
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789._-")
    return (not brief or not brief.isascii() or "/" in brief or "\\" in brief or ".." in brief
            or brief.endswith((".", ".lock")) or len(brief) > 64 or brief != brief.lower()
            or not set(brief) <= allowed or brief[0] in "._-")


def test_a_brief_id_is_taken_exactly_when_no_rule_refuses_it() -> None:
    """Most ids are taken by one pattern and three rules before the rules that name a problem run: the same ids."""
    import random

    rng = random.Random(7)
    pieces = ["a", "z", "0", "9", ".", "..", "-", "_", ".lock", "A", "/", "\\", "é", " ", "\n", "x" * 30]
    tried = [*GOOD_IDS, *BAD_IDS, "a.lock", "a.locks", "lock", "a-", "a_", "9.", "a\n", "\na", "x" * 63 + ".",
             *("".join(rng.choices(pieces, k=rng.randint(1, 6))) for _ in range(3000))]
    for brief in tried:
        try:
            validate_brief_id(brief)
            taken = True
        except BriefIdInvalid:
            taken = False
        assert taken != _refused_by_the_rules(brief), brief


def test_a_journal_line_is_read_as_json_loads_reads_it() -> None:
    """Lines are parsed by json's scanner without `json.loads`'s wrapping: whitespace around an entry is still taken,
    and text after it, or no value at all, is refused in json's own words."""
    from assay.core.records import decode_entry

    entry = JournalEntry(seq=1, epoch=1, kind="note", at="2026-01-01T00:00:00Z", run="r", data={"t": "ü\\n"})
    line = entry.encode()
    assert decode_entry(line, "r") == entry == decode_entry(f"  {line}\t", "r")
    for bad in (f"{line} x", f"{line}{line}", "", "   ", f"[{line}]", line[:-1], "NaN", line.replace("{", "{ ,", 1)):
        with pytest.raises(RecordInvalid) as info:
            decode_entry(bad, "refs/assay/journal/r")
        try:
            json.loads(bad)
            said = "journal line is not a JSON object"
        except json.JSONDecodeError as exc:
            said = f"journal line is not JSON ({exc})"
        assert info.value.problem == said, bad


HOSTILE_JSON = {"deep": "[" * 100_000, "long number": '{"v": ' + "9" * 5000 + "}", "not utf-8": "\udcff"}


@pytest.mark.parametrize("case", HOSTILE_JSON)
def test_json_no_reader_can_take_is_junk_named_not_a_crash(case: str) -> None:
    """Text a hostile writer controls, which json cannot turn into values (nesting past the stack, a number past
    int's digits limit, bytes that are no UTF-8), is junk in every record the forge holds."""
    from assay.core.observations import decode_observations
    from assay.core.records import decode_entry

    text = HOSTILE_JSON[case]
    data = text.encode("utf-8", "surrogateescape")
    with pytest.raises(RecordInvalid, match="is not JSON"):
        decode_claim(data, "refs/assay/claims/fix-login")
    with pytest.raises(RecordInvalid, match="observations.json is not JSON"):
        decode_observations(data, "refs/assay/sweeper")
    if case != "not utf-8":  # (a journal's lines are text already: its blob's bytes are checked as UTF-8 first)
        with pytest.raises(RecordInvalid, match="journal line is not JSON"):
            decode_entry(text, "refs/assay/journal/fix-login")
