"""The on-forge records (format v1, docs/data-model.md): encode, decode, validate."""

from __future__ import annotations

import json
import re
import time

from assay.core.records.recordtype import MISSING, asdict, dataclass, fields, replace
from assay.errors import BriefIdInvalid, RecordInvalid

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Any

FORMAT_VERSION = 1
CLAIMS_PREFIX = "refs/assay/claims/"
JOURNAL_PREFIX = "refs/assay/journal/"
REVIEWS_PREFIX = "refs/assay/reviews/"
WIP_PREFIX = "refs/assay/wip/"  # a brief's worktree as its agent-session checkpoints recorded it (`wip.py`)
LEARNED_PREFIX = "refs/assay/learned/"  # the footprint a brief's first diff showed (`footprints.py`)
MAIN_REF = "refs/heads/main"
WORK_BRANCH_PREFIX = "assay/"  # a brief's work branch is assay/<brief>: a pull request's head on GitHub
WORK_BRANCH_REF_PREFIX = "refs/heads/" + WORK_BRANCH_PREFIX  # the work branch as a ref

STATES = ("held", "waiting", "blocked", "released", "expired", "abandoned", "done")
LIVE_STATES = frozenset({"held", "waiting", "blocked"})
TOMBSTONES = frozenset({"released", "expired", "abandoned"})
LANDING_CLAIM = "assay.landing"  # `assay land`'s claim of its own: never a brief on main (a brief id lint refuses)

_BRIEF_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def brief_id_problem(brief: str) -> str | None:
    """What is wrong with `brief` as a brief id (None when nothing is)."""
    try:
        validate_brief_id(brief)
        return None
    except BriefIdInvalid as exc:
        return exc.message


def validate_brief_id(brief: str) -> str:
    """Return `brief` if it is a safe file name and ref component, else raise BriefIdInvalid."""
    if isinstance(brief, str) and _BRIEF_ID.fullmatch(brief) and not brief.endswith((".", ".lock")) \
            and ".." not in brief:
        return brief  # (the pattern holds every rule below but these three; the rules name what is wrong)
    if not brief:
        raise BriefIdInvalid(brief, "it is empty")
    if not brief.isascii():
        raise BriefIdInvalid(brief, "it has non-ASCII characters")
    if "/" in brief or "\\" in brief:
        raise BriefIdInvalid(brief, "it contains a path separator")
    if ".." in brief:
        raise BriefIdInvalid(brief, "it contains '..'")
    if brief.endswith("."):
        raise BriefIdInvalid(brief, "it ends in '.', which git refuses in ref names")
    if brief.endswith(".lock"):
        raise BriefIdInvalid(brief, "it ends in '.lock', which git reserves")
    if len(brief) > 64:
        raise BriefIdInvalid(brief, f"it is {len(brief)} characters long; the limit is 64")
    if brief != brief.lower():
        raise BriefIdInvalid(brief, "it has upper-case letters")
    if not _BRIEF_ID.fullmatch(brief):
        raise BriefIdInvalid(brief, "it must start with a-z or 0-9 and use only a-z 0-9 . _ -")
    return brief


def brief_of_ref(ref: str, prefix: str) -> str:
    """The brief a ref such as `refs/assay/claims/<brief>` is for; RecordInvalid(ref, …) if it names none."""
    try:
        return validate_brief_id(ref.removeprefix(prefix))
    except BriefIdInvalid as exc:
        raise RecordInvalid(ref, f"not a valid brief id ({exc.problem})") from None


def check_tip(ref: str, sha: str, kind: str | None) -> None:
    """A ref Assay reads must point at a commit (`kind` is git's type of `sha`, None if it is absent)."""
    if kind is None:
        raise RecordInvalid(ref, f"its tip {sha[:10]} is not in the forge's objects")
    if kind != "commit":
        raise RecordInvalid(ref, f"points at a {kind}, not a commit")


def utc_now_iso(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(round(now, 6)))  # to the microsecond, as datetime


_ISO = re.compile(r"(\d{4})-(\d\d?)-(\d\d?)T(\d\d?):(\d\d?):(\d\d?)Z")


