"""Distributed layouts of IR tiles of any shape: which thread holds which element.

``LinearLayout`` (``linear``) is exact algebra for power-of-two tiles; IR tiles
are often not (``arange(4097)``, a ``(1, 4097)`` row, a 37-wide tile). A
:class:`TileLayout` is an *encoding* (how registers, lanes and warps step over
the dims: Triton's blocked and slice encodings) applied to a tile's *shape*.
The encoding's CTA footprint is repeated in registers until the shape is
covered — ``cdiv(extent, footprint)`` repeats, any integer, so a 4097-wide row
on 128 threads with 4-element vectors takes 9 repeats (4608 slots), not 8192.

Each slot a thread holds has an *unwrapped* coordinate per dim. Slots whose
coordinates are inside the shape are the element's **owner** (exactly one per
element); slots past the edge hold the element at ``coordinate mod extent`` — a
replica, as lanes past a small tile broadcast in ``blocked``. So every register
holds a well-defined element, elementwise code needs no guards, and only
effects (stores, atomics) and reductions look at ownership.

For power-of-two shapes the function is exactly ``distributed.blocked`` /
``slice_layout`` (``to_linear``): the tests check it point by point, and
conversions between such layouts are planned by ``convert.plan_conversion``.

The fragments of ``mma.sync.m16n8k16`` (accumulator, operands A and B) are an
encoding too (:class:`MmaEncoding`): the instruction's fixed lane pattern, warps
over a grid of instruction tiles, repeats in registers; ``distributed.mma_m16n8k16_*``
on power-of-two shapes.

A coordinate is affine in per-dim thread digits, which is what code
generation emits: ``coord_d = offset_d(register) + lane_term_d + warp_term_d``
with ``term = ((id // div) % mod) * mult``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tilekit.errors import LayoutError

__all__ = [
    "SCALAR",
    "BlockedEncoding",
    "DimMap",
    "Encoding",
    "MmaEncoding",
    "MmaOperand",
    "ScalarEncoding",
    "SliceEncoding",
    "ThreadTerm",
    "TileLayout",
    "default_blocked",
]


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (max(1, n) - 1).bit_length())


@dataclass(frozen=True)
class BlockedEncoding:
    """Each thread holds a ``size_per_thread`` block; lanes, then warps, tile the dims in
    ``order`` (most minor first). ``threads_per_warp`` and ``warps_per_cta`` are powers of
    two whose products are the warp size and the warp count."""

    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]

    def __post_init__(self) -> None:
        rank = len(self.order)
        fields = (self.size_per_thread, self.threads_per_warp, self.warps_per_cta)
        if any(len(f) != rank for f in fields) or sorted(self.order) != list(range(rank)):
            raise LayoutError(f"malformed blocked encoding {self}")
        if not all(_is_pow2(v) for f in fields for v in f):
            raise LayoutError(f"blocked encoding entries must be powers of two: {self}")

    @property
    def rank(self) -> int:
        return len(self.order)

    @property
    def warp_size(self) -> int:
        return math.prod(self.threads_per_warp)

    @property
    def num_warps(self) -> int:
        return math.prod(self.warps_per_cta)

    def permuted(self, perm: Sequence[int]) -> BlockedEncoding:
        """The encoding of ``permute(x, perm)``: result dim i is operand dim perm[i]."""
        inverse = {p: i for i, p in enumerate(perm)}
        return BlockedEncoding(tuple(self.size_per_thread[p] for p in perm),
                               tuple(self.threads_per_warp[p] for p in perm),
                               tuple(self.warps_per_cta[p] for p in perm),
                               tuple(inverse[d] for d in self.order))

    def __str__(self) -> str:
        def fmt(v: Sequence[int]) -> str:
            return "[" + ",".join(map(str, v)) + "]"
        return (f"#blocked<spt={fmt(self.size_per_thread)} tpw={fmt(self.threads_per_warp)} "
                f"wpc={fmt(self.warps_per_cta)} order={fmt(self.order)}>")


@dataclass(frozen=True)
class SliceEncoding:
    """The parent encoding with tensor dim ``dim`` removed (what a reduction along it
    leaves): threads that differed only along ``dim`` hold the same element."""

    parent: Encoding
    dim: int

    @property
    def rank(self) -> int:
        return self.parent.rank - 1

    @property
    def warp_size(self) -> int:
        return self.parent.warp_size

    @property
    def num_warps(self) -> int:
        return self.parent.num_warps

    def __str__(self) -> str:
        return f"#slice<dim={self.dim}, {self.parent}>"


@dataclass(frozen=True)
class ScalarEncoding:
    """A rank-0 tile: every thread holds the value (thread 0 owns it)."""

    warp_size: int = 32
    num_warps: int = 4

    @property
    def rank(self) -> int:
        return 0

    def __str__(self) -> str:
        return "#scalar"


class MmaOperand(enum.Enum):
    """Which fragment of ``mma.sync.m16n8k16`` an :class:`MmaEncoding` lays out."""

    ACC = "acc"  # C/D, M x N, float32
    A = "a"  # M x K, 16-bit
    B = "b"  # K x N, 16-bit


@dataclass(frozen=True)
class MmaEncoding:
    """The fragments of ``mma.sync.aligned.m16n8k16`` (f16/bf16 inputs, f32 accumulator)
    over a ``warps_per_cta = (wm, wn)`` grid of instruction tiles, the same function as
    ``distributed.mma_m16n8k16_acc`` / ``_a`` / ``_b`` on power-of-two shapes.

    Warp ``w`` is at ``(w // wn, w % wn)`` of the grid (warps step along N first); the
    warps' footprint repeats in registers (accumulator: N, then M; operands: K, then
    M or N). Operand A is the same in warps along N, B in warps along M: those copies are
    replicas (their owner is the warp at grid column, resp. row, 0). A shape that is not
    a multiple of the footprint wraps like a blocked one (``coordinate mod extent``)."""

    operand: MmaOperand
    warps_per_cta: tuple[int, int]
    warp_size: int = 32

    def __post_init__(self) -> None:
        if len(self.warps_per_cta) != 2 or not all(_is_pow2(w) for w in self.warps_per_cta):
            raise LayoutError(f"mma warps_per_cta must be two powers of two: {self}")
        if self.warp_size != 32:
            raise LayoutError("mma.sync fragments are laid out over 32-lane warps")

    @property
    def rank(self) -> int:
        return 2

    @property
    def num_warps(self) -> int:
        return self.warps_per_cta[0] * self.warps_per_cta[1]

    @property
    def instruction(self) -> tuple[int, int]:
        """The tile one instruction's fragment covers."""
        return _MMA_TILE[self.operand]

    def footprint(self) -> tuple[int, int]:
        """The tile the warps cover together, before register repeats."""
        wm, wn = self.warps_per_cta
        rows, cols = self.instruction
        if self.operand is MmaOperand.A:
            return rows * wm, cols
        if self.operand is MmaOperand.B:
            return rows, cols * wn
        return rows * wm, cols * wn

    def repeats(self, shape: Sequence[int]) -> tuple[int, int]:
        """Register repeats along (outer, inner): accumulator (M, N), A (M, K), B (N, K).
        Register ``r`` is fragment element ``r % fragment`` of repeat ``r // fragment``,
        repeat ``j`` being ``(j // inner, j % inner)``."""
        fp = self.footprint()
        reps = [max(1, -(-shape[d] // fp[d])) for d in range(2)]
        if self.operand is MmaOperand.B:
            return reps[1], reps[0]
        return reps[0], reps[1]

    @property
    def fragment(self) -> int:
        """Elements of one instruction's fragment held by each lane (PTX ISA a0.., b0.., c0..)."""
        return len(_MMA_ELEMENTS[self.operand])

    def __str__(self) -> str:
        wm, wn = self.warps_per_cta
        return f"#mma<m16n8k16 {self.operand.value}, warps=[{wm},{wn}]>"


# PTX ISA 9.2, 9.7.14.5.8 (Matrix Fragments for mma.m16n8k16 with floating point type), with
# g = lane / 4 and t = lane % 4: element i of each fragment at (row, col) = base[i] + the lane's
# part. A and the accumulator: (g, 2t); B: (2t, g).
_MMA_TILE = {MmaOperand.ACC: (16, 8), MmaOperand.A: (16, 16), MmaOperand.B: (16, 8)}
_MMA_ELEMENTS: dict[MmaOperand, tuple[tuple[int, int], ...]] = {
    MmaOperand.ACC: ((0, 0), (0, 1), (8, 0), (8, 1)),
    MmaOperand.A: ((0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)),
    MmaOperand.B: ((0, 0), (1, 0), (8, 0), (9, 0)),
}


Encoding = BlockedEncoding | SliceEncoding | ScalarEncoding | MmaEncoding
SCALAR = ScalarEncoding()


@dataclass(frozen=True)
class ThreadTerm:
    """``((id // div) % mod) * mult`` of the lane or warp id (``mod == 1``: no term)."""

    div: int
    mod: int
    mult: int

    def value(self, ids: np.ndarray) -> np.ndarray:
        return ((ids // self.div) % self.mod) * self.mult

    @property
    def span(self) -> int:
        """The largest value the term takes."""
        return (self.mod - 1) * self.mult


@dataclass(frozen=True)
class DimMap:
    """One tensor dim of a layout: per-register offsets plus a lane and a warp term."""

    extent: int
    offsets: tuple[int, ...]  # per register
    lane: ThreadTerm
    warp: ThreadTerm

    @property
    def max_coordinate(self) -> int:
        return max(self.offsets) + self.lane.span + self.warp.span


_NO_TERM = ThreadTerm(1, 1, 0)


def _digits(index: int, radices: Sequence[int]) -> list[int]:
    out = []
    for r in radices:
        out.append(index % r)
        index //= r
    return out


@dataclass(frozen=True)
class TileLayout:
    """An encoding applied to a shape: the layout of one tile value."""

    shape: tuple[int, ...]
    encoding: Encoding

    def __post_init__(self) -> None:
        if len(self.shape) != self.encoding.rank:
            raise LayoutError(f"layout of rank {self.encoding.rank} for shape {self.shape}")
        if any(s < 1 for s in self.shape):
            raise LayoutError(f"tile layouts need positive extents, got {self.shape}")

    def __str__(self) -> str:
        return str(self.encoding)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def warp_size(self) -> int:
        return self.encoding.warp_size

    @property
    def num_warps(self) -> int:
        return self.encoding.num_warps

    # --- the per-dim affine form codegen emits -------------------------------------------

    @cached_property
    def _form(self) -> tuple[tuple[DimMap, ...], tuple[tuple[ThreadTerm, ThreadTerm], ...]]:
        return _affine_form(self.shape, self.encoding)

    @property
    def dims(self) -> tuple[DimMap, ...]:
        """Per tensor dim: register offsets and lane/warp terms of the unwrapped coordinate."""
        return self._form[0]

    @property
    def replica_terms(self) -> tuple[tuple[ThreadTerm, ThreadTerm], ...]:
        """(lane, warp) terms that must be zero for a thread to own its slots (dims sliced
        away, and the whole CTA for scalars)."""
        return self._form[1]

    @property
    def num_regs(self) -> int:
        return len(self.dims[0].offsets) if self.dims else 1

    def register_coords(self, reg: int) -> tuple[int, ...]:
        """The register part of register ``reg``'s coordinate."""
        return tuple(d.offsets[reg] for d in self.dims)

    def may_wrap(self, reg: int, dim: int) -> bool:
        """Whether register ``reg``'s coordinate along ``dim`` can pass the extent."""
        d = self.dims[dim]
        return d.offsets[reg] + d.lane.span + d.warp.span >= d.extent

    def wraps_whole(self, regs: Sequence[int], dim: int) -> bool:
        """Whether registers ``regs``, a run consecutive along ``dim`` (a vector group),
        stay consecutive once wrapped into the tile, in every thread: the run's width
        divides the extent and every thread's first coordinate of it is a multiple of the
        width, so no thread's run straddles the extent (it is all elements or all
        replicas). A row of 1000 bf16 on groups of 8 wraps whole; a row of 4097 does not."""
        d = self.dims[dim]
        width, first = len(regs), d.offsets[regs[0]]
        if any(d.offsets[r] != first + i for i, r in enumerate(regs)):
            return False
        if any(len({other.offsets[r] for r in regs}) > 1
               for k, other in enumerate(self.dims) if k != dim):
            return False
        return (d.extent % width == 0 and first % width == 0
                and all(t.mod == 1 or t.mult % width == 0 for t in (d.lane, d.warp)))

    @property
    def has_replicas(self) -> bool:
        return bool(self.replica_terms) or any(d.max_coordinate >= d.extent for d in self.dims)

    # --- tables (tests, simulation, conversions) -----------------------------------------

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """``coords[warp, lane, reg, dim]`` (wrapped into the shape) and ``owned[warp, lane,
        reg]``: the whole function, for tests and conversion planning."""
        warps = np.arange(self.num_warps).reshape(-1, 1, 1)
        lanes = np.arange(self.warp_size).reshape(1, -1, 1)
        nregs = self.num_regs
        coords = np.zeros((self.num_warps, self.warp_size, nregs, self.rank), dtype=np.int64)
        owned = np.ones((self.num_warps, self.warp_size, nregs), dtype=bool)
        for k, d in enumerate(self.dims):
            raw = (np.asarray(d.offsets).reshape(1, 1, -1) + d.lane.value(lanes)
                   + d.warp.value(warps))
            owned &= raw < d.extent
            coords[..., k] = raw % d.extent
        for lane_term, warp_term in self.replica_terms:
            owned &= (lane_term.value(lanes) == 0) & (warp_term.value(warps) == 0)
        return coords, owned

    @property
    def is_power_of_two(self) -> bool:
        return all(_is_pow2(s) for s in self.shape)

    def to_linear(self):
        """The same function as a ``LinearLayout`` (power-of-two shapes, blocked and slice
        encodings): ``distributed.blocked`` / ``slice_layout``."""
        from tilekit.layout import distributed

        if not self.is_power_of_two:
            raise LayoutError(f"shape {self.shape} is not a power of two in every dim")
        enc = self.encoding
        if isinstance(enc, BlockedEncoding):
            return distributed.blocked(self.shape, enc.size_per_thread, enc.threads_per_warp,
                                       enc.warps_per_cta, enc.order)
        if isinstance(enc, SliceEncoding):
            parent_shape = self.shape[:enc.dim] + (1,) + self.shape[enc.dim:]
            parent = TileLayout(parent_shape, enc.parent).to_linear()
            return distributed.slice_layout(parent, enc.dim)
        if isinstance(enc, MmaEncoding):
            build = {MmaOperand.ACC: distributed.mma_m16n8k16_acc,
                     MmaOperand.A: distributed.mma_m16n8k16_a,
                     MmaOperand.B: distributed.mma_m16n8k16_b}[enc.operand]
            return build(self.shape, enc.warps_per_cta)
        raise LayoutError(f"no linear form for {enc}")


def _blocked_form(shape: Sequence[int], enc: BlockedEncoding):
    """Registers enumerate (vector digit per dim in order, then repeat per dim in order)."""
    rank = len(shape)
    spt = [min(enc.size_per_thread[d], _pow2_ceil(shape[d])) for d in range(rank)]
    tpw, wpc = enc.threads_per_warp, enc.warps_per_cta
    footprint = [spt[d] * tpw[d] * wpc[d] for d in range(rank)]
    reps = [max(1, -(-shape[d] // footprint[d])) for d in range(rank)]
    radices = [spt[d] for d in enc.order] + [reps[d] for d in enc.order]
    nregs = math.prod(radices)
    offsets = [[0] * nregs for _ in range(rank)]
    for r in range(nregs):
        digits = _digits(r, radices)
        for i, d in enumerate(enc.order):
            offsets[d][r] = digits[rank + i] * footprint[d] + digits[i]
    lane_div = warp_div = 1
    lane_terms: list[ThreadTerm] = [_NO_TERM] * rank
    warp_terms: list[ThreadTerm] = [_NO_TERM] * rank
    for d in enc.order:
        lane_terms[d] = ThreadTerm(lane_div, tpw[d], spt[d])
        warp_terms[d] = ThreadTerm(warp_div, wpc[d], spt[d] * tpw[d])
        lane_div *= tpw[d]
        warp_div *= wpc[d]
    dims = tuple(DimMap(shape[d], tuple(offsets[d]), lane_terms[d], warp_terms[d])
                 for d in range(rank))
    return dims, ()


def _term(div: int, mod: int, mult: int) -> ThreadTerm:
    return ThreadTerm(div, mod, mult) if mod > 1 else _NO_TERM


def _mma_form(shape: Sequence[int], enc: MmaEncoding):
    """Registers enumerate (fragment element, inner repeat, outer repeat); see MmaEncoding."""
    wm, wn = enc.warps_per_cta
    op = enc.operand
    elements = _MMA_ELEMENTS[op]
    fp = enc.footprint()
    outer, inner = enc.repeats(shape)
    # (dim of the outer repeat, dim of the inner repeat) and the steps between repeats
    dims = {MmaOperand.ACC: (0, 1), MmaOperand.A: (0, 1), MmaOperand.B: (1, 0)}[op]
    offsets: list[list[int]] = [[], []]
    for j in range(outer * inner):
        step = [0, 0]
        step[dims[0]] = (j // inner) * fp[dims[0]]
        step[dims[1]] = (j % inner) * fp[dims[1]]
        for row, col in elements:
            offsets[0].append(row + step[0])
            offsets[1].append(col + step[1])
    g, t = _term(4, 8, 1), _term(1, 4, 2)
    lanes = (t, g) if op is MmaOperand.B else (g, t)
    by_m, by_n = _term(wn, wm, 16), _term(1, wn, 8)
    warps = {MmaOperand.ACC: (by_m, by_n), MmaOperand.A: (by_m, _NO_TERM),
             MmaOperand.B: (_NO_TERM, by_n)}[op]
    replicas = {MmaOperand.ACC: (), MmaOperand.A: ((_NO_TERM, _term(1, wn, 1)),),
                MmaOperand.B: ((_NO_TERM, _term(wn, wm, 1)),)}[op]
    dimmaps = tuple(DimMap(shape[d], tuple(offsets[d]), lanes[d], warps[d]) for d in range(2))
    return dimmaps, tuple(r for r in replicas if r[1].mod > 1)


def _affine_form(shape: Sequence[int], enc: Encoding):
    if isinstance(enc, ScalarEncoding):
        return (), ((ThreadTerm(1, enc.warp_size, 1), ThreadTerm(1, enc.num_warps, 1)),)
    if isinstance(enc, BlockedEncoding):
        return _blocked_form(shape, enc)
    if isinstance(enc, MmaEncoding):
        return _mma_form(shape, enc)
    # A slice: the parent's form with the dim's register digits fixed to 0 and its thread
    # terms turned into replica conditions. The parent's extent along the dim is 1.
    parent_shape = tuple(shape[:enc.dim]) + (1,) + tuple(shape[enc.dim:])
    dims, replicas = _affine_form(parent_shape, enc.parent)
    gone = dims[enc.dim]
    keep = [r for r, off in enumerate(gone.offsets) if off == 0]
    kept = tuple(DimMap(d.extent, tuple(d.offsets[r] for r in keep), d.lane, d.warp)
                 for k, d in enumerate(dims) if k != enc.dim)
    return kept, tuple(replicas) + ((gone.lane, gone.warp),)


def default_blocked(shape: Sequence[int], num_warps: int = 4, warp_size: int = 32,
                    elem_bytes: int = 4, order: Sequence[int] | None = None,
                    vector_bytes: int = 16) -> TileLayout:
    """The anchor layout of a global access: coalesced along ``order[0]`` (the unit-stride
    dim), ``vector_bytes`` per thread along it, lanes then warps spread over the dims from
    the most minor, warps left over placed on the most major dims (replicas)."""
    shape = tuple(shape)
    rank = len(shape)
    if rank == 0:
        return TileLayout((), ScalarEncoding(warp_size, num_warps))
    order = tuple(order) if order is not None else tuple(reversed(range(rank)))
    spt = [1] * rank
    minor = order[0]
    spt[minor] = min(max(1, vector_bytes // elem_bytes), _pow2_floor(shape[minor]))
    tpw = [1] * rank
    lanes = warp_size
    for d in order:
        want = _pow2_ceil(-(-shape[d] // spt[d]))
        tpw[d] = min(lanes, want)
        lanes //= tpw[d]
    tpw[order[-1]] *= lanes  # leftover lanes replicate along the most major dim
    wpc = [1] * rank
    warps = num_warps
    for d in reversed(order):
        want = _pow2_ceil(-(-shape[d] // (spt[d] * tpw[d])))
        wpc[d] = min(warps, want)
        warps //= wpc[d]
    wpc[order[0]] *= warps
    return TileLayout(shape, BlockedEncoding(tuple(spt), tuple(tpw), tuple(wpc), order))
