"""The shared-memory plan of a function's pipelines: an offset for every ring and barrier.

Each pipeline asks for its rings (one per stream, ``stages`` stages of one tile each, a
stage rounded up to 128 bytes so that every stage starts where TMA and wide ``cp.async``
stores may write: 128-byte alignment) and its two barrier rings (``full`` and ``empty``, 8
bytes per mbarrier, 8-byte aligned). A pipeline's buffers are laid out one after the other
from a 128-byte aligned base.

Pipelines share space when they are never live at the same time. A pipeline is live from
its first op to its last (its barriers are invalidated and its rings drained before the
program goes on), so in program order a pipeline's lifetime is the interval of its op and
everything nested in it: two pipelines one after the other in a block never overlap, one
inside another's body always does. Placement is first fit in program order: the lowest
128-byte aligned base that collides with no pipeline live at the same time. What is
preserved: buffers of pipelines that may be live together never share a byte. A placement
names the earlier pipelines whose bytes it takes over (``reuses``): the schedule orders their
generic-proxy writes before its own TMA writes with a proxy fence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilekit.errors import ScheduleError, SourceLoc

STAGE_ALIGN = 128
BARRIER_BYTES = 8
BARRIER_ALIGN = 8


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def stage_bytes(tile_bytes: int) -> int:
    """One stage of a ring: the tile, rounded up to the 128-byte alignment of the next."""
    return round_up(tile_bytes, STAGE_ALIGN)


@dataclass(frozen=True)
class Buffer:
    """One allocation a pipeline asks for: a ring of stages or a ring of mbarriers."""

    name: str
    bytes: int
    align: int
    is_barrier: bool = False

    @staticmethod
    def ring(name: str, tile_bytes: int, stages: int, align: int | None = None) -> Buffer:
        """``stages`` stages of a tile, each on ``align`` (128 bytes by default; a wgmma
        stage starts on its swizzle's 1024-byte repeat)."""
        align = align or STAGE_ALIGN
        return Buffer(name, stages * round_up(tile_bytes, align), align)

    @staticmethod
    def barriers(name: str, count: int) -> Buffer:
        return Buffer(name, count * BARRIER_BYTES, BARRIER_ALIGN, True)


@dataclass(frozen=True)
class Request:
    """A pipeline's buffers and its lifetime, ``live = (first, last)`` op positions in
    program order (inclusive)."""

    key: int
    loc: SourceLoc | None
    live: tuple[int, int]
    buffers: tuple[Buffer, ...]
    stages: int = 1

    def overlaps(self, other: Request) -> bool:
        return self.live[0] <= other.live[1] and other.live[0] <= self.live[1]


@dataclass(frozen=True)
class Placement:
    name: str
    offset: int
    bytes: int
    is_barrier: bool


@dataclass(frozen=True)
class PipelinePlacement:
    key: int
    base: int
    bytes: int  # from base to the end of its last buffer
    buffers: tuple[Placement, ...]
    reuses: tuple[int, ...] = ()  # earlier pipelines whose bytes it takes over

    @property
    def end(self) -> int:
        return self.base + self.bytes

    def offset(self, name: str) -> int:
        return next(b.offset for b in self.buffers if b.name == name)


@dataclass(frozen=True)
class SmemPlan:
    pipelines: tuple[PipelinePlacement, ...]
    total_bytes: int
    limit: int

    def of(self, key: int) -> PipelinePlacement:
        return next(p for p in self.pipelines if p.key == key)


def layout_buffers(buffers: Sequence[Buffer], base: int) -> tuple[Placement, ...]:
    """The buffers one after the other from ``base``, each at its alignment."""
    out, at = [], base
    for b in buffers:
        at = round_up(at, b.align)
        out.append(Placement(b.name, at, b.bytes, b.is_barrier))
        at += b.bytes
    return tuple(out)


def footprint(buffers: Sequence[Buffer]) -> int:
    placed = layout_buffers(buffers, 0)
    return max((p.offset + p.bytes for p in placed), default=0)


def plan_shared_memory(requests: Sequence[Request], *, limit: int,
                       target: str = "the target") -> SmemPlan:
    """Offsets for every request's buffers, sharing space between pipelines never live
    together; ``ScheduleError`` at the pipeline that ends highest when the total exceeds
    ``limit``."""
    placed: list[tuple[Request, PipelinePlacement]] = []
    for req in sorted(requests, key=lambda r: (r.live[0], r.key)):
        size = footprint(req.buffers)
        align = max([STAGE_ALIGN, *(b.align for b in req.buffers)])
        busy = sorted((p.base, p.end) for r, p in placed if r.overlaps(req))
        base = 0
        for lo, hi in busy:  # first fit: the lowest gap that holds this pipeline
            if base + size <= lo:
                break
            base = max(base, round_up(hi, align))
        buffers = layout_buffers(req.buffers, base)
        reuses = tuple(sorted(r.key for r, p in placed
                              if p.base < base + size and base < p.end))
        placed.append((req, PipelinePlacement(req.key, base, size, buffers, reuses)))
    total = max((p.end for _, p in placed), default=0)
    if total > limit:
        req, worst = max(placed, key=lambda rp: (rp[1].end, -rp[0].key))
        _too_big(req, worst, placed, total, limit, target)
    return SmemPlan(tuple(p for _, p in sorted(placed, key=lambda rp: rp[0].key)), total, limit)


def _too_big(req: Request, worst: PipelinePlacement,
             placed: list[tuple[Request, PipelinePlacement]], total: int, limit: int,
             target: str) -> None:
    rings = [b for b in req.buffers if not b.is_barrier]
    per_stage = sum(b.bytes for b in rings) // max(req.stages, 1)
    others = [p for r, p in placed if r is not req and r.overlaps(req)]
    hints = [f"this pipeline needs {worst.bytes} bytes ({req.stages} stages of {per_stage} "
             f"bytes{', plus barriers' if len(rings) < len(req.buffers) else ''}) at offset "
             f"{worst.base}" + (f", above {len(others)} pipeline(s) live at the same time"
                                if others else "")]
    fits = 0
    for stages in range(req.stages - 1, 0, -1):
        scaled = [Buffer(b.name, b.bytes // req.stages * stages, b.align, b.is_barrier)
                  for b in req.buffers]
        if worst.base + footprint(scaled) <= limit:
            fits = stages
            break
    if fits:
        hints.append(f"use fewer stages: stages={fits} fits")
    hints.append("use smaller tiles (fewer elements per stage) or fewer streams")
    raise ScheduleError(
        f"pipelines need {total} bytes of shared memory, more than the {limit} bytes "
        f"{target} allows", req.loc, hints)
