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

import functools
import glob
import hashlib
import os
import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm

from tilekit import knobs

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
    """Link libdevice into ``module`` (in place), every function of it ``linkonce_odr``:
    calls resolve to them, and the O3 pipeline inlines what was used and drops the rest
    (no per-function loop over libdevice's ~500 functions per compile)."""
    lib = llvm.parse_bitcode(_prepared_bitcode())
    lib.triple = target_triple
    lib.data_layout = data_layout
    module.link_in(lib)


def _find_or_raise() -> str:
    path = find_libdevice()
    if path is None:
        raise FileNotFoundError(f"{_NAME} not found: set TILEKIT_LIBDEVICE or CUDA_HOME, "
                                "or pip install nvidia-nvvm")
    return path


@functools.lru_cache(maxsize=1)
def _prepared_bitcode() -> bytes:
    """libdevice with its definitions made ``linkonce_odr``, once per machine: kept in the
    cache directory (written atomically, keyed by libdevice's hash and LLVM's version),
    and in memory for the process."""
    raw = _bitcode(_find_or_raise())
    key = hashlib.sha256(raw + repr(llvm.llvm_version_info).encode()).hexdigest()[:16]
    path = _cache_dir() / "libdevice" / f"libdevice-{key}.bc"
    try:
        data = path.read_bytes()
        llvm.parse_bitcode(data)  # verified: a corrupt file is rebuilt
        return data
    except (OSError, RuntimeError):
        pass
    lib = llvm.parse_bitcode(raw)
    for fn in lib.functions:
        if not fn.is_declaration:
            fn.linkage = llvm.Linkage.linkonce_odr
    data = lib.as_bitcode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs the preparation next time
    return data


def _cache_dir() -> Path:
    """The user's tilekit cache directory (as the runtime's disk cache uses)."""
    configured = knobs.CACHE_DIR.get()
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tilekit"


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
