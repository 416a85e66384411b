"""Check mode's runtime half (``tilekit.rt.check_mode``, ``gpu.launch``), without a GPU.

* The fault a checked kernel records reads as the interpreter's error for the same access
  (message, line, hints), from the status words the device would write.
* Scratch copies: which arrays share one (overlapping memory), and a copy back writes the
  elements of a view and nothing else (property test against numpy).
* A whole checked launch through the CUDA backend on a simulated device (``Device``: memory
  as bytes, a Python stand-in for the kernel that writes through the pointers it is given
  and records a fault as the device code would): the kernel runs on copies; a failed launch
  leaves every byte of the caller's buffers as it was, a successful one writes exactly the
  view's elements; arrays that overlap share a copy; the fault is raised at the line.
* Check mode is its own variant and never takes the fast path.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import ctypes
import inspect
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilekit as tk
from tilekit import knobs
from tilekit.codegen.artifact import AccessSite, CheckWords
from tilekit.errors import ExecutionError, MemoryAccessError
from tilekit.rt import check_mode, device_arrays, driver, gpu

from .fake_gpu import Driver, FakeTensor, abi_compile, slots_of, use_fake_gpu


@tk.kernel
def store_block(X, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(X, offs, offs.to(tk.float32))  # <-- the store


@tk.kernel
def store_rows(X, C: tk.constexpr):
    row = tk.program_id(0)
    cols = tk.arange(C)
    tk.store(X, row * X.stride(0) + cols, cols.to(tk.float32))  # <-- the row store


def _line(kernel: Any, marker: str) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def fault_words(site: int, program: tuple[int, int, int], offset: int, position: int,
                rank: int = 0) -> np.ndarray:
    """The status words a checked kernel writes for its first fault."""
    words = check_mode.initial_status(16)
    words[CheckWords.CODE] = site + 1
    words[CheckWords.KEY_PROGRAM:CheckWords.KEY_PROGRAM + 2] = \
        np.array([program[0]], np.uint64).view(np.int32)
    words[CheckWords.KEY_ORDER:CheckWords.KEY_ORDER + 2] = \
        np.array([(rank << 32) | position], np.uint64).view(np.int32)
    words[CheckWords.OFFSET:CheckWords.OFFSET + 2] = np.array([offset], np.int64).view(np.int32)
    words[CheckWords.PROGRAM:CheckWords.PROGRAM + 3] = program
    return words


def interpreter_error(kernel: Any, grid: int, *args: Any, **constexprs: Any) -> Any:
    with knobs.override(interpret=True), pytest.raises(MemoryAccessError) as err:
        kernel[grid](*args, **constexprs)
    return err.value


@pytest.mark.parametrize("case", ["past_the_end", "in_a_gap"])
def test_a_recorded_fault_reads_as_the_interpreters_error(case: str):
    from tilekit.codegen.driver import compile_module

    if case == "past_the_end":  # 100 elements, 4 programs of 32: program 3 from element 4
        kernel, x, constexprs = store_block, np.zeros(100, np.float32), {"BLOCK": 32}
        grid, words = 4, fault_words(0, (3, 0, 0), 100, 4)
    else:  # the first 5 columns of a (10, 8) matrix, rows of 7: row 0's last two in the gap
        kernel, x, constexprs = store_rows, np.zeros((10, 8), np.float32)[:, :5], {"C": 7}
        grid, words = 10, fault_words(0, (0, 0, 0), 5, 5)
    expected = interpreter_error(kernel, grid, x, **constexprs)
    module = kernel.trace(x, **constexprs)
    compiled = compile_module(module, "sm_90a", check=True)
    arrays = {"X": device_arrays.DeviceArray("X", 0, None, x.shape,  # type: ignore[arg-type]
                                             tuple(s // 4 for s in x.strides), 0, "torch")}
    got = check_mode.access_error(compiled, words, arrays)
    assert got is not None
    assert str(got) == str(expected)
    assert got.loc is not None and got.loc.line == expected.loc.line
    assert got.hints == expected.hints


def test_nothing_recorded_is_no_error():
    from tilekit.codegen.artifact import CompiledKernel

    compiled = CompiledKernel("k", "sm_90a", "ptx", b"", 4, 32, 0, (), checked=True,
                              access_sites=(AccessSite("load", "X", (8,), "f.py", 3),))
    assert check_mode.access_error(compiled, check_mode.initial_status(16), {}) is None


# --- scratch copies -------------------------------------------------------------------------


def element_bytes(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> set[int]:
    """The bytes of a view's elements, counted from its lowest-addressed element."""
    if any(n == 0 for n in shape):
        return set()
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    out = set()
    for index in itertools.product(*(range(n) for n in shape)):
        first = (sum(i * s for i, s in zip(index, strides)) - low) * itemsize
        out.update(range(first, first + itemsize))
    return out


