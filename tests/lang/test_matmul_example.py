"""``examples/matmul.py`` beyond its ``main()``: any M, N, K, B row- or column-major,
bf16/f16 in, bf16/f16/f32 out, the grouped block order of ``matmul_pipelined``, the
persistent kernel on any program count and split-K on any number of slices.

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

from matmul import (  # noqa: E402
    block_at,
    block_of_c,
    grid_for,
    matmul,
    matmul_persistent,
    matmul_pipelined,
    matmul_split_k,
    persistent_grid,
    run_split_k,
    split_k_for,
    split_k_steps,
)

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


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray, BK: int, slices: int = 1) -> None:
    """Per element: f32 accumulation of exact 16-bit products within ``acc`` of the float64
    result, then one rounding into C's type (relative ``u``; plus f16's subnormal step).
    Split-K's sum of ``slices`` partials counts as one more 16-deep step per slice."""
    ref = a.astype(np.float64) @ b.astype(np.float64)
    acc = accumulation_bound(a, b, tk.cdiv(a.shape[1], BK) * BK + 16 * (slices - 1))
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


# --- the persistent kernel ---------------------------------------------------------------------

# (M, N, K), (BM, BN, BK), STAGES, GROUP_M: one element; ragged (primes, K not a multiple
# of 8); one block row of M = 16; M = 128 in 4 block rows, grouped; K = 0 (C = 0).
PERSISTENT_SHAPES = [
    ((1, 1, 1), (16, 16, 16), 3, 1),
    ((7, 31, 97), (16, 16, 32), 3, 8),
    ((16, 77, 45), (16, 16, 16), 2, 1),
    ((128, 33, 61), (32, 16, 16), 4, 2),
    ((53, 40, 0), (16, 16, 16), 2, 3),
]


