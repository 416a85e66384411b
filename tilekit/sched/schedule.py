"""The schedule solver: every ``pipeline`` op becomes rings, mbarriers and copies.

``schedule_pipelines`` replaces each ``pipeline`` (what ``tk.pipeline`` traces) by the
scheduled form of ``docs/pipelines.md``: a ``trip_count``, one ring of shared-memory stages
per stream, ``full``/``empty`` mbarrier rings, the barrier-initialization fence when a
stream uses TMA, a CTA barrier, the unrolled prologue that fills ``stages - 1`` stages, the
steady-state loop (wait ``full``, read the stages, release them on ``empty``, then the
user's body with its block arguments replaced), a final CTA barrier and the barriers'
invalidation. Slots and parities are ordinary integer ops on the loop index. A pipeline with
TMA streams whose shared memory an earlier pipeline used starts with ``fence_proxy_async``
(the earlier generic-proxy writes of those bytes, then TMA's async-proxy writes). With warp
roles the producer loop runs in ``warp_roles``' region 0 and the consumer loop in region 1.

What is preserved: the values the body computes, for every trip count (the interpreter runs
the scheduled IR through ``tilekit.ir.async_protocol``, which checks every rule of the
protocol; ``tilekit.sched.protocol`` checks it without data). Every generated op carries the
pipeline's source location, so an error about it names the user's line.

Stages read by ``tk.dot``. A stream whose tiles only ``tk.dot``s read, as the same operand,
on mma.sync, gets a stage laid out for the dot's ``ldmatrix``: the layout library
(``tilekit.layout.mma_sync.stage_read``) gives a ``ChunkSwizzle``, which becomes the ring's
``layout`` and which cp.async writes chunk by chunk; the layout pass then turns the stage's
``smem_read`` into the dot's ``ldmatrix``es, so the operand never goes through registers
into shared memory again. The consumer's release after its reads is unchanged (ldmatrix
results are in registers once it returns), so the copy of stage ``i + S - 1`` overlaps the
mma of stage ``i``. TMA would need its swizzle modes matched to the chunk swizzle, which is
not wired yet: a TMA stream chosen automatically becomes cp.async (the report's
``SWIZZLED_STAGE`` rejection says so). A stream that would take plain copies because the
bucket proves no cp.async chunk (rows not 16-byte aligned: its facts know 16 bytes or the
element size) becomes cp.async checked at run time (``engines.checked_cp_async``: 8- or
4-byte chunks when the base and row strides allow, else element copies, all into the
swizzle). A forced TMA or forced plain stream, or one with a nonzero padding, keeps
row-major stages, and the dot stages its operand as before (``StreamReport.feed_note``).

Warp roles. ``roles="specialized"`` needs ``setmaxnreg`` (sm_90a). On other targets the
pipeline falls back to the uniform schedule and the report (``TILEKIT_DUMP=sched``) says so
(a kernel written for Hopper must still run on Ampere and on targets compiled as sm_80).
``roles=None`` is the uniform schedule for now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from tilekit.codegen.target import Target, get_target
from tilekit.errors import ScheduleError, SourceLoc
from tilekit.ir.builder import Builder
from tilekit.ir.core import Block, Function, Module, Operation, Region, Value, clone_module
from tilekit.ir.dtypes import DType
from tilekit.ir.ops.asynchronous import StreamSpec, stream_indices
from tilekit.ir.passes import should_dump, written_args
from tilekit.ir.verifier import verify
from tilekit.layout.wgmma_plan import STAGE_ALIGN as WGMMA_STAGE_ALIGN
from tilekit.layout.wgmma_plan import WgmmaStage
from tilekit.sched.engines import (
    Engine,
    EngineDecision,
    EngineRule,
    Rejection,
    TensorFacts,
    admissible,
    checked_cp_async,
    choose_engine,
    target_arch,
    tile_bytes,
)
from tilekit.sched.report import RoleMode, RolePlan, ScheduleReport, StreamReport
from tilekit.sched.smem_plan import Buffer, Request, SmemPlan, plan_shared_memory

PRODUCER_WARPS = 1
PRODUCER_REGS = 40
CONSUMER_REGS = 232

#: The facts ``tilekit.lang.kernel`` attaches to a traced function; carried to the clone.
FACT_ATTRS = ("aligned16", "unit_inner", "strides16")

#: Bulk stores from stages stay in flight one step (``_Pipeline.store_lag``) from this
#: many stages on.
STORE_LAG_MIN_STAGES = 3

SizeFact = tuple[str, int, int]


# --- what is decided before any IR is written ------------------------------------------------

@dataclass
class _Pipeline:
    """One pipeline op and everything decided about it."""

    op: Operation
    key: int
    live: tuple[int, int]
    stages: int
    streams: tuple[StreamReport, ...]
    roles: RolePlan
    # Streams whose tiles the body only stores, unchanged, into a box a TMA store can write:
    # those stores become bulk stores straight from the stage (no registers, no reads).
    through: frozenset[int] = frozenset()
    # The carried values that are the accumulator of a wgmma dot left in flight at the end
    # of each step (``wgmma_pending`` 1): each stage is then released one step later, and
    # the loop drains the last group at its exit (``wgmma_drain``). Empty: no lag.
    lagged: tuple[int, ...] = ()
    # Stored-through streams whose bulk stores stay in flight for one step: each step
    # waits only for the previous step's stores to have read their stage
    # (``store_wait`` pending 1) and releases that stage; the loop drains at its exit.
    store_lag: bool = False

    @property
    def lag(self) -> int:
        return 1 if self.lagged or self.store_lag else 0

    @property
    def late_release(self) -> bool:
        """A stage wgmma reads is released after the body: the dot's reads of shared
        memory are asynchronous and end only at its ``wgmma.wait_group``."""
        return any(isinstance(s.feeds, WgmmaStage) for s in self.streams)

    @property
    def loc(self) -> SourceLoc | None:
        return self.op.loc

    @property
    def tma_bytes(self) -> int:
        return sum(s.tile_bytes for s in self.streams if s.engine is Engine.TMA)

    @property
    def any_other(self) -> bool:
        return any(s.engine is not Engine.TMA for s in self.streams)

    @property
    def arrivals(self) -> int:
        return int(self.tma_bytes > 0) + int(self.any_other)

    def ring_name(self, k: int) -> str:
        return f"p{self.key}.{self.streams[k].tensor}.{k}"

    def bar_name(self, which: str) -> str:
        return f"p{self.key}.{which}"

    def buffers(self) -> tuple[Buffer, ...]:
        rings = [Buffer.ring(self.ring_name(k), s.tile_bytes, self.stages,
                             WGMMA_STAGE_ALIGN if isinstance(s.feeds, WgmmaStage) else None)
                 for k, s in enumerate(self.streams)]
        return (*rings, Buffer.barriers(self.bar_name("full"), self.stages),
                Buffer.barriers(self.bar_name("empty"), self.stages))


def _facts(fn: Function, value: Value) -> TensorFacts:
    name = value.name_hint or "<tensor>"
    have = {f: name in frozenset(getattr(fn, f, frozenset())) for f in FACT_ATTRS}
    return TensorFacts(name, value.tensor_type.dtype, have["aligned16"], have["unit_inner"],
                       have["strides16"], value.tensor_type.index)


def _roles(op: Operation, tgt: Target, num_warps: int) -> RolePlan:
    requested = op.attrs.get("roles")
    if requested not in (None, "uniform", "specialized"):
        raise ScheduleError(f"unknown warp roles {requested!r}", op.loc,
                            ["use warp_roles=True (specialized), False (uniform) or None"])
    if requested is None:
        return RolePlan(RoleMode.UNIFORM, None,
                        "no warp roles requested: every warp issues copies and consumes "
                        "stages (uniform schedule)")
    if requested == "uniform":
        return RolePlan(RoleMode.UNIFORM, requested, "")
    arch = target_arch(tgt.name)
    if not (arch is not None and arch >= 90 and tgt.name.endswith("a")):
        return RolePlan(RoleMode.UNIFORM, requested,
                        f"warp specialization needs sm_90a (setmaxnreg); {tgt.name} runs the "
                        "uniform schedule instead")
    warps = PRODUCER_WARPS + num_warps
    if warps * tgt.warp_size > tgt.max_threads:
        raise ScheduleError(
            f"warp roles need {warps} warps ({PRODUCER_WARPS} producer + {num_warps} "
            f"consumer), more than the {tgt.max_threads // tgt.warp_size} a block may have",
            op.loc, [f"use num_warps <= {tgt.max_threads // tgt.warp_size - PRODUCER_WARPS}"])
    for inner in op.walk():
        if inner is not op and inner.name == "pipeline":
            raise ScheduleError(
                "a pipeline inside the body of a warp-specialized pipeline is not supported "
                "(its CTA barriers would run in one role only)", inner.loc,
                ["use warp_roles=False on the outer pipeline"])
    if not any(inner.name == "dot" for inner in op.walk()):
        # Nothing in the consumer needs more registers than an even split gives, so no
        # setmaxnreg: it would pad the producer to a warpgroup whose three idle warps hold
        # registers as well (nvJitLink drops setmaxnreg, so every warp keeps the kernel's
        # count): 8 warps where 5 do, 5 blocks of an 8 x 256 row sum per SM where 10 fit.
        return RolePlan(RoleMode.SPECIALIZED, requested,
                        "no setmaxnreg: the body has no dot, so the consumer warps need no "
                        "more registers than the producer (no padding warps)",
                        PRODUCER_WARPS, num_warps, None, None)
    return RolePlan(RoleMode.SPECIALIZED, requested, "", PRODUCER_WARPS, num_warps,
                    PRODUCER_REGS, CONSUMER_REGS)


def _forced(op: Operation) -> Engine | None:
    engine = op.attrs.get("engine")
    return None if engine is None else Engine(engine)


def _not_admissible(op: Operation, stream: StreamReport, facts: TensorFacts,
                    target: str) -> ScheduleError:
    d = stream.decision
    reasons = d.rejected(d.engine)
    what = f"stream {stream.index} (`{stream.tensor}`, {'x'.join(map(str, stream.shape))} tiles)"
    fallback = choose_engine(facts, stream.shape, stream.padding, target).engine
    hints = [str(r) for r in reasons]
    hints.append(f"drop engine={d.engine.value!r} to let tilekit choose ({fallback} here), or "
                 "pass tensors that meet these rules (a 16-byte aligned base, unit inner stride "
                 "and row strides that are multiples of 16 bytes admit TMA and cp.async)")
    return ScheduleError(
        f"engine {d.engine.value!r} is not admissible for {what} on {target}: "
        + "; ".join(f"{r.rule.name}: {r.message}" for r in reasons), op.loc, hints)


def _decide(fn: Function, op: Operation, key: int, live: tuple[int, int], tgt: Target,
            num_warps: int, divisible: frozenset[SizeFact]) -> _Pipeline:
    specs: tuple[StreamSpec, ...] = op.attrs["streams"]
    forced = _forced(op)
    reports, facts_of = [], []
    for k, (spec, tensor) in enumerate(zip(specs, op.variadic("tensors"))):
        facts = _facts(fn, tensor)
        decision: EngineDecision = choose_engine(facts, spec.shape, spec.padding, tgt.name,
                                                 forced)
        guarded = not all((facts.name, d, n) in divisible
                          for d, n in enumerate(spec.shape) if n > 1)
        report = StreamReport(k, facts.name, spec.shape, facts.dtype, spec.axis, spec.padding,
                              decision, tile_bytes(spec.shape, facts.dtype), guarded)
        if not admissible(decision):
            raise _not_admissible(op, report, facts, tgt.name)
        reports.append(report)
        facts_of.append(facts)
    roles = _roles(op, tgt, num_warps)
    consumer_warps = roles.consumer_warps if roles.mode is RoleMode.SPECIALIZED else num_warps
    wgmma = _wgmma_feeds(op, reports, facts_of, tgt, consumer_warps,
                         frozenset(written_args(fn)))
    streams = [wgmma.get(k) or _dot_feed(op, r, f, tgt, num_warps)
               for k, (r, f) in enumerate(zip(reports, facts_of))]
    lagged = _lagged(op, streams) if op.attrs["stages"] >= 2 else ()
    through = _stored_through(fn, op, streams, tgt)
    # with three stages or more, a step's bulk stores overlap the next step (with two,
    # the copies would then run no step ahead)
    store_lag = bool(through) and op.attrs["stages"] >= STORE_LAG_MIN_STAGES
    return _Pipeline(op, key, live, op.attrs["stages"], tuple(streams), roles, through,
                     lagged, store_lag)


def _lagged(op: Operation, streams: list[StreamReport]) -> tuple[int, ...]:
    """The carried values (indices) whose wgmma dots may stay in flight across a step: a
    dot at the body's top level that reads wgmma stages, whose result the body only
    yields (as carried value k) and whose accumulator is carried value k itself, read by
    nothing else. Those dots are marked ``wgmma_pending = 1``: each waits for the previous
    step's group only, so the tensor cores are never idle between steps. The stage a
    group reads is released once the next step's wait returned."""
    if not any(isinstance(s.feeds, WgmmaStage) for s in streams):
        return ()
    body = op.regions[0].block
    term = body.terminator
    carried = body.args[1 + len(streams):]
    args = body.args[1:1 + len(streams)]
    out = []
    for dot in body.ops:
        if dot.name != "dot" or not any(dot.operand(s) is a for s in ("a", "b") for a in args):
            continue
        k = next((k for k, v in enumerate(term.operands) if v is dot.result), None)
        if k is None or k >= len(carried) or dot.operand("acc") is not carried[k]:
            return ()
        if [o for o in op.walk() if o is not term and any(v is dot.result for v in o.operands)]:
            return ()
        if [o for o in op.walk() if o is not dot and any(v is carried[k] for v in o.operands)]:
            return ()
        if sum(v is dot.result for v in term.operands) != 1:
            return ()
        out.append((k, dot))
    if len(out) != 1:
        return ()
    k, dot = out[0]
    dot.attrs["wgmma_pending"] = 1
    return (k,)


