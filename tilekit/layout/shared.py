"""Shared-memory layouts: which tensor element sits at each element offset of a buffer.

A shared layout is a ``LinearLayout`` from the single in dim ``offset``
(element offset into the buffer) to the tensor dims ``dim0``, ``dim1``, ...
Swizzles are XORs of offset bits, so every layout here is bijective and its
inverse (tensor -> offset) is the store/load address function;
``byte_address_layout`` turns it into byte addresses for the bank models.

Two swizzle families:

* ``swizzled_shared``: the classic (Triton SwizzledSharedEncoding) family,
  in elements: row r's vec-element column groups are XORed with
  ``(r // per_phase) % max_phase``.
* ``nvidia_swizzle``: the hardware modes of TMA and wgmma, defined on byte
  address bits (CUTLASS ``Swizzle<B, 4, 3>``): 16-byte chunk bits [4, 4+B)
  are XORed with bits [7, 7+B).

Padded layouts (row pitch = row + pad) are not F2-linear: they belong to the
integer (shape:stride) layouts, not here.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from tilekit.errors import LayoutError
from tilekit.layout.linear import OFFSET, LinearLayout, log2_exact, standard_out_dims

__all__ = [
    "BYTE",
    "Major",
    "Operand",
    "SwizzleMode",
    "byte_address_layout",
    "nvidia_swizzle",
    "swizzled_shared",
    "unswizzled",
]

BYTE = "byte"  # the out dim of byte_address_layout

_CHUNK_BITS = 4  # CUTLASS MBase: swizzles move 16-byte chunks
_SHIFT_BITS = 3  # CUTLASS SShift: the XOR source sits 3 bits above (one 128-byte row up)


class SwizzleMode(enum.Enum):
    """The swizzles of TMA tensor maps and wgmma descriptors; the value is the span in bytes."""

    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128

    @property
    def xor_bits(self) -> int:
        """CUTLASS ``BBits``: how many 16-byte-chunk bits are XORed (0, 1, 2, 3)."""
        return {0: 0, 32: 1, 64: 2, 128: 3}[self.value]

    @property
    def repeat_bytes(self) -> int:
        """Bytes after which the XOR pattern repeats: the base alignment the hardware assumes.

        PTX ISA 9.2, tcgen05 shared memory descriptor, "Starting address of
        repeating pattern": 1024 B (128B mode), 512 B (64B), 256 B (32B).
        """
        return 8 * self.value if self.value else 16


class Major(enum.Enum):
    """Which operand dim is contiguous in shared memory (PTX ISA: K-major / MN-major).

    The value is wgmma's imm-trans bit for the operand (0: K-major, 1: MN-major);
    ``tilekit.layout.wgmma`` uses this same enum.
    """

    K = 0
    MN = 1


class Operand(enum.Enum):
    """Which MMA operand a tile is: A is M x K (dim0 = M), B is K x N (dim0 = K)."""

    A = 0
    B = 1


def _shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(shape)
    for size in shape:
        log2_exact(size, f"every dim of the {what} shape ({list(shape)})")
    return shape


def _order(order: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if order is None:
        return tuple(reversed(range(rank)))
    order = tuple(order)
    if sorted(order) != list(range(rank)):
        raise LayoutError(f"order {list(order)} is not a permutation of the dims 0..{rank - 1}")
    return order


def unswizzled(shape: Sequence[int], order: Sequence[int] | None = None) -> LinearLayout:
    """Plain strided storage: dims laid out in ``order``, most minor first (default row-major)."""
    shape = _shape(shape, "shared")
    order = _order(order, len(shape))
    layout = LinearLayout.empty()
    for dim in order:
        layout = layout * LinearLayout.identity_1d(shape[dim], OFFSET, f"dim{dim}")
    return layout.transpose_outs(standard_out_dims(len(shape)))


def _default_swizzle(cols: int, dtype_bytes: int) -> tuple[int, int, int]:
    """16-byte vectors, as many rows per phase as share a 128-byte line, 8 phases per line.

    This is the swizzle under which 8 lanes reading 16 bytes each from 8
    consecutive rows (an ``ldmatrix`` phase) hit 8 different bank groups.
    """
    vec = max(1, min(cols, 16 // dtype_bytes))
    per_phase = max(1, 128 // (cols * dtype_bytes))
    max_phase = max(1, min(8 // per_phase, cols // vec))
    return vec, per_phase, max_phase


def swizzled_shared(
    shape: Sequence[int],
    dtype_bytes: int,
    vec: int | None = None,
    per_phase: int | None = None,
    max_phase: int | None = None,
    order: Sequence[int] | None = None,
) -> LinearLayout:
    """The classic XOR swizzle (Triton's SwizzledSharedEncoding), in elements.

    The two most-minor dims of ``order`` (default row-major) are the columns
    and rows; the element stored at row r, column c belongs to column
    ``c ^ ((r // per_phase) % max_phase) * vec`` (mod the row length). Outer
    dims are stacked unswizzled. Unset parameters default to the 128-byte
    swizzle for ``dtype_bytes``. All three must be powers of two: a swizzle
    with other periods is not F2-linear.
    """
    shape = _shape(shape, "shared")
    rank = len(shape)
    order = _order(order, rank)
    log2_exact(dtype_bytes, "dtype_bytes")
    if rank < 2:
        return unswizzled(shape, order)
    cols_dim, rows_dim = order[0], order[1]
    cols, rows = shape[cols_dim], shape[rows_dim]
    defaults = _default_swizzle(cols, dtype_bytes)
    vec, per_phase, max_phase = (
        default if given is None else given
        for given, default in zip((vec, per_phase, max_phase), defaults, strict=True)
    )
    for name, value in (("vec", vec), ("per_phase", per_phase), ("max_phase", max_phase)):
        try:
            log2_exact(value, name)
        except LayoutError as error:
            raise LayoutError(
                f"{name}={value}: a swizzle period that is not a power of two is not F2-linear",
                hints=["use a power of two, or an integer (shape:stride) layout for padding"],
            ) from error

    def unit(dim: int, value: int) -> list[int]:
        return [value if d == dim else 0 for d in range(rank)]

    bases = [unit(cols_dim, 1 << c) for c in range(cols.bit_length() - 1)]
    for r in range(rows.bit_length() - 1):
        basis = unit(rows_dim, 1 << r)
        basis[cols_dim] = (vec * (((1 << r) // per_phase) % max_phase)) % cols
        bases.append(basis)
    for dim in order[2:]:
        bases.extend(unit(dim, 1 << b) for b in range(shape[dim].bit_length() - 1))
    return LinearLayout({OFFSET: bases}, list(zip(standard_out_dims(rank), shape, strict=True)))


def _contiguous_dim(major: Major, operand: Operand) -> int:
    k_dim = 1 if operand is Operand.A else 0
    return k_dim if major is Major.K else 1 - k_dim


def nvidia_swizzle(
    mode: SwizzleMode,
    shape: Sequence[int],
    dtype_bytes: int,
    major: Major = Major.K,
    operand: Operand = Operand.A,
) -> LinearLayout:
    """A 2-D operand tile as TMA writes it and wgmma reads it under ``mode``.

    The contiguous dim (K for K-major, M or N for MN-major; ``operand``
    says which tensor dim that is) is cut into rows of ``mode``'s span
    (128, 64 or 32 bytes, or the whole dim if narrower); storage runs along a
    row, then down every row of the strided dim, then to the next span of
    the contiguous dim: the PTX ISA's "swizzle atoms" of 8 rows x span, tiled
    strided-dim first (PTX ISA 9.2, §9.7.15.5.1.2 "Shared Memory Matrix
    Layout", Table 38). On that storage the hardware XORs byte-address bits
    [4, 4+B) with bits [7, 7+B), B = 3, 2, 1 for 128B, 64B, 32B: CUTLASS
    ``Swizzle<B, 4, 3>`` (include/cute/swizzle.hpp). ``SwizzleMode.NONE`` is
    plain storage of the contiguous dim (TMA's SWIZZLE_NONE box), not
    wgmma's 8x16-byte core-matrix interleave. The buffer must start on a
    ``mode.repeat_bytes`` boundary.
    """
    shape = _shape(shape, "operand")
    if len(shape) != 2:
        raise LayoutError(f"nvidia_swizzle takes a 2-D operand tile, got shape {list(shape)}")
    elem_bits = log2_exact(dtype_bytes, "dtype_bytes")
    if dtype_bytes > 16:
        raise LayoutError(f"elements of {dtype_bytes} bytes are wider than a 16-byte chunk")
    contiguous = _contiguous_dim(major, operand)
    strided = 1 - contiguous
    if mode is SwizzleMode.NONE:
        return unswizzled(shape, (contiguous, strided))
    row = min(shape[contiguous], mode.value // dtype_bytes)
    if row * dtype_bytes < 16:
        raise LayoutError(
            f"a {mode.name} swizzle moves 16-byte chunks, but a row of this tile holds only "
            f"{row * dtype_bytes} bytes",
            hints=["use SwizzleMode.NONE, or widen the contiguous dim to 16 bytes"],
        )
    storage = (
        LinearLayout.identity_1d(row, OFFSET, f"dim{contiguous}")
        * LinearLayout.identity_1d(shape[strided], OFFSET, f"dim{strided}")
        * LinearLayout.identity_1d(shape[contiguous] // row, OFFSET, f"dim{contiguous}")
    ).transpose_outs(standard_out_dims(2))
    size = storage.in_dim_size(OFFSET)
    xor_low = range(_CHUNK_BITS + _SHIFT_BITS, _CHUNK_BITS + _SHIFT_BITS + mode.xor_bits)
    swizzle = LinearLayout(
        {OFFSET: [
            [(1 << e) | ((1 << (e - _SHIFT_BITS)) if e + elem_bits in xor_low else 0)]
            for e in range(size.bit_length() - 1)
        ]},
        {OFFSET: size},
    )
    return swizzle.compose(storage)


def byte_address_layout(shared: LinearLayout, dtype_bytes: int) -> LinearLayout:
    """Tensor coordinates -> byte address (out dim ``byte``) of a bijective shared layout.

    Compose a distributed layout with this to get each (register, lane,
    warp)'s byte address, the input of the bank-conflict models.
    """
    if shared.in_dims != (OFFSET,):
        raise LayoutError(
            f"a shared layout has the single in dim {OFFSET!r}, this one has {list(shared.in_dims)}"
        )
    try:
        element_of = shared.invert()
    except LayoutError as error:
        raise LayoutError(
            f"the shared layout has no address function: {error.message}",
            hints=["every tensor element must sit at exactly one offset"],
        ) from error
    size = shared.in_dim_size(OFFSET)
    return element_of.compose(LinearLayout.strided_1d(size, dtype_bytes, OFFSET, BYTE))
