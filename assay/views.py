"""Output types: what `--json` prints and what the tables show. Never domain objects printed raw."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence

from assay.core.claims import Claim, InvalidClaim, Liveness, fold_renewals
from assay.core.records import human_age, iso_seconds
from assay.errors import error_lines

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from assay.core.briefs import Problem


def claim_view(claim: Claim, now: float, written_age_s: int | None = None,
               live: Liveness | None = None, progress: str = "") -> dict[str, Any]:
    """A claim as listings show it: `age_s` since its state changed, `written_age_s` since its tip was written (a
    renewal), `liveness` and `why` for a held claim (`claims.liveness`), and for a dead or overdue one `next`: when
    the sweep expires it, or the command that ends it now (`Liveness.advice`)."""
    r = claim.record
    age = max(0, int(now - iso_seconds(r.at)))
    return {"brief": r.brief, "state": r.state, "epoch": r.epoch, "desk": r.desk, "holder": r.holder,
            "lease_s": r.lease_s, "branch": r.branch, "wait": r.wait, "reason": r.reason, "at": r.at,
            "age_s": age, "written_age_s": written_age_s, "liveness": live.word if live else "",
            "why": live.why if live else "", "next": live.advice(r.brief, r.desk) if live else "",
            "progress": progress, "commit": claim.sha}


def invalid_view(item: InvalidClaim) -> dict[str, Any]:
    return {"ref": item.ref, "commit": item.sha, "problem": item.problem}


def print_json(data: Any) -> None:
    """`--json` output; with `--jq EXPR`, what the program selects from it (`jqfilter`)."""
    from assay import jqfilter

    program = jqfilter.active()
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n" if program is None else
                     jqfilter.apply(program, data))


_LIVE_STYLE = {"live": "green", "overdue": "yellow", "dead": "bold red"}
_STATE_STYLE = {"invalid": "bold red", "held": "cyan", "waiting": "yellow", "blocked": "bold red", "done": "green",
                "released": "dim", "expired": "magenta", "abandoned": "dim red"}


def _styled(text: Any, style: str) -> str:
    from rich.markup import escape

    return f"[{style}]{escape(str(text))}[/]" if style else escape(str(text))


def _plain(text: Any) -> str:
    from rich.markup import escape

    return escape(str(text))


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    columns = os.environ.get("COLUMNS", "")
    # pipes and logs get whole lines, not 80 columns, unless COLUMNS says how wide
    width = None if stream.isatty() else int(columns) if columns.isdigit() and int(columns) >= 40 else 200
    return Console(stderr=stderr, highlight=False, width=width)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
FAST_ROWS = 500  # above this many rows a table is printed as plain aligned text: rich takes ~1 ms a row
Cell = tuple[str, str]  # text, rich style ("" for none)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Cell]], right: frozenset[str] = frozenset(),
                title: str = "", whole: frozenset[str] = frozenset(), fold: frozenset[str] = frozenset()) -> None:
    """A table with styles, or, past `FAST_ROWS`, the same columns as plain text (fast for any size). On a narrow
    terminal the columns in `whole` are never wrapped or cut (the widest others give way first), those in `fold`
    wrap even inside a word, so nothing of them is lost."""
    if len(rows) <= FAST_ROWS:
        from rich.table import Table

        table = Table(box=None, header_style="bold", title=title or None, title_justify="left")
        for col in columns:
            table.add_column(col, justify="right" if col in right else "left", no_wrap=col in whole,
                             overflow="fold" if col in fold else "ellipsis")
        for row in rows:
            table.add_row(*(_styled(text, style) for text, style in row))
        _console().print(table)
        return
    texts = [[text for text, _ in row] for row in rows]
    if _CONTROL.search("".join(t for row in texts for t in row)):  # no terminal escapes
        texts = [[_CONTROL.sub("?", t) for t in row] for row in texts]
    widths = [max(len(col), *map(len, cells)) for col, cells in zip(columns, zip(*texts, strict=True), strict=True)]
    line = "  ".join(f"{{:{'>' if col in right else '<'}{w}}}" for col, w in zip(columns, widths, strict=True))
    head = [title] if title else []
    sys.stdout.write("\n".join([*head, *(line.format(*cells).rstrip() for cells in [list(columns), *texts])]) + "\n")


LATE_SHOWN = 5  # overdue or dead claims `assay claims` says what to do about, one line each


def nothing_listed(noun: str, states: Sequence[str], desk: str | None, total: int, none_at_all: str) -> str:
    """What an empty listing says: "no NOUNs NONE_AT_ALL" when there are none, else which filter matched none
    and how many there are without it, so that a filter that matches nothing never reads as an empty forge."""
    plural = f"{noun}s"
    if not total or (not states and desk is None):
        return f"no {plural} {none_at_all}".rstrip()
    said = [f"with state {' or '.join(states)}"] if states else []
    said += [f"of desk {desk}"] if desk is not None else []
    return f"no {plural} {' '.join(said)} ({total} {noun if total == 1 else plural} in all)"


def render_claims(views: Sequence[dict[str, Any]], invalid: Sequence[dict[str, Any]],
                  empty: str = "no claims on this forge yet") -> None:
    if not views and not invalid:
        _console().print(_plain(empty))
        return
    print_table(("brief", "state", "epoch", "desk", "age", "renewed", "live"),
                [[(v["brief"], ""), (v["state"], _STATE_STYLE.get(v["state"], "")), (str(v["epoch"]), ""),
                  (v["desk"], ""), (human_age(v["age_s"]), ""),
                  (human_age(v["written_age_s"]) if v.get("written_age_s") is not None else "", ""),
                  (v.get("liveness") or "", _LIVE_STYLE.get(v.get("liveness") or "", ""))] for v in views],
                right=frozenset({"epoch", "age", "renewed"}))
    for v in views:
        if v.get("progress"):
            _console().print(f"{_plain(v['brief'])}: {_plain(v['progress'])}")
    late = [v for v in views if v.get("liveness") in ("overdue", "dead")]
    if late:
        err = _console(stderr=True)
        err.print(f"[yellow]{len(late)} claim(s) overdue or dead[/]:")
        for v in late[:LATE_SHOWN]:
            err.print(f"  {_plain(v['brief'])}: {_plain(v['why'])}; {_plain(v['next'])}")
        if len(late) > LATE_SHOWN:
            err.print(f"  and {len(late) - LATE_SHOWN} more: `assay claims --json` lists each with its `next`")
    for bad in invalid:
        where = f"{bad['ref']} ({bad['commit'][:10]})"
        _console(stderr=True).print(f"[yellow]warning:[/] {where}: {_plain(bad['problem'])}")


def history_rows(history: Sequence[Claim | InvalidClaim], whys: Sequence[str], now: float) -> list[dict[str, Any]]:
    """`assay claim history --json`: each record of the chain as `claims` lists it, `why` custody changed at it
    (`listings.custody_reasons`, as the board says it) in place of a liveness; an invalid one named with its
    problem."""
    return [invalid_view(c) if not isinstance(c, Claim) else {**claim_view(c, now), "why": why}
            for c, why in zip(history, whys, strict=True)]


def render_history(brief: str, rows: Sequence[dict[str, Any]], filtered_out: str = "") -> None:
    """The custody table; `filtered_out`: what to say when a filter left no row of a chain that has some."""
    from rich.table import Table

    console = _console()
    if not rows:
        console.print(_plain(filtered_out) if filtered_out else f"brief {brief!r} has never been claimed")
        return
    table = Table(box=None, header_style="bold", title=f"custody of {brief}", title_justify="left")
    for col in ("at", "state", "epoch", "desk", "holder", "reason", "renewed", "commit"):
        table.add_column(col)
    for v, renewals in fold_renewals(rows, history_key):
        if "problem" in v:
            table.add_row("?", "[yellow]invalid[/]", "", "", "", _plain(v["problem"]), "", v["commit"][:10])
            continue
        style = _STATE_STYLE.get(v["state"], "")
        table.add_row(v["at"], _styled(v["state"], style), str(v["epoch"]), v["desk"], _plain(v["holder"]),
                      _plain(v["why"]), f"{renewals}×" if renewals else "", v["commit"][:10])
    console.print(table)


def history_key(v: dict[str, Any]) -> object:
    """Rows of `assay claim history` that a renewal repeats (None for an invalid row: never folded)."""
    return None if "problem" in v else (v["state"], v["epoch"], v["desk"], v["holder"], v["at"])


def render_claim_result(verb: str, view: dict[str, Any]) -> None:
    """One line, written without rich (a claim's or a renewal's whole process is a few times a push)."""
    sys.stdout.write(f"{verb} {_bold(view['brief'])}: {view['state']}, epoch {view['epoch']}, "
                     f"desk {view['desk']} (holder {view['holder']}, lease {view['lease_s']}s)\n")


def _bold(text: str) -> str:
    """Bold on a terminal that shows colour (as rich decides: not under NO_COLOR or TERM=dumb)."""
    plain = not sys.stdout.isatty() or "NO_COLOR" in os.environ or os.environ.get("TERM") in ("dumb", "unknown")
    return text if plain else f"\x1b[1m{text}\x1b[0m"


def lint_view(briefs: Sequence[Any], problems: Sequence[Problem]) -> dict[str, Any]:
    """`assay brief lint --json`: how many brief files were checked, which of them have problems, and each problem
    (a brief that reads but names a missing dependency is one file, counted once)."""
    paths = {b.path for b in briefs} | {p.path for p in problems}
    return {"checked": len(paths), "with_problems": sorted({p.path for p in problems}),
            "problems": [{"path": p.path, "line": p.line, "message": p.message, "hint": p.hint} for p in problems]}


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def render_lint(view: dict[str, Any]) -> None:
    """`assay brief lint`: each problem, then `2 problems in 1 of 3 briefs` (or `3 briefs ok`)."""
    from assay.core.briefs import Problem

    for p in view["problems"]:
        sys.stdout.write(f"{Problem(p['path'], p['line'], p['message'], p['hint'])}\n")
    checked, bad = view["checked"], len(view["with_problems"])
    if not view["problems"]:
        sys.stdout.write(f"{_count(checked, 'brief')} ok\n")
    elif bad == 1:
        of = f"; {_count(checked - 1, 'other brief')} ok" if checked > 1 else ""
        sys.stdout.write(f"{_count(len(view['problems']), 'problem')} in {view['with_problems'][0]}{of}\n")
    else:
        of = f"{bad} of {checked} briefs" if bad < checked else f"{bad} briefs"
        sys.stdout.write(f"{_count(len(view['problems']), 'problem')} in {of}\n")


def render_exit_codes(codes: Sequence[tuple[int, str, Sequence[tuple[str, str]]]], note: str) -> None:
    """`assay help exit-codes`: each code, what it means and the error classes that exit with it, in 80 columns."""
    import textwrap

    width = max(len(name) for _, _, classes in codes for name, _ in classes)
    out = ["Exit codes of assay (assay/errors.py):", ""]
    for code, meaning, classes in codes:
        out += textwrap.wrap(meaning, 80, initial_indent=f"{code:>4}  ", subsequent_indent=" " * 6)
        for name, doc in classes:
            out += textwrap.wrap(doc, 80, initial_indent=f"{'':6}{name:<{width}}  ",
                                 subsequent_indent=" " * (8 + width))
    out += ["", *textwrap.wrap(note, 80)]
    sys.stdout.write("\n".join(out) + "\n")


def render_error(message: str, hint: str) -> None:
    sys.stderr.write(error_lines(message, hint))


_KIND_STYLE = {"intent": "cyan", "result": "green", "outcome_unknown": "bold yellow", "refused": "bold red",
               "nondeterminism": "magenta", "note": "dim", "claim": "blue"}


def _entry_detail(e: dict[str, Any]) -> str:
    data = e.get("data") or {}
    if e["kind"] == "result" and data.get("settled"):
        evidence = data.get("evidence") or {}
        shown = f"exit {evidence['exit_code']}" if "exit_code" in evidence else str(evidence.get("said", ""))
        return f"settled: {data['settled']} (by {data.get('by')}" + (f"; {shown})" if shown else ")")
    if e["kind"] == "result":
        out = data.get("output")
        if isinstance(out, dict) and "exit_code" in out:
            return f"{e.get('status')} exit {out['exit_code']} in {out.get('duration_ms', 0)}ms"
        return str(e.get("status")) + (f": {data['error']}" if "error" in data else "")
    if e["kind"] == "outcome_unknown":
        return f"Outcome unknown ({data.get('reason', 'interrupted')}); will NOT be replayed automatically"
    if e["kind"] == "refused":
        return "repeat refused: the previous run may or may not have completed"
    if e["kind"] == "nondeterminism":
        return f"{data.get('name')} = {data.get('value')}"
    if e["kind"] == "intent":
        return f"key {e.get('key')}"
    if e["kind"] == "claim" and isinstance(data.get("done_when"), dict):  # settled by its `done_when:` rows
        return f"done: {data.get('reason')}"
    if e["kind"] == "note" and data.get("done_when") in ("row", "checked"):
        at = str(data.get("main", ""))[:10]
        if data["done_when"] == "checked":
            return f"done_when on main at {at}: " + ("passed" if data.get("passed") else str(data.get("summary")))
        return (f"done_when {data.get('row')} on main at {at}: exit {data.get('exit_code')} "
                f"(expects {data.get('expect_exit')}) in {data.get('duration_ms', 0)}ms")
    return ", ".join(f"{k}={v}" for k, v in data.items())


def render_journal(brief: str, entries: Sequence[dict[str, Any]], now: float) -> None:
    """`assay journal`: a row an entry, in 80 columns if need be (the detail wraps; time, kind and policy stay)."""
    if not entries:
        _console().print(f"brief {brief!r} has no journal yet")
        return
    rows = []
    for e in entries:
        step = e.get("step") or ""
        if e.get("ordinal") is not None and step:
            step += f"#{e['ordinal']}"
        rows.append([(str(e["seq"]), ""), (short_time(e["at"], now), ""), (str(e["epoch"]), ""),
                     (_short_run(str(e.get("run", ""))), ""), (e["kind"], _KIND_STYLE.get(e["kind"], "")),
                     (step, ""), (e.get("policy") or "", ""), (_entry_detail(e), "")])
    print_table(("seq", "at", "epoch", "run", "kind", "step", "policy", "detail"), rows,
                right=frozenset({"seq", "epoch"}), title=f"journal of {brief}",
                whole=frozenset({"seq", "at", "epoch", "kind", "policy"}), fold=frozenset({"step", "detail"}))


def _short_run(run: str) -> str:
    """A run's id as a table shows it: a hex id cut to 8 characters, as git shows a short hash (--json: whole)."""
    return run[:8] if len(run) > 8 and all(c in "0123456789abcdef" for c in run) else run


