"""A 2-D copy through an explicit pipeline: one program per block of BM rows walks
its row of (BM, BN) tiles with ``tk.pipeline``, up to ``stages`` tiles in flight,
and stores each tile where it came from. Ragged edges (rows or columns that are
not multiples of the tile) are read as padding and dropped on the store.

Run it: ``python3 examples/pipeline_copy.py`` (on the CPU interpreter when no GPU is
present).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tilekit as tk

try:
    from _common import poisoned, report
except ImportError:
    from examples._common import poisoned, report


@tk.kernel
def pipeline_copy(X: tk.Tensor, Y: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr,
                  STAGES: tk.constexpr):
    m = tk.program_id(0)
    for j, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=STAGES):
        Y.tile((BM, BN), (m, j)).store(x)


def main(rows: int = 300, cols: int = 1000, bm: int = 8, bn: int = 128, stages: int = 3,
         dtype: str = "float32", seed: int = 0) -> float:
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(dt)
    y = poisoned((rows, cols), dt)
    pipeline_copy[tk.cdiv(rows, bm)](x, y, BM=bm, BN=bn, STAGES=stages)
    mismatches = int(np.sum(y.view(np.uint8) != x.view(np.uint8)))  # bitwise (NaN-safe)
    return report(f"pipeline copy {dtype} {rows}x{cols} by {bm}x{bn}, {stages} stages",
                  float(mismatches), 0)


if __name__ == "__main__":
    main()
