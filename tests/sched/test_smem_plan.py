"""The shared-memory plan: alignment, reuse between pipelines never live together, the limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilekit.errors import ScheduleError, SourceLoc
from tilekit.sched.smem_plan import (
    BARRIER_BYTES,
    STAGE_ALIGN,
    Buffer,
    Request,
    plan_shared_memory,
    stage_bytes,
)

LOC = SourceLoc("kernel.py", 12, 4)


def _pipeline(key: int, live: tuple[int, int], tiles: list[int], stages: int,
              loc: SourceLoc | None = LOC) -> Request:
    rings = [Buffer.ring(f"p{key}.r{k}", t, stages) for k, t in enumerate(tiles)]
    return Request(key, loc, live, (*rings, Buffer.barriers(f"p{key}.full", stages),
                                    Buffer.barriers(f"p{key}.empty", stages)), stages)


def test_stage_bytes_round_up_to_128() -> None:
    assert [stage_bytes(b) for b in (1, 128, 129, 4096, 100)] == [128, 128, 256, 4096, 128]


def test_one_pipeline_layout() -> None:
    plan = plan_shared_memory([_pipeline(0, (0, 9), [100, 4096], 3)], limit=1 << 20)
    (p,) = plan.pipelines
    offsets = {b.name: (b.offset, b.bytes) for b in p.buffers}
    assert offsets == {"p0.r0": (0, 384), "p0.r1": (384, 3 * 4096),
                       "p0.full": (384 + 12288, 24), "p0.empty": (384 + 12288 + 24, 24)}
    assert plan.total_bytes == 384 + 12288 + 48 == p.bytes


def test_sequential_pipelines_share_and_nested_ones_do_not() -> None:
    a = _pipeline(0, (0, 10), [4096], 2)
    b = _pipeline(1, (11, 20), [1024], 4)  # after a
    c = _pipeline(2, (13, 15), [256], 2)  # inside b
    plan = plan_shared_memory([a, b, c], limit=1 << 20)
    pa, pb, pc = plan.pipelines
    assert pa.base == pb.base == 0
    assert pc.base >= pb.end and pc.base % STAGE_ALIGN == 0
    assert plan.total_bytes == max(pa.end, pc.end)


def test_first_fit_reuses_a_gap() -> None:
    """x lives all along; y, then z (small) after it: z lands where y was."""
    x = _pipeline(0, (0, 100), [1024], 1)
    y = _pipeline(1, (1, 10), [8192], 1)
    z = _pipeline(2, (11, 20), [128], 1)
    plan = plan_shared_memory([x, y, z], limit=1 << 20)
    px, py, pz = plan.pipelines
    assert py.base == pz.base == 1152  # x: 1024 stage bytes + 16 barrier bytes, rounded
    assert plan.total_bytes == py.end


def test_over_the_limit_names_the_line_bytes_limit_and_hints() -> None:
    big = _pipeline(0, (0, 5), [32768], 8, SourceLoc("kernel.py", 42, 8))
    with pytest.raises(ScheduleError) as info:
        plan_shared_memory([big], limit=227 * 1024, target="sm_90a")
    err = info.value
    assert err.loc.line == 42 and "kernel.py:42" in str(err)
    assert "262272 bytes" in err.message and "232448 bytes sm_90a allows" in err.message
    assert any("stages=7 fits" in h for h in err.hints)


def test_over_the_limit_blames_the_pipeline_that_ends_highest() -> None:
    outer = _pipeline(0, (0, 50), [65536], 2, SourceLoc("k.py", 1))
    inner = _pipeline(1, (10, 20), [65536], 2, SourceLoc("k.py", 2))
    with pytest.raises(ScheduleError) as info:
        plan_shared_memory([outer, inner], limit=200_000)
    assert info.value.loc.line == 2
    assert any("above 1 pipeline(s) live at the same time" in h for h in info.value.hints)


def test_exactly_at_the_limit_is_fine() -> None:
    req = _pipeline(0, (0, 1), [1024], 2)
    need = 2 * 1024 + 4 * BARRIER_BYTES
    assert plan_shared_memory([req], limit=need).total_bytes == need
    with pytest.raises(ScheduleError):
        plan_shared_memory([req], limit=need - 1)


@st.composite
def _programs(draw):  # a tree of pipelines: each nests in an earlier one or follows it
    n = draw(st.integers(1, 7))
    spans: list[tuple[int, int]] = []
    at = 0
    for _ in range(n):
        if spans and draw(st.booleans()):
            lo, hi = draw(st.sampled_from(spans))
            if hi - lo >= 2:
                a = draw(st.integers(lo + 1, hi - 1))
                b = draw(st.integers(a, hi - 1))
                spans.append((a, b))
                continue
        length = draw(st.integers(2, 30))
        spans.append((at, at + length))
        at += length + 1
    reqs = []
    for key, live in enumerate(spans):
        tiles = draw(st.lists(st.integers(1, 5000), min_size=1, max_size=3))
        reqs.append(_pipeline(key, live, tiles, draw(st.integers(1, 5))))
    return reqs


@given(_programs())
def test_plans_never_overlap_live_pipelines(reqs: list[Request]) -> None:
    plan = plan_shared_memory(reqs, limit=1 << 30)
    by_key = {r.key: r for r in reqs}
    for p in plan.pipelines:
        assert p.base % STAGE_ALIGN == 0
        for b in p.buffers:
            assert b.offset % (8 if b.is_barrier else STAGE_ALIGN) == 0
            assert p.base <= b.offset and b.offset + b.bytes <= p.end
        for q in plan.pipelines:
            if q.key != p.key and by_key[p.key].overlaps(by_key[q.key]):
                assert p.end <= q.base or q.end <= p.base
    assert plan.total_bytes == max(p.end for p in plan.pipelines)
    assert plan.total_bytes <= sum(-(-p.bytes // STAGE_ALIGN) * STAGE_ALIGN
                                   for p in plan.pipelines)
