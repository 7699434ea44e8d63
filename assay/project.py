"""`assay init`: the config file, the default folders, and optionally a forge on disk; `assay brief fork`'s
brief file in the checkout."""

from __future__ import annotations

import json
import re
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from assay import DISTRIBUTION
from assay.config import CONFIG_NAME, defaults_dir
from assay.core.claims import Claims
from assay.core.git import WorkRepo, init_bare, remote_has_ref, repo_root, run_git
from assay.core.records.recordtype import dataclass, field
from assay.errors import UsageError

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
    joined: bool = False  # the forge had a main: this checkout starts from it
    notes: list[str] = field(default_factory=list)


# the workflows a repository runs Assay's sweeps, verify rows, board (on GitHub Pages) and desks with
WORKFLOWS = ("sweep.yml", "verify.yml", "board.yml", "desk.yml")
_PINNED = re.compile(r"(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@(?P<sha>[0-9a-f]{40})")
CALLER = """# Written by `assay init --github`: calls Assay's reusable {name} workflow, pinned to a commit, and has it
# install Assay pinned to a commit.
name: assay {name}

on:
{on}
permissions: {{}}

jobs:
  {name}:
    permissions:
{permissions}
    uses: {repo}/.github/workflows/{name}.yml@{sha}
    with:
      assay-package: "{package}"
{extra}"""
# how a workflow installs Assay: only ever pinned to a commit, never by a name anyone could register
_GIT_URL = r"git\+https://[A-Za-z0-9.-]+(?::[0-9]+)?/[A-Za-z0-9._~/-]+@[0-9a-f]{40}"
_FROM = re.compile(rf"(?:(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@(?P<sha>[0-9a-f]{{40}})"
                   rf"|(?:{re.escape(DISTRIBUTION)}\s*@\s*)?(?P<url>{_GIT_URL}))")
_INSTALL_LINE = "          ASSAY_PACKAGE: ${{ inputs.assay-package }}\n"  # in each job of each shipped workflow
CALLER_ON = {
    "sweep": '  schedule:\n    - cron: "*/15 * * * *"\n  workflow_dispatch:\n',
    "verify": ("  pull_request:\n    types: [opened, synchronize, reopened, ready_for_review]\n"
               "  merge_group:\n    types: [checks_requested]\n"),
    "board": '  schedule:\n    - cron: "7,37 * * * *"\n  workflow_dispatch:\n',
    "desk": ('  push:\n    branches: [main]\n    paths: ["briefs/**", "desks/**"]\n'
             "  pull_request_review:\n    types: [submitted]\n"
             "  pull_request_review_comment:\n    types: [created]\n"
             "  # nothing checks out the event's code; a comment is obeyed only from people who may write\n"
             "  issue_comment: # zizmor: ignore[dangerous-triggers]\n    types: [created]\n"
             "  pull_request:\n    types: [closed]\n"
             '  workflow_run: # zizmor: ignore[dangerous-triggers]\n    workflows: ["assay verify"]\n'
             "    types: [completed]\n"
             "  check_suite:\n    types: [completed]\n"
             '  schedule:\n    - cron: "17,47 * * * *"\n'
             "  workflow_dispatch:\n    inputs:\n      desks:\n"
             "        description: Desks to run, comma-separated (default, the desks with work).\n"
             '        type: string\n        default: ""\n'),
}
# what a caller passes on beyond the pinned package: the desks' inputs and secrets, each by name
CALLER_EXTRA = {
    "desk": ("      desks: ${{ inputs.desks }}\n"
             "    secrets:\n"
             "      ASSAY_TOKEN: ${{ secrets.ASSAY_TOKEN }}\n"
             "      ANTHROPIC_API_KEY: ${{ secrets.ANTHROPIC_API_KEY }}\n"
             "      OPENAI_API_KEY: ${{ secrets.OPENAI_API_KEY }}\n"),
}
# a caller grants what every job of the called workflow asks for, and nothing more
CALLER_PERMISSIONS = {
    "sweep": {"contents": "write", "pull-requests": "read"},
    "verify": {"contents": "read"},
    "board": {"contents": "read", "pull-requests": "read", "pages": "write", "id-token": "write"},
    "desk": {"contents": "write", "pull-requests": "write", "checks": "read", "statuses": "write"},
}


