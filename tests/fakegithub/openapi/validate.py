"""Check a response of the fake against the vendored subset of GitHub's REST description.

The subset is OpenAPI 3.0, whose schemas are JSON Schema draft 4 plus `nullable`. On loading,
`nullable: true` becomes a JSON Schema null: `type: T` turns into `type: [T, "null"]` (and `null`
joins an `enum`), and a nullable schema without `type` (a `$ref`, `allOf`, `oneOf`) is wrapped
as `anyOf: [schema, {type: null}]`. Draft 4 is used because it is what OpenAPI 3.0 schemas are
written in: a `$ref` ignores its siblings there, as OpenAPI 3.0 requires. `format` is not
asserted (GitHub's own responses do not always meet it).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator

SUBSET = Path(__file__).resolve().parent / "subset.json"


def to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 schema → JSON Schema draft 4 (only `nullable` differs for this subset)."""
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable") is not True:
        return out
    if "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [out, {"type": "null"}]}


@cache
def subset() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SUBSET.read_text(encoding="utf-8"))
    return data


@cache
def _components() -> dict[str, Any]:
    translated: dict[str, Any] = to_json_schema(subset()["components"])
    return translated


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        kind, name = node["$ref"].removeprefix("#/components/").split("/", 1)
        node = subset()["components"][kind][name]
    return node


def response_schema(spec_path: str, method: str, status: int) -> dict[str, Any] | None:
    """The JSON schema for that operation's `status`, or None when the status carries no body.

    A status the operation does not list is checked against `basic-error` when it is an error
    (GitHub answers rate limits and 5xx on every operation); any other unlisted status is a
    KeyError, as is an operation missing from the subset.
    """
    responses = subset()["paths"][spec_path][method.lower()]["responses"]
    if str(status) not in responses:
        if status >= 400:
            return {"$ref": "#/components/schemas/basic-error"}
        raise KeyError(f"{method.upper()} {spec_path} does not list status {status}")
    content = _deref(responses[str(status)]).get("content", {})
    media = content.get("application/json")
    if media is None or "schema" not in media:
        return None
    schema: dict[str, Any] = media["schema"]
    return schema


@cache
def _validator(spec_path: str, method: str, status: int) -> Draft4Validator:
    schema = response_schema(spec_path, method, status)
    return Draft4Validator({**to_json_schema(schema), "components": _components()})


def problems(spec_path: str, method: str, status: int, body: Any) -> list[str]:
    """Every way `body` departs from the published schema; empty when it validates."""
    try:
        schema = response_schema(spec_path, method, status)
    except KeyError as exc:
        return [str(exc)]
    if schema is None:
        return [] if body is None else [f"{method.upper()} {spec_path} {status} has no body in the description"]
    if body is None:
        return [f"{method.upper()} {spec_path} {status}: a JSON body is expected"]
    validator = _validator(spec_path, method.lower(), status)
    return [f"{method.upper()} {spec_path} {status}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(body)]
