"""git's environment (no prompts, stable messages, a token as a header, its time limits), where Assay's caches
are and whether a forge is a path on this machine: what a command needs before it runs git, loaded without
`subprocess` or `re` (`ahead.py` starts a cache's first fetch with these alone)."""

from __future__ import annotations

import os


def git_env() -> dict[str, str]:
    """The environment git runs in: no prompts, stable messages, and an HTTP forge that stalls (accepts the
    connection, then sends nothing) given up after `ASSAY_GIT_STALL_S` seconds, not the whole git timeout."""
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C", "GIT_HTTP_LOW_SPEED_LIMIT": "1",
                "GIT_HTTP_LOW_SPEED_TIME": str(int(stall_seconds()))})
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


def auth_env(url: str, token: str, user: str = "x-access-token") -> dict[str, str]:
    """git's environment with `token` as an HTTP header for `url`'s host, set through GIT_CONFIG_* variables:
    never in a URL, an argument list or a config file, and only for the git processes that talk to the forge."""
    import base64
    import re

    env = git_env()
    n = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    host = re.match(r"[a-z]+://[^/]+/", url)
    key = f"http.{host.group(0) if host else url}.extraHeader"
    basic = base64.b64encode(f"{user}:{token}".encode()).decode()
    env.update({"GIT_CONFIG_COUNT": str(n + 1), f"GIT_CONFIG_KEY_{n}": key,
                f"GIT_CONFIG_VALUE_{n}": f"Authorization: Basic {basic}"})
    return env


def default_cache_root() -> str:
    explicit = os.environ.get("ASSAY_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "assay")


def _seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment; bad input names the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        from assay.errors import UsageError

        raise UsageError(f"{name}={raw!r} is not a number of seconds above 0", hint=f"unset it, or e.g. {name}=60")
    return value


def git_timeout() -> float:
    return _seconds("ASSAY_GIT_TIMEOUT", 120)


def stall_seconds() -> float:
    """How long an HTTP forge may send nothing before a read of it is given up (`ASSAY_GIT_STALL_S`)."""
    return _seconds("ASSAY_GIT_STALL_S", 30)


def is_local_path(url: str) -> bool:
    return "://" not in url and not (":" in url.split("/")[0] and not url.startswith("/"))


def forge_access(url: str, token: str | None = None) -> tuple[str, dict[str, str] | None]:
    """What git is given for the forge `url`: the URL its argument lists show (a password or token it carries
    taken out) and the environment of the git processes that reach it, with the token (`token`, else the forge's
    own: `credentials.token_for`) or the URL's `user:password` as a header, never as an argument; None for
    git's plain environment (a forge that takes none)."""
    if is_local_path(url) and not token:  # a folder: no login (and nothing to load for one)
        return url, None
    from assay.core.credentials import http_userinfo, remember, strip_credentials, token_for

    remember(url)  # its password, however git's errors quote it, is masked
    userinfo = http_userinfo(url)
    bare = userinfo or url.startswith("file://")  # a file URL's `user:pw@` is no login: git needs none
    remote = strip_credentials(url) if bare else url
    token = token if token is not None else token_for(url)
    if token:
        return remote, auth_env(remote, token)
    if userinfo:  # a URL's own user:password goes to git as a header too, never as an argument
        return remote, auth_env(remote, userinfo[1], userinfo[0]) if userinfo[1] else auth_env(remote, userinfo[0])
    return remote, None


def cache_env(cache: str, env: dict[str, str] | None) -> dict[str, str]:
    """`env` (git's plain environment for None) for git in the cache `cache`, which never looks above it: a damaged
    cache is an error, never the repository around it (a cache inside a checkout) taking its objects and refs."""
    return {**(env or git_env()), "GIT_CEILING_DIRECTORIES": os.path.dirname(os.path.abspath(cache))}
