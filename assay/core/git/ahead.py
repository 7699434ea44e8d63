"""A forge's cache: where it is, how a new one is made, and its first fetch started ahead of the code that reads it.

A command's first read of a brief on a new machine (an empty cache) is one shallow fetch of its claim and its
journal (`journal.writer.fetch_first`), most of a cold `assay step run`. `fetch` starts that fetch as soon as the
command knows its forge and brief, before the rest of its code loads (about 30 ms of modules on a 2-core machine,
loaded while git fetches), into a cache this process makes then. The cache's port waits for it before it reads
anything there or writes anything git keeps there (`ObjectCache.cache`, `settle`); a fetch no port waited for is
ended with the process (`_end_all`). Only a speed-up: a fetch that fails leaves the cache as it was, and the
reader fetches as it would have. It loads neither `subprocess` nor `re` (a forge over HTTP loads what its
credentials need).
"""

from __future__ import annotations

import _thread
import os
import stat
import sys
import time

from assay.core.digests import sha256_hex
from assay.core.git.gitenv import cache_env, default_cache_root, forge_access, git_timeout, is_local_path

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

PENDING: dict[str, tuple[int, int, float]] = {}  # a cache's folder -> the fetch started into it, until it is waited
# for: its pid, its pidfd, when it started (`time.monotonic()`)
_LOCK = _thread.allocate_lock()  # one waiter at a time (`settle`)
_ENDED_AT_EXIT: list[bool] = []  # [True] once `_end_all` is registered to run at exit
STOP_S = 2.0  # after SIGTERM, how long a fetch has to end before SIGKILL
GRACE_S = 3.0  # at exit, how long a fetch no port waited for has to finish before it is stopped
FETCH = ("fetch", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-auto-maintenance", "-q")  # as `History`


def cache_folder(url: str, root: str | os.PathLike[str] | None = None) -> str:
    """The cache of the forge `url` under `root` (Assay's cache folder by default): a path (str), pathlib unloaded."""
    return os.path.join(os.fspath(root) if root else default_cache_root(), sha256_hex(url.encode())[:20])


def make_cache(folder: str, url: str) -> bool:
    """Make the cache `folder` of the forge `url` unless it is there: whether this call made it (False where it was
    there, or another process made it meanwhile). A folder that cannot be made is a UsageError; never a half-made
    cache left behind."""
    if os.path.isdir(os.path.join(folder, "objects")):
        return False
    from assay.errors import UsageError

    parent = os.path.dirname(folder)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".init-{os.getpid()}-{os.urandom(8).hex()}")  # (not tempfile: 4 ms to load)
        os.mkdir(tmp, 0o700)
    except OSError as exc:
        raise UsageError(f"cannot use {parent} as Assay's cache: {exc.strerror}",
                         hint="point ASSAY_CACHE_DIR at a folder this user can write") from None
    try:
        _make_bare(tmp, url)
    except OSError as exc:  # a full disk, a quota: said as a folder that cannot be used is
        _rmtree(tmp)
        raise UsageError(f"cannot make Assay's cache in {parent}: {exc.strerror}",
                         hint="free space there, or point ASSAY_CACHE_DIR at a folder you can write") from None
    except BaseException:
        _rmtree(tmp)
        raise
    try:
        os.rename(tmp, folder)
    except OSError:  # another process made it first; theirs is as good as ours
        _rmtree(tmp)
        return False
    return True


