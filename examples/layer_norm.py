"""Layer norm with weight and bias, looping over a row in chunks (two passes:
statistics, then normalize), so rows of any length work with a fixed tile."""

from __future__ import annotations

import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:
    from examples._common import poisoned, relative_error, report


@tk.kernel
def layer_norm(X: tk.Tensor, W: tk.Tensor, B: tk.Tensor, Y: tk.Tensor, N, eps,
               BLOCK: tk.constexpr):
    row = tk.program_id(0)
    x_row = row * X.stride(0)
    y_row = row * Y.stride(0)
    total = tk.zeros((BLOCK,), tk.float32)
    total_sq = tk.zeros((BLOCK,), tk.float32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        x = tk.load(X, x_row + cols, mask=cols < N).to(tk.float32)
        total += x
        total_sq += x * x
    mean = tk.sum(total) / N
    var = tk.sum(total_sq) / N - mean * mean
    rstd = tk.rsqrt(var + eps)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        mask = cols < N
        x = tk.load(X, x_row + cols, mask=mask).to(tk.float32)
        w = tk.load(W, cols, mask=mask).to(tk.float32)
        b = tk.load(B, cols, mask=mask).to(tk.float32)
        tk.store(Y, y_row + cols, (x - mean) * rstd * w + b, mask=mask)


def main(rows: int = 67, cols: int = 1001, block: int = 256, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    y = poisoned((rows, cols), np.float32)
    eps = 1e-5
    layer_norm[rows](x, w, b, y, cols, eps, BLOCK=block)
    x64 = x.astype(np.float64)
    mu = x64.mean(1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(x64.var(1, keepdims=True) + eps) * w + b
    return report(f"layer_norm {rows}x{cols}", relative_error(y, ref), 1e-5)


if __name__ == "__main__":
    main()
