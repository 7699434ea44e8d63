"""The board: the whole fleet as one read of the forge shows it, written as a static site.

`read_forge` reads every claim chain, journal, review, work branch, main, the sweeper's
observations and the retired index with one ls-remote and one fetch, then local cat-file
batches, whatever the number of briefs. `assemble` turns that into one data structure
(`board.json`, documented in docs/data-model.md); `boardrender.py` draws the pages from it
and `build` writes them. Nothing here writes to the forge.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.core import footprints
from assay.core.briefs import Brief
from assay.core.claims import (
    Claim,
    InvalidClaim,
    Liveness,
    decode_chain,
    fold_renewals,
    force_release_command,
    liveness,
    progress_in,
    renewal_key,
)
from assay.core.credentials import redact
from assay.core.deskspec import PERSON_HEARTBEAT_S, desks_on_main
from assay.core.footprints import FOOTPRINTS_REF, Footprint
from assay.core.forge.base import Review, Reviews
from assay.core.git import ForgeGit, committed_at
from assay.core.journal import JournalLog, read_logs
from assay.core.observations import SWEEPER_REF, Observations
from assay.core.outcomes import open_intents, unknown_outcomes
from assay.core.records import (
    CLAIMS_PREFIX,
    FORMAT_VERSION,
    JOURNAL_PREFIX,
    LANDING_CLAIM,
    LIVE_STATES,
    REVIEWS_PREFIX,
    TOMBSTONES,
    JournalEntry,
    chain,
    decode_review,
    parse_iso,
    utc_now_iso,
)
from assay.core.records.chain import InvalidRecord
from assay.core.records.recordtype import asdict, dataclass, field
from assay.core.retired import RETIRED_REF, RetiredBrief
from assay.core.scan import Scan, scan
from assay.errors import ForgeError, RecordInvalid, UsageError, unknown_message
from assay.observe import waste
from assay.observe.listings import custody_reasons

COLUMNS = ("ready", "working", "waiting", "blocked", "unknown", "done")
COLUMN_TITLES = {"ready": "Ready", "working": "Claimed / working", "waiting": "Waiting", "blocked": "Blocked or stuck",
                 "unknown": "Outcome unknown", "done": "Done"}
TIMELINE_LIMIT = 2000  # journal entries a brief page lists; board.json keeps the count of all


@dataclass
class ForgeRead:
    """Everything one ls-remote and one fetch showed, decoded."""

    main: str
    briefs: dict[str, Brief]
    problems: list[str]
    chains: dict[str, list[Claim | InvalidClaim]]  # custody, oldest first (retired briefs included)
    journals: dict[str, JournalLog | RecordInvalid]
    reviews: dict[str, Review]
    branches: dict[str, str]
    retired: dict[str, RetiredBrief]
    observations: Observations
    sweeper_tip: str | None
    desks: list[str] = field(default_factory=list)  # the desks defined on main (desks/*.yaml)
    heartbeats: dict[str, int] = field(default_factory=dict)  # desk -> its heartbeat_s
    written: dict[str, int] = field(default_factory=dict)  # claim commit -> its committer time (the writer's clock)
    review_link: Callable[[Review], str | None] = field(default=lambda _: None)  # the review port's `link`
    progress: dict[str, str] = field(default_factory=dict)  # brief -> what its tip's renewal says of the agent
    junk: list[InvalidRecord] = field(default_factory=list)  # refs under Assay's prefixes that name no brief
    footprints: dict[str, Footprint] = field(default_factory=dict)  # refs/assay/footprints, and those learned


# -- reading ------------------------------------------------------------------------------------


def read_forge(git: ForgeGit, reviews: Reviews) -> ForgeRead:
    """One ls-remote and one fetch for every ref the board shows; the rest are local reads of the cache."""
    found = scan(git)
    found.fetch("claims", "journals", "main", "sweeper", "retired", "keep", "footprints", "learned",
                *["reviews"] * reviews.refs_backed)
    problems = [f"{j.ref}: {j.problem}" for j in found.junk]
    briefs, brief_problems = found.briefs()
    problems += [str(p) for p in brief_problems]
    retired = _retired(found, problems)
    tips = {kind: dict(found.tips[kind]) for kind in ("claims", "journals", "reviews")}
    for record in retired.values():  # a retired brief's refs, as they were when it was retired
        for ref, sha in record.refs.items():
            for kind, prefix in (("claims", CLAIMS_PREFIX), ("journals", JOURNAL_PREFIX), ("reviews", REVIEWS_PREFIX)):
                if ref.startswith(prefix) and ref not in tips[kind]:
                    tips[kind][ref] = sha
    seen = found.observations()
    if seen.problem:
        problems.append(f"{SWEEPER_REF}: {seen.problem.problem}")
    desks, desk_problems = desks_on_main(git, found.main)
    problems += [str(p) for p in desk_problems]
    chains, written, progress = _chains(git, tips["claims"])
    journals = _journals(git, tips["journals"], problems)
    try:
        prints = footprints.read(git, found.tip("footprints"))
    except RecordInvalid as exc:
        prints = {}
        problems.append(f"{FOOTPRINTS_REF}: {exc.problem}")
    learned, bad = footprints.read_learned(git, found.tips["learned"])
    problems += [f"{ref}: {problem}" for ref, problem in bad]
    prints = footprints.merged(prints, learned)
    return ForgeRead(found.main, {b.id: b for b in briefs}, problems, chains, journals,
                     _reviews(git, reviews, tips["reviews"], problems), found.by_brief("branches"), retired,
                     seen.observations, seen.tip, [d.name for d in desks], {d.name: d.heartbeat_s for d in desks},
                     written, reviews.link, progress, found.junk, prints)


def _retired(found: Scan, problems: list[str]) -> dict[str, RetiredBrief]:
    try:
        index = found.retired()
        out = {}
        for name in sorted(index.names()):
            record = index.get(name)
            if record is not None:
                out[name] = record
        return out
    except RecordInvalid as exc:
        problems.append(f"{RETIRED_REF}: {exc.problem}")
        return {}


def _chains(git: ForgeGit, tips: dict[str, str]) \
        -> tuple[dict[str, list[Claim | InvalidClaim]], dict[str, int], dict[str, str]]:
    """Every custody chain: one rev-list for all of them, then one cat-file batch for all their records and
    commits; with each commit's committer time (a renewal repeats its record: only its commit tells when), and
    the progress each tip carries, by brief."""
    # a chain fetched cut short (a new machine's first step's claim) is made whole first: a retired claim's too, which
    # no first-parent walk from the retired index reaches
    if git.shallow_commits():
        git.ensure_objects(tips)
    walked = git.chains(list(tips.values()))
    commits = {ref: list(reversed(walked.get(tip, []))) for ref, tip in sorted(tips.items())}
    names = [name for shas in commits.values() for sha in shas for name in (f"{sha}:claim.json", sha)]
    found_objects = iter(git.read_typed(names))
    out: dict[str, list[Claim | InvalidClaim]] = {}
    written: dict[str, int] = {}
    progress: dict[str, str] = {}
    for ref, shas in commits.items():
        found = []
        for sha in shas:
            found.append(next(found_objects))
            commit = next(found_objects)
            stamp = committed_at(commit.data if commit is not None and commit.kind == "commit" else None)
            if stamp is not None:
                written[sha] = stamp
            if sha == shas[-1] and commit is not None and commit.kind == "commit" and progress_in(commit.data):
                progress[ref.removeprefix(CLAIMS_PREFIX)] = progress_in(commit.data)
        brief = ref.removeprefix(CLAIMS_PREFIX)
        out[brief] = decode_chain(ref, shas, found) if shas else [InvalidClaim(ref, tips[ref], "its tip is no commit")]
    return out, written, progress


def _journals(git: ForgeGit, tips: dict[str, str], problems: list[str]) -> dict[str, JournalLog | RecordInvalid]:
    out = read_logs(git, {ref.removeprefix(JOURNAL_PREFIX): tip for ref, tip in tips.items()})
    problems += [f"{log.ref}: {log.problem}" for _, log in sorted(out.items()) if isinstance(log, RecordInvalid)]
    return out


def _reviews(git: ForgeGit, reviews: Reviews, tips: dict[str, str], problems: list[str]) -> dict[str, Review]:
    if reviews.refs_backed:
        good, bad = chain.read_tips(git, tips, REVIEWS_PREFIX, "review.json", decode_review)
        found: list[Review | InvalidRecord] = [*(Review(r, sha) for r, sha in good), *bad]
    else:
        try:
            found = list(reviews.list())
        except ForgeError as exc:  # the board is built from the forge's refs all the same, without them
            problems.append(f"pull requests not read: {exc.message}")
            found = []
    out: dict[str, Review] = {}
    for item in found:
        if isinstance(item, InvalidRecord):
            problems.append(f"{item.ref}: {item.problem}")
        else:
            out[item.brief] = item
    return out


def review_page(reviews: Reviews, review: Review) -> str:
    """Where the board links a review: its page on the forge (a pull request), else the brief page's review."""
    return _review_page(reviews.link, review)


