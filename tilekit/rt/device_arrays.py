"""Arrays for the GPU backend: device arrays described without copies, host arrays staged.

A device array (torch CUDA tensor, cupy array, anything with
``__cuda_array_interface__`` or a CUDA ``__dlpack__``) becomes a ``DeviceArray``: its
data pointer (byte offset included), shape, strides in elements, dtype and device
ordinal, read from the object's metadata; nothing is copied and the kernel writes the
caller's memory. A host array (numpy, a CPU torch tensor, CPU DLPack) becomes a
``StagedArray``: the bytes its elements span are copied to a fresh device buffer with
the same strides before the launch, and, when the kernel writes that argument, copied
back element by element after it succeeded (never into the gaps of a strided view).

Which backend runs a launch follows the arrays (``choose_backend``).
"""

from __future__ import annotations

import ctypes
import enum
import functools
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from tilekit import knobs
from tilekit.errors import LaunchError, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.record import Record

if TYPE_CHECKING:  # host arrays (tilekit.rt.arrays): imported when one is staged
    from tilekit.rt.arrays import HostArray

_BY_LONG = {d.long: d for d in DType}


def _span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum(abs(st) * (n - 1) for n, st in zip(shape, strides))


def index_dtype_for(shape: tuple[int, ...], strides: tuple[int, ...]) -> DType:
    """int32 when every offset, extent and stride of the view fits in it, else int64 (the
    same rule as the interpreter's ``HostArray.index_dtype``)."""
    fits = _span(shape, strides) < 2**31 and all(n < 2**31 for n in shape) and \
        all(abs(s) < 2**31 for s in strides)
    return DType.INT32 if fits else DType.INT64


class DeviceArray(Record):
    """A view of device memory owned by the caller's object."""
    __slots__ = ()
    name: str
    ptr: int  # the address of element (0, ..., 0)
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device: int
    kind: str  # "torch", "cupy", "cuda_array_interface", "dlpack"
    readonly: bool = False
    keepalive: Any = None  # what must outlive the launch (a DLPack capsule)

    @property
    def index_dtype(self) -> DType:
        return index_dtype_for(self.shape, self.strides)

    @property
    def aligned16(self) -> bool:
        return self.ptr % 16 == 0

    @property
    def span(self) -> int:
        return _span(self.shape, self.strides)


class StagedArray:
    """A host array that travels to the device for the launch (and back if written)."""

    def __init__(self, name: str, host: HostArray, device: int | None = None) -> None:
        self.name = name
        self.host = host
        self.device = device  # host arrays go where the other arguments are
        arr = host.array
        # lo: byte offset of the lowest addressed element (<= 0); nbytes: bytes from the
        # lowest to past the highest element
        self.lo, self.nbytes = 0, 0
        if arr.size:
            lo = sum(min(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides))
            hi = sum(max(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides)) + \
                arr.itemsize
            self.lo, self.nbytes = lo, hi - lo

    def __repr__(self) -> str:
        return f"StagedArray({self.name!r}, {self.nbytes} bytes, device={self.device})"

    dtype = property(lambda self: self.host.dtype)
    shape = property(lambda self: self.host.shape)
    strides = property(lambda self: self.host.strides)

    @property
    def index_dtype(self) -> DType:
        return self.host.index_dtype

    @property
    def aligned16(self) -> bool:
        # The device buffer starts 256-byte aligned at the lowest element.
        return (-self.lo) % 16 == 0

    @property
    def span(self) -> int:
        return self.host.span

    @property
    def readonly(self) -> bool:
        return not self.host.array.flags.writeable

    def upload_source(self) -> int:
        """The host address of the lowest element (the start of the bytes to copy)."""
        return self.host.array.ctypes.data + self.lo

    def device_ptr(self, base: int) -> int:
        """The device address of element (0, ..., 0) in a buffer copied from
        ``upload_source``."""
        return base - self.lo

    def copy_back(self, staging: np.ndarray) -> None:
        """Write the elements (only those) from a host copy of the device buffer."""
        arr = self.host.array
        if arr.size == 0:
            return
        view = np.ndarray(arr.shape, arr.dtype, buffer=staging, offset=-self.lo,
                          strides=arr.strides)
        arr[...] = view
        if self.host.writeback is not None:
            self.host.writeback()


