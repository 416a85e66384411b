"""The CUDA driver layer (``tilekit.rt.driver``) over a fake libcuda (``FakeLibcuda``: C
callbacks with cuda.h's prototypes), so its own code and its ctypes conversions run
without a GPU; and its C prototypes held to the declarations ``cuda.bindings`` ships."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tilekit.errors import ExecutionError, LaunchError
from tilekit.rt import driver

from .fake_gpu import PROPS, FakeLibcuda


@pytest.fixture
def lib() -> Iterator[FakeLibcuda]:
    fake = FakeLibcuda()
    driver.use_library(fake)
    yield fake
    driver.use_library(None)


def test_status_and_device_props_come_from_the_library(lib: FakeLibcuda) -> None:
    assert driver.status() == driver.GpuStatus(True, "", 1, 13000)
    assert driver.driver_version() == "13.0"
    assert driver.device_props(0) == PROPS
    assert "cuDeviceTotalMem_v2" in lib.calls  # the 64-bit symbol, not cuDeviceTotalMem


def test_a_failed_cuinit_is_a_status_not_an_error(lib: FakeLibcuda) -> None:
    lib.fail["cuInit"] = 100
    status = driver.status()
    assert not status.available and status.reason.startswith("cuInit failed: ")


def test_use_device_retains_the_primary_context_once_and_makes_it_current(
        lib: FakeLibcuda) -> None:
    ctx = driver.use_device(0)
    assert ctx == 0xC0C0 and lib.current == ctx
    lib.current = 0  # another library changed the current context
    assert driver.use_device(0) == ctx and lib.current == ctx
    assert lib.calls.count("cuDevicePrimaryCtxRetain") == 1
    assert driver.current_device() == 0


def test_load_function_opts_in_to_large_shared_memory(lib: FakeLibcuda) -> None:
    small = driver.load_function(b"\x7fELF....", "k", 0, 1024)
    big = driver.load_function(b".version 8.0\n", "k", 0, 100 * 1024)
    assert small.handle == small.function and small.handle == small.module + 1
    assert lib.func_attrs == {(big.handle, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES):
                              100 * 1024}
    assert lib.modules == [b"\x7fELF", b".ver"]


def test_pipelined_kernels_opt_in_to_227_kb(lib: FakeLibcuda) -> None:
    """Up to 48 KB needs no opt-in; above it the attribute is the kernel's whole request,
    up to the H100's 227 KB."""
    at_limit = driver.load_function(b"\x7fELF....", "k", 0, driver.MAX_SHARED_WITHOUT_OPT_IN)
    most = driver.load_function(b"\x7fELF....", "k", 0, 227 * 1024)
    attribute = driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert lib.func_attrs == {(most.handle, attribute): 232448}
    assert (at_limit.handle, attribute) not in lib.func_attrs


def test_a_refused_opt_in_names_the_kernel_and_the_request(lib: FakeLibcuda) -> None:
    lib.fail["cuFuncSetAttribute"] = 1
    with pytest.raises(LaunchError, match=r"cuFuncSetAttribute\(k, "
                                          r"MAX_DYNAMIC_SHARED_SIZE_BYTES=233472\) failed: "
                                          "CUDA_ERROR_INVALID_VALUE"):
        driver.load_function(b"\x7fELF....", "k", 0, 228 * 1024)