def block_bytes(blocks: list[check_mode.Block]) -> set[int]:
    out: set[int] = set()
    for b in blocks:
        assert b.rows == 1 or b.pitch >= b.row_bytes
        for r in range(b.rows):
            out.update(range(b.offset + r * b.pitch, b.offset + r * b.pitch + b.row_bytes))
    return out


views = st.integers(0, 3).flatmap(lambda rank: st.tuples(
    st.tuples(*[st.integers(0, 4)] * rank), st.tuples(*[st.integers(-12, 12)] * rank),
    st.sampled_from([1, 2, 4, 8])))


@given(views)
def test_a_copy_back_writes_the_elements_and_nothing_else(view):
    shape, strides, itemsize = view
    blocks = check_mode.element_blocks(shape, strides, itemsize)
    want = element_bytes(shape, strides, itemsize)
    got = block_bytes(blocks)
    dims = sorted(((abs(s), n) for n, s in zip(shape, strides) if n > 1 and s), reverse=True)
    reach, nested = 0, True
    for a, n in reversed(dims):
        nested, reach = nested and a > reach, reach + a * (n - 1)
    if not want:
        assert blocks == []
    elif nested:
        assert got == want
        assert len(blocks) <= max(1, np.prod([n for _, n in dims[:-1]] or [1]))
    else:  # overlapping or interleaved: the whole span
        assert got == set(range((reach + 1) * itemsize)) >= want


def test_a_column_slice_copies_back_rows():
    blocks = check_mode.element_blocks((1000, 37), (64, 1), 4)
    assert blocks == [check_mode.Block(0, 148, 256, 1000)]
    assert check_mode.element_blocks((1000, 64), (64, 1), 2) == \
        [check_mode.Block(0, 128000, 128000, 1)]


class _Arr:
    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        self.ptr, self.shape, self.strides = ptr, shape, strides
        self.dtype = np.dtype(np.float32)


def test_overlapping_arrays_share_a_copy():
    arrays = {"A": _Arr(1000, (10,), (1,)), "B": _Arr(1036, (10,), (1,)),  # overlaps A
              "C": _Arr(1072, (4,), (1,)),  # overlaps B only: joins the group
              "D": _Arr(1088, (4,), (1,)),  # starts where C ends: its own
              "E": _Arr(5000, (0,), (1,))}  # empty: none
    groups = check_mode.plan_groups(arrays, {"A", "D"})
    assert groups == [check_mode.Group(1000, 1088, ("A", "B", "C"), ("A",)),
                      check_mode.Group(1088, 1104, ("D",), ("D",))]
    assert check_mode.plan_groups(arrays, {"E"}) == []


# --- a checked launch on a simulated device -------------------------------------------------


class Device:
    """Device memory as bytes, and the driver calls a checked launch makes on it."""

    def __init__(self) -> None:
        self.buffers: dict[int, bytearray] = {}
        self.freed: list[int] = []
        self._next = itertools.count(0x7A00_0000_0000 + 0x30, 0x100_0000)  # odd alignment

    def alloc(self, nbytes: int, *rest: Any) -> int:
        base = next(self._next)
        self.buffers[base] = bytearray(nbytes)
        return base

    def place(self, data: np.ndarray) -> int:
        """A buffer holding ``data``'s bytes; its address."""
        base = self.alloc(data.nbytes)
        self.buffers[base][:] = data.tobytes()
        return base

    def at(self, ptr: int, nbytes: int) -> memoryview:
        for base, buf in self.buffers.items():
            if base <= ptr and ptr + nbytes <= base + len(buf):
                return memoryview(buf)[ptr - base:ptr - base + nbytes]
        raise AssertionError(f"{nbytes} bytes at {ptr:#x}: outside every buffer")

    def read(self, ptr: int, dtype: Any, count: int) -> np.ndarray:
        return np.frombuffer(bytes(self.at(ptr, count * np.dtype(dtype).itemsize)), dtype)

    def free(self, ptr: int, *rest: Any) -> None:
        assert ptr in self.buffers
        self.freed.append(ptr)

    def copy(self, dst: int, src: int, nbytes: int, *rest: Any) -> None:
        if nbytes:
            self.at(dst, nbytes)[:] = bytes(self.at(src, nbytes))

    def copy_rows(self, dst: int, dst_pitch: int, src: int, src_pitch: int, row_bytes: int,
                  rows: int, *rest: Any) -> None:
        for r in range(rows):
            self.copy(dst + r * dst_pitch, src + r * src_pitch, row_bytes)

    def to_host(self, host: int, src: int, nbytes: int, *rest: Any) -> None:
        ctypes.memmove(host, bytes(self.at(src, nbytes)), nbytes)

    def to_device(self, dst: int, host: int, nbytes: int, *rest: Any) -> None:
        self.at(dst, nbytes)[:] = ctypes.string_at(host, nbytes)

    def memset32(self, dst: int, value: int, count: int, *rest: Any) -> None:
        self.at(dst, 4 * count)[:] = np.full(count, value, np.uint32).tobytes()

    def record(self, status: int, site: int, program: tuple[int, int, int], offset: int,
               position: int, rank: int = 0) -> None:
        """What ``tk_access_fault`` does: keep the fault with the lowest key."""
        words = np.frombuffer(bytes(self.at(status, 64)), np.int32).copy()
        key = (program[0], (rank << 32) | position)
        old = tuple(int(v) for v in words[CheckWords.KEY_PROGRAM:].view(np.uint64)[:2])
        if key < old:
            self.at(status, 64)[:] = fault_words(site, program, offset, position, rank).tobytes()


