"""Progress is state, not history: `assay step progress` inside a long step goes to the desk, rides its next
heartbeat (a renewal it makes anyway: no push and no journal entry of its own), shows in `assay claims` and on
the board, and is gone once the step's result replaces it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import Forge, assay, git
from tests.helpers.desks import DESK, brief, desk_env, publish
from tests.journal_check import entries


def held(forge: Forge) -> dict[str, Any]:
    run = assay("claims", "--json", "--forge", forge.url)
    data = run.json()
    assert run.code == 0 and isinstance(data, dict), run.err
    return {c["brief"]: c for c in data["claims"]}


def test_progress_rides_the_heartbeat_and_the_result_replaces_it(forge: Forge, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    step = ("assay step run --name migrate --policy idempotent -- "
            f'sh -c "assay step progress 40 of 120 tables && read x < {gate}"')
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/ship.md": brief("Ship", ["write ship.txt v1", f"run {step}"], "test -f ship.txt")})
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "builder", "--once", "--forge", forge.url],
                            env={**os.environ, **desk_env(tmp_path)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while held(forge).get("ship", {}).get("progress") != "40 of 120 tables":  # the next heartbeat carries it
            if desk.poll() is not None or time.monotonic() > deadline:
                desk.kill()
                raise AssertionError(f"no heartbeat carried the progress\n{desk.communicate()[0]}")
            time.sleep(0.2)
        journal = entries(forge.path, "ship")
        tip = git("--git-dir", str(forge.path), "rev-parse", "refs/assay/claims/ship").strip()
        tree, parent_tree = (git("--git-dir", str(forge.path), "rev-parse", f"{c}^{{tree}}").strip()
                             for c in (tip, f"{tip}^"))
        message = git("--git-dir", str(forge.path), "log", "-1", "--format=%B", tip)
        assert tree == parent_tree and "Progress: 40 of 120 tables" in message  # a renewal, carrying it
        assert (journal[-1]["kind"], journal[-1]["step"]) == ("intent", "migrate")  # nothing journaled since
        out = tmp_path / "site"
        assert assay("board", "build", "-o", str(out), "--forge", forge.url).code == 0
        card = next(c for c in json.loads((out / "board.json").read_text())["briefs"] if c["id"] == "ship")
        assert card["progress"] == "40 of 120 tables"
        assert "40 of 120 tables" in (out / "briefs" / "ship.html").read_text()
        table = assay("claims", "--forge", forge.url)
        assert "ship: 40 of 120 tables" in table.out
        with gate.open("w") as opened:  # the step goes on to its result
            opened.write("go\n")
        out_text, _ = desk.communicate(timeout=120)
    finally:
        if desk.poll() is None:
            desk.kill()
            desk.wait()
    assert desk.returncode == 0 and "review ready" in out_text, out_text
    assert held(forge)["ship"]["progress"] == ""  # replaced by the result (and the claim is parked)
    migrate = [e for e in entries(forge.path, "ship") if e.get("step") == "migrate"]
    assert [(e["kind"], e.get("status")) for e in migrate] == [("intent", None), ("result", "completed")]


def test_progress_outside_a_desk_is_a_clear_error() -> None:
    run = assay("step", "progress", "half way", env={"ASSAY_SOCKET": ""})
    assert run.code == 2 and "no desk is listening" in run.err and "Traceback" not in run.err
