"""The CUDA driver, through ``cuda.bindings``: devices, the primary context, modules,
memory, streams, and the launch call.

Every call's status is checked; a failure becomes a ``LaunchError`` (before the kernel
runs) or an ``ExecutionError`` (reported by a synchronization, i.e. while it ran)
carrying the driver's error name, a hint, and the user's line.

Contexts: tilekit uses each device's *primary* context (``cuDevicePrimaryCtxRetain``)
and makes it current, as torch and cupy do, so pointers and streams from those
libraries are valid in tilekit's launches and the other way round.

"No GPU" is a state, not an error: ``status()`` says whether the driver library loads,
``cuInit`` succeeds and a device exists, and why not. The launcher then picks the
interpreter. Importing this module imports nothing from CUDA; the bindings load on the
first call.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tilekit.errors import ExecutionError, LaunchError, SourceLoc

# Hints for the driver errors a user can meet, by the driver's error name.
_HINTS: dict[str, str] = {
    "CUDA_ERROR_OUT_OF_MEMORY": "free device memory (e.g. torch.cuda.empty_cache()) or use "
                                "smaller arrays",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "a kernel accessed memory outside its tensors; run with "
                                  "TILEKIT_INTERPRET=1 to find the line and program id; the "
                                  "CUDA context is now unusable, restart the process",
    "CUDA_ERROR_INVALID_VALUE": "a launch parameter is out of range for this device",
    "CUDA_ERROR_INVALID_PTX": "the driver cannot JIT this PTX; install nvidia-nvjitlink so that "
                              "tilekit links PTX itself",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the driver is older than the PTX; install "
                                          "nvidia-nvjitlink or update the NVIDIA driver",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the kernel was compiled for another architecture; clear "
                                    "the cache with `tilekit cache clear`",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the kernel needs more registers or threads than "
                                          "the device offers per block",
    "CUDA_ERROR_INVALID_HANDLE": "a stream or pointer from another context or device was "
                                 "passed; launch on a stream of the arrays' device",
    "CUDA_ERROR_INVALID_CONTEXT": "no usable CUDA context on this thread",
    "CUDA_ERROR_LAUNCH_FAILED": "the kernel faulted; run with TILEKIT_INTERPRET=1 to locate it",
}

_lock = threading.Lock()


@functools.cache
def _cu() -> Any:
    from cuda.bindings import driver

    return driver


def error_name(code: Any) -> str:
    cu = _cu()
    try:
        err, name = cu.cuGetErrorName(code)
        if err == cu.CUresult.CUDA_SUCCESS and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # an unknown code: show its number
        pass
    return f"CUresult {int(code)}"


def _fail(what: str, code: Any, loc: SourceLoc | None, *, running: bool = False) -> None:
    name = error_name(code)
    hint = _HINTS.get(name)
    cls = ExecutionError if running else LaunchError
    raise cls(f"CUDA driver call {what} failed: {name}", loc, hints=[hint] if hint else [])


def check(result: Any, what: str, loc: SourceLoc | None = None, *,
          running: bool = False) -> Any:
    """Unwrap a ``cuda.bindings`` result tuple ``(CUresult, *values)``, raising on failure.

    ``running=True`` marks calls that report errors of kernels already queued
    (synchronizations, copies back): those raise ``ExecutionError``."""
    if isinstance(result, tuple):
        code, values = result[0], result[1:]
    else:
        code, values = result, ()
    if int(code) != 0:
        _fail(what, code, loc, running=running)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


# --- is there a GPU? ----------------------------------------------------------------------


@dataclass(frozen=True)
class GpuStatus:
    available: bool
    reason: str  # why not (or "" when available)
    device_count: int = 0
    driver_version: int | None = None  # e.g. 13000 for CUDA 13.0


_status: GpuStatus | None = None


def status() -> GpuStatus:
    """Whether CUDA is usable here; computed once per process (cheap after)."""
    global _status
    if _status is None:
        with _lock:
            if _status is None:
                _status = _probe()
    return _status


def _probe() -> GpuStatus:
    try:
        cu = _cu()
    except Exception as exc:  # no cuda-python at all
        return GpuStatus(False, f"cuda-python is not installed ({exc})")
    try:
        err = cu.cuInit(0)[0]
    except Exception:  # cuda.pathfinder: libcuda.so not found
        return GpuStatus(False, "no CUDA driver (libcuda) on this machine")
    if int(err) != 0:
        return GpuStatus(False, f"cuInit failed: {error_name(err)}")
    err, version = cu.cuDriverGetVersion()
    err2, count = cu.cuDeviceGetCount()
    if int(err2) != 0 or count == 0:
        return GpuStatus(False, "the CUDA driver found no device", 0,
                         int(version) if int(err) == 0 else None)
    return GpuStatus(True, "", int(count), int(version) if int(err) == 0 else None)


def available() -> bool:
    return status().available


def driver_version() -> str | None:
    """``"13.0"`` style, or None without a driver."""
    v = status().driver_version
    return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"


# --- devices ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceProps:
    """What launch checks and code generation need to know about one device."""

    ordinal: int
    name: str
    capability: tuple[int, int]
    sm_count: int
    max_shared_optin: int  # bytes of dynamic shared memory per block, with opt-in
    max_grid: tuple[int, int, int]
    max_threads_per_block: int
    total_memory: int

    @property
    def arch(self) -> str:
        """The code generation target: ``sm_90a`` on Hopper (wgmma, setmaxnreg), else
        ``sm_XY``."""
        major, minor = self.capability
        return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


@functools.cache
def device_props(ordinal: int = 0) -> DeviceProps:
    cu = _cu()
    dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    A = cu.CUdevice_attribute

    def attr(a: Any) -> int:
        return int(check(cu.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute"))

    name = check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(name, bytes) \
        else str(name)
    return DeviceProps(
        ordinal=ordinal,
        name=name,
        capability=(attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
        sm_count=attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        max_shared_optin=attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_grid=(attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
                  attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                  attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)),
        max_threads_per_block=attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        total_memory=int(check(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem")),
    )


_contexts: dict[int, Any] = {}


def use_device(ordinal: int, loc: SourceLoc | None = None) -> Any:
    """Retain the device's primary context (once) and make it current on this thread.

    The primary context is the one torch and cupy use, so their pointers and streams
    are valid in it."""
    cu = _cu()
    ctx = _contexts.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(ordinal)
            if ctx is None:
                dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet", loc)
                ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", loc)
                _contexts[ordinal] = ctx
    current = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent", loc)
    if current is None or int(current) != int(ctx):
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", loc)
    return ctx


def current_device() -> int:
    """The device of the current context (0 when none is current)."""
    cu = _cu()
    err, ctx = cu.cuCtxGetCurrent()
    if int(err) != 0 or ctx is None or int(ctx) == 0:
        return 0
    return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))


def pointer_device(ptr: int) -> int:
    """The device ordinal that owns a device pointer (for ``__cuda_array_interface__``
    objects, which do not say)."""
    cu = _cu()
    a = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(check(cu.cuPointerGetAttribute(a, ptr), "cuPointerGetAttribute"))


# --- modules and functions ----------------------------------------------------------------


@dataclass
class LoadedFunction:
    """A kernel loaded into one device's primary context."""

    module: Any  # CUmodule
    function: Any  # CUfunction
    handle: int  # int(function), for the ctypes launch
    device: int


