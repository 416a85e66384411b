"""Lowering of global memory ops: loads, stores, atomics, and tile views.

An element's address is ``base + offset * itemsize`` with the offset in the
tensor's index type (int32 when the span allows, else int64). Registers that
a layout keeps consecutive along the unit-stride dim (a blocked encoding's
``size_per_thread`` along ``order[0]``) are accessed as one vector of up to 16
bytes when, at run time, their offsets are consecutive, the address is aligned
and every lane of the vector is active; otherwise element by element, each
predicated, so a masked-off element touches no memory. LLVM folds the checks it
can prove (consecutive offsets from ``arange``, alignment from the
specialization's ``aligned16`` fact), which is how a vector add gets unguarded
128-bit loads.

Stores and atomics are done by the element's owner only (replicas skip them);
an atomic's old value is handed to the replicas through shared memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from llvmlite import ir

from tilekit.codegen import bounds_check
from tilekit.codegen import scalar_ops as S
from tilekit.codegen.lower import I64, KernelLowering, TensorHandle, c32, dtype_of, layout_of
from tilekit.codegen.rules import rule
from tilekit.ir.core import Operation
from tilekit.ir.dtypes import DType
from tilekit.ir.ops.memory import AtomicKind
from tilekit.layout.tile_layouts import BlockedEncoding, TileLayout


def _to_i64(b: ir.IRBuilder, v: ir.Value, signed: bool = True) -> ir.Value:
    if v.type.width == 64:
        return v
    return b.sext(v, I64) if signed else b.zext(v, I64)


def element_address(L: KernelLowering, t: TensorHandle, offset: ir.Value,
                    signed: bool = True) -> ir.Value:
    """The byte address (i64) of element ``offset`` of ``t``."""
    b = L.b
    return b.add(t.base, b.mul(_to_i64(b, offset, signed), ir.Constant(I64, t.dtype.itemsize)))


def element_ptr(L: KernelLowering, t: TensorHandle, offset: ir.Value,
                signed: bool = True) -> ir.Value:
    return L.b.inttoptr(element_address(L, t, offset, signed),
                        ir.PointerType(S.memory_type(t.dtype), L.vendor.global_addrspace))


def vector_ptr(L: KernelLowering, t: TensorHandle, offset: ir.Value, count: int,
               signed: bool = True) -> ir.Value:
    """The address of ``count`` elements from ``offset``, typed as one access (a scalar
    when ``count`` is 1, else a vector)."""
    ptr = element_ptr(L, t, offset, signed)
    if count == 1:
        return ptr
    vty = ir.VectorType(S.memory_type(t.dtype), count)
    return L.b.bitcast(ptr, ir.PointerType(vty, L.vendor.global_addrspace))


def pack(L: KernelLowering, dt: DType, values: Sequence[ir.Value]) -> ir.Value:
    """Registers as one memory value: a scalar, or a vector of ``len(values)``."""
    b = L.b
    if len(values) == 1:
        return S.to_memory(b, values[0], dt)
    v = ir.Constant(ir.VectorType(S.memory_type(dt), len(values)), None)
    for i, x in enumerate(values):
        v = b.insert_element(v, S.to_memory(b, x, dt), c32(i))
    return v


def unpack(L: KernelLowering, dt: DType, v: ir.Value, count: int) -> list[ir.Value]:
    """The inverse of ``pack``: ``count`` registers from one memory value."""
    b = L.b
    if count == 1:
        return [S.from_memory(b, v, dt)]
    return [S.from_memory(b, b.extract_element(v, c32(i)), dt) for i in range(count)]


def vector_groups(L: KernelLowering, lay: TileLayout, itemsize: int) -> list[list[int]]:
    """Runs of registers a thread may access as one vector: consecutive along the
    encoding's most minor dim, at most ``max_vector_bytes``."""
    n = lay.num_regs
    enc = lay.encoding
    width = 1
    if isinstance(enc, BlockedEncoding) and lay.rank:
        minor = enc.order[0]
        spt = min(enc.size_per_thread[minor], lay.shape[minor])
        width = 1
        while width * 2 <= spt and width * 2 * itemsize <= L.target.max_vector_bytes \
                and spt % (width * 2) == 0:
            width *= 2
        if width > 1:
            offs = lay.dims[minor].offsets
            for g in range(0, n, width):
                if any(offs[g + i] != offs[g] + i for i in range(width)):
                    width = 1
                    break
    return [list(range(g, min(n, g + width))) for g in range(0, n, width)]