def _review_page(link: Callable[[Review], str | None], review: Review) -> str:
    return link(review) or f"briefs/{review.brief}.html#review"


# -- assembling ---------------------------------------------------------------------------------


def assemble(read: ForgeRead, forge: str, now: float) -> dict[str, Any]:
    """The board as one JSON-ready structure: the fields are documented in docs/data-model.md."""
    ids = sorted(set(read.briefs) | set(read.chains) | set(read.retired))
    states = {b: _state(read, b) for b in ids}
    if states.get(LANDING_CLAIM) not in LIVE_STATES:  # the landing claim is a card only while a pass holds it
        ids = [b for b in ids if b != LANDING_CLAIM]
    cards = [_card(read, b, states, now) for b in ids]
    cards.sort(key=lambda c: (COLUMNS.index(c["column"]), c["priority"], c["id"]))
    counts = {col: sum(1 for c in cards if c["column"] == col) for col in COLUMNS}
    obs = read.observations
    needs_you = needs_person(cards, read.problems)
    by_brief: dict[str, list[dict[str, Any]]] = {}
    for n in needs_you:
        by_brief.setdefault(n["brief"], []).append({"kind": n["kind"], "why": n["why"], "until": n["until"],
                                                    "next": n["next"]})
    ledgers = waste_ledgers(read)
    for c in cards:  # each brief page says what to do next, and what its work cost
        c["next"] = by_brief.get(c["id"], [])
        c["waste"] = ledgers.briefs.get(c["id"])
    desks = _desks(read, cards, now)
    for d in desks:
        d["waste"] = ledgers.desks.get(d["desk"])
    return {
        "needs_you": needs_you, "needs_you_counts": {k: sum(1 for n in needs_you if n["kind"] == k) for k in NEEDS},
        "v": FORMAT_VERSION, "generated_at": utc_now_iso(now), "forge": redact(forge), "main": read.main,
        "columns": [{"id": col, "title": COLUMN_TITLES[col], "count": counts[col]} for col in COLUMNS],
        "briefs": cards, "desks": desks, "waste": ledgers.total,
        "findings": [{"key": k, "kind": f.kind, "brief": f.brief, "at": f.at}
                     for k, f in sorted(obs.findings.items(), key=lambda kv: (kv[1].at, kv[0]), reverse=True)],
        "sweeper": {"at": obs.at, "commit": read.sweeper_tip} if read.sweeper_tip else None,
        "problems": read.problems,
    }


