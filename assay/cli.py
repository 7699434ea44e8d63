"""The `assay` command line: each command parses, calls one function, renders."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from assay import __version__, lean
from assay.core.records import STATES, WORK_BRANCH_PREFIX
from assay.errors import AssayError, NoMainBranch

BRIEF_STATES = ("ready", "needs", "queued", *STATES, "invalid")

if TYPE_CHECKING:
    from assay.config import Ports

_debug = False


def forge_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--forge", metavar="URL|PATH",
                        help="The forge (git URL or path). Default: ASSAY_FORGE, .assay.yaml, then origin.")(f)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--json`, and `--jq EXPR`: the JSON through a jq program (compiled before the command runs)."""
    @functools.wraps(f)
    def wrapper(*args: Any, jq: str | None, as_json: bool, **kwargs: Any) -> Any:
        from assay.jqfilter import filtering

        with filtering(jq):
            return f(*args, as_json=as_json or jq is not None, **kwargs)
    wrapper = click.option("--jq", metavar="EXPR", help="Print what the jq program EXPR selects from the JSON, a "
                           "result a line, strings bare (as gh's --jq); needs the jq extra: pip install "
                           "'assay-desks[jq]'.")(wrapper)
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(wrapper)


def desk_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--desk", required=True, envvar="ASSAY_DESK", metavar="NAME",
                        help="The desk acting (default: ASSAY_DESK).")(f)


