"""The interpreter's launch, trusted (issue 27): the grid is checked against the device
limits before anything runs and walked one program at a time (memory flat in its size,
Ctrl-C stops it); a failed launch leaves the caller's arrays as they were, and aliasing
arguments give exactly the results of running in place; a masked access is checked on
its active lanes, exactly (strided views included), and only on those."""

from __future__ import annotations

import os
import signal
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilekit as tk
from tilekit import knobs
from tilekit.errors import ExecutionError, LaunchError, MemoryAccessError, TilekitError
from tilekit.rt import interpreter
from tilekit.rt.arrays import HostArray, to_host
from tilekit.rt.launcher import _resolve_grid, specialize_arguments
from tilekit.rt.memory import TensorBinding
from tilekit.rt.shadow import Shadows

_THIS = os.path.abspath(__file__)
_LINES = Path(_THIS).read_text().splitlines()


def line_of(tag: str) -> int:
    """The 1-based line of this file that ends with ``# <-- tag``."""
    hits = [i + 1 for i, text in enumerate(_LINES) if text.rstrip().endswith(f"# <-- {tag}")]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return hits[0]


@contextmanager
def raises_at(cls: type[TilekitError], message: str, tag: str) -> Iterator[None]:
    """The block raises exactly ``cls``, with ``message`` in it, at the line marked ``tag``."""
    with pytest.raises(TilekitError) as info:
        yield
    err = info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert message in err.message, str(err)
    assert err.loc is not None and err.loc.file == _THIS, str(err)
    assert err.loc.line == line_of(tag), str(err)


@pytest.fixture(autouse=True)
def on_the_interpreter() -> Iterator[None]:
    with knobs.override(interpret=True):
        yield


def run_in_place(kern: Any, grid: Any, *args: Any, **constexprs: Any) -> None:
    """The launch as the interpreter ran it before shadow memory: straight on the caller's
    arrays. The reference for what a launch of aliasing arguments must compute."""
    spec, runtime = specialize_arguments(kern, kern.bind(args, constexprs, None), None)
    fn = kern.specialize(spec).kernel
    bindings = {a: TensorBinding(a.name_hint, v) if isinstance(v, HostArray) else v
                for a in fn.args for v in [runtime[a.name_hint]]}
    interpreter.run(fn, _resolve_grid(grid, spec.constexprs, None), bindings)


# --- kernels ----------------------------------------------------------------------------------


@tk.kernel
def add_one(X: tk.Tensor, Y: tk.Tensor, N: tk.constexpr):
    offs = tk.program_id(0) * N + tk.arange(N)
    v = tk.load(X, offs)  # <-- raw-load
    tk.store(Y, offs, v + 1)  # <-- raw-store


@tk.kernel
def write_then_fail(Y: tk.Tensor, fail_at, KIND: tk.constexpr):
    """Every program writes its element of Y (a store, or an atomic), then program
    ``fail_at`` fails in the way KIND names."""
    pid = tk.program_id(0)
    offs = pid + tk.arange(1)
    if KIND == "atomic":
        tk.atomic_add(Y, offs, tk.full((1,), 5.0, tk.float32))
    else:
        tk.store(Y, offs, tk.full((1,), 5.0, tk.float32))
    if KIND in ("oob", "atomic"):
        tk.load(Y, offs + (pid == fail_at) * Y.shape[0])  # <-- fail-oob
    elif KIND == "assert":
        tk.device_assert(pid != fail_at, "program fail_at fails")  # <-- fail-assert
    elif KIND == "div0":
        q = tk.full((1,), 1, tk.int32) // (pid - fail_at)  # <-- fail-div0
        tk.device_assert(q >= -1, "1 // k is -1, 0 or 1")
    elif KIND == "zero-step":
        for _ in tk.range(0, 2, pid - fail_at):  # <-- fail-zero-step
            pass


@tk.kernel
def stop_at(Y: tk.Tensor, stop):
    """A program that does almost nothing, and fails at program ``stop``: a long grid run
    for a bounded number of programs."""
    tk.device_assert(tk.program_id(0) != stop, "stop")