# the order "needs you" lists them
NEEDS = ("unknown", "blocked", "locked", "review", "stuck", "dead", "overdue", "problem")
NEEDS_TITLES = {"unknown": "outcome unknown", "blocked": "blocked", "locked": "locked ref", "review": "ready to merge",
                "stuck": "stuck", "dead": "dead desk", "overdue": "overdue", "problem": "problem on the forge"}


def needs_person(cards: list[dict[str, Any]], problems: list[str]) -> list[dict[str, Any]]:
    """What needs a person, most urgent first: each with its brief, why, and the command to type next; for a dead or
    overdue claim, `until`: when its lease ends and the sweep expires it anyway (`claims.lease_end`)."""
    out: list[dict[str, Any]] = []

    def need(kind: str, card: dict[str, Any] | None, why: str, next_: str, until: str = "") -> None:
        out.append({"kind": kind, "brief": card["id"] if card else "", "title": card["title"] if card else "",
                    "why": why, "until": until, "next": next_})

    held_up = {c["id"] for c in cards if c["state"] in ("blocked", "invalid") or c["stuck"]}
    for c in cards:
        b = c["id"]
        waits_on = [x for x in c["queued_behind"] if x in held_up]
        if waits_on:  # queued behind briefs that wait for a person themselves: it waits for that person too
            need("blocked", c, f"queued behind {', '.join(waits_on)}, which wait for a person: their files overlap",
                 f"settle {waits_on[0]} (see its card), or change `touches:` on main")
        for u in c["unknown_steps"]:
            need("unknown", c, f"{u['step']} (seq {u['seq']}) may or may not have happened: inspect, then",
                 f"assay step settle {u['step']} --brief {b} --happened|--did-not")
        for seq in c["interrupted"]:
            need("unknown", c, f"an unsafe step (intent seq {seq}) was cut off and no desk holds the brief",
                 f"assay journal {b}; a desk that claims it records the outcome as unknown")
        if c["state"] == "invalid":  # no release can go on from a record that does not read: a person looks first
            need("problem", c, f"{CLAIMS_PREFIX}{b}: {c['custody'][-1].get('invalid')}",
                 f"git show {CLAIMS_PREFIX}{b} on the forge (a newer Assay may have written it)")
        elif c["state"] == "blocked":
            need("blocked", c, c["reason"] or "no reason recorded", f"assay release {b} --force --reason '...'")
        if c["locked"]:  # a desk's latest word on the brief: its claim cannot be written for a lock file
            need("locked", c, f"the forge refuses writes to its claim: the lock file {c['locked']} is left there",
                 f"if no push is running, remove {c['locked']} on the forge's machine")
        if c["review"] and c["review"]["state"] == "ready" and c["state"] != "done":
            need("review", c, f"review ready ({len(c['review']['approvals'])} approvals)",
                 c["review"]["link"] if c["review"]["link"].startswith("http") else f"assay review merge {b}")
        if c["stuck"]:
            need("stuck", c, f"desk {c['desk']} renews without progress", f"assay release {b} --force --reason stuck")
        live = c["liveness"]
        if live["word"] in ("dead", "overdue"):  # when the sweep ends it, or a person now
            need(live["word"], c, live["why"], force_release_command(b, c["desk"]), live["until"])
    for problem in problems:
        need("problem", None, problem, "see docs/data-model.md for the record's format")
    return sorted(out, key=lambda n: NEEDS.index(n["kind"]))


