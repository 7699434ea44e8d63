"""The commands scripts and agents call in loops (`claim`, `renew`, `release`, `step run` with no desk), parsed
without click.

A whole `assay renew` process is a few times a push: click, rich and the full command line
would be most of it. `SPECS` states each command's arguments and options as `cli.py` declares
them (tests/test_lean.py compares the two, so they cannot drift); `run` takes only the plain
forms (`--opt value`, `--opt=value`, flags, options among the arguments) and returns None
for anything else (help, an unknown or malformed option, a missing value), which the full
command line then parses and answers. The commands' bodies are here, once: `cli.py` calls them.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from assay.config import Ports

FLAG = "flag"
# option -> (its parameter, its variable in the environment or "", its kind: FLAG, int, str or the choices, default,
# required)
Option = tuple[str, str, object, object, bool]
FORGE: dict[str, Option] = {"--forge": ("forge", "", str, None, False), "--json": ("as_json", "", FLAG, False, False),
                            "--jq": ("jq", "", str, None, False)}
SPECS: dict[str, tuple[tuple[str, ...], dict[str, Option]]] = {
    "claim": (("brief",), {"--desk": ("desk", "ASSAY_DESK", str, None, True),
                           "--lease": ("lease_s", "", int, 600, False),
                           "--singleton": ("singleton", "", FLAG, False, False), **FORGE}),
    "renew": (("brief",), {"--desk": ("desk", "ASSAY_DESK", str, None, True),
                           "--epoch": ("epoch", "ASSAY_EPOCH", int, None, False),
                           "--lease": ("lease_s", "", int, None, False), **FORGE}),
    "release": (("brief",), {"--desk": ("desk", "ASSAY_DESK", str, None, False),
                             "--outcome": ("outcome", "", ("released", "done", "abandoned"), "released", False),
                             "--reason": ("reason", "", str, "", False),
                             "--epoch": ("epoch", "ASSAY_EPOCH", int, None, False),
                             "--force": ("force", "", FLAG, False, False), **FORGE}),
    "step run": (("command",), {"--name": ("name", "", str, None, True),
                                "--policy": ("policy", "", ("safe", "idempotent", "unsafe"), "unsafe", False),
                                "--input": ("input_json", "", str, None, False),
                                "--fresh": ("fresh", "", FLAG, False, False),
                                "--probe": ("probe", "", str, None, False),
                                "--forge": ("forge", "", str, None, False),
                                "--brief": ("brief", "", str, None, False),
                                "--desk": ("desk", "", str, None, False),
                                "--epoch": ("epoch", "", int, None, False),
                                "--run": ("run", "", str, None, False)}),
}
REST = frozenset({"step run"})  # its one argument is the command: every word from the first that is not an option


def parse(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(command, its parameters) for a plain call of one of `SPECS`; None for anything else."""
    found = _command(argv)
    if found is None:
        return None
    name, rest = found
    positional, options = SPECS[name]
    read = _arguments(rest, options, positional[0] if name in REST else None)
    if read is None:
        return None
    values, words = read
    if name in REST:
        values.setdefault(positional[0], ())
    elif len(words) != len(positional):
        return None
    else:
        values.update(zip(positional, words, strict=True))
    if not _from_environment(values, options):
        return None
    return name, values


def _command(argv: list[str]) -> tuple[str, list[str]] | None:
    """The command of `SPECS` `argv` names and the words after its name; None for any other."""
    if not argv:
        return None
    name, rest = argv[0], argv[1:]
    if name == "step" and rest[:1] == ["run"]:
        name, rest = "step run", rest[1:]
    elif name == "claim" and rest[:1] == ["take"]:
        rest = rest[1:]
    elif name == "claim" and rest[:1] == ["history"]:
        return None
    if name not in SPECS:
        return None
    return name, rest


def _arguments(rest: list[str], options: dict[str, Option],
               rest_param: str | None) -> tuple[dict[str, Any], list[str]] | None:
    """The options' values and the positional words in `rest`; from the first word on, all of it is `rest_param`'s
    when the command has one (`REST`). None for a form the full command line must parse."""
    values: dict[str, Any] = {}
    words: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if rest_param is not None and (arg == "--" or not arg.startswith("-")):
            values[rest_param] = tuple(rest[i + (arg == "--"):])
            break
        if arg == "--" or arg == "-" or (arg.startswith("-") and arg[1:2] != "-"):
            return None  # `--`, short options, `-h`: the full command line
        if not arg.startswith("--"):
            words.append(arg)
        else:
            key, eq, given = arg.partition("=")
            if key not in options:
                return None
            dest, _, kind, _, _ = options[key]
            if kind == FLAG:
                if eq:
                    return None
                values[dest] = True
            else:
                if not eq:
                    if i + 1 >= len(rest):
                        return None
                    i += 1
                    given = rest[i]
                value = _convert(given, kind)
                if value is None:
                    return None
                values[dest] = value
        i += 1
    return values, words


