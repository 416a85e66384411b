"""IR with layouts -> one LLVM kernel function, per thread.

Every tile value becomes the list of registers its layout gives each thread
(``TileLayout.num_regs`` LLVM values; a scalar is one). A register's tile
coordinate is ``offset(register) + lane term + warp term`` (the layout's affine
form): the thread terms are computed once, in a prologue block that dominates
the whole body, and a register's coordinate is that plus a constant.

Ops are lowered by rules registered per op name (``rules.RULES``); this module
holds the shared machinery (values, coordinates, ownership, shared-memory
scratch, barriers, predicated loads and stores) and the rules for values made
from nothing, elementwise ops and control flow. ``lower_memory`` and
``lower_tiles`` hold the others, ``lower_async`` those of scheduled pipelines
(whose warp roles make thread ids, warp counts and ``barrier()`` relative to the
running ``Role``). A missing rule is a ``LoweringError`` naming the op and the
user's line.

Dynamic shared memory holds the pipelines' rings and barriers from offset 0 (their
ops' ``offset``), then, from the next 128-byte boundary, the scratch that conversions
and reductions share (``smem_ptr``); ``shared_bytes`` is the total.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from tilekit.codegen import scalar_ops as S
from tilekit.codegen.artifact import AccessSite, AssertSite, ParamSlot, SlotKind
from tilekit.codegen.mathlib import MathLib
from tilekit.codegen.rules import RULES, rule
from tilekit.codegen.target import Target
from tilekit.errors import LoweringError, SourceLoc, TilekitError
from tilekit.ir.core import Block, Function, Operation, Value
from tilekit.ir.dtypes import DType
from tilekit.ir.ops.elementwise import BINARY, COMPARE, UNARY
from tilekit.ir.types import TensorType, TileType
from tilekit.layout.tile_layouts import ThreadTerm, TileLayout

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)

#: Where the layout-conversion scratch starts after the pipelines' rings and barriers.
SCRATCH_ALIGN = 128
#: The bytes of one ``CUtensorMap`` kernel parameter and its alignment.
TENSOR_MAP_BYTES = 128
TENSOR_MAP_ALIGN = 64


def c32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


@dataclass(frozen=True)
class Role:
    """The threads that run the code being lowered: the whole block (``cta``), or one warp
    role of a warp-specialized kernel (``tilekit.codegen.lower_async``). Tile layouts,
    thread ids, ``num_warps``, ``threads`` and ``barrier()`` are relative to it: warp
    ``first_warp`` of the block is the role's warp 0. ``barrier_id`` 0 is ``bar.sync 0``
    (every thread of the block); another id is a named barrier of the role's threads."""

    name: str
    first_warp: int
    num_warps: int
    barrier_id: int = 0


@dataclass
class TensorHandle:
    """A tensor argument inside the kernel: base address and its runtime sizes/strides."""

    name: str
    dtype: DType
    index: DType
    base: ir.Value  # i64 address
    sizes: list[ir.Value]
    strides: list[ir.Value]  # as addresses may assume them (the bucket's facts)
    raw_strides: list[ir.Value]  # the launch's values (what X.stride(i) returns)

    @property
    def index_type(self) -> ir.IntType:
        return ir.IntType(self.index.bits)


