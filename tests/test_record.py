"""tilekit.record: the runtime's records behave as the namedtuples they replace."""

from __future__ import annotations

import copy
import pickle
from collections import namedtuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilekit.codegen.artifact import AssertSite, CompiledKernel, ParamSlot, SlotKind
from tilekit.errors import SourceLoc
from tilekit.lang.kernel import ConstSpec, ScalarSpec, Specialization, TensorSpec
from tilekit.record import Record


class Point(Record):
    __slots__ = ()
    x: int
    y: int = 0
    label: str = "p"

    @property
    def norm1(self) -> int:
        return abs(self.x) + abs(self.y)


PointTuple = namedtuple("PointTuple", "x y label", defaults=(0, "p"))

values = st.one_of(st.integers(), st.text(max_size=4), st.none(), st.tuples(st.integers()))


@given(x=values, y=values, label=values)
def test_a_record_is_the_namedtuple_it_replaces(x: object, y: object, label: object) -> None:
    p, t = Point(x, y, label), PointTuple(x, y, label)
    assert p == t and tuple(p) == tuple(t) and hash(p) == hash(t)
    assert (p.x, p.y, p.label) == (x, y, label) == tuple(p)
    assert p._asdict() == t._asdict()
    assert p._replace(y=label) == t._replace(y=label)
    assert type(p._replace(y=1)) is Point
    assert Point._make([x, y, label]) == p
    assert repr(p) == repr(t).replace("PointTuple", "Point")
    for q in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert q == p and type(q) is Point


def test_fields_defaults_and_keywords() -> None:
    assert Point._fields == ("x", "y", "label") == Point.__match_args__
    assert Point._field_defaults == {"y": 0, "label": "p"}
    assert Point(1) == (1, 0, "p")
    assert Point(1, label="q") == (1, 0, "q")
    assert Point(label="q", x=2, y=3) == (2, 3, "q")
    assert Point(3, -4).norm1 == 7
    a, b, c = Point(5)
    assert (a, b, c) == (5, 0, "p")
    match Point(1, 2):
        case Point(x, y):
            assert (x, y) == (1, 2)
    assert not hasattr(Point(1), "__dict__")


def test_bad_calls_say_what_is_wrong() -> None:
    with pytest.raises(TypeError, match="missing the argument 'x'"):
        Point()
    with pytest.raises(TypeError, match="takes 3 arguments"):
        Point(1, 2, 3, 4)
    with pytest.raises(TypeError, match="unexpected or repeated arguments: x"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="unexpected or repeated arguments: z"):
        Point(1, z=2)
    with pytest.raises(TypeError, match="has no fields z"):
        Point(1)._replace(z=3)
    with pytest.raises(TypeError, match="expects 3 items, got 2"):
        Point._make([1, 2])


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(TypeError, match="must set `__slots__ = \\(\\)`"):
        class NoSlots(Record):
            x: int
    with pytest.raises(TypeError, match="'y' has no default but follows"):
        class Order(Record):
            __slots__ = ()
            x: int = 0
            y: int
    with pytest.raises(TypeError, match="adds fields to Point"):
        class More(Point):
            __slots__ = ()
            z: int


def test_a_subclass_with_methods_only_keeps_its_fields() -> None:
    class Named(Point):
        __slots__ = ()

        def name(self) -> str:
            return f"{self.label}{self.x}"

    assert Named._fields == Point._fields and Named(7).name() == "p7"


def test_the_runtime_records_keep_their_fields_and_defaults() -> None:
    """The records the launch path makes (converted from namedtuples): the same fields in
    the same order, with the same defaults."""
    assert SourceLoc("f.py", 3) == ("f.py", 3, None, None, None)
    assert ParamSlot(SlotKind.POINTER, "X", "uint64") == \
        (SlotKind.POINTER, "X", "uint64", -1, (), "NONE")
    assert AssertSite("m", "f.py", 1).col is None
    kernel = CompiledKernel("k", "sm_90a", "ptx", b"", 4, 32, 0, ())
    assert kernel._fields[-7:] == ("asserts", "written_args", "prints", "llvm_ir", "repacked",
                                   "checked", "access_sites")
    assert kernel[8:] == ((), (), False, "", (), False, ())
    assert TensorSpec._fields == ("dtype", "rank", "index", "aligned16", "unit_inner",
                                  "strides16")
    spec = Specialization((("N", ConstSpec(5)), ("a", ScalarSpec(None))))
    assert spec.constexprs == {"N": 5}
    assert pickle.loads(pickle.dumps(kernel)) == kernel


