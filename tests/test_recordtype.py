"""Record classes (`assay/core/records/recordtype.py`) behave as `dataclasses` makes them, for what Assay uses."""

from __future__ import annotations

import copy
import dataclasses
import functools
import pickle
import random
import typing
from typing import Any

import pytest

from assay.core.records import recordtype


def _pair(frozen: bool) -> tuple[Any, Any]:
    """One class body made a record by each: the stdlib's and ours."""
    def body() -> type:
        class Entry:
            """An entry."""

            seq: int
            kind: str
            run: str = ""
            tags: list[str] = recordtype.field(default_factory=list)
            data: dict[str, Any] | None = None

            def label(self) -> str:
                return f"{self.kind}-{self.seq}"
        return Entry

    theirs = body()
    theirs.__annotations__ = dict(theirs.__annotations__)
    theirs.tags = dataclasses.field(default_factory=list)  # type: ignore[attr-defined]
    return dataclasses.dataclass(frozen=frozen)(theirs), recordtype.dataclass(frozen=frozen)(body())


@pytest.mark.parametrize("frozen", [True, False])
def test_a_record_class_answers_as_a_dataclass_does(frozen: bool) -> None:
    theirs, ours = _pair(frozen)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1, "intent"), {}), ((2, "result", "r1"), {"data": {"a": [1, {"b": 2}]}}),
        ((), {"seq": 3, "kind": "note", "tags": ["x"]})]
    for args, kwargs in calls:
        a, b = theirs(*args, **kwargs), ours(*args, **kwargs)
        assert repr(a) == repr(b) and b.label() == a.label()
        assert dataclasses.asdict(a) == recordtype.asdict(b)
        assert recordtype.asdict(b)["tags"] is not b.tags  # copied, as dataclasses.asdict copies
        assert (b == ours(*args, **kwargs)) and b != ours(99, "other") and b != a  # another class: not equal
        changed = recordtype.replace(b, kind="wake")
        assert changed.kind == "wake" and changed.seq == b.seq and b.kind != "wake"
        assert copy.deepcopy(b) == b and copy.copy(b) == b
        if frozen:
            with pytest.raises(TypeError):  # a list among the fields: unhashable, as dataclasses makes it
                hash(b)
            plain = ours(*args, **{**kwargs, "tags": (), "data": None})
            assert hash(plain) == hash(ours(*args, **{**kwargs, "tags": (), "data": None}))
            with pytest.raises(AttributeError):
                b.seq = 5
            with pytest.raises(recordtype.FrozenInstanceError):
                del b.kind
        else:
            with pytest.raises(TypeError):
                hash(b)
            b.seq = 7
            assert b.seq == 7
    assert ours(1, "k").tags is not ours(1, "k").tags  # a fresh default from its factory each time
    assert [f.name for f in recordtype.fields(ours)] == [f.name for f in dataclasses.fields(theirs)]
    assert ours.run == "" and not hasattr(ours, "tags")  # defaults stay class attributes, factories do not
    with pytest.raises(TypeError):
        ours(1, "k", nope=1)
    with pytest.raises(TypeError):
        ours(1)


def test_a_record_pickles_and_compares_by_its_fields() -> None:
    from assay.core.records import JournalEntry

    entry = JournalEntry(seq=1, epoch=1, kind="note", at="2026-01-01T00:00:00Z", data={"text": "hi"})
    assert pickle.loads(pickle.dumps(entry)) == entry
    bare = recordtype.replace(entry, data=None)
    assert {bare: 1}[recordtype.replace(bare)] == 1 and bare != entry


def test_a_field_without_a_default_after_one_with_is_refused_as_dataclasses_refuses_it() -> None:
    class Bad:
        a: int = 0
        b: int

    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        recordtype.dataclass(Bad)
    with pytest.raises(TypeError):
        recordtype.fields(object())

    @recordtype.dataclass
    class Base:
        a: int

    class Child(Base):
        b: int = 0

    with pytest.raises(TypeError, match="cannot inherit"):
        recordtype.dataclass(Child)


