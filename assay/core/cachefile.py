"""Files of decoded records kept next to the forge's object cache: shortcuts, never the truth.

Each file maps immutable object ids (a blob, a commit) to what reading that object gave,
so an entry can never go stale; a reader that finds the file missing, damaged or
written by another version reads the objects again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; empty if it is absent, unreadable or not an object."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def save(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` with `data`, whole or not at all: the last of racing writers wins, each one complete."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
