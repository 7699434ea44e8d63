"""Desk definitions: `desks/<name>.yaml`, validated with file and line for every problem."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from assay.core.briefs import Brief, Checker, Problem, construct_value, main_folder, tool_rules
from assay.core.credentials import SECRET_NAMES
from assay.core.envs import NAME, PATTERN
from assay.core.git import ForgeGit
from assay.core.records import MAIN_REF, check_tip
from assay.core.records.recordtype import dataclass
from assay.errors import ConfigInvalid

KEYS = ("name", "takes", "agent", "lease_s", "heartbeat_s", "singleton", "attempts", "env_allow", "env",
        "verify_timeout_s", "hooks")
HOOK_KEYS = ("before_step", "after_step")
AGENT_KEYS = ("command", "timeout_s", "idle_s", "install", "session", "prompt", "protocol", "mode", "tools")
PROTOCOLS = ("cli", "acp")  # a command run with its prompt (`cli`), or an Agent Client Protocol adapter (`acp`)
PROMPT_ROUTES = ("argument", "stdin", "env")  # where the agent reads the text the desk hands it (`agent.prompt`)
# CLIs known never to read $ASSAY_PROMPT_FILE, and the routes each does read
KNOWN_ROUTES = {"claude": ("argument", "stdin"), "codex": ("argument", "stdin"), "aider": ("argument",)}
SESSION_KEYS = ("new", "resume", "file")
SESSION_VALUES = ("session", "home", "cwd_slug", "worktree")  # the placeholders `agent.session` may use
ENV_VALUES = ("home", "state")  # the placeholders a desk's `env:` values may use: the agent's HOME, the desk's folder
DEFAULT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER")
DEFAULT_AGENT_TIMEOUT_S = 3600
DEFAULT_IDLE_S = 600  # an agent with no output, no step and no conversation change for this long is ended as idle


@dataclass(frozen=True)
class SessionSpec:
    """How the agent CLI saves its conversation and continues one: the arguments a fresh run adds (`new`) and a
    resumed one adds (`resume`), and the transcript file (`file`), with `{session}` (the session's id),
    `{home}` (the agent's HOME), `{worktree}`, `{cwd_slug}` (the worktree's path, each character other than a
    letter or digit made `-`) and `{NAME}` (a variable of the agent's environment) filled in. A `file` with `*`
    in it is found: the newest match the run wrote. Without `{session}` in `new`, the CLI picks the id."""

    new: tuple[str, ...]
    resume: tuple[str, ...]
    file: str
    line: int = 0  # where the desk file says it, for a preflight that finds it cannot work


LEASE_S = 1200  # a desk's lease when its file names none
HEARTBEAT_S = 300  # its heartbeat when its file names none (a quarter of a shorter lease): one push in 5 minutes
PERSON_HEARTBEAT_S = 60  # how often a claim of no desk on main is expected to be renewed (by hand, or an agent)


def default_heartbeat(lease_s: int) -> int:
    """The heartbeat of a desk whose file gives a lease and no heartbeat: `HEARTBEAT_S`, or a quarter of a lease
    shorter than four of them."""
    return max(1, min(HEARTBEAT_S, lease_s // 4))


@dataclass(frozen=True)
class DeskSpec:
    name: str
    command: tuple[str, ...]
    labels: tuple[str, ...] = ()
    lease_s: int = LEASE_S
    heartbeat_s: int = HEARTBEAT_S
    singleton: bool = False
    attempts: int = 3
    env_allow: tuple[str, ...] = DEFAULT_ENV  # names, or shell patterns such as ANTHROPIC_*
    verify_timeout_s: int = 600
    # values the agent and its effects get, whatever the desk's environment; `{home}` and `{state}` (ENV_VALUES)
    # are filled in as the agent starts (`sessions.desk_values`)
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: int = DEFAULT_AGENT_TIMEOUT_S  # an agent run past this is stopped, and the attempt counted
    idle_s: int = DEFAULT_IDLE_S  # an agent showing no sign of work this long is ended; the attempt is not counted
    prompt: str = "env"  # where the agent reads what the desk hands it: `argument`, `stdin` or `env` (PROMPT_ROUTES)
    install: str = ""  # how to install the agent command, for the error when it is missing
    session: SessionSpec | None = None  # how the agent's conversation is checkpointed and resumed, if it can be
    before_step: str = ""  # a shell command run before each agent step's intent is journaled; non-zero refuses it
    after_step: str = ""  # a shell command run after each agent step's result is journaled; it changes nothing
    protocol: str = "cli"  # `acp`: the command is an Agent Client Protocol adapter the desk drives (`desk/acp.py`)
    mode: str = ""  # an ACP session mode to set before the prompt (Claude's `default`: it asks before it acts)
    tools: tuple[tuple[str, str, str], ...] = ()  # (kind, command pattern, policy): how an ACP tool call is journaled

    def takes(self, brief: Brief) -> bool:
        """A brief naming a desk goes to that desk; otherwise to desks whose labels it carries."""
        if brief.desk:
            return brief.desk == self.name
        return not self.labels or bool(set(self.labels) & set(brief.labels))


def parse_desk(text: str, path: str) -> DeskSpec:
    spec, problems = check_desk(text, path)
    if problems or spec is None:
        raise ConfigInvalid(str(problems[0]), hint="see desks/scripted.yaml for a complete example")
    return spec


def check_desk(text: str, path: str) -> tuple[DeskSpec | None, list[Problem]]:
    """The desk `text` (the file at `path`) defines, or None with every problem it has, each with its line."""
    check = Checker(path)
    pairs = check.mapping(text, "a desk definition", KEYS, "desk")
    if pairs is None:
        return None, check.problems
    fields = _read_fields(check, pairs)
    if check.problems:
        return None, check.problems
    name = fields.need("name", str, lambda v: v.strip(), "`name` must be a non-empty string")
    if "name" not in fields.data:
        check.add(check.root, "`name:` is required")
    agent = fields.need("agent", dict, lambda v: isinstance(v.get("command"), list) and v["command"]
                        and all(isinstance(a, str) and "\0" not in a for a in v["command"]),
                        "`agent:` must be a mapping with `command:`, a non-empty list of strings (no NUL character)")
    if "agent" not in fields.data:
        check.add(check.root, "`agent:` is required", "e.g. agent: {command: [\"claude\", \"-p\", \"{prompt}\"]}")
    agent_fields = _agent_fields(agent, fields.nodes["agent"], check) if agent else {}
    labels = _labels(fields)
    ints = {k: fields.need(k, int, lambda v: v > 0, f"`{k}` must be a whole number above 0")
            for k in ("lease_s", "heartbeat_s", "attempts", "verify_timeout_s")}
    singleton = fields.need("singleton", bool, message="`singleton` must be true or false")
    env_allow, env = _environment(fields)
    hooks = fields.need("hooks", dict, lambda v: all(k in HOOK_KEYS and isinstance(x, str) and x.strip()
                                                     for k, x in v.items()),
                        f"`hooks` must map {' and '.join(HOOK_KEYS)} to shell commands") or {}
    lease, heartbeat = _lease(fields, ints["lease_s"], ints["heartbeat_s"])
    if check.problems or not name or not agent:
        return None, check.problems
    defaults = DeskSpec(name=name, command=tuple(agent["command"]))
    return DeskSpec(
        name=name, command=tuple(agent["command"]), labels=tuple(labels),
        lease_s=lease, heartbeat_s=heartbeat,
        singleton=bool(singleton), attempts=ints["attempts"] or defaults.attempts,
        env_allow=tuple(env_allow) if env_allow is not None else defaults.env_allow,
        verify_timeout_s=ints["verify_timeout_s"] or defaults.verify_timeout_s,
        env=tuple(sorted((k, str(v)) for k, v in env.items())),
        before_step=hooks.get("before_step", ""), after_step=hooks.get("after_step", ""), **agent_fields), []


class _Fields:
    """A desk file's values by key, with their nodes (a problem's line) and the checker that collects problems."""

    def __init__(self, data: dict[str, Any], nodes: dict[str, Any], check: Checker) -> None:
        self.data, self.nodes, self.check = data, nodes, check

    def need(self, key: str, kind: type, check: Any = None, message: str = "") -> Any:
        """`key`'s value if it is a `kind` that passes `check`; None if it is not there, or (a problem) not so."""
        if key not in self.data:
            return None
        value = self.data[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)) or (check and not check(value)):
            self.check.add(self.nodes[key], message or f"`{key}` must be a {kind.__name__}")
            return None
        return value