def _aligned(L: KernelLowering, t: TensorHandle, first_offset: ir.Value, nbytes: int,
             signed: bool) -> ir.Value:
    """Whether element ``first_offset`` starts an ``nbytes``-aligned vector."""
    b = L.b
    off = _to_i64(b, first_offset, signed)
    if t.name in L.aligned16 and nbytes <= 16:
        count = nbytes // t.dtype.itemsize
        return b.icmp_unsigned("==", b.and_(off, ir.Constant(I64, count - 1)),
                               ir.Constant(I64, 0))
    addr = b.add(t.base, b.mul(off, ir.Constant(I64, t.dtype.itemsize)))
    return b.icmp_unsigned("==", b.and_(addr, ir.Constant(I64, nbytes - 1)), ir.Constant(I64, 0))


def _contiguous(L: KernelLowering, offsets: Sequence[ir.Value]) -> ir.Value | None:
    b = L.b
    conds = []
    for i, o in enumerate(offsets[1:], start=1):
        conds.append(b.icmp_signed("==", o, b.add(offsets[0], ir.Constant(o.type, i))))
    return L.all_of(conds)


def _fast_condition(L: KernelLowering, t: TensorHandle, groups: list[list[int]],
                    offsets: Sequence[ir.Value], preds: Sequence[ir.Value | None],
                    signed: bool) -> ir.Value | None:
    """Whether this thread may take the vector path for every group at once: offsets
    consecutive, vectors aligned, every element active."""
    conds: list[ir.Value | None] = []
    for group in groups:
        if len(group) == 1:
            continue
        offs = [offsets[r] for r in group]
        conds.append(_contiguous(L, offs))
        conds.append(_aligned(L, t, offs[0], len(group) * t.dtype.itemsize, signed))
        conds.extend(preds[r] for r in group)
    return L.all_of(conds)


def _two_paths(L: KernelLowering, fast: ir.Value | None, vector_path, scalar_path
               ) -> list[ir.Value]:
    """Run ``vector_path()`` where ``fast`` holds, else ``scalar_path()``: one branch per
    access (not one per vector), so that the common case is straight-line vector code.
    Both return the same number of values; their phis are returned."""
    b = L.b
    if fast is None:
        return vector_path()
    with b.if_else(fast) as (vec, scalar):
        with vec:
            fast_vals = vector_path()
            fast_end = b.block
        with scalar:
            slow_vals = scalar_path()
            slow_end = b.block
    return L.merge(fast_vals, fast_end, slow_vals, slow_end)


def gather(L: KernelLowering, t: TensorHandle, lay: TileLayout, offsets: Sequence[ir.Value],
           preds: Sequence[ir.Value | None], others: Sequence[ir.Value],
           signed: bool = True) -> list[ir.Value]:
    """Load one element per register (``preds`` None: always), vectorized where it can be."""
    b = L.b
    dt = t.dtype
    groups = vector_groups(L, lay, dt.itemsize)

    def scalar(r: int) -> ir.Value:
        return L.select_load(preds[r], lambda: S.from_memory(
            b, b.load(element_ptr(L, t, offsets[r], signed)), dt), others[r])

    if all(len(g) == 1 for g in groups):
        return [scalar(r) for r in range(len(offsets))]

    def vector_path() -> list[ir.Value]:
        out: list[ir.Value] = []
        for group in groups:
            if len(group) == 1:
                out.append(scalar(group[0]))
                continue
            v = b.load(vector_ptr(L, t, offsets[group[0]], len(group), signed),
                       align=len(group) * dt.itemsize)
            out.extend(unpack(L, dt, v, len(group)))
        return out

    fast = _fast_condition(L, t, groups, offsets, preds, signed)
    values = _two_paths(L, fast, vector_path,
                        lambda: [scalar(r) for g in groups for r in g])
    out: list[ir.Value] = [None] * len(offsets)  # type: ignore[list-item]
    for r, v in zip((r for g in groups for r in g), values):
        out[r] = v
    return out