class KernelLowering:
    """Lowers one IR function (with layouts) to one LLVM kernel."""

    def __init__(self, fn: Function, target: Target, num_warps: int,
                 aligned16: frozenset[str] = frozenset(),
                 unit_inner: frozenset[str] = frozenset(),
                 strides16: frozenset[str] = frozenset(),
                 divisible: frozenset[tuple[str, int, int]] = frozenset(),
                 pipeline_smem_bytes: int = 0, check: bool = False) -> None:
        from tilekit.codegen import amdgpu, lower_async, nvptx

        self.fn = fn
        self.target = target
        self.warp_size = target.warp_size
        self.role = Role("cta", 0, num_warps)
        # Warp roles (lower_async): the block has the producer warps besides ``num_warps``.
        self.split = lower_async.role_split(fn, target, num_warps)
        self.block_warps = self.split.block_warps if self.split else num_warps
        self.aligned16 = aligned16  # the bucket's facts: tensor argument names
        self.unit_inner = unit_inner
        self.strides16 = strides16
        # (tensor, dim, n): the tensor's size along dim is a positive multiple of n (a tile
        # size of a tile view on it), so a tile is in bounds along dim when its start is.
        self.divisible = divisible
        self.vendor = nvptx.Vendor() if target.vendor == "nvptx" else amdgpu.Vendor()
        self.module = ir.Module(name=fn.name)
        self.module.triple = target.triple
        self.math = MathLib.for_target(target.triple)
        self.values: dict[int, Any] = {}
        self.asserts: list[AssertSite] = []
        # Check mode (TILEKIT_CHECK): raw accesses are bounds-checked (bounds_check.guard)
        self.check = check
        self.access_sites: list[AccessSite] = []
        # Shared memory: the pipelines' rings and barriers in [0, pipeline_bytes) (offsets
        # set by tilekit.sched), then the scratch of conversions and reductions.
        self.pipeline_bytes = pipeline_smem_bytes
        self.scratch_base = _round_up(pipeline_smem_bytes, SCRATCH_ALIGN)
        self.scratch_bytes = 0
        # After the last pipeline ended (its final CTA barrier, then its barriers'
        # invalidation), an op's scratch starts at 0, over the drained stages, when it fits
        # below the first mbarrier: an epilogue's conversion of a large accumulator then
        # needs no room beside the rings (the invalidation may still be running).
        self.after_pipelines = False
        self.late_scratch_bytes = 0
        self._scratch_at = self.scratch_base
        self._last_pipeline_op = next((id(op) for op in reversed(fn.entry.ops)
                                       if op.name == "mbarrier_inval"), None)
        self._late_limit = min((op.attrs.get("offset", 0) for op in fn.walk()
                                if op.name == "mbarrier_alloc"), default=0)
        # A global store or atomic since the last barrier: a later read by another thread
        # of the program must see it (the interpreter runs a program in order).
        self.dirty = False
        self.slots: list[ParamSlot] = []
        self._terms: dict[tuple, ir.Value] = {}
        self.async_state = lower_async.AsyncState.of(fn, self)
        self._build_signature()

    # --- the running role ------------------------------------------------------------------

    @property
    def num_warps(self) -> int:
        return self.role.num_warps

    @property
    def threads(self) -> int:
        return self.role.num_warps * self.warp_size

    @property
    def warp(self) -> ir.Value:
        """The warp id within the running role (computed in the prologue)."""
        return self._role_id("warp", self.physical_warp, self.role.first_warp)

    @property
    def tid(self) -> ir.Value:
        """The thread id within the running role."""
        return self._role_id("tid", self.physical_tid, self.role.first_warp * self.warp_size)

    def _role_id(self, what: str, physical: ir.Value, first: int) -> ir.Value:
        if not first:
            return physical
        key = (what, first)
        if key not in self._terms:
            self._terms[key] = self.pb.sub(physical, c32(first))
        return self._terms[key]

    @contextlib.contextmanager
    def as_role(self, role: Role) -> Iterator[Role]:
        """Lower the ops of the block as run by ``role``'s threads."""
        saved, self.role = self.role, role
        dirty, self.dirty = self.dirty, False
        try:
            yield role
        finally:
            self.role, self.dirty = saved, dirty

    # --- signature and prologue ------------------------------------------------------------

    def _build_signature(self) -> None:
        types: list[ir.Type] = []
        for arg in self.fn.args:
            t = arg.type
            name = arg.name_hint or "arg"
            if isinstance(t, TensorType):
                index = ir.IntType(t.index.bits)
                self.slots.append(ParamSlot(SlotKind.POINTER, name, "uint64"))
                types.append(I64)
                for axis in range(t.rank):
                    self.slots.append(ParamSlot(SlotKind.SIZE, name, t.index.long, axis))
                    types.append(index)
                for axis in range(t.rank):
                    self.slots.append(ParamSlot(SlotKind.STRIDE, name, t.index.long, axis))
                    types.append(index)
            else:
                assert isinstance(t, TileType) and t.is_scalar
                self.slots.append(ParamSlot(SlotKind.SCALAR, name, t.dtype.long))
                types.append(S.memory_type(t.dtype))
        maps = self.async_state.tensor_maps
        for m in maps:
            self.slots.append(ParamSlot(SlotKind.TENSOR_MAP, m.arg, "tensormap", box=m.box,
                                        swizzle=m.swizzle))
            types.append(ir.PointerType(ir.ArrayType(I8, TENSOR_MAP_BYTES)))
        self.slots.append(ParamSlot(SlotKind.STATUS, "", "uint64"))
        types.append(I64)
        self.func = self.vendor.kernel_function(self.module, self.fn.name, types,
                                                self.block_warps * self.warp_size)
        if maps:
            first = len(types) - 1 - len(maps)
            for k in range(first, first + len(maps)):
                arg = self.func.args[k]
                arg.add_attribute("byval")
                arg.attributes.align = TENSOR_MAP_ALIGN
            self.vendor.grid_constant(self.module, self.func, range(first, first + len(maps)))
        self.prologue = self.func.append_basic_block("prologue")
        body = self.func.append_basic_block("body")
        self.pb = ir.IRBuilder(self.prologue)
        self.b = ir.IRBuilder(body)
        self._body = body
        self.smem = self.vendor.shared_base(self.module, 0)
        if self.pipeline_bytes:  # TMA writes stages at 128-byte aligned addresses
            self.smem.align = max(self.smem.align, SCRATCH_ALIGN)
        if self._wgmma_stages():  # wgmma stages start on the 1024-byte swizzle repeat
            from tilekit.layout.wgmma_plan import STAGE_ALIGN

            self.smem.align = max(self.smem.align, STAGE_ALIGN)
        params = iter(self.func.args)
        for arg in self.fn.args:
            t = arg.type
            if isinstance(t, TensorType):
                base = next(params)
                sizes = [next(params) for _ in range(t.rank)]
                raw = [next(params) for _ in range(t.rank)]
                strides = self._strides(raw, t, arg.name_hint or "")
                self.values[id(arg)] = TensorHandle(arg.name_hint or "tensor", t.dtype, t.index,
                                                    base, sizes, strides, raw)
            else:
                self.values[id(arg)] = [S.from_memory(self.pb, next(params), t.dtype)]
        for m in maps:
            m.param = next(params)
        self.status = next(params)
        self.physical_tid = self.vendor.thread_id(self.pb)
        shift = self.warp_size.bit_length() - 1
        self.lane = self.pb.and_(self.physical_tid, c32(self.warp_size - 1))
        self.physical_warp = self.pb.lshr(self.physical_tid, c32(shift))

    def _wgmma_stages(self) -> bool:
        """Whether a pipeline ring is laid out for wgmma (``wgmma_plan.WgmmaStage``; a
        kernel without rings does not import it)."""
        allocs = [op for op in self.fn.walk() if op.name == "smem_alloc"]
        if not allocs:
            return False
        from tilekit.layout.wgmma_plan import WgmmaStage

        return any(isinstance(op.result.type.layout, WgmmaStage) for op in allocs)

    def _strides(self, strides: list[ir.Value], t: TensorType, name: str) -> list[ir.Value]:
        """The strides as code may assume them (the specialization's bucket facts): the
        last is 1 under ``unit_inner``; the others are multiples of 16 bytes under
        ``strides16``, said to LLVM by clearing their low bits (which are zero), so that
        the alignment of 16-byte vectors folds at compile time."""
        out = list(strides)
        if not out:
            return out
        ity = ir.IntType(t.index.bits)
        if name in self.unit_inner:
            out[-1] = ir.Constant(ity, 1)
        step = 16 // t.dtype.itemsize if t.dtype.itemsize <= 16 else 1
        if name in self.strides16 and step > 1:
            mask = ir.Constant(ity, ~(step - 1))
            out[:-1] = [self.pb.and_(s_, mask) for s_ in out[:-1]]
        return out

    def finish(self) -> ir.Module:
        self.b.ret_void()
        self.pb.branch(self._body)
        return self.module

    # --- values ----------------------------------------------------------------------------

    def regs(self, value: Value) -> list[ir.Value]:
        try:
            return self.values[id(value)]
        except KeyError:
            raise LoweringError("internal: a value was used before it was lowered") from None

    def tensor(self, value: Value) -> TensorHandle:
        return self.values[id(value)]

    def define(self, value: Value, regs: Sequence[ir.Value]) -> None:
        lay = layout_of(value)
        if len(regs) != lay.num_regs:
            raise LoweringError(f"internal: {len(regs)} registers for a layout of "
                                f"{lay.num_regs}")
        self.values[id(value)] = list(regs)

    # --- coordinates and ownership --------------------------------------------------------

    def term(self, which: str, t: ThreadTerm) -> ir.Value:
        """``((id // div) % mod) * mult`` of the lane or warp id, computed in the prologue."""
        if t.mod == 1 or t.mult == 0:
            return c32(0)
        key = (which, t.div, t.mod, t.mult, self.role.first_warp if which == "warp" else 0)
        if key not in self._terms:
            pb = self.pb
            ident = self.lane if which == "lane" else self.warp
            v = pb.lshr(ident, c32(t.div.bit_length() - 1)) if t.div > 1 else ident
            v = pb.and_(v, c32(t.mod - 1))
            if t.mult != 1:
                v = pb.mul(v, c32(t.mult))
            self._terms[key] = v
        return self._terms[key]

    def in_prologue(self, key: tuple, make: Callable[[ir.IRBuilder], Any]) -> Any:
        """``make(prologue builder)``, emitted once per kernel for ``key``: values of the
        thread ids alone, which dominate the whole body."""
        key = ("prologue", *key)
        if key not in self._terms:
            self._terms[key] = make(self.pb)
        return self._terms[key]

    def thread_part(self, lay: TileLayout, dim: int) -> ir.Value:
        d = lay.dims[dim]
        key = ("part", d.lane, d.warp, self.role.first_warp)
        if key not in self._terms:
            lane, warp = self.term("lane", d.lane), self.term("warp", d.warp)
            no_warp = d.warp.mod == 1 or d.warp.mult == 0
            self._terms[key] = lane if no_warp else self.pb.add(lane, warp)
        return self._terms[key]

    def coord_unwrapped(self, lay: TileLayout, reg: int, dim: int) -> ir.Value:
        off = lay.dims[dim].offsets[reg]
        part = self.thread_part(lay, dim)
        return self.b.add(part, c32(off)) if off else part

    def coord(self, lay: TileLayout, reg: int, dim: int) -> ir.Value:
        """Register ``reg``'s coordinate along ``dim``, wrapped into the tile (replicas)."""
        c = self.coord_unwrapped(lay, reg, dim)
        d = lay.dims[dim]
        if not lay.may_wrap(reg, dim):
            return c
        if d.offsets[reg] + d.lane.span + d.warp.span < 2 * d.extent:
            inside = self.b.icmp_unsigned("<", c, c32(d.extent))
            return self.b.select(inside, c, self.b.sub(c, c32(d.extent)))
        return self.b.urem(c, c32(d.extent))

    def owned(self, lay: TileLayout, reg: int) -> ir.Value | None:
        """True in the one thread that owns register ``reg``'s element (None: always)."""
        conds = []
        for k, d in enumerate(lay.dims):
            if lay.may_wrap(reg, k):
                conds.append(self.b.icmp_unsigned("<", self.coord_unwrapped(lay, reg, k),
                                                  c32(d.extent)))
        for lane_t, warp_t in lay.replica_terms:
            for which, t in (("lane", lane_t), ("warp", warp_t)):
                if t.mod > 1:
                    conds.append(self.b.icmp_unsigned("==", self.term(which, ThreadTerm(
                        t.div, t.mod, 1)), c32(0)))
        return self.all_of(conds)

    def all_of(self, conds: Sequence[ir.Value | None]) -> ir.Value | None:
        out = None
        for c in conds:
            if c is None:
                continue
            out = c if out is None else self.b.and_(out, c)
        return out

    def flat_index(self, lay: TileLayout, reg: int) -> ir.Value:
        """Row-major index of register ``reg``'s (wrapped) element in the tile."""
        flat = None
        for k in range(lay.rank):
            c = self.coord(lay, reg, k)
            flat = c if flat is None else self.b.add(self.b.mul(flat, c32(lay.shape[k])), c)
        return flat if flat is not None else c32(0)

    # --- shared-memory scratch and barriers --------------------------------------------------

    def need_scratch(self, nbytes: int) -> None:
        if nbytes and self.split is not None and self.role.name == "producer":
            # The producer role runs beside the consumer role, which owns the scratch.
            raise LoweringError("internal: an op in the producer role of a warp-specialized "
                                "pipeline needs shared-memory scratch")
        if self.after_pipelines and nbytes <= self._late_limit:
            self.late_scratch_bytes = max(self.late_scratch_bytes, nbytes)
            self._scratch_at = 0
        else:
            self.scratch_bytes = max(self.scratch_bytes, nbytes)
            self._scratch_at = self.scratch_base

    @property
    def shared_bytes(self) -> int:
        """The dynamic shared memory the kernel needs: the pipelines' area, then the scratch
        used while they run; or the scratch used after them, from 0, when that is more."""
        during = self.pipeline_bytes
        if self.scratch_bytes:
            during = self.scratch_base + self.scratch_bytes
        return max(during, self.late_scratch_bytes)

    def smem_ptr(self, byte_offset: ir.Value, elem: ir.Type) -> ir.Value:
        """A scratch address: ``byte_offset`` from the start of the scratch area."""
        if self._scratch_at:
            byte_offset = self.b.add(byte_offset, c32(self._scratch_at))
        return self.shared_at(byte_offset, elem)

    def shared_at(self, byte_offset: ir.Value, elem: ir.Type) -> ir.Value:
        """The address ``byte_offset`` bytes into dynamic shared memory, as ``elem*``."""
        space = self.vendor.shared_addrspace
        p = self.b.gep(self.smem, [c32(0), byte_offset])
        return self.b.bitcast(p, ir.PointerType(elem, space))

    def barrier(self) -> None:
        """Every thread of the running role meets (``bar.sync 0`` for the whole block)."""
        if self.role.barrier_id:
            self.vendor.named_barrier(self.b, self.role.barrier_id, self.threads)
        else:
            self.vendor.barrier(self.b)
        self.dirty = False

    def before_global_read(self) -> None:
        """Order this program's earlier global writes before a read: a CTA barrier (it
        orders global memory among the CTA's threads), only when there were writes."""
        if self.dirty:
            self.barrier()

    def after_global_write(self) -> None:
        self.dirty = True

    def stage(self, lay: TileLayout, dtype: DType, regs: Sequence[ir.Value],
              index_of=None) -> None:
        """Write every register to scratch at its element's row-major index (replicas write
        the same value to the same place), between barriers."""
        mem = S.memory_type(dtype)
        size = max(1, dtype.itemsize)
        self.need_scratch(_numel(lay.shape) * size)
        self.barrier()
        for r, v in enumerate(regs):
            idx = index_of(r) if index_of else self.flat_index(lay, r)
            ptr = self.smem_ptr(self.b.mul(idx, c32(size)), mem)
            self.b.store(S.to_memory(self.b, v, dtype), ptr)
        self.barrier()

    def unstage(self, lay: TileLayout, dtype: DType, index_of=None) -> list[ir.Value]:
        """Read a staged tile back in ``lay``."""
        mem = S.memory_type(dtype)
        size = max(1, dtype.itemsize)
        out = []
        for r in range(lay.num_regs):
            idx = index_of(r) if index_of else self.flat_index(lay, r)
            out.append(S.from_memory(self.b, self.b.load(
                self.smem_ptr(self.b.mul(idx, c32(size)), mem)), dtype))
        return out

    # --- predicated memory -------------------------------------------------------------------

    def if_then_store(self, pred: ir.Value | None, store) -> None:
        self.guarded_stores([pred], [store])

    def select_load(self, pred: ir.Value | None, load, other: ir.Value) -> ir.Value:
        """``load()`` where ``pred`` holds, else ``other``, touching no memory otherwise."""
        return self.guarded_loads([pred], [load], [other])[0]

    def guarded_loads(self, preds: Sequence[ir.Value | None],
                      loads: Sequence[Callable[[], ir.Value]],
                      others: Sequence[ir.Value]) -> list[ir.Value]:
        """``select_load`` of each element, with one branch for each run of elements under
        the same predicate: a tile's tail along a dim of extent 1 (a row past the tensor's
        end) is one compare for the whole row, not one branch per element."""
        out: list[ir.Value] = []
        for pred, run in _runs(preds):
            if pred is None:
                out.extend(loads[k]() for k in run)
                continue
            before = self.b.block
            with self.b.if_then(pred):
                values = [loads[k]() for k in run]
                then_block = self.b.block
            out.extend(self.merge(values, then_block, [others[k] for k in run], before))
        return out

    def guarded_stores(self, preds: Sequence[ir.Value | None],
                       stores: Sequence[Callable[[], object]]) -> None:
        """``if_then_store`` of each element, one branch for each run under one predicate."""
        for pred, run in _runs(preds):
            if pred is None:
                for k in run:
                    stores[k]()
                continue
            with self.b.if_then(pred):
                for k in run:
                    stores[k]()

    def merge(self, a: Sequence[ir.Value], a_block: ir.Block, b: Sequence[ir.Value],
              b_block: ir.Block) -> list[ir.Value]:
        """Phis at the current block joining ``a`` (from ``a_block``) and ``b``."""
        out = []
        for x, y in zip(a, b):
            phi = self.b.phi(x.type)
            phi.add_incoming(x, a_block)
            phi.add_incoming(y, b_block)
            out.append(phi)
        return out

    @contextlib.contextmanager
    def counted_loop(self, count: int, name: str) -> Iterator[tuple[ir.Value, ir.Block]]:
        """``for j in range(count)`` (count >= 1) as an LLVM loop; yields ``j`` and the block
        before the loop (for the incoming values of phis the body creates first)."""
        b = self.b
        entry = b.block
        loop = self.func.append_basic_block(name)
        done = self.func.append_basic_block(name + "_end")
        b.branch(loop)
        b.position_at_end(loop)
        j = b.phi(I32)
        j.add_incoming(c32(0), entry)
        yield j, entry
        nxt = b.add(j, c32(1))
        j.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_unsigned("<", nxt, c32(count)), loop, done)
        b.position_at_end(done)

    # --- errors reported through the status word ---------------------------------------------

    def report(self, failed: ir.Value, message: str, loc: SourceLoc | None) -> None:
        """Where ``failed`` holds, record assertion site ``message`` in the status word (the
        first failure wins) and the program id; the runtime raises it after the launch."""
        site = AssertSite(message, loc.file if loc else "", loc.line if loc else 0,
                          loc.col if loc else None)
        self.asserts.append(site)
        code = len(self.asserts)
        with self.b.if_then(failed):
            words = self.b.inttoptr(self.status, ir.PointerType(I32, self.vendor.global_addrspace))
            old = self.b.cmpxchg(words, c32(0), c32(code), "monotonic", "monotonic")
            won = self.b.extract_value(old, 1)
            with self.b.if_then(won):
                for axis in range(3):
                    self.b.store(self.vendor.block_id(self.b, axis),
                                 self.b.gep(words, [c32(1 + axis)]))

    # --- walking ---------------------------------------------------------------------------

    def lower_block(self, block: Block) -> list[list[ir.Value]]:
        """Lower a block's ops; the yielded values' registers (for loops and branches)."""
        for op in block.ops:
            if op.opdef.is_terminator:
                return [self.regs(v) for v in op.operands]
            self.lower_op(op)
        return []

    def lower_op(self, op: Operation) -> None:
        fn = RULES.get(op.name)
        if fn is None:
            raise LoweringError(f"no lowering for `{op.name}` on {self.target.name}", op.loc)
        try:
            fn(self, op)
            if id(op) == self._last_pipeline_op:
                self.after_pipelines = True
        except TilekitError:
            raise
        except NotImplementedError as exc:
            raise LoweringError(f"`{op.name}` cannot be lowered for {self.target.name}: "
                                f"{exc}", op.loc) from None


