"""The artifact, not the source: build the wheel, install it in a fresh venv, run `assay` from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, git


@pytest.mark.slow
def test_wheel_installs_and_runs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                   check=True, capture_output=True)
    wheel = next(dist.glob("assay-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("assay/_defaults/desks/scripted.yaml", "assay/_defaults/sweepers/default.yaml",
                    "assay/_defaults/board/board.css", "assay/cli.py"):
        assert shipped in names
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, capture_output=True)
    exe = str(venv / "bin" / "assay")
    work = tmp_path / "project"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)

    init = run("init", "--local-forge", str(tmp_path / "forge.git"))
    assert init.returncode == 0, init.stderr
    assert (work / "desks" / "scripted.yaml").is_file()
    assert run("claim", "hello", "--desk", "builder").returncode == 0
    listing = json.loads(run("claims", "--json").stdout)
    assert [(c["brief"], c["state"], c["desk"]) for c in listing["claims"]] == [("hello", "held", "builder")]
    on_forge = json.loads(git("--git-dir", str(tmp_path / "forge.git"), "show", "refs/assay/claims/hello:claim.json"))
    assert on_forge["holder"] == listing["claims"][0]["holder"]
    assert run("--version").stdout.startswith("assay, version")
    demo = run("demo", "--dir", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stderr
    assert "all 6 briefs done" in demo.stdout
    crashed = run("demo", "--dir", str(tmp_path / "crash"), "--crash-at", "step.after-execute:deploy")
    assert crashed.returncode == 0 and "crash injected at step.after-execute:deploy" in crashed.stdout
    recovered = run("demo", "--dir", str(tmp_path / "crash"))
    assert recovered.returncode == 0, recovered.stderr
    assert "Outcome unknown" in recovered.stdout and "Operation will NOT be replayed automatically" in recovered.stdout
    assert (tmp_path / "crash" / "effects.log").read_text().count("deployed rate-limit") == 1
