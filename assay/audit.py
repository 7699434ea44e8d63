"""The audit of one brief: its claim chain, journal, work branch and review merged into one timeline,
then checked against each other. An agent's account is not evidence; the forge's refs are.

The checks and what each proves are the table in docs/architecture.md (Audits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from assay import retired
from assay.briefs import check_brief
from assay.chain import InvalidRecord
from assay.claims import Claim, Claims
from assay.errors import AssayError, RecordInvalid, UsageError
from assay.forge.base import Reviews
from assay.git import ForgeGit
from assay.journal import JournalLog, read_kept
from assay.records import (
    CLAIMS_PREFIX,
    MAIN_REF,
    TOMBSTONES,
    JournalEntry,
    ReviewRecord,
    decode_review,
    review_ref,
    validate_brief_id,
)
from assay.steps import input_sha

CHECKS = ("branch-epochs", "unsafe-once", "fenced-writes", "verify-evidence", "seq-epochs", "one-holder")


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    reason: str


@dataclass(frozen=True)
class Event:
    """One line of the timeline: where it comes from, the writer's clock, and what it says."""

    at: str
    source: str  # claim | journal | branch | review
    what: str
    epoch: int | None = None
    ref: str = ""


@dataclass(frozen=True)
class BranchCommit:
    sha: str
    subject: str
    brief: str | None
    epoch: int | None
    at: str


@dataclass
class History:
    """What the forge holds about one brief, oldest first."""

    brief: str
    claims: list[Claim]
    journal: list[JournalEntry]
    branch: list[BranchCommit]
    reviews: list[tuple[str, ReviewRecord]]  # (commit, record)
    rows_on_main: list[list[tuple[str, str]]]  # main's (row id, command) lists at the commits the brief ran from
    pull: dict[str, Any] | None = None  # on GitHub: the pull request's state, statuses and events
    problems: list[str] = field(default_factory=list)  # records that did not read


@dataclass(frozen=True)
class Audit:
    brief: str
    timeline: list[Event]
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def view(self) -> dict[str, Any]:
        return {"brief": self.brief, "passed": self.passed, "checks": [asdict(c) for c in self.checks],
                "timeline": [asdict(e) for e in self.timeline]}


# -- reading ----------------------------------------------------------------------------------------


def read_history(git: ForgeGit, claims: Claims, reviews: Reviews, brief: str) -> History:
    """Everything the forge holds about `brief` (also a retired one); UsageError if it holds nothing."""
    validate_brief_id(brief)
    problems: list[str] = []
    chain = claims.history(brief)
    good = [c for c in chain if isinstance(c, Claim)]
    problems += [f"{c.ref} at {c.sha[:10]}: {c.problem}" for c in chain if isinstance(c, InvalidRecord)]
    try:
        log = read_kept(git, brief)
    except RecordInvalid as exc:
        problems.append(exc.message)
        log = JournalLog([], {}, None)
    if not chain and not log.entries:
        raise UsageError(f"no brief {brief!r} on this forge: it has no claim chain and no journal",
                         hint="list briefs with `assay claims`")
    base = next((str(e.data["at_commit"]) for e in log.entries
                 if e.kind == "note" and e.data and e.data.get("branch") == "created" and e.data.get("at_commit")),
                None)
    branch = _branch_commits(git, brief, base)
    review_chain = _review_chain(git, brief) if reviews.refs_backed else []
    pull = None if reviews.refs_backed else _pull_history(reviews, brief)
    mains = [base] if base else []
    merged = next((r.merged_commit for _, r in review_chain if r.merged_commit), "")
    if merged:
        mains.append(f"{merged}^1")
    if pull and pull.get("merge_commit") and pull.get("merged"):
        mains.append(f"{pull['merge_commit']}^1")
    if not mains:
        mains.append(MAIN_REF)
    return History(brief, good, log.entries, branch, review_chain, _rows_on_main(git, brief, mains), pull, problems)


