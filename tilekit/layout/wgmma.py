"""wgmma shared-memory operands: canonical layouts, descriptor detection and encoding.

``wgmma.mma_async`` reads A (optionally) and B from shared memory through a
64-bit matrix descriptor. The descriptor can only name the *canonical* layouts
of the PTX ISA ("Shared Memory Matrix Layout", "Canonical Layouts", "Matrix
Descriptor Format"): 8-row x 16-byte core matrices, K-major or MN-major, with
no swizzle or a 32/64/128-byte swizzle, and two strides, the leading-dimension
byte offset (LBO) and the stride-dimension byte offset (SBO).

This module takes any tile layout as a plain table, ``offsets[mn, k]`` = byte
offset of element ``(mn, k)`` from the buffer base, so every layout kind in
tilekit can be asked the same question without this module knowing about it.

Model (bytes; ``T`` = elements per 16 bytes, ``w`` = swizzle width in 16-byte
chunks, ``span = 16 w``), one canonical *unswizzled* address ``L(mn, k)``:

* K-major, no swizzle: ``16 i + SBO a + LBO b + (kb mod 16)``, ``mn = 8a + i``,
  ``kb = k * elem = 16 b + ...``
* K-major, swizzled: ``span i + SBO a + kb`` with ``kb < span`` (LBO unused)
* MN-major, no swizzle: ``(mb mod 16) + SBO c + 16 i + LBO b``, ``mb = mn * elem
  = 16 c + ...``, ``k = 8 b + i``
* MN-major, swizzled: ``(mb mod span) + LBO c + span i + SBO b``, ``c = mb div span``

and the hardware reads element ``(mn, k)`` at ``swizzle(start + L(mn, k))``,
where the swizzle XORs address bits ``[4, 4 + log2 w)`` with bits ``[7, 7 +
log2 w)`` of the *shared-memory address* (CuTe's ``Swizzle<log2 w, 4, 3>`` on
bytes), less the descriptor's base offset. The pattern repeats every ``8 *
span`` bytes. A buffer swizzled relative to its own base ``P`` is read correctly
with base offset 0 when ``P`` is on that repeat, and otherwise with base offset
``(P >> 7) & 7`` (the PTX ISA formula) when ``P`` is 128-byte aligned.

Verified on an H100 (driver 580, sm_90a): the address every element is read
from was decoded from real ``wgmma.m64nNk16.bf16`` results for both majors, all
four swizzles, N in {64, 256} and dense and padded LBO/SBO, and agreed with this
model everywhere; products through descriptors from :func:`wgmma_admissibility`
matched numpy for 1,773 operand pairs (N in {8, 24, 64, 256}, K slices and MN
slices of larger tiles, buffers 1024- and 2048-aligned), and relative-swizzled
buffers at every 128-byte phase read correctly with the PTX base-offset formula.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout.admissibility import (
    Alternative,
    AlternativeKind,
    Cost,
    Rule,
    Verdict,
    Violation,
    ceil_div,
    rank_alternatives,
    xor_swizzle,
)
from tilekit.layout.shared import Major, Operand, SwizzleMode

WGMMA_ARCH = 90  # sm_90a
SHARED_WINDOW = 1 << 18  # matrix-descriptor-encode keeps 18 address bits
FIELD_MASK = 0x3FFF
WARP = 32
WARPS_PER_WARPGROUP = 4


class WgmmaSwizzle(enum.Enum):
    """Descriptor swizzle modes; values are the descriptor's bits 62-63."""

    NONE = 0
    B128 = 1
    B64 = 2
    B32 = 3

    @staticmethod
    def from_mode(mode: SwizzleMode) -> WgmmaSwizzle:
        """The descriptor code of a swizzle mode (the same XOR pattern, another encoding)."""
        return {SwizzleMode.NONE: WgmmaSwizzle.NONE, SwizzleMode.B32: WgmmaSwizzle.B32,
                SwizzleMode.B64: WgmmaSwizzle.B64, SwizzleMode.B128: WgmmaSwizzle.B128}[mode]

    @property
    def mode(self) -> SwizzleMode:
        return SwizzleMode(0 if self is WgmmaSwizzle.NONE else self.span_bytes)

    @property
    def chunks(self) -> int:
        """Swizzle width ``w`` in 16-byte chunks (1 without swizzle)."""
        return {WgmmaSwizzle.NONE: 1, WgmmaSwizzle.B32: 2, WgmmaSwizzle.B64: 4,
                WgmmaSwizzle.B128: 8}[self]

    @property
    def span_bytes(self) -> int:
        return 16 * self.chunks

    @property
    def repeat_bytes(self) -> int:
        """Bytes after which the XOR pattern repeats (8 rows of the span)."""
        return 8 * self.span_bytes

    def apply(self, address: np.ndarray | int, base_offset: int = 0) -> np.ndarray | int:
        """XOR the 16-byte chunk bits with the row bits of the address (an involution).

        ``base_offset`` shifts the row phase back by that many 128-byte rows, as the
        descriptor's base-offset field does (measured on an H100: the hardware reads
        ``((addr >> 7) - base_offset)``, a subtraction, not an XOR).
        """
        return xor_swizzle(address, self.chunks, base_offset)


