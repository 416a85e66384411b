"""Hand-written PTX kernels that follow tilekit's kernel ABI, for testing the runtime
before (and independently of) code generation, and the tilekit kernels they stand for.

``vector_add`` computes ``Out[i] = X[i] + Y[i]`` for ``i < n`` (float32 or bfloat16,
rank-1 tensors, int32 index): parameters X (ptr, size, stride), Y (...), Out (...),
n (int32), status. It is what ``add`` below means with ``BLOCK = 128`` (4 warps).
``assert_positive`` writes the status word when ``X[i] <= 0`` (the failed assert 0), as
``check_positive`` below would.

``fake_compile`` is a drop-in for ``tilekit.codegen.compile_module`` that returns these.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import tilekit as tk
from tilekit.codegen.artifact import AssertSite, CompiledKernel, ParamSlot, SlotKind
from tilekit.ir.core import Module


@tk.kernel
def add(X, Y, Out, n, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    mask = offs < n
    tk.store(Out, offs, tk.load(X, offs, mask) + tk.load(Y, offs, mask), mask)


@tk.kernel
def check_positive(X, n, BLOCK: tk.constexpr):
    offs = tk.program_id(0) * BLOCK + tk.arange(BLOCK)
    x = tk.load(X, offs, offs < n, other=1.0)
    tk.device_assert(x > 0, "x must be positive")


ASSERT_LINE = next(i for i, text in enumerate(inspect.getsourcelines(check_positive.fn)[0])
                   if "device_assert" in text) + check_positive.loc.line


def fake_compile(module: Module, arch: str,
                 divisible: frozenset[tuple[str, int, int]] = frozenset(),
                 check: bool = False) -> CompiledKernel:
    """What code generation would return for ``add`` (BLOCK=128) or ``check_positive``
    (for any size facts: the hand-written PTX checks every bound), with ``gpu._codegen``'s
    signature. ``check`` (``TILEKIT_CHECK``) is ignored: the PTX is never a checked kernel
    (``CompiledKernel.checked`` stays False), so check mode launches it as it is."""
    fn = module.kernel
    if fn.name == "check_positive":
        return assert_positive_kernel(fn.loc.file, ASSERT_LINE, arch)
    dtype = fn.args[0].type.dtype.long
    return vector_add_kernel(arch, dtype)


def _x_element_address(size: int) -> str:
    """PTX of both kernels' first steps: this thread's index ``%r4`` (to DONE when it is
    ``n`` or more) and the address ``%rd3`` of its element of X (``size`` bytes each)."""
    return """    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    ld.param.u32 %r5, [n];
    setp.ge.s32 %p1, %r4, %r5;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [X_ptr];
    ld.param.u32 %r6, [X_stride];
    mul.lo.s32 %r7, %r4, %r6;
    mul.wide.s32 %rd2, %r7, """ + str(size) + """;
    add.s64 %rd3, %rd1, %rd2;
"""


def _tensor_params(prefix: str) -> str:
    return (f"    .param .u64 {prefix}_ptr,\n    .param .u32 {prefix}_size,\n"
            f"    .param .u32 {prefix}_stride,\n")


_LOAD = {
    "float32": ("ld.global.f32 {f}, [{a}];", 4),
    # bf16 -> f32: the 16 bits are the high half of the float
    "bfloat16": ("ld.global.u16 %rs1, [{a}];\n    cvt.u32.u16 %r9, %rs1;\n    "
                 "shl.b32 %r9, %r9, 16;\n    mov.b32 {f}, %r9;", 2),
}
_STORE = {
    "float32": "st.global.f32 [{a}], {f};",
    "bfloat16": "cvt.rn.bf16.f32 %rs2, {f};\n    st.global.b16 [{a}], %rs2;",
}


def vector_add_ptx(target: str = "sm_80", dtype: str = "float32") -> str:
    load, size = _LOAD[dtype]
    ld_x = load.format(f="%f1", a="%rd3")
    ld_y = load.format(f="%f2", a="%rd6")
    st = _STORE[dtype].format(f="%f3", a="%rd9")
    return f""".version 8.0
.target {target}
.address_size 64