def layout_of(value: Value) -> TileLayout:
    t = value.type
    if not isinstance(t, TileType) or not isinstance(t.layout, TileLayout):
        raise LoweringError(f"internal: value of type {t} has no layout")
    return t.layout


def _runs(preds: Sequence[ir.Value | None]) -> Iterator[tuple[ir.Value | None, range]]:
    """Maximal runs of consecutive positions whose predicate is the same value."""
    start = 0
    for k in range(1, len(preds) + 1):
        if k == len(preds) or preds[k] is not preds[start]:
            yield preds[start], range(start, k)
            start = k


def dtype_of(value: Value) -> DType:
    return value.type.dtype


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


# --- rules: values made from nothing ----------------------------------------------------------

@rule("constant")
def _constant(L: KernelLowering, op: Operation) -> None:
    lay = layout_of(op.result)
    value = S.constant(op.attrs["dtype"], op.attrs["value"])
    L.define(op.result, [value] * lay.num_regs)


@rule("arange")
def _arange(L: KernelLowering, op: Operation) -> None:
    lay = layout_of(op.result)
    start = op.attrs["start"]
    if dtype_of(op.result) is DType.INT64:  # (this thread's part) + (the register's constant)
        L.define(op.result, [_coord64(L, lay, r) if start == 0 else L.b.add(
            _coord64(L, lay, r), ir.Constant(I64, start)) for r in range(lay.num_regs)])
        return
    L.define(op.result, [L.b.add(L.coord(lay, r, 0), c32(start)) if start else
                         L.coord(lay, r, 0) for r in range(lay.num_regs)])


