"""Files of decoded records kept next to the forge's object cache: shortcuts, never the truth.

Each file maps immutable object ids (a blob, a commit) to what reading that object gave,
so an entry can never go stale; a reader that finds the file missing, damaged or
written by another version reads the objects again.
"""

from __future__ import annotations

import contextlib
import json
import os

from assay.core.lives import own_tag

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in `path`; empty if it is absent, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as text:
            loaded = json.loads(text.read())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def save(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Replace `path` with `data`, whole or not at all: the last of racing writers wins, each one complete."""
    tmp = f"{os.fspath(path)}.{own_tag()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
