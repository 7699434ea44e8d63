"""Briefs: `briefs/<id>.md` with YAML front matter (title, desk, priority, depends_on, labels, env, touches,
verify, done_when, tools)."""

from __future__ import annotations

import _thread
import json
import os
import re
from collections.abc import Iterable, Sequence

from assay.core import cachefile
from assay.core.digests import sha256_hex
from assay.core.git import ForgeGit, TreeEntry, parse_tree
from assay.core.lives import own_tag
from assay.core.records import LANDING_CLAIM, MAIN_REF, check_tip, validate_brief_id
from assay.core.records.recordtype import asdict, dataclass, field
from assay.errors import BriefIdInvalid, BriefInvalid

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

KEYS = ("title", "desk", "priority", "depends_on", "labels", "env", "touches", "verify", "done_when", "tools")
TOOL_POLICIES = ("safe", "idempotent", "unsafe")  # how an ACP tool call is journaled (`tools:`, `agent.tools`)
VERIFY_KEYS = ("id", "run", "expect_exit", "timeout_s")
DEFAULT_PRIORITY = 5
BRIEFS_DIR = "briefs"  # on main
DEFAULT_VERIFY_TIMEOUT_S = 600
MAX_TITLE = 200  # characters: a title is a review's (a pull request's) title and a board card's heading
MAX_BRIEF_BYTES = 256 * 1024
_LABEL = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


@dataclass(frozen=True)
class VerifyRow:
    id: str
    run: str
    expect_exit: int = 0
    timeout_s: int = DEFAULT_VERIFY_TIMEOUT_S


@dataclass(frozen=True)
class Brief:
    id: str
    title: str
    body: str
    path: str
    desk: str | None = None
    priority: int = DEFAULT_PRIORITY
    depends_on: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    verify: tuple[VerifyRow, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # values the agent and its effects get (settings, never secrets)
    touches: tuple[str, ...] = ()  # path globs the work writes (its footprint); () for undeclared
    done_when: tuple[VerifyRow, ...] = ()  # rows that pass on main once the work is there: settled with no agent
    tools: tuple[tuple[str, str, str], ...] = ()  # (kind, match, policy): an ACP desk's rules, before its own


@dataclass(frozen=True)
class Problem:
    path: str
    line: int | None
    message: str
    hint: str = ""

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}" + (f" ({self.hint})" if self.hint else "")


