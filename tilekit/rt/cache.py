"""The kernel cache on disk: compiled kernels keyed by everything that shaped them.

Key: the sha256 of a canonical JSON of
  * the printed IR *with source locations* (tracing inlines every callee, so this covers
    them; locations make an error's line right after the user edits the file),
  * the specialization (constexprs, dtypes, ranks, index widths, alignment facts),
  * the target arch (``sm_90a``),
  * tilekit's version and the toolchain's (llvmlite, LLVM, nvJitLink, the CUDA driver).

One file per entry, ``<cache dir>/kernels/<name>-<sha256>.tkc``::

    magic  b"TKCACHE\\0"      8 bytes
    format version          u32 little-endian
    header length           u32
    payload length          u64
    sha256 of the payload   32 bytes
    payload = header (UTF-8 JSON) + binary (PTX) + image (cubin, or empty)

The header holds the full key text (compared on read, so a hash collision or a
renamed file is a miss), the ``CompiledKernel``'s fields as plain JSON (a parameter slot
as ``[kind, arg, dtype, axis, box, swizzle]`` since format 2), and the lengths of the two
blobs. The format version is in the key too, so an entry of another version is not even
looked up; read anyway (a renamed file), it is a bad entry. Nothing is pickled,
imported or executed. Writes go to a temporary file in the same directory, fsync'd, then
``os.replace``'d: readers see the old entry or the new one, never half of one; two
processes compiling the same kernel both write complete entries and the last rename
wins. A bad entry (truncated, flipped, other format, other key) is a miss: the kernel is
rebuilt and the entry rewritten.

``stats()`` counts lookups and compiles so that tests count work instead of timing it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import struct
import sys
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilekit import knobs
from tilekit.codegen.artifact import AssertSite, CompiledKernel, ParamSlot, SlotKind

if TYPE_CHECKING:
    from tilekit.rt.cache_key import CacheKey


def _debug(message: str, *args: Any) -> None:
    """Log at debug level on ``tilekit.cache`` (logging is imported when first needed: a
    warm start writes nothing)."""
    import logging

    logging.getLogger("tilekit.cache").debug(message, *args)

MAGIC = b"TKCACHE\0"
# 2: a parameter slot is [kind, arg, dtype, axis, box, swizzle] (TMA tensor maps).
FORMAT_VERSION = 2
_PREFIX = struct.Struct("<8sIIQ32s")
SUFFIX = ".tkc"

_stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "compiles": 0, "bad_entries": 0,
          "portfolio_hits": 0}


def stats() -> dict[str, int]:
    """Counters since the process started (or ``reset_stats``): ``memory_hits``,
    ``disk_hits``, ``misses`` (disk lookups that found nothing usable), ``compiles``,
    ``bad_entries`` (entries rejected on read) and ``portfolio_hits`` (kernels taken
    prebuilt from a loaded AOT portfolio, ``tilekit.aot.registry``)."""
    return dict(_stats)


def reset_stats() -> None:
    for k in _stats:
        _stats[k] = 0


def count(name: str) -> None:
    _stats[name] += 1


# --- where ---------------------------------------------------------------------------------


def cache_dir() -> Path:
    """``TILEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tilekit``, else ``~/.cache/tilekit``."""
    configured = knobs.CACHE_DIR.get()
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "tilekit"


def _kernels_dir() -> Path:
    return cache_dir() / "kernels"


# --- the key -------------------------------------------------------------------------------


def write_atomically(directory: Path, name: str, data: bytes, suffix: str = SUFFIX,
                     mode: int | None = None) -> None:
    """``directory/name`` := ``data``: written to a temporary file in the same directory,
    fsync'd, then renamed over the name (readers see the old file or the new one).
    ``mode``: the file's permissions (else mkstemp's 0600)."""
    import tempfile

    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_COMPILER_FOLDERS = ("ir", "layout", "codegen")


def _compiler_sources() -> list[pathlib.Path]:
    root = pathlib.Path(__file__).resolve().parents[1]
    return sorted(path for folder in _COMPILER_FOLDERS for path in (root / folder).rglob("*.py"))


def _source_stats(folder: str) -> Iterator[str]:
    """``path size mtime`` of each ``.py`` file under ``folder`` (os.scandir: no Path
    objects, one stat per file)."""
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_dir():
                if entry.name != "__pycache__":
                    yield from _source_stats(entry.path)
            elif entry.name.endswith(".py"):
                with contextlib.suppress(OSError):
                    st = entry.stat()
                    yield f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n"


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the compiler's own source (IR, layouts, code generation): a development
    checkout that changes how code is generated must not load kernels built before."""
    root = pathlib.Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in _compiler_sources():
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _installed_tools_now() -> dict[str, str]:
    """The versions ``toolchain`` takes from the installation, asked of each tool: this
    imports llvmlite's binding (which loads LLVM) and reads package metadata."""
    from importlib import metadata

    from tilekit.rt import link

    try:
        llvmlite_version = metadata.version("llvmlite")
    except metadata.PackageNotFoundError:
        llvmlite_version = "none"
    try:
        import llvmlite.binding as llvm

        llvm_version = ".".join(map(str, llvm.llvm_version_info))
    except Exception:  # llvmlite missing: codegen would fail anyway
        llvm_version = "none"
    return {"compiler": compiler_fingerprint(), "llvmlite": llvmlite_version,
            "llvm": llvm_version, "nvjitlink": link.version() or "none"}


