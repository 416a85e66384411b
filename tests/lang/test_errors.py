"""Bad kernels and bad launches: the error class, the message, the line it names.

Each case marks the line the error must point at with a trailing
``# <-- tag`` comment; ``expect`` finds that line in this file, so the tests
keep working when lines move. Besides the class and a meaningful part of the
message, every case checks the rendered text: ``file:line:col: error: ...``,
then the user's source line, then a caret under the reported column.
"""

# Kernels here compute values they never use, on purpose (the error comes first).
# ruff: noqa: F841, B007

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import tilekit as tk
from tilekit.errors import (
    ExecutionError,
    LaunchError,
    MemoryAccessError,
    TilekitError,
    TraceError,
)

_THIS = os.path.abspath(__file__)
_LINES = Path(_THIS).read_text().splitlines()


def line_of(tag: str) -> int:
    """The 1-based line of this file that ends with ``# <-- tag``."""
    hits = [i + 1 for i, text in enumerate(_LINES) if text.rstrip().endswith(f"# <-- {tag}")]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return hits[0]


def check_rendered(err: TilekitError, line: int) -> None:
    """``str(err)`` starts at ``file:line``, shows that source line and a caret under it."""
    loc = err.loc
    assert loc is not None
    text = str(err).splitlines()
    col = f":{loc.col + 1}" if loc.col is not None else ""
    assert text[0] == f"{_THIS}:{line}{col}: error: {err.message}"
    assert text[1] == "    " + _LINES[line - 1]
    if loc.col is not None:
        caret = text[2]
        assert caret.strip().startswith("^"), caret
        assert caret.index("^") == 4 + loc.col
        assert set(caret.strip()) <= {"^", "~"}
    for hint in err.hints:
        assert f"hint: {hint}" in text


@contextmanager
def expect(cls: type[TilekitError], message: str, tag: str,
           hint: str | None = None) -> Iterator[None]:
    """The block raises exactly ``cls`` with ``message`` in its message, pointing at the
    line marked ``tag`` in this file (and a hint containing ``hint``)."""
    with pytest.raises(TilekitError) as info:
        yield
    err = info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert message in err.message, str(err)
    assert err.loc is not None, str(err)
    assert err.loc.file == _THIS, str(err)
    assert err.loc.line == line_of(tag), str(err)
    if hint is not None:
        assert any(hint in h for h in err.hints), str(err)
    check_rendered(err, err.loc.line)


# --- kernels shared by the launch errors -----------------------------------------------------


@tk.kernel
def copy(X: tk.Tensor, Y: tk.Tensor, N: tk.constexpr):
    i = tk.program_id(0)
    Y.tile((N,), (i,)).store(X.tile((N,), (i,)).load())


@tk.kernel
def scale(X: tk.Tensor, Y: tk.Tensor, s, N: tk.constexpr):
    offs = tk.program_id(0) * N + tk.arange(N)
    v = tk.load(X, offs)  # <-- oob-load
    tk.store(Y, offs, v * s)  # <-- oob-store


def _vec(n: int = 8, dtype: type = np.float32) -> np.ndarray:
    return np.arange(n).astype(dtype)


# --- launch: arguments ----------------------------------------------------------------------


def test_too_many_arguments() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "too many positional arguments", "too-many",
                hint="(X: tensor, Y: tensor, N: constexpr)"):
        copy[1](x, y, 8, 9)  # <-- too-many


def test_missing_argument() -> None:
    x = _vec()
    with expect(LaunchError, "missing a required argument: 'Y'", "missing-arg"):
        copy[1](x, N=8)  # <-- missing-arg


def test_unknown_keyword() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "unexpected keyword argument 'BLOCK'", "unknown-kw",
                hint="N: constexpr"):
        copy[1](x, y, N=8, BLOCK=8)  # <-- unknown-kw


def test_missing_constexpr() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "missing a required argument: 'N'", "missing-constexpr",
                hint="N: constexpr"):
        copy[1](x, y)  # <-- missing-constexpr


def test_array_as_constexpr() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "`N` is a tk.constexpr, so it must be a compile-time constant",
                "array-constexpr", hint="remove the tk.constexpr annotation"):
        copy[1](x, y, N=x)  # <-- array-constexpr


def test_scalar_for_a_tensor_parameter() -> None:
    y = _vec()
    with expect(LaunchError, "`X` is a tk.Tensor parameter, got the scalar 3.0", "scalar-tensor"):
        copy[1](3.0, y, N=8)  # <-- scalar-tensor


def test_array_for_a_scalar_parameter() -> None:
    x, y = _vec(), _vec()

    @tk.kernel
    def k(X: tk.Tensor, n: int):
        tk.store(X, tk.arange(1), n)

    with expect(LaunchError, "`n` is a scalar parameter, got ndarray", "array-scalar",
                hint="annotate it tk.Tensor"):
        k[1](x, y)  # <-- array-scalar


def test_runtime_scalar_used_as_a_tensor() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        v = tk.load(n, tk.arange(4))  # <-- scalar-as-tensor

    with expect(TraceError, "must be a tensor parameter of the kernel, got a runtime i32 value",
                "scalar-as-tensor"):
        k[1](_vec(), 3)


