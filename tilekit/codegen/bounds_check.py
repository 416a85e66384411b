"""Check mode (``TILEKIT_CHECK=1``): a bounds check on every raw global access.

The interpreter is the definition (``tilekit.rt.memory``): a ``load``, ``store`` or
``atomic`` faults when an active lane's element offset is not the offset of an element of
the tensor view; masked-off lanes never fault. Tile views and pipeline streams never fault
there (their elements past the edges are masked at any tile index, a tile entirely outside
the tensor included), and their code masks them the same way, so they get no check.

A checked access, in each thread:

* each register's offset is *valid* (``valid_offsets``) when ``pos = offset + base`` is
  below the view's ``span`` (``base``: the offset of the lowest-addressed element, where
  the interpreter's flat buffer starts), and, for a view with gaps (a column slice, a
  strided view), when ``pos`` decomposes into an in-range index along the strides (greedy,
  from the largest: exact for every view whose strides *nest*, each above the reach of the
  smaller ones, which slices, transposes and reversed dims of a dense array do). A view
  whose strides do not nest (overlapping or interleaved, made by ``as_strided``) is
  checked against its span only. The per-tensor part (``ViewBounds``) is computed once per
  thread, in the prologue; a dense view costs an add and a compare per element;
* the access's predicates become ``pred & valid``, so an invalid element is not accessed
  (a load gives ``other``);
* when an active register is invalid, the thread records the failure (``fault_function``)
  in the status buffer: under a lock, the lowest key wins (``artifact.CheckWords``: the
  program, the rank of the access among those the program ran, the element's position in
  the tile), which is the fault the interpreter reports. The runtime raises it after the
  launch (``tilekit.rt.check_mode``).

With check mode off nothing here is called, and the kernel's code is what it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from tilekit.codegen.artifact import AccessSite, CheckWords
from tilekit.codegen.lower import I1, I32, I64, KernelLowering, c32
from tilekit.ir.core import Operation
from tilekit.layout.tile_layouts import TileLayout

#: The function that records a failure (one per module; its name marks checked code).
FAULT_FUNCTION = "tk_access_fault"


def _c64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def _wide(b: ir.IRBuilder, v: ir.Value, signed: bool = True) -> ir.Value:
    if v.type.width == 64:
        return v
    return b.sext(v, I64) if signed else b.zext(v, I64)


@dataclass
class ViewBounds:
    """What the check of one tensor view needs, as values of the prologue: the offset of
    its lowest-addressed element (``base``), the number of element positions from there
    to past the highest (``span``, 0 for an empty view), whether offsets must be
    decomposed (``exact``: the view has gaps and nested strides), and the dims that count
    (extent above 1, stride not 0), largest stride first: ``strides`` (absolute values; 0
    for a dim that does not count) and ``extents`` (1 for such a dim)."""

    base: ir.Value
    span: ir.Value
    exact: ir.Value
    strides: list[ir.Value]
    extents: list[ir.Value]


def view_bounds(b: ir.IRBuilder, sizes: Sequence[ir.Value],
                strides: Sequence[ir.Value]) -> ViewBounds:
    """The ``ViewBounds`` of a view of extents ``sizes`` and ``strides`` (in elements, any
    integer type, signed), in 64 bits, as the interpreter's ``TensorBinding`` sees it."""
    zero, one = _c64(0), _c64(1)
    base, reach, empty = zero, zero, ir.Constant(I1, 0)
    dims: list[tuple[ir.Value, ir.Value]] = []
    for size, stride in zip(sizes, strides):
        extent, s = _wide(b, size), _wide(b, stride)
        negative = b.icmp_signed("<", s, zero)
        counts = b.and_(b.icmp_signed(">", extent, one), b.icmp_signed("!=", s, zero))
        a = b.select(counts, b.select(negative, b.sub(zero, s), s), zero)
        n = b.select(counts, extent, one)
        far = b.mul(a, b.sub(n, one))
        base = b.add(base, b.select(negative, far, zero))
        reach = b.add(reach, far)
        empty = b.or_(empty, b.icmp_signed("==", extent, zero))
        dims.append((a, n))
    span = b.select(empty, zero, b.add(reach, one))
    # largest stride first: a sorting network (bubble) of compare-exchanges
    for i in range(len(dims)):
        for j in range(len(dims) - 1 - i):
            (a0, n0), (a1, n1) = dims[j], dims[j + 1]
            swap = b.icmp_unsigned("<", a0, a1)
            dims[j] = (b.select(swap, a1, a0), b.select(swap, n1, n0))
            dims[j + 1] = (b.select(swap, a0, a1), b.select(swap, n0, n1))
    # nested: each counting stride exceeds the reach of the smaller ones (the view's
    # elements are distinct); dense: each is the count of the smaller ones' elements (no
    # gaps: every position of the span is an element)
    nested, dense = ir.Constant(I1, 1), ir.Constant(I1, 1)
    inner, count = zero, one
    for a, n in reversed(dims):
        single = b.icmp_unsigned("==", n, one)
        nested = b.and_(nested, b.or_(single, b.icmp_unsigned(">", a, inner)))
        dense = b.and_(dense, b.or_(single, b.icmp_unsigned("==", a, count)))
        inner = b.add(inner, b.mul(a, b.sub(n, one)))
        count = b.mul(count, n)
    exact = b.and_(b.and_(nested, b.not_(dense)), b.not_(empty))
    return ViewBounds(base, span, exact, [a for a, _ in dims], [n for _, n in dims])