def _branch_commits(git: ForgeGit, brief: str, base: str | None) -> list[BranchCommit]:
    """The work branch's own commits (after `base`, the main commit it was created at), oldest first."""
    ref = f"refs/heads/assay/{brief}"
    tip = retired.tip_of(git, ref)
    if not tip:
        return []
    git.ensure_objects({ref: tip})
    if base is None or not git.read_objects([base])[0]:
        main = git.ls_remote(MAIN_REF).get(MAIN_REF)
        base = main if main and git.read_objects([main])[0] and not git.is_ancestor(tip, main) else None
    shas = list(reversed(git.rev_list(tip, since=base)))
    return [_branch_commit(sha, data) for sha, data in zip(shas, git.read_objects(shas), strict=True)]


def _branch_commit(sha: str, data: bytes | None) -> BranchCommit:
    text = (data or b"").decode("utf-8", "replace")
    header, _, message = text.partition("\n\n")
    at = ""
    for line in header.splitlines():
        if line.startswith("committer "):
            stamp = line.rsplit(" ", 2)[-2]
            at = _iso(int(stamp)) if stamp.isdigit() else ""
    trailers: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("Assay-Brief", "Assay-Epoch"):
            trailers[key] = value.strip()
    epoch = trailers.get("Assay-Epoch", "")
    return BranchCommit(sha, message.split("\n", 1)[0], trailers.get("Assay-Brief"),
                        int(epoch) if epoch.isdigit() else None, at)


def _iso(seconds: int) -> str:
    from assay.records import utc_now_iso

    return utc_now_iso(float(seconds))


def _review_chain(git: ForgeGit, brief: str) -> list[tuple[str, ReviewRecord]]:
    ref = review_ref(brief)
    tip = retired.tip_of(git, ref)
    if not tip:
        return []
    git.ensure_objects({ref: tip})
    shas = list(reversed(git.rev_list(tip)))
    out = []
    for sha, data in zip(shas, git.read_objects([f"{s}:review.json" for s in shas]), strict=True):
        try:
            out.append((sha, decode_review(data, ref)))
        except RecordInvalid:
            continue  # junk in a review chain is the reviews' listing's to report; it proves nothing here
    return out


def _pull_history(reviews: Reviews, brief: str) -> dict[str, Any] | None:
    """The pull request as the audit reads it: the writes a desk made to it (ready, statuses) and its events."""
    history = getattr(reviews, "history", None)
    pull = history(brief) if callable(history) else None
    if not isinstance(pull, dict):
        return None
    head, number = str(pull["head"]), pull["number"]
    writes: list[dict[str, Any]] = [{"kind": "status", "head": head, **s} for s in pull["statuses"]]
    events = [{"at": pull["opened_at"], "what": f"pull request #{number} opened", "ref": f"pull/{number}"}]
    events += [{"at": s["at"], "what": f"status {s['context']} {s['state']} on {head[:10]}", "ref": head}
               for s in pull["statuses"]]
    if not pull["draft"]:
        writes.append({"kind": "ready", "head": head})
    if pull["merged"]:
        events.append({"at": pull["merged_at"], "what": f"merged {head[:10]}", "ref": pull["merge_commit"]})
    return {**pull, "writes": writes, "events": events, "ready_head": "" if pull["draft"] else head,
            "merged_head": head if pull["merged"] else ""}


def _rows_on_main(git: ForgeGit, brief: str, commits: Sequence[str]) -> list[list[tuple[str, str]]]:
    out = []
    for data in git.read_objects([f"{c}:briefs/{brief}.md" for c in commits]):
        if data is None:
            continue
        parsed, _ = check_brief(data.decode("utf-8", "replace"), f"briefs/{brief}.md", brief)
        if parsed is not None:
            out.append([(row.id, row.run) for row in parsed.verify])
    return out


# -- the timeline -------------------------------------------------------------------------------------


