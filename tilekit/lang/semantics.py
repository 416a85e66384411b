"""The front end's typing rules: how Python operands become IR operands.

The IR is strict (same shapes, same types); this module is where user code
gets numpy-like convenience, written down once:

- shapes broadcast as in numpy (trailing dims align; size-1 dims stretch);
- types promote through ``dtypes.promote``; Python numbers are weakly typed
  and take the tile's type (``x * 2`` keeps float16); a literal that does not
  fit that type (an int out of range, a float that would be inf) is an error,
  not a silent wrap or overflow; a comparison with such a number widens the
  tile instead, so that it stays exact (``x_f16 < 1e6``);
- ``/`` on integers gives float32; arithmetic on bool tiles works in int32;
- math functions (``exp``...) on integers compute in float32;
- small integer sums accumulate in int32, as numpy does.

Every function here either returns a new ``Tile`` or raises a
``TraceError`` at the user's line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tilekit.errors import TraceError, user_loc
from tilekit.ir import numerics
from tilekit.ir.dtypes import DType, promote, python_scalar_dtype, weak_promote
from tilekit.ir.ops.structure import ArgKind, ReduceKind
from tilekit.ir.types import TileType
from tilekit.lang import tracer
from tilekit.lang.tile import Tile

Scalar = bool | int | float

_ARITH = {"add", "sub", "mul", "floordiv", "mod", "maximum", "minimum"}
_FLOAT_ONLY = {"div", "pow", "atan2"}
_BITS = {"and", "or", "xor"}
_SHIFTS = {"shl", "shr"}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
           "pow": "**", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>",
           "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _emit1(op: str, operands: dict, attrs: dict | None = None) -> Tile:
    return Tile(tracer.current().emit(op, operands, attrs).result)


def is_scalar_literal(x: Any) -> bool:
    return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def literal_fits(value: Scalar, dtype: DType) -> bool:
    """Whether a Python number keeps its meaning as a constant of ``dtype``: integers and
    bools must be exact; floats may round, but a finite number must stay finite (1e6 is
    inf in float16). inf and nan fit every float type."""
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, bool):
        return True
    if dtype.is_bool:
        return value in (0, 1)
    if dtype.is_float:
        try:
            as_float = float(value)
        except OverflowError:  # an int past float64's range
            return False
        if not math.isfinite(as_float):
            return isinstance(value, float)
        if abs(as_float) <= dtype.max_finite:
            return True
        # just past the largest finite value: it may still round down to it
        return bool(np.isfinite(numerics.cast(np.asarray(as_float), dtype)))
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    info = np.iinfo(dtype.np)
    return info.min <= value <= info.max


def _check_fits(value: Scalar, dtype: DType, used_as: str | None = None) -> None:
    """A literal must keep its meaning in its type (``literal_fits``), else a TraceError
    at the user's line that says what to write. ``used_as`` says where the type comes
    from when it is not a tile operand's ("`other` takes the type of `X`")."""
    if literal_fits(value, dtype):
        return
    value = value.item() if isinstance(value, np.generic) else value
    why = f" ({used_as})" if used_as else ""
    if dtype.is_bool:
        raise TraceError(f"the constant {value} is not a bool{why}", user_loc(),
                         hints=["use True/False, or compare explicitly (x != 0)"])
    if dtype.is_float:
        wider = "tk.float32" if dtype.bits < 32 else "tk.float64"
        fix = (f"use a value in [-{dtype.max_finite:g}, {dtype.max_finite:g}]" if used_as else
               f"convert the tile to a wider type first, e.g. x.to({wider})")
        raise TraceError(f"the constant {value} does not fit in {dtype}: it would be inf "
                         f"(the largest finite {dtype} is {dtype.max_finite:g}){why}",
                         user_loc(), hints=[fix, "write float('inf') if infinity is meant"])
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise TraceError(f"the constant {value} is not an integer, so it cannot be a "
                         f"{dtype}{why}", user_loc(),
                         hints=["write the integer you mean" if used_as else
                                "cast the tile to a float type first, or write an integer "
                                "constant"])
    info = np.iinfo(dtype.np)
    span = f"[{info.min}, {info.max}]"
    raise TraceError(f"the constant {value} does not fit in {dtype}{why}", user_loc(),
                     hints=[f"use a constant in {span}" if used_as else
                            f"cast the tile first, e.g. x.to(tk.int64), or use a constant "
                            f"in {span}"])


def constant(value: Scalar, shape: tuple[int, ...], dtype: DType,
             used_as: str | None = None) -> Tile:
    _check_fits(value, dtype, used_as)
    if isinstance(value, (np.generic,)):
        value = value.item()
    return _emit1("constant", {}, {"value": value, "shape": tuple(shape), "dtype": dtype})


