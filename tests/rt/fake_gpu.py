"""A CUDA backend without a GPU: fake torch tensors and a fake driver, for the runtime's
decisions (which variant a launch loads, hit or miss of the fast path, what is packed).

``use_fake_gpu(monkeypatch)`` routes ``kern[grid](...)`` through the CUDA backend with
every driver call replaced: a kernel "loads" with the slots of the kernel ABI for its
traced arguments (``abi_compile``: no code generation, no binary), and ``cuLaunchKernel``
(the slow path's) and ``cuLaunchKernelEx`` (the fast path's) are recorders of the launch
configuration, the function and the argument slots they were given. So tests check what
the runtime decides and packs (byte for byte what the slow path packs), not the device
(``test_gpu.py`` does that).

``FakeLibcuda`` is one level lower: a stand-in for libcuda itself, whose functions are C
callbacks with cuda.h's prototypes, for ``driver.use_library``. With it, ``driver``'s own
code runs (ctypes conversions included) without a GPU: ``warm_start.py`` uses it. Its
``cuTensorMapEncodeTiled`` records its arguments (``tensor_maps``) and writes a digest of
them as the map (``encoding``).
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import struct
from typing import TYPE_CHECKING, Any

from tilekit.codegen.artifact import CompiledKernel, ParamSlot, SlotKind
from tilekit.ir.types import TensorType
from tilekit.rt import device_arrays, driver, fastpath, gpu

if TYPE_CHECKING:
    import pytest

PROPS = driver.DeviceProps(0, "Fake H100", (9, 0), 132, 227 * 1024,
                           (2**31 - 1, 65535, 65535), 1024, 80 << 30)


_P = ctypes.POINTER
_CUresult = ctypes.c_int
_ptr = ctypes.c_void_p  # CUcontext, CUmodule, CUfunction, CUstream and void*
_devptr = ctypes.c_uint64  # CUdeviceptr

# cuda.h's prototypes (CUDA 13) of the symbols tilekit calls, written out independently of
# driver._PROTOTYPES: a callback receives its arguments as these C types.
_LIBCUDA: dict[str, tuple[Any, ...]] = {
    "cuGetErrorName": (ctypes.c_int, _P(ctypes.c_char_p)),
    "cuInit": (ctypes.c_uint,),
    "cuDriverGetVersion": (_P(ctypes.c_int),),
    "cuDeviceGetCount": (_P(ctypes.c_int),),
    "cuDeviceGet": (_P(ctypes.c_int), ctypes.c_int),
    "cuDeviceGetAttribute": (_P(ctypes.c_int), ctypes.c_int, ctypes.c_int),
    "cuDeviceGetName": (ctypes.c_void_p, ctypes.c_int, ctypes.c_int),
    "cuDeviceTotalMem_v2": (_P(ctypes.c_size_t), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (_P(_ptr), ctypes.c_int),
    "cuCtxGetCurrent": (_P(_ptr),),
    "cuCtxSetCurrent": (_ptr,),
    "cuCtxGetDevice": (_P(ctypes.c_int),),
    "cuPointerGetAttribute": (ctypes.c_void_p, ctypes.c_int, _devptr),
    "cuModuleLoadData": (_P(_ptr), ctypes.c_void_p),
    "cuModuleGetFunction": (_P(_ptr), _ptr, ctypes.c_char_p),
    "cuFuncSetAttribute": (_ptr, ctypes.c_int, ctypes.c_int),
    "cuMemAlloc_v2": (_P(_devptr), ctypes.c_size_t),
    "cuMemFree_v2": (_devptr,),
    "cuMemcpyHtoDAsync_v2": (_devptr, ctypes.c_void_p, ctypes.c_size_t, _ptr),
    "cuMemcpyDtoHAsync_v2": (ctypes.c_void_p, _devptr, ctypes.c_size_t, _ptr),
    "cuMemsetD32Async": (_devptr, ctypes.c_uint, ctypes.c_size_t, _ptr),
    "cuStreamSynchronize": (_ptr,),
    "cuLaunchKernel": (_ptr, *[ctypes.c_uint] * 7, _ptr, _P(_ptr), _P(_ptr)),
    "cuLaunchKernelEx": (ctypes.c_void_p, _ptr, _P(_ptr), _P(_ptr)),
    "cuTensorMapEncodeTiled": (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                               _P(ctypes.c_uint64), _P(ctypes.c_uint64), _P(ctypes.c_uint32),
                               _P(ctypes.c_uint32), ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int),
}

_ERROR_NAMES = {0: b"CUDA_SUCCESS", 1: b"CUDA_ERROR_INVALID_VALUE",
                2: b"CUDA_ERROR_OUT_OF_MEMORY", 201: b"CUDA_ERROR_INVALID_CONTEXT",
                500: b"CUDA_ERROR_NOT_FOUND"}


class FakeLibcuda:
    """libcuda of one H100 (``PROPS``) that runs nothing: each symbol of ``_LIBCUDA`` is a
    C callback of its prototype, answering as the driver would (out-parameters written,
    handles handed out, a CUresult returned). ``calls`` lists the symbols called, in
    order; ``fail`` maps a symbol to the CUresult it returns instead of succeeding."""

    ATTRIBUTES = {1: PROPS.max_threads_per_block, 5: PROPS.max_grid[0],
                  6: PROPS.max_grid[1], 7: PROPS.max_grid[2], 16: PROPS.sm_count,
                  75: PROPS.capability[0], 76: PROPS.capability[1],
                  97: PROPS.max_shared_optin}

    def __init__(self) -> None:
        self.calls: list[str] = []
        # cuTensorMapEncodeTiled's calls: (globalAddress, the other arguments in the order
        # of tilekit.layout.tma.TmaDescriptorParams.driver_args(), the map's address)
        self.tensor_maps: list[tuple[int, tuple[Any, ...], int]] = []
        self.fail: dict[str, int] = {}
        self.current = 0  # the current context (one thread is enough here)
        self.modules: list[bytes] = []
        self.func_attrs: dict[tuple[int, int], int] = {}
        self._next = itertools.count(0x10000, 0x100)
        self._names = {k: ctypes.c_char_p(v) for k, v in _ERROR_NAMES.items()}
        for symbol, argtypes in _LIBCUDA.items():
            impl = getattr(self, "_" + symbol)
            proto = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)
            setattr(self, symbol, proto(self._wrap(symbol, impl)))

    def _wrap(self, symbol: str, impl: Any) -> Any:
        def call(*args: Any) -> int:
            self.calls.append(symbol)
            if symbol in self.fail:
                return self.fail[symbol]
            return impl(*args) or 0
        return call

    def _cuGetErrorName(self, code: int, out: Any) -> int:
        if code not in self._names:
            out[0] = None
            return 1
        out[0] = self._names[code]
        return 0

    def _cuInit(self, flags: int) -> int:
        return 1 if flags else 0

    def _cuDriverGetVersion(self, out: Any) -> None:
        out[0] = 13000

    def _cuDeviceGetCount(self, out: Any) -> None:
        out[0] = 1

    def _cuDeviceGet(self, out: Any, ordinal: int) -> int:
        if ordinal != 0:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        out[0] = 0
        return 0

    def _cuDeviceGetAttribute(self, out: Any, attribute: int, dev: int) -> int:
        if attribute not in self.ATTRIBUTES or dev != 0:
            return 1
        out[0] = self.ATTRIBUTES[attribute]
        return 0

    def _cuDeviceGetName(self, buf: int, length: int, dev: int) -> None:
        ctypes.memmove(buf, PROPS.name.encode()[:length - 1] + b"\0",
                       min(length, len(PROPS.name) + 1))

    def _cuDeviceTotalMem_v2(self, out: Any, dev: int) -> None:
        out[0] = PROPS.total_memory

    def _cuDevicePrimaryCtxRetain(self, out: Any, dev: int) -> None:
        out[0] = 0xC0C0

    def _cuCtxGetCurrent(self, out: Any) -> None:
        out[0] = self.current or None

    def _cuCtxSetCurrent(self, ctx: int | None) -> None:
        self.current = ctx or 0

    def _cuCtxGetDevice(self, out: Any) -> int:
        if not self.current:
            return 201
        out[0] = 0
        return 0

    def _cuPointerGetAttribute(self, data: int, attribute: int, ptr: int) -> int:
        if attribute != 9:
            return 1
        ctypes.c_int.from_address(data).value = 0
        return 0

    def _cuModuleLoadData(self, out: Any, image: int) -> int:
        if not self.current:
            return 201
        self.modules.append(ctypes.string_at(image, 4))
        out[0] = next(self._next)
        return 0

    def _cuModuleGetFunction(self, out: Any, module: int, name: bytes) -> int:
        if not module or not name:
            return 500
        out[0] = module + 1
        return 0

    def _cuFuncSetAttribute(self, function: int, attribute: int, value: int) -> None:
        self.func_attrs[(function, attribute)] = value

    def _cuMemAlloc_v2(self, out: Any, nbytes: int) -> int:
        if nbytes > PROPS.total_memory:
            return 2
        out[0] = 0x7E00_0000_0000 + next(self._next)
        return 0

    def _cuMemFree_v2(self, ptr: int) -> None:
        pass

    def _cuMemcpyHtoDAsync_v2(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        pass

    def _cuMemcpyDtoHAsync_v2(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        ctypes.memset(dst, 0, nbytes)  # device memory reads as zeros

    def _cuMemsetD32Async(self, dst: int, value: int, count: int, stream: Any) -> None:
        pass

    def _cuStreamSynchronize(self, stream: Any) -> None:
        pass

    def _cuLaunchKernel(self, function: int, *rest: Any) -> int:
        return 0 if function else 400  # CUDA_ERROR_INVALID_HANDLE

    def _cuLaunchKernelEx(self, config: int, function: int, params: Any, extra: Any) -> int:
        return 0 if function else 400

    def _cuTensorMapEncodeTiled(self, tensor_map: int | None, data_type: int, rank: int,
                                address: int | None, dims: Any, strides: Any, box: Any,
                                element_strides: Any, interleave: int, swizzle: int,
                                l2_promotion: int, oob_fill: int) -> int:
        """Records the call and writes ``encoding(...)`` of it; the address must be 64-byte
        aligned and the rank 1..5, as the driver requires (nothing else is checked)."""
        if not tensor_map or tensor_map % 64 or not 1 <= rank <= 5:
            return 1  # CUDA_ERROR_INVALID_VALUE
        args = (data_type, rank, tuple(dims[i] for i in range(rank)),
                tuple(strides[i] for i in range(rank - 1)), tuple(box[i] for i in range(rank)),
                tuple(element_strides[i] for i in range(rank)), interleave, swizzle,
                l2_promotion, oob_fill)
        self.tensor_maps.append((address or 0, args, tensor_map))
        ctypes.memmove(tensor_map, self.encoding(address or 0, args), 128)
        return 0

    @staticmethod
    def encoding(address: int, args: tuple[Any, ...]) -> bytes:
        """The 128 bytes the fake driver writes for a map: a digest of its arguments (any
        change of them changes the bytes)."""
        return hashlib.sha512(repr((address, args)).encode()).digest() * 2


class _Device:
    def __init__(self, index: int) -> None:
        self.type = "cuda" if index >= 0 else "cpu"
        self.index = index if index >= 0 else None


class FakeTensor:
    """What tilekit reads of a torch CUDA tensor; the methods are C callables, as torch's
    are, so that timings of the fast path are realistic."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "torch.float32",
                 ptr: int = 0x7F00_0000_0000, strides: tuple[int, ...] | None = None,
                 device: int = 0) -> None:
        self.shape = tuple(shape)
        if strides is None:
            acc, out = 1, []
            for n in reversed(self.shape):
                out.append(acc)
                acc *= n
            strides = tuple(reversed(out))
        self.dtype = dtype  # a str: hashable, and str() gives "torch.float32"
        self.device = _Device(device)
        self.data_ptr = itertools.repeat(ptr).__next__
        self.dim = itertools.repeat(len(self.shape)).__next__
        self.get_device = itertools.repeat(device).__next__
        self.stride = itertools.repeat(tuple(strides)).__next__
        size = {"torch.float32": 4, "torch.bfloat16": 2, "torch.float16": 2,
                "torch.float64": 8, "torch.int32": 4, "torch.int64": 8}.get(dtype, 4)
        self.element_size = itertools.repeat(size).__next__


