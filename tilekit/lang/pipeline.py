"""``tk.pipeline``: a loop over tile streams whose copies the compiler may run ahead.

What a user writes is permissive; what reaches the IR is one canonical ``pipeline`` op
(``tilekit.ir.ops.asynchronous``)::

    for i, a, b in tk.pipeline(A.tiles((BM, BK), row=m), B.tiles((BK, BN), col=n), stages=3):
        acc += tk.dot(a, b)

- ``X.tiles(shape, row=r | col=c | along=axis, at=(...), padding=0)`` (``TensorArg.tiles``)
  makes a ``TileStream``: the tiles of ``shape`` of ``X`` starting at tile ``at`` and
  stepping by one tile along ``axis``; tiles hanging past ``X``'s edge read ``padding``.
- ``tk.pipeline(*streams, stages=, engine=, warp_roles=)`` checks the options, casts every
  stream's first-tile coordinates to one index type, emits the trip count (the shortest
  stream's number of tiles from its first one) as ordinary integer ops, and traces the loop
  body once into the op's region. The body's block arguments are
  ``(i, tile_1, ..., tile_k, carried...)``; values it reassigns are carried exactly as in
  ``tk.range`` (``control._LoopTrace`` is shared).

The op's reference is the plain loop; ``tilekit.sched`` turns it into asynchronous copies,
barriers and stages.
"""

from __future__ import annotations

import difflib
import dis
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from tilekit.errors import SourceLoc, TraceError, user_loc
from tilekit.ir.core import BlockArgument, Operation, Region, Value
from tilekit.ir.dtypes import DType, promote
from tilekit.ir.ops.asynchronous import ENGINES, StreamSpec
from tilekit.ir.types import TileType
from tilekit.lang import semantics, tracer
from tilekit.lang.control import FlowNames, _LoopTrace, user_frame
from tilekit.lang.tensor import Coordinate
from tilekit.lang.tile import Tile

if TYPE_CHECKING:
    from tilekit.lang.tensor import TensorArg

#: ``warp_roles=`` -> the op's ``roles`` attribute (None: the schedule decides).
ROLES: dict[bool | None, str | None] = {None: None, True: "specialized", False: "uniform"}

_OPTIONS = ("stages", "engine", "warp_roles")



@dataclass(frozen=True, eq=False)  # eq=False: comparing Tiles would emit IR
class TileStream:
    """The tiles of ``shape`` of ``tensor``, the first at tile coordinates ``start``, the
    next ones one tile further along ``axis`` each; elements past the tensor's edge read
    ``padding``. Made by ``X.tiles(...)``, which checks every field; consumed by
    ``tk.pipeline``."""

    tensor: TensorArg
    shape: tuple[int, ...]
    axis: int
    start: tuple[Coordinate, ...]  # Python ints stay ints until the pipeline picks a type
    padding: bool | int | float
    loc: SourceLoc | None

    @property
    def spec(self) -> StreamSpec:
        """The stream as the IR records it (the tensor and coordinates are operands)."""
        return StreamSpec(self.shape, self.axis, self.padding)

    @property
    def tile_type(self) -> TileType:
        return TileType(self.shape, self.tensor.dtype)

    def __iter__(self) -> Any:
        raise TraceError(
            "a tile stream is iterated through tk.pipeline", user_loc(),
            hints=[f"for i, x in tk.pipeline({self.tensor.name}.tiles(...)): ..."])

    def __bool__(self) -> bool:
        raise TraceError("a tile stream used as a condition", user_loc())

    def __repr__(self) -> str:
        return (f"<tk.TileStream {self.tensor.name} {'x'.join(map(str, self.shape))} "
                f"along {self.axis}>")


