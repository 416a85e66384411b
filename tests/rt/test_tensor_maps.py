"""TMA tensor maps at launch (``tilekit.rt.tensor_maps``) without a GPU: the driver's
``cuTensorMapEncodeTiled`` is ``FakeLibcuda``'s, which checks the map's alignment and
records its arguments, so these tests check what reaches the driver (exactly
``tma_admissibility``'s arguments), the cache of encoded maps, the errors, and what both
launch paths pack. A hand-written TMA kernel (``tma_copy_ptx``) is assembled offline; on a
GPU (marked ``gpu``) it runs on both launch paths, and a map is compared with the one
``cuda.bindings`` encodes."""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator
from types import MethodType
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.codegen import sass
from tilekit.codegen.artifact import CompiledKernel, ParamSlot, SlotKind
from tilekit.errors import LaunchError
from tilekit.ir.dtypes import DType
from tilekit.layout.tma import (
    GlobalTensor,
    L2Promotion,
    Swizzle,
    TmaDataType,
    TmaRequest,
    tma_admissibility,
)
from tilekit.rt import device_arrays, driver, fastpath, gpu, link, tensor_maps
from tilekit.rt.tensor_maps import map_spec

from .fake_gpu import PROPS, Driver, FakeLibcuda, FakeTensor, abi_compile, slots_of, use_fake_gpu

ARCH = 90
PROMOTION = L2Promotion[tensor_maps.L2_PROMOTION]
BASE = 0x7F00_0000_0000  # 256-byte aligned, as a fresh allocation


def expected_args(dtype: DType, shape: tuple[int, ...], strides: tuple[int, ...], ptr: int,
                  box: tuple[int, ...], swizzle: str) -> tuple[Any, ...]:
    """What the admissibility module says the driver must get (the test's own request)."""
    data_type = {DType.BFLOAT16: TmaDataType.BFLOAT16, DType.FLOAT32: TmaDataType.FLOAT32,
                 DType.FLOAT16: TmaDataType.FLOAT16}[dtype]
    tensor = GlobalTensor(dtype.itemsize, shape, strides, ptr, data_type)
    verdict = tma_admissibility(TmaRequest(tensor, box, swizzle=Swizzle[swizzle],
                                           l2_promotion=PROMOTION), arch=ARCH)
    assert verdict.params is not None, verdict.violations
    return verdict.params.driver_args()


@pytest.fixture
def lib() -> Iterator[FakeLibcuda]:
    fake = FakeLibcuda()
    driver.use_library(fake)
    tensor_maps.clear()
    yield fake
    tensor_maps.clear()
    driver.use_library(None)


# --- what the driver receives -------------------------------------------------------------

RAGGED = {
    # 1001 rows of 4097 bf16 columns in rows of 4104 (8208 bytes: a 16-byte multiple)
    "bf16 4097 columns, odd rows": (DType.BFLOAT16, (1001, 4097), (4104, 1), (8, 64), "B128"),
    "f32 odd rows": (DType.FLOAT32, (37, 100), (100, 1), (16, 32), "B128"),
    "bf16 3-D": (DType.BFLOAT16, (3, 37, 4097), (37 * 4104, 4104, 1), (1, 8, 64), "B128"),
    "f16 1-D": (DType.FLOAT16, (4097,), (1,), (256,), "NONE"),
    "f32 64-byte swizzle, offset base": (DType.FLOAT32, (999, 68), (68, 1), (4, 16), "B64"),
}


@pytest.mark.parametrize("case", list(RAGGED))
def test_the_driver_receives_exactly_the_admissibility_arguments(lib: FakeLibcuda,
                                                                 case: str) -> None:
    dtype, shape, strides, box, swizzle = RAGGED[case]
    ptr = BASE + (16 if "offset" in case else 0)
    spec = map_spec(ARCH, dtype, box, swizzle)
    encoded = tensor_maps.tensor_map(spec, "X", ptr, shape, strides)
    want = expected_args(dtype, shape, strides, ptr, box, swizzle)
    (address, args, where), = lib.tensor_maps
    assert (address, args) == (ptr, want)
    assert where % 64 == 0  # the driver writes into a 64-byte aligned CUtensorMap
    assert encoded == FakeLibcuda.encoding(ptr, want) and len(encoded) == 128