@tk.kernel
def write_and_print(Y: tk.Tensor):
    tk.store(Y, tk.program_id(0) + tk.arange(1), tk.full((1,), 7.0, tk.float32))
    tk.device_print("pid", tk.program_id(0))


@tk.kernel
def neighbours(X: tk.Tensor, Y: tk.Tensor, fail_at, N: tk.constexpr):
    """Y[i] = X[i] + X[i + 1] + 1 (within each view's extent) on 1-D views of any stride:
    when X and Y share memory, a program reads what earlier programs wrote."""
    i = tk.program_id(0) * N + tk.arange(N)
    a = tk.load(X, i * X.stride(0), mask=i < X.shape[0])
    b = tk.load(X, (i + 1) * X.stride(0), mask=i + 1 < X.shape[0])
    tk.store(Y, i * Y.stride(0), a + b + 1, mask=i < Y.shape[0])
    tk.device_assert(tk.program_id(0) != fail_at, "fail_at")


@tk.kernel
def neighbours_2d(X: tk.Tensor, Y: tk.Tensor, fail_at, BR: tk.constexpr, BC: tk.constexpr):
    r = tk.program_id(0) * BR + tk.arange(BR)[:, None]
    c = tk.program_id(1) * BC + tk.arange(BC)[None, :]
    rows = r < X.shape[0]
    a = tk.load(X, r * X.stride(0) + c * X.stride(1), mask=rows & (c < X.shape[1]))
    b = tk.load(X, r * X.stride(0) + (c + 1) * X.stride(1), mask=rows & (c + 1 < X.shape[1]))
    tk.store(Y, r * Y.stride(0) + c * Y.stride(1), a + b + 1,
             mask=(r < Y.shape[0]) & (c < Y.shape[1]))
    tk.device_assert(tk.program_id(0) + tk.program_id(1) * 1000 != fail_at, "fail_at")


@tk.kernel
def masked_copy(X: tk.Tensor, Y: tk.Tensor, shift, lo, hi, N: tk.constexpr):
    i = tk.program_id(0) * N + tk.arange(N) + shift
    m = (i >= lo) & (i < hi)
    v = tk.load(X, i * X.stride(0), mask=m)  # <-- masked-load
    tk.store(Y, i * Y.stride(0), v, mask=m)  # <-- masked-store


@tk.kernel
def masked_atomic(X: tk.Tensor, Y: tk.Tensor, shift, lo, hi, N: tk.constexpr):
    i = tk.program_id(0) * N + tk.arange(N) + shift
    m = (i >= lo) & (i < hi)
    v = tk.load(X, i * X.stride(0), mask=(i >= 0) & (i < X.shape[0]))
    tk.atomic_add(Y, i * Y.stride(0), v, mask=m)  # <-- masked-atomic


@tk.kernel
def masked_copy_2d(X: tk.Tensor, Y: tk.Tensor, rhi, chi, BR: tk.constexpr, BC: tk.constexpr):
    r = tk.program_id(0) * BR + tk.arange(BR)[:, None]
    c = tk.program_id(1) * BC + tk.arange(BC)[None, :]
    m = (r < rhi) & (c < chi)
    v = tk.load(X, r * X.stride(0) + c * X.stride(1), mask=m)  # <-- masked-load-2d
    tk.store(Y, r * Y.stride(0) + c * Y.stride(1), v, mask=m)  # <-- masked-store-2d


# --- repro 8: grids -----------------------------------------------------------------------


@pytest.mark.parametrize("grid, axis, size, limit", [
    ((1, 70000), "1 (y)", 70000, 65535),
    ((1, 1, 65536), "2 (z)", 65536, 65535),
    ((2**31,), "0 (x)", 2**31, 2**31 - 1),
    ((0, 70000), "1 (y)", 70000, 65535),  # checked even when the grid is empty
])
def test_a_grid_past_the_device_limits_is_refused_before_anything_runs(
        grid: tuple[int, ...], axis: str, size: int, limit: int) -> None:
    x, y = np.arange(8, dtype=np.float32), np.full(8, -1.0, np.float32)
    with raises_at(LaunchError, f"grid dimension {axis} is {size}, more than the device "
                   f"allows ({limit})", "launch-big-grid"):
        add_one[grid](x, y, N=8)  # <-- launch-big-grid
    assert (y == -1).all()


