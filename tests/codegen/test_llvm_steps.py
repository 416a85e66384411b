"""The driver's LLVM steps (``parse_ir``, ``link_math``, ``optimize``, ``emit_code``),
offline: what each guarantees, and that the examples' 128-bit global accesses survive
the pipeline (SASS read with cuobjdump, when installed)."""

from __future__ import annotations

import collections
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

from tilekit.codegen import driver, sass
from tilekit.codegen.mathlib import MathLib
from tilekit.codegen.target import get_target
from tilekit.errors import LoweringError
from tilekit.rt import link

SM90 = get_target("sm_90a")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def kernel_text(use_exp: bool) -> str:
    """A one-block NVPTX kernel ``out[0] = f(x)`` with f = expf (libdevice) or identity."""
    m = ir.Module("k")
    m.triple = SM90.triple
    f32 = ir.FloatType()
    ptr = ir.PointerType(f32, 1)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ptr, f32]), "k")
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    value = fn.args[1]
    math = MathLib.for_target(SM90.triple)
    if use_exp:
        from tilekit.ir.dtypes import DType

        value = math.call(b, "exp", DType.FLOAT32, value)
    b.store(value, fn.args[0])
    b.ret_void()
    assert bool(math.used) == use_exp
    return str(m)


def test_parse_ir_reports_invalid_ir_as_a_lowering_error_naming_the_kernel():
    bad = kernel_text(False).replace("ret void", "ret i32 0")
    with pytest.raises(LoweringError, match="LLVM rejected the code for `k` on sm_90a"):
        driver.parse_ir(bad, SM90, "k")


def test_math_is_linked_inlined_and_reflected_away():
    ptx, kind, _ = driver.emit_binary(kernel_text(True), SM90, "k", True)
    text = ptx.decode()
    assert kind == "ptx" and ".entry k" in text
    assert "__nv_" not in text and "__nvvm_reflect" not in text  # inlined, folded
    assert "ex2.approx" in text  # libdevice's expf


def test_link_math_leaves_only_the_kernel_external():
    import llvmlite.binding as llvm

    mod = driver.parse_ir(kernel_text(True), SM90, "k")
    driver.link_math(mod, SM90, "k")
    defined = [f for f in mod.functions if not f.is_declaration]
    assert {f.name for f in defined} >= {"k", "__nv_expf"}
    assert len(defined) < 10  # libdevice's ~500 functions dropped before optimize
    assert [f.name for f in defined if f.linkage == llvm.Linkage.external] == ["k"]


def test_the_dumped_llvm_is_the_input_without_the_knob():
    text = kernel_text(False)
    assert driver.emit_binary(text, SM90, "k", False)[2] == text


# --- the examples' SASS: 128-bit global loads and stores survive the pipeline ------------


def _trace(name: str):
    sys.path.insert(0, str(EXAMPLES))
    try:
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))
    if name == "softmax":
        x = np.zeros((1000, 4097), np.float32)
        return mod.softmax.trace(x, np.empty_like(x), N=4097)
    if name == "layer_norm":
        x = np.zeros((67, 1001), np.float32)
        w = np.zeros(1001, np.float32)
        return mod.layer_norm.trace(x, w, w.copy(), np.empty_like(x), 1001, 1e-5, BLOCK=256)
    x = np.zeros(100_003, np.float32)
    return mod.add.trace(x, x.copy(), np.empty_like(x), 100_003, BLOCK=1024)


@pytest.mark.skipif(not (link.available() and sass.available()),
                    reason="needs nvJitLink and cuobjdump (pip install nvidia-nvjitlink "
                           "nvidia-cuda-cuobjdump)")
@pytest.mark.parametrize("name", ["softmax", "layer_norm", "vector_add"])
def test_example_keeps_its_128_bit_global_accesses(name: str):
    compiled = driver.compile_module(_trace(name), "sm_90a")
    cubin = link.link_ptx(compiled.binary, "sm_90a", compiled.name)
    ops = collections.Counter(i.split()[0] for i in sass.instructions(sass.disassemble(cubin)))
    assert ops["LDG.E.128"] > 0 and ops["STG.E.128"] > 0, dict(ops)
    assert not ops["LDL"] and not ops["STL"], dict(ops)  # no spills


# --- libdevice parsed on a worker thread during the lowering ---------------------------


