"""``tk.dot`` on tensor cores: ``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}`` (sm_80,
also run on sm_90a), as ``tilekit.layout.mma_sync`` planned it.

The accumulator is in the instruction's fragment layout (the layout pass put it there), so
its registers go straight into the instructions; a 16-bit accumulator is widened to float32
for the whole dot and rounded once at the end, as the interpreter does. Each operand comes
from its registers (already in the fragment layout: pairs packed into 32-bit words) or is
staged: barrier, every thread stores its registers at the plan's swizzled offsets (16-byte
vectors where the plan says so), barrier, then ``ldmatrix.sync.aligned.m8n8.{x4,x2}[.trans]``
per fragment repeat, k-step by k-step, each lane addressing the row the plan fitted for it.
The staged tiles share the scratch area with conversions and reductions, A first, B at the
next 128-byte boundary.

An operand read from a pipeline stage laid out for it (``mma_sync.stage_read``) arrives in
its fragment layout: ``read_stage`` (the ``smem_read`` of ``lower_async``) loads it with the
same ``ldmatrix``es straight from the stage, and the dot takes it from registers.

ldmatrix and mma are NVVM intrinsics (``llvm.nvvm.ldmatrix.*``, ``llvm.nvvm.mma.*``), which
LLVM knows to be convergent, like the barriers and shuffles of ``nvptx``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from tilekit.codegen import scalar_ops as S
from tilekit.codegen.intrinsics import call
from tilekit.codegen.lower import (
    I32,
    SCRATCH_ALIGN,
    KernelLowering,
    c32,
    dtype_of,
    layout_of,
)
from tilekit.codegen.lower_memory import pack
from tilekit.errors import LoweringError
from tilekit.ir.core import Operation
from tilekit.ir.dtypes import DType
from tilekit.layout.mma_sync import (
    ChunkSwizzle,
    LdmatrixRead,
    MmaSyncPlan,
    StagedOperand,
    rep_registers,
)
from tilekit.layout.tile_layouts import TileLayout

F32 = ir.FloatType()

__all__ = ["lane_part", "lower_mma_dot", "read_stage", "row_offset", "swizzled_offset"]


def lower_mma_dot(L: KernelLowering, op: Operation, plan: MmaSyncPlan) -> None:
    """Emit ``acc + a @ b`` as ``plan`` says (module docstring)."""
    if not L.target.is_nvidia:
        raise LoweringError(f"internal: an mma.sync plan for {L.target.name}", op.loc)
    b = L.b
    a_v, b_v, acc_v = op.operand("a"), op.operand("b"), op.operand("acc")
    acc_t = dtype_of(acc_v)
    accs = [S.cast(b, acc_t, DType.FLOAT32, v) for v in L.regs(acc_v)]
    bases = _stage(L, op, plan, ((plan.a, a_v), (plan.b, b_v)))
    for ks, steps in enumerate(plan.steps):
        a_words = _fragments(L, plan.a, a_v, plan.a_layout, {s.a for s in steps}, ks, bases)
        b_words = _fragments(L, plan.b, b_v, plan.b_layout, {s.b for s in steps}, ks, bases)
        for step in steps:
            out = _mma(L, plan.inputs, a_words[step.a], b_words[step.b],
                       [accs[r] for r in step.acc])
            for r, v in zip(step.acc, out):
                accs[r] = v
    L.define(op.result, [S.cast(b, DType.FLOAT32, acc_t, v) for v in accs])


# --- staging -----------------------------------------------------------------------------------

def _stage(L: KernelLowering, op: Operation, plan: MmaSyncPlan, operands) -> dict[str, int]:
    """Store the staged operands into scratch between two barriers; their byte offsets."""
    bases: dict[str, int] = {}
    total = 0
    for staged, _ in operands:
        if staged is not None:
            bases[staged.name] = total
            total = -(-(total + staged.bytes) // SCRATCH_ALIGN) * SCRATCH_ALIGN
    if not bases:
        return bases
    if total > L.target.max_shared_bytes:
        (m, k), n = plan.a_layout.shape, plan.b_layout.shape[1]
        raise LoweringError(
            f"tk.dot of {m}x{k} @ {k}x{n} {plan.inputs} needs {total} bytes of shared memory "
            f"for its operands; {L.target.name} has {L.target.max_shared_bytes}", op.loc,
            hints=["use smaller tiles (BM, BN, BK)"])
    L.need_scratch(total)
    L.barrier()  # the scratch's earlier readers are done
    for staged, value in operands:
        if staged is not None:
            _store_operand(L, staged, value, bases[staged.name])
    L.barrier()
    return bases


def _store_operand(L: KernelLowering, staged: StagedOperand, value, base: int) -> None:
    """Every register group to its swizzled place (replicas store the same value twice)."""
    b = L.b
    lay = layout_of(value)
    dt = dtype_of(value)
    regs = L.regs(value)
    mem = S.memory_type(dt)
    width = staged.store_width
    ty = mem if width == 1 else ir.VectorType(mem, width)
    for group in staged.store_groups:
        row, col = staged.memory((L.coord(lay, group[0], 0), L.coord(lay, group[0], 1)))
        offset = swizzled_offset(b, staged.swizzle, row, col)
        ptr = L.smem_ptr(b.add(c32(base), b.shl(offset, c32(1))), ty)
        b.store(pack(L, dt, [regs[r] for r in group]), ptr, align=2 * width)


def swizzled_offset(b: ir.IRBuilder, sw: ChunkSwizzle, row: ir.Value, col: ir.Value) -> ir.Value:
    """``ChunkSwizzle.offset`` in LLVM IR (elements)."""
    log_block = sw.block.bit_length() - 1
    inner = b.and_(col, c32(sw.block - 1))
    chunk = b.lshr(inner, c32(3))
    if sw.max_phase > 1:
        phase = b.lshr(row, c32(sw.per_phase.bit_length() - 1)) if sw.per_phase > 1 else row
        chunk = b.xor(chunk, b.and_(phase, c32(sw.max_phase - 1)))
    blk = b.lshr(col, c32(log_block))
    if sw.blocked:
        start = b.add(b.mul(blk, c32(sw.rows * sw.block)), b.shl(row, c32(log_block)))
    else:
        start = b.add(b.mul(row, c32(sw.cols)), b.shl(blk, c32(log_block)))
    return b.add(b.add(start, b.shl(chunk, c32(3))), b.and_(col, c32(7)))


# --- fragments -----------------------------------------------------------------------------------

def _fragments(L: KernelLowering, staged: StagedOperand | None, value, layout: TileLayout,
               reps: set[int], ks: int, bases: dict[str, int]) -> dict[int, list[ir.Value]]:
    """The 32-bit words of the fragment repeats ``reps`` that k-step ``ks`` uses."""
    out: dict[int, list[ir.Value]] = {}
    if staged is None:
        regs = L.regs(value)
        dt = dtype_of(value)
        for rep in sorted(reps):
            elems = [regs[r] for r in rep_registers(layout, rep)]
            out[rep] = [_pack_word(L.b, dt, elems[i], elems[i + 1])
                        for i in range(0, len(elems), 2)]
        return out
    words_per_rep = 4 if staged.name == "A" else 2
    base = bases[staged.name]
    for read in staged.reads[ks]:
        words = _ldmatrix(L, staged, read,
                          lambda off, ty: L.smem_ptr(L.b.add(c32(base), off), ty))
        for (rep, i), w in zip(read.words, words):
            out.setdefault(rep, [None] * words_per_rep)[i] = w
    return out


def _pack_word(b: ir.IRBuilder, dt: DType, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """Two 16-bit elements as one 32-bit register, the lower-indexed in the low half."""
    pair = ir.Constant(ir.VectorType(S.llvm_type(dt), 2), None)
    pair = b.insert_element(b.insert_element(pair, lo, c32(0)), hi, c32(1))
    return b.bitcast(pair, I32)


def read_stage(L: KernelLowering, staged: StagedOperand, layout: TileLayout, dt: DType,
               stage: ir.Value) -> list[ir.Value]:
    """The registers of ``layout`` (the fragment layout ``staged`` reads, from
    ``mma_sync.stage_read``) loaded by ``ldmatrix`` from the pipeline stage at byte offset
    ``stage`` of dynamic shared memory, every k-step's reads one after the other; each
    32-bit word is the pair of 16-bit registers it holds (the dot packs them back)."""
    b = L.b
    regs: list[ir.Value | None] = [None] * layout.num_regs
    pair = ir.VectorType(S.llvm_type(dt), 2)
    for step in staged.reads:
        for read in step:
            words = _ldmatrix(L, staged, read, lambda off, ty: L.shared_at(b.add(stage, off), ty))
            for (rep, i), w in zip(read.words, words):
                both = b.bitcast(w, pair)
                first = rep_registers(layout, rep)[2 * i]
                regs[first] = b.extract_element(both, c32(0))
                regs[first + 1] = b.extract_element(both, c32(1))
    if any(r is None for r in regs):
        raise LoweringError("internal: the ldmatrix reads of a stage miss fragment registers")
    return regs  # type: ignore[return-value]


def _ldmatrix(L: KernelLowering, staged: StagedOperand, read: LdmatrixRead,
              pointer: Callable[[ir.Value, ir.Type], ir.Value]) -> list[ir.Value]:
    """One ldmatrix; ``pointer(byte offset in the tile, type)`` is the shared address."""
    b = L.b
    lane = L.in_prologue(("ldmatrix lane", read.lane_steps),
                         lambda pb: lane_part(pb, L.lane, read.lane_steps))
    warp = tuple(L.term("warp", t) for t in staged.warp_terms)
    offset = row_offset(b, staged, read, lane, warp)
    ptr = pointer(b.shl(offset, c32(1)), ir.IntType(16))
    name = (f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{read.count}"
            f"{'.trans' if staged.trans else ''}.b16")
    result = call(b, name, ir.LiteralStructType([I32] * read.count), [ptr])
    return [b.extract_value(result, i) for i in range(read.count)]


def lane_part(b: ir.IRBuilder, lane: ir.Value, steps: Sequence[tuple[int, int]]
              ) -> tuple[ir.Value, ir.Value]:
    """(row, col) of a lane's ldmatrix row without origin and warp: the sum of
    ``steps[bit]`` over the lane's set bits (``LdmatrixRead.rows``)."""
    parts = []
    for k in range(2):
        acc: ir.Value = c32(0)
        for bit, step in enumerate(steps):
            if step[k]:
                on = b.and_(b.lshr(lane, c32(bit)) if bit else lane, c32(1))
                acc = b.add(acc, b.mul(on, c32(step[k])))
        parts.append(acc)
    return parts[0], parts[1]


