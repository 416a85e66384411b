"""Differential tests: the kernels in ``kernels.py`` against numpy references.

References are computed independently of tilekit: in float64 and rounded once to
the result type where the language promises one correctly rounded op (compared
exactly), in float64 with a dtype tolerance where it does not (transcendentals,
sums, dots), and with Python integers wrapped to the type for integer
arithmetic (exact). Outputs are poisoned before every run, so an element the
kernel fails to write shows up as NaN or a sentinel.

Everything launches through ``helpers.run`` and uses numpy host arrays only, so a
later GPU backend can run the same file.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilekit as tk
from tests.lang import kernels as K
from tests.lang.helpers import (
    RTOL,
    as_int_objects,
    assert_close,
    assert_exact,
    bf16,
    bf16_from_f32_bits,
    check_untouched,
    f16,
    f32,
    f64,
    is_float,
    poison,
    rand,
    rand_full_range,
    relative_error,
    round_to,
    run,
    run_bool_out,
    shared_divisor_cases,
    view_mask,
    wrap,
)

pytestmark = pytest.mark.usefixtures("backend")

SIZES = [1, 7, 31, 97, 127, 257, 1000, 4097]
BLOCK = 128

i8, i16, i32, i64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
u8, u16, u32, u64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
INTS = [i8, i16, i32, i64, u8, u32]

TK = {np.dtype(np.bool_): tk.bool_, i8: tk.int8, i16: tk.int16, i32: tk.int32, i64: tk.int64,
      u8: tk.uint8, u16: tk.uint16, u32: tk.uint32, u64: tk.uint64, f16: tk.float16,
      bf16: tk.bfloat16, f32: tk.float32, f64: tk.float64}


def rng_for(*key) -> np.random.Generator:
    """A generator seeded from the test's parameters (stable across runs and processes)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def known_bug(request, reason: str) -> None:
    """Mark the running test as failing because of a tilekit bug (strict: it must fail)."""
    request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def grid1(n: int, block: int = BLOCK) -> tuple[int]:
    return (max(1, math.ceil(n / block)),)


def bits_of(dt: np.dtype) -> int:
    return 8 * np.dtype(dt).itemsize


def ids(v):
    if isinstance(v, np.dtype):
        return str(v)
    return None


# =================================================================================================
# Elementwise binary ops
# =================================================================================================

FLOAT_EXACT_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}


def special_floats(dtype) -> np.ndarray:
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5], dtype=dtype)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=ids)
@pytest.mark.parametrize("op", sorted(FLOAT_EXACT_OPS))
def test_float_arith_is_correctly_rounded(op, dtype, n):
    """+ - * / on floats: one correctly rounded op (16-bit floats compute in float32 and
    round once), so the float64 reference rounded to the type must match exactly."""
    rng = rng_for(op, dtype, n)
    x = rand(rng, n, dtype, -100, 100)
    y = rand(rng, n, dtype, -100, 100)
    if n >= 16:  # special values, both ways round
        sp = special_floats(dtype)
        x[: len(sp)] = sp
        y[: len(sp)] = sp[::-1]
    out = poison(n, dtype)
    run(K.binop, grid1(n), x, y, out, n, OP=op, EXPECT=TK[dtype], BLOCK=BLOCK)
    with np.errstate(all="ignore"):
        ref = round_to(FLOAT_EXACT_OPS[op](x.astype(f64), y.astype(f64)), dtype)
    assert_exact(out, ref, f"{op} {dtype} n={n}", signed_zeros=True)


@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=ids)
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_float_maximum_minimum_propagate_nan(op, dtype):
    n = 257
    rng = rng_for(op, dtype)
    x = rand(rng, n, dtype)
    y = rand(rng, n, dtype)
    x[::7] = np.nan
    y[::11] = np.nan
    y[3::13] = x[3::13]  # ties
    out = poison(n, dtype)
    run(K.binop, grid1(n, 64), x, y, out, n, OP=op, EXPECT=TK[dtype], BLOCK=64)
    x64, y64 = x.astype(f64), y.astype(f64)
    pick = np.where(x64 >= y64, x64, y64) if op == "maximum" else np.where(x64 <= y64, x64, y64)
    ref = np.where(np.isnan(x64) | np.isnan(y64), np.nan, pick)
    assert_exact(out, ref.astype(dtype), f"{op} {dtype}")


@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=ids)
@pytest.mark.parametrize("op", ["floordiv", "mod", "pow"])
def test_float_floordiv_mod_pow(op, dtype):
    """Float ``//`` and ``%`` follow Python (floor, sign of the divisor); ``**``."""
    n = 257
    rng = rng_for(op, dtype)
    if op == "pow":
        x = rand(rng, n, dtype, 0.25, 4)
        y = rand(rng, n, dtype, -3, 3)
    else:
        x = rand(rng, n, dtype, -50, 50)
        y = (rand(rng, n, dtype, 0.5, 7) * np.where(rng.random(n) < 0.5, -1, 1)).astype(dtype)
    out = poison(n, dtype)
    run(K.binop, grid1(n, 64), x, y, out, n, OP=op, EXPECT=TK[dtype], BLOCK=64)
    a = [float(v) for v in x.astype(f64)]
    b = [float(v) for v in y.astype(f64)]
    fn = {"floordiv": lambda p, q: p // q, "mod": lambda p, q: p % q,
          "pow": lambda p, q: p**q}[op]
    ref64 = np.array([fn(p, q) for p, q in zip(a, b, strict=True)])
    if op == "mod":  # a result within one ulp of |y| may round to y itself
        assert_close(out, ref64, atol=np.abs(y.astype(f64)) * RTOL[dtype], what=f"{op} {dtype}")
    else:
        assert_close(out, ref64, what=f"{op} {dtype}")
    if op == "mod":  # the sign follows the divisor (or the result is 0)
        o = out.astype(f64)
        assert np.all((o == 0) | (np.sign(o) == np.sign(y.astype(f64)))), "mod sign"


COMPARE_OPS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("dtype", [f16, bf16, f32, i8, i32, u8, i64, u32], ids=ids)
@pytest.mark.parametrize("op", sorted(COMPARE_OPS))
def test_comparisons(op, dtype):
    """Comparisons give bools (stored to a uint8 tensor here: 0/1, the sentinel catches
    unwritten elements); NaN compares unequal to everything."""
    n = 127
    rng = rng_for(op, dtype)
    x = rand(rng, n, dtype, -3, 3)
    y = rand(rng, n, dtype, -3, 3)
    y[::3] = x[::3]
    if is_float(dtype):
        x[::10] = np.nan
        y[5::17] = np.nan
    out = poison(n, u8)
    run(K.binop, grid1(n, 32), x, y, out, n, OP=op, EXPECT=tk.bool_, BLOCK=32)
    ref = COMPARE_OPS[op](x.astype(f64), y.astype(f64)) if is_float(dtype) else \
        COMPARE_OPS[op](as_int_objects(x), as_int_objects(y)).astype(bool)
    assert_exact(out, ref.astype(u8), f"{op} {dtype}")


