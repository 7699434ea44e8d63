"""The vendored subset of GitHub's webhooks description (`@octokit/openapi-webhooks`) and its check."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.fakegithub.webhooks import extract, validate

SAMPLES: dict[str, Any] = {"string": "x", "integer": 1, "number": 1, "boolean": False, "null": None}


def _minimal(node: Any, components: dict[str, Any]) -> Any:
    """The smallest instance of a schema: required keys only, first enum value, first branch, empty arrays."""
    while "$ref" in node:
        kind, name = node["$ref"].removeprefix("#/components/").split("/", 1)
        node = components[kind][name]
    if "allOf" in node:
        merged: dict[str, Any] = {}
        for part in node["allOf"]:
            merged.update(_minimal(part, components))
        return merged
    for keyword in ("oneOf", "anyOf"):
        if keyword in node:
            return _minimal(node[keyword][0], components)
    if "enum" in node:
        return next((v for v in node["enum"] if v is not None), node["enum"][0])
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    kind = next((t for t in types if t != "null"), "null")
    if kind == "object" or (kind is None and "properties" in node):
        properties = node.get("properties", {})
        return {k: _minimal(properties.get(k, {}), components) for k in node.get("required", [])}
    if kind == "array":
        return []
    return SAMPLES.get(kind, "x")


def minimal(event: str, action: str | None) -> Any:
    return _minimal(validate.schema(event, action), validate.subset()["components"])


def test_the_subset_holds_exactly_the_events_and_names_its_source() -> None:
    subset = validate.subset()
    assert len(set(validate.EVENTS)) == len(validate.EVENTS) == 9
    assert set(subset["webhooks"]) == {extract.key(e, a) for e, a in validate.EVENTS}
    for event, action in validate.EVENTS:
        entry = subset["webhooks"][extract.key(event, action)]
        assert (entry["event"], entry["action"]) == (event, action)
        assert entry["webhook"] == extract.webhook_name(event, action)
        Draft202012Validator.check_schema(validate.schema(event, action))
    assert extract.webhook_name("pull_request_review", "submitted") == "pull-request-review-submitted"
    assert extract.webhook_name("push", None) == "push"
    assert extract.webhook_name("merge_group", "checks_requested") == "merge-group-checks-requested"
    source = subset["source"]
    assert source["package"] == "@octokit/openapi-webhooks" and source["version"]
    assert source["openapi"].startswith("3.1.")
    assert '"nullable":' not in validate.SUBSET.read_text(encoding="utf-8")  # JSON Schema 2020-12 as published


@pytest.mark.parametrize(("event", "action"), validate.EVENTS)
def test_a_minimal_payload_passes(event: str, action: str | None) -> None:
    payload = minimal(event, action)
    assert validate.problems(event, action, payload) == []
    if action is not None:
        assert payload["action"] == action


def test_the_check_can_fail() -> None:
    def check(payload: Any) -> list[str]:
        return validate.problems("pull_request_review", "submitted", payload)

    review = minimal("pull_request_review", "submitted")
    assert check(review) == []
    assert check({**review, "review": {**review["review"], "body": None}}) == []  # `type: [string, null]`

    assert check({k: v for k, v in review.items() if k != "review"}) == [
        "pull_request_review.submitted: $: 'review' is a required property"]
    assert check({k: v for k, v in review.items() if k != "action"})
    assert check({**review, "review": {**review["review"], "id": "7"}}) == [
        "pull_request_review.submitted: $.review.id: '7' is not of type 'integer'"]
    assert check({**review, "action": "dismissed"})
    assert check([])

    push = minimal("push", None)
    assert validate.problems("push", None, {**push, "forced": "yes"})
    assert validate.problems("push", None, {**push, "commits": [{"id": "abc"}]})
    assert validate.problems("issue_comment", "deleted", {}) and validate.problems("push", "created", push)


def test_the_extractor_keeps_only_what_the_events_reach() -> None:
    tiny: dict[str, Any] = {"openapi": "3.1.0", "webhooks": {}, "components": {"schemas": {
        "thing": {"type": "object", "description": "prose", "examples": [{}], "properties": {
            "description": {"type": ["string", "null"]}, "other": {"$ref": "#/components/schemas/other"}}},
        "other": {"type": "string", "example": "x"}, "unused": {"type": "string"}},
        "examples": {"unused-example": {"value": {}}}}}
    for event, action in extract.EVENTS:
        name = extract.webhook_name(event, action)
        tiny["webhooks"][name] = {"post": {"operationId": name, "summary": "prose", "x-github": {}, "requestBody": {
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/thing"}}}}}}
    subset = extract.extract(tiny, "0.0.0-test")
    assert set(subset["components"]) == {"schemas"}
    assert set(subset["components"]["schemas"]) == {"thing", "other"}
    assert subset["components"]["schemas"]["thing"]["properties"]["description"] == {"type": ["string", "null"]}
    assert "description" not in subset["components"]["schemas"]["thing"]
    assert "examples" not in subset["components"]["schemas"]["thing"]
    assert subset["components"]["schemas"]["other"] == {"type": "string"}
    assert set(subset["webhooks"]) == {extract.key(e, a) for e, a in extract.EVENTS}
    assert subset["source"] == {"package": "@octokit/openapi-webhooks", "version": "0.0.0-test",
                                "file": "generated/api.github.com.json", "openapi": "3.1.0"}
    with pytest.raises(ValueError, match="OpenAPI 3.1"):
        extract.extract({**tiny, "openapi": "3.0.3"}, "0.0.0-test")
