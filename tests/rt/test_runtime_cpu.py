"""The runtime's pieces that need no GPU: launch checks as pure functions, staging of host
arrays, DLPack parsing, streams, backend choice, the package structure and the CLI."""

from __future__ import annotations

import ast
import ctypes
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tilekit as tk
from tilekit import cli, knobs
from tilekit.errors import LaunchError
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import TensorSpec
from tilekit.rt import checks, device_arrays, driver, gpu
from tilekit.rt.arrays import to_host
from tilekit.rt.device_arrays import StagedArray

from .ptx_kernels import add, fake_compile

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FakeArg:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    span: int
    readonly: bool = False


# --- launch checks ------------------------------------------------------------------------


def test_grid_limits() -> None:
    checks.check_grid((2**31 - 1, 65535, 65535))
    with pytest.raises(LaunchError, match=r"grid dimension 0 \(x\) is 2147483648"):
        checks.check_grid((2**31, 1, 1))
    with pytest.raises(LaunchError, match=r"dimension 1 \(y\) is 65536.*65535") as info:
        checks.check_grid((1, 65536))
    assert "axis 0" in str(info.value)
    with pytest.raises(LaunchError, match=r"\(z\)"):
        checks.check_grid((1, 1, 70000))
    with pytest.raises(LaunchError, match="allows \\(1000\\)"):  # a device's own limits
        checks.check_grid((1001,), (1000, 10, 10))


def test_shared_memory_limit() -> None:
    checks.check_shared_memory(227 * 1024, 227 * 1024, "k")
    with pytest.raises(LaunchError, match="needs 300000 bytes of shared memory") as info:
        checks.check_shared_memory(300000, 232448, "k")
    assert "smaller tiles" in str(info.value)


def test_block_limit() -> None:
    with pytest.raises(LaunchError, match="2048 threads"):
        checks.check_block(2048, 1024)


def test_arrays_on_different_devices() -> None:
    assert checks.check_same_device([]) == -1
    assert checks.check_same_device([("x", 1), ("y", 1)]) == 1
    with pytest.raises(LaunchError, match="`x` on cuda:0, `y` on cuda:1"):
        checks.check_same_device([("x", 0), ("y", 1), ("z", 0)])


def test_misaligned_pointers() -> None:
    arg = FakeArg("x", DType.FLOAT32, (4,), (1,), 4)
    checks.check_alignment(arg, 0x1000, aligned16=True)
    checks.check_alignment(arg, 0x1004, aligned16=False)
    with pytest.raises(LaunchError, match="not aligned to its element size"):
        checks.check_alignment(arg, 0x1002, aligned16=False)
    with pytest.raises(LaunchError, match="16-byte boundary"):
        checks.check_alignment(arg, 0x1004, aligned16=True)


def test_32_bit_index_limit() -> None:
    small = FakeArg("x", DType.FLOAT32, (2**20,), (1,), 2**20)
    big = FakeArg("x", DType.FLOAT32, (2**31,), (1,), 2**31)
    checks.check_index_width(small, DType.INT32)
    checks.check_index_width(big, DType.INT64)
    with pytest.raises(LaunchError, match="indexes it in 32 bits"):
        checks.check_index_width(big, DType.INT32)
    wide_stride = FakeArg("x", DType.FLOAT32, (2,), (2**31,), 2**31 + 1)
    with pytest.raises(LaunchError):
        checks.check_index_width(wide_stride, DType.INT32)


def test_read_only_written_argument() -> None:
    checks.check_writable(FakeArg("x", DType.FLOAT32, (1,), (1,), 1, readonly=True), False)
    with pytest.raises(LaunchError, match="writes to `x`.*read-only"):
        checks.check_writable(FakeArg("x", DType.FLOAT32, (1,), (1,), 1, readonly=True), True)


def test_index_dtype_agrees_with_the_interpreter() -> None:
    for shape, strides in [((10,), (1,)), ((2**31,), (0,)), ((3, 2**30), (2**30, 1))]:
        host = to_host(np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (1,), (4,)),
                       "x", None)
        host = host._replace(shape=shape, strides=strides)
        assert device_arrays.index_dtype_for(shape, strides) == host.index_dtype


# --- staging host arrays ------------------------------------------------------------------


def _simulate_device(s: StagedArray) -> np.ndarray:
    """The device buffer a launch would upload: the bytes of the span."""
    return np.frombuffer(ctypes.string_at(s.upload_source(), s.nbytes), np.uint8).copy()