def test_regression_bfloat16_nan_comparisons_do_not_warn():
    """Ordered comparisons of bfloat16 NaNs printed numpy RuntimeWarnings ("invalid value
    encountered in less") from the interpreter."""
    x = np.array([np.nan, 1.0, np.nan, -2.0], bf16)
    y = np.array([1.0, np.nan, np.nan, -2.0], bf16)
    out = poison(4, u8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(K.binop, (1,), x, y, out, 4, OP="le", EXPECT=tk.bool_, BLOCK=4)
    assert_exact(out, np.array([0, 0, 0, 1], u8))


def test_comparison_into_bool_tensor():
    n = 97
    rng = rng_for("cmpbool")
    x = rand(rng, n, f32)
    y = rand(rng, n, f32)
    out = run_bool_out(lambda o: run(K.binop, grid1(n, 32), x, y, o, n, OP="lt",
                                     EXPECT=tk.bool_, BLOCK=32), n)
    assert_exact(out, x < y)


INT_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "maximum": max,
    "minimum": min,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("n", [1, 31, 257])
@pytest.mark.parametrize("dtype", INTS, ids=ids)
@pytest.mark.parametrize("op", sorted(INT_OPS))
def test_int_ops_exact(op, dtype, n):
    """Integer arithmetic wraps (two's complement); ``//`` and ``%`` floor like Python."""
    rng = rng_for(op, dtype, n)
    x = rand_full_range(rng, n, dtype)
    y = rand_full_range(rng, n, dtype)
    info = np.iinfo(dtype)
    if op in ("floordiv", "mod"):
        small = rand(rng, n, dtype, -9, 9)
        y = np.where(rng.random(n) < 0.5, small, y).astype(dtype)
        y[y == 0] = 3
        if n > 4 and info.min < 0:
            x[:2] = info.min
            y[:2] = [-1, 1]  # INT_MIN // -1 wraps
    out = poison(n, dtype)
    run(K.binop, grid1(n, 64), x, y, out, n, OP=op, EXPECT=TK[dtype], BLOCK=64)
    fn = INT_OPS[op]
    ref = wrap([fn(int(a), int(b)) for a, b in zip(x, y, strict=True)], dtype)
    assert_exact(out, ref, f"{op} {dtype}")


@pytest.mark.parametrize("dtype", INTS, ids=ids)
@pytest.mark.parametrize("op", ["shl", "shr"])
def test_shifts_including_width_or_more(op, dtype):
    """Shifts by the bit width or more give 0 (or the sign for >> of negative values)."""
    n = 257
    bits = bits_of(dtype)
    rng = rng_for(op, dtype)
    x = rand_full_range(rng, n, dtype)
    y = rng.integers(0, min(bits + 4, np.iinfo(dtype).max), size=n, endpoint=True).astype(dtype)
    y[:5] = [0, bits - 1, bits, bits + 1, min(bits + 3, np.iinfo(dtype).max)]
    out = poison(n, dtype)
    run(K.binop, grid1(n, 64), x, y, out, n, OP=op, EXPECT=TK[dtype], BLOCK=64)
    refs = []
    for a, s in zip(as_int_objects(x), as_int_objects(y), strict=True):
        if op == "shl":
            refs.append(0 if s >= bits else a << s)
        else:
            refs.append((-1 if a < 0 else 0) if s >= bits else a >> s)
    assert_exact(out, wrap(refs, dtype), f"{op} {dtype}")


@pytest.mark.parametrize("op", ["add", "sub", "mul", "floordiv", "mod", "and", "or", "xor",
                                "shl", "shr"])
def test_inplace_operators(op):
    n = 97
    rng = rng_for("inplace", op)
    x = rand_full_range(rng, n, i32)
    y = rng.integers(1, 40, size=n).astype(i32) if op in ("shl", "shr", "floordiv", "mod") \
        else rand_full_range(rng, n, i32)
    out = poison(n, i32)
    run(K.inplace_ops, grid1(n, 32), x, y, out, n, OP=op, BLOCK=32)
    fn = dict(INT_OPS, shl=lambda a, b: 0 if b >= 32 else a << b,
              shr=lambda a, b: (-1 if a < 0 else 0) if b >= 32 else a >> b)[op]
    assert_exact(out, wrap([fn(int(a), int(b)) for a, b in zip(x, y, strict=True)], i32), op)


def test_inplace_keeps_type_of_target():
    """``acc += y`` with a float16 ``acc`` and float32 ``y`` would change the type: an error."""
    x = np.zeros(8, f16)
    y = np.zeros(8, f32)
    with pytest.raises(tk.TraceError, match="in-place update changes this tile"):
        run(K.inplace_ops, (1,), x, y, np.zeros(8, f16), 8, OP="add", BLOCK=8)


# --- promotion ---------------------------------------------------------------------------------

PROMOTIONS = [
    (f16, f32, f32), (bf16, f32, f32), (f16, bf16, f32), (f32, f64, f64), (bf16, f64, f64),
    (i32, f32, f32), (i8, f16, f16), (i64, bf16, bf16), (u8, f32, f32),
    (u8, i8, i16), (u32, i32, i64), (u8, i32, i32), (u16, i8, i32), (u8, u32, u32),
    (i8, i64, i64), (i16, u8, i16),
]


@pytest.mark.parametrize("xt,yt,rt", PROMOTIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("op", ["add", "mul", "sub", "lt"])
def test_promotion_of_two_tiles(op, xt, yt, rt):
    """Mixed tile types promote (floats win, the wider float wins, f16+bf16 -> f32,
    signed+unsigned of one width -> the next signed width), then one op in that type."""
    n = 97
    rng = rng_for("promo", op, xt, yt)
    lim = 1000 if (is_float(xt) or is_float(yt)) else 10**12
    x = rand(rng, n, xt, -lim, lim)
    y = rand(rng, n, yt, -lim, lim)
    x[:3] = rand_full_range(rng, 3, xt) if not is_float(xt) else x[:3]
    expect = tk.bool_ if op == "lt" else TK[rt]
    out = poison(n, u8 if op == "lt" else rt)
    run(K.binop, grid1(n, 32), x, y, out, n, OP=op, EXPECT=expect, BLOCK=32)
    if is_float(rt):
        # each operand converted (rounded) to the result type, then one rounded op
        xa = round_to([float(int(v)) if not is_float(xt) else float(v) for v in x], rt)
        ya = round_to([float(int(v)) if not is_float(yt) else float(v) for v in y], rt)
        a64, b64 = xa.astype(f64), ya.astype(f64)
        if op == "lt":
            ref = (a64 < b64).astype(u8)
        else:
            ref = round_to(FLOAT_EXACT_OPS[op](a64, b64), rt)
    else:
        a, b = wrap(as_int_objects(x), rt), wrap(as_int_objects(y), rt)
        if op == "lt":
            ref = (as_int_objects(a) < as_int_objects(b)).astype(u8)
        else:
            ref = wrap([INT_OPS[op](int(p), int(q)) for p, q in zip(a, b, strict=True)], rt)
    assert_exact(out, ref, f"{xt} {op} {yt}")


BOOL_CASES = [
    # x, y, op, result: bools are the lowest kind; arithmetic on two bools is int32
    ("b", "b", "add", i32), ("b", "b", "mul", i32), ("b", "b", "and", "b"),
    ("b", "b", "xor", "b"), ("b", "b", "maximum", i32), ("b", i8, "add", i8),
    ("b", f16, "mul", f16), (u8, "b", "sub", u8), ("b", "b", "lt", "b"),
]


@pytest.mark.parametrize("xt,yt,op,rt", BOOL_CASES, ids=lambda v: str(v))
def test_bool_operands(xt, yt, op, rt):
    n = 31
    rng = rng_for("bools", xt, yt, op)
    def make(t):  # "b" is bool (np.dtype("int8") == "b", so compare by type)
        return (rng.random(n) < 0.5) if isinstance(t, str) else rand(rng, n, t, 0, 9)

    x, y = make(xt), make(yt)
    bool_out = isinstance(rt, str)
    out_t = u8 if bool_out else rt
    out = poison(n, out_t)
    run(K.binop, (1,), x, y, out, n, OP=op, EXPECT=tk.bool_ if bool_out else TK[rt], BLOCK=32)
    fn = dict(INT_OPS, lt=lambda a, b: a < b)[op]
    ref = [fn(a.item(), b.item()) for a, b in zip(x, y, strict=True)]
    if is_float(out_t):
        assert_exact(out, round_to(np.array(ref, f64), out_t))
    else:
        assert_exact(out, wrap([int(v) for v in ref], out_t))


LITERALS = [
    # x dtype, op, literal, literal on the left, result type
    (f16, "mul", 3.3, False, f16),
    (bf16, "add", 1.1, False, bf16),
    (bf16, "sub", 2.5, True, bf16),
    (f16, "add", 65519, False, f16),  # rounds to 65504, the largest float16 (70000: an error)
    (f16, "div", 3, True, f16),
    (f32, "mul", 1e-3, False, f32),
    (i8, "add", 100, False, i8),  # wraps in int8
    (u8, "sub", 1, False, u8),  # 0 - 1 wraps to 255
    (i8, "mul", 2.5, False, f32),  # a float literal with an int tile: float32
    (i32, "div", 2, False, f32),  # / on integers gives float32
    (i32, "floordiv", -3, False, i32),
    (i32, "mod", -3, False, i32),
    (i32, "floordiv", 7, True, i32),
    (i64, "add", 2**40, False, i64),
    (u32, "mul", 3, False, u32),
    (i16, "shl", 3, False, i16),
    (f16, "lt", 0.1, False, None),  # the literal rounds to float16 first
    (bf16, "ge", 1.01, True, None),
    (f16, "lt", 1e6, False, None),  # beyond float16: compared in float32, true where finite
]


@pytest.mark.parametrize("xt,op,lit,left,rt", LITERALS, ids=lambda v: repr(v))
def test_python_literals_take_the_tile_type(xt, op, lit, left, rt):
    n = 257
    rng = rng_for("lit", xt, op, lit, left)
    x = rand(rng, n, xt, -100, 100) if xt != u8 else rand(rng, n, xt, 0, 255)
    if op in ("lt", "ge"):
        x[::5] = np.asarray(lit).astype(xt)  # equal to the rounded literal
    if op == "div" and left:
        x[x == 0] = 1
    if op == "floordiv" and left:
        x[x == 0] = 5
    cmp = rt is None
    out = poison(n, u8 if cmp else rt)
    run(K.binop_literal, grid1(n, 64), x, out, n, OP=op, LIT=lit, LEFT=left,
        EXPECT=tk.bool_ if cmp else TK[rt], BLOCK=64)
    ctype = xt if (cmp or rt == xt) else rt
    if is_float(ctype):
        xa = round_to([float(v) for v in x.astype(f64)], ctype).astype(f64)
        la = float(round_to(float(lit), ctype))
        a, b = (la, xa) if left else (xa, la)
        if cmp:
            ref = (a < b if op == "lt" else a >= b).astype(u8)
        elif op in FLOAT_EXACT_OPS:
            with np.errstate(all="ignore"):
                ref = round_to(FLOAT_EXACT_OPS[op](a, b), rt)
        else:
            raise AssertionError(op)
    else:
        vals = [int(v) for v in x]
        fn = dict(INT_OPS, shl=lambda p, q: p << q)[op]
        ref = wrap([fn(lit, v) if left else fn(v, lit) for v in vals], rt)
    assert_exact(out, ref, f"{xt} {op} {lit!r}")


@pytest.mark.parametrize("xt,lit", [(u8, 300), (i8, -129), (i32, 2**31), (u8, -1),
                                    (i64, 2**63), (u32, -5)])
def test_literal_that_does_not_fit_is_an_error(xt, lit):
    x = np.zeros(4, xt)
    with pytest.raises(tk.TraceError, match="not an integer|does not fit"):
        run(K.binop_literal, (1,), x, np.zeros(4, xt), 4, OP="add", LIT=lit, LEFT=False,
            EXPECT=TK[xt], BLOCK=4)


SCALARS = [
    # x dtype, runtime scalar, result type: runtime scalars are typed values and promote
    (f16, 0.1, f32),  # a float argument is float32, stronger than float16
    (bf16, 3, bf16),  # int32 with a float: the float wins
    (i8, 5, i32),
    (u8, 7, i32),
    (f32, 2**40, f32),  # int64 scalar converts to float32
    (i32, 2**40, i64),
    (f64, 0.1, f64),
]


@pytest.mark.parametrize("dt", [f32, f16, bf16], ids=str)
def test_division_by_a_shared_divisor_is_correctly_rounded(dt):
    """A row divided by one value (the compiled code computes its reciprocal once and
    corrects each quotient; ``scalar_ops.SharedDivisor``) rounds exactly as ``/`` does:
    special, subnormal and huge divisors, ties between subnormals, quotients 2^-49 from a
    midpoint, overflow; a runtime scalar divisor too."""
    rows, divisors = shared_divisor_cases(seed=3, n=509)
    x, d = rows.astype(dt), divisors.astype(dt)[:, None]
    out = poison(x.shape, dt)
    run(K.divide_rows, (len(x),), x, d, out, N=x.shape[1])
    with np.errstate(all="ignore"):
        ref = (x.astype(f32) / d.astype(f32)).astype(dt)
    assert_exact(out, ref, f"{dt} rows / their divisor", signed_zeros=True)
    if dt == f32:
        n = x.shape[1]
        for row, s in zip(x[::7], divisors[::7]):
            out = poison(n, f32)
            run(K.binop_scalar, grid1(n, 128), row, out, n, float(s), OP="div",
                EXPECT=tk.float32, BLOCK=128)
            with np.errstate(all="ignore"):
                assert_exact(out, row / s, f"row / scalar {s!r}", signed_zeros=True)


@pytest.mark.parametrize("xt,s,rt", SCALARS, ids=lambda v: repr(v))
def test_runtime_scalars_promote_like_tiles(xt, s, rt):
    n = 97
    rng = rng_for("scal", xt, s)
    x = rand(rng, n, xt, -50, 50)
    out = poison(n, rt)
    run(K.binop_scalar, grid1(n, 32), x, out, n, s, OP="add", EXPECT=TK[rt], BLOCK=32)
    if is_float(rt):
        sv = float(np.float32(s)) if isinstance(s, float) else float(s)
        ref = round_to(round_to(x.astype(f64), rt).astype(f64) + float(round_to(sv, rt)), rt)
    else:
        ref = wrap([int(v) + s for v in x], rt)
    assert_exact(out, ref, f"{xt} + scalar {s!r}")


# =================================================================================================
# Unary ops and math functions
# =================================================================================================

MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda v: 1 / np.sqrt(v), "erf": np.vectorize(math.erf, otypes=[f64]),
    "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "sin": np.sin, "cos": np.cos,
    "floor": np.floor, "ceil": np.ceil, "neg": np.negative, "pos": lambda v: v,
    "abs": np.abs, "tk_abs": np.abs,
}
# Functions that are one correctly rounded op (compared exactly).
EXACT_MATH = {"sqrt", "floor", "ceil", "neg", "pos", "abs", "tk_abs"}
POSITIVE = {"log", "log2", "sqrt", "rsqrt"}


def _math_input(fn, dtype, n, rng):
    lo, hi = (0.01, 60.0) if fn in POSITIVE else (-8.0, 8.0)
    x = rand(rng, n, dtype, lo, hi)
    sp = special_floats(dtype)
    x[: len(sp)] = sp
    return x


@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=ids)
@pytest.mark.parametrize("fn", sorted(MATH))
def test_unary_math(fn, dtype):
    n = 257
    rng = rng_for(fn, dtype)
    x = _math_input(fn, dtype, n, rng)
    out = poison(n, dtype)
    run(K.unary, grid1(n, 64), x, out, n, FN=fn, EXPECT=TK[dtype], BLOCK=64)
    with np.errstate(all="ignore"):
        ref64 = MATH[fn](x.astype(f64))
    if fn in EXACT_MATH:
        assert_exact(out, round_to(ref64, dtype), f"{fn} {dtype}", signed_zeros=True)
    else:
        # tolerance of the type, plus the float32 compute's own error for f16/bf16
        # results near the bottom of their range
        assert_close(out, ref64, atol=1e-30, what=f"{fn} {dtype}")


@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=ids)
def test_isnan(dtype):
    n = 97
    rng = rng_for("isnan", dtype)
    x = _math_input("exp", dtype, n, rng)
    x[50:60] = np.nan
    out = poison(n, u8)
    run(K.unary, grid1(n, 32), x, out, n, FN="isnan", EXPECT=tk.bool_, BLOCK=32)
    assert_exact(out, np.isnan(x.astype(f64)).astype(u8))


@pytest.mark.parametrize("dtype", [i8, i32, u8, i64], ids=ids)
@pytest.mark.parametrize("fn,expect", [("exp", f32), ("sqrt", f32), ("sigmoid", f32),
                                       ("floor", None), ("ceil", None), ("isnan", "bool")])
def test_math_on_integers(fn, expect, dtype):
    """Math on integers computes in float32; floor/ceil are the identity; isnan is False."""
    n = 97
    rng = rng_for("imath", fn, dtype)
    lo = 0 if fn == "sqrt" or dtype in (u8,) else -20
    x = rand(rng, n, dtype, lo, 20)
    rt = dtype if expect is None else (u8 if expect == "bool" else expect)
    out = poison(n, rt)
    exp_tk = TK[dtype] if expect is None else (tk.bool_ if expect == "bool" else TK[expect])
    run(K.unary, grid1(n, 32), x, out, n, FN=fn, EXPECT=exp_tk, BLOCK=32)
    if expect is None:
        assert_exact(out, x)
    elif expect == "bool":
        assert_exact(out, np.zeros(n, u8))
    else:
        assert_close(out, MATH[fn](x.astype(f64)), what=f"{fn} {dtype}")


@pytest.mark.parametrize("dtype", INTS, ids=ids)
@pytest.mark.parametrize("fn", ["neg", "abs", "invert"])
def test_int_unary(fn, dtype):
    """Integer neg/abs wrap (abs(INT_MIN) == INT_MIN); abs of unsigned is the identity."""
    n = 97
    rng = rng_for("iun", fn, dtype)
    x = rand_full_range(rng, n, dtype)
    x[0] = np.iinfo(dtype).min
    x[1] = np.iinfo(dtype).max
    out = poison(n, dtype)
    run(K.unary, grid1(n, 32), x, out, n, FN=fn, EXPECT=TK[dtype], BLOCK=32)
    fns = {"neg": lambda v: -v, "abs": abs, "invert": lambda v: ~v}
    assert_exact(out, wrap([fns[fn](int(v)) for v in x], dtype), f"{fn} {dtype}")


