"""Code generation for scheduled pipelines (``tilekit.codegen.lower_async``), offline.

Pipelined kernels (a 2-D copy and a row sum; TMA, cp.async and plain copies; uniform and
warp roles; ragged shapes) are scheduled by ``tilekit.sched``, lowered to PTX for sm_90a
and sm_80, assembled by nvJitLink and read back as SASS: TMA loads are ``UTMALDG`` with
mbarrier ``SYNCS``, cp.async is ``LDGSTS``, warp roles set registers with ``USETMAXREG``,
and nothing spills. Hand-built scheduled IR (``docs/pipelines.md``, run first on the
interpreter, which checks the barrier protocol) covers what the schedule does not emit
yet: bulk stores, TMA boxes split along a long row. No GPU is needed; none runs here.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilekit as tk
from tests.codegen.sass_checks import needs_cuobjdump, needs_linker, opcodes, resources
from tilekit.codegen import sass
from tilekit.codegen.artifact import SlotKind
from tilekit.codegen.driver import compile_module
from tilekit.errors import LoweringError
from tilekit.ir import (
    Block,
    Builder,
    DType,
    Function,
    Module,
    Operation,
    Region,
    TensorType,
    TileType,
)
from tilekit.rt import link

needs_ptxas = pytest.mark.skipif(
    shutil.which("ptxas") is None or not sass.available(),
    reason="ptxas (a CUDA toolkit) or cuobjdump is not installed")

f32 = np.float32
HERE = Path(__file__).resolve()


# --- kernels written with tk.pipeline ----------------------------------------------------------

@tk.kernel
def pipelined_copy(X: tk.Tensor, Y: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr,
                   STAGES: tk.constexpr, ENGINE: tk.constexpr, ROLES: tk.constexpr):
    m = tk.program_id(0)
    for j, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=STAGES, engine=ENGINE,
                            warp_roles=ROLES):
        Y.tile((BM, BN), (m, j)).store(x)


@tk.kernel
def pipelined_row_sum(X: tk.Tensor, Y: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr,
                      STAGES: tk.constexpr, ENGINE: tk.constexpr, ROLES: tk.constexpr):
    m = tk.program_id(0)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=STAGES, engine=ENGINE,  # AMD
                            warp_roles=ROLES):
        acc += x.to(tk.float32)
    Y.tile((BM,), (m,)).store(tk.sum(acc, axis=1))


@tk.kernel
def two_streams(A: tk.Tensor, B: tk.Tensor, Y: tk.Tensor, BLOCK: tk.constexpr):
    """A's row in TMA-friendly f32 tiles, B's column in (BLOCK, 1) f16 tiles that only
    plain loads move: one ``full`` phase takes a TMA arrival and a plain one."""
    r = tk.program_id(0)
    acc = tk.zeros((1, BLOCK), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((1, BLOCK), row=r), B.tiles((BLOCK, 1), col=0),
                               stages=2):
        acc += a * tk.sum(b.to(tk.float32))
    Y.tile((1, BLOCK), (r, 0)).store(acc)


def compiled_dot(roles: bool | None = True):
    """The example's pipelined matmul, bf16, 128 x 128 x 64 blocks on three stages (its
    consumer holds a dot's accumulator: setmaxnreg pays)."""
    import ml_dtypes

    from examples.matmul import matmul_pipelined

    bf16 = ml_dtypes.bfloat16
    key = ("dot", roles)
    if key not in _COMPILED:
        module = matmul_pipelined.trace(
            np.zeros((256, 256), bf16), np.zeros((256, 256), bf16), np.zeros((256, 256), f32),
            256, BM=128, BN=128, BK=64, STAGES=3, WARP_ROLES=roles)
        _COMPILED[key] = compile_module(module, "sm_90a")
    return _COMPILED[key]


KERNELS = {"copy": pipelined_copy, "row_sum": pipelined_row_sum}


def traced(kind: str, engine: str | None, roles: bool | None, shape=(300, 1000),
           dtype: Any = f32, tile=(8, 128), stages: int = 3) -> Module:
    """A traced kernel: X of ``shape`` (ragged by default: 300 x 1000 by 8 x 128 tiles)."""
    x = np.zeros(shape, dtype)
    y = np.zeros(shape, dtype) if kind == "copy" else np.zeros(shape[:1], f32)
    return KERNELS[kind].trace(x, y, BM=tile[0], BN=tile[1], STAGES=stages, ENGINE=engine,
                               ROLES=roles)


_COMPILED: dict[tuple, Any] = {}


def compiled(kind: str, engine: str | None, roles: bool | None, arch: str, **kw: Any):
    key = (kind, engine, roles, arch, tuple(sorted(kw.items())))
    if key not in _COMPILED:
        _COMPILED[key] = compile_module(traced(kind, engine, roles, **kw), arch)
    return _COMPILED[key]


