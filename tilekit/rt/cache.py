"""The kernel cache on disk: compiled kernels keyed by everything that shaped them
(``tilekit.rt.cache_key.CacheKey``: the IR, the specialization, the arch, the toolchain).

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
import hashlib
import json
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilekit import knobs
from tilekit.codegen.artifact import (
    AccessSite,
    AssertSite,
    CompiledKernel,
    ParamSlot,
    SlotKind,
)
from tilekit.record import Record

if TYPE_CHECKING:  # the key is imported by the first disk lookup, not by every launch
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


# --- writing -------------------------------------------------------------------------------


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


# --- entries -------------------------------------------------------------------------------


class Entry(Record):
    __slots__ = ()
    kernel: CompiledKernel
    image: bytes  # the cubin (empty when the PTX is loaded through the driver's JIT)


def kernel_to_json(k: CompiledKernel) -> dict[str, Any]:
    """A compiled kernel's fields but its binary, as plain JSON (also the portfolio's). A
    checked kernel's fields (``TILEKIT_CHECK``) are written only for such a kernel."""
    checked = {"checked": True, "access_sites": [
        [a.op, a.tensor, list(a.shape), a.file, a.line, a.col, a.end_col, a.end_line]
        for a in k.access_sites]}
    return {
        "name": k.name, "target": k.target, "binary_kind": k.binary_kind,
        "num_warps": k.num_warps, "warp_size": k.warp_size, "shared_bytes": k.shared_bytes,
        "params": [[p.kind.value, p.arg, p.dtype, p.axis, list(p.box), p.swizzle]
                   for p in k.params],
        "asserts": [[a.message, a.file, a.line, a.col] for a in k.asserts],
        "written_args": list(k.written_args),
        "prints": k.prints,
        "repacked": list(k.repacked),
        **(checked if k.checked else {}),
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
        checked=bool(d.get("checked", False)),
        access_sites=tuple(AccessSite(str(op), str(t), tuple(int(n) for n in shape), str(f),
                                      int(ln), *(None if c is None else int(c) for c in cols))
                           for op, t, shape, f, ln, *cols in d.get("access_sites", ())),
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
