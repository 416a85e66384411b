"""``tk.pipeline`` over ``X.tiles(...)`` streams: what it computes, the IR it traces to,
and the errors it gives.

Kernels run on both backends (the GPU leg is skipped without a device) against numpy
references. Float inputs hold small integers, so every sum and dot here is exact in
float32 and results compare exactly: a tile read twice, skipped, shifted or padded with
the wrong value shows as a wrong number, not as noise within a tolerance. Outputs start
poisoned, so an element never written is caught too.

Error cases mark the line they must name with a trailing ``# <-- tag`` comment.
"""

# Kernels here compute values they never use, on purpose (the error comes first).
# ruff: noqa: N803, N806, F841, B007

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilekit as tk
from tilekit.errors import TilekitError, TraceError
from tilekit.ir import print_module
from tilekit.ir.dtypes import DType
from tilekit.ir.ops.asynchronous import StreamSpec
from tilekit.ir.types import TileType

from .helpers import poison

RUN = pytest.mark.usefixtures("backend")

bf16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), bf16, np.dtype(np.int32)]
_ACC = {np.dtype(np.float32): tk.float32, bf16: tk.float32, np.dtype(np.int32): tk.int32}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def ints(shape, dtype, seed: int, lo: int = -8, hi: int = 8) -> np.ndarray:
    """Small random integers of ``dtype`` (exact in bfloat16, and their sums in float32)."""
    rng = np.random.default_rng(seed)
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)


def padded(x: np.ndarray, shape, value=0) -> np.ndarray:
    """``x`` in the top-left corner of an array of ``shape`` filled with ``value``: the
    elements a tile past the edge reads."""
    out = np.full(shape, value, dtype=np.float64)
    out[tuple(slice(0, n) for n in x.shape)] = x.astype(np.float64)
    return out


def assert_equal(out: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    np.testing.assert_array_equal(out.astype(np.float64), np.asarray(ref, np.float64), what)


# --- kernels ---------------------------------------------------------------------------------


@tk.kernel
def row_sums(X, Y, BM: tk.constexpr, BN: tk.constexpr, STAGES: tk.constexpr,
             ACC: tk.constexpr):
    m = tk.program_id(0)
    acc = tk.zeros((BM, BN), ACC)
    for _, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=STAGES):
        acc += x.to(ACC)
    Y.tile((BM,), (m,)).store(tk.sum(acc, axis=1))


@tk.kernel
def copy_rows(X, Y, BM: tk.constexpr, BN: tk.constexpr, STAGES: tk.constexpr):
    m = tk.program_id(0)
    for j, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=STAGES):
        Y.tile((BM, BN), (m, j)).store(x)


@tk.kernel
def copy_cols(X, Y, BM: tk.constexpr, BN: tk.constexpr, STAGES: tk.constexpr):
    n = tk.program_id(0)
    for i, x in tk.pipeline(X.tiles((BM, BN), col=n), stages=STAGES):
        Y.tile((BM, BN), (i, n)).store(x)


@tk.kernel
def matmul_dot(A, B, C, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
               STAGES: tk.constexpr):
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=STAGES):
        acc = tk.dot(a, b, acc)
    C.tile((BM, BN), (m, n)).store(acc)


@tk.kernel
def matmul_reduce(A, B, C, BM: tk.constexpr, BN: tk.constexpr, BK: tk.constexpr,
                  STAGES: tk.constexpr):
    """The same product with elementwise ops and a reduction (no tk.dot)."""
    m, n = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BM, BN), tk.float32)
    for _, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n),
                               stages=STAGES):
        acc += tk.sum(a.to(tk.float32)[:, :, None] * b.to(tk.float32)[None, :, :], axis=1)
    C.tile((BM, BN), (m, n)).store(acc)


@tk.kernel
def steps(X, Out, first, BN: tk.constexpr, STAGES: tk.constexpr):
    """How many steps a stream starting at tile ``first`` of each row takes, the last
    step index, and the sum of what it read."""
    r = tk.program_id(0)
    count = tk.zeros((), tk.int32)
    last = tk.full((), -1, tk.int32)
    total = tk.zeros((), tk.float32)
    for i, x in tk.pipeline(X.tiles((1, BN), along=1, at=(r, first)), stages=STAGES):
        count += 1
        last = i
        total += tk.sum(x.to(tk.float32))
    Out.tile((1, 3), (r, 0)).store(tk.where(tk.arange(3) == 0, count.to(tk.float32),
                                            tk.where(tk.arange(3) == 1, last.to(tk.float32),
                                                     total))[None, :])


