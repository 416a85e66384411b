"""Check mode at launch (``TILEKIT_CHECK=1``): run on copies, read the fault, raise it.

A kernel compiled in check mode (``CompiledKernel.checked``; ``tilekit.codegen.bounds_check``)
skips every raw access the interpreter would reject and records the first one in its
status buffer (``artifact.CheckWords``). Around such a launch the runtime

* redirects the device arrays the kernel writes to scratch copies (``Scratch``), copied
  back only when the launch succeeded, element by element (never into the gaps of a strided
  view). A fault in one program cannot undo what other programs wrote before it, but those
  writes went to the copies: a failed launch leaves every argument as it was. Arrays whose
  memory overlaps share one copy, so a kernel that reads what it writes through another
  argument sees what it would see in place. Host arrays are staged anyway and copied back
  only on success (``gpu.launch``);
* reads the status buffer after the launch (a synchronization) and raises the fault as the
  interpreter words it (``access_error``), else a failed ``tk.device_assert``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilekit.codegen.artifact import CheckWords, CompiledKernel
from tilekit.errors import MemoryAccessError, SourceLoc
from tilekit.record import Record
from tilekit.rt import driver

#: A scratch copy keeps its arrays' addresses modulo this (alignment facts, TMA's 16 bytes).
SCRATCH_ALIGN = 256


def initial_status(words: int) -> np.ndarray:
    """A status buffer with nothing recorded: zeros, and the check's key at its maximum (a
    recorded fault always has a lower one)."""
    out = np.zeros(words, np.int32)
    if words > CheckWords.KEY_ORDER + 1:
        out[CheckWords.KEY_PROGRAM:CheckWords.KEY_ORDER + 2] = -1
    return out


def access_error(compiled: CompiledKernel, words: np.ndarray,
                 arrays: Mapping[str, Any]) -> MemoryAccessError | None:
    """The out-of-bounds access a checked kernel recorded in its status buffer ``words``,
    worded as the interpreter's (the index and strides from the launch's ``arrays``), or
    None when there is none."""
    from tilekit.rt.interpreter import out_of_bounds
    from tilekit.rt.memory import OutOfBounds, index_of

    code = int(words[CheckWords.CODE])
    if code == 0 or len(words) <= CheckWords.PROGRAM + 2:
        return None
    site = compiled.access_sites[code - 1]
    offset = int(words[CheckWords.OFFSET:CheckWords.OFFSET + 2].view(np.int64)[0])
    order = int(words[CheckWords.KEY_ORDER:CheckWords.KEY_ORDER + 2].view(np.uint64)[0])
    flat = order & 0xFFFFFFFF
    position = tuple(int(i) for i in np.unravel_index(flat, site.shape)) if site.shape else ()
    program = tuple(int(w) for w in words[CheckWords.PROGRAM:CheckWords.PROGRAM + 3])
    arr = arrays[site.tensor]
    shape, strides = tuple(arr.shape), tuple(arr.strides)
    exc = OutOfBounds(site.tensor, offset, shape, index_of(offset, shape, strides), position,
                      strides)
    return out_of_bounds(site.op, program, exc, site.loc)


# --- scratch copies -------------------------------------------------------------------------


def byte_range(ptr: int, shape: Sequence[int], strides: Sequence[int],
               itemsize: int) -> tuple[int, int] | None:
    """The bytes ``[lo, hi)`` from a view's lowest-addressed element to past its highest, or
    None for an empty view."""
    if any(n == 0 for n in shape):
        return None
    lo = ptr + itemsize * sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = ptr + itemsize * (sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + 1)
    return lo, hi


class Block(Record):
    """``rows`` runs of ``row_bytes`` bytes, ``pitch`` bytes apart, the first ``offset``
    bytes past a view's lowest-addressed element."""
    __slots__ = ()
    offset: int
    row_bytes: int
    pitch: int
    rows: int