def installation_signature() -> str:
    """A digest of what the installed tools' versions depend on, cheap to compute (no
    import, no file read): the Python, the modification time of each ``sys.path`` folder
    but the script's and the current directory (installing, upgrading or removing a package
    adds or removes entries of its folder, which changes that time; a script's folder
    changes for other reasons), and the size and modification time of each compiler source
    file. Equal signatures: ``_installed_tools_now`` would answer the same (a tool rebuilt
    in place under the same version, or installed next to the script, is what it misses)."""
    import tilekit

    digest = hashlib.sha256(f"{sys.version}\0{sys.prefix}\0{tilekit.__version__}".encode())
    skip = {"", os.getcwd(), sys.path[0] if sys.path else ""}
    for folder in sys.path:
        if folder in skip:
            continue
        with contextlib.suppress(OSError):
            digest.update(f"{folder}\0{os.stat(folder).st_mtime_ns}\n".encode())
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder in _COMPILER_FOLDERS:
        for line in _source_stats(os.path.join(root, folder)):
            digest.update(line.encode())
    return digest.hexdigest()


def _stamp_name() -> str:
    # one stamp per Python installation sharing the cache directory
    return f"toolchain-{hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]}.json"


@functools.cache
def installed_tools() -> dict[str, str]:
    """``_installed_tools_now()``, remembered in the cache directory under the
    installation's signature: a new process with the same installation reads one small
    file instead of loading LLVM and package metadata and hashing the compiler's source.
    Any change of the signature asks the tools again and rewrites the stamp."""
    signature = installation_signature()
    path = cache_dir() / _stamp_name()
    try:
        stamp = json.loads(path.read_bytes())
        if stamp.get("signature") == signature and isinstance(stamp.get("tools"), dict):
            return {str(k): str(v) for k, v in stamp["tools"].items()}
    except (OSError, ValueError):
        pass
    tools = _installed_tools_now()
    text = json.dumps({"signature": signature, "tools": tools}, sort_keys=True).encode()
    try:
        write_atomically(cache_dir(), path.name, text)
    except OSError as exc:  # an unwritable cache: asked again next time
        _debug("could not write %s: %s", path, exc)
    return tools


