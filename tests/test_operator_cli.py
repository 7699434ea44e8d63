"""The CLI as an operator of many desks uses it: listings filtered like gh's, liveness before a lease ends, output
that fits 80 columns."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from assay.core.steps import open_session
from tests.conftest import BRIEF_IDS, Forge, assay, git
from tests.helpers.desks import brief as brief_text
from tests.helpers.desks import desk_env, publish, run_desk
from tests.journal_check import claim_chain, entries


def listed(*args: str) -> list[dict[str, Any]]:
    """The claims `assay claims ARGS --json` lists."""
    run = assay("claims", *args, "--json")
    data = run.json()
    assert run.code == 0 and isinstance(data, dict), run.err
    return list(data["claims"])


def test_claims_filter_by_state_desk_and_limit(forge: Forge, claims: Claims) -> None:
    for brief, desk in (("alpha", "one"), ("beta", "one"), ("gamma", "two"), ("delta", "two")):
        claims.claim(brief, desk)
    claims.block("delta", "two", 1, "needs a person")
    assert [c["brief"] for c in listed("--forge", forge.url)] == ["alpha", "beta", "delta", "gamma"]
    assert [c["brief"] for c in listed("--state", "held", "--forge", forge.url)] == ["alpha", "beta", "gamma"]
    two = listed("--desk", "two", "--state", "blocked", "--state", "held", "--forge", forge.url)
    assert [c["brief"] for c in two] == ["delta", "gamma"]
    assert [c["brief"] for c in listed("--limit", "1", "--forge", forge.url)] == ["alpha"]
    table = assay("claims", "--limit", "1", "--forge", forge.url).out.splitlines()
    assert [line.split()[0] for line in table[1:-1]] == ["alpha"]
    assert table[-1].strip() == "… 3 of 4 claims not shown: --all or --limit 0 lists them all"
    bad = assay("claims", "--state", "sleeping", "--forge", forge.url)
    assert bad.code == 2 and "'sleeping' is not one of" in bad.err


def test_a_claim_its_desk_stopped_renewing_is_overdue_long_before_its_lease_ends(forge: Forge) -> None:
    """A desk renews every heartbeat (60 s by default); a claim last written 5 minutes ago is overdue, though its
    lease (600 s) still runs. The age is the claim commit's, so no sweeper has to have run."""
    git_port = ForgeGit(forge.url)
    Claims(git_port, clock=lambda: time.time() - 300).claim("alpha", "quiet", holder="quiet/elsewhere")
    Claims(git_port).claim("beta", "busy", holder="busy/elsewhere")
    git_port.close()
    found = {c["brief"]: c for c in listed("--forge", forge.url)}
    assert found["alpha"]["liveness"] == "overdue" and found["alpha"]["lease_s"] == 600
    assert found["alpha"]["written_age_s"] >= 300 and "has not renewed for 5m (heartbeat 60s" in found["alpha"]["why"]
    assert found["beta"]["liveness"] == "live" and found["beta"]["written_age_s"] < 60
    table = assay("claims", "--forge", forge.url)
    row = next(line for line in table.out.splitlines() if line.split()[:1] == ["alpha"])
    assert "overdue" in row and "5m" in row
    assert "1 claim(s) overdue or dead" in table.err and "alpha" in table.err
    # when the sweep expires it anyway, and the command that ends it now, as the board says it (`Liveness.advice`)
    assert re.fullmatch(r"lease ends in [45]m by its desk's clock; the sweep expires it then, or "
                        r"`assay release alpha --force --reason 'quiet stopped'` now", found["alpha"]["next"])
    assert re.search(r"alpha: quiet has not renewed for 5m \(heartbeat 60s, lease 600s\); lease ends in [45]m by its "
                     r"desk's clock; the sweep expires it then, or `assay release alpha --force --reason 'quiet "
                     r"stopped'` now", " ".join(table.err.split())) and found["beta"]["next"] == ""


