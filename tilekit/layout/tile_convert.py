"""How a tile moves between two ``TileLayout``s: renamed registers, warp shuffles, or
shared memory — planned from the layouts' tables, for tiles of any shape.

``convert.plan_conversion`` answers the question in F2 algebra for power-of-two
layouts (and gives the cost model's verdict); this module plans what code
generation emits for *any* pair of tile layouts, and checks itself on the tables:

* **register sources**: for each destination register, the element it needs is
  found in the same warp. Each destination register is a few *pieces*: "every
  lane sends source register ``k``; lane ``l`` reads lane ``F(l)``", with ``F``
  affine over F2 in the lane bits (lane-index arithmetic: XORs of constants), and
  a lane mask saying which lanes take that piece. A piece whose ``F`` is the
  identity is a register rename; otherwise it is one ``shfl.sync.idx``.
  Replicas count as sources too (any copy of the element will do).
* **staging**: some element crosses warps (or no affine lane map exists): the tile
  is written to shared memory at each element's row-major index and read back.

``simulate`` runs a plan on per-(warp, lane, register) values: the test oracle.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from tilekit.layout.tile_layouts import TileLayout

__all__ = ["LaneMap", "Piece", "StagingMap", "TileConversion", "plan_tile_conversion",
           "simulate", "swizzled_staging"]


@dataclass(frozen=True)
class LaneMap:
    """``F(lane) = base ^ XOR of cols[b] over the set bits b of lane``."""

    base: int
    cols: tuple[int, ...]

    def __call__(self, lane: int) -> int:
        out = self.base
        for b, col in enumerate(self.cols):
            if lane >> b & 1:
                out ^= col
        return out

    @property
    def is_identity(self) -> bool:
        return self.base == 0 and all(c == 1 << b for b, c in enumerate(self.cols))


@dataclass(frozen=True)
class Piece:
    """Lanes in ``lanes_mask`` read source register ``reg`` of lane ``lane_map(lane)``."""

    reg: int
    lane_map: LaneMap
    lanes_mask: int


@dataclass(frozen=True)
class StagingMap:
    """Where each thread's registers sit in a staging buffer (element offsets): ``reg[r] ^
    XOR of lane_cols over the lane's set bits ^ XOR of warp_cols over the warp's``. Taken
    from a swizzled F2 staging plan (``convert.plan_conversion``), so that the stores and
    loads avoid bank conflicts."""

    reg: tuple[int, ...]
    lane_cols: tuple[int, ...]
    warp_cols: tuple[int, ...]

    def offset(self, reg: int, lane: int, warp: int) -> int:
        out = self.reg[reg]
        for b, col in enumerate(self.lane_cols):
            if lane >> b & 1:
                out ^= col
        for b, col in enumerate(self.warp_cols):
            if warp >> b & 1:
                out ^= col
        return out

    def accesses(self, count: int, elem_bytes: int) -> tuple[tuple[int, ...], ...]:
        """How each thread moves its ``count`` registers: one access per tuple of
        consecutive registers at consecutive offsets that start on a multiple of the
        tuple's length, for every thread (the XOR keeps such a run whole when every lane
        and warp column is a multiple of its length). The widest length, up to 16 bytes:
        the swizzle was chosen for vectors, and one access per element (what LLVM left of
        them, unable to see through the XOR: a 256 x 32 bf16 transpose's four 16-byte reads
        became 24 2-byte and 2 8-byte ones) puts more wavefronts on the banks than the plan
        counted."""
        n = max(1, 16 // elem_bytes)
        cols = (*self.lane_cols, *self.warp_cols)
        while n > 1:
            if count % n == 0 and all(c % n == 0 for c in cols) and all(
                    self.reg[r] % n == 0
                    and all(self.reg[r + i] == self.reg[r] + i for i in range(n))
                    for r in range(0, count, n)):
                return tuple(tuple(range(r, r + n)) for r in range(0, count, n))
            n //= 2
        return tuple((r,) for r in range(count))


@dataclass(frozen=True)
class TileConversion:
    """A plan: ``sources[r]`` are destination register ``r``'s pieces (``staged``: None).
    A staging writes at ``store``'s offsets and reads at ``load``'s (both None: at each
    element's row-major index); ``shared_elems`` is the buffer's size in elements."""

    staged: bool
    sources: tuple[tuple[Piece, ...], ...] | None
    why: str
    store: StagingMap | None = None
    load: StagingMap | None = None
    shared_elems: int = 0

    @property
    def shuffles(self) -> int:
        if self.sources is None:
            return 0
        return sum(1 for pieces in self.sources for p in pieces if not p.lane_map.is_identity)

    @property
    def kind(self) -> str:
        if self.staged:
            return "SHARED_STAGING"
        return "WARP_SHUFFLE" if self.shuffles else "REGISTER_PERMUTATION"


def _fit_affine(pairs: list[tuple[int, int]], bits: int) -> LaneMap | None:
    """An F2-affine map of ``bits``-bit lanes agreeing with every (lane, target) pair."""
    unknowns = bits + 1  # base, then one column per lane bit
    cols = [0] * bits
    base = 0
    for out_bit in range(bits):
        rows = []
        for lane, target in pairs:
            row = 1 | sum(((lane >> b) & 1) << (b + 1) for b in range(bits))
            rows.append((row, (target >> out_bit) & 1))
        solution = _solve_f2(rows, unknowns)
        if solution is None:
            return None
        base |= (solution & 1) << out_bit
        for b in range(bits):
            cols[b] |= ((solution >> (b + 1)) & 1) << out_bit
    return LaneMap(base, tuple(cols))


def _solve_f2(rows: list[tuple[int, int]], n: int) -> int | None:
    """One solution x (bit i = unknown i) of the F2 system row . x = rhs, or None."""
    pivots: list[tuple[int, int, int]] = []  # (pivot bit, row, rhs)
    for row, rhs in rows:
        for bit, prow, prhs in pivots:
            if row >> bit & 1:
                row ^= prow
                rhs ^= prhs
        if row == 0:
            if rhs:
                return None
            continue
        bit = row.bit_length() - 1
        pivots.append((bit, row, rhs))
    x = 0
    for bit, row, rhs in sorted(pivots):  # low pivots first: their rows hold lower bits only
        value = rhs ^ (bin(row & x & ~(1 << bit)).count("1") & 1)
        x |= value << bit
    return x


def plan_tile_conversion(src: TileLayout, dst: TileLayout) -> TileConversion:
    """The plan that moves a tile from ``src`` to ``dst`` (same shape, same threads)."""
    if src.shape != dst.shape or src.warp_size != dst.warp_size or \
            src.num_warps != dst.num_warps:
        raise ValueError(f"cannot convert {src} to {dst}: shapes or thread counts differ")
    if src.rank == 0:
        return TileConversion(False, ((Piece(0, _identity(src.warp_size), _all(src)),),),
                              "scalars are held by every thread")
    sc, _ = src.table()
    dc, _ = dst.table()
    nw, nl = src.num_warps, src.warp_size
    bits = nl.bit_length() - 1
    holders: list[dict[tuple[int, ...], list[tuple[int, int]]]] = []
    for w in range(nw):
        table: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for lane in range(nl):
            for k in range(src.num_regs):
                table.setdefault(tuple(sc[w, lane, k]), []).append((lane, k))
        holders.append(table)
    sources = []
    for r in range(dst.num_regs):
        choice: list[tuple[int, int]] | None = None
        for w in range(nw):
            picks = []
            for lane in range(nl):
                cands = holders[w].get(tuple(dc[w, lane, r]))
                if not cands:
                    return TileConversion(True, None, "an element crosses warps")
                picks.append(cands)
            chosen = _choose(picks)
            if choice is None:
                choice = chosen
            elif choice != chosen:
                return TileConversion(True, None, "warps move their elements differently")
        assert choice is not None
        pieces = []
        for k in sorted({k for _, k in choice}):
            lanes = [lane for lane in range(nl) if choice[lane][1] == k]
            lane_map = _fit_affine([(lane, choice[lane][0]) for lane in lanes], bits)
            if lane_map is None:
                return TileConversion(True, None, "no XOR lane map for a shuffle")
            pieces.append(Piece(k, lane_map, sum(1 << lane for lane in lanes)))
        sources.append(tuple(pieces))
    plan = TileConversion(False, tuple(sources), "every element stays in its warp")
    return plan


def _choose(picks: list[list[tuple[int, int]]]) -> list[tuple[int, int]]:
    """Per lane, one holder (source lane, register): the own lane when it holds the element,
    else the register most lanes can use (fewer pieces), then the lowest lane."""
    popular = Counter(k for cands in picks for _, k in cands)
    out = []
    for lane, cands in enumerate(picks):
        own = [c for c in cands if c[0] == lane]
        pool = own or cands
        out.append(min(pool, key=lambda c: (-popular[c[1]], c[1], c[0])))
    return out


def _identity(nl: int) -> LaneMap:
    return LaneMap(0, tuple(1 << b for b in range(nl.bit_length() - 1)))


def _all(layout: TileLayout) -> int:
    return (1 << layout.warp_size) - 1


def _staging_map(layout: TileLayout, offsets: np.ndarray) -> StagingMap | None:
    """The XOR form of ``offsets[warp, lane, reg]``, or None when it has none."""
    nw, nl, nr = offsets.shape
    reg = tuple(int(v) for v in offsets[0, 0, :])
    lane_cols = tuple(int(offsets[0, 1 << b, 0] ^ offsets[0, 0, 0])
                      for b in range(nl.bit_length() - 1))
    warp_cols = tuple(int(offsets[1 << b, 0, 0] ^ offsets[0, 0, 0])
                      for b in range(nw.bit_length() - 1))
    smap = StagingMap(reg, lane_cols, warp_cols)
    w, lane, r = np.meshgrid(np.arange(nw), np.arange(nl), np.arange(nr), indexing="ij")
    rebuilt = np.asarray(reg)[r]
    for b, col in enumerate(lane_cols):
        rebuilt = rebuilt ^ np.where(lane >> b & 1, col, 0)
    for b, col in enumerate(warp_cols):
        rebuilt = rebuilt ^ np.where(w >> b & 1, col, 0)
    return smap if np.array_equal(rebuilt, offsets) else None


def swizzled_staging(plan: TileConversion, src: TileLayout, dst: TileLayout,
                     f2_plan) -> TileConversion:
    """``plan`` staged through the swizzled buffer of an F2 ``SHARED_STAGING`` plan, when
    its offsets provably hold each element where both layouts' tables say (checked on
    every register of every thread); ``plan`` unchanged otherwise."""
    from tilekit.layout.linear import LANE, OFFSET, REGISTER, WARP

    staging = getattr(f2_plan, "staging", None)
    if not plan.staged or staging is None:
        return plan
    maps = []
    for layout, f2 in ((src, staging.store), (dst, staging.load)):
        coords, _ = layout.table()
        nw, nl, nr = coords.shape[:3]
        if f2.in_dim_size(REGISTER) != nr or f2.in_dim_size(LANE) != nl or \
                f2.in_dim_size(WARP) != nw:
            return plan
        w, lane, r = np.meshgrid(np.arange(nw), np.arange(nl), np.arange(nr), indexing="ij")
        offsets = f2.apply_array({REGISTER: r, LANE: lane, WARP: w})[OFFSET]
        where = staging.shared.apply_array({OFFSET: offsets})
        for k in range(layout.rank):
            if not np.array_equal(where[f"dim{k}"], coords[..., k]):
                return plan
        smap = _staging_map(layout, offsets)
        if smap is None:
            return plan
        maps.append(smap)
    return TileConversion(True, None, f"{plan.why}; staged through a swizzled buffer",
                          maps[0], maps[1], staging.shared.in_dim_size(OFFSET))


def simulate(plan: TileConversion, src: TileLayout, dst: TileLayout,
             values: np.ndarray) -> np.ndarray:
    """Run ``plan`` on ``values[warp, lane, src register]``: ``[warp, lane, dst register]``.
    Staged plans move every element through its row-major index."""
    nw, nl = src.num_warps, src.warp_size
    out = np.zeros((nw, nl, dst.num_regs), dtype=values.dtype)
    if plan.staged and plan.store is not None and plan.load is not None:
        memory = np.zeros(plan.shared_elems, dtype=values.dtype)
        for w in range(nw):
            for lane in range(nl):
                for k in range(src.num_regs):
                    memory[plan.store.offset(k, lane, w)] = values[w, lane, k]
        for w in range(nw):
            for lane in range(nl):
                for r in range(dst.num_regs):
                    out[w, lane, r] = memory[plan.load.offset(r, lane, w)]
        return out
    if plan.staged:
        sc, _ = src.table()
        dc, _ = dst.table()
        flat = {}
        for w in range(nw):
            for lane in range(nl):
                for k in range(src.num_regs):
                    flat[tuple(sc[w, lane, k])] = values[w, lane, k]
        for w in range(nw):
            for lane in range(nl):
                for r in range(dst.num_regs):
                    out[w, lane, r] = flat[tuple(dc[w, lane, r])]
        return out
    assert plan.sources is not None
    for r, pieces in enumerate(plan.sources):
        for w in range(nw):
            for lane in range(nl):
                for p in pieces:
                    if p.lanes_mask >> lane & 1:
                        out[w, lane, r] = values[w, p.lane_map(lane), p.reg]
    return out
