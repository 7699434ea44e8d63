"""Claim changes that desks and people make between runs, each journaled in the same atomic push.

wait, wake, block, release and a person's forced release move the claim and append their journal
entry together (`journal.transition_as`), so the journal never tells a story the claim lacks.
Steering is an entry alone. Inside a run a desk uses `Journal.transition` on its own session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from assay.core.claims import Claim, Claims, forced_reason
from assay.core.crash import crash_point
from assay.core.digests import sha256_hex
from assay.core.journal import Journal, append_as_person, transition_as
from assay.core.records import (
    WORK_BRANCH_PREFIX,
    JournalEntry,
    ReviewRecord,
    condition_problem,
    parse_iso,
    validate_brief_id,
)
from assay.core.retired import check_not_retired, require_known
from assay.errors import AssayError, Conflict, ForgeRefused, IllegalTransition, RecordInvalid, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


def parse_condition(on: str) -> str:
    """A wait condition given by a person or a desk, checked (exit 2) before anything is written."""
    problem = condition_problem(on)
    if problem:
        raise UsageError(problem,
                         hint="use review, merge, manual, checks, time:YYYY-MM-DDTHH:MM:SSZ (UTC) or briefs:ID,ID")
    return on


def wait_met(wait: Mapping[str, object] | None, review: ReviewRecord | None, now: float,
             states: Callable[[list[str]], Mapping[str, str]] | None = None) -> tuple[str, str] | None:
    """The one rule for "is this wait met", for desks and sweepers alike: (what to do, why) when the forge shows
    the condition met (`done`: the review is merged; `block`: it was closed; `wake`: the time has passed, or
    every brief of `briefs:` is done or blocked), else None. A review or merge wait with no review read
    (`review` None) is not met; `states` gives the claim states of briefs (`done` for a retired one). A child
    that is blocked wakes its parent too: a parent never waits on a brief that waits for a person."""
    on = str((wait or {}).get("on", ""))
    if on.startswith("briefs:") and states is not None and condition_problem(on) is None:
        names = on[7:].split(",")
        found = states(names)
        if all(found.get(n) in ("done", "blocked") for n in names):
            blocked = [n for n in names if found.get(n) == "blocked"]
            return "wake", ", ".join(names) + (" are done" if not blocked else f": {', '.join(blocked)} blocked")
        return None
    if on in ("review", "merge") and review is not None:
        if review.state == "merged":
            return "done", "the review is merged"
        if review.state == "closed":
            return "block", "the review was closed"
    elif on.startswith("time:") and condition_problem(on) is None and now >= parse_iso(on[5:]).timestamp():
        return "wake", f"{on[5:]} has passed"
    return None


def state_of(claims: Claims, brief: str) -> str:
    """A brief's claim state as a wait on it sees it: `done` for a retired brief, "" for one never claimed."""
    current = claims.read(brief)
    if current is not None:
        return current.record.state
    from assay.core.retired import RETIRED_REF, Index

    tip = claims.git.ls_remote(RETIRED_REF).get(RETIRED_REF)
    return "done" if tip and Index(claims.git, tip).get(brief) is not None else ""


def _holder_claim(claims: Claims, brief: str, desk: str | None, action: str) -> Claim:
    current = claims.read(brief)
    if current is None:
        check_not_retired(claims.git, brief, action)
        raise IllegalTransition(brief, action, "absent", "nobody has claimed it")
    if desk and current.record.desk != desk:
        raise IllegalTransition(brief, action, current.record.state, f"it belongs to desk {current.record.desk!r}")
    return current