def _read_fields(check: Checker, pairs: list[tuple[Any, Any]]) -> _Fields:
    """The value of every key of the file, a problem for each that does not construct (a YAML tag)."""
    import yaml

    nodes = {key.value: value for key, value in pairs}
    data: dict[str, Any] = {}
    for key, node in nodes.items():
        try:
            data[key] = construct_value(node)
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            check.add(node, f"cannot read `{key}`: {getattr(exc, 'problem', None) or exc}", "remove the YAML tag")
    return _Fields(data, nodes, check)


def _agent_fields(agent: dict[str, Any], node: Any, check: Checker) -> dict[str, Any]:
    """`agent:`'s keys but `command`, checked, as `DeskSpec`'s fields; each problem is at `agent:`'s `node`."""

    def bad(why: str, fix: str = "") -> None:
        check.add(node, why, fix)

    for key in agent:
        if key not in AGENT_KEYS:
            bad(f"unknown agent key {key!r}", f"allowed: {', '.join(AGENT_KEYS)}")
    times = []
    for key, default in (("timeout_s", DEFAULT_AGENT_TIMEOUT_S), ("idle_s", DEFAULT_IDLE_S)):
        raw = agent.get(key, default)
        if not isinstance(raw, int) or isinstance(raw, bool) or raw <= 0:
            bad(f"`agent.{key}` must be a whole number above 0 (seconds)")
            raw = default
        times.append(raw)
    install = agent.get("install", "")
    if not isinstance(install, str):
        bad("`agent.install` must be a string: how to install the agent command")
        install = ""
    protocol = agent.get("protocol", "cli")
    if protocol not in PROTOCOLS:
        bad(f"`agent.protocol` must be one of {', '.join(PROTOCOLS)}", "acp, for an ACP adapter")
        protocol = "cli"
    session = _session(agent.get("session"), bad, protocol == "acp")
    if session is not None:
        at = next((k.start_mark.line + 1 for k, _ in node.value if k.value == "session"), 0)
        session = SessionSpec(session.new, session.resume, session.file, at)
    mode = agent.get("mode", "")
    if not isinstance(mode, str) or (mode and protocol != "acp"):
        bad("`agent.mode` is an ACP session mode (a string), for `protocol: acp` only")
        mode = ""
    tools = _tools(agent.get("tools"), bad)
    if tools and protocol != "acp":
        bad("`agent.tools` says how ACP tool calls are journaled: for `protocol: acp` only")
    route = "env" if protocol == "acp" else _prompt_route(agent, session is not None, bad)
    return {"timeout_s": times[0], "idle_s": times[1], "install": install, "session": session, "prompt": route,
            "protocol": protocol, "mode": mode, "tools": tools}


