"""Per-element semantics of the elementwise ops, as LLVM IR on scalar values.

The lowering driver calls these once per register with an ``ir.IRBuilder`` and
scalar LLVM values; each function emits exactly what the op's numpy reference
(``tilekit/ir/ops/elementwise.py`` with ``tilekit/ir/numerics.py``) computes, on
every target: 16-bit floats compute in float32 and round once per op, integer
``//``/``%`` floor, float ``//``/``%`` follow numpy's ``divmod``, ``maximum`` and
``minimum`` propagate NaN (and return the second operand on ties, as numpy does
for -0.0/+0.0), shifts clamp, float-to-int casts saturate. Where the interpreter
raises (integer ``//`` or ``%`` by zero) the result here is defined and
harmless: 0, as numpy gives.

Transcendentals go through a :class:`~tilekit.codegen.mathlib.MathLib`, which
owns the per-target choice (libdevice on NVPTX, LLVM intrinsics and our own
formulas elsewhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from llvmlite import ir
from llvmlite.ir.types import _BaseFloatType

from tilekit.codegen.mathlib import intrinsic
from tilekit.ir import numerics
from tilekit.ir.dtypes import DType

if TYPE_CHECKING:
    from tilekit.codegen.mathlib import MathLib
    from tilekit.ir.ops.structure import ReduceKind


class BFloatType(_BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has no such type); constants print as ``0xR`` + bits."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        import ml_dtypes  # 5-10 ms to import: only for kernels with bfloat16 constants

        bits = int(np.asarray(value, dtype=ml_dtypes.bfloat16).view(np.uint16))
        return f"0xR{bits:04X}"


BFloatType._create_instance()

_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_TYPES: dict[DType, ir.Type] = {
    DType.BOOL: ir.IntType(1),
    DType.FLOAT16: ir.HalfType(),
    DType.BFLOAT16: BFloatType(),
    DType.FLOAT32: _F32,
    DType.FLOAT64: _F64,
}


def llvm_type(dtype: DType) -> ir.Type:
    """The register type of ``dtype`` (bool is ``i1``; unsigned ints are plain ``iN``)."""
    return _TYPES.get(dtype) or ir.IntType(dtype.bits)


def memory_type(dtype: DType) -> ir.Type:
    """The type as stored in memory: bool takes a byte, everything else as in registers."""
    return ir.IntType(8) if dtype.is_bool else llvm_type(dtype)


def to_memory(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    return b.zext(v, ir.IntType(8)) if dtype.is_bool else v


def from_memory(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    """Memory to register; a bool byte is true when nonzero (as numpy reads it)."""
    return b.icmp_unsigned("!=", v, ir.Constant(ir.IntType(8), 0)) if dtype.is_bool else v


def constant(dtype: DType, value: bool | int | float) -> ir.Constant:
    """``value`` converted to ``dtype`` exactly as ``numerics.cast`` converts a Python scalar."""
    v = numerics.cast(np.asarray(value), dtype)
    if dtype.is_bool:
        return ir.Constant(ir.IntType(1), int(bool(v)))
    if dtype.is_float:
        return ir.Constant(llvm_type(dtype), float(np.asarray(v).astype(np.float64)))
    return ir.Constant(ir.IntType(dtype.bits), _signed_bits(int(v), dtype.bits))


def _signed_bits(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _int(bits: int, value: int) -> ir.Constant:
    return ir.Constant(ir.IntType(bits), value)


def _compute(dtype: DType) -> DType:
    """The type arithmetic runs in: 16-bit floats compute in float32."""
    return DType.FLOAT32 if dtype in (DType.FLOAT16, DType.BFLOAT16) else dtype


def _up(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    return b.fpext(x, _F32) if _compute(dtype) is not dtype else x


def _down(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    return b.fptrunc(x, llvm_type(dtype)) if _compute(dtype) is not dtype else x


def _fconst(dtype: DType, value: float) -> ir.Constant:
    return ir.Constant(llvm_type(dtype), value)


# --- binary -----------------------------------------------------------------------------------

def binary(b: ir.IRBuilder, math: MathLib, name: str, dtype: DType, x: ir.Value,
           y: ir.Value) -> ir.Value:
    """``x name y`` in ``dtype`` (both operands already of that type)."""
    if name in ("and", "or", "xor"):
        return {"and": b.and_, "or": b.or_, "xor": b.xor}[name](x, y)
    if dtype.is_float:
        c = _compute(dtype)
        return _down(b, dtype, _float_binary(b, math, name, c, _up(b, dtype, x), _up(b, dtype, y)))
    if name in ("shl", "shr"):
        return _shift(b, name, dtype, x, y)
    if name in ("add", "sub", "mul"):
        return {"add": b.add, "sub": b.sub, "mul": b.mul}[name](x, y)
    if name in ("floordiv", "mod"):
        return _int_divmod(b, dtype, x, y)[0 if name == "floordiv" else 1]
    if name in ("maximum", "minimum"):
        op = ">" if name == "maximum" else "<"
        cmp = b.icmp_signed if dtype.is_signed else b.icmp_unsigned
        return b.select(cmp(op, x, y), x, y)
    raise NotImplementedError(f"binary {name} on {dtype}")


def _float_binary(b: ir.IRBuilder, math: MathLib, name: str, c: DType, x: ir.Value,
                  y: ir.Value) -> ir.Value:
    if name in ("add", "sub", "mul", "div"):
        return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}[name](x, y)
    if name in ("maximum", "minimum"):
        # numpy: (x > y || isnan(x)) ? x : y -- NaN wins; on ties (-0.0, +0.0) y wins.
        wins = b.fcmp_ordered(">" if name == "maximum" else "<", x, y)
        return b.select(b.or_(wins, b.fcmp_unordered("uno", x, x)), x, y)
    if name in ("floordiv", "mod"):
        return _float_divmod(b, math, c, x, y)[0 if name == "floordiv" else 1]
    if name in ("pow", "atan2"):
        return math.call(b, name, c, x, y)
    raise NotImplementedError(f"binary {name} on {c}")


class SharedDivisor:
    """``x / y`` for many ``x`` and one ``y`` (a row's sum, a broadcast scalar), float32 or
    a 16-bit float computing in float32: bit for bit what ``fdiv`` gives, the divisor's
    work done once. Why: PTX ``div.rn.f32`` expands, per division, to a reciprocal, a
    range check and a slow-path call, and ptxas spends ~2 ms on each (70 of the 160 ms
    that the example softmax of 4097 columns, 33 divisions per thread, took).

    How: in float64, where no float32 quotient overflows or underflows. ``r = RN(1/y)``:
    the target's estimate and three Newton steps. From any estimate within 2^-14 the
    second step leaves ``r`` within 2^-52, the third (its ``1 - y*r`` exact) lands within
    2^-104 of ``1/y``, which lies at least 2^-78 from a float64 midpoint (``1 - y*M*2^k``
    is a nonzero multiple of ``y``'s and ``M``'s last places), so it rounds to ``RN(1/y)``.
    Per element ``q0 = x * r``, within 2^-52 (relative) of ``x / y``.

    Rounding ``q0`` to float32 is right except at ties. A quotient that is not a float32
    midpoint ``M * 2^k`` (``M`` odd) lies more than 2^-49 from one (``x - y * M * 2^k`` is
    a nonzero multiple of the last places of ``y`` and ``M``: at least ``1/(Y*M)``, ``Y``
    and ``M`` below 2^24 and 2^25), so ``q0`` is on the same side. A tie ``x / y == M *
    2^k`` needs ``M`` times the odd part of ``y`` to fit ``x``'s 24 bits, so ``M < 2^24``:
    only ties between two subnormals (``odd * 2^-150``), and ``q0`` is inexact only when
    ``y`` is not a power of two. There ``q0`` can be one float64 step off the tie, towards
    the odd neighbour (``RN(1/y)`` off by nearly half an ulp: ``TIE_DIVISORS`` in
    ``tests/lang/helpers.py``). The correction fixes that: the remainder ``x - y * q0`` is
    exact (one fma) and ``q1 = q0 + rem * r`` (one fma) lies within 2^-100 of ``x / y``,
    a float64, so ``q1`` is the tie itself and the final rounding sees it. Where ``q1`` is
    NaN (an infinite ``x``, a zero or infinite ``y``) or zero (a zero ``x``: ``q1``'s sign
    may be wrong), ``q0`` is the right answer.

    16-bit floats need no correction: float16 quotients are never subnormal in float32
    (``|x / y| >= 2^-24 / 65504``), and a bfloat16 tie rounds to the same bfloat16 from
    either float32 neighbour (they are 2^-149 apart; a bfloat16 rounding boundary, an odd
    multiple of 2^-134, at one of them needs ``M = odd * 2^16 +- 1``, more than the 8 bits
    of ``x``). ``tests/codegen/test_shared_divisor.py`` runs this IR on the host with
    hardware-like estimates; ``tests/codegen/test_scalar_ops.py`` (host) and
    ``tests/lang/test_differential.py`` (GPU) check it bit for bit, ties included."""

    def __init__(self, b: ir.IRBuilder, math: MathLib, dtype: DType, y: ir.Value) -> None:
        self.dtype = dtype
        f64 = ir.DoubleType()
        self.y = b.fpext(_up(b, dtype, y), f64)
        self.neg_y = b.fneg(self.y)
        one = ir.Constant(f64, 1.0)
        seed = r = math.reciprocal_estimate(b, self.y)
        for _ in range(3):  # each Newton step squares the relative error
            r = intrinsic(b, "fma", r, intrinsic(b, "fma", self.neg_y, r, one), r)
        self.r = b.select(b.fcmp_unordered("uno", r, r), seed, r)  # y zero, infinite, NaN

    @staticmethod
    def applies(dtype: DType) -> bool:
        return _compute(dtype) is DType.FLOAT32

    def __call__(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        xd = b.fpext(_up(b, self.dtype, x), self.y.type)
        q = q0 = b.fmul(xd, self.r)
        if self.dtype is DType.FLOAT32:  # ties between subnormals
            rem = intrinsic(b, "fma", self.neg_y, q0, xd)
            q1 = intrinsic(b, "fma", rem, self.r, q0)
            q = b.select(b.fcmp_unordered("==", q1, ir.Constant(q1.type, 0.0)), q0, q1)
        return _down(b, self.dtype, b.fptrunc(q, _F32))


def _float_divmod(b: ir.IRBuilder, math: MathLib, c: DType, x: ir.Value,
                  y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """numpy's ``npy_divmod``: floor quotient snapped to an integer, remainder with the
    divisor's sign (fmod adjusted); a zero divisor gives ``x / y`` and ``fmod(x, y)``."""
    zero, one = _fconst(c, 0.0), _fconst(c, 1.0)
    mod = math.call(b, "fmod", c, x, y)
    div = b.fdiv(b.fsub(x, mod), y)
    mod_nz = b.fcmp_unordered("!=", mod, zero)  # C truthiness: NaN is true
    flip = b.icmp_unsigned("!=", b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero))
    adjust = b.and_(mod_nz, flip)
    mod2 = b.select(adjust, b.fadd(mod, y), mod)
    mod2 = b.select(mod_nz, mod2, _copysign(b, c, zero, y))
    div = b.select(adjust, b.fsub(div, one), div)
    fl = math.call(b, "floor", c, div)
    fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), _fconst(c, 0.5)), b.fadd(fl, one), fl)
    quot = b.fdiv(x, y)
    fl = b.select(b.fcmp_unordered("!=", div, zero), fl, _copysign(b, c, zero, quot))
    y_zero = b.fcmp_ordered("==", y, zero)
    return b.select(y_zero, quot, fl), b.select(y_zero, mod, mod2)


