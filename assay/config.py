"""Which forge: `--forge` > `ASSAY_FORGE` > `.assay.yaml` `forge:` > the repo's `origin`; GitHub when it is on
github.com (or on the host of `ASSAY_GITHUB_API`)."""

from __future__ import annotations

import os

from assay.core.digests import sha256_hex
from assay.core.git.gitenv import is_local_path
from assay.core.records.recordtype import dataclass
from assay.errors import ConfigInvalid, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from pathlib import Path

    from assay.core.claims import Claims
    from assay.core.forge.base import Reviews
    from assay.core.forge.github import GitHubTarget
    from assay.core.git import ForgeGit

CONFIG_NAME = ".assay.yaml"


@dataclass(frozen=True)
class ForgeChoice:
    url: str
    source: str  # where it came from, for messages


def find_config(start: str | os.PathLike[str]) -> str | None:
    """The `.assay.yaml` in `start` or the nearest folder above it."""
    for folder in _upwards(start):
        candidate = os.path.join(folder, CONFIG_NAME)
        if os.path.isfile(candidate):
            return candidate
    return None


def _upwards(start: str | os.PathLike[str]) -> list[str]:
    """`start` and each folder above it, as `Path(start)` and its parents are (paths, without loading pathlib)."""
    folder = os.path.normpath(os.fspath(start))
    found = [folder]
    while (parent := os.path.dirname(folder)) != folder:
        folder = parent
        found.append(folder)
    return found


