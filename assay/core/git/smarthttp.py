"""A forge's refs listed, and pushes made, over smart HTTP from this process, on a connection kept alive between
requests: a listing is protocol v2's `ls-refs` in one POST (no git process; the forge answers one request where
git's transport makes two, its capability advertisement first, then the command); a push is one POST of its
commands and pack to `git-receive-pack` (`push.py`).

Used only where git itself would send the request the same way: an `http://` or `https://` forge, no proxy, no
TLS setting but where certificate authorities are, no protocol or other `http.*` setting and no URL rewriting in
git's configuration or environment; the headers git would add for the forge (`http.<url>.extraHeader`, how Assay
hands git a token) are sent as they are. For a listing, anything unexpected (a connection that fails, an error
status, a redirect, an answer that is not a whole v2 listing) is no answer: the caller asks git's own transport
instead, which also says why a forge cannot be read. For a push, what was not sent, or refused before it was read
(a login, a redirect), goes through `git push`; an answer lost once sent is an outcome not heard, settled by
re-reading. After three such answers in a row a service is not asked this way again by its port. A forge that
sends nothing for the stall time (`ASSAY_GIT_STALL_S`), or has not answered whole within git's timeout, is an error
here as through git.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from assay.core.credentials import redact
from assay.core.git.gitenv import git_timeout
from assay.core.git.run import run_git
from assay.core.git.vetting import config_files, file_stamps
from assay.errors import ForgeError

_ENVIRONMENT = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "GIT_SSL_", "GIT_PROXY_", "GIT_HTTP_USER_AGENT", "GIT_HTTP_PROXY_AUTHMETHOD", "GIT_CURL_")
_CERTIFICATES = {"GIT_SSL_CAINFO": "cafile", "GIT_SSL_CAPATH": "capath", "sslcainfo": "cafile",
                 "sslcapath": "capath"}  # the TLS settings applied here (an https forge's certificate authorities)
RESULT = "application/x-git-upload-pack-result"
GIVE_UP_AFTER = 3  # failed answers in a row
# the most of an answer held in memory: a larger one (the first fetch of a big repository's history) is left to git,
# whose transport streams it to `index-pack`; its connection is closed unread
ANSWER_AT_MOST = 64 * 2**20
UPLOAD, RECEIVE = "git-upload-pack", "git-receive-pack"
_KINDS = {UPLOAD: {"Git-Protocol": "version=2"}, RECEIVE: {}}  # what a POST to each adds (pushes: protocol v0)
_VERBS = {UPLOAD: "ls-remote", RECEIVE: "push"}  # what git's own command would be, for its words
_FAILING = {UPLOAD: "cannot read forge", RECEIVE: "cannot push to forge"}


@dataclass
class Reply:
    """What a request met: whether it may have reached the forge, and the service's whole answer (None: none, or
    an answer that was not the service's, such as an error status or a redirect, whose `status` is kept)."""

    sent: bool
    data: bytes | None = None
    status: int = 0
    too_large: bool = False  # an answer past ANSWER_AT_MOST, left unread (not counted as a failure)


@dataclass
class Settings:
    """How git would reach the forge, where this module can do the same."""

    headers: dict[str, str] = field(default_factory=dict, repr=False)  # a token among them, perhaps
    cafile: str | None = None
    capath: str | None = None


_READ: dict[tuple[str, str, frozenset[tuple[str, str]]], tuple[float, list[str], list[object], Settings | None]] = {}
KEEP_S = 600.0  # the longest a process trusts its reading of git's configuration whose files did not change (one
# made since where git would read it but did not: the system file of a git installed elsewhere than /usr)