def _copysign(b: ir.IRBuilder, c: DType, mag: ir.Value, sign: ir.Value) -> ir.Value:
    return intrinsic(b, "copysign", mag, sign)


def _int_divmod(b: ir.IRBuilder, dtype: DType, x: ir.Value,
                y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Python's floor ``//`` and ``%``. A zero divisor gives 0 and 0 (numpy's values; the
    interpreter raises); ``MIN // -1`` wraps to ``MIN`` (numpy) and never reaches ``sdiv``."""
    bits = dtype.bits
    zero, one = _int(bits, 0), _int(bits, 1)
    y_zero = b.icmp_unsigned("==", y, zero)
    if not dtype.is_signed:
        d = b.select(y_zero, one, y)
        return (b.select(y_zero, zero, b.udiv(x, d)), b.select(y_zero, zero, b.urem(x, d)))
    y_m1 = b.icmp_signed("==", y, _int(bits, -1))
    trivial = b.or_(y_zero, y_m1)
    d = b.select(trivial, one, y)
    q, r = b.sdiv(x, d), b.srem(x, d)
    # trunc -> floor: when the remainder is nonzero and its sign differs from the divisor's
    fix = b.and_(b.icmp_unsigned("!=", r, zero), b.icmp_signed("<", b.xor(r, y), zero))
    q = b.select(fix, b.sub(q, one), q)
    r = b.select(fix, b.add(r, y), r)
    q = b.select(y_zero, zero, b.select(y_m1, b.sub(zero, x), q))
    return q, b.select(trivial, zero, r)