def test_list_argument() -> None:
    y = _vec()
    with expect(LaunchError, "must be an array (numpy, torch, cupy or DLPack), got list",
                "list-arg", hint="np.asarray"):
        copy[1]([1.0, 2.0], y, N=8)  # <-- list-arg


def test_unsupported_dtype_complex64() -> None:
    x, y = _vec().astype(np.complex64), _vec()
    with expect(LaunchError, "element type complex64, which tilekit does not support",
                "complex", hint="astype(np.float32)"):
        copy[1](x, y, N=8)  # <-- complex


def test_misaligned_view() -> None:
    raw = np.zeros(4 * 8 + 1, dtype=np.uint8)
    x = raw[1:].view(np.float32)  # starts one byte past an aligned address
    assert not x.flags.aligned
    with expect(LaunchError, "`X` is not aligned to its element size", "misaligned",
                hint="np.ascontiguousarray(X)"):
        copy[1](x, _vec(), N=8)  # <-- misaligned
    with pytest.raises(LaunchError, match="starts 1 byte past a multiple of 4"):
        copy[1](x, _vec(), N=8)


def test_stride_not_a_multiple_of_the_element_size() -> None:
    records = np.zeros(8, dtype=[("a", np.float32), ("b", np.uint8)])  # 5-byte records
    with expect(LaunchError, "strides (5,) bytes that are not multiples of its element size 4",
                "odd-stride", hint="np.ascontiguousarray(X)"):
        copy[1](records["a"], _vec(), N=8)  # <-- odd-stride


def test_read_only_array_written_by_the_kernel() -> None:
    y = _vec()
    y.flags.writeable = False
    with expect(LaunchError, "kernel `copy` writes to `Y`, but that array is read-only",
                "read-only", hint="Y.copy()"):
        copy[1](_vec(), y, N=8)  # <-- read-only


def test_read_only_array_that_is_only_read_is_fine() -> None:
    x, y = _vec(), np.zeros(8, np.float32)
    x.flags.writeable = False
    copy[1](x, y, N=8)
    np.testing.assert_array_equal(y, x)


# --- launch: the grid -----------------------------------------------------------------------


def test_negative_grid() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "grid sizes must be non-negative ints, got (4, -1)", "grid-neg",
                hint="tk.cdiv"):
        copy[4, -1](x, y, N=8)  # <-- grid-neg


def test_empty_grid() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "the grid must be an int or a tuple of 1 to 3 ints, got ()",
                "grid-0d"):
        copy[()](x, y, N=8)  # <-- grid-0d


def test_grid_with_four_dims() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "1 to 3 ints, got (1, 1, 1, 1)", "grid-4d"):
        copy[1, 1, 1, 1](x, y, N=8)  # <-- grid-4d


def test_float_grid() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "1 to 3 ints, got 1.5", "grid-float"):
        copy[1.5](x, y, N=8)  # <-- grid-float
    with expect(LaunchError, "grid sizes must be non-negative ints, got (2.0,)", "grid-float2"):
        copy[(2.0,)](x, y, N=8)  # <-- grid-float2


def test_grid_function_returning_garbage() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "1 to 3 ints, got 'rows'", "grid-fn"):
        copy[lambda meta: "rows"](x, y, N=8)  # <-- grid-fn


def test_kernel_called_without_a_grid() -> None:
    x, y = _vec(), _vec()
    with expect(LaunchError, "kernel `copy` was called without a grid", "no-grid",
                hint="copy[grid](...)"):
        copy(x, y, N=8)  # <-- no-grid


def test_tk_function_outside_a_kernel() -> None:
    with expect(TraceError, "can only be used inside a @tilekit.kernel function", "outside",
                hint="kern[grid](args...)"):
        tk.arange(4)  # <-- outside


def test_kernel_with_var_keyword_parameters() -> None:
    with expect(TraceError, "kernel `k` may not take *args or **kwargs", "var-kw"):
        @tk.kernel  # <-- var-kw
        def k(X, **extra):
            pass


# --- tracing: compile-time values ----------------------------------------------------------


def test_arange_of_a_runtime_value() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        r = tk.arange(n)  # <-- arange-n

    with expect(TraceError, "the end of tk.arange must be known when compiling, but it is a "
                "runtime i32", "arange-n", hint="tk.constexpr"):
        k[1](_vec(), 8)


def test_zeros_of_a_runtime_shape() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        r = tk.zeros((n,))  # <-- zeros-n

    with expect(TraceError, "a tile shape must be known when compiling, but it contains a "
                "runtime i32", "zeros-n", hint="tk.constexpr"):
        k[1](_vec(), 8)


def test_tile_view_of_a_runtime_shape() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        v = X.tile((n, 4), (0, 0))  # <-- tile-n

    with expect(TraceError, "a tile shape must be known when compiling, but it contains a "
                "runtime i32", "tile-n", hint="tk.constexpr"):
        k[1](np.zeros((4, 4), np.float32), 8)