@tk.kernel
def two_lengths(A, B, Out, BA: tk.constexpr, BB: tk.constexpr, STAGES: tk.constexpr):
    """Streams of different lengths stop at the shortest; tile i of each is what it reads."""
    r = tk.program_id(0)
    count = tk.zeros((), tk.int32)
    check = tk.zeros((), tk.float32)
    for i, a, b in tk.pipeline(A.tiles((1, BA), row=r), B.tiles((1, BB), row=r),
                               stages=STAGES):
        count += 1
        w = (i + 1).to(tk.float32)  # weigh each step, so that a shifted stream shows
        check += w * (tk.sum(a.to(tk.float32)) + 1000.0 * tk.sum(b.to(tk.float32)))
    Out.tile((1, 2), (r, 0)).store(tk.where(tk.arange(2) == 0, count.to(tk.float32),
                                            check)[None, :])


@tk.kernel
def slab_sums(X, Y, q0, BP: tk.constexpr, BQ: tk.constexpr, BR: tk.constexpr,
              STAGES: tk.constexpr):
    """A rank-3 stream along the middle axis, starting at runtime tile ``q0``."""
    p, r = tk.program_id(0), tk.program_id(1)
    acc = tk.zeros((BP, BQ, BR), tk.float32)
    for _, x in tk.pipeline(X.tiles((BP, BQ, BR), along=1, at=(p, q0, r)), stages=STAGES):
        acc += x.to(tk.float32)
    Y.tile((BP, 1, BR), (p, 0, r)).store(tk.sum(acc, axis=1, keepdims=True))


@tk.kernel
def vector_sum(X, Y, B: tk.constexpr, STAGES: tk.constexpr):
    acc = tk.zeros((B,), tk.float32)
    for _, x in tk.pipeline(X.tiles((B,)), stages=STAGES):
        acc += x.to(tk.float32)
    Y.tile((1,), (0,)).store(tk.sum(acc, axis=0, keepdims=True))


@tk.kernel
def pad_copy(X, Y, BN: tk.constexpr, PAD: tk.constexpr, STAGES: tk.constexpr):
    """Copies whole tiles into a wider Y, so the padding read past X's edge shows."""
    r = tk.program_id(0)
    for j, x in tk.pipeline(X.tiles((1, BN), row=r, padding=PAD), stages=STAGES):
        Y.tile((1, BN), (r, j)).store(x)


@tk.kernel
def nested(X, Y, R: tk.constexpr, BN: tk.constexpr, REPEAT: tk.constexpr):
    """A pipeline inside tk.range, with tk.when and tk.range inside its body: even tiles
    count REPEAT times, odd tiles not at all."""
    p = tk.program_id(0)
    for k in tk.range(0, R):
        row = p * R + k
        acc = tk.zeros((1, BN), tk.float32)
        for i, x in tk.pipeline(X.tiles((1, BN), row=row), stages=2):
            with tk.when(i % 2 == 0):
                for _ in tk.range(0, REPEAT):
                    acc += x
        Y.tile((1,), (row,)).store(tk.sum(acc, axis=1))


# --- what pipelines compute ------------------------------------------------------------------


@RUN
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("rows,cols,bm,bn,stages", [
    (1, 1, 1, 16, 2),        # one tile, mostly padding
    (7, 97, 3, 32, 3),       # 4 tiles: stages + 1; rows not a multiple of bm
    (13, 300, 4, 100, 3),    # 3 tiles exactly: stages
    (5, 257, 5, 64, 6),      # 5 tiles (last one 1 wide): stages - 1
    (31, 1000, 2, 37, 4),    # 28 tiles of a prime width
    (2, 4097, 1, 1000, 1),   # one stage
])
def test_row_sums(rows, cols, bm, bn, stages, dtype):
    x = ints((rows, cols), dtype, rows * cols)
    y = poison((rows,), _ACC[dtype].np)
    row_sums[cdiv(rows, bm)](x, y, BM=bm, BN=bn, STAGES=stages, ACC=_ACC[dtype])
    assert_equal(y, x.astype(np.float64).sum(axis=1))


