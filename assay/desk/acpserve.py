"""What an ACP desk serves its agent: files of the worktree (`fs/*`) and commands (`terminal/*`).

An adapter that reads or writes files, or runs commands, through its client hands the desk the effect itself, so
the desk journals it before it happens, whether or not the adapter asked permission first:

    fs/write_text_file  -> an `edit` step (path, hash of the text), then the file is written whole
    terminal/create     -> a `shell` step (the command), then the command starts; the step ends with its exit
    fs/read_text_file   -> read, not journaled (a read changes nothing)

Inside a call the adapter asked permission for (and the desk journaled as a step then), a write or command is
that step's effect and is not journaled again. Paths are confined to the worktree: the desk, which holds the
forge's credentials, reads and writes nothing else for the agent. Each command runs isolated like the agent (its
own PID namespace, ended as a unit, dying with the desk); `terminal/kill` and `terminal/release` end it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.core import lives
from assay.core.credentials import redact
from assay.desk.isolation import Isolated
from assay.desk.procs import dies_with_parent

ANSWERED = object()  # a request handler that answered the request itself (before its effect ended)
OUTPUT_LIMIT = 1024 * 1024  # a terminal's output kept when the agent names no limit
TAIL = 4000

Step = Callable[[str, str, dict[str, Any], Callable[[str], dict[str, Any]]], tuple[dict[str, Any], bool]]


class ServeError(Exception):
    """A request the desk will not or cannot serve: answered as an error, never as silence."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def shell_text(command: str, args: list[str]) -> str:
    """A command and its arguments as one shell line (`sh -c X` as X), for the journal and the tool rules."""
    if command.endswith("sh") and len(args) >= 2 and args[0] in ("-c", "-lc"):
        return args[1]
    return shlex.join([command, *args])