def _repackable(stream: StreamReport, facts: TensorFacts, written: frozenset[str]) -> bool:
    """Whether a stream refused TMA may read a repacked copy instead: chosen
    automatically, zero padding, a unit inner stride (the copy moves whole rows) and a
    tensor the kernel only reads (a copy would hide its writes)."""
    return (not stream.decision.forced and stream.padding == 0 and facts.unit_inner
            and facts.name not in written)


def _repacked_feed(stream: StreamReport, facts: TensorFacts, stage: WgmmaStage,
                   arch: int) -> StreamReport | None:
    """``stream`` fed by TMA from a copy of its tensor the runtime makes at each launch,
    when ``tma_alternatives`` offers one for the wgmma stage's exact box and swizzle (its
    REPACK plan: rows padded to 16 bytes); None otherwise.

    wgmma reads its stages only as TMA's swizzled boxes, so among the alternatives the
    layout library ranks for the refused request, only plans that keep that box can feed
    it; the other ones (cp.async, plain copies) feed mma.sync instead, at under half the
    tensor cores' rate. The copy costs one read and one write of the tensor per launch and
    pays once several programs read each tile (a matmul's ``a`` is read by every column of
    blocks): bench/matmul.py's misaligned-K rows measure it."""
    from dataclasses import replace

    from tilekit.layout.admissibility import AlternativeKind
    from tilekit.layout.tma import TmaPlan, TmaRequest, tma_alternatives

    request = TmaRequest(facts.witness(stage.box), stage.box, swizzle=stage.swizzle)
    for alt in tma_alternatives(request, arch=arch):
        plan = alt.params
        if alt.kind is not AlternativeKind.REPACK or not isinstance(plan, TmaPlan):
            continue
        if plan.copies_per_tile != 1 or plan.request.box != stage.box or \
                plan.request.swizzle != stage.swizzle:
            continue
        refused = stream.decision.rejected(Engine.TMA)
        decision = EngineDecision(Engine.TMA, False, tma=plan.descriptor, rejections=refused,
                                  witness=plan.request.tensor, repack=True,
                                  repack_note=alt.explanation)
        return replace(stream, feeds=stage, decision=decision)
    return None


