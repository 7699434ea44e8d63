"""The fetches of one host's desks from one forge over HTTP, made together: the objects several desks lack, fetched
once into the cache they share.

A host's desks read the same things at the same moments (main after it moved, a brief's claim after a sweep), and
the cache they share is the answer: a desk whose objects another fetched meanwhile fetches nothing. Desks under one
supervisor hold the push group's key (`ASSAY_PUSH_GROUP_TOKEN`, see `pushgroup.py`); a desk's fetch over HTTP then
goes through the folder `fetches/` of the forge's cache: it writes its request (`<id>.req`: the refs and object ids
it lacks, signed with the key), holds a lock on that file while it waits, and takes the folder's lock (`flock`,
released by the kernel when its holder dies). Whoever holds the folder's lock looks again at what the cache lacks of
its own request and of every other one waited on then, fetches all of that in one `git fetch`, and marks each of
those requests done (`<id>.out`). A requester whose request is marked, or that finds the cache holding what it asked
for once it holds the lock, looks at the cache again and fetches alone whatever is still missing (a fetch that
failed, an object the forge no longer serves by id): the cache is the answer, never the mark.

While a fetch is on its way the leader names what it fetches (`current`, signed): a request that lacks nothing else
waits for it and fetches nothing. Otherwise a forge that answers briskly is fetched from as without a group: a
request made while a fetch has been on its way for less than `listgroup.queue_after()` fetches alone at once. Once a
fetch takes longer, the forge is slow: the requests made meanwhile wait for it and go as one in the next.

A requester fetches alone when the lock's holder is stopped (SIGSTOP) and when no fetch began within `wait_s` of its
request. Requests are signed with the key, so what an agent writing into the cache plants is never fetched for; a
planted mark only makes its requester look at the cache sooner. Nothing here writes to the forge: a leader killed
mid-fetch leaves its requests, the kernel frees the lock, and the next holder fetches for them.
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

from assay.core.listgroup import LOOK_S, PATTERN, POLL_MAX_S, POLL_S, key, queue_after
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
    text); ForgeError where the forge would not give what is still missing when this process fetches alone."""
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
    try:
        held = _write(req, {**body, "mac": _mac(secret, body)}, keep_locked=True)
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        if _await(folder, fd, out, wants, secret, wait_s):
            _lead(folder, rid, secret, wants, missing, direct)
    finally:
        with contextlib.suppress(OSError):
            _done(req, out)
        for opened in (fd, held):  # the folder's lock, if held, goes with it
            if opened >= 0:
                os.close(opened)
    still = missing(wants)
    if still:
        direct(still)


def _await(folder: str, fd: int, out: str, wants: Wants, secret: bytes, wait_s: float) -> bool:
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
                return False
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # who holds it: a waiter can see it stopped
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
        time.sleep(min(POLL_MAX_S, max(POLL_S, (now - began) / 20)))  # a fetch a while coming: look less often


def _covered(folder: str, wants: Wants, secret: bytes) -> bool:
    """Whether the fetch on its way fetches every object `wants` names (as its leader signed it)."""
    data = _read(os.path.join(folder, CURRENT)) or {}
    shas = data.get("shas")
    if not isinstance(shas, list) or not hmac.compare_digest(str(data.get("mac", "")), _mac(secret, {"shas": shas})):
        return False
    return {s for _, s in wants} <= set(shas)


def _lead(folder: str, own: str, secret: bytes, wants: Wants, missing: Missing, direct: Direct) -> None:
    """One fetch of what the cache lacks of this request and of every other one waited on now; each marked done
    before the lock goes, whatever the fetch did (its requester looks at the cache)."""
    waiting = _waiting(folder, own, secret)
    lacking = missing(sorted({*wants, *(w for _, theirs in waiting for w in theirs)}))
    try:
        if lacking:
            shas = sorted({s for _, s in lacking})
            _write(os.path.join(folder, CURRENT), {"shas": shas, "mac": _mac(secret, {"shas": shas})})
            _stamp(folder)  # a fetch begins: its requesters wait for it however slow the forge
            with contextlib.suppress(ForgeError):  # each requester fetches alone what is still missing: its own error
                direct(lacking)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, CURRENT))
        for rid, _ in waiting:
            with contextlib.suppress(OSError):
                _write(os.path.join(folder, f"{rid}.out"), {"id": rid})


def _waiting(folder: str, own: str, secret: bytes) -> list[tuple[str, Wants]]:
    """The other requests whose requester still waits on them (it holds its request's lock), not yet marked, and
    verified; litter removed."""
    found: list[tuple[str, Wants]] = []
    for rid, path in requests_in(folder):
        if rid == own or os.path.exists(path[:-4] + ".out"):
            continue
        if not _waited_on(path):
            with contextlib.suppress(OSError):
                os.unlink(path)  # its requester is gone
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
