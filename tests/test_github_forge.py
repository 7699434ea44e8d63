"""What only GitHub has (the review port's contract runs on both forges in tests/test_review_contract.py): faults
settled without a lost or duplicated write, rate limits waited out, and desks working briefs into pull
requests with claims and journals pushed over git's smart HTTP, the token nowhere it should not be."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.errors import Fenced, ForgeDenied, ForgeError, Throttled
from tests.conftest import Forge, assay
from tests.fakegithub import FakeGitHub, Fault
from tests.helpers.desks import brief, publish
from tests.helpers.github import DESK, NAME, OWNER, World, github_repo, github_reviews

# -- faults, limits, calls ----------------------------------------------------------------------------------

@pytest.fixture
def fake(forge: Forge, tmp_path: Path) -> Iterator[tuple[FakeGitHub, World]]:
    with FakeGitHub(tmp_path) as gh:
        url = github_repo(gh, forge.seed)
        yield gh, World(github_reviews(gh), url, forge.seed, gh.git_env())
        assert gh.schema_problems() == []


def test_a_dropped_connection_after_the_pull_request_was_made_leaves_one(fake: tuple[FakeGitHub, World]) -> None:
    gh, w = fake
    head = w.push_branch("alpha")
    gh.faults.arm("POST", r"/pulls$", Fault.DROP_AFTER_WRITE)
    opened = w.reviews.open("alpha", "assay/alpha", "Alpha", head)
    assert opened.state == "draft"
    assert len(gh.pulls(OWNER, NAME)) == 1  # read back, not created twice


def test_a_retried_create_that_answers_already_exists_is_read_back(fake: tuple[FakeGitHub, World]) -> None:
    gh, w = fake
    head = w.push_branch("alpha")
    gh.faults.arm("POST", r"/pulls$", Fault.BAD_GATEWAY)  # a 502 ... and the create is tried again
    assert w.reviews.open("alpha", "assay/alpha", "Alpha", head).state == "draft"
    assert len(gh.pulls(OWNER, NAME)) == 1
    gh.faults.arm("GET", r"/pulls$", Fault.BAD_GATEWAY)  # a read that fails once is tried again
    assert w.reviews.open("alpha", "assay/alpha", "Alpha", head).state == "draft"
    assert len(gh.pulls(OWNER, NAME)) == 1


@pytest.mark.parametrize("fault", [Fault.SECONDARY_RATE_LIMIT, Fault.TOO_MANY_REQUESTS])
def test_rate_limits_are_waited_out_visibly(fake: tuple[FakeGitHub, World], fault: Fault) -> None:
    gh, w = fake
    said: list[str] = []
    slept: list[float] = []
    reviews = github_reviews(gh, said, slept)
    head = w.push_branch("alpha")
    gh.faults.arm("POST", r"/pulls$", fault, retry_after=7)
    assert reviews.open("alpha", "assay/alpha", "Alpha", head).state == "draft"
    assert slept[0] == 7 and any("rate limit" in s and "7s" in s for s in said), (said, slept)
    assert len(gh.pulls(OWNER, NAME)) == 1


def test_a_spent_primary_limit_far_away_is_an_error_not_a_hang(fake: tuple[FakeGitHub, World]) -> None:
    gh, w = fake
    head = w.push_branch("alpha")
    slept: list[float] = []
    reviews = github_reviews(gh, slept=slept)
    armed = gh.faults.arm("POST", r"/pulls$", Fault.PRIMARY_RATE_LIMIT)
    try:
        reviews.open("alpha", "assay/alpha", "Alpha", head)
    except Exception as exc:  # a reset beyond the cap is reported, never slept through
        assert "rate limit" in str(exc)
        assert gh.pulls(OWNER, NAME) == []
    else:  # the fake's reset was near: waited out, and then made once
        assert slept and len(gh.pulls(OWNER, NAME)) == 1
    assert armed is not None


def test_labels_and_statuses_are_set_once(fake: tuple[FakeGitHub, World]) -> None:
    gh, w = fake
    head = w.push_branch("alpha")
    reviews = github_reviews(gh)
    opened = reviews.open("alpha", "assay/alpha", "Alpha", head)
    number = int(opened.sha.split("/")[1])
    for _ in range(2):
        reviews.label("alpha", "draft", "builder")
    assert sorted(gh.labels(OWNER, NAME, number)) == ["assay:draft", "desk:builder"]
    reviews.mark_ready("alpha", head)
    reviews.label("alpha", "ready", "builder")
    assert sorted(gh.labels(OWNER, NAME, number)) == ["assay:ready", "desk:builder"]
    row = {"row": "tests", "passed": True, "exit_code": 0, "expect_exit": 0, "duration_ms": 12,
           "output_sha256": "ab" * 32}
    rows = [row, {**row, "row": "lint", "passed": False, "exit_code": 1}]
    for _ in range(2):
        reviews.post_statuses("alpha", head, rows, 1)
    [posted] = gh.statuses(OWNER, NAME, head)  # one status for every row: one content-creating request
    assert (posted.context, posted.state) == ("assay/verify", "failure")
    assert (posted.description or "").startswith("1 of 2 rows passed (failed: lint); evidence ")
    reviews.post_statuses("alpha", head, [rows[0], {**rows[1], "passed": True, "exit_code": 0}], 1)
    assert [s.state for s in gh.statuses(OWNER, NAME, head)] == ["failure", "success"]  # the row passed on a rerun
    assert reviews.calls["status"] == 2


# -- desks on GitHub, end to end -------------------------------------------------------------------



def test_desks_work_briefs_into_pull_requests_on_github(forge: Forge, tmp_path: Path) -> None:
    publish(forge, {"desks/builder.yaml": DESK,
                    "briefs/alpha.md": brief("Alpha", ["write alpha.txt hi"], "test -f alpha.txt"),
                    "briefs/beta.md": brief("Beta", ["write beta.txt hi"], "test -f beta.txt", deps="alpha")})
    with FakeGitHub(tmp_path) as gh:
        url = github_repo(gh, forge.seed)
        env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": gh.api_url, "GITHUB_TOKEN": gh.token,
               "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
        outputs: list[str] = []

        def desk_pass() -> None:
            done = assay("desk", "run", "builder", "--once", env=env, timeout=180)
            outputs.append(done.out + done.err)
            assert done.code == 0, done.err

        for brief_id in ("alpha", "beta"):
            desk_pass()  # claim, branch, draft pull request, agent, push, verify, statuses, ready
            pulls = [p for p in gh.pulls(OWNER, NAME) if p.head == f"assay/{brief_id}"]
            assert len(pulls) == 1, outputs
            [pull] = pulls
            assert not pull.draft and pull.state == "open"
            assert {s.context: s.state for s in gh.statuses(OWNER, NAME, pull.head_sha)} == \
                {"assay/verify": "success"}
            assert "assay:ready" in gh.labels(OWNER, NAME, pull.number)
            gh.merge(OWNER, NAME, pull.number)  # a person merges it on GitHub
            desk_pass()  # sees the merge: done
        assert len(gh.pulls(OWNER, NAME)) == 2  # exactly one pull request per brief
        claims = assay("claims", "--json", env=env)
        assert claims.code == 0, claims.err
        assert {c["brief"]: c["state"] for c in json.loads(claims.out)["claims"]} == {"alpha": "done", "beta": "done"}
        # the token: in no output, no record on the forge, no journal
        repo_path = gh.repo(OWNER, NAME).path
        objects = subprocess.run(["git", "--git-dir", str(repo_path), "cat-file", "--batch-all-objects", "--batch"],
                                 capture_output=True, check=True).stdout
        assert gh.token.encode() not in objects
        assert not [o for o in outputs if gh.token in o]
        assert gh.git_requests["git-receive-pack"] > 0  # claims and journals went over git, not the API
        audited = assay("audit", "--all", "--json", env=env)
        views = audited.json()
        assert audited.code == 0 and isinstance(views, list), audited.err
        assert {v["brief"]: v["passed"] for v in views} == {"alpha": True, "beta": True}


def test_a_wait_githubs_limits_ask_for_pauses_the_run_and_spends_no_attempt(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    """A secondary limit asking for an hour, longer than a desk may wait holding its claim: the run ends paused,
    not dead, so a desk allowed one attempt works the brief to its review on its next run, not blocks it."""
    publish(forge, {"desks/builder.yaml": DESK + "attempts: 1\n",
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    fake_github.faults.arm("POST", r"/statuses/", Fault.SECONDARY_RATE_LIMIT, retry_after=3600)
    paused = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert paused.code == ForgeError.code and "gh paused: GitHub's rate limit stops" in paused.out, paused.out
    claims = assay("claims", "--json", env=env).json()
    assert isinstance(claims, dict), claims
    [claim] = claims["claims"]  # handed back (nothing renews it while the brief rests), not left to expire
    assert claim["state"] == "released", claim
    again = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert again.code == 0 and "review ready" in again.out, again.out + again.err
    [pull] = fake_github.pulls(OWNER, NAME)
    assert [s.context for s in fake_github.statuses(OWNER, NAME, pull.head_sha)] == ["assay/verify"]


def running_env(forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ASSAY_FORGE": github_repo(fake_github, forge.seed), "ASSAY_GITHUB_API": fake_github.api_url,
            "GITHUB_TOKEN": fake_github.token, "ASSAY_STATE_DIR": str(tmp_path / "state"),
            "ASSAY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}


def running_desk(env: dict[str, str]) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """`assay desk run builder --poll 0.1` in a session of its own, and the lines it says, as it says them."""
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--poll", "0.1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()

    def heard() -> None:
        for line in desk.stdout or ():
            lines.put(line)

    threading.Thread(target=heard, daemon=True).start()
    return desk, lines


def test_a_desk_githubs_limit_stops_waits_as_asked_before_it_looks_again(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    """A limit asking an hour stops a running desk's look at its waiting brief's pull request: the desk says so
    and waits, rather than asking GitHub again at every poll (each ask spent while limited, which GitHub answers
    by banning the token for longer)."""
    publish(forge, {"desks/builder.yaml": DESK, "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    env = running_env(forge, fake_github, tmp_path)
    assert assay("desk", "run", "builder", "--once", env=env, timeout=180).code == 0  # it waits on its review
    armed = fake_github.faults.arm("GET", r"/pulls", Fault.SECONDARY_RATE_LIMIT, times=10_000, retry_after=3600)
    desk, lines = running_desk(env)
    try:
        said, deadline = "", time.monotonic() + 120
        while "looking again in 3600s" not in said:
            said = lines.get(timeout=max(0.0, deadline - time.monotonic()))  # queue.Empty: it never said so
        fired = armed.fired
        assert fired >= 1 and "rate limit" in said, said
        time.sleep(3)  # a span with no ask: polling every 0.1 s, it asked again at every pass (about 20 times)
        assert armed.fired == fired and desk.poll() is None
    finally:
        os.killpg(desk.pid, signal.SIGKILL)
        desk.wait()


def test_a_desk_waiting_out_githubs_limit_sweeps_each_heartbeat_meanwhile(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    """An hour's wait GitHub's limit asks of a desk is no hour without a sweep: a claim whose desk died during the
    wait is expired by the waiting desk's sweep (it reads only the forge); GitHub is asked nothing meanwhile, no
    brief is claimed, and the wait is said once, not each heartbeat."""
    beating = DESK + "heartbeat_s: 1\nlease_s: 2\n"
    publish(forge, {"desks/builder.yaml": beating, "sweepers/default.yaml": "name: default\nexpire:\n  grace_s: 0\n",
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt"),
                    "briefs/other.md": brief("Other", ["write o.txt hi"], "test -f o.txt")})
    env = running_env(forge, fake_github, tmp_path)
    assert assay("desk", "run", "builder", "--once", "--max-briefs", "1", env=env, timeout=180).code == 0
    armed = [fake_github.faults.arm(method, r".", Fault.SECONDARY_RATE_LIMIT, times=10_000, retry_after=3600)
             for method in ("GET", "POST", "PATCH", "PUT", "DELETE")]  # every request to the API, counted
    desk, lines = running_desk(env)
    try:
        said, deadline = [""], time.monotonic() + 120
        while "looking again in 3600s" not in said[-1]:
            said.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))  # queue.Empty: it never said so
        fired = sum(a.fired for a in armed)
        assert assay("claim", "other", "--desk", "ghost", "--lease", "2", env=env).code == 0  # its process is gone
        while not (": sweep: " in said[-1] and "other" in said[-1]):  # the old desk slept the hour through
            said.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))  # queue.Empty: no sweep came
        assert "expire" in said[-1], said[-1]
        claims = assay("claims", "--json", env=env).json()
        assert isinstance(claims, dict), claims
        assert {c["brief"]: c["state"] for c in claims["claims"]}.get("other") == "expired", claims
        assert not any("claimed" in line for line in said), said  # nor was the expired brief taken meanwhile
        assert sum("looking again in" in line for line in said) == 1, said
        assert sum(a.fired for a in armed) == fired and desk.poll() is None
    finally:
        os.killpg(desk.pid, signal.SIGKILL)
        desk.wait()


def test_a_desk_whose_run_githubs_limit_paused_claims_no_other_brief_before_the_wait_is_over(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path) -> None:
    """The limits are the token's: a desk whose run paused on one claims none of its other ready briefs meanwhile
    (each would pause at its first call to GitHub and hand its claim back: a claim and a journal for nothing)."""
    publish(forge, {"desks/builder.yaml": DESK, "briefs/gh1.md": brief("Gh1", ["write a.txt hi"], "test -f a.txt"),
                    "briefs/gh2.md": brief("Gh2", ["write b.txt hi"], "test -f b.txt")})
    env = running_env(forge, fake_github, tmp_path)
    fake_github.faults.arm("POST", r"/statuses/", Fault.SECONDARY_RATE_LIMIT, retry_after=3600)
    desk, lines = running_desk(env)
    try:
        said, deadline = [""], time.monotonic() + 120
        while "looking again in" not in said[-1]:  # the old desk went on to the next brief and never said so
            said.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))  # queue.Empty: it never did
        assert any("paused: GitHub's rate limit" in line for line in said), said
        claims = assay("claims", "--json", env=env).json()
        assert isinstance(claims, dict), claims
        assert [(c["brief"], c["state"]) for c in claims["claims"]] == [("gh1", "released")], claims
        assert desk.poll() is None
    finally:
        os.killpg(desk.pid, signal.SIGKILL)
        desk.wait()


@pytest.mark.parametrize("point", ["step.after-execute:review", "step.after-execute:statuses",
                                   "step.before-execute:ready", "step.after-execute:ready"])
def test_a_desk_killed_between_a_github_write_and_its_result_resumes_without_duplicates(
        forge: Forge, fake_github: FakeGitHub, tmp_path: Path, point: str) -> None:
    publish(forge, {"desks/builder.yaml": DESK,
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    url = github_repo(fake_github, forge.seed)
    env = {"ASSAY_FORGE": url, "ASSAY_GITHUB_API": fake_github.api_url, "GITHUB_TOKEN": fake_github.token,
           "ASSAY_STATE_DIR": str(tmp_path / "state"), "ASSAY_CACHE_DIR": str(tmp_path / "cache")}
    crashed = assay("desk", "run", "builder", "--once", env={**env, "ASSAY_CRASH_AT": point}, timeout=180)
    assert crashed.code == -signal.SIGKILL, crashed.err
    again = assay("desk", "run", "builder", "--once", env=env, timeout=180)
    assert again.code == 0 and "review ready" in again.out, again.err
    [pull] = fake_github.pulls(OWNER, NAME)
    assert not pull.draft
    assert [s.context for s in fake_github.statuses(OWNER, NAME, pull.head_sha)] == ["assay/verify"]
    assert sorted(fake_github.labels(OWNER, NAME, pull.number)) == ["assay:ready", "desk:builder"]
    fake_github.merge(OWNER, NAME, pull.number)
    assert assay("desk", "run", "builder", "--once", env=env, timeout=180).code == 0
    audited = assay("audit", "gh", "--json", env=env)
    view = audited.json()
    assert isinstance(view, dict), audited.err
    assert audited.code == 0, [c for c in view["checks"] if not c["passed"]]


def test_comments_reviews_statuses_and_labels_survive_a_dropped_answer_without_duplicates(
        fake: tuple[FakeGitHub, World]) -> None:
    gh, w = fake
    head = w.push_branch("alpha")
    reviews = github_reviews(gh)
    number = int(reviews.open("alpha", "assay/alpha", "Alpha", head).sha.split("/")[1])
    gh.faults.arm("POST", r"/issues/\d+/comments$", Fault.DROP_AFTER_WRITE)
    reviews.comment("alpha", "ana", "looks right")
    assert [c.body.split("\n")[0] for c in gh.comments(OWNER, NAME, number)] == ["looks right"]
    row = {"row": "tests", "passed": True, "exit_code": 0, "expect_exit": 0, "duration_ms": 12,
           "output_sha256": "ab" * 32}
    gh.faults.arm("POST", r"/statuses/", Fault.DROP_AFTER_WRITE)
    reviews.post_statuses("alpha", head, [row], 1)
    reviews.post_statuses("alpha", head, [row], 2)  # the step resumed by the next epoch after a crash: nothing more
    assert [(s.context, (s.description or "").rpartition("; ")[2]) for s in gh.statuses(OWNER, NAME, head)] == [
        ("assay/verify", "epoch 1")]
    reviews.label("alpha", "draft", "builder")
    gh.faults.arm("PUT", r"/labels$", Fault.DROP_AFTER_WRITE)
    reviews.label("alpha", "ready", "builder")
    assert sorted(gh.labels(OWNER, NAME, number)) == ["assay:ready", "desk:builder"]


@pytest.mark.parametrize("fault", [Fault.DROP_AFTER_WRITE, Fault.BAD_GATEWAY])
def test_a_close_after_a_lost_answer_posts_its_comment_once(fake: tuple[FakeGitHub, World], fault: Fault) -> None:
    gh, w = fake
    head = w.push_branch("alpha")
    reviews = github_reviews(gh)
    number = int(reviews.open("alpha", "assay/alpha", "Alpha", head).sha.split("/")[1])
    gh.faults.arm("POST", r"/issues/\d+/comments$", fault)
    closed = reviews.close("alpha", "ana", "superseded by beta")
    assert closed.record.state == "closed"
    assert [c.body.split("\n")[0] for c in gh.comments(OWNER, NAME, number)] == ["Closed by ana: superseded by beta"]


def test_a_pull_request_a_lagging_list_leaves_out_is_read_by_its_number(fake: tuple[FakeGitHub, World]) -> None:
    """Right after it is opened, GitHub's lists may not show a pull request yet (replicas lag): it is read by its
    number, never taken for gone (a desk would have blocked the brief as closed by a person)."""
    gh, w = fake
    head = w.push_branch("alpha")
    reviews = github_reviews(gh)
    number = int(reviews.open("alpha", "assay/alpha", "Alpha", head).sha.split("/")[1])
    gh.faults.arm("GET", r"/pulls$", Fault.STALE_LIST, times=5)
    reviews.label("alpha", "draft", "builder")
    seen = reviews.peek("alpha")
    assert seen is not None and seen.record.state == "draft"
    assert sorted(gh.labels(OWNER, NAME, number)) == ["assay:draft", "desk:builder"]


def test_graphqls_rate_limit_is_waited_out_not_called_a_permission_problem(fake: tuple[FakeGitHub, World]) -> None:
    gh, w = fake
    said: list[str] = []
    slept: list[float] = []
    reviews = github_reviews(gh, said, slept)
    head = w.push_branch("alpha")
    reviews.open("alpha", "assay/alpha", "Alpha", head)
    gh.faults.arm("POST", r"/graphql$", Fault.GRAPHQL_RATE_LIMITED)
    with pytest.raises(ForgeError) as raised:  # the fake's limit resets in an hour: past the wait's cap
        reviews.mark_ready("alpha", head)
    assert "GitHub's rate limit stops marking the pull request ready: it resets in" in raised.value.message
    assert "permissions" not in raised.value.hint and not slept
    with pytest.raises(Throttled):  # asked again by the same command before the hour: refused unasked
        reviews.mark_ready("alpha", head)
    assert github_reviews(gh).mark_ready("alpha", head).record.state == "ready"  # a later one, the limit back


def test_a_rate_limit_waited_out_renews_the_claim_and_a_lost_claim_stops_the_write(
        fake: tuple[FakeGitHub, World]) -> None:
    """A desk waiting out GitHub's rate limit renews its claim every half minute and once more before it writes;
    if the claim was taken meanwhile the renewal fails and the write is never made (it used to be made late,
    after another desk had made it). The wait is also bounded below the lease."""
    gh, w = fake
    slept: list[float] = []
    reviews = github_reviews(gh, slept=slept)
    head = w.push_branch("alpha")
    renewals: list[int] = []
    reviews.hold(lambda: renewals.append(1), 400)
    gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, retry_after=70)
    reviews.open("alpha", "assay/alpha", "Alpha", head)
    assert slept == [30, 30, 10] and len(renewals) == 4 and len(gh.pulls(OWNER, NAME)) == 1

    def fenced() -> None:
        raise Fenced("beta", "builder", 1, "the claim is held by desk 'other' at epoch 2")
    reviews.hold(fenced, 400)
    head = w.push_branch("beta")
    gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, retry_after=70)
    with pytest.raises(Fenced):
        reviews.open("beta", "assay/beta", "Beta", head)
    assert [p for p in gh.pulls(OWNER, NAME) if p.head == "assay/beta"] == []
    reviews.hold(lambda: None, 60)  # a wait longer than the bound is an error, not a sleep past the lease
    armed = gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, times=2, retry_after=70)
    with pytest.raises(ForgeError, match="resets in 70s"):
        reviews.open("beta", "assay/beta", "Beta", head)
    made = sum(reviews.calls.values())
    with pytest.raises(Throttled, match=r"resets in (69|70)s"):  # nor asked again before then: no request at all
        reviews.peek("alpha")
    assert armed.fired == 1 and sum(reviews.calls.values()) == made
    reviews = github_reviews(gh, slept=slept)  # a new command, its own count of the waits
    reviews.hold(lambda: None, 100)  # and the waits of one call add up to the bound at most (not one per try)
    armed.remaining = 0
    gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, times=3, retry_after=40)
    del slept[:]
    with pytest.raises(ForgeError, match="resets in 40s, after 80s of waiting"):
        reviews.open("beta", "assay/beta", "Beta", head)
    assert sum(slept) == 80 and [p for p in gh.pulls(OWNER, NAME) if p.head == "assay/beta"] == []


def test_a_desk_waiting_out_a_limit_renews_its_claim_at_its_own_heartbeat(fake: tuple[FakeGitHub, World]) -> None:
    """A desk beating every 5 s renews every 5 s while it waits (every 30 s, the sweep called it overdue: three
    heartbeats missed, a false alarm while it was alive and waiting as GitHub asked)."""
    gh, w = fake
    slept: list[float] = []
    reviews = github_reviews(gh, slept=slept)
    renewals: list[int] = []
    reviews.hold(lambda: renewals.append(1), 400, every_s=5)
    gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, retry_after=12)
    reviews.open("alpha", "assay/alpha", "Alpha", w.push_branch("alpha"))
    assert slept == [5, 5, 2] and len(renewals) == 4 and len(gh.pulls(OWNER, NAME)) == 1


def test_a_wait_after_a_run_renews_nothing_of_its_claim(fake: tuple[FakeGitHub, World]) -> None:
    """A desk's run holds its claim's renewal for the waits of its calls; once the run is over (its brief handed
    back, or waiting on its review) a wait of the same port, for another brief, renews nothing of it: that claim
    may be another desk's by then, and its renewal failing would stop a call it has nothing to do with."""
    gh, w = fake
    slept: list[float] = []
    reviews = github_reviews(gh, slept=slept)
    renewed: list[str] = []
    with reviews.hold(lambda: renewed.append("alpha"), 400):
        with reviews.hold(lambda: renewed.append("inner"), 400):
            pass
        gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, retry_after=12)
        reviews.open("alpha", "assay/alpha", "Alpha", w.push_branch("alpha"))
    assert renewed == ["alpha", "alpha"]  # the outer hold again once the inner's block ended
    gh.faults.arm("POST", r"/pulls$", Fault.SECONDARY_RATE_LIMIT, retry_after=12)
    reviews.open("beta", "assay/beta", "Beta", w.push_branch("beta"))
    assert renewed == ["alpha", "alpha"] and slept == [12, 12] and len(gh.pulls(OWNER, NAME)) == 2