def test_bool_unary():
    n = 31
    rng = rng_for("bool-unary")
    x = rng.random(n) < 0.5
    out = run_bool_out(lambda o: run(K.unary, (1,), x, o, n, FN="invert", EXPECT=tk.bool_,
                                     BLOCK=32), n)
    assert_exact(out, ~x)
    # neg and abs of bools compute in int32
    out = poison(n, i32)
    run(K.unary, (1,), x, out, n, FN="neg", EXPECT=tk.int32, BLOCK=32)
    assert_exact(out, -x.astype(i32))


# =================================================================================================
# where
# =================================================================================================


@pytest.mark.parametrize("dtype", [f32, f16, bf16, i32, u8], ids=ids)
@pytest.mark.parametrize("mode", ["tiles", "scalar_b", "scalar_a", "scalar_cond"])
def test_where(mode, dtype):
    n = 257
    rng = rng_for("where", mode, dtype)
    c = rng.integers(0, 2, size=n).astype(i8)
    x = rand(rng, n, dtype, 0, 100)
    y = rand(rng, n, dtype, 0, 100)
    rt = f32 if (mode == "scalar_b" and not is_float(dtype)) else dtype
    out = poison(n, rt)
    run(K.select, grid1(n, 32), c, x, y, out, n, MODE=mode, BLOCK=32)
    if mode == "tiles":
        ref = np.where(c != 0, x, y)
    elif mode == "scalar_b":
        ref = np.where(c != 0, x.astype(f64), -1.5).astype(rt)
    elif mode == "scalar_a":
        ref = np.where(c != 0, np.asarray(3).astype(dtype), y)
    else:
        ref = np.empty(n, dtype)
        for s in range(0, n, 32):
            blk = slice(s, s + 32)
            take = int((c[blk] != 0).sum()) > 16
            ref[blk] = x[blk] if take else y[blk]
    assert_exact(out, ref, f"where {mode} {dtype}")


# =================================================================================================
# fma
# =================================================================================================


def _round_fraction_to_f32(e) -> np.float32:
    """A rational rounded once to the nearest float32 (ties to even), by comparing it with
    the neighbours of its float64 rounding."""
    from fractions import Fraction

    near = np.float32(float(e))
    if not np.isfinite(near):
        return near
    cands = [c for c in (np.nextafter(near, np.float32(-np.inf)), near,
                         np.nextafter(near, np.float32(np.inf))) if np.isfinite(c)]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - e),
                                     int(np.array(c).view(np.uint32)) & 1))


def fma_reference(x, y, z, dtype) -> np.ndarray:
    """``x * y + z`` exactly (rationals), rounded once to float32 or float64; float16 and
    bfloat16 round that float32 result to their type, as the language says."""
    from fractions import Fraction

    out = []
    for a, b, c in zip(*(np.asarray(v, np.float64).tolist() for v in (x, y, z))):
        if not all(map(math.isfinite, (a, b, c))):
            out.append(c if math.isfinite(a) and math.isfinite(b) else a * b + c)
            continue
        exact = Fraction(a) * Fraction(b) + Fraction(c)
        if exact == 0:
            out.append(a * b + c)  # an exact zero's sign, as IEEE addition gives it
        elif np.dtype(dtype) == f64:
            out.append(float(exact))
        else:
            out.append(float(_round_fraction_to_f32(exact)))
    return round_to(np.array(out, np.float64), dtype)


@pytest.mark.parametrize("n", [1, 97, 4097])
@pytest.mark.parametrize("dtype", [f16, bf16, f32, f64], ids=ids)
def test_fma_rounds_once(dtype, n):
    """``tk.fma``: the exact ``x * y + z`` rounded once (16-bit floats: in float32, then to
    their type), special values included; ``z`` near ``-x * y`` makes the product's
    low bits the whole result, where a separate multiply and add give 0 or garbage."""
    rng = rng_for("fma", dtype, n)
    x, y, z = (rand(rng, n, dtype, -100, 100) for _ in range(3))
    if n >= 16:
        half = n // 2
        z[:half] = round_to(-(x[:half].astype(f64) * y[:half].astype(f64)), dtype)
        sp = special_floats(dtype)
        x[: len(sp)], y[: len(sp)], z[-len(sp):] = sp, sp[::-1], sp
    out = poison(n, dtype)
    run(K.fma, grid1(n), x, y, z, out, n, BLOCK=BLOCK)
    assert_exact(out, fma_reference(x, y, z, dtype), f"fma {dtype} n={n}", signed_zeros=True)


# (X, Y, the scalar s, the second fma's type, the result's): the first fma takes all three
# operands' type, the second its two tiles' (a Python number takes the tiles' type, or
# float32 with integer tiles), the sum the wider of the two
FMA_MIXED = [(f32, f32, np.float32, f32, f32), (bf16, bf16, np.float32, bf16, f32),
             (f16, f16, np.float16, f16, f16), (i32, i32, np.int32, f32, f32),
             (f16, f32, np.float16, f32, f32)]


@pytest.mark.parametrize("xt,yt,st,tt,rt", FMA_MIXED, ids=lambda v: np.dtype(v).name)
def test_fma_broadcasts_and_promotes(xt, yt, st, tt, rt):
    """A column, a row, a runtime scalar and a Python number: broadcast like arithmetic,
    promoted to one type (integers to float32)."""
    M, N = 33, 47
    rng = rng_for("fma_mixed", xt, yt, st)
    x, y = rand(rng, M, xt, -9, 9), rand(rng, N, yt, -9, 9)
    s = st(1.25)
    out = poison((M, N), rt)
    run(K.fma_mixed, (1,), x, y, out, s, M=M, N=N, EXPECT=TK[np.dtype(rt)])
    col, row = (np.broadcast_to(v, (M, N)).ravel() for v in (x[:, None], y[None, :]))
    first = fma_reference(col.astype(rt), row.astype(rt), np.full(M * N, s, rt), rt)
    second = fma_reference(row.astype(tt), np.full(M * N, 2.5, tt), col.astype(tt), tt)
    ref = round_to(first.astype(f64) + second.astype(f64), rt).reshape(M, N)
    assert_exact(out, ref, f"fma mixed {xt} {yt} {st}")


# =================================================================================================
# Casts
# =================================================================================================


def ref_float_to_int(x: np.ndarray, dtype) -> np.ndarray:
    """Truncate toward zero, saturate, NaN -> 0 (Python integers, no numpy casts)."""
    info = np.iinfo(dtype)
    out = []
    for v in x.astype(f64):
        v = float(v)
        if math.isnan(v):
            out.append(0)
        elif math.isinf(v):
            out.append(int(info.max) if v > 0 else int(info.min))
        else:
            out.append(min(max(math.trunc(v), int(info.min)), int(info.max)))
    return np.array(out, dtype=object).astype(dtype)


def float_cast_inputs(src, dst, rng) -> np.ndarray:
    info = np.iinfo(dst)
    edge = [0.0, -0.0, 0.9, -0.9, 2.7, -2.7, np.nan, np.inf, -np.inf, 1e30, -1e30,
            float(info.max), float(info.max) + 1, float(info.min), float(info.min) - 1,
            float(info.max) * 0.75, float(info.min) + 0.5, float(info.max) - 0.5, 127.5,
            -128.5, 255.5, 256.0, -1.5]
    rnd = rng.uniform(float(info.min) * 1.5 - 10, float(info.max) * 1.5 + 10, size=200)
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(edge), rnd]).astype(src)


@pytest.mark.parametrize("src", [f32, f16, bf16, f64], ids=ids)
@pytest.mark.parametrize("dst", [i8, u8, i16, i32, u32, i64, u64], ids=ids)
def test_cast_float_to_int_truncates_and_saturates(src, dst):
    rng = rng_for("f2i", src, dst)
    x = float_cast_inputs(src, dst, rng)
    n = len(x)
    out = poison(n, dst)
    run(K.cast, grid1(n, 64), x, out, n, DT=TK[dst], VIA="method", BLOCK=64)
    assert_exact(out, ref_float_to_int(x, dst), f"{src} -> {dst}")


@pytest.mark.parametrize("src,dst", [(i32, i8), (i32, u8), (i32, i16), (i64, i32),
                                     (i64, u32), (i8, u32), (i8, u64), (u8, i8), (u32, i64),
                                     (u64, i64), (i16, u16), (i64, i8)], ids=lambda v: str(v))
def test_cast_int_to_int_wraps(src, dst):
    n = 257
    rng = rng_for("i2i", src, dst)
    x = rand_full_range(rng, n, src)
    x[:2] = [np.iinfo(src).min, np.iinfo(src).max]
    out = poison(n, dst)
    run(K.cast, grid1(n, 64), x, out, n, DT=TK[dst], VIA="function", BLOCK=64)
    assert_exact(out, wrap(as_int_objects(x), dst), f"{src} -> {dst}")


@pytest.mark.parametrize("src,dst", [(i32, f32), (i32, f16), (i32, f64), (i64, f32),
                                     (i64, f64), (u64, f32), (u32, f16), (i8, bf16),
                                     (i16, bf16), (u8, f16)], ids=lambda v: str(v))
def test_cast_int_to_float_rounds_to_nearest_even(src, dst):
    n = 257
    rng = rng_for("i2f", src, dst)
    x = rand_full_range(rng, n, src)
    out = poison(n, dst)
    run(K.cast, grid1(n, 64), x, out, n, DT=TK[dst], VIA="method", BLOCK=64)
    # Python's int -> float is correctly rounded; float64 -> a narrower type then rounds
    # once more, which is innocuous (53 >= 2p + 2 for p <= 24).
    ref = round_to([float(int(v)) for v in x], dst)
    assert_exact(out, ref, f"{src} -> {dst}")


@pytest.mark.parametrize("src", [i32, i64, u32], ids=ids)
def test_regression_wide_int_to_bfloat16_rounds_once(src):
    """int -> bfloat16 rounds once to nearest even: it went through float32 first and
    rounded twice (2**24 + 2**16 + 1 became 2**24 instead of 2**24 + 2**17)."""
    rng = rng_for("i2bf", src)
    x = np.concatenate([np.array([2**24 + 2**16 + 1, 2**25 + 2**17 + 3, 2**30 + 2**22 + 1]),
                        rng.integers(2**24, 2**31 - 1, size=200)]).astype(src)
    n = len(x)
    out = poison(n, bf16)
    run(K.cast, grid1(n, 64), x, out, n, DT=tk.bfloat16, VIA="method", BLOCK=64)
    assert_exact(out, round_to([float(int(v)) for v in x], bf16), f"{src} -> bf16")


