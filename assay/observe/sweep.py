"""`assay sweep`: liveness judged from what the forge shows, never from a desk's word or its clock.

A sweep reads every claim, journal tip, work branch and review with one ls-remote and one
fetch, records when it first saw each tip (`observations.py`, by CAS, merged with any
concurrent sweeper), and then acts on what has stood still too long: a held claim whose tip
outlived its lease is expired (its desk renewing at that moment wins), a claim that renews
without progress is reported (or released), a waiting claim whose condition the forge shows
met is settled. Orphaned work, old unknown outcomes, blocked briefs and junk are reported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from assay.core import custody, landing
from assay.core.claims import OVERDUE_BEATS, Claim, Claims, forced_reason, holder_life
from assay.core.crash import crash_point
from assay.core.deskspec import PERSON_HEARTBEAT_S, desks_on_main
from assay.core.forge.base import Reviews
from assay.core.git import PACK_REFS_AT, ForgeGit
from assay.core.journal import read_log, read_logs, transition_as
from assay.core.lives import Life, life_state, this_life
from assay.core.observations import (
    SWEEPER_REF,
    BriefSeen,
    Observations,
    Recorded,
    UnknownSeen,
    seconds,
    write_observations,
)
from assay.core.outcomes import open_intents, unknown_outcomes
from assay.core.records import (
    TOMBSTONES,
    WORK_BRANCH_PREFIX,
    WORK_BRANCH_REF_PREFIX,
    JournalEntry,
    ReviewRecord,
    chain,
    claim_ref,
    journal_ref,
    parse_iso,
    utc_now_iso,
)
from assay.core.records.recordtype import dataclass, field
from assay.core.retire import retire
from assay.core.retired import RETIRED_REF
from assay.core.scan import Scan, read_observations, scan
from assay.errors import AssayError, Conflict, ForgeError, ForgeRefused, RecordInvalid
from assay.observe.sweepspec import DEFAULT_NAME, SweepPolicy, load_policy

_SWEEP_IDS: dict[int, str] = {}  # pid -> this sweeping process's id (drawn in each process: desks are forked)
BATCH_JOURNALS = 16  # more moved journals than this are read in one batch
Progress = Callable[[str], None]


@dataclass
class Finding:
    """One thing a sweep found, what it did about it, and whether it is reported for the first time."""

    kind: str  # lease, overdue, stuck, orphan, unknown, stray, wait, blocked, merged-held, junk, retire, stale
    brief: str
    detail: str
    key: str
    action: str = ""  # what the sweep did ("" for a report only)
    new: bool = True


@dataclass
class SweepReport:
    policy: str
    dry_run: bool
    at: str
    briefs: int
    findings: list[Finding] = field(default_factory=list)
    round_trips: dict[str, int] = field(default_factory=dict)
    packed_refs: int = 0  # loose refs a forge on this machine had when the sweep packed them


@dataclass
class ForgeState:
    """Everything one ls-remote and one fetch showed."""

    main: str
    claims: dict[str, Claim]
    reviews: dict[str, tuple[ReviewRecord, str]]
    journals: dict[str, str]
    branches: dict[str, str]
    junk: list[chain.InvalidRecord]
    base: Observations
    base_tip: str | None
    base_is_commit: bool
    heartbeats: dict[str, int] = field(default_factory=dict)  # desk -> heartbeat_s, from desks/*.yaml on main

    def briefs(self) -> set[str]:
        return set(self.claims) | set(self.journals)


# -- reading ------------------------------------------------------------------------------------


SWEPT = ("claims", "reviews", "journals", "branches", "learned", "main", "sweeper")  # the kinds of ref a sweep reads


def read_forge(claims: Claims, found: Scan | None = None) -> ForgeState:
    """One ls-remote for every ref a sweep needs (none when given a scan of them), one fetch for every tip it
    will read."""
    found = found if found is not None else scan(claims.git, SWEPT)
    found.fetch("claims", "reviews", "journals", "main", "sweeper")
    good, bad = claims.load_tips(found.tips["claims"])
    reviews, bad_reviews = found.reviews()
    seen = found.observations()
    desks, _ = desks_on_main(claims.git, found.main)  # a desk file that does not validate is the desk's to report
    junk = [*found.junk, *bad, *bad_reviews, *([seen.problem] if seen.problem else [])]
    return ForgeState(
        main=found.main, claims={c.record.brief: c for c in good},
        reviews={r.brief: (r, sha) for r, sha in reviews},
        journals=found.by_brief("journals"), branches=found.by_brief("branches"),
        junk=junk, base=seen.observations, base_tip=seen.tip, base_is_commit=seen.is_commit,
        heartbeats={d.name: d.heartbeat_s for d in desks})


def _reread_observations(state: ForgeState, git: ForgeGit) -> None:
    tip = git.ls_remote(SWEEPER_REF).get(SWEEPER_REF)
    if tip:
        git.ensure_objects({SWEEPER_REF: tip})
    seen = read_observations(git, tip)
    state.base, state.base_tip, state.base_is_commit = seen.observations, seen.tip, seen.is_commit


def unresolved_unknowns(git: ForgeGit, state: ForgeState) -> dict[str, list[tuple[int, str]] | RecordInvalid]:
    """Per brief, the `outcome_unknown` entries nothing resolved: decoded only for journals that moved
    since the last observation (the others keep what was observed)."""
    out: dict[str, list[tuple[int, str]] | RecordInvalid] = {}
    moved: dict[str, str] = {}
    for brief, tip in state.journals.items():
        seen = state.base.briefs.get(brief)
        if seen is not None and seen.journal == tip:
            out[brief] = [(u.seq, u.step) for u in seen.unknown]
        else:
            moved[brief] = tip
    # many moved journals (a first sweep): one rev-list and one cat-file batch for all of them; a few: each
    # from the decoded log kept in the cache, which reads only its new commits
    logs = read_logs(git, moved) if len(moved) > BATCH_JOURNALS else {}
    for brief, tip in moved.items():
        try:
            log = logs.get(brief) or read_log(git, brief, tip)
            if isinstance(log, RecordInvalid):
                raise log
            entries = log.entries
        except RecordInvalid as exc:
            out[brief] = exc
            continue
        out[brief] = [(e.seq, e.step or "") for e in unknown_outcomes(entries)]
    return out


def untaken_steering(git: ForgeGit, state: ForgeState) -> list[str]:
    """The briefs waiting on a round (their review, a merge, checks) whose journal moved since the last observation
    and holds steering no run took: a `steer` cut off between its entry and its wake. The desk that holds such a
    claim looks once as it begins to wait; the sweep looks for the fleet, reading only journals that moved (from
    the decoded-log cache: local git)."""
    out = []
    for brief, claim in sorted(state.claims.items()):
        tip = state.journals.get(brief)
        seen = state.base.briefs.get(brief)
        if tip is None or (seen is not None and seen.journal == tip) or claim.record.state != "waiting" \
                or str((claim.record.wait or {}).get("on", "")) not in custody.ROUND_WAITS:
            continue
        try:
            log = read_log(git, brief, tip)
        except RecordInvalid:
            continue  # junk: reported from unresolved_unknowns
        if not isinstance(log, RecordInvalid) and custody.pending_steering(log.entries):
            out.append(brief)
    return out


def _wake_for_steering(claims: Claims, briefs: list[str], by: str) -> list[Finding]:
    """Each of `briefs` woken for a new round that takes its steering (decided again on the journal the wake
    lands on: `custody.wake_for_steering`)."""
    out = []
    for brief in briefs:
        try:
            woken = custody.wake_for_steering(claims, brief, by)
        except AssayError as exc:  # housekeeping: the next sweep looks again
            out.append(Finding("steer", brief, f"steering no run took not acted on: {exc.message}",
                               f"steer:{brief}:failed", "failed"))
            continue
        if woken is not None:
            out.append(Finding("steer", brief, "steering no run took: woken for a new round", f"steer:{brief}",
                               "woken"))
    return out


def interrupted_effects(git: ForgeGit, state: ForgeState) -> dict[str, list[JournalEntry]]:
    """Per brief whose desk is gone (its claim is a tombstone: released, expired, abandoned; or it is held by a
    process whose life is over on this host), the intents nothing resolved. An unsafe one may or may not have
    happened, and no desk has said so yet: the next holder records `outcome_unknown` when it resumes; one whose
    writer still runs here can never journal its result. A few journals are read through the decoded-log cache
    (local git only); many, in one rev-list and one cat-file batch."""
    out: dict[str, list[JournalEntry]] = {}
    here = f"/{os.uname().nodename}/"  # a holder of another host (most of them) is judged by its lease, not here
    stopped = {b: state.journals[b] for b, c in state.claims.items() if b in state.journals
               and (c.record.state in TOMBSTONES
                    or (c.record.state == "held" and here in c.record.holder and _dead_here(c.record.holder)))}
    logs = read_logs(git, stopped) if len(stopped) > BATCH_JOURNALS else {}  # many: one batch for all
    for brief, tip in sorted(stopped.items()):
        try:
            log = logs.get(brief) or read_log(git, brief, tip)
            if isinstance(log, RecordInvalid):
                raise log
        except RecordInvalid:
            continue  # junk: reported from unresolved_unknowns
        cut = open_intents(log.entries)
        if cut:
            out[brief] = cut
    return out


def _dead_here(holder: str) -> bool:
    life = holder_life(holder)
    return life is not None and life_state(life) == "dead"


def _stray(e: JournalEntry) -> Life | None:
    """The writer of an open intent, if it still runs on this host."""
    life = Life.from_data(e.data or {})
    return life if life is not None and life.pid != this_life().pid and life_state(life) == "alive" else None


# -- judging ------------------------------------------------------------------------------------


def observe(state: ForgeState, unknowns: dict[str, list[tuple[int, str]] | RecordInvalid], now: float,
            read_at: float) -> Observations:
    """The observations after this sweep, on top of `state.base` (which may hold a concurrent sweeper's).

    A tip that is where the base saw it keeps the base's first-seen time; a different tip that a
    sweeper saw after this one read the forge is newer than what this one saw, and is kept.
    """
    at = utc_now_iso(now)
    base = state.base.briefs
    out: dict[str, BriefSeen] = {}
    for brief in sorted(state.briefs()):
        claim = state.claims.get(brief)
        tip, journal, branch = claim.sha if claim else "", state.journals.get(brief, ""), state.branches.get(brief, "")
        old = base.get(brief)
        found = unknowns.get(brief)
        if old is not None and old.claim == tip and old.journal == journal and old.branch == branch \
                and not old.unknown and not (isinstance(found, list) and found):
            out[brief] = old  # nothing moved, nothing unknown: as the base saw it (most briefs of a steady sweep)
            continue
        claim_tip, claim_seen = tip, at
        journal_tip, branch_tip, progress_seen = journal, branch, at
        if old is not None:
            if old.claim == tip or seconds(old.claim_seen) >= read_at:
                claim_tip, claim_seen = old.claim, old.claim_seen
            if (old.journal, old.branch) == (journal, branch) or seconds(old.progress_seen) >= read_at:
                journal_tip, branch_tip, progress_seen = old.journal, old.branch, old.progress_seen
        first = {u.seq: u.seen for u in old.unknown} if old else {}
        unknown = tuple(UnknownSeen(seq, step, first.get(seq, at))
                        for seq, step in (found if isinstance(found, list) else []))
        out[brief] = BriefSeen(claim_tip, claim_seen, journal_tip, branch_tip, progress_seen, unknown)
    for brief, old in base.items():  # a concurrent sweeper saw a brief this one did not: keep it
        if brief not in out and seconds(old.claim_seen) >= read_at:
            out[brief] = old
    return Observations(at, out, {})


def judge(state: ForgeState, seen: Observations, unknowns: dict[str, list[tuple[int, str]] | RecordInvalid],
          policy: SweepPolicy, now: float, interrupted: dict[str, list[JournalEntry]] | None = None) -> list[Finding]:
    """Every finding the forge and the observations show now (each keyed so it is recorded once)."""
    out: list[Finding] = []
    for brief, cut in sorted((interrupted or {}).items()):
        r = state.claims[brief].record
        for e in cut:
            stray = _stray(e)
            if stray is not None:
                out.append(Finding("stray", brief, f"step {e.step!r} (seq {e.seq}) still runs in process {stray.pid} "
                                   f"on {stray.host}, but its desk (epoch {e.epoch}) is gone, so its result can never "
                                   "be journaled; the process stops its command when it notices; if it does not, "
                                   f"stop it (kill {stray.pid}): the next holder then records its outcome",
                                   f"stray:{brief}:{e.seq}"))
            elif e.policy == "unsafe" and r.state in TOMBSTONES:
                out.append(Finding("unknown", brief, f"step {e.step!r} (seq {e.seq}) is an unsafe effect with no "
                                   f"result, and epoch {e.epoch}'s claim is {r.state}: it may or may not have run; "
                                   "the next holder records outcome_unknown and will not repeat it; inspect the "
                                   "system before anyone resumes", f"interrupted:{brief}:{e.seq}"))
    for brief, claim in sorted(state.claims.items()):
        out += _claim_findings(state, seen.briefs.get(brief), claim, policy, now)
    out += _orphans(state)
    for brief, found in sorted(unknowns.items()):
        if isinstance(found, RecordInvalid):
            out.append(Finding("junk", brief, found.problem, f"junk:{journal_ref(brief)}:{state.journals[brief]}"))
    for brief, s in sorted(seen.briefs.items()):
        for u in s.unknown:
            if now - seconds(u.seen) > policy.unknown_after_s:
                out.append(Finding("unknown", brief, f"step {u.step!r} (seq {u.seq}) may or may not have run, "
                                   f"seen since {u.seen}; inspect the system, then run it again deliberately "
                                   "or release the brief", f"unknown:{brief}:{u.seq}"))
    for bad in state.junk:
        brief = bad.ref.rsplit("/", 1)[-1] if bad.ref != SWEEPER_REF else ""
        out.append(Finding("junk", brief, f"{bad.ref}: {bad.problem}", f"junk:{bad.ref}:{bad.sha}"))
    return out


def _claim_findings(state: ForgeState, seen: BriefSeen | None, claim: Claim, policy: SweepPolicy,
                    now: float) -> list[Finding]:
    r, brief = claim.record, claim.record.brief
    out: list[Finding] = []
    review = state.reviews.get(brief)
    if r.state == "held" and seen is not None:
        still = now - seconds(seen.claim_seen)
        beat = state.heartbeats.get(r.desk, PERSON_HEARTBEAT_S)
        if seen.claim == claim.sha and still > r.lease_s + policy.grace_s:
            out.append(Finding("lease", brief, f"tip {claim.sha[:10]} of epoch {r.epoch} (desk {r.desk}, holder "
                               f"{r.holder}) has not moved for {int(still)}s; lease {r.lease_s}s + grace "
                               f"{policy.grace_s}s", f"lease:{brief}:{claim.sha}", "expire"))
        elif seen.claim == claim.sha and still > OVERDUE_BEATS * beat:  # long before the lease ends: said only
            out.append(Finding("overdue", brief, f"desk {r.desk} has not renewed epoch {r.epoch} for {int(still)}s "
                               f"(heartbeat {beat}s; its lease of {r.lease_s}s runs on)",
                               f"overdue:{brief}:{claim.sha}"))
        elif now - seconds(seen.progress_seen) > policy.stuck_after_s:
            out.append(Finding("stuck", brief, f"desk {r.desk} renews epoch {r.epoch}, but its journal and branch "
                               f"have not moved since {seen.progress_seen}",
                               f"stuck:{brief}:{r.epoch}:{seen.journal}:{seen.branch}",
                               "release" if policy.stuck_release else ""))
        if review and review[0].state == "merged":
            out.append(Finding("merged-held", brief, f"the review is merged while desk {r.desk} still holds epoch "
                               f"{r.epoch}", f"merged-held:{brief}:{r.epoch}:{review[1]}"))
    elif r.state == "waiting":
        met = custody.wait_met(r.wait, review[0] if review else None, now, lambda names: {
            n: state.claims[n].record.state for n in names if n in state.claims})  # a retired one: desks see it
        if met and policy.settle_waits:
            out.append(Finding("wait", brief, f"waiting on {(r.wait or {}).get('on')}: {met[1]}",
                               f"wait:{brief}:{claim.sha}", met[0]))
    elif r.state == "blocked":
        out.append(Finding("blocked", brief, r.reason or "no reason recorded", f"blocked:{brief}:{claim.sha}"))
    return out


def _orphans(state: ForgeState) -> list[Finding]:
    out: list[Finding] = []
    for brief in sorted(set(state.branches) | set(state.reviews)):
        claim = state.claims.get(brief)
        if claim is not None and claim.record.state not in TOMBSTONES:
            continue
        review = state.reviews.get(brief)
        if review is not None and review[0].state in ("merged", "closed") and brief not in state.branches:
            continue
        if review is not None and review[0].state == "merged":
            continue
        branch = state.branches.get(brief, "")
        held = f"its claim is {claim.record.state} at epoch {claim.record.epoch}" if claim else "it was never claimed"
        work = ", ".join(x for x in (f"branch {WORK_BRANCH_PREFIX}{brief} at {branch[:10]}" if branch else "",
                                     f"review {review[0].state}" if review else "") if x)
        out.append(Finding("orphan", brief, f"{work}; {held}: adoptable, the next claim resumes from the journal",
                           f"orphan:{brief}:{branch}:{review[1] if review else ''}"))
    return out


def record(findings: list[Finding], base: dict[str, Recorded], now: float, read_at: float) -> dict[str, Recorded]:
    """Findings recorded after this sweep: the current ones (first-recorded times kept), plus any a
    concurrent sweeper recorded after this one read the forge. Marks each finding new or not."""
    at = utc_now_iso(now)
    out = {k: v for k, v in base.items() if seconds(v.at) >= read_at}
    for f in findings:
        f.new = f.key not in base
        out[f.key] = base.get(f.key) or Recorded(f.kind, f.brief, at)
    return out


# -- the sweep ----------------------------------------------------------------------------------


def sweep(claims: Claims, *, policy_name: str = DEFAULT_NAME, now: float | None = None, dry_run: bool = False,
          progress: Progress = lambda _: None, desk: str | None = None, reviews: Reviews | None = None,
          found: Scan | None = None) -> SweepReport:
    """One sweep of the forge. `now` is the sweeper's clock (default: this machine's); `desk`, the desk
    sweeping, if a desk is (it leaves its own met waits to its pass); `reviews`, the forge's review port,
    read where reviews are not refs (pull requests on GitHub); `found`, a scan of the forge just made (of every
    kind in `SWEPT`), so that the sweep reads no ref list of its own."""
    git = claims.git
    before = dict(git.round_trips)
    api_before = _api_counts(reviews)
    now = time.time() if now is None else now
    progress("reading the forge")
    state = read_forge(claims, found)
    policy = load_policy(git, state.main, policy_name)
    unread = None
    if reviews is not None and not reviews.refs_backed:
        progress("reading the pull requests that claims wait on")
        unread = read_api_reviews(reviews, state)
    progress(f"reading {len(state.journals)} journals")
    unknowns = unresolved_unknowns(git, state)
    steered = untaken_steering(git, state)
    interrupted = interrupted_effects(git, state)
    by = f"sweeper:{policy.name}"
    if dry_run:
        findings = judge(state, observe(state, unknowns, now, now), unknowns, policy, now, interrupted)
        record(findings, state.base.findings, now, now)
    else:
        progress("recording observations")
        findings = _observe_and_record(git, state, unknowns, policy, now, by, interrupted)
        crash_point("sweep.after-observe")
    for i, f in enumerate(findings):
        if f.action and f.kind == "wait" and f.brief in state.claims and state.claims[f.brief].record.desk == desk:
            f.action = ""  # the sweeping desk settles its own waits on its pass, as it always does
        if f.action:
            progress(f"{f.action} {f.brief} ({i + 1}/{len(findings)})")
            f.action = f"would {f.action}" if dry_run else _act(claims, state, f, by)
    if reviews is not None and not dry_run and policy.settle_waits:
        progress("looking for ready reviews that main moved under")
        findings += _wake_stale(claims, reviews, state, by)
    if not dry_run and policy.settle_waits:
        findings += _wake_for_steering(claims, steered, by)
    findings += _retire(claims, state, policy, now, dry_run, by)
    if unread is not None:
        findings.append(unread)
    packed = 0 if dry_run else git.pack_forge_refs(PACK_REFS_AT) or 0
    trips = {k: v - before.get(k, 0) for k, v in git.round_trips.items() if v - before.get(k, 0)}
    trips.update({k: v - api_before.get(k, 0) for k, v in _api_counts(reviews).items() if v - api_before.get(k, 0)})
    return SweepReport(policy.name, dry_run, utc_now_iso(now), len(state.briefs()), findings, trips, packed)


def needs_review(claim: Claim, branches: dict[str, str]) -> bool:
    """Whether judging this claim needs its review: it waits on it, or it is held and has a work branch
    (a pull request needs one), so a merge under a held claim is found."""
    r = claim.record
    if r.state == "waiting":
        return str((r.wait or {}).get("on", "")) in ("review", "merge")
    return r.state == "held" and r.brief in branches


def read_api_reviews(reviews: Reviews, state: ForgeState) -> Finding | None:
    """Fill `state.reviews` from the review port for the claims that need it (conditional reads, free
    when unchanged). If the forge's API cannot be read, the sweep goes on without them and says so."""
    briefs = sorted(b for b, c in state.claims.items() if needs_review(c, state.branches))
    try:
        found = reviews.peek_many(briefs)
    except (ForgeError, RecordInvalid) as exc:
        return Finding("reviews", "", f"reviews not read ({exc.message}); waits on them are not settled by this "
                       "sweep", "reviews:unread")
    for brief, review in found.items():
        state.reviews[brief] = (review.record, review.sha)
    return None


