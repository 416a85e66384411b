"""The CUDA driver, through ctypes on libcuda: devices, the primary context, modules,
memory, streams, TMA tensor maps, and the launch call.

libcuda is called directly (``ctypes.CDLL("libcuda.so.1")``, found as ``cuda.bindings``
finds it), not through ``cuda.bindings``: importing those bindings costs 30-45 ms
(``cuda.pathfinder`` a third of it), more than everything else a warm start does before
its first launch. Every function has its C prototype (``_PROTOTYPES``, from ``cuda.h`` of
CUDA 12/13, with the ``_v2`` symbols the header's macros name), so ctypes converts each
argument to its exact C type; ``tests/rt/test_driver.py`` holds the prototypes to the
declarations ``cuda.bindings`` ships. The launch calls (``launch_fn``, ``launch_ex_fn``)
come from the same library without ``argtypes``, for speed.

Every call's status is checked; a failure becomes a ``LaunchError`` (before the kernel
runs) or an ``ExecutionError`` (reported by a synchronization, i.e. while it ran)
carrying the driver's error name (``cuGetErrorName``), a hint, and the user's line.

Contexts: tilekit uses each device's *primary* context (``cuDevicePrimaryCtxRetain``)
and makes it current, as torch and cupy do, so pointers and streams from those
libraries are valid in tilekit's launches and the other way round.

"No GPU" is a state, not an error: ``status()`` says whether the driver library loads,
``cuInit`` succeeds and a device exists, and why not. The launcher then picks the
interpreter. Importing this module loads nothing; libcuda loads on the first call.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tilekit.errors import ExecutionError, LaunchError, SourceLoc
from tilekit.record import Record

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

_lock = threading.RLock()  # status() and use_device() load the library under it

# --- libcuda ------------------------------------------------------------------------------

#: ``CUtensorMap``: 128 opaque bytes, ``alignas(64)`` in cuda.h.
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64

# name -> (the library's symbol, its parameters as cuda.h declares them); every function
# returns a CUresult. The symbols are those cuda.h's macros name (``cuMemAlloc`` is
# ``cuMemAlloc_v2``: the unversioned symbols take 32-bit pointers and sizes), without
# ``_ptsz``: the legacy default stream, as ``cuda.bindings`` uses by default. The ctypes
# argument types are made from the declarations when a function is first called (``_fn``):
# each pointer type or struct costs 10-50 us to create, and a launch calls a third of these.
_PROTOTYPES: dict[str, tuple[str, str]] = {
    "cuGetErrorName": ("cuGetErrorName", "CUresult, const char**"),
    "cuInit": ("cuInit", "unsigned int"),
    "cuDriverGetVersion": ("cuDriverGetVersion", "int*"),
    "cuDeviceGetCount": ("cuDeviceGetCount", "int*"),
    "cuDeviceGet": ("cuDeviceGet", "CUdevice*, int"),
    "cuDeviceGetAttribute": ("cuDeviceGetAttribute", "int*, CUdevice_attribute, CUdevice"),
    "cuDeviceGetName": ("cuDeviceGetName", "char*, int, CUdevice"),
    "cuDeviceTotalMem": ("cuDeviceTotalMem_v2", "size_t*, CUdevice"),
    "cuDevicePrimaryCtxRetain": ("cuDevicePrimaryCtxRetain", "CUcontext*, CUdevice"),
    "cuCtxGetCurrent": ("cuCtxGetCurrent", "CUcontext*"),
    "cuCtxSetCurrent": ("cuCtxSetCurrent", "CUcontext"),
    "cuCtxGetDevice": ("cuCtxGetDevice", "CUdevice*"),
    "cuPointerGetAttribute": ("cuPointerGetAttribute",
                              "void*, CUpointer_attribute, CUdeviceptr"),
    "cuModuleLoadData": ("cuModuleLoadData", "CUmodule*, const void*"),
    "cuModuleGetFunction": ("cuModuleGetFunction", "CUfunction*, CUmodule, const char*"),
    "cuFuncSetAttribute": ("cuFuncSetAttribute", "CUfunction, CUfunction_attribute, int"),
    "cuMemAlloc": ("cuMemAlloc_v2", "CUdeviceptr*, size_t"),
    "cuMemFree": ("cuMemFree_v2", "CUdeviceptr"),
    "cuMemcpyHtoDAsync": ("cuMemcpyHtoDAsync_v2",
                          "CUdeviceptr, const void*, size_t, CUstream"),
    "cuMemcpyDtoHAsync": ("cuMemcpyDtoHAsync_v2", "void*, CUdeviceptr, size_t, CUstream"),
    "cuMemcpyDtoDAsync": ("cuMemcpyDtoDAsync_v2",
                          "CUdeviceptr, CUdeviceptr, size_t, CUstream"),
    "cuMemsetD32Async": ("cuMemsetD32Async", "CUdeviceptr, unsigned int, size_t, CUstream"),
    "cuMemAllocAsync": ("cuMemAllocAsync", "CUdeviceptr*, size_t, CUstream"),
    "cuMemAllocFromPoolAsync": ("cuMemAllocFromPoolAsync",
                                "CUdeviceptr*, size_t, CUmemoryPool, CUstream"),
    "cuMemPoolCreate": ("cuMemPoolCreate", "CUmemoryPool*, const CUmemPoolProps*"),
    "cuMemPoolSetAttribute": ("cuMemPoolSetAttribute",
                              "CUmemoryPool, CUmemPool_attribute, void*"),
    "cuStreamIsCapturing": ("cuStreamIsCapturing", "CUstream, CUstreamCaptureStatus*"),
    "cuMemFreeAsync": ("cuMemFreeAsync", "CUdeviceptr, CUstream"),
    "cuMemcpy2DAsync": ("cuMemcpy2DAsync_v2", "const CUDA_MEMCPY2D*, CUstream"),
    "cuStreamSynchronize": ("cuStreamSynchronize", "CUstream"),
    "cuTensorMapEncodeTiled": ("cuTensorMapEncodeTiled",
                               "CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, "
                               "const cuuint64_t*, const cuuint64_t*, const cuuint32_t*, "
                               "const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle, "
                               "CUtensorMapL2promotion, CUtensorMapFloatOOBfill"),
}

# The C types of those declarations: CUresult and the enums are C ints, CUdevice an int,
# CUdeviceptr an unsigned 64-bit int, CUcontext/CUmodule/CUfunction/CUstream/CUmemoryPool
# opaque pointers; a struct's name is looked up in ``structs()``.
_C_TYPES: dict[str, Any] = {
    "int": ctypes.c_int, "unsigned int": ctypes.c_uint, "size_t": ctypes.c_size_t,
    "cuuint32_t": ctypes.c_uint32, "cuuint64_t": ctypes.c_uint64, "CUdevice": ctypes.c_int,
    "CUdeviceptr": ctypes.c_uint64, "void*": ctypes.c_void_p, "char*": ctypes.c_char_p,
    **dict.fromkeys(("CUcontext", "CUmodule", "CUfunction", "CUstream", "CUmemoryPool"),
                    ctypes.c_void_p),
    **dict.fromkeys(("CUresult", "CUdevice_attribute", "CUpointer_attribute",
                     "CUfunction_attribute", "CUmemPool_attribute", "CUstreamCaptureStatus",
                     "CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle",
                     "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill"), ctypes.c_int),
}


def _c_type(declaration: str) -> Any:
    """The ctypes type of one parameter declaration of ``_PROTOTYPES`` (``const`` dropped:
    ctypes has none; ``T*`` a pointer to ``T``)."""
    declaration = declaration.strip().removeprefix("const ")
    found = _C_TYPES.get(declaration)
    if found is not None:
        return found
    if declaration.endswith("*"):
        return ctypes.POINTER(_c_type(declaration[:-1]))
    return structs()[declaration]


def argtypes(name: str) -> tuple[Any, ...]:
    """The ctypes argument types of driver function ``name`` (``_PROTOTYPES``)."""
    return tuple(_c_type(p) for p in _PROTOTYPES[name][1].split(","))


@functools.cache
def structs() -> dict[str, Any]:
    """cuda.h's structs that tilekit passes, as ctypes classes by their C name; made when
    one is first needed (a tensor map, a repacking copy, the memory pool, a test reading a
    launch configuration): four ctypes classes cost ~0.2 ms to create, and a plain launch
    needs none."""

    class CUtensorMap(ctypes.Structure):
        """``CUtensorMap`` (cuda.h: ``cuuint64_t opaque[16]``, 64-byte aligned). ctypes
        cannot state the alignment, so a map is only ever made with ``from_address`` inside
        a buffer aligned by hand (``encode_tensor_map``)."""

        _fields_ = [("opaque", ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))]

    class CUDA_MEMCPY2D(ctypes.Structure):  # noqa: N801  (cuda.h's name)
        """``CUDA_MEMCPY2D`` (cuda.h): a copy of ``Height`` rows of ``WidthInBytes`` bytes
        between two pitched buffers; tilekit fills only the device-to-device fields."""

        _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
                    ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
                    ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                    ("srcPitch", ctypes.c_size_t),
                    ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
                    ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
                    ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
                    ("dstPitch", ctypes.c_size_t),
                    ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]

    class CUmemPoolProps(ctypes.Structure):  # noqa: N801  (cuda.h's name)
        """``CUmemPoolProps`` (cuda.h): tilekit sets the allocation type and the device; the
        rest (``win32SecurityAttributes`` and 64 bytes that newer headers split into
        ``maxSize``, ``usage`` and reserved ones) stays zero, the defaults."""

        _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                    ("locationType", ctypes.c_int), ("locationId", ctypes.c_int),
                    ("win32SecurityAttributes", ctypes.c_void_p),
                    ("rest", ctypes.c_ubyte * 64)]

    class CUlaunchConfig(ctypes.Structure):  # noqa: N801  (cuda.h's name)
        """``CUlaunchConfig`` (cuda.h, CUDA 12+), the first argument of ``cuLaunchKernelEx``.
        The fast path writes it with ``struct`` (``fastpath.CONFIG_FORMAT``); this is its C
        layout, which a test holds the format to."""

        _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                    ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                    ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                    ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                    ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]

    return {c.__name__: c for c in (CUtensorMap, CUDA_MEMCPY2D, CUmemPoolProps,
                                    CUlaunchConfig)}


# The enum values tilekit passes (cuda.h).
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6
CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
#: Dynamic shared memory a launch may request without opting in (cuFuncSetAttribute).
MAX_SHARED_WITHOUT_OPT_IN = 48 * 1024

_NO_DRIVER_HINT = ("install the NVIDIA driver (or add the folder of libcuda.so.1 to "
                   "LD_LIBRARY_PATH); without a GPU, kernels run on the interpreter")


class DriverNotFound(LaunchError):
    """libcuda cannot be loaded: there is no NVIDIA driver on this machine."""


_library: Any = None  # the loaded libcuda (ctypes.CDLL), or a test's stand-in
_functions: dict[str, Any] = {}  # name -> the library's function with its prototype


def _load_library() -> Any:
    """libcuda as ``cuda.bindings`` loads it: ``libcuda.so.1`` by the loader's search,
    else what ``ctypes.util.find_library`` finds (``nvcuda.dll`` on Windows)."""
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1"]
    errors: list[str] = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            errors.append(str(exc))
    from ctypes.util import find_library  # only when that failed: it runs ldconfig

    found = find_library("cuda")
    if found:
        try:
            return ctypes.CDLL(found)
        except OSError as exc:
            errors.append(str(exc))
    raise DriverNotFound(f"no CUDA driver on this machine: libcuda cannot be loaded "
                         f"({'; '.join(errors)})", hints=[_NO_DRIVER_HINT])


def library() -> Any:
    """The CUDA driver library, loaded once; ``DriverNotFound`` when there is none."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                _library = _load_library()
    return _library


