"""The compare-and-swap push: `--force-with-lease`, never a `+` refspec; an outcome not heard is settled by
re-reading the refs. A forge on disk takes an atomic or one-ref push as its own ref transaction, a forge over HTTP
as one post to its receive-pack from this process; any other goes through `git push`."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence

from assay.core.credentials import redact
from assay.core.git.gitenv import git_timeout
from assay.core.git.listing import held, saw_heads
from assay.core.git.locks import clear_stale_lock, lock_named
from assay.core.git.ondisk import DiskPush
from assay.core.git.refs import ZERO, PushResult, RefUpdate, parse_porcelain, pkt_line
from assay.core.git.run import first_error, local_forge_path, note, remote_error
from assay.core.git.vetting import forge_vetting
from assay.errors import WRITTEN_ALONE, ForgeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Literal

    from assay.core.git.smarthttp import SmartHTTP

PUSH_TRIES = 6  # pushes of one update while racing writers hold ref locks
PACK_GUARD = 1000  # objects a push over HTTP creating a ref sends itself; past it, `git push` packs (see `_push_http`)
_NOT_TAKEN = frozenset({301, 302, 303, 307, 308, 401, 403, 404, 407})  # answers given before receive-pack ran
_CONTENTION = ("failed to update ref", "cannot lock ref", "failed to lock", "unable to create", "atomic")


class Pushing(DiskPush):
    """CAS-writes refs of the forge."""

    lock_notes: Callable[[str], None] | None = None  # who is told of a stale ref lock removed (None: stderr)

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

                def refuse(group: Sequence[tuple[str, str, str]], whole: bool,
                           tips: dict[str, str]) -> dict[str, tuple[str, str]]:
                    return {ref: (r.status, r.detail) for ref, r in self.refused([RefUpdate(*u) for u in group],
                                                                                 whole, tips).items()}

                said = pushgroup.push(os.path.join(self.cache, "pushes"),
                                      [(u.ref, u.new, u.expected) for u in updates], atomic, direct,
                                      lambda refs: self.ls_remote(*refs), refuse, wait_s)
                return {u.ref: PushResult(u.ref, *said[u.ref]) for u in updates}  # type: ignore[arg-type]
        return self._push_direct(updates, atomic)

    def refused(self, updates: Sequence[RefUpdate], atomic: bool, tips: dict[str, str]) -> dict[str, PushResult]:
        """What pushing `updates` meets where the forge's refs are at `tips` and some lease does not match: each
        ref settled as a push's outcome is (`_settle`: landed, built upon, moved, or not written), nothing pushed."""
        settled = {u.ref: self._settle(u, tips.get(u.ref, ZERO), None) for u in updates}
        return _atomic_outcome(updates, settled) if atomic else settled

    def _push_direct(self, updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult]:
        """`push`, made by this process alone."""
        self._drop_prefetch()
        doubt = False  # a try's outcome was not heard: a lease found stale since may be that try's landing
        for attempt in range(PUSH_TRIES):
            if attempt:  # racing writers hold ref locks for a moment: back off a random while
                import random

                time.sleep(random.uniform(0, 0.05 * 2 ** attempt))
            heard = self._push_once(updates, atomic)
            if heard is not None and all(r.status != "rejected" for r in heard.values()) and \
                    not (doubt and any(r.status == "stale" for r in heard.values())):
                return heard
            doubt = doubt or heard is None
            tips = self._reread(updates)
            settled = {u.ref: self._settle(u, tips.get(u.ref, ZERO), heard) for u in updates}
            if heard is not None and any(r.detail == WRITTEN_ALONE for r in heard.values()):
                settled |= {ref: r for ref, r in heard.items() if r.detail == WRITTEN_ALONE and settled[ref].ok}
            elif atomic:  # the forge wrote all of it or nothing
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
                (self.lock_notes or note)(f"removed the stale ref lock {lock} from the forge ({age / 60:.0f} "
                                           "minutes old: the push that left it was killed mid-way)")
        return removed

    def _push_once(self, updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult] | None:
        folder = local_forge_path(self.url)
        if (atomic or len(updates) == 1) and folder is not None \
                and not (vetting := forge_vetting(folder, self.cache)).vets \
                and (self._send_loose(folder, updates, vetting.sync_loose) or self._send_objects(folder, updates)):
            return self._transact(folder, updates)
        if folder is None and (atomic or len(updates) == 1):
            posted = self._push_http(updates)
            if posted is not False:
                return posted
        return self._push_git(updates, atomic)

    def _push_git(self, updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult] | None:
        """The push through `git push --porcelain`; None when its outcome was not heard."""
        args = ["push", "--porcelain", "--no-verify"]
        if atomic:
            args.append("--atomic")
        args += [f"--force-with-lease={u.ref}:{u.expected}" for u in updates]
        args.append(self.remote)
        # never a "+" refspec: it would override the lease; a new id of ZERO deletes the ref
        args += [f"{'' if u.new == ZERO else u.new}:{u.ref}" for u in updates]
        try:  # git matches each ref of a push against every ref the forge advertises: big pushes take longer
            proc = self._git(*args, check=False, timeout=git_timeout() + 0.1 * len(updates))
        except ForgeError as exc:
            self._last_push_error = exc.message
            return None  # timed out: outcome unknown
        self._last_push_error = first_error(proc.stderr) if proc.returncode else ""
        results = parse_porcelain(proc.stdout.decode("utf-8", "replace"))
        if not all(u.ref in results for u in updates):
            return None
        cause = remote_error(proc.stderr)  # git's own reason ("cannot lock ref …"), not just "remote rejected"
        return {u.ref: results[u.ref]._replace(detail=cause) if cause and results[u.ref].status == "rejected"
                else results[u.ref] for u in updates}

    def _push_http(self, updates: Sequence[RefUpdate]) -> dict[str, PushResult] | None | Literal[False]:
        """An atomic or one-ref push to a forge over HTTP as one POST to its `git-receive-pack` (smart HTTP) from
        this process, on the connection its listings keep (`smarthttp.py`): the commands, each under its lease (the
        command's old id, as `git push --force-with-lease` sends it: the forge writes a ref only from there), and
        one pack of what the leases' commits and main's tips seen on the forge (`heads_seen`) do not reach.

        `git push` reads the forge's advertisement of every ref first, and walks every advertised tip it holds to
        leave out what the forge has: at 5,900 refs, 50 ms of CPU here and a second request at the forge, which
        lists them all for it. This reads the forge's capabilities once every `CAPS_KEEP_S`. A push that deletes
        a ref reads the advertisement and checks the leases against it first, as `git push` does: the forge
        deletes a ref whose expected id it lacks without checking it.

        False when nothing was written and `git push` should do it: git would not send it this way; the forge
        is not plain smart HTTP to this client, or refused the request before reading it (a login, a redirect);
        or it lacked objects the pack left out, for every ref (where it lacked them for some, it wrote the others:
        `_reported`). None when the outcome was not heard."""
        from assay.core.git.smarthttp import RECEIVE

        direct = self._smart_http()
        if direct is None or not direct.usable(RECEIVE) or any(u.new == ZERO == u.expected for u in updates):
            return False
        advertised: dict[str, str] | None = None
        if any(u.new == ZERO for u in updates):
            advertised, caps = _advertised(direct)
        else:
            caps = _receive_caps(self.remote, direct)
        if not _usable(caps):
            return False
        stale = {u.ref for u in updates if advertised is not None and advertised.get(u.ref, ZERO) != u.expected}
        if stale:  # as `git push --force-with-lease --porcelain` reports it
            return {u.ref: PushResult(u.ref, "stale", "stale info") if u.ref in stale
                    else PushResult(u.ref, "rejected", "atomic push failed") for u in updates}
        body = self._receive_pack_request(updates, caps)
        if body is None:
            return False
        self.round_trips["push"] += 1
        try:
            reply = direct.request(RECEIVE, body, more_s=0.01 * len(updates))
        except ForgeError as exc:  # timed out, or the forge went silent
            self._last_push_error = exc.message
            return None
        if reply.data is None:
            if not reply.sent or reply.status in _NOT_TAKEN:  # not taken (a login, a redirect): git push says why
                return False
            self._last_push_error = f"the forge answered HTTP {reply.status}" if reply.status else \
                "the forge's answer was lost"
            return None
        return self._reported(reply.data, "side-band-64k" in caps, updates)

    def _receive_pack_request(self, updates: Sequence[RefUpdate], caps: frozenset[str]) -> bytes | None:
        """What `_push_http` posts: the commands (the first asking for the capabilities it needs), then one pack
        (`pack-objects --revs`) leaving out what the expected tips and main's tips seen on the forge reach; None
        if the pack could not be made, or a push creating a ref would send more than `PACK_GUARD` objects (main
        not seen: `git push` finds what the forge has)."""
        from assay.core.git.listing import heads_seen

        asked = ["report-status", *(["atomic"] if len(updates) > 1 else []),
                 *(c for c in ("side-band-64k", "quiet", "ofs-delta") if c in caps)]
        body = b"".join(pkt_line(f"{u.expected} {u.new} {u.ref}" + ("\0" + " ".join(asked) if i == 0 else "") + "\n")
                        for i, u in enumerate(updates)) + b"0000"
        news = [u.new for u in updates if u.new != ZERO]
        if not news:
            return body
        # where the forge lacks what these reach (main rewritten and its old commits removed since it was seen), it
        # refuses a push of one ref, and writes the rest of an atomic push of more: `_reported` finishes or undoes it
        known = list(dict.fromkeys([*(u.expected for u in updates if u.expected != ZERO), *heads_seen(self.remote)]))
        lacking = {sha for _, sha in self._lacking([(sha, sha) for sha in known])}
        present = [sha for sha in known if sha not in lacking]
        wanted = "".join([*(f"{sha}\n" for sha in news), *(f"^{sha}\n" for sha in present)])
        try:
            pack = self._git("pack-objects", "--revs", "--stdout", "-q", input=wanted.encode()).stdout
        except ForgeError:
            return None
        creates = any(u.expected == ZERO and u.new != ZERO for u in updates)
        if creates and int.from_bytes(pack[8:12], "big") > PACK_GUARD:
            return None
        return body + pack

    def _reported(self, data: bytes, banded: bool,
                  updates: Sequence[RefUpdate]) -> dict[str, PushResult] | None | Literal[False]:
        """Each update's outcome from receive-pack's answer (on side band 1 where `banded`: `unpack ok`, then `ok
        <ref>` or `ng <ref> <why>` a line; a refusal's reason the forge's first `error:` on band 2); None when
        it is not whole: the outcome was not heard.

        The forge checks each new tip's objects alone, and an atomic push writes the refs that passed: where it
        lacked objects the pack left out (an expected commit it no longer holds), it wrote the other refs. Those
        are reported `WRITTEN_ALONE` (`_push_direct` and the host's push group then say the push as the forge left
        it, not as atomic), and the rest are pushed at once, alone, under their leases; where it wrote none, False:
        `git push` sends the whole push."""
        from assay.core.git.listing import forget_heads
        from assay.core.git.smarthttp import RECEIVE

        try:
            report, said = _report(data, banded)
        except ValueError:
            report, said = [], ""
        results: dict[str, PushResult] = {}
        for line in report:
            word, _, rest = line.partition(" ")
            ref, _, why = rest.partition(" ")
            if word == "ok":
                results[ref] = PushResult(ref, "ok", "")
            elif word == "ng":
                results[ref] = PushResult(ref, "rejected", why)
        if not report or not report[0].startswith("unpack ") or not all(u.ref in results for u in updates):
            self._last_push_error = redact(said.strip().splitlines()[-1]) if said.strip() else \
                "no whole report from the forge"
            return None
        if direct := self._smart_http():
            direct.succeeded(RECEIVE)
        missing = [u for u in updates if results[u.ref].detail == "missing necessary objects"]
        if report[0] != "unpack ok" or missing:
            forget_heads(self.remote)  # what they reach is not all on the forge
            if report[0] != "unpack ok" or not any(r.ok for r in results.values()):
                return False  # nothing was written
        cause = _forge_error(said)
        results = {u.ref: results[u.ref]._replace(detail=cause) if cause and results[u.ref].status == "rejected"
                   and u not in missing else results[u.ref] for u in updates}
        if missing:
            results = self._finish_or_undo(results, missing, [u for u in updates if results[u.ref].ok])
        self._last_push_error = "; ".join(sorted({r.detail for r in results.values() if not r.ok}))
        landed = {u.ref: u.new for u in updates if results[u.ref].ok and u.new != ZERO}
        saw_heads(self.remote, landed)
        held(self.remote, landed)  # what a later fetch of these refs can say it has
        return results

    def _finish_or_undo(self, results: dict[str, PushResult], missing: Sequence[RefUpdate],
                        written: Sequence[RefUpdate]) -> dict[str, PushResult]:
        """An atomic push the forge wrote in part (`_reported`): the rest pushed alone under its leases; where it
        does not land, what was written is put back under leases of its own, so the push has not happened, as
        an atomic push that fails; where that cannot be (another writer built on it meanwhile), each ref is said
        as the forge holds it, those written `WRITTEN_ALONE`."""
        rest: dict[str, PushResult] | None = None
        with contextlib.suppress(ForgeError):
            rest = self._push_direct(missing, atomic=True)
        if rest is not None and all(r.ok for r in rest.values()):
            return results | rest  # landed whole, in two pushes
        undone: dict[str, PushResult] | None = None
        with contextlib.suppress(ForgeError):
            undone = self._push_direct([RefUpdate(u.ref, u.expected, u.new) for u in written], atomic=True)
        if undone is not None and all(r.ok for r in undone.values()):
            return results | {u.ref: PushResult(u.ref, "rejected", "atomic push failed") for u in written} | (
                rest or {})  # nothing written: the caller's re-read settles each ref
        return results | {u.ref: results[u.ref]._replace(detail=WRITTEN_ALONE) for u in written} | (rest or {})

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