def _api_counts(reviews: Reviews | None) -> dict[str, int]:
    """Requests the review port made so far (`api`), and the 304s among them (`api-304`)."""
    return reviews.counts() if reviews is not None else {}


def _wake_stale(claims: Claims, reviews: Reviews, state: ForgeState, by: str) -> list[Finding]:
    """Ready reviews that no longer merge cleanly into main: each woken for a new round, once per (brief, main)."""
    waiting = [b for b, c in state.claims.items() if c.record.state == "waiting"
               and str((c.record.wait or {}).get("on", "")) in ("review", "merge")]
    try:
        woken = landing.wake_stale(claims, reviews, waiting, by, {b: r for b, (r, _) in state.reviews.items()})
    except AssayError as exc:  # housekeeping: a failure is a finding, never a failed sweep
        return [Finding("stale", "", f"ready reviews not checked against main: {exc.message}", "stale:failed",
                        "failed")]
    return [Finding("stale", w.brief, w.did[-1] if w.did else "", f"stale:{w.brief}:{state.main}", "woken")
            for w in woken]


def _retire(claims: Claims, state: ForgeState, policy: SweepPolicy, now: float, dry_run: bool,
            by: str) -> list[Finding]:
    """Retire the briefs done for longer than the policy says (by the sweeper's clock)."""
    due = sorted(b for b, c in state.claims.items()
                 if c.record.state == "done" and now - parse_iso(c.record.at).timestamp() >= policy.retire_after_s)
    if not policy.retire or not due:
        return []
    try:
        done = retire(claims, due, by=by, dry_run=dry_run)
    except AssayError as exc:  # retiring is housekeeping: a failure is a finding, never a failed sweep
        return [Finding("retire", ", ".join(due[:3]) + (" …" if len(due) > 3 else ""), f"not retired: {exc.message}",
                        f"retire-failed:{due[0]}", "failed")]
    return [Finding("retire", b, f"done at {state.claims[b].record.at}; its refs are folded into {RETIRED_REF}",
                    f"retire:{b}", "would retire" if dry_run else "retired") for b in done.retired]


