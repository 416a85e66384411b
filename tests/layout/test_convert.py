"""Layout conversions: every plan, simulated, puts every element where dst wants it.

The oracle is independent of ``tilekit.layout.convert``: each (warp, lane, register) value is
the flat index of the tile element the source layout puts there, evaluated from the raw bases
by definition (XOR of the images of set bits, numpy); after ``apply_plan`` each destination
slot must hold the flat index of the element the destination layout puts there.

Generated conversions are built on the hardware side: ``dst = src o P`` for a matrix ``P`` on
(register | lane | warp) bits whose block structure bounds how far data may move (inside a
thread, inside a warp, anywhere); the planner may find a cheaper kind (broadcast copies give
it freedom), never a dearer one, and its simulation must be exact.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.layout.strategies import invertible_matrices
from tilekit.errors import LayoutError
from tilekit.layout.banks import AMD_GFX942, NVIDIA_SM80, NVIDIA_SM90
from tilekit.layout.convert import (
    ConversionKind,
    apply_plan,
    plan_conversion,
)
from tilekit.layout.distributed import (
    blocked,
    mma_m16n8k16_a,
    mma_m16n8k16_acc,
    wgmma_a_regs,
    wgmma_acc,
)
from tilekit.layout.linear import LinearLayout

HW = ("register", "lane", "warp")

# ------------------------------------------------------------------------------------ reference


def element_ids(layout: LinearLayout) -> np.ndarray:
    """ids[warp, lane, register]: flat index (dim0 fastest) of the element held there."""
    bases = layout.bases
    sizes = {n: 2 ** len(bases.get(n, ())) for n in HW}
    w, l, r = np.meshgrid(*(np.arange(sizes[n]) for n in ("warp", "lane", "register")),
                          indexing="ij")
    point = {"register": r, "lane": l, "warp": w}
    dims = sorted(layout.out_dims, key=lambda n: int(n[3:]))
    coords = {d: np.zeros(r.shape, dtype=np.int64) for d in dims}
    for name in HW:
        for bit, image in enumerate(bases.get(name, ())):
            on = (point[name] >> bit) & 1
            for d, x in zip(layout.out_dims, image, strict=True):
                coords[d] ^= on * x
    flat = np.zeros(r.shape, dtype=np.int64)
    scale = 1
    for d in dims:
        flat += coords[d] * scale
        scale *= layout.out_dim_size(d)
    return flat


def assert_moves_every_element(plan, src: LinearLayout, dst: LinearLayout) -> None:
    got = apply_plan(plan, element_ids(src))
    np.testing.assert_array_equal(got, element_ids(dst))


# ----------------------------------------------------------------------------------- strategies


def _columns_layout(columns: list[int], ins: list[tuple[str, int]], outs: list[tuple[str, int]]):
    """A layout from flat columns (first in dim's bits first; out bits dim0 first)."""
    bases, position = {}, 0
    for name, bits in ins:
        images = []
        for column in columns[position:position + bits]:
            image, shift = [], 0
            for _, out_bits in outs:
                image.append((column >> shift) & ((1 << out_bits) - 1))
                shift += out_bits
            images.append(tuple(image))
        bases[name] = images
        position += bits
    return LinearLayout(bases, [(n, 2**b) for n, b in outs])


class Reach:
    THREAD, WARP, ANYWHERE = ConversionKind.REGISTER_PERMUTATION, ConversionKind.WARP_SHUFFLE, \
        ConversionKind.SHARED_STAGING


@st.composite
def conversions(draw: st.DrawFn, reach: ConversionKind):
    """(src, dst): src holds every element of a small tile (some hardware bits broadcast);
    dst = src o P with P confined by ``reach`` (and possibly singular: dst broadcasts)."""
    rs, rd, nl, nw = draw(st.integers(0, 3)), draw(st.integers(0, 3)), 5, draw(st.integers(0, 2))
    n_src = rs + nl + nw
    tile_bits = draw(st.integers(max(1, n_src - 2), n_src))
    basis = draw(invertible_matrices(n_src))
    # tile_bits independent columns, the rest of src's bits broadcast (zero) or repeat others
    positions = list(draw(st.permutations(range(n_src))))
    columns = [0] * n_src
    for k, position in enumerate(positions):
        if k < tile_bits:
            columns[position] = basis[k] & ((1 << tile_bits) - 1) or (1 << (k % tile_bits))
    # make the image the whole tile: a basis of the tile's bits among the chosen columns
    chosen = positions[:tile_bits]
    unit = draw(invertible_matrices(tile_bits))
    for k, position in enumerate(chosen):
        columns[position] = unit[k]
    dim0 = draw(st.integers(0, tile_bits))
    outs = [("dim0", dim0), ("dim1", tile_bits - dim0)]
    src = _columns_layout(columns, [("register", rs), ("lane", nl), ("warp", nw)], outs)

    reg_s = range(rs)
    lane_s = range(rs, rs + nl)
    warp_s = range(rs + nl, n_src)

    def random_in(bits) -> int:
        value = 0
        for b in bits:
            if draw(st.booleans()):
                value |= 1 << b
        return value

    p_columns = []
    for _ in range(rd):  # dst register bits
        if reach is Reach.THREAD:
            p_columns.append(random_in(reg_s))
        elif reach is Reach.WARP:
            p_columns.append(random_in([*reg_s, *lane_s]))
        else:
            p_columns.append(random_in(range(n_src)))
    for i in range(nl):
        if reach is Reach.THREAD:
            p_columns.append((1 << lane_s[i]) | random_in(reg_s))
        elif reach is Reach.WARP:
            p_columns.append(random_in([*reg_s, *lane_s]))
        else:
            p_columns.append(random_in(range(n_src)))
    for i in range(nw):
        if reach is Reach.ANYWHERE:
            p_columns.append(random_in(range(n_src)))
        else:
            p_columns.append((1 << warp_s[i]) | random_in([*reg_s, *lane_s] if reach is Reach.WARP
                                                          else reg_s))
    if rs and rd and draw(st.booleans()):  # keep register pairs together (packed shuffles)
        p_columns = [1] + [c & ~1 for c in p_columns[1:]]
    dst_columns = []
    for p in p_columns:
        acc = 0
        for b in range(n_src):
            if p >> b & 1:
                acc ^= columns[b]
        dst_columns.append(acc)
    dst = _columns_layout(dst_columns, [("register", rd), ("lane", nl), ("warp", nw)], outs)
    return src, dst


def check_generated(src: LinearLayout, dst: LinearLayout, reach: ConversionKind, eb: int):
    plan = plan_conversion(src, dst, eb, NVIDIA_SM90)
    assert plan.kind.value <= reach.value, plan.explanation
    assert_moves_every_element(plan, src, dst)
    if plan.kind is ConversionKind.WARP_SHUFFLE:
        assert plan.cost.barriers == 0 and plan.cost.shared_bytes == 0
        # the schedule reads only inside each warp and writes every destination word once
        for r in plan.shuffle.rounds:
            assert all(0 <= lane < 32 for warp in r.source_lane for lane in warp)
    return plan


# ------------------------------------------------------------------------------ property tests


@given(conversions(Reach.THREAD), st.sampled_from([1, 2, 4, 8]))
def test_thread_local_conversions_rename_registers(pair, eb):
    src, dst = pair
    check_generated(src, dst, Reach.THREAD, eb)


@given(conversions(Reach.WARP), st.sampled_from([1, 2, 4, 8]))
def test_warp_local_conversions_shuffle_exactly(pair, eb):
    src, dst = pair
    check_generated(src, dst, Reach.WARP, eb)


@given(conversions(Reach.ANYWHERE), st.sampled_from([2, 4]))
@settings(max_examples=50)
def test_any_conversion_is_planned_and_exact(pair, eb):
    src, dst = pair
    check_generated(src, dst, Reach.ANYWHERE, eb)


@given(conversions(Reach.WARP), st.sampled_from([ConversionKind.WARP_SHUFFLE,
                                                 ConversionKind.SHARED_STAGING]))
@settings(max_examples=40)
def test_a_more_general_plan_is_also_exact(pair, kind):
    src, dst = pair
    plan = plan_conversion(src, dst, 4, NVIDIA_SM90, kind=kind)
    assert plan.kind is kind
    assert_moves_every_element(plan, src, dst)


# -------------------------------------------------------------------------- constructed cases

TILE = (64, 64)
BLOCKED = blocked(TILE, [1, 8], [8, 4], [4, 1], [1, 0])


def _swap(layout: LinearLayout, first: tuple[str, int], second: tuple[str, int]) -> LinearLayout:
    """The layout with two bases exchanged (hardware bits relabelled)."""
    bases = {n: list(v) for n, v in layout.bases.items()}
    (a, i), (b, j) = first, second
    bases[a][i], bases[b][j] = bases[b][j], bases[a][i]
    return LinearLayout(bases, [(n, layout.out_dim_size(n)) for n in layout.out_dims])


def test_kinds_of_constructed_conversions_and_their_costs_grow_with_the_work():
    same = BLOCKED.transpose_ins(["lane", "register", "warp"])
    registers = _swap(BLOCKED, ("register", 0), ("register", 3))
    lanes = _swap(BLOCKED, ("lane", 0), ("lane", 3))
    warps = _swap(BLOCKED, ("lane", 4), ("warp", 0))
    plans = [plan_conversion(BLOCKED, dst, 2, NVIDIA_SM90) for dst in (same, registers, lanes,
                                                                       warps)]
    assert [p.kind for p in plans] == list(ConversionKind)
    for plan, dst in zip(plans, (same, registers, lanes, warps), strict=True):
        assert_moves_every_element(plan, BLOCKED, dst)
    scores = [p.cost.score for p in plans]
    assert scores == sorted(scores) and len(set(scores)) == 4, [p.cost for p in plans]
    noop, permutation, shuffle, staging = plans
    assert noop.cost.instructions == 0
    assert not permutation.permutation.lane_dependent
    assert permutation.cost.selects == 0 and 0 < permutation.cost.moves <= 32
    # a lane permutation moves each 32-bit word once: one round per word, no selects
    assert shuffle.cost.rounds == shuffle.cost.shuffles == 32 // shuffle.shuffle.pack
    assert shuffle.shuffle.pack == 2 and shuffle.cost.selects == 0
    assert staging.cost.barriers == 1 and staging.cost.shared_bytes == 64 * 64 * 2
    # the same shuffle, forced through shared memory, costs more
    forced = plan_conversion(BLOCKED, lanes, 2, NVIDIA_SM90, kind=ConversionKind.SHARED_STAGING)
    assert forced.cost.score > shuffle.cost.score
    assert_moves_every_element(forced, BLOCKED, lanes)


def test_lane_dependent_register_choice_costs_selects():
    # thread t holds columns {0, 1} but in the order given by its lane parity
    src = LinearLayout({"register": [(0, 1)], "lane": [(1, 1), (2, 0), (4, 0), (8, 0), (16, 0)]},
                       [("dim0", 32), ("dim1", 2)])
    dst = LinearLayout({"register": [(0, 1)], "lane": [(1, 0), (2, 0), (4, 0), (8, 0), (16, 0)]},
                       [("dim0", 32), ("dim1", 2)])
    plan = plan_conversion(src, dst, 4, NVIDIA_SM80)
    assert plan.kind is ConversionKind.REGISTER_PERMUTATION
    assert plan.permutation.lane_dependent and plan.cost.selects == 2
    assert_moves_every_element(plan, src, dst)


def test_a_warp_transpose_shuffles_with_receiver_side_reindexing():
    # 32 x 4 tile: src lanes run down rows, registers across columns; dst the other way
    src = LinearLayout({"register": [(0, 1), (0, 2)], "lane": [(1, 0), (2, 0), (4, 0), (8, 0),
                                                              (16, 0)]},
                       [("dim0", 32), ("dim1", 4)])
    dst = LinearLayout({"register": [(1, 0), (2, 0)], "lane": [(0, 1), (0, 2), (4, 0), (8, 0),
                                                              (16, 0)]},
                       [("dim0", 32), ("dim1", 4)])
    plan = plan_conversion(src, dst, 4, NVIDIA_SM90)
    assert plan.kind is ConversionKind.WARP_SHUFFLE
    # 4 rounds over the destination registers, re-indexed per lane (T != 0) so that each
    # round reads 4 distinct lanes; the round on the diagonal stays in the thread
    shuffle = plan.shuffle
    assert any(shuffle.lane_to_dest_word) and shuffle.sub_rounds == 1
    assert len(shuffle.rounds) == 4 and sum(r.local for r in shuffle.rounds) == 1
    assert (plan.cost.rounds, plan.cost.shuffles, plan.cost.moves) == (3, 3, 1)
    assert plan.cost.selects > 0  # lane-dependent registers on both sides
    assert_moves_every_element(plan, src, dst)


def test_broadcast_source_lanes_are_a_free_choice():
    # src: lane bit 4 broadcasts (lanes l and l + 16 hold the same column); dst uses all lanes
    src = LinearLayout({"register": [(1,), (2,)], "lane": [(4,), (8,), (16,), (32,), (0,)]},
                       [("dim0", 64)])
    dst = LinearLayout({"register": [(1,)], "lane": [(2,), (4,), (8,), (16,), (32,)]},
                       [("dim0", 64)])
    plan = plan_conversion(src, dst, 4, NVIDIA_SM90)
    assert plan.kind is ConversionKind.WARP_SHUFFLE
    assert_moves_every_element(plan, src, dst)
    # the reverse keeps each element in its thread's warp, fetched from a lane that has it
    back = plan_conversion(dst, src, 4, NVIDIA_SM90)
    assert back.kind is ConversionKind.WARP_SHUFFLE
    assert_moves_every_element(back, dst, src)


def test_mma_accumulator_to_operand_a_is_a_noop_for_flash_attention():
    # P = softmax(S) stays in registers: the m16n8k16 accumulator of a (BM, BN) tile with warps
    # along M is, element for element, the A operand of P @ V (K = BN): no data moves.
    for shape, warps in (((64, 64), (4, 1)), ((128, 64), (4, 1)), ((64, 128), (4, 1))):
        acc = mma_m16n8k16_acc(shape, warps)
        a = mma_m16n8k16_a(shape, warps)
        plan = plan_conversion(acc, a, 2, NVIDIA_SM80)
        assert plan.kind is ConversionKind.NOOP, shape
    # wgmma: the accumulator of m64nNk16 and the register A operand of the next wgmma
    acc = wgmma_acc((64, 64))
    a = wgmma_a_regs((64, 64))
    plan = plan_conversion(acc, a, 2, NVIDIA_SM90)
    assert plan.kind is ConversionKind.NOOP
    # with warps along N as well, each N-warp holds other columns of P but needs all of K
    acc = mma_m16n8k16_acc((64, 64), (2, 2))
    a = mma_m16n8k16_a((64, 64), (2, 2))
    plan = plan_conversion(acc, a, 2, NVIDIA_SM80)
    assert plan.kind is ConversionKind.SHARED_STAGING
    assert_moves_every_element(plan, acc, a)


def test_blocked_and_mma_accumulator_conversions():
    acc = mma_m16n8k16_acc((64, 64), (4, 1))
    # 2x2 per thread, 8x4 lanes: the same 16-row band per warp as the accumulator
    same_warps = blocked((64, 64), [2, 2], [8, 4], [4, 1], [1, 0])
    to_blocked = plan_conversion(acc, same_warps, 4, NVIDIA_SM90)
    assert to_blocked.kind is ConversionKind.WARP_SHUFFLE
    assert_moves_every_element(to_blocked, acc, same_warps)
    back = plan_conversion(same_warps, acc, 4, NVIDIA_SM90)
    assert back.kind is ConversionKind.WARP_SHUFFLE
    assert_moves_every_element(back, same_warps, acc)
    # the usual store layout (4 fp32 per thread along rows): 8-row bands, warps cross
    store = blocked((64, 64), [1, 4], [8, 4], [4, 1], [1, 0])
    plan = plan_conversion(acc, store, 4, NVIDIA_SM90)
    assert plan.kind is ConversionKind.SHARED_STAGING
    assert_moves_every_element(plan, acc, store)
    assert plan.staging.store_vector_bytes >= 8 and plan.staging.load_vector_bytes == 16
    # a blocked layout equal to the accumulator as a function
    twin = blocked((16, 8), [1, 2], [8, 4], [1, 1], [1, 0])
    assert plan_conversion(mma_m16n8k16_acc(), twin, 4, NVIDIA_SM80).kind is ConversionKind.NOOP


def test_wave64_conversions_on_amd():
    src = blocked((64, 64), [1, 4], [8, 8], [4, 1], [1, 0])
    lanes = _swap(src, ("lane", 0), ("lane", 5))
    plan = plan_conversion(src, lanes, 2, AMD_GFX942)
    assert plan.kind is ConversionKind.WARP_SHUFFLE
    assert_moves_every_element(plan, src, lanes)
    crossing = _swap(src, ("lane", 5), ("warp", 1))
    plan = plan_conversion(src, crossing, 2, AMD_GFX942)
    assert plan.kind is ConversionKind.SHARED_STAGING
    assert_moves_every_element(plan, src, crossing)


def test_bad_conversions_are_refused_with_the_reason():
    with pytest.raises(LayoutError, match="needs the same tile"):
        plan_conversion(BLOCKED, blocked((64, 32), [1, 8], [8, 4], [4, 1], [1, 0]), 2,
                        NVIDIA_SM90)
    with pytest.raises(LayoutError, match="src has 4 warps, dst 8"):
        plan_conversion(BLOCKED, blocked(TILE, [1, 8], [8, 4], [8, 1], [1, 0]), 2, NVIDIA_SM90)
    partial = LinearLayout({"register": [(0, 1)], "lane": [(1, 0)] + [(0, 0)] * 4},
                           [("dim0", 2), ("dim1", 4)])
    full = LinearLayout({"register": [(0, 1), (0, 2)], "lane": [(1, 0)] + [(0, 0)] * 4},
                        [("dim0", 2), ("dim1", 4)])
    with pytest.raises(LayoutError, match="dst holds elements src does not"):
        plan_conversion(partial, full, 4, NVIDIA_SM90)
    lanes = _swap(BLOCKED, ("lane", 0), ("lane", 3))
    with pytest.raises(LayoutError, match="REGISTER_PERMUTATION plan cannot do this"):
        plan_conversion(BLOCKED, lanes, 2, NVIDIA_SM90, kind=ConversionKind.REGISTER_PERMUTATION)
    with pytest.raises(LayoutError, match="a gfx942 warp has 64"):
        plan_conversion(BLOCKED, lanes, 2, AMD_GFX942)
    with pytest.raises(LayoutError, match="expected 1, 2, 4 or 8"):
        plan_conversion(BLOCKED, lanes, 3, NVIDIA_SM90)
    with pytest.raises(LayoutError, match=r"values must be indexed \[warp, lane, register\]"):
        apply_plan(plan_conversion(BLOCKED, lanes, 2, NVIDIA_SM90), np.zeros((4, 32, 3)))


def test_staging_without_the_swizzle_synthesizer_falls_back_to_unswizzled(monkeypatch):
    import tilekit.layout.convert as convert

    monkeypatch.setattr(convert, "_swizzle_module", lambda: None)
    acc = mma_m16n8k16_acc((64, 64), (4, 1))
    store = blocked((64, 64), [1, 4], [8, 4], [4, 1], [1, 0])
    plan = plan_conversion(acc, store, 4, NVIDIA_SM90)
    assert plan.kind is ConversionKind.SHARED_STAGING
    assert plan.staging.layout_source == "unswizzled, row-major"
    assert (plan.staging.store_vector_bytes, plan.staging.load_vector_bytes) == (8, 16)
    # the accumulator's 8-byte row pairs hit the same banks every 8 rows: conflicts
    assert plan.cost.shared_wavefronts > plan.cost.shared_stores + plan.cost.shared_loads
    assert_moves_every_element(plan, acc, store)


def test_plan_a_128x128_mma_to_blocked_conversion_quickly():
    acc = mma_m16n8k16_acc((128, 128), (4, 2))
    store = blocked((128, 128), [1, 4], [8, 4], [8, 1], [1, 0])
    start = time.perf_counter()
    plan = plan_conversion(acc, store, 4, NVIDIA_SM90)
    elapsed = time.perf_counter() - start
    assert plan.kind is ConversionKind.SHARED_STAGING
    assert_moves_every_element(plan, acc, store)
    assert elapsed < 1.0, elapsed
