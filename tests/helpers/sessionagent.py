"""An agent CLI that keeps its conversation in a transcript file, as Claude Code does, for the desk's session
checkpoints: `python sessionagent.py PROMPT_FILE (--new ID | --resume ID)`.

The transcript is `$HOME/t/<slug of the working directory>/<ID>.jsonl`, one JSON line per turn. A run appends a
turn, and writes `seen.txt` in the working directory: how many turns the conversation had when it started, at
which attempt.
With `SESSION_AGENT_BROKEN` set, a resumed run fails at once without touching the transcript (a CLI that cannot
read the session it was given). Each run copies its prompt to `prompt.txt`; with `SESSION_AGENT_STEER` set, the
first run's last act is a person's `assay steer` of that text (steering that arrives as the run ends). With
`SESSION_AGENT_HOLD` set to a path, after its turn it says the turn ended (`assay step turn Stop`, as a CLI's
hook does, unless `SESSION_AGENT_QUIET` is set) and waits for that path to exist before it exits.
Each run also writes, uncommitted, `turn-<n>.txt` ("<brief> turn <n>", n the turn it adds) and, with
`SESSION_AGENT_SECRET` set, `notes.txt` holding that value; with `SESSION_AGENT_HANG` set, a fresh run then
waits to be killed (a desk that dies mid-run). With `SESSION_AGENT_MAKE` set to a path, each run then runs one
unsafe step, `make`, whose command writes `made.txt` in the worktree and appends a line to that path (a fresh run
first says its turn ended and waits for `<path>.go`, so that a checkpoint before the step can be awaited).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    mode, session = sys.argv[2], sys.argv[3]
    home = Path(os.environ["HOME"])
    folder = home / "t" / re.sub(r"[^A-Za-z0-9]", "-", os.getcwd())
    transcript = folder / f"{session}.jsonl"
    if mode == "--resume" and os.environ.get("SESSION_AGENT_BROKEN"):
        print("cannot resume this session", file=sys.stderr)
        return 3
    turns = transcript.read_text().splitlines() if mode == "--resume" and transcript.exists() else []
    Path("seen.txt").write_text(f"saw {len(turns)} at attempt {os.environ.get('ASSAY_ATTEMPT')}\n")
    Path("prompt.txt").write_text(Path(sys.argv[1]).read_text())
    Path(f"turn-{len(turns) + 1}.txt").write_text(f"{os.environ.get('ASSAY_BRIEF')} turn {len(turns) + 1}\n")
    if os.environ.get("SESSION_AGENT_SECRET"):
        Path("notes.txt").write_text(f"the token is {os.environ['SESSION_AGENT_SECRET']}\n")
    folder.mkdir(parents=True, exist_ok=True)
    with transcript.open("a") as out:  # the turn is recorded once its files are written, as a CLI records a tool's
        out.write(json.dumps({"message": {"role": "user", "content": [
            {"type": "text", "text": f"attempt {os.environ.get('ASSAY_ATTEMPT')}"}]}}) + "\n")
    made = os.environ.get("SESSION_AGENT_MAKE")
    if made:
        if mode == "--new":
            subprocess.run([os.environ["ASSAY_BIN"], "step", "turn", "Stop"], check=True)
            deadline = time.monotonic() + 120
            while not Path(f"{made}.go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # held by the test until the checkpoint is on the forge
        subprocess.run([os.environ["ASSAY_BIN"], "step", "run", "--name", "make", "--policy", "unsafe", "--",
                        "sh", "-c", f"echo made > made.txt && echo ran >> {made}"], check=True)
    if mode == "--new" and os.environ.get("SESSION_AGENT_HANG"):
        print("waiting to be killed", flush=True)
        time.sleep(600)
    steer = os.environ.get("SESSION_AGENT_STEER")
    steered = home / "steered"  # once: the run that passes the steering on is attempt 1 too
    if steer and os.environ.get("ASSAY_ATTEMPT") == "1" and not steered.exists():
        steered.write_text("yes\n")
        subprocess.run([os.environ["ASSAY_BIN"], "steer", os.environ["ASSAY_BRIEF"], steer], check=True,
                       env={k: v for k, v in os.environ.items() if k != "ASSAY_SOCKET"})
    hold = os.environ.get("SESSION_AGENT_HOLD")
    if hold:
        if not os.environ.get("SESSION_AGENT_QUIET"):
            subprocess.run([os.environ["ASSAY_BIN"], "step", "turn", "Stop"], check=True)
        deadline = time.monotonic() + 120
        while not Path(hold).exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # held by the test: it lets go once it saw what it waits for
    print(f"session {session}: {len(turns)} turns before this one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
