"""The only module that runs git.

A `ForgeGit` pairs a forge (any git URL or path) with a local bare *cache*
repository where Assay writes its objects and keeps what it fetched. Every
write to the forge is a compare-and-swap push (`--force-with-lease`, never a
`+` refspec); a push whose outcome we did not hear is resolved by re-reading
the refs, never by guessing.

GitPython is deliberately not used on this path: importing it costs more than
a whole claim push, and its push-info parser cannot report per-ref results when
the source is a raw object id. We run the `git` binary and parse `--porcelain`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import subprocess
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence

from assay.core import cachefile
from assay.core.credentials import http_userinfo, redact, remember, strip_credentials, token_for
from assay.core.digests import sha1_hex, sha256_hex
from assay.core.recordtype import NamedTuple
from assay.errors import ForgeError, NotATree, UsageError

ZERO = "0" * 40
NETWORK_COMMANDS = frozenset({"ls-remote", "fetch", "push"})  # the git commands that talk to the forge
PUSH_TRIES = 6  # pushes of one update while racing writers hold ref locks
MAINTAIN_EVERY = 512  # objects a process writes between looks at the cache's size
LOOSE_LIMIT = 6700  # loose objects in the cache before they are packed (git's gc.auto)
PACK_LIMIT = 50  # packs in the cache before they are folded into one (git's gc.autoPackLimit)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import IO, Any, Literal

    PushStatus = Literal["ok", "stale", "rejected"]


class RefUpdate(NamedTuple):
    """Move `ref` to `new` (ZERO: delete it) only if it is now `expected` (ZERO: only if absent)."""

    ref: str
    new: str
    expected: str = ZERO


class PushResult(NamedTuple):
    ref: str
    status: PushStatus
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class TreeEntry(NamedTuple):
    name: str
    sha: str
    mode: str = "100644"


class GitObject(NamedTuple):
    """An object as `cat-file --batch` gives it: its type (blob, tree, commit, tag) and contents."""

    kind: str
    data: bytes


class Signature(NamedTuple):
    name: str
    email: str

    @classmethod
    def of(cls, name: str) -> Signature:
        """The identity of a desk or a person in a commit: the name (no <, > or line breaks), a valid email."""
        clean = re.sub(r"[<>\x00-\x1f]", "", name).strip() or "assay"
        local = re.sub(r"[^A-Za-z0-9._-]+", "-", clean).strip("-.") or "assay"
        return cls(clean, f"{local}@assay.invalid")


def git_env() -> dict[str, str]:
    """The environment git runs in: no prompts, stable messages, and an HTTP forge that stalls (accepts the
    connection, then sends nothing) given up after `ASSAY_GIT_STALL_S` seconds, not the whole git timeout."""
    env = dict(os.environ)
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANG": "C", "GIT_HTTP_LOW_SPEED_LIMIT": "1",
                "GIT_HTTP_LOW_SPEED_TIME": str(int(_seconds("ASSAY_GIT_STALL_S", 30)))})
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


def auth_env(url: str, token: str, user: str = "x-access-token") -> dict[str, str]:
    """git's environment with `token` as an HTTP header for `url`'s host, set through GIT_CONFIG_* variables:
    never in a URL, an argument list or a config file, and only for the git processes that talk to the forge."""
    import base64

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
        raise UsageError(f"{name}={raw!r} is not a number of seconds above 0", hint=f"unset it, or e.g. {name}=60")
    return value


def _timeout() -> float:
    return _seconds("ASSAY_GIT_TIMEOUT", 120)


def run_git(args: Sequence[str], cwd: str | os.PathLike[str] | None = None, input: bytes | None = None,
            timeout: float | None = None, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run one git command; a failure raises ForgeError with git's own words."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True,
                              env=env or git_env(), timeout=timeout or _timeout())
    except subprocess.TimeoutExpired as exc:
        raise ForgeError(f"git {args[0]} timed out after {exc.timeout:.0f}s") from None
    except FileNotFoundError:
        raise ForgeError("the git binary was not found", hint="install git and put it on PATH") from None
    if check and proc.returncode != 0:
        raise ForgeError(f"git {args[0]} failed: {_first_error(proc.stderr)}")
    return proc


def configured_person() -> str:
    """The person git names for commits from here: `user.name`, else `user.email`, as `git config` reads them in
    this directory (its repository's config, the global and system ones, GIT_CONFIG_*); "" if neither is set."""
    for key in ("user.name", "user.email"):
        try:
            value = run_git(["config", "--get", key], check=False).stdout.decode(errors="replace").strip()
        except ForgeError:  # no git, or it hung: no name from it
            return ""
        if value:
            return value
    return ""


def _remote_error(stderr: bytes) -> str:
    """The forge's first `remote: error: …` line: why it refused (a stale lock names its file)."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        text = line.strip().removeprefix("remote:").strip()
        if text.startswith(("error:", "fatal:")) and line.strip().startswith("remote:"):
            return redact(text.removeprefix("error:").removeprefix("fatal:").strip())
    return ""


def refusal_hint(detail: str) -> str:
    """What a person can do about a refused push, from git's own reason."""
    if lock_named(detail):
        return (f"a push killed mid-way leaves its ref's .lock file on the forge (git holds one for milliseconds); "
                f"on a forge on this machine Assay removes it once it is {STALE_LOCK_S / 60:.0f} minutes old; "
                "elsewhere whoever runs the forge must remove the .lock file named above")
    return "a hook or a policy on the forge refused it; check the ref on the forge"


STALE_LOCK_S = 600.0  # a ref lock on a forge on disk this old was left by a killed push, far beyond any push's time
_LOCK_FILE = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def lock_named(detail: str) -> str | None:
    """The lock file a refused write names (git: "Unable to create '….lock': File exists"), if any."""
    found = _LOCK_FILE.search(detail)
    return found.group(1) if found else None


def clear_stale_lock(folder: str, lock: str, older_than_s: float = STALE_LOCK_S) -> float | None:
    """Remove `lock`, a lock file inside the forge on disk at `folder`, if it is older than `older_than_s`: the
    push that made it is gone. Its age when removed, else None (fresh, gone, or not the forge's). It is moved aside
    first and removed only if what was moved is the very file judged stale, so a live push's lock is never lost."""
    root, path = os.path.realpath(folder), os.path.realpath(lock)
    try:
        before = os.lstat(path)
    except OSError:
        return None
    age = time.time() - before.st_mtime
    if not path.startswith(root + os.sep) or age < older_than_s or not os.path.isfile(path) \
            or _git_at_work_since(root, before.st_mtime):
        return None
    aside = os.path.join(root, f"assay-stale-lock-{os.getpid()}-{os.urandom(4).hex()}")  # outside refs/: no ref
    try:
        os.rename(path, aside)
        moved = os.lstat(aside)
    except OSError:
        return None
    same = (moved.st_ino, moved.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    if not same:  # a live push's lock, made meanwhile: put back (unless yet another is there)
        with contextlib.suppress(OSError):
            os.link(aside, path)
    with contextlib.suppress(OSError):
        os.unlink(aside)
    return age if same else None


def _git_at_work_since(root: str, when: float) -> bool:
    """Whether a git process on this host, started before `when`, works in the repository at `root` (its working
    folder, or named among its arguments): a lock made then may be its own, paused (SIGSTOP), not a killed one's.
    A process started after the lock was made cannot hold it. Unreadable processes (another user's) are not seen."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            boot = next(float(line.split()[1]) for line in stat if line.startswith("btime "))
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except (OSError, StopIteration, ValueError):
        return False
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode("utf-8", "replace").split("\0")
            if "git" not in os.path.basename(argv[0]) or (
                    os.path.realpath(f"/proc/{pid}/cwd") != root and not any(root in arg for arg in argv)):
                continue
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat_file:
                fields = stat_file.read().rpartition(")")[2].split()
            if boot + int(fields[19]) / tick <= when:
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def _note(text: str) -> None:
    import sys

    sys.stderr.write(f"note: {text}\n")


def _first_error(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    text = (fatal or lines or ["no message"])[0]
    return redact(text.removeprefix("fatal: ").removeprefix("error: "))


PACK_REFS_AT = 256  # loose refs on a forge on this machine that make a sweep pack them
UNPACK_BELOW = 100  # objects in a push to a forge on this machine that arrive loose (git's transfer.unpackLimit)
FRESH_LIMIT = 100_000  # objects written and not yet pushed that a port remembers, for sending them loose
HTTP_PUSH_AT = 64  # updates in one push over HTTP that go to receive-pack directly, not through `git push`


def _no_redirect_handler() -> Any:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        """Follows no redirect: the push's Authorization header must reach the forge named and nothing else (the
        push then falls back to `git push`, which follows git's own rules)."""

        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return NoRedirect
WALK_AT_MOST = 8  # commits of a chain read through the cat-file batch before `rev-list` is asked for the rest
PIPE_HOLDS = select.PIPE_BUF  # bytes an empty pipe takes at once, never in part (512 at least; 4096 on Linux): a
# listing's request this size goes to git before the caller goes on


class ForgeGit:
    """Reads and CAS-writes refs of one forge through a local cache repository."""

    lock_notes: Callable[[str], None] | None = None  # who is told of a stale ref lock removed (None: stderr)

    def __init__(self, url: str, cache_root: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        self.url = url
        remember(url)  # its password, however git's errors quote it, is masked
        bare = http_userinfo(url) or url.startswith("file://")  # a file URL's `user:pw@` is no login: git needs none
        self.remote = strip_credentials(url) if bare else url  # what git's argument lists show
        token = token if token is not None else token_for(url)
        userinfo = http_userinfo(url)
        if token:
            self._env: dict[str, str] | None = auth_env(self.remote, token)  # for the commands that reach the forge
        elif userinfo:  # a URL's own user:password goes to git as a header too, never as an argument
            self._env = auth_env(self.remote, userinfo[1], userinfo[0]) if userinfo[1] else \
                auth_env(self.remote, userinfo[0])
        else:
            self._env = None
        root = os.fspath(cache_root) if cache_root else default_cache_root()
        self._spawn = (root, token)  # what `spare` builds a twin from
        self.cache = os.path.join(root, sha256_hex(url.encode())[:20])  # a path (str): pathlib is not loaded here
        self._batch: subprocess.Popen[bytes] | None = None
        self._last_push_error = ""
        self._written = 0
        self._local = local_forge_path(url) is not None
        self._fresh: set[str] = set()  # objects written here (loose in the cache) not yet pushed to a forge on disk
        self._sent: set[str] = set()  # objects this process sent to a forge on disk in a pack, with all they reach
        self.round_trips: Counter[str] = Counter()  # ls-remote, fetch and push invocations, for measuring
        self._speaks_v2 = True  # an HTTP forge, until it says it does not
        self._auth = self._env.get(f"GIT_CONFIG_VALUE_{int(self._env['GIT_CONFIG_COUNT']) - 1}") if self._env else None
        self._posts = self.remote.lower().startswith(("http://", "https://"))  # see `_push_http`
        self._parents: dict[str, str | None] = {}  # first-parent links read (None: a root); a commit absent: unknown
        self._prefetched: tuple[frozenset[str], subprocess.Popen[bytes]] | None = None  # see `prefetch`
        self._ensure_cache()

    # -- the local cache ----------------------------------------------------------

    def _ensure_cache(self) -> None:
        if os.path.isdir(os.path.join(self.cache, "objects")):
            return
        parent = os.path.dirname(self.cache)
        try:
            os.makedirs(parent, exist_ok=True)
            import tempfile  # here, as random and shutil below: a short command that needs none skips them

            tmp = tempfile.mkdtemp(prefix=".init-", dir=parent)
        except OSError as exc:
            raise UsageError(f"cannot use {parent} as Assay's cache: {exc.strerror}",
                             hint="point ASSAY_CACHE_DIR at a folder this user can write") from None
        try:
            run_git(["init", "--bare", "-q", tmp])
            # fetch.unpackLimit=1: fetched objects arrive as one pack that appears whole, so a
            # process sharing this cache never sees a commit whose tree is still being written.
            for key, value in (("gc.auto", "0"), ("maintenance.auto", "false"), ("fetch.unpackLimit", "1"),
                               ("core.logAllRefUpdates", "false"),
                               ("assay.forge", strip_credentials(self.url))):
                run_git(["config", key, value], cwd=tmp)
            for i in range(256):  # the loose-object fan-out, made once rather than checked on every write
                os.makedirs(os.path.join(tmp, "objects", f"{i:02x}"), exist_ok=True)
        except BaseException:
            _rmtree(tmp)  # never a half-made cache left behind
            raise
        try:
            os.rename(tmp, self.cache)
        except OSError:  # another process made it first; theirs is as good as ours
            _rmtree(tmp)

    def _git(self, *args: str, input: bytes | None = None, check: bool = True,
             timeout: float | None = None) -> subprocess.CompletedProcess[bytes]:
        if args[0] in NETWORK_COMMANDS:
            self.round_trips[args[0]] += 1
        return run_git(list(args), cwd=self.cache, input=input, check=check, timeout=timeout,
                       env=self._cache_env(self._env))

    def _cache_env(self, env: dict[str, str] | None) -> dict[str, str]:
        """`env` for git in the cache, which never looks above it: a damaged cache is an error, never the
        repository around it (a cache inside a checkout) taking its objects and refs."""
        return {**(env or git_env()), "GIT_CEILING_DIRECTORIES": os.path.dirname(os.path.abspath(self.cache))}

    # -- reading the forge ----------------------------------------------------------

    def ls_remote(self, *patterns: str) -> dict[str, str]:
        """Refs of the forge matching `patterns` (exact refs or `prefix/*`), one round trip. A forge on this machine
        or over HTTP is asked for only those refs (protocol v2's `ls-refs` with a `ref-prefix` each); `git
        ls-remote` asks for every ref, however few the patterns name, and matches them here. The first listing
        whose refs a `prefetch` named takes that answer instead."""
        folder = local_forge_path(self.url)
        prefixable = bool(patterns) and all(_PREFIXABLE.fullmatch(p) for p in patterns)
        if folder is not None and prefixable:
            return self._ls_refs(folder, patterns)
        self._drop_prefetch()  # a listing taken another way: an answer from before it is no answer after it
        if prefixable and self._speaks_v2 and self.remote.lower().startswith(("http://", "https://")):
            found = self._ls_refs_http(patterns)
            if found is not None:
                return found
        proc = self._git("ls-remote", self.remote, *patterns, check=False)
        if proc.returncode != 0:
            raise self._unreadable(proc.stderr)
        refs: dict[str, str] = {}
        for line in proc.stdout.decode().splitlines():
            sha, _, ref = line.partition("\t")
            if ref and not ref.endswith("^{}"):
                refs[ref] = sha
        return refs

    def prefetch(self, *refs: str) -> None:
        """Start listing `refs` (full ref names) on a forge on this machine, and the object batch, while the caller
        goes on (a short command loads the code it runs meanwhile: the two cores work at once where one would
        wait). The next `ls_remote` of refs among these takes the answer, once; a push, or a listing of others,
        drops it. Anywhere else nothing is done."""
        folder = local_forge_path(self.url)
        if folder is None or not refs or not all(_PREFIXABLE.fullmatch(r) and not r.endswith("*") for r in refs):
            return
        request = _ls_refs_request(refs)
        if len(request) > PIPE_HOLDS:
            return  # it could wait on git to read it: listed when asked, under the timeout
        self._drop_prefetch()
        self._prefetched = (frozenset(refs), self._start_ls_refs(folder, request))
        self._batch_process()

    def _drop_prefetch(self) -> None:
        if self._prefetched is not None:
            _, proc = self._prefetched
            self._prefetched = None
            _end(proc)

    def _start_ls_refs(self, folder: str, request: bytes) -> subprocess.Popen[bytes]:
        """`git upload-pack` started on the forge's folder; a request the pipe holds whole (`PIPE_HOLDS`) is
        written and its input closed, so the listing goes on while the caller does; a larger one is left for
        `communicate` to write under the timeout."""
        self.round_trips["ls-remote"] += 1
        try:
            proc = subprocess.Popen(["git", "upload-pack", "--stateless-rpc", folder], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env={**git_env(), "GIT_PROTOCOL": "version=2"})
        except FileNotFoundError:
            raise ForgeError("the git binary was not found", hint="install git and put it on PATH") from None
        if len(request) > PIPE_HOLDS:
            return proc
        assert proc.stdin is not None
        try:
            with contextlib.suppress(BrokenPipeError):  # a forge that is no repository answers on stderr, at once
                os.write(proc.stdin.fileno(), request)  # whole: an empty pipe takes PIPE_BUF bytes at once
            proc.stdin.close()  # unbuffered above: closing flushes nothing that could meet git gone
            proc.stdin = None  # written and closed: `communicate` only reads
        except BaseException:
            _end(proc)
            raise
        return proc

    def _ls_refs(self, folder: str, patterns: Sequence[str]) -> dict[str, str]:
        """`ls-remote` of a forge on this machine through `git upload-pack` (protocol v2), with a `ref-prefix` for
        each pattern: the forge reads the refs under those prefixes, not all of them.

        Not `git for-each-ref`, which answers the same (tests/test_git.py checks it): on 26,000 refs, packed, git
        2.39, a loaded 2-core machine (`benchmarks/refs_listing.py`, 30 rounds, medians) a full listing took 46 ms
        here and 66 ms there (1.44x; minimums 32 and 39 ms), which sorts and formats every ref; one brief's five
        refs took 4.0 ms here and 2.3 ms there; loose, both about 300 ms. Only this way a listing starts while
        the command loads its code (`prefetch`) with the same request as over HTTP."""
        pending, self._prefetched = self._prefetched, None
        request = None
        if pending is not None and pending[0].issuperset(patterns):
            proc = pending[1]  # listed (a superset of these refs) while the caller went on: taken once
        else:
            if pending is not None:
                _end(pending[1])
            request = _ls_refs_request(patterns)
            proc = self._start_ls_refs(folder, request)
        try:
            out, err = proc.communicate(request if proc.stdin is not None else None, timeout=_timeout())
        except subprocess.TimeoutExpired:
            raise ForgeError(f"git upload-pack timed out after {_timeout():.0f}s") from None
        finally:
            if proc.returncode is None:
                _end(proc)
        if proc.returncode != 0:
            raise self._unreadable(err)
        return _listed(_pkt_lines(out), patterns)

    def _ls_refs_http(self, patterns: Sequence[str]) -> dict[str, str] | None:
        """`ls-remote` of a forge over HTTP with a `ref-prefix` for each pattern, through git's own transport
        (`git remote-http`'s `stateless-connect`, which git fetch speaks protocol v2 through: the same proxies,
        certificates and credentials). None when the forge does not speak protocol v2 (it is not asked so
        again) or its answer is cut short or refused: then `git ls-remote` asks. A forge that cannot be reached
        is unreadable, as to `git ls-remote`."""
        self.round_trips["ls-remote"] += 1
        late = threading.Event()
        import tempfile

        with tempfile.TemporaryFile() as errors:
            try:
                proc = subprocess.Popen(["git", f"remote-{self.remote.split(':', 1)[0].lower()}", self.remote,
                                         self.remote], cwd=self.cache, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=errors, env=self._cache_env(self._env))
            except OSError:
                return None
            assert proc.stdin is not None and proc.stdout is not None

            def expire() -> None:
                late.set()
                proc.kill()

            timer = threading.Timer(_timeout(), expire)
            timer.start()
            ready, answer = b"", b""
            try:  # the request goes once the helper is connected: it reads its command line through a buffer
                proc.stdin.write(b"stateless-connect git-upload-pack\n")
                proc.stdin.flush()
                ready = proc.stdout.readline()
                if ready == b"\n" and _skip_section(proc.stdout):  # the forge's capabilities
                    proc.stdin.write(_ls_refs_request(patterns))
                    proc.stdin.close()
                    answer = proc.stdout.read()
            except (OSError, ValueError):
                pass
            finally:
                timer.cancel()
                proc.kill()
                proc.wait()
                proc.stdout.close()
            if late.is_set():
                raise ForgeError(f"git ls-remote timed out after {_timeout():.0f}s")
            if ready == b"fallback\n":  # protocol v0 or v1 only
                self._speaks_v2 = False
                return None
            if ready != b"\n":
                errors.seek(0)
                raise self._unreadable(errors.read())
        lines = _pkt_lines(answer)
        if not answer.endswith((b"0000", b"00000002")) or any(line.startswith("ERR ") for line in lines):
            return None  # cut short, or refused: git ls-remote asks, and says why
        return _listed(lines, patterns)

    def _unreadable(self, stderr: bytes) -> ForgeError:
        return ForgeError(f"cannot read forge {redact(self.url)}: {_first_error(stderr)}",
                          hint="check the forge URL (--forge, ASSAY_FORGE, .assay.yaml) and your access")

    def ensure_objects(self, refs: dict[str, str], force: bool = False, whole: bool = True) -> None:
        """Make the tips `refs` (ref -> sha) and their history present in the cache: one fetch at most (two in a
        cache a shallow read left cut short above one of these tips).

        The tips are fetched by object id: exactly what was read, and fast (git matches ref
        names against the advertisement one by one, slow with thousands). A forge that does
        not serve an id (it collected it, or refuses unadvertised wants) is asked by ref name.
        `whole=False`: the tips alone will do (the caller reads only commits it knows are there, as after a
        journal snapshot), so a shallow cache is not made whole.
        """
        missing = dict(refs) if force else self._missing(refs)
        if missing:
            self._fetch(missing)
        if whole and (shallow := self.shallow_commits()) and self._cut(list(refs.values()), shallow):
            self._fetch(refs, "--depth=2147483647")  # git's --unshallow: the cache is whole again
            self._parents.clear()  # links learned while it was cut (a shallow commit as a root) are stale

    def fetch_shallow(self, refs: dict[str, str], depth: int) -> None:
        """Fetch the tips `refs` with only the last `depth` commits of their history (`git fetch --depth`): the
        cache is shallow there (git's `shallow` file) until a reader that needs the whole chain makes it whole
        (`ensure_objects`). A journal snapshot's reader takes this, not the chain below the snapshot."""
        self._fetch(refs, f"--depth={max(1, depth)}")

    def shallow_commits(self) -> frozenset[str]:
        """The commits the cache holds without their parents (git's `shallow` file); empty when it is whole."""
        try:
            with open(os.path.join(self.cache, "shallow"), encoding="ascii") as listed:
                return frozenset(listed.read().split())
        except (OSError, ValueError):
            return frozenset()

    def _cut(self, tips: Sequence[str], shallow: frozenset[str]) -> bool:
        """Whether the history of any of `tips` (those in the cache) stops at a shallow commit."""
        present = [t for t, obj in zip(tips, self.read_typed(list(tips)), strict=True) if obj is not None]
        if not present:
            return False
        proc = self._git("rev-list", "--first-parent", "--stdin", check=False,
                         input="".join(f"{t}\n" for t in present).encode())
        return any(sha in shallow for sha in proc.stdout.decode().split())

    def _fetch(self, refs: dict[str, str], *extra: str) -> None:
        args = ["fetch", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-auto-maintenance", "-q", *extra,
                "--stdin", self.remote]
        by_id = self._git(*args, check=False, input="".join(f"{sha}\n" for sha in set(refs.values())).encode())
        if by_id.returncode == 0:
            return
        proc = self._git(*args, check=False, input="".join(f"{ref}\n" for ref in refs).encode())
        if proc.returncode != 0:
            raise ForgeError(f"cannot fetch from forge {redact(self.url)}: {_first_error(proc.stderr)}")

    def _missing(self, refs: dict[str, str]) -> dict[str, str]:
        """The refs whose tips the cache lacks: loose objects by name, the rest in one cat-file batch."""
        objects = f"{self.cache}/objects/"
        unsure = {ref: sha for ref, sha in refs.items() if not os.path.exists(f"{objects}{sha[:2]}/{sha[2:]}")}
        if not unsure:
            return {}
        found = self.read_typed(list(unsure.values()))
        return {ref: sha for (ref, sha), obj in zip(unsure.items(), found, strict=True) if obj is None}

    def read_objects(self, names: Sequence[str]) -> list[bytes | None]:
        """Contents of many objects (`sha` or `sha:path`) through one `cat-file --batch`."""
        return [obj.data if obj else None for obj in self.read_typed(names)]

    def read_typed(self, names: Sequence[str]) -> list[GitObject | None]:
        """Type and contents of many objects (`sha` or `sha:path`) through one `cat-file --batch`.

        None for a name git cannot find, and for a name with a newline, which the
        batch protocol cannot carry.
        """
        return list(self.stream_typed(names))

    def stream_typed(self, names: Sequence[str]) -> Generator[GitObject | None, None, None]:
        """`read_typed`'s answers one by one, as git gives them: the caller's work on one overlaps git's reading
        of the next. Nothing else may be read through this port until the stream ends (or is closed)."""
        asked = [n for n in names if "\n" not in n]
        answers = self._exchange(asked) if asked else iter(())
        for n in names:
            yield None if "\n" in n else next(answers)
        next(answers, None)  # past the last answer: the exchange ends, and its process is kept for the next read

    def _exchange(self, names: Sequence[str]) -> Generator[GitObject | None, None, None]:
        """Ask the batch process for `names` and yield every answer.

        Names are written while answers are read (by a writer thread, unless they fit
        in the pipe at once), so neither side ever waits on a full pipe, whatever the
        count. A process left out of step by an error, or by a reader that stopped
        before the last answer, is killed, never reused.
        """
        proc = self._batch_process()
        self._batch = None  # this exchange's until its last answer: a read meanwhile starts a process of its own
        assert proc.stdin and proc.stdout
        payload = "".join(f"{n}\n" for n in names).encode()
        writer = None
        if len(payload) <= select.PIPE_BUF:  # an empty pipe takes this much without blocking
            try:
                proc.stdin.write(payload)
                proc.stdin.flush()
            except BrokenPipeError:  # git ended before it read a name (a cache that is no repository)
                _close_quietly(proc)
                raise ForgeError(f"git cat-file in the cache {self.cache} ended before it read a name",
                                 hint="if git said it is no repository, remove that folder: it is made again") from None
        else:
            writer = threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True)
            writer.start()
        try:
            for _ in names:
                yield _read_answer(proc.stdout)
        except BaseException:  # an error, or the reader stopped early (GeneratorExit): out of step, never reused
            proc.kill()
            raise
        else:
            if self._batch is None:
                self._batch = proc  # in step again: kept for the next read
        finally:
            if writer is not None:
                writer.join()
            if proc is not self._batch:
                _close_quietly(proc)

    def _batch_process(self) -> subprocess.Popen[bytes]:
        if self._batch is None or self._batch.poll() is not None:
            self._batch = subprocess.Popen(["git", "cat-file", "--batch"], cwd=self.cache, env=self._cache_env(None),
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            atexit.register(self.close)
        return self._batch

    def spare(self) -> ForgeGit:
        """A port to the same forge and cache on processes of its own, for another thread (the agent's heartbeat,
        its step server); the caller closes it."""
        return ForgeGit(self.url, *self._spawn)

    def close(self) -> None:
        self._drop_prefetch()
        if self._batch is not None:
            if self._batch.stdin:
                self._batch.stdin.close()
            self._batch.wait()
            if self._batch.stdout:
                self._batch.stdout.close()
            self._batch = None

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether `older` is `newer` or in its history (both must be in the cache)."""
        if newer not in self._parents:
            self._walk_parents(newer, older, WALK_AT_MOST)  # a short chain: a yes needs no process either
        sha: str | None = newer if newer in self._parents else None
        while sha is not None:  # on a chain `learn_chains` (or a walk) read: a yes needs no process
            if sha == older:
                return True
            sha = self._parents.get(sha)
        return self._git("merge-base", "--is-ancestor", older, newer, check=False).returncode == 0

    def merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor of two commits in the cache, or None if they share no history."""
        proc = self._git("merge-base", a, b, check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def diff(self, base: str, head: str, numstat: bool = False) -> str:
        """`git diff base head` of two commits in the cache: the patch, or `--numstat` lines (added, deleted,
        path; `-` counts for a binary file). Renames are followed; no colour, whatever the user's config."""
        args = ["-c", "core.quotepath=false", "diff", "--no-color", "--no-ext-diff", "-M"]
        out = self._git(*args, *(["--numstat"] if numstat else []), base, head, "--")
        return out.stdout.decode("utf-8", "replace")

    def changed_paths(self, base: str, head: str) -> list[str]:
        """Every path that differs between two commits in the cache (a rename as both its paths); a name that is no
        UTF-8 keeps U+FFFD where its bytes were."""
        out = self._git("diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", base, head, "--")
        return [p for p in out.stdout.decode("utf-8", "replace").split("\0") if p]

    def read_tree(self, spec: str) -> list[TreeEntry] | None:
        """The entries of a tree (`sha` or `sha:path`); None if absent, NotATree if it is another object."""
        obj = self.read_typed([spec])[0]
        if obj is None:
            return None
        if obj.kind != "tree":
            raise NotATree(spec, obj.kind)
        return parse_tree(obj.data)

    def rev_list(self, tip: str, limit: int | None = None, since: str | None = None) -> list[str]:
        """Commits reachable from `tip` (and not from `since`), newest first (first-parent chain). From the
        chains `learn_chains` read, or a short chain read through the cat-file batch; else `rev-list` (from
        where those left off, when they followed the chain part of the way)."""
        if tip == since:
            return []
        if tip not in self._parents:
            self._walk_parents(tip, since, WALK_AT_MOST)  # a short chain: read through the batch, no process
        walked, rest = self._known_chain(tip, since, limit)
        if rest is None:
            return walked
        if walked:  # the chain known from `tip` down to `rest`: git gives the rest, with parents to check `since`
            args = ["rev-list", "--first-parent", "--parents", rest, *([f"^{since}"] if since else [])]
            if limit:
                args.insert(1, f"--max-count={limit - len(walked)}")
            lines = [line.split() for line in self._git(*args).stdout.decode().splitlines() if line.strip()]
            if lines and (not since or (len(lines[-1]) > 1 and lines[-1][1] == since)):  # else `since` is off
                return walked + [line[0] for line in lines]  # the first-parent chain: git decides from `tip`
        args = ["rev-list", "--first-parent", tip]
        if since:
            args.append(f"^{since}")
        if limit:
            args.insert(1, f"--max-count={limit}")
        return self._git(*args).stdout.decode().split()

    def _known_chain(self, tip: str, since: str | None, limit: int | None) -> tuple[list[str], str | None]:
        """`rev_list`'s answer from the first parents kept: (the commits, None) when they tell it whole, else
        (the commits they tell, the first commit whose parent is not kept), or ([], tip) when git must decide
        (a `since` off the chain)."""
        walked: list[str] = []
        sha: str | None = tip
        while sha is not None and sha != since:
            if limit and len(walked) >= limit:
                return (walked, None) if not since else ([], tip)
            if sha not in self._parents:
                return walked, sha
            walked.append(sha)
            sha = self._parents[sha]
        return (walked, None) if not since or sha == since else ([], tip)

    def _chain_known(self, tip: str) -> bool:
        """Whether the first parents kept reach from `tip` to a root."""
        sha: str | None = tip
        while sha is not None:
            if sha not in self._parents:
                return False
            sha = self._parents[sha]
        return True

    def _walk_parents(self, tip: str, since: str | None, most: int) -> None:
        """Learn the first parents from `tip` towards `since` (or the root) by reading the commits through the
        cat-file batch, at most `most` of them (what it learns is kept: commits never change)."""
        if not OBJECT_ID.fullmatch(tip):
            return  # a name that can move (a ref, `HEAD`): never kept as if it were a commit
        sha: str | None = tip
        child: str | None = None
        for _ in range(most):
            if sha is None or sha == since:
                return
            found = self.read_typed([sha])[0]
            if found is None or found.kind != "commit":
                if child is not None:  # a parent the cache lacks (a shallow read stopped there): git says what
                    del self._parents[child]  # its child's history is, not a link to nothing
                return  # not a commit here: rev-list says what it says
            parent = _first_parent(found.data)
            self._parents[sha] = parent
            child, sha = sha, parent

    def chains(self, tips: Sequence[str]) -> dict[str, list[str]]:
        """The first-parent chain of each tip, newest first, from one `rev-list` over all of them.

        A tip that is no commit in the cache gets an empty chain.
        """
        wanted = [t for t in dict.fromkeys(tips) if t]
        if not wanted:
            return {}
        parent = self._first_parents(wanted)
        result: dict[str, list[str]] = {}
        for tip in wanted:
            chain: list[str] = []
            sha: str | None = tip if tip in parent else None
            while sha is not None:
                chain.append(sha)
                sha = parent.get(sha)
            result[tip] = chain
        return result

    def learn_chains(self, tips: Iterable[str]) -> None:
        """Read the first-parent chains of `tips` in one `rev-list` and keep them, so that `rev_list` and
        `is_ancestor` on those chains start no process: a reader of every brief (`audit --all`) runs a constant
        number of git processes, not a few per brief. Commits never change, so what is kept stays true."""
        wanted = [t for t in dict.fromkeys(tips) if t and not self._chain_known(t)]
        if wanted:
            self._parents.update(self._first_parents(wanted))

    def _first_parents(self, tips: list[str]) -> dict[str, str | None]:
        """Each commit on the first-parent chains of `tips` (those that are commits in the cache) -> its first
        parent (None for a root): one cat-file batch and one `rev-list`."""
        kinds = self.read_typed(tips)
        commits = [t for t, obj in zip(tips, kinds, strict=True) if obj is not None and obj.kind == "commit"]
        parent: dict[str, str | None] = {}
        if commits:
            out = self._git("rev-list", "--first-parent", "--parents", "--stdin",
                            input="".join(f"{c}\n" for c in commits).encode()).stdout.decode()
            for line in out.splitlines():
                shas = line.split()
                if shas:
                    parent[shas[0]] = shas[1] if len(shas) > 1 else None
            for sha in self.shallow_commits():  # git shows a shallow commit as a root: not a fact to keep
                parent.pop(sha, None)
        return parent

    # -- worktrees (one per desk and brief, never shared) ------------------------------

    def worktree(self, path: Path, commit: str) -> WorkRepo:
        """A worktree of the cache at `path`: adopted as it is if it exists (work in progress survives a crash),
        and moved into this cache first if another cache made it (`_rehome`)."""
        if (path / ".git").exists():
            if not self._owns(path):
                self._rehome(path, commit)
            return WorkRepo(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._git("worktree", "prune")
        self._git("worktree", "add", "--detach", "--force", str(path), commit)
        return WorkRepo(path)

    def _owns(self, path: Path) -> bool:
        """Whether the worktree at `path` is one of this cache's (its `.git` file points into the cache)."""
        try:
            pointer = (path / ".git").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return False
        from pathlib import Path  # here: the commands a desk's agent runs in loops do not load pathlib

        target = Path(pointer.removeprefix("gitdir:").strip())
        return target.resolve().is_relative_to(Path(self.cache, "worktrees").resolve())

    def _rehome(self, path: Path, commit: str) -> None:
        """Make a worktree another cache made (ASSAY_CACHE_DIR changed) one of this cache's, keeping its files:
        its commits are fetched from it while the old cache still exists (else it starts from `commit`), a new
        worktree's `.git` takes the place of the old one, and the index is reset to HEAD, the files left as
        they are."""
        head = run_git(["rev-parse", "-q", "--verify", "HEAD"], cwd=path, check=False, env=self._env)
        start = head.stdout.decode().strip() if head.returncode == 0 else commit
        if head.returncode == 0:
            self._git("fetch", "-q", "--no-tags", "--no-write-fetch-head", str(path), "HEAD", check=False)
        spare = path.parent / f".{path.name}.rehome"
        _rmtree(spare)
        self._git("worktree", "prune")
        self._git("worktree", "add", "--no-checkout", "--detach", "--force", str(spare), start)
        (path / ".git").unlink()
        os.replace(spare / ".git", path / ".git")
        spare.rmdir()
        self._git("worktree", "repair", str(path))
        run_git(["reset", "-q"], cwd=path, env=self._env)

    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """The tree of merging commit `theirs` into `ours` (both in the cache), or None if they conflict."""
        proc = self._git("merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False)
        if proc.returncode == 1:
            return None
        if proc.returncode != 0:
            raise ForgeError(f"git merge-tree failed: {_first_error(proc.stderr)}",
                             hint="merging reviews needs git 2.38 or newer")
        return proc.stdout.decode().split()[0]

    def merge_conflicts(self, ours: str, theirs: str) -> tuple[str | None, list[str]]:
        """The tree of merging `theirs` into `ours` (both in the cache) and, when they conflict, None and the paths
        in conflict."""
        proc = self._git("merge-tree", "--write-tree", "--no-messages", "--name-only", ours, theirs, check=False)
        if proc.returncode not in (0, 1):
            raise ForgeError(f"git merge-tree failed: {_first_error(proc.stderr)}",
                             hint="merging reviews needs git 2.38 or newer")
        lines = [line for line in proc.stdout.decode("utf-8", "replace").splitlines() if line]
        if proc.returncode == 0:
            return lines[0], []
        return None, list(dict.fromkeys(lines[1:]))

    def tree_of(self, commit: str) -> str:
        """The tree of a commit in the cache."""
        return self._git("rev-parse", f"{commit}^{{tree}}").stdout.decode().strip()

    def message_of(self, commit: str) -> str:
        """The message of a commit in the cache ("" if it is absent)."""
        raw = self.read_objects([commit])[0]
        return raw.decode("utf-8", "replace").partition("\n\n")[2] if raw else ""

    # -- writing objects (into the cache, before a push) ----------------------------

    def write_object(self, kind: str, data: bytes) -> str:
        """Store a loose object in the cache; atomic (temp file, then rename)."""
        raw = f"{kind} {len(data)}\0".encode() + data
        sha = sha1_hex(raw)
        folder = f"{self.cache}/objects/{sha[:2]}"
        final = f"{folder}/{sha[2:]}"
        if self._local:
            if len(self._fresh) >= FRESH_LIMIT:  # a bound, not a cache: an object forgotten goes in a pack instead
                self._fresh.clear()
            self._fresh.add(sha)
        if os.path.exists(final):
            return sha
        tmp = f"{folder}/tmp_obj_{os.getpid()}_{os.urandom(6).hex()}"
        fd = _create(tmp, folder)
        try:
            os.write(fd, zlib.compress(raw, 1))
        finally:
            os.close(fd)
        os.replace(tmp, final)
        self._written += 1
        if self._written % MAINTAIN_EVERY == 0:
            self.maintain()
        return sha

    def maintain(self) -> None:
        """Keep the cache from growing loose files without bound, as `git gc --auto` would.

        Loose objects go into a pack once there are more than `LOOSE_LIMIT` (estimated from one
        fan-out folder, as git does); many packs are folded into one, keeping every object: the
        cache has no refs, so nothing in it counts as reachable. Safe while other processes write:
        a loose object is removed only once it is in a pack.
        """
        objects = os.path.join(self.cache, "objects")
        sample = os.path.join(objects, "17")
        loose = sum(1 for name in os.listdir(sample) if len(name) == 38) * 256 if os.path.isdir(sample) else 0
        if loose > LOOSE_LIMIT:  # by name: `git repack` would pack only what refs reach, and the cache has none
            folders = [d for d in os.listdir(objects) if len(d) == 2 and os.path.isdir(os.path.join(objects, d))]
            names = [d + f for d in folders for f in os.listdir(os.path.join(objects, d)) if len(f) == 38]
            packed = self._git("pack-objects", "-q", os.path.join(objects, "pack", "pack"), check=False,
                               input="".join(f"{n}\n" for n in names).encode())
            if packed.returncode == 0:
                self._git("prune-packed", "-q", check=False)
        packs = os.path.join(objects, "pack")
        if os.path.isdir(packs) and sum(1 for n in os.listdir(packs) if n.endswith(".pack")) > PACK_LIMIT:
            self._git("repack", "-a", "-d", "-q", "--keep-unreachable", "--no-write-bitmap-index", check=False)

    def write_blob(self, data: bytes) -> str:
        return self.write_object("blob", data)

    def write_tree(self, entries: Iterable[TreeEntry]) -> str:
        def key(e: TreeEntry) -> bytes:  # git sorts trees as if directory names end in "/"
            return e.name.encode() + (b"/" if e.mode == "40000" else b"")
        body = b"".join(f"{e.mode} {e.name}".encode() + b"\0" + bytes.fromhex(e.sha)
                        for e in sorted(entries, key=key))
        return self.write_object("tree", body)

    def write_commit(self, tree: str, parents: Sequence[str], message: str, author: Signature,
                     when: float | None = None) -> str:
        stamp = f"{int(when if when is not None else time.time())} +0000"
        who = f"{author.name} <{author.email}> {stamp}"
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents), f"author {who}", f"committer {who}", "", message]
        return self.write_object("commit", ("\n".join(lines).rstrip("\n") + "\n").encode())

    def pack_forge_refs(self, loose_at_least: int = 0) -> int | None:
        """On a forge on disk, pack its refs into one file (deleted refs leave none behind), once at least
        `loose_at_least` of them are loose files; how many were loose, or None if nothing was packed. Its
        loose objects are packed as `git gc --auto` decides.

        A forge on disk with thousands of loose ref files reads every one of them for each push
        and listing; packed, it reads one file. A concurrent push that meets the lock is retried.
        A forge whose refs are a reftable has no loose refs.
        """
        path = local_forge_path(self.url)
        if path is None or not os.path.isdir(os.path.join(path, "refs")):
            return None
        # the objects pushes left loose, as receive-pack does after each push (a repack it starts goes on in the
        # background: a desk's pass does not wait for it)
        run_git(["--git-dir", path, "gc", "--auto", "--quiet"], check=False)
        loose = sum(len(files) for _, _, files in os.walk(os.path.join(path, "refs")))
        if loose_at_least and loose < loose_at_least:
            return None
        proc = run_git(["--git-dir", path, "pack-refs", "--all", "--prune"], check=False)
        return loose if proc.returncode == 0 else None

    # -- compare-and-swap push ------------------------------------------------------

    def push(self, updates: Sequence[RefUpdate], atomic: bool = False) -> dict[str, PushResult]:
        """CAS-push `updates`; each result is ok, stale (someone else moved the ref) or rejected.

        An outcome we did not hear (git died, timed out, the connection dropped)
        and a rejection that may be lock contention between racing pushes are
        settled by re-reading the refs: our commits are new objects, so whether
        they landed is decidable. If nothing landed and nothing moved, the same
        push is tried again; it cannot apply twice, the lease forbids it.

        With a host push window set (`pushgroup`), an atomic or one-ref push is made together with the pushes
        of this host's other processes to the same forge.
        """
        self._drop_prefetch()  # a listing from before this push is no answer after it
        if (atomic or len(updates) == 1) and os.environ.get("ASSAY_PUSH_WINDOW_S"):
            from assay.core import pushgroup

            if (wait_s := pushgroup.window()) is not None:
                def direct(group: Sequence[tuple[str, str, str]], whole: bool) -> dict[str, tuple[str, str]]:
                    done = self._push_direct([RefUpdate(*u) for u in group], whole)
                    return {ref: (r.status, r.detail) for ref, r in done.items()}

                said = pushgroup.push(os.path.join(self.cache, "pushes"),
                                      [(u.ref, u.new, u.expected) for u in updates], atomic, direct,
                                      lambda refs: self.ls_remote(*refs), wait_s)
                return {u.ref: PushResult(u.ref, *said[u.ref]) for u in updates}  # type: ignore[arg-type]
        return self._push_direct(updates, atomic)

    def _push_direct(self, updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult]:
        """`push`, made by this process alone."""
        self._drop_prefetch()
        for attempt in range(PUSH_TRIES):
            if attempt:  # racing writers hold ref locks for a moment: back off a random while
                import random

                time.sleep(random.uniform(0, 0.05 * 2 ** attempt))
            heard = self._push_once(updates, atomic)
            if heard is not None and all(r.status != "rejected" for r in heard.values()):
                return heard
            tips = self._reread(updates)
            settled = {u.ref: self._settle(u, tips.get(u.ref, ZERO), heard) for u in updates}
            if atomic:
                settled = _atomic_outcome(updates, settled)
            nothing_happened = all(r.status == "rejected" for r in settled.values())
            if nothing_happened and heard is not None and self._clear_stale_locks(heard):
                continue  # a lock a killed push left on the forge is gone: the same push again
            if not nothing_happened or (heard is not None and not _contention(heard)):
                return settled
        if heard is not None:
            return settled
        raise ForgeError(f"push to {redact(self.url)} failed {PUSH_TRIES} times and nothing was written"
                         + (f": {self._last_push_error}" if self._last_push_error else ""),
                         hint="check the forge is reachable and accepts pushes, then run the command again")

    def _clear_stale_locks(self, heard: dict[str, PushResult]) -> bool:
        """On a forge on disk, remove the stale ref locks a refusal names (`clear_stale_lock`), saying so through
        `lock_notes` (stderr by default); whether any was removed."""
        folder = local_forge_path(self.url)
        if folder is None:
            return False
        locks = {lock for r in heard.values() if r.status == "rejected" and (lock := lock_named(r.detail))}
        removed = False
        for lock in sorted(locks):
            age = clear_stale_lock(folder, lock)
            if age is not None:
                removed = True
                (self.lock_notes or _note)(f"removed the stale ref lock {lock} from the forge ({age / 60:.0f} "
                                           "minutes old: the push that left it was killed mid-way)")
        return removed

    def _push_once(self, updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult] | None:
        folder = local_forge_path(self.url)
        if (atomic or len(updates) == 1) and folder is not None and not (vetting := _vetting(folder, self.cache)).vets \
                and (self._send_loose(folder, updates, vetting.sync_loose) or self._send_objects(folder, updates)):
            return self._transact(folder, updates)
        if folder is None and atomic and self._posts and len(updates) >= HTTP_PUSH_AT:
            posted = self._push_http(updates)
            if posted is not False:
                return posted
        args = ["push", "--porcelain", "--no-verify"]
        if atomic:
            args.append("--atomic")
        args += [f"--force-with-lease={u.ref}:{u.expected}" for u in updates]
        args.append(self.remote)
        # never a "+" refspec: it would override the lease; a new id of ZERO deletes the ref
        args += [f"{'' if u.new == ZERO else u.new}:{u.ref}" for u in updates]
        try:  # git matches each ref of a push against every ref the forge advertises: big pushes take longer
            proc = self._git(*args, check=False, timeout=_timeout() + 0.1 * len(updates))
        except ForgeError as exc:
            self._last_push_error = exc.message
            return None  # timed out: outcome unknown
        self._last_push_error = _first_error(proc.stderr) if proc.returncode else ""
        results = parse_porcelain(proc.stdout.decode("utf-8", "replace"))
        if not all(u.ref in results for u in updates):
            return None
        cause = _remote_error(proc.stderr)  # git's own reason ("cannot lock ref …"), not just "remote rejected"
        return {u.ref: results[u.ref]._replace(detail=cause) if cause and results[u.ref].status == "rejected"
                else results[u.ref] for u in updates}

    def _push_http(self, updates: Sequence[RefUpdate]) -> dict[str, PushResult] | None | Literal[False]:
        """A big atomic push to a forge over HTTP as one exchange with its `git-receive-pack` (smart HTTP): the forge's
        advertisement read once, the commands and one pack (`pack-objects --revs`, leaving out what the expected
        tips hold) posted once, its report read. `git push` matches each ref pushed against every ref the forge
        advertises, twice (in push and in send-pack): a push of thousands of refs to a forge of tens of
        thousands costs minutes; this costs what it sends. The lease is the command's old id, as `git push
        --force-with-lease` sends it; a ref not where the lease expects is refused here, before anything is sent.
        False when nothing was sent and `git push` should do it (the forge is not plain smart HTTP to
        this client: a redirect, a login it asks for, a capability it lacks; it is not asked so again); None when
        the outcome was not heard."""
        import urllib.error
        import urllib.request

        base = self.remote.rstrip("/")
        headers = {"User-Agent": "git/assay", **({"Authorization": self._auth.partition(": ")[2]} if self._auth
                                                  else {})}
        opener = urllib.request.build_opener(_no_redirect_handler())  # no redirect: it would carry the token
        try:
            with opener.open(urllib.request.Request(f"{base}/info/refs?service=git-receive-pack",
                                                    headers=headers), timeout=_timeout()) as answer:
                advertised, caps = _advertisement(answer.read()) if answer.geturl().startswith(base) else ({}, set())
        except (OSError, ValueError, urllib.error.URLError):
            advertised, caps = {}, set()
        if not {"report-status", "delete-refs", "atomic"} <= caps:
            self._posts = False
            return False
        stale = {u.ref for u in updates if advertised.get(u.ref, ZERO) != u.expected}
        if stale:  # as `git push --force-with-lease --porcelain` reports it
            return {u.ref: PushResult(u.ref, "stale", "stale info") if u.ref in stale
                    else PushResult(u.ref, "rejected", "atomic push failed") for u in updates}
        agent = ["report-status", "atomic", *(["ofs-delta"] if "ofs-delta" in caps else [])]
        body = b"".join(_pkt(f"{u.expected} {u.new} {u.ref}" + ("\0" + " ".join(agent) if i == 0 else "") + "\n")
                        for i, u in enumerate(updates)) + b"0000"
        news = [u.new for u in updates if u.new != ZERO]
        if news:
            olds = [u.expected for u in updates if u.expected != ZERO]
            present = [sha for sha, obj in zip(olds, self.read_typed(olds), strict=True) if obj is not None]
            wanted = "".join([*(f"{sha}\n" for sha in news), *(f"^{sha}\n" for sha in present)])
            try:
                body += self._git("pack-objects", "--revs", "--stdout", "-q", input=wanted.encode()).stdout
            except ForgeError:
                return False  # nothing was sent: `git push` says why
        self.round_trips["push"] += 1
        request = urllib.request.Request(f"{base}/git-receive-pack", data=body, method="POST", headers={
            **headers, "Content-Type": "application/x-git-receive-pack-request",
            "Accept": "application/x-git-receive-pack-result"})
        try:
            with opener.open(request, timeout=_timeout() + 0.01 * len(updates)) as answer:
                report = _pkt_lines(answer.read())
        except (OSError, ValueError, urllib.error.URLError) as exc:
            self._last_push_error = str(exc)
            return None  # the outcome was not heard: the caller re-reads
        results: dict[str, PushResult] = {}
        for line in report:
            word, _, rest = line.partition(" ")
            ref, _, why = rest.partition(" ")
            if word == "ok":
                results[ref] = PushResult(ref, "ok", "")
            elif word == "ng":
                results[ref] = PushResult(ref, "rejected", why)
        if not report or report[0] != "unpack ok" or not all(u.ref in results for u in updates):
            self._last_push_error = report[0] if report else "no report from the forge"
            return None
        self._last_push_error = "; ".join(sorted({r.detail for r in results.values() if not r.ok}))
        return {u.ref: results[u.ref] for u in updates}

    def _send_loose(self, folder: str, updates: Sequence[RefUpdate], sync: bool) -> bool:
        """Give a forge on this machine the objects of `updates` as the objects this process wrote, when that is
        all they need: every object the new tips reach is one of those (read back from the cache, so what it
        reaches is followed), a blob the forge holds loose, or an expected tip it holds (a ref names it, so all it
        reaches is there). Any other object the forge holds may be one a push cut short left there without what
        it reaches (a commit without its tree): then, as for an object written by another process, nothing is sent
        and False returned, and `pack-objects --revs` works out what to send. Fewer than `UNPACK_BELOW` go as the
        loose files the cache holds, each synced before it is named when `sync` (the forge asks git to sync its
        loose objects), as git does: the file, not its folder; more go as one pack of exactly those objects.
        Two processes fewer than `pack-objects | unpack-objects` for the commits a push of Assay's own makes, and
        for a big one (a retirement) no walk of the history below the expected tips, which grows with the forge."""
        found = self._fresh_closure(folder, updates)
        if found is None:
            return False
        send, packed_tips = found
        if packed_tips and not _forge_has(folder, packed_tips):
            return False
        if len(send) >= UNPACK_BELOW or any(stored is None for stored in send.values()):
            try:  # exactly these objects (no --revs): nothing below the expected tips is walked
                pack = self._git("pack-objects", "--stdout", "-q", input="".join(f"{sha}\n" for sha in send).encode())
            except ForgeError as exc:
                self._last_push_error = exc.message
                return False
            if not self._deliver(folder, pack.stdout):
                return False
            if len(self._sent) >= FRESH_LIMIT:  # a bound, as for `_fresh`
                self._sent.clear()
            self._sent.update(send)
        else:
            for sha, stored in send.items():
                if stored is None or not _put_loose(f"{folder}/objects/{sha[:2]}", sha[2:], stored, sync):
                    return False
        self._fresh.difference_update(send)
        return True

    def _fresh_closure(self, folder: str, updates: Sequence[RefUpdate]) -> tuple[dict[str, bytes | None],
                                                                                   list[str]] | None:
        """What `_send_loose` sends: every object the new tips reach down to what the forge holds (sha -> its
        loose file in the cache, or None where the cache holds it packed), and the expected tips reached that the
        forge holds in a pack (to be looked up there); None if some object is neither written here nor held."""
        tips = {u.expected for u in updates if u.expected != ZERO}
        send: dict[str, bytes | None] = {}
        packed_tips: list[str] = []
        todo: list[tuple[str, str]] = [(u.new, "tip") for u in updates if u.new != ZERO]  # (sha, kind named)
        seen: set[str] = set()
        while todo:
            sha, kind = todo.pop()
            if sha in seen:
                continue
            seen.add(sha)
            if sha not in self._fresh:
                if (kind == "blob" or sha in tips) and os.path.isfile(f"{folder}/objects/{sha[:2]}/{sha[2:]}"):
                    continue
                if sha in tips:
                    packed_tips.append(sha)
                    continue
                if sha in self._sent:  # sent before with all it reaches
                    continue
                return None
            stored = self._loose_in_cache(sha)
            if stored is not None:
                raw = zlib.decompress(stored)
            else:  # packed by `maintain` meanwhile: read from the pack, and sent in one
                obj = self.read_typed([sha])[0]
                if obj is None:
                    return None
                raw = f"{obj.kind} {len(obj.data)}\0".encode() + obj.data
            send[sha] = stored
            todo += _links(raw)
        return send, packed_tips

    def _loose_in_cache(self, sha: str) -> bytes | None:
        """The cache's loose file of `sha`, if it is there and holds that very object."""
        try:
            with open(f"{self.cache}/objects/{sha[:2]}/{sha[2:]}", "rb") as loose:
                stored = loose.read()
            return stored if sha1_hex(zlib.decompress(stored)) == sha else None
        except (OSError, zlib.error):
            return None

    def _send_objects(self, folder: str, updates: Sequence[RefUpdate]) -> bool:
        """Give a forge on this machine the objects of `updates` it lacks, as one pack (`pack-objects --revs`,
        leaving out what the expected tips hold); False if that could not be done."""
        news = [u.new for u in updates if u.new != ZERO]
        if not news:
            return True
        olds = [u.expected for u in updates if u.expected != ZERO]
        present = [sha for sha, obj in zip(olds, self.read_typed(olds), strict=True) if obj is not None]
        wanted = "".join([*(f"{sha}\n" for sha in news), *(f"^{sha}\n" for sha in present)])
        try:
            pack = self._git("pack-objects", "--revs", "--stdout", "-q", input=wanted.encode()).stdout
        except ForgeError as exc:
            self._last_push_error = exc.message
            return False
        return self._deliver(folder, pack)

    def _deliver(self, folder: str, pack: bytes) -> bool:
        """Put `pack` into a forge on this machine, unpacked loose when small, as `receive-pack` does, or kept as a
        pack (`index-pack`); False if that could not be done."""
        if pack[:4] != b"PACK":
            return False
        count = int.from_bytes(pack[8:12], "big")  # the pack header: "PACK", version, object count
        try:
            run_git(["--git-dir", folder, *(["unpack-objects", "-q"] if count < UNPACK_BELOW
                                             else ["index-pack", "--stdin"])], input=pack, timeout=_timeout(),
                    env=_forge_env())
        except ForgeError as exc:
            self._last_push_error = exc.message
            return False
        return True

    def _transact(self, folder: str, updates: Sequence[RefUpdate]) -> dict[str, PushResult] | None:
        """An atomic push to a forge on this machine (its objects there already), as the forge's own ref
        transaction: `update-ref --stdin` moves every ref at once, each only from its expected value, or none:
        the compare-and-swap `receive-pack` makes, without its four processes (a third of a small push's
        time) or its cost that grows with the refs the forge advertises times the refs pushed. None when the
        outcome was not heard (the caller re-reads)."""
        commands = "".join(f"update {u.ref} {u.new} {u.expected}\n" if u.new != ZERO
                           else f"delete {u.ref} {u.expected}\n" for u in updates)
        try:
            proc = run_git(["--git-dir", folder, "update-ref", "--stdin"], input=commands.encode(),
                           check=False, timeout=_timeout() + 0.01 * len(updates), env=_forge_env())
        except ForgeError as exc:
            self._last_push_error = exc.message
            return None
        self.round_trips["push"] += 1
        if proc.returncode == 0:
            self._last_push_error = ""
            return {u.ref: PushResult(u.ref, "ok", "") for u in updates}
        self._last_push_error = _first_error(proc.stderr)  # "cannot lock ref '…': is at … but expected …"
        return {u.ref: PushResult(u.ref, "rejected", self._last_push_error) for u in updates}

    def _settle(self, u: RefUpdate, tip: str, heard: dict[str, PushResult] | None) -> PushResult:
        if tip == u.new:
            return PushResult(u.ref, "ok", "landed (confirmed by re-reading)")
        if tip == u.expected:
            detail = heard[u.ref].detail if heard and u.ref in heard else "not written"
            return PushResult(u.ref, "rejected", detail)
        if tip != ZERO:
            # our commit may have landed and another writer built on it before we looked
            try:
                self.ensure_objects({u.ref: tip})
                if self.is_ancestor(u.new, tip):
                    return PushResult(u.ref, "ok", "landed, then built upon (confirmed by re-reading)")
            except ForgeError:
                pass
        return PushResult(u.ref, "stale", "moved by another writer")

    def _reread(self, updates: Sequence[RefUpdate]) -> dict[str, str]:
        last: ForgeError | None = None
        for delay in (0.0, 0.5, 2.0):
            time.sleep(delay)
            try:
                return self.ls_remote(*[u.ref for u in updates])
            except ForgeError as exc:
                last = exc
        raise ForgeError(f"the outcome of a push to {redact(self.url)} is unknown and the forge cannot be re-read: "
                         f"{last.message if last else ''}",
                         hint="run the command again when the forge is reachable; it re-reads before writing")




_CONTENTION = ("failed to update ref", "cannot lock ref", "failed to lock", "unable to create", "atomic")


OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a full object id (SHA-1 or SHA-256)
_PREFIXABLE = re.compile(r"refs/[^*?\[\\]*\*?")  # a full ref name, or one ending in `*`: asked for by prefix


def _pkt(text: str) -> bytes:
    data = text.encode()
    return b"%04x" % (len(data) + 4) + data


def _ls_refs_request(patterns: Sequence[str]) -> bytes:
    """A protocol v2 `ls-refs` request with a `ref-prefix` for each pattern (a full ref, or one ending in `*`)."""
    prefixes = sorted({p.removesuffix("*") for p in patterns})
    return (_pkt("command=ls-refs\n") + b"0001" + b"".join(_pkt(f"ref-prefix {p}\n") for p in prefixes)
            + b"0000")


def _listed(lines: Sequence[str], patterns: Sequence[str]) -> dict[str, str]:
    """The refs of an `ls-refs` answer that `patterns` name (a prefix may also match refs beside a full ref)."""
    exact = {p for p in patterns if not p.endswith("*")}
    wild = tuple(p.removesuffix("*") for p in patterns if p.endswith("*"))
    refs: dict[str, str] = {}
    for line in lines:
        sha, _, rest = line.partition(" ")
        ref = rest.split(" ", 1)[0]
        if ref in exact or (wild and ref.startswith(wild)):
            refs[ref] = sha
    return refs


def _skip_section(stream: IO[bytes]) -> bool:
    """Read pkt-lines from `stream` up to and with the next flush; False if it ends first."""
    while True:
        head = stream.read(4)
        if len(head) < 4:
            return False
        size = int(head, 16)
        if size == 0:
            return True
        if size >= 4 and len(stream.read(size - 4)) < size - 4:
            return False


def _advertisement(data: bytes) -> tuple[dict[str, str], set[str]]:
    """The refs and capabilities of a smart-HTTP `git-receive-pack` advertisement (`# service=` line, flush, then
    one ref a line, the first with the capabilities after a NUL); nothing for anything else."""
    if not data.startswith(b"001f# service=git-receive-pack\n0000"):
        return {}, set()
    refs: dict[str, str] = {}
    caps: set[str] = set()
    for i, line in enumerate(_pkt_lines(data[len(b"001f# service=git-receive-pack\n0000"):])):
        line, _, listed = line.partition("\0")
        if i == 0:
            caps = set(listed.split())
        sha, _, ref = line.partition(" ")
        if ref.startswith("refs/"):
            refs[ref] = sha
    return refs, caps


def _pkt_lines(data: bytes) -> list[str]:
    """The payloads of a pkt-line stream up to its first flush (`0000`), each without its newline."""
    out: list[str] = []
    at = 0
    while at + 4 <= len(data):
        size = int(data[at:at + 4], 16)
        if size < 4:
            break
        out.append(data[at + 4:at + size].decode("utf-8", "replace").rstrip("\n"))
        at += size
    return out


class Vetting(NamedTuple):
    """How a forge on this machine takes a push: through `git push` when it `vets` it, else by the fast path, which
    syncs each loose object it writes when `sync_loose` (the forge asks git to)."""

    vets: bool
    sync_loose: bool = False


_VETTING: dict[str, tuple[list[object], list[str], Vetting]] = {}  # a forge's folder: stamps, included files, answer
RACY_NS = 50_000_000  # a file written this close to a reading may be newer than what was read (file clocks are coarse)
# in the forge's cache: `_vetting`'s answer and the stamps it was read from (v1's answers, which did not weigh object
# checks, transfer.* or syncing, are never read)
VETTING_FILE = "forge-vetting.v2.json"
# config keys, as git lists them, that give a forge a say in what its receive-pack takes: its rules (`receive.*`;
# `transfer.*`: object checks, hidden refs; not the two a client alone reads), hooks elsewhere, shared permissions,
# repository extensions
_RULES = re.compile(r"receive\.|transfer\.(?!credentialsinurl$|bundleuri$)|extensions\.|core\.hookspath$"
                    r"|core\.sharedrepository$")
_SETTINGS = frozenset({"core.bare", "core.fsync", "core.fsyncobjectfiles"})  # keys whose values decide, as listed
LOCAL_REPO_ENV = (  # what `git push` leaves out of its receive-pack's environment on this machine (git 2.39's
    # `git rev-parse --local-env-vars`): a repository, its objects, config given on the command line
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX", "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR")
GIT_SYNCS_LOOSE = os.name == "nt"  # git's default `core.fsync` leaves loose objects out (`committed,-loose-object`),
# but on Windows
_FSYNC_LOOSE = {"loose-object": True, "pack": False, "pack-metadata": False, "commit-graph": False, "index": False,
                "objects": True, "reference": False, "derived-metadata": False, "committed": True, "added": True,
                "all": True}  # core.fsync's components (git 2.36 on), and whether each holds `loose-object`


def _vetting(folder: str, cache: str) -> Vetting:
    """How a forge on this machine takes a push. It vets each one, through `git push`, when it has a say in what
    it receives: hooks (in its own folder or where `core.hooksPath` points), `receive.*` and `transfer.*` rules
    (`denyDeletes`, hidden refs, object checks: `fsckObjects` with the `fsck.*` messages its receive-pack reads),
    shared permissions (`core.sharedRepository`, which git applies to each file it writes), extensions, a
    branch checked out (a forge not bare, linked worktrees), or a setting git refuses. Else the fast path does
    what its receive-pack would: `fsck.*` alone checks nothing a push brings; git itself unpacks and moves the
    refs, syncing as `core.fsync` asks, and the loose objects it writes are synced as git would sync them.
    Asked again only when a file that decides it changed (the config files git reads, those they include, the
    forge's hooks, its worktrees) or the `GIT_CONFIG*` variables did; the answer and those stamps are kept in the
    forge's cache for the next process."""
    seen = _vetting_key(folder)
    known = _VETTING.get(folder)
    if known is not None and known[0] == [*seen, *_stamps(known[1])]:
        return known[2]
    kept_at = os.path.join(cache, VETTING_FILE)
    kept = cachefile.load(kept_at)
    also, vets, sync = kept.get("also"), kept.get("vets"), kept.get("sync")
    if isinstance(also, list) and all(isinstance(a, str) for a in also) and isinstance(vets, bool) \
            and isinstance(sync, bool):
        stamps = [*seen, *_stamps(also)]  # lists of strings and numbers: as the file gives them back
        if kept.get("stamps") == stamps:
            _VETTING[folder] = (stamps, also, Vetting(vets, sync))
            return Vetting(vets, sync)
    started = time.time_ns()
    answer, also, settled = _read_vetting(folder)
    after = _stamps(also)  # stamped after the reading: one written as git read it may be newer than what it read
    before = {os.path.abspath(st[0]) for st in seen if isinstance(st, list)}  # these were stamped before it
    racy = any(isinstance(st, list) and st[2] >= started - RACY_NS and os.path.abspath(st[0]) not in before
               for st in after)
    stamps = [*seen, *after]
    if settled and not racy:
        _VETTING[folder] = (stamps, also, answer)
        cachefile.save(kept_at, {"stamps": stamps, "also": also, "vets": answer.vets, "sync": answer.sync_loose})
    return answer


def _vetting_key(folder: str) -> list[object]:
    """What `_read_vetting`'s answer depends on, but for the files the config includes: the stamps of the config
    files git reads (the forge's, this user's and this machine's, or those `GIT_CONFIG_GLOBAL` and
    `GIT_CONFIG_SYSTEM` name), of the forge's hooks and of its worktrees folder, and a digest of the `GIT_CONFIG*`
    variables (never their values: one may carry a token)."""
    given = sorted((name, value) for name, value in os.environ.items() if name.startswith("GIT_CONFIG"))
    home = os.environ.get("HOME", "/")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    hooks = os.path.join(folder, "hooks")
    paths = [os.path.join(folder, "config"), hooks, os.path.join(folder, "worktrees")]
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    paths += [named] if named else [os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config")]
    if os.environ.get("GIT_CONFIG_NOSYSTEM", "").lower() not in ("1", "true", "yes", "on"):
        paths.append(os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if os.path.isdir(hooks):  # a hook made executable in place: its own stamp changes
        paths += sorted(os.path.join(hooks, name) for name in os.listdir(hooks))
    return [sha256_hex(json.dumps(given).encode()), *_stamps(paths)]


def _stamps(paths: Sequence[str]) -> list[object]:
    """Each file's identity and last change (None for one that is not there)."""
    stamps: list[object] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append([path, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size])
    return stamps


def _read_vetting(folder: str) -> tuple[Vetting, list[str], bool]:
    """How the forge takes a push (`_vetting`); the files its answer also depends on (those the config includes,
    and the system config of a git installed elsewhere than /usr); and whether the answer can be kept (False when
    git could not read the config: then the forge is taken to vet pushes, and asked again next time). The config
    is read as the forge's receive-pack reads it (`_forge_env`)."""
    hooks = os.path.join(folder, "hooks")
    if os.path.isdir(hooks) and any(not name.endswith(".sample") and os.access(os.path.join(hooks, name), os.X_OK)
                                    for name in os.listdir(hooks)):
        return Vetting(True), [], True
    if os.path.isdir(os.path.join(folder, "worktrees")):  # a branch checked out there is not receive-pack's to move
        return Vetting(True), [], True
    listed = run_git(["--git-dir", folder, "config", "--list", "--show-origin", "-z"], check=False, env=_forge_env())
    if listed.returncode != 0:
        return Vetting(True), [], False
    vets, also = False, set(_system_configs())
    settings: dict[str, str | None] = {}  # the last value of each key of `_SETTINGS` (None: a key with no value)
    fields = listed.stdout.decode("utf-8", "replace").split("\0")
    for origin, entry in zip(fields[0::2], fields[1::2], strict=False):
        key, valued, value = entry.partition("\n")
        vets = vets or _RULES.match(key) is not None
        if key in _SETTINGS:
            settings[key] = value if valued else None
        if not origin.startswith("file:"):
            continue  # the command line, or standard input: in the GIT_CONFIG* digest
        source = os.path.abspath(origin.removeprefix("file:"))
        also.add(source)
        if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
            also.add(os.path.join(os.path.dirname(source), os.path.expanduser(value)))  # even while absent
    sync = _syncs_loose(settings)
    vets = vets or sync is None or _git_bool(settings.get("core.bare", "false")) is not True
    return Vetting(vets, sync is True), sorted(also), True


def _forge_env() -> dict[str, str]:
    """git's environment as `git push` gives it to the receive-pack of a forge on this machine (without
    `LOCAL_REPO_ENV`): the fast path's git reads the forge's config as that receive-pack would."""
    env = git_env()
    for name in LOCAL_REPO_ENV:
        env.pop(name, None)
    return env


def _syncs_loose(settings: dict[str, str | None]) -> bool | None:
    """Whether git syncs each loose object it writes into the forge (config.c and object-file.c, git 2.36 on):
    `core.fsyncObjectFiles` true, or a `core.fsync` holding `loose-object`. None for a value git refuses (its
    push says why)."""
    if "core.fsyncobjectfiles" in settings:
        files = _git_bool(settings["core.fsyncobjectfiles"])
        if files is not False:
            return files
    if "core.fsync" not in settings:
        return GIT_SYNCS_LOOSE
    spec = settings["core.fsync"]
    return None if spec is None else _fsync_holds_loose(spec)


def _fsync_holds_loose(spec: str) -> bool:
    """Whether a `core.fsync` value holds `loose-object`, read as git's `parse_fsync_components` reads it: each
    comma-separated name (after commas and blanks) is a prefix of the components it adds, or with `-` takes away
    from the default; `none` as the last name empties the default; an empty name ends the list."""
    default, added, taken = GIT_SYNCS_LOOSE, False, False
    rest = spec
    while True:
        rest = rest.lstrip(", \t\n\r")
        name = rest.split(",", 1)[0]
        if rest == "none":
            default = False
        else:
            negated = name.startswith("-")
            name = name.removeprefix("-")
            if not name:
                break
            loose = any(full.startswith(name) and holds for full, holds in _FSYNC_LOOSE.items())
            taken, added = (taken or loose, added) if negated else (taken, added or loose)
        if "," not in rest:
            break
        rest = rest.split(",", 1)[1]
    return (default and not taken) or added


def _git_bool(value: str | None) -> bool | None:
    """A config value read as git reads a boolean (no value: true; a whole number: not zero); None if git refuses
    it."""
    if value is None:
        return True
    word = value.lower()
    if word in ("true", "yes", "on"):
        return True
    if word in ("", "false", "no", "off"):
        return False
    return int(value) != 0 if re.fullmatch(r"[-+]?[0-9]+", value) else None


def _system_configs() -> list[str]:
    """The system config of this git when it is installed under a prefix of its own (`<prefix>/etc/gitconfig`;
    under /usr it is /etc/gitconfig, which `_vetting_key` stamps), unless the environment names or skips it."""
    if "GIT_CONFIG_SYSTEM" in os.environ or "GIT_CONFIG_NOSYSTEM" in os.environ:
        return []
    found = run_git(["--exec-path"], check=False).stdout.decode("utf-8", "replace").strip()
    prefix = os.path.dirname(os.path.dirname(found.rstrip("/"))) if found else None  # <prefix>/libexec/git-core
    return [os.path.join(prefix, "etc", "gitconfig")] if prefix and prefix != "/usr" else []


def _atomic_outcome(updates: Sequence[RefUpdate], settled: dict[str, PushResult]) -> dict[str, PushResult]:
    """One outcome for an atomic push, which lands whole or not at all: it landed only if every ref it writes
    reads as landed. Otherwise a ref that reads as landed is another writer's doing, moved, not ours: a deletion
    (a deleted ref reads as gone whoever deleted it), or an identical commit (a claim renewal built by the
    desk's heartbeat in the same second as a journal push's, from the same parent, is the same commit)."""
    written = [u for u in updates if u.new != ZERO]
    if not written or all(settled[u.ref].ok for u in written):
        return settled
    return {ref: (PushResult(ref, "stale", "moved by another writer, to the same commit or gone") if r.ok else r)
            for ref, r in settled.items()}


def committed_at(commit: bytes | None) -> int | None:
    """The committer time of a raw commit object, in seconds since the epoch (the writer's clock), or None."""
    header = (commit or b"").decode("utf-8", "replace").partition("\n\n")[0]
    for line in header.splitlines():
        if line.startswith("committer "):
            stamp = line.rsplit(" ", 2)[-2]
            return int(stamp) if stamp.isdigit() else None
    return None


def _first_parent(commit: bytes) -> str | None:
    """The first parent of a raw commit object, or None for a root."""
    for line in commit.partition(b"\n\n")[0].split(b"\n"):
        if line.startswith(b"parent "):
            return line[7:].decode("ascii", "replace")
    return None


def _contention(heard: dict[str, PushResult]) -> bool:
    """A rejection that racing writers cause (ref locks), as opposed to a policy refusal."""
    return any(any(word in r.detail.lower() for word in _CONTENTION) for r in heard.values() if r.status != "ok")


def parse_porcelain(text: str) -> dict[str, PushResult]:
    """Per-ref results of `git push --porcelain` (`<flag>\\t<from>:<to>\\t<summary>`)."""
    results: dict[str, PushResult] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or len(parts[0]) != 1:
            continue
        flag, spec, summary = parts[0], parts[1], parts[2]
        ref = spec.rpartition(":")[2]
        if flag in " +*=-":
            results[ref] = PushResult(ref, "ok", summary)
        elif "stale info" in summary:
            results[ref] = PushResult(ref, "stale", summary)
        else:
            results[ref] = PushResult(ref, "rejected", summary)
    return results


def _feed(stream: IO[bytes], payload: bytes) -> None:
    """Write `payload` to the batch process; a process killed meanwhile just ends the writing."""
    try:
        stream.write(payload)
        stream.flush()
    except (OSError, ValueError):
        pass


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process whose answer is no longer wanted, and reap it."""
    proc.kill()
    _close_quietly(proc)


def _close_quietly(proc: subprocess.Popen[bytes]) -> None:
    """End a batch process: its input closed first (a live one then ends), then waited for."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    proc.wait()


def _read_answer(out: IO[bytes]) -> GitObject | None:
    """One answer of `cat-file --batch`: `<sha> <type> <size>` and the contents, or `<name> missing`."""
    header = out.readline()
    if not header.endswith(b"\n"):
        raise ForgeError("git cat-file stopped answering", hint="run the command again")
    parts = header.decode("utf-8", "replace").split()
    if len(parts) != 3 or not parts[2].isdigit():  # "<name> missing" or "<name> ambiguous"
        return None
    data = out.read(int(parts[2]))
    if len(data) != int(parts[2]) or out.read(1) != b"\n":
        raise ForgeError("git cat-file stopped answering", hint="run the command again")
    return GitObject(parts[1], data)


def parse_tree(data: bytes) -> list[TreeEntry]:
    """The entries of a tree object, from git's binary format (`<mode> <name>\\0<20-byte sha>`)."""
    entries: list[TreeEntry] = []
    i = 0
    while i < len(data):
        space = data.index(b" ", i)
        nul = data.index(b"\0", space)
        mode = data[i:space].decode()
        name = data[space + 1:nul].decode("utf-8", "replace")
        entries.append(TreeEntry(name, data[nul + 1:nul + 21].hex(), mode))
        i = nul + 21
    return entries


def _links(raw: bytes) -> list[tuple[str, str]]:
    """The objects a raw object (header and body) names, each with the kind it names it as: a commit its tree and
    parents, a tree its entries (not a submodule's commit, which is not this repository's), a tag its object."""
    header, _, body = raw.partition(b"\0")
    kind = header.split(b" ", 1)[0]
    if kind == b"tag":
        first = body.split(b"\n", 1)[0].decode("ascii", "replace")
        return [(first[7:], "object")] if first.startswith("object ") else []
    if kind == b"commit":
        head = body.split(b"\n\n", 1)[0].decode("ascii", "replace").splitlines()
        return [(line[5:], "tree") if line.startswith("tree ") else (line[7:], "commit")
                for line in head if line.startswith(("tree ", "parent "))]
    found: list[tuple[str, str]] = []
    at = 0
    while kind == b"tree" and at < len(body):
        nul = body.index(b"\0", at)
        mode = body[at:nul].split(b" ", 1)[0]
        if mode != b"160000":
            found.append((body[nul + 1:nul + 21].hex(), "tree" if mode == b"40000" else "blob"))
        at = nul + 21
    return found


def _forge_has(folder: str, shas: Sequence[str]) -> bool:
    """Whether a forge on this machine holds every object of `shas` (one `cat-file --batch-check`)."""
    try:
        proc = run_git(["--git-dir", folder, "cat-file", "--batch-check=%(objectname)"], check=False,
                       input="".join(f"{sha}\n" for sha in shas).encode(), timeout=_timeout(), env=_forge_env())
    except ForgeError:
        return False
    return proc.returncode == 0 and proc.stdout.decode().split() == list(shas)


def _put_loose(folder: str, name: str, stored: bytes, sync: bool) -> bool:
    """Write a loose object file into a forge's fan-out folder under its name (temp file, then rename), synced
    first when `sync`; True if it is there (written now, or before). Only the fan-out folder is made: a forge
    moved away stays away."""
    if os.path.exists(f"{folder}/{name}"):
        return True
    partial = f"{folder}/tmp_obj_{os.getpid()}_{os.urandom(6).hex()}"
    try:
        if not os.path.isdir(folder):
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            if os.write(fd, stored) != len(stored):
                raise OSError(f"short write to {partial}")
            if sync:
                _harden(fd)
        finally:
            os.close(fd)
        os.replace(partial, f"{folder}/{name}")
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        return False
    return True


def _harden(fd: int) -> None:
    """Flush a file to the disk as git's `core.fsyncMethod=fsync` does (on macOS a full flush, F_FULLFSYNC, which
    `fsync` there is not); at least what git's other methods do."""
    import fcntl

    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
            return
        except OSError:  # a file system without it: git falls back to fsync too
            pass
    os.fsync(fd)


def _create(path: str, folder: str) -> int:
    """Open a new file in a fan-out folder, which a repack of the cache may have removed meanwhile."""
    for _ in range(10):
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)


def _rmtree(path: str | os.PathLike[str]) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def is_local_path(url: str) -> bool:
    return "://" not in url and not (":" in url.split("/")[0] and not url.startswith("/"))


def local_forge_path(url: str) -> str | None:
    """The directory of a forge on this machine (a path or a file:// URL); None for a remote forge."""
    if url.startswith("file://"):
        return strip_credentials(url).removeprefix("file://")
    return url if is_local_path(url) else None


def init_bare(path: Path) -> None:
    """Create a bare repository to serve as a forge on disk."""
    run_git(["init", "--bare", "-q", "--initial-branch=main", str(path)])


def local_repo_origin(start: str | os.PathLike[str]) -> str | None:
    proc = run_git(["config", "--get", "remote.origin.url"], cwd=start, check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def repo_root(start: Path) -> Path | None:
    from pathlib import Path

    proc = run_git(["rev-parse", "--show-toplevel"], cwd=start, check=False)
    return Path(proc.stdout.decode().strip()) if proc.returncode == 0 else None


class WorkRepo:
    """A working repository (a person's checkout, a desk's worktree): plain git porcelain."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def init(cls, path: Path) -> WorkRepo:
        run_git(["init", "-q", "--initial-branch=main", str(path)])
        return cls(path)

    def git(self, *args: str, check: bool = True, index: str | None = None,
            input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """git in this repository only: a folder that holds none is an error, never an enclosing repository's.
        `index`: an index file of the caller's own (absolute path) instead of the repository's, which is then
        neither read nor locked (a snapshot taken while an agent works in it)."""
        ceiling = os.path.dirname(os.path.abspath(self.path))
        env = {**git_env(), "GIT_CEILING_DIRECTORIES": ceiling}
        if index is not None:
            env.update({"GIT_INDEX_FILE": index, "GIT_OPTIONAL_LOCKS": "0"})
        return run_git(list(args), cwd=self.path, check=check, env=env, input=input)

    def commit_all(self, message: str, paths: Sequence[str] = (".",), author: Signature | None = None) -> bool:
        """Stage `paths` and commit; False when there was nothing to commit. A merge under way is committed (a merge
        commit) even when its result is HEAD's tree: its other parent is what it records."""
        self.git("add", "-A", "--", *paths)
        merging = self.git("rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode == 0
        if not merging and self.git("diff", "--cached", "--quiet", check=False).returncode == 0:
            return False
        ident = ["-c", "user.name=assay", "-c", "user.email=assay@assay.invalid"]
        if author is not None:
            ident = ["-c", f"user.name={author.name}", "-c", f"user.email={author.email}"]
        elif self.git("config", "user.email", check=False).returncode == 0:
            ident = []
        self.git(*ident, "commit", "-q", "-m", message)
        return True

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.decode().strip()

    def messages_since(self, base: str) -> list[str]:
        """The messages of the commits on HEAD that `base` lacks, newest first."""
        out = self.git("log", "-z", "--format=%B", f"{base}..HEAD").stdout.decode("utf-8", "replace")
        return [m for m in out.split("\0") if m.strip()]

    def reset_soft(self, commit: str) -> None:
        """Move HEAD to `commit`, keeping every change staged (to commit it again)."""
        self.git("reset", "-q", "--soft", commit)

    def push_new_branch(self, url: str, branch: str = "main") -> None:
        """Push HEAD to `branch` of `url` only if the forge does not have that branch yet."""
        proc = self.git("push", "--porcelain", f"--force-with-lease=refs/heads/{branch}:{ZERO}", url,
                        f"HEAD:refs/heads/{branch}", check=False)
        result = parse_porcelain(proc.stdout.decode("utf-8", "replace")).get(f"refs/heads/{branch}")
        if result is None or not result.ok:
            raise ForgeError(f"could not push {branch} to {redact(url)}: "
                             f"{result.detail if result else _first_error(proc.stderr)}")

    def set_remote(self, name: str, url: str) -> None:
        if self.git("remote", "get-url", name, check=False).returncode == 0:
            self.git("remote", "set-url", name, url)
        else:
            self.git("remote", "add", name, url)


def remote_has_ref(url: str, ref: str) -> bool:
    proc = run_git(["ls-remote", url, ref], check=False)
    if proc.returncode != 0:
        raise ForgeError(f"cannot read forge {redact(url)}: {_first_error(proc.stderr)}")
    return bool(proc.stdout.strip())