def short_time(at: str, now: float) -> str:
    """A record's time (UTC) as this machine's clock reads it, as short as stays clear: `14:03:07` today,
    `12-04 14:03:07` this year, `2025-12-04 14:03` before."""
    import time

    try:
        when = time.localtime(iso_seconds(at))
    except ValueError:
        return at
    today = time.localtime(now)
    if when.tm_year != today.tm_year:
        return time.strftime("%Y-%m-%d %H:%M", when)
    return time.strftime("%H:%M:%S" if when.tm_yday == today.tm_yday else "%m-%d %H:%M:%S", when)


def brief_rows(board: Any) -> list[dict[str, Any]]:
    """One row per brief on main: its claim state, or ready / waiting on dependencies."""
    rows = []
    for brief in sorted(board.briefs.values(), key=lambda b: (b.priority, b.id)):
        claim = board.claims.get(brief.id)
        state = board.state(brief.id)  # a retired brief has no claim ref: it is done
        junk = board.invalid.get(brief.id)
        if junk is not None:
            state = "invalid"
        elif state in (None, "released", "expired", "abandoned"):
            missing = [d for d in brief.depends_on if board.state(d) != "done"]
            behind = {} if missing else board.behind(brief)
            state = f"needs {', '.join(missing)}" if missing else "queued" if behind else "ready"
        row = {"brief": brief.id, "title": brief.title, "priority": brief.priority, "state": state,
               "desk": claim.record.desk if claim and claim.record.live else (brief.desk or ""),
               "labels": list(brief.labels), "depends_on": list(brief.depends_on),
               "epoch": claim.record.epoch if claim else 0, "verify": [v.id for v in brief.verify],
               "retired": claim is None and brief.id in board.retired, "touches": list(brief.touches)}
        if state == "queued":
            row["behind"] = behind
        if junk is not None:
            row["invalid"] = {"ref": junk.ref, "problem": junk.problem}
        rows.append(row)
    return rows


