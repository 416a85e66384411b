"""tk.device_print on both backends: every element's value reaches stdout with the prefix.

The interpreter prints one line per program (numpy's array text); the GPU prints one
line per element (``pid (x, y, z) idx (i) prefix value``, CUDA's device printf, flushed
when the launch is synchronized). The test reads file descriptor 1, where both land.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tilekit as tk

pytestmark = pytest.mark.usefixtures("backend")


@tk.kernel
def print_tile(X, N: tk.constexpr):
    x = tk.load(X, tk.arange(N))
    tk.device_print("x=", x)


@tk.kernel
def print_scalar(X):
    tk.device_print("first=", tk.load(X, 0) + tk.program_id(0))


def test_device_print_tile(capfd):
    n = 37  # ragged: 128 threads hold 37 elements, the rest are replicas that print nothing
    x = (np.arange(n, dtype=np.int32) * 7 + 1000)
    print_tile[1](x, N=n)
    out = capfd.readouterr().out
    assert "x=" in out
    printed = {int(v) for v in re.findall(r"\b(\d{4})\b", out)}
    assert printed == set(x.tolist())


def test_device_print_scalar_per_program(capfd):
    x = np.array([5000], dtype=np.int32)
    print_scalar[3](x)
    out = capfd.readouterr().out
    values = [int(v) for v in re.findall(r"first=\s*(\d+)", out)]
    assert sorted(values) == [5000, 5001, 5002]  # once per program, not per thread
