"""The promise's invariants, judged from evidence outside the code under test: the effects' own log files, the
refs read with plain git (`reader.py`), the agents' request log (what reached the agent), /proc, and every
command's output. Each broken invariant is a `Break` naming the invariant and its evidence."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .reader import claim_chain, objects_holding, review_chain, safe_entries

if TYPE_CHECKING:
    from .fleet import PromiseFleet, Setup

INVARIANTS = ("effect-twice", "effect-unjournaled", "settled-against-evidence", "steer-undelivered", "steer-lost",
              "stuck", "overlap", "main-broken", "thread-unanswered", "answer-twice",
              "secret", "traceback", "stranded", "journal", "lost-work")
OPEN_INTENT = re.compile(r"intent (\d+) \(\S+\) has neither a result nor an outcome_unknown")


@dataclass(frozen=True)
class Break:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.detail}"


@dataclass
class Evidence:
    setup: Setup
    briefs: list[str]  # the briefs the fleet worked (and their children)
    fleet: PromiseFleet
    commands: list[dict[str, Any]]  # what the harness ran itself, with outputs
    stranded: list[tuple[int, str]]  # effect processes alive after their owners ended
    board: dict[str, Any]
    orphaned: list[tuple[int, str, str]]  # effect processes that ran on after a kill: (pid, command, the kill)
    overlapping: list[tuple[str, str]] = field(default_factory=list)  # briefs whose declared footprints overlap
    checks: dict[str, str] = field(default_factory=dict)  # brief -> its verify row's command


def judge(ev: Evidence) -> list[Break]:
    from .fleet import read_jsonl

    journals = {b: safe_entries(ev.setup.forge, b) or [] for b in ev.briefs}
    out = effects(ev, journals)
    out += steering(ev, journals, read_jsonl)
    out += stuck(ev)
    out += secrets(ev, read_jsonl)
    out += tracebacks(ev, read_jsonl)
    out += [Break("stranded", f"pid {pid} still runs after its owner ended: {cmd}") for pid, cmd in ev.stranded]
    out += [Break("stranded", f"pid {pid} ran on after {after}, under no desk: {cmd}")
            for pid, cmd, after in ev.orphaned]
    out += journal_shape(ev, journals)
    out += lost_work(journals)
    out += fleet_work(ev)
    out += threads(ev)
    return out


def threads(ev: Evidence) -> list[Break]:
    """From the review chains alone: no review was marked ready while a review note's thread ended with a person's
    words (every thread answered before ready), and no person's words were answered twice."""
    out: list[Break] = []
    for brief in ev.briefs:
        chain = review_chain(ev.setup.forge, brief)
        for sha, subject, record in chain:
            if subject.startswith("assay: review mark-ready"):
                out += [Break("thread-unanswered", f"{brief}: marked ready at {sha[:10]} while thread {n} ends with "
                                                   f"{last.get('by')!r}: {last.get('text')!r}")
                        for n, last in _thread_ends(record).items() if not last.get("answer")]
        if chain:
            comments = [c for c in chain[-1][2].get("comments", []) if isinstance(c, dict)]
            for n in {c.get("thread") for c in comments if c.get("thread")}:
                members = [c for c in comments if c.get("thread") == n]
                out += [Break("answer-twice", f"{brief}: thread {n} answered twice in a row: {b.get('text')!r}")
                        for a, b in zip(members, members[1:], strict=False) if a.get("answer") and b.get("answer")]
    return out


