"""Kernels for the differential tests (``test_differential.py``), beyond the examples.

Each kernel is small and exercises one corner of the language; many are generic
over an operation named by a ``tk.constexpr`` string and dispatch through a plain
Python helper (which is itself part of what is tested: helpers called from
kernels, and Python ``if`` on constexprs). Where a kernel's result type is part
of the language's promise, it checks it with ``tk.static_assert`` against an
``EXPECT`` constexpr the test chooses. References live in the test file and never
call tilekit.
"""

# ruff: noqa: N803, N806  (kernel parameters are named like tensors and constants)

from __future__ import annotations

import tilekit as tk

# --- helpers called from kernels ---------------------------------------------------------------


def apply_binop(op, x, y):
    """``x <op> y`` for an op named by a constexpr string."""
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "div":
        return x / y
    if op == "floordiv":
        return x // y
    if op == "mod":
        return x % y
    if op == "pow":
        return x**y
    if op == "maximum":
        return tk.maximum(x, y)
    if op == "minimum":
        return tk.minimum(x, y)
    if op == "eq":
        return x == y
    if op == "ne":
        return x != y
    if op == "lt":
        return x < y
    if op == "le":
        return x <= y
    if op == "gt":
        return x > y
    if op == "ge":
        return x >= y
    if op == "and":
        return x & y
    if op == "or":
        return x | y
    if op == "xor":
        return x ^ y
    if op == "shl":
        return x << y
    if op == "shr":
        return x >> y
    raise AssertionError(f"unknown op {op}")


def apply_unary(fn, x):
    if fn == "neg":
        return -x
    if fn == "pos":
        return +x
    if fn == "invert":
        return ~x
    if fn == "abs":
        return abs(x)  # the builtin, through Tile.__abs__
    if fn == "tk_abs":
        return tk.abs(x)
    return getattr(tk, fn)(x)


def apply_reduce(kind, x, axis, keepdims):
    if kind == "sum":
        return tk.sum(x, axis=axis, keepdims=keepdims)
    if kind == "max":
        return tk.max(x, axis=axis, keepdims=keepdims)
    if kind == "min":
        return tk.min(x, axis=axis, keepdims=keepdims)
    if kind == "prod":
        return tk.prod(x, axis=axis, keepdims=keepdims)
    if kind == "argmax":
        return tk.argmax(x, axis=axis, keepdims=keepdims)
    if kind == "argmin":
        return tk.argmin(x, axis=axis, keepdims=keepdims)
    if kind == "method_sum":
        return x.sum(axis, keepdims)
    if kind == "method_max":
        return x.max(axis, keepdims)
    raise AssertionError(kind)


def block_offsets(BLOCK):
    """This program's element offsets (int32)."""
    return tk.program_id(0) * BLOCK + tk.arange(BLOCK)


def chunked_row_sum(X, row, N, BLOCK):
    """A helper with its own runtime loop and carried tile: the sum of row ``row``."""
    acc = tk.zeros((BLOCK,), tk.float32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        acc += tk.load(X, row * X.stride(0) + cols, mask=cols < N).to(tk.float32)
    return tk.sum(acc)


# --- elementwise -------------------------------------------------------------------------------


@tk.kernel
def binop(X, Y, Out, n, OP: tk.constexpr, EXPECT: tk.constexpr, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m)
    y = tk.load(Y, offs, mask=m, other=1)  # masked lanes divide by 1, not 0 (see the tests)
    r = apply_binop(OP, x, y)
    tk.static_assert(r.dtype == EXPECT, f"{OP}: {x.dtype}, {y.dtype} -> {r.dtype}")
    tk.store(Out, offs, r, mask=m)


@tk.kernel
def binop_literal(X, Out, n, OP: tk.constexpr, LIT: tk.constexpr, LEFT: tk.constexpr,
                  EXPECT: tk.constexpr, BLOCK: tk.constexpr):
    """``x <op> LIT`` (or ``LIT <op> x``) with a Python number: weakly typed."""
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m, other=1)
    r = apply_binop(OP, LIT, x) if LEFT else apply_binop(OP, x, LIT)
    tk.static_assert(r.dtype == EXPECT, f"{OP}: {x.dtype} with {LIT!r} -> {r.dtype}")
    tk.store(Out, offs, r, mask=m)


@tk.kernel
def divide_rows(X, D, Y, N: tk.constexpr):
    """Each row of ``X`` divided by its own divisor ``D[row, 0]``, which the row shares."""
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load()
    Y.tile((1, N), (row, 0)).store(x / D.tile((1, 1), (row, 0)).load())


@tk.kernel
def binop_scalar(X, Out, n, s, OP: tk.constexpr, EXPECT: tk.constexpr, BLOCK: tk.constexpr):
    """``x <op> s`` with a runtime scalar argument: strongly typed, promotes like a tile."""
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m)
    r = apply_binop(OP, x, s)
    tk.static_assert(r.dtype == EXPECT, f"{OP}: {x.dtype} with scalar {s.dtype} -> {r.dtype}")
    tk.store(Out, offs, r, mask=m)