def _on_grid_function(module: ir.Module, rank: int) -> ir.Function:
    """``tk_on_grid<rank>(pos, strides..., extents...)``: whether ``pos`` is
    ``sum(i_k * strides_k)`` with ``0 <= i_k < extents_k`` (strides largest first and
    nested, as ``ViewBounds`` has them). One per rank and module, not inlined: it divides,
    and only views with gaps call it."""
    name = f"tk_on_grid{rank}"
    found = module.globals.get(name)
    if found is not None:
        return found
    fn = ir.Function(module, ir.FunctionType(I1, [I64] * (1 + 2 * rank)), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    rest, *params = fn.args
    ok = ir.Constant(I1, 1)
    for a, n in zip(params[:rank], params[rank:]):
        counts = b.icmp_unsigned("!=", a, _c64(0))
        d = b.select(counts, a, _c64(1))
        i = b.udiv(rest, d)
        ok = b.and_(ok, b.or_(b.not_(counts), b.icmp_unsigned("<", i, n)))
        rest = b.select(counts, b.urem(rest, d), rest)
    b.ret(b.and_(ok, b.icmp_unsigned("==", rest, _c64(0))))
    return fn


def valid_offsets(b: ir.IRBuilder, bounds: ViewBounds,
                  offsets: Sequence[ir.Value]) -> list[ir.Value]:
    """Whether each element offset (i64) is that of an element of the view: one compare,
    and for a view that needs it (``bounds.exact``, uniform) one branch to the
    decompositions of all of them."""
    pos = [b.add(o, bounds.base) for o in offsets]
    inside = [b.icmp_unsigned("<", p, bounds.span) for p in pos]
    if not bounds.strides:
        return inside
    on_grid = _on_grid_function(b.module, len(bounds.strides))
    before = b.block
    with b.if_then(bounds.exact):
        exact = [b.and_(ok, b.call(on_grid, [p, *bounds.strides, *bounds.extents]))
                 for p, ok in zip(pos, inside)]
        then_block = b.block
    out = []
    for ok, checked in zip(inside, exact):
        phi = b.phi(I1)
        phi.add_incoming(checked, then_block)
        phi.add_incoming(ok, before)
        out.append(phi)
    return out


def fault_function(L: KernelLowering) -> ir.Function:
    """``tk_access_fault(status, order, code, offset)``: record a failed access of this
    program in the status buffer if its key (this program's linear id, ``order``) is below
    the recorded one. The key is compared and written under a lock; the lock's loop keeps
    the critical section inside it (a thread that holds the lock releases it before its
    warp goes round again), and a key of a later program than the recorded one returns
    without the lock."""
    module = L.module
    found = module.globals.get(FAULT_FUNCTION)
    if found is not None:
        return found
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, I32, I64]),
                     FAULT_FUNCTION)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("nounwind")
    status, order, code, offset = fn.args
    blocks = {n: fn.append_basic_block(n) for n in
              ("entry", "lock", "critical", "write", "release", "latch", "done")}
    b = ir.IRBuilder(blocks["entry"])
    space = L.vendor.global_addrspace

    def word(index: int, ty: ir.Type) -> ir.Value:
        return b.inttoptr(b.add(status, _c64(4 * index)), ir.PointerType(ty, space))

    ids = [b.zext(L.vendor.block_id(b, axis), I64) for axis in range(3)]
    gx, gy = (b.zext(L.vendor.num_blocks(b, axis), I64) for axis in range(2))
    program = b.add(ids[0], b.mul(gx, b.add(ids[1], b.mul(gy, ids[2]))))
    recorded = b.load_atomic(word(CheckWords.KEY_PROGRAM, I64), "monotonic", 8)
    b.cbranch(b.icmp_unsigned(">", program, recorded), blocks["done"], blocks["lock"])

    b.position_at_end(blocks["lock"])
    taken = b.extract_value(b.cmpxchg(word(CheckWords.LOCK, I32), c32(0), c32(1),
                                      "acquire", "monotonic"), 1)
    b.cbranch(taken, blocks["critical"], blocks["latch"])

    b.position_at_end(blocks["critical"])
    first = b.load(word(CheckWords.KEY_PROGRAM, I64), align=8)
    then = b.load(word(CheckWords.KEY_ORDER, I64), align=8)
    lower = b.or_(b.icmp_unsigned("<", program, first),
                  b.and_(b.icmp_unsigned("==", program, first),
                         b.icmp_unsigned("<", order, then)))
    b.cbranch(lower, blocks["write"], blocks["release"])

    b.position_at_end(blocks["write"])
    b.store(program, word(CheckWords.KEY_PROGRAM, I64), align=8)
    b.store(order, word(CheckWords.KEY_ORDER, I64), align=8)
    b.store(code, word(CheckWords.CODE, I32))
    b.store(offset, word(CheckWords.OFFSET, I64), align=8)
    for axis in range(3):
        b.store(b.trunc(ids[axis], I32), word(CheckWords.PROGRAM + axis, I32))
    b.branch(blocks["release"])

    b.position_at_end(blocks["release"])
    b.store_atomic(c32(0), word(CheckWords.LOCK, I32), "release", 4)
    b.branch(blocks["latch"])

    b.position_at_end(blocks["latch"])
    again = b.phi(I1)
    again.add_incoming(ir.Constant(I1, 0), blocks["release"])
    again.add_incoming(ir.Constant(I1, 1), blocks["lock"])
    b.cbranch(again, blocks["lock"], blocks["done"])

    b.position_at_end(blocks["done"])
    b.ret_void()
    return fn


