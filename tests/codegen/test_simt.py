"""The host emulator of NVPTX kernels (``simt``) against the interpreter's semantics."""

from __future__ import annotations

import numpy as np
import pytest

import tilekit as tk
from tests.codegen.simt import (
    Emulator,
    _host_ir,
    compile_for_host,
    device_buffer,
    launch_args,
)


@tk.kernel
def row_sum_max(X, S, N: tk.constexpr):  # noqa: N803
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load()
    S.tile((1, 1), (row, 0)).store(tk.sum(x, axis=1, keepdims=True)
                                   + tk.max(x, axis=1, keepdims=True))


def test_reductions_across_lanes_and_warps():
    """Butterfly shuffles within warps, then shared memory and barriers across them."""
    values = np.random.default_rng(0).integers(-50, 50, (5, 1000)).astype(np.float32)
    _, x = device_buffer(values)
    _, s = device_buffer(np.zeros((5, 1), np.float32))
    compiled = compile_for_host(row_sum_max.trace(x, s, N=1000))
    compiled.emulator.run((5,), compiled.threads, launch_args(compiled, {"X": x, "S": s}))
    np.testing.assert_array_equal(s[:, 0], values.sum(1) + values.max(1))


def test_device_buffers_are_aligned_as_allocations_are():
    buf, view = device_buffer(np.arange(10, dtype=np.float32), offset_elems=3, pad_elems=4)
    assert buf.ctypes.data % 256 == 0 and view.ctypes.data == buf.ctypes.data + 7 * 4
    np.testing.assert_array_equal(view, np.arange(10))


def test_host_ir_turns_predicated_stores_into_calls():
    text = ('target triple = "nvptx64-nvidia-cuda"\n'
            'define ptx_kernel void @"k"(i1 %p, i64 %a, i32 %v) {\n'
            '  call void asm sideeffect "@$0 st.global.b32 [$1], $2;", "b,l,r,~{memory}"'
            '(i1 %p, i64 %a, i32 %v)\n'
            '  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n  ret void\n}\n')
    host = _host_ir(text, "x86_64-unknown-linux-gnu")
    assert 'call void @"emu.st.b32"(i1 %p, i64 %a, i32 %v)' in host
    assert 'declare void @"emu.st.b32"(i1, i64, i32)' in host
    assert '@"emu.read.ptx.sreg.tid.x"()' in host and "ptx_kernel" not in host


def test_an_intrinsic_it_does_not_model_is_refused_by_name():
    text = ('target triple = "nvptx64-nvidia-cuda"\n'
            'declare i32 @llvm.nvvm.mbarrier.pending.count(i64)\n'
            'define ptx_kernel void @"k"(i64 %a) {\n'
            '  %n = call i32 @llvm.nvvm.mbarrier.pending.count(i64 %a)\n  ret void\n}\n')
    with pytest.raises(NotImplementedError, match="mbarrier.pending.count"):
        Emulator(text, "k")
