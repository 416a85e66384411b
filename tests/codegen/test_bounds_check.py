"""Check mode's code (``tilekit.codegen.bounds_check``), without a GPU.

* The validity test a checked access makes is the interpreter's: the same LLVM code, built
  for the host and run through llvmlite's JIT, against ``TensorBinding``'s check on random
  views (ranks 0-3, empty dims, negative, zero and overlapping strides). It accepts every
  offset the interpreter accepts, rejects every one it rejects when the view's strides nest,
  and checks the span of views whose strides do not.
* With check mode off no check code is emitted (the kernel is what it was); a kernel with no
  raw access (tile views only) is the same checked or not.
* Checked kernels assemble for sm_90a and sm_80 (nvJitLink), and name their access sites.
"""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

import ctypes
import functools
import inspect
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from llvmlite import ir

import tilekit as tk
from tests.codegen.sass_checks import needs_linker
from tests.codegen.test_offline import EXAMPLE_CASES, KERNEL_CASES, example_module
from tests.lang import kernels as K
from tilekit import knobs
from tilekit.codegen import bounds_check
from tilekit.codegen.driver import compile_module
from tilekit.ir.dtypes import DType
from tilekit.rt import link
from tilekit.rt.arrays import HostArray
from tilekit.rt.memory import OutOfBounds, TensorBinding

I32, I64 = ir.IntType(32), ir.IntType(64)


