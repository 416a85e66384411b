"""The functions a kernel body calls: ``tk.program_id``, ``tk.arange``,
``tk.load``, ``tk.exp``, ``tk.sum``... Each checks its arguments, names the
user's line when they are wrong, and emits IR through ``semantics``.
"""

from __future__ import annotations

from typing import Any

from tilekit.errors import TraceError, user_loc
from tilekit.ir.dtypes import DType
from tilekit.ir.ops.memory import AtomicKind
from tilekit.lang import semantics, tracer
from tilekit.lang.semantics import to_tile
from tilekit.lang.tensor import TensorArg
from tilekit.lang.tile import Tile

# --- program coordinates ---------------------------------------------------------------------


def _grid_axis(axis: Any) -> int:
    if isinstance(axis, Tile) or axis not in (0, 1, 2):
        raise TraceError(f"grid axis must be 0, 1 or 2, got {axis!r}", user_loc())
    return int(axis)


def program_id(axis: int = 0) -> Tile:
    """This program instance's coordinate along a grid axis (an int32 scalar)."""
    return Tile(tracer.current().emit("program_id", {}, {"axis": _grid_axis(axis)}).result)


def num_programs(axis: int = 0) -> Tile:
    """The number of program instances along a grid axis (an int32 scalar)."""
    return Tile(tracer.current().emit("num_programs", {}, {"axis": _grid_axis(axis)}).result)


# --- making tiles ----------------------------------------------------------------------------


def _const_int(x: Any, what: str) -> int:
    if isinstance(x, Tile):
        raise TraceError(f"{what} must be known when compiling, but it is a runtime {x.type}",
                         user_loc(), hints=["pass it as a tk.constexpr parameter"])
    if not isinstance(x, int) or isinstance(x, bool):
        raise TraceError(f"{what} must be an int, got {x!r}", user_loc())
    return x


def arange(start: int, end: int | None = None) -> Tile:
    """The int32 tile ``[start, start+1, ..., end-1]``; any length, not only powers of two."""
    if end is None:
        start, end = 0, start
    lo = _const_int(start, "the start of tk.arange")
    hi = _const_int(end, "the end of tk.arange")
    if hi <= lo:
        raise TraceError(f"tk.arange({lo}, {hi}) is empty", user_loc(),
                         hints=["the end must be larger than the start"])
    if hi > 2**31 - 1 or lo < -(2**31):
        raise TraceError(f"tk.arange({lo}, {hi}) does not fit in int32", user_loc())
    return Tile(tracer.current().emit("arange", {}, {"start": lo, "end": hi}).result)


def _dtype(dtype: Any) -> DType:
    if not isinstance(dtype, DType):
        raise TraceError(f"expected a tilekit dtype such as tk.float32, got {dtype!r}", user_loc())
    return dtype


def full(shape: Any, value: Any, dtype: DType) -> Tile:
    """A tile of ``shape`` filled with ``value`` (a Python number or a runtime scalar)."""
    dims = semantics.static_shape(shape)
    dt = _dtype(dtype)
    if isinstance(value, Tile):
        if value.ndim != 0:
            raise TraceError(f"tk.full needs a scalar fill value, got shape {value.shape}",
                             user_loc())
        return semantics.broadcast_to(semantics.cast(value, dt), dims)
    if not semantics.is_scalar_literal(value):
        raise TraceError(f"tk.full fill value must be a number, got {value!r}", user_loc())
    return semantics.constant(value, dims, dt)


def zeros(shape: Any, dtype: DType = DType.FLOAT32) -> Tile:
    return full(shape, 0, dtype)


def ones(shape: Any, dtype: DType = DType.FLOAT32) -> Tile:
    return full(shape, 1, dtype)


def zeros_like(x: Tile) -> Tile:
    return full(x.shape, 0, x.dtype)


def full_like(x: Tile, value: Any) -> Tile:
    return full(x.shape, value, x.dtype)


# --- elementwise -----------------------------------------------------------------------------


def where(cond: Any, a: Any, b: Any) -> Tile:
    """``a`` where ``cond`` holds, else ``b`` (broadcast and promoted like arithmetic)."""
    return semantics.where(cond, a, b)


def fma(a: Any, b: Any, c: Any) -> Tile:
    """``a * b + c`` rounded once (a fused multiply-add), broadcast and promoted like
    arithmetic; integers and bools compute in float32. Where a separate ``a * b + c`` rounds
    the product too, this is one instruction and one rounding (float16 and bfloat16 fuse in
    float32, then round to their type)."""
    return semantics.fma(a, b, c)


