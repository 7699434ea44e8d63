"""A parent that does not reap, like a container's PID 1 that reaps slowly or never.

Starts the command given as arguments, prints its pid, and leaves it unreaped
(a zombie once it dies) until stdin closes; then it reaps it and exits.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], dict(os.environ))
    print(pid, flush=True)
    sys.stdin.read()
    os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
