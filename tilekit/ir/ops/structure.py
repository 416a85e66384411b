"""Ops that make tiles or change their shape: constants, ranges, program
coordinates, broadcast/reshape/permute, reductions, scans and dot.

Shapes are static: every result shape is computed here from the operand
shapes and attributes, which is what lets later stages plan layouts.
"""

from __future__ import annotations

import enum
import math

import numpy as np

from tilekit.ir import numerics
from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import OpTypeError, Signature, define
from tilekit.ir.ops.common import check_axis, tile
from tilekit.ir.types import TileType


def _shape_attr(sig: Signature, name: str = "shape") -> tuple[int, ...]:
    shape = sig.attr(name)
    if not (isinstance(shape, tuple) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise OpTypeError(f"{name} must be a tuple of non-negative ints, got {shape!r}")
    return shape


# --- values that do not depend on operands -------------------------------------------------

def _infer_constant(sig: Signature) -> list[TileType]:
    dtype = sig.attr("dtype")
    value = sig.attr("value")
    if not isinstance(value, (bool, int, float)):
        raise OpTypeError(f"constant value must be a Python scalar, got {value!r}")
    return [TileType(_shape_attr(sig), dtype)]


def _constant_ref(ctx: object, op, args: list) -> list[np.ndarray]:
    dtype: DType = op.attrs["dtype"]
    value = np.asarray(op.attrs["value"])
    return [np.full(op.attrs["shape"], numerics.cast(value, dtype), dtype=dtype.np)]


def _print_constant(p, op, indent: str) -> str:
    return f"constant {op.attrs['value']!r} : {op.result.type}"


define("constant", [], _infer_constant, _constant_ref, printer=_print_constant,
       doc="a tile filled with one value")


def _infer_arange(sig: Signature) -> list[TileType]:
    start, end = sig.attr("start"), sig.attr("end")
    if not (isinstance(start, int) and isinstance(end, int) and end > start):
        raise OpTypeError(f"arange needs integer bounds with end > start, got {start}, {end}")
    dtype = sig.attrs.get("dtype", DType.INT32)
    if dtype not in (DType.INT32, DType.INT64):
        raise OpTypeError(f"arange makes int32 or int64, not {dtype}")
    return [TileType((end - start,), dtype)]


define(
    "arange", [], _infer_arange,
    lambda ctx, op, args: [np.arange(op.attrs["start"], op.attrs["end"],
                                     dtype=op.result.type.dtype.np)],
    doc="the integers start .. end-1 (any length, not only powers of two); int32 unless "
        "`dtype` says int64 (an offset into a tensor indexed in 64 bits)",
)


def _infer_axis_scalar(sig: Signature) -> list[TileType]:
    axis = sig.attr("axis")
    if axis not in (0, 1, 2):
        raise OpTypeError(f"grid axis must be 0, 1 or 2, got {axis!r}")
    return [TileType((), DType.INT32)]


define(
    "program_id", [], _infer_axis_scalar,
    lambda ctx, op, args: [np.asarray(ctx.program_id[op.attrs["axis"]], dtype=np.int32)],
    doc="this program instance's coordinate along a grid axis",
)
define(
    "num_programs", [], _infer_axis_scalar,
    lambda ctx, op, args: [np.asarray(ctx.grid[op.attrs["axis"]], dtype=np.int32)],
    doc="the grid's extent along an axis",
)


# --- shape changes ---------------------------------------------------------------------------

def _infer_broadcast(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    shape = _shape_attr(sig)
    padded = (1,) * (len(shape) - x.rank) + x.shape
    if x.rank > len(shape) or any(s != d and s != 1 for s, d in zip(padded, shape)):
        raise OpTypeError(f"cannot broadcast shape {x.shape} to {shape}")
    return [TileType(shape, x.dtype)]


define(
    "broadcast", ["x"], _infer_broadcast,
    lambda ctx, op, args: [np.broadcast_to(args[0], op.attrs["shape"])],
    doc="stretch size-1 dims (and add leading ones, as numpy) to a larger shape; "
        "a scalar becomes a splat",
)


def _infer_expand_dims(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    axis = check_axis(sig.attr("axis"), x.rank + 1)
    return [TileType(x.shape[:axis] + (1,) + x.shape[axis:], x.dtype)]


define(
    "expand_dims", ["x"], _infer_expand_dims,
    lambda ctx, op, args: [np.expand_dims(args[0], op.attrs["axis"])],
    doc="insert a size-1 dim",
)


def _infer_reshape(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    shape = _shape_attr(sig)
    if math.prod(shape) != x.numel:
        raise OpTypeError(f"cannot reshape {x.shape} ({x.numel} elements) to {shape}")
    return [TileType(shape, x.dtype)]


define(
    "reshape", ["x"], _infer_reshape,
    lambda ctx, op, args: [np.reshape(args[0], op.attrs["shape"])],
    doc="same elements in row-major order, new shape",
)


def _infer_permute(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    order = sig.attr("order")
    if not isinstance(order, tuple) or sorted(order) != list(range(x.rank)):
        raise OpTypeError(f"permute order {order!r} is not a permutation of {x.rank} dims")
    return [TileType(tuple(x.shape[i] for i in order), x.dtype)]


define(
    "permute", ["x"], _infer_permute,
    lambda ctx, op, args: [np.transpose(args[0], op.attrs["order"])],
    doc="reorder dims: result dim i is operand dim order[i]",
)


def _infer_convert_layout(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    if sig.attr("layout") is None:
        raise OpTypeError("convert_layout needs a target layout")
    return [TileType(x.shape, x.dtype)]


def _print_convert_layout(p, op, indent: str) -> str:
    how = op.attrs.get("how")
    cost = op.attrs.get("cost")
    extra = f" {{plan = {how}" + (f", cost = {cost}" if cost is not None else "") + "}" \
        if how is not None else ""
    return f"convert_layout {p.name(op.operand('x'))}{extra} : {op.result.type}"


define(
    "convert_layout", ["x"], _infer_convert_layout,
    lambda ctx, op, args: [args[0]], printer=_print_convert_layout,
    doc="the same tile in another layout (inserted by layout assignment; `plan` says how "
        "the elements move: registers, warp shuffles or shared memory)",
)


# --- reductions and scans --------------------------------------------------------------------

class ReduceKind(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"
    XOR = "xor"

    def __str__(self) -> str:
        return self.value


_REDUCERS = {
    ReduceKind.SUM: np.add, ReduceKind.PROD: np.multiply, ReduceKind.MAX: np.maximum,
    ReduceKind.MIN: np.minimum, ReduceKind.AND: np.bitwise_and, ReduceKind.OR: np.bitwise_or,
    ReduceKind.XOR: np.bitwise_xor,
}


def _infer_reduce(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    axis = check_axis(sig.attr("axis"), x.rank)
    kind = sig.attr("kind")
    if not isinstance(kind, ReduceKind):
        raise OpTypeError(f"unknown reduction {kind!r}")
    if kind in (ReduceKind.AND, ReduceKind.OR, ReduceKind.XOR) and x.dtype.is_float:
        raise OpTypeError(f"{kind} reduction needs integer or bool operands")
    if kind in (ReduceKind.SUM, ReduceKind.PROD) and x.dtype.is_bool:
        raise OpTypeError(f"{kind} reduction of bool; cast to an integer type first")
    return [TileType(x.shape[:axis] + x.shape[axis + 1:], x.dtype)]


def _reduce_ref(ctx: object, op, args: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = args
    dtype = DType.from_numpy(x.dtype)
    ufunc = _REDUCERS[op.attrs["kind"]]
    with np.errstate(all="ignore"):
        if dtype.is_float:
            acc = x.astype(dtype.compute_np)
            return [numerics.cast(ufunc.reduce(acc, axis=op.attrs["axis"]), dtype)]
        return [np.asarray(ufunc.reduce(x, axis=op.attrs["axis"], dtype=x.dtype))]


define("reduce", ["x"], _infer_reduce, _reduce_ref,
       doc="combine along an axis (16-bit floats accumulate in float32)")


class ArgKind(enum.Enum):
    ARGMAX = "argmax"
    ARGMIN = "argmin"

    def __str__(self) -> str:
        return self.value


def _infer_argreduce(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    axis = check_axis(sig.attr("axis"), x.rank)
    if not isinstance(sig.attr("kind"), ArgKind):
        raise OpTypeError(f"unknown arg-reduction {sig.attr('kind')!r}")
    return [TileType(x.shape[:axis] + x.shape[axis + 1:], DType.INT32)]


def _argreduce_ref(ctx: object, op, args: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = args
    fn = np.argmax if op.attrs["kind"] is ArgKind.ARGMAX else np.argmin
    data = x.astype(np.float32) if x.dtype.kind == "V" or str(x.dtype) == "bfloat16" else x
    return [np.asarray(fn(data, axis=op.attrs["axis"])).astype(np.int32)]


define("argreduce", ["x"], _infer_argreduce, _argreduce_ref,
       doc="index of the largest/smallest element along an axis; ties take the first, NaN wins")


def _infer_scan(sig: Signature) -> list[TileType]:
    x = tile(sig, "x")
    check_axis(sig.attr("axis"), x.rank)
    kind = sig.attr("kind")
    if kind not in (ReduceKind.SUM, ReduceKind.PROD, ReduceKind.MAX, ReduceKind.MIN):
        raise OpTypeError(f"unsupported scan {kind!r}")
    if x.dtype.is_bool:
        raise OpTypeError("scan of bool; cast to an integer type first")
    return [x.with_shape(x.shape)]


def _scan_ref(ctx: object, op, args: list[np.ndarray]) -> list[np.ndarray]:
    (x,) = args
    dtype = DType.from_numpy(x.dtype)
    ufunc = _REDUCERS[op.attrs["kind"]]
    with np.errstate(all="ignore"):
        if dtype.is_float:
            acc = ufunc.accumulate(x.astype(dtype.compute_np), axis=op.attrs["axis"])
            return [numerics.cast(acc, dtype)]
        return [np.asarray(ufunc.accumulate(x, axis=op.attrs["axis"], dtype=x.dtype))]


define("scan", ["x"], _infer_scan, _scan_ref, doc="inclusive prefix combination along an axis")


# --- dot ---------------------------------------------------------------------------------------

def _infer_dot(sig: Signature) -> list[TileType]:
    a, b, acc = tile(sig, "a"), tile(sig, "b"), tile(sig, "acc")
    if a.rank != 2 or b.rank != 2:
        raise OpTypeError(f"dot needs 2-D operands, got {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[0]:
        raise OpTypeError(f"dot inner dims differ: {a.shape} @ {b.shape}")
    if acc.shape != (a.shape[0], b.shape[1]):
        raise OpTypeError(f"dot accumulator shape {acc.shape} != {(a.shape[0], b.shape[1])}")
    if a.dtype is not b.dtype:
        raise OpTypeError(f"dot operands have different types {a.dtype} and {b.dtype}")
    if a.dtype.is_float != acc.dtype.is_float or a.dtype.is_bool:
        raise OpTypeError(f"dot of {a.dtype} cannot accumulate in {acc.dtype}")
    return [acc.with_shape(acc.shape)]


def _dot_ref(ctx: object, op, args: list[np.ndarray]) -> list[np.ndarray]:
    a, b, acc = args
    dtype = DType.from_numpy(acc.dtype)
    if dtype.is_float:
        wide = np.float64 if dtype is DType.FLOAT64 else np.float32
        with np.errstate(all="ignore"):  # inf * 0, inf - inf: NaN, as on the GPU, silently
            out = a.astype(wide) @ b.astype(wide) + acc.astype(wide)
        return [numerics.cast(out, dtype)]
    out = a.astype(np.int64) @ b.astype(np.int64) + acc.astype(np.int64)
    return [out.astype(acc.dtype)]


define("dot", ["a", "b", "acc"], _infer_dot, _dot_ref,
       doc="acc + a @ b (16-bit inputs multiply exactly and accumulate in float32)")