# What modules above this one learnt from the library (e.g. ``tensor_maps``' encoded
# maps): called by ``use_library``.
_forgetters: list[Callable[[], None]] = []


def on_library_change(forget: Callable[[], None]) -> None:
    """Call ``forget`` whenever ``use_library`` switches the library."""
    _forgetters.append(forget)


def use_library(lib: Any) -> None:
    """Call ``lib`` instead of libcuda from now on (a test's fake driver; None: load
    libcuda again), forgetting what was learnt from the previous one."""
    global _library, _status
    with _lock:
        _library = lib
        _functions.clear()
        _contexts.clear()
        _status = None
    device_props.cache_clear()
    _pools.clear()
    launch_fn.cache_clear()
    launch_ex_fn.cache_clear()
    for forget in _forgetters:
        forget()


def _fn(name: str) -> Any:
    """The driver function ``name`` (see ``_PROTOTYPES``) with its argument types set."""
    fn = _functions.get(name)
    if fn is None:
        symbol = _PROTOTYPES[name][0]
        try:
            fn = getattr(library(), symbol)
        except AttributeError:
            raise LaunchError(f"the CUDA driver has no {symbol}",
                              hints=["update the NVIDIA driver"]) from None
        fn.argtypes = argtypes(name)
        fn.restype = ctypes.c_int
        _functions[name] = fn
    return fn