def waste_ledgers(read: ForgeRead) -> waste.Ledgers:
    """The waste ledger (`waste.py`) of every brief with a journal, of every desk that held one, and in total;
    each journal and claim record that could not be read is named, with what the sums leave out."""
    journals = {b: log.entries for b, log in read.journals.items() if isinstance(log, JournalLog) and log.entries}
    epochs = {b: {c.record.epoch: c.record.desk for c in chain if isinstance(c, Claim)}
              for b, chain in read.chains.items()}
    unread = [waste.Unread(b, log.ref, log.problem, "every total")
              for b, log in read.journals.items() if isinstance(log, RecordInvalid)]
    unread += [waste.Unread(j.ref.removeprefix(JOURNAL_PREFIX), j.ref, j.problem, "every total")
               for j in read.junk if j.ref.startswith(JOURNAL_PREFIX)]
    unread += [waste.Unread(b, c.ref, f"{c.problem} (commit {c.sha[:10]})", "desk shares")
               for b, chain in read.chains.items() if b in journals for c in chain if not isinstance(c, Claim)]
    return waste.ledgers(journals, epochs, unread)


def require_desk(read: ForgeRead, desk: str) -> None:
    """Refuse a desk the forge has never known (defined on main, or named by a claim record, retired ones too): its
    share would read as a desk that did no work, where the name is most likely mistyped."""
    if desk in read.desks or any(isinstance(c, Claim) and c.record.desk == desk
                                 for chain in read.chains.values() for c in chain):
        return
    raise UsageError(f"no desk {desk!r} on this forge: it is not defined on main, and never held a claim",
                     hint="`assay desk list` lists the desks on main, `assay claims` the desks holding claims")


def _state(read: ForgeRead, brief: str) -> str | None:
    """The claim state of `brief` ("invalid" for a junk tip; "done" if retired; None if never claimed)."""
    history = read.chains.get(brief)
    if history:
        tip = history[-1]
        return "invalid" if isinstance(tip, InvalidClaim) else tip.record.state
    return "done" if brief in read.retired else None