CASES = [(arch, engine, roles, kind)
         for arch in ("sm_90a", "sm_80")
         for engine in ("tma", "cp_async", "plain")
         for roles in (None, True)
         for kind in ("copy", "row_sum")
         if not (arch == "sm_80" and engine == "tma")]


# --- every engine, both targets: PTX that assembles, no spills --------------------------------

@needs_linker
@pytest.mark.parametrize("arch,engine,roles,kind", CASES,
                         ids=[f"{a}-{e}-{'roles' if r else 'uniform'}-{k}"
                              for a, e, r, k in CASES])
def test_scheduled_kernels_assemble_without_spills(arch, engine, roles, kind):
    k = compiled(kind, engine, roles, arch)
    ptx = k.binary.decode()
    assert "mbarrier.init.shared.b64" in ptx and "mbarrier.inval.shared.b64" in ptx
    assert "__local_depot" not in ptx  # no local copy (the tensor map stays in param space)
    cubin = link.link_ptx(k.binary, arch)
    if sass.available():
        use = resources(cubin)
        assert use["STACK"] == 0 and use["LOCAL"] == 0, use


@needs_cuobjdump
@pytest.mark.parametrize("roles", [None, True], ids=["uniform", "roles"])
@pytest.mark.parametrize("kind", ["copy", "row_sum"])
def test_sm90a_tma_pipeline_is_utmaldg_completing_on_mbarriers(kind, roles):
    k = compiled(kind, "tma", roles, "sm_90a")
    ops = opcodes(link.link_ptx(k.binary, "sm_90a"))
    assert any(o.startswith("UTMALDG.2D") for o in ops), sorted(set(ops))
    syncs = {o for o in ops if o.startswith("SYNCS")}
    assert any(o.startswith("SYNCS.EXCH") for o in syncs)  # mbarrier.init
    assert any(o.startswith("SYNCS.PHASECHK") for o in syncs)  # try_wait.parity
    assert any(o.startswith("SYNCS.ARRIVE") for o in syncs)  # arrive, arrive.expect_tx
    assert not any(o.startswith("LDGSTS") for o in ops)


@needs_cuobjdump
@pytest.mark.parametrize("kind", ["copy", "row_sum"])
def test_sm80_cp_async_pipeline_is_ldgsts(kind):
    k = compiled(kind, "cp_async", None, "sm_80")
    ptx = k.binary.decode()
    assert "cp.async.cg.shared.global" in ptx  # 16-byte chunks (rows of 4000 bytes)
    assert "cp.async.mbarrier.arrive.noinc.shared.b64" in ptx
    assert "mbarrier.test_wait.parity.shared.b64" in ptx  # sm_80 has no try_wait
    assert "fence.proxy.async" not in ptx and "fence.mbarrier_init" not in ptx
    ops = opcodes(link.link_ptx(k.binary, "sm_80"))
    assert any(o.startswith("LDGSTS.E.BYPASS.128") for o in ops), sorted(set(ops))
    assert not any(o.startswith(("UTMA", "SYNCS")) for o in ops)


@needs_cuobjdump
def test_smem_reads_are_128_bit_in_the_tiles_layout():
    for engine in ("tma", "cp_async", "plain"):
        k = compiled("row_sum", engine, None, "sm_90a")
        assert "ld.shared.v4.b32" in k.binary.decode(), engine
        assert "LDS.128" in opcodes(link.link_ptx(k.binary, "sm_90a")), engine


def _laid_out(module: Module, arch: str = "sm_90a") -> Module:
    """The module as code generation sees it: scheduled, then laid out (compile_module's
    warps)."""
    from tilekit.codegen.driver import _role_warps
    from tilekit.codegen.occupancy import default_num_warps
    from tilekit.layout.propagate import LayoutOptions, assign_layouts
    from tilekit.sched import schedule_pipelines

    warps = default_num_warps(module)
    scheduled = schedule_pipelines(module, arch, num_warps=warps)
    _role_warps(scheduled, warps)
    return assign_layouts(scheduled, LayoutOptions(warps, 32, arch[:5]))


def _steady_state_loops(module: Module) -> list[Operation]:
    """The loops that consume stages (a ``for`` whose body reads a stage)."""
    return [op for op in module.walk() if op.name == "for"
            and any(o.name == "smem_read" for o in op.regions[0].block.ops)]


ROW_SUM_TILES = [(8, 256), (16, 256), (32, 128), (8, 128), (2, 256), (64, 64)]


