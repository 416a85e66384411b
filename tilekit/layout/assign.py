"""Layouts for a matmul tile: the anchors, the shared buffers between them, and the checks.

This is the layout solver's first client, for the one kernel shape every
user benchmarks: ``C[BM, BN] += A[BM, BK] @ B[BK, BN]``. It shows the
decisions the IR-level pass will make for every tile, in order:

1. **anchors** — the layouts hardware fixes: the mma/wgmma accumulator and
   operands, and a blocked layout for each global access with the widest
   vector its tensor allows (``vectorize``);
2. **shared buffers** — for each operand, the swizzle that lets the global
   loads store and the mma side read without bank conflicts (``swizzle``);
3. **admissibility** — on sm_90, whether the operand boxes are TMA tensor
   maps and the shared tiles wgmma descriptors, with the reason when not
   (``tma``, ``wgmma``);
4. **conversions** — the epilogue's accumulator -> store layout plan with its
   cost (``convert``);
5. **checks** — every layout covers its tile (F2 rank), shared layouts are
   bijections, and a synthesized hardware swizzle is proven equal to the
   mode's definition (``isl_lift``).

Everything is pure math on layouts: no IR, no GPU. ``bench/bench_layout.py``
times it (the target: under 100 ms for 128x128x64 on 4 warps).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout import isl_lift
from tilekit.layout.admissibility import Verdict
from tilekit.layout.banks import AccessKind, Target, core_matrix_access, ldmatrix_access
from tilekit.layout.banks import target as bank_target
from tilekit.layout.convert import ConversionPlan, plan_conversion
from tilekit.layout.distributed import (
    MatrixCount,
    blocked,
    mma_m16n8k16_a,
    mma_m16n8k16_acc,
    mma_m16n8k16_b,
    wgmma_acc,
)
from tilekit.layout.linear import LinearLayout
from tilekit.layout.shared import Major, Operand, SwizzleMode, nvidia_swizzle
from tilekit.layout.swizzle import SharedAccess, SwizzleFamily, SwizzlePlan, synthesize_swizzle
from tilekit.layout.tma import (
    GlobalTensor,
    Swizzle,
    TmaDescriptorParams,
    TmaRequest,
    tma_admissibility,
)
from tilekit.layout.vectorize import TensorFacts, VectorPlan, vector_width
from tilekit.layout.wgmma import (
    WgmmaDescriptor,
    WgmmaOperandSpec,
    WgmmaType,
    wgmma_admissibility,
)


class MmaKind(enum.Enum):
    MMA_SYNC = "mma.sync.m16n8k16"  # sm_80: operands through ldmatrix
    WGMMA = "wgmma.m64nNk16"  # sm_90a: operands read from shared by descriptors


@dataclass(frozen=True)
class MatmulTile:
    """One program's tile of a row-major ``C = A @ B`` with 16-bit inputs.

    ``m, n, k`` are the whole problem's sizes (they decide TMA admissibility
    and vector widths); ``bm, bn, bk`` the tile.
    """

    bm: int = 128
    bn: int = 128
    bk: int = 64
    warps: int = 4
    m: int = 4096
    n: int = 4096
    k: int = 4096
    elem_bytes: int = 2
    out_bytes: int = 4
    arch: int = 90

    @property
    def mma(self) -> MmaKind:
        return MmaKind.WGMMA if self.arch >= 90 else MmaKind.MMA_SYNC


@dataclass(frozen=True)
class OperandPlan:
    """Where one operand lives on its way from global memory to the tensor cores."""

    name: str
    tile: tuple[int, int]
    load: LinearLayout  # registers of the global load (blocked)
    load_vector: VectorPlan
    mma: LinearLayout  # what the tensor cores consume (mma.sync operand; the shared tile for wgmma)
    shared: SwizzlePlan
    tma: Verdict[TmaDescriptorParams] | None
    descriptors: tuple[Verdict[WgmmaDescriptor], ...]


@dataclass(frozen=True)
class MatmulTilePlan:
    tile: MatmulTile
    target: Target
    accumulator: LinearLayout
    a: OperandPlan
    b: OperandPlan
    store: LinearLayout
    store_vector: VectorPlan
    epilogue: ConversionPlan
    checks: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        lines = [f"matmul tile {self.tile.bm}x{self.tile.bn}x{self.tile.bk}, {self.tile.warps} "
                 f"warps, {self.tile.mma.value} on {self.target.name}"]
        for op in (self.a, self.b):
            s = op.shared
            tma = "-" if op.tma is None else ("TMA ok" if op.tma.admissible else
                                               "no TMA: " + ", ".join(r.name for r in op.tma.rules))
            desc = ""
            if op.descriptors:
                ok = sum(d.admissible for d in op.descriptors)
                desc = f", wgmma descriptors {ok}/{len(op.descriptors)}"
            lines.append(f"  {op.name}: load {op.load_vector.bytes} B vectors; shared "
                         f"{s.family.name} {s.reason.split(';')[0]}; wavefronts "
                         f"{'/'.join(str(w) for w in s.wavefronts)}; {tma}{desc}")
        lines.append(f"  epilogue: {self.epilogue.kind.name}, cost {self.epilogue.cost.score}; "
                     f"store {self.store_vector.bytes} B vectors")
        lines.extend(f"  check: {c}" for c in self.checks)
        return "\n".join(lines)


def _load_layout(shape: tuple[int, int], elem_bytes: int, warps: int) -> LinearLayout:
    """A row-major global load: 16-byte vectors along the row, lanes across, warps down."""
    vec = max(1, min(16 // elem_bytes, shape[1]))
    across = max(1, min(32, shape[1] // vec))
    return blocked(shape, (1, vec), (32 // across, across), (warps, 1), (1, 0))


def _row_major_facts(rows: int, cols: int, elem_bytes: int) -> TensorFacts:
    return TensorFacts.dense((rows, cols), elem_bytes)


def _offsets(shared: LinearLayout, shape: tuple[int, int], elem_bytes: int) -> np.ndarray:
    """Byte offset of every tile element under a shared layout (offset -> tile)."""
    inverse = shared.invert()
    rows = np.arange(shape[0])[:, None]
    cols = np.arange(shape[1])[None, :]
    out = inverse.apply_array({shared.out_dims[0]: rows, shared.out_dims[1]: cols})
    return np.asarray(out[inverse.out_dims[0]], dtype=np.int64) * elem_bytes


def _descriptors(offsets_mn_k: np.ndarray, operand: Operand, n: int,
                 elem_bytes: int) -> tuple[Verdict[WgmmaDescriptor], ...]:
    """One wgmma descriptor per instruction's operand slice (64 or N rows x 16 k)."""
    spec = WgmmaOperandSpec(operand, WgmmaType.BF16, n)
    rows, ks = spec.shape
    verdicts = []
    for r in range(0, offsets_mn_k.shape[0], rows):
        for k in range(0, offsets_mn_k.shape[1], ks):
            part = offsets_mn_k[r:r + rows, k:k + ks]
            start = int(part.min())
            verdicts.append(wgmma_admissibility(part - start, elem_bytes=elem_bytes,
                                                base_address=start, spec=spec))
    return tuple(verdicts)