@functools.cache
def host_check(rank: int) -> Any:
    """``valid(offset, sizes..., strides...)``: ``view_bounds`` and ``valid_offsets`` as a
    checked kernel emits them, compiled for the host."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module("host_check")
    module.triple = llvm.get_process_triple()
    fn = ir.Function(module, ir.FunctionType(I32, [I64] * (1 + 2 * rank)), "valid")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    offset, *view = fn.args
    bounds = bounds_check.view_bounds(b, view[:rank], view[rank:])
    b.ret(b.zext(bounds_check.valid_offsets(b, bounds, [offset])[0], I32))
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    engine = llvm.create_mcjit_compiler(
        parsed, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_int64] * (1 + 2 * rank))
    valid = proto(engine.get_function_address("valid"))
    valid.keep = (engine, parsed)  # type: ignore[attr-defined]
    return valid


def interpreter_binding(shape: tuple[int, ...], strides: tuple[int, ...]) -> TensorBinding:
    """The interpreter's binding of a float32 view of ``shape`` and ``strides`` (elements)
    into a buffer large enough for it."""
    span = 1 + sum(abs(s) * (n - 1) for n, s in zip(shape, strides)) if all(shape) else 0
    buffer = np.zeros(span + 1, np.float32)
    first = sum(-s * (n - 1) for n, s in zip(shape, strides) if s < 0) if all(shape) else 0
    arr = np.lib.stride_tricks.as_strided(buffer[first:], shape,
                                          tuple(4 * s for s in strides))
    return TensorBinding("X", HostArray(arr, DType.FLOAT32, shape, strides, "cpu"))


def interpreter_accepts(binding: TensorBinding, offset: int) -> bool:
    try:
        binding._check(np.asarray(offset), None)
    except OutOfBounds:
        return False
    return True


def strides_nest(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    dims = sorted(((abs(s), n) for n, s in zip(shape, strides) if n > 1 and s), reverse=True)
    reach = 0
    for a, n in reversed(dims):
        if a <= reach:
            return False
        reach += a * (n - 1)
    return True


views = st.integers(0, 3).flatmap(lambda rank: st.tuples(
    st.tuples(*[st.integers(0, 4)] * rank), st.tuples(*[st.integers(-9, 9)] * rank)))


@given(views)
def test_the_check_accepts_what_the_interpreter_accepts(view):
    shape, strides = view
    binding = interpreter_binding(shape, strides)
    valid = host_check(len(shape))
    span = binding._flat.shape[0]
    nested = strides_nest(shape, strides)
    for offset in range(-span - 3, 2 * span + 4):
        expect = interpreter_accepts(binding, offset)
        got = bool(valid(offset, *shape, *strides))
        if nested:
            assert got == expect, (shape, strides, offset)
        else:  # strides that do not nest: the span is checked
            assert expect <= got == (0 <= offset + binding._base < span), \
                (shape, strides, offset)


@pytest.mark.parametrize("shape,strides", [
    ((1000, 37), (64, 1)),     # a column slice: rows 64 apart
    ((37, 1000), (1, 64)),     # its transpose
    ((8, 5, 6), (-60, 12, 2)),  # a reversed dim and gaps along two
    ((4, 3), (0, 1)),          # a broadcast row
    ((3, 3), (1, 1)),          # overlapping (as_strided): the span is checked
])
def test_the_check_on_large_views(shape, strides):
    """Views larger than the random ones, offsets around their edges and gaps."""
    binding = interpreter_binding(shape, strides)
    valid = host_check(len(shape))
    span = binding._flat.shape[0]
    nested = strides_nest(shape, strides)
    rng = np.random.default_rng(len(shape))
    offsets = set(range(-70, 70)) | set(range(span - 70, span + 70))
    offsets |= set(int(o) for o in rng.integers(-span, 2 * span, 400))
    for offset in sorted(offsets):
        expect = interpreter_accepts(binding, offset)
        got = bool(valid(offset, *shape, *strides))
        assert got == expect or (not nested and got >= expect), (offset, got, expect)


# --- what a compiled kernel holds -----------------------------------------------------------

CHECK_CODE = (bounds_check.FAULT_FUNCTION, "tk_on_grid")


def test_unchecked_kernels_have_no_check_code():
    for name in ("vector_add", "histogram", "softmax"):
        compiled = compile_module(example_module(name), "sm_90a")
        ptx = compiled.binary.decode()
        assert not any(c in ptx for c in CHECK_CODE), name
        assert not compiled.checked and compiled.access_sites == ()
        assert compiled.status_words == 4


def test_the_knob_does_not_reach_codegen():
    """Check mode is the runtime's decision, passed as ``check=``: compile_module reads no
    knob, so the unchecked code is the same whatever the environment says."""
    module = example_module("vector_add")
    off = compile_module(module, "sm_90a").binary
    with knobs.override(check=True):
        assert compile_module(module, "sm_90a").binary == off


def test_tile_views_are_not_checked():
    """Tile views never fault in the interpreter (elements past the edges are masked, at
    any tile index): a kernel of tile views only is the same checked or not."""
    module = example_module("softmax")
    checked = compile_module(module, "sm_90a", check=True)
    assert checked.checked and checked.access_sites == ()
    assert checked.binary == compile_module(module, "sm_90a").binary


def _line(fn: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_checked_kernels_name_their_accesses():
    module = K.atomics.trace(np.zeros(16, np.int32), *[np.zeros(97, np.int32)] * 3, 97,
                             KIND="max", BLOCK=64)
    compiled = compile_module(module, "sm_90a", check=True)
    assert compiled.checked and compiled.status_words == 16
    sites = [(s.op, s.tensor, s.shape) for s in compiled.access_sites]
    assert ("atomic", "T", (64,)) in sites and ("load", "Idx", (64,)) in sites
    for site in compiled.access_sites:
        assert site.file.endswith("kernels.py") and site.line > 0
    atomic = next(s for s in compiled.access_sites if s.op == "atomic")
    assert atomic.line == _line(K.atomics, "tk.atomic_max")
    ptx = compiled.binary.decode()
    assert bounds_check.FAULT_FUNCTION in ptx


def test_a_dense_view_is_checked_without_division():
    """A contiguous 1-D view's check is a compare per element: LLVM folds the
    decomposition away (no call of tk_on_grid)."""
    ptx = compile_module(example_module("vector_add"), "sm_90a", check=True).binary.decode()
    assert "call.uni (retval0), tk_on_grid" not in ptx
    assert "tk_access_fault" in ptx


CHECKED = ["vector_add", "histogram", "argmax", "layer_norm"]


@needs_linker
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("case", [f"ex:{n}" for n in CHECKED] + [
    "k:atomics_max", "k:gather_2d", "k:when_blocks", "k:cross_entropy_argmax",
    "k:nested_tiles_loops"])
def test_checked_kernels_link(case: str, arch: str):
    kind, name = case.split(":")
    module = example_module(name) if kind == "ex" else KERNEL_CASES[name]()
    compiled = compile_module(module, arch, check=True)
    assert compiled.access_sites, "a kernel with raw accesses"
    cubin = link.link_ptx(compiled.binary.decode(), arch, module.kernel.name)
    assert cubin.startswith(b"\x7fELF")


def test_every_checked_example_is_one():
    assert set(CHECKED) <= set(EXAMPLE_CASES)


@tk.kernel
def strided_store(X, V, N: tk.constexpr):
    tk.store(X, tk.arange(N) * 3, tk.load(V, tk.arange(N)))


def test_checked_kernels_assemble_for_gfx942():
    module = strided_store.trace(np.zeros(30, np.float32), np.zeros(10, np.float32), N=10)
    compiled = compile_module(module, "gfx942", check=True)
    assert compiled.binary.startswith(b"\x7fELF") and len(compiled.access_sites) == 2


# --- the fault record ----------------------------------------------------------------------


class HostVendor:
    """The vendor calls ``fault_function`` makes, on the host: the program id and the grid
    are read from a global ``int32[6]`` (x, y, z, then the grid's x, y, z)."""

    global_addrspace = 0

    def __init__(self, module: ir.Module) -> None:
        self.ids = ir.GlobalVariable(module, ir.ArrayType(I32, 6), "ids")
        self.ids.initializer = ir.Constant(ir.ArrayType(I32, 6), [0] * 6)

    def block_id(self, b: ir.IRBuilder, axis: int) -> ir.Value:
        return b.load(b.gep(self.ids, [ir.Constant(I32, 0), ir.Constant(I32, axis)]))

    def num_blocks(self, b: ir.IRBuilder, axis: int) -> ir.Value:
        return b.load(b.gep(self.ids, [ir.Constant(I32, 0), ir.Constant(I32, 3 + axis)]))


def test_the_fault_record_keeps_the_lowest_key():
    """``tk_access_fault`` on the host, called as failing threads would, in any order: the
    record is the lowest (program, rank, position) and reads back as that fault."""
    import types

    import llvmlite.binding as llvm

    from tilekit.codegen.artifact import AccessSite, CheckWords, CompiledKernel
    from tilekit.rt import check_mode

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module("fault")
    module.triple = llvm.get_process_triple()
    vendor = HostVendor(module)
    bounds_check.fault_function(types.SimpleNamespace(module=module, vendor=vendor))
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    engine = llvm.create_mcjit_compiler(
        parsed, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    fault = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                             ctypes.c_int64)(
        engine.get_function_address(bounds_check.FAULT_FUNCTION))
    ids = (ctypes.c_int32 * 6).from_address(engine.get_global_value_address("ids"))
    sites = tuple(AccessSite("store", "X", (4, 8), "k.py", 10 + i) for i in range(3))
    compiled = CompiledKernel("k", "sm_90a", "ptx", b"", 4, 32, 0, (), checked=True,
                              access_sites=sites)
    arrays = {"X": types.SimpleNamespace(shape=(1000,), strides=(1,))}
    grid = (5, 3, 2)
    # (program, rank, position, site, offset): the second of program (1, 2, 0) is the first
    calls = [((4, 0, 1), 0, 3, 0, 1001), ((1, 2, 0), 2, 9, 1, 2000), ((1, 2, 0), 1, 31, 2, 1500),
             ((1, 2, 0), 1, 30, 1, 1400), ((2, 2, 0), 0, 0, 0, 1002), ((3, 1, 1), 0, 0, 0, 1)]
    rng = np.random.default_rng(0)
    for order in [range(len(calls)), *(rng.permutation(len(calls)) for _ in range(5))]:
        status = check_mode.initial_status(16)
        for k in order:
            program, rank, position, site, offset = calls[k]
            ids[:] = [*program, *grid]
            fault(status.ctypes.data, (rank << 32) | position, site + 1, offset)
        err = check_mode.access_error(compiled, status, arrays)
        assert err is not None and err.loc.line == 11
        assert "in program (1, 2, 0): element offset 1400 (index (1400,))" in str(err)
        assert "(at position (3, 6) of the tile)" in str(err)
        assert status[CheckWords.LOCK] == 0  # released