def _wgmma_feeds(op: Operation, streams: list[StreamReport], facts: list[TensorFacts],
                 tgt: Target, num_warps: int,
                 written: frozenset[str] = frozenset()) -> dict[int, StreamReport]:
    """The streams whose stages wgmma reads through descriptors (sm_90a): for each dot
    whose ``a`` and ``b`` are the tiles of two TMA streams that nothing else reads, and
    that fits wgmma (``wgmma_plan.wgmma_misfit``), both streams' TMA boxes become the
    plan's swizzled boxes (``wgmma_plan.wgmma_stage``), asked again of the layout library
    on the bucket's weakest tensor. A stream refused TMA by its tensor's strides or base
    reads a repacked copy instead where the layout library offers one
    (``_repacked_feed``). Anything short of that leaves the streams to ``_dot_feed``
    (mma.sync)."""
    from dataclasses import replace

    from tilekit import knobs
    from tilekit.errors import LayoutError
    from tilekit.layout import tma
    from tilekit.layout.wgmma_plan import plan_wgmma, wgmma_misfit

    arch = target_arch(tgt.name)
    if arch != 90 or not tgt.name.endswith("a") or not knobs.WGMMA.get():
        return {}
    args = op.regions[0].block.args[1:1 + len(streams)]
    out: dict[int, StreamReport] = {}
    for dot in (o for o in op.walk() if o.name == "dot"):
        ks = [next((k for k, a in enumerate(args) if a is dot.operand(slot)), None)
              for slot in ("a", "b")]
        if None in ks or ks[0] == ks[1] or any(k in out for k in ks):
            continue
        if any(_dot_uses(op, k) != [(dot, slot)] for k, slot in zip(ks, ("a", "b"))):
            continue
        if any(streams[k].engine is not Engine.TMA
               and not _repackable(streams[k], facts[k], written) for k in ks):
            continue
        a, acc = dot.operand("a").type, dot.operand("acc").type
        (m, kk), n = a.shape, acc.shape[1]
        if wgmma_misfit(m, n, kk, a.dtype, acc.dtype, num_warps, arch) is not None:
            continue
        try:
            plan = plan_wgmma(m, n, kk, a.dtype, num_warps)
        except LayoutError:
            continue
        found = {}
        for k, stage in zip(ks, (plan.a, plan.b)):
            if streams[k].engine is not Engine.TMA:
                fed = _repacked_feed(streams[k], facts[k], stage, arch)
                if fed is None:
                    break
                found[k] = fed
                continue
            witness = facts[k].witness(stage.box)
            verdict = tma.tma_admissibility(
                tma.TmaRequest(witness, stage.box, swizzle=stage.swizzle), arch=arch)
            if verdict.params is None:
                break
            found[k] = replace(streams[k], feeds=stage,
                               decision=replace(streams[k].decision, tma=verdict.params))
        if len(found) == 2:
            out.update(found)
    return out