def toolchain() -> tuple[tuple[str, str], ...]:
    """Versions of everything that turns IR into a loaded kernel (part of every key): tilekit
    and its compiler's source, llvmlite and its LLVM, nvJitLink (``installed_tools``:
    remembered across processes), the CUDA driver and the cache format."""
    import tilekit
    from tilekit.rt import driver

    tools = installed_tools()
    gpu = driver.status()
    return (("tilekit", tilekit.__version__), ("compiler", tools["compiler"]),
            ("llvmlite", tools["llvmlite"]), ("llvm", tools["llvm"]),
            ("nvjitlink", tools["nvjitlink"]),
            ("cuda_driver", str(gpu.driver_version) if gpu.driver_version else "none"),
            ("cache_format", str(FORMAT_VERSION)))


def __getattr__(name: str) -> Any:
    """``CacheKey`` (``tilekit.rt.cache_key``), imported when first asked for."""
    if name == "CacheKey":
        from tilekit.rt.cache_key import CacheKey

        return CacheKey
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- entries -------------------------------------------------------------------------------


# Records made at import on the launch path are collections.namedtuple classes: a
# dataclass costs ~0.5 ms to create and a typing.NamedTuple ~0.3 ms (it compiles its
# string annotations), a namedtuple ~0.1 ms (bench/aot_start.py: the first launch of a
# fresh process).
class Entry(namedtuple("Entry", "kernel image")):
    __slots__ = ()  # the fields, with their types:
    # kernel: CompiledKernel
    # image: bytes  # the cubin (empty when the PTX is loaded through the driver's JIT)


def kernel_to_json(k: CompiledKernel) -> dict[str, Any]:
    """A compiled kernel's fields but its binary, as plain JSON (also the portfolio's)."""
    return {
        "name": k.name, "target": k.target, "binary_kind": k.binary_kind,
        "num_warps": k.num_warps, "warp_size": k.warp_size, "shared_bytes": k.shared_bytes,
        "params": [[p.kind.value, p.arg, p.dtype, p.axis, list(p.box), p.swizzle]
                   for p in k.params],
        "asserts": [[a.message, a.file, a.line, a.col] for a in k.asserts],
        "written_args": list(k.written_args),
        "prints": k.prints,
        "repacked": list(k.repacked),
    }


_kernel_to_json = kernel_to_json  # the name the cache's tests use


def kernel_from_json(d: Mapping[str, Any], binary: bytes) -> CompiledKernel:
    """``kernel_to_json``'s inverse; malformed fields raise ValueError, KeyError or
    TypeError."""
    return CompiledKernel(
        name=str(d["name"]), target=str(d["target"]), binary_kind=str(d["binary_kind"]),
        binary=binary, num_warps=int(d["num_warps"]), warp_size=int(d["warp_size"]),
        shared_bytes=int(d["shared_bytes"]),
        params=tuple(ParamSlot(SlotKind(k), str(a), str(t), int(x), tuple(int(n) for n in box),
                               str(swizzle)) for k, a, t, x, box, swizzle in d["params"]),
        asserts=tuple(AssertSite(str(m), str(f), int(ln), None if c is None else int(c))
                      for m, f, ln, c in d["asserts"]),
        written_args=tuple(str(a) for a in d["written_args"]),
        prints=bool(d.get("prints", False)),
        repacked=tuple(str(a) for a in d.get("repacked", ())),
    )


def encode(key: CacheKey, entry: Entry) -> bytes:
    header = json.dumps({"key": key.text, "digest": key.digest,
                         "kernel": kernel_to_json(entry.kernel),
                         "binary_len": len(entry.kernel.binary), "image_len": len(entry.image)},
                        sort_keys=True).encode()
    payload = header + entry.kernel.binary + entry.image
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), len(payload),
                        hashlib.sha256(payload).digest()) + payload


class BadEntry(ValueError):
    """Why a cache file was not used."""


