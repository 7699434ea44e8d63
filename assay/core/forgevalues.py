"""Values read from the forge that become a path, an argument or an environment value: each is checked against
a strict pattern before it is used, since anyone who can push to the forge can plant any text in a journal entry.

A value that fails is not used: the caller reports it (a journal note, a clear message) and goes on without it.
Brief ids are checked where refs and records are read (`records.validate_brief_id`), desk names against the desk's
own file; the kinds here are those of an agent session's checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# an agent CLI's session id (a UUID, or a CLI's own id): never a path, never taken for an option
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# a transcript's path below its folder: plain names, no `.`/`..`, no leading `/` or `-`
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def _relative_ok(value: str) -> bool:
    parts = value.split("/")
    return 0 < len(value) <= 1024 and len(parts) <= 16 and all(_SEGMENT.fullmatch(p) for p in parts)


_CHECKS: dict[str, Callable[[str], object]] = {
    "session id": SESSION_ID.fullmatch, "transcript path": _relative_ok,
}


def problem(kind: str, value: object) -> str | None:
    """Why `value`, read from the forge as a `kind` (a key of `_CHECKS`), may not be used; None when it may."""
    if isinstance(value, str) and _CHECKS[kind](value):
        return None
    shown = repr(value)
    return f"the {kind} {shown[:80]}{'…' if len(shown) > 80 else ''} read from the forge is not a safe {kind}"