@RUN
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("rows,cols,bm,bn,stages", [
    (1, 1, 4, 16, 2), (97, 31, 16, 8, 3), (7, 257, 5, 64, 5), (31, 37, 31, 37, 1),
    (10, 1001, 3, 7, 4),
])
def test_copy_rows_and_columns(rows, cols, bm, bn, stages, dtype):
    x = ints((rows, cols), dtype, cols, lo=-100, hi=100)
    y = poison((rows, cols), dtype)
    copy_rows[cdiv(rows, bm)](x, y, BM=bm, BN=bn, STAGES=stages)
    assert_equal(y, x, "row streams")
    y = poison((rows, cols), dtype)
    copy_cols[cdiv(cols, bn)](x, y, BM=bm, BN=bn, STAGES=stages)
    assert_equal(y, x, "column streams")


@RUN
@pytest.mark.parametrize("kernel", [matmul_dot, matmul_reduce], ids=["dot", "reduce"])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), bf16], ids=lambda d: d.name)
@pytest.mark.parametrize("M,N,K,bm,bn,bk,stages", [
    (1, 1, 1, 16, 16, 16, 2), (7, 31, 97, 4, 8, 16, 3), (33, 17, 45, 16, 8, 15, 3),
    (16, 16, 64, 8, 8, 16, 4), (9, 5, 200, 3, 5, 7, 2),
])
def test_matmul_from_two_streams(kernel, M, N, K, bm, bn, bk, stages, dtype):
    a = ints((M, K), dtype, M * K, lo=-4, hi=4)
    b = ints((K, N), dtype, K + N, lo=-4, hi=4)
    c = poison((M, N), np.float32)
    kernel[cdiv(M, bm), cdiv(N, bn)](a, b, c, BM=bm, BN=bn, BK=bk, STAGES=stages)
    assert_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def _steps_reference(x: np.ndarray, first: int, bn: int) -> np.ndarray:
    rows, cols = x.shape
    n = max(0, cdiv(cols, bn) - first)
    wide = padded(x, (rows, max(cols, (first + n) * bn)))
    total = wide[:, first * bn:(first + n) * bn].sum(axis=1) if n else np.zeros(rows)
    return np.stack([np.full(rows, n), np.full(rows, n - 1), total], axis=1)


@RUN
@pytest.mark.parametrize("cols,bn,first,stages", [
    (0, 4, 0, 2),      # an empty row: no step
    (10, 4, 3, 2),     # first tile past the end: no step
    (10, 4, 7, 3),     # far past it: still none (not negative)
    (3, 4, 0, 2),      # 1 step
    (8, 4, 0, 3),      # stages - 1
    (9, 4, 0, 3),      # stages
    (13, 4, 0, 3),     # stages + 1
    (1000, 7, 0, 4),   # many
    (1000, 7, 100, 4),  # many, from tile 100
    (17, 5, 3, 1),     # the ragged last tile only
])
def test_trip_counts(cols, bn, first, stages):
    x = ints((3, cols), np.float32, cols + first)
    out = poison((3, 3), np.float32)
    steps[3](x, out, first, BN=bn, STAGES=stages)
    assert_equal(out, _steps_reference(x, first, bn))