def float_specials_and_random(src, rng, n=257) -> np.ndarray:
    fi = np.finfo(np.float32) if src == bf16 else np.finfo(src)
    sp = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, float(fi.tiny), -float(fi.tiny),
          float(fi.tiny) / 4, 65504.0, 65520.0, 65519.0, 1e-8, 6e-8, 3e38, 1 + 2**-8,
          1 + 2**-8 + 2**-40, 1 + 3 * 2**-9, 1.00390625]
    lo = -1e4 if src == f16 else -1e6
    r = np.concatenate([rng.uniform(lo, -lo, size=n // 2),
                        rng.standard_normal(n // 2) * 10.0 ** rng.integers(-9, 9, size=n // 2)])
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(sp), r]).astype(src)


@pytest.mark.parametrize("src,dst", [(f32, bf16), (f32, f16), (f64, bf16), (f64, f16),
                                     (f64, f32), (bf16, f16), (f16, bf16), (bf16, f32),
                                     (f16, f64), (f32, f64), (bf16, f64)],
                         ids=lambda v: str(v))
def test_cast_between_floats(src, dst):
    """Float -> float rounds once to nearest even (f32 -> bf16 checked against bit
    arithmetic, f64 -> bf16 against round-to-odd); widening is exact."""
    rng = rng_for("f2f", src, dst)
    x = float_specials_and_random(src, rng)
    n = len(x)
    out = poison(n, dst)
    run(K.cast, grid1(n, 64), x, out, n, DT=TK[dst], VIA="method", BLOCK=64)
    if src == f32 and dst == bf16:
        ref = bf16_from_f32_bits(x)
    else:
        ref = round_to(x.astype(f64), dst)
    assert_exact(out, ref, f"{src} -> {dst}", signed_zeros=True)


def test_regression_bfloat16_to_int_cast_saturates():
    """bfloat16 -> int casts used numpy's cast (ml_dtypes' bfloat16 has kind "V", so the
    float rule was skipped): inf gave 0 and -1.5 -> uint8 gave 255 instead of saturating."""
    x = np.array([np.inf, -np.inf, np.nan, -1.5, 300.0, 2.75], bf16)
    for dst, ref in [(u8, [255, 0, 0, 0, 255, 2]), (i8, [127, -128, 0, -1, 127, 2])]:
        out = poison(6, dst)
        run(K.cast, (1,), x, out, 6, DT=TK[dst], VIA="method", BLOCK=8)
        assert_exact(out, np.array(ref, dst), f"bf16 -> {dst}")


def test_regression_float64_and_literals_to_bfloat16_round_once():
    """float64 -> bfloat16 (and Python float literals with bfloat16 tiles) rounded twice,
    through float32: 1 + 2**-8 + 2**-40 became 1.0 instead of 1 + 2**-7."""
    x = np.array([1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 3 * 2**-9 + 1,
                  2.0**-130 + 2.0**-160], f64)  # the last one is subnormal
    out = poison(4, bf16)
    run(K.cast, (1,), x, out, 4, DT=tk.bfloat16, VIA="method", BLOCK=4)
    assert_exact(out, np.array([1 + 2**-7, -(1 + 2**-7), 1 + 2**-7, 2.0**-130], f64))
    lit = 1 + 2**-8 + 2**-40
    one = np.ones(4, bf16)
    out = poison(4, bf16)
    run(K.binop_literal, (1,), one, out, 4, OP="mul", LIT=lit, LEFT=False,
        EXPECT=tk.bfloat16, BLOCK=4)
    assert_exact(out, np.full(4, 1 + 2**-7))


@pytest.mark.parametrize("src", [f32, bf16, i32, u8], ids=ids)
def test_cast_to_bool(src):
    n = 97
    rng = rng_for("2bool", src)
    x = rand(rng, n, src, -2, 2)
    if is_float(src):
        x[:3] = [np.nan, -0.0, 0.0]
    out = run_bool_out(lambda o: run(K.cast, grid1(n, 32), x, o, n, DT=tk.bool_,
                                     VIA="method", BLOCK=32), n)
    assert_exact(out, np.array([bool(v != 0) or (is_float(src) and math.isnan(float(v)))
                                for v in x.astype(f64)]))


def test_cast_from_bool():
    n = 31
    x = np.arange(n) % 3 == 0
    for dst in (f32, bf16, i8, u8, i64):
        out = poison(n, dst)
        run(K.cast, (1,), x, out, n, DT=TK[dst], VIA="method", BLOCK=32)
        assert_exact(out, x.astype(dst), f"bool -> {dst}")


@pytest.mark.parametrize("src,dst", [(f32, i32), (i32, f32), (f32, u32), (f16, i16),
                                     (bf16, u16), (f64, i64), (u16, f16), (i64, f64)],
                         ids=lambda v: str(v))
def test_bitcast(src, dst):
    n = 97
    rng = rng_for("bitcast", src, dst)
    x = rand(rng, n, src, -1000, 1000) if is_float(src) else rand_full_range(rng, n, src)
    out = poison(n, dst)
    run(K.bitcast, grid1(n, 32), x, out, n, DT=TK[dst], BLOCK=32)
    assert_exact(out.view(np.dtype(f"u{np.dtype(dst).itemsize}")),
                 x.view(np.dtype(f"u{np.dtype(src).itemsize}")), f"bitcast {src} -> {dst}")


def test_regression_bitcast_of_scalar_tile():
    """A 0-d tile bitcast used to become shape (1,) in the interpreter, so storing it
    at a scalar offset crashed with a numpy broadcasting error."""
    x = np.array([1.5, -2.25], f32)
    out = poison(1, i32)
    run(K.bitcast_scalar, (1,), x, out, DT=tk.int32)
    assert_exact(out, x[:1].view(i32))


@pytest.mark.parametrize("dst", [i8, u8, bf16, f16, i64], ids=ids)
def test_store_converts_with_cast_rules(dst):
    n = 97
    rng = rng_for("storecast", dst)
    x = rand(rng, n, f32, -300, 300)
    x[:3] = [np.nan, np.inf, -np.inf]
    out = poison(n, dst)
    run(K.store_cast, grid1(n, 32), x, out, n, BLOCK=32)
    ref = round_to(x.astype(f64), dst) if is_float(dst) else ref_float_to_int(x, dst)
    assert_exact(out, ref, f"store f32 -> {dst}")


# =================================================================================================
# Making tiles, broadcasting, shapes
# =================================================================================================


def test_tile_makers():
    N = 13
    outf = poison(4 * N, f32)
    outi = poison(3 * N, i32)
    run(K.makers, (1,), outf, outi, 0.3, N=N)
    assert_exact(outi, np.concatenate([np.arange(-3, N - 3), np.full(N, 7), np.full(N, -2)]))
    third = float(round_to(1 / 3, bf16))
    assert_exact(outf, np.concatenate([np.full(N, np.float32(0.3)), np.full(N, np.float16(0.1)),
                                       np.full(N, third), np.zeros(N)]).astype(f32),
                 signed_zeros=True)


@pytest.mark.parametrize("M,N", [(7, 31), (1, 97), (33, 1), (16, 16)])
@pytest.mark.parametrize("dtype", [f32, f16, bf16], ids=ids)
def test_broadcast_outer(dtype, M, N):
    rng = rng_for("outer", dtype, M, N)
    x = rand(rng, M, dtype)
    y = rand(rng, N, dtype)
    out = poison((M, N), dtype)
    run(K.outer, (1,), x, y, out, M=M, N=N)
    x64, y64 = x.astype(f64)[:, None], y.astype(f64)[None, :]
    r = round_to(x64 * y64, dtype).astype(f64)
    r = round_to(r + x64, dtype).astype(f64)
    ref = round_to(r - y64, dtype)
    assert_exact(out, ref, f"outer {dtype} {M}x{N}")


@pytest.mark.parametrize("A,B,C", [(2, 3, 5), (1, 7, 3), (5, 1, 1), (3, 4, 7)])
@pytest.mark.parametrize("dtype", [f32, i32], ids=ids)
def test_shapes_3d(dtype, A, B, C):
    rng = rng_for("shapes", dtype, A, B, C)
    x = rand(rng, (A, B, C), dtype, -100, 100)
    P = poison((C, A, B), dtype)
    R = poison((C, A * B), dtype)
    E = poison((A, B, C), dtype)
    Bc = poison((3, A * B * C), dtype)
    run(K.shapes3d, (1,), x, P, R, E, Bc, A=A, B=B, C=C)
    assert_exact(P, np.transpose(x, (2, 0, 1)))
    assert_exact(R, x.reshape(A * B, C).T)
    assert_exact(Bc, np.broadcast_to(x.reshape(1, -1), (3, A * B * C)))
    ref = x.astype(f64) - x.astype(f64).sum(axis=1, keepdims=True)
    if is_float(dtype):
        assert_close(E, ref, atol=1e-6 * np.abs(x.astype(f64)).sum(axis=1, keepdims=True))
    else:
        assert_exact(E, wrap(ref.astype(np.int64), dtype))


@pytest.mark.parametrize("M,N,BM,BN", [(97, 31, 16, 8), (7, 257, 4, 64), (1, 1, 2, 3),
                                       (31, 37, 31, 37)])
def test_transpose_tiles_ragged(M, N, BM, BN):
    rng = rng_for("T", M, N)
    x = rand(rng, (M, N), bf16)
    y = poison((N, M), bf16)
    run(K.transpose_tiles, (math.ceil(M / BM), math.ceil(N / BN)), x, y, BM=BM, BN=BN)
    assert_exact(y, x.T)


# =================================================================================================
# Reductions, scans, dot
# =================================================================================================

SUM_TYPE = {i8: i32, i16: i32, u8: u32, i32: i32, i64: i64, u32: u32,
            f16: f16, bf16: bf16, f32: f32, f64: f64}


def _reduce_data(kind, dtype, shape, rng):
    if kind in ("argmax", "argmin", "max", "min"):
        x = rng.integers(-3, 4, size=shape).astype(f64)  # many ties
        if not is_float(dtype) and np.iinfo(dtype).min == 0:
            x = x + 3
        return x.astype(dtype)
    if kind == "prod":
        if is_float(dtype):
            return rand(rng, shape, dtype, 0.7, 1.4)
        return rng.choice([-1, 1, 1, 2, -2, 1, 3], size=shape).astype(dtype) if \
            np.iinfo(dtype).min < 0 else rng.choice([1, 1, 2, 3], size=shape).astype(dtype)
    if is_float(dtype):
        return rand(rng, shape, dtype, -10, 10)
    return rand_full_range(rng, shape, dtype) if np.dtype(dtype).itemsize >= 4 else \
        rand(rng, shape, dtype, -100, 100)


def ref_reduce(kind, x: np.ndarray, axis):
    """Reference by moving the axis last and reducing each 1-D line in Python/float64."""
    flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
    lines = flat.reshape(-1, flat.shape[-1])
    out = []
    for line in lines:
        if is_float(x.dtype):
            vals = [float(v) for v in line.astype(f64)]
        else:
            vals = [int(v) for v in line]
        nan = [i for i, v in enumerate(vals) if isinstance(v, float) and math.isnan(v)]
        if kind == "sum":
            out.append(math.fsum(vals) if is_float(x.dtype) else sum(vals))
        elif kind == "prod":
            out.append(math.prod(vals))
        elif kind in ("max", "min"):
            out.append(float("nan") if nan else (max(vals) if kind == "max" else min(vals)))
        else:  # first index of the extreme; a NaN wins
            if nan:
                out.append(nan[0])
            else:
                best = max(vals) if kind == "argmax" else min(vals)
                out.append(vals.index(best))
    shape = () if axis is None else flat.shape[:-1]
    return np.array(out, dtype=object).reshape(shape)


REDUCE_CASES = [
    # shape, axis, keepdims
    ((7, 31), 0, False), ((7, 31), 1, False), ((7, 31), None, False), ((7, 31), -1, True),
    ((1, 97), 0, True), ((33, 1), 1, False), ((3, 5, 7), 1, False), ((3, 5, 7), None, True),
    ((257,), 0, False),
]


@pytest.mark.parametrize("shape,axis,keep", REDUCE_CASES, ids=lambda v: repr(v))
@pytest.mark.parametrize("dtype", [f32, f16, bf16, i8, i32, u8, i64], ids=ids)
@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod", "argmax", "argmin"])
def test_reductions(kind, dtype, shape, axis, keep):
    rng = rng_for("red", kind, dtype, shape, axis)
    x = _reduce_data(kind, dtype, shape, rng)
    if is_float(dtype) and kind != "prod":
        x.reshape(-1)[rng.integers(0, x.size, size=max(1, x.size // 40))] = np.nan
        if x.ndim == 2 and x.shape[0] > 2:
            x[1, :] = x[1, 0]  # a row that is all one value (ties everywhere)
    ref = ref_reduce(kind, x, axis)
    if keep:
        ref = np.expand_dims(ref, tuple(range(x.ndim)) if axis is None else axis)
    out_shape = ref.shape
    rt = i32 if kind.startswith("arg") else (SUM_TYPE[dtype] if kind in ("sum", "prod")
                                             else dtype)
    out = poison(max(1, ref.size), rt)
    run(K.reduce_nd, (1,), x, out, SHAPE=shape, KIND=kind, AXIS=axis, KEEP=keep,
        EXPECT=TK[rt], OUT_SHAPE=out_shape)
    refv = ref.reshape(-1)
    what = f"{kind} {dtype} {shape} axis={axis}"
    if kind.startswith("arg") or kind in ("max", "min"):
        assert_exact(out, np.array(list(refv), dtype=f64 if is_float(rt) else object).astype(rt),
                     what)
    elif kind == "prod" and is_float(rt):
        count = x.size if axis is None else x.shape[axis]
        assert_close(out, refv.astype(f64), rtol=max(RTOL[rt], count * 2e-7), what=what)
    elif is_float(rt):
        absx = np.abs(np.nan_to_num(x.astype(f64)))
        scale = ref_reduce("sum", absx, axis).reshape(-1).astype(f64)
        assert_close(out, refv.astype(f64), atol=scale * 2e-6, what=what)
    else:
        assert_exact(out, wrap(refv, rt), what)


@pytest.mark.parametrize("kind", ["method_sum", "method_max"])
def test_tile_reduction_methods(kind):
    rng = rng_for(kind)
    x = rand(rng, (5, 7), i32, -50, 50)
    out = poison(5, i32)
    run(K.reduce_nd, (1,), x, out, SHAPE=(5, 7), KIND=kind, AXIS=1, KEEP=False,
        EXPECT=tk.int32, OUT_SHAPE=(5,))
    assert_exact(out, x.sum(1) if kind == "method_sum" else x.max(1))


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_regression_argreduce_over_all_keepdims(kind):
    """``tk.argmax(x, keepdims=True)`` over all axes ignored keepdims (it returned a 0-d
    tile, where ``tk.sum`` and numpy give shape (1, 1))."""
    x = np.array([[3, 1, 9], [9, 0, -4]], i32)
    out = poison(1, i32)
    run(K.reduce_nd, (1,), x, out, SHAPE=(2, 3), KIND=kind, AXIS=None, KEEP=True,
        EXPECT=tk.int32, OUT_SHAPE=(1, 1))
    assert_exact(out, np.array([2 if kind == "argmax" else 5], i32))


@pytest.mark.parametrize("src,dt", [(i32, tk.int64), (f16, tk.float32), (u8, tk.int64)],
                         ids=lambda v: str(v))
def test_sum_with_dtype(src, dt):
    N = 257
    rng = rng_for("sumdt", src)
    x = rand_full_range(rng, N, src) if not is_float(src) else rand(rng, N, src, 100, 1000)
    out = poison(1, np.dtype(dt.np))
    run(K.sum_as, (1,), x, out, N=N, DT=dt)
    if is_float(src):
        assert_close(out, [math.fsum(x.astype(f64))], rtol=1e-6)
    else:
        assert_exact(out, np.array([sum(int(v) for v in x)], np.dtype(dt.np)))


@pytest.mark.parametrize("kind", ["argmax", "argmin", "max", "sum"])
def test_row_reduce_grid(kind):
    rows, N = 13, 97
    rng = rng_for("rowred", kind)
    x = rng.integers(-2, 3, size=(rows, N)).astype(f32)
    x[3, 10] = np.nan
    x[4, :] = 1.0
    x[5, [5, 50]] = np.nan
    rt = i32 if kind.startswith("arg") else f32
    out = poison(rows, rt)
    run(K.row_reduce_grid, (rows,), x, out, N=N, KIND=kind)
    ref = ref_reduce(kind, x, 1)
    assert_exact(out, np.array(list(ref), dtype=f64).astype(rt), kind)


@pytest.mark.parametrize("M,N", [(7, 31), (1, 97), (33, 1)])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [f32, bf16, i8, i32], ids=ids)
def test_cumsum(dtype, axis, M, N):
    rng = rng_for("cumsum", dtype, axis, M, N)
    x = rand(rng, (M, N), dtype, -20, 20) if dtype != i32 else rand_full_range(rng, (M, N), i32)
    rt = i32 if dtype == i8 else dtype
    out = poison((M, N), rt)
    run(K.cumsum2d, (1,), x, out, M=M, N=N, AXIS=axis, EXPECT=TK[rt])
    if is_float(dtype):
        ref = np.cumsum(x.astype(f64), axis=axis)
        scale = np.cumsum(np.abs(x.astype(f64)), axis=axis)
        assert_close(out, ref, atol=scale * 2e-6)
    else:
        assert_exact(out, wrap(np.cumsum(as_int_objects(x), axis=axis), rt))


MATMUL_CASES = [
    # dtype, acc, C dtype, trans_b, M, N, K, BM, BN, BK
    (f32, tk.float32, f32, False, 37, 23, 19, 16, 16, 8),
    (f32, tk.float32, f32, True, 37, 23, 19, 16, 16, 8),
    (f16, tk.float32, f16, False, 33, 65, 47, 32, 32, 16),
    (bf16, tk.float32, f32, True, 31, 17, 97, 16, 8, 32),
    (bf16, tk.float32, bf16, False, 1, 1, 1, 16, 16, 16),
    (i8, tk.int32, i32, False, 29, 13, 41, 16, 8, 16),
    (i8, tk.int32, i32, True, 7, 5, 257, 8, 8, 64),
    (f64, tk.float64, f64, False, 7, 5, 3, 4, 4, 2),
]


@pytest.mark.parametrize("dt,acc,ct,trans,M,N,Kd,BM,BN,BK", MATMUL_CASES,
                         ids=lambda v: str(v))
def test_matmul_tiles(dt, acc, ct, trans, M, N, Kd, BM, BN, BK):
    rng = rng_for("mm", dt, trans, M, N, Kd)
    a = rand(rng, (M, Kd), dt, -3, 3) if is_float(dt) else rand_full_range(rng, (M, Kd), dt)
    b = rand(rng, (Kd, N), dt, -3, 3) if is_float(dt) else rand_full_range(rng, (Kd, N), dt)
    bt = np.ascontiguousarray(b.T) if trans else b
    c = poison((M, N), ct)
    run(K.matmul, (math.ceil(M / BM), math.ceil(N / BN)), a, bt, c, Kd, BM=BM, BN=BN, BK=BK,
        ACC=acc, TRANS_B=trans)
    if is_float(dt):
        ref = a.astype(f64) @ b.astype(f64)
        scale = np.abs(a.astype(f64)) @ np.abs(b.astype(f64))
        tol = 1e-12 if dt == f64 else 2e-6
        assert_close(c, ref, rtol=RTOL[np.dtype(ct)] if ct != f32 else tol,
                     atol=scale * tol, what="matmul")
    else:
        assert_exact(c, wrap(as_int_objects(a).dot(as_int_objects(b)), i32))


DOT_CASES = [
    # a dtype, b dtype, out_dtype, result type
    (f16, f16, None, f32), (bf16, bf16, None, f32), (f32, f32, None, f32),
    (bf16, bf16, tk.float16, f16), (i8, i8, None, i32), (i8, i8, tk.int64, i64),
    (i8, u8, None, i32), (f16, bf16, None, f32), (f64, f64, None, f64),
]


@pytest.mark.parametrize("at,bt,out,rt", DOT_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("M,N,Kd", [(7, 5, 3), (1, 31, 97), (17, 1, 1)])
def test_dot_once(at, bt, out, rt, M, N, Kd):
    rng = rng_for("dot", at, bt, out, M, N, Kd)
    a = rand(rng, (M, Kd), at, -4, 4) if is_float(at) else rand_full_range(rng, (M, Kd), at)
    b = rand(rng, (Kd, N), bt, -4, 4) if is_float(bt) else rand_full_range(rng, (Kd, N), bt)
    c = poison((M, N), rt)
    run(K.dot_once, (1,), a, b, c, M=M, N=N, K=Kd, OUT=out, EXPECT=TK[rt])
    if is_float(rt):
        ref = a.astype(f64) @ b.astype(f64)
        scale = np.abs(a.astype(f64)) @ np.abs(b.astype(f64))
        tol = 1e-12 if rt == f64 else 2e-6
        assert_close(c, ref, rtol=RTOL[rt] if rt in (f16, bf16) else tol, atol=scale * tol)
    else:
        assert_exact(c, wrap(as_int_objects(a).dot(as_int_objects(b)), rt))


# =================================================================================================
# Memory: tile views, strided views, masks, atomics
# =================================================================================================


def padded(x: np.ndarray, tile: tuple[int, ...], value) -> np.ndarray:
    """``x`` padded with ``value`` up to whole tiles."""
    shape = tuple(math.ceil(n / t) * t for n, t in zip(x.shape, tile, strict=True))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


TILE_PAD_CASES = [(f32, float("nan")), (f32, -1.5), (i8, -1), (u8, 7), (bf16, 0.5),
                  (i32, 0), (f16, float("inf")), (i64, 2**40 + 1)]


@pytest.mark.parametrize("dtype,P", TILE_PAD_CASES, ids=lambda v: repr(v))
@pytest.mark.parametrize("n,B", [(1, 16), (7, 4), (97, 31), (257, 100)])
def test_tile_view_1d_padding(dtype, P, n, B):
    rng = rng_for("pad1", dtype, n, B)
    x = rand(rng, n, dtype, -100, 100)
    g = math.ceil(n / B)
    out = poison(g * B, dtype)
    run(K.tile_pad_1d, (g,), x, out, B=B, P=P)
    assert_exact(out, padded(x, (B,), P), f"pad {dtype} {P}")


def test_regression_tile_view_padding_is_exact_for_int64():
    """The padding of a tile-view load went through float64, so int64 padding above
    2**53 was rounded (2**53 + 1 read back as 2**53)."""
    x = np.arange(3, dtype=i64)
    out = poison(8, i64)
    run(K.tile_pad_1d, (1,), x, out, B=8, P=2**53 + 1)
    assert_exact(out, np.array([0, 1, 2] + [2**53 + 1] * 5, i64))


@pytest.mark.parametrize("dtype,P", [(u8, -1), (i8, 200), (i32, float("nan")), (i32, 0.5)],
                         ids=lambda v: repr(v))
def test_regression_tile_view_padding_that_does_not_fit_is_an_error(dtype, P):
    """Like every literal, a tile-view padding that does not fit the tensor's type is a
    trace error (it used to wrap or read garbage: -1 padding a uint8 tensor read 255)."""
    with pytest.raises(tk.TraceError, match="does not fit|not an integer"):
        run(K.tile_pad_1d, (1,), np.zeros(3, dtype), poison(8, dtype), B=8, P=P)


@pytest.mark.parametrize("M,N,BM,BN", [(7, 31, 4, 8), (1, 1, 3, 5), (97, 13, 32, 16),
                                       (16, 16, 16, 16)])
@pytest.mark.parametrize("dtype,P", [(f32, float("nan")), (i8, -3), (bf16, 2.0)],
                         ids=lambda v: repr(v))
def test_tile_view_2d_padding(dtype, P, M, N, BM, BN):
    rng = rng_for("pad2", dtype, M, N)
    x = rand(rng, (M, N), dtype, -100, 100)
    g = (math.ceil(M / BM), math.ceil(N / BN))
    out = poison((g[0] * BM, g[1] * BN), dtype)
    run(K.tile_pad_2d, g, x, out, BM=BM, BN=BN, P=P)
    assert_exact(out, padded(x, (BM, BN), P))


@pytest.mark.parametrize("shape,tile", [((5, 7, 3), (2, 4, 2)), ((1, 1, 1), (2, 2, 2)),
                                        ((3, 17, 9), (3, 5, 4))])
def test_tile_view_3d_padding(shape, tile):
    rng = rng_for("pad3", shape)
    x = rand(rng, shape, f16)
    g = tuple(math.ceil(n / t) for n, t in zip(shape, tile, strict=True))
    out = poison(tuple(a * b for a, b in zip(g, tile, strict=True)), f16)
    run(K.tile_pad_3d, g, x, out, B0=tile[0], B1=tile[1], B2=tile[2], P=-7.0)
    assert_exact(out, padded(x, tile, -7.0))


def _views_2d(M, N):
    """(name, make input view from base, base shape): strided, transposed, negative and
    zero strides, Fortran order."""
    return [
        ("contiguous", lambda b: b, (M, N)),
        ("step_slices", lambda b: b[::2, 1::3], (2 * M, 3 * N + 1)),
        ("transposed", lambda b: b.T, (N, M)),
        ("negative", lambda b: b[::-1, ::-2], (M, 2 * N)),
        ("fortran", lambda b: np.asfortranarray(b), (M, N)),
        ("column_slice", lambda b: b[:, 2:-3], (M, N + 5)),
    ]


OUT_VIEWS = [
    ("contiguous", lambda b: b, lambda M, N: (M, N)),
    ("step_slices", lambda b: b[1::2, ::-3], lambda M, N: (2 * M + 1, 3 * N)),
    ("transposed", lambda b: b.T, lambda M, N: (N, M)),
    ("reversed_rows", lambda b: b[::-1, :], lambda M, N: (M, N)),
]


@pytest.mark.parametrize("kernel", ["strided_copy", "tile_copy_2d"])
@pytest.mark.parametrize("out_view", OUT_VIEWS, ids=lambda v: v[0])
@pytest.mark.parametrize("in_view", _views_2d(0, 0), ids=lambda v: v[0])
def test_strided_views_in_and_out(in_view, out_view, kernel):
    """Inputs and outputs that are numpy views with any strides (negative too): the
    kernel sees the view's shape and strides; elements outside an output view are
    untouched."""
    M, N = 13, 11
    name, make, _ = in_view
    base_shape = dict((v[0], v[2]) for v in _views_2d(M, N))[name]
    rng = rng_for("views", name, out_view[0], kernel)
    base = rand(rng, base_shape, f32, -100, 100)
    x = make(base)
    assert x.shape == (M, N), (name, x.shape)
    out_base = rng.uniform(-1e6, -1e5, size=out_view[2](M, N)).astype(f32)
    before = out_base.copy()
    y = out_view[1](out_base)
    assert y.shape == (M, N)
    if kernel == "strided_copy":
        run(K.strided_copy, (math.ceil(M / 4), math.ceil(N / 8)), x, y, BM=4, BN=8)
        expect = x + 1
    else:
        run(K.tile_copy_2d, (math.ceil(M / 4), math.ceil(N / 8)), x, y, BM=4, BN=8)
        expect = x
    assert_exact(y, expect)
    check_untouched(out_base, before, view_mask(out_base, out_view[1]))


def test_broadcast_input_with_zero_strides():
    """A read-only ``np.broadcast_to`` view (stride 0) as an input."""
    M, N = 7, 9
    row = np.arange(N, dtype=f32)
    x = np.broadcast_to(row, (M, N))
    y = poison((M, N), f32)
    run(K.strided_copy, (2, 2), x, y, BM=4, BN=8)
    assert_exact(y, np.broadcast_to(row + 1, (M, N)))


@pytest.mark.parametrize("make_in,make_out,out_base", [
    (lambda b: b[::-1, :, ::2].transpose(2, 0, 1), lambda b: b[:, ::-1, 1::2], (7, 6, 10)),
    (lambda b: b.transpose(1, 2, 0), lambda b: b.transpose(2, 0, 1), (14, 6, 5)),
], ids=["negative_and_permuted", "permuted"])
def test_strided_views_3d(make_in, make_out, out_base):
    rng = rng_for("v3d", out_base)
    x = make_in(rand(rng, (6, 5, 14), f32))
    base = np.full(out_base, -5.0, f32)
    y = make_out(base)
    assert y.shape == x.shape, (y.shape, x.shape)
    before = base.copy()
    tile = (3, 2, 4)
    g = tuple(math.ceil(n / t) for n, t in zip(x.shape, tile, strict=True))
    run(K.tile_copy_3d, g, x, y, B0=3, B1=2, B2=4)
    assert_exact(y, x * 2)
    check_untouched(base, before, view_mask(base, make_out))


@pytest.mark.parametrize("make", [lambda b: b, lambda b: b[::-1, 1::2], lambda b: b.T,
                                  lambda b: b[2, ::-3]],
                         ids=["contiguous", "neg_step", "transposed", "1d_neg"])
def test_tensor_shape_and_strides(make):
    base = np.zeros((5, 12), dtype=f16)
    x = make(base)
    out = poison(3 * x.ndim, i64)
    run(K.tensor_meta, (1,), x, out, EXPECT=tk.float16)
    strides = [s // x.itemsize for s in x.strides]
    assert_exact(out, np.array(list(x.shape) + strides + list(x.shape), i64))


def test_regression_broadcast_view_longer_than_int32():
    """A stride-0 view with more than 2**31 elements has a tiny span, so its index type
    was int32 and reading ``X.shape[0]`` crashed with an OverflowError."""
    for x in (np.broadcast_to(np.float32(1), (2**31 + 5,)),
              np.broadcast_to(np.zeros((3, 1), f16), (3, 2**32 + 1))):
        out = poison(3, i64)
        run(K.tensor_extent, (1,), x, out)
        assert_exact(out, np.array([x.shape[0], x.shape[-1], 0 if x.ndim == 1 else 1], i64))


@pytest.mark.parametrize("dtype,other", [(f32, None), (f32, float("nan")), (i32, -7),
                                         (bf16, 2.5), (i8, None), (u8, 9)],
                         ids=lambda v: repr(v))
@pytest.mark.parametrize("idx_type", [i32, i64], ids=ids)
def test_masked_gather_with_other(dtype, other, idx_type):
    """Masked-off lanes (negative or too large indices) read ``other`` (0 by default)
    and touch no memory (the interpreter would report an out-of-bounds access)."""
    n, size = 257, 31
    rng = rng_for("gather", dtype, other, idx_type)
    x = rand(rng, size, dtype, -100, 100)
    idx = rng.integers(-40, size + 40, size=n).astype(idx_type)
    idx[:3] = [-(2**31) + 1, 2**31 - 1, size]
    out = poison(n, dtype)
    run(K.gather, grid1(n, 64), x, idx, out, n, OTHER=other, BLOCK=64)
    valid = (idx >= 0) & (idx < size)
    fill = 0 if other is None else other
    ref = np.where(valid, x[np.clip(idx, 0, size - 1)].astype(f64), fill)
    assert_exact(out, ref.astype(dtype), f"gather {dtype} other={other}")


@pytest.mark.parametrize("n", [0, 5, 16])
def test_load_other_scalar_and_tile(n):
    B = 16
    x = np.arange(1, 17, dtype=f32)
    out = poison(2 * B, f32)
    run(K.load_other_values, (1,), x, out, n, 2.5, BLOCK=B)
    lanes = np.arange(B)
    assert_exact(out[:B], np.where(lanes < n, x, 2.5).astype(f32))
    assert_exact(out[B:], np.where(lanes < n, x, -lanes.astype(f64)).astype(f32),
                 signed_zeros=True)


def test_masked_scatter():
    n = 257
    rng = rng_for("scatter")
    x = rand(rng, n, f32)
    idx = rng.permutation(n).astype(i32)
    out = poison(n, f32)
    run(K.scatter, grid1(n, 64), x, idx, out, n, BLOCK=64)
    ref = np.full(n, np.nan)
    keep = x > 0
    ref[idx[keep]] = x[keep]
    assert_exact(out, ref)


@pytest.mark.parametrize("make", [lambda b: b, lambda b: b[::-2, 1::2].T],
                         ids=["contiguous", "strided"])
def test_masked_gather_2d(make):
    R, C = 13, 17
    rng = rng_for("g2d")
    x = make(rand(rng, (20, 22), f32))
    out = poison((R, C), f32)
    run(K.gather_2d, (1,), x, out, R=R, C=C, OTHER=-1.0)
    ref = np.full((R, C), -1.0)
    for r in range(R):
        for c in range(C):
            if r < x.shape[0] and c < x.shape[1] and c <= r:
                ref[r, c] = x[r, c]
    assert_exact(out, ref.astype(f32))


def _check_atomic_history(kind, init, final, idx, vals, old):
    """Order-independent checks of the values atomics returned (any interleaving is
    allowed, as on a GPU): for add, the old values at one address form a chain from
    the initial value to the final one; for max/min each old value is the initial one
    or another operand, and someone saw the initial value."""
    for addr in np.unique(idx):
        sel = idx == addr
        o = [int(v) if not is_float(old.dtype) else float(v) for v in old[sel]]
        v = [int(u) if not is_float(vals.dtype) else float(u) for u in vals[sel]]
        i0 = init[addr].item()
        if kind == "add":
            # positive operands: the old values increase along the chain
            chain = sorted(zip(o, v, strict=True))
            assert chain[0][0] == i0, (addr, chain[0], i0)
            for (o1, v1), (o2, _) in zip(chain, chain[1:], strict=False):
                assert o2 == o1 + v1, (addr, o1, v1, o2)
            assert final[addr].item() == chain[-1][0] + chain[-1][1]
        else:
            allowed = set(v) | {i0}
            assert set(o) <= allowed, (addr, set(o) - allowed)
            assert i0 in o, (addr, "nobody saw the initial value")
            better = max if kind == "max" else min
            assert all(better(a, final[addr].item()) == final[addr].item() for a in o)


@pytest.mark.parametrize("dtype", [i32, f32, i64, u32, f64, f16], ids=ids)
@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_atomics_with_duplicates(kind, dtype):
    n, size = 257, 7
    if dtype == f16 and kind != "add":  # the hardware has float16 atomic add only
        with pytest.raises(tk.TraceError, match="not supported"):
            run(K.atomics, (1,), np.zeros(size, f16), np.zeros(n, i32), np.zeros(n, f16),
                poison(n, f16), n, KIND=kind, BLOCK=32)
        return
    rng = rng_for("atomic", kind, dtype)
    idx = rng.integers(0, size, size=n).astype(i32)
    vals = rng.integers(1, 4 if dtype == f16 else 100, size=n).astype(dtype)  # exact sums
    init = rng.integers(0, 50, size=size).astype(dtype)
    t = init.copy()
    old = poison(n, dtype)
    run(K.atomics, grid1(n, 32), t, idx, vals, old, n, KIND=kind, BLOCK=32)
    ref = init.astype(object).copy()
    for i, v in zip(idx, vals, strict=True):
        a, b = ref[i], v.item()
        ref[i] = a + b if kind == "add" else (max(a, b) if kind == "max" else min(a, b))
    assert_exact(t, ref.astype(dtype), f"atomic {kind} final")
    _check_atomic_history(kind, init, t, idx, vals, old)


def test_atomic_masked_lanes_do_nothing():
    n, size = 100, 5
    idx = np.arange(n, dtype=i32) % size
    vals = np.ones(n, i32)
    t = np.zeros(size, i32)
    old = poison(128, i32)
    run(K.atomics, (4,), t, idx, vals, old, n, KIND="add", BLOCK=32)
    assert_exact(t, np.full(size, n // size, i32))
    assert_exact(old[n:], poison(128 - n, i32))  # masked lanes stored nothing


def test_scalar_atomic_tickets():
    grid = 37
    counter = np.zeros(1, i32)
    tickets = poison(grid, i32)
    run(K.ticket, (grid,), counter, tickets)
    assert counter[0] == grid
    assert sorted(tickets.tolist()) == list(range(grid))


# =================================================================================================
# Runtime loops
# =================================================================================================


@pytest.mark.parametrize("N", [0, 1, 31, 257])
def test_loop_inplace_sum_and_helper_loop(N):
    rows = 5
    rng = rng_for("rowsums", N)
    base = rand(rng, (rows, N + 6), f32)
    x = base[:, 3 : 3 + N]  # a row stride larger than N
    out = poison(2 * rows, f32)
    run(K.row_sums, (rows,), x, out, N, BLOCK=16)
    ref = x.astype(f64).sum(axis=1)
    scale = np.abs(x.astype(f64)).sum(axis=1)
    assert_close(out[0::2], ref, atol=scale * 1e-6 + 1e-30)
    assert_close(out[1::2], ref, atol=scale * 1e-6 + 1e-30)


@pytest.mark.parametrize("deg", [0, 1, 5, 9])
def test_loop_rebinding_horner_negative_step(deg):
    n = 97
    rng = rng_for("horner", deg)
    x = rand(rng, n, f32, -1.5, 1.5)
    coef = rand(rng, max(deg, 1), f32, -2, 2)
    out = poison(n, f32)
    run(K.horner, grid1(n, 32), x, coef, out, n, deg, BLOCK=32)
    x64 = x.astype(f64)
    ref = np.zeros(n)
    scale = np.zeros(n)
    for k in range(deg - 1, -1, -1):
        ref = ref * x64 + float(coef[k])
        scale = scale * np.abs(x64) + abs(float(coef[k]))
    assert_close(out, ref, atol=scale * 1e-6)


@pytest.mark.parametrize("N,B", [(1, 16), (31, 16), (257, 64), (4097, 1000)])
def test_loop_several_carried_online_softmax(N, B):
    rows = 3
    rng = rng_for("osm", N)
    x = (rng.standard_normal((rows, N)) * 4).astype(f32)
    y = poison((rows, N), f32)
    run(K.online_softmax, (rows,), x, y, N, BLOCK=B)
    e = np.exp(x.astype(f64) - x.astype(f64).max(1, keepdims=True))
    assert_close(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("N", [1, 31, 97, 257])
def test_loop_carried_scalars(N):
    rows = 6
    rng = rng_for("cnt", N)
    x = rng.integers(-5, 6, size=(rows, N)).astype(f32)  # ties across chunks
    count = poison(rows, i32)
    best = poison(rows, i32)
    run(K.count_and_argmax, (rows,), x, count, best, N, 1.5, BLOCK=16)
    assert_exact(count, (x > 1.5).sum(1).astype(i32))
    assert_exact(best, x.argmax(1).astype(i32))


@pytest.mark.parametrize("n", [0, 1, 13])
def test_nested_loops_with_dependent_bounds(n):
    rng = rng_for("nested", n)
    x = rng.integers(-9, 10, size=max(n, 1)).astype(f32)
    out = poison(n + 1, f32)
    run(K.nested_prefix, (1,), x, out, n, BLOCK=1)
    pre = np.cumsum(x[:n].astype(f64))
    assert_exact(out, np.concatenate([pre, [pre.sum()]]).astype(f32))


@pytest.mark.parametrize("R,C,BR,BC", [(7, 31, 4, 8), (1, 1, 2, 2), (13, 17, 13, 17),
                                       (0, 5, 4, 4)])
def test_nested_loops_carrying_tiles(R, C, BR, BC):
    rng = rng_for("ntiles", R, C)
    x = rng.integers(-9, 10, size=(R, C)).astype(f32)
    out = poison(BC, f32)
    run(K.nested_tiles, (1,), x, out, R, C, BR=BR, BC=BC)
    cols = math.ceil(C / BC) * BC
    xp = np.zeros((R, cols))
    xp[:, :C] = x
    assert_exact(out, xp.reshape(R, cols // BC, BC).sum(axis=(0, 1)).astype(f32))


TRIPS = [(0, 10, 1), (10, 0, -1), (5, 5, 1), (7, 3, 1), (3, 7, -1), (3, 20, 4), (20, 3, -4),
         (-5, 5, 3), (0, 1, 100), (2**31 - 3, 2**31 - 1, 1)]


@pytest.mark.parametrize("lo,hi,step", TRIPS, ids=lambda v: str(v))
def test_loop_runtime_bounds_and_zero_trips(lo, hi, step):
    ivs = poison(64, i32)
    count = poison(1, i32)
    last = poison(1, i32)
    run(K.trip_record, (1,), ivs, count, last, lo, hi, step, CAP=64)
    ref = list(range(lo, hi, step))
    assert count[0] == len(ref)
    assert_exact(ivs[: len(ref)], np.array(ref, i32))
    assert np.all(ivs[len(ref):] == poison(1, i32)[0])
    assert last[0] == (ref[-1] if ref else -999)


@given(lo=st.integers(-40, 40), hi=st.integers(-40, 40),
       step=st.integers(-7, 7).filter(lambda s: s != 0))
@settings(max_examples=40)
def test_loop_bounds_hypothesis(lo, hi, step):
    ivs = poison(64, i32)
    count = poison(1, i32)
    last = poison(1, i32)
    run(K.trip_record, (1,), ivs, count, last, lo, hi, step, CAP=64)
    ref = list(range(lo, hi, step))
    assert count[0] == len(ref)
    assert_exact(ivs[: len(ref)], np.array(ref, i32))
    assert last[0] == (ref[-1] if ref else -999)


@pytest.mark.parametrize("n", [0, 1, 2, 10, 90])
def test_loop_tuple_swap_fibonacci(n):
    out = poison(92, i64)
    run(K.fibonacci, (1,), out, n)
    fib = [0, 1]
    while len(fib) < 92:
        fib.append(fib[-1] + fib[-2])
    assert_exact(out[: n + 1], np.array(fib[: n + 1], i64))
    assert np.all(out[n + 1 :] == poison(1, i64)[0])


@pytest.mark.parametrize("n", [0, 1, 7])
def test_loop_carrying_list_dict_and_helper_updates(n):
    B = 8
    rng = rng_for("containers", n)
    x = rng.integers(-9, 10, size=(max(n, 1), B)).astype(f32)
    out = poison(3 * B + 1, f32)
    run(K.carried_containers, (1,), x, out, n, BLOCK=B)
    xs = x[:n].astype(f64)
    ref = np.concatenate([xs.sum(0) if n else np.zeros(B),
                          np.maximum(0, xs.max(0)) if n else np.zeros(B),
                          (xs > 0).sum(0) if n else np.zeros(B), [n]])
    assert_exact(out, ref.astype(f32))


@pytest.mark.parametrize("n,flag", [(5, 1), (5, 0), (0, 1), (1, 7)])
def test_loop_inside_when_and_when_inside_nested_loops(n, flag):
    rng = rng_for("liw", n, flag)
    x = rng.integers(-9, 10, size=max(n, 1)).astype(f32)
    out = poison(2, f32)
    run(K.loop_in_when, (1,), x, out, n, flag)
    total = x[:n].sum() if flag else 0.0
    diag = (x[:n].astype(f64) * np.arange(1, n + 1)).sum()
    assert_exact(out, np.array([total, diag], f32))


@pytest.mark.parametrize("dtype", [i32, f16], ids=ids)
@pytest.mark.parametrize("n", [1, 3, 5])
def test_loop_carried_tile_index(n, dtype):
    B = 4
    x = (np.arange(n * B) % 7).astype(dtype)
    out = poison(B, dtype)
    run(K.carried_index, (1,), x, out, n, B=B)
    acc = np.zeros(B, dtype=np.int64)
    for k in range(n - 1, -1, -1):
        acc = acc * 2 + x[k * B : (k + 1) * B].astype(np.int64)
    assert_exact(out, acc.astype(dtype))


@pytest.mark.parametrize("thr", [-1e9, 20.0, 1e9])
def test_when_as_if_else(thr):
    n, B = 23, 5
    rng = rng_for("ifelse", thr)
    x = rng.integers(-3, 10, size=n).astype(f32)
    out = poison(n, f32)
    run(K.when_complementary, (math.ceil(n / B),), x, out, n, thr, BLOCK=B)
    ref = x.astype(f64).copy()
    for s0 in range(0, n, B):
        blk = slice(s0, s0 + B)
        tot = ref[blk].sum()
        ref[blk] = ref[blk] - tot if tot > thr else ref[blk] + tot
    assert_exact(out, ref.astype(f32))


@pytest.mark.parametrize("A,B", [(2, 3), (1, 7), (5, 1)])
def test_index_forms_and_negative_axes(A, B):
    rng = rng_for("idx", A, B)
    x = rng.integers(-9, 10, size=(A, B)).astype(f32)
    out = poison((A, B), f32)
    run(K.index_forms, (1,), x, out, A=A, B=B)
    assert_exact(out, x * 4 + np.arange(B)[None, :] + x + x)


def test_misc_values():
    N = 7
    xi = np.array([-7, -2, 0, 3, 9, 5, 6], i32)
    xf = np.array([-0.0, 1.5, -2, 0.25, 3, -0.5, 1], f32)
    oi = poison(N + 1, i32)
    of = poison(2 * N + 1, f32)
    ob = run_bool_out(lambda o: run(K.misc_values, (1,), xi, xf, oi, of, o, N=N), N)
    s = int(xi.sum())
    assert_exact(oi, np.array([2 * s] + [s] * N, i32))
    assert_exact(of[:N], (xi.astype(f64) ** 2).astype(f32))
    assert_exact(of[N : 2 * N], np.abs(xf), signed_zeros=True)  # abs(-0.0) is +0.0
    assert_exact(ob, np.where(xi > 0, xi > 5, xi < -5))
    dot = float(round_to(0.5 + float((xf.astype(f64) ** 2).sum()), f16))
    assert_exact(of[2 * N :], np.array([dot], f32))


def test_atomic_add_bfloat16():
    n = 9
    idx = np.array([0, 1, 0, 2, 2, 2, 0, 1, 0], i32)
    vals = np.array([1, 2, 3, 4, 0.5, 0.25, 8, 16, 0.125], bf16)
    t = np.zeros(3, bf16)
    run(K.atomic_bf16, (1,), t, idx, vals, n, BLOCK=16)
    ref = np.zeros(3)
    np.add.at(ref, idx, vals.astype(f64))
    assert_exact(t, ref.astype(bf16))


@pytest.mark.parametrize("at", [-1, 5, -100])
def test_tile_view_entirely_outside(at):
    x = np.arange(4, dtype=i32)
    out = poison(4, i32)
    run(K.tile_outside, (1,), x, out, B=4, AT=at)
    assert_exact(out, np.full(4, 7, i32))
    assert_exact(x, np.arange(4, dtype=i32))


def test_atomics_masked_lanes_with_invalid_offsets():
    t = np.array([5, -3, 0], i32)
    idx = np.array([0, -5, 2, 99, 2, 3, -(2**31)], i32)
    v = np.array([1, 100, 4, 100, 2, 100, 100], i32)
    old = poison(8, i32)
    run(K.atomic_guarded, (1,), t, idx, v, old, BLOCK=7)
    assert_exact(t, np.array([5, -3, 4], i32))
    ok = np.array([True, False, True, False, True, False, False])
    assert np.all(old[:7][~ok] == poison(1, i32)[0])
    assert old[0] == 5
    # two max ops at address 2 (values 4 and 2, initial 0), in either order
    assert (int(old[2]), int(old[4])) in ((0, 4), (2, 0)), old


@pytest.mark.parametrize("lo,hi,step", [(2**40 + 3, 2**40 - 3, -2), (2**31 - 2, 2**31 + 2, 1),
                                        (-(2**33), -(2**33) + 7, 3), (2**40, 2**40, 1)],
                         ids=lambda v: str(v))
def test_loop_with_int64_bounds(lo, hi, step):
    ivs = poison(8, i64)
    out = poison(2, i64)
    run(K.trip_record64, (1,), ivs, out, lo, hi, step, CAP=8)
    ref = list(range(lo, hi, step))
    assert out[0] == len(ref) and out[1] == (ref[-1] if ref else -999)
    assert_exact(ivs[: len(ref)], np.array(ref, i64))


def test_empty_grid_runs_nothing():
    out = np.full(4, -1.0, f32)
    z = np.zeros(4, f32)
    for grid in (0, (3, 0), (0, 2, 2)):
        run(K.axpy, grid, z, z, out, 1.0, 4, BLOCK=4)
    assert_exact(out, np.full(4, -1.0, f32))


def test_zero_size_tensors():
    x = np.zeros(0, f32)
    out = np.zeros(0, f32)
    run(K.axpy, (2,), x, x, out, 1.0, 0, BLOCK=4)  # every access masked off


@pytest.mark.parametrize("L,B", [(1, 8), (97, 16), (64, 16)])
def test_loop_over_tile_views(L, B):
    rng = rng_for("ltv", L)
    x = rng.integers(-9, 10, size=L).astype(f32)
    out = poison(B, f32)
    nb = math.ceil(L / B)
    run(K.loop_tile_views, (1,), x, out, nb, BLOCK=B)
    xp = np.zeros(nb * B)
    xp[:L] = x
    assert_exact(out, xp.reshape(nb, B).sum(0).astype(f32))


# =================================================================================================
# tk.when, static_range, constexpr if, helpers, grids, scalars
# =================================================================================================


@pytest.mark.parametrize("n,thr", [(97, 0.0), (257, 5.0), (1, -100.0), (31, 1e9)])
def test_when_taken_and_not_taken(n, thr):
    B = 16
    rng = rng_for("when", n, thr)
    x = rng.integers(-6, 7, size=n).astype(f32)  # exact block sums
    grid = math.ceil(n / B)
    out = poison(n, f32)
    flags = poison(grid + 1, i32)
    run(K.when_blocks, (grid,), x, out, flags, n, thr, BLOCK=B)
    ref = x.astype(f64).copy()
    ref_flags = np.zeros(grid + 1, dtype=np.int64)
    for b in range(grid):
        blk = slice(b * B, min(n, (b + 1) * B))
        s = ref[blk].sum()
        f = 0
        if s > thr:
            ref[blk] *= 2
            f += 1
        if b % 3 == 0 and s < 0:
            ref[blk] += 100
            f += 10
        ref_flags[b] = f
    assert_exact(out, ref.astype(f32))
    assert_exact(flags[:grid], ref_flags[:grid].astype(i32))
    assert flags[grid] == (1 if grid > 1 else poison(1, i32)[0])


@pytest.mark.parametrize("n", [0, 1, 6, 13])
def test_when_nested_in_loop(n):
    rng = rng_for("wil", n)
    x = rng.integers(-5, 6, size=max(n, 1)).astype(f32)
    out = poison(3, f32)
    run(K.when_in_loop, (1,), x, out, n)
    even = x[:n][0::2].sum()
    cnt = sum(1 for i in range(n) if i % 3 == 0 and x[i] > 0)
    assert_exact(out, np.array([even, cnt, 1.0 if n > 5 else 0.0], f32))


def test_when_not_taken_anywhere():
    """Every condition false: tiles keep their values, effects do not happen."""
    n = 64
    x = np.full(n, 2.0, f32)
    out = poison(n, f32)
    flags = poison(2, i32)
    run(K.when_blocks, (1,), x, out, flags, n, 1e9, BLOCK=64)
    assert_exact(out, x)
    assert_exact(flags, np.array([0, poison(1, i32)[0]], i32))


@pytest.mark.parametrize("n", [1, 97])
def test_static_range_and_constexpr_loop(n):
    Kk, W = 3, (2, 0.5, 3)
    rng = rng_for("unroll", n)
    x = rng.integers(-9, 10, size=n * Kk).astype(f32)
    out = poison(n, f32)
    run(K.unrolled, grid1(n, 32), x, out, n, K=Kk, WEIGHTS=W, BLOCK=32)
    acc = sum(x[k::Kk].astype(f64) * (k + 1) for k in range(Kk))
    assert_exact(out, (acc * 2 * 0.5 * 3).astype(f32))


ACTS = {
    "relu": lambda v: np.maximum(v, 0),
    "leaky": lambda v: np.where(v > 0, v, v * 0.1),
    "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3))),
    "silu": lambda v: v / (1 + np.exp(-v)),
    "none": lambda v: v,
}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_constexpr_if_activation(act):
    n = 257
    rng = rng_for("act", act)
    x = rand(rng, n, bf16, -6, 6)
    out = poison(n, f32)
    run(K.activation, grid1(n, 64), x, out, n, ACT=act, ALPHA=0.1, BLOCK=64)
    assert_close(out, ACTS[act](x.astype(f64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grid", [(5,), 6, (3, 4), (2, 3, 4), (1, 1, 7), [2, 2]],
                         ids=lambda v: repr(v))
def test_grids_program_id_and_num_programs(grid):
    g = (grid,) if isinstance(grid, int) else tuple(grid)
    nx, ny, nz = g + (1,) * (3 - len(g))
    out = poison((nz, ny, nx, 7), i32)
    run(K.grid_ids, grid, out)
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    ref = np.stack([x, y, z, np.full_like(x, nx), np.full_like(x, ny), np.full_like(x, nz),
                    (z * ny + y) * nx + x], axis=-1)
    assert_exact(out, ref.astype(i32))


@pytest.mark.parametrize("n", [1, 97, 1000])
def test_grid_as_callable_of_constexprs(n):
    rng = rng_for("axpy", n)
    x = rand(rng, n, f32)
    y = rand(rng, n, f32)
    out = poison(n, f32)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (tk.cdiv(meta["n"], meta["BLOCK"]),)

    run(K.axpy, grid, x, y, out, 2.5, n, BLOCK=64)
    assert seen and seen[0]["BLOCK"] == 64
    ref = round_to(round_to(2.5 * x.astype(f64), f32).astype(f64) + y, f32)
    assert_exact(out, ref)


@pytest.mark.parametrize("d,expect", [(7, tk.int32), (2**35, tk.int64), (-(2**31), tk.int32),
                                      (2.5, tk.float32), (True, tk.bool_)],
                         ids=lambda v: repr(v))
def test_scalar_arguments(d, expect):
    """Scalars annotated with tilekit dtypes take that type (kernels.py uses
    ``from __future__ import annotations``: the annotations are strings); unannotated
    ints are int32 or int64 by value, floats float32, bools bool."""
    outi = poison(4, i64)
    outf = poison(6, f64)
    a, h = 2**40 + 3, 2**33 + 1
    run(K.scalars, (1,), outi, outf, a, 0.1, 0.1, d, 200, 0.1, 1 / 3, h, EXPECT_D=expect)
    assert_exact(outi, np.array([a, 3 * a - 1, (200 + 200) % 256, h], i64))
    c16 = float(np.float16(0.1))
    ref = [float(np.float32(0.1)), c16, float(d), 0.1, float(round_to(1 / 3, bf16)),
           float(round_to(c16 * 3, f16))]
    assert_exact(outf, np.array(ref))


def test_regression_dtype_annotations_as_strings():
    """With ``from __future__ import annotations`` a scalar annotated ``tk.float16`` was
    silently passed as float32 (the string annotation was not recognized)."""
    kinds = {p.name: p.dtype for p in K.scalars.params}
    assert kinds["c"] is tk.float16 and kinds["e"] is tk.uint8 and kinds["a"] is tk.int64
    outi = poison(4, i64)
    outf = poison(6, f64)
    run(K.scalars, (1,), outi, outf, 5, 0.1, 0.1, 1, 255, 0.1, 0.1, 1, EXPECT_D=tk.int32)
    assert outf[1] == float(np.float16(0.1))  # c rounded to float16, not float32
    assert outi[2] == 254  # uint8 arithmetic wraps


@pytest.mark.parametrize("kernel,value,out", [
    (K.put_scalar, 2**63 - 1, i64), (K.put_scalar, -(2**63), i64), (K.put_scalar, 2**31, i64),
    (K.put_u64, 2**64 - 1, u64), (K.put_u64, np.uint64(2**63 + 5), u64), (K.put_u8, 255, u8),
    (K.put_scalar, np.int64(-(2**40)), i64),
], ids=lambda v: getattr(v, "name", repr(v)))
def test_scalar_arguments_at_the_edges_of_their_type(kernel, value, out):
    o = poison(1, out)
    run(kernel, (1,), o, value)
    assert int(o[0]) == int(value)


@pytest.mark.parametrize("kernel,value", [
    (K.put_scalar, 2**63), (K.put_scalar, -(2**63) - 1), (K.put_scalar, 2**64),
    (K.put_scalar, np.uint64(2**64 - 1)), (K.put_u8, 300), (K.put_u8, -1),
    (K.put_u64, -1),
], ids=lambda v: getattr(v, "name", repr(v)))
def test_regression_scalar_that_does_not_fit_is_a_launch_error(kernel, value):
    """An integer scalar argument outside its type's range wrapped silently (2**63 became
    -2**63, np.uint64(2**64 - 1) became -1, 300 for a tk.uint8 became 44) or raised a
    bare OverflowError; like a literal that does not fit, it is an error."""
    with pytest.raises(tk.LaunchError, match="does not fit"):
        run(kernel, (1,), poison(1, i64), value)


@pytest.mark.parametrize("n", [7, 257])
def test_int64_index_math(n):
    rng = rng_for("i64", n)
    x = rand(rng, n, f32)
    out = poison(n, f32)
    run(K.int64_offsets, grid1(n, 32), x, out, n, 2**40, BLOCK=32)
    assert_exact(out, (x.astype(f64) + np.arange(n) // 32).astype(f32))


def test_int64_tile_index():
    n, B = 97, 16
    x = np.arange(n, dtype=i32)
    out = poison(n, i32)
    run(K.int64_tile_index, (math.ceil(n / B),), x, out, B=B)
    assert_exact(out, x + 1)


def test_bool_tensors():
    n = 97
    rng = rng_for("bools")
    x = rng.random(n) < 0.3
    cnt = np.zeros(1, i32)

    def launch(o):
        cnt[0] = 0
        run(K.bool_tensors, grid1(n, 32), x, o, cnt, n, BLOCK=32)

    out = run_bool_out(launch, n)
    assert_exact(out, ~x)
    assert cnt[0] == x.sum()


# =================================================================================================
# Small real kernels
# =================================================================================================


@pytest.mark.parametrize("N", [1, 31, 257])
def test_rms_norm_f16(N):
    rows = 5
    rng = rng_for("rms", N)
    x = rand(rng, (rows, N), f16, -3, 3)
    w = rand(rng, N, f16, 0.5, 1.5)
    y = poison((rows, N), f16)
    run(K.rms_norm, (rows,), x, w, y, eps=1e-6, N=N)
    x64 = x.astype(f64)
    ref = x64 / np.sqrt((x64**2).mean(1, keepdims=True) + 1e-6) * w.astype(f64)
    assert_close(y, ref, rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("T,H", [(3, 32), (5, 10), (1, 2)])
def test_rope(T, H):
    rng = rng_for("rope", T, H)
    x = rand(rng, (T, H), f32)
    ang = rng.uniform(0, 6.3, size=(T, H // 2))
    cos, sin = np.cos(ang).astype(f32), np.sin(ang).astype(f32)
    y = poison((T, H), f32)
    run(K.rope, (T,), x, cos, sin, y, H=H)
    ev, od = x[:, 0::2].astype(f64), x[:, 1::2].astype(f64)
    ref = np.empty((T, H))
    ref[:, 0::2] = ev * cos - od * sin
    ref[:, 1::2] = ev * sin + od * cos
    assert_close(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [f32, bf16], ids=ids)
def test_cross_entropy(dtype):
    rows, V = 6, 97
    rng = rng_for("xent", dtype)
    logits = rand(rng, (rows, V), dtype, -5, 5)
    labels = rng.integers(0, V, size=rows).astype(i32)
    labels[0] = int(logits[0].astype(f64).argmax())  # at least one correct
    loss = poison(rows, f32)
    correct = poison(rows, i32)
    run(K.cross_entropy, (rows,), logits, labels, loss, correct, V=V)
    l64 = logits.astype(f64)
    mx = l64.max(1)
    lse = np.log(np.exp(l64 - mx[:, None]).sum(1)) + mx
    assert_close(loss, lse - l64[np.arange(rows), labels], rtol=1e-5, atol=1e-5)
    assert_exact(correct, (l64.argmax(1) == labels).astype(i32))


@pytest.mark.parametrize("M,N,BN", [(7, 37, 8), (1, 5, 4), (33, 3, 16)])
def test_column_softmax(M, N, BN):
    rng = rng_for("colsm", M, N)
    x = rand(rng, (M, N), f16, -5, 5)
    y = poison((M, N), f32)
    run(K.col_softmax, (math.ceil(N / BN),), x, y, M=M, BN=BN)
    e = np.exp(x.astype(f64) - x.astype(f64).max(0))
    assert_close(y, e / e.sum(0), rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize("act,bias", [("relu", True), ("none", False), ("relu", False)])
def test_linear_epilogue(act, bias):
    M, N, Kd = 19, 23, 45
    rng = rng_for("lin", act, bias)
    x = rand(rng, (M, Kd), bf16, -2, 2)
    w = rand(rng, (Kd, N), bf16, -2, 2)
    b = rand(rng, N, f32, -3, 3)
    y = poison((M, N), f32)
    run(K.linear_act, (math.ceil(M / 16), math.ceil(N / 8)), x, w, b, y, Kd, BM=16, BN=8,
        BK=16, ACT=act, HAS_BIAS=bias)
    ref = x.astype(f64) @ w.astype(f64) + (b if bias else 0)
    if act == "relu":
        ref = np.maximum(ref, 0)
    scale = np.abs(x.astype(f64)) @ np.abs(w.astype(f64)) + np.abs(b)
    assert_close(y, ref, rtol=1e-6, atol=scale * 2e-6)


# =================================================================================================
# Property tests over shapes and seeds
# =================================================================================================

DTYPES_H = [f32, f16, bf16, i32, u8, i8]


@given(n=st.integers(1, 600), dt=st.sampled_from(DTYPES_H), op=st.sampled_from(["add", "mul"]),
       block=st.sampled_from([16, 31, 64]), seed=st.integers(0, 2**16))
@settings(max_examples=60)
def test_binop_hypothesis(n, dt, op, block, seed):
    rng = np.random.default_rng(seed)
    x = rand(rng, n, dt, -50, 50)
    y = rand(rng, n, dt, -50, 50)
    out = poison(n, dt)
    run(K.binop, grid1(n, block), x, y, out, n, OP=op, EXPECT=TK[dt], BLOCK=block)
    if is_float(dt):
        ref = round_to(FLOAT_EXACT_OPS[op](x.astype(f64), y.astype(f64)), dt)
    else:
        ref = wrap([INT_OPS[op](int(a), int(b)) for a, b in zip(x, y, strict=True)], dt)
    assert_exact(out, ref)


@given(M=st.integers(1, 40), N=st.integers(1, 40), BM=st.integers(1, 17),
       BN=st.integers(1, 17), seed=st.integers(0, 2**16))
@settings(max_examples=40)
def test_tile_view_padding_hypothesis(M, N, BM, BN, seed):
    rng = np.random.default_rng(seed)
    x = rand(rng, (M, N), i8, -100, 100)
    g = (math.ceil(M / BM), math.ceil(N / BN))
    out = poison((g[0] * BM, g[1] * BN), i8)
    run(K.tile_pad_2d, g, x, out, BM=BM, BN=BN, P=-128)
    assert_exact(out, padded(x, (BM, BN), -128))


@given(M=st.integers(1, 24), N=st.integers(1, 24), axis=st.sampled_from([0, 1, None]),
       kind=st.sampled_from(["sum", "max", "argmin"]), seed=st.integers(0, 2**16))
@settings(max_examples=40)
def test_reduction_hypothesis(M, N, axis, kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(M, N)).astype(i32)
    ref = ref_reduce(kind, x, axis)
    out = poison(max(1, ref.size), i32)
    run(K.reduce_nd, (1,), x, out, SHAPE=(M, N), KIND=kind, AXIS=axis, KEEP=False,
        EXPECT=tk.int32, OUT_SHAPE=ref.shape)
    assert_exact(out, np.array(list(ref.reshape(-1)), dtype=object).astype(i32))


@given(M=st.integers(1, 40), N=st.integers(1, 40), Kd=st.integers(1, 40),
       seed=st.integers(0, 2**16))
@settings(max_examples=25)
def test_matmul_hypothesis(M, N, Kd, seed):
    rng = np.random.default_rng(seed)
    a = rand(rng, (M, Kd), bf16, -2, 2)
    b = rand(rng, (Kd, N), bf16, -2, 2)
    c = poison((M, N), f32)
    run(K.matmul, (math.ceil(M / 16), math.ceil(N / 16)), a, b, c, Kd, BM=16, BN=16, BK=8,
        ACC=tk.float32, TRANS_B=False)
    ref = a.astype(f64) @ b.astype(f64)
    assert relative_error(c, ref) < 1e-6


@given(M=st.integers(1, 12), N=st.integers(1, 12), s0=st.sampled_from([1, 2, -1, -3]),
       s1=st.sampled_from([1, 3, -1, -2]), transpose=st.booleans(), seed=st.integers(0, 99))
@settings(max_examples=40)
def test_strided_views_hypothesis(M, N, s0, s1, transpose, seed):
    rng = np.random.default_rng(seed)
    base = rand(rng, (M * abs(s0), N * abs(s1)), i16, -1000, 1000)
    x = base[::s0, ::s1]
    if transpose:
        x = x.T
    out_base = np.full((x.shape[1] * 2, x.shape[0]), 77, i16)
    y = out_base[::2].T
    before = out_base.copy()
    run(K.strided_copy, (math.ceil(x.shape[0] / 4), math.ceil(x.shape[1] / 4)), x, y,
        BM=4, BN=4)
    assert_exact(y, x + 1)
    check_untouched(out_base, before, view_mask(out_base, lambda b: b[::2].T))