.visible .entry vector_add(
{_tensor_params("X")}{_tensor_params("Y")}{_tensor_params("Out")}    .param .u32 n,
    .param .u64 status
)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b16 %rs<3>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<12>;

{_x_element_address(size)}    {ld_x}
    ld.param.u64 %rd4, [Y_ptr];
    ld.param.u32 %r6, [Y_stride];
    mul.lo.s32 %r7, %r4, %r6;
    mul.wide.s32 %rd5, %r7, {size};
    add.s64 %rd6, %rd4, %rd5;
    {ld_y}
    add.f32 %f3, %f1, %f2;
    ld.param.u64 %rd7, [Out_ptr];
    ld.param.u32 %r6, [Out_stride];
    mul.lo.s32 %r7, %r4, %r6;
    mul.wide.s32 %rd8, %r7, {size};
    add.s64 %rd9, %rd7, %rd8;
    {st}
DONE:
    ret;
}}
"""


def _tensor_slots(name: str) -> tuple[ParamSlot, ...]:
    return (ParamSlot(SlotKind.POINTER, name, "uint64"),
            ParamSlot(SlotKind.SIZE, name, "int32", 0),
            ParamSlot(SlotKind.STRIDE, name, "int32", 0))


def vector_add_kernel(target: str = "sm_90a", dtype: str = "float32",
                      shared_bytes: int = 0) -> CompiledKernel:
    """A fake codegen result for ``add`` (BLOCK=128): 4 warps of 32 threads."""
    params = (*_tensor_slots("X"), *_tensor_slots("Y"), *_tensor_slots("Out"),
              ParamSlot(SlotKind.SCALAR, "n", "int32"), ParamSlot(SlotKind.STATUS, "", "uint64"))
    return CompiledKernel("vector_add", target, "ptx", vector_add_ptx(dtype=dtype).encode(), 4,
                          32, shared_bytes, params, (), ("Out",))


def assert_positive_ptx(target: str = "sm_80") -> str:
    """Status word 0 := 1 (assert 0 failed), words 1-3 := the program id, when X[i] <= 0."""
    return f""".version 8.0
.target {target}
.address_size 64

.visible .entry assert_positive(
{_tensor_params("X")}    .param .u32 n,
    .param .u64 status
)
{{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<6>;

{_x_element_address(4)}    ld.global.f32 %f1, [%rd3];
    setp.gt.f32 %p2, %f1, 0f00000000;
    @%p2 bra DONE;
    ld.param.u64 %rd4, [status];
    mov.u32 %r8, 1;
    st.global.u32 [%rd4], %r8;
    st.global.u32 [%rd4+4], %r1;
    mov.u32 %r9, %ctaid.y;
    st.global.u32 [%rd4+8], %r9;
    mov.u32 %r9, %ctaid.z;
    st.global.u32 [%rd4+12], %r9;
DONE:
    ret;
}}
"""


def assert_positive_kernel(file: str, line: int, target: str = "sm_90a") -> CompiledKernel:
    params = (*_tensor_slots("X"), ParamSlot(SlotKind.SCALAR, "n", "int32"),
              ParamSlot(SlotKind.STATUS, "", "uint64"))
    return CompiledKernel("assert_positive", target, "ptx", assert_positive_ptx().encode(), 4,
                          32, 0, params, (AssertSite("x must be positive", file, line, 4),), ())


@contextlib.contextmanager
def compiled_by_hand(monkeypatch: Any, cache_dir: str) -> Iterator[None]:
    """Launches of this module's kernels compile to the hand-written PTX (``fake_compile``)
    into a fresh cache at ``cache_dir``, on the GPU (the interpreter off); their loaded
    variants are dropped before and after."""
    from tilekit import knobs
    from tilekit.rt import cache, device_arrays, gpu

    monkeypatch.setattr(gpu, "_codegen", fake_compile)
    monkeypatch.setattr(device_arrays, "codegen_available", lambda: True)
    for k in (add, check_positive):
        k._loaded.clear()
    with knobs.override(cache_dir=cache_dir, interpret=False):
        cache.reset_stats()
        yield
    for k in (add, check_positive):
        k._loaded.clear()
