"""Forge credentials: what they look like, so that none reaches output, logs, the journal or an agent."""

from __future__ import annotations

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
