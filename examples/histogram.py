"""Histogram with atomic adds: many programs add into shared bins."""

from __future__ import annotations

import numpy as np

import tilekit as tk

try:
    from _common import report
except ImportError:
    from examples._common import report


@tk.kernel
def histogram(Data: tk.Tensor, Bins: tk.Tensor, n, lo, width, NUM_BINS: tk.constexpr,
              BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = offs < n
    x = tk.load(Data, offs, mask=mask)
    b = ((x - lo) / width).to(tk.int32)
    b = tk.minimum(tk.maximum(b, 0), NUM_BINS - 1)
    tk.atomic_add(Bins, b, 1, mask=mask)


def main(n: int = 20_011, num_bins: int = 37, block: int = 512, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(n).astype(np.float32)
    lo, hi = -3.0, 3.0
    width = (hi - lo) / num_bins
    bins = np.zeros(num_bins, np.int32)
    histogram[tk.cdiv(n, block)](data, bins, n, lo, width, NUM_BINS=num_bins, BLOCK=block)
    idx = np.clip(((data - np.float32(lo)) / np.float32(width)).astype(np.int32), 0, num_bins - 1)
    ref = np.bincount(idx, minlength=num_bins)
    wrong = int(np.abs(bins - ref).sum())
    return report(f"histogram n={n} bins={num_bins}", float(wrong), 0)


if __name__ == "__main__":
    main()