def load_function(image: bytes, name: str, device: int, shared_bytes: int,
                  loc: SourceLoc | None = None) -> LoadedFunction:
    """Load a cubin (or PTX, JIT-compiled by the driver) and find ``name`` in it; opt in to
    more than 48 KB of dynamic shared memory when the kernel needs it."""
    cu = _cu()
    use_device(device, loc)
    data = image if image.startswith(b"\x7fELF") or image.endswith(b"\0") else image + b"\0"
    module = check(cu.cuModuleLoadData(data), f"cuModuleLoadData({name})", loc)
    function = check(cu.cuModuleGetFunction(module, name.encode()),
                     f"cuModuleGetFunction({name})", loc)
    if shared_bytes > 48 * 1024:
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(cu.cuFuncSetAttribute(function, attr, shared_bytes), "cuFuncSetAttribute", loc)
    return LoadedFunction(module, function, int(function), device)


# --- memory and streams -------------------------------------------------------------------


def alloc(nbytes: int, loc: SourceLoc | None = None) -> int:
    cu = _cu()
    return int(check(cu.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc", loc))


def free(ptr: int) -> None:
    cu = _cu()
    cu.cuMemFree(ptr)  # best effort: freeing happens on error paths too


def copy_to_device(dst: int, src_host: int, nbytes: int, stream: int,
                   loc: SourceLoc | None = None) -> None:
    if nbytes:
        check(_cu().cuMemcpyHtoDAsync(dst, src_host, nbytes, stream), "cuMemcpyHtoDAsync", loc)


def copy_to_host(dst_host: int, src: int, nbytes: int, stream: int,
                 loc: SourceLoc | None = None) -> None:
    if nbytes:
        check(_cu().cuMemcpyDtoHAsync(dst_host, src, nbytes, stream), "cuMemcpyDtoHAsync", loc,
              running=True)


def memset32(dst: int, value: int, count: int, stream: int,
             loc: SourceLoc | None = None) -> None:
    check(_cu().cuMemsetD32Async(dst, value, count, stream), "cuMemsetD32Async", loc)


def synchronize(stream: int, loc: SourceLoc | None = None) -> None:
    """Wait for ``stream``; an error of a kernel that ran on it surfaces here."""
    check(_cu().cuStreamSynchronize(stream), "cuStreamSynchronize", loc, running=True)


# --- the launch ---------------------------------------------------------------------------


@functools.cache
def launch_fn() -> Any:
    """``cuLaunchKernel`` from libcuda through ctypes, for the hot path. No ``argtypes``:
    converting eleven arguments through them costs about as much again as the call, so
    callers pass ``ctypes.c_void_p`` objects for the function, the stream and the
    parameter array, and Python ints below 2^31 for the grid, block and shared memory
    (C ``int``, the same registers as the ``unsigned int`` parameters)."""
    _cu()  # the bindings loaded libcuda.so.1 already: this opens the same library
    fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    fn.restype = ctypes.c_int
    return fn


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h, CUDA 12+), the first argument of ``cuLaunchKernelEx``.
    The fast path writes it with ``struct`` (``fastpath.CONFIG_FORMAT``); this is its C
    layout, which a test holds the format to."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


@functools.cache
def launch_ex_fn() -> Any:
    """``cuLaunchKernelEx`` from libcuda through ctypes, for the fast path, or None when the
    driver has none (before CUDA 12). Four arguments instead of eleven, all pre-built by
    the caller (the ``LaunchConfig`` bytes, the function, the parameter array, NULL): ctypes
    converts nothing per call."""
    _cu()
    fn = getattr(ctypes.CDLL("libcuda.so.1"), "cuLaunchKernelEx", None)
    if fn is not None:
        fn.restype = ctypes.c_int
    return fn


def launch(function: LoadedFunction, grid: Sequence[int], block_threads: int,
           shared_bytes: int, stream: int, kernel_params: int,
           loc: SourceLoc | None = None) -> None:
    """One ``cuLaunchKernel``; ``kernel_params`` is the address of the ``void*[]`` of
    argument slots (built once per specialization by the launcher)."""
    gx, gy, gz = (tuple(grid) + (1, 1, 1))[:3]
    code = launch_fn()(ctypes.c_void_p(function.handle), gx, gy, gz, block_threads, 1, 1,
                       shared_bytes, ctypes.c_void_p(stream) if stream else None,
                       ctypes.c_void_p(kernel_params), None)
    if code != 0:
        _fail("cuLaunchKernel", _cu().CUresult(code), loc)
