"""The audit of one brief: its claim chain, journal, work branch and review merged into one timeline,
then checked against each other. An agent's account is not evidence; the forge's refs are.

The checks and what each proves are the table in docs/architecture.md (Audits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any

from assay.core import retired
from assay.core.briefs import check_brief
from assay.core.claims import NEW_EPOCH_ACTIONS, OUTCOMES, TRANSITIONS, Claim, Claims, fold_renewals, renewal_key
from assay.core.forge.base import VERIFY_CONTEXT, Reviews, verify_status
from assay.core.git import ForgeGit, committed_at
from assay.core.journal import JournalLog, read_kept
from assay.core.outcomes import DID_NOT, HAPPENED, resolves, settled
from assay.core.records import (
    MAIN_REF,
    TOMBSTONES,
    WORK_BRANCH_REF_PREFIX,
    JournalEntry,
    ReviewRecord,
    decode_review,
    parse_iso,
    review_ref,
    validate_brief_id,
)
from assay.core.records.chain import InvalidRecord
from assay.core.records.recordtype import asdict, dataclass, field
from assay.core.scan import scan
from assay.core.steps import input_sha
from assay.errors import AssayError, ForgeError, RecordInvalid, UsageError

LIVE = ("held", "waiting")  # claim states in which an epoch holds custody
LABEL_PREFIXES = ("assay:", "desk:")  # the labels Assay writes on a pull request; people's own are not audited
STATUS_PREFIX = "assay/verify"  # the statuses Assay posts (and one a row, as before); other CI systems' are not
CLOCK_SKEW_S = 120  # how far a desk's clock and the forge's may disagree: writes closer than this are not judged
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
    seq: int = 0  # a journal entry's sequence number: its order within one second


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
    unread_reviews: list[str] = field(default_factory=list)  # review records that did not read: not judged


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


def read_history(git: ForgeGit, claims: Claims, reviews: Reviews, brief: str,
                 refs: Mapping[str, str] | None = None) -> History:
    """Everything the forge holds about `brief` (also a retired one); UsageError if it holds nothing. `refs`: the
    forge's refs read already, their objects fetched (`audit_all` reads them once for every brief)."""
    validate_brief_id(brief)
    problems: list[str] = []
    chain = claims.history(brief, refs)
    good = [c for c in chain if isinstance(c, Claim)]
    problems += [f"{c.ref} at {c.sha[:10]}: {c.problem}" for c in chain if isinstance(c, InvalidRecord)]
    try:
        log = read_kept(git, brief, refs)
    except RecordInvalid as exc:
        problems.append(exc.message)
        log = JournalLog([], {}, None)
    if not chain and not log.entries:
        unknown = UsageError(f"no brief {brief!r} on this forge: it has no claim chain and no journal",
                             hint="list briefs with `assay claims`")
        unknown.unknown_brief = brief  # perhaps a typo: the hint names close ids
        raise unknown
    base = next((str(e.data["at_commit"]) for e in log.entries
                 if e.kind == "note" and e.data and e.data.get("branch") == "created" and e.data.get("at_commit")),
                None)
    branch = _branch_commits(git, brief, base, refs)
    unread_reviews: list[str] = []
    review_chain = _review_chain(git, brief, refs, unread_reviews) if reviews.refs_backed else []
    named = [str((e.data or {}).get(k)) for e in log.entries for k in ("head", "pushed") if (e.data or {}).get(k)]
    pull = None if reviews.refs_backed else _pull_history(reviews, brief, list(dict.fromkeys(named)))
    mains = [base] if base else []
    merged = next((r.merged_commit for _, r in review_chain if r.merged_commit), "")
    if merged:
        mains.append(f"{merged}^1")
    if pull and pull.get("merge_commit") and pull.get("merged"):
        mains.append(f"{pull['merge_commit']}^1")
    if not mains:
        mains.append(MAIN_REF)
    return History(brief, good, log.entries, branch, review_chain, _rows_on_main(git, brief, mains), pull, problems,
                   unread_reviews)


