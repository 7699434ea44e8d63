"""The pushes of one host's desks to one forge, made together (group commit).

`assay desk run --count N` gives its desks a push window (`ASSAY_PUSH_WINDOW_S`) and a key of its own
(`ASSAY_PUSH_GROUP_TOKEN`, a credential: no agent is handed it). A desk's push then goes through the folder
`pushes/` of the forge's cache, which the desks share (their commits are already in its object store): it writes
its request (`<id>.req`: its ref updates, whether atomic, signed with the key), holds a lock on that file while it
waits, and takes the folder's lock (`flock`, released by the kernel when its holder dies). Whoever has the folder's
lock answers:

- if its own request was answered meanwhile (`<id>.out`), it reads the answer and goes;
- else it leads a round: it waits until the first deadline of the waiting requests (looking again as each new one
  wakes it through the folder's FIFO `.wake`, not on a clock; each waits at most the window from when it was made,
  0 s: only requests made while the last round pushed share this one; a push that nobody waits on, made
  `unhurried()`, waits up to twice the host's recent gap between rounds, at most `LAZY_S`, and goes with the first
  push that must go), reads the forge's tips of every ref the waiting requests name, and pushes the
  requests whose leases match (at most one per ref, a later one waits for the next round) as one atomic push. A
  request alone in its round is answered "alone" and pushes itself. A request whose lease the forge no longer
  matches is answered with those tips, from which its requester settles what its own push would meet (`Refuse`:
  as a push settles an outcome); it is never pushed. A round the forge refuses because refs moved after that
  reading (the push, settled by reading them again, calls them stale) answers the requests naming them with
  their tips read once more (they settle so too: a request a killed leader pushed finds its own commit there),
  and pushes the rest again as one round, `MAX_ROUNDS` pushes at most. Each requester in a round that landed is
  answered with its outcome; every other one (the round refused for another reason, not heard, or out of
  pushes) is answered "alone", and pushes itself, as it would without a group.

So 20 desks of a host, each pushing when it must, make one push a round instead of 20, and each claim stays fenced
on its own: a lease the forge no longer matches is never part of a round, and one stale request costs the others
one more round, not a push each. Nothing is lost or made twice: a leader killed mid-round leaves the
requests, and the next leader takes those whose requester still waits (it holds the lock on its request); the
lease lets a request that landed before land no more. A requester withdraws its request before it goes alone,
when the leader holding the folder's lock is stopped (SIGSTOP), or after `window + LOCK_WAIT_S` unless the round
on its way took a step (began, read, pushed: `_stamp`) within `ROUND_WAIT_S`, and at the latest `ROUND_WAIT_S`
after that: a forge slow to take a round gets one push of the host at a time, not every requester's on top of it
(each sleeps until a leader rings it: `groupbell`). Requests that do not verify with the key
(another token's desks, an agent writing into the cache) or name a ref or id that is not one are ignored, and so
is an answer that is not one (its requester goes alone).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import select
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from assay.core import groupbell
from assay.core.crash import crash_point
from assay.core.credentials import named
from assay.core.lives import is_stopped
from assay.errors import WRITTEN_ALONE, ForgeError

KEY_ENV = "ASSAY_PUSH_GROUP_TOKEN"
LAZY_S = 10.0  # the longest an unhurried push waits for one that must go (ASSAY_PUSH_LAZY_S)
ROUNDS_KEPT = 9  # the host's last rounds whose gaps tell an unhurried push how long to wait
LOCK_WAIT_S = 10.0  # beyond the window, the longest a requester waits for the folder's lock before it goes alone
ROUND_WAIT_S = 180.0  # ... unless the round took a step this recently (git's timeout, 120 s, bounds each step)
POLL_S = 0.01  # a requester's first looks for its answer; later ones come less often (`_await`)
POLL_MAX_S = 0.25  # the longest between two looks: one wait in 20 at most, so a slow forge is not polled hot
WAKE = ".wake"  # a FIFO in the folder: each new request wakes the round gathering (`_gather`), which else sleeps
WAKE_MAX_S = 1.0  # ... at most this long between two looks at the folder (a request that could not wake it)
STALE_S = 600.0  # answers, requests and partial files older than this are litter
ZERO = "0" * 40
_REF = re.compile(r"refs/(?!.*(?:\.\.|//|@\{|\.lock(?:/|$)))[A-Za-z0-9._/+-]{1,240}")
_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")

Update = tuple[str, str, str]  # ref, new, expected
Results = dict[str, tuple[str, str]]  # ref -> (status, detail)
Direct = Callable[[Sequence[Update], bool], Results]  # push these updates now, alone
Read = Callable[[Sequence[str]], dict[str, str]]  # the forge's tips of these refs now (absent: no such ref)
Request = tuple[str, list[Update]]  # id, updates
Refuse = Callable[[Sequence[Update], bool, dict[str, str]], Results]  # what pushing these updates meets at these tips
MAX_ROUNDS = 3  # pushes a leader makes of one round's requests, each without the requests a refusal named


def window() -> float | None:
    """The host's push window in seconds, or None when this process's pushes are not grouped."""
    raw = os.environ.get("ASSAY_PUSH_WINDOW_S", "").strip()
    if not raw or len(named(KEY_ENV) or "") < 32:  # a credential: a desk holds it out of its environment
        return None
    try:
        return max(0.0, min(float(raw), 60.0))
    except ValueError:
        return None


def new_key() -> str:
    return secrets.token_hex(32)


_calm = threading.local()


@contextlib.contextmanager
def unhurried() -> Iterator[None]:
    """This thread's grouped pushes in this block are ones nobody waits on (a run's last entries and its wait, a
    merged brief settled): each waits for a push of the host that must go (`unhurried_wait`), and goes with it."""
    before = getattr(_calm, "on", False)
    _calm.on = True
    try:
        yield
    finally:
        _calm.on = before


def _patience(folder: str, window_s: float) -> float:
    """How long this thread's push may wait for others: the window; when it is unhurried, up to twice the host's
    recent gap between rounds (at most `LAZY_S`), or the window alone if the host made no round lately."""
    if not getattr(_calm, "on", False):
        return window_s
    try:
        lazy = min(max(float(os.environ.get("ASSAY_PUSH_LAZY_S", "").strip() or LAZY_S), 0.0), 60.0)
    except ValueError:
        lazy = LAZY_S
    return unhurried_wait(_rounds(folder), time.time(), window_s, lazy)


def unhurried_wait(rounds: Sequence[float], now: float, window_s: float, lazy_s: float) -> float:
    """An unhurried push's wait, from when the host's last rounds pushed (oldest first): up to twice their median
    gap, at most `lazy_s`; the window alone on a quiet host (no round within `lazy_s`: no push is coming)."""
    if not rounds or now - rounds[-1] > lazy_s:
        return window_s
    gaps = sorted(b - a for a, b in zip(rounds, rounds[1:], strict=False))
    return max(window_s, min(lazy_s, 2 * gaps[len(gaps) // 2])) if gaps else window_s


def _rounds(folder: str) -> list[float]:
    """When the host's last rounds pushed (`ROUNDS_KEPT`, oldest first). Any writer of the cache can write the
    file: what is not a time is left out (it can only make an unhurried push wait less, or at most `LAZY_S`)."""
    raw = (_read(os.path.join(folder, ".rounds")) or {}).get("at")
    return sorted(t for t in map(_time, raw if isinstance(raw, list) else []) if t is not None)[-ROUNDS_KEPT:]


def _time(value: object) -> float | None:
    """`value` as a time in seconds, if it is a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def push(folder: str, updates: Sequence[Update], atomic: bool, direct: Direct, read: Read, refuse: Refuse,
         window_s: float) -> Results:
    """Push `updates` with the host's other desks' requests to the same forge (see the module's text); each ref's
    (status, detail) as `direct` would say it. Raises ForgeError as `direct` does when the outcome is unknown."""
    key = (named(KEY_ENV) or "").encode()
    if not updates or not all(_valid(u) for u in updates):
        return direct(updates, atomic)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    wait_s = _patience(folder, window_s)
    rid = f"{os.getpid()}-{secrets.token_hex(6)}"
    req, out = os.path.join(folder, f"{rid}.req"), os.path.join(folder, f"{rid}.out")
    made = time.time()
    body = {"updates": [list(u) for u in updates], "atomic": atomic, "at": made, "wait": wait_s}
    held = _write(req, {**body, "mac": _mac(key, body)}, keep_locked=True)
    _wake(folder)  # a round gathering now looks again: this request's deadline may be the first
    fd = -1
    bell: int | None = None
    held_lock = False
    try:
        bell = groupbell.listen(folder, rid)
        fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        held_lock, got = _await(folder, fd, out, wait_s, bell)
        if got is None:  # the leader is stopped, or never let go: withdrawn, then alone
            return _alone(req, out, updates, atomic, direct)
        if isinstance(got, str):  # this process leads the round
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # who leads: a waiter can see it stopped
            if wait_s:
                _gather(folder, made + wait_s)  # others' requests gather until the first must go
            _lead(folder, rid, key, read, direct)
            got = _read(out) or {}
        answer = got
        if answer.get("alone"):
            return _alone(req, out, updates, atomic, direct)
        _done(req, out)
        if "moved" in answer:  # its lease did not match the forge's tips the leader read: refused, not pushed
            tips = _tips(answer["moved"], updates)
            return refuse(updates, atomic, tips) if tips is not None else direct(updates, atomic)
        results = answer.get("results")
        if not isinstance(results, dict):
            raise ForgeError("a grouped push left no readable outcome", hint="run the command again: it re-reads "
                             "the forge")
        return {str(ref): (str(r[0]), str(r[1])) for ref, r in results.items()}
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(held)
        groupbell.hang_up(folder, rid, bell)
        if held_lock:  # the lock let go: the requests left wake to lead the next round
            groupbell.ring(folder)


