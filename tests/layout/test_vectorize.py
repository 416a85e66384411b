"""Vector widths against a brute-force reference that enumerates every thread's byte addresses.

The reference below never calls ``tilekit.layout.vectorize``: it evaluates the layout from its
raw bases (XOR of the images of set bits, numpy), builds each thread's register -> byte address
list for concrete instances of the facts (unknown strides at 1x and 2x their divisor, unknown
sizes at several multiples, the base exactly at its alignment), and looks for the largest
power-of-two group of consecutive registers with consecutive, aligned addresses (at most 16
bytes). Its reason for stopping is read off the same enumeration.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.layout.strategies import layouts
from tilekit.errors import LayoutError
from tilekit.layout import cute
from tilekit.layout.distributed import blocked, mma_m16n8k16_acc, wgmma_acc
from tilekit.layout.linear import LinearLayout
from tilekit.layout.vectorize import (
    DimFacts,
    ElementTable,
    Limit,
    RegisterOrder,
    TensorFacts,
    ThreadValueLayout,
    blocked_thread_values,
    renumber_registers_for_vectors,
    vector_width,
)

CAP = 16

# ------------------------------------------------------------------------------------ reference


def reference_coords(layout: LinearLayout, rank: int) -> np.ndarray:
    """coords[thread, register, dim] by definition (threads: all non-register inputs)."""
    bases = layout.bases
    names = list(bases)
    sizes = {n: 2 ** len(bases[n]) for n in names}
    others = [n for n in names if n != "register"]
    register = np.arange(sizes.get("register", 1))
    thread = np.arange(int(np.prod([sizes[n] for n in others])) if others else 1)
    point = {"register": register[None, :]}
    rest = thread.copy()
    for n in others:
        point[n] = (rest % sizes[n])[:, None]
        rest = rest // sizes[n]
    coords = np.zeros((len(thread), len(register), rank), dtype=np.int64)
    position = {name: int(name[3:]) for name in layout.out_dims}
    for n in names:
        for bit, image in enumerate(bases[n]):
            on = (point[n] >> bit) & 1
            for name, x in zip(layout.out_dims, image, strict=True):
                coords[..., position[name]] ^= on * x
    return coords


def stride_instances(facts: TensorFacts) -> list[np.ndarray]:
    options = [
        [d.stride] if d.stride is not None else [d.stride_divisor, 2 * d.stride_divisor]
        for d in facts.dims
    ]
    return [np.array(p) for p in itertools.product(*options)]


def reference_width(coords: np.ndarray, facts: TensorFacts, edge: int | None = None):
    """(width, limit): the largest v whose groups of v consecutive registers sit at
    consecutive, v*eb-aligned byte addresses for every instance of the facts."""
    threads, registers, rank = coords.shape
    eb = facts.elem_bytes
    c = facts.contiguous_dim

    def groups(v):  # [group, i, dim], registers v*g .. v*g+v-1 of each thread
        usable = registers - registers % v
        return coords[:, :usable].reshape(-1, v, rank)

    def addresses(v, strides):
        return facts.base_align + eb * (groups(v) * strides).sum(axis=-1)

    def broken(v):
        bad = np.zeros(len(groups(v)), dtype=bool)
        for strides in stride_instances(facts):
            a = addresses(v, strides)
            bad |= np.any(a != a[:, :1] + eb * np.arange(v), axis=1)
        return bad

    def aligned(v):
        return all(np.all(addresses(v, s)[:, 0] % (v * eb) == 0) for s in stride_instances(facts))

    def consecutive_coordinates(v):
        g = groups(v)
        want = g[:, :1, :].repeat(v, axis=1)
        want[:, :, c] += np.arange(v)
        return c is not None and np.array_equal(g, want)

    def cut_at_edge(v):
        # every broken group breaks right after the last valid element of a ragged row
        if edge is None or c is None:
            return False
        for group in groups(v)[broken(v)]:
            steps = [int(group[i + 1, c] - group[i, c]) for i in range(v - 1)]
            cut = next((i for i, step in enumerate(steps) if step != 1), None)
            if cut is None or group[cut, c] != edge - 1:
                return False
        return True

    best = 1
    v = 2
    while v * eb <= CAP and v <= registers:
        if not np.any(broken(v)) and aligned(v):
            best = v
        v *= 2
    wider = 2 * best
    if wider * eb > CAP:
        limit = Limit.BYTE_CAP
    elif wider > registers:
        limit = Limit.REGISTER_CONTIGUITY
    elif np.any(broken(wider)):
        if consecutive_coordinates(wider):
            limit = Limit.STRIDE
        elif cut_at_edge(wider):
            limit = Limit.RAGGED_TAIL
        else:
            limit = Limit.REGISTER_CONTIGUITY
    elif facts.base_align % (wider * eb):
        limit = Limit.ALIGNMENT
    else:
        limit = Limit.STRIDE
    return best, limit


def size_instances(facts: TensorFacts, extents: list[int]) -> list[list[int]]:
    """Known sizes as they are; an unknown one at every multiple of its divisor up to the
    point where the multiples repeat modulo the tile (so every edge position occurs)."""
    options = [
        [d.size] if d.size is not None
        else [d.size_divisor * m for m in range(1, extent // math.gcd(extent, d.size_divisor) + 1)]
        for d, extent in zip(facts.dims, extents, strict=True)
    ]
    return [list(p) for p in itertools.product(*options)]


def reference_tail(coords: np.ndarray, extents: list[int], facts: TensorFacts, v: int) -> int:
    """Largest w <= v such that at the tensor's edge every w-subgroup is wholly in or out."""
    threads, registers, rank = coords.shape
    w = v
    while w > 1:
        ok = True
        for sizes in size_instances(facts, extents):
            origins = [
                sorted({0, ((sizes[d] - 1) // extents[d]) * extents[d]}) for d in range(rank)
            ]
            for origin in itertools.product(*origins):
                inside = np.all(coords + np.array(origin) < np.array(sizes), axis=-1)
                sub = inside.reshape(threads, registers // w, w)
                if np.any(sub.any(axis=-1) & ~sub.all(axis=-1)):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return w
        w //= 2
    return 1


# ----------------------------------------------------------------------------------- strategies


def pow2(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high).map(lambda e: 2**e)


@st.composite
def blocked_layouts(draw: st.DrawFn) -> LinearLayout:
    rank = draw(st.integers(1, 3))
    shape = [draw(pow2(0, 4)) for _ in range(rank)]
    spt = [draw(pow2(0, 3)) for _ in range(rank)]
    lane_bits = draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank))
    wpc = [draw(pow2(0, 1)) for _ in range(rank)]
    order = draw(st.permutations(range(rank)))
    return blocked(shape, spt, [2**b for b in lane_bits], wpc, list(order))


@st.composite
def f2_layouts(draw: st.DrawFn) -> LinearLayout:
    """Random F2 layouts (zero bases, broadcasts, XOR-ed bases), outs renamed dim0, dim1, ...

    Half of them start with a few register bits along one dim (then random bases that may
    overlap them), so that vectors exist to be found and broken.
    """
    layout = draw(layouts(in_names=("register", "lane", "warp"), out_names=("dim0", "dim1"),
                          max_in_bits=6, max_out_bits=5, min_out_bits=1))
    layout = layout.rename_outs({n: f"dim{i}" for i, n in enumerate(layout.out_dims)})
    if draw(st.booleans()):
        dim = draw(st.sampled_from(layout.out_dims))
        prefix = LinearLayout.identity_1d(draw(pow2(1, 3)), "register", dim)
        layout = (prefix * layout).transpose_outs(sorted(layout.out_dims))
    return layout


OTHER_STRIDES = (0, 2, 3, 4, 5, 8, 12, 16, 24, 33, 64, 96, 128, -4, -1, -64)


def dim_orders(layout: LinearLayout) -> list[int]:
    """Tensor dims in the order the layout's first register bases step them (then the rest)."""
    seen: list[int] = []
    for image in layout.bases.get("register", ()):
        for name, x in zip(layout.out_dims, image, strict=True):
            if x and int(name[3:]) not in seen:
                seen.append(int(name[3:]))
    return seen + [d for d in range(len(layout.out_dims)) if d not in seen]


@st.composite
def facts_for(draw: st.DrawFn, layout: LinearLayout) -> TensorFacts:
    """Facts biased toward vectorizable accesses (the contiguous dim is usually the one the
    registers step first, strides usually multiples of 16), with every kind of obstacle."""
    rank = len(layout.out_dims)
    preferred = dim_orders(layout)
    contiguous = preferred[0] if draw(st.integers(0, 4)) else draw(st.integers(0, rank - 1))
    dims = []
    unknown_size = draw(st.integers(-1, rank - 1))  # at most one dim of unknown size
    for d in range(rank):
        kind = draw(st.integers(0, 9))
        if d == contiguous:
            stride = 1 if kind < 8 else draw(st.sampled_from((None, 2, 3, -1)))
        elif kind < 5:
            stride = 16 * draw(st.integers(1, 64))
        elif kind < 7:
            stride = None
        else:
            stride = draw(st.sampled_from(OTHER_STRIDES))
        if d == unknown_size:
            size, size_divisor = None, draw(pow2(0, 4))
        else:
            size, size_divisor = draw(st.integers(1, 70)), 1
        dims.append(DimFacts(stride=stride, stride_divisor=draw(pow2(0, 5)), size=size,
                             size_divisor=size_divisor))
    base_align = 16 if draw(st.integers(0, 2)) else draw(pow2(0, 5))
    return TensorFacts(draw(pow2(0, 3)), tuple(dims), base_align, contiguous)


def check_against_reference(layout: LinearLayout, facts: TensorFacts) -> None:
    plan = vector_width(layout, facts)
    coords = reference_coords(layout, facts.rank)
    width, limit = reference_width(coords, facts)
    assert (plan.elements, plan.limit) == (width, limit), (layout, facts, plan)
    assert plan.register_masks == tuple(1 << j for j in range(width.bit_length() - 1))
    extents = [layout.out_dim_size(f"dim{d}") for d in range(facts.rank)]
    tail = reference_tail(coords, extents, facts, width)
    single_dim_bases = all(sum(1 for x in image if x) <= 1
                           for images in layout.bases.values() for image in images)
    if single_dim_bases:
        assert plan.tail_elements == tail, (layout, facts)
    else:  # a basis moving two dims: the per-dim edge test may be conservative, never unsafe
        assert plan.tail_elements <= tail, (layout, facts)


# ------------------------------------------------------------------------------ property tests

CASES_PER_EXAMPLE = 12  # facts per generated layout: 2 x 100 x 12 = 2400 reference checks


@given(blocked_layouts(), st.data())
def test_blocked_layouts_match_the_reference(layout, data):
    for _ in range(CASES_PER_EXAMPLE):
        check_against_reference(layout, data.draw(facts_for(layout)))


@given(f2_layouts(), st.data())
def test_random_f2_layouts_match_the_reference(layout, data):
    for _ in range(CASES_PER_EXAMPLE):
        check_against_reference(layout, data.draw(facts_for(layout)))


@given(blocked_layouts(), st.data())
@settings(max_examples=60)
def test_renumbered_registers_never_lose_width_and_keep_every_threads_elements(layout, data):
    rank = len(layout.out_dims)
    facts = data.draw(facts_for(layout))
    as_is = vector_width(layout, facts)
    plan = vector_width(layout, facts, RegisterOrder.RENUMBERED)
    renumbered, old_index = renumber_registers_for_vectors(layout, facts)
    before = reference_coords(layout, rank)
    after = reference_coords(renumbered, rank)
    # an invertible renumbering: new register r is old register XOR of old_index over r's bits
    for r in range(after.shape[1]):
        old = 0
        for j, index in enumerate(old_index):
            if r >> j & 1:
                old ^= index
        np.testing.assert_array_equal(after[:, r], before[:, old])
    assert sorted({int(np.bitwise_xor.reduce([i for j, i in enumerate(old_index) if r >> j & 1]
                                              or [0])) for r in range(after.shape[1])}) \
        == list(range(after.shape[1]))
    width, _ = reference_width(after, facts)
    assert plan.elements == width >= as_is.elements
    # the best plain permutation of register bits is never wider than the renumbering
    bits = layout.in_dim_size_log2("register") if layout.has_in_dim("register") else 0
    if bits <= 4:
        for perm in itertools.permutations(range(bits)):
            permuted_index = [1 << p for p in perm]
            columns = [before[:, sum(1 << perm[j] for j in range(bits) if r >> j & 1)]
                       for r in range(before.shape[1])]
            permuted = np.stack(columns, axis=1)
            assert reference_width(permuted, facts)[0] <= plan.elements, permuted_index


# -------------------------------------------------------------------------- hand-checked cases


def test_bf16_rows_of_4097_are_never_wider_than_one_element():
    layout = blocked([64, 64], [1, 8], [8, 4], [4, 1], [1, 0])
    aligned = vector_width(layout, TensorFacts.dense([4096, 4096], 2))
    assert (aligned.elements, aligned.bytes, aligned.limit) == (8, 16, Limit.BYTE_CAP)
    odd = vector_width(layout, TensorFacts.dense([4096, 4097], 2))
    assert (odd.elements, odd.limit, odd.tail_elements) == (1, Limit.STRIDE, 1)
    even = vector_width(layout, TensorFacts.dense([4096, 4098], 2))
    assert (even.elements, even.limit, even.tail_elements) == (2, Limit.STRIDE, 2)


def test_negative_cases_name_their_reason():
    layout = blocked([32, 32], [1, 4], [8, 4], [4, 1], [1, 0])
    facts = TensorFacts.dense([1024, 1024], 4)
    assert vector_width(layout, facts).limit is Limit.BYTE_CAP
    misaligned = TensorFacts.dense([1024, 1024], 4, base_align=4)
    assert (vector_width(layout, misaligned).elements,
            vector_width(layout, misaligned).limit) == (1, Limit.ALIGNMENT)
    transposed = TensorFacts.dense([1024, 1024], 4, order=(0, 1))  # column-major tensor
    plan = vector_width(layout, transposed)
    assert (plan.elements, plan.limit) == (1, Limit.REGISTER_CONTIGUITY)
    odd_stride = TensorFacts(4, (DimFacts(stride=1024), DimFacts(stride=3)), 16, contiguous_dim=1)
    assert vector_width(layout, odd_stride).limit is Limit.STRIDE
    unknown_row = TensorFacts(4, (DimFacts(stride=None, stride_divisor=2), DimFacts(stride=1)))
    plan = vector_width(layout, unknown_row)
    assert (plan.elements, plan.limit) == (2, Limit.STRIDE)
    ragged = TensorFacts(4, (DimFacts(stride=1024), DimFacts(stride=1, size=1022)))
    plan = vector_width(layout, ragged)
    assert (plan.elements, plan.tail_elements, plan.has_tail) == (4, 2, True)


def test_mma_accumulator_stores_pairs_and_renumbering_does_not_help():
    acc = mma_m16n8k16_acc((64, 64), (2, 2))
    plan = vector_width(acc, TensorFacts.dense([64, 64], 4))
    assert (plan.elements, plan.limit) == (2, Limit.REGISTER_CONTIGUITY)
    assert vector_width(acc, TensorFacts.dense([64, 64], 4), RegisterOrder.RENUMBERED).elements == 2


def test_renumbering_finds_a_vector_spread_over_register_bits():
    # wgmma accumulator: register bits 0 (col 1), 1 (row 8), 2 (col 8): col pairs only;
    # a layout whose column bits sit at register bits 1 and 2 needs a renumbering.
    layout = LinearLayout(
        {"register": [(8, 0), (0, 1), (0, 2)], "lane": [(0, 4), (0, 8), (1, 0), (2, 0), (4, 0)]},
        [("dim0", 16), ("dim1", 16)],
    )
    facts = TensorFacts.dense([16, 16], 4)
    assert vector_width(layout, facts).elements == 1
    plan = vector_width(layout, facts, RegisterOrder.RENUMBERED)
    assert (plan.elements, plan.register_masks) == (4, (0b010, 0b100))
    assert vector_width(wgmma_acc((64, 64)), TensorFacts.dense([64, 64], 4)).elements == 2


def test_a_packed_tile_vectorizes_across_rows():
    # a thread holding 2 full rows of a 4-column packed tensor: 8 consecutive bf16
    layout = LinearLayout({"register": [(0, 1), (0, 2), (1, 0)], "lane": [(2, 0)]},
                          [("dim0", 4), ("dim1", 4)])
    plan = vector_width(layout, TensorFacts.dense([4, 4], 2))
    assert (plan.elements, plan.limit) == (8, Limit.BYTE_CAP)


def test_bad_inputs_are_refused_with_the_reason():
    layout = blocked([16, 16], [1, 4], [8, 4], [1, 1], [1, 0])
    with pytest.raises(LayoutError, match="do not match a rank-3 tensor"):
        vector_width(layout, TensorFacts.dense([4, 16, 16], 2))
    with pytest.raises(LayoutError, match="elem_bytes must be a positive power of two"):
        TensorFacts(3, (DimFacts(stride=1),))
    with pytest.raises(LayoutError, match="stride_divisor must be a positive int"):
        DimFacts(stride_divisor=0)
    with pytest.raises(LayoutError, match="takes a LinearLayout"):
        vector_width("blocked", TensorFacts.dense([16], 2))  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="two top-level modes"):
        ThreadValueLayout(cute.Layout(37, 1), (37,))
    with pytest.raises(LayoutError, match="past the padded tile"):
        ThreadValueLayout(cute.Layout((4, 10), (10, 1)), (37,))


# ---------------------------------------------------------------- non-power-of-two (CuTe) tiles


def _leaves(t) -> list[int]:
    return [x for sub in t for x in _leaves(sub)] if isinstance(t, tuple) else [t]


def cute_values(shape, stride) -> np.ndarray:
    """A shape:stride mode evaluated at every index: colexicographic digits times strides."""
    index = np.arange(int(np.prod(_leaves(shape))))
    out = np.zeros_like(index)
    for extent, step in zip(_leaves(shape), _leaves(stride), strict=True):
        out += (index % extent) * step
        index = index // extent
    return out


def tv_reference(tv: ThreadValueLayout, facts: TensorFacts) -> tuple[int, Limit, int]:
    """Width, limit and tail of a thread-value layout, by the same enumeration."""
    index = cute_values(tv.layout.shape[0], tv.layout.stride[0])[:, None] \
        + cute_values(tv.layout.shape[1], tv.layout.stride[1])[None, :]
    coords = np.stack(np.unravel_index(index, tv.padded_shape, order="F"), axis=-1)
    valid = np.all(coords < np.array(tv.valid_shape), axis=-1)
    edge = tv.valid_shape[facts.contiguous_dim]
    width, limit = reference_width(coords, facts, edge)
    padded = np.concatenate([valid, np.zeros((valid.shape[0], -valid.shape[1] % width), bool)], 1)
    w = width
    while w > 1:
        sub = padded.reshape(valid.shape[0], -1, w)
        if not np.any(sub.any(axis=-1) & ~sub.all(axis=-1)):
            break
        w //= 2
    return width, limit, w


@pytest.mark.parametrize(
    ("shape", "spt", "threads", "facts", "expected"),
    [
        # a row of 4097 fp32 by 128 threads x 4: 16-byte core, 1-element tail
        ((4097,), (4,), (128,), TensorFacts.dense([4097], 4), (4, Limit.BYTE_CAP, 1)),
        # the same row in bf16, 8 per thread
        ((4097,), (8,), (128,), TensorFacts.dense([4097], 2), (8, Limit.BYTE_CAP, 1)),
        # 37 columns, rows padded to a 40-element pitch: vectors of 4 fp32, tail of 1
        ((1000, 37), (1, 4), (32, 4), TensorFacts(4, (DimFacts(stride=40, size=1000),
                                                      DimFacts(stride=1, size=37))),
         (4, Limit.BYTE_CAP, 1)),
        # 1000 x 37 packed: the row pitch is 37 elements, so rows are only 4-byte aligned
        ((1000, 37), (1, 4), (32, 4), TensorFacts.dense([1000, 37], 4), (1, Limit.STRIDE, 1)),
        # 37 columns, pitch 38 bf16: every row start is 4-byte aligned: pairs
        ((1000, 37), (1, 8), (32, 4), TensorFacts(2, (DimFacts(stride=38, size=1000),
                                                      DimFacts(stride=1, size=37))),
         (2, Limit.STRIDE, 1)),
        # a column-major tensor read along rows: no vector
        ((1000, 37), (1, 4), (32, 4), TensorFacts.dense([1000, 37], 4, order=(0, 1)),
         (1, Limit.REGISTER_CONTIGUITY, 1)),
        # misaligned base
        ((4097,), (4,), (128,), TensorFacts(4, (DimFacts(stride=1, size=4097),), base_align=8),
         (2, Limit.ALIGNMENT, 1)),
        # unknown row pitch, known to be a multiple of 8 elements
        ((1000, 37), (1, 8), (32, 4), TensorFacts(2, (DimFacts(stride=None, stride_divisor=8),
                                                      DimFacts(stride=1, size=37))),
         (8, Limit.BYTE_CAP, 1)),
    ],
)
def test_non_power_of_two_tiles(shape, spt, threads, facts, expected):
    tv = blocked_thread_values(shape, spt, threads)
    plan = vector_width(tv, facts)
    assert (plan.elements, plan.limit, plan.tail_elements) == expected
    assert tv_reference(tv, facts) == expected
    table_plan = vector_width(tv.to_table(), facts)
    assert (table_plan.elements, table_plan.limit, table_plan.tail_elements) == expected


def test_a_thread_owning_37_elements_has_a_core_and_a_tail():
    one_row = ThreadValueLayout(cute.Layout((64, 37), (37, 1)), (37 * 64,))
    facts = TensorFacts(4, (DimFacts(stride=1),), contiguous_dim=0)
    plan = vector_width(one_row, facts)
    # 37-element rows at a 37-element pitch: odd row starts
    assert (plan.elements, plan.limit) == (1, Limit.STRIDE)
    padded = ThreadValueLayout(cute.Layout((64, 37), (40, 1)), (40 * 64,))
    plan = vector_width(padded, facts)
    assert (plan.elements, plan.limit, plan.tail_elements) == (4, Limit.BYTE_CAP, 1)
    # two rows of 37 (pitch 40) per thread, registers 0..36 then 37..73: vectors would
    # straddle the rows, so the ragged row limits the core; the 1-D view of the same
    # addresses has no rows, so there it is the layout's registers that stop
    rows = TensorFacts(4, (DimFacts(stride=40), DimFacts(stride=1)))
    two_rows = ThreadValueLayout(cute.Layout((32, (37, 2)), (2, (64, 1))), (64, 40), (64, 37))
    plan = vector_width(two_rows, rows)
    assert (plan.elements, plan.limit) == (1, Limit.RAGGED_TAIL) == tv_reference(two_rows, rows)[:2]
    flat = ThreadValueLayout(cute.Layout((32, (37, 2)), (80, (1, 40))), (80 * 32,))
    plan = vector_width(flat, facts)
    expected = (1, Limit.REGISTER_CONTIGUITY)
    assert (plan.elements, plan.limit) == expected == tv_reference(flat, facts)[:2]


@given(
    st.integers(1, 3000), st.sampled_from([1, 2, 4, 8]), pow2(0, 3), pow2(0, 7),
    st.sampled_from([None, 1, 2, 4, 8, 16]), pow2(0, 5),
)
@settings(max_examples=60)
def test_generated_rows_match_the_reference(length, per_thread, eb, threads, divisor, base_align):
    tv = blocked_thread_values((length,), (per_thread,), (threads,))
    stride = DimFacts(stride=1, size=length)
    facts = TensorFacts(eb, (stride,), base_align, 0)
    plan = vector_width(tv, facts)
    assert (plan.elements, plan.limit, plan.tail_elements) == tv_reference(tv, facts)
    if divisor is not None:  # a 2-D view: rows of `length` at an unknown pitch
        tv2 = blocked_thread_values((3, length), (1, per_thread), (2, threads))
        facts2 = TensorFacts(eb, (DimFacts(stride=None, stride_divisor=divisor),
                                  DimFacts(stride=1, size=length)), base_align, 1)
        plan2 = vector_width(tv2, facts2)
        assert (plan2.elements, plan2.limit, plan2.tail_elements) == tv_reference(tv2, facts2)


def test_element_table_accepts_any_assignment():
    coords = np.full((2, 5, 1), -1)
    coords[0, :4, 0] = [8, 9, 10, 11]
    coords[1, :5, 0] = [12, 13, 14, 15, 16]
    plan = vector_width(ElementTable(coords), TensorFacts(4, (DimFacts(stride=1, size=17),)))
    assert (plan.elements, plan.tail_elements) == (4, 1)
    with pytest.raises(LayoutError, match=r"indexed \[thread, register, dim\]"):
        ElementTable(np.zeros((2, 3)))


def test_vector_width_is_fast_on_a_large_tile():
    layout = blocked([128, 128], [1, 4], [8, 4], [8, 1], [1, 0])
    facts = TensorFacts(4, (DimFacts(stride=None, stride_divisor=4), DimFacts(stride=1)))
    start = time.perf_counter()
    for _ in range(20):
        vector_width(layout, facts)
    assert (time.perf_counter() - start) / 20 < 0.01
