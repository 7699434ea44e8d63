"""The board of a 1,000-brief mixed fleet, as an operator sees it in real Chromium: what needs a person is on the
first screen of a desktop and of a phone, light and dark, and a desk that stopped renewing reads "overdue" long
before its lease ends. Screenshots are kept in test-artifacts/."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from assay.observe.board import NEEDS
from tests.conftest import REPO, assay
from tests.helpers.fleet import DEAD, MIX, OVERDUE, STALLED_S, make_fleet
from tests.pngread import mean_brightness

ARTIFACTS = Path(os.environ.get("ASSAY_TEST_ARTIFACTS") or REPO / "test-artifacts")
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
CLAIMED_HEIGHT = 1500  # a desktop screenshot this tall shows the first cards of the claimed column too
# measures, in the page as drawn, where each visible "needs you" element ends; a copy of the page carries it (the
# board's own pages forbid every script)
MEASURE = """<script>
const seen = [...document.querySelectorAll('#needs-you .need, #needs-you li.item')]
  .filter(e => e.getClientRects().length > 0)
  .map(e => ({kind: e.closest('section.needs') ? e.closest('section.needs').id : 'bar',
              bottom: Math.round(e.getBoundingClientRect().bottom + scrollY)}));
const badges = [...document.querySelectorAll('article.card .badge')]
  .filter(e => e.getClientRects().length > 0 && e.getBoundingClientRect().width > 0)
  .map(e => ({card: e.closest('article').getAttribute('data-liveness'), text: e.textContent,
              color: getComputedStyle(e).color, text_color: getComputedStyle(e.closest('p')).color,
              bottom: Math.round(e.getBoundingClientRect().bottom + scrollY)}));
document.body.setAttribute('data-measured', JSON.stringify({viewport: innerHeight, seen: seen, badges: badges,
  page: document.documentElement.scrollHeight}));
</script>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("fleet")
    now = time.time()
    make_fleet(tmp / "forge.git", now)
    built = assay("board", "build", "-o", str(tmp / "site"), "--forge", str(tmp / "forge.git"), "--json",
                  env={"ASSAY_BOARD_NOW": str(now), "ASSAY_CACHE_DIR": str(tmp / "cache")})
    assert built.code == 0, built.err
    return tmp / "site", json.loads((tmp / "site" / "board.json").read_text())


def test_what_needs_a_person_is_listed_with_counts_and_the_next_command(site: tuple[Path, dict[str, Any]]) -> None:
    _, data = site
    counts = data["needs_you_counts"]
    assert counts == {"unknown": MIX["unknown"], "blocked": MIX["blocked"], "locked": 0, "review": MIX["waiting"],
                      "stuck": 0, "dead": DEAD, "overdue": OVERDUE, "problem": 0}
    kinds = [n["kind"] for n in data["needs_you"]]
    assert kinds == sorted(kinds, key=NEEDS.index)  # the most urgent first: an effect that may have happened
    first = {n["kind"]: n for n in reversed(data["needs_you"])}
    assert first["unknown"]["next"].startswith("assay step settle deploy --brief unkn-")
    assert "verify failed 3 times" in first["blocked"]["why"]
    assert first["review"]["next"] == f"assay review merge {first['review']['brief']}"
    # when the sweep ends it, by the desk's clock (no sweeper has seen this forge), and the command to end it now
    assert first["overdue"]["why"] == "desk0 has not renewed for 5m (heartbeat 60s, lease 600s)"
    assert first["overdue"]["until"] == "lease ends in 5m by its desk's clock; the sweep expires it then"
    assert first["overdue"]["next"] == f"assay release {first['overdue']['brief']} --force --reason 'desk0 stopped'"
    assert first["dead"]["why"].startswith("desk6's process (pid ") and first["dead"]["until"].startswith(
        "lease ends in 5m")
    assert {n["until"] for n in data["needs_you"] if n["kind"] not in ("dead", "overdue")} == {""}


def test_a_desk_that_stopped_renewing_is_overdue_long_before_its_lease_ends(site: tuple[Path, dict[str, Any]]) -> None:
    out, data = site
    cards = {c["id"]: c for c in data["briefs"]}
    overdue = sorted(b for b, c in cards.items() if c["liveness"]["word"] == "overdue")
    assert len(overdue) == OVERDUE and all(cards[b]["lease_s"] - STALLED_S >= 300 for b in overdue)
    assert {c["liveness"]["word"] for c in cards.values() if c["state"] == "held"} == {"live", "overdue", "dead"}
    desks = {d["desk"]: d["liveness"] for d in data["desks"]}
    assert desks["desk0"] == "overdue" and "overdue" not in {v for k, v in desks.items() if k != "desk0"}
    assert desks["desk6"] == "dead" and "dead" not in {v for k, v in desks.items() if k != "desk6"}
    index = (out / "index.html").read_text(encoding="utf-8")
    needs = index.split('id="needs-you"')[1].split('<form id="filters"')[0]
    assert "Overdue" in needs and any(f'href="briefs/{b}.html"' in needs for b in overdue)
    # each card wears its badge; a brief page's status says what its "needs you" note says, and when the sweep acts
    for word, badge in (("overdue", "overdue"), ("dead", "desk dead")):
        brief = next(b for b, c in cards.items() if c["liveness"]["word"] == word)
        card = index.split(f'data-liveness="{word}">')[1].split("</article>")[0]
        assert f'<span class="badge live-{word}"' in card and f">{badge}</span>" in card
        assert "lease ends in 5m by its desk&#x27;s clock; the sweep expires it then" in card
        page = (out / "briefs" / f"{brief}.html").read_text(encoding="utf-8")
        assert f'<span class="badge col-working live-{word}">Claimed, {badge}</span>' in page
        assert f"<b>{'Dead desk' if word == 'dead' else 'Overdue'}</b>" in page and "Claimed / working" not in page
        assert f"or <code>assay release {brief} --force --reason" in page