def _card(read: ForgeRead, brief: str, states: dict[str, str | None], now: float) -> dict[str, Any]:
    spec = read.briefs.get(brief)
    history = read.chains.get(brief, [])
    tip = history[-1] if history and isinstance(history[-1], Claim) else None
    log = read.journals.get(brief)
    entries = log.entries if isinstance(log, JournalLog) else []
    state = states[brief]
    unknown = [e.seq for e in unknown_outcomes(entries)]
    interrupted = _interrupted(entries, tip.record.epoch if tip and tip.record.state == "held" else None)
    needs = [d for d in (spec.depends_on if spec else ()) if states.get(d) != "done"]
    queued = {} if needs or state not in (None, *TOMBSTONES) else footprints.queued_behind(
        brief, {b.id: b.touches for b in read.briefs.values()}, read.footprints,
        lambda other: states.get(other) in LIVE_STATES)
    stuck = tip is not None and tip.record.state == "held" and _stuck(read, brief, tip)
    review = read.reviews.get(brief)
    verify = [e.data for e in entries if e.kind == "verify" and e.data]
    last_head = verify[-1].get("head") if verify else None
    latest = [v for v in verify if v.get("head") == last_head]
    steps = [e for e in entries if e.step]
    record = tip.record if tip else None
    age, age_by = _lease_age(read, brief, tip, now) if tip and tip.record.live else (None, None)
    return {
        "id": brief, "title": spec.title if spec else brief, "on_main": spec is not None,
        "priority": spec.priority if spec else 0, "labels": list(spec.labels) if spec else [],
        "depends_on": list(spec.depends_on) if spec else [], "needs": needs,
        "column": _column(state, needs or list(queued), bool(unknown or interrupted), stuck, brief in read.retired),
        "queued_behind": queued, "touches": list(spec.touches) if spec else [],
        "state": state or "unclaimed", "stuck": stuck, "retired": brief in read.retired,
        "desk": record.desk if record else (read.retired[brief].desk if brief in read.retired else ""),
        "holder": record.holder if record else "", "epoch": record.epoch if record else 0,
        "lease_s": record.lease_s if record else 0, "reason": record.reason if record else "",
        "lease_age_s": age, "lease_age_by": age_by,
        "progress": read.progress.get(brief, "") if record is not None and record.state == "held" else "",
        "liveness": asdict(liveness(record, age, read.heartbeats.get(record.desk, PERSON_HEARTBEAT_S),
                                    age_by or "desk") if record else Liveness("")),
        "last_step": ({"seq": steps[-1].seq, "step": steps[-1].step, "kind": steps[-1].kind,
                       "status": steps[-1].status} if steps else None),
        "verify": {"head": last_head, "passed": sum(1 for v in latest if v.get("passed") is True),
                   "failed": sum(1 for v in latest if v.get("passed") is not True),
                   "rows": [{"row": str(v.get("row", "")), "passed": v.get("passed") is True,
                             "exit_code": v.get("exit_code")} for v in latest]},
        "verify_attempts": _verify_attempts(entries),
        "review": ({"state": review.state, "branch": review.record.branch, "head": review.record.head,
                    "title": review.record.title,
                    "link": _review_page(read.review_link, review),
                    "approvals": list(review.record.approvals), "comments": len(review.record.comments)}
                   if review else None),
        "unknown": unknown, "interrupted": interrupted,
        "unknown_steps": [{"seq": e.seq, "step": e.step or "", "message": unknown_message(e.step or "")}
                          for e in unknown_outcomes(entries)],
        "journal_invalid": log.problem if isinstance(log, RecordInvalid) else None,
        "custody": _custody(history, read.written), "journal_entries": len(entries),
        "journal": [_entry(e) for e in entries[-TIMELINE_LIMIT:]],
        "locked": str((entries[-1].data or {}).get("locked") or "") if entries and entries[-1].kind == "note" else "",
    }


VERIFY_TAIL = 300  # characters of a failed row's output a brief page shows (the journal keeps 1000 bytes)