@pytest.mark.parametrize("engine,roles", [("tma", None), ("tma", True), ("cp_async", None)])
@pytest.mark.parametrize("tile", ROW_SUM_TILES, ids=lambda t: f"{t[0]}x{t[1]}")
def test_row_sum_accumulator_needs_no_conversion_in_the_loop(tile, engine, roles):
    """Regression (bench/pipeline.py's row sum at 0.83x of copy, 2x256 tiles at 0.18x):
    the bf16 stage is read in 16-byte vectors (8 elements a thread) and the float32
    accumulator, born from ``tk.zeros``, took float32's default (4 a thread), so every
    step converted the tile (32-128 warp shuffles a thread, or a staging through shared
    memory with two barriers). The stage read's layout now reaches the accumulator."""
    import ml_dtypes

    module = traced("row_sum", engine, roles, shape=(64, 1024), dtype=ml_dtypes.bfloat16,
                    tile=tile, stages=4)
    laid = _laid_out(module)
    (loop,) = _steady_state_loops(laid)
    inside = [o for o in loop.walk() if o.name == "convert_layout"]
    assert not inside, [str(o.result.type.layout) for o in inside]
    (read,) = [o for o in loop.walk() if o.name == "smem_read"]
    assert loop.results[0].type.layout.encoding == read.result.type.layout.encoding


@needs_cuobjdump
def test_row_sum_steady_state_has_no_shuffles():
    """The 8 x 256 bf16 row sum of the bench: 32 SHFL.IDX a thread per step before."""
    import ml_dtypes

    module = traced("row_sum", "tma", None, shape=(64, 1024), dtype=ml_dtypes.bfloat16,
                    tile=(8, 256), stages=4)
    ops = opcodes(link.link_ptx(compile_module(module, "sm_90a").binary, "sm_90a"))
    assert not [o for o in ops if o.startswith("SHFL.IDX")]
    assert "LDS.128" in ops  # the step's 16 elements a thread, two 16-byte reads


def _mark_waits(module: Module, which: str) -> Module:
    """Mark the hand-built schedule's waits on ``which`` (``full``/``empty``) elected."""
    for op in module.walk():
        if op.name == "mbarrier_wait" and op.operand("bar").owner.attrs["name"] == which:
            op.attrs["elected"] = True
    return module


def test_an_elected_wait_is_the_elected_threads_alone():
    """A TMA producer's wait for a free stage (``elected``) is lowered inside the elected
    thread's branch, with its expect_tx and copy: other threads reach the next step
    without it. A wait followed by anything else (a stage read) is refused."""
    module = _mark_waits(hand_row_sum("tma", (1, 256), stages=3), "empty")
    k = compile_module(module, "sm_90a")
    ptx = k.binary.decode()
    # the prologue's 2 and the loop's produce: elected; the loop's wait on `full`: not
    assert ptx.count("mbarrier.try_wait.parity") == 4
    if link.available():
        link.link_ptx(k.binary, "sm_90a")
    bad = _mark_waits(hand_row_sum("tma", (1, 256), stages=3), "full")
    with pytest.raises(LoweringError, match="follows a wait that only the elected thread"):
        compile_module(bad, "sm_90a")


def test_plain_copies_store_vectors_into_the_stage():
    ptx = compiled("copy", "plain", None, "sm_80").binary.decode()
    assert "st.shared.v4.b32" in ptx and "ld.global" in ptx and "cp.async" not in ptx


# --- warp roles ----------------------------------------------------------------------------------

def test_warp_roles_branch_into_producer_and_consumer_warps():
    k = compiled("row_sum", "tma", True, "sm_90a")
    ptx = k.binary.decode()
    # 1 producer warp + 4 consumers: a body without a dot takes no setmaxnreg, so the
    # producer is not padded to a warpgroup (idle warps would hold registers too)
    assert k.num_warps == 5 and k.block_threads == 160
    assert ".maxntid 160" in ptx and ".minnctapersm" not in ptx
    assert "setmaxnreg" not in ptx
    assert "bar.sync \t1, 128;" in ptx  # the epilogue's reduction: consumer threads only
    assert ptx.count("bar.sync \t0;") == 4  # both views meet at the schedule's two barriers


def test_warp_roles_of_a_dot_pad_the_producer_and_set_max_registers():
    k = compiled_dot(True)
    ptx = k.binary.decode()
    # 1 producer warp padded to a warpgroup (setmaxnreg needs whole warpgroups) + 8 consumers
    assert k.num_warps == 12 and k.block_threads == 384
    assert ".maxntid 384" in ptx and ".minnctapersm 1" in ptx
    dec = ptx.index("setmaxnreg.dec.sync.aligned.u32 \t40")
    inc = ptx.index("setmaxnreg.inc.sync.aligned.u32 \t232")
    assert ptx.count("setmaxnreg") == 2 and dec != inc


@needs_ptxas
def test_warp_roles_set_max_registers_in_the_sass():
    """ptxas honours setmaxnreg in a whole-program build (nvJitLink compiles PTX as a
    relocatable unit and ignores it: ptxas C7504)."""
    k = compiled_dot(True)
    with tempfile.TemporaryDirectory(prefix="tilekit-ptxas-") as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx.write_bytes(k.binary)
        out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(ptx), "-o", str(cubin)],
                             capture_output=True, text=True, timeout=120, check=True)
        assert "setmaxnreg' ignored" not in out.stderr, out.stderr
        ops = opcodes(cubin.read_bytes())
    assert "USETMAXREG.DEALLOC.CTAPOOL" in ops and "USETMAXREG.TRY_ALLOC.CTAPOOL" in ops


