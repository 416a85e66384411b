"""The launch fast path checks what the kernel's trace read besides its arguments
(``KernelFunction.globals_guards``): a global, closure variable, module attribute or
helper changed since the last launch misses, and the slow path traces and loads the new
kernel; an equal value in another object misses once and keeps the loaded kernel.

Without a GPU (``fake_gpu``), through the generated dispatcher and the native launcher
(``tilekit.rt._fastlaunch``, when built); on a GPU (marked ``gpu``), with torch tensors."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.ir.printer import print_module
from tilekit.rt import driver, fastpath

from .fake_gpu import Driver, FakeTensor, abi_compile, use_fake_gpu
from .test_fastlaunch import c_launch_ex

BLOCK = 128
SCALE = 2.0
cfg = types.ModuleType("globals_fast_cfg")
cfg.SCALE = 2.0
THIS = sys.modules[__name__]


def helper(v: Any) -> Any:
    return v * SCALE


@pytest.fixture(params=["python", "native"])
def fake(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Driver:
    """The fake driver; ``compiled`` lists the IR of each kernel it compiled. ``native``:
    its ``cuLaunchKernelEx`` is a C function, so that hits go through the native
    launcher (each launch it records says whether it did)."""
    compiled: list[str] = []

    def compile_fn(module: Any, arch: str, divisible: Any = frozenset()) -> Any:
        compiled.append(print_module(module))
        return abi_compile(module, arch, divisible)

    drv = use_fake_gpu(monkeypatch, compile_fn)
    drv.compiled = compiled  # type: ignore[attr-defined]
    native = request.param == "native"
    if native:
        lib, why = fastpath._load_native()
        if lib is None:
            pytest.skip(f"the native launcher is {why}")
        launch_ex = c_launch_ex(drv)
        monkeypatch.setattr(driver, "launch_ex_fn", lambda: launch_ex)
    with knobs.override(native_launch=native):
        yield drv


def paths(drv: Driver) -> list[str]:
    """Each launch: slow, native (a hit of the native launcher) or fast (of the generated
    function)."""
    return [launch["path"] if launch["path"] == "slow" or not launch.get("native") else
            "native" for launch in drv.launches]


def hit(drv: Driver) -> str:
    return "native" if knobs.NATIVE_LAUNCH.get() else "fast"


def run(kern: Any, x: Any, y: Any, n: int = 1000) -> None:
    kern[tk.cdiv(n, BLOCK)](x, y, n, BLOCK=BLOCK)


def tensors(n: int = 1000) -> tuple[FakeTensor, FakeTensor]:
    return FakeTensor((n,)), FakeTensor((n,), ptr=0x7F00_0001_0000)


def test_a_changed_global_misses_and_the_new_trace_runs(
        fake: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    @tk.kernel
    def scaled(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, tk.load(X, offs, offs < n) * SCALE, offs < n)

    x, y = tensors()
    run(scaled, x, y)
    run(scaled, x, y)
    monkeypatch.setattr(THIS, "SCALE", 3.0)
    run(scaled, x, y)
    run(scaled, x, y)
    assert paths(fake) == ["slow", hit(fake), "slow", hit(fake)]
    assert fake.loads == 2 and "constant 3.0 : f32" in fake.compiled[-1]  # type: ignore
    assert fake.launches[-1]["function"] == fake.launches[-2]["function"] != \
        fake.launches[0]["function"]


def test_an_equal_value_in_another_object_keeps_the_loaded_kernel(
        fake: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    @tk.kernel
    def scaled(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, tk.load(X, offs, offs < n) * SCALE, offs < n)

    x, y = tensors(4099)
    run(scaled, x, y, 4099)
    monkeypatch.setattr(THIS, "SCALE", float("2.0"))
    traced = len(scaled._cache)
    run(scaled, x, y, 4099)  # the guard names the old object: a miss, no new trace or load
    run(scaled, x, y, 4099)
    assert paths(fake) == ["slow", "slow", hit(fake)]
    assert fake.loads == 1 and len(scaled._cache) == traced == 1


def test_a_redefined_helper_and_a_module_attribute_miss(
        fake: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    @tk.kernel
    def through(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, helper(tk.load(X, offs, offs < n)) + cfg.SCALE, offs < n)

    x, y = tensors(777)
    run(through, x, y, 777)
    run(through, x, y, 777)
    monkeypatch.setattr(THIS, "helper", lambda v: v - 5.5)
    run(through, x, y, 777)
    run(through, x, y, 777)
    assert "constant 5.5 : f32" in fake.compiled[-1]  # type: ignore[attr-defined]
    monkeypatch.setattr(cfg, "SCALE", 0.25)
    run(through, x, y, 777)
    run(through, x, y, 777)
    assert "constant 0.25 : f32" in fake.compiled[-1]  # type: ignore[attr-defined]
    assert paths(fake) == ["slow", hit(fake)] * 3 and fake.loads == 3


def test_a_changed_closure_variable_misses(fake: Driver) -> None:
    offset = 1.5

    @tk.kernel
    def shifted(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, tk.load(X, offs, offs < n) + offset, offs < n)

    x, y = tensors(129)
    run(shifted, x, y, 129)
    run(shifted, x, y, 129)
    offset = 4.5
    run(shifted, x, y, 129)
    run(shifted, x, y, 129)
    assert paths(fake) == ["slow", hit(fake), "slow", hit(fake)]
    assert "constant 4.5 : f32" in fake.compiled[-1]  # type: ignore[attr-defined]
    assert offset == 4.5


def test_a_kept_launch_object_misses_into_the_new_kernel(
        fake: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """``launch = kern[grid]`` kept across the change still runs the new kernel: its
    dispatcher's guards name the old value, so it misses, into the slow path the first
    time, then into the new dispatcher (its generated function)."""
    @tk.kernel
    def scaled(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, tk.load(X, offs, offs < n) * SCALE, offs < n)

    x, y = tensors()
    run(scaled, x, y)
    launch = scaled[tk.cdiv(1000, BLOCK)]
    launch(x, y, 1000, BLOCK=BLOCK)
    monkeypatch.setattr(THIS, "SCALE", -1.0)
    launch(x, y, 1000, BLOCK=BLOCK)
    launch(x, y, 1000, BLOCK=BLOCK)
    assert paths(fake) == ["slow", hit(fake), "slow", "fast"]
    assert fake.loads == 2
    assert fake.launches[-1]["function"] == fake.launches[-2]["function"] != \
        fake.launches[0]["function"]


# --- on a GPU -----------------------------------------------------------------------------------


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_gpu_changed_globals_on_the_fast_path(native: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch tensors on the device: each launch after a change (a global, a helper, a
    module attribute, a closure variable) runs the new values; the launch after it is a
    cache hit of the new kernel (through the native launcher when ``native``)."""
    torch = _torch()
    if native and fastpath._load_native()[0] is None:
        pytest.skip("the native launcher is not built")
    offset = 0.5

    @tk.kernel
    def kern(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        x = tk.load(X, offs, offs < n)
        tk.store(Y, offs, helper(x) + cfg.SCALE * x + offset, offs < n)

    n = 4099
    x = torch.randn(n, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    y = torch.full_like(x, float("nan"))

    def check(scale: float, bias: float, extra: float) -> None:
        for _ in range(2):  # the first after a change: the slow path; then a hit
            y.fill_(float("nan"))
            run(kern, x, y, n)
            torch.testing.assert_close(y, x * scale + bias * x + extra, rtol=0, atol=0)
        dispatcher, = kern._loaded.fast.values()
        if native:
            assert dispatcher.native is not None and dispatcher.native.stats["hits"] == 1
        else:
            assert dispatcher.native is None

    with knobs.override(native_launch=native):
        check(2.0, 2.0, 0.5)
        monkeypatch.setattr(THIS, "SCALE", 3.0)
        check(3.0, 2.0, 0.5)
        monkeypatch.setattr(THIS, "helper", lambda v: v * -1.0)
        check(-1.0, 2.0, 0.5)
        monkeypatch.setattr(cfg, "SCALE", 0.25)
        check(-1.0, 0.25, 0.5)
        offset = 8.0
        check(-1.0, 0.25, 8.0)
    assert offset == 8.0