def to_tile(x: Any, like: DType | None = None) -> Tile:
    """A Tile for ``x``: tiles pass through; Python numbers become constants, typed
    after ``like`` (weakly) when given."""
    if isinstance(x, Tile):
        return x
    if is_scalar_literal(x):
        v = x.item() if isinstance(x, np.generic) else x
        dtype = weak_promote(like, v) if like is not None else python_scalar_dtype(v)
        return constant(v, (), dtype)
    from tilekit.lang.tensor import TensorArg

    if isinstance(x, TensorArg):
        raise TraceError(f"tensor `{x.name}` used as a value", user_loc(),
                         hints=["read it with tk.load(X, offsets) or X.tile(shape, index).load()"])
    raise TraceError(f"cannot use a {type(x).__name__} as a tile value", user_loc(),
                     hints=["tile operands are tiles, runtime scalars or Python numbers"])


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], what: str = "") -> tuple[int, ...]:
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + a
    pb = (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise TraceError(f"shapes {a} and {b} cannot be broadcast together{what}", user_loc(),
                             hints=["size-1 dims stretch; add one with x[:, None] or "
                                    "tk.expand_dims(x, axis)"])
        out.append(max(x, y) if x != 0 and y != 0 else 0)
    return tuple(out)


def broadcast_to(x: Tile, shape: Sequence[int]) -> Tile:
    shape = tuple(int(s) for s in shape)
    if x.shape == shape:
        return x
    target = broadcast_shapes(x.shape, shape)
    if target != shape:
        raise TraceError(f"cannot broadcast shape {x.shape} to {shape}", user_loc())
    return _emit1("broadcast", {"x": x.value}, {"shape": shape})


def cast(x: Any, dtype: DType, used_as: str | None = None) -> Tile:
    """``x`` converted to ``dtype``; a Python number becomes a constant of ``dtype``, so it
    must fit it (``used_as``: where that type comes from, for the error)."""
    if not isinstance(dtype, DType):
        raise TraceError(f"expected a tilekit dtype such as tk.float32, got {dtype!r}", user_loc())
    if is_scalar_literal(x):
        return constant(x, (), dtype, used_as)
    t = to_tile(x, dtype)
    if t.dtype is dtype:
        return t
    return _emit1("cast", {"x": t.value}, {"dtype": dtype})


def bitcast(x: Tile, dtype: DType) -> Tile:
    if x.dtype is dtype:
        return x
    return _emit1("bitcast", {"x": x.value}, {"dtype": dtype})


def _operands(*values: Any) -> tuple[Tile, ...]:
    """The operands as tiles: Python numbers take the first tile's type (weakly typed)."""
    like = next((v.dtype for v in values if isinstance(v, Tile)), None)
    return tuple(v if isinstance(v, Tile) else to_tile(v, like) if like else to_tile(v)
                 for v in values)


def _result_dtype(op: str, a: DType, b: DType) -> DType:
    dtype = promote(a, b)
    if op in _FLOAT_ONLY and not dtype.is_float:
        return DType.FLOAT32
    if op in _ARITH and dtype.is_bool:
        return DType.INT32
    if op in _BITS and dtype.is_float:
        raise TraceError(f"`{_SYMBOL.get(op, op)}` needs integer or bool operands, got {a} and {b}",
                         user_loc(), hints=["use tk.where for conditions on floats, or "
                                            ".bitcast() to reach the bits"])
    if op in _SHIFTS and not dtype.is_int:
        raise TraceError(f"shifts need integer operands, got {a} and {b}", user_loc())
    return dtype


def _exact_comparison(a: Any, b: Any) -> tuple[Any, Any]:
    """A tile compared with a number its type cannot hold is widened to a type that holds
    both, so that the comparison stays exact: ``x_f16 < 1e6`` compares in float32 (true
    for every finite x), ``x_u8 < 256`` in int16. Other operands pass unchanged."""
    if isinstance(a, Tile) and is_scalar_literal(b):
        tile, number = a, b
    elif isinstance(b, Tile) and is_scalar_literal(a):
        tile, number = b, a
    else:
        return a, b
    value = number.item() if isinstance(number, np.generic) else number
    weak = weak_promote(tile.dtype, value)
    if literal_fits(value, weak):
        return a, b
    kind = (DType.FLOAT32, DType.FLOAT64) if weak.is_float else \
        (DType.INT16, DType.INT32, DType.INT64)
    wider = next((d for d in kind if d.bits > weak.bits and literal_fits(value, d)), None)
    if wider is None:
        return a, b  # no type holds both: the constant's own error follows
    widened = cast(tile, wider)
    return (widened, b) if tile is a else (a, widened)


def binary(op: str, a: Any, b: Any) -> Tile:
    if op in _COMPARE:
        a, b = _exact_comparison(a, b)
    x, y = _operands(a, b)
    dtype = _result_dtype(op, x.dtype, y.dtype)
    sym = _SYMBOL.get(op, op)
    shape = broadcast_shapes(x.shape, y.shape, f" in `{sym}`")
    x = broadcast_to(cast(x, dtype), shape)
    y = broadcast_to(cast(y, dtype), shape)
    return _emit1(op, {"lhs": x.value, "rhs": y.value})


_FLOAT_MATH = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "tanh", "sigmoid", "sin",
               "cos", "floor", "ceil", "isnan"}