class pipeline:  # noqa: N801  (used like a builtin: `for i, x in tk.pipeline(...)`)
    """``for i, a, ... in tk.pipeline(A.tiles(...), ..., stages=2)``: a device loop over
    tile streams, one tile of each per step, ``stages`` steps' copies in flight.

    ``i`` counts steps from 0; the loop runs as many steps as the shortest stream has tiles
    from its first one. ``engine`` pins the copy engine (``"tma"``, ``"cp_async"``,
    ``"plain"``; None lets the schedule choose); ``warp_roles`` asks for separate producer
    and consumer warps (True), forbids them (False) or leaves it to the schedule (None).
    The body is traced once; tiles it reassigns carry over, as in ``tk.range``.
    """

    def __init__(self, *streams: Any, stages: Any = 2, engine: Any = None,
                 warp_roles: Any = None, **unknown: Any) -> None:
        self.loc = user_loc()
        if unknown:
            name = next(iter(unknown))
            close = difflib.get_close_matches(name, _OPTIONS, n=1)
            raise TraceError(
                f"tk.pipeline got an unknown argument `{name}`", self.loc,
                hints=[f"did you mean `{close[0]}=`?" if close else
                       f"its options are {', '.join(f'`{o}=`' for o in _OPTIONS)}"])
        self.streams = _check_streams(streams, self.loc)
        self.stages = _check_stages(stages, self.loc)
        if engine is not None and engine not in ENGINES:
            raise TraceError(
                f"unknown copy engine {engine!r}", self.loc,
                hints=[f"use one of {', '.join(map(repr, ENGINES))}, or None to let the "
                       "schedule choose"])
        self.engine: str | None = engine
        if isinstance(warp_roles, np.bool_):
            warp_roles = bool(warp_roles)
        if warp_roles is not None and not isinstance(warp_roles, bool):
            raise TraceError(
                f"warp_roles must be True, False or None, got {warp_roles!r}", self.loc,
                hints=["True: producer and consumer warps; False: every warp does both; "
                       "None: the schedule decides"])
        self.roles = ROLES[warp_roles]
        self.flow: FlowNames | None = None  # set by tilekit.lang.flow.loop_enter
        self.promoted: dict[str, Any] = {}
        self.last_trace: _PipelineTrace | None = None

    def __iter__(self) -> _PipelineTrace:
        frame = user_frame()
        _check_targets(frame, len(self.streams), self.loc)
        dtype = _index_type(self.streams)
        # Everything the op reads is fixed here, before the body rebinds tiles to block args.
        starts = [[semantics.cast(c, dtype) for c in s.start] for s in self.streams]
        count = _trip_count(self.streams, starts, dtype)
        index = [c.value for cs in starts for c in cs]
        attrs = {"streams": tuple(s.spec for s in self.streams), "stages": self.stages,
                 "engine": self.engine, "roles": self.roles}
        trace = _PipelineTrace(frame, self.loc, count.value, self.streams, index, attrs,
                               self.flow)
        trace.promoted = self.promoted
        self.last_trace = trace
        return trace


class _PipelineTrace(_LoopTrace):
    """The body of a ``tk.pipeline``: block arguments ``(i, tile_1..tile_k, carried...)``."""

    construct = "`tk.pipeline` loop"
    kind = tracer.ScopeKind.PIPELINE

    def __init__(self, frame: FrameType, loc: SourceLoc | None, count: Value,
                 streams: Sequence[TileStream], index: list[Value],
                 attrs: dict[str, Any], flow: FlowNames | None = None) -> None:
        super().__init__(frame, loc, flow)
        self.count = count
        self.streams = tuple(streams)
        self.index = index
        self.attrs = attrs

    def _header_args(self) -> list[BlockArgument]:
        return [self.block.add_arg(self.count.type),
                *(self.block.add_arg(s.tile_type) for s in self.streams)]

    def _targets(self, leading: list[Tile]) -> tuple[Tile, ...]:
        return tuple(leading)

    def _build(self, inits: list[Value], region: Region) -> Operation:
        return self.state.builder.create(
            "pipeline", {"count": self.count, "tensors": [s.tensor.value for s in self.streams],
                         "index": self.index, "inits": inits},
            self.attrs, regions=[region], loc=self.loc, insert=False)


# --- checks ----------------------------------------------------------------------------------

def _check_streams(streams: tuple[Any, ...], loc: SourceLoc | None) -> tuple[TileStream, ...]:
    example = "tk.pipeline(X.tiles((1, BLOCK), row=r))"
    if not streams:
        raise TraceError("tk.pipeline needs at least one tile stream", loc,
                         hints=[f"e.g. {example}"])
    if len(streams) == 1 and isinstance(streams[0], (list, tuple)):
        raise TraceError("tk.pipeline takes its streams as separate arguments, not a "
                         f"{type(streams[0]).__name__}", loc,
                         hints=["write tk.pipeline(*streams) or tk.pipeline(A.tiles(...), "
                                "B.tiles(...))"])
    for k, s in enumerate(streams):
        if isinstance(s, TileStream):
            continue
        from tilekit.lang.tensor import TensorArg, TileView

        what = f"argument {k + 1} of tk.pipeline"
        if isinstance(s, TileView):
            raise TraceError(
                f"{what} is one tile, `{s.tensor.name}.tile(...)`, not a stream of tiles", loc,
                hints=[f"a stream is `{s.tensor.name}.tiles(shape, row=r)` (or col=c, or "
                       "along=axis, at=(...))"])
        if isinstance(s, TensorArg):
            raise TraceError(f"{what} is the tensor `{s.name}`, not a stream of its tiles",
                             loc, hints=[f"write `{s.name}.tiles(shape, row=r)` (or col=c, or "
                                         "along=axis, at=(...))"])
        got = f"a {s.type}" if isinstance(s, Tile) else repr(s)
        raise TraceError(f"{what} must be a tile stream `X.tiles(...)`, got {got}", loc,
                         hints=[f"e.g. {example}"])
    return tuple(streams)