def _from_environment(values: dict[str, Any], options: dict[str, Option]) -> bool:
    """Each option not given takes its variable's value, else its default; False if a variable's value does not
    convert or a required option has neither."""
    for dest, env, kind, default, required in options.values():
        if dest in values:
            continue
        found = os.environ.get(env) if env else None  # an empty variable counts as unset, as in click
        if found:
            value = _convert(found, kind)
            if value is None:
                return False
            values[dest] = value
        elif required:
            return False
        else:
            values[dest] = default
    return True


def _convert(text: str, kind: object) -> object:
    if kind is int:
        try:
            return int(text.strip())
        except ValueError:
            return None
    if isinstance(kind, tuple):
        return text if text in kind else None
    return text


def run(argv: list[str]) -> int | None:
    """An exit code, or None to leave `argv` to the full command line."""
    parsed = parse(argv)
    if parsed is None:
        return None
    name, values = parsed
    if name == "step run":
        return guarded(lambda: step_run(**values), debug_asked)
    command = COMMANDS[name]
    forge, jq = values.pop("forge"), values.pop("jq")
    values["as_json"] = values["as_json"] or jq is not None
    ahead = values["brief"] if name != "release" or values["desk"] or values["force"] else None  # else bad input
    return guarded(lambda: _with_ports(forge, ahead, lambda ports: command(ports=ports, **values), jq), debug_asked)


def _with_ports(forge: str | None, brief: str | None, call: Callable[[Ports], None], jq: str | None = None) -> None:
    """`call` on the forge's ports; with `jq`, its JSON goes through that program, compiled before anything runs."""
    from assay.config import Ports
    from assay.errors import AssayError
    from assay.jqfilter import filtering

    with filtering(jq):
        ports = Ports(forge)
        try:
            prefetch(ports, brief)
            call(ports)
        except AssayError as error:
            if error.unknown_brief:  # as cli.pass_ports: did you mean ...?
                from assay.core.retired import name_near_briefs

                name_near_briefs(ports.git, error)
            raise
        finally:
            ports.close()


def prefetch(ports: Ports, brief: str | None) -> None:
    """Start reading the brief's refs on a forge on this machine (its claim and journal, main, the retired index:
    what each of these commands lists first) while the command's own code is loaded. Only a speed-up: an id that
    is no brief's, or a forge that cannot be opened, is left to the command, which reports it in its own order."""
    from assay.core.records import MAIN_REF, claim_ref, journal_ref
    from assay.core.retired import RETIRED_REF

    try:
        if brief:
            refs = (claim_ref(brief), journal_ref(brief), MAIN_REF, RETIRED_REF)  # a bad id: nothing opened
            ports.git.prefetch(*refs)
    except Exception:  # the command meets the same trouble, and says what it is
        pass


CLAIMS_PREFIX, JOURNAL_PREFIX = "refs/assay/claims/", "refs/assay/journal/"  # `records`' (tests/test_ahead.py)
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")


def fetch_ahead(forge: str | None, brief: str | None) -> None:
    """Start a new machine's first read of the brief (one shallow fetch of its claim and its journal, as the
    journal's reader makes it: `journal.writer.fetch_first`) before the command's code loads, where the forge is
    named (`--forge`, ASSAY_FORGE) and has no cache here yet (`ahead.fetch`). Only a speed-up: an id that is no
    brief's, or a forge that cannot be reached, is left to the command, which reports it in its own order."""
    if not brief or not (forge or os.environ.get("ASSAY_FORGE")) or not set(brief) <= _ID_CHARS or len(brief) > 64:
        return
    from assay.config import resolve_forge
    from assay.core.git import ahead
    from assay.core.journal.spacing import first_depth

    try:
        url = resolve_forge(forge).url
    except Exception:  # the command meets the same trouble, and says what it is
        return
    ahead.fetch(url, (CLAIMS_PREFIX + brief, JOURNAL_PREFIX + brief), first_depth())


def debug_asked() -> bool:
    """Whether ASSAY_DEBUG asks for tracebacks (as `--debug` does)."""
    return os.environ.get("ASSAY_DEBUG", "").strip().lower() not in ("", "0", "false", "f", "no", "n", "off")


