"""``TILEKIT_DUMP`` stages of code generation, offline: ``layout`` from ``compile_module``;
``llvm`` and ``ptx`` from the runtime's ``compile_cached`` (which links with nvJitLink
when it is installed, no GPU needed), with a temporary ``TILEKIT_CACHE_DIR``."""

# ruff: noqa: N802, N803, N806  (tensor-like names)

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tilekit as tk
from tilekit import knobs
from tilekit.codegen.driver import compile_module
from tilekit.rt import cache, gpu, link
from tilekit.rt.launcher import specialize_arguments


@tk.kernel
def scaled_rowsum(X, Out, N: tk.constexpr):
    row = tk.program_id(0)
    x = X.tile((1, N), (row, 0)).load()
    tk.store(Out, row, tk.reshape(tk.sum(tk.exp(x), axis=1), ()))


def traced(n: int = 37):
    args = (np.zeros((5, n), np.float32), np.zeros(5, np.float32))
    spec, _ = specialize_arguments(scaled_rowsum,
                                   scaled_rowsum.bind(args, {"N": n}, None), None)
    return scaled_rowsum.specialize(spec), spec


@pytest.fixture
def cache_dir(tmp_path: Path):
    with knobs.override(cache_dir=str(tmp_path / "cache")):
        cache.reset_stats()
        yield tmp_path / "cache"


def sections(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("// ----- ")]


# gfx942 is left out: this kernel's cross-warp reduction needs LDS, which LLVM rejects
# today by exiting the process (see test_offline.LDS_INITIALIZER).
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_compile_module_dumps_the_laid_out_ir(target: str, capsys):
    module, _ = traced()
    with knobs.override(dump=frozenset({"layout"}), dump_locs=True):
        compiled = compile_module(module, target)
    err = capsys.readouterr().err
    assert sections(err) == ["// ----- layout: scaled_rowsum -----"]
    assert "#blocked<spt=[" in err and "#slice<dim=1, #blocked<" in err
    assert "test_dumps.py:" in err  # source locations, with TILEKIT_DUMP_LOCS on
    assert compiled.target == target and compiled.binary


def test_dump_all_includes_the_layout_stage(capsys):
    module, _ = traced()
    with knobs.override(dump=frozenset({"all"}), dump_locs=False):
        compile_module(module, "sm_90a")
    err = capsys.readouterr().err
    assert "// ----- layout: scaled_rowsum -----" in err and "test_dumps.py:" not in err


def test_no_dump_without_the_knob(capsys):
    module, _ = traced()
    with knobs.override(dump=frozenset()):
        compile_module(module, "sm_90a")
    assert capsys.readouterr().err == ""


def test_compile_cached_dumps_llvm_on_compile_and_ptx_on_every_lookup(cache_dir, capsys):
    module, spec = traced(n=41)
    with knobs.override(dump=frozenset({"layout", "llvm", "ptx"}), dump_locs=False):
        entry = gpu.compile_cached(module, spec, "sm_90a")
        first = capsys.readouterr().err
        again = gpu.compile_cached(module, spec, "sm_90a")  # from the disk cache
        second = capsys.readouterr().err
    assert sections(first) == ["// ----- layout: scaled_rowsum -----",
                               "// ----- llvm: scaled_rowsum (sm_90a) -----",
                               "// ----- ptx: scaled_rowsum (sm_90a) -----"]
    llvm = first.split("// ----- llvm: scaled_rowsum (sm_90a) -----")[1].split("// -----")[0]
    assert 'target triple = "nvptx64-nvidia-cuda"' in llvm
    assert "define" in llvm and "@scaled_rowsum" in llvm
    assert "__nv_expf" in llvm or "llvm.exp" in llvm or "ex2" in llvm  # exp, linked in
    ptx = first.split("// ----- ptx: scaled_rowsum (sm_90a) -----")[1]
    assert ".target sm_90a" in ptx and ".entry scaled_rowsum" in ptx
    assert ptx.strip() == entry.kernel.binary.decode().strip()
    # a disk hit compiles nothing, so it prints no layout or llvm, but the PTX again
    assert cache.stats()["compiles"] == 1 and cache.stats()["disk_hits"] == 1
    assert sections(second) == ["// ----- ptx: scaled_rowsum (sm_90a) -----"]
    assert again.kernel == entry.kernel
    if link.available():
        assert entry.image.startswith(b"\x7fELF") and again.image == entry.image


def test_compile_cached_dumps_nothing_by_default(cache_dir, capsys):
    module, spec = traced(n=43)
    with knobs.override(dump=frozenset()):
        gpu.compile_cached(module, spec, "sm_80")
    assert capsys.readouterr().err == ""


def test_ir_dump_happens_when_a_specialization_is_traced(capsys):
    with knobs.override(dump=frozenset({"ir"}), dump_locs=False):
        traced(n=47)
        first = capsys.readouterr().err
        traced(n=47)  # cached specialization: traced once
        second = capsys.readouterr().err
    assert sections(first) == ["// ----- ir: scaled_rowsum -----"]
    assert "reduce" in first and "#blocked" not in first  # before layout assignment
    assert second == ""
