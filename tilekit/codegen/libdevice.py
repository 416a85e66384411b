"""NVIDIA's libdevice: finding ``libdevice.10.bc`` and linking it into a kernel module.

``MathLib`` (NVPTX) declares ``__nv_*`` functions; the driver links libdevice when
``MathLib.used`` is not empty, internalizes everything but the kernels and optimizes,
which inlines the few functions used and drops the rest. libdevice asks
``__nvvm_reflect("__CUDA_FTZ")``; the module flag ``nvvm-reflect-ftz = 0`` (set by
``nvptx.Vendor.kernel_function``) answers it (no flush to zero) and LLVM's NVVMReflect
pass, part of the NVPTX O1+ pipeline, folds the calls away.

Search order for the bitcode: ``TILEKIT_LIBDEVICE`` (a file); the places ``cuda.pathfinder``
looks first, checked with a stat each (``fast_candidates``: NVIDIA's wheels, a conda
environment, ``$CUDA_HOME``/``$CUDA_PATH``), since importing ``cuda.pathfinder`` costs a
cold compile 50-60 ms on the H100's host; ``cuda.pathfinder``; any ``libdevice`` folder
under the ``nvidia`` wheels; then ``/usr/local/cuda*/nvvm/libdevice``.
"""

from __future__ import annotations

import glob
import os
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm

_NAME = "libdevice.10.bc"
#: libdevice's folder under the ``nvidia`` namespace package: CUDA 13's ``nvidia-cuda-nvcc``
#: wheel, CUDA 12's ``nvidia-cuda-nvcc-cu12``.
_WHEEL_DIRS = ("cu13/nvvm/libdevice", "cuda_nvcc/nvvm/libdevice")


def find_libdevice() -> str | None:
    """The path of ``libdevice.10.bc``, or None when there is none on this machine."""
    override = os.environ.get("TILEKIT_LIBDEVICE")
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"TILEKIT_LIBDEVICE={override} is not a file")
        return override
    wheels = _nvidia_roots()
    found = next((c for c in fast_candidates(wheels) if os.path.isfile(c)), None)
    if found is not None:
        return found
    try:
        from cuda.pathfinder import find_bitcode_lib

        return str(find_bitcode_lib("device"))
    except Exception:  # not installed, or it found nothing
        pass
    candidates: list[str] = []
    for root in wheels:
        candidates += glob.glob(os.path.join(root, "**", "libdevice", _NAME), recursive=True)
    candidates.append(f"/usr/local/cuda/nvvm/libdevice/{_NAME}")
    candidates += sorted(glob.glob(f"/usr/local/cuda-*/nvvm/libdevice/{_NAME}"), reverse=True)
    return next((c for c in candidates if Path(c).is_file()), None)


def fast_candidates(wheels: list[str]) -> list[str]:
    """Where libdevice is in a CUDA wheel, a conda environment or a toolkit that the
    environment names, in ``cuda.pathfinder``'s order (``wheels``: the ``nvidia`` namespace
    package's folders)."""
    out = [os.path.join(root, folder, _NAME) for root in wheels for folder in _WHEEL_DIRS]
    for var in ("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            out.append(os.path.join(os.environ[var], "nvvm", "libdevice", _NAME))
    return out


def _nvidia_roots() -> list[str]:
    """The folders of the ``nvidia`` namespace package (NVIDIA's wheels), if installed."""
    try:
        import nvidia
    except ImportError:
        return []
    return list(getattr(nvidia, "__path__", []))


def _required_path() -> str:
    path = find_libdevice()
    if path is None:
        raise FileNotFoundError(f"{_NAME} not found: set TILEKIT_LIBDEVICE or CUDA_HOME, "
                                "or pip install nvidia-nvvm")
    return path


@cache
def _bitcode(path: str) -> bytes:
    return Path(path).read_bytes()


def link_libdevice(module: llvm.ModuleRef, target_triple: str, data_layout: str,
                   parsed: llvm.ModuleRef | None = None) -> None:
    """Link libdevice into ``module`` (in place): ``parsed`` (libdevice as a worker thread
    parsed it, maybe trimmed), else the bitcode found and parsed here. The caller then
    internalizes every non-kernel symbol (LLVM's internalize pass, then the kernel made
    external again) and drops what no one calls (GlobalDCE) before the O3 pipeline, which
    inlines the rest."""
    lib = parsed if parsed is not None else llvm.parse_bitcode(_bitcode(_required_path()))
    lib.triple = target_triple
    lib.data_layout = data_layout
    module.link_in(lib)
