"""One step request, one set of words: `assay step run` through its desk and `assay mcp`'s `step_run` say the same
thing for each answer the desk's step server can give (a recorded result, a refusal, a cancel, the desk gone).

The desk here is a scripted peer on a real socket that answers as `stepserver.py` does, so each answer can be
given on cue; the command each asks to run is a real process."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.desk import mcpserver, stepclient
from assay.errors import DESK_GONE, OutcomeUnknown

RECORDED = [{"do": "return", "result": {"exit_code": 3, "duration_ms": 5, "tail": "shipped\n"}, "ran": False}]
REFUSED = [{"do": "error", "code": 4, "message": OutcomeUnknown("deploy").message,
            "hint": OutcomeUnknown("deploy").hint}]
CANCELLED = [{"do": "run", "key": "alpha/1/deploy/x/0"}, {"do": "cancel"}]
GONE = [{"do": "run", "key": "alpha/1/deploy/x/0"}]  # and then the desk hangs up


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[dict[str, Any]]]]:
    """A desk that answers each connection with the next script of replies, then hangs up (after reading what
    the client sends back, once it was told to run)."""
    path = tmp_path / "d.sock"
    scripts: list[list[dict[str, Any]]] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.1)  # its thread looks for the end between waits: a socket closed under a blocked accept
    done = threading.Event()  # leaves the accept on its number, which the next socket of this process may reuse

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with conn, conn.makefile("rb") as said:
                assert json.loads(said.readline())["op"] == "step"
                for reply in scripts.pop(0):
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                if reply.get("do") == "cancel":
                    assert json.loads(said.readline()) == {"op": "cancelled"}

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    monkeypatch.setenv("ASSAY_SOCKET", str(path))
    yield scripts
    done.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    server.close()


@pytest.mark.parametrize(("script", "code"), [(RECORDED, 3), (REFUSED, 4), (CANCELLED, 143), (GONE, DESK_GONE)],
                         ids=["recorded", "refused", "cancelled", "gone"])
def test_the_cli_and_the_mcp_tool_say_the_same_for_each_answer(desk: list[list[dict[str, Any]]],
                                                               script: list[dict[str, Any]], code: int,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    desk.extend([script, script])
    assert stepclient.main(["step", "run", "--name", "deploy", "--", "sleep", "30"]) == code
    out, err = capfd.readouterr()
    try:
        text, structured = mcpserver.call("step_run", {"name": "deploy", "argv": ["sleep", "30"]})
    except mcpserver.ToolError as exc:
        assert str(exc) + "\n" == err and out == ""  # a tool error in the CLI's words
        return
    assert script is RECORDED and structured == {"exit_code": 3, "ran": False, "output": "shipped\n", "duration_ms": 5}
    assert out == "shipped\n"  # the recorded output shown again, and the words that say it did not run
    assert err == "assay: step 'deploy' already completed (exit 3); recorded result returned, not run again\n"
    assert text == err + "exit 3\nshipped\n"


def test_each_answer_has_its_own_words(desk: list[list[dict[str, Any]]], capfd: pytest.CaptureFixture[str]) -> None:
    said = {}
    for name, script in (("refused", REFUSED), ("cancelled", CANCELLED), ("gone", GONE)):
        desk.append(script)
        stepclient.main(["step", "run", "--name", "deploy", "--", "sleep", "30"])
        said[name] = capfd.readouterr().err
    assert said["refused"].startswith("error: The previous `deploy` operation was interrupted.")
    assert "\nhint: Operation will NOT be replayed automatically" in said["refused"]
    assert said["cancelled"].startswith("cancelled: the command was stopped; an unsafe step's end is journaled")
    assert said["gone"].startswith("error: the desk went away while serving this step; its command was stopped\n")