def test_a_frozen_record_with_its_own_eq_is_still_hashed_by_its_fields() -> None:
    @recordtype.dataclass(frozen=True)
    class Point:
        x: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Point) and other.x == self.x

    @dataclasses.dataclass(frozen=True)
    class Theirs:
        x: int

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Theirs) and other.x == self.x

    assert hash(Point(1)) == hash(Point(1)) and hash(Theirs(1)) == hash(Theirs(1))


@pytest.mark.parametrize("names", [(), ("x",), ("x", "y")])
def test_records_of_no_one_or_more_fields_hash_and_compare_as_dataclasses_do(names: tuple[str, ...]) -> None:
    """The fields' tuple is what is hashed and compared, one field too: NaN is equal to itself in a tuple."""
    nan = float("nan")
    makers: list[Any] = [dataclasses.dataclass, recordtype.dataclass]
    theirs, ours = (make(frozen=True)(type("P", (), {"__annotations__": dict.fromkeys(names, "float")}))
                    for make in makers)
    args = [nan] + [1.5] * (len(names) - 1) if names else []
    assert hash(ours(*args)) == hash(theirs(*args))
    assert (ours(*args) == ours(*args)) == (theirs(*args) == theirs(*args))


def test_the_commands_an_agent_runs_most_never_load_dataclasses() -> None:
    """What `assay step run`, `claim` and `renew` import makes its record classes without `dataclasses` (nor
    `inspect`, which it loads): a third of such a process's start went there."""
    import subprocess
    import sys

    probe = ("import sys\nimport assay.entry, assay.lean, assay.desk.effects, assay.views, assay.core.steps\n"
             "print(sorted(m for m in ('dataclasses', 'inspect') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_record_class_compiles_its_init_when_its_first_record_is_made() -> None:
    @recordtype.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0

    deferred = Point.__dict__["__init__"]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()  # type: ignore[call-arg]
    assert Point.__dict__["__init__"] is not deferred  # compiled once, on that first call
    assert Point(1) == Point(x=1, y=0) and Point(2, y=3).y == 3


def _tuple_pair() -> tuple[Any, Any]:
    """One class body made a named tuple by typing's NamedTuple and by ours."""
    made = []
    for base in (typing.NamedTuple, recordtype.NamedTuple):
        class Update(base):  # type: ignore[misc,valid-type]
            """A ref update."""

            ref: str
            new: str
            expected: str = "0"

            def deletes(self) -> bool:
                return self.new == "0"

            @classmethod
            def of(cls, ref: str) -> Any:
                return cls(ref, "1")
        made.append(Update)
    return made[0], made[1]


def test_named_tuples_made_without_typing_answer_as_typings_do() -> None:
    theirs, ours = _tuple_pair()
    for cls in (theirs, ours):
        u: Any = cls("refs/x", "0")
        assert u == ("refs/x", "0", "0") and u.deletes()
        assert cls.of("r") == cls("r", "1", "0") and u._replace(new="2").new == "2" and copy.copy(u) == u
        with pytest.raises(AttributeError):
            u.ref = "y"
        assert issubclass(cls, tuple)
    from assay.core.git import RefUpdate  # one of Assay's, which a module names: pickled and read back

    update = RefUpdate("refs/x", "1" * 40, "0" * 40)
    assert pickle.loads(pickle.dumps(update)) == update and type(pickle.loads(pickle.dumps(update))) is RefUpdate
    assert [repr(c("a", "b")) for c in (theirs, ours)] == ["Update(ref='a', new='b', expected='0')"] * 2
    assert theirs._fields == ours._fields and theirs._field_defaults == ours._field_defaults
    assert theirs.__doc__ == ours.__doc__ and ours.__module__ == __name__
    with pytest.raises(TypeError, match="without a default follows"):
        class Bad(recordtype.NamedTuple):
            a: int = 1
            b: int  # type: ignore[misc]


def test_times_are_read_without_datetime_as_with_it() -> None:
    """`iso_seconds` (a renewal's age, without loading datetime) gives what `parse_iso(...).timestamp()` gives,
    errors included: random times, in range and out of it (month 13, February 29 of a year that has none)."""
    from assay.core.records import iso_seconds, parse_iso

    rng = random.Random(7)
    texts = ["2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z",
             "1970-01-01T00:00:00Z", "2026-1-2T3:4:5Z", "nonsense", "2026-01-01T00:00:60Z"]
    texts += [f"{rng.randint(0, 9999):04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}T"
              f"{rng.randint(0, 25):02d}:{rng.randint(0, 61):02d}:{rng.randint(0, 61):02d}Z" for _ in range(20000)]
    for text in texts:
        outcomes: list[object] = []
        for read in (lambda t: parse_iso(t).timestamp(), iso_seconds):
            try:
                outcomes.append(read(text))
            except ValueError as exc:
                outcomes.append(f"ValueError: {exc}")
        assert outcomes[0] == outcomes[1], text


def _make(lib: Any, head: str, body: str) -> Any:
    """Class `C` of a module whose `head` then `body` run with `lib`'s `dataclass` and `field` (the stdlib's or
    ours), the module in sys.modules while it runs: where a string annotation is looked up."""
    import sys
    import types

    name = f"_made_by_{lib.__name__.rpartition('.')[2]}"
    module = types.ModuleType(name)
    module.__dict__.update(dataclass=lib.dataclass, field=lib.field)
    sys.modules[name] = module
    try:
        exec(compile(f"{head}\n{body}", f"<{name}>", "exec"), module.__dict__)  # noqa: S102 (the test's text)
    finally:
        del sys.modules[name]
    return module.C


def _made_by_each(head: str, body: str) -> tuple[Any, Any]:
    return _make(dataclasses, head, body), _make(recordtype, head, body)


CLASSVAR_HEADS = [  # how a module may import ClassVar, and how a field then names it: all read as a ClassVar
    ("from __future__ import annotations\nfrom typing import ClassVar", "ClassVar[tuple[str, ...]]"),
    ("from __future__ import annotations\nfrom typing import ClassVar", "ClassVar"),
    ("from __future__ import annotations\nimport typing", "typing.ClassVar[int]"),
    ("from __future__ import annotations\nimport typing as t", " t . ClassVar[int]"),
    ("from __future__ import annotations\nfrom typing import ClassVar as CV", "CV[list[str]]"),
    ("from typing import ClassVar", "ClassVar[int]"),  # annotations evaluated: the object, not text
    ("import typing", "typing.ClassVar"),
]


@pytest.mark.parametrize(("head", "annotation"), CLASSVAR_HEADS)
def test_a_classvar_is_no_field_as_dataclasses_reads_it(head: str, annotation: str) -> None:
    body = (f"@dataclass\nclass C:\n    a: int\n    kinds: {annotation} = []\n    b: str = 'x'\n"
            f"    shared: {annotation} = field(default=3)\n")
    theirs, ours = _made_by_each(head, body)
    assert [f.name for f in recordtype.fields(ours)] == [f.name for f in dataclasses.fields(theirs)] == ["a", "b"]
    assert ours.kinds == theirs.kinds == [] and ours.shared == theirs.shared == 3  # class attributes, left as such
    assert recordtype.asdict(ours(1)) == dataclasses.asdict(theirs(1)) == {"a": 1, "b": "x"}
    for lib in (dataclasses, recordtype):
        with pytest.raises(TypeError, match="field kinds cannot have a default factory"):
            _make(lib, head, f"@dataclass\nclass C:\n    kinds: {annotation} = field(default_factory=list)\n")


@pytest.mark.parametrize("annotation", ["ClassVar[int]", "typing.ClassVar[int]", "t.ClassVar[int]"])
def test_a_classvar_dataclasses_would_read_as_a_field_is_refused(annotation: str) -> None:
    """Imported only for the type checker, `ClassVar` is unbound when the class is made: `dataclasses` makes a
    field of it, which mypy does not see; ours refuses the class rather than pick one of the two silently."""
    head = ("from __future__ import annotations\nTYPE_CHECKING = False\n"
            "if TYPE_CHECKING:\n    import typing\n    import typing as t\n    from typing import ClassVar\n")
    body = f"@dataclass\nclass C:\n    a: int\n    kinds: {annotation} = 3\n"
    assert [f.name for f in dataclasses.fields(_make(dataclasses, head, body))] == ["a", "kinds"]
    with pytest.raises(TypeError, match="names a ClassVar that dataclasses would read as a field"):
        _make(recordtype, head, body)


def test_names_that_only_look_like_classvar_are_fields_as_in_dataclasses() -> None:
    head = ("from __future__ import annotations\nimport json\nfrom typing import ClassVar\n"
            "class Kinds:\n    ClassVar = int\n")
    body = ("@dataclass\nclass C:\n    a: dict[str, ClassVar[int]]\n    b: Kinds.ClassVar = 0\n"
            "    c: json.ClassVar = 0\n    d: int | None = None\n")
    theirs, ours = _made_by_each(head, body)
    assert [f.name for f in recordtype.fields(ours)] == [f.name for f in dataclasses.fields(theirs)] == [
        "a", "b", "c", "d"]


@pytest.mark.parametrize("default", ["[]", "{}", "set()", "field(default=[1])", "Open(1)"])
def test_a_mutable_default_is_refused_as_dataclasses_refuses_it(default: str) -> None:
    """A default is one object every record shares: one that cannot hash (a list, a dict, an unfrozen record)
    is refused, as `dataclasses` refuses it; `default_factory` makes a fresh one."""
    head = "from __future__ import annotations\n@dataclass\nclass Open:\n    x: int\n"
    for lib in (dataclasses, recordtype):
        with pytest.raises(ValueError, match="mutable default .* for field tags is not allowed: use default_factory"):
            _make(lib, head, f"@dataclass\nclass C:\n    tags: list[int] = {default}\n")
    frozen = "from __future__ import annotations\n@dataclass(frozen=True)\nclass Point:\n    x: int\n"
    theirs, ours = _made_by_each(frozen, "@dataclass\nclass C:\n    at: Point = Point(1)\n    kinds: tuple = (1,)\n")
    assert recordtype.asdict(ours()) == dataclasses.asdict(theirs()) == {"at": {"x": 1}, "kinds": (1,)}


# The contract: every record class of the package against the dataclass made from its own annotations and defaults.

_MADE_HERE = {"__init__", "__record_fields__", "__record_frozen__", "__record_values__", "__dict__", "__weakref__"}
_MADE_ONLY_IF = {"__repr__": recordtype._repr, "__eq__": recordtype._eq, "__hash__": recordtype._hash,
                 "__setattr__": recordtype._refuse_set, "__delattr__": recordtype._refuse_delete}


@functools.cache
def _package_record_classes() -> dict[str, Any]:
    """Every record class ours made in the package, by qualified name: each module imported, then every class
    alive that carries the marker (`__record_fields__` set by `recordtype` on the class itself)."""
    import importlib

    from assay import layers

    for module in layers.modules():
        if module != "__main__":  # runs the command line
            importlib.import_module("assay" + ("." + module if module else ""))
    found: dict[str, Any] = {}
    pending: list[type] = [object]
    while pending:
        cls = pending.pop()
        pending.extend(type.__subclasses__(cls) if cls is not type else [])
        if "__record_fields__" in vars(cls) and cls.__module__.startswith("assay"):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def _decorated_in_source() -> set[str]:
    """The qualified name of each class the package's source decorates with recordtype's `dataclass`."""
    import ast

    from assay import layers

    named: set[str] = set()

    def visit(node: ast.AST, prefix: str, ours: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                heads = [d.func if isinstance(d, ast.Call) else d for d in child.decorator_list]
                if any(isinstance(h, ast.Name) and h.id in ours for h in heads) or any(
                        isinstance(h, ast.Attribute) and h.attr == "dataclass" and isinstance(h.value, ast.Name)
                        and h.value.id == "recordtype" for h in heads):
                    named.add(f"{prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.", ours)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}{child.name}.<locals>.", ours)
            else:
                visit(child, prefix, ours)

    for module, path in layers.modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ours = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "assay.core.records.recordtype" for a in node.names if a.name == "dataclass"}
        visit(tree, f"assay{'.' + module if module else ''}.", ours)
    return named


