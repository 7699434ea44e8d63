"""The CLI as a user meets it: real processes, exit codes, messages, JSON."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from assay.cli import cli
from tests.conftest import Forge, assay, git


def all_commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        out.append((f"{prefix}{name}", cmd))
        if isinstance(cmd, click.Group):
            out += all_commands(cmd, f"{prefix}{name} ")
    return out


@pytest.mark.parametrize(("name", "cmd"), all_commands(cli))
def test_every_command_has_help(name: str, cmd: click.Command) -> None:
    assert (cmd.help or "").strip(), f"`assay {name}` has no help text"
    for param in cmd.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help or param.name in ("help",), f"`assay {name} --{param.name}` has no help"


def no_traceback(run_err: str) -> None:
    assert "Traceback" not in run_err


def test_claim_renew_release_through_the_cli(forge: Forge) -> None:
    won = assay("claim", "alpha", "--desk", "builder", "--forge", forge.url, "--json")
    assert won.code == 0, won.err
    view = won.json()
    assert isinstance(view, dict) and view["state"] == "held" and view["epoch"] == 1
    assert forge.claim_json("alpha")["holder"] == view["holder"]
    lost = assay("claim", "alpha", "--desk", "other", "--forge", forge.url)
    assert lost.code == 3
    assert "held by desk 'builder'" in lost.err and view["holder"] in lost.err
    no_traceback(lost.err)
    assert assay("renew", "alpha", "--desk", "builder", "--forge", forge.url).code == 0
    assert assay("release", "alpha", "--desk", "other", "--forge", forge.url).code == 3
    done = assay("release", "alpha", "--desk", "builder", "--outcome", "done", "--forge", forge.url)
    assert done.code == 0 and forge.claim_json("alpha")["state"] == "done"
    history = assay("claim", "history", "alpha", "--forge", forge.url, "--json").json()
    assert isinstance(history, dict)
    assert [h["state"] for h in history["history"]] == ["held", "held", "done"]


def test_history_folds_consecutive_renewals_in_the_table_and_keeps_each_in_json(forge: Forge) -> None:
    assert assay("claim", "alpha", "--desk", "builder", "--forge", forge.url).code == 0
    for _ in range(3):
        assert assay("renew", "alpha", "--desk", "builder", "--forge", forge.url).code == 0
    assert assay("release", "alpha", "--desk", "builder", "--forge", forge.url).code == 0
    full = assay("claim", "history", "alpha", "--forge", forge.url, "--json").json()
    assert [h["state"] for h in full["history"]] == ["held"] * 4 + ["released"]  # type: ignore[index]
    table = assay("claim", "history", "alpha", "--forge", forge.url)
    assert table.code == 0, table.err
    rows = [line.split() for line in table.out.splitlines() if " held " in line or " released " in line]
    assert [r[1] for r in rows] == ["held", "released"]
    assert "3×" in rows[0] and "3×" not in rows[1]


def test_history_by_desk_and_a_forced_release_by_a_person_with_a_spaced_name(forge: Forge) -> None:
    assert assay("claim", "alpha", "--desk", "one", "--forge", forge.url).code == 0
    forced = assay("release", "alpha", "--force", "--reason", "gone", "--forge", forge.url,
                   env={"USER": "Ada Lovelace"})
    assert forced.code == 0, forced.err
    author = git("--git-dir", str(forge.path), "log", "-1", "--format=%an|%ae", "refs/assay/claims/alpha").strip()
    assert author == "Ada Lovelace|Ada-Lovelace@assay.invalid"
    assert assay("claim", "alpha", "--desk", "two", "--forge", forge.url).code == 0
    mine = assay("claim", "history", "alpha", "--desk", "two", "--forge", forge.url, "--json")
    assert mine.code == 0, mine.err
    assert [(h["desk"], h["epoch"]) for h in mine.json()["history"]] == [("two", 2)]  # type: ignore[index]


def test_claims_json_lists_every_claim(forge: Forge) -> None:
    for brief in ("alpha", "beta"):
        assert assay("claim", brief, "--desk", "d1", "--forge", forge.url).code == 0
    listing = assay("claims", "--forge", forge.url, "--json").json()
    assert isinstance(listing, dict)
    assert [(c["brief"], c["state"], c["desk"]) for c in listing["claims"]] == [
        ("alpha", "held", "d1"), ("beta", "held", "d1")]
    assert listing["invalid"] == []
    table = assay("claims", "--forge", forge.url)
    assert table.code == 0 and "alpha" in table.out and "held" in table.out


@pytest.mark.parametrize("bad", ["../escape", "UPPER", "a..b", "x.lock", "é"])
def test_bad_brief_ids_exit_2_and_write_nothing(forge: Forge, bad: str) -> None:
    run = assay("claim", bad, "--desk", "d", "--forge", forge.url)
    assert run.code == 2 and run.err.startswith("error: invalid brief id")
    no_traceback(run.err)
    assert git("ls-remote", forge.url, "refs/assay/*") == ""


def test_a_missing_forge_is_exit_1_with_a_clear_message(tmp_path: Path) -> None:
    run = assay("claims", "--forge", str(tmp_path / "nowhere.git"))
    assert run.code == 1 and "cannot read forge" in run.err and "hint:" in run.err
    no_traceback(run.err)


def test_an_unreachable_network_forge_is_exit_1_and_hides_credentials() -> None:
    run = assay("claims", "--forge", "http://user:s3cr3t-token@127.0.0.1:9/forge.git")
    assert run.code == 1 and "cannot read forge" in run.err
    assert "s3cr3t-token" not in run.err + run.out
    no_traceback(run.err)


def test_no_forge_configured_is_bad_input(tmp_path: Path) -> None:
    run = assay("claims", cwd=tmp_path)
    assert run.code == 2 and "no forge is configured" in run.err


def test_forge_precedence_flag_env_config_origin(forge: Forge, tmp_path: Path) -> None:
    other = tmp_path / "other.git"
    git("init", "-q", "--bare", str(other))
    work = tmp_path / "work"
    git("init", "-q", str(work))
    git("remote", "add", "origin", str(other), cwd=work)
    assert assay("claims", "--json", cwd=work).json() == {"claims": [], "invalid": []}  # origin: empty forge
    assay("claim", "alpha", "--desk", "d", "--forge", forge.url)
    (work / ".assay.yaml").write_text(f"forge: {forge.url}\n")
    assert len(assay("claims", "--json", cwd=work).json()["claims"]) == 1  # type: ignore[index]
    assert assay("claims", "--json", cwd=work, env={"ASSAY_FORGE": str(other)}).json()["claims"] == []  # type: ignore[index]
    flag = assay("claims", "--json", "--forge", forge.url, cwd=work, env={"ASSAY_FORGE": str(other)}).json()
    assert len(flag["claims"]) == 1  # type: ignore[index]


def test_a_malformed_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / ".assay.yaml").write_text("forge: [unclosed\n")
    run = assay("claims", cwd=tmp_path)
    assert run.code == 2 and ".assay.yaml:" in run.err
    no_traceback(run.err)


def test_init_with_a_local_forge_then_claim(tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    init = assay("init", "--local-forge", "../forge.git", cwd=work)
    assert init.code == 0, init.err
    for folder in ("desks", "sweepers", "board", "briefs"):
        assert any((work / folder).iterdir())
    assert (work / ".assay.yaml").read_text().strip().endswith("forge: ../forge.git")
    assert "briefs/hello.md" in git("ls-tree", "-r", "--name-only", "main", cwd=tmp_path / "forge.git")
    assert assay("claim", "hello", "--desk", "me", cwd=work).code == 0
    assert assay("init", "--local-forge", "../forge.git", cwd=work).code == 0  # again: idempotent


def test_init_leaves_an_ordinary_checkout_and_a_second_one_joins_without_diverging(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    assert assay("init", "--local-forge", "../forge.git", cwd=first).code == 0
    assert git("pull", "-q", cwd=first) == ""  # upstream set: a plain pull works
    assert git("status", "-sb", cwd=first).splitlines()[0] == "## main...origin/main"
    main = git("rev-parse", "main", cwd=tmp_path / "forge.git").strip()
    joined = assay("init", "--local-forge", "../forge.git", "--json", cwd=second)
    report = joined.json()
    assert joined.code == 0 and isinstance(report, dict) and report["joined"] and not report["pushed_main"]
    assert git("rev-parse", "HEAD", cwd=second).strip() == main  # the forge's main, not a history of its own
    assert git("status", "-sb", cwd=second).splitlines()[0] == "## main...origin/main"
    assert git("rev-parse", "main", cwd=tmp_path / "forge.git").strip() == main  # nothing pushed
    assert assay("claim", "hello", "--desk", "me", cwd=second).code == 0
    assert git("pull", "-q", cwd=first) == "" and git("pull", "-q", cwd=second) == ""
    own = tmp_path / "own"
    own.mkdir()
    git("init", "-q", cwd=own)
    (own / "notes.txt").write_text("mine\n")
    git("add", "notes.txt", cwd=own)
    git("commit", "-qm", "mine", cwd=own)
    unrelated = assay("init", "--local-forge", "../forge.git", cwd=own)
    assert unrelated.code == 0 and "unrelated" in unrelated.err and "git clone" in unrelated.err


def test_init_refuses_a_non_repository_forge_dir(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "file.txt").write_text("x")
    run = assay("init", "--local-forge", str(junk), cwd=tmp_path)
    assert run.code == 2 and "not a bare git repository" in run.err


def _clone_like(path: Path) -> str:
    """A repository with a history of its own (as a clone of Assay is), its head returned."""
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('app')\n")
    git("add", "-A", cwd=path)
    git("commit", "-qm", "one", cwd=path)
    git("commit", "-q", "--allow-empty", "-m", "two", cwd=path)
    return git("rev-parse", "HEAD", cwd=path).strip()


def test_init_in_a_new_folder_inside_another_repository_makes_a_repository_of_its_own(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    head = _clone_like(clone)
    project = clone / "myproject"  # README's "Your own project", followed inside a clone after the demo
    project.mkdir()
    run = assay("init", "--local-forge", "../forge.git", cwd=project)
    assert run.code == 0, run.err
    assert git("rev-parse", "--show-toplevel", cwd=project).strip() == str(project.resolve())
    assert git("rev-parse", "HEAD", cwd=clone).strip() == head  # the enclosing repository is left as it was
    assert git("status", "--porcelain", cwd=clone).split("\n")[:2] == ["?? forge.git/", "?? myproject/"]
    forge = clone / "forge.git"
    assert git("rev-list", "--count", "main", cwd=forge).strip() == "1"  # none of the clone's history
    assert subprocess.run(["git", "cat-file", "-e", head], cwd=forge, capture_output=True).returncode != 0
    assert "inside the git repository" in run.err and str(clone.resolve()) in run.err
    assert assay("claim", "hello", "--desk", "me", cwd=project).code == 0


def test_init_in_a_folder_another_repository_tracks_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    head = _clone_like(clone)
    run = assay("init", "--local-forge", "../forge.git", cwd=clone / "src")
    assert run.code == 2 and str(clone.resolve()) in run.err and "hint: run it at the top" in run.err, run.err
    no_traceback(run.err)
    assert sorted(p.name for p in clone.iterdir()) == [".git", "src"]
    assert sorted(p.name for p in (clone / "src").iterdir()) == ["app.py"]
    assert git("rev-parse", "HEAD", cwd=clone).strip() == head and git("status", "--porcelain", cwd=clone) == ""


def test_git_in_a_folder_without_a_repository_of_its_own_never_reaches_the_enclosing_one(tmp_path: Path) -> None:
    from assay.core.git import WorkRepo
    from assay.errors import ForgeError

    clone = tmp_path / "clone"
    head = _clone_like(clone)
    (clone / "seed").mkdir()  # a folder Assay meant to be a repository (a demo's seed, a worktree) that is none
    (clone / "seed" / "new.txt").write_text("x\n")
    with pytest.raises(ForgeError, match="not a git repository"):
        WorkRepo(clone / "seed").commit_all("would land on the clone's main")
    assert git("rev-parse", "HEAD", cwd=clone).strip() == head and "seed" not in git("ls-files", cwd=clone)


def test_a_damaged_cache_inside_a_checkout_is_an_error_never_the_checkouts_repository(forge: Forge,
                                                                                       tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _clone_like(clone)
    env = {"ASSAY_CACHE_DIR": str(clone / "cache")}  # as `assay demo` keeps its cache, inside a clone of Assay
    assert assay("claims", "--forge", forge.url, env=env).code == 0
    [cache] = (clone / "cache").iterdir()
    (cache / "HEAD").unlink()  # no longer a repository to git
    objects = git("cat-file", "--batch-all-objects", "--batch-check", cwd=clone)
    refs = git("for-each-ref", cwd=clone)
    run = assay("claim", "alpha", "--desk", "me", "--forge", forge.url, env=env)
    assert run.code == 1 and "unexpected" not in run.err, run.err
    no_traceback(run.err)
    assert git("cat-file", "--batch-all-objects", "--batch-check", cwd=clone) == objects
    assert git("for-each-ref", cwd=clone) == refs and forge.tip("refs/assay/claims/alpha") is None


def hook(forge: Forge, body: str) -> None:
    path = forge.path / "hooks" / "reference-transaction"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_ambiguous_claim_push_that_landed_is_a_win(forge: Forge) -> None:
    hook(forge, '[ "$1" = committed ] && kill -9 $PPID\nexit 0\n')
    run = assay("claim", "alpha", "--desk", "builder", "--forge", forge.url, "--json")
    assert run.code == 0, run.err
    view = run.json()
    assert isinstance(view, dict) and forge.tip("refs/assay/claims/alpha") == view["commit"]


def test_ambiguous_claim_push_that_did_not_land_fails_and_writes_nothing(forge: Forge) -> None:
    hook(forge, '[ "$1" = prepared ] && exit 1\nexit 0\n')
    run = assay("claim", "alpha", "--desk", "builder", "--forge", forge.url)
    assert run.code == 1 and "nothing was written" in run.err
    no_traceback(run.err)
    assert forge.tip("refs/assay/claims/alpha") is None


def test_force_release_by_a_person(forge: Forge) -> None:
    assay("claim", "alpha", "--desk", "builder", "--forge", forge.url)
    assert assay("release", "alpha", "--force", "--forge", forge.url).code == 2  # needs --reason
    run = assay("release", "alpha", "--force", "--reason", "desk is gone", "--forge", forge.url,
                env={"USER": "ops"})
    assert run.code == 0 and forge.claim_json("alpha")["reason"] == "forced by ops: desk is gone"


def test_release_without_desk_is_usage_error(forge: Forge) -> None:
    run = assay("release", "alpha", "--forge", forge.url)
    assert run.code == 2 and "--desk" in run.err


def test_demo_runs_and_every_brief_ends_done(tmp_path: Path) -> None:
    run = assay("demo", "--dir", str(tmp_path / "demo"), timeout=200)
    assert run.code == 0, run.err
    assert "all 6 briefs done" in run.out and "deploy ran 1 time(s)" in run.out
    forge = tmp_path / "demo" / "forge.git"
    tips = git("for-each-ref", "--format=%(refname)", "refs/assay/claims/", cwd=forge).split()
    assert len(tips) == 6
    for ref in tips:
        assert '"state": "done"' in git("show", f"{ref}:claim.json", cwd=forge)
    assert "steering received: Mention the rate limits" in run.out
    assert "failing on purpose" in run.out  # cleanup fails its first attempt and passes its second
    closer = run.out.split("look closer:\n", 1)[1].splitlines()
    assert len(closer) == 3 and all(line.startswith(f"  {sys.executable} -m assay ") for line in closer)
    pasted = subprocess.run(closer[2], shell=True, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PATH": "/usr/bin:/bin"})  # as written, with no assay on PATH
    assert pasted.returncode == 0 and "custody of docs-api" in pasted.stdout, pasted.stderr


def test_the_demo_names_assay_as_the_shell_finds_it(tmp_path: Path) -> None:
    """`assay` when the shell finds this very script; a virtualenv's script not on PATH by its path; run as
    `python -m assay`, this Python. Each closing line is a command Assay takes, its paths quoted for the shell."""
    from assay.demo import closing_lines, invoked_as

    script = tmp_path / "venv bin" / "assay"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    assert invoked_as(str(script), which=lambda _: str(script)) == "assay"
    assert invoked_as(str(script), which=lambda _: None) == shlex.quote(str(script))
    assert invoked_as(str(script), which=lambda _: "/usr/bin/assay") == shlex.quote(str(script))
    assert invoked_as("/src/assay/__main__.py") == f"{shlex.quote(sys.executable)} -m assay"
    for line in closing_lines("assay", tmp_path / "my demo" / "forge.git"):
        words = shlex.split(line)
        assert words[0] == "assay" and words[-1] == str(tmp_path / "my demo" / "forge.git")
        cmd: click.Command = cli
        ctx = cli.make_context("assay", words[1:])  # parsed as `assay` parses it, nothing run
        while isinstance(cmd, click.Group):
            name, sub, rest = cmd.resolve_command(ctx, [*(getattr(ctx, "_protected_args", None) or
                                                                getattr(ctx, "protected_args", [])), *ctx.args])
            assert sub is not None and name is not None, line
            ctx, cmd = sub.make_context(name, rest, parent=ctx), sub


def test_a_demo_whose_brief_is_blocked_says_which_at_once(tmp_path: Path) -> None:
    """Crashes in a row until a brief is blocked: the demo names the brief and why, exit 5, without waiting.

    The crash is the one brief's (`:setup-ci`): a desk stopped as another's crash ends the demo ends its run, so
    crashes taking turns between two briefs would block neither."""
    where = str(tmp_path / "demo")
    codes = [assay("demo", "--dir", where, "--crash-at", "push.after-commit:setup-ci", timeout=200).code
             for _ in range(3)]
    assert codes == [0, 0, 5]  # the third run finds setup-ci's two runs died and blocks it before a third
    again = assay("demo", "--dir", where, timeout=200)
    assert again.code == 5, again.out + again.err
    blocked = [r for r in assay("claims", "--json", "--forge", f"{where}/forge.git").json()["claims"]  # type: ignore[index]
               if r["state"] == "blocked"]
    assert [r["brief"] for r in blocked] == ["setup-ci"]
    assert "error: brief 'setup-ci' is blocked: 2 runs in a row ended without finishing" in again.err
    assert "assay release" in again.err and "Traceback" not in again.err


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_demo_crash_then_recover(tmp_path: Path, round_: int) -> None:
    """Three times over: the interrupted deploy ends as outcome_unknown in the journal, and ran once."""
    from tests.journal_check import entries, invariants

    where = str(tmp_path / "demo")
    crashed = assay("demo", "--dir", where, "--crash-at", "step.after-execute:deploy", timeout=200)
    assert crashed.code == 0, crashed.err
    assert "crash injected at step.after-execute:deploy" in crashed.out
    assert (tmp_path / "demo" / "effects.log").read_text().count("deployed rate-limit") == 1
    recovered = assay("demo", "--dir", where, timeout=200)
    assert recovered.code == 0, recovered.err
    assert "Outcome unknown" in recovered.out
    assert "Operation will NOT be replayed automatically" in recovered.out
    assert "not deploying again" in recovered.out and "all 6 briefs done" in recovered.out
    assert (tmp_path / "demo" / "effects.log").read_text().count("deployed rate-limit") == 1
    forge = tmp_path / "demo" / "forge.git"
    deploys = [e for e in entries(forge, "rate-limit") if e.get("step") == "deploy"]
    intent = next(e for e in deploys if e["kind"] == "intent")
    ended = [e for e in deploys if e.get("intent") == intent["seq"]]  # unknown, refused, then settled by inspection
    assert [e["kind"] for e in ended] == ["outcome_unknown", "refused", "result"]
    assert ended[-1]["data"]["settled"] == "happened" and ended[-1]["data"]["evidence"]["exit_code"] == 0
    assert invariants(forge, "rate-limit") == []


def test_demo_refuses_a_folder_that_is_not_a_demo(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("precious")
    run = assay("demo", "--dir", str(tmp_path))
    assert run.code == 2 and "not an earlier demo" in run.err
    assert (tmp_path / "mine.txt").read_text() == "precious"


def test_yaml_tags_and_bad_values_in_briefs_are_problems_not_crashes(tmp_path: Path) -> None:
    (tmp_path / "briefs").mkdir()
    (tmp_path / "briefs" / "t.md").write_text("---\ntitle: !foo bar\n---\n")
    (tmp_path / "briefs" / "u.md").write_text('---\ntitle: U\npriority: !!int "zz"\n---\n')
    run = assay("brief", "lint", cwd=tmp_path)
    assert run.code == 2 and "briefs/t.md:2: cannot read this value" in run.out
    assert "briefs/u.md:3: cannot read this value" in run.out and "Traceback" not in run.err


def test_more_user_mistakes_are_exit_2(forge: Forge, tmp_path: Path) -> None:
    assay("claim", "alpha", "--desk", "d", "--forge", forge.url)
    bad_time = assay("wait", "alpha", "--on", "time:2020-13-45T00:00:00Z", "--forge", forge.url)
    assert bad_time.code == 2 and "not a real time" in bad_time.err
    (tmp_path / ".assay.yaml").write_bytes(b"\xff\xfe")
    assert assay("claims", cwd=tmp_path).code == 2
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    demo = assay("demo", "--dir", str(a_file))
    assert demo.code == 2 and "is a file" in demo.err


def test_the_cli_reference_is_current() -> None:
    from assay.clidocs import reference
    from tests.conftest import REPO

    on_disk = (REPO / "docs" / "cli.md").read_text()
    assert on_disk == reference(), "docs/cli.md is stale: run `python -m assay.clidocs > docs/cli.md`"


def test_a_large_table_is_plain_aligned_text_without_terminal_escapes(capsys: pytest.CaptureFixture[str]) -> None:
    from assay import views

    rows = [[(str(i), ""), ("held", "cyan"), (f"t\x1b[31m{i}\n", "")] for i in range(views.FAST_ROWS + 1)]
    views.print_table(("n", "state", "title"), rows, right=frozenset({"n"}), title="big")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "big" and lines[1].split() == ["n", "state", "title"]
    assert len(lines) == views.FAST_ROWS + 3
    assert lines[2] == "  0  held   t?[31m0?" and lines[-1] == "500  held   t?[31m500?"
    assert "\x1b" not in "".join(lines)
