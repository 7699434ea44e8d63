"""The merge queue of a branch whose ruleset requires one, run as GitHub runs it, in the fake's own state.

Each queued pull request gets a merge group: a real merge of the group ahead of it (or of the base branch's
tip) with its head, committed on a temporary branch `gh-readonly-queue/<base>/pr-<number>-<head sha>` of the
bare repository and announced by a `merge_group` / `checks_requested` delivery. When every check the ruleset
requires is green on the group's commit, and the groups ahead have merged, the base branch moves to that commit
and the pull request is merged. A red check, a conflict, a new head or a closed pull request takes its entry out
(`removed_from_merge_queue`); the groups behind it, or all of them when the base moved outside the queue, are
built again. `settle` brings a repository's queues up to date; the fake calls it, under its lock, whenever
something they depend on changes: an entry, a status or check run, a push, an edited pull request.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tests.fakegithub import gitside
from tests.fakegithub.state import CLOCK, Delivery, IssueEvent, MergeGroup, Pull, QueueEntry, Repo, User, now_iso
from tests.fakegithub.webhooks import payloads

if TYPE_CHECKING:
    from tests.fakegithub.server import FakeGitHub

MAX_BUILD = 5  # `max_entries_to_build`: entries further back wait for a group
PASSING = {"success", "neutral", "skipped"}  # check run conclusions a required check accepts
FAILING_STATES = {"failure", "error"}
FAILING_CONCLUSIONS = {"failure", "timed_out", "cancelled", "action_required", "startup_failure", "stale"}
# GitHub's refusals of `enqueuePullRequest` (see the report for which are GitHub's own words)
NO_QUEUE = "Base branch does not have a merge queue enabled"
DRAFT = "Pull request is in draft status"
CLOSED = "Pull request is closed"
MERGED = "Pull request is already merged"
HEAD_MOVED = "Head branch was modified. Review and try the merge again."
QUEUED = "Pull request is already in the merge queue"


def enqueue(gh: FakeGitHub, repo: Repo, pull: Pull, user: User, expected_head: str | None) -> QueueEntry | str:
    """Add the pull request to its base branch's merge queue; the entry, or why GitHub refuses."""
    pull = repo.refresh(pull)
    refusal = (MERGED if pull.merged_at else CLOSED if pull.state != "open" else DRAFT if pull.draft
               else HEAD_MOVED if expected_head is not None and expected_head != pull.head_sha
               else NO_QUEUE if repo.merge_queue(pull.base) is None
               else QUEUED if any(e.pull == pull.number for e in repo.queue) else None)
    if refusal is not None:
        return refusal
    entry = QueueEntry(pull.number, pull.base, pull.head_sha, user)
    repo.queue.append(entry)
    repo.events.append(IssueEvent(pull.number, user, "added_to_merge_queue"))
    settle(gh, repo)
    return entry


def settle(gh: FakeGitHub, repo: Repo) -> None:
    """Bring every merge queue of the repository up to date: drop, build, merge, until nothing changes."""
    for base in dict.fromkeys(e.base for e in repo.queue):
        while _step(gh, repo, base):
            pass
        for i, entry in enumerate(e for e in repo.queue if e.base == base):
            entry.position = i + 1


def _step(gh: FakeGitHub, repo: Repo, base: str) -> bool:
    """One change to the queue of `base`, and whether there was one."""
    entries = [e for e in repo.queue if e.base == base]
    for entry in entries:
        pull = repo.refresh(repo.pulls[entry.pull])
        if pull.state != "open" or pull.head_sha != entry.head_sha or pull.base != base:
            _remove(gh, repo, entry)
            return True
    if _build(gh, repo, base, entries):
        return True
    ruleset = repo.merge_queue(base)
    checks = ruleset.checks if ruleset else ()
    for entry in entries:
        if entry.group is None:
            continue
        verdict = _verdict(repo, entry.group.head_sha, checks)
        if verdict == "failure":
            _remove(gh, repo, entry)
            return True
        entry.state = "MERGEABLE" if verdict == "success" else "AWAITING_CHECKS"
    return bool(entries) and entries[0].state == "MERGEABLE" and _merge(gh, repo, entries[0])


