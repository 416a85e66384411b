"""``tk.dot`` on wgmma (sm_90a): a pipeline's A and B stages filled by TMA in swizzled boxes
and read by ``wgmma.mma_async`` through descriptors (``tilekit.layout.wgmma_plan``,
``tilekit.codegen.lower_wgmma``).

What is checked: the accumulator layout is the PTX ISA's D fragment; the plan's
descriptors are the layout library's; the schedule picks wgmma exactly when the bucket
admits the swizzled TMA boxes and the dot fits (else mma.sync, as before), and says so;
the protocol checker accepts it at every trip count; the scheduled program equals numpy on
the interpreter; the SASS has HGMMA, UTMALDG and no spills; and on an H100 the matmul
example equals a float64 reference on ragged shapes.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tests.codegen.matmuls import fresh_operands
from tests.codegen.sass_checks import needs_cuobjdump, opcodes, resources
from tests.sched.builders import run
from tilekit import knobs
from tilekit.codegen.driver import compile_module
from tilekit.codegen.occupancy import default_num_warps
from tilekit.ir.dtypes import DType
from tilekit.layout.shared import Major
from tilekit.layout.wgmma import WgmmaSwizzle, decode_descriptor
from tilekit.layout.wgmma_plan import (
    STAGE_ALIGN,
    WgmmaStage,
    plan_wgmma,
    wgmma_layouts,
    wgmma_misfit,
)
from tilekit.rt import link
from tilekit.sched import Engine, schedule_pipelines
from tilekit.sched.dump import format_report
from tilekit.sched.protocol import check_function, trip_counts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from matmul import matmul_pipelined  # noqa: E402  (examples/matmul.py)

bf16, f16, f32 = ml_dtypes.bfloat16, np.float16, np.float32
TYPES = {"bf16": bf16, "f16": f16}


@pytest.fixture(autouse=True)
def _interpreted():
    with knobs.override(interpret=True, wgmma=True):
        yield


def traced(dtype=bf16, M=256, N=256, Kd=192, BM=128, BN=128, BK=64, S=3, out=f32, a_t=False,
           **arrays):
    a = arrays.get("a", np.ones((Kd, M), dtype).T if a_t else np.ones((M, Kd), dtype))
    b = arrays.get("b", np.ones((Kd, N), dtype))
    return matmul_pipelined.trace(a, b, np.zeros((M, N), out), Kd, BM=BM, BN=BN, BK=BK,
                                  STAGES=S)


def scheduled(arch: str = "sm_90a", warps: int = 8, **kw):
    out = schedule_pipelines(traced(**kw), arch, num_warps=warps)
    (report,) = out.kernel.schedule_reports
    return out, report


# --- the layout library ---------------------------------------------------------------------

@pytest.mark.parametrize("m, n, warps", [(64, 64, 4), (128, 256, 8), (128, 128, 4),
                                         (256, 96, 8), (128, 24, 8)])
def test_accumulator_layout_is_the_wgmma_d_fragment(m: int, n: int, warps: int):
    """PTX ISA, "Register fragment D" of wgmma m64nNk16 (f32): lane l of warp w % 4 of
    warpgroup g holds d[4 j + e] at row 16 (w % 4) + l / 4 + 8 (e / 2), column
    8 j + 2 (l % 4) + e % 2 of its 64-row block; M repeat i is block i * groups + g."""
    lay = wgmma_layouts(m, n, warps)
    coords, owned = lay.table()
    groups = warps // 4
    per_block = n // 2
    assert owned.all() and lay.num_regs == m // (16 * warps) * per_block
    for w in range(warps):
        for lane in range(32):
            for r in range(lay.num_regs):
                i, d = divmod(r, per_block)
                j, e = divmod(d, 4)
                row = (i * groups + w // 4) * 64 + 16 * (w % 4) + lane // 4 + 8 * (e // 2)
                col = 8 * j + 2 * (lane % 4) + e % 2
                assert tuple(coords[w, lane, r]) == (row, col), (w, lane, r)


def test_descriptors_of_a_128x256x64_tile_are_the_canonical_128b_swizzle():
    plan = plan_wgmma(128, 256, 64, DType.BFLOAT16, 8)
    assert plan.a.box == (128, 64) and plan.b.box == (64, 64) and len(plan.b.pieces()) == 4
    for s, word in enumerate(plan.a_desc[0]):
        d = decode_descriptor(word)
        assert (d.start_address, d.sbo, d.swizzle) == (32 * s, 1024, WgmmaSwizzle.B128)
    assert decode_descriptor(plan.a_desc[0][0] + plan.a_warpgroup_step).start_address == 8192
    for s, word in enumerate(plan.b_desc):
        d = decode_descriptor(word)
        assert (d.start_address, d.lbo, d.sbo) == (2048 * s, 64 * 128, 1024)
    assert (plan.a.major, plan.b.major) == (Major.K, Major.MN)
    assert "wgmma.m64n256k16" in plan.describe()


@pytest.mark.parametrize("m, n, k, warps", [(64, 64, 16, 4), (64, 40, 32, 4), (128, 64, 48, 8),
                                            (256, 128, 128, 8), (64, 8 * 3, 16 * 5, 4)])
def test_every_ragged_plan_has_descriptors_for_each_block_and_step(m, n, k, warps):
    """Tiles whose rows are 32 or 64 bytes take the narrower swizzles; every slice of the
    stage that an instruction reads is a canonical layout (else plan_wgmma raises)."""
    if n * 2 % 32:
        with pytest.raises(tk.errors.LayoutError, match="32-byte swizzle span"):
            plan_wgmma(m, n, k, DType.FLOAT16, warps)
        return
    plan = plan_wgmma(m, n, k, DType.FLOAT16, warps)
    assert len(plan.b_desc) == k // 16 and len(plan.a_desc) == m // (16 * warps)
    for stage in (plan.a, plan.b):
        offsets = stage.offsets()
        assert offsets.shape == stage.shape
        assert sorted(offsets.ravel().tolist()) == list(range(0, stage.bytes, 2))


@pytest.mark.parametrize("args, why", [
    ((64, 64, 16, DType.BFLOAT16, DType.FLOAT32, 4, 80), "sm_90a"),
    ((64, 64, 16, DType.FLOAT32, DType.FLOAT32, 4, 90), "f16 or bf16"),
    ((64, 64, 16, DType.BFLOAT16, DType.FLOAT16, 4, 90), "accumulates in f32"),
    ((64, 64, 16, DType.BFLOAT16, DType.FLOAT32, 2, 90), "whole warpgroups"),
    ((32, 64, 16, DType.BFLOAT16, DType.FLOAT32, 4, 90), "M=32"),
    ((64, 264, 16, DType.BFLOAT16, DType.FLOAT32, 4, 90), "N=264"),
    ((64, 64, 24, DType.BFLOAT16, DType.FLOAT32, 4, 90), "K=24"),
    ((128, 256, 16, DType.BFLOAT16, DType.FLOAT32, 4, 90), "256 registers"),
])
def test_misfits_say_why(args, why):
    assert why in wgmma_misfit(*args)
    assert wgmma_misfit(128, 256, 64, DType.BFLOAT16, DType.FLOAT32, 8, 90) is None


# --- the schedule ---------------------------------------------------------------------------

def test_aligned_operands_take_tma_into_wgmma_stages():
    module, report = scheduled()
    assert report.engines == (Engine.TMA, Engine.TMA)
    a, b = (s.feeds for s in report.streams)
    assert isinstance(a, WgmmaStage) and isinstance(b, WgmmaStage)
    assert report.streams[1].decision.box == (64, 64)
    for ring in (p for p in report.allocations if not p.is_barrier):
        assert ring.offset % STAGE_ALIGN == 0
    text = format_report(report)
    assert "wgmma operand A (K-major): TMA boxes 128x64 with B128 swizzle" in text
    assert "2 boxes of 64x64" in text


def test_misaligned_k_rows_are_read_from_a_repacked_copy():
    """Rows of 36 bf16 (72 bytes) admit no tensor map: the layout library's REPACK plan
    (rows padded to 16 bytes) feeds wgmma instead of mma.sync, the kernel is compiled for
    that copy, and the report says so with the rule the tensor broke."""
    module, report = scheduled(Kd=36, BK=32)
    a, b = report.streams
    assert report.engines == (Engine.TMA, Engine.TMA)
    assert a.decision.repack and not b.decision.repack
    assert isinstance(a.feeds, WgmmaStage) and isinstance(b.feeds, WgmmaStage)
    assert a.tma_rules == ("TMA_GLOBAL_STRIDE_ALIGN",)
    assert module.kernel.repacked == {"A"}
    assert {"A"} <= module.kernel.strides16 and {"A"} <= module.kernel.aligned16
    text = format_report(report)
    assert "TMA reads a copy of A that the runtime makes before each launch" in text
    assert "repack A once into a row-major copy with row pitch" in text
    assert "TMA_GLOBAL_STRIDE_ALIGN: global stride 194 bytes" in text
    kernel = compile_module(traced(Kd=36, BK=32), "sm_90a", 8)
    assert kernel.repacked == ("A",)
    assert [(p.arg, p.swizzle) for p in kernel.params if p.kind.value == "tensor_map"] == \
        [("A", "B64"), ("B", "B128")]


def test_an_aligned_bucket_repacks_nothing():
    module, report = scheduled()
    assert module.kernel.repacked == frozenset()
    assert not any(s.decision.repack for s in report.streams)
    assert compile_module(traced(), "sm_90a", 8).repacked == ()


@needs_cuobjdump
def test_sass_of_the_repacked_bucket_has_hgmma_and_utmaldg():
    cubin = link.link_ptx(compile_module(traced(Kd=8092 // 64, BK=64), "sm_90a", 8).binary,
                          "sm_90a")
    ops = {o.split(".")[0] for o in opcodes(cubin)}
    assert {"HGMMA", "UTMALDG"} <= ops and "HMMA" not in ops


@pytest.mark.parametrize("change, kw", [
    # rows of 72 bytes, not unit-stride: no repack row by row, cp.async into mma.sync
    ("misaligned K rows, column-major A", dict(Kd=36, BK=32, a_t=True)),
    ("sm_80", dict(arch="sm_80")),
    ("2 warps", dict(warps=2, BM=64, BN=64)),
    ("the knob", dict()),
])
def test_otherwise_the_dot_stays_on_mma_sync(change: str, kw):
    arch = kw.pop("arch", "sm_90a")
    warps = kw.pop("warps", 8)
    with knobs.override(wgmma=change != "the knob"):
        _, report = scheduled(arch, warps, **kw)
    assert not any(isinstance(s.feeds, WgmmaStage) for s in report.streams)
    assert not any(s.decision.repack for s in report.streams)
    if "column-major" not in change:  # (a column-major A is staged through registers)
        assert all(s.feeds is not None for s in report.streams)  # mma.sync reads in place


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_protocol_checker_accepts_every_trip_count(stages: int):
    module, _ = scheduled(S=stages)
    assert {0, 1, stages - 1, stages, stages + 1} <= set(trip_counts(stages))
    assert check_function(module.kernel) == []


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_the_dot_runs_one_step_ahead_with_two_stages_or_more(stages: int):
    """The accumulator only flows from dot to dot: each dot waits for the previous group
    (``wgmma_pending`` 1), the stage it read is released one step late, the loop drains
    the last group, and copies run ``stages - 2`` steps ahead. One stage: no lag."""
    module, _ = scheduled(S=stages)
    ops = list(module.kernel.walk())
    (dot,) = [o for o in ops if o.name == "dot"]
    loops = [o for o in ops if o.name == "for" and "wgmma_drain" in o.attrs]
    lag = stages >= 2
    assert dot.attrs.get("wgmma_pending", 0) == int(lag) and len(loops) == int(lag)
    copies = [o for o in ops if o.name == "copy_g2s"]
    # the unrolled prologue's copies, then the loop's: 2 streams each
    assert len(copies) == 2 * (stages - 1 - int(lag) + 1)


def test_a_dot_whose_result_is_read_in_the_body_waits_for_its_group():
    @tk.kernel
    def scaled(A, B, C, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr):
        m, n = tk.program_id(0), tk.program_id(1)
        acc = tk.zeros((BM, BN), tk.float32)
        for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                                   stages=3):
            acc = tk.dot(a, b, acc) * 0.5
        C.tile((BM, BN), (m, n)).store(acc)

    mod = scaled.trace(np.ones((128, 128), bf16), np.ones((128, 128), bf16),
                       np.zeros((128, 128), f32), BM=64, BN=64, BK=32)
    out = schedule_pipelines(mod, "sm_90a", num_warps=4)
    (dot,) = [o for o in out.kernel.walk() if o.name == "dot"]
    (report,) = out.kernel.schedule_reports
    assert all(isinstance(s.feeds, WgmmaStage) for s in report.streams)
    assert dot.attrs.get("wgmma_pending", 0) == 0
    assert check_function(out.kernel) == []
    ptx = compile_module(mod, "sm_90a", 4).binary.decode()
    assert "wgmma.wait_group.sync.aligned 1" not in ptx
    rng = np.random.default_rng(5)
    a = rng.standard_normal((100, 72)).astype(bf16)
    b = rng.standard_normal((72, 40)).astype(bf16)
    mod = scaled.trace(a, b, np.zeros((100, 40), f32), BM=64, BN=64, BK=32)
    module = schedule_pipelines(mod, "sm_90a", num_warps=4)
    c = np.full((100, 40), np.nan, f32)
    run(module, (2, 1), A=a, B=b, C=c)
    ref = np.zeros((100, 40))
    for k in range(0, 72, 32):
        ref = (ref + a[:, k:k + 32].astype(np.float64) @ b[k:k + 32].astype(np.float64)) * 0.5
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("trips", [0, 1, 3, 4, 7])
def test_scheduled_program_equals_numpy_on_the_interpreter(stages: int, trips: int):
    """The wgmma schedule (stages released after the body) run with data through the
    protocol machine: K covers ``trips`` K tiles, the last one ragged."""
    BK = 16
    Kd = max(0, trips * BK - 8)
    M, N = 70, 40
    rng = np.random.default_rng(trips)
    a = rng.standard_normal((M, Kd)).astype(bf16)
    b = rng.standard_normal((Kd, N)).astype(bf16)
    module = schedule_pipelines(traced(M=M, N=N, Kd=Kd, BM=64, BN=32, BK=BK, S=stages,
                                       a=a, b=b), "sm_90a", num_warps=4)
    (report,) = module.kernel.schedule_reports
    # (an empty A has no 16-byte facts: its stream keeps mma.sync, correct all the same)
    assert all(isinstance(s.feeds, WgmmaStage) for s in report.streams) or Kd == 0
    c = np.full((M, N), np.nan, f32)
    run(module, (tk.cdiv(M, 64), tk.cdiv(N, 32)), A=a, B=b, C=c, K=Kd)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-5, atol=1e-4)


# --- PTX and SASS -----------------------------------------------------------------------------

@functools.cache
def compiled(BM: int, BN: int, BK: int, S: int, warps: int, out=bf16):
    return compile_module(traced(BM=BM, BN=BN, BK=BK, S=S, out=out), "sm_90a", warps)


TILES = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (64, 64, 32, 3, 4)]


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
def test_ptx_fences_issues_commits_and_waits(tile):
    BM, BN, BK, S, warps = tile
    ptx = compiled(*tile).binary.decode()
    steps = BK // 16 * BM // (16 * warps)
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.bf16.bf16") == steps
    assert ptx.count("wgmma.fence.sync.aligned") == 1
    assert ptx.count("wgmma.commit_group.sync.aligned") == 1
    # the group runs on into the next step (wait 1); the loop's exit drains it (wait 0)
    assert ptx.count("wgmma.wait_group.sync.aligned 1") == 1
    assert ptx.count("wgmma.wait_group.sync.aligned 0") == 1
    assert ptx.index("wgmma.wait_group.sync.aligned 1") < ptx.index(
        "wgmma.wait_group.sync.aligned 0")
    assert "fence.proxy.async" not in ptx  # wgmma reads through the async proxy, as TMA writes
    assert ".extern .shared .align 1024" in ptx
    assert "ldmatrix" not in ptx.split("wgmma.fence")[0].split("mbarrier.try_wait")[-1]


@needs_cuobjdump
@pytest.mark.skipif(not link.available(), reason="nvJitLink is not installed")
@pytest.mark.parametrize("tile", TILES[:2], ids=lambda t: "x".join(map(str, t)))
def test_sass_has_hgmma_and_utmaldg_and_no_spills(tile):
    cubin = link.link_ptx(compiled(*tile).binary, "sm_90a")
    ops = {o.split(".")[0] for o in opcodes(cubin)}
    assert {"HGMMA", "UTMALDG", "SYNCS"} <= ops
    assert not ops & {"LDL", "STL"}
    assert resources(cubin)["LOCAL"] == 0


# --- on a GPU ---------------------------------------------------------------------------------

GPU_SHAPES = [  # rows of A and B multiples of 16 bytes (TMA admits them), edges ragged
    (128, 128, 64), (97, 136, 72), (200, 264, 136), (1, 8, 8), (4113, 256, 512),
    (129, 520, 264), (256, 8, 40), (33, 64, 0), (300, 1000, 1000),
]
GPU_TILES = [(128, 256, 64, 3), (128, 128, 64, 4), (64, 64, 32, 3), (128, 64, 32, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("tile", GPU_TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_wgmma_matmul_matches_float64(on_gpu, dtype: str, shape, tile):
    M, N, Kd = shape
    BM, BN, BK, S = tile
    dt = TYPES[dtype]
    a, b = fresh_operands(dt, M, N, Kd)
    module = traced(dt, M, N, Kd, BM, BN, BK, S, a=a, b=b)
    warps = default_num_warps(module)
    (report,) = schedule_pipelines(module, "sm_90a", num_warps=warps).kernel.schedule_reports
    assert all(isinstance(s.feeds, WgmmaStage) for s in report.streams) or Kd == 0, \
        format_report(report)
    c = np.full((M, N), np.nan, f32)
    matmul_pipelined[tk.cdiv(M, BM), tk.cdiv(N, BN)](a, b, c, Kd, BM=BM, BN=BN, BK=BK,
                                                      STAGES=S)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    # f32 sums of exact 16-bit products: the order of additions alone differs
    bound = 1e-5 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-6
    err = np.abs(c.astype(np.float64) - ref)
    assert not np.isnan(c).any()
    assert (err <= bound).all(), float((err / bound).max())


# Rows of A (and of B where N is odd) that are not multiples of 16 bytes: the runtime
# repacks them (tilekit.rt.repack) and the dot still runs on wgmma.
MISALIGNED_SHAPES = [(97, 136, 70), (129, 520, 262), (64, 64, 36), (300, 1000, 999),
                     (1, 8, 9), (65, 77, 70), (300, 1001, 999)]


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [GPU_TILES[0], GPU_TILES[2]],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("shape", MISALIGNED_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_repacked_wgmma_matmul_matches_float64(on_gpu, dtype: str, shape, tile):
    test_wgmma_matmul_matches_float64(on_gpu, dtype, shape, tile)
    M, N, Kd = shape
    if M > 1:  # (a single row has no row stride: A's bucket is aligned)
        assert repacked_by_bucket(b_aligned=N % 8 == 0) == {("A", "B") if N % 8 else ("A",)}


def repacked_by_bucket(b_aligned: bool) -> set[tuple[str, ...]]:
    """``CompiledKernel.repacked`` of the loaded variants whose A rows are misaligned
    (every such variant of one bucket is the same kernel)."""
    out = set()
    for variant, kernel in matmul_pipelined._loaded.items():
        args = dict(variant.spec.args)
        if not args["A"].strides16 and args["B"].strides16 == b_aligned:
            out.add(kernel.compiled.repacked)
    return out


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.gpu
def test_repacked_torch_views_and_a_cuda_graph(on_gpu):
    """Device tensors: A a column slice of a wider matrix (rows of 2,050 bytes, not dense),
    B transposed-contiguous; the copy is made on the launch's stream, also inside a CUDA
    graph capture, whose replays copy the static buffers' new data."""
    torch = _torch()
    M, N, Kd, BM, BN, BK = 300, 256, 1025, 128, 128, 64
    wide = torch.randn(M, Kd + 3, device="cuda", dtype=torch.bfloat16)
    a = wide[:, :Kd]
    b = torch.randn(Kd, N, device="cuda", dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan"), device="cuda")
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))

    def run_once():
        matmul_pipelined[grid](a, b, c, Kd, BM=BM, BN=BN, BK=BK, STAGES=3)

    def check():
        ref = a.double() @ b.double()
        bound = 1e-5 * (a.double().abs() @ b.double().abs()) + 1e-6
        assert bool(((c.double() - ref).abs() <= bound).all())

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run_once()
    torch.cuda.synchronize()
    check()
    assert repacked_by_bucket(b_aligned=True) == {("A",)}
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        run_once()
    for _ in range(3):
        wide.copy_(torch.randn_like(wide))
        b.copy_(torch.randn_like(b))
        c.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check()


