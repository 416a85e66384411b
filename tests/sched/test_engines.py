"""Engine choice per stream: the layout library's verdicts on the bucket's witness tensor."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tilekit.ir import DType
from tilekit.layout.admissibility import Rule
from tilekit.layout.tma import TmaRequest, tma_admissibility
from tilekit.sched.engines import (
    Engine,
    EngineRule,
    TensorFacts,
    admissible,
    choose_engine,
    target_arch,
    tma_box,
)


def facts(dtype: DType = DType.FLOAT32, aligned16: bool = True, unit_inner: bool = True,
          strides16: bool = True) -> TensorFacts:
    return TensorFacts("X", dtype, aligned16, unit_inner, strides16)


def test_target_arch() -> None:
    assert target_arch("sm_90a") == 90 and target_arch("sm_80") == 80
    assert target_arch("gfx942") is None


def test_all_facts_admit_tma() -> None:
    d = choose_engine(facts(), (64, 64), 0, "sm_90a")
    assert d.engine is Engine.TMA and d.tma is not None and not d.rejections
    assert d.tma.box_dim == (64, 64)


@pytest.mark.parametrize("missing,rule", [
    ("aligned16", Rule.TMA_GLOBAL_ADDRESS_ALIGN),
    ("unit_inner", Rule.TMA_INNER_NOT_CONTIGUOUS),
    ("strides16", Rule.TMA_GLOBAL_STRIDE_ALIGN),
])
def test_each_missing_fact_names_its_tma_rule(missing: str, rule: Rule) -> None:
    f = facts(**{missing: False})
    d = choose_engine(f, (16, 64), 0, "sm_90a")
    assert d.engine is not Engine.TMA
    assert rule in {r.rule for r in d.rejected(Engine.TMA)}


def test_box_rules_come_from_the_layout_library() -> None:
    d = choose_engine(facts(), (2, 1024), 0, "sm_90a")  # boxDim > 256, not splittable
    assert Rule.TMA_BOX_DIM in {r.rule for r in d.rejected(Engine.TMA)}
    assert d.engine is Engine.CP_ASYNC and d.vector_bytes == 16
    d = choose_engine(facts(DType.FLOAT16), (8, 4), 0, "sm_90a")  # 8-byte rows
    assert Rule.TMA_BOX_INNER_BYTES in {r.rule for r in d.rejected(Engine.TMA)}
    assert d.engine is Engine.CP_ASYNC and d.vector_bytes == 8


def test_tiles_over_256_split_into_contiguous_boxes() -> None:
    assert tma_box((1, 1024), 4) == (1, 256)
    assert tma_box((1, 1, 640), 2) == (1, 1, 128)  # 256-byte pieces (160: 320 bytes)
    assert tma_box((512, 8), 4) == (256, 8)
    assert tma_box((2, 1024), 4) == (2, 1024)  # rows of boxes would not be contiguous
    assert tma_box((1, 300), 4) == (1, 300)  # no divisor gives 128-byte aligned pieces
    assert tma_box((64, 64), 2) == (64, 64)
    d = choose_engine(facts(), (1, 1024), 0, "sm_90a")
    assert d.engine is Engine.TMA and d.box == (1, 256)
    d = choose_engine(facts(), (1, 300), 0, "sm_90a")
    assert d.engine is Engine.CP_ASYNC
    assert Rule.TMA_BOX_DIM in {r.rule for r in d.rejected(Engine.TMA)}


def test_cp_async_chunk_follows_the_facts() -> None:
    assert choose_engine(facts(strides16=False), (4, 64), 0, "sm_90a").vector_bytes == 4
    assert choose_engine(facts(DType.FLOAT64, strides16=False), (4, 8), 0,
                         "sm_90a").vector_bytes == 8
    assert choose_engine(facts(aligned16=False), (4, 64), 0, "sm_90a").vector_bytes == 4
    assert choose_engine(facts(unit_inner=False), (4, 64), 0, "sm_90a").vector_bytes == 4
    d = choose_engine(facts(DType.BFLOAT16, aligned16=False), (4, 64), 0, "sm_90a")
    assert d.engine is Engine.PLAIN
    assert EngineRule.CP_ASYNC_CHUNK in {r.rule for r in d.rejected(Engine.CP_ASYNC)}


def test_sm80_has_no_tma_and_amd_neither_engine() -> None:
    d = choose_engine(facts(), (64, 64), 0, "sm_80")
    assert d.engine is Engine.CP_ASYNC and d.vector_bytes == 16
    assert {r.rule for r in d.rejected(Engine.TMA)} == {Rule.TMA_ARCH}
    d = choose_engine(facts(), (64, 64), 0, "gfx942")
    assert d.engine is Engine.PLAIN
    assert {r.rule for r in d.rejections} == {EngineRule.NO_ASYNC_ENGINES}


def test_padding_other_than_zero_is_plain_only() -> None:
    for pad in (1, 0.5, float("nan"), True):
        d = choose_engine(facts(), (64, 64), pad, "sm_90a")
        assert d.engine is Engine.PLAIN
        assert EngineRule.NONZERO_PADDING in {r.rule for r in d.rejections}
    for pad in (0, 0.0, False):
        assert choose_engine(facts(), (64, 64), pad, "sm_90a").engine is Engine.TMA


def test_forced_engine_is_kept_and_flagged() -> None:
    d = choose_engine(facts(strides16=False), (64, 64), 0, "sm_90a", Engine.TMA)
    assert d.engine is Engine.TMA and d.forced and not admissible(d)
    d = choose_engine(facts(), (64, 64), 0, "sm_90a", Engine.CP_ASYNC)
    assert d.engine is Engine.CP_ASYNC and d.forced and admissible(d)
    d = choose_engine(facts(), (64, 64), 0, "sm_90a", Engine.PLAIN)
    assert d.engine is Engine.PLAIN and admissible(d)


@pytest.mark.parametrize("aligned16,unit_inner,strides16",
                         list(itertools.product([False, True], repeat=3)))
@pytest.mark.parametrize("dtype", [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64])
def test_the_witness_is_the_weakest_member_of_its_bucket(
        aligned16: bool, unit_inner: bool, strides16: bool, dtype: DType) -> None:
    """What the witness admits, every tensor with the same facts (as ``tilekit.lang.kernel``
    computes them) admits: TMA, and a cp.async chunk at least as wide."""
    from tilekit.lang.kernel import stride_facts
    from tilekit.layout.admissibility import AlternativeKind, thread_copy_alternatives
    from tilekit.layout.tma import GlobalTensor

    f = facts(dtype, aligned16, unit_inner, strides16)
    elem = dtype.itemsize
    rng = np.random.default_rng(elem * 8 + aligned16 * 4 + unit_inner * 2 + strides16)
    checked = 0
    for _ in range(400):
        box = (int(rng.integers(1, 9)), int(rng.choice([1, 2, 4, 8, 16, 32])) * 16 // elem)
        d = choose_engine(f, box, 0, "sm_90a")
        cols = int(rng.integers(box[1], 4 * box[1]))
        rows = int(rng.integers(box[0], 4 * box[0]))
        inner = 1 if unit_inner else int(rng.integers(2, 5))
        pitch = cols * inner + int(rng.integers(0, 9))
        unit, rows16 = stride_facts((rows, cols), (pitch, inner), elem)
        base = elem * int(rng.integers(1, 1000)) * (16 if aligned16 else 1)
        if (unit, rows16, base % 16 == 0) != (unit_inner, strides16, aligned16 or
                                                base % 16 == 0):
            continue
        checked += 1
        if rows == 1:  # never multiplied by anything but 0: the descriptor encoder must
            pitch = -(-pitch * elem // 16) * 16 // elem  # give it a legal stride (as here)
        t = GlobalTensor(elem, (rows, cols), (pitch, inner), base)
        if d.engine is Engine.TMA:
            assert tma_admissibility(TmaRequest(t, box), arch=90).admissible
        if d.engine is Engine.CP_ASYNC:
            widths = [a.params.vector_bytes for a in thread_copy_alternatives(
                elem_bytes=elem, base_align=base, shape=t.shape, strides=t.strides, box=box,
                element_strides=(1, 1), tiles=1, arch=90)
                if a.kind is AlternativeKind.FALLBACK_CP_ASYNC]
            assert widths and widths[0] >= d.vector_bytes
    assert checked >= 50
