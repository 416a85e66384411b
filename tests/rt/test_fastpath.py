"""The launch fast path without a GPU: fake torch tensors, a fake driver (``fake_gpu``).

These tests check what the fast path decides (hit or miss, which entry) and what it packs
(byte for byte what the slow path packs, the same launch configuration), not the device
(``test_gpu.py`` does that). A launch record's ``path`` says which path launched.
"""

from __future__ import annotations

import ctypes
import struct
from types import MethodType
from typing import Any

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.codegen.artifact import AssertSite, ParamSlot, SlotKind
from tilekit.errors import LaunchError
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import TensorSpec
from tilekit.rt import driver, fastpath, gpu
from tilekit.rt.launcher import Launch, specialize_arguments

from .fake_gpu import Driver, FakeTensor, abi_compile, slots_of, use_fake_gpu
from .ptx_kernels import add, vector_add_kernel

BLOCK = 128


@tk.kernel
def scale_rows(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    Y.tile((1, N), (r, 0)).store(X.tile((1, N), (r, 0)).load() * 2)


@tk.kernel
def add_kwonly(X, Y, n, *, BLOCK: tk.constexpr = 128):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(Y, offs, tk.load(X, offs, offs < n) + 1.0, offs < n)


@tk.kernel
def add_on(X, Y, stream, BLOCK: tk.constexpr):  # a parameter named `stream`
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    tk.store(Y, offs, tk.load(X, offs, offs < stream) + 1.0, offs < stream)


KERNELS = (add, scale_rows, add_kwonly, add_on)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Driver:  # type: ignore[misc]
    drv = use_fake_gpu(monkeypatch)
    for k in KERNELS:
        k._loaded.clear()
    yield drv
    for k in KERNELS:
        k._loaded.clear()


def run(x: Any, y: Any, out: Any, n: int, **kw: Any) -> None:
    add[(n + BLOCK - 1) // BLOCK](x, y, out, n, BLOCK=BLOCK, **kw)


def loaded_kernels(kernel: Any = add) -> list[gpu.LoadedKernel]:
    return list(kernel._loaded.values())


def paths(drv: Driver) -> list[str]:
    return [launch["path"] for launch in drv.launches]


# --- hits and misses ----------------------------------------------------------------------


def test_second_launch_takes_the_fast_path_and_packs_what_the_slow_path_packs(
        fake: Driver) -> None:
    x = FakeTensor((1000,), ptr=0x7F00_0000_0000)
    y = FakeTensor((1000,), ptr=0x7F00_0001_0000)
    out = FakeTensor((1000,), ptr=0x7F00_0002_0000)
    run(x, y, out, 1000)
    assert type(add[1]) is MethodType and add._loaded.fast  # installed
    slow = slots_of(fake.launches[-1], loaded_kernels()[0])
    run(x, y, out, 1000)
    assert fake.loads == 1 and paths(fake) == ["slow", "fast"]
    fast = slots_of(fake.launches[-1], loaded_kernels()[0])
    assert fast == slow == (x.data_ptr(), 1000, 1, y.data_ptr(), 1000, 1, out.data_ptr(),
                            1000, 1, 1000, 0)
    first, second = fake.launches
    for what in ("function", "grid", "threads", "shared", "stream"):
        assert first[what] == second[what], what
    assert second["grid"] == (8, 1, 1) and second["threads"] == 128


def test_new_values_with_the_same_facts_share_the_entry(fake: Driver) -> None:
    a = [FakeTensor((4096,), ptr=0x7F00_0000_0000 + 0x10000 * i) for i in range(3)]
    b = [FakeTensor((3000,), ptr=0x7F10_0000_0000 + 0x10000 * i) for i in range(3)]
    run(*a, 4096)
    run(*b, 3000)  # other pointers and sizes: same dtypes, ranks, alignment, unit strides
    assert fake.loads == 1 and paths(fake) == ["slow", "fast"]
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
    assert fake.loads == 2 and paths(fake) == ["slow", "slow", "fast"]
    facts = {dict(s.args)["X"].unit_inner for s in add._cache if dict(s.args)["X"].rank == 1}
    assert facts == {True, False}
    assert slots_of(fake.launches[-1], loaded_kernels()[0])[:3] == (a[0].data_ptr(), 4096, 1)


def test_the_row_stride_fact_of_a_matrix_is_keyed(fake: Driver) -> None:
    """Rows 16-byte apart or not (float32 rows of 64 or 65 elements, 64 columns used):
    another specialization, told apart by the key through the dtype's row mask."""
    x, y = FakeTensor((8, 64), strides=(64, 1)), FakeTensor((8, 64), ptr=0x7F00_1000_0000)
    r65 = FakeTensor((8, 64), strides=(65, 1))
    for a in (x, r65, x, r65):
        scale_rows[8](a, y, N=64)
    assert paths(fake) == ["slow", "slow", "fast", "fast"] and fake.loads == 2
    strides16 = [dict(v.spec.args)["X"].strides16 for v in scale_rows._loaded]
    assert strides16 == [True, False]
    functions = [k.function.handle for k in loaded_kernels(scale_rows)]
    assert [launch["function"] for launch in fake.launches[2:]] == functions
    bf = FakeTensor((8, 64), dtype="torch.bfloat16", strides=(72, 1))  # 144 bytes: aligned
    scale_rows[8](bf, bf, N=64)
    scale_rows[8](bf, bf, N=64)
    assert paths(fake)[-2:] == ["slow", "fast"]
    assert dict(list(scale_rows._loaded)[-1].spec.args)["X"].strides16


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
    assert paths(fake) == ["slow"] * 5
    # every one of them now hits, each its own kernel
    for args in ((x, x, x, 1000), (x1, x1, x1, 999), (h, h, h, 1000), (x, x, x, 2**31 + 5),
                 (d1, d1, d1, 1000)):
        run(*args)
    assert fake.loads == 5 and paths(fake) == ["slow"] * 5 + ["fast"] * 5
    assert [launch["function"] for launch in fake.launches[5:]] == \
        [k.function.handle for k in loaded_kernels()]


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
    assert fake.loads == 2 and paths(fake)[2:] == ["fast", "fast"]
    kernels = loaded_kernels()
    assert fake.launches[-2]["function"] == kernels[0].function.handle
    assert fake.launches[-1]["function"] == kernels[1].function.handle
    assert slots_of(fake.launches[-1], kernels[1])[:3] == (big.data_ptr(), 2**20, 2**12)


def test_constexprs_are_keyed_by_value(fake: Driver) -> None:
    x = FakeTensor((1000,))
    add[8](x, x, x, 1000, BLOCK=128)
    add[4](x, x, x, 1000, BLOCK=256)
    assert fake.loads == 2
    add[8](x, x, x, 1000, BLOCK=128)
    assert fake.loads == 2 and paths(fake)[-1] == "fast"


def test_only_torch_device_tensors_have_a_profile(fake: Driver) -> None:
    x = FakeTensor((100,))
    run(x, x, x, 100)
    profile = next(iter(add._loaded.fast))
    assert [p.kind for p in profile.args] == ["tensor", "tensor", "tensor", "int", "const"]
    a = np.zeros(100, np.float32)
    bound = add.bind((a, a, a, 100), {"BLOCK": BLOCK}, None)
    spec, _ = specialize_arguments(add, bound, None)
    assert fastpath.profile_of(add, spec, bound) is None


# --- how a call binds ---------------------------------------------------------------------


def test_call_shapes_share_one_dispatcher(fake: Driver) -> None:
    """The generated function takes the kernel's own parameters: positional, keyword and
    defaulted calls bind the same way, and all hit after the first launch."""
    x = FakeTensor((1000,))
    add[8](X=x, Y=x, Out=x, n=1000, BLOCK=BLOCK)
    add[8](X=x, Y=x, Out=x, n=1000, BLOCK=BLOCK)
    add[8](x, x, x, n=1000, BLOCK=BLOCK)
    add[8](x, x, Out=x, BLOCK=BLOCK, n=1000)
    add_kwonly[8](x, x, 1000)  # the constexpr's default
    add_kwonly[8](x, x, n=1000)
    add_kwonly[8](x, x, 1000, BLOCK=128)
    assert paths(fake) == ["slow", "fast", "fast", "fast", "slow", "fast", "fast"]
    assert len(add._loaded.fast) == 1 and len(add_kwonly._loaded.fast) == 1


def test_wrong_calls_get_the_slow_paths_errors(fake: Driver) -> None:
    """A call the generated function cannot repeat reaches the slow path, which names the
    error at the caller's line (not at the generated code's)."""
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    with pytest.raises(LaunchError, match="bad arguments for kernel `add`.*'n'") as info:
        add[8](x, x, x, BLOCK=BLOCK)  # missing
    assert info.value.loc.file == __file__ and "add[8](x, x, x, BLOCK=BLOCK)" in \
        info.value.loc.source_line()
    with pytest.raises(LaunchError, match="bad arguments.*unexpected keyword.*'bogus'"):
        add[8](x, x, x, 1000, BLOCK=BLOCK, bogus=1)
    with pytest.raises(LaunchError, match="bad arguments.*too many positional"):
        add[8](x, x, x, 1000, BLOCK, 7)
    with pytest.raises(LaunchError, match="bad arguments.*'BLOCK'"):
        add[8](x, x, x, 1000)
    with pytest.raises(LaunchError, match="bad arguments.*positional"):
        add_kwonly[8](x, x, 1000, 128)  # BLOCK is keyword-only
    assert paths(fake) == ["slow"]


def test_another_profile_hits_through_the_active_one(fake: Driver) -> None:
    """Two profiles (a Python int and a numpy int for ``n``): the active dispatcher misses
    the other's calls and hands them to the other profile's dispatcher, not the slow
    path."""
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    run(x, x, x, np.int64(1000))  # another profile: installed by the slow path
    assert len(add._loaded.fast) == 2 and paths(fake) == ["slow", "slow"]
    run(x, x, x, 1000)
    run(x, x, x, np.int64(1000))
    assert paths(fake)[2:] == ["fast", "fast"] and fake.loads == 1


def test_a_launcher_can_be_kept_and_called_again(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    launcher = add[(8,)]
    launcher(x, x, x, 1000, BLOCK=BLOCK)
    launcher(x, x, x, 1000, BLOCK=BLOCK)
    assert paths(fake) == ["slow", "fast", "fast"]


def test_a_parameter_named_stream_is_a_parameter(fake: Driver) -> None:
    x = FakeTensor((1000,))
    add_on[8](x, x, 1000, BLOCK=BLOCK)
    add_on[8](x, x, stream=1000, BLOCK=BLOCK)
    assert paths(fake) == ["slow", "fast"]
    assert slots_of(fake.launches[-1], loaded_kernels(add_on)[0])[-2] == 1000
    assert fake.launches[-1]["stream"] == 0  # torch's current stream, not `stream`


# --- the grid, the stream, the driver ----------------------------------------------------


def test_grid_forms_and_limits(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    add[(3, 2)](x, x, x, 1000, BLOCK=BLOCK)
    add[lambda meta: (meta["n"] // meta["BLOCK"], 1, 2)](x, x, x, 1000, BLOCK=BLOCK)
    add[lambda meta: 5](x, x, x, 1000, BLOCK=BLOCK)
    add[9](x, x, x, 1000, BLOCK=BLOCK)
    add[np.int64(4)](x, x, x, 1000, BLOCK=BLOCK)  # numpy ints and lists, as the slow path
    add[[3, np.int32(2)]](x, x, x, 1000, BLOCK=BLOCK)
    assert [launch["grid"] for launch in fake.launches[1:]] == [
        (3, 2, 1), (7, 1, 2), (5, 1, 1), (9, 1, 1), (4, 1, 1), (3, 2, 1)]
    assert fake.loads == 1 and paths(fake) == ["slow"] + ["fast"] * 6
    before = len(fake.launches)
    add[(0, 5)](x, x, x, 1000, BLOCK=BLOCK)  # empty: nothing runs
    add[0](x, x, x, 1000, BLOCK=BLOCK)
    add[(0,)](x, x, x, 1000, BLOCK=BLOCK)
    assert len(fake.launches) == before
    with pytest.raises(LaunchError, match=r"grid dimension 1 \(y\) is 70000"):
        add[(1, 70000)](x, x, x, 1000, BLOCK=BLOCK)  # the slow path names the error
    with pytest.raises(LaunchError, match="non-negative ints"):
        add[(1.5,)](x, x, x, 1000, BLOCK=BLOCK)
    with pytest.raises(LaunchError, match="non-negative ints"):
        add[(True,)](x, x, x, 1000, BLOCK=BLOCK)  # a bool is no grid size
    with pytest.raises(LaunchError, match="non-negative ints"):
        add[(-1, 0)](x, x, x, 1000, BLOCK=BLOCK)
    with pytest.raises(LaunchError, match="tuple of 1 to 3 ints"):
        add[(1, 1, 1, 1)](x, x, x, 1000, BLOCK=BLOCK)
    with pytest.raises(LaunchError, match=r"grid dimension 0 \(x\) is 2147483648"):
        add[2**31](x, x, x, 1000, BLOCK=BLOCK)
    with pytest.raises(LaunchError, match="non-negative ints"):
        add[(np.bool_(True),)](x, x, x, 1000, BLOCK=BLOCK)
    assert len(fake.launches) == before


def test_streams(fake: Driver) -> None:
    """Torch's current stream by default (also for stream=None), else stream= (an int or
    a stream object); a stream not seen before is no miss."""

    class TorchLikeStream:
        cuda_stream = 0x7000

    x = FakeTensor((1000,))
    run(x, x, x, 1000, stream=0x5000)
    for stream in (0x5000, 0x6000, None, TorchLikeStream()):
        run(x, x, x, 1000, stream=stream)
    run(x, x, x, 1000)
    assert [launch["stream"] for launch in fake.launches] == \
        [0x5000, 0x5000, 0x6000, 0, 0x7000, 0]
    assert paths(fake) == ["slow"] + ["fast"] * 5 and fake.loads == 1


def test_a_driver_error_falls_back_to_the_slow_path(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    fake.fail_next = 1  # e.g. no current context on this thread: the slow path sets it
    run(x, x, x, 1000)
    assert paths(fake) == ["slow", "slow"]
    run(x, x, x, 1000)
    assert paths(fake)[-1] == "fast"


def test_scalar_out_of_range_for_its_slot_takes_the_slow_path(fake: Driver) -> None:
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    with pytest.raises(LaunchError, match="does not fit"):
        run(x, x, x, 2**70)
    with knobs.override(interpret=True):  # the interpreter is asked for: no fast path
        dispatcher = next(iter(add._loaded.fast.values()))
        assert dispatcher.dispatch(8, (x, x, x, 1000), {"BLOCK": BLOCK}) is fastpath.MISS
    assert dispatcher.dispatch(8, (x, x, x, 1000), {"BLOCK": BLOCK}) is None


def test_an_override_of_check_mode_turns_the_fast_path_off(fake: Driver) -> None:
    """``knobs.override(check=True)`` after hits: every call takes the slow path (which
    loads the checked kernel) while it is active, and hits again after."""
    x = FakeTensor((1000,))
    run(x, x, x, 1000)
    run(x, x, x, 1000)
    with knobs.override(check=True):
        dispatcher = next(iter(add._loaded.fast.values()))
        assert dispatcher.dispatch(8, (x, x, x, 1000), {"BLOCK": BLOCK}) is fastpath.MISS
        run(x, x, x, 1000)
    run(x, x, x, 1000)
    assert paths(fake) == ["slow", "fast", "slow", "fast"]
    assert [v.checked for v in fake.variants] == [False, True]


def test_device_asserts_read_the_status_word_on_both_paths(fake: Driver,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from .ptx_kernels import check_positive

    checked: list[tuple[Any, int]] = []
    monkeypatch.setattr(gpu, "_check_status", lambda loaded, stream, loc: checked.append(
        (loaded, stream)))
    fake.compiled_fn = lambda m, arch, divisible: abi_compile(m, arch, divisible)._replace(
        asserts=(AssertSite("x must be positive", "f", 1),))
    check_positive._loaded.clear()
    x = FakeTensor((1000,))
    for stream in (0x5000, 0x5000, None):
        check_positive[8](x, 1000, BLOCK=BLOCK, stream=stream)
    assert paths(fake) == ["slow", "fast", "fast"]
    loaded = loaded_kernels(check_positive)[0]
    assert checked == [(loaded, 0x5000), (loaded, 0x5000), (loaded, 0)]
    check_positive._loaded.clear()


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
    assert set(TensorSpec._fields) == fastpath.COVERED_TENSOR_FACTS
    assert set(gpu.Variant._fields) - {"spec", "device"} == fastpath.COVERED_VARIANT_FACTS


def test_the_launch_configuration_format_is_the_c_struct() -> None:
    cfg = driver.structs()["CUlaunchConfig"]
    assert fastpath.CONFIG_BYTES == ctypes.sizeof(cfg) == 56
    buf = (ctypes.c_char * 56)(*([b"\xff"] * 56))
    struct.pack_into(fastpath.CONFIG_FORMAT, buf, 0, 1, 2, 3, 4, 5, 6, 7, 0xABCDEF)
    c = cfg.from_buffer(buf)
    assert (c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
            c.sharedMemBytes, c.hStream, c.attrs, c.numAttrs) == \
        (1, 2, 3, 4, 5, 6, 7, 0xABCDEF, None, 0)


def test_slot_layout_aligns_each_slot() -> None:
    fmt, offsets, size = fastpath.slot_layout(["uint64", "int32", "int32", "uint64", "bool",
                                               "float16", "float64", "uint64"])
    assert offsets == (0, 8, 12, 16, 24, 26, 32, 40) and size == 48
    assert struct.calcsize(fmt) == 48


def test_packing_matches_the_slow_fill() -> None:
    slots = (ParamSlot(SlotKind.SCALAR, "a", "float16"),
             ParamSlot(SlotKind.SCALAR, "b", "bfloat16"),
             ParamSlot(SlotKind.SCALAR, "c", "int8"), ParamSlot(SlotKind.STATUS, "", "uint64"))
    compiled = vector_add_kernel("sm_90a")._replace(params=slots)
    props = driver.DeviceProps(0, "x", (9, 0), 1, 1, (1, 1, 1), 1, 1)
    k = gpu.LoadedKernel.build(compiled, driver.LoadedFunction(None, None, 1, 0), props, 77)
    k.fill({}, {}, {"a": np.asarray(1.5).astype(np.float16),
                    "b": np.asarray(-2.25).astype(DType.BFLOAT16.np),
                    "c": np.asarray(-3).astype(np.int8)})
    slow = bytes(k.buffer)
    k.pack(k.buffer, 0, 1.5, fastpath._bf16_bits(-2.25), -3, 77)
    assert bytes(k.buffer) == slow
