"""Secrets and forge-read values: a URL's password is never quoted back, however git quotes it; a value read from
the forge that becomes a path or an argument is checked before it is used."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.core.deskspec import SessionSpec
from assay.desk.sessions import Transcript
from tests.conftest import Forge, assay, git

PASSWORD = "Pw-" + "k3" * 8
TOKEN = "ghp_" + "Zq9" * 10


def test_a_file_forge_url_with_a_password_works_and_never_prints_it(forge: Forge, tmp_path: Path) -> None:
    good = assay("briefs", "--forge", f"file://user:{PASSWORD}@{forge.path}")
    assert good.code == 0 and "alpha" in good.out, good.err
    bad = assay("claims", "--forge", f"file://user:{PASSWORD}@{tmp_path}/missing.git")
    assert bad.code == 1 and "error: cannot read forge" in bad.err
    assert PASSWORD not in good.out + good.err + bad.out + bad.err


def test_every_text_quoting_git_is_masked_a_hook_that_echoes_credentials_included(forge: Forge) -> None:
    """git's words reach errors through one mask: a forge hook's refusal that quotes the token the push ran with,
    and a URL's password quoted without its scheme (as git quotes a file URL), come out as ***."""
    hook = forge.path / "hooks" / "pre-receive"
    hook.write_text(f'#!/bin/sh\necho "error: refused for $GITHUB_TOKEN via user:{PASSWORD}@/srv/x" >&2\nexit 1\n')
    hook.chmod(0o755)
    run = assay("claim", "alpha", "--desk", "d", "--forge", forge.url, env={"GITHUB_TOKEN": TOKEN})
    assert run.code == 1 and "refused for *** via ***@/srv/x" in run.err, run.err
    assert TOKEN not in run.out + run.err and PASSWORD not in run.out + run.err


SESSION = SessionSpec(new=("--new", "{session}"), resume=("--resume", "{session}"),
                      file="{home}/t/{cwd_slug}/{session}.jsonl")
GLOBBED = SessionSpec(new=(), resume=("resume", "{session}"), file="{home}/sessions/*/rollout-{session}.jsonl")


@pytest.mark.parametrize("planted", ["../../PWNED", "../../../tmp/PWNED", "--dangerously-skip-permissions",
                                     "a/b", "", "x" * 200, "id\nwith-newline"])
def test_a_planted_session_id_is_refused_before_anything_is_written(tmp_path: Path, planted: str) -> None:
    home, worktree = tmp_path / "home", tmp_path / "wt"
    transcript = Transcript(SESSION, planted, {"HOME": str(home)}, worktree)
    with pytest.raises(OSError, match="session id .* read from the forge is not a safe session id"):
        transcript.restore(b'{"message": {}}\n', "")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing written, inside HOME or out


@pytest.mark.parametrize("planted", ["../../../PWNED.jsonl", "/tmp/PWNED.jsonl", "2026/./x.jsonl", "a//b",
                                     "-rf/x.jsonl"])
def test_a_planted_transcript_path_is_refused(tmp_path: Path, planted: str) -> None:
    transcript = Transcript(GLOBBED, "0f0e0d0c-0000-4000-8000-000000000001", {"HOME": str(tmp_path / "home")},
                            tmp_path / "wt")
    with pytest.raises(OSError, match="transcript path .* is not a safe transcript path"):
        transcript.restore(b'{"message": {}}\n', planted)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_good_checkpoint_is_restored_where_its_cli_looks(tmp_path: Path) -> None:
    session = "0f0e0d0c-0000-4000-8000-000000000001"
    transcript = Transcript(GLOBBED, session, {"HOME": str(tmp_path / "home")}, tmp_path / "wt")
    transcript.restore(b"{}\n", f"2026/12/03/rollout-{session}.jsonl")
    assert (tmp_path / "home" / "sessions" / "2026/12/03" / f"rollout-{session}.jsonl").read_bytes() == b"{}\n"
    assert transcript.arguments(resume=True) == ["resume", session]


