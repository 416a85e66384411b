"""Distributed layouts: which register of which lane of which warp holds each tile element.

Each constructor returns a ``LinearLayout`` from ``(register, lane, warp)``
to the tile's dims ``dim0`` (rows), ``dim1`` (columns), ... in that order;
warp-level fragments (``ldmatrix``) have no ``warp`` dim. ``register``
counts *elements* held by a thread (two 16-bit elements share a 32-bit
register), and its low bits come first, as the PTX ISA numbers fragment
elements (a0, a1, ...).

A tile larger than what one instruction (or one CTA) covers is covered by
**register repeats**: extra register bits step the footprint along the
most-minor dim first (``order[0]`` for blocked layouts, ``dim1`` for
accumulators, K for mma operands). Lanes and warps beyond a smaller tile
**broadcast**: their bases are zero, so several threads hold the same
element, as Triton's layouts do.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from tilekit.errors import LayoutError
from tilekit.layout.linear import (
    LANE,
    REGISTER,
    WARP,
    LinearLayout,
    log2_exact,
    standard_out_dims,
)

__all__ = [
    "MatrixCount",
    "blocked",
    "broadcast_to",
    "expand_dims",
    "ldmatrix",
    "ldmatrix_row_addresses",
    "mma_m16n8k16_a",
    "mma_m16n8k16_acc",
    "mma_m16n8k16_b",
    "slice_layout",
    "stmatrix",
    "wgmma_a_regs",
    "wgmma_acc",
]

Coord = tuple[int, ...]

# Fragments of one m16n8k16 instruction (and of one warp of m64nNk16), as (row, col) bases.
_ACC_REGS: tuple[Coord, ...] = ((0, 1), (8, 0))
_A_REGS: tuple[Coord, ...] = ((0, 1), (8, 0), (0, 8))
_B_REGS: tuple[Coord, ...] = ((1, 0), (8, 0))
_ROW_GROUP_LANES: tuple[Coord, ...] = ((0, 2), (0, 4), (1, 0), (2, 0), (4, 0))  # t -> col, g -> row
_COL_GROUP_LANES: tuple[Coord, ...] = ((2, 0), (4, 0), (0, 1), (0, 2), (0, 4))  # t -> row, g -> col
_WARPGROUP_WARPS: tuple[Coord, ...] = ((16, 0), (32, 0))


class MatrixCount(enum.Enum):
    """How many 8x8 16-bit matrices one ``ldmatrix`` / ``stmatrix`` moves."""

    X1 = 1
    X2 = 2
    X4 = 4


class _Overflow(enum.Enum):
    """What an index bit does once its level has covered the whole tile dim."""

    BROADCAST = enum.auto()  # maps to 0: several threads hold the same element
    DROP = enum.auto()  # is removed: the thread holds fewer registers


class _TileBuilder:
    """Bases of (register, lane, warp) filled level by level over a power-of-two tile.

    Each tile dim has a next free power-of-two stride; a level claims strides
    in a dim until the tile ends there, after which its bits overflow.
    """

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)
        self.next_stride = [1] * len(shape)
        self.bases: dict[str, list[Coord]] = {REGISTER: [], LANE: [], WARP: []}

    def unit(self, dim: int, value: int) -> Coord:
        return tuple(value if d == dim else 0 for d in range(len(self.shape)))

    def fixed(self, in_dim: str, coords: Sequence[Coord], footprint: Coord | None = None) -> None:
        """Bases given by an instruction's fragment; ``footprint`` is the area now covered."""
        self.bases[in_dim].extend(coords)
        if footprint is not None:
            self.next_stride = list(footprint)

    def extend(self, in_dim: str, dim: int, count: int, overflow: _Overflow) -> None:
        for _ in range(count.bit_length() - 1):
            stride = self.next_stride[dim]
            if stride < self.shape[dim]:
                self.bases[in_dim].append(self.unit(dim, stride))
            elif overflow is _Overflow.BROADCAST:
                self.bases[in_dim].append(self.unit(dim, 0))
            self.next_stride[dim] = stride * 2

    def broadcast(self, in_dim: str, count: int) -> None:
        self.bases[in_dim].extend([self.unit(0, 0)] * (count.bit_length() - 1))

    def repeat_registers(self, order: Sequence[int]) -> None:
        """Extra register bits until the tile is covered, most-minor dim first."""
        for dim in order:
            while self.next_stride[dim] < self.shape[dim]:
                self.bases[REGISTER].append(self.unit(dim, self.next_stride[dim]))
                self.next_stride[dim] *= 2

    def build(self, in_dims: Sequence[str] = (REGISTER, LANE, WARP)) -> LinearLayout:
        outs = list(zip(standard_out_dims(len(self.shape)), self.shape, strict=True))
        return LinearLayout({name: self.bases[name] for name in in_dims}, outs)


