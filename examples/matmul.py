"""Tiled matmul with tile views and a loop-carried float32 accumulator; odd
sizes exercise the guarded edge tiles. On a GPU the bf16 dot runs on tensor cores
(``mma.sync.m16n8k16``: its tiles are multiples of 16 x 8 x 16); ``TILEKIT_DUMP=layout``
shows the dot's path.

``matmul`` loads each K step's tiles into registers, and the dot stages them through
shared memory for ``ldmatrix``. ``matmul_pipelined`` streams the same tiles with
``tk.pipeline``: up to ``STAGES`` K steps are copied into shared memory ahead of the
math (cp.async), in the swizzled layout the dot's ``ldmatrix`` reads, so each stage feeds
the tensor cores directly; ``TILEKIT_DUMP=sched`` shows the stages and their layout."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:
    from examples._common import poisoned, relative_error, report


@tk.kernel
def matmul(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
           BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr):
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for k in tk.range(0, tk.cdiv(K, BK)):
        a = A.tile((BM, BK), (m, k)).load()
        b = B.tile((BK, BN), (k, n)).load()
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


@tk.kernel
def matmul_pipelined(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
                     BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                     STAGES: tk.constexpr):
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=STAGES):
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


def main(M: int = 131, N: int = 77, K: int = 200, seed: int = 0, stages: int = 3) -> float:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    BM, BN, BK = 64, 32, 32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    grid = (tk.cdiv(M, BM), tk.cdiv(N, BN))
    c = poisoned((M, N), np.float32)
    matmul[grid](a, b, c, K, BM=BM, BN=BN, BK=BK)
    err = report(f"matmul bf16 {M}x{N}x{K}", relative_error(c, ref), 1e-5)
    c = poisoned((M, N), np.float32)
    matmul_pipelined[grid](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages)
    return max(err, report(f"matmul pipelined bf16 {M}x{N}x{K}, {stages} stages",
                           relative_error(c, ref), 1e-5))


if __name__ == "__main__":
    main()
