"""TMA admissibility: can ``cuTensorMapEncodeTiled`` describe this tensor and box, and how?

The rules are the CUDA Driver API's requirements for ``cuTensorMapEncodeTiled``
(Tensor Map Object Management), checked all at once so a refusal lists every
reason. An admissible request yields :class:`TmaDescriptorParams`: the driver's
arguments in the driver's order (dimension 0 innermost), ready to be passed
verbatim. An inadmissible one gets ranked :func:`tma_alternatives` (the costed
plans are in :mod:`tilekit.layout.tma_plans`; ``TmaPlan`` and ``tma_alternatives`` are
re-exported here).

Orders. tilekit writes shapes, strides, boxes and element strides **outermost
first** (numpy's order, ``shape[-1]`` is the contiguous dimension); the driver
takes them **innermost first**. :func:`driver_order` converts; only
:class:`TmaDescriptorParams` holds driver-ordered tuples.

What is preserved: an admissible verdict's parameters describe exactly the
requested elements (no dimension is merged, dropped or permuted). Alternatives
that change the view (FACTORIZE) say how to map the loaded tile back.

Checked against the real driver (H100, driver 580.159, CUDA 13.0): of 20,042
generated requests, none that tilekit admits was refused by
``cuTensorMapEncodeTiled``. tilekit refuses more in three deliberate places: an
inner element stride the driver would silently ignore, INTERLEAVE_32B without
SWIZZLE_32B (the documentation forbids it; driver 580 accepts it), and boxes
whose really-loaded bytes (ceil of box / element stride) exceed 228 KiB while
the driver's floor-based count does not.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout.admissibility import (
    Rule,
    Verdict,
    Violation,
    ceil_div,
    pow2_alignment,
    xor_swizzle,
)
from tilekit.layout.shared import SwizzleMode

MAX_RANK = 5
MIN_INTERLEAVED_RANK = 3
MAX_GLOBAL_DIM = 1 << 32
#: The largest extent whose every element a box reaches: TMA's coordinates are signed
#: 32-bit (``cp.async.bulk.tensor``'s ``.s32`` operands), whatever ``globalDim`` holds.
MAX_REACHED_DIM = 1 << 31
GLOBAL_STRIDE_LIMIT = 1 << 40  # strides must be strictly below
MAX_BOX_DIM = 256
MAX_ELEMENT_STRIDE = 8
#: Largest box the driver encodes. Not in the Driver API documentation; measured on an
#: H100 with driver 580.159 (CUDA 13.0): 233,472 bytes (228 KiB, one SM's shared memory)
#: accepted, 234,496 rejected. The driver counts prod(floor(boxDim / elementStrides));
#: tilekit counts the elements TMA really lands, prod(ceil(...)), which is stricter.
MAX_BOX_BYTES = 228 * 1024
TMA_MIN_ARCH = 90  # compute capability 9.0, written as major * 10 + minor
ATOM_SWIZZLE_MIN_ARCH = 100
#: A freshly allocated buffer (cudaMalloc) is at least this aligned.
FRESH_ALLOCATION_ALIGN = 256


class TmaDataType(enum.Enum):
    """``CUtensorMapDataType``: (driver enumerator, element bytes or None if packed, float?)."""

    UINT8 = (0, 1, False)
    UINT16 = (1, 2, False)
    UINT32 = (2, 4, False)
    INT32 = (3, 4, False)
    UINT64 = (4, 8, False)
    INT64 = (5, 8, False)
    FLOAT16 = (6, 2, True)
    FLOAT32 = (7, 4, True)
    FLOAT64 = (8, 8, True)
    BFLOAT16 = (9, 2, True)
    FLOAT32_FTZ = (10, 4, True)
    TFLOAT32 = (11, 4, True)
    TFLOAT32_FTZ = (12, 4, True)
    U4X16_ALIGN8B = (13, None, False)  # packed sub-byte types: not modelled
    U4X16_ALIGN16B = (14, None, False)
    U6X16_ALIGN16B = (15, None, False)

    def __init__(self, code: int, elem_bytes: int | None, is_float: bool) -> None:
        self.code = code
        self.elem_bytes = elem_bytes
        self.is_float = is_float

    @staticmethod
    def raw(elem_bytes: int) -> TmaDataType | None:
        """The unsigned type of a width: TMA moves bits, so it is exact for any payload."""
        return {1: TmaDataType.UINT8, 2: TmaDataType.UINT16, 4: TmaDataType.UINT32,
                8: TmaDataType.UINT64}.get(elem_bytes)


class Interleave(enum.Enum):
    """``CUtensorMapInterleave``."""

    NONE = 0
    B16 = 1
    B32 = 2


class Swizzle(enum.Enum):
    """``CUtensorMapSwizzle`` (driver enumerator, span bytes); ``B128_ATOM_*`` are Blackwell's."""

    NONE = (0, None)
    B32 = (1, 32)
    B64 = (2, 64)
    B128 = (3, 128)
    B128_ATOM_32B = (4, 128)
    B128_ATOM_32B_FLIP_8B = (5, 128)
    B128_ATOM_64B = (6, 128)

    def __init__(self, code: int, span_bytes: int | None) -> None:
        self.code = code
        #: The widest inner box row the mode accepts (None: no limit).
        self.span_bytes = span_bytes

    @property
    def is_atom_variant(self) -> bool:
        return self.code >= 4

    @staticmethod
    def from_mode(mode: SwizzleMode) -> Swizzle:
        """The driver enumerator of a swizzle mode (the same XOR pattern, another encoding)."""
        return {SwizzleMode.NONE: Swizzle.NONE, SwizzleMode.B32: Swizzle.B32,
                SwizzleMode.B64: Swizzle.B64, SwizzleMode.B128: Swizzle.B128}[mode]


