"""Layout assignment: give every tile value of a kernel a ``TileLayout``.

The pass that joins the layout library to the IR. It runs on a copy of the
specialized IR, before code generation, in three steps:

1. **Anchors.** Global memory ops want their tile coalesced along the
   unit-stride dim with 16-byte vectors per thread (``tile_layouts.default_blocked``
   for the tensor's element size). A ``dot`` that fits ``mma.sync`` (``mma_sync``) wants
   the instruction's accumulator layout: that anchor is seeded first and flows forward
   through elementwise ops and loop-carried values, so that the accumulator stays in it
   across the K loop and converts once, at the store; any other ``dot`` wants its
   accumulator blocked (FMA units). Each dot records the path it takes, and why, in its
   ``path`` attribute (``TILEKIT_DUMP=layout`` prints it).
2. **Hints, backward.** From the anchors, preferred layouts flow back through
   elementwise ops, broadcasts, ``expand_dims``, reductions, permutes and
   loop-carried values to where tiles are made (``constant``, ``arange``), so
   that producers are born in the layout their consumers want.
3. **Assignment, forward.** Each op's result layout follows from its operands by
   the op's rule (elementwise: shared; ``reduce``: a slice of the operand's;
   ``expand_dims`` of a slice: its parent; ``permute``: the permuted encoding;
   carried values: the init's). Where an operand's layout is not the one the
   rule needs, an explicit ``convert_layout`` op is inserted, with the cheapest
   ``convert.plan_conversion`` plan attached when both layouts are power-of-two
   (F2) layouts, and a shared-memory staging otherwise.

Scheduled pipelines (``tilekit.sched``): a stage read into registers (``smem_read``) is
anchored like a tile load (and seeds that anchor forward, after the dots' seeds, so that a
value the loop carries and updates from it is born in its layout: no conversion per step),
unless the schedule laid the stage out for the ``dot`` that is its only reader: the read
then gives the dot's fragment layout by ``ldmatrix`` (its plan in the op's ``read``
attribute) and the dot takes the operand from registers. A tile written
into a stage (``smem_write``) is anchored like a tile store, and a ``plain`` copy's staging
load gets the same anchor as its ``staging_layout`` attribute (it has no result to carry
it). ``warp_roles``' producer region is laid out for
its ``producer_warps``; everything else for the options' warps (the consumer warps).
Tokens and rings carry no layout. An unscheduled ``pipeline`` is laid out as the loop it
means (its tiles anchored like tile loads); code generation lowers only scheduled ones.

Code generation reads these layouts and plans; it invents none.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilekit.errors import LayoutError
from tilekit.ir.core import Block, Module, Operation, Value, clone_module
from tilekit.ir.opdef import lookup
from tilekit.ir.ops.elementwise import PER_ELEMENT
from tilekit.ir.types import SharedType, TensorType, TileType
from tilekit.layout.tile_layouts import (
    BlockedEncoding,
    MmaEncoding,
    ScalarEncoding,
    SliceEncoding,
    TileLayout,
    default_blocked,
)

__all__ = ["LayoutOptions", "assign_layouts", "plan_convert"]

ELEMENTWISE = PER_ELEMENT | {"bitcast"}
MEMORY = frozenset({"load", "store", "atomic"})
#: Tile views of global memory and of pipeline stages: anchored by their tile shape.
TILE_MEMORY = frozenset({"tile_load", "tile_store", "smem_read", "smem_write", "copy_g2s"})
#: Scheduled pipeline ops without tile operands or results to lay out.
ASYNC_NO_TILES = frozenset({
    "smem_alloc", "mbarrier_alloc", "mbarrier_inval", "mbarrier_arrive", "mbarrier_expect_tx",
    "mbarrier_wait", "fence_mbarrier_init", "fence_proxy_async", "cta_barrier", "copy_s2g",
    "store_wait", "store_drain"})


@dataclass(frozen=True)
class LayoutOptions:
    """What the target fixes: threads per warp and warps per program."""

    num_warps: int = 4
    warp_size: int = 32
    bank_target: str = "sm_90"


if TYPE_CHECKING:  # mma_sync is imported by kernels with a dot, when laid out
    from tilekit.layout.mma_sync import FmaPath

    #: A dot's decision: its mma.sync layouts (accumulator, A, B), or why it stays on FMA
    #: units.
    DotFit = tuple[TileLayout, TileLayout, TileLayout] | FmaPath


def _on_fma(fit: DotFit) -> bool:
    """Whether a dot's decision keeps it on FMA units (an ``FmaPath``, not three layouts)."""
    return not isinstance(fit, tuple)


