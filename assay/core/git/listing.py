"""Listing a forge's refs: protocol v2 `ls-refs` over upload-pack (on disk) or git's HTTP transport, each asked
for only the refs named; `git ls-remote` where neither will do."""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import threading
from collections.abc import Sequence

from assay.core.credentials import redact
from assay.core.git.gitenv import git_env, git_timeout, stall_seconds
from assay.core.git.history import History
from assay.core.git.objects import close_quietly
from assay.core.git.refs import pkt_line
from assay.core.git.run import first_error, local_forge_path, run_git
from assay.core.git.vetting import warm
from assay.errors import ForgeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import IO

    from assay.core.git.smarthttp import SmartHTTP

PIPE_HOLDS = select.PIPE_BUF  # bytes an empty pipe takes at once, never in part (512 at least; 4096 on Linux): a
# listing's request this size goes to git before the caller goes on
_PREFIXABLE = re.compile(r"refs/[^*?\[\\]*\*?")  # a full ref name, or one ending in `*`: asked for by prefix


_HEADS: dict[str, dict[str, None]] = {}  # per forge: tips of main this process saw there, the newest last
_HEADS_LOCK = threading.Lock()
HEADS_KEPT = 4


def saw_heads(remote: str, refs: dict[str, str]) -> None:
    """Keep main's tip among `refs` (the newest `HEADS_KEPT`) as a commit `remote` has (`heads_seen`). Main only
    moves forward, so what its tips reach stays on the forge; a work branch may be rewritten, its commits let go."""
    tip = refs.get("refs/heads/main")
    if tip:
        with _HEADS_LOCK:
            seen = _HEADS.setdefault(remote, {})
            seen.pop(tip, None)
            seen[tip] = None
            while len(seen) > HEADS_KEPT:
                del seen[next(iter(seen))]


def heads_seen(remote: str) -> list[str]:
    """Tips of main this process saw `remote` have (listed, or pushed there), the newest last: what a push or a
    fetch there can leave out, with all they reach."""
    with _HEADS_LOCK:
        return list(_HEADS.get(remote, {}))


def forget_heads(remote: str) -> None:
    """`remote` lacked what a tip seen there reaches (main was rewritten, the forge made anew): none is trusted."""
    with _HEADS_LOCK:
        _HEADS.pop(remote, None)


_HELD: dict[str, dict[str, str]] = {}  # per forge: ref -> its last tip this process fetched or pushed, the newest last
HELD_KEPT = 4096


def held(remote: str, tips: dict[str, str]) -> None:
    """Keep `tips` (ref -> a commit the cache holds with its history) as what a fetch of those refs can say it
    has (`held_of`)."""
    with _HEADS_LOCK:
        kept = _HELD.setdefault(remote, {})
        for ref, sha in tips.items():
            kept.pop(ref, None)
            kept[ref] = sha
        while len(kept) > HELD_KEPT:
            del kept[next(iter(kept))]


def held_of(remote: str, refs: Sequence[str]) -> list[str]:
    """The tips of `refs` this process fetched or pushed last (`held`)."""
    with _HEADS_LOCK:
        kept = _HELD.get(remote, {})
        return [kept[ref] for ref in refs if ref in kept]