def _gather(folder: str, due: float) -> None:
    """Wait until `due` (this request's deadline) or the earliest deadline of another request waiting meanwhile,
    whichever comes first: a push that must go now is held no longer than its own window. Any request counts,
    signed by this group or not (another supervisor's desks share the folder's lock): one that is not is never
    pushed, and can only end the wait early. A request already answered, or whose requester is gone, is waiting
    no more: the last round's, whose requesters have not yet collected their answers, would otherwise end this wait
    at once (their deadlines are past), and each request made while a round pushed would go in a round of its own
    right after it. The folder is looked at again when a request is made (it wakes this wait: `_wake`), at least
    each `WAKE_MAX_S`, and no more often than each `2 * POLL_S` (wakes as fast as anyone writes them cost no
    more than looking that often: the clock this wait kept before it had a FIFO, and keeps where it has none)."""
    deadlines: dict[str, float] = {}
    pipe = _wake_pipe(folder)
    poller = select.poll()
    if pipe is not None:
        poller.register(pipe, select.POLLIN)
    try:
        while True:
            if pipe is not None:
                _drain(pipe)  # before the look: a request made after it wakes the wait below
            looked = time.monotonic()
            names = os.listdir(folder)
            answered = {name[:-4] for name in names if name.endswith(".out")}
            waiting = [name for name in names if name.endswith(".req") and name[:-4] not in answered]
            for name in waiting:
                if name not in deadlines:
                    path = os.path.join(folder, name)
                    deadlines[name] = _deadline(_read(path)) if _waited_on(path) else math.inf
            left = min([due, *(deadlines[name] for name in waiting)]) - time.time()
            if left <= 0:
                return
            if pipe is None or poller.poll(min(left, WAKE_MAX_S) * 1000):  # the clock without a FIFO; after a
                time.sleep(max(0.0, min(left, looked + POLL_S * 2 - time.monotonic())))  # wake, no faster than it
    finally:
        if pipe is not None:
            os.close(pipe)