@dataclass
class Checker:
    """Every problem of one YAML file (a brief's front matter, a desk, a sweeper policy), each with its line."""

    path: str
    offset: int = 0  # lines before the YAML text in the file
    problems: list[Problem] = field(default_factory=list)
    root: Any = None  # the mapping `mapping` read

    def add(self, node: Any, message: str, hint: str = "") -> None:
        line = node.start_mark.line + 1 + self.offset if node is not None else None
        self.problems.append(Problem(self.path, line, message, hint))

    def mapping(self, text: str, what: str, keys: Iterable[str], kind: str) -> list[tuple[Any, Any]] | None:
        """The (key, value) nodes of the YAML mapping `text` holds whose key is one of `keys` (any other is a
        problem); None, with the one problem that stops it from being read, if it holds no mapping."""
        import yaml

        try:
            self.root = compose_yaml(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            self.problems.append(Problem(self.path, mark.line + 1 if mark else None, "not valid YAML"))
            return None
        if not isinstance(self.root, yaml.MappingNode):
            self.problems.append(Problem(self.path, 1, f"{what} is a mapping of keys such as `name:`"))
            return None
        keys = tuple(keys)
        pairs = []
        for key, value in self.root.value:
            if key.value in keys:
                pairs.append((key, value))
            else:
                self.add(key, f"unknown {kind} key {key.value!r}", f"allowed: {', '.join(keys)}")
        return pairs


def compose_yaml(text: str) -> Any:
    """The YAML node tree of `text` (with line marks), by libyaml where PyYAML has it: 15x faster.

    Text that does not parse is parsed again by the pure-Python loader, whose errors point
    at the line of the problem rather than where libyaml gave up.
    """
    import yaml

    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.compose(text, Loader=fast)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def brief_id_from_path(path: Path) -> str:
    return path.name.removesuffix(".md")


def parse_brief(text: str, path: str, brief_id: str) -> Brief:
    """Parse one brief, raising BriefInvalid (with file and line) on the first problem."""
    brief, problems = check_brief(text, path, brief_id)
    if problems or brief is None:
        first = problems[0]
        raise BriefInvalid(first.path, first.line, first.message, first.hint)
    return brief


def check_brief(text: str, path: str, brief_id: str) -> tuple[Brief | None, list[Problem]]:
    """Every problem of one brief file, each with its line; the brief if there were none."""
    unusable = _unusable_text(text, path)
    if unusable is not None:
        return None, [unusable]
    checker = Checker(path, 1)
    checker.problems += _id_problems(path, brief_id)
    lines = text.splitlines()
    front = _front_matter(checker, lines)
    if front is None:
        return None, checker.problems
    root, end = front
    body = "\n".join(lines[end + 1:]).strip("\n")
    try:
        brief = _read_front_matter(checker, root, brief_id, body)
    except _Unreadable as exc:
        checker.add(exc.node, str(exc), "remove the YAML tag or quote the value")
        return None, sorted(checker.problems, key=lambda p: p.line or 0)
    if checker.problems:
        return None, sorted(checker.problems, key=lambda p: p.line or 0)
    return brief, []


def _unusable_text(text: str, path: str) -> Problem | None:
    """The one problem that stops the file from being read at all: its size, or a NUL character."""
    size = len(text.encode("utf-8"))
    if size > MAX_BRIEF_BYTES:  # it becomes the prompt, a review's title and a board page: keep them bounded
        return Problem(path, None, f"the brief is {size:,} bytes; at most {MAX_BRIEF_BYTES:,}",
                       "move long material into the repository and point to it from the brief")
    if "\0" in text:  # its text becomes the agent's arguments and environment, which cannot carry one
        at = text[:text.index("\0")].count("\n") + 1
        return Problem(path, at, "the brief holds a NUL character", "remove it: a brief is plain text")
    return None


def _id_problems(path: str, brief_id: str) -> list[Problem]:
    """The file name's problems as a brief's id: not a safe id, or the one kept for `assay land`."""
    problems = []
    try:
        validate_brief_id(brief_id)
    except BriefIdInvalid as exc:
        problems.append(Problem(path, None, f"the file name gives {exc.message}",
                                "rename the file to <id>.md with a valid id"))
    if brief_id == LANDING_CLAIM:
        problems.append(Problem(path, None, f"the id {brief_id!r} is kept for `assay land`'s claim", "rename the file"))
    return problems


def _front_matter(checker: Checker, lines: list[str]) -> tuple[Any, int] | None:
    """The front matter's YAML mapping node and the index of its closing `---` line; None (a problem) without."""
    import yaml

    path = checker.path
    if not lines or lines[0].strip() != "---":
        checker.problems.append(Problem(path, 1, "a brief must start with a '---' line opening its YAML front matter",
                                        "see `assay brief new` for a skeleton"))
        return None
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        checker.problems.append(Problem(path, 1, "the front matter is never closed by a '---' line"))
        return None
    try:
        root = compose_yaml("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        line = mark.line + 2 if mark else None
        checker.problems.append(Problem(path, line, f"front matter is not valid YAML: {problem}"))
        return None
    if not isinstance(root, yaml.MappingNode):
        checker.problems.append(Problem(path, 2, "the front matter must be a mapping of keys such as `title:`"))
        return None
    return root, end


def _read_front_matter(checker: Checker, root: Any, brief_id: str, body: str) -> Brief:
    """The brief of the front matter `root` and `body`, each field checked (a problem for each that is not so);
    raises _Unreadable at a value that does not construct."""
    fields = _mapping(checker, root, KEYS, "brief")
    title = _string(checker, fields.get("title"), "title", required=True, node_for_missing=root)
    if title is not None and len(title) > MAX_TITLE:
        checker.add(fields["title"], f"`title` is {len(title):,} characters; at most {MAX_TITLE}",
                    "say the rest in the brief's body")
        title = None
    desk = _ident(checker, fields.get("desk"), "desk")
    priority = _int(checker, fields.get("priority"), "priority", 0, 9, DEFAULT_PRIORITY)
    depends = _ident_list(checker, fields.get("depends_on"), "depends_on")
    if brief_id in depends:
        checker.add(fields["depends_on"], f"brief {brief_id!r} depends on itself")
    labels = _label_list(checker, fields.get("labels"))
    env = _env_map(checker, fields.get("env"))
    touches = _touches(checker, fields.get("touches"))
    verify = _verify_rows(checker, fields.get("verify"))
    done_when = _verify_rows(checker, fields.get("done_when"), "done_when")
    tools = _tool_rules(checker, fields.get("tools"))
    return Brief(id=brief_id, title=title or "", body=body, path=checker.path, desk=desk, priority=priority,
                 depends_on=tuple(depends), labels=tuple(labels), verify=tuple(verify), env=env,
                 touches=tuple(touches), done_when=tuple(done_when), tools=tools)


def _mapping(checker: Checker, node: Any, keys: tuple[str, ...], what: str) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if key not in keys:
            checker.add(key_node, f"unknown {what} key {key!r}", f"allowed: {', '.join(keys)}")
        elif key in out:
            checker.add(key_node, f"{what} key {key!r} appears twice")
        else:
            out[key] = value_node
    return out


class _Unreadable(Exception):
    """A YAML value that does not construct (an unknown tag, `!!int "zz"`)."""

    def __init__(self, node: Any, problem: str) -> None:
        super().__init__(problem)
        self.node = node


_LOADERS = _thread._local()  # a thread's own constructor: it keeps what it builds as it builds it


def _constructor() -> Any:
    """One safe constructor for every value a thread reads (making one per value cost more than parsing)."""
    loader = getattr(_LOADERS, "loader", None)
    if loader is None:
        import yaml

        loader = _LOADERS.loader = yaml.SafeLoader(" ")
    return loader


def construct_value(node: Any) -> Any:
    """The Python value of a YAML node (safe types only); yaml.YAMLError, ValueError or TypeError if none."""
    constructor = _constructor()
    try:
        return constructor.construct_object(node, deep=True)
    finally:  # it remembers what it built, by node: forget, or a long-running desk keeps every brief
        constructor.constructed_objects.clear()
        constructor.recursive_objects.clear()


def _scalar(node: Any) -> Any:
    import yaml

    if node is None:
        return None
    try:
        return construct_value(node)
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise _Unreadable(node, f"cannot read this value: {problem}") from None


def _string(checker: Checker, node: Any, name: str, required: bool = False,
            node_for_missing: Any = None) -> str | None:
    if node is None:
        if required:
            checker.add(node_for_missing, f"`{name}:` is required", f"add `{name}: ...` to the front matter")
        return None
    value = _scalar(node)
    if isinstance(value, bool | int | float):
        checker.add(node, f"`{name}` must be a string, but YAML reads {node.value!r} as a {type(value).__name__}",
                    f"quote it: {name}: \"{node.value}\"")
        return None
    if not isinstance(value, str) or not value.strip():
        checker.add(node, f"`{name}` must be a non-empty string")
        return None
    return value.strip()


def _ident(checker: Checker, node: Any, name: str) -> str | None:
    value = _string(checker, node, name)
    if value is not None:
        try:
            validate_brief_id(value)
        except BriefIdInvalid as exc:
            checker.add(node, f"`{name}`: {exc.problem}", "use a-z 0-9 . _ - (at most 64 characters)")
            return None
    return value


def _int(checker: Checker, node: Any, name: str, low: int, high: int, default: int) -> int:
    if node is None:
        return default
    value = _scalar(node)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        checker.add(node, f"`{name}` must be a whole number from {low} to {high}, not {node.value!r}")
        return default
    return value


def _list(checker: Checker, node: Any, name: str) -> list[Any]:
    import yaml

    if node is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        checker.add(node, f"`{name}` must be a list", f"write `{name}: [a, b]` or one `- item` per line")
        return []
    return list(node.value)


def _ident_list(checker: Checker, node: Any, name: str) -> list[str]:
    out = []
    for item in _list(checker, node, name):
        value = _ident(checker, item, name)
        if value is not None:
            out.append(value)
    return out


def _label_list(checker: Checker, node: Any) -> list[str]:
    out = []
    for item in _list(checker, node, "labels"):
        value = _string(checker, item, "labels")
        if value is not None and not _LABEL.fullmatch(value):
            checker.add(item, f"label {value!r} must use a-z 0-9 . _ -")
        elif value is not None:
            out.append(value)
    return out


def _env_map(checker: Checker, node: Any) -> tuple[tuple[str, str], ...]:
    """`env:`, a mapping of variable names to the values an agent and its effects get (a deploy's target, say)."""
    import yaml

    from assay.core.credentials import SECRET_NAMES
    from assay.core.envs import NAME

    if node is None:
        return ()
    if not isinstance(node, yaml.MappingNode):
        checker.add(node, "`env` must be a mapping of variable names to values",
                    "write `env: {DEPLOY_TARGET: staging}`")
        return ()
    out = []
    for key_node, value_node in node.value:
        key, value = _scalar(key_node), _scalar(value_node)
        if not isinstance(key, str) or not NAME.fullmatch(key):
            checker.add(key_node, f"`env` name {key_node.value!r} is not a variable name", "use A-Z 0-9 _")
        elif SECRET_NAMES.match(key) or key.startswith("ASSAY_"):
            checker.add(key_node, f"`env` may not set {key}: forge credentials and Assay's own variables are not "
                        "a brief's to give", "a brief is public: put settings here, never secrets")
        elif not isinstance(value, str | int | float) or isinstance(value, bool):
            checker.add(value_node, f"`env.{key}` must be a string", f"quote it: {key}: \"{value_node.value}\"")
        elif "\0" in str(value):
            checker.add(value_node, f"`env.{key}` holds a NUL character, which no environment can carry",
                        "remove the \\0")
        else:
            out.append((key, str(value)))
    return tuple(sorted(out))


def _touches(checker: Checker, node: Any) -> list[str]:
    """`touches:`, the path globs the brief's work writes: briefs whose globs overlap never run at once."""
    from assay.core.footprints import MAX_GLOBS, glob_problem

    items = _list(checker, node, "touches")
    if len(items) > MAX_GLOBS:
        checker.add(node, f"`touches` lists {len(items)} paths; at most {MAX_GLOBS}", "name folders (`src/api/`)")
        return []
    out = []
    for item in items:
        value = _string(checker, item, "touches")
        problem = glob_problem(value) if value is not None else ""
        if problem:
            checker.add(item, f"`touches`: {problem}", "write globs relative to the repository's root, "
                                                      "such as `src/api/**` or `docs/*.md`")
        elif value is not None:
            out.append(value.strip())
    return out


def _tool_rules(checker: Checker, node: Any) -> tuple[tuple[str, str, str], ...]:
    """`tools:`: how an ACP desk journals this brief's tool calls, before its own `agent.tools`."""
    rules, problems = tool_rules(construct_value(node) if node is not None else None, "tools")
    for message, hint in problems:
        checker.add(node, message, hint)
    return rules


def tool_rules(raw: Any, key: str) -> tuple[tuple[tuple[str, str, str], ...], list[tuple[str, str]]]:
    """A list of `{kind, match, policy}` (`match` a shell pattern of the command or path, `*` when left out), as
    (kind, match, policy) rules, and the problems found, each (message, hint)."""
    if raw is None:
        return (), []
    example = f'e.g. {key}: [{{kind: execute, match: "pytest*", policy: safe}}]'
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        return (), [(f"`{key}` must be a list of {{kind, match, policy}}", example)]
    out, problems = [], []
    for rule in raw:
        kind, match, policy = rule.get("kind"), rule.get("match", "*"), rule.get("policy")
        if set(rule) - {"kind", "match", "policy"} or not isinstance(kind, str) or not isinstance(match, str) \
                or policy not in TOOL_POLICIES:
            problems.append((f"`{key}` entry {rule!r}: needs `kind` (execute, edit, fetch, …), a `match` pattern and a "
                             f"`policy` ({', '.join(TOOL_POLICIES)})", example))
            continue
        out.append((kind, match, str(policy)))
    return tuple(out), problems


def _verify_rows(checker: Checker, node: Any, key: str = "verify") -> list[VerifyRow]:
    """The rows of `verify:` or `done_when:` (the same shape: id, run, expect_exit, timeout_s)."""
    import yaml

    rows: list[VerifyRow] = []
    seen: set[str] = set()
    for item in _list(checker, node, key):
        if not isinstance(item, yaml.MappingNode):
            checker.add(item, f"each {key} row must be a mapping with `id:` and `run:`")
            continue
        fields = _mapping(checker, item, VERIFY_KEYS, f"{key} row")
        row_id = _ident(checker, fields.get("id"), f"{key} id")
        if "id" not in fields:
            checker.add(item, f"a {key} row needs `id:`")
        run = _string(checker, fields.get("run"), "run", required=True, node_for_missing=item)
        expect = _int(checker, fields.get("expect_exit"), "expect_exit", 0, 255, 0)
        timeout = _int(checker, fields.get("timeout_s"), "timeout_s", 1, 86400, DEFAULT_VERIFY_TIMEOUT_S)
        if row_id is not None and row_id in seen:
            checker.add(fields["id"], f"{key} id {row_id!r} is used twice")
        if row_id is not None:
            seen.add(row_id)
            if run is not None:
                rows.append(VerifyRow(row_id, run, expect, timeout))
    return rows


def brief_files(folder: Path) -> list[Path]:
    """The brief files of a folder (`*.md`, README.md excepted)."""
    return sorted(p for p in folder.glob("*.md") if p.name.lower() != "readme.md")


def lint_folder(folder: Path, display_root: Path | None = None) -> tuple[list[Brief], list[Problem]]:
    """Check every brief in `folder`, then the links between them (unknown dependencies, cycles)."""
    briefs: list[Brief] = []
    problems: list[Problem] = []
    for path in brief_files(folder):
        shown = str(path.relative_to(display_root)) if display_root else str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            problems.append(Problem(shown, None, "the file is not UTF-8 text"))
            continue
        brief, found = check_brief(text, shown, brief_id_from_path(path))
        problems += found
        if brief:
            briefs.append(brief)
    problems += check_links(briefs)
    return briefs, problems


def check_links(briefs: list[Brief]) -> list[Problem]:
    by_id = {b.id: b for b in briefs}
    problems = [Problem(b.path, None, f"depends on {dep!r}, which is not a brief here",
                        f"add briefs/{dep}.md or remove it from depends_on")
                for b in briefs for dep in b.depends_on if dep not in by_id]
    for cycle in _cycles(by_id):
        problems.append(Problem(by_id[cycle[0]].path, None,
                                "dependency cycle: " + " -> ".join([*cycle, cycle[0]]),
                                "remove one of these dependencies"))
    return problems


def _cycles(by_id: dict[str, Brief]) -> list[list[str]]:
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for dep in by_id[node].depends_on:
            if dep not in by_id:
                continue
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep):])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(by_id):
        if node not in state:
            visit(node, [])
    return found