def scatter(L: KernelLowering, t: TensorHandle, lay: TileLayout, offsets: Sequence[ir.Value],
            values: Sequence[ir.Value], preds: Sequence[ir.Value | None],
            signed: bool = True) -> None:
    """Store one element per register where ``preds`` holds, vectorized where it can be."""
    b = L.b
    dt = t.dtype
    groups = vector_groups(L, lay, dt.itemsize)

    def one(r: int) -> None:
        L.if_then_store(preds[r], lambda: b.store(S.to_memory(b, values[r], dt),
                                                  element_ptr(L, t, offsets[r], signed)))

    def scalar_path() -> list[ir.Value]:
        for r in range(len(offsets)):
            one(r)
        return []

    if all(len(g) == 1 for g in groups):
        scalar_path()
        return

    def vector_path() -> list[ir.Value]:
        for group in groups:
            if len(group) == 1:
                one(group[0])
                continue
            b.store(pack(L, dt, [values[r] for r in group]),
                    vector_ptr(L, t, offsets[group[0]], len(group), signed),
                    align=len(group) * dt.itemsize)
        return []

    # Stores by replicas are skipped (``preds`` include ownership), so a group holding a
    # replica takes the scalar path.
    fast = _fast_condition(L, t, groups, offsets, preds, signed)
    _two_paths(L, fast, vector_path, scalar_path)


def _and(L: KernelLowering, a: ir.Value | None, b_: ir.Value | None) -> ir.Value | None:
    return L.all_of([a, b_])


# --- load / store / atomic with offset tiles --------------------------------------------------

@rule("load")
def _load(L: KernelLowering, op: Operation) -> None:
    t = L.tensor(op.operand("tensor"))
    lay = layout_of(op.result)
    offs_v = op.operand("offsets")
    offsets = L.regs(offs_v)
    signed = dtype_of(offs_v).is_signed
    mask = L.regs(op.operand("mask")) if op.operand("mask") is not None else None
    if op.operand("other") is not None:
        others = L.regs(op.operand("other"))
    else:
        others = [S.constant(t.dtype, 0)] * lay.num_regs
    preds = [mask[r] if mask else None for r in range(lay.num_regs)]
    if L.check:
        preds = bounds_check.guard(L, op, lay, offsets, preds, signed)
    L.before_global_read()
    L.define(op.result, gather(L, t, lay, offsets, preds, others, signed))


@rule("store")
def _store(L: KernelLowering, op: Operation) -> None:
    t = L.tensor(op.operand("tensor"))
    value = op.operand("value")
    lay = layout_of(value)
    offs_v = op.operand("offsets")
    mask = L.regs(op.operand("mask")) if op.operand("mask") is not None else None
    preds = [_and(L, L.owned(lay, r), mask[r] if mask else None) for r in range(lay.num_regs)]
    signed = dtype_of(offs_v).is_signed
    if L.check:
        preds = bounds_check.guard(L, op, lay, L.regs(offs_v), preds, signed)
    scatter(L, t, lay, L.regs(offs_v), L.regs(value), preds, signed)
    L.after_global_write()


_RMW_INT = {AtomicKind.ADD: ("add", "add"), AtomicKind.MAX: ("max", "umax"),
            AtomicKind.MIN: ("min", "umin"), AtomicKind.XCHG: ("xchg", "xchg")}