@RUN
@settings(max_examples=40)
@given(cols=st.integers(0, 300), bn=st.integers(1, 40), first=st.integers(0, 12),
       stages=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_trip_counts_property(cols, bn, first, stages, seed):
    x = ints((2, cols), np.float32, seed)
    out = poison((2, 3), np.float32)
    steps[2](x, out, first, BN=bn, STAGES=stages)
    assert_equal(out, _steps_reference(x, first, bn))


@RUN
@pytest.mark.parametrize("ca,ba,cb,bb", [(100, 10, 100, 25), (37, 4, 1000, 3), (5, 8, 0, 8),
                                         (64, 16, 63, 16), (1, 1, 7, 2)])
def test_streams_of_different_lengths_stop_at_the_shortest(ca, ba, cb, bb):
    a = ints((3, ca), np.float32, ca)
    b = ints((3, cb), np.float32, cb + 1)
    out = poison((3, 2), np.float32)
    two_lengths[3](a, b, out, BA=ba, BB=bb, STAGES=3)
    n = min(cdiv(ca, ba), cdiv(cb, bb))
    pa = padded(a, (3, max(ca, n * ba)))
    pb = padded(b, (3, max(cb, n * bb)))
    check = sum((i + 1) * (pa[:, i * ba:(i + 1) * ba].sum(1)
                           + 1000.0 * pb[:, i * bb:(i + 1) * bb].sum(1)) for i in range(n))
    assert_equal(out, np.stack([np.full(3, n), np.zeros(3) + check], axis=1))


@RUN
@pytest.mark.parametrize("shape,tile,q0", [((5, 23, 7), (2, 4, 3), 0), ((5, 23, 7), (2, 4, 3), 2),
                                           ((3, 9, 4), (3, 3, 4), 3), ((4, 10, 6), (1, 7, 5), 1)])
def test_general_form_along_an_axis_from_a_runtime_tile(shape, tile, q0):
    x = ints(shape, bf16, sum(shape) + q0)
    P, Q, R = shape
    bp, bq, br = tile
    grid = (cdiv(P, bp), cdiv(R, br))
    y = poison((grid[0] * bp, 1, grid[1] * br), np.float32)
    slab_sums[grid](x, y, q0, BP=bp, BQ=bq, BR=br, STAGES=2)
    wide = padded(x, (grid[0] * bp, Q, grid[1] * br))
    assert_equal(y, wide[:, q0 * bq:, :].sum(axis=1, keepdims=True))


@RUN
@pytest.mark.parametrize("n,block", [(1, 16), (97, 32), (4097, 1000), (127, 127), (0, 8)])
def test_rank_one_stream(n, block):
    x = ints((n,), np.int32, n)
    y = poison((1,), np.float32)
    vector_sum[1](x, y, B=block, STAGES=3)
    assert_equal(y, [x.astype(np.float64).sum()])


@RUN
@pytest.mark.parametrize("dtype,pad", [(np.dtype(np.float32), -1.5), (bf16, 7),
                                       (np.dtype(np.int32), -3), (np.dtype(np.float32), 0)])
@pytest.mark.parametrize("cols,bn", [(10, 4), (13, 13), (1, 7), (100, 33)])
def test_padding_fills_the_tile_past_the_edge(dtype, pad, cols, bn):
    x = ints((3, cols), dtype, cols)
    width = cdiv(cols, bn) * bn
    y = poison((3, width), dtype)
    pad_copy[3](x, y, BN=bn, PAD=pad, STAGES=2)
    assert_equal(y, padded(x, (3, width), pad))


@RUN
def test_pipeline_nested_in_range_with_when_and_range_in_its_body():
    rows, cols, bn, R, repeat = 6, 45, 8, 3, 2
    x = ints((rows, cols), np.float32, 5)
    y = poison((rows,), np.float32)
    nested[rows // R](x, y, R=R, BN=bn, REPEAT=repeat)
    even = padded(x, (rows, cdiv(cols, bn) * bn)).reshape(rows, -1, bn)[:, ::2]
    assert_equal(y, repeat * even.sum(axis=(1, 2)))


# --- the IR ----------------------------------------------------------------------------------


def _pipelines(module) -> list:
    return [op for op in module.walk() if op.name == "pipeline"]


@tk.kernel
def _two_stream_options(A, B, C, BM: tk.constexpr, BK: tk.constexpr, ENGINE: tk.constexpr,
                        ROLES: tk.constexpr):
    m = tk.program_id(0).to(tk.int64)
    acc = tk.zeros((BM, 1), tk.float32)
    for i, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, 1), col=0, padding=-1),
                               stages=5, engine=ENGINE, warp_roles=ROLES):
        acc = tk.dot(a, b, acc)
    C.tile((BM, 1), (m, 0)).store(acc)


@pytest.mark.parametrize("engine", [None, "tma", "cp_async", "plain"])
@pytest.mark.parametrize("roles,attr", [(None, None), (True, "specialized"), (False, "uniform")])
def test_options_become_attributes(engine, roles, attr):
    a = np.zeros((8, 8), np.float32)
    module = _two_stream_options.trace(a, a, a, BM=4, BK=2, ENGINE=engine, ROLES=roles)
    (op,) = _pipelines(module)
    assert op.attrs["stages"] == 5
    assert op.attrs["engine"] == engine
    assert op.attrs["roles"] == attr
    assert op.attrs["streams"] == (StreamSpec((4, 2), 1, 0), StreamSpec((2, 1), 0, -1))
    # an int64 coordinate makes every coordinate, the trip count and `i` int64
    assert op.operand("count").type == TileType((), DType.INT64)
    assert [v.type.dtype for v in op.variadic("index")] == [DType.INT64] * 4
    body = op.regions[0].block
    assert [a.type for a in body.args] == [
        TileType((), DType.INT64), TileType((4, 2), DType.FLOAT32),
        TileType((2, 1), DType.FLOAT32), TileType((4, 1), DType.FLOAT32)]
    assert op.variadic("tensors") == module.functions[0].args[:2]