def _traced_softmax(n: int = 33):
    return _trace_kernel("softmax", n)


def _trace_kernel(kind: str, n: int):
    import tilekit as tk

    if kind == "softmax":
        @tk.kernel
        def k(X, Y, N: tk.constexpr):
            x = X.tile((1, N), (tk.program_id(0), 0)).load()
            Y.tile((1, N), (tk.program_id(0), 0)).store(tk.exp(x - tk.max(x, axis=1,
                                                                            keepdims=True)))
    else:
        @tk.kernel
        def k(X, Y, N: tk.constexpr):
            x = X.tile((1, N), (tk.program_id(0), 0)).load()
            Y.tile((1, N), (tk.program_id(0), 0)).store(x * 2.0)

    x = np.zeros((4, n), np.float32)
    return k.trace(x, np.empty_like(x), N=n)


def test_prefetch_starts_only_for_kernels_that_use_libdevice():
    assert driver.LibdevicePrefetch.start(_trace_kernel("scale", 33), SM90) is None
    assert driver.LibdevicePrefetch.start(_traced_softmax(), get_target("gfx942")) is None
    prefetch = driver.LibdevicePrefetch.start(_traced_softmax(), SM90)
    assert prefetch is not None
    assert any(f.name == "__nv_expf" for f in prefetch.result().functions)


def test_the_prefetch_keeps_only_what_the_math_ops_can_call():
    assert driver.libdevice_functions({"exp", "sigmoid", "tanh"}) == {
        "__nv_expf", "__nv_exp", "__nv_tanhf", "__nv_tanh"}
    prefetch = driver.LibdevicePrefetch.start(_traced_softmax(), SM90)
    kept = [f.name for f in prefetch.result().functions if not f.is_declaration]
    assert "__nv_expf" in kept and "__nv_sinf" not in kept and len(kept) < 10, kept
    assert prefetch.covers({"__nv_expf"}) and not prefetch.covers({"__nv_expf", "__nv_floorf"})


def test_a_lowering_that_calls_more_links_all_of_libdevice(monkeypatch):
    """float // calls floor, which no op of the traced kernel names: the trimmed parse does
    not cover it, and the compile links the whole of libdevice as without a prefetch."""
    import tilekit as tk

    @tk.kernel
    def k(X, Y, N: tk.constexpr):
        x = X.tile((1, N), (tk.program_id(0), 0)).load()
        Y.tile((1, N), (tk.program_id(0), 0)).store(tk.exp(x) + x // 3.0)

    x = np.zeros((4, 33), np.float32)
    module = k.trace(x, np.empty_like(x), N=33)
    prefetch = driver.LibdevicePrefetch.start(module, SM90)
    assert prefetch is not None and not prefetch.covers({"__nv_expf", "__nv_floorf"})
    ptx = driver.compile_module(module, "sm_90a").binary
    monkeypatch.setattr(driver, "PREFETCH_LIBDEVICE", False)
    assert driver.compile_module(module, "sm_90a").binary == ptx


def test_prefetched_and_inline_parses_give_the_same_ptx(monkeypatch):
    module = _traced_softmax()
    with_prefetch = driver.compile_module(module, "sm_90a").binary
    monkeypatch.setattr(driver, "PREFETCH_LIBDEVICE", False)
    assert driver.compile_module(module, "sm_90a").binary == with_prefetch


def test_a_lowering_error_leaves_no_parse_running(monkeypatch):
    import threading

    import tilekit.codegen.lower as lower

    def fail(*args, **kwargs):
        raise LoweringError("lowering failed on purpose")

    monkeypatch.setattr(lower, "lower_function", fail)
    with pytest.raises(LoweringError, match="on purpose"):
        driver.compile_module(_traced_softmax(), "sm_90a")
    assert not [t for t in threading.enumerate() if t.name == "tilekit-libdevice"]


def test_a_failed_prefetch_raises_where_libdevice_is_linked():
    prefetch = driver.LibdevicePrefetch(b"not bitcode")
    mod = driver.parse_ir(kernel_text(True), SM90, "k")
    with pytest.raises(LoweringError, match="linking libdevice into `k` failed: .*bitcode"):
        driver.link_math(mod, SM90, "k", prefetched=prefetch)


# --- finding libdevice -------------------------------------------------------------------


class _Pathfinder:
    """A stand-in ``cuda.pathfinder`` that records whether it was asked."""

    def __init__(self, answer: str) -> None:
        self.asked, self.answer = 0, answer

    def find_bitcode_lib(self, name: str) -> str:
        self.asked += 1
        return self.answer


@pytest.mark.parametrize("folder", ["cu13/nvvm/libdevice", "cuda_nvcc/nvvm/libdevice"])
def test_libdevice_in_a_wheel_is_found_without_asking_the_pathfinder(tmp_path, monkeypatch,
                                                                     folder):
    from tilekit.codegen import libdevice

    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "libdevice.10.bc").write_bytes(b"BC")
    pathfinder = _Pathfinder("/elsewhere/libdevice.10.bc")
    _no_toolkit_variables(monkeypatch)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", pathfinder)
    monkeypatch.setattr(libdevice, "_nvidia_roots", lambda: [str(tmp_path / "none"),
                                                             str(tmp_path)])
    assert libdevice.find_libdevice() == str(tmp_path / folder / "libdevice.10.bc")
    assert pathfinder.asked == 0


