"""Python control flow in kernels means at run time what it means in Python.

``return`` anywhere, ``break``/``continue`` under ``tk.when`` in ``tk.range`` and
``tk.pipeline``, Python numbers rebound in runtime loops and branches, names first bound in a
body and read after it, the same in helper functions: each kernel here is checked against a
plain-Python reference that runs the same program per program id, on random and ragged
inputs, on every backend (the ``backend`` fixture). What the tracer cannot follow is an error
at the user's line (the end of this file).
"""

# Kernels here compute values they never use, on purpose (the error comes first).
# ruff: noqa: N803, N806, F841, B007, PLW0603

from __future__ import annotations

import importlib.util
import linecache
import os
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilekit as tk
from tests.lang.helpers import poison, run
from tilekit.errors import TilekitError, TraceError
from tilekit.lang import convert

_THIS = os.path.abspath(__file__)
_LINES = Path(_THIS).read_text().splitlines()

SIZES = [1, 5, 31, 97, 130]


def rng_for(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def line_of(tag: str) -> int:
    hits = [i + 1 for i, text in enumerate(_LINES) if text.rstrip().endswith(f"# <-- {tag}")]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return hits[0]


# =================================================================================================
# return
# =================================================================================================

@tk.kernel
def early_exit(Y, skip):
    pid = tk.program_id(0)
    with tk.when(pid < skip):
        return
    tk.store(Y, pid, 7)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n", [4, 33, 130])
def test_return_under_when_exits_that_program_only(n):
    """The issue's reproduction: a kernel meant to write [0, 7, 7, 7] wrote nothing."""
    for skip in (0, 1, n // 2, n):
        y = np.zeros(n, np.int32)
        run(early_exit, (n,), y, skip)
        assert y.tolist() == [0] * skip + [7] * (n - skip)


@tk.kernel
def nested_return(X, Y, Trace, n, thr):
    """Walk a row; leave the whole program at the first element above ``thr`` (but only in
    odd programs); even programs record how far they got."""
    pid = tk.program_id(0)
    total = 0.0
    with tk.when(pid >= 0):
        for j in tk.range(0, n):
            x = tk.load(X, pid * n + j)
            with tk.when(x > thr):
                with tk.when(pid % 2 == 1):
                    tk.store(Trace, pid, j)
                    return
            total += x
    tk.store(Y, pid, total)
    tk.store(Trace, pid, -1)


def nested_return_reference(x, n, thr, programs):
    y = np.full(programs, np.nan, np.float32)
    trace = np.full(programs, -7, np.int32)
    for pid in range(programs):
        total = np.float32(0.0)
        returned = False
        for j in range(n):
            v = x[pid * n + j]
            if v > thr and pid % 2 == 1:
                trace[pid] = j
                returned = True
                break
            total = np.float32(total + v)
        if not returned:
            y[pid], trace[pid] = total, -1
    return y, trace


@pytest.mark.usefixtures("backend")
@given(n=st.integers(1, 40), programs=st.integers(1, 9), thr=st.floats(-1.0, 2.5))
@settings(max_examples=12, deadline=None)
def test_return_from_nested_when_and_range(n, programs, thr):
    x = rng_for(n, programs, thr).standard_normal(n * programs).astype(np.float32)
    y, trace = poison(programs, np.float32), np.full(programs, -7, np.int32)
    run(nested_return, (programs,), x, y, trace, n, np.float32(thr))
    want_y, want_trace = nested_return_reference(x, n, np.float32(thr), programs)
    np.testing.assert_array_equal(trace, want_trace)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)


# =================================================================================================
# continue and break
# =================================================================================================

@tk.kernel
def sum_positive(X, Y, Count, n):
    pid = tk.program_id(0)
    s = 0.0
    c = 0
    for j in tk.range(0, n):
        x = tk.load(X, pid * n + j)
        with tk.when(x <= 0):
            continue
        s += x
        c += 1
    tk.store(Y, pid, s)
    tk.store(Count, pid, c)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n", SIZES)
def test_continue_under_when_skips_one_iteration(n):
    """The issue's reproduction 2: the rest of the body was dropped for every iteration."""
    programs = 3
    x = rng_for("cont", n).standard_normal(n * programs).astype(np.float32)
    y, count = poison(programs, np.float32), np.full(programs, -1, np.int32)
    run(sum_positive, (programs,), x, y, count, n)
    rows = x.reshape(programs, n)
    want = [np.float32(0) + np.add.reduce(r[r > 0], dtype=np.float32) for r in rows]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert count.tolist() == [int((r > 0).sum()) for r in rows]


@tk.kernel
def first_above(X, Index, Before, n, thr):
    pid = tk.program_id(0)
    s = 0.0
    for j in tk.range(0, n):
        x = tk.load(X, pid * n + j)
        with tk.when(x > thr):
            tk.store(Index, pid, j)
            break
        s += x
    else:
        tk.store(Index, pid, -1)
    tk.store(Before, pid, s)


@pytest.mark.usefixtures("backend")
@given(n=st.integers(1, 50), thr=st.floats(0.0, 3.0))
@settings(max_examples=12, deadline=None)
def test_break_under_when_and_for_else(n, thr):
    programs = 4
    x = rng_for("brk", n, thr).standard_normal(n * programs).astype(np.float32)
    index, before = np.full(programs, -9, np.int32), poison(programs, np.float32)
    run(first_above, (programs,), x, index, before, n, np.float32(thr))
    for pid, row in enumerate(x.reshape(programs, n)):
        hits = np.nonzero(row > np.float32(thr))[0]
        stop = int(hits[0]) if len(hits) else n
        assert index[pid] == (stop if len(hits) else -1)
        np.testing.assert_allclose(before[pid], np.add.reduce(row[:stop], dtype=np.float32),
                                   rtol=1e-5, atol=1e-5)


@tk.kernel
def pipeline_until(X, Y, Used, limit, BM: tk.constexpr, BN: tk.constexpr):
    """Sum the row's tiles until the running sum passes ``limit``; record how many."""
    m = tk.program_id(0)
    acc = tk.zeros((BM,), tk.float32)
    used = 0
    for i, x in tk.pipeline(X.tiles((BM, BN), row=m), stages=2):
        with tk.when(tk.max(acc) > limit):
            break
        acc += tk.sum(x, axis=1)
        used += 1
    Y.tile((BM,), (m,)).store(acc)
    tk.store(Used, m, used)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("cols", [1, 37, 130, 300])
def test_break_in_pipeline(cols):
    rows, BM, BN = 6, 2, 32
    x = np.abs(rng_for("pipe", cols).standard_normal((rows, cols))).astype(np.float32)
    limit = float(np.median(x.sum(axis=1)) / 2)
    y, used = poison(rows, np.float32), np.full(rows // BM, -1, np.int32)
    run(pipeline_until, (rows // BM,), x, y, used, np.float32(limit), BM=BM, BN=BN)
    tiles = -(-cols // BN)
    for m in range(rows // BM):
        acc = np.zeros(BM, np.float32)
        k = 0
        while k < tiles and not acc.max() > np.float32(limit):
            acc += x[m * BM:(m + 1) * BM, k * BN:(k + 1) * BN].sum(axis=1, dtype=np.float32)
            k += 1
        assert used[m] == k
        np.testing.assert_allclose(y[m * BM:(m + 1) * BM], acc, rtol=1e-5, atol=1e-5)


@tk.kernel
def static_loops(Y, a):
    """Python loops keep Python's meaning (the rewrite's hooks are the identity there), and a
    runtime break inside a static loop guards the remaining unrolled iterations."""
    pid = tk.program_id(0)
    total = 0
    for k in tk.static_range(6):
        if k == 4:
            break
        if k == 1:
            continue
        total += k          # 0 + 2 + 3 = 5, a Python int all along
    runtime = 0
    for k in tk.static_range(5):
        with tk.when(pid + k >= a):
            break
        runtime += 1
    tk.store(Y, pid * 2, total)
    tk.store(Y, pid * 2 + 1, runtime)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("a", [0, 2, 7])
def test_static_loops_keep_python_meaning(a):
    programs = 5
    y = np.full(2 * programs, -1, np.int32)
    run(static_loops, (programs,), y, a)
    for pid in range(programs):
        assert y[2 * pid] == 5
        assert y[2 * pid + 1] == next((k for k in range(5) if pid + k >= a), 5)


# =================================================================================================
# Python numbers rebound in runtime loops and branches
# =================================================================================================

@tk.kernel
def numbers_in_loops(Y, Out, n, B: tk.constexpr):
    """The issue's reproductions 3: an offset advanced by a Python number, a counter, and a
    flag set under tk.when; plus floats, tuple unpacking and a flag found in the loop."""
    pid = tk.program_id(0)
    off = 0
    c = 0
    a, b = 0, 1
    s = 0.5
    found = False
    for j in tk.range(0, n):
        Y.tile((B,), (0,))  # a tile view in the body leaves numbers alone
        tk.store(Out, pid * n * B + off + tk.arange(B), tk.full((B,), 1, tk.int32) * j)
        off += B
        c += 1
        a, b = b, a + b
        s = s * 2
        with tk.when(j == 3):
            found = True
    f = 0
    with tk.when(pid == 1):
        f = 1
    base = pid * 6
    tk.store(Y, base + 0, c)
    tk.store(Y, base + 1, a)
    tk.store(Y, base + 2, s.to(tk.int32))
    tk.store(Y, base + 3, found.to(tk.int32))
    tk.store(Y, base + 4, f)
    tk.store(Y, base + 5, off)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n", [0, 1, 4, 9])
def test_python_numbers_become_runtime_values(n):
    programs, B = 3, 5
    y = np.full(6 * programs, -1, np.int32)
    out = np.full(programs * max(n, 1) * B, -1, np.int32)
    run(numbers_in_loops, (programs,), y, out, n, B=B)
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    for pid in range(programs):
        assert y[6 * pid:6 * pid + 6].tolist() == [
            n, a, int(0.5 * 2**n), int(n > 3), int(pid == 1), n * B]
        if n:
            assert out[pid * n * B:(pid + 1) * n * B].tolist() == \
                [j for j in range(n) for _ in range(B)]


@tk.kernel
def bound_inside(X, Y, n, thr):
    """Names first bound inside a runtime body and read after it: the last value assigned,
    zero where none was; the loop's own target after the loop is its last value."""
    pid = tk.program_id(0)
    for j in tk.range(0, n):
        last = tk.load(X, pid * n + j)
    with tk.when(tk.load(X, pid * n) > thr):
        big = tk.load(X, pid * n) * 2
    tk.store(Y, pid * 3, last)
    tk.store(Y, pid * 3 + 1, big)
    tk.store(Y, pid * 3 + 2, j.to(tk.float32))


@pytest.mark.usefixtures("backend")
@given(n=st.integers(1, 30), thr=st.floats(-1.0, 1.0))
@settings(max_examples=10, deadline=None)
def test_names_first_bound_inside_a_body(n, thr):
    programs = 4
    x = rng_for("bound", n, thr).standard_normal(n * programs).astype(np.float32)
    y = poison(3 * programs, np.float32)
    run(bound_inside, (programs,), x, y, n, np.float32(thr))
    for pid in range(programs):
        row = x[pid * n:(pid + 1) * n]
        big = row[0] * 2 if row[0] > np.float32(thr) else 0.0
        assert y[3 * pid:3 * pid + 3].tolist() == [row[-1], np.float32(big), n - 1]


# --- helpers ------------------------------------------------------------------------------------

def count_to(n):
    """A helper with its own runtime loop and Python counter."""
    c = 0
    for _ in tk.range(0, n):
        c += 2
    return c


def clamp_low(x, lo):
    """A helper that returns early under a runtime condition, with a value."""
    with tk.when(x < lo):
        return lo
    return x


def bump(state, by):
    """A helper that rebinds its own locals inside a when and returns them."""
    hits, total = state
    with tk.when(by > 0):
        hits += 1
        total += by
    return hits, total


@tk.kernel
def with_helpers(X, Y, n):
    pid = tk.program_id(0)
    state = (0, 0.0)
    for j in tk.range(0, n):
        x = clamp_low(tk.load(X, pid * n + j), -0.5)
        state = bump(state, x)
    hits, total = state
    tk.store(Y, pid * 3, count_to(n).to(tk.float32))
    tk.store(Y, pid * 3 + 1, hits.to(tk.float32))
    tk.store(Y, pid * 3 + 2, total)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n", [1, 7, 33])
def test_helpers_get_the_same_meaning(n):
    programs = 3
    x = rng_for("helpers", n).standard_normal(n * programs).astype(np.float32)
    y = poison(3 * programs, np.float32)
    run(with_helpers, (programs,), x, y, n)
    for pid in range(programs):
        row = np.maximum(x[pid * n:(pid + 1) * n], np.float32(-0.5))
        pos = row[row > 0]
        assert y[3 * pid] == 2 * n
        assert y[3 * pid + 1] == len(pos)
        np.testing.assert_allclose(y[3 * pid + 2], np.add.reduce(pos, dtype=np.float32),
                                   rtol=1e-5, atol=1e-5)


# =================================================================================================
# The rewrite itself
# =================================================================================================

def test_rewritten_source_is_readable():
    """`convert.source_of` shows what the tracer runs: flags and guards, hooks around scopes,
    calls through `_tk.call`."""
    text = convert.source_of(early_exit.fn)
    assert "_tk_ret = True" in text
    assert "_tk.guard(" in text and "_tk.scope_enter(" in text
    assert "_tk.call(tk.store)(Y, pid, 7)" in text


def test_kernels_without_runtime_exits_keep_their_ir():
    """A kernel that neither exits nor rebinds numbers in a runtime scope traces to the IR it
    always did: no flags, no guards (the golden IR tests pin the rest)."""
    @tk.kernel
    def k(X, Y, n, B: tk.constexpr):
        acc = tk.zeros((B,), tk.float32)
        for j in tk.range(0, n):
            acc += X.tile((B,), (j,)).load()
        Y.tile((B,), (0,)).store(acc)

    text = str(k.trace(np.zeros(64, np.float32), np.zeros(8, np.float32), 8, B=8))
    assert "when" not in text and "i1" not in text


def test_dead_carried_values_are_dropped():
    """A value a loop carries that nothing reads after it is not carried (nor computed)."""
    @tk.kernel
    def k(X, Y, n):
        acc = tk.zeros((4,), tk.float32)
        for j in tk.range(0, n):
            acc = acc + 1.0
            tk.store(Y, tk.arange(4), tk.load(X, tk.arange(4)))

    text = str(k.trace(np.zeros(4, np.float32), np.zeros(4, np.float32), 3))
    assert "iter_args" not in text and "add" not in text.split("for", 1)[1]


def _module_from(tmp_path: Path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module, path


def test_edited_source_is_not_rewritten(tmp_path):
    """A kernel whose file changed after the import is traced as Python compiled it, with a
    warning, never from the new text."""
    module, path = _module_from(tmp_path, "edited_kernel", """
        import tilekit as tk

        @tk.kernel
        def k(Y):
            tk.store(Y, 0, 1)
    """)
    path.write_text(path.read_text().replace("tk.store(Y, 0, 1)", "tk.store(Y, 0, 2)"))
    linecache.checkcache(str(path))
    y = np.zeros(1, np.int32)
    with tk.knobs.override(interpret=True), pytest.warns(RuntimeWarning, match="differs"):
        module.k[1](y)
    assert y[0] == 1


# =================================================================================================
# What the tracer cannot follow: errors at the user's line
# =================================================================================================

def expect(message: str, tag: str, hint: str | None = None):
    class _Expect:
        def __enter__(self):
            self.info = pytest.raises(TilekitError)
            self.ctx = self.info.__enter__()
            return self

        def __exit__(self, *exc):
            handled = self.info.__exit__(*exc)
            err = self.ctx.value
            assert type(err) is TraceError, f"{type(err).__name__}: {err}"
            assert message in err.message, str(err)
            assert err.loc is not None and err.loc.file == _THIS, str(err)
            assert err.loc.line == line_of(tag), str(err)
            if hint is not None:
                assert any(hint in h for h in err.hints), str(err)
            return handled

    return _Expect()


def _ints(n=8):
    return np.zeros(n, np.int32)


COUNT = 0


def count_globally():
    global COUNT
    COUNT += 1  # <-- global-store


def test_global_rebound_in_a_runtime_loop():
    @tk.kernel
    def k(Y, n):
        for j in tk.range(0, n):
            count_globally()

    with tk.knobs.override(interpret=True), expect("`COUNT` is assigned a Python number",
                                                   "global-store", hint="local name"):
        k[1](_ints(), 3)


class Box:
    value = 0


def test_attribute_store_in_a_when():
    box = Box()

    @tk.kernel
    def k(Y):
        with tk.when(tk.program_id(0) == 0):
            box.value = 3  # <-- attribute-store

    with tk.knobs.override(interpret=True), expect("`box.value` is assigned a Python number",
                                                   "attribute-store"):
        k[1](_ints())


def test_list_element_changed_in_a_loop():
    @tk.kernel
    def k(Y, n):
        xs = [0, 0]
        for j in tk.range(0, n):  # <-- list-element
            xs[0] += 1
        tk.store(Y, 0, xs[0])

    with tk.knobs.override(interpret=True), expect("`xs[0]` is 0 when the `tk.range` loop",
                                                   "list-element", hint="plain variable"):
        k[1](_ints(), 3)


def test_list_grown_in_a_loop():
    @tk.kernel
    def k(Y, n):
        parts = []
        for j in tk.range(0, n):  # <-- list-append
            parts.append(j)
        tk.store(Y, 0, len(parts))

    with tk.knobs.override(interpret=True), expect("the list `parts` has 0 items",
                                                   "list-append"):
        k[1](_ints(), 3)


def test_object_rebound_in_a_when():
    @tk.kernel
    def k(Y):
        dt = tk.float16
        with tk.when(tk.program_id(0) == 0):  # <-- object-rebound
            dt = tk.float32
        tk.store(Y, 0, tk.full((), 1, dt).to(tk.int32))

    with tk.knobs.override(interpret=True), expect("`dt` is rebound inside the `tk.when`",
                                                   "object-rebound"):
        k[1](_ints())


def test_carried_number_changes_type():
    @tk.kernel
    def k(Y, n):
        c = 0
        for j in tk.range(0, n):
            c = c + 0.5  # <-- number-type

    with tk.knobs.override(interpret=True), expect(
            "`c` is the Python int 0 before the `tk.range` loop", "number-type",
            hint="`c = 0.0`"):
        k[1](_ints(), 3)


def test_unreadable_source_makes_changed_numbers_an_error():
    """Without source (the interactive prompt, exec), the frame cannot rebind names: a number
    the body changes is an error, never a value frozen at trace time."""
    namespace: dict = {"tk": tk}
    exec(compile(textwrap.dedent("""
        def body(Y, n):
            c = 0
            for j in tk.range(0, n):
                c += 1
            tk.store(Y, 0, c)
    """), "<typed in>", "exec"), namespace)
    k = tk.kernel(namespace["body"])
    with tk.knobs.override(interpret=True), pytest.raises(TraceError, match="cannot rebind"):
        k[1](_ints(), 3)


def test_python_loop_with_a_runtime_exit_must_end_on_its_own():
    """`while True` with a break that depends on a runtime value would unroll forever while
    tracing: an error at the loop, not a hang."""
    @tk.kernel
    def k(Y, n):
        i = 0
        while True:  # <-- endless
            with tk.when(i >= n):
                break
            i += 1

    with tk.knobs.override(interpret=True), expect("has unrolled 1024 iterations",
                                                   "endless", hint="tk.range"):
        k[1](_ints(), 3)


@tk.kernel
def first_bound_across_iterations(X, Y, n, every):
    """`v` is bound only in some iterations (under a tk.when, or before a break): later
    iterations keep the last value, as in Python; `w` is read before it is bound again."""
    pid = tk.program_id(0)
    w = 0.0
    for j in tk.range(0, n):
        with tk.when(j % every == 0):
            v = tk.load(X, pid * n + j)
        w = w + v
    tk.store(Y, pid * 2, v)
    tk.store(Y, pid * 2 + 1, w)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n, every", [(1, 1), (7, 3), (10, 4), (5, 9)])
def test_a_name_bound_in_some_iterations_keeps_its_value(n, every):
    programs = 3
    x = rng_for("some", n, every).standard_normal(n * programs).astype(np.float32)
    y = poison(2 * programs, np.float32)
    run(first_bound_across_iterations, (programs,), x, y, n, every)
    for pid in range(programs):
        v, w = np.float32(0), np.float32(0)
        for j in range(n):
            if j % every == 0:
                v = x[pid * n + j]
            w = np.float32(w + v)
        assert y[2 * pid:2 * pid + 2].tolist() == [v, w]


@tk.kernel
def bound_then_break(X, Y, n):
    pid = tk.program_id(0)
    for _ in tk.range(0, n):
        v = tk.load(X, pid) + 1.0
        break
    tk.store(Y, pid, v)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_name_bound_before_a_break_survives_the_loop(n):
    x = rng_for("brk-bound", n).standard_normal(4).astype(np.float32)
    y = poison(4, np.float32)
    run(bound_then_break, (4,), x, y, n)
    assert y.tolist() == (x + np.float32(1)).tolist()


def test_a_name_bound_only_in_skipped_code_is_an_error_at_its_read():
    @tk.kernel
    def k(X, Y, n):
        pid = tk.program_id(0)
        with tk.when(n >= 2):
            for _ in tk.static_range(1):
                return
            v = tk.load(X, pid)  # never traced: the loop above always returns
        tk.store(Y, pid, v)  # <-- unbound-read

    with tk.knobs.override(interpret=True), expect("while kernel `k` was traced",
                                                   "unbound-read", hint="bind it before"):
        k[1](np.zeros(4, np.float32), np.zeros(4, np.float32), 3)
