"""wgmma descriptors against an independent reading of the PTX ISA.

The reference here builds canonical layouts from the PTX ISA's CuTe table
("Canonical Layouts", section 9.7.15.5.1.2.1.3) with a tiny CuTe evaluator,
swizzles byte addresses the way ``Swizzle<B, 4, 3>`` does, packs descriptor
bits from the "Matrix Descriptor Format" table, and models how the hardware
reads through a descriptor (start + canonical offset, XOR on address bits less
the base offset). That reading model was checked on an H100: the address of
every element wgmma read was decoded from real products. Nothing here calls
tilekit to build an expected answer.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.layout.admissibility import AlternativeKind, Rule
from tilekit.layout.tma import GlobalTensor, Swizzle, TmaDataType, TmaRequest, tma_admissibility
from tilekit.layout.wgmma import (
    CanonicalChoice,
    DescriptorWord,
    Major,
    Operand,
    RegisterOperandPlan,
    WgmmaDescriptor,
    WgmmaOperandSpec,
    WgmmaSwizzle,
    WgmmaType,
    canonical_layout,
    decode_descriptor,
    encode_descriptor,
    wgmma_admissibility,
    wgmma_alternatives,
)

CHUNKS = {WgmmaSwizzle.NONE: 1, WgmmaSwizzle.B32: 2, WgmmaSwizzle.B64: 4, WgmmaSwizzle.B128: 8}

# ---- reference ---------------------------------------------------------------------------------


def cute(shape: tuple[tuple[int, ...], tuple[int, ...]],
         stride: tuple[tuple[int, ...], tuple[int, ...]]) -> np.ndarray:
    """Evaluate a rank-2 CuTe layout (each mode a tuple, colexicographic) into a table."""
    def mode(sh: tuple[int, ...], st_: tuple[int, ...]) -> list[int]:
        out = []
        for x in range(math.prod(sh)):
            off, rest = 0, x
            for s, d in zip(sh, st_, strict=True):
                off += (rest % s) * d
                rest //= s
            out.append(off)
        return out

    rows, cols = mode(shape[0], stride[0]), mode(shape[1], stride[1])
    return np.array([[r + c for c in cols] for r in rows], dtype=np.int64)


def ref_swizzle(addr: np.ndarray, chunks: int, base_offset: int = 0) -> np.ndarray:
    """Swizzle<log2 chunks, 4, 3> on byte addresses, the row phase reduced by base_offset."""
    row = ((addr >> 7) - base_offset) % chunks
    return addr ^ (row << 4)


def ref_unswizzled(major: Major, swz: WgmmaSwizzle, mn: int, k: int, elem: int, lbo: int,
                   sbo: int) -> np.ndarray:
    """The PTX table's CuTe layouts, evaluated in elements, returned in bytes."""
    t, w = 16 // elem, CHUNKS[swz]
    lb, sb = lbo // elem, sbo // elem
    if major is Major.MN:
        m, kk = mn // (t * w), k // 8
        if swz is WgmmaSwizzle.NONE:
            lay = cute(((t, 1, m), (8, kk)), ((1, t, sb), (t, lb)))
        else:
            lay = cute(((t, w, m), (8, kk)), ((1, t, lb), (w * t, sb)))
    else:
        m, two_k = mn // 8, k // t
        if swz is WgmmaSwizzle.NONE:
            lay = cute(((8, m), (t, two_k)), ((t, sb), (1, lb)))
        else:
            lay = cute(((8, m), (t, two_k)), ((w * t, sb), (1, t)))
    return lay * elem


def ref_offsets(major: Major, swz: WgmmaSwizzle, mn: int, k: int, elem: int, lbo: int,
                sbo: int) -> np.ndarray:
    return ref_swizzle(ref_unswizzled(major, swz, mn, k, elem, lbo, sbo), CHUNKS[swz])


def ref_feasible(major: Major, swz: WgmmaSwizzle, mn: int, k: int, elem: int) -> bool:
    span = 16 * CHUNKS[swz]
    if major is Major.K:
        return mn % 8 == 0 and k * elem % 16 == 0 and (swz is WgmmaSwizzle.NONE or k * elem <= span)
    return k % 8 == 0 and mn * elem % span == 0