def _dot_uses(op: Operation, k: int) -> list[tuple[Operation, str]]:
    """Every use of stream ``k``'s tile in the body, as (op, operand slot)."""
    arg = op.regions[0].block.args[1 + k]
    return [(o, slot) for o in op.walk() if o is not op
            for slot, v in zip(o.slots, o.operands) if v is arg]


def _dot_feed(op: Operation, stream: StreamReport, facts: TensorFacts, tgt: Target,
              num_warps: int) -> StreamReport:
    """``stream``, with its stage laid out for ``ldmatrix`` (``feeds``) when its tile is
    read only as the same operand of ``tk.dot``s that run on mma.sync: the layout library
    (``mma_sync.stage_read``) gives the stage's swizzle, the copy writes it, and the dot
    reads its fragments straight from the stage. cp.async writes the swizzle chunk by
    chunk (8- or 4-byte chunks land inside the swizzled 16-byte ones); a TMA stream chosen
    automatically becomes cp.async (``SWIZZLED_STAGE``), and so does one that would take
    plain copies because the bucket proves no chunk, with the chunk checked at run time
    (``checked_cp_async``; rows of 8092 bf16 are 8-byte aligned). Any other stream is
    returned as it is, with ``feed_note`` saying why when only dots read it."""
    from dataclasses import replace

    from tilekit.errors import LayoutError
    from tilekit.layout import banks
    from tilekit.layout.mma_sync import mma_layouts, mma_sync_misfit, stage_read

    uses = _dot_uses(op, stream.index)
    if not uses or any(o.name != "dot" or slot not in ("a", "b") for o, slot in uses):
        return stream
    slots = {slot for _, slot in uses}
    if len(slots) > 1:
        return replace(stream, feed_note="the tile is both operands of dots")
    which = 1 if slots == {"a"} else 2
    bank_target = banks.target(tgt.bank_target)
    fragments = set()
    for dot, _ in uses:
        a, acc = dot.operand("a").type, dot.operand("acc").type
        (m, kk), n = a.shape, acc.shape[1]
        misfit = mma_sync_misfit(m, n, kk, a.dtype, acc.dtype, num_warps, tgt.warp_size,
                                 bank_target)
        if misfit is not None:
            return replace(stream, feed_note=f"the dot runs on FMA units ({misfit})")
        fragments.add(mma_layouts(m, n, kk, num_warps)[which])
    if len(fragments) > 1:
        return replace(stream, feed_note="dots read the tile in different fragment layouts")
    staged_fragment = fragments.pop()
    try:
        staged = stage_read(staged_fragment, bank_target)
    except LayoutError as e:
        return replace(stream, feed_note=f"no ldmatrix read of the stage fits ({e})")
    decision = stream.decision
    if decision.engine is Engine.TMA and not decision.forced:
        cp = choose_engine(facts, stream.shape, stream.padding, tgt.name, Engine.CP_ASYNC)
        if not admissible(cp):
            return replace(stream, feed_note="TMA writes stages row-major here and cp.async "
                                             "is not admissible")
        why = Rejection(Engine.TMA, EngineRule.SWIZZLED_STAGE, EngineRule.SWIZZLED_STAGE.value)
        decision = replace(cp, forced=False, rejections=(*cp.rejections, why))
    elif decision.engine is Engine.PLAIN and not decision.forced:
        checked = checked_cp_async(facts, stream.shape, stream.padding, tgt.name)
        if checked is None:
            return replace(stream, feed_note="plain copies write the stage row-major; the "
                                             "dot stages the tile through registers")
        # the faster engines' reasons stay, asked of the bucket's weakest tensor as before
        decision = replace(checked, witness=decision.witness, rejections=tuple(
            r for r in decision.rejections if r.engine is not Engine.CP_ASYNC))
    elif decision.engine is not Engine.CP_ASYNC:
        how = "forced TMA" if decision.engine is Engine.TMA else "forced plain copies"
        return replace(stream, feed_note=f"{how} write the stage row-major; the dot stages "
                                         "the tile through registers")
    if decision.vector_bytes != 16:
        staged = stage_read(staged_fragment, bank_target, decision.vector_bytes)
    return replace(stream, decision=decision, feeds=staged)