_CAPS: dict[str, tuple[float, frozenset[str]]] = {}  # per forge: its receive-pack's capabilities, and when read
CAPS_KEEP_S = 600.0
_NEEDED = frozenset({"report-status", "delete-refs", "atomic"})


def _receive_caps(remote: str, direct: SmartHTTP) -> frozenset[str]:
    """The capabilities `remote`'s receive-pack advertises (none: it could not be read), read at most every
    `CAPS_KEEP_S` by this process, whether or not they are what a push from here needs (`_usable`)."""
    known = _CAPS.get(remote)
    if known is None or not 0 <= time.monotonic() - known[0] < CAPS_KEEP_S:
        known = (time.monotonic(), _advertised(direct)[1])
        if known[1]:  # unread (the forge away, a login asked): asked again next time
            _CAPS[remote] = known
    return known[1]


def _usable(caps: frozenset[str]) -> bool:
    """Whether a receive-pack with `caps` takes a push from here: leases reported, atomic pushes (a forge that does
    not advertise `atomic` would take a request for it as a push of refs one by one), SHA-1 ids."""
    return caps >= _NEEDED and all(not c.startswith("object-format=") or c == "object-format=sha1" for c in caps)


def _advertised(direct: SmartHTTP) -> tuple[dict[str, str], frozenset[str]]:
    """The refs and capabilities of the forge's receive-pack advertisement (`# service=` line, flush, then one ref
    a line, the first with the capabilities after a NUL); nothing for anything else."""
    from assay.core.git.smarthttp import RECEIVE

    head = b"001f# service=git-receive-pack\n0000"
    try:
        data = direct.request(RECEIVE).data
        if data is None:
            return {}, frozenset()
        lines = _packets(data[len(head):]) if data.startswith(head) else []
    except (ForgeError, ValueError):
        lines = []
    if not lines:
        direct.failed(RECEIVE)  # not an advertisement: after a few, no push is tried this way
        return {}, frozenset()
    direct.succeeded(RECEIVE)
    refs: dict[str, str] = {}
    caps: frozenset[str] = frozenset()
    for i, raw in enumerate(lines):
        line, _, listed = raw.decode("utf-8", "replace").rstrip("\n").partition("\0")
        if i == 0:
            caps = frozenset(listed.split())
        sha, _, ref = line.partition(" ")
        if ref.startswith("refs/"):
            refs[ref] = sha
    return refs, caps


