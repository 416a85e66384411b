"""Elementwise ops: arithmetic, bit ops, comparisons, math, select, cast.

The IR is strict: both operands of a binary op have the same shape and type.
Broadcasting and promotion are the front end's job (``lang``), done with
explicit ``broadcast`` and ``cast`` ops, so a later stage never has to guess.
Each row of the tables below declares one op.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np

from tilekit.ir import numerics
from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import OpTypeError, Signature, define
from tilekit.ir.ops.common import float_only, same, tile
from tilekit.ir.types import TileType


class Kinds(enum.Flag):
    """Which element kinds an op accepts."""

    BOOL = enum.auto()
    INT = enum.auto()
    FLOAT = enum.auto()
    NUMERIC = INT | FLOAT
    BITS = BOOL | INT
    ANY = BOOL | INT | FLOAT


def _kind(dtype: DType) -> Kinds:
    if dtype.is_bool:
        return Kinds.BOOL
    return Kinds.FLOAT if dtype.is_float else Kinds.INT


def _check_kind(name: str, dtype: DType, kinds: Kinds) -> None:
    if not (_kind(dtype) & kinds):
        raise OpTypeError(f"{name} does not accept {dtype}")


class IntegerDivisionByZero(ArithmeticError):
    """Raised by references; the interpreter reports it at the op's source line."""


def _floordiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise IntegerDivisionByZero("integer division by zero")
    return np.floor_divide(a, b)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise IntegerDivisionByZero("integer modulo by zero")
    return np.mod(a, b)


# name: (numpy function, accepted kinds)
BINARY: dict[str, tuple[Callable[..., np.ndarray], Kinds]] = {
    "add": (np.add, Kinds.NUMERIC),
    "sub": (np.subtract, Kinds.NUMERIC),
    "mul": (np.multiply, Kinds.NUMERIC),
    "div": (np.true_divide, Kinds.FLOAT),
    "floordiv": (_floordiv, Kinds.NUMERIC),
    "mod": (_mod, Kinds.NUMERIC),
    "maximum": (np.maximum, Kinds.NUMERIC),
    "minimum": (np.minimum, Kinds.NUMERIC),
    "pow": (np.power, Kinds.FLOAT),
    "atan2": (np.arctan2, Kinds.FLOAT),
    "and": (np.bitwise_and, Kinds.BITS),
    "or": (np.bitwise_or, Kinds.BITS),
    "xor": (np.bitwise_xor, Kinds.BITS),
    "shl": (np.left_shift, Kinds.INT),
    "shr": (np.right_shift, Kinds.INT),
}

