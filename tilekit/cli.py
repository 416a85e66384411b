"""The ``tilekit`` command.

    tilekit info          the backend in use and why, the GPU and driver, toolchain versions,
                          the kernel cache
    tilekit cache list    the cached kernels;  tilekit cache clear  empties the cache
    tilekit env           the TILEKIT_* environment variables, their values and meanings
    tilekit layout        draw layouts as SVG/PNG pictures (see ``tilekit layout --help``)
    tilekit --version
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tilekit import knobs


def _env(args: argparse.Namespace) -> int:
    for env, default, doc in knobs.describe():
        current = os.environ.get(env)
        shown = f"{env}={current}" if current is not None else f"{env} (default {default})"
        print(shown)
        print(f"    {doc}")
    return 0


def _version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _info(args: argparse.Namespace) -> int:
    import tilekit
    from tilekit.rt import cache, device_arrays, driver, link

    gpu = driver.status()
    backend = device_arrays.choose_backend(False)
    if backend.kind is device_arrays.BackendKind.CUDA:
        print("backend: cuda (kernels run on the GPU)")
    else:
        print(f"backend: interpreter — kernels run on the CPU interpreter ({backend.reason})")
    if gpu.available:
        for ordinal in range(gpu.device_count):
            p = driver.device_props(ordinal)
            print(f"GPU {ordinal}: {p.name}, compute capability {p.capability[0]}."
                  f"{p.capability[1]} (target {p.arch}), {p.sm_count} SMs, "
                  f"{_size(p.total_memory)}, {_size(p.max_shared_optin)} shared memory per "
                  "block")
        print(f"CUDA driver: {driver.driver_version()}")
    else:
        print(f"GPU: none found ({gpu.reason}) — kernels run on the CPU interpreter")
    try:
        import llvmlite.binding as llvm

        llvm_version = ".".join(map(str, llvm.llvm_version_info))
    except Exception:
        llvm_version = "unavailable"
    print(f"tilekit: {tilekit.__version__}")
    print(f"llvmlite: {_version('llvmlite')} (LLVM {llvm_version})")
    print(f"nvJitLink: {link.version() or 'not available (the driver JIT links PTX)'}")
    print(f"cuda-bindings: {_version('cuda-bindings')}")
    n, total = cache.size()
    print(f"cache: {cache.cache_dir()} ({n} kernel{'s' * (n != 1)}, {_size(total)})")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from tilekit.rt import cache

    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} cached kernel{'s' * (removed != 1)} from {cache.cache_dir()}")
        return 0
    n, total = cache.size()
    print(f"{cache.cache_dir()}: {n} kernel{'s' * (n != 1)}, {_size(total)}")
    for path in cache.entries():
        try:
            size = path.stat().st_size
        except OSError:
            continue
        print(f"  {path.name}  {_size(size)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    import tilekit

    parser = argparse.ArgumentParser(prog="tilekit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"tilekit {tilekit.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env", help="show the TILEKIT_* environment variables")
    env.set_defaults(run=_env)
    info = sub.add_parser("info", help="the backend, GPU, driver, toolchain and cache")
    info.set_defaults(run=_info)
    cache = sub.add_parser("cache", help="list or clear the kernel cache")
    cache.add_argument("action", choices=["list", "clear"])
    cache.set_defaults(run=_cache)
    try:
        from tilekit.layout import pictures_cli
    except ImportError:
        pictures_cli = None
    if pictures_cli is not None:
        pictures_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