def test_a_grid_function_past_the_device_limits_is_refused() -> None:
    x, y = np.arange(8, dtype=np.float32), np.full(8, -1.0, np.float32)
    with raises_at(LaunchError, "grid dimension 1 (y) is 65536", "launch-grid-fn"):
        add_one[lambda meta: (1, 65536 * meta["N"] // 8)](x, y, N=8)  # <-- launch-grid-fn
    assert (y == -1).all()


def test_a_grid_at_the_device_limits_is_accepted_and_runs_lazily() -> None:
    """The largest legal grids start at once (program (0, 0, 0) runs first and fails here),
    without building the list of their programs."""
    y = np.zeros(1, np.float32)
    for grid in [(1, 65535, 65535), (2**31 - 1,)]:
        with pytest.raises(ExecutionError, match=r"\(program \(0, 0, 0\)\)"):
            stop_at[grid](y, 0)
    ids = interpreter.program_ids((2**31 - 1, 65535, 65535))
    assert [next(ids) for _ in range(3)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert list(interpreter.program_ids((2, 3, 1)))[2:4] == [(0, 1, 0), (1, 1, 0)]


@pytest.mark.parametrize("grid", [0, (0,), (3, 0), (0, 1, 5)])
def test_a_grid_with_a_zero_dimension_runs_nothing(grid: Any) -> None:
    x, y = np.arange(8, dtype=np.float32), np.full(8, -1.0, np.float32)
    add_one[grid](x, y, N=8)
    assert (y == -1).all()


def test_a_grid_with_a_zero_dimension_still_reports_trace_errors() -> None:
    @tk.kernel
    def bad(X: tk.Tensor):
        tk.arange(X.shape[0])

    with pytest.raises(tk.errors.TraceError, match="arange"):
        bad[0](np.zeros(4, np.float32))


def _peak_bytes(grid: int, stop: int) -> int:
    y = np.zeros(1, np.float32)
    tracemalloc.start()
    try:
        with pytest.raises(ExecutionError, match=f"program \\({stop}, 0, 0\\)"):
            stop_at[grid](y, stop)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_interpreter_memory_is_flat_in_the_grid_size() -> None:
    """Repro 8: ``add[2**31](...)`` grew by 1 GB every 3 s (itertools.product made a tuple
    of the grid's x range first). The peak of 200 programs is the same whatever the grid,
    and does not grow with the programs run either."""
    _peak_bytes(300, 1)  # trace and warm up
    short = _peak_bytes(201, 200)
    long = _peak_bytes(10**6, 200)
    assert long - short < 16 * 1024, (short, long)
    more = _peak_bytes(10**6, 400)
    assert more - long < 16 * 1024, (long, more)


# --- repro 5 and item 4: a failed launch leaves the arrays untouched ------------------------


def test_a_grid_one_program_too_large_leaves_the_output_untouched() -> None:
    """Repro 5: the last program stores past the end; the earlier programs' stores must
    not be left in the user's array."""
    x, y = np.arange(20, dtype=np.float32), np.full(16, -1.0, np.float32)
    with raises_at(MemoryAccessError, "`store` out of bounds in program (4, 0, 0): element "
                   "offset 16 (index (16,)) is outside `Y` of shape (16,)", "raw-store"):
        add_one[5](x, y, N=4)
    assert (y == -1).all()
    add_one[4](x, y, N=4)  # the same launch, one program fewer, is published
    np.testing.assert_array_equal(y, x[:16] + 1)


def test_a_failed_in_place_launch_leaves_the_array_untouched() -> None:
    x = np.arange(16, dtype=np.float32)
    with raises_at(MemoryAccessError, "`load` out of bounds in program (4, 0, 0)", "raw-load"):
        add_one[5](x, x, N=4)
    np.testing.assert_array_equal(x, np.arange(16, dtype=np.float32))


@pytest.mark.parametrize("kind, cls, message", [
    ("oob", MemoryAccessError, "`load` out of bounds in program (5, 0, 0)"),
    ("atomic", MemoryAccessError, "`load` out of bounds in program (5, 0, 0)"),
    ("assert", ExecutionError, "program fail_at fails (program (5, 0, 0))"),
    ("div0", ExecutionError, "integer division by zero in program (5, 0, 0)"),
    ("zero-step", ExecutionError, "loop step is 0 in program (5, 0, 0)"),
])
def test_every_execution_error_leaves_the_arrays_untouched(
        kind: str, cls: type[TilekitError], message: str) -> None:
    y = np.linspace(-1, 1, 9, dtype=np.float32)
    before = y.copy()
    with raises_at(cls, message, f"fail-{'oob' if kind == 'atomic' else kind}"):
        write_then_fail[9](y, 5, KIND=kind)
    np.testing.assert_array_equal(y, before)
    write_then_fail[9](y, -1, KIND=kind)  # no failure: the writes are published
    np.testing.assert_array_equal(y, before + 5 if kind == "atomic" else 5.0)


def test_ctrl_c_leaves_the_arrays_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT in the middle of a long grid stops it (KeyboardInterrupt) with the output
    as it was."""
    def print_then_interrupt(ctx: interpreter.ExecContext, prefix: str, values: Any) -> None:
        if ctx.program_id[0] == 3:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(interpreter.ExecContext, "print", print_then_interrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    y = np.zeros(10**6, np.float32)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_and_print[10**6](y)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not y.any()


def test_a_read_only_alias_of_a_written_array_sees_the_writes() -> None:
    base = np.arange(12, dtype=np.float32)
    ref = base.copy()
    x = base[::-1]
    x.flags.writeable = False
    neighbours[3](x, base, -1, N=4)
    run_in_place(neighbours, 3, ref[::-1], ref, -1, N=4)
    np.testing.assert_array_equal(base, ref)
    assert not x.flags.writeable


def test_a_reinterpreted_alias_reads_the_bits_written() -> None:
    """X is Y's memory, one element back, read as int32: a program reads the float bits
    the program before it stored."""
    base = np.linspace(0.5, 3, 11, dtype=np.float32)
    ref = base.copy()
    neighbours[10](base.view(np.int32)[:-1], base[1:], -1, N=1)
    run_in_place(neighbours, 10, ref.view(np.int32)[:-1], ref[1:], -1, N=1)
    assert not np.array_equal(ref[2:], np.linspace(0.5, 3, 11, dtype=np.float32)[2:])
    np.testing.assert_array_equal(base.view(np.int32), ref.view(np.int32))


def test_torch_cpu_tensors_alias_as_in_place() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(20, dtype=torch.float32)
    ref = t.numpy().copy()
    neighbours[5](t[:-1], t[1:], -1, N=4)
    run_in_place(neighbours, 5, ref[:-1], ref[1:], -1, N=4)
    np.testing.assert_array_equal(t.numpy(), ref)


def _view_1d(start: int, step: int, length: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda base: base[start::step][:length]


@settings(max_examples=40)
@given(n=st.integers(1, 37), data=st.data())
def test_aliasing_1d_views_compute_as_in_place(n: int, data: st.DataObject) -> None:
    """Random (overlapping, shifted, reversed, strided) views of one buffer: the launch
    gives byte for byte what running in place gives, and a failure leaves the buffer as
    it was."""
    views = []
    for _ in range(2):
        start = data.draw(st.integers(0, n - 1))
        step = data.draw(st.sampled_from([-3, -2, -1, 1, 1, 2, 3]))
        views.append(_view_1d(start, step, data.draw(st.integers(1, n))))
    block = data.draw(st.sampled_from([1, 3, 4]))
    base = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    x, y = views[0](base), views[1](base)
    grid = tk.cdiv(max(len(x), len(y)), block)
    fail_at = data.draw(st.integers(-1, grid - 1))
    before, ref = base.copy(), base.copy()
    if fail_at >= 0:
        with pytest.raises(ExecutionError, match=f"program \\({fail_at}, 0, 0\\)"):
            neighbours[grid](x, y, fail_at, N=block)
        np.testing.assert_array_equal(base, before)
    else:
        neighbours[grid](x, y, -1, N=block)
        run_in_place(neighbours, grid, views[0](ref), views[1](ref), -1, N=block)
        np.testing.assert_array_equal(base, ref)


_VIEWS_2D: list[Callable[[np.ndarray], np.ndarray]] = [
    lambda b: b, lambda b: b.T, lambda b: b[1:, :-1], lambda b: b[::2, 1:],
    lambda b: b[:, ::-1], lambda b: b[::-1, ::3].T, lambda b: b[:, 1:4], lambda b: b[2:, 2:],
]


@settings(max_examples=30)
@given(rows=st.integers(3, 9), cols=st.integers(4, 11), data=st.data())
def test_aliasing_2d_views_compute_as_in_place(rows: int, cols: int,
                                               data: st.DataObject) -> None:
    vx = data.draw(st.sampled_from(_VIEWS_2D))
    vy = data.draw(st.sampled_from(_VIEWS_2D))
    base = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype(np.float32)
    x, y = vx(base), vy(base)
    br, bc = data.draw(st.sampled_from([(1, 1), (2, 4), (4, 2)]))
    grid = (tk.cdiv(max(x.shape[0], y.shape[0]), br), tk.cdiv(max(x.shape[1], y.shape[1]), bc))
    fail = data.draw(st.booleans())
    fail_at = grid[0] - 1 + (grid[1] - 1) * 1000 if fail else -1  # the last program
    before, ref = base.copy(), base.copy()
    if fail:
        with pytest.raises(ExecutionError, match="fail_at"):
            neighbours_2d[grid](x, y, fail_at, BR=br, BC=bc)
        np.testing.assert_array_equal(base, before)
    else:
        neighbours_2d[grid](x, y, -1, BR=br, BC=bc)
        run_in_place(neighbours_2d, grid, vx(ref), vy(ref), -1, BR=br, BC=bc)
        np.testing.assert_array_equal(base, ref)


def test_shadow_memory_copies_only_what_overlaps_a_written_argument() -> None:
    """Read-only arguments apart from the written ones, empty arrays and the launch's own
    host copies of device arrays run in place; a shadow keeps each view's layout and
    alignment; commit publishes the written views only."""
    base = np.zeros((6, 8), np.float64)
    other = np.ones(5, np.float32)
    staged = to_host(np.ones(3, np.float32), "d", None)._replace(writeback=lambda: None)
    args = [base[:, 1::2], base.T, other, np.zeros((0, 3), np.float32), staged.array]
    hosts = [to_host(a, f"a{i}", None) for i, a in enumerate(args[:4])] + [staged]
    shadows = Shadows(hosts, [True, False, False, True, True])
    new = [h.array for h in shadows.hosts]
    assert new[2] is other and new[3] is args[3] and new[4] is staged.array
    for old, shadow in zip(args[:2], new[:2]):
        assert not np.shares_memory(shadow, base)
        assert shadow.strides == old.strides and shadow.dtype == old.dtype
        assert shadow.ctypes.data % 64 == old.ctypes.data % 64
    new[0][...] = 7.0  # seen through the other view (one shadow buffer), not in base
    np.testing.assert_array_equal(new[1].T, np.tile([0.0, 7.0], (6, 4)))
    assert (base == 0).all()
    shadows.commit()
    np.testing.assert_array_equal(base, np.tile([0.0, 7.0], (6, 4)))


# --- item 9: a masked access is checked on its active lanes, exactly -----------------------


def _element_offsets(a: np.ndarray) -> dict[int, tuple[int, ...]]:
    """Each element offset of a view (in elements, from its index 0) -> its index."""
    item = a.dtype.itemsize
    return {sum(i * s // item for i, s in zip(idx, a.strides)): idx
            for idx in np.ndindex(*a.shape)}


def _first_fault(programs: Any, accesses: list[tuple[str, np.ndarray]]) -> Any:
    """Where the interpreter must stop: the first program (in launch order) with an active
    lane outside a view, in its first access that has one, at the first such lane.
    ``programs`` yields (program id, {access: (offsets, active)})."""
    valid = {name: np.array(list(_element_offsets(view))) for name, view in accesses}
    for pid, lanes in programs:
        for name, _ in accesses:
            offsets, active = lanes[name]
            bad = active & ~np.isin(offsets, valid[name])
            if bad.any():
                where = tuple(int(i) for i in np.argwhere(bad)[0])
                return name, pid, int(offsets[where]), where
    return None


def _expected_copy(programs: Any, x: np.ndarray, y: np.ndarray, add: bool = False) -> np.ndarray:
    """What a launch that does not fault leaves in ``y``: each program in launch order,
    each active store lane in row-major order, copies (or adds) X's element at its load
    offset (0 where the load is masked off) to Y's element at its store offset."""
    xs, ys = _element_offsets(x), _element_offsets(y)
    out = y.copy()
    for _, lanes in programs:
        (lx, lm), (sx, sm) = lanes["load"], lanes["store"]
        for k in zip(*np.nonzero(sm)):
            v = x[xs[int(lx[k])]] if lm[k] else 0
            out[ys[int(sx[k])]] = out[ys[int(sx[k])]] + v if add else v
    return out


@settings(max_examples=60)
@given(nx=st.integers(1, 29), ny=st.integers(1, 29), sx=st.sampled_from([1, 2, 3]),
       sy=st.sampled_from([1, 2]), block=st.sampled_from([1, 4, 5]),
       shift=st.integers(-3, 1), lo=st.integers(-2, 1), extra=st.integers(-2, 3),
       atomic=st.booleans())
def test_masked_accesses_check_active_lanes_only(nx: int, ny: int, sx: int, sy: int,
                                                  block: int, shift: int, lo: int, extra: int,
                                                  atomic: bool) -> None:
    """1-D strided views of bigger buffers: lanes the mask turns off may point anywhere;
    an active lane outside its view raises at the access's line with the program id,
    offset, index and lane. The output is untouched then, else it holds the copy."""
    rng = np.random.default_rng(nx * 31 + ny)
    xbase = rng.standard_normal(nx * sx + 5).astype(np.float32)
    ybase = np.full(ny * sy + 5, -1.0, np.float32)
    x, y = xbase[:nx * sx:sx], ybase[:ny * sy:sy]
    hi = min(nx, ny) + extra
    grid = tk.cdiv(max(nx, ny) + 3, block)
    before = ybase.copy()

    def programs() -> Iterator[tuple[tuple[int, int, int], dict[str, Any]]]:
        for p in range(grid):
            i = p * block + np.arange(block) + shift
            m = (i >= lo) & (i < hi)
            loads = (i >= 0) & (i < nx) if atomic else m
            yield (p, 0, 0), {"load": (i * sx, loads), "store": (i * sy, m)}

    name = "atomic" if atomic else "store"
    fault = _first_fault(programs(), [("load", x), ("store", y)])
    kern = masked_atomic if atomic else masked_copy
    if fault is None:
        expect = _expected_copy(programs(), x, y, add=atomic)
        kern[grid](x, y, shift, lo, hi, N=block)
        np.testing.assert_array_equal(y, expect)
        return
    access, pid, offset, lane = fault
    op, view, tensor, stride = ("load", x, "X", sx) if access == "load" else (name, y, "Y", sy)
    with raises_at(MemoryAccessError, f"`{op}` out of bounds in program {pid}: element offset "
                   f"{offset} (index ({offset // stride},)) is outside `{tensor}` of shape "
                   f"({len(view)},)", f"masked-{op}"):
        kern[grid](x, y, shift, lo, hi, N=block)
    with pytest.raises(MemoryAccessError, match=f"at position \\({lane[0]},\\) of the tile"):
        kern[grid](x, y, shift, lo, hi, N=block)
    np.testing.assert_array_equal(ybase, before)


_BASE_VIEWS_2D: list[Callable[[np.ndarray], np.ndarray]] = [
    lambda b: b[1:-1, 2:-1],        # a window with gaps between its rows
    lambda b: b[::2, ::3],          # strided both ways
    lambda b: b[1:-1, 2:-1].T,      # transposed window
    lambda b: b[::-1, 1:],          # rows reversed
]


@settings(max_examples=50)
@given(rows=st.integers(3, 9), cols=st.integers(4, 12), vx=st.sampled_from(_BASE_VIEWS_2D),
       vy=st.sampled_from(_BASE_VIEWS_2D), br=st.sampled_from([1, 2, 3]),
       bc=st.sampled_from([2, 4]), rextra=st.integers(-1, 2), cextra=st.integers(-1, 2))
def test_masked_2d_accesses_check_active_lanes_exactly(
        rows: int, cols: int, vx: Any, vy: Any, br: int, bc: int, rextra: int,
        cextra: int) -> None:
    """2-D views with gaps (windows, strided, transposed, reversed): an active lane whose
    offset falls between rows (inside the buffer, outside the view) raises; a lane whose
    offset is another element of the view (row wrap) is a legal access."""
    xbase = np.random.default_rng(rows + cols).standard_normal((rows, cols)).astype(np.float32)
    ybase = np.full((rows, cols), -1.0, np.float32)
    x, y = vx(xbase), vy(ybase)
    rhi = min(x.shape[0], y.shape[0]) + rextra
    chi = min(x.shape[1], y.shape[1]) + cextra
    grid = (tk.cdiv(max(x.shape[0], y.shape[0]) + 2, br),
            tk.cdiv(max(x.shape[1], y.shape[1]) + 2, bc))
    before = ybase.copy()

    def offsets(view: np.ndarray, r: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.broadcast_to(r * (view.strides[0] // 4) + c * (view.strides[1] // 4),
                               (br, bc))

    def programs() -> Iterator[tuple[tuple[int, int, int], dict[str, Any]]]:
        for py in range(grid[1]):
            for px in range(grid[0]):
                r = px * br + np.arange(br)[:, None]
                c = py * bc + np.arange(bc)[None, :]
                m = np.broadcast_to((r < rhi) & (c < chi), (br, bc))
                yield (px, py, 0), {"load": (offsets(x, r, c), m),
                                    "store": (offsets(y, r, c), m)}

    fault = _first_fault(programs(), [("load", x), ("store", y)])
    if fault is None:
        expect = _expected_copy(programs(), x, y)
        masked_copy_2d[grid](x, y, rhi, chi, BR=br, BC=bc)
        np.testing.assert_array_equal(y, expect)
        return
    name, pid, offset, lane = fault
    tensor = "X" if name == "load" else "Y"
    with raises_at(MemoryAccessError, f"`{name}` out of bounds in program {pid}: element offset "
                   f"{offset} ", f"masked-{name}-2d"):
        masked_copy_2d[grid](x, y, rhi, chi, BR=br, BC=bc)
    with pytest.raises(MemoryAccessError, match=f"outside `{tensor}` .*at position "
                       f"\\({lane[0]}, {lane[1]}\\) of the tile"):
        masked_copy_2d[grid](x, y, rhi, chi, BR=br, BC=bc)
    np.testing.assert_array_equal(ybase, before)


# --- the same guarantees on the GPU -------------------------------------------------------


@pytest.mark.gpu
def test_gpu_grid_past_the_device_limits_is_refused_with_arrays_untouched() -> None:
    x, y = np.arange(8, dtype=np.float32), np.full(8, -1.0, np.float32)
    with knobs.override(interpret=False):
        with raises_at(LaunchError, "grid dimension 1 (y) is 70000", "gpu-big-grid"):
            add_one[1, 70000](x, y, N=8)  # <-- gpu-big-grid
        assert (y == -1).all()
        add_one[1](x, y, N=8)  # the kernel itself runs
    np.testing.assert_array_equal(y, x + 1)
