"""Regression tests for what the random-program fuzzer (tests/fuzz, docs/fuzzing.md) found.

Each kernel is the fuzzer's failing program reduced by hand, checked on every backend
against a plain-numpy reference on ragged inputs.
"""

# ruff: noqa: N803

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tests.lang.helpers import run

pytestmark = pytest.mark.usefixtures("backend")

N, B = 37, 8  # ragged: the last tile is partly outside
GRID = (N + B - 1) // B


def _data(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


@tk.kernel
def _in_place_after_loop_in_when(X, Y, n):
    pid = tk.program_id(0)
    with tk.when(n >= 1):
        for _ in tk.range(0, 3):
            v = X.tile((8,), (pid,)).load()
        v += 1.0  # reads v: the loop must hand it over, though nothing reads it later
    Y.tile((8,), (pid,)).store(2.0)


def test_in_place_update_reads_a_name_first_bound_in_a_loop() -> None:
    """`v += 1` after a runtime loop that first binds `v` read `v`, but the rewrite did not
    count it as a read: `v` was dropped after the loop and the update raised a TraceError
    ("computed inside a tk.range loop and is used after it")."""
    x, y = _data(1), np.full(N, np.nan, np.float32)
    run(_in_place_after_loop_in_when, GRID, x, y, 1)
    assert np.array_equal(y, np.full(N, 2.0, np.float32))


@tk.kernel
def _first_bound_in_when_in_unrolled_loop(X, Y, n):
    pid = tk.program_id(0)
    for s in tk.static_range(2):
        for _ in tk.range(0, 2):
            with tk.when(n > s):
                v = X.tile((8,), (pid,)).load() + s
            Y.tile((8,), (pid,)).store(v)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_name_first_bound_in_a_when_inside_an_unrolled_loop(n: int) -> None:
    """A name first bound in a `tk.when` inside a `tk.range` inside a `tk.static_range`: the
    second unrolled copy found the name dropped by the first copy's loop (it is read only
    inside that loop) and raised a TraceError instead of carrying it. In Python it holds the
    last value assigned, from the first copy when the condition fails in the second."""
    x, y = _data(2), np.full(N, np.nan, np.float32)
    run(_first_bound_in_when_in_unrolled_loop, GRID, x, y, n)
    want = np.zeros(N, np.float32) if n == 0 else x + (1.0 if n >= 2 else 0.0)
    assert np.array_equal(y, want)


@tk.kernel
def _updated_then_rebound_in_loop_in_when(X, Y):
    pid = tk.program_id(0)
    v = X.tile((8,), (pid,)).load() > 0
    with tk.when(pid != 3):
        v &= X.tile((8,), (pid,)).load() > 1
        for _ in tk.range(0, 2):
            v |= v  # updates the entry tile in place...
            v = X.tile((8,), (pid,)).load() > 2  # ...then the name leaves it
    Y.tile((8,), (pid,)).store(v)


def test_tile_updated_in_place_then_rebound_in_a_loop_inside_a_when() -> None:
    """The `when` carried the loop's entry tile (updated in place in the loop, then left
    behind when `v` was rebound) with a value defined inside the loop's body: invalid IR
    ("operand #1 of `yield` is used outside the scope that defines it")."""
    x = np.arange(N, dtype=np.float32) - 3
    y = np.zeros(N, bool)
    run(_updated_then_rebound_in_loop_in_when, GRID, x, y)
    pid = np.arange(N) // 8
    want = np.where(pid != 3, x > 2, x > 0)
    assert np.array_equal(y, want)


@tk.kernel
def _first_bound_in_inner_loop_read_next_iteration(X, Y, n):
    pid = tk.program_id(0)
    for _ in tk.range(0, 3):
        for _ in tk.range(0, n):
            v = X.tile((8,), (pid,)).load()
        v = v + 1.0  # the next iteration's inner loop may not run: v is this value then
    Y.tile((8,), (pid,)).store(v)


def test_name_first_bound_in_inner_loop_keeps_its_value_across_outer_iterations() -> None:
    """In Python (and by the README's rule: the last value assigned, zero only where nothing
    was), `v` counts 1, 2, 3 when the inner loop never runs; tilekit gave 1 (found by the
    fuzzer as a mismatch, tests/fuzz; fixed on main by af1d69a)."""
    x, y = _data(3), np.full(N, np.nan, np.float32)
    run(_first_bound_in_inner_loop_read_next_iteration, GRID, x, y, 0)
    assert np.array_equal(y, np.full(N, 3.0, np.float32))


@tk.kernel
def _bound_only_after_a_return_in_an_unrolled_loop(X, Y, n):
    pid = tk.program_id(0)
    with tk.when(n >= 2):
        for _ in tk.static_range(1):
            return
        v = X.tile((8,), (pid,)).load()  # never runs: the loop above always returns
    Y.tile((8,), (pid,)).store(v)


def test_name_bound_only_in_code_a_return_skips_is_a_trace_error() -> None:
    """Was a raw UnboundLocalError from the rewritten kernel (a TraceError with a hint since
    af1d69a)."""
    x, y = _data(4), np.full(N, 7.0, np.float32)
    try:
        run(_bound_only_after_a_return_in_an_unrolled_loop, GRID, x, y, 0)
    except tk.TilekitError:
        return  # an error at the user's line: fine
    assert np.array_equal(y, np.zeros(N, np.float32))  # or zero: nothing was assigned


@tk.kernel
def _condition_updated_in_its_when(X, Y, n):
    pid = tk.program_id(0)
    c = (n * 8) == pid
    with tk.when(c):
        c |= X.tile((8,), (pid,)).load().sum() > 0  # the condition's tile, updated in place
    Y.tile((8,), (pid,)).store(c)


@pytest.mark.parametrize("n", [0, 1])
def test_when_condition_updated_in_place_in_its_body(n: int) -> None:
    """`with tk.when(c): c |= ...` built the `when` from the condition's tile as it was after
    the body (updated in place): invalid IR ("operand #0 of `when` is used outside the scope
    that defines it")."""
    x, y = _data(5), np.zeros(N, bool)
    run(_condition_updated_in_its_when, GRID, x, y, n)
    pid = np.arange(N) // 8
    assert np.array_equal(y, pid == n * 8)


@tk.kernel
def _first_bound_then_break(X, Y, n):
    pid = tk.program_id(0)
    for _ in tk.range(0, n):
        v = X.tile((8,), (pid,)).load() + 1.0
        break
    Y.tile((8,), (pid,)).store(v)


def test_name_first_bound_in_a_loop_that_breaks() -> None:
    """`for ...: v = ...; break` then reading `v` gave zeros on two or more iterations (found
    by the fuzzer as a mismatch; the same bug, fixed on main by af1d69a)."""
    x, y = _data(6), np.full(N, np.nan, np.float32)
    run(_first_bound_then_break, GRID, x, y, 3)
    assert np.array_equal(y, x + 1)


@tk.kernel
def _updated_in_loop_then_rebound_in_nested_when(X, Y, n):
    pid = tk.program_id(0)
    v = X.tile((8,), (pid,)).load()
    with tk.when(n < 5):
        v *= 2.0
        with tk.when(pid < 3):
            for _ in tk.range(0, 2):
                v += 1.0  # the tile updated in place in the loop...
            v = X.tile((8,), (pid,)).load() - 1.0  # ...then left by its name
    Y.tile((8,), (pid,)).store(v)


@pytest.mark.parametrize("n", [0, 7])
def test_tile_updated_in_a_loop_then_rebound_in_a_nested_when(n: int) -> None:
    """The outer `when` carried the tile the loop updated in place (left behind by the
    rebinding in the inner `when`) with the loop's result, defined inside the inner `when`:
    invalid IR ("operand of `yield` is used outside the scope that defines it")."""
    x, y = _data(7), np.full(N, np.nan, np.float32)
    run(_updated_in_loop_then_rebound_in_nested_when, GRID, x, y, n)
    pid = np.arange(N) // 8
    want = x if n >= 5 else np.where(pid < 3, x - 1, x * 2)
    assert np.array_equal(y, want)