def test_briefs_filter_by_state_desk_and_limit(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "one")
    claims.claim("beta", "two")
    run = assay("briefs", "--state", "held", "--json", "--forge", forge.url)
    data = run.json()
    assert isinstance(data, dict) and [b["brief"] for b in data["briefs"]] == ["alpha", "beta"]
    run = assay("briefs", "--state", "ready", "--limit", "2", "--json", "--forge", forge.url)
    data = run.json()
    assert isinstance(data, dict) and len(data["briefs"]) == 2 and {b["state"] for b in data["briefs"]} == {"ready"}
    run = assay("briefs", "--desk", "two", "--json", "--forge", forge.url)
    data = run.json()
    assert isinstance(data, dict) and [b["brief"] for b in data["briefs"]] == ["beta"]


def test_listings_fit_80_columns(forge: Forge, claims: Claims) -> None:
    publish(forge, {f"desks/{name}.yaml": DESK_SLEEPY.replace("name: patient", f"name: {name}").replace(
        "sleep 60", "sleep 60 " + " ".join(f"--option-{i}" for i in range(30))) for name in ("one", "two")})
    for brief in ("alpha", "beta", "hello"):
        claims.claim(brief, "a-desk-with-a-long-name")
    session = open_session(claims, "alpha", "a-desk-with-a-long-name", 1, "run-with-a-long-name")
    session.step("deploy-the-service-to-the-staging-cluster", lambda key: {"out": "x" * 300}, policy="unsafe")
    session.flush()
    env = {"COLUMNS": "80"}
    shown = {}
    for args in (["claims"], ["briefs"], ["claim", "history", "alpha"], ["journal", "alpha", "--limit", "1"],
                 ["desk", "list"]):
        run = assay(*args, "--forge", forge.url, env=env)
        assert run.code == 0, (args, run.err)
        wide = [line for line in run.out.splitlines() if len(line) > 80]
        assert wide == [], (args, wide)
        shown[args[0]] = run.out.splitlines()
    written = [e["at"] for e in entries(forge.path, "alpha")]  # pinned to UTC: today's entries show their time
    rows = [line for line in shown["journal"] if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == 1 and written[-1][11:19] in rows[0]  # the newest: HH:MM:SS, whole
    assert shown["journal"][-1].strip() == \
        f"… {len(written) - 1} of {len(written)} entries not shown (the oldest): --all or --limit 0 lists them all"
    desks = [line for line in shown["desk"] if line.split()[:1] in (["one"], ["two"])]  # a desk a line, cut
    assert len(desks) == 2 and len(shown["desk"]) == 3 and all(line.rstrip().endswith("…") for line in desks)


def test_listings_stop_at_a_default_limit_and_say_what_they_left_out(forge: Forge) -> None:
    publish(forge, {f"briefs/more-{i:02}.md": f"---\ntitle: More {i}\npriority: 9\n---\n" for i in range(50)})
    table = assay("briefs", "--forge", forge.url)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert len(lines) == 1 + 50 + 1 and lines[-1].strip() == \
        "… 6 of 56 briefs not shown: --all or --limit 0 lists them all"
    data = assay("briefs", "--json", "--forge", forge.url).json()
    assert isinstance(data, dict) and len(data["briefs"]) == 56  # JSON is whole unless --limit is given
    every = assay("briefs", "--limit", "0", "--forge", forge.url)
    assert len(every.out.splitlines()) == 1 + 56 and "not shown" not in every.out
    both = assay("briefs", "--all", "--limit", "3", "--forge", forge.url)
    assert both.code == 2 and "--all lists every one of the briefs: not with --limit 3" in both.err


def test_jq_selects_from_the_json_and_a_bad_program_writes_nothing(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    claims.claim("beta", "d")
    names = assay("claims", "--jq", ".claims[] | select(.brief == \"beta\") | .brief, .epoch", "--forge", forge.url)
    assert names.code == 0 and names.out == "beta\n1\n", names.err  # strings bare, a result a line
    before = git("--git-dir", str(forge.path), "for-each-ref")
    bad = assay("claim", "gamma", "--desk", "d", "--jq", ".[", "--forge", forge.url)  # the lean path
    assert bad.code == 2 and "--jq '.[' is not a jq program" in bad.err
    assert git("--git-dir", str(forge.path), "for-each-ref") == before  # refused before the claim
    renewed = assay("renew", "alpha", "--desk", "d", "--jq", "{brief, epoch}", "--forge", forge.url)
    assert renewed.code == 0 and json.loads(renewed.out) == {"brief": "alpha", "epoch": 1}
    without = subprocess.run([sys.executable, "-c", "import sys; sys.modules['jq'] = None; "
                              "from assay.cli import main; main()", "claims", "--jq", ".", "--forge", forge.url],
                             capture_output=True, text=True, timeout=60)
    assert without.returncode == 2 and "--jq needs the jq package" in without.stderr
    assert "pip install 'assay-desks[jq]'" in without.stderr


def test_a_mistyped_brief_gets_the_close_names_in_its_hint(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    for args in (["journal", "alpah"], ["claim", "alpah", "--desk", "d"], ["renew", "alpah", "--desk", "d"],
                 ["brief", "show", "Alpha"]):
        run = assay(*args, "--forge", forge.url)
        assert run.code in (2, 3) and "hint: did you mean 'alpha'?" in run.err, (args, run.err)
    never_claimed = assay("renew", "gamma", "--desk", "d", "--forge", forge.url)  # a brief, only not claimed
    assert never_claimed.code == 3 and "did you mean" not in never_claimed.err


def test_a_bare_number_of_seconds_is_refused_where_days_were_likely_meant(forge: Forge) -> None:
    before = git("--git-dir", str(forge.path), "for-each-ref")
    run = assay("retire", "--older-than", "7", "--forge", forge.url)
    assert run.code == 2 and "'7' has no unit" in run.err and "write 7d for days" in run.err
    assert git("--git-dir", str(forge.path), "for-each-ref") == before
    assert assay("retire", "--older-than", "7d", "--dry-run", "--forge", forge.url).code == 0


def test_the_sweep_reports_an_overdue_claim_and_leaves_it_held(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "quiet", holder="quiet/elsewhere")
    now = time.time()
    first = assay("sweep", "--json", "--forge", forge.url, env={"ASSAY_SWEEP_NOW": str(now)})
    assert first.code == 0 and "overdue" not in first.out, first.err
    later = assay("sweep", "--json", "--forge", forge.url, env={"ASSAY_SWEEP_NOW": str(now + 200)})
    report = later.json()
    assert later.code == 0 and isinstance(report, dict), later.err
    found = [f for f in report["findings"] if f["kind"] == "overdue"]
    assert [f["brief"] for f in found] == ["alpha"] and found[0]["action"] == ""
    assert "has not renewed epoch 1 for 200s (heartbeat 60s; its lease of 600s runs on)" in found[0]["detail"]
    assert [c["state"] for c in listed("--forge", forge.url)] == ["held"]


def test_steering_says_when_the_agent_gets_it_and_a_done_brief_refuses_it(forge: Forge, claims: Claims) -> None:
    fresh = assay("steer", "alpha", "mind the cache", "--forge", forge.url)
    assert fresh.code == 0 and "the agent gets it on its first run" in fresh.out
    claims.claim("beta", "d")
    claims.claim("gamma", "d")
    claims.release("gamma", "d", outcome="done")
    before = git("--git-dir", str(forge.path), "for-each-ref")
    done = assay("steer", "gamma", "too late", "--forge", forge.url)
    assert done.code == 3 and "cannot steer brief 'gamma': its claim is done" in done.err
    assert git("--git-dir", str(forge.path), "for-each-ref") == before  # nothing written


def test_steering_a_brief_the_forge_does_not_know_is_refused(forge: Forge) -> None:
    before = git("--git-dir", str(forge.path), "for-each-ref")
    typo = assay("steer", "alpah", "mind the cache", "--forge", forge.url)
    assert typo.code == 2 and "alpah" in typo.err and "Traceback" not in typo.err
    assert "hint: did you mean 'alpha'? otherwise `assay briefs` lists" in typo.err
    assert git("--git-dir", str(forge.path), "for-each-ref") == before  # nothing written


def test_waking_a_brief_that_waits_on_its_review_says_what_that_means(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    parked = assay("wait", "alpha", "--on", "review", "--desk", "d", "--forge", forge.url)
    assert parked.code == 0, parked.err
    woken = assay("wake", "alpha", "--forge", forge.url)
    assert woken.code == 0 and "held again by desk d" in woken.out
    assert "it was waiting on its review; the review stays open" in woken.err
    assert [c["state"] for c in listed("--forge", forge.url)] == ["held"]


def test_the_audit_orders_events_of_one_second_by_epoch_and_sequence() -> None:
    """Clocks tick in whole seconds: a takeover, the journal entries after it and the release that ends it, all in
    one second, read in the order they happened, not grouped by where they are kept."""
    from assay.core.claims import Claim
    from assay.core.records import ClaimRecord, JournalEntry
    from assay.observe.audit import History, timeline

    at = "2026-12-01T10:00:00Z"
    def record(state: str, epoch: int) -> Claim:
        return Claim(ClaimRecord(brief="b", state=state, epoch=epoch, desk="d", holder="h", lease_s=600,
                                 branch="assay/b", at=at), f"{state}{epoch}".ljust(40, "0"))
    claims = [record("held", 1), record("expired", 1), record("held", 2), record("released", 2)]
    journal = [JournalEntry(seq=s, epoch=e, kind="note", at=at, run="r") for s, e in ((3, 2), (1, 1), (2, 1), (4, 2))]
    events = timeline(History("b", claims, sorted(journal, key=lambda j: j.seq), [], [], []))
    assert [ev.what.split()[0] for ev in events] == ["held", "#1", "#2", "expired", "held", "#3", "#4", "released"]


def test_completion_scripts_and_brief_and_desk_names(tmp_path: Path) -> None:
    for shell, mark in (("bash", "_assay_completion"), ("zsh", "#compdef assay"), ("fish", "complete --no-files")):
        run = assay("completion", shell)
        assert run.code == 0 and mark in run.out, (shell, run.out[:200])
    (tmp_path / ".git").mkdir()
    (tmp_path / "briefs").mkdir()
    (tmp_path / "desks").mkdir()
    for name in ("alpha", "alps", "beta"):
        (tmp_path / "briefs" / f"{name}.md").write_text("---\ntitle: x\n---\n")
    (tmp_path / "desks" / "claude.yaml").write_text("name: claude\n")

    def complete(words: str) -> list[str]:
        run = assay(env={"_ASSAY_COMPLETE": "bash_complete", "COMP_WORDS": words,
                         "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}, cwd=tmp_path)
        return [line.split(",", 1)[1] for line in run.out.splitlines() if line.startswith("plain,")]

    assert complete("assay journal al") == ["alpha", "alps"]
    assert complete("assay release beta --desk cl") == ["claude"]
    assert complete("assay desk run ") == ["claude"]
    assert "claims" in complete("assay cla")


def test_ctrl_c_on_a_desk_hands_its_brief_back_released_and_journaled(forge: Forge, tmp_path: Path) -> None:
    """Ctrl-C reaches the desk (and its agent) as SIGINT to the terminal's process group: the desk releases the
    brief with the reason in the claim chain and the journal, and says so, instead of leaving it held for a lease."""
    mark = tmp_path / "agent-started"
    os.mkfifo(mark)
    publish(forge, {"desks/patient.yaml": DESK_SLEEPY.format(mark=mark),
                    "briefs/slow.md": "---\ntitle: Slow\nlabels: [work]\n---\nTake your time.\n"})
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "patient", "--once", "--forge",
                             forge.url], env={**os.environ, **desk_env(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=_interruptible)
    try:
        said: list[str] = []
        heard = threading.Thread(target=lambda: said.append(mark.read_text()), daemon=True)
        heard.start()  # the agent says it started (through a FIFO): it works the brief under the desk's claim
        heard.join(timeout=60)
        assert said == ["started\n"], desk.poll()
        os.killpg(desk.pid, signal.SIGINT)
        out, _ = desk.communicate(timeout=60)
    finally:
        if desk.poll() is None:
            os.killpg(desk.pid, signal.SIGKILL)
    assert desk.returncode == 130, out
    assert "released slow (desk patient was interrupted (Ctrl-C))" in out
    chain = claim_chain(forge.path, "slow")
    assert chain[-1]["state"] == "released" and "interrupted (Ctrl-C)" in chain[-1]["reason"]
    assert any("interrupted (Ctrl-C)" in json.dumps(e) for e in entries(forge.path, "slow"))


def _interruptible() -> None:
    """As a terminal starts a command: SIGINT at its default, even when this test runs under `nohup` or `&`
    (which start it ignored, and an ignored SIGINT stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


DESK_SLEEPY = """name: patient
takes:
  labels: [work]
agent:
  command: [sh, -c, "echo started > {mark}; sleep 60"]
lease_s: 600
heartbeat_s: 60
attempts: 3
env_allow: [PATH, HOME]
"""


def test_review_show_has_the_files_the_diff_stat_and_the_verify_evidence(work: Forge, tmp_path: Path) -> None:
    """Whatever the brief's state: a blocked brief's draft review shows its branch's commits and failed runs."""
    publish(work, {"briefs/ship.md": brief_text("Ship", ["write ship.txt v1"], "grep -q v1 ship.txt"),
                   "briefs/stuck.md": brief_text("Stuck", ["write stuck.txt v1"], "grep -q v2 stuck.txt")})
    assert run_desk(work, "builder", tmp_path).code == 5  # a brief blocked: it needs a person
    assert work.claim_json("stuck")["state"] == "blocked"
    blocked = assay("review", "show", "stuck", "--json", "--forge", work.url).json()
    assert isinstance(blocked, dict) and blocked["state"] == "draft" and blocked["head"] == work.tip(
        "refs/heads/assay/stuck")
    assert blocked["files"] == [{"path": "stuck.txt", "added": 1, "deleted": 0}]
    assert [(v["row"], v["passed"]) for v in blocked["verify"]] == [("check", False)]
    text = assay("review", "show", "stuck", "--forge", work.url)
    assert "files changed: 1 (+1 -0)" in text.out and "0 of 1 rows passed" in text.out, text.out
    assert "+v1" in assay("review", "diff", "stuck", "--forge", work.url).out
    shown = assay("review", "show", "ship", "--json", "--forge", work.url).json()
    assert isinstance(shown, dict) and shown["state"] == "ready"
    assert shown["files"] == [{"path": "ship.txt", "added": 1, "deleted": 0}]
    assert (shown["added"], shown["deleted"]) == (1, 0)
    assert [(v["row"], v["passed"], v["command"]) for v in shown["verify"]] == [("check", True, "grep -q v1 ship.txt")]
    text = assay("review", "show", "ship", "--forge", work.url, env={"COLUMNS": "80"})
    assert text.code == 0 and "files changed: 1 (+1 -0)" in text.out and "1 of 1 rows passed" in text.out
    assert max(len(line.rstrip()) for line in text.out.splitlines()) <= 80
    patch = assay("review", "diff", "ship", "--forge", work.url)
    assert patch.code == 0 and "+++ b/ship.txt" in patch.out and "\n+v1" in patch.out

    said = assay("review", "comment", "ship", "looks right", "--json", "--forge", work.url).json()
    assert isinstance(said, dict) and [c["text"] for c in said["comments"]] == ["looks right"]
    approved = assay("review", "approve", "ship", "--json", "--forge", work.url, env={"ASSAY_PERSON": "rita"}).json()
    assert isinstance(approved, dict) and approved["approvals"] == ["rita"]
    merged = assay("review", "merge", "ship", "--json", "--forge", work.url).json()
    assert isinstance(merged, dict) and merged["state"] == "merged" and len(merged["merged_commit"]) == 40
    after = assay("review", "show", "ship", "--json", "--forge", work.url).json()
    assert isinstance(after, dict) and after["files"] == shown["files"]  # what it merged, not main's later state
    missing = assay("review", "show", "nothing", "--forge", work.url)
    assert missing.code == 2 and "has no review" in missing.err


def test_the_commands_that_change_a_claim_answer_in_json(forge: Forge, claims: Claims) -> None:
    claims.claim("alpha", "d")
    parked = assay("wait", "alpha", "--on", "manual", "--json", "--forge", forge.url).json()
    assert isinstance(parked, dict) and parked["state"] == "waiting" and parked["brief"] == "alpha"
    woken = assay("wake", "alpha", "--json", "--forge", forge.url).json()
    assert isinstance(woken, dict) and woken["state"] == "held" and woken["was"] == "manual"
    steered = assay("steer", "alpha", "mind the cache", "--json", "--forge", forge.url).json()
    assert isinstance(steered, dict) and steered["seq"] == entries(forge.path, "alpha")[-1]["seq"]
    assert "on its next run" in steered["when"] or "heartbeat" in steered["when"]


def test_a_filter_that_matches_nothing_says_which_and_how_many_there_are(forge: Forge, claims: Claims) -> None:
    """Not "no claims on this forge yet" on a forge that has some: the filter, and the count without it."""
    from assay.views import nothing_listed

    claims.claim("alpha", "one")
    claims.claim("beta", "two")
    none = assay("claims", "--state", "expired", "--forge", forge.url)
    assert none.code == 0 and "no claims with state expired (2 claims in all)" in none.out, none.out
    assert nothing_listed("claim", ("blocked", "done"), "one", 2, "") == \
        "no claims with state blocked or done of desk one (2 claims in all)"
    assert nothing_listed("claim", ("blocked",), None, 0, "on this forge yet") == "no claims on this forge yet"
    briefs = assay("briefs", "--desk", "nosuch", "--forge", forge.url)
    assert briefs.code == 0 and f"no briefs of desk nosuch ({len(BRIEF_IDS)} briefs in all)" in briefs.out
    history = assay("claim", "history", "alpha", "--desk", "two", "--forge", forge.url)
    assert "no custody records of desk two (1 custody record in all)" in history.out, history.out
    report = assay("report", "--desk", "nosuch", "--forge", forge.url)
    assert report.code == 2 and "no desk 'nosuch' on this forge" in report.err and "Traceback" not in report.err
    assert assay("report", "--desk", "two", "--forge", forge.url).code == 0  # it held a claim: known, no work yet


def test_claim_history_says_why_custody_changed_as_the_board_does(forge: Forge, claims: Claims) -> None:
    """A takeover records no reason; the history derives it from the record before, as the board's custody does."""
    from assay.observe.board import _custody

    claims.claim("alpha", "one", holder="one/gone-host")
    claims.claim("alpha", "one", singleton=True, holder="one/this-host")
    claims.release("alpha", "one", reason="handed back")
    shown = assay("claim", "history", "alpha", "--json", "--forge", forge.url).json()
    assert isinstance(shown, dict)
    whys = [h["why"] for h in shown["history"]]
    assert whys == ["first claimed", "desk one took over its own claim after a restart", "handed back"]
    assert [r["why"] for r in _custody(claims.history("alpha"), {})] == whys
    text = assay("claim", "history", "alpha", "--forge", forge.url, env={"COLUMNS": "200"})
    assert "took over its own claim after a restart" in text.out, text.out


def test_a_person_without_user_is_named_as_git_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """No $USER (cron, a container): git's user.name, else its user.email, else the account's login name."""
    import pwd

    from assay.lean import person

    for name in ("ASSAY_PERSON", "USER", "LOGNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "2")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "Grace Hopper")
    monkeypatch.setenv("GIT_CONFIG_KEY_1", "user.email")
    monkeypatch.setenv("GIT_CONFIG_VALUE_1", "grace@example.invalid")
    assert person() == "Grace Hopper"
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.abbrev")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "12")
    assert person() == "grace@example.invalid"
    monkeypatch.setenv("GIT_CONFIG_COUNT", "0")
    assert person() == pwd.getpwuid(os.getuid()).pw_name != "a-person"
    monkeypatch.setenv("LOGNAME", "ada")
    assert person() == "ada"
