"""Vector addition: the smallest tilekit kernel, with a masked ragged tail."""

from __future__ import annotations

import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:  # imported as examples.vector_add
    from examples._common import poisoned, relative_error, report


@tk.kernel
def add(X: tk.Tensor, Y: tk.Tensor, Out: tk.Tensor, n, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = offs < n
    x = tk.load(X, offs, mask=mask)
    y = tk.load(Y, offs, mask=mask)
    tk.store(Out, offs, x + y, mask=mask)


def main(n: int = 100_003, block: int = 1024, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = poisoned((n,), np.float32)
    add[tk.cdiv(n, block),](x, y, out, n, BLOCK=block)
    return report("vector_add", relative_error(out, x.astype(np.float64) + y), 1e-6)


if __name__ == "__main__":
    main()
