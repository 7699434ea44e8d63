"""The promise fleet's agent: `python -m tests.promise.agent PROMPT (--new ID | --resume ID)`.

A session agent (its conversation is a transcript under `$HOME`, as Claude Code keeps one) that first writes
what it was sent to `$PROMISE_DIR/requests.jsonl`, the way a scripted model server logs every request: that log
is the evidence of what reached the agent. Then it looks through every `/proc/*/environ` and `cmdline` it can
read for the desk's token (anything starting with `SECRET_PREFIX`) and logs where it found one (never the value)
to `$PROMISE_DIR/leaks.jsonl`. Then it works the brief its prompt file holds: a ```mcp-calls block is handed to
the MCP agent (`tests.helpers.mcpagent`, through `assay mcp`); a ```promise-script block is run here, verb by
verb (`VERBS`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from assay.agents.scripted import script_lines

SECRET_PREFIX = "ghp_promise"
REFUSED = 4
VERBS = ("write PATH TEXT", "sleep SECONDS", "think SECONDS", "value", "effect NAME DELAY", "spawn KEY",
         "hang MARKER", "steer WORDS_JOINED_BY_UNDERSCORES", "steering", "answer")


def log(name: str, record: dict[str, object]) -> None:
    """One line, one write, to a file under $PROMISE_DIR: lines of processes running at once never interleave."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(Path(os.environ["PROMISE_DIR"]) / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def context() -> dict[str, object]:
    return {k.removeprefix("ASSAY_").lower(): os.environ.get(k) for k in ("ASSAY_BRIEF", "ASSAY_ATTEMPT",
                                                                           "ASSAY_RUN", "ASSAY_EPOCH", "ASSAY_DESK")}


def transcript() -> Path | None:
    session = sys.argv[3] if len(sys.argv) > 3 else ""
    if not session:
        return None
    return Path(os.environ["HOME"]) / "t" / re.sub(r"[^A-Za-z0-9]", "-", os.getcwd()) / f"{session}.jsonl"


def turn(role: str, *blocks: dict[str, object]) -> None:
    """One line of the conversation, as Claude Code writes its transcript: a tool call's line before it runs,
    its result's line after, so that a desk looking for a turn boundary never finds one inside a tool call."""
    path = transcript()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps({"message": {"role": role, "content": list(blocks)}}) + "\n")


