"""A new machine's first read of a brief, started ahead (`assay.core.git.ahead`, `lean.fetch_ahead`).

`assay step run` with an empty cache starts its one shallow fetch of the brief's claim and journal as soon as it
knows its forge and brief, before the rest of its code loads; the cache's port waits for that fetch before it reads
anything there. Checked with real git and real processes: the answers are the same as without it, there is one fetch,
a fetch no port waited for (the command failed first) and a fetch that hangs are ended, never left running.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from assay import lean
from assay.core import records
from assay.core.git import ForgeGit, ahead
from assay.core.journal import spacing
from tests.conftest import Forge, assay
from tests.helpers.gitlog import calls, logging_git

STEP = ("step", "run", "--policy", "safe", "--name", "build", "--brief", "alpha", "--desk", "d", "--epoch", "1")


def _build(tmp_path: Path) -> str:
    """The step's command: each time it runs it adds a line to `builds`."""
    return f"echo built | tee -a {tmp_path / 'builds'}"


def _held_with_a_step(forge: Forge, tmp_path: Path) -> None:
    """`alpha` claimed by desk d, its step `build` completed (from a cache of its own, as another machine)."""
    env = {"ASSAY_FORGE": forge.url, "ASSAY_CACHE_DIR": str(tmp_path / "first-machine")}
    assert assay("claim", "alpha", "--desk", "d", env=env).code == 0
    ran = assay(*STEP, "--run", "r1", "--", "sh", "-c", _build(tmp_path), env=env)
    assert ran.code == 0 and "built" in ran.out, ran.err


def _fake_git(tmp_path: Path, real: str, deaf: bool = False) -> tuple[Path, Path]:
    """A `git` first on PATH whose fetch into a named cache (`ahead`'s form: `--git-dir … fetch`) writes its pid to
    a file and hangs (`deaf`: and ignores SIGTERM, as would a process stuck in the kernel); every other call is the
    real git's. (The folder, the pid file.)"""
    folder, pid_file = tmp_path / "hanging-bin", tmp_path / "fetch.pid"
    folder.mkdir()
    (folder / "git").write_text(f"""#!/bin/sh
if [ "$1" = "--git-dir" ] && [ "$3" = "fetch" ]; then
  {"trap '' TERM" if deaf else ""}
  echo $$ > "{pid_file}"
  sleep 300
  exit 1
fi
exec "{real}" "$@"
""")
    (folder / "git").chmod(0o755)
    return folder, pid_file


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _running_in_group(group: int) -> list[int]:
    """The processes of process group `group` still running (not dead and awaiting their reaping)."""
    running = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[2] == str(group) and fields[0] not in ("Z", "X"):
            running.append(int(stat.parent.name))
    return running


