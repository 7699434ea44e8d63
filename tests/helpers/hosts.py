"""What the tests of a host's many desks share: a desk, its briefs, and what the forge's side logs of them."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.conftest import Forge
from tests.helpers.desks import brief, publish
from tests.journal_check import claim_chain, entries

DESK = """name: builder
takes:
  labels: [work]
agent:
  command: [python, -m, assay.agents.scripted]
lease_s: 20
heartbeat_s: 1
attempts: 1
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]
"""
BRIEFS = ("a", "b", "c")


def logged_pushes(forge: Forge) -> Path:
    """A post-receive hook that writes one line per push: the refs it moved."""
    log = forge.path / "pushes.log"
    hook = forge.path / "hooks" / "post-receive"
    hook.write_text(f'#!/bin/sh\nrefs=""\nwhile read old new ref; do refs="$refs $ref"; done\necho "$refs" >> {log}\n')
    hook.chmod(0o755)
    return log


def heartbeats(log: Path) -> list[set[str]]:
    """The pushes that moved claim refs and nothing else: renewals."""
    pushes = [set(line.split()) for line in log.read_text().splitlines() if line.strip()]
    return [p for p in pushes if p and all(r.startswith("refs/assay/claims/") for r in p)]


def agent_runs(forge: Forge, brief_id: str) -> bool:
    try:
        return any(e.get("step") == "agent" and e["kind"] == "intent" for e in entries(forge.path, brief_id))
    except subprocess.CalledProcessError:
        return False


def chain_or_none(forge: Forge, brief_id: str) -> list[dict[str, object]] | None:
    try:
        return claim_chain(forge.path, brief_id)
    except subprocess.CalledProcessError:
        return None


def late_brief_taken(forge: Forge, supervisor: subprocess.Popen[str], within_s: float = 30) -> None:
    """A brief published while the supervisor's desks idle is claimed within `within_s` (its wake, not a poll)."""
    publish(forge, {"briefs/late.md": brief("Late", ["write late.txt late"], "test -f late.txt")})
    published = time.monotonic()
    while chain_or_none(forge, "late") is None:
        assert supervisor.poll() is None and time.monotonic() - published < within_s, "not woken: still idle"
        time.sleep(0.1)


def desk_children(supervisor: int) -> list[tuple[int, str]]:
    """The supervisor's children that run desks (forked desks, or a host of desk threads): pid and command line."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                if not entry.isdigit() or int(stat.read().rsplit(")", 1)[1].split()[1]) != supervisor:
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                title = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue
        if "desk run" in title:
            found.append((int(entry), title))
    return found
