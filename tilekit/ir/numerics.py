"""Numeric semantics shared by the op references, pinned down once.

The interpreter is the definition of what a kernel computes, so the corner
cases GPUs leave to instruction choice are fixed here and the code generators
must match them:

- 16-bit floats compute in float32 and round to nearest-even once per op.
- float -> integer casts truncate toward zero and saturate; NaN becomes 0
  (PTX ``cvt.rzi.sat``).
- integer -> narrower integer casts wrap (two's complement).
- integer ``//`` and ``%`` follow Python (floor) semantics.
- shifts by the bit width or more give 0 (or the sign for arithmetic right
  shifts of signed values), as PTX's clamped shifts do.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilekit.ir.dtypes import DType


def cast(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert ``values`` to ``dtype`` with the semantics above."""
    src = np.asarray(values)
    target = dtype.np
    if src.dtype == target:
        return src
    if dtype.is_bool:
        return src != 0
    # bfloat16 (ml_dtypes) has numpy kind "V", not "f": test for it by name (comparing
    # with DType.BFLOAT16.np would import ml_dtypes for every int cast)
    if dtype.is_int and (src.dtype.kind == "f" or src.dtype.name == "bfloat16"):
        info = np.iinfo(target)
        with np.errstate(invalid="ignore"):
            wide = np.trunc(src.astype(np.float64))
            wide = np.where(np.isnan(wide), 0.0, wide)
        # Compare in float64 (float(info.max) rounds up for 64-bit types, which
        # is exactly the first value that must saturate).
        high = wide >= float(info.max)
        low = wide <= float(info.min)
        out = np.where(high | low, 0.0, wide).astype(target)
        out[high] = info.max
        out[low] = info.min
        return out
    if dtype.is_int and src.dtype.kind in "iub":
        return src.astype(target)  # wraps
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype is DType.BFLOAT16 and (src.dtype.kind in "iub" or src.dtype == np.float64):
            return _float64_to_bfloat16(src.astype(np.float64))
        return src.astype(target)


def _float64_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float64 once to bfloat16 (ml_dtypes goes through float32 rounding to nearest,
    which rounds twice: 1 + 2**-8 + 2**-40 gave 1.0). Rounding to float32 *to odd* keeps
    a sticky bit, after which rounding to nearest-even bfloat16 is exact."""
    f = x.astype(np.float32)
    back = f.astype(np.float64)
    inexact = np.isfinite(f) & (back != x)
    f = np.where(inexact & (np.abs(back) > np.abs(x)), np.nextafter(f, np.float32(0)), f)
    odd = np.asarray(f, dtype=np.float32).view(np.uint32) | inexact.astype(np.uint32)
    return odd.view(np.float32).astype(DType.BFLOAT16.np)


def in_compute(dtype: DType, fn: Callable[..., np.ndarray], *args: np.ndarray) -> np.ndarray:
    """Apply ``fn`` to ``args`` in ``dtype``'s compute type, rounding the result to ``dtype``."""
    compute = dtype.compute_np
    with np.errstate(all="ignore"):
        ups = [np.asarray(a).astype(compute) if np.asarray(a).dtype != compute else np.asarray(a)
               for a in args]
        out = fn(*ups)
    return cast(np.asarray(out), dtype)


def shift_left(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    bits = dtype.bits
    big = (b < 0) | (b >= bits)
    safe = np.where(big, 0, b).astype(a.dtype)
    return np.where(big, np.zeros_like(a), np.left_shift(a, safe))


def shift_right(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    bits = dtype.bits
    big = (b < 0) | (b >= bits)
    safe = np.where(big, 0, b).astype(a.dtype)
    fill = np.where(a < 0, -1, 0).astype(a.dtype) if dtype.is_signed else np.zeros_like(a)
    return np.where(big, fill, np.right_shift(a, safe))


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, vectorized, accurate to float64 rounding (no scipy needed)."""
    import math

    flat = np.asarray(x, dtype=np.float64)
    return np.vectorize(math.erf, otypes=[np.float64])(flat) if flat.size else flat.copy()


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once to nearest-even, for float32 or float64 arrays of one type.

    float32 goes through float64: the product is exact there (48 bits), the sum is rounded
    *to odd* (a sticky last bit from its exact error, ``two_sum``), and 53 >= 24 + 2 bits
    make the final rounding to float32 exact. float64 has no wider type in numpy: each
    element goes through ``math.fma`` (Python 3.13+) or exact rationals."""
    a, b, c = (np.asarray(v) for v in (a, b, c))
    if a.dtype == np.float64:
        return _fma64(a, b, c)
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        virtual = s - p
        err = (p - (s - virtual)) + (c64 - virtual)  # two_sum: p + c == s + err exactly
        even = (s.view(np.int64) & 1) == 0
        sticky = np.isfinite(s) & (err != 0) & even
        s = np.where(sticky, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(a.dtype)


def _fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    import math

    exact = getattr(math, "fma", None) or _fma64_scalar
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    flat = [np.broadcast_to(v, shape).ravel().tolist() for v in (a, b, c)]
    return np.array([exact(x, y, z) for x, y, z in zip(*flat)],
                    dtype=np.float64).reshape(shape)


def _fma64_scalar(x: float, y: float, z: float) -> float:
    """One float64 ``x * y + z`` rounded once, through exact rationals (no math.fma)."""
    import math
    from fractions import Fraction

    if not (math.isfinite(x) and math.isfinite(y)):
        return x * y + z  # inf * 0 is NaN; inf + -inf is NaN; as IEEE fma
    if not math.isfinite(z):
        return z  # a finite product cannot cancel an infinity (nor overflow into one)
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        return x * y + z  # the sign of an exact zero: -0 only for (-0) + (-0)
    try:
        return float(exact)  # correctly rounded
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