def _stored_through(fn: Function, op: Operation, streams: list[StreamReport],
                    tgt: Target) -> frozenset[int]:
    """The TMA streams whose tile is used only by ``tile_store``s of the whole tile in the
    body's own block, into tensors whose box TMA admits (the layout library, on the bucket's
    weakest tensor): each such store becomes a bulk store from the stage."""
    body = op.regions[0].block
    out = set()
    for k, stream in enumerate(streams):
        if stream.engine is not Engine.TMA:
            continue
        arg = body.args[1 + k]
        users = [o for o in op.walk() if any(v is arg for v in o.operands)]
        ok = bool(users)
        for user in users:
            if not (user.name == "tile_store" and user.parent is body
                    and user.operand("value") is arg
                    and tuple(user.attrs["shape"]) == tuple(stream.shape)):
                ok = False
                break
            facts = _facts(fn, user.operand("tensor"))
            decision = choose_engine(facts, stream.shape, 0, tgt.name, Engine.TMA)
            if not admissible(decision):
                ok = False
                break
        if ok:
            out.add(k)
    return frozenset(out)


def _collect(fn: Function, tgt: Target, num_warps: int,
             divisible: frozenset[SizeFact]) -> list[_Pipeline]:
    """Every pipeline of ``fn`` in program order, with its lifetime (the positions of its
    op and of the last op nested in it)."""
    order = list(fn.walk())
    position = {id(op): i for i, op in enumerate(order)}
    found = []
    for op in order:
        if op.name != "pipeline":
            continue
        last = position[id(op)] + sum(1 for _ in op.walk()) - 1
        found.append(_decide(fn, op, len(found), (position[id(op)], last), tgt, num_warps,
                             divisible))
    return found


# --- writing the IR ---------------------------------------------------------------------------

class _Emitter:
    """Creates ops at an insertion point, every one at the pipeline's source line."""

    def __init__(self, block: Block, loc: SourceLoc | None, index: DType) -> None:
        self.b = Builder(block)
        self.loc = loc
        self.index = index  # the trip count's integer type
        self.consts: dict[tuple[int, DType], Value] = {}  # made once, before the schedule

    def hoist(self, *values: int) -> None:
        """Make these index constants at the insertion point, for every later use (the
        point must dominate the schedule: the start of it)."""
        for v in values:
            if (v, self.index) not in self.consts:
                self.consts[(v, self.index)] = self.const(v)

    def op(self, name: str, operands: dict | None = None, attrs: dict | None = None,
           regions: Sequence[Region] = ()) -> Operation:
        return self.b.create(name, operands, attrs, regions, loc=self.loc)

    def const(self, value: int | bool, dtype: DType | None = None) -> Value:
        hoisted = self.consts.get((value, dtype or self.index))
        if hoisted is not None and type(value) is int:
            return hoisted
        return self.op("constant", attrs={"value": value, "dtype": dtype or self.index,
                                          "shape": ()}).result

    def binary(self, name: str, a: Value, b: Value | int) -> Value:
        if isinstance(b, int):
            b = self.const(b, a.tile_type.dtype)
        return self.op(name, {"lhs": a, "rhs": b}).result

    def cast(self, v: Value, dtype: DType) -> Value:
        if v.tile_type.dtype is dtype:
            return v
        return self.op("cast", {"x": v}, {"dtype": dtype}).result

    def when(self, cond: Value, body: Callable[[], None]) -> None:
        block = Block()
        with self.b.at_end_of(block):
            body()
            self.op("yield")
        self.op("when", {"cond": cond}, regions=[Region([block])])

    def loop(self, lo: Value, hi: Value, inits: Sequence[Value],
             body: Callable[[Value, list[Value]], list[Value]]) -> Operation:
        block = Block([lo.type, *(v.type for v in inits)])
        with self.b.at_end_of(block):
            yields = body(block.args[0], list(block.args[1:]))
            self.op("yield", {"values": yields})
        return self.op("for", {"lo": lo, "hi": hi, "step": self.const(1), "inits": list(inits)},
                       regions=[Region([block])])


