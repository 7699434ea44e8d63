"""Every help page ends with examples, and every example is a command Assay accepts (parsed by the CLI itself,
with the options each command has; nothing is run)."""

from __future__ import annotations

import shlex

import click
import pytest

from assay.cli import cli
from assay.cliexamples import EXAMPLES
from tests.conftest import assay


def pages(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = [(prefix.strip(), group)]
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            out += pages(cmd, f"{prefix}{name} ")
        else:
            out.append((f"{prefix}{name}", cmd))
    return out


def commands_in(example: str) -> list[list[str]]:
    """The `assay ...` command lines in one example (comments, pipes and `&&` set aside)."""
    line = example.split("    #")[0]
    parts = [p.split(">")[0] for chunk in line.split("&&") for p in chunk.split("|")]
    return [shlex.split(p)[1:] for p in parts if p.strip().startswith("assay ")]


def parse(argv: list[str]) -> click.Command:
    """Resolve `argv` to its command and parse its options and arguments, as `assay` would before running it."""
    ctx = cli.make_context("assay", list(argv))
    cmd: click.Command = cli
    while isinstance(cmd, click.Group):
        rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])), *ctx.args]
        name, sub, args = cmd.resolve_command(ctx, rest)
        assert sub is not None and name is not None, argv
        ctx = sub.make_context(name, args, parent=ctx)
        cmd = sub
    return cmd


@pytest.mark.parametrize(("path", "cmd"), pages(cli), ids=lambda v: v if isinstance(v, str) else "")
def test_every_help_page_has_examples_that_parse(path: str, cmd: click.Command) -> None:
    assert path in EXAMPLES, f"`assay {path}` has no examples (add them to assay/cliexamples.py)"
    assert cmd.epilog and "Examples:" in cmd.epilog
    for example in EXAMPLES[path]:
        found = commands_in(example)
        assert found, example
        for argv in found:
            parse(argv)


def test_no_example_names_a_command_that_does_not_exist() -> None:
    assert set(EXAMPLES) == {path for path, _ in pages(cli)}


def test_a_help_page_prints_its_examples() -> None:
    run = assay("claims", "--help")
    assert run.code == 0 and "Examples:\n    $ assay claims --state held" in run.out
    top = assay("--help")
    assert "Start:" in top.out and "Watch and judge:" in top.out and "Examples:" in top.out


READS_OR_RUNS = {"step run", "step value", "step progress", "step turn", "step answer", "desk run", "help",
                 "review diff", "board serve", "demo", "completion", "mcp"}  # mcp speaks JSON-RPC on stdio


def test_every_command_that_changes_something_answers_in_json() -> None:
    """Scripts drive Assay: each command that writes (to the forge or the checkout) or reports a judgement takes
    --json. The rest print what they run or read (a step's output, a patch, a server's address)."""

    def leaves(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
        found: list[tuple[str, click.Command]] = []
        for name, cmd in group.commands.items():
            found += leaves(cmd, f"{prefix}{name} ") if isinstance(cmd, click.Group) else [(f"{prefix}{name}", cmd)]
        return found

    without = {name for name, cmd in leaves(cli)
               if not any("--json" in p.opts for p in cmd.params if isinstance(p, click.Option))}
    assert without == READS_OR_RUNS


def test_the_top_level_help_ends_with_the_words_assay_uses() -> None:
    from assay.cliexamples import GLOSSARY

    shown = assay("--help", env={"COLUMNS": "80"})
    words = shown.out.split("\nWords:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.strip().split("  ")[0] for line in words.splitlines() if line[2:3] != " "] == \
        [word for word, _ in GLOSSARY]
    assert max(len(line) for line in shown.out.splitlines()) <= 80


def test_the_exit_codes_page_lists_every_code_and_error_class_of_errors_py() -> None:
    """`assay help exit-codes` is made from assay/errors.py: every code, each error class under its own code."""
    import re

    from assay import errors

    page = assay("help", "exit-codes")
    assert page.code == 0 and max(len(line) for line in page.out.splitlines()) <= 80
    listed: dict[int, list[str]] = {}
    for line in page.out.splitlines():
        code = re.match(r"\s*(\d+)  ", line)
        if code:
            listed[int(code[1])] = []
        elif re.match(r" {6}[A-Z]\w+  ", line):
            listed[max(listed)].append(line.split()[0])
    assert set(listed) == {*errors.EXIT_CODES, *errors.OTHER_EXITS}
    for cls in errors.coded_errors():
        assert cls.__name__ in listed[cls.code], cls
    assert sum(map(len, listed.values())) == len(errors.coded_errors())
    assert "exits with its command's exit code" in page.out
    assert errors.DESK_GONE == __import__("assay.desk.steprequest").desk.steprequest.DESK_GONE
    claims_help = assay("help", "claims")
    assert claims_help.code == 0 and claims_help.out.startswith("Usage: assay claims [OPTIONS]")