def unary(op: str, a: Any) -> Tile:
    x = to_tile(a)
    if op in _FLOAT_MATH and not x.dtype.is_float:
        if op in ("floor", "ceil"):
            return x
        if op == "isnan":
            return constant(False, x.shape, DType.BOOL) if x.shape == () else \
                broadcast_to(constant(False, (), DType.BOOL), x.shape)
        x = cast(x, DType.FLOAT32)
    if op in ("neg", "abs") and x.dtype.is_bool:
        x = cast(x, DType.INT32)
    if op == "abs" and x.dtype.is_unsigned:
        return x
    return _emit1(op, {"x": x.value})


def where(cond: Any, a: Any, b: Any) -> Tile:
    c = to_tile(cond)
    if not c.dtype.is_bool:
        raise TraceError(f"tk.where needs a bool condition, got {c.dtype}", user_loc(),
                         hints=["compare explicitly, e.g. `x != 0`"])
    x, y = _operands(a, b)
    dtype = promote(x.dtype, y.dtype)
    shape = broadcast_shapes(broadcast_shapes(c.shape, x.shape), y.shape, " in tk.where")
    c = broadcast_to(c, shape)
    x = broadcast_to(cast(x, dtype), shape)
    y = broadcast_to(cast(y, dtype), shape)
    return _emit1("select", {"cond": c.value, "a": x.value, "b": y.value})


def fma(a: Any, b: Any, c: Any) -> Tile:
    x, y, z = _operands(a, b, c)
    dtype = promote(promote(x.dtype, y.dtype), z.dtype)
    if not dtype.is_float:
        dtype = DType.FLOAT32
    shape = broadcast_shapes(broadcast_shapes(x.shape, y.shape, " in tk.fma"), z.shape,
                             " in tk.fma")
    x, y, z = (broadcast_to(cast(v, dtype), shape) for v in (x, y, z))
    return _emit1("fma", {"a": x.value, "b": y.value, "c": z.value})


def _axis(x: Tile, axis: Any, rank: int | None = None) -> int:
    rank = x.ndim if rank is None else rank
    if isinstance(axis, Tile) or not isinstance(axis, (int, np.integer)):
        raise TraceError(f"axis must be a compile-time int, got {axis!r}", user_loc())
    a = int(axis)
    if not -rank <= a < rank:
        raise TraceError(f"axis {a} is out of range for a tile of rank {rank}", user_loc())
    return a % rank


def expand_dims(x: Any, axis: int) -> Tile:
    t = to_tile(x)
    a = _axis(t, axis, t.ndim + 1)
    return _emit1("expand_dims", {"x": t.value}, {"axis": a})


def _static_shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, Tile) or not isinstance(shape, (tuple, list)):
        raise TraceError(f"{what} must be a compile-time tuple of ints, got {shape!r}", user_loc(),
                         hints=["pass sizes as tk.constexpr parameters"])
    out = []
    for s in shape:
        if isinstance(s, Tile):
            raise TraceError(f"{what} must be known when compiling, but it contains a runtime "
                             f"{s.type}", user_loc(),
                             hints=["pass sizes as tk.constexpr parameters"])
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0:
            raise TraceError(f"{what} must be non-negative ints, got {shape!r}", user_loc())
        out.append(int(s))
    return tuple(out)


def static_shape(shape: Any, what: str = "a tile shape") -> tuple[int, ...]:
    return _static_shape(shape, what)


def reshape(x: Tile, shape: Any) -> Tile:
    target = list(_static_shape(shape, "a reshape target") if not (
        isinstance(shape, (tuple, list)) and -1 in shape) else shape)
    if target.count(-1) == 1:
        rest = math.prod(s for s in target if s != -1)
        target[target.index(-1)] = x.numel // rest if rest else 0
    target_t = tuple(int(s) for s in target)
    if math.prod(target_t) != x.numel:
        raise TraceError(f"cannot reshape a tile of shape {x.shape} ({x.numel} elements) to "
                         f"{target_t}", user_loc())
    if target_t == x.shape:
        return x
    return _emit1("reshape", {"x": x.value}, {"shape": target_t})