def _wake_pipe(folder: str) -> int | None:
    """The folder's FIFO, made if it is not there, open to read (and to write: a reader alone sees its end each time
    a writer closes, and would wake at once ever after), or None when it cannot be had or something else is there
    (any writer of the cache can plant one: then the folder is looked at on a clock, as without)."""
    path = os.path.join(folder, WAKE)
    with contextlib.suppress(FileExistsError, OSError):
        os.mkfifo(path, 0o600)
    return groupbell.open_fifo(path)


def _drain(pipe: int) -> None:
    """Read what wakes are waiting, once (a writer keeping the pipe full wakes the next wait at once, no more)."""
    with contextlib.suppress(OSError):
        os.read(pipe, 65536)


def _wake(folder: str) -> None:
    """Wake the round gathering in `folder`, if one is (a byte into its FIFO). No FIFO, no reader, a full pipe or
    something else planted there: nothing to do (the gathering looks again within `WAKE_MAX_S`)."""
    try:
        fd = os.open(os.path.join(folder, WAKE), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:  # none made yet, nobody reading (ENXIO), a link
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b".")
    except OSError:
        pass
    finally:
        os.close(fd)


def _deadline(data: dict[str, Any] | None) -> float:
    """When a request must be pushed (made + its wait, at most 60 s), or never for one that says neither."""
    at, wait = _time((data or {}).get("at")), _time((data or {}).get("wait", 0))
    if at is None or wait is None:
        return math.inf
    return at + min(max(wait, 0.0), 60.0)


