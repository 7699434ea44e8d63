"""The layer rule is a test: no module imports a row above its own, and there is no import circle."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from assay import layers
from tests.conftest import REPO


def test_every_module_keeps_to_its_row_and_there_is_no_circle() -> None:
    assert layers.violations() == []
    every = layers.modules()
    assert {"core.git", "core.records.chain", "desk.loop", "observe.sweep", "cli"} <= set(every)
    assert all(layers.row_of(m) is not None for m in every)


def test_an_upward_import_a_circle_and_a_module_in_no_row_are_each_named(tmp_path: Path) -> None:
    package = tmp_path / "assay"
    shutil.copytree(REPO / "assay", package, ignore=shutil.ignore_patterns("__pycache__", "_defaults"))
    git = package / "core" / "git" / "__init__.py"
    git.write_text(git.read_text() + "\n\ndef _late() -> None:\n    from assay.cli import cli  # noqa\n")
    chain = package / "core" / "records" / "chain.py"
    chain.write_text(chain.read_text() + "\nfrom assay.core import claims  # noqa\n")
    (package / "core" / "stray.py").write_text("from assay.core import git\n")
    found = layers.violations(package)
    assert "assay.core.git (shared) imports assay.cli, a row above it (front)" not in found  # git is in ports
    assert "assay.core.git (ports) imports assay.cli, a row above it (front)" in found
    assert "assay.core.records.chain (chains) imports assay.core.claims, a row above it (writers)" in found
    assert "assay.core.stray is in no row of LAYERS" in found
    assert any(p.startswith("import circle: ") and "assay.core.records.chain" in p and "assay.core.claims" in p
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


# -- who writes: docs/architecture.md's "every durable write is in `core/`, refs through `chain.py`" ---------------

GIT_WRITES = {"push", "send-pack", "receive-pack", "update-ref"}  # git's commands that move a forge's refs
NOT_RECORDS = {  # commits made with `write_commit` that are not records on a chain, and why
    ("core.custody", "spawn.attempt"): "a child brief's file added to main",
    ("core.forge.plain", "PlainReviews.prepare_merge"): "the merge of a review into main",
    ("core.landing", "superseded"): "a test merge, in the cache only",
    ("core.wip", "commit"): "a worktree's snapshot, a commit of the work",
    ("desk.land", "rows_on_main"): "a check merge, in the cache only",
}
BUDGET = ("core.forge.budget", "ForgeBudget")  # its ledger: commit and lease of its own, no crash point (see below)


def _writes(root: Path = layers.PACKAGE) -> list[tuple[str, str, str]]:
    """(module, function, what) for each call in the package that writes the forge or makes a commit:
    `<x>.push(…)`, `push_new_branch`, `write_commit`, `chain.commit`, a git command in `GIT_WRITES`."""
    found: list[tuple[str, str, str]] = []
    for module, path in layers.modules(root).items():
        found += [(module, where, what) for where, what in _calls(ast.parse(path.read_text(encoding="utf-8")), [])]
    return found


def _calls(node: ast.AST, scope: list[str]) -> list[tuple[str, str]]:
    """(function, what) for each write call under `node`, `scope` the names of the defs around it."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        scope = [*scope, node.name]
    out = []
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        first = node.args[0] if node.args else None
        if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
            first = first.elts[0]
        if name in ("push", "push_new_branch", "write_commit") or (name, owner) == ("commit", "chain"):
            out.append((".".join(scope), f"{owner}.{name}" if owner == "chain" else name))
        elif name in ("git", "run_git") and isinstance(first, ast.Constant) and first.value in GIT_WRITES:
            out.append((".".join(scope), f"git {first.value}"))
    for child in ast.iter_child_nodes(node):
        out += _calls(child, scope)
    return out


def test_every_durable_write_is_in_core() -> None:
    """Outside `core/` nothing pushes, prepares a record commit or runs a git command that moves refs: the sweep's
    observations go through `observations.write_observations`. Left outside: a new forge's first main, pushed by
    `assay init` and the demo (`WorkRepo.push_new_branch`), and a check merge `land.py` makes in the cache (a
    commit, never pushed). Packing a forge's refs (`pack_forge_refs`) moves no ref and is not counted."""
    found = _writes()
    outside = {(m, f, w) for m, f, w in found if not m.startswith("core.")}
    assert outside == {("project", "init_project", "push_new_branch"), ("demo", "prepare", "push_new_branch"),
                       ("desk.land", "rows_on_main", "write_commit")}
    assert ("core.observations", "write_observations", "chain.push") in found  # the scan sees chain's callers


