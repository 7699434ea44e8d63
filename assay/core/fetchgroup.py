"""The fetches of one host's desks from one forge over HTTP, made together: the objects several desks lack, fetched
once into the cache they share.

A host's desks read the same things at the same moments (main after it moved, a brief's claim after a sweep), and
the cache they share is the answer: a desk whose objects another fetched meanwhile fetches nothing. Desks under one
supervisor hold the push group's key (`ASSAY_PUSH_GROUP_TOKEN`, see `pushgroup.py`); a desk's fetch over HTTP then
goes through the folder `fetches/` of the forge's cache: it writes its request (`<id>.req`: the refs and object ids
it lacks, signed with the key), holds a lock on that file while it waits, and takes the folder's lock (`flock`,
released by the kernel when its holder dies). Whoever holds the folder's lock looks again at what the cache lacks of
its own request and of every other one waited on then, fetches all of that in one `git fetch`, and marks each of
those requests done (`<id>.out`, signed; with the fetch's error if it failed). A requester whose request is marked,
or that finds the cache holding what it asked for once it holds the lock, looks at the cache again: the cache is the
answer, never the mark. What is still missing there it fetches alone, unless the group's fetch, which included it,
failed for the forge's own trouble (a timeout, a refused connection, a 5xx: what it would have met alone): then that
error is its own, and a forge in trouble meets one failing fetch a host, not one a desk. An error that names one of
the objects fetched (one the forge no longer serves: git then fetches none of the others) is that object's: each
requester fetches alone.

While a fetch is on its way the leader names what it fetches (`current`, signed): a request that lacks nothing else
waits for it and fetches nothing. Otherwise a forge that answers briskly is fetched from as without a group: a
request made while a fetch has been on its way for less than `listgroup.queue_after()` fetches alone at once. Once a
fetch takes longer, the forge is slow: the requests made meanwhile wait for it and go as one in the next.

A requester fetches alone when the lock's holder is stopped (SIGSTOP) and when no fetch began within `wait_s` of its
request. Requests and marks are signed with the key for one request's name, so what an agent writing into the cache
plants is never fetched for, nor taken as an error; a planted mark only makes its requester look at the cache
sooner. Nothing here writes to the forge: a leader killed mid-fetch leaves its requests, the kernel frees the lock,
and the next holder fetches for them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import os
import re
import secrets
import time
from collections.abc import Callable

from assay.core import groupbell
from assay.core.listgroup import LOOK_S, PATTERN, POLL_MAX_S, POLL_S, key, let_go, queue_after
from assay.core.lives import is_stopped
from assay.core.pushgroup import _done, _leader, _mac, _mtime, _read, _stamp, _waited_on, _write, requests_in
from assay.errors import ForgeError

OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # as `git.refs` has it (the git port is a layer above)
CURRENT = "current"  # what the fetch on its way fetches: its object ids, signed

Wants = list[tuple[str, str]]  # (ref, object id): a tip the cache lacks, fetched by its id (by its ref if need be)
Missing = Callable[[Wants], Wants]  # those of these the cache still lacks
Direct = Callable[[Wants], None]  # fetch these now, alone; ForgeError where the forge would not


def fetch(folder: str, wants: Wants, missing: Missing, direct: Direct, wait_s: float) -> None:
    """Make the tips `wants` present in the cache, fetched with the host's other requests waiting (see the module's
    text); ForgeError where the forge would not give what is still missing: the group's fetch's error, which
    included it, or this process's own fetching alone."""
    secret = key()
    wants = sorted(set(wants))
    if secret is None or not wants or not all(PATTERN.fullmatch(r) and OBJECT_ID.fullmatch(s) for r, s in wants):
        direct(wants)
        return
    os.makedirs(folder, mode=0o700, exist_ok=True)
    rid = f"{os.getpid()}-{secrets.token_hex(6)}"
    req, out = os.path.join(folder, f"{rid}.req"), os.path.join(folder, f"{rid}.out")
    body = {"id": rid, "wants": [list(w) for w in wants]}
    held = fd = -1
    bell: int | None = None
    led = False
    failed: ForgeError | None = None  # the group's fetch, which included what this request lacked, failed so
    try:
        held = _write(req, {**body, "mac": _mac(secret, body)}, keep_locked=True)
        bell = groupbell.listen(folder, rid)
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        if _await(folder, fd, out, wants, secret, wait_s, bell):
            led = True
            failed = _lead(folder, rid, secret, wants, missing, direct)
        else:
            failed = _failed(out, rid, secret)
    finally:
        let_go(req, out, fd, held)
        groupbell.hang_up(folder, rid, bell)
        if led:  # marked, the lock let go: each waiter looks at the cache, or leads the next fetch
            groupbell.ring(folder)
    still = missing(wants)
    if still and failed is not None:
        raise failed
    if still:
        direct(still)


def _failed(out: str, rid: str, secret: bytes) -> ForgeError | None:
    """The error of the group's fetch that marked request `rid` done, if the host's key signed it for `rid`."""
    data = _read(out)
    if data is None or "error" not in data:
        return None
    body = {k: v for k, v in data.items() if k != "mac"}
    if body.get("id") != rid or not hmac.compare_digest(str(data.get("mac", "")), _mac(secret, body)):
        return None  # planted, or another request's: this process fetches alone
    return ForgeError(str(body["error"]), str(body.get("hint", "")))