def settings_for(remote: str, env: dict[str, str], cwd: str) -> Settings | None:
    """`read_settings`, read again for the same forge, folder and environment when one of the files git read them
    from changed (`config_files`, the files git named as it listed, and those they include), and at least every
    `KEEP_S` (a desk makes a port for the forge again and again; each reading is two `git config` processes, a
    look at the files a few `stat` calls)."""
    key = (remote, cwd, frozenset(env.items()))
    now = time.monotonic()
    known = _READ.get(key)
    if known is not None and now - known[0] < KEEP_S and known[2] == file_stamps(known[1]):
        return known[3]
    paths = config_files(env, cwd)
    before = file_stamps(paths)  # before reading: a file changed meanwhile is read again next time
    found, named = _read_settings(remote, env, cwd)
    more = sorted(named - set(paths))
    if len(_READ) > 64:
        _READ.clear()
    _READ[key] = (now, [*paths, *more], [*before, *file_stamps(more)], found)
    return found


def read_settings(remote: str, env: dict[str, str], cwd: str) -> Settings | None:
    """How git would send its requests to `remote` (an http(s) URL without credentials), with `env` and the
    configuration seen from `cwd`; None when it would send them some other way than this module does (a proxy, a
    TLS setting but where to find certificate authorities, another `http.*` setting, a rewritten URL, protocol
    v0 or v1), or the configuration cannot be read. TLS settings do not matter to an `http://` forge. Which
    `http.<url>.*` settings apply is git's own answer (`git config --get-urlmatch`); the headers are every
    `extraHeader` entry in order whose URL is this forge's or a path above it, and where git's answer names one
    this reading does not have (a wildcard, another spelling of the host), git lists."""
    return _read_settings(remote, env, cwd)[0]


def _read_settings(remote: str, env: dict[str, str], cwd: str) -> tuple[Settings | None, set[str]]:
    """`read_settings`, and the files git named as it listed the configuration, with those they include."""
    files: set[str] = set()
    tls = remote.lower().startswith("https://")
    if not tls and not remote.lower().startswith("http://"):
        return None, files
    for name, value in env.items():
        if value and name.startswith(_ENVIRONMENT):
            if name in _CERTIFICATES or (not tls and name.startswith("GIT_SSL_")):
                continue
            return None, files
    listed = run_git(["config", "--list", "--show-origin", "-z"], cwd=cwd, env=env, check=False)
    applying = run_git(["config", "-z", "--get-urlmatch", "http", remote], cwd=cwd, env=env, check=False)
    if listed.returncode != 0 or applying.returncode not in (0, 1):  # 1: no setting applies
        return None, files
    entries: list[tuple[str, str]] = []
    fields = listed.stdout.decode("utf-8", "replace").split("\0")
    for origin, entry in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = entry.partition("\n")
        entries.append((key, value))
        if origin.startswith("file:"):  # not the command line or the environment's (part of `env`)
            source = os.path.join(cwd, origin.removeprefix("file:"))
            files.add(source)
            low = key.lower()
            if low == "include.path" or (low.startswith("includeif.") and low.endswith(".path")):
                files.add(os.path.join(os.path.dirname(source), os.path.expanduser(value)))  # even while absent
    return _settings(remote, env, tls, entries, applying.stdout), files