@tk.kernel
def _printed(X, Y, first, BN: tk.constexpr):
    r = tk.program_id(0)
    acc = tk.zeros((1, BN), tk.float32)
    for i, x in tk.pipeline(X.tiles((1, BN), along=1, at=(r, first)), stages=3, engine="tma"):
        acc += x
    Y.tile((1,), (r,)).store(tk.sum(acc, axis=1))


PRINTED = """\
kernel @_printed(%X: tensor<?x?xf32, i32>, %Y: tensor<?xf32, i32>, %first: i32) [BN = 32] {
  %0 = dim %X {axis = 1} : i32
  %1 = program_id {axis = 0} : i32
  %2 = constant 0 : tile<1x32xf32>
  %3 = constant 1 : i32
  %4 = sub %0, %3 : i32
  %5 = constant 32 : i32
  %6 = floordiv %4, %5 : i32
  %7 = add %6, %3 : i32
  %8 = sub %7, %first : i32
  %9 = constant 0 : i32
  %10 = maximum %8, %9 : i32
  %11 = pipeline %13 < %10 stages=3 engine=tma roles=auto (%12 = %X[%1, %first] 1x32 along 1 \
: tile<1x32xf32>) \
iter_args(%14 = %2) {
    %15 = add %14, %12 : tile<1x32xf32>
    yield %15
  }
  %16 = reduce %11 {axis = 1, kind = sum} : tile<1xf32>
  tile_store %Y, %1, %16 {shape = (1,)}
}
"""


def test_printed_ir():
    """The trip count max(0, cdiv(cols, 32) - first), overflow-free, then the loop with
    its stream, the step index and the carried accumulator."""
    module = _printed.trace(np.zeros((2, 2), np.float32), np.zeros(2, np.float32), 0, BN=32)
    assert print_module(module, with_locs=False) == PRINTED


def test_no_max_when_the_stream_starts_at_tile_zero():
    module = row_sums.trace(np.zeros((2, 2), np.float32), np.zeros(2, np.float32),
                            BM=1, BN=4, STAGES=2, ACC=tk.float32)
    names = [op.name for op in module.walk()]
    assert "pipeline" in names and "maximum" not in names and "minimum" not in names
    module = two_lengths.trace(*(np.zeros((2, 2), np.float32),) * 3, BA=2, BB=3, STAGES=2)
    assert [op.name for op in module.walk()].count("minimum") == 1


def test_stream_descriptor():
    seen = {}

    @tk.kernel
    def k(X, Z):
        seen["row"] = X.tiles((2, 3), row=4)
        seen["col"] = X.tiles((2, 3), col=5, padding=1.5)
        seen["along"] = X.tiles((2, 3), along=-2, at=(6, 7))
        seen["vec"] = Z.tiles((8,))

    k.trace(np.zeros((2, 2), np.float32), np.zeros(2, np.int32))
    assert [(s.axis, s.start, s.padding) for s in seen.values()] == [
        (1, (4, 0), 0), (0, (0, 5), 1.5), (0, (6, 7), 0), (0, (0,), 0)]
    assert seen["col"].spec == StreamSpec((2, 3), 0, 1.5)
    assert repr(seen["row"]) == "<tk.TileStream X 2x3 along 1>"


# --- errors ----------------------------------------------------------------------------------

_THIS = os.path.abspath(__file__)
_LINES = Path(_THIS).read_text().splitlines()


def line_of(tag: str) -> int:
    hits = [i + 1 for i, text in enumerate(_LINES) if text.rstrip().endswith(f"# <-- {tag}")]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return hits[0]


