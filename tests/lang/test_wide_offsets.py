"""Offsets into tensors indexed in 64 bits are exact (the ``widen_offsets`` pass, issue 27).

``tk.store(X, tk.program_id(0) * B + tk.arange(B), v)`` over an int8 tensor of
2^31 + 2^20 elements computed its offsets in int32: the interpreter wrapped them (and
reported an access out of bounds), the GPU faulted. Now the integer arithmetic that
produces an offset, a mask or a tile index into a tensor whose bucket indexes it in 64
bits runs in int64, on both backends (the pass runs before either sees the IR).

Three layers:

- the pass on the IR: which values become int64 (every integer op that feeds such an
  access), what is kept (other uses, a narrowing the user wrote, 32-bit buckets), the dump;
- the interpreter on a real 2^31 + 2^20 element int8 array that costs no memory: numpy's
  zeros are pages never touched, and the kernels touch a few of them near 2^31;
- offline PTX (64-bit products in the addressing; TMA's reach) and, marked ``gpu``, the
  same kernels on a device over torch tensors of 2^31 + 2^20 int8 elements.
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.ir.core import BlockArgument, Module, Operation, OpResult, Value, clone_module
from tilekit.ir.dtypes import DType
from tilekit.ir.passes import PassManager
from tilekit.ir.printer import print_module
from tilekit.ir.types import TileType
from tilekit.ir.widen_offsets import WIDEN
from tilekit.lang.kernel import ConstSpec, ScalarSpec, Specialization, TensorSpec

N = 2**31 + 2**20  # int8 elements: past int32 by a megabyte
#: Ops whose integer result is computed from their operands' values (what can wrap).
ARITH = frozenset({"add", "sub", "mul", "floordiv", "mod", "maximum", "minimum", "and", "or",
                   "xor", "shl", "shr", "neg", "abs", "not", "select", "eq", "ne", "lt", "le",
                   "gt", "ge", "broadcast", "expand_dims", "reshape", "permute", "reduce",
                   "scan"})
I32, I64 = DType.INT32, DType.INT64


# --- kernels ------------------------------------------------------------------------------

@tk.kernel
def put_at(X, v, S: tk.constexpr, B: tk.constexpr):
    """The issue's repro (with S == B): B bytes at program_id * S."""
    tk.store(X, tk.program_id(0) * S + tk.arange(B), tk.full((B,), v, tk.int8))


@tk.kernel
def bump_tail(X, Out, n, S: tk.constexpr, B: tk.constexpr):
    """Masked load and store at program_id * S, against a runtime bound ``n``."""
    offs = tk.program_id(0) * S + tk.arange(B)
    m = offs < n
    x = tk.load(X, offs, mask=m, other=-1)
    tk.store(Out, tk.program_id(0) * B + tk.arange(B), x)
    tk.store(X, offs, x + 1, mask=m)


@tk.kernel
def running(X, S: tk.constexpr, B: tk.constexpr, STEPS: tk.constexpr):
    """An offset carried through tk.range and tk.when: odd steps skip a block."""
    off = tk.program_id(0) * S
    for i in tk.range(0, STEPS):
        with tk.when(i % 2 == 1):
            off = off + B
        tk.store(X, off + tk.arange(B), tk.full((B,), 1, tk.int8) + i.to(tk.int8))
        off = off + B


@tk.kernel
def bump_tile(X, K: tk.constexpr, J: tk.constexpr, B: tk.constexpr):
    """Tile program_id * K + J (in tiles of B; with B = 1 the tile index itself passes
    int32)."""
    t = X.tile((B,), (tk.program_id(0) * K + J,))
    t.store(t.load() + 1)


@tk.kernel
def bump_box(X, R: tk.constexpr, C: tk.constexpr, K: tk.constexpr):
    """A 2-D tile view whose elements lie past 2^31: tile (program_id * K, program_id(1))."""
    t = X.tile((R, C), (tk.program_id(0) * K, tk.program_id(1)))
    t.store(t.load() + 1)