def brief_view(board: Any, brief_id: str) -> dict[str, Any]:
    """One brief on main in full: its listing row, its rows, the footprint its claim holds, and its claim."""
    row = next(r for r in brief_rows(board) if r["brief"] == brief_id)
    brief = board.briefs[brief_id]
    claim = board.claims.get(brief_id)
    held = board.footprints.get(brief_id)
    return {**row, "body": brief.body,
            "verify": [{"id": v.id, "run": v.run} for v in brief.verify],
            "done_when": [{"id": v.id, "run": v.run} for v in brief.done_when],
            "footprint": ({"touches": list(held.touches), "source": held.source, "epoch": held.epoch}
                          if held else None),
            "claim": ({"state": claim.record.state, "desk": claim.record.desk, "epoch": claim.record.epoch,
                       "reason": claim.record.reason} if claim else None)}


def render_brief(v: dict[str, Any]) -> None:
    console = _console()
    console.print(_bold(f"{v['brief']}: {v['title']}"))
    console.print(f"state: {v['state']}" + (f" (desk {v['desk']}, epoch {v['epoch']})" if v["claim"] else "")
                  + f" · priority {v['priority']}")
    if v.get("behind"):
        said = "; ".join(f"{other} ({globs})" for other, globs in v["behind"].items())
        console.print(_styled(f"queued behind {said}: their footprints overlap", "yellow"))
    if v["claim"] and v["claim"]["reason"]:
        console.print(f"reason: {v['claim']['reason']}")
    touches = ", ".join(v["touches"]) or "not declared"
    console.print(f"touches: {touches}")
    if v["footprint"]:
        f = v["footprint"]
        console.print(f"footprint held: {', '.join(f['touches'])} ({f['source']}, epoch {f['epoch']})")
    for name in ("verify", "done_when"):
        for r in v[name]:
            console.print(f"{name} {r['id']}: {r['run']}")


