"""The ``tilekit`` command.

    tilekit info          the backend in use and why, the GPU and driver, toolchain versions,
                          the kernel cache, the loaded portfolios
    tilekit cache list    the cached kernels;  tilekit cache clear  empties the cache;
    tilekit cache prune --max-size 500MB   removes the least recently used kernels
    tilekit env           the TILEKIT_* environment variables, their values and meanings
    tilekit aot MODULE.py... --call ... --arch sm_90a -o out.tkp   build a portfolio
    tilekit aot inspect out.tkp                                 list and verify one
    tilekit layout        draw layouts as SVG/PNG pictures (see ``tilekit layout --help``)
    tilekit --version

A command given bad input prints what is wrong and what to do, and exits with status 1
(2 for a malformed command line, as argparse does).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence

from tilekit import knobs
from tilekit.errors import TilekitError


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
    from tilekit.rt import cache, device_arrays, driver, fastpath, link

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
    print(f"fast-path launcher: {fastpath.native_status()}")
    print(f"cuda-bindings: {_version('cuda-bindings')}")
    n, total = cache.size()
    print(f"cache: {cache.cache_dir()} ({n} kernel{'s' * (n != 1)}, {_size(total)})")
    listed = knobs.PORTFOLIO.get()
    print("portfolios (TILEKIT_PORTFOLIO): " + (", ".join(listed) if listed else "none"))
    return 0


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``500MB``, ``1.5G``, ``2GiB``, ``0`` -> bytes (K, M, G, T are powers of 1024, as
    ``tilekit cache list`` prints them)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, flags=re.I)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"cannot read the size {text!r}: write a number and a unit, e.g. 500MB or 2GB")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _cache(args: argparse.Namespace) -> int:
    from tilekit.rt import cache

    if args.action == "prune":
        pruned = cache.prune(args.max_size)
        for path, nbytes in pruned:
            print(f"removed {path.name}  {_size(nbytes)}")
        n, total = cache.size()
        print(f"pruned {len(pruned)} cached kernel{'s' * (len(pruned) != 1)}; "
              f"{cache.cache_dir()} now holds {n} ({_size(total)}, cap {_size(args.max_size)})")
        return 0
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


def _aot_build(args: argparse.Namespace) -> int:
    from tilekit.aot import build, calls

    declared = []
    for i, text in enumerate(args.call, 1):
        where = f"--call {i}"
        if text.lstrip().startswith("{"):
            import json

            try:
                call = json.loads(text)
            except ValueError as exc:
                raise calls.CallError(f"{where} is not valid JSON ({exc})") from None
        else:
            only = args.kernel[0] if len(args.kernel) == 1 else ""
            call = calls.parse_compact(text, kernel=only)
        declared.append(build.Declared(call, where))
    for path in args.calls:
        declared.extend(build.read_calls(path))
    report = build.build(args.module, declared, args.output, args.arch, args.kernel,
                         args.jobs, show_progress=not args.quiet)
    print(f"wrote {args.output}: {report.variants} variant{'s' * (report.variants != 1)}"
          + (f" ({report.duplicates} duplicate declarations merged)" if report.duplicates
             else "")
          + (f"; {report.skipped} calls of other kernels skipped" if report.skipped else ""))
    return 0


def _aot_inspect(args: argparse.Namespace) -> int:
    from tilekit.aot import inspect

    text, ok = inspect.report(args.file)
    print(text)
    return 0 if ok else 1


_EXAMPLE = "example:\n  "


def _command(sub: argparse._SubParsersAction, name: str, summary: str, example: str,
             run: object) -> argparse.ArgumentParser:
    """A sub-command with a one-line description and an example under ``--help``."""
    parser = sub.add_parser(name, help=summary, description=summary,
                            epilog=_EXAMPLE + example,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(run=run)
    return parser


def _add_aot(sub: argparse._SubParsersAction) -> None:
    aot = sub.add_parser(
        "aot", help="compile kernels ahead of time into a portfolio file, or inspect one",
        description="Compile kernels ahead of time into a portfolio file (`tilekit aot "
        "[build] MODULE.py ...`), or list and verify one (`tilekit aot inspect FILE`). "
        "docs/aot.md describes the abstract calls and the file.",
        epilog=_EXAMPLE + "tilekit aot examples/softmax.py --call 'softmax: X=f32[4096,4097] "
        "Y=f32[4096,4097] N=4097' --arch sm_80 --arch sm_90a -o softmax.tkp\n  "
        "tilekit aot inspect softmax.tkp",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = aot.add_subparsers(dest="aot_command", required=True)
    build = _command(
        actions, "build", "compile every declared bucket of the kernels for every arch into "
        "one portfolio file (the default action of `tilekit aot`)",
        "tilekit aot examples/vector_add.py --kernel add --calls recorded.jsonl "
        "--arch sm_90a -o add.tkp -j 4", _aot_build)
    build.add_argument("module", nargs="+", help="the Python files that define the kernels")
    build.add_argument("--kernel", action="append", default=[], metavar="NAME",
                       help="a kernel to build (repeatable; default: every kernel the calls "
                       "name)")
    build.add_argument("--call", action="append", default=[], metavar="CALL",
                       help="an abstract call: JSON, or `[kernel:] X=bf16[4096,4097] n=i32 "
                       "BLOCK=1024` (repeatable)")
    build.add_argument("--calls", action="append", default=[], metavar="FILE",
                       help="a file of abstract calls, one JSON object a line: a recorded run "
                       "(TILEKIT_RECORD) or an autotune log (repeatable)")
    build.add_argument("--arch", action="append", default=[], metavar="ARCH",
                       help="sm_80, sm_90a or gfx942 (repeatable; default: each call's arch)")
    build.add_argument("-o", "--output", required=True, metavar="FILE.tkp",
                       help="the portfolio file to write")
    build.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                       help="compile in N processes (default: one per CPU; 1: in this one)")
    build.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    inspect = _command(actions, "inspect", "list a portfolio's kernels, variants, archs, "
                       "sizes and toolchains, and verify every hash (exit status 1 if one "
                       "fails)", "tilekit aot inspect softmax.tkp", _aot_inspect)
    inspect.add_argument("file", help="the portfolio file")


def build_parser() -> argparse.ArgumentParser:
    import tilekit

    parser = argparse.ArgumentParser(
        prog="tilekit", description=__doc__.split("\n\n")[0],
        epilog=_EXAMPLE + "tilekit info", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tilekit {tilekit.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _command(sub, "env", "show the TILEKIT_* environment variables, their values and "
             "meanings", "tilekit env", _env)
    _command(sub, "info", "the backend in use and why, the GPU, driver, toolchain, cache and "
             "portfolios", "tilekit info", _info)
    cache = sub.add_parser("cache", help="list, clear or prune the kernel cache",
                           description="list, clear or prune the kernel cache on disk",
                           epilog=_EXAMPLE + "tilekit cache prune --max-size 500MB",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = cache.add_subparsers(dest="action", required=True)
    _command(actions, "list", "list the cached kernels and their sizes", "tilekit cache list",
             _cache)
    _command(actions, "clear", "remove every cached kernel", "tilekit cache clear", _cache)
    prune = _command(actions, "prune", "remove the least recently used kernels until the "
                     "cache is at most --max-size", "tilekit cache prune --max-size 500MB",
                     _cache)
    prune.add_argument("--max-size", type=parse_size, required=True, metavar="SIZE",
                       help="the cap, e.g. 500MB or 2GB (K, M, G: powers of 1024)")
    _add_aot(sub)
    try:
        from tilekit.layout import pictures_cli
    except ImportError:
        pictures_cli = None  # type: ignore[assignment]
    if pictures_cli is not None:
        pictures_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `tilekit aot MODULE.py ...` is `tilekit aot build MODULE.py ...`
    if argv[:1] == ["aot"] and len(argv) > 1 and argv[1] not in ("build", "inspect", "-h",
                                                                  "--help"):
        argv.insert(1, "build")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except TilekitError as exc:  # bad input: what is wrong and what to do, no traceback
        print(f"tilekit {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