def _thread_ends(record: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each review note's thread (by its opener's number) and its last comment."""
    comments = [c for c in record.get("comments", []) if isinstance(c, dict)]
    ends: dict[int, dict[str, Any]] = {}
    for c in comments:
        if isinstance(c.get("thread"), int) and c["thread"]:
            ends[c["thread"]] = c
    return ends


def fleet_work(ev: Evidence) -> list[Break]:
    """Briefs whose footprints overlap were never live at once (by their claim chains' commit times), and main
    never held a merged brief whose verify row fails there (each first-parent commit, checked out)."""
    from tests.helpers.fleetrun import breaking_commits, live_spans, meet

    out = [Break("overlap", f"{a} and {b} declare overlapping `touches:` and were live at once")
           for a, b in ev.overlapping
           if meet(list(live_spans(ev.setup.forge, a)), list(live_spans(ev.setup.forge, b)))]
    out += [Break("main-broken", f"main at {commit[:10]}: the verify row of a brief merged by then fails there")
            for commit in breaking_commits(ev.setup.forge, ev.checks, ev.setup.dir / "main-check")]
    return out


def verdicts(journal: list[dict[str, Any]], step: str) -> dict[int, str]:
    """Each intent of `step`: what the journal says of it at the end: happened, did-not, unknown or open."""
    said = {e["seq"]: "open" for e in journal if e.get("kind") == "intent" and e.get("step") == step}
    for e in journal:
        if e.get("intent") not in said or e.get("kind") not in ("result", "outcome_unknown"):
            continue
        data = e.get("data") or {}
        if e["kind"] == "outcome_unknown":
            said[e["intent"]] = "unknown"
        elif data.get("settled"):
            said[e["intent"]] = "happened" if data["settled"] == "happened" else "did-not"
        elif e.get("status") == "completed" and (data.get("output") or {}).get("exit_code") == 0:
            said[e["intent"]] = "happened"
        elif e.get("status") == "completed":
            said[e["intent"]] = "failed"  # it ran and exited non-zero: no word on whether its effect was made
        else:
            said[e["intent"]] = "did-not"  # cancelled, or failed to start: the journal says it made no effect
    return said


def effects(ev: Evidence, journals: dict[str, list[dict[str, Any]]]) -> list[Break]:
    out = []
    for log in sorted((ev.setup.dir / "effects").glob("*.log")):
        brief, step = log.name.removesuffix(".log").split(".", 1)
        lines = log.read_text().splitlines()
        said = verdicts(journals.get(brief, []), step)
        where = f"{brief} {step}: effect log {lines}; the journal's word on each intent {said}"
        if len(lines) > 1:
            out.append(Break("effect-twice", where))
        if lines and not said:
            out.append(Break("effect-unjournaled", where))
        happened = sum(v == "happened" for v in said.values())
        maybe = sum(v in ("unknown", "open", "failed") for v in said.values())
        if len(lines) > happened + maybe:
            out.append(Break("settled-against-evidence", f"more effects than the journal allows: {where}"))
        if len(lines) < happened:
            out.append(Break("settled-against-evidence", f"the journal says happened, no effect: {where}"))
    return out


def steering(ev: Evidence, journals: dict[str, list[dict[str, Any]]], read_jsonl: Any) -> list[Break]:
    """Steering marked delivered must be in what an agent was sent: a prompt, or its steering tool's answer."""
    sent = [str(r.get("prompt", "")) for r in read_jsonl(ev.setup.dir / "requests.jsonl")]
    sent += [str(r.get("text", "")) for r in read_jsonl(Path(str(ev.setup.dir / "mcp") + ".mcp"))
             if r.get("tool") == "steering"]
    out = []
    for b, journal in journals.items():
        texts = {e["seq"]: str((e.get("data") or {}).get("text", "")) for e in journal if e.get("kind") == "steer"}
        last = claim_chain(ev.setup.forge, b)[-1] if journal else {}
        if last.get("state") in ("waiting", "done"):  # the work is over: no next run will carry it
            out += [Break("steer-lost", f"{b}: steering {seq} ({text!r}) reached no agent, and the brief is "
                                        f"{last.get('state')}") for seq, text in texts.items()
                    if not any(text in s for s in sent)]
        for e in journal:
            data = e.get("data") or {}
            if e.get("kind") == "note" and data.get("steer") == "delivered":
                text = texts.get(data.get("of"), "")
                if not text or not any(text in s for s in sent):
                    out.append(Break("steer-undelivered", f"{b}: entry {e['seq']} says steering {data.get('of')} "
                                                          f"({text!r}) was delivered; no agent was sent it"))
    return out


def stuck(ev: Evidence) -> list[Break]:
    """A brief not done, not waiting on a ready review, must be on the board's needs-you list with why and next."""
    if not ev.board:
        return [Break("stuck", "the board could not be built: " + str(ev.commands[-1:]))]
    needs = {n.get("brief"): n for n in ev.board.get("needs_you", [])}
    out = []
    for b in ev.briefs:
        try:
            last = claim_chain(ev.setup.forge, b)[-1]
        except Exception:  # never claimed: it must say why (it is ready, or why not)
            last = {"state": "unclaimed"}
        if last.get("state") in ("done", "waiting"):
            continue
        item = needs.get(b)
        if last.get("state") == "blocked" and str(last.get("reason") or "").strip() and item and item.get("next"):
            continue
        if item is None or not str(item.get("why", "")).strip() or not str(item.get("next", "")).strip():
            out.append(Break("stuck", f"{b} is {last.get('state')} ({last.get('reason', '')!r}) and the board "
                                      f"says nothing a person can do: {item}"))
    return out


def texts(ev: Evidence, read_jsonl: Any) -> dict[str, str]:
    """Every output the fleet and the harness saw, by where it came from."""
    out = {p.name: p.read_text(errors="replace") for p in sorted(ev.setup.logs.glob("*.log"))}
    for i, c in enumerate(ev.commands):
        out[f"assay {' '.join(c['argv'][:2])} #{i}"] = f"{c['out']}\n{c['err']}"
    for name in ("outputs.jsonl", "requests.jsonl", "mcp.mcp"):
        out[name] = "\n".join(str(r) for r in read_jsonl(ev.setup.dir / name))
    return out


def secrets(ev: Evidence, read_jsonl: Any) -> list[Break]:
    seen: dict[tuple[str, str, str], int] = {}
    for r in read_jsonl(ev.setup.dir / "leaks.jsonl"):
        key = (str(r.get("where")), str(r.get("comm")), ",".join(sorted(r.get("names") or [])))
        seen[key] = seen.get(key, 0) + 1
    out = [Break("secret", f"the agent read the token in the {where} of a `{comm}` process ({names or 'argv'}), "
                           f"{n} time(s)") for (where, comm, names), n in sorted(seen.items())]
    out += [Break("secret", f"the token is in {where}") for where, text in texts(ev, read_jsonl).items()
            if ev.setup.secret in text]
    out += [Break("secret", f"the token is in forge object {sha}")
            for sha in objects_holding(ev.setup.forge, ev.setup.secret.encode())]
    return out


TRACEBACK = "Traceback (most recent call last)"
AGENT_LINE = re.compile(r"^  \S+ \| ")  # a desk echoes its agent's output so


def tracebacks(ev: Evidence, read_jsonl: Any) -> list[Break]:
    """A traceback of Assay's: in a desk's own lines, or one through Assay's code anywhere (the test's own agents
    may die of a killed `assay mcp`: that is theirs, not Assay's)."""
    from tests.conftest import REPO

    ours = f'File "{REPO / "assay"}/'
    out = []
    for where, text in texts(ev, read_jsonl).items():
        for line_at in [m.start() for m in re.finditer(re.escape(TRACEBACK), text)]:
            start = text.rfind("\n", 0, line_at) + 1
            chunk = text[start:start + 4000]
            if not AGENT_LINE.match(chunk) or ours in chunk:
                out.append(Break("traceback", f"in {where}: {chunk[:1500]}"))
                break
    return out


def lost_work(journals: dict[str, list[dict[str, Any]]]) -> list[Break]:
    """An agent run that finished (exit 0) has its work where the brief's next verify checks it, in that run or in
    a later one that replayed it (no agent began since): the fleet's agents do the work their checks test before
    they exit 0, a resumed conversation's too (`agent.converse`). A verify row failing there checked a worktree
    without it: the files were lost (a result that reached the forge without them, a worktree restored without
    what its conversation had done)."""
    out = []
    for b, journal in journals.items():
        finished: tuple[int, str] | None = None  # the agent run that finished last (exit 0), and in which run
        for e in sorted(journal, key=lambda e: int(e.get("seq", 0))):
            if e.get("step") == "agent" and e.get("kind") in ("intent", "result"):
                said = (e.get("data") or {}).get("output")
                done = e.get("kind") == "result" and isinstance(said, dict) and said.get("exit_code") == 0
                finished = (int(e["seq"]), str(e.get("run"))) if done else None
            elif e.get("kind") == "verify" and (e.get("data") or {}).get("passed") is False and finished is not None:
                how = "replayed" if str(e.get("run")) != finished[1] else "in the same run"
                out.append(Break("lost-work", f"{b}: verify failed at seq {e.get('seq')} (run {e.get('run')}) on the "
                                              f"work of the agent run that finished (exit 0) at seq {finished[0]} "
                                              f"(run {finished[1]}), {how}"))
                finished = None
    return out


def journal_shape(ev: Evidence, journals: dict[str, list[dict[str, Any]]]) -> list[Break]:
    """seq without gaps, one holder per epoch, each intent resolved once (a blocked brief may leave a safe or
    idempotent step open for a person's release); every journal snapshot agrees with the entries it summarizes."""
    from .reader import invariants, snapshot_problems

    out = []
    for b, journal in journals.items():
        if not journal:
            continue
        try:
            last = claim_chain(ev.setup.forge, b)[-1]
        except Exception:
            continue
        policy = {e["seq"]: e.get("policy") for e in journal if e.get("kind") == "intent"}
        for p in invariants(ev.setup.forge, b):
            o = OPEN_INTENT.match(p)
            if o and (last.get("state") in ("blocked", "held") and policy.get(int(o[1])) != "unsafe"):
                continue
            out.append(Break("journal", f"{b}: {p} (claim {last.get('state')} at epoch {last.get('epoch')})"))
        out += [Break("journal", f"{b}: {p}") for p in snapshot_problems(ev.setup.forge, b)]
    return out
