"""``examples/matmul.py`` beyond its ``main()``: any M, N, K, B row- or column-major,
bf16/f16 in, bf16/f16/f32 out, and the grouped block order of ``matmul_pipelined``.

Every test runs on both backends (the ``backend`` fixture; the GPU leg is marked ``gpu``
and skipped without a device) against a float64 numpy reference. Results are checked per
element against what f32 accumulation and one rounding into C's type may be off by, and
outputs start poisoned, so a block never written (a hole in the block order) shows as NaN.
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tests.codegen.test_mma import accumulation_bound

from .helpers import poison

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from matmul import block_of_c, grid_for, matmul, matmul_pipelined  # noqa: E402

pytestmark = pytest.mark.usefixtures("backend")

bf16, f16, f32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
# Unit roundoff of one rounding to nearest into C's type.
ROUNDOFF = {bf16: 2.0**-8, f16: 2.0**-11, f32: 2.0**-24}


def operands(M: int, N: int, K: int, dt: np.dtype, b_col_major: bool,
             seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random A (M, K) row-major and B (K, N): row-major, or the transposed view of a
    row-major (N, K) array (strides (1, K) elements), no copy."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(dt)
    if b_col_major:
        b = rng.standard_normal((N, K)).astype(dt).T
        assert K == 0 or b.strides == (dt.itemsize, K * dt.itemsize)
    else:
        b = rng.standard_normal((K, N)).astype(dt)
    return a, b


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray, BK: int) -> None:
    """Per element: f32 accumulation of exact 16-bit products within ``acc`` of the float64
    result, then one rounding into C's type (relative ``u``; plus f16's subnormal step)."""
    ref = a.astype(np.float64) @ b.astype(np.float64)
    acc = accumulation_bound(a, b, tk.cdiv(a.shape[1], BK) * BK)
    u = ROUNDOFF[c.dtype]
    bound = acc + u * (np.abs(ref) + acc) + (2.0**-25 if c.dtype == f16 else 0.0)
    got = c.astype(np.float64)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} elements never written"
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"worst error / bound: {float((err / bound).max()):.2f}"


# (M, N, K), (BM, BN, BK), STAGES: one element; ragged everywhere; K below STAGES * BK;
# K = 0 (no trip: C = 0); one block row, many block columns; more block rows than a group
# (a short last group) with many K steps.
SHAPES = [
    ((1, 1, 1), (16, 16, 16), 3),
    ((7, 31, 97), (64, 32, 32), 3),
    ((3, 5, 20), (16, 16, 16), 5),
    ((40, 24, 0), (16, 16, 16), 2),
    ((5, 130, 40), (16, 16, 16), 2),
    ((150, 70, 300), (16, 32, 32), 4),
]
# (A and B's type, C's type, B column-major), every combination once per shape, in turn.
TYPES = list(itertools.product([bf16, f16], [f32, bf16, f16], [False, True]))


def _id(v: object) -> str:
    if isinstance(v, tuple):
        return "x".join(map(str, v))
    if isinstance(v, np.dtype):
        return {bf16: "bf16", f16: "f16", f32: "f32"}[v]
    if isinstance(v, bool):
        return "Bcol" if v else "Brow"
    return str(v)


CASES = [(shape, tile, stages, *TYPES[(i * 5 + j) % len(TYPES)], group)
         for i, (shape, tile, stages) in enumerate(SHAPES)
         for j, group in enumerate((1, 8))]
# every combination of types and layouts on one ragged shape of 10 x 5 blocks, grouped
CASES += [((150, 77, 97), (16, 16, 16), 3, *types, 8) for types in TYPES]


@pytest.mark.parametrize("shape,tile,stages,dt,ct,b_col_major,group", CASES, ids=_id)
def test_matmul_kernels_match_float64(shape, tile, stages, dt, ct, b_col_major, group):
    (M, N, K), (BM, BN, BK) = shape, tile
    a, b = operands(M, N, K, dt, b_col_major, seed=M * 1000 + N + K)
    grid = grid_for(M, N, BM, BN)
    c = poison((M, N), ct)
    matmul_pipelined[grid](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages, GROUP_M=group)
    check(c, a, b, BK)
    if group == 1:  # the plain kernel has no block order to vary
        c = poison((M, N), ct)
        matmul[grid](a, b, c, K, BM=BM, BN=BN, BK=BK)
        check(c, a, b, BK)


@pytest.mark.parametrize("ct", [f32, bf16], ids=_id)
@pytest.mark.parametrize("b_col_major", [False, True], ids=_id)
def test_the_block_order_never_changes_the_result(ct, b_col_major):
    """Each block's sums run in the same order whichever program computes it: the grouped
    orders, on a 2-D grid and on a 1-D one, equal launch order bit for bit."""
    M, N, K, BM, BN, BK = 97, 83, 70, 16, 16, 32
    a, b = operands(M, N, K, bf16, b_col_major, seed=7)
    grid = grid_for(M, N, BM, BN)
    results = []
    for group, g in [(1, grid), (8, grid), (8, grid[0] * grid[1]), (3, grid), (64, grid)]:
        c = poison((M, N), ct)
        matmul_pipelined[g](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=3, GROUP_M=group)
        results.append(c.view(np.uint16 if ct.itemsize == 2 else np.uint32))
    check(c, a, b, BK)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


@tk.kernel
def block_owner(C: tk.Tensor, P: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr,
                GROUP_M: tk.constexpr):
    """P[m, n] = the launch-order number of the program that computes C's block (m, n)."""
    m, n = block_of_c(C, BM, BN, GROUP_M)
    P.tile((1, 1), (m, n)).store(tk.program_id(0) + tk.program_id(1) * tk.num_programs(0))


