"""`assay claim`, `renew`, `release` and `step run` (with no desk) without click (`assay/lean.py`): the same
options as the full command line, the same answers, and a process that imports neither click nor rich."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from assay import lean
from assay.cli import cli
from tests.conftest import Forge, assay, git
from tests.helpers.gitlog import calls, logging_git


def _command(name: str) -> click.Command:
    group, _, sub = {"claim": "claim take", "step run": "step run"}.get(name, name).partition(" ")
    found = cli.commands[group]
    if sub:
        assert isinstance(found, click.Group)
        found = found.commands[sub]
    return found


@pytest.mark.parametrize("name", sorted(lean.SPECS))
def test_the_lean_commands_take_what_the_command_line_declares(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each argument and option, its environment variable, kind, default (what click gives when it is left out)
    and whether it is required, as cli.py declares them for click: the two cannot drift apart."""
    positional, options = lean.SPECS[name]
    command = _command(name)
    for _, env, _, _, _ in options.values():
        if env:
            monkeypatch.delenv(env, raising=False)
    required = [word for p in command.params if isinstance(p, click.Option) and p.required for word in (p.opts[0], "x")]
    top = click.Context(cli, **cli.context_settings)  # as the command line makes it (click keeps the help option)
    defaults = command.make_context(name, [*required, *positional], parent=top).params
    assert tuple(p.name for p in command.params if isinstance(p, click.Argument)) == positional
    declared: dict[str, lean.Option] = {}
    for p in command.params:
        if not isinstance(p, click.Option):
            continue
        assert len(p.opts) == 1 and not p.secondary_opts, p.opts  # one spelling each, as lean takes them
        if p.is_flag:
            kind: object = lean.FLAG
        elif isinstance(p.type, click.Choice):
            kind = tuple(p.type.choices)
        else:
            kind = {click.INT: int, click.STRING: str}[p.type]
        default = None if p.required else defaults[str(p.name)]
        declared[p.opts[0]] = (str(p.name), str(p.envvar or ""), kind, default, p.required)
    assert declared == options


@pytest.mark.parametrize("argv", [
    ["claim", "b", "--desk"],  # a missing value
    ["claim", "b", "--desk", "d", "--lease", "soon"],  # not a number
    ["claim", "b", "--desk", "d", "--lease=soon"],
    ["claim", "b", "-h"], ["renew", "--help"], ["claim", "b", "--desk", "d", "--bogus"],
    ["claim", "history", "b"], ["claim", "b", "c", "--desk", "d"], ["claim", "--desk", "d"],
    ["release", "b", "--outcome", "finished"], ["release", "b", "--force=yes"],
    ["renew", "b", "--desk", "d", "--", "x"],
    ["board"], [], ["step", "run", "--name", "x", "--weird", "true"], ["step", "run", "--name"],
])
def test_anything_but_a_plain_call_goes_to_the_full_command_line(argv: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_DESK", raising=False)
    assert lean.parse(argv) is None


def test_a_plain_call_is_parsed_as_click_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASSAY_DESK", "from-env")
    monkeypatch.setenv("ASSAY_EPOCH", "")  # empty: unset, as click takes it
    assert lean.parse(["claim", "take", "--lease=30", "b", "--json"]) == (
        "claim", {"brief": "b", "desk": "from-env", "lease_s": 30, "singleton": False, "forge": None,
                  "as_json": True, "jq": None})
    assert lean.parse(["renew", "b", "--desk", "d", "--forge", "/f", "--jq", ".epoch"]) == (
        "renew", {"brief": "b", "desk": "d", "epoch": None, "lease_s": None, "forge": "/f", "as_json": False,
                  "jq": ".epoch"})
    monkeypatch.setenv("ASSAY_EPOCH", "x")  # what click would refuse: left to it
    assert lean.parse(["renew", "b"]) is None
    step = lean.parse(["step", "run", "--name", "n", "--epoch=2", "--", "sh", "-c", "exit 3", "--json"])
    assert step is not None and step[1]["command"] == ("sh", "-c", "exit 3", "--json") and step[1]["epoch"] == 2
    bare = lean.parse(["step", "run", "--name", "n", "true", "--fresh"])  # the first word starts the command
    assert bare is not None and bare[1]["command"] == ("true", "--fresh") and bare[1]["fresh"] is False


def _imports(forge: Forge, *argv: str) -> tuple[int, str, set[str]]:
    """Run the `assay` entry point in a fresh process: its exit code, output and the top packages it imported."""
    probe = ("import atexit, sys\nfrom assay.entry import main\nsys.argv = ['assay', *sys.argv[1:]]\n"
             "def said():\n"  # at exit, as a short command ends (`entry._leave`: its exit functions, then os._exit)
             "    sys.stderr.write('\\nIMPORTED ' + ' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
             "    sys.stderr.flush()\n"
             "atexit.register(said)\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ASSAY_FORGE": forge.url})
    err, _, imported = proc.stderr.rpartition("\nIMPORTED ")
    return proc.returncode, proc.stdout + err, set(imported.split())


