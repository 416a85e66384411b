"""The CUDA runtime on a real GPU (skipped without one).

Code generation is replaced by hand-written PTX that follows the kernel ABI
(``ptx_kernels.fake_compile``), so these tests exercise the runtime alone: device arrays
without copies, numpy staging, streams, launch checks, the assert status word, caches.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.errors import ExecutionError, LaunchError
from tilekit.rt import cache, driver, gpu
from tilekit.rt.launcher import Launch

from .ptx_kernels import (
    ASSERT_LINE,
    add,
    check_positive,
    compiled_by_hand,
    vector_add_kernel,
)

pytestmark = pytest.mark.gpu

BLOCK = 128


@pytest.fixture(autouse=True)
def fake_codegen(monkeypatch: pytest.MonkeyPatch, tmp_path):  # type: ignore[no-untyped-def]
    with compiled_by_hand(monkeypatch, str(tmp_path)):
        yield


def run_add(x, y, out, n: int, **kw) -> None:  # type: ignore[no-untyped-def]
    add[tk.cdiv(n, BLOCK)](x, y, out, n, BLOCK=BLOCK, **kw)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Records the streams launched on (by the slow path's ``driver.launch_fn()`` and the
    fast path's ``driver.launch_ex_fn()``), every synchronization, and every slow-path
    launch."""
    calls: dict[str, list] = {"launch": [], "sync": [], "slow": []}
    real_launch, real_sync = driver.launch_fn(), driver.synchronize
    real_launch_ex = driver.launch_ex_fn()
    real_slow = Launch._launch

    def launch(fh, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # type: ignore[no-untyped-def]
        calls["launch"].append(0 if stream is None else stream.value)
        return real_launch(fh, gx, gy, gz, bx, by, bz, shared, stream, params, extra)

    def launch_ex(config, fh, params, extra):  # type: ignore[no-untyped-def]
        cfg = driver.structs()["CUlaunchConfig"].from_address(ctypes.addressof(config))
        calls["launch"].append(cfg.hStream or 0)
        return real_launch_ex(config, fh, params, extra)

    def synchronize(stream, loc=None):  # type: ignore[no-untyped-def]
        calls["sync"].append(stream)
        return real_sync(stream, loc)

    def slow(self, args, kwargs):  # type: ignore[no-untyped-def]
        calls["slow"].append(args)
        return real_slow(self, args, kwargs)

    monkeypatch.setattr(driver, "launch_fn", lambda: launch)
    monkeypatch.setattr(driver, "launch_ex_fn", lambda: launch_ex)
    monkeypatch.setattr(driver, "synchronize", synchronize)
    monkeypatch.setattr(Launch, "_launch", slow)
    return calls


# --- numpy: copied in and back ------------------------------------------------------------


def test_numpy_arrays_are_copied_in_and_back() -> None:
    rng = np.random.default_rng(0)
    n = 1000
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    out = np.full(n, np.nan, np.float32)
    run_add(x, y, out, n)
    np.testing.assert_array_equal(out, x + y)


def test_numpy_strided_output_keeps_its_gaps() -> None:
    n = 777
    x = np.arange(n, dtype=np.float32)
    full = np.full(2 * n, -1.0, np.float32)
    run_add(x, x, full[::2], n)
    np.testing.assert_array_equal(full[::2], 2 * x)
    np.testing.assert_array_equal(full[1::2], -1.0)


def test_read_only_numpy_output_is_refused_and_untouched() -> None:
    x = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    out.flags.writeable = False
    with pytest.raises(LaunchError, match="writes to `Out`.*read-only") as info:
        run_add(x, x, out, 256)
    assert info.value.loc is not None and info.value.loc.file == __file__
    assert not out.any()


# --- torch: in place, on the current stream -----------------------------------------------


def _torch():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.parametrize("view", ["contiguous", "strided", "offset"])
def test_torch_tensors_without_copies(view: str, spy) -> None:  # type: ignore[no-untyped-def]
    torch = _torch()
    base_x = torch.randn(4099, device="cuda")
    base_y = torch.randn(4099, device="cuda")
    base_out = torch.full((4099,), float("nan"), device="cuda")
    pick = {"contiguous": lambda t: t, "strided": lambda t: t[::3],
            "offset": lambda t: t[3:]}[view]
    x, y, out = pick(base_x), pick(base_y), pick(base_out)
    before = base_out.clone()
    run_add(x, y, out, x.numel())
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    untouched = torch.ones(4099, dtype=torch.bool, device="cuda")
    pick(untouched.view(-1))[...] = False
    assert torch.equal(base_out[untouched].isnan(), before[untouched].isnan())
    assert spy["sync"] == []  # asynchronous: no copies, no asserts
    assert spy["launch"] == [torch.cuda.current_stream().cuda_stream]


def test_torch_offset_view_is_specialized_unaligned() -> None:
    torch = _torch()
    x = torch.zeros(260, device="cuda")[1:]
    module = add.trace(x, x, x, 259, BLOCK=BLOCK)
    assert module.kernel.aligned16 == frozenset()


def test_torch_bfloat16() -> None:
    torch = _torch()
    x = torch.randn(3000, device="cuda").to(torch.bfloat16)
    y = torch.randn(3000, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(x)
    run_add(x, y, out, 3000)
    expected = (x.float() + y.float()).to(torch.bfloat16)
    assert torch.equal(out, expected)


def test_torch_non_default_stream_orders_with_torch_ops(spy) -> None:  # type: ignore[no-untyped-def]
    torch = _torch()
    n = 1 << 24
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.ones(n, device="cuda")
        y = torch.full((n,), 2.0, device="cuda")
        x.mul_(3)  # queued on s before the kernel: the kernel must see it
        out = torch.empty_like(x)
        run_add(x, y, out, n)
        result = out * 10  # queued on s after the kernel: must see its result
    s.synchronize()
    assert spy["launch"] == [s.cuda_stream]
    assert spy["sync"] == []  # no device-wide (or any) synchronization by tilekit
    assert torch.all(result == 50.0).item()


def test_explicit_stream_keyword(spy) -> None:  # type: ignore[no-untyped-def]
    torch = _torch()
    s = torch.cuda.Stream()
    x = torch.ones(1000, device="cuda")
    torch.cuda.synchronize()
    out = torch.zeros_like(x)
    run_add(x, x, out, 1000, stream=s)
    run_add(x, out, out, 1000, stream=s.cuda_stream)  # an int handle
    s.synchronize()
    assert spy["launch"] == [s.cuda_stream, s.cuda_stream]
    assert torch.all(out == 3.0).item()


def test_interpret_knob_copies_cuda_tensors_to_the_host() -> None:
    torch = _torch()
    x = torch.arange(300, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(x)
    with knobs.override(interpret=True):
        run_add(x, x, out, 300)
    assert torch.equal(out, 2 * x)


# --- cupy ---------------------------------------------------------------------------------


def test_cupy_arrays(spy) -> None:  # type: ignore[no-untyped-def]
    cp = pytest.importorskip("cupy")
    x = cp.arange(5000, dtype=cp.float32)[::2]
    y = cp.ones(2500, dtype=cp.float32)
    out = cp.zeros(2500, dtype=cp.float32)
    run_add(x, y, out, 2500)
    assert bool((out == x + 1).all())
    assert spy["launch"] == [cp.cuda.get_current_stream().ptr]


# --- launch checks on the device ----------------------------------------------------------


class Cai:
    """A minimal ``__cuda_array_interface__`` producer over someone else's memory."""

    def __init__(self, ptr: int, n: int, readonly: bool = False) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, readonly), "shape": (n,),
                                         "typestr": "<f4", "strides": None, "version": 3}


def test_cuda_array_interface_objects() -> None:
    torch = _torch()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    out = torch.zeros_like(x)
    run_add(Cai(x.data_ptr(), 1000), Cai(x.data_ptr(), 1000), Cai(out.data_ptr(), 1000), 1000)
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)


