"""The environments of processes Assay starts: agents, verify rows and journaled commands. No forge credentials."""

from __future__ import annotations

import os
from collections.abc import Iterable

from assay.credentials import SECRET_NAMES, strip_credentials

# What an agent is handed by its desk (set per run), and the settings of the `assay` it calls, passed when set.
AGENT_CONTEXT = ("ASSAY_FORGE", "ASSAY_BRIEF", "ASSAY_DESK", "ASSAY_EPOCH", "ASSAY_RUN", "ASSAY_ATTEMPT",
                 "ASSAY_PROMPT_FILE", "ASSAY_SOCKET")
AGENT_SETTINGS = ("ASSAY_CACHE_DIR", "ASSAY_GIT_TIMEOUT", "ASSAY_DEBUG", "ASSAY_CRASH_AT", "ASSAY_CRASH_SCOPE")


def agent_env(allow: Iterable[str], context: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str]:
    """An allow-list: the names a desk definition gives (`env_allow`), Assay's settings, and `context`.

    Nothing else of the desk's environment reaches the agent, and forge credentials never do,
    even when a desk definition names them.
    """
    source = os.environ if base is None else base
    names = set(allow) | set(AGENT_SETTINGS)
    env = {k: v for k, v in source.items() if k in names and not SECRET_NAMES.match(k)}
    env.update(context)
    if "ASSAY_FORGE" in env:
        env["ASSAY_FORGE"] = strip_credentials(env["ASSAY_FORGE"])
    return env


def scrubbed_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a command run by `assay step run`: forge credentials removed."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not SECRET_NAMES.match(k)}
    if "ASSAY_FORGE" in env:
        env["ASSAY_FORGE"] = strip_credentials(env["ASSAY_FORGE"])
    return env