def _labels(fields: _Fields) -> list[str]:
    """`takes.labels`: the labels of the briefs the desk takes (none: any brief not naming another desk)."""
    takes = fields.need("takes", dict) or {}
    labels = takes.get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        fields.check.add(fields.nodes.get("takes"), "`takes.labels` must be a list of labels")
        return []
    return labels


def _environment(fields: _Fields) -> tuple[list[str] | None, dict[str, Any]]:
    """`env_allow` (None when the file gives none) and `env`, which may not set a credential or Assay's own."""
    env_allow = fields.need("env_allow", list, lambda v: all(isinstance(x, str) and PATTERN.fullmatch(x) for x in v),
                            "`env_allow` must be a list of variable names or patterns (e.g. PATH, ANTHROPIC_*)")
    env = fields.need("env", dict, lambda v: all(isinstance(k, str) and NAME.fullmatch(k) and isinstance(x, str | int)
                                                 and not isinstance(x, bool) and "\0" not in str(x)
                                                 for k, x in v.items()),
                      "`env` must map variable names to values (strings, no NUL character)") or {}
    for key in env:
        if SECRET_NAMES.match(key) or key.startswith("ASSAY_"):
            fields.check.add(fields.nodes["env"], f"`env` may not set {key}: forge credentials and Assay's own "
                             "variables are not the desk's to give", "give an effect's own settings other names")
    return env_allow, env


