"""Every crash point in the code is registered in `assay.core.crash.POINTS`, and the crash suite arms every one.

The points are read from the source, not from the registry: each `crash_point("…")` call, and each
`chain.push(…, what)`, which `chain.push` frames with `<what>.before-push` and `<what>.after-push`.
The armed points are read from the `CASES` tables of the crash-suite modules in tests/crash/.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.core.claims import TRANSITIONS
from assay.core.crash import POINTS, PUSHES
from tests.conftest import REPO

PACKAGE = REPO / "assay"
CRASH_TESTS = Path(__file__).resolve().parent
FRAMES = (".before-push", ".after-push")  # what chain.push adds to its `what`
# chain.push call sites whose `what` is computed from a claim action (wait, release, force_release …)
CLAIM_ACTION_PUSHES = frozenset({"core/claims.py:Claims._write", "core/claims.py:Claims._claim_apart",
                                 "core/journal/writer.py:Journal._flush_once",
                                 "core/journal/writer.py:_append.attempt"})
FRAMING = frozenset({"core/records/chain.py:push"})  # the one crash_point call that is not a literal
_NAME = re.compile(r"[a-z][a-z-]*")


@dataclass(frozen=True)
class Site:
    """A crash point or a CAS push in the source: where, and its literal name (None if computed)."""

    where: str  # file:qualified function
    line: int
    kind: str  # "point" or "push"
    name: str | None
    constants: tuple[str, ...] = ()  # the string constants in a computed name
    suffixes: tuple[str, ...] = ()  # for an f-string point name: its literal tail


class _Finder(ast.NodeVisitor):
    def __init__(self, file: str) -> None:
        self.file = file
        self.scope: list[str] = []
        self.sites: list[Site] = []
        self.actions: set[str] = set()

    def _enter(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _enter

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "action" for t in node.targets):
            self.actions |= _constants(node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        where = f"{self.file}:{'.'.join(self.scope)}"
        if called == "crash_point" and node.args:
            self.sites.append(_site(where, node, "point", node.args[0]))
        is_push = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "chain" \
            and called == "push"
        if is_push:
            what = node.args[2] if len(node.args) > 2 else next((k.value for k in node.keywords if k.arg == "what"),
                                                                None)
            assert what is not None, f"{where}: chain.push without a `what`"
            self.sites.append(_site(where, node, "push", what))
        for arg in [*node.args, *(k.value for k in node.keywords)]:  # claim actions passed along
            if isinstance(arg, ast.Constant) and arg.value in TRANSITIONS:
                self.actions.add(arg.value)
        self.generic_visit(node)


def _constants(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _site(where: str, call: ast.Call, kind: str, arg: ast.expr) -> Site:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return Site(where, call.lineno, kind, arg.value)
    suffixes: tuple[str, ...] = ()
    if isinstance(arg, ast.JoinedStr) and isinstance(arg.values[-1], ast.Constant):
        suffixes = (str(arg.values[-1].value),)
    return Site(where, call.lineno, kind, None, tuple(sorted(_constants(arg))), suffixes)


def scan(sources: Iterable[tuple[str, str]]) -> tuple[list[Site], set[str]]:
    """The crash points and pushes in `sources` (file name, text), and the claim actions they pass around."""
    sites: list[Site] = []
    actions: set[str] = set()
    for file, text in sources:
        finder = _Finder(file)
        finder.visit(ast.parse(text, file))
        sites += finder.sites
        actions |= finder.actions
    return sites, actions


def package_sources() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield str(path.relative_to(PACKAGE)), path.read_text(encoding="utf-8")


def unregistered(sites: Sequence[Site], actions: set[str]) -> list[str]:
    """Each crash point the source can reach that `POINTS` lacks, or a call site this test cannot read."""
    problems: list[str] = []
    for s in sites:
        at = f"{s.where} (line {s.line})"
        if s.kind == "point" and s.name is not None:
            if s.name not in POINTS:
                problems.append(f"{at}: crash point {s.name!r} is not in assay.core.crash.POINTS")
        elif s.kind == "point":
            if s.where not in FRAMING or set(s.suffixes) - set(FRAMES):
                problems.append(f"{at}: a computed crash point name; name it literally or teach this test")
        else:
            whats: set[str] = set()
            if s.name is not None:
                whats.add(s.name)
            elif s.where in CLAIM_ACTION_PUSHES:
                whats |= {a.replace("_", "-") for a in actions}
                whats |= {c for c in s.constants if _NAME.fullmatch(c)}
            else:
                problems.append(f"{at}: chain.push with a computed `what`; name it literally or teach this test")
            for what in sorted(whats):
                if what not in PUSHES:
                    problems.append(f"{at}: push {what!r} is not in assay.core.crash.PUSHES")
                problems += [f"{at}: crash point {what}{f!r} is not in assay.core.crash.POINTS"
                             for f in FRAMES if f"{what}{f}" not in POINTS]
    return problems


# -- the points the crash suite arms ------------------------------------------------------------------

def crash_case_tables() -> dict[str, Mapping[str, Sequence[Any]]]:
    """module -> its CASES (case -> (armed points, …)), for every crash-suite module in tests/crash/."""
    tables = {}
    for path in sorted(CRASH_TESTS.glob("test_*.py")):
        module = importlib.import_module(f"tests.crash.{path.stem}")
        if hasattr(module, "CASES"):
            tables[path.stem] = module.CASES
    return tables


def armed(tables: Iterable[Mapping[str, Sequence[Any]]]) -> set[str]:
    """The points the cases arm, without their `:step`."""
    out: set[str] = set()
    for cases in tables:
        for value in cases.values():
            points = value[0]
            assert isinstance(points, list) and points, f"a case's first item is its list of points, not {value!r}"
            out |= {str(p).partition(":")[0] for p in points}
    return out


def missing(points: Iterable[str], tables: Iterable[Mapping[str, Sequence[Any]]]) -> list[str]:
    return sorted(set(points) - armed(tables))


# -- the tests ------------------------------------------------------------------------------------

def test_every_crash_point_in_the_source_is_registered() -> None:
    sites, actions = scan(package_sources())
    assert {s.kind for s in sites} == {"point", "push"} and len(sites) > 10  # the scan does see the code
    assert {"claim", "takeover", "wait", "force_release"} <= actions
    assert unregistered(sites, actions) == []


def test_the_crash_suite_arms_every_registered_point() -> None:
    tables = crash_case_tables()
    assert {"test_crash_suite", "test_crash_cli"} <= set(tables)
    assert missing(POINTS, tables.values()) == [], "crash points no case arms; add a case in tests/crash/"
    unknown = sorted(armed(tables.values()) - set(POINTS))
    assert unknown == [], f"cases arm points that do not exist: {unknown}"


def test_a_point_without_a_case_is_named() -> None:
    tables = list(crash_case_tables().values())
    dropped = [{k: v for k, v in t.items() if not any(str(p).startswith("merge.after-push") for p in v[0])}
               for t in tables]
    assert missing(POINTS, dropped) == ["merge.after-push"]
    assert missing([*POINTS, "board.after-render"], tables) == ["board.after-render"]


def test_an_unregistered_point_or_push_in_the_source_is_named() -> None:
    source = (
        "from assay import chain\n"
        "from assay.core.crash import crash_point\n"
        "def render(git, updates, brief):\n"
        "    crash_point('board.after-render', brief)\n"
        "    chain.push(git, updates, 'board')\n"
        "    chain.push(git, updates, what=brief)\n"
        "    claims._change(brief, 'expire')\n"
    )
    sites, actions = scan([("board.py", source)])
    assert actions == {"expire"}
    problems = unregistered(sites, actions)
    assert any("'board.after-render' is not in assay.core.crash.POINTS" in p for p in problems)
    assert any("push 'board' is not in assay.core.crash.PUSHES" in p for p in problems)
    assert any("board.py:render (line 6): chain.push with a computed `what`" in p for p in problems)
    # a new claim action that reaches the claim writers' pushes needs its points too
    claims_sites, _ = scan(package_sources())
    writer = [s for s in claims_sites if s.where == "core/claims.py:Claims._write"]
    assert any("push 'adopt' is not in assay.core.crash.PUSHES" in p for p in unregistered(writer, {"adopt"}))
    assert unregistered(writer, {"expire"}) == []