def filtered(rows: Sequence[dict[str, Any]], states: Sequence[str], desk: str | None) -> list[dict[str, Any]]:
    """The rows in one of `states` (`needs` matches every "needs …"), of `desk`."""
    return [r for r in rows if (not states or r["state"].split()[0] in states) and (desk is None or r["desk"] == desk)]


def render_left_out(left: int, total: int, what: str, which: str = "") -> None:
    """A listing's closing line when its table stopped at `--limit`: how many it left out, and how to see them."""
    if left > 0:
        _console().print(_styled(f"… {left} of {total} {what} not shown{which}: --all or --limit 0 lists them all",
                                 "dim"))


BRIEFS_NONE = "on main yet: `assay brief new ID --title ...`, then commit and push"


def render_briefs(rows: Sequence[dict[str, Any]], empty: str = f"no briefs {BRIEFS_NONE}") -> None:
    if not rows:
        _console().print(_plain(empty))
        return
    print_table(("brief", "p", "state", "desk", "title"),
                [[(r["brief"], ""), (str(r["priority"]), ""),
                  (r["state"], _STATE_STYLE.get(r["state"], "green" if r["state"] == "ready" else "dim")),
                  (r["desk"], ""), (r["title"], "")] for r in rows])
    for r in rows:
        if "invalid" in r:
            _console().print(_styled(f"invalid: {r['invalid']['ref']}: {r['invalid']['problem']}", "bold red"))
        if "behind" in r:
            said = ", ".join(f"{other} ({globs})" for other, globs in r["behind"].items())
            _console().print(_styled(f"{r['brief']} queued behind {said}: their footprints overlap", "yellow"))