GpuArg = DeviceArray | StagedArray


# --- recognizing device arrays ------------------------------------------------------------

_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST, _DLPACK_CUDA_MANAGED = 1, 2, 3, 13


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _is_cupy(obj: Any) -> bool:
    return type(obj).__module__.startswith("cupy") and hasattr(obj, "get")


def check_torch_tensor(t: Any, name: str, loc: SourceLoc | None) -> None:
    """A LaunchError for a torch tensor no kernel can use, whatever the backend: a meta or
    fake tensor (a shape and a dtype, no data) or a sparse one (no strided memory)."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")  # loaded by whoever made one
    meta = getattr(t, "is_meta", False)  # (stand-ins for torch tensors may lack it)
    if meta or (fake is not None and isinstance(t, fake.FakeTensor)):
        what = "meta" if meta else "fake"
        raise LaunchError(
            f"argument `{name}` is a torch {what} tensor: it has a shape and a dtype but no "
            "data, so a kernel cannot read or write it", loc,
            hints=[f"pass a tensor with memory, e.g. torch.empty_like({name}, "
                   "device=\"cuda\"); `.to(\"cuda\")` cannot help, there is nothing to copy"])
    layout = str(getattr(t, "layout", "torch.strided"))
    if layout != "torch.strided":
        raise LaunchError(f"argument `{name}` is a {layout.removeprefix('torch.')} torch "
                          "tensor; kernels take dense (strided) tensors", loc,
                          hints=[f"pass {name}.to_dense()"])


def is_array(obj: Any) -> bool:
    """Whether ``obj`` is an array a kernel takes (numpy, torch, cupy, DLPack), on the host or
    the device. (Here, not in ``tilekit.rt.arrays``: every launch asks, and a launch of device
    arrays never needs host arrays.)"""
    return isinstance(obj, np.ndarray) or hasattr(obj, "__dlpack__") or _is_torch(obj) \
        or _is_cupy(obj)


def is_device_array(obj: Any) -> bool:
    """Whether ``obj`` lives in CUDA device memory (without touching the driver)."""
    if isinstance(obj, np.ndarray):
        return False
    if _is_torch(obj):
        return obj.device.type == "cuda"
    if _is_cupy(obj) or hasattr(obj, "__cuda_array_interface__"):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None:
        try:
            return int(dev()[0]) in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED)
        except Exception:
            return False
    return False


def _dtype_by_name(name: str, arg: str, loc: SourceLoc | None) -> DType:
    dtype = _BY_LONG.get(name)
    if dtype is None:
        raise LaunchError(f"argument `{arg}` has element type {name}, which tilekit does not "
                          "support", loc, hints=["supported: " + ", ".join(_BY_LONG)])
    return dtype


def _torch_array(t: Any, name: str, loc: SourceLoc | None) -> DeviceArray:
    dtype = _dtype_by_name(str(t.dtype).removeprefix("torch."), name, loc)
    return DeviceArray(name, int(t.data_ptr()), dtype, tuple(t.shape), tuple(t.stride()),
                       int(t.device.index or 0), "torch")


def _cupy_array(a: Any, name: str, loc: SourceLoc | None) -> DeviceArray:
    try:
        dtype = DType.from_numpy(a.dtype)
    except TypeError:
        dtype = _dtype_by_name(str(a.dtype), name, loc)
    item = a.dtype.itemsize
    _check_byte_strides(a.strides, item, name, loc)
    return DeviceArray(name, int(a.data.ptr), dtype, tuple(a.shape),
                       tuple(s // item for s in a.strides), int(a.device.id), "cupy")


def _check_byte_strides(strides: tuple[int, ...], item: int, name: str,
                        loc: SourceLoc | None) -> None:
    if any(s % item for s in strides):
        raise LaunchError(f"argument `{name}` has strides {tuple(strides)} bytes that are not "
                          f"multiples of its element size {item}", loc,
                          hints=["pass a contiguous copy"])


def _cai_array(obj: Any, name: str, loc: SourceLoc | None) -> DeviceArray:
    from tilekit.rt import driver

    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    try:
        np_dtype = np.dtype(cai["typestr"])
        dtype = DType.from_numpy(np_dtype)
    except TypeError:
        raise LaunchError(f"argument `{name}` has element type {cai['typestr']}, which "
                          "tilekit does not support", loc) from None
    shape = tuple(int(n) for n in cai["shape"])
    item = np_dtype.itemsize
    if cai.get("strides") is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(step)
            step *= n
        elem_strides = tuple(reversed(strides))
    else:
        _check_byte_strides(tuple(cai["strides"]), item, name, loc)
        elem_strides = tuple(int(s) // item for s in cai["strides"])
    device = driver.pointer_device(int(ptr)) if ptr else driver.current_device()
    return DeviceArray(name, int(ptr or 0), dtype, shape, elem_strides, device,
                       "cuda_array_interface", bool(readonly))


@functools.cache
def _dlpack_structs() -> tuple[Any, Any]:
    """DLPack's C structs (dlpack.h, v0.8 and v1.x): ``DLTensor`` and
    ``DLManagedTensorVersioned``. Made when the first capsule is read, not at import: four
    ctypes classes cost ~0.1 ms to create, and torch and cupy arrays never need them."""

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    class DLManagedTensorVersioned(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                    ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

    return DLTensor, DLManagedTensorVersioned


_DL_READ_ONLY = 1
_DL_CODES = {(0, 8): DType.INT8, (0, 16): DType.INT16, (0, 32): DType.INT32,
             (0, 64): DType.INT64, (1, 8): DType.UINT8, (1, 16): DType.UINT16,
             (1, 32): DType.UINT32, (1, 64): DType.UINT64, (2, 16): DType.FLOAT16,
             (2, 32): DType.FLOAT32, (2, 64): DType.FLOAT64, (4, 16): DType.BFLOAT16,
             (6, 8): DType.BOOL, (1, 1): DType.BOOL}


@functools.cache
def _capsule_api() -> tuple[Any, Any]:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype = ctypes.c_int
    is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get, is_valid


def dlpack_view(capsule: Any, name: str, loc: SourceLoc | None) -> tuple[
        int, DType, tuple[int, ...], tuple[int, ...], int, int, bool]:
    """Read a DLPack capsule without consuming it: (data pointer incl. byte offset, dtype,
    shape, strides in elements, device type, device id, read-only)."""
    get, is_valid = _capsule_api()
    dl_tensor, dl_managed_versioned = _dlpack_structs()
    readonly = False
    if is_valid(capsule, b"dltensor_versioned"):
        managed = dl_managed_versioned.from_address(get(capsule, b"dltensor_versioned"))
        t = managed.dl_tensor
        readonly = bool(managed.flags & _DL_READ_ONLY)
    elif is_valid(capsule, b"dltensor"):
        t = dl_tensor.from_address(get(capsule, b"dltensor"))
    else:
        raise LaunchError(f"argument `{name}`: __dlpack__ did not return a DLPack capsule", loc)
    code = (int(t.dtype.code), int(t.dtype.bits))
    if code not in _DL_CODES or t.dtype.lanes != 1:
        raise LaunchError(f"argument `{name}` has a DLPack element type (code {code[0]}, "
                          f"{code[1]} bits, {t.dtype.lanes} lanes) tilekit does not support", loc)
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    if t.strides:
        strides = tuple(int(t.strides[i]) for i in range(ndim))
    else:
        acc, out = 1, []
        for n in reversed(shape):
            out.append(acc)
            acc *= n
        strides = tuple(reversed(out))
    ptr = int(t.data or 0) + int(t.byte_offset)
    return (ptr, _DL_CODES[code], shape, strides, int(t.device.device_type),
            int(t.device.device_id), readonly)


def _dlpack_array(obj: Any, name: str, loc: SourceLoc | None) -> DeviceArray:
    try:
        capsule = obj.__dlpack__()
    except Exception as exc:
        raise LaunchError(f"argument `{name}` could not be read through DLPack: {exc}",
                          loc) from None
    ptr, dtype, shape, strides, _, device, readonly = dlpack_view(capsule, name, loc)
    return DeviceArray(name, ptr, dtype, shape, strides, device, "dlpack", readonly, capsule)


def describe(obj: Any, name: str, loc: SourceLoc | None) -> GpuArg:
    """What the GPU backend launches with for argument ``name`` (no copy made here)."""
    if _is_torch(obj):
        check_torch_tensor(obj, name, loc)
        if obj.device.type == "cuda":
            return _torch_array(obj, name, loc)
        return _staged(obj, name, loc)
    if _is_cupy(obj):
        return _cupy_array(obj, name, loc)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_array(obj, name, loc)
    if not isinstance(obj, np.ndarray) and is_device_array(obj):
        return _dlpack_array(obj, name, loc)
    return _staged(obj, name, loc)


def _staged(obj: Any, name: str, loc: SourceLoc | None) -> StagedArray:
    """A host array, staged (``tilekit.rt.arrays`` is imported by the first one: launches of
    device arrays never need it)."""
    from tilekit.rt.arrays import to_host

    return StagedArray(name, to_host(obj, name, loc))


# --- which backend ------------------------------------------------------------------------


class BackendKind(enum.Enum):
    CUDA = "cuda"
    INTERPRETER = "interpreter"


class Backend(Record):
    __slots__ = ()
    kind: BackendKind
    reason: str


def codegen_available() -> bool:
    """Whether GPU code generation is installed in this tilekit (it lands in stages)."""
    try:
        return importlib.util.find_spec("tilekit.codegen.driver") is not None
    except (ImportError, ValueError):
        return False


def choose_backend(any_device_array: bool) -> Backend:
    """The interpreter when asked (``TILEKIT_INTERPRET=1``) or when there is no GPU; CUDA
    otherwise. Device arrays under ``TILEKIT_INTERPRET=1`` are copied to the host."""
    if knobs.INTERPRET.get():
        return Backend(BackendKind.INTERPRETER, "TILEKIT_INTERPRET=1")
    from tilekit.rt import driver

    gpu = driver.status()
    if not gpu.available:
        return Backend(BackendKind.INTERPRETER, gpu.reason)
    if not codegen_available():
        return Backend(BackendKind.INTERPRETER, "this tilekit has no GPU code generation yet")
    return Backend(BackendKind.CUDA, "device arrays" if any_device_array else "a GPU is present")


# --- streams ------------------------------------------------------------------------------


def stream_handle(stream: Any, loc: SourceLoc | None) -> int:
    """An explicit ``stream=``: an int handle, or an object with ``cuda_stream`` (torch),
    ``ptr`` (cupy), ``handle`` or ``__cuda_stream__`` (the CUDA stream protocol)."""
    if stream is None:
        return 0
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
        return int(stream)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, (int, np.integer)):
            return int(value)
    raise LaunchError(f"stream= must be a CUDA stream handle (int) or a stream object "
                      f"(torch.cuda.Stream, cupy.cuda.Stream), got {type(stream).__name__}", loc)


def torch_current_stream() -> Any:
    """``device -> handle of torch's current stream on it``, the cheapest way torch offers
    (``torch._C._cuda_getCurrentRawStream``, what Triton uses, reads the handle without
    building a ``torch.cuda.Stream``)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: int(torch.cuda.current_stream(device).cuda_stream)


def current_stream(args: list[GpuArg], values: list[Any], device: int) -> int:
    """The caller's current stream: torch's when a torch tensor is passed, cupy's for cupy
    arrays, else the legacy default stream."""
    if any(_is_torch(v) for v in values):
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)
    if any(_is_cupy(v) for v in values):
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0