def _observe_and_record(git: ForgeGit, state: ForgeState, unknowns: dict[str, list[tuple[int, str]] | RecordInvalid],
                        policy: SweepPolicy, now: float, by: str,
                        interrupted: dict[str, list[JournalEntry]]) -> list[Finding]:
    """Push this sweep's observations and findings by CAS; a concurrent sweeper's push is merged, not lost."""
    def attempt(n: int) -> list[Finding]:
        if n:
            _reread_observations(state, git)
        seen = observe(state, unknowns, now, now)
        findings = judge(state, seen, unknowns, policy, now, interrupted)
        seen.findings = record(findings, state.base.findings, now, now)
        if state.base_is_commit and (seen.briefs, seen.findings) == (state.base.briefs, state.base.findings):
            return findings  # nothing new was seen: no push (a fleet of idle desks sweeping writes nothing)
        write_observations(git, seen, state.base_tip, state.base_is_commit, f"{len(findings)} findings", by, now)
        return findings

    return chain.retrying(attempt, "recording the sweep's observations")


def _act(claims: Claims, state: ForgeState, f: Finding, by: str) -> str:
    """Do what a finding calls for; every write is a CAS, so a concurrent writer makes this a no-op."""
    claim = state.claims[f.brief]
    r = claim.record
    # this sweeping process: two sweepers' commits are never the same commit
    run = f"{by}:{_SWEEP_IDS.setdefault(this_life().pid, os.urandom(4).hex())}"
    try:
        if f.action == "expire":
            return _expire(claims, claim, f.detail, by, run)
        if f.action == "release":
            why = forced_reason(f"stuck: {f.detail}", by)
            expect = {journal_ref(f.brief): state.journals.get(f.brief, ""),
                      WORK_BRANCH_REF_PREFIX + f.brief: state.branches.get(f.brief, "")}
            transition_as(claims, f.brief, "force_release", "claim", {"action": "force-release", "reason": why}, by,
                          run, expect=expect, reason=why)
            return "released"
        if f.action == "done":
            custody.release(claims, f.brief, r.desk, outcome="done", reason="review merged", epoch=r.epoch, by=by,
                            run=run)
            return "released as done"
        if f.action == "block":
            custody.block(claims, f.brief, r.desk, r.epoch, "the review was closed; release the claim to have it "
                          "redone, or remove the brief from main", by=by, run=run)
            return "blocked for a person"
        if f.action == "wake":
            custody.wake(claims, f.brief, by=by, desk=r.desk, epoch=r.epoch, run=run)
            return "woken"
    except Conflict as exc:
        return f"not needed: {exc.message}"
    except (ForgeRefused, RecordInvalid) as exc:
        if isinstance(exc, ForgeRefused) and exc.lock is not None:  # the board shows a person what to remove
            custody.note_locked(claims, f.brief, exc.lock, by, run)
        return f"failed: {exc.message}"
    raise AssertionError(f"unknown sweep action {f.action!r}")


def _expire(claims: Claims, claim: Claim, why: str, by: str, run: str) -> str:
    """Expire exactly the tip that stood still, journaled with it; its desk renewing first wins."""
    brief, reason = claim.record.brief, f"expired by {run}: {why}"  # {run}: two sweepers never write one commit
    try:
        transition_as(claims, brief, "expire", "claim", {"action": "expire", "reason": reason}, by, run,
                      expect={claim_ref(brief): claim.sha}, reason=reason)
        return "expired"
    except Conflict:
        return _after_race(claims, claim)
    except (ForgeRefused, RecordInvalid) as exc:  # a journal that cannot be written does not keep a dead claim
        try:
            claims.expire(claim, f"{reason} (not journaled: {exc.message})", by)
        except chain.Moved:
            return _after_race(claims, claim)
        return "expired (claim only)"


def _after_race(claims: Claims, claim: Claim) -> str:
    now = claims.read(claim.record.brief)
    if now is not None and now.record.state == "expired" and now.record.epoch == claim.record.epoch:
        return "not needed: another sweeper expired it"
    state = f"{now.record.state} at epoch {now.record.epoch}" if now else "gone"
    return f"kept: the claim moved at the lease edge (now {state}); its desk is alive"