def pass_ports(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--forge`, turned into the command's `ports` (git, claims, reviews), closed when the command ends; an error
    naming a brief the forge does not know gets the close ids in its hint."""
    @functools.wraps(f)
    def wrapper(*args: Any, forge: str | None, **kwargs: Any) -> Any:
        from assay.config import Ports

        ports = Ports(forge)
        try:
            return f(*args, ports=ports, **kwargs)
        except AssayError as error:
            if error.unknown_brief:  # a mistyped id: say which briefs are close (did you mean ...?)
                from assay.core.retired import name_near_briefs

                name_near_briefs(ports.git, error)
            raise
        finally:
            ports.close()
    return forge_option(wrapper)


TASKS = (("Start", ("init", "demo", "brief", "briefs")),
         ("Run desks and hold briefs", ("desk", "claim", "claims", "renew", "release", "wait", "wake", "steer",
                                        "event")),
         ("Watch and judge", ("board", "sweep", "audit", "report", "journal")),
         ("Review and finish", ("review", "land", "verify", "retire")),
         ("Inside an agent's run", ("step", "mcp")),
         ("Help and shell", ("help", "completion")))


class _TaskGroup(click.Group):
    """The top-level help lists commands by task, not alphabetically, each with its whole first sentence."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed = [name for _, names in TASKS for name in names]
        rest = sorted(set(self.commands) - set(listed))
        for title, names in (*TASKS, *([("Other", tuple(rest))] if rest else [])):
            rows = [(n, self.commands[n].get_short_help_str(limit=200)) for n in names if n in self.commands]
            with formatter.section(title):
                formatter.write_dl(rows)
        from assay.cliexamples import GLOSSARY

        with formatter.section("Words"):
            formatter.write_dl([(word, meaning.replace("`", "")) for word, meaning in GLOSSARY])


@click.group(cls=_TaskGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="ASSAY_DEBUG", help="Show tracebacks for unexpected errors.")
@click.version_option(__version__, prog_name="assay")
def cli(debug: bool) -> None:
    """Assay: many coding-agent desks sharing one repository safely, through the git forge."""
    global _debug
    _debug = debug


@cli.command()
@click.option("--local-forge", type=click.Path(path_type=Path), metavar="DIR",
              help="Create a bare repository at DIR and use it as the forge (no server needed).")
@click.option("--github", is_flag=True, help="Also write GitHub workflows: sweeps on a schedule, verify rows on "
              "pull requests, the board on GitHub Pages (.github/workflows/assay-*.yml).")
@click.option("--workflows", metavar="OWNER/REPO@COMMIT",
              help="With --github: write small callers of the reusable workflows in OWNER/REPO at COMMIT "
              "(default: copies of them).")
@click.option("--assay-from", metavar="OWNER/REPO@COMMIT",
              help="With --github: the Assay the workflows install, pinned to a commit (OWNER/REPO@COMMIT on "
              "GitHub, or git+https://HOST/PATH@COMMIT). Default: the commit of --workflows, else the commit "
              "this Assay was installed from.")
@json_option
def init(local_forge: Path | None, github: bool, workflows: str | None, assay_from: str | None,
         as_json: bool) -> None:
    """Write .assay.yaml and the default briefs/, desks/, sweepers/ and board/ folders here: at the top of this
    repository, or in a new one (never an enclosing repository's; a folder it tracks is refused)."""
    from assay.project import init_project
    from assay.views import print_json

    if (workflows or assay_from) and not github:
        raise click.UsageError("--workflows and --assay-from go with --github")
    report = init_project(Path.cwd(), local_forge, github, workflows, assay_from)
    if as_json:
        print_json({"created": [str(c) for c in report.created], "forge": report.forge,
                    "pushed_main": report.pushed_main, "joined": report.joined, "notes": report.notes,
                    "config": str(report.config)})
        return
    for item in report.created:
        click.echo(f"created {item}")
    if report.forge:
        joined = " (joined: this checkout starts from its main)" if report.joined else ""
        click.echo(f"forge: {report.forge}" + (" (main pushed)" if report.pushed_main else joined))
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    wrote = f"wrote {report.config.name}; " if report.config.name in report.created else ""
    click.echo(f"{wrote}next: `assay claims` or `assay claim hello --desk me`")


class _ClaimGroup(click.Group):
    """`assay claim BRIEF …` takes a claim; `assay claim history BRIEF` shows its chain."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["take", *args]
        return super().parse_args(ctx, args)


@cli.group(cls=_ClaimGroup)
def claim() -> None:
    """Claim a brief (`assay claim BRIEF --desk NAME`) or show its custody (`assay claim history BRIEF`)."""


@claim.command("take")
@click.argument("brief")
@desk_option
@click.option("--lease", "lease_s", type=int, default=600, show_default=True, help="Lease in seconds.")
@click.option("--singleton", is_flag=True, help="Take over this desk's own live claim (after a restart).")
@pass_ports
@json_option
def claim_take(brief: str, desk: str, lease_s: int, singleton: bool, ports: Ports, as_json: bool) -> None:
    """Claim BRIEF for a desk. Exactly one of many racing desks wins; the others exit 3."""
    lean.claim(ports, brief, desk, lease_s, singleton, as_json)


@claim.command("history")
@click.argument("brief")
@click.option("--desk", metavar="NAME", help="Only the custody records of this desk.")
@pass_ports
@json_option
def claim_history(brief: str, desk: str | None, ports: Ports, as_json: bool) -> None:
    """Show the custody chain of BRIEF, oldest first (a brief named `history` is claimed with `claim take`)."""
    from assay import views
    from assay.core.retired import require_known
    from assay.observe.listings import custody_reasons

    history = ports.claims.history(brief)
    if not history:
        require_known(ports.git, brief)
    rows = views.history_rows(history, custody_reasons(history), time.time())
    shown = [r for r in rows if desk is None or r.get("desk") == desk]
    if as_json:
        views.print_json({"brief": brief, "history": shown})
    else:
        filtered_out = views.nothing_listed("custody record", (), desk, len(rows), "") if rows else ""
        views.render_history(brief, shown, filtered_out)


@cli.command()
@click.argument("brief")
@desk_option
@click.option("--epoch", type=int, envvar="ASSAY_EPOCH",
              help="Fail (exit 3) unless the claim is still at this epoch (default: ASSAY_EPOCH).")
@click.option("--lease", "lease_s", type=int, help="A new lease in seconds.")
@pass_ports
@json_option
def renew(brief: str, desk: str, epoch: int | None, lease_s: int | None, ports: Ports, as_json: bool) -> None:
    """Renew the lease on a claim this desk holds."""
    lean.renew(ports, brief, desk, epoch, lease_s, as_json)


@cli.command()
@click.argument("brief")
@click.option("--desk", envvar="ASSAY_DESK", metavar="NAME", help="The desk releasing (default: ASSAY_DESK).")
@click.option("--outcome", type=click.Choice(["released", "done", "abandoned"]), default="released",
              show_default=True, help="How the claim ends.")
@click.option("--reason", default="", help="Why; recorded in the claim chain.")
@click.option("--epoch", type=int, envvar="ASSAY_EPOCH",
              help="Fail (exit 3) unless the claim is still at this epoch (default: ASSAY_EPOCH).")
@click.option("--force", is_flag=True, help="A person takes the claim away from its desk (needs --reason).")
@pass_ports
@json_option
def release(brief: str, desk: str | None, outcome: str, reason: str, epoch: int | None, force: bool,
            ports: Ports, as_json: bool) -> None:
    """Release a claim: released, done or abandoned. The chain keeps a tombstone; the next claim gets epoch + 1."""
    lean.release(ports, brief, desk, outcome, reason, epoch, force, as_json)


@cli.command()
@click.argument("briefs", nargs=-1, metavar="[BRIEF]...")
@click.option("--older-than", "older_than", default="0s", show_default=True, metavar="AGE",
              help="Only briefs done at least this long ago (90s, 30m, 12h, 7d).")
@click.option("--dry-run", is_flag=True, help="List what would be retired; write nothing.")
@pass_ports
@json_option
def retire(briefs: tuple[str, ...], older_than: str, dry_run: bool, ports: Ports, as_json: bool) -> None:
    """Fold the refs of done briefs (default: all of them) into refs/assay/retired, so they no longer slow
    every push; their custody, journal and review stay readable. On a forge on disk, pack its refs."""
    from assay import views
    from assay.core.retire import retire as retire_done
    from assay.core.retired import parse_age

    done = retire_done(ports.claims, briefs, older_than_s=parse_age(older_than), by=_person(), dry_run=dry_run)
    view = {"retired": done.retired, "kept": done.kept, "pushes": done.pushes, "packed_refs": done.packed,
            "cleared": done.cleared, "dry_run": dry_run}
    views.print_json(view) if as_json else views.render_retirement(view)


@cli.command("verify")
@click.argument("brief_file", metavar="[BRIEF_FILE]", required=False,
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--group", "base", metavar="BASE", help="Check a merge group instead: the rows of every brief whose "
              "commits are in BASE..HEAD (by their Assay-Brief trailers), and of every brief landed on BASE, each "
              "from BASE's copy of its brief.")
@json_option
def verify_cmd(brief_file: Path | None, base: str | None, as_json: bool) -> None:
    """Run BRIEF_FILE's verify rows in this directory (as CI does on a pull request, with the base branch's
    copy of the brief), or with --group those of a merge queue's group; exit 1 if a row fails. Adds a summary to
    $GITHUB_STEP_SUMMARY when it is set."""
    from assay import views
    from assay.desk.verify import verify_group, verify_here
    from assay.errors import UsageError

    if (brief_file is None) == (base is None):
        raise UsageError("give a brief file, or --group BASE (not both)",
                         hint="assay verify briefs/fix-login.md, or in a merge group: assay verify --group BASE_SHA")
    if base is not None:
        found = [{"brief": b, "passed": bool(rows) and all(r["passed"] for r in rows), "rows": rows,
                  **({} if rows else {"note": f"{base[:10]} has no briefs/{b}.md with rows to run"})}
                 for b, rows in verify_group(base, Path.cwd())]
        failed = [v for v in found if v["rows"] and not v["passed"]]
        if as_json:
            views.print_json({"group": base, "briefs": found, "passed": not failed})
        for v in found if not as_json else []:
            views.render_verify(v) if v["rows"] else click.echo(f"{v['brief']}: {v['note']}")
        for v in found:
            views.append_step_summary(os.environ.get("GITHUB_STEP_SUMMARY"), views.verify_markdown(v))
        if not found and not as_json:
            click.echo(f"no Assay-Brief commits in {base[:10]}..HEAD: nothing to verify")
        sys.exit(1 if failed else 0)
    assert brief_file is not None
    brief, rows = verify_here(brief_file, Path.cwd())
    view = {"brief": brief.id, "passed": all(r["passed"] for r in rows), "rows": rows}
    views.print_json(view) if as_json else views.render_verify(view)
    views.append_step_summary(os.environ.get("GITHUB_STEP_SUMMARY"), views.verify_markdown(view))
    if not view["passed"]:
        sys.exit(1)


LIMIT = 50  # rows a listing's table shows unless told otherwise: 1,000 briefs are no table to read


def limit_options(what: str, order: str, default: int = LIMIT) -> Callable[..., Any]:
    """`--limit N` and `--all`, handed to the command as `limit`: N, or None for all. A table shows `default` rows
    unless told, and says how many it left out; `--json` is whole unless --limit is given."""
    def add(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, limit: int | None, every: bool, **kwargs: Any) -> Any:
            if every and limit:
                raise click.UsageError(f"--all lists every one of the {what}: not with --limit {limit}")
            if every or limit == 0 or (limit is None and (kwargs.get("as_json") or kwargs.get("jq"))):
                return f(*args, limit=None, **kwargs)
            return f(*args, limit=default if limit is None else limit, **kwargs)
        wrapper = click.option("--all", "every", is_flag=True, help=f"All the {what} (as --limit 0).")(wrapper)
        return click.option("--limit", type=click.IntRange(min=0), metavar="N",
                            help=f"At most N {what} ({order}); 0 for all. Default: {default} in a table, all with "
                                 "--json.")(wrapper)
    return add


def filter_options(what: str, states: Sequence[str], order: str, note: str = "") -> Callable[..., Any]:
    """`--state` (repeatable), `--desk`, `--limit` and `--all`, as gh's listings take them."""
    def add(f: Callable[..., Any]) -> Callable[..., Any]:
        f = limit_options(what, order)(f)
        f = click.option("--desk", metavar="NAME", help=f"Only the {what} of this desk.")(f)
        return click.option("--state", "states", multiple=True, type=click.Choice(states),
                            help=f"Only {what} in this state{note} (repeat for several).")(f)
    return add


