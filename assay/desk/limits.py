"""An agent run's limits: its time limit, its idle limit, and what its last words say of its model.

An agent that shows no sign of work (no output but its model's troubles, no call to its desk, no change to its
conversation) for `agent.idle_s` is ended as idle; one that exits saying its model refused its key, is out of
quota or cannot be reached failed for no fault of the brief. Both raise AgentCannotWork: the brief is handed
back with its attempts unspent, in the CLI's own words.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable

from assay.core import lives
from assay.core.deskspec import DeskSpec
from assay.errors import AgentCannotStart, AgentCannotWork

STOP_GRACE_S = 10.0  # an agent stopped for its time or idle limit gets this long after SIGTERM before SIGKILL
# What an agent CLI says when its model, not the brief, is the trouble: the kind, and what a person fixes
MODEL_TROUBLE = (
    ("refused the agent's credentials",
     re.compile(r"\b(401|403)\b.{0,40}(unauthori[sz]ed|forbidden|invalid|key|auth)|unauthori[sz]ed|"
                r"invalid[ _-]?(x-)?api[ _-]?key|incorrect api key|authentication[_ ]?error|invalid bearer|"
                r"please run /login|not logged in|not able to authenticate", re.I),
     "give the agent a valid model key (in the desk's environment, passed on by `env_allow`)"),
    ("is out of quota or rate-limited",
     re.compile(r"\b(429|529)\b|rate[ _]?limit(ed|[ _]?error| exceeded| reached)|too many requests|"
                r"insufficient[_ ]quota|exceeded your( current)? quota|credit balance|usage limit|overloaded_error",
                re.I),
     "wait for the model's quota or rate limit to reset, or raise it"),
    ("could not be reached",
     re.compile(r"connection refused|econnrefused|could not resolve|enotfound|eai_again|network is unreachable|"
                r"unable to connect|failed to connect|error sending request|stream disconnected|reconnecting\.\.\.|"
                r"\b(502|503|504)\b",
                re.I),
     "check the agent's model endpoint (its base URL or proxy) and this machine's network"),
)
_SECRETISH = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH", re.I)
# A CLI's own error line, as opposed to the model's prose: what an agent that exits 0 (aider does, on a refused
# key) must have said for its model's trouble to count
_CLI_ERROR = re.compile(r"^(litellm\.\w*error\b|api error\b|error:)", re.I)


def model_trouble(tail: str, env: dict[str, str], exited_ok: bool = False) -> tuple[str, str, str] | None:
    """What the agent's last lines say of its model, if they show the model (not the work) failed: the kind of
    failure, the CLI's own words (key-like values of the agent's environment masked), and what to fix. After an
    exit 0, only if those lines hold one of the CLI's own error lines."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()][-4:]  # a CLI's last words: its error
    if exited_ok and not any(_CLI_ERROR.match(line) for line in lines):
        return None
    for kind, pattern, fix in MODEL_TROUBLE:
        words = [line[:300] for line in lines if pattern.search(line)]
        if words:
            said = " / ".join(dict.fromkeys(words[-2:]))
            for name, value in env.items():
                if _SECRETISH.search(name) and len(value) >= 8:
                    said = said.replace(value, "[redacted]")
            return kind, said, fix
    return None


def judge(spec: DeskSpec, code: int, stopped: str, fenced: bool, tail: str, command: str,
           env: dict[str, str]) -> None:
    """Raise when the run says nothing of the brief: the agent could not start (126, 127), its model failed, or it
    went idle. Such a run is no attempt at the work: the brief is handed back with its attempts unspent."""
    if fenced or stopped == "time":
        return
    if stopped == "idle":
        trouble = model_trouble(tail, env)
        said = f"; it last said: {trouble[1]}" if trouble else ""
        raise AgentCannotWork(spec.name, f"it showed no sign of work for {spec.idle_s}s (no output, no step, no "
                              f"change to its conversation) and was ended as idle{said}",
                              "check that the agent's model answers (run the agent command by hand), or raise "
                              f"`agent.idle_s` in desks/{spec.name}.yaml")
    if code in (126, 127):
        raise AgentCannotStart(spec.name, command, f"it exited {code}: {tail.strip()[-300:]}", spec.install)
    trouble = model_trouble(tail, env, exited_ok=code == 0)
    if trouble is not None:
        kind, said, fix = trouble
        raise AgentCannotWork(spec.name, f"its model {kind} (exit {code}): {said}", fix)


class Limits:
    """The agent's time limit and idle limit: past either, the agent is stopped (SIGTERM: the CLIs stop their own
    tool processes then; SIGKILL after a grace) and `why` says which ("time", "idle"). Signs of work: a change
    in what `signs` returns (output lines, calls to the desk, the conversation's size), or `busy` (a step runs)."""

    def __init__(self, spec: DeskSpec, signs: Callable[[], object], busy: Callable[[], bool]) -> None:
        self.spec, self.signs, self.busy = spec, signs, busy
        self.agent: subprocess.Popen[str] | None = None  # the agent process now (a new one after steering)
        self.why = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = lives.thread(self._watch)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        begun = last = time.monotonic()
        seen, agent = self.signs(), self.agent
        tick = max(0.1, min(5.0, self.spec.timeout_s / 20, self.spec.idle_s / 10))
        while not self._stop.wait(tick):
            now, signs = time.monotonic(), self.signs()
            if signs != seen or self.busy() or self.agent is not agent:
                seen, agent, last = signs, self.agent, now
            self.why = "time" if now - begun >= self.spec.timeout_s else "idle" if now - last >= self.spec.idle_s \
                else ""
            if self.why:
                _stop(self.agent)
                return


def _stop(proc: subprocess.Popen[str] | None) -> None:
    """SIGTERM (the CLIs stop their own tool processes then), SIGKILL after a grace."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
