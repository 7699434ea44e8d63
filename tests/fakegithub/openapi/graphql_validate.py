"""Check a GraphQL answer of the fake against the vendored cut of GitHub's GraphQL schema.

Every key under `data` must be a field of its type in the cut (the fake takes no aliases, so a key is
a field's name), every value must have the field's type: an object for an object type, a list for a
list, the scalar's JSON kind, and a value wherever the schema says `!`. An answer whose `data` is null
(a fault, a refused query) carries only `errors`, which must each have a `message`.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SUBSET = Path(__file__).resolve().parent / "graphql_subset.json"
SCALARS: dict[str, tuple[type, ...]] = {"Int": (int,), "Float": (int, float), "Boolean": (bool,), "String": (str,),
                                        "ID": (str,)}
INT32 = range(-(2**31), 2**31)


@cache
def subset() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SUBSET.read_text(encoding="utf-8"))
    return data


def field_type(type_name: str, field: str) -> str | None:
    """The type of `type_name.field` as GraphQL writes it (`Int!`, `[PageInfo]`), or None when the cut lacks it."""
    fields = subset()["types"].get(type_name, {}).get("fields", {})
    return str(fields[field]["type"]) if field in fields else None


def root_of(field: str) -> str | None:
    """Which root type (Query or Mutation) has `field`."""
    return next((root for root in ("Query", "Mutation") if field_type(root, field) is not None), None)


def problems(answer: Any) -> list[str]:
    """Every way `answer` departs from the schema; empty when it meets it."""
    if not isinstance(answer, dict) or not set(answer) <= {"data", "errors", "extensions"} or not answer:
        return [f"a GraphQL answer is an object of data and errors: {answer!r:.200}"]
    found = [f"errors: {e!r:.200} has no message" for e in answer.get("errors") or []
             if not isinstance(e, dict) or not isinstance(e.get("message"), str)]
    data = answer.get("data")
    if data is None:
        return found if answer.get("errors") else [*found, "an answer without data must carry errors"]
    if not isinstance(data, dict):
        return [*found, f"data: {data!r:.200} is not an object"]
    for key, value in data.items():
        root = root_of(key)
        found += _check(f"{root}.{key}", field_type(root, key) if root else None, value)
    return found


def _check(path: str, written: str | None, value: Any) -> list[str]:
    if written is None:
        return [f"{path}: no such field in the schema cut"]
    if written.endswith("!"):
        return [f"{path}: null where the schema says {written}"] if value is None else _check(path, written[:-1], value)
    if value is None:
        return []
    if written.startswith("["):
        if not isinstance(value, list):
            return [f"{path}: {value!r:.100} is not a list ({written})"]
        return [p for i, item in enumerate(value) for p in _check(f"{path}[{i}]", written[1:-1], item)]
    kind = subset()["types"].get(written, {}).get("kind")
    if kind == "OBJECT":
        if not isinstance(value, dict):
            return [f"{path}: {value!r:.100} is not an object ({written})"]
        return [p for k, v in value.items() for p in _check(f"{path}.{k}", field_type(written, k), v)]
    if kind == "ENUM":
        return [] if value in subset()["types"][written]["values"] else [f"{path}: {value!r} is not a {written}"]
    want = SCALARS.get(written, (str,))  # GitHub's own scalars (DateTime, URI, BigInt…) are strings in JSON
    if not isinstance(value, want) or (bool not in want and isinstance(value, bool)):
        return [f"{path}: {value!r:.100} is not a {written}"]
    if written == "Int" and value not in INT32:
        return [f"{path}: {value} does not fit a GraphQL Int"]
    return []
