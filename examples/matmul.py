"""Tiled matmul ``C = A @ B`` with tile views and a loop-carried float32 accumulator, for
any M, N, K: the edge tiles are guarded (loads past the edge read 0, stores past it are
dropped). A and B are bf16 or f16 and may be row- or column-major (a tile view takes the
array's strides at run time, so ``b.T`` of a row-major (N, K) array needs no copy); C is
bf16, f16 or f32, rounded once from the f32 accumulator. On a GPU the dot runs on tensor
cores (``mma.sync.m16n8k16``: its tiles are multiples of 16 x 8 x 16); ``TILEKIT_DUMP=layout``
shows the dot's path.

``matmul`` loads each K step's tiles into registers, and the dot stages them through
shared memory for ``ldmatrix``. ``matmul_pipelined`` streams the same tiles with
``tk.pipeline``: up to ``STAGES`` K steps are copied into shared memory ahead of the
math (cp.async), in the swizzled layout the dot's ``ldmatrix`` reads, so each stage feeds
the tensor cores directly; ``TILEKIT_DUMP=sched`` shows the stages and their layout. On
sm_90a the stages are TMA's swizzled boxes and the dot runs on ``wgmma`` (an operand whose
rows are not multiples of 16 bytes, such as K = 8092 bf16, is read from a copy with padded
rows that the runtime makes at each launch). ``WARP_ROLES=True`` gives the copies to a
producer warp and the dots to the other warps (warpgroups on sm_90a, with ``setmaxnreg``).

Both launch on the grid ``(cdiv(M, BM), cdiv(N, BN))`` (``grid_for``). With ``GROUP_M``
above 1, ``matmul_pipelined`` reorders its blocks: the programs, numbered in launch order
(axis 0 fastest), take C's blocks a group of ``GROUP_M`` block rows at a time, down each
column of the group before the next column, so programs running together share B's
columns (and A's rows) in L2. The order changes where each block is computed, never the
result; any grid of ``cdiv(M, BM) * cdiv(N, BN)`` programs, 1-D or 2-D, works with it.

``matmul_persistent`` launches a fixed number of programs, about one per SM
(``persistent_grid``), whatever the size of C: program ``p`` of ``P`` computes C's blocks
number ``p, p + P, p + 2P, ...`` in the same order (launch order, or grouped with
``GROUP_M``, ``block_at``), each with the same pipelined K loop as ``matmul_pipelined``
(``block_product``), and stores it before the next. Any program count works: fewer
programs than blocks take several each, more leave the extra ones idle.

``matmul_split_k`` is for skinny C (decode-like 16 x 8192 x 8192), whose few blocks leave
most SMs idle: its grid ``(cdiv(M, BM), cdiv(N, BN), SPLIT_K)`` gives each block
``SPLIT_K`` programs, each computing the block's product over one slice of K (whole BK
steps, ``split_k_steps`` per slice; the last slices may be short or empty, whose product
is 0) with the same pipeline, and storing it in float32 into its slice of a workspace
``(SPLIT_K, M, N)``; ``sum_slices`` then adds the slices in order and rounds once into C
(``run_split_k`` launches both). A workspace rather than ``tk.atomic_add`` into C: the
sum runs in a fixed order, so the result is the same bit for bit on every run; C may be
bf16 or f16 (an atomic sum needs a float32 C, zeroed before the launch, and would round
into a 16-bit C only in a second pass anyway); and each partial is one tile store, where
``tk.atomic_add`` takes element offsets and lowers to one atomic per element. The price
is ``2 * SPLIT_K * M * N * 4`` bytes of traffic, small beside B's ``K * N * 2`` when M is.
A slice's pipeline stops after its steps through a third stream over ``Steps``, a tensor
of ``split_k_steps`` elements whose tiles are never used: ``tk.pipeline`` runs as many
steps as its shortest stream has tiles, and a tile stream has no length of its own."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

import tilekit as tk

try:
    from _common import poisoned, relative_error, report
except ImportError:
    from examples._common import poisoned, relative_error, report


def block_at(t: tk.Tile, tiles_m: tk.Tile, tiles_n: tk.Tile,
             GROUP_M: int) -> tuple[tk.Tile, tk.Tile]:
    """The block (m, n) that comes ``t``-th (from 0) among C's ``tiles_m`` x ``tiles_n``
    blocks: in the launch order of the grid ``(tiles_m, tiles_n)`` (axis 0 fastest) when
    ``GROUP_M == 1``, else in grouped order. Either map is a bijection from
    ``0 .. tiles_m * tiles_n - 1`` onto C's blocks."""
    if GROUP_M == 1:
        return t % tiles_m, t // tiles_m
    per_group = GROUP_M * tiles_n
    first_m = t // per_group * GROUP_M
    group_rows = tk.minimum(tiles_m - first_m, GROUP_M)  # the last group may be short
    return first_m + t % per_group % group_rows, t % per_group // group_rows


