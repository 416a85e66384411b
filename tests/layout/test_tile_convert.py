"""Conversions between tile layouts of any shape (``tile_convert``): every plan, run on
the layouts' tables by ``simulate``, delivers each destination register the element its
layout says; and the plan kinds are the cheapest the data's movement allows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilekit.layout.propagate import LayoutOptions, plan_convert
from tilekit.layout.tile_convert import (
    LaneMap,
    plan_tile_conversion,
    simulate,
    swizzled_staging,
)
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    SliceEncoding,
    TileLayout,
    default_blocked,
)


def flat(layout: TileLayout) -> np.ndarray:
    coords, _ = layout.table()
    if layout.rank == 0:
        return np.zeros(coords.shape[:3], dtype=np.int64)
    return np.ravel_multi_index(np.moveaxis(coords, -1, 0), layout.shape)


def check(src: TileLayout, dst: TileLayout, plan=None) -> str:
    plan = plan or plan_tile_conversion(src, dst)
    got = simulate(plan, src, dst, flat(src))
    np.testing.assert_array_equal(got, flat(dst))
    return plan.kind


def transposed(shape, elem_bytes=4, warps=4):
    t = default_blocked(shape[::-1], warps, 32, elem_bytes)
    return TileLayout(tuple(shape), t.encoding.permuted((1, 0)))


SHAPES = [(16,), (128,), (4097,), (32, 32), (1, 4097), (37, 5), (64, 64), (8, 128),
          (2, 4, 8), (3, 7, 5)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_pair_of_default_layouts(shape):
    layouts = [default_blocked(shape, 4, 32, eb) for eb in (1, 2, 4, 8)]
    if len(shape) == 2:
        layouts += [default_blocked(shape, 4, 32, 4, order=(0, 1)), transposed(shape)]
    for src in layouts:
        for dst in layouts:
            kind = check(src, dst)
            if src == dst:
                assert kind == "REGISTER_PERMUTATION"


def test_kinds_are_the_cheapest_movement():
    a = default_blocked((64, 64), 4, 32, 4)
    assert check(a, a) == "REGISTER_PERMUTATION"
    # 4-byte and 2-byte vectors of one row: elements move between lanes of a warp
    assert check(default_blocked((128,), 1, 32, 4), default_blocked((128,), 1, 32, 2)) == \
        "WARP_SHUFFLE"
    assert check(a, transposed((64, 64))) == "SHARED_STAGING"  # across warps


def test_slices_and_scalars():
    parent = default_blocked((64, 32), 4, 32, 4)
    sliced = TileLayout((64,), SliceEncoding(parent.encoding, 1))
    check(sliced, default_blocked((64,), 4, 32, 4))
    check(default_blocked((64,), 4, 32, 4), sliced)
    scalar = default_blocked((), 4, 32, 4)
    assert check(scalar, scalar) == "REGISTER_PERMUTATION"


@pytest.mark.parametrize("shape", [(64, 64), (32, 128), (128, 64), (64, 16)], ids=str)
@pytest.mark.parametrize("elem_bytes", [2, 4])
def test_swizzled_staging_of_transposes(shape, elem_bytes):
    """Between F2 layouts a staging uses the swizzle plan_conversion synthesized; its
    offsets are checked on every register, and the plan still delivers every element."""
    a = default_blocked(shape, 4, 32, elem_bytes)
    b = transposed(shape, elem_bytes)
    for src, dst in ((a, b), (b, a)):
        _, _, f2 = plan_convert(src, dst, elem_bytes, LayoutOptions())
        plan = swizzled_staging(plan_tile_conversion(src, dst), src, dst, f2)
        assert plan.store is not None and plan.load is not None
        check(src, dst, plan)


def pow2(lo: int, hi: int):
    return st.integers(lo, hi).map(lambda k: 1 << k)


@st.composite
def blocked_2d(draw, shape):
    tpw0 = draw(pow2(0, 5))
    wpc0 = draw(pow2(0, 2))
    return TileLayout(shape, BlockedEncoding(
        (draw(pow2(0, 2)), draw(pow2(0, 3))), (tpw0, 32 // tpw0), (wpc0, 4 // wpc0),
        draw(st.sampled_from([(1, 0), (0, 1)]))))


@settings(max_examples=40, deadline=None)
@given(st.data(), st.tuples(st.integers(1, 40), st.integers(1, 40)))
def test_random_blocked_pairs(data, shape):
    src = data.draw(blocked_2d(shape))
    dst = data.draw(blocked_2d(shape))
    check(src, dst)


def test_lane_map_is_xor_affine():
    m = LaneMap(5, (1, 2, 4, 8, 16))
    assert [m(lane) for lane in range(4)] == [5, 4, 7, 6]
    assert LaneMap(0, (1, 2, 4, 8, 16)).is_identity and not m.is_identity
