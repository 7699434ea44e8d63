"""`assay step run` and `assay step value`: journaled effects and recorded values, for an agent's shell.

The desk hands its context to the agent in `ASSAY_FORGE`, `ASSAY_BRIEF`,
`ASSAY_DESK`, `ASSAY_EPOCH` and `ASSAY_RUN`; flags of the same names override
them. Forge credentials never reach the agent or the commands it runs.
"""

from __future__ import annotations

import os
import signal
import time

from assay.config import Ports
from assay.core.claims import Claims
from assay.core.envs import scrubbed_env
from assay.core.outcomes import DESK_STEPS, DID_NOT, HAPPENED, verdict_of_exit
from assay.core.records.recordtype import dataclass
from assay.core.steps import Session, canonical, input_sha, validate_step
from assay.desk import procs
from assay.desk.steprequest import TAIL_BYTES, relay, returned, show, stopped
from assay.errors import Cancelled, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from assay.core.steps import ProbeRunner

PROBE_TIMEOUT_S = 300


@dataclass(frozen=True)
class StepContext:
    brief: str
    desk: str
    epoch: int
    run: str


def context_from(brief: str | None, desk: str | None, epoch: int | None, run: str | None) -> StepContext:
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
    return StepContext(str(values["brief"]), str(values["desk"]), epoch_value, str(values["run"]))


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
    probe: str | None = None


def check_effect(name: str, policy: str, input_json: str | None, argv: list[str], fresh: bool = False,
                 probe: str | None = None) -> EffectRequest:
    """Validate a step run's own arguments: bad input is exit 2 whatever the claim's state."""
    validate_step(name, policy)
    if not isinstance(argv, list) or not all(isinstance(word, str) for word in argv):
        raise UsageError(f"the command must be a list of words, not {argv!r}",
                         hint='e.g. ["sh", "-c", "echo hi"]; a shell command line goes in `command`')
    if probe is not None and (policy != "unsafe" or not probe.strip()):
        raise UsageError("--probe takes a shell command, and only an unsafe step has an outcome to probe",
                         hint="e.g. --policy unsafe --probe 'curl -fs https://example.invalid/version | grep -q v2'")
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
    return EffectRequest(name, policy, step_input, argv, fresh, probe)


@dataclass(frozen=True)
class SettleRequest:
    """What `assay step settle` was asked: which step, what happened, and (with --input) which call of it."""

    name: str
    verdict: str
    sha: str | None


def check_settle(name: str, verdict: str, input_json: str | None) -> SettleRequest:
    validate_step(name, "unsafe")
    if verdict not in (HAPPENED, DID_NOT):
        raise UsageError("say what the inspection found: --happened or --did-not",
                         hint="or pass the inspection command after `--`: exit 0 means it happened, 1 it did not")
    return SettleRequest(name, verdict, input_sha(parse_input(input_json)) if input_json is not None else None)