def error_name(code: int) -> str:
    """The driver's name of a ``CUresult`` (``CUDA_ERROR_OUT_OF_MEMORY``), or its number."""
    try:
        name = ctypes.c_char_p()
        if _fn("cuGetErrorName")(int(code), ctypes.byref(name)) == 0 and name.value:
            return name.value.decode(errors="replace")
    except Exception:  # an unknown code: show its number
        pass
    return f"CUresult {int(code)}"


def _fail(what: str, code: int, loc: SourceLoc | None, *, running: bool = False) -> None:
    name = error_name(code)
    hint = _HINTS.get(name)
    cls = ExecutionError if running else LaunchError
    raise cls(f"CUDA driver call {what} failed: {name}", loc, hints=[hint] if hint else [])


def check(code: int, what: str, loc: SourceLoc | None = None, *,
          running: bool = False) -> None:
    """Raise on a failed ``CUresult``. ``running=True`` marks calls that report errors of
    kernels already queued (synchronizations, copies back): those raise
    ``ExecutionError``."""
    if code != 0:
        _fail(what, code, loc, running=running)


def _call(name: str, *args: Any, loc: SourceLoc | None = None, what: str | None = None,
          running: bool = False) -> None:
    """Call driver function ``name`` and check its status."""
    check(_fn(name)(*args), what or name, loc, running=running)


