"""Check mode (``TILEKIT_CHECK=1``) on the GPU: every test here needs one (marked ``gpu``).

* A raw store one program past the end (issue 27, repro 5) raises ``MemoryAccessError``
  at the store's line, with the program id and the index, worded as the interpreter words
  it; the bytes just past the array (a view into a larger buffer) and the array itself are
  as they were. Without check mode the same launch writes past the end: the guard can fail.
* Loads and atomics too, a write into the gap of a column slice, a fault in a loop before a
  later one (the first in program order is reported), several faulting programs (the
  lowest is reported), a failed assert (the arrays are left too), and a good launch after
  a fault.
* Masked-off lanes never fault; tile views at any index never fault.
* A representative subset of the differential suite (its tests, imported below) runs in
  check mode, with a ``backend`` fixture that checks every kernel it loaded was checked.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

import tilekit as tk
from tests.lang import test_differential as D
from tests.lang import test_examples as E
from tilekit import knobs
from tilekit.errors import ExecutionError, MemoryAccessError
from tilekit.rt import gpu

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("backend")]


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The CUDA backend in check mode (this module's; the suite's runs the interpreter and
    the GPU without it). Every kernel loaded while the knob is on must be a checked one."""
    loads: list[tuple[bool, Any]] = []
    real = gpu._load

    def spy(kern: Any, variant: Any, loc: Any, untraced: Any = None) -> Any:
        loaded = real(kern, variant, loc, untraced)
        loads.append((knobs.CHECK.get(), loaded))
        return loaded

    monkeypatch.setattr(gpu, "_load", spy)
    with knobs.override(interpret=False, check=True):
        yield "cuda-check"
    assert all(loaded.compiled.checked == on for on, loaded in loads)


def torch_cuda() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch


def _line(kernel: Any, marker: str) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def host_view(t: Any) -> np.ndarray:
    """A host copy of torch tensor ``t`` with its strides: a view into a copy of the memory
    it spans (``t.cpu()`` of a view with gaps is contiguous, and the same offsets mean
    other elements there)."""
    if t.numel() == 0:
        return t.cpu().numpy().copy()
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    flat = t.as_strided((span,), (1,)).cpu().numpy().copy()
    return np.lib.stride_tricks.as_strided(flat, tuple(t.shape),
                                           tuple(s * flat.itemsize for s in t.stride()))


def interpreter_error(kernel: Any, grid: Any, *args: Any, **constexprs: Any) -> Any:
    """The interpreter's error for the same launch on host copies of the same views."""
    host = [host_view(a) if hasattr(a, "cpu") else a for a in args]
    with knobs.override(interpret=True, check=False), \
            pytest.raises(MemoryAccessError) as err:
        kernel[grid](*host, **constexprs)
    return err.value


# --- the repro and its relatives --------------------------------------------------------------