def _coord64(L: KernelLowering, lay: TileLayout, reg: int) -> ir.Value:
    """Register ``reg``'s coordinate (a 1-D layout) in 64 bits: the thread's part widened
    once plus the register's constant, which LLVM sees through when it checks that a
    vector's offsets are consecutive (a widened 32-bit coordinate it does not)."""
    if lay.may_wrap(reg, 0):
        return L.b.zext(L.coord(lay, reg, 0), I64)
    off = lay.dims[0].offsets[reg]
    part = L.b.zext(L.thread_part(lay, 0), I64)
    return L.b.add(part, ir.Constant(I64, off)) if off else part


@rule("program_id")
def _program_id(L: KernelLowering, op: Operation) -> None:
    L.define(op.result, [L.vendor.block_id(L.b, op.attrs["axis"])])


@rule("num_programs")
def _num_programs(L: KernelLowering, op: Operation) -> None:
    L.define(op.result, [L.vendor.num_blocks(L.b, op.attrs["axis"])])


@rule("dim", "stride")
def _tensor_meta(L: KernelLowering, op: Operation) -> None:
    t = L.tensor(op.operands[0])
    source = t.sizes if op.name == "dim" else t.raw_strides
    L.define(op.result, [source[op.attrs["axis"]]])


# --- rules: elementwise -----------------------------------------------------------------------

