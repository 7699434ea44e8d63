"""Errors are types: each carries the exit code a user sees (DESIGN.md, *Exit codes*).

This module is the one list of exit codes: `assay help exit-codes` and docs/architecture.md's table are made
from `EXIT_CODES`, `OTHER_EXITS` and the classes here."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence

EXIT_CODES = {  # DESIGN.md, *Exit codes*: what each class's `code` means
    0: "ok",
    1: "forge or unexpected error",
    2: "bad input or usage",
    3: "conflict (lost the race, not the holder, fenced)",
    4: "refused (repeat of an outcome-unknown effect)",
    5: "needs a person (replay mismatch, blocked)",
}
WRITTEN_ALONE = "written by the forge without the rest of its atomic push"  # a push result's detail: the forge
# wrote this ref and refused others of the same atomic push (`core/git/push.py`); the host's push group answers so
DESK_GONE = 75  # `assay step` when its desk went away mid-step (EX_TEMPFAIL): the outcome is the journal's
OTHER_EXITS = {  # exits no error class makes
    DESK_GONE: "`assay step` lost its desk mid-step and stopped its command: the journal holds the outcome",
    129: "stopped by SIGHUP (a closed terminal): as Ctrl-C",
    130: "stopped by Ctrl-C (SIGINT): a desk hands its brief back, a step journals its end",
    143: "stopped by SIGTERM (timeout, systemctl stop, a cancelled CI job): as Ctrl-C",
}
PASSED_ON = "`assay step run` exits with its command's exit code (fresh or recorded); `assay verify` and " \
    "`assay audit` exit 1 when a row or a check fails."


class AssayError(Exception):
    """Base of every error a user meets; never a traceback."""

    code = 1
    unknown_brief = ""  # the brief id this error says the forge does not know (a likely typo), if it says so

    def __init__(self, message: str, hint: str = "") -> None:
        from assay.core.credentials import redact  # every error's words are masked once, where they are made

        message, hint = redact(message), redact(hint)
        super().__init__(message)
        self.message = message
        self.hint = hint

    def near(self, names: Sequence[str]) -> None:
        """Name the known briefs close to `unknown_brief` first in the hint ("did you mean ...?")."""
        if names:
            said = " or ".join(repr(n) for n in names)
            self.hint = f"did you mean {said}?" + (f" otherwise {self.hint}" if self.hint else "")


class ForgeError(AssayError):
    """The forge could not be reached, or git failed unexpectedly."""

    code = 1


class Busy(ForgeError):
    """Other writers kept moving a ref: nothing more was written; running again is safe."""


class Throttled(ForgeError):
    """GitHub's limits ask a longer wait than the caller may make.

    The call wrote nothing (the limit: GitHub's own, or the fleet's budget of its writes). A desk ends its run as
    paused, not dead (no attempt spent), hands the claim back, and tries again after the wait."""

    def __init__(self, message: str, hint: str = "", wait_s: float = 0.0) -> None:
        super().__init__(message, hint)
        self.wait_s = wait_s


class ForgeRefused(ForgeError):
    """The forge refused a write no other writer explains (a hook, a stale lock)."""

    def __init__(self, message: str, hint: str = "", lock: str | None = None) -> None:
        super().__init__(message, hint)
        self.lock = lock  # the lock file on the forge that refused it, when git named one


class ForgeDenied(ForgeError):
    """GitHub's 403, no rate limit: the token lacks a permission (`needs`)."""

    def __init__(self, message: str, hint: str = "", needs: str = "") -> None:
        super().__init__(message, hint)
        self.needs = needs


class UsageError(AssayError):
    """Bad input: a malformed id, file, option or configuration."""

    code = 2


class BriefIdInvalid(UsageError):
    """A brief id that is not a safe file name and ref component."""

    def __init__(self, brief: str, problem: str) -> None:
        super().__init__(
            f"invalid brief id {brief!r}: {problem}",
            hint="brief ids are 1-64 characters of a-z 0-9 . _ -, starting with a letter or digit",
        )
        self.brief = self.unknown_brief = brief
        self.problem = problem


class BriefInvalid(UsageError):
    """A brief file that does not validate; carries file and line."""

    def __init__(self, path: str, line: int | None, problem: str, hint: str = "") -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {problem}", hint=hint)
        self.path = path
        self.line = line
        self.problem = problem


class BriefNotFound(UsageError):
    """The forge's main has no `briefs/<id>.md` for this brief."""

    def __init__(self, brief: str, where: str) -> None:
        super().__init__(
            f"brief {brief!r} is not on {where}",
            hint=f"add briefs/{brief}.md to main and push it, then claim again",
        )
        self.brief = self.unknown_brief = brief