@pytest.mark.parametrize("make", [
    lambda a: a,                      # contiguous
    lambda a: a[1:, ::2],             # offset, strided: gaps between elements
    lambda a: a[::-1, ::-3],          # negative strides: the data pointer is not the lowest
    lambda a: a.T,                    # column-major
    lambda a: np.broadcast_to(a[0], (5, 12)),  # stride 0
])
def test_staged_arrays_keep_strides_and_write_back_only_elements(make) -> None:  # type: ignore[no-untyped-def]
    base = np.arange(60, dtype=np.float32).reshape(5, 12)
    view = make(base)
    s = StagedArray("x", to_host(view, "x", None))
    buf = _simulate_device(s)
    dev = np.ndarray(view.shape, view.dtype, buffer=buf, offset=-s.lo, strides=view.strides)
    np.testing.assert_array_equal(dev, view)  # what the kernel sees at device_ptr(base)
    assert s.device_ptr(1000) == 1000 - s.lo
    if not view.flags.writeable:
        return
    before = base.copy()
    dev[...] = -dev  # the "kernel" writes every element of the view
    s.copy_back(buf)
    mask = np.zeros(base.shape, bool)
    make(mask.view())[...] = True
    np.testing.assert_array_equal(base[mask], -before[mask])
    np.testing.assert_array_equal(base[~mask], before[~mask])  # gaps untouched


def test_staged_alignment_fact() -> None:
    a = np.zeros(64, np.float32)
    assert StagedArray("x", to_host(a, "x", None)).aligned16
    # the copy starts at the lowest element, in a 256-byte aligned buffer
    assert StagedArray("x", to_host(a[1:], "x", None)).aligned16
    assert not StagedArray("x", to_host(a[:63][::-1], "x", None)).aligned16  # 248 bytes in
    assert StagedArray("x", to_host(a[:61][::-1], "x", None)).aligned16  # 240 bytes in
    empty = StagedArray("x", to_host(a[:0], "x", None))
    assert empty.nbytes == 0


