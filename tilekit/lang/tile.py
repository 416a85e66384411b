"""``Tile``: the proxy a kernel body computes with while it is traced.

A tile wraps one IR value. Python operators emit IR through
``semantics.py``; in-place operators (``acc += x``) rebind the tile to the
new value, which is how a tile updated in a loop becomes loop-carried (see
``control.py``). Anything that would need the *runtime* value at trace time
(``if tile:``, ``int(tile)``, iterating) raises a ``TraceError`` that says
what to write instead.
"""

from __future__ import annotations

from typing import Any

from tilekit.errors import SourceLoc, TraceError, user_loc
from tilekit.ir.core import Value
from tilekit.ir.dtypes import DType
from tilekit.ir.types import TileType
from tilekit.lang import tracer


class Escaped:
    """Marks a tile whose value only exists inside a loop or `when` body."""

    __slots__ = ("name", "scope_kind", "scope_loc")

    def __init__(self, name: str | None, scope_kind: tracer.ScopeKind,
                 scope_loc: SourceLoc | None) -> None:
        self.name = name
        self.scope_kind = scope_kind
        self.scope_loc = scope_loc

    def error(self) -> TraceError:
        what = f"`{self.name}`" if self.name else "a tile"
        loop = self.scope_kind in (tracer.ScopeKind.LOOP, tracer.ScopeKind.PIPELINE)
        construct = "a " + self.scope_kind.value
        line = f" (line {self.scope_loc.line})" if self.scope_loc else ""
        fix = (f"a tile kept in a list, tuple or dict is carried only if one is there "
               f"before the {'loop' if loop else 'block'}: assign a tile to `{self.name}` "
               "first (e.g. tk.zeros(...)), or use a plain name"
               if self.name and "[" in self.name else
               f"assign `{self.name}` before the loop so that it becomes loop-carried"
               if loop and self.name else
               f"assign `{self.name}` before the block so that it has a value when the "
               "condition is false" if self.name else
               "compute it before the body, or store it to memory inside the body")
        return TraceError(f"{what} was computed inside {construct}{line} and is used after it",
                          user_loc(), hints=[fix])


