"""Bank models against a brute-force reference written here from the vendors' texts.

The reference knows nothing of ``tilekit.layout.banks``: it lists each target's lane phases
literally (NVIDIA quarter/half warps; the gfx942 ``ds_read_b128`` groups of the CK docs and the
ROCm LDS blog; the gfx950 groups measured by HipKittens), computes ``bank = (addr / 4) % banks``
for every 4-byte word a lane touches, and counts, per phase, the most distinct words any bank
holds (equal words broadcast). Layout-level counts are checked against addresses computed from
the offset map the test itself built, never from the code's inverse.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
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
    PhaseRule,
    Target,
    Vendor,
    core_matrix_access,
    count_layout_transactions,
    count_wavefronts,
    ldmatrix_access,
    phase_basis,
    target,
)
from tilekit.layout.distributed import (
    MatrixCount,
    blocked,
    ldmatrix,
    ldmatrix_row_addresses,
    mma_m16n8k16_a,
)
from tilekit.layout.linear import LinearLayout
from tilekit.layout.shared import swizzled_shared, unswizzled

READ, WRITE = AccessKind.READ, AccessKind.WRITE

# ------------------------------------------------------------------------------ the reference


def _runs(*starts: int, length: int = 4) -> list[int]:
    return [s + i for s in starts for i in range(length)]


def _split(lanes: int, size: int) -> list[list[int]]:
    return [list(range(s, s + size)) for s in range(0, lanes, size)]


# ds_read_b128 on gfx942, as the CK docs list it: 0:3+20:23, 4:7+16:19, 8:11+28:31, ...
CK_READ_B128 = [_runs(0, 20), _runs(4, 16), _runs(8, 28), _runs(12, 24),
                _runs(32, 52), _runs(36, 48), _runs(40, 60), _runs(44, 56)]
# ds_read_b128 on gfx950 (MI355X), HipKittens phase_results.txt
HK_READ_B128 = [[0, 1, 2, 3, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25, 26, 27],
                [4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 28, 29, 30, 31],
                [32, 33, 34, 35, 44, 45, 46, 47, 52, 53, 54, 55, 56, 57, 58, 59],
                [36, 37, 38, 39, 40, 41, 42, 43, 48, 49, 50, 51, 60, 61, 62, 63]]


def reference_phases(name: str, kind: AccessKind, width: int) -> tuple[int, list[list[int]]]:
    """(banks, phases) for one instruction, from the vendor texts (module docstring)."""
    if name.startswith("sm_"):
        return 32, _split(32, {16: 8, 8: 16}.get(width, 32))
    if name == "gfx942":
        if width == 16:
            return 32, CK_READ_B128 if kind is READ else _split(64, 8)
        return 32, _split(64, 16 if width == 8 else 32)
    if kind is READ:
        return 64, HK_READ_B128 if width == 16 else _split(64, 32 if width == 8 else 64)
    return 32, _split(64, {16: 8, 8: 16}.get(width, 32))


def reference_wavefronts(banks: int, phases: list[list[int]], width: int,
                         addresses: Sequence[int]) -> int:
    total = 0
    for phase in phases:
        words_in_bank: dict[int, set[int]] = defaultdict(set)
        for lane in phase:
            first = addresses[lane] // 4
            for word in range(first, first + max(1, width // 4)):
                words_in_bank[word % banks].add(word)
        total += max(len(words) for words in words_in_bank.values())
    return total


TARGETS = [NVIDIA_SM80, NVIDIA_SM90, AMD_GFX942, AMD_GFX950]


@st.composite
def address_batches(draw: st.DrawFn) -> tuple[Target, Access, list[list[int]]]:
    """A target, an access, and up to 48 lane-address vectors mixing strides and random picks."""
    tgt = draw(st.sampled_from(TARGETS))
    kind = draw(st.sampled_from([READ, WRITE]))
    width = draw(st.sampled_from([1, 2, 4, 8, 16]))
    lanes = tgt.lanes
    vectors = []
    for _ in range(draw(st.integers(8, 48))):
        style = draw(st.sampled_from(["stride", "random", "few"]))
        if style == "stride":
            stride = draw(st.sampled_from([0, 1, 2, 4, 8, 16, 32, 33, 64, 128, 256]))
            base = draw(st.integers(0, 64))
            vectors.append([(base + lane * stride) * width for lane in range(lanes)])
        elif style == "random":
            vectors.append(draw(st.lists(st.integers(0, 255).map(lambda i: i * width),
                                         min_size=lanes, max_size=lanes)))
        else:  # a handful of distinct addresses: broadcasts and conflicts together
            pool = draw(st.lists(st.integers(0, 4095).map(lambda i: i * width),
                                 min_size=1, max_size=4))
            vectors.append(draw(st.lists(st.sampled_from(pool), min_size=lanes,
                                         max_size=lanes)))
    return tgt, Access(kind, width), vectors


@given(address_batches())
def test_count_wavefronts_matches_the_reference(batch):
    tgt, access, vectors = batch
    banks, phases = reference_phases(tgt.name, access.kind, access.width_bytes)
    for addresses in vectors:
        expected = reference_wavefronts(banks, phases, access.width_bytes, addresses)
        assert count_wavefronts(tgt, access, addresses) == expected


def test_the_phase_tables_are_the_documented_ones():
    for tgt in TARGETS:
        for kind in (READ, WRITE):
            for width in (1, 2, 4, 8, 16):
                banks, phases = reference_phases(tgt.name, kind, width)
                access = Access(kind, width)
                assert tgt.bank_count(access) == banks
                assert sorted(map(sorted, tgt.phases(access))) == sorted(map(sorted, phases))


def test_every_phase_table_is_a_coset_family_and_gfx950_merges_gfx942_pairs():
    for tgt in TARGETS:
        for rule in tgt.rules:
            basis = phase_basis(rule.phases)
            assert basis is not None
            assert 1 << len(basis) == len(rule.phases[0])
    assert phase_basis(CK_READ_B128) == (1, 2, 20)
    merged = {frozenset(a + b) for a in CK_READ_B128 for b in CK_READ_B128 if a != b}
    assert all(frozenset(phase) in merged for phase in HK_READ_B128)
    assert phase_basis(((0, 1), (2, 5))) is None  # not a coset of span{1}


# ------------------------------------------------------------------------------ known patterns


def test_nvidia_textbook_patterns():
    sm80 = NVIDIA_SM80
    lanes = np.arange(32)
    assert count_wavefronts(sm80, Access(READ, 4), lanes * 4) == 1
    assert count_wavefronts(sm80, Access(READ, 4), lanes * 128) == 32  # one bank, 32 words
    assert count_wavefronts(sm80, Access(READ, 4), [0] * 32) == 1  # broadcast
    assert count_wavefronts(sm80, Access(READ, 2), lanes // 2 * 4 + lanes % 2 * 2) == 1  # halves
    assert count_wavefronts(sm80, Access(READ, 8), lanes * 8) == 2  # two half-warp phases
    assert count_wavefronts(sm80, Access(READ, 16), lanes * 16) == 4  # four quarter warps
    assert count_wavefronts(sm80, Access(READ, 16), lanes * 128) == 32  # 8-way in each phase
    # an ldmatrix.x1 reads 8 row addresses; lanes 8-31 do not count even if they collide
    rows = [r * 128 for r in range(8)] + [0] * 24
    assert count_wavefronts(sm80, Access.ldmatrix(MatrixCount.X1), rows) == 8
    assert count_wavefronts(sm80, Access.ldmatrix(MatrixCount.X4), rows) == 8 + 1 + 1 + 1


def test_amd_read_b128_groups_are_not_contiguous():
    # 16-byte bank group of each lane: lane % 8, except that lanes 16-23 swap halves. Every
    # contiguous 8-lane write phase still sees 8 distinct groups, but the read phases
    # {0-3, 20-23} and {4-7, 16-19} see each group twice: two 2-way conflicts.
    groups = [lane % 8 for lane in range(64)]
    groups[16:24] = [4, 5, 6, 7, 0, 1, 2, 3]
    addresses = [lane * 128 + group * 16 for lane, group in enumerate(groups)]
    assert count_wavefronts(AMD_GFX942, Access(WRITE, 16), addresses) == 8
    assert count_wavefronts(AMD_GFX942, Access(READ, 16), addresses) == 8 + 2
    plain = [lane * 16 for lane in range(64)]
    assert count_wavefronts(AMD_GFX942, Access(READ, 16), plain) == 8


def test_gfx950_reads_see_64_banks():
    stride_128 = np.arange(64) * 128  # every lane in bank 0 or 32
    assert count_wavefronts(AMD_GFX942, Access(READ, 4), stride_128) == 64
    assert count_wavefronts(AMD_GFX950, Access(READ, 4), stride_128) == 32
    assert count_wavefronts(AMD_GFX950, Access(WRITE, 4), stride_128) == 64


# ------------------------------------------------------------------------------ layouts


def _mat_vec(columns: Sequence[int], value: int) -> int:
    acc = 0
    for i, column in enumerate(columns):
        if value >> i & 1:
            acc ^= column
    return acc


@st.composite
def layout_cases(draw: st.DrawFn):
    """A shared layout S, an offset map C (vector bits known), and reg_layout = S after C."""
    tgt = draw(st.sampled_from(TARGETS))
    elem_bits = draw(st.integers(0, 3))
    kind = draw(st.sampled_from([READ, WRITE]))
    vector_bits = draw(st.integers(0, 4 - elem_bits))
    lane_bits = tgt.lanes.bit_length() - 1
    n = draw(st.integers(vector_bits + 2, 10))
    shared_columns = draw(invertible_matrices(n))
    dim0 = draw(st.integers(0, n))
    outs = [("dim0", dim0), ("dim1", n - dim0)]
    aligned = st.integers(0, (1 << n) - 1).map(lambda x: x & ~((1 << vector_bits) - 1))
    vector = draw(invertible_matrices(vector_bits))  # any basis of the low offsets
    extra = draw(st.lists(st.one_of(st.just(0), aligned), max_size=3))
    lanes = draw(st.lists(aligned, min_size=lane_bits, max_size=lane_bits))
    warps = draw(st.lists(aligned, max_size=2))
    offset_map = {"register": vector + extra, "lane": lanes, "warp": warps}
    tile = {name: [_mat_vec(shared_columns, c) for c in cols] for name, cols in offset_map.items()}
    reg_layout = layout_from_columns(
        [(name, len(cols)) for name, cols in tile.items()], outs,
        [c for cols in tile.values() for c in cols])
    shared = layout_from_columns([("offset", n)], outs, shared_columns)
    return tgt, Access(kind, 1 << (vector_bits + elem_bits)), 1 << elem_bits, shared, reg_layout, \
        offset_map


@given(layout_cases())
def test_count_layout_transactions_matches_the_reference(case):
    tgt, access, elem, shared, reg_layout, offset_map = case
    vector_bits = (access.width_bytes // elem).bit_length() - 1
    extra = [c for c in offset_map["register"][vector_bits:] if c]
    banks, phases = reference_phases(tgt.name, access.kind, access.width_bytes)
    expected = []
    for warp in range(1 << len(offset_map["warp"])):
        total = 0
        for instruction in range(1 << len(extra)):
            base = _mat_vec(offset_map["warp"], warp) ^ _mat_vec(extra, instruction)
            addresses = [(base ^ _mat_vec(offset_map["lane"], lane)) * elem
                         for lane in range(tgt.lanes)]
            total += reference_wavefronts(banks, phases, access.width_bytes, addresses)
        expected.append(total)
    result = count_layout_transactions(tgt, access, shared, reg_layout, elem)
    assert result.wavefronts_per_warp == tuple(expected)
    assert result.instructions_per_warp == 1 << len(extra)
    assert result.ideal == len(phases) << (len(extra) + len(offset_map["warp"]))


def test_mma_operand_through_ldmatrix_conflicts_unswizzled_and_not_under_128b():
    shape = (64, 64)
    reads = ldmatrix_access(mma_m16n8k16_a(shape, (4, 1)))
    writes = blocked(shape, (1, 8), (4, 8), (4, 1), (1, 0))
    plain, swizzled = unswizzled(shape), swizzled_shared(shape, 2, 8, 1, 8)
    load = count_layout_transactions(NVIDIA_SM90, Access.ldmatrix(), plain, reads, 2)
    assert (load.instructions_per_warp, load.phases) == (4, 4)
    assert load.wavefronts == 8 * load.ideal  # the 8 rows of a matrix share 4 banks
    assert count_layout_transactions(NVIDIA_SM90, Access.ldmatrix(), swizzled, reads,
                                     2).conflict_free
    for shared in (plain, swizzled):
        assert count_layout_transactions(NVIDIA_SM90, Access(WRITE, 16), shared, writes,
                                         2).conflict_free


def test_rocm_blog_naive_gemm_tile_has_two_way_read_conflicts():
    """ROCm blog "Avoiding LDS bank conflicts ... CK-Tile": A is 64 x 32 fp16 (kKPerBlock=32,
    kKPack=8), stored row-major in LDS by ds_write_b128 (thread t: row t/4, k-chunk t%4), read by
    ds_read_b128 in the MFMA 16x16x32 order (lane l: row l%16, k = 8*(l/16)..+7). The blog finds
    the write conflict-free and the read 2-way conflicted."""
    shape = (64, 32)
    writes = LinearLayout({"register": [(0, 1), (0, 2), (0, 4)],
                           "lane": [(0, 8), (0, 16), (1, 0), (2, 0), (4, 0), (8, 0)],
                           "warp": [(16, 0), (32, 0)]}, [("dim0", 64), ("dim1", 32)])
    reads = LinearLayout({"register": [(0, 1), (0, 2), (0, 4)],
                          "lane": [(1, 0), (2, 0), (4, 0), (8, 0), (0, 8), (0, 16)],
                          "warp": [(16, 0), (32, 0)]}, [("dim0", 64), ("dim1", 32)])
    plain = unswizzled(shape)
    store = count_layout_transactions(AMD_GFX942, Access(WRITE, 16), plain, writes, 2)
    load = count_layout_transactions(AMD_GFX942, Access(READ, 16), plain, reads, 2)
    assert store.conflict_free
    assert load.wavefronts == 2 * load.ideal


def test_duplicated_registers_issue_nothing_and_broadcast_warps_still_issue():
    shape = (16, 16)
    base = blocked(shape, (1, 8), (16, 2), (1, 1), (1, 0))  # 32 lanes x 8 = the whole tile
    duplicated = LinearLayout(
        {"register": [*base.bases["register"], (0, 0)], "lane": list(base.bases["lane"]),
         "warp": [(0, 0)]},
        list(base.out_dim_sizes.items()))
    once = count_layout_transactions(NVIDIA_SM80, Access(WRITE, 16), unswizzled(shape), base, 2)
    twice = count_layout_transactions(NVIDIA_SM80, Access(WRITE, 16), unswizzled(shape),
                                      duplicated, 2)
    assert once.instructions_per_warp == twice.instructions_per_warp == 1
    assert twice.wavefronts_per_warp == once.wavefronts_per_warp * 2


# ------------------------------------------------------------------------------ access layouts


@pytest.mark.parametrize("count", list(MatrixCount))
def test_ldmatrix_access_lanes_are_the_row_addresses(count):
    access = ldmatrix_access(ldmatrix(count), count)
    rows = ldmatrix_row_addresses(count)
    assert access.bases["lane"] == rows.bases["lane"]
    assert access.bases["register"][:3] == ((0, 1), (0, 2), (0, 4))
    # every element the fragment holds is addressed exactly once
    fragment = ldmatrix(count)
    assert access.rank() == fragment.rank()


def test_ldmatrix_access_of_a_trans_fragment_and_of_a_non_fragment():
    trans = ldmatrix_access(ldmatrix(MatrixCount.X2, trans=True), MatrixCount.X2, trans=True)
    assert trans.bases["register"] == ((0, 1), (0, 2), (0, 4))
    assert trans.bases["lane"][:3] == ((1, 0), (2, 0), (4, 0))
    outs = [("dim0", 16), ("dim1", 16)]
    shuffled = LinearLayout({"register": [(0, 1), (8, 0), (0, 8)],
                             "lane": [(0, 4), (0, 2), (1, 0), (2, 0), (4, 0)]}, outs)
    with pytest.raises(LayoutError, match="not 8 consecutive elements of one dim"):
        ldmatrix_access(shuffled)
    narrow = LinearLayout({"register": [(0, 1), (8, 0), (0, 8)],
                           "lane": [(0, 2), (0, 4), (1, 0), (2, 0)]}, outs)
    with pytest.raises(LayoutError, match="5 lane bits"):
        ldmatrix_access(narrow)


@pytest.mark.parametrize(("shape", "contiguous"), [((64, 16), 1), ((16, 64), 0), ((64, 64), 1),
                                                   ((8, 8), 1), ((128, 32), 0)])
def test_core_matrix_access_reads_one_core_matrix_per_phase(shape, contiguous):
    layout = core_matrix_access(shape, contiguous, 2)
    strided = 1 - contiguous
    assert layout.rank() == (shape[0] * shape[1]).bit_length() - 1  # every element read
    for register in range(layout.in_dim_size("register") // 8):
        for phase in range(4):
            rows, starts = set(), set()
            for lane in range(8 * phase, 8 * phase + 8):
                point = layout.apply({"register": register * 8, "lane": lane, "warp": 0})
                coord = (point["dim0"], point["dim1"])
                rows.add(coord[strided])
                starts.add(coord[contiguous])
            assert len(starts) == 1 and starts.pop() % 8 == 0
            assert len(rows) == 8 and min(rows) % 8 == 0


# ------------------------------------------------------------------------------ errors


def test_malformed_accesses_and_addresses_name_the_problem():
    with pytest.raises(LayoutError, match="1, 2, 4, 8 or 16 bytes"):
        Access(READ, 12)
    with pytest.raises(LayoutError, match="LDMATRIX moves 16-byte rows"):
        Access(AccessKind.LDMATRIX, 8)
    with pytest.raises(LayoutError, match="gfx942 has no 16-byte LDMATRIX"):
        AMD_GFX942.phases(Access.ldmatrix())
    with pytest.raises(LayoutError, match="sm_80 has no 16-byte CORE_MATRIX"):
        NVIDIA_SM80.phases(Access(AccessKind.CORE_MATRIX, 16))
    with pytest.raises(LayoutError, match="not 16-byte aligned"):
        count_wavefronts(NVIDIA_SM80, Access(READ, 16), [0] * 31 + [8])
    with pytest.raises(LayoutError, match="32 lanes per instruction, got 64"):
        count_wavefronts(NVIDIA_SM80, Access(READ, 4), [0] * 64)
    with pytest.raises(LayoutError, match="known targets: gfx942, gfx950, sm_80, sm_90"):
        target("sm_70")
    assert target("gfx942") is AMD_GFX942


def test_a_target_whose_phases_miss_a_lane_is_refused():
    with pytest.raises(LayoutError, match="do not split lanes 0..31 exactly once"):
        Target("bad", Vendor.NVIDIA, 32, 32, 4,
               (PhaseRule(frozenset({READ}), 4, (tuple(range(31)),)),))


def test_layouts_that_cannot_carry_the_access_are_refused():
    shape = (16, 16)
    writes = blocked(shape, (1, 8), (8, 4), (2, 1), (1, 0))
    column_major = unswizzled(shape, order=(0, 1))
    with pytest.raises(LayoutError, match="keeps only 1 of each lane's elements") as error:
        count_layout_transactions(NVIDIA_SM80, Access(WRITE, 16), column_major, writes, 2)
    assert "at most 2 bytes" in error.value.hints[0]
    not_bijective = LinearLayout({"offset": [(0, 1)] * 8}, [("dim0", 16), ("dim1", 16)])
    with pytest.raises(LayoutError, match="no address function"):
        count_layout_transactions(NVIDIA_SM80, Access(WRITE, 4), not_bijective, writes, 2)
    with pytest.raises(LayoutError, match="has 64 lanes, a sm_80 warp has 32"):
        wave = blocked(shape, (1, 4), (16, 4), (1, 1), (1, 0))
        count_layout_transactions(NVIDIA_SM80, Access(WRITE, 8), unswizzled(shape), wave, 2)
    with pytest.raises(LayoutError, match="cannot move whole 4-byte elements"):
        count_layout_transactions(NVIDIA_SM80, Access(WRITE, 2), unswizzled(shape), writes, 4)
