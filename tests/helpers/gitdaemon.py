"""A forge on a real network transport: `git daemon --inetd` behind a loopback TCP listener, one process a connection.

The forge's own processes (`upload-pack`, `receive-pack`) are then children of the test, in sessions of their
own, not of the desks that push and fetch: a desk killed or paused with its whole process group takes only its
own side of a push with it, as when a machine dies and the forge it talks to does not (a local-path forge would
run `receive-pack` in the desk's process group, to be killed holding a ref's lock or paused holding it).

Each connection's bytes are relayed through this process, which acknowledges what it receives at once
(`TCP_QUICKACK`): git's small protocol writes then do not wait out loopback's 40 ms delayed acknowledgement.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

CHUNK = 65536


class GitDaemon:
    """Serves every repository under `base` at git://127.0.0.1:PORT/NAME (pushes allowed) while in its context."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> GitDaemon:
        self._listener.listen(64)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()
        self._thread.join(timeout=10)
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)

    def _accept(self) -> None:
        command = ["git", "daemon", "--inetd", "--export-all", "--enable=receive-pack", f"--base-path={self.base}",
                   "--timeout=60", "--init-timeout=10"]
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed by __exit__
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            with self._lock:  # forget what has ended, keep the rest for __exit__
                self._procs = [p for p in self._procs if p.poll() is None] + [proc]
            assert proc.stdin is not None and proc.stdout is not None
            threading.Thread(target=_upstream, args=(conn, proc.stdin), daemon=True).start()
            threading.Thread(target=_downstream, args=(proc.stdout, conn, proc), daemon=True).start()


def _upstream(conn: socket.socket, sink: IO[bytes]) -> None:
    """Client to daemon, acknowledging each read at once."""
    try:
        while True:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            data = conn.recv(CHUNK)
            if not data:
                break
            sink.write(data)
            sink.flush()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.close()


def _downstream(source: IO[bytes], conn: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    """Daemon to client. A client gone meanwhile is not the daemon's concern: it is read to its end, as a
    server writing into a closed connection would finish, and the connection is closed when it is done."""
    gone = False
    try:
        while True:
            data = os.read(source.fileno(), CHUNK)
            if not data:
                break
            if not gone:
                try:
                    conn.sendall(data)
                except OSError:
                    gone = True
    finally:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        source.close()
        proc.wait()