def block_of_c(C: tk.Tensor, BM: int, BN: int, GROUP_M: int) -> tuple[tk.Tile, tk.Tile]:
    """This program's block (m, n) of C. ``GROUP_M == 1``: the grid's own coordinates.
    Otherwise the program's launch-order number is remapped to grouped order (``block_at``)."""
    if GROUP_M == 1:
        return tk.program_id(0), tk.program_id(1)
    pid = tk.program_id(0) + tk.program_id(1) * tk.num_programs(0)
    return block_at(pid, tk.cdiv(C.shape[0], BM), tk.cdiv(C.shape[1], BN), GROUP_M)


def block_product(A: tk.Tensor, B: tk.Tensor, m: tk.Tile, n: tk.Tile, BM: int, BN: int,
                  BK: int, STAGES: int, WARP_ROLES: bool = False) -> tk.Tile:
    """Block (m, n) of ``A @ B`` in float32: the pipelined K loop, ``STAGES`` K steps of A's
    row of tiles and B's column of tiles in flight. ``WARP_ROLES``: a producer warp issues
    the copies and the other warps (on sm_90a, whole warpgroups) only run the dots."""
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=STAGES, warp_roles=bool(WARP_ROLES) or None):
        acc = tk.dot(a, b, acc)
    return acc


@tk.kernel
def matmul(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
           BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr):
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for k in tk.range(0, tk.cdiv(K, BK)):
        a = A.tile((BM, BK), (m, k)).load()
        b = B.tile((BK, BN), (k, n)).load()
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc.to(C.dtype))


@tk.kernel
def matmul_pipelined(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
                     BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                     STAGES: tk.constexpr, GROUP_M: tk.constexpr = 1,
                     WARP_ROLES: tk.constexpr = False):
    m, n = block_of_c(C, BM, BN, GROUP_M)
    acc = block_product(A, B, m, n, BM, BN, BK, STAGES, WARP_ROLES)
    C.tile((BM, BN), (m, n)).store(acc.to(C.dtype))


@tk.kernel
def matmul_persistent(A: tk.Tensor, B: tk.Tensor, C: tk.Tensor, K,
                      BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                      STAGES: tk.constexpr, GROUP_M: tk.constexpr = 1):
    tiles_m, tiles_n = tk.cdiv(C.shape[0], BM), tk.cdiv(C.shape[1], BN)
    for t in tk.range(tk.program_id(0), tiles_m * tiles_n, tk.num_programs(0)):
        m, n = block_at(t, tiles_m, tiles_n, GROUP_M)
        acc = block_product(A, B, m, n, BM, BN, BK, STAGES)
        C.tile((BM, BN), (m, n)).store(acc.to(C.dtype))


@tk.kernel
def matmul_split_k(A: tk.Tensor, B: tk.Tensor, W: tk.Tensor, Steps: tk.Tensor,
                   BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                   STAGES: tk.constexpr):
    m, n, s = tk.program_id(0), tk.program_id(1), tk.program_id(2)
    first = s * Steps.shape[0]  # this slice's first K step
    acc = tk.zeros((BM, BN), tk.float32)
    # A's and B's streams run to K's end; Steps' (its tiles unused) stops the loop after
    # the slice's steps: the pipeline runs as many steps as its shortest stream has tiles.
    for _, a, b, _ in tk.pipeline(A.tiles((BM, BK), along=1, at=(m, first)),
                                  B.tiles((BK, BN), along=0, at=(first, n)),
                                  Steps.tiles((1,)), stages=STAGES):
        acc = tk.dot(a, b, acc)
    W.tile((1, BM, BN), (s, m, n)).store(acc.reshape(1, BM, BN))


@tk.kernel
def sum_slices(W: tk.Tensor, C: tk.Tensor, BM: tk.constexpr, BN: tk.constexpr):
    """C = W[0] + W[1] + ... in float32, in that order, rounded once into C's type."""
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((1, BM, BN), tk.float32)
    for _, w in tk.pipeline(W.tiles((1, BM, BN), along=0, at=(0, m, n)), stages=2):
        acc += w
    C.tile((BM, BN), (m, n)).store(acc.reshape(BM, BN).to(C.dtype))


def grid_for(M: int, N: int, BM: int, BN: int) -> tuple[int, int]:
    """The launch grid of ``matmul`` and ``matmul_pipelined``: one program per (BM, BN)
    block of C."""
    return tk.cdiv(M, BM), tk.cdiv(N, BN)


def persistent_grid(M: int, N: int, BM: int, BN: int, num_sms: int) -> int:
    """The program count of ``matmul_persistent``: one per SM, fewer when C has fewer
    blocks (a program without a block would only start and stop)."""
    return max(1, min(num_sms, tk.cdiv(M, BM) * tk.cdiv(N, BN)))


def split_k_steps(K: int, BK: int, SPLIT_K: int) -> int:
    """K steps per slice (the length of ``matmul_split_k``'s ``Steps``): ``cdiv(K, BK)``
    steps in ``SPLIT_K`` slices of equal length but the last ones, which may be short or
    empty (K = 5 BK in 4 slices: 2, 2, 1, 0 steps). At least 1: a tensor is never empty."""
    return max(1, tk.cdiv(tk.cdiv(K, BK), SPLIT_K))


