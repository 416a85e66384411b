"""CSE and loop-invariant hoisting: fewer ops, same results, nothing unsafe moved."""

from __future__ import annotations

import numpy as np

import tilekit as tk
from tilekit.ir.cleanup import eliminate_common_subexpressions, hoist_loop_invariants
from tilekit.ir.passes import PassManager
from tilekit.rt.launcher import JITKernel


def _names(module) -> list[str]:
    return [op.name for op in module.walk()]


def _raw(fn, *args, **kwargs):
    """The traced IR with no passes run."""
    kern = JITKernel(fn, passes=PassManager([]))
    return kern, kern.trace(*args, **kwargs)


def test_cse_merges_repeats_but_keeps_signed_zeros_apart() -> None:
    def k(X: tk.Tensor, Out: tk.Tensor):
        offs = tk.arange(4)
        a = tk.load(X, offs) + 0.0
        b = tk.load(X, offs) + 0.0          # a second load: not merged (memory op)
        c = tk.full((4,), -0.0, tk.float32)  # -0.0 must not become 0.0
        tk.store(Out, tk.arange(4), a + b + c)

    _, module = _raw(k, np.zeros(4, np.float32), np.zeros(4, np.float32))
    before = _names(module)
    eliminate_common_subexpressions(module)
    after = _names(module)
    assert before.count("arange") == 2 and after.count("arange") == 1
    assert after.count("load") == 2
    consts = [op.attrs["value"] for op in module.walk() if op.name == "constant"]
    assert any(repr(v) == "-0.0" for v in consts) and any(repr(v) == "0.0" for v in consts)


def test_hoisting_moves_invariants_but_not_integer_division() -> None:
    def k(X: tk.Tensor, Out: tk.Tensor, n, d):
        acc = tk.zeros((8,), tk.int32)
        for i in tk.range(n):
            base = tk.arange(8) * 2       # invariant: hoisted
            q = base // d                 # may fault (d == 0): stays in the loop
            acc += q + i
        tk.store(Out, tk.arange(8), acc)

    _, module = _raw(k, np.zeros(8, np.int32), np.zeros(8, np.int32), 3, 1)
    hoist_loop_invariants(module)
    loop = next(op for op in module.walk() if op.name == "for")
    body = [op.name for op in loop.regions[0].block.ops]
    assert "arange" not in body and "mul" not in body
    assert "floordiv" in body


def test_cleanup_keeps_results_and_zero_trip_loops_do_not_fault() -> None:
    @tk.kernel
    def k(X: tk.Tensor, Out: tk.Tensor, n, d, BLOCK: tk.constexpr):
        offs = tk.arange(BLOCK)
        acc = tk.zeros((BLOCK,), tk.float32)
        for _ in tk.range(n):
            scale = tk.exp(tk.zeros((BLOCK,), tk.float32) + 1.0)
            acc += tk.load(X, offs) * scale + (offs // d).to(tk.float32)
        tk.store(Out, offs, acc)

    rng = np.random.default_rng(0)
    x = rng.standard_normal(16).astype(np.float32)
    out = np.full(16, np.nan, np.float32)
    k[1](x, out, 3, 5, BLOCK=16)
    ref = 3 * (x.astype(np.float64) * np.e + np.arange(16) // 5)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    out[:] = np.nan
    k[1](x, out, 0, 0, BLOCK=16)  # d == 0 but the loop never runs: no fault
    assert np.all(out == 0)