def _zip_regs(L: KernelLowering, op: Operation) -> list[list[ir.Value]]:
    return [L.regs(v) for v in op.operands]


def _binary(L: KernelLowering, op: Operation) -> None:
    x, y = _zip_regs(L, op)
    dt = dtype_of(op.operands[0])
    if op.name == "div" and S.SharedDivisor.applies(dt):
        L.define(op.result, _divide(L, dt, x, y))
        return
    L.define(op.result, [S.binary(L.b, L.math, op.name, dt, a, b) for a, b in zip(x, y)])


def _divide(L: KernelLowering, dt: DType, x: list[ir.Value], y: list[ir.Value]
            ) -> list[ir.Value]:
    """Float ``x / y``: a divisor that several registers share (a row's sum, a broadcast
    scalar) through ``S.SharedDivisor``, its reciprocal computed once; a constant whose
    reciprocal is exact (LLVM makes that a multiply) and the others through ``fdiv``."""
    uses = Counter(id(d) for d in y)
    shared: dict[int, S.SharedDivisor] = {}
    out = []
    for a, d in zip(x, y):
        if uses[id(d)] < 2 or _exact_reciprocal(d):
            out.append(S.binary(L.b, L.math, "div", dt, a, d))
            continue
        if id(d) not in shared:
            shared[id(d)] = S.SharedDivisor(L.b, L.math, dt, d)
        out.append(shared[id(d)](L.b, a))
    return out