def split_k_for(M: int, N: int, K: int, BM: int, BN: int, BK: int, num_sms: int,
                min_steps: int = 8) -> int:
    """The rule the bench uses: split K only when C's blocks leave SMs idle, into as few
    slices as fill every SM once, each slice keeping at least ``min_steps`` K steps (a
    short slice is mostly pipeline fill and a store of its partial)."""
    blocks = tk.cdiv(M, BM) * tk.cdiv(N, BN)
    if blocks >= num_sms:
        return 1
    return max(1, min(tk.cdiv(num_sms, blocks), tk.cdiv(K, BK) // min_steps))


def split_k_buffers(M: int, N: int, K: int, BK: int,
                    SPLIT_K: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy buffers for ``run_split_k``: the float32 workspace of the partial products
    (``SPLIT_K``, M, N) and ``Steps`` (only its length is read)."""
    return (np.empty((SPLIT_K, M, N), np.float32),
            np.zeros(split_k_steps(K, BK, SPLIT_K), np.int32))


def run_split_k(a: Any, b: Any, c: Any, BM: int, BN: int, BK: int, STAGES: int,
                SPLIT_K: int, workspace: Any = None, steps: Any = None,
                reduce_tile: tuple[int, int] = (32, 128)) -> None:
    """C = A @ B by ``SPLIT_K`` slices of K: ``matmul_split_k`` on the grid
    ``(cdiv(M, BM), cdiv(N, BN), SPLIT_K)`` writes each slice's partial product into
    ``workspace``, then ``sum_slices`` adds them into C. ``workspace`` and ``steps`` are
    made with numpy (``split_k_buffers``) when not given; pass device arrays of the same
    shapes and types to keep the launches on the device."""
    (M, K), N = a.shape, b.shape[1]
    if workspace is None or steps is None:
        workspace, steps = split_k_buffers(M, N, K, BK, SPLIT_K)
    assert tuple(workspace.shape) == (SPLIT_K, M, N), "workspace must be (SPLIT_K, M, N)"
    assert steps.shape[0] == split_k_steps(K, BK, SPLIT_K), "steps has the wrong length"
    matmul_split_k[(*grid_for(M, N, BM, BN), SPLIT_K)](a, b, workspace, steps, BM=BM, BN=BN,
                                                       BK=BK, STAGES=STAGES)
    RM, RN = reduce_tile
    sum_slices[grid_for(M, N, RM, RN)](workspace, c, BM=RM, BN=RN)


DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
# The relative error allowed for C of each type: one rounding of C (2^-9 for bf16, 2^-12
# for f16) in a norm-wise error; f32 sums of exact bf16 products stay near 1e-7.
TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def main(M: int = 131, N: int = 77, K: int = 200, seed: int = 0, stages: int = 3,
         group_m: int = 8, dtype: str = "bfloat16", out_dtype: str = "float32",
         b_col_major: bool = False, programs: int = 4, split_k: int = 3) -> float:
    """Every kernel on random ``dtype`` inputs, C in ``out_dtype``: the pipelined one in
    launch order and in groups of ``group_m`` block rows, the persistent one on
    ``programs`` programs (grouped), split-K in ``split_k`` slices; B column-major when
    asked."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(DTYPES[dtype])
    if b_col_major:  # the transposed view of a row-major (N, K) array: strides (1, K)
        b = rng.standard_normal((N, K)).astype(DTYPES[dtype]).T
    else:
        b = rng.standard_normal((K, N)).astype(DTYPES[dtype])
    BM, BN, BK = 64, 32, 32
    ref = a.astype(np.float64) @ b.astype(np.float64)
    grid = grid_for(M, N, BM, BN)
    tol = TOLERANCE[out_dtype]
    what = f"{dtype}{' (B column-major)' if b_col_major else ''} -> {out_dtype} {M}x{N}x{K}"
    c = poisoned((M, N), DTYPES[out_dtype])
    matmul[grid](a, b, c, K, BM=BM, BN=BN, BK=BK)
    err = report(f"matmul {what}", relative_error(c, ref), tol)
    for g in sorted({1, group_m}):
        c = poisoned((M, N), DTYPES[out_dtype])
        matmul_pipelined[grid](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages, GROUP_M=g)
        err = max(err, report(f"matmul pipelined {what}, {stages} stages, GROUP_M={g}",
                              relative_error(c, ref), tol))
    c = poisoned((M, N), DTYPES[out_dtype])
    matmul_persistent[programs](a, b, c, K, BM=BM, BN=BN, BK=BK, STAGES=stages,
                                GROUP_M=group_m)
    err = max(err, report(f"matmul persistent {what}, {programs} programs for "
                          f"{grid[0] * grid[1]} blocks, GROUP_M={group_m}",
                          relative_error(c, ref), tol))
    c = poisoned((M, N), DTYPES[out_dtype])
    run_split_k(a, b, c, BM, BN, BK, stages, split_k)
    return max(err, report(f"matmul split-K {what}, {split_k} slices of "
                           f"{split_k_steps(K, BK, split_k)} K steps",
                           relative_error(c, ref), tol))


if __name__ == "__main__":
    main()
