"""The board built from a known fleet state on a temporary forge: real desk runs and CLI calls make the state,
the built pages are parsed (and, where Chromium is installed, rendered by it) and checked against it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.forge.base import Reviews
from assay.core.git import ForgeGit
from tests.conftest import REPO, Forge, assay, git
from tests.helpers.desks import DESK, brief, desk_env
from tests.journal_check import claim_chain
from tests.pngread import mean_brightness

XSS = "<script>alert(1)</script>"
EXPECTED = {"ready": ["xss"], "working": ["alpha", "iota", "kappa", "lambda"], "waiting": ["beta", "greet"],
            "blocked": ["gamma"], "unknown": ["delta", "eta", "zeta"], "done": ["epsilon"]}
# newcomer: no sweeper saw its claim, but its holder (the `assay claim` command) has ended and 200 s passed with
# no renewal: dead, from the forge's evidence and this host's
LIVENESS = {"builder": "waiting", "crasher": "dead", "hand": "working", "newcomer": "dead",
            "sleepy": "stale", "spare": "idle"}
HOSTILE = "@octocat [x](https://evil.example/) ![i](https://evil.example/i.png) **b** _e_ #123 `c` a|b <i>h</i> ~s~"
POLICY = "name: default\nexpire:\n  grace_s: 0\n"
ARTIFACTS = Path(os.environ.get("ASSAY_TEST_ARTIFACTS") or REPO / "test-artifacts")  # kept after the run
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@dataclass
class Fleet:
    forge: Forge
    out: Path
    built: dict[str, object]


def _publish(forge: Forge, files: dict[str, str]) -> None:
    for path, text in files.items():
        (forge.seed / path).parent.mkdir(parents=True, exist_ok=True)
        (forge.seed / path).write_text(text)
    git("add", "-A", cwd=forge.seed)
    git("commit", "-q", "-m", "fleet", cwd=forge.seed)
    git("push", "-q", forge.url, "HEAD:refs/heads/main", cwd=forge.seed)


def _plain(title: str, extra: str = "") -> str:
    return f"---\ntitle: '{title}'\n{extra}---\n{title}.\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    tmp = tmp_path_factory.mktemp("fleet")
    forge = Forge(tmp / "forge.git", tmp / "seed")
    git("init", "-q", "--bare", "--initial-branch=main", str(forge.path))
    git("init", "-q", "--initial-branch=main", str(forge.seed))
    _publish(forge, {
        "desks/builder.yaml": DESK.format(name="builder", attempts=2),
        "desks/spare.yaml": DESK.format(name="spare", attempts=2).replace("[work]", "[never]"),
        "sweepers/default.yaml": POLICY,
        "briefs/greet.md": brief("Greet", ["write greet.txt hello"], "grep -q hello greet.txt"),
        "briefs/xss.md": _plain(XSS), "briefs/beta.md": _plain("Beta", "depends_on: [xss]\n"),
        "briefs/eta.md": _plain(HOSTILE.replace("'", "''")),
        **{f"briefs/{b}.md": _plain(b.title()) for b in ("alpha", "gamma", "delta", "epsilon", "zeta", "iota",
                                                         "kappa", "lambda")},
    })
    desk = assay("desk", "run", "builder", "--once", "--forge", forge.url, env=desk_env(tmp), timeout=120)
    assert desk.code == 0, desk.err
    for b in ("alpha", "gamma", "delta", "epsilon"):
        assert assay("claim", b, "--desk", "hand", "--forge", forge.url).code == 0
    for _ in range(3):
        assert assay("renew", "alpha", "--desk", "hand", "--forge", forge.url).code == 0
    assert assay("release", "epsilon", "--desk", "hand", "--outcome", "done", "--forge", forge.url).code == 0
    git_port = ForgeGit(forge.url, cache_root=tmp / "cache")
    try:
        Claims(git_port).block("gamma", "hand", 1, "needs a person: <b>creds</b>")
    finally:
        git_port.close()
    ctx = {"ASSAY_FORGE": forge.url, "ASSAY_BRIEF": "delta", "ASSAY_DESK": "hand", "ASSAY_EPOCH": "1"}
    deploy = ("step", "run", "--name", "deploy", "--", "true")
    crashed = assay(*deploy, env={**ctx, "ASSAY_RUN": "r1", "ASSAY_CRASH_AT": "step.after-execute:deploy"})
    assert crashed.code == -signal.SIGKILL
    assert assay(*deploy, env={**ctx, "ASSAY_RUN": "r2"}).code == 4
    # desks SIGKILLed right after an unsafe step, and nothing recovered: only their intents are journaled
    for b, d, lease in (("zeta", "crasher", "1"), ("eta", "hand", "600"), ("iota", "hand", "600")):
        assert assay("claim", b, "--desk", d, "--lease", lease, "--forge", forge.url).code == 0
        unsafe = assay("step", "run", "--name", "deploy", "--policy", "unsafe", "--", "true",
                       env={**ctx, "ASSAY_BRIEF": b, "ASSAY_DESK": d, "ASSAY_RUN": "r1",
                            "ASSAY_CRASH_AT": "step.after-execute:deploy"})
        assert unsafe.code == -signal.SIGKILL, unsafe.err
    git_port = ForgeGit(forge.url, cache_root=tmp / "cache2")
    try:
        Claims(git_port).block("eta", "hand", 1, "left for a person")  # blocked, and its outcome unknown
    finally:
        git_port.close()
    assert assay("claim", "kappa", "--desk", "sleepy", "--lease", "30", "--forge", forge.url).code == 0
    now = time.time()  # the sweepers' clock: the first sweep sees every tip, the second expires zeta (lease 1 s)
    for at in (now, now + 5):
        swept = assay("sweep", "--forge", forge.url, "--json", env={"ASSAY_SWEEP_NOW": str(at)})
        assert swept.code == 0, swept.err
    assert [c["state"] for c in claim_chain(forge.path, "zeta")][-2:] == ["held", "expired"]  # the intent renewed
    assert assay("renew", "alpha", "--desk", "hand", "--forge", forge.url).code == 0  # moved since the sweeps
    assert assay("claim", "lambda", "--desk", "newcomer", "--lease", "10", "--forge", forge.url).code == 0
    out = tmp / "site"
    built = assay("board", "build", "-o", str(out), "--forge", forge.url, "--json",
                  env={"ASSAY_BOARD_NOW": str(now + 200), "ASSAY_CACHE_DIR": str(tmp / "board-cache")})
    assert built.code == 0, built.err
    data = built.json()
    assert isinstance(data, dict)
    return Fleet(forge, out, data)


class Page(HTMLParser):
    """The parts of a page the tests look at: cards by column, script elements, table cells, text."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: dict[str, list[str]] = {}
        self.scripts = 0
        self.text: list[str] = []
        self.svg_steps = 0  # rows of the steps timeline
        self._card: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "g" and a.get("class") == "step":
            self.svg_steps += 1
        if tag == "article" and "card" in (a.get("class") or ""):
            self._card = self.cards.setdefault(a.get("data-column") or "", [])
        if tag == "a" and self._card is not None and (a.get("href") or "").startswith("briefs/"):
            self._card.append((a.get("href") or "").removeprefix("briefs/").removesuffix(".html"))
            self._card = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_the_index_has_each_brief_in_its_states_column(fleet: Fleet) -> None:
    page = parse(fleet.out / "index.html")
    assert {col: sorted(ids) for col, ids in page.cards.items()} == EXPECTED
    assert fleet.built["columns"] == {col: len(ids) for col, ids in EXPECTED.items()}
    text = "".join(page.text)
    assert "builder" in text and "hand" in text  # the desks' table


