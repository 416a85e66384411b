"""The matmul tile plan: every decision checked against an independent computation."""

from __future__ import annotations

import numpy as np
import pytest

from tilekit.errors import LayoutError
from tilekit.layout.admissibility import Rule
from tilekit.layout.assign import MatmulTile, MmaKind, plan_matmul_tile
from tilekit.layout.convert import apply_plan
from tilekit.layout.linear import LANE, REGISTER, WARP


def _holders(layout):
    """tile element -> value id held there, for every (warp, lane, register) (brute force)."""
    w, l, r = (layout.in_dim_size(d) for d in (WARP, LANE, REGISTER))
    ww, ll, rr = np.meshgrid(np.arange(w), np.arange(l), np.arange(r), indexing="ij")
    out = layout.apply_array({WARP: ww, LANE: ll, REGISTER: rr})
    return out["dim0"], out["dim1"]


@pytest.mark.parametrize("arch", [80, 90])
def test_default_tile_is_conflict_free_and_vectorized(arch: int) -> None:
    plan = plan_matmul_tile(MatmulTile(arch=arch))
    assert plan.tile.mma is (MmaKind.WGMMA if arch == 90 else MmaKind.MMA_SYNC)
    for op in (plan.a, plan.b):
        assert op.load_vector.bytes == 16
        assert op.shared.conflict_free, op.shared.reason
        assert op.shared.shared.is_bijective()
    assert plan.store_vector.bytes == 16
    if arch == 90:
        assert plan.a.tma.admissible and plan.b.tma.admissible
        assert all(d.admissible for d in plan.a.descriptors + plan.b.descriptors)
        assert len(plan.a.descriptors) == (128 // 64) * (64 // 16)
    else:
        assert plan.a.tma is None and plan.a.descriptors == ()


def test_epilogue_plan_moves_every_accumulator_element_to_its_store_slot() -> None:
    plan = plan_matmul_tile(MatmulTile(arch=90))
    acc, store = plan.accumulator, plan.store
    rows, cols = _holders(acc)
    values = rows * 1000 + cols  # each value names its tile element
    moved = apply_plan(plan.epilogue, values)
    srows, scols = _holders(store)
    assert np.array_equal(moved, srows * 1000 + scols)


def test_unaligned_row_stride_has_no_tma_descriptor() -> None:
    # bf16 rows of 8092 elements are 16,184 bytes: not a multiple of 16.
    plan = plan_matmul_tile(MatmulTile(arch=90, k=8092))
    assert not plan.a.tma.admissible
    assert Rule.TMA_GLOBAL_STRIDE_ALIGN in plan.a.tma.rules
    assert plan.b.tma.admissible  # B's rows are N = 4096 long
    assert plan.a.load_vector.bytes == 8  # 16,184 = 8 * 2023: 8-byte aligned rows


def test_checks_name_the_hardware_swizzle() -> None:
    plan = plan_matmul_tile(MatmulTile(arch=90))
    assert any("A shared == B128 swizzle" in c for c in plan.checks)
    assert "wgmma" in plan.summary() and "TMA ok" in plan.summary()


def test_other_warp_counts_are_refused_with_a_reason() -> None:
    with pytest.raises(LayoutError, match="4 warps"):
        plan_matmul_tile(MatmulTile(warps=8))
