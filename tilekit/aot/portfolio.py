"""The portfolio file: a zip archive of a JSON manifest and one member per binary.

::

    manifest.json                      the manifest (below)
    binaries/<variant id>.ptx          the PTX (NVIDIA) or code object (.hsaco, AMD)
    binaries/<variant id>.cubin        the cubin linked from that PTX (NVIDIA)

The manifest: ``format`` (``FORMAT``), ``tilekit_version``, and per kernel its ``name``,
``module`` and ``variants``; per variant its bucket key (``ir_hash``, ``spec``,
``size_facts``, ``arch``; ``VariantKey``), the ``candidates`` size facts of its
traced kernel, the kernel's ``source`` fingerprint (``fingerprint.source_hash``, empty
when it has none; format 2), the abstract ``call`` that declared it, the ``toolchain``
versions that built it, the ``kernel`` (``cache.kernel_to_json``: the ABI and launch
configuration) and, for each binary, its member name, byte size and sha256.

Reading is JSON and byte comparison only (nothing is unpickled, imported or executed)
and verifies everything before it is used: a zip that opens, member names that are
exactly the ones the manifest implies (no absolute paths, ``..`` or backslashes: the
archive is never extracted, but such a file was not written by tilekit), a format this
tilekit reads, the manifest's schema, each member's size, CRC-32 and sha256, no variant
twice. ``read`` checks all of it at once; ``read(lazy=True)`` (``tilekit.load_portfolio``)
all but the binaries' contents, each of which ``Binaries`` checks when it is asked for:
loading costs the manifest, a launch the one binary it loads. Any failure is a
``PortfolioError`` naming the file, what is wrong and what to do. Writing is
deterministic (sorted, fixed timestamps) and atomic (``cache.write_atomically``).

A variant is found by its key, ``VariantKey`` (kernel name, IR hash, bucket, arch), or
without tracing by the kernel's source fingerprint (``tilekit.aot.fingerprint``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tilekit.errors import PortfolioError
from tilekit.record import Record

if TYPE_CHECKING:
    from tilekit.codegen.artifact import CompiledKernel
    from tilekit.ir.core import Module

FORMAT = 2  # 2: per variant the kernel's source fingerprint (format 1 is read too)
MANIFEST = "manifest.json"
SUFFIX = ".tkp"
_MAX_MANIFEST = 64 << 20
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest timestamp: the same bytes every build
_REBUILD = "rebuild it with `tilekit aot` (docs/aot.md)"


# --- the key ---------------------------------------------------------------------------------

class VariantKey(Record):
    """What identifies a prebuilt kernel: kernel name, IR hash, bucket, arch.

    The IR hash (``ir_hash``) is the sha256 of the traced, optimized IR printed *without*
    source locations: the same kernel at another path, or after an edit that only moves
    lines, still matches, while any change of what the kernel computes does not. The
    bucket is the runtime's own canonical text of the specialization and of the call's
    size facts (``gpu.spec_text``, ``gpu.size_facts_text``). Cheap to compute (well under
    a millisecond for the examples) and imports no compiler."""
    __slots__ = ()
    kernel: str  # the kernel's name
    ir_hash: str  # ir_hash() of its traced module
    spec: str  # gpu.spec_text of the specialization
    size_facts: str  # gpu.size_facts_text of the call's size facts
    arch: str  # "sm_90a", "sm_80", "gfx942"

    @property
    def id(self) -> str:
        """A short stable name for the variant (its archive members are named by it)."""
        text = json.dumps(list(self), separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def facts(self) -> set[str]:
        """The key as a set of facts, to rank how far two buckets are apart."""
        return {f"ir={self.ir_hash}", f"arch={self.arch}", *self.spec.split(";"),
                *(f"divisible {f}" for f in self.size_facts.split(",") if f)}


def ir_hash(module: Module) -> str:
    """sha256 of the module printed without source locations (kept on the traced module:
    computed once per specialization)."""
    fn = module.kernel
    found: str | None = getattr(fn, "aot_ir_hash", None)
    if found is None:
        from tilekit.ir.printer import print_module

        found = hashlib.sha256(print_module(module, with_locs=False).encode()).hexdigest()
        fn.aot_ir_hash = found  # type: ignore[attr-defined]
    return found


def key_of(module: Module, spec_text: str, size_facts_text: str, arch: str) -> VariantKey:
    return VariantKey(module.kernel.name, ir_hash(module), spec_text, size_facts_text, arch)


# --- the file --------------------------------------------------------------------------------


class Variant(Record):
    """One prebuilt kernel: its key, what declared it, what built it, and the binaries."""
    __slots__ = ()
    key: VariantKey
    module: str  # the kernel's module as the build was given it
    candidates: str  # the traced kernel's candidate size facts (gpu.size_facts_text)
    call: Mapping[str, Any]  # the abstract call that declared the bucket
    toolchain: Mapping[str, str]
    compiled: CompiledKernel  # binary: the PTX or code object
    image: bytes = b""  # the linked cubin (NVIDIA; empty without nvJitLink)
    source: str = ""  # the kernel's fingerprint (fingerprint.source_hash); "" when none

    def members(self) -> dict[str, bytes]:
        """Archive member name -> bytes."""
        binary, image = _member_names(self.key.id, self.compiled.binary_kind)
        out = {binary: self.compiled.binary}
        if self.image:
            out[image] = self.image
        return out


def _member_names(variant_id: str, binary_kind: str) -> tuple[str, str]:
    """The names of a variant's binary and image members: ``binaries/<id>.ptx`` (``.hsaco``
    for a code object) and ``binaries/<id>.cubin``."""
    kind = "".join(c for c in binary_kind if c.isalnum()) or "bin"
    return (f"binaries/{variant_id}.{'hsaco' if kind == 'elf' else kind}",
            f"binaries/{variant_id}.cubin")


def _is_sha256(text: str) -> bool:
    """64 lowercase hex digits (``str.strip`` in C: a manifest has a few per variant)."""
    return len(text) == 64 and not text.strip("0123456789abcdef")


class Portfolio(Record):
    __slots__ = ()
    path: str
    format: int
    tilekit_version: str
    variants: tuple[Variant, ...] = ()  # without their binaries when read lazily
    binaries: Binaries | None = None  # the file's binaries, verified when asked for

    @property
    def kernels(self) -> list[str]:
        return sorted({v.key.kernel for v in self.variants})


# --- writing ---------------------------------------------------------------------------------


def _describe(blob: bytes, member: str) -> dict[str, Any]:
    return {"member": member, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}


def manifest_of(variants: Iterable[Variant], tilekit_version: str) -> dict[str, Any]:
    from tilekit.rt.cache import kernel_to_json

    by_kernel: dict[tuple[str, str], list[Variant]] = {}
    for v in variants:
        by_kernel.setdefault((v.key.kernel, v.module), []).append(v)
    kernels = []
    for (name, module), group in sorted(by_kernel.items()):
        rows = []
        for v in sorted(group, key=lambda v: (v.key.arch, v.key.spec, v.key.size_facts,
                                              v.key.ir_hash)):
            members = list(v.members().items())
            rows.append({
                "id": v.key.id, "arch": v.key.arch, "ir_hash": v.key.ir_hash,
                "spec": v.key.spec, "size_facts": v.key.size_facts,
                "candidates": v.candidates, "source": v.source, "call": v.call,
                "toolchain": dict(sorted(v.toolchain.items())),
                "kernel": kernel_to_json(v.compiled),
                "binary": _describe(members[0][1], members[0][0]),
                "image": _describe(members[1][1], members[1][0]) if len(members) > 1 else None,
            })
        kernels.append({"name": name, "module": module, "variants": rows})
    return {"format": FORMAT, "tilekit_version": tilekit_version, "kernels": kernels}


def encode(variants: Iterable[Variant], tilekit_version: str) -> bytes:
    """The portfolio's bytes: the same variants give the same bytes."""
    variants = list(variants)
    keys = [v.key for v in variants]
    if len(set(keys)) != len(keys):
        raise PortfolioError("a portfolio cannot hold the same variant twice")
    manifest = json.dumps(manifest_of(variants, tilekit_version), sort_keys=True,
                          separators=(",", ":")).encode()
    members = {name: blob for v in variants for name, blob in v.members().items()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in [(MANIFEST, manifest), *sorted(members.items())]:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, blob)
    return buf.getvalue()