def _settings(remote: str, env: dict[str, str], tls: bool, listed: list[tuple[str, str]],
              applying: bytes) -> Settings | None:
    """What git's configuration (`listed`, every entry in order; `applying`, git's own `--get-urlmatch` answer)
    says of how it would reach `remote`: None where this module cannot do the same."""
    found = Settings()
    named: set[str] = set()  # the extra headers git's answer shows (the last entry of each key that applies)
    taken: list[str] = []  # the extra headers this reading takes for the forge, as written
    for key, value in _entries(applying):
        setting = key.lower().removeprefix("http.")
        if setting == "extraheader":
            named |= {value} if value else set()  # an empty one: the last forgot the others
        elif setting.startswith("ssl") and (not tls or setting in _CERTIFICATES):
            if tls:
                setattr(found, _CERTIFICATES[setting], os.path.expanduser(value))
        else:
            return None  # a setting of git's transport this module does not apply: git lists
    for key, value in listed:
        low = key.lower()
        if (low.startswith("url.") and low.endswith(".insteadof")) or \
                (low == "protocol.version" and value.strip() != "2"):
            return None
        scope, _, setting = key.removeprefix("http.").rpartition(".")
        if not low.startswith("http.") or setting.lower() != "extraheader" or \
                (scope and remote != scope.rstrip("/") and not remote.startswith(scope.rstrip("/") + "/")):
            continue  # not a header, or one for another forge (or none this reading can match: see `named`)
        if not value:
            found.headers.clear()  # git's rule: an empty value forgets the headers before it
            taken.clear()
            continue
        name, colon, said = value.partition(":")
        if not colon or not name.strip() or any(c in value for c in "\r\n") or name.strip() in found.headers:
            return None
        found.headers[name.strip()] = said.strip()
        taken.append(value)
    if named - set(taken) or (taken and not named):  # git's matching and this reading disagree: git lists
        return None
    if tls:
        for name in ("GIT_SSL_CAINFO", "GIT_SSL_CAPATH"):  # the environment's over the configuration's, as in git
            if env.get(name):
                setattr(found, _CERTIFICATES[name], os.path.expanduser(env[name]))
        if any(path and not os.path.isabs(path) for path in (found.cafile, found.capath)):
            return None  # relative to wherever git runs: git finds it
    return found


def _entries(out: bytes) -> list[tuple[str, str]]:
    """`git config -z` output: (key, value) pairs, in order."""
    pairs = []
    for item in out.decode("utf-8", "replace").split("\0"):
        if item:
            key, _, value = item.partition("\n")
            pairs.append((key, value))
    return pairs