# what a short command has no use for: the full command line, and standard modules that cost a tenth of its start
UNNEEDED = frozenset({"click", "rich", "typing", "pathlib", "dataclasses", "inspect"})


def test_claim_renew_and_release_answer_without_click_or_rich(forge: Forge) -> None:
    code, out, imported = _imports(forge, "claim", "alpha", "--desk", "d", "--json")
    assert code == 0 and json.loads(out)["epoch"] == 1, out
    assert not imported & UNNEEDED, imported  # it reads the brief with PyYAML, which loads datetime
    code, out, imported = _imports(forge, "renew", "alpha", "--desk", "d", "--epoch", "1")
    assert code == 0 and out.startswith("renewed alpha: held, epoch 1"), out
    assert not imported & {*UNNEEDED, "yaml", "datetime"}, imported  # a renewal reads no brief
    code, out, imported = _imports(forge, "renew", "alpha", "--desk", "d", "--epoch", "2")
    assert code == 3 and "error:" in out and "Traceback" not in out, out  # fenced: the same exit code as ever
    assert not imported & {"click", "rich"}, imported
    code, out, imported = _imports(forge, "release", "alpha")
    assert code == 2 and "--desk is required" in out, out
    code, out, imported = _imports(forge, "step", "run", "--name", "n", "--brief", "alpha", "--desk", "d", "--epoch",
                                   "1", "--run", "r1", "--policy", "safe", "--", "sh", "-c", "echo hi; exit 3")
    assert code == 3 and out.startswith("hi"), out  # the command's own exit code
    # nor hashlib (OpenSSL's start: CPython's own digests serve), nor tempfile (random, shutil)
    assert not imported & {*UNNEEDED, "yaml", "datetime", "hashlib", "_hashlib", "tempfile"}, imported
    code, out, imported = _imports(forge, "release", "alpha", "--desk", "d", "--outcome", "done")
    assert code == 0 and "released alpha: done" in out, out
    assert not imported & {*UNNEEDED, "yaml", "datetime"}, imported


def test_a_brief_that_checked_clean_is_not_read_with_pyyaml_again(forge: Forge) -> None:
    """A claim checks the brief on main; the same text of the same brief, checked clean once on this machine, is
    not parsed again (PyYAML is a sixth of a claim's process). A new text is checked, and one with problems is
    never kept: each claim of it says what they are."""
    code, out, imported = _imports(forge, "claim", "alpha", "--desk", "d")
    assert code == 0 and "yaml" in imported, out  # the first check reads it
    assert _imports(forge, "release", "alpha", "--desk", "d")[0] == 0
    code, out, imported = _imports(forge, "claim", "alpha", "--desk", "e")
    assert code == 0 and "yaml" not in imported, imported
    assert _imports(forge, "release", "alpha", "--desk", "e")[0] == 0
    forge.add_brief("alpha", "---\ntitle: [unclosed\n---\nBody.\n")
    for _ in range(2):
        code, out, imported = _imports(forge, "claim", "alpha", "--desk", "d")
        assert code == 2 and "briefs/alpha.md" in out and "yaml" in imported, out


def test_bad_input_is_reported_before_the_forge_is_opened(tmp_path: Path) -> None:
    """A short command starts reading the forge while its code loads; a mistake in the call is still the first
    thing said, as before: a forge that cannot be opened (here a path with a NUL byte in `.assay.yaml`, which no
    file can have) comes after, and a release that lacks `--desk` opens nothing at all."""
    (tmp_path / ".assay.yaml").write_text('forge: "nowhere\\0.git"\n')
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSAY_")}
    env["ASSAY_CACHE_DIR"] = str(cache)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "assay", *argv], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)

    step = run("step", "run", "--name", "bad/name", "--brief", "alpha", "--desk", "d", "--epoch", "1", "--run", "r",
               "--", "true")
    assert step.returncode == 2 and "invalid step name" in step.stderr, step.stderr
    release = run("release", "alpha")
    assert release.returncode == 2 and "--desk is required" in release.stderr, release.stderr
    assert not cache.exists()  # no cache made for either: the forge was never opened
    renew = run("renew", "alpha", "--desk", "d")
    assert renew.returncode != 0 and "Traceback" not in renew.stderr and "null" in renew.stderr, renew.stderr