def row_offset(b: ir.IRBuilder, staged: StagedOperand, read: LdmatrixRead,
               lane: tuple[ir.Value, ir.Value], warp: tuple[ir.Value, ir.Value]) -> ir.Value:
    """The element offset of a lane's ldmatrix row: lane part + warp part + the read's
    origin, wrapped into the tile, through the swizzle."""
    sw = staged.swizzle
    coords = []
    for k, extent in enumerate((sw.rows, sw.cols)):
        origin = read.origin[k]
        raw = b.add(lane[k], warp[k])
        if origin:
            raw = b.add(raw, c32(origin))
        span = origin + sum(max(0, s[k]) for s in read.lane_steps) + staged.warp_terms[k].span
        coords.append(_wrap(b, raw, span, extent))
    return swizzled_offset(b, sw, coords[0], coords[1])


def _wrap(b: ir.IRBuilder, raw: ir.Value, span: int, extent: int) -> ir.Value:
    """``raw mod extent`` for a value known to be at most ``span``."""
    if span < extent:
        return raw
    if span < 2 * extent:
        inside = b.icmp_unsigned("<", raw, c32(extent))
        return b.select(inside, raw, b.sub(raw, c32(extent)))
    return b.urem(raw, c32(extent))


# --- the instruction ---------------------------------------------------------------------------

def _mma(L: KernelLowering, inputs: DType, a: Sequence[ir.Value], bw: Sequence[ir.Value],
         c: Sequence[ir.Value]) -> list[ir.Value]:
    """``d = a @ b + c`` of one m16n8k16 tile: 4 + 2 words of 16-bit pairs, 4 floats."""
    b = L.b
    if inputs is DType.BFLOAT16:
        name, words = "llvm.nvvm.mma.m16n8k16.row.col.bf16", list(a) + list(bw)
    elif inputs is DType.FLOAT16:
        pair = ir.VectorType(ir.HalfType(), 2)
        name, words = ("llvm.nvvm.mma.m16n8k16.row.col.f32.f32",
                       [b.bitcast(w, pair) for w in list(a) + list(bw)])
    else:
        raise LoweringError(f"internal: mma.sync of {inputs}")
    result = call(b, name, ir.LiteralStructType([F32] * 4), words + list(c))
    return [b.extract_value(result, i) for i in range(4)]