class Terminal:
    """One command the agent runs through the desk: its process, its output (the last `limit` bytes) and exit. A
    command that cannot start ends at once with exit 127 and the reason as its output, as a shell's would."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], limit: int) -> None:
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.code: int | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self.proc: Isolated | None = None
        try:
            self.proc = Isolated(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, preexec_fn=dies_with_parent())
        except OSError as exc:
            self.output += f"cannot start {argv[0]}: {exc.strerror or exc}\n".encode()
            self.code = 127
            self.done.set()
            return
        lives.thread(self._read, self.proc).start()

    def _read(self, proc: Isolated) -> None:
        stream: Any = proc.stdout  # bytes: the process was started without text mode
        try:
            while chunk := stream.read1(65536):
                with self._lock:
                    self.output += chunk
                    if len(self.output) > self.limit:
                        del self.output[:len(self.output) - self.limit]
                        self.truncated = True
        except (OSError, ValueError):
            pass
        self.code = proc.wait()
        self.done.set()

    def text(self) -> str:
        with self._lock:
            return bytes(self.output).decode("utf-8", "replace")

    def status(self) -> dict[str, Any] | None:
        if not self.done.is_set() or self.code is None:
            return None
        code = self.code
        return {"exitCode": code if code >= 0 else None, "signal": None if code >= 0 else f"SIG{-code}"}

    def end(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()  # the namespace's init: the command's whole tree ends with it
            self.proc.wait()
        self.done.wait(5)


class Served:
    """The desk's side of `fs/*` and `terminal/*` for one adapter run. `step(name, policy, input, effect)` journals
    a step around `effect` (the step server's `tool_step`); `policy(kind, text)` is the tool rules' verdict;
    `inside(kind, target)` says whether this write (kind `edit`, its absolute path) or command (`execute`, its
    text) is the effect of the one call the adapter asked permission for that runs now; `answer(id, result)`
    answers a request before its effect ends."""

    def __init__(self, worktree: Path, env: dict[str, str], step: Step, policy: Callable[[str, str], str],
                 inside: Callable[[str, str], bool], answer: Callable[[Any, Any], None], scope: str = "") -> None:
        self.worktree = worktree.resolve()
        self.roots = {Path(os.path.normpath(worktree.absolute())).parts[1:], self.worktree.parts[1:]}  # as named
        self.env, self.step, self.policy, self.inside, self.answer = env, step, policy, inside, answer
        self.scope = scope
        self.terminals: dict[str, Terminal] = {}
        self.closed = False  # the run ended: no command starts any more
        self._lock = threading.Lock()
        self._next = 0

    def handle(self, method: str, ident: Any, params: dict[str, Any]) -> Any:
        handlers: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
            "fs/read_text_file": self._read, "fs/write_text_file": self._write, "terminal/create": self._create,
            "terminal/output": self._output, "terminal/wait_for_exit": self._wait, "terminal/kill": self._kill,
            "terminal/release": self._release}
        handler = handlers.get(method)
        if handler is None:
            raise ServeError(f"the desk serves no {method}")
        return handler(ident, params)

    def _path(self, raw: Any) -> tuple[str, ...]:
        """The path's parts below the worktree (no `..`, no empty part); ServeError for any other path. Whether a
        part is a symlink is for `_open` to refuse, as it opens each part."""
        if not isinstance(raw, str) or not raw.startswith("/") or "\0" in raw:
            raise ServeError(f"not an absolute path: {raw!r}")
        parts = Path(os.path.normpath(raw)).parts[1:]
        for root in self.roots:
            if tuple(parts[:len(root)]) == root and len(parts) > len(root):
                return tuple(parts[len(root):])
        raise ServeError(f"{raw} is outside the worktree ({self.worktree}): the desk reads and writes only there")

    def _open(self, parts: tuple[str, ...], make_folders: bool = False) -> int:
        """A descriptor of the folder holding the path's last part, opened part by part from the worktree with no
        symlink followed (`O_NOFOLLOW`): the agent's symlinks cannot lead the desk, which holds the forge's
        credentials, to a file outside the worktree, nor can a folder swapped for a link meanwhile."""
        fd = os.open(self.worktree, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                try:
                    below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not make_folders:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = below
            return fd
        except OSError:
            os.close(fd)
            raise

    def _read(self, ident: Any, params: dict[str, Any]) -> Any:
        parts = self._path(params.get("path"))
        try:
            folder = self._open(parts)
            try:
                file = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
            finally:
                os.close(folder)
            with os.fdopen(file, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError as exc:
            raise ServeError(f"cannot read {params.get('path')}: {exc.strerror or exc} (a symlink is not followed)") \
                from None
        line, limit = params.get("line"), params.get("limit")
        if isinstance(line, int) or isinstance(limit, int):
            lines = text.splitlines(keepends=True)
            start = max(0, (line if isinstance(line, int) else 1) - 1)
            text = "".join(lines[start:start + limit] if isinstance(limit, int) else lines[start:])
        return {"content": text}

    def _write(self, ident: Any, params: dict[str, Any]) -> Any:
        parts, content = self._path(params.get("path")), params.get("content")
        if not isinstance(content, str):
            raise ServeError("fs/write_text_file needs `content`, a string")

        def effect(key: str) -> dict[str, Any]:
            try:
                folder = self._open(parts, make_folders=True)
                try:
                    partial = f".{parts[-1]}.{os.getpid()}.{secrets.token_hex(4)}"
                    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
                    with os.fdopen(fd, "wb") as out:
                        out.write(content.encode("utf-8"))
                    os.replace(partial, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)  # whole or not at all
                finally:
                    os.close(folder)
            except OSError as exc:
                raise ServeError(f"cannot write {params.get('path')}: {exc.strerror or exc} (a symlink is not "
                                 "followed)") from None
            return {"exit_code": 0, "tail": "", "status": "completed"}

        if self.inside("edit", str(params.get("path"))):
            effect("")
            return {}
        relative = "/".join(parts)
        given = {"path": relative, "input_sha256": hashlib.sha256(content.encode()).hexdigest(),
                 **({"within": self.scope} if self.scope else {})}
        _, ran = self.step("edit", self.policy("edit", relative), given, effect)
        if not ran:  # written in an earlier run whose worktree this one may not hold: the same text again
            effect("")
        return {}

    def _create(self, ident: Any, params: dict[str, Any]) -> Any:
        command, args = params.get("command"), params.get("args") or []
        if not isinstance(command, str) or not command or not isinstance(args, list):
            raise ServeError("terminal/create needs `command`, a string, and `args`, a list of strings")
        argv = [command, *(str(a) for a in args)]
        env = dict(self.env)
        for pair in params.get("env") or []:
            if isinstance(pair, dict) and isinstance(pair.get("name"), str):
                env[pair["name"]] = str(pair.get("value", ""))
        cwd = self.worktree
        if params.get("cwd") and Path(os.path.normpath(str(params["cwd"]))).parts[1:] not in self.roots:
            cwd = self.worktree.joinpath(*self._path(params["cwd"]))
        limit = params.get("outputByteLimit")
        limit = limit if isinstance(limit, int) and limit > 0 else OUTPUT_LIMIT
        with self._lock:
            terminal_id, self._next = f"term-{self._next}", self._next + 1

        def effect(key: str) -> dict[str, Any]:
            with self._lock:  # started and listed together: `stop` ends every command that ever started
                if self.closed:
                    raise ServeError("the run is ending: no command starts now")
                terminal = Terminal(argv, cwd, env, limit)
                self.terminals[terminal_id] = terminal
            self.answer(ident, {"terminalId": terminal_id})
            terminal.done.wait()
            code = terminal.code if terminal.code is not None else 1
            return {"exit_code": code if code >= 0 else 128 - code, "tail": redact(terminal.text())[-TAIL:],
                    "status": "completed" if code == 0 else "failed"}

        text = shell_text(command, [str(a) for a in args])
        if self.inside("execute", text):
            lives.thread(effect, "").start()
            return ANSWERED
        given = {"command": redact(text), **({"within": self.scope} if self.scope else {})}
        result, ran = self.step("shell", self.policy("execute", text), given, effect)
        if not ran:  # completed in an earlier run: not run again; the agent reads its recorded end
            raise ServeError(f"`{text}` already ran in an earlier run of this brief (exit {result.get('exit_code')});"
                             f" recorded result returned, not run again. Its output then:\n{result.get('tail', '')}")
        return ANSWERED

    def _terminal(self, params: dict[str, Any]) -> Terminal:
        with self._lock:
            found = self.terminals.get(str(params.get("terminalId")))
        if found is None:
            raise ServeError(f"no terminal {params.get('terminalId')!r}")
        return found

    def _output(self, ident: Any, params: dict[str, Any]) -> Any:
        terminal = self._terminal(params)
        status = terminal.status()
        return {"output": terminal.text(), "truncated": terminal.truncated,
                **({"exitStatus": status} if status is not None else {})}

    def _wait(self, ident: Any, params: dict[str, Any]) -> Any:
        terminal = self._terminal(params)
        terminal.done.wait()
        return terminal.status()

    def _kill(self, ident: Any, params: dict[str, Any]) -> Any:
        self._terminal(params).end()
        return {}

    def _release(self, ident: Any, params: dict[str, Any]) -> Any:
        terminal = self._terminal(params)
        terminal.end()
        with self._lock:
            self.terminals = {k: v for k, v in self.terminals.items() if v is not terminal}
        return {}

    def stop(self) -> None:
        """The run ends: every command still running ends with it."""
        with self._lock:
            self.closed = True
            running = list(self.terminals.values())
        for terminal in running:
            terminal.end()
