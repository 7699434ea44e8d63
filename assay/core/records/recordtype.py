"""Record classes: the part of `dataclasses` Assay uses, made without compiling source for every method.

`dataclasses` builds each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and frozen `__setattr__`
from source text it compiles as the module is imported (and loads `inspect`, `ast` and `dis` to do it):
on a 2-core machine about 0.8 ms a class, and with 24 classes and the import itself 30 ms of the
90 ms a whole `assay step run` took. Here a class's `__init__` is the one function compiled for it;
the other methods are shared and read the class's fields.

The semantics are `dataclasses`' for what Assay uses: `@dataclass` and `@dataclass(frozen=True)`, fields
from the class's own annotations in order but for `ClassVar` ones, a default as the class attribute or
`field(default=…)` or `field(default_factory=…)` (a mutable one, such as a list, raises ValueError: a default is
shared by every record); `__eq__` compares the fields of two instances of the same class, a frozen
class is hashable by its fields and refuses assignment (`FrozenInstanceError`, an AttributeError),
an unfrozen one is unhashable; a method the class body defines is kept. `fields`, `asdict` and
`replace` work as `dataclasses`' do on these classes. A `ClassVar` annotation is what `dataclasses` reads as
one: the module binds the name (or `typing.ClassVar`) to typing's at run time; one the module cannot resolve so
(imported under `TYPE_CHECKING`) raises TypeError, as `dataclasses` would make it a field that mypy does not
see. Each record class carries `__record_fields__` and `__record_frozen__`. Type checkers see `dataclass` as a dataclass
transform (PEP 681), so they check constructors and frozen fields as for `dataclasses`. A class's `__init__`
is compiled when the first record of it is made: a command makes records of a few of the classes it loads.

`NamedTuple` is `typing.NamedTuple` for what Assay writes (`class T(NamedTuple)` with annotated fields,
defaults and methods) without importing `typing` (a tenth of a short command's start): the class is
`collections.namedtuple`'s, with the body's methods and docstring.
"""

from __future__ import annotations

import sys
from collections import namedtuple
from operator import attrgetter

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform, overload

    T = TypeVar("T")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # no default


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen record."""


class Field:
    """One field of a record class: its name, and its default or the factory that makes one."""

    __slots__ = ("name", "default", "default_factory")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, name: str = "") -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field cannot have both a default and a default_factory")
        self.name, self.default, self.default_factory = name, default, default_factory

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


if TYPE_CHECKING:  # what type checkers see: `dataclass` as a dataclass transform, `field` its field specifier
    @overload
    def field(*, default: T) -> T: ...
    @overload
    def field(*, default_factory: Callable[[], T]) -> T: ...
    def field(*, default: Any = MISSING, default_factory: Any = MISSING) -> Any: ...

    @overload
    def dataclass(cls: type[T], /) -> type[T]: ...
    @overload
    def dataclass(*, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...
    @dataclass_transform(field_specifiers=(field,))
    def dataclass(cls: Any = None, /, *, frozen: bool = False) -> Any: ...
else:
    def field(*, default=MISSING, default_factory=MISSING):
        """A field's default given otherwise than as the class attribute: `default_factory` makes a fresh one."""
        return Field(default, default_factory)

    def dataclass(cls=None, /, *, frozen=False):
        """Make `cls` a record class (see the module's docstring); `@dataclass` or `@dataclass(frozen=True)`."""
        if cls is None:
            return lambda c: _process(c, frozen)
        return _process(cls, frozen)


def fields(record: Any) -> tuple[Field, ...]:
    """The fields of a record class or record, in order."""
    try:
        return record.__record_fields__  # type: ignore[no-any-return]
    except AttributeError:
        raise TypeError(f"{record!r} is not a record class or record") from None


def asdict(record: Any) -> dict[str, Any]:
    """The record's fields as a dict, records, lists, tuples and dicts within it copied the same way."""
    return {f.name: _plain(getattr(record, f.name)) for f in fields(record)}


