"""Dot-fed pipeline stages whose rows are 8- or 4-byte aligned only, read in place.

A bf16 row of 8092 elements is 16,184 bytes: the bucket's facts (a 16-byte base, 16-byte
row strides, or nothing but the element size) prove no cp.async chunk, and the stream used
to take plain copies into a row-major stage that the dot staged again through registers.
Now the schedule gives it cp.async in 8-byte chunks checked at run time
(``engines.checked_cp_async``): the copy tests the base and the row strides once, copies in
8-byte chunks, else 4-byte ones, else element by element, always into the same 16-byte-chunk
XOR swizzle that ``ldmatrix`` reads (``mma_sync.stage_read(..., chunk_bytes)``): the swizzle
moves whole 16-byte chunks, so the narrower chunks land inside them.

Offline: the schedule's decision and dump for the issue's shape (an abstract call, as the
portfolio builds it); the layout library's narrow chunks; the PTX for sm_80 and sm_90a;
SASS; the protocol; the scheduled program on the interpreter against numpy on ragged,
misaligned shapes. On a GPU (marked ``gpu``): random bf16/f16 against float64 and the
interpreter, each of the three copy paths taken.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import tilekit as tk
from tests.codegen.matmuls import engine_matmul
from tests.codegen.sass_checks import needs_cuobjdump, opcodes
from tests.codegen.test_pipelined_mma import (
    TYPES,
    accumulation_bound,
    bf16,
    f32,
    matmul_pipelined,
    traced,
)
from tests.sched.builders import run
from tilekit import knobs
from tilekit.aot import calls
from tilekit.codegen.driver import compile_module
from tilekit.errors import LayoutError
from tilekit.layout import banks
from tilekit.layout.mma_sync import _check_reads, mma_layouts, stage_read
from tilekit.rt import link
from tilekit.sched import Engine, schedule_pipelines
from tilekit.sched.dump import format_report
from tilekit.sched.protocol import check_function

ARCHS = ["sm_80", "sm_90a"]
ISSUE_CALL = ("matmul_pipelined: A=bf16[8155,8092] B=bf16[8092,8192] C=f32[8155,8192] K=i32 "
              "BM=128 BN=128 BK=64 STAGES=3")


@pytest.fixture(autouse=True)
def _interpreted():
    # the mma.sync path: on sm_90a with wgmma on, the misaligned A is read from a repacked
    # copy instead (tests/codegen/test_wgmma_dot.py, tests/rt/test_repack.py)
    with knobs.override(interpret=True, wgmma=False):
        yield


@functools.cache
def bucket(call: str = ISSUE_CALL):
    spec, divisible = calls.buckets_of(matmul_pipelined, calls.parse_compact(call))
    return matmul_pipelined.specialize(spec), divisible


def scheduled(arch: str, call: str = ISSUE_CALL):
    module, divisible = bucket(call)
    out = schedule_pipelines(module, arch, num_warps=4, divisible=divisible)
    (report,) = out.kernel.schedule_reports
    return out, report


@functools.cache
def ptx_of(arch: str, call: str = ISSUE_CALL) -> str:
    module, divisible = bucket(call)
    return compile_module(module, arch, 4, divisible=divisible).binary.decode()


# --- the schedule ---------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_8_byte_aligned_rows_stream_by_checked_cp_async_into_the_swizzle(arch: str):
    module, report = scheduled(arch)
    a, b = report.streams
    assert a.engine is Engine.CP_ASYNC and a.decision.checked and a.decision.vector_bytes == 8
    assert b.engine is Engine.CP_ASYNC and not b.decision.checked and b.decision.vector_bytes == 16
    assert a.feeds is not None and a.feeds.chunk_bytes == 8 and a.feeds.conflict_free
    assert b.feeds is not None and b.feeds.chunk_bytes == 16
    # the stage's swizzle is the one 16-byte chunks get: the layout pass, which does not
    # know the chunk, reads the same stage
    frag = mma_layouts(128, 128, 64, 4)[1]
    assert a.feeds.swizzle == stage_read(frag, banks.target(arch.rstrip("a"))).swizzle
    rings = [op for op in module.walk() if op.name == "smem_alloc"]
    assert rings[0].result.type.layout == a.feeds.swizzle
    copies = [op for op in module.walk() if op.name == "copy_g2s"]
    assert {(op.attrs["vector_bytes"], op.attrs.get("checked", False)) for op in copies} \
        == {(8, True), (16, False)}
    assert check_function(module.kernel) == []


def test_the_dump_says_the_stream_is_read_in_place_in_8_byte_chunks():
    text = format_report(scheduled("sm_90a")[1])
    assert "stream 0: A 128x64xbf16 along 1: cp_async (auto, 8-byte chunks if the base and " \
           "row strides are multiples of 8 bytes at run time, else element copies)" in text
    assert "stage read in place by tk.dot: A read in place from its pipeline stage, " \
           "ldmatrix.x4, 128x64 XOR 16-byte chunks" in text
    assert "written in 8-byte chunks inside the swizzled 16-byte ones" in text
    assert "stream 1: B 64x128xbf16 along 0: cp_async (auto, 16-byte chunks)" in text


def test_16_byte_rows_are_unchanged():
    _, report = scheduled("sm_80", ISSUE_CALL.replace("8092", "8096"))
    assert all(s.engine is Engine.CP_ASYNC and s.decision.vector_bytes == 16
               and not s.decision.checked and s.feeds.chunk_bytes == 16 for s in report.streams)


def test_forced_plain_copies_keep_row_major_stages():
    module = engine_matmul.trace(np.zeros((64, 100), bf16), np.zeros((100, 64), bf16),
                                 np.zeros((64, 64), f32), BM=64, BN=64, BK=32, ENGINE="plain")
    (report,) = schedule_pipelines(module, "sm_80").kernel.schedule_reports
    assert all(s.engine is Engine.PLAIN and s.feeds is None
               and "forced plain copies" in s.feed_note for s in report.streams)


# --- the layout library ---------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [8, 4])
@pytest.mark.parametrize("mnk", [(64, 64, 32), (128, 128, 64), (16, 64, 64), (128, 128, 32)])
@pytest.mark.parametrize("which", [1, 2])  # A, B
def test_narrow_chunks_keep_the_swizzle_and_land_inside_its_chunks(chunk, mnk, which):
    target = banks.target("sm_80")
    frag = mma_layouts(*mnk, 4)[which]
    wide, narrow = stage_read(frag, target), stage_read(frag, target, chunk)
    assert narrow.chunk_bytes == chunk and narrow.in_place
    assert (narrow.swizzle, narrow.reads) == (wide.swizzle, wide.reads)
    assert narrow.wavefronts[2:] == wide.wavefronts[2:]  # the reads are the same
    assert 2 * narrow.store_width == chunk and narrow.conflict_free, narrow.describe()
    _check_reads(narrow, frag)
    # every chunk's elements are consecutive in the stage: the swizzled 16-byte chunk's
    # address plus the chunk's offset in it
    rows, cols = frag.shape
    per = chunk // 2
    r, c = np.meshgrid(np.arange(rows), np.arange(0, cols, per), indexing="ij")
    first = narrow.swizzle.offset(r, c)
    for i in range(per):
        assert (narrow.swizzle.offset(r, c + i) == first + i).all()
    assert (first % 8 == (c % 8)).all()  # the chunk keeps its place in its 16-byte chunk


def test_stage_read_refuses_other_chunks():
    with pytest.raises(LayoutError, match="4, 8 or 16 bytes"):
        stage_read(mma_layouts(64, 64, 32, 4)[1], banks.target("sm_80"), 2)


# --- PTX and SASS ---------------------------------------------------------------------------------

def _lines(ptx: str, pattern: str) -> list[int]:
    rx = re.compile(pattern)
    return [i for i, ln in enumerate(ptx.splitlines()) if rx.search(ln)]


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_copies_8_byte_chunks_and_reads_them_with_ldmatrix(arch: str):
    ptx = ptx_of(arch)
    cp8 = _lines(ptx, r"cp\.async\.ca\.shared\.global \[[^\]]+\], \[[^\]]+\], 8, ")
    cp4 = _lines(ptx, r"cp\.async\.ca\.shared\.global \[[^\]]+\], \[[^\]]+\], 4, ")
    cp16 = _lines(ptx, r"cp\.async\.cg\.shared\.global \[[^\]]+\], \[[^\]]+\], 16, ")
    ldm = _lines(ptx, r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16")
    ldm_t = _lines(ptx, r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16")
    mma = _lines(ptx, r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32")
    assert cp8 and cp4 and cp16 and ldm and ldm_t and mma
    assert "cp.async.bulk" not in ptx
    # A 128x64 tile over 128 threads: per copy site (two in the prologue, one in the loop)
    # 16 chunks of 8 bytes a thread, else 32 of 4 bytes, else 64 elements; B 8 of 16 bytes
    sites = 3
    assert len(cp8) == 16 * sites and len(cp4) == 32 * sites and len(cp16) == 8 * sites
    # no operand is read back from shared memory into registers, none staged again for
    # the dot: the only shared stores before the epilogue are the element copies of rows
    # aligned to neither 8 nor 4 bytes (2-byte stores), the only shared loads ldmatrix
    loads = _lines(ptx, r"\bld\.shared")
    stores = _lines(ptx, r"\bst\.shared")
    assert not [i for i in loads if i < max(mma)]
    early = [ptx.splitlines()[i].split()[0] for i in stores if i < max(mma)]
    if arch == "sm_80":  # sm_80 initializes its mbarriers with plain stores, first
        early = [op for op in early if op != "st.shared.b64"]
    assert set(early) == {"st.shared.b16"} and len(early) == 64 * sites
    # the in-place read: the 8-byte copies land in the stage the ldmatrixes read
    assert min(ldm) > min(cp8)


@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
def test_sass_has_64_bit_ldgsts_and_ldsm(arch: str):
    module, divisible = bucket()
    cubin = link.link_ptx(compile_module(module, arch, 4, divisible=divisible).binary, arch)
    ops = opcodes(cubin)
    assert any(o.startswith("LDGSTS.E.64") for o in ops), sorted(set(ops))
    assert any(o.startswith("LDGSTS.E.BYPASS.128") for o in ops), sorted(set(ops))
    assert any(o.startswith("LDSM.16.M88.4") for o in ops)
    assert any(o.startswith("HMMA.16816.F32.BF16") for o in ops)


# --- the scheduled program on the interpreter -----------------------------------------------------

CPU_SHAPES = [  # M, N, K: rows of A 8-byte (K=100, 36), 4-byte (94), 2-byte (67) aligned
    (67, 131, 94), (70, 45, 100), (33, 64, 36), (5, 40, 67), (64, 24, 200)]


@pytest.mark.parametrize("shape", CPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("offset", [0, 1], ids=["base", "view+1"])
def test_scheduled_program_equals_numpy_on_misaligned_rows(shape, offset: int):
    M, N, Kd = shape
    rng = np.random.default_rng(Kd)
    a = rng.standard_normal((M, Kd + offset)).astype(bf16)[:, offset:]
    b = rng.standard_normal((Kd, N)).astype(bf16)
    module = schedule_pipelines(traced(M=M, N=N, Kd=Kd, S=3, a=a, b=b), "sm_80")
    (report,) = module.kernel.schedule_reports
    assert all(s.engine is Engine.CP_ASYNC and s.feeds is not None for s in report.streams)
    assert report.streams[0].decision.checked == (Kd % 8 != 0 or offset != 0)
    assert check_function(module.kernel) == []
    c = np.full((M, N), np.nan, f32)
    run(module, (tk.cdiv(M, 64), tk.cdiv(N, 64)), A=a, B=b, C=c, K=Kd)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


# --- on a GPU -------------------------------------------------------------------------------------

GPU_SHAPES = [  # A's rows: 8-byte aligned (K=100, 1020, 4092), 4-byte (94, 1022), 2-byte (67)
    (97, 136, 100), (200, 96, 1020), (129, 128, 4092), (65, 72, 94), (64, 64, 1022),
    (33, 40, 67), (1, 8, 100)]
GPU_TILES = [(64, 64, 32, 3), (128, 128, 64, 3), (128, 128, 32, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("tile", GPU_TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("offset", [0, 1], ids=["base", "view+1"])
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_misaligned_rows_in_place_match_float64_and_the_interpreter(on_gpu, dtype, offset,
                                                                     shape, tile):
    M, N, Kd = shape
    BM, BN, BK, S = tile
    dt = TYPES[dtype]
    rng = np.random.default_rng()  # fresh data every run
    # ``view+1``: A starts one element into its buffer, so no row is 4-byte aligned: the
    # element copies; else the 8-byte (K % 4 == 0) or 4-byte (K % 2 == 0) cp.async
    a = rng.standard_normal((M, Kd + offset)).astype(dt)[:, offset:]
    b = rng.standard_normal((Kd, N)).astype(dt)
    (report,) = schedule_pipelines(traced(M=M, N=N, Kd=Kd, BM=BM, BN=BN, BK=BK, S=S, a=a, b=b),
                                   "sm_90a", num_warps=4).kernel.schedule_reports
    assert report.streams[0].feeds is not None
    # one row (M == 1) has every stride fact: with an aligned base its bucket takes the
    # unchecked 16-byte copies
    assert report.streams[0].decision.checked == (M > 1 or offset != 0)
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
    c = np.full((M, N), np.nan, f32)
    matmul_pipelined[grid](a, b, c, Kd, BM=BM, BN=BN, BK=BK, STAGES=S)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = accumulation_bound(a, b, tk.cdiv(Kd, BK) * BK)
    err = np.abs(c.astype(np.float64) - ref)
    assert not np.isnan(c).any() and (err <= bound).all(), float((err / bound).max())
    with knobs.override(interpret=True):
        ci = np.full((M, N), np.nan, f32)
        matmul_pipelined[grid](a, b, ci, Kd, BM=BM, BN=BN, BK=BK, STAGES=S)
    assert (np.abs(ci.astype(np.float64) - c) <= 2 * bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("Kd", [100, 94, 67])
def test_misaligned_rows_exact_on_small_integers(on_gpu, Kd: int):  # noqa: F811
    M, N = 131, 97
    rng = np.random.default_rng()
    a = rng.integers(-3, 4, (M, Kd)).astype(bf16)
    b = rng.integers(-3, 4, (Kd, N)).astype(bf16)
    c = np.full((M, N), np.nan, f32)
    matmul_pipelined[(tk.cdiv(M, 64), tk.cdiv(N, 64))](a, b, c, Kd, BM=64, BN=64, BK=32,
                                                       STAGES=3)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))
