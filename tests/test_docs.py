"""The docs are checked against the code: generated tables, module paths, dotted names and commands."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType
from typing import Any

import click
import pytest

import assay
from assay import docgen
from assay.core.deskspec import AGENT_KEYS
from tests.conftest import REPO

DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
_SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
_FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.DOTALL)
_DOTTED = re.compile(r"(?<![\w./-])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?(?![\w/-])")
NOT_CODE = {*(f"agent.{key}" for key in AGENT_KEYS),  # keys of desks/<name>.yaml
            "retire.enabled", "retire.after_s",  # keys of sweepers/<name>.yaml
            "github.token"}  # a workflow expression
FILE_SUFFIXES = ("py", "md", "json", "jsonl", "yaml", "yml", "toml", "git", "log", "html")  # file names: `index.html`


def _modules() -> dict[str, ModuleType]:
    """Every module of the package, by its name without `assay.` (`core.forge.plain`), and by its own name alone
    where that is unique (`chain`)."""
    out = {}
    for info in pkgutil.walk_packages(assay.__path__, "assay."):
        if not info.name.endswith("__main__"):
            out[info.name.removeprefix("assay.")] = importlib.import_module(info.name)
    short: dict[str, list[str]] = {}
    for name in out:
        short.setdefault(name.rpartition(".")[2], []).append(name)
    for leaf, names in short.items():  # the docs name a module by its file (`chain.push`), in whichever wing
        if len(names) == 1 and leaf not in out:
            out[leaf] = out[names[0]]
    return out


def _spans(text: str) -> list[str]:
    """Inline code spans, and the lines of fenced blocks."""
    blocks = _FENCE.findall(text)
    rest = _FENCE.sub("", text)
    return [s.replace("\n", " ") for s in _SPAN.findall(rest)] + [ln for b in blocks for ln in b.splitlines()]


def test_generated_tables_are_current() -> None:
    stale = docgen.stale(REPO)
    assert not stale, f"{', '.join(stale)}: generated tables are stale; run `python -m assay.docgen`"


def test_every_generated_table_is_in_the_docs() -> None:
    found = [name for path in DOCS for name in docgen.tables_in(path.read_text(encoding="utf-8"))]
    assert sorted(found) == sorted(docgen.TABLES), "each table goes between its markers in exactly one doc"


def test_a_table_between_markers_is_made_afresh() -> None:
    text = "intro\n<!-- generated: claim-transitions -->\nold rows\n<!-- end generated -->\nafter\n"
    made = docgen.regenerate(text)
    assert "old rows" not in made and "| `force_release` |" in made and made.endswith("<!-- end generated -->\nafter\n")
    assert docgen.regenerate(made) == made


def test_the_module_files_the_docs_name_exist() -> None:
    missing = []
    for path in DOCS:
        for name in re.findall(r"`([\w/]+\.py)`", path.read_text(encoding="utf-8")):
            found = [REPO / name] if name.startswith(("assay/", "tests/", "benchmarks/")) else \
                list((REPO / "assay").rglob(name))  # a module named by its file, in whichever wing it sits
            if not any(where.is_file() for where in found):
                missing.append(f"{path.name}: {name}")
    assert not missing, f"the docs name modules that do not exist: {missing}"


def _resolve(obj: Any, parts: list[str], modules: dict[str, ModuleType]) -> bool:
    for part in parts:
        fields = getattr(obj, "__dataclass_fields__", {})
        set_in_init = inspect.isclass(obj) and f"self.{part} = " in inspect.getsource(obj)
        if hasattr(obj, part) or part in fields or set_in_init:
            obj = getattr(obj, part, None)
        elif inspect.ismodule(obj) and f"{obj.__name__.removeprefix('assay.')}.{part}" in modules:
            obj = modules[f"{obj.__name__.removeprefix('assay.')}.{part}"]
        else:
            return False
    return True


def test_the_dotted_names_the_docs_use_exist() -> None:
    modules = _modules()
    classes = {name: cls for mod in modules.values() for name, cls in vars(mod).items()
               if inspect.isclass(cls) and cls.__module__ == mod.__name__}
    missing = []
    for path in DOCS:
        for span in _spans(path.read_text(encoding="utf-8")):
            for token in _DOTTED.findall(span):
                parts = token.removesuffix("()").split(".")
                if parts[-1] in FILE_SUFFIXES or token in NOT_CODE:
                    continue
                if parts[0] == "assay":
                    parts = parts[1:]
                if parts[0] in modules:
                    root: Any = modules[parts[0]]
                elif parts[0] in classes:
                    root = classes[parts[0]]
                else:
                    continue
                if not _resolve(root, parts[1:], modules):
                    missing.append(f"{path.name}: {token}")
    assert not missing, f"the docs name things the code does not have: {sorted(set(missing))}"


def _check_command(words: list[str]) -> str | None:
    """None if `assay WORDS…` names real commands and options; else what is wrong."""
    from assay.cli import cli

    cmd: click.Command = cli
    for word in words:
        word = word.strip("[]").rstrip(",.;:)")
        if word in ("--", "") or word.startswith(("<", "{", "…", "'", '"')) or word[:1].isupper():
            return None
        if word.startswith("-"):
            if isinstance(cmd, click.Group) and cmd.name == "claim":
                cmd = cmd.commands["take"]  # `assay claim --singleton …`
            names = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
            if word.split("=")[0] not in names:
                return f"{cmd.name} has no option {word}"
            continue
        if not isinstance(cmd, click.Group):
            continue  # an argument's value
        alternatives = [w for w in word.split("|") if w]
        if all(w in cmd.commands for w in alternatives):
            cmd = cmd.commands[alternatives[0]]
            if len(alternatives) > 1:
                return None
        elif cmd.name == "claim":
            cmd = cmd.commands["take"]  # `assay claim BRIEF …`
        else:
            return f"no command {word!r} under {cmd.name}"
    return None


def test_the_commands_the_docs_show_exist() -> None:
    wrong = []
    for path in DOCS:
        for span in _spans(path.read_text(encoding="utf-8")):
            for m in re.finditer(r"(?<![\w./-])(?:\.venv/bin/)?assay ((?:[^\s#;&]+ ?)*)", span):
                problem = _check_command(m[1].split())
                if problem:
                    wrong.append(f"{path.name}: `assay {m[1].strip()}`: {problem}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("doc", "most"), [("README.md", 1500), ("docs/architecture.md", 3000),
                                           ("docs/data-model.md", 6650)])
def test_the_docs_a_newcomer_reads_stay_short(doc: str, most: int) -> None:
    words = len((REPO / doc).read_text(encoding="utf-8").split())
    assert words <= most, f"{doc} has {words} words, more than {most}: cut before adding"


def test_the_scripted_agents_table_names_every_verb_it_runs() -> None:
    import inspect

    from assay.agents import scripted

    source = inspect.getsource(scripted.main)
    handled = set(re.findall(r'verb == "([a-z-]+)"', source))
    handled |= {v for group in re.findall(r"verb in \(([^)]*)\)", source) for v in re.findall(r'"([a-z-]+)"', group)}
    assert handled == {usage.split()[0] for usage, _ in scripted.VERBS}