class _Assigner:
    def __init__(self, options: LayoutOptions) -> None:
        self.o = options
        self.base = options  # scalars are laid out for these, in every warp role
        self.hints: dict[int, TileLayout] = {}
        self.seeded: set[int] = set()
        self.fits: dict[tuple[int, int], DotFit] = {}
        self.wgmma_plans: dict[tuple[int, int], object] = {}  # WgmmaPlan or None

    # --- helpers ---------------------------------------------------------------------------

    def scalar(self) -> TileLayout:
        return TileLayout((), ScalarEncoding(self.base.warp_size, self.base.num_warps))

    @contextlib.contextmanager
    def warps(self, num_warps: int):
        """Lay out tiles for ``num_warps`` warps (a warp role's) inside the block."""
        saved = self.o
        self.o = LayoutOptions(num_warps, saved.warp_size, saved.bank_target)
        try:
            yield
        finally:
            self.o = saved

    def default(self, shape: tuple[int, ...], elem_bytes: int = 4) -> TileLayout:
        return default_blocked(shape, self.o.num_warps, self.o.warp_size, elem_bytes)

    def normalize(self, shape: tuple[int, ...], encoding) -> TileLayout:
        """Rank-0 layouts are all the same function (every thread holds the value)."""
        if not shape:
            return self.scalar()
        return TileLayout(shape, encoding)

    def hint(self, value: Value, layout: TileLayout | None) -> None:
        if layout is None or not isinstance(value.type, TileType):
            return
        if layout.shape != value.type.shape:
            return
        self.hints.setdefault(id(value), layout)

    def hinted(self, value: Value) -> TileLayout | None:
        return self.hints.get(id(value))

    def dot_fit(self, op: Operation) -> DotFit:
        """Whether ``op`` (a dot) runs on mma.sync with the running warps, and its layouts."""
        from tilekit.layout import banks
        from tilekit.layout.mma_sync import FmaPath, mma_layouts, mma_sync_misfit

        key = (id(op), self.o.num_warps)
        if key not in self.fits and self.wgmma_fit(op) is not None:
            a, b = op.operand("a"), op.operand("b")
            self.fits[key] = (self.wgmma_fit(op).acc, self.default(a.type.shape, 2),
                              self.default(b.type.shape, 2))
        if key not in self.fits:
            a, acc = op.operand("a").type, op.operand("acc").type
            (m, k), n = a.shape, acc.shape[1]
            why = mma_sync_misfit(m, n, k, a.dtype, acc.dtype, self.o.num_warps,
                                  self.o.warp_size, banks.target(self.o.bank_target))
            self.fits[key] = FmaPath(why) if why else mma_layouts(m, n, k, self.o.num_warps)
        return self.fits[key]

    def wgmma_fit(self, op: Operation):
        """The ``WgmmaPlan`` of a dot whose operands are both reads of stages the schedule
        laid out for wgmma (``wgmma_plan.WgmmaStage`` rings), or None. The plan must use
        the very stages the schedule made (the same warps and tile shapes)."""
        from tilekit.layout.wgmma_plan import WgmmaStage, plan_wgmma

        key = (id(op), self.o.num_warps)
        if key in self.wgmma_plans:
            return self.wgmma_plans[key]
        rings = []
        for slot in ("a", "b"):
            owner = getattr(op.operand(slot), "owner", None)
            ring = owner.operand("src").type if owner is not None \
                and owner.name == "smem_read" else None
            rings.append(ring if isinstance(ring, SharedType)
                         and isinstance(ring.layout, WgmmaStage) else None)
        plan = None
        if all(r is not None for r in rings):
            a, acc = op.operand("a").type, op.operand("acc").type
            plan = plan_wgmma(a.shape[0], acc.shape[1], a.shape[1], a.dtype, self.o.num_warps)
            if (plan.a, plan.b) != (rings[0].layout, rings[1].layout):
                raise LayoutError("internal: a dot reads wgmma stages laid out for another "
                                  f"plan ({rings[0].layout}; {rings[1].layout})", op.loc)
        self.wgmma_plans[key] = plan
        return plan

    # --- step 1b: hardware anchors, forward -------------------------------------------------

    def seed(self, value: Value, layout: TileLayout) -> None:
        if id(value) not in self.seeded and isinstance(value.type, TileType) \
                and layout.shape == value.type.shape:
            self.hints[id(value)] = layout
            self.seeded.add(id(value))

    def seeded_layout(self, value: Value) -> TileLayout | None:
        return self.hints[id(value)] if id(value) in self.seeded else None

    def seed_block(self, block: Block, stage_reads: bool = False) -> None:
        """mma accumulators, forward: a dot's result and accumulator, the elementwise ops
        they feed, and the carried values they are yielded as. Seeds are hints the
        backward pass keeps (it only fills values without one).

        With ``stage_reads`` (a second walk, after the dots'), reads of row-major pipeline
        stages seed their anchor forward the same way, so that a value a loop carries and
        updates from a stage (``acc += x.to(f32)``) is born in the read's layout: the
        zeros it starts from would otherwise take their own dtype's default, and every
        step would convert the read into it (warp shuffles or a staging through shared
        memory with barriers, in the steady-state loop). Dot seeds come first and win."""
        for op in block.ops:
            name = op.name
            if stage_reads and name == "smem_read":
                ring = op.operand("src").type
                if isinstance(ring, SharedType) and ring.layout is None:
                    self.seed(op.result, self.anchor(op))
            elif name == "dot":
                fit = self.dot_fit(op)
                if not _on_fma(fit):
                    self.seed(op.result, fit[0])
                    self.seed(op.operand("acc"), fit[0])
            elif name in ELEMENTWISE:
                for v in op.operands:
                    lay = self.seeded_layout(v)
                    if lay is not None:
                        for r in op.results:
                            self.seed(r, lay)
                        break
            elif name == "warp_roles":
                producer, consumer = (r.block for r in op.regions)
                with self.warps(op.attrs["producer_warps"]):
                    self.seed_block(producer, stage_reads)
                self.seed_block(consumer, stage_reads)
                self.seed_carried(consumer, consumer.args, op)
            elif name in ("for", "pipeline", "when"):
                body = op.regions[0].block
                self.seed_block(body, stage_reads)
                skip = {"for": 1, "pipeline": 1 + len(op.variadic("tensors")), "when": 0}[name]
                self.seed_carried(body, body.args[skip:] if name != "when" else [], op)

    def seed_carried(self, body: Block, args, op: Operation) -> None:
        term = body.terminator
        yielded = list(term.operands) if term is not None else []
        inits = op.variadic("inits")
        for i, (res, init, y) in enumerate(zip(op.results, inits, yielded)):
            arg = args[i] if i < len(args) else None
            lay = self.seeded_layout(y) or (self.seeded_layout(arg) if arg is not None else None)
            if lay is not None:
                for v in (res, init, y, arg):
                    if v is not None:
                        self.seed(v, lay)

    def anchor(self, op: Operation) -> TileLayout:
        """The layout a global memory op wants for its tiles: coalesced, with 16-byte
        vectors of the narrowest element any memory op of that tile shape moves (so that
        loads and stores of different types share one layout; wider elements then take
        several 16-byte vectors per thread instead of a conversion)."""
        shape = _memory_shape(op)
        if not shape:
            return self.scalar()
        return self.default(shape, self.narrowest.get(shape, 4))

    def survey(self, fn) -> None:
        """The narrowest element size of the memory ops of each tile shape, and every
        value's uses (op, operand slot)."""
        self.narrowest: dict[tuple[int, ...], int] = {}
        self.uses: dict[int, list[tuple[Operation, str]]] = {}
        for op in fn.walk():
            for slot, v in zip(op.slots, op.operands):
                self.uses.setdefault(id(v), []).append((op, slot))
            if op.name in MEMORY or op.name in TILE_MEMORY:
                shape = _memory_shape(op)
                size = _memory_dtype(op).itemsize
                self.narrowest[shape] = min(size, self.narrowest.get(shape, size))

    def operand_for_broadcast(self, result: TileLayout, shape: tuple[int, ...]) -> TileLayout:
        """The layout a broadcast operand of ``shape`` needs so that every element it
        stretches to is in the same thread: the result's encoding, sliced at added dims."""
        if not shape:
            return self.scalar()
        enc = result.encoding
        for _ in range(result.rank - len(shape)):
            enc = SliceEncoding(enc, 0)
        return TileLayout(shape, enc)

    # --- step 2: hints, backward -------------------------------------------------------------

    def hint_block(self, block: Block) -> None:
        for op in reversed(block.ops):
            self.hint_op(op)

    def hint_op(self, op: Operation) -> None:
        name = op.name
        if name in MEMORY:
            lay = self.anchor(op)
            for slot in ("offsets", "mask", "other", "value"):
                v = op.operand(slot)
                if v is not None:
                    self.hint(v, lay)
            return
        if name in ("tile_store", "smem_write"):
            self.hint(op.operand("value"), self.anchor(op))
            return
        if name == "pipeline":
            body = op.regions[0].block
            term = body.terminator
            for res, y in zip(op.results, term.operands if term else []):
                self.hint(y, self.hinted(res))
            self.hint_block(body)
            carried = body.args[1 + len(op.variadic("tensors")):]
            for res, arg, init in zip(op.results, carried, op.variadic("inits")):
                self.hint(init, self.hinted(res) or self.hinted(arg))
            return
        if name == "warp_roles":
            producer, consumer = (r.block for r in op.regions)
            with self.warps(op.attrs["producer_warps"]):
                self.hint_block(producer)
            term = consumer.terminator
            for res, y in zip(op.results, term.operands if term else []):
                self.hint(y, self.hinted(res))
            self.hint_block(consumer)
            for res, arg, init in zip(op.results, consumer.args, op.variadic("inits")):
                self.hint(init, self.hinted(res) or self.hinted(arg))
            return
        if name == "dot":
            acc = op.operand("acc")
            fit = self.dot_fit(op)
            anchor = fit[0] if not _on_fma(fit) else None
            res = anchor or self.hinted(op.result) or self.default(acc.type.shape)
            self.hint(acc, res)
            self.hint(op.result, res)
            for slot in ("a", "b"):
                v = op.operand(slot)
                self.hint(v, self.default(v.type.shape, v.type.dtype.itemsize))
            return
        if name in ELEMENTWISE:
            res = self.hinted(op.result)
            for v in op.operands:
                self.hint(v, res)
            return
        if name == "broadcast":
            res = self.hinted(op.result)
            if res is not None:
                x = op.operand("x")
                self.hint(x, self.operand_for_broadcast(res, x.type.shape))
            return
        if name == "expand_dims":
            res = self.hinted(op.result)
            if res is not None and res.rank > 0 and not isinstance(res.encoding, ScalarEncoding):
                x = op.operand("x")
                self.hint(x, self.normalize(x.type.shape,
                                            SliceEncoding(res.encoding, op.attrs["axis"])))
            return
        if name in ("reduce", "argreduce"):
            res = self.hinted(op.result)
            x = op.operand("x")
            if res is not None and isinstance(res.encoding, SliceEncoding) \
                    and res.encoding.dim == op.attrs["axis"]:
                self.hint(x, TileLayout(x.type.shape, res.encoding.parent))
            return
        if name == "scan":
            self.hint(op.operand("x"), self.hinted(op.result))
            return
        if name == "permute":
            res = self.hinted(op.result)
            if res is not None and isinstance(res.encoding, BlockedEncoding):
                order = op.attrs["order"]
                inverse = tuple(order.index(i) for i in range(len(order)))
                x = op.operand("x")
                self.hint(x, TileLayout(x.type.shape, res.encoding.permuted(inverse)))
            return
        if name == "for":
            body = op.regions[0].block
            term = body.terminator
            inits = op.variadic("inits")
            for res, y in zip(op.results, term.operands if term else []):
                self.hint(y, self.hinted(res))
            self.hint_block(body)
            for res, arg, init in zip(op.results, body.args[1:], inits):
                self.hint(init, self.hinted(res) or self.hinted(arg))
            return
        if name == "when":
            body = op.regions[0].block
            term = body.terminator
            for res, y in zip(op.results, term.operands if term else []):
                self.hint(y, self.hinted(res))
            self.hint_block(body)
            for res, init in zip(op.results, op.variadic("inits")):
                self.hint(init, self.hinted(res))
            return

    # --- step 3: assignment, forward -------------------------------------------------------

    def layout(self, value: Value) -> TileLayout:
        t = value.type
        assert isinstance(t, TileType) and isinstance(t.layout, TileLayout), value
        return t.layout

    def set(self, value: Value, layout: TileLayout) -> None:
        assert isinstance(value.type, TileType) and layout.shape == value.type.shape
        value.type = value.type.with_layout(layout)

    def require(self, op: Operation, index: int, layout: TileLayout) -> None:
        """Make operand ``index`` of ``op`` have ``layout``, converting before ``op``."""
        value = op.operands[index]
        if self.layout(value) == layout:
            return
        convert = make_convert(value, layout, op, self.o)
        block = op.parent
        assert block is not None
        block.insert(block.ops.index(op), convert)
        op.operands[index] = convert.result

    def require_slot(self, op: Operation, slot: str, layout: TileLayout) -> None:
        for i, s in enumerate(op.slots):
            if s == slot:
                self.require(op, i, layout)

    def fresh(self, value: Value, elem_bytes: int = 4) -> TileLayout:
        """A made tile: its hint, else the default for its shape."""
        shape = value.type.shape
        if not shape:
            return self.scalar()
        return self.hinted(value) or self.default(shape, elem_bytes)

    def assign_block(self, block: Block) -> None:
        for op in list(block.ops):
            self.assign_op(op)

    def assign_op(self, op: Operation) -> None:
        name = op.name
        if name in ("constant", "arange", "program_id", "num_programs", "dim", "stride"):
            r = op.result
            self.set(r, self.fresh(r, r.type.dtype.itemsize))
        elif name in ELEMENTWISE:
            tiles = [i for i, v in enumerate(op.operands)]
            target = self.hinted(op.result)
            have = [self.layout(op.operands[i]) for i in tiles]
            if target is None or target not in have:
                # Prefer the widest operand's layout (its loads were anchored on it).
                widest = max(tiles, key=lambda i: op.operands[i].type.dtype.itemsize)
                target = self.layout(op.operands[widest])
            for i in tiles:
                self.require(op, i, target)
            for r in op.results:
                self.set(r, target)
        elif name in MEMORY:
            lay = self.anchor(op)
            for slot in ("offsets", "mask", "other", "value"):
                self.require_slot(op, slot, lay)
            for r in op.results:
                self.set(r, lay)
        elif name == "smem_read":
            self.set(op.result, self.read_in_place(op) or self.anchor(op))
        elif name == "tile_load":
            self.set(op.result, self.anchor(op))
        elif name in ("tile_store", "smem_write"):
            self.require_slot(op, "value", self.anchor(op))
        elif name == "copy_g2s":
            if op.attrs.get("engine") == "plain":
                op.attrs["staging_layout"] = self.anchor(op)
        elif name == "trip_count":
            self.set(op.result, self.scalar())
        elif name in ASYNC_NO_TILES:
            pass
        elif name == "warp_roles":
            producer, consumer = (r.block for r in op.regions)
            with self.warps(op.attrs["producer_warps"]):
                self.assign_block(producer)
            carried = [self.carried_layout(v) for v in op.variadic("inits")]
            for arg, lay in zip(consumer.args, carried):
                self.set_carried(arg, lay)
            self.assign_block(consumer)
            self.finish_yield(consumer, carried)
            for r, lay in zip(op.results, carried):
                self.set_carried(r, lay)
        elif name == "pipeline":  # unscheduled: laid out as the loop it means
            body = op.regions[0].block
            iv, *args = body.args
            self.set(iv, self.scalar())
            tensors = op.variadic("tensors")
            for arg, t in zip(args, tensors):
                self.set(arg, self.default(arg.type.shape, t.type.dtype.itemsize))
            carried = [self.carried_layout(v) for v in op.variadic("inits")]
            for arg, lay in zip(args[len(tensors):], carried):
                self.set_carried(arg, lay)
            self.assign_block(body)
            self.finish_yield(body, carried)
            for r, lay in zip(op.results, carried):
                self.set_carried(r, lay)
        elif name == "broadcast":
            res = self.fresh(op.result, op.result.type.dtype.itemsize)
            x = op.operand("x")
            self.require(op, 0, self.operand_for_broadcast(res, x.type.shape))
            self.set(op.result, res)
        elif name == "expand_dims":
            x_lay = self.layout(op.operand("x"))
            axis = op.attrs["axis"]
            enc = x_lay.encoding
            if isinstance(enc, SliceEncoding) and enc.dim == axis:
                res = TileLayout(op.result.type.shape, enc.parent)
            else:
                res = self.fresh(op.result, op.result.type.dtype.itemsize)
                self.require(op, 0, self.normalize(x_lay.shape, SliceEncoding(res.encoding,
                                                                              axis)))
            self.set(op.result, res)
        elif name in ("reduce", "argreduce"):
            x_lay = self.layout(op.operand("x"))
            self.set(op.result, self.normalize(op.result.type.shape,
                                               SliceEncoding(x_lay.encoding, op.attrs["axis"])))
        elif name == "scan":
            self.set(op.result, self.layout(op.operand("x")))
        elif name == "permute":
            x = op.operand("x")
            x_lay = self.layout(x)
            if not isinstance(x_lay.encoding, BlockedEncoding):
                x_lay = self.default(x.type.shape, x.type.dtype.itemsize)
                self.require(op, 0, x_lay)
            self.set(op.result, TileLayout(op.result.type.shape,
                                           x_lay.encoding.permuted(op.attrs["order"])))
        elif name == "reshape":
            self.set(op.result, self.fresh(op.result, op.result.type.dtype.itemsize))
        elif name == "dot":
            fit = self.dot_fit(op)
            if _on_fma(fit):
                acc = self.layout(op.operand("acc"))
                if not isinstance(acc.encoding, BlockedEncoding):
                    acc = self.default(acc.shape)
                    self.require_slot(op, "acc", acc)
                op.attrs["path"] = fit
                self.set(op.result, acc)
            elif self.wgmma_fit(op) is not None:
                plan = self.wgmma_fit(op)
                self.require_slot(op, "acc", plan.acc)
                op.attrs["path"] = plan
                self.set(op.result, plan.acc)
            else:
                self.assign_mma(op, *fit)
        elif name == "convert_layout":
            pass  # already typed
        elif name == "for":
            body = op.regions[0].block
            self.set(body.args[0], self.scalar())
            carried = [self.carried_layout(v) for v in op.variadic("inits")]
            for arg, lay in zip(body.args[1:], carried):
                self.set_carried(arg, lay)
            self.assign_block(body)
            self.finish_yield(body, carried)
            for r, lay in zip(op.results, carried):
                self.set_carried(r, lay)
        elif name == "when":
            body = op.regions[0].block
            carried = [self.carried_layout(v) for v in op.variadic("inits")]
            self.assign_block(body)
            self.finish_yield(body, carried)
            for r, lay in zip(op.results, carried):
                self.set_carried(r, lay)
        elif name in ("yield", "print", "assert"):
            pass
        else:
            raise NotImplementedError(f"layout assignment has no rule for `{name}`")

    def read_in_place(self, op: Operation) -> TileLayout | None:
        """For a read of a stage the schedule laid out for a dot (its ring's layout is a
        ``mma_sync.stage_read`` swizzle): the dot's fragment layout, when every use of the
        tile is that operand of dots on mma.sync and the library's read of the fragment
        uses that very swizzle. The read plan goes to the op's ``read`` attribute (code
        generation emits its ``ldmatrix``es); None otherwise (the tile is read into its
        anchor layout, through the stage's swizzle)."""
        from tilekit.layout import banks
        from tilekit.layout.mma_sync import stage_read
        from tilekit.layout.wgmma_plan import WgmmaStage

        ring = op.operand("src").type
        uses = self.uses.get(id(op.result), [])
        if not isinstance(ring, SharedType) or ring.layout is None or not uses:
            return None
        if isinstance(ring.layout, WgmmaStage):
            # wgmma reads the stage itself; the value is the stage, never registers
            if len(uses) != 1 or uses[0][0].name != "dot" \
                    or self.wgmma_fit(uses[0][0]) is None:
                raise LayoutError("internal: a wgmma stage is read by something other than "
                                  "its dot", op.loc)
            op.attrs["read"] = ring.layout
            return self.anchor(op)
        wants = set()
        for user, slot in uses:
            if user.name != "dot" or slot not in ("a", "b"):
                return None
            fit = self.dot_fit(user)
            if _on_fma(fit):
                return None
            wants.add(fit[1] if slot == "a" else fit[2])
        if len(wants) != 1:
            return None
        want = wants.pop()
        plan = stage_read(want, banks.target(self.o.bank_target))
        if plan.swizzle != ring.layout:
            return None
        op.attrs["read"] = plan
        return want

    def assign_mma(self, op: Operation, acc: TileLayout, a: TileLayout, b: TileLayout) -> None:
        """The accumulator in the instruction's layout; each operand from registers when it
        is in (or renames or shuffles into) its fragment layout, else staged through shared
        memory (``mma_sync.stage_operand``). The plan goes to the ``path`` attribute."""
        from tilekit.layout import banks
        from tilekit.layout.mma_sync import plan_mma_sync, stage_operand
        from tilekit.layout.tile_convert import plan_tile_conversion

        self.require_slot(op, "acc", acc)
        staged = []
        from_stage = []
        for slot, want in (("a", a), ("b", b)):
            v = op.operand(slot)
            owner = getattr(v, "owner", None)  # op results have one, block arguments not
            from_stage.append(owner is not None and owner.name == "smem_read"
                              and "read" in owner.attrs and self.layout(v) == want)
            have = self.layout(op.operand(slot))
            if have != want and isinstance(have.encoding, MmaEncoding) \
                    and not plan_tile_conversion(have, want).staged:
                self.require_slot(op, slot, want)
                have = want
            staged.append(None if have == want else
                          stage_operand(have, want, banks.target(self.o.bank_target)))
        op.attrs["path"] = plan_mma_sync(op.operand("a").type.dtype, acc, a, b, *staged,
                                         from_stage=(from_stage[0], from_stage[1]))
        self.set(op.result, acc)

    def carried_layout(self, value: Value) -> TileLayout | None:
        """A carried value's layout; None for values without one (tokens)."""
        return self.layout(value) if isinstance(value.type, TileType) else None

    def set_carried(self, value: Value, layout: TileLayout | None) -> None:
        if layout is not None:
            self.set(value, layout)

    def finish_yield(self, body: Block, carried: list[TileLayout | None]) -> None:
        term = body.terminator
        assert term is not None
        for i, lay in enumerate(carried):
            if lay is not None:
                self.require(term, i, lay)


