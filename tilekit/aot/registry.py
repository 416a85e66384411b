"""Prebuilt kernels from loaded portfolios, looked up before the disk cache.

``load_portfolio`` reads and verifies a portfolio (``portfolio.read``) and registers each
variant under its ``VariantKey`` (kernel name, IR hash, bucket, arch). A launch that
misses the in-memory cache asks, before the disk cache:

1. ``untraced``: by the kernel's source fingerprint (``fingerprint``), its specialization
   and the arch, without tracing. It gives the traced kernel's candidate size facts (so
   the launch can compute its bucket) and, per set of size facts, the prebuilt kernel
   (``take``). A fresh process then launches without importing the IR, the front end or
   any compiler.
2. ``find``: by the traced module's IR hash, when there is no fingerprint or it differs
   (e.g. a kernel edited in a way that does not change its IR).

A hit is a ``cache.Entry`` built from the portfolio's bytes: nothing is compiled or
linked. The portfolio is read lazily (``portfolio.read(lazy=True)``): its manifest is
verified when it is loaded, a variant's binary when that variant is first hit (a binary
that is not the manifest's is a ``PortfolioError`` then, before anything is loaded). The
arch is in both keys: a portfolio built for sm_90a never serves an sm_80 device.

A kernel loaded from a *strict* portfolio may not be compiled: a call outside the
portfolio's buckets is a ``LaunchError`` at the caller's line that lists the nearest
buckets the portfolio has. ``TILEKIT_PORTFOLIO`` names portfolios loaded (not strict) when
the first kernel is loaded for the GPU. The first variant registered under a key is kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tilekit import knobs
from tilekit.errors import LaunchError, PortfolioError, SourceLoc
from tilekit.rt import cache

# The portfolio module (the file and its ``VariantKey``) is imported when a portfolio is
# loaded, the fingerprint when a launch first asks for its kernels: a process that loads
# none (every JIT launch asks ``active``) imports neither.
if TYPE_CHECKING:
    from tilekit.aot.portfolio import Binaries, Portfolio, Variant, VariantKey
    from tilekit.ir.core import Module


class Prebuilt:
    """A registered variant (without its binaries) and, once it is hit, its kernel with the
    binary a launch loads, read from its portfolio and verified then
    (``portfolio.Binaries``). A plain class: a namedtuple costs ~0.1 ms to create at
    import (bench/aot_start.py)."""

    __slots__ = ("variant", "binaries", "_entry")

    def __init__(self, variant: Variant, binaries: Binaries) -> None:
        self.variant = variant
        self.binaries = binaries
        self._entry: cache.Entry | None = None

    def entry(self) -> cache.Entry:
        if self._entry is None:
            v = self.binaries.loadable(self.variant)
            self._entry = cache.Entry(v.compiled, v.image)
        return self._entry


class Untraced:
    """The variants of one kernel source, specialization and arch: the traced kernel's
    candidate size facts, and the prebuilt kernel per set of facts that hold."""

    __slots__ = ("candidates", "by_size_facts")

    def __init__(self, candidates: tuple[tuple[str, int, int], ...]) -> None:
        self.candidates = candidates
        self.by_size_facts: dict[str, Prebuilt] = {}


_variants: dict[VariantKey, Prebuilt] = {}
_untraced: dict[tuple[str, str, str, str], Untraced] = {}  # (kernel, source, spec, arch)
_by_kernel: dict[str, list[VariantKey]] = {}
_strict: dict[str, str] = {}  # kernel name -> the strict portfolio that holds it
_loaded: list[tuple[str, int, bool]] = []  # (path, variants, strict), for `tilekit info`
_env_done = False


def load_portfolio(path: str | os.PathLike[str], strict: bool = False) -> Portfolio:
    """Read, verify and register a portfolio's variants; returns what was read (the
    variants without their binaries: each is read and verified when first hit). ``strict``:
    its kernels may not be compiled here, a call outside its buckets is an error."""
    from tilekit.aot.portfolio import read

    found = read(path, lazy=True)
    for v in found.variants:
        if v.key not in _variants:
            _variants[v.key] = Prebuilt(v, found.binaries)
            _by_kernel.setdefault(v.key.kernel, []).append(v.key)
            if v.source:
                _index_untraced(_variants[v.key])
        if strict:
            _strict[v.key.kernel] = found.path
    _loaded.append((found.path, len(found.variants), strict))
    return found


def loaded() -> list[tuple[str, int, bool]]:
    """The portfolios loaded in this process: (path, number of variants, strict)."""
    return list(_loaded)


def clear() -> None:
    """Forget every registered variant (and load ``TILEKIT_PORTFOLIO`` again when next
    asked)."""
    global _env_done
    _variants.clear()
    _untraced.clear()
    _by_kernel.clear()
    _strict.clear()
    _loaded.clear()
    _env_done = False


def _load_env() -> None:
    global _env_done
    for path in knobs.PORTFOLIO.get():
        try:
            load_portfolio(path)
        except PortfolioError as exc:
            raise PortfolioError(exc.message, hints=[*exc.hints, "it is named by "
                                 "TILEKIT_PORTFOLIO; fix or unset that variable"]) from None
    _env_done = True


def active() -> bool:
    """Whether any portfolio is loaded (``TILEKIT_PORTFOLIO`` is read on the first call):
    when not, a launch skips the lookup."""
    if not _env_done:
        _load_env()
    return bool(_by_kernel)


def _index_untraced(hit: Prebuilt) -> None:
    key, v = hit.variant.key, hit.variant
    candidates = tuple((name, int(dim), int(n)) for name, dim, n in
                       (f.split(":") for f in v.candidates.split(",") if f))
    group = _untraced.setdefault((key.kernel, v.source, key.spec, key.arch),
                                 Untraced(candidates))
    if group.candidates != candidates:  # cannot happen for one source; stay on find()
        group.candidates = ()
        group.by_size_facts.clear()
        return
    group.by_size_facts.setdefault(key.size_facts, hit)


def untraced(kern: Any, spec_text: str, arch: str) -> Untraced | None:
    """The prebuilt variants of ``kern`` (by its source fingerprint) for this
    specialization (``gpu.spec_text``) and arch, or None: then trace and ask ``find``."""
    if not _env_done:
        _load_env()
    if not _untraced or kern.name not in _by_kernel or knobs.JITTER.get() \
            or not knobs.WGMMA.get() or knobs.CHECK.get():
        return None
    from tilekit.aot.fingerprint import source_hash

    source = source_hash(kern)
    if source is None:
        return None
    group = _untraced.get((kern.name, source, spec_text, arch))
    return group if group is not None and group.by_size_facts else None


def take(group: Untraced, size_facts_text: str) -> cache.Entry | None:
    """The prebuilt kernel of ``untraced``'s group for the call's size facts
    (``gpu.size_facts_text``), counted in ``portfolio_hits``; None: trace and ask ``find``
    (which raises for a strict portfolio)."""
    hit = group.by_size_facts.get(size_facts_text)
    if hit is None:
        return None
    entry = hit.entry()
    cache.count("portfolio_hits")
    return entry


def find(module: Module, spec_text: str, size_facts_text: str, arch: str,
         loc: SourceLoc | None = None) -> cache.Entry | None:
    """The prebuilt kernel for this traced module, bucket (``gpu.spec_text``,
    ``gpu.size_facts_text``) and arch, or None (compile it). Counts ``portfolio_hits``; a
    kernel of a strict portfolio raises instead of returning None."""
    if not _env_done:
        _load_env()
    known = _by_kernel.get(module.kernel.name)
    if known is None or knobs.JITTER.get() or not knobs.WGMMA.get() or knobs.CHECK.get():
        return None  # built without jitter, with wgmma, unchecked
    from tilekit.aot.portfolio import key_of

    key = key_of(module, spec_text, size_facts_text, arch)
    hit = _variants.get(key)
    if hit is not None:
        entry = hit.entry()
        cache.count("portfolio_hits")
        return entry
    if key.kernel in _strict:
        raise not_prebuilt(key, known, _strict[key.kernel], loc)
    return None


# --- strict mode's error -----------------------------------------------------------------------

# Compiled (and cached by ``re``) when strict mode's error first needs them, not at import.
_TENSOR = r"(\w+):tensor<([^,>]+),?(.*)>"
_SCALAR = r"(\w+):scalar<(.*)>"
_CONST = r"(\w+)=constexpr<(.*)>"


def _fields(key: VariantKey) -> dict[str, str]:
    """A bucket key as named facts, for saying how two buckets differ."""
    out = {"arch": key.arch}
    for part in key.spec.split(";"):
        if m := re.fullmatch(_TENSOR, part):
            out[f"{m.group(1)} dtype"] = m.group(2)
            for field in filter(None, m.group(3).split(",")):
                name, _, value = field.partition("=")
                out[f"{m.group(1)} {name}"] = value
        elif m := re.fullmatch(_SCALAR, part):
            out[f"{m.group(1)} dtype"] = m.group(2)
        elif m := re.fullmatch(_CONST, part):
            out[m.group(1)] = m.group(2)
        elif part:
            out[part] = "yes"
    for fact in filter(None, key.size_facts.split(",")):
        name, dim, n = fact.split(":")
        out[f"{name}.shape[{dim}] % {n} == 0"] = "yes"
    return out


def differences(have: VariantKey, want: VariantKey) -> list[str]:
    """The facts in which a portfolio's bucket ``have`` and the call's ``want`` differ. The
    IR hash depends on the constexprs, so it counts only when nothing else differs (then
    the kernel's code changed)."""
    a, b = _fields(have), _fields(want)
    out = [f"{k} {a.get(k, 'no')} (this call: {b.get(k, 'no')})"
           for k in sorted(set(a) | set(b)) if a.get(k, "no") != b.get(k, "no")]
    if not out and have.ir_hash != want.ir_hash:
        out.append(f"the kernel's code: IR hash {have.ir_hash[:12]} (this call: "
                   f"{want.ir_hash[:12]})")
    return out


def nearest(want: VariantKey, keys: Iterable[VariantKey], n: int = 3) -> list[VariantKey]:
    """The ``n`` keys that differ from ``want`` in the fewest facts."""
    return sorted(keys, key=lambda k: (len(differences(k, want)), k))[:n]


def not_prebuilt(want: VariantKey, keys: Iterable[VariantKey], path: str,
                 loc: SourceLoc | None) -> LaunchError:
    keys = list(keys)
    lines = [f"kernel `{want.kernel}` is in the strict portfolio {path}, but this call's "
             f"bucket is not (arch {want.arch}; {want.spec}; divisible: "
             f"{want.size_facts or 'none'}). Nearest buckets it has:"]
    for i, k in enumerate(nearest(want, keys), 1):
        lines.append(f"  {i}. {k.arch}; {k.spec}; divisible: {k.size_facts or 'none'}")
        lines.append("       differs in: " + "; ".join(differences(k, want)))
    hints = ["add this bucket to the portfolio (`tilekit aot ... --call ...`, or a run with "
             "TILEKIT_RECORD=calls.jsonl, then `tilekit aot ... --calls calls.jsonl`)",
             "or load it with tilekit.load_portfolio(path, strict=False) to compile calls "
             "outside it"]
    if any(k.ir_hash != want.ir_hash and k._replace(ir_hash=want.ir_hash) == want
           for k in keys):
        hints.insert(0, "the kernel's code differs from the one the portfolio was built from: "
                     "rebuild the portfolio")
    return LaunchError("\n".join(lines), loc, hints=hints)

