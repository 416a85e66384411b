"""Tile views at index 0 (a norm's weights, ``W.tile((N,), (0,))``) on every size.

A size fact ``(W, 0, N)`` says W's size is a positive multiple of N, so the tile at index 0
lies inside W and its accesses take no bounds check at all. A size of 0 is a multiple of N
too but holds no tile: it has no fact, and its accesses stay checked. The kernels run on
both backends (the GPU leg is marked ``gpu``) for sizes 0, 1, N - 1, N, N + 1 and 2 N,
against numpy: elements past the end read as 0 and are never written.
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilekit as tk
from bench import memory_bound
from tilekit import knobs
from tilekit.codegen import compile_module
from tilekit.codegen.size_facts import candidate_size_facts, size_facts_holding

bf16 = np.dtype(ml_dtypes.bfloat16)


@tk.kernel
def scale_rows(X, W, Y, N: tk.constexpr):
    r = tk.program_id(0)
    x = X.tile((1, N), (r, 0)).load().to(tk.float32)
    w = W.tile((N,), (0,)).load().to(tk.float32)
    Y.tile((1, N), (r, 0)).store((x * w[None, :]).to(Y.dtype))


@tk.kernel
def copy_weights(W, Out, N: tk.constexpr):
    Out.tile((N,), (0,)).store(W.tile((N,), (0,)).load())


@pytest.fixture(params=["interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request, tmp_path):  # type: ignore[no-untyped-def]
    """The CPU interpreter, then the GPU (its own disk cache: every variant compiles)."""
    with knobs.override(interpret=request.param == "interp", cache_dir=str(tmp_path)):
        yield request.param


def _sizes(n: int) -> list[int]:
    return [0, 1, n - 1, n, n + 1, 2 * n]


def _random(shape, dtype, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)


def _padded(w: np.ndarray, n: int) -> np.ndarray:
    """The tile at index 0 as the language defines it: W's first n elements, 0 past its end."""
    out = np.zeros(n, w.dtype)
    out[:min(n, w.size)] = w[:n]
    return out


# --- the fact ---------------------------------------------------------------------------


@given(st.integers(2, 5000), st.data())
def test_a_size_fact_puts_the_tile_at_index_0_inside(n, data):
    size = data.draw(st.one_of(st.just(0), st.integers(0, 4 * n),
                               st.integers(1, 4).map(lambda k: k * n)))
    holds = ("W", 0, n) in size_facts_holding([("W", 0, n)], {"W": (size,)})
    assert holds == (size > 0 and size % n == 0)
    assert not holds or n <= size  # the tile [0, n) lies inside [0, size)


def _facts(kernel, *arrays, **constexprs):
    with knobs.override(interpret=True):
        module = kernel.trace(*arrays, **constexprs)
    names = [p.name for p in kernel.params][:len(arrays)]
    return module, size_facts_holding(candidate_size_facts(module),
                                      {n: a.shape for n, a in zip(names, arrays)})


def test_size_0_is_compiled_like_a_size_that_is_no_multiple():
    n = 256
    x = np.zeros((4, n), np.float32)
    _, empty = _facts(scale_rows, x, np.zeros(0, np.float32), x.copy(), N=n)
    _, ragged = _facts(scale_rows, x, np.zeros(n + 1, np.float32), x.copy(), N=n)
    _, exact = _facts(scale_rows, x, np.zeros(2 * n, np.float32), x.copy(), N=n)
    assert ("W", 0, n) not in empty and empty == ragged
    assert ("W", 0, n) in exact


def test_with_the_fact_a_tile_at_index_0_takes_no_bounds_check():
    """A copy of 4096 weights (no tail): with the facts, straight-line vector code; on a
    size of 0 (no fact), checked accesses."""
    n = 4096
    w = np.zeros(n, np.float32)
    module, facts = _facts(copy_weights, w, w.copy(), N=n)
    assert facts == {("W", 0, n), ("Out", 0, n)}
    known = compile_module(module, "sm_90a", divisible=facts).binary.decode()
    checked = compile_module(module, "sm_90a").binary.decode()
    assert "setp" not in known and "bra" not in known.replace("bra.uni", "")
    assert "setp" in checked


# --- both backends ----------------------------------------------------------------------


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("dtype", [np.float32, bf16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [4097, 256])
def test_rows_scaled_by_weights_of_any_size(n, dtype):
    x = _random((3, n), dtype, n)
    for size in _sizes(n):
        w = _random(size, dtype, size + 1)
        y = np.full((3, n), np.nan, dtype)
        scale_rows[3](x, w, y, N=n)
        ref = (x.astype(np.float32) * _padded(w, n).astype(np.float32)).astype(dtype)
        np.testing.assert_array_equal(y, ref, err_msg=f"W of size {size}")


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("dtype", [np.float32, bf16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [4097, 256])
def test_a_tile_at_index_0_stores_only_inside(n, dtype):
    w = _random(n, dtype, n)
    for size in _sizes(n):
        out = np.full(size, 77, dtype)  # not a weight: an element written past n shows
        copy_weights[1](w, out, N=n)
        ref = np.full(size, 77, dtype)
        ref[:min(n, size)] = w[:size]
        np.testing.assert_array_equal(out, ref, err_msg=f"Out of size {size}")


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n", [4097, 8192])
def test_bf16_layer_norm_matches_float64(n):
    """bench/memory_bound.py's layer norm on the rows whose registers issue 7 fixed
    (``test_row_registers``): the GPU leg runs the code with the register cap."""
    rows = 3
    x = _random((rows, n), bf16, n)
    w, b = _random(n, bf16, n + 1), _random(n, bf16, n + 2)
    y = np.full((rows, n), np.nan, bf16)
    memory_bound.tk_layer_norm[rows](x, w, b, y, 1e-5, N=n)
    x64 = x.astype(np.float64)
    ref = ((x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
           * w.astype(np.float64) + b.astype(np.float64))
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())
