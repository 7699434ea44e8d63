"""An agent-session checkpoint of a 20-turn Claude Code conversation: its size, and the time to restore it.

    python benchmarks/sessions.py [--turns 20] [--output-lines 40] [--rounds 5]

The real Claude Code CLI (installed by `sh tests/install-agents.sh`) runs one conversation of TURNS tool turns
against the project's scripted Anthropic server on loopback: each turn the model asks for a Bash command that
prints OUTPUT_LINES lines, then it finishes. The desk's own code then does what a desk does with the transcript:

- checkpoint: cut at the last turn boundary, credentials scrubbed, journaled as a `checkpoint` entry with its
  blob (one push, the claim renewed in it), as a heartbeat does;
- restore, as a successor on another machine does (a new cache folder, so a cold read): open the journal from
  the forge, find the newest checkpoint, read its blob, write it under another HOME and worktree path.

Each round makes a new brief and times both; the floor is one raw `git push` of a new commit to the same forge.
Prints the transcript's and the checkpoint's size and min/median/max of checkpoint and restore.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assay.core.journal import Journal  # noqa: E402
from assay.core.records import JournalEntry  # noqa: E402
from benchmarks import compiled  # noqa: E402
from benchmarks.claims import git, make_forge, new_commit  # noqa: E402
from tests.agentmodels import clis  # noqa: E402
from tests.agentmodels.anthropic import AnthropicServer  # noqa: E402
from tests.agentmodels.brain import Action, Conversation, Finish, Run  # noqa: E402


def conversation(home: Path, work: Path, turns: int, lines: int) -> Path:
    """One Claude Code session of `turns` Bash turns; the transcript's path."""
    claude = clis.claude_bin()
    if claude is None:
        sys.exit("Claude Code is not installed: run `sh tests/install-agents.sh` first")

    def brain(c: Conversation) -> Action:
        done = len(c.exchanges)
        return Run(f"seq -f 'turn {done + 1} line %g' 1 {lines}") if done < turns else Finish("Done.")

    session = str(uuid.uuid4())
    work.mkdir(parents=True)
    with AnthropicServer(brain) as server:
        ran = subprocess.run([claude, "-p", "Print the lines, one command a turn.", "--session-id", session,
                              *clis.CLAUDE_PERMISSIONS], cwd=work, env=clis.claude_env(server.url, home),
                             capture_output=True, text=True, timeout=600)
    if ran.returncode != 0:
        sys.exit(f"claude exited {ran.returncode}: {ran.stderr[-2000:]}")
    found = list((home / ".claude" / "projects").rglob(f"{session}.jsonl"))
    if len(found) != 1:
        sys.exit(f"no transcript for session {session} under {home}")
    return found[0]


def blob_of(journal: Journal, entry: JournalEntry) -> bytes:
    return journal.blob(entry, str((entry.data or {})["checkpoint_blob"]))


def main() -> None:
    compiled()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--output-lines", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from assay.core.claims import Claims
    from assay.core.deskspec import SessionSpec
    from assay.core.git import ForgeGit
    from assay.desk import sessions

    spec = SessionSpec(new=("--session-id", "{session}"), resume=("--resume", "{session}"),
                       file="{home}/.claude/projects/{cwd_slug}/{session}.jsonl")
    with tempfile.TemporaryDirectory(prefix="assay-bench-sessions-") as tmp_name:
        tmp = Path(tmp_name)
        transcript = conversation(tmp / "home-1", tmp / "work-1", args.turns, args.output_lines)
        raw = transcript.read_bytes()
        data = sessions.scrub(sessions.at_boundary(raw), sessions.known_secrets(dict(os.environ), ""))
        session = transcript.stem
        forge = make_forge(tmp, args.rounds)
        env = {**os.environ, "ASSAY_CACHE_DIR": str(tmp / "cache-1")}
        saves, restores, floors = [], [], []
        for i in range(args.rounds):
            brief = f"b{i:04d}"
            claimed = subprocess.run([sys.executable, "-m", "assay", "claim", brief, "--desk", "bench",
                                      "--forge", str(forge)], env=env, capture_output=True, text=True)
            assert claimed.returncode == 0, claimed.stderr
            claims = Claims(ForgeGit(str(forge), tmp / "cache-1"))
            journal = Journal.open(claims, brief, "bench", 1, "run-1", indexed=True)
            started = time.perf_counter()
            journal.add("checkpoint", blobs={"checkpoint": data},
                        data={"name": sessions.NAME, "session": session, "attempt": 1, "bytes": len(data)})
            saves.append(time.perf_counter() - started)
            claims.git.close()

            started = time.perf_counter()
            claims = Claims(ForgeGit(str(forge), tmp / f"cache-successor-{i}"))  # another machine: a cold read
            read = Journal.open(claims, brief, "bench", 1, "run-2", indexed=True)
            saved = sessions.latest(read.entries, partial(blob_of, read))
            assert saved is not None and saved.data == data
            worktree = tmp / f"state-2/worktrees/{brief}"
            target = sessions.Transcript(spec, saved.session, {"HOME": str(tmp / f"home-2-{i}")}, worktree)
            target.restore(saved.data, saved.file)
            restores.append(time.perf_counter() - started)
            claims.git.close()
            assert target.path is not None and target.path.read_bytes() == data

            commit = new_commit(forge, f"floor-{i}")
            started = time.perf_counter()
            git("--git-dir", str(forge), "push", "-q", str(forge), f"{commit}:refs/heads/floor-{i}")
            floors.append(time.perf_counter() - started)

    def show(name: str, values: list[float]) -> None:
        print(f"{name:>26}: min {min(values) * 1000:7.1f} ms  median {statistics.median(values) * 1000:7.1f} ms  "
              f"max {max(values) * 1000:7.1f} ms")

    print(f"a {args.turns}-turn Claude Code session ({args.output_lines} output lines a turn): transcript "
          f"{len(raw):,} bytes, checkpoint {len(data):,} bytes ({len(raw.splitlines())} lines)")
    show("checkpoint (journal push)", saves)
    show("restore (cold read, write)", restores)
    show("floor: raw git push", floors)
    print(f"restore / floor: {statistics.median(restores) / statistics.median(floors):.1f}x")


if __name__ == "__main__":
    main()
