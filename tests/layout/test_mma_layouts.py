"""The mma.sync pieces of the layout library against independent models.

* ``MmaEncoding`` (``tile_layouts``): every (warp, lane, register) against the PTX ISA's
  fragment formulas for mma.m16n8k16 with .f16/.bf16 (PTX ISA 9.2, 9.7.14.5.8), written
  here with integer arithmetic, tiled over the warp grid and register repeats, wrapped
  past the tile's edge; and against ``distributed.mma_m16n8k16_*`` on power-of-two shapes.
* ``ChunkSwizzle``: a bijection that keeps 16-byte chunks whole, equal to the library's
  classic XOR swizzle (``shared.swizzled_shared``) on power-of-two tiles.
* ``stage_operand``: conflict-free by the bank model (``banks.count_wavefronts``, counted
  here lane by lane) on several shapes, and a whole dot *emulated* from the plan in numpy
  (the stores, each ldmatrix by the PTX ISA's rule of which lane receives which element,
  each mma by the fragment formulas) equal to ``a @ b``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.ir.dtypes import DType
from tilekit.layout import banks
from tilekit.layout.linear import LANE, OFFSET, REGISTER, WARP
from tilekit.layout.mma_sync import (
    ChunkSwizzle,
    FmaPath,
    MmaSyncPlan,
    mma_layouts,
    mma_sync_misfit,
    plan_mma_sync,
    rep_registers,
    stage_operand,
    warp_grid,
)
from tilekit.layout.shared import swizzled_shared
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    MmaEncoding,
    MmaOperand,
    TileLayout,
    default_blocked,
)

SM80 = banks.target("sm_80")
SM90 = banks.target("sm_90")

# --- the PTX ISA's fragments, tiled ----------------------------------------------------------


def ptx_element(operand: MmaOperand, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of fragment element i of ``lane`` in one instruction tile."""
    g, t = lane >> 2, lane % 4
    if operand is MmaOperand.ACC:  # c0..c3
        return g + 8 * (i >= 2), 2 * t + (i & 1)
    if operand is MmaOperand.A:  # a0..a7
        return g + 8 * (i in (2, 3, 6, 7)), 2 * t + (i & 1) + 8 * (i >= 4)
    return 2 * t + (i & 1) + 8 * (i >= 2), g  # b0..b3