def _shift(b: ir.IRBuilder, name: str, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
    """Shifts by the width or more (or by a negative amount) give 0, or the sign fill."""
    bits = dtype.bits
    big = b.icmp_unsigned(">=", y, _int(bits, bits))  # negative amounts are huge unsigned
    if name == "shr" and dtype.is_signed:
        return b.ashr(x, b.select(big, _int(bits, bits - 1), y))
    safe = b.select(big, _int(bits, 0), y)
    shifted = b.shl(x, safe) if name == "shl" else b.lshr(x, safe)
    return b.select(big, _int(bits, 0), shifted)


# --- comparisons, unary, select ---------------------------------------------------------------

_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def compare(b: ir.IRBuilder, name: str, dtype: DType, x: ir.Value, y: ir.Value) -> ir.Value:
    """An ``i1``; with a NaN operand only ``ne`` is true (numpy)."""
    op = _CMP[name]
    if dtype.is_float:
        x, y = _up(b, dtype, x), _up(b, dtype, y)
        return b.fcmp_unordered(op, x, y) if name == "ne" else b.fcmp_ordered(op, x, y)
    if dtype.is_signed:
        return b.icmp_signed(op, x, y)
    return b.icmp_unsigned(op, x, y)  # unsigned ints and bool (False < True)


def unary(b: ir.IRBuilder, math: MathLib, name: str, dtype: DType, x: ir.Value) -> ir.Value:
    """``name(x)`` in ``dtype``; ``isnan`` gives an ``i1``."""
    if name == "not":
        return b.not_(x)  # logical on i1, bitwise on integers
    if not dtype.is_float:
        bits = dtype.bits
        if name == "neg":
            return b.sub(_int(bits, 0), x)  # wraps
        if name == "abs":
            if not dtype.is_signed:
                return x
            return b.select(b.icmp_signed("<", x, _int(bits, 0)), b.sub(_int(bits, 0), x), x)
        raise NotImplementedError(f"unary {name} on {dtype}")
    c = _compute(dtype)
    v = _up(b, dtype, x)
    if name == "isnan":
        return b.fcmp_unordered("uno", v, v)
    if name == "neg":
        out = b.fneg(v)
    elif name == "abs":
        out = intrinsic(b, "fabs", v)
    else:
        out = math.call(b, name, c, v)
    return _down(b, dtype, out)


def select(b: ir.IRBuilder, cond: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(cond, x, y)


def fma(b: ir.IRBuilder, dtype: DType, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """``x * y + z`` rounded once (``llvm.fma``: PTX ``fma.rn``, AMDGPU ``v_fma``); 16-bit
    floats fused in float32, then rounded to their type, as the reference does."""
    return _down(b, dtype, intrinsic(b, "fma", *(_up(b, dtype, v) for v in (x, y, z))))


# --- casts ------------------------------------------------------------------------------------

def cast(b: ir.IRBuilder, src: DType, dst: DType, x: ir.Value) -> ir.Value:
    """``numerics.cast``: float->int truncates and saturates (NaN -> 0), int->int wraps,
    to bool is ``!= 0`` (NaN is true), float64/int -> bfloat16 rounds once."""
    if src is dst:
        return x
    if dst.is_bool:
        if src.is_float:
            v = _up(b, src, x)
            return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
        return b.icmp_unsigned("!=", x, _int(src.bits, 0))
    if src.is_bool:
        return b.uitofp(x, llvm_type(dst)) if dst.is_float else b.zext(x, llvm_type(dst))
    if src.is_float and dst.is_int:
        v = _up(b, src, x)
        kind = "fptosi" if dst.is_signed else "fptoui"
        rt = ir.IntType(dst.bits)
        fn = _declare(b.module, f"llvm.{kind}.sat.i{dst.bits}.{v.type.intrinsic_name}",
                      ir.FunctionType(rt, [v.type]))
        return b.call(fn, [v])
    if src.is_int and dst.is_int:
        if dst.bits < src.bits:
            return b.trunc(x, llvm_type(dst))
        if dst.bits == src.bits:
            return x
        return b.sext(x, llvm_type(dst)) if src.is_signed else b.zext(x, llvm_type(dst))
    if src.is_int:  # -> float
        to_fp = b.sitofp if src.is_signed else b.uitofp
        if dst is DType.BFLOAT16:  # numerics: int -> float64 -> bfloat16 rounded once
            return _f64_to_bf16(b, to_fp(x, _F64))
        return to_fp(x, llvm_type(dst))
    # float -> float
    if dst is DType.BFLOAT16:
        if src is DType.FLOAT64:
            return _f64_to_bf16(b, x)
        return b.fptrunc(_up(b, src, x), llvm_type(dst))
    if src is DType.BFLOAT16:
        v = b.fpext(x, _F32)
        return v if dst is DType.FLOAT32 else (
            b.fpext(v, _F64) if dst is DType.FLOAT64 else b.fptrunc(v, llvm_type(dst)))
    if dst.bits > src.bits:
        return b.fpext(x, llvm_type(dst))
    return b.fptrunc(x, llvm_type(dst))


def _f64_to_bf16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Round a double to bfloat16 once: round to float32 *to odd* (a sticky last bit),
    then to nearest-even bfloat16 (``numerics._float64_to_bfloat16``)."""
    i32 = ir.IntType(32)
    f = b.fptrunc(x, _F32)
    back = b.fpext(f, _F64)
    finite = b.fcmp_ordered("!=", intrinsic(b, "fabs", f), ir.Constant(_F32, float("inf")))
    inexact = b.and_(finite, b.fcmp_unordered("!=", back, x))
    too_big = b.and_(inexact, b.fcmp_ordered(">", intrinsic(b, "fabs", back),
                                              intrinsic(b, "fabs", x)))
    bits = b.bitcast(f, i32)
    bits = b.select(too_big, b.sub(bits, ir.Constant(i32, 1)), bits)  # toward zero
    bits = b.or_(bits, b.zext(inexact, i32))
    return b.fptrunc(b.bitcast(bits, _F32), _TYPES[DType.BFLOAT16])


def bitcast(b: ir.IRBuilder, src: DType, dst: DType, x: ir.Value) -> ir.Value:
    if src.bits != dst.bits or src.is_bool or dst.is_bool:
        raise ValueError(f"bitcast {src} -> {dst}: needs non-bool types of one width")
    return x if src is dst else b.bitcast(x, llvm_type(dst))


def _declare(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, fnty, name)


# --- reductions -------------------------------------------------------------------------------

def accumulation_dtype(dtype: DType) -> DType:
    """Reductions (and scans) of 16-bit floats accumulate in float32 and round once."""
    return _compute(dtype)


def combine(b: ir.IRBuilder, math: MathLib, kind: ReduceKind, dtype: DType, x: ir.Value,
            y: ir.Value) -> ir.Value:
    """One step of a reduction of ``dtype`` elements; ``x`` and ``y`` are (and the result
    is) in ``accumulation_dtype(dtype)``: the caller casts the inputs up and the final
    result down once."""
    from tilekit.ir.ops.structure import ReduceKind

    names = {ReduceKind.SUM: "add", ReduceKind.PROD: "mul", ReduceKind.MAX: "maximum",
             ReduceKind.MIN: "minimum", ReduceKind.AND: "and", ReduceKind.OR: "or",
             ReduceKind.XOR: "xor"}
    acc = accumulation_dtype(dtype)
    if kind in (ReduceKind.MAX, ReduceKind.MIN) and acc is DType.FLOAT32 \
            and "nvptx" in b.module.triple:
        # One ``max.NaN.f32`` (sm_80+) instead of compare, NaN test and select. It differs
        # from the elementwise rule only on ties of -0.0 and +0.0 (+0.0 is the larger),
        # where a reduction's order already decides which zero comes out.
        return intrinsic(b, "maximum" if kind is ReduceKind.MAX else "minimum", x, y)
    return binary(b, math, names[kind], acc, x, y)


__all__ = [
    "BFloatType", "accumulation_dtype", "binary", "bitcast", "cast", "combine", "compare",
    "constant", "fma", "from_memory", "llvm_type", "memory_type", "select", "to_memory",
    "unary",
]
