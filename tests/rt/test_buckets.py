"""Shape buckets: a variant holds exactly the facts code generation uses.

Arguments that differ only in a fact the compiler uses (pointer alignment, unit stride of
the last dim, 16-byte row strides, index width: the specialization; whether a size is a
multiple of the tile a tile view takes along it: the size facts) get different variants,
and the code differs; arguments that differ in nothing it uses (other pointers, sizes that
no tile view divides, values) share one. The key's cost per call is measured by
``bench/dispatch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tilekit as tk
from tilekit.lang.kernel import TensorSpec, stride_facts
from tilekit.rt import gpu
from tilekit.rt.launcher import Launch, specialize_arguments

from .fake_gpu import Driver, FakeTensor, use_fake_gpu


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


# --- size facts: which sizes are multiples of a tile view's tile --------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:  # type: ignore[misc]
    """The fake GPU (``fake_gpu``), with every slow-path launch recorded in ``slow``."""
    drv = use_fake_gpu(monkeypatch)
    drv.slow = []  # type: ignore[attr-defined]
    real = Launch._launch

    def slow(self: Launch, args: Any, kwargs: Any) -> None:
        drv.slow.append(args)  # type: ignore[attr-defined]
        real(self, args, kwargs)

    monkeypatch.setattr(Launch, "_launch", slow)
    rows._loaded.clear()
    yield drv
    rows._loaded.clear()


def matrix(rows_: int, cols: int, row_stride: int = 128, at: int = 0) -> FakeTensor:
    return FakeTensor((rows_, cols), strides=(row_stride, 1), ptr=0x7F00_0000_0000 + at)


def test_size_candidates_are_the_tile_views_extents():
    spec = spec_of(np.zeros((8, 64), np.float32), np.zeros((8, 64), np.float32), n=64)
    assert rows.size_candidates(spec) == (("X", 1, 64), ("Y", 1, 64))  # not dim 0: extent 1


def test_differing_only_in_a_used_size_fact_is_another_variant(fake: Driver) -> None:
    """Rows of 64 and of 65 columns (the same row stride: the same specialization) under
    a (1, 64) tile: whether the tile is in bounds along the columns is a fact of the call,
    so each gets its own kernel, on the slow path and on the fast path's key."""
    x64, y64 = matrix(8, 64), matrix(8, 64, at=0x10000)
    x65, y65 = matrix(8, 65), matrix(8, 65, at=0x10000)
    rows[8](x64, y64, N=64)
    rows[8](x65, y65, N=64)
    assert fake.loads == 2 and len(fake.slow) == 2
    first, second = fake.variants
    assert first.spec == second.spec and first.device == second.device
    assert first.divisible == {("X", 1, 64), ("Y", 1, 64)} and second.divisible == set()
    for x, y, variant in ((x64, y64, first), (x65, y65, second), (x64, y64, first)):
        rows[8](x, y, N=64)  # fast-path hits, each of its own variant's kernel
        assert fake.launches[-1]["function"] == rows._loaded[variant].function.handle
    assert fake.loads == 2 and len(fake.slow) == 2
    rows[8](matrix(8, 64), matrix(8, 65, at=0x10000), N=64)  # one fact of the two holds
    assert fake.variants[-1].divisible == {("X", 1, 64)} and len(fake.slow) == 3


def test_sizes_no_tile_view_divides_share_a_variant(fake: Driver) -> None:
    """8 rows or 100 under a (1, 64) tile: no tile view has a tile of more than one row,
    so the number of rows is in no fact, and both calls launch one kernel."""
    rows[8](matrix(8, 64), matrix(8, 64, at=0x10000), N=64)
    rows[100](matrix(100, 64), matrix(100, 64, at=0x10000), N=64)
    assert fake.loads == 1 and len(fake.slow) == 1  # the second call hit the fast path
    assert fake.launches[-1]["grid"] == (100, 1, 1)


def test_a_new_tile_size_widens_the_fast_paths_key(fake: Driver) -> None:
    """Another constexpr traces other tile views (other candidate facts): the fast path's
    key grows to cover them, and the variants of both tile sizes keep hitting."""
    a, b = matrix(8, 64), matrix(8, 64, at=0x10000)
    rows[8](a, b, N=64)
    rows[8](a, b, N=32)  # a (1, 32) tile: new candidates
    dispatcher = next(iter(rows._loaded.fast.values()))
    assert set(dispatcher.facts) == {("X", 1, 64), ("Y", 1, 64), ("X", 1, 32), ("Y", 1, 32)}
    for n in (64, 32, 64, 32):
        rows[8](a, b, N=n)
    assert fake.loads == 2 and len(fake.slow) == 3  # one more miss: the key was regenerated


def test_the_size_facts_are_in_the_disk_cache_key():
    x = np.zeros((8, 64), np.float32)
    module = rows.trace(x, x.copy(), N=64)
    spec = spec_of(x, x.copy(), n=64)
    facts = frozenset(rows.size_candidates(spec))
    keys = {gpu.cache_key(module, spec, "sm_90a", d).digest
            for d in (frozenset(), facts, frozenset({("X", 1, 64)}))}
    assert len(keys) == 3
    assert "divisible=X:1:64,Y:1:64" in gpu.cache_key(module, spec, "sm_90a", facts).text


def test_the_compiler_uses_the_size_facts():
    """Columns a multiple of the tile: one uniform bounds check instead of one per
    register."""
    from tilekit.codegen import compile_module

    base = np.zeros((8, 128), np.float32)
    module = rows.trace(base[:, :64], base[:, :64].copy(), N=64)
    spec = spec_of(base[:, :64], base[:, :64].copy(), n=64)
    facts = frozenset(rows.size_candidates(spec))
    divisible = compile_module(module, "sm_90a", divisible=facts).binary.decode()
    general = compile_module(module, "sm_90a").binary.decode()
    assert divisible.count("setp") < general.count("setp")


def test_a_size_of_0_holds_no_size_fact_on_either_path(fake: Driver) -> None:
    """A size fact lets code generation drop the bounds check of a tile at index 0 (the
    tile lies inside): a size of 0 is a multiple of every tile but holds none, so it is
    another variant, on the slow path and on the fast path's key (Python and native)."""
    x64, y64 = matrix(8, 64), matrix(8, 64, at=0x10000)
    x0, y0 = matrix(8, 0), matrix(8, 0, at=0x10000)
    rows[8](x64, y64, N=64)
    rows[8](x0, y0, N=64)  # not the first call's variant: a miss
    first, second = fake.variants
    assert first.divisible == {("X", 1, 64), ("Y", 1, 64)} and second.divisible == set()
    for x, y, variant in ((x0, y0, second), (x64, y64, first), (x0, y0, second)):
        rows[8](x, y, N=64)  # fast-path hits, each of its own variant's kernel
        assert fake.launches[-1]["function"] == rows._loaded[variant].function.handle
    assert fake.loads == 2