def _packets(data: bytes) -> list[bytes]:
    """The payloads of a pkt-line stream up to its flush; ValueError where it is not one, or is cut short."""
    out: list[bytes] = []
    at = 0
    while at + 4 <= len(data):
        size = int(data[at:at + 4], 16)
        if size == 0:
            return out
        if size < 4 or at + size > len(data):
            break
        out.append(data[at + 4:at + size])
        at += size
    raise ValueError("pkt-lines cut short")


def _report(data: bytes, banded: bool) -> tuple[list[str], str]:
    """receive-pack's report-status lines in its answer, and what the forge said beside them (side bands 2 and 3,
    where `banded`). ValueError where the answer is not pkt-lines."""
    status, said = data, b""
    if banded:
        status = b""
        for packet in _packets(data):
            if packet[:1] == b"\x01":
                status += packet[1:]
            elif packet[:1] in (b"\x02", b"\x03"):
                said += packet[1:]
    lines = _packets(status) if status or not banded else []  # on side band 3 alone: the forge's error, no report
    return [p.decode("utf-8", "replace").rstrip("\n") for p in lines], said.decode("utf-8", "replace")


def _forge_error(said: str) -> str:
    """The forge's first `error:` or `fatal:` line beside its report (a hook's reason, a stale lock's name)."""
    for line in said.replace("\r", "\n").splitlines():
        text = line.strip()
        if text.startswith(("error:", "fatal:")):
            return redact(text.removeprefix("error:").removeprefix("fatal:").strip())
    return ""


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


def _contention(heard: dict[str, PushResult]) -> bool:
    """A rejection that racing writers cause (ref locks), as opposed to a policy refusal."""
    return any(any(word in r.detail.lower() for word in _CONTENTION) for r in heard.values() if r.status != "ok")
