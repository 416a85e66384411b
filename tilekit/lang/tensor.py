"""Tensor arguments as seen inside a kernel, and tile views of them.

A ``TensorArg`` is a view of global memory: its element type and rank are
known while tracing; its sizes and strides are runtime scalars
(``X.shape[0]``, ``X.stride(1)``). ``X.tile(shape, index)`` names one box of
the tensor; ``.load()``/``.store(v)`` move it, and the edge boxes of ragged
tensors are guarded automatically (loads read ``other`` past the edge,
stores drop those elements).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tilekit.errors import TraceError, user_loc
from tilekit.ir.core import Value
from tilekit.ir.dtypes import DType
from tilekit.lang import semantics, tracer
from tilekit.lang.tile import Tile


class TensorArg:
    """A tensor parameter of the kernel being traced."""

    __slots__ = ("value", "name")

    def __init__(self, value: Value, name: str) -> None:
        self.value = value
        self.name = name

    @property
    def dtype(self) -> DType:
        return self.value.tensor_type.dtype

    @property
    def ndim(self) -> int:
        return self.value.tensor_type.rank

    @property
    def shape(self) -> tuple[Tile, ...]:
        state = tracer.current()
        return tuple(Tile(state.tensor_scalar(self.value, "dim", i)) for i in range(self.ndim))

    @property
    def strides(self) -> tuple[Tile, ...]:
        state = tracer.current()
        return tuple(Tile(state.tensor_scalar(self.value, "stride", i)) for i in range(self.ndim))

    def stride(self, axis: int) -> Tile:
        return self.strides[self._axis(axis)]

    def size(self, axis: int) -> Tile:
        return self.shape[self._axis(axis)]

    def _axis(self, axis: int) -> int:
        if not isinstance(axis, int) or not -self.ndim <= axis < self.ndim:
            raise TraceError(f"axis {axis!r} out of range for `{self.name}` of rank {self.ndim}",
                             user_loc())
        return axis % self.ndim

    def tile(self, shape: Any, index: Any) -> TileView:
        """The box of ``shape`` at tile coordinates ``index`` (element index * shape)."""
        tile_shape = semantics.static_shape(shape, "a tile shape")
        if len(tile_shape) != self.ndim:
            raise TraceError(
                f"`{self.name}` has rank {self.ndim}, but the tile shape {tile_shape} has "
                f"rank {len(tile_shape)}", user_loc())
        if any(s == 0 for s in tile_shape):
            raise TraceError(f"tile shape {tile_shape} has an empty dimension", user_loc())
        items = index if isinstance(index, (tuple, list)) else (index,)
        if len(items) != self.ndim:
            raise TraceError(f"`{self.name}` has rank {self.ndim}, so its tile index needs "
                             f"{self.ndim} coordinates, got {len(items)}", user_loc())
        coords = []
        for item in items:
            t = semantics.to_tile(item)
            if t.ndim != 0 or not t.dtype.is_int:
                raise TraceError(f"tile coordinates must be integer scalars, got {t.type}",
                                 user_loc())
            coords.append(t)
        common = coords[0].dtype
        for c in coords[1:]:
            from tilekit.ir.dtypes import promote

            common = promote(common, c.dtype)
        return TileView(self, tile_shape, tuple(semantics.cast(c, common) for c in coords))

    def __repr__(self) -> str:
        return f"<tk.Tensor {self.name}: {self.value.type}>"

    def __bool__(self) -> bool:
        raise TraceError(f"tensor `{self.name}` used as a condition", user_loc())

    def _no_arith(self, *args: Any) -> Any:
        raise TraceError(
            f"arithmetic on tensor `{self.name}`; tensors are memory, not values", user_loc(),
            hints=["load a tile first: X.tile(shape, index).load() or tk.load(X, offsets)"])

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arith
    __truediv__ = _no_arith

    def __getitem__(self, key: Any) -> Any:
        raise TraceError(
            f"tensor `{self.name}` cannot be indexed like an array inside a kernel; tensors "
            "are memory, not values", user_loc(),
            hints=["read elements with tk.load(X, offsets) (offsets count elements, e.g. "
                   "i * X.stride(0) + j), or a box with X.tile(shape, index).load()"])


class TileView:
    """One box of a tensor: ``X.tile((BM, BN), (i, j))``."""

    __slots__ = ("tensor", "shape", "index")

    def __init__(self, tensor: TensorArg, shape: tuple[int, ...], index: Sequence[Tile]) -> None:
        self.tensor = tensor
        self.shape = shape
        self.index = tuple(index)

    def load(self, other: bool | int | float = 0) -> Tile:
        """The box's elements; positions past the tensor's edge read ``other``."""
        if not semantics.is_scalar_literal(other):
            raise TraceError("`other` of a tile load must be a Python number", user_loc())
        semantics._check_fits(other, self.tensor.dtype)  # like any literal
        state = tracer.current()
        op = state.emit("tile_load", {"tensor": self.tensor.value,
                                      "index": [i.value for i in self.index]},
                        {"shape": self.shape, "padding": other})
        return Tile(op.result)

    def store(self, value: Any) -> None:
        """Write ``value`` (cast to the tensor's type, broadcast to the box) where in bounds."""
        v = semantics.broadcast_to(semantics.cast(value, self.tensor.dtype), self.shape)
        tracer.current().emit("tile_store", {"tensor": self.tensor.value,
                                             "index": [i.value for i in self.index],
                                             "value": v.value}, {"shape": self.shape})

    def __repr__(self) -> str:
        return f"<tk.TileView {self.tensor.name} {self.shape}>"
