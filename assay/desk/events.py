"""`assay event`: a forge event (a GitHub Actions job's `GITHUB_EVENT_PATH`) turned into acts on briefs, and the
list of desks that now have work, for the job that runs them.

The payload is a hint, never evidence: it only says which brief to look at (the pull request's branch
`assay/<brief>`, the CI run's branch) and names the event in what is journaled. What happens is what
`signals.settle` reads on the forge. Events without a brief (a push to main, the schedule, a manual run) look
at every brief a person or CI can move (waiting, held or blocked) and at the ready ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from assay.core import signals
from assay.core.claims import Claims
from assay.core.deskspec import desks_on_main
from assay.core.forge.base import Reviews
from assay.core.records import WORK_BRANCH_PREFIX
from assay.core.records.recordtype import dataclass, field
from assay.desk.queue import read_snapshot
from assay.errors import UsageError

# the events `desk.yml` listens to, and what each asks of Assay
EVENTS = {
    "pull_request_review": "a review: requested changes, or review threads, start a new round with what was said",
    "pull_request_review_comment": "a comment in a review thread: a new round that answers it",
    "issue_comment": "a comment command on an Assay pull request: /assay retry, /assay steer TEXT",
    "pull_request": "a pull request closed: merged settles the brief, closed blocks it with the closer's words",
    "workflow_run": "a workflow finished on a brief's branch: wakes a brief waiting on checks",
    "check_suite": "a check suite finished on a brief's branch: wakes a brief waiting on checks",
    "push": "main moved (new briefs or desks): desks with ready work run",
    "schedule": "the backstop: every brief is looked at, desks with work run",
    "workflow_dispatch": "by hand: every brief is looked at; the desks named (or those with work) run",
}
MAX_PAYLOAD = 25 * 1024 * 1024  # GitHub caps a webhook payload at 25 MB


@dataclass
class EventReport:
    event: str
    cause: dict[str, str]
    briefs: list[signals.Settled] = field(default_factory=list)
    desks: list[str] = field(default_factory=list)
    ignored: str = ""  # why the event asks nothing of Assay

    def view(self) -> dict[str, Any]:
        return {"event": self.event, "cause": self.cause, "briefs": [b.view() for b in self.briefs],
                "desks": self.desks, "ignored": self.ignored}


def read_payload(path: Path) -> dict[str, Any]:
    """The event's payload (exit 2, nothing written, when it is not a JSON object or is larger than GitHub sends);
    at most `MAX_PAYLOAD` bytes and one more are read, so an endless file (`/dev/zero`) ends too."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_PAYLOAD + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the event payload {str(path)!r}: {exc.strerror}",
                         hint="on GitHub Actions pass \"$GITHUB_EVENT_PATH\"") from None
    if len(raw) > MAX_PAYLOAD:
        raise UsageError(f"the event payload {str(path)!r} is larger than GitHub's 25 MB cap on a webhook payload",
                         hint="pass the event's own payload (\"$GITHUB_EVENT_PATH\" on GitHub Actions)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise UsageError(f"the event payload {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"the event payload {str(path)!r} is not a JSON object")
    return data


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _branch_brief(ref: object) -> str | None:
    ref = str(ref or "")
    brief = ref.removeprefix(WORK_BRANCH_PREFIX)
    return brief if ref.startswith(WORK_BRANCH_PREFIX) and brief else None


def subject(event: str, payload: dict[str, Any], reviews: Reviews) -> tuple[list[str] | None, str, str]:
    """The briefs an event is about (None: all of them), the id of what it reports, and why it asks nothing of
    Assay ("" when it does)."""
    if event not in EVENTS:
        raise UsageError(f"unknown event {event!r}", hint="one of " + ", ".join(EVENTS))
    if event in ("push", "schedule", "workflow_dispatch"):
        return None, str(payload.get("after") or ""), ""
    if event == "pull_request_review":
        brief, ident = _branch_brief(_get(payload, "pull_request", "head", "ref")), _get(payload, "review", "id")
    elif event == "pull_request_review_comment":
        brief, ident = _branch_brief(_get(payload, "pull_request", "head", "ref")), _get(payload, "comment", "id")
    elif event == "pull_request":
        if payload.get("action") != "closed":
            return [], "", f"a pull request {payload.get('action')}: only a close moves a brief"
        brief, ident = _branch_brief(_get(payload, "pull_request", "head", "ref")), _get(payload, "pull_request",
                                                                                          "number")
    elif event == "issue_comment":
        if _get(payload, "issue", "pull_request") is None:
            return [], "", "a comment on an issue, not on a pull request"
        number = _get(payload, "issue", "number")
        brief = reviews.brief_of(int(number)) if isinstance(number, int) else None  # the forge says whose it is
        ident = _get(payload, "comment", "id")
    elif event == "workflow_run":
        brief, ident = _branch_brief(_get(payload, "workflow_run", "head_branch")), _get(payload, "workflow_run", "id")
    else:  # check_suite
        brief, ident = _branch_brief(_get(payload, "check_suite", "head_branch")), _get(payload, "check_suite", "id")
    if brief is None:
        return [], str(ident or ""), "not about an Assay branch (assay/<brief>)"
    return [brief], str(ident or ""), ""


def handle(claims: Claims, reviews: Reviews, event: str, payload: dict[str, Any], by: str,
           only: list[str] | None = None) -> EventReport:
    """Settle what the event is about, then list the desks with work (`only`: the desks a person named)."""
    briefs, ident, ignored = subject(event, payload, reviews)
    cause = {"event": event, "id": ident, **{k: v for k, v in (("run", os.environ.get("GITHUB_RUN_ID", "")),
                                                              ("attempt", os.environ.get("GITHUB_RUN_ATTEMPT", "")))
                                             if v}}
    report = EventReport(event, cause, ignored=ignored)
    about_all = briefs is None  # a push, the schedule, a manual run: every brief, and every ready one
    if about_all and event != "push":
        snapshot = read_snapshot(claims)
        briefs = sorted(b for b, c in snapshot.claims.items() if c.record.state in ("held", "waiting", "blocked"))
    for brief in briefs or []:
        report.briefs.append(signals.settle(claims, reviews, brief, cause, by))
    if about_all or only:
        report.desks = desks_with_work(claims, touched=None, only=only)
    else:  # only what this event moved: a duplicate delivery or a re-run starts no desk
        moved = [b.brief for b in report.briefs if b.woken or b.state == "released"]
        report.desks = desks_with_work(claims, touched=moved) if moved else []
    return report


def desks_with_work(claims: Claims, touched: list[str] | None, only: list[str] | None = None) -> list[str]:
    """Desks on main that have work: a held claim of theirs (woken, or left by a job that ended) and a ready brief
    they take, among `touched` (None: all briefs). `only` names the desks to run instead."""
    snapshot = read_snapshot(claims)
    specs, _ = desks_on_main(claims.git, snapshot.main)
    names = {s.name for s in specs}
    if only:
        unknown = sorted(set(only) - names)
        if unknown:
            raise UsageError(f"no desk named {', '.join(unknown)} on main", hint="desks are desks/<name>.yaml on main; "
                             "on main now: " + (", ".join(sorted(names)) or "none"))
        return sorted(set(only))
    out = set()
    for brief, claim in snapshot.claims.items():
        r = claim.record
        if r.state == "held" and r.desk in names and brief in snapshot.briefs and (touched is None or brief in touched):
            out.add(r.desk)
    for spec in specs:
        if any(spec.takes(b) and snapshot.ready(b) for b in snapshot.briefs.values()
               if touched is None or b.id in touched):
            out.add(spec.name)
    return sorted(out)


def lines(report: EventReport) -> list[str]:
    """What `assay event` prints."""
    head = f"{report.event}" + (f" {report.cause['id']}" if report.cause.get("id") else "")
    if report.ignored:
        return [f"{head}: nothing to do: {report.ignored}"]
    out = [f"{head}: {b.brief}: {line}" for b in report.briefs for line in b.did]
    out += [f"{head}: {b.brief}: nothing to do ({b.state or 'never claimed'})" for b in report.briefs if not b.did
            and report.cause.get("event") not in ("schedule", "workflow_dispatch")]
    out.append(f"{head}: desks with work: {', '.join(report.desks) or 'none'}")
    return out