def _twin(cls: Any) -> Any:
    """The dataclass `dataclasses` makes of `cls`'s body: its annotations (ClassVars too), defaults, methods."""
    body = {k: v for k, v in vars(cls).items() if k not in _MADE_HERE and _MADE_ONLY_IF.get(k, _MADE_HERE) is not v}
    if body.get("__hash__", 0) is None and not cls.__record_frozen__:
        del body["__hash__"]  # ours set it so (unfrozen): not the body's
    body["__annotations__"] = dict(cls.__annotations__)
    body["__qualname__"] = cls.__qualname__
    for f in recordtype.fields(cls):
        if f.default_factory is not recordtype.MISSING:
            body[f.name] = dataclasses.field(default_factory=f.default_factory)
    return dataclasses.dataclass(frozen=cls.__record_frozen__)(type(cls.__name__, cls.__bases__, body))


def _values(names: list[str], kind: int) -> list[Any]:
    """A value for each field: strings, numbers and tuples (hashable), or a nested dict last (unhashable)."""
    pool = [lambda i: f"v{kind}-{i}", lambda i: kind * 100 + i, lambda i: (kind, f"t{i}", None)]
    values = [pool[i % 3](i) for i in range(len(names))]
    if kind == 3 and values:
        values[-1] = {"k": [1, {"nested": (2, 3)}], "n": None}
    return values


