"""`assay init`: the config file, the default folders, and optionally a forge on disk."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from assay.config import CONFIG_NAME
from assay.errors import UsageError
from assay.git import WorkRepo, init_bare, remote_has_ref, repo_root

DEFAULT_FOLDERS = ("desks", "sweepers", "board")
EXAMPLE_BRIEF = """---
title: Say hello
priority: 5
labels: [demo]
verify:
  - id: hello-exists
    run: test -f hello.txt
---
Create `hello.txt` at the top of the repository containing a friendly greeting.

The scripted agent (`assay desk run scripted`) follows this script; a real agent reads the text above.

```assay-script
write hello.txt Hello from Assay
```
"""


@dataclass
class InitReport:
    root: Path
    config: Path
    forge: str | None
    created: list[str] = field(default_factory=list)
    pushed_main: bool = False


SOURCES = {"workflows": ".github/workflows"}  # shipped defaults kept elsewhere in the source tree
# the workflows a repository runs Assay's sweeps, verify rows and board (on GitHub Pages) with
WORKFLOWS = ("sweep.yml", "verify.yml", "board.yml")
_PINNED = re.compile(r"(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@(?P<sha>[0-9a-f]{40})")
CALLER = """# Written by `assay init --github`: calls Assay's reusable {name} workflow, pinned to a commit.
name: assay {name}

on:
{on}
permissions: {{}}

jobs:
  {name}:
    permissions:
{permissions}
    uses: {repo}/.github/workflows/{name}.yml@{sha}
"""
CALLER_ON = {
    "sweep": '  schedule:\n    - cron: "*/15 * * * *"\n  workflow_dispatch:\n',
    "verify": "  pull_request:\n    types: [opened, synchronize, reopened, ready_for_review]\n",
    "board": '  schedule:\n    - cron: "7,37 * * * *"\n  workflow_dispatch:\n',
}
# a caller grants what every job of the called workflow asks for, and nothing more
CALLER_PERMISSIONS = {
    "sweep": {"contents": "write", "pull-requests": "read"},
    "verify": {"contents": "read"},
    "board": {"contents": "read", "pull-requests": "read", "pages": "write", "id-token": "write"},
}


def defaults_dir(kind: str) -> Path:
    """Where the shipped defaults live: inside the installed package, or the source checkout."""
    packaged = Path(__file__).parent / "_defaults" / kind
    if packaged.is_dir():
        return packaged
    source = Path(__file__).parent.parent / SOURCES.get(kind, kind)
    if source.is_dir():
        return source
    raise UsageError(f"the default {kind}/ folder is missing from this installation", hint="reinstall assay")


def init_project(cwd: Path, local_forge: Path | None, github: bool = False,
                 workflows: str | None = None) -> InitReport:
    """The config, the default folders, a forge on disk if asked, and GitHub workflows if asked: small
    callers of Assay's reusable workflows pinned to `workflows` (OWNER/REPO@COMMIT), or else copies."""
    pinned = _PINNED.fullmatch(workflows) if workflows else None
    if workflows and pinned is None:
        raise UsageError(f"--workflows {workflows!r} is not OWNER/REPO@COMMIT",
                         hint="pin the repository that holds Assay's workflows to a full 40-character commit id")
    root = repo_root(cwd) or cwd
    repo = WorkRepo(root) if (root / ".git").exists() else WorkRepo.init(root)
    config = root / CONFIG_NAME
    report = InitReport(root=root, config=config, forge=None)
    for kind in DEFAULT_FOLDERS:
        _copy_missing(defaults_dir(kind), root / kind, root, report)
    briefs = root / "briefs"
    if not briefs.exists():
        briefs.mkdir()
        (briefs / "hello.md").write_text(EXAMPLE_BRIEF, encoding="utf-8")
        report.created.append("briefs/hello.md")
    if local_forge is not None:
        forge = local_forge.expanduser().resolve()
        if forge.exists() and any(forge.iterdir()):
            if not (forge / "HEAD").is_file() or not (forge / "objects").is_dir():
                raise UsageError(f"{forge} exists and is not a bare git repository",
                                 hint="choose a new or empty directory for --local-forge")
        else:
            init_bare(forge)
            report.created.append(str(forge))
        report.forge = str(forge)
        _write_config(config, _relative(forge, root), report)
        repo.commit_all("assay init", [CONFIG_NAME, "briefs", *DEFAULT_FOLDERS])
        if not remote_has_ref(str(forge), "refs/heads/main"):
            repo.push_new_branch(str(forge))
            report.pushed_main = True
        if not _has_origin(repo):
            repo.set_remote("origin", str(forge))
    elif not config.exists():
        _write_config(config, None, report)
    if github:
        _write_workflows(root, pinned, report)
    return report


def _write_workflows(root: Path, pinned: re.Match[str] | None, report: InitReport) -> None:
    target = root / ".github" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOWS:
        dest = target / f"assay-{name}"
        if dest.exists():
            continue
        if pinned is None:
            shutil.copyfile(defaults_dir("workflows") / name, dest)
        else:
            kind = name.removesuffix(".yml")
            permissions = "\n".join(f"      {scope}: {access}" for scope, access in CALLER_PERMISSIONS[kind].items())
            dest.write_text(CALLER.format(name=kind, on=CALLER_ON[kind], repo=pinned["repo"], sha=pinned["sha"],
                                          permissions=permissions), encoding="utf-8")
        report.created.append(str(dest.relative_to(root)))


def _copy_missing(source: Path, target: Path, root: Path, report: InitReport) -> None:
    target.mkdir(exist_ok=True)
    for item in sorted(source.iterdir()):
        dest = target / item.name
        if item.is_file() and not dest.exists():
            shutil.copyfile(item, dest)
            report.created.append(str(dest.relative_to(root)))


def _write_config(config: Path, forge: str | None, report: InitReport) -> None:
    lines = ["# Assay: which forge holds claims, journals and reviews (a git URL or a path).\n"]
    lines.append(f"forge: {forge}\n" if forge else "# forge: ../forge.git   (default: this repository's origin)\n")
    config.write_text("".join(lines), encoding="utf-8")
    if CONFIG_NAME not in report.created:
        report.created.append(CONFIG_NAME)


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        import os

        return os.path.relpath(path, base)


def _has_origin(repo: WorkRepo) -> bool:
    return repo.git("remote", "get-url", "origin", check=False).returncode == 0
