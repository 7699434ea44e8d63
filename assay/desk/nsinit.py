"""The first process of an agent's namespace (`isolation.py`): a script run by the desk's Python with `-I -S`,
which imports nothing but `os`, `signal` and `sys`, so that each running agent's init holds about 3 MB of its own
(with `site`, `subprocess` and `typing` loaded it held 8).

It starts the agent, passes SIGTERM, SIGINT and the like on to it (the kernel drops a signal to a namespace's first
process that has no handler for it), reaps what is orphaned, and ends as the agent ends: its exit code, or 128+N
for a death by signal N.
"""

import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def init(argv: list[str]) -> int:
    """Start the agent, pass signals on to it, reap orphans; the agent's end as an exit code."""
    # a signal that comes while the agent starts (the desk's whole group stopped at once) waits for its handler
    held = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        agent = os.posix_spawnp(argv[0], list(argv), os.environ, setsigmask=held,
                                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED))
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126

    def forward(received: int, _: object) -> None:
        try:
            os.kill(agent, received)
        except ProcessLookupError:  # the agent reaped already: nothing left to tell
            pass
    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    while True:
        pid, status = os.wait()  # any child: the orphans this namespace leaves come to its first process
        if pid == agent:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(init(sys.argv[1:]))
