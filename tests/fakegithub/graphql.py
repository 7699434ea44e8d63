"""GitHub's GraphQL API as the fake serves it: the fields of `openapi/graphql_subset.json`, over the fake's memory.

A document is parsed (one operation; fields, arguments, variables; no fragments, aliases or directives),
checked against the schema cut as GitHub checks it against its schema (a field the cut lacks is an
`undefinedField` error and nothing runs), then resolved field by field. What a viewer may not see (a
pending review's threads) is left out for them, as on GitHub.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.fakegithub import queue, reviews
from tests.fakegithub.openapi.graphql_validate import field_type, subset
from tests.fakegithub.state import IssueEvent, Pull, Repo, ReviewComment, User, node_id, now_iso

if TYPE_CHECKING:
    from tests.fakegithub.server import FakeGitHub

TOKEN = re.compile(r'[\s,\ufeff]+|#[^\n]*|(\.\.\.|[{}():$!=\[\]@]|"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?'
                   r"|[_A-Za-z]\w*)")
PAGE_LIMIT = 100


class GraphQLError(Exception):
    """An entry of the answer's `errors`: a message, and GitHub's `type` or `extensions` when it names them."""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.entry = {"message": message, **extra}


@dataclass
class Field:
    name: str
    args: dict[str, Any]
    selections: list[Field]


class Parser:
    """One operation of a GraphQL document, its variables substituted into the arguments."""

    def __init__(self, query: str, variables: dict[str, Any]) -> None:
        self.tokens: list[str] = []
        pos = 0
        while pos < len(query):
            found = TOKEN.match(query, pos)
            if found is None:
                raise GraphQLError(f"Parse error on {query[pos:pos + 10]!r} at offset {pos}")
            if found[1] is not None:
                self.tokens.append(found[1])
            pos = found.end()
        self.i = 0
        self.variables = dict(variables)

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise GraphQLError(f"Parse error on {token or 'end of document'!r}" +
                               (f" (expected {expected!r})" if expected else ""))
        self.i += 1
        return token

    def document(self) -> tuple[str, list[Field]]:
        kind = "query"
        if self.peek() in ("query", "mutation", "subscription"):
            kind = self.take()
            if self.peek() not in ("(", "{"):
                self.take()  # the operation's name
            if self.peek() == "(":
                self.variable_definitions()
        fields = self.selection_set()
        if self.peek() is not None:
            raise GraphQLError("the fake takes one operation per document, and no fragments")
        return kind, fields

    def variable_definitions(self) -> None:
        self.take("(")
        while self.peek() != ")":
            self.take("$")
            name = self.take()
            self.take(":")
            written = self.type_ref()
            if self.peek() == "=":
                self.take()
                self.variables.setdefault(name, self.value())
            if written.endswith("!") and self.variables.get(name) is None:
                raise GraphQLError(f"Variable ${name} of type {written} was provided invalid value",
                                   extensions={"code": "variableMismatch"})
        self.take(")")

    def type_ref(self) -> str:
        if self.peek() == "[":
            self.take()
            written = f"[{self.type_ref()}]"
            self.take("]")
        else:
            written = self.take()
        return written + self.take() if self.peek() == "!" else written

    def selection_set(self) -> list[Field]:
        self.take("{")
        fields = []
        while self.peek() != "}":
            fields.append(self.field())
        self.take("}")
        return fields

    def field(self) -> Field:
        name = self.take()
        if not re.fullmatch(r"[_A-Za-z]\w*", name) or self.peek() in (":", "@"):
            raise GraphQLError(f"the fake takes plain fields: no fragments, aliases or directives (at {name!r})")
        args: dict[str, Any] = {}
        if self.peek() == "(":
            self.take()
            while self.peek() != ")":
                key = self.take()
                self.take(":")
                args[key] = self.value()
            self.take(")")
        return Field(name, args, self.selection_set() if self.peek() == "{" else [])

    def value(self) -> Any:
        token = self.take()
        if token == "$":
            return self.variables.get(self.take())
        if token in ("[", "{"):
            close, items, obj = {"[": "]", "{": "}"}[token], [], {}
            while self.peek() != close:
                if token == "[":
                    items.append(self.value())
                else:
                    key = self.take()
                    self.take(":")
                    obj[key] = self.value()
            self.take(close)
            return items if token == "[" else obj
        if token.startswith('"'):
            return json.loads(token)
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if re.fullmatch(r"-?\d[\d.eE+-]*", token):
            return float(token)
        return {"true": True, "false": False, "null": None}.get(token, token)  # else an enum value


# -- checking a document against the schema cut -----------------------------------------------------------

def _named(written: str) -> str:
    return written.strip("[]!")


def check(type_name: str, fields: list[Field]) -> list[dict[str, Any]]:
    """The errors GitHub's validation would give `fields` selected on `type_name`, as far as the cut tells."""
    errors: list[dict[str, Any]] = []
    for f in fields:
        written = field_type(type_name, f.name)
        if written is None or f.name not in RESOLVERS.get(type_name, {}):
            errors.append({"message": f"Field '{f.name}' doesn't exist on type '{type_name}' (or the fake does not "
                                      "serve it)", "extensions": {"code": "undefinedField", "typeName": type_name,
                                                                   "fieldName": f.name}})
            continue
        takes: dict[str, str] = subset()["types"][type_name]["fields"][f.name]["args"]
        errors += [{"message": f"Field '{f.name}' doesn't accept argument '{a}'"} for a in f.args if a not in takes]
        errors += [{"message": f"Argument '{a}' on Field '{f.name}' has an invalid value "
                               f"({json.dumps(f.args.get(a))}). Expected type '{t}'."}
                   for a, t in takes.items() if not _fits(t, f.args.get(a))]
        inner = subset()["types"][_named(written)]
        if inner["kind"] == "OBJECT" and not f.selections:
            errors.append({"message": f"Field '{f.name}' of type '{written}' must have a selection of subfields"})
        elif inner["kind"] != "OBJECT" and f.selections:
            errors.append({"message": f"Selections can't be made on scalars (field '{f.name}' returns {written})"})
        elif f.selections:
            errors += check(_named(written), f.selections)
    return errors


