"""The claim state machine over CAS refs: the only writer of `refs/assay/claims/*`.

A claim chain is never deleted: every change is a new commit on top of the
tip, pushed with a lease on that tip, so two racing writers can never both
win. `transition` owns the whole table; an illegal change is refused before
anything is pushed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence

from assay.core import cachefile, retired
from assay.core.footprints import FOOTPRINTS_REF, learned_ref
from assay.core.git import ForgeGit, GitObject, RefUpdate, committed_at
from assay.core.lives import BOOT_PREFIX, Life, life_state, this_life
from assay.core.records import (
    CLAIMS_PREFIX,
    FORMAT_VERSION,
    LEARNED_PREFIX,
    LIVE_STATES,
    MAIN_REF,
    STATES,
    WORK_BRANCH_PREFIX,
    ClaimRecord,
    brief_id_problem,
    chain,
    check_tip,
    claim_ref,
    decode_claim,
    human_age,
    utc_now_iso,
    validate_brief_id,
)
from assay.core.records.recordtype import dataclass, field
from assay.errors import (
    AssayError,
    BriefInvalid,
    BriefNotFound,
    Busy,
    ClaimLost,
    Conflict,
    Fenced,
    IllegalTransition,
    NoMainBranch,
    Queued,
    RecordInvalid,
    UsageError,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:  # a scan (briefs, observations) is read by a look or a listing, not by a claim or a renewal
    from typing import Any, TypeVar

    from assay.core.scan import Scan

    T = TypeVar("T")

Clock = Callable[[], float]
_HOLDER = re.compile(r"[^/]*/(?P<host>[^/]*)/(?P<pid>[0-9]{1,10})/[^/.]*(?:\.(?P<start>[0-9]{1,20})"
                     r"(?:\.(?P<boot>[0-9a-f][0-9a-f-]{7,35}))?)?")

# action -> (states it may start from; None is "no claim yet"), the state it leads to
# (None: the state is the caller's choice among `OUTCOMES`, or unchanged for renew).
TRANSITIONS: dict[str, tuple[frozenset[str | None], str | None]] = {
    "claim": (frozenset({None, "released", "expired", "abandoned"}), "held"),
    "takeover": (frozenset({"held", "waiting"}), "held"),
    "renew": (frozenset({"held", "waiting"}), None),
    "wait": (frozenset({"held"}), "waiting"),
    "wake": (frozenset({"waiting"}), "held"),
    "block": (frozenset({"held", "waiting"}), "blocked"),
    "release": (frozenset({"held", "waiting", "blocked"}), None),
    "expire": (frozenset({"held", "waiting"}), "expired"),
    "force_release": (frozenset({"held", "waiting", "blocked"}), "released"),
}
OUTCOMES = ("released", "done", "abandoned")
HOLDER_ACTIONS = frozenset({"renew", "wait", "wake", "block", "release"})
NEW_EPOCH_ACTIONS = frozenset({"claim", "takeover"})
DEFAULT_LEASE_S = 600
LEARN_TRIES = 6  # pushes of a learned footprint alone, while its claim moves with its journal (or junk is replaced)
MAX_LEASE_S = 7 * 24 * 3600


@dataclass(frozen=True)
class Claim:
    """A claim record and the commit that holds it."""

    record: ClaimRecord
    sha: str


InvalidClaim = chain.InvalidRecord


def new_holder(desk: str) -> str:
    """desk/host/pid/nonce.start.boot: which process life of which desk holds a claim.

    `start` and `boot` (the first 8 characters of the boot id) are left out where
    they are unknown; holders written before them are desk/host/pid/nonce.
    """
    life = this_life()
    tail = "" if life.start is None else f".{life.start}"
    if tail and life.boot is not None:
        tail += f".{life.boot[:BOOT_PREFIX]}"
    return f"{desk}/{life.host}/{life.pid}/{os.urandom(2).hex()}{tail}"


def holder_life(holder: str) -> Life | None:
    """The process life a holder names; None for a holder not in the `new_holder` form."""
    m = _HOLDER.fullmatch(holder)
    if m is None:
        return None
    return Life(m["host"], int(m["pid"]), int(m["start"]) if m["start"] else None, m["boot"])


def refuse_living_holder(record: ClaimRecord) -> None:
    """A takeover is only from a holder whose life is over, or cannot be judged from here (another host: the
    singleton's word that it is the only process of its desk): a `held` claim whose holder runs on this host, even
    paused (SIGSTOP), raises ClaimLost. Its lease ends it, by the sweeper, if it never comes back."""
    life = holder_life(record.holder)
    if record.state != "held" or life is None or life.pid == this_life().pid or life_state(life) != "alive":
        return
    raise ClaimLost(record.brief, record.state, record.desk, record.holder, record.epoch,
                    f", by a process still running here (pid {life.pid}, perhaps paused)",
                    f"it is taken over once that process has ended or the sweeper has expired its lease "
                    f"({record.lease_s}s)")


OVERDUE_BEATS = 3  # a held claim not renewed for this many of its desk's heartbeats is overdue


@dataclass(frozen=True)
class Liveness:
    """A claim's liveness from forge evidence alone: `live`, `overdue` or `dead` for a held claim, "" otherwise;
    for `overdue` and `dead`, `until` says when its lease ends and so when a sweep expires it (`lease_end`)."""

    word: str
    why: str = ""
    until: str = ""

    def advice(self, brief: str, desk: str) -> str:
        """What ends an overdue or dead claim: the sweep, when its lease ends, or a person now ("" for any other)."""
        if self.word not in ("dead", "overdue"):
            return ""
        return f"{self.until}, or `{force_release_command(brief, desk)}` now"


def force_release_command(brief: str, desk: str) -> str:
    return f"assay release {brief} --force --reason '{desk} stopped'"


def liveness(record: ClaimRecord, age_s: int | None, heartbeat_s: int, clock: str = "desk") -> Liveness:
    """`dead` when its holder's process is over (judged where that process ran: this host) and a heartbeat has
    passed without a renewal (a claim taken with `assay claim` names that short command as its holder: a person or
    an agent renews it by hand), `overdue` when its tip has stood longer than `OVERDUE_BEATS` heartbeats (`age_s`:
    since it was last written, by `clock`: `desk` or `sweeper`), long before its lease ends; else `live`."""
    if record.state != "held":
        return Liveness("")
    life = holder_life(record.holder)
    quiet = age_s is not None and age_s > heartbeat_s
    if quiet and life is not None and life_state(life) == "dead":
        return Liveness("dead", f"{record.desk}'s process (pid {life.pid} on {life.host}) has ended (lease "
                                f"{record.lease_s}s)", lease_end(record.lease_s, age_s, clock))
    if age_s is not None and age_s > OVERDUE_BEATS * heartbeat_s:
        return Liveness("overdue", f"{record.desk} has not renewed for {human_age(age_s)} (heartbeat {heartbeat_s}s, "
                                   f"lease {record.lease_s}s)", lease_end(record.lease_s, age_s, clock))
    return Liveness("live")


def lease_end(lease_s: int, age_s: int | None, clock: str = "desk") -> str:
    """When a claim's lease ends, and so when a sweep expires it: once a sweeper has seen its tip unchanged for the
    lease and the policy's grace (`sweep._claim_findings`). By the `desk` clock the age is since the tip was
    written, which a sweeper sees at its next pass: its count starts then."""
    if age_s is None:
        return f"a sweep expires it once it has seen the claim unchanged for its lease ({lease_s}s)"
    left = lease_s - age_s
    by = "" if clock == "sweeper" else " by its desk's clock"
    if left > 0:
        return f"lease ends in {human_age(left)}{by}; the sweep expires it then"
    return f"lease ended {human_age(-left)} ago{by}; the " + ("next sweep expires it" if clock == "sweeper" else
                                                              "sweep expires it once it has seen it unchanged so long")


def transition(current: ClaimRecord | None, action: str, brief: str, *, at: str, desk: str = "",
               holder: str = "", lease_s: int | None = None, outcome: str | None = None,
               reason: str = "", epoch: int | None = None, wait: dict[str, object] | None = None) -> ClaimRecord:
    """The one transition table. Returns the next record or raises before anything is written."""
    if action not in TRANSITIONS:
        raise UsageError(f"unknown claim action {action!r}")
    allowed, target = TRANSITIONS[action]
    state = current.state if current else None
    if action in HOLDER_ACTIONS and epoch is not None:
        fence(current, brief, desk, epoch)
    if state not in allowed:
        if action == "claim" and current is not None and current.live:
            raise ClaimLost(brief, current.state, current.desk, current.holder, current.epoch)
        why = "a done brief is finished; reopen it on main as a new brief" if state == "done" else ""
        raise IllegalTransition(brief, action.replace("_", "-"), state or "absent", why)
    if action in HOLDER_ACTIONS or action == "takeover":
        assert current is not None
        if desk and current.desk != desk:
            raise ClaimLost(brief, current.state, current.desk, current.holder, current.epoch)
    if action in NEW_EPOCH_ACTIONS:
        return ClaimRecord(brief=brief, state="held", epoch=(current.epoch + 1) if current else 1, desk=desk,
                           holder=holder or new_holder(desk), lease_s=lease_s or DEFAULT_LEASE_S,
                           branch=WORK_BRANCH_PREFIX + brief, at=at, reason=reason)
    assert current is not None
    if action == "renew":  # `at` is when the state last changed; a renewal is the commit itself
        return current.but(lease_s=lease_s or current.lease_s)
    if action == "release":
        if outcome not in OUTCOMES:
            raise UsageError(f"release outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        return current.but(state=outcome, at=at, reason=reason, wait=None)
    if action == "force_release" and not reason.strip():
        raise UsageError("a forced release needs a reason", hint="pass --reason 'why the claim is taken away'")
    assert target is not None
    return current.but(state=target, at=at, reason=reason, wait=wait if action == "wait" else None)


def fence(current: ClaimRecord | None, brief: str, desk: str, epoch: int) -> None:
    """Raise Fenced unless `desk` (any desk, if empty) still holds `brief` at `epoch`."""
    if current is None:
        raise Fenced(brief, desk, epoch, "the brief has never been claimed")
    if current.epoch != epoch or (desk and current.desk != desk) or not current.live:
        raise Fenced(brief, desk or current.desk, epoch,
                     f"the claim is now {current.state} at epoch {current.epoch} by desk {current.desk!r}")


@dataclass
class ForgeView:
    """Claim tips and main as one ls-remote saw them: a hint for the next push, never the check."""

    tips: dict[str, str]
    main: str
    retired: str | None  # the tip of refs/assay/retired
    scan: Scan  # the read it came from (junk claim refs set aside there)
    footprints: str | None = None  # the tip of refs/assay/footprints
    learned: dict[str, str] = field(default_factory=dict)  # refs/assay/learned/<brief> -> tip


def _view(found: Scan) -> ForgeView:
    return ForgeView(dict(found.tips["claims"]), found.main, found.tip("retired"), found, found.tip("footprints"),
                     dict(found.tips["learned"]))


class Claims:
    """Claim operations on one forge. Receives its git port and clock."""

    def __init__(self, git: ForgeGit, clock: Clock = time.time) -> None:
        self.git = git
        self.clock = clock
        self.view: ForgeView | None = None
        self._kept: ForgeView | None = None  # a view read with keep=True, for the next read_view
        self._brief_on_main: dict[tuple[str, str], tuple[str, ...] | None] = {}

    def spare(self) -> Claims:
        """Claims on a spare git port (`ForgeGit.spare`), for another thread; the caller closes its git."""
        return Claims(self.git.spare(), self.clock)

    # -- reading --------------------------------------------------------------------

    def read(self, brief: str) -> Claim | None:
        ref = claim_ref(brief)
        tip = self.git.ls_remote(ref).get(ref)
        return self.load(ref, tip) if tip else None

    def load(self, ref: str, sha: str) -> Claim:
        """The claim record in commit `sha` of `ref` (fetched if the cache lacks it); RecordInvalid for junk."""
        return Claim(chain.read_one(self.git, ref, sha, CLAIMS_PREFIX, "claim.json", decode_claim), sha)

    def load_tips(self, tips: dict[str, str], every: bool = True) -> tuple[list[Claim], list[InvalidClaim]]:
        """The claims at `tips` (ref -> sha), and the junk among them, in ref order.

        A tip read before is taken from the cache's `DECODED` file (commit id -> record, so an
        entry never goes stale); the others are read with one fetch and one cat-file batch.
        Listings and choosing use this; every write still reads its tip and compares-and-swaps.
        `every`: `tips` are every claim on the forge, so what is remembered of others is forgotten (else the
        claims read are remembered beside it).
        """
        seen = _TIPS_SEEN.get(self.git.cache, {})
        if all((ref, sha) in seen for ref, sha in tips.items()):  # a pass that found no claim moved: no file read
            now = {(ref, sha): seen[(ref, sha)] for ref, sha in tips.items()}
            if every:
                _TIPS_SEEN[self.git.cache] = now
            return sorted(now.values(), key=lambda c: c.record.brief), []
        path = os.path.join(self.git.cache, DECODED)
        known = cachefile.load(path)
        remembered = known.get("claims") if known.get("v") == FORMAT_VERSION else None
        memo: dict[str, Any] = remembered if isinstance(remembered, dict) else {}
        hits: list[Claim] = []
        todo: dict[str, str] = {}
        for ref, sha in tips.items():
            record = _recall(memo.get(sha), ref)
            if record is None:
                todo[ref] = sha
            else:
                hits.append(Claim(record, sha))
        good, bad = chain.read_tips(self.git, todo, CLAIMS_PREFIX, "claim.json", decode_claim)
        fresh = [Claim(record, sha) for record, sha in good]
        claims = sorted([*hits, *fresh], key=lambda c: c.record.brief) if hits and fresh else hits or fresh
        if every and (fresh or len(hits) != len(memo)):  # only the tips seen now: the file never outgrows the forge
            cachefile.save(path, {"v": FORMAT_VERSION, "claims": {c.sha: _remember(c.record) for c in claims}})
        elif fresh:
            kept = {**memo, **{c.sha: _remember(c.record) for c in fresh}}  # beside the rest, forgotten at the next
            cachefile.save(path, {"v": FORMAT_VERSION, "claims": kept})  # reading of every claim
        if not bad:  # junk is read, and reported, afresh each time
            read = {(CLAIMS_PREFIX + c.record.brief, c.sha): c for c in claims}
            _TIPS_SEEN[self.git.cache] = read if every else {**seen, **read}
        return claims, bad

    def progress(self, claims: Sequence[Claim]) -> dict[str, str]:
        """What each held claim's tip commit says of its agent's progress (`Progress: …` in a renewal's message),
        by tip; local reads of commits fetched already."""
        objects = self.git.read_typed([c.sha for c in claims])
        out = {}
        for claim, obj in zip(claims, objects, strict=True):
            if obj is not None and obj.kind == "commit" and claim.record.state == "held":
                said = progress_in(obj.data)
                if said:
                    out[claim.sha] = said
        return out

    def written(self, claims: Sequence[Claim]) -> dict[str, int]:
        """Each claim tip's commit time, by the writer's clock (a renewal repeats its record: only its commit tells
        when); local reads of commits fetched already."""
        objects = self.git.read_typed([c.sha for c in claims])
        out = {}
        for claim, obj in zip(claims, objects, strict=True):
            stamp = committed_at(obj.data if obj is not None and obj.kind == "commit" else None)
            if stamp is not None:
                out[claim.sha] = stamp
        return out

    def list_all(self) -> tuple[list[Claim], list[InvalidClaim]]:
        """Every claim tip on the forge: one ls-remote, one fetch, one cat-file."""
        return self.load_tips(self.git.ls_remote(CLAIMS_PREFIX + "*"))

    def history(self, brief: str, refs: Mapping[str, str] | None = None) -> list[Claim | InvalidClaim]:
        """The custody chain of `brief`, oldest first (also of a retired brief); RecordInvalid if its ref
        is not a commit. `refs`: the forge's refs read already (see `retired.tip_of`)."""
        ref = claim_ref(brief)
        tip = retired.tip_of(self.git, ref, refs)
        if not tip:
            return []
        self.git.ensure_objects({ref: tip})
        shas = list(reversed(self.git.rev_list(tip)))  # empty if the tip is no commit
        head, *blobs = self.git.read_typed([tip, *(f"{s}:claim.json" for s in shas)])
        check_tip(ref, tip, head.kind if head else None)
        return decode_chain(ref, shas, blobs)

    # -- writing --------------------------------------------------------------------

    def read_view(self, keep: bool = False) -> ForgeView:
        """Read every claim tip, main and the retired index in one round trip, for callers that pick among
        many briefs.

        With `keep`, the next call returns this view instead of reading again: for a caller that
        needs main just before a pass that reads everything (with thousands of refs on the forge,
        each ls-remote costs the forge a read of every ref, whatever the pattern).
        """
        if self._kept is not None:
            self.view, self._kept = self._kept, None
            return self.view
        from assay.core.scan import QUEUE, scan

        self.view = _view(scan(self.git, QUEUE))  # NoMainBranch if the forge has no main
        if keep:
            self._kept = self.view  # the same object: a write meanwhile updates its tip in both
        return self.view

    def keep(self, found: Scan) -> None:
        """Make a scan read by someone else (of at least the queue's kinds) the next `read_view`: one ref
        advertisement serves a desk's sweep and its look."""
        from assay.core.scan import QUEUE

        assert all(kind in found.kinds for kind in QUEUE), found.kinds
        self._kept = _view(found)

    def claim(self, brief: str, desk: str, lease_s: int = DEFAULT_LEASE_S, *, singleton: bool = False,
              holder: str = "", require_brief: bool = True, taking_from: frozenset[str] | None = None) -> Claim:
        """Take `brief` for `desk`; exactly one of any number of racing callers wins.

        After `read_view()`, the first attempt trusts the tip it saw: the lease on the push
        is the real check, and a stale view costs one re-read, never a double claim.
        `taking_from`: the states a takeover was judged from (a desk taking over its dead process's `held` claim);
        a claim found in another state when it is written (its wait landed meanwhile) is not taken: Conflict.
        """
        validate_brief_id(brief)
        validate_desk(desk)
        validate_lease(lease_s)
        ref = claim_ref(brief)

        def attempt(n: int) -> Claim:
            trust_view = n == 0 and self.view is not None
            main: str | None
            if trust_view:
                assert self.view is not None
                tip, main, retired_tip = self.view.tips.get(ref), self.view.main, self.view.retired
                prints, learned = self.view.footprints, self.view.learned
            else:
                refs = self.git.ls_remote(ref, MAIN_REF, retired.RETIRED_REF, FOOTPRINTS_REF, LEARNED_PREFIX + "*")
                tip, main, retired_tip = refs.get(ref), refs.get(MAIN_REF), refs.get(retired.RETIRED_REF)
                prints = refs.get(FOOTPRINTS_REF)
                learned = {r: sha for r, sha in refs.items()  # a ref that names no brief is junk: no footprint
                           if r.startswith(LEARNED_PREFIX) and brief_id_problem(r.removeprefix(LEARNED_PREFIX)) is None}
            if not tip:  # never claimed, or done and retired (its claim ref is gone, its record is in the index)
                retired.refuse_if_retired(self.git, retired_tip, brief, "claim")
            touches = self._require_brief(brief, main) if require_brief else ()
            current = self.load(ref, tip) if tip else None
            action = "claim"
            if singleton and current and current.record.live and current.record.desk == desk:
                action = "takeover"
                if taking_from is not None and current.record.state not in taking_from:
                    raise Conflict(f"brief {brief!r} is {current.record.state} now, not "
                                   f"{' or '.join(sorted(taking_from))}: not taken over",
                                   hint="its holder moved it on before it ended; nothing was written")
                refuse_living_holder(current.record)
            try:
                record = transition(current.record if current else None, action, brief, at=self._now(), desk=desk,
                                    holder=holder, lease_s=lease_s)
            except ClaimLost:
                if trust_view:
                    raise chain.Moved([ref]) from None  # the synced view may be older than a release: look again
                raise
            if (touches or (current and (prints or learned_ref(brief) in learned))) and action != "takeover":
                # a footprint of its own, or perhaps one learned from its diff under a claim before (a brief never
                # claimed has learned none: the footprints are not read for it); a takeover goes on with work
                # already in flight (its footprint was judged when it was claimed, or learned since): never queued
                # behind briefs it already ran beside
                return self._claim_apart(current, record, action, touches, prints, learned, trust_view)
            return self._write(current, record, action)  # Moved: re-read; a live claim there means we lost

        return chain.retrying(attempt, f"claiming {brief!r}")

    def _claim_apart(self, current: Claim | None, record: ClaimRecord, action: str, declared: tuple[str, ...],
                     prints: str | None, learned: Mapping[str, str], trust_view: bool) -> Claim:
        """Claim a brief that has a footprint, only if it overlaps no live claim's footprint (the shared ref's, and
        those learned on their briefs' refs, `learned`: ref -> tip): the claim commit and the shared footprints
        commit that adds it go in one atomic push, each with a lease, so of desks racing to take overlapping
        briefs one wins and the others find it when they read again. `Queued` if one overlaps. A learned
        footprint that lands meanwhile is after the fact, as its work was: the claim is as one made before it."""
        from assay.core import footprints

        brief = record.brief
        try:
            shared = footprints.read(self.git, prints)
        except RecordInvalid:
            if declared:
                raise
            return self._write(current, record, action)  # junk there: an undeclared brief is taken as ever
        own = shared.get(brief)
        if own is None and not declared and learned_ref(brief) in learned:
            own = footprints.read_learned(self.git, {learned_ref(brief): learned[learned_ref(brief)]})[0].get(brief)
        touches = declared or (own.touches if own else ())
        if not touches:
            return self._write(current, record, action)
        done = self._known_done()  # final: their footprints hold nothing back, and need not be read
        others = {ref: sha for ref, sha in learned.items()
                  if (b := ref.removeprefix(LEARNED_PREFIX)) != brief and b not in shared and b not in done}
        known = [*shared.items(), *footprints.read_learned(self.git, others)[0].items()]  # junk there: learned none
        near = {other: pairs for other, entry in known
                if other != brief and (pairs := footprints.overlap(touches, entry.touches))}
        assert self.view is not None or not trust_view
        wanted = [claim_ref(o) for o in sorted(near)]
        tips = self.view.tips if trust_view and self.view else self.git.ls_remote(
            *(wanted if len(wanted) <= 64 else [CLAIMS_PREFIX + "*"])) if wanted else {}
        states = self._states({o: tips.get(claim_ref(o)) for o in near})
        behind = {other: footprints.described(pairs) for other, pairs in near.items() if states[other] in _HOLDING}
        if behind:
            if trust_view:
                raise chain.Moved([FOOTPRINTS_REF])  # the synced view may be older than their release: look again
            raise Queued(brief, behind)
        source = "declared" if declared else own.source if own else "declared"
        # entries of finished briefs (done, abandoned, or retired: no claim ref) go; a released or expired brief keeps
        # its footprint for when it is taken again
        gone = {other for other in near if states[other] in (None, "done", "abandoned")}
        if trust_view and self.view is not None:  # listed with the footprints' tip, in the same advertisement
            gone |= {other for other in shared if other != brief and claim_ref(other) not in self.view.tips}
        kept = {other: known for other, known in shared.items() if other not in gone}
        kept[brief] = footprints.Footprint(tuple(touches), source, record.epoch)
        said = ", ".join(touches[:8]) + (f" and {len(touches) - 8} more" if len(touches) > 8 else "")
        update = self.prepare(current, record, action, footnote=f"Footprint ({source}): {said}; apart from every "
                              f"live footprint at {FOOTPRINTS_REF} {(prints or 'absent')[:12]} and "
                              f"{len(learned)} learned ones")
        moved = footprints.update(self.git, prints, kept, f"assay: {action} {brief} with its footprint "
                                  f"(epoch {record.epoch}, desk {record.desk})", record.desk or "assay", self.clock())
        chain.push(self.git, [update, moved], action.replace("_", "-"))
        if self.view is not None:
            self.view.tips[update.ref] = update.new
            self.view.footprints = moved.new
        return Claim(record, update.new)

    def footprint_update(self, brief: str, desk: str, epoch: int, paths: Sequence[str],
                         tip: str | None) -> RefUpdate | None:
        """For a brief that declares no `touches:`: the commit setting `refs/assay/learned/<brief>` (now at `tip`)
        to the footprint its first round's diff shows (the files it changed), not pushed; None if it holds one
        already or the round changed nothing (junk there is replaced). It rides the journal push of that round's
        work (`Journal.add(riders=…)`), fenced by its claim (left out if the ref moved meanwhile: then
        `learn_footprint` writes it)."""
        from assay.core import footprints

        touches = footprints.learned(paths)
        if not touches:
            return None
        if tip and footprints.read_learned(self.git, {learned_ref(brief): tip})[0]:
            return None
        return footprints.learned_update(self.git, brief, tip, touches, epoch, desk, self.clock())

    def learn_footprint(self, brief: str, desk: str, epoch: int, paths: Sequence[str]) -> bool:
        """`footprint_update`, pushed alone by the desk holding the brief at `epoch` (Fenced otherwise), re-read and
        applied again if the ref moved (`LEARN_TRIES` times, spaced out; then Busy: its desk says it was not kept,
        and the check at landing stands); False if nothing needed writing. Held from then on: briefs that overlap
        it are queued behind it while it is live."""

        def attempt(_: int) -> bool:
            refs = self.git.ls_remote(learned_ref(brief), claim_ref(brief))
            claimed = refs.get(claim_ref(brief))
            update = self.footprint_update(brief, desk, epoch, paths, refs.get(learned_ref(brief)))
            if update is None:
                return False
            current = self.load(claim_ref(brief), claimed) if claimed else None
            fence(current.record if current else None, brief, desk, epoch)
            assert current is not None
            _record, renewal = self.transition_update(current, "renew", desk=desk, epoch=epoch)  # fenced in the push
            chain.push(self.git, [update, renewal], "footprint")
            if self.view is not None:
                self.view.learned[update.ref] = update.new
            return True

        return chain.retrying(attempt, f"keeping the footprint of {brief!r}", tries=LEARN_TRIES, base_s=0.25,
                              cap_s=4.0)

    def _known_done(self) -> set[str]:
        """The briefs whose claims this process read as `done` (final: true of any later tip, or none): at its last
        listing of every claim, and since."""
        return {c.record.brief for c in _TIPS_SEEN.get(self.git.cache, {}).values() if c.record.state == "done"}

    def _states(self, tips: Mapping[str, str | None]) -> dict[str, str | None]:
        """`_state_at` of many briefs' claims (brief -> tip): those the last listing read are known; the others
        are read together (one fetch, one cat-file batch)."""
        seen = _TIPS_SEEN.get(self.git.cache, {})
        found: dict[str, str | None] = {}
        todo: dict[str, str] = {}
        for brief, sha in tips.items():
            hit = seen.get((claim_ref(brief), sha)) if sha else None
            if hit is not None or not sha:
                found[brief] = hit.record.state if hit else None
            else:
                todo[claim_ref(brief)] = sha
        good, _bad = chain.read_tips(self.git, todo, CLAIMS_PREFIX, "claim.json", decode_claim)
        found.update({record.brief: record.state for record, _sha in good})
        return {brief: found.get(brief, "invalid") for brief in tips}  # junk holds its footprint, as `_state_at`

    def _state_at(self, ref: str, sha: str | None) -> str | None:
        """The state of the claim at `sha` (None for no claim; `invalid` for junk, which holds its footprint until a
        person looks at it: `assay claims`)."""
        if not sha:
            return None
        try:
            return self.load(ref, sha).record.state
        except RecordInvalid:
            return "invalid"

    def renew(self, brief: str, desk: str, epoch: int | None = None, lease_s: int | None = None,
              progress: str = "") -> Claim:
        """Renew the lease. `progress`: what the agent said of its long step, carried in the renewal commit's
        message (`Progress: …`), so that it costs no push of its own; the next renewal replaces it."""
        if lease_s is not None:
            validate_lease(lease_s)
        return self._change(brief, "renew", desk=desk, epoch=epoch, lease_s=lease_s, note=progress)

    def renew_all(self, held: Sequence[tuple[str, str, int, str]],
                  fresh_s: float = 0.0) -> dict[str, Claim | AssayError]:
        """Renew every claim of `held` ((brief, desk, epoch, progress) each) in one atomic push: a host's heartbeat,
        one push however many claims its desks hold. Each is fenced on its own: one whose tip is no longer its
        desk's at its epoch is left out, with the error that says so, and the rest are pushed (again, if a tip
        moved meanwhile: every tip is read again; then one renewed within `fresh_s` is left as it is: its desk
        pushes as the batch goes, and would have the forge refuse the batch again and again). The
        renewed (or fresh) claim or the error, by brief. A forge that refuses or cannot take the push raises, as
        a renewal does (nothing was renewed)."""
        out: dict[str, Claim | AssayError] = {}
        pending = {brief: (desk, epoch, progress) for brief, desk, epoch, progress in held}
        for n in range(chain.TRIES):
            chain.back_off(n)
            tips = self.git.ls_remote(*(claim_ref(b) for b in pending)) if pending else {}
            updates: dict[str, tuple[ClaimRecord, RefUpdate]] = {}
            for brief, (desk, epoch, progress) in pending.items():
                tip = tips.get(claim_ref(brief))
                try:
                    if tip is None:
                        raise IllegalTransition(brief, "renew", "absent", "nobody holds it")
                    current = self.load(claim_ref(brief), tip)
                    record = transition(current.record, "renew", brief, at=self._now(), desk=desk, epoch=epoch)
                    if n and fresh_s > 0 and 0 <= self.clock() - self.written([current]).get(current.sha, 0) < fresh_s:
                        out[brief] = current  # its own push renewed it lately (checked as a renewal: its own)
                        continue
                    updates[brief] = (record, self.prepare(current, record, "renew", progress=progress))
                except AssayError as exc:  # fenced, taken away, ended, junk: this claim alone is not renewed
                    out[brief] = exc
            pending = {b: v for b, v in pending.items() if b in updates}
            if not updates:
                return out
            try:
                chain.push(self.git, [u for _, u in updates.values()], "renew-batch")
            except chain.Moved:
                continue  # a desk's own journal push, or a takeover: read every tip again
            for brief, (record, update) in updates.items():
                out[brief] = Claim(record, update.new)
            return out
        for brief in pending:
            out[brief] = Busy(f"renewal of {brief!r}: other writers kept moving it; nothing more was written")
        return out

    def release(self, brief: str, desk: str, outcome: str = "released", reason: str = "",
                epoch: int | None = None) -> Claim:
        return self._change(brief, "release", desk=desk, outcome=outcome, reason=reason, epoch=epoch)

    def block(self, brief: str, desk: str, epoch: int, reason: str) -> Claim:
        """Park a held or waiting claim for a person, with the reason in the chain."""
        return self._change(brief, "block", desk=desk, epoch=epoch, reason=reason)

    def force_release(self, brief: str, reason: str, by: str) -> Claim:
        """A person takes a claim away; the reason and who did it stay in the chain."""
        return self._change(brief, "force_release", reason=forced_reason(reason, by), author=by)

    def expire(self, current: Claim, reason: str, by: str) -> Claim:
        """Expire exactly `current`, the tip a sweeper watched stand still, without a journal entry (for a
        journal that cannot be written). `chain.Moved` if the tip moved since: nothing is written then."""
        record = transition(current.record, "expire", current.record.brief, at=self._now(), reason=reason)
        return self._write(current, record, "expire", author=by)

    def _change(self, brief: str, action: str, *, author: str = "", note: str = "", **args: object) -> Claim:
        """Apply `action` to the current tip alone (no journal entry); if the tip moved, re-read and re-check.

        Desks and people change claims through `custody.py`, which journals each change in the same
        push; these claim-only changes are for a journal that cannot be written (a stale lock, junk).
        """
        validate_brief_id(brief)

        def attempt(_: int) -> Claim:
            current = self.read(brief)
            if current is None:
                retired.check_not_retired(self.git, brief, action)
                raise IllegalTransition(brief, action.replace("_", "-"), "absent", "nobody has claimed it")
            record = transition(current.record, action, brief, at=self._now(), **args)  # type: ignore[arg-type]
            return self._write(current, record, action, author=author, note=note)

        return chain.retrying(attempt, f"{action.replace('_', ' ')} of {brief!r}")

    def prepare(self, current: Claim | None, record: ClaimRecord, action: str, author: str = "",
                progress: str = "", footnote: str = "") -> RefUpdate:
        """The claim commit for `record` on top of `current`, written to the cache but not pushed.

        The journal pushes it together with its entries (`--atomic`), so every
        append is also a renewal and a fencing check.
        """
        message = f"assay: {action} {record.brief} -> {record.state} (epoch {record.epoch}, desk {record.desk})"
        if record.reason:
            message += f"\n\n{record.reason}"
        if footnote:
            message += f"\n\n{footnote}"
        if progress:
            message += f"\n\n{PROGRESS}{progress}"
        return chain.commit(self.git, claim_ref(record.brief), current.sha if current else None,
                            {"claim.json": record.encode()}, message, author or record.desk or "assay", self.clock())

    def transition_update(self, current: Claim, action: str, author: str = "",
                          **args: Any) -> tuple[ClaimRecord, RefUpdate]:
        """`action` applied to `current` by the transition table, as a commit not yet pushed (it may ride
        in a journal push, so that every append renews the claim and a transition lands with its entry)."""
        record = transition(current.record, action, current.record.brief, at=self._now(), **args)
        return record, self.prepare(current, record, action, author)

    def _write(self, current: Claim | None, record: ClaimRecord, action: str, author: str = "",
               note: str = "") -> Claim:
        update = self.prepare(current, record, action, author, progress=note)
        chain.push(self.git, [update], action.replace("_", "-"))
        if self.view is not None:
            self.view.tips[update.ref] = update.new
        return Claim(record, update.new)

    def _require_brief(self, brief: str, main: str | None) -> tuple[str, ...]:
        """The brief's footprint (`touches:`) on main; BriefNotFound if main lacks it."""
        if not main:
            raise NoMainBranch()
        key = (main, brief)
        if key not in self._brief_on_main:
            self.git.ensure_objects({MAIN_REF: main})
            found = self._brief_in(main, brief)
            if found is None:  # be sure before refusing: fetch main for real and look again
                self.git.ensure_objects({MAIN_REF: main}, force=True)
                found = self._brief_in(main, brief)
            self._brief_on_main[key] = found
        touches = self._brief_on_main[key]
        if touches is None:
            raise BriefNotFound(brief, f"the forge's main ({main[:10]})")
        return touches

    def _brief_in(self, main: str, brief: str) -> tuple[str, ...] | None:
        """The footprint of the brief on main, None if main lacks it; a brief file there that does not validate is
        bad input (BriefInvalid)."""
        from assay.core.briefs import check_brief, checked_clean, remember_clean

        head, found = self.git.read_typed([main, f"{main}:briefs/{brief}.md"])
        check_tip(MAIN_REF, main, head.kind if head else None)
        if found is None or found.kind != "blob":
            return None
        known = checked_clean(self.git.cache, brief, found.data)
        if known is not None:
            return known  # this very text checked clean before: not read with PyYAML again
        path = f"briefs/{brief}.md"
        parsed, problems = check_brief(found.data.decode("utf-8", "replace"), path, brief)
        if problems or parsed is None:
            first = problems[0]
            raise BriefInvalid(path, first.line, first.message, first.hint or "fix it on main (`assay brief lint`)")
        remember_clean(self.git.cache, brief, found.data, parsed.touches)
        return parsed.touches

    def _now(self) -> str:
        return utc_now_iso(self.clock())


_HOLDING = frozenset({*LIVE_STATES, "invalid"})  # claim states whose briefs' footprints keep others queued
# per forge cache, the claims this process read last, by (ref, tip): a claim record at a commit never changes
_TIPS_SEEN: dict[str, dict[tuple[str, str], Claim]] = {}
DECODED = "claims-decoded.v1.json"  # in the forge's cache: claim commit id -> its record, as _remember lists it
_TYPES = (str, str, int, str, str, int, str, str, str)  # the types _remember lists, `wait` apart


def _remember(r: ClaimRecord) -> list[Any]:
    return [r.brief, r.state, r.epoch, r.desk, r.holder, r.lease_s, r.branch, r.at, r.reason, r.wait]


def _recall(item: Any, ref: str) -> ClaimRecord | None:
    """The record a cache entry holds for a tip of `ref`; None for no entry, or one that is damaged or
    would not decode there (another brief's commit pushed to this ref is read, and reported, afresh)."""
    if not isinstance(item, list) or len(item) != 10 or tuple(map(type, item[:9])) != _TYPES:
        return None
    brief, state, epoch, desk, holder, lease_s, branch, at, reason, wait = item
    if ref != CLAIMS_PREFIX + brief or state not in STATES or epoch < 1 or not isinstance(wait, dict | None):
        return None
    try:
        validate_brief_id(brief)  # as reading the ref would: git refuses to fetch a malformed ref name
    except UsageError:
        return None
    return ClaimRecord(brief, state, epoch, desk, holder, lease_s, branch, at, wait, reason)


PROGRESS = "Progress: "  # the line of a renewal commit's message that carries the agent's progress


def progress_in(commit: bytes) -> str:
    """The progress a claim commit carries ("" if none): its message's last `Progress: …` line."""
    message = commit.split(b"\n\n", 1)[1] if b"\n\n" in commit else b""
    lines = [line for line in message.decode("utf-8", "replace").splitlines() if line.startswith(PROGRESS)]
    return lines[-1][len(PROGRESS):] if lines else ""


def renewal_key(record: ClaimRecord) -> tuple[str, int, str, str, str]:
    """What a renewal leaves unchanged: a renewal commit repeats the record (its lease may change)."""
    return record.state, record.epoch, record.desk, record.holder, record.at


def fold_renewals(items: Sequence[T], key: Callable[[T], object]) -> list[tuple[T, int]]:
    """Consecutive items with the same non-None `key` folded into the first: (item, renewals folded into it)."""
    out: list[tuple[T, int]] = []
    last: object = None
    for item in items:
        k = key(item)
        if out and k is not None and k == last:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((item, 0))
        last = k
    return out


def decode_chain(ref: str, shas: Sequence[str], blobs: Sequence[GitObject | None]) -> list[Claim | InvalidClaim]:
    """The claims of a chain's commits `shas`, given each commit's `claim.json` as read; junk as invalid."""
    out: list[Claim | InvalidClaim] = []
    for sha, blob in zip(shas, blobs, strict=True):
        try:
            out.append(Claim(decode_claim(blob.data if blob and blob.kind == "blob" else None, ref), sha))
        except RecordInvalid as exc:
            out.append(InvalidClaim(ref, sha, exc.problem))
    return out


def forced_reason(reason: str, by: str) -> str:
    if not reason.strip():
        raise UsageError("a forced release needs a reason", hint="pass --reason 'why the claim is taken away'")
    return f"forced by {by}: {reason}"


def validate_desk(desk: str) -> str:
    try:
        return validate_brief_id(desk)
    except UsageError:
        raise UsageError(f"invalid desk name {desk!r}",
                         hint="desk names use a-z 0-9 . _ - (at most 64), starting with a letter or digit") from None


def validate_lease(lease_s: int) -> int:
    if not 1 <= lease_s <= MAX_LEASE_S:
        raise UsageError(f"lease of {lease_s}s is out of range", hint=f"use 1 to {MAX_LEASE_S} seconds")
    return lease_s