FakeTensor.__module__ = "torch.fake"  # tilekit recognizes torch tensors by their module


def abi_compile(module: Any, arch: str,
                divisible: frozenset[tuple[str, int, int]] = frozenset()) -> CompiledKernel:
    """A stand-in for code generation: the ABI's slots for the traced arguments (per
    tensor its pointer, sizes and strides in its index type; the scalars in their
    dtypes; the status word), 4 warps, no binary."""
    tensors: list[ParamSlot] = []
    scalars: list[ParamSlot] = []
    for arg in module.kernel.args:
        t, name = arg.type, arg.name_hint
        if isinstance(t, TensorType):
            tensors.append(ParamSlot(SlotKind.POINTER, name, "uint64"))
            tensors += [ParamSlot(SlotKind.SIZE, name, t.index.long, a) for a in range(t.rank)]
            tensors += [ParamSlot(SlotKind.STRIDE, name, t.index.long, a)
                        for a in range(t.rank)]
        else:
            scalars.append(ParamSlot(SlotKind.SCALAR, name, t.dtype.long))
    params = (*tensors, *scalars, ParamSlot(SlotKind.STATUS, "", "uint64"))
    return CompiledKernel(module.kernel.name, arch, "ptx", b"", 4, 32, 0, params)


class Driver:
    """The fake driver: what it loaded (``variants``) and every launch (grid, stream, the
    packed slots)."""

    def __init__(self, compiled_fn: Any = abi_compile) -> None:
        self.launches: list[dict[str, Any]] = []
        self.loads = 0
        self.variants: list[gpu.Variant] = []  # what each load was for
        self.fail_next = 0
        self.compiled_fn = compiled_fn

    def launch_fn(self, fh: Any, gx: int, gy: int, gz: int, threads: int, by: int, bz: int,
                  shared: int, stream: Any, params: Any, extra: Any) -> int:
        """``cuLaunchKernel`` (the slow path's)."""
        if self.fail_next:
            self.fail_next -= 1
            return 201  # CUDA_ERROR_INVALID_CONTEXT
        self._record("slow", fh.value, (gx, gy, gz), (threads, by, bz), shared,
                     stream.value if stream else 0, params.value)
        return 0

    def launch_ex(self, config: Any, fh: Any, params: Any, extra: Any) -> int:
        """``cuLaunchKernelEx`` (the fast path's): the configuration read as the C struct."""
        if self.fail_next:
            self.fail_next -= 1
            return 201
        assert extra is None
        cfg = driver.structs()["CUlaunchConfig"].from_address(ctypes.addressof(config))
        assert cfg.attrs is None and cfg.numAttrs == 0
        self._record("fast", fh.value, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                     (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), cfg.sharedMemBytes,
                     cfg.hStream or 0, ctypes.addressof(params))
        return 0

    def _record(self, path: str, function: int, grid: tuple[int, int, int],
                block: tuple[int, int, int], shared: int, stream: int, params: int) -> None:
        assert block[1:] == (1, 1)
        self.launches.append({"path": path, "function": function, "grid": grid,
                              "threads": block[0], "shared": shared, "stream": stream,
                              "slots": (ctypes.c_void_p * 16).from_address(params),
                              "params": params})

    def load(self, kern: Any, variant: gpu.Variant, loc: Any,
             untraced: Any = None) -> gpu.LoadedKernel:
        """``gpu._load`` without a device: compile with ``compiled_fn``, "load" it."""
        if variant in kern._loaded:
            return kern._loaded[variant]
        self.loads += 1
        self.variants.append(variant)
        compiled = self.compiled_fn(kern.specialize(variant.spec), PROPS.arch,
                                    variant.divisible)
        function = driver.LoadedFunction(None, None, 0x1000 + self.loads, variant.device)
        loaded = gpu.LoadedKernel.build(compiled, function, PROPS, 0)
        kern._loaded[variant] = loaded
        return loaded


