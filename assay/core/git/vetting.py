"""Whether a forge on this machine vets a push (hooks, `receive.*` rules, a checked-out branch…) and must get it
through `git push`, or takes the fast path; asked again only when a file that decides it changes."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Sequence

from assay.core import cachefile
from assay.core.digests import sha256_hex
from assay.core.git.run import forge_env, run_git
from assay.core.records.recordtype import NamedTuple


class Vetting(NamedTuple):
    """How a forge on this machine takes a push: through `git push` when it `vets` it, else by the fast path, which
    syncs each loose object it writes when `sync_loose` (the forge asks git to)."""

    vets: bool
    sync_loose: bool = False


_VETTING: dict[str, tuple[list[object], list[str], Vetting]] = {}  # a forge's folder: stamps, included files, answer
RACY_NS = 50_000_000  # a file written this close to a reading may be newer than what was read (file clocks are coarse)
# in the forge's cache: `forge_vetting`'s answer and the stamps it was read from (v1's answers, which did not weigh
# object checks, transfer.* or syncing, are never read)
VETTING_FILE = "forge-vetting.v2.json"
# config keys, as git lists them, that give a forge a say in what its receive-pack takes: its rules (`receive.*`;
# `transfer.*`: object checks, hidden refs; not the two a client alone reads), hooks elsewhere, shared permissions,
# repository extensions
_RULES = re.compile(r"receive\.|transfer\.(?!credentialsinurl$|bundleuri$)|extensions\.|core\.hookspath$"
                    r"|core\.sharedrepository$")
_SETTINGS = frozenset({"core.bare", "core.fsync", "core.fsyncobjectfiles"})  # keys whose values decide, as listed


GIT_SYNCS_LOOSE = os.name == "nt"  # git's default `core.fsync` leaves loose objects out (`committed,-loose-object`),
# but on Windows
_FSYNC_LOOSE = {"loose-object": True, "pack": False, "pack-metadata": False, "commit-graph": False, "index": False,
                "objects": True, "reference": False, "derived-metadata": False, "committed": True, "added": True,
                "all": True}  # core.fsync's components (git 2.36 on), and whether each holds `loose-object`


class _Warming(threading.Thread):
    """`warm`'s reading of one forge's vetting, and the error it met (the push that waits for it says that error,
    rather than meet the same trouble, a timeout say, a second time)."""

    def __init__(self, folder: str, cache: str) -> None:
        super().__init__(name="assay-vetting", daemon=True)
        self.folder, self.cache = folder, cache
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            _forge_vetting(self.folder, self.cache)
        except Exception as exc:  # noqa: BLE001 (said by the push that waits for this reading)
            self.error = exc


_WARMING: dict[str, _Warming] = {}  # a forge's folder: the reading `warm` started of its vetting


def warm(folder: str, cache: str) -> None:
    """Start reading how the forge in `folder` takes a push (`forge_vetting`), in a thread, while the caller goes
    on: a short command loads its code meanwhile on one core, and a new cache's first push then finds the answer
    read (two `git` processes off its way). Only a speed-up: the push itself asks `forge_vetting`, which waits for
    this reading and checks its stamps as it checks any kept answer. A thread that cannot be started is none."""
    if folder in _VETTING or folder in _WARMING:
        return
    reading = _Warming(folder, cache)
    try:
        reading.start()
    except RuntimeError:  # no thread to be had (a process limit): the push reads it
        return
    _WARMING[folder] = reading


def forge_vetting(folder: str, cache: str) -> Vetting:
    """How a forge on this machine takes a push. It vets each one, through `git push`, when it has a say in what
    it receives: hooks (in its own folder or where `core.hooksPath` points), `receive.*` and `transfer.*` rules
    (`denyDeletes`, hidden refs, object checks: `fsckObjects` with the `fsck.*` messages its receive-pack reads),
    shared permissions (`core.sharedRepository`, which git applies to each file it writes), extensions, a
    branch checked out (a forge not bare, linked worktrees), or a setting git refuses. Else the fast path does
    what its receive-pack would: `fsck.*` alone checks nothing a push brings; git itself unpacks and moves the
    refs, syncing as `core.fsync` asks, and the loose objects it writes are synced as git would sync them.
    Asked again only when a file that decides it changed (the config files git reads, those they include, the
    forge's hooks, its worktrees) or the `GIT_CONFIG*` variables did; the answer and those stamps are kept in the
    forge's cache for the next process."""
    reading = _WARMING.pop(folder, None)
    if reading is not None:  # started by `warm`: its answer is kept as this one's would be, its error said
        reading.join()
        if reading.error is not None:
            raise reading.error
    return _forge_vetting(folder, cache)


def _forge_vetting(folder: str, cache: str) -> Vetting:
    seen = _vetting_key(folder)
    known = _VETTING.get(folder)
    if known is not None and known[0] == [*seen, *file_stamps(known[1])]:
        return known[2]
    kept_at = os.path.join(cache, VETTING_FILE)
    kept = cachefile.load(kept_at)
    also, vets, sync = kept.get("also"), kept.get("vets"), kept.get("sync")
    if isinstance(also, list) and all(isinstance(a, str) for a in also) and isinstance(vets, bool) \
            and isinstance(sync, bool):
        stamps = [*seen, *file_stamps(also)]  # lists of strings and numbers: as the file gives them back
        if kept.get("stamps") == stamps:
            _VETTING[folder] = (stamps, also, Vetting(vets, sync))
            return Vetting(vets, sync)
    started = time.time_ns()
    answer, also, settled = _read_vetting(folder)
    after = file_stamps(also)  # stamped after the reading: one written as git read it may be newer than what it read
    before = {os.path.abspath(st[0]) for st in seen if isinstance(st, list)}  # these were stamped before it
    racy = any(isinstance(st, list) and st[2] >= started - RACY_NS and os.path.abspath(st[0]) not in before
               for st in after)
    stamps = [*seen, *after]
    if settled and not racy:
        _VETTING[folder] = (stamps, also, answer)
        cachefile.save(kept_at, {"stamps": stamps, "also": also, "vets": answer.vets, "sync": answer.sync_loose})
    return answer


def _vetting_key(folder: str) -> list[object]:
    """What `_read_vetting`'s answer depends on, but for the files the config includes: the stamps of the config
    files git reads (the forge's, this user's and this machine's, or those `GIT_CONFIG_GLOBAL` and
    `GIT_CONFIG_SYSTEM` name), of the forge's hooks and of its worktrees folder, and a digest of the `GIT_CONFIG*`
    variables (never their values: one may carry a token)."""
    given = sorted((name, value) for name, value in os.environ.items() if name.startswith("GIT_CONFIG"))
    hooks = os.path.join(folder, "hooks")
    paths = [*config_files(dict(os.environ), folder), hooks, os.path.join(folder, "worktrees")]
    if os.path.isdir(hooks):  # a hook made executable in place: its own stamp changes
        paths += sorted(os.path.join(hooks, name) for name in os.listdir(hooks))
    return [sha256_hex(json.dumps(given).encode()), *file_stamps(paths)]


def config_files(env: dict[str, str], folder: str) -> list[str]:
    """The configuration files git reads in the bare repository `folder` with `env`, but for those they include:
    the repository's, this user's (or `GIT_CONFIG_GLOBAL`'s) and this machine's (or `GIT_CONFIG_SYSTEM`'s, unless
    `GIT_CONFIG_NOSYSTEM`)."""
    home = env.get("HOME", "/")
    named = env.get("GIT_CONFIG_GLOBAL")
    paths = [os.path.join(folder, "config")]
    paths += [named] if named else [os.path.join(home, ".gitconfig"),
                                    os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
                                                 "git", "config")]
    if env.get("GIT_CONFIG_NOSYSTEM", "").lower() not in ("1", "true", "yes", "on"):
        paths.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    return paths


