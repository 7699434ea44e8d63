"""A package's names loaded as a caller first names them (PEP 562): the package's `__getattr__` imports the module a
name lives in and keeps the name in the package, so that a command loads only the modules it uses (`core.git`,
`core.journal`, `core.records`: a cold `assay step run` starts its first fetch before the rest loads)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def names(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The `__getattr__` of `package`, whose name N lives in its module `homes[N]`; any other name is none of its."""
    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(__import__(f"{package}.{home}", fromlist=[name]), name)
        setattr(sys.modules[package], name, value)  # found there directly from now on
        return value

    return __getattr__