def use_fake_gpu(monkeypatch: pytest.MonkeyPatch, compiled_fn: Any = abi_compile) -> Driver:
    """Route launches through the CUDA backend with the fake driver (until the test
    ends)."""
    drv = Driver(compiled_fn)
    monkeypatch.setattr(gpu, "_load", drv.load)
    monkeypatch.setattr(driver, "use_device", lambda device, loc=None: None)
    monkeypatch.setattr(driver, "launch_fn", lambda: drv.launch_fn)
    monkeypatch.setattr(driver, "launch_ex_fn", lambda: drv.launch_ex)
    monkeypatch.setattr(device_arrays, "current_stream", lambda *a: 0)
    monkeypatch.setattr(device_arrays, "torch_current_stream", lambda: lambda device: 0)
    monkeypatch.setattr(device_arrays, "choose_backend", lambda on_device: device_arrays.Backend(
        device_arrays.BackendKind.CUDA, "fake"))
    return drv


def slots_of(launch: dict[str, Any], kernel: gpu.LoadedKernel) -> tuple[Any, ...]:
    """The slot values a recorded launch passed, decoded with the kernel's layout (read
    when called: decode a launch before the next one of the same kernel)."""
    out = []
    for i, p in enumerate(kernel.compiled.params):
        code = fastpath.SLOT_FORMATS[fastpath.slot_type(p)]
        out.append(struct.unpack("<" + code, ctypes.string_at(launch["slots"][i],
                                                              struct.calcsize(code)))[0])
    return tuple(out)