def guarded(call: Callable[[], object], debug: Callable[[], bool]) -> int:
    """Run a command: a user's mistake is one `error:` line and its exit code, never a traceback (unless `debug()`
    says tracebacks were asked for)."""
    from assay.errors import AssayError, Cancelled

    try:
        rv = call()
    except AssayError as exc:
        if debug():
            raise
        from assay.views import render_error

        render_error(exc.message, exc.hint)
        return exc.code
    except KeyboardInterrupt as exc:
        return interrupted(exc)
    except Cancelled:
        sys.stderr.write("cancelled by SIGTERM; the step's end is recorded in the journal\n")
        return 143
    except Exception as exc:  # a bug, not a user mistake: still no traceback unless asked
        if debug() or os.environ.get("ASSAY_DEBUG"):
            raise
        from assay.views import render_error

        render_error(f"unexpected {type(exc).__name__}: {exc}", "run again with ASSAY_DEBUG=1 for a traceback")
        return 1
    return rv if isinstance(rv, int) else 0


def interrupted(exc: KeyboardInterrupt) -> int:
    """Ctrl-C exits 130; SIGTERM and SIGHUP, which do what Ctrl-C does (`entry.stop_as_interrupt`), 128 + their
    number, as a shell reports a command the signal ended."""
    import signal

    name = str(exc.args[0]) if exc.args else ""
    if name in ("SIGTERM", "SIGHUP"):
        sys.stderr.write(f"interrupted by {name}\n")
        return 128 + int(signal.Signals[name])
    sys.stderr.write("interrupted\n")
    return 130


# -- the commands' bodies (cli.py calls these too) ---------------------------------------------------------------

def claim(ports: Ports, brief: str, desk: str, lease_s: int, singleton: bool, as_json: bool) -> None:
    from assay import views

    view = views.claim_view(ports.claims.claim(brief, desk, lease_s, singleton=singleton), time.time())
    views.print_json(view) if as_json else views.render_claim_result("claimed", view)


def renew(ports: Ports, brief: str, desk: str, epoch: int | None, lease_s: int | None, as_json: bool) -> None:
    from assay import views

    view = views.claim_view(ports.claims.renew(brief, desk, epoch=epoch, lease_s=lease_s), time.time())
    views.print_json(view) if as_json else views.render_claim_result("renewed", view)


def release(ports: Ports, brief: str, desk: str | None, outcome: str, reason: str, epoch: int | None, force: bool,
            as_json: bool) -> None:
    from assay import views
    from assay.core import custody
    from assay.errors import UsageError

    if force:
        result = custody.force_release(ports.claims, brief, reason, by=person())
    elif not desk:
        raise UsageError("--desk is required (or --force with --reason, for a person)")
    else:
        result = custody.release(ports.claims, brief, desk, outcome=outcome, reason=reason, epoch=epoch)
    view = views.claim_view(result, time.time())
    views.print_json(view) if as_json else views.render_claim_result("released", view)


def step_run(name: str, policy: str, input_json: str | None, fresh: bool, probe: str | None, forge: str | None,
             brief: str | None, desk: str | None, epoch: int | None, run: str | None, command: tuple[str, ...]) -> int:
    """`assay step run` straight to the forge (no desk serving it): the command's exit code, fresh or recorded."""
    from assay.config import Ports

    fetch_ahead(forge, brief or os.environ.get("ASSAY_BRIEF"))
    with Ports(forge) as ports:
        prefetch(ports, brief or os.environ.get("ASSAY_BRIEF"))
        from assay.desk.effects import check_effect, context_from, open_context_session, run_effect

        request = check_effect(name, policy, input_json, list(command), fresh, probe)  # bad input: said before
        ctx = context_from(brief, desk, epoch, run)  # anything is written (or the forge's own trouble is reported)
        return run_effect(open_context_session(ports.claims, ctx), request)


def person() -> str:
    """Who a person acting from this shell is, for the records: ASSAY_PERSON, the login name ($USER, $LOGNAME),
    else who git would name (`user.name`, `user.email`), else the account's name as the system has it (git's own
    last resort, where a cron job or a container has no $USER); a placeholder only when none of them is known."""
    named = os.environ.get("ASSAY_PERSON") or os.environ.get("USER") or os.environ.get("LOGNAME")
    if named:
        return named
    from assay.core.git import configured_person

    named = configured_person()
    if named:
        return named
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name or "a-person"
    except (ImportError, KeyError):  # no passwd entry for this uid (a container's arbitrary uid), or not Unix
        return "a-person"


COMMANDS: dict[str, Callable[..., None]] = {"claim": claim, "renew": renew, "release": release}
