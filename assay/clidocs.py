"""The CLI reference (`docs/cli.md`), made from the commands' own help: `python -m assay.clidocs > docs/cli.md`."""

from __future__ import annotations

import click

from assay.cli import cli


def _walk(group: click.Group, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out: list[tuple[list[str], click.Command]] = []
    for name in sorted(group.commands):
        cmd = group.commands[name]
        out.append(([*path, name], cmd))
        if isinstance(cmd, click.Group):
            out += _walk(cmd, [*path, name])
    return out


def reference() -> str:
    lines = ["# The `assay` command line", "",
             "Made from each command's `--help` by `python -m assay.clidocs`; a test keeps it current.", ""]
    for path, cmd in _walk(cli, []):
        name = " ".join(["assay", *path])
        ctx = click.Context(cmd, info_name=name, terminal_width=100, max_content_width=100,
                            help_option_names=["-h", "--help"])  # as every command inherits them from `assay`
        lines += [f"## {name}", "", "```", cmd.get_help(ctx).strip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    click.echo(reference(), nl=False)
