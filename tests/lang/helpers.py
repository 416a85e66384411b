"""Shared helpers for the differential tests: launching, poisoned outputs, random
inputs (bfloat16 included) and comparisons with per-dtype tolerances.

Nothing here calls into tilekit except ``run``: references are computed with
numpy (float64, or exact Python/numpy integers) so they are independent of the
implementation under test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

bf16 = np.dtype(ml_dtypes.bfloat16)
f16 = np.dtype(np.float16)
f32 = np.dtype(np.float32)
f64 = np.dtype(np.float64)

FLOATS = (f16, bf16, f32, f64)

# Relative tolerances for results that went through transcendental functions,
# sums or dots; single correctly rounded ops are compared exactly instead.
RTOL = {bf16: 1e-2, f16: 1e-3, f32: 1e-5, f64: 1e-12}

# The sentinel an integer output starts with, chosen so a kernel that does not
# write an element is caught (random data never produces it by accident).
INT_SENTINEL = {np.dtype(t): np.iinfo(t).min + 1 if np.iinfo(t).min < 0 else np.iinfo(t).max - 1
                for t in (np.int8, np.int16, np.int32, np.int64,
                          np.uint8, np.uint16, np.uint32, np.uint64)}


def run(kernel: Any, grid: Any, *args: Any, **constexprs: Any) -> None:
    """Launch ``kernel`` on ``grid``: the one place a later backend (GPU) plugs in.

    Today there is only the CPU interpreter; a GPU backend would copy the numpy
    arguments to the device here and the outputs back afterwards."""
    kernel[grid](*args, **constexprs)


def is_float(dtype: Any) -> bool:
    dt = np.dtype(dtype)
    return dt.kind == "f" or dt == bf16


def poison(shape: Any, dtype: Any, bool_value: bool = True) -> np.ndarray:
    """An output buffer full of NaN (floats) or an integer sentinel. Every bool is a legal
    result, so bool outputs are filled with ``bool_value``: run twice, once with each
    (``run_bool_out``)."""
    dt = np.dtype(dtype)
    if is_float(dt):
        return np.full(shape, np.nan, dtype=dt)
    if dt == np.bool_:
        return np.full(shape, bool_value, dtype=bool)
    return np.full(shape, INT_SENTINEL[dt], dtype=dt)


def run_bool_out(launch: Callable[[np.ndarray], None], shape: Any) -> np.ndarray:
    """Run ``launch(out)`` with a bool output poisoned True, then False; an element the
    kernel does not write differs between the runs."""
    a = poison(shape, bool, True)
    launch(a)
    b = poison(shape, bool, False)
    launch(b)
    assert_exact(a, b, "bool output (elements left unwritten?)")
    return a


def rand(rng: np.random.Generator, shape: Any, dtype: Any, lo: float = -4.0,
         hi: float = 4.0) -> np.ndarray:
    """Random values of ``dtype`` (floats uniform in [lo, hi), ints uniform over [lo, hi]
    clipped to the type's range)."""
    dt = np.dtype(dtype)
    if is_float(dt):
        return rng.uniform(lo, hi, size=shape).astype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    info = np.iinfo(dt)
    a = max(int(lo), int(info.min))
    b = min(int(hi), int(info.max))
    return rng.integers(a, b, size=shape, endpoint=True, dtype=dt)


def rand_full_range(rng: np.random.Generator, shape: Any, dtype: Any) -> np.ndarray:
    """Integers over the whole range of ``dtype`` (for wraparound and bit tests)."""
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)


def wrap(values: Any, dtype: Any) -> np.ndarray:
    """Python integers wrapped (two's complement) into ``dtype``: the exact reference
    for integer arithmetic."""
    dt = np.dtype(dtype)
    info = np.iinfo(dt)
    span = 1 << (8 * dt.itemsize)
    # An object array keeps Python ints exact (np.ravel of a list of big ints would not).
    arr = values if isinstance(values, np.ndarray) else np.array(values, dtype=object)
    flat = [((int(v) - int(info.min)) % span) + int(info.min) for v in arr.reshape(-1)]
    return np.array(flat, dtype=object).astype(dt).reshape(arr.shape)


def as_int_objects(a: np.ndarray) -> np.ndarray:
    """``a`` as an array of Python ints (no overflow in reference arithmetic)."""
    return np.array([int(v) for v in np.ravel(a)], dtype=object).reshape(a.shape)