def test_the_arguments_are_in_the_drivers_order(lib: FakeLibcuda) -> None:
    """A spot check independent of the admissibility module: dimension 0 innermost, byte
    strides of dimensions 1.., enums as the driver's integers."""
    spec = map_spec(ARCH, DType.BFLOAT16, (1, 8, 64), "B128")
    tensor_maps.tensor_map(spec, "X", BASE, (3, 37, 4097), (37 * 4104, 4104, 1))
    (_, args, _), = lib.tensor_maps
    assert args == (9, 3, (4097, 37, 3), (8208, 37 * 8208), (64, 8, 1), (1, 1, 1), 0, 3, 3, 0)


@pytest.mark.parametrize("dtype, code", [
    (DType.FLOAT16, 6), (DType.BFLOAT16, 9), (DType.FLOAT32, 7), (DType.FLOAT64, 8),
    (DType.INT32, 3), (DType.INT64, 5), (DType.UINT8, 0), (DType.UINT16, 1),
    (DType.UINT32, 2), (DType.UINT64, 4), (DType.INT8, 0), (DType.INT16, 1), (DType.BOOL, 0),
])
def test_the_tma_data_type_is_the_tensors(lib: FakeLibcuda, dtype: DType, code: int) -> None:
    """CUtensorMapDataType's numbers (cuda.h); int8, int16 and bool travel as the unsigned
    type of their width."""
    spec = map_spec(ARCH, dtype, (2, 32), "NONE")
    tensor_maps.tensor_map(spec, "X", BASE, (16, 64), (64, 1))
    (_, args, _), = lib.tensor_maps
    assert args[0] == code
    assert set(tensor_maps.DATA_TYPES) == set(DType)


# --- the cache ----------------------------------------------------------------------------


def test_the_cache_hits_for_the_same_tensor_and_misses_for_another(lib: FakeLibcuda) -> None:
    spec = map_spec(ARCH, DType.BFLOAT16, (8, 64), "B128")

    def encode(ptr: int = BASE, shape: tuple[int, int] = (1001, 4097),
               strides: tuple[int, int] = (4104, 1), s: tensor_maps.MapSpec = spec) -> bytes:
        return tensor_maps.tensor_map(s, "X", ptr, shape, strides)

    first = encode()
    assert encode() == first and len(lib.tensor_maps) == 1
    info = tensor_maps.cache_info()
    assert (info.hits, info.misses) == (1, 1)
    changed = [encode(ptr=BASE + 0x100), encode(shape=(1002, 4097)), encode(strides=(4112, 1)),
               encode(s=map_spec(ARCH, DType.BFLOAT16, (16, 64), "B128")),
               encode(s=map_spec(ARCH, DType.BFLOAT16, (8, 32), "B64"))]
    assert len(lib.tensor_maps) == 6 and len({first, *changed}) == 6
    assert encode() == first and len(lib.tensor_maps) == 6  # still cached


def test_switching_the_driver_library_forgets_the_maps(lib: FakeLibcuda) -> None:
    """Maps a fake driver wrote must never reach a real launch."""
    spec = map_spec(ARCH, DType.FLOAT32, (8, 32), "B128")
    tensor_maps.tensor_map(spec, "X", BASE, (10, 32), (32, 1))
    assert tensor_maps.cache_info().currsize == 1
    driver.use_library(FakeLibcuda())
    assert tensor_maps.cache_info().currsize == 0


def test_specs_are_interned() -> None:
    a = map_spec(90, DType.FLOAT32, [8, 32], "B128")
    assert a is map_spec(90, DType.FLOAT32, (8, 32), "B128")
    assert a is not map_spec(90, DType.FLOAT32, (8, 32), "B64")