def _lease(fields: _Fields, lease_s: int | None, heartbeat_s: int | None) -> tuple[int, int]:
    """The lease and heartbeat, the defaults for those the file leaves out; a heartbeat over half the lease is a
    problem."""
    lease = lease_s or LEASE_S
    heartbeat = heartbeat_s or default_heartbeat(lease)
    if heartbeat * 2 > lease:
        fields.check.add(fields.nodes.get("heartbeat_s") or fields.nodes.get("lease_s"),
                         f"`heartbeat_s` ({heartbeat}) must be at most half of `lease_s` ({lease}), "
                         "or a slow renewal loses the claim")
    return lease, heartbeat


def _tools(raw: Any, bad: Callable[..., None]) -> tuple[tuple[str, str, str], ...]:
    """`agent.tools`: a list of `{kind, match, policy}` (match a command's shell pattern, `*` when left out)."""
    rules, problems = tool_rules(raw, "agent.tools")
    for message, hint in problems:
        bad(message, hint)
    return rules


def _session(raw: Any, bad: Callable[..., None], acp: bool = False) -> SessionSpec | None:
    """`agent.session`, checked: `new` and `resume` lists of strings, `file` a path with `{session}` in it. An ACP
    agent's (`acp`) has `file` only: its adapter opens and loads sessions over the protocol."""
    if raw is None:
        return None
    example = 'e.g. session: {new: [--session-id, "{session}"], resume: [--resume, "{session}"], file: ...}'
    if acp:
        example = 'e.g. session: {file: "{home}/.claude/projects/{cwd_slug}/{session}.jsonl"}'
    if not isinstance(raw, dict):
        bad("`agent.session` must be a mapping of new, resume and file" if not acp else
            "`agent.session` of an ACP agent must be a mapping with `file`", example)
        return None
    keys = ("file",) if acp else SESSION_KEYS
    unknown = [k for k in raw if k not in keys]
    lists: list[Any] = [raw.get(k, [] if acp else None) for k in ("new", "resume")]
    file = raw.get("file")
    if unknown:
        bad(f"unknown agent.session key {unknown[0]!r}" + (" (an ACP adapter opens and loads its sessions over the "
                                                           "protocol: only `file` is said)" if acp else ""),
            f"allowed: {', '.join(keys)}")
    elif not all(isinstance(v, list) and all(isinstance(a, str) for a in v) for v in lists):
        bad("`agent.session.new` and `agent.session.resume` must be lists of strings", example)
    elif not isinstance(file, str) or "{session}" not in file:
        bad("`agent.session.file` must be the transcript's path, with {session} in it", example)
    elif not file.startswith(("/", "{")):
        bad(f"`agent.session.file` ({file}) must be an absolute path: the desk would look for its transcripts "
            "relative to wherever it runs", "start it with {home}, {worktree}, a variable such as {CODEX_HOME}, or /")
    else:
        placeholders = set(re.findall(r"\{(\w+)\}", " ".join([*lists[0], *lists[1], file])))
        extra = sorted(p for p in placeholders - set(SESSION_VALUES) if not NAME.fullmatch(p) or p.lower() == p)
        if extra:
            bad(f"`agent.session` names {{{extra[0]}}}, which a desk does not fill in",
                f"use {', '.join('{' + v + '}' for v in SESSION_VALUES)}, or an agent variable such as {{CODEX_HOME}}")
            return None
        return SessionSpec(tuple(lists[0] or ()), tuple(lists[1] or ()), file)
    return None