class SmartHTTP:
    """Requests to one forge's smart-HTTP services over a kept-alive connection (one at a time; a second thread
    meanwhile gets a connection of its own): its `git-upload-pack` (listings), and its `git-receive-pack`
    (pushes, `push.py`). Each service counts its own failed answers."""

    def __init__(self, remote: str, settings: Settings, stall_s: float) -> None:
        parts = urllib.parse.urlsplit(remote)
        self._remote = remote
        self._https = parts.scheme.lower() == "https"
        self._host, self._port = parts.hostname or "", parts.port or (443 if self._https else 80)
        self._base = parts.path.rstrip("/")
        self._headers = {"User-Agent": "git/2 (assay)", **settings.headers}
        self._certificates = (settings.cafile, settings.capath)
        self._stall_s = stall_s
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._pid = os.getpid()  # a connection is never used by a process forked from its maker
        self.failures: dict[str, int] = {}  # a service's failed answers in a row

    def usable(self, service: str = UPLOAD) -> bool:
        return self.failures.get(service, 0) < GIVE_UP_AFTER

    def failed(self, service: str = UPLOAD) -> None:
        """An answer that was not what the service answers (counted towards `GIVE_UP_AFTER`)."""
        self.failures[service] = self.failures.get(service, 0) + 1

    def succeeded(self, service: str = UPLOAD) -> None:
        """An answer the caller found whole: the failures in a row start again from none."""
        self.failures[service] = 0

    def post(self, body: bytes) -> bytes | None:
        """The forge's upload-pack answer to `body` (protocol v2), or None (see the module). ForgeError when the
        forge sends nothing for the stall time, or has not answered whole within git's timeout: git's transport
        would fail as well."""
        return self.request(UPLOAD, body).data

    def request(self, service: str, body: bytes | None = None, more_s: float = 0.0) -> Reply:
        """A POST of `body` to `service`, or with no body a GET of its advertisement (`info/refs?service=`), given
        `more_s` beyond git's timeout. ForgeError as in `post`."""
        if not self._lock.acquire(blocking=False):
            return self._exchange(None, service, body, more_s)[0]
        try:
            kept = self._conn if self._pid == os.getpid() else None
            self._conn = None
            if kept is not None and _closed(kept):
                kept.close()  # the forge closed it while it was kept (it read nothing of ours): a new one
                kept = None
            answer, self._conn = self._exchange(kept, service, body, more_s)
            self._pid = os.getpid()
            return answer
        finally:
            self._lock.release()

    def _exchange(self, kept: http.client.HTTPConnection | None, service: str, body: bytes | None,
                  more_s: float) -> tuple[Reply, http.client.HTTPConnection | None]:
        """One request: on `kept`, or on a new connection. A read sent on `kept` as the forge closed it is sent
        again once on a new one; a push is not (whether the forge took it is the caller's to find out). The answer,
        and the connection to keep (None: none)."""
        kind = _KINDS[service]
        if body is None:
            path, expected = f"{self._base}/info/refs?service={service}", f"application/x-{service}-advertisement"
            headers = self._headers
        else:
            path, expected = f"{self._base}/{service}", f"application/x-{service}-result"
            headers = {**self._headers, "Content-Type": f"application/x-{service}-request", "Accept": expected,
                       **kind}
        conn = kept
        sent = False
        for reused in (kept is not None and service != RECEIVE, False):
            try:
                conn = conn or self._connect()
            except (OSError, ValueError):  # a certificate file that cannot be read, say: git says why
                self.failed(service)
                return Reply(sent), None
            late = threading.Event()
            timer = threading.Timer(git_timeout() + more_s, _cut, (conn, late))
            timer.start()
            try:
                if conn.sock is None:
                    conn.connect()  # refused, or unreachable: nothing was sent
                sent = True
                conn.request("POST" if body is not None else "GET", path, body, headers)
                response = conn.getresponse()
                if response.length is not None:  # a length said: a larger one is not read; a shorter one is cut
                    data = response.read() if response.length <= ANSWER_AT_MOST else b""  # (IncompleteRead)
                else:  # chunked: read up to one byte past what is held
                    data = response.read(ANSWER_AT_MOST + 1)
            except Exception as exc:
                conn.close()
                if late.is_set():
                    raise ForgeError(f"git {_VERBS[service]} timed out after {git_timeout() + more_s:.0f}s") from None
                if isinstance(exc, TimeoutError):
                    raise ForgeError(f"{_FAILING[service]} {redact(self._remote)}: too slow, nothing came for "
                                     f"{self._stall_s:.0f}s", hint="check the forge URL and its network") from None
                if reused and isinstance(exc, _DROPPED):
                    conn = None
                    continue  # the forge closed the kept connection meanwhile: once more, on a new one
                if not isinstance(exc, (OSError, ValueError, http.client.HTTPException)):
                    raise
                self.failed(service)
                return Reply(sent), None
            finally:
                timer.cancel()
            whole = len(data) <= ANSWER_AT_MOST and (response.length or 0) <= ANSWER_AT_MOST  # else: too large
            ok = whole and response.status == 200 and response.getheader("Content-Type", "").startswith(expected)
            if whole and not ok:
                self.failed(service)
            if response.will_close or not ok:
                conn.close()
                conn = None
            return Reply(True, data if ok else None, response.status, not whole), conn
        return Reply(True), None

    def _connect(self) -> http.client.HTTPConnection:
        """A connection (made on its first request)."""
        if self._https:
            import ssl

            cafile, capath = self._certificates
            context = ssl.create_default_context(cafile=cafile, capath=capath)
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._stall_s, context=context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._stall_s)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


_DROPPED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.RemoteDisconnected)


def _closed(conn: http.client.HTTPConnection) -> bool:
    """Whether a kept connection's forge closed it (or sent something unasked): it reads as ready."""
    import select

    sock = conn.sock
    if sock is None:
        return False
    try:  # TLS: bytes read off the socket and held decrypted do not make it ready
        return bool(getattr(sock, "pending", lambda: 0)()) or bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _cut(conn: http.client.HTTPConnection, late: threading.Event) -> None:
    """git's timeout passed: end the exchange under way (its read fails at once)."""
    late.set()
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