def review_view(review: Any) -> dict[str, Any]:
    if not hasattr(review, "record"):
        return {"ref": review.ref, "commit": review.sha, "problem": review.problem}
    r = review.record
    return {"brief": r.brief, "state": r.state, "branch": r.branch, "title": r.title, "head": r.head,
            "base": r.base, "merged_commit": r.merged_commit, "approvals": list(r.approvals),
            "comments": [c.view() for c in r.comments],
            "opened_at": r.opened_at, "at": r.at, "commit": review.sha}


def render_reviews(rows: Sequence[dict[str, Any]]) -> None:
    from rich.table import Table

    console = _console()
    if not rows:
        console.print("no reviews yet")
        return
    table = Table(box=None, header_style="bold")
    for col in ("brief", "state", "branch", "approvals", "title"):
        table.add_column(col)
    for r in rows:
        if "problem" in r:
            table.add_row(r["ref"], "[yellow]invalid[/]", "", "", r["problem"])
            continue
        table.add_row(r["brief"], r["state"], r["branch"], _plain(", ".join(r["approvals"])), _plain(r["title"]))
    console.print(table)


def review_detail_view(detail: Any) -> dict[str, Any]:
    """`assay review show --json`: the review, with `head` (the commit shown: the branch's tip until merged),
    `files` ([{path, added, deleted}], null when the commits cannot be read), `added`/`deleted` totals, `base`,
    `verify` (the rows of the last verify run at the head), `unsaved` ({seq, commit, files}: the newest
    checkpoint's worktree, where its files differ from the head; files null when it cannot be read; else null) and
    `threads` (the review threads waiting on a desk's answer)."""
    view = review_view(detail.review)
    files = None if detail.files is None else [{"path": p, "added": a, "deleted": d} for p, a, d in detail.files]
    view.update({"head": detail.head or view["head"], "base_commit": detail.base, "files": files,
                 "added": sum(f["added"] or 0 for f in files or []),
                 "deleted": sum(f["deleted"] or 0 for f in files or []),
                 "verify": [{"row": str(v.get("row", "")), "command": str(v.get("command", "")),
                             "passed": v.get("passed") is True, "exit_code": v.get("exit_code"),
                             "duration_ms": v.get("duration_ms"), "tail": str(v.get("tail", ""))}
                            for v in detail.verify],
                 "unsaved": detail.unsaved, "superseded": detail.superseded,
                 "threads": [t.view() for t in detail.threads]})
    return view


