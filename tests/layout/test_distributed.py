"""Distributed layouts against hand-worked points and independent models.

The models below are written from the PTX ISA fragment formulas and from
Triton's description of BlockedEncoding, with integer arithmetic (div/mod on
whole indices), never with the bit bases the code under test uses.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.layout.distributed import (
    MatrixCount,
    blocked,
    broadcast_to,
    expand_dims,
    ldmatrix,
    ldmatrix_row_addresses,
    mma_m16n8k16_a,
    mma_m16n8k16_acc,
    mma_m16n8k16_b,
    slice_layout,
    stmatrix,
    wgmma_a_regs,
    wgmma_acc,
)
from tilekit.layout.linear import LinearLayout


def _grid(layout: LinearLayout) -> dict[str, np.ndarray]:
    """Every (register, lane, warp) input as flat arrays (built by meshgrid, not bits)."""
    names = layout.in_dims
    axes = np.meshgrid(*(np.arange(layout.in_dim_size(n)) for n in names), indexing="ij")
    return {n: a.ravel() for n, a in zip(names, axes, strict=True)}


def _check_against(layout: LinearLayout, model) -> None:
    inputs = _grid(layout)
    got = layout.apply_array(inputs)
    expected = model(**inputs)
    for dim, values in zip(layout.out_dims, expected, strict=True):
        np.testing.assert_array_equal(got[dim], values % layout.out_dim_size(dim))


def pow2(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high).map(lambda e: 2**e)


# --------------------------------------------------------------------------- PTX fragment formulas
# PTX ISA 9.2, 9.7.14.5.8 (mma.m16n8k16, .f16/.bf16), with g = lane >> 2, t = lane % 4.


def ptx_a(lane, i):
    g, t = lane >> 2, lane % 4
    row = g + 8 * np.isin(i, (2, 3, 6, 7))
    col = 2 * t + (i & 1) + 8 * (i >= 4)
    return row, col


def ptx_b(lane, i):
    g, t = lane >> 2, lane % 4
    return 2 * t + (i & 1) + 8 * (i >= 2), g


def ptx_c(lane, i):
    g, t = lane >> 2, lane % 4
    return g + 8 * (i >= 2), 2 * t + (i & 1)


# ----------------------------------------------------------------------------------------- blocked


def triton_blocked_model(shape, spt, tpw, wpc, order):
    """Triton's blocked encoding, by index arithmetic: element block per thread,
    threads and warps in `order`, the CTA footprint repeated (or wrapped) over the tile."""
    rank = len(shape)
    spt = [min(s, n) for s, n in zip(spt, shape, strict=True)]
    footprint = [spt[d] * tpw[d] * wpc[d] for d in range(rank)]
    reps = [max(1, shape[d] // footprint[d]) for d in range(rank)]

    def digits(value, radices):
        out = [0] * rank
        for d in order:
            out[d] = value % radices[d]
            value = value // radices[d]
        return out, value

    def model(register, lane, warp):
        elem, rest = digits(register, spt)
        rep, _ = digits(rest, reps)
        lane_d, _ = digits(lane, tpw)
        warp_d, _ = digits(warp, wpc)
        return tuple(
            rep[d] * footprint[d] + (warp_d[d] * tpw[d] + lane_d[d]) * spt[d] + elem[d]
            for d in range(rank)
        )

    return model


def test_blocked_worked_example():
    # 16x16 tile, sizePerThread [2, 2], threadsPerWarp [4, 8], warpsPerCTA [2, 1], order [1, 0]:
    # a thread holds a 2x2 block; 8 lanes across the columns (16 = 8 * 2), 4 lanes down the rows,
    # then 2 warps stacked down the rows (16 = 2 * 4 * 2).
    layout = blocked([16, 16], [2, 2], [4, 8], [2, 1], [1, 0])
    points = {
        (0, 0, 0): (0, 0),
        (1, 0, 0): (0, 1),
        (2, 0, 0): (1, 0),
        (3, 0, 0): (1, 1),
        (0, 1, 0): (0, 2),
        (0, 7, 0): (0, 14),
        (0, 8, 0): (2, 0),
        (0, 9, 0): (2, 2),
        (0, 31, 0): (6, 14),
        (0, 0, 1): (8, 0),
        (2, 13, 1): (11, 10),
        (3, 31, 1): (15, 15),
    }
    for (register, lane, warp), (row, col) in points.items():
        got = layout.apply({"register": register, "lane": lane, "warp": warp})
        assert got == {"dim0": row, "dim1": col}, (register, lane, warp)
    assert layout.is_bijective()
    _check_against(layout, triton_blocked_model([16, 16], [2, 2], [4, 8], [2, 1], [1, 0]))


def test_blocked_repeats_in_registers_and_broadcasts_threads():
    taller = blocked([32, 16], [2, 2], [4, 8], [2, 1], [1, 0])
    assert taller.in_dim_size("register") == 8 and taller.basis("register", 2) == (16, 0)
    # 8x8 tile, 4 lanes x 4 columns per thread cover 16 columns: lane bit 1 and the warp wrap.
    small = blocked([8, 8], [1, 4], [8, 4], [2, 1], [1, 0])
    assert small.free_bases() == {"register": 0, "lane": 0b00010, "warp": 0b1}
    assert small.is_surjective() and not small.is_injective()
    # size_per_thread wider than the tile: the extra register bits are dropped.
    narrow = blocked([4, 4], [1, 8], [8, 4], [1, 1], [1, 0])
    assert narrow.in_dim_size("register") == 4
    _check_against(narrow, triton_blocked_model([4, 4], [1, 8], [8, 4], [1, 1], [1, 0]))


@st.composite
def blocked_params(draw):
    rank = draw(st.integers(1, 3))
    shape = [draw(pow2(0, 5)) for _ in range(rank)]
    spt = [draw(pow2(0, 2)) for _ in range(rank)]
    lane_bits = draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank))
    tpw = [2**b for b in lane_bits]
    wpc = [draw(pow2(0, 2)) for _ in range(rank)]
    order = draw(st.permutations(range(rank)))
    return shape, spt, tpw, wpc, list(order)


@given(blocked_params())
def test_blocked_matches_triton_model(params):
    layout = blocked(*params)
    assert layout.in_dims == ("register", "lane", "warp")
    assert layout.is_surjective()  # every element of the tile is held by someone
    _check_against(layout, triton_blocked_model(*params))


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (([16, 16], [2], [4, 8], [2, 1], [1, 0]),
         "size_per_thread has 1 entries, the tile has rank 2"),
        (([16, 16], [3, 2], [4, 8], [2, 1], [1, 0]), "every entry of size_per_thread ([3, 2])"),
        (([16, 12], [2, 2], [4, 8], [2, 1], [1, 0]), "every entry of shape ([16, 12])"),
        (([16, 16], [2, 2], [4, 8], [2, 1], [1, 1]), "order [1, 1] is not a permutation"),
    ],
)
def test_blocked_rejects_bad_parameters(args, reason):
    with pytest.raises(LayoutError) as info:
        blocked(*args)
    assert reason in str(info.value)


# ------------------------------------------------------------------------------- mma.sync m16n8k16


def test_mma_fragments_match_the_ptx_formulas_point_by_point():
    for layout, formula, registers in (
        (mma_m16n8k16_a(), ptx_a, 8),
        (mma_m16n8k16_b(), ptx_b, 4),
        (mma_m16n8k16_acc(), ptx_c, 4),
    ):
        assert layout.in_dim_size("register") == registers and layout.is_bijective()
        for lane in range(32):
            for i in range(registers):
                row, col = formula(lane, i)
                got = layout.apply({"register": i, "lane": lane, "warp": 0})
                assert got == {"dim0": row, "dim1": col}, (lane, i)


def test_mma_worked_points():
    # Lane 6 is g = 1, t = 2: a5 is row 1, col 2t + 1 + 8 = 13; b2 is row 2t + 8 = 12, col 1.
    assert mma_m16n8k16_a().apply({"register": 5, "lane": 6, "warp": 0}) == {"dim0": 1, "dim1": 13}
    assert mma_m16n8k16_b().apply({"register": 2, "lane": 6, "warp": 0}) == {"dim0": 12, "dim1": 1}
    owner = mma_m16n8k16_acc().invert()
    assert owner.apply({"dim0": 9, "dim1": 3}) == {"register": 3, "lane": 5, "warp": 0}


def _tiled(formula, per_instr, instr, shape, warp_step, rep_order):
    """A model of an instruction fragment tiled over warps then register repeats.

    `warp_step(warp) -> (row offset, col offset)`; `rep_order` says which dim's repeats
    come first in the register index.
    """
    rows, cols = shape

    def model(register, lane, warp):
        i = register % per_instr
        rep = register // per_instr
        row, col = formula(lane, i)
        w_row, w_col = warp_step(warp)
        reps_first = max(1, shape[rep_order[0]] // instr[rep_order[0]])
        first, second = rep % reps_first, rep // reps_first
        rep_row, rep_col = (second, first) if rep_order[0] == 1 else (first, second)
        return (rep_row * instr[0] + w_row + row) % rows, (rep_col * instr[1] + w_col + col) % cols

    return model


@st.composite
def mma_params(draw):
    warps = (draw(pow2(0, 2)), draw(pow2(0, 2)))
    return warps, draw(pow2(4, 6)), draw(pow2(3, 6)), draw(pow2(4, 6))  # warps, M, N, K


@given(mma_params())
def test_mma_accumulator_tiles_warps_then_registers(params):
    (wm, wn), m, n, _ = params
    layout = mma_m16n8k16_acc((m, n), (wm, wn))
    footprint = (16 * wm, 8 * wn)
    model = _tiled(ptx_c, 4, footprint, (m, n),
                   lambda w: (16 * (w // wn), 8 * (w % wn)), rep_order=(1, 0))
    _check_against(layout, model)
    assert layout.is_surjective()


@given(mma_params())
def test_mma_operand_a_broadcasts_over_n_warps(params):
    (wm, wn), m, _, k = params
    layout = mma_m16n8k16_a((m, k), (wm, wn))
    model = _tiled(ptx_a, 8, (16 * wm, 16), (m, k), lambda w: (16 * (w // wn), 0), rep_order=(1, 0))
    _check_against(layout, model)


@given(mma_params())
def test_mma_operand_b_broadcasts_over_m_warps(params):
    (wm, wn), _, n, k = params
    layout = mma_m16n8k16_b((k, n), (wm, wn))
    model = _tiled(ptx_b, 4, (16, 8 * wn), (k, n), lambda w: (0, 8 * (w % wn)), rep_order=(0, 1))
    _check_against(layout, model)


def test_mma_rejects_tiles_smaller_than_the_instruction():
    with pytest.raises(LayoutError, match=r"operand A tile \[8, 16\] is smaller than one "
                                          r"instruction's 16x16"):
        mma_m16n8k16_a((8, 16))
    with pytest.raises(LayoutError, match="warp_order"):
        mma_m16n8k16_acc((16, 8), (1, 1), (0, 0))


# ------------------------------------------------------------------------------------------- wgmma


def wgmma_d_model(shape, instr_n, warps):
    """PTX ISA 9.2, Figure 149 (m64nNk16 D): warp w of a warpgroup owns rows 16w..16w+15;
    d_i at row g + 8 * ((i >> 1) & 1), col 8 * (i >> 2) + 2t + (i & 1); warpgroups stack
    along M, then N; register repeats along N, then M."""
    m, n = shape
    wm, wn = warps
    groups_m = wm // 4
    per_instr = instr_n // 2
    reps_n = max(1, n // (instr_n * wn))

    def model(register, lane, warp):
        g, t = lane >> 2, lane % 4
        i, rep = register % per_instr, register // per_instr
        group = warp // 4
        row = 16 * (warp % 4) + g + 8 * ((i >> 1) & 1) + 64 * (group % groups_m)
        col = 8 * (i >> 2) + 2 * t + (i & 1) + instr_n * (group // groups_m)
        row = row + (rep // reps_n) * 64 * groups_m
        col = col + (rep % reps_n) * instr_n * wn
        return row % m, col % n

    return model


def test_wgmma_accumulator_single_warpgroup():
    layout = wgmma_acc((64, 128))
    assert layout.in_dim_sizes == {"register": 64, "lane": 32, "warp": 4}
    assert layout.is_bijective()
    # Warp 2, lane 9 (g = 2, t = 1), d13: row 32 + 2 + 0, col 8 * 3 + 2 + 1.
    assert layout.apply({"register": 13, "lane": 9, "warp": 2}) == {"dim0": 34, "dim1": 27}
    _check_against(layout, wgmma_d_model((64, 128), 128, (4, 1)))


@given(st.sampled_from([(4, 1), (8, 1), (4, 2), (16, 1)]), pow2(6, 8), pow2(3, 8), st.data())
def test_wgmma_accumulator_matches_the_ptx_model(warps, m, n, data):
    assume(n // warps[1] >= 8)
    instr_n = data.draw(pow2(3, min(8, (n // warps[1]).bit_length() - 1)), label="instr_n")
    layout = wgmma_acc((m, n), instr_n, warps)
    repeats = max(1, m // (16 * warps[0])) * max(1, n // (instr_n * warps[1]))
    assert layout.in_dim_size("register") == instr_n // 2 * repeats
    _check_against(layout, wgmma_d_model((m, n), instr_n, warps))


@given(st.sampled_from([(4, 1), (8, 1), (4, 2)]), pow2(6, 7), pow2(4, 6))
def test_wgmma_register_a_matches_the_ptx_model(warps, m, k):
    wm, _ = warps
    groups_m = wm // 4
    reps_k = k // 16

    def model(register, lane, warp):
        i, rep = register % 8, register // 8
        row, col = ptx_a(lane, i)
        row = row + 16 * (warp % 4) + 64 * ((warp // 4) % groups_m)
        row = row + (rep // reps_k) * 64 * groups_m
        return row % m, (col + 16 * (rep % reps_k)) % k

    _check_against(wgmma_a_regs((m, k), warps), model)


def test_wgmma_warpgroups_beyond_the_tile_broadcast():
    layout = wgmma_acc((64, 64), instr_n=64, warps_per_cta=(4, 2))
    assert layout.in_dim_size("warp") == 8 and layout.free_bases()["warp"] == 0b100
    _check_against(layout, wgmma_d_model((64, 64), 64, (4, 2)))


def test_wgmma_rejects_non_warpgroup_shapes():
    with pytest.raises(LayoutError, match="a warpgroup is 4"):
        wgmma_acc((64, 64), warps_per_cta=(2, 2))
    with pytest.raises(LayoutError, match="instr_n must be a positive power of two, got 24"):
        wgmma_acc((64, 64), instr_n=24)
    with pytest.raises(LayoutError, match="smaller than one instruction's 64x16"):
        wgmma_a_regs((32, 16))
    with pytest.raises(LayoutError, match="smaller than one instruction's 64x128"):
        wgmma_acc((64, 64), instr_n=128)


# ----------------------------------------------------------------------------- ldmatrix / stmatrix


def test_ldmatrix_fragments():
    x1 = ldmatrix(MatrixCount.X1)
    for lane in range(32):
        for i in range(2):
            assert x1.apply({"register": i, "lane": lane}) == {
                "dim0": lane // 4, "dim1": 2 * (lane % 4) + i}
    x1t = ldmatrix(MatrixCount.X1, trans=True)
    for lane in range(32):
        for i in range(2):
            assert x1t.apply({"register": i, "lane": lane}) == {
                "dim0": 2 * (lane % 4) + i, "dim1": lane // 4}
    x4 = ldmatrix(MatrixCount.X4)
    for lane in range(32):
        for r in range(8):
            j, i = r >> 1, r & 1
            expected = {"dim0": lane // 4 + 8 * (j & 1), "dim1": 2 * (lane % 4) + i + 8 * (j >> 1)}
            assert x4.apply({"register": r, "lane": lane}) == expected
    assert stmatrix(MatrixCount.X2, trans=True) == ldmatrix(MatrixCount.X2, trans=True)


def test_ldmatrix_feeds_the_mma_fragments():
    a = mma_m16n8k16_a().sublayout(["register", "lane"], ["dim0", "dim1"])
    b = mma_m16n8k16_b().sublayout(["register", "lane"], ["dim0", "dim1"])
    assert ldmatrix(MatrixCount.X4) == a
    assert ldmatrix(MatrixCount.X2, trans=True) == b
    side_by_side = ldmatrix(MatrixCount.X2, matrix_bases=[(0, 8)])
    assert side_by_side.out_dim_sizes == {"dim0": 8, "dim1": 16}


def test_ldmatrix_row_addresses():
    rows = ldmatrix_row_addresses(MatrixCount.X4)
    for lane in range(32):
        assert rows.apply({"lane": lane}) == {
            "dim0": 8 * ((lane >> 3) & 1) + (lane & 7), "dim1": 8 * (lane >> 4)}
    only_eight = ldmatrix_row_addresses(MatrixCount.X1)
    assert only_eight.free_bases() == {"lane": 0b11000}
    with pytest.raises(LayoutError, match="give 2 matrix bases"):
        ldmatrix(MatrixCount.X4, matrix_bases=[(8, 0)])


# --------------------------------------------------------------------------- slices and broadcasts


def _held(layout: LinearLayout, dim: str) -> dict[tuple[int, int], set[int]]:
    """For each (lane, warp): the set of `dim` coordinates the thread holds."""
    table = layout.apply_array(_grid(layout))
    grid = _grid(layout)
    held: dict[tuple[int, int], set[int]] = {}
    for lane, warp, value in zip(grid["lane"], grid["warp"], table[dim], strict=True):
        held.setdefault((int(lane), int(warp)), set()).add(int(value))
    return held


@given(blocked_params().filter(lambda p: len(p[0]) == 2), st.integers(0, 1))
def test_slice_keeps_what_each_thread_holds(params, dim):
    layout = blocked(*params)
    sliced = slice_layout(layout, dim)
    kept = "dim1" if dim == 0 else "dim0"
    assert sliced.out_dims == ("dim0",)
    assert sliced.free_bases()["register"] == 0
    assert _held(sliced, "dim0") == _held(layout, kept)


def test_slice_of_the_worked_example():
    layout = blocked([16, 16], [2, 2], [4, 8], [2, 1], [1, 0])
    rows = slice_layout(layout, 1)
    assert rows.in_dim_sizes == {"register": 2, "lane": 32, "warp": 2}
    assert rows.free_bases()["lane"] == 0b00111  # the 8 lanes of a row now agree
    assert rows.apply({"register": 1, "lane": 9, "warp": 1}) == {"dim0": 11}
    with pytest.raises(LayoutError, match="cannot slice dim2"):
        slice_layout(layout, 2)


@given(blocked_params().filter(lambda p: len(p[0]) == 2))
def test_expand_and_broadcast_restore_a_full_tile(params):
    layout = blocked(*params)
    rows, cols = params[0]
    again = broadcast_to(expand_dims(slice_layout(layout, 1), 1), 1, cols)
    assert again.out_dim_sizes == {"dim0": rows, "dim1": cols}
    assert again.is_surjective()
    held_rows = _held(again, "dim0")
    assert held_rows == _held(layout, "dim0")
    assert all(values == set(range(cols)) for values in _held(again, "dim1").values())


def test_expand_dims_and_broadcast_errors():
    layout = mma_m16n8k16_acc()
    assert expand_dims(layout, 0).out_dims == ("dim0", "dim1", "dim2")
    assert expand_dims(layout, 0).out_dim_sizes == {"dim0": 1, "dim1": 16, "dim2": 8}
    with pytest.raises(LayoutError, match="cannot insert dim5"):
        expand_dims(layout, 5)
    with pytest.raises(LayoutError, match="dim0 is not one"):
        broadcast_to(layout, 0, 4)
