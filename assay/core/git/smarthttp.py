"""A forge's refs listed over smart HTTP from this process: protocol v2's `ls-refs` in one POST, on a connection
kept alive between listings. No git process is started, and the forge answers one request where git's transport
makes two (its capability advertisement first, then the command).

Used only where git itself would send the request the same way: an `http://` or `https://` forge, no proxy, no
TLS, protocol or other `http.*` setting and no URL rewriting in git's configuration or environment; the headers
git would add for the forge (`http.<url>.extraHeader`, how Assay hands git a token) are sent as they are. Anything
unexpected (a connection that fails, an error status, a redirect, an answer that is not a whole v2 listing) is no
answer: the caller asks git's own transport instead, which also says why a forge cannot be read. After three such
answers in a row the forge is not asked this way again by this process.
"""

from __future__ import annotations

import http.client
import os
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field

from assay.core.git.run import run_git

_ENVIRONMENT = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "GIT_SSL_", "GIT_PROXY_", "GIT_HTTP_USER_AGENT", "GIT_HTTP_PROXY_AUTHMETHOD", "GIT_CURL_")
_CERTIFICATES = {"GIT_SSL_CAINFO": "cafile", "GIT_SSL_CAPATH": "capath", "sslcainfo": "cafile",
                 "sslcapath": "capath"}  # the TLS settings applied here (an https forge's certificate authorities)
RESULT = "application/x-git-upload-pack-result"
GIVE_UP_AFTER = 3  # failed answers in a row


@dataclass
class Settings:
    """How git would reach the forge, where this module can do the same."""

    headers: dict[str, str] = field(default_factory=dict)
    cafile: str | None = None
    capath: str | None = None


def settings_for(remote: str, env: dict[str, str], cwd: str) -> Settings | None:
    """How git would send its requests to `remote` (an http(s) URL without credentials), with `env` and the
    configuration seen from `cwd`; None when it would send them some other way than this module does (a proxy, a
    TLS setting but where to find certificate authorities, another `http.*` setting, a rewritten URL, protocol
    v0 or v1), or the configuration cannot be read. TLS settings do not matter to an `http://` forge."""
    tls = remote.lower().startswith("https://")
    if not tls and not remote.lower().startswith("http://"):
        return None
    found = Settings()
    for name, value in env.items():
        if value and name.startswith(_ENVIRONMENT):
            if name in _CERTIFICATES or (not tls and name.startswith("GIT_SSL_")):
                continue
            return None
    proc = run_git(["config", "--list", "-z"], cwd=cwd, env=env, check=False)
    if proc.returncode != 0:
        return None
    for item in proc.stdout.decode("utf-8", "replace").split("\0"):
        key, _, value = item.partition("\n")
        low = key.lower()
        if low.startswith("url.") and low.endswith(".insteadof"):
            return None
        if low == "protocol.version" and value.strip() != "2":
            return None
        if not low.startswith("http."):
            continue
        scope, _, setting = key[len("http."):].rpartition(".")
        if scope and remote != scope.rstrip("/") and not remote.startswith(scope.rstrip("/") + "/"):
            continue  # for another forge
        setting = setting.lower()
        if setting.startswith("ssl") and (not tls or setting in _CERTIFICATES):
            if tls:
                setattr(found, _CERTIFICATES[setting], value)
            continue
        if setting != "extraheader":
            return None  # a setting of git's transport this module does not apply: git lists
        if not value:
            found.headers.clear()  # git's rule: an empty value forgets the headers before it
            continue
        name, colon, said = value.partition(":")
        if not colon or not name.strip():
            return None
        found.headers[name.strip()] = said.strip()
    if tls:
        for name in ("GIT_SSL_CAINFO", "GIT_SSL_CAPATH"):  # the environment's over the configuration's, as in git
            if env.get(name):
                setattr(found, _CERTIFICATES[name], env[name])
    return found


class SmartHTTP:
    """POSTs to one forge's `git-upload-pack` over a kept-alive connection (one at a time; a second thread
    meanwhile gets a connection of its own)."""

    def __init__(self, remote: str, settings: Settings, stall_s: float) -> None:
        parts = urllib.parse.urlsplit(remote)
        self._https = parts.scheme.lower() == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._path = parts.path.rstrip("/") + "/git-upload-pack"
        self._headers = {"Content-Type": "application/x-git-upload-pack-request", "Accept": RESULT,
                         "Git-Protocol": "version=2", "User-Agent": "git/2 (assay)", **settings.headers}
        self._certificates = (settings.cafile, settings.capath)
        self._stall_s = stall_s
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._pid = os.getpid()  # a connection is never used by a process forked from its maker
        self.failures = 0  # in a row

    @property
    def usable(self) -> bool:
        return self.failures < GIVE_UP_AFTER

    def post(self, body: bytes) -> bytes | None:
        """The forge's answer to `body`, or None (see the module)."""
        if not self._lock.acquire(blocking=False):
            return self._post(self._connect(), body, keep=False)
        try:
            if self._conn is None or self._pid != os.getpid():
                self._conn, self._pid = self._connect(), os.getpid()
            answer = self._post(self._conn, body, keep=True)
            if answer is None:
                self._conn = None
            return answer
        finally:
            self._lock.release()

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            cafile, capath = self._certificates
            context = ssl.create_default_context(cafile=cafile, capath=capath)
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._stall_s, context=context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._stall_s)

    def _post(self, conn: http.client.HTTPConnection, body: bytes, keep: bool) -> bytes | None:
        for fresh in (False, True):  # a kept connection the forge closed meanwhile: once more on a new one
            try:
                conn.request("POST", self._path, body, self._headers)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                if fresh or not keep:
                    break
                continue
            if not keep or response.will_close:
                conn.close()
            ok = response.status == 200 and response.getheader("Content-Type", "").startswith(RESULT)
            self.failures = 0 if ok else self.failures + 1
            return data if ok else None
        self.failures += 1
        return None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
