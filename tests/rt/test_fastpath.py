"""The launch fast path without a GPU: fake torch tensors, a fake driver (``fake_gpu``).

These tests check what the fast path decides (hit or miss, which entry) and what it packs
(byte for byte what the slow path packs), not the device (``test_gpu.py`` does that).
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from tilekit import knobs
from tilekit.codegen.artifact import ParamSlot, SlotKind
from tilekit.errors import LaunchError
from tilekit.lang.kernel import TensorSpec
from tilekit.rt import driver, fastpath, gpu
from tilekit.rt.launcher import Launch

from .fake_gpu import Driver, FakeTensor, slots_of, use_fake_gpu
from .ptx_kernels import add, vector_add_kernel

BLOCK = 128


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Driver:  # type: ignore[misc]
    drv = use_fake_gpu(monkeypatch)
    add._loaded.clear()
    yield drv
    add._loaded.clear()


def run(x: Any, y: Any, out: Any, n: int, **kw: Any) -> None:
    add[(n + BLOCK - 1) // BLOCK](x, y, out, n, BLOCK=BLOCK, **kw)


def loaded_kernels() -> list[gpu.LoadedKernel]:
    return list(add._loaded.values())


# --- hits and misses ----------------------------------------------------------------------


def test_second_launch_takes_the_fast_path_and_packs_the_same_slots(fake: Driver) -> None:
    x = FakeTensor((1000,), ptr=0x7F00_0000_0000)
    y = FakeTensor((1000,), ptr=0x7F00_0001_0000)
    out = FakeTensor((1000,), ptr=0x7F00_0002_0000)
    run(x, y, out, 1000)
    assert type(add[1]) is not Launch and add._loaded.fast  # installed
    slow = slots_of(fake.launches[-1], loaded_kernels()[0])
    run(x, y, out, 1000)
    assert fake.loads == 1 and len(fake.launches) == 2
    fast = slots_of(fake.launches[-1], loaded_kernels()[0])
    assert fast == slow == (x.data_ptr(), 1000, 1, y.data_ptr(), 1000, 1, out.data_ptr(),
                            1000, 1, 1000, 0)
    assert fake.launches[-1]["grid"] == (8, 1, 1) and fake.launches[-1]["threads"] == 128


def test_new_values_with_the_same_facts_share_the_entry(fake: Driver) -> None:
    a = [FakeTensor((4096,), ptr=0x7F00_0000_0000 + 0x10000 * i) for i in range(3)]
    b = [FakeTensor((3000,), ptr=0x7F10_0000_0000 + 0x10000 * i) for i in range(3)]
    run(*a, 4096)
    run(*b, 3000)  # other pointers and sizes: same dtypes, ranks, alignment, unit strides
    assert fake.loads == 1
    dispatcher = next(iter(add._loaded.fast.values()))
    assert len(dispatcher.table) == 1
    assert slots_of(fake.launches[-1], loaded_kernels()[0])[:3] == (b[0].data_ptr(), 3000, 1)


def test_a_stride_fact_is_a_new_bucket(fake: Driver) -> None:
    """Unit stride along the last dim is a fact code generation uses: a strided view is
    another specialization (another kernel), on the fast path's key as on the slow path."""
    a = [FakeTensor((4096,), ptr=0x7F00_0000_0000 + 0x10000 * i) for i in range(3)]
    b = [FakeTensor((3000,), ptr=0x7F10_0000_0000 + 0x10000 * i, strides=(2,))
         for i in range(3)]
    run(*a, 4096)
    run(*b, 3000)
    run(*a, 4096)  # back to the first bucket: a fast-path hit
    assert fake.loads == 2
    facts = {dict(s.args)["X"].unit_inner for s in add._cache if dict(s.args)["X"].rank == 1}
    assert facts == {True, False}
    assert slots_of(fake.launches[-1], loaded_kernels()[0])[:3] == (a[0].data_ptr(), 4096, 1)


