"""The `assay` command's entry point: an agent's steps take the fast path to their desk before
anything heavy is imported; claims, renewals, releases and steps with no desk are parsed without
click (`lean.py`); everything else is the full command line (`cli.py`)."""

from __future__ import annotations

import os
import sys

FAST = ("step", "brief", "wait")  # the commands a desk may serve (`stepclient.main` says which of their forms)
GC_EVERY = 10_000  # objects made between the cycle collector's passes in the full command line (Python's: 700)


def main() -> None:
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # started without it (`>&-`): what is said there goes nowhere, no error
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - open for the process's life, as stdout is
    try:
        _main()
    except KeyboardInterrupt as stop:  # a stop that came before a command could take it (while code loads)
        sys.exit(_exit_code(stop))


def _exit_code(stop: KeyboardInterrupt) -> int:
    """128 + the signal's number, as a shell reports a command a signal ended (Ctrl-C's SIGINT: 130)."""
    import signal

    name = stop.args[0] if stop.args and isinstance(stop.args[0], str) else "SIGINT"
    try:
        return 128 + signal.Signals[name].value
    except KeyError:
        return 128 + signal.SIGINT.value


def _main() -> None:
    if sys.argv[1:2] and sys.argv[1] in FAST and _desk_near():
        from assay.desk.stepclient import main as fast

        code = fast(sys.argv[1:])
        if code is not None:
            _leave(code)
    stop_as_interrupt()
    from assay.lean import run as lean

    code = lean(sys.argv[1:])
    if code is not None:
        _leave(code)
    from assay.cli import main as full

    _collect_less()
    full()


def _collect_less() -> None:
    """The cycle collector told what a command's objects are: the code loaded so far lives as long as the process
    (frozen: no pass walks it again), and a read of the whole forge makes tens of thousands of objects, nearly all
    of them kept until it answers (a pass every 10,000 new objects, not every 700, which at 10,000 briefs took a
    tenth of a sweep's time)."""
    import gc

    gc.freeze()
    gc.set_threshold(GC_EVERY, *gc.get_threshold()[1:])


def _leave(code: int) -> None:
    """End a short command once it has answered: its output flushed and its exit functions run (the object batch's
    end), then `os._exit`, without the interpreter's teardown of every module and object it loaded (about 6 ms of a
    cold `assay step run`'s 250, each time an agent runs a step), which writes nothing a command left open: its
    files are closed and its git processes ended as it returns."""
    if sys.getprofile() is not None or sys.gettrace() is not None:  # a profiler (`-m cProfile`), a debugger:
        sys.exit(code)  # they say what they saw as the interpreter ends
    import atexit

    code = _flushed(code)
    atexit._run_exitfuncs()
    os._exit(_flushed(code))  # and what an exit function said


def _flushed(code: int) -> int:
    """`code`, once stdout and stderr are flushed; where stdout cannot take what was written (a full disk, an I/O
    error), 120, as Python's own exit says a failed flush. A reader gone (a closed pipe), or a stream closed or
    never opened (`>&-`), has nothing more to take."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (BrokenPipeError, ValueError):
            pass
        except OSError as exc:
            if stream is sys.stdout:
                try:
                    sys.stderr.write(f"error: the command's output could not be written: {exc}\n")
                    sys.stderr.flush()
                except (OSError, ValueError, AttributeError):  # no stderr either: the exit code says it
                    pass
                code = 120
    return code


def _desk_near() -> bool:
    """Whether a desk's socket is named (`stepclient.main` answers nothing else): with none, its imports are
    spared (a step straight to the forge starts its first fetch the sooner)."""
    return bool(os.environ.get("ASSAY_SOCKET") or os.environ.get("ASSAY_PROGRESS_SOCKET"))


def stop_as_interrupt() -> None:
    """SIGTERM (`timeout`, `systemctl stop`, a cancelled CI job) and SIGHUP (a closed terminal) do what Ctrl-C does:
    they raise KeyboardInterrupt, named by the signal, so a desk hands its brief back and a step journals its end.
    A signal this process was started ignoring (`nohup`) stays ignored; a step's own SIGTERM handling
    (`steps._sigterm_as_cancel`) applies while a step runs."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, interrupt)