def test_warp_roles_give_wgmma_to_consumer_warpgroups():
    """``WARP_ROLES``: a producer warp issues the TMA copies, two consumer warpgroups run
    the wgmma groups; the protocol checker accepts it."""
    mod = matmul_pipelined.trace(np.ones((256, 192), bf16), np.ones((192, 256), bf16),
                                 np.zeros((256, 256), bf16), 192, BM=128, BN=256, BK=64,
                                 STAGES=4, WARP_ROLES=True)
    out = schedule_pipelines(mod, "sm_90a", num_warps=8)
    (report,) = out.kernel.schedule_reports
    assert report.roles.mode.value == "specialized" and report.roles.consumer_warps == 8
    assert all(isinstance(s.feeds, WgmmaStage) for s in report.streams)
    assert check_function(out.kernel) == []
    cubin = link.link_ptx(compile_module(mod, "sm_90a", 8).binary, "sm_90a")
    assert {"HGMMA", "UTMALDG"} <= {o.split(".")[0] for o in opcodes(cubin)}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 1000, 999), (128, 256, 64), (4113, 256, 520)],
                         ids=lambda s: "x".join(map(str, s)))
def test_warp_specialized_wgmma_matmul_matches_float64(on_gpu, shape):
    M, N, Kd = shape
    a, b = fresh_operands(bf16, M, N, Kd)
    c = np.full((M, N), np.nan, f32)
    matmul_pipelined[tk.cdiv(M, 128), tk.cdiv(N, 256)](a, b, c, Kd, BM=128, BN=256, BK=64,
                                                        STAGES=4, WARP_ROLES=True)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = 1e-5 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-6
    assert not np.isnan(c).any()
    assert (np.abs(c.astype(np.float64) - ref) <= bound).all()
