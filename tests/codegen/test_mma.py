"""``tk.dot`` on tensor cores (``mma.sync.m16n8k16``): offline, then on a GPU.

Offline (no GPU): the PTX of bf16 and f16 dots for sm_80 and sm_90a has ``mma.sync`` and
``ldmatrix``; its SASS (cuobjdump) has ``HMMA`` and ``LDSM`` and no local memory; shapes
that do not fit the instruction stay on FMA units and ``TILEKIT_DUMP=layout`` says why; the
LLVM IR that computes ldmatrix and store addresses, JIT-compiled for this CPU, equals the
layout library's swizzle and row addresses for every lane and warp.

On a GPU (marked ``gpu``, skipped here): matmuls of fresh random bf16 and f16 data against a
float64 numpy reference within the error bound of float32 accumulation, ragged shapes and
several tiles, and the interpreter within the same bound; chained dots (the second one's A
from the first's accumulator registers) exactly, on small integers.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import ctypes
import functools
import re

import ml_dtypes
import numpy as np
import pytest
from llvmlite import ir

import tilekit as tk
from tests.codegen.matmuls import fresh_operands
from tests.codegen.sass_checks import needs_cuobjdump, needs_linker, opcodes, resources
from tests.lang import kernels as K
from tilekit import knobs
from tilekit.codegen import sass
from tilekit.codegen.driver import compile_module
from tilekit.codegen.lower_mma import lane_part, row_offset, swizzled_offset
from tilekit.layout import banks
from tilekit.layout.mma_sync import ChunkSwizzle, mma_layouts, plan_mma_sync, stage_operand
from tilekit.layout.tile_layouts import default_blocked
from tilekit.rt import link

bf16, f16, f32 = ml_dtypes.bfloat16, np.float16, np.float32
TYPES = {"bf16": (bf16, "bf16"), "f16": (f16, "f16")}
ARCHS = ["sm_80", "sm_90a"]


@tk.kernel
def two_dots(Q, Kt, V, O, BM: tk.constexpr, BN: tk.constexpr, D: tk.constexpr):
    """``(Q @ Kt).to(bf16) @ V`` in one tile: the second dot's A is the first's result."""
    q = Q.tile((BM, D), (0, 0)).load()
    k = Kt.tile((D, BN), (0, 0)).load()
    v = V.tile((BN, D), (0, 0)).load()
    p = tk.dot(q, k).to(tk.bfloat16)
    O.tile((BM, D), (0, 0)).store(tk.dot(p, v))


def matmul_module(dtype, M=200, N=96, Kd=130, BM=64, BN=64, BK=32, acc=tk.float32,
                  trans_b=False, out=f32):
    a = np.zeros((M, Kd), dtype)
    b = np.zeros((N, Kd) if trans_b else (Kd, N), dtype)
    return K.matmul.trace(a, b, np.zeros((M, N), out), Kd, BM=BM, BN=BN, BK=BK, ACC=acc,
                          TRANS_B=trans_b)


@functools.cache
def compiled(dtype_name: str, arch: str, **kw):
    return compile_module(matmul_module(TYPES[dtype_name][0], **kw), arch)


# --- PTX and SASS ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_ptx_has_mma_sync_and_ldmatrix(dtype: str, arch: str):
    ptx = compiled(dtype, arch).binary.decode()
    t = TYPES[dtype][1]
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx  # A, K-major
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # B, N-major
    assert "st.shared.v4.b32" in ptx  # the operands are staged with 16-byte stores


@needs_cuobjdump
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", sorted(TYPES))
@pytest.mark.parametrize("tile", [(64, 64, 32), (128, 128, 32), (16, 64, 64)])
def test_sass_has_hmma_and_ldsm_and_no_spills(dtype: str, arch: str, tile):
    BM, BN, BK = tile
    kernel = compiled(dtype, arch, BM=BM, BN=BN, BK=BK)
    cubin = link.link_ptx(kernel.binary, arch)
    ops = opcodes(cubin)
    hmma = [o for o in ops if o.startswith("HMMA.16816.F32")]
    assert hmma and all(o.endswith(".BF16") == (dtype == "bf16") for o in hmma), sorted(set(ops))
    assert any(o.startswith("LDSM.16.M88.4") for o in ops)  # ldmatrix.x4
    assert any(o.startswith("LDSM.16.MT88.4") for o in ops)  # ldmatrix.x4.trans
    use = resources(cubin)
    assert use["STACK"] == 0 and use["LOCAL"] == 0, use  # nothing spills
    assert use["REG"] <= 255, use
    # one mma per (m-tile, n-tile, k-step) of each warp, the K loop not unrolled
    warps = kernel.num_warps
    assert len(hmma) == (BM // 16) * (BN // 8) * (BK // 16) // warps


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kw,reason", [
    (dict(BK=8), "fma (K=8 is not a multiple of 16)"),
    (dict(BM=24, BN=32, BK=16), "fma (M=24 is not a multiple of 16)"),
    (dict(BN=20, BK=16), "fma (N=20 is not a multiple of 8)"),
])
def test_shapes_that_do_not_fit_stay_on_fma_units(arch: str, kw, reason, capsys):
    with knobs.override(dump=frozenset({"layout"}), dump_locs=False):
        kernel = compile_module(matmul_module(bf16, **kw), arch)
    assert f"path = {reason}" in capsys.readouterr().err
    ptx = kernel.binary.decode()
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx and "fma.rn.f32" in ptx
    if sass.available() and link.available():
        assert not any(o.startswith("HMMA") for o in opcodes(link.link_ptx(ptx, arch)))


def test_float32_and_integer_dots_stay_on_fma_units(capsys):
    with knobs.override(dump=frozenset({"layout"}), dump_locs=False):
        compile_module(matmul_module(f32, BK=16), "sm_90a")
        compile_module(matmul_module(np.int8, BK=16, acc=tk.int32, out=np.int32), "sm_80")
    err = capsys.readouterr().err
    assert "path = fma (operands are f32, mma.sync takes f16 or bf16)" in err
    assert "path = fma (operands are i8, mma.sync takes f16 or bf16)" in err


def test_layout_dump_names_the_tensor_core_path(capsys):
    with knobs.override(dump=frozenset({"layout"}), dump_locs=True):
        compile_module(matmul_module(bf16), "sm_80")
    err = capsys.readouterr().err
    dot = next(line for line in err.splitlines() if " = dot " in line)
    assert "path = mma.sync.m16n8k16 bf16 64x64x32, warps 2x2" in dot
    assert "A staged, ldmatrix.x4" in dot and "B staged, ldmatrix.x4.trans" in dot
    assert "#mma<m16n8k16 acc, warps=[2,2]>" in dot and "kernels.py:" in dot


@pytest.mark.parametrize("arch", ARCHS)
def test_f16_accumulator_is_widened_for_the_dot(arch: str):
    ptx = compiled("f16", arch, acc=tk.float16, out=f16).binary.decode()
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert re.search(r"cvt\.f32\.f16", ptx) and re.search(r"cvt\.rn\.f16\.f32", ptx)


def test_transposed_b_is_read_without_trans():
    ptx = compiled("bf16", "sm_80", trans_b=True).binary.decode()
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and ".trans" not in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_a_dot_of_a_dot_takes_a_from_registers(arch: str, capsys):
    module = two_dots.trace(np.zeros((64, 32), bf16), np.zeros((32, 16), bf16),
                            np.zeros((16, 32), bf16), np.zeros((64, 32), f32),
                            BM=64, BN=16, D=32)
    with knobs.override(dump=frozenset({"layout"}), dump_locs=False):
        kernel = compile_module(module, arch)
    dots = [line for line in capsys.readouterr().err.splitlines() if " = dot " in line]
    assert len(dots) == 2 and "A staged" in dots[0] and "A from registers" in dots[1], dots
    ptx = kernel.binary.decode()
    assert ptx.count("mma.sync.aligned") == 4 + 4  # 64x16x32 and 64x32x16 on 4 warps
    assert ptx.count("ldmatrix") == 2 + 2 + 2  # A and B of the first, B of the second


@needs_linker
@pytest.mark.parametrize("tile", [(16, 16, 16), (16, 8, 16), (48, 24, 48)])
def test_tiles_smaller_than_the_warps_replicate_and_assemble(tile):
    BM, BN, BK = tile
    kernel = compile_module(matmul_module(bf16, BM=BM, BN=BN, BK=BK), "sm_80")
    ptx = kernel.binary.decode()
    assert "mma.sync" in ptx
    assert link.link_ptx(ptx, "sm_80").startswith(b"\x7fELF")


@pytest.mark.parametrize("warps", [(2, 2), (4, 1), (1, 4), (2, 4)])
@pytest.mark.parametrize("shape", [(64, 64), (16, 8), (48, 40)])
def test_epilogues_on_the_accumulator_stay_in_registers(shape, warps):
    """A bias row or column broadcast onto the accumulator (slice -> expand_dims ->
    broadcast, as ``acc + bias[None, :]`` lowers) renames registers in every thread, each
    register the element the target layout's table says."""
    from tilekit.codegen.lower_tiles import rename
    from tilekit.layout.tile_layouts import MmaEncoding, MmaOperand, SliceEncoding, TileLayout

    enc = MmaEncoding(MmaOperand.ACC, warps)
    full = TileLayout(shape, enc)
    for axis in (0, 1):
        line = TileLayout((shape[1 - axis],), SliceEncoding(enc, axis))
        one = TileLayout((1, shape[1]) if axis == 0 else (shape[0], 1), enc)
        for src, dst, dim_map in ((line, one, [None, 0] if axis == 0 else [0, None]),
                                  (one, full, [None, 1] if axis == 0 else [0, None])):
            moved = rename(src, list(range(src.num_regs)), dst, dim_map)
            assert moved is not None
            sc, _ = src.table()
            dc, _ = dst.table()
            for k, d in enumerate(dim_map):
                if d is not None:
                    np.testing.assert_array_equal(sc[:, :, moved, d], dc[:, :, :, k])