@cli.command("claims")
@filter_options("claims", STATES, "in brief order")
@pass_ports
@json_option
def claims_cmd(states: tuple[str, ...], desk: str | None, limit: int | None, ports: Ports, as_json: bool) -> None:
    """List the claims on the forge, with when each was last written and whether its desk is alive.

    `overdue`: not renewed for 3 of its desk's heartbeats; `dead`: its desk's process is over. Both show long
    before the lease ends."""
    from assay import views
    from assay.observe.listings import list_claims

    now = time.time()
    found, bad, matched, total = list_claims(ports.claims, now, states, desk, limit)
    rows = [views.claim_view(r.claim, now, r.written_age_s, r.liveness, r.progress) for r in found]
    invalid = [views.invalid_view(b) for b in bad]
    if as_json:
        return views.print_json({"claims": rows, "invalid": invalid})
    views.render_claims(rows, invalid, views.nothing_listed("claim", states, desk, total, "on this forge yet"))
    views.render_left_out(matched - len(rows), matched, "claims")


def context_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The step context a desk hands its agent; each flag overrides its ASSAY_* variable."""
    for name, kind, text in reversed([
            ("--forge", str, "The forge (default: ASSAY_FORGE, .assay.yaml, origin)."),
            ("--brief", str, "The brief (default: ASSAY_BRIEF)."),
            ("--desk", str, "The desk holding the brief (default: ASSAY_DESK)."),
            ("--epoch", int, "The claim epoch the desk holds (default: ASSAY_EPOCH)."),
            ("--run", str, "This run of the agent (default: ASSAY_RUN).")]):
        f = click.option(name, type=kind, help=text)(f)
    return f


@cli.group()
def step() -> None:
    """Journaled effects and recorded values, for agents (context from ASSAY_* variables)."""


@step.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--name", required=True, help="The step's name, e.g. deploy (not one of a desk's own: branch, "
              "review, agent, push, verify, statuses, ready).")
@click.option("--policy", type=click.Choice(["safe", "idempotent", "unsafe"]), default="unsafe", show_default=True,
              help="What recovery may do with an interrupted run of this step.")
@click.option("--input", "input_json", metavar="JSON", help="The step's input (default: the command line).")
@click.option("--fresh", is_flag=True, help="Run a completed safe step again instead of replaying its recorded "
              "result: for inspections (is it deployed?) whose answer may have changed since.")
@click.option("--probe", metavar="SHELL", help="For an unsafe step: a command telling whether its effect happened "
              "(exit 0) or not (exit 1), run by the next desk to settle an outcome a crash left unknown.")
@context_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def step_run(name: str, policy: str, input_json: str | None, fresh: bool, probe: str | None, forge: str | None,
             brief: str | None, desk: str | None, epoch: int | None, run: str | None,
             command: tuple[str, ...]) -> None:
    """Run COMMAND (after `--`) as a durable step: intent journaled first, result after.

    The command gets its idempotency key in ASSAY_IDEMPOTENCY_KEY. A completed step
    is not run again (unless --fresh, for a safe step); an interrupted unsafe one is
    refused once (exit 4).
    """
    sys.exit(lean.step_run(name, policy, input_json, fresh, probe, forge, brief, desk, epoch, run, command))


@step.command("settle", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--happened", "verdict", flag_value="happened", help="The inspection found that the step happened.")
@click.option("--did-not", "verdict", flag_value="did-not", help="The inspection found that it did not happen.")
@click.option("--input", "input_json", metavar="JSON", help="Which call, when the step is unknown with several inputs.")
@click.option("--evidence", metavar="TEXT", help="What the inspection showed (when no command is given).")
@context_options
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def step_settle(name: str, verdict: str | None, input_json: str | None, evidence: str | None, forge: str | None,
                brief: str | None, desk: str | None, epoch: int | None, run: str | None, as_json: bool,
                command: tuple[str, ...]) -> None:
    """Settle an unsafe step whose outcome is unknown: it happened, or it did not.

    Inspect first. A COMMAND after `--` is the inspection: it runs here, its output is
    journaled as the evidence, and its exit code decides when neither flag is given (0: it
    happened, 1: it did not). A step settled as happened is not run again; one that did not
    happen runs on its next call. An agent's settle goes to its desk; a person passes --brief.
    """
    from assay.config import Ports
    from assay.desk.effects import settle_step

    with Ports(forge) as ports:  # opened only once the input is known good
        done = settle_step(name, verdict, input_json, evidence, list(command), ports, brief, desk, epoch, run,
                           _person())
    if as_json:
        from assay.views import print_json

        print_json({"brief": done.brief, "step": done.step, "intent": done.intent, "verdict": done.verdict,
                    "by": done.by, "seq": done.seq})
        return
    click.echo(f"{done.brief}: step {done.step!r} (intent {done.intent}) settled as {done.verdict} by {done.by} "
               f"(seq {done.seq})")


@step.command("progress")
@click.argument("text", nargs=-1, required=True)
def step_progress(text: tuple[str, ...]) -> None:
    """Say how a long step is going: the desk keeps the line and its next heartbeat carries it (no push, no journal
    entry); the claims listing and the board show it until the step's result replaces it. Only inside an agent
    that a desk runs."""
    from assay.errors import UsageError

    raise UsageError("no desk is listening: `assay step progress` reports to the desk that runs this agent",
                     hint="run it from a step inside an agent's run (ASSAY_SOCKET names the desk's socket)")


@step.command("answer")
@click.argument("thread")
@click.option("--fixed", metavar="TEXT", help="What you changed for it: the desk's reply names the commit it pushes.")
@click.option("--reason", metavar="TEXT", help="Why nothing changes for it.")
def step_answer(thread: str, fixed: str | None, reason: str | None) -> None:
    """Answer a review thread the agent's prompt lists (journaled; the desk replies on the review before it marks
    it ready, and not while a thread has no answer). Only inside an agent that a desk runs."""
    from assay.errors import UsageError

    raise UsageError("no desk is listening: `assay step answer` goes to the desk that runs this agent",
                     hint="a person answers on the review itself (`assay review note BRIEF TEXT --reply ID`)")


@step.command("turn")
@click.argument("event", required=False)
def step_turn(event: str | None) -> None:
    """Tell the desk that a turn of the agent's CLI ended (its hooks and notify program call this): the desk
    checkpoints the conversation and worktree within about a second, and passes on steering. Outside a desk's
    agent run it does nothing, and says so (exit 0: a hook never fails the CLI's turn)."""
    click.echo("assay step turn: no desk is listening (ASSAY_SOCKET); nothing to checkpoint", err=True)


@step.command("value")
@click.argument("kind", type=click.Choice(["now", "uuid", "random"]))
@click.option("--bytes", "n_bytes", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="How many random bytes (for `random`), printed as hex.")
@context_options
def step_value(kind: str, n_bytes: int, forge: str | None, brief: str | None, desk: str | None,
               epoch: int | None, run: str | None) -> None:
    """Print a clock, uuid or random value, recorded: a replayed run gets the same one."""
    from assay.config import Ports
    from assay.desk.effects import context_from, open_context_session, recorded_value

    ctx = context_from(brief, desk, epoch, run)
    with Ports(forge) as ports:
        session = open_context_session(ports.claims, ctx)
        value = recorded_value(session, kind, n_bytes)
    click.echo(value)


@cli.command()
@click.argument("brief_id", metavar="BRIEF")
@limit_options("entries", "the newest")
@pass_ports
@json_option
def journal(brief_id: str, limit: int | None, ports: Ports, as_json: bool) -> None:
    """Show a brief's journal as a timeline: claims, intents, results, unknown outcomes, refusals."""
    from assay import views
    from assay.core.journal import entry_view, read_kept
    from assay.core.retired import require_known

    kept = read_kept(ports.git, brief_id).entries
    if not kept:
        require_known(ports.git, brief_id)
    entries = [entry_view(e) for e in (kept[-limit:] if limit else kept)]
    if as_json:
        return views.print_json({"brief": brief_id, "entries": entries})
    views.render_journal(brief_id, entries, time.time())
    views.render_left_out(len(kept) - len(entries), len(kept), "entries", " (the oldest)")


@cli.group()
def brief() -> None:
    """Work with brief files (briefs/<id>.md)."""


@brief.command("lint")
@click.argument("folder", required=False, type=click.Path(path_type=Path, file_okay=False))
@json_option
def brief_lint(folder: Path | None, as_json: bool) -> None:
    """Check every brief in FOLDER (default: briefs/ of this repository); exit 2 on any problem."""
    from assay import views
    from assay.core.briefs import lint_folder
    from assay.errors import UsageError

    target = folder or Path.cwd() / "briefs"
    if not target.is_dir():
        raise UsageError(f"no briefs folder at {target}", hint="run inside a repository with briefs/, or pass FOLDER")
    view = views.lint_view(*lint_folder(target, display_root=Path.cwd() if folder is None else None))
    views.print_json(view) if as_json else views.render_lint(view)
    if view["problems"]:
        sys.exit(2)


@cli.command("briefs")
@filter_options("briefs", BRIEF_STATES, "in priority order", " (`needs`: waiting on dependencies)")
@pass_ports
@json_option
def briefs_cmd(states: tuple[str, ...], desk: str | None, limit: int | None, ports: Ports, as_json: bool) -> None:
    """List the briefs on the forge's main with their state (ready, blocked by dependencies, claimed, done)."""
    from assay import views
    from assay.core.briefs import BRIEFS_DIR
    from assay.desk.queue import read_snapshot
    from assay.errors import UsageError

    board = read_snapshot(ports.claims)
    unreadable = next((p for p in board.problems if p.path == BRIEFS_DIR), None)
    if unreadable is not None:  # not one bad brief: main has no briefs folder to read at all
        raise UsageError(unreadable.message, hint=unreadable.hint)
    every = views.brief_rows(board)
    matched = views.filtered(every, states, desk)
    rows = matched[:limit]
    problems = [str(p) for p in board.problems]
    if as_json:
        return views.print_json({"main": board.main, "briefs": rows, "problems": problems})
    views.render_briefs(rows, views.nothing_listed("brief", states, desk, len(every), views.BRIEFS_NONE))
    views.render_left_out(len(matched) - len(rows), len(matched), "briefs")
    views.render_warnings(problems)


@brief.command("show")
@click.argument("brief_id", metavar="BRIEF")
@pass_ports
@json_option
def brief_show(brief_id: str, ports: Ports, as_json: bool) -> None:
    """Show one brief on main: its state (ready, queued behind briefs whose files overlap, waiting on dependencies,
    or its claim's), its footprint, its verify and done_when rows, and its claim."""
    from assay import views
    from assay.core.records import validate_brief_id
    from assay.desk.queue import read_snapshot
    from assay.errors import BriefNotFound

    snapshot = read_snapshot(ports.claims)
    if validate_brief_id(brief_id) not in snapshot.briefs:
        raise BriefNotFound(brief_id, f"the forge's main ({snapshot.main[:10]})")
    view = views.brief_view(snapshot, brief_id)
    views.print_json(view) if as_json else views.render_brief(view)


@brief.command("new")
@click.argument("brief_id", metavar="ID")
@click.option("--title", required=True, help="One line saying what the brief is for.")
@click.option("--priority", type=click.IntRange(0, 9), default=5, show_default=True, help="0 is most urgent.")
@click.option("--label", "labels", multiple=True, help="A label desks match on (repeatable).")
@click.option("--depends-on", "depends", multiple=True, help="A brief that must be done first (repeatable).")
@json_option
def brief_new(brief_id: str, title: str, priority: int, labels: tuple[str, ...], depends: tuple[str, ...],
              as_json: bool) -> None:
    """Write a valid skeleton briefs/ID.md; commit and push it to main to make it claimable."""
    from assay.core.briefs import new_brief
    from assay.views import print_json

    path = new_brief(Path.cwd() / "briefs", brief_id, title, priority, labels, depends)
    if as_json:
        print_json({"brief": brief_id, "path": str(path)})
        return
    click.echo(f"wrote {path.relative_to(Path.cwd())}; edit it, then commit and push it to main")


@brief.command("spawn")
@click.argument("title")
@click.option("--body", default="", help="The child brief's text (its prompt).")
@click.option("--label", "labels", multiple=True, help="A label desks match on (repeatable).")
@click.option("--parent", envvar="ASSAY_BRIEF", metavar="BRIEF", required=True,
              help="The brief whose child it is (default: ASSAY_BRIEF).")
@click.option("--key", envvar="ASSAY_IDEMPOTENCY_KEY", metavar="KEY",
              help="What names the child (default: the calling step's ASSAY_IDEMPOTENCY_KEY; a person's title).")
@pass_ports
@json_option
def brief_spawn(title: str, body: str, labels: tuple[str, ...], parent: str, key: str | None, ports: Ports,
                as_json: bool) -> None:
    """Add a child brief of PARENT to main and print its id. The id comes from the spawning step's idempotency key
    and the title, so a parent that dies and spawns again gets the same child. Inside an agent's step the desk
    writes it; a parent waits on its children with assay wait BRIEF --on briefs:ID,ID."""
    from assay.core import custody
    from assay.views import print_json

    child, new = custody.spawn(ports.claims, parent, key or f"person:{title}", title, body, labels, _person())
    print_json({"brief": child, "parent": parent, "new": new}) if as_json else click.echo(child)


@brief.command("fork")
@click.argument("new", metavar="NEW")
@click.option("--from", "source", required=True, metavar="BRIEF", help="The brief whose agent conversation to fork.")
@click.option("--at", "at", type=click.IntRange(1), metavar="SEQ",
              help="Fork the newest checkpoint at or before this journal seq (default: the newest).")
@pass_ports
@json_option
def brief_fork(new: str, source: str, at: int | None, ports: Ports, as_json: bool) -> None:
    """Start brief NEW from BRIEF's agent conversation as a checkpoint saved it, and its branch as pushed then
    with the worktree that checkpoint recorded: the fork knows what came before and nothing after. Writes the
    fork's journal, branch and worktree snapshot on the forge and briefs/NEW.md here (commit and push it to main
    to make it claimable)."""
    from assay.project import fork_brief
    from assay.views import print_json

    path, entry, head = fork_brief(ports.claims, Path.cwd(), new, source, at, _person())
    seq = (entry.data or {})["forked_from"]["seq"]
    if as_json:
        print_json({"brief": new, "from": source, "checkpoint": seq, "bytes": (entry.data or {}).get("bytes"),
                    "branch": WORK_BRANCH_PREFIX + new, "commit": head, "worktree": (entry.data or {}).get("worktree"),
                    "path": str(path)})
        return
    snapshot = (entry.data or {}).get("worktree")
    files = f", its worktree as then ({str(snapshot)[:10]})," if snapshot else ""
    click.echo(f"forked {source} at seq {seq} into {new}: its conversation ({(entry.data or {}).get('bytes')} bytes)"
               f"{files} and branch {WORK_BRANCH_PREFIX}{new} at {head[:10]} are on the forge; wrote {path.name} in "
               "briefs/: commit and push it to main to make it claimable")


@cli.group()
def desk() -> None:
    """Run desks: claim ready briefs and work them into reviews."""


@desk.command("list")
@limit_options("desks", "by name")
@pass_ports
@json_option
def desk_list(limit: int | None, ports: Ports, as_json: bool) -> None:
    """List the desks defined on main (desks/*.yaml) and any that do not validate."""
    from assay import views
    from assay.core.deskspec import desks_on_main

    claims = ports.claims
    main = claims.read_view().main
    if not main:
        raise NoMainBranch()
    specs, problems = desks_on_main(claims.git, main)
    rows = [views.desk_view(spec) for spec in specs[:limit]]
    if as_json:
        return views.print_json({"desks": rows, "problems": [str(p) for p in problems]})
    views.render_desks(rows)
    views.render_left_out(len(specs) - len(rows), len(specs), "desks")
    views.render_warnings([str(p) for p in problems])


@desk.command("run")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.option("--count", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Desks of each NAME to run on this host, under one supervisor that passes a stop on to each; "
                   "their claims are renewed together, one push a heartbeat.")
@click.option("--once", is_flag=True, help="One pass: work what is ready now, then exit.")
@click.option("--max-briefs", type=click.IntRange(1), help="Stop after working this many briefs (each desk).")
@click.option("--poll", "poll_s", type=float, default=5.0, show_default=True,
              help="Seconds an idle desk waits before it looks again; doubled each idle pass, up to its heartbeat "
                   "or 120 s.")
@click.option("--state-dir", type=click.Path(path_type=Path), help="Where worktrees and prompts live "
              "(default: ASSAY_STATE_DIR or ~/.local/state/assay).")
@click.option("--singleton", is_flag=True, help="This is the only process of the desk (a GitHub Actions job in its "
              "desk's concurrency group): take over the desk's own claims left by earlier processes at once.")
@click.option("--push-window", type=click.FloatRange(0, 60), help="With several desks: seconds a push waits for "
              "the other desks' pushes to go with it, one push of the forge for all [default: ASSAY_PUSH_WINDOW_S, "
              "else 0: only pushes made at once go together].")
@click.option("--threads", is_flag=True, help="Run the desks as threads of one host process the supervisor starts, not "
              "processes of their own: one interpreter for the host, about 3 MB a desk instead of 14.")
@pass_ports
def desk_run(names: tuple[str, ...], count: int, once: bool, max_briefs: int | None, poll_s: float,
             state_dir: Path | None, singleton: bool, push_window: float | None, threads: bool,
             ports: Ports) -> None:
    """Run desk NAME (desks/NAME.yaml on main) until stopped, or once; with several names or `--count`, many
    desks on this host under one supervisor.

    Exits 5 when a brief it worked is now blocked for a person, 1 when the forge interrupted one, and 2,
    before claiming anything, when its agent command cannot start.
    """
    from assay.desk.loop import run_desk
    from assay.desk.supervisor import run_desks
    from assay.errors import UsageError

    if len(names) > 1 or count > 1 or threads:
        if singleton:
            raise UsageError("--singleton says this is the only process of its desk: not with --count, --threads or "
                             "several names", hint="run one desk with --singleton, or drop it")
        sys.exit(run_desks(ports.git.url, names, count, once=once, max_briefs=max_briefs, poll_s=poll_s,
                           state_dir=state_dir, push_window=push_window, echo=click.echo, entry=main,
                           threads=(lambda desk: lean.guarded(desk, lambda: _debug)) if threads else None))
    [name] = names
    report = run_desk(ports, name, state_dir, once=once, max_briefs=max_briefs, poll_s=poll_s, echo=click.echo,
                      singleton=singleton)
    click.echo(f"{name}: worked {len(report.worked)} brief(s): "
               + (", ".join(f"{b} {o}" for b, o in report.outcomes.items()) or "none"))
    sys.exit(report.exit_code())


@cli.command("land")
@click.argument("brief_ids", nargs=-1, metavar="[BRIEF]...")
@click.option("--as", "lander", default="lander", show_default=True, metavar="NAME",
              help="Who lands: the landing claim's desk name.")
@click.option("--state-dir", type=click.Path(path_type=Path), help="Where the verify checkout lives "
              "(default: ASSAY_STATE_DIR or ~/.local/state/assay).")
@pass_ports
@json_option
def land_cmd(brief_ids: tuple[str, ...], lander: str, state_dir: Path | None, ports: Ports, as_json: bool) -> None:
    """Merge ready reviews into main one at a time (all of them, or those of BRIEF...), each verified on the very
    merge commit it lands as; a review that no longer merges cleanly, or whose verify rows fail there, is woken for
    a new round instead. Holds the landing claim (`assay.landing`) while it runs. On GitHub, queues them in main's
    merge queue, whose merge groups run the verify rows first."""
    from assay import views
    from assay.config import state_dir_for
    from assay.desk.land import land

    done = land(ports.claims, ports.reviews, state_dir_for(ports.git.url, state_dir), lander, brief_ids,
                echo=(lambda _: None) if as_json else click.echo)
    if as_json:
        views.print_json({"landed": [d.view() for d in done]})
    elif not done:
        click.echo("no ready review waits to land")


@cli.group()
def review() -> None:
    """Draft reviews of work branches (refs/assay/reviews/* on a plain git forge)."""


@review.command("list")
@pass_ports
@json_option
def review_list(ports: Ports, as_json: bool) -> None:
    """List every review: brief, state, branch, approvals."""
    from assay import views

    rows = [views.review_view(r) for r in ports.reviews.list()]
    views.print_json({"reviews": rows}) if as_json else views.render_reviews(rows)


@review.command("show")
@click.argument("brief_id", metavar="BRIEF")
@pass_ports
@json_option
def review_show(brief_id: str, ports: Ports, as_json: bool) -> None:
    """Show one review: its state, the files it changes with a diff stat, the verify evidence at its head, its
    comments, and its brief's claim (when the sweep expires it if its desk is dead or overdue)."""
    from assay import views
    from assay.observe.listings import list_claims, review_detail

    view = views.review_detail_view(review_detail(ports.git, ports.reviews, brief_id))
    now = time.time()
    rows, *_ = list_claims(ports.claims, now, brief=brief_id)
    view["claim"] = next((views.claim_view(r.claim, now, r.written_age_s, r.liveness, r.progress) for r in rows), None)
    views.print_json(view) if as_json else views.render_review(view)


@review.command("diff")
@click.argument("brief_id", metavar="BRIEF")
@pass_ports
def review_diff(brief_id: str, ports: Ports) -> None:
    """Print the patch a review proposes (for a merged review, the change it merged)."""
    from assay.observe.listings import review_diff as read_diff

    click.echo(read_diff(ports.git, ports.reviews, brief_id), nl=False)


def _review_said(review: Any, as_json: bool, line: str) -> None:
    """A changed review: the record as `review show --json` starts, or one line."""
    from assay.views import print_json, review_view

    print_json(review_view(review)) if as_json else click.echo(line)


def _person() -> str:
    return lean.person()


@review.command("comment")
@click.argument("brief_id", metavar="BRIEF")
@click.argument("text")
@pass_ports
@json_option
def review_comment(brief_id: str, text: str, ports: Ports, as_json: bool) -> None:
    """Add a comment to a review."""

    _review_said(ports.reviews.comment(brief_id, _person(), text), as_json, f"commented on {brief_id}")


@review.command("note")
@click.argument("brief_id", metavar="BRIEF")
@click.argument("text")
@click.option("--on", "on", metavar="PATH[:LINE]", help="The file (and line) the note is about.")
@click.option("--reply", "reply_to", metavar="THREAD", help="Reply in this thread instead of opening one.")
@pass_ports
@json_option
def review_note(brief_id: str, text: str, on: str | None, reply_to: str | None, ports: Ports, as_json: bool) -> None:
    """Open a review thread (or reply in one): the brief's desk answers every thread, naming the commit that
    addresses it or why nothing changes, before its review is marked ready again; a thread on a review that
    waits wakes the brief for a round."""
    from assay.observe.listings import note_place

    path, line = note_place(on)
    made = ports.reviews.note(brief_id, _person(), text, path, line, reply_to or "")
    if as_json:
        from assay.views import print_json

        print_json({"brief": brief_id, "id": made, "thread": reply_to or made})
        return
    click.echo(f"replied in thread {reply_to} on {brief_id}" if reply_to else f"opened thread {made} on {brief_id}")


@review.command("approve")
@click.argument("brief_id", metavar="BRIEF")
@pass_ports
@json_option
def review_approve(brief_id: str, ports: Ports, as_json: bool) -> None:
    """Approve a review."""

    _review_said(ports.reviews.approve(brief_id, _person()), as_json, f"approved {brief_id}")


@review.command("merge")
@click.argument("brief_id", metavar="BRIEF")
@pass_ports
@json_option
def review_merge(brief_id: str, ports: Ports, as_json: bool) -> None:
    """Merge a ready review into main on the forge (a compare-and-swap on main); where main requires a merge queue
    (GitHub), queue it."""

    merged = ports.reviews.merge(brief_id, _person())
    _review_said(merged, as_json, f"merged {brief_id} into main at {merged.record.merged_commit[:10]}"
                 if merged.state == "merged" else
                 f"queued {brief_id} in main's merge queue: it merges once its checks pass on the queue's merge")


@review.command("close")
@click.argument("brief_id", metavar="BRIEF")
@click.option("--reason", default="", help="Why it is closed without merging.")
@pass_ports
@json_option
def review_close(brief_id: str, reason: str, ports: Ports, as_json: bool) -> None:
    """Close a review without merging it."""

    _review_said(ports.reviews.close(brief_id, _person(), reason), as_json, f"closed {brief_id}")


@cli.command("wait")
@click.argument("brief_id", metavar="BRIEF")
@click.option("--on", "on", required=True, metavar="CONDITION",
              help="review, merge, manual, checks (the review's head: its statuses and check runs), "
                   "time:YYYY-MM-DDTHH:MM:SSZ or briefs:ID,ID (each done or blocked).")
@click.option("--desk", envvar="ASSAY_DESK", help="Fail unless this desk holds the brief.")
@click.option("--epoch", type=int, envvar="ASSAY_EPOCH",
              help="Fail (exit 3) unless the claim is still at this epoch (default: ASSAY_EPOCH).")
@pass_ports
@json_option
def wait_cmd(brief_id: str, on: str, desk: str | None, epoch: int | None, ports: Ports, as_json: bool) -> None:
    """Park a held brief on a condition; it holds no compute until woken."""
    from assay.core import custody

    parked = custody.wait(ports.claims, brief_id, on, _person(), desk, epoch, checks=not ports.reviews.refs_backed)
    if as_json:
        return _claim_json(parked)
    click.echo(f"{brief_id} is waiting on {on} (epoch {parked.record.epoch})")


def _claim_json(claim: Any, **extra: Any) -> None:
    from assay.views import claim_view, print_json

    print_json({**claim_view(claim, time.time()), **extra})


@cli.command("wake")
@click.argument("brief_id", metavar="BRIEF")
@click.option("--desk", envvar="ASSAY_DESK", help="Fail unless this desk holds the brief.")
@pass_ports
@json_option
def wake_cmd(brief_id: str, desk: str | None, ports: Ports, as_json: bool) -> None:
    """Wake a waiting brief; its desk resumes it from the journal."""
    from assay.core import custody

    woken, was = custody.wake(ports.claims, brief_id, _person(), desk)
    if as_json:
        return _claim_json(woken, was=was)
    click.echo(f"{brief_id} is held again by desk {woken.record.desk} (epoch {woken.record.epoch})")
    if was in ("review", "merge"):
        click.echo(f"note: it was waiting on its {was}; the review stays open, and the desk works the brief again "
                   "from its journal (to park it again: assay wait BRIEF --on review)", err=True)


@cli.command("mcp")
def mcp_cmd() -> None:
    """Serve Assay's agent tools (journaled steps, recorded values, settling, progress, child briefs, steering,
    waits, the journal, the brief) over MCP on stdin and stdout, for an agent under a desk.

    The desk presets register it with the agent; it talks to the desk over ASSAY_SOCKET, like `assay step`.
    """
    from assay.desk.mcpserver import serve

    serve()


@cli.command("event")
@click.argument("event_name", metavar="EVENT")
@click.argument("payload", type=click.Path(path_type=Path, dir_okay=False), required=False)
@click.option("--desks", "only", default="", help="Comma-separated desks to list as having work (a manual run); "
              "default: the desks with work.")
@pass_ports
@json_option
def event_cmd(event_name: str, payload: Path | None, only: str, ports: Ports, as_json: bool) -> None:
    """Act on a forge event (on GitHub Actions: the event's name, and the file GITHUB_EVENT_PATH names), exactly
    once, and list the desks that now have work.

    The payload only says which brief to look at; what happens is read from the forge: a review requesting
    changes starts a new round, `/assay retry` and `/assay steer TEXT` comments from people who may write to
    the repository are obeyed, a merge settles the brief, a close blocks it, finished checks wake a `checks`
    wait. Each act is journaled with the event, once however often the event comes.
    """
    from assay import views
    from assay.desk.events import handle, lines, read_payload

    data = read_payload(payload) if payload is not None else {}
    names = [n.strip() for n in only.split(",") if n.strip()]
    report = handle(ports.claims, ports.reviews, event_name, data, by=_person(), only=names or None)
    if as_json:
        return views.print_json(report.view())
    for line in lines(report):
        click.echo(line)


@cli.command("steer")
@click.argument("brief_id", metavar="BRIEF")
@click.argument("text")
@pass_ports
@json_option
def steer_cmd(brief_id: str, text: str, ports: Ports, as_json: bool) -> None:
    """Journal guidance the agent receives on its next run, and after any recovery."""
    from assay.core import custody

    seq, when = custody.steer(ports.claims, brief_id, text, _person())
    if as_json:
        from assay.views import print_json

        return print_json({"brief": brief_id, "seq": seq, "when": when})
    click.echo(f"steering for {brief_id} journaled (seq {seq}); the agent gets it {when}")


@cli.command()
@click.option("--dry-run", is_flag=True, help="Report what the sweep finds and would do; write nothing.")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="NAME",
              help="The policy to apply: sweepers/NAME.yaml on main.")
