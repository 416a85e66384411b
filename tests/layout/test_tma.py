"""TMA admissibility against an independent re-derivation of cuTensorMapEncodeTiled's rules.

The reference checker below is written from the CUDA Driver API text (Tensor Map
Object Management, cuTensorMapEncodeTiled) in the driver's own terms (raw
enumerator codes, innermost-first arrays), plus the two limits measured on an
H100 with driver 580.159 (CUDA 13.0), which the documentation does not state:
boxes above 228 KiB are refused, and the 16-byte inner-row rule holds for every
interleave mode. It shares no code with ``tilekit.layout.tma``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.layout.admissibility import AlternativeKind, Rule, ThreadCopyPlan
from tilekit.layout.tma import (
    GlobalTensor,
    Interleave,
    L2Promotion,
    OobFill,
    Swizzle,
    TmaDataType,
    TmaPlan,
    TmaRequest,
    driver_order,
    tma_admissibility,
    tma_alternatives,
)

# ---- the reference, from the driver documentation ------------------------------------------

DTYPE_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
FLOAT_CODES = {6, 7, 8, 9, 10, 11, 12}
RAW_CODE = {1: 0, 2: 1, 4: 2, 8: 4}
SWIZZLE_SPAN = {0: None, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}
BOX_BYTES_LIMIT = 233472  # measured: 228 KiB


@dataclass(frozen=True)
class Case:
    """A request in raw driver vocabulary; shapes outermost first like numpy."""

    elem: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int
    dtype: int | None
    box: tuple[int, ...]
    es: tuple[int, ...]
    interleave: int = 0
    swizzle: int = 0
    oob: int = 0
    l2: int = 0

    def request(self) -> TmaRequest:
        dt = None if self.dtype is None else next(d for d in TmaDataType if d.code == self.dtype)
        t = GlobalTensor(self.elem, self.shape, self.strides, self.address, dt, "T")
        return TmaRequest(t, self.box, self.es, Interleave(self.interleave),
                          next(s for s in Swizzle if s.code == self.swizzle),
                          L2Promotion(self.l2), OobFill(self.oob))


def reference_rules(c: Case, arch: int) -> set[Rule]:
    rules: set[Rule] = set()
    rank = len(c.shape)
    if arch < 90:
        rules.add(Rule.TMA_ARCH)
    code = c.dtype if c.dtype is not None else RAW_CODE.get(c.elem)
    if code is None or code not in DTYPE_BYTES or DTYPE_BYTES[code] != c.elem:
        rules.add(Rule.TMA_DTYPE)
    if not 1 <= rank <= 5 or (c.interleave != 0 and rank < 3):
        rules.add(Rule.TMA_RANK)
    dims, box, es = c.shape[::-1], c.box[::-1], c.es[::-1]
    stride_bytes = [s * c.elem for s in c.strides[::-1]]
    if rank and dims[0] != 1 and stride_bytes[0] != c.elem:
        rules.add(Rule.TMA_INNER_NOT_CONTIGUOUS)
    unit = 32 if c.interleave == 2 else 16
    alignment = c.address & -c.address if c.address else 1 << 64
    if alignment < unit:
        rules.add(Rule.TMA_GLOBAL_ADDRESS_ALIGN)
    if any(not 1 <= d <= 2**32 for d in dims):
        rules.add(Rule.TMA_GLOBAL_DIM)
    if any(2**31 < d <= 2**32 for d in dims):  # past the signed 32-bit coordinates
        rules.add(Rule.TMA_COORDINATE_REACH)
    for s in stride_bytes[1:]:
        if not 0 <= s < 2**40:
            rules.add(Rule.TMA_GLOBAL_STRIDE_RANGE)
        if s % unit:
            rules.add(Rule.TMA_GLOBAL_STRIDE_ALIGN)
    if any(not 1 <= b <= 256 for b in box):
        rules.add(Rule.TMA_BOX_DIM)
    if rank and box[0] * c.elem % 16:
        rules.add(Rule.TMA_BOX_INNER_BYTES)
    loaded = math.prod(-(-b // max(e, 1)) for b, e in zip(box, es, strict=True))
    if loaded * c.elem > BOX_BYTES_LIMIT:
        rules.add(Rule.TMA_BOX_BYTES)
    span = SWIZZLE_SPAN[c.swizzle]
    if c.interleave == 0 and rank and span is not None and box[0] * c.elem > span:
        rules.add(Rule.TMA_BOX_EXCEEDS_SWIZZLE)
    if any(not 1 <= e <= 8 for e in es):
        rules.add(Rule.TMA_ELEMENT_STRIDE)
    if c.interleave == 0 and rank and es[0] != 1:
        rules.add(Rule.TMA_INNER_ELEMENT_STRIDE)
    if c.interleave == 2 and c.swizzle != 1:
        rules.add(Rule.TMA_INTERLEAVE_SWIZZLE)
    if c.swizzle >= 4 and arch < 100:
        rules.add(Rule.TMA_SWIZZLE_ARCH)
    if c.oob == 1 and code not in FLOAT_CODES:
        rules.add(Rule.TMA_OOB_FILL_DTYPE)
    return rules


# ---- case generation: a valid request, then usually one mutation ---------------------------

Ints = Callable[[int, int], int]
Choice = Callable[[Sequence[Any]], Any]
MUTATIONS = (
    "none", "stride", "box_zero_or_big", "inner_bytes", "swizzle", "align", "element_stride",
    "interleave", "global_dim", "oob", "stride_range", "inner_strided", "rank", "dtype",
    "box_bytes", "atom_swizzle", "odd_element",
)


def build_case(ints: Ints, choice: Choice, mutation: str, small: bool = False) -> Case:
    rank = ints(1, 3 if small else 5)
    elem = choice([1, 2, 4, 8])
    dtype = choice([c for c, b in DTYPE_BYTES.items() if b == elem] + [None])
    interleave = 0 if rank < 3 or ints(0, 5) else choice([1, 2])
    unit = 32 if interleave == 2 else 16
    shape = [ints(1, 40 if small else 3000) for _ in range(rank)]
    strides = [1] * rank
    for d in range(rank - 2, -1, -1):
        extent = shape[d + 1] * strides[d + 1] * elem
        strides[d] = -(-extent // unit) * unit // elem + choice([0, 0, unit // elem])
    swizzle = 1 if interleave == 2 else choice([0, 1, 2, 3])
    span = SWIZZLE_SPAN[swizzle] if interleave == 0 else None
    granule = 16 // elem
    inner_max = min(256, (span or 256 * elem) // elem)
    box = [ints(1, 12 if small else 64) for _ in range(rank)]
    box[-1] = granule * ints(1, max(1, inner_max // granule if not small else 2))
    es = [ints(1, 3 if small else 8) for _ in range(rank)]
    es[-1] = 1
    oob = 1 if dtype in FLOAT_CODES and ints(0, 3) == 0 else 0
    address = choice([0x7F0000000000, 0x7F0000000100, 0x7F0000000020]) + (32 if interleave else 0)
    if mutation == "stride" and rank > 1:
        strides[ints(0, rank - 2)] += choice([1, 2, 3])
    elif mutation == "box_zero_or_big":
        box[ints(0, rank - 1)] = choice([0, 257, 300])
    elif mutation == "inner_bytes" and granule > 1:
        box[-1] += ints(1, granule - 1)
    elif mutation == "swizzle":
        swizzle = choice(range(7))
    elif mutation == "align":
        address += choice([1, 2, 4, 8, 16])
    elif mutation == "element_stride":
        es[ints(0, rank - 1)] = choice([0, 2, 9])
    elif mutation == "interleave":
        interleave = choice([0, 1, 2])
    elif mutation == "global_dim":
        shape[ints(0, rank - 1)] = choice([0, 2**31 + 1, 2**32, 2**32 + 1])
    elif mutation == "oob":
        oob = 1
    elif mutation == "stride_range" and rank > 1:
        strides[ints(0, rank - 2)] = choice([2**40 // elem, (2**40 - 16) // elem, -unit // elem])
    elif mutation == "inner_strided" and rank > 1:
        strides[-1] = choice([2, 3, 8])
    elif mutation == "rank":
        extra = 6 - rank
        shape = [2] * extra + shape
        box = [1] * extra + box
        es = [1] * extra + es
        strides = [strides[0] * shape[extra] * 2 ** (extra - i) for i in range(extra)] + strides
    elif mutation == "dtype":
        dtype = choice([c for c, b in DTYPE_BYTES.items() if b != elem] + [13, 14, 15])
    elif mutation == "box_bytes" and rank > 1 and not small:
        box[:-1] = [256] * (rank - 1)
        es[:-1] = [1] * (rank - 1)
    elif mutation == "atom_swizzle":
        swizzle = choice([4, 5, 6])
    elif mutation == "odd_element":  # a width TMA has no type for (complex128, 3-byte structs)
        elem, dtype, oob = choice([3, 6, 16]), None, 0
    return Case(elem, tuple(shape), tuple(strides), address, dtype, tuple(box), tuple(es),
                interleave, swizzle, oob, ints(0, 3))


@st.composite
def cases(draw: st.DrawFn, small: bool = False) -> Case:
    mutation = draw(st.sampled_from(MUTATIONS))
    return build_case(lambda a, b: draw(st.integers(a, b)),
                      lambda xs: draw(st.sampled_from(list(xs))), mutation, small)


def random_case(rng: random.Random, small: bool = False) -> Case:
    return build_case(rng.randint, lambda xs: rng.choice(list(xs)), rng.choice(MUTATIONS), small)


def reference_params(c: Case) -> tuple[Any, ...]:
    code = c.dtype if c.dtype is not None else RAW_CODE[c.elem]
    return (code, len(c.shape), c.shape[::-1], tuple(s * c.elem for s in c.strides[::-1])[1:],
            c.box[::-1], c.es[::-1], c.interleave, c.swizzle, c.l2, c.oob)


# ---- verdicts --------------------------------------------------------------------------------


@given(cases(), st.sampled_from([80, 90, 100]))
def test_verdict_rules_match_the_driver_documentation(case: Case, arch: int) -> None:
    verdict = tma_admissibility(case.request(), arch=arch)
    expected = reference_rules(case, arch)
    assert verdict.rules == expected
    assert verdict.admissible == (not expected)
    if verdict.params is not None:
        assert verdict.params.driver_args() == reference_params(case)
    for v in verdict.violations:
        assert v.message and v.field


def test_thousands_of_random_cases_agree_with_the_reference() -> None:
    rng = random.Random(20261122)
    admitted = 0
    seen: set[Rule] = set()
    for _ in range(3000):
        case = random_case(rng)
        arch = rng.choice([90, 90, 100])
        verdict = tma_admissibility(case.request(), arch=arch)
        expected = reference_rules(case, arch)
        assert verdict.rules == expected, case
        admitted += verdict.admissible
        seen |= expected
    # the generator really explores: both outcomes and every TMA rule but the arch one
    assert 300 < admitted < 2700
    assert seen >= {r for r in Rule if r.name.startswith("TMA_")} - {Rule.TMA_ARCH}


@given(cases())
def test_each_mutation_breaks_the_rule_it_targets(case: Case) -> None:
    rules = tma_admissibility(case.request(), arch=90).rules
    assert rules == reference_rules(case, 90)


@pytest.mark.parametrize(
    ("mutate", "rule"),
    [
        (dict(strides=(4097, 1)), Rule.TMA_GLOBAL_STRIDE_ALIGN),
        (dict(strides=(2**39, 1)), Rule.TMA_GLOBAL_STRIDE_RANGE),
        (dict(address=0x1008), Rule.TMA_GLOBAL_ADDRESS_ALIGN),
        (dict(box=(257, 64)), Rule.TMA_BOX_DIM),
        (dict(box=(64, 12)), Rule.TMA_BOX_INNER_BYTES),
        (dict(box=(64, 128), swizzle=3), Rule.TMA_BOX_EXCEEDS_SWIZZLE),
        (dict(es=(9, 1)), Rule.TMA_ELEMENT_STRIDE),
        (dict(es=(1, 2)), Rule.TMA_INNER_ELEMENT_STRIDE),
        (dict(shape=(64, 2**32 + 1)), Rule.TMA_GLOBAL_DIM),
        (dict(shape=(2**31 + 1, 4096)), Rule.TMA_COORDINATE_REACH),
        (dict(strides=(4096, 2)), Rule.TMA_INNER_NOT_CONTIGUOUS),
        (dict(oob=1, dtype=1), Rule.TMA_OOB_FILL_DTYPE),
        (dict(swizzle=4), Rule.TMA_SWIZZLE_ARCH),
        (dict(dtype=7), Rule.TMA_DTYPE),
    ],
)
def test_one_broken_rule_is_reported_alone_with_its_reason(
    mutate: dict[str, Any], rule: Rule
) -> None:
    base = dict(elem=2, shape=(512, 4096), strides=(4096, 1), address=0x10000, dtype=9,
                box=(64, 64), es=(1, 1))
    case = Case(**{**base, **mutate})
    verdict = tma_admissibility(case.request(), arch=90)
    assert verdict.rules == {rule} == reference_rules(case, 90)


def test_strided_inner_dimension_says_why() -> None:
    t = GlobalTensor(4, (128, 256), (1, 128), 256, name="At")
    (v,) = (x for x in tma_admissibility(TmaRequest(t, (32, 32)), arch=90).violations
            if x.rule is Rule.TMA_INNER_NOT_CONTIGUOUS)
    assert "not encodable as dimension 0" in v.message and "stride 128" in v.message


def test_interleaved_rules() -> None:
    t = GlobalTensor(2, (4, 64, 16), (1024, 16, 1), 256, TmaDataType.BFLOAT16)
    assert tma_admissibility(TmaRequest(t, (1, 8, 16), interleave=Interleave.B32,
                                        swizzle=Swizzle.B32), arch=90).admissible
    assert tma_admissibility(TmaRequest(t, (1, 8, 16), interleave=Interleave.B32),
                             arch=90).rules == {Rule.TMA_INTERLEAVE_SWIZZLE}
    t2 = GlobalTensor(2, (64, 8), (8, 1), 256)
    assert tma_admissibility(TmaRequest(t2, (8, 8), interleave=Interleave.B16),
                             arch=90).rules == {Rule.TMA_RANK}


def test_malformed_requests_raise() -> None:
    t = GlobalTensor.contiguous(2, (64, 64))
    with pytest.raises(LayoutError, match="box"):
        TmaRequest(t, (64,))
    with pytest.raises(LayoutError, match="element strides"):
        TmaRequest(t, (8, 8), (1, 1, 1))
    with pytest.raises(LayoutError, match="strides"):
        GlobalTensor(2, (4, 4), (4,), 16)


@given(st.lists(st.integers(-5, 5), max_size=6))
def test_driver_order_is_an_involution(xs: list[int]) -> None:
    assert driver_order(driver_order(xs)) == tuple(xs)
    assert driver_order(xs)[:1] == tuple(xs[-1:])


# Observed on an H100 (driver 580.159.04, CUDA 13.0) by calling cuTensorMapEncodeTiled:
# (description, case, driver accepted). tilekit must never admit what the driver refused;
# it refuses more in three documented places (interleave 32B + other swizzles, ignored inner
# element strides, and boxes counted with ceil instead of the driver's floor).
DRIVER_OBSERVATIONS = [
    ("8096-column bf16 matrix", Case(2, (4096, 8096), (8096, 1), 0x10000, 9, (64, 64), (1, 1),
                                     swizzle=3), True),
    ("8092-column bf16 matrix", Case(2, (4096, 8092), (8092, 1), 0x10000, 9, (64, 64), (1, 1),
                                     swizzle=3), False),
    ("inner box 256 B under 128B swizzle", Case(2, (4096, 8096), (8096, 1), 0x10000, 9,
                                                (64, 128), (1, 1), swizzle=3), False),
    ("16-byte aligned base, 128B swizzle", Case(2, (64, 64), (64, 1), 0x10010, 9, (8, 16), (1, 1),
                                                swizzle=3), True),
    ("globalDim 2^32", Case(1, (2**32,), (1,), 0x10000, None, (16,), (1,)), True),
    ("globalDim 2^32 + 1", Case(1, (2**32 + 1,), (1,), 0x10000, None, (16,), (1,)), False),
    ("stride 2^40 - 16", Case(1, (2, 16), (2**40 - 16, 1), 0x10000, None, (1, 16), (1, 1)), True),
    ("stride 2^40", Case(1, (2, 16), (2**40, 1), 0x10000, None, (1, 16), (1, 1)), False),
    ("zero outer stride", Case(2, (64, 64), (0, 1), 0x10000, 9, (8, 64), (1, 1)), True),
    ("outer strides not nested", Case(2, (8, 64, 64), (64, 512, 1), 0x10000, 9, (2, 2, 64),
                                      (1, 1, 1)), True),
    ("elementStrides[0] = 0", Case(2, (64, 64), (64, 1), 0x10000, 9, (8, 64), (1, 0)), False),
    ("elementStrides[1] = 9", Case(2, (64, 64), (64, 1), 0x10000, 9, (8, 64), (9, 1)), False),
    ("atom swizzle on sm_90", Case(2, (64, 64), (64, 1), 0x10000, 9, (8, 64), (1, 1),
                                   swizzle=4), False),
    ("interleave 16B, 10-byte inner box", Case(2, (4, 64, 8), (512, 8, 1), 0x10000, 9,
                                               (1, 8, 5), (1, 1, 1), interleave=1), False),
    ("interleave 16B, 512-byte inner box, 128B swizzle",
     Case(2, (4, 64, 256), (16384, 256, 1), 0x10000, 9, (1, 8, 256), (1, 1, 1), interleave=1,
          swizzle=3), True),
    ("interleave on rank 2", Case(2, (64, 8), (8, 1), 0x10000, 9, (8, 8), (1, 1),
                                  interleave=1), False),
    ("interleave 32B with a 16-byte base", Case(2, (4, 64, 16), (1024, 16, 1), 0x10010, 9,
                                                (1, 8, 16), (1, 1, 1), interleave=2, swizzle=1),
     False),
    ("NaN fill of int32", Case(4, (64, 64), (64, 1), 0x10000, 3, (8, 64), (1, 1), oob=1), False),
    ("box of 228 KiB", Case(2, (16, 64, 4096, 64), (64 * 4096 * 64, 4096 * 64, 64, 1), 0x10000,
                            9, (1, 8, 228, 64), (1, 1, 1, 1)), True),
    ("box of 229 KiB", Case(2, (16, 64, 4096, 64), (64 * 4096 * 64, 4096 * 64, 64, 1), 0x10000,
                            9, (1, 8, 229, 64), (1, 1, 1, 1)), False),
    ("box wider than the tensor", Case(2, (5, 8), (8, 1), 0x10000, 9, (64, 8), (1, 1)), True),
]


@pytest.mark.parametrize(("what", "case", "accepted"), DRIVER_OBSERVATIONS,
                         ids=[o[0] for o in DRIVER_OBSERVATIONS])
def test_verdicts_agree_with_the_real_driver(what: str, case: Case, accepted: bool) -> None:
    # The driver encodes what the copies cannot reach (a dim past 2^31: their coordinates
    # are signed 32-bit); that rule is the PTX ISA's, not cuTensorMapEncodeTiled's.
    rules = tma_admissibility(case.request(), arch=90).rules - {Rule.TMA_COORDINATE_REACH}
    assert (not rules) == accepted


# ---- the worked example ------------------------------------------------------------------------


def bf16_matrix(rows: int, cols: int) -> GlobalTensor:
    return GlobalTensor(2, (rows, cols), (cols, 1), 0x7F0000000000, TmaDataType.BFLOAT16, "A")


def test_8092_columns_have_no_descriptor_and_repack_to_8096_is_offered() -> None:
    request = TmaRequest(bf16_matrix(4096, 8092), (64, 64), swizzle=Swizzle.B128)
    verdict = tma_admissibility(request, arch=90)
    (v,) = verdict.violations
    assert (v.rule, v.field, v.value, v.limit) == (
        Rule.TMA_GLOBAL_STRIDE_ALIGN, "globalStrides[0]", 16184, 16)
    assert "16184" in v.message
    with pytest.raises(LayoutError, match="16184"):
        verdict.unwrap("A's tile")

    alts = tma_alternatives(request, arch=90, passes=1)
    repacks = [a for a in alts if a.kind is AlternativeKind.REPACK]
    assert len(repacks) == 1
    plan = repacks[0].params
    assert isinstance(plan, TmaPlan) and plan.repacked_from == request.tensor
    assert plan.request.tensor.strides == (8096, 1)
    assert plan.descriptor.global_strides == (16192,)
    assert plan.descriptor.global_dim == (8092, 4096)
    assert repacks[0].cost.one_time_bytes == 2 * 4096 * 8092 * 2
    assert {a.kind for a in alts} >= {AlternativeKind.REPACK, AlternativeKind.FALLBACK_CP_ASYNC,
                                      AlternativeKind.FALLBACK_PLAIN_LOADS}
    cp_async = next(a for a in alts if a.kind is AlternativeKind.FALLBACK_CP_ASYNC)
    assert isinstance(cp_async.params, ThreadCopyPlan)
    assert cp_async.params.vector_bytes == 8  # 16184 = 8 * 2023: 16-byte copies would misalign

    # One pass: copying the matrix first costs more than it saves; reused 32 times, it wins.
    assert alts[0].kind is AlternativeKind.FALLBACK_CP_ASYNC
    reused = tma_alternatives(request, arch=90, passes=32)
    assert reused[0].kind is AlternativeKind.REPACK
    assert tma_alternatives(request, arch=90, passes=32) == reused  # deterministic


def test_8096_columns_are_admissible_with_the_expected_parameters() -> None:
    request = TmaRequest(bf16_matrix(4096, 8096), (64, 64), swizzle=Swizzle.B128)
    params = tma_admissibility(request, arch=90).unwrap()
    assert params.driver_args() == (9, 2, (8096, 4096), (16192,), (64, 64), (1, 1), 0, 3, 0, 0)
    assert params.swizzle_repeat_bytes == 1024
    assert tma_alternatives(request, arch=90) == ()


def test_inner_box_of_128_bf16_under_128b_swizzle_splits_in_two() -> None:
    request = TmaRequest(bf16_matrix(4096, 8096), (64, 128), swizzle=Swizzle.B128)
    verdict = tma_admissibility(request, arch=90)
    (v,) = verdict.violations
    assert (v.rule, v.value, v.limit) == (Rule.TMA_BOX_EXCEEDS_SWIZZLE, 256, 128)
    alts = tma_alternatives(request, arch=90)
    best = alts[0]
    assert best.kind is AlternativeKind.DIFFERENT_BOX and not best.changes_shared_layout
    plan = best.params
    assert isinstance(plan, TmaPlan)
    assert plan.request.box == (64, 64) and plan.copies_per_tile == 2
    assert plan.sub_box_origins == ((0, 0), (0, 64))
    assert best.cost.issues_per_tile == 2
    # Dropping the swizzle would need one copy, but changes the consumer's layout: ranked later.
    unswizzled = next(a for a in alts if a.changes_shared_layout)
    assert isinstance(unswizzled.params, TmaPlan)
    assert unswizzled.params.request.swizzle is Swizzle.NONE
    assert alts.index(unswizzled) > 0


def test_column_major_operand_factorizes_to_a_transposed_box() -> None:
    t = GlobalTensor(2, (4096, 1024), (1, 4096), 256, TmaDataType.BFLOAT16, "Bt")
    alts = tma_alternatives(TmaRequest(t, (64, 64), swizzle=Swizzle.B128), arch=90)
    assert alts[0].kind is AlternativeKind.FACTORIZE
    plan = alts[0].params
    assert isinstance(plan, TmaPlan)
    assert plan.axis_groups == ((1,), (0,)) and plan.residual_permutation == (1, 0)
    assert plan.request.tensor.strides == (4096, 1)


def test_rank_six_merges_contiguous_dimensions() -> None:
    t = GlobalTensor.contiguous(2, (2, 3, 4, 5, 6, 64))
    alts = tma_alternatives(TmaRequest(t, (1, 1, 2, 5, 6, 64)), arch=90)
    plan = alts[0].params
    assert isinstance(plan, TmaPlan)
    assert alts[0].kind is AlternativeKind.FACTORIZE and plan.copies_per_tile == 1
    assert plan.request.tensor.rank == 5
    assert sorted(a for g in plan.axis_groups for a in g) == list(range(6))


def test_elements_without_a_tma_type_move_as_raw_words() -> None:
    complex128 = GlobalTensor(16, (64, 64), (64, 1), 256, name="Z")
    request = TmaRequest(complex128, (8, 8))
    assert tma_admissibility(request, arch=90).rules == {Rule.TMA_DTYPE}
    plans = [a.params for a in tma_alternatives(request, arch=90)
             if a.kind is AlternativeKind.FACTORIZE]
    assert plans and all(isinstance(p, TmaPlan) for p in plans)
    merged = next(p for p in plans if isinstance(p, TmaPlan) and p.request.tensor.rank == 2)
    assert merged.descriptor.data_type is TmaDataType.UINT64
    assert merged.descriptor.global_dim == (128, 64) and merged.descriptor.box_dim == (16, 8)
    # a scalar has no tensor map at all, but can still be loaded
    scalar = TmaRequest(GlobalTensor(2, (), (), 256), ())
    assert tma_admissibility(scalar, arch=90).rules == {Rule.TMA_RANK}
    assert [a.kind for a in tma_alternatives(scalar, arch=90)] == [
        AlternativeKind.FALLBACK_PLAIN_LOADS]


def test_no_tma_before_hopper_only_thread_copies() -> None:
    request = TmaRequest(bf16_matrix(256, 256), (64, 64))
    assert tma_admissibility(request, arch=80).rules == {Rule.TMA_ARCH}
    kinds = [a.kind for a in tma_alternatives(request, arch=80)]
    assert kinds == [AlternativeKind.FALLBACK_CP_ASYNC, AlternativeKind.FALLBACK_PLAIN_LOADS]
    assert [a.kind for a in tma_alternatives(request, arch=75)] == [
        AlternativeKind.FALLBACK_PLAIN_LOADS]


# ---- alternatives: every plan is admissible and loads the requested elements -----------------


def tile_bytes(t: GlobalTensor, box: Sequence[int], es: Sequence[int],
               origin: Sequence[int]) -> set[int]:
    """Byte offsets a box at ``origin`` touches, in bounds only (brute force)."""
    axes = []
    for extent, b, e, o in zip(t.shape, box, es, origin, strict=True):
        step = max(e, 1)
        axes.append([o + j * step for j in range(-(-b // step)) if o + j * step < extent])
    starts = {sum(x * s for x, s in zip(xs, t.strides, strict=True)) * t.elem_bytes
              for xs in product(*axes)}
    return {s + i for s in starts for i in range(t.elem_bytes)}


@settings(max_examples=60)
@given(cases(small=True), st.integers(1, 40))
def test_alternatives_are_admissible_ranked_and_cover_the_tile(case: Case, passes: int) -> None:
    request = case.request()
    alts = tma_alternatives(request, arch=90, passes=passes)
    if tma_admissibility(request, arch=90).admissible:
        assert alts == ()
        return
    assert alts, "a fallback always exists"
    keys = [(a.changes_shared_layout, a.cost.score, a.kind.value, a.explanation) for a in alts]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert alts[-1].kind is AlternativeKind.FALLBACK_PLAIN_LOADS or any(
        a.kind is AlternativeKind.FALLBACK_PLAIN_LOADS for a in alts)
    t = request.tensor
    for alt in alts:
        plan = alt.params
        if isinstance(plan, ThreadCopyPlan):
            assert t.base_align % plan.vector_bytes == 0
            assert all(abs(s) * t.elem_bytes % plan.vector_bytes == 0
                       for d, s in enumerate(t.strides[:-1]) if t.shape[d] > 1)
            continue
        view = plan.request
        shadow = Case(view.tensor.elem_bytes, view.tensor.shape, view.tensor.strides,
                      view.tensor.base_align, case.dtype, view.box, view.element_strides,
                      view.interleave.value, view.swizzle.code, case.oob, case.l2)
        assert reference_rules(shadow, 90) == set(), alt.explanation
        source = view.tensor if plan.repacked_from is not None else t
        identity = all(g == (i,) for i, g in enumerate(plan.axis_groups))
        if plan.repacked_from is not None:
            assert alt.cost.one_time_bytes == 2 * t.numel * t.elem_bytes
            if identity and t.rank > 1:
                assert view.tensor.shape == t.shape
                assert view.tensor.strides[-2] * t.elem_bytes % 16 == 0
        if not identity or plan.repacked_from is not None:
            continue  # permuted / merged / repacked views: checked by their own test
        if math.prod(request.loaded_box) > 4000:
            continue
        wanted = tile_bytes(source, request.box, request.element_strides, (0,) * t.rank)
        got: set[int] = set()
        for origin in plan.sub_box_origins:
            got |= tile_bytes(view.tensor, view.box, view.element_strides, origin)
        if alt.kind is AlternativeKind.DIFFERENT_BOX:
            assert wanted <= got, alt.explanation


@settings(max_examples=60)
@given(cases(small=True))
def test_factorized_views_load_exactly_the_requested_elements(case: Case) -> None:
    request = case.request()
    t = request.tensor
    if math.prod(request.loaded_box) > 4000:
        return
    for alt in tma_alternatives(request, arch=90):
        if alt.kind is not AlternativeKind.FACTORIZE:
            continue
        assert isinstance(alt.params, TmaPlan)
        view = alt.params.request
        wanted = tile_bytes(t, request.box, request.element_strides, (0,) * t.rank)
        got: set[int] = set()
        for origin in alt.params.sub_box_origins:
            got |= tile_bytes(view.tensor, view.box, view.element_strides, origin)
        assert wanted <= got, alt.explanation
        assert sorted(a for g in alt.params.axis_groups for a in g) == sorted(
            d for d in range(t.rank) if not (t.shape[d] == 1 and request.box[d] == 1))
