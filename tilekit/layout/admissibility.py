"""Hardware admissibility as a first-class answer: verdicts, violations, costed alternatives.

A layout being *valid* (a function from coordinates to addresses) is not the
same as it being *admissible* to a hardware fast path (a TMA tensor map, a
wgmma shared-memory descriptor). The checkers in ``tma`` and ``wgmma`` answer
with a :class:`Verdict`: either the exact hardware parameters, or every rule
the request breaks, each as a typed :class:`Violation`. When the answer is no,
they also propose :class:`Alternative` plans, each with a :class:`Cost`, so the
compiler picks a fallback on purpose instead of silently falling off a cliff.

The cost model is deliberately small and documented here, in one place:

* ``bytes_per_pass`` — bytes moved through the memory the plan touches for one
  pass over the data (one read of the whole tensor by tiles, or one operand tile
  for wgmma plans); whole tiles are charged, edges included.
* ``issues_per_pass`` — warp-level instruction issues for that pass (a TMA copy
  is one issue, issued by one thread; a ``cp.async`` or ``ld.global`` of ``w``
  bytes per lane moves ``32 * w`` bytes per issue).
* ``one_time_bytes`` / ``passes`` — a copy done once (a repack) is spread over
  the number of passes that reuse its result.

``score = bytes_per_pass + one_time_bytes / passes + ISSUE_BYTES * issues_per_pass``,
with ``ISSUE_BYTES = 64``: one instruction issue is charged like 64 bytes of
traffic. That constant is a judgement, not a measurement: an H100 SM streams
about 12 B/cycle of DRAM bandwidth, and each memory instruction drags address
arithmetic, predication and a shared-memory store with it; 64 keeps a single
TMA issue per 16 KB tile negligible and makes 4-byte loads clearly worse than a
one-time repack amortized over a few passes. Ranking is by
``(changes_shared_layout, score, kind, explanation)``: a plan that keeps the
shared-memory layout its consumer was promised always ranks before one that
changes it (the consumer's cost of a different layout is not modelled here),
and the remaining keys make the order total and deterministic.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

import numpy as np

from tilekit.errors import LayoutError, SourceLoc

#: Bytes of traffic one warp-level instruction issue is charged as (see module docstring).
ISSUE_BYTES = 64


class Rule(enum.Enum):
    """Every hardware rule a checker can report, named after what it protects.

    TMA rules come from the CUDA Driver API's ``cuTensorMapEncodeTiled``
    requirements; wgmma rules from the PTX ISA's "Shared Memory Matrix Layout"
    and "Matrix Descriptor Format" sections.
    """

    # --- TMA (cuTensorMapEncodeTiled) ---
    TMA_ARCH = enum.auto()  # tensor maps need compute capability >= 9.0
    TMA_DTYPE = enum.auto()  # element size / data type not encodable, or they disagree
    TMA_RANK = enum.auto()  # rank 1..5; >= 3 with interleave
    TMA_INNER_NOT_CONTIGUOUS = enum.auto()  # dimension 0 has no stride field: must be unit stride
    TMA_GLOBAL_ADDRESS_ALIGN = enum.auto()  # 16 B (32 B with INTERLEAVE_32B)
    TMA_GLOBAL_DIM = enum.auto()  # 1 <= globalDim[i] <= 2^32
    TMA_COORDINATE_REACH = enum.auto()  # globalDim[i] <= 2^31: coordinates are signed 32-bit
    TMA_GLOBAL_STRIDE_ALIGN = enum.auto()  # multiple of 16 B (32 B with INTERLEAVE_32B)
    TMA_GLOBAL_STRIDE_RANGE = enum.auto()  # 0 <= globalStrides[i] < 2^40
    TMA_BOX_DIM = enum.auto()  # 1 <= boxDim[i] <= 256
    TMA_BOX_INNER_BYTES = enum.auto()  # boxDim[0] * elemsize multiple of 16
    TMA_BOX_BYTES = enum.auto()  # the loaded box fits one SM's shared memory (measured)
    TMA_BOX_EXCEEDS_SWIZZLE = enum.auto()  # INTERLEAVE_NONE + swizzle: inner box bytes <= span
    TMA_ELEMENT_STRIDE = enum.auto()  # 1 <= elementStrides[i] <= 8
    TMA_INNER_ELEMENT_STRIDE = enum.auto()  # INTERLEAVE_NONE: elementStrides[0] is ignored
    TMA_INTERLEAVE_SWIZZLE = enum.auto()  # INTERLEAVE_32B requires SWIZZLE_32B
    TMA_SWIZZLE_ARCH = enum.auto()  # 128B atom swizzles are Blackwell (sm_100+) modes
    TMA_OOB_FILL_DTYPE = enum.auto()  # NaN fill only for floating-point data types
    # --- wgmma shared-memory matrix descriptors ---
    WGMMA_ARCH = enum.auto()  # wgmma exists on sm_90a only
    WGMMA_DTYPE = enum.auto()  # element type / major-ness combination not offered
    WGMMA_SHAPE = enum.auto()  # operand tile shape is not the instruction's
    WGMMA_START_ALIGN = enum.auto()  # matrix start address 16-byte aligned
    WGMMA_ADDRESS_RANGE = enum.auto()  # start address must fit the 18-bit shared window
    WGMMA_CORE_MATRIX = enum.auto()  # a core matrix row is not 16 contiguous bytes
    WGMMA_STRIDE_ALIGN = enum.auto()  # LBO / SBO must be multiples of 16 B
    WGMMA_STRIDE_RANGE = enum.auto()  # LBO / SBO must fit 14 bits after >> 4
    WGMMA_NOT_CANONICAL = enum.auto()  # core matrices not on the canonical LBO/SBO grid
    WGMMA_SWIZZLE_BASE = enum.auto()  # swizzle pattern not aligned to its repeat


@dataclass(frozen=True)
class Violation:
    """One broken rule: which, on what field, the offending value and the limit."""

    rule: Rule
    field: str
    value: object
    limit: object
    message: str

    def __str__(self) -> str:
        return f"{self.rule.name}: {self.message}"


P = TypeVar("P")


@dataclass(frozen=True)
class Verdict(Generic[P]):
    """Admissible with ``params``, or not with every violation found (never both)."""

    params: P | None
    violations: tuple[Violation, ...] = ()

    def __post_init__(self) -> None:
        if (self.params is None) == (not self.violations):
            raise ValueError("a Verdict holds parameters xor violations")

    @staticmethod
    def admit(params: P) -> Verdict[P]:
        return Verdict(params, ())

    @staticmethod
    def reject(violations: Iterable[Violation]) -> Verdict[P]:
        return Verdict(None, tuple(violations))

    @property
    def admissible(self) -> bool:
        return self.params is not None

    @property
    def rules(self) -> frozenset[Rule]:
        return frozenset(v.rule for v in self.violations)

    def unwrap(self, what: str = "layout", loc: SourceLoc | None = None) -> P:
        """The parameters, or a ``LayoutError`` listing every violation."""
        if self.params is not None:
            return self.params
        head = f"{what} is not admissible: " + "; ".join(v.message for v in self.violations)
        raise LayoutError(head, loc, hints=[str(v) for v in self.violations])


class AlternativeKind(enum.Enum):
    """What an alternative plan changes. The order is the last tie-breaker in ranking."""

    DIFFERENT_BOX = 0  # same tensor, other box / swizzle / several copies per tile
    DIFFERENT_SWIZZLE = 1  # wgmma: the producer writes another canonical swizzle
    REALIGN_BUFFER = 2  # wgmma: move the shared buffer to the swizzle repeat
    FACTORIZE = 3  # admissible descriptor of a permuted / merged view + residual
    REGISTER_OPERAND = 4  # wgmma: A from registers instead of a descriptor
    REPACK = 5  # copy once into an admissible layout, amortized
    FALLBACK_CP_ASYNC = 6  # per-thread cp.async of 16/8/4 bytes
    FALLBACK_PLAIN_LOADS = 7  # per-thread loads + shared stores


@dataclass(frozen=True)
class Cost:
    """The cost of one plan under the module's documented model."""

    bytes_per_pass: int
    issues_per_pass: int
    issues_per_tile: int
    one_time_bytes: int = 0
    passes: int = 1

    def __post_init__(self) -> None:
        if self.passes < 1:
            raise ValueError("a one-time cost is spread over at least one pass")

    @property
    def score(self) -> Fraction:
        """Bytes-equivalent per pass; exact, so ranking never depends on rounding."""
        return (
            Fraction(self.bytes_per_pass)
            + Fraction(self.one_time_bytes, self.passes)
            + ISSUE_BYTES * self.issues_per_pass
        )


