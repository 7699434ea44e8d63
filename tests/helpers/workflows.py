"""GitHub workflows run as written: the few expression forms they use, and a job's `run:` steps in bash."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def evaluate(expression: str, contexts: dict[str, str]) -> str:
    """The few expression forms the workflows use: `a`, `a || 'b'`, `a || b`, `a && 'x' || 'y'` over known names."""
    m = re.fullmatch(r"([\w.-]+)(?:\s*&&\s*'([^']*)')?(?:\s*\|\|\s*(?:'([^']*)'|([\w.-]+)))?", expression)
    assert m, f"an expression this runner does not know: {expression!r}"
    value = contexts.get(m[1], "")
    if m[2] is not None:
        value = m[2] if value not in ("", "false") else ""
    return value or (m[3] or "") or (contexts.get(m[4], "") if m[4] else "")


def step_runs(condition: str | None, contexts: dict[str, str]) -> bool:
    """A step's `if:` of the forms the workflows use on steps, `name != ''` and `name == 'value'`; a step without
    one runs."""
    if condition is None:
        return True
    m = re.fullmatch(r"([\w.-]+)\s*(!=|==)\s*'([^']*)'", condition.strip())
    assert m, f"a step condition this runner does not know: {condition!r}"
    return (contexts.get(m[1], "") == m[3]) == (m[2] == "==")


def run_workflow_steps(path: Path, job: str, contexts: dict[str, str], env: dict[str, str],
                       skip_uses: bool = True, cwd: Path | None = None,
                       expect: int = 0) -> list[subprocess.CompletedProcess[str]]:
    """Run the `run:` steps of `job` as GitHub does (bash -eo pipefail), their `env:` evaluated."""
    workflow = yaml.safe_load(path.read_text())
    done = []
    for step in workflow["jobs"][job]["steps"]:
        if ("uses" in step and skip_uses) or not step_runs(step.get("if"), contexts):
            continue
        step_env = {k: EXPR.sub(lambda m: evaluate(m[1], contexts), str(v)) for k, v in step.get("env", {}).items()}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                              env={**env, **step_env}, capture_output=True, text=True, timeout=300, cwd=cwd)
        done.append(proc)
        if proc.returncode != 0:  # a failing step ends the job, as on GitHub
            assert proc.returncode == expect, (step.get("name"), proc.stdout, proc.stderr)
            return done
    assert expect == 0, "every step passed"
    return done
