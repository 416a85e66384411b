"""Swizzle synthesis: the F2 cost model against enumeration, conflict-freedom of the synthesized
layouts for the MMA operand loads of NVIDIA (ldmatrix, wgmma) and AMD (ds_read_b128 in MFMA
order), the Linear Layouts worked example, and the refusals.

Lane patterns come from the vendors' fragment formulas (PTX ISA mma.m16n8k16 / ldmatrix through
``tilekit.layout.distributed``; the MFMA A-operand order from the ROCm blog "Matrix Core
Programming on AMD CDNA3 and CDNA4": for v_mfma_f32_16x16x16f16 lane l holds A[l % 16][4 *
(l / 16) + j], for 32x32x8f16 A[l % 32][4 * (l / 32) + j]; packing two k-steps per lane
("kpack 8", as CK does) makes that one 16-byte ds_read_b128 per lane: row l % 16 (l % 32),
k = 8 * (l / 16) (8 * (l / 32)) .. + 7).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.layout.strategies import invertible_matrices, layout_from_columns
from tilekit.errors import LayoutError
from tilekit.layout.banks import (
    AMD_GFX942,
    AMD_GFX950,
    NVIDIA_SM80,
    NVIDIA_SM90,
    Access,
    AccessKind,
    core_matrix_access,
    count_layout_transactions,
    ldmatrix_access,
)
from tilekit.layout.distributed import MatrixCount, blocked, mma_m16n8k16_a, mma_m16n8k16_b
from tilekit.layout.linear import LinearLayout
from tilekit.layout.shared import (
    Major,
    Operand,
    SwizzleMode,
    nvidia_swizzle,
    swizzled_shared,
    unswizzled,
)
from tilekit.layout.swizzle import (
    Candidate,
    ClassicSwizzle,
    SharedAccess,
    SwizzleFamily,
    evaluate_shared_layout,
    optimal_swizzle,
    synthesize_swizzle,
)

READ, WRITE = AccessKind.READ, AccessKind.WRITE
OUTS2 = ("dim0", "dim1")


def store_side(shape: Sequence[int], contiguous: int, warps: int = 4) -> SharedAccess:
    """A blocked layout writing 16-byte (8 x 16-bit) vectors along ``contiguous``."""
    lanes_along = min(32, shape[contiguous] // 8)
    spt = [1, 1]
    spt[contiguous] = 8
    tpw = [1, 1]
    tpw[contiguous] = lanes_along
    tpw[1 - contiguous] = 32 // lanes_along
    wpc = [1, 1]
    wpc[1 - contiguous] = warps
    order = (contiguous, 1 - contiguous)
    return SharedAccess(blocked(shape, spt, tpw, wpc, order), WRITE, 16, "store")


def check_against_enumeration(plan_sides, sides: Sequence[SharedAccess], shared: LinearLayout,
                              target, elem: int) -> None:
    """The plan's F2 counts equal the enumerating bank model, side by side."""
    for cost, side in zip(plan_sides, sides, strict=True):
        access = Access(side.kind, cost.vector_bytes, side.lanes)
        counted = count_layout_transactions(target, access, shared, side.layout, elem)
        assert (counted.wavefronts, counted.ideal) == (cost.wavefronts, cost.ideal)
        assert counted.instructions_per_warp * len(counted.wavefronts_per_warp) == \
            cost.instructions


# ------------------------------------------------------------------------------ the cost model


@st.composite
def random_problems(draw: st.DrawFn):
    """Arbitrary sides (random bases, zeros included) and an arbitrary bijective shared layout."""
    target = draw(st.sampled_from([NVIDIA_SM80, AMD_GFX942, AMD_GFX950]))
    elem = draw(st.sampled_from([1, 2, 4, 8]))
    lane_bits = target.lanes.bit_length() - 1
    n = draw(st.integers(3, 10))
    dim0 = draw(st.integers(0, n))
    outs = [("dim0", dim0), ("dim1", n - dim0)]
    column = st.one_of(st.just(0), st.integers(1, (1 << n) - 1),
                       st.integers(0, n - 1).map(lambda b: 1 << b))
    sides = []
    for k in range(draw(st.integers(1, 2))):
        regs = draw(st.lists(column, max_size=5))
        lanes = draw(st.lists(column, min_size=lane_bits, max_size=lane_bits))
        warps = draw(st.lists(column, max_size=2))
        layout = layout_from_columns([("register", len(regs)), ("lane", lane_bits),
                                      ("warp", len(warps))], outs, regs + lanes + warps)
        width = draw(st.sampled_from([w for w in (1, 2, 4, 8, 16) if w >= elem]))
        sides.append(SharedAccess(layout, draw(st.sampled_from([READ, WRITE])), width, f"s{k}"))
    shared = layout_from_columns([("offset", n)], outs, draw(invertible_matrices(n)))
    return target, elem, sides, shared