class Tile:
    """A tile (or a scalar: a tile of shape ``()``) being traced."""

    __slots__ = ("_value", "__weakref__")

    def __init__(self, value: Value) -> None:
        self._value: Value | Escaped = value
        state = tracer.active()
        if state is not None:
            state.note_created(self)

    # --- the wrapped value -------------------------------------------------------------------

    @property
    def value(self) -> Value:
        v = self._value
        if isinstance(v, Escaped):
            raise v.error()
        return v

    def _assign(self, value: Value) -> None:
        """Point this tile at a new value (loop and `when` results, in-place ops)."""
        self._value = value

    def _update(self, new: Tile) -> Tile:
        """In-place operator: rebind to ``new`` and record the mutation for open scopes."""
        before = self.value
        if new.type != before.type:
            raise TraceError(
                f"in-place update changes this tile from {before.type} to {new.type}",
                user_loc(), hints=["in-place operators keep the shape and type; write "
                                   "`x = x + y` to make a new tile, or cast with .to(...)"])
        tracer.current().note_mutation(self, before)
        self._value = new.value
        return self

    @property
    def type(self) -> TileType:
        return self.value.tile_type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return self.type.numel

    def __repr__(self) -> str:
        if isinstance(self._value, Escaped):
            return "<tk.Tile (out of scope)>"
        return f"<tk.Tile {self.type}>"

    __hash__ = object.__hash__

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes a Tile does not have (e.g. `n.tile(...)` on a scalar).
        if name.startswith("__"):
            raise AttributeError(name)
        what = "runtime scalar" if isinstance(self._value, Value) and \
            self.value.tile_type.is_scalar else "tile"
        hint = ("tensors are kernel parameters passed an array; this is a " + what
                if name in ("tile", "stride", "strides", "ndim") else
                "see the README's language table for what tiles support")
        raise TraceError(f"a {what} has no attribute `{name}`", user_loc(), hints=[hint])

    # --- things that need a runtime value at trace time ----------------------------------------

    def __bool__(self) -> bool:
        raise TraceError(
            f"a runtime {'scalar' if self.ndim == 0 else 'tile'} value was used as a Python "
            "condition (`if`, `while`, `and`, `or`, "
            "`not` or `assert`)", user_loc(),
            hints=["for values: tk.where(cond, a, b)",
                   "for effects: `with tk.when(cond):` (cond a scalar)",
                   "combine conditions with `&`, `|` and `~`",
                   "if the value is known when compiling, pass it as a tk.constexpr parameter"])

    def _not_constant(self, what: str) -> TraceError:
        return TraceError(
            f"{what} needs a compile-time value, but this is a runtime {self.type}", user_loc(),
            hints=["pass the value as a tk.constexpr parameter of the kernel"])

    def __index__(self) -> int:
        raise self._not_constant("this use")

    def __int__(self) -> int:
        raise self._not_constant("int()")

    def __float__(self) -> float:
        raise self._not_constant("float()")

    def __iter__(self) -> Any:
        raise TraceError("cannot iterate over a tile while tracing", user_loc(),
                         hints=["loop with `for i in tk.range(n)` and index with offsets, or "
                                "use tk.static_range for a loop unrolled at trace time"])

    def __len__(self) -> int:
        raise TraceError("len() of a tile; use `x.shape[0]`", user_loc())

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TraceError("tiles are values and cannot be assigned into", user_loc(),
                         hints=["build a new tile with tk.where(mask, new, old)"])

    # --- numpy: its functions cannot compute on tiles; each names tilekit's -----------------

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        # A numpy scalar on the left of an operator (`np.float32(2) * x`) reaches the tile
        # here, as np.multiply: it means what `2 * x` means.
        operator = _UFUNC_OPERATORS.get(ufunc.__name__)
        if operator is not None and method == "__call__" and len(inputs) == 2 and not kwargs:
            return semantics.binary(operator[0], *inputs)
        key = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        raise _numpy_error(f"np.{key}", _NUMPY_EQUIVALENTS.get(key))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        raise _numpy_error(f"np.{func.__name__}", _NUMPY_EQUIVALENTS.get(func.__name__))

    def __matmul__(self, o: Any) -> Tile:
        raise TraceError("`@` on tiles: tilekit's matrix product is tk.dot", user_loc(),
                         hints=["use tk.dot(a, b) (16-bit floats accumulate in float32), or "
                                "tk.dot(a, b, acc) to add to an accumulator"])

    __rmatmul__ = __matmul__

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise TraceError(
            "a tile was turned into a numpy array (np.asarray, np.array, or a numpy function "
            "given a tile), but its values exist only when the kernel runs", user_loc(),
            hints=["compute with tilekit's functions (tk.exp, tk.where, tk.sum, ...)",
                   "to see values while the kernel runs: tk.device_print('x', x)"])

    # --- operators -----------------------------------------------------------------------------

    def __add__(self, o: Any) -> Tile: return semantics.binary("add", self, o)
    def __radd__(self, o: Any) -> Tile: return semantics.binary("add", o, self)
    def __sub__(self, o: Any) -> Tile: return semantics.binary("sub", self, o)
    def __rsub__(self, o: Any) -> Tile: return semantics.binary("sub", o, self)
    def __mul__(self, o: Any) -> Tile: return semantics.binary("mul", self, o)
    def __rmul__(self, o: Any) -> Tile: return semantics.binary("mul", o, self)
    def __truediv__(self, o: Any) -> Tile: return semantics.binary("div", self, o)
    def __rtruediv__(self, o: Any) -> Tile: return semantics.binary("div", o, self)
    def __floordiv__(self, o: Any) -> Tile: return semantics.binary("floordiv", self, o)
    def __rfloordiv__(self, o: Any) -> Tile: return semantics.binary("floordiv", o, self)
    def __mod__(self, o: Any) -> Tile: return semantics.binary("mod", self, o)
    def __rmod__(self, o: Any) -> Tile: return semantics.binary("mod", o, self)
    def __pow__(self, o: Any) -> Tile: return semantics.binary("pow", self, o)
    def __rpow__(self, o: Any) -> Tile: return semantics.binary("pow", o, self)
    def __and__(self, o: Any) -> Tile: return semantics.binary("and", self, o)
    def __rand__(self, o: Any) -> Tile: return semantics.binary("and", o, self)
    def __or__(self, o: Any) -> Tile: return semantics.binary("or", self, o)
    def __ror__(self, o: Any) -> Tile: return semantics.binary("or", o, self)
    def __xor__(self, o: Any) -> Tile: return semantics.binary("xor", self, o)
    def __rxor__(self, o: Any) -> Tile: return semantics.binary("xor", o, self)
    def __lshift__(self, o: Any) -> Tile: return semantics.binary("shl", self, o)
    def __rlshift__(self, o: Any) -> Tile: return semantics.binary("shl", o, self)
    def __rshift__(self, o: Any) -> Tile: return semantics.binary("shr", self, o)
    def __rrshift__(self, o: Any) -> Tile: return semantics.binary("shr", o, self)

    def __eq__(self, o: Any) -> Tile: return semantics.binary("eq", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Tile: return semantics.binary("ne", self, o)  # type: ignore[override]
    def __lt__(self, o: Any) -> Tile: return semantics.binary("lt", self, o)
    def __le__(self, o: Any) -> Tile: return semantics.binary("le", self, o)
    def __gt__(self, o: Any) -> Tile: return semantics.binary("gt", self, o)
    def __ge__(self, o: Any) -> Tile: return semantics.binary("ge", self, o)

    def __iadd__(self, o: Any) -> Tile: return self._update(semantics.binary("add", self, o))
    def __isub__(self, o: Any) -> Tile: return self._update(semantics.binary("sub", self, o))
    def __imul__(self, o: Any) -> Tile: return self._update(semantics.binary("mul", self, o))
    def __itruediv__(self, o: Any) -> Tile: return self._update(semantics.binary("div", self, o))
    def __ifloordiv__(self, o: Any) -> Tile:
        return self._update(semantics.binary("floordiv", self, o))
    def __imod__(self, o: Any) -> Tile: return self._update(semantics.binary("mod", self, o))
    def __iand__(self, o: Any) -> Tile: return self._update(semantics.binary("and", self, o))
    def __ior__(self, o: Any) -> Tile: return self._update(semantics.binary("or", self, o))
    def __ixor__(self, o: Any) -> Tile: return self._update(semantics.binary("xor", self, o))
    def __ilshift__(self, o: Any) -> Tile: return self._update(semantics.binary("shl", self, o))
    def __irshift__(self, o: Any) -> Tile: return self._update(semantics.binary("shr", self, o))

    def __neg__(self) -> Tile: return semantics.unary("neg", self)
    def __pos__(self) -> Tile: return self
    def __invert__(self) -> Tile: return semantics.unary("not", self)
    def __abs__(self) -> Tile: return semantics.unary("abs", self)

    def __getitem__(self, key: Any) -> Tile:
        return semantics.index(self, key)

    # --- methods -------------------------------------------------------------------------------

    def to(self, dtype: DType) -> Tile:
        """This tile converted to ``dtype`` (see tilekit.ir.numerics for rounding)."""
        return semantics.cast(self, dtype)

    astype = to

    def bitcast(self, dtype: DType) -> Tile:
        return semantics.bitcast(self, dtype)

    def reshape(self, *shape: Any) -> Tile:
        one = len(shape) == 1 and isinstance(shape[0], tuple)
        return semantics.reshape(self, shape[0] if one else shape)

    def permute(self, *order: Any) -> Tile:
        one = len(order) == 1 and isinstance(order[0], tuple)
        return semantics.permute(self, order[0] if one else order)

    @property
    def T(self) -> Tile:
        return semantics.permute(self, tuple(reversed(range(self.ndim))))

    def expand_dims(self, axis: int) -> Tile:
        return semantics.expand_dims(self, axis)

    def broadcast_to(self, shape: Any) -> Tile:
        return semantics.broadcast_to(self, shape)

    def sum(self, axis: int | None = None, keepdims: bool = False) -> Tile:
        return semantics.reduce(self, "sum", axis, keepdims)

    def max(self, axis: int | None = None, keepdims: bool = False) -> Tile:
        return semantics.reduce(self, "max", axis, keepdims)

    def min(self, axis: int | None = None, keepdims: bool = False) -> Tile:
        return semantics.reduce(self, "min", axis, keepdims)

    def argmax(self, axis: int, keepdims: bool = False) -> Tile:
        return semantics.argreduce(self, "argmax", axis, keepdims)

    def argmin(self, axis: int, keepdims: bool = False) -> Tile:
        return semantics.argreduce(self, "argmin", axis, keepdims)

    def cumsum(self, axis: int = 0) -> Tile:
        return semantics.scan(self, "sum", axis)


def _numpy_error(what: str, equivalent: str | None) -> TraceError:
    hint = (f"use {equivalent}" if equivalent else
            "use tilekit's functions (the README's language table lists them: tk.exp, "
            "tk.where, tk.sum, ...)")
    return TraceError(f"`{what}` was given a tile, but numpy cannot compute on tiles: a "
                      "tile's values exist only when the kernel runs", user_loc(), hints=[hint])


# numpy ufuncs that Python operators between a numpy scalar and a tile call: the op, its symbol.
_UFUNC_OPERATORS = {
    "add": ("add", "+"), "subtract": ("sub", "-"), "multiply": ("mul", "*"),
    "true_divide": ("div", "/"), "divide": ("div", "/"), "floor_divide": ("floordiv", "//"),
    "remainder": ("mod", "%"), "power": ("pow", "**"), "bitwise_and": ("and", "&"),
    "bitwise_or": ("or", "|"), "bitwise_xor": ("xor", "^"), "left_shift": ("shl", "<<"),
    "right_shift": ("shr", ">>"), "equal": ("eq", "=="), "not_equal": ("ne", "!="),
    "less": ("lt", "<"), "less_equal": ("le", "<="), "greater": ("gt", ">"),
    "greater_equal": ("ge", ">="),
}

# What to write instead of a numpy function (ufuncs by name, `name.reduce` for their methods).
_NUMPY_EQUIVALENTS = {
    **{f: f"tk.{f}(x)" for f in ("exp", "exp2", "log", "log2", "sqrt", "tanh", "sin", "cos",
                                  "floor", "ceil", "isnan")},
    "absolute": "tk.abs(x) or abs(x)", "abs": "tk.abs(x) or abs(x)",
    "fabs": "tk.abs(x) or abs(x)", "negative": "-x", "positive": "x",
    "invert": "~x", "logical_not": "~x (on a bool tile)", "logical_and": "a & b (bool tiles)",
    "logical_or": "a | b (bool tiles)", "logical_xor": "a ^ b (bool tiles)",
    "maximum": "tk.maximum(a, b)", "fmax": "tk.maximum(a, b) (it propagates NaN)",
    "minimum": "tk.minimum(a, b)", "fmin": "tk.minimum(a, b) (it propagates NaN)",
    "reciprocal": "1 / x", "square": "x * x", "expm1": "tk.exp(x) - 1",
    "log1p": "tk.log(1 + x)", "log10": "tk.log2(x) * 0.30102999566398120",
    "clip": "tk.minimum(tk.maximum(x, lo), hi)", "where": "tk.where(cond, a, b)",
    "sum": "tk.sum(x, axis) or x.sum(axis)", "add.reduce": "tk.sum(x, axis)",
    "prod": "tk.prod(x, axis)", "multiply.reduce": "tk.prod(x, axis)",
    "max": "tk.max(x, axis) or x.max(axis)", "amax": "tk.max(x, axis) or x.max(axis)",
    "maximum.reduce": "tk.max(x, axis)", "min": "tk.min(x, axis) or x.min(axis)",
    "amin": "tk.min(x, axis) or x.min(axis)", "minimum.reduce": "tk.min(x, axis)",
    "argmax": "tk.argmax(x, axis)", "argmin": "tk.argmin(x, axis)",
    "cumsum": "tk.cumsum(x, axis)", "add.accumulate": "tk.cumsum(x, axis)",
    "mean": "tk.sum(x, axis) / n", "any": "tk.max(mask.to(tk.int32)) > 0",
    "all": "tk.min(mask.to(tk.int32)) > 0", "dot": "tk.dot(a, b)", "matmul": "tk.dot(a, b)",
    "reshape": "x.reshape(shape)", "squeeze": "x.reshape(shape)",
    "transpose": "x.T or x.permute(order)", "expand_dims": "tk.expand_dims(x, axis)",
    "broadcast_to": "tk.broadcast_to(x, shape)", "zeros_like": "tk.zeros_like(x)",
    "ones_like": "tk.full_like(x, 1)", "full_like": "tk.full_like(x, value)",
    "astype": "x.to(tk.float32) (tilekit dtypes)",
    **{u: f"the operator `a {sym} b`" for u, (_, sym) in _UFUNC_OPERATORS.items()},
}


from tilekit.lang import semantics  # noqa: E402  (semantics builds Tiles)
