"""Launch checks for the GPU backend: pure functions over arguments and device facts.

They run before anything is queued on the device, so that a launch that would fail
(or silently compute garbage) raises a ``LaunchError`` at the caller's line and leaves
every array as it was. Dtype and rank are the specialization's business (a new
specialization is traced for them); these checks cover what a specialization cannot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tilekit.errors import LaunchError, SourceLoc
from tilekit.ir.dtypes import DType

# The CUDA limits that hold on every architecture tilekit targets (sm_80, sm_90): a
# device's own attributes (DeviceProps.max_grid) are checked when known.
MAX_GRID = (2**31 - 1, 65535, 65535)


if TYPE_CHECKING:  # for the type checker only: a Protocol class costs ~0.1 ms at import
    from typing import Protocol

    class ArgFacts(Protocol):
        name: str
        dtype: DType
        shape: tuple[int, ...]
        strides: tuple[int, ...]

        @property
        def span(self) -> int: ...


def check_grid(grid: Sequence[int], max_grid: Sequence[int] = MAX_GRID,
               loc: SourceLoc | None = None) -> None:
    """Each grid dimension within the device's limit (x < 2^31, y and z <= 65535)."""
    for axis, (g, limit) in enumerate(zip(grid, max_grid)):
        if g > limit:
            name = "xyz"[axis]
            raise LaunchError(
                f"grid dimension {axis} ({name}) is {g}, more than the device allows "
                f"({limit})", loc,
                hints=["put the largest count of programs on axis 0 (up to 2**31 - 1)"
                       if axis else "launch fewer programs, each doing more work"])


def check_block(threads: int, max_threads: int, loc: SourceLoc | None = None) -> None:
    if threads > max_threads:
        raise LaunchError(f"the kernel needs {threads} threads per block, more than the "
                          f"device allows ({max_threads})", loc)


def check_shared_memory(needed: int, available: int, name: str,
                        loc: SourceLoc | None = None) -> None:
    """The kernel's dynamic shared memory within the device's opt-in maximum per block."""
    if needed > available:
        raise LaunchError(
            f"kernel `{name}` needs {needed} bytes of shared memory per block, more than the "
            f"device offers ({available} bytes)", loc,
            hints=["use smaller tiles (block sizes) or fewer pipeline stages"])


def check_same_device(devices: Iterable[tuple[str, int]], loc: SourceLoc | None = None) -> int:
    """The one device every device array is on (``(argument, ordinal)`` pairs), or -1 when
    there is none."""
    seen: dict[int, str] = {}
    for name, dev in devices:
        seen.setdefault(dev, name)
    if len(seen) > 1:
        where = ", ".join(f"`{n}` on cuda:{d}" for d, n in sorted(seen.items()))
        raise LaunchError(f"the arrays are on different devices ({where})", loc,
                          hints=["move them to one device first, e.g. y = y.to(x.device)"])
    return next(iter(seen), -1)


def check_alignment(arg: ArgFacts, ptr: int, aligned16: bool,
                    loc: SourceLoc | None = None) -> None:
    """The pointer is aligned to the element size, and to 16 bytes where the
    specialization assumed it (code generation may use 16-byte vector accesses there)."""
    item = arg.dtype.itemsize
    if ptr % item:
        raise LaunchError(f"argument `{arg.name}` is not aligned to its element size: its data "
                          f"starts {ptr % item} bytes past a multiple of {item}", loc,
                          hints=[f"pass a contiguous copy of `{arg.name}`"])
    if aligned16 and ptr % 16:
        raise LaunchError(f"argument `{arg.name}` starts {ptr % 16} bytes past a 16-byte "
                          "boundary, but the kernel was specialized for an aligned pointer", loc,
                          hints=["this is a tilekit bug if it happens on an ordinary launch; "
                                 "report it with the array's shape, strides and offset"])


def check_index_width(arg: ArgFacts, index: DType, loc: SourceLoc | None = None) -> None:
    """A kernel that indexes a tensor in 32 bits must see fewer than 2^31 elements of span
    (and extents and strides below 2^31)."""
    if index is not DType.INT32:
        return
    too_big = arg.span >= 2**31 or any(n >= 2**31 for n in arg.shape) or \
        any(abs(s) >= 2**31 for s in arg.strides)
    if too_big:
        raise LaunchError(f"argument `{arg.name}` spans {arg.span} elements, but the kernel "
                          "indexes it in 32 bits (fewer than 2**31)", loc,
                          hints=["this is a tilekit bug: the specialization should have chosen "
                                 "64-bit indices"])


def check_writable(arg: Any, written: bool, loc: SourceLoc | None = None) -> None:
    if written and getattr(arg, "readonly", False):
        raise LaunchError(f"the kernel writes to `{arg.name}`, but that array is read-only", loc,
                          hints=[f"pass a writable copy: {arg.name}.copy()"])