def test_refs_are_written_and_record_commits_prepared_through_chain() -> None:
    """Every push of a ref is `chain.push` (which alone calls `ForgeGit.push`), every record commit is
    `chain.commit` (which alone calls `write_commit` for one); the retired index and keep chain too.
    The exception is the GitHub write budget's ledger (`forge/budget.py`): one commit with no parent, pushed
    under a lease by `ForgeGit.push` in its own loop (a failed grant is taken again; it has no crash point)."""
    found = _writes()
    pushes = {(m, f) for m, f, w in found if w == "push"}
    assert pushes == {("core.records.chain", "push"), (BUDGET[0], f"{BUDGET[1]}.wait_s"),
                      ("core.git.push", "Pushing.push")}  # ForgeGit.push handing a push to the host's `pushgroup`
    commits = {(m, f) for m, f, w in found if w == "write_commit"} - {("core.records.chain", "commit")}
    assert commits - set(NOT_RECORDS) == {(BUDGET[0], f"{BUDGET[1]}._write")}
    assert set(NOT_RECORDS) <= commits, "a place NOT_RECORDS names makes no commit now: drop it"
    assert {(m, f) for m, f, w in found if w == "chain.commit"} >= {("core.retire", "_retire_updates"),
                                                                    ("core.observations", "write_observations")}
    git_runs = {(m, f, w) for m, f, w in found if w.startswith("git ")}
    assert git_runs == {("core.git.workrepo", "WorkRepo.push_new_branch", "git push")}, git_runs


def test_a_write_outside_core_is_found(tmp_path: Path) -> None:
    package = tmp_path / "assay"
    shutil.copytree(REPO / "assay", package, ignore=shutil.ignore_patterns("__pycache__", "_defaults"))
    sweep = package / "observe" / "sweep.py"
    sweep.write_text(sweep.read_text() + "\n\ndef _late(git, u):\n    chain.push(git, [u], 'sweeper')\n"
                     "    git.write_commit('t', [], 'm', None)\n    run_git(['update-ref', 'refs/x', 'y'])\n")
    found = {(m, f, w) for m, f, w in _writes(package) if m == "observe.sweep"}
    assert found == {("observe.sweep", "_late", "chain.push"), ("observe.sweep", "_late", "write_commit"),
                     ("observe.sweep", "_late", "git update-ref")}


def test_the_work_branch_is_spelled_once() -> None:
    """A brief's work branch, `assay/<brief>`, is `records.WORK_BRANCH_PREFIX` (and as a ref
    `WORK_BRANCH_REF_PREFIX`) everywhere: no module writes either out itself."""
    spelled = []
    for module, path in layers.modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            texts = [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []
            if isinstance(node, ast.JoinedStr):
                texts = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if any(t.endswith(("assay/", "refs/heads/assay")) or "heads/assay/" in t for t in texts):
                spelled.append(f"assay.{module}:{getattr(node, 'lineno', 0)}")
    assert [s.partition(":")[0] for s in spelled] == ["assay.core.records.codec"], spelled  # WORK_BRANCH_PREFIX = …


# -- small things: CONVENTIONS.md's "functions rarely over 40"; over 60 only with the reason said ------------------

MAX_LINES = 60  # from `def` to its last line, docstring included


def _too_long(source: str, module: str) -> list[str]:
    """`module.function (n lines)` for each function or method of `source` over `MAX_LINES` lines whose docstring
    has no line with "Long: " (why its length is its clarity)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            said = any("Long: " in line for line in (ast.get_docstring(node) or "").splitlines())
            if length > MAX_LINES and not said:
                found.append((node.lineno, f"assay.{module}.{node.name} ({length} lines)"))
    return [name for _, name in sorted(found)]  # in the order of the file


def test_no_function_is_over_60_lines_without_a_reason_in_its_docstring() -> None:
    found = [f for module, path in layers.modules().items() for f in _too_long(path.read_text("utf-8"), module)]
    assert found == [], f"split these, or say why their length is their clarity in a docstring line 'Long: …': {found}"


def test_a_long_function_is_named_unless_its_docstring_says_why() -> None:
    body = [f"x{i} = {i}" for i in range(58)]
    method, function = ("".join(f"{pad}{line}\n" for line in body) for pad in (" " * 8, " " * 4))
    source = (f'class C:\n    def told(self):\n        """Why.\n\n        Long: a table."""\n{method}{method}'
              f'    def untold(self):\n        """Short, it says."""\n{method}        return 0\n'
              f"def fits():\n{function}    return 0\n"
              f"async def over():\n{function}    x = 1\n    return x\n")
    assert _too_long(source, "m") == ["assay.m.untold (61 lines)", "assay.m.over (61 lines)"]
