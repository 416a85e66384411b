"""Lowering of ops that move elements between threads or change a tile's shape:
broadcast, expand_dims, permute, reshape, convert_layout, reductions, scans, dot.

The layout pass chose layouts so that most of these stay inside a thread:
a broadcast operand has the result's encoding (sliced at added dims), a
reduction's result is a slice of its operand's encoding, a permute permutes the
encoding. Then a result register is an operand register, found by matching the
registers' offsets on the dims the two layouts share (``rename``). Where the
thread terms differ, elements go through shared memory (``stage``/``unstage``
at each element's row-major index, between barriers).

Reductions combine in-thread, then across lanes with butterfly shuffles over the
lane bits of the reduced dim, then across warps through shared memory, every
step in the accumulation type (float32 for 16-bit floats) with the reduction's
identity in slots a thread does not own; the result is replicated in every
thread, as a slice layout says.
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from tilekit.codegen import scalar_ops as S
from tilekit.codegen.lower import I32, KernelLowering, c32, dtype_of, layout_of
from tilekit.codegen.mathlib import intrinsic
from tilekit.codegen.rules import rule
from tilekit.errors import LoweringError
from tilekit.ir.core import Operation
from tilekit.ir.dtypes import DType
from tilekit.ir.ops.structure import ArgKind, ReduceKind
from tilekit.layout.tile_layouts import TileLayout


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def rename(src: TileLayout, regs: Sequence[ir.Value], dst: TileLayout,
           dim_map: Sequence[int | None]) -> list[ir.Value] | None:
    """``dst``'s registers taken from ``src``'s in the same thread, where ``dim_map[k]``
    is the ``src`` dim that ``dst`` dim ``k`` reads (None: ``dst`` has extent 1 there or
    ``src`` is broadcast along it). None when the thread terms differ (data must move)."""
    pairs = [(k, s) for k, s in enumerate(dim_map) if s is not None]
    for k, s in pairs:
        a, b = dst.dims[k], src.dims[s]
        if a.extent != b.extent or a.lane != b.lane or a.warp != b.warp:
            if a.extent == 1:
                continue
            return None
    # Replicated threads must agree too: a dst owner must find the value in its own thread,
    # which holds whenever the terms on every shared dim match (checked above).
    table: dict[tuple[int, ...], int] = {}
    for r in range(src.num_regs):
        key = tuple(src.dims[s].offsets[r] for _, s in pairs)
        table.setdefault(key, r)
    out = []
    for r in range(dst.num_regs):
        key = tuple(dst.dims[k].offsets[r] for k, _ in pairs)
        if key not in table:
            return None
        out.append(regs[table[key]])
    return out


def relayout(L: KernelLowering, src: TileLayout, regs: Sequence[ir.Value], dst: TileLayout,
             dtype: DType, dim_map: Sequence[int | None]) -> list[ir.Value]:
    """Registers of ``dst`` for the same elements: renamed in-thread when possible, else
    staged through shared memory at each element's row-major index."""
    out = rename(src, regs, dst, dim_map)
    if out is not None:
        return out
    L.stage(src, dtype, regs)
    return L.unstage(dst, dtype)


@rule("convert_layout")
def _convert_layout(L: KernelLowering, op: Operation) -> None:
    """Emit the op's ``tile_convert`` plan: renamed registers and ``shfl.sync.idx`` rounds
    (lane index from the plan's XOR lane map, the piece chosen by the lane's mask), or a
    staging through shared memory."""
    x = op.operand("x")
    src, dst = layout_of(x), layout_of(op.result)
    plan = op.attrs.get("tile_plan")
    regs = L.regs(x)
    if plan is not None and plan.staged and plan.store is not None:
        L.define(op.result, _swizzled_staging(L, plan, regs, dtype_of(x), dst.num_regs))
        return
    if plan is None or plan.staged:
        L.define(op.result, relayout(L, src, regs, dst, dtype_of(x), list(range(dst.rank))))
        return
    b = L.b
    wide = ir.IntType(L.warp_size)
    lane_w = b.zext(L.lane, wide) if L.warp_size > 32 else L.lane
    out = []
    for pieces in plan.sources:
        value = None
        for piece in reversed(pieces):
            v = regs[piece.reg]
            if not piece.lane_map.is_identity:
                v = _shuffle_idx(L, v, _lane_map(L, piece.lane_map))
            if value is None:
                value = v
                continue
            bit = b.and_(b.lshr(ir.Constant(wide, piece.lanes_mask), lane_w), ir.Constant(wide, 1))
            value = b.select(b.icmp_unsigned("!=", bit, ir.Constant(wide, 0)), v, value)
        out.append(value)
    L.define(op.result, out)