def calling(i: int, what: str) -> None:
    turn("assistant", {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": what}})


def called(i: int, code: int) -> None:
    turn("user", {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"exit {code}"})


def converse(argv: list[str]) -> set[int]:
    """Log the request and keep the conversation; returns the script's items done in it before (a resumed
    conversation goes on where it was, as a model's would: its work is the conversation's, `brief_text`, not only
    the message it was resumed with, such as a person's steering)."""
    prompt, mode, session = argv[0], argv[1] if len(argv) > 1 else "", argv[2] if len(argv) > 2 else ""
    sent = Path(prompt).read_text() if prompt.startswith("/") and Path(prompt).is_file() else prompt
    log("requests.jsonl", {**context(), "pid": os.getpid(), "mode": mode, "session": session, "prompt": sent,
                           "home": os.environ.get("HOME"), "argv": argv})
    path = transcript()
    done: set[int] = set()
    if mode == "--resume" and path is not None and path.exists():
        for line in path.read_text().splitlines():
            message = json.loads(line)["message"]
            for block in message["content"]:
                if block.get("type") == "tool_result" and block.get("content") == "exit 0":
                    done.add(int(block["tool_use_id"][1:]))
                elif message["role"] == "user" and block.get("type") == "text":
                    CONVERSATION.append(str(block["text"]))
    turn("user", {"type": "text", "text": sent})
    CONVERSATION.append(sent)
    return done


def look_for_secrets() -> None:
    """What any process of this user can read: every other process's environment and command line."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        for part in ("environ", "cmdline"):
            try:
                data = (entry / part).read_bytes()
            except OSError:
                continue
            if SECRET_PREFIX.encode() in data:
                names = [item.split(b"=", 1)[0].decode(errors="replace") for item in data.split(b"\0")
                         if SECRET_PREFIX.encode() in item]
                comm = (entry / "comm").read_text(errors="replace").strip() if (entry / "comm").exists() else "?"
                try:
                    argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    argv = "?"
                log("leaks.jsonl", {**context(), "pid": int(entry.name), "where": part, "comm": comm,
                                    "names": names if part == "environ" else [],
                                    "argv": re.sub(SECRET_PREFIX + r"\w*", "[token]", argv)[:300]})


def assay(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([os.environ.get("ASSAY_BIN", "assay"), *args], text=True, capture_output=True)
    log("outputs.jsonl", {**context(), "argv": list(args), "code": done.returncode, "out": done.stdout[-2000:],
                          "err": done.stderr[-2000:]})
    return done


def effect(name: str, delay: str) -> int:
    """An unsafe step whose effect a grandchild makes; an unknown outcome is inspected and settled, and the step
    runs again only if the inspection found it did not happen."""
    folder = Path(os.environ["PROMISE_DIR"])
    target = folder / "effects" / f"{os.environ['ASSAY_BRIEF']}.{name}.log"
    probe = f"test -s {target}"
    command = ["sh", str(folder / "effect.sh"), str(target), delay, os.environ["PROMISE_MARK"]]
    run = assay("step", "run", "--name", name, "--policy", "unsafe", "--probe", probe, "--", *command)
    if run.returncode != REFUSED or "hook refused" in run.stderr:
        print(f"effect {name} exited {run.returncode}", flush=True)
        return run.returncode
    check = assay("step", "settle", name, "--", "sh", "-c", probe)
    if check.returncode != 0:
        return check.returncode
    if "settled as happened" in check.stdout:
        return 0
    return assay("step", "run", "--name", name, "--policy", "unsafe", "--probe", probe, "--", *command).returncode


def work(prompt: str, done: set[int]) -> int:
    calls = re.search(r"```mcp-calls\n(.*?)\n```", prompt, re.S)
    if calls:
        return int(anyio.run(tools, json.loads(calls[1]), done))
    for i, line in enumerate(script_lines(prompt.replace("```promise-script", "```assay-script"))):
        if i in done:
            continue
        if line.startswith("think "):  # the model thinking: between tool calls, at a turn boundary
            time.sleep(float(line.split()[1]))
            continue
        if line == "answer":  # every run answers the threads its prompt lists, as a model would: never "done"
            code = answer_threads()
            if code:
                return code
            continue
        calling(i, line)
        code = verb(line)
        called(i, code)
        if code:
            return code
    return 0


def verb(line: str) -> int:
    verb, _, rest = line.partition(" ")
    if verb == "write":
        path, _, text = rest.partition(" ")
        Path(path).write_text(text + "\n")
    elif verb == "sleep":
        time.sleep(float(rest))
    elif verb == "value":
        return assay("step", "value", "uuid").returncode
    elif verb == "effect":
        name, _, delay = rest.partition(" ")
        return effect(name, delay)
    elif verb == "spawn":
        body = f"Child {rest}.\n\n```promise-script\nwrite child.txt {rest}\n```\n"
        return assay("step", "run", "--name", "spawn", "--policy", "idempotent", "--", os.environ["ASSAY_BIN"],
                     "brief", "spawn", f"Child {rest}", "--key", rest, "--label", "promise",
                     "--body", body).returncode
    elif verb == "hang":  # the first time only: mark, then work until killed
        if not Path(rest).exists():
            Path(rest).write_text("hanging\n")
            time.sleep(600)
    elif verb == "steer":  # a person's steering, sent while this agent works (not through the desk's socket);
        # `_` stands for a space, so that the text sent is not in the brief the agent was prompted with
        env = {k: v for k, v in os.environ.items() if k != "ASSAY_SOCKET"}
        subprocess.run([os.environ["ASSAY_BIN"], "steer", os.environ["ASSAY_BRIEF"], rest.replace("_", " ")],
                       env=env, check=True, capture_output=True)
    elif verb == "steering":
        print("steering received: " + (prompt_text().partition("## Steering\n")[2].strip() or "(none)"), flush=True)
    else:
        print(f"unknown verb {verb!r}; the verbs: {', '.join(VERBS)}", flush=True)
        return 2
    return 0


def listed_threads() -> list[str]:
    """The review threads the prompt lists (`- thread ID on WHERE:`)."""
    section = prompt_text().partition("## Review threads\n")[2].partition("\n## ")[0]
    return [line.split()[2] for line in section.splitlines() if line.startswith("- thread ")]


def answer_threads() -> int:
    for thread in listed_threads():
        done = assay("step", "answer", thread, "--fixed", f"promise answer to {thread}")
        print(f"answer {thread} exited {done.returncode}", flush=True)
        if done.returncode:
            return done.returncode
    return 0


CONVERSATION: list[str] = []  # the user's messages of this conversation, oldest first (`converse`)
WORK_BLOCKS = ("```mcp-calls\n", "```promise-script\n")


def prompt_text() -> str:
    return Path(os.environ["ASSAY_PROMPT_FILE"]).read_text()


def brief_text() -> str:
    """The work of this conversation: its first message that holds some (the brief it was started with; a run
    resumed with another message, a person's steering, goes on with it), else the prompt."""
    return next((m for m in CONVERSATION if any(block in m for block in WORK_BLOCKS)), None) or prompt_text()


async def tools(calls: list[dict[str, Any]], done: set[int]) -> int:
    """The calls through `assay mcp`, with the `mcp` SDK's client, each result logged as the MCP agent of the
    desk tests logs it (`tests.helpers.mcpagent.record`)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.types import TextContent

    from tests.helpers.mcpagent import record

    log_path = Path(os.environ["ASSAY_EFFECTS_LOG"] + ".mcp")
    # in a session of its own, as Claude Code starts its tool processes: the desk's process group does not hold it
    # (`-w`: setsid stays its parent, so that the server is still a process of this agent's tree)
    server = StdioServerParameters(command="setsid", args=["-w", os.environ["ASSAY_BIN"], "mcp"],
                                   env=dict(os.environ))
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for i, item in enumerate(calls):
            if i in done:
                continue
            calling(i, json.dumps(item))
            result = await session.call_tool(item["tool"], item.get("arguments", {}))
            said = "".join(c.text for c in result.content if isinstance(c, TextContent))
            record(log_path, item["tool"], {**item.get("arguments", {}), "brief": os.environ.get("ASSAY_BRIEF")},
                   bool(result.is_error), said, result.structured_content)
            called(i, 0)
        for thread in listed_threads():  # every run answers the threads its prompt lists
            result = await session.call_tool("answer", {"thread": thread, "fixed": f"promise answer to {thread}"})
            said = "".join(c.text for c in result.content if isinstance(c, TextContent))
            record(log_path, "answer", {"thread": thread, "brief": os.environ.get("ASSAY_BRIEF")},
                   bool(result.is_error), said, result.structured_content)
    Path("mcp-agent.txt").write_text(f"worked at attempt {os.environ.get('ASSAY_ATTEMPT')}\n")
    return 0


def main() -> int:
    done = converse(sys.argv[1:])
    look_for_secrets()
    try:
        return work(brief_text(), done)
    except Exception as exc:  # noqa: BLE001 - a killed `assay mcp` ends the agent, as it would end a real CLI
        print(f"agent: the tools went away: {type(exc).__name__}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
