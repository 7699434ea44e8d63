"""The environments of processes Assay starts: agents, verify rows and journaled commands. No forge credentials.

A forge credential is kept out by its name (`GITHUB_TOKEN`, `GH_TOKEN`, `ASSAY_*TOKEN*`), by its value (the
value of any of those, under whatever other name it was copied to), by its shape (a GitHub token's prefix), and
by where git would take it from (`GIT_CONFIG_*`, which carries Assay's own authorization header).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping

from assay.core.credentials import SECRET_NAMES, TOKEN_SHAPE, held, secrets_in, strip_credentials

# What an agent is handed by its desk (set per run), and the settings of the `assay` it calls, passed when set.
AGENT_CONTEXT = ("ASSAY_FORGE", "ASSAY_BRIEF", "ASSAY_DESK", "ASSAY_EPOCH", "ASSAY_RUN", "ASSAY_ATTEMPT",
                 "ASSAY_PROMPT_FILE", "ASSAY_SOCKET", "ASSAY_BIN")
AGENT_SETTINGS = ("ASSAY_CACHE_DIR", "ASSAY_GIT_TIMEOUT", "ASSAY_DEBUG", "ASSAY_CRASH_AT", "ASSAY_CRASH_SCOPE")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PATTERN = re.compile(r"[A-Za-z_*?][A-Za-z0-9_*?]*")
_GIT_CONFIG = re.compile(r"^GIT_CONFIG_(?:COUNT|KEY_\d+|VALUE_\d+|PARAMETERS)$")


def is_credential(name: str, value: str, known: frozenset[str]) -> bool:
    """Whether a variable may carry a forge credential, judged by its name, its value and its shape."""
    return bool(SECRET_NAMES.match(name) or _GIT_CONFIG.match(name) or TOKEN_SHAPE.search(value)
                or any(secret in value for secret in known))


def known_credentials(source: Mapping[str, str]) -> frozenset[str]:
    """The values of the variables named as forge credentials, and the passwords and tokens written into URLs
    in any variable (each of at least 8 characters), and those this process holds out of its environment."""
    named = {v for k, v in source.items() if SECRET_NAMES.match(k) and len(v) >= 8}
    in_urls = {secret for v in source.values() if "@" in v for secret in secrets_in(v)}
    return frozenset(named | in_urls | held())


def allowed(name: str, patterns: Iterable[str]) -> bool:
    """Whether `name` matches one of `patterns` (names, or shell patterns such as `ANTHROPIC_*`)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def agent_env(allow: Iterable[str], context: dict[str, str], base: Mapping[str, str] | None = None,
              extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An allow-list: the variables whose names match a desk definition's `env_allow` (names or patterns),
    Assay's settings, the values a desk or brief sets (`extra`), and `context`.

    Nothing else of the desk's environment reaches the agent, and forge credentials never do, even when a
    desk definition names them or a value holds one under another name.
    """
    source = os.environ if base is None else base
    known = known_credentials(source)
    patterns = [*allow, *AGENT_SETTINGS]
    env = {k: v for k, v in source.items() if allowed(k, patterns) and not is_credential(k, v, known)}
    env.update({k: v for k, v in (extra or {}).items() if not is_credential(k, v, known)})
    env.update(context)
    if "ASSAY_FORGE" in env:
        env["ASSAY_FORGE"] = strip_credentials(env["ASSAY_FORGE"])
    return env


def scrubbed_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a command run by `assay step run`: forge credentials removed."""
    source = os.environ if base is None else base
    known = known_credentials(source)
    env = {k: v for k, v in source.items() if not is_credential(k, v, known)}
    if "ASSAY_FORGE" in env:
        env["ASSAY_FORGE"] = strip_credentials(env["ASSAY_FORGE"])
    return env