@dataclass
class _Rings:
    """The scheduled pipeline's shared state: its rings and barrier rings."""

    bufs: list[Value]
    full: Value
    empty: Value


def _slot_lap(e: _Emitter, j: Value, stages: int) -> tuple[Value, Value]:
    """``(j % S, (j / S) & 1)`` for a step ``j >= 0``: the stage and the parity of its lap.
    With a power-of-two ``S``, a mask and a shift (equal for every ``j >= 0``; a signed
    ``mod``/``floordiv`` costs a sign correction each, in every step of the loop)."""
    if stages & (stages - 1) == 0:
        slot = e.binary("and", j, stages - 1)
        lap = e.binary("shr", j, stages.bit_length() - 1) if stages > 1 else j
        return slot, e.binary("and", lap, 1)
    return e.binary("mod", j, stages), e.binary("and", e.binary("floordiv", j, stages), 1)


def _produce(e: _Emitter, p: _Pipeline, r: _Rings, j: Value, slot: Value,
             parity: Value) -> None:
    """Fill stage ``slot`` with tile ``j`` of every stream, completing on ``full[slot]``.

    When every stream is TMA, nothing in here but the elected thread's ``expect_tx`` and
    copies depends on the stage being free, so only that thread waits for the release
    (``mbarrier_wait`` with ``elected``; as CUTLASS's producer does): the other threads of
    a uniform schedule go on to their next stage instead of meeting the slowest warp's
    release at every step."""
    op = p.op
    attrs = {"elected": True} if not p.any_other else None
    e.op("mbarrier_wait", {"bar": r.empty, "slot": slot, "parity": parity}, attrs)
    if p.tma_bytes:
        e.op("mbarrier_expect_tx", {"bar": r.full, "slot": slot}, {"bytes": p.tma_bytes})
    for k, (s, tensor, start) in enumerate(zip(p.streams, op.variadic("tensors"),
                                               stream_indices(op))):
        coords = list(start)
        along = coords[s.axis]
        coords[s.axis] = e.binary("add", along, e.cast(j, along.tile_type.dtype))
        attrs = {"engine": s.engine.value, "shape": s.shape, "padding": s.padding,
                 "guarded": s.guarded}
        if s.engine is Engine.CP_ASYNC:
            attrs["vector_bytes"] = s.decision.vector_bytes
            if s.decision.checked:
                attrs["checked"] = True
        elif s.engine is Engine.TMA:
            attrs["box"] = s.decision.box
        e.op("copy_g2s", {"tensor": tensor, "index": coords, "dst": r.bufs[k], "slot": slot,
                          "bar": r.full, "bslot": slot}, attrs)
    if p.any_other:
        e.op("mbarrier_arrive", {"bar": r.full, "slot": slot})


def _produce_at(e: _Emitter, p: _Pipeline, r: _Rings, j: Value) -> None:
    """produce(j) with its slot ``j % S`` and the parity ``((j / S) & 1) ^ 1`` of the
    ``empty`` phase that frees it (a fresh barrier passes parity 1 at once)."""
    slot, lap = _slot_lap(e, j, p.stages)
    _produce(e, p, r, j, slot, e.binary("xor", lap, 1))


def _consume(e: _Emitter, p: _Pipeline, r: _Rings, i: Value) -> tuple[list, Value]:
    """Wait for stage ``i % S`` and read every stream's tile (None for a stream stored
    through); the stage is released by ``_release``, at once or after the body's bulk
    stores."""
    slot, parity = _slot_lap(e, i, p.stages)
    e.op("mbarrier_wait", {"bar": r.full, "slot": slot, "parity": parity})
    tiles = [None if k in p.through else e.op("smem_read", {"src": buf, "slot": slot}).result
             for k, buf in enumerate(r.bufs)]
    if not p.through and not p.late_release:
        _release(e, p, r, slot)
    return tiles, slot


def _release_lagged(e: _Emitter, p: _Pipeline, r: _Rings, i: Value) -> None:
    """when i >= 1: release stage ``(i - 1) % S`` (its wgmma group just completed)."""
    def release() -> None:
        _release(e, p, r, _slot_lap(e, e.binary("sub", i, 1), p.stages)[0])

    e.when(e.binary("ge", i, 1), release)


def _release(e: _Emitter, p: _Pipeline, r: _Rings, slot: Value) -> None:
    generic_reads = any(k not in p.through and not isinstance(s.feeds, WgmmaStage)
                        for k, s in enumerate(p.streams))
    if p.tma_bytes and generic_reads:
        # The next TMA copy into this stage writes through the async proxy: the reads
        # above (generic proxy) are ordered before it only by a proxy fence in the reading
        # threads. Without it the H100 let copies overtake reads (a copy of 8192 x 8192
        # bf16 in (8, 256) tiles read the next lap's data, d = +stages tiles, ~2000 elements
        # per run).
        e.op("fence_proxy_async")
    e.op("mbarrier_arrive", {"bar": r.empty, "slot": slot})