@tk.kernel
def tail_sum(X, Out, S: tk.constexpr, J: tk.constexpr, B: tk.constexpr):
    """A pipeline over the tiles from (program_id + 2) * S + J to the end."""
    acc = tk.zeros((B,), tk.int32)
    for _, x in tk.pipeline(X.tiles((B,), at=(tk.program_id(0) + 2) * S + J), stages=2):
        acc += x.to(tk.int32)
    Out.tile((B,), (tk.program_id(0),)).store(acc)


@tk.kernel
def gather_rows(X, I, Out, S: tk.constexpr, B: tk.constexpr):
    """Offsets from int32 data: row I[k] of stride S (the product after the load)."""
    idx = tk.load(I, tk.arange(B))
    Out.tile((B,), (0,)).store(tk.load(X, idx * S + tk.arange(B)))


@tk.kernel
def offsets_as_data(X, Y, S: tk.constexpr, B: tk.constexpr):
    """The offsets also stored as data: there they keep their int32 type (and wrap)."""
    offs = tk.program_id(0) * S + tk.arange(B)
    tk.store(X, offs, tk.full((B,), 5, tk.int8))
    tk.store(Y, tk.program_id(0) * B + tk.arange(B), offs)


@tk.kernel
def narrowed(X, S: tk.constexpr, B: tk.constexpr):
    """A narrowing the user wrote is kept."""
    base = (tk.program_id(0).to(tk.int64) * S).to(tk.int32)
    tk.store(X, base + tk.arange(B), tk.full((B,), 1, tk.int8))


@tk.kernel
def two_tensors(X, Y, S: tk.constexpr, B: tk.constexpr):
    """The same offsets into a 64-bit and a 32-bit tensor."""
    offs = tk.program_id(0) * S + tk.arange(B)
    tk.store(X, offs, tk.full((B,), 1, tk.int8))
    tk.store(Y, offs, tk.full((B,), 1, tk.int8))


@tk.kernel
def count_at(X, S: tk.constexpr, B: tk.constexpr):
    tk.atomic_add(X, tk.program_id(0) * S + tk.arange(B), tk.full((B,), 1, tk.int32))


# --- the pass on the IR ---------------------------------------------------------------------

def tensor(dtype: DType, wide: bool, rank: int = 1) -> TensorSpec:
    return TensorSpec(dtype, rank, I64 if wide else I32, True, True, True)


def specialize(kernel, **args) -> Module:  # noqa: ANN001
    """``kernel``'s optimized IR for the given specs (tensors, scalars) and constexprs."""
    spec = Specialization(tuple(
        (p.name, a if isinstance(a, (TensorSpec, ScalarSpec)) else ConstSpec(a))
        for p in kernel.params for a in [args[p.name]]))
    return kernel.specialize(spec)


def accesses(module: Module, wide: bool = True) -> Iterator[tuple[Operation, Value]]:
    """Every offset, mask and tile index of an access (into a 64-bit tensor: ``wide``)."""
    for op in module.walk():
        tensors = op.variadic("tensors") if op.name == "pipeline" else op.operands[:1]
        if not any(getattr(t.type, "index", None) is (I64 if wide else I32) for t in tensors):
            continue
        for v, slot in zip(op.operands, op.slots):
            if slot in ("offsets", "mask", "index", "count"):  # (a pipeline's trip count)
                yield op, v