def program_counts(blocks: int) -> list[int]:
    """One program for every block, fewer programs than blocks, one each, and more."""
    return sorted({1, max(1, blocks // 3), blocks, blocks + 3})


PERSISTENT_CASES = [
    (shape, tile, stages, group, programs, *TYPES[(i * 5 + j) % len(TYPES)])
    for i, (shape, tile, stages, group) in enumerate(PERSISTENT_SHAPES)
    for j, programs in enumerate(program_counts(
        tk.cdiv(shape[0], tile[0]) * tk.cdiv(shape[1], tile[1])))]


@pytest.mark.parametrize("shape,tile,stages,group,programs,dt,ct,b_col_major",
                         PERSISTENT_CASES, ids=_id)
def test_persistent_kernel_matches_float64(shape, tile, stages, group, programs, dt, ct,
                                           b_col_major):
    (M, N, K), (BM, BN, BK) = shape, tile
    a, b = operands(M, N, K, dt, b_col_major, seed=M * 1000 + N + K + programs)
    c = poison((M, N), ct)
    matmul_persistent[programs](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages,
                                GROUP_M=group)
    check(c, a, b, BK)


@pytest.mark.parametrize("group", [1, 3], ids=lambda g: f"G{g}")
def test_persistent_kernel_equals_the_pipelined_one(group):
    """A block's sums run in the same order whichever program computes it and whatever it
    computed before: bit for bit ``matmul_pipelined``'s C, on one program, some, one per
    block and more."""
    M, N, K, BM, BN, BK = 97, 83, 70, 16, 16, 32  # 7 x 6 blocks
    a, b = operands(M, N, K, bf16, True, seed=11)
    want = poison((M, N), f32)
    matmul_pipelined[grid_for(M, N, BM, BN)](a, b, want, K, BM=BM, BN=BN, BK=BK, STAGES=3,
                                             GROUP_M=group)
    check(want, a, b, BK)
    for programs in (1, 5, 50):
        c = poison((M, N), f32)
        matmul_persistent[programs](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=3, GROUP_M=group)
        np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32))


@tk.kernel
def persistent_owner(C: tk.Tensor, P: tk.Tensor, T: tk.Tensor, BM: tk.constexpr,
                     BN: tk.constexpr, GROUP_M: tk.constexpr):
    """``matmul_persistent``'s loop over C's blocks, storing for block (m, n) the program
    that takes it (P) and its number in the order (T)."""
    tiles_m, tiles_n = tk.cdiv(C.shape[0], BM), tk.cdiv(C.shape[1], BN)
    for t in tk.range(tk.program_id(0), tiles_m * tiles_n, tk.num_programs(0)):
        m, n = block_at(t, tiles_m, tiles_n, GROUP_M)
        P.tile((1, 1), (m, n)).store(tk.program_id(0))
        T.tile((1, 1), (m, n)).store(t)


@pytest.mark.parametrize("group", [1, 2, 3, 8], ids=lambda g: f"G{g}")
@pytest.mark.parametrize("blocks", [(1, 1), (1, 9), (9, 1), (10, 7)], ids=_id)
def test_persistent_programs_take_every_block_once_in_order(group, blocks):
    """Block number t (launch order when ``GROUP_M == 1``, else grouped) is computed by
    program ``t % programs``, once: the order numbers are a permutation of the blocks."""
    BM, BN = 16, 8
    tiles_m, tiles_n = blocks
    M, N = tiles_m * BM - 5 if tiles_m > 1 else 3, tiles_n * BN - 1
    if group == 1:
        want = np.arange(tiles_m * tiles_n, dtype=np.int32).reshape(tiles_n, tiles_m).T
    else:
        want = grouped_order(tiles_m, tiles_n, group)
    for programs in program_counts(tiles_m * tiles_n):
        p, t = poison((tiles_m, tiles_n), np.int32), poison((tiles_m, tiles_n), np.int32)
        persistent_owner[programs](np.zeros((M, N), f32), p, t, BM=BM, BN=BN, GROUP_M=group)
        np.testing.assert_array_equal(t, want)
        np.testing.assert_array_equal(p, want % programs)


def test_persistent_grid_is_one_program_per_sm_at_most_one_per_block():
    assert persistent_grid(8192, 8192, 128, 128, 132) == 132
    assert persistent_grid(100, 100, 64, 64, 132) == 4
    assert persistent_grid(1, 1, 16, 16, 132) == 1


# --- split-K -----------------------------------------------------------------------------------

# (M, N, K), (BM, BN, BK), STAGES: M in 1, 16 and 128 (decode-like, few blocks); odd and
# prime N; K of one element, not a multiple of 8, and 0 (every slice empty: C = 0).
SPLIT_SHAPES = [
    ((1, 1, 1), (16, 16, 16), 3),
    ((1, 37, 97), (16, 16, 16), 3),
    ((16, 77, 203), (16, 32, 16), 2),
    ((128, 31, 61), (32, 16, 16), 4),
    ((13, 5, 0), (16, 16, 16), 2),
]


def slice_counts(k_steps: int) -> list[int]:
    """1 (no split), 2, 3 and 7 slices, and two more than the K steps (empty slices)."""
    return sorted({1, 2, 3, 7, k_steps + 2})


SPLIT_CASES = [
    (shape, tile, stages, split, *TYPES[(i * 5 + j) % len(TYPES)])
    for i, (shape, tile, stages) in enumerate(SPLIT_SHAPES)
    for j, split in enumerate(slice_counts(tk.cdiv(shape[2], tile[2])))]


@pytest.mark.parametrize("shape,tile,stages,split,dt,ct,b_col_major", SPLIT_CASES, ids=_id)
def test_split_k_matches_float64(shape, tile, stages, split, dt, ct, b_col_major):
    """The workspace starts poisoned too: a partial never written makes C NaN."""
    (M, N, K), (BM, BN, BK) = shape, tile
    a, b = operands(M, N, K, dt, b_col_major, seed=M * 1000 + N + K + split)
    c = poison((M, N), ct)
    workspace = poison((split, M, N), f32)
    steps = np.zeros(split_k_steps(K, BK, split), np.int32)
    run_split_k(a, b, c, BM, BN, BK, stages, split, workspace, steps, reduce_tile=(8, 16))
    check(c, a, b, BK, slices=split)


@pytest.mark.parametrize("K,split", [(61, 3), (97, 9), (40, 2), (1, 4), (0, 2)], ids=_id)
def test_each_slice_holds_its_part_of_k(K, split):
    """Workspace slice s is ``A[:, ks] @ B[ks, :]`` for its ``split_k_steps`` whole BK
    steps ``ks``; the last slices are short, or empty and 0."""
    M, N, BM, BN, BK = 19, 23, 16, 16, 16
    a, b = operands(M, N, K, bf16, False, seed=K + split)
    per = split_k_steps(K, BK, split)
    w = poison((split, M, N), f32)
    matmul_split_k[(*grid_for(M, N, BM, BN), split)](a, b, w, np.zeros(per, np.int32), BM=BM,
                                                     BN=BN, BK=BK, STAGES=2)
    for s in range(split):
        lo, hi = min(K, s * per * BK), min(K, (s + 1) * per * BK)
        check(w[s], a[:, lo:hi], b[lo:hi], BK)


@pytest.mark.parametrize("ct", [f32, bf16], ids=_id)
def test_one_slice_equals_the_pipelined_kernel(ct):
    """SPLIT_K = 1 adds nothing but a sum of one slice: 0 + partial, exact, rounded once."""
    M, N, K, BM, BN, BK = 16, 45, 77, 16, 16, 32
    a, b = operands(M, N, K, bf16, False, seed=3)
    want = poison((M, N), ct)
    matmul_pipelined[grid_for(M, N, BM, BN)](a, b, want, K, BM=BM, BN=BN, BK=BK, STAGES=3)
    c = poison((M, N), ct)
    run_split_k(a, b, c, BM, BN, BK, 3, 1)
    np.testing.assert_array_equal(c.astype(np.float64), want.astype(np.float64))


def test_slices_cover_every_k_step_once():
    for K, BK, split in itertools.product(range(0, 300, 7), (16, 32), range(1, 12)):
        k_steps, per = tk.cdiv(K, BK), split_k_steps(K, BK, split)
        sizes = [max(0, min(k_steps, (s + 1) * per) - s * per) for s in range(split)]
        assert sum(sizes) == k_steps and per >= 1
        assert sizes == sorted(sizes, reverse=True)  # full slices, then short, then empty


def test_split_k_rule():
    """Split only when the blocks leave SMs idle; enough slices to fill them; at least 8
    K steps per slice."""
    assert split_k_for(8192, 8192, 8192, 128, 128, 64, 132) == 1
    assert split_k_for(16, 8192, 8192, 16, 128, 64, 132) == 3  # 64 blocks
    assert split_k_for(16, 8192, 8192, 16, 256, 64, 132) == 5  # 32 blocks
    assert split_k_for(128, 8192, 8192, 64, 128, 64, 132) == 2  # 128 blocks
    assert split_k_for(16, 8192, 256, 16, 128, 64, 132) == 1  # 4 K steps: no split
    assert split_k_for(16, 1024, 1024, 16, 128, 64, 132) == 2  # 16 steps: 8 each


# --- on the device: its SM count, the bench's tiles --------------------------------------------

@pytest.mark.parametrize("shape,tile,stages", [
    ((16, 1000, 2047), (16, 128, 64), 3),
    ((128, 777, 1500), (64, 128, 64), 3),
    ((300, 500, 1003), (64, 64, 32), 4),
], ids=_id)
def test_device_sized_persistent_and_split_k(backend, shape, tile, stages):
    """Bench-like tiles, one persistent program per SM (and half as many), split-K by the
    bench's rule for the device's SM count (and 4 slices). Too slow for the interpreter."""
    if backend == "interp":
        pytest.skip("bench-sized tiles: the GPU leg only")
    from tilekit.rt import driver

    sms = driver.device_props(0).sm_count
    (M, N, K), (BM, BN, BK) = shape, tile
    a, b = operands(M, N, K, bf16, False, seed=M + N + K)
    for programs in (persistent_grid(M, N, BM, BN, sms), max(1, sms // 2)):
        c = poison((M, N), f32)
        matmul_persistent[programs](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages, GROUP_M=8)
        check(c, a, b, BK)
    for split in sorted({split_k_for(M, N, K, BM, BN, BK, sms), 4}):
        c = poison((M, N), bf16)
        run_split_k(a, b, c, BM, BN, BK, stages, split)
        check(c, a, b, BK, slices=split)