def _atomic_one(L: KernelLowering, kind: AtomicKind, dt: DType, ptr: ir.Value,
                value: ir.Value) -> ir.Value:
    b = L.b
    if dt.is_int:
        op = _RMW_INT[kind][0 if dt.is_signed else 1]
        return b.atomic_rmw(op, ptr, value, "monotonic")
    if kind is AtomicKind.ADD:
        return b.atomic_rmw("fadd", ptr, value, "monotonic")
    ity = ir.IntType(dt.bits)
    iptr = b.bitcast(ptr, ir.PointerType(ity, L.vendor.global_addrspace))
    if kind is AtomicKind.XCHG:
        return b.bitcast(b.atomic_rmw("xchg", iptr, b.bitcast(value, ity), "monotonic"),
                         value.type)
    # max / min on floats: a compare-and-swap loop with the language's NaN-propagating
    # maximum/minimum (the hardware has no such float atomic).
    name = "maximum" if kind is AtomicKind.MAX else "minimum"
    entry = b.block
    first = b.load(iptr)
    loop = L.func.append_basic_block("atomic_cas")
    done = L.func.append_basic_block("atomic_done")
    b.branch(loop)
    b.position_at_end(loop)
    old = b.phi(ity)
    old.add_incoming(first, entry)
    new = S.binary(b, L.math, name, dt, b.bitcast(old, value.type), value)
    pair = b.cmpxchg(iptr, old, b.bitcast(new, ity), "monotonic", "monotonic")
    seen = b.extract_value(pair, 0)
    old.add_incoming(seen, b.block)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return b.bitcast(seen, value.type)


@rule("atomic")
def _atomic(L: KernelLowering, op: Operation) -> None:
    b = L.b
    t = L.tensor(op.operand("tensor"))
    value = op.operand("value")
    lay = layout_of(value)
    offs_v = op.operand("offsets")
    offsets = L.regs(offs_v)
    signed = dtype_of(offs_v).is_signed
    values = L.regs(value)
    mask = L.regs(op.operand("mask")) if op.operand("mask") is not None else None
    kind = op.attrs["kind"]
    dt = t.dtype
    L.before_global_read()
    checked = None
    if L.check:
        checked = bounds_check.guard(L, op, lay, offsets, [
            _and(L, L.owned(lay, r), mask[r] if mask else None) for r in range(lay.num_regs)],
            signed)
    olds = []
    owners = []
    for r in range(lay.num_regs):
        own = L.owned(lay, r)
        owners.append(own)
        pred = _and(L, own, mask[r] if mask else None) if checked is None else checked[r]
        zero = S.constant(dt, 0)
        olds.append(L.select_load(pred, lambda r=r: _atomic_one(
            L, kind, dt, element_ptr(L, t, offsets[r], signed), values[r]), zero))
    if lay.has_replicas:
        # Replicas learn the owner's old value through shared memory.
        size = dt.itemsize
        L.need_scratch(max(1, math.prod(lay.shape)) * size)
        L.barrier()
        for r, v in enumerate(olds):
            idx = L.flat_index(lay, r)
            ptr = L.smem_ptr(b.mul(idx, c32(size)), S.memory_type(dt))
            L.if_then_store(owners[r], lambda v=v, ptr=ptr: b.store(v, ptr))
        L.barrier()
        olds = L.unstage(lay, dt)
    L.after_global_write()
    L.define(op.result, olds)


# --- tile views -------------------------------------------------------------------------------

def zero_index_dims(L: KernelLowering, op: Operation) -> frozenset[int]:
    """The dims along which a tile view's index is the constant 0 (the weights of a norm:
    ``W.tile((N,), (0,))``): its start there is 0, whatever the extent."""
    return frozenset(d for d, v in enumerate(op.variadic("index"))
                     if isinstance(r := L.regs(v)[0], ir.Constant) and r.constant == 0)