def _body(data: dict[str, Any]) -> dict[str, Any]:
    """What a request's key signs."""
    return {k: data.get(k) for k in ("updates", "atomic", "at", "wait") if k in data}


def _await(folder: str, fd: int, out: str, wait_s: float,
           bell: int | None = None) -> tuple[bool, dict[str, Any] | str | None]:
    """Whether this process now holds the folder's lock, and this request's answer; "lead" once it holds the lock
    with no answer; None to go alone. Between looks it sleeps until a leader rings its `bell` (`groupbell`), or on
    a clock where it has none."""
    began = time.monotonic()
    deadline, latest = began + wait_s + LOCK_WAIT_S, began + wait_s + LOCK_WAIT_S + ROUND_WAIT_S
    looked = 0.0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True, _read(out) or "lead"
        except BlockingIOError:
            pass
        if os.path.exists(out):  # answered by the leader, who still holds the lock for the others
            return False, _read(out) or None  # junk there (any writer of the cache): alone, never a second leader
        now = time.monotonic()
        if now >= latest or (now >= deadline and not _round_young(folder)):
            return False, None
        if now - looked > 0.2:
            looked = now
            leader = _leader(folder)
            if leader != os.getpid() and is_stopped(leader):  # a leader that will not answer soon
                return False, None
        groupbell.wait(bell, min(POLL_MAX_S, max(POLL_S, (now - began) / 20)))  # woken by a ring; on a clock
        # without a bell, less often as it waits


def _round_young(folder: str) -> bool:
    """Whether the round leading now took its last step (began, read the forge, pushed) within `ROUND_WAIT_S`
    (`_stamp`): a slow forge's round, which its requesters wait for rather than each pushing alone on top of it."""
    return 0 <= time.time() - _mtime(os.path.join(folder, ".lock")) < ROUND_WAIT_S


def _stamp(folder: str) -> None:
    """Mark the round leading now as making progress (the folder lock's time)."""
    with contextlib.suppress(OSError):
        os.utime(os.path.join(folder, ".lock"))