def ref_dense(major: Major, swz: WgmmaSwizzle, mn: int, k: int, elem: int) -> tuple[int, int]:
    span = 16 * CHUNKS[swz]
    if major is Major.K:
        return (128, 128 * (k * elem // 16)) if swz is WgmmaSwizzle.NONE else (16, 8 * span)
    if swz is WgmmaSwizzle.NONE:
        return 128 * (mn * elem // 16), 128
    return 8 * span, 8 * span * (mn * elem // span)


def ref_observable(
    major: Major, swz: WgmmaSwizzle, mn: int, k: int, elem: int
) -> tuple[bool, bool]:
    """(LBO observable, SBO observable): does the tile contain two groups along that stride?"""
    span = 16 * CHUNKS[swz]
    if major is Major.K:
        return swz is WgmmaSwizzle.NONE and k * elem > 16, mn > 8
    if swz is WgmmaSwizzle.NONE:
        return k > 8, mn * elem > 16
    return mn * elem > span, k > 8


def hardware_reads(desc: WgmmaDescriptor, mn: int, k: int, elem: int) -> np.ndarray:
    """Addresses the hardware reads through ``desc`` (the model measured on an H100)."""
    unsw = ref_unswizzled(desc.major, desc.swizzle, mn, k, elem, desc.lbo, desc.sbo)
    return ref_swizzle(desc.start_address + unsw, CHUNKS[desc.swizzle], desc.base_offset)


def ref_encode(start: int, lbo: int, sbo: int, base_offset: int, swizzle_bits: int) -> int:
    enc = lambda x: (x & 0x3FFFF) >> 4  # noqa: E731  (the PTX ISA's matrix-descriptor-encode)
    return enc(start) | enc(lbo) << 16 | enc(sbo) << 32 | base_offset << 49 | swizzle_bits << 62


SPEC_A = WgmmaOperandSpec(Operand.A, WgmmaType.BF16, 64)

# ---- the PTX ISA's worked examples, literally ----------------------------------------------


@pytest.mark.parametrize(
    ("major", "swz", "mn", "k", "elem", "lbo", "sbo", "exact_shape", "exact_stride"),
    [
        # "K-Major, no-swizzling and tf32 type": ((8,2),(4,4)):((4,32),(1,64)), LBO 64*4, SBO 32*4
        (Major.K, WgmmaSwizzle.NONE, 16, 16, 4, 256, 128, ((8, 2), (4, 4)), ((4, 32), (1, 64))),
        # "MN-Major, no-swizzling and bf16 type": ((8,1,2),(8,2)):((1,8,64),(8,128))
        (Major.MN, WgmmaSwizzle.NONE, 16, 16, 2, 256, 128, ((8, 1, 2), (8, 2)),
         ((1, 8, 64), (8, 128))),
        # "MN-Major, 32B swizzling and bf16 type": ((8,2,2),(8,2)):((1,8,128),(16,256))
        (Major.MN, WgmmaSwizzle.B32, 32, 16, 2, 256, 512, ((8, 2, 2), (8, 2)),
         ((1, 8, 128), (16, 256))),
        # "MN-Major, 64B swizzling and bf16 type": ((8,4,2),(8,2)):((1,8,256),(32,512))
        (Major.MN, WgmmaSwizzle.B64, 64, 16, 2, 512, 1024, ((8, 4, 2), (8, 2)),
         ((1, 8, 256), (32, 512))),
    ],
)
def test_canonical_layout_reproduces_the_ptx_examples(
    major: Major, swz: WgmmaSwizzle, mn: int, k: int, elem: int, lbo: int, sbo: int,
    exact_shape: tuple, exact_stride: tuple,
) -> None:
    exact = ref_swizzle(cute(exact_shape, exact_stride) * elem, CHUNKS[swz])
    got = canonical_layout(major, swz, mn, k, elem, lbo, sbo)
    assert np.array_equal(got, exact)
    params = wgmma_admissibility(got, elem_bytes=elem, base_address=0x8000,
                                 major=major, swizzle=swz).unwrap()
    assert (params.lbo, params.sbo) == (lbo, sbo)
    assert (params.lbo >> 4, params.sbo >> 4) == (lbo // 16, sbo // 16)  # "Encoding of LBO/SBO"


# ---- round trips -------------------------------------------------------------------------------

ROUND_TRIP = [
    (operand, major, swz, n)
    for operand, ns in ((Operand.A, (64,)), (Operand.B, range(8, 257, 8)))
    for n in ns
    for major in Major
    for swz in WgmmaSwizzle
]


@pytest.mark.parametrize(("operand", "major", "swz", "n"), ROUND_TRIP,
                         ids=[f"{o.name}-{m.name}-{s.name}-N{n}" for o, m, s, n in ROUND_TRIP])
def test_canonical_layouts_round_trip(operand: Operand, major: Major, swz: WgmmaSwizzle,
                                      n: int) -> None:
    spec = WgmmaOperandSpec(operand, WgmmaType.BF16, n)
    mn, k = spec.shape
    if not ref_feasible(major, swz, mn, k, 2):
        with pytest.raises(LayoutError, match="no canonical"):
            canonical_layout(major, swz, mn, k, 2, *ref_dense(major, swz, mn, k, 2))
        return
    lbo, sbo = ref_dense(major, swz, mn, k, 2)
    offsets = ref_offsets(major, swz, mn, k, 2, lbo, sbo)
    assert np.array_equal(canonical_layout(major, swz, mn, k, 2, lbo, sbo), offsets)
    base = 0x6000
    d = wgmma_admissibility(offsets, elem_bytes=2, base_address=base, spec=spec).unwrap()
    assert (d.major, d.swizzle, d.start_address, d.base_offset, d.trans_bit) == (
        major, swz, base, 0, major.value)
    lbo_seen, sbo_seen = ref_observable(major, swz, mn, k, 2)
    if major is Major.K and swz is not WgmmaSwizzle.NONE:
        assert d.lbo == 16  # "not used, assumed to be 1" (encoded)
    elif lbo_seen:
        assert d.lbo == lbo
    if sbo_seen:
        assert d.sbo == sbo
    assert np.array_equal(hardware_reads(d, mn, k, 2), base + offsets)
    assert np.array_equal(canonical_layout(major, swz, mn, k, 2, d.lbo, d.sbo), offsets)
    word = d.encode()
    assert decode_descriptor(word) == DescriptorWord(base, d.lbo, d.sbo, 0, swz)
    assert word == ref_encode(base, d.lbo, d.sbo, 0, swz.value)


@settings(max_examples=80)
@given(st.sampled_from(list(Major)), st.sampled_from(list(WgmmaSwizzle)),
       st.sampled_from([(1, 32), (2, 16), (4, 8)]), st.integers(1, 4), st.integers(1, 4),
       st.integers(0, 8), st.integers(0, 8), st.integers(0, 30))
def test_padded_strides_round_trip_for_every_type(
    major: Major, swz: WgmmaSwizzle, elem_k: tuple[int, int], mn_groups: int, k_groups: int,
    lbo_pad: int, sbo_pad: int, base_rows: int,
) -> None:
    elem, kk = elem_k
    if major is Major.MN and elem != 2:
        return
    span = 16 * CHUNKS[swz]
    mn = 8 * mn_groups if major is Major.K else span // elem * mn_groups
    k = kk * k_groups if major is Major.MN else kk
    if not ref_feasible(major, swz, mn, k, elem):
        return
    lbo, sbo = ref_dense(major, swz, mn, k, elem)
    lbo += 16 * lbo_pad if not (major is Major.K and swz is not WgmmaSwizzle.NONE) else 0
    sbo += 16 * sbo_pad
    offsets = ref_offsets(major, swz, mn, k, elem, lbo, sbo)
    base = 0x2000 + 1024 * base_rows
    verdict = wgmma_admissibility(offsets, elem_bytes=elem, base_address=base)
    d = verdict.unwrap()
    assert np.array_equal(hardware_reads(d, mn, k, elem), base + offsets)
    if (d.major, d.swizzle) == (major, swz):
        lbo_seen, sbo_seen = ref_observable(major, swz, mn, k, elem)
        assert not lbo_seen or d.lbo == lbo
        assert not sbo_seen or d.sbo == sbo


@given(st.integers(0, (1 << 14) - 1), st.integers(0, (1 << 14) - 1), st.integers(0, (1 << 14) - 1),
       st.integers(0, 7), st.sampled_from(list(WgmmaSwizzle)))
def test_encode_decode_round_trip_and_bit_layout(start: int, lbo: int, sbo: int, bo: int,
                                                 swz: WgmmaSwizzle) -> None:
    word = encode_descriptor(start << 4, lbo << 4, sbo << 4, bo, swz)
    assert word == ref_encode(start << 4, lbo << 4, sbo << 4, bo, swz.value)
    assert decode_descriptor(word) == DescriptorWord(start << 4, lbo << 4, sbo << 4, bo, swz)
    assert encode_descriptor(*(lambda w: (w.start_address, w.lbo, w.sbo, w.base_offset,
                                          w.swizzle))(decode_descriptor(word))) == word


def test_descriptor_bits_match_the_ptx_table() -> None:
    word = encode_descriptor(0x1230, 16, 1024, 3, WgmmaSwizzle.B128)
    assert word == (0x123 | 1 << 16 | 64 << 32 | 3 << 49 | 1 << 62)
    assert WgmmaSwizzle.B64.value == 2 and WgmmaSwizzle.B32.value == 3


@pytest.mark.parametrize("bad", [(0x1238, 16, 16, 0), (0x40000, 16, 16, 0), (16, 24, 16, 0),
                                 (16, 16, 1 << 18, 0), (16, 16, 16, 8), (16, -16, 16, 0)])
def test_encode_refuses_what_the_fields_would_truncate(bad: tuple[int, int, int, int]) -> None:
    with pytest.raises(LayoutError):
        encode_descriptor(*bad, WgmmaSwizzle.NONE)


@pytest.mark.parametrize("bit", [14, 15, 30, 31, 46, 47, 48, 52, 61])
def test_decode_refuses_reserved_bits(bit: int) -> None:
    with pytest.raises(LayoutError, match="reserved"):
        decode_descriptor(1 << bit)


# ---- broken layouts ------------------------------------------------------------------------------


@settings(max_examples=80)
@given(st.sampled_from(list(Major)), st.sampled_from(list(WgmmaSwizzle)), st.integers(1, 63),
       st.sampled_from([16, 32, 48, -16, 4096]))
def test_a_moved_row_is_rejected_naming_it(major: Major, swz: WgmmaSwizzle, row: int,
                                           shift: int) -> None:
    mn, k = 64, 16
    lbo, sbo = ref_dense(major, swz, mn, k, 2)
    offsets = ref_offsets(major, swz, mn, k, 2, lbo, sbo)
    broken = offsets.copy()
    if major is Major.K:
        broken[row, :] += shift  # one MN row of the tile
        where = (row, 0)
    else:
        krow = row % k or 1
        broken[:, krow] += shift  # one K row of the tile
        where = (0, krow)
    verdict = wgmma_admissibility(broken, elem_bytes=2, base_address=0x4000, spec=SPEC_A,
                                  major=major, swizzle=swz)
    assert not verdict.admissible
    assert verdict.rules <= {Rule.WGMMA_NOT_CANONICAL, Rule.WGMMA_CORE_MATRIX}
    (v,) = verdict.violations
    if v.rule is Rule.WGMMA_NOT_CANONICAL:
        r, c = (int(x) for x in v.field.removeprefix("element (").rstrip(")").split(", "))
        assert (r if major is Major.K else c) == where[0 if major is Major.K else 1]
        assert v.value != v.limit


@given(st.sampled_from(list(Major)), st.sampled_from(list(WgmmaSwizzle)), st.integers(0, 63),
       st.integers(0, 1), st.integers(0, 6))
def test_a_scrambled_core_matrix_row_is_a_core_matrix_violation(
    major: Major, swz: WgmmaSwizzle, line: int, chunk: int, lane: int,
) -> None:
    offsets = ref_offsets(major, swz, 64, 16, 2, *ref_dense(major, swz, 64, 16, 2))
    broken = offsets.copy()
    if major is Major.K:  # swap two neighbours inside one 16-byte row along K
        c = 8 * chunk + lane
        broken[line, [c, c + 1]] = broken[line, [c + 1, c]]
    else:  # along MN
        krow, m = line % 16, 8 * (line // 16) + lane
        broken[[m, m + 1], krow] = broken[[m + 1, m], krow]
    verdict = wgmma_admissibility(broken, elem_bytes=2, base_address=0x4000, major=major,
                                  swizzle=swz)
    assert verdict.rules == {Rule.WGMMA_CORE_MATRIX}
    assert "not contiguous" in verdict.violations[0].message


def test_misaligned_buffers() -> None:
    offsets = ref_offsets(Major.K, WgmmaSwizzle.B128, 64, 16, 2, 16, 1024)
    # 128-aligned but off the 1024-byte repeat: the PTX base offset (P >> 7) & 7 fixes it
    d = wgmma_admissibility(offsets, elem_bytes=2, base_address=0x4080, spec=SPEC_A).unwrap()
    assert (d.base_offset, d.start_address) == (1, 0x4080)
    assert np.array_equal(hardware_reads(d, 64, 16, 2), 0x4080 + offsets)
    # ... unless the caller cannot emit base offsets
    refused = wgmma_admissibility(offsets, elem_bytes=2, base_address=0x4080, spec=SPEC_A,
                                  allow_base_offset=False)
    assert refused.rules == {Rule.WGMMA_SWIZZLE_BASE}
    assert "base offset 1" in refused.violations[0].message
    # not even 128-aligned: no base offset expresses it
    off16 = wgmma_admissibility(offsets, elem_bytes=2, base_address=0x4010, spec=SPEC_A)
    assert off16.rules == {Rule.WGMMA_SWIZZLE_BASE}
    assert "not 128-byte aligned" in off16.violations[0].message
    # no swizzle: only the 16-byte start alignment matters
    plain = ref_offsets(Major.K, WgmmaSwizzle.NONE, 64, 16, 2, 128, 256)
    assert wgmma_admissibility(plain, elem_bytes=2, base_address=0x4010).admissible
    assert wgmma_admissibility(plain, elem_bytes=2, base_address=0x4008).rules == {
        Rule.WGMMA_START_ALIGN}


# Measured on an H100: relative-swizzled 64x16 bf16 A tiles at P = 0x1000 + 128 r, read through
# the descriptor tilekit chose, gave exact products. (major, swizzle, r, chosen base offset).
HARDWARE_BASE_OFFSETS = [
    (Major.K, WgmmaSwizzle.B32, 1, 1), (Major.K, WgmmaSwizzle.B32, 2, 0),
    (Major.K, WgmmaSwizzle.B32, 3, 3), (Major.K, WgmmaSwizzle.B64, 1, 1),
    (Major.K, WgmmaSwizzle.B64, 2, 0), (Major.K, WgmmaSwizzle.B64, 3, 3),
    (Major.K, WgmmaSwizzle.B64, 7, 7), (Major.K, WgmmaSwizzle.B128, 1, 1),
    (Major.K, WgmmaSwizzle.B128, 4, 0), (Major.K, WgmmaSwizzle.B128, 5, 5),
    (Major.K, WgmmaSwizzle.B128, 7, 7), (Major.MN, WgmmaSwizzle.B32, 3, 3),
    (Major.MN, WgmmaSwizzle.B64, 2, 2), (Major.MN, WgmmaSwizzle.B64, 6, 6),
    (Major.MN, WgmmaSwizzle.B128, 4, 4), (Major.MN, WgmmaSwizzle.B128, 6, 6),
]


@pytest.mark.parametrize(("major", "swz", "r", "bo"), HARDWARE_BASE_OFFSETS)
def test_base_offsets_that_ran_on_hardware(
    major: Major, swz: WgmmaSwizzle, r: int, bo: int
) -> None:
    offsets = ref_offsets(major, swz, 64, 16, 2, *ref_dense(major, swz, 64, 16, 2))
    base = 0x1000 + 128 * r
    d = wgmma_admissibility(offsets, elem_bytes=2, base_address=base, spec=SPEC_A).unwrap()
    assert d.base_offset == bo
    assert np.array_equal(hardware_reads(d, 64, 16, 2), base + offsets)


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        (dict(spec=WgmmaOperandSpec(Operand.B, WgmmaType.BF16, 128)), Rule.WGMMA_SHAPE),
        (dict(spec=WgmmaOperandSpec(Operand.A, WgmmaType.S8, 40)), Rule.WGMMA_SHAPE),
        (dict(spec=WgmmaOperandSpec(Operand.A, WgmmaType.TF32, 64)), Rule.WGMMA_DTYPE),
        (dict(spec=SPEC_A, arch=100), Rule.WGMMA_ARCH),
    ],
)
def test_instruction_context_rules(kwargs: dict, rule: Rule) -> None:
    offsets = ref_offsets(Major.K, WgmmaSwizzle.B128, 64, 16, 2, 16, 1024)
    assert rule in wgmma_admissibility(offsets, elem_bytes=2, base_address=0x4000,
                                       **kwargs).rules


def test_mn_major_exists_only_for_16_bit_types() -> None:
    tf32 = ref_offsets(Major.K, WgmmaSwizzle.B32, 64, 8, 4, 16, 256)
    spec = WgmmaOperandSpec(Operand.A, WgmmaType.TF32, 64)
    assert wgmma_admissibility(tf32, elem_bytes=4, base_address=0, spec=spec).admissible
    assert wgmma_admissibility(tf32, elem_bytes=4, base_address=0, spec=spec,
                               major=Major.MN).rules == {Rule.WGMMA_DTYPE}
    e4m3 = ref_offsets(Major.K, WgmmaSwizzle.NONE, 64, 32, 1, 128, 256)
    spec8 = WgmmaOperandSpec(Operand.A, WgmmaType.E4M3, 64)
    assert wgmma_admissibility(e4m3, elem_bytes=1, base_address=0, spec=spec8).unwrap().lbo == 128


def test_strides_that_do_not_encode() -> None:
    odd = ref_offsets(Major.K, WgmmaSwizzle.NONE, 16, 16, 2, 136, 256)
    assert wgmma_admissibility(odd, elem_bytes=2, base_address=0, major=Major.K,
                               swizzle=WgmmaSwizzle.NONE).rules == {Rule.WGMMA_STRIDE_ALIGN}
    far = ref_offsets(Major.K, WgmmaSwizzle.NONE, 16, 16, 2, 128, 1 << 18)
    rules = wgmma_admissibility(far, elem_bytes=2, base_address=0, major=Major.K,
                                swizzle=WgmmaSwizzle.NONE).rules
    assert Rule.WGMMA_STRIDE_RANGE in rules


# ---- alternatives ------------------------------------------------------------------------------


def test_alternatives_for_a_misaligned_buffer() -> None:
    offsets = ref_offsets(Major.K, WgmmaSwizzle.B128, 64, 16, 2, 16, 1024)
    alts = wgmma_alternatives(offsets, elem_bytes=2, base_address=0x4010, spec=SPEC_A)
    keys = [(a.changes_shared_layout, a.cost.score, a.kind.value, a.explanation) for a in alts]
    assert keys == sorted(keys)
    assert alts[0].kind is AlternativeKind.REALIGN_BUFFER and alts[0].cost.score == 0
    choice = alts[0].params
    assert isinstance(choice, CanonicalChoice) and choice.base_address % 1024 == 0
    assert wgmma_admissibility(offsets, elem_bytes=2, base_address=choice.base_address,
                               spec=SPEC_A).admissible
    kinds = {a.kind for a in alts}
    assert {AlternativeKind.REGISTER_OPERAND, AlternativeKind.REPACK,
            AlternativeKind.DIFFERENT_SWIZZLE} <= kinds
    reg = next(a for a in alts if a.kind is AlternativeKind.REGISTER_OPERAND)
    assert isinstance(reg.params, RegisterOperandPlan) and reg.params.vector_bytes == 16


@settings(max_examples=40)
@given(st.sampled_from([Operand.A, Operand.B]), st.sampled_from([8, 24, 64, 128]),
       st.integers(0, 10**6))
def test_alternatives_for_arbitrary_tables(operand: Operand, n: int, seed: int) -> None:
    spec = WgmmaOperandSpec(operand, WgmmaType.BF16, n)
    mn, k = spec.shape
    rng = np.random.default_rng(seed)
    offsets = 2 * rng.permutation(mn * k).reshape(mn, k)  # a random injective table
    alts = wgmma_alternatives(offsets, elem_bytes=2, base_address=0x4000, spec=spec)
    if wgmma_admissibility(offsets, elem_bytes=2, base_address=0x4000, spec=spec).admissible:
        assert alts == ()
        return
    assert (AlternativeKind.REGISTER_OPERAND in {a.kind for a in alts}) == (operand is Operand.A)
    for a in alts:
        if isinstance(a.params, CanonicalChoice):
            c = a.params
            table = c.offsets(mn, k, 2)
            assert np.array_equal(table, ref_offsets(c.major, c.swizzle, mn, k, 2, c.lbo, c.sbo))
            assert wgmma_admissibility(table, elem_bytes=2, base_address=c.base_address,
                                       spec=spec).admissible
            assert len(np.unique(table)) == table.size  # dense choices never overlap


# ---- TMA writes what wgmma reads -------------------------------------------------------------


@pytest.mark.parametrize("dst", [0x8000, 0x8000 + 384])
@pytest.mark.parametrize(("swz", "inner"), [(Swizzle.B128, 64), (Swizzle.B64, 32),
                                            (Swizzle.B32, 16), (Swizzle.NONE, 64)])
def test_tma_boxes_feed_wgmma_descriptors(dst: int, swz: Swizzle, inner: int) -> None:
    t = GlobalTensor(2, (4096, 4096), (4096, 1), 256, TmaDataType.BFLOAT16)
    params = tma_admissibility(TmaRequest(t, (64, inner), swizzle=swz), arch=90).unwrap()
    smem = params.shared_offsets(dst)
    span = swz.span_bytes or 0
    pitch = max(inner * 2, span)
    chunks = span // 16 if span else 1
    rows, cols = np.meshgrid(np.arange(64), np.arange(inner), indexing="ij")
    assert np.array_equal(smem, ref_swizzle(dst + rows * pitch + cols * 2, chunks) - dst)
    for step in range(inner // 16):  # one m64nNk16 operand per 16-element K step
        tile = smem[:, 16 * step:16 * step + 16]
        verdict = wgmma_admissibility(tile, elem_bytes=2, base_address=dst, spec=SPEC_A)
        if swz is Swizzle.NONE:
            # 128-byte rows without swizzle are not core matrices (rows must be 16 B apart)
            assert not verdict.admissible
            continue
        d = verdict.unwrap()
        assert np.array_equal(hardware_reads(d, 64, 16, 2), dst + tile)
        if swz is not Swizzle.NONE and dst % 1024 == 0:
            assert (d.major, d.start_address, d.sbo) == (Major.K, dst + 32 * step, 8 * span)


def test_shared_offsets_refuse_unmodelled_modes() -> None:
    t = GlobalTensor(2, (4, 64, 16), (1024, 16, 1), 256, TmaDataType.BFLOAT16)
    from tilekit.layout.tma import Interleave

    p = tma_admissibility(TmaRequest(t, (1, 8, 16), interleave=Interleave.B32,
                                     swizzle=Swizzle.B32), arch=90).unwrap()
    with pytest.raises(LayoutError, match="not modelled"):
        p.shared_offsets(0)


def test_every_feasible_shape_is_detected_by_brute_force_search() -> None:
    """Independent brute force: the detector admits exactly the tables some descriptor reads."""
    for major, swz, (mn, k) in product(Major, WgmmaSwizzle, [(8, 16), (16, 16), (64, 16)]):
        if not ref_feasible(major, swz, mn, k, 2):
            continue
        offsets = ref_offsets(major, swz, mn, k, 2, *ref_dense(major, swz, mn, k, 2))
        d = wgmma_admissibility(offsets, elem_bytes=2, base_address=0x3000).unwrap()
        assert np.array_equal(hardware_reads(d, mn, k, 2), 0x3000 + offsets)