def render_review(v: dict[str, Any]) -> None:
    """`assay review show`: a heading, the files with a diff stat, the verify rows at the head, the comments."""
    console = _console()
    console.print(f"[bold]{v['brief']}[/]: {_plain(v['title'])}")
    console.print(f"state {v['state']}, {v['branch']} -> {v['base']} (head {v['head'][:10] or '?'})")
    if v["merged_commit"]:
        console.print(f"merged as {v['merged_commit'][:10]}")
    if v.get("superseded"):
        console.print(f"not marked ready: {v['superseded']}")
    if v["approvals"]:
        console.print("approved by " + ", ".join(v["approvals"]))
    if v["files"] is None:
        console.print("[yellow]files changed: the branch's commits cannot be read from the forge[/]")
    elif v["files"]:
        console.print(f"files changed: {len(v['files'])} (+{v['added']} -{v['deleted']}); "
                      f"the diff: assay review diff {v['brief']}")
        print_table(("added", "deleted", "path"),
                    [[("-" if f["added"] is None else f"+{f['added']}", "green"),
                      ("-" if f["deleted"] is None else f"-{f['deleted']}", "red"), (f["path"], "")]
                     for f in v["files"]],
                    right=frozenset({"added", "deleted"}))
    else:
        console.print("files changed: none")
    unsaved = v.get("unsaved")
    if unsaved:
        count = "files that cannot be read" if unsaved["files"] is None else f"{unsaved['files']} files"
        console.print(f"[yellow]unsaved work at journal entry {unsaved['seq']}: {count}[/] differ from the head "
                      f"(worktree snapshot {unsaved['commit'][:10]}, refs/assay/wip/{v['brief']})")
    if v["verify"]:
        passed = sum(1 for r in v["verify"] if r["passed"])
        console.print(f"verify at {v['head'][:10]}: {passed} of {len(v['verify'])} rows passed")
        print_table(("row", "result", "exit", "time", "command"),
                    [[(r["row"], ""), ("passed", "green") if r["passed"] else ("failed", "bold red"),
                      (str(r["exit_code"]), ""), (f"{r['duration_ms']} ms" if r["duration_ms"] is not None else "", ""),
                      (r["command"], "")] for r in v["verify"]], right=frozenset({"exit", "time"}))
        for r in v["verify"]:
            if not r["passed"] and r["tail"]:
                console.print(f"[bold]{_plain(r['row'])}[/] output (last lines):")
                console.print(_plain("\n".join(r["tail"].splitlines()[-10:])))
    elif v["head"]:
        console.print(f"verify at {v['head'][:10]}: no evidence journaled")
    for c in v["comments"]:
        where = f" [thread {c['thread']}{' on ' + c['path'] if c.get('path') else ''}]" if c.get("thread") else ""
        console.print(_plain(f"- {c.get('by')} at {c.get('at')}{where}: {c.get('text')}"))
    for t in v.get("threads") or []:
        last = t["said"][-1]
        console.print(_styled(f"thread {t['id']} on {t['where']} waits on an answer: @{last['by']}: {last['text']}",
                              "yellow"))
    claim = v.get("claim")
    if claim and claim["next"]:  # its desk is dead or overdue: when the sweep ends the claim, or who can now
        console.print(_styled(f"claim {claim['liveness']}: {claim['why']}; {claim['next']}", "yellow"))


def render_retirement(view: dict[str, Any]) -> None:
    console = _console()
    briefs = view["retired"]
    verb = "would retire" if view["dry_run"] else "retired"
    if not briefs:
        console.print("no done briefs to retire" + (f" ({len(view['kept'])} not old enough)" if view["kept"] else ""))
        return
    shown = ", ".join(briefs[:10]) + (f" and {len(briefs) - 10} more" if len(briefs) > 10 else "")
    console.print(_styled(f"{verb} {len(briefs)} done brief{'s' if len(briefs) != 1 else ''}: {shown}", "green"))
    if view["kept"]:
        console.print(_styled(f"left {len(view['kept'])} done briefs that are not old enough", "dim"))
    if view["cleared"]:
        deleted = "would delete" if view["dry_run"] else "deleted"
        console.print(_styled(f"{deleted} {len(view['cleared'])} learned footprints of briefs retired before", "dim"))
    if view["packed_refs"]:
        console.print(_styled("packed the forge's refs", "dim"))