def test_tile_shape_that_is_a_tile() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        v = X.tile(tk.arange(4), (0, 0))  # <-- tile-shape-tile

    with expect(TraceError, "a tile shape must be a compile-time tuple of ints", "tile-shape-tile"):
        k[1](np.zeros((4, 4), np.float32))


def test_tile_shape_of_floats() -> None:
    @tk.kernel
    def k(X: tk.Tensor, S: tk.constexpr):
        v = X.tile(S, (0, 0))  # <-- tile-shape-float

    with expect(TraceError, "a tile shape must be non-negative ints, got (1.5, 2)",
                "tile-shape-float"):
        k[1](np.zeros((4, 4), np.float32), S=(1.5, 2))


def test_tile_shape_of_the_wrong_rank() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        v = X.tile((4,), (0, 0))  # <-- tile-rank

    with expect(TraceError, "`X` has rank 2, but the tile shape (4,) has rank 1", "tile-rank"):
        k[1](np.zeros((4, 4), np.float32))


def test_static_range_of_a_runtime_value() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        for i in tk.static_range(n):  # <-- static-range
            pass

    with expect(TraceError, "tk.static_range needs compile-time ints", "static-range",
                hint="use tk.range"):
        k[1](_vec(), 3)


def test_static_assert() -> None:
    @tk.kernel
    def k(X: tk.Tensor, N: tk.constexpr):
        tk.static_assert(N % 16 == 0, "N must be a multiple of 16")  # <-- static-assert

    with expect(TraceError, "static assertion failed: N must be a multiple of 16",
                "static-assert"):
        k[1](_vec(), N=8)


# --- tracing: shapes and types --------------------------------------------------------------


def test_broadcast_failure() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.arange(4)
        b = tk.arange(3)
        c = a + b  # <-- broadcast

    with expect(TraceError, "shapes (4,) and (3,) cannot be broadcast together in `+`",
                "broadcast", hint="x[:, None]"):
        k[1](_vec())


def test_dot_inner_dimensions() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.zeros((4, 8))
        b = tk.zeros((4, 8))
        c = tk.dot(a, b)  # <-- dot

    with expect(TraceError, "tk.dot inner dimensions differ: (4, 8) @ (4, 8)", "dot"):
        k[1](_vec())


def test_dot_accumulator_shape() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.zeros((4, 8))
        c = tk.dot(a, a.T, tk.zeros((3, 3)))  # <-- dot-acc

    with expect(TraceError, "tk.dot accumulator has shape (3, 3), expected (4, 4)", "dot-acc"):
        k[1](_vec())


def test_constant_that_does_not_fit_int8() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        x = tk.load(X, tk.arange(4))
        y = x + 300  # <-- int8-300

    with expect(TraceError, "the constant 300 does not fit in tk.int8", "int8-300",
                hint="[-128, 127]"):
        k[1](np.zeros(8, np.int8))


def test_fractional_constant_for_an_integer_tile() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        y = tk.full((4,), 2.7, tk.int32)  # <-- frac

    with expect(TraceError, "the constant 2.7 is not an integer, so it cannot be a tk.int32",
                "frac"):
        k[1](np.zeros(8, np.int32))


def test_constant_too_large_for_full() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        y = tk.full((4,), 1e10, tk.int32)  # <-- big-full

    with expect(TraceError, "does not fit in tk.int32", "big-full"):
        k[1](np.zeros(8, np.int32))


def test_tensor_method_on_a_scalar_parameter() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        t = n.tile((4,), 0)  # <-- scalar-tile

    with expect(TraceError, "a runtime scalar has no attribute `tile`", "scalar-tile",
                hint="tensors are kernel parameters passed an array"):
        k[1](np.zeros(8, np.int32), 3)


def test_bitwise_op_on_floats() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        x = tk.load(X, tk.arange(4))
        y = x & 1  # <-- float-and

    with expect(TraceError, "`&` needs integer or bool operands, got tk.float32",
                "float-and", hint=".bitcast()"):
        k[1](_vec())


def test_in_place_update_changes_shape() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.zeros((4,))
        a += tk.zeros((2, 4))  # <-- iadd-shape

    with expect(TraceError, "in-place update changes this tile from tile<4xf32> to "
                "tile<2x4xf32>", "iadd-shape", hint="x = x + y"):
        k[1](_vec())


def test_string_dtype() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.arange(4).to("float32")  # <-- str-dtype

    with expect(TraceError, "expected a tilekit dtype such as tk.float32, got 'float32'",
                "str-dtype"):
        k[1](_vec())


def test_tensor_used_as_a_value() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        y = tk.exp(X)  # <-- tensor-value

    with expect(TraceError, "tensor `X` used as a value", "tensor-value", hint="tk.load"):
        k[1](_vec())


def test_tensor_indexed_like_an_array() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        y = X[0]  # <-- tensor-index

    with expect(TraceError, "tensor `X` cannot be indexed like an array", "tensor-index",
                hint="tk.load(X, offsets)"):
        k[1](_vec())


def test_other_without_mask() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        v = tk.load(X, tk.arange(4), other=1.0)  # <-- other

    with expect(TraceError, "tk.load got `other` without a `mask`", "other", hint="mask=..."):
        k[1](_vec())