class L2Promotion(enum.Enum):
    """``CUtensorMapL2promotion``."""

    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class OobFill(enum.Enum):
    """``CUtensorMapFloatOOBfill``: ZERO is the driver's ``..._FILL_NONE`` (zeros are written)."""

    ZERO = 0
    NAN_REQUEST_ZERO_FMA = 1


def driver_order(outermost_first: Sequence[int]) -> tuple[int, ...]:
    """Outermost-first (numpy) order to the driver's innermost-first order, and back."""
    return tuple(reversed(tuple(outermost_first)))


@dataclass(frozen=True)
class GlobalTensor:
    """A global-memory tensor as TMA sees it. Shapes and strides are outermost first.

    ``strides`` are in elements (numpy's byte strides divided by ``elem_bytes``).
    ``base_align`` is the base address or any witness of its alignment: it is
    normalized to the largest power of two dividing it.
    """

    elem_bytes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    base_align: int
    data_type: TmaDataType | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
        if len(self.shape) != len(self.strides):
            raise LayoutError(
                f"tensor {self.label} has {len(self.shape)} dimensions but "
                f"{len(self.strides)} strides"
            )
        if self.elem_bytes < 1:
            raise LayoutError(f"tensor {self.label}: element size must be positive")
        object.__setattr__(self, "base_align", pow2_alignment(int(self.base_align)))

    @property
    def label(self) -> str:
        return self.name or "<tensor>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def byte_strides(self) -> tuple[int, ...]:
        return tuple(s * self.elem_bytes for s in self.strides)

    @staticmethod
    def contiguous(
        elem_bytes: int,
        shape: Sequence[int],
        base_align: int = FRESH_ALLOCATION_ALIGN,
        data_type: TmaDataType | None = None,
        name: str | None = None,
    ) -> GlobalTensor:
        """A row-major (C-order) tensor with no padding."""
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        return GlobalTensor(elem_bytes, tuple(shape), tuple(strides), base_align, data_type, name)


