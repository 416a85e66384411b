"""Which copy engine moves each pipeline stream: TMA, cp.async or plain loads and stores.

The choice is the fastest engine the bucket's facts make admissible, asked of the layout
library (``tilekit.layout``), never re-derived here. The facts are turned into a *witness*
tensor: the least a launch in the bucket guarantees (a base aligned to 16 bytes only when
the bucket says so, else to its element size; a unit inner stride only when the bucket says
so; outer strides multiples of 16 bytes only when the bucket says so, else multiples of the
element size and nothing more; extents of a few boxes). A request admitted for the witness is
admitted for every tensor of the bucket, because each rule is a divisibility or a range
condition that the witness meets no better than any member.

* TMA: ``tma_admissibility`` of the stream's box on the witness (no swizzle: stages are
  row-major), on sm_90 and newer, and padding 0 (TMA fills the edge with zeros); not for
  a 1-D tensor indexed in 64 bits, whose elements past 2^31 - 1 TMA's signed 32-bit
  coordinates cannot reach (a 2-D one keeps TMA: its dims are usually shorter, and a
  launch with a longer one is refused, ``TMA_COORDINATE_REACH``). The box is
  the tile, or, when one dim of the tile exceeds TMA's 256 and every dim before it has
  extent 1, the largest box along that dim whose copies land one after the other in the
  row-major stage, each 128-byte aligned (``tma_box``; a tile is then several copies).
* cp.async: sm_80 and newer, padding 0 (the zero-fill of a short copy), and a 16-, 8- or
  4-byte chunk the facts allow (``thread_copy_alternatives``); the chunk becomes the copy's
  ``vector_bytes``.
* cp.async with rows checked at run time (``checked_cp_async``; only for a stage that
  ``tk.dot`` reads in place, whose only other writer would be plain stores through the
  swizzle): the widest 8- or 4-byte chunk a tensor whose base and row strides are multiples
  of the chunk admits. The bucket's facts say 16 bytes or the element size, nothing between
  (a bf16 row of 8092 elements is 16,184 bytes: 8-byte aligned), so the copy tests the base
  and the row strides once and falls back to element copies when they are not so aligned.
* plain loads and shared stores: always (any padding).
* TMA from a repacked copy (``EngineDecision.repack``; decided by the schedule for wgmma
  operands only, ``schedule._repacked_feed``): the runtime copies the tensor into a buffer
  whose rows are padded to 16 bytes before each launch, and the kernel reads that copy.

A decision keeps every reason a faster engine was refused (the TMA rules' names and
messages), for the ``TILEKIT_DUMP=sched`` report and for the error when a user forces an
engine that is not admissible.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tilekit.ir.dtypes import DType
from tilekit.layout.admissibility import AlternativeKind, Rule, thread_copy_alternatives
from tilekit.layout.tma import GlobalTensor, TmaDescriptorParams, TmaRequest, tma_admissibility

#: A witness tensor spans this many boxes along every dim (any number above 1 would do:
#: several tiles per dim make every row start and tile origin count).
WITNESS_BOXES = 3
CP_ASYNC_WIDTHS = (16, 8, 4)


class Engine(enum.Enum):
    """Copy engines, fastest first; the value is the IR's ``engine`` attribute."""

    TMA = "tma"
    CP_ASYNC = "cp_async"
    PLAIN = "plain"

    def __str__(self) -> str:
        return self.value


class EngineRule(enum.Enum):
    """Why an engine other than TMA (whose rules are ``tilekit.layout``'s ``Rule``) is
    refused, with the sentence a report shows."""

    NO_ASYNC_ENGINES = "the target has neither TMA nor cp.async (its async copies are not " \
                       "modelled)"
    CP_ASYNC_ARCH = "cp.async needs sm_80 or newer"
    CP_ASYNC_CHUNK = "no 16-, 8- or 4-byte cp.async chunk is possible under the bucket's facts"
    NONZERO_PADDING = "only plain loads fill the tiles' edges with a value other than 0"
    TMA_WIDE_1D = "a 1-D tensor indexed in 64 bits has 2^31 elements or more, past the reach " \
                  "of TMA's signed 32-bit coordinates"
    SWIZZLED_STAGE = "the stage feeds tk.dot's ldmatrix in a chunk-swizzled layout, which " \
                     "cp.async writes chunk by chunk; TMA's swizzle modes are not wired to it yet"


@dataclass(frozen=True)
class Rejection:
    """One reason ``engine`` was not used: a rule and its message."""

    engine: Engine
    rule: Rule | EngineRule
    message: str

    def __str__(self) -> str:
        return f"{self.rule.name}: {self.message}"