def test_error_in_a_helper_names_the_helper_line() -> None:
    def helper(t):
        return t + tk.arange(3)  # <-- helper

    @tk.kernel
    def k(X: tk.Tensor):
        y = helper(tk.arange(4))

    with expect(TraceError, "cannot be broadcast together", "helper"):
        k[1](_vec())


# --- tracing: Python control flow on runtime values -----------------------------------------


def test_python_if_on_a_runtime_tile() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        pid = tk.program_id(0)
        if pid > 0:  # <-- if
            tk.store(X, pid, 1.0)

    with expect(TraceError, "a runtime scalar value was used as a Python condition", "if",
                hint="tk.where(cond, a, b)"):
        k[1](_vec())
    with pytest.raises(TraceError) as info:
        k[1](_vec())
    hints = "\n".join(info.value.hints)
    assert "with tk.when(cond):" in hints


def test_and_or_on_tiles() -> None:
    @tk.kernel
    def k_and(X: tk.Tensor):
        a = tk.arange(4)
        m = (a > 0) and (a < 3)  # <-- and

    @tk.kernel
    def k_or(X: tk.Tensor):
        a = tk.arange(4)
        m = (a > 0) or (a < 3)  # <-- or

    with expect(TraceError, "used as a Python condition", "and", hint="`&`, `|` and `~`"):
        k_and[1](_vec())
    with expect(TraceError, "used as a Python condition", "or", hint="`&`, `|` and `~`"):
        k_or[1](_vec())


def test_int_of_a_tile() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        pid = tk.program_id(0)
        n = int(pid)  # <-- int

    with expect(TraceError, "int() needs a compile-time value, but this is a runtime i32", "int",
                hint="tk.constexpr"):
        k[1](_vec())


def test_iterating_a_tile() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.arange(4)
        for v in a:  # <-- iter
            pass

    with expect(TraceError, "cannot iterate over a tile while tracing", "iter",
                hint="tk.static_range"):
        k[1](_vec())


def test_break_inside_tk_range_without_source() -> None:
    """Where the rewrite cannot run (no source: the interactive prompt, exec), a `break` out
    of a runtime loop leaves its scope open, an error naming the loop. (With source, `break`
    means what Python means: tests/lang/test_control_flow.py.)"""
    namespace: dict = {"tk": tk}
    exec(compile("def k(X, n):\n"
                 "    for i in tk.range(0, n):\n"
                 "        break\n", "<typed in>", "exec"), namespace)
    k = tk.kernel(namespace["k"])
    with pytest.raises(TraceError, match="the `tk.range` loop starting here was left early"):
        k[1](_vec(), 3)


def test_value_computed_in_a_loop_stored_in_a_list() -> None:
    """A tile computed in a loop and kept only in a list made before it cannot be carried
    (no name is rebound): using it after the loop is an error at the use."""
    @tk.kernel
    def k(X: tk.Tensor, n):
        kept = [None]
        for i in tk.range(0, n):  # <-- loop-escape-loop
            kept[0] = tk.zeros((4,)) + i
        tk.store(X, tk.arange(4), kept[0])  # <-- loop-escape

    with expect(TraceError, "`kept[0]` was computed inside a `tk.range` loop", "loop-escape",
                hint="assign a tile to `kept[0]` first"):
        k[1](_vec(), 3)
    with pytest.raises(TraceError, match=f"loop \\(line {line_of('loop-escape-loop')}\\)"):
        k[1](_vec(), 3)


def test_value_computed_in_when_stored_in_a_dict() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        kept = {}
        kept["t"] = tk.zeros((4,))
        with tk.when(n > 0):
            kept["t"] = tk.ones((4,))
        tk.store(X, tk.arange(4), kept["t"])

    y = np.zeros(4, np.float32)
    with tk.knobs.override(interpret=True):
        k[1](y, 3)
    assert y.tolist() == [1.0] * 4  # a tile in a dict is carried like a name


def test_loop_carried_value_changes_dtype() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        s = tk.zeros((4,), tk.int32)
        for i in tk.range(0, n):  # <-- dtype-loop
            s = s + 0.5  # <-- carried-dtype

    with expect(TraceError, "`s` is tile<4xi32> before the `tk.range` loop", "carried-dtype",
                hint=".to(...)"):
        k[1](_vec(), 3)
    with pytest.raises(TraceError, match=f"loop \\(line {line_of('dtype-loop')}\\) and "
                       "tile<4xf32> inside it"):
        k[1](_vec(), 3)


def test_loop_carried_value_changes_shape() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        s = tk.zeros((), tk.float32)
        for i in tk.range(0, n):
            s = tk.zeros((4,))  # <-- carried-shape

    with expect(TraceError, "`s` is f32 before the `tk.range` loop", "carried-shape"):
        k[1](_vec(), 3)


def test_when_value_changes_dtype() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        s = tk.zeros((4,), tk.int32)
        with tk.when(n > 0):
            s = s + 0.5  # <-- when-dtype

    with expect(TraceError, "`s` is tile<4xi32> before the `tk.when` block", "when-dtype"):
        k[1](_vec(), 3)


