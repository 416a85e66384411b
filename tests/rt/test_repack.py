"""The runtime's repack (``tilekit.rt.repack``): a kernel compiled for a padded copy of a
tensor gets that copy, made on the launch's stream, at every launch.

Without a GPU: the fake driver records what a launch packs, and the stream-ordered
allocation, the pitched copies and the free are recorded instead of run. The copy's
contents are checked on the H100 (``tests/codegen/test_wgmma_dot.py``'s misaligned-K
cases).
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import pytest

import tilekit as tk
from tilekit.errors import LaunchError
from tilekit.rt import driver, repack

from .fake_gpu import Driver, FakeTensor, abi_compile, slots_of, use_fake_gpu
from .test_driver import cydriver_declarations

BUFFER = 0x5000_0000


@tk.kernel
def scale(A, C, N: tk.constexpr):
    r = tk.program_id(0)
    C.tile((1, N), (r, 0)).store(A.tile((1, N), (r, 0)).load() * 2)


class Calls:
    """The stream-ordered calls a launch made, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[Any, ...]] = []
        monkeypatch.setattr(driver, "alloc_async", self.alloc)
        monkeypatch.setattr(driver, "free_async", lambda ptr, stream: self.log.append(
            ("free", ptr, stream)))
        monkeypatch.setattr(driver, "copy_rows", lambda *a: self.log.append(("copy", *a[:7])))

    def alloc(self, nbytes: int, stream: int, device: int, loc: Any = None) -> int:
        self.log.append(("alloc", nbytes, stream))
        return BUFFER + 256 * len([c for c in self.log if c[0] == "alloc"])

    def kinds(self) -> list[str]:
        return [c[0] for c in self.log]


def repacking(names: tuple[str, ...]):
    def compile_fn(module: Any, arch: str, divisible: frozenset = frozenset()):
        return abi_compile(module, arch, divisible)._replace(repacked=names)
    return compile_fn


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Driver:  # type: ignore[misc]
    drv = use_fake_gpu(monkeypatch, repacking(("A",)))
    scale._loaded.clear()
    yield drv
    scale._loaded.clear()


