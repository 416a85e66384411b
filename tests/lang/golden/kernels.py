"""Kernels whose printed IR is pinned by ``tests/lang/test_golden.py``.

They live in their own file because one golden file prints source locations
(``kernels.py:line:col``): editing this file moves those lines, so refresh
the golden files afterwards with
``python3 -m pytest tests/lang/test_golden.py --update-golden`` and review the
diff.
"""

from __future__ import annotations

import tilekit as tk


@tk.kernel
def row_sum(X: tk.Tensor, Out: tk.Tensor, N, BLOCK: tk.constexpr):
    """One loop-carried tile: a running sum over a row in BLOCK-wide chunks."""
    row = tk.program_id(0)
    acc = tk.zeros((BLOCK,), tk.float32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        acc += tk.load(X, row * X.stride(0) + cols, mask=cols < N)
    tk.store(Out, row, tk.sum(acc))


@tk.kernel
def mean_var(X: tk.Tensor, Mean: tk.Tensor, Var: tk.Tensor, N, BLOCK: tk.constexpr):
    """Two carried values (layer norm's statistics pass)."""
    row = tk.program_id(0)
    total = tk.zeros((BLOCK,), tk.float32)
    total_sq = tk.zeros((BLOCK,), tk.float32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        x = tk.load(X, row * X.stride(0) + cols, mask=cols < N).to(tk.float32)
        total = total + x
        total_sq = total_sq + x * x
    mean = tk.sum(total) / N
    tk.store(Mean, row, mean)
    tk.store(Var, row, tk.sum(total_sq) / N - mean * mean)


@tk.kernel
def matmul(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
           BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr):
    """Tile views and a carried dot accumulator."""
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for k in tk.range(0, tk.cdiv(K, BK)):
        a = A.tile((BM, BK), (m, k)).load()
        b = B.tile((BK, BN), (k, n)).load()
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


@tk.kernel
def nested(X: tk.Tensor, Out: tk.Tensor, M, N, BLOCK: tk.constexpr):
    """Nested runtime loops; the outer carry is updated by the inner loop."""
    total = tk.zeros((BLOCK,), tk.float32)
    for i in tk.range(0, M):
        row = tk.zeros((BLOCK,), tk.float32)
        for start in tk.range(0, N, BLOCK):
            cols = start + tk.arange(BLOCK)
            row += tk.load(X, i * X.stride(0) + cols, mask=cols < N)
        total = total + row * row
    Out.tile((BLOCK,), (0,)).store(total)


@tk.kernel
def clamp_when(X: tk.Tensor, Y: tk.Tensor, limit, BLOCK: tk.constexpr):
    """`tk.when` rebinding a tile: it keeps its old value when the condition is false."""
    pid = tk.program_id(0)
    x = X.tile((BLOCK,), (pid,)).load()
    with tk.when(tk.max(x) > limit):
        x = tk.minimum(x, limit)
    Y.tile((BLOCK,), (pid,)).store(x)


@tk.kernel
def softmax(X: tk.Tensor, Y: tk.Tensor, N: tk.constexpr):
    """A reduction and a broadcast back over the row (examples/softmax.py)."""
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load().to(tk.float32)
    z = x - tk.max(x, axis=1, keepdims=True)
    e = tk.exp(z)
    y = e / tk.sum(e, axis=1, keepdims=True)
    Y.tile((1, N), (row, 0)).store(y)


@tk.kernel
def transpose(X: tk.Tensor, Y: tk.Tensor, B: tk.constexpr):
    """Tile views read and written at swapped coordinates, with a permute between."""
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((B, B), (j, i)).store(X.tile((B, B), (i, j)).load().T)