def timeline(h: History) -> list[Event]:
    events = [Event(c.record.at, "claim", f"{c.record.state} by {c.record.desk}", c.record.epoch, c.sha)
              for c in h.claims]
    for e in h.journal:
        events.append(Event(e.at, "journal", f"#{e.seq} {e.kind}" + (f" {e.step}" if e.step else "")
                            + (f" {e.status}" if e.status else "") + _note(e), e.epoch))
    for b in h.branch:
        events.append(Event(b.at, "branch", f"{b.sha[:10]} {b.subject}", b.epoch, b.sha))
    for sha, r in h.reviews:
        events.append(Event(r.at, "review", f"{r.state} at {r.head[:10]}", None, sha))
    for item in (h.pull or {}).get("events", []):
        events.append(Event(str(item.get("at", "")), "review", str(item.get("what", "")), None,
                            str(item.get("ref", ""))))
    order = {"claim": 0, "journal": 1, "branch": 2, "review": 3}
    return sorted(events, key=lambda ev: (ev.at, order[ev.source]))


def _note(e: JournalEntry) -> str:
    data = e.data or {}
    if e.kind == "note" and "pushed" in data:
        return f" pushed {str(data['pushed'])[:10]}"
    if e.kind == "note" and "review" in data:
        return f" review {data['review']} {str(data.get('head', ''))[:10]}"
    if e.kind == "verify":
        return f" {data.get('row')} {'passed' if data.get('passed') else 'failed'} at {str(data.get('head', ''))[:10]}"
    return ""


# -- the checks ---------------------------------------------------------------------------------------


def check_branch_epochs(h: History, git: ForgeGit) -> Check:
    held = {c.record.epoch for c in h.claims if c.record.state == "held"}
    pushed_by: dict[str, JournalEntry] = {}
    shas = {b.sha for b in h.branch}
    for e in h.journal:
        head = str((e.data or {}).get("pushed", "")) if e.kind == "note" else ""
        if head and git.read_objects([head])[0] is not None:
            for sha in git.rev_list(head):
                if sha in shas:
                    pushed_by.setdefault(sha, e)
    bad = []
    for b in h.branch:
        push = pushed_by.get(b.sha)
        if b.brief != h.brief or b.epoch is None:
            bad.append(f"{b.sha[:10]} lacks the trailers Assay-Brief: {h.brief} and Assay-Epoch")
        elif push is None:
            live = max(held, default=0)
            bad.append(f"{b.sha[:10]} (Assay-Epoch: {b.epoch}) was pushed outside any journal push"
                       + (f"; epoch {b.epoch} is not the live epoch {live}" if live and b.epoch != live else ""))
        elif push.epoch != b.epoch:
            bad.append(f"{b.sha[:10]} says Assay-Epoch: {b.epoch} but was pushed at epoch {push.epoch} (#{push.seq})")
        elif push.epoch not in held:
            bad.append(f"{b.sha[:10]} was pushed at epoch {push.epoch}, which never held the claim")
    if bad:
        return Check("branch-epochs", False, "; ".join(bad))
    return Check("branch-epochs", True, f"{len(h.branch)} commit(s), each pushed by a journal push of its epoch")


def check_unsafe_once(h: History) -> Check:
    seen: dict[tuple[str, str, int], list[JournalEntry]] = {}
    resolved: dict[int, set[str]] = {}
    bad = []
    for e in h.journal:
        if e.intent is not None and e.kind in ("outcome_unknown", "refused"):
            resolved.setdefault(e.intent, set()).add(e.kind)
        if e.kind != "intent" or e.policy != "unsafe":
            continue
        identity = (e.step or "", e.input_sha or "", e.ordinal or 0)
        for earlier in seen.get(identity, []):
            if resolved.get(earlier.seq, set()) != {"outcome_unknown", "refused"}:
                bad.append(f"step {e.step!r} ran again at #{e.seq} after #{earlier.seq} with no recorded refusal")
        seen.setdefault(identity, []).append(e)
    if bad:
        return Check("unsafe-once", False, "; ".join(bad))
    count = sum(len(v) for v in seen.values())
    return Check("unsafe-once", True, f"{count} unsafe intent(s), none repeated without a refusal")