def test_the_cache_is_a_bounded_lru(lib: FakeLibcuda) -> None:
    spec = map_spec(ARCH, DType.FLOAT32, (1, 32), "NONE")
    size = tensor_maps.cache_info().maxsize
    assert size == tensor_maps.CACHE_SIZE

    def encode(i: int) -> None:
        tensor_maps.tensor_map(spec, "X", BASE + 256 * i, (4, 32), (32, 1))

    for i in range(size):
        encode(i)
    encode(0)  # refreshed: now the most recent
    encode(size)  # evicts the least recent, 1
    assert tensor_maps.cache_info().currsize == size
    calls = len(lib.tensor_maps)
    encode(0)
    assert len(lib.tensor_maps) == calls
    encode(1)
    assert len(lib.tensor_maps) == calls + 1


# --- refusals -----------------------------------------------------------------------------


def test_an_inadmissible_tensor_names_the_argument_and_every_rule(lib: FakeLibcuda) -> None:
    spec = map_spec(ARCH, DType.BFLOAT16, (8, 64), "B128")
    with pytest.raises(LaunchError) as info:
        tensor_maps.tensor_map(spec, "A", BASE, (3, 2**32 + 64), (2**40, 1))
    message = info.value.message
    assert message.startswith("argument `A` cannot be copied by TMA")
    assert "TMA_GLOBAL_DIM: globalDim[0] = 4294967360" in message
    assert "TMA_GLOBAL_STRIDE_RANGE: globalStrides[0] = 2199023255552 bytes" in message
    assert "shape (3, 4294967360)" in message and "box (8, 64)" in message
    assert info.value.hints and "cuTensorMapEncodeTiled" in info.value.hints[0]
    with pytest.raises(LaunchError, match=r"TMA_GLOBAL_ADDRESS_ALIGN: base address of A is "
                                          r"only 8-byte aligned"):
        tensor_maps.tensor_map(spec, "A", BASE + 8, (16, 64), (64, 1))
    with pytest.raises(LaunchError, match=r"TMA_GLOBAL_DIM: globalDim\[1\] = 0"):
        tensor_maps.tensor_map(spec, "A", BASE, (0, 64), (64, 1))  # empty
    with pytest.raises(LaunchError, match="box .* has 2 dimensions, the tensor 3"):
        tensor_maps.tensor_map(spec, "A", BASE, (2, 16, 64), (1024, 64, 1))
    assert lib.tensor_maps == []  # the driver was never asked
    assert tensor_maps.cache_info().currsize == 0  # refusals are not cached


def test_a_driver_failure_names_the_argument(lib: FakeLibcuda) -> None:
    lib.fail["cuTensorMapEncodeTiled"] = 1
    spec = map_spec(ARCH, DType.BFLOAT16, (8, 64), "B128")
    with pytest.raises(LaunchError, match="argument `A`: CUDA driver call "
                                          "cuTensorMapEncodeTiled failed: "
                                          "CUDA_ERROR_INVALID_VALUE") as info:
        tensor_maps.tensor_map(spec, "A", BASE, (16, 64), (64, 1))
    assert "please report it" in info.value.hints[0]


def test_check_refuses_without_encoding(lib: FakeLibcuda) -> None:
    spec = map_spec(ARCH, DType.FLOAT32, (8, 32), "B128")
    tensor_maps.check(spec, "S", 256, (10, 32), (32, 1))
    with pytest.raises(LaunchError, match="argument `S` cannot be copied by TMA.*"
                                          "TMA_GLOBAL_ADDRESS_ALIGN"):
        tensor_maps.check(spec, "S", 4, (10, 32), (32, 1))
    assert lib.tensor_maps == []


# --- launches -----------------------------------------------------------------------------


