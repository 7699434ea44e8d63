"""The layer rule is a test: no module imports a row above its own, and there is no import circle."""

from __future__ import annotations

import shutil
from pathlib import Path

from assay import layers
from tests.conftest import REPO


def test_every_module_keeps_to_its_row_and_there_is_no_circle() -> None:
    assert layers.violations() == []
    every = layers.modules()
    assert {"core.git", "core.chain", "desk.loop", "observe.sweep", "cli"} <= set(every)
    assert all(layers.row_of(m) is not None for m in every)


def test_an_upward_import_a_circle_and_a_module_in_no_row_are_each_named(tmp_path: Path) -> None:
    package = tmp_path / "assay"
    shutil.copytree(REPO / "assay", package, ignore=shutil.ignore_patterns("__pycache__", "_defaults"))
    git = package / "core" / "git.py"
    git.write_text(git.read_text() + "\n\ndef _late() -> None:\n    from assay.cli import cli  # noqa\n")
    chain = package / "core" / "chain.py"
    chain.write_text(chain.read_text() + "\nfrom assay.core import claims  # noqa\n")
    (package / "core" / "stray.py").write_text("from assay.core import git\n")
    found = layers.violations(package)
    assert "assay.core.git (shared) imports assay.cli, a row above it (front)" not in found  # git is in ports
    assert "assay.core.git (ports) imports assay.cli, a row above it (front)" in found
    assert "assay.core.chain (chains) imports assay.core.claims, a row above it (writers)" in found
    assert "assay.core.stray is in no row of LAYERS" in found
    assert any(p.startswith("import circle: ") and "assay.core.chain" in p and "assay.core.claims" in p
               for p in found), found


def test_the_layer_table_in_the_docs_is_made_from_the_rule() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    assert layers.table() in text


def test_every_error_with_an_exit_code_is_in_errors_py() -> None:
    """A newcomer finds every error a command can end with, and its exit code, in one file."""
    from assay import docgen

    found = docgen._error_classes()
    assert len(found) > 20
    assert [f"{c.__module__}.{c.__qualname__}" for c in found if c.__module__ != "assay.errors"] == []
