"""The suite's own layout: shared helpers live in tests/helpers/ (or tests/fakegithub/, tests/agentmodels/), and no
module under tests/ imports from a test file, so a test file can be moved, renamed or run alone."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def _names(node: ast.AST) -> list[str]:
    """The modules an import statement may load: `import a.b` loads a.b, `from a import b` a and perhaps a.b."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = "." * node.level + (node.module or "")
        return [base, *(f"{base}{'' if base.endswith('.') else '.'}{alias.name}" for alias in node.names)]
    return []


def cross_imports(root: Path) -> list[str]:
    """Every import, in any module under `root`, of a test file (`test_*`): `file:line imports module`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):  # nested imports too (inside a test)
            tests = [n for n in _names(node) if any(part.startswith("test_") for part in n.split("."))]
            if tests:
                found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)} imports {tests[0]}")
    return found


def test_no_module_under_tests_imports_from_a_test_file() -> None:
    assert cross_imports(REPO / "tests") == []


def test_the_check_names_each_kind_of_import_from_a_test_file(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    (root / "helpers").mkdir(parents=True)
    (root / "test_a.py").write_text("from tests.test_b import helper\n")
    (root / "test_c.py").write_text("import tests.test_b\n")
    (root / "test_d.py").write_text("def test_d():\n    from tests import test_b\n")
    (root / "test_e.py").write_text("from .test_b import helper\n")
    (root / "test_f.py").write_text("from . import test_b\n")
    (root / "helpers" / "bad.py").write_text("from tests.test_b import helper\n")
    (root / "test_b.py").write_text("from tests.helpers.good import helper\nfrom tests.conftest import git\n"
                                    "from tests.fakegithub import FakeGitHub\nimport pytest\n")
    assert cross_imports(root) == [
        "helpers/bad.py:1 imports tests.test_b",
        "test_a.py:1 imports tests.test_b",
        "test_c.py:1 imports tests.test_b",
        "test_d.py:2 imports tests.test_b",
        "test_e.py:1 imports .test_b",
        "test_f.py:1 imports .test_b",
    ]
