"""``tk.dot`` on tensor cores with ``mma.sync.aligned.m16n8k16`` (sm_80; also on sm_90a).

Pure layout math; ``tilekit.codegen.lower_mma`` emits what a plan says and decides nothing.

* **Fit** (``mma_sync_misfit``): f16 or bf16 operands, a float accumulator of at most 32
  bits (a 16-bit one is widened to float32 for the whole dot and rounded once at the end,
  as the interpreter does), M a multiple of 16, N of 8, K of 16, 32-lane warps, and a
  target whose bank model has ``ldmatrix``. Any other dot keeps the FMA lowering; the
  reason is kept for ``TILEKIT_DUMP=layout``.
* **Warps** (``warp_grid``): the accumulator's ``(wm, wn)`` grid of 16x8 instruction
  tiles, without replicated warps or registers when possible, then with the fewest
  instructions per warp, then the fewest ``ldmatrix`` words per warp.
* **Operands.** An operand held in the instruction's fragment layout is used from its
  registers (the layout pass converts to it when that needs no shared memory, e.g. a
  previous dot's accumulator cast to 16 bits). Any other is *staged* (``stage_operand``):
  its registers store it to a shared tile, ``ldmatrix.m8n8.{x4,x2}[.trans]`` reads the
  fragments back. The tile is row-major along the dim the registers hold contiguously
  (their stores are then 16-byte vectors), cut into column blocks of at most 128 bytes,
  and swizzled by XOR on 16-byte chunks (``ChunkSwizzle``). The swizzle is the one
  ``swizzle.synthesize_swizzle`` picks for a power-of-two model of a block (16-byte
  stores, ldmatrix rows); the plan then counts both sides' wavefronts on the real tile
  with ``banks.count_wavefronts_each`` and searches the XOR family itself when the model's
  choice is not conflict-free there.
* **Stages read in place** (``stage_read``). A pipeline stage that a copy engine fills
  (``tk.pipeline``) is a row-major tile, so its memory row is the operand's dim 1 (A: K,
  ``ldmatrix``; B: N, ``ldmatrix.trans``). When the stage's only reader is a dot, the
  schedule asks ``stage_read`` for the ``ChunkSwizzle`` to fill it in, chosen as above with
  the copy's writes (consecutive 16-byte chunks by consecutive threads, the tile's
  ``default_blocked`` layout) in place of register stores; ``ldmatrix`` then reads the
  fragments straight from the stage, with no stores and no barrier of the dot's own. A copy
  in 8- or 4-byte chunks (rows not 16-byte aligned) writes the same swizzle: it permutes
  whole 16-byte chunks, so a narrower chunk lands inside one; only its write wavefronts
  are counted anew.
* **Checks.** Each read is simulated element by element against the PTX ISA's ldmatrix
  semantics: every lane must receive exactly the elements of its fragment registers
  (``LayoutError`` otherwise, before any code exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from tilekit.errors import LayoutError
from tilekit.ir.dtypes import DType
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    MmaEncoding,
    MmaOperand,
    ThreadTerm,
    TileLayout,
    default_blocked,
)

if TYPE_CHECKING:  # the bank models are imported when a dot is planned, not with the pass
    from tilekit.layout.banks import Target

__all__ = [
    "ChunkSwizzle",
    "FmaPath",
    "LdmatrixRead",
    "MmaStep",
    "MmaSyncPlan",
    "StagedOperand",
    "mma_layouts",
    "mma_sync_misfit",
    "plan_mma_sync",
    "stage_operand",
    "stage_read",
    "warp_grid",
]

INPUTS = frozenset({DType.FLOAT16, DType.BFLOAT16})
ACCUMULATORS = frozenset({DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16})
VEC = 8  # 16-bit elements in one 16-byte chunk (an ldmatrix row)


@dataclass(frozen=True)
class FmaPath:
    """Why a dot is lowered on FMA units (the printed form is what dumps show)."""

    reason: str

    def __repr__(self) -> str:
        return f"fma ({self.reason})"


def mma_sync_misfit(m: int, n: int, k: int, inputs: DType, acc: DType, num_warps: int,
                    warp_size: int, target: Target) -> str | None:
    """None when ``acc[m, n] += a[m, k] @ b[k, n]`` fits mma.sync.m16n8k16, else why not."""
    from tilekit.layout.banks import Access, AccessKind

    if not target.supports(Access(AccessKind.LDMATRIX, 16)):
        return f"{target.name} has no ldmatrix / mma.sync"
    if warp_size != 32:
        return f"mma.sync needs 32-lane warps, not {warp_size}"
    if inputs not in INPUTS:
        return f"operands are {inputs.short}, mma.sync takes f16 or bf16"
    if acc not in ACCUMULATORS:
        return f"the accumulator is {acc.short}, mma.sync accumulates in f32"
    for name, size, step in (("M", m, 16), ("N", n, 8), ("K", k, 16)):
        if size % step:
            return f"{name}={size} is not a multiple of {step}"
    if num_warps & (num_warps - 1):
        return f"{num_warps} warps is not a power of two"
    return None


def warp_grid(m: int, n: int, num_warps: int) -> tuple[int, int]:
    """``(wm, wn)``: how the warps tile the accumulator's 16x8 instruction tiles."""
    tiles_m, tiles_n = m // 16, n // 8
    best = None
    wm = 1
    while wm <= num_warps:
        wn = num_warps // wm
        per_m, per_n = -(-tiles_m // wm), -(-tiles_n // wn)
        replicas = tiles_m % wm != 0 or tiles_n % wn != 0
        key = (replicas, per_m * per_n, 4 * per_m + 2 * per_n, -wm)
        if best is None or key < best[0]:
            best = (key, (wm, wn))
        wm *= 2
    assert best is not None
    return best[1]


def mma_layouts(m: int, n: int, k: int, num_warps: int
                ) -> tuple[TileLayout, TileLayout, TileLayout]:
    """The accumulator's and the operands' fragment layouts on the dot's warp grid."""
    warps = warp_grid(m, n, num_warps)
    return (TileLayout((m, n), MmaEncoding(MmaOperand.ACC, warps)),
            TileLayout((m, k), MmaEncoding(MmaOperand.A, warps)),
            TileLayout((k, n), MmaEncoding(MmaOperand.B, warps)))


# --- the shared tile -----------------------------------------------------------------------

@dataclass(frozen=True)
class ChunkSwizzle:
    """Where element ``(row, col)`` of a ``rows x cols`` shared tile of 16-bit elements sits.

    Row-major with a pitch of ``cols`` elements, the 16-byte chunks of row ``r`` permuted
    by XOR with ``(r // per_phase) % max_phase`` inside each *block* of ``block`` elements
    (the largest power of two that divides ``cols``, at most 64: 128 bytes). For a
    power-of-two ``cols`` this is ``shared.swizzled_shared(..., vec=8, per_phase,
    max_phase)``. With ``blocked``, each block is instead a ``rows x block`` tile of its own,
    the blocks one after another (a block then starts on a 128-byte boundary, whatever
    ``cols`` is). Either way a chunk stays 8 contiguous elements: an ldmatrix row, a
    16-byte store."""

    rows: int
    cols: int
    per_phase: int = 1
    max_phase: int = 1
    blocked: bool = False

    def __post_init__(self) -> None:
        if self.rows % 8 or self.cols % VEC or self.rows <= 0 or self.cols <= 0:
            raise LayoutError(f"a chunk-swizzled tile has rows and cols in multiples of 8, "
                              f"not {self.rows}x{self.cols}")
        for v in (self.per_phase, self.max_phase):
            if v < 1 or v & (v - 1):
                raise LayoutError(f"per_phase and max_phase are powers of two: {self}")
        if self.max_phase > self.block // VEC:
            raise LayoutError(f"max_phase {self.max_phase} exceeds the {self.block // VEC} "
                              f"chunks of a {self.block}-element block")

    @property
    def block(self) -> int:
        return min(64, self.cols & -self.cols)

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    def offset(self, row, col):
        """The element offset of ``(row, col)`` (ints or numpy arrays)."""
        blk, inner = col // self.block, col % self.block
        chunk = (inner // VEC) ^ ((row // self.per_phase) % self.max_phase)
        if self.blocked:
            start = blk * (self.rows * self.block) + row * self.block
        else:
            start = row * self.cols + blk * self.block
        return start + chunk * VEC + col % VEC

    def describe(self) -> str:
        blocks = f", {self.cols // self.block} blocks of {self.block} one after another" \
            if self.blocked and self.block < self.cols else ""
        if self.max_phase == 1:
            return f"{self.rows}x{self.cols} unswizzled{blocks}"
        return (f"{self.rows}x{self.cols} XOR 16-byte chunks per_phase={self.per_phase} "
                f"max_phase={self.max_phase}{blocks}")


@dataclass(frozen=True)
class LdmatrixRead:
    """One ``ldmatrix.m8n8`` of every warp: ``count`` (4 or 2) 8x8 matrices into ``count``
    32-bit words; word ``q`` holds fragment elements ``2i, 2i+1`` of repeat ``rep`` for
    ``words[q] = (rep, i)``. Lane ``l`` gives the address of the shared row (8 elements)
    at memory coordinates ``origin + sum of lane_steps[b] over the set bits b of l`` plus
    the warp's part (``StagedOperand.warp_terms``), wrapped into the tile."""

    count: int
    words: tuple[tuple[int, int], ...]
    origin: tuple[int, int]
    lane_steps: tuple[tuple[int, int], ...]

    def rows(self, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unwrapped memory (row, col) of each lane's row address, before the warp's part."""
        r = np.full(lanes.shape, self.origin[0])
        c = np.full(lanes.shape, self.origin[1])
        for b, (dr, dc) in enumerate(self.lane_steps):
            bit = (lanes >> b) & 1
            r, c = r + bit * dr, c + bit * dc
        return r, c


@dataclass(frozen=True)
class StagedOperand:
    """An operand's trip through shared memory: its registers store it (``store_width``
    elements per access, register groups ``store_groups``), each k-step's ``reads`` load
    the fragments. Memory coordinates are the operand's, swapped when ``contiguous`` is 0
    (the memory row runs along the operand's dim ``contiguous``)."""

    operand: MmaOperand
    contiguous: int
    trans: bool
    swizzle: ChunkSwizzle
    store_width: int
    store_groups: tuple[tuple[int, ...], ...]
    reads: tuple[tuple[LdmatrixRead, ...], ...]
    warp_terms: tuple[ThreadTerm, ThreadTerm]  # memory (row, col) parts of the warp id
    wavefronts: tuple[int, int, int, int]  # stores, their ideal, reads, their ideal
    how: str
    in_place: bool = False  # a pipeline stage read where the copy put it (``stage_read``)
    chunk_bytes: int = 16  # in place: the copy's chunk (16, or 8 or 4: part of a 16-byte one)

    @property
    def name(self) -> str:
        return self.operand.name

    @property
    def bytes(self) -> int:
        return 2 * self.swizzle.elements

    @property
    def conflict_free(self) -> bool:
        store, store_ideal, read, read_ideal = self.wavefronts
        return store == store_ideal and read == read_ideal

    def memory(self, coords: tuple) -> tuple:
        """Operand (dim 0, dim 1) coordinates as memory (row, col)."""
        return coords if self.contiguous == 1 else (coords[1], coords[0])

    def __repr__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        store, store_ideal, read, read_ideal = self.wavefronts
        x = "x4/x2" if any(r.count == 2 for rs in self.reads for r in rs) else "x4"
        if self.in_place:
            return (f"{self.name} read in place from its pipeline stage, ldmatrix.{x}"
                    f"{'.trans' if self.trans else ''}, {self.swizzle.describe()} ({self.how}), "
                    f"written in {self.chunk_bytes}-byte chunks"
                    f"{'' if self.chunk_bytes == 16 else ' inside the swizzled 16-byte ones'}; "
                    f"wavefronts: chunk writes {store}/{store_ideal}, "
                    f"reads {read}/{read_ideal}")
        return (f"{self.name} staged, ldmatrix.{x}{'.trans' if self.trans else ''}, "
                f"{self.swizzle.describe()} ({self.how}), {2 * self.store_width}-byte stores; "
                f"wavefronts: stores {store}/{store_ideal}, reads {read}/{read_ideal}")


@dataclass(frozen=True)
class MmaStep:
    """One mma: accumulator registers (c0..c3 of one repeat), the A and B repeats."""

    acc: tuple[int, int, int, int]
    a: int
    b: int


@dataclass(frozen=True)
class MmaSyncPlan:
    """How one dot runs on mma.sync: layouts, operand sources (None: registers) and the
    instructions, k-step by k-step."""

    inputs: DType
    acc: TileLayout
    a_layout: TileLayout
    b_layout: TileLayout
    a: StagedOperand | None
    b: StagedOperand | None
    steps: tuple[tuple[MmaStep, ...], ...]
    # Operands whose registers a pipeline stage's in-place read (``stage_read``) filled
    from_stage: tuple[bool, bool] = (False, False)

    @property
    def warps(self) -> tuple[int, int]:
        enc = self.acc.encoding
        assert isinstance(enc, MmaEncoding)
        return enc.warps_per_cta

    def describe(self) -> str:
        (m, n), k = self.acc.shape, self.a_layout.shape[1]
        wm, wn = self.warps
        count = sum(len(s) for s in self.steps)
        parts = [f"mma.sync.m16n8k16 {self.inputs.short} {m}x{n}x{k}, warps {wm}x{wn}, "
                 f"{count} mma per warp"]
        for name, staged, stage in (("A", self.a, self.from_stage[0]),
                                    ("B", self.b, self.from_stage[1])):
            parts.append(staged.describe() if staged is not None else
                         f"{name} from registers" + (" (ldmatrix from its pipeline stage)"
                                                     if stage else ""))
        return "; ".join(parts)

    def __repr__(self) -> str:
        return self.describe()


def rep_registers(layout: TileLayout, rep: int) -> range:
    """The registers of fragment repeat ``rep`` of an mma-encoded layout, in PTX order."""
    enc = layout.encoding
    assert isinstance(enc, MmaEncoding)
    return range(rep * enc.fragment, (rep + 1) * enc.fragment)


def plan_mma_sync(inputs: DType, acc: TileLayout, a_layout: TileLayout, b_layout: TileLayout,
                  a: StagedOperand | None, b: StagedOperand | None,
                  from_stage: tuple[bool, bool] = (False, False)) -> MmaSyncPlan:
    """The instructions of ``acc += a @ b`` on the layouts of ``mma_layouts``."""
    enc = acc.encoding
    assert isinstance(enc, MmaEncoding)
    reps_m, reps_n = enc.repeats(acc.shape)
    reps_k = a_layout.shape[1] // 16
    steps = []
    for ks in range(reps_k):
        row = []
        for rm in range(reps_m):
            for rn in range(reps_n):
                first = 4 * (rm * reps_n + rn)
                row.append(MmaStep((first, first + 1, first + 2, first + 3),
                                   rm * reps_k + ks, rn * reps_k + ks))
        steps.append(tuple(row))
    return MmaSyncPlan(inputs, acc, a_layout, b_layout, a, b, tuple(steps), from_stage)


# --- staging an operand ----------------------------------------------------------------------

@lru_cache(maxsize=256)
def stage_operand(registers: TileLayout, fragment: TileLayout, target: Target
                  ) -> StagedOperand:
    """How an operand held in ``registers`` reaches the ``fragment`` layout (an A or B
    ``MmaEncoding``) through shared memory: the orientation whose stores are widest, then
    cheapest, and its swizzle (module docstring)."""
    enc = fragment.encoding
    if not isinstance(enc, MmaEncoding) or enc.operand is MmaOperand.ACC:
        raise LayoutError(f"{fragment} is not an mma operand layout")
    if registers.shape != fragment.shape or registers.num_warps != fragment.num_warps:
        raise LayoutError(f"cannot stage {registers} into {fragment}: shapes or warps differ")
    preferred = _contiguous_dim(registers, enc.operand)
    best: StagedOperand | None = None
    for contiguous in (preferred, 1 - preferred):
        if best is not None and best.conflict_free and best.store_width == VEC:
            break  # 16-byte stores, no conflict: nothing to gain
        staged = _stage(registers, fragment, contiguous, target)
        if best is None or _rank(staged) < _rank(best):
            best = staged
    assert best is not None
    return best


@lru_cache(maxsize=256)
def stage_read(fragment: TileLayout, target: Target, chunk_bytes: int = 16) -> StagedOperand:
    """How ``ldmatrix`` reads the ``fragment`` layout (an A or B ``MmaEncoding``) from a
    pipeline stage that a copy engine fills row-major in ``chunk_bytes`` chunks: the stage's
    ``ChunkSwizzle`` (the copy writes it) and the reads (module docstring). The swizzle is
    the one chosen for 16-byte chunks whatever ``chunk_bytes`` is: it permutes whole 16-byte
    chunks, so an 8- or 4-byte chunk lands inside one, at the swizzled chunk's address plus
    its offset in it; only the counted write wavefronts change. So the same fragment always
    gets the same swizzle, and the schedule, which fills the stage, and the layout pass,
    which reads it, agree. ``LayoutError`` when no read fits."""
    from dataclasses import replace

    enc = fragment.encoding
    if not isinstance(enc, MmaEncoding) or enc.operand is MmaOperand.ACC:
        raise LayoutError(f"{fragment} is not an mma operand layout")
    if chunk_bytes not in (4, 8, 16):
        raise LayoutError(f"copy chunks are 4, 8 or 16 bytes, not {chunk_bytes}")
    writes = default_blocked(fragment.shape, fragment.num_warps, 32, 2)
    staged = replace(_stage(writes, fragment, 1, target), in_place=True)
    if chunk_bytes == 16:
        return staged
    # the same swizzle and reads, the wavefronts of the narrower chunk writes counted
    writes = default_blocked(fragment.shape, fragment.num_warps, 32, 2,
                             vector_bytes=chunk_bytes)
    width, groups = _store_groups(writes, 1)
    narrow = replace(staged, store_width=width, store_groups=groups, chunk_bytes=chunk_bytes)
    return _costed(narrow, staged.swizzle, writes.table()[0], fragment, target, staged.how)


def _rank(s: StagedOperand) -> tuple[int, int]:
    store, _, read, _ = s.wavefronts
    return len(s.store_groups), store + read


def _contiguous_dim(layout: TileLayout, operand: MmaOperand) -> int:
    """The dim along which a thread's registers run (its stores' vectors), else K's."""
    enc = layout.encoding
    if isinstance(enc, BlockedEncoding) and enc.size_per_thread[enc.order[0]] > 1:
        return enc.order[0]
    if isinstance(enc, MmaEncoding):  # element pairs: along N (acc), K (A and B)
        return 0 if enc.operand is MmaOperand.B else 1
    return 1 if operand is MmaOperand.A else 0


def _stage(registers: TileLayout, fragment: TileLayout, contiguous: int, target: Target
           ) -> StagedOperand:
    enc = fragment.encoding
    assert isinstance(enc, MmaEncoding)
    operand = enc.operand
    # The fragment's element pairs run along K: dim 1 of A, dim 0 of B. ldmatrix gives a lane
    # two neighbours along the memory row, so it transposes when the memory row is not K.
    k_dim = 1 if operand is MmaOperand.A else 0
    trans = contiguous != k_dim
    rows, cols = (fragment.shape if contiguous == 1 else fragment.shape[::-1])
    width, groups = _store_groups(registers, contiguous)
    warp_terms = (fragment.dims[0].warp, fragment.dims[1].warp)
    if contiguous == 0:
        warp_terms = warp_terms[::-1]
    reads = _reads(fragment, contiguous, trans)
    draft = StagedOperand(operand, contiguous, trans, ChunkSwizzle(rows, cols), width,
                          groups, reads, warp_terms, (0, 0, 0, 0), "")
    _check_reads(draft, fragment)
    coords, _ = registers.table()
    proposal = _proposal(rows, cols, registers.num_warps, target)
    candidates = [proposal] if proposal is not None else []
    how = "synthesized"
    best = None
    for attempt in range(2):
        if attempt == 1:
            if best is not None and best.conflict_free:
                break
            block = ChunkSwizzle(rows, cols).block
            how = "searched: the synthesized swizzle conflicts on this tile" \
                if proposal is not None else "searched: no power-of-two model"
            candidates = [ChunkSwizzle(rows, cols, pp, mp, blocked)
                          for blocked in (False, True) for mp in (1, 2, 4, 8)
                          for pp in (1, 2, 4, 8) if mp <= block // VEC
                          and (not blocked or block < cols)]
        for swizzle in candidates:
            staged = _costed(draft, swizzle, coords, fragment, target, how)
            if best is None or sum(staged.wavefronts[::2]) < sum(best.wavefronts[::2]):
                best = staged
    assert best is not None
    return best


def _store_groups(layout: TileLayout, contiguous: int
                  ) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """Runs of registers one shared store can write: consecutive and aligned along the
    memory row in every thread (the same width for all), 16 bytes at most."""
    n = layout.num_regs
    d = layout.dims[contiguous]
    others = [layout.dims[k] for k in range(layout.rank) if k != contiguous]
    for width in (8, 4, 2):
        if n % width or layout.shape[contiguous] % width:
            continue
        if any(t.mod > 1 and t.mult % width for t in (d.lane, d.warp)):
            continue
        ok = True
        for g in range(0, n, width):
            first = d.offsets[g]
            if first % width or any(d.offsets[g + i] != first + i for i in range(width)) or \
                    any(o.offsets[g + i] != o.offsets[g] for o in others for i in range(width)):
                ok = False
                break
        if ok:
            return width, tuple(tuple(range(g, g + width)) for g in range(0, n, width))
    return 1, tuple((r,) for r in range(n))


def _reads(fragment: TileLayout, contiguous: int, trans: bool
           ) -> tuple[tuple[LdmatrixRead, ...], ...]:
    """Per k-step, the ldmatrix of each repeat (A: one x4 each; B: x4 for two n-repeats,
    x2 for one left over), with the lane row addresses fitted from the fragment layout."""
    enc = fragment.encoding
    assert isinstance(enc, MmaEncoding)
    outer, inner = enc.repeats(fragment.shape)  # A: (M, K), B: (N, K); inner is K
    out = []
    for ks in range(inner):
        reps = [o * inner + ks for o in range(outer)]
        if enc.operand is MmaOperand.A:
            groups = [((j, 0), (j, 1), (j, 2), (j, 3)) for j in reps]
        else:
            groups = [((reps[i], 0), (reps[i], 1), (reps[i + 1], 0), (reps[i + 1], 1))
                      for i in range(0, len(reps) - 1, 2)]
            if len(reps) % 2:
                groups.append(((reps[-1], 0), (reps[-1], 1)))
        out.append(tuple(_fit_read(fragment, words, contiguous, trans) for words in groups))
    return tuple(out)


def _row_source(lane: int, count: int, trans: bool) -> tuple[int, int, int]:
    """Which fragment element's holder tells lane ``lane``'s row address: (matrix, the
    element's half in its word, the holding lane). ldmatrix (PTX ISA, fragment figure):
    lane l receives row l / 4, elements 2 (l % 4) and +1 of each matrix; with ``.trans``
    rows 2 (l % 4) and +1 of column l / 4. Row i of a matrix is therefore held by lane
    4 i (half 0) or, transposed, by lane i / 2 (half i % 2)."""
    q, i = (lane >> 3) % count, lane & 7
    return (q, i & 1, i >> 1) if trans else (q, 0, 4 * i)


def _fit_read(fragment: TileLayout, words: tuple[tuple[int, int], ...], contiguous: int,
              trans: bool) -> LdmatrixRead:
    count = len(words)
    points = []
    for lane in range(32):
        q, half, holder = _row_source(lane, count, trans)
        rep, word = words[q]
        reg = rep_registers(fragment, rep)[2 * word + half]
        coord = [d.offsets[reg] + int(d.lane.value(np.array(holder))) for d in fragment.dims]
        points.append(coord if contiguous == 1 else coord[::-1])
    origin = tuple(points[0])
    steps = tuple(tuple(points[1 << b][d] - origin[d] for d in range(2)) for b in range(5))
    read = LdmatrixRead(count, words, (int(origin[0]), int(origin[1])),
                        tuple((int(r), int(c)) for r, c in steps))
    r, c = read.rows(np.arange(32))
    if [list(p) for p in zip(r.tolist(), c.tolist())] != [list(p) for p in points]:
        raise LayoutError("internal: ldmatrix row addresses are not affine in the lane bits")
    if (c % VEC).any():
        raise LayoutError("internal: an ldmatrix row does not start on a 16-byte chunk")
    return read


def _read_rows(staged: StagedOperand, read: LdmatrixRead, warps: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Wrapped memory (row, col) of every ``[warp, lane]``'s row address."""
    r, c = read.rows(np.arange(32)[None, :])
    wr, wc = (t.value(warps[:, None]) for t in staged.warp_terms)
    rows, cols = staged.swizzle.rows, staged.swizzle.cols
    return (r + wr) % rows, (c + wc) % cols


def _check_reads(staged: StagedOperand, fragment: TileLayout) -> None:
    """Simulate every ldmatrix: each lane must receive its fragment registers' elements."""
    coords, _ = fragment.table()  # [warp, lane, reg, dim], wrapped
    nw = fragment.num_warps
    warps = np.arange(nw)
    lanes = np.arange(32)
    for step in staged.reads:
        for read in step:
            rows, cols = _read_rows(staged, read, warps)  # [warp, lane]
            for q, (rep, word) in enumerate(read.words):
                for half in range(2):
                    if staged.trans:
                        src = 8 * q + 2 * (lanes & 3) + half
                        got_r, got_c = rows[:, src], cols[:, src] + (lanes >> 2)
                    else:
                        src = 8 * q + (lanes >> 2)
                        got_r, got_c = rows[:, src], cols[:, src] + 2 * (lanes & 3) + half
                    reg = rep_registers(fragment, rep)[2 * word + half]
                    want = staged.memory((coords[:, :, reg, 0], coords[:, :, reg, 1]))
                    if not (np.array_equal(got_r, want[0]) and np.array_equal(got_c, want[1])):
                        raise LayoutError(
                            f"internal: ldmatrix word {q} of {staged.name} does not deliver "
                            f"fragment register {reg}")


def _proposal(rows: int, cols: int, num_warps: int, target: Target) -> ChunkSwizzle | None:
    """The XOR swizzle ``synthesize_swizzle`` picks for a power-of-two model of one block:
    16-byte row-major stores against ldmatrix rows (what every orientation reads)."""
    from tilekit.layout.banks import AccessKind, ldmatrix_access
    from tilekit.layout.distributed import MatrixCount, blocked, mma_m16n8k16_a
    from tilekit.layout.swizzle import SharedAccess, SwizzleFamily, synthesize_swizzle

    block = ChunkSwizzle(rows, cols).block
    model_rows = min(64, rows & -rows)
    if block < 16 or model_rows < 16:
        return None  # one chunk per row, or too few rows for an x4 model: nothing to model
    across = min(32, block // VEC)
    store = blocked((model_rows, block), (1, VEC), (32 // across, across), (num_warps, 1),
                    (1, 0))
    read = mma_m16n8k16_a((model_rows, block), (1, 1))
    plan = synthesize_swizzle(
        [SharedAccess(store, AccessKind.WRITE, 16, "stores"),
         SharedAccess(ldmatrix_access(read, MatrixCount.X4, False), AccessKind.LDMATRIX,
                      label="ldmatrix", lanes=32)],
        2, target, frozenset({SwizzleFamily.UNSWIZZLED, SwizzleFamily.CLASSIC}))
    cand = plan.candidate
    if cand.family is SwizzleFamily.CLASSIC and cand.classic is not None \
            and cand.classic.vec == VEC and cand.classic.order == (1, 0):
        return ChunkSwizzle(rows, cols, cand.classic.per_phase, cand.classic.max_phase)
    if cand.family is SwizzleFamily.UNSWIZZLED and cand.order == (1, 0):
        return ChunkSwizzle(rows, cols)
    return None


def _costed(draft: StagedOperand, swizzle: ChunkSwizzle, coords: np.ndarray,
            fragment: TileLayout, target: Target, how: str) -> StagedOperand:
    """``draft`` with ``swizzle`` and both sides' wavefronts counted on every instruction
    (``coords``: the registers' table, ``[warp, lane, register, dim]``)."""
    from dataclasses import replace

    from tilekit.layout.banks import Access, AccessKind, count_wavefronts_each

    staged = replace(draft, swizzle=swizzle, how=how)
    warps = np.arange(fragment.num_warps)
    by_count: dict[int, list[np.ndarray]] = {}
    for step in staged.reads:
        for read in step:
            rows, cols = _read_rows(staged, read, warps)
            by_count.setdefault(read.count, []).append(2 * swizzle.offset(rows, cols))
    reads = read_ideal = 0
    for count, parts in by_count.items():
        access = Access(AccessKind.LDMATRIX, 16, lanes=8 * count)
        addresses = np.concatenate(parts)
        reads += int(count_wavefronts_each(target, access, addresses).sum())
        read_ideal += addresses.shape[0] * len(target.phases(access))
    store = Access(AccessKind.WRITE, 2 * staged.store_width)
    firsts = [g[0] for g in staged.store_groups]
    r, c = staged.memory((coords[:, :, firsts, 0], coords[:, :, firsts, 1]))  # [warp, lane, g]
    addresses = (2 * swizzle.offset(r, c)).transpose(0, 2, 1).reshape(-1, 32)
    stores = int(count_wavefronts_each(target, store, addresses).sum())
    store_ideal = addresses.shape[0] * len(target.phases(store))
    return replace(staged, wavefronts=(stores, store_ideal, reads, read_ideal))