def _branch_commits(git: ForgeGit, brief: str, base: str | None,
                    refs: Mapping[str, str] | None) -> list[BranchCommit]:
    """The work branch's own commits (after `base`, the main commit it was created at), oldest first."""
    ref = WORK_BRANCH_REF_PREFIX + brief
    tip = retired.tip_of(git, ref, refs)
    if not tip:
        return []
    git.ensure_objects({ref: tip})
    if base is None or not git.read_objects([base])[0]:
        main = (git.ls_remote(MAIN_REF) if refs is None else refs).get(MAIN_REF)
        base = main if main and git.read_objects([main])[0] and not git.is_ancestor(tip, main) else None
    shas = list(reversed(git.rev_list(tip, since=base)))
    return [_branch_commit(sha, data) for sha, data in zip(shas, git.read_objects(shas), strict=True)]


def _branch_commit(sha: str, data: bytes | None) -> BranchCommit:
    text = (data or b"").decode("utf-8", "replace")
    message = text.partition("\n\n")[2]
    stamp = committed_at(data)
    at = _iso(stamp) if stamp is not None else ""
    trailers: dict[str, str] = {}
    for line in message.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("Assay-Brief", "Assay-Epoch"):
            trailers[key] = value.strip()
    epoch = trailers.get("Assay-Epoch", "")
    return BranchCommit(sha, message.split("\n", 1)[0], trailers.get("Assay-Brief"),
                        int(epoch) if epoch.isdigit() else None, at)


def _iso(seconds: int) -> str:
    from assay.core.records import utc_now_iso

    return utc_now_iso(float(seconds))


def _review_chain(git: ForgeGit, brief: str, refs: Mapping[str, str] | None,
                  unread: list[str]) -> list[tuple[str, ReviewRecord]]:
    """The review chain's records, oldest first; each that does not read is added to `unread`, as a write the
    audit cannot judge."""
    ref = review_ref(brief)
    tip = retired.tip_of(git, ref, refs)
    if not tip:
        return []
    git.ensure_objects({ref: tip})
    shas = list(reversed(git.rev_list(tip)))
    if not shas:
        unread.append(f"{ref} at {tip[:10]}: its tip is no commit")
    out = []
    for sha, data in zip(shas, git.read_objects([f"{s}:review.json" for s in shas]), strict=True):
        try:
            out.append((sha, decode_review(data, ref)))
        except RecordInvalid as exc:
            unread.append(f"{ref} at {sha[:10]}: {exc.problem}")
    return out