def test_the_kernel_reads_a_padded_copy_made_before_it_and_freed_after(
        fake: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    a = FakeTensor((5, 7), "torch.bfloat16", ptr=0x7F00_0000_0002)  # rows of 14 bytes
    c = FakeTensor((5, 7), "torch.bfloat16", ptr=0x7F00_1000_0000)
    scale[5](a, c, N=8)
    assert calls.kinds() == ["alloc", "copy", "free"]
    assert calls.log[0][1] == 5 * 8 * 2  # rows padded to 16 bytes
    _, dst, dst_pitch, src, src_pitch, row_bytes, rows, stream = calls.log[1]
    assert (dst, dst_pitch, src, src_pitch, row_bytes, rows) == \
        (BUFFER + 256, 16, 0x7F00_0000_0002, 14, 14, 5)
    assert calls.log[2][1] == BUFFER + 256  # the copy is freed on the launch's stream
    (kernel,) = scale._loaded.values()
    slots = dict(zip([(p.kind.value, p.arg, p.axis) for p in kernel.compiled.params],
                     slots_of(fake.launches[0], kernel)))
    assert slots[("pointer", "A", -1)] == BUFFER + 256
    assert (slots[("size", "A", 0)], slots[("size", "A", 1)]) == (5, 7)
    assert (slots[("stride", "A", 0)], slots[("stride", "A", 1)]) == (8, 1)
    assert slots[("pointer", "C", -1)] == 0x7F00_1000_0000  # not repacked
    assert slots[("stride", "C", 0)] == 7


def test_every_launch_copies_again_through_the_full_launch_path(
        fake: Driver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The data may change between launches, and the fast path makes no copies."""
    calls = Calls(monkeypatch)
    a = FakeTensor((3, 5), "torch.bfloat16")
    c = FakeTensor((3, 5), "torch.bfloat16", ptr=0x7F00_1000_0000)
    for _ in range(3):
        scale[3](a, c, N=8)
    assert [launch["path"] for launch in fake.launches] == ["slow"] * 3
    assert calls.kinds() == ["alloc", "copy", "free"] * 3
    assert not scale._loaded.fast


def test_a_strided_batch_is_copied_matrix_by_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    src = type("Src", (), {"dtype": tk.bfloat16, "shape": (2, 3, 5), "strides": (40, 6, 1),
                           "device": 0})()
    r = repack.RepackedArray("X", src, None, 0, None)
    assert r.strides == (24, 8, 1) and r.nbytes == 2 * 24 * 2
    assert r.fill(0x1000, 7, None) == BUFFER + 256
    copies = [c for c in calls.log if c[0] == "copy"]
    assert copies == [("copy", BUFFER + 256, 16, 0x1000, 12, 10, 3, 7),
                      ("copy", BUFFER + 256 + 48, 16, 0x1000 + 80, 12, 10, 3, 7)]


@pytest.mark.parametrize("row_stride", [-5, 0])
def test_flipped_or_broadcast_rows_are_copied_one_by_one(
        monkeypatch: pytest.MonkeyPatch, row_stride: int) -> None:
    calls = Calls(monkeypatch)
    src = type("Src", (), {"dtype": tk.float16, "shape": (3, 5), "strides": (row_stride, 1),
                           "device": 0})()
    r = repack.RepackedArray("X", src, None, 0, None)
    r.fill(0x2000, 0, None)
    copies = [c[1:] for c in calls.log if c[0] == "copy"]
    assert copies == [(BUFFER + 256 + 16 * i, 16, 0x2000 + 2 * row_stride * i, 10, 10, 1, 0)
                      for i in range(3)]


def test_an_empty_tensor_is_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    src = type("Src", (), {"dtype": tk.bfloat16, "shape": (0, 5), "strides": (5, 1),
                           "device": 0})()
    r = repack.RepackedArray("X", src, None, 0, None)
    r.fill(0x2000, 0, None)
    r.free(0)
    assert calls.kinds() == ["alloc", "free"]


def test_a_copy_past_32_bit_indices_is_refused_with_what_to_do() -> None:
    src = type("Src", (), {"dtype": tk.bfloat16, "shape": (2**20, 2047), "strides": (2047, 1),
                           "device": 0})()
    with pytest.raises(LaunchError, match="32-bit indices") as info:
        repack.RepackedArray("X", src, tk.int32, 0, None)
    assert "multiple of 8 bf16 elements" in str(info.value)
    repack.RepackedArray("X", src, tk.int64, 0, None)  # 64-bit indices reach it


@pytest.mark.parametrize("shape, itemsize, strides", [
    ((8155, 8092), 2, (8096, 1)), ((3, 5), 4, (8, 1)), ((4, 6, 7), 1, (96, 16, 1)),
    ((9,), 2, (1,)), ((2, 16), 2, (16, 1)),
])
def test_padded_strides_are_the_layout_librarys_repack(shape, itemsize, strides) -> None:
    from tilekit.layout.tma import GlobalTensor, TmaRequest
    from tilekit.layout.tma_plans import _repacked

    src = type("Src", (), {"dtype": {1: tk.int8, 2: tk.bfloat16, 4: tk.float32}[itemsize],
                           "shape": shape, "strides": tuple(range(len(shape), 0, -1)),
                           "device": 0})()
    assert repack.RepackedArray("X", src, None, 0, None).strides == strides
    t = GlobalTensor(itemsize, shape, tuple(range(len(shape), 0, -1)), itemsize)
    _, copied = _repacked(TmaRequest(t, tuple(1 for _ in shape)))
    assert copied.strides == strides


def test_the_memcpy2d_struct_is_cuda_h_s() -> None:
    """Field names and order as ``cuda.bindings`` declares ``CUDA_MEMCPY2D_st``."""
    body = re.search(r"cdef struct CUDA_MEMCPY2D_st:\n((?:\s{8}.*\n)+)",
                     cydriver_declarations())
    assert body
    names = [line.split()[-1] for line in body.group(1).splitlines() if line.strip()]
    memcpy2d = driver.structs()["CUDA_MEMCPY2D"]
    assert names == [f[0] for f in memcpy2d._fields_]
    assert ctypes.sizeof(memcpy2d) == 128
    # CUmemPoolProps: four ints, a pointer and 64 bytes (CUDA 11's reserved[64], which
    # CUDA 12 and 13 split into maxSize, usage and reserved ones)
    assert ctypes.sizeof(driver.structs()["CUmemPoolProps"]) == 88
