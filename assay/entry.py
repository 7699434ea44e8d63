"""The `assay` command's entry point: an agent's steps take the fast path to their desk before
anything heavy is imported; everything else is the full command line (`cli.py`)."""

from __future__ import annotations

import sys


def main() -> None:
    from assay.desk.stepclient import main as fast

    code = fast(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from assay.cli import main as full

    full()