def test_round_trips_are_one_ls_remote_and_one_fetch(fleet: Fleet) -> None:
    assert fleet.built["round_trips"] == {"ls-remote": 1, "fetch": 1}
    again = assay("board", "build", "-o", str(fleet.out.parent / "again"), "--forge", fleet.forge.url, "--json")
    trips = again.json()["round_trips"]  # type: ignore[index]
    assert again.code == 0 and trips["ls-remote"] == 1 and trips.get("fetch", 0) <= 1


def test_a_script_title_is_text_and_no_data_makes_an_element(fleet: Fleet) -> None:
    index = parse(fleet.out / "index.html")
    assert index.scripts == 0  # the filter needs none, and nothing from a record makes one
    assert XSS in "".join(index.text)
    page = parse(fleet.out / "briefs" / "xss.html")
    assert page.scripts == 0 and XSS in "".join(page.text)
    gamma = (fleet.out / "briefs" / "gamma.html").read_text()
    assert "<b>creds</b>" not in gamma and "&lt;b&gt;creds&lt;/b&gt;" in gamma
    assert XSS not in (fleet.out / "board.md").read_text()


def test_a_brief_page_shows_custody_with_renewals_folded_and_a_timeline(fleet: Fleet) -> None:
    alpha = parse(fleet.out / "briefs" / "alpha.html")
    assert "renewed 4×" in "".join(alpha.text)
    chain = git("--git-dir", str(fleet.forge.path), "rev-list", "refs/assay/claims/alpha").split()
    assert len(chain) == 5  # the claim and its four renewals, folded into one row
    greet = parse(fleet.out / "briefs" / "greet.html")
    journal = git("--git-dir", str(fleet.forge.path), "log", "--format=%H", "refs/assay/journal/greet").split()
    entries = [json.loads(line) for c in journal for line in
               git("--git-dir", str(fleet.forge.path), "show", f"{c}:entries.jsonl").splitlines() if line]
    intents = [e for e in entries if e["kind"] == "intent"]
    assert greet.svg_steps == len(intents) > 2  # one row per step call, with its duration and how it ended
    page = (fleet.out / "briefs" / "greet.html").read_text(encoding="utf-8")
    said = re.findall(r'</rect><text x="[0-9.]+" y="[0-9]+">([^<]+)</text></g>', page)
    assert len(said) == len(intents) and all(re.fullmatch(r"[0-9]+[smhd]( [a-z]+)?", s) for s in said), said
    assert {e["step"] for e in intents} <= set(re.findall(r'<text x="4" y="[0-9]+">([^ <]+) ', page))
    card = next(c for c in json.loads((fleet.out / "board.json").read_text())["briefs"] if c["id"] == "greet")
    assert card["verify"]["passed"] == 1 and card["verify"]["failed"] == 0
    assert card["review"]["state"] == "ready" and card["desk"] == "builder"


