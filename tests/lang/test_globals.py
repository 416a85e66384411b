"""What a kernel reads besides its arguments is part of its specialization (issue 27,
repro 7): a global, a closure variable, a module attribute or a helper changed between
two launches with the same shapes is traced again and the new value runs; an unchanged
one is not traced again. On the interpreter, and on the GPU's slow path (numpy arrays);
``tests/rt/test_globals_fast.py`` covers the launch fast path (cache hits)."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

import tilekit as tk

pytestmark = pytest.mark.usefixtures("backend")

BLOCK = 128
SCALE = 2.0
cfg = types.ModuleType("globals_cfg")  # a user module, as `import cfg` would bind
cfg.SCALE = 2.0
exec("def times(v):\n    return v * FACTOR\n", vars(cfg))  # a helper with its own globals
cfg.FACTOR = 2.0
THIS = sys.modules[__name__]


def scale_of(v: Any) -> Any:
    return v * SCALE


@tk.kernel
def by_global(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(Y, offs, tk.load(X, offs, offs < n) * SCALE, offs < n)


@tk.kernel
def by_helper(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(Y, offs, scale_of(tk.load(X, offs, offs < n)), offs < n)


@tk.kernel
def by_module(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    x = tk.load(X, offs, offs < n)
    tk.store(Y, offs, x * cfg.SCALE + cfg.times(x), offs < n)


def arrays(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return x, np.full_like(x, np.nan)


def run(kern: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    kern[tk.cdiv(x.size, BLOCK)](x, y, x.size, BLOCK=BLOCK)
    return y


def traces_of(kern: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The specializations ``kern`` traces from now on."""
    traced: list[Any] = []
    trace = kern._trace

    def counting(spec: Any) -> Any:
        traced.append(spec)
        return trace(spec)

    monkeypatch.setattr(kern, "_trace", counting)
    return traced


def test_a_changed_global_is_traced_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repro: `SCALE = 2.0` -> `3.0` between two launches with the same shapes."""
    x, y = arrays(997)
    np.testing.assert_array_equal(run(by_global, x, y), x * np.float32(2))
    traced = traces_of(by_global, monkeypatch)
    monkeypatch.setattr(THIS, "SCALE", 3.0)
    np.testing.assert_array_equal(run(by_global, x, y), x * np.float32(3))
    monkeypatch.setattr(THIS, "SCALE", 2.0)  # back: traced again (the caches hold one value)
    np.testing.assert_array_equal(run(by_global, x, y), x * np.float32(2))
    assert len(traced) == 2


def test_an_unchanged_global_is_not_traced_again(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = arrays(1001, seed=1)
    run(by_global, x, y)
    traced = traces_of(by_global, monkeypatch)
    for _ in range(3):
        np.testing.assert_array_equal(run(by_global, x, y), x * np.float32(2))
    monkeypatch.setattr(THIS, "SCALE", float("2.0"))  # an equal value, another object
    np.testing.assert_array_equal(run(by_global, x, y), x * np.float32(2))
    x2, y2 = arrays(33, seed=2)  # other sizes, the same specialization
    np.testing.assert_array_equal(run(by_global, x2, y2), x2 * np.float32(2))
    assert traced == []


def test_a_redefined_helper_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = arrays(515, seed=3)
    np.testing.assert_array_equal(run(by_helper, x, y), x * np.float32(2))

    def scale_of(v: Any) -> Any:  # redefined, as a notebook cell would
        return v + 1.0

    monkeypatch.setattr(THIS, "scale_of", scale_of)
    np.testing.assert_array_equal(run(by_helper, x, y), x + np.float32(1))


def test_a_global_a_helper_reads_is_tracked(monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = arrays(130, seed=4)
    run(by_helper, x, y)
    monkeypatch.setattr(THIS, "SCALE", -0.5)
    np.testing.assert_array_equal(run(by_helper, x, y), x * np.float32(-0.5))


def test_a_changed_module_attribute_is_traced_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cfg.SCALE`, and `FACTOR` in the module of the helper `cfg.times`."""
    x, y = arrays(257, seed=5)
    np.testing.assert_array_equal(run(by_module, x, y), x * np.float32(2) * 2)
    monkeypatch.setattr(cfg, "SCALE", 3.0)
    np.testing.assert_array_equal(run(by_module, x, y), x * np.float32(3) + x * np.float32(2))
    monkeypatch.setattr(cfg, "FACTOR", 5.0)
    np.testing.assert_array_equal(run(by_module, x, y), x * np.float32(3) + x * np.float32(5))


def test_a_changed_closure_variable_is_traced_again() -> None:
    scale = 2.0

    @tk.kernel
    def by_closure(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, tk.load(X, offs, offs < n) * scale, offs < n)

    x, y = arrays(77, seed=6)
    np.testing.assert_array_equal(run(by_closure, x, y), x * np.float32(2))
    scale = 3.0
    np.testing.assert_array_equal(run(by_closure, x, y), x * np.float32(3))


def test_a_global_of_another_type_is_another_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 and 2.0 are equal in Python but not in a trace: an int constant is an integer."""

    @tk.kernel
    def halve(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        tk.store(Y, offs, tk.load(X, offs, offs < n) / SCALE, offs < n)

    x = np.random.default_rng(7).integers(-50, 50, 99).astype(np.int32)
    y = np.zeros(99, np.float32)
    monkeypatch.setattr(THIS, "SCALE", 2)
    run(halve, x, y)
    assert "constant 2 : i32" in str(halve.trace(x, y, 99, BLOCK=BLOCK))
    traced = traces_of(halve, monkeypatch)
    monkeypatch.setattr(THIS, "SCALE", 2.0)
    np.testing.assert_array_equal(run(halve, x, y), x / np.float32(2))
    assert "constant 2.0 : f32" in str(halve.trace(x, y, 99, BLOCK=BLOCK))
    assert len(traced) == 1
