"""Tables in `docs/` that mirror code, made from it: `python -m assay.docgen` rewrites them in place.

Each table sits between `<!-- generated: NAME -->` and `<!-- end generated -->` in a doc;
`python -m assay.docgen --check` (and tests/test_docs.py) fails when one differs from the code.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import assay
from assay import layers
from assay.core import claims, crash
from assay.core.records import STATES
from assay.errors import EXIT_CODES, AssayError

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"
CMD = "python -m assay.docgen"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.DOTALL)


def _source(what: str) -> str:
    return f"_Made by `{CMD}` from {what}; edit the code, not this table._"


def _code(items: Iterable[str]) -> str:
    return ", ".join(f"`{i}`" for i in items)


def crash_points() -> str:
    pairs = {f"{what}.{when}-push" for what in crash.PUSHES for when in ("before", "after")}
    lines = [_source("`assay.core.crash.PUSHES` and `assay.core.crash.POINTS`"), "",
             "Every compare-and-swap push (`chain.push`) is framed by `<what>.before-push` and "
             "`<what>.after-push`:", "",
             "| points | the push |", "|---|---|"]
    lines += [f"| `{what}.before-push`, `{what}.after-push` | {why} |" for what, why in crash.PUSHES.items()]
    lines += ["", "The other points:", "", "| point | where the process is killed |", "|---|---|"]
    lines += [f"| `{point}` | {why} |" for point, why in crash.POINTS.items() if point not in pairs]
    return "\n".join(lines)


def _states(states: Iterable[str | None]) -> str:
    order = [None, *STATES]
    return ", ".join("no claim yet" if s is None else f"`{s}`" for s in sorted(states, key=order.index))


def claim_transitions() -> str:
    lines = [_source("`TRANSITIONS`, `OUTCOMES`, `NEW_EPOCH_ACTIONS` and `HOLDER_ACTIONS` in `assay.core.claims`"), "",
             "| action | from | to | epoch | fenced |", "|---|---|---|---|---|"]
    for action, (starts, target) in claims.TRANSITIONS.items():
        if target is not None:
            to = f"`{target}`"
        elif action == "renew":
            to = "unchanged"
        else:
            to = f"the caller's choice: {_code(claims.OUTCOMES)}"
        epoch = "new" if action in claims.NEW_EPOCH_ACTIONS else "kept"
        fenced = "yes" if action in claims.HOLDER_ACTIONS else ""
        lines.append(f"| `{action}` | {_states(starts)} | {to} | {epoch} | {fenced} |")
    lines += ["", "*epoch* `new`: 1 for a brief never claimed, else the previous epoch + 1. *fenced*: only the "
              "claim's desk may act, and given an epoch, only at that epoch (else `errors.Fenced`)."]
    return "\n".join(lines)


def _error_classes() -> list[type[AssayError]]:
    """Every AssayError subclass in the package, errors.py first, then by module and line."""
    for info in pkgutil.walk_packages(assay.__path__, "assay."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: list[type[AssayError]] = []
    todo: list[type[AssayError]] = [AssayError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("assay.") and not cls.__name__.startswith("_") and cls not in found:
            found.append(cls)
        todo += cls.__subclasses__()
    return sorted(found, key=lambda c: (c.code, c.__module__ != "assay.errors", c.__module__,
                                        inspect.getsourcelines(c)[1]))


def exit_codes() -> str:
    lines = [_source("the `AssayError` classes (their `code`, and the first line of their docstring)"), "",
             "| exit | class | meaning |", "|---|---|---|",
             f"| 0 {EXIT_CODES[0]} | | the command did what it was asked |"]
    shown: set[int] = {0}
    for cls in _error_classes():
        if cls.code not in EXIT_CODES:
            raise ValueError(f"{cls.__qualname__} exits {cls.code}, which DESIGN.md does not list")
        doc = inspect.getdoc(cls) if "__doc__" in vars(cls) else None
        if not doc:
            raise ValueError(f"{cls.__module__}.{cls.__qualname__} needs a docstring: its first line is its meaning")
        exit_cell = "" if cls.code in shown else f"{cls.code} {EXIT_CODES[cls.code]}"
        shown.add(cls.code)
        name = f"{cls.__module__.removeprefix('assay.')}.{cls.__qualname__}"
        lines.append(f"| {exit_cell} | `{name}` | {doc.splitlines()[0]} |")
    return "\n".join(lines)


def layer_table() -> str:
    return "\n".join([_source("`assay.layers.LAYERS`, top row first"), "", layers.table()])


def scripted_verbs() -> str:
    from assay.agents.scripted import VERBS

    rows = [_source("`assay.agents.scripted.VERBS`"), "", "| line | what the agent does |", "|---|---|"]
    return "\n".join(rows + [f"| `{usage}` | {what} |" for usage, what in VERBS])


def mcp_tools() -> str:
    from assay.desk.mcpserver import TOOLS

    rows = [_source("`assay.desk.mcpserver.TOOLS`"), "", "| tool | arguments (* required) | what it does |",
            "|---|---|---|"]
    return "\n".join(rows + [f"| `{t.name}` | {t.arguments or '-'} | {t.description} |" for t in TOOLS])


def acp_policies() -> str:
    from assay.desk.acp import POLICIES, STEPS

    rows = [_source("`assay.desk.acp.POLICIES` and `STEPS`"), "", "| tool kind | journaled as step | policy |",
            "|---|---|---|"]
    return "\n".join(rows + [f"| `{kind}` | `{STEPS[kind]}` | {policy} |" for kind, policy in POLICIES.items()])


def glossary() -> str:
    from assay.cliexamples import glossary_table

    return glossary_table()


TABLES: dict[str, Callable[[], str]] = {
    "glossary": glossary,
    "scripted-verbs": scripted_verbs,
    "mcp-tools": mcp_tools,
    "acp-policies": acp_policies,
    "layers": layer_table,
    "crash-points": crash_points,
    "claim-transitions": claim_transitions,
    "exit-codes": exit_codes,
}


def regenerate(text: str, where: str = "") -> str:
    """`text` with every generated block made afresh from the code."""
    def fill(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in TABLES:
            raise ValueError(f"{where}: unknown generated table {name!r} (known: {', '.join(TABLES)})")
        return f"{m[1]}\n{TABLES[name]()}\n\n{m[4]}"

    if text.count("<!-- generated: ") != text.count("<!-- end generated -->"):
        raise ValueError(f"{where}: a generated block is not closed by `<!-- end generated -->`")
    return BLOCK.sub(fill, text)


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / DOCS).glob("*.md"))]


def tables_in(text: str) -> list[str]:
    return [m["name"] for m in BLOCK.finditer(text)]


def stale(root: Path = ROOT) -> list[str]:
    """The docs whose generated tables differ from the code."""
    out = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        if regenerate(text, str(path)) != text:
            out.append(str(path.relative_to(root)))
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed = stale()
    if check:
        for name in changed:
            print(f"{name}: generated tables are stale; run `{CMD}`", file=sys.stderr)
        return 1 if changed else 0
    for name in changed:
        path = ROOT / name
        path.write_text(regenerate(path.read_text(encoding="utf-8"), name), encoding="utf-8")
        print(f"updated {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
