"""Repacking an operand TMA refuses: a copy with rows padded to 16 bytes, made per launch.

TMA needs a tensor's base and row strides to be multiples of 16 bytes. A bf16 matrix of
8092 columns has rows of 16,184 bytes: no tensor map describes it, and wgmma, which reads
its shared-memory stages only as TMA's swizzled boxes, cannot be fed. When the schedule
finds that the layout library's REPACK plan fits (``tilekit.sched.schedule._repacked_feed``),
it compiles the kernel for a row-major copy of the tensor whose row pitch is rounded up to
16 bytes (``CompiledKernel.repacked`` names the tensors). This module makes that copy at
each launch:

* ``plan``: before anything is queued, a ``RepackedArray`` per such tensor, describing the
  copy (same shape, padded strides) so that the launch's checks and its tensor map see
  what the kernel will read;
* ``RepackedArray.fill``: on the launch's stream, memory from the stream-ordered allocator
  (``cuMemAllocAsync``) and a pitched copy (``cuMemcpy2DAsync``) per outer index; the
  memory is freed on the stream after the launch (``cuMemFreeAsync``), so nothing waits
  and a CUDA graph capture records the allocation, the copy and the free as its nodes.

The copy is a read and a write of the tensor, paid at every launch: the data may change
between launches, and tilekit cannot know when. It pays when several programs read each
tile (a matmul's ``a`` is read once per column of blocks); bench/matmul.py's
misaligned-K row measures it with the copy included. The fast path does not take
launches of such kernels (it makes no allocation or copy): they run through the full
launch path.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from tilekit.errors import LaunchError, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.layout.pitch import padded_strides
from tilekit.rt import driver

#: Row pitches of the copy are multiples of this many bytes (TMA's global stride rule).
PITCH_BYTES = 16


class RepackedArray:
    """The copy a launch makes of one tensor argument: its ``shape``, padded ``strides``
    and ``dtype`` are what the kernel reads; ``source`` is the caller's array (its device
    address is known once a host array has been staged)."""

    def __init__(self, name: str, source: Any, index: DType | None, device: int,
                 loc: SourceLoc | None) -> None:
        self.name = name
        self.source = source
        self.device = device  # the launch's (a host array's own device is None)
        self.dtype: DType = source.dtype
        self.shape: tuple[int, ...] = tuple(source.shape)
        self.strides = padded_strides(self.shape, self.dtype.itemsize, PITCH_BYTES)
        self.nbytes = (self.strides[0] * self.shape[0] * self.dtype.itemsize
                       if self.shape and all(self.shape) else 0)
        if source.strides[-1:] not in ((1,), ()):
            raise LaunchError(  # the schedule repacks only tensors of unit inner stride
                f"`{name}` was compiled to be repacked row by row, but its inner stride is "
                f"{source.strides[-1]}", loc, hints=["this is a tilekit bug: please report it"])
        if index is not None and index.bits == 32 and self.nbytes // self.dtype.itemsize \
                > 2 ** 31 - 1:
            raise LaunchError(
                f"`{name}` needs a copy with rows padded to {PITCH_BYTES} bytes for TMA, and "
                "that copy has more elements than 32-bit indices reach", loc,
                hints=["pass a tensor whose rows are multiples of 16 bytes (e.g. pad its last "
                       "dimension to a multiple of 8 bf16 elements)"])
        self.buffer = 0

    aligned16 = True

    def __repr__(self) -> str:
        return f"RepackedArray({self.name!r}, {self.shape}, strides {self.strides})"

    def device_ptr(self, base: int) -> int:
        """The copy's element (0, ..., 0) in a buffer at ``base`` (``check_maps``' witness)."""
        return base

    def fill(self, source_ptr: int, stream: int, loc: SourceLoc | None) -> int:
        """Allocate the copy on ``stream``, queue the copy from ``source_ptr`` (the source's
        element (0, ..., 0)), and return the copy's address."""
        self.buffer = driver.alloc_async(self.nbytes, stream, self.device, loc)
        item = self.dtype.itemsize
        shape, src = self.shape, self.source.strides
        if not self.nbytes:
            return self.buffer
        if len(shape) == 1:
            driver.copy_rows(self.buffer, shape[0] * item, source_ptr, shape[0] * item,
                             shape[0] * item, 1, stream, loc)
            return self.buffer
        rows, row_bytes = shape[-2], shape[-1] * item
        for outer in itertools.product(*(range(n) for n in shape[:-2])):
            src_at = source_ptr + item * sum(i * s for i, s in zip(outer, src))
            dst_at = self.buffer + item * sum(i * s for i, s in zip(outer, self.strides))
            _copy_matrix(dst_at, self.strides[-2] * item, src_at, src[-2] * item, row_bytes,
                         rows, stream, loc)
        return self.buffer

    def free(self, stream: int) -> None:
        if self.buffer:
            driver.free_async(self.buffer, stream)
            self.buffer = 0


def _copy_matrix(dst: int, dst_pitch: int, src: int, src_pitch: int, row_bytes: int,
                 rows: int, stream: int, loc: SourceLoc | None) -> None:
    """One pitched copy, or one copy per row where the source's rows are not laid out as
    a pitched copy reads them (a negative pitch: rows flipped; a pitch under the row's
    bytes: rows overlapping, e.g. broadcast with stride 0)."""
    if src_pitch >= row_bytes:
        driver.copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows, stream, loc)
        return
    for r in range(rows):
        driver.copy_rows(dst + r * dst_pitch, dst_pitch, src + r * src_pitch, row_bytes,
                         row_bytes, 1, stream, loc)


def plan(names: Iterable[str], tensors: Mapping[str, Any], indices: Mapping[str, DType],
         device: int, loc: SourceLoc | None) -> dict[str, RepackedArray]:
    """The copies a launch on ``device`` of a kernel whose ``CompiledKernel.repacked`` is
    ``names`` makes (``indices``: each tensor's index type in the bucket)."""
    return {n: RepackedArray(n, tensors[n], indices.get(n), device, loc) for n in names
            if n in tensors}
