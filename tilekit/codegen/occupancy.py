"""What a kernel asks of an SM: its warps (``default_num_warps``) and, for a row kernel
(softmax, norms: every large tile it moves spans one row), the blocks per SM that keep
enough of its rows in flight (``row_blocks_per_sm``, the ``.minnctapersm`` request).

Both are policies measured on the H100 (the constants below say how); the code
generation driver applies them (``tilekit.codegen.driver.compile_module``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from tilekit.ir.core import Module, Operation
from tilekit.record import Record

if TYPE_CHECKING:
    from tilekit.ir.types import TileType

__all__ = ["CALIBRATED_TARGETS", "default_num_warps", "row_blocks_per_sm"]

# A row kernel (softmax, norms: every large tile it moves is one row) wants about this
# many bytes of its largest row per thread: 4 loads of 16 bytes, on 4 warps at least, 8 at
# most. Measured on the H100 with device-only timing (bench/RESULTS.md, "Warps for row
# kernels", 2026-11-25): bf16 rows of 4097 on 4 warps against 2, layer norm 0.85 -> 0.88
# of copy, RMSNorm 0.89 -> 0.93, softmax 0.90 -> 0.96, though layer norm's registers then
# allow 6 blocks per SM (48 KB of rows) where 2 warps had 8; f32 rows of 8192, 0.98 on 8.
# 16 KB rows (f32 of 4097, bf16 of 8192) on 8 warps rather than 4 (64 bytes per thread, not
# 128; 2026-11-28, same process A/B): within 1% of copy on 10 of 12 row kernels, layer
# norm bf16 8192 x 8192 0.977 -> 0.989, 8192 x 8193 0.952 -> 0.918; and half the code per
# thread, which halves their compile (the example softmax of 4097: LLVM 212 -> 150 ms,
# nvJitLink 91 -> 55 ms offline). (An earlier measurement favoured 2 warps; its timing
# included the host's launch.) Rows of narrower elements (bf16) take twice the bytes per
# thread, so bf16 rows of 8192 stay on 4 warps: on 8, layer norm lost 3.4 points at
# 8192 x 8193 on the H100 (gaining 1.2 at 8192 x 8192) and 7-8 points at both on the H200
# (0.960 -> 0.889, 0.827 -> 0.746; softmax 8192 x 8193 0.944 -> 0.885), where float32 rows
# of 16 KB ran alike on 4 and 8 warps on both GPUs (bench/RESULTS.md, "Short rows").
_ROW_BYTES_PER_THREAD = 64
_NARROW_ROW_BYTES_PER_THREAD = 128

# A row of fewer than 4096 elements (a *small* row: a kernel over many short rows) takes
# about 32 bytes of the row per thread, on 1 to 4 warps. The 4 warps every other kernel
# gets leave a short row on a few threads and the rest replicas, and cap the rows in
# flight at 16 per SM (2048 threads). Measured on the H200 (2026-11-28, same process,
# softmax and RMSNorm of 2^25 elements, one row per program, x copy of the same bytes;
# bench/RESULTS.md, "Short rows"), 4 warps -> these: bf16 rows of 384 0.52 -> 0.67, of
# 512 0.62 -> 0.79, f32 of 256 0.74 -> 0.81, of 384 0.94 -> 1.03; rows of 2 KB 1-2% faster
# on 2 warps than on 1 (bf16 1000 1.05 -> 1.06, 1024 0.98 -> 1.00), rows of 4 KB alike on
# 2 and 4. Rows of 128 to 256 elements stay at 0.2-0.8 on any warps (a block per row
# cannot hold enough bytes in flight): give each program several rows, a `(R, N)` tile
# (docs/memory_bound.md).
_SMALL_ROW_BYTES_PER_THREAD = 32
_SMALL_ROW_MAX_WARPS = 4

# ... and about this many bytes of rows per SM (blocks resident at once x the largest row).
# Measured on the H100 (bench/memory_bound.py): row kernels at 32-48 KB per SM reached
# 0.71-0.88 of copy bandwidth, at 64 KB or more 0.92 and above.
_ROW_BYTES_PER_SM = 64 * 1024
# 32-bit registers per SM (sm_80 to sm_90), and those a row kernel needs besides its peak
# of tile registers (``_registers_needed``): addresses, indices, the rows it streams.
# Calibrated on nvJitLink 13.5 against the smallest register cap without spills, over
# softmax, layer norm and RMS norm rows of 4096 to 16385 elements.
_REGISTERS_PER_SM = 64 * 1024
_RESERVED_REGISTERS = 40
# The targets that calibration holds for. On sm_80 the same rows need up to 40 registers
# more (layer norm's bf16 rows of 4097 spill 223 bytes at 128), so they ask for nothing.
CALIBRATED_TARGETS = frozenset({"sm_90a"})


class _View(Record):
    """A tile view a kernel loads or stores: its elements, their bytes, whether it is one
    row (every dim but the last of extent 1)."""
    __slots__ = ()
    elements: int
    itemsize: int
    single_row: bool


def _views(module: Module) -> list[_View] | None:
    """The tile views a kernel moves; None for a kernel with a dot or a pipeline (never a
    row kernel)."""
    import math

    views = []
    for op in module.walk():
        if op.name in ("dot", "pipeline"):
            return None
        if op.name in ("tile_load", "tile_store"):
            shape = op.attrs["shape"]
            views.append(_View(math.prod(shape), op.operands[0].type.dtype.itemsize,
                               all(d == 1 for d in shape[:-1])))
    return views


def _row_bytes(views: list[_View] | None) -> int:
    """The bytes of the largest row a row kernel moves (no dot, no pipeline, every tile of
    4096 elements or more it loads or stores is a single row); 0 for other kernels."""
    large = [v for v in views or () if v.elements >= 4096]
    if not large or not all(v.single_row for v in large):
        return 0
    return max(v.elements * v.itemsize for v in large)


def _narrowest_row_element(views: list[_View]) -> int:
    """The bytes of the narrowest element among a row kernel's rows (tile views of 4096
    elements or more)."""
    return min((v.itemsize for v in views if v.elements >= 4096), default=4)


def _small_row_bytes(views: list[_View] | None, largest: int) -> int:
    """The bytes of the largest row of a kernel whose tile views are all single rows of
    fewer than 4096 elements, none smaller than ``largest`` (the kernel's largest tile of
    any kind: a row is what it moves); 0 for other kernels."""
    if not views or not all(v.single_row for v in views):
        return 0
    row_elements = max(v.elements for v in views)
    if not (1 < row_elements < 4096 and row_elements >= largest):
        return 0
    return max(v.elements * v.itemsize for v in views)


def _warps_for_row(row_bytes: int, per_thread: int, least: int, most: int) -> int:
    """The power of two of warps nearest ``per_thread`` bytes of the row per thread."""
    import math

    warps = row_bytes / (per_thread * 32)
    return min(most, max(least, 2 ** round(math.log2(warps))))


def default_num_warps(module: Module) -> int:
    """Row kernels (``_row_bytes``): 4 to 8 warps, so that each thread moves about
    ``_ROW_BYTES_PER_THREAD`` bytes of the largest row (twice that for 2-byte or narrower
    elements), or less on rows under 8 KB. Kernels of short rows (``_small_row_bytes``):
    about ``_SMALL_ROW_BYTES_PER_THREAD`` bytes per thread on 1 to 4 warps. Other
    kernels: four warps; eight when their largest tile has 8192 elements or more, unless a
    dot's M is under 128 rows (a 64 x 128 or 64 x 256 block: one warpgroup of four warps
    covers its 64 rows on wgmma, and mma.sync runs such tiles on four warps as well)."""
    from tilekit.ir.types import TileType

    views = _views(module)
    row_bytes = _row_bytes(views)
    if row_bytes:
        assert views is not None
        per_thread = (_ROW_BYTES_PER_THREAD if _narrowest_row_element(views) >= 4
                      else _NARROW_ROW_BYTES_PER_THREAD)
        return _warps_for_row(row_bytes, per_thread, 4, 8)
    largest, dot_m = 1, None
    for op in module.walk():
        if op.name == "dot":
            m = op.operand("a").type.shape[0]
            dot_m = m if dot_m is None else max(dot_m, m)
        for r in op.results:
            if isinstance(r.type, TileType):
                largest = max(largest, r.type.numel)
    if dot_m is not None and 16 <= dot_m < 128:
        return 4
    small_row_bytes = _small_row_bytes(views, largest)
    if small_row_bytes:
        return _warps_for_row(small_row_bytes, _SMALL_ROW_BYTES_PER_THREAD, 1,
                              _SMALL_ROW_MAX_WARPS)
    return 8 if largest >= 8192 else 4


def _held_registers(laid: Module) -> int:
    """The 32-bit registers per thread of the tile values a kernel holds across a step that
    waits for other warps (a reduction, a scan, a layout conversion through shared memory),
    at its top level: those cannot be streamed through a few registers as loaded."""
    from tilekit.ir.types import TileType

    ops = laid.kernel.entry.ops
    last_use = {id(v): i for i, op in enumerate(ops) for inner in op.walk()
                for v in inner.operands}
    held, defined = 0, []
    for i, op in enumerate(ops):
        if any(o.name in ("reduce", "argreduce", "scan") or (
                o.name == "convert_layout" and o.attrs["tile_plan"].staged) for o in op.walk()):
            held = max(held, sum(_words(v.type) for v in defined if last_use.get(id(v), -1) > i))
        defined.extend(r for r in op.results
                       if isinstance(r.type, TileType) and r.type.layout is not None)
    return held


def _words(t: TileType) -> int:
    """The 32-bit registers per thread of a laid-out tile (16-bit elements two to one)."""
    return -(-t.layout.num_regs * t.dtype.bits // 32)


def _accessed(laid: Module) -> Iterator[Operation]:
    """The tile views a kernel loads or stores."""
    return (op for op in laid.walk() if op.name in ("tile_load", "tile_store"))


def _tile_type(access: Operation) -> TileType:
    """What a tile view loads or stores."""
    return (access.result if access.name == "tile_load" else access.operand("value")).type


def _checked_per_register(laid: Module, divisible: frozenset[tuple[str, int, int]]) -> bool:
    """Whether a tile view lacks the size fact of one of its dims (``lower_memory``): each
    of its registers is then checked on its own, and its element-wise path (255 registers
    for the bf16 softmax rows of examples/softmax.py) is not what ``_registers_needed``
    models."""
    return any((op.operands[0].name_hint, d, n) not in divisible
               for op in _accessed(laid) for d, n in enumerate(op.attrs["shape"]) if n > 1)


def _ragged_tail(laid: Module, aligned: tuple[frozenset[str], frozenset[str],
                                                frozenset[str]] = (frozenset(),) * 3) -> bool:
    """Whether a tile access has a run of registers (along the minor dim) that may pass the
    tile's extent and holds elements of several threads: a row of 8191 on 128 threads of 8
    (its last run), not one of 8193 (whose last run holds one element, in thread 0, and
    replicas, whose wrapped offsets LLVM folds). Such a run takes its own checked path,
    with an offset per register: up to 150 registers more than ``_registers_needed``. A
    run that wraps whole (``TileLayout.wraps_whole``: rows of 5000 in runs of 8) of a
    tensor the bucket proves 16-byte aligned row by row (``aligned``: the bucket's
    ``aligned16``, ``unit_inner`` and ``strides16``) takes no such path
    (``tile_access._tail_plan``)."""
    from tilekit.codegen.tile_access import rows_aligned
    from tilekit.layout.tile_layouts import BlockedEncoding

    for op in _accessed(laid):
        lay = _tile_type(op).layout
        enc = lay.encoding
        if not isinstance(enc, BlockedEncoding) or not lay.rank:
            continue
        minor = enc.order[0]
        d = lay.dims[minor]
        steps = [term.mult for term in (d.lane, d.warp) if term.mod > 1]
        run = min(enc.size_per_thread[minor], lay.shape[minor])
        whole_ok = minor == lay.rank - 1 and rows_aligned(op.operands[0].name_hint,
                                                          lay.rank, aligned)
        for first in range(0, lay.num_regs, run):
            regs = range(first, min(first + run, lay.num_regs))
            if whole_ok and len(regs) > 1 and lay.wraps_whole(list(regs), minor):
                continue
            if any(lay.may_wrap(r, minor) for r in regs) and steps and any(
                    d.offsets[r] + min(steps) < d.extent for r in regs):
                return True
    return False


def _registers_needed(laid: Module) -> int:
    """The registers per thread a row kernel needs, estimated: its peak of tile registers,
    which is the tiles it holds across a barrier (``_held_registers``) or, while it loads,
    two 16-byte chunks per vector of its largest access (a misaligned row is realigned
    from the chunk holding a vector's first element and the next), plus
    ``_RESERVED_REGISTERS``."""
    largest = max((_words(_tile_type(op)) for op in _accessed(laid)), default=0)
    return max(_held_registers(laid), 2 * largest) + _RESERVED_REGISTERS


def row_blocks_per_sm(laid: Module, warps: int,
                      divisible: frozenset[tuple[str, int, int]],
                      aligned: tuple[frozenset[str], frozenset[str], frozenset[str]] = (
                          frozenset(),) * 3) -> int:
    """The blocks per SM a row kernel asks the assembler to make room for (``.minnctapersm``
    caps its registers at ``_REGISTERS_PER_SM / (blocks x threads)``): enough for
    ``_ROW_BYTES_PER_SM`` of its largest row, as long as the registers it needs still fit.
    Unasked, nvJitLink takes registers to hide latency (layer norm's bf16 rows of 8192: 168
    where 96 fit, three blocks per SM instead of five). 1 (no request) for other kernels,
    for ragged tails (``_ragged_tail``) and for accesses without their size facts
    (``_checked_per_register``)."""
    row_bytes = _row_bytes(_views(laid))
    if not row_bytes or _ragged_tail(laid, aligned) or _checked_per_register(laid, divisible):
        return 1
    wanted = -(-_ROW_BYTES_PER_SM // row_bytes)
    fits = _REGISTERS_PER_SM // (warps * 32 * _registers_needed(laid))
    return max(1, min(wanted, fits))