def test_specialization_records_16_byte_alignment() -> None:
    a = np.zeros(256 + 4, np.float32)
    a = a[(-a.ctypes.data % 16) // 4:][:256]  # 16-byte aligned start
    out = np.zeros(256, np.float32)
    aligned = add.trace(a, a, out, 256, BLOCK=128)
    shifted = add.trace(a[1:], a[1:], out, 255, BLOCK=128)
    assert aligned.kernel.aligned16 == {"X", "Y", "Out"}
    assert shifted.kernel.aligned16 == {"Out"}
    assert TensorSpec(DType.FLOAT32, 1, DType.INT32).aligned16  # the default


# --- DLPack without copies ----------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda a: a, lambda a: a[1:, ::2], lambda a: a[2]])
def test_dlpack_view_reads_pointer_shape_strides(make) -> None:  # type: ignore[no-untyped-def]
    a = make(np.arange(60, dtype=np.int16).reshape(5, 12))
    ptr, dtype, shape, strides, dev_type, dev_id, readonly = \
        device_arrays.dlpack_view(a.__dlpack__(), "a", None)
    assert ptr == a.ctypes.data and dtype is DType.INT16 and shape == a.shape
    assert strides == tuple(s // 2 for s in a.strides)
    assert (dev_type, dev_id) == (1, 0) and not readonly


def test_dlpack_versioned_capsule_and_read_only_flag() -> None:
    a = np.arange(8, dtype=np.float32)
    a.flags.writeable = False
    try:
        capsule = a.__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip("numpy too old for versioned DLPack")
    ptr, dtype, shape, *_, readonly = device_arrays.dlpack_view(capsule, "a", None)
    assert ptr == a.ctypes.data and dtype is DType.FLOAT32 and shape == (8,) and readonly


def test_host_objects_are_not_device_arrays() -> None:
    assert not device_arrays.is_device_array(np.zeros(3))

    class CudaDLPack:
        def __dlpack_device__(self):  # type: ignore[no-untyped-def]
            return (2, 0)

    assert device_arrays.is_device_array(CudaDLPack())


# --- streams ------------------------------------------------------------------------------


def test_stream_handles() -> None:
    class TorchLike:
        cuda_stream = 1234

    class CupyLike:
        ptr = 99

    class Protocol:
        def __cuda_stream__(self):  # type: ignore[no-untyped-def]
            return (0, 77)

    assert device_arrays.stream_handle(None, None) == 0
    assert device_arrays.stream_handle(5, None) == 5
    assert device_arrays.stream_handle(TorchLike(), None) == 1234
    assert device_arrays.stream_handle(CupyLike(), None) == 99
    assert device_arrays.stream_handle(Protocol(), None) == 77
    with pytest.raises(LaunchError, match="stream= must be"):
        device_arrays.stream_handle("fast", None)


def test_stream_keyword_on_the_interpreter_and_as_a_parameter() -> None:
    @tk.kernel
    def fill(Out, stream):
        tk.store(Out, tk.arange(4), tk.full((4,), stream, tk.int32))

    out = np.zeros(4, np.int32)
    with knobs.override(interpret=True):
        fill[1](out, stream=7)  # a kernel parameter named `stream` keeps its meaning
        assert out.tolist() == [7] * 4
        x = np.ones(128, np.float32)
        res = np.zeros(128, np.float32)
        add[1](x, x, res, 128, BLOCK=128, stream=0)  # the launch option
        assert res.tolist() == [2.0] * 128


# --- backend choice -----------------------------------------------------------------------


def test_interpret_knob_picks_the_interpreter() -> None:
    with knobs.override(interpret=True):
        b = device_arrays.choose_backend(True)
    assert b.kind is device_arrays.BackendKind.INTERPRETER and "TILEKIT_INTERPRET" in b.reason


def test_no_gpu_picks_the_interpreter_and_says_why() -> None:
    if driver.available():
        pytest.skip("a GPU is present")
    status = driver.status()
    assert not status.available and status.reason
    b = device_arrays.choose_backend(False)
    assert b.kind is device_arrays.BackendKind.INTERPRETER and b.reason == status.reason


def test_kernels_run_without_a_gpu() -> None:
    x = np.arange(300, dtype=np.float32)
    out = np.zeros(300, np.float32)
    with knobs.override(interpret=True):
        add[tk.cdiv(300, 128)](x, x, out, 300, BLOCK=128)
    np.testing.assert_array_equal(out, 2 * x)


# --- dumps --------------------------------------------------------------------------------


def test_dump_ptx_and_llvm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = np.zeros(8, np.float32)
    module = add.trace(x, x, x, 8, BLOCK=128)
    spec = next(s for s, m in add._cache.items() if m is module)

    def with_llvm(m, arch, divisible):  # type: ignore[no-untyped-def]

        return fake_compile(m, arch, divisible)._replace(llvm_ir="; the llvm module")

    with knobs.override(cache_dir=str(tmp_path), dump=frozenset({"ptx", "llvm"})):
        gpu.compile_cached(module, spec, "sm_90a", compile_fn=with_llvm)
        err = capsys.readouterr().err
        assert "ptx: vector_add (sm_90a)" in err and ".visible .entry vector_add" in err
        assert "llvm: vector_add" in err and "; the llvm module" in err
        gpu.compile_cached(module, spec, "sm_90a", compile_fn=with_llvm)  # from disk
        assert ".visible .entry vector_add" in capsys.readouterr().err


def test_regression_the_gpu_tests_code_generators_take_the_check_argument(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The GPU tests replace ``gpu._codegen`` with hand-written PTX (``fake_compile``,
    ``tma_copy_kernel``); check mode gave it a fourth argument, ``check``, and the fakes
    broke 26 GPU tests, where nothing offline saw it. They are called here as the runtime
    calls them, in check mode: still their (unchecked) kernels."""
    from .test_tensor_maps import tma_copy_kernel

    x = np.zeros(8, np.float32)
    module = add.trace(x, x, x, 8, BLOCK=128)
    spec = next(s for s, m in add._cache.items() if m is module)
    for fake, name in [(fake_compile, "vector_add"), (tma_copy_kernel, "tma_copy")]:
        monkeypatch.setattr(gpu, "_codegen", fake)
        with knobs.override(cache_dir=str(tmp_path / name)):
            entry = gpu.compile_cached(module, spec, "sm_90a", check=True)
        assert entry.kernel.name == name and not entry.kernel.checked


# --- structure ----------------------------------------------------------------------------


def test_import_tilekit_loads_no_heavy_modules() -> None:
    code = ("import sys, tilekit\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('llvmlite', 'islpy', 'sympy', 'cuda', 'torch', 'cupy'))\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_lang_imports_nothing_from_rt() -> None:
    """The front end traces, the runtime launches: no lang -> rt import (no cycle)."""
    for path in (ROOT / "tilekit" / "lang").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("tilekit.rt"), f"{path.name}: {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("tilekit.rt") for a in node.names), path.name


def test_kernel_objects() -> None:
    assert isinstance(add, tk.JITKernel) and isinstance(add, tk.KernelFunction)
    with pytest.raises(LaunchError, match="without a grid"):
        add(1)


def test_readme_links_nothing_outside_the_repo() -> None:
    text = (ROOT / "README.md").read_text()
    assert "../" not in text and "shared/DESIGN" not in text
    assert "docs/architecture.md" in text and (ROOT / "docs" / "architecture.md").exists()


# --- the command line ---------------------------------------------------------------------


def test_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with knobs.override(cache_dir=str(tmp_path)):
        assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"cache: {tmp_path} (0 kernels" in out
    assert "tilekit: " in out and "llvmlite: " in out and "nvJitLink: " in out
    assert "cuda-bindings: " in out
    if driver.available():
        assert "CUDA driver: " in out and "compute capability" in out
    else:
        assert "GPU: none found" in out and "CPU interpreter" in out
        assert "backend: interpreter" in out


def test_cache_list_and_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = np.zeros(8, np.float32)
    module = add.trace(x, x, x, 8, BLOCK=128)
    spec = next(s for s, m in add._cache.items() if m is module)
    with knobs.override(cache_dir=str(tmp_path)):
        gpu.compile_cached(module, spec, "sm_80", compile_fn=fake_compile)
        assert cli.main(["cache", "list"]) == 0
        assert "1 kernel," in capsys.readouterr().out
        assert cli.main(["cache", "clear"]) == 0
        assert "removed 1 cached kernel " in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"tilekit {tk.__version__}"