def _fits(written: str, value: Any) -> bool:
    """Whether an argument's value meets its type: present where `!`, an input object's fields in turn."""
    if value is None:
        return not written.endswith("!")
    declared = subset()["types"].get(_named(written), {})
    if declared.get("kind") != "INPUT_OBJECT" or written.startswith("["):
        return True
    fields: dict[str, str] = declared["inputFields"]
    return isinstance(value, dict) and set(value) <= set(fields) and all(_fits(t, value.get(k))
                                                                         for k, t in fields.items())


# -- resolving --------------------------------------------------------------------------------------------

@dataclass
class Context:
    gh: FakeGitHub
    user: User
    errors: list[dict[str, Any]] = field(default_factory=list)

    def not_found(self, path: list[str | int], message: str) -> None:
        self.errors.append({"type": "NOT_FOUND", "path": path, "message": message})


@dataclass
class Page:
    """One page of a connection, cut by `first`/`last`/`after`/`before` as GitHub cuts it."""

    nodes: list[Any]
    total: int
    start: int
    has_next: bool

    @property
    def cursors(self) -> tuple[str | None, str | None]:
        if not self.nodes:
            return None, None
        return cursor(self.start), cursor(self.start + len(self.nodes) - 1)


def cursor(index: int) -> str:
    return base64.b64encode(f"cursor:v2:{index}".encode()).decode()


def _index(given: str) -> int:
    try:
        text = base64.b64decode(given, validate=True).decode()
    except ValueError:
        text = ""
    if not re.fullmatch(r"cursor:v2:\d+", text):
        raise GraphQLError(f"`{given}` does not appear to be a valid cursor.", type="INVALID_CURSOR_ARGUMENTS")
    return int(text.rsplit(":", 1)[1])


def paginate(items: list[Any], args: dict[str, Any], connection: str) -> Page:
    first, last = args.get("first"), args.get("last")
    if first is None and last is None:
        raise GraphQLError(f"You must provide a `first` or `last` value to properly paginate the `{connection}` "
                           "connection.", type="MISSING_PAGINATION_BOUNDARIES")
    for name, n in (("first", first), ("last", last)):
        if n is not None and not 0 <= n <= PAGE_LIMIT:
            raise GraphQLError(f"Requesting {n} records on the `{connection}` connection exceeds the `{name}` limit "
                               f"of {PAGE_LIMIT} records.", type="EXCESSIVE_PAGINATION")
    start = _index(args["after"]) + 1 if args.get("after") else 0
    stop = _index(args["before"]) if args.get("before") else len(items)
    window = range(start, max(start, min(stop, len(items))))
    if first is not None:
        window = window[:first]
    if last is not None:
        window = window[len(window) - min(last, len(window)):]
    return Page([items[i] for i in window], len(items), window.start, window.stop < len(items))


