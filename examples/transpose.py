"""2-D tiled transpose of a 1000 x 37 matrix: tile views guard the ragged
edge tiles (37 is not a multiple of the tile), no masks written by hand."""

from __future__ import annotations

import numpy as np

import tilekit as tk

try:
    from _common import poisoned, report
except ImportError:
    from examples._common import poisoned, report


@tk.kernel
def transpose(X: tk.Tensor, Y: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    tile = X.tile((BM, BN), (i, j)).load()
    Y.tile((BN, BM), (j, i)).store(tile.T)


def main(rows: int = 1000, cols: int = 37, bm: int = 64, bn: int = 16, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = poisoned((cols, rows), np.float32)
    transpose[tk.cdiv(rows, bm), tk.cdiv(cols, bn)](x, y, BM=bm, BN=bn)
    mismatches = int(np.sum(y != x.T))
    return report(f"transpose {rows}x{cols}", float(mismatches), 0)


if __name__ == "__main__":
    main()
