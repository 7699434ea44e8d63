"""The sweepers' observations record: what it writes is what the record's fields say, its times are read as the
sweeper wrote them, and junk in it is a problem named, never a crash."""

from __future__ import annotations

import json

import pytest

from assay.core import observations
from assay.core.observations import BriefSeen, Observations, Recorded, UnknownSeen, decode_observations, seconds
from assay.core.records import parse_iso, utc_now_iso
from assay.core.records.recordtype import asdict
from assay.errors import RecordInvalid

REF = "refs/assay/sweeper"


def sample() -> Observations:
    return Observations("2026-03-01T00:00:00Z", {
        "a": BriefSeen("c1", "2026-02-28T23:59:59Z", "j1", "", "2024-02-29T12:00:00Z"),
        "b": BriefSeen("", "2026-03-01T00:00:00Z", "", "b1", "2026-03-01T00:00:00Z",
                       (UnknownSeen(4, "deploy", "2026-02-01T00:00:00Z"), UnknownSeen(9, "", "2026-02-02T00:00:00Z"))),
    }, {"lease:a:c1": Recorded("lease", "a", "2026-03-01T00:00:00Z")})


def test_observations_are_written_field_by_field_as_their_records_say() -> None:
    seen = sample()
    data = json.loads(seen.encode())
    assert data["briefs"] == {b: asdict(s) | {"unknown": [asdict(u) for u in s.unknown]}
                              for b, s in seen.briefs.items()}
    assert data["findings"] == {k: asdict(f) for k, f in seen.findings.items()}
    assert decode_observations(seen.encode(), REF) == seen


def test_a_time_is_read_as_the_sweeper_wrote_it_and_junk_time_is_a_problem() -> None:
    for stamp in (0.0, 951782400.0, 1709208000.0, 1767225599.0, 4102444800.0):  # 2000-02-29, 2024-02-29, ...
        text = utc_now_iso(stamp)
        assert seconds(text) == parse_iso(text).timestamp() == stamp
        assert seconds(text) == stamp  # again, as remembered
    for junk in ("2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01 00:00:00", "", "2026-01-01T24:00:00Z"):
        with pytest.raises(ValueError):
            seconds(junk)
        data = json.loads(sample().encode())
        data["briefs"]["a"]["claim_seen"] = junk
        with pytest.raises(RecordInvalid, match="observations.json is malformed"):
            decode_observations(json.dumps(data).encode(), REF)
    data = json.loads(sample().encode())
    data["briefs"]["a"]["progress_seen"] = 5
    with pytest.raises(RecordInvalid, match="a time must be a string"):
        decode_observations(json.dumps(data).encode(), REF)


def test_the_times_remembered_never_outgrow_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observations, "_SECONDS", {})
    monkeypatch.setattr(observations, "_SECONDS_KEPT", 10)
    for i in range(25):
        assert seconds(utc_now_iso(1_700_000_000 + i)) == 1_700_000_000 + i
    assert 0 < len(observations._SECONDS) <= 10