def element_blocks(shape: Sequence[int], strides: Sequence[int],
                   itemsize: int) -> list[Block]:
    """The bytes of a view's elements as blocks of rows (what a copy back writes): the
    dims from the smallest stride up that are contiguous make a row, the next dim the rows
    of a block, the others one block per index. A view whose strides do not nest
    (overlapping or interleaved) is its whole span."""
    if any(n == 0 for n in shape):
        return []
    dims = sorted(((abs(s), n) for n, s in zip(shape, strides) if n > 1 and s != 0),
                  reverse=True)
    reach = 0
    nested = True
    for a, n in reversed(dims):
        nested = nested and a > reach
        reach += a * (n - 1)
    if not nested:
        return [Block(0, (reach + 1) * itemsize, (reach + 1) * itemsize, 1)]
    row, k = 1, len(dims)
    while k and dims[k - 1][0] == row:
        row *= dims[k - 1][1]
        k -= 1
    row_bytes = row * itemsize
    if k == 0:
        return [Block(0, row_bytes, row_bytes, 1)]
    (a, n), outer = dims[k - 1], dims[:k - 1]
    return [Block(itemsize * sum(i * s for i, (s, _) in zip(index, outer)), row_bytes,
                  a * itemsize, n)
            for index in itertools.product(*(range(m) for _, m in outer))]


class Group(Record):
    """Arrays whose bytes overlap, one of them written: one scratch copy of ``[lo, hi)``."""
    __slots__ = ()
    lo: int
    hi: int
    members: tuple[str, ...]
    written: tuple[str, ...]


def plan_groups(arrays: Mapping[str, Any], written: set[str]) -> list[Group]:
    """The scratch copies a checked launch of these device arrays (``ptr``, ``shape``,
    ``strides``, ``dtype``) makes: the overlapping arrays grouped (an array overlapping two
    joins them), the groups holding a written array kept. Empty arrays need none."""
    ranges = []
    for name, arr in arrays.items():
        r = byte_range(arr.ptr, arr.shape, arr.strides, arr.dtype.itemsize)
        if r is not None:
            ranges.append((r[0], r[1], name))
    ranges.sort()
    groups: list[list[Any]] = []
    for lo, hi, name in ranges:
        if groups and lo < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], hi)
            groups[-1][2].append(name)
        else:
            groups.append([lo, hi, [name]])
    out = []
    for lo, hi, names in groups:
        w = tuple(n for n in names if n in written)
        if w:
            out.append(Group(lo, hi, tuple(names), w))
    return out


class Scratch:
    """The scratch copies of one checked launch, on its stream: ``open`` allocates and
    fills them and gives the pointers the kernel gets instead; ``commit`` copies the
    written arrays' elements back; ``release`` frees them (ordered on the stream)."""

    def __init__(self, arrays: Mapping[str, Any], written: set[str], stream: int,
                 device: int, loc: SourceLoc | None) -> None:
        self.arrays = arrays
        self.groups = plan_groups(arrays, written)
        self.stream, self.device, self.loc = stream, device, loc
        self.buffers: list[int] = []
        self.starts: list[int] = []  # where each group's lo is in its copy

    def open(self) -> dict[str, int]:
        """Allocate and fill the copies; the pointer each array's kernel argument takes."""
        ptrs = {}
        for g in self.groups:
            size = g.hi - g.lo
            raw = driver.alloc_async(size + SCRATCH_ALIGN, self.stream, self.device, self.loc)
            self.buffers.append(raw)
            start = raw + (g.lo - raw) % SCRATCH_ALIGN
            self.starts.append(start)
            driver.copy_device(start, g.lo, size, self.stream, self.loc)
            for name in g.members:
                ptrs[name] = start + (self.arrays[name].ptr - g.lo)
        return ptrs

    def commit(self) -> None:
        """Copy the elements of the written arrays back from their copies."""
        for g, start in zip(self.groups, self.starts):
            for name in g.written:
                arr = self.arrays[name]
                itemsize = arr.dtype.itemsize
                lo, _ = byte_range(arr.ptr, arr.shape, arr.strides, itemsize)  # type: ignore[misc]
                src = start + (lo - g.lo)
                for b in element_blocks(arr.shape, arr.strides, itemsize):
                    if b.rows == 1:
                        driver.copy_device(lo + b.offset, src + b.offset, b.row_bytes,
                                           self.stream, self.loc)
                    else:
                        driver.copy_rows(lo + b.offset, b.pitch, src + b.offset, b.pitch,
                                         b.row_bytes, b.rows, self.stream, self.loc)

    def release(self) -> None:
        for raw in self.buffers:
            driver.free_async(raw, self.stream)
        self.buffers.clear()