# --- is there a GPU? ----------------------------------------------------------------------


class GpuStatus(Record):
    __slots__ = ()
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
        init = _fn("cuInit")
    except LaunchError as exc:  # no libcuda (or one without cuInit)
        return GpuStatus(False, exc.message)
    err = init(0)
    if err != 0:
        return GpuStatus(False, f"cuInit failed: {error_name(err)}")
    version, count = ctypes.c_int(), ctypes.c_int()
    err = _fn("cuDriverGetVersion")(ctypes.byref(version))
    err2 = _fn("cuDeviceGetCount")(ctypes.byref(count))
    known = version.value if err == 0 else None
    if err2 != 0 or count.value == 0:
        return GpuStatus(False, "the CUDA driver found no device", 0, known)
    return GpuStatus(True, "", count.value, known)


def available() -> bool:
    return status().available


def driver_version() -> str | None:
    """``"13.0"`` style, or None without a driver."""
    v = status().driver_version
    return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"


# --- devices ------------------------------------------------------------------------------


class DeviceProps(Record):
    """What launch checks and code generation need to know about one device."""
    __slots__ = ()
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


def _device(ordinal: int, loc: SourceLoc | None = None) -> int:
    """The ``CUdevice`` of an ordinal."""
    dev = ctypes.c_int()  # CUdevice
    _call("cuDeviceGet", ctypes.byref(dev), ordinal, loc=loc)
    return dev.value


@functools.cache
def device_props(ordinal: int = 0) -> DeviceProps:
    dev = _device(ordinal)
    value = ctypes.c_int()

    def attr(a: int) -> int:
        _call("cuDeviceGetAttribute", ctypes.byref(value), a, dev)
        return value.value

    name = ctypes.create_string_buffer(256)
    _call("cuDeviceGetName", name, len(name), dev)
    total = ctypes.c_size_t()
    _call("cuDeviceTotalMem", ctypes.byref(total), dev)
    return DeviceProps(
        ordinal=ordinal,
        name=name.value.decode(errors="replace"),
        capability=(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
        sm_count=attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        max_shared_optin=attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_grid=(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
                  attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                  attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)),
        max_threads_per_block=attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        total_memory=total.value,
    )


