"""Tile views over rows that are not 16-byte aligned, on both backends.

Rows of 4097 (or 1001, 37...) elements start at every residue modulo a 16-byte vector,
so the GPU takes each of its paths: aligned rows, misaligned rows realigned by warp
shuffles or moved as pieces, tail groups that wrap, and tiles hanging off the edge.
Integers compare exactly; every element is written exactly once (outputs poisoned).
"""

# ruff: noqa: N803  (tensor-like names)

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk

pytestmark = pytest.mark.usefixtures("backend")

DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16, np.int8, np.int32]


@tk.kernel
def row_affine(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    x = X.tile((1, N), (r, 0)).load()
    Y.tile((1, N), (r, 0)).store(x * 3 + 1)


@tk.kernel
def row_sum_broadcast(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    x = X.tile((1, N), (r, 0)).load().to(tk.float32)
    Y.tile((1, N), (r, 0)).store(x - tk.max(x, axis=1, keepdims=True))


@tk.kernel
def blocks(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((BM, BN), (i, j)).store(X.tile((BM, BN), (i, j)).load() + 1)


@tk.kernel
def transposed(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((BN, BM), (j, i)).store(X.tile((BM, BN), (i, j)).load().T)


def _random(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-20, 20, shape).astype(dtype)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _poison(shape, dtype):
    return np.full(shape, 77 if np.dtype(dtype).kind == "i" else np.nan, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rows,cols", [(9, 4097), (8, 1001), (5, 37), (3, 8), (4, 2051)])
def test_rows_of_any_length(rows, cols, dtype):
    x = _random((rows, cols), dtype, rows * cols)
    y = _poison((rows, cols), dtype)
    row_affine[rows](x, y, N=cols)
    np.testing.assert_array_equal(y, (x * 3 + 1).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("cols", [4097, 999, 12])
def test_row_reduction_over_misaligned_rows(cols, dtype):
    x = _random((11, cols), dtype, cols)
    y = _poison((11, cols), np.float32)
    row_sum_broadcast[11](x, y, N=cols)
    x32 = x.astype(np.float32)
    np.testing.assert_array_equal(y, x32 - x32.max(1, keepdims=True))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int8])
@pytest.mark.parametrize("shape,tile", [((13, 131), (4, 64)), ((33, 70), (8, 32)),
                                        ((5, 1000), (1, 256)), ((7, 100), (2, 128))])
def test_blocks_hanging_off_ragged_edges(shape, tile, dtype):
    x = _random(shape, dtype, shape[1])
    y = _poison(shape, dtype)
    grid = (-(-shape[0] // tile[0]), -(-shape[1] // tile[1]))
    blocks[grid](x, y, BM=tile[0], BN=tile[1])
    np.testing.assert_array_equal(y, (x + 1).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16, np.int8])
@pytest.mark.parametrize("shape,tile", [((37, 71), (32, 16)), ((131, 67), (64, 32)),
                                        ((19, 301), (16, 256)), ((301, 19), (256, 16))])
def test_transposes_of_misaligned_rows(shape, tile, dtype):
    """Rows of odd length on both sides: a warp's lanes span rows with different shifts on
    one side (loads realigned per lane, without a branch per shift) and lie along one row
    on the other (shuffles), depending on the tile."""
    x = _random(shape, dtype, shape[0] * shape[1])
    y = _poison(shape[::-1], dtype)
    grid = (-(-shape[0] // tile[0]), -(-shape[1] // tile[1]))
    transposed[grid](x, y, BM=tile[0], BN=tile[1])
    np.testing.assert_array_equal(y, x.T)