def grouped_order(tiles_m: int, tiles_n: int, group: int) -> np.ndarray:
    """The grouped order by its definition: groups of ``group`` block rows from the top,
    each walked column by column, down each column; entry = the program's number."""
    order = np.full((tiles_m, tiles_n), -1, np.int32)
    pid = itertools.count()
    for first in range(0, tiles_m, group):
        for n in range(tiles_n):
            for m in range(first, min(first + group, tiles_m)):
                order[m, n] = next(pid)
    return order


# GROUP_M == 1 reads the block from the 2-D grid's own coordinates: no 1-D grid for it.
ORDERS = [(1, False), *itertools.product([2, 3, 8, 64], [False, True])]


@pytest.mark.parametrize("group,one_d", ORDERS,
                         ids=lambda v: ("grid1d" if v else "grid2d") if isinstance(v, bool)
                         else f"G{v}")
@pytest.mark.parametrize("blocks", [(1, 1), (1, 9), (9, 1), (10, 7), (17, 3), (8, 8)],
                         ids=_id)
def test_block_order_is_the_grouped_order(group, one_d, blocks):
    """Every block is computed by exactly one program, in the grouped order (launch order,
    axis 0 fastest, when ``GROUP_M == 1``)."""
    BM, BN = 16, 8
    tiles_m, tiles_n = blocks
    M, N = tiles_m * BM - 5 if tiles_m > 1 else 3, tiles_n * BN - 1  # ragged last blocks
    grid = grid_for(M, N, BM, BN)
    assert grid == blocks
    p = poison((tiles_m, tiles_n), np.int32)
    block_owner[grid[0] * grid[1] if one_d else grid](np.zeros((M, N), f32), p, BM=BM, BN=BN,
                                                      GROUP_M=group)
    if group == 1:
        want = np.arange(tiles_m * tiles_n, dtype=np.int32).reshape(tiles_n, tiles_m).T
    else:
        want = grouped_order(tiles_m, tiles_n, group)
    np.testing.assert_array_equal(p, want)