def test_the_lean_and_the_full_command_line_answer_alike(forge: Forge) -> None:
    """The same renewal through each: the same JSON but for the times and the holder's process."""
    assert assay("claim", "alpha", "--desk", "d", "--forge", forge.url).code == 0
    views = []
    for entry in ("from assay.entry import main", "from assay.cli import main"):
        proc = subprocess.run([sys.executable, "-c", f"import sys\n{entry}\nsys.argv[0] = 'assay'\nmain()",
                               "renew", "alpha", "--desk", "d", "--json", "--forge", forge.url],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        views.append({k: v for k, v in json.loads(proc.stdout).items() if k not in ("holder", "at", "commit", "age_s")})
    assert views[0] == views[1]


def _subcommand(args: str) -> str:
    """The git command a logged call ran (`update-ref`, `cat-file`…), past `--git-dir` and `-c` options."""
    words = args.split()
    while words and words[0] in ("--git-dir", "-c"):
        words = words[2:]
    return words[0] if words else ""


def test_a_renewal_and_a_step_run_start_only_the_git_processes_they_need(forge: Forge, tmp_path: Path) -> None:
    """After a first command on the machine, a renewal is three git processes (read the refs, read objects, one
    ref transaction) and a safe step with no desk the same: the forge's rules are not asked again while its
    config and hooks stay as they were, and a short journal is read through the object batch, not `rev-list`.
    A changed forge config is asked about once more."""
    folder, log = logging_git(tmp_path)
    env = {"ASSAY_FORGE": forge.url, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    assert assay("claim", "alpha", "--desk", "d", env=env).code == 0
    step = ["step", "run", "--name", "n", "--brief", "alpha", "--desk", "d", "--epoch", "1", "--run", "r1",
            "--policy", "safe", "--", "true"]
    assert assay(*step, env=env).code == 0

    def commands(*argv: str) -> list[str]:
        before = len(calls(log))
        run = assay(*argv, env=env)
        assert run.code == 0, run.err
        return sorted(_subcommand(args) for _, args in calls(log)[before:])

    assert commands("renew", "alpha", "--desk", "d", "--epoch", "1") == ["cat-file", "update-ref", "upload-pack"]
    step[3] = "m"
    assert commands(*step) == ["cat-file", "update-ref", "upload-pack"]
    git("--git-dir", str(forge.path), "config", "assay.test", "1")  # the forge's config changed: asked again
    assert "config" in commands("renew", "alpha", "--desk", "d", "--epoch", "1")
    rules = forge.path / "rules.cfg"  # a file the forge's config includes, empty while the answer is kept
    rules.write_text("")
    os.utime(rules, (time.time() - 10, time.time() - 10))  # written a while before it is read
    git("--git-dir", str(forge.path), "config", "include.path", "rules.cfg")
    assert "config" in commands("renew", "alpha", "--desk", "d", "--epoch", "1")
    assert "config" not in commands("renew", "alpha", "--desk", "d", "--epoch", "1")
    rules.write_text("[receive]\n\tdenyDeletes = true\n\tdenyNonFastForwards = true\n")  # then a rule in it
    assert "push" in commands("renew", "alpha", "--desk", "d", "--epoch", "1")  # through git, which applies it
    hook = forge.path / "hooks" / "pre-receive"  # a hook in place: the next process's push goes through git
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    refused = assay("renew", "alpha", "--desk", "d", "--epoch", "1", env=env)
    assert refused.code == 1 and "hook declined" in refused.err, refused.err


def test_an_output_that_cannot_be_written_is_said_and_a_closed_one_is_no_error(forge: Forge) -> None:
    """A short command ends without the interpreter's teardown (`entry._leave`), yet says what it could not write:
    a full disk under its output is an error on stderr (its own, or the exit's: 120, as Python's exit says it),
    never a traceback; no stdout at all (`>&-`) takes nothing."""
    assay = [sys.executable, "-m", "assay"]
    env = {**os.environ, "ASSAY_FORGE": forge.url}
    subprocess.run([*assay, "claim", "alpha", "--desk", "d"], env=env, timeout=60, check=True,
                   stdout=subprocess.DEVNULL)
    renew = [*assay, "renew", "alpha", "--desk", "d", "--epoch", "1"]  # one line, left in the buffer until the end
    with open("/dev/full", "w") as full:
        proc = subprocess.run(renew, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    assert proc.returncode in (1, 120) and "No space left on device" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    closed = subprocess.run(renew, stderr=subprocess.PIPE, text=True, env=env, timeout=60,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
