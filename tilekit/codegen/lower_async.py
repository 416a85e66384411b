"""Lowering of scheduled pipelines on NVIDIA: rings, mbarriers, async copies, warp roles.

``tilekit.sched`` turns each ``pipeline`` into the ops of ``docs/pipelines.md``; this module
gives each one its machine meaning (sm_90a and sm_80). AMD targets are refused with a
``LoweringError`` at the user's line.

**Shared memory.** Rings and barrier rings sit at their op's ``offset`` in dynamic shared
memory, inside ``[0, fn.pipeline_smem_bytes)``; the layout-conversion scratch follows from
the next 128-byte boundary (``KernelLowering.scratch_base``). Stage ``s`` of a ring starts
``s * stage_bytes`` after the ring: the tile's row-major bytes rounded up to 128, as the
planner (``tilekit.sched.smem_plan.stage_bytes``) places them, or the op's ``stage_bytes``
attribute when it has one. An mbarrier is 8 bytes.

**Roles and threads.** A role is the whole block (``cta``) or, under ``warp_roles``, the
producer or the consumer warps (``lower.Role``). "The elected thread" of a role is its
thread 0; it issues TMA copies, ``mbarrier_expect_tx``, bulk stores and their waits, and
alone makes a wait the schedule marks ``elected`` (a TMA producer's wait for a free stage).
Barrier initialization and invalidation are done by thread 0 of the block.

**Hardware arrival counts.** The IR counts arrivals per role (``arrivals`` of
``mbarrier_alloc``); the hardware counts arrive operations. This module lowers:

* ``mbarrier_arrive`` by role R on barrier B: when R issues ``cp_async`` copies that complete
  on B, every thread of R first executes ``cp.async.mbarrier.arrive.noinc.shared.b64 [B]``
  (an arrival triggered once that thread's earlier cp.async copies have landed); then every
  thread of R executes ``mbarrier.arrive.shared.b64 [B]`` (release semantics: that thread's
  earlier shared-memory reads and plain stores are ordered before the phase completes). One
  role arrival is thus ``threads(R)`` hardware arrivals, twice that when R's cp.async copies
  complete on B. (One arrival per warp, lane 0 after ``bar.warp.sync``, raced on the H100:
  with warp roles a TMA copy overwrote a stage while other lanes' reads of it were still
  in flight, ~2000 wrong elements per 8192 x 8192 copy; every thread arriving for itself,
  as CUTLASS's consumers do, orders each thread's own reads.)
* ``mbarrier_expect_tx``: one arrival (``mbarrier.arrive.expect_tx``, the elected thread).
* TMA copies complete by transaction bytes and arrive nowhere.

The count a barrier ring is initialized with is found by scanning the function's arrive
sites on it, each site's kind being (op, role): when there are exactly ``arrivals`` kinds,
every phase gets one arrival of each (the ``full`` ring of a pipeline with TMA and other
streams: one ``expect_tx`` and one ``arrive``), so the count is the sum of their weights;
when there is one kind, it is ``arrivals`` times its weight. Anything else is refused.

**Warp roles** (sm_90a). The block has the producer warps first, then the consumer warps;
the producer warps are padded to a whole warpgroup when ``setmaxnreg`` is used (it must be
executed by every warp of a warpgroup), the padding warps idle. ``setmaxnreg`` is left out
(it is a hint) when the consumer warps are not whole warpgroups or the two counts do not
fit the register file; with it, the kernel declares ``.minnctapersm 1``, without which ptxas
cannot know the register count at entry and ignores ``setmaxnreg``. The kernel branches on
the warp index once, at its start, into two views of the top-level ops:

* the producer warps run ``setmaxnreg.dec.sync.aligned.u32 producer_regs``, then only the
  block-wide ops (``cta_barrier``, barrier init and invalidation, fences, ``smem_alloc``,
  ``trip_count``) and the scalar computations without effects that region 0 needs, with
  ``warp_roles`` replaced by region 0 (run by the first ``producer_warps`` warps);
* the consumer warps run ``setmaxnreg.inc.sync.aligned.u32 consumer_regs``, then every
  top-level op, ``warp_roles`` replaced by region 1, whose yields are its results.

So outside the roles, tiles live on the consumer warps (layouts are assigned for
``consumer_warps``), and ``cta_barrier`` is ``bar.sync 0`` in both views: the same
sequence of CTA barriers in each. Barriers inside an op (conversions, reductions, a bulk
store's wait) are named barriers of the running role's threads (``bar.sync 1`` consumer,
``bar.sync 2`` producer).

**Copies.** ``copy_g2s`` by engine:

* ``tma``: the elected thread issues ``cp.async.bulk.tensor.<rank>d.shared::cluster.global.
  mbarrier::complete_tx::bytes`` from a tensor map passed as a kernel parameter (a
  ``TENSOR_MAP`` slot per tensor and box, a 128-byte ``__grid_constant__`` byval
  parameter), coordinates in elements, innermost first. A tile dim over 256 (TMA's box
  limit) is moved as several boxes when the boxes are contiguous in the row-major stage.
* ``cp_async``: thread ``t`` of the role copies chunks ``t, t + T, ...`` of ``vector_bytes``
  (``cp.async.cg`` for 16 bytes, ``cp.async.ca`` for 4 and 8) to the row-major stage; the
  ``src-size`` operand zero-fills what lies past the tensor's edge. A ``checked`` copy (the
  bucket does not prove the chunk: ``sched.engines.checked_cp_async``) tests the tensor's
  base and row strides once and copies in ``vector_bytes`` chunks, else in half of them
  down to 4 bytes, else element by element (loads and shared stores, zeros past the
  edge), every way into the same places; ``mbarrier_arrive``'s release orders the
  element stores as it orders the reads.
* ``plain``: a guarded tile-view load in the op's ``staging_layout`` (given by
  ``tilekit.layout.propagate``), then shared stores into the stage.

``smem_read`` and ``smem_write`` move a stage in the tile's layout with the widest shared
accesses it allows (``ld.shared.v4``/``st.shared.v4`` for 16-byte runs along the row).
A stage the schedule laid out for a ``tk.dot`` (a ``ChunkSwizzle`` from
``mma_sync.stage_read``, the ring type's ``layout``) is written by cp.async chunk by chunk
through the swizzle, and its ``smem_read`` carries the plan (``read``) that ``ldmatrix``
follows into the dot's fragment layout (``lower_mma.read_stage``); any other read or write
of such a stage goes through the swizzle element by element or in 16-byte vectors.
``copy_s2g`` is a TMA bulk store plus ``cp.async.bulk.commit_group``; ``store_wait`` is
``cp.async.bulk.wait_group.read 0`` in the elected thread, then a barrier of the role, so
that no thread rewrites the stage while it is read. A pipeline's copies do not order
themselves after the program's earlier global stores beyond the schedule's CTA barrier: a
pipeline reads ahead, so its body's stores cannot reach its later tiles anyway. Likewise
a bulk store's global writes are waited for only as far as reading the stage
(``wait_group.read``): a later load of the same elements in the same kernel is not ordered
after them.

Barriers and arrivals are NVVM intrinsics (convergent, with memory effects, so LLVM
neither duplicates them into divergent code nor moves shared accesses across them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llvmlite import ir

from tilekit.codegen import scalar_ops as S
from tilekit.codegen.intrinsics import call
from tilekit.codegen.lower import (
    I1,
    I8,
    I32,
    I64,
    KernelLowering,
    Role,
    c32,
    dtype_of,
    layout_of,
)
from tilekit.codegen.rules import rule
from tilekit.codegen.target import Target
from tilekit.errors import LoweringError, SourceLoc
from tilekit.ir.core import Block, Function, Operation, Value
from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import Effect
from tilekit.ir.types import SharedType, TileType
from tilekit.layout.tile_layouts import BlockedEncoding, TileLayout

if TYPE_CHECKING:  # the dot's stage layouts: imported by the rules of pipelined kernels
    from tilekit.layout.mma_sync import ChunkSwizzle

#: Every stage starts on this boundary (the planner's, TMA's destination alignment).
STAGE_ALIGN = 128
MBARRIER_BYTES = 8
#: TMA's largest box extent per dim and highest rank.
TMA_MAX_BOX = 256
TMA_MAX_RANK = 5
CP_ASYNC_BYTES = (4, 8, 16)
#: Named barriers of the warp roles (0 is ``bar.sync 0``, the whole block).
CONSUMER_BARRIER, PRODUCER_BARRIER = 1, 2
WARPGROUP = 4
REGISTERS_PER_SM = 65536

AMD_MESSAGE = "pipelines are not lowered for AMD yet; use tk.range"

ASYNC_OPS = frozenset({
    "smem_alloc", "mbarrier_alloc", "mbarrier_inval", "mbarrier_arrive", "mbarrier_expect_tx",
    "mbarrier_wait", "fence_mbarrier_init", "fence_proxy_async", "cta_barrier", "copy_g2s",
    "smem_read", "smem_write", "copy_s2g", "store_wait", "store_drain", "trip_count",
    "warp_roles",
    "pipeline"})
#: What the producer warps run of the top level besides region 0 (with pure scalar ops).
_BLOCK_WIDE = frozenset({"smem_alloc", "mbarrier_alloc", "mbarrier_inval", "fence_mbarrier_init",
                         "fence_proxy_async", "cta_barrier", "trip_count"})


def _arch(target: Target) -> int:
    digits = "".join(c for c in target.name[3:] if c.isdigit())
    return int(digits) if target.is_nvidia and digits else 0


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


# --- warp roles ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RoleSplit:
    """How a warp-specialized kernel's block is split: ``producer_warps`` run region 0,
    ``consumer_warps`` region 1; the producers take ``producer_block_warps`` warps of the
    block (a whole warpgroup when ``setmaxnreg`` is used; the rest idle); ``regs`` is
    ``(producer_regs, consumer_regs)`` for ``setmaxnreg``, or None."""

    producer_warps: int
    consumer_warps: int
    producer_block_warps: int
    regs: tuple[int, int] | None

    @property
    def block_warps(self) -> int:
        return self.producer_block_warps + self.consumer_warps

    @property
    def producer(self) -> Role:
        return Role("producer", 0, self.producer_warps, PRODUCER_BARRIER)

    @property
    def consumer(self) -> Role:
        return Role("consumer", self.producer_block_warps, self.consumer_warps,
                    CONSUMER_BARRIER)


def role_split(fn: Function, target: Target, num_warps: int) -> RoleSplit | None:
    """The block's split into warp roles (None: no ``warp_roles`` op), checked: one split
    for the whole kernel, at the top level, on sm_90a, within the register file."""
    ops = [op for op in fn.walk() if op.name == "warp_roles"]
    if not ops:
        return None
    op = ops[0]
    if not target.is_nvidia:
        raise LoweringError(AMD_MESSAGE, op.loc)
    if target.name != "sm_90a":
        raise LoweringError(f"warp roles need setmaxnreg (sm_90a); the target is {target.name}",
                            op.loc, hints=["the schedule uses uniform roles on other targets"])
    keys = ("producer_warps", "consumer_warps", "producer_regs", "consumer_regs")
    specs = {tuple(o.attrs.get(k) for k in keys) for o in ops}
    for o in ops:
        if o.parent is not fn.entry:
            raise LoweringError("warp roles are lowered at the top level of a kernel only "
                                "(not inside a loop or a branch)", o.loc)
    if len(specs) > 1:
        raise LoweringError("the warp-specialized pipelines of one kernel must split the warps "
                            "the same way", ops[1].loc)
    producers, consumers, p_regs, c_regs = specs.pop()
    if consumers != num_warps:
        raise LoweringError(f"internal: layouts were assigned for {num_warps} warps but the "
                            f"consumer role has {consumers}", op.loc)
    regs = None
    block_producers = producers
    if p_regs is not None and c_regs is not None:
        for r in (p_regs, c_regs):
            if not (isinstance(r, int) and 24 <= r <= 256 and r % 8 == 0):
                raise LoweringError(f"setmaxnreg takes a register count in [24, 256], a "
                                    f"multiple of 8; got {r!r}", op.loc)
        padded = _round_up(producers, WARPGROUP)
        need = (padded * p_regs + consumers * c_regs) * target.warp_size
        # setmaxnreg is a hint: left out when the consumers are not whole warpgroups or
        # the counts do not fit the register file (the roles work the same without it).
        if consumers % WARPGROUP == 0 and need <= REGISTERS_PER_SM:
            regs, block_producers = (p_regs, c_regs), padded
    split = RoleSplit(producers, consumers, block_producers, regs)
    if split.block_warps * target.warp_size > target.max_threads:
        raise LoweringError(f"warp roles need {split.block_warps} warps, more than a block "
                            f"of {target.max_threads} threads has", op.loc)
    return split


# --- tensor maps (TMA) ------------------------------------------------------------------------

@dataclass
class TensorMap:
    """One ``TENSOR_MAP`` kernel parameter: the map of tensor ``arg`` with ``box``
    (outermost first); ``param`` is its LLVM argument once the signature is built."""

    arg: str
    value: Value
    box: tuple[int, ...]
    swizzle: str = "NONE"
    param: ir.Argument | None = None


def tma_box(shape: Sequence[int], itemsize: int, loc: SourceLoc | None = None
            ) -> tuple[int, ...]:
    """The TMA box that moves a row-major tile of ``shape``: the schedule solver's split
    (``tilekit.sched.engines.tma_box``, the one place it is decided), checked: a tile it
    could not split is a ``LoweringError`` (the solver only gives TMA admissible boxes)."""
    from tilekit.sched.engines import tma_box as solver_box

    shape = tuple(shape)
    if len(shape) > TMA_MAX_RANK:
        raise LoweringError(f"TMA moves tiles of rank <= {TMA_MAX_RANK}, not {len(shape)}", loc)
    box = solver_box(shape, itemsize)
    if any(b > TMA_MAX_BOX for b in box):
        raise LoweringError(f"a {shape} tile has no TMA box (dims over {TMA_MAX_BOX} that "
                            "cannot be split into contiguous, 128-byte aligned boxes)", loc,
                            hints=["use engine='cp_async' or smaller tiles"])
    if box[-1] * itemsize % 16:
        raise LoweringError(f"a TMA box row is a multiple of 16 bytes; {box[-1]} elements of "
                            f"{itemsize} bytes are not", loc)
    return box


def box_pieces(shape: Sequence[int], box: Sequence[int], itemsize: int
               ) -> list[tuple[tuple[int, ...], int]]:
    """``(origin, byte offset in the stage)`` of each box of a tile (``tma_box``'s split)."""
    split = [d for d, (n, b) in enumerate(zip(shape, box)) if n != b]
    if not split:
        return [((0,) * len(shape), 0)]
    d = split[0]
    step = box[d] * math.prod(shape[d + 1:]) * itemsize
    return [(tuple(k * box[d] if j == d else 0 for j in range(len(shape))), k * step)
            for k in range(shape[d] // box[d])]


# --- what is decided from the whole function --------------------------------------------------

@dataclass
class AsyncState:
    """The function-wide facts the async rules need: the role running each op, each barrier
    ring's hardware arrival count, the (barrier, role) pairs whose arrivals also carry
    cp.async completion, and the tensor maps."""

    roles: dict[int, str] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    cp_arrivals: set[tuple[int, str]] = field(default_factory=set)
    tensor_maps: list[TensorMap] = field(default_factory=list)

    @staticmethod
    def of(fn: Function, L: KernelLowering) -> AsyncState:
        state = AsyncState()
        uses = [op for op in fn.walk() if op.name in ASYNC_OPS]
        if not uses:
            return state
        if not L.target.is_nvidia:
            raise LoweringError(AMD_MESSAGE, uses[0].loc)
        top = "consumer" if L.split is not None else "cta"
        _assign_roles(fn.entry, top, state.roles)
        warps = {"cta": L.role.num_warps}
        if L.split is not None:
            warps = {"producer": L.split.producer_warps, "consumer": L.split.consumer_warps}
        for op in uses:
            if op.name == "copy_g2s" and op.attrs.get("engine") == "cp_async":
                state.cp_arrivals.add((id(op.operand("bar")), state.roles[id(op)]))
        kinds: dict[int, dict[tuple[str, str], int]] = {}
        for op in uses:
            if op.name not in ("mbarrier_arrive", "mbarrier_expect_tx"):
                continue
            role = state.roles[id(op)]
            bar = id(op.operand("bar"))
            weight = 1
            if op.name == "mbarrier_arrive":
                weight = warps[role] * L.warp_size
                if (bar, role) in state.cp_arrivals:
                    weight += warps[role] * L.warp_size
            kinds.setdefault(bar, {})[(op.name, role)] = weight
        for op in uses:
            if op.name == "mbarrier_alloc":
                state.counts[id(op.result)] = _hardware_count(op, kinds.get(id(op.result), {}))
        state.tensor_maps = _tensor_maps(uses, fn, L.target)
        return state

    def role_of(self, op: Operation) -> str:
        return self.roles[id(op)]

    def tensor_map(self, op: Operation) -> TensorMap:
        t = op.operand("tensor")
        box, swizzle, _ = copy_boxes(op)
        return next(m for m in self.tensor_maps
                    if m.value is t and m.box == box and m.swizzle == swizzle)


def _assign_roles(block: Block, role: str, roles: dict[int, str]) -> None:
    for op in block.ops:
        roles[id(op)] = role
        if op.name == "warp_roles":
            _assign_roles(op.regions[0].block, "producer", roles)
            _assign_roles(op.regions[1].block, "consumer", roles)
            continue
        for region in op.regions:
            for inner in region.blocks:
                _assign_roles(inner, role, roles)


def _hardware_count(op: Operation, kinds: dict[tuple[str, str], int]) -> int:
    arrivals = op.attrs["arrivals"]
    if not kinds:
        return arrivals
    if len(kinds) == arrivals:
        return sum(kinds.values())
    if len(kinds) == 1:
        return arrivals * next(iter(kinds.values()))
    sites = ", ".join(f"{name} by {role}" for name, role in kinds)
    raise LoweringError(f"cannot derive the hardware arrival count of barrier ring "
                        f"`{op.attrs.get('name', 'bar')}`: {arrivals} arrivals per phase from "
                        f"{len(kinds)} kinds of arrive sites ({sites})", op.loc)


def _tensor_maps(uses: list[Operation], fn: Function, target: Target) -> list[TensorMap]:
    maps: list[TensorMap] = []
    for op in uses:
        if not (op.name == "copy_s2g" or (op.name == "copy_g2s"
                                          and op.attrs.get("engine") == "tma")):
            continue
        if _arch(target) < 90:
            raise LoweringError(f"TMA copies and bulk stores need sm_90; the target is "
                                f"{target.name}", op.loc,
                                hints=["the schedule picks cp_async or plain copies there"])
        t = op.operand("tensor")
        if not any(t is a for a in fn.args):
            raise LoweringError("a TMA copy must read a kernel argument", op.loc)
        if op.name == "copy_g2s" and op.attrs.get("padding", 0) != 0:
            raise LoweringError(f"TMA fills the edge with zeros, not {op.attrs['padding']!r}",
                                op.loc, hints=["use engine='plain' for another padding"])
        box, swizzle, _ = copy_boxes(op)
        if not any(m.value is t and m.box == box and m.swizzle == swizzle for m in maps):
            maps.append(TensorMap(t.name_hint or "tensor", t, box, swizzle))
    return maps


def copy_boxes(op: Operation) -> tuple[tuple[int, ...], str,
                                        list[tuple[tuple[int, ...], int]]]:
    """The TMA box of a ``copy_g2s``/``copy_s2g``, its swizzle (a ``tma.Swizzle`` name) and
    ``(origin, byte offset in the stage)`` of each box: a wgmma stage's swizzled boxes
    (``WgmmaStage``), else ``tma_box``'s row-major split."""
    from tilekit.layout.wgmma_plan import WgmmaStage

    ring = op.operand("dst" if op.name == "copy_g2s" else "src").type
    if isinstance(ring, SharedType) and isinstance(ring.layout, WgmmaStage):
        stage = ring.layout
        return stage.box, stage.swizzle.name, stage.pieces()
    itemsize = op.operand("tensor").type.dtype.itemsize
    box = tma_box(op.attrs["shape"], itemsize, op.loc)
    return box, "NONE", box_pieces(op.attrs["shape"], box, itemsize)


# --- handles of rings and barrier rings --------------------------------------------------------

@dataclass(frozen=True)
class Ring:
    """A ring of stages at ``offset`` bytes of dynamic shared memory."""

    name: str
    offset: int
    type: SharedType
    stage_bytes: int

    def stage(self, L: KernelLowering, slot: ir.Value) -> ir.Value:
        """The byte offset of stage ``slot`` (i32)."""
        step = L.b.mul(slot, c32(self.stage_bytes))
        return L.b.add(step, c32(self.offset)) if self.offset else step


@dataclass(frozen=True)
class BarrierRing:
    """``count`` mbarriers at ``offset``, each initialized to ``hw_count`` arrivals."""

    name: str
    offset: int
    count: int
    hw_count: int

    def address(self, L: KernelLowering, slot: ir.Value) -> ir.Value:
        off = L.b.add(L.b.mul(slot, c32(MBARRIER_BYTES)), c32(self.offset))
        return L.shared_at(off, I64)


def _swizzle(t: SharedType) -> ChunkSwizzle | None:
    """The stage's chunk swizzle (a 16-bit 2-D tile laid out for ``ldmatrix``), or None
    when the stage is row-major."""
    from tilekit.layout.mma_sync import ChunkSwizzle

    sw = t.layout
    if isinstance(sw, ChunkSwizzle) and len(t.shape) == 2 and t.dtype.itemsize == 2 \
            and (sw.rows, sw.cols) == tuple(t.shape):
        return sw
    return None


def _scalar32(L: KernelLowering, v: Value) -> ir.Value:
    """An integer scalar operand as i32 (stage and barrier indices, parities)."""
    x = L.regs(v)[0]
    if x.type.width > 32:
        return L.b.trunc(x, I32)
    if x.type.width < 32:
        return L.b.sext(x, I32) if dtype_of(v).is_signed else L.b.zext(x, I32)
    return x


def _ring(L: KernelLowering, v: Value) -> Ring:
    return L.values[id(v)]


def _bars(L: KernelLowering, v: Value) -> BarrierRing:
    return L.values[id(v)]


def _elected(L: KernelLowering) -> ir.Value:
    """Thread 0 of the running role."""
    return L.b.icmp_unsigned("==", L.tid, c32(0))


def _block_thread0(L: KernelLowering) -> ir.Value:
    return L.b.icmp_unsigned("==", L.physical_tid, c32(0))


def _need_hopper(L: KernelLowering, op: Operation, what: str) -> None:
    if _arch(L.target) < 90:
        raise LoweringError(f"{what} needs sm_90; the target is {L.target.name}", op.loc)


def _generic(L: KernelLowering, ptr: ir.Value) -> ir.Value:
    return L.b.bitcast(ptr, ir.PointerType(I8))


# --- the entry block and warp roles ------------------------------------------------------------

def lower_entry(L: KernelLowering, fn: Function) -> None:
    """Lower the kernel's body: as it is, or, with warp roles, as the producer warps' and
    the consumer warps' views of it (see the module docstring)."""
    split = L.split
    if split is None:
        L.lower_block(fn.entry)
        return
    b = L.b
    if split.regs is not None:
        L.vendor.min_blocks_per_sm(L.module, L.func, 1)
    producer_bb = L.func.append_basic_block("producer")
    consumer_bb = L.func.append_basic_block("consumer")
    b.cbranch(b.icmp_unsigned("<", L.physical_warp, c32(split.producer_block_warps)),
              producer_bb, consumer_bb)
    b.position_at_end(producer_bb)
    with L.as_role(split.producer):
        _set_max_registers(L, "dec", split)
        have = {id(a) for a in fn.args}
        for op in fn.entry.ops:
            if op.name == "warp_roles":
                _lower_producer(L, op, split, have)
            elif _producer_runs(op, have):
                if any(id(v) not in have for v in op.operands):
                    raise LoweringError(
                        f"the producer warps of a warp-specialized kernel run `{op.name}`, "
                        "whose operand only the consumer warps compute", op.loc)
                L.lower_op(op)
                have.update(id(r) for r in op.results)
        b.ret_void()
    b.position_at_end(consumer_bb)
    L.after_pipelines = False  # the producer view passed the last pipeline, this one not yet
    with L.as_role(split.consumer):
        _set_max_registers(L, "inc", split)
        for op in fn.entry.ops:
            if op.name != "warp_roles":
                L.lower_op(op)
                continue
            body = op.regions[1].block
            for arg, init in zip(body.args, op.variadic("inits")):
                L.values[id(arg)] = list(L.regs(init))
            for res, regs in zip(op.results, L.lower_block(body)):
                L.values[id(res)] = list(regs)
    # the consumer view goes on with the block's remaining code; finish() returns


def _set_max_registers(L: KernelLowering, how: str, split: RoleSplit) -> None:
    if split.regs is not None:
        count = split.regs[0] if how == "dec" else split.regs[1]
        call(L.b, f"llvm.nvvm.setmaxnreg.{how}.sync.aligned.u32", ir.VoidType(), [c32(count)])


def _producer_runs(op: Operation, have: set[int]) -> bool:
    """Whether the producer warps run a top-level op: the block-wide ones, and scalar
    computations without effects whose operands they have."""
    if op.name in _BLOCK_WIDE:
        return True
    if op.regions or op.opdef.effects != Effect.PURE:
        return False
    return all(isinstance(r.type, TileType) and r.type.is_scalar for r in op.results) and \
        all(id(v) in have for v in op.operands)


def _lower_producer(L: KernelLowering, op: Operation, split: RoleSplit, have: set[int]) -> None:
    body = op.regions[0].block
    inner: set[int] = set()
    for o in (x for top in body.ops for x in top.walk()):
        inner.update(id(r) for r in o.results)
        for region in o.regions:
            for blk in region.blocks:
                inner.update(id(a) for a in blk.args)
        for v in o.operands:
            if id(v) not in inner and id(v) not in have:
                raise LoweringError(
                    f"the producer role of a warp-specialized pipeline uses a value that only "
                    f"the consumer warps compute (an operand of `{o.name}`)", o.loc)
    if split.producer_block_warps > split.producer_warps:  # padding warps idle
        with L.b.if_then(L.b.icmp_unsigned("<", L.physical_warp, c32(split.producer_warps))):
            L.lower_block(body)
    else:
        L.lower_block(body)


@rule("warp_roles")
def _warp_roles(L: KernelLowering, op: Operation) -> None:
    raise LoweringError("internal: warp roles are lowered at the top level of a kernel only",
                        op.loc)


@rule("pipeline")
def _pipeline(L: KernelLowering, op: Operation) -> None:
    raise LoweringError("internal: a pipeline reached code generation unscheduled", op.loc,
                        hints=["compile_module runs tilekit.sched.schedule_pipelines first"])


# --- allocation, barriers, fences --------------------------------------------------------------

@rule("smem_alloc")
def _smem_alloc(L: KernelLowering, op: Operation) -> None:
    from tilekit.layout.wgmma_plan import WgmmaStage

    t = op.result.type
    assert isinstance(t, SharedType)
    if t.layout is not None and _swizzle(t) is None and not isinstance(t.layout, WgmmaStage):
        raise LoweringError(f"pipeline stages laid out as {t.layout!r} are not lowered (stages "
                            "are row-major or a 16-bit tile's ChunkSwizzle)", op.loc)
    offset = op.attrs.get("offset", 0)
    stage = op.attrs.get("stage_bytes", _round_up(t.slot_bytes, STAGE_ALIGN))
    end = offset + t.stages * stage
    if offset % STAGE_ALIGN or stage % 16 or end > L.pipeline_bytes:
        raise LoweringError(f"internal: ring `{op.attrs.get('name')}` at offset {offset} "
                            f"({t.stages} stages of {stage} bytes) does not fit the pipelines' "
                            f"{L.pipeline_bytes} bytes at 128-byte alignment", op.loc)
    L.values[id(op.result)] = Ring(op.attrs.get("name", "smem"), offset, t, stage)


@rule("mbarrier_alloc")
def _mbarrier_alloc(L: KernelLowering, op: Operation) -> None:
    offset, count = op.attrs.get("offset", 0), op.attrs["count"]
    if offset % MBARRIER_BYTES or offset + count * MBARRIER_BYTES > L.pipeline_bytes:
        raise LoweringError(f"internal: barrier ring `{op.attrs.get('name')}` at offset "
                            f"{offset} does not fit the pipelines' {L.pipeline_bytes} bytes "
                            "at 8-byte alignment", op.loc)
    bars = BarrierRing(op.attrs.get("name", "bar"), offset, count,
                       L.async_state.counts[id(op.result)])
    L.values[id(op.result)] = bars
    if L.split is not None and L.role.name == "consumer":
        return  # thread 0 of the block, a producer thread, initializes
    with L.b.if_then(_block_thread0(L)):
        for k in range(count):
            call(L.b, "llvm.nvvm.mbarrier.init.shared", ir.VoidType(),
                 [bars.address(L, c32(k)), c32(bars.hw_count)])


@rule("mbarrier_inval")
def _mbarrier_inval(L: KernelLowering, op: Operation) -> None:
    if L.split is not None and L.role.name == "consumer":
        return
    bars = _bars(L, op.operand("bar"))
    with L.b.if_then(_block_thread0(L)):
        for k in range(bars.count):
            call(L.b, "llvm.nvvm.mbarrier.inval.shared", ir.VoidType(),
                 [bars.address(L, c32(k))])


@rule("fence_mbarrier_init")
def _fence_mbarrier_init(L: KernelLowering, op: Operation) -> None:
    # Barrier initialization made visible to the async proxy (TMA's complete_tx); before
    # sm_90 no async proxy touches a barrier.
    if _arch(L.target) >= 90:
        call(L.b, "llvm.nvvm.fence.mbarrier_init.release.cluster", ir.VoidType(), [])


@rule("fence_proxy_async")
def _fence_proxy_async(L: KernelLowering, op: Operation) -> None:
    if _arch(L.target) >= 90:
        call(L.b, "llvm.nvvm.fence.proxy.async.shared_cta", ir.VoidType(), [])


@rule("cta_barrier")
def _cta_barrier(L: KernelLowering, op: Operation) -> None:
    L.vendor.barrier(L.b)  # bar.sync 0 in both views of a warp-specialized kernel
    L.dirty = False


@rule("mbarrier_arrive")
def _mbarrier_arrive(L: KernelLowering, op: Operation) -> None:
    bar = op.operand("bar")
    addr = _bars(L, bar).address(L, _scalar32(L, op.operand("slot")))
    if (id(bar), L.async_state.role_of(op)) in L.async_state.cp_arrivals:
        call(L.b, "llvm.nvvm.cp.async.mbarrier.arrive.noinc.shared", ir.VoidType(), [addr])
    call(L.b, "llvm.nvvm.mbarrier.arrive.shared", I64, [addr])


@rule("mbarrier_expect_tx")
def _mbarrier_expect_tx(L: KernelLowering, op: Operation) -> None:
    _need_hopper(L, op, "mbarrier.expect_tx (TMA)")
    addr = _bars(L, op.operand("bar")).address(L, _scalar32(L, op.operand("slot")))
    with L.b.if_then(_elected(L)):
        call(L.b, "llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta", I64,
             [addr, c32(op.attrs["bytes"])])


@rule("mbarrier_wait")
def _mbarrier_wait(L: KernelLowering, op: Operation) -> None:
    """Spin until the phase of the operand's parity completed: ``try_wait`` (sm_90, which
    suspends the thread for a while) or ``test_wait`` (sm_80). An ``elected`` wait (a TMA
    producer's wait for a free stage) is the elected thread's alone: only its
    ``expect_tx`` and copies follow it (``_check_elected_wait``)."""
    b = L.b
    addr = _bars(L, op.operand("bar")).address(L, _scalar32(L, op.operand("slot")))
    parity = _scalar32(L, op.operand("parity"))
    how = "try" if _arch(L.target) >= 90 else "test"

    def spin() -> None:
        loop = L.func.append_basic_block("mbarrier_wait")
        done = L.func.append_basic_block("mbarrier_waited")
        b.branch(loop)
        b.position_at_end(loop)
        ok = call(b, f"llvm.nvvm.mbarrier.{how}.wait.parity.scope.cta.space.cta", I1,
                  [addr, parity])
        b.cbranch(ok, done, loop)
        b.position_at_end(done)

    if op.attrs.get("elected"):
        _check_elected_wait(op)
        with b.if_then(_elected(L)):
            spin()
    else:
        spin()


#: What may follow an ``elected`` wait in its block: the elected thread's TMA work, and
#: scalar arithmetic (coordinates).
_ELECTED_AFTER = frozenset({"mbarrier_expect_tx", "copy_g2s", "yield"})


def _check_elected_wait(op: Operation) -> None:
    """Only the elected thread returns from an ``elected`` wait knowing the stage is free:
    every op after it in its block must be the elected thread's (``expect_tx``, TMA
    copies) or pure scalar arithmetic."""
    block = op.parent
    assert block is not None
    for later in block.ops[block.ops.index(op) + 1:]:
        tma = later.name != "copy_g2s" or later.attrs.get("engine") == "tma"
        scalar = not later.regions and later.opdef.effects == Effect.PURE and all(
            isinstance(r.type, TileType) and r.type.is_scalar for r in later.results)
        if not ((later.name in _ELECTED_AFTER and tma) or scalar):
            raise LoweringError(f"internal: `{later.name}` follows a wait that only the "
                                "elected thread makes", later.loc)


@rule("trip_count")
def _trip_count(L: KernelLowering, op: Operation) -> None:
    L.define(op.result, L.regs(op.operand("n")))


# --- copies into stages ------------------------------------------------------------------------

def _jitter(L: KernelLowering) -> None:
    """With ``TILEKIT_JITTER``: sleep 0-2047 ns, a hash of the clock, the thread and the
    block, so producers and consumers drift apart at random (a protocol stress test)."""
    from tilekit import knobs

    if not knobs.JITTER.get():
        return
    b = L.b
    sreg = lambda name: call(b, f"llvm.nvvm.read.ptx.sreg.{name}", I32, [])  # noqa: E731
    x = b.xor(sreg("clock"), b.mul(sreg("tid.x"), ir.Constant(I32, 0x9E3779B1 - 2**32)))
    x = b.xor(x, b.mul(sreg("ctaid.x"), ir.Constant(I32, 0x85EBCA6B - 2**32)))
    x = b.mul(b.xor(x, b.lshr(x, ir.Constant(I32, 15))), ir.Constant(I32, 0x2C1B3C6D))
    ns = b.and_(b.lshr(x, ir.Constant(I32, 12)), ir.Constant(I32, 2047))
    call(b, "llvm.nvvm.nanosleep", ir.VoidType(), [ns])


@rule("copy_g2s")
def _copy_g2s(L: KernelLowering, op: Operation) -> None:
    from tilekit.layout.wgmma_plan import WgmmaStage

    _jitter(L)
    engine = op.attrs["engine"]
    ring = _ring(L, op.operand("dst"))
    stage = ring.stage(L, _scalar32(L, op.operand("slot")))
    if isinstance(ring.type.layout, WgmmaStage):
        if engine != "tma":
            raise LoweringError(f"internal: a {engine} copy into a wgmma stage (the schedule "
                                "gives them TMA copies)", op.loc)
    elif ring.type.layout is not None and engine != "cp_async":
        raise LoweringError(f"internal: a {engine} copy into a swizzled stage (the schedule "
                            "gives swizzled stages cp.async copies)", op.loc)
    if engine == "tma":
        _tma_load(L, op, stage)
    elif engine == "cp_async":
        _cp_async(L, op, ring, stage)
    elif engine == "plain":
        lay = op.attrs.get("staging_layout")
        if not isinstance(lay, TileLayout):
            raise LoweringError("internal: a plain copy has no staging layout (assign_layouts "
                                "gives it one)", op.loc)
        from tilekit.codegen import tile_access
        from tilekit.codegen.lower_memory import _tile_addressing

        t, offsets, inside = _tile_addressing(L, op, lay)
        pad = S.constant(t.dtype, op.attrs.get("padding", 0))
        regs = tile_access.tile_gather(L, t, lay, offsets, inside, pad)
        _store_stage(L, ring, stage, lay, t.dtype, regs)
    else:
        raise LoweringError(f"internal: unknown copy engine {engine!r}", op.loc)


def _tma_coords(L: KernelLowering, op: Operation, origin: Sequence[int]) -> list[ir.Value]:
    """Element coordinates of a box, innermost first (i32, as TMA takes them).

    A 64-bit tile index (a tensor indexed in 64 bits) gets its coordinate computed in 64
    bits; one past the signed 32-bit range becomes -2^31, which puts the whole box before
    the tensor (zeros, as the exact coordinate would: launches refuse a dim longer than
    2^31, ``TMA_COORDINATE_REACH``, so such a box lies past the edge)."""
    shape = op.attrs["shape"]
    b = L.b
    out = []
    for d in reversed(range(len(shape))):
        v = op.variadic("index")[d]
        if dtype_of(v).bits == 64:
            wide = b.mul(L.regs(v)[0], ir.Constant(I64, shape[d]))
            wide = b.add(wide, ir.Constant(I64, origin[d])) if origin[d] else wide
            fits = b.icmp_unsigned("<", b.add(wide, ir.Constant(I64, 2**31)),
                                   ir.Constant(I64, 2**32))
            out.append(b.select(fits, b.trunc(wide, I32), c32(-(2**31))))
            continue
        c = b.mul(_scalar32(L, v), c32(shape[d]))
        out.append(b.add(c, c32(origin[d])) if origin[d] else c)
    return out


def _tma_load(L: KernelLowering, op: Operation, stage: ir.Value) -> None:
    _need_hopper(L, op, "a TMA copy")
    m = L.async_state.tensor_map(op)
    bar = _bars(L, op.operand("bar")).address(L, _scalar32(L, op.operand("bslot")))
    rank = len(op.attrs["shape"])
    b = L.b
    with b.if_then(_elected(L)):
        for origin, offset in copy_boxes(op)[2]:
            dst = L.shared_at(b.add(stage, c32(offset)) if offset else stage, I8)
            dst = b.addrspacecast(dst, ir.PointerType(I8, 7))  # shared::cluster
            call(b, f"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.{rank}d", ir.VoidType(), [
                dst, bar, _generic(L, m.param), *_tma_coords(L, op, origin),
                ir.Constant(ir.IntType(16), 0), ir.Constant(I64, 0), ir.Constant(I1, 0),
                ir.Constant(I1, 0), c32(0)])


def _cp_async(L: KernelLowering, op: Operation, ring: Ring, stage: ir.Value) -> None:
    """Thread ``t`` copies chunks ``t, t + T, ...`` of the row-major tile; each chunk is
    ``vector_bytes`` consecutive bytes of one row, zero-filled past the tensor's edge, and
    lands at its row-major place in the stage, or where the stage's ``ChunkSwizzle`` puts
    it (a stage laid out for ``ldmatrix``)."""
    from tilekit.codegen.lower_memory import _to_i64

    b = L.b
    tv = op.operand("tensor")
    t = L.tensor(tv)
    shape = tuple(op.attrs["shape"])
    size = t.dtype.itemsize
    vb = op.attrs.get("vector_bytes") or max(size, 4)
    per = vb // size if vb % size == 0 else 0
    if vb not in CP_ASYNC_BYTES or not per or shape[-1] % per:
        raise LoweringError(f"cp.async copies 4, 8 or 16 bytes of whole elements within a "
                            f"tile row; {vb} bytes of {t.dtype} in rows of {shape[-1]} do not",
                            op.loc)
    checked = bool(op.attrs.get("checked"))
    if per > 1 and not (t.name in L.unit_inner and (checked or (
            t.name in L.aligned16 and (len(shape) == 1 or t.name in L.strides16)))):
        raise LoweringError(f"{vb}-byte cp.async chunks of `{t.name}` need the bucket's facts "
                            "(16-byte aligned base, unit inner stride, 16-byte row strides)",
                            op.loc, hints=[f"use vector_bytes={size}"])
    if _arch(L.target) < 80:
        raise LoweringError(f"cp.async needs sm_80; the target is {L.target.name}", op.loc)
    rank = len(shape)
    starts = [b.mul(_to_i64(b, L.regs(v)[0], dtype_of(v).is_signed), ir.Constant(I64, n))
              for v, n in zip(op.variadic("index"), shape)]
    sizes = [_to_i64(b, s) for s in t.sizes]
    strides = [_to_i64(b, s) for s in t.strides]
    whole = {d: b.icmp_signed("<", starts[d], sizes[d]) for d, n in enumerate(shape)
             if n == 1 or (t.name, d, n) in L.divisible}
    inner = [math.prod(shape[d + 1:]) for d in range(rank)]
    zero = ir.Constant(I64, 0)
    threads = L.threads
    mem = S.memory_type(t.dtype)
    from tilekit.codegen.lower_mma import swizzled_offset

    swizzle = _swizzle(ring.type)

    def issue(c: ir.Value, width: int) -> None:
        """Chunk ``c`` of ``width`` bytes: one cp.async, or (``width`` below 4, an element)
        a load and a shared store, zero past the edge as cp.async's ``src-size`` leaves it."""
        per = max(1, width // size)
        e = b.mul(c, c32(per)) if per > 1 else c
        offset, conds = None, []
        last = None
        coords = []
        for d in range(rank):
            coord = b.udiv(e, c32(inner[d])) if inner[d] > 1 else e
            if d > 0:
                coord = b.urem(coord, c32(shape[d]))
            coords.append(coord)
            g = b.add(starts[d], b.zext(coord, I64))
            term = b.mul(g, strides[d])
            offset = term if offset is None else b.add(offset, term)
            if d < rank - 1:
                conds.append(whole[d] if d in whole else b.icmp_signed("<", g, sizes[d]))
            else:
                last = g
        if rank - 1 in whole:
            valid = b.select(whole[rank - 1], ir.Constant(I64, per), zero)
        else:
            rest = b.sub(sizes[-1], last)
            valid = b.select(b.icmp_signed("<", rest, ir.Constant(I64, per)), rest,
                             ir.Constant(I64, per))
            valid = b.select(b.icmp_signed("<", valid, zero), zero, valid)
        inside = L.all_of(conds)
        if inside is not None:
            valid = b.select(inside, valid, zero)
        nbytes = b.trunc(b.mul(valid, ir.Constant(I64, size)), I32)
        addr = b.add(t.base, b.mul(offset, ir.Constant(I64, size)))
        addr = b.select(b.icmp_unsigned("!=", nbytes, c32(0)), addr, t.base)  # nothing read
        if swizzle is None:
            at = b.mul(c, c32(per * size))  # row-major: chunk c at c * its bytes
        else:  # where the swizzle puts the chunk's first element: a chunk of 8 bytes or
            # fewer lies inside one 16-byte chunk, which the swizzle moves whole
            at = b.shl(swizzled_offset(b, swizzle, coords[0], coords[1]), c32(1))
        dst = b.add(stage, at)
        if width >= 4:
            src = b.inttoptr(addr, ir.PointerType(I8, L.vendor.global_addrspace))
            name = f"llvm.nvvm.cp.async.{'cg' if width == 16 else 'ca'}.shared.global.{width}.s"
            call(b, name, ir.VoidType(), [L.shared_at(dst, I8), src, nbytes])
            return
        src = b.inttoptr(addr, ir.PointerType(mem, L.vendor.global_addrspace))
        with b.if_else(b.icmp_unsigned("!=", nbytes, c32(0))) as (then, otherwise):
            with then:
                x = b.load(src, align=size)
                loaded = b.block
            with otherwise:
                skipped = b.block
        value = b.phi(mem)
        value.add_incoming(x, loaded)
        value.add_incoming(ir.Constant(mem, 0), skipped)
        b.store(value, L.shared_at(dst, mem), align=size)

    def chunks(width: int) -> None:
        n = math.prod(shape) // max(1, width // size)
        for k in range(-(-n // threads)):
            c = b.add(L.tid, c32(k * threads)) if k else L.tid
            if (k + 1) * threads > n:
                with b.if_then(b.icmp_unsigned("<", c, c32(n))):
                    issue(c, width)
            else:
                issue(c, width)

    if not checked or per == 1:
        chunks(vb)
        return
    # The bucket does not prove the chunk: the widest of vb, vb / 2, ... 4 bytes that divides
    # the base and every row stride (uniform tests), else element copies, each into the same
    # places of the stage. The narrower ones serve tensors the wider check refuses.
    bits = t.base
    for d in range(rank - 1):
        bits = b.or_(bits, b.mul(strides[d], ir.Constant(I64, size)))

    def tier(width: int) -> None:
        if width < max(4, size):
            chunks(size)  # an element per copy (a cp.async when elements are 4 bytes)
            return
        aligned = b.icmp_unsigned("==", b.and_(bits, ir.Constant(I64, width - 1)), zero)
        with b.if_else(aligned) as (fast, slow):
            with fast:
                chunks(width)
            with slow:
                tier(width // 2)

    tier(vb)


# --- stages <-> registers ----------------------------------------------------------------------

def _stage_groups(L: KernelLowering, lay: TileLayout, ring: Ring, itemsize: int
                  ) -> list[tuple[list[int], bool]]:
    """The layout's vector groups as ``(registers, vector?)``: a group is one shared access
    when its registers are consecutive along the row (the stage's minor dim), never wrap,
    and start on the access's alignment in every stage; else one access per register."""
    from tilekit.codegen.lower_memory import vector_groups

    enc = lay.encoding
    rank = lay.rank
    minor_ok = isinstance(enc, BlockedEncoding) and rank > 0 and enc.order[0] == rank - 1
    out: list[tuple[list[int], bool]] = []
    for g in vector_groups(L, lay, itemsize):
        width = len(g)
        nbytes = width * itemsize
        vec = width > 1 and minor_ok and not any(
            lay.may_wrap(r, d) for r in g for d in range(rank))
        if vec:
            d = lay.dims[rank - 1]
            vec = ((ring.type.layout is None or nbytes <= 16)  # a swizzle moves 16-byte chunks
                   and ring.offset % nbytes == 0 and ring.stage_bytes % nbytes == 0
                   and all(math.prod(lay.shape[k + 1:]) * itemsize % nbytes == 0
                           for k in range(rank - 1) if lay.shape[k] > 1)
                   and d.offsets[g[0]] % width == 0
                   and all(t.mod == 1 or t.mult % width == 0 for t in (d.lane, d.warp)))
        if vec:
            out.append((g, True))
        else:
            out.extend(([r], False) for r in g)
    return out


def _stage_address(L: KernelLowering, ring: Ring, lay: TileLayout, stage: ir.Value, reg: int,
                   itemsize: int, ty: ir.Type) -> ir.Value:
    """Register ``reg``'s element in the stage: row-major, or through the stage's swizzle."""
    swizzle = _swizzle(ring.type)
    if swizzle is None:
        index = L.flat_index(lay, reg)
    else:
        from tilekit.codegen.lower_mma import swizzled_offset

        index = swizzled_offset(L.b, swizzle, L.coord(lay, reg, 0), L.coord(lay, reg, 1))
    return L.shared_at(L.b.add(stage, L.b.mul(index, c32(itemsize))), ty)


def _store_stage(L: KernelLowering, ring: Ring, stage: ir.Value, lay: TileLayout, dt: DType,
                 regs: Sequence[ir.Value]) -> None:
    """Every register to its element's row-major place in the stage (replicas store the
    same value to the same place)."""
    from tilekit.codegen.lower_memory import pack

    b = L.b
    mem = S.memory_type(dt)
    size = max(1, dt.itemsize)
    for g, vec in _stage_groups(L, lay, ring, size):
        if vec:
            ptr = _stage_address(L, ring, lay, stage, g[0], size, ir.VectorType(mem, len(g)))
            b.store(pack(L, dt, [regs[r] for r in g]), ptr, align=len(g) * size)
        else:
            ptr = _stage_address(L, ring, lay, stage, g[0], size, mem)
            b.store(S.to_memory(b, regs[g[0]], dt), ptr, align=size)


def _load_stage(L: KernelLowering, ring: Ring, stage: ir.Value, lay: TileLayout, dt: DType
                ) -> list[ir.Value]:
    from tilekit.codegen.lower_memory import unpack

    b = L.b
    mem = S.memory_type(dt)
    size = max(1, dt.itemsize)
    out: list[ir.Value] = [None] * lay.num_regs  # type: ignore[list-item]
    for g, vec in _stage_groups(L, lay, ring, size):
        if vec:
            ptr = _stage_address(L, ring, lay, stage, g[0], size, ir.VectorType(mem, len(g)))
            values = unpack(L, dt, b.load(ptr, align=len(g) * size), len(g))
        else:
            ptr = _stage_address(L, ring, lay, stage, g[0], size, mem)
            values = [S.from_memory(b, b.load(ptr, align=size), dt)]
        for r, v in zip(g, values):
            out[r] = v
    return out


@rule("smem_read")
def _smem_read(L: KernelLowering, op: Operation) -> None:
    from tilekit.layout.mma_sync import StagedOperand
    from tilekit.layout.wgmma_plan import WgmmaStage

    _jitter(L)
    ring = _ring(L, op.operand("src"))
    stage = ring.stage(L, _scalar32(L, op.operand("slot")))
    plan = op.attrs.get("read")
    if plan is None:
        L.define(op.result, _load_stage(L, ring, stage, layout_of(op.result), ring.type.dtype))
        return
    if isinstance(plan, WgmmaStage):  # wgmma reads the stage itself: the value is where
        from tilekit.codegen.lower_wgmma import StageOperand

        if plan != ring.type.layout:
            raise LoweringError("internal: a wgmma read does not match its ring's layout",
                                op.loc)
        L.values[id(op.result)] = StageOperand(plan, stage)
        return
    # A stage laid out for a dot: ldmatrix straight into the fragment layout (the plan's).
    from tilekit.codegen.lower_mma import read_stage

    if not isinstance(plan, StagedOperand) or plan.swizzle != _swizzle(ring.type) \
            or plan.operand is not getattr(layout_of(op.result).encoding, "operand", None):
        raise LoweringError("internal: a stage read by ldmatrix does not match its ring's "
                            "layout", op.loc)
    L.define(op.result, read_stage(L, plan, layout_of(op.result), ring.type.dtype, stage))


@rule("smem_write")
def _smem_write(L: KernelLowering, op: Operation) -> None:
    ring = _ring(L, op.operand("dst"))
    value = op.operand("value")
    stage = ring.stage(L, _scalar32(L, op.operand("slot")))
    _store_stage(L, ring, stage, layout_of(value), ring.type.dtype, L.regs(value))


# --- bulk stores ---------------------------------------------------------------------------------

@rule("copy_s2g")
def _copy_s2g(L: KernelLowering, op: Operation) -> None:
    _need_hopper(L, op, "a bulk (TMA) store")
    ring = _ring(L, op.operand("src"))
    stage = ring.stage(L, _scalar32(L, op.operand("slot")))
    m = L.async_state.tensor_map(op)
    shape = op.attrs["shape"]
    b = L.b
    with b.if_then(_elected(L)):
        for origin, offset in box_pieces(shape, m.box, ring.type.dtype.itemsize):
            src = L.shared_at(b.add(stage, c32(offset)) if offset else stage, I8)
            call(b, f"llvm.nvvm.cp.async.bulk.tensor.s2g.tile.{len(shape)}d", ir.VoidType(),
                 [src, _generic(L, m.param), *_tma_coords(L, op, origin), ir.Constant(I64, 0),
                  ir.Constant(I1, 0)])
        call(b, "llvm.nvvm.cp.async.bulk.commit.group", ir.VoidType(), [])
    L.values[id(op.result)] = [c32(0)]  # a token: the elected thread's bulk group
    L.after_global_write()


@rule("store_wait")
def _store_wait(L: KernelLowering, op: Operation) -> None:
    _need_hopper(L, op, "waiting for a bulk store")
    _wait_bulk_reads(L, int(op.attrs.get("pending", 0)))


@rule("store_drain")
def _store_drain(L: KernelLowering, op: Operation) -> None:
    _need_hopper(L, op, "waiting for bulk stores")
    _wait_bulk_reads(L, 0)


def _wait_bulk_reads(L: KernelLowering, pending: int) -> None:
    """``cp.async.bulk.wait_group.read pending`` in the elected thread (which issued the
    role's bulk stores), then the role's barrier: the stages those stores read are free
    for every thread of the role only now."""
    with L.b.if_then(_elected(L)):
        call(L.b, "llvm.nvvm.cp.async.bulk.wait.group.read", ir.VoidType(), [c32(pending)])
    L.barrier()