class NoSuchBrief(UsageError):
    """A brief this forge has never had, on main or in any ref."""

    def __init__(self, brief: str) -> None:
        super().__init__(f"no brief {brief!r} on this forge: it is not on main, and was never claimed or retired",
                         hint="`assay briefs` lists the briefs on main; check the name and the forge (--forge)")
        self.brief = self.unknown_brief = brief


class ConfigInvalid(UsageError):
    """A configuration file (`.assay.yaml`, a desk) that does not validate."""


class AgentCannotStart(UsageError):
    """A desk's agent command cannot run (exit 126/127): nothing is claimed."""

    def __init__(self, desk: str, command: str, why: str, install: str = "") -> None:
        super().__init__(f"desk {desk!r} cannot start its agent {command!r}: {why}",
                         hint=(f"install it ({install}), " if install else "install it, ")
                         + f"or put it on the PATH the desk passes, or change `agent.command` in desks/{desk}.yaml")
        self.desk, self.command, self.why = desk, command, why


class AgentCannotWork(AgentCannotStart):
    """The agent's model failed it, or it went idle: no attempt spent.

    Not the brief's fault (its model refused the key, was out of reach or of quota, or never answered): the attempt
    is not counted and the brief is handed back."""

    def __init__(self, desk: str, why: str, fix: str) -> None:
        UsageError.__init__(self, f"desk {desk!r}: its agent could not work: {why}; {fix}, then run "
                            f"`assay desk run {desk}`",
                            hint="the brief was handed back with its attempts unspent; any desk may take it again")
        self.desk, self.command, self.why = desk, "", why


class RecordInvalid(AssayError):
    """A ref on the forge holds no valid v1 record: bad input, like a bad file."""

    code = 2

    def __init__(self, ref: str, problem: str) -> None:
        super().__init__(
            f"{ref}: {problem}",
            hint="inspect it with `git show <ref>`; a newer Assay may have written it",
        )
        self.ref = ref
        self.problem = problem


class NotATree(UsageError):
    """A path that should be a folder is some other object (a file, say)."""

    def __init__(self, spec: str, kind: str) -> None:
        super().__init__(f"{spec} is a {kind}, not a folder")
        self.spec = spec
        self.kind = kind


class Conflict(AssayError):
    """Lost a race, not the holder, or fenced."""

    code = 3


class Fenced(Conflict):
    """This desk no longer holds the brief at its epoch: stop, write nothing."""

    def __init__(self, brief: str, desk: str, epoch: int, now: str) -> None:
        super().__init__(f"desk {desk!r} is fenced off brief {brief!r} at epoch {epoch}: {now}",
                         hint="another desk, a sweeper or a person took the claim; stop working on this brief")
        self.brief = brief
        self.desk = desk
        self.epoch = epoch


class ClaimLost(Conflict):
    """Another holder has the brief live: not this caller's."""

    def __init__(self, brief: str, state: str, desk: str, holder: str, epoch: int, why: str = "",
                 hint: str = "pick another brief, or wait for its release or expiry") -> None:
        super().__init__(f"brief {brief!r} is {state} by desk {desk!r} (holder {holder}, epoch {epoch}){why}", hint)
        self.brief = brief
        self.state = state
        self.desk = desk
        self.holder = holder
        self.epoch = epoch


class Queued(Conflict):
    """Its footprint overlaps a live claim's: it waits; nothing was written."""

    def __init__(self, brief: str, behind: dict[str, str]) -> None:
        said = "; ".join(f"{other} ({globs})" for other, globs in behind.items())
        super().__init__(f"brief {brief!r} is queued behind {said}: their footprints (`touches:`) overlap",
                         hint="it is taken once those are done or released; take another brief meanwhile")
        self.brief = brief
        self.behind = list(behind)


class _IllegalChange(Conflict):
    """A record's state does not allow this change; nothing was written."""

    def __init__(self, brief: str, action: str, state: str, message: str, why: str = "") -> None:
        super().__init__(message + (f" ({why})" if why else ""))
        self.brief, self.action, self.state = brief, action, state


class IllegalTransition(_IllegalChange):
    """The transition table refuses this change of the claim; nothing was written."""

    def __init__(self, brief: str, action: str, state: str, why: str = "") -> None:
        super().__init__(brief, action, state, f"cannot {action} brief {brief!r}: its claim is {state}", why)
        if state == "absent":  # never claimed: perhaps never a brief
            self.unknown_brief = brief