def _await(folder: str, fd: int, out: str, wants: Wants, secret: bytes, wait_s: float,
           bell: int | None = None) -> bool:
    """True once this process holds the folder's lock with its request unmarked (it leads); False once it is to look
    at the cache: its request marked done, the lock's holder stopped, the fetch on its way young and not fetching what
    this request lacks (a brisk forge), or `wait_s` passed since the request and since the last fetch began."""
    began, looked = time.time(), time.monotonic()
    first = True
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.exists(out):  # fetched for meanwhile: nothing to lead
                fcntl.flock(fd, fcntl.LOCK_UN)
                groupbell.ring(folder)  # let go: a request waiting for the lock, woken by the last ring, leads
                return False
            with contextlib.suppress(OSError):  # who holds it, a hint: a waiter can see it stopped (a full disk
                os.ftruncate(fd, 0)             # leaves it out; the lock is had all the same, and led)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return True
        except BlockingIOError:
            pass
        if os.path.exists(out):
            return False
        now, started = time.time(), _mtime(os.path.join(folder, ".lock"))
        if first and now - started < queue_after() and not _covered(folder, wants, secret):
            return False  # the forge answers briskly: waiting for a fetch of other objects would only delay this one
        first = False
        if now - max(began, started) > wait_s:
            return False
        if time.monotonic() - looked > LOOK_S:
            looked = time.monotonic()
            holder = _leader(folder)
            if holder != os.getpid() and is_stopped(holder):  # a holder that will not be done soon
                return False
        groupbell.wait(bell, min(POLL_MAX_S, max(POLL_S, (now - began) / 20)))  # woken by the leader's ring; on a
        # clock without a bell, less often as it waits


def _covered(folder: str, wants: Wants, secret: bytes) -> bool:
    """Whether the fetch on its way fetches every object `wants` names (as its leader signed it)."""
    data = _read(os.path.join(folder, CURRENT)) or {}
    shas = data.get("shas")
    if not isinstance(shas, list) or not hmac.compare_digest(str(data.get("mac", "")), _mac(secret, {"shas": shas})):
        return False
    return {s for _, s in wants} <= set(shas)


def _lead(folder: str, own: str, secret: bytes, wants: Wants, missing: Missing, direct: Direct) -> ForgeError | None:
    """One fetch of what the cache lacks of this request and of every other one waited on now; each of those marked
    done before the lock goes (with the fetch's error, signed, if it failed: each lacked only what it fetched).
    Returns that error."""
    waiting = _waiting(folder, own, secret)
    lacking = missing(sorted({*wants, *(w for _, theirs in waiting for w in theirs)}))
    failed: ForgeError | None = None
    current = os.path.join(folder, CURRENT)
    try:
        if lacking:
            shas = sorted({s for _, s in lacking})
            with contextlib.suppress(OSError):  # only a hint for requests to come
                _write(current, {"shas": shas, "mac": _mac(secret, {"shas": shas})})
            _stamp(folder)  # a fetch begins: its requesters wait for it however slow the forge
            try:
                direct(lacking)
            except ForgeError as e:
                failed = None if _names_any(e, lacking) else e  # an object's own trouble: each fetches alone
    finally:
        with contextlib.suppress(OSError):
            os.unlink(current)
        for rid, _ in waiting:
            said = {"id": rid, **({"error": failed.message, "hint": failed.hint} if failed is not None else {})}
            req = os.path.join(folder, f"{rid}.req")
            with contextlib.suppress(OSError):
                if _waited_on(req):  # a requester gone meanwhile is marked no more: no answer left behind
                    _write(os.path.join(folder, f"{rid}.out"), {**said, "mac": _mac(secret, said)})
    return failed


def _names_any(error: ForgeError, wants: Wants) -> bool:
    """Whether the forge's error names one of `wants` (git's "not our ref <id>", "couldn't find remote ref <ref>"): the
    trouble of that object, which fails a fetch of it with others, not of the forge; else (a timeout, a refusal of
    the connection, the forge's 5xx) every requester would have met it alone."""
    said = f"{error.message}\n{error.hint}"
    return any(sha in said or ref in said for ref, sha in wants)


def _waiting(folder: str, own: str, secret: bytes) -> list[tuple[str, Wants]]:
    """The other requests whose requester still waits on them (it holds its request's lock), not yet marked, and
    verified; litter removed."""
    found: list[tuple[str, Wants]] = []
    for rid, path in requests_in(folder):
        if rid == own:
            continue
        if not _waited_on(path):
            with contextlib.suppress(OSError):
                _done(path, path[:-4] + ".out")  # its requester is gone
            continue
        if os.path.exists(path[:-4] + ".out"):
            continue
        data = _read(path) or {}
        raw = data.get("wants")
        if not isinstance(raw, list) or not raw or not all(_want(w) for w in raw):
            continue
        if not hmac.compare_digest(str(data.get("mac", "")), _mac(secret, {"id": rid, "wants": raw})):
            continue  # not one of this host's requests, or another's under this one's name: never fetched for
        found.append((rid, [(str(r), str(s)) for r, s in raw]))
    return found


def _want(raw: object) -> bool:
    return isinstance(raw, list) and len(raw) == 2 and isinstance(raw[0], str) and isinstance(raw[1], str) \
        and PATTERN.fullmatch(raw[0]) is not None and OBJECT_ID.fullmatch(raw[1]) is not None