# The canonical search order: widest swizzle first (fewest bank conflicts), K-major first.
_SWIZZLE_ORDER = (WgmmaSwizzle.B128, WgmmaSwizzle.B64, WgmmaSwizzle.B32, WgmmaSwizzle.NONE)


class WgmmaType(enum.Enum):
    """Operand element types of ``wgmma.mma_async``: (element bytes, instruction K)."""

    F16 = (2, 16)
    BF16 = (2, 16)
    TF32 = (4, 8)
    E4M3 = (1, 32)
    E5M2 = (1, 32)
    S8 = (1, 32)
    U8 = (1, 32)

    def __init__(self, elem_bytes: int, k: int) -> None:
        self.elem_bytes = elem_bytes
        self.k = k

    @property
    def allows_mn_major(self) -> bool:
        """imm-trans exists only for .f16/.bf16 operands (PTX ISA, wgmma.mma_async)."""
        return self.elem_bytes == 2

    def valid_n(self, n: int) -> bool:
        if self in (WgmmaType.S8, WgmmaType.U8):
            return n in (8, 16, 24) or (n % 16 == 0 and 32 <= n <= 256)
        return n % 8 == 0 and 8 <= n <= 256


@dataclass(frozen=True)
class WgmmaOperandSpec:
    """Which operand of which ``wgmma.m64nNkK`` a tile feeds; fixes its (MN, K) shape."""

    operand: Operand
    dtype: WgmmaType
    n: int

    @property
    def shape(self) -> tuple[int, int]:
        return (64 if self.operand is Operand.A else self.n, self.dtype.k)


@dataclass(frozen=True)
class WgmmaDescriptor:
    """A shared-memory matrix descriptor, in bytes, plus the instruction's major bit."""

    start_address: int
    lbo: int
    sbo: int
    base_offset: int
    swizzle: WgmmaSwizzle
    major: Major

    @property
    def trans_bit(self) -> int:
        """The ``imm-trans-a`` / ``imm-trans-b`` immediate of the instruction."""
        return self.major.value

    def encode(self) -> int:
        return encode_descriptor(self.start_address, self.lbo, self.sbo, self.base_offset,
                                 self.swizzle)


@dataclass(frozen=True)
class DescriptorWord:
    """The fields of a decoded 64-bit descriptor (bytes; start keeps 18 address bits)."""

    start_address: int
    lbo: int
    sbo: int
    base_offset: int
    swizzle: WgmmaSwizzle


_RESERVED_BITS = ((1 << 64) - 1) ^ (
    FIELD_MASK | FIELD_MASK << 16 | FIELD_MASK << 32 | 0x7 << 49 | 0x3 << 62
)


def _field(value: int, what: str) -> int:
    if value < 0 or value % 16 or value >= SHARED_WINDOW:
        raise LayoutError(
            f"{what} = {value} is not encodable: it must be a multiple of 16 below 2^18",
            hints=[f"{what} is stored as (value & 0x3FFFF) >> 4 in 14 bits"],
        )
    return value >> 4


def encode_descriptor(
    start_address: int, lbo: int, sbo: int, base_offset: int, swizzle: WgmmaSwizzle
) -> int:
    """The 64-bit descriptor; refuses values the 14-bit fields would silently truncate."""
    if not 0 <= base_offset <= 7:
        raise LayoutError(f"base offset {base_offset} does not fit 3 bits")
    return (
        _field(start_address, "start address")
        | _field(lbo, "leading-dimension byte offset") << 16
        | _field(sbo, "stride-dimension byte offset") << 32
        | base_offset << 49
        | swizzle.value << 62
    )