class _Alloca(ir.instructions.AllocaInstr):
    """An ``alloca`` in the vendor's address space for local variables (llvmlite's builder
    makes them in the default one; AMDGPU's are in its private space, 5)."""

    def __init__(self, parent: ir.Block, typ: ir.Type, name: str, addrspace: int) -> None:
        super().__init__(parent, typ, None, name)
        self.type = typ.as_pointer(addrspace)
        self.addrspace = addrspace

    def descr(self, buf: list[str]) -> None:
        super().descr(buf)
        if self.addrspace:
            buf.append(f", addrspace({self.addrspace})")


def _access_rank(L: KernelLowering) -> ir.Value:
    """How many checked accesses this thread ran before this one (i32): the same in every
    thread of a program, whose control flow is uniform. A local variable that LLVM turns
    into registers (and loop phis)."""
    def counter(pb: ir.IRBuilder) -> ir.Value:
        slot = _Alloca(pb.block, I32, "access_rank", L.vendor.private_addrspace)
        pb._insert(slot)
        pb.store(c32(0), slot)
        return slot

    slot = L.in_prologue(("access_rank",), counter)
    rank = L.b.load(slot)
    L.b.store(L.b.add(rank, c32(1)), slot)
    return rank


def guard(L: KernelLowering, op: Operation, lay: TileLayout, offsets: Sequence[ir.Value],
          preds: Sequence[ir.Value | None], signed: bool) -> list[ir.Value]:
    """The predicates of a raw access ``op`` (``preds``: the mask, and for stores and
    atomics the ownership) with its bounds check: active and valid. Where an active
    register is invalid, the first one in the tile's row-major order is recorded
    (``fault_function``)."""
    b = L.b
    t = L.tensor(op.operand("tensor"))
    # the strides as the bucket's facts give them (a unit inner stride is the constant 1):
    # equal to the launch's, and they let LLVM fold a dense view's decomposition away
    bounds = L.in_prologue(("view_bounds", t.name),
                           lambda pb: view_bounds(pb, t.sizes, t.strides))
    wide = [_wide(b, o, signed) for o in offsets]
    valid = valid_offsets(b, bounds, wide)
    checked, failed = [], []
    for pred, ok in zip(preds, valid):
        bad = b.not_(ok)
        checked.append(ok if pred is None else b.and_(pred, ok))
        failed.append(bad if pred is None else b.and_(pred, bad))
    rank = _access_rank(L)
    loc = op.loc
    L.access_sites.append(AccessSite(op.name, t.name, tuple(lay.shape), *(
        (loc.file, loc.line, loc.col, loc.end_col, loc.end_line) if loc else ("", 0))))
    code = len(L.access_sites)
    any_failed = failed[0]
    for f in failed[1:]:
        any_failed = b.or_(any_failed, f)
    with b.if_then(any_failed, likely=False):
        best, where = c32(-1), _c64(0)
        for r, (f, off) in enumerate(zip(failed, wide)):
            position = L.flat_index(lay, r)
            first = b.and_(f, b.icmp_unsigned("<", position, best))
            best = b.select(first, position, best)
            where = b.select(first, off, where)
        order = b.or_(b.shl(b.zext(rank, I64), _c64(32)), b.zext(best, I64))
        b.call(fault_function(L), [L.status, order, c32(code), where])
    return checked
