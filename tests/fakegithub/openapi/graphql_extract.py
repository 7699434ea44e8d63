"""Cut the types and fields the fake's GraphQL answers use out of GitHub's published GraphQL schema.

GitHub publishes its schema as an introspection result in the npm package `@octokit/graphql-schema`
(`schema.json`, ~5 MB). The fake serves a few fields, so this script writes `graphql_subset.json`
next to it: for each object type in FIELDS, those fields with their type and arguments, plus every
scalar, enum and input object they reach. A type is written as in GraphQL (`Int!`, `[PageInfo]`).
The fake reads the cut to know what it may answer, and `graphql_validate.py` checks each answer
against it.

Usage (the network is needed only here, never at test time):

    cd "$(mktemp -d)" && npm pack @octokit/graphql-schema && tar xzf octokit-graphql-schema-*.tgz
    python tests/fakegithub/openapi/graphql_extract.py package/schema.json --package-json package/package.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository's root, for the shared extractor
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.fakegithub.openapi.extract import run  # noqa: E402

SUBSET = Path(__file__).resolve().parent / "graphql_subset.json"

# object type -> the fields the fake answers. `tests/test_fakegithub.py` checks the fake resolves exactly these.
FIELDS: dict[str, tuple[str, ...]] = {
    "Query": ("repository",),
    "Mutation": ("convertPullRequestToDraft", "enqueuePullRequest", "markPullRequestReadyForReview",
                 "resolveReviewThread", "unresolveReviewThread"),
    "Repository": ("pullRequest",),
    "PullRequest": ("headRefOid", "id", "isDraft", "isInMergeQueue", "merged", "number", "reviewThreads"),
    "PullRequestReviewThreadConnection": ("nodes", "pageInfo", "totalCount"),
    "PullRequestReviewThread": ("comments", "id", "isResolved"),
    "PullRequestReviewCommentConnection": ("nodes", "pageInfo", "totalCount"),
    "PullRequestReviewComment": ("databaseId", "id"),
    "PageInfo": ("endCursor", "hasNextPage", "hasPreviousPage", "startCursor"),
    "ConvertPullRequestToDraftPayload": ("clientMutationId", "pullRequest"),
    "EnqueuePullRequestPayload": ("clientMutationId", "mergeQueueEntry"),
    "MergeQueueEntry": ("id", "position", "state"),
    "MarkPullRequestReadyForReviewPayload": ("clientMutationId", "pullRequest"),
    "ResolveReviewThreadPayload": ("clientMutationId", "thread"),
    "UnresolveReviewThreadPayload": ("clientMutationId", "thread"),
}


def type_name(ref: dict[str, Any]) -> str:
    """An introspection type reference as GraphQL writes it: `[PullRequestReviewThread]`, `Int!`."""
    if ref["kind"] == "NON_NULL":
        return type_name(ref["ofType"]) + "!"
    if ref["kind"] == "LIST":
        return f"[{type_name(ref['ofType'])}]"
    return str(ref["name"])


def named(written: str) -> str:
    return written.strip("[]!")


def extract(schema: dict[str, Any], version: str) -> dict[str, Any]:
    types = {t["name"]: t for t in schema.get("data", schema)["__schema"]["types"]}
    out: dict[str, dict[str, Any]] = {}
    pending: list[str] = []
    for name, served in FIELDS.items():
        fields = {f["name"]: f for f in types[name]["fields"]}
        missing = [f for f in served if f not in fields]
        if missing:
            raise KeyError(f"{name} has no field {', '.join(missing)} in the schema")
        out[name] = {"kind": "OBJECT", "fields": {
            f: {"type": type_name(fields[f]["type"]),
                "args": {a["name"]: type_name(a["type"]) for a in fields[f]["args"]}} for f in served}}
        pending += [named(v["type"]) for v in out[name]["fields"].values()]
        pending += [named(a) for v in out[name]["fields"].values() for a in v["args"].values()]
    while pending:
        name = pending.pop()
        if name in out:
            continue
        kind = types[name]["kind"]
        if kind in ("OBJECT", "INTERFACE", "UNION"):
            raise KeyError(f"a served field reaches {kind} {name}, which FIELDS does not list")
        out[name] = {"kind": kind}
        if kind == "ENUM":
            out[name]["values"] = sorted(v["name"] for v in types[name]["enumValues"])
        if kind == "INPUT_OBJECT":
            out[name]["inputFields"] = {f["name"]: type_name(f["type"]) for f in types[name]["inputFields"]}
            pending += [named(v) for v in out[name]["inputFields"].values()]
    return {"source": {"package": "@octokit/graphql-schema", "version": version, "file": "schema.json"},
            "types": dict(sorted(out.items()))}


def main(argv: list[str] | None = None) -> int:
    return run(argv, __doc__ or "", "@octokit/graphql-schema", extract, f"{len(FIELDS)} object types", SUBSET,
               "schema.json")


if __name__ == "__main__":
    sys.exit(main())
