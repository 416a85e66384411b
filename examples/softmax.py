"""Fused row softmax over a ragged matrix: one program per row, the whole row
in one tile of exactly N elements (4097 is fine: tiles need not be powers of two).

Run it: ``python3 examples/softmax.py`` (on the CPU interpreter when no GPU is present).
"""

from __future__ import annotations

import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:
    from examples._common import poisoned, relative_error, report


@tk.kernel
def softmax(X: tk.Tensor, Y: tk.Tensor, N: tk.constexpr):
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load().to(tk.float32)
    z = x - tk.max(x, axis=1, keepdims=True)
    e = tk.exp(z)
    y = e / tk.sum(e, axis=1, keepdims=True)
    Y.tile((1, N), (row, 0)).store(y)


@tk.kernel
def softmax_rows(X: tk.Tensor, Y: tk.Tensor, N: tk.constexpr, ROWS: tk.constexpr):
    """``softmax`` over ROWS rows per program (ROWS=1 is ``softmax``): the knob that
    bench/autotune.py and the autotuner's GPU tests tune. Short rows want several per
    program (rows of 128 bf16: 0.22x of copy bandwidth one per program, 0.98x eight per
    program; docs/memory_bound.md, "Short rows")."""
    r = tk.program_id(0)
    x = X.tile((ROWS, N), (r, 0)).load().to(tk.float32)
    e = tk.exp(x - tk.max(x, axis=1, keepdims=True))
    Y.tile((ROWS, N), (r, 0)).store((e / tk.sum(e, axis=1, keepdims=True)).to(Y.dtype))


def main(rows: int = 1000, cols: int = 4097, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = poisoned((rows, cols), np.float32)
    softmax[rows](x, y, N=cols)
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    return report(f"softmax {rows}x{cols}", relative_error(y, ref), 1e-5)


if __name__ == "__main__":
    main()