def parse_iso(text: str) -> datetime:
    """`utc_now_iso`'s text as a time (what strptime with its format reads, without strptime's 3 ms import)."""
    found = _ISO.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"time data {text!r} does not match format '%Y-%m-%dT%H:%M:%SZ'")
    year, month, day, hour, minute, second = map(int, found.groups())
    from datetime import UTC, datetime  # here: a command that only writes times does not load datetime

    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def iso_seconds(text: str) -> float:
    """`parse_iso(text).timestamp()`, and its errors, without loading `datetime` (a renewal's answer shows an age)."""
    found = _ISO.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise ValueError(f"time data {text!r} does not match format '%Y-%m-%dT%H:%M:%SZ'")
    year, month, day, hour, minute, second = map(int, found.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (year >= 1 and 1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month - 1] + (month == 2 and leap)
            and hour < 24 and minute < 60 and second < 60):
        return parse_iso(text).timestamp()  # out of range: datetime's own error
    y = year - (month <= 2)  # days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)
    era, yoe = divmod(y, 400)
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return float(days * 86400 + hour * 3600 + minute * 60 + second)


WAIT_CONDITIONS = ("review", "merge", "manual", "checks")  # and time:YYYY-MM-DDTHH:MM:SSZ, briefs:A,B,…


def condition_problem(on: object) -> str | None:
    """What is wrong with a wait condition (None when it is one: review, merge, manual, checks, a real UTC time or
    briefs)."""
    if not isinstance(on, str):
        return "a wait condition is a string"
    if on in WAIT_CONDITIONS:
        return None
    if on.startswith("time:"):
        try:
            parse_iso(on[5:])
            return None
        except ValueError:
            return f"{on[5:]!r} is not a real time (YYYY-MM-DDTHH:MM:SSZ, in UTC)"
    if on.startswith("briefs:"):
        names = on[7:].split(",")
        bad = next((n for n in names if brief_id_problem(n)), None)
        return None if bad is None else f"{bad!r} in {on!r} is not a brief id: {brief_id_problem(bad)}"
    return f"unknown wait condition {on!r} (review, merge, manual, checks, time:YYYY-MM-DDTHH:MM:SSZ or briefs:ID,ID…)"


@dataclass(frozen=True)
class ClaimRecord:
    """One commit of a claim chain: `claim.json` at `refs/assay/claims/<brief>`."""

    brief: str
    state: str
    epoch: int
    desk: str
    holder: str
    lease_s: int
    branch: str
    at: str
    wait: dict[str, Any] | None = None
    reason: str = ""
    v: int = FORMAT_VERSION

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def but(self, **changes: Any) -> ClaimRecord:
        return replace(self, **changes)

    def encode(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "v": int, "brief": str, "state": str, "epoch": int, "desk": str, "holder": str,
    "lease_s": int, "branch": str, "at": str, "reason": str, "wait": (dict, type(None)),
}


