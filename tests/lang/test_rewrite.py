"""The source rewrite (tilekit.lang.rewrite, tilekit.lang.convert) preserves Python.

Outside a trace, and with Python values and Python loops inside one, every hook the rewrite
inserts is the identity: a rewritten function must compute exactly what the original does.
These functions use every construct the rewrite touches (return/break/continue under
``with``, in nested loops, ``for ... else``, ``while``, ``try``, closures, helpers, method
calls), and hypothesis checks that both versions agree on random inputs.
"""

# ruff: noqa: B007, SIM102, PLR0912

from __future__ import annotations

import ast
import contextlib
import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from tilekit.lang import convert, rewrite

nothing = contextlib.nullcontext


def helper_scan(xs, limit):
    total = 0
    for x in xs:
        with nothing():
            if x > limit:
                return total, "over"
            if x < 0:
                continue
        total += x
    return total, "done"


def nested_loops(xs, k):
    found = []
    for i, x in enumerate(xs):
        for j in range(k):
            with nothing():
                if (x + j) % 3 == 0:
                    break
                if j == x:
                    continue
            found.append((i, j))
        else:
            found.append((i, -1))
        if len(found) > 12:
            with nothing():
                return found
    return found


def loop_while(n):
    i, out = 0, []
    while i < n:
        i += 1
        with nothing():
            if i % 4 == 0:
                continue
            if i > 9:
                break
        out.append(i)
    else:
        out.append("no break")
    return out


def with_try(xs):
    log = []
    for x in xs:
        try:
            with nothing():
                if x == 2:
                    raise ValueError(x)
                if x == 5:
                    return log + ["five"]
        except ValueError:
            log.append("caught")
            continue
        finally:
            log.append("finally")
        log.append(x)
    return log


def closures(xs, k):
    scale = k

    def bump(v):
        with nothing():
            if v > 3:
                return v * scale
        return v

    class Acc:
        def __init__(self):
            self.total = 0

        def add(self, v):
            self.total += v

    acc = Acc()
    for x in xs:
        acc.add(bump(x))
    part = functools.partial(bump)
    return acc.total, [part(x) for x in xs], sorted(xs, key=lambda v: -v)


def comprehension_and_walrus(xs):
    ys = [y for x in xs if (y := x * 2) > 3]
    return ys, (y if xs else None)


CASES = [helper_scan, nested_loops, loop_while, with_try, closures, comprehension_and_walrus]
small = st.lists(st.integers(-3, 12), max_size=12)


@settings(max_examples=60, deadline=None)
@given(xs=small, k=st.integers(0, 6))
def test_rewritten_functions_compute_what_the_originals_do(xs, k):
    for fn, args in [(helper_scan, (xs, k)), (nested_loops, (xs, k)), (loop_while, (k * 2,)),
                     (with_try, (xs,)), (closures, (xs, k)), (comprehension_and_walrus, (xs,))]:
        new = convert.rewritten(fn)
        assert new is not fn, convert.SKIPPED.get(fn.__code__)
        assert new(*args) == fn(*args), fn.__name__


def test_every_case_is_rewritten_and_marks_its_nested_functions():
    for fn in CASES:
        new = convert.rewritten(fn)
        assert new.__code__ in convert._IS_REWRITE
        assert convert.rewritten(new) is new  # a rewrite is never rewritten again


def test_exits_become_flags_only_where_a_scope_encloses_them():
    """A `return` at the top level of a function stays a return; `continue` directly in a
    loop stays native; `break` in a `for` and exits under `with` become flags."""
    def plain(x):
        for i in range(3):
            if i == x:
                continue
        return x

    text = convert.source_of(plain)
    assert "_tk_ret" not in text and "_tk_cont" not in text and "continue" in text
    text = convert.source_of(nested_loops)
    assert "_tk_brk_" in text and "_tk_cont_" in text and "_tk_ret = True" in text


def test_generated_statements_name_the_users_lines():
    """Every generated node sits on one line of the statement it stands for."""
    tree = convert._parse(nested_loops)
    rewritten = rewrite.rewrite_function(tree)
    first, last = nested_loops.__code__.co_firstlineno, max(
        n.end_lineno for n in ast.walk(convert._parse(nested_loops)) if hasattr(n, "end_lineno"))
    for node in ast.walk(rewritten):
        if hasattr(node, "lineno") and node.lineno is not None:
            assert first <= node.lineno <= last
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id == rewrite.HOOKS:
                assert node.lineno == node.end_lineno


def test_assigned_and_live_names():
    body = ast.parse("a = 1\nb += 2\nfor c in x: d = c\nwith m as e: pass\n"
                     "[f for f in y]\ndef g(): h = 1\n").body
    assert rewrite.assigned_names(body) == {"a", "b", "c", "d", "e", "g"}
