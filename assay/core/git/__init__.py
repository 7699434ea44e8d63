"""The only package that runs git.

A `ForgeGit` pairs a forge (any git URL or path) with a local bare *cache*
repository where Assay writes its objects and keeps what it fetched. Every
write to the forge is a compare-and-swap push (`--force-with-lease`, never a
`+` refspec); a push whose outcome we did not hear is resolved by re-reading
the refs, never by guessing.

GitPython is deliberately not used on this path: importing it costs more than
a whole claim push, and its push-info parser cannot report per-ref results when
the source is a raw object id. We run the `git` binary and parse `--porcelain`.

By job: `gitenv` is git's environment, `run` runs git; `refs` and `objects` hold its values and the cache's objects;
`history` the commits fetched and their chains; `listing` reads refs; `ondisk` and `push` write them (`vetting`:
which way a forge on disk takes a push; `locks`: the stale ref locks a killed push left); over HTTP `smarthttp` asks
the forge from this process, for listings, pushes and fetches (`httpfetch`); `workrepo` a checkout; `worktrees` the
desks' worktrees and their pools of spares; `forge` puts `ForgeGit` together, each job's class built on the one
below it. The names callers use are here, each loaded as a caller first names it (PEP 562): a command that needs
only `run` (where a forge is) or `ahead` (a new cache's first fetch, started before the rest loads) loads only
those.
"""

from assay.core.lazy import names

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from assay.core.git.forge import ForgeGit
    from assay.core.git.gitenv import auth_env, default_cache_root, git_env, is_local_path
    from assay.core.git.history import WALK_AT_MOST
    from assay.core.git.listing import remote_has_ref
    from assay.core.git.locks import STALE_LOCK_S, clear_stale_lock, lock_named, refusal_hint
    from assay.core.git.objects import GitObject, Signature, TreeEntry, committed_at, parse_tree
    from assay.core.git.ondisk import PACK_REFS_AT, UNPACK_BELOW
    from assay.core.git.push import PACK_GUARD
    from assay.core.git.refs import OBJECT_ID, ZERO, PushResult, RefUpdate, parse_porcelain
    from assay.core.git.run import configured_person, init_bare, local_forge_path, local_repo_origin, repo_root, run_git
    from assay.core.git.vetting import Vetting
    from assay.core.git.workrepo import WorkRepo
    from assay.core.git.worktrees import SPARES

_HOMES = {  # each name's module
    "forge": ("ForgeGit",), "history": ("WALK_AT_MOST",), "listing": ("remote_has_ref",),
    "locks": ("STALE_LOCK_S", "clear_stale_lock", "lock_named", "refusal_hint"),
    "objects": ("GitObject", "Signature", "TreeEntry", "committed_at", "parse_tree"),
    "ondisk": ("PACK_REFS_AT", "UNPACK_BELOW"), "push": ("PACK_GUARD",),
    "refs": ("OBJECT_ID", "ZERO", "PushResult", "RefUpdate", "parse_porcelain"),
    "gitenv": ("auth_env", "default_cache_root", "git_env", "is_local_path"),
    "run": ("configured_person", "init_bare", "local_forge_path", "local_repo_origin", "repo_root", "run_git"),
    "vetting": ("Vetting",), "workrepo": ("WorkRepo",), "worktrees": ("SPARES",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__getattr__ = names(__name__, _HOME)

__all__ = [
    "OBJECT_ID", "PACK_GUARD", "PACK_REFS_AT", "SPARES", "STALE_LOCK_S", "UNPACK_BELOW", "WALK_AT_MOST", "ZERO",
    "ForgeGit", "GitObject", "PushResult", "RefUpdate", "Signature", "TreeEntry", "Vetting", "WorkRepo", "auth_env",
    "clear_stale_lock", "committed_at", "configured_person", "default_cache_root", "git_env", "init_bare",
    "is_local_path", "local_forge_path", "local_repo_origin", "lock_named", "parse_porcelain", "parse_tree",
    "refusal_hint", "remote_has_ref", "repo_root", "run_git",
]