@dataclass(frozen=True)
class TmaRequest:
    """What a producer wants TMA to move per tile. Box and element strides outermost first.

    ``box`` is the driver's ``boxDim``: elements traversed per dimension; with
    an element stride ``e`` TMA loads ``ceil(box / e)`` of them.
    """

    tensor: GlobalTensor
    box: tuple[int, ...]
    element_strides: tuple[int, ...] = ()  # empty: all ones
    interleave: Interleave = Interleave.NONE
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: L2Promotion = L2Promotion.NONE
    oob_fill: OobFill = OobFill.ZERO

    def __post_init__(self) -> None:
        object.__setattr__(self, "box", tuple(int(b) for b in self.box))
        es = tuple(int(e) for e in self.element_strides) or (1,) * len(self.box)
        object.__setattr__(self, "element_strides", es)
        if len(self.box) != self.tensor.rank:
            raise LayoutError(
                f"box {self.box} has {len(self.box)} dimensions, tensor "
                f"{self.tensor.label} has {self.tensor.rank}"
            )
        if len(self.element_strides) != self.tensor.rank:
            raise LayoutError(
                f"element strides {self.element_strides} do not match rank {self.tensor.rank}"
            )

    @property
    def loaded_box(self) -> tuple[int, ...]:
        """Elements actually landing in shared memory per dimension, outermost first."""
        return tuple(
            ceil_div(b, max(e, 1)) for b, e in zip(self.box, self.element_strides, strict=True)
        )

    def tile_bytes(self) -> int:
        return math.prod(self.loaded_box) * self.tensor.elem_bytes

    def tiles(self) -> int:
        """Tiles covering the tensor, edges charged as whole tiles."""
        pairs = zip(self.tensor.shape, self.box, strict=True)
        return math.prod(ceil_div(s, max(b, 1)) for s, b in pairs)


#: (tensorDataType, tensorRank, globalDim, globalStrides, boxDim, elementStrides,
#:  interleave, swizzle, l2Promotion, oobFill) as the driver takes them.
DriverArgs = tuple[
    int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], int, int, int, int
]


@dataclass(frozen=True)
class TmaDescriptorParams:
    """The exact ``cuTensorMapEncodeTiled`` arguments (after tensorMap and globalAddress).

    Every tuple is in the driver's order: index 0 is the innermost dimension;
    ``global_strides`` are bytes for dimensions 1..rank-1 (dimension 0 implicit).
    """

    data_type: TmaDataType
    rank: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: Interleave
    swizzle: Swizzle
    l2_promotion: L2Promotion
    oob_fill: OobFill

    def driver_args(self) -> DriverArgs:
        """Positional arguments 2, 3 and 5..12 of the driver call, enums as integers."""
        return (
            self.data_type.code, self.rank, self.global_dim, self.global_strides, self.box_dim,
            self.element_strides, self.interleave.value, self.swizzle.code,
            self.l2_promotion.value, self.oob_fill.value,
        )

    @property
    def shared_alignment(self) -> int:
        """Required shared-memory alignment of the destination (CUDA Programming Guide)."""
        return 128

    @property
    def swizzle_repeat_bytes(self) -> int | None:
        """Bytes after which the swizzle pattern repeats (8 rows of the span)."""
        span = self.swizzle.span_bytes
        return None if span is None else 8 * span

    def shared_offsets(self, destination: int) -> np.ndarray:
        """Byte offset from ``destination`` of every box element TMA writes, outermost first.

        Rows (the inner dimension's runs) are ``max(inner box bytes, span)`` apart and
        the swizzle XORs absolute address bits, so a destination off the swizzle repeat
        shifts the pattern. Measured on an H100 for rank-2 boxes, all four classic
        swizzles, inner rows of 16..128 bytes and destinations at four 128-byte phases;
        element strides and atom swizzles were not measured. Interleaved boxes are not
        modelled.
        """
        if self.interleave is not Interleave.NONE or self.swizzle.is_atom_variant:
            raise LayoutError(f"shared layout of {self.interleave.name}/{self.swizzle.name} "
                              "boxes is not modelled")
        elem = self.data_type.elem_bytes
        assert elem is not None
        pairs = zip(self.box_dim, self.element_strides, strict=True)
        loaded = [ceil_div(b, max(e, 1)) for b, e in pairs]
        loaded[0] = self.box_dim[0]  # the inner element stride is ignored without interleave
        span = self.swizzle.span_bytes or 0
        pitch = max(loaded[0] * elem, span)
        rows = np.arange(math.prod(loaded[1:]), dtype=np.int64)[:, None]
        cols = np.arange(loaded[0], dtype=np.int64)[None, :]
        linear = destination + rows * pitch + cols * elem
        chunks = span // 16 if span else 1
        swizzled = np.asarray(xor_swizzle(linear, chunks)) - destination
        return swizzled.reshape(tuple(reversed(loaded)))