def file_stamps(paths: Sequence[str]) -> list[object]:
    """Each file's identity and last change (None for one that is not there)."""
    stamps: list[object] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append([path, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size])
    return stamps


def _read_vetting(folder: str) -> tuple[Vetting, list[str], bool]:
    """How the forge takes a push (`forge_vetting`); the files its answer also depends on (those the config includes,
    and the system config of a git installed elsewhere than /usr); and whether the answer can be kept (False when
    git could not read the config: then the forge is taken to vet pushes, and asked again next time). The config
    is read as the forge's receive-pack reads it (`forge_env`)."""
    hooks = os.path.join(folder, "hooks")
    if os.path.isdir(hooks) and any(not name.endswith(".sample") and os.access(os.path.join(hooks, name), os.X_OK)
                                    for name in os.listdir(hooks)):
        return Vetting(True), [], True
    if os.path.isdir(os.path.join(folder, "worktrees")):  # a branch checked out there is not receive-pack's to move
        return Vetting(True), [], True
    listed = run_git(["--git-dir", folder, "config", "--list", "--show-origin", "-z"], check=False, env=forge_env())
    if listed.returncode != 0:
        return Vetting(True), [], False
    vets, also = False, set(_system_configs())
    settings: dict[str, str | None] = {}  # the last value of each key of `_SETTINGS` (None: a key with no value)
    fields = listed.stdout.decode("utf-8", "replace").split("\0")
    for origin, entry in zip(fields[0::2], fields[1::2], strict=False):
        key, valued, value = entry.partition("\n")
        vets = vets or _RULES.match(key) is not None
        if key in _SETTINGS:
            settings[key] = value if valued else None
        if not origin.startswith("file:"):
            continue  # the command line, or standard input: in the GIT_CONFIG* digest
        source = os.path.abspath(origin.removeprefix("file:"))
        also.add(source)
        if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
            also.add(os.path.join(os.path.dirname(source), os.path.expanduser(value)))  # even while absent
    sync = _syncs_loose(settings)
    vets = vets or sync is None or _git_bool(settings.get("core.bare", "false")) is not True
    return Vetting(vets, sync is True), sorted(also), True


