"""NVIDIA's libdevice: finding ``libdevice.10.bc`` and linking it into a kernel module.

``MathLib`` (NVPTX) declares ``__nv_*`` functions; the driver links libdevice when
``MathLib.used`` is not empty, internalizes everything but the kernels and optimizes,
which inlines the few functions used and drops the rest. libdevice asks
``__nvvm_reflect("__CUDA_FTZ")``; the module flag ``nvvm-reflect-ftz = 0`` set here
answers it (no flush to zero) and LLVM's NVVMReflect pass, part of the NVPTX O1+
pipeline, folds the calls away.

Search order for the bitcode: ``TILEKIT_LIBDEVICE`` (a file), ``cuda.pathfinder``, the
``nvidia-nvvm``/``nvidia-cuda-nvcc`` wheels, ``$CUDA_HOME``/``$CUDA_PATH``, then
``/usr/local/cuda*/nvvm/libdevice``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
_NAME = "libdevice.10.bc"


def find_libdevice() -> str | None:
    """The path of ``libdevice.10.bc``, or None when there is none on this machine."""
    override = os.environ.get("TILEKIT_LIBDEVICE")
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"TILEKIT_LIBDEVICE={override} is not a file")
        return override
    try:
        from cuda.pathfinder import find_bitcode_lib

        return str(find_bitcode_lib("device"))
    except Exception:  # not installed, or it found nothing
        pass
    candidates: list[str] = []
    try:
        import nvidia  # the namespace package of NVIDIA's wheels

        for root in nvidia.__path__:
            candidates += glob.glob(os.path.join(root, "**", "libdevice", _NAME), recursive=True)
    except ImportError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "nvvm", "libdevice", _NAME))
    candidates.append(f"/usr/local/cuda/nvvm/libdevice/{_NAME}")
    candidates += sorted(glob.glob(f"/usr/local/cuda-*/nvvm/libdevice/{_NAME}"), reverse=True)
    return next((c for c in candidates if Path(c).is_file()), None)


@cache
def _bitcode(path: str) -> bytes:
    return Path(path).read_bytes()


def link_libdevice(module: llvm.ModuleRef, target_triple: str, data_layout: str) -> None:
    """Link libdevice into ``module`` (in place). The caller then internalizes every
    non-kernel symbol (LLVM's internalize pass, then the kernel made external again) and
    drops what no one calls (GlobalDCE) before the O3 pipeline, which inlines the rest."""
    path = find_libdevice()
    if path is None:
        raise FileNotFoundError(f"{_NAME} not found: set TILEKIT_LIBDEVICE or CUDA_HOME, "
                                "or pip install nvidia-nvvm")
    lib = llvm.parse_bitcode(_bitcode(path))
    lib.triple = target_triple
    lib.data_layout = data_layout
    module.link_in(lib)


FTZ_FLAG = '!llvm.module.flags = !{!0}\n!0 = !{i32 4, !"nvvm-reflect-ftz", i32 0}\n'


def with_reflect_flag(ir_text: str) -> str:
    """Add the ``nvvm-reflect-ftz = 0`` module flag (what ``__nvvm_reflect("__CUDA_FTZ")``
    answers) to a module's text that has no module flags yet."""
    if "llvm.module.flags" in ir_text:
        raise ValueError("module already has flags: add nvvm-reflect-ftz to them")
    return ir_text + "\n" + FTZ_FLAG


def compile_ptx(ir_text: str, arch: str, used: Iterable[str] = (),
                kernels: Iterable[str] | None = None, ptx_version: int = 80) -> str:
    """LLVM IR text for NVPTX -> PTX for ``arch`` (``sm_90a``...), linking libdevice if
    ``used`` names any of its functions. The call sequence the driver follows."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(NVPTX_TRIPLE).create_target_machine(
        cpu=arch, features=f"+ptx{ptx_version}", opt=3)
    mod = llvm.parse_assembly(with_reflect_flag(ir_text))
    mod.triple = NVPTX_TRIPLE
    mod.data_layout = str(tm.target_data)
    if any(True for _ in used):
        link_libdevice(mod, NVPTX_TRIPLE, str(tm.target_data))
    keep = set(kernels) if kernels is not None else None
    for fn in mod.functions:
        if fn.is_declaration:
            continue
        is_kernel = fn.name in keep if keep is not None else _is_kernel(fn)
        if not is_kernel:
            fn.linkage = llvm.Linkage.internal
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


def _is_kernel(fn: llvm.ValueRef) -> bool:
    return "ptx_kernel" in str(fn).split("{", 1)[0]
