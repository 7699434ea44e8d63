"""The session agent's desk and brief (tests/helpers/sessionagent.py): a CLI that saves and resumes its
conversation as Claude Code does, for checkpoint tests."""

from __future__ import annotations

from pathlib import Path

AGENT = Path(__file__).parent / "sessionagent.py"
DESK = """name: talker
takes:
  labels: [work]
agent:
  command: [python, {agent}, "{{prompt_file}}"]
  session:
    new: [--new, "{{session}}"]
    resume: [--resume, "{{session}}"]
    file: "{{home}}/t/{{cwd_slug}}/{{session}}.jsonl"
lease_s: 120
heartbeat_s: 5
attempts: 2
env_allow: [PATH, HOME, SESSION_AGENT_*]
"""
BRIEF = """---
title: Talk
labels: [work]
verify:
  - id: resumed
    run: "{check}"
---
Talk.
"""
