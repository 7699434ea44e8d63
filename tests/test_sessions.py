"""Agent-session checkpoints: the agent's conversation journaled at turn boundaries, scrubbed, and resumed by the
next run of the round; a resume that fails is journaled and the run starts afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.core.deskspec import SessionSpec, check_desk
from assay.core.records import JournalEntry
from assay.desk import sessions
from tests.conftest import Forge, assay
from tests.helpers.desks import publish, run_desk
from tests.helpers.sessiondesks import AGENT, BRIEF, DESK
from tests.journal_check import entries, invariants


def _line(*blocks: dict[str, object]) -> bytes:
    return (json.dumps({"message": {"content": list(blocks)}}) + "\n").encode()


def test_a_checkpoint_is_taken_only_between_turns(tmp_path: Path) -> None:
    """While a tool call is in flight its effects may already be in the worktree, which the checkpoint records with
    the transcript: so a checkpoint is offered only while the transcript ends at a turn boundary, and once."""
    spec = SessionSpec(new=("--session-id", "{session}"), resume=("--resume", "{session}"), file="{home}/t/{session}")
    transcript = sessions.Transcript(spec, "s1", {"HOME": str(tmp_path)}, tmp_path / "wt")
    (tmp_path / "t").mkdir()
    asked = _line({"type": "text", "text": "do it"})
    call = _line({"type": "tool_use", "id": "t1", "name": "Bash"})
    (tmp_path / "t" / "s1").write_bytes(asked + call)
    assert transcript.whole([]) is None  # the call runs: not one moment of conversation and files
    (tmp_path / "t" / "s1").write_bytes(asked + call + _line({"type": "tool_result", "tool_use_id": "t1"}))
    found = transcript.whole([])
    assert found is not None and found[1] == len(found[0])
    transcript.saved(found[0])
    assert transcript.whole([]) is None  # saved already


def test_a_checkpoint_ends_at_a_turn_boundary() -> None:
    asked = _line({"type": "text", "text": "do it"})
    call = _line({"type": "tool_use", "id": "t1", "name": "Bash"})
    answer = _line({"type": "tool_result", "tool_use_id": "t1", "content": "ok"})
    assert sessions.at_boundary(asked + call + answer) == asked + call + answer
    assert sessions.at_boundary(asked + call) == asked  # a call without its result: the middle of a turn
    assert sessions.at_boundary(asked + answer[:-5]) == asked  # a line still being written
    assert sessions.at_boundary(asked + b"not json\n" + answer) == asked


def test_a_checkpoint_holds_no_forge_credential() -> None:
    token = "ghp_" + "s3cret" * 6
    secrets = sessions.known_secrets({"GITHUB_TOKEN": token, "ANTHROPIC_API_KEY": "sk-not-ours-to-hide"},
                                     "https://x-access-token:pa55word-long@example.com/o/r.git")
    text = f"token {token} and pa55word-long, and sk-not-ours-to-hide".encode()
    assert sessions.scrub(text, secrets) == b"token [redacted] and [redacted], and sk-not-ours-to-hide"


def test_the_newest_checkpoint_not_marked_failed_is_resumed() -> None:
    def checkpoint(seq: int, session: str) -> JournalEntry:
        return JournalEntry(seq=seq, epoch=1, kind="checkpoint", at="2030-01-01T00:00:00Z",
                            data={"name": sessions.NAME, "session": session, "checkpoint_blob": f"blobs/{seq}"})

    found = [checkpoint(1, "a"), checkpoint(2, "b"),
             JournalEntry(seq=3, epoch=1, kind="note", at="2030-01-01T00:00:00Z",
                          data={"checkpoint": "failed", "of": 2})]
    saved = sessions.latest(found, lambda e: str((e.data or {})["checkpoint_blob"]).encode())
    assert saved == sessions.Saved(1, "a", b"blobs/1")
    assert sessions.latest(found[2:], lambda e: b"") is None
    assert sessions.cwd_slug("/tmp/we_ird.dir x") == "-tmp-we-ird-dir-x"


def test_a_session_block_is_checked_with_its_line() -> None:
    good = DESK.format(agent=AGENT)
    spec, problems = check_desk(good, "desks/talker.yaml")
    assert not problems and spec is not None and spec.session is not None
    assert spec.session.resume == ("--resume", "{session}")
    for broken, said in ((good.replace("{{session}}.jsonl", "x.jsonl").replace("{session}.jsonl", "x.jsonl"),
                          "with {session} in it"),
                         (good.replace("    new:", "    fresh:"), "unknown agent.session key 'fresh'"),
                         (good.replace("{home}/t", "{user}/t"), "names {user}, which a desk does not fill in")):
        _, problems = check_desk(broken, "desks/talker.yaml")
        assert problems and said in str(problems[0]) and "desks/talker.yaml:" in str(problems[0]), problems


def test_an_acp_desks_session_block_names_its_transcript_only() -> None:
    """An ACP adapter opens and loads sessions over the protocol: its desk says where the transcript is, nothing
    about arguments."""
    acp = ("name: talker\nagent:\n  protocol: acp\n  command: [claude-agent-acp]\n  session:\n"
           '    file: "{home}/.claude/projects/{cwd_slug}/{session}.jsonl"\n')
    spec, problems = check_desk(acp, "desks/talker.yaml")
    assert not problems and spec is not None and spec.session is not None
    assert spec.session.new == () and spec.session.resume == () and spec.session.file.endswith("{session}.jsonl")
    _, problems = check_desk(acp.replace("  session:\n", "  session:\n    resume: [--resume]\n"),
                             "desks/talker.yaml")
    assert problems and "unknown agent.session key 'resume'" in str(problems[0]), problems
    assert "only `file`" in str(problems[0]) and "desks/talker.yaml:" in str(problems[0])


CLAUDE_FILE = "{home}/.claude/projects/{cwd_slug}/{session}.jsonl"


def test_a_restored_transcript_names_this_runs_worktree_and_home_not_the_dead_desks(tmp_path: Path) -> None:
    """Claude Code 2.1.332 keeps its working directory (each line's `cwd`, its environment message) and its system
    prompt (a memory folder under HOME) in the transcript, and resumes from them: a restore moves them here."""
    old_home, old_wt = "/old/home", "/old machine/state/worktrees/claude/ship"
    memory = f"{old_home}/.claude/projects/-old-machine-cache-r3po/memory/"
    said = f"Primary working directory: {old_wt}"
    lines = [{"cwd": old_wt, "message": {"content": [{"type": "text", "text": said}]}},
             {"cwd": old_wt, "attachment": {"systemPrompt": [f"memory at `{memory}`"]}},
             {"cwd": old_wt, "message": {"content": [{"type": "tool_result", "tool_use_id": "t",
                                                      "content": f"{old_wt}/a.txt {old_wt}-2/b.txt {old_home}x"}]}}]
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    home, worktree = tmp_path / "home 2", tmp_path / "state-2" / "worktrees" / "claude" / "ship"
    transcript = sessions.Transcript(SessionSpec(("--session-id", "{session}"), (), CLAUDE_FILE), "s-1",
                                     {"HOME": str(home)}, worktree)
    transcript.restore(data, "")
    assert transcript.path == home / ".claude" / "projects" / sessions.cwd_slug(worktree) / "s-1.jsonl"
    text = transcript.path.read_text()
    restored = [json.loads(line) for line in text.splitlines()]
    assert [line["cwd"] for line in restored] == [str(worktree)] * 3
    assert f"Primary working directory: {worktree}\"" in text
    assert f"memory at `{home}/.claude/projects/-old-machine-cache-r3po/memory/`" in text
    # a path that only begins like the old worktree or HOME is another one: left as it is
    assert restored[2]["message"]["content"][0]["content"] == f"{worktree}/a.txt {old_wt}-2/b.txt {old_home}x"
    assert transcript.restored_size == len(text.encode())
    same = sessions.Transcript(transcript.spec, "s-1", {"HOME": str(home)}, worktree)
    same.restore(text.encode(), "")  # resumed where it was saved: nothing to move
    assert same.path is not None and same.path.read_text() == text


def test_a_desk_whose_transcripts_cannot_be_found_says_so_before_it_claims(forge: Forge, tmp_path: Path) -> None:
    """A transcript pattern naming a variable the agent does not get (Codex's {CODEX_HOME}, unset) would never
    checkpoint: the desk refuses at preflight, exit 2, with the desk file and line; a relative one is a problem of
    the file itself."""
    desk = DESK.format(agent=AGENT).replace("{home}/t/", "{SESSION_AGENT_HOME}/t/")
    publish(forge, {"desks/talker.yaml": desk, "briefs/talk.md": BRIEF.format(check="true")})
    run = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"))
    line = desk.splitlines().index("  session:") + 1
    assert run.code == 2, run.out + run.err
    assert f"desks/talker.yaml:{line}: `agent.session.file` names {{SESSION_AGENT_HOME}}, which the agent's " \
        "environment does not set" in run.err and "never checkpoint" in run.err and "Traceback" not in run.err
    assert entries(forge.path, "talk") == []  # nothing claimed
    ok = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"), SESSION_AGENT_HOME=str(tmp_path / "talk"))
    assert ok.code == 0 and "review ready" in ok.out, ok.out + ok.err
    _, problems = check_desk(DESK.format(agent=AGENT).replace("{home}/t/", "t/"), "desks/talker.yaml")
    assert problems and "must be an absolute path" in str(problems[0]) and "desks/talker.yaml:" in str(problems[0])


def test_a_codex_home_under_the_desks_state_is_its_own_with_the_users_settings(tmp_path: Path) -> None:
    users = tmp_path / "home" / ".codex"
    users.mkdir(parents=True)
    (users / "config.toml").write_text('model = "m"\n')
    (users / "auth.json").write_text("{}")
    state = tmp_path / "state" / "desks" / "codex"
    values = sessions.desk_values([("CODEX_HOME", "{state}/codex"), ("WHERE", "{home}/x")], state,
                                  {"HOME": str(tmp_path / "home")})
    assert values == {"CODEX_HOME": str(state / "codex"), "WHERE": str(tmp_path / "home" / "x")}
    assert (state / "codex" / "config.toml").read_text() == 'model = "m"\n'
    assert (state / "codex" / "auth.json").stat().st_mode & 0o777 == 0o600
    assert not (state / "codex" / "AGENTS.md").exists()  # the user has none
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.toml").write_text('model = "n"\n')  # the user's CODEX_HOME, where set, is read
    sessions.desk_values([("CODEX_HOME", "{state}/codex")], state,
                         {"HOME": "/nowhere", "CODEX_HOME": str(tmp_path / "mine")})
    assert (state / "codex" / "config.toml").read_text() == 'model = "n"\n'


def test_the_next_attempt_resumes_the_conversation_the_last_one_saved(forge: Forge, tmp_path: Path) -> None:
    """Attempt 1 starts a session, fails verify (it saw 0 turns), and its conversation is checkpointed as it
    ends; attempt 2 restores it and resumes it (it sees 1 turn), and passes."""
    publish(forge, {"desks/talker.yaml": DESK.format(agent=AGENT),
                    "briefs/talk.md": BRIEF.format(check="grep -q 'saw 1 at attempt 2' seen.txt")})
    run = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"))
    assert run.code == 0 and "talk attempt 1 failed" in run.out and "review ready" in run.out, run.out + run.err
    assert "resumes the agent's conversation (checkpoint seq" in run.out
    saved = [e for e in entries(forge.path, "talk") if e["kind"] == "checkpoint"]
    assert [(e["data"]["name"], e["data"]["attempt"]) for e in saved] == [(sessions.NAME, 1), (sessions.NAME, 2)]
    assert saved[0]["data"]["session"] == saved[1]["data"]["session"]  # one conversation, resumed
    assert invariants(forge.path, "talk") == []


def test_a_checkpoint_that_cannot_be_resumed_is_journaled_and_the_run_starts_afresh(forge: Forge,
                                                                                     tmp_path: Path) -> None:
    publish(forge, {"desks/talker.yaml": DESK.format(agent=AGENT),
                    "briefs/talk.md": BRIEF.format(check="grep -q 'saw 0 at attempt 2' seen.txt")})
    first = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"), SESSION_AGENT_BROKEN="1")
    assert "could not be resumed (the resumed agent exited 3 without adding to the conversation)" in first.out, \
        first.out + first.err
    assert first.code == 0 and "review ready" in first.out  # the fresh run did the work
    failed = [e for e in entries(forge.path, "talk") if e["kind"] == "note" and (e.get("data") or {}).get("checkpoint")]
    assert [e["data"]["of"] for e in failed] == [next(e["seq"] for e in entries(forge.path, "talk")
                                                      if e["kind"] == "checkpoint")]
    shown = assay("journal", "talk", "--json", "--forge", forge.url).json()
    assert isinstance(shown, dict) and "checkpoint" in {e["kind"] for e in shown["entries"]}


def test_steering_that_arrives_as_the_run_ends_is_passed_on_before_the_review_is_ready(forge: Forge,
                                                                                       tmp_path: Path) -> None:
    """A person steers just as attempt 1's agent ends, before any heartbeat: the desk resumes the conversation with
    the steering as its next message (same attempt), journals its delivery once that run took it, and only then
    marks the review ready."""
    text = "Prefer the staging database"
    publish(forge, {"desks/talker.yaml": DESK.format(agent=AGENT),
                    "briefs/talk.md": BRIEF.format(check="grep -A2 '^## Steering' prompt.txt | grep -q staging")})
    run = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home"), SESSION_AGENT_STEER=text)
    assert run.code == 0 and "review ready" in run.out, run.out + run.err
    assert "attempt 1 failed" not in run.out and "agent attempt 2" not in run.out, run.out
    assert "session" in run.out and "1 turns before this one" in run.out, run.out  # the conversation went on
    journal = entries(forge.path, "talk")
    [steer] = [e for e in journal if e["kind"] == "steer"]
    assert steer["data"]["text"] == text
    delivered = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("steer") == "delivered"]
    [ready] = [e for e in journal if e["kind"] == "note" and (e.get("data") or {}).get("review") == "ready"]
    assert [e["data"]["of"] for e in delivered] == [steer["seq"]] and delivered[0]["seq"] < ready["seq"], journal
    assert invariants(forge.path, "talk") == []


def test_a_fork_from_an_earlier_checkpoint_knows_what_came_before_and_nothing_after(forge: Forge,
                                                                                     tmp_path: Path) -> None:
    """`talk` keeps a two-turn conversation (attempt 1 saved one turn, attempt 2 a second). A fork at the first
    checkpoint starts from one turn: its agent sees 1, not 2."""
    publish(forge, {"desks/talker.yaml": DESK.format(agent=AGENT),
                    "briefs/talk.md": BRIEF.format(check="grep -q 'saw 1 at attempt 2' seen.txt")})
    assert run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home")).code == 0
    saved = [e for e in entries(forge.path, "talk") if e["kind"] == "checkpoint"]
    first = saved[0]
    forked = assay("brief", "fork", "early", "--from", "talk", "--at", str(saved[1]["seq"] - 1), "--json",
                   "--forge", forge.url, cwd=forge.seed)
    said = forked.json()
    assert forked.code == 0 and isinstance(said, dict) and said["checkpoint"] == first["seq"], forked.err
    text = (forge.seed / "briefs" / "early.md").read_text()
    assert f"(fork of talk at seq {first['seq']})" in text
    (forge.seed / "briefs" / "early.md").write_text(text.replace("saw 1 at attempt 2", "saw 1 at attempt 1"))
    publish(forge, {})  # the person commits the fork's brief and pushes it to main
    head = [e for e in entries(forge.path, "early")]
    assert [(e["kind"], e["data"]["forked_from"]) for e in head] == [("checkpoint", {"brief": "talk",
                                                                                      "seq": first["seq"]})]
    run = run_desk(forge, "talker", tmp_path, HOME=str(tmp_path / "home-2"))
    assert run.code == 0 and "early agent attempt 1" in run.out and "review ready" in run.out, run.out + run.err
    assert f"resumes the agent's conversation (checkpoint seq {head[0]['seq']}, {first['data']['bytes']} bytes)" \
        in run.out  # one turn, not two
    again = assay("brief", "fork", "early", "--from", "talk", "--forge", forge.url, cwd=tmp_path)
    assert again.code == 3 and "exists on the forge already" in again.err and "Traceback" not in again.err
    none = assay("brief", "fork", "late", "--from", "talk", "--at", "1", "--forge", forge.url, cwd=tmp_path)
    assert none.code == 2 and "no agent-session checkpoint at or before seq 1" in none.err
    assert not (tmp_path / "briefs").exists()  # refused: nothing written


@pytest.mark.parametrize("how", ["hook", "transcript"])
def test_a_turn_is_checkpointed_as_it_ends_not_at_a_heartbeat(forge: Forge, tmp_path: Path, how: str) -> None:
    """A heartbeat every 300 s (none passes here): the agent ends its turn and then works on (held). The turn is
    journaled as a checkpoint while the agent still runs, from the CLI's event: `assay step turn` as its hook says
    the turn ended, or, where the CLI has no hook, its transcript reaching a new turn boundary."""
    hold = tmp_path / "let-go"
    slow = DESK.format(agent=AGENT).replace("heartbeat_s: 5", "heartbeat_s: 300")
    slow = slow.replace("lease_s: 120", "lease_s: 1200")
    publish(forge, {"desks/talker.yaml": slow, "briefs/talk.md": BRIEF.format(check="true")})
    env = {**os.environ, "ASSAY_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path / "home"),
           "SESSION_AGENT_HOLD": str(hold), **({"SESSION_AGENT_QUIET": "1"} if how == "transcript" else {})}
    desk = subprocess.Popen([sys.executable, "-m", "assay", "desk", "run", "talker", "--once", "--forge", forge.url],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not [e for e in entries(forge.path, "talk") if e["kind"] == "checkpoint"]:
            assert desk.poll() is None and time.monotonic() < deadline, desk.communicate()[0]
            time.sleep(0.1)
        assert not hold.exists() and desk.poll() is None  # saved while the agent runs on
    finally:
        hold.touch()
        out, _ = desk.communicate(timeout=120)
    assert desk.returncode == 0 and "review ready" in out, out
    journal = entries(forge.path, "talk")
    [saved, *_] = [e for e in journal if e["kind"] == "checkpoint"]
    [ended] = [e for e in journal if e["kind"] == "result" and e.get("step") == "agent"]
    assert saved["seq"] < ended["seq"] and saved["data"]["bytes"] > 0, journal
    assert invariants(forge.path, "talk") == []