def load_record(data: bytes | None, ref: str, name: str,
                fields: dict[str, type | tuple[type, ...]], versions: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """A versioned JSON record (of one of `versions`) with exactly `fields`, or RecordInvalid(ref, …) saying what
    is wrong."""
    if data is None:
        raise RecordInvalid(ref, f"the commit has no {name}")
    try:
        obj = json.loads(data.decode("utf-8"))
    except NOT_JSON as exc:
        raise RecordInvalid(ref, f"{name} is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise RecordInvalid(ref, f"{name} is not a JSON object")
    version = obj.get("v")
    if version not in versions or isinstance(version, bool):
        raise RecordInvalid(ref, f"{name} has format version {version!r}; this Assay reads version "
                                 f"{' or '.join(map(str, versions))} (upgrade Assay to read newer records)")
    for key, kind in fields.items():
        if key not in obj:
            raise RecordInvalid(ref, f"{name} lacks {key!r}")
        if not isinstance(obj[key], kind) or (kind is int and isinstance(obj[key], bool)):
            raise RecordInvalid(ref, f"{name} field {key!r} has the wrong type")
    extra = set(obj) - set(fields)
    if extra:
        raise RecordInvalid(ref, f"{name} has unknown fields {sorted(extra)}")
    return obj


def decode_claim(data: bytes | None, ref: str) -> ClaimRecord:
    """Parse claim.json; anything that is not a valid v1 claim raises RecordInvalid(ref, …)."""
    obj = load_record(data, ref, "claim.json", _FIELDS)
    if obj["state"] not in STATES:
        raise RecordInvalid(ref, f"claim.json state {obj['state']!r} is not one of {', '.join(STATES)}")
    if obj["epoch"] < 1:
        raise RecordInvalid(ref, "claim.json epoch must be >= 1")
    if obj["wait"] is not None and (problem := condition_problem(obj["wait"].get("on"))):
        raise RecordInvalid(ref, f"claim.json wait: {problem}")
    expected_brief = ref.removeprefix(CLAIMS_PREFIX)
    if ref.startswith(CLAIMS_PREFIX) and obj["brief"] != expected_brief:
        raise RecordInvalid(ref, f"claim.json names brief {obj['brief']!r}, not {expected_brief!r}")
    return ClaimRecord(**obj)


def claim_ref(brief: str) -> str:
    return CLAIMS_PREFIX + validate_brief_id(brief)


# -- journal entries -----------------------------------------------------------------------

ENTRY_KINDS = ("claim", "intent", "result", "outcome_unknown", "refused", "nondeterminism", "wait", "wake",
               "verify", "checkpoint", "steer", "note")
POLICIES = ("safe", "idempotent", "unsafe")
RESULT_STATUSES = ("completed", "failed", "cancelled")
_STEP_KINDS = frozenset({"intent", "result", "outcome_unknown", "refused"})


@dataclass(frozen=True)
class JournalEntry:
    """One line of `entries.jsonl` at `refs/assay/journal/<brief>`.

    `intent` is the seq of the intent an entry resolves (result, outcome_unknown,
    refused); `data` holds kind-specific values (output, exit code, a recorded
    clock value, a note's text).
    """

    seq: int
    epoch: int
    kind: str
    at: str
    run: str = ""
    step: str | None = None
    ordinal: int | None = None
    input_sha: str | None = None
    key: str | None = None
    policy: str | None = None
    status: str | None = None
    intent: int | None = None
    data: dict[str, Any] | None = None
    v: int = FORMAT_VERSION

    def encode(self) -> str:
        # the fields as they are (`asdict` would copy `data` deeply first: most of a 100,000-entry index build)
        obj = {k: v for k in _ENTRY_FIELDS if (v := getattr(self, k)) is not None}
        return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    @property
    def identity(self) -> tuple[str, str]:
        return (self.step or "", self.input_sha or "")


_ENTRY_FIELDS = tuple(f.name for f in fields(JournalEntry))
_ENTRY_DEFAULTS = {f.name: f.default for f in fields(JournalEntry) if f.default is not MISSING}
_NEW_ENTRY = object.__new__
_ENTRY_TYPES: dict[str, type] = {
    "v": int, "seq": int, "epoch": int, "kind": str, "at": str, "run": str, "step": str, "ordinal": int,
    "input_sha": str, "key": str, "policy": str, "status": str, "intent": int, "data": dict,
}


# what json raises on text a writer controls: not JSON (and not UTF-8), a number past int's digits limit, nesting past
# the stack (a hostile desk's record is junk to report, never a traceback)
NOT_JSON = (ValueError, RecursionError)
_SCAN_JSON = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # (set by its __init__; not in the stubs)


def decode_entry(line: str, ref: str) -> JournalEntry:
    """Parse one journal line; anything that is not a valid v1 entry raises RecordInvalid(ref, …)."""
    try:
        obj, end = _SCAN_JSON(line, 0)  # what `json.loads` runs, without its checks around it (a sweep reads many)
        if end != len(line):
            raise ValueError  # (text after it, or whitespace: `json.loads` says which)
    except (StopIteration, *NOT_JSON):
        try:
            obj = json.loads(line)
        except NOT_JSON as exc:
            raise RecordInvalid(ref, f"journal line is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise RecordInvalid(ref, "journal line is not a JSON object")
    if obj.get("v") != FORMAT_VERSION:
        raise RecordInvalid(ref, f"journal entry has format version {obj.get('v')!r}; this Assay reads version "
                                 f"{FORMAT_VERSION} (upgrade Assay to read newer records)")
    for key, value in obj.items():
        if type(value) is not _ENTRY_TYPES.get(key):  # JSON gives exact types: a bool is no int here
            if key not in _ENTRY_TYPES:
                raise RecordInvalid(ref, f"journal entry has unknown field {key!r}")
            raise RecordInvalid(ref, f"journal entry field {key!r} has the wrong type")
    for key in ("seq", "epoch", "kind", "at"):
        if key not in obj:
            raise RecordInvalid(ref, f"journal entry lacks {key!r}")
    if obj["kind"] not in ENTRY_KINDS:
        raise RecordInvalid(ref, f"journal entry kind {obj['kind']!r} is not one of {', '.join(ENTRY_KINDS)}")
    if obj["kind"] in _STEP_KINDS and not {"step", "input_sha"} <= set(obj):
        raise RecordInvalid(ref, f"journal {obj['kind']} entry {obj['seq']} lacks its step identity")
    if "policy" in obj and obj["policy"] not in POLICIES:
        raise RecordInvalid(ref, f"journal entry policy {obj['policy']!r} is not one of {', '.join(POLICIES)}")
    if obj["kind"] == "result" and obj.get("status") not in RESULT_STATUSES:
        raise RecordInvalid(ref, f"journal result {obj['seq']} has status {obj.get('status')!r}")
    entry = _NEW_ENTRY(JournalEntry)  # every field checked above: filled as `JournalEntry(**obj)` would, faster
    entry.__dict__.update(_ENTRY_DEFAULTS, **obj)
    return entry


def journal_ref(brief: str) -> str:
    return JOURNAL_PREFIX + validate_brief_id(brief)


def wip_ref(brief: str) -> str:
    return WIP_PREFIX + validate_brief_id(brief)


# -- reviews (draft pull requests on forges without them) ----------------------------------

REVIEW_STATES = ("draft", "ready", "merged", "closed")
_SHA = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})?")


@dataclass(frozen=True)
class ReviewComment:
    """A comment on a review. With `thread`, a review note: the note that opens thread N is comment N (counted from
    1), optionally on `path` (and `line`); a reply in thread N names N; a desk's answer also carries `answer` (the
    key of the step that posted it, which finds it again after a lost answer)."""

    by: str
    at: str
    text: str
    thread: int = 0
    path: str = ""
    line: int = 0
    answer: str = ""

    def view(self) -> dict[str, Any]:
        """As review.json holds it: the optional keys only when set."""
        return {k: v for k, v in (("at", self.at), ("by", self.by), ("text", self.text), ("thread", self.thread),
                                  ("path", self.path), ("line", self.line), ("answer", self.answer))
                if k in _COMMENT_FIELDS or v}


@dataclass(frozen=True)
class ReviewRecord:
    """One commit of a review chain: `review.json` at `refs/assay/reviews/<brief>`.

    `head` is the branch tip last recorded ("" if unknown); `merged_commit` is
    the merge commit on main once merged ("" before).
    """

    brief: str
    branch: str
    title: str
    state: str
    opened_at: str
    at: str
    base: str = "main"
    head: str = ""
    merged_commit: str = ""
    approvals: tuple[str, ...] = ()
    comments: tuple[ReviewComment, ...] = ()
    v: int = FORMAT_VERSION

    def but(self, **changes: Any) -> ReviewRecord:
        return replace(self, **changes)

    def encode(self) -> bytes:
        notes = any(c.thread for c in self.comments)  # version 2: a record that holds review notes
        record = {**asdict(self), "comments": [c.view() for c in self.comments], "v": NOTES_VERSION if notes else 1}
        return (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


_REVIEW_FIELDS: dict[str, type | tuple[type, ...]] = {
    "v": int, "brief": str, "branch": str, "title": str, "state": str, "base": str, "head": str,
    "merged_commit": str, "approvals": list, "comments": list, "opened_at": str, "at": str,
}
_COMMENT_FIELDS = ("at", "by", "text")
_NOTE_FIELDS: dict[str, type] = {"thread": int, "path": str, "line": int, "answer": str}  # optional, in v2
NOTES_VERSION = 2  # review.json with review notes; without any, a record stays version 1


def decode_review(data: bytes | None, ref: str) -> ReviewRecord:
    """Parse review.json; anything that is not a valid v1 review raises RecordInvalid(ref, …)."""
    obj = load_record(data, ref, "review.json", _REVIEW_FIELDS, (1, NOTES_VERSION))
    if obj["state"] not in REVIEW_STATES:
        raise RecordInvalid(ref, f"review.json state {obj['state']!r} is not one of {', '.join(REVIEW_STATES)}")
    for key in ("head", "merged_commit"):
        if not _SHA.fullmatch(obj[key]):
            raise RecordInvalid(ref, f"review.json field {key!r} is not a commit id")
    if obj["state"] == "merged" and not obj["merged_commit"]:
        raise RecordInvalid(ref, "review.json is merged but names no merged_commit")
    if not obj["branch"] or not obj["base"]:
        raise RecordInvalid(ref, "review.json has an empty branch or base")
    if not all(isinstance(name, str) for name in obj["approvals"]):
        raise RecordInvalid(ref, "review.json approvals must be names (strings)")
    comments = [_decode_comment(c, ref, n) for n, c in enumerate(obj["comments"], 1)]
    if (obj["v"] == NOTES_VERSION) != any(c.thread for c in comments):
        raise RecordInvalid(ref, 'review.json comments must be exactly "by", "at" and "text" in version 1; version '
                                 f'{NOTES_VERSION} is a review with review notes')
    openers = {c.thread for n, c in enumerate(comments, 1) if c.thread == n}
    if any(c.thread and c.thread not in openers for c in comments):
        raise RecordInvalid(ref, "review.json has a reply in a thread that no note opens")
    expected_brief = ref.removeprefix(REVIEWS_PREFIX)
    if ref.startswith(REVIEWS_PREFIX) and obj["brief"] != expected_brief:
        raise RecordInvalid(ref, f"review.json names brief {obj['brief']!r}, not {expected_brief!r}")
    return ReviewRecord(**{**obj, "approvals": tuple(obj["approvals"]), "comments": tuple(comments)})


def _decode_comment(obj: object, ref: str, n: int) -> ReviewComment:
    if not isinstance(obj, dict) or not set(_COMMENT_FIELDS) <= set(obj) \
            or not set(obj) <= {*_COMMENT_FIELDS, *_NOTE_FIELDS}:
        raise RecordInvalid(ref, 'review.json comments must be objects with "by", "at" and "text", and optionally '
                                 '"thread", "path", "line" and "answer"')
    if not all(isinstance(obj[k], str) for k in _COMMENT_FIELDS):
        raise RecordInvalid(ref, "review.json comment fields must be strings")
    extra = {k: obj[k] for k in _NOTE_FIELDS if k in obj}
    if any(not isinstance(v, _NOTE_FIELDS[k]) or isinstance(v, bool) for k, v in extra.items()):
        raise RecordInvalid(ref, "review.json comment: thread and line must be integers, path and answer strings")
    thread = int(extra.get("thread", 0))
    if not 0 <= thread <= n or int(extra.get("line", 0)) < 0 or (not thread and extra) \
            or ((extra.get("path") or extra.get("line")) and thread != n) or (extra.get("answer") and thread == n):
        raise RecordInvalid(ref, f"review.json comment {n}: a note opens thread {n} (with its path and line) or "
                                 "replies in an earlier thread (an answer only replies)")
    return ReviewComment(by=obj["by"], at=obj["at"], text=obj["text"], **extra)


def review_ref(brief: str) -> str:
    return REVIEWS_PREFIX + validate_brief_id(brief)


def human_age(seconds: int) -> str:
    """An age in the largest unit that keeps it a whole number worth reading: 90s, 12m, 5h, 3d."""
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"
