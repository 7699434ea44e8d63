"""The board's pages, drawn from the structure `board.assemble` makes: HTML, an SVG timeline, Markdown.

Templates are `string.Template` files in `board/` (shipped as `assay/_defaults/board/`). Every
value that came from a brief, an agent or a record passes through `esc` before it reaches a
page (`md` for board.md), and the pages forbid every script (a Content-Security-Policy of
`default-src 'none'`), so a title like `<script>…` is text and nothing else. The index's filter
by desk and state is radio buttons and CSS (`:has(:checked)`), so it needs no script at all.
"""

from __future__ import annotations

import re
from html import escape
from string import Template
from typing import Any

from assay.config import defaults_dir
from assay.core.claims import Liveness
from assay.core.records import human_age, parse_iso

KIND_CLASS = {"intent": "k-intent", "result": "k-result", "outcome_unknown": "k-outcome_unknown",
              "refused": "k-refused", "verify": "k-verify"}
NONE = '<p class="muted">none</p>'


def esc(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def template(name: str) -> Template:
    return Template((defaults_dir("board") / name).read_text(encoding="utf-8"))


def site(data: dict[str, Any]) -> dict[str, str]:
    """Every file of the site but board.json: relative path -> text."""
    files = {"index.html": index_page(data), "board.md": markdown(data),
             "board.css": (defaults_dir("board") / "board.css").read_text(encoding="utf-8")
             + filter_css([c["id"] for c in data["columns"]], desk_names(data))}
    files["needs.html"] = needs_page(data)
    titles = {c["id"]: str(c["title"]) for c in data["columns"]}
    for card in data["briefs"]:
        files[f"briefs/{card['id']}.html"] = brief_page(card, titles[card["column"]])
    return files


# -- the index ----------------------------------------------------------------------------------


DONE_SHOWN = 12  # done cards on the index (the latest); the rest are counted, and keep their own pages
NEEDS_SHOWN = 2  # items of each kind "needs you" lists on the index; needs.html lists them all
NEEDS_TITLES = {"unknown": "Outcome unknown", "blocked": "Blocked", "locked": "Locked ref", "review": "Ready to merge",
                "stuck": "Stuck", "dead": "Dead desk", "overdue": "Overdue", "problem": "Problems on the forge"}


def needs_html(data: dict[str, Any], shown: int | None = NEEDS_SHOWN, prefix: str = "") -> str:
    """What needs a person: a state bar of counts, then each kind's items with why and the command to type next
    (`shown` of each on the index, every one on needs.html)."""
    counts = data["needs_you_counts"]
    total = sum(counts.values())
    if not total:
        return '<section id="needs-you"><h2>Needs you</h2><p class="pass">nothing needs a person now</p></section>'
    bar = "".join(f'<a class="need need-{esc(k)}" href="{prefix}needs.html#{esc(k)}">{esc(NEEDS_TITLES[k])} '
                  f'<b>{n}</b></a>' for k, n in counts.items() if n)
    groups = []
    for kind, n in counts.items():
        if not n:
            continue
        items = [i for i in data["needs_you"] if i["kind"] == kind]
        rows = "".join(_need_item(i, prefix) for i in (items if shown is None else items[:shown]))
        more = (f'<li class="more muted"><a href="{prefix}needs.html#{esc(kind)}">all {n}</a></li>'
                if shown is not None else "")
        groups.append(f'<section class="needs" id="{esc(kind) if shown is None else "n-" + esc(kind)}">'
                      f'<h3>{esc(NEEDS_TITLES[kind])} <span class="count">({n})</span></h3><ul>{rows}{more}</ul>'
                      "</section>")
    return (f'<section id="needs-you"><h2>Needs you <span class="count">({total})</span></h2>'
            f'<nav class="needbar" aria-label="what needs you">{bar}</nav>'
            f'<div class="needgroups{" summary" if shown is not None else ""}">{"".join(groups)}</div></section>')


def _need_item(i: dict[str, Any], prefix: str) -> str:
    where = (f'<a href="{prefix}briefs/{esc(i["brief"])}.html"><code>{esc(i["brief"])}</code></a> '
             if i["brief"] else "")
    nxt = i["next"]
    nxt_html = (f'<a href="{esc(nxt)}">{esc(nxt)}</a>' if nxt.startswith(("http://", "https://"))
                else f"<code>{esc(nxt)}</code>")
    until = f'<span class="until">; {esc(i["until"])}, or now:</span>' if i.get("until") else ""
    return (f'<li class="item">{where}<span class="why">{esc(i["why"])}</span>{until}<br>'
            f'<span class="next">next: {nxt_html}</span></li>')


def needs_page(data: dict[str, Any]) -> str:
    return template("needs.html").substitute(generated_at=esc(data["generated_at"]),
                                             needs=needs_html(data, shown=None))


def desk_names(data: dict[str, Any]) -> list[str]:
    """The desks the filter offers, in the order of their radio buttons (`f-desk-N`, cards of class `desk-N`)."""
    return sorted({c["desk"] for c in data["briefs"] if c["desk"]})


def filter_css(columns: list[str], desks: list[str]) -> str:
    """The filter's rules, appended to board.css: a checked state hides the other columns, a checked desk the
    other desks' cards. Desks are named by number, so no desk name reaches a style sheet."""
    rules = [f'body:has(#f-col-{c}:checked) .column:not([data-column="{c}"]) {{ display: none; }}' for c in columns]
    rules += [f"body:has(#f-desk-{n}:checked) .card:not(.desk-{n}) {{ display: none; }}" for n in range(len(desks))]
    return "".join(rule + "\n" for rule in rules)


def _radios(group: str, options: list[tuple[str, str]], every: str) -> str:
    """A filter group: "every" first and checked, then one radio per option (`f-<group>-<key>`)."""
    items = [(f"f-{group}-all", every, " checked"), *((f"f-{group}-{key}", label, "") for key, label in options)]
    return "".join(f'<input type="radio" name="{group}" id="{ident}"{checked}><label for="{ident}">{esc(label)}</label>'
                   for ident, label, checked in items)


def index_page(data: dict[str, Any]) -> str:
    desks = desk_names(data)
    number = {d: n for n, d in enumerate(desks)}
    columns = []
    for col in data["columns"]:
        members = [c for c in data["briefs"] if c["column"] == col["id"]]
        shown = members[:DONE_SHOWN] if col["id"] == "done" else members
        cards = "\n".join(card_html(c, number.get(c["desk"])) for c in shown) or NONE
        if len(shown) < len(members):  # done work is folded: a fleet's would make the page grow without end
            cards += (f'\n<p class="muted">and {len(members) - len(shown)} more done: each has its page under '
                      '<code>briefs/</code>, and all are in <a href="board.json">board.json</a></p>')
        columns.append(f'<section class="column" data-column="{esc(col["id"])}" id="col-{esc(col["id"])}" '
                       f'aria-label="{esc(col["title"])}">'
                       f'<h2>{esc(col["title"])} <span class="count">{col["count"]}</span></h2>\n'
                       f"{cards}</section>")
    sweeper = data["sweeper"]
    return template("index.html").substitute(
        forge=esc(data["forge"]), main=esc(data["main"][:10]), generated_at=esc(data["generated_at"]),
        total=len(data["briefs"]), needs_you=needs_html(data),
        desk_filter=_radios("desk", [(str(n), d) for n, d in enumerate(desks)], "all desks"),
        column_filter=_radios("col", [(c["id"], c["title"]) for c in data["columns"]], "all states"),
        columns="\n".join(columns), desks=desks_html(data["desks"], data["waste"]),
        sweeper=(f'<p class="meta">last sweep {esc(sweeper["at"])} (commit <code>{esc(sweeper["commit"][:10])}'
                 "</code>)</p>" if sweeper else '<p class="muted">no sweeper has run on this forge</p>'),
        findings=findings_html(data["findings"]), problems=problems_html(data["problems"]))


def lease_age_text(c: dict[str, Any]) -> str:
    """What `lease_age_s` measures, said with it: since a sweeper first saw the tip, or since the desk wrote it."""
    if c["lease_age_s"] is None:
        return ""
    age = human_age(c["lease_age_s"])
    if c["lease_age_by"] == "sweeper":
        return f"claim unchanged for ≥ {age} (sweeper's clock)"
    return f"claim last written {age} ago (desk's clock)"


LIVENESS_BADGES = {"dead": "desk dead", "overdue": "overdue"}  # a held claim's `claims.liveness`, on its card


def liveness_badge(c: dict[str, Any]) -> str:
    """A badge for a held claim whose desk is dead or overdue (nothing for a live one)."""
    word = c["liveness"]["word"]
    if word not in LIVENESS_BADGES:
        return ""
    return (f'<span class="badge live-{esc(word)}" title="{esc(c["liveness"]["why"])}">{esc(LIVENESS_BADGES[word])}'
            "</span>")


def advice_html(c: dict[str, Any]) -> str:
    """`Liveness.advice` (when the sweep expires the claim, or the command that ends it now), its command as code."""
    advice = Liveness(**c["liveness"]).advice(c["id"], c["desk"])
    return "".join(f"<code>{esc(part)}</code>" if n % 2 else esc(part) for n, part in enumerate(advice.split("`")))


def card_html(c: dict[str, Any], desk_number: int | None = None) -> str:
    badge = liveness_badge(c)
    lines = [f'<h3><a href="briefs/{esc(c["id"])}.html">{esc(c["title"])}</a></h3>',
             f'<p class="meta"><code>{esc(c["id"])}</code> · {esc(_state_text(c))}{" " + badge if badge else ""}</p>']
    if c["desk"]:
        age = lease_age_text(c)
        lines.append(f"<p>desk {esc(c['desk'])} · epoch {c['epoch']}{esc(' · ' + age if age else '')}</p>")
    if badge:  # when the sweep ends it; the command that ends it now is under "needs you" and on its page
        lines.append(f'<p class="advice">{esc(c["liveness"]["until"])}</p>')
    if c["last_step"]:
        s = c["last_step"]
        status = "interrupted" if s["seq"] in c["interrupted"] else s["status"] or s["kind"]
        lines.append(f"<p>last step {esc(s['step'])} ({esc(status)})</p>")
    v = c["verify"]
    if v["rows"]:
        lines.append(f'<p>verify <span class="pass">{v["passed"]} passed</span> · '
                     f'<span class="{"fail" if v["failed"] else "muted"}">{v["failed"]} failed</span></p>')
    if c["review"]:
        lines.append(f'<p>review <a href="{esc(c["review"]["link"])}">{esc(c["review"]["state"])}</a></p>')
    superseded = superseded_words(c)
    if superseded:
        lines.append(f'<p>not marked ready: {esc(superseded)}</p>')
    if c["state"] == "done" and str(c["reason"]).endswith("(done_when passed)"):  # settled with no agent run
        lines.append(f"<p>done: {esc(c['reason'])}</p>")
    if c["queued_behind"]:
        lines.append(f'<p>queued behind {esc(", ".join(c["queued_behind"]))} (their files overlap)</p>')
    if c["unknown"]:
        lines.append(f'<p class="fail">outcome unknown at seq {esc(", ".join(map(str, c["unknown"])))}</p>')
    if c["interrupted"]:
        lines.append(f'<p class="fail">unsafe step interrupted at seq {esc(", ".join(map(str, c["interrupted"])))}'
                     "; no desk holds it to recover: it may or may not have run</p>")
    desk_class = f" desk-{desk_number}" if desk_number is not None else ""
    live = f' data-liveness="{esc(c["liveness"]["word"])}"' if badge else ""
    return (f'<article class="card{desk_class}" data-desk="{esc(c["desk"])}" data-column="{esc(c["column"])}"{live}>'
            + "".join(lines) + "</article>")


def superseded_words(c: dict[str, Any]) -> str:
    """"superseded by <brief>" or "already on main at <sha>": a brief whose review was not marked ready, as its
    claim's reason says (the words `desk/work.py` writes it with)."""
    reason = str(c.get("reason") or "")
    if c.get("state") not in ("released", "done") or not reason.startswith(("superseded by ", "already on main at ")):
        return ""
    return reason.split(" (", 1)[0].split(":", 1)[0]


def _state_text(c: dict[str, Any]) -> str:
    if c["retired"]:
        return "done (retired)"
    if c["needs"] and c["column"] == "waiting" and c["state"] not in ("waiting",):
        return "needs " + ", ".join(c["needs"])
    return str(c["state"]) + (" · stuck" if c["stuck"] else "")


LIVENESS_CLASS = {"working": "pass", "stale": "fail", "dead": "fail", "no-evidence": "warn"}


def desks_html(desks: list[dict[str, Any]], total: dict[str, Any] | None = None) -> str:
    if not desks:
        return '<p class="muted">no desk is defined on main or holds a claim</p>'
    rows = "".join(f'<tr><td>{esc(d["desk"])}{"" if d["defined"] else " (not on main)"}</td>'
                   f'<td class="{LIVENESS_CLASS.get(d["liveness"], "")}">{esc(d["liveness"])}</td>'
                   + "".join(f'<td class="wrap">{esc(", ".join(d[k]))}</td>' for k in ("briefs", "expired", "holders"))
                   + f'<td class="wrap">{esc(waste_text(d.get("waste")))}</td></tr>' for d in desks)
    fleet = f'<p class="meta" id="waste">the fleet: {esc(waste_text(total))}</p>' if total else ""
    return (f'{fleet}<div class="scroll"><table><thead><tr><th>desk</th><th>liveness</th><th>claims</th>'
            f"<th>expired</th><th>holders</th><th>agent time</th></tr></thead><tbody>{rows}</tbody></table></div>")


def waste_text(ledger: dict[str, Any] | None) -> str:
    """The waste ledger in one line (`waste.text`), or nothing when no agent ran."""
    from assay.observe.waste import text, wasted

    return text(ledger) if ledger and (ledger["agent_s"] or wasted(ledger)) else ""


def findings_html(findings: list[dict[str, Any]]) -> str:
    if not findings:
        return '<p class="muted">no findings recorded</p>'
    rows = "".join(f"<tr><td>{esc(f['at'])}</td><td>{esc(f['kind'])}</td>"
                   f'<td><a href="briefs/{esc(f["brief"])}.html">{esc(f["brief"])}</a></td></tr>' for f in findings)
    return (f'<div class="scroll"><table><thead><tr><th>first seen</th><th>kind</th><th>brief</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></div>")


def problems_html(problems: list[str]) -> str:
    if not problems:
        return ""
    items = "".join(f"<li>{esc(p)}</li>" for p in problems)
    return f'<section id="problems"><h2>Problems on the forge</h2><ul>{items}</ul></section>'


# -- a brief ------------------------------------------------------------------------------------


def status_pill(c: dict[str, Any], column_title: str) -> str:
    """The brief page's status: its column, and, for a held claim whose desk is dead or overdue, that (as its card's
    badge and its "needs you" note say)."""
    word = c["liveness"]["word"]
    pill = f'<span class="badge col-{esc(c["column"])}">{esc(column_title)}</span>'
    if word not in LIVENESS_BADGES:
        return pill
    return (f'<span class="badge col-{esc(c["column"])} live-{esc(word)}">{esc(column_title.split(" /")[0])}, '
            f"{esc(LIVENESS_BADGES[word])}</span>")


def brief_page(c: dict[str, Any], column_title: str) -> str:
    facts = [f"desk {c['desk']}" if c["desk"] else "no desk", f"epoch {c['epoch']}", str(c["state"])]
    return template("brief.html").substitute(
        id=esc(c["id"]), title=esc(c["title"]), status=status_pill(c, column_title),
        facts=esc(" · ".join(facts)), summary=summary_html(c), review=review_html(c["review"]),
        custody=custody_html(c["custody"]), timeline=timeline_svg(c["journal"]), journal=journal_html(c))


def next_html(c: dict[str, Any]) -> str:
    """What this brief needs from a person, and the command to type (nothing when it needs nobody)."""
    if not c["next"]:
        return ""
    items = "".join(f'<li><b>{esc(NEEDS_TITLES[n["kind"]])}</b>: {esc(n["why"])}'
                    + (f'; <span class="until">{esc(n["until"])}, or now:</span>' if n.get("until") else "")
                    + f'<br><span class="next">next: <code>{esc(n["next"])}</code></span></li>' for n in c["next"])
    return f'<section class="needs" id="next"><h2>Needs you</h2><ul>{items}</ul></section>'


def summary_html(c: dict[str, Any]) -> str:
    live = liveness_badge(c) and f"{c['liveness']['word']}: {c['liveness']['why']}"
    pairs = [("holder", c["holder"]), ("lease", f"{c['lease_s']}s" if c["lease_s"] else ""),
             ("claim age", lease_age_text(c)), ("liveness", live), ("progress", c["progress"]),
             ("labels", ", ".join(c["labels"])), ("depends on", ", ".join(c["depends_on"])),
             ("needs", ", ".join(c["needs"])), ("touches", ", ".join(c["touches"])),
             ("queued behind", "; ".join(f"{b} ({g})" for b, g in c["queued_behind"].items())),
             ("reason", c["reason"]), ("not marked ready", superseded_words(c)),
             ("last step", f"{c['last_step']['step']} (seq {c['last_step']['seq']})" if c["last_step"] else ""),
             ("outcome unknown", ", ".join(f"seq {s}" for s in c["unknown"])),
             ("interrupted", ", ".join(f"unsafe intent seq {s}" for s in c["interrupted"])),
             ("agent time", waste_text(c["waste"])),
             ("journal", c["journal_invalid"] or f"{c['journal_entries']} entries")]
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>"  # a dead or overdue claim: when the sweep ends it
                    + (f"<dt>ends</dt><dd>{advice_html(c)}</dd>" if k == "liveness" else "") for k, v in pairs if v)
    return f'{next_html(c)}<dl class="facts">{items}</dl>{verify_html(c["verify_attempts"])}'


def verify_html(attempts: list[dict[str, Any]]) -> str:
    """The evidence of every verify run, latest first: each row's result, exit code, time and failed output."""
    out = []
    for n, a in reversed(list(enumerate(attempts, 1))):
        rows = "".join(
            f"<tr><td>{esc(r['row'])}</td><td class=\"{'pass' if r['passed'] else 'fail'}\">"
            f"{'passed' if r['passed'] else 'failed'}</td><td>{esc(r['exit_code'])}</td>"
            f"<td>{esc(r['duration_ms'])}{' ms' if r['duration_ms'] is not None else ''}</td>"
            f'<td class="wrap"><code>{esc(r["command"])}</code>'
            + (f"<pre>{esc(r['tail'])}</pre>" if r["tail"] else "") + "</td></tr>" for r in a["rows"])
        out.append(f"<h3>Verify {n} at <code>{esc(a['head'][:10])}</code>: "
                   f"<span class=\"{'pass' if a['passed'] else 'fail'}\">{'passed' if a['passed'] else 'failed'}"
                   "</span></h3><div class=\"scroll\"><table><thead><tr><th>row</th><th>result</th><th>exit</th>"
                   f"<th>time</th><th>command and output</th></tr></thead><tbody>{rows}</tbody></table></div>")
    return f'<section id="verify"><h2>Verify</h2>{"".join(out)}</section>' if out else ""


def review_html(review: dict[str, Any] | None) -> str:
    if review is None:
        return '<p class="muted">no review</p>'
    link = review["link"]
    title = (f'<a href="{esc(link)}">{esc(review["title"])}</a>' if link.startswith(("https://", "http://"))
             else esc(review["title"]))
    return (f"<p>{title}: <strong>{esc(review['state'])}</strong> · branch <code>{esc(review['branch'])}</code>"
            f" · head <code>{esc(review['head'][:10])}</code> · {len(review['approvals'])} approvals"
            f" · {review['comments']} comments</p>")


def custody_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<p class="muted">never claimed</p>'
    out = []
    for r in rows:
        if "invalid" in r:
            out.append('<tr><td>?</td><td class="fail">invalid</td>'
                       f'<td colspan="4" class="wrap">{esc(r["invalid"])}</td>'
                       f"<td><code>{esc(r['commit'][:10])}</code></td></tr>")
            continue
        renewed = f"renewed {r['renewals']}×, last at {r['last_at']}" if r["renewals"] else ""
        out.append(f"<tr><td>{esc(r['at'])}</td><td class=\"state-{esc(r['state'])}\">{esc(r['state'])}</td>"
                   f"<td>{r['epoch']}</td><td>{esc(r['desk'])}</td><td class=\"wrap\">{esc(r['why'])}</td>"
                   f"<td>{esc(renewed)}</td><td><code>{esc(r['commit'][:10])}</code></td></tr>")
    return ('<div class="scroll"><table><thead><tr><th>at</th><th>state</th><th>epoch</th><th>desk</th>'
            f"<th>reason</th><th>renewals</th><th>commit</th></tr></thead><tbody>{''.join(out)}</tbody></table></div>")


STEP_ROWS = 200  # steps a timeline draws; older ones are counted
SPAN_CLASS = {"completed": "k-result", "failed": "k-failed", "cancelled": "k-failed", "unknown": "k-outcome_unknown",
              "refused": "k-refused", "open": "k-intent"}


def step_spans(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One span per step call: from its intent to the entry that ends it (a result, or `outcome_unknown`), with
    how it ended (`open` while nothing has)."""
    ends = {e["intent"]: e for e in entries if e.get("intent") and e["kind"] in ("result", "outcome_unknown")}
    spans = []
    for e in entries:
        if e["kind"] != "intent":
            continue
        end = ends.get(e["seq"])
        status = "open" if end is None else "unknown" if end["kind"] == "outcome_unknown" else end["status"] or "?"
        spans.append({"seq": e["seq"], "step": e["step"] or "", "epoch": e["epoch"], "policy": e["policy"] or "",
                      "start": parse_iso(e["at"]).timestamp(), "end": parse_iso(end["at"]).timestamp() if end else None,
                      "status": status})
    return spans


def timeline_svg(entries: list[dict[str, Any]]) -> str:
    """The brief's steps as Temporal draws a workflow: one row per step call, a bar from intent to end coloured by
    how it ended, its duration written beside it, the epochs as bands behind."""
    spans = step_spans(entries)
    if not spans:
        return '<p class="muted">no steps yet</p>'
    shown = spans[-STEP_ROWS:]
    t0 = min(s["start"] for s in shown)
    t1 = max(max(s["end"] or s["start"] for s in shown), max(parse_iso(e["at"]).timestamp() for e in entries))
    left, plot, row, top = 190, 520, 20, 22
    scale = plot / max(1.0, t1 - t0)
    width, height = left + plot + 110, top + row * len(shown) + 6
    parts = [f'<svg class="timeline" role="img" aria-label="steps of this brief, one row each" viewBox="0 0 {width} '
             f'{height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for n, epoch in enumerate(sorted({s["epoch"] for s in shown})):
        mine = [s for s in shown if s["epoch"] == epoch]
        x0 = left + (min(s["start"] for s in mine) - t0) * scale
        x1 = left + (max(s["end"] or t1 for s in mine) - t0) * scale
        parts.append(f'<rect class="band" x="{x0:.1f}" y="0" width="{max(2.0, x1 - x0):.1f}" height="{height}" '
                     f'opacity="{0.9 if n % 2 else 0.45}"/><text x="{x0 + 2:.1f}" y="12">epoch {epoch}</text>')
    for i, s in enumerate(shown):
        y = top + row * i
        x = left + (s["start"] - t0) * scale
        end = s["end"] if s["end"] is not None else t1
        w = max(3.0, (end - s["start"]) * scale)
        took = human_age(int(end - s["start"]))
        said = took if s["status"] == "completed" else f"{took} {s['status']}"
        name = s["step"] if len(s["step"]) <= 26 else s["step"][:25] + "…"
        parts.append(f'<g class="step"><text x="4" y="{y + 12}">{esc(name)} <tspan class="seq">#{s["seq"]}</tspan>'
                     f'</text><rect class="{SPAN_CLASS.get(s["status"], "k-other")}" x="{x:.1f}" y="{y + 3}" '
                     f'width="{w:.1f}" height="12" rx="2"><title>{esc(s["step"])} (seq {s["seq"]}, {esc(s["policy"])}'
                     f', epoch {s["epoch"]}): {esc(said)}</title></rect><text x="{x + w + 4:.1f}" y="{y + 12}">'
                     f"{esc(said)}</text></g>")
    parts.append("</svg>")
    note = (f'<p class="muted">the last {len(shown)} of {len(spans)} steps are drawn</p>'
            if len(shown) < len(spans) else "")
    return f'<div class="scroll">{"".join(parts)}</div>{note}'


def journal_html(c: dict[str, Any]) -> str:
    entries = c["journal"]
    if not entries:
        return ""
    rows = "".join(f"<tr><td>{e['seq']}</td><td>{e['epoch']}</td><td>{esc(e['kind'])}</td><td>{esc(e['step'] or '')}"
                   f"</td><td>{esc(e['status'] or '')}</td><td>{esc(e['at'])}</td></tr>" for e in entries)
    more = (f'<p class="muted">{c["journal_entries"] - len(entries)} earlier entries are in '
            f"<code>assay journal {esc(c['id'])}</code></p>" if c["journal_entries"] > len(entries) else "")
    return (f'{more}<div class="scroll"><table><thead><tr><th>seq</th><th>epoch</th><th>kind</th><th>step</th>'
            f"<th>status</th><th>at</th></tr></thead><tbody>{rows}</tbody></table></div>")


# -- Markdown -----------------------------------------------------------------------------------


MD_SPECIAL = frozenset("\\`*_{}[]()#+!|<>~&")
ZWJ = "\u200d"  # after `@` and `#`: no mention, no issue reference, whatever renders the Markdown
AUTOLINK = re.compile(r"(?i)\b(?:[a-z][a-z0-9+.-]*:(?=//)|www(?=\.))")  # a scheme before `//`, or `www.`


def md(text: object) -> str:
    """Text that stays text in GitHub Markdown, in a table cell or a list item: every character that Markdown
    or its HTML could read is backslash-escaped (no link, image, emphasis, code, heading, HTML, entity or cell
    break), line breaks become spaces, and `@name` and `#123` get a zero-width joiner after their sign, since
    GitHub links mentions and references in the rendered text, escaped or not. For the same reason bare
    addresses (`https://…`, `www.…`) get one before their scheme's colon or the last `w`: no autolink."""
    out = []
    plain = AUTOLINK.sub(lambda m: m[0][:-1] + ZWJ + m[0][-1], " ".join(str(text).splitlines()))
    for ch in plain:
        out.append(("\\" + ch if ch in MD_SPECIAL else ch) + (ZWJ if ch in "@#" else ""))
    return "".join(out)


def markdown(data: dict[str, Any]) -> str:
    """A short summary for `$GITHUB_STEP_SUMMARY` or a pinned issue."""
    lines = [f"### Assay board ({len(data['briefs'])} briefs, built {md(data['generated_at'])})", "",
             "| " + " | ".join(md(c["title"]) for c in data["columns"]) + " |",
             "|" + "---|" * len(data["columns"]),
             "| " + " | ".join(str(c["count"]) for c in data["columns"]) + " |", ""]
    attention = sorted((c for c in data["briefs"] if c["column"] in ("blocked", "unknown")),
                       key=lambda c: c["column"] != "unknown")  # an effect that may have happened comes first
    if attention:
        lines += ["**Needs a person:**", ""]
        lines += [f"- `{c['id']}` {md(c['title'])}: {md(c['column'])}"  # an id is a-z 0-9 . _ -
                  + (f" ({md(c['reason'])})" if c["reason"] else "") for c in attention[:20]]
        if len(attention) > 20:
            lines.append(f"- … and {len(attention) - 20} more")
        lines.append("")
    if data["desks"]:
        lines.append("Desks: " + ", ".join(f"{md(d['desk'])} ({md(d['liveness'])}, {len(d['briefs'])} briefs)"
                                           for d in data["desks"]))
    if waste_text(data["waste"]):
        lines.append(f"Agent time: {md(waste_text(data['waste']))}")
    lines.append(f"Sweepers' findings recorded: {len(data['findings'])}")
    return "\n".join(lines) + "\n"