def wait(claims: Claims, brief: str, on: str, by: str, desk: str | None = None, epoch: int | None = None,
         checks: bool = True) -> Claim:
    """Park a held brief on a condition: the claim stays, no process works on it.

    With `epoch` (an agent's ASSAY_EPOCH), a process from an older epoch is fenced (exit 3). `checks`: whether
    the forge has checks to wait on (GitHub's statuses and check runs); a `checks` wait elsewhere is refused.
    """
    condition = parse_condition(on)
    if condition == "checks" and not checks:
        raise UsageError("this forge has no checks to wait on: `checks` waits on a GitHub pull request's statuses "
                         "and check runs", hint="wait on review, merge, manual, a time or briefs:ID,ID here")
    r = _holder_claim(claims, brief, desk, "wait").record
    return transition_as(claims, brief, "wait", "wait", {"on": condition, "by": by}, by, desk=r.desk,
                         epoch=r.epoch if epoch is None else epoch, wait={"on": condition})


def wake(claims: Claims, brief: str, by: str, desk: str | None = None, epoch: int | None = None,
         run: str = "") -> tuple[Claim, str]:
    """Wake a waiting brief; its desk resumes it from the journal on its next pass. Returns the claim and what
    it was waiting on."""
    r = _holder_claim(claims, brief, desk, "wake").record
    woken = transition_as(claims, brief, "wake", "wake", {"by": by, "was": r.wait}, by, run, desk=r.desk,
                          epoch=r.epoch if epoch is None else epoch)
    return woken, str((r.wait or {}).get("on", ""))


def block(claims: Claims, brief: str, desk: str, epoch: int, reason: str, by: str | None = None,
          run: str = "") -> Claim:
    """Park a claim for a person, with the reason in the claim chain and the journal.

    If the forge refuses the journal (a stale lock on it, say), the claim alone is blocked: a person
    must see the brief stopped, with the reason, even when its journal cannot be written.
    """
    data = {"action": "block", "reason": reason}
    try:
        return transition_as(claims, brief, "block", "claim", data, by or desk, run, desk=desk, epoch=epoch,
                             reason=reason)
    except (ForgeRefused, RecordInvalid) as exc:
        return claims.block(brief, desk, epoch, f"{reason} (not journaled: {exc.message})")


def release(claims: Claims, brief: str, desk: str, outcome: str = "released", reason: str = "",
            epoch: int | None = None, by: str | None = None, run: str = "") -> Claim:
    """End a claim as released, done or abandoned; the next claim gets epoch + 1."""
    data: dict[str, Any] = {"action": "release", "outcome": outcome, "reason": reason}
    return transition_as(claims, brief, "release", "claim", data, by or desk, run, desk=desk, outcome=outcome,
                         reason=reason, epoch=epoch)


DONE_WHEN_CHECKED = "checked"  # a `note`'s `done_when`: a waiting brief's rows were run on main (`note_done_when`)


def done_on_main_reason(main: str) -> str:
    """The reason a claim settled by its `done_when:` rows gives (the board and `brief show` show it as it is)."""
    return f"already on main at {main[:10]} (done_when passed)"


