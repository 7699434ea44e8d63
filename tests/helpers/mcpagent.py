"""An agent that reaches Assay only through `assay mcp`, with the `mcp` SDK's own stdio client, for the desk tests.

It starts `$ASSAY_BIN mcp`, reads its brief with the `brief` tool, and makes the calls the brief's
```mcp-calls``` block lists (a JSON list of {"tool": NAME, "arguments": {...}}, or {"await": PATH}: wait for a
file to exist, for the test to act meanwhile). Each call's result is appended as a JSON line to
`$ASSAY_EFFECTS_LOG.mcp` ({run, tool, arguments, is_error, text, structured}); at the end it writes
`mcp-agent.txt` in its working directory (the work a review shows).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import TextContent

AWAIT_S = 120


async def run() -> int:
    log = Path(os.environ["ASSAY_EFFECTS_LOG"] + ".mcp")
    server = StdioServerParameters(command=os.environ["ASSAY_BIN"], args=["mcp"], env=dict(os.environ))
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        record(log, "list_tools", {}, False, ",".join(t.name for t in tools.tools), None)
        brief = await session.call_tool("brief", {})
        text = "".join(c.text for c in brief.content if isinstance(c, TextContent))
        found = re.search(r"```mcp-calls\n(.*?)\n```", text, re.S)
        for item in json.loads(found[1]) if found else []:
            if "await" in item:
                deadline = time.monotonic() + AWAIT_S
                while not Path(item["await"]).exists() and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                continue
            done = await session.call_tool(item["tool"], item.get("arguments", {}))
            said = "".join(c.text for c in done.content if isinstance(c, TextContent))
            record(log, item["tool"], item.get("arguments", {}), bool(done.is_error), said, done.structured_content)
    Path("mcp-agent.txt").write_text(f"worked at attempt {os.environ.get('ASSAY_ATTEMPT')}\n")
    return 0


def record(log: Path, tool: str, arguments: dict[str, Any], is_error: bool, text: str,
           structured: dict[str, Any] | None) -> None:
    with log.open("a") as out:
        out.write(json.dumps({"run": os.environ.get("ASSAY_RUN"), "epoch": os.environ.get("ASSAY_EPOCH"),
                              "tool": tool, "arguments": arguments, "is_error": is_error, "text": text,
                              "structured": structured}) + "\n")


if __name__ == "__main__":
    sys.exit(anyio.run(run))