def _memory_shape(op: Operation) -> tuple[int, ...]:
    if op.name in ("smem_read", "smem_write"):
        ring = op.operands[0].type
        assert isinstance(ring, SharedType)
        return tuple(ring.shape)
    assert isinstance(op.operands[0].type, TensorType)
    if op.name in ("tile_load", "tile_store", "copy_g2s"):
        return tuple(op.attrs["shape"])
    return tuple(op.operand("offsets").type.shape)


def _memory_dtype(op: Operation):
    """The element type a memory op moves (a tensor's, or a stage ring's)."""
    return op.operands[0].type.dtype


def make_convert(value: Value, layout: TileLayout, before: Operation,
                 options: LayoutOptions) -> Operation:
    """A ``convert_layout`` op from ``value``'s layout to ``layout``, with its plans: what
    code generation emits (``tile_convert``: renames, shuffles or staging) and, for F2
    layouts, ``convert.plan_conversion``'s costed plan."""
    from tilekit.layout.tile_convert import plan_tile_conversion, swizzled_staging

    src = value.type.layout
    _, cost, plan = plan_convert(src, layout, value.type.dtype.itemsize, options)
    tile_plan = swizzled_staging(plan_tile_conversion(src, layout), src, layout, plan)
    op = Operation(lookup("convert_layout"), [value], ["x"],
                   [value.type.with_layout(layout)],
                   {"layout": layout, "how": tile_plan.kind, "cost": cost, "plan": plan,
                    "tile_plan": tile_plan}, (), before.loc)
    return op


