"""Forge credentials: what they look like, so that none reaches output, logs, the journal or an agent."""

from __future__ import annotations

import os
import re

# environment variables that hold forge credentials: never passed to an agent or a journaled command
SECRET_NAMES = re.compile(r"^(GITHUB_TOKEN|GH_TOKEN|GH_ENTERPRISE_TOKEN|GITHUB_ENTERPRISE_TOKEN|ASSAY_.*TOKEN.*)$")
_IN_URL = re.compile(r"(://)[^/@\s]+@")


def redact(text: str) -> str:
    """Remove credentials embedded in URLs (`https://user:token@host` -> `https://***@host`)."""
    return _IN_URL.sub(r"\1***@", text)


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
    for m in re.finditer(r"https?://([^/@:\s]+)(?::([^/@\s]*))?@", text, re.IGNORECASE):
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
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None
