"""The compare-and-swap push: `--force-with-lease`, never a `+` refspec; an outcome not heard is settled by
re-reading the refs. A forge on disk takes it as its own ref transaction, a big one over HTTP as one post to its
receive-pack, any other through `git push`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from assay.core.credentials import redact
from assay.core.git.listing import pkt_line, pkt_lines
from assay.core.git.locks import clear_stale_lock, lock_named
from assay.core.git.ondisk import DiskPush
from assay.core.git.refs import ZERO, PushResult, RefUpdate, parse_porcelain
from assay.core.git.run import first_error, git_timeout, local_forge_path, note, remote_error
from assay.core.git.vetting import forge_vetting
from assay.errors import ForgeError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any, Literal

PUSH_TRIES = 6  # pushes of one update while racing writers hold ref locks
HTTP_PUSH_AT = 64  # updates in one push over HTTP that go to receive-pack directly, not through `git push`
_CONTENTION = ("failed to update ref", "cannot lock ref", "failed to lock", "unable to create", "atomic")


class Pushing(DiskPush):
    """CAS-writes refs of the forge."""

    lock_notes: Callable[[str], None] | None = None  # who is told of a stale ref lock removed (None: stderr)

    def __init__(self, url: str, cache_root: str | os.PathLike[str] | None = None, token: str | None = None) -> None:
        super().__init__(url, cache_root, token)
        self._auth = self._env.get(f"GIT_CONFIG_VALUE_{int(self._env['GIT_CONFIG_COUNT']) - 1}") if self._env else None
        self._posts = self.remote.lower().startswith(("http://", "https://"))  # see `_push_http`

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
                (self.lock_notes or note)(f"removed the stale ref lock {lock} from the forge ({age / 60:.0f} "
                                           "minutes old: the push that left it was killed mid-way)")
        return removed

    def _push_once(self, updates: Sequence[RefUpdate], atomic: bool) -> dict[str, PushResult] | None:
        folder = local_forge_path(self.url)
        if (atomic or len(updates) == 1) and folder is not None \
                and not (vetting := forge_vetting(folder, self.cache)).vets \
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
                                                    headers=headers), timeout=git_timeout()) as answer:
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
        body = self._receive_pack_request(updates, caps)
        if body is None:
            return False  # nothing was sent: `git push` says why
        self.round_trips["push"] += 1
        request = urllib.request.Request(f"{base}/git-receive-pack", data=body, method="POST", headers={
            **headers, "Content-Type": "application/x-git-receive-pack-request",
            "Accept": "application/x-git-receive-pack-result"})
        try:
            with opener.open(request, timeout=git_timeout() + 0.01 * len(updates)) as answer:
                report = pkt_lines(answer.read())
        except (OSError, ValueError, urllib.error.URLError) as exc:
            self._last_push_error = str(exc)
            return None  # the outcome was not heard: the caller re-reads
        return self._reported(report, updates)

    def _receive_pack_request(self, updates: Sequence[RefUpdate], caps: set[str]) -> bytes | None:
        """What `_push_http` posts: the commands (the first asking for the capabilities it needs), then one pack
        (`pack-objects --revs`, leaving out what the expected tips hold); None if the pack could not be made."""
        agent = ["report-status", "atomic", *(["ofs-delta"] if "ofs-delta" in caps else [])]
        body = b"".join(pkt_line(f"{u.expected} {u.new} {u.ref}" + ("\0" + " ".join(agent) if i == 0 else "") + "\n")
                        for i, u in enumerate(updates)) + b"0000"
        news = [u.new for u in updates if u.new != ZERO]
        if news:
            olds = [u.expected for u in updates if u.expected != ZERO]
            present = [sha for sha, obj in zip(olds, self.read_typed(olds), strict=True) if obj is not None]
            wanted = "".join([*(f"{sha}\n" for sha in news), *(f"^{sha}\n" for sha in present)])
            try:
                body += self._git("pack-objects", "--revs", "--stdout", "-q", input=wanted.encode()).stdout
            except ForgeError:
                return None
        return body

    def _reported(self, report: list[str], updates: Sequence[RefUpdate]) -> dict[str, PushResult] | None:
        """Each update's outcome from receive-pack's report (`unpack ok`, then `ok <ref>` or `ng <ref> <why>` a
        line); None when the report is not whole: the outcome was not heard."""
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


def _no_redirect_handler() -> Any:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        """Follows no redirect: the push's Authorization header must reach the forge named and nothing else (the
        push then falls back to `git push`, which follows git's own rules)."""

        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return NoRedirect


def _advertisement(data: bytes) -> tuple[dict[str, str], set[str]]:
    """The refs and capabilities of a smart-HTTP `git-receive-pack` advertisement (`# service=` line, flush, then
    one ref a line, the first with the capabilities after a NUL); nothing for anything else."""
    if not data.startswith(b"001f# service=git-receive-pack\n0000"):
        return {}, set()
    refs: dict[str, str] = {}
    caps: set[str] = set()
    for i, line in enumerate(pkt_lines(data[len(b"001f# service=git-receive-pack\n0000"):])):
        line, _, listed = line.partition("\0")
        if i == 0:
            caps = set(listed.split())
        sha, _, ref = line.partition(" ")
        if ref.startswith("refs/"):
            refs[ref] = sha
    return refs, caps


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
