"""The artifact, not the source: build the wheel, install it in a fresh venv, run `assay` from there."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from tests.conftest import REPO, Forge, assay, git
from tests.fakegithub import FakeGitHub
from tests.fakegithub.webhooks import payloads
from tests.fakegithub.webhooks.validate import problems as webhook_problems
from tests.helpers.desks import DESK, brief, publish
from tests.helpers.github import NAME, OWNER, github_repo
from tests.helpers.workflows import run_workflow_steps


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel, built from this checkout, and a fresh venv with it installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                   check=True, capture_output=True)
    wheel = next(dist.glob("assay_desks-*.whl"))  # the distribution's name: ours
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, capture_output=True)
    return wheel, venv


@pytest.mark.slow
def test_wheel_installs_and_runs(installed: tuple[Path, Path], tmp_path: Path) -> None:
    wheel, venv = installed
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("assay/_defaults/desks/scripted.yaml", "assay/_defaults/sweepers/default.yaml",
                    "assay/_defaults/board/board.css", "assay/_defaults/workflows/sweep.yml",
                    "assay/_defaults/workflows/verify.yml", "assay/_defaults/workflows/board.yml", "assay/cli.py"):
        assert shipped in names
    exe = str(venv / "bin" / "assay")
    work = tmp_path / "project"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)

    init = run("init", "--local-forge", str(tmp_path / "forge.git"))
    assert init.returncode == 0, init.stderr
    assert (work / "desks" / "scripted.yaml").is_file()
    assert run("claim", "hello", "--desk", "builder").returncode == 0
    listing = json.loads(run("claims", "--json").stdout)
    assert [(c["brief"], c["state"], c["desk"]) for c in listing["claims"]] == [("hello", "held", "builder")]
    on_forge = json.loads(git("--git-dir", str(tmp_path / "forge.git"), "show", "refs/assay/claims/hello:claim.json"))
    assert on_forge["holder"] == listing["claims"][0]["holder"]
    assert run("--version").stdout.startswith("assay, version")
    demo = run("demo", "--dir", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stderr
    assert "all 6 briefs done" in demo.stdout
    crashed = run("demo", "--dir", str(tmp_path / "crash"), "--crash-at", "step.after-execute:deploy")
    assert crashed.returncode == 0 and "crash injected at step.after-execute:deploy" in crashed.stdout
    recovered = run("demo", "--dir", str(tmp_path / "crash"))
    assert recovered.returncode == 0, recovered.stderr
    assert "Outcome unknown" in recovered.stdout and "Operation will NOT be replayed automatically" in recovered.stdout
    assert (tmp_path / "crash" / "effects.log").read_text().count("deployed rate-limit") == 1


@pytest.mark.slow
def test_the_sweep_workflow_runs_as_written_against_a_local_forge(installed: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    """The `run:` steps of .github/workflows/sweep.yml, with the installed wheel, against a forge at the
    path the workflow's own expressions name: a dead desk's claim is expired by the second sweep, the job
    summary is written, and the token reaches neither a log nor the forge."""
    wheel, venv = installed
    server = tmp_path / "github"
    forge = server / "owner" / "repo.git"
    git("init", "-q", "--bare", "--initial-branch=main", str(forge))
    seed = tmp_path / "seed"
    git("init", "-q", "--initial-branch=main", str(seed))
    (seed / "briefs").mkdir()
    (seed / "briefs" / "ship.md").write_text("---\ntitle: Ship it\n---\nShip it.\n")
    (seed / "sweepers").mkdir()
    (seed / "sweepers" / "default.yaml").write_text("name: default\nexpire:\n  grace_s: 0\n")
    git("add", "-A", cwd=seed)
    git("commit", "-q", "-m", "briefs", cwd=seed)
    git("push", "-q", str(forge), "HEAD:refs/heads/main", cwd=seed)
    port = ForgeGit(str(forge))
    Claims(port).claim("ship", "laptop", lease_s=1, holder="laptop/far-away-host/4242/beef")
    port.close()

    token = "ghs_" + "T0kenThatMustNeverShow" * 2
    summary = tmp_path / "summary.md"
    contexts = {"inputs.assay-package": str(wheel), "github.token": token, "github.server_url": f"file://{server}",
                "github.repository": "owner/repo"}
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "ASSAY_CACHE_DIR": str(tmp_path / "runner-cache"), "GITHUB_STEP_SUMMARY": str(summary),
           "RUNNER_TEMP": str(tmp_path)}
    logs = []
    for now in (1_900_000_000, 1_900_000_005):  # the sweeper's clock: first sight, then past the lease
        logs += run_workflow_steps(REPO / ".github" / "workflows" / "sweep.yml", "sweep", contexts,
                                   {**env, "ASSAY_SWEEP_NOW": str(now)})
    claim = json.loads(git("--git-dir", str(forge), "show", "refs/assay/claims/ship:claim.json"))
    assert claim["state"] == "expired" and claim["epoch"] == 1
    assert summary.read_text().count("Assay sweep") == 2 and "ship" in summary.read_text()
    header = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    for proc in logs:
        assert token not in proc.stdout + proc.stderr and header not in proc.stdout + proc.stderr
    objects = subprocess.run(["git", "--git-dir", str(forge), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True, check=True).stdout
    assert token.encode() not in objects and header.encode() not in objects
    assert token not in summary.read_text()


@pytest.mark.slow
def test_the_board_workflow_builds_as_written_against_the_fake_github(installed: tuple[Path, Path], forge: Forge,
                                                                      fake_github: FakeGitHub,
                                                                      tmp_path: Path) -> None:
    """The build job's `run:` steps of .github/workflows/board.yml, with the installed wheel, against the fake
    GitHub at the address the workflow's own expressions name: the site lists a brief a real desk worked into
    a pull request, linked to it, and the token reaches neither a log nor a built file."""
    wheel, venv = installed
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    github_repo(fake_github, forge.seed)
    desk = assay("desk", "run", "builder", "--once", timeout=180,
                 env={"ASSAY_FORGE": fake_github.git_url(OWNER, NAME), "ASSAY_GITHUB_API": fake_github.api_url,
                      "GITHUB_TOKEN": fake_github.token, "ASSAY_STATE_DIR": str(tmp_path / "state"),
                      "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log")})
    assert desk.code == 0 and "review ready" in desk.out, desk.err
    [pull] = fake_github.pulls(OWNER, NAME)
    asked = urllib.request.Request(f"{fake_github.api_url}/repos/{OWNER}/{NAME}/pulls/{pull.number}",
                                   headers={"Authorization": f"token {fake_github.token}"})
    with urllib.request.urlopen(asked, timeout=30) as answer:
        html_url = json.load(answer)["html_url"]  # the pull request's own web address, as GitHub gives it

    token = fake_github.token
    runner = tmp_path / "runner"
    runner.mkdir()
    summary = tmp_path / "summary.md"
    web = fake_github.git_url(OWNER, NAME).removesuffix(f"/{OWNER}/{NAME}.git")
    contexts = {"inputs.assay-package": str(wheel), "github.token": token, "github.server_url": web,
                "github.repository": f"{OWNER}/{NAME}"}
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "ASSAY_CACHE_DIR": str(tmp_path / "runner-cache"), "GITHUB_STEP_SUMMARY": str(summary),
           "RUNNER_TEMP": str(tmp_path),
           # the fake is on another host than github.com, so it is named as GitHub Enterprise is
           "ASSAY_GITHUB_API": fake_github.api_url}
    before = fake_github.git_requests["git-upload-pack"]
    logs = run_workflow_steps(REPO / ".github" / "workflows" / "board.yml", "build", contexts, env, cwd=runner)
    assert [proc.returncode for proc in logs] == [0, 0]  # Install Assay, Build the board
    assert fake_github.git_requests["git-upload-pack"] > before  # git read the forge, with the token as a header

    site = runner / "assay-board"  # the folder upload-pages-artifact publishes
    assert (site / "index.html").is_file() and (site / "briefs" / "gh.html").is_file()
    board = json.loads((site / "board.json").read_text())
    assert board["forge"] == f"{web}/{OWNER}/{NAME}.git"
    [card] = [c for c in board["briefs"] if c["id"] == "gh"]
    assert card["state"] == "waiting" and card["review"]["state"] == "ready"
    assert card["review"]["link"] == html_url == f"{web}/{OWNER}/{NAME}/pull/{pull.number}"
    assert f'href="{html_url}"' in (site / "briefs" / "gh.html").read_text()
    assert "### Assay board (7 briefs" in summary.read_text()  # the job summary
    header = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    for proc in logs:
        assert token not in proc.stdout + proc.stderr and header not in proc.stdout + proc.stderr
    built = [p for p in site.rglob("*") if p.is_file()]
    assert len(built) >= 4
    for path in [*built, summary]:
        assert token.encode() not in path.read_bytes() and header.encode() not in path.read_bytes(), path


@pytest.mark.slow
@pytest.mark.parametrize("passes", [True, False])
def test_the_verify_workflow_runs_the_base_branchs_rows_as_written(installed: tuple[Path, Path], tmp_path: Path,
                                                                   passes: bool) -> None:
    """verify.yml's steps on a pull request's checkout: the rows come from the base branch, so a branch that
    edits its brief's rows to pass is still judged by main's."""
    wheel, venv = installed
    repo = tmp_path / "repo"
    git("init", "-q", "--initial-branch=main", str(repo))
    (repo / "briefs").mkdir()
    rows = "verify:\n  - id: shipped\n    run: test -f shipped.txt\n"
    (repo / "briefs" / "ship.md").write_text(f"---\ntitle: Ship\n{rows}---\nShip it.\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "brief", cwd=repo)
    base = git("rev-parse", "HEAD", cwd=repo).strip()
    git("checkout", "-q", "-b", "assay/ship", cwd=repo)
    # the branch rewrites its own copy of the rows to something that always passes
    (repo / "briefs" / "ship.md").write_text("---\ntitle: Ship\nverify:\n  - id: shipped\n    run: \"true\"\n---\n")
    if passes:
        (repo / "shipped.txt").write_text("yes\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "work", cwd=repo)
    summary = tmp_path / "summary.md"
    contexts = {"inputs.assay-package": str(wheel), "github.head_ref": "assay/ship",
                "github.event_name": "pull_request", "github.event.pull_request.base.sha": base}
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "RUNNER_TEMP": str(tmp_path), "GITHUB_STEP_SUMMARY": str(summary)}
    done = run_workflow_steps(REPO / ".github" / "workflows" / "verify.yml", "verify", contexts, env, cwd=repo,
                              expect=0 if passes else 1)
    assert done[-1].returncode == (0 if passes else 1)
    assert ("passed" if passes else "**failed**") in summary.read_text()
    assert "test -f shipped.txt" in summary.read_text()  # main's row, not the branch's


@pytest.mark.slow
@pytest.mark.parametrize(("landed", "group"), [((), ("lenient",)), ((), ("strict", "lenient")),
                                               (("lenient",), ("strict",))], ids=["alone", "together", "after"])
def test_the_verify_workflow_checks_a_merge_group_on_the_commit_that_lands(
        installed: tuple[Path, Path], tmp_path: Path, landed: tuple[str, ...], group: tuple[str, ...]) -> None:
    """verify.yml in a merge queue (`merge_group`): the rows of every brief whose commits the group holds, and of
    every brief landed on the base, from the base's copy of each brief, run on the group's head. `lenient` passes
    alone; grouped after `strict` (which makes cfg.txt strict, and passes itself) its row fails on the commit that
    would land; and `strict` grouped on a base where `lenient` landed fails there by lenient's row."""
    wheel, venv = installed
    repo = tmp_path / "repo"
    git("init", "-q", "--initial-branch=main", str(repo))
    (repo / "briefs").mkdir()
    (repo / "briefs" / "strict.md").write_text("---\ntitle: Strict\nverify:\n  - id: strict\n"
                                               "    run: grep -q strict cfg.txt\n---\nStrict.\n")
    (repo / "briefs" / "lenient.md").write_text("---\ntitle: Lenient\nverify:\n  - id: lenient\n"
                                                "    run: grep -q lenient app.txt && ! grep -qs strict cfg.txt\n"
                                                "---\nLenient.\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "briefs", cwd=repo)
    work = (("strict", "cfg.txt", "mode=strict\n"), ("lenient", "app.txt", "needs=lenient\n"))
    for names in (landed, group):
        if names is group:
            base = git("rev-parse", "HEAD", cwd=repo).strip()
        for name, path, text in work:
            if name in names:
                (repo / path).write_text(text)
                git("add", "-A", cwd=repo)
                git("commit", "-q", "-m", f"{name}\n\nAssay-Brief: {name}\n", cwd=repo)
    summary = tmp_path / "summary.md"
    contexts = {"inputs.assay-package": str(wheel), "github.event_name": "merge_group",
                "github.event.merge_group.base_sha": base}
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "RUNNER_TEMP": str(tmp_path), "GITHUB_STEP_SUMMARY": str(summary)}
    expect = 1 if "strict" in group else 0  # strict and lenient on one head: lenient's row fails
    done = run_workflow_steps(REPO / ".github" / "workflows" / "verify.yml", "verify", contexts, env, cwd=repo,
                              expect=expect)
    assert done[-1].returncode == expect
    said = summary.read_text()
    assert "grep -q lenient app.txt" in said and ("grep -q strict cfg.txt" in said) == ("strict" in group), said
    assert ("**failed**" in said) == ("strict" in group), said


