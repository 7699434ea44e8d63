"""The layer rule: each module imports only modules of its own row or of the rows below it.

`LAYERS` is the map, top row first; `violations` checks the package's imports against it (any
import: at module level, inside a function, or for type checking only) and finds import circles.
tests/test_layers.py runs it, and `docgen` draws the table in docs/architecture.md from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from assay.core.records.recordtype import dataclass

PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # dotted names under `assay`; a package stands for every module in it
    what: str


LAYERS = (
    Layer("entry", ("__main__", "entry", "clidocs", "docgen", "layers"),
          "entry; generated docs"),
    Layer("front", ("cli", "lean", "cliexamples", "demo", "project", "views", "jqfilter", "agents"),
          "parse, call, render; demo; scripted agent"),
    Layer("desk loop", ("desk.loop", "desk.supervisor", "desk.hosted"), "settle, resume, claim; supervise"),
    Layer("one brief", ("desk.work",), "one brief's durable steps"),
    Layer("desk parts", ("desk.agent", "desk.stepserver", "desk.verify", "desk.queue", "desk.effects",
                         "desk.stepclient", "desk.steprequest", "desk.sessions", "desk.events", "desk.mcpserver",
                         "desk.isolation", "desk.nsinit", "desk.limits", "desk.procs", "desk.land", "desk.acp",
                         "desk.acpserve", "desk.hostbeat"),
          "agents, steps, verify, queue, events, landing"),
    Layer("observers", ("observe",), "sweep, board, audit: whole-forge reads"),
    Layer("config", ("config",), "which forge; `Ports`"),
    Layer("verbs", ("core.steps", "core.custody", "core.retire", "core.signals", "core.landing"),
          "durable steps, custody, retiring, signals, supersession"),
    Layer("journal", ("core.journal",), "the journal: one writer, caches, snapshots"),
    Layer("writers", ("core.claims", "core.forge"), "the claim state machine; the review ports (plain, GitHub)"),
    Layer("specs", ("core.deskspec", "core.retired", "core.scan"),
          "desk definitions; the retired index; one read of the forge"),
    Layer("chains", ("core.records.chain", "core.briefs", "core.outcomes", "core.observations", "core.forgevalues",
                     "core.wip", "core.footprints"),
          "record chains, briefs, outcomes, footprints"),
    Layer("ports", ("core.git", "core.records", "core.envs"),
          "git runs git; records' codec; agents' environments"),
    Layer("shared", ("core.lives", "core.stops", "core.credentials", "core.cachefile", "core.crash", "core.digests",
                     "core.pushgroup", "core.listgroup", "core.fetchgroup", "core.groupbell", "core.records.recordtype",
                     "core.lazy", "errors", ""),
          "errors, crash points, lives, credentials, caches, digests, records, host groups"),
)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name under `assay` ("" for the package itself)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            if parts and not ast.parse(path.read_text(encoding="utf-8")).body[1:]:
                continue  # a wing's face: its docstring and nothing else
        found[".".join(parts)] = path
    return found


def row_of(module: str) -> int | None:
    """The index of the row `module` belongs to (the longest name that is it or a package holding it)."""
    best: tuple[int, int] | None = None
    for i, layer in enumerate(LAYERS):
        for name in layer.modules:
            holds = module == name or (name and module.startswith(name + "."))
            if holds and (best is None or len(name) > best[0]):
                best = (len(name), i)
    return best[1] if best else None


def imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The package modules `path` imports, by dotted name under `assay`."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` steps up
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(["assay", *parts, *([base] if base else [])])
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            if name != "assay" and not name.startswith("assay."):
                continue
            dotted = name.removeprefix("assay").removeprefix(".")
            while dotted and dotted not in known:  # `from assay.core import chain` names the module chain
                dotted = dotted.rpartition(".")[0]
            if dotted != module:
                out.add(dotted)
    return out


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(root)
    return {m: imports(p, m, set(found)) for m, p in found.items()}


def violations(root: Path = PACKAGE) -> list[str]:
    """Each import that goes up a row, each module in no row, and each import circle, in words."""
    edges = graph(root)
    problems = [f"assay.{m or '(package)'} is in no row of LAYERS" for m in edges if row_of(m) is None]
    for module, targets in sorted(edges.items()):
        here = row_of(module)
        for target in sorted(targets):
            there = row_of(target)
            if here is not None and there is not None and there < here:
                problems.append(f"assay.{module} ({LAYERS[here].name}) imports assay.{target}, "
                                f"a row above it ({LAYERS[there].name})")
    problems += [f"import circle: {' -> '.join(f'assay.{m}' for m in circle)}" for circle in circles(edges)]
    return problems


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def table() -> str:
    """The layer table for docs/architecture.md."""
    rows = ["| row | modules | what |", "|---|---|---|"]
    for layer in LAYERS:
        names = ", ".join(f"`{_file(m)}`" for m in layer.modules)
        rows.append(f"| {layer.name} | {names} | {layer.what} |")
    return "\n".join(rows)


def _file(module: str) -> str:
    """How the docs name a module: its file, or its folder for a package."""
    if not module:
        return "__init__.py"
    path = module.replace(".", "/")
    return f"{path}.py" if (PACKAGE / f"{path}.py").is_file() else f"{path}/"