def _exact_reciprocal(d: ir.Value) -> bool:
    """Whether ``d`` is a constant power of two (or zero, infinite, NaN)."""
    if not isinstance(d, ir.Constant) or not isinstance(d.constant, (int, float)):
        return False
    value = float(d.constant)
    return not math.isfinite(value) or value == 0 or math.frexp(value)[0] in (0.5, -0.5)


def _compare(L: KernelLowering, op: Operation) -> None:
    x, y = _zip_regs(L, op)
    dt = dtype_of(op.operands[0])
    L.define(op.result, [S.compare(L.b, op.name, dt, a, b) for a, b in zip(x, y)])


def _unary(L: KernelLowering, op: Operation) -> None:
    (x,) = _zip_regs(L, op)
    dt = dtype_of(op.operands[0])
    L.define(op.result, [S.unary(L.b, L.math, op.name, dt, a) for a in x])


for _name in BINARY:
    rule(_name)(_binary)
for _name in COMPARE:
    rule(_name)(_compare)
for _name in UNARY:
    rule(_name)(_unary)


@rule("select")
def _select(L: KernelLowering, op: Operation) -> None:
    c, x, y = _zip_regs(L, op)
    L.define(op.result, [S.select(L.b, p, a, b) for p, a, b in zip(c, x, y)])


