"""Cut the operations the fake GitHub serves, and every schema they reach, out of GitHub's REST description.

GitHub publishes its REST description in the npm package `@octokit/openapi`
(`generated/api.github.com.json`, ~13 MB). The fake's tests need only a few operations, so
this script writes `subset.json` next to it: for each operation the fake implements, its
responses, plus every component those responses reach through `$ref`, unchanged.
Examples and prose are dropped; schemas are kept as published (OpenAPI 3.0, `nullable`
included — `validate.py` translates them to JSON Schema when it loads the subset).

Usage (the network is needed only here, never at test time):

    cd "$(mktemp -d)" && npm pack @octokit/openapi && tar xzf octokit-openapi-*.tgz
    python tests/fakegithub/openapi/extract.py package/generated/api.github.com.json \
        --package-json package/package.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUBSET = HERE / "subset.json"

# (path template, method): every operation the fake serves. `tests/test_fakegithub.py`
# checks that each route of the server names one of these.
OPERATIONS: tuple[tuple[str, str], ...] = (
    ("/rate_limit", "get"),
    ("/repos/{owner}/{repo}", "get"),
    ("/repos/{owner}/{repo}/collaborators/{username}/permission", "get"),
    ("/repos/{owner}/{repo}/pulls", "get"),
    ("/repos/{owner}/{repo}/pulls", "post"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}", "get"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}", "patch"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/merge", "get"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/merge", "put"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/reviews", "get"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/reviews", "post"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}", "get"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/comments", "get"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/comments", "post"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies", "post"),
    ("/repos/{owner}/{repo}/pulls/comments/{comment_id}", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/comments", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/comments", "post"),
    ("/repos/{owner}/{repo}/issues/comments/{comment_id}", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/events", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/labels", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/labels", "post"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/labels", "put"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}", "delete"),
    ("/repos/{owner}/{repo}/labels", "get"),
    ("/repos/{owner}/{repo}/labels/{name}", "get"),
    ("/repos/{owner}/{repo}/commits/{ref}", "get"),
    ("/repos/{owner}/{repo}/commits/{ref}/status", "get"),
    ("/repos/{owner}/{repo}/commits/{ref}/check-runs", "get"),
    ("/repos/{owner}/{repo}/commits/{ref}/statuses", "get"),
    ("/repos/{owner}/{repo}/statuses/{sha}", "post"),
    ("/repos/{owner}/{repo}/rules/branches/{branch}", "get"),
)
# Components every error response of the fake is checked against when an operation does
# not list that status (GitHub answers rate limits and 5xx on any operation).
EXTRA_SCHEMAS = ("basic-error", "validation-error")
DROP = {"examples", "example", "description", "summary", "externalDocs", "x-github", "x-octokit"}


def strip_prose(node: Any, properties: bool = False) -> Any:
    """Drop prose and examples; a schema property that happens to be named `description` stays."""
    if isinstance(node, dict):
        return {k: strip_prose(v, k == "properties" and not properties) for k, v in node.items()
                if properties or k not in DROP}
    if isinstance(node, list):
        return [strip_prose(v) for v in node]
    return node


def refs_in(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs_in(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs_in(v)]
    return []


def extract(description: dict[str, Any], version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for path, method in OPERATIONS:
        op = description["paths"][path][method]
        paths.setdefault(path, {})[method] = {"operationId": op["operationId"],
                                              "responses": strip_prose(op["responses"])}
    return {
        "source": {"package": "@octokit/openapi", "version": version, "file": "generated/api.github.com.json",
                   "openapi": description["openapi"]},
        "paths": paths,
        "components": closure(description, refs_in(paths) + [f"#/components/schemas/{n}" for n in EXTRA_SCHEMAS]),
    }


def closure(description: dict[str, Any], refs: list[str]) -> dict[str, dict[str, Any]]:
    """Every component `refs` reach through `$ref` (theirs too), stripped, sorted by kind and name."""
    components: dict[str, dict[str, Any]] = {}
    pending = list(refs)
    while pending:
        ref = pending.pop()
        kind, name = ref.removeprefix("#/components/").split("/", 1)
        if name in components.get(kind, {}):
            continue
        node = strip_prose(description["components"][kind][name])
        components.setdefault(kind, {})[name] = node
        pending.extend(refs_in(node))
    return {kind: dict(sorted(v.items())) for kind, v in sorted(components.items())}


def main(argv: list[str] | None = None) -> int:
    return run(argv, __doc__ or "", "@octokit/openapi", lambda d, v: extract(d, v), f"{len(OPERATIONS)} operations")


def run(argv: list[str] | None, doc: str, package: str, cut: Callable[[dict[str, Any], str], dict[str, Any]],
        what: str, out: Path = SUBSET, source: str = "generated/api.github.com.json") -> int:
    """The command line of an extractor: read the description and the package's version, write the subset."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("description", type=Path, help=f"{source} from {package}")
    parser.add_argument("--package-json", type=Path, required=True, help="the package's package.json (its version)")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    version = json.loads(args.package_json.read_text(encoding="utf-8"))["version"]
    subset = cut(json.loads(args.description.read_text(encoding="utf-8")), version)
    args.out.write_text(json.dumps(subset, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    kept = subset.get("components") or {"types": subset.get("types", {})}  # a GraphQL cut keeps types
    print(f"{args.out}: {what}, {sum(len(v) for v in kept.values())} components, {package} {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