@click.option("--now", type=float, envvar="ASSAY_SWEEP_NOW", hidden=True,
              help="The sweeper's clock, in seconds since the epoch (default: this machine's).")
@pass_ports
@json_option
def sweep(dry_run: bool, policy_name: str, now: float | None, ports: Ports, as_json: bool) -> None:
    """Judge every claim from forge evidence: expire dead ones, settle met waits, report the rest."""
    from assay import views
    from assay.observe.sweep import sweep as run_sweep

    with views.progress(enabled=not as_json) as progress:
        report = run_sweep(ports.claims, policy_name=policy_name, now=now, dry_run=dry_run, progress=progress,
                           reviews=ports.reviews)
    view = views.sweep_view(report)
    views.print_json(view) if as_json else views.render_sweep(view)
    views.append_step_summary(os.environ.get("GITHUB_STEP_SUMMARY"), views.sweep_markdown(view))


@cli.command("audit")
@click.argument("brief", required=False)
@click.option("--all", "every", is_flag=True, help="Audit every brief with a claim chain, live or retired.")
@pass_ports
@json_option
def audit_cmd(brief: str | None, every: bool, ports: Ports, as_json: bool) -> None:
    """Check BRIEF's custody, journal, branch and review against each other; exit 1 if a check fails."""
    from assay import views
    from assay.observe.audit import audit, audit_all

    if bool(brief) == every:
        raise click.UsageError("give a BRIEF or --all, not both" if every else "give a BRIEF, or --all for every brief")
    with views.progress(enabled=every and not as_json, what="auditing") as progress:
        audits = audit_all(ports.git, ports.claims, ports.reviews, progress) if every else \
            [audit(ports.git, ports.claims, ports.reviews, str(brief))]
    found = [a.view() for a in audits]
    if as_json:
        views.print_json(found if every else found[0])
    elif every:
        views.render_audit_summary(found)
    else:
        views.render_audits(found, timeline=True)
    if not all(a.passed for a in audits):
        sys.exit(1)


