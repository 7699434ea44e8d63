"""Where the real agent CLIs are installed (tests/install-agents.sh), and how a user points them at a server.

The CLIs live under ${ASSAY_TEST_AGENTS:-$HOME/.cache/assay-test-agents}: npm packages (claude, codex) in
`npm/bin`, aider in the venv `aider/`. The folder is read once, at import: the test fixtures drop every
`ASSAY_*` variable before a test runs. Nothing here starts a process; the helpers return argv lists,
environments and config folders.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

AGENTS_HOME = Path(os.environ.get("ASSAY_TEST_AGENTS") or Path.home() / ".cache" / "assay-test-agents")
NPM_BIN = AGENTS_HOME / "npm" / "bin"
AIDER_BIN = AGENTS_HOME / "aider" / "bin"

# What every CLI process gets from the parent environment (and every GIT_* variable, so the tests' pinned
# git identity and config reach the agent's git commands); the rest is set by the helpers below.
_BASE_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM", "USER", "LOGNAME", "SHELL")


def _executable(path: Path) -> str | None:
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def claude_bin() -> str | None:
    """The installed Claude Code CLI (a native binary; needs no node)."""
    return _executable(NPM_BIN / "claude")


def codex_bin() -> str | None:
    """The installed Codex CLI (a node script around a native binary: needs `node` on PATH)."""
    return _executable(NPM_BIN / "codex") if shutil.which("node") else None


def aider_bin() -> str | None:
    """The installed aider (its own venv)."""
    return _executable(AIDER_BIN / "aider")


def path_dirs() -> list[str]:
    """Folders to put in front of PATH so `claude` and `codex` are found (`node`, for codex, is already on it).

    aider's venv folder is not among them: its `python3` would shadow the system's. Run aider by `aider_bin()`.
    """
    return [str(NPM_BIN)]


def base_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A small environment: the parent's PATH/locale basics and GIT_*, `path_dirs()` first on PATH, a HOME of
    the test's own, then `extra`."""
    env = {key: value for key, value in os.environ.items() if key in _BASE_KEYS or key.startswith("GIT_")}
    path = env.get("PATH", os.defpath)
    env["PATH"] = os.pathsep.join([*path_dirs(), path])
    env["HOME"] = str(home)
    env.setdefault("LANG", "C.UTF-8")
    env.update(extra or {})
    return env


# -- Claude Code ---------------------------------------------------------------------------------------

# Runs any Bash command (and Write/Edit/Read, also outside the cwd) in `-p` mode without prompts, also as
# root; every other tool is denied. (`--allowedTools Bash` alone is the minimum for Bash.)
CLAUDE_PERMISSIONS = ["--permission-mode", "dontAsk", "--allowedTools", "Bash,Edit,Write,Read"]


def claude_env(server_url: str, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that points `claude` at a scripted Anthropic server, quiet and offline."""
    home.mkdir(parents=True, exist_ok=True)
    return base_env(home, {
        "ANTHROPIC_BASE_URL": server_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        **(extra or {}),
    })


def claude_argv(prompt: str, *more: str) -> list[str]:
    """`claude -p PROMPT` with the permissions that let its Bash tool run unattended."""
    binary = claude_bin()
    assert binary is not None, "claude is not installed (sh tests/install-agents.sh)"
    return [binary, "-p", prompt, *CLAUDE_PERMISSIONS, *more]


# -- Codex ---------------------------------------------------------------------------------------------

CODEX_KEY_ENV = "OPENAI_API_KEY"  # the key variable a gateway provider names in its env_key


def codex_config(base_url: str, model: str = "gpt-scripted") -> str:
    """config.toml text: a custom Responses provider at `base_url` (Codex posts to `{base_url}/responses`),
    selected; no update checks, no analytics, no plugin sync, no retries (a scripted server does not flake)."""
    return "\n".join([
        f'model = "{model}"',
        'model_provider = "scripted"',
        'approval_policy = "never"',
        'check_for_update_on_startup = false',
        # Run commands with `bash -c`, not `bash -lc`: Debian's /etc/profile resets PATH in a login shell.
        "allow_login_shell = false",
        "",
        # Plugins sync a marketplace at startup (DNS lookups of api.github.com and chatgpt.com).
        "[features]",
        "plugins = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[otel]",
        'exporter = "none"',
        "",
        "[model_providers.scripted]",
        'name = "Scripted model"',
        f'base_url = "{base_url}"',
        f'env_key = "{CODEX_KEY_ENV}"',
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
    ])


def codex_home(directory: Path, base_url: str) -> Path:
    """Make a CODEX_HOME at `directory` whose config.toml points at the server; returns the folder."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.toml").write_text(codex_config(base_url))
    return directory


def codex_env(base_url: str, home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `codex exec` against a `ResponsesServer` (pass its `.base_url`): a HOME of the
    test's own, CODEX_HOME=HOME/.codex with the provider config, and the provider's key."""
    home.mkdir(parents=True, exist_ok=True)
    config = codex_home(home / ".codex", base_url)
    return base_env(home, {
        "CODEX_HOME": str(config),
        CODEX_KEY_ENV: "sk-scripted-test-key",
        **(extra or {}),
    })


def codex_argv(prompt: str, *more: str) -> list[str]:
    """`codex exec` unattended in the working directory (a git repository; else add `--skip-git-repo-check`).

    `-s workspace-write` lets commands write the cwd, /tmp and $TMPDIR, but not `.git` (add `--add-dir` with
    the repository's `git rev-parse --git-dir` for commits), and blocks every socket, Unix ones included
    (`-c sandbox_workspace_write.network_access=true` allows them). Exec mode never asks for approval.
    """
    binary = codex_bin()
    assert binary is not None, "codex is not installed (sh tests/install-agents.sh)"
    return [binary, "exec", "-s", "workspace-write", *more, prompt]