def _store_through(e: _Emitter, p: _Pipeline, r: _Rings, block: Block, slot: Value) -> None:
    """Each ``tile_store`` of a stored-through stream's tile becomes a bulk store from its
    stage, waited for (its reads of the stage) before the stage is released; with
    ``store_lag``, the wait lets this step's stores run on and covers the previous step's
    (whose stage is then released)."""
    args = p.op.regions[0].block.args
    out = []
    for o in block.ops:
        k = next((k for k in p.through if o.name == "tile_store"
                  and o.operand("value") is args[1 + k]), None)
        if k is None:
            out.append(o)
            continue
        store = Builder(Block()).create(
            "copy_s2g", {"src": r.bufs[k], "slot": slot, "tensor": o.operand("tensor"),
                         "index": o.variadic("index")},
            {"engine": "tma", "shape": o.attrs["shape"]}, loc=o.loc)
        wait = Builder(Block()).create("store_wait", {"token": store.result},
                                      {"pending": int(p.store_lag)}, loc=o.loc)
        out.extend([store, wait])
    for o in out:
        o.parent = block
    block.ops = out


def _splice_body(p: _Pipeline, block: Block, i: Value, tiles: list[Value],
                 carried: list[Value], remap: dict[int, Value]) -> list[Value]:
    """Move the user's body into ``block`` with its arguments replaced; its yields."""
    body = p.op.regions[0].block
    for old, new in zip(body.args, [i, *tiles, *carried]):
        remap[id(old)] = new
    *ops, term = body.ops
    for op in ops:
        block.append(op)
    return [remap.get(id(v), v) for v in term.operands]