_contexts: dict[int, int] = {}  # ordinal -> its retained primary context (CUcontext)


def _current_context(loc: SourceLoc | None = None) -> int:
    """The current ``CUcontext`` of this thread, 0 when none."""
    ctx = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(ctx), loc=loc)
    return ctx.value or 0


def use_device(ordinal: int, loc: SourceLoc | None = None) -> int:
    """Retain the device's primary context (once) and make it current on this thread;
    returns the context (a ``CUcontext`` as an int).

    The primary context is the one torch and cupy use, so their pointers and streams
    are valid in it."""
    ctx = _contexts.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(ordinal)
            if ctx is None:
                dev = _device(ordinal, loc)
                handle = ctypes.c_void_p()
                _call("cuDevicePrimaryCtxRetain", ctypes.byref(handle), dev, loc=loc)
                ctx = handle.value or 0
                _contexts[ordinal] = ctx
    if _current_context(loc) != ctx:
        _call("cuCtxSetCurrent", ctx, loc=loc)
    return ctx


def current_device() -> int:
    """The device of the current context (0 when none is current)."""
    ctx = ctypes.c_void_p()
    if _fn("cuCtxGetCurrent")(ctypes.byref(ctx)) != 0 or not ctx.value:
        return 0
    dev = ctypes.c_int()  # CUdevice
    _call("cuCtxGetDevice", ctypes.byref(dev))
    return dev.value


def pointer_device(ptr: int) -> int:
    """The device ordinal that owns a device pointer (for ``__cuda_array_interface__``
    objects, which do not say)."""
    ordinal = ctypes.c_int()
    _call("cuPointerGetAttribute", ctypes.byref(ordinal), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
          ptr)
    return ordinal.value


# --- modules and functions ----------------------------------------------------------------


class LoadedFunction(Record):
    """A kernel loaded into one device's primary context."""
    __slots__ = ()
    module: Any  # CUmodule, as an int
    function: Any  # CUfunction, as an int
    handle: int  # the CUfunction, for the ctypes launch
    device: int


def load_function(image: bytes, name: str, device: int, shared_bytes: int,
                  loc: SourceLoc | None = None) -> LoadedFunction:
    """Load a cubin (or PTX, JIT-compiled by the driver) and find ``name`` in it; opt in to
    more than 48 KB of dynamic shared memory when the kernel needs it."""
    use_device(device, loc)
    data = image if image.startswith(b"\x7fELF") or image.endswith(b"\0") else image + b"\0"
    module = ctypes.c_void_p()
    _call("cuModuleLoadData", ctypes.byref(module), data, loc=loc,
          what=f"cuModuleLoadData({name})")
    function = ctypes.c_void_p()
    _call("cuModuleGetFunction", ctypes.byref(function), module, name.encode(), loc=loc,
          what=f"cuModuleGetFunction({name})")
    if shared_bytes > MAX_SHARED_WITHOUT_OPT_IN:
        _call("cuFuncSetAttribute", function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
              shared_bytes, loc=loc,
              what=f"cuFuncSetAttribute({name}, MAX_DYNAMIC_SHARED_SIZE_BYTES={shared_bytes})")
    handle = function.value or 0
    return LoadedFunction(module.value or 0, handle, handle, device)


# 32-bit registers one block may use (and one SM holds) on sm_80 and sm_90.
REGISTER_FILE = 65536

# CUfunction_attribute values (cuda.h)
FUNC_MAX_THREADS_PER_BLOCK = 0
FUNC_LOCAL_SIZE_BYTES = 3
FUNC_NUM_REGS = 4