def test_a_cold_step_run_fetches_its_brief_once_started_ahead(forge: Forge, tmp_path: Path) -> None:
    _held_with_a_step(forge, tmp_path)
    folder, log = logging_git(tmp_path)
    env = {"ASSAY_FORGE": forge.url, "ASSAY_CACHE_DIR": str(tmp_path / "new-machine"),
           "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    replayed = assay(*STEP, "--run", "r2", "--", "sh", "-c", _build(tmp_path), env=env)
    assert replayed.code == 0 and "already completed" in replayed.err, replayed
    assert (tmp_path / "builds").read_text() == "built\n"  # recorded, not run again
    fetches = [args for _, args in calls(log) if " fetch " in f" {args} " and "upload-pack" not in args]
    cache = ahead.cache_folder(forge.url, tmp_path / "new-machine")
    assert fetches == [f"--git-dir {cache} fetch --no-tags --no-write-fetch-head --no-auto-gc --no-auto-maintenance "
                       f"-q --depth={spacing.first_depth()} {forge.url} refs/assay/claims/alpha "
                       "refs/assay/journal/alpha"], fetches  # ahead's, and no other: the reader found it all there
    port = ForgeGit(forge.url, tmp_path / "new-machine")
    try:
        assert not port.holds_nothing() and port.round_trips["fetch"] == 0  # what it fetched, kept
    finally:
        port.close()


def test_the_port_waits_for_the_fetch_started_ahead_and_counts_it(forge: Forge, tmp_path: Path) -> None:
    _held_with_a_step(forge, tmp_path)
    os.environ["ASSAY_CACHE_DIR"] = str(tmp_path / "in-process")  # (restored by the test's pinned environment)
    tip = forge.tip("refs/assay/journal/alpha")
    lean.fetch_ahead(forge.url, "alpha")
    assert list(ahead.PENDING) == [ahead.cache_folder(forge.url)]
    port = ForgeGit(forge.url)
    try:
        assert port.read_typed([f"{tip}:entries.jsonl"])[0] is not None  # read once the fetch had ended
        assert not ahead.PENDING and port.round_trips["fetch"] == 1
    finally:
        port.close()
    lean.fetch_ahead(forge.url, "alpha")  # the cache is there now: a reader there fetches what it lacks itself
    assert not ahead.PENDING


@pytest.mark.parametrize("brief", ["Alpha", "../x", "", "a" * 65])
def test_no_fetch_is_started_for_an_id_that_is_no_briefs(forge: Forge, tmp_path: Path, brief: str) -> None:
    lean.fetch_ahead(forge.url, brief)
    lean.fetch_ahead(None, "alpha")  # no forge named: none is looked for (ASSAY_FORGE is unset here)
    assert not ahead.PENDING and not (tmp_path / "cache").exists()


def test_a_fetch_no_port_waited_for_ends_with_the_command(forge: Forge, tmp_path: Path) -> None:
    """The command fails on its input after the fetch started (before it read anything): the fetch is ended and
    reaped as the command exits, never left running on."""
    _held_with_a_step(forge, tmp_path)
    real = shutil.which("git")
    assert real is not None
    folder, pid_file = _fake_git(tmp_path, real)
    env = {"ASSAY_FORGE": forge.url, "ASSAY_CACHE_DIR": str(tmp_path / "new-machine"),
           "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    bad = assay(*STEP, "--input", "{not json", "--", "true", env=env)
    assert bad.code == 2 and "Traceback" not in bad.err, bad
    pid = int(pid_file.read_text())
    assert not _alive(pid), f"the fetch started ahead ({pid}) outlived its command"


@pytest.mark.parametrize("deaf", [False, True])
def test_a_fetch_that_hangs_is_ended_at_the_git_timeout_and_the_reader_fetches(forge: Forge, tmp_path: Path,
                                                                               deaf: bool) -> None:
    """Stopped with its helpers (its process group: here the `sleep` its shell waits on), by SIGKILL where SIGTERM
    does not end it, and though the command was started ignoring SIGTERM (`nohup`-like): never waited for on end."""
    _held_with_a_step(forge, tmp_path)
    real = shutil.which("git")
    assert real is not None
    folder, pid_file = _fake_git(tmp_path, real, deaf)
    env = {**os.environ, "ASSAY_FORGE": forge.url, "ASSAY_CACHE_DIR": str(tmp_path / "new-machine"),
           "ASSAY_GIT_TIMEOUT": "1", "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "assay", *STEP, "--run", "r2", "--", "sh", "-c", _build(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    assert proc.returncode == 0 and "already completed" in proc.stderr, proc  # fetched by the reader itself
    assert (tmp_path / "builds").read_text() == "built\n"
    pid = int(pid_file.read_text())
    assert not _alive(pid) and not _running_in_group(pid)


def test_a_cache_keeps_no_credentials_of_its_forges_url(tmp_path: Path) -> None:
    """What the cache's config names as its forge (`assay.forge`), whichever way a URL carries a login."""
    for url in ("ssh://deploy:hunter2222@example.invalid/r.git", "https://x-access-token:hunter3333@example.invalid/r",
                "file://user:hunter4444@/srv/forge.git"):
        port = ForgeGit(url, tmp_path / "caches")
        try:
            config = (Path(port.cache) / "config").read_text()
            assert "hunter" not in config and "example.invalid" in config or "/srv/forge.git" in config, config
        finally:
            port.close()


def test_the_names_ahead_mirrors_are_the_records_own() -> None:
    assert (lean.CLAIMS_PREFIX, lean.JOURNAL_PREFIX) == (records.CLAIMS_PREFIX, records.JOURNAL_PREFIX)
    assert ahead.FETCH[0] == "fetch" and "--depth" not in " ".join(ahead.FETCH)


def test_what_starts_the_fetch_loads_neither_subprocess_nor_re() -> None:
    """What a short command loads before its first fetch: the packages' names load as they are named (PEP 562)."""
    probe = ("import sys\nimport assay.entry, assay.lean, assay.config, assay.core.git.ahead, "
             "assay.core.journal.spacing\nprint(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                check=True).stdout.split())
    assert not loaded & {"subprocess", "re", "enum", "json", "assay.core.git.objects", "assay.core.records.codec",
                         "assay.core.journal.writer"}, sorted(loaded)


@pytest.mark.parametrize("package", ["assay.core.git", "assay.core.journal", "assay.core.records"])
def test_every_name_a_lazy_package_gives_is_its_modules_own(package: str) -> None:
    """Each name of `__all__` is found (in a fresh process, as a caller first names it) and is its module's own;
    any other is an AttributeError."""
    probe = (f"import importlib\npackage = importlib.import_module({package!r})\n"
             "homes = getattr(package, '_HOME', None) or dict.fromkeys(package.__all__, "
             "{'assay.core.journal': 'writer', 'assay.core.records': 'codec'}[package.__name__])\n"
             "assert sorted(homes) == sorted(package.__all__), sorted(set(homes) ^ set(package.__all__))\n"
             "for name, home in homes.items():\n"
             "    value = getattr(package, name)\n"
             "    assert value is getattr(importlib.import_module(f'{package.__name__}.{home}'), name), name\n"
             "try:\n    package.no_such_name\nexcept AttributeError:\n    print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.stdout.strip() == "ok", proc.stderr