def test_a_read_the_token_may_not_make_names_the_permission_to_add(fake: tuple[FakeGitHub, World]) -> None:
    """A 403 that is no rate limit is a permission the token lacks: as GitHub names it
    (`X-Accepted-GitHub-Permissions`), else as the read needs; not waited out, not retried."""
    gh, w = fake
    head = w.push_branch("alpha")
    w.reviews.open("alpha", "assay/alpha", "Alpha", head)
    slept: list[float] = []
    reviews = github_reviews(gh, slept=slept)
    gh.faults.arm("GET", r"/check-runs$", Fault.NOT_ACCESSIBLE, accepted="checks=read")
    with pytest.raises(ForgeDenied) as named:
        reviews.checks("alpha")
    assert named.value.needs == "checks=read" and "`checks: read`" in named.value.hint
    assert "Checks: read" in named.value.hint and "403" in named.value.message and slept == []
    gh.faults.arm("GET", r"/status$", Fault.NOT_ACCESSIBLE)  # GitHub names nothing: the read's own need
    with pytest.raises(ForgeDenied) as unnamed:
        reviews.checks("alpha")
    assert "`statuses: read`" in unnamed.value.hint and "Commit statuses: read" in unnamed.value.hint


@pytest.mark.parametrize("fault", [Fault.NOT_FOUND, Fault.NOT_ACCESSIBLE])
def test_a_permission_read_without_an_answer_is_no_verdict(fake: tuple[FakeGitHub, World], fault: Fault) -> None:
    gh, _ = fake
    gh.grant(OWNER, NAME, "alice")
    reviews = github_reviews(gh)
    gh.faults.arm("GET", r"/collaborators/alice/permission$", fault)
    assert reviews.can_write("alice") is None  # neither yes nor no, and not remembered
    assert reviews.can_write("alice") is True
    gh.person("bob")
    assert reviews.can_write("bob") is False  # GitHub's answer for someone without access: read
