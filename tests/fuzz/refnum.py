"""Reference numerics for the fuzzer, written from the README's "Numerics" and
docs/numerics.md, without calling tilekit's interpreter or ``tilekit.ir.numerics``.

A value is ``V(dtype, v, e)``: the elements ``v`` (stored in ``dtype``'s numpy type) and, per
element, a bound ``e`` on how far a correct implementation may be from ``v``:

- ``e == 0``: the language promises these bits (integer ops, correctly rounded float
  ``+ - * /``, ``sqrt``, ``fma``, casts, selects, max/min); NaNs compare equal to any NaN;
- ``0 < e < inf``: a value within ``e`` (transcendentals, reductions and dots, whose order
  or accuracy is not fixed; and anything computed from such a value);
- ``e == inf``: unknown (a comparison or a cast too close to call, an overflow that depends
  on the order of a sum): the element is not compared.

Floats are computed in float64 and rounded once to their type (``round_to``), which for
``+ - * /`` and ``sqrt`` equals the correctly rounded result of every narrower type (float64
has more than twice their precision plus two bits). Integers are computed exactly (Python
integers or numpy with wrapping) and wrapped to their width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

from tests.fuzz.program import FLOATS, INTS, SIGNED, UNSIGNED, int_range
from tilekit.ir.dtypes import DType

F16, BF16, F32, F64 = DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64
BF16_NP = np.dtype(ml_dtypes.bfloat16)

# precision (significand bits), smallest normal exponent, largest finite value
FORMAT = {
    F16: (11, -14, 65504.0),
    BF16: (8, -126, float.fromhex("0x1.fep127")),
    F32: (24, -126, float.fromhex("0x1.fffffep127")),
    F64: (53, -1022, float.fromhex("0x1.fffffffffffffp1023")),
}
TINY = 5e-324  # an error bound that only forgives the sign of a zero
# How far an implementation's transcendental may be, in ulps of the result (docs/numerics.md:
# libdevice's bounds are 1-4 ulps; 16-bit types evaluate the float32 function and round once).
TRANSCENDENTAL_ULPS = {F16: 1.0, BF16: 1.0, F32: 6.0, F64: 6.0}


def np_type(d: DType) -> np.dtype:
    return BF16_NP if d is BF16 else np.dtype(d.long)


@dataclass
class V:
    """A runtime value of the reference: elements and their error bounds."""

    dtype: DType
    v: np.ndarray
    e: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.v.shape

    @staticmethod
    def exact(dtype: DType, v: np.ndarray) -> V:
        v = np.asarray(v, dtype=np_type(dtype))
        return V(dtype, v, np.zeros(v.shape))

    def broadcast(self, shape: tuple[int, ...]) -> V:
        return V(self.dtype, np.broadcast_to(self.v, shape), np.broadcast_to(self.e, shape))


# --- rounding and conversion ------------------------------------------------------------------

def to_f64(x: V | np.ndarray) -> np.ndarray:
    arr = x.v if isinstance(x, V) else x
    return np.asarray(arr).astype(np.float64)


def ulp(x: np.ndarray, d: DType) -> np.ndarray:
    """The spacing of ``d``'s values at ``x`` (float64 in, float64 out)."""
    p, emin, _ = FORMAT[d]
    ax = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(all="ignore"):
        _, ex = np.frexp(np.where(np.isfinite(ax), ax, 1.0))
    e = np.maximum(ex - 1, emin)
    out = np.ldexp(1.0, e - (p - 1))
    return np.where(np.isfinite(ax), out, np.inf)


def round_to(x: np.ndarray, d: DType) -> np.ndarray:
    """float64 values rounded once, to nearest even, to ``d`` (returned as float64)."""
    x = np.asarray(x, dtype=np.float64)
    if d is F64:
        return x.copy()
    p, emin, fmax = FORMAT[d]
    out = x.copy()
    fin = np.isfinite(x) & (x != 0)
    if fin.any():
        xs = x[fin]
        _, ex = np.frexp(xs)
        quantum = np.ldexp(1.0, np.maximum(ex - 1, emin) - (p - 1))
        with np.errstate(over="ignore"):  # past float64's range: inf, as it should be
            r = np.rint(xs / quantum) * quantum  # scaling by a power of two is exact
        r = np.where(np.abs(r) > fmax, np.copysign(np.inf, xs), r)
        out[fin] = r
    return out