def _tma(rows: int, cols: int, box: tuple[int, int], elem_bytes: int, shared: SwizzlePlan,
         arch: int) -> Verdict[TmaDescriptorParams]:
    mode = shared.candidate.mode if shared.family is SwizzleFamily.HARDWARE else SwizzleMode.NONE
    tensor = GlobalTensor(elem_bytes, (rows, cols), (cols, 1), base_align=256, name="operand")
    inner = min(box[1], (mode.value // elem_bytes) if mode.value else box[1])
    return tma_admissibility(TmaRequest(tensor, (box[0], inner), swizzle=Swizzle.from_mode(mode)),
                             arch=arch)


def _operand(name: str, tile: MatmulTile, shape: tuple[int, int], global_shape: tuple[int, int],
             mma_layout: LinearLayout | None, operand: Operand, target: Target) -> OperandPlan:
    eb = tile.elem_bytes
    load = _load_layout(shape, eb, tile.warps)
    vector = vector_width(load, _row_major_facts(*global_shape, eb))
    store_side = SharedAccess(load, AccessKind.WRITE, vector.bytes, f"{name} store")
    k_dim = 1 if operand is Operand.A else 0
    major = Major.K if k_dim == 1 else Major.MN  # row-major operands: A is K-major, B MN-major
    if tile.mma is MmaKind.MMA_SYNC:
        assert mma_layout is not None
        count = MatrixCount.X4 if operand is Operand.A else MatrixCount.X2
        reader = SharedAccess(ldmatrix_access(mma_layout, count, major is Major.MN),
                              AccessKind.LDMATRIX, label=f"{name} ldmatrix",
                              lanes=8 * count.value)
        families = frozenset(SwizzleFamily)
    else:
        reader = SharedAccess(core_matrix_access(shape, 1, eb), AccessKind.CORE_MATRIX,
                              label=f"{name} wgmma")
        families = frozenset({SwizzleFamily.UNSWIZZLED, SwizzleFamily.HARDWARE})
    plan = synthesize_swizzle([store_side, reader], eb, target, families)
    tma = descriptors = None
    if tile.mma is MmaKind.WGMMA:
        tma = _tma(*global_shape, shape, eb, plan, tile.arch)
        offsets = _offsets(plan.shared, shape, eb)
        mn_k = offsets if operand is Operand.A else offsets.T
        descriptors = _descriptors(mn_k, operand, tile.bn, eb)
    return OperandPlan(name, shape, load, vector, mma_layout if mma_layout is not None else
                       plan.shared, plan, tma, descriptors or ())


def _check(plan_layouts: dict[str, LinearLayout], shared: dict[str, SwizzlePlan],
           tile: MatmulTile) -> tuple[str, ...]:
    """The invariants the rest of the compiler relies on; LayoutError if one fails."""
    done = []
    for name, layout in plan_layouts.items():
        if not layout.is_surjective():
            raise LayoutError(f"{name} layout does not cover its tile")
    done.append(f"{len(plan_layouts)} register layouts cover their tiles")
    for name, s in shared.items():
        if not s.shared.is_bijective():
            raise LayoutError(f"shared layout of {name} is not a bijection")
        if s.family is SwizzleFamily.HARDWARE:
            shape = tuple(s.shared.out_dim_size(d) for d in s.shared.out_dims)
            major = Major.K if s.candidate.contiguous_dim == 1 else Major.MN
            reference = nvidia_swizzle(s.candidate.mode, shape, tile.elem_bytes, major,
                                       Operand.A)
            verdict = isl_lift.equal(s.shared, reference)
            if not verdict:
                raise LayoutError(f"shared layout of {name} is not the {s.candidate.mode.name} "
                                  f"hardware swizzle: {verdict}")
            done.append(f"{name} shared == {s.candidate.mode.name} swizzle "
                        f"(decided by {verdict.decided_by.name})")
    done.append("shared layouts are bijections")
    return tuple(done)


def plan_matmul_tile(tile: MatmulTile = MatmulTile()) -> MatmulTilePlan:
    """Assign and check every layout of one matmul tile (see the module docstring)."""
    if tile.warps != 4:
        raise LayoutError("the matmul tile plan covers 4 warps (one warpgroup) for now")
    target = bank_target("sm_90" if tile.arch >= 90 else "sm_80")
    if tile.mma is MmaKind.WGMMA:
        acc = wgmma_acc((tile.bm, tile.bn), warps_per_cta=(4, 1))
        a_mma = b_mma = None
    else:
        warps = (2, 2)
        acc = mma_m16n8k16_acc((tile.bm, tile.bn), warps)
        a_mma = mma_m16n8k16_a((tile.bm, tile.bk), warps)
        b_mma = mma_m16n8k16_b((tile.bk, tile.bn), warps)
    a = _operand("A", tile, (tile.bm, tile.bk), (tile.m, tile.k), a_mma, Operand.A, target)
    b = _operand("B", tile, (tile.bk, tile.bn), (tile.k, tile.n), b_mma, Operand.B, target)
    store = _load_layout((tile.bm, tile.bn), tile.out_bytes, tile.warps)
    store_vector = vector_width(store, _row_major_facts(tile.m, tile.n, tile.out_bytes))
    epilogue = plan_conversion(acc, store, tile.out_bytes, target)
    registers = {"accumulator": acc, "A load": a.load, "B load": b.load, "C store": store}
    if a_mma is not None and b_mma is not None:
        registers.update({"A operand": a_mma, "B operand": b_mma})
    checks = _check(registers, {"A": a.shared, "B": b.shared}, tile)
    return MatmulTilePlan(tile, target, acc, a, b, store, store_vector, epilogue, checks)


__all__ = ["MatmulTile", "MatmulTilePlan", "MmaKind", "OperandPlan", "plan_matmul_tile"]
