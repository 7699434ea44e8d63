"""`--jq EXPR`: a command's JSON output through a jq program, as gh's `--jq` gives it: each result on a line, a
string bare, any other value as compact JSON.

jq itself does the work, through the `jq` package (its wheels carry libjq): an optional extra,
`pip install 'assay-desks[jq]'`, so a desk's host needs no C library it does not use. A program is compiled
before the command runs, so a bad one is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import json

from assay.errors import UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

EXTRA = "assay-desks[jq]"
_active: list[Any] = []  # the compiled program of the running command's --jq, if it has one


def compile_program(expr: str) -> Any:
    """The jq program `expr`, compiled; UsageError when jq is not installed or `expr` is no jq program."""
    try:
        import jq
    except ImportError:
        raise UsageError("--jq needs the jq package, which this installation of Assay lacks",
                         hint=f"install the extra: pip install '{EXTRA}' (or pipe --json into the jq command)"
                         ) from None
    try:
        return jq.compile(expr)
    except ValueError as exc:
        raise UsageError(f"--jq {expr!r} is not a jq program: {_said(exc)}",
                         hint="jq's manual: https://jqlang.org/manual/ (e.g. --jq '.claims[].brief')") from None


@contextlib.contextmanager
def filtering(expr: str | None) -> Iterator[None]:
    """While the command runs, `views.print_json` prints what `expr` selects (nothing changes for None)."""
    if expr is None:
        yield
        return
    _active.append(compile_program(expr))
    try:
        yield
    finally:
        _active.pop()


def active() -> Any | None:
    return _active[-1] if _active else None


def apply(program: Any, data: Any) -> str:
    """The lines `program` makes of `data`: strings bare, other values compact JSON."""
    try:
        found = program.input_text(json.dumps(data, sort_keys=True)).all()
    except ValueError as exc:
        raise UsageError(f"--jq {program.program_string!r} failed on this output: {_said(exc)}",
                         hint="the command itself ran; --json shows its output whole") from None
    return "".join((v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) + "\n" for v in found)


def _said(exc: ValueError) -> str:
    """jq's first line of complaint, without its `jq: error:` prefix."""
    return str(exc).strip().splitlines()[0].removeprefix("jq: error: ").rstrip(":")
