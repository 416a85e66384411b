"""Tensor arguments as seen inside a kernel, and tile views of them.

A ``TensorArg`` is a view of global memory: its element type and rank are
known while tracing; its sizes and strides are runtime scalars
(``X.shape[0]``, ``X.stride(1)``). ``X.tile(shape, index)`` names one box of
the tensor; ``.load()``/``.store(v)`` move it, and the edge boxes of ragged
tensors are guarded automatically (loads read ``other`` past the edge,
stores drop those elements). ``X.tiles(shape, row=r)`` names a stream of
boxes for ``tk.pipeline`` (see ``pipeline.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tilekit.errors import TraceError, user_loc
from tilekit.ir.core import Value
from tilekit.ir.dtypes import DType, promote
from tilekit.lang import semantics, tracer
from tilekit.lang.tile import Tile

if TYPE_CHECKING:
    from tilekit.lang.pipeline import TileStream

Coordinate = int | Tile


def check_coordinate(x: Any, what: str = "a tile coordinate") -> Coordinate:
    """A tile coordinate: a Python int (kept as is) or an integer scalar tile."""
    if isinstance(x, np.integer):
        x = int(x)
    if isinstance(x, Tile):
        if x.ndim != 0 or not x.dtype.is_int:
            raise TraceError(f"{what} must be an integer scalar, got {x.type}", user_loc(),
                             hints=["tile coordinates count tiles, e.g. tk.program_id(0)"])
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return x
    raise TraceError(f"{what} must be an integer, got {x!r}", user_loc(),
                     hints=["tile coordinates count tiles (Python ints or integer scalars)"])


def check_padding(padding: Any, dtype: DType) -> bool | int | float:
    if not semantics.is_scalar_literal(padding):
        raise TraceError(f"padding must be a Python number, got {padding!r}", user_loc(),
                         hints=["it is what elements past the tensor's edge read"])
    value = padding.item() if isinstance(padding, np.generic) else padding
    semantics._check_fits(value, dtype)  # like any literal of the tensor's type
    return value




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

    def _tile_shape(self, shape: Any) -> tuple[int, ...]:
        tile_shape = semantics.static_shape(shape, "a tile shape")
        if len(tile_shape) != self.ndim:
            raise TraceError(
                f"`{self.name}` has rank {self.ndim}, but the tile shape {tile_shape} has "
                f"rank {len(tile_shape)}", user_loc())
        if any(s == 0 for s in tile_shape):
            raise TraceError(f"tile shape {tile_shape} has an empty dimension", user_loc())
        return tile_shape

    def tile(self, shape: Any, index: Any) -> TileView:
        """The box of ``shape`` at tile coordinates ``index`` (element index * shape)."""
        tile_shape = self._tile_shape(shape)
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
            common = promote(common, c.dtype)
        return TileView(self, tile_shape, tuple(semantics.cast(c, common) for c in coords))

    def tiles(self, shape: Any, *, row: Any = None, col: Any = None, along: Any = None,
              at: Any = None, padding: bool | int | float = 0) -> TileStream:
        """The stream of tiles of ``shape`` that ``tk.pipeline`` iterates.

        ``row=r`` (2-D): the tiles of row-of-tiles ``r``, stepping along the columns from
        tile ``(r, 0)``; ``col=c``: column-of-tiles ``c``, stepping along the rows from
        ``(0, c)``; ``along=axis, at=(...)``: stepping along ``axis`` from tile ``at``
        (default: all zeros). A 1-D tensor steps along its only axis from tile 0 (or
        ``at``). Coordinates count tiles, as in ``X.tile``; elements past the tensor's
        edge read ``padding``.
        """
        tile_shape = self._tile_shape(shape)
        given = [k for k, v in (("row", row), ("col", col), ("along", along)) if v is not None]
        if len(given) > 1:
            raise TraceError(
                f"`{self.name}.tiles` got both {given[0]}= and {given[1]}=; give one", user_loc(),
                hints=["row=r steps along the columns, col=c along the rows; along=axis, "
                       "at=(...) is the general form"])
        if given and given[0] in ("row", "col"):
            if self.ndim != 2:
                raise TraceError(
                    f"{given[0]}= names a row or column of tiles of a 2-D tensor, but "
                    f"`{self.name}` has rank {self.ndim}", user_loc(),
                    hints=[f"write `{self.name}.tiles(shape, along=axis, at=(...))`"])
            if at is not None:
                raise TraceError(
                    f"at= goes with along=; {given[0]}= already names the first tile",
                    user_loc(), hints=["row=r starts at tile (r, 0), col=c at tile (0, c)"])
            if given[0] == "row":
                axis, start = 1, [check_coordinate(row, "row="), 0]
            else:
                axis, start = 0, [0, check_coordinate(col, "col=")]
        else:
            axis = self._stream_axis(along)
            start = self._stream_start(at)
        from tilekit.lang.pipeline import TileStream  # the pipeline's module: when one is used

        return TileStream(self, tile_shape, axis, tuple(start),
                          check_padding(padding, self.dtype), user_loc())

    def _stream_axis(self, along: Any) -> int:
        if along is None:
            if self.ndim == 1:
                return 0
            raise TraceError(
                f"`{self.name}.tiles` needs the direction its tiles step in", user_loc(),
                hints=["row=r steps along the columns, col=c along the rows (2-D); "
                       "along=axis, at=(...) is the general form"])
        if isinstance(along, Tile):
            raise TraceError(f"along= must be known when compiling, but it is a runtime "
                             f"{along.type}", user_loc(), hints=["write the axis as a number"])
        if not isinstance(along, (int, np.integer)) or isinstance(along, bool) \
                or not -self.ndim <= along < self.ndim:
            raise TraceError(f"along={along!r} is not an axis of `{self.name}` (rank "
                             f"{self.ndim})", user_loc())
        return int(along) % self.ndim

    def _stream_start(self, at: Any) -> list[int | Tile]:
        if at is None:
            return [0] * self.ndim
        items = at if isinstance(at, (tuple, list)) else (at,)
        if len(items) != self.ndim:
            raise TraceError(f"`{self.name}` has rank {self.ndim}, so at= needs {self.ndim} "
                             f"tile coordinates, got {len(items)}", user_loc())
        return [check_coordinate(c, "at=") for c in items]

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
