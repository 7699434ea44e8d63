"""What checkpointing at every turn costs: pushes per brief and bytes per checkpoint, with the presets as shipped.

    python benchmarks/turns.py [--turns 6] [--think 1.0] [--agent claude|codex]

The real CLI (installed by `sh tests/install-agents.sh`) runs under `assay desk run` with its preset as
`assay init` writes it, against the project's scripted model server on loopback: TURNS tool turns (each a Bash
command that writes a file; the model thinks THINK seconds before each answer), then it finishes; the desk
pushes, verifies and marks the review ready. A logging `git` first on PATH counts the desk's pushes. Printed:
pushes to "waiting", of which checkpoints, and the checkpoints' transcript bytes; the floor is one raw
`git push` of a new commit to the same forge, timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.claims import new_commit  # noqa: E402
from tests.agentmodels.brain import Action, Conversation, Finish, Run  # noqa: E402
from tests.agentmodels.server import ModelServer  # noqa: E402
from tests.helpers.clidesks import AGENTS, desk_env, finish, project  # noqa: E402
from tests.helpers.clidesks import desk as launch  # noqa: E402
from tests.helpers.gitlog import logging_git, pushes  # noqa: E402
from tests.journal_check import entries  # noqa: E402

BRIEF = """---
title: Write the files
labels: [code]
verify:
  - id: files
    run: "test -f f1.txt"
---
Write the files, one command a turn.
"""


def floor(forge: Path, work: Path) -> float:
    """One raw `git push` of a new commit to the forge: the time the desk's pushes are compared with."""
    sha = new_commit(work, "floor")
    started = time.perf_counter()
    subprocess.run(["git", "push", "-q", str(forge), f"{sha}:refs/heads/floor"], cwd=work, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--think", type=float, default=1.0)
    parser.add_argument("--agent", choices=sorted(AGENTS), default="claude")
    args = parser.parse_args()
    agent = AGENTS[args.agent]
    if agent.installed is None:
        sys.exit(f"{args.agent} is not installed: run `sh tests/install-agents.sh` first")
    never = threading.Event()
    held: list[ModelServer] = []

    def brain(c: Conversation) -> Action:
        done = len(c.exchanges)
        held[0].wait_unlocked(never, args.think)  # the model thinks; the server answers others meanwhile
        return Run(f"echo {done + 1} > f{done + 1}.txt") if done < args.turns else Finish("Done.")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        forge = project(root, BRIEF)
        base = floor(forge, root / "project")
        folder, log = logging_git(root)
        with agent.server(brain) as server:
            held.append(server)
            env = desk_env(agent, server, root)
            env["PATH"] = f"{folder}{os.pathsep}{env['PATH']}"
            out = finish(launch(args.agent, forge, env), server)
        assert "review ready" in out, out
        made = [a for code, a in pushes(log) if code == 0]
        journal = entries(forge, "ship")
        saved = [e for e in journal if e["kind"] == "checkpoint"]
        sizes = [int(e["data"]["bytes"]) for e in saved]
        print(f"{args.agent}: {args.turns} tool turns, {args.think} s a model answer; pushes to waiting: {len(made)} "
              f"(12 before checkpoints at turns), of which checkpoints: {len(saved)}")
        if sizes:
            print(f"  checkpoint transcript bytes: first {sizes[0]}, last {sizes[-1]}, "
                  f"total {sum(sizes)} ({sum(sizes) // len(sizes)} a checkpoint)")
        print(f"  floor (one raw git push): {base * 1000:.1f} ms")
        print(json.dumps({"agent": args.agent, "turns": args.turns, "pushes": len(made), "checkpoints": len(saved),
                          "checkpoint_bytes": sizes, "floor_ms": round(base * 1000, 1)}))


if __name__ == "__main__":
    main()
