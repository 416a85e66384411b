"""Float transcendentals per target, for float32 and float64 (16-bit floats come here
widened to float32 by ``scalar_ops``).

* NVPTX: libdevice (``__nv_expf``, ``__nv_erf``...). Each function used is declared in
  the module and recorded in ``MathLib.used``; the driver then links libdevice
  (``tilekit.codegen.libdevice.link_libdevice``) and internalizes.
* Host (x86, what the tests run) and AMDGPU: LLVM intrinsics where LLVM expands them
  (exp, exp2, log, log2, sqrt, sin, cos, floor, ceil, pow, frem), and our own formulas
  for erf, tanh, atan2 (Chebyshev fits evaluated with Clenshaw's recurrence, coefficients
  computed once from Python's ``math`` functions), sigmoid and rsqrt (the reference's
  own formulas). The host runs exactly the AMDGPU code, so the tests measure it.

Accuracy per function and target is in ``docs/numerics.md``.
"""

from __future__ import annotations

import decimal
import enum
import math
from decimal import Decimal
from functools import cache

from llvmlite import ir

from tilekit.codegen.intrinsics import call
from tilekit.ir.dtypes import DType

NAMES = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "tanh", "sigmoid", "sin",
         "cos", "floor", "ceil", "pow", "atan2", "fmod")