def load_config(path: str | os.PathLike[str]) -> dict[str, object]:
    import yaml

    try:
        with open(path, encoding="utf-8") as text:
            data = yaml.safe_load(text.read())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigInvalid(f"{where}: not valid YAML", hint="fix the file or run `assay init` again") from None
    except OSError as exc:
        raise ConfigInvalid(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigInvalid(f"{path}: not UTF-8 text", hint="save it as UTF-8, or run `assay init` again") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigInvalid(f"{path}: expected a mapping such as `forge: ../forge.git`")
    return data


def resolve_forge(flag: str | None, cwd: str | os.PathLike[str] | None = None) -> ForgeChoice:
    cwd = os.fspath(cwd) if cwd else os.getcwd()
    if flag:
        return ForgeChoice(_normalise(flag, cwd), "--forge")
    env = os.environ.get("ASSAY_FORGE")
    if env:
        return ForgeChoice(_normalise(env, cwd), "ASSAY_FORGE")
    config = find_config(cwd)
    if config:
        forge = load_config(config).get("forge")
        if forge is not None:
            if not isinstance(forge, str) or not forge.strip():
                raise ConfigInvalid(f"{config}: `forge:` must be a URL or path")
            return ForgeChoice(_normalise(forge, os.path.dirname(config)), config)
    from assay.core.git import local_repo_origin

    origin = local_repo_origin(cwd) if _inside_repo(cwd) else None
    if origin:
        return ForgeChoice(_normalise(origin, cwd), "the repository's origin")
    raise UsageError("no forge is configured",
                     hint="pass --forge URL|PATH, set ASSAY_FORGE, or run `assay init --local-forge DIR`")


def _inside_repo(cwd: str) -> bool:
    return any(os.path.exists(os.path.join(folder, ".git")) for folder in _upwards(cwd))


def _normalise(url: str, base: str) -> str:
    url = url.strip()
    if is_local_path(url):  # a folder (no `scheme://`: no credentials to note)
        return os.path.realpath(os.path.join(base, os.path.expanduser(url)))
    from assay.core.credentials import remember, strip_credentials

    remember(url)
    if url.startswith("file://"):
        return strip_credentials(url)  # a file has no login: git would read `user:pw@` as part of the path
    return url


class Ports:
    """The forge's ports for one command, built on first use and closed when it ends (ghstack's cli_context).

    Verbs receive it; none builds its own git, claims or reviews.
    """

    def __init__(self, flag: str | None, cwd: str | os.PathLike[str] | None = None) -> None:
        self.flag, self.cwd = flag, cwd
        self._git: ForgeGit | None = None
        self._claims: Claims | None = None
        self._reviews: Reviews | None = None

    @property
    def git(self) -> ForgeGit:
        if self._git is None:
            self._git = open_forge(self.flag, self.cwd)
        return self._git

    @property
    def claims(self) -> Claims:
        if self._claims is None:
            from assay.core.claims import Claims

            self._claims = Claims(self.git)
        return self._claims

    @property
    def reviews(self) -> Reviews:
        if self._reviews is None:
            self._reviews = open_reviews(self.git)
        return self._reviews

    def close(self) -> None:
        if self._git is not None:
            self._git.close()

    def __enter__(self) -> Ports:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_forge(flag: str | None, cwd: str | os.PathLike[str] | None = None) -> ForgeGit:
    """The git port for the chosen forge."""
    from assay.core.git import ForgeGit

    return ForgeGit(resolve_forge(flag, cwd).url)


def github_target(url: str) -> GitHubTarget | None:
    """The GitHub repository the forge `url` is: on github.com, or on the host `ASSAY_GITHUB_API` serves."""
    from assay.core.forge.github import target_of

    return target_of(url, os.environ.get("ASSAY_GITHUB_API") or None)


def open_reviews(git: ForgeGit) -> Reviews:
    """Pull requests when the forge is GitHub (github.com, or the host of `ASSAY_GITHUB_API`), else review
    refs on the forge itself. PyGithub is imported only for GitHub."""
    from assay.core.credentials import token_for

    target = github_target(git.url)
    if target is None:
        from assay.core.forge.plain import PlainReviews

        return PlainReviews(git)
    token = token_for(git.url)
    if not token:
        raise UsageError(f"the forge is GitHub ({target.repo}) and no token is set",
                         hint="set GITHUB_TOKEN (or GH_TOKEN) to a token with contents, pull requests and "
                              "statuses write access")
    from pathlib import Path

    from assay.core.forge.budget import fleet_budget
    from assay.core.forge.github import GitHubReviews

    return GitHubReviews(target, token, cache_dir=Path(git.cache, "github"), budget=fleet_budget(git, token))


def state_dir_for(url: str, explicit: Path | None = None) -> Path:
    """Where a desk keeps worktrees and prompts for this forge."""
    from pathlib import Path  # here: the short commands scripts and agents call in loops do not load pathlib

    if explicit:
        return usable_folder(explicit.absolute(), "--state-dir")  # the agent runs elsewhere: never relative
    base = os.environ.get("ASSAY_STATE_DIR") or os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local/state")
    root = Path(base) if os.environ.get("ASSAY_STATE_DIR") else Path(base) / "assay"
    return usable_folder(root.absolute() / sha256_hex(url.encode())[:20], "ASSAY_STATE_DIR")


def usable_folder(path: Path, named_by: str) -> Path:
    """`path`, made if missing, once it is known to be a folder this process can write (bad input otherwise)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        import tempfile

        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"cannot use {path} as the desk's state folder: {exc.strerror}",
                         hint=f"point {named_by} at a folder this user can write") from None
    return path


PACKAGE = os.path.dirname(os.path.realpath(__file__))  # the `assay` package
SOURCES = {"workflows": ".github/workflows"}  # shipped defaults kept elsewhere in the source tree


def defaults_dir(kind: str) -> Path:
    """Where the shipped defaults live: inside the installed package, or the source checkout."""
    from pathlib import Path

    packaged = Path(PACKAGE, "_defaults", kind)
    if packaged.is_dir():
        return packaged
    source = Path(PACKAGE).parent / SOURCES.get(kind, kind)
    if source.is_dir():
        return source
    raise UsageError(f"the default {kind}/ folder is missing from this installation", hint="reinstall assay")