@given(random_problems())
def test_f2_count_equals_enumeration_and_the_vector_is_the_widest(problem):
    target, elem, sides, shared = problem
    costs = evaluate_shared_layout(sides, shared, elem, target)
    check_against_enumeration(costs, sides, shared, target, elem)
    for cost, side in zip(costs, sides, strict=True):
        if cost.vector_bytes < side.max_width_bytes:  # one step wider must be impossible
            wider = Access(side.kind, cost.vector_bytes * 2)
            with pytest.raises(LayoutError, match="keeps only"):
                count_layout_transactions(target, wider, shared, side.layout, elem)


def test_fast_candidate_columns_are_the_shared_module_layouts():
    from tilekit.layout.swizzle import _fast_columns  # the search's shortcut, checked here

    for shape in [(16, 64), (64, 16), (32, 32), (4, 8, 16)]:
        for order in [(1, 0), (0, 1)] if len(shape) == 2 else [(2, 1, 0), (0, 2, 1)]:
            plain = Candidate(SwizzleFamily.UNSWIZZLED, order=order)
            assert _fast_columns(plain, shape) == list(unswizzled(shape, order).flat_columns)
            for vec, per_phase, max_phase in [(8, 1, 8), (4, 2, 4), (1, 1, 16), (2, 4, 2)]:
                params = ClassicSwizzle(vec, per_phase, max_phase, order)
                expected = swizzled_shared(shape, 2, vec, per_phase, max_phase, order)
                columns = _fast_columns(Candidate(SwizzleFamily.CLASSIC, classic=params), shape)
                assert columns == list(expected.flat_columns)


# ------------------------------------------------------------------------------ NVIDIA operands


def ldmatrix_side(operand: str, major: str, shape: Sequence[int]) -> SharedAccess:
    """The ldmatrix read of an mma.m16n8k16 operand stored K-major or MN-major."""
    trans = major == "MN"  # the pairs a thread holds run along K
    if operand == "A":
        fragment, count = mma_m16n8k16_a(shape, (4, 1)), MatrixCount.X4
    else:
        fragment, count = mma_m16n8k16_b(shape, (1, 4)), MatrixCount.X2
    return SharedAccess(ldmatrix_access(fragment, count, trans), AccessKind.LDMATRIX,
                        label="ldmatrix", lanes=8 * count.value)


@pytest.mark.parametrize("operand", ["A", "B"])
@pytest.mark.parametrize("major", ["K", "MN"])
def test_ldmatrix_operands_are_conflict_free_when_synthesized(operand, major):
    shape = (64, 64)
    k_dim = 1 if operand == "A" else 0
    contiguous = k_dim if major == "K" else 1 - k_dim
    sides = [store_side(shape, contiguous), ldmatrix_side(operand, major, shape)]
    plan = synthesize_swizzle(sides, 2, NVIDIA_SM80)
    assert plan.vector_bytes == (16, 16)
    assert plan.conflict_free, plan.reason
    check_against_enumeration(plan.sides, sides, plan.shared, NVIDIA_SM80, 2)
    plain = unswizzled(shape, (contiguous, 1 - contiguous))
    store, load = evaluate_shared_layout(sides, plain, 2, NVIDIA_SM80)
    assert store.conflict_free and load.wavefronts == 8 * load.ideal  # 8 rows, one bank group
    assert "loses" in plan.reason and plan.considered > 10