def main_folder(git: ForgeGit, main: str, folder: str) -> tuple[list[TreeEntry], list[Problem]]:
    """The entries of `folder` in main's commit `main`, read together with main itself.

    Main at anything but a commit is RecordInvalid naming refs/heads/main; something
    other than a folder at `folder` is a Problem on that path, so readers of main go on.
    """
    head, found = git.read_typed([main, f"{main}:{folder}"])
    check_tip(MAIN_REF, main, head.kind if head else None)
    if found is None:
        return [], []
    if found.kind != "tree":
        what = {"blob": "file", "commit": "submodule"}.get(found.kind, found.kind)
        return [], [Problem(folder, None, f"main's `{folder}` is a {what}, not a folder",
                            f"{folder}/ holds one file per item; move the {what} away and push main")]
    return parse_tree(found.data), []


def briefs_on_main(git: ForgeGit, main: str) -> tuple[list[Brief], list[Problem]]:
    """Every brief on the forge's `main` at commit `main` (one cat-file batch), with its problems.

    A brief already parsed (same blob, same file name) is taken from what this process parsed last (`_SEEN`: a
    desk's pass over an unchanged main parses nothing and reads no file), else from the cache's `PARSED` file:
    a pass over 10,000 unchanged briefs parses none of them.
    """
    seen = _SEEN.get(git.cache)
    if seen is not None and seen[0] == main:
        return list(seen[1]), list(seen[2])
    git.ensure_objects({MAIN_REF: main})
    tree, problems = main_folder(git, main, BRIEFS_DIR)
    files = sorted(e for e in tree if e.name.endswith(".md") and e.name.lower() != "readme.md")
    keys = [f"{e.sha}:{e.name}" for e in files]
    before = seen[3] if seen is not None else {}
    results = {key: before[key] for key in keys if key in before}
    raw: dict[str, dict[str, Any]] | None = None  # the cache file's items, once it must be read
    if len(results) < len(keys):
        cache_path = os.path.join(git.cache, PARSED)
        known = _load_parsed(cache_path)
        raw = {}
        for key in keys:
            if key in known:
                try:
                    results[key], raw[key] = _from_parsed(known[key]), known[key]
                except (TypeError, KeyError, ValueError):
                    pass  # written by another version, or damaged: parsed again below
        todo = [e for e, key in zip(files, keys, strict=True) if key not in results]
        for entry, data in zip(todo, git.read_objects([e.sha for e in todo]), strict=True):
            key = f"{entry.sha}:{entry.name}"
            raw[key] = _parse_file(entry.name, data)
            results[key] = _from_parsed(raw[key])
        if todo or len(raw) != len(known) or len(keys) != len(known):
            cachefile.save(cache_path, {**raw, **{k: _to_parsed(*results[k]) for k in keys if k not in raw}})
    briefs: list[Brief] = []
    for key in keys:
        brief, found = results[key]
        problems += found
        if brief:
            briefs.append(brief)
    problems += check_links(briefs)
    _SEEN[git.cache] = (main, tuple(briefs), tuple(problems), results)
    return briefs, problems