@contextmanager
def expect(message: str, tag: str, hint: str | None = None) -> Iterator[None]:
    """The block raises a TraceError containing ``message`` at the line marked ``tag``,
    rendered with that line and a caret (and a hint containing ``hint``)."""
    with pytest.raises(TilekitError) as info:
        yield
    err = info.value
    assert type(err) is TraceError, f"{type(err).__name__}: {err}"
    assert message in err.message, str(err)
    assert err.loc is not None and err.loc.file == _THIS, str(err)
    assert err.loc.line == line_of(tag), str(err)
    if hint is not None:
        assert any(hint in h for h in err.hints), str(err)
    text = str(err).splitlines()
    col = f":{err.loc.col + 1}" if err.loc.col is not None else ""
    assert text[0] == f"{_THIS}:{err.loc.line}{col}: error: {err.message}"
    assert text[1] == "    " + _LINES[err.loc.line - 1]
    if err.loc.col is not None:
        assert text[2].index("^") == 4 + err.loc.col


_X = np.zeros((4, 8), np.float32)
_V = np.zeros(8, np.float32)


def trace(kernel, *args, **kw):
    return kernel.trace(*(args or (_X, _V)), **kw)


def test_stages_must_be_a_positive_int():
    @tk.kernel
    def k(X, Y, S: tk.constexpr):
        for i, x in tk.pipeline(X.tiles((1, 4), row=0), stages=S):  # <-- stages
            pass

    for bad in (0, -1, 1.5, True, "2", None):
        with expect(f"stages must be a positive int, got {bad!r}", "stages", hint="in flight"):
            trace(k, S=bad)


def test_stages_must_be_a_constexpr():
    @tk.kernel
    def k(X, Y, s):
        for i, x in tk.pipeline(X.tiles((1, 4), row=0), stages=s):  # <-- runtime-stages
            pass

    with expect("stages must be known when compiling, but it is a runtime i32",
                "runtime-stages", hint="tk.constexpr"):
        trace(k, _X, _V, 3)


def test_unknown_engine():
    @tk.kernel
    def k(X, Y):
        for i, x in tk.pipeline(X.tiles((1, 4), row=0), engine="TMA"):  # <-- engine
            pass

    with expect("unknown copy engine 'TMA'", "engine", hint="'tma', 'cp_async', 'plain'"):
        trace(k)


def test_warp_roles_must_be_a_bool_or_none():
    @tk.kernel
    def k(X, Y):
        for i, x in tk.pipeline(X.tiles((1, 4), row=0), warp_roles="yes"):  # <-- roles
            pass

    with expect("warp_roles must be True, False or None, got 'yes'", "roles"):
        trace(k)


def test_unknown_option_suggests_the_right_one():
    @tk.kernel
    def k(X, Y):
        for i, x in tk.pipeline(X.tiles((1, 4), row=0), stage=3):  # <-- stage
            pass

    with expect("tk.pipeline got an unknown argument `stage`", "stage", hint="`stages=`"):
        trace(k)


def test_no_streams():
    @tk.kernel
    def k(X, Y):
        for i in tk.pipeline(stages=2):  # <-- no-streams
            pass

    with expect("tk.pipeline needs at least one tile stream", "no-streams"):
        trace(k)


def test_a_tile_view_is_not_a_stream():
    @tk.kernel
    def k(X, Y):
        for i, x in tk.pipeline(X.tile((1, 4), (0, 0))):  # <-- view
            pass

    with expect("is one tile, `X.tile(...)`, not a stream of tiles", "view", hint="X.tiles("):
        trace(k)


def test_other_things_are_not_streams():
    @tk.kernel
    def k(X, Y, WHAT: tk.constexpr):
        s = X if WHAT == 0 else tk.zeros((4,)) if WHAT == 1 else [X.tiles((1, 4), row=0)]
        for i, x in tk.pipeline(*([s] if WHAT < 2 else [s])):  # <-- not-stream
            pass

    with expect("is the tensor `X`, not a stream of its tiles", "not-stream"):
        trace(k, WHAT=0)
    with expect("must be a tile stream `X.tiles(...)`, got a tile<4xf32>", "not-stream"):
        trace(k, WHAT=1)
    with expect("takes its streams as separate arguments, not a list", "not-stream",
                hint="tk.pipeline(*streams)"):
        trace(k, WHAT=2)


def test_iterating_a_stream_directly():
    @tk.kernel
    def k(X, Y):
        for x in X.tiles((1, 4), row=0):  # <-- direct
            pass

    with expect("a tile stream is iterated through tk.pipeline", "direct"):
        trace(k)


