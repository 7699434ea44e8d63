"""Cut the webhook payloads the tests send, and every schema they reach, out of GitHub's webhooks description.

GitHub publishes its webhooks description in the npm package `@octokit/openapi-webhooks`
(`generated/api.github.com.json`, ~5 MB, OpenAPI 3.1). Each webhook there is named
`<event>-<action>` with dashes (`pull-request-review-submitted`; `push` and
`workflow-dispatch` have no action) and its payload is the `application/json` schema of its
request body, a `$ref` to a component such as `webhook-pull-request-review-submitted`. For
each (event, action) in `EVENTS` this script writes that payload schema into `subset.json`
next to it, plus every component it reaches through `$ref`, unchanged apart from dropping
examples and prose. The schemas are kept as published: OpenAPI 3.1 schemas are JSON Schema
2020-12 (`type: [T, "null"]`, no `nullable`), which `validate.py` uses as they are.

Usage (the network is needed only here, never at test time):

    cd "$(mktemp -d)" && npm pack @octokit/openapi-webhooks@12.1.0 && tar xzf octokit-openapi-webhooks-*.tgz
    python tests/fakegithub/webhooks/extract.py package/generated/api.github.com.json \
        --package-json package/package.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUBSET = HERE / "subset.json"

# (event, action): every webhook payload the tests build; `None` for events without an action.
EVENTS: tuple[tuple[str, str | None], ...] = (
    ("pull_request_review", "submitted"),
    ("issue_comment", "created"),
    ("pull_request", "closed"),
    ("workflow_run", "completed"),
    ("check_suite", "completed"),
    ("push", None),
    ("workflow_dispatch", None),
)
DROP = {"examples", "example", "description", "summary", "externalDocs", "x-github", "x-octokit"}


def key(event: str, action: str | None) -> str:
    """The subset's name for a payload, as GitHub's docs write it: `pull_request_review.submitted`, `push`."""
    return event if action is None else f"{event}.{action}"


def webhook_name(event: str, action: str | None) -> str:
    """The description's name for it: `pull-request-review-submitted`, `push`."""
    return "-".join([event, *([action] if action else [])]).replace("_", "-")


def _strip(node: Any, properties: bool = False) -> Any:
    """Drop prose and examples; a schema property that happens to be named `description` stays."""
    if isinstance(node, dict):
        return {k: _strip(v, k == "properties" and not properties) for k, v in node.items()
                if properties or k not in DROP}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def extract(description: dict[str, Any], version: str) -> dict[str, Any]:
    if not str(description.get("openapi", "")).startswith("3.1."):
        raise ValueError(f"expected an OpenAPI 3.1 description (JSON Schema 2020-12), "
                         f"got {description.get('openapi')!r}")
    webhooks: dict[str, dict[str, Any]] = {}
    for event, action in EVENTS:
        name = webhook_name(event, action)
        post = description["webhooks"][name]["post"]
        webhooks[key(event, action)] = {
            "event": event, "action": action, "webhook": name, "operationId": post["operationId"],
            "schema": _strip(post["requestBody"]["content"]["application/json"]["schema"]),
        }
    components: dict[str, dict[str, Any]] = {}
    pending = _refs(webhooks)
    while pending:
        ref = pending.pop()
        kind, name = ref.removeprefix("#/components/").split("/", 1)
        if name in components.get(kind, {}):
            continue
        node = _strip(description["components"][kind][name])
        components.setdefault(kind, {})[name] = node
        pending.extend(_refs(node))
    return {
        "source": {"package": "@octokit/openapi-webhooks", "version": version, "file": "generated/api.github.com.json",
                   "openapi": description["openapi"]},
        "webhooks": webhooks,
        "components": {kind: dict(sorted(v.items())) for kind, v in sorted(components.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("description", type=Path, help="generated/api.github.com.json from @octokit/openapi-webhooks")
    parser.add_argument("--package-json", type=Path, required=True, help="the package's package.json (its version)")
    parser.add_argument("--out", type=Path, default=SUBSET)
    args = parser.parse_args(argv)
    version = json.loads(args.package_json.read_text(encoding="utf-8"))["version"]
    subset = extract(json.loads(args.description.read_text(encoding="utf-8")), version)
    args.out.write_text(json.dumps(subset, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{args.out}: {len(EVENTS)} payloads, "
          f"{sum(len(v) for v in subset['components'].values())} components, @octokit/openapi-webhooks {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