def execute(ctx: Context, type_name: str, obj: Any, fields: list[Field], path: list[str | int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        value = RESOLVERS[type_name][f.name](ctx, obj, f.args, [*path, f.name])
        out[f.name] = complete(ctx, str(field_type(type_name, f.name)).removesuffix("!"), value, f, [*path, f.name])
    return out


def complete(ctx: Context, written: str, value: Any, f: Field, path: list[str | int]) -> Any:
    if value is None:
        return None
    if written.startswith("["):
        inner = written[1:-1].removesuffix("!")
        return [complete(ctx, inner, item, f, [*path, i]) for i, item in enumerate(value)]
    if subset()["types"][written]["kind"] == "OBJECT":
        return execute(ctx, written, value, f.selections, path)
    return value


Resolver = Callable[[Context, Any, dict[str, Any], list[str | int]], Any]


def _repository(ctx: Context, obj: Any, args: dict[str, Any], path: list[str | int]) -> Repo | None:
    repo = ctx.gh.repos.get((str(args["owner"]).lower(), str(args["name"]).lower()))
    if repo is None:
        ctx.not_found(path, f"Could not resolve to a Repository with the name '{args['owner']}/{args['name']}'.")
    return repo


def _pull_request(ctx: Context, repo: Repo, args: dict[str, Any], path: list[str | int]) -> tuple[Repo, Pull] | None:
    pull = repo.pulls.get(args["number"]) if isinstance(args["number"], int) else None
    if pull is None:
        ctx.not_found(path, f"Could not resolve to a PullRequest with the number of {args['number']}.")
        return None
    return repo, repo.refresh(pull)


def _threads(ctx: Context, found: tuple[Repo, Pull], args: dict[str, Any], path: list[str | int]) -> Page:
    repo, pull = found
    roots = [(repo, c) for c in repo.review_comments
             if c.pull == pull.number and c.in_reply_to_id is None and repo.seen_by(c, ctx.user)]
    return paginate(roots, args, "reviewThreads")


def _comments(ctx: Context, thread: tuple[Repo, ReviewComment], args: dict[str, Any], path: list[str | int]) -> Page:
    repo, root = thread
    shown = [c for c in repo.review_comments if c.thread == root.id and repo.seen_by(c, ctx.user)]
    return paginate(shown, args, "comments")


def thread_id(root: ReviewComment) -> str:
    return node_id("PRRT", root.id)


def _draft(draft: bool, event: str) -> Resolver:
    """markPullRequestReadyForReview / convertPullRequestToDraft, the mutations PyGithub sends, by node id."""
    def mutate(ctx: Context, obj: Any, args: dict[str, Any], path: list[str | int]) -> dict[str, Any] | None:
        given, name = args["input"], path[-1]
        found = [(r, p) for r in ctx.gh.repos.values() for p in r.pulls.values() if p.node_id == given["pullRequestId"]]
        if not found:
            ctx.not_found(path, f"Could not resolve to a node with the global id of '{given['pullRequestId']}'")
            return None
        repo, pull = found[0]
        if pull.state != "open":
            ctx.errors.append({"type": "UNPROCESSABLE", "path": [name], "message": "Pull request is closed"})
            return None
        if pull.draft != draft:
            repo.events.append(IssueEvent(pull.number, ctx.user, event))
        pull.draft, pull.updated_at = draft, now_iso()
        return {"clientMutationId": given.get("clientMutationId"), "pullRequest": (repo, pull)}
    return mutate


def _resolution(resolved: bool) -> Resolver:
    """resolveReviewThread / unresolveReviewThread: a thread by its node id, as its viewer sees it."""
    def mutate(ctx: Context, obj: Any, args: dict[str, Any], path: list[str | int]) -> dict[str, Any] | None:
        given = args["input"]
        found = [(r, c) for r in ctx.gh.repos.values() for c in r.review_comments
                 if thread_id(c) == given["threadId"] and c.in_reply_to_id is None and r.seen_by(c, ctx.user)]
        if not found:
            ctx.not_found(path, f"Could not resolve to a node with the global id of '{given['threadId']}'")
            return None
        repo, root = found[0]
        reviews.resolve(repo, root.id, ctx.user, resolved)
        return {"clientMutationId": given.get("clientMutationId"), "thread": (repo, root)}
    return mutate


def _enqueue(ctx: Context, obj: Any, args: dict[str, Any], path: list[str | int]) -> dict[str, Any] | None:
    """enqueuePullRequest: the pull request by node id into its base branch's merge queue."""
    given, name = args["input"], path[-1]
    found = [(r, p) for r in ctx.gh.repos.values() for p in r.pulls.values() if p.node_id == given["pullRequestId"]]
    if not found:
        ctx.not_found(path, f"Could not resolve to a node with the global id of '{given['pullRequestId']}'")
        return None
    made = ("the fake does not let a pull request jump the queue" if given.get("jump") else
            queue.enqueue(ctx.gh, *found[0], ctx.user, given.get("expectedHeadOid")))
    if isinstance(made, str):
        ctx.errors.append({"type": "UNPROCESSABLE", "path": [name], "message": made})
        return None
    return {"clientMutationId": given.get("clientMutationId"), "mergeQueueEntry": made}


def _in_queue(ctx: Context, found: tuple[Repo, Pull], args: dict[str, Any], path: list[str | int]) -> bool:
    repo, pull = found
    return any(e.pull == pull.number for e in repo.queue)


def _key(name: str) -> Resolver:
    return lambda ctx, obj, args, path: obj[name]


def _page_fields() -> dict[str, Resolver]:
    return {"nodes": lambda ctx, page, args, path: page.nodes, "pageInfo": lambda ctx, page, args, path: page,
            "totalCount": lambda ctx, page, args, path: page.total}


RESOLVERS: dict[str, dict[str, Resolver]] = {
    "Query": {"repository": _repository},
    "Mutation": {"markPullRequestReadyForReview": _draft(False, "ready_for_review"),
                 "convertPullRequestToDraft": _draft(True, "convert_to_draft"),
                 "resolveReviewThread": _resolution(True), "unresolveReviewThread": _resolution(False),
                 "enqueuePullRequest": _enqueue},
    "Repository": {"pullRequest": _pull_request},
    "PullRequest": {"id": lambda ctx, rp, args, path: rp[1].node_id, "isDraft": lambda ctx, rp, args, path: rp[1].draft,
                    "number": lambda ctx, rp, args, path: rp[1].number, "reviewThreads": _threads,
                    "headRefOid": lambda ctx, rp, args, path: rp[1].head_sha, "isInMergeQueue": _in_queue,
                    "merged": lambda ctx, rp, args, path: rp[1].merged_at is not None},
    "PullRequestReviewThreadConnection": _page_fields(),
    "PullRequestReviewThread": {"id": lambda ctx, t, args, path: thread_id(t[1]), "comments": _comments,
                                "isResolved": lambda ctx, t, args, path: t[0].threads[t[1].id].resolved},
    "PullRequestReviewCommentConnection": _page_fields(),
    "PullRequestReviewComment": {"databaseId": lambda ctx, c, args, path: c.id,
                                 "id": lambda ctx, c, args, path: c.node_id},
    "PageInfo": {"endCursor": lambda ctx, page, args, path: page.cursors[1],
                 "hasNextPage": lambda ctx, page, args, path: page.has_next,
                 "hasPreviousPage": lambda ctx, page, args, path: page.start > 0,
                 "startCursor": lambda ctx, page, args, path: page.cursors[0]},
    "EnqueuePullRequestPayload": {"clientMutationId": _key("clientMutationId"),
                                  "mergeQueueEntry": _key("mergeQueueEntry")},
    "MergeQueueEntry": {"id": lambda ctx, e, args, path: e.node_id, "position": lambda ctx, e, args, path: e.position,
                        "state": lambda ctx, e, args, path: e.state},
    **{payload: {"clientMutationId": _key("clientMutationId"), "pullRequest": _key("pullRequest")}
       for payload in ("MarkPullRequestReadyForReviewPayload", "ConvertPullRequestToDraftPayload")},
    **{payload: {"clientMutationId": _key("clientMutationId"), "thread": _key("thread")}
       for payload in ("ResolveReviewThreadPayload", "UnresolveReviewThreadPayload")},
}


def answer(gh: FakeGitHub, body: Any, user: User) -> dict[str, Any]:
    """The JSON GitHub's GraphQL endpoint answers `body` ({"query", "variables"}) with, for `user`."""
    query = body.get("query") if isinstance(body, dict) else None
    variables = body.get("variables") if isinstance(body, dict) else None
    try:
        if not isinstance(query, str):
            raise GraphQLError("A query attribute must be specified and must be a string.")
        kind, fields = Parser(query, variables if isinstance(variables, dict) else {}).document()
        if kind == "subscription":
            raise GraphQLError("the fake serves queries and mutations")
    except GraphQLError as refused:
        return {"errors": [refused.entry]}
    root = "Mutation" if kind == "mutation" else "Query"
    errors = check(root, fields)
    if errors:
        return {"errors": errors}
    ctx = Context(gh, user)
    try:
        data = execute(ctx, root, None, fields, [])
    except GraphQLError as refused:
        return {"data": None, "errors": [refused.entry]}
    return {"data": data, "errors": ctx.errors} if ctx.errors else {"data": data}