def _check_stages(stages: Any, loc: SourceLoc | None) -> int:
    if isinstance(stages, Tile):
        raise TraceError(
            f"stages must be known when compiling, but it is a runtime {stages.type}", loc,
            hints=["pass it as a tk.constexpr parameter, or write a number"])
    if isinstance(stages, np.integer):
        stages = int(stages)
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise TraceError(f"stages must be a positive int, got {stages!r}", loc,
                         hints=["stages is how many tiles of each stream may be in flight; "
                                "1 means no overlap, 2 to 4 is usual"])
    return stages


def _check_targets(frame: FrameType, k: int, loc: SourceLoc | None) -> None:
    """When ``tk.pipeline`` is iterated by a ``for`` statement, it must unpack ``1 + k``
    values. Read from the bytecode after the frame's current ``GET_ITER``; other uses
    (``iter()``, comprehensions, starred targets) are not checked."""
    code = frame.f_code
    try:
        ins = list(dis.get_instructions(code))
    except Exception:  # pragma: no cover - odd code objects: skip the check
        return
    at = next((n for n, x in enumerate(ins) if x.offset == frame.f_lasti), None)
    if at is None or ins[at].opname != "GET_ITER" or at + 2 >= len(ins) \
            or ins[at + 1].opname != "FOR_ITER":
        return
    target = ins[at + 2]
    if target.opname == "UNPACK_SEQUENCE":
        n = target.arg
    elif target.opname.startswith("STORE_"):
        n = 1
    else:
        return
    if n == k + 1:
        return
    names = ", ".join(["i", *(f"t{j + 1}" for j in range(k))]) if k > 1 else "i, x"
    there = _instruction_loc(code, target) or loc
    per = "the step index and one tile per stream" if k > 1 else "the step index and the tile"
    got = "one name" if n == 1 else f"{n} names"
    raise TraceError(
        f"tk.pipeline over {k} stream{'s' if k > 1 else ''} gives {k + 1} values per step "
        f"({per}), but the loop binds {got}", there,
        hints=[f"write `for {names} in tk.pipeline(...)`"])


def _instruction_loc(code: Any, ins: dis.Instruction) -> SourceLoc | None:
    pos = getattr(ins, "positions", None)
    if pos is None or pos.lineno is None:
        return None
    return SourceLoc(code.co_filename, pos.lineno, pos.col_offset, pos.end_col_offset,
                     pos.end_lineno)


# --- the trip count --------------------------------------------------------------------------

def _index_type(streams: Sequence[TileStream]) -> DType:
    """One integer type for every coordinate and the trip count: int32, or wider when a
    tensor's indices or a coordinate need it."""
    dtype = DType.INT32
    for s in streams:
        dtype = promote(dtype, s.tensor.value.tensor_type.index)
        for c in s.start:
            if isinstance(c, Tile):
                dtype = promote(dtype, c.dtype)
            elif not -(2**31) <= c < 2**31:
                dtype = promote(dtype, DType.INT64)
    return dtype


def _trip_count(streams: Sequence[TileStream], starts: list[list[Tile]], dtype: DType) -> Tile:
    """min over streams of max(0, cdiv(size along the axis, tile extent) - first tile)."""
    state = tracer.current()
    count: Tile | None = None
    for s, start in zip(streams, starts):
        extent = s.shape[s.axis]
        size = semantics.cast(Tile(state.tensor_scalar(s.tensor.value, "dim", s.axis)), dtype)
        # (size - 1) // extent + 1 is cdiv for size >= 0 (floor division gives 0 tiles for
        # size 0) and cannot overflow, unlike (size + extent - 1) // extent.
        n = size if extent == 1 else (size - 1) // extent + 1
        first = s.start[s.axis]
        if not (isinstance(first, int) and first == 0):
            n = semantics.binary("maximum", n - start[s.axis], 0)
        count = n if count is None else semantics.binary("minimum", count, n)
    assert count is not None
    return count