def test_done_work_is_folded_and_the_page_stays_small(site: tuple[Path, dict[str, Any]]) -> None:
    out, _ = site
    index = (out / "index.html").read_text(encoding="utf-8")
    done = index.split('<section class="column" data-column="done"')[1].split("</section>")[0]
    assert done.count("<article") == 12 and f"and {MIX['done'] - 12} more done" in done
    assert len(index.encode()) < 200_000  # 1,000 briefs: every card but the folded done ones
    needs = (out / "needs.html").read_text(encoding="utf-8")
    assert needs.count('<li class="item">') == sum(MIX[k] for k in ("unknown", "blocked", "waiting")) + OVERDUE + DEAD


def _measure(tmp_path: Path, out: Path, size: tuple[int, int], dark: bool) -> dict[str, Any]:
    assert CHROMIUM is not None
    page = (out / "index.html").read_text(encoding="utf-8")
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", MEASURE + "</body>")
    (out / "measure.html").write_text(page, encoding="utf-8")
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'p'}",
            f"--window-size={size[0]},{size[1]}", *(["--force-dark-mode"] if dark else [])]
    dom = subprocess.run([*args, "--dump-dom", (out / "measure.html").as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, dom[-500:]
    return dict(json.loads(html.unescape(found[1])))


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (sh tests/install-chromium.sh)")
@pytest.mark.parametrize("screen", sorted(SIZES))
def test_every_kind_that_needs_you_is_on_the_first_screen(site: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                         screen: str) -> None:
    out, data = site
    kinds = {k for k, n in data["needs_you_counts"].items() if n}
    ARTIFACTS.mkdir(exist_ok=True)
    for dark in (False, True):
        measured = _measure(tmp_path, out, SIZES[screen], dark)
        seen = measured["seen"]
        assert {s["kind"] for s in seen} == {"bar", *(f"n-{k}" for k in kinds)}  # the bar, and items of each kind
        lowest = max(s["bottom"] for s in seen)
        assert lowest <= measured["viewport"], (screen, dark, lowest, measured["viewport"])
        assert measured["page"] > measured["viewport"]  # the rest of the fleet is below, as it should be
        # a dead and an overdue claim wear their badge, drawn in a colour of its own; on a desktop's first screen
        badges = {b["card"]: b for b in reversed(measured["badges"])}  # the first card of each
        assert sorted(b["card"] for b in measured["badges"]) == ["dead"] * DEAD + ["overdue"] * OVERDUE
        assert (badges["dead"]["text"], badges["overdue"]["text"]) == ("desk dead", "overdue")
        assert all(b["color"] != b["text_color"] for b in badges.values()), badges

        shot = ARTIFACTS / f"fleet-{screen}-{'dark' if dark else 'light'}.png"
        assert CHROMIUM is not None
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        f"--user-data-dir={tmp_path / 'p'}", f"--window-size={SIZES[screen][0]},{SIZES[screen][1]}",
                        *(["--force-dark-mode"] if dark else []), f"--screenshot={shot}",
                        (out / "index.html").as_uri()], capture_output=True, timeout=120, check=True)
        brightness = mean_brightness(shot.read_bytes())
        assert (brightness < 100) if dark else (brightness > 150), (shot, brightness)
        if screen == "desktop":  # a taller screen: the claimed column's first cards, a dead one and an overdue one
            assert max(b["bottom"] for b in badges.values()) <= CLAIMED_HEIGHT - 40, badges
            claimed = ARTIFACTS / f"fleet-{screen}-{'dark' if dark else 'light'}-claimed.png"
            subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            f"--user-data-dir={tmp_path / 'p'}", f"--window-size={SIZES[screen][0]},{CLAIMED_HEIGHT}",
                            *(["--force-dark-mode"] if dark else []), f"--screenshot={claimed}",
                            (out / "index.html").as_uri()], capture_output=True, timeout=120, check=True)
            assert claimed.stat().st_size > 10_000, claimed
        print(f"{screen} {'dark' if dark else 'light'}: last 'needs you' item ends at {lowest}px of "
              f"{measured['viewport']}px; page {measured['page']}px")


def test_a_brief_page_draws_one_row_per_step_with_its_duration_and_end(site: tuple[Path, dict[str, Any]]) -> None:
    out, data = site
    brief = next(n["brief"] for n in data["needs_you"] if n["kind"] == "unknown")
    page = (out / "briefs" / f"{brief}.html").read_text(encoding="utf-8")
    rows = re.findall(r'<g class="step"><text x="4" y="[0-9]+">([^<]+) <tspan class="seq">#([0-9]+)</tspan>.*?'
                      r'</rect><text x="[0-9.]+" y="[0-9]+">([^<]+)</text></g>', page)
    assert rows == [("deploy", "1", "15m unknown")]  # intent to outcome_unknown: 15 minutes, ended unknown
    assert "epoch 1" in page and 'class="k-outcome_unknown"' in page