@pytest.mark.parametrize(("kind", "value", "ok"), [
    ("session id", "be088084-8119-47a2-a4ab-0a089ed26a76", True), ("session id", "-x", False),
    ("session id", 7, False), ("session id", "a\x00b", False), ("transcript path", "a/b.jsonl", True),
    ("transcript path", "a/../b", False), ("transcript path", "/etc/passwd", False),
])
def test_values_from_the_forge_are_checked_against_strict_patterns(kind: str, value: object, ok: bool) -> None:
    from assay.core.forgevalues import problem  # here: the other tests run where the module is missing

    assert (problem(kind, value) is None) is ok


def test_a_nul_in_a_brief_that_would_reach_the_agent_is_reported_by_lint(tmp_path: Path) -> None:
    """A brief's text and `env` values become the agent's arguments and environment: a NUL there (which no
    process argument can carry: the run failed with `ValueError: embedded null byte`) is a lint problem."""
    folder = tmp_path / "briefs"
    folder.mkdir()
    (folder / "env.md").write_text('---\ntitle: E\nlabels: [work]\nenv:\n  X: "a\\0b"\n---\nE.\n')
    (folder / "body.md").write_text("---\ntitle: B\nlabels: [work]\n---\nB\0.\n")
    run = assay("brief", "lint", str(folder))
    assert run.code == 2, run.out + run.err
    assert "env.md:5: `env.X` holds a NUL character" in run.out + run.err
    assert "body.md:5: the brief holds a NUL character" in run.out + run.err


def test_a_nul_in_the_agents_arguments_reaches_it_as_a_replacement_character(tmp_path: Path) -> None:
    from assay.desk.isolation import Isolated

    out = tmp_path / "args"
    agent = Isolated(["sh", "-c", f'printf %s "$1$X" > {out}', "sh", "a\0b"], env={"PATH": "/usr/bin:/bin",
                                                                                    "X": "c\0d"}, text=True)
    assert agent.wait(timeout=30) == 0
    assert out.read_text() == "a\ufffdbc\ufffdd"


def test_a_desk_resuming_a_planted_checkpoint_refuses_its_session_id_and_starts_afresh(forge: Forge,
                                                                                       tmp_path: Path) -> None:
    """A checkpoint entry planted on the forge whose `session` climbs out of the agent's HOME: the successor
    writes nothing there, passes no `--resume ../..` to its CLI, journals the checkpoint as failed, and works
    the brief afresh."""
    import json

    from tests.helpers.desks import publish, run_desk
    from tests.helpers.fastimport import commit, fast_import
    from tests.helpers.sessiondesks import AGENT, BRIEF, DESK
    from tests.journal_check import entries

    publish(forge, {"desks/talker.yaml": DESK.format(agent=AGENT), "briefs/talk.md": BRIEF.format(check="true")})
    home = tmp_path / "home"
    first = run_desk(forge, "talker", tmp_path, HOME=str(home), ASSAY_CRASH_AT="journal.after-checkpoint")
    assert first.code == -9, first.out + first.err  # died just after journaling the agent's conversation
    last = entries(forge.path, "talk")[-1]
    assert last["kind"] == "checkpoint"
    seq, planted = last["seq"] + 1, "../../../PWNED"
    entry = {**last, "seq": seq, "data": {**last["data"], "session": planted, "checkpoint_blob": f"blobs/{seq}-c"}}
    ref = "refs/assay/journal/talk"
    fast_import(forge, commit(ref, {"entries.jsonl": (json.dumps(entry, sort_keys=True) + "\n").encode(),
                                    f"blobs/{seq}-c": b'{"message": {"content": []}}\n'}, forge.tip(ref)))
    second = run_desk(forge, "talker", tmp_path, HOME=str(home))
    assert second.code == 0 and "review ready" in second.out, second.out + second.err
    assert f"checkpoint seq {seq} could not be resumed" in second.out and "not a safe session id" in second.out
    assert not list(tmp_path.rglob("PWNED*"))  # nothing written where the planted id pointed, or anywhere
    notes = [e["data"] for e in entries(forge.path, "talk") if e["kind"] == "note"
             and (e.get("data") or {}).get("checkpoint") == "failed"]
    assert [n["of"] for n in notes] == [seq] and "not a safe session id" in notes[0]["why"]
    seen = git("--git-dir", str(forge.path), "show", "refs/heads/assay/talk:seen.txt")  # as its agent left it
    assert seen.startswith("saw 0 at attempt")  # a fresh session (`--new`), no `--resume`