@tk.kernel
def store_block(X, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(X, offs, offs.to(tk.float32))  # <-- the store


def test_a_store_one_program_past_the_end_raises_and_writes_nothing():
    torch = torch_cuda()
    n, block, lead = 1000, 128, 37  # 8 programs cover 1024 > 1000; the 9th is past them all
    grid = (n + block - 1) // block + 1
    base = torch.full((lead + n + 2 * block,), -1.0, device="cuda")
    x = base[lead:lead + n]  # a view at an offset into a larger buffer
    with pytest.raises(MemoryAccessError) as err:
        store_block[grid](x, BLOCK=block)
    expected = interpreter_error(store_block, grid, x, BLOCK=block)
    assert str(err.value) == str(expected)
    assert "in program (7, 0, 0): element offset 1000 (index (1000,)) is outside `X` of " \
        "shape (1000,) (at position (104,) of the tile)" in str(err.value)
    assert err.value.loc.line == _line(store_block, "the store")
    torch.cuda.synchronize()
    assert bool((base == -1.0).all()), "the array and the bytes around it are untouched"
    # the same launch without check mode writes past the end (what the check prevents)
    with knobs.override(check=False):
        store_block[grid](x, BLOCK=block)
    torch.cuda.synchronize()
    assert bool((base[lead + n:lead + n + block] != -1.0).any())
    # and a grid that covers exactly the view runs in check mode, after the fault (no
    # grid of 128-element blocks does: 1000 is not a multiple of 128)
    base.fill_(-1.0)
    store_block[n // 8](x, BLOCK=8)
    assert bool((x == torch.arange(n, device="cuda", dtype=torch.float32)).all())
    assert bool((base[:lead] == -1.0).all()) and bool((base[lead + n:] == -1.0).all())


def test_host_arrays_are_left_as_they_were():
    x = np.full(1000, -1.0, np.float32)
    with pytest.raises(MemoryAccessError):
        store_block[9](x, BLOCK=128)
    assert np.all(x == -1.0)


@tk.kernel
def gather_block(X, Out, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(Out, offs, tk.load(X, offs + 3))  # <-- the load


@tk.kernel
def count_into(H, Idx, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.atomic_add(H, tk.load(Idx, offs), tk.full((BLOCK,), 1, tk.int32))  # <-- the atomic


def test_loads_and_atomics_out_of_bounds():
    torch = torch_cuda()
    x = torch.arange(256, device="cuda", dtype=torch.float32)
    out = torch.full((256,), -1.0, device="cuda")
    with pytest.raises(MemoryAccessError) as err:
        gather_block[2](x, out, BLOCK=128)
    assert str(err.value) == str(interpreter_error(gather_block, 2, x, out, BLOCK=128))
    assert err.value.loc.line == _line(gather_block, "the load")
    assert bool((out == -1.0).all())

    h = torch.zeros(37, device="cuda", dtype=torch.int32)
    idx = torch.randint(0, 37, (512,), device="cuda", dtype=torch.int32)
    idx[300] = 37  # one bin past the end, in program 2
    with pytest.raises(MemoryAccessError) as err:
        count_into[4](h, idx, BLOCK=128)
    assert str(err.value) == str(interpreter_error(count_into, 4, h, idx, BLOCK=128))
    assert err.value.loc.line == _line(count_into, "the atomic")
    assert "`atomic` out of bounds in program (2, 0, 0)" in str(err.value)
    assert int(h.sum()) == 0, "no program's atomics reached the histogram"
    idx[300] = 5
    count_into[4](h, idx, BLOCK=128)
    assert int(h.sum()) == 512


@tk.kernel
def store_rows(X, C: tk.constexpr):
    cols = tk.arange(C)
    tk.store(X, tk.program_id(0) * X.stride(0) + cols, cols.to(tk.float32))  # <-- row store


def test_a_write_into_the_gap_of_a_column_slice():
    torch = torch_cuda()
    base = torch.full((64, 48), -1.0, device="cuda")
    x = base[:, :37]  # rows 48 apart: a row of 40 writes 3 elements of the gap
    with pytest.raises(MemoryAccessError) as err:
        store_rows[64](x, C=40)
    assert str(err.value) == str(interpreter_error(store_rows, 64, x, C=40))
    assert "element offset 37 (index (0, 37)) is outside `X` of shape (64, 37) and " \
        "strides (48, 1)" in str(err.value)
    assert bool((base == -1.0).all())
    store_rows[64](x, C=37)
    assert bool((base[:, 37:] == -1.0).all()) and bool((base[:, :37] >= 0).all())


@tk.kernel
def loop_then_store(X, Y, TRIPS: tk.constexpr, BLOCK: tk.constexpr):
    acc = tk.zeros((BLOCK,), tk.float32)
    for i in tk.range(0, TRIPS):
        acc += tk.load(X, i * BLOCK + tk.arange(BLOCK))  # <-- the loop's load
    tk.store(Y, tk.program_id(0) * BLOCK + tk.arange(BLOCK), acc)  # <-- the store after


def test_the_first_fault_in_program_order_is_reported():
    """X holds 3 blocks, the loop reads 4: the load faults at trip 3 in every program, and
    the store after it faults in programs 2 and 3: the interpreter reports program 0's
    load, and so must the GPU."""
    torch = torch_cuda()
    x = torch.ones(3 * 64, device="cuda")
    y = torch.zeros(2 * 64, device="cuda")
    with pytest.raises(MemoryAccessError) as err:
        loop_then_store[4](x, y, TRIPS=4, BLOCK=64)
    assert str(err.value) == str(interpreter_error(loop_then_store, 4, x, y, TRIPS=4,
                                                   BLOCK=64))
    assert err.value.loc.line == _line(loop_then_store, "the loop's load")
    assert bool((y == 0).all())


def test_of_several_faulting_programs_the_lowest_is_reported():
    torch = torch_cuda()
    x = torch.zeros(100, device="cuda")
    for _ in range(3):  # whichever program the GPU runs first
        with pytest.raises(MemoryAccessError) as err:
            store_block[(40, 3)](x, BLOCK=32)
        assert "in program (3, 0, 0)" in str(err.value)
        assert "(at position (4,) of the tile)" in str(err.value)


@tk.kernel
def masked_everything(X, H, Out, n, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    m = offs < n
    x = tk.load(X, offs, mask=m, other=0.0)
    tk.atomic_add(H, offs % 7 + n * (1 - m.to(tk.int32)), tk.full((BLOCK,), 1, tk.int32),
                  mask=m)
    tk.store(Out, offs, x * 2, mask=m)


def test_masked_off_lanes_never_fault():
    torch = torch_cuda()
    n = 1001  # masked-off lanes of the last program hold offsets past the end
    x = torch.arange(n, device="cuda", dtype=torch.float32)
    h = torch.zeros(7, device="cuda", dtype=torch.int32)
    out = torch.zeros(n, device="cuda")
    masked_everything[8](x, h, out, n, BLOCK=128)
    assert bool((out == 2 * x).all()) and int(h.sum()) == n


@tk.kernel
def tile_at(X, AT: tk.constexpr, B: tk.constexpr):
    X.tile((B,), (AT,)).store(X.tile((B,), (AT,)).load(other=7) * 0 + 100)


@pytest.mark.parametrize("at", [-1, 4, -100, 1000])
def test_tile_views_outside_never_fault_nor_write(at: int):
    torch = torch_cuda()
    base = torch.full((64,), -1.0, device="cuda")
    tile_at[1](base[16:32], AT=at, B=16)
    assert bool((base == -1.0).all())


@tk.kernel
def write_then_assert(X, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(X, offs, offs.to(tk.float32))
    tk.device_assert(offs < 200, "offsets must be below 200")  # <-- the assert


def test_a_failed_assert_in_check_mode_leaves_the_arrays():
    torch = torch_cuda()
    x = torch.full((256,), -1.0, device="cuda")
    with pytest.raises(ExecutionError, match="offsets must be below 200") as err:
        write_then_assert[2](x, BLOCK=128)
    assert err.value.loc.line == _line(write_then_assert, "the assert")
    assert bool((x == -1.0).all())


# --- the differential suite, a representative subset, in check mode ---------------------------

DIFFERENTIAL = [
    "test_masked_gather_with_other", "test_load_other_scalar_and_tile", "test_masked_scatter",
    "test_masked_gather_2d", "test_atomics_with_duplicates", "test_atomic_masked_lanes_do_nothing",
    "test_scalar_atomic_tickets", "test_atomics_masked_lanes_with_invalid_offsets",
    "test_atomic_add_bfloat16", "test_strided_views_in_and_out",
    "test_broadcast_input_with_zero_strides", "test_strided_views_3d",
    "test_tensor_shape_and_strides", "test_regression_broadcast_view_longer_than_int32",
    "test_tile_view_entirely_outside", "test_zero_size_tensors", "test_empty_grid_runs_nothing",
    "test_transpose_tiles_ragged", "test_matmul_tiles", "test_loop_over_tile_views",
    "test_int64_index_math", "test_int64_tile_index", "test_rope", "test_cross_entropy",
    "test_column_softmax", "test_linear_epilogue", "test_rms_norm_f16",
    "test_when_taken_and_not_taken", "test_nested_loops_carrying_tiles",
    "test_loop_carried_tile_index", "test_grids_program_id_and_num_programs",
    "test_bool_tensors", "test_misc_values", "test_index_forms_and_negative_axes",
    "test_row_reduce_grid",
]
for _name in DIFFERENTIAL:
    globals()[_name] = getattr(D, _name)  # collected here: this module's backend, checked
test_example_ragged = E.test_example_ragged