def test_every_record_class_of_the_package_is_found_by_its_marker() -> None:
    """The contract below covers them all: each class the source decorates is found once the modules load
    (one made inside a function would not be: make it at module level)."""
    found = _package_record_classes()
    assert len(found) > 60
    assert _decorated_in_source() <= set(found), sorted(_decorated_in_source() - set(found))


@pytest.mark.parametrize("name", sorted(_package_record_classes()))
def test_each_record_class_answers_as_the_dataclass_of_its_body(name: str) -> None:
    ours = _package_record_classes()[name]
    theirs = _twin(ours)
    mine, stdlib = recordtype.fields(ours), dataclasses.fields(theirs)
    assert [f.name for f in mine] == [f.name for f in stdlib]  # same fields (no ClassVar), same order
    for mine_f, stdlib_f in zip(mine, stdlib, strict=True):
        assert (mine_f.default, mine_f.default_factory) == (
            recordtype.MISSING if stdlib_f.default is dataclasses.MISSING else stdlib_f.default,
            recordtype.MISSING if stdlib_f.default_factory is dataclasses.MISSING else stdlib_f.default_factory,
        ), mine_f.name
    names = [f.name for f in mine]
    required = [f.name for f in mine if f.default is recordtype.MISSING and f.default_factory is recordtype.MISSING]
    bare = dict(zip(required, _values(required, 1), strict=True))
    lone, twin = ours(**bare), theirs(**bare)  # defaults and factories filled in
    assert recordtype.asdict(lone) == dataclasses.asdict(twin) and repr(lone) == repr(twin)
    for f in mine:
        if f.default_factory is not recordtype.MISSING:
            fresh = getattr(ours(**bare), f.name) is not getattr(lone, f.name)
            assert fresh == (getattr(theirs(**bare), f.name) is not getattr(twin, f.name)), f.name
    a, b, unhashable = (_values(names, kind) for kind in (1, 2, 3))
    for args in (a, b, unhashable):
        mine_one, theirs_one = ours(*args), theirs(*args)  # positionally: the order is the constructor's
        assert recordtype.asdict(mine_one) == dataclasses.asdict(theirs_one)
        assert repr(mine_one) == repr(theirs_one)  # the module's docstring promises dataclasses' __repr__
        assert (mine_one == ours(*args)) and (theirs_one == theirs(*args))
        assert mine_one != theirs_one and theirs_one != mine_one  # another class: NotImplemented both ways
        for kept in (mine_one, theirs_one):
            try:
                hashed: object = hash(kept)
            except TypeError:
                hashed = TypeError
            if kept is mine_one:
                first = hashed
        assert first == hashed  # equal hashes when frozen and hashable; TypeError for both otherwise
        if names:
            assert recordtype.asdict(recordtype.replace(mine_one, **{names[0]: "changed"})) == dataclasses.asdict(
                dataclasses.replace(theirs_one, **{names[0]: "changed"}))
            for made in (mine_one, theirs_one):
                if ours.__record_frozen__:
                    with pytest.raises(AttributeError):
                        setattr(made, names[0], "set")
                else:
                    setattr(made, names[0], "set")
            assert recordtype.asdict(mine_one) == dataclasses.asdict(theirs_one)
    if names:
        assert (ours(*a) == ours(*b)) == (theirs(*a) == theirs(*b)) == (a == b)
    assert (ours.__hash__ is None) == (theirs.__hash__ is None)
