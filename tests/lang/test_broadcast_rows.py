"""Row kernels over several rows per program, with weights broadcast over the rows (a
layer norm): the weights' load is laid out as the rows' slice, replicated across warps
(``tilekit.layout.propagate``'s replicated loads). Against float64 numpy references, on
ragged widths and row counts that leave the last program's tile partly outside."""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tests.lang.helpers import bf16, f32, poison, run

pytestmark = pytest.mark.usefixtures("backend")


@tk.kernel
def layer_norm_rows(X, W, B, Y, eps, N: tk.constexpr, ROWS: tk.constexpr):
    r = tk.program_id(0)
    x = X.tile((ROWS, N), (r, 0)).load().to(tk.float32)
    mean = tk.sum(x, axis=1, keepdims=True) / N
    xc = x - mean
    rstd = tk.rsqrt(tk.sum(xc * xc, axis=1, keepdims=True) / N + eps)
    w = W.tile((N,), (0,)).load().to(tk.float32)
    b = B.tile((N,), (0,)).load().to(tk.float32)
    Y.tile((ROWS, N), (r, 0)).store((xc * rstd * w[None, :] + b[None, :]).to(Y.dtype))


def _reference(x, w, b, eps):
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    xc = x - x.mean(axis=1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + eps) * w + b


@pytest.mark.parametrize("dtype", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("m, n, rows", [(5, 4097, 2), (7, 1000, 4), (9, 97, 2), (3, 333, 8),
                                        (4, 96, 2), (6, 4097, 1)])
def test_layer_norm_over_rows_matches_float64(dtype, m, n, rows):
    rng = np.random.default_rng(m * 10007 + n * 31 + rows)
    x = (rng.standard_normal((m, n)) * 2 + 0.5).astype(dtype)
    w = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    y = poison((m, n), dtype)
    run(layer_norm_rows, -(-m // rows), x, w, b, y, 1e-5, N=n, ROWS=rows)
    ref = _reference(x, w, b, 1e-5)
    tol = 2e-5 if dtype == f32 else 2e-2  # bf16: the output's rounding (8 bits)
    err = np.abs(y.astype(np.float64) - ref) / (1 + np.abs(ref))
    assert not np.isnan(y.astype(np.float64)).any() and err.max() < tol, err.max()
