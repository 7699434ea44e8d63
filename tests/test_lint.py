"""Lint and types are part of the test run, so the README's one test command is the whole of CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_ruff_finds_nothing() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    proc = subprocess.run([str(ruff), "check", "."], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("**Run the tests**", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].strip()
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    ci = [ln for ln in lines if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci == [block]