def _powers_of_two(values: Sequence[int], rank: int, what: str) -> tuple[int, ...]:
    values = tuple(values)
    if len(values) != rank:
        raise LayoutError(f"{what} has {len(values)} entries, the tile has rank {rank}")
    for v in values:
        log2_exact(v, f"every entry of {what} ({list(values)})")
    return values


def _check_order(order: Sequence[int], rank: int, what: str = "order") -> tuple[int, ...]:
    order = tuple(order)
    if sorted(order) != list(range(rank)):
        raise LayoutError(f"{what} {list(order)} is not a permutation of the dims 0..{rank - 1}")
    return order


def _instruction_tile(
    shape: Sequence[int], instruction: Coord, warps_per_cta: Sequence[int], what: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = _powers_of_two(shape, 2, f"{what} shape")
    warps = _powers_of_two(warps_per_cta, 2, "warps_per_cta")
    if shape[0] < instruction[0] or shape[1] < instruction[1]:
        raise LayoutError(
            f"{what} tile {list(shape)} is smaller than one instruction's "
            f"{instruction[0]}x{instruction[1]}",
            hints=["pad the tile to the instruction shape"],
        )
    return shape, warps


def blocked(
    shape: Sequence[int],
    size_per_thread: Sequence[int],
    threads_per_warp: Sequence[int],
    warps_per_cta: Sequence[int],
    order: Sequence[int],
) -> LinearLayout:
    """Triton's BlockedEncoding: each thread holds a ``size_per_thread`` block.

    Registers, then lanes, then warps tile the dims in ``order`` (most minor
    first); the CTA footprint is ``size_per_thread * threads_per_warp *
    warps_per_cta``. A larger tile repeats the footprint in registers
    (``order[0]`` first); in a smaller tile, register bits past the tile are
    dropped and lane/warp bits past it broadcast. Not a PTX fragment: this is
    the layout of ordinary (vectorized) global loads and elementwise code.
    """
    shape = tuple(shape)
    rank = len(shape)
    _powers_of_two(shape, rank, "shape")
    spt = _powers_of_two(size_per_thread, rank, "size_per_thread")
    tpw = _powers_of_two(threads_per_warp, rank, "threads_per_warp")
    wpc = _powers_of_two(warps_per_cta, rank, "warps_per_cta")
    order = _check_order(order, rank)
    builder = _TileBuilder(shape)
    for dim in order:
        builder.extend(REGISTER, dim, spt[dim], _Overflow.DROP)
    for dim in order:
        builder.extend(LANE, dim, tpw[dim], _Overflow.BROADCAST)
    for dim in order:
        builder.extend(WARP, dim, wpc[dim], _Overflow.BROADCAST)
    builder.repeat_registers(order)
    return builder.build()


def mma_m16n8k16_acc(
    shape: Sequence[int] = (16, 8),
    warps_per_cta: Sequence[int] = (1, 1),
    warp_order: Sequence[int] = (1, 0),
) -> LinearLayout:
    """The f32 accumulator C/D of ``mma.sync.m16n8k16`` (f16/bf16 inputs), tiled.

    PTX ISA 9.2, §9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating
    point type", accumulator figure: with g = lane / 4, t = lane % 4, element
    c_i sits at row g + 8 * (i >= 2), column 2t + (i & 1). Warps tile the
    ``warps_per_cta`` grid of 16x8 instruction tiles in ``warp_order`` (most
    minor first; the default steps along N first); registers repeat the
    warps' footprint along N, then M.
    """
    shape, warps = _instruction_tile(shape, (16, 8), warps_per_cta, "accumulator")
    builder = _TileBuilder(shape)
    builder.fixed(REGISTER, _ACC_REGS)
    builder.fixed(LANE, _ROW_GROUP_LANES, footprint=(16, 8))
    for dim in _check_order(warp_order, 2, "warp_order"):
        builder.extend(WARP, dim, warps[dim], _Overflow.BROADCAST)
    builder.repeat_registers((1, 0))
    return builder.build()


def mma_m16n8k16_a(
    shape: Sequence[int] = (16, 16),
    warps_per_cta: Sequence[int] = (1, 1),
    warp_order: Sequence[int] = (1, 0),
) -> LinearLayout:
    """Operand A (M x K, f16/bf16) of ``mma.sync.m16n8k16``, tiled.

    PTX ISA 9.2, §9.7.14.5.8, Figure 79: element a_i sits at row g + 8 *
    (i in {2, 3, 6, 7}), column 2t + (i & 1) + 8 * (i >= 4). ``warps_per_cta``
    is the accumulator's warp grid: warps along M take new rows, warps along
    N hold the same A (zero bases). Registers repeat along K first (one
    k-step after another), then M.
    """
    shape, warps = _instruction_tile(shape, (16, 16), warps_per_cta, "operand A")
    builder = _TileBuilder(shape)
    builder.fixed(REGISTER, _A_REGS)
    builder.fixed(LANE, _ROW_GROUP_LANES, footprint=(16, 16))
    for dim in _check_order(warp_order, 2, "warp_order"):
        if dim == 0:
            builder.extend(WARP, 0, warps[0], _Overflow.BROADCAST)
        else:
            builder.broadcast(WARP, warps[1])
    builder.repeat_registers((1, 0))
    return builder.build()


def mma_m16n8k16_b(
    shape: Sequence[int] = (16, 8),
    warps_per_cta: Sequence[int] = (1, 1),
    warp_order: Sequence[int] = (1, 0),
) -> LinearLayout:
    """Operand B (K x N, f16/bf16) of ``mma.sync.m16n8k16``, tiled.

    PTX ISA 9.2, §9.7.14.5.8, operand B figure: element b_i sits at row (k)
    2t + (i & 1) + 8 * (i >= 2), column (n) g. Warps along N take new
    columns, warps along M hold the same B (zero bases). Registers repeat
    along K first, then N.
    """
    shape, warps = _instruction_tile(shape, (16, 8), warps_per_cta, "operand B")
    builder = _TileBuilder(shape)
    builder.fixed(REGISTER, _B_REGS)
    builder.fixed(LANE, _COL_GROUP_LANES, footprint=(16, 8))
    for dim in _check_order(warp_order, 2, "warp_order"):
        if dim == 1:
            builder.extend(WARP, 1, warps[1], _Overflow.BROADCAST)
        else:
            builder.broadcast(WARP, warps[0])
    builder.repeat_registers((0, 1))
    return builder.build()


def _warpgroups(warps_per_cta: Sequence[int]) -> tuple[int, int]:
    warps = _powers_of_two(warps_per_cta, 2, "warps_per_cta")
    if warps[0] < 4:
        raise LayoutError(
            f"warps_per_cta {list(warps)} has {warps[0]} warps along M; a warpgroup is 4 "
            "consecutive warps stacked along M",
            hints=["use warps_per_cta = (4 * k, n)"],
        )
    return warps[0], warps[1]


def wgmma_acc(
    shape: Sequence[int],
    instr_n: int | None = None,
    warps_per_cta: Sequence[int] = (4, 1),
) -> LinearLayout:
    """The f32 accumulator of ``wgmma.mma_async.m64nNk16`` over warpgroups, tiled.

    PTX ISA 9.2, §9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16",
    Figure 149: warp w of the warpgroup owns rows 16w..16w+15; thread (g, t)
    holds d_i at row 16w + g + 8 * ((i >> 1) & 1), column 8 * (i >> 2) + 2t +
    (i & 1), so N/2 registers per thread. Warps 0-3 form a warpgroup (64
    rows); further warps stack warpgroups along M, then N. Registers repeat
    the footprint along N, then M. ``instr_n`` defaults to the tile's N per
    warpgroup column, at most 256; F2 needs it to be a power of two.
    """
    wm, wn = _warpgroups(warps_per_cta)
    shape = _powers_of_two(shape, 2, "accumulator shape")
    if instr_n is None:
        instr_n = max(8, min(256, shape[1] // wn))
    log2_exact(instr_n, "instr_n")
    if not 8 <= instr_n <= 256:
        raise LayoutError(f"wgmma N must be in 8..256, got {instr_n}")
    shape, _ = _instruction_tile(shape, (64, instr_n), warps_per_cta, "wgmma accumulator")
    builder = _TileBuilder(shape)
    builder.fixed(REGISTER, _ACC_REGS + tuple((0, n) for n in _powers(8, instr_n)))
    builder.fixed(LANE, _ROW_GROUP_LANES)
    builder.fixed(WARP, _WARPGROUP_WARPS, footprint=(64, instr_n))
    builder.extend(WARP, 0, wm // 4, _Overflow.BROADCAST)
    builder.extend(WARP, 1, wn, _Overflow.BROADCAST)
    builder.repeat_registers((1, 0))
    return builder.build()


def wgmma_a_regs(shape: Sequence[int], warps_per_cta: Sequence[int] = (4, 1)) -> LinearLayout:
    """Operand A (M x K, f16/bf16) of ``wgmma.mma_async.m64nNk16`` held in registers.

    PTX ISA 9.2, §9.7.15.5.1.1.1, Figure 148: warp w of the warpgroup holds
    rows 16w..16w+15 laid out as the m16n8k16 A fragment (a0..a7). Further
    warpgroups along M take new rows; warpgroups along N hold the same A.
    Registers repeat along K (one k16 step after another), then M.
    """
    wm, wn = _warpgroups(warps_per_cta)
    shape, _ = _instruction_tile(shape, (64, 16), warps_per_cta, "wgmma operand A")
    builder = _TileBuilder(shape)
    builder.fixed(REGISTER, _A_REGS)
    builder.fixed(LANE, _ROW_GROUP_LANES)
    builder.fixed(WARP, _WARPGROUP_WARPS, footprint=(64, 16))
    builder.extend(WARP, 0, wm // 4, _Overflow.BROADCAST)
    builder.broadcast(WARP, wn)
    builder.repeat_registers((1, 0))
    return builder.build()


def _powers(start: int, stop: int) -> list[int]:
    """start, 2 * start, ... below stop."""
    values = []
    while start < stop:
        values.append(start)
        start *= 2
    return values


_DEFAULT_MATRIX_PLACES: tuple[Coord, ...] = ((8, 0), (0, 8))


def _matrix_places(count: MatrixCount, matrix_bases: Sequence[Coord] | None) -> list[Coord]:
    bits = count.value.bit_length() - 1
    places = list(_DEFAULT_MATRIX_PLACES[:bits] if matrix_bases is None else matrix_bases)
    if len(places) != bits:
        raise LayoutError(
            f"{count.name} moves {count.value} matrices: give {bits} matrix bases, got {places}"
        )
    return [tuple(p) for p in places]


def _covering_outs(bases: Sequence[Coord]) -> list[tuple[str, int]]:
    sizes = []
    for dim in range(2):
        reach = 0
        for basis in bases:
            reach |= basis[dim]
        sizes.append(1 << reach.bit_length())
    return list(zip(standard_out_dims(2), sizes, strict=True))


def ldmatrix(
    count: MatrixCount, trans: bool = False, matrix_bases: Sequence[Coord] | None = None
) -> LinearLayout:
    """What each lane holds after ``ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.b16``.

    PTX ISA 9.2, §9.7.14.5.15 (ldmatrix), fragment figure: for each 8x8
    matrix, lane l receives row l / 4, columns 2 * (l % 4) and +1 (with
    ``.trans``: rows 2 * (l % 4) and +1 of column l / 4). Rows are the
    16-byte rows whose addresses the lanes supply. ``register`` counts
    16-bit elements: bit 0 is the half of a 32-bit register, higher bits the
    matrix index. ``matrix_bases`` places matrices 1 and 2 (default: below,
    then right of matrix 0: x4 is then the m16n8k16 A fragment, and x2 with
    ``.trans`` the B fragment).
    """
    places = _matrix_places(count, matrix_bases)
    if trans:
        registers, lanes = [(1, 0), *places], _COL_GROUP_LANES
    else:
        registers, lanes = [(0, 1), *places], _ROW_GROUP_LANES
    return LinearLayout(
        {REGISTER: registers, LANE: list(lanes)}, _covering_outs([*registers, *lanes])
    )


def stmatrix(
    count: MatrixCount, trans: bool = False, matrix_bases: Sequence[Coord] | None = None
) -> LinearLayout:
    """What each lane supplies to ``stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.b16`` (sm_90).

    PTX ISA 9.2, stmatrix: the fragment layout is the one ``ldmatrix``
    produces, so this is ``ldmatrix(count, trans, matrix_bases)``.
    """
    return ldmatrix(count, trans, matrix_bases)


def ldmatrix_row_addresses(
    count: MatrixCount, matrix_bases: Sequence[Coord] | None = None
) -> LinearLayout:
    """Which 16-byte row each lane addresses for ``ldmatrix`` / ``stmatrix``: lane -> (row, col).

    Lanes 8j..8j+7 give rows 0..7 of matrix j (only lanes 0-7 for x1, 0-15
    for x2; the others' addresses are ignored: zero bases). The output is
    the tile coordinate of the row's first element.
    """
    places = _matrix_places(count, matrix_bases)
    lanes = [(1, 0), (2, 0), (4, 0), *places] + [(0, 0)] * (2 - len(places))
    return LinearLayout({LANE: lanes}, ldmatrix(count, False, matrix_bases).out_dim_sizes)


def slice_layout(layout: LinearLayout, dim: int) -> LinearLayout:
    """Drop tensor dim ``dim``, as a reduction along it does (Triton's SliceEncoding).

    Threads that differed only along ``dim`` now hold the same element
    (their bases become zero); registers that only stepped along ``dim`` are
    removed. Later dims are renumbered so the outs stay ``dim0``, ``dim1``, ...
    """
    name = f"dim{dim}"
    rank = len(layout.out_dims)
    if not layout.has_out_dim(name) or set(layout.out_dims) != set(standard_out_dims(rank)):
        raise LayoutError(
            f"cannot slice {name}: the layout's out dims are {list(layout.out_dims)}",
            hints=["slice_layout works on tensor dims named dim0, dim1, ..."],
        )
    kept = [n for n in layout.out_dims if n != name]
    sliced = layout.sublayout(layout.in_dims, kept)
    sliced = sliced.rename_outs({f"dim{k}": f"dim{k - 1}" for k in range(dim + 1, rank)})
    if sliced.has_in_dim(REGISTER):
        sliced = sliced.remove_zero_bases([REGISTER])
    return sliced


def expand_dims(layout: LinearLayout, dim: int) -> LinearLayout:
    """Insert a size-1 tensor dim at position ``dim`` (the inverse of a slice's shape change)."""
    rank = len(layout.out_dims)
    if set(layout.out_dims) != set(standard_out_dims(rank)) or not 0 <= dim <= rank:
        raise LayoutError(f"cannot insert dim{dim} into out dims {list(layout.out_dims)}")
    moved = layout.rename_outs({f"dim{k}": f"dim{k + 1}" for k in range(dim, rank)})
    grown = moved.concat_outs(LinearLayout.zeros(layout.in_dim_sizes, {f"dim{dim}": 1}))
    order = sorted(grown.out_dims, key=lambda n: int(n[3:]))
    return grown.transpose_outs(order)


def broadcast_to(layout: LinearLayout, dim: int, size: int) -> LinearLayout:
    """Grow size-1 tensor dim ``dim`` to ``size`` by giving each thread the copies in registers."""
    name = f"dim{dim}"
    if not layout.has_out_dim(name) or layout.out_dim_size(name) != 1:
        raise LayoutError(f"can only broadcast a size-1 out dim, and {name} is not one")
    return layout * LinearLayout.identity_1d(size, REGISTER, name)