def test_misaligned_device_pointer_is_refused() -> None:
    torch = _torch()
    x = torch.zeros(1000, device="cuda")
    with pytest.raises(LaunchError, match="not aligned to its element size"):
        run_add(Cai(x.data_ptr() + 2, 10), x, x, 10)


def test_read_only_device_array_written_is_refused() -> None:
    torch = _torch()
    x = torch.zeros(1000, device="cuda")
    with pytest.raises(LaunchError, match="read-only"):
        run_add(x, x, Cai(x.data_ptr(), 1000, readonly=True), 1000)


def test_grid_beyond_the_device_is_refused(spy) -> None:  # type: ignore[no-untyped-def]
    x = np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match=r"grid dimension 1 \(y\) is 70000"):
        add[(1, 70000)](x, x, x, 10, BLOCK=BLOCK)
    assert spy["launch"] == []


def test_too_much_shared_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_codegen",
                        lambda m, arch, divisible, check=False:
                        vector_add_kernel(arch, shared_bytes=10**7))
    x = np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match="needs 10000000 bytes of shared memory"):
        run_add(x, x, x, 10)


def test_arrays_on_two_devices_are_refused() -> None:
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = torch.zeros(10, device="cuda:0")
    y = torch.zeros(10, device="cuda:1")
    with pytest.raises(LaunchError, match="different devices"):
        run_add(x, y, x, 10)


# --- device_assert ------------------------------------------------------------------------


def test_device_assert_raises_at_the_users_line() -> None:
    x = np.ones(1000, np.float32)
    x[300] = -1.0
    with pytest.raises(ExecutionError, match="x must be positive") as info:
        check_positive[tk.cdiv(1000, BLOCK)](x, 1000, BLOCK=BLOCK)
    assert info.value.loc is not None and info.value.loc.line == ASSERT_LINE
    assert info.value.loc.file.endswith("ptx_kernels.py")
    assert "program (2, 0, 0)" in str(info.value)
    x[300] = 1.0
    check_positive[tk.cdiv(1000, BLOCK)](x, 1000, BLOCK=BLOCK)  # the word was reset


