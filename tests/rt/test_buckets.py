"""Shape buckets: a specialization holds exactly the facts code generation uses.

Arguments that differ only in a fact the compiler uses (pointer alignment, unit stride of
the last dim, 16-byte row strides, index width) get different specializations, and the
code differs; arguments that differ in nothing it uses (other pointers, sizes, values)
share one. The key's cost per call is measured by ``bench/dispatch.py``.
"""

from __future__ import annotations

import numpy as np

import tilekit as tk
from tilekit.lang.kernel import TensorSpec, stride_facts
from tilekit.rt.launcher import specialize_arguments


@tk.kernel
def rows(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    Y.tile((1, N), (r, 0)).store(X.tile((1, N), (r, 0)).load() * 2)


def spec_of(x: np.ndarray, y: np.ndarray, n: int = 64):
    spec, _ = specialize_arguments(rows, rows.bind((x, y), {"N": n}, None), None)
    return spec


def facts(spec, name: str = "X") -> TensorSpec:
    return dict(spec.args)[name]


def test_differing_only_in_unused_values_share_a_bucket():
    a = np.zeros((8, 64), np.float32)
    b = np.ones((100, 64), np.float32)  # other sizes, other pointer, same facts
    assert spec_of(a, a.copy()) == spec_of(b, b.copy())


def test_each_used_fact_is_its_own_bucket():
    base = np.zeros((8, 128), np.float32)
    contiguous = spec_of(base[:, :64], base[:, :64].copy())
    strided = spec_of(base[:, ::2], base[:, :64].copy())  # last stride 2
    ragged_rows = spec_of(np.zeros((8, 65), np.float32)[:, :64], base[:, :64].copy())
    shifted = spec_of(base.reshape(-1)[1:513].reshape(8, 64), base[:, :64].copy())
    assert facts(contiguous) == TensorSpec(tk.float32, 2, tk.int32, True, True, True)
    assert not facts(strided).unit_inner and facts(strided).strides16
    assert facts(ragged_rows).unit_inner and not facts(ragged_rows).strides16  # 260-byte rows
    assert not facts(shifted).aligned16
    assert len({contiguous, strided, ragged_rows, shifted}) == 4


def test_the_compiler_uses_the_facts():
    """The bucket with unit stride and 16-byte rows compiles to straight-line vector
    accesses without the run-time contiguity and alignment checks the general one needs."""
    from tilekit.codegen import compile_module

    base = np.zeros((8, 128), np.float32)
    fast = rows.trace(base[:, :64], base[:, :64].copy(), N=64)
    general = rows.trace(base[:, ::2], np.zeros((8, 65), np.float32)[:, :64], N=64)
    ptx_fast = compile_module(fast, "sm_90a").binary.decode()
    ptx_general = compile_module(general, "sm_90a").binary.decode()
    assert ptx_fast != ptx_general
    assert ptx_fast.count("setp") < ptx_general.count("setp")
    assert "ld.global.v4" in ptx_fast


def test_stride_facts_of_degenerate_views():
    assert stride_facts((), (), 4) == (True, True)
    assert stride_facts((1, 5), (7, 1), 4) == (True, True)  # a size-1 dim's stride is free
    assert stride_facts((3, 1), (5, 9), 4) == (True, False)
    assert stride_facts((3, 4), (0, 1), 2) == (True, True)  # broadcast rows