@cli.command("report")
@click.option("--desk", metavar="NAME", help="Only this desk's share.")
@limit_options("briefs that wasted most", "most first", default=10)
@pass_ports
@json_option
def report_cmd(desk: str | None, limit: int | None, ports: Ports, as_json: bool) -> None:
    """The waste ledger: agent time kept, and lost to runs that died, failed verify and rounds redone; refused and
    unknown steps; per desk and per brief, from the journals alone.

    A journal it cannot read is named with its problem and left out of every total, which says so; a claim
    record it cannot read, out of the desks' shares. It still exits 0, as the board and the listings do; a --desk
    the forge never knew exits 2."""
    from assay import views
    from assay.observe.board import read_forge, require_desk, waste_ledgers

    read = read_forge(ports.git, ports.reviews)
    if desk is not None:
        require_desk(read, desk)
    view = views.report_view(waste_ledgers(read), desk, limit)
    if as_json:
        return views.print_json(view)
    views.render_report(view)
    views.render_left_out(view["wasting"] - len(view["worst"]), view["wasting"], "briefs that wasted")


@cli.group()
def board() -> None:
    """The board: a static site of the whole fleet, rendered from forge state alone."""


@board.command("build")
@click.option("-o", "--out", type=click.Path(path_type=Path), default=Path("assay-board"), show_default=True,
              help="The folder to write the site into (index.html, briefs/, board.json, board.md).")
