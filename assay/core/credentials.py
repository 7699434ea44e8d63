"""Forge credentials: what they look like, so that none reaches output, logs, the journal or an agent."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

# environment variables that hold forge credentials: never passed to an agent or a journaled command
SECRET_NAMES = re.compile(r"^(GITHUB_TOKEN|GH_TOKEN|GH_ENTERPRISE_TOKEN|GITHUB_ENTERPRISE_TOKEN|ASSAY_.*TOKEN.*)$")
_IN_URL = re.compile(r"(://)[^/@\s]+@")
REDACTED = b"[redacted]"  # what a credential's value becomes in what the journal keeps (`scrub`)
_HELD: dict[str, str] = {}  # forge credentials this process took out of its environment (`hold`)


def hold() -> set[str]:
    """Take the forge credentials out of this process's environment, keeping them here for `token_for`: a
    process this one starts inherits none, and `held` still names them for masking. Returns their values."""
    for name in [k for k in os.environ if SECRET_NAMES.match(k)]:
        _HELD[name] = os.environ.pop(name)  # unsetenv too: the C environment no longer has it
    return set(_HELD.values())


def held() -> frozenset[str]:
    """The values `hold` took (those of at least 8 characters)."""
    return frozenset(v for v in _HELD.values() if len(v) >= 8)


def named(name: str) -> str | None:
    """The credential in the environment variable `name`, whether still there or taken by `hold`."""
    return os.environ.get(name) or _HELD.get(name) or None


TOKEN_SHAPE = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")
# a URL's `user:password@` that git quotes without the scheme: `'user:pw@/srv/forge.git' does not appear to be…`
_SCHEMELESS = re.compile(r"(?<![\w/.:@-])[^\s'\"/@:]+:[^\s'\"/@]+@(?=/)")
_KNOWN: set[str] = set()  # credentials written into the URLs this process was given (`remember`)


def remember(url: str) -> None:
    """Note the credentials a forge URL carries, so that `redact` hides them however a text quotes them."""
    _KNOWN.update(secrets_in(url))


def redact(text: str) -> str:
    """The one mask for every text that may quote a credential (errors, git's own words, notes, the board): a
    URL's `user:password@`, the credentials this process knows (its environment's tokens, those it holds, those
    of the URLs it was given) and anything shaped like a GitHub token become `***`."""
    text = _SCHEMELESS.sub("***@", _IN_URL.sub(r"\1***@", text))
    known = _KNOWN | held() | {v for k, v in os.environ.items() if SECRET_NAMES.match(k) and len(v) >= 8}
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, "***")
    return TOKEN_SHAPE.sub("***", text)


def scrub(data: bytes, secrets: Iterable[bytes]) -> bytes:
    """`data` with each of `secrets` (longest first, as `known_secrets` orders them) replaced by `REDACTED`: how a
    transcript or a worktree is kept in the journal."""
    for secret in secrets:
        data = data.replace(secret, REDACTED)
    return data


def strip_credentials(url: str) -> str:
    """The URL without a user:token part, for processes that must not see forge credentials."""
    return _IN_URL.sub(r"\1", url)


_HTTP_USERINFO = re.compile(r"^(?P<scheme>https?://)(?P<user>[^/@:\s]*)(?::(?P<password>[^/@\s]*))?@(?P<rest>.*)$",
                            re.IGNORECASE)


def http_userinfo(url: str) -> tuple[str, str] | None:
    """The `user:password` (or a bare token as the user) an http(s) URL carries; None when it carries none."""
    m = _HTTP_USERINFO.match(url.strip())
    if m is None or not (m["user"] or m["password"]):
        return None
    return m["user"], m["password"] or ""


def secrets_in(text: str) -> set[str]:
    """The credential values written into URLs in `text` (passwords, and bare tokens given as the user)."""
    found: set[str] = set()
    for m in re.finditer(r"[a-z][a-z0-9+.-]*://([^/@:\s]+)(?::([^/@\s]*))?@", text, re.IGNORECASE):
        found.update(v for v in (m[2] or m[1],) if len(v) >= 8)
    return found


def _host(url: str) -> str | None:
    m = re.match(r"(?:[a-z][a-z0-9+.-]*://(?:[^@/]+@)?|git@)(?P<host>[^/:]+)", url.strip())
    return m["host"].lower() if m else None


def token_for(url: str) -> str | None:
    """The GitHub token (`GITHUB_TOKEN`, else `GH_TOKEN`) for a forge on github.com or on the host of
    `ASSAY_GITHUB_API`; None for any other forge, which must never receive it."""
    host = _host(url)
    api = os.environ.get("ASSAY_GITHUB_API", "")
    if host is None or not (host in ("github.com", "www.github.com") or (api and _host(api) == host)):
        return None
    return named("GITHUB_TOKEN") or named("GH_TOKEN")
