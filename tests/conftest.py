"""Fixtures: a real bare forge per test, pinned git, and the real CLI in real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from assay.core.claims import Claims
from assay.core.git import ForgeGit
from tests.fakegithub import FakeGitHub

REPO = Path(__file__).resolve().parent.parent

# Started in the background by a shell (`cmd &`) or under `nohup`, the tests begin with SIGINT ignored, and every
# process a test starts would inherit that across exec: a test that hands one Ctrl-C would see it shrugged off.
# As a terminal starts a command, the test processes and theirs take Ctrl-C.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PINNED = {
    "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer", "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "TZ": "UTC", "LANG": "C", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}
BRIEF_IDS = ("alpha", "beta", "gamma", "delta", "epsilon", "hello")


def brief_md(title: str, **extra: str) -> str:
    lines = ["---", f"title: {title}", *(f"{k}: {v}" for k, v in extra.items()), "---", f"{title}.", ""]
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def pinned_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in PINNED.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    for key in [k for k in os.environ if k.startswith("ASSAY_")]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ASSAY_CACHE_DIR", str(tmp_path / "cache"))
    from assay.core.git import listing, push

    monkeypatch.setattr(listing, "_HEADS", {})  # what this process learned of forges: each test's its own
    monkeypatch.setattr(listing, "_HELD", {})
    monkeypatch.setattr(push, "_CAPS", {})


def git(*args: str, cwd: Path | None = None, check: bool = True, input: str | None = None) -> str:
    """Plain git, as an independent reader of what is on the forge (and a planter of records on it)."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


@dataclass
class Forge:
    path: Path
    seed: Path

    @property
    def url(self) -> str:
        return str(self.path)

    def tip(self, ref: str) -> str | None:
        out = git("ls-remote", self.url, ref).split()
        return out[0] if out else None

    def claim_json(self, brief: str, rev: str | None = None) -> dict[str, object]:
        ref = rev or f"refs/assay/claims/{brief}"
        data: dict[str, object] = json.loads(git("--git-dir", str(self.path), "show", f"{ref}:claim.json"))
        return data

    def chain(self, brief: str) -> list[dict[str, object]]:
        """The whole claim chain read with plain git, oldest first."""
        ref = f"refs/assay/claims/{brief}"
        shas = git("--git-dir", str(self.path), "rev-list", "--reverse", ref).split()
        return [self.claim_json(brief, sha) for sha in shas]

    def write_record(self, ref: str, name: str, content: bytes) -> None:
        """Point `ref` at a commit whose tree holds `name` with `content`, as a buggy or newer tool might."""
        sha = subprocess.run(["git", "--git-dir", str(self.path), "hash-object", "-w", "--stdin"], input=content,
                             capture_output=True, check=True).stdout.decode().strip()
        tree = subprocess.run(["git", "--git-dir", str(self.path), "mktree"],
                              input=f"100644 blob {sha}\t{name}\n".encode(), capture_output=True,
                              check=True).stdout.decode().strip()
        commit = git("--git-dir", str(self.path), "commit-tree", tree, "-m", "junk").strip()
        git("--git-dir", str(self.path), "update-ref", ref, commit)

    def add_brief(self, brief: str, text: str) -> None:
        (self.seed / "briefs" / f"{brief}.md").write_text(text)
        git("add", "-A", cwd=self.seed)
        git("commit", "-q", "-m", f"brief {brief}", cwd=self.seed)
        git("push", "-q", self.url, "HEAD:refs/heads/main", cwd=self.seed)


@pytest.fixture
def forge(tmp_path: Path) -> Forge:
    path = tmp_path / "forge.git"
    git("init", "-q", "--bare", "--initial-branch=main", str(path))
    seed = tmp_path / "seed"
    git("init", "-q", "--initial-branch=main", str(seed))
    (seed / "briefs").mkdir()
    for brief in BRIEF_IDS:
        (seed / "briefs" / f"{brief}.md").write_text(brief_md(f"Brief {brief}"))
    git("add", "-A", cwd=seed)
    git("commit", "-q", "-m", "briefs", cwd=seed)
    git("push", "-q", str(path), "HEAD:refs/heads/main", cwd=seed)
    return Forge(path, seed)


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def assay(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> Run:
    """The real CLI in a real process."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "assay", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def audit_failures(forge_url: str, brief: str) -> dict[str, str]:
    """The checks `assay audit BRIEF` fails (name -> reason): a real history, however it was made, must pass."""
    run = assay("audit", brief, "--json", "--forge", forge_url)
    view = run.json()
    assert isinstance(view, dict) and run.code in (0, 1), run.err
    return {str(c["name"]): str(c["reason"]) for c in view["checks"] if not c["passed"]}


@pytest.fixture
def claims(forge: Forge) -> Iterator[Claims]:
    git_port = ForgeGit(forge.url)
    yield Claims(git_port)
    git_port.close()


@pytest.fixture
def fake_github(tmp_path: Path) -> Iterator[FakeGitHub]:
    """A fake GitHub on loopback; the test fails if any JSON answer it gave departs from GitHub's description."""
    with FakeGitHub(tmp_path) as fake:
        yield fake
        assert fake.schema_problems() == []


@pytest.fixture
def work(forge: Forge) -> Forge:
    """A forge whose main has two desks, `builder` and `other`, each with 2 attempts."""
    from tests.helpers.desks import DESK, publish  # here: the helpers import this module

    publish(forge, {"desks/builder.yaml": DESK.format(name="builder", attempts=2),
                    "desks/other.yaml": DESK.format(name="other", attempts=2)})
    return forge
