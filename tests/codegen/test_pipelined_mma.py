"""``tk.dot`` fed by a ``tk.pipeline``'s stages (``examples/matmul.py``'s ``matmul_pipelined``).

When only a dot reads a stream's tiles, the schedule lays the stage out for the dot's
``ldmatrix`` (``mma_sync.stage_read``'s chunk swizzle), cp.async writes it chunk by chunk,
and ``smem_read`` becomes the dot's ``ldmatrix``es: no shared stores of the operands, no
barrier of the dot's own. Anything else keeps row-major stages.

Offline (no GPU): the schedule's decisions and their dump; the protocol checker on every
trip count it tries (0, 1, S-1, S, S+1, many); the scheduled IR run with data on the
interpreter, through the protocol machine, equals numpy; the PTX for sm_80 and sm_90a has
cp.async, ldmatrix and mma.sync and no ``st.shared``/``ld.shared`` before the epilogue; the
SASS has LDGSTS, LDSM, HMMA and no spills. On a GPU (marked ``gpu``): random bf16 and f16
ragged shapes against float64 and against the interpreter.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import functools
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tests.codegen.matmuls import engine_matmul, fresh_operands
from tests.codegen.sass_checks import needs_cuobjdump, opcodes, resources
from tests.codegen.test_mma import accumulation_bound
from tests.sched.builders import run
from tilekit import knobs
from tilekit.codegen.driver import compile_module
from tilekit.errors import LayoutError
from tilekit.layout import banks
from tilekit.layout.mma_sync import ChunkSwizzle, _check_reads, mma_layouts, stage_read
from tilekit.layout.tile_layouts import MmaEncoding
from tilekit.rt import link
from tilekit.sched import Engine, EngineRule, schedule_pipelines
from tilekit.sched.dump import format_report
from tilekit.sched.protocol import check_function, trip_counts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from matmul import matmul, matmul_pipelined  # noqa: E402  (examples/matmul.py)

bf16, f16, f32 = ml_dtypes.bfloat16, np.float16, np.float32
TYPES = {"bf16": bf16, "f16": f16}
ARCHS = ["sm_80", "sm_90a"]


@pytest.fixture(autouse=True)
def _interpreted():
    """Tracing and the examples' launches run on the interpreter here (GPU tests opt out).
    This file is about mma.sync fed in place: on sm_90a such dots would take wgmma
    (tests/codegen/test_wgmma_dot.py), so it is off here."""
    with knobs.override(interpret=True, wgmma=False):
        yield


def traced(dtype=bf16, M=200, N=96, Kd=136, BM=64, BN=64, BK=32, S=3, **arrays):
    a = arrays.get("a", np.zeros((M, Kd), dtype))
    b = arrays.get("b", np.zeros((Kd, N), dtype))
    return matmul_pipelined.trace(a, b, np.zeros((M, N), f32), Kd, BM=BM, BN=BN, BK=BK,
                                  STAGES=S)


@functools.cache
def compiled(dtype: str, arch: str, BM=64, BN=64, BK=32, S=3, warps=4):
    return compile_module(traced(TYPES[dtype], BM=BM, BN=BN, BK=BK, S=S), arch, warps)


def scheduled(arch: str = "sm_80", warps: int = 4, **kw):
    out = schedule_pipelines(traced(**kw), arch, num_warps=warps)
    (report,) = out.kernel.schedule_reports
    return out, report


# --- the schedule's decision -------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
def test_dot_operands_stream_into_swizzled_stages_by_cp_async(arch: str):
    module, report = scheduled(arch)
    a, b = report.streams
    assert report.engines == (Engine.CP_ASYNC, Engine.CP_ASYNC)
    assert a.feeds is not None and b.feeds is not None
    assert not a.feeds.trans and b.feeds.trans  # A rows run along K; B rows along N
    assert a.feeds.conflict_free and b.feeds.conflict_free
    rings = [op for op in module.walk() if op.name == "smem_alloc"]
    assert [r.result.type.layout for r in rings] == [a.feeds.swizzle, b.feeds.swizzle]
    # the stage holds the tile (the swizzle permutes it): the plan's bytes are unchanged
    assert [r.result.type.slot_bytes for r in rings] == [64 * 32 * 2, 32 * 64 * 2]
    if arch == "sm_90a":  # TMA was admissible: the stage layout is why it is not used
        assert all(s.tma_rules == (EngineRule.SWIZZLED_STAGE.name,) for s in report.streams)
        assert not any(s.decision.forced for s in report.streams)


def test_the_dump_names_the_stage_layout_and_why_not_tma():
    _, report = scheduled("sm_90a")
    text = format_report(report)
    assert "stream 0: A 64x32xbf16 along 1: cp_async (auto, 16-byte chunks)" in text
    assert "stage read in place by tk.dot: A read in place from its pipeline stage, " \
           "ldmatrix.x4, 64x32 XOR 16-byte chunks" in text
    assert "B read in place from its pipeline stage, ldmatrix.x4.trans" in text
    assert f"SWIZZLED_STAGE: {EngineRule.SWIZZLED_STAGE.value}" in text


@pytest.mark.parametrize("kw,note", [
    (dict(BK=8), "the dot runs on FMA units (K=8 is not a multiple of 16)"),
    (dict(dtype=np.float32), "the dot runs on FMA units (operands are f32"),
])
def test_dots_off_tensor_cores_keep_row_major_stages(kw, note):
    module, report = scheduled(**kw)
    assert all(s.feeds is None and s.feed_note.startswith(note) for s in report.streams)
    assert all(op.result.type.layout is None for op in module.walk() if op.name == "smem_alloc")


def test_unaligned_rows_are_read_in_place_after_a_run_time_check():
    # 82-byte rows from an odd base: the bucket proves no chunk, so the copy checks the
    # base and row strides at run time (8-byte cp.async, else element copies); the stage
    # is read in place either way (tests/codegen/test_pipelined_narrow_chunks.py)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 41)).astype(bf16)[:, 1:]
    b = np.zeros((40, 64), bf16)
    _, report = scheduled(Kd=40, a=a, b=b)
    sa, sb = report.streams
    assert sa.engine is Engine.CP_ASYNC and sa.decision.checked and sa.feeds is not None
    assert sa.decision.vector_bytes == sa.feeds.chunk_bytes == 8
    assert sb.engine is Engine.CP_ASYNC and sb.feeds is not None and not sb.decision.checked


def test_forced_tma_keeps_row_major_stages():
    mod = engine_matmul.trace(np.zeros((64, 64), bf16), np.zeros((64, 64), bf16),
                              np.zeros((64, 64), f32), BM=64, BN=64, BK=32, ENGINE="tma")
    (report,) = schedule_pipelines(mod, "sm_90a").kernel.schedule_reports
    assert report.engines == (Engine.TMA, Engine.TMA)
    assert all(s.feeds is None and "forced TMA" in s.feed_note for s in report.streams)
    ptx = compile_module(mod, "sm_90a").binary.decode()
    assert "cp.async.bulk.tensor" in ptx and "mma.sync" in ptx  # today's path, still correct


def test_a_tile_read_by_anything_else_is_not_swizzled():
    @tk.kernel
    def dot_and_sum(A, B, C, D, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr):
        m, n = tk.program_id(0), tk.program_id(1)
        acc = tk.zeros((BM, BN), tk.float32)
        total = tk.zeros((BM, BK), tk.float32)
        for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n)):
            acc = tk.dot(a, b, acc)
            total += a.to(tk.float32)
        C.tile((BM, BN), (m, n)).store(acc)
        D.tile((BM, BK), (m, 0)).store(total)

    arrays = (np.zeros((64, 64), bf16), np.zeros((64, 64), bf16), np.zeros((64, 64), f32),
              np.zeros((64, 32), f32))
    mod = dot_and_sum.trace(*arrays, BM=64, BN=64, BK=32)
    (report,) = schedule_pipelines(mod, "sm_80").kernel.schedule_reports
    sa, sb = report.streams
    assert sa.feeds is None and sa.feed_note == "" and sb.feeds is not None
    ptx = compile_module(mod, "sm_80").binary.decode()
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in ptx and "mma.sync" in ptx


# --- the layout library's stage reads ----------------------------------------------------------

@pytest.mark.parametrize("m,n,k,warps", [(64, 64, 32, 4), (128, 128, 32, 8), (128, 128, 64, 4),
                                         (16, 64, 64, 4), (64, 32, 32, 4), (32, 8, 16, 2)])
def test_stage_reads_deliver_every_fragment_register_without_conflicts(m, n, k, warps):
    _, fa, fb = mma_layouts(m, n, k, warps)
    for frag in (fa, fb):
        plan = stage_read(frag, banks.target("sm_80"))
        assert plan.in_place and plan.contiguous == 1  # the stage is the tile, row-major
        assert isinstance(plan.swizzle, ChunkSwizzle)
        assert (plan.swizzle.rows, plan.swizzle.cols) == frag.shape
        _check_reads(plan, frag)  # every lane receives its registers' elements
        assert plan.conflict_free, plan.describe()
        # a bijection: every element of the tile has its own place in the stage
        r, c = np.meshgrid(np.arange(frag.shape[0]), np.arange(frag.shape[1]), indexing="ij")
        assert np.unique(plan.swizzle.offset(r, c)).size == r.size
        assert stage_read(frag, banks.target("sm_80")) is plan  # schedule and layouts agree


def test_stage_read_refuses_an_accumulator_layout():
    acc, _, _ = mma_layouts(64, 64, 32, 4)
    with pytest.raises(LayoutError, match="not an mma operand layout"):
        stage_read(acc, banks.target("sm_80"))


# --- the protocol and the scheduled program with data ----------------------------------------

@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_protocol_checker_accepts_every_trip_count(stages: int):
    module, _ = scheduled(S=stages)
    assert {0, 1, stages - 1, stages, stages + 1} <= set(trip_counts(stages))
    assert check_function(module.kernel) == []


@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("trips", [0, 1, 2, 3, 4, 7])
def test_scheduled_program_equals_numpy_on_the_interpreter(stages: int, trips: int):
    """The scheduled IR (rings, barriers, copies, in-place reads) run with data through the
    protocol machine: K covers ``trips`` K tiles, the last one ragged."""
    BK = 32
    Kd = max(0, trips * BK - 5)
    M, N = 70, 45
    rng = np.random.default_rng(trips)
    a = rng.standard_normal((M, Kd)).astype(bf16)
    b = rng.standard_normal((Kd, N)).astype(bf16)
    module = schedule_pipelines(traced(M=M, N=N, Kd=Kd, S=stages, a=a, b=b), "sm_80")
    c = np.full((M, N), np.nan, f32)
    run(module, (tk.cdiv(M, 64), tk.cdiv(N, 64)), A=a, B=b, C=c, K=Kd)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


# --- PTX and SASS --------------------------------------------------------------------------------

def _positions(ptx: str, *needles: str) -> list[list[int]]:
    lines = ptx.splitlines()
    return [[i for i, ln in enumerate(lines) if n in ln] for n in needles]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_ptx_reads_the_stages_with_ldmatrix_and_stores_no_operand(dtype: str, arch: str):
    ptx = compiled(dtype, arch).binary.decode()
    cp, ldm, ldm_t, mma, sts, lds, arrive = _positions(
        ptx, "cp.async.cg.shared.global", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32", "st.shared",
        "ld.shared", "mbarrier.arrive.shared.b64")
    assert cp and ldm and ldm_t and mma
    assert "cp.async.bulk" not in ptx  # TMA is not used for swizzled stages
    # no operand goes through registers into shared memory: every shared store or load is
    # the epilogue's (the accumulator's conversion), after the last mma
    assert min(sts + lds) > max(mma), (min(sts + lds), max(mma))
    # the consumer releases a stage once its ldmatrixes have returned, before the math
    reads = ldm + ldm_t
    release = [i for i in arrive if max(reads) < i < min(mma)]
    assert len(release) == 1 and min(reads) > max(i for i in arrive if i < min(reads))


@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", sorted(TYPES))
@pytest.mark.parametrize("tile", [(64, 64, 32, 3, 4), (128, 128, 32, 3, 8), (128, 128, 64, 3, 8),
                                  (16, 64, 64, 2, 4)])
def test_sass_has_ldgsts_ldsm_hmma_and_no_spills(dtype: str, arch: str, tile):
    BM, BN, BK, S, warps = tile
    kernel = compiled(dtype, arch, BM=BM, BN=BN, BK=BK, S=S, warps=warps)
    cubin = link.link_ptx(kernel.binary, arch)
    ops = opcodes(cubin)
    at = lambda p: [i for i, o in enumerate(ops) if o.startswith(p)]  # noqa: E731
    hmma, sts = at("HMMA.16816.F32"), at("STS")
    assert hmma and all(ops[i].endswith(".BF16") == (dtype == "bf16") for i in hmma)
    ldsm = at("LDSM")
    assert at("LDGSTS") and at("LDSM.16.M88.4") and at("LDSM.16.MT88.4")
    # no shared store in the main loop (sm_80 initializes its mbarriers with STS, first;
    # the epilogue converts the accumulator through shared memory, last)
    assert not [i for i in sts if min(ldsm) < i < max(hmma)]
    use = resources(cubin)
    assert use["STACK"] == 0 and use["LOCAL"] == 0, use  # nothing spills
    # one mma per (m-tile, n-tile, k-step) of each warp, the K loop not unrolled
    assert len(hmma) == (BM // 16) * (BN // 8) * (BK // 16) // warps
    # the stages are the kernel's dynamic shared memory: S stages of both tiles, swizzled
    assert kernel.shared_bytes >= S * (BM * BK + BK * BN) * 2


def test_the_read_plan_is_on_the_laid_out_ir():
    from tilekit.layout.propagate import LayoutOptions, assign_layouts

    module, _ = scheduled("sm_80")
    laid = assign_layouts(module, LayoutOptions(4, 32, "sm_80"))
    reads = [op for op in laid.walk() if op.name == "smem_read"]
    assert len(reads) == 2
    for op in reads:
        enc = op.result.type.layout.encoding
        assert isinstance(enc, MmaEncoding) and op.attrs["read"].operand is enc.operand
        assert op.attrs["read"].swizzle == op.operand("src").type.layout
    dot = next(op for op in laid.walk() if op.name == "dot")
    assert dot.attrs["path"].a is None and dot.attrs["path"].b is None  # from registers
    assert not any(op.name == "convert_layout" and op.operand("x") in
                   [r.result for r in reads] for op in laid.walk())


# --- on a GPU -------------------------------------------------------------------------------------

GPU_SHAPES = [  # M, N, K: ragged, K below stages * BK, K = 0, one tall. Rows of A and B
    # that are multiples of 16 bytes (N, K multiples of 8) stream by cp.async into swizzled
    # stages read in place; the others (primes) too, by cp.async checked at run time, which
    # falls back to element copies (test_pipelined_narrow_chunks.py).
    (1, 8, 8), (97, 136, 72), (64, 64, 64), (128, 128, 128), (17, 16, 16), (33, 64, 48),
    (200, 80, 136), (256, 8, 40), (5, 296, 24), (129, 128, 264), (65, 64, 104), (40, 24, 0),
    (4113, 256, 512), (1, 1, 1), (97, 131, 67), (33, 65, 47),
]
GPU_TILES = [(64, 64, 32, 3), (128, 128, 32, 3), (16, 64, 64, 2), (128, 128, 64, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("tile", GPU_TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_pipelined_matmul_matches_float64_and_the_interpreter(on_gpu, dtype: str, shape, tile):
    M, N, Kd = shape
    BM, BN, BK, S = tile
    a, b = fresh_operands(TYPES[dtype], M, N, Kd)
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
    (report,) = schedule_pipelines(traced(M=M, N=N, Kd=Kd, BM=BM, BN=BN, BK=BK, S=S, a=a, b=b),
                                   "sm_90a", num_warps=4).kernel.schedule_reports
    fed = [s.feeds is not None for s in report.streams]
    assert fed == [s.engine is Engine.CP_ASYNC for s in report.streams]
    assert all(fed) or not (N % 8 == 0 and Kd % 8 == 0 and Kd > 0)  # 16-byte rows: in place
    c = np.full((M, N), np.nan, f32)
    matmul_pipelined[grid](a, b, c, Kd, BM=BM, BN=BN, BK=BK, STAGES=S)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = accumulation_bound(a, b, tk.cdiv(Kd, BK) * BK)
    err = np.abs(c.astype(np.float64) - ref)
    assert not np.isnan(c).any() and (err <= bound).all(), float((err / bound).max())
    with knobs.override(interpret=True):
        ci = np.full((M, N), np.nan, f32)
        matmul_pipelined[grid](a, b, ci, Kd, BM=BM, BN=BN, BK=BK, STAGES=S)
    assert (np.abs(ci.astype(np.float64) - ref) <= bound).all()
    assert (np.abs(ci.astype(np.float64) - c) <= 2 * bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_pipelined_and_plain_matmuls_agree_exactly_on_small_integers(on_gpu, dtype: str):
    """Small integers multiply and add exactly in every order: both kernels == numpy."""
    M, N, Kd = 131, 97, 200
    dt = TYPES[dtype]
    rng = np.random.default_rng()
    a = rng.integers(-3, 4, (M, Kd)).astype(dt)
    b = rng.integers(-3, 4, (Kd, N)).astype(dt)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for kernel, extra in ((matmul_pipelined, dict(STAGES=3)), (matmul, {})):
        c = np.full((M, N), np.nan, f32)
        kernel[(tk.cdiv(M, 64), tk.cdiv(N, 32))](a, b, c, Kd, BM=64, BN=32, BK=32, **extra)
        np.testing.assert_array_equal(c, ref)


def _no_in_place_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the layout pass read swizzled stages into their anchor layout (the fallback a
    stage laid out for a dot takes when the dot does not read it in place)."""
    from tilekit.layout import propagate

    monkeypatch.setattr(propagate._Assigner, "read_in_place", lambda self, op: None)


def test_a_swizzled_stage_read_into_registers_goes_through_the_swizzle(monkeypatch):
    _no_in_place_reads(monkeypatch)
    ptx = compile_module(traced(BM=64, BN=32, BK=32, S=2), "sm_80", 4).binary.decode()
    # the stage read by 16-byte vectors (inside one swizzled chunk), then staged for the dot
    assert "ld.shared.v4" in ptx and "st.shared.v4" in ptx and "mma.sync" in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(97, 136, 72), (64, 64, 64), (5, 40, 200)],
                         ids=lambda s: "x".join(map(str, s)))
def test_swizzled_stages_read_into_registers_on_the_gpu(on_gpu, monkeypatch, shape):
    _no_in_place_reads(monkeypatch)
    M, N, Kd = shape
    rng = np.random.default_rng()
    a = rng.integers(-3, 4, (M, Kd)).astype(bf16)
    b = rng.integers(-3, 4, (Kd, N)).astype(bf16)
    c = np.full((M, N), np.nan, f32)
    # a tile no other test compiles, so no cached kernel reads its stages in place
    matmul_pipelined[(tk.cdiv(M, 48), tk.cdiv(N, 24))](a, b, c, Kd, BM=48, BN=24, BK=48,
                                                       STAGES=2)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))