@pytest.mark.parametrize("major", [Major.K, Major.MN])
def test_wgmma_operand_reads_pick_the_128_byte_mode(major):
    shape = (64, 64)  # A: M x K
    contiguous = 1 if major is Major.K else 0
    reader = SharedAccess(core_matrix_access(shape, contiguous, 2), AccessKind.CORE_MATRIX,
                          label="wgmma")
    sides = [store_side(shape, contiguous), reader]
    plan = synthesize_swizzle(sides, 2, NVIDIA_SM90,
                              families={SwizzleFamily.UNSWIZZLED, SwizzleFamily.HARDWARE})
    assert (plan.family, plan.candidate.mode) == (SwizzleFamily.HARDWARE, SwizzleMode.B128)
    assert plan.candidate.contiguous_dim == contiguous and plan.conflict_free
    assert plan.shared == nvidia_swizzle(SwizzleMode.B128, shape, 2, major, Operand.A)
    check_against_enumeration(plan.sides, sides, plan.shared, NVIDIA_SM90, 2)
    plain = unswizzled(shape, (contiguous, 1 - contiguous))
    store, read = evaluate_shared_layout(sides, plain, 2, NVIDIA_SM90)
    assert store.conflict_free and read.wavefronts == 8 * read.ideal
    for mode in (SwizzleMode.B32, SwizzleMode.B64):  # narrower atoms: the 16-byte stores of a
        narrow = nvidia_swizzle(mode, shape, 2, major, Operand.A)  # row land in one bank group
        store, read = evaluate_shared_layout(sides, narrow, 2, NVIDIA_SM90)
        assert read.conflict_free and store.wavefronts == 128 // mode.value * store.ideal


def test_wgmma_reads_alone_of_a_narrow_tile():
    shape = (64, 16)  # 32-byte rows
    reader = SharedAccess(core_matrix_access(shape, 1, 2), AccessKind.CORE_MATRIX)
    plan = synthesize_swizzle([reader], 2, NVIDIA_SM90, families={SwizzleFamily.HARDWARE})
    assert plan.family is SwizzleFamily.HARDWARE and plan.conflict_free
    _, plain = evaluate_shared_layout([store_side(shape, 1, 2), reader], unswizzled(shape), 2,
                                      NVIDIA_SM90)
    assert plain.wavefronts == 2 * plain.ideal  # 32-byte rows: 4 rows per bank line


# ------------------------------------------------------------------------------ AMD MFMA reads


def mfma_a_reads(shape: Sequence[int], rows_per_instruction: int, warps: int) -> LinearLayout:
    """ds_read_b128 of a K-major A tile in MFMA order, kpack 8 (module docstring): lanes take
    rows, then 16-byte k-chunks; warps stack along M (broadcast past the tile); registers
    repeat along K, then M."""
    row_bits = rows_per_instruction.bit_length() - 1
    lanes = [(1 << b, 0) for b in range(row_bits)] + [(0, 8 << b) for b in range(6 - row_bits)]
    rows, cols = rows_per_instruction, 8 << (6 - row_bits)
    warp_bases = []
    for _ in range(warps.bit_length() - 1):
        warp_bases.append((rows, 0) if rows < shape[0] else (0, 0))
        rows = min(rows * 2, shape[0])
    registers = [(0, 1), (0, 2), (0, 4)]
    while cols < shape[1]:
        registers.append((0, cols))
        cols *= 2
    while rows < shape[0]:
        registers.append((rows, 0))
        rows *= 2
    return LinearLayout({"register": registers, "lane": lanes, "warp": warp_bases},
                        list(zip(OUTS2, shape, strict=True)))


