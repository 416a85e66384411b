"""``tilekit.lang.dependencies``: which names a kernel's code reads from outside itself
(from its bytecode), and the snapshot of their values that says when a trace is stale."""

from __future__ import annotations

import functools
import math
import types
from typing import Any

import numpy as np
import pytest

import tilekit as tk
from tilekit.lang.dependencies import Read, reads, snapshot

SCALE = 2.0
cfg = types.ModuleType("dependencies_cfg")  # a user module: its attributes are tracked
cfg.SCALE = 3.0
cfg.inner = types.ModuleType("dependencies_cfg.inner")
cfg.inner.BIAS = 1


def helper(v: Any) -> Any:
    return v * SCALE


def countdown(n: int) -> Any:  # a helper that names itself: followed once
    return countdown(n - 1) if n else cfg.SCALE


def function_of(source: str, **names: Any) -> Any:
    """``f`` defined by ``source`` in a namespace of its own holding ``names`` (no
    source file: the bytecode is all there is)."""
    scope = dict(names)
    exec(source, scope)
    return scope["f"]


def reader(value: Any) -> Any:
    return function_of("def f(x):\n    return x * V\n", V=value)


def key_of(value: Any) -> tuple[Any, ...]:
    return snapshot(reader(value)).key


# --- reads ------------------------------------------------------------------------------------


def test_reads_are_the_names_a_function_takes_from_outside() -> None:
    def f(X: Any, n: int) -> Any:
        local = n + SCALE
        g = lambda y: y * local + cfg.SCALE  # noqa: E731  (local: the function's own)
        return [helper(q) for q in range(n)], tk.load, np.pi, cfg.inner.BIAS, g

    assert set(reads(f.__code__)) == {
        Read("SCALE", False, ()), Read("cfg", False, ("SCALE",)), Read("helper", False, ()),
        Read("range", False, ()), Read("tk", False, ("load",)), Read("np", False, ("pi",)),
        Read("cfg", False, ("inner", "BIAS"))}


def test_parameters_and_locals_named_like_globals_are_not_reads() -> None:
    def f(SCALE: float) -> Any:
        helper = 1
        return [SCALE + helper for _ in (1, 2)]

    assert reads(f.__code__) == ()


def test_closure_variables_are_free_reads_nested_code_included() -> None:
    def make(scale: float, unused: float) -> Any:
        def kern(X: Any) -> Any:
            own = 1.0

            def inner() -> Any:
                return scale + own  # the kernel's free variable, and its own local

            return X * inner()

        return kern

    assert reads(make(2.0, 3.0).__code__) == (Read("scale", True, ()),)


def test_code_without_a_source_file_is_read_from_its_bytecode() -> None:
    f = function_of("def f(x):\n    return cfg.SCALE * (lambda y: y + V)(x)\n", V=1, cfg=cfg)
    assert set(reads(f.__code__)) == {Read("cfg", False, ("SCALE",)), Read("V", False, ())}


# --- snapshots: which values are the same ------------------------------------------------------


@pytest.mark.parametrize("a, b", [
    (2.0, float("2.0")), (float("nan"), float("nan")), (7, int("7")), ("ab", "a" + "b"[:1]),
    ((1, 2.5, "x"), (1, 2.5, "x")), (frozenset({1, 2}), frozenset({2, 1})),
    (np.float32(2), np.float32(2)), (tk.float16, tk.float16), (None, None)])
def test_equal_values_have_equal_keys(a: Any, b: Any) -> None:
    assert key_of(a) == key_of(b)


@pytest.mark.parametrize("a, b", [
    (2.0, 3.0), (0.0, -0.0), (1, 1.0), (1, True), ("a", b"a"), ((1, 2), (1, 2.0)),
    (np.float32(2), np.float64(2)), (np.float32(2), 2.0), (tk.float16, tk.bfloat16),
    ([1], [1]), (helper, countdown)])
def test_other_values_have_other_keys(a: Any, b: Any) -> None:
    """Numbers by type and value (a float constant traces differently from an int);
    lists, functions and other objects by identity."""
    assert key_of(a) != key_of(b)


def test_objects_are_the_same_while_they_are_the_same_object() -> None:
    table = [1, 2]
    assert key_of(table) == key_of(table)


# --- snapshots: guards ------------------------------------------------------------------------


def test_guards_hold_while_every_namespace_holds_the_same_object() -> None:
    f = reader(2.0)
    snap = snapshot(f)
    [(where, name, value)] = snap.guards
    assert where is f.__globals__ and name == "V" and snap.holds()
    f.__globals__["V"] = float("2.0")  # an equal value in another object: checked again
    assert not snap.holds() and snapshot(f).key == snap.key
    f.__globals__["V"] = value
    assert snap.holds()
    del f.__globals__["V"]
    assert not snap.holds()


def test_a_closure_cell_is_guarded() -> None:
    def closure_over(scale: float) -> Any:
        def f(x: Any) -> Any:
            return x * scale

        return f

    f = closure_over(2.0)
    snap = snapshot(f)
    [(cell, name, value)] = snap.guards
    assert cell is f.__closure__[0] and name is None and value == 2.0 and snap.holds()
    cell.cell_contents = 3.0  # as `nonlocal scale; scale = 3.0` would
    assert not snap.holds() and snapshot(f).key != snap.key
    del cell.cell_contents
    assert not snap.holds() and snapshot(f).guards == ()


def test_helpers_and_user_module_attributes_are_followed_once() -> None:
    def f(x: Any) -> Any:
        return helper(x) + countdown(3) + cfg.inner.BIAS

    snap = snapshot(f)
    assert sorted(label for label, _ in snap.key) == [
        "SCALE", "cfg", "cfg.SCALE", "cfg.inner", "cfg.inner.BIAS", "countdown", "helper"]
    guards = {(id(where), name): value for where, name, value in snap.guards}
    assert guards[(id(vars(cfg.inner)), "BIAS")] == 1
    assert guards[(id(globals()), "SCALE")] == 2.0  # read by `helper`


def test_partials_and_bound_methods_are_followed_to_their_function() -> None:
    """A helper reached through ``functools.partial`` (its arguments by value) or a bound
    method is followed like a plain one: what it reads is guarded."""

    class Scaler:
        def apply(self, v: Any) -> Any:
            return v * SCALE

    by_partial = function_of("def f(x):\n    return H(x)\n", H=functools.partial(helper))
    by_method = function_of("def f(x):\n    return H(x)\n", H=Scaler().apply)
    for f in (by_partial, by_method):
        assert "SCALE" in [label for label, _ in snapshot(f).key]
    assert key_of(functools.partial(helper, 2.0)) != key_of(functools.partial(helper, 2))
    assert key_of(functools.partial(helper, 2.0)) == key_of(functools.partial(helper, 2.0))


def test_a_typical_kernel_has_no_guard() -> None:
    """tilekit, numpy, math and the standard library are the environment: nothing to
    check on a launch of a kernel that reads only them."""

    @tk.kernel
    def plain(X, Y, n, BLOCK: tk.constexpr):  # type: ignore[no-untyped-def]
        offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
        y = tk.load(X, offs, offs < n) * np.float32(2) + math.pi
        tk.store(Y, offs, y.to(tk.float32), offs < n)

    assert snapshot(plain.fn).guards == ()
