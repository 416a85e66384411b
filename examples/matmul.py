"""Tiled matmul ``C = A @ B`` with tile views and a loop-carried float32 accumulator, for
any M, N, K: the edge tiles are guarded (loads past the edge read 0, stores past it are
dropped). A and B are bf16 or f16 and may be row- or column-major (a tile view takes the
array's strides at run time, so ``b.T`` of a row-major (N, K) array needs no copy); C is
bf16, f16 or f32, rounded once from the f32 accumulator. On a GPU the dot runs on tensor
cores (``mma.sync.m16n8k16``: its tiles are multiples of 16 x 8 x 16); ``TILEKIT_DUMP=layout``
shows the dot's path.

``matmul`` loads each K step's tiles into registers, and the dot stages them through
shared memory for ``ldmatrix``. ``matmul_pipelined`` streams the same tiles with
``tk.pipeline``: up to ``STAGES`` K steps are copied into shared memory ahead of the
math (cp.async), in the swizzled layout the dot's ``ldmatrix`` reads, so each stage feeds
the tensor cores directly; ``TILEKIT_DUMP=sched`` shows the stages and their layout.

Both launch on the grid ``(cdiv(M, BM), cdiv(N, BN))`` (``grid_for``). With ``GROUP_M``
above 1, ``matmul_pipelined`` reorders its blocks: the programs, numbered in launch order
(axis 0 fastest), take C's blocks a group of ``GROUP_M`` block rows at a time, down each
column of the group before the next column, so programs running together share B's
columns (and A's rows) in L2. The order changes where each block is computed, never the
result; any grid of ``cdiv(M, BM) * cdiv(N, BN)`` programs, 1-D or 2-D, works with it."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:
    from examples._common import poisoned, relative_error, report


def block_of_c(C: tk.Tensor, BM: int, BN: int, GROUP_M: int) -> tuple[tk.Tile, tk.Tile]:
    """This program's block (m, n) of C. ``GROUP_M == 1``: the grid's own coordinates.
    Otherwise the program's launch-order number is remapped to grouped order; the map is a
    bijection from ``0 .. cdiv(M, BM) * cdiv(N, BN) - 1`` onto C's blocks."""
    if GROUP_M == 1:
        return tk.program_id(0), tk.program_id(1)
    pid = tk.program_id(0) + tk.program_id(1) * tk.num_programs(0)
    tiles_m, tiles_n = tk.cdiv(C.shape[0], BM), tk.cdiv(C.shape[1], BN)
    per_group = GROUP_M * tiles_n
    first_m = pid // per_group * GROUP_M
    group_rows = tk.minimum(tiles_m - first_m, GROUP_M)  # the last group may be short
    return first_m + pid % per_group % group_rows, pid % per_group // group_rows


@tk.kernel
def matmul(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
           BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr):
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for k in tk.range(0, tk.cdiv(K, BK)):
        a = A.tile((BM, BK), (m, k)).load()
        b = B.tile((BK, BN), (k, n)).load()
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc.to(C.dtype))


@tk.kernel
def matmul_pipelined(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
                     BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                     STAGES: tk.constexpr, GROUP_M: tk.constexpr = 1):
    m, n = block_of_c(C, BM, BN, GROUP_M)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=STAGES):
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc.to(C.dtype))


def grid_for(M: int, N: int, BM: int, BN: int) -> tuple[int, int]:
    """The launch grid of both kernels: one program per (BM, BN) block of C."""
    return tk.cdiv(M, BM), tk.cdiv(N, BN)


DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
# The relative error allowed for C of each type: one rounding of C (2^-9 for bf16, 2^-12
# for f16) in a norm-wise error; f32 sums of exact bf16 products stay near 1e-7.
TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def main(M: int = 131, N: int = 77, K: int = 200, seed: int = 0, stages: int = 3,
         group_m: int = 8, dtype: str = "bfloat16", out_dtype: str = "float32",
         b_col_major: bool = False) -> float:
    """Both kernels on random ``dtype`` inputs, C in ``out_dtype``; the pipelined one in
    launch order and in groups of ``group_m`` block rows; B column-major when asked."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(DTYPES[dtype])
    if b_col_major:  # the transposed view of a row-major (N, K) array: strides (1, K)
        b = rng.standard_normal((N, K)).astype(DTYPES[dtype]).T
    else:
        b = rng.standard_normal((K, N)).astype(DTYPES[dtype])
    BM, BN, BK = 64, 32, 32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    grid = grid_for(M, N, BM, BN)
    tol = TOLERANCE[out_dtype]
    what = f"{dtype}{' (B column-major)' if b_col_major else ''} -> {out_dtype} {M}x{N}x{K}"
    c = poisoned((M, N), DTYPES[out_dtype])
    matmul[grid](a, b, c, K, BM=BM, BN=BN, BK=BK)
    err = report(f"matmul {what}", relative_error(c, ref), tol)
    for g in sorted({1, group_m}):
        c = poisoned((M, N), DTYPES[out_dtype])
        matmul_pipelined[grid](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages, GROUP_M=g)
        err = max(err, report(f"matmul pipelined {what}, {stages} stages, GROUP_M={g}",
                              relative_error(c, ref), tol))
    return err


if __name__ == "__main__":
    main()