def amd_store(shape: Sequence[int], warps: int) -> SharedAccess:
    cols = shape[1] // 8
    return SharedAccess(blocked(shape, (1, 8), (64 // cols, cols), (warps, 1), (1, 0)), WRITE,
                        16, "ds_write_b128")


@pytest.mark.parametrize(("shape", "rows"), [((64, 32), 16), ((64, 64), 16), ((64, 64), 32),
                                             ((128, 32), 32)])
def test_mfma_a_operand_ds_read_b128_is_conflict_free_when_synthesized(shape, rows):
    sides = [amd_store(shape, 4), SharedAccess(mfma_a_reads(shape, rows, 4), READ, 16,
                                               "ds_read_b128")]
    assert mfma_a_reads(shape, rows, 4).rank() == (shape[0] * shape[1]).bit_length() - 1
    plain_store, plain_load = evaluate_shared_layout(sides, unswizzled(shape), 2, AMD_GFX942)
    assert plain_store.conflict_free and plain_load.wavefronts >= 2 * plain_load.ideal
    plan = synthesize_swizzle(sides, 2, AMD_GFX942)
    assert plan.vector_bytes == (16, 16) and plan.conflict_free, plan.reason
    check_against_enumeration(plan.sides, sides, plan.shared, AMD_GFX942, 2)
    gfx950 = synthesize_swizzle(sides, 2, AMD_GFX950)
    assert gfx950.vector_bytes == (16, 16) and gfx950.conflict_free, gfx950.reason


# ------------------------------------------------------------------------------ worked examples


def test_linear_layouts_worked_example_is_the_128_byte_xor_swizzle():
    """The standard case of the paper's optimal swizzling (arXiv 2505.23819, Sec. 5): a
    row-major 64 x 64 fp16 tile written by a blocked layout with 8-element vectors and read by
    ldmatrix.x4 into mma.m16n8k16 A fragments.

    Result: the common vector is the 3 register bits along K (16 bytes on both sides); the
    segment is {r1^c8, r2^c16, r4^c32, r8, r16, r32} (r = row bit, c = column bit), so column
    chunk c/8 is XORed with row % 8: exactly the classic swizzle vec=8, per_phase=1,
    max_phase=8, which is also the 128-byte TMA/wgmma mode. Both sides are conflict-free:
    4 wavefronts per 16-byte instruction, 16 instructions per side.
    """
    shape = (64, 64)
    sides = [store_side(shape, 1), ldmatrix_side("A", "K", shape)]
    layout = optimal_swizzle(sides, 2, NVIDIA_SM80)
    row = [(1, 8), (2, 16), (4, 32), (8, 0), (16, 0), (32, 0)]
    assert layout.bases["offset"] == ((0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (0, 32), *row)
    assert layout == swizzled_shared(shape, 2, 8, 1, 8)
    assert layout == nvidia_swizzle(SwizzleMode.B128, shape, 2, Major.K, Operand.A)
    costs = evaluate_shared_layout(sides, layout, 2, NVIDIA_SM80)
    assert [(c.vector_bytes, c.instructions, c.wavefronts) for c in costs] == \
        [(16, 16, 64), (16, 16, 64)]
    plan = synthesize_swizzle(sides, 2, NVIDIA_SM80)
    assert plan.shared == layout and "optimal F2 swizzle" in plan.reason


def test_transpose_example_needs_xor_by_twice_the_row():
    """The 16 x 32 fp32 transpose of one warp (zzzdavid.tech, "One bit off", running the paper's
    algorithm): the store writes row r from lane t = column; the read takes lane t to
    (t % 16, 2r + t / 16). The textbook XOR-by-row swizzle leaves a 2-way conflict on every
    read; the F2 construction XORs the column by 2 x row and is conflict-free both ways."""
    outs = [("dim0", 16), ("dim1", 32)]
    store = LinearLayout({"register": [(1, 0), (2, 0), (4, 0), (8, 0)],
                          "lane": [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16)], "warp": []}, outs)
    read = LinearLayout({"register": [(0, 2), (0, 4), (0, 8), (0, 16)],
                         "lane": [(1, 0), (2, 0), (4, 0), (8, 0), (0, 1)], "warp": []}, outs)
    sides = [SharedAccess(store, WRITE, 4, "store"), SharedAccess(read, READ, 4, "read")]
    layout = optimal_swizzle(sides, 4, NVIDIA_SM80)
    assert layout.bases["offset"][5:] == ((1, 2), (2, 4), (4, 8), (8, 16))
    assert layout == swizzled_shared((16, 32), 4, vec=2, per_phase=1, max_phase=16)
    textbook = swizzled_shared((16, 32), 4, vec=1, per_phase=1, max_phase=16)
    store_cost, read_cost = evaluate_shared_layout(sides, textbook, 4, NVIDIA_SM80)
    assert store_cost.conflict_free and read_cost.wavefronts == 2 * read_cost.ideal
    plan = synthesize_swizzle(sides, 4, NVIDIA_SM80)
    assert plan.conflict_free and plan.shared == layout


# ------------------------------------------------------------------------------ optimality


def _rank(vectors: Sequence[int]) -> int:
    rows, rank = [v for v in vectors if v], 0
    while rows:
        pivot = max(rows)
        top = pivot.bit_length() - 1
        rows = [r ^ pivot if r >> top & 1 else r for r in rows if r != pivot]
        rows = [r for r in rows if r]
        rank += 1
    return rank


@st.composite
def permutation_problems(draw: st.DrawFn):
    """Two sides whose bases are distinct tile bits (blocked-like layouts)."""
    n = draw(st.integers(5, 10))
    dim0 = draw(st.integers(0, n))
    outs = [("dim0", dim0), ("dim1", n - dim0)]
    elem = draw(st.sampled_from([2, 4]))
    sides = []
    for k in range(2):
        bits = [1 << b for b in draw(st.permutations(range(n)))]
        regs = draw(st.integers(0, n - 5))
        lanes = (bits[regs:regs + 5] + [0] * 5)[:5]
        layout = layout_from_columns([("register", regs), ("lane", 5), ("warp", n - regs - 5)],
                                     outs, bits[:regs] + lanes + bits[regs + 5:])
        width = draw(st.sampled_from([w for w in (2, 4, 8, 16) if w >= elem]))
        sides.append(SharedAccess(layout, READ if k else WRITE, width, f"s{k}"))
    return elem, sides


def _score(costs) -> tuple[int, int]:
    return sum(c.instructions for c in costs), sum(c.wavefronts for c in costs)


@given(permutation_problems())
def test_f2_construction_is_never_beaten_by_the_xor_family(problem):
    """The construction is at least as good, by (instructions, wavefronts), as the best
    unswizzled or classic XOR layout, and it vectorizes as wide as the common registers allow
    whenever no thread (lane, warp) holds a vector element."""
    elem, sides = problem
    layout = optimal_swizzle(sides, elem, NVIDIA_SM80)
    costs = evaluate_shared_layout(sides, layout, elem, NVIDIA_SM80)
    xor_family = synthesize_swizzle(sides, elem, NVIDIA_SM80,
                                    families={SwizzleFamily.UNSWIZZLED, SwizzleFamily.CLASSIC})
    assert _score(costs) <= _score(xor_family.sides), xor_family.reason
    common = [c for c in side_registers(sides[0]) if c in set(side_registers(sides[1]))]
    vector = common[:max(s.max_width_bytes // elem for s in sides).bit_length() - 1]
    threads = [t for side in sides for t in side_threads(side) if t]
    if _rank(threads + vector) == _rank(threads) + len(vector):
        for side, cost in zip(sides, costs, strict=True):
            assert cost.vector_bytes >= min(side.max_width_bytes, elem << len(vector))


def side_registers(side: SharedAccess) -> list[int]:
    return list(side.layout.flat_columns[:side.layout.in_dim_size_log2("register")])


def side_threads(side: SharedAccess) -> list[int]:
    return list(side.layout.flat_columns[side.layout.in_dim_size_log2("register"):])


def test_two_byte_accesses_keep_lanes_of_one_word_apart():
    """Regression (found by fuzzing): with 2-byte accesses, lanes whose offsets differ only in
    the half-word bit share a word, so the segment must also avoid that bit's direction; the
    XOR family is conflict-free here and so must the construction be."""
    outs = [("dim0", 4), ("dim1", 32)]
    store = LinearLayout({"register": [], "lane": [(1, 0), (0, 1), (0, 2), (0, 4), (0, 8)],
                          "warp": [(2, 0), (0, 16)]}, outs)
    read = LinearLayout({"register": [(0, 1), (0, 2)],
                         "lane": [(1, 0), (2, 0), (0, 4), (0, 8), (0, 16)], "warp": []}, outs)
    sides = [SharedAccess(store, WRITE, 2, "s0"), SharedAccess(read, READ, 2, "s1")]
    layout = optimal_swizzle(sides, 2, NVIDIA_SM80)
    assert all(c.conflict_free for c in evaluate_shared_layout(sides, layout, 2, NVIDIA_SM80))
    check_against_enumeration(evaluate_shared_layout(sides, layout, 2, NVIDIA_SM80), sides,
                              layout, NVIDIA_SM80, 2)


# ------------------------------------------------------------------------------ search behaviour


def test_the_search_is_deterministic_and_fast_for_a_128x64_bf16_tile():
    shape = (128, 64)
    writer = SharedAccess(blocked(shape, (1, 8), (4, 8), (8, 1), (1, 0)), WRITE, 16, "store")
    reader = SharedAccess(ldmatrix_access(mma_m16n8k16_a(shape, (8, 1))), AccessKind.LDMATRIX,
                          label="ldmatrix")
    families = set(SwizzleFamily)
    first = synthesize_swizzle([writer, reader], 2, NVIDIA_SM90, families=families)
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        again = synthesize_swizzle([writer, reader], 2, NVIDIA_SM90, families=families)
        timings.append(time.perf_counter() - start)
    assert again == first and first.conflict_free
    assert first.family is SwizzleFamily.HARDWARE  # ties go to the simpler family
    assert "the same layout as XOR swizzle vec=8" in first.reason
    assert min(timings) < 0.025, timings  # ~4 ms on the 2-core CI machine; generous margin


@given(permutation_problems())
def test_the_plan_reports_what_its_layout_costs_and_beats_plain_storage(problem):
    """The plan's costs are those of the layout it returns (the winner is rebuilt by the shared
    module, not reused from the search), and it is never worse, by (instructions, wavefronts),
    than any unswizzled order or the F2 construction on its own."""
    elem, sides = problem
    plan = synthesize_swizzle(sides, elem, NVIDIA_SM80)
    assert plan.sides == evaluate_shared_layout(sides, plan.shared, elem, NVIDIA_SM80)
    rivals = [unswizzled(plan.shared.out_dim_sizes.values(), order) for order in [(1, 0), (0, 1)]]
    rivals.append(optimal_swizzle(sides, elem, NVIDIA_SM80))
    for rival in rivals:
        assert _score(plan.sides) <= _score(evaluate_shared_layout(sides, rival, elem,
                                                                   NVIDIA_SM80))


# ------------------------------------------------------------------------------ refusals


def test_refusals_name_the_problem():
    shape = (64, 64)
    store = store_side(shape, 1)
    with pytest.raises(LayoutError, match="covers .* not the \\[32, 64\\] tile"):
        synthesize_swizzle([store_side((32, 64), 1), store], 2, NVIDIA_SM80)
    wave_ldmatrix = ldmatrix_side("A", "K", shape)
    wave_ldmatrix = SharedAccess(wave_ldmatrix.layout.resize_in_dim("lane", 64),
                                 AccessKind.LDMATRIX)
    with pytest.raises(LayoutError, match="gfx942 has no 16-byte LDMATRIX"):
        synthesize_swizzle([wave_ldmatrix], 2, AMD_GFX942)
    with pytest.raises(LayoutError, match="NVIDIA's \\(TMA, wgmma\\); gfx942 has none"):
        synthesize_swizzle([amd_store(shape, 4)], 2, AMD_GFX942,
                           families={SwizzleFamily.HARDWARE})
    with pytest.raises(LayoutError, match="at least one side"):
        synthesize_swizzle([], 2, NVIDIA_SM80)
    with pytest.raises(LayoutError, match="no swizzle family"):
        synthesize_swizzle([store], 2, NVIDIA_SM80, families=set())
    with pytest.raises(LayoutError, match="64 lanes; a sm_80 warp has 32"):
        synthesize_swizzle([amd_store(shape, 4)], 2, NVIDIA_SM80)
    with pytest.raises(LayoutError, match="cannot move 4-byte elements"):
        synthesize_swizzle([SharedAccess(store.layout, WRITE, 2)], 4, NVIDIA_SM80)


def test_matrix_reads_whose_rows_disagree_have_no_layout():
    shape = (64, 64)
    k_rows, m_rows = ldmatrix_side("A", "K", shape), ldmatrix_side("A", "MN", shape)
    with pytest.raises(LayoutError, match="rows .* are not the same elements"):
        optimal_swizzle([k_rows, m_rows], 2, NVIDIA_SM80)
    with pytest.raises(LayoutError, match="no shared layout among \\d+ candidates"):
        synthesize_swizzle([k_rows, m_rows], 2, NVIDIA_SM80)
    with pytest.raises(LayoutError, match="16-byte row contiguous and in order"):
        evaluate_shared_layout([k_rows], unswizzled(shape, (0, 1)), 2, NVIDIA_SM80)