def _xor_part(L: KernelLowering, ident: ir.Value, cols: Sequence[int]) -> ir.Value:
    """XOR of ``cols[b]`` over the set bits b of a lane or warp id, in the prologue."""
    pb = L.pb
    out = c32(0)
    for bit, col in enumerate(cols):
        if col:
            has = pb.icmp_unsigned("!=", pb.and_(ident, c32(1 << bit)), c32(0))
            out = pb.xor(out, pb.select(has, c32(col), c32(0)))
    return out


def _swizzled_staging(L: KernelLowering, plan, regs: Sequence[ir.Value], dtype: DType,
                      dst_regs: int) -> list[ir.Value]:
    """Write at the plan's swizzled offsets, barrier, read at its offsets (bank-conflict
    free by the layout library's model)."""
    b = L.b
    mem = S.memory_type(dtype)
    size = max(1, dtype.itemsize)
    L.need_scratch(plan.shared_elems * size)

    def addresses(smap, runs):
        """Each access's byte offset, computed in units of its length (the XOR moves whole
        runs), so that the alignment is explicit in the arithmetic."""
        n = len(runs[0])
        thread = b.xor(_xor_part(L, L.lane, [c // n for c in smap.lane_cols]),
                       _xor_part(L, L.warp, [c // n for c in smap.warp_cols]))
        return [b.mul(b.xor(thread, c32(smap.reg[run[0]] // n)), c32(n * size))
                for run in runs]

    L.barrier()
    runs = plan.store.accesses(len(regs), size)
    for run, at in zip(runs, addresses(plan.store, runs)):
        values = [S.to_memory(b, regs[r], dtype) for r in run]
        b.store(values[0] if len(run) == 1 else _build_vector(b, values),
                L.smem_ptr(at, _vector_of(mem, len(run))), align=len(run) * size)
    L.barrier()
    out: list[ir.Value | None] = [None] * dst_regs
    runs = plan.load.accesses(dst_regs, size)
    for run, at in zip(runs, addresses(plan.load, runs)):
        got = b.load(L.smem_ptr(at, _vector_of(mem, len(run))), align=len(run) * size)
        for i, r in enumerate(run):
            out[r] = S.from_memory(b, got if len(run) == 1 else
                                   b.extract_element(got, c32(i)), dtype)
    return out


def _vector_of(elem: ir.Type, n: int) -> ir.Type:
    return elem if n == 1 else ir.VectorType(elem, n)


def _build_vector(b: ir.IRBuilder, values: Sequence[ir.Value]) -> ir.Value:
    vec = ir.Constant(ir.VectorType(values[0].type, len(values)), ir.Undefined)
    for i, v in enumerate(values):
        vec = b.insert_element(vec, v, c32(i))
    return vec


def _lane_map(L: KernelLowering, lane_map) -> ir.Value:
    b = L.b
    idx = c32(lane_map.base)
    for bit, col in enumerate(lane_map.cols):
        if col:
            has = b.icmp_unsigned("!=", b.and_(L.lane, c32(1 << bit)), c32(0))
            idx = b.xor(idx, b.select(has, c32(col), c32(0)))
    return idx


def _shuffle_idx(L: KernelLowering, v: ir.Value, lane: ir.Value) -> ir.Value:
    words = [L.vendor.shuffle_idx(L.b, w, lane) for w in _to_i32(L.b, v)]
    return _from_i32(L.b, words, v.type)


@rule("broadcast")
def _broadcast(L: KernelLowering, op: Operation) -> None:
    x = op.operand("x")
    src, dst = layout_of(x), layout_of(op.result)
    regs = L.regs(x)
    if src.rank == 0:
        L.define(op.result, [regs[0]] * dst.num_regs)
        return
    lead = dst.rank - src.rank
    dim_map: list[int | None] = [None] * dst.rank
    for d in range(src.rank):
        if src.shape[d] == dst.shape[lead + d]:
            dim_map[lead + d] = d
    out = rename(src, regs, dst, dim_map)
    if out is None:
        # Not the layout the pass promised: stage and read with broadcast coordinates.
        dt = dtype_of(x)
        L.stage(src, dt, regs)
        out = L.unstage(dst, dt, index_of=lambda r: _source_flat(L, dst, r, src.shape, lead))
    L.define(op.result, out)


def _source_flat(L: KernelLowering, dst: TileLayout, r: int, shape: Sequence[int],
                 lead: int) -> ir.Value:
    flat = c32(0)
    for d, n in enumerate(shape):
        c = c32(0) if n == 1 else L.coord(dst, r, lead + d)
        flat = L.b.add(L.b.mul(flat, c32(n)), c)
    return flat


@rule("expand_dims")
def _expand_dims(L: KernelLowering, op: Operation) -> None:
    x = op.operand("x")
    src, dst = layout_of(x), layout_of(op.result)
    axis = op.attrs["axis"]
    dim_map = [None if k == axis else (k if k < axis else k - 1) for k in range(dst.rank)]
    L.define(op.result, relayout(L, src, L.regs(x), dst, dtype_of(x), dim_map))


@rule("permute")
def _permute(L: KernelLowering, op: Operation) -> None:
    x = op.operand("x")
    src, dst = layout_of(x), layout_of(op.result)
    order = op.attrs["order"]
    out = rename(src, L.regs(x), dst, list(order))
    if out is None:
        dt = dtype_of(x)
        L.stage(src, dt, L.regs(x))
        out = L.unstage(dst, dt, index_of=lambda r: _permuted_flat(L, dst, r, src.shape, order))
    L.define(op.result, out)


def _permuted_flat(L: KernelLowering, dst: TileLayout, r: int, src_shape: Sequence[int],
                   order: Sequence[int]) -> ir.Value:
    """The source row-major index of dst register ``r``: dst dim k is source dim order[k]."""
    coords = {order[k]: L.coord(dst, r, k) for k in range(dst.rank)}
    flat = c32(0)
    for d, n in enumerate(src_shape):
        flat = L.b.add(L.b.mul(flat, c32(n)), coords[d])
    return flat


@rule("reshape")
def _reshape(L: KernelLowering, op: Operation) -> None:
    """Same elements in row-major order: staged, written and read at the same flat index."""
    x = op.operand("x")
    src, dst = layout_of(x), layout_of(op.result)
    dt = dtype_of(x)
    L.stage(src, dt, L.regs(x))
    L.define(op.result, L.unstage(dst, dt))


# --- reductions ---------------------------------------------------------------------------------

def _identity(kind: ReduceKind, dtype: DType) -> ir.Constant:
    """The element ``kind`` leaves unchanged, in ``dtype`` (the accumulation type)."""
    import numpy as np

    if dtype.is_bool:
        return ir.Constant(ir.IntType(1), int(kind in (ReduceKind.AND, ReduceKind.PROD,
                                                       ReduceKind.MIN)))
    if kind in (ReduceKind.SUM, ReduceKind.OR, ReduceKind.XOR):
        return S.constant(dtype, 0)
    if kind is ReduceKind.PROD:
        return S.constant(dtype, 1)
    if kind is ReduceKind.AND:
        return S.constant(dtype, -1) if dtype.is_signed else \
            S.constant(dtype, int(np.iinfo(dtype.np).max))
    low = kind is ReduceKind.MAX
    if dtype.is_float:
        return S.constant(dtype, float("-inf") if low else float("inf"))
    info = np.iinfo(dtype.np)
    return S.constant(dtype, int(info.min if low else info.max))


def _to_i32(b: ir.IRBuilder, v: ir.Value) -> list[ir.Value]:
    """A value as 32-bit words for a shuffle."""
    ty = v.type
    if isinstance(ty, ir.IntType):
        if ty.width == 64:
            return [b.trunc(v, I32), b.trunc(b.lshr(v, ir.Constant(ty, 32)), I32)]
        return [v if ty.width == 32 else b.zext(v, I32)]
    bits = {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(ty)]
    return _to_i32(b, b.bitcast(v, ir.IntType(bits)))


def _from_i32(b: ir.IRBuilder, words: list[ir.Value], ty: ir.Type) -> ir.Value:
    if isinstance(ty, ir.IntType):
        if ty.width == 64:
            lo = b.zext(words[0], ty)
            hi = b.shl(b.zext(words[1], ty), ir.Constant(ty, 32))
            return b.or_(lo, hi)
        return words[0] if ty.width == 32 else b.trunc(words[0], ty)
    bits = {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(ty)]
    return b.bitcast(_from_i32(b, words, ir.IntType(bits)), ty)


def shuffle_xor(L: KernelLowering, v: ir.Value, mask: int) -> ir.Value:
    words = [L.vendor.shuffle_xor(L.b, w, mask) for w in _to_i32(L.b, v)]
    return _from_i32(L.b, words, v.type)


class _Combiner:
    """Combines partial results (tuples: a value, or a value and an index for arg-reductions)."""

    def __init__(self, L: KernelLowering, op: Operation) -> None:
        self.L = L
        self.arg = op.name == "argreduce"
        dt = dtype_of(op.operand("x"))
        self.dtype = dt
        self.acc = S.accumulation_dtype(dt)
        if self.arg:
            self.argkind: ArgKind = op.attrs["kind"]
            self.kind = ReduceKind.MAX if self.argkind is ArgKind.ARGMAX else ReduceKind.MIN
        else:
            self.kind = op.attrs["kind"]

    def up(self, v: ir.Value) -> ir.Value:
        return S.cast(self.L.b, self.dtype, self.acc, v) if self.acc is not self.dtype else v

    def identity(self) -> tuple[ir.Value, ...]:
        ident = _identity(self.kind, self.acc)
        return (ident, c32(2**31 - 1)) if self.arg else (ident,)

    def __call__(self, x: tuple[ir.Value, ...], y: tuple[ir.Value, ...]) -> tuple[ir.Value, ...]:
        b = self.L.b
        if not self.arg:
            return (S.combine(b, self.L.math, self.kind, self.dtype, x[0], y[0]),)
        (v1, i1), (v2, i2) = x, y
        better = ">" if self.argkind is ArgKind.ARGMAX else "<"
        if self.acc.is_float:
            nan1 = b.fcmp_unordered("uno", v1, v1)
            nan2 = b.fcmp_unordered("uno", v2, v2)
            strictly = b.fcmp_ordered(better, v2, v1)
            tie = b.or_(b.fcmp_ordered("==", v1, v2), b.and_(nan1, nan2))
            take = b.or_(b.and_(nan2, b.not_(nan1)), strictly)
        else:
            cmp = b.icmp_signed if self.acc.is_signed else b.icmp_unsigned
            strictly = cmp(better, v2, v1)
            tie = b.icmp_signed("==", v1, v2)
            take = strictly
        take = b.or_(take, b.and_(tie, b.icmp_signed("<", i2, i1)))
        return (b.select(take, v2, v1), b.select(take, i2, i1))


def _pairwise(comb: _Combiner, items: list[tuple[ir.Value, ...]]) -> tuple[ir.Value, ...]:
    """``items`` combined as a balanced tree of neighbours, in order: the same number of
    steps as a left fold, but a dependent chain of log2(n) of them instead of n (a thread's
    64 elements of a 4097-wide bf16 row: 6 adds of latency, not 64, while the row kernel
    holds its loads back), and pairwise summation's smaller rounding error."""
    while len(items) > 1:
        paired = [comb(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
        items = paired + items[len(items) - len(items) % 2:]
    return items[0]


@rule("reduce", "argreduce")
def _reduce(L: KernelLowering, op: Operation) -> None:
    b = L.b
    x = op.operand("x")
    src, dst = layout_of(x), layout_of(op.result)
    axis = op.attrs["axis"]
    comb = _Combiner(L, op)
    regs = L.regs(x)
    others = [k for k in range(src.rank) if k != axis]
    groups: dict[tuple[int, ...], list[int]] = {}
    for r in range(src.num_regs):
        groups.setdefault(tuple(src.dims[k].offsets[r] for k in others), []).append(r)
    # 1. in-thread, with the identity in slots past the tile's edge along the axis
    partial: dict[tuple[int, ...], tuple[ir.Value, ...]] = {}
    ident = comb.identity()
    extent = src.dims[axis].extent
    for key, members in groups.items():
        items = []
        for r in members:
            item: tuple[ir.Value, ...] = (comb.up(regs[r]),)
            if comb.arg:
                item = (item[0], L.coord_unwrapped(src, r, axis))
            if src.may_wrap(r, axis):
                inside = b.icmp_unsigned("<", L.coord_unwrapped(src, r, axis), c32(extent))
                item = tuple(b.select(inside, v, i) for v, i in zip(item, ident))
            items.append(item)
        partial[key] = _pairwise(comb, items)
    # 2. across the lanes that hold the axis
    lane_t = src.dims[axis].lane
    bit = 1
    while bit < lane_t.mod:
        mask = lane_t.div * bit
        # Both partners combine (lower lane's, higher lane's), in that order, so that every
        # replica ends with the same bits (a max of +0 and -0, NaN payloads).
        lower = b.icmp_unsigned("==", b.and_(L.lane, c32(mask)), c32(0))
        for key, acc in partial.items():
            other = tuple(shuffle_xor(L, v, mask) for v in acc)
            first = tuple(b.select(lower, mine, theirs) for mine, theirs in zip(acc, other))
            second = tuple(b.select(lower, theirs, mine) for mine, theirs in zip(acc, other))
            partial[key] = comb(first, second)
        bit *= 2
    # 3. across the warps that hold the axis, through shared memory
    warp_t = src.dims[axis].warp
    order = [tuple(dst.dims[k].offsets[j] for k in range(dst.rank)) for j in range(dst.num_regs)]
    if len(order) != len(partial) or set(order) != set(partial):
        raise LoweringError(f"internal: reduction result layout {dst} does not slice {src}",
                            op.loc)
    if warp_t.mod > 1:
        partial = _across_warps(L, op, comb, src, dst, order, partial, warp_t)
    out = []
    for key in order:
        v = partial[key][1] if comb.arg else partial[key][0]
        if not comb.arg and comb.acc is not comb.dtype:
            v = S.cast(b, comb.acc, comb.dtype, v)
        out.append(v)
    L.define(op.result, out)


def _across_warps(L, op, comb, src, dst, order, partial, warp_t):
    b = L.b
    n_out = _numel(dst.shape)
    acc_mem = S.memory_type(comb.acc)
    vsize = max(1, comb.acc.itemsize)
    # values, then (arg-reductions) int32 indices starting on a 4-byte boundary; planes
    # (one per warp digit) start on 8-byte boundaries
    ibase = -(-n_out * vsize // 4) * 4
    plane = -(-(ibase + (4 * n_out if comb.arg else 0)) // 8) * 8
    L.need_scratch(warp_t.mod * plane)
    from tilekit.layout.tile_layouts import ThreadTerm

    digit = L.term("warp", ThreadTerm(warp_t.div, warp_t.mod, 1))
    L.barrier()
    for j, key in enumerate(order):
        flat = L.flat_index(dst, j)
        base = b.mul(digit, c32(plane))
        vptr = L.smem_ptr(b.add(base, b.mul(flat, c32(vsize))), acc_mem)
        b.store(S.to_memory(b, partial[key][0], comb.acc), vptr)
        if comb.arg:
            iptr = L.smem_ptr(b.add(base, b.add(c32(ibase), b.mul(flat, c32(4)))), I32)
            b.store(partial[key][1], iptr)
    L.barrier()
    result = {}
    for j, key in enumerate(order):
        flat = L.flat_index(dst, j)
        acc = None
        for k in range(warp_t.mod):
            base = c32(k * plane)
            v = S.from_memory(b, b.load(L.smem_ptr(b.add(base, b.mul(flat, c32(vsize))),
                                                   acc_mem)), comb.acc)
            item = (v,)
            if comb.arg:
                i = b.load(L.smem_ptr(b.add(base, b.add(c32(ibase), b.mul(flat, c32(4)))),
                                      I32))
                item = (v, i)
            acc = item if acc is None else comb(acc, item)
        result[key] = acc
    return result


# --- scans ----------------------------------------------------------------------------------------

@rule("scan")
def _scan(L: KernelLowering, op: Operation) -> None:
    """Inclusive scan along an axis, all threads together: the tile is staged in shared
    memory (accumulation type), then ``ceil(log2(extent))`` Hillis-Steele steps between
    two buffers (element ``i`` combines with the one ``d`` before it along the axis;
    each thread takes every ``threads``-th element), then each register reads its
    element back: O(numel * log(extent) / threads) work per thread."""
    b = L.b
    x = op.operand("x")
    lay = layout_of(x)
    axis = op.attrs["axis"]
    dt = dtype_of(x)
    acc_t = S.accumulation_dtype(dt)
    kind = op.attrs["kind"]
    regs = [S.cast(b, dt, acc_t, v) if acc_t is not dt else v for v in L.regs(x)]
    mem = S.memory_type(acc_t)
    size = max(1, acc_t.itemsize)
    n = _numel(lay.shape)
    extent = lay.shape[axis]
    step = _numel(lay.shape[axis + 1:])
    plane = -(-n * size // 16) * 16
    L.stage(lay, acc_t, regs)  # into buffer 0, between barriers
    L.need_scratch(2 * plane)
    per_thread = -(-n // L.threads)
    src, d = 0, 1
    while d < extent:
        dst = plane - src
        with L.counted_loop(per_thread, "scan_step") as (j, _):
            e = b.add(L.tid, b.mul(j, c32(L.threads)))
            with b.if_then(b.icmp_unsigned("<", e, c32(n))):
                v = S.from_memory(b, b.load(L.smem_ptr(b.add(c32(src), b.mul(e, c32(size))),
                                                       mem)), acc_t)
                pos = b.urem(b.udiv(e, c32(step)), c32(extent)) if step > 1 or extent < n \
                    else e
                has = b.icmp_unsigned(">=", pos, c32(d))
                before = b.select(has, b.sub(e, c32(d * step)), e)
                w = S.from_memory(b, b.load(L.smem_ptr(
                    b.add(c32(src), b.mul(before, c32(size))), mem)), acc_t)
                v = b.select(has, S.combine(b, L.math, kind, dt, w, v), v)
                b.store(S.to_memory(b, v, acc_t),
                        L.smem_ptr(b.add(c32(dst), b.mul(e, c32(size))), mem))
        L.barrier()
        src, d = dst, d * 2
    out = []
    for r in range(lay.num_regs):
        idx = L.flat_index(lay, r)
        v = S.from_memory(b, b.load(L.smem_ptr(b.add(c32(src), b.mul(idx, c32(size))), mem)),
                          acc_t)
        out.append(S.cast(b, acc_t, dt, v) if acc_t is not dt else v)
    L.define(op.result, out)


# --- dot ----------------------------------------------------------------------------------------

@rule("dot")
def _dot(L: KernelLowering, op: Operation) -> None:
    """``acc + a @ b``: on tensor cores when the layout pass planned it (``lower_wgmma``,
    ``lower_mma``), else on FMA units."""
    from tilekit.layout.mma_sync import MmaSyncPlan
    from tilekit.layout.wgmma_plan import WgmmaPlan

    path = op.attrs.get("path")
    if isinstance(path, WgmmaPlan):
        from tilekit.codegen.lower_wgmma import lower_wgmma_dot

        lower_wgmma_dot(L, op, path)
        return
    if isinstance(path, MmaSyncPlan):
        from tilekit.codegen.lower_mma import lower_mma_dot

        lower_mma_dot(L, op, path)
        return
    _fma_dot(L, op)


def _fma_dot(L: KernelLowering, op: Operation) -> None:
    """``acc + a @ b`` on FMA units: a and b are staged in shared memory (row-major), and
    each thread runs a K loop over its accumulator registers, loading each row of ``a``
    and each column of ``b`` it needs once per step."""
    b = L.b
    a_v, b_v, acc_v = op.operand("a"), op.operand("b"), op.operand("acc")
    la, lb, lc = layout_of(a_v), layout_of(b_v), layout_of(acc_v)
    m_, k_ = la.shape
    n_ = lb.shape[1]
    in_t, acc_t = dtype_of(a_v), dtype_of(acc_v)
    isz = max(1, in_t.itemsize)
    a_bytes = -(-m_ * k_ * isz // 16) * 16
    total = a_bytes + k_ * n_ * isz
    if total > L.target.max_shared_bytes:
        raise LoweringError(
            f"tk.dot of {m_}x{k_} @ {k_}x{n_} {in_t} needs {total} bytes of shared memory; "
            f"{L.target.name} has {L.target.max_shared_bytes}", op.loc,
            hints=["use smaller tiles (BM, BN, BK)"])
    L.need_scratch(total)
    mem = S.memory_type(in_t)
    L.barrier()
    for r, v in enumerate(L.regs(a_v)):
        b.store(S.to_memory(b, v, in_t), L.smem_ptr(b.mul(L.flat_index(la, r), c32(isz)), mem))
    for r, v in enumerate(L.regs(b_v)):
        off = b.add(c32(a_bytes), b.mul(L.flat_index(lb, r), c32(isz)))
        b.store(S.to_memory(b, v, in_t), L.smem_ptr(off, mem))
    L.barrier()
    # The accumulators live in the compute type (float32 for 16-bit accumulators) through
    # the K loop and are rounded once at the end, as the interpreter does.
    compute = _compute(acc_t)
    accs = [S.cast(b, acc_t, compute, v) if compute is not acc_t else v for v in L.regs(acc_v)]
    rows = {lc.dims[0].offsets[r]: r for r in range(lc.num_regs)}
    cols = {lc.dims[1].offsets[r]: r for r in range(lc.num_regs)}
    row_c = {o: L.coord(lc, r, 0) for o, r in rows.items()}
    col_c = {o: L.coord(lc, r, 1) for o, r in cols.items()}
    with L.counted_loop(k_, "dot_k") as (kk, entry):
        phis = []
        for v in accs:
            p = b.phi(v.type)
            p.add_incoming(v, entry)
            phis.append(p)
        a_vals = {}
        for o, m in row_c.items():
            idx = b.add(b.mul(m, c32(k_)), kk)
            a_vals[o] = _widen(b, S.from_memory(b, b.load(L.smem_ptr(b.mul(idx, c32(isz)),
                                                                     mem)), in_t), in_t, compute)
        b_vals = {}
        for o, n in col_c.items():
            idx = b.add(b.mul(kk, c32(n_)), n)
            b_vals[o] = _widen(b, S.from_memory(b, b.load(L.smem_ptr(
                b.add(c32(a_bytes), b.mul(idx, c32(isz))), mem)), in_t), in_t, compute)
        new = []
        for r, p in enumerate(phis):
            x = a_vals[lc.dims[0].offsets[r]]
            y = b_vals[lc.dims[1].offsets[r]]
            if compute.is_float:
                new.append(intrinsic(b, "fma", x, y, p))
            else:
                new.append(b.add(p, b.mul(x, y)))
        for p, v in zip(phis, new):
            p.add_incoming(v, b.block)
    L.define(op.result, [S.cast(b, compute, acc_t, v) if compute is not acc_t else v
                         for v in new])


def _compute(acc: DType) -> DType:
    """The type a dot accumulates in: float32 for 16-bit floats, else the accumulator's."""
    return DType.FLOAT32 if acc in (DType.FLOAT16, DType.BFLOAT16) else acc


def _widen(b: ir.IRBuilder, v: ir.Value, src: DType, compute: DType) -> ir.Value:
    """An operand in the compute type: 16-bit floats multiply exactly in float32."""
    return S.cast(b, src, compute, v) if src is not compute else v
