"""Sweeper policies: `sweepers/<name>.yaml` on main, validated with file and line like desk definitions."""

from __future__ import annotations

from typing import Any

from assay.core.briefs import Checker, Problem, construct_value, main_folder
from assay.core.git import ForgeGit
from assay.core.records import MAIN_REF, check_tip
from assay.core.records.recordtype import dataclass
from assay.errors import ConfigInvalid

# section -> its keys and their kinds (int: a whole number of seconds >= 0; bool: true or false)
SECTIONS: dict[str, dict[str, type]] = {
    "expire": {"grace_s": int},
    "stuck": {"after_s": int, "release": bool},
    "unknown": {"after_s": int},
    "waits": {"settle": bool},
    "retire": {"after_s": int, "enabled": bool},
}
KEYS = ("name", *SECTIONS)
DEFAULT_NAME = "default"


@dataclass(frozen=True)
class SweepPolicy:
    """What a sweep does; every field has the default a missing key gets."""

    name: str = DEFAULT_NAME
    grace_s: int = 60  # expire: a held claim's tip still after lease_s + grace_s (sweeper's clock)
    stuck_after_s: int = 3600  # stuck: a renewing claim whose journal and branch are still this long
    stuck_release: bool = False  # … is released (journaled) rather than only reported
    unknown_after_s: int = 3600  # an outcome_unknown left this long is raised for a person
    settle_waits: bool = True  # waiting claims whose condition the forge shows met are woken or settled
    retire_after_s: int = 7 * 86400  # a brief done this long is retired (its refs folded, retired.py)
    retire: bool = True


_FIELD = {("expire", "grace_s"): "grace_s", ("stuck", "after_s"): "stuck_after_s",
          ("stuck", "release"): "stuck_release", ("unknown", "after_s"): "unknown_after_s",
          ("waits", "settle"): "settle_waits", ("retire", "after_s"): "retire_after_s",
          ("retire", "enabled"): "retire"}


def check_policy(text: str, path: str) -> tuple[SweepPolicy | None, list[Problem]]:
    """The policy in `text`, or every problem found in it with its line."""
    import yaml

    check = Checker(path)
    problems, bad = check.problems, check.add
    pairs = check.mapping(text, "a sweeper policy", KEYS, "sweeper")
    if pairs is None:
        return None, problems
    values: dict[str, Any] = {}
    for key, node in pairs:
        if key.value == "name":
            name = _value(node, bad)
            if not isinstance(name, str) or not name.strip():
                bad(node, "`name` must be a non-empty string")
            else:
                values["name"] = name
        elif not isinstance(node, yaml.MappingNode):
            bad(node, f"`{key.value}` must be a mapping of {', '.join(SECTIONS[key.value])}")
        else:
            _section(key.value, node, values, bad)
    if problems:
        return None, problems
    return SweepPolicy(**values), []


def _section(section: str, node: Any, values: dict[str, Any], bad: Any) -> None:
    allowed = SECTIONS[section]
    for key, value_node in node.value:
        kind = allowed.get(key.value)
        if kind is None:
            bad(key, f"unknown key {key.value!r} in `{section}`", f"allowed: {', '.join(allowed)}")
            continue
        value = _value(value_node, bad)
        if kind is bool and not isinstance(value, bool):
            bad(value_node, f"`{section}.{key.value}` must be true or false")
        elif kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            bad(value_node, f"`{section}.{key.value}` must be a whole number of seconds, 0 or more")
        else:
            values[_FIELD[(section, key.value)]] = value


def _value(node: Any, bad: Any) -> Any:
    import yaml

    try:
        return construct_value(node)
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        bad(node, f"cannot read the value: {getattr(exc, 'problem', None) or exc}", "remove the YAML tag")
        return None


def parse_policy(text: str, path: str) -> SweepPolicy:
    policy, problems = check_policy(text, path)
    if problems or policy is None:
        raise ConfigInvalid(str(problems[0]), hint="see sweepers/default.yaml for a complete example")
    return policy


def load_policy(git: ForgeGit, main: str, name: str = DEFAULT_NAME) -> SweepPolicy:
    """`sweepers/<name>.yaml` on the forge's main (its objects already fetched); without a `default`
    file, the defaults above. A file that does not validate is refused (exit 2), with file and line."""
    head, found = git.read_typed([main, f"{main}:sweepers/{name}.yaml"])
    check_tip(MAIN_REF, main, head.kind if head else None)
    path = f"sweepers/{name}.yaml"
    if found is not None and found.kind == "blob":
        policy = parse_policy(found.data.decode("utf-8", "replace"), path)
        if policy.name != name:
            raise ConfigInvalid(f"{path} names sweeper {policy.name!r}",
                                hint=f"a sweeper file is named after its policy: set `name: {name}`")
        return policy
    if name == DEFAULT_NAME:
        return SweepPolicy()
    known = [e.name.removesuffix(".yaml") for e in main_folder(git, main, "sweepers")[0] if e.name.endswith(".yaml")]
    raise ConfigInvalid(f"no sweeper policy {name!r} on the forge's main",
                        hint=f"known policies: {', '.join(known) or 'none'}; add {path} to main")
