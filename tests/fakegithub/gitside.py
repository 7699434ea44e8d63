"""The fake's git side: bare repositories, served over smart HTTP by `git http-backend`."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path

MERGER = {"GIT_COMMITTER_NAME": "GitHub", "GIT_COMMITTER_EMAIL": "noreply@github.com"}


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    proc = subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def init_bare(path: Path, default_branch: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", default_branch, str(path)], check=True, timeout=60)
    _git(path, "config", "http.receivepack", "true")


def rev_parse(repo: Path, ref: str) -> str | None:
    out = _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False).strip()
    return out or None


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: tuple[str, str, str]  # name, email, ISO date
    committer: tuple[str, str, str]
    message: str


def commit_info(repo: Path, rev: str) -> CommitInfo | None:
    fmt = "%H%x00%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B"
    proc = subprocess.run(["git", "--git-dir", str(repo), "show", "-s", f"--format={fmt}", f"{rev}^{{commit}}", "--"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    f = proc.stdout.split("\x00")
    return CommitInfo(f[0], f[1], tuple(f[2].split()), (f[3], f[4], f[5]), (f[6], f[7], f[8]), f[9].rstrip("\n"))


def merge_tree(repo: Path, base: str, head: str) -> str | None:
    """The tree of merging `head` into `base`, or None when they conflict."""
    proc = subprocess.run(["git", "--git-dir", str(repo), "merge-tree", "--write-tree", base, head],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 1:
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"git merge-tree: {proc.stderr.strip()}")
    return proc.stdout.split()[0]


def merge(repo: Path, base_ref: str, head_sha: str, message: str, squash: bool,
          author: tuple[str, str] | None = None) -> str | None:
    """Merge `head_sha` into the branch `base_ref` (a compare-and-swap on the ref); None on conflict. `author`:
    the commit's author (name, email), committed by GitHub."""
    base_sha = rev_parse(repo, base_ref)
    if base_sha is None:
        return None
    sha = merge_commit(repo, base_sha, head_sha, message, squash, author)
    if sha is not None:
        _git(repo, "update-ref", base_ref, sha, base_sha)
    return sha


def merge_commit(repo: Path, base_sha: str, head_sha: str, message: str, squash: bool = False,
                 author: tuple[str, str] | None = None, date: int | None = None) -> str | None:
    """A commit merging `head_sha` into `base_sha`, committed by GitHub and on no branch; None on conflict.
    `date`: its time in epoch seconds (default: now)."""
    tree = merge_tree(repo, base_sha, head_sha)
    if tree is None:
        return None
    parents = ["-p", base_sha] if squash else ["-p", base_sha, "-p", head_sha]
    by = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1]} if author else {}
    when = {"GIT_AUTHOR_DATE": f"@{date} +0000", "GIT_COMMITTER_DATE": f"@{date} +0000"} if date is not None else {}
    return _git(repo, "commit-tree", tree, *parents, "-m", message, env={**MERGER, **by, **when}).strip()


def update_ref(repo: Path, ref: str, new: str, old: str | None = None) -> bool:
    """Point `ref` at `new`, only if it is at `old` (None: only if it does not exist); whether it moved."""
    expected = old if old is not None else "0" * 40
    proc = subprocess.run(["git", "--git-dir", str(repo), "update-ref", ref, new, expected], capture_output=True,
                          timeout=60)
    return proc.returncode == 0


def delete_ref(repo: Path, ref: str) -> None:
    _git(repo, "update-ref", "-d", ref, check=False)


def request_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The body of the request `handler` is reading: chunked (as git sends a large push) or by Content-Length."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline().strip():
                    pass
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def http_backend(root: Path, method: str, path_info: str, query: str, headers: dict[str, str], body: bytes,
                 remote_user: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run `git http-backend` as CGI for one request: status, headers, body."""
    client_side = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_", "GIT_CONFIG_PARAMETERS", "GIT_DIR")
    env = {k: v for k, v in os.environ.items() if not k.startswith(client_side)}
    env.update({
        "GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1", "REMOTE_USER": remote_user,
        "REMOTE_ADDR": "127.0.0.1", "REQUEST_METHOD": method, "PATH_INFO": path_info, "QUERY_STRING": query,
        "CONTENT_TYPE": headers.get("content-type", ""), "CONTENT_LENGTH": str(len(body)),
        "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.1",
    })
    if "git-protocol" in headers:
        env["GIT_PROTOCOL"] = headers["git-protocol"]
    if "content-encoding" in headers:
        env["HTTP_CONTENT_ENCODING"] = headers["content-encoding"]
    proc = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env, timeout=120)
    head, _, payload = proc.stdout.partition(b"\r\n\r\n")
    if not _:
        head, _, payload = proc.stdout.partition(b"\n\n")
    status = 200
    out: list[tuple[str, str]] = []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            out.append((name.strip(), value.strip()))
    return status, out, payload


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    proc = subprocess.run(["git", "--git-dir", str(repo), "merge-base", "--is-ancestor", older, newer],
                          capture_output=True, timeout=60)
    return proc.returncode == 0


HUNK_HEADER = re.compile(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def file_diff(repo: Path, base: str, head: str, path: str) -> str:
    """The pull request's diff of one file (from the merge base of `base` and `head`, as GitHub shows it)."""
    return _git(repo, "diff", "--no-color", "--no-ext-diff", "-U3", f"{base}...{head}", "--", path, check=False)


def hunk_at(diff: str, line: int) -> tuple[str, int] | None:
    """The diff hunk up to `line` of the new file and that line's `position` (lines below the file's first `@@`),
    or None when the line is not in the diff (GitHub takes review comments only there)."""
    lines = diff.splitlines()
    first = next((i for i, text in enumerate(lines) if text.startswith("@@")), None)
    if first is None:
        return None
    new, start = 0, first
    for i in range(first, len(lines)):
        text = lines[i]
        header = HUNK_HEADER.match(text)
        if header:
            new, start = int(header[1]), i
        elif text.startswith(("-", "\\")):
            continue
        elif new == line:
            return "\n".join(lines[start:i + 1]), i - first
        else:
            new += 1
    return None


def line_of(repo: Path, sha: str, path: str, line: int) -> str | None:
    """The text of one line of a file at a commit, or None when there is no such line."""
    proc = subprocess.run(["git", "--git-dir", str(repo), "cat-file", "blob", f"{sha}:{path}"], capture_output=True,
                          timeout=60)
    lines = proc.stdout.decode(errors="replace").splitlines() if proc.returncode == 0 else []
    return lines[line - 1] if 0 < line <= len(lines) else None