def test_a_kernel_needing_more_shared_memory_than_the_device_offers_is_not_loaded(
        lib: FakeLibcuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu._load`` checks the request against the device's opt-in maximum (PROPS: 227 KB)
    before loading anything."""
    from tilekit.rt import cache, gpu
    from tilekit.rt.launcher import specialize_arguments

    from .ptx_kernels import add, vector_add_kernel

    def entry(shared: int) -> cache.Entry:
        return cache.Entry(vector_add_kernel("sm_90a", shared_bytes=shared), b"\x7fELF....")

    x = np.zeros(16, np.float32)
    spec, _ = specialize_arguments(add, add.bind((x, x, x, 16), {"BLOCK": 128}, None), None)
    variant = gpu.Variant(spec, 0, frozenset())
    try:
        monkeypatch.setattr(gpu, "compile_cached", lambda *a, **k: entry(227 * 1024))
        loaded = gpu._load(add, variant, None)
        assert lib.func_attrs[(loaded.function.handle,
                               driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)] == 232448
        add._loaded.clear()
        loads = lib.calls.count("cuModuleLoadData")
        monkeypatch.setattr(gpu, "compile_cached", lambda *a, **k: entry(227 * 1024 + 1))
        with pytest.raises(LaunchError) as info:
            gpu._load(add, variant, None)
        assert info.value.message == ("kernel `vector_add` needs 232449 bytes of shared memory "
                                      "per block, more than the device offers (232448 bytes)")
        assert "fewer pipeline stages" in info.value.hints[0]
        assert lib.calls.count("cuModuleLoadData") == loads
        assert PROPS.max_shared_optin == 232448
    finally:
        add._loaded.clear()


def test_memory_and_streams(lib: FakeLibcuda) -> None:
    ptr = driver.alloc(16)
    assert ptr > 2**32  # a 64-bit CUdeviceptr comes back whole
    driver.memset32(ptr, 0, 4, 0)
    word = (ctypes.c_int32 * 4)(1, 2, 3, 4)
    driver.copy_to_host(ctypes.addressof(word), ptr, 16, 0x5000)
    driver.synchronize(0x5000)
    assert list(word) == [0, 0, 0, 0]
    assert driver.pointer_device(ptr) == 0
    driver.free(ptr)


def test_driver_errors_carry_the_name_and_a_hint(lib: FakeLibcuda) -> None:
    lib.fail["cuMemAlloc_v2"] = 2
    with pytest.raises(LaunchError) as err:
        driver.alloc(1 << 20)
    assert "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY" in err.value.message
    assert err.value.hints and "free device memory" in err.value.hints[0]
    lib.fail["cuStreamSynchronize"] = 201
    with pytest.raises(ExecutionError, match="CUDA_ERROR_INVALID_CONTEXT"):
        driver.synchronize(0)
    assert driver.error_name(12345) == "CUresult 12345"


def test_a_machine_without_libcuda_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(driver.ctypes, "CDLL", missing)
    monkeypatch.setattr("ctypes.util.find_library", lambda name: None)
    driver.use_library(None)
    try:
        status = driver.status()
        assert not status.available and "libcuda" in status.reason
        with pytest.raises(driver.DriverNotFound) as err:
            driver.alloc(16)
        assert "NVIDIA driver" in err.value.hints[0]
    finally:
        monkeypatch.undo()
        driver.use_library(None)


# --- the prototypes -----------------------------------------------------------------------

_POINTERS = {"CUcontext", "CUmodule", "CUfunction", "CUstream", "CUmemoryPool", "void*",
             "const void*"}
_SCALARS = {"int": ctypes.c_int, "unsigned int": ctypes.c_uint, "size_t": ctypes.c_size_t,
            "CUdevice": ctypes.c_int, "CUdeviceptr": ctypes.c_uint64,
            "CUresult": ctypes.c_int, "CUdevice_attribute": ctypes.c_int,
            "CUpointer_attribute": ctypes.c_int, "CUfunction_attribute": ctypes.c_int,
            "cuuint32_t": ctypes.c_uint32, "cuuint64_t": ctypes.c_uint64,
            "CUtensorMapDataType": ctypes.c_int,
            "CUtensorMapInterleave": ctypes.c_int, "CUtensorMapSwizzle": ctypes.c_int,
            "CUtensorMapL2promotion": ctypes.c_int, "CUtensorMapFloatOOBfill": ctypes.c_int,
            "CUmemPool_attribute": ctypes.c_int, "CUstreamCaptureStatus": ctypes.c_int}


def _ctype(c: str) -> object:
    c = c.strip()
    if c in _POINTERS:
        return ctypes.c_void_p
    if c in ("char*", "const char*"):
        return ctypes.c_char_p
    if c.endswith("*"):
        return ctypes.POINTER(_ctype(c[:-1].removeprefix("const ")))  # type: ignore[arg-type]
    if c in driver.structs():  # CUtensorMap, CUDA_MEMCPY2D, CUmemPoolProps
        return driver.structs()[c]
    return _SCALARS[c]


def cydriver_declarations() -> str:
    """``cuda.bindings``' cydriver.pxd (generated from cuda.h); skips without it."""
    import importlib.util

    spec = importlib.util.find_spec("cuda.bindings")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cuda-bindings is not installed")
    pxd = Path(list(spec.submodule_search_locations)[0], "cydriver.pxd")
    if not pxd.exists():
        pytest.skip("this cuda-bindings ships no cydriver.pxd")
    return pxd.read_text()


def test_prototypes_match_the_declarations_of_cuda_bindings() -> None:
    """Each function's argument types are those ``cuda.bindings`` declares (cydriver.pxd,
    generated from cuda.h; it names the functions by their macros, ``cuMemAlloc`` for
    ``cuMemAlloc_v2``), and the symbol is the one the macro names."""
    text = cydriver_declarations()
    for name, (symbol, _) in driver._PROTOTYPES.items():
        found = re.search(rf"^cdef CUresult {name}\((.*)\) except", text, re.M)
        assert found, name
        params = [re.sub(r"\s+\w+$", "", p.strip()) for p in found.group(1).split(",")]
        assert tuple(_ctype(p) for p in params) == driver.argtypes(name), name
        versioned = {"cuDeviceTotalMem", "cuMemAlloc", "cuMemFree", "cuMemcpyHtoDAsync",
                     "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpy2DAsync"}
        assert symbol == (name + "_v2" if name in versioned else name)