def fetch(url: str, refs: Sequence[str], depth: int) -> None:
    """Start `git fetch --depth=depth url refs…` into the cache of `url` (as `ForgeGit(url)` finds it) if there is
    none yet: the cache is made here, and its port waits for the fetch (`settle`). Nothing where the cache is there
    (a reader there fetches what it lacks itself), where the fetch could not be waited for within a time limit (no
    pidfd: not Linux, or a sandbox that refuses them), or where anything goes wrong (a bad setting, no git, a cache
    that cannot be made): the command meets the same trouble and says what it is."""
    folder = cache_folder(url)
    if folder in PENDING or not hasattr(os, "pidfd_open") or os.path.isdir(os.path.join(folder, "objects")):
        return
    try:
        remote, env = forge_access(url)
        if not make_cache(folder, url):
            return
        pid = _spawn(["git", "--git-dir", folder, *FETCH, f"--depth={max(1, depth)}", remote, *refs],
                     cache_env(folder, env))
    except Exception:  # noqa: BLE001 - only a speed-up: the command meets the same trouble, and says what it is
        return
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # no bounded wait for it to be had: none runs
        _end(pid, None, 0)
        return
    if not _ENDED_AT_EXIT:
        import atexit

        atexit.register(_end_all)
        _ENDED_AT_EXIT.append(True)
    PENDING[folder] = (pid, fd, time.monotonic())


def _spawn(argv: list[str], env: dict[str, str]) -> int:
    """Start `argv` (found on PATH) in a process group of its own (its helpers, `upload-pack`, `index-pack`,
    `remote-https`, are stopped with it), with nothing to say to it (no input, its output discarded), the signals
    Python or its caller ignore that stop it (SIGTERM) or git expects (SIGPIPE, SIGXFSZ) at their defaults, none
    blocked; its pid."""
    import signal  # loaded already: a command's signals are set before it runs (`entry.stop_as_interrupt`)

    null = os.devnull
    return os.posix_spawnp(argv[0], argv, env, file_actions=[(os.POSIX_SPAWN_OPEN, fd, null, os.O_RDWR, 0)
                                                             for fd in (0, 1, 2)],
                           setpgroup=0, setsigmask=[],
                           setsigdef=[getattr(signal, name) for name in ("SIGTERM", "SIGPIPE", "SIGXFZ", "SIGXFSZ")
                                      if hasattr(signal, name)])


def settle(folder: str) -> bool:
    """Wait for the fetch started into `folder`, if one was (and is not waited for yet): whether one was. A fetch
    still running at git's time limit from its start (`ASSAY_GIT_TIMEOUT`) is stopped; how any ended, the cache's
    reader finds out. One thread waits; another asking meanwhile waits for it."""
    with _LOCK:
        entry = PENDING.get(folder)
        if entry is None:
            return False
        pid, fd, started = entry
        _end(pid, fd, git_timeout() - (time.monotonic() - started))
        del PENDING[folder]  # (before its pidfd is closed: an interrupt between leaves it to `_end_all`, whole)
        os.close(fd)
    return True


def _end(pid: int, fd: int | None, wait_s: float) -> None:
    """Reap the fetch `pid` (its pidfd `fd`) once it ends, waiting at most `wait_s` seconds (woken as it ends, not
    by polling); then its process group is stopped: SIGTERM (git removes the temporary files of a fetch it was
    stopped in), after `STOP_S` SIGKILL; at once without a pidfd to wait on. Bounded however the fetch behaves; its
    group is signalled only while it is unreaped (its id is then its own)."""
    import select
    import signal

    def ended(within: float) -> bool:
        return fd is not None and bool(select.select([fd], [], [], max(0.0, within))[0])

    if not ended(wait_s):
        for sig, then in ((signal.SIGTERM, STOP_S), (signal.SIGKILL, 0.0)) if fd is not None else \
                ((signal.SIGKILL, 0.0),):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            if ended(then):
                break
    try:
        if fd is not None and hasattr(os, "P_PIDFD"):
            os.waitid(os.P_PIDFD, fd, os.WEXITED)
        else:
            os.waitpid(pid, 0)
    except ChildProcessError:  # reaped already (by a wait an interrupt cut short)
        pass


