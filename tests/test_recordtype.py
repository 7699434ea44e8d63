"""Record classes (`assay/core/recordtype.py`) behave as `dataclasses` makes them, for what Assay uses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
import typing
from typing import Any

import pytest

from assay.core import recordtype


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
