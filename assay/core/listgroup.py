"""The ref listings of one host's desks from one forge over HTTP, made together where the forge is slow to answer.

Desks under one supervisor hold the push group's key (`ASSAY_PUSH_GROUP_TOKEN`, see `pushgroup.py`). A desk's
listing of a forge over HTTP then goes through the folder `listings/` of the forge's cache: it writes its request
(`<id>.req`: the patterns it lists, signed with the key), holds a lock on that file while it waits, and takes the
folder's lock (`flock`, released by the kernel when its holder dies). Whoever holds the folder's lock either finds
its own request answered meanwhile (`<id>.out`) and goes, or lists for every request waited on then: one `ls-refs`
with every request's prefixes, each requester answered with the refs its own patterns name (signed), the leader's
own returned. A listing so begins after every request it answers was made, so each desk reads the forge as fresh
as it would alone.

A forge that answers briskly is listed as without a group: a request made while a listing has been on its way for
less than `QUEUE_AFTER_S` lists alone at once, since waiting behind it would only make this listing later (at 300
desks in hosts of 20 a listing seldom overlaps another of its host: the forge's listings were as many with every
request waiting as with none). Once a listing takes longer, the forge is slow: the requests made meanwhile wait
for it and go as one in the next, one listing of the host at a time, so an overloaded forge meets one listing a
host, not one a desk.

A listing the forge refuses or cannot give is answered with its error, which each requester raises as its own (its
own listing would have begun no earlier). A requester lists alone when the leader does not list this way (`direct`
said None), when the lock's holder is stopped (SIGSTOP), when no listing began within `wait_s` of its request (a
listing begun since is waited for up to `wait_s` from its start: a slow forge is not listed over), and when its
answer does not verify: requests and answers are signed with the key for one request's name and patterns, so what
an agent writing into the cache plants, or copies from another request, is never taken. Requests that do not
verify are never listed for. Nothing here writes to the forge: a leader killed mid-listing leaves its requests,
the kernel frees the lock, and the next holder lists for them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from assay.core import groupbell
from assay.core.credentials import named
from assay.core.lives import is_stopped
from assay.core.pushgroup import KEY_ENV, _done, _leader, _mac, _mtime, _read, _stamp, _waited_on, _write, requests_in
from assay.errors import ForgeError

POLL_S = 0.002  # a requester's first looks for its answer; later ones come less often (`_await`)
POLL_MAX_S = 0.25  # the longest between two looks: one wait in 20 at most, so an overloaded forge's waits are
# not polled hot (1,000 desks polling every 50 ms while listings took 4 s spent a core on it)
LOOK_S = 0.2  # how often a waiting requester checks that the leader is not stopped (at most: one with a bell
# looks when rung, or each `groupbell.RING_MAX_S`)
QUEUE_AFTER_S = 0.5  # a listing on its way this long means a slow forge: requests wait for it (ASSAY_LISTING_QUEUE_S)
PATTERN = re.compile(r"refs/[A-Za-z0-9._/+@-]{0,240}\*?")  # an exact ref, or a prefix ending in `*`

Listed = dict[str, str]  # ref -> object id
Direct = Callable[[Sequence[str]], "Listed | None"]  # list these patterns now, alone; None: not this way


def key() -> bytes | None:
    """The host's key, when this process's listings are grouped (it runs under a supervisor)."""
    held = named(KEY_ENV) or ""
    return held.encode() if len(held) >= 32 else None


def queue_after() -> float:
    """How long a listing must have been on its way for a request to wait for it rather than list alone."""
    try:
        return min(max(float(os.environ.get("ASSAY_LISTING_QUEUE_S", "").strip() or QUEUE_AFTER_S), 0.0), 60.0)
    except ValueError:
        return QUEUE_AFTER_S


def listing(folder: str, patterns: Sequence[str], direct: Direct, wait_s: float) -> Listed | None:
    """The forge's refs that `patterns` name, listed with the host's other requests waiting (see the module's
    text); as `direct` answers: None where it does not list this way, ForgeError where the forge would not."""
    secret = key()
    if secret is None or not patterns or not all(PATTERN.fullmatch(p) for p in patterns):
        return direct(patterns)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    rid = f"{os.getpid()}-{secrets.token_hex(6)}"
    req, out = os.path.join(folder, f"{rid}.req"), os.path.join(folder, f"{rid}.out")
    asked = sorted(set(patterns))
    body = {"id": rid, "patterns": asked}
    held = fd = -1
    bell: int | None = None
    led = False
    try:
        held = _write(req, {**body, "mac": _mac(secret, body)}, keep_locked=True)
        bell = groupbell.listen(folder, rid)
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        got = _await(folder, fd, rid, asked, secret, wait_s, bell)
        if isinstance(got, str):  # this process leads
            led = True
            return _lead(folder, rid, secret, asked, direct)
        _done(req, out)
        if got is None or got.get("alone"):
            return direct(patterns)
        if "error" in got:
            raise ForgeError(str(got["error"]), str(got.get("hint", "")))
        return _only(got["refs"], asked)
    finally:
        let_go(req, out, fd, held)
        groupbell.hang_up(folder, rid, bell)
        if led:  # answered, the lock let go: each waiter collects its answer, or leads the next listing
            groupbell.ring(folder)


def let_go(req: str, out: str, *opened: int) -> None:
    """A request's end, whatever happened: its files removed, its descriptors closed (the folder's lock, if held,
    goes with it; -1: never opened)."""
    with contextlib.suppress(OSError):
        _done(req, out)
    for fd in opened:
        if fd >= 0:
            os.close(fd)


def _await(folder: str, fd: int, rid: str, asked: list[str], secret: bytes,
           wait_s: float, bell: int | None = None) -> dict[str, Any] | str | None:
    """This request's answer, verified; "lead" once this process holds the folder's lock with no answer; None to
    list alone: the listing on its way is young (`queue_after`: the forge answers briskly), the lock's holder is
    stopped, `wait_s` passed since the request was made and since the last listing began (a slow forge's listing
    is waited for, not listed over), or an answer there does not verify."""
    out = os.path.join(folder, f"{rid}.out")
    began, looked = time.time(), time.monotonic()
    first = True
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.exists(out):  # answered meanwhile: nothing to lead
                fcntl.flock(fd, fcntl.LOCK_UN)
                groupbell.ring(folder)  # let go: a request waiting for the lock, woken by the last ring, leads
                return _answer(out, rid, asked, secret)
            with contextlib.suppress(OSError):  # who holds it, a hint: a waiter can see it stopped (a full disk
                os.ftruncate(fd, 0)             # leaves it out; the lock is had all the same, and led)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return "lead"
        except BlockingIOError:
            pass
        if os.path.exists(out):  # answered by the leader, who may still hold the lock
            return _answer(out, rid, asked, secret)
        now, started = time.time(), _mtime(os.path.join(folder, ".lock"))
        if first and now - started < queue_after():
            return None  # the forge answers briskly: waiting for the listing on its way would only add to this one
        first = False
        if now - max(began, started) > wait_s:
            return None
        if time.monotonic() - looked > LOOK_S:
            looked = time.monotonic()
            holder = _leader(folder)
            if holder != os.getpid() and is_stopped(holder):  # a holder that will not answer soon
                return None
        groupbell.wait(bell, min(POLL_MAX_S, max(POLL_S, (now - began) / 20)))  # woken by the leader's ring; on a
        # clock without a bell, less often as it waits


def _answer(out: str, rid: str, asked: list[str], secret: bytes) -> dict[str, Any] | None:
    """The answer in `out` if the host's key signed it for request `rid` and its patterns, else None."""
    data = _read(out)
    if data is None:
        return None
    body = {k: v for k, v in data.items() if k != "mac"}
    if body.get("id") != rid or body.get("patterns") != asked \
            or not hmac.compare_digest(str(data.get("mac", "")), _mac(secret, body)):
        return None
    if "refs" in body and not _refs(body["refs"]):
        return None
    return body