@click.option("--now", type=float, envvar="ASSAY_BOARD_NOW", hidden=True,
              help="The builder's clock, in seconds since the epoch (default: this machine's).")
@pass_ports
@json_option
def board_build(out: Path, now: float | None, ports: Ports, as_json: bool) -> None:
    """Read the forge once and write the board: columns by state, desks, findings, a page per brief."""
    from assay import views
    from assay.observe.board import build

    built = build(ports.git, ports.reviews, out, now)
    view = views.board_view(built)
    views.print_json(view) if as_json else views.render_board(view)
    views.append_step_summary(os.environ.get("GITHUB_STEP_SUMMARY"), (out / "board.md").read_text("utf-8"))


@board.command("serve")
@click.option("-d", "--dir", "directory", type=click.Path(path_type=Path), default=Path("assay-board"),
              show_default=True, help="The built site to serve.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="The port on 127.0.0.1 (0: any free port).")
def board_serve(directory: Path, port: int) -> None:
    """Preview a built board on http://127.0.0.1:PORT/ until interrupted."""
    from assay.observe.board import serve

    serve(directory, port, lambda url: click.echo(f"serving {directory} on {url}", nl=True))


@cli.command()
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path("assay-demo"), show_default=True,
              help="Where the demo forge, desks and worktrees live; an earlier demo there is resumed.")