def test_warp_roles_are_refused_on_sm80_by_the_lowering():
    from tilekit.codegen.lower import lower_function
    from tilekit.layout.propagate import LayoutOptions, assign_layouts
    from tilekit.sched import schedule_pipelines

    scheduled = schedule_pipelines(traced("row_sum", "tma", True), "sm_90a", num_warps=4)
    laid = assign_layouts(scheduled, LayoutOptions(4, 32, "sm_80"))
    with pytest.raises(LoweringError, match="warp roles need setmaxnreg"):
        lower_function(laid.kernel, get_target("sm_80"), 4,
                       pipeline_smem_bytes=scheduled.kernel.pipeline_smem_bytes)


# --- tensor maps, shared memory, barrier counts ---------------------------------------------------

def get_target(name: str):
    from tilekit.codegen.target import get_target as get

    return get(name)


def test_tma_streams_take_a_grid_constant_tensor_map_parameter():
    k = compiled("copy", "tma", None, "sm_90a")
    maps = [s for s in k.params if s.kind is SlotKind.TENSOR_MAP]
    # X's for the loads; Y's because the body stores each tile unchanged (a bulk store)
    assert [(s.arg, s.dtype, s.box, s.swizzle) for s in maps] == \
        [("X", "tensormap", (8, 128), "NONE"), ("Y", "tensormap", (8, 128), "NONE")]
    kinds = [s.kind for s in k.params]
    assert kinds.index(SlotKind.TENSOR_MAP) == len(kinds) - 3  # before the status word
    ptx = k.binary.decode()
    index = len(kinds) - 3
    assert re.search(rf"\.param \.align 64 \.b8 pipelined_copy_param_{index}\[128\]", ptx)
    assert "cvta.param.u64" in ptx  # its own address: __grid_constant__, not a copy
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.tile\."
                     r"mbarrier::complete_tx::bytes \[%rd\d+\], \[%rd\d+, \{%r\d+, %r\d+\}\]",
                     ptx)
    assert "cp.async.bulk.tensor.2d.global.shared" in ptx and "ld.shared" not in ptx
    assert not [s for s in compiled("copy", "cp_async", None, "sm_90a").params
                if s.kind is SlotKind.TENSOR_MAP]


def test_scratch_after_the_last_pipeline_reuses_its_drained_stages():
    """The row sum's reduction runs after its pipeline: its scratch starts at 0, over the
    drained stages, below the first mbarrier (whose invalidation may still be running), so
    the kernel needs no shared memory beyond the pipeline's."""
    from tilekit.sched import schedule_pipelines

    module = traced("row_sum", "cp_async", None)
    scheduled = schedule_pipelines(module, "sm_90a", num_warps=4).kernel
    plan = scheduled.pipeline_smem_bytes
    first_barrier = min(op.attrs["offset"] for op in scheduled.walk()
                        if op.name == "mbarrier_alloc")
    k = compiled("row_sum", "cp_async", None, "sm_90a")
    assert plan > 0 and k.shared_bytes == plan
    ptx = k.binary.decode()
    scratch = [int(o) for o in re.findall(r"st\.shared\.b32 \t\[%rd\d+(?:\+(\d+))?\]", ptx)
               if o]
    assert all(o < first_barrier for o in scratch)
    assert ".extern .shared .align 128 .b8 tk_smem[];" in ptx
    assert compiled("copy", "cp_async", None, "sm_90a").shared_bytes == plan  # no scratch


def _plain_matmul():
    """A pipelined dot over row-major stages (forced plain copies): the dot stages its
    operands through scratch inside the loop. (PTX, kernel, the pipelines' bytes.)"""
    import ml_dtypes

    from tests.codegen.matmuls import engine_matmul
    from tilekit.sched import schedule_pipelines

    bf16 = ml_dtypes.bfloat16
    mod = engine_matmul.trace(np.zeros((64, 64), bf16), np.zeros((64, 64), bf16),
                              np.zeros((64, 64), np.float32), BM=64, BN=64, BK=32,
                              ENGINE="plain")
    plan = schedule_pipelines(mod, "sm_80").kernel.pipeline_smem_bytes
    k = compile_module(mod, "sm_80")
    return k.binary.decode(), k, plan


