"""Record classes (`assay/core/recordtype.py`) behave as `dataclasses` makes them, for what Assay uses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
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