@rule("fma")
def _fma(L: KernelLowering, op: Operation) -> None:
    x, y, z = _zip_regs(L, op)
    dt = dtype_of(op.operands[0])
    L.define(op.result, [S.fma(L.b, dt, a, b, c) for a, b, c in zip(x, y, z)])


@rule("cast")
def _cast(L: KernelLowering, op: Operation) -> None:
    (x,) = _zip_regs(L, op)
    src, dst = dtype_of(op.operands[0]), op.attrs["dtype"]
    L.define(op.result, [S.cast(L.b, src, dst, a) for a in x])


@rule("bitcast")
def _bitcast(L: KernelLowering, op: Operation) -> None:
    (x,) = _zip_regs(L, op)
    src, dst = dtype_of(op.operands[0]), op.attrs["dtype"]
    L.define(op.result, [S.bitcast(L.b, src, dst, a) for a in x])


# --- rules: control flow ----------------------------------------------------------------------

@rule("for")
def _for(L: KernelLowering, op: Operation) -> None:
    """``for iv = lo; step > 0 ? iv < hi : iv > hi; iv += step`` with carried registers as
    phis. A zero step is reported through the status word and runs no iteration."""
    b = L.b
    lo, hi, step = (L.regs(op.operand(s))[0] for s in ("lo", "hi", "step"))
    ity = lo.type
    signed = op.operand("lo").type.dtype.is_signed
    # The induction variable runs in 64 bits (the interpreter's are Python ints): a 32-bit
    # `iv + step` past 2^31 - 1 must end the loop, not wrap to a negative index.
    wide = ir.IntType(64)
    zero = ir.Constant(ity, 0)
    step_op = getattr(op.operand("step"), "owner", None)
    if step_op is None or step_op.name != "constant":  # a literal step is never 0
        L.report(b.icmp_signed("==", step, zero), "loop step is 0", op.loc)
    inits = [L.regs(v) for v in op.variadic("inits")]
    body = op.regions[0].block
    header = L.func.append_basic_block("loop")
    body_bb = L.func.append_basic_block("loop_body")
    exit_bb = L.func.append_basic_block("loop_exit")
    writes = _writes(body)
    if writes:
        L.dirty = True  # the previous iteration's writes (conservatively, also before it)
    lo_w, hi_w, step_w = (_widen_iv(b, v, wide, signed) for v in (lo, hi, step))
    entry = b.block
    b.branch(header)
    b.position_at_end(header)
    iv = b.phi(wide)
    iv.add_incoming(lo_w, entry)
    phis = []
    for regs in inits:
        row = []
        for v in regs:
            p = b.phi(v.type)
            p.add_incoming(v, entry)
            row.append(p)
        phis.append(row)
    zero_w = ir.Constant(wide, 0)
    if signed:
        up = b.and_(b.icmp_signed(">", step_w, zero_w), b.icmp_signed("<", iv, hi_w))
        down = b.and_(b.icmp_signed("<", step_w, zero_w), b.icmp_signed(">", iv, hi_w))
    else:  # an unsigned step is never negative
        up = b.and_(b.icmp_unsigned(">", step_w, zero_w), b.icmp_unsigned("<", iv, hi_w))
        down = ir.Constant(I1, 0)
    b.cbranch(b.or_(up, down), body_bb, exit_bb)
    b.position_at_end(body_bb)
    L.values[id(body.args[0])] = [b.trunc(iv, ity) if ity.width < 64 else iv]
    for arg, row in zip(body.args[1:], phis):
        L.values[id(arg)] = list(row)
    yielded = L.lower_block(body)
    latch = b.block
    iv.add_incoming(b.add(iv, step_w), latch)
    for row, new in zip(phis, yielded):
        for p, v in zip(row, new):
            p.add_incoming(v, latch)
    b.branch(header)
    b.position_at_end(exit_bb)
    if writes:
        L.dirty = True
    drained = op.attrs.get("wgmma_drain", ())
    if drained:  # a pipelined wgmma dot's last group is still in flight: wait for it
        from tilekit.codegen.lower_wgmma import drain

        flat = [v for k in drained for v in phis[k]]
        out = iter(drain(b, flat))
        for k in drained:
            phis[k] = [next(out) for _ in phis[k]]
    for res, row in zip(op.results, phis):
        L.values[id(res)] = list(row)