def _done_on_main(verdict: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The release entry's data for a brief whose `done_when:` rows passed on main, and the claim's reason."""
    main = str(verdict.get("main", ""))
    reason = done_on_main_reason(main)
    rows = [{k: r.get(k) for k in ("row", "command", "exit_code", "expect_exit", "duration_ms")}
            for r in verdict.get("rows", []) if isinstance(r, Mapping)]
    return {"action": "release", "outcome": "done", "reason": reason, "done_when": {"main": main, "rows": rows}}, \
        reason


def release_on_main(claims: Claims, brief: str, desk: str, epoch: int, verdict: Mapping[str, Any],
                    run: str = "") -> Claim:
    """Settle a brief `done` because its `done_when:` rows passed on main's commit (`verdict["main"]`), between
    runs (a brief waiting on its review whose work landed by another route): the claim and its entry in one push."""
    data, reason = _done_on_main(verdict)
    return transition_as(claims, brief, "release", "claim", data, desk, run, desk=desk, outcome="done",
                         reason=reason, epoch=epoch)


def release_on_main_in_run(journal: Journal, verdict: Mapping[str, Any]) -> Claim:
    """The same, inside a desk's run (before its agent starts): with every entry pending, in one push."""
    data, reason = _done_on_main(verdict)
    return journal.transition("release", "claim", data, outcome="done", reason=reason)


def note_done_when(claims: Claims, brief: str, verdict: Mapping[str, Any], by: str, run: str = "") -> JournalEntry:
    """Journal that a waiting brief's `done_when:` rows ran on main's commit `verdict["main"]`, with each row's
    evidence: the sweep of a desk runs them again only once main has moved."""
    data = {"done_when": DONE_WHEN_CHECKED, **{k: verdict.get(k) for k in ("main", "passed", "summary", "rows")}}
    return append_as_person(claims, brief, "note", data, by, run=run)


def force_release(claims: Claims, brief: str, reason: str, by: str) -> Claim:
    """A person takes a claim away; the reason and who did it stay in the chain and the journal.

    A journal that holds junk, or that the forge refuses (a stale lock), does not stop a person:
    the claim alone is released then.
    """
    why = forced_reason(reason, by)
    try:
        return transition_as(claims, brief, "force_release", "claim", {"action": "force-release", "reason": why},
                             by, reason=why)
    except (ForgeRefused, RecordInvalid) as exc:
        if isinstance(exc, RecordInvalid) and exc.ref.startswith("refs/assay/claims/"):
            raise
        return claims.force_release(brief, f"{reason} (not journaled: {exc.message})", by)


STEER_WHEN = {None: "on its first run", "waiting": "once it is woken",
              "held": "at its next turn boundary (a heartbeat) or as its run ends, before its review is ready",
              "blocked": "once a person releases it and a desk claims it", "released": "when a desk claims it again",
              "expired": "when a desk claims it again", "abandoned": "if a desk claims it again",
              "woken": "in a new round: it was waiting on its review and is woken for its desk's next pass"}
ROUND_WAITS = ("review", "merge", "checks")  # waits that a person's word (changes, a retry, steering) ends in a round


def steer(claims: Claims, brief: str, text: str, by: str) -> tuple[int, str]:
    """Journal guidance for the agent's next run (and every run after a recovery). Returns its seq and when the
    agent gets it, by the claim's state once the entry is on the forge: a brief waiting on its review is woken
    for a new round with it (`wake_for_steering`). A done brief is refused (exit 3): no agent runs on it again."""
    if not text.strip():
        raise UsageError("steering text is empty", hint='assay steer BRIEF "what the agent should know"')
    current = claims.read(brief)
    if current is None:
        check_not_retired(claims.git, brief, "steer")
        require_known(claims.git, brief)  # a mistyped name writes nothing
    if current is not None and current.record.state == "done":
        raise IllegalTransition(brief, "steer", "done", "no agent runs on a done brief again; write a new brief")
    seq = append_as_person(claims, brief, "steer", {"text": text, "by": by}, by).seq
    crash_point("steer.after-entry")
    if wake_for_steering(claims, brief, by) is not None:
        return seq, STEER_WHEN["woken"]
    after = claims.read(brief)  # where the entry landed, not where the claim was before: a desk may have moved it
    return seq, STEER_WHEN[after.record.state if after else None]


def pending_steering(entries: list[JournalEntry]) -> list[JournalEntry]:
    """Steering no agent run has taken (no `delivered` note names it) and no round began for since it came (a
    `wake` with a round after it: that round's prompt carries it)."""
    taken = {(e.data or {}).get("of") for e in entries
             if e.kind == "note" and (e.data or {}).get("steer") == "delivered"}
    since = max((e.seq for e in entries if e.kind == "wake" and (e.data or {}).get("round")), default=0)
    return [e for e in entries if e.kind == "steer" and e.seq not in taken and e.seq > since]


def round_ids(steering: list[JournalEntry]) -> list[str]:
    """The identities a round for this steering is journaled under (`signals` of its wake): a comment's steering
    is known by its signal's (`<id>:round`, as `signals.settle` names it), so that the round is started once."""
    return [f"{sid}:round" if (e.data or {}).get("signals") else f"steer:{e.seq}:round"
            for e in steering for sid in ((e.data or {}).get("signals") or [None])]


class _Nothing(Exception):
    """The journal, as the forge has it, calls for nothing."""


def wake_for_steering(claims: Claims, brief: str, by: str, run: str = "",
                      looked: set[str] | None = None) -> Claim | None:
    """A brief waiting on its review (or merge, or checks) whose journal holds steering that no run took is woken
    for a new round, as requested changes wake it: the steering would reach no agent otherwise. The desk calls
    this as a brief begins to wait (steering that landed while its wait was being pushed), `assay steer` after
    its entry lands. Decided on the journal the wake lands on, once: None when nothing was woken. The claim tip
    it read is added to `looked` once it is decided (not when the forge cut the look short)."""
    current = claims.read(brief)
    woken = _wake_for_steering(claims, brief, by, run, current)
    if current is not None and looked is not None:
        looked.add(current.sha)
    return woken


def _wake_for_steering(claims: Claims, brief: str, by: str, run: str, current: Claim | None) -> Claim | None:
    if current is None or current.record.state != "waiting" or str((current.record.wait or {}).get("on", "")) \
            not in ROUND_WAITS:
        return None
    r = current.record
    data: dict[str, Any] = {"by": by, "was": r.wait}

    def check(entries: list[JournalEntry]) -> None:  # the entry is built from what this try read
        found = pending_steering(entries)
        if not found:
            raise _Nothing()
        people = ", ".join(dict.fromkeys(str((e.data or {}).get("by") or "someone") for e in found))
        data["round"] = {"reason": f"{people} steered the work (see Steering)", "said": ""}
        data["signals"] = round_ids(found)

    try:
        return transition_as(claims, brief, "wake", "wake", data, by, run, desk=r.desk, epoch=r.epoch, check=check)
    except (_Nothing, IllegalTransition, Conflict):
        return None


class _Said(Exception):
    """The journal says it already."""


def note_locked(claims: Claims, brief: str, lock: str, by: str, run: str) -> bool:
    """Journal that the lock file `lock` refuses every write to `brief`'s claim, and what a person must do, on the
    journal ref alone (the claim's is the one locked), so the board and `assay journal` show it; once, while it is
    the journal's latest entry. False when nothing was written (said already, or the journal refuses too)."""
    def once(entries: list[JournalEntry]) -> None:
        if entries and (entries[-1].data or {}).get("locked") == lock:
            raise _Said()

    text = (f"{by} cannot write this brief's claim: the forge refuses every write to it while the lock file {lock} "
            "is there; if no push is running, remove it on the forge's machine")
    try:
        append_as_person(claims, brief, "note", {"locked": lock, "text": text}, by, run=run, check=once)
    except (_Said, AssayError):
        return False
    return True


def fork(claims: Claims, new: str, source: str, at: int | None, by: str) -> tuple[JournalEntry, str]:
    """Start brief `new` from `source`'s agent conversation as its newest checkpoint at or before seq `at` saved
    it, and its work branch as last pushed before that checkpoint: the fork knows what came before and nothing
    after. The checkpoint's worktree snapshot, if it has one, becomes the fork's (`refs/assay/wip/<new>`, named by
    its entry): the fork's first run restores it over the branch, so the fork has the files of that moment and
    none written later. Returns the fork's checkpoint entry and the branch commit. Nothing is written on bad
    input."""
    from assay.core.journal import fork_as_person, read_kept

    new = validate_brief_id(new)
    log = read_kept(claims.git, source)
    if not log.entries:
        require_known(claims.git, source)
    saved = [e for e in log.entries if e.kind == "checkpoint" and (e.data or {}).get("name") == "agent-session"
             and (at is None or e.seq <= at)]
    if not saved:
        when = f" at or before seq {at}" if at else ""
        raise UsageError(f"brief {source!r} has no agent-session checkpoint{when}",
                         hint=f"`assay journal {source}` lists its checkpoints; its desk's preset needs agent.session")
    point = saved[-1]
    notes = [e.data or {} for e in log.entries if e.kind == "note" and e.seq < point.seq]
    heads = [str(d.get("pushed") or d.get("at_commit")) for d in notes if d.get("pushed") or d.get("at_commit")]
    if not heads:
        raise UsageError(f"brief {source!r} has no work branch commit before seq {point.seq}",
                         hint="fork from a later checkpoint (--at)")
    blob = claims.git.read_objects([f"{log.commit_of[point.seq]}:{(point.data or {}).get('checkpoint_blob')}"])[0]
    if blob is None:
        raise RecordInvalid(f"refs/assay/journal/{source}", f"checkpoint {point.seq} names a blob that is missing")
    data = {k: v for k, v in (point.data or {}).items()
            if k in ("name", "session", "attempt", "bytes", "file", "worktree")}
    data["forked_from"] = {"brief": source, "seq": point.seq}
    if data.get("worktree"):  # the checkpoint's files: the fork's own snapshot, which its first run restores
        from assay.core import wip  # here: a claim, renewal or release (`lean.py`) never loads it

        wip.fetch(claims.git, source, str(data["worktree"]))
    return fork_as_person(claims, new, data, blob, WORK_BRANCH_PREFIX + new, heads[-1], by), heads[-1]


def child_id(parent: str, key: str, title: str) -> str:
    """A child brief's id: its parent's, and a digest of the spawning step's idempotency key and the child's title,
    so that a parent that dies and spawns again names the same child."""
    digest = sha256_hex(f"{key}\n{title}".encode())[:10]
    return f"{parent[:53].rstrip('.-_')}-{digest}"


def spawn(claims: Claims, parent: str, key: str, title: str, body: str, labels: tuple[str, ...],
          by: str) -> tuple[str, bool]:
    """Add child brief `briefs/<id>.md` to main (a compare-and-swap on main, again on what moved it), its id from
    `key` (`child_id`). Returns the id and whether this call wrote it: a child already on main is not written
    again, however many times its parent asks."""
    from assay.core.briefs import check_brief
    from assay.core.git import RefUpdate, Signature, TreeEntry
    from assay.core.records import MAIN_REF, chain

    validate_brief_id(parent)
    if not key.strip():
        raise UsageError("a child brief needs the spawning step's idempotency key",
                         hint="spawn inside a journaled step: assay step run --name spawn-x -- assay brief spawn ...")
    if not title.strip() or "\n" in title:
        raise UsageError("a child brief needs a one-line title", hint='assay brief spawn "Add the cache" ...')
    child = child_id(parent, key, title)
    quoted = title.replace('"', "'")
    front = [f'title: "{quoted}"'] + ([f"labels: [{', '.join(labels)}]"] if labels else [])
    text = "---\n" + "\n".join(front) + f"\n---\n{body.strip()}\n\nSpawned by brief `{parent}`.\n"
    _, problems = check_brief(text, f"briefs/{child}.md", child)
    if problems:
        raise UsageError(f"the child brief would be invalid: {problems[0]}")
    git = claims.git

    def attempt(_: int) -> bool:
        main = git.ls_remote(MAIN_REF).get(MAIN_REF)
        if not main:
            raise UsageError("the forge has no main branch to add a child brief to")
        git.ensure_objects({MAIN_REF: main})
        if git.read_objects([f"{main}:briefs/{child}.md"])[0] is not None:
            return False  # spawned before: one child, however many times it is asked for
        root = git.read_tree(f"{main}^{{tree}}") or []
        folder = [e for e in (git.read_tree(f"{main}:briefs") or []) if e.name != f"{child}.md"]
        folder.append(TreeEntry(f"{child}.md", git.write_blob(text.encode())))
        tree = git.write_tree([*(e for e in root if e.name != "briefs"), TreeEntry("briefs", git.write_tree(folder),
                                                                                  "40000")])
        commit = git.write_commit(tree, [main], f"Spawn {child}: {title}\n\nAssay-Parent: {parent}\n",
                                  Signature.of(by))
        chain.push(git, [RefUpdate(MAIN_REF, commit, main)], "spawn")
        return True

    return child, chain.retrying(attempt, f"spawning a child of {parent!r}")