# per forge cache, what this process read last: main, its briefs and problems, and each file's (by blob:name);
# briefs and problems are frozen, so every pass can share them
_SEEN: dict[str, tuple[str, tuple[Brief, ...], tuple[Problem, ...], dict[str, tuple[Brief | None, list[Problem]]]]] = {}


PARSED = "briefs-parsed.v5.json"  # in the forge's cache: blob:name -> the brief, or its problems
CHECKED = PARSED.replace("parsed", "checked").removesuffix(".json")  # in the forge's cache: a file a brief that
# checked clean (named by a digest of its id and text; versioned with PARSED, as the rules are)


def _checked_path(cache: str, brief_id: str, data: bytes) -> str:
    return os.path.join(cache, CHECKED, sha256_hex(brief_id.encode() + b"\0" + data)[:40])


def checked_clean(cache: str, brief_id: str, data: bytes) -> tuple[str, ...] | None:
    """The footprint (`touches:`) of this text of this brief if it checked clean before on this machine (then a
    claim needs no PyYAML); None if it did not."""
    try:
        with open(_checked_path(cache, brief_id, data), encoding="utf-8") as f:
            kept = f.read()
    except OSError:
        return None
    if not kept:
        return ()
    try:
        touches = json.loads(kept)
    except ValueError:
        return None
    return tuple(touches) if isinstance(touches, list) and all(isinstance(t, str) for t in touches) else None


