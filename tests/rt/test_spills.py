"""Kernels whose registers spill: a ``PerformanceWarning`` at the kernel's source line.

``gpu.warn_if_spilling`` reads what the driver says of the loaded function
(``driver.function_attributes``); here it is fed those answers directly, and on a GPU a
row of 131072 floats held across its max (512 values per thread on 8 warps) really
spills.
"""

# ruff: noqa: N803  (tensor-like names)

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import tilekit as tk
from tilekit.errors import SourceLoc
from tilekit.rt import driver, gpu

SPILLING = {driver.FUNC_LOCAL_SIZE_BYTES: 2384, driver.FUNC_NUM_REGS: 255,
            driver.FUNC_MAX_THREADS_PER_BLOCK: 256}


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "_SPILL_WARNINGS", {})


def _compiled(name: str = "softmax", warps: int = 8) -> SimpleNamespace:
    return SimpleNamespace(name=name, num_warps=warps, block_threads=32 * warps)


def test_a_spilling_kernel_is_named_at_its_source_line() -> None:
    loc = SourceLoc("/work/user/kernels.py", 42)
    with pytest.warns(tk.PerformanceWarning) as caught:
        gpu.warn_if_spilling(_compiled(), SPILLING, loc)
    (w,) = caught
    assert (w.filename, w.lineno) == ("/work/user/kernels.py", 42)
    text = str(w.message)
    assert "`softmax` spills 2384 bytes per thread" in text and "255 registers" in text
    assert "8 warps" in text and "chunks" in text and "N / 256 values per thread" in text


@pytest.mark.parametrize("attributes", [
    {}, {driver.FUNC_NUM_REGS: 40},
    {driver.FUNC_LOCAL_SIZE_BYTES: 0, driver.FUNC_NUM_REGS: 255},
    # local arrays below the cap, as measured on the H200: device printf's arguments, the
    # slow path of libdevice's sin
    {driver.FUNC_LOCAL_SIZE_BYTES: 96, driver.FUNC_NUM_REGS: 33},
    {driver.FUNC_LOCAL_SIZE_BYTES: 40, driver.FUNC_NUM_REGS: 46}])
def test_no_spill_no_warning(attributes: dict[int, int]) -> None:
    """Nothing in local memory, an array in local memory below the register cap, or a
    driver that does not answer: silence."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpu.warn_if_spilling(_compiled(warps=4), attributes, SourceLoc("k.py", 1))


@pytest.mark.parametrize("threads,cap", [(32, 255), (256, 255), (384, 168), (512, 128),
                                         (1024, 64)])
def test_the_register_cap_follows_the_block(threads: int, cap: int) -> None:
    """12 warps: 65536 / 384 = 170.7, allocated 8 at a time: 168 (a pipelined matmul at
    168 registers with 32 bytes of local memory spills)."""
    assert gpu.register_cap(threads) == cap
    with pytest.warns(tk.PerformanceWarning, match=f"{cap} registers"):
        gpu.warn_if_spilling(SimpleNamespace(name="k", num_warps=threads // 32,
                                             block_threads=threads),
                             {driver.FUNC_LOCAL_SIZE_BYTES: 32, driver.FUNC_NUM_REGS: cap},
                             SourceLoc("k.py", threads))


def test_once_per_source_line_and_can_be_an_error() -> None:
    loc = SourceLoc("k.py", 7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):  # three variants of one kernel
            gpu.warn_if_spilling(_compiled(), SPILLING, loc)
        gpu.warn_if_spilling(_compiled("other"), SPILLING, SourceLoc("k.py", 30))
    assert [w.lineno for w in caught] == [7, 30]
    gpu._SPILL_WARNINGS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tk.PerformanceWarning)
        with pytest.raises(tk.PerformanceWarning):
            gpu.warn_if_spilling(_compiled(), SPILLING, loc)


def test_without_a_source_line_the_warning_still_names_the_kernel() -> None:
    with pytest.warns(tk.PerformanceWarning, match="`softmax`"):
        gpu.warn_if_spilling(_compiled(), SPILLING, None)


@tk.kernel
def centre_rows(X, Y, N: tk.constexpr):
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load()
    Y.tile((1, N), (row, 0)).store(x - tk.max(x, axis=1, keepdims=True))


@pytest.mark.gpu
def test_on_the_gpu_a_row_too_long_for_the_registers_warns_and_still_computes() -> None:
    """A row of 131072 floats held across its max on one block: 512 values per thread.
    The code spills, the launch warns at ``centre_rows``'s line, and the result is exact.
    A row of 1024 does not warn."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 131072)).astype(np.float32)
    y = np.full_like(x, np.nan)
    with pytest.warns(tk.PerformanceWarning, match="centre_rows") as caught:
        centre_rows[3](x, y, N=131072)
    assert caught[0].filename == centre_rows.loc.file
    assert caught[0].lineno == centre_rows.loc.line
    np.testing.assert_array_equal(y, x - x.max(axis=1, keepdims=True))
    small = x[:, :1024].copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tk.PerformanceWarning)
        centre_rows[3](small, np.empty_like(small), N=1024)