def init_project(cwd: Path, local_forge: Path | None, github: bool = False,
                 workflows: str | None = None, assay_from: str | None = None) -> InitReport:
    """The config, the default folders, a forge on disk if asked, and GitHub workflows if asked: small
    callers of Assay's reusable workflows pinned to `workflows` (OWNER/REPO@COMMIT), or else copies.
    Either installs Assay pinned to a commit (`package_pin`); nothing is written if it cannot tell which."""
    pinned = _PINNED.fullmatch(workflows) if workflows else None
    if workflows and pinned is None:
        raise UsageError(f"--workflows {workflows!r} is not OWNER/REPO@COMMIT",
                         hint="pin the repository that holds Assay's workflows to a full 40-character commit id")
    package = package_pin(assay_from, pinned) if github else ""
    root, enclosing = _project_root(cwd)
    repo = WorkRepo(root) if (root / ".git").exists() else WorkRepo.init(root)
    config = root / CONFIG_NAME
    report = InitReport(root=root, config=config, forge=None)
    if enclosing is not None:
        report.notes.append(f"{root} is inside the git repository {enclosing}: it got a repository of its own; "
                            f"{enclosing} was left as it was")
    forge = _local_forge(local_forge) if local_forge is not None else None
    if forge is not None and forge.exists() and any(forge.iterdir()) and remote_has_ref(str(forge), "refs/heads/main"):
        _join(repo, forge, report)  # before anything is written: the forge's main comes first
    for kind in DEFAULT_FOLDERS:
        _copy_missing(defaults_dir(kind), root / kind, root, report)
    briefs = root / "briefs"
    if not briefs.exists():
        briefs.mkdir()
        (briefs / "hello.md").write_text(EXAMPLE_BRIEF, encoding="utf-8")
        report.created.append("briefs/hello.md")
    if forge is not None:
        if not forge.exists() or not any(forge.iterdir()):
            init_bare(forge)
            report.created.append(str(forge))
        report.forge = str(forge)
        if _configured_forge(config) != forge:
            _write_config(config, _relative(forge, root), report)
        committed = repo.commit_all("assay init", [CONFIG_NAME, "briefs", *DEFAULT_FOLDERS])
        if not remote_has_ref(str(forge), "refs/heads/main"):
            repo.push_new_branch(str(forge))
            report.pushed_main = True
        elif committed and report.joined:
            report.notes.append("this checkout added the default files the forge's main lacks in one commit; "
                                "push it when you want them shared: git push")
        if not _has_origin(repo):
            repo.set_remote("origin", str(forge))
        _track(repo, forge, report)
    elif not config.exists():
        _write_config(config, None, report)
    if github:
        _write_workflows(root, pinned, package, report)
    return report


def _project_root(cwd: Path) -> tuple[Path, Path | None]:
    """The folder `assay init` sets up, and the repository around it if that is another one: `cwd` itself (the
    top of its repository, or a new repository), never an enclosing repository, whose files it would commit
    and whose whole history it would push. A folder whose files an enclosing repository tracks is refused."""
    here = cwd.resolve()
    top = repo_root(here)
    if top is None or top.resolve() == here:
        return here, None
    if run_git(["ls-files", "-z", "--", "."], cwd=here).stdout:
        raise UsageError(f"{here} is a folder of the git repository {top}: `assay init` sets up the folder it runs "
                         "in, and never commits to or pushes an enclosing repository",
                         hint=f"run it at the top of that repository (cd {top}), or in a new folder of its own")
    return here, top.resolve()


def package_pin(assay_from: str | None, workflows: re.Match[str] | None = None) -> str:
    """The pip requirement the workflows install Assay by, pinned to a commit: from `--assay-from`
    (OWNER/REPO@COMMIT on GitHub, or a git+https URL ending @COMMIT), else the commit of the reusable
    workflows, else the commit the running Assay was installed from (its PEP 610 `direct_url.json`)."""
    if assay_from is not None:
        found = _FROM.fullmatch(assay_from.strip())
        if found is None:
            raise UsageError(f"--assay-from {assay_from!r} does not pin Assay to a commit",
                             hint="give OWNER/REPO@COMMIT (Assay's repository on GitHub, a full 40-character "
                                  "commit id) or git+https://HOST/PATH@COMMIT")
        url = found["url"] or f"git+https://github.com/{found['repo']}@{found['sha']}"
        return f"{DISTRIBUTION} @ {url}"
    if workflows is not None:
        return f"{DISTRIBUTION} @ git+https://github.com/{workflows['repo']}@{workflows['sha']}"
    installed, where = installed_from()
    if installed:
        return installed
    raise UsageError(f"the workflows would install Assay, and this Assay was installed from {where}: "
                     "no commit a GitHub runner can install, so nothing was written",
                     hint="pass --assay-from OWNER/REPO@COMMIT (the repository and commit of the Assay to "
                          "run there), or --workflows OWNER/REPO@COMMIT")