@tk.kernel
def copy_rows(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    Y.tile((1, N), (r, 0)).store(X.tile((1, N), (r, 0)).load())


@tk.kernel
def plain_rows(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    Y.tile((1, N), (r, 0)).store(X.tile((1, N), (r, 0)).load() + 1)


BOX_ROWS = 8


def tma_compile(module: Any, arch: str,
                divisible: frozenset[tuple[str, int, int]] = frozenset()) -> CompiledKernel:
    """``abi_compile`` plus, for ``copy_rows``, a tensor map of X (rows of 128 bytes,
    128-byte swizzle) before the status word, as code generation will place it."""
    compiled = abi_compile(module, arch, divisible)
    if module.kernel.name != "copy_rows":
        return compiled
    x = module.kernel.args[0]
    box = (BOX_ROWS, 128 // x.type.dtype.itemsize)
    slot = ParamSlot(SlotKind.TENSOR_MAP, x.name_hint, "uint8", box=box, swizzle="B128")
    return compiled._replace(params=(*compiled.params[:-1], slot, compiled.params[-1]))


@pytest.fixture
def fake(lib: FakeLibcuda, monkeypatch: pytest.MonkeyPatch) -> Iterator[Driver]:
    drv = use_fake_gpu(monkeypatch, tma_compile)
    for k in (copy_rows, plain_rows):
        k._loaded.clear()
    yield drv
    for k in (copy_rows, plain_rows):
        k._loaded.clear()
    monkeypatch.undo()  # before driver.use_library(None) in ``lib``


def bf16(rows: int, cols: int, pitch: int | None = None, ptr: int = BASE) -> FakeTensor:
    return FakeTensor((rows, cols), "torch.bfloat16", ptr, (pitch or cols, 1))


def map_slot(launch: dict[str, Any], kernel: gpu.LoadedKernel) -> tuple[bytes, int]:
    """The tensor map a recorded launch passed, and where its kernelParams entry points."""
    index = next(i for i, p in enumerate(kernel.compiled.params)
                 if p.kind is SlotKind.TENSOR_MAP)
    return slots_of(launch, kernel)[index], launch["slots"][index]


def loaded_kernel() -> gpu.LoadedKernel:
    (kernel,) = copy_rows._loaded.values()
    return kernel


def test_both_paths_pack_the_map_of_the_launchs_tensor(fake: Driver, lib: FakeLibcuda) -> None:
    x, y = bf16(1001, 4097, pitch=4104), bf16(1001, 4097, pitch=4104, ptr=BASE + 0x100_0000)
    copy_rows[1001](x, y, N=4097)
    want = FakeLibcuda.encoding(BASE, expected_args(DType.BFLOAT16, (1001, 4097), (4104, 1),
                                                    BASE, (BOX_ROWS, 64), "B128"))
    slow, where = map_slot(fake.launches[-1], loaded_kernel())
    assert slow == want and where % 64 == 0
    calls = len(lib.calls)
    copy_rows[1001](x, y, N=4097)
    fast, where = map_slot(fake.launches[-1], loaded_kernel())
    assert fast == want and where % 64 == 0
    assert [launch["path"] for launch in fake.launches] == ["slow", "fast"]
    assert len(lib.calls) == calls  # a hit: no driver call but the launch itself
    assert slots_of(fake.launches[-1], loaded_kernel())[:5] == (BASE, 1001, 4097, 4104, 1)


def test_the_fast_path_encodes_again_when_the_pointer_or_shape_changes(
        fake: Driver, lib: FakeLibcuda) -> None:
    y = bf16(2000, 4097, pitch=4104, ptr=BASE + 0x1000_0000)
    calls = [(bf16(1001, 4097, pitch=4104), 1001),
             (bf16(1001, 4097, pitch=4104, ptr=BASE + 0x10_0000), 1001),  # another pointer
             (bf16(1999, 4097, pitch=4104), 1999),  # another shape
             (bf16(1001, 4097, pitch=4104), 1001)]  # the first again: cached
    for x, rows in calls:
        copy_rows[rows](x, y, N=4097)
        x_ptr, n0, n1, s0, s1 = x.data_ptr(), *x.shape, *x.stride()
        want = FakeLibcuda.encoding(x_ptr, expected_args(DType.BFLOAT16, (n0, n1), (s0, s1),
                                                         x_ptr, (BOX_ROWS, 64), "B128"))
        assert map_slot(fake.launches[-1], loaded_kernel())[0] == want
    assert [launch["path"] for launch in fake.launches] == ["slow", "fast", "fast", "fast"]
    assert [address for address, _, _ in lib.tensor_maps] == [BASE, BASE + 0x10_0000, BASE]
    assert fake.loads == 1


def test_an_inadmissible_tensor_fails_at_the_callers_line_on_both_paths(
        fake: Driver, lib: FakeLibcuda) -> None:
    wide = bf16(1, 2**32 + 64)  # more columns than a tensor map holds (64-bit indices)
    y = bf16(2, 2**31)
    with pytest.raises(LaunchError, match=r"argument `X` cannot be copied by TMA.*"
                                          r"TMA_GLOBAL_DIM: globalDim\[0\]") as info:
        copy_rows[1](wide, y, N=64)
    assert info.value.loc is not None and info.value.loc.file == __file__
    assert fake.launches == []  # nothing was queued
    ok = bf16(2, 2**31)  # the same facts (64-bit index, aligned rows), admissible
    copy_rows[2](ok, y, N=64)
    copy_rows[2](ok, y, N=64)
    assert [launch["path"] for launch in fake.launches] == ["slow", "fast"]
    with pytest.raises(LaunchError, match="argument `X` cannot be copied by TMA") as info:
        copy_rows[1](wide, y, N=64)  # the fast path misses, the slow path names it
    assert info.value.loc is not None and info.value.loc.file == __file__
    assert len(fake.launches) == 2 and fake.loads == 1


def test_a_dim_past_the_reach_of_tma_coordinates_fails_at_the_callers_line(
        fake: Driver, lib: FakeLibcuda) -> None:
    """The driver encodes a dim of up to 2^32, but TMA's signed 32-bit coordinates reach
    elements below 2^31 only: a launch whose map would leave elements out of reach is
    refused before anything is queued (a silent zero past 2^31 otherwise)."""
    y = bf16(2, 2**31)
    far = bf16(1, 2**31 + 64)
    with pytest.raises(LaunchError, match=r"argument `X` cannot be copied by TMA.*"
                                          r"TMA_COORDINATE_REACH: globalDim\[0\] = 2147483712: "
                                          r"TMA coordinates are signed 32-bit") as info:
        copy_rows[1](far, y, N=64)
    assert info.value.loc is not None and info.value.loc.file == __file__
    assert fake.launches == []
    copy_rows[1](bf16(1, 2**31), y, N=64)  # every element within reach
    assert len(fake.launches) == 1


def test_a_staged_array_gets_the_map_of_its_device_copy(fake: Driver, lib: FakeLibcuda) -> None:
    x = np.zeros((33, 64), ml_dtypes.bfloat16)
    y = np.zeros((33, 64), ml_dtypes.bfloat16)
    copy_rows[33](x, y, N=64)
    (address, args, _), = lib.tensor_maps
    assert address >= 0x7E00_0000_0000  # the fake cuMemAlloc's buffer, not the host array
    assert args == expected_args(DType.BFLOAT16, (33, 64), (64, 1), address, (BOX_ROWS, 64),
                                 "B128")
    assert map_slot(fake.launches[-1], loaded_kernel())[0] == FakeLibcuda.encoding(address, args)


def test_a_staged_array_no_map_describes_is_refused_before_its_upload(
        fake: Driver, lib: FakeLibcuda) -> None:
    x = np.zeros((16, 65), np.float32)[:, :64]  # rows 260 bytes apart
    with pytest.raises(LaunchError, match=r"argument `X` cannot be copied by TMA.*"
                                          r"TMA_GLOBAL_STRIDE_ALIGN: global stride 260 bytes"):
        copy_rows[16](x, np.zeros((16, 64), np.float32), N=64)
    assert "cuMemAlloc_v2" not in lib.calls and fake.launches == []


def test_kernels_without_maps_keep_the_bare_pack(fake: Driver) -> None:
    """Entries of kernels without tensor maps pack with struct's own pack_into (no wrapper
    to call); those with maps through the generated function."""
    x, y = bf16(64, 64), bf16(64, 64, ptr=BASE + 0x10_0000)
    for kern in (plain_rows, copy_rows):
        kern[64](x, y, N=64)
        kern[64](x, y, N=64)
    plain, = next(iter(plain_rows._loaded.fast.values())).table.values()
    tma, = next(iter(copy_rows._loaded.fast.values())).table.values()
    assert type(plain[0]) is type(struct.Struct("<i").pack_into)
    assert plain[0].__self__.format == fastpath.CONFIG_FORMAT + "QiiiiQiiii"
    assert tma[0].__name__ == "_tk_pack_maps"
    assert [launch["path"] for launch in fake.launches] == ["slow", "fast"] * 2


def test_the_argument_buffers_align_every_map(fake: Driver) -> None:
    for size in range(8, 200, 8):
        for lead in (0, fastpath.CONFIG_BYTES):
            buf = fastpath.aligned_buffer(size, lead)
            assert (ctypes.addressof(buf) + lead) % 64 == 0 and len(buf) == size
    fmt, offsets, size = fastpath.slot_layout(["uint64", "int32", "tensor_map", "tensor_map",
                                               "uint64"])
    assert offsets == (0, 8, 64, 192, 320) and size == 328 and struct.calcsize(fmt) == 328
    copy_rows[4](bf16(4, 64), bf16(4, 64, ptr=BASE + 0x1000), N=64)
    kernel = loaded_kernel()
    assert ctypes.addressof(kernel.buffer) % 64 == 0 and kernel.map_slots
    tensor_map, = kernel.map_slots
    index = kernel.compiled.params.index(tensor_map)
    assert kernel.params[index] % 64 == 0


def test_a_maps_spec_is_the_devices_arch_and_the_slots_box(fake: Driver) -> None:
    """The map's compute capability is the device's (PROPS: 9.0); box and swizzle are the
    slot's; the element type the tensor's."""
    copy_rows[4](bf16(4, 64), bf16(4, 64, ptr=BASE + 0x1000), N=64)
    kernel = loaded_kernel()
    spec = kernel.map_spec(kernel.map_slots[0], DType.BFLOAT16)
    assert spec is map_spec(90, DType.BFLOAT16, (BOX_ROWS, 64), "B128")
    assert PROPS.capability == (9, 0)


# --- a hand-written TMA kernel (offline, and on a GPU) --------------------------------------

TMA_ROWS, TMA_COLS = 8, 32  # the box of tma_copy's float32 tile


@tk.kernel
def tma_copy(X, Out):
    r, c = tk.program_id(1), tk.program_id(0)
    Out.tile((TMA_ROWS, TMA_COLS), (r, c)).store(X.tile((TMA_ROWS, TMA_COLS), (r, c)).load())


def _tensor_params(prefix: str) -> str:
    return (f"    .param .u64 {prefix}_ptr,\n"
            + "".join(f"    .param .u32 {prefix}_{what}{a},\n"
                      for what in ("size", "stride") for a in range(2)))


def tma_copy_ptx(target: str = "sm_90a") -> str:
    """What code generation would emit for ``tma_copy`` (float32, int32 indices):
    program (x, y) loads the box at tile (y, x) of X through its tensor map
    (``X_map``, by value) into shared memory, waits on an mbarrier for its bytes,
    and stores the tile into Out where Out has elements (past X's edges: TMA's
    zero fill)."""
    n = TMA_ROWS * TMA_COLS
    return f""".version 8.0
.target {target}
.address_size 64

.visible .entry tma_copy(
{_tensor_params("X")}{_tensor_params("Out")}    .param .align 64 .b8 X_map[128],
    .param .u64 status
)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<2>;
    .shared .align 128 .b8 tile[{n * 4}];
    .shared .align 8 .b64 bar;

    mov.u32 %r1, %tid.x;
    mov.u32 %r2, tile;
    mov.u32 %r3, bar;
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ctaid.y;
    mul.lo.u32 %r6, %r4, {TMA_COLS};
    mul.lo.u32 %r7, %r5, {TMA_ROWS};
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra INITIALIZED;
    mbarrier.init.shared::cta.b64 [%r3], 1;
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
INITIALIZED:
    bar.sync 0;
    @%p1 bra WAIT;
    mov.u64 %rd1, X_map;
    cvta.param.u64 %rd2, %rd1;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r3], {n * 4};
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [%r2], [%rd2, {{%r6, %r7}}], [%r3];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
    @!%p2 bra WAIT;
    ld.param.u32 %r10, [Out_size0];
    ld.param.u32 %r11, [Out_size1];
    ld.param.u32 %r12, [Out_stride0];
    ld.param.u64 %rd4, [Out_ptr];
    mov.u32 %r13, %r1;
    mov.u32 %r21, %ntid.x;
LOOP:
    setp.ge.u32 %p3, %r13, {n};
    @%p3 bra DONE;
    div.u32 %r14, %r13, {TMA_COLS};
    rem.u32 %r15, %r13, {TMA_COLS};
    add.u32 %r16, %r7, %r14;
    add.u32 %r17, %r6, %r15;
    shl.b32 %r18, %r13, 2;
    add.u32 %r19, %r2, %r18;
    ld.shared.f32 %f1, [%r19];
    setp.ge.u32 %p2, %r16, %r10;
    @%p2 bra NEXT;
    setp.ge.u32 %p2, %r17, %r11;
    @%p2 bra NEXT;
    mad.lo.u32 %r20, %r16, %r12, %r17;
    mul.wide.u32 %rd5, %r20, 4;
    add.s64 %rd6, %rd4, %rd5;
    st.global.f32 [%rd6], %f1;
NEXT:
    add.u32 %r13, %r13, %r21;
    bra LOOP;
DONE:
    ret;
}}
"""


def tma_copy_kernel(module: Any = None, arch: str = "sm_90a",
                    divisible: frozenset[tuple[str, int, int]] = frozenset(),
                    check: bool = False) -> CompiledKernel:
    """``gpu._codegen`` for ``tma_copy``: the hand-written PTX (never a checked kernel)."""
    def tensor(name: str) -> tuple[ParamSlot, ...]:
        return (ParamSlot(SlotKind.POINTER, name, "uint64"),
                *[ParamSlot(SlotKind.SIZE, name, "int32", a) for a in range(2)],
                *[ParamSlot(SlotKind.STRIDE, name, "int32", a) for a in range(2)])

    params = (*tensor("X"), *tensor("Out"),
              ParamSlot(SlotKind.TENSOR_MAP, "X", "uint8", box=(TMA_ROWS, TMA_COLS)),
              ParamSlot(SlotKind.STATUS, "", "uint64"))
    return CompiledKernel("tma_copy", "sm_90a", "ptx", tma_copy_ptx().encode(), 4, 32, 0,
                          params, (), ("Out",))


def test_the_tma_kernel_assembles_to_a_tensor_load() -> None:
    if not link.available():
        pytest.skip("nvJitLink is not installed")
    cubin = link.link_ptx(tma_copy_ptx(), "sm_90a", "tma_copy")
    if not sass.available():
        pytest.skip("cuobjdump is not installed")
    ops = [i.split()[0] for i in sass.instructions(sass.disassemble(cubin))]
    assert "UTMALDG.2D" in ops and "STG.E" in ops


def test_the_tma_kernel_follows_the_abi_of_its_kernel(fake: Driver, lib: FakeLibcuda) -> None:
    """``tma_copy_kernel``'s slots are what the runtime packs for ``tma_copy``: both paths
    launch it, and the map slot holds X's map."""
    fake.compiled_fn = tma_copy_kernel
    tma_copy._loaded.clear()
    x, out = FakeTensor((37, 100), strides=(104, 1)), FakeTensor((40, 128), ptr=BASE + 0x10_0000)
    tma_copy[(4, 5)](x, out)
    tma_copy[(4, 5)](x, out)
    (kernel,) = tma_copy._loaded.values()
    want = FakeLibcuda.encoding(BASE, expected_args(DType.FLOAT32, (37, 100), (104, 1), BASE,
                                                    (TMA_ROWS, TMA_COLS), "NONE"))
    for launch in fake.launches:
        assert slots_of(launch, kernel) == (BASE, 37, 100, 104, 1, BASE + 0x10_0000, 40, 128,
                                            128, 1, want, 0)
    assert [launch["path"] for launch in fake.launches] == ["slow", "fast"]
    tma_copy._loaded.clear()


# --- on a GPU -----------------------------------------------------------------------------


def _hopper_torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    if driver.device_props(0).capability < (9, 0):
        pytest.skip("tensor maps need compute capability 9.0")
    return torch


@pytest.mark.gpu
def test_a_tma_kernel_copies_a_ragged_tensor_on_both_paths(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The hand-written ``tma_copy`` on torch tensors: X is 37 x 100 float32 in rows of 104
    (416 bytes), Out 40 x 128; slow path, fast path, then another X (a new map on the fast
    path). Out is X where X has elements and TMA's zeros elsewhere."""
    torch = _hopper_torch()
    monkeypatch.setattr(gpu, "_codegen", tma_copy_kernel)
    monkeypatch.setattr(device_arrays, "codegen_available", lambda: True)
    tma_copy._loaded.clear()
    tensor_maps.clear()
    try:
        with knobs.override(cache_dir=str(tmp_path), interpret=False):
            xs = [torch.randn(37, 104, device="cuda")[:, :100] for _ in range(2)]
            for i, x in enumerate((xs[0], xs[0], xs[1])):
                out = torch.full((40, 128), float("nan"), device="cuda")
                tma_copy[(4, 5)](x, out)
                torch.cuda.synchronize()
                assert torch.equal(out[:37, :100], x), i
                assert (out[37:] == 0).all() and (out[:, 100:] == 0).all(), i
                assert type(tma_copy[1]) is MethodType  # the next launch takes the fast path
        assert tensor_maps.cache_info().misses == 2
    finally:
        tma_copy._loaded.clear()
        tensor_maps.clear()



@pytest.mark.gpu
def test_the_map_is_the_one_cuda_bindings_encodes() -> None:
    """Our ctypes call of cuTensorMapEncodeTiled writes the same 128 bytes as
    ``cuda.bindings``' for a torch tensor (4097 bf16 columns in 8208-byte rows)."""
    torch = _hopper_torch()
    cb = pytest.importorskip("cuda.bindings.driver")
    props = driver.device_props(0)
    driver.use_device(0)
    tensor_maps.clear()
    base = torch.zeros((1001, 4104), dtype=torch.bfloat16, device="cuda")
    x = base[:, :4097]
    arch = tensor_maps.arch_of(props.capability)
    spec = map_spec(arch, DType.BFLOAT16, (8, 64), "B128")
    ours = tensor_maps.tensor_map(spec, "X", x.data_ptr(), tuple(x.shape), x.stride())
    tensor = GlobalTensor(2, tuple(x.shape), x.stride(), x.data_ptr(), TmaDataType.BFLOAT16)
    verdict = tma_admissibility(TmaRequest(tensor, (8, 64), swizzle=Swizzle.B128,
                                           l2_promotion=PROMOTION), arch=arch)
    assert verdict.params is not None
    (dtype, rank, dims, strides, box, element_strides, interleave, swizzle, l2,
     oob) = verdict.params.driver_args()
    u64, u32 = cb.cuuint64_t, cb.cuuint32_t
    err, theirs = cb.cuTensorMapEncodeTiled(
        cb.CUtensorMapDataType(dtype), u32(rank), x.data_ptr(), [u64(d) for d in dims],
        [u64(s) for s in strides], [u32(b) for b in box], [u32(e) for e in element_strides],
        cb.CUtensorMapInterleave(interleave), cb.CUtensorMapSwizzle(swizzle),
        cb.CUtensorMapL2promotion(l2), cb.CUtensorMapFloatOOBfill(oob))
    assert err == cb.CUresult.CUDA_SUCCESS
    assert ours == struct.pack("<16Q", *[int(q) for q in theirs.opaque])
    tensor_maps.clear()