def test_scratch_inside_a_pipeline_comes_after_its_area():
    """A conversion inside the loop body runs while the rings are live: its scratch starts
    after the pipelines' area (the dot's operand staging of a pipelined matmul whose
    stages are row-major, forced plain copies)."""
    ptx, k, plan = _plain_matmul()
    base = -(-plan // 128) * 128
    assert k.shared_bytes > base
    assert k.shared_bytes > base and "ldmatrix" in ptx


def _counts(module: Module, arch: str, warps: int = 4) -> dict[str, int]:
    """Each barrier ring's hardware arrival count, by its name's suffix."""
    from tilekit.codegen.lower import lower_function
    from tilekit.layout.propagate import LayoutOptions, assign_layouts
    from tilekit.sched import schedule_pipelines

    scheduled = schedule_pipelines(module, arch, num_warps=warps)
    roles = next((o for o in scheduled.walk() if o.name == "warp_roles"), None)
    consumers = roles.attrs["consumer_warps"] if roles else warps
    laid = assign_layouts(scheduled, LayoutOptions(consumers, 32, arch[:5]))
    fn = laid.kernel
    lowering = lower_function(fn, get_target(arch), consumers,
                              *[frozenset(getattr(module.kernel, f)) for f in
                                ("aligned16", "unit_inner", "strides16")],
                              pipeline_smem_bytes=scheduled.kernel.pipeline_smem_bytes)
    return {op.attrs["name"].split(".")[-1]: lowering.async_state.counts[id(op.result)]
            for op in fn.walk() if op.name == "mbarrier_alloc"}


@pytest.mark.parametrize("engine,roles,arch,want", [
    ("cp_async", None, "sm_80", {"full": 128 + 128, "empty": 128}),  # noinc + arrive per thread
    ("plain", None, "sm_90a", {"full": 128, "empty": 128}),  # one arrival per thread
    ("tma", None, "sm_90a", {"full": 1, "empty": 128}),  # expect_tx only
    ("tma", True, "sm_90a", {"full": 1, "empty": 128}),  # empty: the consumer threads
    ("cp_async", True, "sm_90a", {"full": 32 + 32, "empty": 128}),  # 1 producer warp
])
def test_barriers_expect_the_hardware_arrivals_of_their_arrive_sites(engine, roles, arch,
                                                                     want):
    assert _counts(traced("row_sum", engine, roles), arch) == want


def test_a_phase_with_a_tma_and_a_plain_arrival_counts_both():
    a = np.zeros((5, 64), f32)
    b = np.zeros((64, 3), np.float16)
    module = two_streams.trace(a, b, np.zeros((5, 64), f32), BLOCK=16)
    assert _counts(module, "sm_90a") == {"full": 1 + 128, "empty": 128}
    k = compile_module(module, "sm_90a")
    assert k.binary.decode().count("cp.async.bulk.tensor.2d") == 2  # prologue + loop
    if link.available():
        link.link_ptx(k.binary, "sm_90a")


def test_arrival_counts_that_cannot_be_derived_are_refused():
    from tilekit.codegen.lower_async import _hardware_count

    op = type("Op", (), {"attrs": {"arrivals": 2, "name": "bar"}, "loc": None})()
    assert _hardware_count(op, {}) == 2
    assert _hardware_count(op, {("mbarrier_arrive", "cta"): 4}) == 8
    assert _hardware_count(op, {("mbarrier_arrive", "cta"): 4,
                                ("mbarrier_expect_tx", "cta"): 1}) == 5
    three = {("mbarrier_arrive", "cta"): 4, ("mbarrier_expect_tx", "cta"): 1,
             ("mbarrier_arrive", "producer"): 1}
    with pytest.raises(LoweringError, match="hardware arrival count"):
        _hardware_count(op, three)


# --- ragged shapes and the engines the schedule picks -------------------------------------------

@needs_linker
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("shape,dtype,tile", [
    ((1000, 4097), np.float32, (8, 256)),  # rows off 16 bytes: 4-byte cp.async chunks
    ((257, 4097), "bfloat16", (4, 256)),  # 2-byte elements, odd rows: plain copies
    ((33, 100), np.float32, (16, 64)),  # ragged along both dims
])
def test_ragged_shapes_with_the_schedules_engine(arch, shape, dtype, tile):
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    for kind in ("copy", "row_sum"):
        k = compile_module(traced(kind, None, None, shape=shape, dtype=dt, tile=tile), arch)
        link.link_ptx(k.binary, arch)


def test_cp_async_chunks_zero_fill_past_the_edge():
    """The ragged (300, 1000) tile rows: the src-size operand is computed, not constant."""
    ptx = compiled("copy", "cp_async", None, "sm_90a").binary.decode()
    sizes = re.findall(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16, (\S+);", ptx)
    assert sizes and all(s.startswith("%r") for s in sizes), sizes[:4]


# --- errors --------------------------------------------------------------------------------------

def test_pipelines_on_amd_name_the_users_line():
    module = traced("row_sum", None, None)
    with pytest.raises(LoweringError) as info:
        compile_module(module, "gfx942")
    text = str(info.value)
    assert "pipelines are not lowered for AMD yet; use tk.range" in text
    line = next(i for i, s in enumerate(HERE.read_text().splitlines(), 1) if "# AMD" in s)
    assert f"{HERE.name}:{line}:" in text, text


def test_tma_on_sm80_is_refused_at_the_copy():
    kernel = hand_row_sum("tma", (1, 256))
    with pytest.raises(LoweringError, match="TMA copies and bulk stores need sm_90"):
        compile_module(kernel, "sm_80")


# --- hand-built scheduled IR (docs/pipelines.md) ------------------------------------------------

def _c(b: Builder, value: Any, dtype: DType = DType.INT32, shape: tuple[int, ...] = ()) -> Any:
    return b.create("constant", attrs={"value": value, "dtype": dtype, "shape": shape}).result


def _bin(b: Builder, name: str, x: Any, y: Any) -> Any:
    if isinstance(y, int):
        y = _c(b, y)
    return b.create(name, {"lhs": x, "rhs": y}).result


def _when(b: Builder, cond: Any, body) -> None:
    blk = Block()
    with b.at_end_of(blk):
        body()
        b.create("yield")
    b.create("when", {"cond": cond}, regions=[Region([blk])])


def hand_row_sum(engine: str, shape: tuple[int, int], stages: int = 2,
                 vector_bytes: int | None = None) -> Module:
    """Y[r, :] = sum over the row's (1, B) tiles of X, as the uniform schedule of
    docs/pipelines.md, written by hand; ``n`` (the trip count) is an argument."""
    fn = Function("hand_row_sum", Region([Block()]), {}, None)
    X = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "X")
    Y = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "Y")
    n_arg = fn.entry.add_arg(TileType((), DType.INT32), "n")
    b = Builder(fn.entry)
    r = b.create("program_id", attrs={"axis": 0}).result
    zero = _c(b, 0)
    S = stages
    n = b.create("trip_count", {"n": n_arg}, {"pipeline": 0, "stages": S}).result
    tile_bytes = shape[0] * shape[1] * 4
    ring_bytes = S * (-(-tile_bytes // 128) * 128)
    ring = b.create("smem_alloc", attrs={"shape": shape, "dtype": DType.FLOAT32, "stages": S,
                                         "name": "X", "offset": 0}).result
    full = b.create("mbarrier_alloc", attrs={"count": S, "arrivals": 1, "name": "full",
                                             "offset": ring_bytes}).result
    empty = b.create("mbarrier_alloc", attrs={"count": S, "arrivals": 1, "name": "empty",
                                              "offset": ring_bytes + 8 * S}).result
    fn.pipeline_smem_bytes = ring_bytes + 16 * S  # type: ignore[attr-defined]
    if engine == "tma":
        b.create("fence_mbarrier_init")
    b.create("cta_barrier")

    def produce(j, slot, parity) -> None:
        b.create("mbarrier_wait", {"bar": empty, "slot": slot, "parity": parity})
        if engine == "tma":
            b.create("mbarrier_expect_tx", {"bar": full, "slot": slot}, {"bytes": tile_bytes})
        attrs = {"engine": engine, "shape": shape, "padding": 0}
        if vector_bytes:
            attrs["vector_bytes"] = vector_bytes
        b.create("copy_g2s", {"tensor": X, "index": [r, j], "dst": ring, "slot": slot,
                              "bar": full, "bslot": slot}, attrs)
        if engine != "tma":
            b.create("mbarrier_arrive", {"bar": full, "slot": slot})

    for j in range(S - 1):
        jv = _c(b, j)
        _when(b, _bin(b, "lt", jv, n),
              lambda jv=jv, j=j: produce(jv, _c(b, j % S), _c(b, ((j // S) & 1) ^ 1)))
    acc0 = _c(b, 0.0, DType.FLOAT32, shape)
    body = Block([TileType((), DType.INT32), acc0.type])
    i, acc = body.args
    with b.at_end_of(body):
        j = _bin(b, "add", i, S - 1)
        _when(b, _bin(b, "lt", j, n), lambda: produce(
            j, _bin(b, "mod", j, S), _bin(b, "xor", _bin(b, "and", _bin(
                b, "floordiv", j, S), 1), 1)))
        s = _bin(b, "mod", i, S)
        b.create("mbarrier_wait", {"bar": full, "slot": s,
                                   "parity": _bin(b, "and", _bin(b, "floordiv", i, S), 1)})
        t = b.create("smem_read", {"src": ring, "slot": s}).result
        if engine == "tma":  # the reads are ordered before the next TMA copy into the stage
            b.create("fence_proxy_async")
        b.create("mbarrier_arrive", {"bar": empty, "slot": s})
        b.create("yield", {"values": [_bin(b, "add", acc, t)]})
    loop = b.create("for", {"lo": zero, "hi": n, "step": _c(b, 1), "inits": [acc0]},
                    regions=[Region([body])])
    b.create("cta_barrier")
    b.create("mbarrier_inval", {"bar": full})
    b.create("mbarrier_inval", {"bar": empty})
    b.create("tile_store", {"tensor": Y, "index": [r, zero], "value": loop.result},
             {"shape": shape})
    for f in ("aligned16", "unit_inner", "strides16"):
        setattr(fn, f, frozenset({"X", "Y"}))
    return Module([fn])


def hand_staged_store(stages: int = 2) -> Module:
    """Y = X + 1, each (8, 64) tile written into a stage by ordinary stores and sent to
    global memory by a bulk (TMA) store: smem_write, fence_proxy_async, cta_barrier,
    copy_s2g, and store_wait before the stage is written again."""
    shape = (8, 64)
    fn = Function("hand_staged_store", Region([Block()]), {}, None)
    X = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "X")
    Y = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "Y")
    n = fn.entry.add_arg(TileType((), DType.INT32), "n")
    b = Builder(fn.entry)
    r = b.create("program_id", attrs={"axis": 0}).result
    zero = _c(b, 0)
    ring = b.create("smem_alloc", attrs={"shape": shape, "dtype": DType.FLOAT32,
                                         "stages": stages, "name": "Y", "offset": 0}).result
    fn.pipeline_smem_bytes = stages * 2048  # type: ignore[attr-defined]
    body = Block([TileType((), DType.INT32)])
    (j,) = body.args
    with b.at_end_of(body):
        x = b.create("tile_load", {"tensor": X, "index": [r, j]}, {"shape": shape}).result
        y = _bin(b, "add", x, _c(b, 1.0, DType.FLOAT32, shape))
        s = _bin(b, "mod", j, stages)
        b.create("smem_write", {"dst": ring, "slot": s, "value": y})
        b.create("fence_proxy_async")
        b.create("cta_barrier")
        token = b.create("copy_s2g", {"src": ring, "slot": s, "tensor": Y, "index": [r, j]},
                         {"shape": shape}).result
        b.create("store_wait", {"token": token})
        b.create("yield")
    b.create("for", {"lo": zero, "hi": n, "step": _c(b, 1)}, regions=[Region([body])])
    for f in ("aligned16", "unit_inner", "strides16"):
        setattr(fn, f, frozenset({"X", "Y"}))
    return Module([fn])


def run_interpreter(module: Module, grid: int, **arrays: Any) -> None:
    from tilekit.rt import interpreter
    from tilekit.rt.arrays import to_host
    from tilekit.rt.memory import TensorBinding

    fn = module.kernel
    args = {}
    for a in fn.args:
        v = arrays[a.name_hint]
        args[a] = TensorBinding(a.name_hint, to_host(v, a.name_hint, None)) \
            if isinstance(v, np.ndarray) else np.asarray(v, dtype=a.type.dtype.np)
    interpreter.run(fn, (grid,), args)


@pytest.mark.parametrize("engine", ["tma", "cp_async", "plain"])
def test_hand_built_schedule_is_a_valid_protocol(engine):
    """The hand-built IR runs, checked, on the interpreter: the tests below lower a valid
    schedule."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1000)).astype(f32)
    y = np.zeros((3, 256), f32)
    n = 4  # tiles of 256 along a 1000-wide row: the last one is ragged
    run_interpreter(hand_row_sum(engine, (1, 256), vector_bytes=16 if engine == "cp_async"
                                 else None), 3, X=x, Y=y, n=n)
    padded = np.zeros((3, 1024), f32)
    padded[:, :1000] = x
    np.testing.assert_allclose(y, padded.reshape(3, 4, 256).sum(axis=1), rtol=1e-5)


def test_tma_boxes_split_a_row_longer_than_256():
    module = hand_row_sum("tma", (1, 1024))
    run_interpreter(module, 1, X=np.ones((1, 3000), f32), Y=np.zeros((1, 1024), f32), n=3)
    k = compile_module(module, "sm_90a")
    maps = [s for s in k.params if s.kind is SlotKind.TENSOR_MAP]
    assert [s.box for s in maps] == [(1, 256)]
    ptx = k.binary.decode()
    # one prologue copy and one in the loop, each 4 boxes 1024 bytes apart in the stage
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == 8
    assert "mbarrier.arrive.expect_tx.shared.b64" in ptx
    if link.available():
        link.link_ptx(k.binary, "sm_90a")


def test_tma_boxes_that_cannot_be_split_are_refused():
    from tilekit.codegen.lower_async import box_pieces, tma_box

    assert tma_box((8, 128), 4) == (8, 128)
    assert tma_box((1, 1024), 2) == (1, 256)
    assert box_pieces((1, 1024), (1, 256), 2) == [((0, k * 256), k * 512) for k in range(4)]
    with pytest.raises(LoweringError, match="no TMA box"):
        tma_box((2, 512), 4)  # boxes along the row would not be contiguous in the stage
    with pytest.raises(LoweringError, match="multiple of 16 bytes"):
        tma_box((8, 6), 2)


def test_bulk_stores_write_through_tma_and_wait_before_reuse():
    module = hand_staged_store()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 256)).astype(f32)
    y = np.zeros_like(x)
    run_interpreter(module, 2, X=x, Y=y, n=4)
    np.testing.assert_array_equal(y, x + 1)
    k = compile_module(module, "sm_90a")
    assert k.written_args == ("Y",)
    assert [(s.arg, s.box) for s in k.params if s.kind is SlotKind.TENSOR_MAP] == \
        [("Y", (8, 64))]
    ptx = k.binary.decode()
    for needle in ("st.shared.v4.b32", "fence.proxy.async.shared::cta",
                   "cp.async.bulk.tensor.2d.global.shared::cta", "cp.async.bulk.commit_group",
                   "cp.async.bulk.wait_group.read \t0"):
        assert needle in ptx, needle
    if sass.available() and link.available():
        ops = opcodes(link.link_ptx(k.binary, "sm_90a"))
        assert any(o.startswith("UTMASTG") for o in ops), sorted(set(ops))
    with pytest.raises(LoweringError, match="bulk stores need sm_90"):
        compile_module(module, "sm_80")


def test_cp_async_chunks_wider_than_an_element_need_the_bucket_facts():
    module = hand_row_sum("cp_async", (1, 256), vector_bytes=16)
    module.kernel.strides16 = frozenset()  # rows no longer known to be 16-byte multiples
    with pytest.raises(LoweringError, match="16-byte cp.async chunks of `X` need"):
        compile_module(module, "sm_80")


# --- layouts of the scheduled ops ----------------------------------------------------------------

def test_layouts_of_stages_copies_and_roles():
    from tilekit.layout.propagate import LayoutOptions, assign_layouts
    from tilekit.layout.tile_layouts import default_blocked
    from tilekit.sched import schedule_pipelines

    for roles, producer_warps in ((None, 4), (True, 1)):
        scheduled = schedule_pipelines(traced("copy", "plain", roles), "sm_90a", num_warps=4)
        laid = assign_layouts(scheduled, LayoutOptions(4, 32))
        reads = [o for o in laid.walk() if o.name == "smem_read"]
        copies = [o for o in laid.walk() if o.name == "copy_g2s"]
        assert reads and copies
        for o in reads:
            assert o.result.type.layout == default_blocked((8, 128), 4, 32, 4)
        for o in copies:
            assert o.attrs["staging_layout"] == default_blocked((8, 128), producer_warps, 32, 4)


def test_stage_accesses_are_vectors_only_where_rows_and_stages_keep_them_aligned():
    from types import SimpleNamespace

    from tilekit.codegen.lower_async import Ring, _stage_groups
    from tilekit.ir.types import SharedType
    from tilekit.layout.tile_layouts import default_blocked

    L = SimpleNamespace(target=get_target("sm_90a"))
    lay = default_blocked((8, 128), 4, 32, 4)
    ring = Ring("X", 0, SharedType((8, 128), DType.FLOAT32, 2), 4096)
    groups = _stage_groups(L, lay, ring, 4)
    assert all(vec and len(g) == 4 for g, vec in groups)
    assert sorted(r for g, _ in groups for r in g) == list(range(lay.num_regs))
    odd = Ring("X", 0, SharedType((8, 128), DType.FLOAT32, 2), 4100)  # stages 4 bytes apart
    assert not any(vec for _, vec in _stage_groups(L, lay, odd, 4))
    ragged = default_blocked((8, 130), 4, 32, 4)  # rows of 520 bytes: not 16-byte aligned
    ring = Ring("X", 0, SharedType((8, 130), DType.FLOAT32, 2), 4224)
    assert not any(vec for _, vec in _stage_groups(L, ragged, ring, 4))
    wide = default_blocked((1, 4097), 4, 32, 4)  # the tail wraps: scalar accesses there
    ring = Ring("X", 0, SharedType((1, 4097), DType.FLOAT32, 2), 16512)
    kinds = {vec for _, vec in _stage_groups(L, wide, ring, 4)}
    assert kinds == {True, False}


def test_jitter_knob_puts_random_sleeps_before_copies_and_stage_reads():
    import sys
    from pathlib import Path

    import numpy as np

    from tilekit import knobs
    from tilekit.codegen import compile_module

    examples = str(Path(__file__).resolve().parents[2] / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    import pipeline_copy

    x = np.zeros((30, 100), np.float32)
    module = pipeline_copy.pipeline_copy.trace(x, x.copy(), BM=8, BN=32, STAGES=2)
    plain = compile_module(module, "sm_90a").binary.decode()
    with knobs.override(jitter=True):
        jittered = compile_module(module, "sm_90a").binary.decode()
    assert "nanosleep" not in plain
    assert jittered.count("nanosleep") >= 2