def _pull_history(reviews: Reviews, brief: str, heads: Sequence[str]) -> dict[str, Any] | None:
    """The pull request as the audit reads it: the writes made to it (statuses, ready, Assay's labels), each
    with GitHub's time and author, and the events of its timeline."""
    pull = reviews.history(brief, heads)
    if not isinstance(pull, dict):
        return None
    head, number, desks = str(pull["head"]), pull["number"], str(pull.get("author") or "")
    authors = {str(k): str(v) for k, v in (pull.get("authors") or {}).items()}

    def by_desks(by: str, on: object = None) -> bool:
        """A write the desks' token made (the author of the pull request it is on); people's edits are events."""
        author = authors.get(str(on), desks) if on is not None else desks
        return not author or not by or by == author

    writes: list[dict[str, Any]] = [{"kind": "status", **s} for s in pull["statuses"]
                                    if s["context"] == VERIFY_CONTEXT or s["context"].startswith(STATUS_PREFIX + "/")
                                    if by_desks(s["by"])]
    events = [{"at": pull["opened_at"], "what": f"pull request #{number} opened", "ref": f"pull/{number}"}]
    events += [{"at": s["at"], "what": f"status {s['context']} {s['state']} on {s['head'][:10]} by {s['by']}",
                "ref": s["head"]} for s in pull["statuses"]]
    for e in pull.get("events", []):
        what, label = e["event"], e["label"]
        mine = by_desks(e["by"], e.get("pull"))
        if mine and what in ("labeled", "unlabeled") and label.startswith(LABEL_PREFIXES):
            writes.append({"kind": "label", "action": what, "label": label, "at": e["at"], "by": e["by"]})
        elif mine and what == "ready_for_review":
            writes.append({"kind": "ready", "head": "", "at": e["at"], "by": e["by"]})
        earlier = f"(#{e['pull']})" if e.get("pull", number) != number else ""
        events.append({"at": e["at"], "what": " ".join(filter(None, [what, label, f"by {e['by']}", earlier])),
                       "ref": e["commit"] or f"pull/{e.get('pull', number)}"})
    events += [{"at": r["at"], "what": f"review {r['state'].lower()} by {r['by']} at {r['commit'][:10]}",
                "ref": r["commit"]} for r in pull.get("reviews", [])]
    if not pull["draft"] and not any(w["kind"] == "ready" for w in writes):  # ready with no event (opened so)
        writes.append({"kind": "ready", "head": head, "at": "", "by": ""})
    if pull["merged"] and not any(e["event"] == "merged" for e in pull.get("events", [])):
        events.append({"at": pull["merged_at"], "what": f"merged {head[:10]}", "ref": pull["merge_commit"]})
    return {**pull, "writes": writes, "events": events,
            "ready_head": head if not pull["draft"] and not pull["merged"] else "",
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
    events = [Event(c.record.at, "claim", f"{c.record.state} by {c.record.desk}"
                    + (f" (renewed {renewed}×)" if renewed else ""), c.record.epoch, c.sha)
              for c, renewed in fold_renewals(h.claims, lambda c: renewal_key(c.record))]
    for e in h.journal:
        events.append(Event(e.at, "journal", f"#{e.seq} {e.kind}" + (f" {e.step}" if e.step else "")
                            + (f" {e.status}" if e.status else "") + _note(e), e.epoch, seq=e.seq))
    for b in h.branch:
        events.append(Event(b.at, "branch", f"{b.sha[:10]} {b.subject}", b.epoch, b.sha))
    for sha, r in h.reviews:
        events.append(Event(r.at, "review", f"{r.state} at {r.head[:10]}", None, sha))
    for item in (h.pull or {}).get("events", []):
        events.append(Event(str(item.get("at", "")), "review", str(item.get("what", "")), None,
                            str(item.get("ref", ""))))
    return sorted(events, key=_causal)


def _causal(ev: Event) -> tuple[str, int, int, int]:
    """Clocks tick in whole seconds, so within one: by epoch; in it, the claim that starts it, then the journal by
    sequence, the branch, the review, and last a claim that ends it (released, expired, done)."""
    if ev.source == "claim":
        rank = 4 if ev.what.split()[0] in {*TOMBSTONES, "done"} else 0
    else:
        rank = {"journal": 1, "branch": 2, "review": 3}[ev.source]
    return ev.at, ev.epoch or 0, rank, ev.seq


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
    """An unsafe step runs again only after its outcome was unknown and then either refused once (a deliberate
    repeat) or settled as not having happened, by an inspection's evidence."""
    seen: dict[tuple[str, str, int], list[JournalEntry]] = {}
    resolved: dict[int, set[str]] = {}
    bad = []
    for e in h.journal:
        if e.intent is not None and e.kind in ("outcome_unknown", "refused"):
            resolved.setdefault(e.intent, set()).add(e.kind)
        if e.intent is not None and settled(e):
            resolved.setdefault(e.intent, set()).add(f"settled:{settled(e)}")
        if e.kind != "intent" or e.policy != "unsafe":
            continue
        identity = (e.step or "", e.input_sha or "", e.ordinal or 0)
        for earlier in seen.get(identity, []):
            ends = resolved.get(earlier.seq, set())
            if "outcome_unknown" not in ends or not ends & {"refused", f"settled:{DID_NOT}"} \
                    or f"settled:{HAPPENED}" in ends:
                bad.append(f"step {e.step!r} ran again at #{e.seq} after #{earlier.seq} with no recorded refusal "
                           "or settle that it did not happen")
        seen.setdefault(identity, []).append(e)
    if bad:
        return Check("unsafe-once", False, "; ".join(bad))
    count = sum(len(v) for v in seen.values())
    return Check("unsafe-once", True, f"{count} unsafe intent(s), none repeated without a refusal or a settle")


def check_fenced_writes(h: History) -> Check:
    held = {c.record.epoch for c in h.claims if c.record.state in LIVE}
    notes = [e for e in h.journal if e.kind == "note" and (e.data or {}).get("review") == "ready"]
    bad, count = [f"{u}, so its writes cannot be judged" for u in h.unread_reviews], 0
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
        bad += writes_without_intent(h, writes)
    if bad:
        return Check("fenced-writes", False, "; ".join(bad))
    return Check("fenced-writes", True, f"{count} forge write(s), each after its journal entry, under a live epoch")


def _pull_writes(h: History) -> list[dict[str, Any]]:
    return [w for w in (h.pull or {}).get("writes", []) if isinstance(w, dict)]


def custody(h: History) -> dict[int, tuple[str, str, str]]:
    """Each epoch's custody by the claim chain: (from, until or "" while it lasts, desk). It begins at the
    epoch's first held record and ends at the first record where it is no longer held or waiting."""
    spans: dict[int, list[str]] = {}
    for c in h.claims:
        r = c.record
        for epoch, span in spans.items():
            if not span[1] and (epoch < r.epoch or (epoch == r.epoch and r.state not in LIVE)):
                span[1] = r.at
        if r.state in LIVE and r.epoch not in spans:
            spans[r.epoch] = [r.at, "", r.desk]
    return {epoch: (span[0], span[1], span[2]) for epoch, span in spans.items()}


def _seconds(at: str) -> float | None:
    try:
        return parse_iso(at).timestamp()
    except ValueError:
        return None


def _live_at(spans: dict[int, tuple[str, str, str]], epoch: int, at: str) -> bool:
    """Whether `epoch` held the claim at `at` (GitHub's clock), give or take CLOCK_SKEW_S."""
    if epoch not in spans:
        return False
    when, start, end = _seconds(at), _seconds(spans[epoch][0]), _seconds(spans[epoch][1])
    if when is None:
        return True  # no time to judge by: the epoch held the claim at some point
    return (start is None or start - CLOCK_SKEW_S <= when) and (end is None or when <= end + CLOCK_SKEW_S)


def _announced(entry: JournalEntry, at: str) -> bool:
    """Whether the journal entry came before a write made at `at`, give or take CLOCK_SKEW_S."""
    when, said = _seconds(at), _seconds(entry.at)
    return when is None or said is None or said <= when + CLOCK_SKEW_S


def _unfenced(what: str, candidates: list[JournalEntry], at: str, spans: dict[int, tuple[str, str, str]],
              resolved: dict[int, int], desk: str = "", by_epoch: int | None = None) -> str:
    """Why none of the entries announcing a write fences it ("" if one does). A write is fenced when an entry
    announced it before it was made, and the entry's epoch held the claim when it was made, or, for a step's
    intent, an epoch that resumed the step before its result (`resolved`: intent seq -> the epoch of its
    result; none yet: any later epoch). Of `desk`, when given (a `desk:NAME` label); made by `by_epoch`, when
    the write names the epoch that made it (a verify status), and judged by that epoch's custody alone."""
    def live(e: JournalEntry) -> bool:
        last = resolved.get(e.seq, 1 << 62) if e.kind == "intent" else e.epoch
        return any(e.epoch <= epoch <= last and (not desk or span[2] == desk) and _live_at(spans, epoch, at)
                   and (by_epoch is None or epoch == by_epoch) for epoch, span in spans.items())

    if any(_announced(e, at) and live(e) for e in candidates):
        return ""
    first = candidates[0]
    if not any(_announced(e, at) for e in candidates):
        return f"{what} came at {at}, before the journal announced it (#{first.seq} at {first.at})"
    held = "; ".join(f"epoch {epoch} ({span[2]}) held it {span[0]} to {span[1] or 'now'}"
                     for epoch, span in sorted(spans.items()) if epoch >= first.epoch)
    if by_epoch is not None:
        return (f"{what} came at {at}, when epoch {by_epoch}, which posted it, did not hold the claim or had not "
                f"announced it ({held or 'no epoch held it'})")
    return (f"{what} came at {at}, when no epoch that announced it or resumed its step held the claim"
            + (f" for desk {desk!r}" if desk else "") + f" ({held or 'no epoch held it'})")


def writes_without_intent(h: History, writes: list[dict[str, Any]]) -> list[str]:
    """GitHub writes (statuses, ready, Assay's labels) that no journal entry announced before them, under an
    epoch that held the claim when GitHub recorded the write."""
    spans = custody(h)
    resolved = {e.intent: e.epoch for e in h.journal if e.intent is not None and resolves(e) is not None}
    ready_notes = [e for e in h.journal if e.kind == "note" and (e.data or {}).get("review") == "ready"]
    rounds = {str((e.data or {})["redo"]) for e in h.journal if e.kind == "note" and (e.data or {}).get("redo")}
    bad = []  # a round of work again after a block gives its steps' input {"after": <round>}
    for w in writes:
        head, at, by = str(w.get("head", "")), str(w.get("at", "")), str(w.get("by", ""))
        who = f" by {by}" if by else ""
        if w.get("kind") == "status":
            epoch = w.get("epoch") if isinstance(w.get("epoch"), int) else None
            what = f"status {w.get('context')!r} on {head[:10]}{who}" + (f" at epoch {epoch}" if epoch else "")
            wanted = {input_sha({"head": head}), *(input_sha({"head": head, "after": r}) for r in rounds)}
            intents = [e for e in h.journal if e.kind == "intent" and e.step == "statuses" and e.input_sha in wanted]
            if not intents:
                bad.append(f"{what} has no `statuses` intent for that head")
            elif why := _unfenced(what, intents, at, spans, resolved, by_epoch=epoch):
                bad.append(why)
            elif not _status_matches(h, w):
                bad.append(f"status {w.get('context')!r} ({w.get('state')}) on {head[:10]} is no verify "
                           "evidence that the `statuses` intent posted")
        elif w.get("kind") == "ready":
            notes = [e for e in ready_notes if not head or (e.data or {}).get("head") == head]
            what = f"the pull request was marked ready{who}" + (f" at {head[:10]}" if head else "")
            if not notes:
                bad.append(f"{what} with no journal note for it")
            elif why := _unfenced(what, notes, at, spans, resolved):
                bad.append(why)
        elif w.get("kind") == "label":
            label = str(w.get("label", ""))
            what = f"label {label!r} {'added' if w.get('action') == 'labeled' else 'removed'}{who}"
            announcing = [e for e in h.journal if (e.kind == "intent" and e.step == "review") or e in ready_notes]
            desk = label[5:] if label.startswith("desk:") else ""
            if not announcing:
                bad.append(f"{what} has no journal entry announcing it")
            elif why := _unfenced(what, announcing, at, spans, resolved, desk):
                bad.append(why)
    return bad


def _status_matches(h: History, w: dict[str, Any]) -> bool:
    """Whether the status says what the journal's verify entries of its head, announced before it, say: for
    `assay/verify`, the last run of each row as one digest and outcome (rows that failed and then passed leave
    one status for each); for a status of one row (`assay/verify/<row>`, as posted before), that row's outcome."""
    passed = w.get("state") == "success"
    runs = [e for e in h.journal if e.kind == "verify" and e.data and e.data.get("head") == w.get("head")
            and _announced(e, str(w.get("at", "")))]
    if w.get("context") != VERIFY_CONTEXT:
        return any(f"{STATUS_PREFIX}/{(e.data or {}).get('row')}" == w.get("context")
                   and bool((e.data or {}).get("passed")) == passed for e in runs)
    said = str(w.get("said") or "")
    for end in range(len(runs), 0, -1):  # the evidence as it stood after each run, newest first
        state, summary = verify_status(e.data or {} for e in runs[:end])
        if summary == said and (state == "success") == passed:
            return True
    return False


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
    bad: list[str] = []
    said: list[str] = []
    for head, what in heads.items():
        rows = [e for e in h.journal if e.kind == "verify" and (e.data or {}).get("head") == head]
        if not rows and h.rows_on_main and not any(h.rows_on_main):  # main's brief has no rows: a desk runs none
            said.append(f"{what} {head[:10]}: main's brief has no verify rows")
            continue
        if not rows:
            bad.append(f"the head {what} ({head[:10]}) has no verify evidence")
            continue
        said.append(f"{what} {head[:10]}: main's rows passed")
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
    return Check("verify-evidence", True, "; ".join(said))


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
            if b.state in TOMBSTONES:
                bad.append(f"epoch {a.epoch} goes on at {after.sha[:10]} ({a.state}) after it ended ({b.state})")
            elif a.state not in _same_epoch_states(b.state):
                bad.append(f"{b.state} → {a.state} at {after.sha[:10]} is no transition of a claim")
            elif (a.desk, a.holder) != (b.desk, b.holder) and a.state not in TOMBSTONES:
                bad.append(f"epoch {a.epoch} changed holder from {b.holder} to {a.holder} at {after.sha[:10]}")
        elif a.epoch != b.epoch + 1:
            bad.append(f"epoch jumps from {b.epoch} to {a.epoch} at {after.sha[:10]}")
        elif b.state not in TOMBSTONES and not (b.state in ("held", "waiting") and a.desk == b.desk):
            bad.append(f"epoch {a.epoch} ({a.desk}) began at {after.sha[:10]} while {b.desk} held "
                       f"epoch {b.epoch} ({b.state})")
    if bad:
        return Check("one-holder", False, "; ".join(bad))
    return Check("one-holder", True, f"{len({c.record.epoch for c in h.claims})} epoch(s), one holder each")


def _same_epoch_states(state: str) -> set[str]:
    """The states a record may have after one in `state` at the same epoch (`claims.TRANSITIONS`: renew keeps
    the state, release chooses among `OUTCOMES`)."""
    out: set[str] = set()
    for action, (starts, target) in TRANSITIONS.items():
        if action in NEW_EPOCH_ACTIONS or state not in starts:
            continue
        out |= {state} if action == "renew" else set(OUTCOMES) if target is None else {target}
    return out


# -- the verbs ----------------------------------------------------------------------------------------


def audit_history(h: History, git: ForgeGit) -> Audit:
    checks = [check_branch_epochs(h, git), check_unsafe_once(h), check_fenced_writes(h), check_verify_evidence(h),
              check_seq_epochs(h), check_one_holder(h)]
    return Audit(h.brief, timeline(h), checks)


def audit(git: ForgeGit, claims: Claims, reviews: Reviews, brief: str,
          refs: Mapping[str, str] | None = None) -> Audit:
    """The audit of one brief; UsageError (exit 2) if the forge knows no such brief."""
    return audit_history(read_history(git, claims, reviews, brief, refs), git)


def audit_all(git: ForgeGit, claims: Claims, reviews: Reviews,
              progress: Callable[[str], None] = lambda _: None) -> list[Audit]:
    """The audit of every brief with a claim chain, live or retired: one ls-remote and one fetch for all of
    them, then local reads. A ref under Assay's prefixes that names no brief is a failed `read` of its own."""
    found = scan(git, ("claims", "journals", "reviews", "branches", "main", "retired"))
    found.fetch()
    refs = found.refs
    index = found.retired()
    live = [sha for kind in ("claims", "journals", "reviews", "branches") for sha in found.tips[kind].values()]
    kept = [sha for name in sorted(index.names()) if (record := index.get(name)) for sha in record.refs.values()]
    git.learn_chains([*live, *kept])  # every chain in one rev-list: no process per brief
    names = set(found.by_brief("claims")) | index.names()
    out = []
    for n, brief in enumerate(sorted(names)):
        progress(f"auditing {brief} ({n + 1}/{len(names)})")
        try:
            out.append(audit(git, claims, reviews, brief, refs))
        except ForgeError as exc:  # the forge (GitHub's rate limit, say) stopped the reading: nothing is judged
            raise ForgeError(f"the audit stopped at {brief!r}, {len(out)} of {len(names)} audited: {exc.message}; "
                             "no brief is judged on what could not be read", hint=exc.hint) from None
        except AssayError as exc:
            out.append(Audit(brief, [], [Check("read", False, exc.message)]))
    return out + [Audit(j.ref, [], [Check("read", False, f"{j.ref}: {j.problem}: not audited")]) for j in found.junk]


__all__ = ["CHECKS", "Audit", "Check", "Event", "audit", "audit_all"]
