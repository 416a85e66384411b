"""TMA tensor maps at launch: the 128-byte ``CUtensorMap`` of each ``TENSOR_MAP`` slot.

A kernel that streams tiles through TMA takes, per stream, a ``CUtensorMap`` by value
(``__grid_constant__``, ``codegen/artifact.py``). The map describes the launch's real
tensor (base address, extents, strides, element type) with the slot's box and swizzle, so
it is made at launch. Whether the driver can describe that tensor, and with which
arguments, is decided in one place, ``tilekit.layout.tma.tma_admissibility``: its
``TmaDescriptorParams.driver_args()`` go to ``cuTensorMapEncodeTiled`` as they are
(``driver.encode_tensor_map``); this module holds no TMA rule of its own.

The code generator chose TMA for a bucket whose facts held (16-byte aligned base, unit
inner stride, 16-byte row strides), so a launch is refused only for what those facts do
not cover (an extent past 2**31, which TMA's signed 32-bit coordinates do not reach, a
stride of 2**40 bytes or more, an empty tensor): a ``LaunchError`` at the caller's line
that names the argument and every violated rule.

**Cache.** Encoded maps are kept in a bounded LRU (``functools.lru_cache``: lookup and
recency in C) keyed by ``(spec, pointer, *extents, *strides)``; ``MapSpec`` is the rest
of what a map depends on (compute capability, element type, box, swizzle), interned and
hashed by identity, so a steady-state launch on the same tensor costs one lookup. A map
is immutable ``bytes``: a launch copies it into the 64-byte aligned slot of its own
argument buffer, where the ``kernelParams`` entry points (the fast path within its one
``struct.pack_into``), so evicting a map never leaves a dangling pointer.

**CUDA graphs.** The map travels by value among the kernel parameters, which the driver
copies when the launch is made or captured; a replay passes the captured map, and so the
captured tensor's address and shape, exactly as it replays a captured pointer argument.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tilekit.errors import LaunchError, LayoutError, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.rt import driver

#: Encoded maps kept (about 0.3 KB each with their keys).
CACHE_SIZE = 1024

#: L2 promotion of every map's loads: 256-byte L2 requests. On the H100 (bench/pipeline.py's
#: tiles, same machine, 2026-11-24) it raised a TMA-pipelined 8192 x 8192 bf16 copy from
#: 0.86-0.87x to 0.89-0.92x of torch's copy and a row sum from 0.75-0.77x to 0.81-0.84x.
L2_PROMOTION = "L2_256B"  # a tilekit.layout.tma.L2Promotion name

# The CUtensorMapDataType of each element type (``tilekit.layout.tma.TmaDataType`` names).
# int8, int16 and bool have no type of their own: TMA moves bits and fills out-of-bounds
# elements with zero bits, so the unsigned type of the width is exact for them.
DATA_TYPES: dict[DType, str] = {
    DType.FLOAT16: "FLOAT16", DType.BFLOAT16: "BFLOAT16", DType.FLOAT32: "FLOAT32",
    DType.FLOAT64: "FLOAT64", DType.INT32: "INT32", DType.INT64: "INT64",
    DType.UINT8: "UINT8", DType.UINT16: "UINT16", DType.UINT32: "UINT32",
    DType.UINT64: "UINT64", DType.INT8: "UINT8", DType.INT16: "UINT16", DType.BOOL: "UINT8",
}


def arch_of(capability: tuple[int, int]) -> int:
    """A compute capability as ``tma_admissibility`` takes it: ``major * 10 + minor``."""
    return capability[0] * 10 + capability[1]


class MapSpec:
    """What a tensor map depends on besides the tensor's address, extents and strides: the
    device's compute capability (``arch``: 90 for sm_90), the element type, the box
    (outermost first) and the swizzle (a ``tilekit.layout.tma.Swizzle`` name). Made by
    ``map_spec``, which interns them: equal specs are one object, so a cache key holding
    one hashes and compares it by identity, in C."""

    __slots__ = ("arch", "dtype", "box", "swizzle")

    def __init__(self, arch: int, dtype: DType, box: tuple[int, ...], swizzle: str) -> None:
        self.arch, self.dtype, self.box, self.swizzle = arch, dtype, box, swizzle

    def __repr__(self) -> str:
        return f"MapSpec(sm_{self.arch}, {self.dtype.long}, box={self.box}, {self.swizzle})"


_specs: dict[tuple[int, DType, tuple[int, ...], str], MapSpec] = {}


def map_spec(arch: int, dtype: DType, box: Sequence[int], swizzle: str) -> MapSpec:
    """The interned ``MapSpec`` of these values."""
    key = (int(arch), dtype, tuple(int(b) for b in box), str(swizzle))
    spec = _specs.get(key)
    if spec is None:
        spec = _specs.setdefault(key, MapSpec(*key))
    return spec


class _Refused(Exception):
    """No tensor map describes the tensor: why, one line per violated rule."""

    def __init__(self, reasons: Sequence[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = tuple(reasons)


def _unit_extent_strides(shape: Sequence[int], strides: Sequence[int],
                         itemsize: int) -> list[int]:
    """Strides with each outer dimension of extent 1 given a legal one. Its stride is never
    multiplied by anything but 0, and the bucket's stride facts ignore it (torch reports
    any value there), but the driver checks it: use the span of the dimensions inside it,
    rounded up to 16 bytes."""
    out = list(strides)
    for d in range(len(shape) - 1):
        if shape[d] == 1:
            span = max([1] + [abs(out[k]) * shape[k] for k in range(d + 1, len(shape))])
            unit = max(1, 16 // itemsize)
            out[d] = -(-span // unit) * unit
    return out


def _driver_args(spec: MapSpec, base: int, shape: Sequence[int], strides: Sequence[int],
                 name: str | None = None) -> tuple[Any, ...]:
    """``tma_admissibility``'s verdict on the tensor at ``base`` (an address, or any witness
    of its alignment) with the spec's box and swizzle: the driver's arguments, or
    ``_Refused`` with every violated rule."""
    from tilekit.layout import tma

    if not len(shape) == len(strides) == len(spec.box):
        raise _Refused([f"the box {spec.box} has {len(spec.box)} dimensions, the tensor "
                        f"{len(shape)}"])
    kind = DATA_TYPES.get(spec.dtype)
    if kind is None:
        raise _Refused([f"{spec.dtype.long} elements have no tensor-map data type"])
    try:
        swizzle = tma.Swizzle[spec.swizzle]
    except KeyError:
        raise _Refused([f"unknown swizzle {spec.swizzle!r}"]) from None
    strides = _unit_extent_strides(shape, strides, spec.dtype.itemsize)
    try:
        tensor = tma.GlobalTensor(spec.dtype.itemsize, tuple(shape), tuple(strides), base,
                                  tma.TmaDataType[kind], name)
        request = tma.TmaRequest(tensor, spec.box, swizzle=swizzle,
                                 l2_promotion=tma.L2Promotion[L2_PROMOTION])
        verdict = tma.tma_admissibility(request, arch=spec.arch)
    except (LayoutError, ValueError) as exc:
        raise _Refused([str(exc)]) from None
    if verdict.params is None:
        raise _Refused([str(v) for v in verdict.violations])
    return verdict.params.driver_args()


@functools.lru_cache(maxsize=CACHE_SIZE)
def encoded(spec: MapSpec, ptr: int, *dims: int) -> bytes:
    """The ``CUtensorMap`` of the tensor at ``ptr`` whose extents then strides (in
    elements, outermost first) are ``dims``: cached; ``_Refused`` when inadmissible, a
    ``LaunchError`` when the driver fails. The fast path calls this directly (any
    exception is a miss there: the slow path names it)."""
    rank = len(spec.box)
    args = _driver_args(spec, ptr, dims[:rank], dims[rank:])
    return driver.encode_tensor_map(ptr, *args)


def _describe(spec: MapSpec, shape: Sequence[int], strides: Sequence[int]) -> str:
    return (f"a {spec.dtype.long} tensor of shape {tuple(shape)} and strides {tuple(strides)} "
            f"(elements) with box {spec.box} and swizzle {spec.swizzle}")


def _refusal(spec: MapSpec, name: str, base: int, shape: Sequence[int],
             strides: Sequence[int], loc: SourceLoc | None) -> LaunchError:
    try:  # again, with the argument's name in the rules' messages
        _driver_args(spec, base, shape, strides, name)
        reasons: tuple[str, ...] = ("no rule was reported",)
    except _Refused as exc:
        reasons = exc.reasons
    return LaunchError(
        f"argument `{name}` cannot be copied by TMA: no tensor map describes "
        f"{_describe(spec, shape, strides)}: " + "; ".join(reasons), loc,
        hints=[f"the kernel was specialized for TMA copies of `{name}` because its alignment "
               "and stride facts held, but this tensor breaks a limit of "
               "cuTensorMapEncodeTiled or of TMA's coordinates that they do not cover "
               "(extents 1..2**31, strides below 2**40 bytes): launch on views within it, "
               "e.g. split the tensor, or pass engine=\"cp_async\" to tk.pipeline"])


def tensor_map(spec: MapSpec, name: str, ptr: int, shape: Sequence[int],
               strides: Sequence[int], loc: SourceLoc | None = None) -> bytes:
    """The slow path's map for argument ``name``: ``encoded``, with its refusals and the
    driver's failures as a ``LaunchError`` naming the argument."""
    try:
        return encoded(spec, ptr, *shape, *strides)
    except _Refused:
        raise _refusal(spec, name, ptr, shape, strides, loc) from None
    except LaunchError as exc:  # the driver refused what tma_admissibility admitted
        raise LaunchError(
            f"argument `{name}`: {exc.message} for {_describe(spec, shape, strides)} "
            f"at 0x{ptr:x}", loc,
            hints=["tilekit's TMA rules admitted this tensor map but the driver did not: "
                   "please report it with this message", *exc.hints]) from None


def check(spec: MapSpec, name: str, base: int, shape: Sequence[int],
          strides: Sequence[int], loc: SourceLoc | None = None) -> None:
    """Raise ``tensor_map``'s ``LaunchError`` if no map describes the tensor, without
    encoding one: for a tensor whose address is not known yet, ``base`` is a witness of its
    alignment (a staged array's buffer is allocated after the checks)."""
    try:
        _driver_args(spec, base, shape, strides)
    except _Refused:
        raise _refusal(spec, name, base, shape, strides, loc) from None


def cache_info() -> Any:
    """Hits, misses and size of the map cache (``functools`` ``CacheInfo``)."""
    return encoded.cache_info()


def clear() -> None:
    """Forget every encoded map (also done when a test switches the driver library)."""
    encoded.cache_clear()


driver.on_library_change(clear)
