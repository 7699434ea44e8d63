"""Check a webhook payload against the vendored subset of GitHub's webhooks description.

The description is OpenAPI 3.1, whose schemas are JSON Schema 2020-12: a nullable field is
already written `type: [T, "null"]` and there is no `nullable` keyword, so nothing is
translated. `schema()` only makes a payload's schema self-contained (its `$ref`s point into the
`components` it carries) and `problems()` checks with `Draft202012Validator`. The OpenAPI 3.1
dialect's extra keywords (`discriminator`, `xml`, `externalDocs`, `example`) are annotations
and do not occur in the subset. `format` is not asserted (GitHub's own payloads do not always
meet it).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from tests.fakegithub.webhooks.extract import EVENTS, key

__all__ = ["EVENTS", "problems", "schema", "subset"]

SUBSET = Path(__file__).resolve().parent / "subset.json"


@cache
def subset() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SUBSET.read_text(encoding="utf-8"))
    return data


def schema(event: str, action: str | None) -> dict[str, Any]:
    """The JSON Schema (2020-12) of that payload, with the components it reaches; KeyError if not vendored."""
    name = key(event, action)
    webhooks = subset()["webhooks"]
    if name not in webhooks:
        raise KeyError(f"no webhook payload {name!r} in the subset (it holds {', '.join(sorted(webhooks))})")
    return {"$schema": Draft202012Validator.META_SCHEMA["$id"], **webhooks[name]["schema"],
            "components": subset()["components"]}


@cache
def _validator(event: str, action: str | None) -> Draft202012Validator:
    return Draft202012Validator(schema(event, action))


def problems(event: str, action: str | None, payload: Any) -> list[str]:
    """Every way `payload` departs from the published schema, one line each with its JSON path; empty when valid."""
    try:
        validator = _validator(event, action)
    except KeyError as exc:
        return [str(exc.args[0])]
    errors = sorted(validator.iter_errors(payload), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{key(event, action)}: {e.json_path}: {e.message}" for e in errors]