def write(path: str | os.PathLike[str], variants: Iterable[Variant],
          tilekit_version: str) -> None:
    """Write the portfolio atomically (a temporary file in the same directory, fsync'd,
    renamed): a reader never sees half a file."""
    from pathlib import Path

    from tilekit.rt.cache import write_atomically

    target = Path(path)
    write_atomically(target.parent.resolve(), target.name, encode(variants, tilekit_version),
                     suffix=SUFFIX, mode=0o644)


# --- reading ---------------------------------------------------------------------------------


class _Malformed(ValueError):
    """The manifest is not the schema: the message says where."""


def _get(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise _Malformed(f"{where} must be an object")
    if key not in obj:
        raise _Malformed(f"{where} has no `{key}`")
    value = obj[key]
    if (isinstance(value, bool) and kind in (int, str)) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _Malformed(f"{where}.{key} must be {names}, got {type(value).__name__}")
    return value


def _member_name_problem(name: str) -> str | None:
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    if "\\" in name:
        return "a backslash"
    if ".." in name.split("/"):
        return "a `..` component (a path traversal)"
    return None


def _refuse(path: str, what: str, hint: str = _REBUILD) -> PortfolioError:
    return PortfolioError(f"portfolio {path}: {what}", hints=[hint])


def read(path: str | os.PathLike[str], lazy: bool = False) -> Portfolio:
    """Read and verify a portfolio file; a ``PortfolioError`` if anything is wrong.

    ``lazy``: verify everything but the binaries' contents now (the archive, the member
    names and sizes, the manifest), and each binary when it is asked for
    (``Portfolio.binaries``): loading a portfolio then costs its manifest, and a launch the
    one binary it loads. The variants come without their binaries."""
    shown = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise PortfolioError(f"cannot read portfolio {shown}: {exc.strerror or exc}",
                             hints=["check the path (tilekit.load_portfolio, "
                                    "TILEKIT_PORTFOLIO)"]) from None
    return decode(data, shown, lazy)


def decode(data: bytes, shown: str = "<bytes>", lazy: bool = False) -> Portfolio:
    """``read`` of bytes already in memory (``shown`` names them in errors)."""
    try:
        archive, directory = _directory(data)
    except _ARCHIVE_ERRORS:
        raise _refuse(shown, f"not a portfolio: not a zip archive, or truncated "
                      f"({len(data)} bytes)",
                      "copy it again, or rebuild it with `tilekit aot`") from None
    entries: dict[str, _Entry] = {}
    for name, entry in directory:
        problem = _member_name_problem(name)
        if problem:
            raise _refuse(shown, f"archive member {name!r} has {problem}; "
                          "tilekit never writes such names, so the file was altered",
                          "do not use this file; rebuild it with `tilekit aot`")
        if name in entries:
            raise _refuse(shown, f"archive member {name!r} appears twice")
        entries[name] = entry
    if MANIFEST not in entries:
        raise _refuse(shown, f"no {MANIFEST} in the archive (not a tilekit portfolio)")
    if entries[MANIFEST][_SIZE] > _MAX_MANIFEST:
        raise _refuse(shown, f"{MANIFEST} is {entries[MANIFEST][_SIZE]} bytes, more than "
                      "a manifest can be")
    try:
        manifest = json.loads(_read_member(archive, MANIFEST, entries[MANIFEST], shown))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _refuse(shown, f"{MANIFEST} is not valid JSON ({exc})") from None
    version = manifest.get("format") if isinstance(manifest, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _refuse(shown, f"unknown format version {version!r} (this tilekit reads "
                      f"format {FORMAT})")
    if version > FORMAT:
        import tilekit

        raise _refuse(shown, f"format version {version} is newer than this tilekit "
                      f"({tilekit.__version__}) reads (up to {FORMAT})",
                      "upgrade tilekit, or rebuild the portfolio with this version")
    try:
        version_text, pending, members = _parse(manifest, version)
    except _Malformed as exc:
        raise _refuse(shown, f"the manifest does not follow the format: {exc}") from None
    unexpected = sorted(set(entries) - {MANIFEST} - set(members))
    if unexpected:
        raise _refuse(shown, f"archive member {unexpected[0]!r} is not in the manifest")
    for name, (size, _) in sorted(members.items()):
        if name not in entries:
            raise _refuse(shown, f"archive member {name!r} is missing")
        if entries[name][_SIZE] != size:
            raise _refuse(shown, f"archive member {name!r} is {entries[name][_SIZE]} bytes, "
                          f"the manifest says {size}")
    binaries = Binaries(shown, archive, entries, members,
                        {v.key: (binary, image) for v, binary, image in pending})
    if lazy:
        return Portfolio(shown, version, version_text, tuple(v for v, _, _ in pending),
                         binaries)
    blobs = {name: binaries.member(name) for name in sorted(members)}
    return _attach(shown, version, version_text, pending, blobs)


class Binaries:
    """The binaries of a portfolio read with ``lazy=True``, each inflated and checked (its
    CRC-32, size and sha256 against the manifest's) when it is asked for: a binary that is
    not the one the manifest names is a ``PortfolioError``, raised before any of its bytes
    are handed out. The file's bytes are kept (not its path): what is checked is what was
    read."""

    __slots__ = ("shown", "archive", "entries", "expected", "names")

    def __init__(self, shown: str, archive: zipfile.ZipFile, entries: dict[str, _Entry],
                 expected: dict[str, tuple[int, str]],
                 names: dict[VariantKey, tuple[str, str | None]]) -> None:
        self.shown = shown
        self.archive = archive  # over the bytes read, in memory
        self.entries = entries
        self.expected = expected  # member name -> (size, sha256), from the manifest
        self.names = names  # variant key -> (binary member, image member or None)

    def member(self, name: str) -> bytes:
        """One member's bytes, verified."""
        blob = _read_member(self.archive, name, self.entries[name], self.shown)
        if hashlib.sha256(blob).hexdigest() != self.expected[name][1]:
            raise _refuse(self.shown, f"archive member {name!r} does not match its sha256 in "
                          "the manifest (corrupted or altered)",
                          "do not use this file; rebuild it with `tilekit aot`")
        return blob

    def loadable(self, variant: Variant) -> Variant:
        """``variant`` with the binary a launch loads: its cubin when it has one (its PTX
        stays in the file), else its PTX or code object."""
        binary, image = self.names[variant.key]
        if image is not None:
            return variant._replace(image=self.member(image))
        return variant._replace(compiled=variant.compiled._replace(
            binary=self.member(binary)))


# --- the zip archive --------------------------------------------------------------------------

# a member: (its zipfile.ZipInfo, its size)
_Entry = tuple
_SIZE = 1
_ARCHIVE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError)


# Member names tilekit writes are ASCII, which zip stores without its UTF-8 flag: zipfile
# decodes those as cp437, whose codec is a module of its own (imported by the first load).
# ASCII decodes them the same without an import (Python 3.11+: ``metadata_encoding``).
_ASCII_NAMES: dict[str, Any] = {"metadata_encoding": "ascii"} \
    if sys.version_info >= (3, 11) else {}


def _directory(data: bytes) -> tuple[zipfile.ZipFile, list[tuple[str, _Entry]]]:
    """The archive and the members its central directory lists, in its order; one of
    ``_ARCHIVE_ERRORS`` when ``data`` is no zip archive (truncated, something else)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data), **_ASCII_NAMES)
    except UnicodeDecodeError:  # a name tilekit does not write: read as zip's default does
        archive = zipfile.ZipFile(io.BytesIO(data))
    return archive, [(info.filename, (info, info.file_size)) for info in archive.infolist()]


def _read_member(archive: zipfile.ZipFile, name: str, entry: _Entry, shown: str) -> bytes:
    """A member's bytes, inflated and checked against its size and CRC-32 (by zipfile)."""
    try:
        blob = archive.read(entry[0])
        if len(blob) != entry[_SIZE]:
            raise ValueError("bad size")
    except (*_ARCHIVE_ERRORS, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise _refuse(shown, f"archive member {name!r} is corrupt ({exc})",
                      "copy it again, or rebuild it with `tilekit aot`") from None
    return blob


# A variant read from the manifest: (the variant without its binaries, its binary's member
# name, its image's member name or None).
_Pending = tuple  # tuple[Variant, str, str | None]


def _blob_ref(obj: Any, where: str, members: dict[str, tuple[int, str]]) -> str:
    member = _get(obj, "member", str, where)
    size = _get(obj, "size", int, where)
    digest = _get(obj, "sha256", str, where)
    if size < 0 or not _is_sha256(digest):
        raise _Malformed(f"{where} has a bad size or sha256")
    if member in members:
        raise _Malformed(f"{where}.member {member!r} is used twice")
    members[member] = (size, digest)
    return member


def _parse(manifest: dict[str, Any], format_version: int = FORMAT
           ) -> tuple[str, list[_Pending], dict[str, tuple[int, str]]]:
    """The manifest's fields, checked against the schema of format ``format_version``: the
    tilekit version, the variants (binaries still empty), and member name -> (size,
    sha256)."""
    from tilekit.rt.cache import kernel_from_json

    version = _get(manifest, "tilekit_version", str, "manifest")
    members: dict[str, tuple[int, str]] = {}
    pending: list[_Pending] = []
    keys: set[VariantKey] = set()
    for i, kernel in enumerate(_get(manifest, "kernels", list, "manifest")):
        kwhere = f"kernels[{i}]"
        name = _get(kernel, "name", str, kwhere)
        module = _get(kernel, "module", str, kwhere)
        for j, row in enumerate(_get(kernel, "variants", list, kwhere)):
            where = f"{kwhere}.variants[{j}]"
            key = VariantKey(name, _get(row, "ir_hash", str, where),
                             _get(row, "spec", str, where), _get(row, "size_facts", str, where),
                             _get(row, "arch", str, where))
            if key in keys:
                raise _Malformed(f"{where} repeats a variant ({name}, {key.arch}, "
                                 f"{key.spec} | {key.size_facts})")
            keys.add(key)
            variant_id = key.id
            if _get(row, "id", str, where) != variant_id:
                raise _Malformed(f"{where}.id is not the id of its key")
            toolchain = _get(row, "toolchain", dict, where)
            if not all(isinstance(v, str) for v in toolchain.values()):
                raise _Malformed(f"{where}.toolchain must map names to version strings")
            try:
                compiled = kernel_from_json(_get(row, "kernel", dict, where), b"")
            except (ValueError, KeyError, TypeError) as exc:
                raise _Malformed(f"{where}.kernel is malformed ({exc})") from None
            if compiled.name != name or compiled.target != key.arch:
                raise _Malformed(f"{where}.kernel is for {compiled.name} on {compiled.target}")
            source = _get(row, "source", str, where) if format_version >= 2 else ""
            if source and not _is_sha256(source):
                raise _Malformed(f"{where}.source is not a sha256")
            variant = Variant(key, module, _get(row, "candidates", str, where),
                              _get(row, "call", dict, where), toolchain, compiled,
                              source=source)
            # the member names tilekit gives this variant, and no others
            binary = _blob_ref(_get(row, "binary", dict, where), f"{where}.binary", members)
            image = None if row.get("image") is None else \
                _blob_ref(_get(row, "image", dict, where), f"{where}.image", members)
            expected, cubin = _member_names(variant_id, compiled.binary_kind)
            if binary != expected or image not in (None, cubin):
                raise _Malformed(f"{where} names the members {binary!r} and {image!r}, not "
                                 f"{expected!r} and {cubin}")
            pending.append((variant, binary, image))
    return version, pending, members


def _attach(shown: str, format_version: int, version: str, pending: list[_Pending],
            blobs: Mapping[str, bytes]) -> Portfolio:
    variants = []
    for variant, binary, image in pending:
        compiled = variant.compiled._replace(binary=blobs[binary])
        variants.append(variant._replace(compiled=compiled,
                                         image=blobs[image] if image is not None else b""))
    return Portfolio(shown, format_version, version, tuple(variants))

