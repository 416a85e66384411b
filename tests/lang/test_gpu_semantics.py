"""Where a GPU could part from the interpreter's in-order semantics, on both backends
(regressions from a review of the code generator):

- a program reads what its own threads wrote to global memory earlier (a transpose
  through a scratch tensor: other threads wrote the elements a thread reads back);
- a loop whose 32-bit induction variable would pass 2^31 - 1 ends, as with Python ints;
- ``X.stride(i)`` is the launch's stride, not what the compiler may assume of it;
- a reduction's result is the same bits in every thread (max of +0 and -0).
"""

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tests.lang import kernels as K

pytestmark = pytest.mark.usefixtures("backend")


@tk.kernel
def through_global(X, T, Y, N: tk.constexpr):
    r = tk.arange(N)
    tk.store(T, r[:, None] * N + r[None, :], tk.load(X, r[:, None] * N + r[None, :]))
    y = tk.load(T, r[None, :] * N + r[:, None])  # written by other threads just before
    tk.store(Y, r[:, None] * N + r[None, :], y)
    tk.store(T, r[:, None] * N + r[None, :], y + 1)  # again, after the read
    first = tk.load(T, 0)  # a scalar every thread reads
    tk.store(Y, N * N, first)


def test_a_program_reads_its_own_writes():
    n = 32
    x = np.random.default_rng(1).standard_normal(n * n).astype(np.float32)
    t = np.full(n * n, np.nan, np.float32)
    y = np.full(n * n + 1, np.nan, np.float32)
    through_global[1](x, t, y, N=n)
    np.testing.assert_array_equal(y[:-1].reshape(n, n), x.reshape(n, n).T)
    assert y[-1] == x[0] + 1


def test_loop_ends_at_the_top_of_int32():
    lo, hi, step = 2**31 - 10, 2**31 - 1, 4  # the next value, 2^31 + 2, does not fit
    iv = np.full(8, -1, np.int32)
    count, last = np.zeros(1, np.int32), np.zeros(1, np.int32)
    K.trip_record[1](iv, count, last, lo, hi, step, CAP=8)
    assert count[0] == 3 and last[0] == 2**31 - 2
    assert iv[:3].tolist() == [2**31 - 10, 2**31 - 6, 2**31 - 2]


@tk.kernel
def strides_of(X, Out):
    tk.store(Out, 0, X.stride(0))
    tk.store(Out, 1, X.stride(1))


def test_stride_is_the_launch_value():
    # One row of a 7-wide matrix: the compiler may treat the row stride as a multiple of
    # 16 bytes (a dim of extent 1), but X.stride(0) is still 7.
    x = np.zeros((8, 7), np.float32)[:1, :5]
    out = np.full(2, -1, np.int32)
    strides_of[1](x, out)
    assert out.tolist() == [7, 1]


@tk.kernel
def max_everywhere(X, Out, N: tk.constexpr):
    x = tk.load(X, tk.arange(N))
    tk.store(Out, tk.arange(N), tk.zeros((N,), tk.float32) + 1.0 / tk.max(x))


def test_reduction_result_is_the_same_in_every_thread():
    n = 256
    x = np.zeros(n, np.float32)
    x[1::2] = -0.0
    out = np.full(n, np.nan, np.float32)
    max_everywhere[1](x, out, N=n)
    assert np.isinf(out).all() and len(set(np.signbit(out).tolist())) == 1