def inspect(argv: list[str], cwd: str | os.PathLike[str] | None = None,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run an inspection (an outcome probe, a hook, or the command given to `assay step settle`): its evidence.
    It has ended when its command exits; anything that command left running is killed then (procs.run)."""
    started = time.monotonic()
    code, output = procs.run(argv, cwd, scrubbed_env() if env is None else env, timeout_s=PROBE_TIMEOUT_S)
    return {"command": argv, "exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000),
            "tail": output[-TAIL_BYTES:].decode("utf-8", "replace")}


def probe_runner(cwd: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> ProbeRunner:
    """Runs a step's outcome probe (a shell command) in `cwd`, with the probed intent's idempotency key in
    ASSAY_IDEMPOTENCY_KEY: exit 0 means the effect happened, 1 that it did not."""
    def run(probe: str, key: str) -> dict[str, Any]:
        base = scrubbed_env() if env is None else {k: v for k, v in env.items() if k != "ASSAY_SOCKET"}
        return inspect(["sh", "-c", probe], cwd, {**base, "ASSAY_IDEMPOTENCY_KEY": key})
    return run


class Hooks:
    """A desk's `before_step` and `after_step` (shell commands), run in the worktree with the agent's environment
    and the step's name, policy, input, idempotency key and (after) status and result in `ASSAY_STEP*`."""

    def __init__(self, before: str, after: str, cwd: str | os.PathLike[str], env: dict[str, str]) -> None:
        self.before_cmd, self.after_cmd, self.cwd = before, after, cwd
        self.env = env  # the agent's, as its context is filled in

    def _run(self, command: str, extra: dict[str, str]) -> dict[str, Any] | None:
        base = {k: v for k, v in self.env.items() if k != "ASSAY_SOCKET"}
        evidence = inspect(["sh", "-c", command], self.cwd, {**base, **extra})
        return None if evidence["exit_code"] == 0 else evidence

    def before(self, step: str, policy: str, input: Any, key: str) -> dict[str, Any] | None:
        if not self.before_cmd:
            return None
        return self._run(self.before_cmd, {"ASSAY_STEP": step, "ASSAY_STEP_POLICY": policy,
                                           "ASSAY_STEP_INPUT": canonical(input), "ASSAY_IDEMPOTENCY_KEY": key})

    def after(self, step: str, policy: str, key: str, status: str, result: Any) -> dict[str, Any] | None:
        if not self.after_cmd:
            return None
        return self._run(self.after_cmd, {"ASSAY_STEP": step, "ASSAY_STEP_POLICY": policy,
                                          "ASSAY_IDEMPOTENCY_KEY": key, "ASSAY_STEP_STATUS": status,
                                          "ASSAY_STEP_RESULT": canonical(result)[-TAIL_BYTES:]})


def verdict_of(evidence: dict[str, Any], verdict: str | None) -> str:
    """The verdict given, or the one an inspection's exit code tells (0 happened, 1 did not)."""
    if verdict:
        return verdict
    found = verdict_of_exit(int(evidence["exit_code"]))
    if found is None:
        raise UsageError(f"the inspection exited {evidence['exit_code']}: it tells neither way, so nothing is settled",
                         hint="exit 0 means the step happened, 1 that it did not; or say it with --happened/--did-not")
    return found


def open_context_session(claims: Claims, ctx: StepContext, indexed: bool = True) -> Session:
    """A session for a step command outside a desk; it runs outcome probes where it stands."""
    from assay.core.steps import open_session

    session = open_session(claims, ctx.brief, ctx.desk, ctx.epoch, ctx.run, call_notes=True,
                           indexed=indexed)  # a new process per step: it reads only what the step asks for
    session.probe_runner = probe_runner()
    return session


VALUE_KINDS = ("now", "uuid", "random")
MAX_VALUE_BYTES = 4096  # `assay step value random --bytes` takes 1 to this: a journal entry stays small


def check_value(kind: object, n_bytes: object) -> tuple[str, int]:
    """A value request as the CLI allows it, from whoever asks (the CLI, the desk's socket, `assay mcp`)."""
    if kind not in VALUE_KINDS:
        raise UsageError(f"invalid value for KIND: {kind!r} is not one of 'now', 'uuid', 'random'",
                         hint="assay step value now|uuid|random [--bytes N]")
    if isinstance(n_bytes, bool) or not isinstance(n_bytes, int) or not 1 <= n_bytes <= MAX_VALUE_BYTES:
        raise UsageError(f"invalid value for --bytes: {n_bytes!r} is not in the range 1<=x<={MAX_VALUE_BYTES}",
                         hint="e.g. assay step value random --bytes 32")
    return str(kind), n_bytes


def recorded_value(session: Session, kind: str, n_bytes: int) -> str:
    """A clock (`now`), `uuid` or `random` value of `n_bytes` (hex), recorded: a replayed run gets the same."""
    kind, n_bytes = check_value(kind, n_bytes)
    if kind == "now":
        value = f"{session.now():.6f}"
    elif kind == "uuid":
        value = session.uuid()
    else:
        value = session.random_bytes(n_bytes).hex()
    session.flush()
    return value


def run_effect(session: Session, request: EffectRequest) -> int:
    """Run the request's command as a durable step; returns its exit code, fresh or recorded."""
    name, argv = request.name, request.argv
    ran = []

    def effect(key: str) -> dict[str, Any]:
        ran.append(key)
        return _run_command(argv, key)

    try:
        result = session.step(name, effect, input=request.input, policy=request.policy, reuse=not request.fresh,
                              probe=request.probe)
    except BaseException as stop:
        _flush_quietly(session)  # replay and call notes count this run's calls: they must land
        if ran and isinstance(stop, (KeyboardInterrupt, Cancelled)) and not getattr(stop, "__notes__", None):
            return show(stopped(stop))  # the command was stopped and its end journaled: said as a desk's step says it
        raise
    session.flush()
    return show(returned(name, result, bool(ran)))  # in the words a desk's step gets (steprequest.py)


def _run_command(argv: list[str], key: str) -> dict[str, Any]:
    env = scrubbed_env()
    env["ASSAY_IDEMPOTENCY_KEY"] = key
    started = time.monotonic()
    # under a keeper: the command and all it starts die with this process, so nothing runs on with nobody
    # left to journal its end; it reads this process's stdin, as it would run in this shell
    group = procs.start(argv, env=env, stdin=0)
    try:
        code, tail, _ = relay(group)
    except (KeyboardInterrupt, Cancelled) as stop:
        group.stop(signal.SIGINT if isinstance(stop, KeyboardInterrupt) else signal.SIGTERM)
        group.finish()  # ended when all of it has: what the journal says next is then true
        raise
    finally:
        group.kill()
    return {"exit_code": code, "duration_ms": int((time.monotonic() - started) * 1000), "tail": tail}


def _flush_quietly(session: Session) -> None:
    """Flush while another error is on its way out: that error is the one the user must see."""
    try:
        session.flush()
    except Exception:  # noqa: BLE001
        pass


@dataclass(frozen=True)
class Settled:
    """What `assay step settle` journaled."""

    brief: str
    step: str
    intent: int
    seq: int
    verdict: str
    by: str


def settle_step(name: str, verdict: str | None, input_json: str | None, evidence_text: str | None, argv: list[str],
                ports: Ports, brief: str | None, desk: str | None, epoch: int | None, run: str | None,
                person: str) -> Settled:
    """Settle a step's unknown outcome. With the desk's context (an agent outside its desk's socket) the entry is
    the desk's, fenced by its epoch; with a brief alone it is a person's. A command after `--` is the inspection:
    it runs here, its output is the evidence, and its exit code the verdict when none is given."""
    validate_step(name, "unsafe")
    if not verdict and not argv:
        raise UsageError("say what the inspection found: --happened or --did-not, or give the inspection command",
                         hint="assay step settle deploy --did-not -- curl -fs https://example.invalid/health")
    evidence: dict[str, Any] = inspect(argv, os.getcwd()) if argv else {"said": evidence_text or ""}
    if evidence_text and argv:
        evidence["said"] = evidence_text
    found = verdict_of(evidence, verdict) if argv else str(verdict)
    request = check_settle(name, found, input_json)
    env = os.environ
    if (desk or env.get("ASSAY_DESK")) and (run or env.get("ASSAY_RUN")):
        ctx = context_from(brief, desk, epoch, run)
        session = open_context_session(ports.claims, ctx, indexed=False)
        entry = session.settle(request.name, request.verdict, by=f"agent:{ctx.desk}", evidence=evidence,
                               sha=request.sha)
        return Settled(ctx.brief, name, int(entry.intent or 0), entry.seq, request.verdict, f"agent:{ctx.desk}")
    target = brief or env.get("ASSAY_BRIEF")
    if not target:
        raise UsageError("which brief? pass --brief", hint=f"assay step settle {name} --brief BRIEF --did-not")
    from assay.core.journal import append_built_as_person
    from assay.core.outcomes import settle_fields, settle_target, unknown_fields

    by = f"person:{person}"

    def build(entries: list[Any]) -> list[dict[str, Any]]:
        intent, cut_off = settle_target(entries, request.name, request.sha)
        out = [{"kind": "outcome_unknown", **unknown_fields(intent)}] if cut_off else []
        return out + [{"kind": "result", **settle_fields(intent, request.verdict, by, evidence)}]

    written = append_built_as_person(ports.claims, target, build, person)
    return Settled(target, name, int(written[-1].intent or 0), written[-1].seq, request.verdict, by)