Kernel = Callable[[Device, dict[str, int], int], None]


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake GPU (``use_fake_gpu``) with memory: kernels compile to the ABI plus
    ``access_sites`` when checked; a launch runs ``device.kernel(device, slots, grid)``."""
    dev = Device()
    drv: Driver = use_fake_gpu(monkeypatch)
    dev.driver = drv  # type: ignore[attr-defined]

    def load(kern: Any, variant: gpu.Variant, loc: Any, untraced: Any = None) -> Any:
        if variant in kern._loaded:
            return kern._loaded[variant]
        drv.variants.append(variant)
        from tilekit.ir.passes import written_args

        module = kern.specialize(variant.spec)
        compiled = abi_compile(module, "sm_90a", variant.divisible)._replace(
            written_args=written_args(module))
        if variant.checked:
            compiled = compiled._replace(checked=True, access_sites=(
                AccessSite("store", "X", (32,), "kernel.py", 7),))
        status = 0
        if compiled.may_fail:
            status = dev.alloc(4 * compiled.status_words)
            dev.at(status, 4 * compiled.status_words)[:] = \
                check_mode.initial_status(compiled.status_words).tobytes()
        function = driver.LoadedFunction(None, None, 0x1000 + len(drv.variants), 0)
        loaded = gpu.LoadedKernel.build(compiled, function, drv_props(), status)
        kern._loaded[variant] = loaded
        return loaded

    def launch_fn(fh: Any, gx: int, gy: int, gz: int, *rest: Any) -> int:
        rc = drv.launch_fn(fh, gx, gy, gz, *rest)
        kern = dev.kernel_object  # type: ignore[attr-defined]
        loaded = next(v for v in kern._loaded.values() if v.function.handle == fh.value)
        values = slots_of(drv.launches[-1], loaded)
        slots = {f"{p.kind.value}:{p.arg}:{p.axis}": v
                 for p, v in zip(loaded.compiled.params, values)}
        dev.kernel(dev, slots, gx)  # type: ignore[attr-defined]
        return rc

    monkeypatch.setattr(gpu, "_load", load)
    monkeypatch.setattr(driver, "launch_fn", lambda: launch_fn)
    for name, fn in [("alloc_async", dev.alloc), ("free_async", dev.free),
                     ("copy_device", dev.copy), ("copy_rows", dev.copy_rows),
                     ("copy_to_host", dev.to_host), ("copy_to_device", dev.to_device),
                     ("memset32", dev.memset32), ("synchronize", lambda *a, **k: None)]:
        monkeypatch.setattr(driver, name, fn)
    return dev


def drv_props() -> Any:
    from .fake_gpu import PROPS

    return PROPS


def store_kernel(block: int, fault_from: int | None = None) -> Kernel:
    """``store_block`` on the device: each program writes its elements of X (float32 of the
    element index) through the pointer it got; with ``fault_from``, the elements from there
    are out of bounds: recorded, not written."""
    def run(dev: Device, slots: dict[str, int], grid: int) -> None:
        ptr, size = slots["pointer:X:-1"], slots["size:X:0"]
        for pid in range(grid):
            for lane in range(block):
                i = pid * block + lane
                if i < size and (fault_from is None or i < fault_from):
                    dev.at(ptr + 4 * i, 4)[:] = np.float32(i).tobytes()
                else:
                    dev.record(slots["status::-1"], 0, (pid, 0, 0), i, lane)
    return run


def test_a_failed_checked_launch_leaves_the_buffer_as_it_was(device: Device):
    base = device.place(np.full(100 + 64, -1.0, np.float32))  # 64 guard elements after X
    x = FakeTensor((100,), ptr=base)
    device.kernel, device.kernel_object = store_kernel(32), store_block  # type: ignore
    store_block._loaded.clear()
    with knobs.override(check=True), pytest.raises(MemoryAccessError) as err:
        store_block[4](x, BLOCK=32)  # one program past the end
    assert "`store` out of bounds in program (3, 0, 0): element offset 100 (index (100,)) " \
        "is outside `X` of shape (100,) (at position (4,) of the tile)" in str(err.value)
    assert err.value.loc.file == "kernel.py" and err.value.loc.line == 7
    # programs 0-2 wrote their 96 elements, into the copy: nothing reached the buffer
    assert np.all(device.read(base, np.float32, 164) == -1.0)
    assert len(device.freed) == 1  # the copy
    # the status buffer was reset: the next launch of a good grid succeeds
    store_block[3](FakeTensor((96,), ptr=base), BLOCK=32)
    got = device.read(base, np.float32, 164)
    assert np.array_equal(got[:96], np.arange(96, dtype=np.float32)) and np.all(got[96:] == -1)
    store_block._loaded.clear()


def test_a_view_at_an_offset_into_a_larger_buffer_is_left_as_it_was(device: Device):
    """The GPU test's case: ``x = base[lead:lead + n]``, a view at a nonzero offset into a
    larger allocation, guard elements before and after it. The kernel gets a copy of the
    view's own span (its first element at the copy's start, at the view's address modulo
    the scratch alignment); a failed launch leaves every byte of the buffer as it was, and
    a right grid after it writes exactly the view's elements."""
    n, lead, tail = 1000, 37, 64
    base = device.place(np.full(lead + n + tail, -1.0, np.float32))
    x = FakeTensor((n,), ptr=base + 4 * lead)
    got: list[int] = []

    def run(block: int, fault_from: int | None = None) -> Kernel:
        inner = store_kernel(block, fault_from)

        def kernel(dev: Device, slots: dict[str, int], grid: int) -> None:
            got.append(slots["pointer:X:-1"])
            inner(dev, slots, grid)
        return kernel

    device.kernel, device.kernel_object = run(32), store_block  # type: ignore
    store_block._loaded.clear()
    with knobs.override(check=True), pytest.raises(MemoryAccessError) as err:
        store_block[33](x, BLOCK=32)  # 32 programs cover 1024 > 1000; one more past them
    assert "`store` out of bounds in program (31, 0, 0): element offset 1000 (index " \
        "(1000,)) is outside `X` of shape (1000,) (at position (8,) of the tile)" \
        in str(err.value)
    assert got[-1] != x.data_ptr() and got[-1] % check_mode.SCRATCH_ALIGN == \
        x.data_ptr() % check_mode.SCRATCH_ALIGN
    assert not base <= got[-1] < base + 4 * (lead + n + tail), "not into the caller's buffer"
    assert np.all(device.read(base, np.float32, lead + n + tail) == -1.0)
    device.kernel = run(8)  # type: ignore[attr-defined]
    with knobs.override(check=True):
        store_block[n // 8](x, BLOCK=8)  # exactly the view
    out = device.read(base, np.float32, lead + n + tail)
    assert np.array_equal(out[lead:lead + n], np.arange(n, dtype=np.float32))
    assert np.all(out[:lead] == -1.0) and np.all(out[lead + n:] == -1.0)
    store_block._loaded.clear()


def test_a_checked_launch_copies_back_only_the_views_elements(device: Device):
    """A kernel that scribbles over every byte its copy spans (as no correct kernel does:
    the check stops it) still changes only the view's elements, not the gaps between rows."""
    full = np.full((10, 8), -1.0, np.float32)
    base = device.place(full)
    x = FakeTensor((10, 5), ptr=base, strides=(8, 1))  # a column slice

    def scribble(dev: Device, slots: dict[str, int], grid: int) -> None:
        ptr = slots["pointer:X:-1"]
        dev.at(ptr, 4 * (9 * 8 + 5))[:] = np.full(9 * 8 + 5, 7.0, np.float32).tobytes()

    device.kernel, device.kernel_object = scribble, store_rows  # type: ignore
    store_rows._loaded.clear()
    with knobs.override(check=True):
        store_rows[10](x, C=5)
    got = device.read(base, np.float32, 80).reshape(10, 8)
    assert np.all(got[:, :5] == 7.0) and np.all(got[:, 5:] == -1.0)
    store_rows._loaded.clear()


@tk.kernel
def copy_through(X, Y, N: tk.constexpr):
    tk.store(Y, tk.arange(N), tk.load(X, tk.arange(N)) + 1)


def test_arrays_that_overlap_share_a_copy(device: Device):
    base = device.place(np.arange(16, dtype=np.float32))
    x = FakeTensor((8,), ptr=base)
    y = FakeTensor((8,), ptr=base + 16)  # Y starts at X[4]
    seen: dict[str, int] = {}

    def run(dev: Device, slots: dict[str, int], grid: int) -> None:
        seen.update(slots)

    device.kernel, device.kernel_object = run, copy_through  # type: ignore
    copy_through._loaded.clear()
    with knobs.override(check=True):
        copy_through[1](x, y, N=8)
    px, py = seen["pointer:X:-1"], seen["pointer:Y:-1"]
    assert px != base and py - px == 16 and px % 256 == base % 256
    copy_through._loaded.clear()


def test_asserts_of_a_checked_kernel_also_leave_the_arrays(device: Device,
                                                           monkeypatch: pytest.MonkeyPatch):
    base = device.place(np.zeros(64, np.float32))
    x = FakeTensor((64,), ptr=base)

    def failing_assert(dev: Device, slots: dict[str, int], grid: int) -> None:
        dev.at(slots["pointer:X:-1"], 256)[:] = np.ones(64, np.float32).tobytes()
        dev.at(slots["status::-1"], 16)[:] = np.array([1, 1, 0, 0], np.int32).tobytes()

    from tilekit.codegen.artifact import AssertSite

    real = gpu._load

    def load(kern: Any, variant: Any, loc: Any, untraced: Any = None) -> Any:
        loaded = real(kern, variant, loc, untraced)
        compiled = loaded.compiled._replace(
            asserts=(AssertSite("device assertion failed: x must be positive", "k.py", 3),))
        return loaded._replace(compiled=compiled)

    monkeypatch.setattr(gpu, "_load", load)
    device.kernel, device.kernel_object = failing_assert, store_block  # type: ignore
    store_block._loaded.clear()
    with knobs.override(check=True), pytest.raises(ExecutionError) as err:
        store_block[2](x, BLOCK=32)
    assert str(err.value).startswith("k.py:3: error: device assertion failed: x must be "
                                     "positive (program (1, 0, 0))")
    assert np.all(device.read(base, np.float32, 64) == 0.0)
    store_block._loaded.clear()


def test_check_mode_is_its_own_variant_and_never_fast(device: Device):
    base = device.place(np.zeros(64, np.float32))
    x = FakeTensor((64,), ptr=base)
    device.kernel, device.kernel_object = store_kernel(32), store_block  # type: ignore
    store_block._loaded.clear()
    drv = device.driver  # type: ignore[attr-defined]
    store_block[2](x, BLOCK=32)
    store_block[2](x, BLOCK=32)
    assert [launch["path"] for launch in drv.launches] == ["slow", "fast"]
    with knobs.override(check=True):  # the fast path is off while the override is active
        store_block[2](x, BLOCK=32)
        store_block[2](x, BLOCK=32)
    store_block[2](x, BLOCK=32)
    assert [launch["path"] for launch in drv.launches] == ["slow", "fast", "slow", "slow",
                                                           "fast"]
    assert [v.checked for v in drv.variants] == [False, True]
    checked = next(v for k, v in store_block._loaded.items() if k.checked)
    assert checked.compiled.checked and not any(
        e[-1] is checked for d in store_block._loaded.fast.values() for e in d.table.values())
    store_block._loaded.clear()


def test_the_cache_key_says_checked():
    module = store_block.trace(np.zeros(64, np.float32), BLOCK=32)
    spec = next(iter(store_block._cache))
    plain = gpu.cache_key(module, spec, "sm_90a")
    checked = gpu.cache_key(module, spec, "sm_90a", check=True)
    assert plain.digest != checked.digest and "|check" in checked.text


def test_a_checked_kernel_round_trips_through_the_cache():
    from tilekit.codegen.artifact import CompiledKernel
    from tilekit.rt.cache import kernel_from_json, kernel_to_json

    compiled = CompiledKernel("k", "sm_90a", "ptx", b"", 4, 32, 0, (), checked=True,
                              access_sites=(AccessSite("atomic", "H", (4, 8), "f.py", 3, 9),))
    assert kernel_from_json(kernel_to_json(compiled), b"") == compiled
    plain = compiled._replace(checked=False, access_sites=())
    assert "checked" not in kernel_to_json(plain)  # entries of unchecked kernels unchanged