# --- the address arithmetic, run on this CPU ---------------------------------------------------

def _jit(build, nargs: int):
    """``build(builder, args) -> i32`` as a host function of ``nargs`` int32 arguments."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    i32 = ir.IntType(32)
    module = ir.Module("host")
    fn = ir.Function(module, ir.FunctionType(i32, [i32] * nargs), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(build(b, fn.args))
    mod = llvm.parse_assembly(str(module))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple()
                                        .create_target_machine())
    engine.finalize_object()
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_int32] * nargs)
    f = proto(engine.get_function_address("f"))
    f.keep = engine  # the engine owns the code
    return f


@pytest.mark.parametrize("rows,cols,pp,mp,blocked", [
    (64, 32, 2, 4, False), (32, 128, 1, 8, False), (48, 48, 4, 2, False), (48, 48, 4, 2, True),
    (16, 24, 1, 1, False), (80, 40, 1, 1, True), (32, 64, 1, 8, True),
])
def test_swizzled_offset_in_llvm_is_the_library_swizzle(rows, cols, pp, mp, blocked):
    sw = ChunkSwizzle(rows, cols, pp, mp, blocked)
    f = _jit(lambda b, args: swizzled_offset(b, sw, args[0], args[1]), 2)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    got = np.vectorize(f)(r, c)
    np.testing.assert_array_equal(got, sw.offset(r, c))


@pytest.mark.parametrize("m,n,k,warps", [(64, 64, 32, 4), (128, 128, 64, 8), (16, 8, 16, 4),
                                         (48, 24, 48, 4), (16, 64, 64, 4)])
def test_ldmatrix_row_offsets_in_llvm_are_the_plans(m, n, k, warps):
    target = banks.target("sm_80")
    acc, a_mma, b_mma = mma_layouts(m, n, k, warps)
    plan = plan_mma_sync(tk.bfloat16, acc, a_mma, b_mma,
                         stage_operand(default_blocked((m, k), warps, 32, 2), a_mma, target),
                         stage_operand(default_blocked((k, n), warps, 32, 2), b_mma, target))
    for staged in (plan.a, plan.b):
        sw = staged.swizzle
        for step in staged.reads:
            for read in step:
                def build(b, args, read=read, staged=staged):
                    lane, wr, wc = args
                    return row_offset(b, staged, read, lane_part(b, lane, read.lane_steps),
                                      (wr, wc))
                f = _jit(build, 3)
                lanes = np.arange(32)
                r, c = read.rows(lanes)
                for w in range(warps):
                    wr, wc = (int(t.value(np.array(w))) for t in staged.warp_terms)
                    want = sw.offset((r + wr) % sw.rows, (c + wc) % sw.cols)
                    got = [f(int(lane), wr, wc) for lane in lanes]
                    assert got == want.tolist(), (staged.name, read, w)


# --- on a GPU -------------------------------------------------------------------------------------

GPU_SHAPES = [  # M, N, K: ragged, primes, K not a multiple of 8, one tall
    (1, 1, 1), (97, 131, 67), (64, 64, 64), (128, 128, 128), (17, 9, 13), (33, 65, 47),
    (200, 77, 131), (256, 8, 40), (5, 300, 24), (129, 127, 255), (65, 64, 100),
    (4113, 256, 512),
]
GPU_TILES = [(64, 64, 32), (128, 128, 32), (16, 64, 64)]


def accumulation_bound(a: np.ndarray, b: np.ndarray, k_padded: int) -> np.ndarray:
    """What float32 accumulation of exact 16-bit products may be off by, per element:
    each m16n8k16 adds 16 products to the accumulator, every term within an ulp (2^-23
    relative, truncation) of the largest partial sum, which ``|a| @ |b|`` bounds; twice
    that, plus a floor for exact zeros."""
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return 2 * (k_padded // 16) * 17 * 2.0**-23 * scale + 1e-30


@pytest.mark.gpu
@pytest.mark.parametrize("tile", GPU_TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", sorted(TYPES))
def test_matmul_on_tensor_cores_matches_float64(on_gpu, dtype: str, shape, tile):
    M, N, Kd = shape
    BM, BN, BK = tile
    a, b = fresh_operands(TYPES[dtype][0], M, N, Kd)
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
    ptx = compile_module(K.matmul.trace(a, b, np.zeros((M, N), f32), Kd, BM=BM, BN=BN, BK=BK,
                                        ACC=tk.float32, TRANS_B=False), "sm_90a").binary
    assert b"mma.sync.aligned.m16n8k16" in ptx  # the tensor-core path, not FMA
    c = np.full((M, N), np.nan, f32)
    K.matmul[grid](a, b, c, Kd, BM=BM, BN=BN, BK=BK, ACC=tk.float32, TRANS_B=False)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = accumulation_bound(a, b, tk.cdiv(Kd, BK) * BK)
    err = np.abs(c.astype(np.float64) - ref)
    assert not np.isnan(c).any() and (err <= bound).all(), float((err / bound).max())
    with knobs.override(interpret=True):
        ci = np.full((M, N), np.nan, f32)
        K.matmul[grid](a, b, ci, Kd, BM=BM, BN=BN, BK=BK, ACC=tk.float32, TRANS_B=False)
    assert (np.abs(ci.astype(np.float64) - ref) <= bound).all()
    assert (np.abs(ci.astype(np.float64) - c) <= 2 * bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(TYPES))
@pytest.mark.parametrize("acc,out", [(tk.float16, f16), (tk.float32, f16)])
def test_16_bit_results_round_like_the_interpreter(on_gpu, dtype: str, acc, out):
    M, N, Kd = 97, 131, 67
    dt = TYPES[dtype][0]
    rng = np.random.default_rng()
    a = (rng.standard_normal((M, Kd)) / 4).astype(dt)
    b = (rng.standard_normal((Kd, N)) / 4).astype(dt)
    c = np.full((M, N), np.nan, out)
    K.matmul[(tk.cdiv(M, 64), tk.cdiv(N, 64))](a, b, c, Kd, BM=64, BN=64, BK=32, ACC=acc,
                                               TRANS_B=False)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    # an f16 accumulator is rounded after each of the 3 K tiles' dots, an f32 one at the store
    roundings = 3 if acc is tk.float16 else 1
    bound = accumulation_bound(a, b, 96) + roundings * 2.0**-11 * scale + 2.0**-24
    assert (np.abs(c.astype(np.float64) - ref) <= bound).all()
    with knobs.override(interpret=True):
        ci = np.full((M, N), np.nan, out)
        K.matmul[(tk.cdiv(M, 64), tk.cdiv(N, 64))](a, b, ci, Kd, BM=64, BN=64, BK=32,
                                                   ACC=acc, TRANS_B=False)
    assert (np.abs(ci.astype(np.float64) - ref) <= bound).all()


@pytest.mark.gpu
@pytest.mark.parametrize("trans_b", [False, True])
def test_exact_products_of_small_integers(on_gpu, trans_b: bool):
    """Small integers multiply and add exactly in every order: GPU == interpreter == numpy."""
    M, N, Kd = 131, 97, 200
    rng = np.random.default_rng()
    a = rng.integers(-3, 4, (M, Kd)).astype(bf16)
    b = rng.integers(-3, 4, (Kd, N)).astype(bf16)
    bt = np.ascontiguousarray(b.T) if trans_b else b
    c = np.full((M, N), np.nan, f32)
    K.matmul[(tk.cdiv(M, 64), tk.cdiv(N, 32))](a, bt, c, Kd, BM=64, BN=32, BK=32,
                                               ACC=tk.float32, TRANS_B=trans_b)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.gpu
def test_a_dot_of_a_dot_on_the_gpu(on_gpu):
    rng = np.random.default_rng()
    q, k, v = (rng.integers(-2, 3, s).astype(bf16) for s in ((64, 32), (32, 16), (16, 32)))
    o = np.full((64, 32), np.nan, f32)
    two_dots[1](q, k, v, o, BM=64, BN=16, D=32)
    p = (q.astype(np.float64) @ k.astype(np.float64)).astype(bf16)  # exact: |p| <= 128
    np.testing.assert_array_equal(o, p.astype(np.float64) @ v.astype(np.float64))
    with knobs.override(interpret=True):
        oi = np.full((64, 32), np.nan, f32)
        two_dots[1](q, k, v, oi, BM=64, BN=16, D=32)
    np.testing.assert_array_equal(oi, o)