def maximum(a: Any, b: Any) -> Tile:
    """Elementwise maximum; a NaN in either operand gives NaN."""
    return semantics.binary("maximum", a, b)


def minimum(a: Any, b: Any) -> Tile:
    """Elementwise minimum; a NaN in either operand gives NaN."""
    return semantics.binary("minimum", a, b)


def _math(op: str) -> Any:
    def fn(x: Any) -> Tile:
        return semantics.unary(op, x)

    fn.__name__ = op
    fn.__doc__ = f"Elementwise {op}; integer inputs compute in float32."
    return fn


exp = _math("exp")
exp2 = _math("exp2")
log = _math("log")
log2 = _math("log2")
sqrt = _math("sqrt")
rsqrt = _math("rsqrt")
erf = _math("erf")
tanh = _math("tanh")
sigmoid = _math("sigmoid")
sin = _math("sin")
cos = _math("cos")
floor = _math("floor")
ceil = _math("ceil")
isnan = _math("isnan")


def abs(x: Any) -> Tile:  # noqa: A001
    return semantics.unary("abs", x)


def cast(x: Any, dtype: DType) -> Tile:
    return semantics.cast(x, _dtype(dtype))


def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division, for Python ints (on the host too) and for tiles."""
    if isinstance(a, Tile) or isinstance(b, Tile):
        return (a + b - 1) // b
    return -(-a // b)


def expand_dims(x: Any, axis: int) -> Tile:
    return semantics.expand_dims(x, axis)


def reshape(x: Tile, shape: Any) -> Tile:
    return semantics.reshape(to_tile(x), shape)


def permute(x: Tile, *order: Any) -> Tile:
    return to_tile(x).permute(*order)


def broadcast_to(x: Any, shape: Any) -> Tile:
    return semantics.broadcast_to(to_tile(x), semantics.static_shape(shape))


# --- reductions --------------------------------------------------------------------------------


def sum(x: Any, axis: int | None = None, keepdims: bool = False,  # noqa: A001
        dtype: DType | None = None) -> Tile:
    """Sum along ``axis`` (all axes when None). 16-bit floats accumulate in float32; small
    integers and bools sum in int32."""
    return semantics.reduce(x, "sum", axis, keepdims, dtype)


def max(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:  # noqa: A001
    return semantics.reduce(x, "max", axis, keepdims)


def min(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:  # noqa: A001
    return semantics.reduce(x, "min", axis, keepdims)


def prod(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:
    return semantics.reduce(x, "prod", axis, keepdims)


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:
    """Index (int32) of the largest element along ``axis``; ties give the first."""
    return semantics.argreduce(x, "argmax", axis, keepdims)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Tile:
    return semantics.argreduce(x, "argmin", axis, keepdims)


def cumsum(x: Any, axis: int = 0) -> Tile:
    """Inclusive prefix sum along ``axis``."""
    return semantics.scan(x, "sum", axis)


def dot(a: Tile, b: Tile, acc: Tile | None = None, out_dtype: DType | None = None) -> Tile:
    """``acc + a @ b`` for 2-D tiles; 16-bit floats multiply exactly and accumulate in
    float32 unless ``acc`` says otherwise."""
    return semantics.dot(a, b, acc, out_dtype)


# --- memory ------------------------------------------------------------------------------------


def _tensor(x: Any, fn: str) -> TensorArg:
    if not isinstance(x, TensorArg):
        got = f"a runtime {x.type} value" if isinstance(x, Tile) else type(x).__name__
        raise TraceError(f"the first argument of {fn} must be a tensor parameter of the kernel, "
                         f"got {got}", user_loc(),
                         hints=["pass an array for that parameter (annotate it tk.Tensor); "
                                "Python numbers become runtime scalars"])
    return x


def _access(x: TensorArg, offsets: Any, mask: Any, fn: str) -> tuple[Tile, Tile | None]:
    offs = to_tile(offsets)
    if not offs.dtype.is_int:
        raise TraceError(f"{fn} offsets must be integers, got {offs.dtype}", user_loc(),
                         hints=["offsets count elements, e.g. rows * X.stride(0) + cols"])
    if mask is None:
        return offs, None
    m = to_tile(mask)
    if not m.dtype.is_bool:
        raise TraceError(f"{fn} mask must be bool, got {m.dtype}", user_loc(),
                         hints=["compare explicitly, e.g. `offs < n`"])
    shape = semantics.broadcast_shapes(offs.shape, m.shape, f" in {fn} (offsets vs mask)")
    return semantics.broadcast_to(offs, shape), semantics.broadcast_to(m, shape)


def load(x: Any, offsets: Any, mask: Any = None, other: Any = None) -> Tile:
    """Gather ``x`` at element ``offsets``; where ``mask`` is false read ``other`` (0 when
    not given) and touch no memory."""
    t = _tensor(x, "tk.load")
    offs, m = _access(t, offsets, mask, "tk.load")
    other_v = None
    if other is not None:
        if m is None:
            raise TraceError("tk.load got `other` without a `mask`", user_loc(),
                             hints=["`other` is what masked-off elements read; add mask=..."])
        other_v = semantics.broadcast_to(
            semantics.cast(other, t.dtype, f"`other` takes the type of `{t.name}`"),
            offs.shape).value
    op = tracer.current().emit("load", {"tensor": t.value, "offsets": offs.value,
                                        "mask": m.value if m is not None else None,
                                        "other": other_v})
    return Tile(op.result)


def _value_for(t: TensorArg, value: Any, shape: tuple[int, ...], fn: str) -> Tile:
    v = semantics.cast(value, t.dtype, f"{fn} writes it to `{t.name}`, of that type")
    full_shape = semantics.broadcast_shapes(shape, v.shape, f" in {fn} (offsets vs value)")
    if full_shape != shape:
        raise TraceError(f"{fn} value of shape {v.shape} does not fit offsets of shape {shape}",
                         user_loc())
    return semantics.broadcast_to(v, shape)


def store(x: Any, offsets: Any, value: Any, mask: Any = None) -> None:
    """Scatter ``value`` (cast to ``x``'s type) to element ``offsets`` where ``mask``."""
    t = _tensor(x, "tk.store")
    offs, m = _access(t, offsets, mask, "tk.store")
    v = semantics.cast(value, t.dtype, f"tk.store writes it to `{t.name}`, of that type")
    shape = semantics.broadcast_shapes(offs.shape, v.shape, " in tk.store (offsets vs value)")
    offs = semantics.broadcast_to(offs, shape)
    if m is not None:
        m = semantics.broadcast_to(m, shape)
    v = _value_for(t, v, shape, "tk.store")
    tracer.current().emit("store", {"tensor": t.value, "offsets": offs.value, "value": v.value,
                                    "mask": m.value if m is not None else None})


def _atomic(kind: AtomicKind, x: Any, offsets: Any, value: Any, mask: Any, fn: str) -> Tile:
    t = _tensor(x, fn)
    offs, m = _access(t, offsets, mask, fn)
    v = _value_for(t, value, offs.shape, fn)
    op = tracer.current().emit("atomic", {"tensor": t.value, "offsets": offs.value,
                                          "value": v.value,
                                          "mask": m.value if m is not None else None},
                               {"kind": kind})
    return Tile(op.result)


def atomic_add(x: Any, offsets: Any, value: Any, mask: Any = None) -> Tile:
    """Atomically add ``value`` to ``x`` at ``offsets``; returns the values before."""
    return _atomic(AtomicKind.ADD, x, offsets, value, mask, "tk.atomic_add")


def atomic_max(x: Any, offsets: Any, value: Any, mask: Any = None) -> Tile:
    return _atomic(AtomicKind.MAX, x, offsets, value, mask, "tk.atomic_max")


def atomic_min(x: Any, offsets: Any, value: Any, mask: Any = None) -> Tile:
    return _atomic(AtomicKind.MIN, x, offsets, value, mask, "tk.atomic_min")


# --- checks and debugging ----------------------------------------------------------------------


def static_assert(cond: Any, message: str = "") -> None:
    """Fail the trace (at this line) if a compile-time condition is false."""
    if isinstance(cond, Tile):
        raise TraceError("tk.static_assert needs a compile-time condition, got a runtime value",
                         user_loc(), hints=["use tk.device_assert for runtime checks"])
    if not cond:
        raise TraceError(f"static assertion failed{': ' + message if message else ''}",
                         user_loc())


def device_assert(cond: Any, message: str = "") -> None:
    """Fail the launch if any element of ``cond`` is false (checked by the interpreter)."""
    c = to_tile(cond)
    if not c.dtype.is_bool:
        raise TraceError(f"tk.device_assert needs a bool condition, got {c.dtype}", user_loc())
    tracer.current().emit("assert", {"cond": c.value}, {"message": str(message)})


def device_print(prefix: str, *values: Any) -> None:
    """Print values with the program id (the interpreter prints to stdout)."""
    tiles = [to_tile(v) for v in values]
    tracer.current().emit("print", {"values": [t.value for t in tiles]}, {"prefix": str(prefix)})
