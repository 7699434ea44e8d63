"""A racing desk: waits for a go line on stdin, then claims every brief through the real CLI.

Prints one JSON line per round: {brief: [exit code, holder or null]}.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import sys

from assay.cli import main


def claim(forge: str, desk: str, brief: str) -> tuple[int, str | None]:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main(["claim", brief, "--desk", desk, "--forge", forge, "--json"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    holder = json.loads(out.getvalue())["holder"] if code == 0 else None
    return code, holder


def run() -> None:
    forge, desk, briefs = sys.argv[1], sys.argv[2], sys.argv[3:]
    print("ready", flush=True)
    for line in sys.stdin:
        order = list(briefs)
        random.Random(f"{desk}/{line.strip()}").shuffle(order)
        print(json.dumps({b: claim(forge, desk, b) for b in order}), flush=True)


if __name__ == "__main__":
    run()
