"""Named crash points: `ASSAY_CRASH_AT=<point>[:<step>]` SIGKILLs the process there
(its whole process group with `ASSAY_CRASH_SCOPE=group`).

They sit at the durable boundaries so the crash suite can prove that a process
killed at any of them loses nothing and repeats no unsafe effect.
"""

from __future__ import annotations

import os
import signal
import sys


def crash_point(point: str, step: str | None = None) -> None:
    spec = os.environ.get("ASSAY_CRASH_AT")
    if not spec:
        return
    name, _, wanted_step = spec.partition(":")
    if name != point or (wanted_step and wanted_step != step):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if os.environ.get("ASSAY_CRASH_SCOPE") == "group":  # the whole machine "dies": desk, agent and all
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