def round_to(values: Any, dtype: Any) -> np.ndarray:
    """float64 values rounded once (to nearest even) to a float ``dtype``. bfloat16 goes
    through round-to-odd float32 and bit arithmetic, so it depends on neither
    ml_dtypes' conversions nor double rounding."""
    x = np.asarray(values, dtype=np.float64)
    dt = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if dt == f64:
            return x.copy()
        if dt in (f32, f16):
            return x.astype(dt)  # numpy's double -> float/half conversions are direct
        if dt == bf16:
            return bf16_from_f32_bits(round_to_odd_f32(x))
    raise TypeError(f"round_to: not a float type {dt}")


def round_to_odd_f32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: truncate toward zero, then set the last
    mantissa bit if anything was lost. Rounding that to a type with at most 22
    mantissa bits to nearest-even gives the correctly rounded result."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
    finite = np.isfinite(x) & np.isfinite(f)
    inexact = finite & (back != x)
    toward_zero = np.where(inexact & (np.abs(back) > np.abs(x)),
                           np.nextafter(f, np.float32(0)), f).astype(np.float32)
    bits = toward_zero.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


def bf16_from_f32_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 by bit arithmetic (round to nearest even, NaN stays NaN),
    independent of ml_dtypes."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    lsb = (b >> 16) & 1
    rounded = ((b + 0x7FFF + lsb) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded = np.where(nan, np.uint16(0x7FC0), rounded).astype(np.uint16)
    return rounded.view(bf16)


def assert_exact(out: np.ndarray, ref: np.ndarray, what: str = "",
                 signed_zeros: bool = False) -> None:
    """Equal values: exact for floats too (NaN matches NaN; -0.0 matches 0.0 unless
    ``signed_zeros``)."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
    if is_float(out.dtype) or is_float(ref.dtype):
        o = out.astype(np.float64)
        r = ref.astype(np.float64)
        bad = ~((o == r) | (np.isnan(o) & np.isnan(r)))
        if signed_zeros:
            bad |= (o == 0) & (r == 0) & (np.signbit(o) != np.signbit(r))
    else:
        bad = out != ref
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements differ; first "
                             f"at {idx}: got {out[idx]!r}, expected {ref[idx]!r}")


def assert_close(out: np.ndarray, ref: Any, rtol: float | None = None, atol: Any = 0.0,
                 what: str = "") -> None:
    """``|out - ref| <= atol + rtol * |ref|`` elementwise, with NaN, infinities and the
    poison checked: NaN only where the reference is NaN, infinities of the same sign.
    ``rtol`` defaults to the tolerance of ``out``'s dtype."""
    out = np.asarray(out)
    if rtol is None:
        rtol = RTOL[np.dtype(out.dtype)]
    o = out.astype(np.float64)
    r = np.asarray(ref, dtype=np.float64)
    assert o.shape == r.shape, f"{what}: shape {o.shape} != {r.shape}"
    nan_o, nan_r = np.isnan(o), np.isnan(r)
    inf_r = np.isinf(r)
    with np.errstate(invalid="ignore"):
        err = np.abs(o - r)
        ok = err <= np.asarray(atol) + rtol * np.abs(r)
    ok = np.where(inf_r, o == r, ok)
    ok = np.where(nan_r | nan_o, nan_r & nan_o, ok)
    if not np.all(ok):
        bad = ~ok
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements off (rtol "
                             f"{rtol:g}); first at {idx}: got {o[idx]!r}, expected {r[idx]!r}")


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Norm-wise relative error, inf if ``out`` has a NaN the reference has not."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if np.any(np.isnan(o) & ~np.isnan(r)):
        return float("inf")
    return float(np.linalg.norm(o - r) / max(np.linalg.norm(r), 1e-300))


def check_untouched(base_after: np.ndarray, base_before: np.ndarray, view_mask: np.ndarray,
                    what: str = "") -> None:
    """Elements of a base buffer outside a view (``~view_mask``) kept their values."""
    outside = ~view_mask
    assert_exact(base_after[outside], base_before[outside], f"{what} (outside the view)")


def view_mask(base: np.ndarray, index: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """A bool array over ``base`` that is True exactly at the elements of ``index(base)``."""
    marks = np.zeros(base.shape, dtype=bool)
    index(marks)[...] = True
    return marks


def shared_divisor_cases(seed: int = 0, n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """float32 rows ``x`` (R x n) and a divisor per row ``y`` (R), for
    ``tilekit.codegen.scalar_ops.SharedDivisor``. Divisors: special, subnormal, huge, with
    reciprocals that are not exact, random. Per row, dividends of every kind and the hard
    ones: quotients exactly at a midpoint between two subnormals (ties to even), quotients
    next to the overflow threshold, subnormal and zero dividends. Then rows whose quotients
    all lie 2^-49 (relative) from a midpoint, as close as float32 quotients come:
    ``A * 2^25 = B * M +- 1`` with ``M`` odd and of 25 bits, ``y = B``, ``x = A * 2^k``.
    Last, one row per ``TIE_DIVISORS``: ties that only the correction step rounds right."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    tiny = 2.0 ** -149
    divisors = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3.0, 6.0, -7.0, 0.1, 1.5,
                4097.0, 2.0 ** -126, tiny, 3 * tiny, -5 * tiny, 2.0 ** 127, 3.4e38, 1e-40,
                *np.exp(rng.uniform(-80, 80, 12)) * rng.choice([-1, 1], 12)]
    xs, ys = [], []
    for y in divisors:
        y = f32(y)
        wide = np.exp(rng.uniform(-100, 88, n - n // 2)) * rng.choice([-1, 1], n - n // 2)
        x = rng.permutation(np.concatenate([rng.standard_normal(n // 2) * 4, wide])).astype(f32)
        x[224:236] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, tiny, -tiny, 2.0**-126,
                      3.4028235e38, -3.4028235e38]
        odd = (2 * rng.integers(0, 2**22, 96) + 1).astype(np.float64)
        with np.errstate(all="ignore"):
            mid = odd * tiny / 2 * np.float64(y)  # x / y == odd * 2^-150: a tie
        exact = np.isfinite(mid) & (mid.astype(f32).astype(np.float64) == mid) & (mid != 0)
        x[:96][exact] = mid[exact].astype(f32)
        with np.errstate(all="ignore"):
            x[96:160] = f32(3.4028235e38) * rng.uniform(0.5, 1, 64).astype(f32)
            x[160:192] = (f32(np.abs(y)) if np.isfinite(y) and y != 0 else f32(1)) * \
                rng.uniform(0.99, 1.01, 32).astype(f32)
        x[192:224] = rng.integers(1, 2**20, 32).astype(f32) * f32(tiny)
        xs.append(x)
        ys.append(y)
    while len(ys) < len(divisors) + 24:
        b = int(rng.integers(2**20, 2**23)) | 1
        sign = int(rng.choice([-1, 1]))
        m = (sign * pow(b, -1, 2**25)) % 2**25
        if m < 2**24:
            continue
        a, rest = divmod(b * m - sign, 2**25)  # a * 2^25 = b * m - sign
        assert rest == 0 and a < 2**24
        shift = np.arange(n) % 200 - 100  # quotients from 2^-100 to 2^100 times m
        xs.append((np.float64(a) * np.exp2(shift.astype(np.float64))).astype(f32))
        ys.append(f32(b))
    tie_rng = np.random.default_rng(seed + 1)  # a stream of its own: the rows above stay
    for y in TIE_DIVISORS:
        xs.append(subnormal_ties(tie_rng, y, n))
        ys.append(f32(y))
    return np.stack(xs), np.array(ys, f32)


# Divisors ``y = Y * 2^b`` (``Y`` odd, ``b >= 1``) whose float64 reciprocal ``RN(1/y)`` is off
# by 0.72 to 0.97 of its half ulp (relative 2^-53), either way. A quotient ``x / y == t`` that
# is a tie between two float32 subnormals then has ``x * RN(1/y)`` one float64 step from
# ``t``, for a quarter to a half of the ties on the side that rounds to the odd neighbour
# (found by brute force over the odd ``Y < 2^13``). Divisors like 3, 7, 4097 or 0.1 never do
# this: their reciprocals round closer, and ``x * RN(1/y)`` is ``t`` itself.
TIE_DIVISORS = (123 * 2.0, -503 * 2.0**7, 1997 * 2.0**30, -3987 * 2.0**60, 8067 * 2.0**100,
                49 * 2.0**120)


def subnormal_ties(rng: np.random.Generator, y: float, n: int) -> np.ndarray:
    """``n`` float32 dividends ``x = +-y * odd * 2^-150`` whose quotients by ``y`` are ties
    between two subnormals; exact because ``odd`` times the odd part of ``y`` is < 2^24."""
    odd_part = int(abs(y))
    while odd_part % 2 == 0:
        odd_part //= 2
    odds = 2 * rng.integers(0, 2**24 // odd_part // 2, n) + 1
    exact = rng.choice([-1.0, 1.0], n) * abs(y) * odds * 2.0**-150
    x = exact.astype(np.float32)
    assert np.array_equal(x.astype(np.float64), exact), "a tie's dividend is not a float32"
    return x
