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

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository's root, for the shared extractor
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.fakegithub.openapi.extract import closure, refs_in, run, strip_prose  # noqa: E402

HERE = Path(__file__).resolve().parent
SUBSET = HERE / "subset.json"

# (event, action): every webhook payload the tests build; `None` for events without an action.
EVENTS: tuple[tuple[str, str | None], ...] = (
    ("pull_request_review", "submitted"),
    ("pull_request_review_comment", "created"),
    ("issue_comment", "created"),
    ("pull_request", "closed"),
    ("workflow_run", "completed"),
    ("check_suite", "completed"),
    ("push", None),
    ("workflow_dispatch", None),
    ("merge_group", "checks_requested"),
)


def key(event: str, action: str | None) -> str:
    """The subset's name for a payload, as GitHub's docs write it: `pull_request_review.submitted`, `push`."""
    return event if action is None else f"{event}.{action}"


def webhook_name(event: str, action: str | None) -> str:
    """The description's name for it: `pull-request-review-submitted`, `push`."""
    return "-".join([event, *([action] if action else [])]).replace("_", "-")


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
            "schema": strip_prose(post["requestBody"]["content"]["application/json"]["schema"]),
        }
    return {
        "source": {"package": "@octokit/openapi-webhooks", "version": version, "file": "generated/api.github.com.json",
                   "openapi": description["openapi"]},
        "webhooks": webhooks,
        "components": closure(description, refs_in(webhooks)),
    }


def main(argv: list[str] | None = None) -> int:
    return run(argv, __doc__ or "", "@octokit/openapi-webhooks", extract, f"{len(EVENTS)} payloads", SUBSET)


if __name__ == "__main__":
    sys.exit(main())