def _alone(req: str, out: str, updates: Sequence[Update], atomic: bool, direct: Direct) -> Results:
    _done(req, out)
    return direct(updates, atomic)


def _done(req: str, out: str) -> None:
    """The request first, then its answer: no leader after this one finds it unanswered and pushes it again."""
    for path in (req, out):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _lead(folder: str, own: str, key: bytes, read: Read, direct: Direct) -> None:
    """One round: the requests still waited on (this one first, then by age), one per ref; those whose leases the
    forge matches now pushed as one (`_rounds_of`), the others answered with the tips that refuse them; every
    request answered."""
    waiting = _waiting(folder, own, key)
    taken: list[Request] = []
    refs: set[str] = set()
    for request in waiting:
        if refs & {u[0] for u in request[1]}:
            continue  # one update per ref a push: this request goes in the next round
        refs |= {u[0] for u in request[1]}
        taken.append(request)
    answers: dict[str, dict[str, Any]] = {}
    _stamp(folder)
    try:  # a lease the forge no longer matches (a claim race lost, a push a dead leader made): not in the round
        now_at: dict[str, str] | None = read(sorted(refs)) if len(taken) > 1 else None
    except ForgeError:
        now_at = None
    if now_at is not None:  # its requester settles what its push would meet from these tips (it may fetch)
        answers = {rid: {"moved": {u[0]: now_at.get(u[0], ZERO) for u in updates}} for rid, updates in taken
                   if not _matches(updates, now_at)}
    crash_point("push-group.before-push")
    if now_at is not None:
        answers |= _rounds_of(folder, [t for t in taken if t[0] not in answers], direct, read)
    crash_point("push-group.after-push")
    for rid, _ in taken:
        _write(os.path.join(folder, f"{rid}.out"), answers.get(rid) or {"alone": True})
    groupbell.ring(folder)  # answered: each collects its answer now (this leader's own push may take a while yet)
    with contextlib.suppress(OSError):  # the answers are written: a round no file can record still happened
        _write(os.path.join(folder, ".rounds"), {"at": [*_rounds(folder), time.time()][-ROUNDS_KEPT:]})


def _matches(updates: Sequence[Update], tips: dict[str, str]) -> bool:
    return all(tips.get(ref, ZERO) == expected for ref, _, expected in updates)


def _tips(raw: object, updates: Sequence[Update]) -> dict[str, str] | None:
    """The forge's tips of `updates`' refs as a "moved" answer gives them, or None if that is not what it holds."""
    if not isinstance(raw, dict) or set(raw) != {u[0] for u in updates} \
            or not all(isinstance(sha, str) and _ID.fullmatch(sha) for sha in raw.values()):
        return None
    return {str(ref): str(sha) for ref, sha in raw.items()}


def _rounds_of(folder: str, fits: list[Request], direct: Direct, read: Read) -> dict[str, dict[str, Any]]:
    """Push `fits` as one atomic round; while the forge refuses it only because refs moved since they were read
    (settled "stale" when read again after it), answer the requests naming a moved ref with the forge's tips of
    their refs read now (each settles its refusal, or finds its own commit landed) and push the rest again
    (`MAX_ROUNDS` pushes in all). The answers of the requests settled; the rest go alone."""
    answers: dict[str, dict[str, Any]] = {}
    for _ in range(MAX_ROUNDS):
        if len(fits) < 2:
            break
        _stamp(folder)
        try:
            landed = direct([u for _, updates in fits for u in updates], True)
        except ForgeError:
            break
        if all(status == "ok" for status, _ in landed.values()):
            answers |= {rid: {"results": {u[0]: landed[u[0]] for u in updates}} for rid, updates in fits}
            break
        if any(detail == WRITTEN_ALONE for _, detail in landed.values()):  # the forge wrote part of the round:
            answers |= {rid: {"results": {u[0]: landed[u[0]] for u in updates}} for rid, updates in fits
                        if any(landed[u[0]][0] != "rejected" for u in updates)}  # as it stands; the rest alone
            break
        moved = {ref for ref, (status, _) in landed.items() if status == "stale"}
        if not moved or any(status == "ok" for status, _ in landed.values()):
            break  # refused for another reason (a hook, a lock): each request alone says what it meets
        named = [(rid, updates) for rid, updates in fits if moved & {u[0] for u in updates}]
        try:
            tips = read(sorted({u[0] for _, updates in named for u in updates}))
        except ForgeError:
            break
        answers |= {rid: {"moved": {u[0]: tips.get(u[0], ZERO) for u in updates}} for rid, updates in named}
        fits = [t for t in fits if t[0] not in answers]
    return answers


