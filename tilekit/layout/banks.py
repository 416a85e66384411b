"""Shared-memory bank models: how many wavefronts one warp (wave) access costs, per target.

Shared memory (LDS on AMD) is split into ``banks`` banks of ``bank_bytes``
bytes; word ``w = addr // bank_bytes`` lives in bank ``w % banks``. The
hardware does not serve a whole warp at once: it splits an instruction's
lanes into **phases** and serves each phase in as many wavefronts as its
most loaded bank holds *distinct words* (lanes reading the same word are
served together: the broadcast rule). An access of ``w`` bytes occupies
``w / bank_bytes`` consecutive banks. Which lanes share a phase is a fact of
the target and the instruction, so this module keeps it as data:

* NVIDIA (sm_80, sm_90): 32 banks x 4 B, warp 32; an access of 16 B is
  served in 4 phases of 8 lanes (quarter warps), 8 B in 2 phases of 16,
  4 B or less in one phase of 32 (NVIDIA GTC 2022 S41723, "How to
  understand and optimize shared memory accesses using Nsight Compute").
  ``ldmatrix`` / ``stmatrix`` lanes each supply one 16-byte row, so they
  follow the 16-byte rule.
* AMD gfx942 (CDNA3), wave64, 32 banks x 4 B: ``ds_write_b128`` in 8 phases
  of 8 contiguous lanes; ``ds_read_b128`` in 8 phases of 8 lanes that are
  *not* contiguous, {0-3, 20-23}, {4-7, 16-19}, ... (ROCm blog "Avoiding LDS
  bank conflicts on AMD GPUs using CK-Tile", 2025; CK docs "Understanding
  AMD GPU LDS and bank conflicts"); 8-byte accesses in 4 phases of 16
  lanes, 4 bytes or less in 2 phases of 32.
* AMD gfx950 (CDNA4): reads see 64 banks; ``ds_read_b128`` in 4 phases of
  16 lanes, each the union of two gfx942 groups, {0-3, 12-15, 20-27}, ...,
  and ``ds_read_b64`` in 2 phases of 32, as measured on an MI355X by the
  HipKittens phase solver (analysis/paper_experiments/phases); its
  ``ds_write_b64`` measured 4 phases of 16 contiguous lanes over 32 banks.
  The other gfx950 entries are inferred from those (see ``GFX950``).

``CORE_MATRIX`` models what wgmma (and TMA) reads through a shared-memory
descriptor: not lanes, but 8 rows of 16 bytes (one core matrix) per
wavefront. NVIDIA does not document that path; the 32/64/128-byte swizzle
modes exist so that those 8 rows hit 8 distinct 16-byte bank groups, which
is what this model checks.

``count_wavefronts`` is the definition: one instruction, given each lane's
byte address. ``count_layout_transactions`` derives the addresses of every
instruction a warp issues from a distributed layout and a shared layout.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout.distributed import MatrixCount
from tilekit.layout.linear import (
    LANE,
    OFFSET,
    REGISTER,
    WARP,
    LinearLayout,
    log2_exact,
    standard_out_dims,
)

__all__ = [
    "AMD_GFX942",
    "AMD_GFX950",
    "Access",
    "AccessKind",
    "NVIDIA_SM80",
    "NVIDIA_SM90",
    "PhaseRule",
    "TARGETS",
    "Target",
    "Transactions",
    "Vendor",
    "core_matrix_access",
    "count_layout_transactions",
    "count_wavefronts",
    "count_wavefronts_each",
    "ldmatrix_access",
    "phase_basis",
    "target",
    "vector_registers",
]


class Vendor(enum.Enum):
    NVIDIA = enum.auto()
    AMD = enum.auto()


class AccessKind(enum.Enum):
    """What kind of instruction touches shared memory: it decides the lane phases."""

    READ = enum.auto()  # ld.shared / ds_read_bN
    WRITE = enum.auto()  # st.shared / ds_write_bN
    LDMATRIX = enum.auto()  # each lane supplies the address of one 16-byte row
    STMATRIX = enum.auto()
    CORE_MATRIX = enum.auto()  # wgmma descriptor reads: one 8 x 16-byte core matrix per wavefront

    @property
    def fixed_rows(self) -> bool:
        """Whether each lane moves exactly one 16-byte row whose element order is fixed."""
        return self in (AccessKind.LDMATRIX, AccessKind.STMATRIX, AccessKind.CORE_MATRIX)


_WIDTHS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Access:
    """One warp-wide instruction: its kind and the bytes each lane moves.

    ``lanes`` limits the participating lanes to ``0 .. lanes-1`` (``ldmatrix``
    .x1 and .x2 read the addresses of 8 and 16 lanes only); None means all.
    """

    kind: AccessKind
    width_bytes: int
    lanes: int | None = None

    def __post_init__(self) -> None:
        if self.width_bytes not in _WIDTHS:
            raise LayoutError(
                f"an access moves 1, 2, 4, 8 or 16 bytes per lane, not {self.width_bytes}"
            )
        if self.kind.fixed_rows and self.width_bytes != 16:
            raise LayoutError(f"{self.kind.name} moves 16-byte rows, not {self.width_bytes} bytes")
        if self.lanes is not None and self.lanes < 1:
            raise LayoutError(f"an access needs at least one lane, got lanes={self.lanes}")

    @classmethod
    def ldmatrix(cls, count: MatrixCount = MatrixCount.X4) -> Access:
        """``ldmatrix.x1/.x2/.x4``: 8 row addresses per matrix."""
        return cls(AccessKind.LDMATRIX, 16, 8 * count.value)

    @classmethod
    def stmatrix(cls, count: MatrixCount = MatrixCount.X4) -> Access:
        return cls(AccessKind.STMATRIX, 16, 8 * count.value)


Phases = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class PhaseRule:
    """How the lanes of ``kinds`` accesses of ``width_bytes`` split into phases.

    ``banks`` overrides the target's bank count for these accesses (gfx950
    reads see 64 banks, its writes 32).
    """

    kinds: frozenset[AccessKind]
    width_bytes: int
    phases: Phases
    banks: int | None = None


@dataclass(frozen=True)
class Target:
    """A shared-memory bank model: bank geometry, warp size and the phase rules."""

    name: str
    vendor: Vendor
    lanes: int
    banks: int
    bank_bytes: int
    rules: tuple[PhaseRule, ...]

    def __post_init__(self) -> None:
        log2_exact(self.lanes, "lanes of a warp")
        log2_exact(self.banks, "bank count")
        log2_exact(self.bank_bytes, "bank width")
        seen: set[tuple[AccessKind, int]] = set()
        for rule in self.rules:
            lanes = sorted(lane for phase in rule.phases for lane in phase)
            if lanes != list(range(self.lanes)):
                raise LayoutError(
                    f"{self.name}: the phases of {sorted(k.name for k in rule.kinds)} "
                    f"{rule.width_bytes}-byte accesses do not split lanes 0..{self.lanes - 1} "
                    "exactly once each"
                )
            for kind in rule.kinds:
                key = (kind, rule.width_bytes)
                if key in seen:
                    raise LayoutError(f"{self.name}: two phase rules for {kind.name} {key[1]} B")
                seen.add(key)

    @cached_property
    def _rule_index(self) -> dict[tuple[AccessKind, int], PhaseRule]:
        return {(kind, rule.width_bytes): rule for rule in self.rules for kind in rule.kinds}

    def _rule(self, access: Access) -> PhaseRule:
        rule = self._rule_index.get((access.kind, access.width_bytes))
        if rule is None:
            known = sorted({k.name for k, _ in self._rule_index})
            raise LayoutError(
                f"{self.name} has no {access.width_bytes}-byte {access.kind.name} access",
                hints=[f"{self.name} models {', '.join(known)} accesses"],
            )
        return rule

    def supports(self, access: Access) -> bool:
        return (access.kind, access.width_bytes) in self._rule_index

    def bank_count(self, access: Access) -> int:
        """The number of banks ``access`` is spread over (per rule, else the target's)."""
        return self._rule(access).banks or self.banks

    def phases(self, access: Access) -> Phases:
        """The lane groups served one after another, restricted to the participating lanes."""
        phases = self._rule(access).phases
        if access.lanes is None:
            return phases
        if access.lanes > self.lanes:
            raise LayoutError(
                f"{access.lanes} participating lanes, but a {self.name} warp has {self.lanes}"
            )
        kept = (tuple(lane for lane in phase if lane < access.lanes) for phase in phases)
        return tuple(phase for phase in kept if phase)


# --------------------------------------------------------------------------- the targets


def _contiguous(lanes: int, per_phase: int) -> Phases:
    return tuple(tuple(range(start, start + per_phase)) for start in range(0, lanes, per_phase))


def _quads(*starts: int) -> tuple[int, ...]:
    """A phase made of runs of 4 lanes starting at ``starts``."""
    return tuple(lane for start in starts for lane in range(start, start + 4))


_GENERIC = frozenset({AccessKind.READ, AccessKind.WRITE})
_ROWS = frozenset({AccessKind.LDMATRIX, AccessKind.STMATRIX, AccessKind.CORE_MATRIX})
_READ = frozenset({AccessKind.READ})
_WRITE = frozenset({AccessKind.WRITE})


def _nvidia(name: str, row_kinds: frozenset[AccessKind]) -> Target:
    """32 banks x 4 B; 16-byte accesses by quarter warps, 8-byte by half warps."""
    rules = [PhaseRule(_GENERIC, width, _contiguous(32, 32)) for width in (1, 2, 4)]
    rules.append(PhaseRule(_GENERIC, 8, _contiguous(32, 16)))
    rules.append(PhaseRule(_GENERIC | row_kinds, 16, _contiguous(32, 8)))
    return Target(name, Vendor.NVIDIA, 32, 32, 4, tuple(rules))


NVIDIA_SM80 = _nvidia("sm_80", frozenset({AccessKind.LDMATRIX}))
NVIDIA_SM90 = _nvidia("sm_90", _ROWS)

# ds_read_b128 on gfx942 (CK docs / ROCm blog): 8 groups of two runs of 4 lanes.
_GFX942_READ_B128: Phases = (
    _quads(0, 20), _quads(4, 16), _quads(8, 28), _quads(12, 24),
    _quads(32, 52), _quads(36, 48), _quads(40, 60), _quads(44, 56),
)

AMD_GFX942 = Target("gfx942", Vendor.AMD, 64, 32, 4, (
    PhaseRule(_READ, 16, _GFX942_READ_B128),
    PhaseRule(_WRITE, 16, _contiguous(64, 8)),
    PhaseRule(_GENERIC, 8, _contiguous(64, 16)),
    *(PhaseRule(_GENERIC, width, _contiguous(64, 32)) for width in (1, 2, 4)),
))

# gfx950 reads: 64 banks (measured). ds_read_b128 and ds_read_b64 phases measured (HipKittens,
# MI355X); narrower reads inferred (64 lanes x 4 B = 256 B, one phase). Writes: ds_write_b64
# measured (4 x 16 contiguous lanes, 32 banks); ds_write_b128 and narrower writes inferred at the
# same 128 bytes per phase.
_GFX950_READ_B128: Phases = (
    _quads(0, 12, 20, 24), _quads(4, 8, 16, 28),
    _quads(32, 44, 52, 56), _quads(36, 40, 48, 60),
)

AMD_GFX950 = Target("gfx950", Vendor.AMD, 64, 64, 4, (
    PhaseRule(_READ, 16, _GFX950_READ_B128),
    PhaseRule(_READ, 8, _contiguous(64, 32)),
    *(PhaseRule(_READ, width, _contiguous(64, 64)) for width in (1, 2, 4)),
    PhaseRule(_WRITE, 16, _contiguous(64, 8), banks=32),
    PhaseRule(_WRITE, 8, _contiguous(64, 16), banks=32),
    *(PhaseRule(_WRITE, width, _contiguous(64, 32), banks=32) for width in (1, 2, 4)),
))

TARGETS: dict[str, Target] = {t.name: t for t in (NVIDIA_SM80, NVIDIA_SM90, AMD_GFX942, AMD_GFX950)}


def target(name: str) -> Target:
    """The bank model of an architecture by its compiler name (``sm_90``, ``gfx942``...)."""
    try:
        return TARGETS[name]
    except KeyError:
        raise LayoutError(
            f"no shared-memory bank model for {name!r}",
            hints=[f"known targets: {', '.join(sorted(TARGETS))}"],
        ) from None


def phase_basis(phases: Phases) -> tuple[int, ...] | None:
    """A basis of lane-index XORs such that every phase is a coset of its span, or None.

    Every rule above has this shape (even gfx942's {0-3, 20-23} is
    ``span{1, 2, 20}``); it is what lets the swizzle synthesizer count
    conflicts by F2 rank instead of enumerating lanes.
    """
    first = phases[0]
    basis: list[int] = []
    span = {0}
    for lane in first:
        delta = lane ^ first[0]
        if delta not in span:
            basis.append(delta)
            span |= {s ^ delta for s in span}
    for phase in phases:
        if len(phase) != len(span) or {lane ^ phase[0] for lane in phase} != span:
            return None
    return tuple(basis)


# --------------------------------------------------------------------------- one instruction


def _check_addresses(target: Target, access: Access, addresses: np.ndarray) -> None:
    if addresses.shape[-1] != target.lanes:
        raise LayoutError(
            f"{target.name} issues {target.lanes} lanes per instruction, got "
            f"{addresses.shape[-1]} addresses"
        )
    if addresses.size and addresses.min() < 0:
        raise LayoutError("shared-memory addresses are non-negative byte offsets")
    misaligned = addresses % access.width_bytes != 0
    if misaligned.any():
        row, lane = (int(i) for i in np.argwhere(misaligned)[0])
        raise LayoutError(
            f"lane {lane} accesses {access.width_bytes} bytes at byte {int(addresses[row, lane])}, "
            f"which is not {access.width_bytes}-byte aligned",
            hints=["vector accesses must be naturally aligned"],
        )


def _wavefronts(target: Target, access: Access, addresses: np.ndarray) -> np.ndarray:
    """Wavefronts of each row of ``addresses`` (shape ``(rows, lanes)``), by the phase rule."""
    rows = addresses.shape[0]
    banks = target.bank_count(access)
    words_per_lane = max(1, access.width_bytes // target.bank_bytes)
    steps = np.arange(words_per_lane, dtype=np.int64)
    row_ids = np.arange(rows, dtype=np.int64)[:, None]
    total = np.zeros(rows, dtype=np.int64)
    for phase in target.phases(access):
        words = (addresses[:, list(phase)] // target.bank_bytes)[:, :, None] + steps
        words = np.sort(words.reshape(rows, -1), axis=1)
        fresh = np.ones(words.shape, dtype=np.int64)
        fresh[:, 1:] = words[:, 1:] != words[:, :-1]
        slots = (row_ids * banks + words % banks).ravel()
        per_bank = np.bincount(slots, weights=fresh.ravel(), minlength=rows * banks)
        total += per_bank.reshape(rows, banks).max(axis=1).astype(np.int64)
    return total


def count_wavefronts(target: Target, access: Access, addresses: Sequence[int] | np.ndarray) -> int:
    """Wavefronts one instruction costs, given each lane's byte address (lane order).

    Per phase: the largest number of distinct bank words any one bank must
    deliver; summed over phases. Lanes outside ``access.lanes`` are ignored.
    """
    return int(count_wavefronts_each(target, access, np.asarray(addresses).reshape(1, -1))[0])


def count_wavefronts_each(target: Target, access: Access, addresses: np.ndarray) -> np.ndarray:
    """``count_wavefronts`` of many instructions at once: ``addresses[i]`` holds instruction
    ``i``'s byte address per lane; the result holds each one's wavefronts."""
    array = np.asarray(addresses, dtype=np.int64)
    _check_addresses(target, access, array)
    return _wavefronts(target, access, array)


# --------------------------------------------------------------------------- whole layouts


@dataclass(frozen=True)
class Transactions:
    """What one layout-to-shared access costs: every warp, every instruction."""

    vector_bytes: int
    instructions_per_warp: int
    phases: int  # wavefronts one instruction costs at best
    wavefronts_per_warp: tuple[int, ...]

    @property
    def wavefronts(self) -> int:
        return sum(self.wavefronts_per_warp)

    @property
    def ideal(self) -> int:
        """The wavefronts of the same instructions without a single bank conflict."""
        return self.instructions_per_warp * self.phases * len(self.wavefronts_per_warp)

    @property
    def excess(self) -> int:
        return self.wavefronts - self.ideal

    @property
    def conflict_free(self) -> bool:
        return self.excess == 0


def _xor_table(columns: Sequence[int]) -> np.ndarray:
    """The XOR of every subset of ``columns``, indexed by the subset's bit mask."""
    table = np.zeros(1, dtype=np.int64)
    for column in columns:
        table = np.concatenate([table, table ^ column])
    return table


def vector_registers(
    register_offsets: Sequence[int],
    vector_bits: int,
    ordered: bool,
    thread_offsets: Sequence[int] = (),
) -> list[int] | None:
    """Register bits that make each lane's ``2**vector_bits`` elements one aligned block.

    Their offsets must span exactly offsets ``0 .. 2**vector_bits - 1``, and
    ``thread_offsets`` (lane and warp bases) must not move inside a block:
    every lane's block is then aligned and ordered alike, so the vector is
    one instruction and at worst a fixed renaming of registers. With
    ``ordered`` (matrix instructions, whose row order is fixed) register bit
    ``i`` must step offset ``2**i`` and no other register may move inside a
    block either. None if the layout cannot do it.
    """
    mask = (1 << vector_bits) - 1
    if any(offset & mask for offset in thread_offsets):
        return None
    if ordered:
        if len(register_offsets) < vector_bits:
            return None
        inside = register_offsets[:vector_bits] != [1 << i for i in range(vector_bits)]
        rest = any(offset & mask for offset in register_offsets[vector_bits:])
        return None if inside or rest else list(range(vector_bits))
    chosen, pivots = [], {}
    for index, offset in enumerate(register_offsets):
        if not 0 < offset <= mask:
            continue
        while offset and (offset.bit_length() - 1) in pivots:
            offset ^= pivots[offset.bit_length() - 1]
        if offset:
            pivots[offset.bit_length() - 1] = offset
            chosen.append(index)
        if len(chosen) == vector_bits:
            break
    return chosen if len(chosen) == vector_bits else None


def _offsets_of(shared: LinearLayout, layout: LinearLayout) -> LinearLayout:
    """(register, lane, warp) -> element offset: the inverse of ``shared`` after ``layout``."""
    if shared.in_dims != (OFFSET,):
        raise LayoutError(
            f"a shared layout has the single in dim {OFFSET!r}, this one has "
            f"{list(shared.in_dims)}"
        )
    rank = len(shared.out_dims)
    if set(shared.out_dims) != set(standard_out_dims(rank)) or (
        set(layout.out_dims) != set(shared.out_dims)
    ):
        raise LayoutError(
            f"the register layout's tensor dims {list(layout.out_dims)} differ from the shared "
            f"layout's {list(shared.out_dims)}"
        )
    for name in layout.out_dims:
        if layout.out_dim_size(name) != shared.out_dim_size(name):
            raise LayoutError(
                f"{name} has {layout.out_dim_size(name)} elements in the register layout but "
                f"{shared.out_dim_size(name)} in the shared layout",
                hints=["both layouts must describe the same tile"],
            )
    if not shared.is_bijective():
        try:
            shared.invert()
        except LayoutError as error:
            raise LayoutError(
                f"the shared layout has no address function: {error.message}",
                hints=["every tensor element must sit at exactly one offset"],
            ) from error
    return shared.invert_and_compose(layout)


def count_layout_transactions(
    target: Target,
    access: Access,
    shared_layout: LinearLayout,
    reg_layout: LinearLayout,
    elem_bytes: int,
) -> Transactions:
    """Wavefronts of moving a distributed tile to or from shared memory, by enumeration.

    ``reg_layout`` maps (register, lane[, warp]) to the tile; for ``ldmatrix``
    and ``CORE_MATRIX`` pass the *access* layout (``ldmatrix_access``,
    ``core_matrix_access``), whose lanes are the row addresses. Each lane
    moves ``access.width_bytes`` per instruction: the lowest register bits
    that the shared layout keeps contiguous form the vector (for matrix
    instructions, register bits 0.. in order), the other register bits
    enumerate instructions, duplicated registers (zero bases) are skipped.
    Every warp issues its own instructions; the count sums them all.
    """
    log2_exact(elem_bytes, "element size")
    if access.width_bytes % elem_bytes:
        raise LayoutError(
            f"a {access.width_bytes}-byte access cannot move whole {elem_bytes}-byte elements"
        )
    for name in (REGISTER, LANE):
        if not reg_layout.has_in_dim(name):
            raise LayoutError(f"the register layout has no {name!r} dim")
    if reg_layout.in_dim_size(LANE) != target.lanes:
        raise LayoutError(
            f"the register layout has {reg_layout.in_dim_size(LANE)} lanes, a {target.name} "
            f"warp has {target.lanes}",
            hints=["resize_in_dim the lane dim (extra lanes broadcast)"],
        )
    offsets = _offsets_of(shared_layout, reg_layout)
    registers = [
        sum(image) and offsets.basis(REGISTER, i)[0]
        for i, image in enumerate(reg_layout.bases[REGISTER])
    ]
    if not access.kind.fixed_rows:
        registers = [offset for offset in registers if offset]
    lanes = [image[0] for image in offsets.bases[LANE]]
    warps = [image[0] for image in offsets.bases.get(WARP, ())]
    vector_bits = log2_exact(access.width_bytes // elem_bytes, "elements per access")

    def vector(bits: int) -> list[int] | None:
        return vector_registers(registers, bits, access.kind.fixed_rows, lanes + warps)

    chosen = vector(vector_bits)
    if chosen is None:
        best = max((b for b in range(vector_bits + 1) if vector(b) is not None), default=0)
        raise LayoutError(
            f"a {access.width_bytes}-byte {access.kind.name} moves {1 << vector_bits} contiguous "
            f"elements per lane, but this shared layout keeps only {1 << best} of each lane's "
            "elements together",
            hints=[f"use an access of at most {elem_bytes << best} bytes, or a shared layout "
                   "whose lowest offset bits follow the lane's registers"],
        )
    others = [offset for i, offset in enumerate(registers) if i not in chosen and offset]
    block = ~((1 << vector_bits) - 1)
    grid = (
        _xor_table(warps)[:, None, None]
        ^ _xor_table(others)[None, :, None]
        ^ _xor_table(lanes)[None, None, :]
    )
    addresses = (grid & block) * elem_bytes
    n_warps, n_instructions = addresses.shape[:2]
    flat = addresses.reshape(-1, target.lanes)
    _check_addresses(target, access, flat)
    per_instruction = _wavefronts(target, access, flat).reshape(n_warps, n_instructions)
    return Transactions(
        vector_bytes=access.width_bytes,
        instructions_per_warp=n_instructions,
        phases=len(target.phases(access)),
        wavefronts_per_warp=tuple(int(w) for w in per_instruction.sum(axis=1)),
    )


# --------------------------------------------------------------------------- access layouts


def ldmatrix_access(
    fragment: LinearLayout, count: MatrixCount = MatrixCount.X4, trans: bool = False
) -> LinearLayout:
    """The addresses an ``ldmatrix`` / ``stmatrix`` fragment is loaded from, as a layout.

    ``fragment`` is what the lanes hold (``distributed.ldmatrix``, or an mma
    operand whose first register bits are the instruction's: the half, then
    the matrix index). The result maps lanes to the 16-byte *rows* they
    address (lanes 8j..8j+7 give the rows of matrix j) and registers 0-2 to
    the 8 elements of a row, in memory order; higher register bits (repeats)
    and warps are kept. This is the layout ``count_layout_transactions``
    needs for ``Access.ldmatrix``.
    """
    bases = fragment.bases
    if not (fragment.has_in_dim(REGISTER) and fragment.has_in_dim(LANE)):
        raise LayoutError("an ldmatrix fragment has register and lane dims")
    matrix_bits = count.value.bit_length() - 1
    registers, lanes = list(bases[REGISTER]), list(bases[LANE])
    if len(lanes) != 5 or len(registers) < 1 + matrix_bits:
        raise LayoutError(
            f"an ldmatrix {count.name} fragment has 5 lane bits and at least {1 + matrix_bits} "
            f"register bits; this one has {len(lanes)} and {len(registers)}"
        )
    row_elements = [registers[0], lanes[0], lanes[1]]
    row_starts = [lanes[2], lanes[3], lanes[4]]
    if trans:
        row_elements, row_starts = row_starts, row_elements
    zero = tuple(0 for _ in fragment.out_dims)
    new = {
        REGISTER: row_elements + registers[1 + matrix_bits:],
        LANE: row_starts + registers[1:1 + matrix_bits] + [zero] * (2 - matrix_bits),
    }
    if fragment.has_in_dim(WARP):
        new[WARP] = list(bases[WARP])
    if not any(
        all(step[d] == 1 << i and sum(step) == step[d] for i, step in enumerate(row_elements))
        for d in range(len(zero))
    ):
        raise LayoutError(
            "this fragment's rows are not 8 consecutive elements of one dim: not an ldmatrix "
            f"fragment{' with .trans' if trans else ''}",
            hints=["pass trans=True for a .trans fragment"] if not trans else [],
        )
    return LinearLayout(new, list(fragment.out_dim_sizes.items()))


def core_matrix_access(
    shape: Sequence[int], contiguous_dim: int, elem_bytes: int
) -> LinearLayout:
    """A 2-D operand tile read one core matrix (8 rows x 16 bytes) per wavefront, as a layout.

    The model of a wgmma descriptor read (PTX ISA "Shared Memory Matrix
    Layout": operands are tiled in core matrices of 8 rows of 16 contiguous
    bytes). Registers 0.. step the 16 bytes of a row along ``contiguous_dim``;
    lanes 0-2 are the 8 rows (the strided dim), so each 8-lane phase of a
    16-byte ``CORE_MATRIX`` access is one core matrix; lanes 3-4 and the
    remaining registers walk the rest of the tile.
    """
    shape = tuple(shape)
    if len(shape) != 2 or contiguous_dim not in (0, 1):
        raise LayoutError(f"a core-matrix read covers a 2-D tile, got shape {list(shape)}")
    for size in shape:
        log2_exact(size, f"every dim of the operand shape ({list(shape)})")
    per_row = 16 // _row_element_bytes(elem_bytes)
    strided = 1 - contiguous_dim
    if shape[contiguous_dim] < per_row or shape[strided] < 8:
        raise LayoutError(
            f"a {list(shape)} tile of {elem_bytes}-byte elements holds no 8 x 16-byte core matrix"
        )

    def unit(dim: int, value: int) -> tuple[int, int]:
        return (value, 0) if dim == 0 else (0, value)

    registers = [unit(contiguous_dim, 1 << i) for i in range(per_row.bit_length() - 1)]
    lanes = [unit(strided, 1 << i) for i in range(3)]
    pending = [unit(strided, 1 << i) for i in range(3, shape[strided].bit_length() - 1)]
    pending += [unit(contiguous_dim, 1 << i)
                for i in range(per_row.bit_length() - 1, shape[contiguous_dim].bit_length() - 1)]
    while len(lanes) < 5:
        lanes.append(pending.pop(0) if pending else (0, 0))
    registers += pending
    return LinearLayout(
        {REGISTER: registers, LANE: lanes, WARP: []},
        list(zip(standard_out_dims(2), shape, strict=True)),
    )


def _row_element_bytes(elem_bytes: int) -> int:
    """``elem_bytes`` checked to be a power of two no wider than a 16-byte row."""
    log2_exact(elem_bytes, "element size")
    if elem_bytes > 16:
        raise LayoutError(f"{elem_bytes}-byte elements are wider than a 16-byte row")
    return elem_bytes