def test_when_on_a_tile_condition() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.arange(4)
        with tk.when(a > 0):  # <-- when-tile
            pass

    with expect(TraceError, "tk.when needs a scalar condition, got a tile of shape (4,)",
                "when-tile", hint="tk.where(cond, a, b)"):
        k[1](_vec())


def test_when_on_an_int_condition() -> None:
    @tk.kernel
    def k(X: tk.Tensor, n):
        with tk.when(n):  # <-- when-int
            pass

    with expect(TraceError, "tk.when needs a bool condition, got tk.int32", "when-int",
                hint="`n != 0`"):
        k[1](_vec(), 3)


def test_kernel_returning_a_value() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        pid = tk.program_id(0)
        return pid * 2  # <-- return

    with expect(TraceError, "kernel `k` returned a value", "return", hint="tk.store"):
        k[1](_vec())


# --- misuse: numbers that do not fit, numpy on tiles, tiles too large (issue 27) --------------


def _halves(n: int = 4) -> np.ndarray:
    return np.ones(n, np.float16)


def test_float16_times_a_literal_that_would_be_inf() -> None:
    @tk.kernel
    def k(X: tk.Tensor, Y: tk.Tensor):
        x = tk.load(X, tk.arange(4))
        tk.store(Y, tk.arange(4), x * 1e6)  # <-- f16-1e6

    y = np.zeros(4, np.float16)
    with expect(TraceError, "the constant 1000000.0 does not fit in tk.float16: it would be inf "
                "(the largest finite tk.float16 is 65504)", "f16-1e6", hint="x.to(tk.float32)"):
        k[1](_halves(), y)
    assert not y.any()


# Every place a Python number meets a tile or takes a tensor's type checks that it fits; each
# lambda's line is where the error must point.
_OVERFLOWING = {
    "left": lambda X, x: 1e6 * x,  # <-- lit-left
    "int literal": lambda X, x: x + 70000,  # <-- lit-int
    "where": lambda X, x: tk.where(x > 0, x, -1e6),  # <-- lit-where
    "full": lambda X, x: tk.full((4,), 1e5, tk.float16),  # <-- lit-full
    "full_like": lambda X, x: tk.full_like(x, 1e5),  # <-- lit-full-like
    "maximum": lambda X, x: tk.maximum(x, 1e6),  # <-- lit-maximum
    "fma": lambda X, x: tk.fma(x, 2, 1e6),  # <-- lit-fma
    "store": lambda X, x: tk.store(X, tk.arange(4), 1e6),  # <-- lit-store
    "tile store": lambda X, x: X.tile((4,), (0,)).store(1e6),  # <-- lit-tile-store
    "tile other": lambda X, x: X.tile((4,), (0,)).load(other=-1e6),  # <-- lit-tile-other
    "atomic": lambda X, x: tk.atomic_add(X, tk.arange(4), 1e6),  # <-- lit-atomic
    "other": lambda X, x: tk.load(X, tk.arange(4), mask=x > 0, other=1e6),  # <-- lit-other
}


@pytest.mark.parametrize("where", list(_OVERFLOWING))
def test_overflowing_float_literal_everywhere(where: str) -> None:
    use = _OVERFLOWING[where]

    @tk.kernel
    def k(X: tk.Tensor):
        use(X, tk.load(X, tk.arange(4)))

    tag = {"left": "lit-left", "int literal": "lit-int", "where": "lit-where", "full": "lit-full",
           "full_like": "lit-full-like", "maximum": "lit-maximum", "fma": "lit-fma",
           "store": "lit-store", "tile store": "lit-tile-store", "tile other": "lit-tile-other",
           "atomic": "lit-atomic", "other": "lit-other"}[where]
    with expect(TraceError, "does not fit in tk.float16: it would be inf", tag):
        k[1](_halves())


def test_in_place_update_with_an_overflowing_literal() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        acc = tk.load(X, tk.arange(4))
        acc += 1e6  # <-- lit-iadd

    with expect(TraceError, "the constant 1000000.0 does not fit in tk.float16", "lit-iadd"):
        k[1](_halves())


def test_float32_and_bfloat16_literals_past_their_range() -> None:
    @tk.kernel
    def k(X: tk.Tensor, D: tk.constexpr):
        x = tk.load(X, tk.arange(4)).to(D)
        y = x * 1e39  # <-- lit-1e39

    with expect(TraceError, "the constant 1e+39 does not fit in tk.float32: it would be inf",
                "lit-1e39", hint="x.to(tk.float64)"):
        k[1](_halves(), D=tk.float32)
    with expect(TraceError, "does not fit in tk.bfloat16", "lit-1e39", hint="x.to(tk.float32)"):
        k[1](_halves(), D=tk.bfloat16)


def test_float_literal_limit_is_where_rounding_gives_inf() -> None:
    @tk.kernel
    def k(X: tk.Tensor, D: tk.constexpr, LIT: tk.constexpr):
        y = tk.load(X, tk.arange(4)).to(D) - LIT  # <-- lit-edge

    largest_bf16 = (2 - 2**-7) * 2.0**127
    for dtype, fits, overflows in ((tk.float16, 65519.99, 65520.0),
                                   (tk.bfloat16, largest_bf16 + 2.0**118, largest_bf16 + 2.0**119)):
        assert k.trace(_halves(), D=dtype, LIT=fits) is not None
        assert k.trace(_halves(), D=dtype, LIT=-fits) is not None
        with expect(TraceError, f"does not fit in {dtype}: it would be inf", "lit-edge"):
            k[1](_halves(), D=dtype, LIT=-overflows)


