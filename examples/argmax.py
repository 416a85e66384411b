"""Row-wise argmax over a ragged matrix, scanning each row in chunks and
keeping the best value and index as loop-carried scalars."""

from __future__ import annotations

import numpy as np

import tilekit as tk

try:
    from _common import poisoned, report
except ImportError:
    from examples._common import poisoned, report


@tk.kernel
def row_argmax(X: tk.Tensor, Out: tk.Tensor, N, BLOCK: tk.constexpr):
    row = tk.program_id(0)
    best = tk.full((), float("-inf"), tk.float32)
    best_idx = tk.zeros((), tk.int32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        x = tk.load(X, row * X.stride(0) + cols, mask=cols < N, other=float("-inf"))
        i = tk.argmax(x, axis=0)
        v = tk.max(x, axis=0)
        better = v > best  # strict: the first maximum wins, as in numpy
        best_idx = tk.where(better, start + i, best_idx)
        best = tk.maximum(best, v)
    tk.store(Out, row, best_idx)


def main(rows: int = 129, cols: int = 1013, block: int = 128, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = poisoned((rows,), np.int32)
    row_argmax[rows](x, out, cols, BLOCK=block)
    wrong = int(np.sum(out != x.argmax(1)))
    return report(f"row_argmax {rows}x{cols}", float(wrong), 0)


if __name__ == "__main__":
    main()
