"""What the schedule solver decided for each pipeline, as data.

A ``ScheduleReport`` per pipeline: the user's line, the stage count, per stream the engine
and why faster engines were refused, the warp roles, and the pipeline's part of the
shared-memory plan. ``schedule_pipelines`` attaches them to the scheduled function
(``fn.schedule_reports``); ``TILEKIT_DUMP=sched`` prints them (``tilekit.sched.dump``);
tests and later tools read them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilekit.errors import SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.sched.engines import Engine, EngineDecision, Rejection
from tilekit.sched.smem_plan import Placement

if TYPE_CHECKING:
    from tilekit.layout.mma_sync import StagedOperand


class RoleMode(enum.Enum):
    """How a pipeline's warps share the work."""

    UNIFORM = "uniform"  # every warp issues copies and consumes stages
    SPECIALIZED = "specialized"  # a producer warp and consumer warps (``warp_roles``)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RolePlan:
    mode: RoleMode
    requested: str | None
    note: str
    producer_warps: int = 0
    consumer_warps: int = 0
    # setmaxnreg's counts (None: no register rebalancing, the producer warps unpadded)
    producer_regs: int | None = 0
    consumer_regs: int | None = 0


@dataclass(frozen=True)
class StreamReport:
    """One stream: ``tensor[index]`` tiles of ``shape`` stepping along ``axis``."""

    index: int
    tensor: str
    shape: tuple[int, ...]
    dtype: DType
    axis: int
    padding: object
    decision: EngineDecision
    tile_bytes: int
    guarded: bool  # edge tiles may cross the tensor's edge (no divisibility fact)
    # The stage is laid out for a tk.dot's ldmatrix and read in place (``mma_sync.stage_read``)
    feeds: StagedOperand | None = None
    # Why a stream whose tiles only a dot reads is not read in place ("" otherwise)
    feed_note: str = ""

    @property
    def engine(self) -> Engine:
        return self.decision.engine

    @property
    def tma_rejections(self) -> tuple[Rejection, ...]:
        return self.decision.rejected(Engine.TMA)

    @property
    def tma_rules(self) -> tuple[str, ...]:
        """The names of the rules that kept this stream off TMA (empty when it uses TMA)."""
        return tuple(r.rule.name for r in self.tma_rejections)


@dataclass(frozen=True)
class ScheduleReport:
    pipeline: int
    function: str
    loc: SourceLoc | None
    stages: int
    streams: tuple[StreamReport, ...]
    roles: RolePlan
    arrivals: int  # arrivals per phase of the `full` barriers
    base: int  # the pipeline's first byte of shared memory
    bytes: int  # its footprint from base
    allocations: tuple[Placement, ...]
    reuses: tuple[int, ...]  # earlier pipelines whose shared memory this one takes over
    total_bytes: int  # every pipeline of the function (with reuse)
    limit: int
    target: str

    @property
    def engines(self) -> tuple[Engine, ...]:
        return tuple(s.engine for s in self.streams)
