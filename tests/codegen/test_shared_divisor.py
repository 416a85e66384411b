"""``scalar_ops.SharedDivisor`` emulated on the host: its IR with hardware-like estimates, and
the ties between float32 subnormals that its correction step exists for.

The IR is JIT-compiled for the host as in ``test_scalar_ops``, but the reciprocal estimate
(the one target-specific instruction: ``rcp.approx.ftz.f64`` on NVPTX) is a Python callback,
so the rest of the sequence (three Newton steps, ``q0 = x * r``, the correction, the final
rounding) runs as the GPU runs it, from estimates as coarse as a hardware one or coarser.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from fractions import Fraction

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from tests.codegen.test_scalar_ops import Jit, _ref, same_bits
from tests.lang.helpers import TIE_DIVISORS, shared_divisor_cases, subnormal_ties
from tilekit.codegen import scalar_ops as so
from tilekit.ir.dtypes import DType
from tilekit.ir.numerics import cast as np_cast


def _perturbed(rel: float) -> Callable[[float], float]:
    return lambda y: (1.0 / y) * (1.0 + rel)


def _high_word(y: float) -> float:
    """``1/y`` with only the 20 leading mantissa bits kept (what a reciprocal of the high
    32 bits of a double, as ``MUFU.RCP64H`` computes, can give)."""
    bits = np.float64(1.0 / y).view(np.uint64) & np.uint64(~((1 << 32) - 1) & (2**64 - 1))
    return float(bits.view(np.float64))


ESTIMATES: dict[str, Callable[[float], float]] = {
    "low_by_2^-14": _perturbed(-(2.0**-14)),
    "high_by_2^-14": _perturbed(2.0**-14),
    "high_word_only": _high_word,
}


class _Estimate:
    """The estimate the JIT-compiled code calls (``tk_test_rcp_estimate``), switchable."""

    def __init__(self) -> None:
        self.model: Callable[[float], float] = ESTIMATES["high_word_only"]
        self.callback = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(self._call)

    def _call(self, y: float) -> float:
        if math.isnan(y):  # IEEE's special values, as the hardware gives them
            return y
        if y == 0 or math.isinf(y):
            return math.copysign(0.0 if y else math.inf, y)
        return self.model(y)


class _EstimateMath:
    """A MathLib whose reciprocal estimate calls ``_Estimate`` (SharedDivisor needs no more)."""

    name = "tk_test_rcp_estimate"

    def reciprocal_estimate(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        fn = b.module.globals.get(self.name)
        if fn is None:
            fn = ir.Function(b.module, ir.FunctionType(x.type, [x.type]), self.name)
        return b.call(fn, [x])


ESTIMATE = _Estimate()
HALVES = (DType.FLOAT16, DType.BFLOAT16)


@pytest.fixture(scope="module")
def jit() -> Jit:
    llvm.add_symbol(_EstimateMath.name, ctypes.cast(ESTIMATE.callback, ctypes.c_void_p).value)
    j, math_ = Jit(), _EstimateMath()
    for d in (DType.FLOAT32, *HALVES):
        j.add(f"div_{d.short}", [d, d], d,
              lambda b, x, y, d=d: so.SharedDivisor(b, math_, d, y)(b, x))  # type: ignore
    j.add("reciprocal", [DType.FLOAT32], DType.FLOAT64,
          lambda b, y: so.SharedDivisor(b, math_, DType.FLOAT32, y).r)  # type: ignore
    return j.compile()


@pytest.mark.parametrize("estimate", ESTIMATES)
def test_newton_steps_reach_the_correctly_rounded_reciprocal(jit: Jit, estimate: str) -> None:
    """From any of these estimates the refined ``r`` is ``RN(1/y)`` exactly, so a GPU's
    ``q0 = x * r`` is the host's: the ties below defeat it there too."""
    ESTIMATE.model = ESTIMATES[estimate]
    _, divisors = shared_divisor_cases()
    rng = np.random.default_rng(5)
    y = np.concatenate([divisors, np.exp(rng.uniform(-87, 88, 4000)).astype(np.float32)])
    y = y[np.isfinite(y) & (y != 0)]
    same_bits(jit("reciprocal", y), 1.0 / y.astype(np.float64))


@pytest.mark.parametrize("estimate", ESTIMATES)
def test_shared_divisor_is_exact_with_a_hardware_like_estimate(jit: Jit, estimate: str) -> None:
    """Bit for bit numpy's division on every case of ``shared_divisor_cases`` (ties between
    subnormals included: without the correction step float32 fails here)."""
    ESTIMATE.model = ESTIMATES[estimate]
    rows, divisors = shared_divisor_cases(seed=1)
    x, y = rows.ravel(), np.repeat(divisors, rows.shape[1])
    for d in (DType.FLOAT32, *HALVES):
        xd, yd = np_cast(x, d), np_cast(y, d)
        with np.errstate(all="ignore"):
            same_bits(jit(f"div_{d.short}", xd, yd), _ref("div", xd, yd))


def _fma(a: float, b: float, c: float) -> float:
    return float(Fraction(a) * Fraction(b) + Fraction(c))  # exact, then rounded once


@pytest.mark.parametrize("y", TIE_DIVISORS)
def test_subnormal_ties_defeat_the_uncorrected_quotient(y: float) -> None:
    """The data can fail: on the tie rows, ``q0 = x * RN(1/y)`` rounds to the odd neighbour
    for many elements, and ``q1 = q0 + (x - y*q0) * r`` (exact fmas) rounds right for all."""
    x = subnormal_ties(np.random.default_rng(0), y, 400)
    want = x / np.float32(y)
    r = 1.0 / float(y)
    q0 = x.astype(np.float64) * r
    wrong = q0.astype(np.float32) != want
    assert wrong.sum() > len(x) // 5
    q1 = np.array([_fma(_fma(-float(y), q, float(xi)), r, q) for xi, q in zip(x, q0)])
    same_bits(q1.astype(np.float32), want)


def test_sixteen_bit_ties_round_alike_from_either_neighbour() -> None:
    """Why 16-bit floats skip the correction, over every bfloat16 tie between float32
    subnormals (``x = y * odd * 2^-150``, ``Y * odd < 2^8`` for the odd part ``Y`` of ``y``; the
    exponent of ``y`` scales ``r`` and ``q0`` exactly, so one is enough): ``q0`` gives the
    bfloat16 that the exact tie gives, also where it picks the other float32 neighbour.
    (float16 quotients are never subnormal in float32.)"""
    bf16, b = DType.BFLOAT16.np, 17
    other_neighbour = 0
    for big in range(3, 256, 2):
        for odd in range(1, 256 // big + 1, 2):
            y, x = np.float32(big * 2.0**b), np.float32(big * odd * 2.0 ** (b - 150))
            assert float(x.astype(bf16)) == float(x) and float(y.astype(bf16)) == float(y)
            q0 = np.float32(float(x) * (1.0 / float(y)))
            other_neighbour += int(q0 != x / y)
            assert q0.astype(bf16) == (x / y).astype(bf16)
    assert other_neighbour > 0