A = TypeVar("A", covariant=True)  # frozen: an Alternative[Sub] is an Alternative[Base]


@dataclass(frozen=True)
class Alternative(Generic[A]):
    """One way to get the data there when the fast path refuses the request."""

    kind: AlternativeKind
    params: A
    cost: Cost
    explanation: str
    changes_shared_layout: bool = False

    def rank_key(self) -> tuple[bool, Fraction, int, str]:
        return (self.changes_shared_layout, self.cost.score, self.kind.value, self.explanation)


def rank_alternatives(alternatives: Iterable[Alternative[A]]) -> tuple[Alternative[A], ...]:
    """Cheapest first, layout-preserving before layout-changing; total and deterministic."""
    return tuple(sorted(alternatives, key=Alternative.rank_key))


WARP = 32
CP_ASYNC_MIN_ARCH = 80


@dataclass(frozen=True)
class ThreadCopyPlan:
    """Per-thread copies: each lane moves ``vector_bytes`` per instruction."""

    vector_bytes: int
    issues_per_tile: int
    uses_cp_async: bool


def _widest_copy(
    elem_bytes: int, base_align: int, shape: Sequence[int], strides: Sequence[int],
    loaded: Sequence[int], element_strides: Sequence[int], widths: Sequence[int], cp_async: bool,
) -> ThreadCopyPlan | None:
    """The widest lane width every row start, tile origin and the base allow."""
    es = tuple(element_strides) or (1,)
    shape, strides, loaded = tuple(shape) or (1,), tuple(strides) or (1,), tuple(loaded) or (1,)
    contiguous = (shape[-1] == 1 or strides[-1] == 1) and es[-1] == 1
    rows, row_elems = math.prod(loaded[:-1]), loaded[-1]
    row_starts = [abs(s) * elem_bytes for d, s in enumerate(strides[:-1]) if shape[d] > 1]
    for w in widths:
        if base_align % w or any(s % w for s in row_starts):
            continue
        if contiguous:
            if (row_elems * es[-1] * elem_bytes) % w:
                continue
            vectors = rows * ceil_div(row_elems * elem_bytes, w)
        else:  # element by element, each in elem_bytes // w pieces
            if elem_bytes % w or (abs(strides[-1]) * es[-1] * elem_bytes) % w:
                continue
            vectors = rows * row_elems * (elem_bytes // w)
        return ThreadCopyPlan(w, ceil_div(vectors, WARP) * (1 if cp_async else 2), cp_async)
    return None


def thread_copy_alternatives(
    *, elem_bytes: int, base_align: int, shape: Sequence[int], strides: Sequence[int],
    box: Sequence[int], element_strides: Sequence[int], tiles: int, arch: int,
) -> list[Alternative[ThreadCopyPlan]]:
    """The per-thread fallbacks for a strided box (outermost-first, strides in elements).

    ``cp.async`` (sm_80+) copies 16, 8 or 4 bytes per lane, one issue per warp
    instruction; plain loads copy any power of two up to 16 and pay a shared store
    too. Plain loads always exist, so a fallback is never missing.
    """
    loaded = [ceil_div(b, max(e, 1)) for b, e in zip(box, element_strides, strict=True)]
    tile_bytes = math.prod(loaded) * elem_bytes
    out: list[Alternative[ThreadCopyPlan]] = []
    for kind, widths, cp_async in (
        (AlternativeKind.FALLBACK_CP_ASYNC, (16, 8, 4), True),
        (AlternativeKind.FALLBACK_PLAIN_LOADS, (16, 8, 4, 2, 1), False),
    ):
        if cp_async and arch < CP_ASYNC_MIN_ARCH:
            continue
        plan = _widest_copy(elem_bytes, base_align, shape, strides, loaded, element_strides,
                            widths, cp_async)
        if plan is None:
            continue
        what = "cp.async" if cp_async else "ld.global + st.shared"
        cost = Cost(tiles * tile_bytes, tiles * plan.issues_per_tile, plan.issues_per_tile)
        out.append(Alternative(
            kind, plan, cost,
            f"{what} of {plan.vector_bytes} bytes per lane: {plan.issues_per_tile} warp "
            "instruction issues per tile"))
    return out


def describe(violations: Sequence[Violation]) -> str:
    """One line per violation, for error messages and logs."""
    return "\n".join(str(v) for v in violations)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def xor_swizzle(address: np.ndarray | int, chunks: int, base_offset: int = 0) -> np.ndarray | int:
    """The shared-memory XOR swizzle TMA writes and wgmma reads (an involution).

    Bits ``[4, 4 + log2 chunks)`` (the 16-byte chunk within a ``16 * chunks``-byte
    row) are XORed with bits ``[7, 7 + log2 chunks)`` of the *address*, less
    ``base_offset`` rows. Measured on an H100: TMA loads at every 128-byte phase of
    the destination and wgmma reads through descriptors both follow this formula.
    """
    mask = chunks - 1
    return address ^ ((((address >> 7) - base_offset) & mask) << 4)


def pow2_alignment(value: int) -> int:
    """The largest power of two dividing ``value`` (an address is its own alignment witness).

    Zero is divisible by everything; it is reported as 2**64, beyond any rule.
    """
    if value < 0:
        raise ValueError("addresses and alignments are non-negative")
    return value & -value if value else 1 << 64
