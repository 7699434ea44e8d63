"""The fleet scenario of `tests/helpers/fleetrun.py` on the fake GitHub: `acme/app` with main pushed over smart
HTTP, desks on it through the API, and a reviewer that, with the checks on, requires a merge queue for main, writes
its review notes as review threads on a file, queues ready pull requests with `assay land` and plays CI on every
live merge group (`assay verify --group` on the group's head, its verdict a commit status); with the checks off,
there is no merge queue and it merges each ready pull request (`assay review merge`).

Judged as on disk: claims and journals from the fake's bare repository with plain git; what merged, and the review
threads, from the fake's pull requests and review comments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fakegithub import FakeGitHub
from tests.helpers.fleetrun import Fleet, Outcome, git
from tests.helpers.github import NAME, OWNER, github_repo, post_status

ANSWERED = "<!-- assay:answer:"  # how a desk's answer in a thread is marked
REVIEWER = "reviewer"  # who signs the review notes: a person who may write, so the desks answer them


class GitHubFleet(Fleet):
    """`Fleet` with `acme/app` on the fake GitHub as its forge."""

    def __init__(self, root: Path, total: int, desks: int, checks: bool, github: FakeGitHub) -> None:
        super().__init__(root, total, desks, checks)
        self.github = github
        self.url = ""
        self.verdicts: dict[str, str] = {}  # merge group head -> the status CI posted on it

    def publish(self, seed: Path) -> None:
        """`acme/app` with main pushed over smart HTTP; the merge queue required before any desk starts."""
        self.url = github_repo(self.github, seed)
        self.github.grant(OWNER, NAME, REVIEWER)
        self.forge = self.github.repo(OWNER, NAME).path
        if self.checks:
            self.github.require_merge_queue(OWNER, NAME)
        self.env |= {"ASSAY_FORGE": self.url, "ASSAY_GITHUB_API": self.github.api_url,
                     "GITHUB_TOKEN": self.github.token, "ASSAY_CACHE_DIR": str(self.root / "cache")}

    def desk_env(self, d: int) -> dict[str, str]:
        return {**super().desk_env(d), "ASSAY_CACHE_DIR": str(self.root / f"cache-d{d}")}

    def fingerprint(self) -> str:
        """Claims and main from the bare repository; pull requests, merge groups and threads from the fake."""
        pulls = [(p.number, p.state, p.draft, p.head_sha, tuple(p.labels), p.merged_at)
                 for p in self.github.pulls(OWNER, NAME)]
        groups = [g.head_sha for g in self.github.merge_groups(OWNER, NAME)]
        threads = sum(len(self.github.review_comments(OWNER, NAME, p[0])) for p in pulls)
        return super().fingerprint() + repr((pulls, groups, threads))

    def pending(self, states: dict[str, str]) -> list[str]:
        """Also, with the checks on, briefs waiting on a ready pull request outside the merge queue: the reviewer
        queues it (`assay land`, which GitHub's write budget may have held back), or its desk wakes it (a group
        that failed, or a thread that waits)."""
        out = super().pending(states)
        if not self.checks:
            return out
        with self.github.lock:
            queued = {e.pull for e in self.github.repo(OWNER, NAME).queue}
        return sorted({*out, *(p.head.removeprefix("assay/") for p in self.github.pulls(OWNER, NAME)
                               if p.state == "open" and not p.draft and p.number not in queued
                               and states.get(p.head.removeprefix("assay/")) == "waiting")})

    def review(self) -> None:
        """Checks on: a review note on the first ready pull request of every third `solo` brief, `assay land` of
        the ready ones not in the queue yet (it queues them), then CI on the merge groups. A pull request whose
        note has no answer yet is not landed: GitHub's queue, unlike `assay land` on a plain forge, takes a pull
        request whatever its threads say, so the reviewer waits, as a person who asked a question would. Checks
        off: merge each ready one. The reviewer reads the pull requests as a person does, on GitHub."""
        if not self.checks:
            super().review()
            return
        with self.github.lock:
            queued = {e.pull for e in self.github.repo(OWNER, NAME).queue}
        ready = {p.head.removeprefix("assay/"): p.number for p in self.github.pulls(OWNER, NAME)
                 if p.state == "open" and not p.draft and p.head.startswith("assay/")}
        for b in sorted(ready):
            if b in self.noted and b not in self.asked \
                    and self.assay("review", "note", b, f"Why {b}?", "--on", f"{b}.txt:1").returncode == 0:
                self.asked.add(b)
        waiting = self.unanswered()
        landing = sorted(b for b, number in ready.items() if b not in waiting and number not in queued)
        if landing:
            landed = self.assay("land", "--as", REVIEWER, *landing)
            with (self.root / "reviewer.log").open("a") as log:  # what it said (a write budget's wait, a refusal)
                log.write(f"land {' '.join(landing)}: exit {landed.returncode}\n{landed.stdout}{landed.stderr}")
        self.play_ci()

    def unanswered(self) -> set[str]:
        """Briefs with a review thread on their pull request that no desk's answer replies to."""
        out = set()
        for pull in self.github.pulls(OWNER, NAME):
            comments = self.github.review_comments(OWNER, NAME, pull.number)
            if any(not any(c.in_reply_to_id == root.id and ANSWERED in c.body for c in comments)
                   for root in comments if root.in_reply_to_id is None and ANSWERED not in root.body):
                out.add(pull.head.removeprefix("assay/"))
        return out

    def play_ci(self, most: int = 12) -> None:
        """The verify workflow on each live merge group not yet reported on, first to merge first: `assay verify
        --group` on the group's head, its verdict posted as the required commit status. A group rebuilt meanwhile
        (its ref gone or moved) is left to the next pass."""
        env = {**os.environ, **self.github.git_env()}
        checkout = self.root / "ci"
        if not checkout.exists():
            subprocess.run(["git", "clone", "-q", self.url, str(checkout)], env=env, check=True, capture_output=True)
        for _ in range(most):
            groups = [g for g in self.github.merge_groups(OWNER, NAME) if g.head_sha not in self.verdicts]
            if not groups:
                return
            group = groups[0]
            fetched = subprocess.run(["git", "fetch", "-q", "origin", f"+{group.head_ref}:refs/remotes/group"],
                                     cwd=checkout, env=env, capture_output=True)
            if fetched.returncode != 0 or git("rev-parse", "refs/remotes/group", cwd=checkout).strip() \
                    != group.head_sha:
                return
            git("checkout", "-q", "--force", group.head_sha, cwd=checkout)
            ran = subprocess.run([sys.executable, "-m", "assay", "verify", "--group", group.base_sha, "--json"],
                                 cwd=checkout, capture_output=True, text=True, timeout=300)
            state = "success" if ran.returncode == 0 else "failure"
            self.verdicts[group.head_sha] = state
            post_status(self.github, group.head_sha, state)

    def merged_commits(self) -> dict[str, str]:
        """brief -> the merge commit of its merged pull request (by the merge queue, or by `assay review merge`)."""
        return {p.head.removeprefix("assay/"): p.merge_commit_sha for p in self.github.pulls(OWNER, NAME)
                if p.merged_at and p.merge_commit_sha and p.head.startswith("assay/")}

    def judge_threads(self, out: Outcome) -> None:
        """Every thread the reviewer opened (a review comment that replies to none and is no desk's answer), and
        which of those have a desk's answer among their replies. `ready_with_open_thread` stays empty here: a pull
        request is marked ready through the API, and neither its events nor the threads' comments are stamped
        finely enough (whole seconds) to order a ready against a note written in the same second."""
        for pull in self.github.pulls(OWNER, NAME):
            comments = self.github.review_comments(OWNER, NAME, pull.number)
            for root in (c for c in comments if c.in_reply_to_id is None and ANSWERED not in c.body):
                out.threads_noted += 1
                out.threads_answered += any(c.in_reply_to_id == root.id and ANSWERED in c.body for c in comments)
