"""The last answer to each repeated GitHub read, with its ETag, kept across processes.

A read sent with `If-None-Match: <etag>` that GitHub answers 304 costs no rate-limit quota;
the body is then the one kept here. Entries are keyed by the request URL and the identity of
the token (a hash prefix: the token itself is never stored), one small file each, written
whole (`cachefile.save`). A missing or damaged entry is only a miss: the read is sent
without `If-None-Match` and its answer kept again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from assay.core import cachefile
from assay.core.records.recordtype import dataclass

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Kept:
    """One answer: its ETag, its JSON body and the URL of its next page (None on the last)."""

    etag: str
    body: Any
    next: str | None


def token_identity(token: str) -> str:
    """Which token answers were fetched with, without the token: GitHub's answers depend on it."""
    return hashlib.sha256(f"assay-etag:{token}".encode()).hexdigest()[:16]


class ETagStore:
    """Answers by URL for one token; in memory only when `folder` is None."""

    def __init__(self, folder: Path | None, identity: str) -> None:
        self.folder = folder / identity if folder is not None else None
        self._memory: dict[str, Kept] = {}

    def _path(self, url: str) -> Path | None:
        if self.folder is None:
            return None
        return self.folder / (hashlib.sha256(url.encode()).hexdigest()[:40] + ".json")

    def get(self, url: str) -> Kept | None:
        if url in self._memory:
            return self._memory[url]
        path = self._path(url)
        if path is None:
            return None
        data = cachefile.load(path)
        etag, nxt = data.get("etag"), data.get("next")
        if (data.get("v") != FORMAT_VERSION or data.get("url") != url or not isinstance(etag, str) or not etag
                or "body" not in data or not (nxt is None or isinstance(nxt, str))):
            return None  # absent, damaged, or another format: a miss
        kept = Kept(etag, data["body"], nxt)
        self._memory[url] = kept
        return kept

    def put(self, url: str, kept: Kept) -> None:
        if self._memory.get(url) == kept:
            return
        self._memory[url] = kept
        path = self._path(url)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # an unwritable cache only costs quota
        cachefile.save(path, {"v": FORMAT_VERSION, "url": url, "etag": kept.etag, "body": kept.body,
                              "next": kept.next})