def _no_toolkit_variables(monkeypatch) -> None:
    for var in ("TILEKIT_LIBDEVICE", "CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("var", ["CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH"])
def test_libdevice_of_a_named_toolkit_is_found_without_asking_the_pathfinder(
        tmp_path, monkeypatch, var):
    from tilekit.codegen import libdevice

    (tmp_path / "nvvm" / "libdevice").mkdir(parents=True)
    (tmp_path / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    pathfinder = _Pathfinder("/elsewhere/libdevice.10.bc")
    _no_toolkit_variables(monkeypatch)
    monkeypatch.setenv(var, str(tmp_path))
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", pathfinder)
    monkeypatch.setattr(libdevice, "_nvidia_roots", lambda: [])
    assert libdevice.find_libdevice() == str(tmp_path / "nvvm/libdevice/libdevice.10.bc")
    assert pathfinder.asked == 0


def test_libdevice_elsewhere_is_the_pathfinders_answer(tmp_path, monkeypatch):
    from tilekit.codegen import libdevice

    (tmp_path / "cu13").mkdir()  # a wheel folder without the bitcode
    pathfinder = _Pathfinder("/opt/cuda/nvvm/libdevice/libdevice.10.bc")
    _no_toolkit_variables(monkeypatch)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-toolkit-here"))
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", pathfinder)
    monkeypatch.setattr(libdevice, "_nvidia_roots", lambda: [str(tmp_path)])
    assert libdevice.find_libdevice() == pathfinder.answer
    assert pathfinder.asked == 1


def test_the_libdevice_variable_comes_first(tmp_path, monkeypatch):
    from tilekit.codegen import libdevice

    mine = tmp_path / "mine.bc"
    mine.write_bytes(b"BC")
    monkeypatch.setenv("TILEKIT_LIBDEVICE", str(mine))
    monkeypatch.setattr(libdevice, "_nvidia_roots", lambda: pytest.fail("searched the wheels"))
    assert libdevice.find_libdevice() == str(mine)


# --- what a cold compile imports ---------------------------------------------------------


def test_a_row_kernel_compiles_without_the_tensor_core_layout_modules():
    """A kernel without a dot or a pipeline never imports the MMA, wgmma and TMA layout
    modules, nor ml_dtypes (float32 only): 10-40 ms of a cold compile (bench/RESULTS.md,
    "A cheaper cold compile"). A fresh interpreter, so that nothing else imported them."""
    import subprocess

    code = """
import sys
import numpy as np
import tilekit as tk
from tilekit.codegen import compile_module

@tk.kernel
def k(X, Y, N: tk.constexpr):
    x = X.tile((1, N), (tk.program_id(0), 0)).load()
    e = tk.exp(x - tk.max(x, axis=1, keepdims=True))
    Y.tile((1, N), (tk.program_id(0), 0)).store(e / tk.sum(e, axis=1, keepdims=True))

x = np.zeros((4, 33), np.float32)
assert compile_module(k.trace(x, np.empty_like(x), N=33), "sm_90a").binary
heavy = ("tilekit.layout.mma_sync", "tilekit.layout.wgmma", "tilekit.layout.tma",
         "tilekit.layout.admissibility", "ml_dtypes")
print(sorted(m for m in sys.modules if m.startswith(heavy)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