def test_inf_nan_and_rounding_literals_are_allowed() -> None:
    @tk.kernel
    def k(X: tk.Tensor, Y: tk.Tensor):
        x = tk.load(X, tk.arange(4))
        big = tk.where(x > 1, float("inf"), x * 0 + 65519.0)  # 65504, the largest float16
        tiny = tk.full((4,), 1e-9, tk.float16)  # rounds to 0
        tk.static_assert(big.dtype is tk.float16)
        tk.store(Y, tk.arange(4), tk.where(x < 0, float("nan"), big + tiny))

    y = np.zeros(4, np.float16)
    k[1](np.array([0, 2, -1, 1], np.float16), y)
    np.testing.assert_array_equal(y, np.array([65504, np.inf, np.nan, 65504], np.float16))


def test_other_too_large_for_an_int16_tensor() -> None:
    @tk.kernel
    def k(X: tk.Tensor, Y: tk.Tensor):
        offs = tk.arange(4)
        v = tk.load(X, offs, mask=offs < 2, other=1e10)  # <-- other-int16
        tk.store(Y, offs, v)

    y = np.zeros(4, np.int16)
    with expect(TraceError, "the constant 10000000000.0 does not fit in tk.int16 (`other` takes "
                "the type of `X`)", "other-int16", hint="[-32768, 32767]"):
        k[1](np.ones(4, np.int16), y)
    assert not y.any()


def test_fractional_number_stored_to_an_int_tensor() -> None:
    @tk.kernel
    def k(Y: tk.Tensor):
        tk.store(Y, tk.arange(4), 2.5)  # <-- store-frac

    with expect(TraceError, "the constant 2.5 is not an integer, so it cannot be a tk.int32 "
                "(tk.store writes it to `Y`, of that type)", "store-frac"):
        k[1](np.zeros(4, np.int32))


def test_comparisons_with_numbers_outside_the_type_are_exact() -> None:
    @tk.kernel
    def k(H: tk.Tensor, U: tk.Tensor, Out: tk.Tensor):
        h = tk.load(H, tk.arange(8))
        u = tk.load(U, tk.arange(8))
        rows = [h < 1e6, h >= 70000, h == 1e6, h != 1e6, -1e6 < h, u < 256, u > -1, 300 > u]
        for i in tk.static_range(len(rows)):
            tk.store(Out, i * 8 + tk.arange(8), rows[i])

    h = np.array([0, 65504, np.inf, -np.inf, np.nan, -65504, 1, 0.1], np.float16)
    u = np.array([0, 255, 1, 2, 3, 128, 254, 7], np.uint8)
    out = np.zeros((8, 8), np.bool_)
    k[1](h, u, out)
    wide, uw = h.astype(np.float64), u.astype(np.int64)
    with np.errstate(invalid="ignore"):
        want = [wide < 1e6, wide >= 70000, wide == 1e6, wide != 1e6, -1e6 < wide, uw < 256,
                uw > -1, 300 > uw]
    np.testing.assert_array_equal(out, np.array(want))


def test_comparison_with_a_number_no_type_holds() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        m = tk.load(X, tk.arange(4)) > -1  # <-- cmp-u64

    with expect(TraceError, "the constant -1 does not fit in tk.uint64", "cmp-u64"):
        k[1](np.zeros(4, np.uint64))


def test_int32_times_float16_is_float16() -> None:
    # The README's rule (as PyTorch, JAX and Triton): an integer with a float gives the float.
    @tk.kernel
    def k(I: tk.Tensor, H: tk.Tensor, Y: tk.Tensor, WIDE: tk.constexpr):
        i = tk.load(I, tk.arange(4))
        h = tk.load(H, tk.arange(4))
        r = i.to(tk.float32) * h if WIDE else i * h
        tk.static_assert(r.dtype is (tk.float32 if WIDE else tk.float16))
        tk.store(Y, tk.arange(4), r)

    i = np.array([1, 100, 65504, 100000], np.int32)
    y = np.zeros(4, np.float32)
    k[1](i, _halves(), y, WIDE=False)
    np.testing.assert_array_equal(y, [1, 100, 65504, np.inf])
    k[1](i, _halves(), y, WIDE=True)
    np.testing.assert_array_equal(y, [1, 100, 65504, 100000])


_NUMPY_ON_TILES = {
    "np.exp": (lambda x: np.exp(x), "tk.exp(x)"),  # <-- np-exp
    "np.maximum": (lambda x: np.maximum(x, 0), "tk.maximum(a, b)"),  # <-- np-maximum
    "np.where": (lambda x: np.where(x > 0, x, 0), "tk.where(cond, a, b)"),  # <-- np-where
    "np.sum": (lambda x: np.sum(x, axis=0), "tk.sum(x, axis)"),  # <-- np-sum
    "np.add.reduce": (lambda x: np.add.reduce(x), "tk.sum(x, axis)"),  # <-- np-add-reduce
    "np.concatenate": (lambda x: np.concatenate([x, x]), "tilekit's functions"),  # <-- np-concat
}