def store(x: np.ndarray, d: DType) -> np.ndarray:
    """float64 values already representable in float type ``d``, in ``d``'s storage."""
    if d is BF16:
        return np.asarray(x, dtype=np.float64).astype(np.float32).astype(BF16_NP)
    return np.asarray(x, dtype=np.float64).astype(np_type(d))


def _round_int(n: int, p: int) -> float:
    """A Python int rounded to ``p`` significant bits, to nearest even."""
    a = abs(n)
    length = a.bit_length()
    if length <= p:
        return float(n)
    shift = length - p
    q, r = divmod(a, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return math.copysign(float(q << shift), n)


def _ints(x: np.ndarray) -> np.ndarray:
    """An object array of the Python ints of an integer or bool array."""
    return np.array([int(i) for i in np.asarray(x).ravel()], dtype=object).reshape(np.shape(x))


def _wrap(x: np.ndarray, d: DType) -> np.ndarray:
    """Python ints (object array) wrapped to integer type ``d``."""
    nbits = d.bits
    lo, hi = int_range(d)
    mod = 1 << nbits

    def one(i: int) -> int:
        i = int(i) % mod
        return i - mod if d in SIGNED and i > hi else i

    flat = [one(i) for i in np.asarray(x, dtype=object).ravel()]
    return np.array(flat, dtype=np_type(d)).reshape(np.shape(x)) if flat else \
        np.zeros(np.shape(x), np_type(d))


def int_to_float(x: np.ndarray, d: DType) -> np.ndarray:
    """Integers converted to float type ``d``, as float64 values: correctly rounded to
    float16/float32/float64; to bfloat16 through float64 first (docs/numerics.md)."""
    flat = np.asarray(x).ravel()
    if d is BF16:
        wide = np.array([float(int(i)) for i in flat], dtype=np.float64)
        return round_to(wide, BF16).reshape(np.shape(x))
    p, _, fmax = FORMAT[d]
    out = np.array([_round_int(int(i), p) for i in flat], dtype=np.float64)
    out = np.where(np.abs(out) > fmax, np.copysign(np.inf, out), out)
    return out.reshape(np.shape(x))


def float_to_int(f: np.ndarray, d: DType) -> np.ndarray:
    """float64 values to integer type ``d``: truncate, saturate, NaN gives 0."""
    lo, hi = int_range(d)
    with np.errstate(invalid="ignore"):
        t = np.trunc(np.where(np.isnan(f), 0.0, f))
    out = []
    for v in t.ravel():
        if v >= hi:  # hi + 1 is a power of two: float(hi) rounds up to exactly it for 64 bits
            out.append(hi)
        elif v <= lo:
            out.append(lo)
        else:
            out.append(int(v))
    return np.array(out, dtype=object).reshape(t.shape).astype(np_type(d)) if out else \
        np.zeros(t.shape, np_type(d))


def cast_exact(v: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """Elements of type ``src`` converted to ``dst`` (the README's casts), exactly."""
    v = np.asarray(v)
    if src is dst:
        return v.copy()
    if dst is DType.BOOL:
        if src in FLOATS:
            return to_f64(v) != 0  # NaN is true
        return v != 0
    if src is DType.BOOL:
        ones = v.astype(np.int64)
        return store(ones.astype(np.float64), dst) if dst in FLOATS else ones.astype(np_type(dst))
    if dst in FLOATS:
        if src in FLOATS:
            return store(round_to(to_f64(v), dst), dst)
        return store(int_to_float(v, dst), dst)
    if src in FLOATS:
        return float_to_int(to_f64(v), dst)
    return _wrap(_ints(v), dst)  # integer to integer wraps


def py_to(value: bool | int | float, dst: DType) -> np.ndarray:
    """A Python number as a 0-d array of ``dst`` (a constant: exact for ints, floats rounded
    once from float64)."""
    if isinstance(value, bool):
        return cast_exact(np.asarray(value), DType.BOOL, dst)
    if isinstance(value, int):
        if dst in FLOATS:
            return store(int_to_float(np.asarray([value], dtype=object), dst), dst).reshape(())
        if dst is DType.BOOL:
            return np.asarray(value != 0)
        return _wrap(np.asarray([value], dtype=object), dst).reshape(())
    f = np.asarray(float(value), dtype=np.float64)
    if dst in FLOATS:
        return store(round_to(f, dst), dst)
    if dst is DType.BOOL:
        return np.asarray(f != 0)
    return float_to_int(f.reshape(1), dst).reshape(())


def fits(value: bool | int | float, dst: DType) -> bool:
    """Whether a Python literal may take type ``dst`` (the README: integers exact, floats may
    round but a finite number must stay finite; inf and nan written as floats fit)."""
    if isinstance(value, bool):
        return True
    if dst in FLOATS:
        try:
            f = float(value)
        except OverflowError:
            return False
        if not math.isfinite(f):
            return isinstance(value, float)
        return bool(np.isfinite(round_to(np.array([f]), dst)[0]))
    if dst is DType.BOOL:
        return value in (0, 1)
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    lo, hi = int_range(dst)
    return lo <= value <= hi


# --- casts with error bounds -------------------------------------------------------------------

def _unknown_where(mask: np.ndarray, e: np.ndarray) -> np.ndarray:
    return np.where(mask, np.inf, e)


def cast(x: V, dst: DType) -> V:
    src = x.dtype
    out = cast_exact(x.v, src, dst)
    approx = x.e > 0
    if not approx.any():
        return V(dst, out, np.zeros(out.shape))
    if src not in FLOATS:  # integers are exact or unknown
        return V(dst, out, np.where(approx, np.inf, 0.0))
    f = to_f64(x.v)
    with np.errstate(invalid="ignore"):
        lo, hi = f - x.e, f + x.e
    if dst in FLOATS:
        r = to_f64(out)
        e = np.where(approx, x.e + 2 * ulp(r, dst), 0.0)
        return V(dst, out, _normalize(r, e))
    if dst is DType.BOOL:
        decided = (lo > 0) | (hi < 0)
        return V(dst, out, np.where(approx & ~decided, np.inf, 0.0))
    same = float_to_int(lo, dst) == float_to_int(hi, dst)
    return V(dst, out, np.where(approx & ~(same & np.isfinite(f)), np.inf, 0.0))


def bitcast(x: V, dst: DType) -> V:
    out = np.ascontiguousarray(x.v).view(np_type(dst)).reshape(x.shape)
    e = np.where(x.e > 0, np.inf, 0.0)
    if x.dtype in FLOATS:  # a NaN's payload is the implementation's
        e = np.where(np.isnan(to_f64(x.v)), np.inf, e)
    if dst in FLOATS and x.dtype not in FLOATS:
        e = e  # the bits are exact; NaNs compare equal to any NaN
    return V(dst, out, e)


def _normalize(r: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Bounds of approximate non-finite results are unknown (an implementation within any
    finite distance of the exact value may overflow, or not)."""
    e = np.where(np.isnan(e), np.inf, e)
    return np.where((e > 0) & ~np.isfinite(r), np.inf, e)


# --- elementwise binary ops ---------------------------------------------------------------------

def _divmod_float(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy's ``npy_divmod`` (floor quotient, remainder with the divisor's sign), step by
    step in the arrays' own precision, as docs/numerics.md defines float ``//`` and ``%``."""
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(all="ignore"):
        mod = np.fmod(a, b)
        div = (a - mod) / b
        nonzero_mod = mod != 0  # NaN counts as nonzero, as in C
        adjust = nonzero_mod & ((b < 0) != (mod < 0))
        mod = np.where(adjust, mod + b, mod)
        div = np.where(adjust, div - a.dtype.type(1), div)
        mod = np.where(nonzero_mod, mod, np.copysign(a.dtype.type(0), b))
        floordiv = np.floor(div)
        floordiv = np.where(div - floordiv > a.dtype.type(0.5), floordiv + a.dtype.type(1),
                            floordiv)
        floordiv = np.where(div != 0, floordiv, np.copysign(a.dtype.type(0), a / b))
        zero_b = b == 0
        floordiv = np.where(zero_b, a / b, floordiv)
        mod = np.where(zero_b, np.fmod(a, b), mod)
    return floordiv, mod


def _compute_type(d: DType) -> type:
    return np.float64 if d is F64 else np.float32


def _int_binary(op: str, d: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[op](a, b)
    if op == "maximum":
        return np.where(a > b, a, b)
    if op == "minimum":
        return np.where(a < b, a, b)
    if op in ("and", "or", "xor"):
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
        return fn(a, b)
    ia, ib = _ints(a), _ints(b)
    if op == "add":
        r = ia + ib
    elif op == "sub":
        r = ia - ib
    elif op == "mul":
        r = ia * ib
    elif op in ("floordiv", "mod"):
        if np.any(ib == 0):
            raise ZeroDivisionError("integer division by zero")
        r = ia // ib if op == "floordiv" else ia % ib
    elif op in ("shl", "shr"):
        nbits = d.bits

        def shift(x: int, s: int) -> int:
            if s < 0 or s >= nbits:
                return -1 if (op == "shr" and x < 0) else 0
            return x << s if op == "shl" else x >> s

        r = np.frompyfunc(shift, 2, 1)(ia, ib) if ia.size else ia
    else:
        raise AssertionError(op)
    return _wrap(r, d)


def _float_binary(op: str, d: DType, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, bool]:
    """The float64 value of ``op`` rounded to ``d`` (for comparisons: the bools), and whether
    the op itself is approximate (never, today: ``pow`` is handled by ``binary``)."""
    fa, fb = to_f64(a), to_f64(b)
    with np.errstate(all="ignore"):
        if op in ("eq", "ne", "lt", "le", "gt", "ge"):
            fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                  "gt": np.greater, "ge": np.greater_equal}[op]
            return fn(fa, fb), False
        if op == "maximum":
            return np.where(np.isnan(fa) | np.isnan(fb), np.nan, np.where(fa > fb, fa, fb)), False
        if op == "minimum":
            return np.where(np.isnan(fa) | np.isnan(fb), np.nan, np.where(fa < fb, fa, fb)), False
        if op in ("floordiv", "mod"):
            ct = _compute_type(d)
            q, m = _divmod_float(fa.astype(ct), fb.astype(ct))
            return round_to((q if op == "floordiv" else m).astype(np.float64), d), False
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
             "pow": np.power}[op](fa, fb)
        return round_to(r, d), False


def binary(op: str, a: V, b: V) -> V:
    """``op`` on two values already cast to one operand type and broadcast to one shape."""
    d = a.dtype
    assert b.dtype is d and a.shape == b.shape, (op, a.dtype, b.dtype, a.shape, b.shape)
    compare = op in ("eq", "ne", "lt", "le", "gt", "ge")
    approx_in = (a.e > 0) | (b.e > 0)
    if d not in FLOATS:
        out = _int_binary(op, d, a.v, b.v)
        rd = DType.BOOL if compare else d
        e = np.where(approx_in, np.inf, 0.0)
        if d is DType.BOOL and op in ("and", "or"):  # an exact False (True) decides and (or)
            decisive = op == "or"
            e = np.where(((a.e == 0) & (a.v == decisive)) | ((b.e == 0) & (b.v == decisive)),
                         0.0, e)
        return V(rd, np.asarray(out, dtype=np_type(rd)), e)
    r, _ = _float_binary(op, d, a.v, b.v)
    if compare:
        return V(DType.BOOL, r, _compare_bound(op, a, b))
    fa, fb = to_f64(a.v), to_f64(b.v)
    slack = 2 * ulp(r, d)
    with np.errstate(all="ignore"):
        if op == "pow":
            e = np.full(r.shape, np.inf)
        elif op in ("add", "sub"):
            e = a.e + b.e + slack
        elif op == "mul":
            e = np.abs(fa) * b.e + np.abs(fb) * a.e + a.e * b.e + slack
        elif op == "div":
            room = np.abs(fb) - b.e
            e = np.where(room > 0, (a.e * np.abs(fb) + b.e * np.abs(fa)) / (np.abs(fb) * room),
                         np.inf) + slack
        elif op in ("maximum", "minimum"):
            e = np.maximum(a.e, b.e)
        else:  # floordiv, mod: discontinuous
            e = np.full(r.shape, np.inf)
    e = np.where(approx_in, e, 0.0)
    if op == "pow":
        with np.errstate(all="ignore"):
            r, e_pow = _approx_result(np.power(fa, fb), d, fa, fb)
        e = np.where(approx_in, np.inf, e_pow)
        return V(d, store(r, d), np.where(np.isnan(e), np.inf, e))
    return V(d, store(r, d), _normalize(r, e))


def _compare_bound(op: str, a: V, b: V) -> np.ndarray:
    """Comparisons of approximate values are exact when the intervals do not overlap."""
    approx = (a.e > 0) | (b.e > 0)
    if not approx.any():
        return np.zeros(a.shape)
    fa, fb = to_f64(a.v), to_f64(b.v)
    with np.errstate(invalid="ignore"):
        apart = (np.abs(fa - fb) > (a.e + b.e)) & np.isfinite(fa) & np.isfinite(fb) \
            & np.isfinite(a.e) & np.isfinite(b.e)
    return np.where(approx & ~apart, np.inf, 0.0)


# --- elementwise unary ops ----------------------------------------------------------------------

_F64_FN = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": lambda x: np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.copy(),
    "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "sin": np.sin,
    "cos": np.cos,
}
_LIPSCHITZ = {"erf": 2 / math.sqrt(math.pi), "tanh": 1.0, "sigmoid": 0.25, "sin": 1.0,
              "cos": 1.0}


def _approx_result(r64: np.ndarray, d: DType, *operands: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """A transcendental's float64 value ``r64`` rounded to ``d``, with its bound for exact
    operands: some ulps of the result; exact for NaN results and for infinite or zero
    results of special operands (``log(0)``, ``exp(-inf)``, ``tanh(-0)``, ``0 ** -1``);
    infinite past the overflow threshold by more than the ulps, unknown close to it."""
    p, _, fmax = FORMAT[d]
    k = TRANSCENDENTAL_ULPS[d] + 1
    r = round_to(r64, d)
    e = k * ulp(r, d)
    special = np.zeros(r.shape, dtype=bool)
    for x in operands:
        special |= ~np.isfinite(x) | (x == 0)
    with np.errstate(all="ignore"):
        e = np.where(np.isnan(r64) | (special & (~np.isfinite(r64) | (r64 == 0))), 0.0, e)
        threshold = fmax + ulp(np.asarray(fmax), d) / 2
        margin = k * ulp(np.asarray(fmax), d)
        mag = np.abs(r64)
        finite64 = np.isfinite(r64)
        e = np.where(finite64 & (mag > threshold + margin), 0.0, e)
        e = np.where(finite64 & (mag > threshold - margin) & (mag <= threshold + margin),
                     np.inf, e)
    return r, e


def unary(op: str, a: V) -> V:
    d = a.dtype
    approx = a.e > 0
    if op == "not":
        out = np.logical_not(a.v) if d is DType.BOOL else np.invert(a.v)
        return V(d, out, np.where(approx, np.inf, 0.0))
    if d not in FLOATS:
        if op == "neg":
            return V(d, _wrap(-_ints(a.v), d), np.where(approx, np.inf, 0.0))
        if op == "abs":
            return V(d, _wrap(np.abs(_ints(a.v)), d), np.where(approx, np.inf, 0.0))
        raise AssertionError(op)
    f = to_f64(a.v)
    with np.errstate(all="ignore"):
        if op == "isnan":
            decided = np.isfinite(a.e) | ~approx
            return V(DType.BOOL, np.isnan(f), np.where(decided, 0.0, np.inf))
        if op in ("neg", "abs"):
            r = -f if op == "neg" else np.abs(f)
            return V(d, store(r, d), a.e.copy())
        if op in ("floor", "ceil"):
            fn = np.floor if op == "floor" else np.ceil
            r = fn(f)
            stable = fn(f - a.e) == fn(f + a.e)
            return V(d, store(r, d), np.where(approx & ~stable, np.inf, 0.0))
        r64 = _F64_FN[op](f)
        r, e = _approx_result(r64, d, f)
        if op == "sqrt":  # correctly rounded on every target (sqrt.rn)
            e = np.zeros(r.shape)
        if approx.any():
            ea = a.e
            lo = f - ea
            if op == "exp":
                prop = np.abs(r64) * np.expm1(ea)
            elif op == "exp2":
                prop = np.abs(r64) * np.expm1(ea * math.log(2))
            elif op in ("log", "log2"):
                prop = np.where(lo > 0, np.log(f / lo), np.inf) / (1 if op == "log" else
                                                                    math.log(2))
            elif op == "sqrt":
                prop = np.where(lo >= 0, np.sqrt(f + ea) - np.sqrt(np.maximum(lo, 0)), np.inf)
            elif op == "rsqrt":
                prop = np.where(lo > 0, 1 / np.sqrt(lo) - 1 / np.sqrt(f + ea), np.inf)
            else:
                prop = _LIPSCHITZ[op] * ea
            e = np.where(approx, prop + (TRANSCENDENTAL_ULPS[d] + 2) * ulp(r, d), e)
    return V(d, store(r, d), _normalize(r, e))


# --- select and fma -----------------------------------------------------------------------------

def where(c: V, a: V, b: V) -> V:
    out = np.where(c.v, a.v, b.v)
    e = np.where(c.v, a.e, b.e)
    return V(a.dtype, np.asarray(out, dtype=np_type(a.dtype)), np.where(c.e > 0, np.inf, e))


def _round_fraction(q: Fraction, d: DType) -> float:
    """An exact rational rounded once to nearest even in float type ``d``."""
    p, emin, fmax = FORMAT[d]
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()  # 2^e <= q < 2^(e+2)
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    e = max(e, emin)
    scaled = q / Fraction(2) ** (e - (p - 1))
    n = scaled.numerator // scaled.denominator
    rem = scaled - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n & 1):
        n += 1
    try:
        r = math.ldexp(float(n), e - (p - 1))
    except OverflowError:
        r = math.inf
    return sign * (r if r <= fmax else math.inf)


def _fma_exact(a: float, b: float, c: float, d: DType) -> float:
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        prod_zero = -0.0 if (math.copysign(1, a) * math.copysign(1, b) < 0) else 0.0
        if a * b == 0 or Fraction(a) * Fraction(b) == 0:
            return prod_zero + c  # IEEE zero signs: -0 only for -0 + -0
        return 0.0
    return _round_fraction(exact, d)


def fma(a: V, b: V, c: V) -> V:
    """``a * b + c`` rounded once (16-bit floats: rounded to float32, then to their type)."""
    d = a.dtype
    fa, fb, fc = to_f64(a.v), to_f64(b.v), to_f64(c.v)
    inner = d if d is F64 else F32
    flat = [_fma_exact(float(x), float(y), float(z), inner)
            for x, y, z in zip(fa.ravel(), fb.ravel(), fc.ravel())]
    r = round_to(np.array(flat, dtype=np.float64).reshape(fa.shape), d)
    approx = (a.e > 0) | (b.e > 0) | (c.e > 0)
    with np.errstate(all="ignore"):
        e = np.abs(fa) * b.e + np.abs(fb) * a.e + a.e * b.e + c.e + 2 * ulp(r, d)
    return V(d, store(r, d), _normalize(r, np.where(approx, e, 0.0)))


# --- reductions, scans, dots --------------------------------------------------------------------

def _acc_unit(d: DType) -> float:
    """The relative rounding error of one accumulation step (float32 for 16-bit types; a
    little loose for tensor cores, which may truncate)."""
    return 2.0 ** -52 if d is F64 else 2.0 ** -23


def reduce(kind: str, x: V, axis: int) -> V:
    d = x.dtype
    n = x.shape[axis]
    approx_any = np.any(x.e > 0, axis=axis)
    if kind in ("argmax", "argmin"):
        return _argreduce(kind, x, axis)
    if d not in FLOATS:
        if d is DType.BOOL:
            fn = np.any if kind == "max" else np.all
            out = fn(x.v, axis=axis)
        elif kind in ("max", "min"):
            out = (np.max if kind == "max" else np.min)(x.v, axis=axis)
        else:
            ints = _ints(x.v)
            acc = np.sum(ints, axis=axis) if kind == "sum" else np.prod(ints, axis=axis)
            acc = np.asarray(acc, dtype=object) if np.ndim(acc) else np.asarray([acc],
                                                                              dtype=object)
            out = _wrap(acc, d).reshape(np.delete(np.array(x.shape), axis).tolist())
        out = np.asarray(out, dtype=np_type(d))
        return V(d, out, np.where(approx_any, np.inf, 0.0))
    f = to_f64(x.v)
    _, _, fmax_acc = FORMAT[F64 if d is F64 else F32]
    with np.errstate(all="ignore"):
        if kind in ("max", "min"):
            nan = np.any(np.isnan(f), axis=axis)
            r = np.where(nan, np.nan, (np.max if kind == "max" else np.min)(
                np.where(np.isnan(f), 0, f), axis=axis))
            e = np.max(x.e, axis=axis)
            e = np.where(r == 0, np.maximum(e, TINY), e)  # which zero wins depends on order
            r = round_to(r, d)
            return V(d, store(r, d), _normalize(r, e))
        finite = np.isfinite(f)
        mag = np.where(finite, np.abs(f), 0.0)
        if kind == "sum":
            r64 = np.sum(f, axis=axis)
            big = np.sum(mag, axis=axis)
            tiny = float(ulp(np.zeros(1), F64 if d is F64 else F32)[0])  # subnormal sums
            e = np.sum(x.e, axis=axis) + (n + 1) * (_acc_unit(d) * big + tiny)
            overflow_risk = big >= fmax_acc / 2
        else:  # prod
            r64 = np.prod(f, axis=axis)
            hi = np.prod(np.maximum(mag, 1.0), axis=axis)
            lo = np.prod(np.where(finite & (f != 0), np.minimum(mag, 1.0), 1.0), axis=axis)
            e = np.where(approx_any, np.inf, (n + 1) * _acc_unit(d) * np.abs(r64))
            tiny = FORMAT[F64 if d is F64 else F32][1]
            overflow_risk = (hi >= fmax_acc / 4) | ((lo < 2.0 ** (tiny + 30)) & (r64 != 0))
            overflow_risk |= np.any(~finite, axis=axis) & ~np.any(np.isnan(f), axis=axis)
        r = round_to(r64, d)
        e = e + 2 * ulp(r, d)
        nonfinite_in = np.any(~finite, axis=axis)
        exact_special = nonfinite_in & ~approx_any & ~overflow_risk
        e = np.where(exact_special, 0.0, e)  # NaN, or an infinity nothing finite can cancel
        e = np.where(nonfinite_in & approx_any, np.inf, e)
        e = np.where(overflow_risk & ~np.isnan(r64), np.inf, e)
        e = np.where(~nonfinite_in, np.maximum(e, TINY), e)
        return V(d, store(r, d), _normalize(r, e))


def _argreduce(kind: str, x: V, axis: int) -> V:
    f = to_f64(x.v) if x.dtype in FLOATS else _ints(x.v)
    moved = np.moveaxis(f, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    out = []
    for row in rows:
        vals = list(row)
        nans = [i for i, v in enumerate(vals) if isinstance(v, float) and math.isnan(v)]
        if nans:
            out.append(nans[0])
            continue
        best = max(vals) if kind == "argmax" else min(vals)
        out.append(next(i for i, v in enumerate(vals) if v == best))
    res = np.array(out, dtype=np.int32).reshape(moved.shape[:-1])
    return V(DType.INT32, res, np.where(np.any(x.e > 0, axis=axis), np.inf, 0.0))


def cumsum(x: V, axis: int) -> V:
    d = x.dtype
    if d not in FLOATS:
        acc = np.cumsum(_ints(x.v), axis=axis)
        out = _wrap(acc, d)
        e = np.where(np.cumsum(x.e, axis=axis) > 0, np.inf, 0.0)
        return V(d, out, e)
    f = to_f64(x.v)
    n = np.arange(1, x.shape[axis] + 1).reshape([-1 if i == axis else 1
                                                 for i in range(x.v.ndim)])
    with np.errstate(all="ignore"):
        r64 = np.cumsum(f, axis=axis)
        finite = np.isfinite(f)
        big = np.cumsum(np.where(finite, np.abs(f), 0.0), axis=axis)
        nonfinite = np.cumsum(~finite, axis=axis) > 0
        approx = np.cumsum(x.e, axis=axis)
        r = round_to(r64, d)
        tiny = float(ulp(np.zeros(1), F64 if d is F64 else F32)[0])
        e = approx + (n + 1) * (_acc_unit(d) * big + tiny) + 2 * ulp(r, d)
        _, _, fmax_acc = FORMAT[F64 if d is F64 else F32]
        e = np.where(big >= fmax_acc / 2, np.inf, e)
        e = np.where(nonfinite, np.where((approx > 0) | (big >= fmax_acc / 2), np.inf, 0.0),
                     np.maximum(e, TINY))
    return V(d, store(r, d), _normalize(r, e))


def dot(a: V, b: V, acc: V) -> V:
    """``acc + a @ b`` (operands of one type; ``acc``'s type is the result's)."""
    d = acc.dtype
    if d not in FLOATS:
        ia = a.v.astype(np.int64).view(np.uint64)
        ib = b.v.astype(np.int64).view(np.uint64)
        with np.errstate(all="ignore"):
            s = (ia @ ib) + acc.v.astype(np.int64).view(np.uint64)
        out = s.astype(np_type(d))
        approx = (np.any(a.e > 0, axis=1)[:, None] | np.any(b.e > 0, axis=0)[None, :]
                  | (acc.e > 0))
        return V(d, out, np.where(approx, np.inf, 0.0))
    wide = F64 if d is F64 else F32
    fa = round_to(to_f64(a.v), wide)  # the operands as the accumulation type sees them
    fb = round_to(to_f64(b.v), wide)
    fc = to_f64(acc.v)
    with np.errstate(all="ignore"):
        r64 = fa @ fb + fc
        fin_a, fin_b = np.where(np.isfinite(fa), np.abs(fa), 0), np.where(np.isfinite(fb),
                                                                        np.abs(fb), 0)
        big = fin_a @ fin_b + np.where(np.isfinite(fc), np.abs(fc), 0)
        k = a.shape[1]
        prop = np.abs(fa) @ b.e + a.e @ np.abs(fb) + a.e @ b.e + acc.e
        r = round_to(r64, d)
        # relative error per step, and an absolute one where products or sums are subnormal
        tiny = float(ulp(np.zeros(1), wide)[0])
        e = prop + (k + 2) * _acc_unit(d) * big + (2 * k + 2) * tiny + 2 * ulp(r, d)
        nonfinite = (np.any(~np.isfinite(fa), axis=1)[:, None]
                     | np.any(~np.isfinite(fb), axis=0)[None, :] | ~np.isfinite(fc))
        approx = (np.any(a.e > 0, axis=1)[:, None] | np.any(b.e > 0, axis=0)[None, :]
                  | (acc.e > 0))
        _, _, fmax_acc = FORMAT[wide]
        risky = big >= fmax_acc / 4
        e = np.where(nonfinite, np.where(approx | risky, np.inf, 0.0), np.maximum(e, TINY))
        e = np.where(risky & ~nonfinite, np.inf, e)
        # a NaN result of exact operands: some operand pair is NaN or inf * 0, in any order
        e = np.where(np.isnan(r64) & ~approx, 0.0, e)
    return V(d, store(r, d), _normalize(r, e))


def ints_of(x: V) -> np.ndarray:
    """The Python ints of an exact integer value (indices, bounds, offsets)."""
    if np.any(x.e > 0):
        raise Unreliable("an index or bound computed from approximate values")
    return _ints(x.v)


class Unreliable(Exception):
    """The reference cannot say what the program computes (the generator should not have
    made it): the program is skipped and counted."""


__all__ = ["V", "binary", "unary", "where", "fma", "cast", "bitcast", "reduce", "cumsum", "dot",
           "py_to", "fits", "Unreliable", "ints_of", "F16", "BF16", "F32", "F64", "INTS",
           "UNSIGNED"]