def plan_convert(src: TileLayout, dst: TileLayout, elem_bytes: int,
                 options: LayoutOptions):
    """(kind name, cost score, ConversionPlan or None): ``convert.plan_conversion``'s plan
    for F2 layouts (power-of-two shapes, blocked or slice encodings), else None."""
    from tilekit.layout import banks, convert

    if src.is_power_of_two and dst.is_power_of_two and src.rank > 0 and \
            not isinstance(src.encoding, ScalarEncoding) and \
            not isinstance(dst.encoding, ScalarEncoding):
        try:
            plan = convert.plan_conversion(src.to_linear(), dst.to_linear(), elem_bytes,
                                           banks.target(options.bank_target))
            return plan.kind.name, plan.cost.score, plan
        except Exception:  # noqa: BLE001 - a layout the F2 planner refuses has no F2 plan
            pass
    return "SHARED_STAGING", None, None


def assign_layouts(module: Module, options: LayoutOptions | None = None) -> Module:
    """A copy of ``module`` in which every tile value has a ``TileLayout``."""
    from tilekit.ir.verifier import verify

    options = options or LayoutOptions()
    module = clone_module(module)
    for fn in module.functions:
        assigner = _Assigner(options)
        assigner.survey(fn)
        assigner.seed_block(fn.entry)
        assigner.seed_block(fn.entry, stage_reads=True)
        assigner.hint_block(fn.entry)
        for arg in fn.args:
            if isinstance(arg.type, TileType):
                assigner.set(arg, assigner.scalar())
        assigner.assign_block(fn.entry)
    verify(module, layouts=True)
    return module