def decode_descriptor(word: int) -> DescriptorWord:
    """The inverse of :func:`encode_descriptor`; reserved bits must be zero."""
    if not 0 <= word < 1 << 64:
        raise LayoutError(f"descriptor {word:#x} is not a 64-bit value")
    if word & _RESERVED_BITS:
        raise LayoutError(f"descriptor {word:#018x} sets reserved bits {word & _RESERVED_BITS:#x}")
    return DescriptorWord(
        start_address=(word & FIELD_MASK) << 4,
        lbo=(word >> 16 & FIELD_MASK) << 4,
        sbo=(word >> 32 & FIELD_MASK) << 4,
        base_offset=word >> 49 & 0x7,
        swizzle=WgmmaSwizzle(word >> 62 & 0x3),
    )


# ---------------------------------------------------------------------------------------------
# Canonical layouts
# ---------------------------------------------------------------------------------------------


def _shape_problem(major: Major, swizzle: WgmmaSwizzle, mn: int, k: int, elem: int) -> str | None:
    """Why (mn, k) cannot be one canonical operand of this major and swizzle, or None."""
    if elem not in (1, 2, 4):
        return f"{elem}-byte elements are not a wgmma operand type"
    if mn < 1 or k < 1:
        return f"empty tile {mn}x{k}"
    if major is Major.K:
        if mn % 8:
            return f"MN = {mn} is not a multiple of the 8 core-matrix rows"
        if (k * elem) % 16:
            return f"K = {k} elements ({k * elem} bytes) is not a whole number of 16-byte rows"
        if swizzle is not WgmmaSwizzle.NONE and k * elem > swizzle.span_bytes:
            return (f"K = {k * elem} bytes exceeds the {swizzle.span_bytes}-byte swizzle span; "
                    "one descriptor covers one span of K")
    else:
        if k % 8:
            return f"K = {k} is not a multiple of the 8 core-matrix rows"
        granule = swizzle.span_bytes
        if (mn * elem) % granule:
            return (f"MN = {mn} elements ({mn * elem} bytes) is not a whole number of "
                    f"{granule}-byte {'swizzle atoms' if granule > 16 else 'rows'}")
    return None


