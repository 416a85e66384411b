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
  zeros are pages never touched, and the kernels touch a few of them near 2^31 (with a
  GPU the same tests run on the device too);
- offline PTX (64-bit products in the addressing; TMA's reach) and, marked ``gpu``, every
  block of torch tensors of 2^31 + 2^20 elements through ``tk.load``/``tk.store``, tile
  views, ``tk.pipeline`` (TMA, cp.async, plain) and atomics.
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
def copy_tile(X, Out, K: tk.constexpr, J: tk.constexpr, B: tk.constexpr):
    """Tile program_id * K + J of X (in tiles of B; with B = 1 the tile index itself passes
    int32) into tile program_id of Out."""
    Out.tile((B,), (tk.program_id(0),)).store(X.tile((B,), (tk.program_id(0) * K + J,)).load())


@tk.kernel
def copy_box(X, Out, I: tk.constexpr, J: tk.constexpr, R: tk.constexpr, C: tk.constexpr):
    """Tile (I + program_id, J) of a 2-D X into Out."""
    Out.tile((R, C), (0, 0)).store(X.tile((R, C), (I + tk.program_id(0), J)).load())


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
    """The loop and the branch carry the offset in int64; the int32 one, read only to
    compute itself (through the branch, a carry in a carry), goes."""
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
#
# The tensors are views of numpy zeros whose pages nothing touches but the kernels: read
# in place when a kernel only reads them; written through views with a row per program
# (a huge row stride, a few elements: the interpreter copies what a kernel may write to
# shadow memory, element by element, and checks bounds exactly, page by page).

@pytest.fixture(params=["interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def big(request: pytest.FixtureRequest) -> Iterator[np.ndarray]:
    """2^31 + 2^20 int8 zeros: address space only, until something writes a page. The
    same tests run on the interpreter and, with a GPU, on the device (arrays copied there
    and back)."""
    try:
        x = np.zeros(N, np.int8)
    except MemoryError:
        pytest.skip("no 2 GiB of address space for the tensor")
    with knobs.override(interpret=request.param == "interp"):
        yield x


def rows_of(x: np.ndarray, stride: int, width: int, count: int = 3) -> np.ndarray:
    """``count`` rows of ``width`` elements, ``stride`` apart in ``x`` (a view)."""
    assert (count - 1) * stride + width <= x.size
    return np.lib.stride_tricks.as_strided(x, (count, width), (stride * x.itemsize,
                                                               x.itemsize))


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
    put_at[3](rows_of(big, S, B), 7, S=S, B=B)
    for p in range(3):
        assert written(big, p * S - 5, p * S + B + 5) == list(range(p * S, p * S + B))
        assert (big[p * S:p * S + B] == 7).all()


def test_masked_load_and_store_past_2_31(big: np.ndarray):
    S, B, inside = 2**30 + 3, 37, 22  # program 2: 22 lanes inside the bound, 15 masked
    rng = np.random.default_rng(2731)
    x = rows_of(big, S, B)
    x[...] = rng.integers(1, 100, x.shape, dtype=np.int8)
    before = x.copy()
    out = np.zeros(3 * B, np.int8)
    bump_tail[3](x, out, 2 * S + inside, S=S, B=B)
    want = before.copy()
    want[:2] += 1
    want[2, :inside] += 1
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(out[:2 * B + inside], before.reshape(-1)[:2 * B + inside])
    assert (out[2 * B + inside:] == -1).all()


def test_an_offset_carried_through_range_and_when(big: np.ndarray):
    S, B, steps = 2**30 + 7, 48, 5
    running[3](rows_of(big, S, 2 * steps * B), S=S, B=B, STEPS=steps)
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
    """With B = 1, tile 2 * 2^30 + 3's index is past int32 itself (as an int32 it wrapped
    to a tile before the tensor, which reads padding)."""
    starts = [(p * K + J) * B for p in range(3)]
    for s in starts:
        big[s:s + B] = np.arange(B, dtype=np.int8) + 1
    out = np.zeros(3 * B, np.int8)
    copy_tile[3](big, out, K=K, J=J, B=B)
    np.testing.assert_array_equal(out, np.tile(np.arange(B) + 1, 3))
    assert starts[2] > 2**31


def test_a_2d_tile_view_past_2_31(big: np.ndarray):
    """Rows of an odd length: an inner tile and the ragged corner, both past 2^31."""
    cols = 32771
    rows = N // cols
    x = big[:rows * cols].reshape(rows, cols)
    R, C = 16, 64
    tiles = [(rows // R - 1, 7), (rows // R, cols // C)]  # inner, then the corner
    pattern = (1 + (np.arange(R)[:, None] + np.arange(C)) % 90).astype(np.int8)
    for i, j in tiles:
        part = x[i * R:(i + 1) * R, j * C:(j + 1) * C]
        part[...] = pattern[:part.shape[0], :part.shape[1]]
    for i, j in tiles:
        out = np.full((R, C), -1, np.int8)
        copy_box[1](x, out, I=i, J=j, R=R, C=C)
        want = np.zeros((R, C), np.int8)
        part = x[i * R:(i + 1) * R, j * C:(j + 1) * C]
        want[:part.shape[0], :part.shape[1]] = part
        np.testing.assert_array_equal(out, want)
        assert i * R * cols > 2**31 and (part != 0).all()


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
    offsets_as_data[3](rows_of(big, S, B), y, S=S, B=B)
    exact = np.array([p * S + i for p in range(3) for i in range(B)], np.int64)
    np.testing.assert_array_equal(y, exact.astype(np.int32))  # wrapped for program 2
    assert (y[2 * B:] < 0).all() and all((big[o] == 5) for o in exact)


# --- offline code: 64-bit products, TMA's reach --------------------------------------------------

def ptx_of(module: Module, arch: str = "sm_90a") -> str:
    from tilekit.codegen.driver import compile_module

    return compile_module(module, arch).binary.decode()


def uses_of_block_id(ptx: str) -> list[str]:
    """The instructions that read ``%ctaid.x``'s register (the program id)."""
    reg = re.search(r"mov\.u32\s+(%r\d+),\s*%ctaid\.x;", ptx)
    assert reg is not None
    return [line.split()[0] for line in ptx.splitlines()
            if re.search(re.escape(reg.group(1)) + r"\b", line) and "%ctaid" not in line]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_the_program_id_is_multiplied_in_64_bits_only_for_a_64_bit_tensor(arch: str):
    def product(wide: bool) -> list[str]:
        module = specialize(put_at, X=tensor(DType.INT8, wide), v=ScalarSpec(DType.INT8),
                            S=1000, B=1000)
        return uses_of_block_id(ptx_of(module, arch))

    assert product(True) == ["mul.wide.u32"]  # a 64-bit product of the 32-bit id
    assert product(False) == ["mul.lo.s32"]  # as before: small tensors keep 32-bit code


def test_a_64_bit_vector_add_keeps_its_128_bit_accesses():
    """aranges made as int64 keep a vector's offsets visibly consecutive to LLVM, so the
    64-bit bucket's loads and stores stay 16 bytes wide."""
    from tests.rt.ptx_kernels import add

    for wide in (False, True):
        t = tensor(DType.FLOAT32, wide)
        ptx = ptx_of(specialize(add, X=t, Y=t, Out=t, n=ScalarSpec(I64 if wide else I32),
                                BLOCK=1024))
        assert ptx.count("ld.global.v4.b32") == 4 and ptx.count("st.global.v4.b32") == 2


def pipeline_ir(kernel, wide: bool, rank: int, engine: str | None = None) -> Module:  # noqa: ANN001
    return specialize(kernel, X=tensor(DType.INT8 if rank == 1 else DType.BFLOAT16, wide, rank),
                      Out=tensor(DType.FLOAT32, False), B=128, ENGINE=engine)


@tk.kernel
def stream_sum(X, Out, B: tk.constexpr, ENGINE: tk.constexpr):
    """A 1-D pipeline from tile program_id (int8: TMA's boxes of 128 bytes)."""
    acc = tk.zeros((B,), tk.float32)
    for _, x in tk.pipeline(X.tiles((B,), at=tk.program_id(0)), stages=3, engine=ENGINE):
        acc += x.to(tk.float32)
    Out.tile((B,), (tk.program_id(0),)).store(acc)


@tk.kernel
def stream_tail(X, Out, J: tk.constexpr, B: tk.constexpr, ENGINE: tk.constexpr):
    """A 1-D pipeline from tile J to the end."""
    acc = tk.zeros((B,), tk.float32)
    for _, x in tk.pipeline(X.tiles((B,), at=J + tk.program_id(0)), stages=3, engine=ENGINE):
        acc += x.to(tk.float32)
    Out.tile((B,), (tk.program_id(0),)).store(acc)


@tk.kernel
def row_tail(X, Out, J: tk.constexpr, B: tk.constexpr, ENGINE: tk.constexpr):
    """A 2-D pipeline along row 0 from tile (0, J) to the end."""
    acc = tk.zeros((1, B), tk.float32)
    for _, x in tk.pipeline(X.tiles((1, B), along=1, at=(0, J)), stages=3, engine=ENGINE):
        acc += x.to(tk.float32)
    Out.tile((B,), (0,)).store(tk.sum(acc, axis=0))


@tk.kernel
def rows_sum(X, Out, B: tk.constexpr, ENGINE: tk.constexpr):
    """A 2-D pipeline along the rows of tiles (16, B)."""
    acc = tk.zeros((16, B), tk.float32)
    for _, x in tk.pipeline(X.tiles((16, B), row=tk.program_id(0)), stages=3, engine=ENGINE):
        acc += x.to(tk.float32)
    Out.tile((16,), (tk.program_id(0),)).store(tk.sum(acc, axis=1))


def test_a_1d_stream_indexed_in_64_bits_is_not_copied_by_tma():
    """TMA's coordinates are signed 32-bit: past 2^31 elements of a 1-D tensor they cannot
    reach, so its stream goes to cp.async (a 2-D tensor keeps TMA: its rows are shorter,
    and a launch with a dim past 2^31 is refused)."""
    tma = "cp.async.bulk.tensor"
    assert tma in ptx_of(pipeline_ir(stream_sum, False, 1))
    wide = ptx_of(pipeline_ir(stream_sum, True, 1))
    assert tma not in wide and "cp.async.cg.shared.global" in wide
    assert tma in ptx_of(pipeline_ir(rows_sum, True, 2))


def test_forcing_tma_on_a_wide_1d_stream_is_an_error_at_the_pipeline():
    from tilekit.errors import ScheduleError

    with pytest.raises(ScheduleError, match="engine 'tma' is not admissible.*TMA_WIDE_1D: "
                                            "`X` is a 1-D tensor indexed in 64 bits") as info:
        ptx_of(pipeline_ir(stream_sum, True, 1, engine="tma"))
    assert info.value.loc.file == __file__
    assert "tk.pipeline(X.tiles" in open(__file__).read().splitlines()[info.value.loc.line - 1]


# --- the GPU's code on the host: the emulator (tests/codegen/simt.py) ---------------------------

def emulate(kernel, arrays: dict[str, tuple[tuple[int, ...], type]],  # noqa: ANN001
            fill: dict[str, list[tuple[slice, np.ndarray]]], scalars: dict[str, int],
            consts: dict[str, int], grid: tuple[int, ...], blocks: list[tuple[int, ...]],
            windows: dict[str, list[slice]]) -> dict[str, list[np.ndarray]]:
    """Run ``blocks`` of the kernel's NVPTX code on the host over zeroed arrays of these
    shapes (``fill`` set first; the bucket is theirs), in a forked child, where a wrong
    address is a failed test and not a crash; return the ``windows`` of each array."""
    from tests.codegen.simt import compile_for_host, launch_args
    from tests.codegen.test_offline import run_in_child

    def child() -> dict[str, list[np.ndarray]]:
        data = {name: np.zeros(shape, dtype) for name, (shape, dtype) in arrays.items()}
        for name, parts in fill.items():
            for where, values in parts:
                data[name].reshape(-1)[where] = values
        module = kernel.trace(**data, **scalars, **consts)
        assert all(a.type.index is I64 for a in module.kernel.args[:1])
        compiled = compile_for_host(module)
        args = launch_args(compiled, data, scalars)
        for b in blocks:
            compiled.emulator.run_block(b, grid, compiled.threads, args)
        return {name: [data[name].reshape(-1)[w].copy() for w in ws]
                for name, ws in windows.items()}

    return run_in_child(child)


def test_host_emulated_repro_writes_every_block_past_2_31():
    """The repro's GPU code, blocks of 1024 around 2^31 and the last one."""
    blocks = [2**21 - 1, 2**21, N // 1024 - 1]
    got = emulate(put_at, {"X": ((N,), np.int8)}, {}, {"v": 7}, dict(S=1024, B=1024),
                  (N // 1024,),
                  [(b,) for b in blocks], {"X": [slice(b * 1024 - 8, b * 1024 + 1032)
                                                 for b in blocks[1:]]})
    before, last = got["X"]
    np.testing.assert_array_equal(before, [7] * 1032 + [0] * 8)  # blocks 2^21 - 1, 2^21
    np.testing.assert_array_equal(last[:1032 - 8 + 8], [0] * 8 + [7] * 1024)


def test_host_emulated_masked_blocks_past_2_31():
    """Ragged blocks of 1000: the one across 2^31 and the last, 776 lanes masked off."""
    B = 1000
    grid = -(-N // B)
    blocks = [2**31 // B, grid - 1]
    rng = np.random.default_rng(31)
    values = {b: rng.integers(-100, 100, B).astype(np.int8) for b in blocks}
    spans = {b: slice(b * B, min((b + 1) * B, N)) for b in blocks}
    got = emulate(bump_tail, {"X": ((N,), np.int8), "Out": ((grid * B,), np.int8)},
                  {"X": [(spans[b], values[b][:spans[b].stop - spans[b].start])
                         for b in blocks]},
                  {"n": N}, dict(S=B, B=B), (grid,), [(b,) for b in blocks],
                  {"X": [spans[b] for b in blocks],
                   "Out": [slice(b * B, (b + 1) * B) for b in blocks]})
    inside = N - blocks[1] * B
    assert inside == 224
    np.testing.assert_array_equal(got["X"][0], values[blocks[0]] + 1)
    np.testing.assert_array_equal(got["X"][1], values[blocks[1]][:inside] + 1)
    np.testing.assert_array_equal(got["Out"][0], values[blocks[0]])
    np.testing.assert_array_equal(got["Out"][1], np.concatenate(
        [values[blocks[1]][:inside], np.full(B - inside, -1, np.int8)]))


@pytest.mark.parametrize("K,J,B,block", [(1, 0, 4096, 2**19), (2**30, 3, 1, 2)])
def test_host_emulated_tile_views_past_2_31(K: int, J: int, B: int, block: int):
    start = (block * K + J) * B
    got = emulate(bump_tile, {"X": ((N,), np.int8)}, {}, {}, dict(K=K, J=J, B=B),
                  (block + 1,), [(block,)],
                  {"X": [slice(start - 8, start + B + 8)]})
    np.testing.assert_array_equal(got["X"][0], [0] * 8 + [1] * B + [0] * 8)


def test_host_emulated_2d_tile_views_past_2_31():
    """Rows of an odd length (no row is 16-byte aligned but every 16th): an inner tile past
    2^31 (its rows realigned) and the ragged corner."""
    cols = 32771
    rows = N // cols
    grid = (-(-rows // 16), -(-cols // 64))
    inner, corner = (grid[0] - 2, 7), (grid[0] - 1, grid[1] - 1)
    r1, c1 = inner[0] * 16, inner[1] * 64
    r0, c0 = corner[0] * 16, corner[1] * 64
    got = emulate(bump_box, {"X": ((rows, cols), np.int8)}, {}, {}, dict(R=16, C=64, K=1),
                  grid, [inner, corner],
                  {"X": [slice(r * cols + c1 - 1, r * cols + c1 + 65) for r in range(r1 - 1,
                                                                                      r1 + 17)]
                   + [slice(r * cols + c0 - 4, r * cols + cols) for r in range(r0 - 1, rows)]})
    assert r1 * cols > 2**31 and rows - r0 == 9 and cols - c0 == 3
    inner_rows, corner_rows = got["X"][:18], got["X"][18:]
    for k, row in enumerate(inner_rows):
        np.testing.assert_array_equal(row, [0] + [int(0 < k < 17)] * 64 + [0])
    np.testing.assert_array_equal(corner_rows[0], [0] * 7)  # the row above the corner
    for row in corner_rows[1:]:
        np.testing.assert_array_equal(row, [0] * 4 + [1] * 3)


def test_host_emulated_running_offset():
    S, B, steps = 2**30 + 7, 48, 5
    got = emulate(running, {"X": ((N,), np.int8)}, {}, {}, dict(S=S, B=B, STEPS=steps),
                  (3,), [(2,)],
                  {"X": [slice(2 * S, 2 * S + 2 * steps * B)]})
    off, want = 0, np.zeros(2 * steps * B, np.int8)
    for i in range(steps):
        off += B if i % 2 else 0
        want[off:off + B] = 1 + i
        off += B
    np.testing.assert_array_equal(got["X"][0], want)


# --- the GPU: every element of torch tensors past 2^31 -------------------------------------------

@pytest.fixture
def torch_cuda():  # noqa: ANN201
    torch = pytest.importorskip("torch")
    yield torch
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_gpu_every_block_of_the_repro(torch_cuda):  # noqa: ANN001
    """The issue's repro as written: program_id * 1024 + arange(1024) over every block."""
    x = torch_cuda.zeros(N, dtype=torch_cuda.int8, device="cuda")
    put_at[N // 1024](x, 7, S=1024, B=1024)
    assert bool((x == 7).all())


@pytest.mark.gpu
def test_gpu_masked_load_and_store_of_every_element(torch_cuda):  # noqa: ANN001
    """Ragged blocks of 1000 (the last one masked) over every element: X += 1, and a copy
    of X before it (-1 past the end)."""
    torch = torch_cuda
    B = 1000
    grid = -(-N // B)
    x = torch.randint(-128, 128, (N,), dtype=torch.int8, device="cuda")
    before = x.clone()
    out = torch.zeros(grid * B, dtype=torch.int8, device="cuda")
    bump_tail[grid](x, out, N, S=B, B=B)
    assert bool((x == before + 1).all())
    assert bool((out[:N] == before).all()) and bool((out[N:] == -1).all())


@pytest.mark.gpu
def test_gpu_tile_views_over_every_element(torch_cuda):  # noqa: ANN001
    torch = torch_cuda
    x = torch.zeros(N, dtype=torch.int8, device="cuda")
    bump_tile[N // 4096](x, K=1, J=0, B=4096)  # 1-D, every tile
    assert bool((x == 1).all())
    cols = 32771
    rows = N // cols
    box = x[:rows * cols].view(rows, cols)
    bump_box[-(-rows // 16), -(-cols // 64)](box, R=16, C=64, K=1)  # 2-D, ragged edges
    assert bool((box == 2).all()) and bool((x[rows * cols:] == 1).all())


@pytest.mark.gpu
@pytest.mark.parametrize("engine", [None, "cp_async", "plain"])
def test_gpu_pipelines_past_2_31(torch_cuda, engine: str | None):  # noqa: ANN001
    """A 1-D stream near the end (cp.async or plain: not TMA) and every row block of a
    2-D bf16 tensor of 2^31 + 2^21 elements (TMA when the engine is left to tilekit)."""
    torch = torch_cuda
    x = torch.randint(0, 4, (N,), dtype=torch.int8, device="cuda")
    J = N // 128 - 5  # the last five tiles of 128
    out = torch.zeros(128, dtype=torch.float32, device="cuda")
    stream_tail[1](x, out, J=J, B=128, ENGINE=engine)
    assert bool((out == x[J * 128:].view(-1, 128).to(torch.float32).sum(0)).all())
    del x
    y = torch.randint(0, 4, (2**16 + 32, 2**15), dtype=torch.int8, device="cuda")
    y = y.to(torch.bfloat16)
    sums = torch.zeros(y.shape[0], dtype=torch.float32, device="cuda")
    rows_sum[y.shape[0] // 16](y, sums, B=128, ENGINE=engine)
    assert bool((sums == y.to(torch.float32).sum(1)).all())  # small integers: exact


@pytest.mark.gpu
def test_gpu_atomics_past_2_31(torch_cuda):  # noqa: ANN001
    torch = torch_cuda
    x = torch.zeros(2**31 + 2**10, dtype=torch.int32, device="cuda")
    S, B = 2**30, 32
    count_at[3](x, S=S, B=B)
    count_at[3](x, S=S, B=B)
    at = torch.tensor([p * S + i for p in range(3) for i in range(B)], device="cuda")
    assert bool((x[at] == 2).all()) and int(x.sum()) == 2 * 3 * B


@pytest.mark.gpu
def test_gpu_a_2d_tma_stream_with_a_dim_past_2_31_is_refused(torch_cuda):  # noqa: ANN001
    """TMA's coordinates do not reach past 2^31 along a dim: a clear error at the launch,
    and cp.async, which the hint names, reads the last tiles."""
    from tilekit.errors import LaunchError

    torch = torch_cuda
    cols = 2**31 + 256
    y = torch.zeros(1, cols, dtype=torch.bfloat16, device="cuda")  # 4 GiB
    y[0, -200:] = 1
    out = torch.zeros(128, dtype=torch.float32, device="cuda")
    with pytest.raises(LaunchError, match="TMA_COORDINATE_REACH") as info:
        row_tail[1](y, out, J=cols // 128 - 2, B=128, ENGINE=None)
    assert info.value.loc is not None and info.value.loc.file == __file__
    row_tail[1](y, out, J=cols // 128 - 2, B=128, ENGINE="cp_async")
    assert out.tolist() == [1.0] * 56 + [2.0] * 72