def check_fenced_writes(h: History) -> Check:
    held = {c.record.epoch for c in h.claims if c.record.state in ("held", "waiting")}
    notes = [e for e in h.journal if e.kind == "note" and (e.data or {}).get("review") == "ready"]
    bad, count = [], 0
    previous = None
    for sha, r in h.reviews:
        if r.state == "ready" and (previous is None or previous.state != "ready" or previous.head != r.head):
            count += 1
            note = next((n for n in notes if n.data and n.data.get("head") == r.head), None)
            if note is None:
                bad.append(f"review commit {sha[:10]} marked {r.head[:10]} ready with no journal note for it")
            elif note.epoch not in held:
                bad.append(f"the ready note #{note.seq} is at epoch {note.epoch}, which never held the claim")
        previous = r
    if h.pull is not None:
        writes = _pull_writes(h)
        count += len(writes)
        bad += writes_without_intent(h, writes, held)
    if bad:
        return Check("fenced-writes", False, "; ".join(bad))
    return Check("fenced-writes", True, f"{count} forge write(s), each after its journal entry")


def _pull_writes(h: History) -> list[dict[str, Any]]:
    return [w for w in (h.pull or {}).get("writes", []) if isinstance(w, dict)]


def writes_without_intent(h: History, writes: list[dict[str, Any]], held: set[int]) -> list[str]:
    """GitHub writes (ready, status) that no fenced journal entry announced before them."""
    bad = []
    for w in writes:
        head = str(w.get("head", ""))
        if w.get("kind") == "status":
            wanted = input_sha({"head": head})
            if not any(e.kind == "intent" and e.step == "statuses" and e.input_sha == wanted and e.epoch in held
                       for e in h.journal):
                bad.append(f"status {w.get('context')!r} on {head[:10]} has no `statuses` intent for that head")
            elif not _status_matches(h, w):
                bad.append(f"status {w.get('context')!r} ({w.get('state')}) on {head[:10]} is no verify "
                           "evidence that the `statuses` intent posted")
        elif w.get("kind") == "ready" and not any(
                e.kind == "note" and (e.data or {}).get("review") == "ready" and (e.data or {}).get("head") == head
                and e.epoch in held for e in h.journal):
            bad.append(f"the pull request was marked ready at {head[:10]} with no journal note for it")
    return bad


def _status_matches(h: History, w: dict[str, Any]) -> bool:
    rows = [e.data for e in h.journal if e.kind == "verify" and e.data and e.data.get("head") == w.get("head")
            and f"assay/verify/{e.data.get('row')}" == w.get("context")]
    return bool(rows) and (w.get("state") == "success") == bool(rows[-1].get("passed"))


def check_verify_evidence(h: History) -> Check:
    heads: dict[str, str] = {}
    ready = [r for _, r in h.reviews if r.state == "ready" and r.head]
    if ready:
        heads[ready[-1].head] = "marked ready"
    merged = [r for _, r in h.reviews if r.state == "merged" and r.head]
    if merged:
        heads.setdefault(merged[-1].head, "merged")
    for key, what in (("ready_head", "marked ready"), ("merged_head", "merged")):
        if h.pull and h.pull.get(key):
            heads.setdefault(str(h.pull[key]), what)
    if not heads:
        return Check("verify-evidence", True, "no head was marked ready or merged: nothing to prove")
    bad = []
    for head, what in heads.items():
        rows = [e for e in h.journal if e.kind == "verify" and (e.data or {}).get("head") == head]
        if not rows:
            bad.append(f"the head {what} ({head[:10]}) has no verify evidence")
            continue
        seen = [(str((e.data or {}).get("row")), str((e.data or {}).get("command"))) for e in rows]
        foreign = [f"{r} `{c}`" for r, c in seen if not any((r, c) in main for main in h.rows_on_main)]
        if foreign:
            bad.append(f"evidence for {head[:10]} ran rows that are not main's: {', '.join(foreign)}")
        last = {str((e.data or {}).get("row")): bool((e.data or {}).get("passed")) for e in rows}
        failed = [row for row, passed in last.items() if not passed]
        if failed:
            bad.append(f"the head {what} ({head[:10]}) failed row(s) {', '.join(failed)}")
        missing = [r for r, _ in (h.rows_on_main[-1] if h.rows_on_main else []) if r not in {s for s, _ in seen}]
        if missing:
            bad.append(f"the head {what} ({head[:10]}) has no evidence for main's row(s) {', '.join(missing)}")
    if bad:
        return Check("verify-evidence", False, "; ".join(bad))
    return Check("verify-evidence", True, "; ".join(f"{what} {head[:10]}: main's rows passed"
                                                   for head, what in heads.items()))