_BINARY = {"pow", "atan2", "fmod"}
_INTRINSICS = {"exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "floor", "ceil", "pow"}
# AMDGPU selects these for float64; the others have no expansion there yet
_AMD_F64 = {"sqrt", "floor", "ceil"}


class MathTarget(enum.Enum):
    NVPTX = "nvptx"
    AMDGPU = "amdgpu"
    HOST = "host"

    @staticmethod
    def from_triple(triple: str) -> MathTarget:
        if triple.startswith("nvptx"):
            return MathTarget.NVPTX
        if triple.startswith("amdgcn"):
            return MathTarget.AMDGPU
        return MathTarget.HOST


class MathLib:
    """The transcendentals of one target. ``used`` names the libdevice functions
    declared so far (NVPTX), so the driver links libdevice only when needed."""

    def __init__(self, target: MathTarget) -> None:
        self.target = target
        self.used: set[str] = set()

    @classmethod
    def for_target(cls, triple: str) -> MathLib:
        return cls(MathTarget.from_triple(triple))

    def call(self, b: ir.IRBuilder, name: str, dtype: DType, *args: ir.Value) -> ir.Value:
        """``name(*args)`` in ``dtype`` (float32 or float64), rounded once where the
        target's function is correctly rounded, else within the documented ulps."""
        if dtype not in (DType.FLOAT32, DType.FLOAT64):
            raise TypeError(f"MathLib.{name} computes in float32 or float64, not {dtype}")
        if name not in NAMES or len(args) != (2 if name in _BINARY else 1):
            raise ValueError(f"no math function {name} with {len(args)} operands")
        ty = _ty(dtype)
        if name == "sigmoid":  # the reference's formula: 1 / (1 + exp(-x))
            one = ir.Constant(ty, 1.0)
            return b.fdiv(one, b.fadd(one, self.call(b, "exp", dtype, b.fneg(args[0]))))
        if self.target is MathTarget.NVPTX and name == "sqrt":
            # llvm.sqrt is sqrt.rn (IEEE, correctly rounded); libdevice's __nv_sqrtf is the
            # approximate one unless __CUDA_PREC_SQRT is reflected.
            return intrinsic(b, "sqrt", *args)
        if self.target is MathTarget.NVPTX and name == "rsqrt":
            return b.fdiv(ir.Constant(ty, 1.0), intrinsic(b, "sqrt", *args))
        if self.target is MathTarget.NVPTX:
            return self._libdevice(b, name, dtype, args)
        if (self.target is MathTarget.AMDGPU and dtype is DType.FLOAT64
                and name in (_INTRINSICS - _AMD_F64) | {"tanh"}):
            raise NotImplementedError(f"{name} on float64 is not implemented for AMDGPU yet "
                                      "(LLVM has no expansion; needs ocml)")
        if name == "fmod":
            return b.frem(args[0], args[1])
        if name == "rsqrt":
            return b.fdiv(ir.Constant(ty, 1.0), self.call(b, "sqrt", dtype, args[0]))
        if name in _INTRINSICS:
            return intrinsic(b, name, *args)
        if name == "erf":
            return _erf(b, dtype, args[0])
        if name == "tanh":
            return _tanh(self, b, dtype, args[0])
        return _atan2(b, dtype, args[0], args[1])

    def reciprocal_estimate(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """An approximation of ``1 / x`` (float64) with IEEE's special values (+-0 -> +-inf,
        +-inf -> +-0, NaN -> NaN), for ``scalar_ops.SharedDivisor`` to refine: the hardware's
        estimate on GPUs; on the host (the tests) the quotient with its last 28 bits
        cleared, no better than a hardware estimate, so that the tests measure the
        refinement."""
        if self.target is MathTarget.NVPTX:
            return call(b, "llvm.nvvm.rcp.approx.ftz.d", x.type, [x])
        if self.target is MathTarget.AMDGPU:
            return call(b, "llvm.amdgcn.rcp.f64", x.type, [x])
        i64 = ir.IntType(64)
        bits = b.bitcast(b.fdiv(ir.Constant(x.type, 1.0), x), i64)
        return b.bitcast(b.and_(bits, ir.Constant(i64, ~((1 << 28) - 1))), x.type)

    def _libdevice(self, b: ir.IRBuilder, name: str, dtype: DType,
                   args: tuple[ir.Value, ...]) -> ir.Value:
        ty = _ty(dtype)
        fname = f"__nv_{name}f" if dtype is DType.FLOAT32 else f"__nv_{name}"
        fn = b.module.globals.get(fname)
        if fn is None:
            fn = ir.Function(b.module, ir.FunctionType(ty, [ty] * len(args)), fname)
        self.used.add(fname)
        return b.call(fn, list(args))


def _ty(dtype: DType) -> ir.Type:
    return ir.FloatType() if dtype is DType.FLOAT32 else ir.DoubleType()


def intrinsic(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    """Call the overloaded float intrinsic ``llvm.<name>.<type>`` (all operands and the
    result of one type: fabs, copysign, floor, exp, pow...)."""
    ty = args[0].type
    full = f"llvm.{name}.{ty.intrinsic_name}"
    fn = b.module.globals.get(full)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ty, [ty] * len(args)), full)
    return b.call(fn, list(args))


# --- Chebyshev fits ---------------------------------------------------------------------------

def _eps(dtype: DType) -> float:
    return 2.0**-24 if dtype is DType.FLOAT32 else 2.0**-53


@cache
def _fit(fn_name: str, lo: float, hi: float, tol: float) -> tuple[float, ...]:
    """Chebyshev coefficients of ``_TARGETS[fn_name]`` on [lo, hi], truncated where they
    fall below ``tol``: interpolation at 72 Chebyshev points of the first kind, all in
    50-digit decimal arithmetic (numpy's float64 interpolation leaves ~1e-15 of noise),
    rounded once to float64 at the end."""
    fn, n = _TARGETS[fn_name], 72
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        pts = [_cos_dec(_PI * (2 * j + 1) / (2 * n)) for j in range(n)]
        a, w = Decimal(lo), Decimal(hi) - Decimal(lo)
        vals = [fn(a + w * (p + 1) / 2) for p in pts]
        coeffs, t_prev, t_cur = [], [Decimal(1)] * n, pts
        coeffs.append(sum(vals) / n)
        for _ in range(1, n):
            coeffs.append(2 * sum(v * t for v, t in zip(vals, t_cur)) / n)
            t_prev, t_cur = t_cur, [2 * p * t - q for p, t, q in zip(pts, t_cur, t_prev)]
    floats = [float(c) for c in coeffs]
    keep = max(k for k, c in enumerate(floats) if abs(c) > tol) + 1
    if keep > n - 8:
        raise AssertionError(f"{fn_name} on [{lo}, {hi}] does not converge")
    return tuple(floats[:keep])


def _cos_dec(x: Decimal) -> Decimal:
    return _series(x, lambda k, v: (-1) ** k * v ** (2 * k) / math.factorial(2 * k))


_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")


def _series(x: Decimal, term) -> Decimal:  # sum of term(n, x) until it stops mattering
    total, n = Decimal(0), 0
    while True:
        t = term(n, x)
        total += t
        if abs(t) < Decimal(10) ** -60 * max(abs(total), Decimal(1)) and n > 2:
            return total
        n += 1


def _erf_dec(x: Decimal) -> Decimal:
    """erf by its Taylor series (alternating; 50 digits cover the cancellation up to 6)."""
    x2 = x * x
    terms = [x]
    for n in range(1, 400):
        terms.append(-terms[-1] * x2 / n)
        if abs(terms[-1]) < Decimal(10) ** -70:
            break
    total = sum(t / (2 * n + 1) for n, t in enumerate(terms))
    return 2 * total / _PI.sqrt()


def _tanh_dec(x: Decimal) -> Decimal:
    e = (2 * x).exp()
    return (e - 1) / (e + 1)


def _atan_dec(x: Decimal) -> Decimal:  # |x| < 0.5
    return _series(x, lambda n, v: (-1) ** n * v ** (2 * n + 1) / (2 * n + 1))


def _odd_over_x(f):  # g(s) = f(sqrt(s)) / sqrt(s): f(x) = x * g(x*x) for odd f
    return lambda s: f(s.sqrt()) / s.sqrt()


_TARGETS = {
    "erf_small": _odd_over_x(_erf_dec),
    "erf_mid": _erf_dec,
    "tanh_small": _odd_over_x(_tanh_dec),
    "atan_small": _odd_over_x(_atan_dec),
}


def _clenshaw(b: ir.IRBuilder, coeffs: tuple[float, ...], lo: float, hi: float,
              x: ir.Value) -> ir.Value:
    """sum c_k T_k(t), t = x mapped from [lo, hi] to [-1, 1] (stable for any degree)."""
    ty = x.type
    t = b.fsub(b.fmul(x, ir.Constant(ty, 2.0 / (hi - lo))), ir.Constant(ty, (hi + lo) / (hi - lo)))
    t2 = b.fadd(t, t)
    b1 = b2 = ir.Constant(ty, 0.0)
    for c in reversed(coeffs[1:]):
        b1, b2 = b.fadd(b.fsub(b.fmul(t2, b1), b2), ir.Constant(ty, c)), b1
    return b.fadd(b.fsub(b.fmul(t, b1), b2), ir.Constant(ty, coeffs[0]))


def _odd(b: ir.IRBuilder, name: str, radius: float, tol: float, x: ir.Value) -> ir.Value:
    """An odd function as x * g(x^2), g fitted on [0, radius^2]."""
    hi = radius * radius
    return b.fmul(x, _clenshaw(b, _fit(name, 0.0, hi, tol), 0.0, hi, b.fmul(x, x)))


# --- formulas ---------------------------------------------------------------------------------

def _erf(b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    """erf: x * g(x^2) for |x| < 1; a fit of erf on [1, c) (c: where erf rounds to 1);
    1 beyond. float32 evaluates in float64 (no transcendental needed) and rounds once."""
    v = b.fpext(x, ir.DoubleType()) if dtype is DType.FLOAT32 else x
    ty = v.type
    tol = _eps(dtype) / 16
    cut = 4.0 if dtype is DType.FLOAT32 else 6.0
    ax = intrinsic(b, "fabs", v)
    small = _odd(b, "erf_small", 1.0, tol, v)
    mid = _clenshaw(b, _fit("erf_mid", 1.0, cut, tol), 1.0, cut, ax)
    big = b.select(b.fcmp_ordered("<", ax, ir.Constant(ty, cut)), mid, ir.Constant(ty, 1.0))
    big = intrinsic(b, "copysign", big, v)
    out = b.select(b.fcmp_ordered("<", ax, ir.Constant(ty, 1.0)), small, big)
    out = b.select(b.fcmp_unordered("uno", v, v), v, out)
    return b.fptrunc(out, x.type) if dtype is DType.FLOAT32 else out


def _tanh(math_: MathLib, b: ir.IRBuilder, dtype: DType, x: ir.Value) -> ir.Value:
    """tanh: x * g(x^2) for |x| < 0.55; else sign(x) * (1 - 2 / (exp(2|x|) + 1)), which
    loses no bits there (the result is above 1/2) and gives 1 once exp overflows."""
    ty = x.type
    one = ir.Constant(ty, 1.0)
    ax = intrinsic(b, "fabs", x)
    small = _odd(b, "tanh_small", 0.55, _eps(dtype) / 16, x)
    e = math_.call(b, "exp", dtype, b.fadd(ax, ax))
    big = b.fsub(one, b.fdiv(ir.Constant(ty, 2.0), b.fadd(e, one)))
    big = intrinsic(b, "copysign", big, x)
    return b.select(b.fcmp_ordered("<", ax, ir.Constant(ty, 0.55)), small, big)


_TAN_PI_8 = math.tan(math.pi / 8)


def _atan2(b: ir.IRBuilder, dtype: DType, y: ir.Value, x: ir.Value) -> ir.Value:
    """atan2 by octant: a = min(|x|,|y|) / max(|x|,|y|) in [0, 1], atan(a) from a fit on
    [0, tan(pi/8)] (with atan(a) = pi/4 + atan((a-1)/(a+1)) above it), then reflected:
    pi/2 - r when |y| > |x|, pi - r when x is negative (-0.0 included), sign of y.
    Both zero gives +-0 or +-pi, both infinite +-pi/4 or +-3pi/4, as C's atan2.
    float32 evaluates in float64 and rounds once."""
    f32 = dtype is DType.FLOAT32
    if f32:
        y, x = b.fpext(y, ir.DoubleType()), b.fpext(x, ir.DoubleType())
    ty = x.type
    c = lambda v: ir.Constant(ty, v)  # noqa: E731
    ax, ay = intrinsic(b, "fabs", x), intrinsic(b, "fabs", y)
    swap = b.fcmp_ordered(">", ay, ax)
    num, den = b.select(swap, ax, ay), b.select(swap, ay, ax)
    a = b.fdiv(num, den)
    inf = c(float("inf"))
    both_inf = b.and_(b.fcmp_ordered("==", ax, inf), b.fcmp_ordered("==", ay, inf))
    a = b.select(both_inf, c(1.0), a)
    a = b.select(b.fcmp_ordered("==", num, c(0.0)), c(0.0), a)  # 0/0 and 0/finite
    tol = _eps(dtype) / 16
    radius = _TAN_PI_8 * (1 + 1e-12)
    reduced = b.fcmp_ordered(">", a, c(_TAN_PI_8))
    t = b.select(reduced, b.fdiv(b.fsub(a, c(1.0)), b.fadd(a, c(1.0))), a)
    r = _odd(b, "atan_small", radius, tol, t)
    r = b.select(reduced, b.fadd(c(math.pi / 4), r), r)
    r = b.select(swap, b.fsub(c(math.pi / 2), r), r)
    neg_x = b.icmp_signed("<", b.bitcast(x, ir.IntType(64)), ir.Constant(ir.IntType(64), 0))
    r = b.select(neg_x, b.fsub(c(math.pi), r), r)
    r = intrinsic(b, "copysign", r, y)
    r = b.select(b.fcmp_unordered("uno", x, y), b.fadd(x, y), r)
    return b.fptrunc(r, ir.FloatType()) if f32 else r
