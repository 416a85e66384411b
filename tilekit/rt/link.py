"""PTX -> cubin, offline, through nvJitLink.

nvJitLink (the ``nvidia-nvjitlink`` wheel, reached through ``cuda.bindings``;
``cuda.pathfinder`` finds the library) assembles PTX for any architecture with no
GPU present, and avoids the driver JIT's "PTX ISA too new" errors. When it is not
installed the runtime hands the PTX to the driver instead (``cuModuleLoadData``),
which JIT-compiles it for the device at hand.

The linker's error log becomes a ``LoweringError``: a linker error is a code
generation bug or an unsupported target, never the user's fault, but it still
names the kernel's definition line.
"""

from __future__ import annotations

import functools
import os
import sys
import threading

from tilekit.errors import LoweringError, SourceLoc


class LinkerUnavailable(RuntimeError):
    """nvJitLink cannot be loaded here (not installed, or no usable library)."""


@functools.cache
def _nvjitlink():  # type: ignore[no-untyped-def]
    # functools.cache does not make concurrent first calls wait for each other: a caller on
    # another thread than ``prefetch``'s waits for it here instead of loading twice.
    worker = _prefetch
    if worker is not None and worker is not threading.current_thread():
        worker.join()
    try:
        from cuda.bindings import nvjitlink
        nvjitlink.version()  # loads the library: fails here when it is missing
    except Exception as exc:  # ImportError, or cuda.pathfinder's DynamicLibNotFoundError
        raise LinkerUnavailable(f"nvJitLink is not available ({exc})") from None
    return nvjitlink


_prefetch: threading.Thread | None = None
_prefetch_lock = threading.Lock()


def prefetch() -> None:
    """Start loading nvJitLink on a worker thread, so that the link at the end of a compile
    finds it loaded. Called when a kernel is about to be compiled: the load is ~30 ms of
    imports (``cuda.pathfinder``) and the 50 MB library's ``dlopen``, 90 ms on a slow host;
    most of it runs while the compiling thread is inside LLVM, which releases the GIL.
    A failed load is not cached (``functools.cache`` keeps no exceptions): ``available``
    tries again and answers False, as it did without the worker; no second worker starts."""
    global _prefetch
    with _prefetch_lock:
        if _prefetch is not None or _nvjitlink.cache_info().currsize:
            return
        _prefetch = threading.Thread(target=available, daemon=True, name="tilekit-nvjitlink")
        _prefetch.start()


def available() -> bool:
    """Whether nvJitLink can link PTX on this machine (no GPU needed)."""
    try:
        _nvjitlink()
    except LinkerUnavailable:
        return False
    return True


def _wheel_version(distribution: str) -> str | None:
    """The version of the installed wheel ``distribution`` (normalized: ``nvidia_nvjitlink``)
    from the name of its ``.dist-info`` folder on ``sys.path``, first match as ``import``
    finds it: one folder listing per path entry, where ``importlib.metadata``'s first call
    costs 10-20 ms of imports and scans (a cold compile computes the cache key this way)."""
    prefix = distribution + "-"
    for folder in sys.path:
        try:
            with os.scandir(folder or ".") as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(prefix) and name.endswith(".dist-info"):
                        return name[len(prefix):-len(".dist-info")]
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def version() -> str | None:
    """nvJitLink's version ``"major.minor"``, or None when it is not available. Read from
    the wheel's metadata when it is installed as one, so that a cache key (a warm start)
    does not load the 50 MB library."""
    parts = (_wheel_version("nvidia_nvjitlink") or "").split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return f"{int(parts[0])}.{int(parts[1])}"
    try:
        major, minor = _nvjitlink().version()
    except LinkerUnavailable:
        return None
    return f"{major}.{minor}"


#: nvJitLink's own options on every link. ``-no-cache``: nvJitLink 13 keeps a cache of PTX ->
#: cubin under ``CUDA_CACHE_PATH`` (``~/.nv/ComputeCache``); tilekit caches the cubin itself,
#: so that copy is disk space, and writing it into a fresh cache cost the first link of a
#: process ~185 ms on the H100's host (416 vs 231 ms, ad hoc ``nocache.py``). A linker that
#: refuses the option (older than 12.4) links without it (``_refuses_no_cache``).
NO_CACHE = "-no-cache"
_refuses_no_cache = False


def _create(nvjitlink, arch: str):  # type: ignore[no-untyped-def]
    """A link handle for ``arch`` with ``NO_CACHE`` when the linker takes it."""
    global _refuses_no_cache
    if not _refuses_no_cache:
        options = [f"-arch={arch}", NO_CACHE]
        try:
            return nvjitlink.create(len(options), options)
        except nvjitlink.nvJitLinkError:
            pass  # an unknown option, or an unknown arch: ask again without the option
    options = [f"-arch={arch}"]
    handle = nvjitlink.create(len(options), options)  # raises for an unknown arch
    _refuses_no_cache = True  # the arch is fine: it was the option
    return handle


def link_ptx(ptx: bytes | str, arch: str, name: str = "kernel",
             loc: SourceLoc | None = None) -> bytes:
    """Assemble ``ptx`` into a cubin for ``arch`` (``sm_90a``, ``sm_80``...).

    Raises ``LinkerUnavailable`` when nvJitLink is missing (the caller falls back to the
    driver JIT) and ``LoweringError`` with the linker's log when the PTX is rejected.
    """
    nvjitlink = _nvjitlink()
    data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    if not data.endswith(b"\0"):
        data += b"\0"
    try:
        handle = _create(nvjitlink, arch)
    except nvjitlink.nvJitLinkError as exc:
        raise LoweringError(f"nvJitLink refused the target `{arch}`: {exc}", loc,
                            hints=["targets look like sm_80, sm_90a"]) from None
    try:
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), f"{name}.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = _error_log(nvjitlink, handle)
            raise LoweringError(
                f"nvJitLink could not assemble the PTX of kernel `{name}` for {arch}: {exc}"
                + (f"\n{log}" if log else ""), loc,
                hints=["this is a tilekit code generation bug; TILEKIT_DUMP=ptx prints the "
                       "PTX to attach to a report"]) from None
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def _error_log(nvjitlink, handle: int) -> str:  # type: ignore[no-untyped-def]
    try:
        size = nvjitlink.get_error_log_size(handle)
        if size <= 1:
            return ""
        buf = bytearray(size)
        nvjitlink.get_error_log(handle, buf)
        return buf.rstrip(b"\0").decode(errors="replace").strip()
    except Exception:  # the log is a courtesy; the status already failed
        return ""