def test_tile_shape_rank_and_empty_dims():
    @tk.kernel
    def k(X, Y, SHAPE: tk.constexpr):
        s = X.tiles(SHAPE, row=0)  # <-- shape

    with expect("`X` has rank 2, but the tile shape (4,) has rank 1", "shape"):
        trace(k, SHAPE=(4,))
    with expect("tile shape (1, 0) has an empty dimension", "shape"):
        trace(k, SHAPE=(1, 0))


def test_conflicting_directions():
    @tk.kernel
    def k(X, Y, CASE: tk.constexpr):
        if CASE == 0:
            s = X.tiles((1, 4), row=0, col=1)  # <-- row-col
        elif CASE == 1:
            s = X.tiles((1, 4), col=0, along=1)  # <-- col-along
        else:
            s = X.tiles((1, 4), row=0, at=(0, 1))  # <-- row-at

    with expect("`X.tiles` got both row= and col=; give one", "row-col"):
        trace(k, CASE=0)
    with expect("`X.tiles` got both col= and along=; give one", "col-along"):
        trace(k, CASE=1)
    with expect("at= goes with along=; row= already names the first tile", "row-at"):
        trace(k, CASE=2)


def test_directions_that_do_not_fit_the_rank():
    @tk.kernel
    def k(X, Y, CASE: tk.constexpr):
        if CASE == 0:
            s = Y.tiles((4,), row=0)  # <-- row-rank1
        elif CASE == 1:
            s = X.tiles((1, 4))  # <-- no-direction
        elif CASE == 2:
            s = X.tiles((1, 4), along=2)  # <-- along-range
        else:
            s = X.tiles((1, 4), along=tk.program_id(0))  # <-- along-runtime

    with expect("row= names a row or column of tiles of a 2-D tensor, but `Y` has rank 1",
                "row-rank1", hint="along=axis"):
        trace(k, CASE=0)
    with expect("`X.tiles` needs the direction its tiles step in", "no-direction",
                hint="row=r steps along the columns"):
        trace(k, CASE=1)
    with expect("along=2 is not an axis of `X` (rank 2)", "along-range"):
        trace(k, CASE=2)
    with expect("along= must be known when compiling", "along-runtime"):
        trace(k, CASE=3)


def test_coordinates_must_be_integer_scalars():
    @tk.kernel
    def k(X, Y, CASE: tk.constexpr):
        f = tk.program_id(0).to(tk.float32)
        if CASE == 0:
            s = X.tiles((1, 4), row=f)  # <-- float-row
        elif CASE == 1:
            s = X.tiles((1, 4), col=1.5)  # <-- float-col
        elif CASE == 2:
            s = X.tiles((1, 4), along=1, at=(0, tk.arange(2)))  # <-- tile-at
        else:
            s = X.tiles((1, 4), along=1, at=(0,))  # <-- short-at

    with expect("row= must be an integer scalar, got f32", "float-row"):
        trace(k, CASE=0)
    with expect("col= must be an integer, got 1.5", "float-col"):
        trace(k, CASE=1)
    with expect("at= must be an integer scalar, got tile<2xi32>", "tile-at"):
        trace(k, CASE=2)
    with expect("`X` has rank 2, so at= needs 2 tile coordinates, got 1", "short-at"):
        trace(k, CASE=3)


def test_padding_must_be_a_number_that_fits():
    @tk.kernel
    def k(X, Y, PAD: tk.constexpr):
        s = X.tiles((1, 4), row=0, padding=PAD)  # <-- padding

    with expect("the constant 1.5 is not an integer, so it cannot be a tk.int32", "padding"):
        trace(k, np.zeros((2, 2), np.int32), _V, PAD=1.5)
    with expect("padding must be a Python number, got 'zero'", "padding"):
        trace(k, PAD="zero")


def test_wrong_number_of_loop_targets():
    @tk.kernel
    def k(X, Y, CASE: tk.constexpr):
        a, b = X.tiles((1, 4), row=0), X.tiles((1, 4), row=1)
        if CASE == 0:
            for x in tk.pipeline(a):  # <-- one-name
                pass
        elif CASE == 1:
            for i, x in tk.pipeline(a, b):  # <-- two-names
                pass
        else:
            for i, x, y, z in tk.pipeline(a, b):  # <-- four-names
                pass

    with expect("tk.pipeline over 1 stream gives 2 values per step (the step index and the "
                "tile), but the loop binds one name", "one-name", hint="for i, x in"):
        trace(k, CASE=0)
    with expect("gives 3 values per step (the step index and one tile per stream), but the "
                "loop binds 2 names", "two-names", hint="for i, t1, t2 in"):
        trace(k, CASE=1)
    with expect("but the loop binds 4 names", "four-names"):
        trace(k, CASE=2)