# --- caches -------------------------------------------------------------------------------


def test_in_memory_and_disk_caches() -> None:
    x = np.ones(500, np.float32)
    out = np.zeros(500, np.float32)
    run_add(x, x, out, 500)
    run_add(x, x, out, 500)
    assert cache.stats()["compiles"] == 1 and cache.stats()["memory_hits"] == 1
    add._loaded.clear()  # as in a new process: the disk cache answers
    run_add(x, x, out, 500)
    assert cache.stats()["compiles"] == 1 and cache.stats()["disk_hits"] == 1
    assert (out == 2).all()


def test_device_properties() -> None:
    props = driver.device_props(0)
    assert props.sm_count > 0 and props.max_shared_optin >= 48 * 1024
    assert props.max_grid[0] >= 2**31 - 1 and props.arch.startswith("sm_")
    assert driver.driver_version() is not None


# --- the launch fast path -----------------------------------------------------------------


def test_fast_path_gives_the_slow_paths_results(spy) -> None:  # type: ignore[no-untyped-def]
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(4):  # new data (and new buffers) each time: one slow launch, then hits
        x = torch.randn(5000, device="cuda", generator=gen)
        y = torch.randn(5000, device="cuda", generator=gen)
        out = torch.full_like(x, float("nan"))
        run_add(x, y, out, 5000)
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    assert len(spy["slow"]) == 1 and len(spy["launch"]) == 4
    assert set(spy["launch"]) == {torch.cuda.current_stream().cuda_stream}


def test_fast_path_misses_on_a_fact_of_the_specialization(spy) -> None:  # type: ignore[no-untyped-def]
    torch = _torch()
    base = torch.randn(4100, device="cuda")
    out = torch.zeros(4100, device="cuda")
    run_add(base, base, out, 4100)
    assert len(spy["slow"]) == 1
    run_add(base[1:], base[1:], out[1:], 4099)  # 4 bytes past 16: not aligned16
    assert len(spy["slow"]) == 2
    torch.testing.assert_close(out[1:], 2 * base[1:], rtol=0, atol=0)
    specs = [v.spec for v in add._loaded]
    assert [dict(s.args)["X"].aligned16 for s in specs] == [True, False]
    run_add(base[4:], base[4:], out[4:], 4096)  # 16 bytes past: aligned again, a hit
    run_add(base[1:], base[1:], out[1:], 4099)  # a hit of the unaligned entry
    assert len(spy["slow"]) == 2 and len(add._loaded) == 2
    h = base.to(torch.bfloat16)
    hout = torch.empty_like(h)
    run_add(h, h, hout, 4100)  # another dtype
    assert len(spy["slow"]) == 3
    assert torch.equal(hout, (h.float() * 2).to(torch.bfloat16))
    stream = torch.cuda.Stream()
    run_add(base, base, out, 4100, stream=stream)  # a new stream: no miss
    torch.cuda.synchronize()
    assert len(spy["slow"]) == 3 and len(add._loaded) == 3
    assert spy["launch"][-1] == stream.cuda_stream


def test_fast_path_misses_on_another_device(spy) -> None:  # type: ignore[no-untyped-def]
    torch = _torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    for dev in ("cuda:0", "cuda:1", "cuda:0", "cuda:1"):
        x = torch.ones(1000, device=dev)
        out = torch.zeros_like(x)
        with torch.cuda.device(x.device):
            run_add(x, x, out, 1000)
        assert torch.all(out == 2).item()
    assert len(spy["slow"]) == 2


def test_cuda_graph_capture_and_replay(spy) -> None:  # type: ignore[no-untyped-def]
    """A launch captured by torch.cuda.graph replays on the static buffers' new data: the
    fast path queues nothing but the kernel (no sync, no allocation, no copy)."""
    torch = _torch()
    n = 10_000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on the capture stream: compiled, loaded, keyed
        run_add(x, y, out, n)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    slow_before = len(spy["slow"])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        run_add(x, y, out, n)
        run_add(out, y, out, n)  # out = x + 2y
    assert len(spy["slow"]) == slow_before  # captured from the fast path
    assert spy["sync"] == []
    for seed in range(3):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x.copy_(torch.randn(n, device="cuda", generator=gen))
        y.copy_(torch.randn(n, device="cuda", generator=gen))
        out.zero_()
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, (x + y) + y, rtol=0, atol=0)


def test_cuda_graph_capture_through_the_slow_path() -> None:
    """The first launch may even be captured (the kernel already loaded): the slow path
    for device tensors queues only the kernel, too."""
    torch = _torch()
    n = 3000
    x = torch.randn(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    run_add(x, x, out, n)  # compile and load outside the capture
    torch.cuda.synchronize()
    add._loaded.fast.clear()
    add._loaded.deactivate()  # as before any fast entry: the capture takes the slow path
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run_add(x, x, out, n)
    x.copy_(torch.arange(n, dtype=torch.float32, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, 2 * x)