def _tile_addressing(L: KernelLowering, op: Operation, lay: TileLayout
                     ) -> tuple[TensorHandle, list[ir.Value], list[ir.Value | None]]:
    """Per register: the element offset (index type) and whether it is inside the tensor.

    Along a dim whose size the bucket knows to be a positive multiple of the tile's extent
    (``L.divisible``), the tile is inside when its start is: one uniform compare; and at
    index 0 it is inside with no compare (the size is at least the extent), so its loads
    take no branch and leave no phi (whose values LLVM would widen at the join)."""
    b = L.b
    t = L.tensor(op.operand("tensor"))
    shape = op.attrs["shape"]
    starts = []
    for v, n in zip(op.variadic("index"), shape):
        idx = _to_i64(b, L.regs(v)[0], dtype_of(v).is_signed)
        starts.append(b.mul(idx, ir.Constant(I64, n)))
    sizes = [_to_i64(b, s) for s in t.sizes]
    at_zero = zero_index_dims(L, op)
    whole: dict[int, ir.Value | None] = {}
    for d, n in enumerate(shape):
        if (t.name, d, n) in L.divisible:
            whole[d] = None if d in at_zero else b.icmp_unsigned("<", starts[d], sizes[d])
        elif n == 1:
            whole[d] = b.icmp_unsigned("<", starts[d], sizes[d])
    # Offsets in 64 bits as (this thread's part) + (the register's constant part) * stride:
    # with a unit inner stride the register parts are constants, which LLVM folds into
    # the accesses' immediate offsets (one address register per access, not per vector).
    strides = [_to_i64(b, s) for s in t.strides]
    firsts = [b.add(starts[d], b.zext(L.thread_part(lay, d), I64)) for d in range(lay.rank)]
    base = None
    for d in range(lay.rank):
        term = b.mul(firsts[d], strides[d])
        base = term if base is None else b.add(base, term)
    offsets, inside = [], []
    for r in range(lay.num_regs):
        wraps = any(lay.may_wrap(r, d) for d in range(lay.rank))
        off = None if wraps else base
        conds = []
        for d in range(lay.rank):
            # Bounds in 64 bits: a tile index far outside must not wrap back inside.
            reg_off = lay.dims[d].offsets[r]
            if wraps:
                g = b.add(starts[d], b.zext(L.coord(lay, r, d), I64))
                term = b.mul(g, strides[d])
                off = term if off is None else b.add(off, term)
            else:
                g = b.add(firsts[d], ir.Constant(I64, reg_off)) if reg_off else firsts[d]
                if reg_off:
                    off = b.add(off, b.mul(ir.Constant(I64, reg_off), strides[d]))
            conds.append(whole[d] if d in whole else b.icmp_unsigned("<", g, sizes[d]))
        offsets.append(off if off is not None else ir.Constant(I64, 0))
        inside.append(L.all_of(conds))
    return t, offsets, inside


@rule("tile_load")
def _tile_load(L: KernelLowering, op: Operation) -> None:
    lay = layout_of(op.result)
    t, offsets, inside = _tile_addressing(L, op, lay)
    pad = S.constant(t.dtype, op.attrs.get("padding", 0))
    L.before_global_read()
    L.define(op.result, tile_access.tile_gather(L, t, lay, offsets, inside, pad,
                                                zero_index_dims(L, op)))


@rule("tile_store")
def _tile_store(L: KernelLowering, op: Operation) -> None:
    value = op.operand("value")
    lay = layout_of(value)
    t, offsets, inside = _tile_addressing(L, op, lay)
    preds = [_and(L, L.owned(lay, r), inside[r]) for r in range(lay.num_regs)]
    tile_access.tile_scatter(L, t, lay, offsets, L.regs(value), preds,
                             zero_index_dims(L, op))
    L.after_global_write()


from tilekit.codegen import tile_access  # noqa: E402  (uses the helpers above)

__all__: list[Callable] = []