def permute(x: Tile, order: Any) -> Tile:
    order_t = tuple(_axis(x, o) for o in order)
    if sorted(order_t) != list(range(x.ndim)):
        raise TraceError(f"permute order {tuple(order)} is not a permutation of {x.ndim} dims",
                         user_loc())
    if order_t == tuple(range(x.ndim)):
        return x
    return _emit1("permute", {"x": x.value}, {"order": order_t})


def index(x: Tile, key: Any) -> Tile:
    """``x[:, None]`` style indexing: ``None`` inserts a dim, ``:`` keeps one."""
    items = key if isinstance(key, tuple) else (key,)
    if any(i is Ellipsis for i in items):
        at = items.index(Ellipsis)
        kept = sum(1 for i in items if i is not None and i is not Ellipsis)
        items = items[:at] + (slice(None),) * (x.ndim - kept) + items[at + 1:]
    out = x
    dim = 0
    for item in items:
        if item is None:
            out = _emit1("expand_dims", {"x": out.value}, {"axis": dim})
            dim += 1
        elif isinstance(item, slice) and item == slice(None):
            dim += 1
        else:
            raise TraceError(f"unsupported tile index {item!r}", user_loc(),
                             hints=["only `:` and `None` (new axis) are supported; select "
                                    "elements with tk.where or a reduction"])
    if dim - sum(1 for i in items if i is None) > x.ndim:
        raise TraceError(f"too many indices for a tile of rank {x.ndim}", user_loc())
    return out


def _reduce_all(x: Tile) -> Tile:
    return reshape(x, (x.numel,)) if x.ndim != 1 else x


def reduce(x: Any, kind: str, axis: int | None, keepdims: bool, dtype: DType | None = None) -> Tile:
    t = to_tile(x)
    if dtype is not None:
        t = cast(t, dtype)
    elif kind in ("sum", "prod") and (t.dtype.is_bool or (t.dtype.is_int and t.dtype.bits < 32)):
        t = cast(t, DType.UINT32 if t.dtype.is_unsigned else DType.INT32)
    if t.ndim == 0:
        return t
    if axis is None:
        flat = _reduce_all(t)
        out = _emit1("reduce", {"x": flat.value}, {"axis": 0, "kind": ReduceKind(kind)})
        return reshape(out, (1,) * t.ndim) if keepdims else out
    a = _axis(t, axis)
    out = _emit1("reduce", {"x": t.value}, {"axis": a, "kind": ReduceKind(kind)})
    return expand_dims(out, a) if keepdims else out


def argreduce(x: Any, kind: str, axis: int | None, keepdims: bool) -> Tile:
    t = to_tile(x)
    if t.dtype.is_bool:
        t = cast(t, DType.INT32)
    if axis is None:
        out = _emit1("argreduce", {"x": _reduce_all(t).value}, {"axis": 0, "kind": ArgKind(kind)})
        return reshape(out, (1,) * t.ndim) if keepdims else out
    a = _axis(t, axis)
    out = _emit1("argreduce", {"x": t.value}, {"axis": a, "kind": ArgKind(kind)})
    return expand_dims(out, a) if keepdims else out


def scan(x: Any, kind: str, axis: int) -> Tile:
    t = to_tile(x)
    if t.dtype.is_bool or (t.dtype.is_int and t.dtype.bits < 32 and kind == "sum"):
        t = cast(t, DType.INT32)
    return _emit1("scan", {"x": t.value}, {"axis": _axis(t, axis), "kind": ReduceKind(kind)})


def dot(a: Tile, b: Tile, acc: Tile | None, out_dtype: DType | None) -> Tile:
    a, b = to_tile(a), to_tile(b)
    if a.ndim != 2 or b.ndim != 2:
        raise TraceError(f"tk.dot needs 2-D tiles, got shapes {a.shape} and {b.shape}", user_loc())
    if a.shape[1] != b.shape[0]:
        raise TraceError(f"tk.dot inner dimensions differ: {a.shape} @ {b.shape}", user_loc())
    if a.dtype is not b.dtype:
        common = promote(a.dtype, b.dtype)
        a, b = cast(a, common), cast(b, common)
    shape = (a.shape[0], b.shape[1])
    if acc is None:
        dtype = out_dtype or (DType.FLOAT64 if a.dtype is DType.FLOAT64 else
                              DType.FLOAT32 if a.dtype.is_float else DType.INT32)
        acc = broadcast_to(constant(0, (), dtype), shape)
    acc = to_tile(acc)
    if acc.shape != shape:
        raise TraceError(f"tk.dot accumulator has shape {acc.shape}, expected {shape}", user_loc())
    return _emit1("dot", {"a": a.value, "b": b.value, "acc": acc.value})


def scalar_type(x: Tile) -> TileType:
    return x.type
