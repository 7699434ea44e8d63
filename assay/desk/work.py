"""One brief worked as durable steps, from its branch to a verified review the claim waits on.

    branch (idempotent) -> worktree -> review (idempotent; on GitHub, after the first push with commits)
    -> [agent (idempotent) -> push (idempotent, fenced) -> verify (safe) (-> statuses, on GitHub)] x attempts
    -> ready (idempotent, fenced) -> the claim waits on the review (with its entry)

Every step is journaled, so a desk killed anywhere runs this again from the top
and carries on from what the forge shows.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from assay.core import custody, landing, pushgroup, wip
from assay.core.briefs import Brief
from assay.core.crash import crash_point
from assay.core.credentials import strip_credentials
from assay.core.deskspec import DeskSpec
from assay.core.envs import agent_env
from assay.core.footprints import learned_ref
from assay.core.forge.base import Reviews, Thread, answer_text
from assay.core.git import SPARES, ZERO, ForgeGit, RefUpdate, Signature, WorkRepo
from assay.core.outcomes import round_entries, summary, unsettled_unsafe
from assay.core.records import WORK_BRANCH_PREFIX, WORK_BRANCH_REF_PREFIX, JournalEntry
from assay.core.steps import Session
from assay.desk import sessions
from assay.desk.agent import AgentRun, assay_command, run_agent
from assay.desk.effects import probe_runner
from assay.desk.verify import on_main, verify
from assay.errors import AssayError, Conflict, Fenced, IllegalReviewChange, unknown_message

Echo = Callable[[str], None]


def _redo_feedback(data: dict[str, Any]) -> str:
    """What the agent is told when a round begins (and again when a run of that round resumes)."""
    said = str(data.get("said") or "")
    if data.get("woken"):  # a person's signal on the review, or finished checks (`signals.settle`)
        return f"A new round: {data.get('reason')}." + (f" What was said:\n\n{said}" if said else "")
    if data.get("superseded"):
        return (f"The previous round's review was not marked ready: {data.get('reason')}. Main may hold that work "
                "by now: change only what the brief still needs.")
    if str(data.get("redo", "")).startswith("wake-"):
        return "The child briefs you waited on have ended (see Child briefs below): carry on with this brief."
    return f"The previous round was blocked: {data.get('reason')}." + (f" The reviewer said: {said}" if said else "")


def _answers(entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """What the agent answered to review threads (`assay step answer`), oldest first."""
    found = [(e.data or {}).get("answer") for e in entries if e.kind == "note"]
    return [a for a in found if isinstance(a, dict)]


def _superseded_release(e: JournalEntry) -> bool:
    """A claim entry that released the brief because its review was superseded at ready."""
    data = e.data or {}
    return e.kind == "claim" and data.get("action") == "release" and bool(data.get("superseded"))


THREADS_OPEN = "threads"  # the ready step's result when a review thread waits on an answer: not marked ready
_EPOCH_TRAILER = re.compile(r"^Assay-Epoch: ([0-9]+)$", re.M)


RESTORE_TRIES = 3  # worktree snapshots a run tries, newest first, before it works on the branch as pushed


class BriefWork:
    """The step pipeline of one brief at one epoch. Receives its ports and the session holding the claim."""

    def __init__(self, git: ForgeGit, reviews: Reviews, spec: DeskSpec, state_dir: Path, echo: Echo,
                 session: Session, brief: Brief, epoch: int) -> None:
        self.git, self.reviews, self.spec, self.echo = git, reviews, spec, echo
        self.session, self.brief, self.epoch = session, brief, epoch
        self.branch_ref = WORK_BRANCH_REF_PREFIX + brief.id
        self.worktree = state_dir / "worktrees" / spec.name / brief.id
        self._made_worktree = False  # whether this run made the worktree new: no earlier run's files are here
        self.checkout = state_dir / "verify" / spec.name / brief.id
        self.prompts = state_dir / "prompts"
        self.state = state_dir / "desks" / spec.name  # the desk's own folder: `{state}` in its `env:`
        self.assay_bin = assay_command(state_dir)
        self._main = ""  # the main this pass started from
        self._footprint_rode = False  # its learned footprint rode its work's push, or was kept before
        self._branch_seen: str | None = None  # the work branch's tip as the branch step read it (this run)
        self._round_main = ""  # the main this round merges into the branch first (a round woken as main moved)
        self._redo: dict[str, str] = {}  # this round's identity in its steps' inputs
        self._threads: tuple[Thread, ...] = ()  # the review threads waiting on an answer, as the last prompt read them
        self._pushed = ""  # the commit this run found or put on the forge as the work branch's tip (`_push`)

    def run(self, main: str) -> str:
        """Work the brief to `waiting` (on its review) or `blocked`, or settle it `done` when its `done_when:`
        rows pass on main before any agent runs; returns which.

        Long: the desk's durable steps in the order they run (branch, review, agent, push, verify, statuses,
        supersede, ready), read as one story: their order is the journal's and the crash points'."""
        session, brief = self.session, self.brief
        self._main, self._branch_seen = main, None
        redo, feedback = self._round()
        self._redo = redo
        if brief.done_when and self._already_on_main(main, redo):
            return "done"
        head = session.step("branch", lambda key: self._ensure_branch(main), input=redo or None, policy="idempotent",
                            rides=True, lazy_result=True)  # the branch moves with its intent, in the agent's push
        tip = self._branch_seen or self.git.ls_remote(self.branch_ref).get(self.branch_ref) or head  # as it is
        self.git.ensure_objects({self.branch_ref: tip})
        self._made_worktree = not (self.worktree / ".git").exists()  # no earlier run's files on this machine
        self.git.worktree(self.worktree, tip, self.worktree.parent / SPARES)  # a spare made clean, if there is one
        if self._round_main:
            self._catch_up(self._round_main)
        # a review ref can be opened on an empty branch; GitHub opens no pull request without commits
        opened = self.reviews.refs_backed
        if opened:
            session.step("review", partial(self._open_review, head), input=redo or None, policy="idempotent",
                         rides=self.reviews.refs_backed, lazy_result=True)
        # an earlier run's unsafe steps that were cut off get their outcome: unknown, or what their probe finds, run
        # in the worktree with the agent's environment (never the desk's credentials)
        session.probe_runner = probe_runner(self.worktree, {
            **self._agent_env(), "ASSAY_FORGE": strip_credentials(self.git.url), "ASSAY_BRIEF": brief.id,
            "ASSAY_DESK": self.spec.name, "ASSAY_EPOCH": str(self.epoch), "ASSAY_BIN": str(self.assay_bin)})
        for line in session.recover():
            self.echo(f"{self.spec.name}: {brief.id}: {line}")
        attempt, steered, again = 1, 0, 0
        while True:  # until the review is marked ready (a thread that lands meanwhile: again)
            while True:
                mark = {"attempt": attempt, **({"steered": steered} if steered else {}), **redo}
                agent = session.step("agent", partial(self._agent, attempt, feedback), input=mark, policy="idempotent",
                                     lazy_result=True, with_work=True)  # intent first; its result rides the work's push
                parked = self._parked_by_agent()
                if parked:  # the agent parked its brief (on its child briefs, say): the run ends here, holding nothing
                    session.end_run()
                    self.echo(f"{self.spec.name}: {brief.id} is waiting on {parked}, as its agent asked")
                    return "waiting"
                head = session.step("push", lambda key: self._push(), input=mark,
                                    policy="idempotent", rides=True, lazy_result=True)
                if not brief.touches and head != main and not self._footprint_rode:
                    self._learn_footprint(main, head)  # it did not ride the push (it had nothing new, or lost a race)
                if not opened and head != main:
                    session.step("review", partial(self._open_review, head), input=redo or None, policy="idempotent",
                             rides=self.reviews.refs_backed, lazy_result=True)
                    opened = True  # opened: once per run
                verdict = session.step("verify", partial(self._verify, head),
                                       input={**mark, "head": head}, policy="safe")
                if not self.reviews.refs_backed and self._own_commit(head, main):  # commit statuses, on the branch's
                    # own commits only (never on main's, which other briefs share); the intent is journaled first
                    session.step("statuses", partial(self._post_statuses, head), input={"head": head, **redo},
                                 policy="idempotent")
                held = self._unsettled()  # ready means nothing is unresolved: no unsafe step without an outcome
                if head == self._created_at():  # a review that adds nothing to where the branch began is no work
                    held = "; ".join(w for w in ("the agent changed nothing: the branch has no commit of its own", held)
                                     if w)
                if verdict["passed"] and agent["exit_code"] == 0 and not held:
                    steered, late = self._late_steering(str(agent.get("run", "")))
                    held = "" if steered else self._answer_threads(head)  # every review thread answered, or it fails
                if verdict["passed"] and agent["exit_code"] == 0 and not held:
                    if not steered:
                        break
                    # steering no run took: the agent gets it (resuming its conversation) before the review is ready
                    feedback = "A person steered this brief after your last run (see Steering below): act on it."
                    seqs = ", ".join(map(str, late))
                    self.echo(f"{self.spec.name}: {brief.id}: steering (seq {seqs}) came after the agent's run; the "
                              "agent runs again with it before the review is marked ready")
                    continue
                reasons = [f"the agent was stopped at its time limit ({self.spec.timeout_s}s)" if agent.get("timed_out")
                           else f"the agent exited {agent['exit_code']}"] if agent["exit_code"] != 0 else []
                reasons += [verdict["summary"]] if not verdict["passed"] else []
                why = "; ".join([*reasons, held] if held else reasons)
                feedback = f"Attempt {attempt} did not pass: {why}"
                self.echo(f"{self.spec.name}: {brief.id} attempt {attempt} failed: {why}")
                attempt, steered = attempt + 1, 0
                if attempt > self.spec.attempts:
                    failed = f"{self.spec.attempts} attempts failed"
                    reason = f"{failed} verification" if why == verdict["summary"] else f"{failed}: {why}"
                    session.block(reason)
                    self.echo(f"{self.spec.name}: {brief.id} blocked: {reason}")
                    return "blocked"
            verdict = session.step("supersede", partial(self._supersede_check, head), input={"head": head, **redo},
                                   policy="safe")  # decided once: a replay after a crash acts on the same verdict
            if verdict.get("verdict") != landing.READY:
                return self._supersede(head, verdict)
            if not opened:  # verified on a branch without commits of its own: open it now
                session.step("review", partial(self._open_review, head), input=redo or None, policy="idempotent",
                             rides=self.reviews.refs_backed, lazy_result=True)
            marked = session.step("ready", partial(self._mark_ready, head),
                                  input={"head": head, **redo, **({"again": again} if again else {})},
                                  policy="idempotent", rides=True, lazy_result=True)
            if marked != THREADS_OPEN:
                break
            # a person wrote in a review thread after the agent's answers were posted: the agent answers it first
            again, attempt, steered = again + 1, attempt + 1, 0
            feedback = "A person wrote in a review thread as the review was being marked ready: answer it."
            self.echo(f"{self.spec.name}: {brief.id}: a review thread waits on an answer; not marked ready")
            if attempt > self.spec.attempts:
                session.block(f"{self.spec.attempts} attempts failed: a review thread waits on an answer")
                return "blocked"
        self._give_back_worktree()  # while the claim is still this run's: no other run may be in it yet
        session.end_run(sync=False)
        with pushgroup.unhurried():  # the run's end, the entry and the claim change in one push, which nobody waits on
            session.wait("review")
        self.echo(f"{self.spec.name}: {brief.id} verified at {head[:10]}; review ready; waiting for merge")
        return "waiting"

    def _answer_threads(self, head: str) -> str:
        """Reply to every review thread that waits on an answer with what the agent said of it (`assay step
        answer`): the commit that addresses it, or why nothing changes; each reply a journaled step (once per
        thread, person's comment and head). Why the review may not be marked ready ("" when every thread has its
        answer): threads the agent left unanswered, the newest read of the forge."""
        threads = [t for t in self.reviews.threads(self.brief.id) if t.allowed is not False]
        if not threads:
            return ""
        said = {(str(a.get("thread")), str(a.get("last"))): a for a in _answers(self.session.journal.entries)}
        missing = [t for t in threads if (t.id, t.last.id) not in said]
        for t in (t for t in threads if (t.id, t.last.id) in said):
            given = said[(t.id, t.last.id)]
            text = answer_text(head, str(given.get("fixed") or ""), str(given.get("reason") or ""))
            self.session.step("answer", partial(self._post_answer, t.id, text),
                              input={"thread": t.id, "last": t.last.id, "head": head, **self._redo},
                              policy="idempotent")
        if not missing:
            return ""
        listed = ", ".join(f"{t.id} on {t.where} (@{t.last.by})" for t in missing)
        return (f"review threads without an answer: {listed}; answer each with `{self.assay_bin} step answer ID "
                "--fixed TEXT` (what you changed for it) or `--reason TEXT` (why nothing changes)")

    def _post_answer(self, thread: str, text: str, key: str) -> str:
        """The reply on the forge, once per step key: where reviews are refs it rides a journal push (fenced);
        on GitHub the step's intent is on the forge (with a claim renewal) before the API call."""
        marker = hashlib.sha256(key.encode()).hexdigest()[:20]
        if not self.reviews.refs_backed:
            return self.reviews.answer(self.brief.id, thread, self.spec.name, text, marker)
        for _ in range(3):
            update = self.reviews.answer_update(self.brief.id, thread, self.spec.name, text, marker)
            if update is None:
                break  # posted already
            try:
                self.session.journal.add("note", sync=True, data={"review": "answered", "thread": thread},
                                         refs=[update])
                break
            except Fenced:
                raise
            except Conflict:
                continue  # the review moved (a comment, say): prepare again on its new tip
        else:
            raise Conflict(f"the review of {self.brief.id!r} kept changing; thread {thread} not answered")
        return self.reviews.answer(self.brief.id, thread, self.spec.name, text, marker)  # there now: its id

    def _catch_up(self, main: str) -> None:
        """A round woken because main moved: merge that main into the worktree (not committed: the round's push
        commits it, with its epoch's trailer), leaving conflict markers for the agent to resolve. Done once: not
        when the worktree has it already, or a merge of it is under way."""
        repo = self.git.worktree(self.worktree, "HEAD")
        if repo.merging():
            return
        self.git.ensure_objects({"refs/heads/main": main})
        if self.git.is_ancestor(main, repo.head()):
            return
        merged = repo.git("-c", "user.name=assay", "-c", "user.email=assay@assay.invalid", "merge", "--no-ff",
                          "--no-commit", "--no-edit", main, check=False)
        conflicts = repo.git("diff", "--name-only", "--diff-filter=U", check=False).stdout.decode().split()
        said = f" (conflicts in {', '.join(conflicts)})" if conflicts else ""
        if merged.returncode != 0 and not conflicts:
            self.echo(f"{self.spec.name}: {self.brief.id}: main at {main[:10]} could not be merged into the worktree: "
                      f"{merged.stderr.decode(errors='replace').strip()}")
            return
        self.echo(f"{self.spec.name}: {self.brief.id}: main at {main[:10]} merged into the worktree{said}")

    def _supersede_check(self, head: str, key: str) -> dict[str, Any]:
        return landing.superseded(self.git, self.reviews, self.session.journal.claims, self.brief.id, head)

    def _supersede(self, head: str, verdict: dict[str, Any]) -> str:
        """The review is not marked ready: its work is on main (done) or inside another ready review (released),
        the evidence in a note and in the claim's reason, its review closed."""
        session, main = self.session, str(verdict.get("main", ""))
        if verdict["verdict"] == landing.ON_MAIN:
            outcome, reason = "done", f"already on main at {main[:10]}: the branch adds nothing main lacks"
        else:
            other = str(verdict.get("by", ""))
            outcome = "released"
            reason = (f"superseded by {other} (its ready review at {str(verdict.get('head', ''))[:10]} holds every "
                      f"change of this one)")
        evidence = {k: verdict[k] for k in ("verdict", "main", "by") if verdict.get(k)}
        if verdict.get("head"):
            evidence["by_head"] = verdict["head"]
        session.step("close", lambda key: self._close_review(reason), input={"head": head, "main": main},
                     policy="idempotent")  # run again after a crash: closing a closed review changes nothing
        session.journal.add("note", sync=False, data={"superseded": {**evidence, "head": head, "reason": reason}})
        session.end_run(sync=False)
        session.journal.transition("release", "claim", {"action": "release", "outcome": outcome, "reason": reason,
                                                        "superseded": evidence}, outcome=outcome, reason=reason)
        self.echo(f"{self.spec.name}: {self.brief.id} not marked ready: {reason}; {outcome}")
        return outcome

    def _close_review(self, reason: str) -> str:
        """Close the review of a brief not marked ready (none yet, or merged by a person meanwhile: left as it is)."""
        review = self.reviews.peek(self.brief.id)
        if review is None or review.state not in ("draft", "ready", "closed"):
            return review.state if review is not None else "none"
        return self.reviews.close(self.brief.id, "assay", reason).state

    def _already_on_main(self, main: str, redo: dict[str, str]) -> bool:
        """Run the `done_when:` rows on main (a safe step, its rows' evidence journaled); when all pass, close any
        open review of the brief and settle the claim `done`, naming main's commit. A run that finds this round's
        check passed already (its desk was killed before it settled) decides the same, from the same main."""
        decided = self._passed_check(redo)
        checked = decided or main
        verdict = self.session.step("done_when", partial(self._done_when, checked), input={"main": checked, **redo},
                                    policy="safe")
        if not verdict.get("passed"):
            self.echo(f"{self.spec.name}: {self.brief.id}: done_when does not hold on main at {checked[:10]} "
                      f"({verdict.get('summary')}); working it")
            return False
        reason = custody.done_on_main_reason(checked)
        review = self.reviews.peek(self.brief.id)
        if review is not None and review.record.state in ("draft", "ready"):
            try:
                self.reviews.close(self.brief.id, self.spec.name, reason)
            except IllegalReviewChange as exc:  # merged or closed meanwhile: the work is on main all the same
                if exc.state not in ("merged", "closed"):
                    raise
        self.session.end_run(sync=False)
        custody.release_on_main_in_run(self.session.journal, verdict)
        self.echo(f"{self.spec.name}: {self.brief.id} {reason} -> done; no agent ran")
        return True

    def _passed_check(self, redo: dict[str, str]) -> str:
        """The main at which this round's `done_when` step passed already, or ""."""
        entries = self.session.journal.entries
        intents = {e.seq: e for e in entries if e.kind == "intent" and e.step == "done_when"}
        for e in reversed(entries):
            if e.kind != "result" or e.step != "done_when" or e.status != "completed" or e.intent not in intents:
                continue
            given = (intents[e.intent].data or {}).get("input")
            output = (e.data or {}).get("output")
            if isinstance(given, dict) and given.get("after") == redo.get("after") and isinstance(output, dict) \
                    and output.get("passed") and isinstance(output.get("main"), str):
                return str(output["main"])
        return ""

    def _done_when(self, main: str, key: str) -> dict[str, Any]:
        """The rows on main, each row's evidence journaled (a `note` whose `done_when` is `row`); the verdict."""
        verdict = on_main(self.git, self.brief, main, self.checkout, self.spec.verify_timeout_s, self._agent_env())
        for row in verdict["rows"]:
            self.session.journal.add("note", sync=False, data={"done_when": "row", "main": main, **row})
        self.session.flush()
        return {"main": main, "passed": verdict["passed"], "summary": verdict["summary"],
                "rows": [{k: r[k] for k in ("row", "command", "exit_code", "expect_exit", "passed", "duration_ms")}
                         for r in verdict["rows"]]}

    def _parked_by_agent(self) -> str:
        """The condition the agent parked its own claim on during its run (`assay wait`), or ""."""
        journal = self.session.journal
        journal.reload(unless_within_s=1.0)  # read as the agent's run ended
        agents = [e for e in journal.entries if e.kind == "intent" and e.step == "agent"]
        waits = [e for e in journal.entries if e.kind == "wait" and agents and e.seq > agents[-1].seq]
        if not waits:
            return ""
        current = journal.claims.read(self.brief.id)
        return str((waits[-1].data or {}).get("on", "")) if current and current.record.state == "waiting" else ""

    def _round(self) -> tuple[dict[str, str], str]:
        """Which round of the work this run is, and the feedback it starts with.

        A person who releases a blocked brief (its review closed, or its attempts failed) asks for the work to
        be done again. The steps of that round get identities of their own (`{"after": "block-<seq>"}` in their
        input, the seq of the block entry), so the agent, verify, review and ready run again instead of
        returning what the blocked round recorded. A `note` (`{"redo": …}`) records the round when it begins,
        so a run resumed after a crash finds it.
        """
        entries = self.session.journal.entries
        rounds = [e for e in entries if e.kind == "note" and (e.data or {}).get("redo")]
        blocks = [e for e in entries if (e.kind == "claim" and ((e.data or {}).get("action") == "block"
                                                                or _superseded_release(e)))
                  or (e.kind == "wake" and (str(((e.data or {}).get("was") or {}).get("on", "")).startswith("briefs:")
                                            or (e.data or {}).get("round")))]
        if not blocks or (rounds and rounds[-1].seq > blocks[-1].seq):  # no block, or its round has begun
            data = (rounds[-1].data or {}) if rounds else {}
            self._round_main = str(data.get("main") or "")
            return ({"after": str(data["redo"])}, _redo_feedback(data)) if rounds else ({}, "")
        woken = (blocks[-1].data or {}).get("round") if blocks[-1].kind == "wake" else None
        if isinstance(woken, dict):  # a person asked for another round on the review, or the checks finished
            data = {"redo": f"wake-{blocks[-1].seq}", "reason": str(woken.get("reason") or ""),
                    "said": str(woken.get("said") or ""), "woken": True,
                    **({"main": str(woken["main"])} if woken.get("main") else {})}
            self._round_main = str(data.get("main") or "")
            self.session.journal.add("note", sync=True, data=data)
            self.echo(f"{self.spec.name}: {self.brief.id}: a new round: {data['reason']}")
            return {"after": data["redo"]}, _redo_feedback(data)
        if blocks[-1].kind == "wake":  # the child briefs its agent waited on have ended: the agent goes on
            data = {"redo": f"wake-{blocks[-1].seq}", "reason": "the child briefs it waited on have ended", "said": ""}
            self.session.journal.add("note", sync=True, data=data)
            self.echo(f"{self.spec.name}: {self.brief.id}: its child briefs have ended; working it on")
            return {"after": data["redo"]}, _redo_feedback(data)
        block = blocks[-1]
        reason = str((block.data or {}).get("reason") or "")
        if _superseded_release(block):  # its review was not marked ready: a desk that claims it again looks afresh
            data = {"redo": f"block-{block.seq}", "reason": reason, "said": "", "superseded": True}
            self.session.journal.add("note", sync=True, data=data)
            self.echo(f"{self.spec.name}: {self.brief.id} was released ({reason}); working it again")
            return {"after": data["redo"]}, _redo_feedback(data)
        review = self.reviews.get(self.brief.id)  # with its comments (once a round): the reviewer's last word
        said = review.record.comments[-1].text if review is not None and review.record.state == "closed" \
            and review.record.comments else ""
        data = {"redo": f"block-{block.seq}", "reason": reason, "said": said}
        self.session.journal.add("note", sync=True, data=data)
        self.echo(f"{self.spec.name}: {self.brief.id} was blocked ({reason}); working it again")
        return {"after": data["redo"]}, _redo_feedback(data)

    def _ensure_branch(self, main: str) -> str:
        """Adopt the work branch if the forge has it; otherwise create it at main (fenced)."""
        tip = self.git.ls_remote(self.branch_ref).get(self.branch_ref)
        if tip:
            self._branch_seen = tip
            return tip
        self.session.journal.add("note", sync=False, data={"branch": "created", "at_commit": main},
                                 refs=[RefUpdate(self.branch_ref, main)])  # with the next push: the agent's intent
        self._branch_seen = main
        return main

    def _open_review(self, head: str, key: str = "") -> str:
        """Open the draft review. Where reviews are refs, the record rides the next journal push with the step's
        intent (fenced: the agent's intent's); on GitHub the intent is on the forge before the API call."""
        branch = WORK_BRANCH_PREFIX + self.brief.id
        if self.reviews.refs_backed:
            for _ in range(3):
                update = self.reviews.open_update(self.brief.id, branch, self.brief.title, head)
                if update is None:
                    break  # open already
                try:  # with the next push (the agent's intent): a review of a branch that has no commit yet
                    self.session.journal.add("note", sync=False, data={"review": "opened"}, refs=[update])
                    return "draft"
                except Fenced:
                    raise
                except Conflict:
                    continue  # the review moved (a comment, say): prepare again on its new tip
            else:
                raise Conflict(f"the review of {self.brief.id!r} kept changing; not opened")
            opened = self.reviews.peek(self.brief.id)
            return opened.record.state if opened is not None else "draft"
        review = self.reviews.open(self.brief.id, branch, self.brief.title, head)  # labelled once, when ready:
        return review.record.state  # a draft says itself what it is, and each label costs a write of the budget

    def _own_commit(self, head: str, main: str) -> bool:
        """Whether `head` is a commit of the work branch's own, not one main already has."""
        return head != main and not self.git.is_ancestor(head, main)

    def _post_statuses(self, head: str, key: str) -> int:
        """The verify rows' evidence at `head`, as the journal has it, posted as commit statuses."""
        rows = {str(e.data["row"]): e.data for e in self.session.journal.entries
                if e.kind == "verify" and e.data and e.data.get("head") == head}
        self.reviews.post_statuses(self.brief.id, head, list(rows.values()), self.epoch)
        return len(rows)

    def _created_at(self) -> str | None:
        """The commit the work branch was created at (the latest `branch: created` note), if a desk created it."""
        notes = [e for e in self.session.journal.entries if e.kind == "note" and (e.data or {}).get("branch")]
        return str((notes[-1].data or {}).get("at_commit")) if notes else None

    def _unsettled(self) -> str:
        """Why the review may not be marked ready yet: the round's unsafe steps with no known outcome ("" if none).

        The journal is read again first: a person may have settled a step meanwhile."""
        self.session.journal.reload()
        stuck = unsettled_unsafe(round_entries(self.session.journal.entries))
        if not stuck:
            return ""
        names = ", ".join(sorted({f"`{e.step}`" for e in stuck}))
        return (f"unsafe step {names} has no known outcome (cut off, cancelled or unknown), so the review is not "
                f"marked ready; inspect, then settle it with `{self.assay_bin} step settle NAME --happened` or "
                "`--did-not`")

    def _late_steering(self, run: str) -> tuple[int, list[int]]:
        """Steering no agent run had taken when the agent run `run` ended: the seq of that run's result (0 when there
        is no such steering), and the steering's seqs.

        Judged from the journal alone (the `delivered` notes and where they stand), so that a replay decides the
        same: steering taken by a later run still counts as late here."""
        journal = self.session.journal
        journal.reload(unless_within_s=1.0)  # read for `_unsettled` just before
        ends = [e.seq for e in journal.entries if e.kind == "result" and e.step == "agent"
                and isinstance((e.data or {}).get("output"), dict) and (e.data or {})["output"].get("run") == run]
        end = ends[-1] if ends else journal.entries[-1].seq
        taken = {int((e.data or {}).get("of", 0)): e.seq for e in journal.entries
                 if e.kind == "note" and (e.data or {}).get("steer") == "delivered"}
        late = [e.seq for e in round_entries(journal.entries)
                if e.kind == "steer" and taken.get(e.seq, end + 1) > end]
        return (end if late else 0), late

    def _prompt(self, feedback: str) -> tuple[str, tuple[int, ...]]:
        """The agent's prompt, and the seqs of the steering it holds (all of it so far)."""
        brief = self.brief
        steers = [e for e in self.session.journal.entries if e.kind == "steer"]
        steering = [str((e.data or {}).get("text", "")) for e in steers]
        parts = summary(self.session.journal.entries, str(self.assay_bin), unknown_message)
        parts += [f"# {brief.title}", "", brief.body, ""]
        if brief.verify:
            parts += ["## Verify rows (run by Assay from main's copy of this brief)", ""]
            parts += [f"- {row.id}: `{row.run}` (expects exit {row.expect_exit})" for row in brief.verify] + [""]
        if feedback:
            parts += ["## Feedback", "", feedback, ""]
        parts += self._thread_lines()
        if self.spec.protocol == "acp":  # its tool calls are journaled as they run: no wrapper to learn
            return "\n".join([*parts, *self._children(), "## Steering", "", *steering]) + "\n", \
                tuple(e.seq for e in steers)
        parts += ["## Effects outside this worktree", "",
                  "Run anything that changes the world outside this worktree (a deploy, a migration, a message) "
                  f"as a journaled step, with Assay at `{self.assay_bin}`:",
                  f"`{self.assay_bin} step run --name NAME --policy unsafe -- COMMAND ARGS...` (add "
                  "`--probe 'SHELL'` when a command can tell whether it happened: exit 0 yes, 1 no). "
                  "After a crash, a call that completed before returns its recorded result instead of running again; "
                  "one whose outcome is unknown is refused once: inspect, "
                  f"then `{self.assay_bin} step settle NAME --happened|--did-not`.", ""]
        parts += self._children()
        parts += ["## Steering", "", *steering]
        return "\n".join(parts) + "\n", tuple(e.seq for e in steers)

    def _thread_lines(self) -> list[str]:
        """The review threads that wait on an answer (read now: the agent's `assay step answer` names them)."""
        self._threads = tuple(t for t in self.reviews.threads(self.brief.id) if t.allowed is not False)
        if not self._threads:
            return []
        lines = ["## Review threads", "",
                 "People wrote these on the review. Answer every one before you finish, with "
                 f"`{self.assay_bin} step answer ID --fixed TEXT` (what you changed for it: Assay replies naming the "
                 "commit it pushes) or `--reason TEXT` (why nothing changes). The review is not marked ready while "
                 "one has no answer.", ""]
        for t in self._threads:
            lines.append(f"- thread {t.id} on {t.where}:")
            lines += [f"  - @{s.by}: {s.text}" for s in t.said]
        return [*lines, ""]

    def _children(self) -> list[str]:
        """The outcome of the child briefs this brief last waited on (`wait --on briefs:…`), for its next run."""
        waits = [str(((e.data or {}).get("was") or {}).get("on", "")) for e in self.session.journal.entries
                 if e.kind == "wake"]
        waited = [w for w in waits if w.startswith("briefs:")]
        if not waited:
            return []
        lines = ["## Child briefs", "", "The briefs this one waited on ended so:", ""]
        claims = self.session.journal.claims
        for child in waited[-1][7:].split(","):
            current = claims.read(child)
            state = current.record.state if current else custody.state_of(claims, child)
            review = self.reviews.kept(child)
            merged = review.record.merged_commit if review is not None and review.record.merged_commit else ""
            why = f" ({current.record.reason})" if current and current.record.reason and state == "blocked" else ""
            merged_as = f", merged as {merged[:10]}" if merged else ""
            lines.append(f"- `{child}`: {state or 'never claimed'}{why}{merged_as}")
        return [*lines, ""]

    def _agent(self, attempt: int, feedback: str, key: str) -> dict[str, Any]:
        prompt, steering = self._prompt(feedback)  # built after the intent's push: the journal as fresh as it gets
        prompt_file = self.prompts / f"{self.brief.id}-{self.epoch}-{attempt}.md"
        saved, journal = None, self.session.journal
        if self.spec.session is not None:  # the round's conversation so far, wherever it was saved
            journal.reload()
            saved = sessions.latest(round_entries(journal.entries),
                                    lambda e: journal.blob(e, str((e.data or {}).get("checkpoint_blob"))))
        prompt = self._files_note(saved) + prompt
        self._made_worktree = False  # restored once: later attempts work on this run's own files
        run = AgentRun(self.brief, self.epoch, attempt, prompt, self.worktree, prompt_file, self.session.journal.log(),
                       self.assay_bin, saved, steering, self.state, self._threads, key)
        result = run_agent(self.session.journal.claims, self.spec, run, self.echo)
        # the agent's steps moved the journal, and the heartbeat the claim: read their tips (one ref advertisement)
        # rather than push the result on stale leases, be rejected and push again. A lost claim or an absent
        # forge is the result's push to find, as before
        with contextlib.suppress(AssayError):
            self.session.journal.reload()
        return result

    def _files_note(self, saved: sessions.Saved | None) -> str:
        """Put the files as the newest snapshot of the round has them (a resumed conversation's, or a later step's,
        whose result would be replayed, not run again) in place, and say so: for a fresh conversation, only into a
        worktree made new (this machine keeps no files of an earlier run's: its own are newer than any snapshot).
        One that cannot be restored is journaled as such, and the one before it is tried."""
        for tried in range(RESTORE_TRIES):
            files = sessions.newest_files(round_entries(self.session.journal.entries))  # less those that failed
            if files is None or (saved is not None and files.seq < saved.seq):
                break  # none, or older than the conversation (its own failed to restore)
            if saved is None and (not self._made_worktree or files.epoch >= self.epoch):
                return ""
            state = self._restore(files)
            if state:
                if saved is not None:
                    return sessions.resumed_note(saved, self.worktree, "later" if state == "restored" and
                                                 files.seq > saved.seq else state, older=tried > 0)
                return sessions.files_note(files, older=tried > 0) if state == "restored" else ""
        return sessions.resumed_note(saved, self.worktree, "") if saved is not None else ""

    def _restore(self, files: sessions.Files) -> str:
        """Put a worktree snapshot in place before the agent starts: "restored"; "newer" when the worktree is past
        it already (the branch was pushed after it); "" when it cannot be restored, which is journaled (never tried
        again)."""
        try:
            restored = wip.restore(self.git, self.worktree, self.brief.id, files.commit)
        except (AssayError, OSError) as exc:
            why = str(getattr(exc, "message", "") or exc)
            self.echo(f"{self.spec.name}: {self.brief.id}: the worktree of journal entry {files.seq} could not be "
                      f"restored ({why}); an older snapshot is tried, else the agent works on the branch as pushed")
            self.session.journal.add("note", sync=True, data={"worktree": "failed", "of": files.seq, "why": why})
            return ""
        if restored:
            self.echo(f"{self.spec.name}: {self.brief.id}: worktree restored as journal entry {files.seq} saved it "
                      f"({files.commit[:10]})")
        return "restored" if restored else "newer"

    def _push(self) -> str:
        """Commit what the agent left and push the branch, atomically with a journal entry (fenced)."""
        repo = self.git.worktree(self.worktree, "HEAD")
        found = self.git.ls_remote(self.branch_ref, learned_ref(self.brief.id))
        tip = found.get(self.branch_ref)
        if tip:
            self.git.ensure_objects({self.branch_ref: tip})
            stale = any(int(epoch) != self.epoch
                        for message in repo.messages_since(tip) for epoch in _EPOCH_TRAILER.findall(message))
            if stale and self.git.is_ancestor(tip, repo.head()):  # committed by an earlier epoch that died before
                repo.reset_soft(tip)  # its push: made again under this epoch, so its trailer tells who pushed it
        message = f"{self.brief.title}\n\nAssay-Brief: {self.brief.id}\nAssay-Epoch: {self.epoch}\n"
        repo.commit_all(message, author=Signature.of(self.spec.name))
        crash_point("push.after-commit", self.brief.id)
        head = repo.head()
        if tip and tip != head and not self.git.is_ancestor(tip, head):
            raise Conflict(f"{self.branch_ref} has commits that the worktree of {self.brief.id!r} lacks; "
                           "not overwriting",
                           hint=f"merge {self.branch_ref} into the worktree at {self.worktree}, then run the "
                                "desk again")
        if tip != head:
            rider, needless = self._footprint_rider(head, found.get(learned_ref(self.brief.id)))
            journal = self.session.journal
            journal.add("note", sync=True, data={"pushed": head}, refs=[RefUpdate(self.branch_ref, head, tip or ZERO)],
                        riders=[rider] if rider else [])
            self._footprint_rode = needless or (rider is not None and rider in journal.landed_riders)
        self._pushed = head
        return head

    def _give_back_worktree(self) -> None:
        """As the review is made ready, the claim still this run's: a worktree whose files and HEAD are the branch
        as this run pushed it (nothing uncommitted, untracked or hidden from git, no git operation under way;
        ignored files are let go, as on another machine) goes to the pool of spares beside it, so the next brief's
        worktree is made clean from it rather than checked out whole. One holding anything more stays here."""
        if not self._pushed or not (self.worktree / ".git").exists():
            return
        repo = WorkRepo(self.worktree)
        with contextlib.suppress(AssayError, OSError):
            if repo.head() == self._pushed and not repo.git(
                    "status", "--porcelain", "-z", "--untracked-files=all", "--ignore-submodules=none").stdout:
                self.git.give_back(self.worktree, self.worktree.parent / SPARES, keep_unfit=True)

    def _footprint_rider(self, head: str, prints: str | None) -> tuple[RefUpdate | None, bool]:
        """The footprint of a brief that declares none, from what its work changes against main, to ride the push
        of that work; and whether none is needed (it holds one already, or the work changes nothing). Neither when
        it cannot be read now: `_learn_footprint` tries after the push."""
        if self.brief.touches:
            return None, True
        try:
            base = self.git.merge_base(self._main, head) or self._main
            rider = self.session.journal.claims.footprint_update(self.brief.id, self.spec.name, self.epoch,
                                                                 self._changed(base, head), prints)
            return rider, rider is None
        except AssayError:
            return None, False

    def _changed(self, base: str, head: str) -> list[str]:
        return self.git.changed_paths(base, head)

    def _learn_footprint(self, main: str, head: str) -> None:
        """A brief that declares no `touches:` gets its footprint from what its first round changed (said, not
        raised, if it cannot be kept: the check at landing still stands)."""
        try:
            base = self.git.merge_base(main, head) or main
            kept = self.session.journal.claims.learn_footprint(self.brief.id, self.spec.name, self.epoch,
                                                               self._changed(base, head))
        except Fenced:
            raise
        except AssayError as exc:
            self.echo(f"{self.spec.name}: {self.brief.id}: its footprint was not kept: {exc.message}")
            return
        if kept:
            self.echo(f"{self.spec.name}: {self.brief.id}: footprint kept from its diff")

    def _agent_env(self) -> dict[str, str]:
        return agent_env(self.spec.env_allow, {}, extra={**dict(self.spec.env), **dict(self.brief.env)})

    def _verify(self, head: str, key: str) -> dict[str, Any]:
        return verify(self.git, self.session, self.brief, head, self.checkout, self.spec.verify_timeout_s,
                      self._agent_env(), landed_on=self._round_main)

    def _merged_meanwhile(self, exc: IllegalReviewChange, head: str) -> str:
        """"merged" when a person merged the review before it was marked ready; any other refusal is raised."""
        if exc.state != "merged":
            raise exc
        self.session.note(f"the review was merged by a person before it was marked ready at {head[:10]}")
        return "merged"

    def _mark_ready(self, head: str, key: str = "") -> str:
        """Mark the review ready in the same atomic push as a journal entry: a fenced desk cannot.

        A review that a person merged meanwhile (the desk died after marking it ready, say) is
        left as it is: the claim waits on it and the next pass settles it as done.
        """
        if not self.reviews.refs_backed:  # an API call: its intent rides a claim renewal first, so fenced
            if any(t.allowed is not False for t in self.reviews.threads(self.brief.id)):
                return THREADS_OPEN  # looked at once more, just before: the API cannot make it one decision
            self.session.journal.add("note", sync=True, data={"review": "ready", "head": head, "via": "api"})
            try:
                review = self.reviews.mark_ready(self.brief.id, head)
            except IllegalReviewChange as exc:
                return self._merged_meanwhile(exc, head)
            self.reviews.label(self.brief.id, review.record.state, self.spec.name)
            return review.record.state
        for _ in range(3):
            try:
                update = self.reviews.ready_update(self.brief.id, head)
            except IllegalReviewChange as exc:
                if exc.state in ("draft", "ready"):  # refused only while a review note waits on an answer
                    return THREADS_OPEN
                return self._merged_meanwhile(exc, head)
            if update is None:
                return "ready"
            try:
                self.session.journal.add("note", sync=True, data={"review": "ready", "head": head}, refs=[update])
                return "ready"
            except Fenced:
                raise
            except Conflict:
                continue  # the review moved (a comment, say): prepare again on its new tip
        raise Conflict(f"the review of {self.brief.id!r} kept changing; not marked ready")