def test_carried_value_changing_type_names_the_pipeline():
    @tk.kernel
    def k(X, Y):
        acc = tk.zeros((1, 4), tk.float32)
        for i, x in tk.pipeline(X.tiles((1, 4), row=0)):
            acc = acc + x.to(tk.float64)  # <-- retype

    with expect("`acc` is tile<1x4xf32> before the `tk.pipeline` loop", "retype",
                hint="cast with .to(...)"):
        trace(k)


def test_python_number_carried_names_the_pipeline():
    @tk.kernel
    def k(X, Y):
        total = 0
        for i, x in tk.pipeline(X.tiles((1, 4), row=0)):
            total += tk.sum(x)  # <-- number

    with expect("`total` is the Python int 0 before the `tk.pipeline` loop", "number",
                hint="`total = 0.0`"):
        trace(k)


def test_tiles_of_the_body_do_not_escape():
    @tk.kernel
    def k(X, Y):
        seen = [None]
        for i, x in tk.pipeline(X.tiles((1, 4), row=0)):
            seen[0] = x * 2
        Y.tile((1,), (0,)).store(tk.sum(seen[0], axis=1))  # <-- escape

    with expect("`seen[0]` was computed inside", "escape", hint="assign a tile to `seen[0]`"):
        trace(k)


def test_the_body_still_traces_like_a_loop_after_an_error():
    """A failed trace leaves no state behind: the next kernel traces normally."""
    test_no_streams()
    x = ints((2, 9), np.float32, 1)
    y = poison((2,), np.float32)
    row_sums[2](x, y, BM=1, BN=4, STAGES=2, ACC=tk.float32)
    assert_equal(y, x.sum(axis=1))


# --- every engine, every trip count around the stage count, admissible or not ----------------

@tk.kernel
def _copy_from(X, Y, first, BM: tk.constexpr, BN: tk.constexpr, STAGES: tk.constexpr,
               ENGINE: tk.constexpr, ROLES: tk.constexpr):
    r = tk.program_id(0)
    for i, x in tk.pipeline(X.tiles((BM, BN), along=1, at=(r, first)), stages=STAGES,
                            engine=ENGINE, warp_roles=ROLES):
        Y.tile((BM, BN), (r, first + i)).store(x)


ENGINES = [(None, None), ("tma", False), ("tma", True), ("cp_async", False),
           ("cp_async", True), ("plain", False)]


@RUN
@pytest.mark.parametrize("engine,roles", ENGINES)
@pytest.mark.parametrize("steps", [0, 1, 2, 3, 4, 1000])  # 3 stages: 0, 1, S-1, S, S+1, many
@pytest.mark.parametrize("pitch", ["16-byte rows", "4-byte rows", "whole tiles"])
def test_each_engine_copies_every_trip_count(engine, roles, steps, pitch):
    """On the GPU the schedule takes the forced engine (TMA only where the rows' pitch is a
    multiple of 16 bytes: the other inputs go to the fallback engines). The last tile of a
    row is ragged, except with "whole tiles" (every size a multiple of the tile's: the size
    facts hold and the copies lose their edge guards); the stream starts at tile ``first``
    so that zero steps has data too."""
    if pitch == "4-byte rows" and engine == "tma":
        pytest.skip("TMA is not admissible for these rows (a forced engine is an error)")
    BM, BN, stages, first = 2, 4, 3, 2
    rows = 6 if pitch == "whole tiles" else 5
    cols = (first + steps) * BN - (1 if steps and pitch != "whole tiles" else 0)
    width = {"16-byte rows": cdiv(cols, 4) * 4, "whole tiles": cols,
             "4-byte rows": cols + 1 + (cols % 2 == 0)}[pitch]
    base = ints((rows, width), np.float32, steps * 7 + len(pitch))
    x = base[:, :cols]
    y_base = poison((rows, width), np.float32)
    y = y_base[:, :cols]
    _copy_from[cdiv(rows, BM)](x, y, first, BM=BM, BN=BN, STAGES=stages, ENGINE=engine,
                               ROLES=roles)
    want = poison((rows, cols), np.float32)
    want[:, first * BN:] = x[:, first * BN:]
    assert_equal(y, want)