@pytest.mark.parametrize("fn", list(_NUMPY_ON_TILES))
def test_numpy_function_on_a_tile_names_the_tk_function(fn: str) -> None:
    use, hint = _NUMPY_ON_TILES[fn]

    @tk.kernel
    def k(X: tk.Tensor):
        use(tk.load(X, tk.arange(4)))

    tag = {"np.exp": "np-exp", "np.maximum": "np-maximum", "np.where": "np-where",
           "np.sum": "np-sum", "np.add.reduce": "np-add-reduce",
           "np.concatenate": "np-concat"}[fn]
    with expect(TraceError, f"`{fn}` was given a tile, but numpy cannot compute on tiles", tag,
                hint=hint):
        k[1](_vec())


def test_tile_turned_into_a_numpy_array() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = np.asarray(tk.load(X, tk.arange(4)))  # <-- np-asarray

    with expect(TraceError, "a tile was turned into a numpy array", "np-asarray",
                hint="tk.device_print"):
        k[1](_vec())


def test_matmul_operator_on_tiles() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        a = tk.zeros((4, 4))
        c = a @ a  # <-- matmul-op

    with expect(TraceError, "`@` on tiles: tilekit's matrix product is tk.dot", "matmul-op",
                hint="tk.dot(a, b)"):
        k[1](_vec())


def test_numpy_scalars_in_arithmetic_are_weak_numbers() -> None:
    @tk.kernel
    def k(X: tk.Tensor, Y: tk.Tensor):
        x = tk.load(X, tk.arange(4))
        r = np.float32(2.0) * x + np.int64(1) - x * np.float64(0.5)
        tk.static_assert(r.dtype is tk.float16)
        tk.store(Y, tk.arange(4), r)

    y = np.zeros(4, np.float16)
    k[1](np.arange(4).astype(np.float16), y)
    np.testing.assert_array_equal(y, np.arange(4) * 1.5 + 1)


def test_tile_with_too_many_elements() -> None:
    @tk.kernel
    def k(X: tk.Tensor, N: tk.constexpr):
        z = tk.zeros((N, N))  # <-- huge-tile
        tk.store(X, tk.arange(4), tk.sum(z))

    with expect(TraceError, "a tile of shape (1048576, 1048576) has 1,099,511,627,776 elements; "
                "a tile may have at most 1,048,576 (2**20)", "huge-tile", hint="tk.range"):
        k[1](_vec(), N=2**20)


def test_tile_element_cap_is_exact() -> None:
    @tk.kernel
    def k(X: tk.Tensor, N: tk.constexpr):
        r = tk.arange(N) + 1  # <-- cap-edge

    assert k.trace(_vec(), N=2**20) is not None
    with expect(TraceError, "a tile of shape (1048577,) has 1,048,577 elements", "cap-edge"):
        k[1](_vec(), N=2**20 + 1)


def test_kernel_called_from_a_kernel() -> None:
    @tk.kernel
    def inner(X: tk.Tensor):
        tk.store(X, tk.arange(4), 1.0)

    @tk.kernel
    def outer(X: tk.Tensor):
        inner(X)  # <-- kernel-call

    @tk.kernel
    def outer_grid(X: tk.Tensor):
        inner[1](X)  # <-- kernel-launch

    with expect(TraceError, "kernel `outer` calls kernel `inner`, but a kernel cannot launch "
                "kernels", "kernel-call", hint="plain Python function (no @tk.kernel)"):
        outer[1](_vec())
    with expect(TraceError, "kernel `outer_grid` calls kernel `inner`", "kernel-launch",
                hint="traced inline"):
        outer_grid[1](_vec())


def test_unbounded_recursion_in_a_helper() -> None:
    def helper(x, depth):
        return helper(x + 1, depth + 1)  # <-- recursion

    @tk.kernel
    def k(X: tk.Tensor):
        tk.store(X, tk.arange(4), helper(tk.zeros((4,)), 0))

    with expect(TraceError, "`helper` recursed", "recursion", hint="compile-time value"):
        k[1](_vec())
    with pytest.raises(TraceError, match="levels deep while kernel `k` was traced, past "
                       "Python's recursion limit"):
        k[1](_vec())


def test_flat_offsets_on_a_strided_view() -> None:
    @tk.kernel
    def k(X: tk.Tensor, Y: tk.Tensor):
        offs = tk.arange(8)
        tk.store(Y, offs, tk.load(X, offs))  # <-- flat-strided

    big = np.arange(16, dtype=np.float32)
    with expect(MemoryAccessError, "element offset 1 is outside `X` of shape (8,) and strides "
                "(2,)", "flat-strided", hint="write `i * X.stride(0)`, or use a tile view"):
        k[1](big[::2], np.zeros(8, np.float32))
    with pytest.raises(MemoryAccessError) as info:
        k[1](big[::2], np.zeros(8, np.float32))
    assert not any("mask the access" in h for h in info.value.hints)