def remember_clean(cache: str, brief_id: str, data: bytes, touches: Sequence[str] = ()) -> None:
    """Keep that this text of this brief checks clean; best effort (the cache is only a shortcut). A brief with
    problems is never kept: its check runs each time, to say what they are."""
    path = _checked_path(cache, brief_id, data)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = f"{path}.{own_tag()}.part"
        with open(part, "w", encoding="utf-8") as f:  # its name is the answer; its text, the footprint
            f.write(json.dumps(list(touches)) if touches else "")
        os.replace(part, path)
    except OSError:
        pass


def _parse_file(name: str, data: bytes | None) -> dict[str, Any]:
    path = f"{BRIEFS_DIR}/{name}"
    try:
        text = (data or b"").decode("utf-8")
    except UnicodeDecodeError:
        return {"problems": [asdict(Problem(path, None, "the file is not UTF-8 text"))]}
    return _to_parsed(*check_brief(text, path, name.removesuffix(".md")))


def _to_parsed(brief: Brief | None, problems: list[Problem]) -> dict[str, Any]:
    return {"brief": asdict(brief) if brief else None, "problems": [asdict(p) for p in problems]}


def _from_parsed(item: dict[str, Any]) -> tuple[Brief | None, list[Problem]]:
    raw = item.get("brief")
    brief = None
    if raw is not None:
        rows = tuple(VerifyRow(**row) for row in raw["verify"])
        done_when = tuple(VerifyRow(**row) for row in raw.get("done_when", ()))
        brief = Brief(**{**raw, "depends_on": tuple(raw["depends_on"]), "labels": tuple(raw["labels"]),
                         "verify": rows, "done_when": done_when,
                         "env": tuple((str(k), str(v)) for k, v in raw.get("env", ())),
                         "touches": tuple(raw.get("touches", ())),
                         "tools": tuple((str(k), str(m), str(p)) for k, m, p in raw.get("tools", ()))})
    return brief, [Problem(**p) for p in item.get("problems", [])]


