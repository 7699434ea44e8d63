"""Forges built in one `git fast-import` run: a commit of inline files on a ref, and the import itself."""

from __future__ import annotations

import subprocess

from tests.conftest import Forge

COMMITTER = b"committer Test <test@example.invalid> 1767225600 +0000\n"


def data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def commit(ref: str, files: dict[str, bytes], parent: str | None = None) -> bytes:
    """One fast-import commit on `ref` (after the ref's previous commit in the same stream, or `parent`)."""
    out = b"commit " + ref.encode() + b"\n" + COMMITTER + data(b"scale")
    if parent:
        out += b"from " + parent.encode() + b"\n"
    for path, content in files.items():
        out += b"M 100644 inline " + path.encode() + b"\n" + data(content)
    return out + b"\n"


def fast_import(forge: Forge, stream: bytes) -> None:
    subprocess.run(["git", "--git-dir", str(forge.path), "fast-import", "--quiet", "--date-format=raw"],
                   input=stream, capture_output=True, check=True)