COMPARE: dict[str, Callable[..., np.ndarray]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _erf(x: np.ndarray) -> np.ndarray:
    return numerics.erf(x).astype(x.dtype)


UNARY: dict[str, tuple[Callable[..., np.ndarray], Kinds]] = {
    "neg": (np.negative, Kinds.NUMERIC),
    "abs": (np.abs, Kinds.NUMERIC),
    "not": (np.invert, Kinds.BITS),
    "exp": (np.exp, Kinds.FLOAT),
    "exp2": (np.exp2, Kinds.FLOAT),
    "log": (np.log, Kinds.FLOAT),
    "log2": (np.log2, Kinds.FLOAT),
    "sqrt": (np.sqrt, Kinds.FLOAT),
    "rsqrt": (_rsqrt, Kinds.FLOAT),
    "erf": (_erf, Kinds.FLOAT),
    "tanh": (np.tanh, Kinds.FLOAT),
    "sigmoid": (_sigmoid, Kinds.FLOAT),
    "sin": (np.sin, Kinds.FLOAT),
    "cos": (np.cos, Kinds.FLOAT),
    "floor": (np.floor, Kinds.FLOAT),
    "ceil": (np.ceil, Kinds.FLOAT),
    "isnan": (np.isnan, Kinds.FLOAT),
}
PREDICATES = {"isnan"}


def _binary(name: str, fn: Callable[..., np.ndarray], kinds: Kinds) -> None:
    def infer(sig: Signature) -> list[TileType]:
        a, b = tile(sig, "lhs"), tile(sig, "rhs")
        same(a, b, name)
        _check_kind(name, a.dtype, kinds)
        return [a.with_shape(a.shape)]

    def reference(ctx: object, op: object, args: list[np.ndarray]) -> list[np.ndarray]:
        a, b = args
        dtype = DType.from_numpy(a.dtype)
        if name == "shl":
            return [numerics.shift_left(a, b, dtype)]
        if name == "shr":
            return [numerics.shift_right(a, b, dtype)]
        if dtype.is_float:
            return [numerics.in_compute(dtype, fn, a, b)]
        with np.errstate(all="ignore"):
            return [np.asarray(fn(a, b)).astype(a.dtype)]

    define(name, ["lhs", "rhs"], infer, reference, doc=f"elementwise {name}")


def _compare(name: str, fn: Callable[..., np.ndarray]) -> None:
    def infer(sig: Signature) -> list[TileType]:
        a, b = tile(sig, "lhs"), tile(sig, "rhs")
        same(a, b, name)
        return [TileType(a.shape, DType.BOOL)]

    def reference(ctx: object, op: object, args: list[np.ndarray]) -> list[np.ndarray]:
        a, b = args
        with np.errstate(invalid="ignore"):  # NaN operands (bfloat16 warns) compare False
            return [np.asarray(fn(a, b))]

    define(name, ["lhs", "rhs"], infer, reference, doc=f"elementwise comparison {name}")


def _unary(name: str, fn: Callable[..., np.ndarray], kinds: Kinds) -> None:
    def infer(sig: Signature) -> list[TileType]:
        a = tile(sig, "x")
        _check_kind(name, a.dtype, kinds)
        if kinds == Kinds.FLOAT:
            float_only(a.dtype, name)
        return [TileType(a.shape, DType.BOOL) if name in PREDICATES else a.with_shape(a.shape)]

    def reference(ctx: object, op: object, args: list[np.ndarray]) -> list[np.ndarray]:
        (a,) = args
        dtype = DType.from_numpy(a.dtype)
        if name in PREDICATES:
            return [np.asarray(fn(a.astype(dtype.compute_np)))]
        if dtype.is_float:
            return [numerics.in_compute(dtype, fn, a)]
        if name == "not" and dtype.is_bool:
            return [np.logical_not(a)]
        with np.errstate(all="ignore"):
            return [np.asarray(fn(a)).astype(a.dtype)]

    define(name, ["x"], infer, reference, doc=f"elementwise {name}")


for _name, (_fn, _kinds) in BINARY.items():
    _binary(_name, _fn, _kinds)
for _name, _cmp in COMPARE.items():
    _compare(_name, _cmp)
for _name, (_fn, _kinds) in UNARY.items():
    _unary(_name, _fn, _kinds)


def _infer_select(sig: Signature) -> list[TileType]:
    cond, a, b = tile(sig, "cond"), tile(sig, "a"), tile(sig, "b")
    if not cond.dtype.is_bool:
        raise OpTypeError(f"select condition must be bool, got {cond.dtype}")
    same(a, b, "select")
    if cond.shape != a.shape:
        raise OpTypeError(f"select condition shape {cond.shape} differs from {a.shape}")
    return [a.with_shape(a.shape)]


define(
    "select", ["cond", "a", "b"], _infer_select,
    lambda ctx, op, args: [np.where(args[0], args[1], args[2]).astype(args[1].dtype)],
    doc="per-element choice: a where cond, else b",
)


def _infer_fma(sig: Signature) -> list[TileType]:
    a, b, c = tile(sig, "a"), tile(sig, "b"), tile(sig, "c")
    same(a, b, "fma")
    same(a, c, "fma")
    float_only(a.dtype, "fma")
    return [a.with_shape(a.shape)]


define(
    "fma", ["a", "b", "c"], _infer_fma,
    lambda ctx, op, args: [numerics.in_compute(DType.from_numpy(args[0].dtype), numerics.fma,
                                               *args)],
    doc="fused multiply-add: a * b + c rounded once (16-bit floats: in float32, then "
        "rounded to the type)",
)


def _infer_cast(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    dtype = sig.attr("dtype")
    if not isinstance(dtype, DType):
        raise OpTypeError(f"cast target must be a DType, got {dtype!r}")
    return [TileType(x.shape, dtype)]


define(
    "cast", ["x"], _infer_cast,
    lambda ctx, op, args: [numerics.cast(args[0], op.attrs["dtype"])],
    doc="convert element type (see numerics.py for rounding and saturation)",
)


def _infer_bitcast(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    dtype = sig.attr("dtype")
    if (not isinstance(dtype, DType) or dtype.bits != x.dtype.bits or dtype.is_bool
            or x.dtype.is_bool):
        raise OpTypeError(f"bitcast needs a non-bool type of the same width as {x.dtype}, "
                          f"got {dtype}")
    return [TileType(x.shape, dtype)]


define(
    "bitcast", ["x"], _infer_bitcast,
    # np.array, not np.ascontiguousarray: the latter makes 0-d arrays 1-d
    lambda ctx, op, args: [np.array(args[0], order="C").view(op.attrs["dtype"].np)],
    doc="reinterpret the bits as another type of the same width",
)


#: The ops that compute each element from the same element of their operands, with numpy
#: references that do the same on arrays of any shape: layout propagation gives their
#: results their operands' layout, and the pipeline protocol check evaluates them on all
#: of a loop's iterations at once. (``bitcast`` is per element too; the protocol check,
#: whose loops carry index arithmetic only, leaves it out.)
PER_ELEMENT = frozenset({*BINARY, *COMPARE, *UNARY, "select", "fma", "cast"})