def _load_parsed(path: str) -> dict[str, dict[str, Any]]:
    """The cache of parsed briefs; empty if absent or unreadable (it is only ever a shortcut)."""
    return {k: v for k, v in cachefile.load(path).items() if isinstance(v, dict)}


SKELETON = """---
title: {title}
priority: {priority}
labels: [{labels}]
depends_on: [{depends}]
verify:
  - id: tests
    run: "true"
    expect_exit: 0
    timeout_s: 600
---
Describe the task here: what to change, why, and how a reviewer can tell it is done.
Replace the verify row with commands that prove it (they run from main's copy of this file).
"""


def new_brief(folder: Path, brief_id: str, title: str, priority: int = DEFAULT_PRIORITY,
              labels: tuple[str, ...] = (), depends_on: tuple[str, ...] = ()) -> Path:
    """Write a valid skeleton `briefs/<id>.md`; refuses to overwrite."""

    validate_brief_id(brief_id)
    text = SKELETON.format(title=title.replace("\n", " "), priority=priority, labels=", ".join(labels),
                           depends=", ".join(depends_on))
    return _write_new(folder, brief_id, text, "the brief", "pick another id or edit the file")


def fork_text(text: str, source: str, seq: int) -> str:
    """A brief file for a fork of `source`: the same front matter and body, its title saying where it forked."""
    return re.sub(r"^title:[ \t]*(.*)$", lambda m: f"title: {m[1].strip()} (fork of {source} at seq {seq})", text,
                  count=1, flags=re.M)


def write_fork(folder: Path, brief_id: str, text: str) -> Path:
    """Write `briefs/<id>.md` for a fork; refuses to overwrite or to write an invalid brief."""
    return _write_new(folder, brief_id, text, "the forked brief", "pick another id for the fork")


def _write_new(folder: Path, brief_id: str, text: str, what: str, hint: str) -> Path:
    """Write a new, valid `folder/<id>.md`: never over a file, never an invalid brief."""
    from assay.errors import UsageError

    path = folder / f"{brief_id}.md"
    if path.exists():
        raise UsageError(f"{path} already exists", hint=hint)
    _, problems = check_brief(text, str(path), brief_id)
    if problems:
        raise UsageError(f"{what} would be invalid: {problems[0]}")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