def replace(record: T, /, **changes: Any) -> T:
    """A new record with the same fields but for `changes` (its `__init__` checks them)."""
    for f in fields(record):
        changes.setdefault(f.name, getattr(record, f.name))
    return type(record)(**changes)


_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})


def _plain(value: Any) -> Any:
    if type(value) in _SCALARS:  # the most of any record's fields: first
        return value
    if hasattr(type(value), "__record_fields__"):
        return asdict(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    import copy  # here: only for a value of another kind, as `dataclasses.asdict` copies it

    return copy.deepcopy(value)


def _process(cls: Any, frozen: bool) -> Any:
    own = cls.__dict__
    if any(hasattr(base, "__record_fields__") for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__qualname__}: a record class cannot inherit another's fields here")
    found: list[Field] = []
    typed = "typing" in sys.modules  # if not, only the name ClassVar itself can read as one (unbound): no alias
    for name, kind in cls.__annotations__.items():  # the class's own (Python 3.10 on), however they are kept
        value = own.get(name, MISSING)
        if (typed or kind.__class__ is not str or "ClassVar" in kind) and _classvar(cls, kind):
            if isinstance(value, Field) and value.default_factory is not MISSING:
                raise TypeError(f"field {name} cannot have a default factory")
            if isinstance(value, Field):
                _unwrap(cls, name, value)
            continue
        if isinstance(value, Field):
            spec = value
            _unwrap(cls, name, value)
        else:
            spec = Field(value)
        spec.name = name
        if spec.default.__class__.__hash__ is None:  # MISSING's class hashes: only a real default gets here
            raise ValueError(f"mutable default {type(spec.default)} for field {name} is not allowed: "
                             "use default_factory")
        if found and not _has_default(spec) and _has_default(found[-1]):
            raise TypeError(f"non-default argument {name!r} follows default argument")
        found.append(spec)
    names = tuple(f.name for f in found)
    cls.__record_fields__, cls.__record_frozen__ = tuple(found), frozen
    cls.__init__ = _deferred_init(cls, found)
    cls.__record_values__ = staticmethod(_values(names))
    if "__repr__" not in own:
        cls.__repr__ = _repr
    if "__eq__" not in own:
        cls.__eq__ = _eq
    # a `__hash__` the body set, not the None Python puts beside a body's own `__eq__`, is kept (as dataclasses do)
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if frozen:
        cls.__setattr__, cls.__delattr__ = _refuse_set, _refuse_delete
        if not explicit_hash:
            cls.__hash__ = _hash
    elif not explicit_hash:
        cls.__hash__ = None
    return cls


def _unwrap(cls: Any, name: str, value: Field) -> None:
    """A `field(...)` in the class body leaves its default as the class attribute, or nothing."""
    if value.default is MISSING:
        delattr(cls, name)
    else:
        setattr(cls, name, value.default)


def _classvar(cls: Any, kind: Any) -> bool:
    """Whether annotation `kind` of `cls` is a `ClassVar`, as `dataclasses` decides (its `_is_type`: the name
    heading a string, `Name` or `module.Name`, looked up in the class's module); TypeError where it would make a
    field of what a type checker reads as a ClassVar: the name unbound at run time, or bound through another module
    (`typing_extensions.ClassVar`)."""
    typing = sys.modules.get("typing")
    if kind.__class__ is not str:
        return typing is not None and (kind is typing.ClassVar or getattr(kind, "__origin__", None) is typing.ClassVar)
    module_name, _, name = kind.partition("[")[0].strip().rpartition(".")
    module_name, name = module_name.strip(), name.strip()
    if not name.isidentifier() or (module_name and not module_name.isidentifier()):
        return False  # `int | None`, `a.b.C`: no name of this module's heads it
    scope = vars(sys.modules[cls.__module__])
    holder = scope.get(module_name, MISSING) if module_name else None
    if holder is MISSING:
        found = MISSING
    else:
        found = scope.get(name, MISSING) if holder is None else getattr(holder, name, MISSING)
    if typing is not None and found is typing.ClassVar and (holder is None or holder is typing):
        return True
    unbound = holder is MISSING or (holder is None and found is MISSING)
    if (unbound and name == "ClassVar") or (typing is not None and found is typing.ClassVar):
        raise TypeError(f"{cls.__qualname__}: annotation {kind!r} names a ClassVar that dataclasses would read as a "
                        "field: bind ClassVar (or typing) in the module at run time, not under TYPE_CHECKING")
    return False


def _values(names: tuple[str, ...]) -> Any:
    """The fields' values of a record as a tuple, as `dataclasses` compares and hashes them."""
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda record: (one(record),)
    return attrgetter(*names) if names else (lambda _: ())


def _has_default(spec: Field) -> bool:
    return spec.default is not MISSING or spec.default_factory is not MISSING


_FACTORY = object()  # an __init__ argument left out whose field has a default_factory


def _deferred_init(cls: Any, found: list[Field]) -> Any:
    """An `__init__` that compiles the class's own on its first call and puts it in its place."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if cls.__dict__["__init__"] is __init__:
            cls.__init__ = _init(cls, found)
        cls.__dict__["__init__"](self, *args, **kwargs)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _init(cls: Any, found: list[Field]) -> Any:
    """`__init__(self, <fields in order, with their defaults>)`: the one function compiled for a class."""
    scope: dict[str, Any] = {"_FACTORY": _FACTORY}
    params, body = ["self"], []
    for i, spec in enumerate(found):
        if spec.default_factory is not MISSING:
            scope[f"_f{i}"] = spec.default_factory
            params.append(f"{spec.name}=_FACTORY")
            body.append(f"  _fields_[{spec.name!r}] = _f{i}() if {spec.name} is _FACTORY else {spec.name}")
        else:
            if spec.default is not MISSING:
                scope[f"_d{i}"] = spec.default
                params.append(f"{spec.name}=_d{i}")
            else:
                params.append(spec.name)
            body.append(f"  _fields_[{spec.name!r}] = {spec.name}")
    post = "  self.__post_init__()\n" if hasattr(cls, "__post_init__") else ""
    source = f"def __init__({', '.join(params)}):\n  _fields_ = self.__dict__\n" + "\n".join(body) + "\n" + post
    exec(compile(source, f"<record {cls.__qualname__}>", "exec"), scope)  # noqa: S102 (our own text)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__record_fields__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    get = self.__record_values__
    return get(self) == get(other)


def _hash(self: Any) -> int:
    return hash(self.__record_values__(self))


def _refuse_set(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    _TUPLE_BODY = frozenset({"__module__", "__qualname__", "__annotations__", "__dict__", "__weakref__"})

    class _TupleMaker(type):
        def __new__(mcls, name, bases, body):
            if "__annotations__" not in body and "__annotate__" in body:  # Python 3.14's lazy annotations
                raise TypeError(f"{name}: a NamedTuple here needs `from __future__ import annotations` in its module")
            names = list(body.get("__annotations__", {}))
            first = next((i for i, n in enumerate(names) if n in body), len(names))
            if any(n not in body for n in names[first:]):
                raise TypeError(f"{name}: a field without a default follows one with a default")
            defaults = [body[n] for n in names[first:]]
            made = namedtuple(name, names, defaults=defaults, module=body.get("__module__"))
            made.__qualname__ = body.get("__qualname__", name)
            made.__annotations__ = dict(body.get("__annotations__", {}))
            for key, value in body.items():
                if key not in _TUPLE_BODY and key not in names:
                    setattr(made, key, value)
            return made

    _TupleBase = type.__new__(_TupleMaker, "NamedTuple", (), {})

    def NamedTuple(typename, fields=None, /):  # noqa: N802 (typing's name)
        """A base class only here: `class T(NamedTuple): ...` (the call form is typing's, not used by Assay)."""
        raise TypeError("NamedTuple is a base class here: class T(NamedTuple): ...")

    NamedTuple.__mro_entries__ = lambda bases: (_TupleBase,)