def _prompt_route(agent: dict[str, Any], session: bool, bad: Callable[..., None]) -> str:
    """Where the agent reads the text the desk hands it (its prompt, later steering), provably: `argument` when the
    command names `{prompt}` or `{prompt_file}`, else `agent.prompt` (`stdin`: the desk writes it there; `env`:
    the agent reads the file `$ASSAY_PROMPT_FILE` names). A desk that resumes its agent (`agent.session`) hands it
    text again and must say where; a CLI known not to read a route (`KNOWN_ROUTES`) cannot take it, nor a path
    for its prompt's text."""
    command = [str(a) for a in agent["command"]]
    named = any("{prompt}" in a or "{prompt_file}" in a for a in command)
    raw = agent.get("prompt")
    program = command[0].rsplit("/", 1)[-1]
    fix = 'put "{prompt}" (or "{prompt_file}") in `agent.command`, or set `agent.prompt: stdin`'
    if raw is not None and raw not in PROMPT_ROUTES:
        bad(f"`agent.prompt` must be one of {', '.join(PROMPT_ROUTES)}", fix)
        return "env"
    route = "argument" if named else str(raw or "env")
    if raw == "argument" and not named:
        bad("`agent.prompt: argument` but `agent.command` names neither {prompt} nor {prompt_file}", fix)
    elif named and raw not in (None, "argument"):
        bad(f"`agent.command` names {{prompt}} or {{prompt_file}}, so the prompt is an argument, not {raw}",
            "drop `agent.prompt`, or the placeholder")
    elif route not in KNOWN_ROUTES.get(program, PROMPT_ROUTES):
        reads = " or ".join("its arguments" if r == "argument" else r for r in KNOWN_ROUTES[program])
        never = "stdin" if route == "stdin" else "$ASSAY_PROMPT_FILE"
        bad(f"{program} reads its prompt from {reads}, never from {never}: the brief and steering would reach "
            "no one", fix)
    elif program in KNOWN_ROUTES and route == "argument" and not any("{prompt}" in a for a in command):
        bad(f"{program} takes its prompt's text as an argument: {{prompt_file}} would hand it a path", fix)
    elif route == "env" and session and raw is None:
        bad("a desk with `agent.session` resumes its agent with steering as the next message, but "
            "`agent.command` names no {prompt} or {prompt_file}: say where the agent reads it",
            fix + ", or `agent.prompt: env` for an agent that reads $ASSAY_PROMPT_FILE")
    return route


def load_desk(git: ForgeGit, main: str | None, name: str) -> DeskSpec:
    """`desks/<name>.yaml` from the forge's main, so every machine runs the same definition."""
    if main:
        git.ensure_objects({MAIN_REF: main})
        head, found = git.read_typed([main, f"{main}:desks/{name}.yaml"])
        check_tip(MAIN_REF, main, head.kind if head else None)
        if found is not None and found.kind == "blob":
            spec = parse_desk(found.data.decode("utf-8", "replace"), f"desks/{name}.yaml")
            if spec.name != name:
                raise ConfigInvalid(f"desks/{name}.yaml names desk {spec.name!r}",
                                    hint=f"a desk file is named after its desk: set `name: {name}`")
            return spec
        known = [e.name.removesuffix(".yaml") for e in main_folder(git, main, "desks")[0] if e.name.endswith(".yaml")]
    else:
        known = []
    raise ConfigInvalid(f"no desk {name!r} on the forge's main",
                        hint=f"known desks: {', '.join(known) or 'none'}; add desks/{name}.yaml to main")


def desks_on_main(git: ForgeGit, main: str) -> tuple[list[DeskSpec], list[Problem]]:
    """Every desk definition on main, with the problems of those that do not validate."""
    git.ensure_objects({MAIN_REF: main})
    tree, problems = main_folder(git, main, "desks")
    files = sorted(e for e in tree if e.name.endswith(".yaml"))
    specs: list[DeskSpec] = []
    for entry, data in zip(files, git.read_objects([e.sha for e in files]), strict=True):
        path = f"desks/{entry.name}"
        spec, found = check_desk((data or b"").decode("utf-8", "replace"), path)
        if spec is not None and spec.name != entry.name.removesuffix(".yaml"):
            found = [Problem(path, None, f"names desk {spec.name!r}; a desk file is named after its desk")]
        problems += found
        if spec is not None and not found:
            specs.append(spec)
    return specs, problems
