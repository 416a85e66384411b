"""Row sums of a (rows, cols) matrix streamed in column tiles: one program per block
of BM rows pipelines its (BM, BN) tiles, up to ``stages`` in flight, and adds them
into a float32 accumulator carried by the loop; one reduction at the end. A ragged
last tile reads zeros past the edge, which leave the sum unchanged.

Run it: ``python3 examples/pipeline_row_sum.py`` (on the CPU interpreter when no GPU is
present).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:
    from examples._common import poisoned, relative_error, report


@tk.kernel
def pipeline_row_sum(X: tk.Tensor, Y: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr,
                     STAGES: tk.constexpr):
    m = tk.program_id(0)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=STAGES):
        acc += x.to(tk.float32)
    Y.tile((BM,), (m,)).store(tk.sum(acc, axis=1))


def main(rows: int = 1000, cols: int = 4097, bm: int = 8, bn: int = 256, stages: int = 3,
         dtype: str = "bfloat16", seed: int = 0) -> float:
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(dt)
    y = poisoned((rows,), np.float32)
    pipeline_row_sum[tk.cdiv(rows, bm)](x, y, BM=bm, BN=bn, STAGES=stages)
    ref = x.astype(np.float64).sum(axis=1)
    return report(f"pipeline row sum {dtype} {rows}x{cols} by {bm}x{bn}, {stages} stages",
                  relative_error(y, ref), 1e-5)


if __name__ == "__main__":
    main()