def _waiting(folder: str, own: str, key: bytes) -> list[Request]:
    """The requests whose requester still waits on them (it holds its request's lock), verified, oldest first after
    this process's own; litter removed."""
    found: list[tuple[float, str, list[Update]]] = []
    now = time.time()
    for rid, path in requests_in(folder):
        if rid != own and not _waited_on(path):  # locked from before it could be seen: its requester is gone or
            with contextlib.suppress(OSError):   # went alone
                os.unlink(path)
            continue
        if os.path.exists(path[:-4] + ".out"):
            continue  # answered: its requester collects it
        data = _read(path)
        if data is None:
            continue
        body = _body(data)
        raw = data.get("updates")
        updates = [tuple(map(str, u)) for u in raw if isinstance(u, list) and len(u) == 3] \
            if isinstance(raw, list) else []
        if not updates or len(updates) != len(raw or []) or not hmac.compare_digest(str(data.get("mac", "")),
                                                                                    _mac(key, body)) \
                or not all(_valid(u) for u in updates):
            continue  # not one of this group's requests: ignored, never pushed
        at = data.get("at")
        found.append((float(at) if isinstance(at, (int, float)) else now, rid, updates))  # type: ignore[arg-type]
    found.sort(key=lambda f: (f[1] != own, f[0]))
    return [(rid, updates) for _, rid, updates in found]


def requests_in(folder: str) -> Iterator[tuple[str, str]]:
    """Each request in a host's folder (its id, its path); litter removed on the way: answers and partial files
    older than `STALE_S` (their requesters are gone, or their writers were killed), and bells whose requests are
    gone (`groupbell`: a requester killed as it waited, whose request a leader removed)."""
    now = time.time()
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith(".req"):
            yield name[:-4], path
        elif name.endswith(groupbell.BELL) and not name.startswith("."):  # a waiter's: litter once its request goes
            if not os.path.exists(path[:-len(groupbell.BELL)] + ".req"):  # (made after it, removed before it)
                with contextlib.suppress(OSError):
                    os.unlink(path)
        elif name not in (".lock", WAKE) and now - _mtime(path) > STALE_S:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _valid(u: Sequence[str]) -> bool:
    ref, new, expected = u
    return bool(_REF.fullmatch(ref) and _ID.fullmatch(new) and _ID.fullmatch(expected))


def _mac(key: bytes, body: dict[str, Any]) -> str:
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _waited_on(path: str) -> bool:
    """Whether a requester holds the lock on its request (it waits still)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _leader(folder: str) -> int:
    try:
        with open(os.path.join(folder, ".lock"), encoding="ascii") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _write(path: str, data: dict[str, Any], keep_locked: bool = False) -> int:
    """Write `data` whole under `path` (readable by this user only); with `keep_locked`, the open file, locked, so
    a leader can tell its writer still waits; else -1."""
    partial = f"{path}.{os.getpid()}.tmp"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(data).encode())
        if keep_locked:
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(partial, path)
    except BaseException:
        os.close(fd)
        raise
    if keep_locked:
        return fd
    os.close(fd)
    return -1


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError):  # junk any writer of the cache may leave
        return None
    return data if isinstance(data, dict) else None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()