def render_verify(view: dict[str, Any]) -> None:
    rows = view["rows"]
    if not rows:
        _console().print(f"brief {view['brief']!r} has no verify rows")
        return
    print_table(("row", "result", "exit", "ms", "command"),
                [[(r["row"], ""), ("passed" if r["passed"] else "FAILED", "green" if r["passed"] else "bold red"),
                  (f"{r['exit_code']} (expects {r['expect_exit']})", ""), (str(r["duration_ms"]), ""),
                  (r["command"], "")] for r in rows], title=f"verify rows of {view['brief']}")
    for r in rows:
        if not r["passed"] and r["tail"].strip():
            _console().print(_styled(f"{r['row']}: {r['tail'].strip()[-400:]}", "dim"))


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell: no HTML, no cell breaks, no line breaks."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("`", "'").replace("\n", " "))


def verify_markdown(view: dict[str, Any]) -> str:
    verdict = "passed" if view["passed"] else "failed"
    lines = [f"### Assay verify: {_md(view['brief'])} {verdict}", "", "| row | result | exit | command |",
             "|---|---|---|---|"]
    lines += [f"| {_md(r['row'])} | {'passed' if r['passed'] else '**failed**'} | {r['exit_code']} "
              f"(expects {r['expect_exit']}) | `{_md(r['command'])}` |" for r in view["rows"]]
    return "\n".join(lines) + "\n\n"


def render_warnings(lines: Sequence[str]) -> None:
    if not lines:
        return  # not even rich's import
    console = _console(stderr=True)
    for line in lines:
        console.print(f"[yellow]warning:[/] {_plain(line)}")


def desk_view(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "labels": list(spec.labels), "command": list(spec.command), "lease_s": spec.lease_s,
            "heartbeat_s": spec.heartbeat_s, "singleton": spec.singleton, "attempts": spec.attempts,
            "env_allow": list(spec.env_allow), "verify_timeout_s": spec.verify_timeout_s}


AGENT_SHOWN = 60  # columns of an agent's command a desk listing shows at most: its start says which agent it is


def render_desks(rows: Sequence[dict[str, Any]]) -> None:
    """`assay desk list`: a desk a line, its agent command cut to the width left (--json has it whole)."""
    from rich.table import Table

    console = _console()
    if not rows:
        console.print("no desks on main: add desks/<name>.yaml (`assay init` writes presets)")
        return
    cells = [[r["name"], ", ".join(r["labels"]) or "any", f"{r['lease_s']}s", str(r["attempts"]),
              "yes" if r["singleton"] else "no", " ".join(r["command"])] for r in rows]
    columns = ("desk", "labels", "lease", "attempts", "singleton", "agent")
    widths = [max(len(col), *(len(row[i]) for row in cells)) for i, col in enumerate(columns)]
    room = console.width - sum(widths[:-1]) - 2 * len(columns)  # each column is padded by a space either side
    table = Table(box=None, header_style="bold")
    for col in columns:
        table.add_column(col, no_wrap=True, overflow="ellipsis", justify="right" if col in ("lease", "attempts")
                         else "left", max_width=max(12, min(room, AGENT_SHOWN)) if col == "agent" else None)
    for row in cells:
        table.add_row(*map(_plain, row))
    console.print(table)


# -- sweeps ---------------------------------------------------------------------------------------

_FINDING_STYLE = {"lease": "magenta", "stuck": "yellow", "orphan": "cyan", "unknown": "bold yellow",
                  "wait": "green", "blocked": "bold red", "merged-held": "yellow", "junk": "red"}


@contextlib.contextmanager
def progress(enabled: bool = True, what: str = "sweeping") -> Iterator[Callable[[str], None]]:
    """A status line on a terminal (stderr), updated by the callable yielded; silent elsewhere."""
    if not enabled or not sys.stderr.isatty():
        yield lambda _: None
        return
    with _console(stderr=True).status(what) as status:
        yield lambda text: status.update(_plain(text))


def sweep_view(report: Any) -> dict[str, Any]:
    return {"policy": report.policy, "dry_run": report.dry_run, "at": report.at, "briefs": report.briefs,
            "round_trips": dict(report.round_trips), "packed_refs": report.packed_refs,
            "findings": [{"kind": f.kind, "brief": f.brief, "detail": f.detail, "action": f.action, "new": f.new,
                          "key": f.key} for f in report.findings]}


def render_sweep(view: dict[str, Any]) -> None:
    rows = [[(f["kind"], _FINDING_STYLE.get(f["kind"], "")), (f["brief"], "bold"), (f["action"] or "reported", ""),
             ("new" if f["new"] else "", "bold"), (f["detail"], "")] for f in view["findings"]]
    mode = " (dry run: nothing written)" if view["dry_run"] else ""
    if rows:
        print_table(["finding", "brief", "action", "", "detail"], rows)
    new = sum(1 for f in view["findings"] if f["new"])
    packed = f"; packed the forge's {view['packed_refs']} loose refs" if view.get("packed_refs") else ""
    _console().print(f"swept {view['briefs']} briefs with policy {view['policy']}{mode}: "
                     f"{len(rows)} findings, {new} new{packed}")


def sweep_markdown(view: dict[str, Any]) -> str:
    def cell(text: str) -> str:
        return _md(_CONTROL.sub(" ", text))

    lines = [f"## Assay sweep ({view['at']}, policy `{view['policy']}`"
             f"{', dry run' if view['dry_run'] else ''})", "",
             f"{view['briefs']} briefs, {len(view['findings'])} findings.", ""]
    if view["findings"]:
        lines += ["| finding | brief | action | new | detail |", "|---|---|---|---|---|"]
        lines += [f"| {f['kind']} | `{cell(f['brief'])}` | {cell(f['action'] or 'reported')} | "
                  f"{'yes' if f['new'] else ''} | {cell(f['detail'])} |" for f in view["findings"]]
    return "\n".join(lines) + "\n"


def board_view(built: Any) -> dict[str, Any]:
    return {"out": str(built.out), "briefs": built.briefs, "files": built.files, "bytes": built.bytes,
            "columns": built.counts, "round_trips": built.round_trips, "seconds": round(built.seconds, 3),
            "problems": built.problems}


def render_board(view: dict[str, Any]) -> None:
    counts = ", ".join(f"{name} {n}" for name, n in view["columns"].items())
    trips = ", ".join(f"{k} {n}" for k, n in sorted(view["round_trips"].items())) or "none"
    _console().print(f"board of {view['briefs']} briefs written to {_plain(view['out'])}/index.html "
                     f"({view['files']} files, {view['bytes']} bytes): {counts}; git round trips: {trips}")
    if view["problems"]:
        render_warnings([f"{view['problems']} problem(s) on the forge (a record or file that does not read): "
                         "each is listed under needs you"])


def append_step_summary(path: str | None, markdown: str) -> None:
    """Append to `$GITHUB_STEP_SUMMARY` when it is set (a GitHub Actions job summary)."""
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(markdown + "\n")


def report_view(ledgers: Any, desk: str | None, limit: int | None) -> dict[str, Any]:
    """`assay report --json`: the total, each desk's ledger, every brief's, the `limit` that wasted most (`worst`;
    None: all) of the `wasting` briefs that wasted any, and each record that could not be read, with what the sums
    leave out (`unread`, whatever the desk). With `desk`: that desk's share, and the briefs it held."""
    briefs, desks, total = ledgers.briefs, ledgers.desks, ledgers.total
    if desk is not None:
        desks = {desk: desks[desk]} if desk in desks else {}
        total = desks.get(desk) or {k: 0 for k in total}
        briefs = {b: briefs[b] for b in ledgers.held.get(desk, []) if b in briefs}
    worst = sorted((b for b in briefs if briefs[b]["wasted_s"] or briefs[b]["refused"] or briefs[b]["unknown"]),
                   key=lambda b: (-briefs[b]["wasted_s"], -briefs[b]["refused"] - briefs[b]["unknown"], b))
    unread = [{"brief": u.brief, "ref": u.ref, "problem": u.problem, "left_out": u.left_out} for u in ledgers.unread]
    return {"total": total, "desks": desks, "briefs": briefs, "worst": worst[:limit], "wasting": len(worst),
            "desk": desk, "unread": unread}


def _ledger_cells(ledger: dict[str, Any]) -> list[Cell]:
    from assay.observe.waste import duration

    cells: list[Cell] = [(duration(ledger[k]), "yellow" if k == "wasted_s" and ledger[k] else "")
                         for k in ("agent_s", "kept_s", "wasted_s", "died_s", "failed_verify_s", "redone_s")]
    return [*cells, (f"{ledger['refused']}/{ledger['unknown']}", "")]


def render_report(view: dict[str, Any]) -> None:
    """`assay report`: a line of totals, a table per desk, the briefs that wasted most."""
    from assay.observe.waste import text

    columns = ("agent", "kept", "wasted", "died", "failed", "redone", "ref/unk")
    right = frozenset(columns)
    console = _console()
    scope = f"desk {view['desk']}" if view["desk"] else "the fleet"
    unread = view["unread"]
    render_warnings([f"could not read {u['ref']} (brief {u['brief']}): {u['problem']}; left out of {u['left_out']}"
                     for u in unread])
    lacking = sorted({u["brief"] for u in unread if u["left_out"] == "every total"})
    names = ", ".join(lacking[:10]) + (f", and {len(lacking) - 10} more" if len(lacking) > 10 else "")
    short = f" (without {len(lacking)} unread: {names})" if lacking else ""
    if not view["total"]["agent_s"] and not any(view["total"][k] for k in ("refused", "unknown")):
        console.print(f"no agent time journaled for {_plain(scope)} yet{_plain(short)}")
        return
    console.print(f"{_plain(scope)}{_plain(short)}: {text(view['total'])}")
    if view["desks"]:
        print_table(("desk", *columns), [[(d, ""), *_ledger_cells(ledger)] for d, ledger in view["desks"].items()],
                    right, title="by desk")
    if view["worst"]:
        print_table(("brief", *columns), [[(b, ""), *_ledger_cells(view["briefs"][b])] for b in view["worst"]],
                    right, title="the briefs that wasted most")


def render_audit_summary(views: Sequence[dict[str, Any]]) -> None:
    """`assay audit --all`: the failed briefs' checks, then one line of totals (a fleet's passes are not listed)."""
    failed = [v for v in views if not all(c["passed"] for c in v["checks"])]
    render_audits(failed, timeline=False)
    names = ", ".join(v["brief"] for v in failed[:10]) + (f", and {len(failed) - 10} more" if len(failed) > 10 else "")
    _console().print(f"{len(views)} briefs audited: {len(views) - len(failed)} passed, "
                     + (_styled(f"{len(failed)} failed", "bold red") + f" ({_plain(names)})" if failed else "0 failed"))


def render_audits(views: Sequence[dict[str, Any]], timeline: bool) -> None:
    """`assay audit`: each brief's timeline (for one brief) and its checks, passed or failed with the reason."""
    from rich.table import Table

    console = _console()
    for view in views:
        if timeline:
            table = Table(box=None, header_style="bold", title=f"timeline of {view['brief']}", title_justify="left")
            for col in ("at", "source", "epoch", "what"):
                table.add_column(col)
            for e in view["timeline"]:
                table.add_row(e["at"], e["source"], "" if e["epoch"] is None else str(e["epoch"]), _plain(e["what"]))
            console.print(table)
        table = Table(box=None, header_style="bold", title=f"audit of {view['brief']}", title_justify="left")
        for col in ("check", "result", "reason"):
            table.add_column(col)
        for c in view["checks"]:
            table.add_row(c["name"], _styled("pass", "green") if c["passed"] else _styled("FAIL", "bold red"),
                          _plain(c["reason"]))
        console.print(table)