def tma_admissibility(request: TmaRequest, *, arch: int) -> Verdict[TmaDescriptorParams]:
    """Every ``cuTensorMapEncodeTiled`` requirement the request breaks, or its arguments.

    ``arch`` is the compute capability as ``major * 10 + minor`` (90 for H100).
    """
    t = request.tensor
    es = request.element_strides
    out: list[Violation] = []

    def bad(rule: Rule, fld: str, value: object, limit: object, message: str) -> None:
        out.append(Violation(rule, fld, value, limit, message))

    if arch < TMA_MIN_ARCH:
        bad(Rule.TMA_ARCH, "arch", arch, TMA_MIN_ARCH,
            f"tensor maps need compute capability 9.0 or newer, target is {arch // 10}.{arch % 10}")

    data_type = t.data_type if t.data_type is not None else TmaDataType.raw(t.elem_bytes)
    if data_type is None:
        bad(Rule.TMA_DTYPE, "elem_bytes", t.elem_bytes, (1, 2, 4, 8),
            f"{t.elem_bytes}-byte elements have no tensor-map data type")
    elif data_type.elem_bytes is None:
        bad(Rule.TMA_DTYPE, "data_type", data_type, "byte-sized types",
            f"packed sub-byte type {data_type.name} is not modelled by tilekit")
    elif data_type.elem_bytes != t.elem_bytes:
        bad(Rule.TMA_DTYPE, "data_type", data_type, t.elem_bytes,
            f"{data_type.name} is {data_type.elem_bytes} bytes but {t.label} has "
            f"{t.elem_bytes}-byte elements")

    rank = t.rank
    if not 1 <= rank <= MAX_RANK:
        bad(Rule.TMA_RANK, "tensorRank", rank, MAX_RANK,
            f"rank {rank} is outside 1..{MAX_RANK}")
    if request.interleave is not Interleave.NONE and rank < MIN_INTERLEAVED_RANK:
        bad(Rule.TMA_RANK, "tensorRank", rank, MIN_INTERLEAVED_RANK,
            f"interleave {request.interleave.name} needs rank >= {MIN_INTERLEAVED_RANK}, "
            f"got {rank}")

    if rank >= 1 and t.shape[-1] != 1 and t.strides[-1] != 1:
        bad(Rule.TMA_INNER_NOT_CONTIGUOUS, "strides[-1]", t.strides[-1], 1,
            f"the innermost dimension of {t.label} has stride {t.strides[-1]} elements; TMA's "
            "dimension 0 has no stride field and is always contiguous, so a strided innermost "
            "dimension is not encodable as dimension 0")

    unit = 32 if request.interleave is Interleave.B32 else 16
    if t.base_align < unit:
        bad(Rule.TMA_GLOBAL_ADDRESS_ALIGN, "globalAddress", t.base_align, unit,
            f"base address of {t.label} is only {t.base_align}-byte aligned, needs {unit}")

    for i, extent in enumerate(driver_order(t.shape)):
        if not 1 <= extent <= MAX_GLOBAL_DIM:
            bad(Rule.TMA_GLOBAL_DIM, f"globalDim[{i}]", extent, MAX_GLOBAL_DIM,
                f"globalDim[{i}] = {extent} is outside 1..2^32")
        elif extent > MAX_REACHED_DIM:
            bad(Rule.TMA_COORDINATE_REACH, f"globalDim[{i}]", extent, MAX_REACHED_DIM,
                f"globalDim[{i}] = {extent}: TMA coordinates are signed 32-bit, so elements "
                "past 2^31 - 1 along a dim are out of reach")

    for i, stride in enumerate(driver_order(t.byte_strides())[1:], start=0):
        if not 0 <= stride < GLOBAL_STRIDE_LIMIT:
            bad(Rule.TMA_GLOBAL_STRIDE_RANGE, f"globalStrides[{i}]", stride, GLOBAL_STRIDE_LIMIT,
                f"globalStrides[{i}] = {stride} bytes is outside 0..2^40-1")
        if stride % unit:
            bad(Rule.TMA_GLOBAL_STRIDE_ALIGN, f"globalStrides[{i}]", stride, unit,
                f"global stride {stride} bytes (globalStrides[{i}]) is not a multiple of {unit}")

    for i, b in enumerate(driver_order(request.box)):
        if not 1 <= b <= MAX_BOX_DIM:
            bad(Rule.TMA_BOX_DIM, f"boxDim[{i}]", b, MAX_BOX_DIM,
                f"boxDim[{i}] = {b} is outside 1..{MAX_BOX_DIM}")

    inner_bytes = request.box[-1] * t.elem_bytes if rank >= 1 else 0
    # The Driver API states this for INTERLEAVE_NONE only; driver 580 rejects it for every
    # interleave mode (measured), so it is checked for all of them.
    if rank >= 1 and inner_bytes % 16:
        bad(Rule.TMA_BOX_INNER_BYTES, "boxDim[0]", inner_bytes, 16,
            f"inner box row is {inner_bytes} bytes, not a multiple of 16")
    box_bytes = request.tile_bytes()
    if box_bytes > MAX_BOX_BYTES:
        bad(Rule.TMA_BOX_BYTES, "boxDim", box_bytes, MAX_BOX_BYTES,
            f"the box loads {box_bytes} bytes, more than the {MAX_BOX_BYTES} bytes "
            "the driver accepts (one SM's shared memory)")
    if request.interleave is Interleave.NONE and rank >= 1:
        span = request.swizzle.span_bytes
        if span is not None and inner_bytes > span:
            bad(Rule.TMA_BOX_EXCEEDS_SWIZZLE, "boxDim[0]", inner_bytes, span,
                f"inner box row is {inner_bytes} bytes, wider than the {span}-byte span of "
                f"swizzle {request.swizzle.name}")

    for i, e in enumerate(driver_order(es)):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            bad(Rule.TMA_ELEMENT_STRIDE, f"elementStrides[{i}]", e, MAX_ELEMENT_STRIDE,
                f"elementStrides[{i}] = {e} is outside 1..{MAX_ELEMENT_STRIDE}")
    if request.interleave is Interleave.NONE and rank >= 1 and es[-1] != 1:
        bad(Rule.TMA_INNER_ELEMENT_STRIDE, "elementStrides[0]", es[-1], 1,
            f"element stride {es[-1]} on the innermost dimension would be ignored by TMA "
            "(the driver drops elementStrides[0] without interleave)")

    if request.interleave is Interleave.B32 and request.swizzle is not Swizzle.B32:
        bad(Rule.TMA_INTERLEAVE_SWIZZLE, "swizzle", request.swizzle, Swizzle.B32,
            f"INTERLEAVE_32B requires SWIZZLE_32B, got {request.swizzle.name}")
    if request.swizzle.is_atom_variant and arch < ATOM_SWIZZLE_MIN_ARCH:
        bad(Rule.TMA_SWIZZLE_ARCH, "swizzle", request.swizzle, ATOM_SWIZZLE_MIN_ARCH,
            f"swizzle {request.swizzle.name} is a Blackwell (sm_100+) mode, target is sm_{arch}")
    if request.oob_fill is OobFill.NAN_REQUEST_ZERO_FMA and not (
        data_type is not None and data_type.is_float
    ):
        bad(Rule.TMA_OOB_FILL_DTYPE, "oobFill", request.oob_fill, "floating-point data type",
            "NaN out-of-bounds fill needs a floating-point data type")

    if out:
        return Verdict.reject(out)
    assert data_type is not None
    return Verdict.admit(
        TmaDescriptorParams(
            data_type=data_type,
            rank=rank,
            global_dim=driver_order(t.shape),
            global_strides=driver_order(t.byte_strides())[1:],
            box_dim=driver_order(request.box),
            element_strides=driver_order(es),
            interleave=request.interleave,
            swizzle=request.swizzle,
            l2_promotion=request.l2_promotion,
            oob_fill=request.oob_fill,
        )
    )


# The costed alternatives live in ``tma_plans``, which imports this module; re-exported here,
# at the bottom, so that either module can be imported first.
from tilekit.layout.tma_plans import TmaPlan, tma_alternatives  # noqa: E402, F401
