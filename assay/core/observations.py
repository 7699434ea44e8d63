"""The sweepers' record at `refs/assay/sweeper`, and its one writer: what they saw on the forge, when, and what
they reported.

Each commit's tree holds `observations.json`. Times are the sweepers' own clocks, never a desk's:
`claim_seen` is when a sweeper first saw the claim tip `claim`, so a tip still in place at a later
sweep has stood still for at least the time between. Findings are recorded by key, so each is
reported as new once, however many sweepers run.
"""

from __future__ import annotations

import json
import os
from typing import Any

from assay.core.git import ZERO, ForgeGit
from assay.core.records import FORMAT_VERSION, NOT_JSON, chain, iso_seconds, validate_brief_id
from assay.core.records.recordtype import asdict, dataclass, field
from assay.errors import RecordInvalid, UsageError

SWEEPER_REF = "refs/assay/sweeper"
OBSERVATIONS = "observations.json"


@dataclass(frozen=True)
class UnknownSeen:
    """An `outcome_unknown` entry nothing has resolved yet, and when a sweeper first saw it."""

    seq: int
    step: str
    seen: str


@dataclass(frozen=True)
class BriefSeen:
    """One brief's refs as a sweeper saw them ("" for a ref the forge lacked)."""

    claim: str
    claim_seen: str
    journal: str
    branch: str
    progress_seen: str  # when the (journal, branch) pair was first seen
    unknown: tuple[UnknownSeen, ...] = ()


@dataclass(frozen=True)
class Recorded:
    """A finding already reported: its kind, brief and when it was first recorded."""

    kind: str
    brief: str
    at: str


@dataclass
class Observations:
    at: str = ""
    briefs: dict[str, BriefSeen] = field(default_factory=dict)
    findings: dict[str, Recorded] = field(default_factory=dict)
    v: int = FORMAT_VERSION

    def encode(self) -> bytes:
        data = {"v": self.v, "at": self.at, "briefs": {b: _plain_seen(s) for b, s in sorted(self.briefs.items())},
                "findings": {k: asdict(f) for k, f in sorted(self.findings.items())}}
        return (json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _plain_seen(s: BriefSeen) -> dict[str, Any]:
    """`asdict(s)`, field by field (a sweep of 10,000 briefs writes as many)."""
    return {"claim": s.claim, "claim_seen": s.claim_seen, "journal": s.journal, "branch": s.branch,
            "progress_seen": s.progress_seen, "unknown": [{"seq": u.seq, "step": u.step, "seen": u.seen}
                                                          for u in s.unknown]}


def write_observations(git: ForgeGit, seen: Observations, tip: str | None, on_commit: bool, said: str, by: str,
                       now: float) -> None:
    """`seen` as the sweepers' new tip, by compare-and-swap on `tip`, the one read (`chain.Moved` if another
    sweeper wrote first); on it as parent if it is a commit (`on_commit`), else replacing whatever it is."""
    update = chain.commit(git, SWEEPER_REF, tip if on_commit else None, {OBSERVATIONS: seen.encode()},
                          f"assay: sweep by {by} ({os.urandom(4).hex()}): {said}", by, now)
    chain.push(git, [update._replace(expected=tip or ZERO)], "sweeper")


_SECONDS: dict[str, float] = {}  # a time's text -> its seconds: a sweep reads thousands, most of them a few sweeps'
_SECONDS_KEPT = 65536


def seconds(iso: str) -> float:
    """A time `utc_now_iso` wrote, in seconds since the epoch; ValueError if it is none."""
    try:
        return _SECONDS[iso]
    except (KeyError, TypeError):  # (TypeError: not text, which iso_seconds says)
        pass
    value = iso_seconds(iso)
    if len(_SECONDS) >= _SECONDS_KEPT:
        _SECONDS.clear()
    _SECONDS[iso] = value
    return value


def decode_observations(data: bytes | None, ref: str) -> Observations:
    """Parse observations.json; anything that is not a valid v1 record raises RecordInvalid(ref, …)."""
    if data is None:
        raise RecordInvalid(ref, f"the commit has no {OBSERVATIONS}")
    try:
        obj = json.loads(data.decode("utf-8"))
    except NOT_JSON as exc:
        raise RecordInvalid(ref, f"{OBSERVATIONS} is not JSON ({exc})") from None
    if not isinstance(obj, dict) or set(obj) != {"v", "at", "briefs", "findings"}:
        raise RecordInvalid(ref, f'{OBSERVATIONS} must be an object with exactly "v", "at", "briefs", "findings"')
    if obj["v"] != FORMAT_VERSION:
        raise RecordInvalid(ref, f"{OBSERVATIONS} has format version {obj['v']!r}; this Assay reads version "
                                 f"{FORMAT_VERSION} (upgrade Assay to read newer records)")
    try:
        _time(obj["at"])
        briefs = {_brief(b): _brief_seen(s) for b, s in _mapping(obj["briefs"]).items()}
        findings = {str(k): _recorded(f) for k, f in _mapping(obj["findings"]).items()}
    except (TypeError, ValueError, KeyError) as exc:
        raise RecordInvalid(ref, f"{OBSERVATIONS} is malformed: {exc}") from None
    return Observations(obj["at"], briefs, findings)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    return value


def _brief(name: str) -> str:
    try:
        return validate_brief_id(name)
    except UsageError:
        raise ValueError(f"{name!r} is not a brief id") from None


def _time(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a time must be a string")
    seconds(value)
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _brief_seen(obj: Any) -> BriefSeen:
    if type(obj) is dict and obj.get("unknown") == []:  # most briefs: nothing unknown, every field text
        g = obj.get
        claim, claim_seen, journal, branch, progress_seen = (g("claim"), g("claim_seen"), g("journal"), g("branch"),
                                                             g("progress_seen"))
        if type(claim) is str and type(claim_seen) is str and type(journal) is str and type(branch) is str \
                and type(progress_seen) is str and claim_seen in _SECONDS and progress_seen in _SECONDS:
            return BriefSeen(claim, claim_seen, journal, branch, progress_seen)  # (times read before: valid)
    # (the checks below say what is wrong, where anything is)
    obj = _mapping(obj)
    unknown = obj["unknown"]
    if not isinstance(unknown, list):
        raise TypeError("unknown must be a list")
    return BriefSeen(_text(obj["claim"]), _time(obj["claim_seen"]), _text(obj["journal"]), _text(obj["branch"]),
                     _time(obj["progress_seen"]), tuple(_unknown(u) for u in unknown))


def _unknown(obj: Any) -> UnknownSeen:
    obj = _mapping(obj)
    if not isinstance(obj["seq"], int) or isinstance(obj["seq"], bool):
        raise TypeError("seq must be a whole number")
    return UnknownSeen(obj["seq"], _text(obj["step"]), _time(obj["seen"]))


def _recorded(obj: Any) -> Recorded:
    obj = _mapping(obj)
    return Recorded(_text(obj["kind"]), _text(obj["brief"]), _time(obj["at"]))