def installed_from() -> tuple[str, str]:
    """(the pinned requirement of the running Assay's installation, or ""; where it was installed from)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "", "a source tree, not installed"
    try:
        direct: Any = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        direct = None
    if not isinstance(direct, dict):
        return "", f"a package index (version {dist.version}), with no commit to pin"
    url, vcs = str(direct.get("url") or ""), direct.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git":
        pinned = f"git+{url}@{vcs.get('commit_id') or ''}"
        if re.fullmatch(_GIT_URL, pinned):
            return f"{DISTRIBUTION} @ {pinned}", url
        return "", f"{url} (git), which a GitHub runner cannot reach over https"
    kind = "a folder" if "dir_info" in direct else "an archive"
    return "", f"{kind} ({url})"


def _write_workflows(root: Path, pinned: re.Match[str] | None, package: str, report: InitReport) -> None:
    target = root / ".github" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOWS:
        dest = target / f"assay-{name}"
        if dest.exists():
            continue
        if pinned is None:  # a copy, installing the pinned Assay
            text = (defaults_dir("workflows") / name).read_text(encoding="utf-8")
            if _INSTALL_LINE not in text:
                raise UsageError(f"the shipped workflow {name} has no install line to pin", hint="reinstall assay")
            dest.write_text(text.replace(_INSTALL_LINE, f'          ASSAY_PACKAGE: "{package}"\n'), encoding="utf-8")
        else:
            kind = name.removesuffix(".yml")
            permissions = "\n".join(f"      {scope}: {access}" for scope, access in CALLER_PERMISSIONS[kind].items())
            dest.write_text(CALLER.format(name=kind, on=CALLER_ON[kind], repo=pinned["repo"], sha=pinned["sha"],
                                          permissions=permissions, package=package,
                                          extra=CALLER_EXTRA.get(kind, "")), encoding="utf-8")
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


def _local_forge(path: Path) -> Path:
    forge = path.expanduser().resolve()
    if forge.exists() and any(forge.iterdir()) and (not (forge / "HEAD").is_file() or not (forge / "objects").is_dir()):
        raise UsageError(f"{forge} exists and is not a bare git repository",
                         hint="choose a new or empty directory for --local-forge")
    return forge


def _configured_forge(config: Path) -> Path | None:
    """The local forge `config` names (resolved against its folder), or None."""
    try:
        found = re.search(r"^forge:\s*(\S+)\s*$", config.read_text(encoding="utf-8"), flags=re.M)
    except OSError:
        return None
    return (config.parent / found[1]).resolve() if found and "://" not in found[1] else None


def _join(repo: WorkRepo, forge: Path, report: InitReport) -> None:
    """A checkout joining a forge that has a main starts from that main, so that it never diverges from it.
    A checkout with commits of its own is left alone, and told if its history and the forge's are unrelated."""
    if not _has_origin(repo):
        repo.set_remote("origin", str(forge))
    remote = "origin" if _origin_is(repo, forge) else str(forge)
    repo.git("fetch", "-q", remote, "+refs/heads/main:refs/remotes/origin/main" if remote == "origin" else "main")
    theirs = "refs/remotes/origin/main" if remote == "origin" else "FETCH_HEAD"
    if repo.git("rev-parse", "-q", "--verify", "HEAD", check=False).returncode != 0:
        proc = repo.git("checkout", "-q", "-B", "main", theirs, check=False)
        if proc.returncode != 0:
            raise UsageError(f"cannot check out the forge's main here: {proc.stderr.decode(errors='replace').strip()}",
                             hint="run `assay init` in an empty folder, or move the files git names out of the way")
        report.joined = True
        return
    if repo.git("merge-base", "HEAD", theirs, check=False).returncode != 0:
        report.notes.append(f"this checkout's history and the main of {forge} are unrelated: `git pull` will refuse; "
                            f"start from the forge instead: git clone {forge}")


def _origin_is(repo: WorkRepo, forge: Path) -> bool:
    url = repo.git("remote", "get-url", "origin", check=False).stdout.decode().strip()
    return bool(url) and Path(url).expanduser().resolve() == forge if "://" not in url else False


def _track(repo: WorkRepo, forge: Path, report: InitReport) -> None:
    """Make `git pull` and `git push` work: the current branch tracks origin/main when origin is this forge."""
    if not _origin_is(repo, forge):
        report.notes.append(f"origin is not {forge}: the current branch keeps its upstream")
        return
    repo.git("fetch", "-q", "origin", "+refs/heads/main:refs/remotes/origin/main")
    branch = repo.git("symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.decode().strip()
    if branch == "main":
        repo.git("branch", "-q", "--set-upstream-to=origin/main", "main")


def _has_origin(repo: WorkRepo) -> bool:
    return repo.git("remote", "get-url", "origin", check=False).returncode == 0


def fork_brief(claims: Claims, cwd: Path, new: str, source: str, at: int | None, by: str) -> tuple[Path, Any, str]:
    """`assay brief fork`: the forge's part (the fork's journal with the checkpoint, its branch) by `custody.fork`,
    then `briefs/NEW.md` in this checkout, made from the source's brief on main. Nothing is written when the
    source brief is not on main, or the new file exists."""
    from assay.core import custody
    from assay.core.briefs import fork_text, write_fork
    from assay.core.records import MAIN_REF, validate_brief_id

    validate_brief_id(new)
    folder = (repo_root(cwd) or cwd) / "briefs"
    if (folder / f"{new}.md").exists():
        raise UsageError(f"{folder / (new + '.md')} already exists", hint="pick another id for the fork")
    main = claims.git.ls_remote(MAIN_REF).get(MAIN_REF)
    found = None
    if main:
        claims.git.ensure_objects({MAIN_REF: main})
        found = claims.git.read_objects([f"{main}:briefs/{validate_brief_id(source)}.md"])[0]
    if found is None:
        raise UsageError(f"brief {source!r} is not on main: a fork starts from its brief file",
                         hint="fork a brief that main has")
    entry, head = custody.fork(claims, new, source, at, by)

    path = write_fork(folder, new, fork_text(found.decode("utf-8"), source, (entry.data or {})["forked_from"]["seq"]))
    return path, entry, head