def _syncs_loose(settings: dict[str, str | None]) -> bool | None:
    """Whether git syncs each loose object it writes into the forge (config.c and object-file.c, git 2.36 on):
    `core.fsyncObjectFiles` true, or a `core.fsync` holding `loose-object`. None for a value git refuses (its
    push says why)."""
    if "core.fsyncobjectfiles" in settings:
        files = _git_bool(settings["core.fsyncobjectfiles"])
        if files is not False:
            return files
    if "core.fsync" not in settings:
        return GIT_SYNCS_LOOSE
    spec = settings["core.fsync"]
    return None if spec is None else _fsync_holds_loose(spec)


def _fsync_holds_loose(spec: str) -> bool:
    """Whether a `core.fsync` value holds `loose-object`, read as git's `parse_fsync_components` reads it: each
    comma-separated name (after commas and blanks) is a prefix of the components it adds, or with `-` takes away
    from the default; `none` as the last name empties the default; an empty name ends the list."""
    default, added, taken = GIT_SYNCS_LOOSE, False, False
    rest = spec
    while True:
        rest = rest.lstrip(", \t\n\r")
        name = rest.split(",", 1)[0]
        if rest == "none":
            default = False
        else:
            negated = name.startswith("-")
            name = name.removeprefix("-")
            if not name:
                break
            loose = any(full.startswith(name) and holds for full, holds in _FSYNC_LOOSE.items())
            taken, added = (taken or loose, added) if negated else (taken, added or loose)
        if "," not in rest:
            break
        rest = rest.split(",", 1)[1]
    return (default and not taken) or added


def _git_bool(value: str | None) -> bool | None:
    """A config value read as git reads a boolean (no value: true; a whole number: not zero); None if git refuses
    it."""
    if value is None:
        return True
    word = value.lower()
    if word in ("true", "yes", "on"):
        return True
    if word in ("", "false", "no", "off"):
        return False
    return int(value) != 0 if re.fullmatch(r"[-+]?[0-9]+", value) else None


def _system_configs() -> list[str]:
    """The system config of this git when it is installed under a prefix of its own (`<prefix>/etc/gitconfig`;
    under /usr it is /etc/gitconfig, which `_vetting_key` stamps), unless the environment names or skips it."""
    if "GIT_CONFIG_SYSTEM" in os.environ or "GIT_CONFIG_NOSYSTEM" in os.environ:
        return []
    found = run_git(["--exec-path"], check=False).stdout.decode("utf-8", "replace").strip()
    prefix = os.path.dirname(os.path.dirname(found.rstrip("/"))) if found else None  # <prefix>/libexec/git-core
    return [os.path.join(prefix, "etc", "gitconfig")] if prefix and prefix != "/usr" else []
