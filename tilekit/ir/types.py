"""The types of IR values.

A ``TileType`` is an n-dimensional value held by a program instance: a shape
fixed at trace time, an element type, and an optional layout (attached by the
layout solver; opaque to the IR). A scalar is a tile of shape ``()``, so one
set of elementwise ops serves both. A ``TensorType`` is a view of global
memory passed as an argument: its rank and element type are known when
tracing, its sizes and strides are runtime values, and ``index`` is the
integer type wide enough to address every element (int32 when the tensor's
span fits in 2^31 elements, a specialization fact chosen at launch).

They are ``tilekit.record.Frozen`` values (what a frozen dataclass gives, cheaper to create
at import: a warm start imports them to trace its kernel).
"""

from __future__ import annotations

import math

from tilekit.ir.dtypes import DType
from tilekit.record import Frozen


class TileType(Frozen):
    __slots__ = ("shape", "dtype", "layout")
    shape: tuple[int, ...]
    dtype: DType
    layout: object | None
    _field_defaults = {"layout": None}

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    def with_dtype(self, dtype: DType) -> TileType:
        return TileType(self.shape, dtype, self.layout)

    def with_shape(self, shape: tuple[int, ...]) -> TileType:
        return TileType(tuple(shape), self.dtype)

    def with_layout(self, layout: object | None) -> TileType:
        return TileType(self.shape, self.dtype, layout)

    def without_layout(self) -> TileType:
        return self if self.layout is None else TileType(self.shape, self.dtype)

    def __str__(self) -> str:
        if self.is_scalar and self.layout is None:
            return self.dtype.short
        dims = "x".join(str(s) for s in self.shape)
        body = f"{dims}x{self.dtype.short}" if dims else self.dtype.short
        if self.layout is not None:
            body += f", {self.layout}"
        return f"tile<{body}>"


class TensorType(Frozen):
    __slots__ = ("rank", "dtype", "index")
    rank: int
    dtype: DType
    index: DType
    _field_defaults = {"index": DType.INT32}

    def __str__(self) -> str:
        dims = "x".join("?" * 1 for _ in range(self.rank))
        body = f"{dims}x{self.dtype.short}" if dims else self.dtype.short
        return f"tensor<{body}, {self.index.short}>"


class SharedType(Frozen):
    """A ring of ``stages`` shared-memory buffers, each holding one tile of ``shape`` x
    ``dtype`` (a pipeline stream's stages). ``layout`` is how a tile sits in one buffer
    (row-major when None; a swizzle from ``tilekit.layout`` when set)."""

    __slots__ = ("shape", "dtype", "stages", "layout")
    shape: tuple[int, ...]
    dtype: DType
    stages: int
    layout: object | None
    _field_defaults = {"layout": None}

    @property
    def tile(self) -> TileType:
        return TileType(self.shape, self.dtype)

    @property
    def slot_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        return f"smem<{self.stages}x[{dims}x{self.dtype.short}]>"


class BarrierType(Frozen):
    """A ring of ``count`` mbarriers (one per pipeline stage), each completing a phase
    after ``arrivals`` arrive operations (and all expected transaction bytes)."""

    __slots__ = ("count", "arrivals")
    count: int
    arrivals: int

    def __str__(self) -> str:
        return f"mbarrier<{self.count}, arrivals={self.arrivals}>"


class TokenType(Frozen):
    """An asynchronous operation that has not been waited for (a bulk store group)."""

    __slots__ = ()

    def __str__(self) -> str:
        return "token"


Type = TileType | TensorType | SharedType | BarrierType | TokenType


def strip_layout(t: Type) -> Type:
    """The type without its layout: what ops' type rules compute (layouts are checked
    by the layout pass's own rules, not re-inferred)."""
    return t.without_layout() if isinstance(t, TileType) else t


def scalar(dtype: DType) -> TileType:
    return TileType((), dtype)
