"""`assay desk run NAME... --count N`: many desks on one host, under one supervisor.

Each desk is a process of its own (`assay desk run NAME`, its isolation, its stop and its claims as ever), in a
process group of its own (a terminal's Ctrl-C reaches the supervisor alone, which passes one stop on to each), and
dies with the supervisor: a host that dies lets all its desks' claims expire together. The desks of a host share
one heartbeat (`hostbeat.py`: one push renews the claim of every desk whose agent runs), and an idle desk runs no
agent. A stop (Ctrl-C, SIGTERM, SIGHUP) is passed on to every desk, each hands its brief back, and the supervisor
waits for them all.

Idle desks back off to a look every 2 minutes; the supervisor looks for them all, every `WATCH_S` (one ref
advertisement of main and the claims, for the host), and when main moved, a claim came or went, or a claim
changed state (its new commit is not a renewal: a release, a wake, a block), it touches the state folder's `wake`
file, which an idle desk watches: it looks at once, and a brief put on main starts its agent within about a
second. Renewals, which busy desks push all the time, wake nobody.

Their pushes go together (`core/pushgroup.py`): a push made while another desk's is on its way waits for it and
goes with the next, one push of the forge for all; `--push-window S` makes each wait up to S seconds for others.

The forge reaches each desk in its environment (`ASSAY_FORGE`), never in its arguments.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from assay.core import pushgroup
from assay.core.git import ForgeGit
from assay.desk.procs import dies_with_parent
from assay.errors import ConfigInvalid, ForgeError, NeedsPerson

Echo = Callable[[str], None]
WATCH_S = 1.0  # how often the supervisor reads main and the claims for its idle desks


def desk_argv(name: str, *, once: bool, max_briefs: int | None, poll_s: float, state_dir: Path | None) -> list[str]:
    argv = [sys.executable, "-m", "assay", "desk", "run", name, "--poll", f"{poll_s:g}"]
    if once:
        argv.append("--once")
    if max_briefs is not None:
        argv += ["--max-briefs", str(max_briefs)]
    if state_dir is not None:
        argv += ["--state-dir", str(state_dir.absolute())]
    return argv


def run_desks(forge: str, names: Sequence[str], count: int, *, once: bool = False, max_briefs: int | None = None,
              poll_s: float = 5.0, state_dir: Path | None = None, push_window: float | None = None,
              echo: Echo = print) -> int:
    """Run `count` desks of each of `names` until they all end (each `--once`, or stopped); the exit code the
    worst of theirs says (2 a desk could not start, 1 the forge interrupted one, 5 a brief needs a person).
    Their pushes go together (`core/pushgroup.py`), each waiting up to `push_window` seconds for the others'."""
    env = {**os.environ, "ASSAY_FORGE": forge}
    if push_window is not None or not env.get("ASSAY_PUSH_WINDOW_S", "").strip():
        env["ASSAY_PUSH_WINDOW_S"] = f"{push_window or 0:g}"
    env[pushgroup.KEY_ENV] = pushgroup.new_key()  # this supervisor's desks' requests, and no one else's
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    echo(f"supervisor: {count} desk(s) of {', '.join(names)} on this host, one heartbeat")
    try:
        total = count * len(names)
        for name in names:
            for _ in range(count):
                argv = desk_argv(name, once=once, max_briefs=max_briefs, poll_s=poll_s, state_dir=state_dir)
                slot = {"ASSAY_DESK_SLOT": f"{len(children)}/{total}"}  # where it starts among equal briefs
                children.append((name, subprocess.Popen(argv, env=env | slot, stdin=subprocess.DEVNULL,
                                                        process_group=0, preexec_fn=dies_with_parent())))
        watch(forge, state_dir, WATCH_S, [child for _, child in children])
        codes = [child.wait() for _, child in children]
    except KeyboardInterrupt:
        for _, child in children:  # each hands its brief back, as it would alone
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        codes = [_wait(child) for _, child in children]
        raise
    return worst(codes)


def watch(forge: str, state_dir: Path | None, poll_s: float, children: Sequence[subprocess.Popen[bytes]]) -> None:
    """Until every desk has ended: read main and the claims every `poll_s` (one advertisement), and touch the
    `wake` file when they moved. A forge that cannot be read now is read again next time."""
    from assay.config import state_dir_for
    from assay.desk.loop import WAKE

    wake = state_dir_for(forge, state_dir) / WAKE
    git = ForgeGit(forge)
    seen: dict[str, str] | None = None
    try:
        while any(child.poll() is None for child in children):
            try:
                refs = git.ls_remote("refs/heads/main", "refs/assay/claims/*")
                if seen is not None and moved(git, seen, refs):
                    wake.touch()
                    os.utime(wake)  # a new mtime, whatever the file system's resolution did with the last one
                seen = refs
            except Exception as exc:  # noqa: BLE001 - a forge away, a full disk: the desks poll on their own
                echo_once(f"supervisor: cannot watch the forge for the idle desks now ({exc})")
            deadline = time.monotonic() + poll_s
            while time.monotonic() < deadline and any(child.poll() is None for child in children):
                time.sleep(min(0.2, poll_s))
    finally:
        git.close()


def moved(git: ForgeGit, seen: dict[str, str], refs: dict[str, str]) -> bool:
    """Whether idle desks may find work: main moved, a claim came or went, or a claim's new commit is not a
    renewal (a renewal's subject is `assay: renew …`; what else moved is read, one fetch of the new tips)."""
    if refs.get("refs/heads/main") != seen.get("refs/heads/main") or set(refs) != set(seen):
        return True
    changed = {ref: sha for ref, sha in refs.items() if seen.get(ref) != sha}
    if not changed:
        return False
    git.ensure_objects(changed)
    return any(not git.message_of(sha).startswith("assay: renew ") for sha in changed.values())


_said: set[str] = set()


def echo_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr)


def _wait(child: subprocess.Popen[bytes]) -> int:
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # a second Ctrl-C while the desks stop: they stop all the same
            continue


def worst(codes: Sequence[int]) -> int:
    """The exit code of many desks: a desk that could not start, then an interrupted one, then a blocked brief."""
    for code in (ConfigInvalid.code, ForgeError.code, NeedsPerson.code):
        if code in codes:
            return code
    return next((c if c > 0 else ForgeError.code for c in codes if c != 0), 0)