@pytest.mark.slow
def test_init_github_from_the_wheel_pins_the_commit_it_was_installed_from(installed: tuple[Path, Path],
                                                                          tmp_path: Path) -> None:
    """`assay init --github` writes workflows that install the Assay that wrote them, pinned to its commit, read
    from the installation's own record (PEP 610 direct_url.json); installed from a file a runner cannot reach,
    it writes nothing and says how to name one."""
    _, venv = installed
    exe = str(venv / "bin" / "assay")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    [record] = venv.glob("lib/python*/site-packages/assay_desks-*.dist-info/direct_url.json")
    as_installed = record.read_text()
    assert json.loads(as_installed)["url"].endswith(".whl")  # pip's own record of the wheel file
    project = tmp_path / "project"
    project.mkdir()
    refused = subprocess.run([exe, "init", "--github"], cwd=project, env=env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and "installed from an archive (file://" in refused.stderr, refused.stderr
    assert "--assay-from OWNER/REPO@COMMIT" in refused.stderr and list(project.iterdir()) == []
    sha = "89abcdef" * 5
    try:  # as `pip install git+https://github.com/someone/assay@<sha>` records it
        record.write_text(json.dumps({"url": "https://github.com/someone/assay",
                                      "vcs_info": {"vcs": "git", "commit_id": sha, "requested_revision": sha}}))
        done = subprocess.run([exe, "init", "--github"], cwd=project, env=env, capture_output=True, text=True,
                              timeout=120)
    finally:
        record.write_text(as_installed)
    assert done.returncode == 0, done.stderr
    for name in ("sweep", "board", "verify"):
        text = (project / ".github" / "workflows" / f"assay-{name}.yml").read_text()
        assert f'ASSAY_PACKAGE: "assay-desks @ git+https://github.com/someone/assay@{sha}"' in text
        assert "inputs.assay-package" not in text


@pytest.mark.slow
def test_the_desk_workflow_runs_as_written_woken_by_events_exactly_once(installed: tuple[Path, Path], forge: Forge,
                                                                        fake_github: FakeGitHub,
                                                                        tmp_path: Path) -> None:
    """desk.yml's two jobs, their `run:` steps as written, with the installed wheel, against the fake GitHub, fed
    payloads valid against GitHub's webhook schemas: a push of a brief runs the desk into a review; a review
    requesting changes starts one round whose prompt holds its text; the same payload again and a re-run wake
    nothing; the merge settles the claim. The figures of docs/github.md are printed (`-s` shows them)."""
    wheel, venv = installed
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "briefs/gh.md": brief("Gh", ["write gh.txt hi"], "test -f gh.txt")})
    github_repo(fake_github, forge.seed)
    gh, web = fake_github, fake_github.git_url(OWNER, NAME).removesuffix(f"/{OWNER}/{NAME}.git")
    gh.grant(OWNER, NAME, "alice")
    workflow = REPO / ".github" / "workflows" / "desk.yml"
    base = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
            "ASSAY_CACHE_DIR": str(tmp_path / "runner-cache"), "RUNNER_TEMP": str(tmp_path),
            "ASSAY_GITHUB_API": gh.api_url, "ASSAY_STATE_DIR": str(tmp_path / "state"),
            "ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log")}
    contexts = {"inputs.assay-package": str(wheel), "github.token": gh.token, "github.server_url": web,
                "github.repository": f"{OWNER}/{NAME}"}
    forge_git = ForgeGit(str(gh.repo(OWNER, NAME).path))
    runs = iter(range(1, 100))

    def event(name: str, payload: dict[str, object], attempt: int = 1) -> tuple[list[str], float, int]:
        """The event job as GitHub runs it: the desks it lists, its seconds, the API calls it made."""
        action = payload.get("action") if name not in ("push", "workflow_dispatch") else None
        assert webhook_problems(name, action if isinstance(action, str) else None, payload) == []
        run = next(runs)
        path, output = tmp_path / f"event-{run}.json", tmp_path / f"output-{run}"
        path.write_text(json.dumps(payload))
        calls, started = sum(gh.calls.values()) + sum(gh.not_modified.values()), time.monotonic()
        run_workflow_steps(workflow, "event", {**contexts, "github.event_name": name},  # a fresh runner each time
                           {**base, "GITHUB_EVENT_PATH": str(path), "GITHUB_OUTPUT": str(output),
                            "GITHUB_RUN_ID": "7", "GITHUB_RUN_ATTEMPT": str(attempt),
                            "ASSAY_CACHE_DIR": str(tmp_path / f"runner-{run}")})
        desks = output.read_text().strip().removeprefix("desks=")
        return (json.loads(desks), time.monotonic() - started,
                sum(gh.calls.values()) + sum(gh.not_modified.values()) - calls)

    def desk_job(desk: str) -> str:
        logs = run_workflow_steps(workflow, "desk", {**contexts, "matrix.desk": desk},
                                  {**base, "ASSAY_CACHE_DIR": str(tmp_path / f"runner-{next(runs)}")})
        return "".join(p.stdout + p.stderr for p in logs)

    def claim() -> tuple[str, int]:
        found = Claims(forge_git).read("gh")
        assert found is not None
        return found.record.state, found.record.epoch

    def wakes() -> int:
        from assay.core.journal import read_log
        return sum(1 for e in read_log(forge_git, "gh").entries if e.kind == "wake")

    main = gh.repo(OWNER, NAME)
    head = git("--git-dir", str(main.path), "rev-parse", "main").strip()
    desks, _, _ = event("push", payloads.push(gh, OWNER, NAME, before=head, after=head, added=["briefs/gh.md"]))
    assert desks == ["builder"]
    assert "review ready" in desk_job("builder") and claim() == ("waiting", 1)
    [pull] = gh.pulls(OWNER, NAME)

    review = gh.review(OWNER, NAME, pull.number, "CHANGES_REQUESTED", "Say hello in gh.txt, not hi.", by="alice")
    submitted = payloads.review_submitted(gh, OWNER, NAME, pull.number, review)
    desks, seconds, calls = event("pull_request_review", submitted)
    assert desks == ["builder"] and claim() == ("held", 1) and wakes() == 1
    assert event("pull_request_review", submitted)[0] == [] and wakes() == 1  # delivered twice
    assert event("pull_request_review", submitted, attempt=2)[0] == [] and wakes() == 1  # the workflow re-run
    started = time.monotonic()
    out = desk_job("builder")
    round_s = time.monotonic() - started
    assert "a new round" in out and claim() == ("waiting", 2), out
    [prompt] = (tmp_path / "state").glob("*/prompts/gh-2-1.md")
    assert "Say hello in gh.txt, not hi." in prompt.read_text()
    assert event("pull_request_review", submitted, attempt=3)[0] == [] and claim() == ("waiting", 2)

    gh.merge(OWNER, NAME, pull.number)
    desks, _, _ = event("pull_request", payloads.pull_closed(gh, OWNER, NAME, pull.number, "maintainer"))
    assert desks == [] and claim()[0] == "done"
    print(f"\nevent -> brief woken: {seconds:.2f}s (the event job's steps, install included); the round that "
          f"followed (the desk job): {round_s:.2f}s; API requests for the wake: {calls}")
    assert calls <= 6, gh.calls
    forge_git.close()
