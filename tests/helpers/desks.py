"""Desks for tests: a desk definition, a scripted brief, publishing files to main, running a desk once."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Forge, Run, assay, git

DESK = """name: {name}
takes:
  labels: [work]
agent:
  command: [python, -m, assay.agents.scripted]
lease_s: 120
heartbeat_s: 5
attempts: {attempts}
env_allow: [PATH, HOME, LANG, LC_ALL, TZ, ASSAY_EFFECTS_LOG]
"""


def brief(title: str, script: list[str], verify: str, deps: str = "") -> str:
    dep = f"depends_on: [{deps}]\n" if deps else ""
    return (f"---\ntitle: {title}\nlabels: [work]\n{dep}verify:\n  - id: check\n    run: \"{verify}\"\n---\n"
            f"{title}.\n\n```assay-script\n" + "\n".join(script) + "\n```\n")


def publish(forge: Forge, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = forge.seed / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git("add", "-A", cwd=forge.seed)
    git("commit", "-q", "-m", "add work", cwd=forge.seed)
    git("push", "-q", forge.url, "HEAD:refs/heads/main", cwd=forge.seed)


def desk_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"ASSAY_EFFECTS_LOG": str(tmp_path / "effects.log"), "ASSAY_STATE_DIR": str(tmp_path / "state"), **extra}


def run_desk(forge: Forge, name: str, tmp_path: Path, **extra: str) -> Run:
    return assay("desk", "run", name, "--once", "--forge", forge.url, env=desk_env(tmp_path, **extra), timeout=120)
