"""Turning user arrays (numpy, torch, cupy, anything with DLPack) into what a
backend needs, with clear errors for what cannot work.

The interpreter runs on host memory: host arrays are used in place (writes
land in the caller's array); device arrays are copied to the host and the
copy written back after the launch, so ``TILEKIT_INTERPRET=1`` also works on
a GPU machine for debugging.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilekit.errors import LaunchError, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.record import Record


class HostArray(Record):
    """A host view of a user's array, and how to copy results back to it."""
    __slots__ = ()
    array: np.ndarray
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device: str
    writeback: Callable[[], None] | None = None

    @property
    def span(self) -> int:
        """Elements between the lowest and highest addressed element, plus one."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum(abs(st) * (n - 1) for n, st in zip(self.shape, self.strides))

    @property
    def aligned16(self) -> bool:
        """Whether the data pointer is 16-byte aligned (a specialization fact: code
        generation may then use 16-byte vector accesses)."""
        return self.array.ctypes.data % 16 == 0

    @property
    def index_dtype(self) -> DType:
        """int32 when every offset, extent and stride fits (a broadcast view can have a
        tiny span and an extent past 2**31)."""
        fits = self.span < 2**31 and all(n < 2**31 for n in self.shape) and \
            all(abs(st) < 2**31 for st in self.strides)
        return DType.INT32 if fits else DType.INT64


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _is_cupy(obj: Any) -> bool:
    return type(obj).__module__.startswith("cupy") and hasattr(obj, "get")


def _from_numpy(arr: np.ndarray, name: str, loc: SourceLoc | None, device: str = "cpu",
                writeback: Callable[[], None] | None = None) -> HostArray:
    try:
        dtype = DType.from_numpy(arr.dtype)
    except TypeError:
        raise LaunchError(
            f"argument `{name}` has element type {arr.dtype}, which tilekit does not support",
            loc, hints=["supported: " + ", ".join(d.long for d in DType),
                        f"convert it first, e.g. {name}.astype(np.float32)"]) from None
    # Strides first: numpy also marks such a view unaligned, and the stride is the real cause.
    item = arr.dtype.itemsize
    if any(s % item for s in arr.strides):
        raise LaunchError(f"argument `{name}` has strides {arr.strides} bytes that are not "
                          f"multiples of its element size {item}", loc,
                          hints=[f"pass a copy: np.ascontiguousarray({name})"])
    if not arr.flags.aligned:
        misalign = arr.ctypes.data % arr.dtype.alignment
        raise LaunchError(f"argument `{name}` is not aligned to its element size: its data "
                          f"starts {misalign} byte{'s' * (misalign != 1)} past a multiple of "
                          f"{arr.dtype.alignment}",
                          loc, hints=[f"pass a copy: np.ascontiguousarray({name})"])
    strides = tuple(s // item for s in arr.strides)
    return HostArray(arr, dtype, tuple(arr.shape), strides, device, writeback)


def _torch_to_host(t: Any, name: str, loc: SourceLoc | None) -> HostArray:
    from tilekit.rt.device_arrays import check_torch_tensor

    check_torch_tensor(t, name, loc)
    import torch

    src = t.detach()
    device = str(src.device)
    host = src if src.device.type == "cpu" else src.cpu()
    if host.dtype == torch.bfloat16:
        import ml_dtypes

        arr = host.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        try:
            arr = host.numpy()
        except TypeError as exc:
            raise LaunchError(f"argument `{name}` has element type {host.dtype}, which tilekit "
                              f"does not support ({exc})", loc) from None
    writeback = None
    if src.device.type != "cpu":
        def writeback() -> None:
            copy = torch.from_numpy(arr.view(np.int16) if host.dtype == torch.bfloat16 else arr)
            t.data.copy_(copy.view(torch.bfloat16) if host.dtype == torch.bfloat16 else copy)
    return _from_numpy(arr, name, loc, device, writeback)


def _cupy_to_host(a: Any, name: str, loc: SourceLoc | None) -> HostArray:
    # The host copy may have other strides than the device array; kernels read the
    # strides of the array they run on, so results are the same.
    host = a.get()

    def writeback() -> None:
        a.set(host)

    return _from_numpy(host, name, loc, f"cuda:{a.device.id}", writeback)


def to_host(obj: Any, name: str, loc: SourceLoc | None) -> HostArray:
    """A host view of ``obj`` for parameter ``name``; errors name the launch line."""
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, name, loc)
    if _is_torch(obj):
        return _torch_to_host(obj, name, loc)
    if _is_cupy(obj):
        return _cupy_to_host(obj, name, loc)
    if hasattr(obj, "__dlpack__"):
        try:
            return _from_numpy(np.from_dlpack(obj), name, loc)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise LaunchError(f"argument `{name}` could not be read through DLPack: {exc}",
                              loc) from None
    raise LaunchError(f"argument `{name}` must be an array (numpy, torch, cupy or DLPack), got "
                      f"{type(obj).__name__}", loc,
                      hints=["wrap Python lists with np.asarray(...) — writes to a temporary "
                             "copy would be lost"])