def function_attributes(handle: int) -> dict[int, int]:
    """``cuFuncGetAttribute`` of a loaded function for its thread limit, local memory per
    thread (register spills) and registers per thread; empty when the driver (or a test's
    stand-in) does not answer. Never raises: the answers only inform."""
    try:
        fn = library().cuFuncGetAttribute
    except Exception:  # no driver, or a stand-in without the symbol
        return {}
    fn.argtypes = (ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_void_p)
    fn.restype = ctypes.c_int
    out: dict[int, int] = {}
    value = ctypes.c_int()
    for attr in (FUNC_MAX_THREADS_PER_BLOCK, FUNC_LOCAL_SIZE_BYTES, FUNC_NUM_REGS):
        if fn(ctypes.byref(value), attr, ctypes.c_void_p(handle)) == 0:
            out[attr] = value.value
    return out


# --- tensor maps (TMA) --------------------------------------------------------------------


def encode_tensor_map(global_address: int, data_type: int, rank: int,
                      global_dim: Sequence[int], global_strides: Sequence[int],
                      box_dim: Sequence[int], element_strides: Sequence[int], interleave: int,
                      swizzle: int, l2_promotion: int, oob_fill: int,
                      loc: SourceLoc | None = None, what: str | None = None) -> bytes:
    """One ``cuTensorMapEncodeTiled``: the 128 bytes of the ``CUtensorMap`` it writes.

    The arguments after ``global_address`` are the driver's, in its order (dimension 0
    innermost, ``global_strides`` in bytes for dimensions 1..rank-1, enums as ints):
    ``tilekit.layout.tma.TmaDescriptorParams.driver_args()``, passed as they are. The map
    is written into a 64-byte aligned scratch buffer (the driver requires it) and
    returned as bytes: it is plain data, valid in any context, passed to kernels by
    value."""
    scratch = ctypes.create_string_buffer(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN)
    address = ctypes.addressof(scratch)
    address += -address % TENSOR_MAP_ALIGN
    tensor_map = structs()["CUtensorMap"].from_address(address)
    _call("cuTensorMapEncodeTiled", tensor_map, data_type, rank, global_address,
          (ctypes.c_uint64 * rank)(*global_dim),
          (ctypes.c_uint64 * max(rank - 1, 1))(*global_strides),
          (ctypes.c_uint32 * rank)(*box_dim), (ctypes.c_uint32 * rank)(*element_strides),
          interleave, swizzle, l2_promotion, oob_fill, loc=loc, what=what)
    return ctypes.string_at(address, TENSOR_MAP_BYTES)


# --- memory and streams -------------------------------------------------------------------


def alloc(nbytes: int, loc: SourceLoc | None = None) -> int:
    ptr = ctypes.c_uint64()  # CUdeviceptr
    _call("cuMemAlloc", ctypes.byref(ptr), max(nbytes, 1), loc=loc)
    return ptr.value


def free(ptr: int) -> None:
    _fn("cuMemFree")(ptr)  # best effort: freeing happens on error paths too


_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
_pools: dict[int, int] = {}  # device ordinal -> tilekit's memory pool on it


def _pool(device: int, loc: SourceLoc | None) -> int:
    """tilekit's stream-ordered memory pool on ``device``: one that keeps the memory freed
    into it (release threshold: all), so a launch that allocates and frees the same bytes
    each time maps them once. The device's default pool would give its memory back at
    every synchronization (~0.13 ms to map 132 MB again on the H100), and its settings
    belong to whoever else uses it."""
    pool = _pools.get(device)
    if pool is None:
        props = structs()["CUmemPoolProps"](
            allocType=_CU_MEM_ALLOCATION_TYPE_PINNED, locationType=_CU_MEM_LOCATION_TYPE_DEVICE,
            locationId=device)
        handle = ctypes.c_void_p()  # CUmemoryPool
        _call("cuMemPoolCreate", ctypes.byref(handle), ctypes.byref(props), loc=loc)
        keep = ctypes.c_uint64(2**64 - 1)
        _call("cuMemPoolSetAttribute", handle, _CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
              ctypes.byref(keep), loc=loc)
        pool = _pools[device] = handle.value or 0
    return pool