def _widen_iv(b: ir.IRBuilder, v: ir.Value, wide: ir.IntType, signed: bool) -> ir.Value:
    if v.type.width == wide.width:
        return v
    return b.sext(v, wide) if signed else b.zext(v, wide)


def _writes(block: Block) -> bool:
    """Whether a block (or anything nested in it) writes global memory."""
    return any(o.name in ("store", "tile_store", "atomic") for top in block.ops
               for o in top.walk())


@rule("when")
def _when(L: KernelLowering, op: Operation) -> None:
    b = L.b
    cond = L.regs(op.operand("cond"))[0]
    inits = [L.regs(v) for v in op.variadic("inits")]
    entry = b.block
    then_bb = L.func.append_basic_block("when")
    merge = L.func.append_basic_block("when_end")
    b.cbranch(cond, then_bb, merge)
    b.position_at_end(then_bb)
    dirty = L.dirty
    yielded = L.lower_block(op.regions[0].block)
    L.dirty = L.dirty or dirty  # the branch may not have run: keep what was pending
    then_end = b.block
    b.branch(merge)
    b.position_at_end(merge)
    for res, old, new in zip(op.results, inits, yielded):
        L.values[id(res)] = L.merge(new, then_end, old, entry)


# --- rules: debugging effects -----------------------------------------------------------------

@rule("assert")
def _assert(L: KernelLowering, op: Operation) -> None:
    cond = op.operand("cond")
    lay = layout_of(cond)
    regs = L.regs(cond)
    bad = None
    for r, v in enumerate(regs):
        own = L.owned(lay, r)
        failed = L.b.not_(v)
        if own is not None:
            failed = L.b.and_(failed, own)
        bad = failed if bad is None else L.b.or_(bad, failed)
    L.report(bad, f"device assertion failed: {op.attrs['message']}", op.loc)


_PRINTF = {DType.FLOAT16: "%f", DType.BFLOAT16: "%f", DType.FLOAT32: "%f",
           DType.FLOAT64: "%f", DType.INT64: "%lld", DType.UINT64: "%llu",
           DType.UINT8: "%u", DType.UINT16: "%u", DType.UINT32: "%u"}


@rule("print")
def _print(L: KernelLowering, op: Operation) -> None:
    """One line per owned element: ``pid (x, y, z) idx (i, j) prefix value``."""
    b = L.b
    prefix = op.attrs["prefix"].replace("%", "%%")
    for value in op.operands:
        lay = layout_of(value)
        dt = dtype_of(value)
        for r, v in enumerate(L.regs(value)):
            own = L.owned(lay, r)
            coords = [L.coord(lay, r, k) for k in range(lay.rank)]
            if dt.is_float:
                arg = S.cast(b, dt, DType.FLOAT64, v)
            elif dt.is_bool:
                arg = b.zext(v, I32)
            elif dt.bits < 32:
                arg = b.sext(v, I32) if dt.is_signed else b.zext(v, I32)
            else:
                arg = v
            spec = _PRINTF.get(dt, "%d")
            where = "" if not coords else " idx (" + ", ".join(["%d"] * len(coords)) + ")"
            fmt = f"pid (%d, %d, %d){where} {prefix}{spec}\n"

            def emit(coords=coords, arg=arg, fmt=fmt) -> None:
                ids = [L.vendor.block_id(b, a) for a in range(3)]
                L.vendor.printf(b, fmt, ids + coords + [arg])

            L.if_then_store(own, emit)


def lower_function(fn: Function, target: Target, num_warps: int,
                   aligned16: frozenset[str] = frozenset(),
                   unit_inner: frozenset[str] = frozenset(),
                   strides16: frozenset[str] = frozenset(),
                   divisible: frozenset[tuple[str, int, int]] = frozenset(),
                   pipeline_smem_bytes: int = 0, check: bool = False) -> KernelLowering:
    """Lower ``fn`` (every tile value has a layout) to an LLVM module. ``num_warps`` is the
    warps the layouts were assigned for (the consumer warps of a warp-specialized kernel,
    whose block also has the producer warps: ``KernelLowering.block_warps``);
    ``pipeline_smem_bytes`` the shared memory its scheduled pipelines take from offset 0;
    ``check``: bounds-check every raw access (``bounds_check``)."""
    from tilekit.codegen import lower_async, lower_memory, lower_tiles  # noqa: F401  (rules)

    lowering = KernelLowering(fn, target, num_warps, aligned16, unit_inner, strides16,
                              divisible, pipeline_smem_bytes, check)
    lower_async.lower_entry(lowering, fn)
    lowering.finish()
    return lowering