@click.option("--crash-at", metavar="POINT[:STEP]", help="Arm a named crash point in every desk, e.g. "
              "step.after-execute:deploy (push.after-commit takes a brief: push.after-commit:setup-ci); the demo "
              "stops at the crash. Run the demo again to recover.")
def demo(directory: Path, crash_at: str | None) -> None:
    """Run the embedded demo: a forge on disk, six briefs, three desks with the scripted agent."""
    from assay.demo import run_demo

    sys.exit(run_demo(directory, crash_at, echo=click.echo))


@cli.command("help")
@click.argument("topic", nargs=-1, metavar="[exit-codes | COMMAND...]")
def help_cmd(topic: tuple[str, ...]) -> None:
    """Show a help page: `assay help exit-codes` lists every exit code and the errors that give it;
    `assay help COMMAND...` is `assay COMMAND... --help`."""
    if topic == ("exit-codes",):
        from assay.errors import PASSED_ON, exit_codes
        from assay.views import render_exit_codes

        return render_exit_codes(exit_codes(), PASSED_ON)
    code = cli.main(args=[*topic, "--help"], prog_name="assay", standalone_mode=False)
    if code:
        sys.exit(code)


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL: commands, options, and the brief and desk names of the
    checkout you are in (briefs/*.md, desks/*.yaml).

    Load it in your shell's startup file, e.g. `eval "$(assay completion bash)"` in ~/.bashrc."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None
    click.echo(completer(cli, {}, "assay", "_ASSAY_COMPLETE").source())


def _names(folder: str, suffix: str, incomplete: str) -> list[str]:
    """The names of the checkout's `folder/*suffix` files that start with `incomplete` (no forge is read)."""
    here = Path.cwd()
    for root in (here, *here.parents):
        if (root / folder).is_dir():
            return sorted(p.name.removesuffix(suffix) for p in (root / folder).glob(f"{incomplete}*{suffix}"))
        if (root / ".git").exists():
            break
    return []


def _complete_briefs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return _names("briefs", ".md", incomplete)


def _complete_desks(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return _names("desks", ".yaml", incomplete)


def _completions(group: click.Group) -> None:
    """Brief and desk names complete wherever a command takes one."""
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            _completions(cmd)
            continue
        for param in cmd.params:
            if param.name in ("brief", "brief_id", "briefs") and isinstance(param, click.Argument):
                param._custom_shell_complete = _complete_briefs
            elif param.name == "desk" or (name == "run" and param.name in ("name", "names")):
                param._custom_shell_complete = _complete_desks


_completions(cli)
def _examples(group: click.Group, prefix: str = "") -> None:
    """Every command's help ends with examples (`cliexamples.EXAMPLES`)."""
    from assay.cliexamples import epilog

    group.epilog = epilog(prefix.strip())
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            _examples(cmd, f"{prefix}{name} ")
        else:
            cmd.epilog = epilog(f"{prefix}{name}")


_examples(cli)

def main(argv: list[str] | None = None) -> None:
    """Entry point: a user's mistake is one `error:` line and an exit code, never a traceback."""
    def call() -> object:
        try:
            return cli.main(args=argv, prog_name="assay", standalone_mode=False)
        except click.exceptions.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):  # click turns Ctrl-C, SIGTERM and SIGHUP into Abort
                return lean.interrupted(exc.__cause__)
            sys.stderr.write("aborted\n")
            return 130
        except click.ClickException as exc:
            exc.show()
            return exc.exit_code

    sys.exit(lean.guarded(call, lambda: _debug))


if __name__ == "__main__":
    main()