def alloc_async(nbytes: int, stream: int, device: int,
                loc: SourceLoc | None = None) -> int:
    """Device memory ordered on ``stream``: usable by work queued on ``stream`` after
    this call, from tilekit's pool on ``device`` (``_pool``); inside a CUDA graph capture,
    from the default pool, whose allocations a capture records as graph nodes."""
    ptr = ctypes.c_uint64()  # CUdeviceptr
    capturing = ctypes.c_int()  # CUstreamCaptureStatus
    _call("cuStreamIsCapturing", stream or None, ctypes.byref(capturing), loc=loc)
    if capturing.value:
        _call("cuMemAllocAsync", ctypes.byref(ptr), max(nbytes, 1), stream or None, loc=loc)
    else:
        _call("cuMemAllocFromPoolAsync", ctypes.byref(ptr), max(nbytes, 1),
              _pool(device, loc), stream or None, loc=loc)
    return ptr.value


def free_async(ptr: int, stream: int) -> None:
    """Free ``alloc_async`` memory once the work queued on ``stream`` so far is done."""
    _fn("cuMemFreeAsync")(ptr, stream or None)  # best effort: error paths free too


_CU_MEMORYTYPE_DEVICE = 2


def copy_rows(dst: int, dst_pitch: int, src: int, src_pitch: int, row_bytes: int, rows: int,
              stream: int, loc: SourceLoc | None = None) -> None:
    """Copy ``rows`` rows of ``row_bytes`` bytes between two device buffers whose rows
    start every ``src_pitch`` and ``dst_pitch`` bytes (``cuMemcpy2DAsync``)."""
    if not (rows and row_bytes):
        return
    copy = structs()["CUDA_MEMCPY2D"](
        srcMemoryType=_CU_MEMORYTYPE_DEVICE, srcDevice=src, srcPitch=src_pitch,
        dstMemoryType=_CU_MEMORYTYPE_DEVICE, dstDevice=dst, dstPitch=dst_pitch,
        WidthInBytes=row_bytes, Height=rows)
    _call("cuMemcpy2DAsync", ctypes.byref(copy), stream or None, loc=loc)


def copy_to_device(dst: int, src_host: int, nbytes: int, stream: int,
                   loc: SourceLoc | None = None) -> None:
    if nbytes:
        _call("cuMemcpyHtoDAsync", dst, src_host, nbytes, stream or None, loc=loc)


def copy_to_host(dst_host: int, src: int, nbytes: int, stream: int,
                 loc: SourceLoc | None = None) -> None:
    if nbytes:
        _call("cuMemcpyDtoHAsync", dst_host, src, nbytes, stream or None, loc=loc,
              running=True)


def copy_device(dst: int, src: int, nbytes: int, stream: int,
                loc: SourceLoc | None = None) -> None:
    """Copy ``nbytes`` between two device buffers, ordered on ``stream``."""
    if nbytes:
        _call("cuMemcpyDtoDAsync", dst, src, nbytes, stream or None, loc=loc)


def memset32(dst: int, value: int, count: int, stream: int,
             loc: SourceLoc | None = None) -> None:
    _call("cuMemsetD32Async", dst, value, count, stream or None, loc=loc)


def synchronize(stream: int, loc: SourceLoc | None = None) -> None:
    """Wait for ``stream``; an error of a kernel that ran on it surfaces here."""
    _call("cuStreamSynchronize", stream or None, loc=loc, running=True)


# --- the launch ---------------------------------------------------------------------------


@functools.cache
def launch_fn() -> Any:
    """``cuLaunchKernel`` from libcuda through ctypes, for the hot path. No ``argtypes``:
    converting eleven arguments through them costs about as much again as the call, so
    callers pass ``ctypes.c_void_p`` objects for the function, the stream and the
    parameter array, and Python ints below 2^31 for the grid, block and shared memory
    (C ``int``, the same registers as the ``unsigned int`` parameters)."""
    fn = library().cuLaunchKernel
    fn.restype = ctypes.c_int
    return fn


@functools.cache
def launch_ex_fn() -> Any:
    """``cuLaunchKernelEx`` from libcuda through ctypes, for the fast path, or None when the
    driver has none (before CUDA 12). Four arguments instead of eleven, all pre-built by
    the caller (the ``CUlaunchConfig`` bytes, the function, the parameter array, NULL): ctypes
    converts nothing per call."""
    fn = getattr(library(), "cuLaunchKernelEx", None)
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
        _fail("cuLaunchKernel", code, loc)