def _build(gh: FakeGitHub, repo: Repo, base: str, entries: list[QueueEntry]) -> bool:
    """Give each of the first entries a group on the one ahead of it, keeping those already so built; whether
    one was taken out (a conflict)."""
    base_ref = f"refs/heads/{base}"
    parent = gitside.rev_parse(repo.path, base_ref)
    if parent is None:
        return False
    chain: list[int] = []
    for entry in entries[:MAX_BUILD]:
        chain.append(entry.pull)
        if entry.group is not None and entry.group.base_sha == parent:
            parent = entry.group.head_sha
            continue
        _drop_group(repo, entry)
        sha = _group_commit(repo, repo.pulls[entry.pull], entry, parent)
        if sha is None:
            _remove(gh, repo, entry)
            return True
        ref = f"refs/heads/gh-readonly-queue/{base}/pr-{entry.pull}-{entry.head_sha}"
        gitside.update_ref(repo.path, ref, sha)
        entry.group, entry.state = MergeGroup(sha, ref, parent, base_ref, tuple(chain)), "AWAITING_CHECKS"
        payload = payloads.merge_group_checks_requested(gh, repo.owner.login, repo.name, head_sha=sha, head_ref=ref,
                                                        base_sha=parent, base_ref=base_ref)
        gh.deliveries.append(Delivery("merge_group", "checks_requested", payload))
        parent = sha
    for entry in entries[MAX_BUILD:]:
        _drop_group(repo, entry)
        entry.state = "QUEUED"
    return False


def _group_commit(repo: Repo, pull: Pull, entry: QueueEntry, parent: str) -> str | None:
    """The group's merge commit, or None on a conflict. A commit CI has already reported on is never reused
    (git's pinned dates in tests would make a rebuilt group the same commit): its time moves on instead."""
    who = entry.enqueuer
    message = f"Merge pull request #{pull.number} from {repo.owner.login}/{pull.head}\n\n{pull.title}"
    author = (who.login, f"{who.id}+{who.login}@users.noreply.github.com")
    sha = gitside.merge_commit(repo.path, parent, entry.head_sha, message, author=author)
    later = int(time.time() + CLOCK["offset_s"])
    while sha is not None and _reported(repo, sha):
        later += 1
        sha = gitside.merge_commit(repo.path, parent, entry.head_sha, message, author=author, date=later)
    return sha


def _reported(repo: Repo, sha: str) -> bool:
    return any(s.sha == sha for s in repo.statuses) or any(c.sha == sha for c in repo.check_runs)


def _verdict(repo: Repo, sha: str, checks: tuple[str, ...]) -> str:
    """success when every required check passed on `sha`, failure when one failed, else pending. A check is a
    commit status's context (its newest status counts) or a check run's name."""
    passed = []
    for context in checks:
        states = [s.state for s in repo.statuses if s.sha == sha and s.context == context]
        done = [c.conclusion for c in repo.check_runs if c.sha == sha and c.name == context and c.status == "completed"]
        if (states and states[-1] in FAILING_STATES) or any(c in FAILING_CONCLUSIONS for c in done):
            return "failure"
        passed.append((bool(states) and states[-1] == "success") or any(c in PASSING for c in done))
    return "success" if all(passed) else "pending"


def _merge(gh: FakeGitHub, repo: Repo, entry: QueueEntry) -> bool:
    """Move the base branch to the first entry's group and merge its pull request (a compare-and-swap: a base
    that moved meanwhile leaves the group to be built again)."""
    group = entry.group
    if group is None:
        return False
    if not gitside.update_ref(repo.path, group.base_ref, group.head_sha, group.base_sha):
        if gitside.rev_parse(repo.path, group.base_ref) == group.base_sha:
            raise RuntimeError(f"cannot move {group.base_ref} of {repo.full_name} to {group.head_sha}")
        return True
    gitside.delete_ref(repo.path, group.head_ref)
    repo.queue.remove(entry)
    bot, at, pull = gh.merge_queue_bot, now_iso(), repo.pulls[entry.pull]
    pull.state, pull.merged_at, pull.closed_at, pull.closed_by, pull.merged_by = "closed", at, at, bot, bot
    pull.merge_commit_sha, pull.updated_at = group.head_sha, at
    repo.events += [IssueEvent(pull.number, bot, "merged", commit_id=group.head_sha),
                    IssueEvent(pull.number, bot, "closed")]
    return True


def _remove(gh: FakeGitHub, repo: Repo, entry: QueueEntry) -> None:
    _drop_group(repo, entry)
    repo.queue.remove(entry)
    entry.state = "UNMERGEABLE"
    repo.events.append(IssueEvent(entry.pull, gh.merge_queue_bot, "removed_from_merge_queue"))


def _drop_group(repo: Repo, entry: QueueEntry) -> None:
    if entry.group is not None:
        gitside.delete_ref(repo.path, entry.group.head_ref)
        entry.group = None