def reference_coords(shape, operand: MmaOperand, warps, warp: int, lane: int, reg: int):
    """The tiled fragment by definition: warp (w // wn, w % wn) of the grid; register r is
    element r % F of repeat r // F; repeats step the warps' footprint, the inner repeat
    along N (accumulator) or K (operands); coordinates wrap into the tile."""
    wm, wn = warps
    gm, gn = warp // wn, warp % wn
    frag = {MmaOperand.ACC: 4, MmaOperand.A: 8, MmaOperand.B: 4}[operand]
    e, j = reg % frag, reg // frag
    row, col = ptx_element(operand, lane, e)
    m, n = shape
    if operand is MmaOperand.ACC:
        inner = -(-n // (8 * wn))
        row += 16 * gm + 16 * wm * (j // inner)
        col += 8 * gn + 8 * wn * (j % inner)
    elif operand is MmaOperand.A:
        inner = -(-n // 16)
        row += 16 * gm + 16 * wm * (j // inner)
        col += 16 * (j % inner)
    else:
        inner = -(-m // 16)
        row += 16 * (j % inner)
        col += 8 * gn + 8 * wn * (j // inner)
    return row % m, col % n


GRIDS = [(1, 1), (2, 2), (4, 1), (1, 4), (2, 4), (4, 2), (8, 1), (1, 8)]


@st.composite
def mma_layouts_any_shape(draw):
    operand = draw(st.sampled_from(list(MmaOperand)))
    warps = draw(st.sampled_from(GRIDS))
    step = {MmaOperand.ACC: (16, 8), MmaOperand.A: (16, 16), MmaOperand.B: (16, 8)}[operand]
    shape = (step[0] * draw(st.integers(1, 9)), step[1] * draw(st.integers(1, 9)))
    return TileLayout(shape, MmaEncoding(operand, warps))


@given(mma_layouts_any_shape())
@settings(max_examples=60)
def test_mma_encoding_is_the_ptx_fragment_tiled(layout: TileLayout):
    enc = layout.encoding
    coords, owned = layout.table()
    for w in range(layout.num_warps):
        for lane in range(32):
            for r in range(layout.num_regs):
                want = reference_coords(layout.shape, enc.operand, enc.warps_per_cta, w, lane, r)
                assert tuple(coords[w, lane, r]) == want, (w, lane, r)
    counts = np.zeros(layout.shape, dtype=int)
    np.add.at(counts, (coords[..., 0][owned], coords[..., 1][owned]), 1)
    assert (counts == 1).all()  # every element owned exactly once


@pytest.mark.parametrize("operand", list(MmaOperand))
@pytest.mark.parametrize("warps", GRIDS)
@pytest.mark.parametrize("size", [(16, 16), (32, 64), (128, 32), (64, 128)])
def test_mma_encoding_is_the_library_linear_layout_on_powers_of_two(operand, warps, size):
    layout = TileLayout(size, MmaEncoding(operand, warps))
    linear = layout.to_linear()
    w, lane, r = np.meshgrid(np.arange(layout.num_warps), np.arange(32),
                             np.arange(layout.num_regs), indexing="ij")
    out = linear.apply_array({REGISTER: r, LANE: lane, WARP: w})
    coords, _ = layout.table()
    assert linear.in_dim_size(REGISTER) == layout.num_regs
    np.testing.assert_array_equal(out["dim0"], coords[..., 0])
    np.testing.assert_array_equal(out["dim1"], coords[..., 1])


def test_operand_copies_in_other_warps_are_replicas():
    a = TileLayout((32, 32), MmaEncoding(MmaOperand.A, (2, 2)))
    coords, owned = a.table()
    np.testing.assert_array_equal(coords[0], coords[1])  # warps 0 and 1 differ along N only
    assert owned[0].all() and not owned[1].any()
    b = TileLayout((32, 32), MmaEncoding(MmaOperand.B, (2, 2)))
    coords, owned = b.table()
    np.testing.assert_array_equal(coords[0], coords[2])
    assert owned[1].all() and not owned[3].any()
    assert str(a.encoding) == "#mma<m16n8k16 a, warps=[2,2]>"


def test_malformed_mma_encodings():
    with pytest.raises(LayoutError):
        MmaEncoding(MmaOperand.ACC, (3, 1))
    with pytest.raises(LayoutError):
        MmaEncoding(MmaOperand.ACC, (2, 2), warp_size=64)


# --- fit and warp grid -----------------------------------------------------------------------

BF16, F16, F32 = DType.BFLOAT16, DType.FLOAT16, DType.FLOAT32


@pytest.mark.parametrize("args,reason", [
    ((64, 64, 32, BF16, F32, 4, 32, SM80), None),
    ((16, 8, 16, F16, F16, 4, 32, SM90), None),
    ((64, 64, 32, BF16, BF16, 8, 32, SM90), None),
    ((64, 64, 24, BF16, F32, 4, 32, SM80), "K=24 is not a multiple of 16"),
    ((24, 64, 32, BF16, F32, 4, 32, SM80), "M=24 is not a multiple of 16"),
    ((64, 12, 32, BF16, F32, 4, 32, SM80), "N=12 is not a multiple of 8"),
    ((64, 64, 32, DType.FLOAT32, F32, 4, 32, SM80), "operands are f32"),
    ((64, 64, 32, DType.INT8, DType.INT32, 4, 32, SM80), "operands are i8"),
    ((64, 64, 32, F16, DType.FLOAT64, 4, 32, SM80), "accumulator is f64"),
    ((64, 64, 32, BF16, F32, 4, 64, banks.target("gfx942")), "gfx942 has no ldmatrix"),
])
def test_which_dots_fit_mma_sync(args, reason):
    got = mma_sync_misfit(*args)
    assert (got is None) if reason is None else (reason in got)
    assert repr(FmaPath("K=24 is not a multiple of 16")) == "fma (K=24 is not a multiple of 16)"


@pytest.mark.parametrize("m,n,warps,want", [
    (64, 64, 4, (2, 2)), (128, 128, 8, (4, 2)), (16, 64, 4, (1, 4)), (64, 16, 4, (4, 1)),
    (64, 32, 4, (4, 1)), (16, 8, 4, (4, 1)), (48, 24, 4, (4, 1)),
])
def test_warp_grid(m, n, warps, want):
    assert warp_grid(m, n, warps) == want


@given(st.integers(1, 16), st.integers(1, 32), st.sampled_from([1, 2, 4, 8]))
def test_warp_grid_avoids_replicas_whenever_a_grid_tiles_exactly(tm, tn, warps):
    wm, wn = warp_grid(16 * tm, 8 * tn, warps)
    assert wm * wn == warps
    exact = [(w, warps // w) for w in (1, 2, 4, 8) if w <= warps
             and tm % w == 0 and tn % (warps // w) == 0]
    assert not exact or (tm % wm == 0 and tn % wn == 0)


# --- the shared tile ---------------------------------------------------------------------------

@given(rows=st.integers(1, 12).map(lambda r: 8 * r), cols=st.integers(1, 24).map(lambda c: 8 * c),
       pp=st.sampled_from([1, 2, 4, 8]), mp=st.sampled_from([1, 2, 4, 8]), blocked=st.booleans())
def test_chunk_swizzle_is_a_bijection_keeping_chunks_whole(rows, cols, pp, mp, blocked):
    block = min(64, cols & -cols)
    if mp > block // 8:
        with pytest.raises(LayoutError):
            ChunkSwizzle(rows, cols, pp, mp, blocked)
        return
    sw = ChunkSwizzle(rows, cols, pp, mp, blocked)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    off = sw.offset(r, c)
    assert sorted(off.ravel().tolist()) == list(range(rows * cols))
    np.testing.assert_array_equal(off[:, 1:][c[:, 1:] % 8 != 0],
                                  (off[:, :-1] + 1)[c[:, 1:] % 8 != 0])  # chunks contiguous
    assert (off[:, ::8] % 8 == 0).all()  # and 16-byte aligned


@pytest.mark.parametrize("rows,cols,pp,mp", [(64, 32, 2, 4), (32, 64, 1, 8), (16, 16, 4, 2),
                                             (64, 128, 1, 8), (128, 64, 2, 4), (8, 8, 1, 1)])
def test_chunk_swizzle_is_the_classic_xor_swizzle_on_powers_of_two(rows, cols, pp, mp):
    shared = swizzled_shared((rows, cols), 2, 8, pp, mp, (1, 0))  # offset -> (row, col)
    offsets = np.arange(rows * cols)
    where = shared.apply_array({OFFSET: offsets})
    sw = ChunkSwizzle(rows, cols, pp, mp)
    np.testing.assert_array_equal(sw.offset(where["dim0"], where["dim1"]), offsets)


# --- staging: bank conflicts, and a whole dot emulated from the plan ---------------------------

SHAPES = [  # M, N, K, warps
    (64, 32, 32, 4), (128, 128, 32, 8), (16, 64, 64, 4), (64, 64, 32, 4), (128, 64, 64, 8),
    (32, 32, 16, 4), (16, 16, 16, 4), (16, 8, 16, 4), (48, 24, 48, 4), (96, 40, 80, 4),
    (64, 128, 16, 4), (32, 256, 32, 8),
]


def operand_layouts(m, n, k, warps, transposed_b=False):
    a = default_blocked((m, k), warps, 32, 2)
    b = default_blocked((k, n), warps, 32, 2, order=(0, 1) if transposed_b else None)
    return a, b


def plan_for(m, n, k, warps, target=SM80, transposed_b=False) -> MmaSyncPlan:
    acc, a_mma, b_mma = mma_layouts(m, n, k, warps)
    a, b = operand_layouts(m, n, k, warps, transposed_b)
    return plan_mma_sync(BF16, acc, a_mma, b_mma, stage_operand(a, a_mma, target),
                         stage_operand(b, b_mma, target))


def _count_by_lanes(target, access, addresses) -> int:
    """Wavefronts by definition, instruction by instruction (banks.count_wavefronts)."""
    return sum(banks.count_wavefronts(target, access, row) for row in addresses)


@pytest.mark.parametrize("m,n,k,warps", SHAPES)
def test_staged_operands_read_without_bank_conflicts(m, n, k, warps):
    plan = plan_for(m, n, k, warps)
    for staged in (plan.a, plan.b):
        store, store_ideal, read, read_ideal = staged.wavefronts
        assert read == read_ideal, staged.describe()
        if (m, n, k) not in ((96, 40, 80),):  # 16-byte stores of power-of-two-ish rows
            assert store == store_ideal, staged.describe()
        assert staged.store_width == 8  # 16-byte shared stores
        # the plan's count, recounted one instruction at a time
        rows = np.arange(staged.swizzle.rows)
        assert rows.size  # (the swizzle covers the tile)
        total = 0
        for step in staged.reads:
            for read_ in step:
                r, c = read_.rows(np.arange(32)[None, :])
                warps_ = np.arange(warps)[:, None]
                wr, wc = (t.value(warps_) for t in staged.warp_terms)
                addr = 2 * staged.swizzle.offset((r + wr) % staged.swizzle.rows,
                                                 (c + wc) % staged.swizzle.cols)
                access = banks.Access(banks.AccessKind.LDMATRIX, 16, lanes=8 * read_.count)
                total += _count_by_lanes(SM80, access, addr)
        assert total == read


def test_power_of_two_blocks_take_the_synthesized_swizzle():
    plan = plan_for(128, 128, 32, 8)
    assert plan.a.how == "synthesized" and plan.b.how == "synthesized"
    assert (plan.a.swizzle.per_phase, plan.a.swizzle.max_phase) == (2, 4)  # 64-byte rows
    assert (plan.b.swizzle.per_phase, plan.b.swizzle.max_phase) == (1, 8)  # 256-byte rows
    assert not plan.a.trans and plan.b.trans  # B is K x N row-major: ldmatrix .trans


def test_a_transposed_operand_is_stored_along_its_registers():
    plan = plan_for(64, 64, 32, 4, transposed_b=True)  # B held contiguous along K
    assert plan.b.contiguous == 0 and not plan.b.trans and plan.b.store_width == 8


def ptx_ldmatrix(smem: np.ndarray, rows_addr: np.ndarray, count: int, trans: bool) -> np.ndarray:
    """What each lane receives: ``[lane, word, half]`` from the row addresses (element offsets)
    lanes 8q..8q+7 give for matrix q (PTX ISA, ldmatrix): lane l gets row l / 4, elements
    2 (l % 4) and +1; with .trans, element l / 4 of rows 2 (l % 4) and +1."""
    out = np.zeros((32, count, 2), dtype=smem.dtype)
    for lane in range(32):
        for q in range(count):
            for h in range(2):
                if trans:
                    out[lane, q, h] = smem[rows_addr[8 * q + 2 * (lane % 4) + h] + lane // 4]
                else:
                    out[lane, q, h] = smem[rows_addr[8 * q + lane // 4] + 2 * (lane % 4) + h]
    return out


def ptx_mma(a_words, b_words, c):
    """One m16n8k16 for a warp: fragments ``[lane, element]`` by the PTX ISA formulas."""
    a, b, d = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
    for lane in range(32):
        for i in range(8):
            a[ptx_element(MmaOperand.A, lane, i)] = a_words[lane][i]
        for i in range(4):
            b[ptx_element(MmaOperand.B, lane, i)] = b_words[lane][i]
        for i in range(4):
            d[ptx_element(MmaOperand.ACC, lane, i)] = c[lane][i]
    d = a @ b + d
    return [[d[ptx_element(MmaOperand.ACC, lane, i)] for i in range(4)] for lane in range(32)]


def emulate(plan: MmaSyncPlan, a_layout: TileLayout, b_layout: TileLayout,
            a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` as the plan runs it: stores, ldmatrix, mma, warp by warp."""
    nw = plan.acc.num_warps
    words = {}
    for name, staged, lay, x, frag in (("A", plan.a, a_layout, a, plan.a_layout),
                                       ("B", plan.b, b_layout, b, plan.b_layout)):
        coords, _ = lay.table()
        smem = np.full(staged.swizzle.elements, np.nan)
        for group in staged.store_groups:
            for r in group:
                rr, cc = staged.memory((coords[:, :, r, 0], coords[:, :, r, 1]))
                smem[staged.swizzle.offset(rr, cc)] = x[coords[:, :, r, 0], coords[:, :, r, 1]]
        per_rep = {}
        for step in staged.reads:
            for read in step:
                r, c = read.rows(np.arange(32))
                for w in range(nw):
                    wr, wc = (int(t.value(np.array(w))) for t in staged.warp_terms)
                    rows_addr = staged.swizzle.offset((r + wr) % staged.swizzle.rows,
                                                      (c + wc) % staged.swizzle.cols)
                    got = ptx_ldmatrix(smem, rows_addr, read.count, staged.trans)
                    for q, (rep, i) in enumerate(read.words):
                        regs = rep_registers(frag, rep)
                        per_rep.setdefault((w, rep), np.zeros((32, len(regs))))
                        per_rep[(w, rep)][:, 2 * i:2 * i + 2] = got[:, q, :]
        words[name] = per_rep
    acc = np.zeros((nw, 32, plan.acc.num_regs))
    for step in plan.steps:
        for s in step:
            for w in range(nw):
                out = ptx_mma(words["A"][(w, s.a)], words["B"][(w, s.b)], acc[w][:, list(s.acc)])
                acc[w][:, list(s.acc)] = np.array(out)
    coords, owned = plan.acc.table()
    result = np.full(plan.acc.shape, np.nan)
    result[coords[..., 0][owned], coords[..., 1][owned]] = acc[owned]
    # replicas hold the same values as their owners
    np.testing.assert_array_equal(acc, result[coords[..., 0], coords[..., 1]])
    return result


@pytest.mark.parametrize("m,n,k,warps,transposed_b", [
    (64, 32, 32, 4, False), (16, 64, 64, 4, False), (32, 32, 16, 4, True), (16, 8, 16, 4, False),
    (48, 24, 48, 4, False), (16, 16, 32, 4, True), (64, 16, 16, 2, False), (32, 48, 32, 8, True),
])
def test_emulated_plan_computes_the_product(m, n, k, warps, transposed_b):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float64)
    b = rng.integers(-4, 5, (k, n)).astype(np.float64)
    plan = plan_for(m, n, k, warps, transposed_b=transposed_b)
    a_lay, b_lay = operand_layouts(m, n, k, warps, transposed_b)
    np.testing.assert_array_equal(emulate(plan, a_lay, b_lay, a, b), a @ b)


def test_operands_in_fragment_layouts_need_no_staging():
    acc, a_mma, b_mma = mma_layouts(64, 32, 16, 4)
    plan = plan_mma_sync(F16, acc, a_mma, b_mma, None, None)
    assert "A from registers" in repr(plan) and "B from registers" in repr(plan)
    assert len(plan.steps) == 1 and len(plan.steps[0]) == 4  # warps 4x1: one m-tile, 4 n-tiles


def test_staging_refuses_non_operand_layouts():
    acc, _, _ = mma_layouts(32, 32, 32, 4)
    with pytest.raises(LayoutError, match="not an mma operand layout"):
        stage_operand(default_blocked((32, 32), 4, 32, 2), acc, SM80)


def test_a_blocked_operand_without_vectors_stores_element_by_element():
    _, a_mma, _ = mma_layouts(32, 32, 32, 4)
    scalar = TileLayout((32, 32), BlockedEncoding((1, 1), (4, 8), (4, 1), (1, 0)))
    staged = stage_operand(scalar, a_mma, SM80)
    assert staged.store_width == 1 and len(staged.store_groups) == scalar.num_regs


# --- the accumulator meets ordinary layouts -------------------------------------------------------

@pytest.mark.parametrize("shape,warps", [((64, 64), (2, 2)), ((16, 8), (4, 1)),
                                         ((48, 40), (2, 2)), ((128, 64), (4, 2))])
def test_conversions_from_the_accumulator_move_every_element(shape, warps):
    """mma accumulator -> the blocked store layout, and accumulator -> operand A (a dot of a
    dot): the planned moves, simulated, put every element where the target's table says."""
    from tilekit.layout.propagate import LayoutOptions, plan_convert
    from tilekit.layout.tile_convert import plan_tile_conversion, simulate, swizzled_staging

    nw = warps[0] * warps[1]
    src = TileLayout(shape, MmaEncoding(MmaOperand.ACC, warps))
    targets = [default_blocked(shape, nw, 32, 4)]
    if shape[1] % 16 == 0:
        targets.append(TileLayout(shape, MmaEncoding(MmaOperand.A, warps)))
    sc, _ = src.table()
    values = sc[..., 0] * 1000 + sc[..., 1]  # each slot holds its element's name
    for dst in targets:
        plan = plan_tile_conversion(src, dst)
        _, _, f2_plan = plan_convert(src, dst, 4, LayoutOptions(nw, 32, "sm_80"))
        for p in (plan, swizzled_staging(plan, src, dst, f2_plan)):
            dc, _ = dst.table()
            np.testing.assert_array_equal(simulate(p, src, dst, values),
                                          dc[..., 0] * 1000 + dc[..., 1])
        if dst.encoding == MmaEncoding(MmaOperand.A, warps) and warps[1] == 1:
            assert plan.kind == "REGISTER_PERMUTATION"  # c0..c3 of two n-tiles are a0..a7