def feeding(v: Value, seen: set[int] | None = None) -> Iterator[Operation]:
    """The integer and bool ops that compute ``v``, through carried values."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return
    seen.add(id(v))
    if isinstance(v, BlockArgument):
        owner = v.block.parent.parent if v.block.parent is not None else None
        if owner is not None and owner.name == "for" and v.index >= 1:
            k = v.index - 1
            yield from feeding(owner.variadic("inits")[k], seen)
            yield from feeding(owner.regions[0].block.terminator.operands[k], seen)
        return
    assert isinstance(v, OpResult)
    op = v.owner
    if op.name in ("for", "when"):
        yield from feeding(op.variadic("inits")[v.index], seen)
        yield from feeding(op.regions[0].block.terminator.operands[v.index], seen)
    elif op.name in ARITH or op.name == "cast":
        yield op
        for x in op.operands:
            yield from feeding(x, seen)


def narrow_arithmetic(module: Module, wide: bool = True) -> list[str]:
    """Integer arithmetic narrower than 64 bits that feeds an access (to a 64-bit tensor:
    ``wide``)."""
    bad = []
    for access, v in accesses(module, wide):
        for op in feeding(v):
            t = op.results[0].type
            if op.name != "cast" and isinstance(t, TileType) and t.dtype.is_int \
                    and t.dtype.bits < 64:
                bad.append(f"{op.name} : {t} feeds {access.name}")
    return bad


# name: (kernel, its arguments' specs and constexprs given whether X is indexed in 64 bits)
CASES = {
    "put_at": (put_at, lambda w: dict(X=tensor(DType.INT8, w), v=ScalarSpec(DType.INT8),
                                      S=1024, B=1024)),
    "bump_tail": (bump_tail, lambda w: dict(X=tensor(DType.INT8, w),
                                            Out=tensor(DType.INT8, False), n=ScalarSpec(I64),
                                            S=2**30 + 37, B=37)),
    "running": (running, lambda w: dict(X=tensor(DType.INT8, w), S=2**30, B=48, STEPS=5)),
    "bump_tile": (bump_tile, lambda w: dict(X=tensor(DType.INT8, w), K=2**30, J=3, B=1)),
    "bump_box": (bump_box, lambda w: dict(X=tensor(DType.INT8, w, 2), R=16, C=64, K=1000)),
    "tail_sum": (tail_sum, lambda w: dict(X=tensor(DType.INT8, w),
                                          Out=tensor(DType.INT32, False), S=2**30, J=5, B=1)),
    "gather_rows": (gather_rows, lambda w: dict(X=tensor(DType.INT8, w),
                                                I=tensor(DType.INT32, False),
                                                Out=tensor(DType.INT8, False), S=2**30 + 1,
                                                B=64)),
    "offsets_as_data": (offsets_as_data, lambda w: dict(X=tensor(DType.INT8, w),
                                                        Y=tensor(I32, False), S=2**30 + 3,
                                                        B=40)),
    "count_at": (count_at, lambda w: dict(X=tensor(I32, w), S=2**29, B=32)),
}


def case_ir(name: str, wide: bool, passes: PassManager | None = None) -> Module:
    kernel, args = CASES[name]
    if passes is not None:
        kernel = type(kernel)(kernel.fn, passes)
    return specialize(kernel, **args(wide))


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_int32_arithmetic_feeds_an_access_to_a_64_bit_tensor(case: str):
    module = case_ir(case, True)
    assert narrow_arithmetic(module) == []
    assert all(v.type.dtype in (I64, DType.BOOL) for _, v in accesses(module))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_32_bit_bucket_keeps_its_ir(case: str):
    """The pass leaves a kernel without 64-bit tensors as traced, so its code stays what it
    was (bench/ptx_hashes.py checks the benches' PTX byte for byte)."""
    module = case_ir(case, False)
    if case not in ("bump_tile", "bump_box"):  # (their indices are int32 program ids)
        assert narrow_arithmetic(module, wide=False)  # what a 64-bit bucket widens is there
    without = PassManager([p for p in put_at.passes.passes if p is not WIDEN])
    assert print_module(module) == print_module(case_ir(case, False, without))


def test_the_dump_shows_the_repro_in_int64(capsys: pytest.CaptureFixture[str]):
    kernel = type(put_at)(put_at.fn)  # a fresh cache: the dump comes with the trace
    with knobs.override(dump="widen_offsets", dump_locs=False):
        specialize(kernel, X=tensor(DType.INT8, True), v=ScalarSpec(DType.INT8), S=1024,
                   B=1024)
    assert capsys.readouterr().err == """\
// ----- after widen_offsets: put_at -----
kernel @put_at(%X: tensor<?xi8, i64>, %v: i8) [S = 1024, B = 1024] {
  %0 = program_id {axis = 0} : i32
  %1 = cast %0 {dtype = i64} : i64
  %2 = constant 1024 : i32
  %3 = constant 1024 : i64
  %4 = mul %0, %2 : i32
  %5 = mul %1, %3 : i64
  %6 = arange {start = 0, end = 1024} : tile<1024xi32>
  %7 = arange {start = 0, end = 1024, dtype = i64} : tile<1024xi64>
  %8 = broadcast %4 {shape = (1024,)} : tile<1024xi32>
  %9 = broadcast %5 {shape = (1024,)} : tile<1024xi64>
  %10 = add %8, %6 : tile<1024xi32>
  %11 = add %9, %7 : tile<1024xi64>
  %12 = broadcast %v {shape = (1024,)} : tile<1024xi8>
  store %X, %11, %12
}
"""


def types_of(module: Module, name: str) -> list[list[str]]:
    return [[str(r.type) for r in op.results] for op in module.walk() if op.name == name]


def test_a_running_offset_is_carried_in_int64_alone():
    """The loop and the branch carry the int64 offset; the int32 one nobody reads goes."""
    module = case_ir("running", True)
    assert types_of(module, "for") == [["i64"]]
    assert types_of(module, "when") == [["i64"]]


def test_a_pipeline_stream_into_a_64_bit_tensor_starts_at_an_int64_tile():
    module = case_ir("tail_sum", True)
    (op,) = [op for op in module.walk() if op.name == "pipeline"]
    assert [v.type.dtype for v in op.variadic("index")] == [I64]


def test_other_uses_keep_their_type():
    """Offsets stored as data stay int32; a 32-bit tensor's offsets stay int32 next to a
    64-bit one's; a narrowing the user wrote stays."""
    module = case_ir("offsets_as_data", True)
    x_store, y_store = [op for op in module.walk() if op.name == "store"]
    assert x_store.operand("offsets").type.dtype is I64
    assert y_store.operand("value").type == TileType((40,), I32)
    both = specialize(two_tensors, X=tensor(DType.INT8, True), Y=tensor(DType.INT8, False),
                      S=2**30, B=16)
    assert [op.operand("offsets").type.dtype for op in both.walk() if op.name == "store"] \
        == [I64, I32]
    kept = specialize(narrowed, X=tensor(DType.INT8, True), S=2**30, B=16)
    casts = [(op.operand("x").type.dtype, op.result.type.dtype) for op in kept.walk()
             if op.name == "cast"]
    assert (I64, I32) in casts and (I32, I64) in casts


def test_the_pass_is_idempotent():
    module = clone_module(case_ir("running", True))
    before = print_module(module)
    assert print_module(WIDEN.run(module)) == before


# --- the interpreter, on 2^31 + 2^20 bytes that cost nothing -----------------------------------

@pytest.fixture
def big() -> Iterator[np.ndarray]:
    """2^31 + 2^20 int8 zeros: address space only, until a kernel writes a page. Run on
    the interpreter (on a GPU machine the array would be copied to the device)."""
    try:
        x = np.zeros(N, np.int8)
    except MemoryError:
        pytest.skip("no 2 GiB of address space for the tensor")
    with knobs.override(interpret=True):
        yield x


def written(x: np.ndarray, lo: int, hi: int) -> list[int]:
    """The offsets in [lo, hi) where ``x`` is not zero."""
    lo = max(lo, 0)
    return (np.flatnonzero(x[lo:hi]) + lo).tolist()


@pytest.mark.parametrize("S,B", [(2**30 + 12345, 37), (2**30 + 2**18 + 1, 100), ((N - 1) // 2, 1)])
def test_regression_program_id_times_block_wrapped_in_int32(big: np.ndarray, S: int, B: int):
    """The issue's repro: program 2 of ``program_id * S + arange(B)`` wrote at a negative
    int32 offset (an out-of-bounds error in the interpreter, a fault on the GPU). The
    interpreter runs one program at a time, so blocks far apart stand for the whole grid
    (the GPU test covers every block with S == B)."""
    put_at[3](big, 7, S=S, B=B)
    for p in range(3):
        assert written(big, p * S - 5, p * S + B + 5) == list(range(p * S, p * S + B))
        assert (big[p * S:p * S + B] == 7).all()


def test_masked_load_and_store_past_2_31(big: np.ndarray):
    S, B = (N - 21) // 2, 37  # program 2's block straddles the end: 15 lanes masked off
    rng = np.random.default_rng(2731)
    starts = [p * S for p in range(3)]
    for s in starts:
        stop = min(s + B, N)
        big[s:stop] = rng.integers(1, 100, stop - s, dtype=np.int8)
    before = {s: big[s:min(s + B, N)].copy() for s in starts}
    out = np.zeros(3 * B, np.int8)
    bump_tail[3](big, out, N, S=S, B=B)
    for p, s in enumerate(starts):
        inside = min(B, N - s)
        np.testing.assert_array_equal(out[p * B:p * B + inside], before[s])
        assert (out[p * B + inside:(p + 1) * B] == -1).all()
        np.testing.assert_array_equal(big[s:s + inside], before[s] + 1)
    assert N - starts[2] == 22


def test_an_offset_carried_through_range_and_when(big: np.ndarray):
    S, B, steps = 2**30 + 7, 48, 5
    running[3](big, S=S, B=B, STEPS=steps)
    for p in range(3):
        off, want = p * S, {}
        for i in range(steps):
            off += B if i % 2 else 0
            want.update({o: 1 + i for o in range(off, off + B)})
            off += B
        got = written(big, p * S - 3, p * S + 2 * steps * B)
        assert got == sorted(want) and [int(big[o]) for o in got] == [want[o] for o in got]


@pytest.mark.parametrize("K,J,B", [(2**30, 3, 1), (2**24 + 1, 5, 64)])
def test_a_tile_index_past_int32(big: np.ndarray, K: int, J: int, B: int):
    """With B = 1, tile 2 * 2^30 + 3's index is past int32 itself."""
    bump_tile[3](big, K=K, J=J, B=B)
    for p in range(3):
        start = (p * K + J) * B
        assert written(big, start - 5, start + B + 5) == list(range(start, start + B))


def test_a_2d_tile_view_past_2_31(big: np.ndarray):
    cols = 32771  # rows of an odd length
    rows = N // cols
    x = big[:rows * cols].reshape(rows, cols)
    R, C, K = 16, 64, (rows - 16) // 32
    bump_box[3, 2](x, R=R, C=C, K=K)
    for p in range(3):
        r = p * K * R
        block = x[r:r + R + 1, :2 * C + 1]
        assert (block[:R, :2 * C] == 1).all() and block[R].sum() == 0 and block[:, -1].sum() == 0
    assert 2 * K * R * cols > 2**31


@pytest.mark.parametrize("S,J,B", [(2**30, 2**20 - 5, 1), (2**24, N // 64 - 2**25 - 3, 64)])
def test_a_pipeline_from_a_tile_past_2_31(big: np.ndarray, S: int, J: int, B: int):
    start = (2 * S + J) * B  # program 0's first element
    big[start:] = np.arange(N - start, dtype=np.int8) + 1
    out = np.zeros(B, np.int32)
    tail_sum[1](big, out, S=S, J=J, B=B)
    want = big[start:].astype(np.int32).reshape(-1, B).sum(axis=0)
    np.testing.assert_array_equal(out, want)
    assert start > 2**31 and N - start <= 5 * B


def test_offsets_from_int32_data(big: np.ndarray):
    S, B = 2**30 + 1, 64
    rng = np.random.default_rng(27)
    rows = rng.integers(0, 3, B).astype(np.int32)
    for k in range(3):
        big[k * S:k * S + B] = np.arange(B, dtype=np.int8) + 10 * k
    out = np.zeros(B, np.int8)
    gather_rows[1](big, rows, out, S=S, B=B)
    np.testing.assert_array_equal(out, np.arange(B) + 10 * rows)


def test_offsets_stored_as_data_keep_int32(big: np.ndarray):
    """The rule is about offsets: the same values stored as int32 data wrap, as int32
    arithmetic does everywhere else."""
    S, B = 2**30 + 3, 40
    y = np.zeros(3 * B, np.int32)
    offsets_as_data[3](big, y, S=S, B=B)
    exact = np.array([p * S + i for p in range(3) for i in range(B)], np.int64)
    np.testing.assert_array_equal(y, exact.astype(np.int32))  # wrapped for program 2
    assert (y[2 * B:] < 0).all() and all((big[o] == 5) for o in exact)