def test_a_fact_of_the_specialization_misses(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    assert fake.loads == 1
    # misaligned: x[1:] of float32 is 4 bytes past a 16-byte boundary
    x1 = FakeTensor((999,), ptr=0x7F00_0000_0004)
    run(x1, x1, x1, 999)
    assert fake.loads == 2
    specs = [v.spec for v in add._loaded]
    assert [dict(s.args)["X"].aligned16 for s in specs] == [True, False]
    # another dtype
    h = FakeTensor((1000,), dtype="torch.bfloat16")
    run(h, h, h, 1000)
    assert fake.loads == 3
    # an int scalar past int32: the scalar's width is keyed
    run(x, x, x, 2**31 + 5)
    assert fake.loads == 4
    assert dict(list(add._loaded)[-1].spec.args)["n"].dtype.long == "int64"
    # another device
    d1 = FakeTensor((1000,), device=1)
    run(d1, d1, d1, 1000)
    assert fake.loads == 5 and list(add._loaded)[-1].device == 1
    # every one of them now hits
    for args in ((x, x, x, 1000), (x1, x1, x1, 999), (h, h, h, 1000), (d1, d1, d1, 1000)):
        run(*args)
    assert fake.loads == 5


def test_index_width_is_keyed(fake: Driver) -> None:
    small = FakeTensor((1000,))
    run(small, small, small, 1000)
    # same dtype, rank, alignment and device, but a span past 2^31: a 64-bit kernel
    big = FakeTensor((2**20,), strides=(2**12,))
    run(big, big, big, 1000)
    assert fake.loads == 2
    indexes = [dict(v.spec.args)["X"].index.long for v in add._loaded]
    assert indexes == ["int32", "int64"]
    dispatcher = next(iter(add._loaded.fast.values()))
    assert len(dispatcher.table) == 2  # whether the span fits int32 is in the key
    run(small, small, small, 1000)
    run(big, big, big, 1000)
    assert fake.loads == 2
    kernels = loaded_kernels()
    assert fake.launches[-2]["params"] == kernels[0].params_ptr
    assert fake.launches[-1]["params"] == kernels[1].params_ptr


def test_constexprs_are_keyed_by_value(fake: Driver) -> None:
    x = FakeTensor((1000,))
    add[8](x, x, x, 1000, BLOCK=128)
    add[4](x, x, x, 1000, BLOCK=256)
    assert fake.loads == 2
    add[8](x, x, x, 1000, BLOCK=128)
    assert fake.loads == 2


def test_only_torch_device_tensors_have_a_profile(fake: Driver) -> None:
    import numpy as np

    from tilekit.rt.launcher import specialize_arguments

    x = FakeTensor((100,))
    run(x, x, x, 100)
    profile = next(iter(add._loaded.fast))
    assert [p.kind for p in profile.args] == ["tensor", "tensor", "tensor", "int", "const"]
    a = np.zeros(100, np.float32)
    bound = add.bind((a, a, a, 100), {"BLOCK": BLOCK}, None)
    spec, _ = specialize_arguments(add, bound, None)
    assert fastpath.profile_of(add, spec, bound, 4, ("BLOCK",), False) is None


# --- the grid, the stream, the driver ----------------------------------------------------


def test_grid_forms_and_limits(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    add[(3, 2)](x, x, x, 1000, BLOCK=BLOCK)
    add[lambda meta: (meta["n"] // meta["BLOCK"], 1, 2)](x, x, x, 1000, BLOCK=BLOCK)
    assert [launch["grid"] for launch in fake.launches[1:]] == [(3, 2, 1), (7, 1, 2)]
    assert fake.loads == 1
    before = len(fake.launches)
    add[(0, 5)](x, x, x, 1000, BLOCK=BLOCK)  # empty: nothing runs
    assert len(fake.launches) == before
    with pytest.raises(LaunchError, match=r"grid dimension 1 \(y\) is 70000"):
        add[(1, 70000)](x, x, x, 1000, BLOCK=BLOCK)  # the slow path names the error
    with pytest.raises(LaunchError, match="non-negative ints"):
        add[(1.5,)](x, x, x, 1000, BLOCK=BLOCK)
    assert len(fake.launches) == before


def test_explicit_and_unseen_streams(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000, stream=0x5000)
    run(x, x, x, 1000, stream=0x5000)
    run(x, x, x, 1000, stream=0x6000)  # unseen: a miss, then remembered
    run(x, x, x, 1000, stream=0x6000)
    run(x, x, x, 1000)  # another call shape (no stream=): its own dispatcher
    run(x, x, x, 1000)
    assert [launch["stream"] for launch in fake.launches] == [0x5000] * 2 + [0x6000] * 2 + [0] * 2
    assert fake.loads == 1


def test_a_driver_error_falls_back_to_the_slow_path(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    fake.fail_next = 1  # e.g. no current context on this thread: the slow path sets it
    run(x, x, x, 1000)
    assert len(fake.launches) == 2


def test_keyword_and_default_arguments(fake: Driver) -> None:
    x = FakeTensor((1000,))
    add[8](X=x, Y=x, Out=x, n=1000, BLOCK=BLOCK)
    add[8](X=x, Y=x, Out=x, n=1000, BLOCK=BLOCK)
    add[8](x, x, x, n=1000, BLOCK=BLOCK)
    assert fake.loads == 1 and len(fake.launches) == 3
    with pytest.raises(LaunchError, match="bad arguments for kernel `add`"):
        add[8](x, x, x, BLOCK=BLOCK)


def test_scalar_out_of_range_for_its_slot_takes_the_slow_path(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    with pytest.raises(LaunchError, match="does not fit"):
        run(x, x, x, 2**70)
    with knobs.override(interpret=True):  # the interpreter is asked for: no fast path
        dispatcher = next(iter(add._loaded.fast.values()))
        assert dispatcher.dispatch(8, (x, x, x, 1000), {"BLOCK": BLOCK}) is fastpath.MISS


def test_clearing_the_loaded_kernels_clears_the_fast_path(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    add._loaded.clear()
    assert type(add[1]) is Launch and add._loaded.fast == {}
    run(x, x, x, 1000)
    assert fake.loads == 2


# --- pure parts ---------------------------------------------------------------------------


def test_fastpath_covers_the_specialization() -> None:
    """A fact added to TensorSpec or to a loaded kernel's variant must be added to the fast
    path's key (fastpath.py)."""
    assert {f.name for f in dataclasses.fields(TensorSpec)} == fastpath.COVERED_TENSOR_FACTS
    assert set(gpu.Variant._fields) - {"spec", "device"} == fastpath.COVERED_VARIANT_FACTS


def test_slot_layout_aligns_each_slot() -> None:
    fmt, offsets, size = fastpath.slot_layout(["uint64", "int32", "int32", "uint64", "bool",
                                               "float16", "float64", "uint64"])
    assert offsets == (0, 8, 12, 16, 24, 26, 32, 40) and size == 48
    assert struct.calcsize(fmt) == 48


def test_packing_matches_the_slow_fill() -> None:
    slots = (ParamSlot(SlotKind.SCALAR, "a", "float16"),
             ParamSlot(SlotKind.SCALAR, "b", "bfloat16"),
             ParamSlot(SlotKind.SCALAR, "c", "int8"), ParamSlot(SlotKind.STATUS, "", "uint64"))
    import numpy as np

    from tilekit.ir.dtypes import DType

    compiled = dataclasses.replace(vector_add_kernel("sm_90a"), params=slots)
    props = driver.DeviceProps(0, "x", (9, 0), 1, 1, (1, 1, 1), 1, 1)
    k = gpu.LoadedKernel.build(compiled, driver.LoadedFunction(None, None, 1, 0), props, 77)
    k.fill({}, {}, {"a": np.asarray(1.5).astype(np.float16),
                    "b": np.asarray(-2.25).astype(DType.BFLOAT16.np),
                    "c": np.asarray(-3).astype(np.int8)})
    slow = bytes(k.buffer)
    k.pack(k.buffer, 0, 1.5, fastpath._bf16_bits(-2.25), -3, 77)
    assert bytes(k.buffer) == slow