@tk.kernel
def inplace_ops(X, Y, Out, n, OP: tk.constexpr, BLOCK: tk.constexpr):
    """In-place operators keep the left operand's type: ``acc <op>= y``."""
    offs = block_offsets(BLOCK)
    m = offs < n
    acc = tk.load(X, offs, mask=m)
    y = tk.load(Y, offs, mask=m, other=1)
    if OP == "add":
        acc += y
    elif OP == "sub":
        acc -= y
    elif OP == "mul":
        acc *= y
    elif OP == "floordiv":
        acc //= y
    elif OP == "mod":
        acc %= y
    elif OP == "and":
        acc &= y
    elif OP == "or":
        acc |= y
    elif OP == "xor":
        acc ^= y
    elif OP == "shl":
        acc <<= y
    elif OP == "shr":
        acc >>= y
    tk.store(Out, offs, acc, mask=m)


@tk.kernel
def unary(X, Out, n, FN: tk.constexpr, EXPECT: tk.constexpr, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    r = apply_unary(FN, tk.load(X, offs, mask=m))
    tk.static_assert(r.dtype == EXPECT, f"{FN} -> {r.dtype}")
    tk.store(Out, offs, r, mask=m)


@tk.kernel
def select(C, X, Y, Out, n, MODE: tk.constexpr, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    c = tk.load(C, offs, mask=m) != 0
    x = tk.load(X, offs, mask=m)
    y = tk.load(Y, offs, mask=m)
    if MODE == "tiles":
        r = tk.where(c, x, y)
    elif MODE == "scalar_b":
        r = tk.where(c, x, -1.5)
    elif MODE == "scalar_a":
        r = tk.where(c, 3, y)
    else:  # a scalar condition (the block's first element) broadcast over tiles
        r = tk.where(tk.sum(c.to(tk.int32)) > BLOCK // 2, x, y)
    tk.store(Out, offs, r, mask=m)


@tk.kernel
def fma(X, Y, Z, Out, n, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    x, y, z = (tk.load(T, offs, mask=m) for T in (X, Y, Z))
    tk.store(Out, offs, tk.fma(x, y, z), mask=m)


@tk.kernel
def fma_mixed(X, Y, Out, s, M: tk.constexpr, N: tk.constexpr, EXPECT: tk.constexpr):
    """``fma(column, row, s) + fma(row, 2.5, column)``: a (M, 1) tile, a (1, N) one, a
    runtime scalar and a Python number, broadcast and promoted to one type."""
    col = X.tile((M,), (0,)).load()[:, None]
    row = Y.tile((N,), (0,)).load()[None, :]
    r = tk.fma(col, row, s) + tk.fma(row, 2.5, col)
    tk.static_assert(r.dtype == EXPECT, f"fma: {col.dtype}, {row.dtype}, {s.dtype} -> {r.dtype}")
    Out.tile((M, N), (0, 0)).store(r)


@tk.kernel
def cast(X, Out, n, DT: tk.constexpr, VIA: tk.constexpr, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m)
    r = x.to(DT) if VIA == "method" else tk.cast(x, DT)
    tk.static_assert(r.dtype == DT)
    tk.store(Out, offs, r, mask=m)


@tk.kernel
def bitcast(X, Out, n, DT: tk.constexpr, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    tk.store(Out, offs, tk.load(X, offs, mask=m).bitcast(DT), mask=m)


@tk.kernel
def bitcast_scalar(X, Out, DT: tk.constexpr):
    """A 0-d tile reinterpreted as another type of the same width."""
    tk.store(Out, 0, tk.load(X, 0).bitcast(DT))


@tk.kernel
def store_cast(X, Out, n, BLOCK: tk.constexpr):
    """``tk.store`` converts the value to the tensor's type with the cast rules."""
    offs = block_offsets(BLOCK)
    m = offs < n
    tk.store(Out, offs, tk.load(X, offs, mask=m), mask=m)


# --- making tiles, shapes, broadcasting --------------------------------------------------------


@tk.kernel
def makers(OutF, OutI, s, N: tk.constexpr):
    """arange(lo, hi), full/zeros/ones/zeros_like/full_like, a runtime fill value."""
    i = tk.arange(N)
    j = tk.arange(-3, N - 3)
    tk.store(OutI, i, j)
    tk.store(OutI, N + i, tk.full((N,), 7, tk.int32) + tk.zeros_like(i))
    tk.store(OutI, 2 * N + i, tk.full_like(j, -2) * tk.ones((N,), tk.int32))
    tk.store(OutF, i, tk.full((N,), s, tk.float32))           # runtime scalar fill
    tk.store(OutF, N + i, tk.full((N,), 0.1, tk.float16).to(tk.float32))
    tk.store(OutF, 2 * N + i, tk.ones((N,), tk.bfloat16) / 3)
    tk.store(OutF, 3 * N + i, tk.zeros((N,)) - 0.0)


@tk.kernel
def outer(X, Y, Out, M: tk.constexpr, N: tk.constexpr):
    """Broadcasting with ``[:, None]``, ``[None, :]``, expand_dims and a trailing 1-D tile."""
    i = tk.arange(M)
    j = tk.arange(N)
    x = tk.load(X, i)
    y = tk.load(Y, j)
    v = x[:, None] * y[None, :]
    v = v + tk.expand_dims(x, 1)
    v = v - y  # (M, N) - (N,): numpy's trailing alignment
    tk.store(Out, i[:, None] * Out.stride(0) + j[None, :] * Out.stride(1), v)


@tk.kernel
def shapes3d(X, P, R, E, Bc, A: tk.constexpr, B: tk.constexpr, C: tk.constexpr):
    """permute / .T / reshape (incl. -1) / expand_dims / broadcast_to on a 3-D tile."""
    x = X.tile((A, B, C), (0, 0, 0)).load()
    P.tile((C, A, B), (0, 0, 0)).store(x.permute(2, 0, 1))
    flat = tk.reshape(x, (A * B, C))
    R.tile((C, A * B), (0, 0)).store(flat.T)
    col = tk.expand_dims(tk.sum(x, axis=1), 1)  # (A, 1, C)
    E.tile((A, B, C), (0, 0, 0)).store(x - col)
    row = x.reshape(-1)[None, :]  # (1, A*B*C)
    Bc.tile((3, A * B * C), (0, 0)).store(tk.broadcast_to(row, (3, A * B * C)))


@tk.kernel
def transpose_tiles(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((BN, BM), (j, i)).store(tk.permute(X.tile((BM, BN), (i, j)).load(), 1, 0))


# --- reductions, scans, dot --------------------------------------------------------------------


@tk.kernel
def reduce_nd(X, Out, SHAPE: tk.constexpr, KIND: tk.constexpr, AXIS: tk.constexpr,
              KEEP: tk.constexpr, EXPECT: tk.constexpr, OUT_SHAPE: tk.constexpr):
    x = X.tile(SHAPE, (0,) * len(SHAPE)).load()
    r = apply_reduce(KIND, x, AXIS, KEEP)
    tk.static_assert(r.dtype == EXPECT, f"{KIND} of {x.dtype} -> {r.dtype}")
    tk.static_assert(r.shape == OUT_SHAPE, f"{KIND} shape {r.shape} != {OUT_SHAPE}")
    if r.ndim == 0:
        tk.store(Out, 0, r)
    else:
        tk.store(Out, tk.arange(r.numel), tk.reshape(r, (r.numel,)))


@tk.kernel
def sum_as(X, Out, N: tk.constexpr, DT: tk.constexpr):
    """``tk.sum(x, dtype=...)`` converts before accumulating."""
    x = X.tile((N,), (0,)).load()
    tk.store(Out, 0, tk.sum(x, dtype=DT))


@tk.kernel
def row_reduce_grid(X, Out, N: tk.constexpr, KIND: tk.constexpr):
    """One program per row; the whole (ragged) row in one tile."""
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load()
    tk.store(Out, row, tk.reshape(apply_reduce(KIND, x, 1, False), ()))


@tk.kernel
def cumsum2d(X, Out, M: tk.constexpr, N: tk.constexpr, AXIS: tk.constexpr,
             EXPECT: tk.constexpr):
    x = X.tile((M, N), (0, 0)).load()
    r = tk.cumsum(x, axis=AXIS) if AXIS != 1 else x.cumsum(1)
    tk.static_assert(r.dtype == EXPECT)
    Out.tile((M, N), (0, 0)).store(r)


@tk.kernel
def matmul(A, B, C, K, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
           ACC: tk.constexpr, TRANS_B: tk.constexpr):
    """Tiled ``C = A @ B`` (or ``A @ B.T`` with B stored (N, K)) with guarded edge tiles."""
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), ACC)
    for k in tk.range(0, tk.cdiv(K, BK)):
        a = A.tile((BM, BK), (m, k)).load()
        if TRANS_B:
            b = B.tile((BN, BK), (n, k)).load().T
        else:
            b = B.tile((BK, BN), (k, n)).load()
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


@tk.kernel
def dot_once(A, B, C, M: tk.constexpr, N: tk.constexpr, K: tk.constexpr,
             OUT: tk.constexpr, EXPECT: tk.constexpr):
    """One ``tk.dot`` without an accumulator (default or explicit ``out_dtype``)."""
    a = A.tile((M, K), (0, 0)).load()
    b = B.tile((K, N), (0, 0)).load()
    c = tk.dot(a, b) if OUT is None else tk.dot(a, b, out_dtype=OUT)
    tk.static_assert(c.dtype == EXPECT, f"dot of {a.dtype}, {b.dtype} -> {c.dtype}")
    C.tile((M, N), (0, 0)).store(c)


# --- memory: tile views, strided views, masks, atomics -----------------------------------------


@tk.kernel
def tile_pad_1d(X, Out, B: tk.constexpr, P: tk.constexpr):
    """Each program loads tile i (ragged at the end, padded with P) and writes the whole
    padded tile to a buffer of grid * B elements."""
    i = tk.program_id(0)
    t = X.tile((B,), (i,)).load(other=P)
    tk.store(Out, i * B + tk.arange(B), t)


@tk.kernel
def tile_pad_2d(X, Out, BM: tk.constexpr, BN: tk.constexpr, P: tk.constexpr):
    i, j = tk.program_id(0), tk.program_id(1)
    Out.tile((BM, BN), (i, j)).store(X.tile((BM, BN), (i, j)).load(other=P))


@tk.kernel
def tile_pad_3d(X, Out, B0: tk.constexpr, B1: tk.constexpr, B2: tk.constexpr,
                P: tk.constexpr):
    i, j, k = tk.program_id(0), tk.program_id(1), tk.program_id(2)
    shape = (B0, B1, B2)
    Out.tile(shape, (i, j, k)).store(X.tile(shape, (i, j, k)).load(other=P))


@tk.kernel
def tile_copy_2d(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    """Tile-view copy; the ragged edge tiles of Y drop what lies past its edge."""
    i, j = tk.program_id(0), tk.program_id(1)
    Y.tile((BM, BN), (i, j)).store(X.tile((BM, BN), (i, j)).load())


@tk.kernel
def tile_copy_3d(X, Y, B0: tk.constexpr, B1: tk.constexpr, B2: tk.constexpr):
    i, j, k = tk.program_id(0), tk.program_id(1), tk.program_id(2)
    Y.tile((B0, B1, B2), (i, j, k)).store(X.tile((B0, B1, B2), (i, j, k)).load() * 2)


@tk.kernel
def strided_copy(X, Y, BM: tk.constexpr, BN: tk.constexpr):
    """Offsets from the tensors' own strides (runtime scalars, possibly negative or 0)."""
    rows = tk.program_id(0) * BM + tk.arange(BM)
    cols = tk.program_id(1) * BN + tk.arange(BN)
    m = (rows[:, None] < X.shape[0]) & (cols[None, :] < X.shape[1])
    src = rows[:, None] * X.stride(0) + cols[None, :] * X.stride(1)
    dst = rows[:, None] * Y.stride(0) + cols[None, :] * Y.stride(1)
    tk.store(Y, dst, tk.load(X, src, mask=m, other=0) + 1, mask=m)


@tk.kernel
def tensor_meta(X, Out, EXPECT: tk.constexpr):
    """``X.shape[i]``, ``X.stride(i)``, ``X.strides``, ``X.size(i)``, ``X.ndim``, ``X.dtype``."""
    tk.static_assert(X.dtype == EXPECT)
    for d in tk.static_range(X.ndim):
        tk.store(Out, d, X.shape[d].to(tk.int64))
        tk.store(Out, X.ndim + d, X.stride(d).to(tk.int64))
        tk.store(Out, 2 * X.ndim + d, (X.strides[d] - X.stride(d) + X.size(d)).to(tk.int64))


@tk.kernel
def gather(X, Idx, Out, n, OTHER: tk.constexpr, BLOCK: tk.constexpr):
    """Masked gather: invalid indices (negative or past the end) are masked off and read
    OTHER; they must not touch memory."""
    offs = block_offsets(BLOCK)
    m = offs < n
    idx = tk.load(Idx, offs, mask=m, other=-1)
    valid = m & (idx >= 0) & (idx < X.shape[0])
    if OTHER is None:
        v = tk.load(X, idx, mask=valid)
    else:
        v = tk.load(X, idx, mask=valid, other=OTHER)
    tk.store(Out, offs, v, mask=m)


@tk.kernel
def scatter(X, Idx, Out, n, BLOCK: tk.constexpr):
    """Masked scatter: only where the mask holds, including a data-dependent mask."""
    offs = block_offsets(BLOCK)
    m = offs < n
    idx = tk.load(Idx, offs, mask=m)
    x = tk.load(X, offs, mask=m)
    tk.store(Out, idx, x, mask=m & (x > 0))


@tk.kernel
def gather_2d(X, Out, R: tk.constexpr, C: tk.constexpr, OTHER: tk.constexpr):
    """2-D offsets and 2-D masks (a lower-triangular window past the tensor's edge)."""
    rows = tk.arange(R)[:, None]
    cols = tk.arange(C)[None, :]
    inside = (rows < X.shape[0]) & (cols < X.shape[1]) & (cols <= rows)
    v = tk.load(X, rows * X.stride(0) + cols * X.stride(1), mask=inside, other=OTHER)
    tk.store(Out, rows * C + cols, v)


@tk.kernel
def atomics(T, Idx, V, Old, n, KIND: tk.constexpr, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    idx = tk.load(Idx, offs, mask=m)
    v = tk.load(V, offs, mask=m)
    if KIND == "add":
        old = tk.atomic_add(T, idx, v, mask=m)
    elif KIND == "max":
        old = tk.atomic_max(T, idx, v, mask=m)
    else:
        old = tk.atomic_min(T, idx, v, mask=m)
    tk.store(Old, offs, old, mask=m)


@tk.kernel
def ticket(Counter, Tickets):
    """A scalar atomic: every program draws a distinct ticket."""
    t = tk.atomic_add(Counter, 0, 1)
    tk.store(Tickets, tk.program_id(0), t)


# --- runtime loops -----------------------------------------------------------------------------


@tk.kernel
def row_sums(X, Out, N, BLOCK: tk.constexpr):
    """A tile carried by in-place ``+=``, through a helper with its own loop too."""
    row = tk.program_id(0)
    acc = tk.zeros((BLOCK,), tk.float32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        acc += tk.load(X, row * X.stride(0) + cols, mask=cols < N).to(tk.float32)
    tk.store(Out, 2 * row, tk.sum(acc))
    tk.store(Out, 2 * row + 1, chunked_row_sum(X, row, N, BLOCK))


@tk.kernel
def horner(X, Coef, Out, n, deg, BLOCK: tk.constexpr):
    """``acc = acc * x + c`` over coefficients in reverse (a negative runtime step)."""
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m)
    acc = tk.zeros((BLOCK,), tk.float32)
    for k in tk.range(deg - 1, -1, -1):
        acc = acc * x + tk.load(Coef, k)
    tk.store(Out, offs, acc, mask=m)


@tk.kernel
def online_softmax(X, Y, N, BLOCK: tk.constexpr):
    """Several carried values: the running max and the rescaled running sum (scalars)."""
    row = tk.program_id(0)
    base = row * X.stride(0)
    mx = tk.full((), float("-inf"), tk.float32)
    total = tk.zeros((), tk.float32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        x = tk.load(X, base + cols, mask=cols < N, other=float("-inf")).to(tk.float32)
        new_mx = tk.maximum(mx, tk.max(x))
        total = total * tk.exp(mx - new_mx) + tk.sum(tk.exp(x - new_mx))
        mx = new_mx
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        x = tk.load(X, base + cols, mask=cols < N).to(tk.float32)
        tk.store(Y, row * Y.stride(0) + cols, tk.exp(x - mx) / total, mask=cols < N)


@tk.kernel
def count_and_argmax(X, Count, Best, N, thr, BLOCK: tk.constexpr):
    """Carried scalars of three types (int32 count, float max, int index)."""
    row = tk.program_id(0)
    count = tk.zeros((), tk.int32)
    best = tk.full((), float("-inf"), tk.float32)
    best_i = tk.full((), -1, tk.int32)
    for start in tk.range(0, N, BLOCK):
        cols = start + tk.arange(BLOCK)
        x = tk.load(X, row * X.stride(0) + cols, mask=cols < N, other=float("-inf"))
        count += tk.sum((x > thr).to(tk.int32))
        i = tk.argmax(x, axis=0)
        v = tk.max(x)
        best_i = tk.where(v > best, start + i, best_i)
        best = tk.maximum(best, v)
    tk.store(Count, row, count)
    tk.store(Best, row, best_i)


@tk.kernel
def nested_prefix(X, Out, n, BLOCK: tk.constexpr):
    """Nested runtime loops; the inner bound depends on the outer induction variable, and
    a value is carried by both loops."""
    total = tk.zeros((), tk.float32)
    for i in tk.range(0, n):
        inner = tk.zeros((), tk.float32)
        for j in tk.range(0, i + 1):
            inner += tk.load(X, j)
        tk.store(Out, i, inner)
        total = total + inner
    tk.store(Out, n, total)


@tk.kernel
def nested_tiles(X, Out, R, C, BR: tk.constexpr, BC: tk.constexpr):
    """A 2-D sweep with tiles carried by an inner and an outer loop."""
    grand = tk.zeros((BC,), tk.float32)
    for r0 in tk.range(0, R, BR):
        part = tk.zeros((BR, BC), tk.float32)
        for c0 in tk.range(0, C, BC):
            rows = r0 + tk.arange(BR)
            cols = c0 + tk.arange(BC)
            m = (rows[:, None] < R) & (cols[None, :] < C)
            part += tk.load(X, rows[:, None] * X.stride(0) + cols[None, :], mask=m)
        grand = grand + tk.sum(part, axis=0)
    tk.store(Out, tk.arange(BC), grand)


@tk.kernel
def trip_record(Iv, Count, Last, lo, hi, step, CAP: tk.constexpr):
    """Records the induction variable of ``tk.range(lo, hi, step)`` (runtime bounds, any
    sign of step); the carried count and last value keep their inits on zero trips."""
    k = tk.zeros((), tk.int32)
    last = tk.full((), -999, tk.int32)
    for i in tk.range(lo, hi, step):
        tk.store(Iv, k, i, mask=k < CAP)
        k += 1
        last = i
    tk.store(Count, 0, k)
    tk.store(Last, 0, last)


@tk.kernel
def loop_tile_views(X, Out, NB, BLOCK: tk.constexpr):
    """A loop over tile views with a tile index from the induction variable; the last
    tile is ragged and padded."""
    acc = tk.zeros((BLOCK,), tk.float32)
    for b in tk.range(0, NB):
        acc = acc + X.tile((BLOCK,), (b,)).load()
    Out.tile((BLOCK,), (0,)).store(acc)


# --- tk.when, static_range, constexpr if, grids, scalars ---------------------------------------


@tk.kernel
def when_blocks(X, Out, Flags, n, thr, BLOCK: tk.constexpr):
    pid = tk.program_id(0)
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m)
    s = tk.sum(x)
    flag = tk.zeros((), tk.int32)
    with tk.when(s > thr):
        x = x * 2  # rebinding
        flag += 1  # in place
    with tk.when(pid % 3 == 0):
        with tk.when(s < 0):  # nested
            x += 100
            flag = flag + 10
    with tk.when(pid == 1):
        tk.store(Flags, tk.num_programs(0), pid)  # an effect, only in program 1
    tk.store(Out, offs, x, mask=m)
    tk.store(Flags, pid, flag)


@tk.kernel
def when_in_loop(X, Out, n):
    """``tk.when`` nested in a loop, carrying a tile, a scalar and a Python-number start."""
    even = tk.zeros((), tk.float32)
    cnt = tk.zeros((), tk.int32)
    for i in tk.range(0, n):
        x = tk.load(X, i)
        with tk.when(i % 2 == 0):
            even += x
        with tk.when((i % 3 == 0) & (x > 0)):
            cnt = cnt + 1
    tk.store(Out, 0, even)
    tk.store(Out, 1, cnt.to(tk.float32))
    flag = 0
    with tk.when(n > 5):
        flag = tk.full((), 1, tk.int32)
    tk.store(Out, 2, flag.to(tk.float32))


@tk.kernel
def unrolled(X, Out, n, K: tk.constexpr, WEIGHTS: tk.constexpr, BLOCK: tk.constexpr):
    """``tk.static_range`` and a Python loop over a constexpr tuple (unrolled while tracing)."""
    offs = block_offsets(BLOCK)
    m = offs < n
    acc = tk.zeros((BLOCK,), tk.float32)
    for k in tk.static_range(K):
        acc += tk.load(X, offs * K + k, mask=m) * (k + 1)
    for w in WEIGHTS:
        acc = acc * w
    tk.store(Out, offs, acc, mask=m)


@tk.kernel
def activation(X, Out, n, ACT: tk.constexpr, ALPHA: tk.constexpr, BLOCK: tk.constexpr):
    """Python ``if`` on constexprs picks the code that is traced."""
    offs = block_offsets(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m).to(tk.float32)
    if ACT == "relu":
        y = tk.maximum(x, 0.0)
    elif ACT == "leaky":
        y = tk.where(x > 0, x, x * ALPHA)
    elif ACT == "gelu_tanh":
        y = 0.5 * x * (1 + tk.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif ACT == "silu":
        y = x * tk.sigmoid(x)
    else:
        y = x
    tk.store(Out, offs, y, mask=m)


@tk.kernel
def grid_ids(Out):
    """Each program writes its id and the grid size at Out[z, y, x, :]."""
    x, y, z = tk.program_id(0), tk.program_id(1), tk.program_id(2)
    nx, ny, nz = tk.num_programs(0), tk.num_programs(1), tk.num_programs(2)
    base = z * Out.stride(0) + y * Out.stride(1) + x * Out.stride(2)
    vals = [x, y, z, nx, ny, nz, (z * ny + y) * nx + x]
    for c in tk.static_range(len(vals)):
        tk.store(Out, base + c * Out.stride(3), vals[c])


@tk.kernel
def axpy(X, Y, Out, a, n, BLOCK: tk.constexpr):
    offs = block_offsets(BLOCK)
    m = offs < n
    tk.store(Out, offs, a * tk.load(X, offs, mask=m) + tk.load(Y, offs, mask=m), mask=m)


@tk.kernel
def scalars(OutI, OutF, a: tk.int64, b: float, c: tk.float16, d, e: tk.uint8,
            f: tk.float64, g: tk.bfloat16, h: int, EXPECT_D: tk.constexpr):
    tk.static_assert(a.dtype == tk.int64)
    tk.static_assert(b.dtype == tk.float32)
    tk.static_assert(c.dtype == tk.float16)
    tk.static_assert(d.dtype == EXPECT_D, f"d is {d.dtype}")
    tk.static_assert(e.dtype == tk.uint8)
    tk.static_assert(f.dtype == tk.float64)
    tk.static_assert(g.dtype == tk.bfloat16)
    tk.store(OutI, 0, a)
    tk.store(OutI, 1, a * 3 - 1)
    tk.store(OutI, 2, (e + e).to(tk.int64))  # uint8 arithmetic wraps
    tk.store(OutI, 3, h)
    tk.store(OutF, 0, b)
    tk.store(OutF, 1, c)
    tk.store(OutF, 2, d.to(tk.float64))
    tk.store(OutF, 3, f)
    tk.store(OutF, 4, g)
    tk.store(OutF, 5, c * 3)  # stays float16


@tk.kernel
def int64_offsets(X, Out, n, big, BLOCK: tk.constexpr):
    """Index math in int64: offsets pushed past 2**31 and back stay exact."""
    offs = block_offsets(BLOCK).to(tk.int64)
    far = offs + big  # beyond int32
    tk.static_assert(far.dtype == tk.int64)
    back = far - big
    m = back < n
    pid64 = tk.program_id(0).to(tk.int64)
    k = (pid64 * 8589934592 + 5) // 8589934592  # 2**33: wraps in int32, not in int64
    v = tk.load(X, back, mask=m)
    tk.store(Out, back, v + k.to(tk.float32), mask=m)


@tk.kernel
def int64_tile_index(X, Out, B: tk.constexpr):
    """A tile view indexed by an int64 scalar."""
    i = tk.program_id(0).to(tk.int64)
    Out.tile((B,), (i,)).store(X.tile((B,), (i,)).load() + 1)


@tk.kernel
def bool_tensors(X, Out, Count, n, BLOCK: tk.constexpr):
    """Bool tensors in and out; sum of bools counts in int32."""
    offs = block_offsets(BLOCK)
    m = offs < n
    b = tk.load(X, offs, mask=m)
    tk.static_assert(b.dtype == tk.bool_)
    tk.store(Out, offs, ~b, mask=m)
    tk.atomic_add(Count, 0, tk.sum(b & m))


# --- small real kernels ------------------------------------------------------------------------


@tk.kernel
def rms_norm(X, W, Y, N: tk.constexpr, eps):
    """f16 in and out, f32 math; one program per row, the whole ragged row in a tile."""
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load().to(tk.float32)
    w = W.tile((N,), (0,)).load().to(tk.float32)
    r = tk.rsqrt(tk.sum(x * x, axis=1, keepdims=True) / N + eps)
    Y.tile((1, N), (row, 0)).store(x * r * w[None, :])


@tk.kernel
def rope(X, Cos, Sin, Y, H: tk.constexpr):
    """Rotary embedding on (T, H) with H even: pairs split by reshape, joined by reshape."""
    t = tk.program_id(0)
    x = X.tile((1, H), (t, 0)).load().to(tk.float32)
    pairs = tk.reshape(x, (H // 2, 2))
    ev = tk.sum(tk.where(tk.arange(2)[None, :] == 0, pairs, 0.0), axis=1)
    od = tk.sum(tk.where(tk.arange(2)[None, :] == 1, pairs, 0.0), axis=1)
    c = Cos.tile((1, H // 2), (t, 0)).load().reshape(H // 2)
    s = Sin.tile((1, H // 2), (t, 0)).load().reshape(H // 2)
    out_ev = ev * c - od * s
    out_od = ev * s + od * c
    both = tk.where(tk.arange(2)[None, :] == 0, out_ev[:, None], out_od[:, None])  # (H/2, 2)
    Y.tile((1, H), (t, 0)).store(tk.reshape(both, (1, H)))


@tk.kernel
def cross_entropy(Logits, Labels, Loss, Correct, V: tk.constexpr):
    """Per row: logsumexp - logit[label] (a scalar gather), and argmax == label."""
    row = tk.program_id(0)
    x = Logits.tile((1, V), (row, 0)).load().to(tk.float32)
    mx = tk.max(x, axis=1, keepdims=True)
    lse = tk.log(tk.sum(tk.exp(x - mx), axis=1)) + tk.reshape(mx, (1,))
    label = tk.load(Labels, row)
    picked = tk.load(Logits, row * Logits.stride(0) + label).to(tk.float32)
    tk.store(Loss, row, tk.reshape(lse, ()) - picked)
    hit = tk.reshape(tk.argmax(x, axis=1), ()) == label
    tk.store(Correct, row, hit.to(tk.int32))


@tk.kernel
def col_softmax(X, Y, M: tk.constexpr, BN: tk.constexpr):
    """Softmax down the columns: reductions over axis 0 of a (M, BN) tile, ragged in N."""
    j = tk.program_id(0)
    x = X.tile((M, BN), (0, j)).load(other=float("-inf")).to(tk.float32)
    e = tk.exp(x - tk.max(x, axis=0)[None, :])
    Y.tile((M, BN), (0, j)).store(e / tk.sum(e, axis=0, keepdims=True))


@tk.kernel
def linear_act(X, W, Bias, Y, K, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
               ACT: tk.constexpr, HAS_BIAS: tk.constexpr):
    """``act(X @ W + bias)`` in bf16 with a float32 accumulator and a constexpr epilogue."""
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for k in tk.range(0, tk.cdiv(K, BK)):
        acc += tk.dot(X.tile((BM, BK), (m, k)).load(), W.tile((BK, BN), (k, n)).load())
    if HAS_BIAS:
        acc = acc + Bias.tile((BN,), (n,)).load().to(tk.float32)[None, :]
    if ACT == "relu":
        acc = tk.maximum(acc, 0.0)
    Y.tile((BM, BN), (m, n)).store(acc)


# --- more control flow: swaps, lists, helpers that update in place, loops in `when` ------------


def bump(t, by):
    """A helper that updates its argument in place (the caller's tile changes)."""
    t += by


@tk.kernel
def fibonacci(Out, n):
    """Two carried scalars rotated by tuple assignment: ``a, b = b, a + b``."""
    a = tk.zeros((), tk.int64)
    b = tk.ones((), tk.int64)
    for i in tk.range(n):
        tk.store(Out, i, a)
        a, b = b, a + b
    tk.store(Out, n, a)


@tk.kernel
def carried_containers(X, Out, n, BLOCK: tk.constexpr):
    """Tiles carried inside a list and a dict, and through a helper's in-place update."""
    offs = tk.arange(BLOCK)
    accs = [tk.zeros((BLOCK,), tk.float32), tk.zeros((BLOCK,), tk.float32)]
    state = {"count": tk.zeros((), tk.int32)}
    hits = tk.zeros((BLOCK,), tk.int32)
    for i in tk.range(0, n):
        x = tk.load(X, i * BLOCK + offs)
        accs[0] += x
        accs[1] = tk.maximum(accs[1], x)
        state["count"] = state["count"] + 1
        bump(hits, (x > 0).to(tk.int32))
    tk.store(Out, offs, accs[0])
    tk.store(Out, BLOCK + offs, accs[1])
    tk.store(Out, 2 * BLOCK + offs, hits.to(tk.float32))
    tk.store(Out, 3 * BLOCK, state["count"].to(tk.float32))


@tk.kernel
def loop_in_when(X, Out, n, flag):
    """A runtime loop inside a `tk.when`, carrying a value out of both; and a `when`
    over the loop's induction variable inside a nested loop."""
    total = tk.zeros((), tk.float32)
    with tk.when(flag != 0):
        for i in tk.range(n):
            total += tk.load(X, i)
    diag = tk.zeros((), tk.float32)
    for i in tk.range(n):
        for j in tk.range(n):
            with tk.when(i == j):
                diag += tk.load(X, i) * (j + 1).to(tk.float32)
    tk.store(Out, 0, total)
    tk.store(Out, 1, diag)


@tk.kernel
def carried_index(X, Out, n, B: tk.constexpr):
    """A carried int scalar used as a tile index inside the loop (walks tiles backwards)."""
    k = tk.program_id(0) * 0 + (n - 1)
    acc = tk.zeros((B,), X.dtype)
    for _ in tk.range(n):
        acc = acc * 2 + X.tile((B,), (k,)).load()
        k -= 1
    Out.tile((B,), (0,)).store(acc)


@tk.kernel
def when_complementary(X, Out, n, thr, BLOCK: tk.constexpr):
    """if/else with two complementary `tk.when`s, the second reading the first's result."""
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m)
    s = tk.sum(x)
    big = s > thr
    y = x
    with tk.when(big):
        y = x - s
    with tk.when(~big):
        y = y + s
    tk.store(Out, offs, y, mask=m)


@tk.kernel
def index_forms(X, Out, A: tk.constexpr, B: tk.constexpr):
    """``x[None, :, None]``, ``x[..., None]``, negative axes in expand_dims / permute."""
    x = X.tile((A, B), (0, 0)).load()
    a = x[None, :, :]                     # (1, A, B)
    b = x[..., None]                      # (A, B, 1)
    c = tk.expand_dims(x, -1)             # (A, B, 1)
    d = x.permute(-1, 0)                  # (B, A)
    v = tk.arange(B)[None, :, None]       # (1, B, 1)
    tk.static_assert(a.shape == (1, A, B) and b.shape == (A, B, 1) and c.shape == (A, B, 1))
    tk.static_assert(d.shape == (B, A) and v.shape == (1, B, 1))
    r = (b + c) * 2 + v.to(X.dtype)       # (A, B, 1)
    Out.tile((A, B), (0, 0)).store(tk.reshape(r, (A, B)) + d.T + tk.reshape(a, (A, B)))


@tk.kernel
def misc_values(Xi, Xf, OutI, OutF, OutB, N: tk.constexpr):
    """Odds and ends: int ** int is float32; bool where; sum/max of a 0-d tile; broadcast_to
    of a scalar; abs(-0.0); dot with an explicit float16 accumulator."""
    i = tk.arange(N)
    xi = tk.load(Xi, i)
    xf = tk.load(Xf, i)
    p = xi ** 2
    tk.static_assert(p.dtype == tk.float32)
    tk.store(OutF, i, p)
    s = tk.sum(xi)
    tk.store(OutI, 0, tk.sum(s) + tk.max(s, axis=None))  # reductions of a 0-d tile: itself
    tk.store(OutI, 1 + i, tk.broadcast_to(s, (N,)))
    tk.store(OutF, N + i, tk.abs(xf))
    bw = tk.where(xi > 0, xi > 5, xi < -5)
    tk.static_assert(bw.dtype == tk.bool_)
    tk.store(OutB, i, bw)
    a = tk.reshape(xf, (1, N)).to(tk.float16)
    acc = tk.full((1, 1), 0.5, tk.float16)
    r = tk.dot(a, tk.reshape(a, (N, 1)), acc)
    tk.static_assert(r.dtype == tk.float16)
    tk.store(OutF, 2 * N, tk.reshape(r, ()))


@tk.kernel
def atomic_bf16(T, Idx, V, n, BLOCK: tk.constexpr):
    offs = tk.arange(BLOCK)
    m = offs < n
    tk.atomic_add(T, tk.load(Idx, offs, mask=m), tk.load(V, offs, mask=m), mask=m)


@tk.kernel
def put_scalar(Out, s):
    tk.store(Out, 0, s)


@tk.kernel
def put_u8(Out, s: tk.uint8):
    tk.store(Out, 0, s)


@tk.kernel
def put_u64(Out, s: tk.uint64):
    tk.store(Out, 0, s)


@tk.kernel
def tile_outside(X, Out, B: tk.constexpr, AT: tk.constexpr):
    """A tile view entirely outside the tensor: loads read the padding, stores do nothing."""
    t = X.tile((B,), (AT,)).load(other=7)
    X.tile((B,), (AT,)).store(t * 0 + 100)
    tk.store(Out, tk.arange(B), t)


@tk.kernel
def atomic_guarded(T, Idx, V, Old, BLOCK: tk.constexpr):
    """Atomics whose masked-off lanes hold invalid offsets: they must not touch memory."""
    offs = tk.arange(BLOCK)
    idx = tk.load(Idx, offs)
    m = (idx >= 0) & (idx < T.shape[0])
    tk.store(Old, offs, tk.atomic_max(T, idx, tk.load(V, offs), mask=m), mask=m)


@tk.kernel
def trip_record64(Iv, Out, lo, hi, step, CAP: tk.constexpr):
    """Loop bounds that need int64 (the induction variable is int64)."""
    k = tk.zeros((), tk.int32)
    last = tk.full((), -999, tk.int64)
    for i in tk.range(lo, hi, step):
        tk.store(Iv, k, i, mask=k < CAP)
        k += 1
        last = i.to(tk.int64)
    tk.store(Out, 0, k.to(tk.int64))
    tk.store(Out, 1, last)


@tk.kernel
def load_other_values(X, Out, n, fill, BLOCK: tk.constexpr):
    """``other=`` given as a runtime scalar and as a per-lane tile."""
    offs = tk.arange(BLOCK)
    m = offs < n
    a = tk.load(X, offs, mask=m, other=fill)
    b = tk.load(X, offs, mask=m, other=offs.to(tk.float32) * -1.0)
    tk.store(Out, offs, a)
    tk.store(Out, BLOCK + offs, b)


@tk.kernel
def tensor_extent(X, Out):
    tk.store(Out, 0, X.shape[0].to(tk.int64))
    tk.store(Out, 1, X.shape[X.ndim - 1].to(tk.int64))
    tk.store(Out, 2, X.stride(0).to(tk.int64))