def _refs(raw: object) -> bool:
    return isinstance(raw, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items())


def _lead(folder: str, own: str, secret: bytes, asked: list[str], direct: Direct) -> Listed | None:
    """One listing for this request and every other one waited on now; each answered before the lock goes."""
    waiting = _waiting(folder, own, secret)
    _stamp(folder)  # a listing begins: its requesters wait for it however slow the forge
    union = sorted({*asked, *(p for _, theirs in waiting for p in theirs)})
    try:
        found = direct(union)
    except ForgeError as e:
        with contextlib.suppress(OSError):
            for rid, theirs in waiting:
                _reply(folder, rid, theirs, secret, {"error": e.message, "hint": e.hint})
        raise
    for rid, theirs in waiting:
        _reply(folder, rid, theirs, secret, {"alone": True} if found is None else {"refs": _only(found, theirs)})
    return None if found is None else _only(found, asked)


def _reply(folder: str, rid: str, asked: list[str], secret: bytes, said: dict[str, Any]) -> None:
    body = {**said, "id": rid, "patterns": asked}
    _write(os.path.join(folder, f"{rid}.out"), {**body, "mac": _mac(secret, body)})


def _only(refs: Listed, patterns: Sequence[str]) -> Listed:
    """The refs of `refs` that `patterns` name (exact refs, or prefixes ending in `*`): `listing._listed`'s rule,
    kept twice since `assay claim`'s short path lists refs through that module and must not import this one."""
    exact = {p for p in patterns if not p.endswith("*")}
    wild = tuple(p.removesuffix("*") for p in patterns if p.endswith("*"))
    return {ref: sha for ref, sha in refs.items() if ref in exact or (wild and ref.startswith(wild))}


def _waiting(folder: str, own: str, secret: bytes) -> list[tuple[str, list[str]]]:
    """The other requests whose requester still waits on them (it holds its request's lock), not yet answered, and
    verified; litter removed."""
    found: list[tuple[str, list[str]]] = []
    for rid, path in requests_in(folder):
        if rid == own or os.path.exists(path[:-4] + ".out"):
            continue
        if not _waited_on(path):
            with contextlib.suppress(OSError):
                os.unlink(path)  # its requester is gone
            continue
        data = _read(path) or {}
        asked = data.get("patterns")
        if not isinstance(asked, list) or not asked or not all(isinstance(p, str) and PATTERN.fullmatch(p)
                                                                for p in asked):
            continue
        if not hmac.compare_digest(str(data.get("mac", "")), _mac(secret, {"id": rid, "patterns": asked})):
            continue  # not one of this host's requests, or another's under this one's name: never listed for
        found.append((rid, asked))
    return found