def _verify_attempts(entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """Each verify run, oldest first (the `verify` entries after one `verify` step's intent), with the evidence of
    each of its rows."""
    attempts: list[list[dict[str, Any]]] = []
    fresh = True
    for e in entries:
        if e.kind == "intent" and e.step == "verify":
            fresh = True
        elif e.kind == "verify" and e.data:
            if fresh:
                attempts.append([])
                fresh = False
            v = e.data
            passed = v.get("passed") is True
            attempts[-1].append({"row": str(v.get("row", "")), "command": str(v.get("command", "")),
                                 "head": str(v.get("head", "")), "passed": passed, "exit_code": v.get("exit_code"),
                                 "duration_ms": v.get("duration_ms"),
                                 "tail": "" if passed else str(v.get("tail", ""))[-VERIFY_TAIL:]})
    return [{"head": rows[0]["head"], "passed": all(r["passed"] for r in rows),
             "rows": [{k: v for k, v in r.items() if k != "head"} for r in rows]} for rows in attempts]


def _column(state: str | None, needs: list[str], unknown: bool, stuck: bool, retired: bool) -> str:
    """Done first; then outcome unknown, before blocked: an effect may have happened, and a person must look at
    the system it touched before anything else is done about the brief."""
    if state == "done" or retired:
        return "done"
    if unknown:
        return "unknown"
    if state == "invalid" or state == "blocked" or stuck:
        return "blocked"
    if state in ("held",):
        return "working"
    if state == "waiting" or needs:
        return "waiting"
    return "ready"


def _interrupted(entries: list[JournalEntry], held_epoch: int | None) -> list[int]:
    """The seqs of unsafe intents nothing resolved (`steps.open_intents`) whose writer can no longer resolve them:
    the claim is not held, or held at another epoch. A desk writes `outcome_unknown` only when it recovers; a
    desk killed right after an unsafe step leaves only its intent, and the effect may have happened."""
    return [e.seq for e in open_intents(entries) if e.policy == "unsafe" and e.epoch != held_epoch]


def _stuck(read: ForgeRead, brief: str, tip: Claim) -> bool:
    """A sweeper reported this epoch as renewing without progress, and its journal and branch still stand."""
    log = read.journals.get(brief)
    journal = log.tip or "" if isinstance(log, JournalLog) else ""
    key = f"stuck:{brief}:{tip.record.epoch}:{journal}:{read.branches.get(brief, '')}"
    return key in read.observations.findings


def _lease_age(read: ForgeRead, brief: str, tip: Claim, now: float) -> tuple[int, str]:
    """How long the claim's tip has stood, and by whose clock: `sweeper` when the sweepers' last observation
    still shows this tip (seconds since one first saw it: at least that long), else `desk` (seconds since the
    tip commit was written, a renewal or the record's change, by the writer's clock)."""
    seen = read.observations.briefs.get(brief)
    if seen is not None and seen.claim == tip.sha:
        return max(0, int(now - parse_iso(seen.claim_seen).timestamp())), "sweeper"
    written = read.written.get(tip.sha)
    return max(0, int(now - (written if written is not None else parse_iso(tip.record.at).timestamp()))), "desk"


def _custody(history: list[Claim | InvalidClaim], written: dict[str, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    whys = custody_reasons(history)
    at = 0  # the position in `history` of the row's first record
    for item, renewals in fold_renewals(history, lambda c: renewal_key(c.record) if isinstance(c, Claim) else None):
        last, why = history[at + renewals], whys[at]
        at += renewals + 1
        if isinstance(item, InvalidClaim):
            rows.append({"commit": item.sha, "invalid": item.problem})
            continue
        r = item.record
        rows.append({"commit": item.sha, "state": r.state, "epoch": r.epoch, "desk": r.desk, "holder": r.holder,
                     "at": r.at, "last_at": utc_now_iso(written[last.sha]) if last.sha in written else r.at,
                     "reason": r.reason, "renewals": renewals, "why": why})
    return rows


def _entry(e: JournalEntry) -> dict[str, Any]:
    return {"seq": e.seq, "epoch": e.epoch, "kind": e.kind, "at": e.at, "run": e.run, "step": e.step,
            "status": e.status, "policy": e.policy, "intent": e.intent}


def _desks(read: ForgeRead, cards: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """Every desk defined on main, and every other desk a claim names while live or as its expiry.

    `liveness` comes from forge evidence only, first match: `stale` (a held claim's tip stood still longer
    than its lease since a sweeper first saw it), `working` (a held claim with fresh evidence: a sweeper saw its
    tip less than a lease ago, or it moved after a sweep less than a lease ago), `dead` and `overdue` (a held
    claim's `claims.liveness`), `no-evidence` (held claims
    no sweeper can vouch for), `dead` (a sweeper expired its claim and that expiry is still the brief's
    latest record), `waiting` (only parked claims: waiting, or blocked for a person), else `idle`.
    """
    desks: dict[str, dict[str, Any]] = {
        name: {"desk": name, "defined": True, "liveness": "idle", "briefs": [], "expired": [], "holders": []}
        for name in read.desks}
    evidence: dict[str, set[str]] = {}
    for card in cards:
        live, expired = card["state"] in ("held", "waiting", "blocked"), card["state"] == "expired"
        if not card["desk"] or not (live or expired):
            continue
        d = desks.setdefault(card["desk"], {"desk": card["desk"], "defined": False, "liveness": "idle",
                                            "briefs": [], "expired": [], "holders": []})
        d["expired" if expired else "briefs"].append(card["id"])
        if live and card["holder"] not in d["holders"]:
            d["holders"].append(card["holder"])
        seen = evidence.setdefault(card["desk"], set())
        seen.add(_evidence(read, card, now) if card["state"] == "held" else card["state"])
        if card["liveness"]["word"] in ("dead", "overdue"):
            seen.add(f"holder-{card['liveness']['word']}")
    for name, seen in evidence.items():
        desks[name]["liveness"] = next((state for marks, state in (
            ({"stale"}, "stale"), ({"fresh"}, "working"), ({"holder-dead"}, "dead"), ({"holder-overdue"}, "overdue"),
            ({"none"}, "no-evidence"), ({"expired"}, "dead"),
            ({"waiting", "blocked"}, "waiting")) if marks & seen), "idle")
    return sorted(desks.values(), key=lambda d: str(d["desk"]))


def _evidence(read: ForgeRead, card: dict[str, Any], now: float) -> str:
    """What the sweepers show of a held claim: `stale`, `fresh` or `none` (see `_desks`)."""
    if card["lease_age_by"] == "sweeper":
        return "stale" if card["lease_age_s"] > card["lease_s"] else "fresh"
    obs = read.observations
    if read.sweeper_tip and obs.at and now - parse_iso(obs.at).timestamp() <= card["lease_s"]:
        return "fresh"  # the tip moved after a sweep that ran less than a lease ago
    return "none"


# -- building -----------------------------------------------------------------------------------


@dataclass
class Built:
    """What `build` wrote, and what it cost."""

    out: Path
    briefs: int
    files: int
    bytes: int
    round_trips: dict[str, int]
    seconds: float
    counts: dict[str, int]
    problems: int = 0  # records it could not read: each is a `problem` under needs you


def build(git: ForgeGit, reviews: Reviews, out: Path, now: float | None = None) -> Built:
    """Read the forge once and write `board.json`, `index.html`, `briefs/<id>.html`, `board.md` and the CSS."""
    from assay.observe import boardrender

    started = time.perf_counter()
    before = dict(git.round_trips)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder", hint="pass another -o DIR")
    data = assemble(read_forge(git, reviews), git.url, time.time() if now is None else now)
    files = boardrender.site(data)
    board_json = (json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    size = 0
    try:
        (out / "briefs").mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            encoded = text.encode("utf-8")
            (out / name).write_bytes(encoded)
            size += len(encoded)
        (out / "board.json").write_bytes(board_json)
    except OSError as exc:
        raise UsageError(f"cannot write the board into {out}: {exc.strerror or exc}",
                         hint="pass -o DIR, a folder you can write") from None
    trips = {k: v - before.get(k, 0) for k, v in git.round_trips.items() if v - before.get(k, 0)}
    return Built(out, len(data["briefs"]), len(files) + 1, size + len(board_json), trips,
                 time.perf_counter() - started, {c["id"]: c["count"] for c in data["columns"]},
                 data["needs_you_counts"]["problem"])


def serve(directory: Path, port: int, ready: Callable[[str], None]) -> None:
    """Serve the built site in `directory` on 127.0.0.1 until interrupted; `ready` gets the URL once listening."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    if not (directory / "index.html").is_file():
        raise UsageError(f"{directory} holds no built board (no index.html)", hint="run `assay board build` first")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(directory))
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", hint="pick another --port") from None
    with server:
        ready(f"http://127.0.0.1:{server.server_address[1]}/")
        server.serve_forever()
