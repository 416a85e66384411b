"""``tk.dot`` on ``wgmma.mma_async`` (sm_90a), as ``tilekit.layout.wgmma_plan`` planned it.

Both operands are pipeline stages that TMA filled in the plan's swizzled boxes; their
``smem_read`` produced no registers, only where the stage is (``StageOperand``). The dot:

* ``wgmma.fence`` (the accumulator registers were written by ordinary instructions:
  zeros, or the previous dot's wait);
* per k step, per 64-row block of the warpgroup, one ``wgmma.mma_async.m64nNk16`` with the
  plan's descriptors plus the stages' shared addresses (the plan's are relative to a
  stage on the 1024-byte repeat; the warpgroup's A rows add ``a_warpgroup_step``);
* ``wgmma.commit_group`` and ``wgmma.wait_group 0``, or ``wgmma.wait_group 1`` when the
  schedule lets the group run on into the next step (the dot's ``wgmma_pending``: its
  result is only carried into the next such dot); the pipeline's loop then waits for the
  last group at its exit (``drain``), and releases each stage one step late.

The accumulator is ``MmaEncoding(ACC, (warps, 1))``: the registers of M repeat ``i`` are
the D registers of block ``i``'s instruction, in order. The instruction and the wait are
inline PTX whose accumulator operands are tied in-outs, so LLVM sees every use of the
result after the wait (nothing reads a register wgmma is still writing). The pipeline
releases the stages after the body (``sched``'s ``late_release``), that is after the wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from tilekit.codegen.lower import I64, KernelLowering, c32, dtype_of
from tilekit.errors import LoweringError
from tilekit.ir.core import Operation
from tilekit.ir.dtypes import DType
from tilekit.layout.wgmma_plan import WARPGROUP_WARPS, WgmmaPlan, WgmmaStage

F32 = ir.FloatType()

__all__ = ["StageOperand", "drain", "lower_wgmma_dot"]


@dataclass(frozen=True)
class StageOperand:
    """What a wgmma stage's ``smem_read`` defines: the stage and its byte offset in
    dynamic shared memory (i32)."""

    stage: WgmmaStage
    offset: ir.Value


def lower_wgmma_dot(L: KernelLowering, op: Operation, plan: WgmmaPlan) -> None:
    """Emit ``acc + a @ b`` as ``plan`` says (module docstring)."""
    b = L.b
    if L.role.num_warps != plan.warpgroups * WARPGROUP_WARPS:
        raise LoweringError(f"internal: a wgmma plan for {plan.warpgroups} warpgroups runs "
                            f"on {L.role.num_warps} warps", op.loc)
    a_src, b_src = (_operand(L, op, slot) for slot in ("a", "b"))
    if (a_src.stage, b_src.stage) != (plan.a, plan.b):
        raise LoweringError("internal: the dot's stages are not its plan's", op.loc)
    acc_v = op.operand("acc")
    if dtype_of(acc_v) is not DType.FLOAT32:
        raise LoweringError("internal: a wgmma accumulator that is not float32", op.loc)
    accs = list(L.regs(acc_v))
    per_block = plan.n // 2
    blocks = len(plan.a_desc)
    if len(accs) != per_block * blocks:
        raise LoweringError(f"internal: {len(accs)} accumulator registers for {blocks} "
                            f"block(s) of m64n{plan.n}", op.loc)
    a_base = _descriptor_base(L, a_src.offset)
    if plan.warpgroups > 1:
        group = L.in_prologue(("warpgroup", L.role.first_warp),
                              lambda pb: pb.zext(pb.lshr(L.warp, c32(2)), I64))
        a_base = b.add(a_base, b.mul(group, ir.Constant(I64, plan.a_warpgroup_step)))
    b_base = _descriptor_base(L, b_src.offset)
    one = c32(1)
    accs = _fence(b, accs)
    for s, b_desc in enumerate(plan.b_desc):
        bd = b.add(b_base, ir.Constant(I64, b_desc))
        for i in range(blocks):
            ad = b.add(a_base, ir.Constant(I64, plan.a_desc[i][s]))
            part = accs[i * per_block:(i + 1) * per_block]
            accs[i * per_block:(i + 1) * per_block] = _mma(b, plan, part, ad, bd, one)
    b.call(_void_asm("wgmma.commit_group.sync.aligned;"), [])
    L.define(op.result, _wait(b, accs, op.attrs.get("wgmma_pending", 0)))


def _operand(L: KernelLowering, op: Operation, slot: str) -> StageOperand:
    v = L.values.get(id(op.operand(slot)))
    if not isinstance(v, StageOperand):
        raise LoweringError(f"internal: wgmma operand {slot} is not a stage read in place",
                            op.loc)
    return v


def _descriptor_base(L: KernelLowering, offset: ir.Value) -> ir.Value:
    """The stage's shared-window address as a descriptor's start-address field (i64)."""
    b = L.b
    addr = b.ptrtoint(L.shared_at(offset, ir.IntType(8)), I64)
    return b.and_(b.lshr(addr, ir.Constant(I64, 4)), ir.Constant(I64, 0x3FFF))


def _void_asm(text: str) -> ir.InlineAsm:
    return ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}",
                        side_effect=True)


def _tied(b: ir.IRBuilder, text: str, values: Sequence[ir.Value],
          extra: Sequence[ir.Value] = (), extra_constraints: Sequence[str] = ()
          ) -> list[ir.Value]:
    """Inline PTX whose first ``len(values)`` operands are float in-outs (``$0 ..``, tied
    to the inputs ``values``), then ``extra`` inputs; the new float values."""
    n = len(values)
    constraints = ["=f"] * n + [str(i) for i in range(n)] + list(extra_constraints)
    ftype = ir.FunctionType(ir.LiteralStructType([F32] * n),
                            [F32] * n + [v.type for v in extra])
    asm = ir.InlineAsm(ftype, text, ",".join(constraints) + ",~{memory}", side_effect=True)
    out = b.call(asm, list(values) + list(extra))
    return [b.extract_value(out, i) for i in range(n)]


def _fence(b: ir.IRBuilder, accs: list[ir.Value]) -> list[ir.Value]:
    """``wgmma.fence``, ordered after the accumulator's last ordinary writes."""
    return _tied(b, "wgmma.fence.sync.aligned;", accs)


def _wait(b: ir.IRBuilder, accs: list[ir.Value], pending: int = 0) -> list[ir.Value]:
    """``wgmma.wait_group pending``: the accumulator as it is once at most ``pending``
    groups are in flight (with 1, this dot's group may still be: the values flow on,
    tied, into the next dot or ``drain``)."""
    return _tied(b, f"wgmma.wait_group.sync.aligned {pending};", accs)


def drain(b: ir.IRBuilder, accs: list[ir.Value]) -> list[ir.Value]:
    """At the exit of a pipeline's loop whose dots left their last group in flight
    (``wgmma_drain``): wait for every group; the accumulator's final values."""
    return _wait(b, accs, 0)


def _mma(b: ir.IRBuilder, plan: WgmmaPlan, accs: list[ir.Value], a_desc: ir.Value,
         b_desc: ir.Value, scale_d: ir.Value) -> list[ir.Value]:
    n = len(accs)
    regs = ", ".join(f"${i}" for i in range(n))
    trans_a, trans_b = plan.a.major.value, plan.b.major.value
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${2 * n + 2}, 0; {plan.instruction} "
            f"{{{regs}}}, ${2 * n}, ${2 * n + 1}, p, 1, 1, {trans_a}, {trans_b}; }}")
    return _tied(b, text, accs, [a_desc, b_desc, scale_d], ["l", "l", "r"])