def _schedule(p: _Pipeline, plan: SmemPlan, remap: dict[int, Value]) -> list[Operation]:
    """The ops that replace pipeline ``p`` (built in a scratch block)."""
    op = p.op
    count = op.operand("count")
    scratch = Block()
    e = _Emitter(scratch, op.loc, count.tile_type.dtype)
    place = plan.of(p.key)
    S = p.stages
    n = e.op("trip_count", {"n": count}, {"pipeline": p.key, "stages": S}).result
    e.hoist(0, 1, S, S - 1)
    bufs = []
    for k, s in enumerate(p.streams):
        name = p.ring_name(k)
        attrs = {"shape": s.shape, "dtype": s.dtype, "stages": S, "name": name,
                 "offset": place.offset(name)}
        if isinstance(s.feeds, WgmmaStage):  # TMA's swizzled boxes, read by wgmma
            attrs["layout"] = s.feeds
            attrs["stage_bytes"] = -(-s.tile_bytes // WGMMA_STAGE_ALIGN) * WGMMA_STAGE_ALIGN
        elif s.feeds is not None:  # the stage as the dot's ldmatrix reads it
            attrs["layout"] = s.feeds.swizzle
        bufs.append(e.op("smem_alloc", attrs=attrs).result)
    full = e.op("mbarrier_alloc", attrs={
        "count": S, "arrivals": p.arrivals, "name": p.bar_name("full"),
        "offset": place.offset(p.bar_name("full"))}).result
    empty = e.op("mbarrier_alloc", attrs={
        "count": S, "arrivals": 1, "name": p.bar_name("empty"),
        "offset": place.offset(p.bar_name("empty"))}).result
    rings = _Rings(bufs, full, empty)
    if p.tma_bytes:
        # fence.proxy.async also orders the barriers' initialization: one fence, not two
        # (earlier pipelines' generic accesses of these bytes, then TMA's, need it).
        e.op("fence_proxy_async" if place.reuses else "fence_mbarrier_init")
    e.op("cta_barrier")
    inits = op.variadic("inits")
    zero = e.const(0)

    def consumer_loop(emit: _Emitter, carried_in: Sequence[Value], prefetch: bool
                      ) -> Operation:
        def step(i: Value, carried: list[Value]) -> list[Value]:
            if prefetch:  # when i + D < n: produce(i + D), D = S-1 (S-2 with a lag)
                j = emit.binary("add", i, S - 1 - p.lag)
                emit.when(emit.binary("lt", j, n), lambda: _produce_at(emit, p, rings, j))
            tiles, slot = _consume(emit, p, rings, i)
            if not p.through and not p.late_release:
                return _splice_body(p, emit.b.block, i, tiles, carried, remap)
            inner = Block()  # the body apart, its stores rewritten, then the release
            yields = _splice_body(p, inner, i, tiles, carried, remap)
            if p.through:
                _store_through(emit, p, rings, inner, slot)
            for o in inner.ops:
                emit.b.block.append(o)
            if p.lag:
                _release_lagged(emit, p, rings, i)
            else:
                _release(emit, p, rings, slot)
            return yields

        loop = emit.loop(zero, n, carried_in, step)
        if p.lag:  # the last group completes at the loop's exit; then its stage is free
            if p.lagged:
                loop.attrs["wgmma_drain"] = p.lagged
            if p.store_lag:
                emit.op("store_drain")
            _release_lagged(emit, p, rings, n)
        return loop

    if p.roles.mode is RoleMode.UNIFORM:
        for j in range(S - 1 - p.lag):  # the prologue, unrolled: when j < n: produce(j)
            jv = e.const(j)
            e.when(e.binary("lt", jv, n),
                   lambda jv=jv, j=j: _produce(e, p, rings, jv, e.const(j % S),
                                               e.const(((j // S) & 1) ^ 1)))
        results = consumer_loop(e, inits, prefetch=True).results
    else:
        producer, consumer = Block(), Block([v.type for v in inits])
        with e.b.at_end_of(producer):
            e.loop(zero, n, [], lambda j, _: (_produce_at(e, p, rings, j), [])[1])
            e.op("yield")
        with e.b.at_end_of(consumer):
            e.op("yield", {"values": consumer_loop(e, consumer.args, prefetch=False).results})
        r = p.roles
        results = e.op("warp_roles", {"inits": list(inits)}, {
            "producer_warps": r.producer_warps, "consumer_warps": r.consumer_warps,
            "producer_regs": r.producer_regs, "consumer_regs": r.consumer_regs},
            regions=[Region([producer]), Region([consumer])]).results
    e.op("cta_barrier")
    e.op("mbarrier_inval", {"bar": full})
    e.op("mbarrier_inval", {"bar": empty})
    for old, new in zip(op.results, results):
        remap[id(old)] = new
    return list(scratch.ops)


def _rewrite(block: Block, by_op: dict[int, _Pipeline], plan: SmemPlan,
             remap: dict[int, Value]) -> None:
    out: list[Operation] = []
    for op in block.ops:
        for region in op.regions:
            for inner in region.blocks:
                _rewrite(inner, by_op, plan, remap)
        p = by_op.get(id(op))
        out.extend(_schedule(p, plan, remap) if p is not None else [op])
    for op in out:
        op.parent = block
    block.ops = out


def _apply(fn: Function, remap: dict[int, Value]) -> None:
    for op in fn.walk():
        op.operands = [remap.get(id(v), v) for v in op.operands]


# --- the pass ---------------------------------------------------------------------------------

def _copy_facts(old: Function, new: Function) -> None:
    """The plain attributes a function carries beside its dataclass fields (the bucket's
    facts), which ``clone_module`` does not copy."""
    own = {f.name for f in fields(Function)}
    for key, value in vars(old).items():
        if key not in own:
            setattr(new, key, value)


def schedule_function(fn: Function, tgt: Target, num_warps: int,
                      divisible: frozenset[SizeFact]) -> tuple[ScheduleReport, ...]:
    """Schedule ``fn``'s pipelines in place; the reports. Sets ``fn.pipeline_smem_bytes``
    (the shared memory the pipelines take, from offset 0) and ``fn.schedule_reports``."""
    pipes = _collect(fn, tgt, num_warps, divisible)
    plan = plan_shared_memory(
        [Request(p.key, p.loc, p.live, p.buffers(), p.stages) for p in pipes],
        limit=tgt.max_shared_bytes, target=tgt.name)
    remap: dict[int, Value] = {}
    _rewrite(fn.entry, {id(p.op): p for p in pipes}, plan, remap)
    _apply(fn, remap)
    reports = tuple(
        ScheduleReport(p.key, fn.name, p.loc, p.stages, p.streams, p.roles, p.arrivals,
                       plan.of(p.key).base, plan.of(p.key).bytes, plan.of(p.key).buffers,
                       plan.of(p.key).reuses, plan.total_bytes, plan.limit, tgt.name)
        for p in pipes)
    fn.pipeline_smem_bytes = plan.total_bytes  # type: ignore[attr-defined]
    fn.schedule_reports = reports  # type: ignore[attr-defined]
    _note_repacks(fn, pipes)
    return reports


def _note_repacks(fn: Function, pipes: Sequence[_Pipeline]) -> None:
    """``fn.repacked``: the tensors the runtime copies before each launch (rows padded to
    16 bytes, a fresh 256-byte aligned base). The kernel reads only the copy, so those
    tensors join the bucket's ``aligned16`` and ``strides16`` facts for the lowering."""
    names = frozenset(s.tensor for p in pipes for s in p.streams if s.decision.repack)
    fn.repacked = names  # type: ignore[attr-defined]
    if names:
        for fact in ("aligned16", "strides16"):
            setattr(fn, fact, frozenset(getattr(fn, fact, frozenset())) | names)


def schedule_pipelines(module: Module, target: str | Target, *, num_warps: int = 4,
                       divisible: frozenset[SizeFact] = frozenset()) -> Module:
    """A copy of ``module`` with every ``pipeline`` op scheduled for ``target``.

    ``num_warps`` is the block's warps (the consumer warps with warp roles);
    ``divisible`` the call's size facts ``(tensor, dim, n)``. Each function of the result
    has ``pipeline_smem_bytes`` and ``schedule_reports``. Raises ``ScheduleError`` at the
    user's line for a forced engine that is not admissible, shared memory over the
    target's limit, or a protocol the checker refutes."""
    tgt = target if isinstance(target, Target) else get_target(target)
    out = clone_module(module)
    for old, new in zip(module.functions, out.functions):
        _copy_facts(old, new)
        schedule_function(new, tgt, num_warps, frozenset(divisible))
    verify(out)
    if should_dump("sched"):
        from tilekit.sched.dump import dump_schedule

        dump_schedule(out, tgt)
    _check_protocol(out)
    return out


def _check_protocol(module: Module) -> None:
    """The barrier protocol of every scheduled pipeline, checked without data
    (``tilekit.sched.protocol``; imported here, when it is needed)."""
    from tilekit.sched.protocol import check_protocol

    check_protocol(module)
