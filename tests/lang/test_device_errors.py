"""Errors raised while a kernel runs, on both backends, at the user's line: a failed
``tk.device_assert`` and a ``tk.range`` with a runtime step of 0 (which would never end:
the GPU skips the loop and reports it through the status word instead of hanging)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tilekit as tk
from tilekit.errors import ExecutionError

pytestmark = pytest.mark.usefixtures("backend")


@tk.kernel
def loop_with_step(Out, step):
    acc = tk.zeros((), tk.int32)
    for i in tk.range(0, 10, step):  # <-- the loop
        acc += i
    tk.store(Out, 0, acc)


@tk.kernel
def checked(X, N: tk.constexpr):
    x = tk.load(X, tk.arange(N))
    tk.device_assert(x >= 0, "x must be non-negative")  # <-- the assert


def _line(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def test_zero_step_loop_is_an_error_at_its_line():
    out = np.zeros(1, np.int32)
    loop_with_step[1](out, 3)
    assert out[0] == 0 + 3 + 6 + 9
    with pytest.raises(ExecutionError, match="loop step is 0") as err:
        loop_with_step[1](out, 0)
    assert err.value.loc is not None and err.value.loc.line == _line(loop_with_step, "the loop")


def test_device_assert_names_its_line():
    x = np.arange(37, dtype=np.int32)
    checked[2](x, N=37)
    x[20] = -1
    with pytest.raises(ExecutionError, match="x must be non-negative") as err:
        checked[2](x, N=37)
    assert err.value.loc is not None and err.value.loc.line == _line(checked, "the assert")