# --- Frozen: the IR's values (types, op definitions), which must not be tuples -----------

import dataclasses  # noqa: E402

from tilekit.ir.dtypes import DType  # noqa: E402
from tilekit.ir.types import BarrierType, SharedType, TensorType, TileType, TokenType  # noqa: E402
from tilekit.record import Frozen  # noqa: E402


class Pair(Frozen):
    __slots__ = ("first", "second")
    first: object
    second: object
    _field_defaults = {"second": 0}


@dataclasses.dataclass(frozen=True)
class PairDataclass:
    first: object
    second: object = 0


@given(a=values, b=values)
def test_a_frozen_value_is_the_frozen_dataclass_it_replaces(a: object, b: object) -> None:
    p, d = Pair(a, b), PairDataclass(a, b)
    assert p == Pair(a, b) and hash(p) == hash(Pair(a, b))
    assert (p.first, p.second) == (d.first, d.second)
    assert repr(p) == repr(d).replace("PairDataclass", "Pair")
    assert p.replace(second=a) == Pair(a, a) and p.replace() == p
    for q in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert q == p and type(q) is Pair
    assert not isinstance(p, tuple)  # the IR printer and CSE read tuples as sequences


def test_frozen_equality_is_within_a_class() -> None:
    class Other(Frozen):
        __slots__ = ("first", "second")
        first: object
        second: object

    assert Pair(1, 2) != Other(1, 2) and Pair(1, 2) != (1, 2)
    assert len({Pair(1, 2), Pair(1, 2), Other(1, 2)}) == 2
    assert TokenType() == TokenType() and TokenType() != BarrierType(1, 1)
    assert Pair(1) == Pair(1, 0) == Pair(first=1) == Pair(second=0, first=1)
    match Pair(3, 4):
        case Pair(x, y):
            assert (x, y) == (3, 4)


def test_frozen_values_cannot_change() -> None:
    p = Pair(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'first'"):
        p.first = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.second
    with pytest.raises(AttributeError):
        p.third = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="has no fields third"):
        p.replace(third=1)
    with pytest.raises(TypeError, match="missing the argument 'first'"):
        Pair()


def test_bad_frozen_declarations_are_refused() -> None:
    with pytest.raises(TypeError, match="tuple `__slots__`"):
        class NoSlots(Frozen):
            x: int
    with pytest.raises(TypeError, match="annotate its fields y"):
        class Unannotated(Frozen):
            __slots__ = ("x", "y")
            x: int
    with pytest.raises(TypeError, match="'y' has no default but follows"):
        class Order(Frozen):
            __slots__ = ("x", "y")
            x: int
            y: int
            _field_defaults = {"x": 0}


def test_the_ir_types_keep_their_fields_defaults_and_text() -> None:
    t = TileType((4, 5), DType.FLOAT32)
    assert t.layout is None and t == TileType((4, 5), DType.FLOAT32, None)
    assert t.with_dtype(DType.BFLOAT16) == TileType((4, 5), DType.BFLOAT16)
    assert str(t) == "tile<4x5xf32>" and t.numel == 20 and t.rank == 2
    assert TensorType(2, DType.FLOAT16).index is DType.INT32
    assert SharedType((8, 8), DType.FLOAT16, 3).layout is None
    assert {TileType((1,), DType.INT32): 1}[TileType((1,), DType.INT32)] == 1
    assert TileType((), DType.INT32) != TensorType(0, DType.INT32)