def _end_all() -> None:
    """At exit: the fetches no port waited for (the command ended first: bad input, an error) are given `GRACE_S`
    to finish (a fetch stopped between its pack and its `shallow` file would leave the cache cut short unsaid),
    then stopped, and reaped: never left running on. A second Ctrl-C meanwhile stops them at once."""
    for folder, (pid, fd, _) in list(PENDING.items()):
        try:
            _end(pid, fd, GRACE_S)
        except KeyboardInterrupt:
            _end(pid, None, 0)
        PENDING.pop(folder, None)
        os.close(fd)


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _make_bare(folder: str, url: str) -> None:
    """An empty bare repository in the empty folder `folder`, as `git init --bare --template=` makes one, written
    here: a process fewer for every new cache, and always the formats Assay writes (SHA-1 objects, refs as files),
    whatever `init.*` settings or `GIT_DEFAULT_*` variables the user has. Its folders, `HEAD`, and the core
    settings git finds by trying the file system as `git init` does (`_file_system`: a desk's worktree added from
    the cache reads them). No template: no hook samples, nor a user's hooks, which would run as the cache changes.
    The config also says: fetch.unpackLimit=1: fetched objects arrive as one pack that appears whole, so a process
    sharing this cache never sees a commit whose tree is still being written; no gc or maintenance, no reflogs;
    the forge it caches (its URL without credentials). A loose object's fan-out folder is made when its first
    object is written (`ObjectCache`)."""
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        os.makedirs(os.path.join(folder, sub))
    with open(os.path.join(folder, "HEAD"), "w", encoding="ascii") as head:
        head.write("ref: refs/heads/main\n")
    config = os.path.join(folder, "config")
    with open(config, "w", encoding="utf-8") as out:
        out.write("[core]\n\trepositoryformatversion = 0\n")
    found = _file_system(folder, config)
    with open(config, "a", encoding="utf-8") as out:
        out.write("".join(f"\t{key} = {value}\n" for key, value in found) +
                  "\tbare = true\n\tlogAllRefUpdates = false\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n"
                  f"[fetch]\n\tunpackLimit = 1\n[assay]\n\tforge = {_config_value(_without_credentials(url))}\n")


def _file_system(folder: str, config: str) -> list[tuple[str, str]]:
    """What `git init` finds of the file system a new repository is on (builtin/init-db.c, `create_default_files`)
    and writes as core settings: whether it keeps the executable bit (`filemode`), makes symbolic links
    (`symlinks`, written only when false), tells names apart by case (`ignorecase`, written only when true) and,
    on macOS, whether it decomposes Unicode names (`precomposeunicode`)."""
    st = os.stat(config)
    try:
        os.chmod(config, st.st_mode ^ stat.S_IXUSR)
        filemode = os.lstat(config).st_mode != st.st_mode
        os.chmod(config, st.st_mode)
    except OSError:
        filemode = False
    found = [("filemode", "true" if filemode and not st.st_mode & stat.S_IXUSR else "false")]
    probe = os.path.join(folder, "tXXXXXX")
    try:
        os.symlink("testing", probe)
        linked = os.path.islink(probe)
        os.unlink(probe)
    except OSError:
        linked = False
    if not linked:
        found.append(("symlinks", "false"))
    if os.path.exists(os.path.join(folder, "CoNfIg")):
        found.append(("ignorecase", "true"))
    if sys.platform == "darwin":
        composed = os.path.join(folder, "\u00e4")
        try:
            os.close(os.open(composed, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
        except OSError:
            return found
        found.append(("precomposeunicode", "true" if os.access(os.path.join(folder, "a\u0308"), os.R_OK)
                      else "false"))
        os.unlink(composed)
    return found



def _without_credentials(url: str) -> str:
    if is_local_path(url):  # a folder: nothing to take out (and nothing to load for one)
        return url
    from assay.core.credentials import strip_credentials

    return strip_credentials(url)


def _config_value(value: str) -> str:
    """`value` as a git configuration file holds it: quoted, with git's escapes."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