@dataclass(frozen=True)
class TensorFacts:
    """What the bucket guarantees about one tensor argument (``fn.aligned16`` etc.)."""

    name: str
    dtype: DType
    aligned16: bool
    unit_inner: bool
    strides16: bool
    index: DType = DType.INT32  # int64: a span, extent or stride of 2^31 elements or more

    def witness(self, box: Sequence[int], checked: int = 0) -> GlobalTensor:
        """The least a tensor of the bucket guarantees, spanning a few boxes per dim; with
        ``checked``, the least one whose base and row strides are also multiples of
        ``checked`` bytes (what a run-time check establishes)."""
        elem = self.dtype.itemsize
        shape = tuple(WITNESS_BOXES * b for b in box)
        strides = [1 if self.unit_inner else 3]  # an odd stride: nothing but its element size
        rows = 16 if self.strides16 else max(elem, checked)
        for d in range(len(shape) - 2, -1, -1):
            row = strides[0] * shape[d + 1] * elem
            row = -(-row // 16) * 16 + (0 if rows == 16 else rows)
            strides.insert(0, row // elem)
        base = 16 if self.aligned16 else max(elem, checked)
        return GlobalTensor(elem, shape, tuple(strides), base, name=self.name)


@dataclass(frozen=True)
class EngineDecision:
    """The engine of one stream, the reasons faster ones were refused, and the engine's
    parameters (the chunk of cp.async; the witness descriptor of TMA)."""

    engine: Engine
    forced: bool
    vector_bytes: int | None = None
    tma: TmaDescriptorParams | None = None  # for the witness; ``tma.box_dim`` is the box
    rejections: tuple[Rejection, ...] = ()
    witness: GlobalTensor | None = None  # the tensor the layout library was asked about
    # cp.async whose chunk the copy checks at run time (base and row strides multiples of
    # ``vector_bytes``), falling back to element copies; False: the facts prove the chunk
    checked: bool = False
    # TMA from a copy the runtime makes at each launch (``tilekit.rt.repack``): the tensor
    # itself is refused (``rejections``), its row-major copy with padded rows is not.
    # ``witness`` is then that copy; the plan is ``tma_alternatives``' REPACK one.
    repack: bool = False
    repack_note: str = ""  # the REPACK alternative's explanation, for the report

    def rejected(self, engine: Engine) -> tuple[Rejection, ...]:
        return tuple(r for r in self.rejections if r.engine is engine)

    @property
    def box(self) -> tuple[int, ...] | None:
        """The TMA box (outermost first), when the engine is TMA."""
        return None if self.tma is None else tuple(reversed(self.tma.box_dim))


#: TMA's largest box extent (``boxDim``) per dim.
TMA_MAX_BOX = 256
#: Where each TMA copy lands in a stage must be this aligned.
TMA_DEST_ALIGN = 128


def tma_box(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """The box TMA moves a tile of ``shape`` with: the tile itself, or the largest box that
    splits its one dim over 256 into copies landing contiguously and 128-byte aligned in the
    row-major stage (every dim before that one of extent 1). The tile when there is no such
    split (admissibility then names the box rule it breaks)."""
    shape = tuple(shape)
    over = [d for d, n in enumerate(shape) if n > TMA_MAX_BOX]
    if not over:
        return shape
    d = over[0]
    if len(over) > 1 or any(n != 1 for n in shape[:d]):
        return shape
    inner = math.prod(shape[d + 1:]) * itemsize
    for b in range(TMA_MAX_BOX, 0, -1):
        if shape[d] % b == 0 and (b * inner) % TMA_DEST_ALIGN == 0:
            return shape[:d] + (b,) + shape[d + 1:]
    return shape


def target_arch(target_name: str) -> int | None:
    """``sm_90a`` -> 90, ``sm_80`` -> 80; None for targets that are not NVIDIA's."""
    if not target_name.startswith("sm_"):
        return None
    digits = "".join(c for c in target_name[3:] if c.isdigit())
    return int(digits) if digits else None


def _tma(facts: TensorFacts, box: tuple[int, ...], padding: object,
         arch: int | None) -> tuple[TmaDescriptorParams | None, list[Rejection]]:
    if arch is None:
        return None, [Rejection(Engine.TMA, EngineRule.NO_ASYNC_ENGINES,
                                EngineRule.NO_ASYNC_ENGINES.value)]
    tma = tma_box(box, facts.dtype.itemsize)
    verdict = tma_admissibility(TmaRequest(facts.witness(box), tma), arch=arch)
    out = [Rejection(Engine.TMA, v.rule, v.message) for v in verdict.violations]
    if padding != 0:
        out.append(Rejection(Engine.TMA, EngineRule.NONZERO_PADDING,
                             f"padding {padding!r}: TMA fills the edge with zeros"))
    if len(box) == 1 and facts.index is DType.INT64:  # (a 2-D tensor's dims may be short)
        out.append(Rejection(Engine.TMA, EngineRule.TMA_WIDE_1D,
                             f"`{facts.name}` is a 1-D tensor indexed in 64 bits: its "
                             "elements past 2^31 - 1 are out of TMA's reach"))
    return (verdict.params if not out else None), out


def _cp_async(facts: TensorFacts, box: tuple[int, ...], padding: object,
              arch: int | None, checked: int = 0) -> tuple[int | None, list[Rejection]]:
    out: list[Rejection] = []
    if arch is None:
        return None, [Rejection(Engine.CP_ASYNC, EngineRule.NO_ASYNC_ENGINES,
                                EngineRule.NO_ASYNC_ENGINES.value)]
    if arch < 80:
        out.append(Rejection(Engine.CP_ASYNC, EngineRule.CP_ASYNC_ARCH,
                             f"cp.async needs sm_80 or newer, the target is sm_{arch}"))
    if padding != 0:
        out.append(Rejection(Engine.CP_ASYNC, EngineRule.NONZERO_PADDING,
                             f"padding {padding!r}: cp.async fills the edge with zeros"))
    witness = facts.witness(box, checked)
    plans = [a.params for a in thread_copy_alternatives(
        elem_bytes=witness.elem_bytes, base_align=witness.base_align, shape=witness.shape,
        strides=witness.strides, box=box, element_strides=(1,) * len(box),
        tiles=1, arch=max(arch, 80)) if a.kind is AlternativeKind.FALLBACK_CP_ASYNC]
    if not plans:
        out.append(Rejection(Engine.CP_ASYNC, EngineRule.CP_ASYNC_CHUNK,
                             _chunk_reason(facts, box)))
    return (plans[0].vector_bytes if plans and not out else None), out


def _chunk_reason(facts: TensorFacts, box: tuple[int, ...]) -> str:
    elem = facts.dtype.itemsize
    known = [f"`{facts.name}` is {'16' if facts.aligned16 else str(elem)}-byte aligned",
             "its inner stride is " + ("1" if facts.unit_inner else "not known to be 1"),
             "its row strides are " + ("multiples of 16 bytes" if facts.strides16
                                       else f"only known to be multiples of {elem} bytes"),
             f"a tile row is {box[-1] * elem} bytes"]
    return f"no {'/'.join(map(str, CP_ASYNC_WIDTHS))}-byte cp.async chunk fits: " + \
        ", ".join(known)


def choose_engine(facts: TensorFacts, box: tuple[int, ...], padding: object,
                  target_name: str, forced: Engine | None = None) -> EngineDecision:
    """The fastest admissible engine for one stream (``forced``: only that one, which may
    then be inadmissible: ``admissible(decision)`` says, the caller raises)."""
    arch = target_arch(target_name)
    witness = facts.witness(box)
    rejections: list[Rejection] = []

    def decided(engine: Engine, **kw: object) -> EngineDecision:
        return EngineDecision(engine, forced is not None, rejections=tuple(rejections),
                              witness=witness, **kw)  # type: ignore[arg-type]

    if forced in (None, Engine.TMA):
        params, why = _tma(facts, box, padding, arch)
        if params is not None:
            return decided(Engine.TMA, tma=params)
        rejections += why
        if forced is Engine.TMA:
            return decided(Engine.TMA)
    if forced in (None, Engine.CP_ASYNC):
        width, why = _cp_async(facts, box, padding, arch)
        if width is not None:
            return decided(Engine.CP_ASYNC, vector_bytes=width)
        rejections += why
        if forced is Engine.CP_ASYNC:
            return decided(Engine.CP_ASYNC)
    return decided(Engine.PLAIN)


def checked_cp_async(facts: TensorFacts, box: tuple[int, ...], padding: object,
                     target_name: str) -> EngineDecision | None:
    """cp.async in the widest 8- or 4-byte chunk that a tensor of the bucket admits once
    its base and row strides are known to be multiples of the chunk, which the copy then
    checks at run time (``EngineDecision.checked``); None when no such chunk exists or
    the facts already prove one (``choose_engine`` then gives it). A chunk is whole
    elements of one tile row; a row is at least one chunk.

    The layout library is asked about the witness of a tensor so aligned, as for any
    chunk: a chunk admitted there is admitted for every tensor of the bucket that passes
    the check."""
    arch = target_arch(target_name)
    for width in CP_ASYNC_WIDTHS[1:]:
        if width <= facts.dtype.itemsize:
            break  # an element per chunk needs no check (the facts admit it or nothing)
        vb, why = _cp_async(facts, box, padding, arch, checked=width)
        if vb is not None and not why and vb <= width:
            return EngineDecision(Engine.CP_ASYNC, False, vb, witness=facts.witness(box, vb),
                                  checked=True)
    return None


def admissible(decision: EngineDecision) -> bool:
    """Whether the chosen engine itself was admitted (only a forced one can fail)."""
    return not decision.rejected(decision.engine)


def tile_bytes(shape: Sequence[int], dtype: DType) -> int:
    return math.prod(shape) * dtype.itemsize
