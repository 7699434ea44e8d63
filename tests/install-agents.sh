#!/bin/sh
# The agent CLI tests (tests/test_agent_clis.py) drive the real Claude Code, Codex and aider CLIs against
# scripted model servers on 127.0.0.1. This installs pinned versions of them under
# ${ASSAY_TEST_AGENTS:-$HOME/.cache/assay-test-agents} (npm packages into npm/, aider into a venv in aider/),
# skipping what is already there at that version. It is quiet on success and never fails the test command:
# what cannot be installed is named, with the tests that will be skipped.
CLAUDE_VERSION=2.1.332  # its npm package declares node >= 22; the native binary runs on node 20 too
CODEX_VERSION=0.171.0
AIDER_VERSION=0.86.2
CLAUDE_ACP_VERSION=0.23.1  # the ACP adapters: neither answers --version, so their package.json says
CODEX_ACP_VERSION=0.16.0

root="${ASSAY_TEST_AGENTS:-$HOME/.cache/assay-test-agents}"
log="${TMPDIR:-/tmp}/assay-agents-install.log"
: >"$log" 2>/dev/null || log=/dev/null
npm_prefix="$root/npm"
aider_venv="$root/aider"

has_version() { # has_version BINARY VERSION: the binary runs and reports that version
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -qF "$2"
}

npm_install() { # npm_install PACKAGE VERSION BINARY WHAT
  if has_version "$npm_prefix/bin/$3" "$2"; then return 0; fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "npm is not installed: the $4 agent test will be skipped" >&2
    return 0
  fi
  echo "== npm install $1@$2" >>"$log"
  # claude-code's postinstall may be skipped by npm's script policy; its binary runs anyway (checked below).
  if npm install --global --prefix "$npm_prefix" --no-fund --no-audit --loglevel=warn "$1@$2" >>"$log" 2>&1 \
     && has_version "$npm_prefix/bin/$3" "$2"; then
    return 0
  fi
  echo "$1@$2 could not be installed (see $log): the $4 agent test will be skipped" >&2
}

mkdir -p "$root" >>"$log" 2>&1 || {
  echo "cannot create $root (see $log): the agent CLI tests will be skipped" >&2
  exit 0
}
npm_install @anthropic-ai/claude-code "$CLAUDE_VERSION" claude claude
npm_install @openai/codex "$CODEX_VERSION" codex codex
acp_install() { # acp_install PACKAGE VERSION BINARY: an ACP adapter, its version read from its package.json
  meta="$npm_prefix/lib/node_modules/$1/package.json"
  if [ -x "$npm_prefix/bin/$3" ] && grep -q "\"version\": \"$2\"" "$meta" 2>/dev/null; then return 0; fi
  command -v npm >/dev/null 2>&1 || { echo "npm is not installed: the $3 tests will be skipped" >&2; return 0; }
  echo "== npm install $1@$2" >>"$log"
  npm install --global --prefix "$npm_prefix" --no-fund --no-audit --loglevel=warn "$1@$2" >>"$log" 2>&1 \
    && grep -q "\"version\": \"$2\"" "$meta" 2>/dev/null \
    || echo "$1@$2 could not be installed (see $log): the $3 tests will be skipped" >&2
}
acp_install @zed-industries/claude-agent-acp "$CLAUDE_ACP_VERSION" claude-agent-acp
acp_install @zed-industries/codex-acp "$CODEX_ACP_VERSION" codex-acp

if ! has_version "$aider_venv/bin/aider" "$AIDER_VERSION"; then
  python=""
  for candidate in python3.12 python3.11 python3; do
    # aider-chat 0.86 wants Python 3.10 to 3.12; a pyenv shim may exist without a Python behind it
    if "$candidate" -c 'import sys, venv; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' \
       >/dev/null 2>&1; then python="$candidate"; break; fi
  done
  echo "== aider-chat==$AIDER_VERSION with ${python:-no Python 3.10-3.12}" >>"$log"
  # pip prints many harmless "Location ... is ignored" warnings here: they stay in the log.
  if [ -z "$python" ]; then
    echo "no Python 3.10-3.12 for aider-chat==$AIDER_VERSION: the aider agent test will be skipped" >&2
  elif rm -rf "$aider_venv" && "$python" -m venv "$aider_venv" >>"$log" 2>&1 \
     && "$aider_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "aider-chat==$AIDER_VERSION" >>"$log" 2>&1 \
     && has_version "$aider_venv/bin/aider" "$AIDER_VERSION"; then
    :
  else
    echo "aider-chat==$AIDER_VERSION could not be installed (see $log): the aider agent test will be skipped" >&2
  fi
fi
exit 0
