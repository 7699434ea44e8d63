"""`assay step run` and `assay step value`: journaled effects and recorded values, for an agent's shell.

The desk hands its context to the agent in `ASSAY_FORGE`, `ASSAY_BRIEF`,
`ASSAY_DESK`, `ASSAY_EPOCH` and `ASSAY_RUN`; flags of the same names override
them. Forge credentials never reach the agent or the commands it runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from assay.envs import scrubbed_env
from assay.errors import Cancelled, UsageError
from assay.stepclient import relay
from assay.steps import DESK_STEPS, Session, canonical, validate_step


@dataclass(frozen=True)
class StepContext:
    forge: str | None
    brief: str
    desk: str
    epoch: int
    run: str


def context_from(forge: str | None, brief: str | None, desk: str | None, epoch: int | None,
                 run: str | None) -> StepContext:
    """Flags first, then the ASSAY_* variables the desk sets; anything missing is bad input."""
    env = os.environ
    values = {"brief": brief or env.get("ASSAY_BRIEF"), "desk": desk or env.get("ASSAY_DESK"),
              "run": run or env.get("ASSAY_RUN")}
    raw_epoch: Any = epoch if epoch is not None else env.get("ASSAY_EPOCH")
    missing = [f"--{k} / ASSAY_{k.upper()}" for k, v in values.items() if not v]
    if raw_epoch is None:
        missing.append("--epoch / ASSAY_EPOCH")
    if missing:
        raise UsageError(f"no step context: missing {', '.join(missing)}",
                         hint="run this from an agent that a desk started, or pass the flags")
    try:
        epoch_value = int(raw_epoch)
    except ValueError:
        raise UsageError(f"ASSAY_EPOCH must be a whole number, not {raw_epoch!r}") from None
    return StepContext(forge or env.get("ASSAY_FORGE"), str(values["brief"]), str(values["desk"]), epoch_value,
                       str(values["run"]))


def parse_input(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--input is not JSON: {exc}", hint="""pass e.g. --input '{"version": "abc"}'""") from None


@dataclass(frozen=True)
class EffectRequest:
    """What `assay step run` was asked to do, checked before the forge is touched."""

    name: str
    policy: str
    input: Any
    argv: list[str]
    fresh: bool = False


def check_effect(name: str, policy: str, input_json: str | None, argv: list[str], fresh: bool = False) -> EffectRequest:
    """Validate a step run's own arguments: bad input is exit 2 whatever the claim's state."""
    validate_step(name, policy)
    if name in DESK_STEPS:  # an agent's step must not pass for the desk's own (the audit trusts their intents)
        raise UsageError(f"step name {name!r} is one of a desk's own steps ({', '.join(sorted(DESK_STEPS))})",
                         hint="name the step after what it does, e.g. --name deploy")
    if not argv:
        raise UsageError("no command given", hint="put the command after `--`: assay step run --name x -- CMD ...")
    if fresh and policy != "safe":
        raise UsageError(f"--fresh re-runs a completed step, which only a safe step allows, not {policy}",
                         hint="use --fresh with --policy safe, for an inspection whose answer may have changed")
    step_input = parse_input(input_json) if input_json is not None else {"argv": argv}
    canonical(step_input)
    return EffectRequest(name, policy, step_input, argv, fresh)


def open_context_session(ctx: StepContext) -> Session:
    from assay.config import open_claims
    from assay.steps import open_session

    return open_session(open_claims(ctx.forge), ctx.brief, ctx.desk, ctx.epoch, ctx.run, call_notes=True,
                        indexed=True)  # a new process per step: it reads only what the step asks for


def run_effect(session: Session, request: EffectRequest) -> int:
    """Run the request's command as a durable step; returns its exit code, fresh or recorded."""
    name, argv = request.name, request.argv
    ran = []

    def effect(key: str) -> dict[str, Any]:
        ran.append(key)
        return _run_command(argv, key)

    try:
        result = session.step(name, effect, input=request.input, policy=request.policy, reuse=not request.fresh)
    except BaseException:
        _flush_quietly(session)  # replay and call notes count this run's calls: they must land
        raise
    session.flush()
    if not isinstance(result, dict) or "exit_code" not in result:
        raise UsageError(f"step {name!r} was recorded by something other than `assay step run`")
    if not ran:  # a recorded result: show what it printed then, and say it did not run again
        sys.stdout.write(str(result.get("tail", "")))
        sys.stderr.write(f"assay: step {name!r} already completed (exit {result['exit_code']}); "
                         "recorded result returned, not run again\n")
    return int(result["exit_code"])


def _run_command(argv: list[str], key: str) -> dict[str, Any]:
    env = scrubbed_env()
    env["ASSAY_IDEMPOTENCY_KEY"] = key
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        return {"exit_code": 127, "duration_ms": 0, "tail": f"cannot run {argv[0]}: {exc.strerror}"}
    try:
        code, tail = relay(proc)
    except (KeyboardInterrupt, Cancelled):
        proc.terminate()
        proc.wait()
        raise
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": tail}


def _flush_quietly(session: Session) -> None:
    """Flush while another error is on its way out: that error is the one the user must see."""
    try:
        session.flush()
    except Exception:  # noqa: BLE001
        pass
