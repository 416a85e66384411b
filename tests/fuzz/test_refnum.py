"""The fuzzer's reference numerics checked against exact arithmetic (Fractions, Python's own
float divmod and ints), so that a mismatch the fuzzer reports is tilekit's, not the
reference's."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import refnum as R
from tilekit.ir.dtypes import DType

FLOAT_TYPES = [DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32]


@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(FLOAT_TYPES))
def test_round_to_is_correct_rounding(x: float, d: DType) -> None:
    got = float(R.round_to(np.array([x]), d)[0])
    assert got == R._round_fraction(Fraction(x), d) or (x == 0 and got == 0)
    if got != 0 and math.isfinite(got):
        assert math.copysign(1, got) == math.copysign(1, x)


def test_round_to_bfloat16_rounds_once() -> None:
    """1 + 2**-8 + 2**-40 is just above half an ulp of bfloat16: it rounds up (through
    float32 rounding to nearest it would land on the tie and round to even, down)."""
    x = 1 + 2.0 ** -8 + 2.0 ** -40
    assert float(R.round_to(np.array([x]), DType.BFLOAT16)[0]) == 1 + 2.0 ** -7


@given(st.integers(-(2**63), 2**64 - 1), st.sampled_from([DType.FLOAT16, DType.FLOAT32,
                                                         DType.FLOAT64]))
def test_int_to_float_is_correctly_rounded(n: int, d: DType) -> None:
    got = float(R.int_to_float(np.array([n], dtype=object), d)[0])
    assert got == R._round_fraction(Fraction(n), d)


@given(st.floats(allow_nan=False, allow_infinity=False, width=32),
       st.floats(allow_nan=False, allow_infinity=False, width=32).filter(lambda y: y != 0))
def test_float_floordiv_and_mod_follow_python(x: float, y: float) -> None:
    q, m = R._divmod_float(np.array([x]), np.array([y]))
    pq, pm = divmod(x, y)
    assert float(q[0]) == pq and math.copysign(1, q[0]) == math.copysign(1, pq)
    assert float(m[0]) == pm and math.copysign(1, m[0]) == math.copysign(1, pm)


def test_float_to_int_truncates_saturates_and_zeroes_nan() -> None:
    f = np.array([2.9, -2.9, 1e30, -1e30, np.nan, 2.0**63, -(2.0**63), 255.5, -0.5])
    assert R.float_to_int(f, DType.INT64).tolist() == [2, -2, 2**63 - 1, -(2**63), 0,
                                                       2**63 - 1, -(2**63), 255, 0]
    assert R.float_to_int(f, DType.UINT8).tolist() == [2, 0, 255, 0, 0, 255, 0, 255, 0]


@given(st.integers(-128, 127), st.integers(-20, 20))
def test_shifts_clamp(a: int, s: int) -> None:
    x = R.V.exact(DType.INT8, np.array([a], np.int8))
    y = R.V.exact(DType.INT8, np.array([s], np.int8))
    left = int(R.binary("shl", x, y).v[0])
    right = int(R.binary("shr", x, y).v[0])
    assert left == (0 if not 0 <= s < 8 else ((a << s) + 128) % 256 - 128)
    assert right == ((-1 if a < 0 else 0) if not 0 <= s < 8 else a >> s)


def test_comparisons_of_approximate_values_are_exact_when_apart() -> None:
    a = R.V(DType.FLOAT32, np.array([1.0, 1.0], np.float32), np.array([1e-3, 1e-3]))
    b = R.V.exact(DType.FLOAT32, np.array([2.0, 1.0005], np.float32))
    lt = R.binary("lt", a, b)
    assert lt.v.tolist() == [True, True] and lt.e.tolist() == [0.0, math.inf]
