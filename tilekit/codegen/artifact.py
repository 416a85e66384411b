"""What code generation hands the runtime: one compiled kernel, as plain data.

The runtime never looks at the IR to launch a kernel: it reads the parameter
slots here (the kernel's ABI) and packs the launch arguments in that order.
Everything is plain data (strings, ints, enums, tuples) so that the disk cache
and AOT portfolios can store it as JSON next to the binary: no pickle.

Kernel ABI (in order, one slot each):

* for each tensor argument of the IR function: its data pointer (``u64``), then
  its ``rank`` sizes, then its ``rank`` strides in elements, each in the tensor's
  index type (``i32`` or ``i64``, ``TensorType.index``);
* for each scalar argument: its value in its dtype (``bool`` travels as one byte);
* for each TMA stream of a pipeline: its tensor map (``TENSOR_MAP``), a 128-byte
  ``CUtensorMap`` passed by value (``__grid_constant__``, 64-byte aligned) that the
  runtime encodes at launch from the tensor's real shape, strides and base, and the
  slot's ``box`` (outermost first) and ``swizzle``, through
  ``tilekit.layout.tma.tma_admissibility`` (cached per tensor);
* last, the status word pointer (``u64``): a device ``int32[4]`` the kernel writes
  when a ``tk.device_assert`` fails (word 0: 1 + the index of the failed assert in
  ``asserts``; words 1-3: the program id), so that the runtime raises an error at the
  user's line without a device trap (which would poison the CUDA context). A kernel
  compiled in check mode (``checked``, ``TILEKIT_CHECK``) has a longer status buffer,
  ``CHECKED_STATUS_WORDS`` words: after the assert's four, the first out-of-bounds access
  (``CheckWords``; ``access_sites`` says which access each code names).
"""

from __future__ import annotations

import enum

from tilekit.errors import SourceLoc
from tilekit.record import Record


class SlotKind(enum.Enum):
    POINTER = "pointer"  # a tensor's data pointer (u64)
    SIZE = "size"  # a tensor's extent along ``axis`` (index type)
    STRIDE = "stride"  # a tensor's stride along ``axis``, in elements (index type)
    SCALAR = "scalar"  # a runtime scalar argument (its dtype)
    STATUS = "status"  # the status word pointer (u64)
    TENSOR_MAP = "tensor_map"  # a CUtensorMap for ``arg`` with ``box`` (128 bytes, by value)


class ParamSlot(Record):
    """One kernel parameter: what it holds and its C type (``dtype`` is a DType long
    name: ``int32``, ``int64``, ``uint64``, ``float16``...; pointers are ``uint64``)."""
    __slots__ = ()
    kind: SlotKind
    arg: str  # the IR function argument it comes from ("" for STATUS)
    dtype: str
    axis: int = -1
    box: tuple[int, ...] = ()  # TENSOR_MAP: the box, outermost first
    swizzle: str = "NONE"  # TENSOR_MAP: a tilekit.layout.tma.Swizzle name


class AssertSite(Record):
    """A ``tk.device_assert``: its message and the user's line, for the runtime's error."""
    __slots__ = ()
    message: str
    file: str
    line: int
    col: int | None = None


class AccessSite(Record):
    """A raw ``load``/``store``/``atomic`` that a checked kernel bounds-checks (``op``): the
    tensor it accesses, the shape of its offsets tile (positions are reported in it) and
    the user's line, for the runtime's ``MemoryAccessError``."""
    __slots__ = ()
    op: str
    tensor: str
    shape: tuple[int, ...]
    file: str
    line: int
    col: int | None = None
    end_col: int | None = None
    end_line: int | None = None

    @property
    def loc(self) -> SourceLoc:
        return SourceLoc(self.file, self.line, self.col, self.end_col, self.end_line)


#: The status buffer's words (int32) of a kernel without check mode: the assert's.
STATUS_WORDS = 4
#: ... and of a checked kernel: the assert's, then the ``CheckWords``.
CHECKED_STATUS_WORDS = 16


class CheckWords:
    """Where a checked kernel records its first out-of-bounds access in the status buffer
    (int32 word indices; 64-bit fields are 8-byte aligned, little-endian). The first is
    the lowest *key*: the program's linear id ``x + gx * (y + gy * z)`` (``KEY_PROGRAM``),
    then the access's rank among those the program ran and the element's row-major
    position in the offsets tile (``KEY_ORDER``: rank << 32 | position), which is the one
    the interpreter reports (it runs the programs in that order and stops at the first
    fault). Threads that fail take ``LOCK`` (0: free) to compare keys and write."""
    LOCK = 4
    CODE = 5  # 0: no fault; else 1 + the index of the access in ``access_sites``
    KEY_PROGRAM = 6  # u64, initially all ones
    KEY_ORDER = 8  # u64, initially all ones
    OFFSET = 10  # i64: the element offset the access asked for
    PROGRAM = 12  # 3 words: the program id (x, y, z)


class CompiledKernel(Record):
    """One kernel compiled for one target (a specialization of one kernel).

    ``binary`` is the PTX text for NVIDIA targets (``binary_kind == "ptx"``) or a code
    object for AMD (``"hsaco"``); the runtime links PTX into a cubin itself (nvJitLink)
    and caches that. ``shared_bytes`` is the dynamic shared memory the launch must
    request; ``num_warps`` fixes the block size (``num_warps * warp_size`` threads).

    A ``Record`` (as the runtime's other records on the launch path: ``tilekit.record``
    says why). ``llvm_ir`` is only for ``TILEKIT_DUMP=llvm`` right after
    compiling; ``gpu.compile_cached`` drops it before caching, so a compiled kernel and
    the same kernel read back from the cache are equal.
    """
    __slots__ = ()
    name: str
    target: str  # "sm_90a", "sm_80", "gfx942"
    binary_kind: str
    binary: bytes
    num_warps: int
    warp_size: int
    shared_bytes: int
    params: tuple[ParamSlot, ...]
    asserts: tuple[AssertSite, ...] = ()
    written_args: tuple[str, ...] = ()  # tensor arguments the kernel may write
    prints: bool = False  # tk.device_print: the runtime synchronizes to flush the output
    llvm_ir: str = ""  # for TILEKIT_DUMP=llvm; dropped before caching
    repacked: tuple[str, ...] = ()  # tensor arguments the runtime copies before the
    #   launch into a buffer with rows padded to 16 bytes (tilekit.rt.repack); the kernel
    #   was compiled for that copy (16-byte aligned base and row strides)
    checked: bool = False  # compiled in check mode (TILEKIT_CHECK): bounds checks, the
    #   longer status buffer (CHECKED_STATUS_WORDS)
    access_sites: tuple[AccessSite, ...] = ()  # the accesses it checks

    @property
    def block_threads(self) -> int:
        return self.num_warps * self.warp_size

    @property
    def status_words(self) -> int:
        """The int32 words of its status buffer."""
        return CHECKED_STATUS_WORDS if self.checked else STATUS_WORDS

    @property
    def may_fail(self) -> bool:
        """Whether a launch can report a failure through the status buffer (then the
        runtime reads it after the launch)."""
        return bool(self.asserts or self.access_sites)
