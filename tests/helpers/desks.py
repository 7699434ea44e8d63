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


def scripted(title: str, writes: list[str], check: str) -> str:
    """A brief whose scripted agent writes each `path text` of `writes`, checked by the verify row `check`."""
    return (f"---\ntitle: {title}\nlabels: [work]\nverify:\n  - id: check\n    run: \"{check}\"\n---\n{title}.\n\n"
            "```assay-script\n" + "\n".join(f"write {w}" for w in writes) + "\n```\n")


def green_alone_red_together(forge: Forge, tmp_path: Path) -> None:
    """`a-strict` makes config.txt strict; `b-lenient` passes only while config.txt is not strict: each verified
    green on its own branch, both worked to ready reviews by the desk `builder`."""
    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=1),
                    "briefs/a-strict.md": scripted("Strict", ["config.txt mode=strict"], "grep -q strict config.txt"),
                    "briefs/b-lenient.md": scripted("Lenient", ["app.txt needs=lenient"],
                                                    "grep -q lenient app.txt && ! grep -qs strict config.txt")})
    for _ in range(2):
        assert run_desk(forge, "builder", tmp_path).code == 0


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