class _TorchLike:
    """Stands in for a torch tensor where torch is not installed: tilekit recognizes torch
    tensors by their module and ``data_ptr``."""

    __module__ = "torch.stand_in"

    def __init__(self, is_meta: bool, layout: str = "torch.strided") -> None:
        self.is_meta = is_meta
        self.layout = layout
        self.device = type("Device", (), {"type": "meta" if is_meta else "cpu", "index": None})()
        self.shape, self.dtype = (4,), "torch.float32"

    def data_ptr(self) -> int:
        return 0


def test_meta_tensor_argument() -> None:
    with expect(LaunchError, "argument `X` is a torch meta tensor: it has a shape and a dtype but "
                "no data", "meta", hint='torch.empty_like(X, device="cuda")'):
        copy[1](_TorchLike(is_meta=True), _vec(), N=8)  # <-- meta
    with expect(LaunchError, "argument `X` is a sparse_coo torch tensor", "sparse",
                hint="X.to_dense()"):
        copy[1](_TorchLike(False, "torch.sparse_coo"), _vec(), N=8)  # <-- sparse


def test_real_torch_meta_tensor() -> None:
    torch = pytest.importorskip("torch")
    with expect(LaunchError, "argument `X` is a torch meta tensor", "torch-meta"):
        copy[1](torch.empty(8, device="meta"), torch.zeros(8), N=8)  # <-- torch-meta


@pytest.mark.gpu
def test_meta_tensor_on_a_cuda_launch() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    y = torch.zeros(8, device="cuda")
    with expect(LaunchError, "argument `X` is a torch meta tensor", "cuda-meta"):
        copy[1](torch.empty(8, device="meta"), y, N=8)  # <-- cuda-meta
    assert not y.any()


# --- running: the interpreter's checks ------------------------------------------------------


def test_out_of_bounds_load() -> None:
    x = np.zeros(10, np.float32)
    with expect(MemoryAccessError, "`load` out of bounds in program (2, 0, 0): element offset "
                "10 (index (10,)) is outside `X` of shape (10,) (at position (2,) of the tile)",
                "oob-load",
                hint="mask the access"):
        scale[3](x, np.zeros(12, np.float32), 2.0, N=4)
    # The line named is the kernel's `tk.load`, not the launch.


def test_out_of_bounds_store() -> None:
    y = np.zeros(10, np.float32)
    with expect(MemoryAccessError, "`store` out of bounds in program (2, 0, 0): element offset "
                "10 (index (10,)) is outside `Y` of shape (10,)", "oob-store"):
        scale[3](np.zeros(12, np.float32), y, 2.0, N=4)
    assert y.tolist() == [0.0] * 10  # nothing of the faulting store landed


def test_out_of_bounds_between_rows_of_a_strided_view() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        rows = tk.arange(4)[:, None]
        cols = tk.arange(3)[None, :]
        v = tk.load(X, rows * X.stride(0) + cols)  # <-- oob-gap

    base = np.zeros((4, 8), np.float32)
    with expect(MemoryAccessError, "element offset 2 (index (0, 2)) is outside `X` of shape (4, 2) "
                "and strides (8, 1) (at position (0, 2) of the tile)", "oob-gap"):
        k[1](base[:, :2])


def test_integer_division_by_zero() -> None:
    @tk.kernel
    def k(X: tk.Tensor, d):
        q = tk.arange(4) // d  # <-- div0
        tk.store(X, tk.arange(4), q)

    with expect(ExecutionError, "integer division by zero in program (0, 0, 0)", "div0",
                hint="tk.where(d != 0, d, 1)"):
        k[1](_vec(), 0)


def test_integer_modulo_by_zero() -> None:
    @tk.kernel
    def k(X: tk.Tensor, d):
        tk.store(X, tk.arange(4), tk.arange(4) % (d - tk.program_id(0)))  # <-- mod0

    with expect(ExecutionError, "integer modulo by zero in program (1, 0, 0)", "mod0"):
        k[3](_vec(), 1)


def test_runtime_zero_step() -> None:
    @tk.kernel
    def k(X: tk.Tensor, step):
        for i in tk.range(0, 4, step):  # <-- zero-step
            pass

    with expect(ExecutionError, "loop step is 0 in program (0, 0, 0)", "zero-step"):
        k[1](_vec(), 0)


def test_failing_device_assert() -> None:
    @tk.kernel
    def k(X: tk.Tensor):
        v = tk.load(X, tk.arange(4))
        tk.device_assert(v < 2.0, "values must be below 2")  # <-- device-assert

    with expect(ExecutionError, "device assertion failed at element (2,): values must be below 2 "
                "(program (0, 0, 0))", "device-assert"):
        k[1](_vec())


# --- messages without a caret: where the source is gone -----------------------------------


def test_rendering_without_source_keeps_the_location() -> None:
    err = TraceError("bad", tk.errors.SourceLoc("/nonexistent/k.py", 3, 4, 6), ["try again"])
    assert str(err) == "/nonexistent/k.py:3:5: error: bad\nhint: try again"