def _unswizzled(
    major: Major, swizzle: WgmmaSwizzle, mn: int, k: int, elem: int, lbo: int, sbo: int
) -> np.ndarray:
    """The canonical address L(mn, k) before swizzling, relative to the start address."""
    m_idx = np.arange(mn, dtype=np.int64)[:, None]
    k_idx = np.arange(k, dtype=np.int64)[None, :]
    span = swizzle.span_bytes
    if major is Major.K:
        i, a = m_idx % 8, m_idx // 8
        kb = k_idx * elem
        if swizzle is WgmmaSwizzle.NONE:
            return 16 * i + sbo * a + lbo * (kb // 16) + kb % 16
        return span * i + sbo * a + kb
    i, b = k_idx % 8, k_idx // 8
    mb = m_idx * elem
    if swizzle is WgmmaSwizzle.NONE:
        return mb % 16 + sbo * (mb // 16) + 16 * i + lbo * b
    return mb % span + lbo * (mb // span) + span * i + sbo * b


def canonical_layout(
    major: Major, swizzle: WgmmaSwizzle, mn: int, k: int, elem_bytes: int, lbo: int, sbo: int
) -> np.ndarray:
    """``offsets[mn, k]``: byte offsets of the canonical layout from a repeat-aligned base.

    The inverse of :func:`wgmma_admissibility` for a buffer whose base is aligned
    to ``swizzle.repeat_bytes``: detecting the result yields these parameters
    (LBO of swizzled K-major layouts is unused and reported as 16).
    """
    problem = _shape_problem(major, swizzle, mn, k, elem_bytes)
    if problem is not None:
        raise LayoutError(f"no canonical {major.name}-major {swizzle.name} layout: {problem}")
    for name, value in (("LBO", lbo), ("SBO", sbo)):
        if value < 0 or value % 16:
            raise LayoutError(f"{name} = {value} must be a non-negative multiple of 16 bytes")
    return np.asarray(swizzle.apply(_unswizzled(major, swizzle, mn, k, elem_bytes, lbo, sbo)))


# ---------------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fit:
    """One candidate's reading of a tile: the descriptor it implies and what breaks."""

    major: Major
    swizzle: WgmmaSwizzle
    descriptor: WgmmaDescriptor | None
    violations: tuple[Violation, ...]
    mismatches: int  # elements off the canonical grid (tile size when not comparable)


def _mode(values: np.ndarray) -> int | None:
    """The most frequent value (smallest on ties); None for no values."""
    if values.size == 0:
        return None
    vals, counts = np.unique(values, return_counts=True)
    return int(vals[int(np.argmax(counts))])


def _extent(u: np.ndarray, elem: int) -> int:
    return int(-(-(int(u.max()) + elem) // 16) * 16) if u.size else 16


def _fit(
    offsets: np.ndarray, elem: int, base: int, major: Major, swizzle: WgmmaSwizzle,
    base_offset: int = 0,
) -> _Fit:
    """Read start, LBO and SBO off the tile as this candidate would, then compare everywhere."""
    mn, k = offsets.shape
    viol: list[Violation] = []

    def bad(rule: Rule, fld: str, value: object, limit: object, message: str) -> None:
        viol.append(Violation(rule, fld, value, limit, message))

    tag = f"{major.name}-major {swizzle.name}"
    problem = _shape_problem(major, swizzle, mn, k, elem)
    if problem is not None:
        bad(Rule.WGMMA_SHAPE, "offsets.shape", (mn, k), tag, f"not a {tag} operand: {problem}")
        return _Fit(major, swizzle, None, tuple(viol), offsets.size)
    # Unswizzled addresses: start + L(mn, k) exactly when the tile is canonical.
    raw = np.asarray(swizzle.apply(offsets.astype(np.int64) + base, base_offset))
    t = 16 // elem
    span = swizzle.span_bytes

    # Core matrices: 16 contiguous bytes per row along the major dimension.
    along = raw if major is Major.K else raw.T
    chunks = along.reshape(along.shape[0], -1, t)
    good_row = np.all(chunks - chunks[:, :, :1] == np.arange(t) * elem, axis=2)
    if not good_row.all():
        r, c = (int(x) for x in np.argwhere(~good_row)[0])
        line, chunk = (r, c) if major is Major.K else (c, r)
        bad(Rule.WGMMA_CORE_MATRIX, f"core matrix (mn {line // 8 * 8}.., k chunk {chunk})",
            (line, chunk), "16 contiguous bytes",
            f"{tag}: the 16-byte row at mn={line}, k chunk {chunk} is not contiguous, so core "
            f"matrix (mn group {line // 8}, k chunk {chunk}) is not a core matrix")
    # Strides and start by majority vote over every pair they relate, so that one displaced
    # row is reported as displaced instead of corrupting the fit. Unobservable strides (one
    # group only) take the tile's extent.
    if major is Major.K:
        sbo_obs = _mode(raw[8:, :] - raw[:-8, :])
        lbo_obs = _mode(raw[:, t:] - raw[:, :-t]) if swizzle is WgmmaSwizzle.NONE else None
    elif swizzle is WgmmaSwizzle.NONE:
        sbo_obs = _mode(raw[t:, :] - raw[:-t, :])
        lbo_obs = _mode(raw[:, 8:] - raw[:, :-8])
    else:
        per_atom = span // elem
        lbo_obs = _mode(raw[per_atom:, :] - raw[:-per_atom, :])
        sbo_obs = _mode(raw[:, 8:] - raw[:, :-8])
    probe = _unswizzled(major, swizzle, mn, k, elem, lbo_obs or 0, sbo_obs or 0)
    start = _mode(raw - probe)
    assert start is not None
    u = raw - start
    extent = _extent(u, elem)
    if major is Major.K and swizzle is not WgmmaSwizzle.NONE:
        lbo = 16  # "not used, assumed to be 1"
    else:
        lbo = extent if lbo_obs is None else lbo_obs
    sbo = extent if sbo_obs is None else sbo_obs
    for name, value in (("LBO", lbo), ("SBO", sbo)):
        if value < 0 or value >= SHARED_WINDOW:
            bad(Rule.WGMMA_STRIDE_RANGE, name, value, SHARED_WINDOW,
                f"{tag}: {name} = {value} bytes does not fit the descriptor's 14-bit field")
        elif value % 16:
            bad(Rule.WGMMA_STRIDE_ALIGN, name, value, 16,
                f"{tag}: {name} = {value} bytes is not a multiple of 16")
    if start % 16:
        bad(Rule.WGMMA_START_ALIGN, "start_address", start, 16,
            f"matrix start address {start:#x} is not 16-byte aligned")
    elif start < 0 or start + extent > SHARED_WINDOW:
        bad(Rule.WGMMA_ADDRESS_RANGE, "start_address", start, SHARED_WINDOW,
            f"matrix at {start:#x}..{start + extent:#x} leaves the 256 KiB shared window")
    expected = _unswizzled(major, swizzle, mn, k, elem, lbo, sbo)
    off = u != expected
    mismatches = int(off.sum())
    if mismatches and not any(v.rule is Rule.WGMMA_CORE_MATRIX for v in viol):
        r, c = (int(x) for x in np.argwhere(off)[0])
        bad(Rule.WGMMA_NOT_CANONICAL, f"element ({r}, {c})", int(u[r, c]), int(expected[r, c]),
            f"{tag} with LBO={lbo}, SBO={sbo}: element ({r}, {c}) of core matrix "
            f"(mn group {r // 8}, k group {c // 8 if major is Major.MN else c * elem // 16}) is "
            f"at +{int(u[r, c])} bytes, the canonical layout puts it at +{int(expected[r, c])}")
    desc = None
    if not viol:
        desc = WgmmaDescriptor(start, lbo, sbo, base_offset, swizzle, major)
    return _Fit(major, swizzle, desc, tuple(viol), mismatches)


def _candidates(
    major: Major | None, swizzle: WgmmaSwizzle | None
) -> list[tuple[Major, WgmmaSwizzle]]:
    majors = [major] if major is not None else [Major.K, Major.MN]
    swizzles = [swizzle] if swizzle is not None else list(_SWIZZLE_ORDER)
    return [(m, s) for m in majors for s in swizzles]


def _phases(swizzle: WgmmaSwizzle, base_address: int) -> list[int]:
    """Base offsets worth trying: 0, the buffer's own (PTX formula), then every other phase."""
    if swizzle is WgmmaSwizzle.NONE:
        return [0]
    order = [0]
    if base_address % 128 == 0:
        own = (base_address >> 7) & 7
        if own % swizzle.chunks:
            order.append(own)
    seen = {p % swizzle.chunks for p in order}
    order += [p for p in range(1, swizzle.chunks) if p not in seen]
    return order


def wgmma_admissibility(
    offsets: np.ndarray,
    *,
    elem_bytes: int,
    base_address: int,
    spec: WgmmaOperandSpec | None = None,
    major: Major | None = None,
    swizzle: WgmmaSwizzle | None = None,
    allow_base_offset: bool = True,
    arch: int = WGMMA_ARCH,
) -> Verdict[WgmmaDescriptor]:
    """Is ``offsets`` (bytes from the buffer at ``base_address``) a canonical wgmma layout?

    Tries the requested (major, swizzle), or all of them in a fixed order (K
    before MN, widest swizzle first), each first with base offset 0, and admits
    the first exact match. A pattern that does not start on its repeat is
    admitted with a non-zero base offset unless ``allow_base_offset`` is False.
    A refusal reports the closest candidate's violations.
    """
    offsets = np.asarray(offsets)
    if offsets.ndim != 2 or not np.issubdtype(offsets.dtype, np.integer):
        raise LayoutError(f"offsets must be a 2-D integer array [mn, k], got {offsets.shape} "
                          f"{offsets.dtype}")
    head: list[Violation] = []
    if arch != WGMMA_ARCH:
        head.append(Violation(Rule.WGMMA_ARCH, "arch", arch, WGMMA_ARCH,
                              f"wgmma exists on sm_90a only, target is sm_{arch}"))
    if spec is not None:
        if spec.dtype.elem_bytes != elem_bytes:
            head.append(Violation(
                Rule.WGMMA_DTYPE, "elem_bytes", elem_bytes, spec.dtype.elem_bytes,
                f"{spec.dtype.name} is {spec.dtype.elem_bytes} bytes per element"))
        if not spec.dtype.valid_n(spec.n):
            head.append(Violation(Rule.WGMMA_SHAPE, "n", spec.n, spec.dtype.name,
                                  f"N = {spec.n} is not a wgmma shape for {spec.dtype.name}"))
        if offsets.shape != spec.shape:
            head.append(Violation(Rule.WGMMA_SHAPE, "offsets.shape", offsets.shape, spec.shape,
                                  f"operand {spec.operand.name} of m64n{spec.n}k{spec.dtype.k} is "
                                  f"{spec.shape[0]}x{spec.shape[1]}, the tile is "
                                  f"{offsets.shape[0]}x{offsets.shape[1]}"))
    fits: list[_Fit] = []
    needs_offset: _Fit | None = None
    for m, s in _candidates(major, swizzle):
        if m is Major.MN and elem_bytes != 2:
            if major is Major.MN:
                head.append(Violation(Rule.WGMMA_DTYPE, "major", m, Major.K,
                                      "MN-major (transposed) operands exist only for f16/bf16"))
            continue
        for phase in _phases(s, base_address):
            fit = _fit(offsets, elem_bytes, base_address, m, s, phase)
            if phase == 0:
                fits.append(fit)
            if fit.descriptor is None:
                continue
            if phase == 0 or allow_base_offset:
                if not head:
                    return Verdict.admit(fit.descriptor)
                break
            needs_offset = needs_offset or fit
    if needs_offset is not None and needs_offset.descriptor is not None:
        d = needs_offset.descriptor
        repeat = d.swizzle.repeat_bytes
        return Verdict.reject(head + [Violation(
            Rule.WGMMA_SWIZZLE_BASE, "base_offset", d.base_offset, 0,
            f"the {d.major.name}-major {d.swizzle.name} pattern does not start on a "
            f"{repeat}-byte boundary (buffer at {base_address:#x}); it needs descriptor base "
            f"offset {d.base_offset}, which the caller does not allow")])
    if not fits:
        return Verdict.reject(head)
    # Would the tile be canonical if its buffer started on a pattern boundary?
    for f in fits:
        if f.swizzle is WgmmaSwizzle.NONE or base_address % 128 == 0:
            continue
        rel = _fit(offsets, elem_bytes, base_address % 16, f.major, f.swizzle)
        if rel.descriptor is not None:
            return Verdict.reject(head + [Violation(
                Rule.WGMMA_SWIZZLE_BASE, "base_address", base_address, 128,
                f"the tile is a {f.major.name}-major {f.swizzle.name} layout relative to its "
                f"buffer, but the buffer at {base_address:#x} is not 128-byte aligned: the "
                "hardware swizzles on address bits and the base offset only shifts whole "
                "128-byte rows")])
    closest = min(fits, key=lambda f: (f.mismatches, len(f.violations)))
    return Verdict.reject(head + list(closest.violations))


# ---------------------------------------------------------------------------------------------
# Alternatives
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CanonicalChoice:
    """A canonical layout to produce instead, and the descriptor it would get."""

    major: Major
    swizzle: WgmmaSwizzle
    lbo: int
    sbo: int
    base_address: int

    def offsets(self, mn: int, k: int, elem_bytes: int) -> np.ndarray:
        return canonical_layout(self.major, self.swizzle, mn, k, elem_bytes, self.lbo, self.sbo)


@dataclass(frozen=True)
class RegisterOperandPlan:
    """Load A into registers (ldmatrix for 16-byte rows) and use wgmma's register-A form."""

    vector_bytes: int
    issues_per_tile: int


def dense_strides(
    major: Major, swizzle: WgmmaSwizzle, mn: int, k: int, elem: int
) -> tuple[int, int]:
    """(LBO, SBO) of the densely packed canonical layout, core matrices K-fastest."""
    if major is Major.K:
        if swizzle is WgmmaSwizzle.NONE:
            k_chunks = k * elem // 16
            return 128, 128 * k_chunks
        return 16, 8 * swizzle.span_bytes
    if swizzle is WgmmaSwizzle.NONE:
        mn_chunks = mn * elem // 16
        return 128 * mn_chunks, 128
    atoms = mn * elem // swizzle.span_bytes
    return swizzle.repeat_bytes, swizzle.repeat_bytes * atoms


def _widest_rows(offsets: np.ndarray, elem: int, base: int) -> int:
    """16 when every 16-byte run along K is contiguous and aligned (ldmatrix-able), else elem."""
    mn, k = offsets.shape
    t = 16 // elem
    if (k * elem) % 16 == 0:
        phys = offsets.astype(np.int64) + base
        chunks = phys.reshape(mn, -1, t)
        contiguous = np.all(chunks - chunks[:, :, :1] == np.arange(t) * elem)
        if contiguous and np.all(chunks[:, :, 0] % 16 == 0):
            return 16
    return elem


def wgmma_alternatives(
    offsets: np.ndarray,
    *,
    elem_bytes: int,
    base_address: int,
    spec: WgmmaOperandSpec,
    allow_base_offset: bool = True,
    arch: int = WGMMA_ARCH,
) -> tuple[Alternative[CanonicalChoice | RegisterOperandPlan], ...]:
    """Ranked ways to feed an inadmissible tile to wgmma (empty when it is admissible).

    Costs count shared-memory bytes and warp instruction issues per operand tile.
    """
    offsets = np.asarray(offsets)
    verdict = wgmma_admissibility(offsets, elem_bytes=elem_bytes, base_address=base_address,
                                  spec=spec, allow_base_offset=allow_base_offset, arch=arch)
    if verdict.admissible or arch != WGMMA_ARCH:
        return ()
    mn, k = spec.shape
    tile_bytes = mn * k * elem_bytes
    alts: list[Alternative[CanonicalChoice | RegisterOperandPlan]] = []
    if Rule.WGMMA_SWIZZLE_BASE in verdict.rules:
        repeat = 1024
        aligned = ceil_div(base_address, repeat) * repeat
        rel = wgmma_admissibility(offsets, elem_bytes=elem_bytes, base_address=aligned, spec=spec,
                                  allow_base_offset=False)
        if rel.params is not None:
            p = rel.params
            alts.append(Alternative(
                AlternativeKind.REALIGN_BUFFER,
                CanonicalChoice(p.major, p.swizzle, p.lbo, p.sbo, aligned),
                Cost(0, 0, 0),
                f"move the buffer from {base_address:#x} to {aligned:#x} (on every swizzle "
                f"repeat; {aligned - base_address} bytes of padding)"))
    aligned_base = ceil_div(base_address, 1024) * 1024
    majors = [Major.K] + ([Major.MN] if spec.dtype.allows_mn_major else [])
    best_repack: CanonicalChoice | None = None
    for m in majors:
        for s in _SWIZZLE_ORDER:
            if _shape_problem(m, s, mn, k, elem_bytes) is not None:
                continue
            lbo, sbo = dense_strides(m, s, mn, k, elem_bytes)
            choice = CanonicalChoice(m, s, lbo, sbo, aligned_base)
            if best_repack is None:
                best_repack = choice
            alts.append(Alternative(
                AlternativeKind.DIFFERENT_SWIZZLE, choice, Cost(0, 0, 0),
                f"have the producer write the {m.name}-major {s.name} canonical layout "
                f"(LBO={lbo}, SBO={sbo}) at {aligned_base:#x}",
                changes_shared_layout=True))
    width = _widest_rows(offsets, elem_bytes, base_address)
    copies = ceil_div(tile_bytes, WARP * width)
    if best_repack is not None:
        alts.append(Alternative(
            AlternativeKind.REPACK, best_repack,
            Cost(2 * tile_bytes, 2 * copies, 2 * copies),
            f"copy the tile shared-to-shared into the {best_repack.major.name}-major "
            f"{best_repack.swizzle.name} layout ({width}-byte lanes, then "
            "fence.proxy.async and a barrier)"))
    if spec.operand is Operand.A:
        issues = max(copies, WARPS_PER_WARPGROUP)
        alts.append(Alternative(
            AlternativeKind.REGISTER_OPERAND, RegisterOperandPlan(width, issues),
            Cost(tile_bytes, issues, issues),
            f"load A into registers ({'ldmatrix' if width == 16 else f'{width}-byte ld.shared'}) "
            "and issue wgmma with A from registers"))
    return rank_alternatives(alts)