class Refused(AssayError):
    """A repeat of an effect whose outcome is unknown."""

    code = 4


class HookRefused(Refused):
    """The desk's `before_step` hook refused the step; it never ran."""

    def __init__(self, step: str, evidence: str) -> None:
        super().__init__(f"the desk's before_step hook refused step {step!r}: {evidence}",
                         hint="the hook is the desk's policy (hooks.before_step in desks/<name>.yaml); ask its "
                              "owner, or do without the step")


class NeedsPerson(AssayError):
    """Replay mismatch or a blocked brief."""

    code = 5


def error_lines(message: str, hint: str = "") -> str:
    """An error as every command says it: `error: …`, then `hint: …` when there is one."""
    return f"error: {message}\n" + (f"hint: {hint}\n" if hint else "")


def unknown_message(name: str) -> str:
    return (f"The previous `{name}` operation was interrupted. It may or may not have completed successfully. "
            "Do not repeat it blindly. Inspect the current system state before deciding what to do.")


class OutcomeUnknown(Refused):
    """The first repeat of an interrupted unsafe step: refused, exit 4."""

    def __init__(self, name: str) -> None:
        super().__init__(unknown_message(name),
                         hint="Operation will NOT be replayed automatically; call it again deliberately to proceed")
        self.step = name


class ReplayMismatch(NeedsPerson):
    """A replay asked otherwise than the journal recorded; the brief is blocked."""

    def __init__(self, brief: str, problem: str) -> None:
        super().__init__(f"replay mismatch on brief {brief!r}: {problem}",
                         hint="the brief is now blocked; a person must inspect `assay journal` and release it")


class Cancelled(BaseException):
    """SIGTERM arrived while a step ran (Ctrl-C arrives as KeyboardInterrupt), or its desk stopped it.

    `reason` goes into the journal with the step's end (`cancelled`, unless said otherwise)."""

    def __init__(self, reason: str = "cancelled", started: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.started = started  # False: the effect is known never to have begun


class IllegalReviewChange(_IllegalChange):
    """The review's state does not allow this change; nothing was written."""

    def __init__(self, brief: str, action: str, state: str, why: str = "") -> None:
        super().__init__(brief, action, state, f"cannot {action} the review of {brief!r}: it is {state}", why)


class NoReview(IllegalReviewChange):
    """A review change asked of a brief that has no review."""

    code = 2

    def __init__(self, brief: str, action: str, where: str = "") -> None:
        super().__init__(brief, action, "absent", where or "there is no review of it")
        self.hint = "`assay review list` shows the reviews there are; a desk opens one when it works the brief"


class MergeConflict(Conflict):
    """The branch does not merge cleanly into its base; nothing was written."""

    def __init__(self, brief: str, branch: str, base: str) -> None:
        super().__init__(f"{branch} does not merge cleanly into {base}; rebase it",
                         hint=f"rebase {branch} onto {base}, push it, then merge {brief!r} again")
        self.brief = brief
        self.branch = branch
        self.base = base


class StepFailed(AssayError):
    """A step's function raised; the failure is recorded and replayed as such."""

    def __init__(self, name: str, error: str) -> None:
        super().__init__(f"step {name!r} failed: {error}")
        self.step = name
        self.error = error


class IndexDamaged(AssayError):
    """The journal index in the local cache failed; it is dropped and rebuilt."""


class NoMainBranch(UsageError):
    """The forge has no `main` branch: nothing can be listed or claimed."""

    def __init__(self) -> None:
        super().__init__("the forge has no main branch", hint="push the repository's main to the forge first")


def coded_errors() -> list[type[AssayError]]:
    """The error classes a user meets, by exit code, each code's in the order this module defines them."""
    found = [c for name, c in globals().items()
             if isinstance(c, type) and issubclass(c, AssayError) and not name.startswith("_")]
    return sorted(found, key=lambda c: c.code)


def exit_codes() -> list[tuple[int, str, list[tuple[str, str]]]]:
    """Every exit code `assay` gives: (code, meaning, [(error class, the first line of its docstring)])."""
    import inspect

    by_code: dict[int, list[tuple[str, str]]] = {code: [] for code in EXIT_CODES}
    for cls in coded_errors():
        by_code[cls.code].append((cls.__name__, (inspect.getdoc(cls) or "").splitlines()[0]))
    return [*((code, EXIT_CODES[code], by_code[code]) for code in EXIT_CODES),
            *((code, text, []) for code, text in OTHER_EXITS.items())]
