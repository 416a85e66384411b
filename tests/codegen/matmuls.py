"""Matmul pieces the code generation tests share: a pipelined matmul whose copy engine is
pinned, and fresh random operands."""

from __future__ import annotations

import numpy as np

import tilekit as tk


@tk.kernel
def engine_matmul(A, B, C, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                  ENGINE: tk.constexpr):
    """``examples/matmul.py``'s pipelined matmul with every stream's engine pinned to
    ``ENGINE`` (``"tma"``, ``"cp_async"`` or ``"plain"``), two stages."""
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=2, engine=ENGINE):
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


def fresh_operands(dtype, M: int, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """A (M x K) and B (K x N) of standard normal values in ``dtype``, fresh every call."""
    rng = np.random.default_rng()
    return (rng.standard_normal((M, K)).astype(dtype),
            rng.standard_normal((K, N)).astype(dtype))
