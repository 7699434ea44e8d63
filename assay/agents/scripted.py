"""The scripted agent: deterministic, for the demo and the tests.

It reads its prompt (ASSAY_PROMPT_FILE), finds the ```assay-script block the
brief carries, and runs it line by line in the current directory (the desk's
worktree for the brief). Its verbs are `VERBS` (the table in docs/agents.md is
made from it). An unknown verb stops it with exit 2.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REFUSED = 4
VERBS = (  # (usage, what it does): the scripted agent's whole language
    ("write PATH TEXT", "write TEXT (`\\n` for newlines) to PATH, creating its folders"),
    ("append PATH TEXT", "append TEXT as a line to PATH"),
    ("run CMD", "run a shell command; stop with its exit code if it fails"),
    ("deploy [probed]", "an unsafe effect through `assay step run` that appends to `$ASSAY_EFFECTS_LOG`; if its "
     "outcome is unknown, inspect the log and settle it (`assay step settle`), deploying again only if it did not "
     "happen; `probed` declares that inspection as the step's outcome probe, which the next desk runs itself"),
    ("sleep SECONDS", "wait"),
    ("sleep-once S MARKER", "wait S seconds the first time only (MARKER is a file it creates)"),
    ("fail-attempts N", "exit 1 while `ASSAY_ATTEMPT` <= N (a failure on purpose)"),
    ("steering", "print the steering the desk passed on"),
    ("answer-threads fixed|reason TEXT", "answer every review thread the prompt lists (`assay step answer ID "
     "--fixed TEXT` or `--reason TEXT`)"),
)


def script_lines(prompt: str) -> list[str]:
    lines, inside = [], False
    for line in prompt.splitlines():
        if line.strip().startswith("```assay-script"):
            inside = True
        elif inside and line.strip().startswith("```"):
            inside = False
        elif inside and line.strip() and not line.strip().startswith("#"):
            lines.append(line.strip())
    return lines


def listed_threads(prompt: str) -> list[str]:
    """The ids of the review threads the prompt lists (`- thread ID on WHERE:` under `## Review threads`)."""
    section = prompt.partition("## Review threads\n")[2].partition("\n## ")[0]
    return [line.split()[2] for line in section.splitlines() if line.startswith("- thread ")]


def assay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "assay", *args], text=True, capture_output=True)


def say(text: str) -> None:
    print(f"[agent] {text}", flush=True)


def deploy(probed: bool = False) -> int:
    log = os.environ.get("ASSAY_EFFECTS_LOG", "effects.log")
    effect = f'echo "deployed $ASSAY_BRIEF key=$ASSAY_IDEMPOTENCY_KEY" >> {shlex.quote(log)}'
    looked = f'test -f {shlex.quote(log)} && grep -q "deployed $ASSAY_BRIEF " {shlex.quote(log)}'
    probe = ["--probe", looked] if probed else []
    run = assay("step", "run", "--name", "deploy", "--policy", "unsafe", *probe, "--", "sh", "-c", effect)
    if run.returncode != REFUSED or "hook refused" in run.stderr:  # a desk's policy said no: nothing to inspect
        say(f"deploy exited {run.returncode}" + (f": {run.stderr.strip()}" if run.returncode else ""))
        return run.returncode
    say("Outcome unknown: " + run.stderr.strip().splitlines()[0].removeprefix("error: "))
    say("Operation will NOT be replayed automatically; inspecting the deployment instead")
    # the inspection settles the unknown, with its output as evidence: exit 0 means it happened, 1 that it did not
    check = assay("step", "settle", "deploy", "--", "sh", "-c", looked)
    if check.returncode != 0:
        say(f"settling deploy failed: {check.stderr.strip()}")
        return check.returncode
    if "settled as happened" in check.stdout:
        say("check_deployment: the deployment is there; not deploying again")
        return 0
    say("check_deployment: no deployment found; deploying deliberately")
    again = assay("step", "run", "--name", "deploy", "--policy", "unsafe", "--", "sh", "-c", effect)
    return again.returncode


def main() -> int:
    prompt_file = os.environ.get("ASSAY_PROMPT_FILE")
    if not prompt_file:
        print("scripted agent: ASSAY_PROMPT_FILE is not set", file=sys.stderr)
        return 2
    prompt = Path(prompt_file).read_text(encoding="utf-8")
    attempt = int(os.environ.get("ASSAY_ATTEMPT", "1"))
    for line in script_lines(prompt):
        verb, _, rest = line.partition(" ")
        if verb in ("write", "append"):
            path, _, text = rest.partition(" ")
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            body = text.replace("\\n", "\n") + ("\n" if verb == "append" or not text.endswith("\\n") else "")
            with target.open("a" if verb == "append" else "w", encoding="utf-8") as fh:
                fh.write(body)
            say(f"{verb} {path}")
        elif verb == "run":
            code = subprocess.run(rest, shell=True).returncode
            say(f"run {rest!r} -> {code}")
            if code:
                return code
        elif verb == "deploy":
            code = deploy(probed=rest == "probed")
            if code:
                return code
        elif verb == "sleep":
            time.sleep(float(rest))
        elif verb == "sleep-once":
            seconds, _, marker = rest.partition(" ")
            if not Path(marker).exists():
                Path(marker).write_text("slept\n")
                say(f"working for up to {seconds}s")
                time.sleep(float(seconds))
        elif verb == "fail-attempts":
            if attempt <= int(rest):
                say(f"failing on purpose (attempt {attempt} <= {rest})")
                return 1
        elif verb == "answer-threads":
            how, _, text = rest.partition(" ")
            for thread in listed_threads(prompt):
                done = assay("step", "answer", thread, f"--{how}", text or "done")
                say(f"answer {thread} -> {done.returncode}" + (f": {done.stderr.strip()}" if done.returncode else ""))
                if done.returncode:
                    return done.returncode
        elif verb == "steering":
            steering = prompt.partition("## Steering\n")[2].strip()
            say(f"steering received: {steering or '(none)'}")
        else:
            say(f"unknown script verb {verb!r}; the verbs: {', '.join(usage.split()[0] for usage, _ in VERBS)}")
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
