"""Vector widths for tiles of any size: CuTe thread-value layouts and explicit element tables.

``vectorize`` answers the F2 case in bit algebra; tiles that are not powers of two (a row of
4097, 37 columns, 1000 x 37) are described here instead, either as a
:class:`ThreadValueLayout` (a CuTe ``(thread, value)`` layout over a padded tile, answered
CuTe's way: composed with the tensor's strides, coalesced, and read from its leftmost stride-1
mode) or as an :class:`ElementTable` (an explicit per-thread element list, decided by
enumeration). :func:`blocked_thread_values` builds the blocked thread-value layout of any shape.

Split out of ``vectorize`` (which keeps the facts, the plan, the F2 path and the entry point
:func:`~tilekit.layout.vectorize.vector_width`, and re-exports :class:`ThreadValueLayout`,
:class:`ElementTable` and :func:`blocked_thread_values`) because these paths answer by
arithmetic on concrete tiles, not by F2 algebra: the same classes, checks and plans as before
the split, under the same conventions (strides and sizes in elements, alignments in bytes,
worst case over the unknowns).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout import cute
from tilekit.layout.inttuple import flatten

__all__ = ["ElementTable", "ThreadValueLayout", "blocked_thread_values"]

# A stand-in for an unknown stride in CuTe arithmetic: odd and huge, so the stand-in has
# exactly the known power-of-two divisibility and never coalesces with a neighbouring mode.
_UNKNOWN_FACTOR = (1 << 40) + 1


def _check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 1 for s in shape):
        raise LayoutError(f"{what} {list(shape)} needs at least one dim, each of size >= 1")
    return shape


@dataclass(frozen=True)
class ThreadValueLayout:
    """Who holds what in a tile of any size: a CuTe ``(thread, value) -> element`` layout.

    ``layout`` has two top-level modes (threads, then values = registers) and maps into the
    colexicographic index of ``padded_shape`` (dim0 fastest, as everywhere in
    ``tilekit.layout``). Elements outside ``valid_shape`` (default: the whole padded tile) are
    masked: a 37-column tile is a 40-column padded tile with 37 valid columns.
    """

    layout: cute.Layout
    padded_shape: tuple[int, ...]
    valid_shape: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        padded = _check_shape(self.padded_shape, "padded_shape")
        valid = (padded if self.valid_shape is None
                 else _check_shape(self.valid_shape, "valid_shape"))
        object.__setattr__(self, "padded_shape", padded)
        object.__setattr__(self, "valid_shape", valid)
        if len(valid) != len(padded) or any(v > p for v, p in zip(valid, padded, strict=True)):
            raise LayoutError(
                f"valid_shape {list(valid)} does not fit in padded_shape {list(padded)}"
            )
        if not isinstance(self.layout, cute.Layout) or self.layout.rank != 2:
            raise LayoutError(
                "a thread-value layout has two top-level modes (threads, values), got "
                f"{self.layout}"
            )
        if any(d < 0 for d in flatten(self.layout.stride)):
            raise LayoutError(f"thread-value layout {self.layout} has a negative stride")
        if self.layout.cosize > math.prod(padded):
            raise LayoutError(
                f"thread-value layout {self.layout} reaches index {self.layout.cosize - 1}, past "
                f"the padded tile {list(padded)} ({math.prod(padded)} elements)",
                hints=["enlarge padded_shape so every held element has coordinates"],
            )

    @property
    def threads(self) -> int:
        return self.layout[0].size

    @property
    def registers(self) -> int:
        return self.layout[1].size

    def to_table(self) -> ElementTable:
        """The explicit table: coordinates of each (thread, register) and which are inside."""
        index = self.layout.to_table()  # [threads, values]
        coords = np.empty(index.shape + (len(self.padded_shape),), dtype=np.int64)
        rest = index.copy()
        for d, extent in enumerate(self.padded_shape):
            coords[..., d] = rest % extent
            rest //= extent
        return ElementTable(coords, np.all(coords < np.asarray(self.valid_shape), axis=-1))


def blocked_thread_values(
    shape: Sequence[int],
    size_per_thread: Sequence[int],
    threads: Sequence[int],
    order: Sequence[int] | None = None,
) -> ThreadValueLayout:
    """The blocked layout for a tile of any shape: each thread holds ``size_per_thread`` blocks.

    Threads tile the dims in ``order`` (most minor first, default row-major), a footprint of
    ``size_per_thread * threads`` elements repeats in registers (most minor dim first) until it
    covers ``shape``; the tile is padded up to a multiple of the footprint, padding masked.
    """
    shape = _check_shape(shape, "shape")
    rank = len(shape)
    order = tuple(reversed(range(rank))) if order is None else tuple(order)
    spt = _check_shape(size_per_thread, "size_per_thread")
    tpb = _check_shape(threads, "threads")
    if len(spt) != rank or len(tpb) != rank or sorted(order) != list(range(rank)):
        raise LayoutError("shape, size_per_thread, threads and order must all have the tile's rank")
    footprint = [s * t for s, t in zip(spt, tpb, strict=True)]
    repeats = [-(-n // f) for n, f in zip(shape, footprint, strict=True)]
    padded = tuple(f * r for f, r in zip(footprint, repeats, strict=True))
    pitch = [math.prod(padded[:d]) for d in range(rank)]  # colex strides of the padded tile
    thread_shape = tuple(tpb[d] for d in order)
    thread_stride = tuple(spt[d] * pitch[d] for d in order)
    value_shape = tuple(spt[d] for d in order) + tuple(repeats[d] for d in order)
    value_stride = tuple(pitch[d] for d in order) + tuple(footprint[d] * pitch[d] for d in order)
    layout = cute.Layout((thread_shape, value_shape), (thread_stride, value_stride))
    return ThreadValueLayout(layout, padded, shape)


@dataclass(frozen=True, eq=False)
class ElementTable:
    """An explicit element list: ``coords[thread, register, dim]``.

    A register a thread does not have is -1 in every dim. ``valid`` (default: every register
    that exists) marks the elements inside the tensor; the others are padding that is masked,
    but still has an address, so it does not break a vector (the edge's accesses do: the tail).
    """

    coords: np.ndarray
    valid: np.ndarray | None = None

    def __post_init__(self) -> None:
        coords = np.asarray(self.coords, dtype=np.int64)
        if coords.ndim != 3:
            raise LayoutError(
                f"an element table is indexed [thread, register, dim], got shape {coords.shape}"
            )
        exists = np.all(coords >= 0, axis=-1)
        if np.any(np.any(coords >= 0, axis=-1) & ~exists):
            raise LayoutError("an element table entry is either all -1 (absent) or all >= 0")
        valid = exists if self.valid is None else np.asarray(self.valid, dtype=bool)
        if valid.shape != exists.shape:
            raise LayoutError(f"valid has shape {valid.shape}, the table {exists.shape}")
        object.__setattr__(self, "coords", coords)
        object.__setattr__(self, "valid", valid & exists)

    @property
    def exists(self) -> np.ndarray:
        return np.all(self.coords >= 0, axis=-1)


class _TableChecks:
    """The vector questions answered by enumerating a table (worst case over the facts)."""

    def __init__(self, table: ElementTable, facts: TensorFacts, edge: int | None) -> None:
        self.coords = table.coords
        self.threads, self.registers, rank = table.coords.shape
        if rank != facts.rank:
            raise LayoutError(f"the table has {rank} dims, the tensor {facts.rank}")
        self.rank = rank
        self.exists = table.exists
        self.known = np.array([s is not None for s in facts.strides])
        self.strides = np.array([0 if s is None else s for s in facts.strides], dtype=np.int64)
        self.divisors = np.array([d.stride_divisor for d in facts.dims], dtype=np.int64)
        self.contiguous_dim = facts.contiguous_dim
        self.edge = edge

    def groups(self, v: int) -> np.ndarray:
        """Coordinates [group, i, dim] of every group of ``v`` consecutive registers that exist."""
        pad = -self.registers % v
        coords = np.concatenate(
            [self.coords, np.full((self.threads, pad, self.rank), -1)], axis=1
        ).reshape(self.threads, -1, v, self.rank)
        whole = np.concatenate(
            [self.exists, np.zeros((self.threads, pad), dtype=bool)], axis=1
        ).reshape(self.threads, -1, v).all(axis=-1)
        return coords[whole]

    def broken(self, v: int) -> np.ndarray:
        """Per group, whether some element is not ``i`` elements after the first (any stride)."""
        groups = self.groups(v)
        delta = groups - groups[:, :1, :]
        unknown = np.any((delta != 0) & ~self.known, axis=(-1, -2))
        return unknown | np.any((delta * self.strides).sum(axis=-1) != np.arange(v), axis=-1)

    def contiguity_limit(self, v: int) -> Limit:
        """Why groups of ``v`` are not contiguous: strides, a ragged run, or the layout."""
        groups = self.groups(v)
        c = self.contiguous_dim
        if c is None:
            return Limit.REGISTER_CONTIGUITY
        delta = groups - groups[:, :1, :]
        expected = np.zeros((v, self.rank), dtype=np.int64)
        expected[:, c] = np.arange(v)
        if not np.any(delta != expected):
            return Limit.STRIDE
        if self.edge is not None:
            bad = groups[self.broken(v)]
            step = np.diff(bad[:, :, c], axis=1)
            first_break = np.argmax(step != 1, axis=1)
            before = bad[np.arange(len(bad)), first_break, c]
            if np.all(np.any(step != 1, axis=1)) and np.all(before == self.edge - 1):
                return Limit.RAGGED_TAIL
        return Limit.REGISTER_CONTIGUITY

    def aligned(self, v: int) -> bool:
        start = self.groups(v)[:, 0, :]
        if np.any(~self.known & ((start * self.divisors) % v != 0)):
            return False
        return not np.any((start * self.strides).sum(axis=-1) % v != 0)


def _vector_width_table(
    table: ElementTable, facts: TensorFacts, edge: int | None = None
) -> VectorPlan:
    """Decide by enumeration: every group of consecutive registers that exist.

    ``edge`` is the valid extent of the contiguous dim, when known (thread-value layouts): a
    group that breaks right after the last valid element is cut by a ragged run.
    """
    checks = _TableChecks(table, facts, edge)
    eb = facts.elem_bytes
    v = 1
    while True:
        wider = 2 * v
        if wider * eb > MAX_VECTOR_BYTES:
            limit = Limit.BYTE_CAP
        elif wider > checks.registers:
            limit = Limit.REGISTER_CONTIGUITY
        elif np.any(checks.broken(wider)):
            limit = checks.contiguity_limit(wider)
        elif facts.base_align % (wider * eb):
            limit = Limit.ALIGNMENT
        elif not checks.aligned(wider):
            limit = Limit.STRIDE
        else:
            v = wider
            continue
        break
    return VectorPlan(
        elements=v,
        elem_bytes=eb,
        register_masks=tuple(1 << j for j in range(v.bit_length() - 1)),
        limit=limit,
        tail_elements=_table_tail(table.valid, v),  # type: ignore[arg-type]
        explanation=limit.value,
    )


def _table_tail(valid: np.ndarray, v: int) -> int:
    """Widest power of two ``w <= v`` whose sub-groups are all-valid or all-masked.

    Registers past the last one count as masked: a run that ends inside a vector is a tail.
    """
    ok = np.concatenate([valid, np.zeros((valid.shape[0], -valid.shape[1] % v), bool)], axis=1)
    w = v
    while w > 1:
        sub = ok.reshape(ok.shape[0], -1, w)
        if not np.any(sub.any(axis=-1) & ~sub.all(axis=-1)):
            break
        w //= 2
    return w


def _vector_width_tv(tv: ThreadValueLayout, facts: TensorFacts) -> VectorPlan:
    """CuTe's way: compose with the tensor's strides, coalesce, read the leftmost stride-1 mode.

    The run ``n:1`` a thread holds at consecutive addresses bounds the vector; the strides of
    every other mode (threads, later values) must be multiples of it for aligned starts. Why a
    run stops (strides, the layout, a ragged row) is read off the element table.
    """
    if len(tv.padded_shape) != facts.rank:
        raise LayoutError(f"the tile has {len(tv.padded_shape)} dims, the tensor {facts.rank}")
    c = facts.contiguous_dim
    table = tv.to_table()
    edge = tv.valid_shape[c] if c is not None else None  # type: ignore[index]
    strides = tuple(
        d.stride if d.stride is not None else d.stride_divisor * _UNKNOWN_FACTOR
        for d in facts.dims
    )
    memory = cute.Layout(tv.padded_shape, strides)
    try:
        composed = cute.composition(memory, tv.layout)
    except LayoutError:
        return _vector_width_table(table, facts, edge)  # modes carry between dims
    assert isinstance(composed, cute.Layout)
    thread_mode, value_mode = composed[0], composed[1]
    values = cute.coalesce(value_mode)
    leaves = list(zip(flatten(values.shape), flatten(values.stride), strict=True))
    first_size, first_stride = leaves[0]
    run = first_size if first_stride == 1 else 1  # consecutive addresses in one thread
    more = len(leaves) > 1 or first_stride != 1
    starts = [d for s, d in zip(flatten(thread_mode.shape), flatten(thread_mode.stride),
                                strict=True) if s > 1]
    starts += [d for _, d in leaves[1:]]
    eb = facts.elem_bytes
    v = 1
    while True:
        wider = 2 * v
        if wider * eb > MAX_VECTOR_BYTES:
            limit = Limit.BYTE_CAP
        elif wider > tv.registers:
            limit = Limit.REGISTER_CONTIGUITY
        elif wider > run or (more and run % wider):
            limit = _TableChecks(table, facts, edge).contiguity_limit(wider)
        elif facts.base_align % (wider * eb):
            limit = Limit.ALIGNMENT
        elif any(d % wider for d in starts):
            limit = Limit.STRIDE
        else:
            v = wider
            continue
        break
    return VectorPlan(
        elements=v,
        elem_bytes=eb,
        register_masks=tuple(1 << j for j in range(v.bit_length() - 1)),
        limit=limit,
        tail_elements=_table_tail(table.valid, v),  # type: ignore[arg-type]
        explanation=f"{limit.value} (per-thread value layout {values})",
    )



# ``vectorize`` re-exports this module's names and dispatches to it, so each module imports the
# other at its bottom, once its own names exist: either can be imported first. Used at call
# time only.
from tilekit.layout.vectorize import (  # noqa: E402
    MAX_VECTOR_BYTES,
    Limit,
    TensorFacts,
    VectorPlan,
)