def decode(key: CacheKey, data: bytes) -> Entry:
    if len(data) < _PREFIX.size:
        raise BadEntry("truncated header")
    magic, version, header_len, payload_len, digest = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise BadEntry("not a tilekit cache file")
    if version != FORMAT_VERSION:
        raise BadEntry(f"format version {version}, expected {FORMAT_VERSION}")
    payload = data[_PREFIX.size:]
    if len(payload) != payload_len:
        raise BadEntry(f"payload of {len(payload)} bytes, expected {payload_len}")
    if hashlib.sha256(payload).digest() != digest:
        raise BadEntry("checksum mismatch")
    try:
        header = json.loads(payload[:header_len])
        if header["key"] != key.text or header["digest"] != key.digest:
            raise BadEntry("entry is for another key")
        binary_len, image_len = int(header["binary_len"]), int(header["image_len"])
        if header_len + binary_len + image_len != payload_len:
            raise BadEntry("inconsistent lengths")
        binary = payload[header_len:header_len + binary_len]
        image = payload[header_len + binary_len:]
        return Entry(kernel_from_json(header["kernel"], binary), image)
    except BadEntry:
        raise
    except (ValueError, KeyError, TypeError) as exc:  # malformed JSON or fields
        raise BadEntry(f"malformed header ({exc})") from None


def entry_path(key: CacheKey) -> Path:
    return _kernels_dir() / key.filename


def load(key: CacheKey) -> Entry | None:
    """The entry for ``key``, or None (missing or bad: a bad entry is logged at debug level
    and left to be overwritten)."""
    path = entry_path(key)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        entry = decode(key, data)
    except BadEntry as exc:
        count("bad_entries")
        _debug("ignoring cache entry %s: %s", path, exc)
        return None
    with contextlib.suppress(OSError):  # last use, for `tilekit cache prune` (LRU)
        os.utime(path)
    return entry


def store(key: CacheKey, entry: Entry) -> None:
    """Write the entry atomically; a cache that cannot be written is not an error (the
    kernel still runs, it is just compiled again next time)."""
    try:
        write_atomically(_kernels_dir(), key.filename, encode(key, entry))
    except OSError as exc:
        _debug("could not write cache entry %s: %s", key.filename, exc)


def get_or_build(key: CacheKey, build: Callable[[], Entry]) -> Entry:
    """The disk entry for ``key``, or ``build()``'s result, stored."""
    entry = load(key)
    if entry is not None:
        count("disk_hits")
        return entry
    count("misses")
    count("compiles")
    entry = build()
    store(key, entry)
    return entry


# --- for `tilekit cache` -------------------------------------------------------------------


def entries() -> Iterator[Path]:
    directory = _kernels_dir()
    if directory.is_dir():
        yield from sorted(p for p in directory.iterdir()
                          if p.suffix == SUFFIX and not p.name.startswith(".tmp-"))


def size() -> tuple[int, int]:
    """(number of entries, total bytes)."""
    n = total = 0
    for p in entries():
        try:
            total += p.stat().st_size
            n += 1
        except OSError:
            pass
    return n, total


def _last_use(st: os.stat_result) -> float:
    # a hit sets both times (``load``); atime alone may be stale (noatime, relatime)
    return max(st.st_atime, st.st_mtime)


def prune(max_bytes: int) -> list[tuple[Path, int]]:
    """Remove the least recently used entries until the rest take at most ``max_bytes``;
    returns what went, ``(path, size)``, oldest first."""
    listed = []
    for p in entries():
        with contextlib.suppress(OSError):
            st = p.stat()
            listed.append((_last_use(st), p.name, p, st.st_size))
    listed.sort()
    total = sum(item[3] for item in listed)
    removed = []
    for _, _, path, nbytes in listed:
        if total <= max_bytes:
            break
        try:
            path.unlink()
        except FileNotFoundError:  # another process pruned it
            pass
        except OSError:
            continue
        total -= nbytes
        removed.append((path, nbytes))
    return removed


def clear() -> int:
    """Remove every entry (and stale temporaries); returns how many entries went."""
    directory = _kernels_dir()
    removed = 0
    if directory.is_dir():
        for p in directory.iterdir():
            if p.suffix == SUFFIX:
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed += not p.name.startswith(".tmp-")
    return removed
