"""The disk cache's key: everything that shaped a compiled kernel.

``CacheKey.of`` is the sha256 of a canonical JSON of
  * the printed IR *with source locations* (tracing inlines every callee, so this covers
    them; locations make an error's line right after the user edits the file),
  * the specialization (constexprs, dtypes, ranks, index widths, alignment facts),
  * the target arch (``sm_90a``),
  * tilekit's version and the toolchain's (``toolchain``: llvmlite, LLVM, nvJitLink, the
    CUDA driver, the cache format).

The toolchain's versions cost LLVM and package metadata to ask for; ``installed_tools``
remembers them across processes in a stamp in the cache directory. A launch that needs no
key (a kernel already in memory, or prebuilt in an AOT portfolio) never imports this
module.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pathlib
import sys
from collections.abc import Iterator

from tilekit.record import Record
from tilekit.rt import cache


class CacheKey(Record):
    __slots__ = ()
    name: str  # the kernel's name (for file names and `tilekit cache list`)
    text: str  # canonical JSON of every input
    digest: str  # its sha256

    @staticmethod
    def of(name: str, ir_text: str, spec_text: str, arch: str,
           tools: tuple[tuple[str, str], ...] | None = None) -> CacheKey:
        doc = {"ir": ir_text, "specialization": spec_text, "arch": arch,
               "toolchain": dict(tools if tools is not None else toolchain())}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return CacheKey(name, text, hashlib.sha256(text.encode()).hexdigest())

    @property
    def filename(self) -> str:
        safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in self.name)[:64]
        return f"{safe}-{self.digest}{cache.SUFFIX}"


# --- the toolchain -------------------------------------------------------------------------


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
    imports llvmlite's binding (which loads LLVM); no ``importlib.metadata`` (10-20 ms)."""
    from tilekit.rt import link

    try:
        import llvmlite

        llvmlite_version = str(llvmlite.__version__)
    except ImportError:
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
    path = cache.cache_dir() / _stamp_name()
    try:
        stamp = json.loads(path.read_bytes())
        if stamp.get("signature") == signature and isinstance(stamp.get("tools"), dict):
            return {str(k): str(v) for k, v in stamp["tools"].items()}
    except (OSError, ValueError):
        pass
    tools = _installed_tools_now()
    text = json.dumps({"signature": signature, "tools": tools}, sort_keys=True).encode()
    try:
        cache.write_atomically(cache.cache_dir(), path.name, text)
    except OSError as exc:  # an unwritable cache: asked again next time
        import logging

        logging.getLogger("tilekit.cache").debug("could not write %s: %s", path, exc)
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
            ("cache_format", str(cache.FORMAT_VERSION)))