def card_in(index: str, brief: str) -> str:
    """The card of `brief` on the index page (not the "needs you" line that may link it too)."""
    cards = [a for a in index.split("<article")[1:] if f'href="briefs/{brief}.html"' in a.split("</article>")[0]]
    assert len(cards) == 1, brief
    return cards[0].split("</article>")[0]


def _documented(section: str) -> set[str]:
    text = (REPO / "docs" / "data-model.md").read_text()
    body = text.split(f"<!-- {section} -->")[1].split("<!-- end -->")[0]
    return {name for cell in re.findall(r"^\| (`[^|]+) \|", body, flags=re.M)
            for name in re.findall(r"`([a-z_]+)`", cell)}


def test_board_json_has_exactly_the_documented_fields(fleet: Fleet) -> None:
    data = json.loads((fleet.out / "board.json").read_text())
    assert set(data) == _documented("board-fields")
    for card in data["briefs"]:
        assert set(card) == _documented("board-brief-fields"), card["id"]


def test_serve_previews_the_site_on_loopback(fleet: Fleet) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "assay", "board", "serve", "-d", str(fleet.out), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" on ")[-1].strip()
        assert url.startswith("http://127.0.0.1:"), line
        with urllib.request.urlopen(url + "index.html", timeout=10) as answer:
            assert b"Assay board" in answer.read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bad_output_folder_and_missing_site_are_clear_errors(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    bad = assay("board", "build", "-o", str(tmp_path / "file"), "--forge", fleet.forge.url)
    assert bad.code == 2 and "not a folder" in bad.err and "Traceback" not in bad.err
    empty = assay("board", "serve", "-d", str(tmp_path / "nothing"))
    assert empty.code == 2 and "no built board" in empty.err


def _chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (sh tests/install-chromium.sh)")
def test_chromium_renders_the_board_and_runs_no_data(fleet: Fleet, tmp_path: Path) -> None:
    url = (fleet.out / "index.html").as_uri()
    dom = _chromium(tmp_path, "--dump-dom", url)
    page = Page()
    page.feed(dom)
    assert {col: sorted(ids) for col, ids in page.cards.items()} == EXPECTED
    assert page.scripts == 0 and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    brief_dom = _chromium(tmp_path, "--dump-dom", (fleet.out / "briefs" / "xss.html").as_uri())
    assert "<script" not in brief_dom and "&lt;script&gt;" in brief_dom
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    light, dark = ARTIFACTS / "board-phone-light.png", ARTIFACTS / "board-phone-dark.png"
    _chromium(tmp_path, f"--screenshot={light}", "--window-size=390,844", url)  # a phone's viewport
    _chromium(tmp_path, "--force-dark-mode", f"--screenshot={dark}", "--window-size=390,844", url)
    assert mean_brightness(light.read_bytes()) > 180 > 90 > mean_brightness(dark.read_bytes())


def test_the_index_counts_every_done_brief_but_shows_a_bounded_number(fleet: Fleet) -> None:
    import json

    from assay.observe.boardrender import DONE_SHOWN, index_page

    data = json.loads((fleet.out / "board.json").read_text(encoding="utf-8"))
    [done] = [c for c in data["briefs"] if c["column"] == "done"]
    many = DONE_SHOWN + 37
    data["briefs"] += [{**done, "id": f"old{i:04d}"} for i in range(many - 1)]
    for col in data["columns"]:
        if col["id"] == "done":
            col["count"] = many
    page = Page()
    page.feed(index_page(data))
    assert len(page.cards["done"]) == DONE_SHOWN
    assert f"and {many - DONE_SHOWN} more done" in "".join(page.text)
    assert {col: sorted(ids) for col, ids in page.cards.items() if col != "done"} == \
        {col: ids for col, ids in EXPECTED.items() if col != "done"}


@pytest.mark.parametrize(("url", "api", "link"), [
    ("https://github.com/acme/app.git", None, "https://github.com/acme/app/pull/7"),
    ("git@github.com:acme/app.git", None, "https://github.com/acme/app/pull/7"),
    ("https://x-access-token:s3cret@github.com/acme/app.git", None, "https://github.com/acme/app/pull/7"),
    ("https://ghe.example.com/acme/app.git", "https://ghe.example.com/api/v3",
     "https://ghe.example.com/acme/app/pull/7"),
    ("https://ghe.example.com/acme/app.git", None, "briefs/app.html#review"),  # no API named: not GitHub
    ("/srv/forge.git", "https://ghe.example.com/api/v3", "briefs/app.html#review"),
])
def test_a_pull_requests_link_is_on_the_forges_own_web_host(monkeypatch: pytest.MonkeyPatch, url: str,
                                                            api: str | None, link: str) -> None:
    from assay.core.forge.base import Review
    from assay.core.records import ReviewRecord
    from assay.observe.board import review_page

    if api:
        monkeypatch.setenv("ASSAY_GITHUB_API", api)
    record = ReviewRecord(brief="app", branch="assay/app", title="App", state="ready", opened_at="", at="")
    assert review_page(_port(url), Review(record, "pull/7")) == link
    assert review_page(_port(url), Review(record, "0" * 40)) == "briefs/app.html#review"  # a ref commit


def _port(url: str) -> Reviews:
    """The review port the forge at `url` gets (a token set, so a GitHub one is built; nothing is called)."""
    from assay.config import open_reviews
    from assay.core.git import ForgeGit

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GITHUB_TOKEN", "t0ken")
        return open_reviews(ForgeGit(url))


def _data(fleet: Fleet) -> dict[str, Any]:
    data = json.loads((fleet.out / "board.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _cards(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in _data(fleet)["briefs"]}


def _intents(forge: Forge, brief: str) -> list[int]:
    journal = git("--git-dir", str(forge.path), "log", "--format=%H", f"refs/assay/journal/{brief}").split()
    entries = [json.loads(line) for c in journal for line in
               git("--git-dir", str(forge.path), "show", f"{c}:entries.jsonl").splitlines() if line]
    return sorted(e["seq"] for e in entries if e["kind"] == "intent" and e.get("policy") == "unsafe")


def test_an_unsafe_step_its_desk_died_in_is_outcome_unknown_once_no_desk_holds_it(fleet: Fleet) -> None:
    cards = _cards(fleet)
    zeta, eta, iota = cards["zeta"], cards["eta"], cards["iota"]
    # expired by the sweeper, nothing recovered: its intent alone says the effect may have happened
    assert (zeta["column"], zeta["state"], zeta["unknown"]) == ("unknown", "expired", [])
    assert zeta["interrupted"] == _intents(fleet.forge, "zeta") != []
    # blocked and unknown: unknown is the column, the state still says blocked
    assert (eta["column"], eta["state"], eta["interrupted"]) == ("unknown", "blocked", _intents(fleet.forge, "eta"))
    # still held at the intent's epoch: its desk may be running the step, so it is working, not unknown
    assert (iota["column"], iota["interrupted"]) == ("working", [])
    index = (fleet.out / "index.html").read_text(encoding="utf-8")
    zeta_card = card_in(index, "zeta")
    assert "last step deploy (interrupted)" in zeta_card and "unsafe step interrupted at seq 1" in zeta_card
    assert "eta" in (fleet.out / "board.md").read_text(encoding="utf-8").split("**Needs a person:**")[1]


def _committed(forge: Forge, ref: str) -> int:
    return int(git("--git-dir", str(forge.path), "log", "-1", "--format=%ct", ref).strip())


def test_lease_age_is_never_null_for_a_live_claim_and_says_whose_clock(fleet: Fleet) -> None:
    now = _data(fleet)["generated_at"]
    built = datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    cards = _cards(fleet)
    for card in cards.values():
        assert (card["lease_age_s"] is None) == (card["state"] not in ("held", "waiting", "blocked")), card["id"]
    # renewed after the last sweep: the sweepers never saw this tip, so the age is the desk's, from its commit
    alpha = cards["alpha"]
    assert alpha["lease_age_by"] == "desk"
    assert alpha["lease_age_s"] == int(built - _committed(fleet.forge, "refs/assay/claims/alpha"))
    assert alpha["custody"][-1]["renewals"] == 4  # its renewals, folded: the last one is when it was written
    assert alpha["custody"][-1]["last_at"] == datetime.fromtimestamp(
        _committed(fleet.forge, "refs/assay/claims/alpha"), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert alpha["custody"][-1]["at"] < alpha["custody"][-1]["last_at"]
    kappa = cards["kappa"]  # seen by the first sweep, 200 s before the board was built
    assert (kappa["lease_age_by"], kappa["lease_age_s"]) == ("sweeper", 200)
    index = (fleet.out / "index.html").read_text(encoding="utf-8")
    assert "claim last written" in card_in(index, "alpha")
    kappa_card = card_in(index, "kappa")
    assert "claim unchanged for ≥ 3m (sweeper&#x27;s clock)" in kappa_card and "renewed" not in kappa_card


def test_every_desk_on_main_is_listed_with_its_liveness_from_the_sweepers_evidence(fleet: Fleet) -> None:
    desks = {d["desk"]: d for d in _data(fleet)["desks"]}
    assert {name: d["liveness"] for name, d in desks.items()} == LIVENESS
    assert {name for name, d in desks.items() if d["defined"]} == {"builder", "spare"}
    assert desks["spare"]["briefs"] == [] and desks["crasher"]["expired"] == ["zeta"]
    assert desks["builder"]["briefs"] == ["greet"]
    text = "".join(parse(fleet.out / "index.html").text)
    assert all(state in text for state in LIVENESS.values())


def test_board_md_escapes_markdown_and_mentions_nobody(fleet: Fleet) -> None:
    from markdown_it import MarkdownIt

    text = (fleet.out / "board.md").read_text(encoding="utf-8")
    [line] = [t for t in text.splitlines() if t.startswith("- `eta`")]
    assert "@octocat" not in line and "#123" not in line  # GitHub links these in rendered text, escaped or not
    html = MarkdownIt("commonmark").enable("table").enable("strikethrough").render(line)
    for element in ("<a", "<img", "<strong", "<em", "<del", "<s>", "<i>"):
        assert element not in html, element
    assert html.count("<code>") == 1  # the id, and nothing from the title
    shown = re.sub(r"<[^>]+>", "", html).replace("\u200d", "")
    import html as html_module

    assert HOSTILE in html_module.unescape(shown)
    table = MarkdownIt("commonmark").enable("table").render(text)
    assert table.count("<th>") == 6  # a `|` in a title breaks no table
    from assay.observe.boardrender import md

    bare = md("see https://evil.example/x, HTTP://evil.example or www.evil.example; a note: fine")
    assert not re.search(r"(?i)https?://|www\.", bare)  # GitHub autolinks bare addresses in rendered text
    assert bare.replace("\u200d", "") == "see https://evil.example/x, HTTP://evil.example or www.evil.example; " \
        "a note: fine"


def test_pull_request_links_go_to_the_forges_own_github_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.core.forge.base import Review
    from assay.core.records import ReviewRecord
    from assay.observe.board import review_page

    record = ReviewRecord(brief="fix", branch="assay/fix", title="Fix", state="ready", opened_at="2030-01-01T00:00:00Z",
                          at="2030-01-01T00:00:00Z")
    monkeypatch.setenv("ASSAY_GITHUB_API", "https://ghe.example.com/api/v3")
    assert review_page(_port("https://ghe.example.com/team/app.git"), Review(record, "pull/7")) == \
        "https://ghe.example.com/team/app/pull/7"
    monkeypatch.setenv("ASSAY_GITHUB_API", "http://127.0.0.1:8080/api")
    assert review_page(_port("http://127.0.0.1:8080/o/r.git"), Review(record, "pull/2")) == \
        "http://127.0.0.1:8080/o/r/pull/2"
    monkeypatch.delenv("ASSAY_GITHUB_API")
    assert review_page(_port("https://github.com/o/r"), Review(record, "pull/3")) == "https://github.com/o/r/pull/3"
    assert review_page(_port("/srv/forge.git"), Review(record, "c" * 40)) == "briefs/fix.html#review"


def test_the_filter_is_radios_and_css_and_the_pages_allow_no_script(fleet: Fleet) -> None:
    index = (fleet.out / "index.html").read_text(encoding="utf-8")
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', index)
    assert csp is not None and "script-src" not in csp.group(1) and "default-src 'none'" in csp.group(1)
    css = (fleet.out / "board.css").read_text(encoding="utf-8")
    desks = sorted({c["desk"] for c in _data(fleet)["briefs"] if c["desk"]})
    for n, desk in enumerate(desks):
        assert f'id="f-desk-{n}"' in index and f"body:has(#f-desk-{n}:checked) .card:not(.desk-{n})" in css
        assert re.search(rf'<article class="card desk-{n}" data-desk="{re.escape(desk)}"', index), desk
    for col in EXPECTED:
        assert f'id="f-col-{col}"' in index and f"#f-col-{col}:checked" in css
    assert "overflow-wrap: anywhere" not in css.split("th, td {")[1].split("}")[0]


class Browser:
    """Chromium with scripts disabled, driven over the DevTools protocol on a pipe: the page runs no script,
    the test reads layout boxes (`DOM.getBoxModel` fails for an element that is not rendered) and clicks."""

    def __init__(self, tmp_path: Path) -> None:
        assert CHROMIUM is not None
        to_chrome, self._in = os.pipe()
        self._out, from_chrome = os.pipe()
        # above 9, so `3<&N 4>&M` clobbers neither (bash: dash takes no fd above 9)
        for name, fd in (("to", to_chrome), ("from", from_chrome)):
            high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
            os.close(fd)
            to_chrome, from_chrome = (high, from_chrome) if name == "to" else (to_chrome, high)
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{to_chrome} 4>&{from_chrome}', "bash", CHROMIUM, "--headless", "--no-sandbox",
             "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--blink-settings=scriptEnabled=false", "--remote-debugging-pipe", "--window-size=390,844",
             f"--user-data-dir={tmp_path / 'cdp-profile'}", "about:blank"],
            pass_fds=(to_chrome, from_chrome), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer, self._id, self.session = b"", 0, ""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")

    def _message(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._out, 65536)
            assert chunk, "Chromium closed its DevTools pipe"
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message = json.loads(raw)
        assert isinstance(message, dict)
        return message

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._in, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise LookupError(answer["error"].get("message", ""))
                result = answer.get("result", {})
                assert isinstance(result, dict)
                return result

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        while self._message().get("method") != "Page.loadEventFired":
            pass
        self.root = self.call("DOM.getDocument")["root"]["nodeId"]

    def nodes(self, selector: str) -> list[int]:
        return list(self.call("DOM.querySelectorAll", nodeId=self.root, selector=selector)["nodeIds"])

    def box(self, node: int) -> tuple[float, float, float, float] | None:
        """(x, y, width, height) of the node's border box, None when it is not rendered."""
        try:
            model = self.call("DOM.getBoxModel", nodeId=node)["model"]
        except LookupError:
            return None
        quad = model["border"]
        return quad[0], quad[1], float(model["width"]), float(model["height"])

    def attribute(self, node: int, name: str) -> str:
        values = self.call("DOM.getAttributes", nodeId=node)["attributes"]
        return str(dict(zip(values[::2], values[1::2], strict=True)).get(name, ""))

    def click(self, selector: str) -> None:
        [node] = self.nodes(selector)
        self.call("DOM.scrollIntoViewIfNeeded", nodeId=node)
        found = self.box(node)
        assert found is not None, selector
        x, y, width, height = found
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x + width / 2, y=y + height / 2, button="left",
                      clickCount=1)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._in)
        os.close(self._out)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (sh tests/install-chromium.sh)")
def test_with_scripts_disabled_the_filter_works_and_phone_tables_scroll_whole(fleet: Fleet, tmp_path: Path) -> None:
    browser = Browser(tmp_path)
    try:
        browser.open((fleet.out / "index.html").as_uri())

        def shown() -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            for node in browser.nodes("article.card"):
                if browser.box(node) is not None:
                    out.setdefault(browser.attribute(node, "data-column"), []).append(browser.attribute(node,
                                                                                                 "data-desk"))
            return out

        everything = shown()
        assert {col: len(desks) for col, desks in everything.items()} == \
            {col: len(ids) for col, ids in EXPECTED.items()}
        browser.click('label[for="f-col-unknown"]')
        assert set(shown()) == {"unknown"} and len(shown()["unknown"]) == len(EXPECTED["unknown"])
        desks = sorted({c["desk"] for c in _data(fleet)["briefs"] if c["desk"]})
        browser.click(f'label[for="f-desk-{desks.index("hand")}"]')
        assert shown() == {"unknown": ["hand", "hand"]}  # delta and eta: hand's cards in the unknown column
        browser.click('label[for="f-col-all"]')
        hands = sum(1 for c in _data(fleet)["briefs"] if c["desk"] == "hand")
        assert {d for ds in shown().values() for d in ds} == {"hand"} and sum(map(len, shown().values())) == hands
        browser.click('label[for="f-desk-all"]')
        assert shown() == everything
        # a phone: short cells stay on one line, and the table is wider than its scrolling wrapper
        browser.open((fleet.out / "briefs" / "alpha.html").as_uri())
        [wrapper] = browser.nodes("#custody .scroll")
        [table] = browser.nodes("#custody table")
        outer, inner = browser.box(wrapper), browser.box(table)
        assert outer is not None and inner is not None and inner[2] > outer[2]
        line = max(b[3] for b in map(browser.box, browser.nodes("#custody th")) if b is not None)
        for node in browser.nodes("#custody td:not(.wrap)"):
            cell = browser.box(node)
            assert cell is not None and cell[3] <= line + 1, browser.attribute(node, "class")
    finally:
        browser.close()