def check_seq_epochs(h: History) -> Check:
    bad = list(h.problems)
    for expected, e in enumerate(h.journal, start=1):
        if e.seq != expected:
            bad.append(f"journal seq jumps from {expected - 1} to {e.seq}")
            break
    for before, after in pairwise(h.journal):
        if after.epoch < before.epoch:
            bad.append(f"journal epoch falls from {before.epoch} to {after.epoch} at #{after.seq}")
            break
    for before_c, after_c in pairwise(h.claims):
        if after_c.record.epoch < before_c.record.epoch:
            bad.append(f"claim epoch falls from {before_c.record.epoch} to {after_c.record.epoch} "
                       f"at {after_c.sha[:10]}")
            break
    epochs = {c.record.epoch for c in h.claims}
    strays = sorted({e.epoch for e in h.journal} - epochs - {0})
    if strays and h.claims:
        bad.append(f"journal entries at epoch(s) {', '.join(map(str, strays))} that no claim held")
    if bad:
        return Check("seq-epochs", False, "; ".join(bad))
    return Check("seq-epochs", True, f"seq 1..{len(h.journal)} without gaps; epochs only rise")


def check_one_holder(h: History) -> Check:
    bad = []
    if h.claims and h.claims[0].record.epoch != 1:
        bad.append(f"the chain starts at epoch {h.claims[0].record.epoch}, not 1")
    for before, after in pairwise(h.claims):
        b, a = before.record, after.record
        if b.state == "done":
            bad.append(f"{after.sha[:10]} follows a done claim")
        elif a.epoch == b.epoch:
            if (a.desk, a.holder) != (b.desk, b.holder) and b.state not in TOMBSTONES and a.state not in TOMBSTONES:
                bad.append(f"epoch {a.epoch} changed holder from {b.holder} to {a.holder} at {after.sha[:10]}")
        elif a.epoch != b.epoch + 1:
            bad.append(f"epoch jumps from {b.epoch} to {a.epoch} at {after.sha[:10]}")
        elif b.state not in TOMBSTONES and not (b.state in ("held", "waiting") and a.desk == b.desk):
            bad.append(f"epoch {a.epoch} ({a.desk}) began at {after.sha[:10]} while {b.desk} held "
                       f"epoch {b.epoch} ({b.state})")
    if bad:
        return Check("one-holder", False, "; ".join(bad))
    return Check("one-holder", True, f"{len({c.record.epoch for c in h.claims})} epoch(s), one holder each")


# -- the verbs ----------------------------------------------------------------------------------------


def audit_history(h: History, git: ForgeGit) -> Audit:
    checks = [check_branch_epochs(h, git), check_unsafe_once(h), check_fenced_writes(h), check_verify_evidence(h),
              check_seq_epochs(h), check_one_holder(h)]
    return Audit(h.brief, timeline(h), checks)


def audit(git: ForgeGit, claims: Claims, reviews: Reviews, brief: str) -> Audit:
    """The audit of one brief; UsageError (exit 2) if the forge knows no such brief."""
    return audit_history(read_history(git, claims, reviews, brief), git)


def audit_all(git: ForgeGit, claims: Claims, reviews: Reviews) -> list[Audit]:
    """The audit of every brief with a claim chain, live or retired."""
    names = {ref.removeprefix(CLAIMS_PREFIX) for ref in git.ls_remote(CLAIMS_PREFIX + "*")}
    names |= retired.read_index(git).names()
    out = []
    for brief in sorted(names):
        try:
            out.append(audit(git, claims, reviews, brief))
        except AssayError as exc:
            out.append(Audit(brief, [], [Check("read", False, exc.message)]))
    return out


__all__ = ["CHECKS", "Audit", "Check", "Event", "audit", "audit_all"]