class Listing(History):
    """Reads the forge's refs."""

    def __init__(self, url: str, cache_root: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        super().__init__(url, cache_root, token)
        self._speaks_v2 = True  # an HTTP forge, until it says it does not
        self._prefetched: tuple[frozenset[str], subprocess.Popen[bytes]] | None = None  # see `prefetch`
        self._direct: SmartHTTP | None = None  # listings over HTTP from this process, where git would list so
        self._direct_looked = False  # whether git's configuration was read for it
        self._fetch_failures = 0  # fetches from this process over HTTP that failed in a row (`_fetch_direct`)

    def ls_remote(self, *patterns: str) -> dict[str, str]:
        """Refs of the forge matching `patterns` (exact refs or `prefix/*`), one round trip. A forge on this machine
        or over HTTP is asked for only those refs (protocol v2's `ls-refs` with a `ref-prefix` each); `git
        ls-remote` asks for every ref, however few the patterns name, and matches them here. The first listing
        whose refs a `prefetch` named takes that answer instead. Over HTTP, a desk under a supervisor lists with the
        host's other desks where the forge is slow (`listgroup.py`). The branch tips listed are kept (`saw_heads`)."""
        refs = self._ls_remote(patterns)
        saw_heads(self.remote, refs)
        return refs

    def _ls_remote(self, patterns: Sequence[str]) -> dict[str, str]:
        folder = local_forge_path(self.url)
        prefixable = bool(patterns) and all(_PREFIXABLE.fullmatch(p) for p in patterns)
        if folder is not None and prefixable:
            return self._ls_refs(folder, patterns)
        self._drop_prefetch()  # a listing taken another way: an answer from before it is no answer after it
        if prefixable and self._speaks_v2 and self.remote.lower().startswith(("http://", "https://")):
            from assay.core import listgroup

            found = listgroup.listing(os.path.join(self.cache, "listings"), patterns, self._ls_refs_over_http,
                                      git_timeout())
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
        """Start listing `refs` (full ref names) on a forge on this machine, the object batch, and the reading of
        how the forge takes a push (`vetting.warm`), while the caller goes on (a short command loads the code it
        runs meanwhile: the two cores work at once where one would wait). The next `ls_remote` of refs among these
        takes the answer, once; a push, or a listing of others, drops it. Anywhere else nothing is done."""
        folder = local_forge_path(self.url)
        if folder is None or not refs or not all(_PREFIXABLE.fullmatch(r) and not r.endswith("*") for r in refs):
            return
        request = _ls_refs_request(refs)
        if len(request) > PIPE_HOLDS:
            return  # it could wait on git to read it: listed when asked, under the timeout
        self._drop_prefetch()
        self._prefetched = (frozenset(refs), self._start_ls_refs(folder, request))
        self._batch_process()
        warm(folder, self._folder)  # how the forge takes a push (its own file there): the first push asks it

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

        Not `git for-each-ref`, which is about as fast (26,000 refs, packed, git 2.39, a quiet 2-core machine,
        `benchmarks/refs_listing.py`, raw processes: one brief's refs 1.8 ms there, 2.0 ms here; every ref 42 and
        35 ms) but skips, with a warning, a ref whose name git refuses (`refs/assay/claims/a..b`): junk the sweep
        must list (tests/test_forge_junk.py), which `ls-refs` lists as it lists the rest. Only this way a listing
        starts while the command loads its code (`prefetch`) with the same request as over HTTP."""
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
            out, err = proc.communicate(request if proc.stdin is not None else None, timeout=git_timeout())
        except subprocess.TimeoutExpired:
            raise ForgeError(f"git upload-pack timed out after {git_timeout():.0f}s") from None
        finally:
            if proc.returncode is None:
                _end(proc)
        if proc.returncode != 0:
            raise self._unreadable(err)
        return _listed(pkt_lines(out), patterns)

    def _ls_refs_over_http(self, patterns: Sequence[str]) -> dict[str, str] | None:
        """`ls-remote` of a forge over HTTP by prefix, from this process or through git's transport; None where
        neither does it (`git ls-remote` then asks). Under a supervisor it lists for the host's other desks too
        (`listgroup.py`)."""
        found = self._ls_refs_direct(patterns)
        return self._ls_refs_http(patterns) if found is None and self._speaks_v2 else found

    def _ls_refs_direct(self, patterns: Sequence[str]) -> dict[str, str] | None:
        """`ls-remote` of a forge over HTTP from this process (`smarthttp.py`): None where that cannot be done
        as git would do it, or did not answer whole; then git's transport asks."""
        direct = self._smart_http()
        if direct is None or not direct.usable():
            return None
        self.round_trips["ls-remote"] += 1
        answer = direct.post(_ls_refs_request(patterns))
        if answer is None:
            return None
        lines = pkt_lines(answer)
        if not _framed(answer) or any(line.startswith("ERR ") for line in lines):
            direct.failed()
            return None
        direct.succeeded()
        return _listed(lines, patterns)

    def _fetch_pairs(self, wants: Sequence[tuple[str, str]], *extra: str) -> None:
        """One fetch of the tips `wants` (ref, object id): from this process over HTTP where it can be
        (`_fetch_direct`), else through `git fetch`."""
        if not extra and self._fetch_direct(wants):
            return
        super()._fetch_pairs(wants, *extra)

    def _fetch_direct(self, wants: Sequence[tuple[str, str]]) -> bool:
        """A fetch over HTTP from this process (`httpfetch.py`): the tips by id, saying which tips of those refs and
        of main the cache holds (and, as `git fetch` does, the commits a shallow read left it without parents),
        the pack indexed into the cache. Whether it fetched every tip; where it did not (no such connection, a forge
        that refuses the ids, an answer that is not a whole pack or would change where the cache is cut short),
        `git fetch` does, and after `GIVE_UP_AFTER` such fetches in a row this port does not
        try again. A forge gone silent is an error, as through git."""
        if not self.remote.lower().startswith(("http://", "https://")):
            return False
        from assay.core.git.httpfetch import packfile, request
        from assay.core.git.smarthttp import GIVE_UP_AFTER, UPLOAD

        direct = self._smart_http()
        if direct is None or not direct.usable() or self._fetch_failures >= GIVE_UP_AFTER:
            return False
        shallow = sorted(self.shallow_commits())  # a cache a shallow read cut short says where it ends
        shas = sorted({sha for _, sha in wants})
        known = [sha for sha in dict.fromkeys([*held_of(self.remote, [r for r, _ in wants]),
                                               *heads_seen(self.remote)]) if sha not in shas]
        lacking = {sha for _, sha in self._lacking([(sha, sha) for sha in known])}
        haves = [sha for sha in known if sha not in lacking]
        self.round_trips["fetch"] += 1
        reply = direct.request(UPLOAD, request(shas, haves, shallow))
        answer = reply.data
        refused = answer is not None and answer[4:8] == b"ERR "  # an id it does not serve: git fetch asks by ref
        pack = packfile(answer, bool(shallow)) if answer is not None and not refused else None
        del answer
        # indexed, then the objects' walk: each object the fetch brought is here, connected to what the cache held
        if pack is None or self._git("index-pack", "--stdin", "--fix-thin", input=pack, check=False).returncode \
                or self._git("rev-list", "--objects", "--quiet", "--stdin", check=False, input="".join(
                    [*(f"{sha}\n" for sha in shas), *(f"^{sha}\n" for sha in haves)]).encode()).returncode:
            self._fetch_failures += 0 if refused or reply.too_large else 1  # nor a refused id, nor a pack too large
            return False
        self._fetch_failures = 0
        held(self.remote, dict(wants))
        return True

    def _smart_http(self) -> SmartHTTP | None:
        """This port's connection to an HTTP forge's smart-HTTP services (`smarthttp.py`), for listings and
        pushes; None where git would not send its requests as that module does."""
        from assay.core.git.smarthttp import SmartHTTP, settings_for

        if not self._direct_looked:  # git's configuration and environment, read once
            self._direct_looked = True
            settings = settings_for(self.remote, self._cache_env(self._env), self.cache)
            if settings is not None:
                self._direct = SmartHTTP(self.remote, settings, stall_seconds())
        return self._direct

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

            timer = threading.Timer(git_timeout(), expire)
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
                raise ForgeError(f"git ls-remote timed out after {git_timeout():.0f}s")
            if ready == b"fallback\n":  # protocol v0 or v1 only
                self._speaks_v2 = False
                return None
            if ready != b"\n":
                errors.seek(0)
                raise self._unreadable(errors.read())
        lines = pkt_lines(answer)
        whole = _framed(answer[:-4] if answer.endswith(b"00000002") else answer)  # the helper's response-end
        if not whole or any(line.startswith("ERR ") for line in lines):
            return None  # cut short, or refused: git ls-remote asks, and says why
        return _listed(lines, patterns)

    def _unreadable(self, stderr: bytes) -> ForgeError:
        return ForgeError(f"cannot read forge {redact(self.url)}: {first_error(stderr)}",
                          hint="check the forge URL (--forge, ASSAY_FORGE, .assay.yaml) and your access")

    def close(self) -> None:
        self._drop_prefetch()
        if self._direct:
            self._direct.close()
        super().close()


def _ls_refs_request(patterns: Sequence[str]) -> bytes:
    """A protocol v2 `ls-refs` request with a `ref-prefix` for each pattern (a full ref, or one ending in `*`)."""
    prefixes = sorted({p.removesuffix("*") for p in patterns})
    return (pkt_line("command=ls-refs\n") + b"0001" + b"".join(pkt_line(f"ref-prefix {p}\n") for p in prefixes)
            + b"0000")


def _framed(answer: bytes) -> bool:
    """Whether `answer` is whole: pkt-lines up to one flush (`0000`) that ends it, nothing cut or after it."""
    at = 0
    while at + 4 <= len(answer):
        try:
            size = int(answer[at:at + 4], 16)
        except ValueError:
            return False
        if size == 0:
            return at + 4 == len(answer)
        if size < 4:
            return False
        at += size
    return False


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


def pkt_lines(data: bytes) -> list[str]:
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


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process whose answer is no longer wanted, and reap it."""
    proc.kill()
    close_quietly(proc)


def remote_has_ref(url: str, ref: str) -> bool:
    proc = run_git(["ls-remote", url, ref], check=False)
    if proc.returncode != 0:
        raise ForgeError(f"cannot read forge {redact(url)}: {first_error(proc.stderr)}")
    return bool(proc.stdout.strip())
