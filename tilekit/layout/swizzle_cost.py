"""What each side of a shared buffer pays under a shared layout, counted by F2 algebra.

The per-side cost model of ``swizzle``, on its own because it is the yardstick, not the search:
``evaluate_shared_layout`` costs any bijective shared layout, and ``swizzle`` ranks its
candidates with the same count. A side's lanes in one phase form a coset of a lane subspace
(``banks.phase_basis``), so the distinct bank words of a phase form an affine space and every
bank holds ``2**e`` of them, ``e = rank(words) - rank(bank bits of words)``: a candidate costs a
few ranks of ~16-bit ints, never an enumeration of lanes (``banks.count_layout_transactions``
does that, and the tests hold the two equal).

Split out of ``swizzle``, which re-exports :class:`SharedAccess`, :class:`SideCost` and
:func:`evaluate_shared_layout`: the same classes, the same counts, the same refusals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tilekit.errors import LayoutError
from tilekit.layout import f2
from tilekit.layout.banks import Access, AccessKind, Target, phase_basis, vector_registers
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
    "ModelledSide",
    "SharedAccess",
    "SideCost",
    "evaluate_shared_layout",
    "model_sides",
    "side_costs",
]


@dataclass(frozen=True)
class SharedAccess:
    """One side of a shared buffer: who touches it, with which instruction, how wide at most.

    ``layout`` maps (register, lane[, warp]) to the tile; for ``LDMATRIX`` /
    ``STMATRIX`` / ``CORE_MATRIX`` it is the access layout whose lanes are
    row addresses (``banks.ldmatrix_access``, ``banks.core_matrix_access``).
    ``lanes`` limits the participating lanes (ldmatrix .x1/.x2).
    """

    layout: LinearLayout
    kind: AccessKind
    max_width_bytes: int = 16
    label: str = ""
    lanes: int | None = None


@dataclass(frozen=True)
class SideCost:
    """What one side pays under a shared layout, summed over all its warps."""

    label: str
    access: Access  # the instruction it uses (kind, vector width)
    instructions: int
    wavefronts: int
    ideal: int  # wavefronts of the same instructions without conflicts

    @property
    def vector_bytes(self) -> int:
        return self.access.width_bytes

    @property
    def excess(self) -> int:
        return self.wavefronts - self.ideal

    @property
    def conflict_free(self) -> bool:
        return self.excess == 0


@dataclass
class ModelledSide:
    """A side's bases as flat tile ints (dim0 lowest), ready to be costed against layouts."""

    spec: SharedAccess
    registers: tuple[int, ...]  # zero images dropped, except for fixed-row kinds (order matters)
    lanes: tuple[int, ...]
    warp_images: tuple[int, ...]
    max_vector_bits: int
    target: Target
    elem_bits: int
    _phase_images: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)

    @property
    def fixed(self) -> bool:
        return self.spec.kind.fixed_rows

    @property
    def warps(self) -> int:
        return 1 << len(self.warp_images)

    @property
    def live_registers(self) -> int:
        return sum(1 for r in self.registers if r)

    def access(self, vector_bits: int) -> Access:
        return Access(self.spec.kind, 1 << (vector_bits + self.elem_bits), self.spec.lanes)

    def phase_span(self, vector_bits: int) -> tuple[tuple[int, ...], int]:
        """Tile images spanning one phase at this vector width, and the number of phases."""
        cached = self._phase_images.get(vector_bits)
        if cached is None:
            phases = self.target.phases(self.access(vector_bits))
            basis = phase_basis(phases)
            if basis is None:
                raise LayoutError(
                    f"{self.target.name}'s phases for {self.access(vector_bits)} are not cosets "
                    "of one lane subspace; the F2 cost model does not apply"
                )
            cached = (tuple(f2.xor_selected(p, self.lanes) for p in basis), len(phases))
            self._phase_images[vector_bits] = cached
        return cached

    def vector_options(self) -> range:
        if self.fixed:
            return range(self.max_vector_bits, self.max_vector_bits - 1, -1)
        return range(self.max_vector_bits, -1, -1)

    def cost(self, inverse: Sequence[int]) -> SideCost | None:
        """What this side pays under the shared layout whose inverse columns are ``inverse``."""
        offsets = [f2.xor_selected(r, inverse) for r in self.registers]
        threads = [f2.xor_selected(t, inverse) for t in (*self.lanes, *self.warp_images)]
        for vector_bits in self.vector_options():
            if vector_registers(offsets, vector_bits, self.fixed, threads) is not None:
                break
        else:
            return None
        access = self.access(vector_bits)
        images, phases = self.phase_span(vector_bits)
        # The lanes' offsets have no bits inside a vector block (vector_registers checked it):
        # their blocks' bank words are the offsets scaled to words.
        shift = self.elem_bits - (self.target.bank_bytes.bit_length() - 1)
        words = []
        for image in images:
            base = f2.xor_selected(image, inverse)
            words.append(base << shift if shift >= 0 else base >> -shift)
        bank_mask = self.target.bank_count(access) - 1
        exponent = f2.rank(words) - f2.rank([w & bank_mask for w in words])
        instructions = self.warps << (self.live_registers - vector_bits)
        ideal = instructions * phases
        return SideCost(self.spec.label, access, instructions, ideal << exponent, ideal)


def _flat(image: Sequence[int], shifts: Sequence[int]) -> int:
    return sum(value << shift for value, shift in zip(image, shifts, strict=True))


def _model_side(
    spec: SharedAccess, shape: tuple[int, ...], elem_bits: int, target: Target
) -> ModelledSide:
    layout = spec.layout
    rank = len(shape)
    dims = standard_out_dims(rank)
    if set(layout.out_dims) != set(dims) or any(
        layout.out_dim_size(d) != size for d, size in zip(dims, shape, strict=True)
    ):
        raise LayoutError(
            f"side {spec.label or spec.kind.name} covers {layout.out_dim_sizes}, not the "
            f"{list(shape)} tile",
            hints=["every side must describe the same tile (dims dim0, dim1, ...)"],
        )
    for name in (REGISTER, LANE):
        if not layout.has_in_dim(name):
            raise LayoutError(f"side {spec.label or spec.kind.name} has no {name!r} dim")
    if layout.in_dim_size(LANE) != target.lanes:
        raise LayoutError(
            f"side {spec.label or spec.kind.name} has {layout.in_dim_size(LANE)} lanes; a "
            f"{target.name} warp has {target.lanes}"
        )
    layout = layout.transpose_outs(dims)
    shifts = [sum(s.bit_length() - 1 for s in shape[:k]) for k in range(rank)]
    registers = [_flat(image, shifts) for image in layout.bases[REGISTER]]
    if not spec.kind.fixed_rows:
        registers = [r for r in registers if r]
    lanes = tuple(_flat(image, shifts) for image in layout.bases[LANE])
    warps = tuple(_flat(image, shifts) for image in layout.bases.get(WARP, ()))
    log2_exact(spec.max_width_bytes, "max_width_bytes")
    widest = 16 if spec.kind.fixed_rows else spec.max_width_bytes
    if widest < 1 << elem_bits or widest > 16:
        raise LayoutError(
            f"side {spec.label or spec.kind.name}: a {widest}-byte access cannot move "
            f"{1 << elem_bits}-byte elements",
            hints=["accesses move 1 to 16 bytes per lane"],
        )
    if not target.supports(Access(spec.kind, widest, spec.lanes)):
        target.phases(Access(spec.kind, widest, spec.lanes))  # raises, naming what is modelled
    return ModelledSide(spec, tuple(registers), lanes, warps,
                        (widest >> elem_bits).bit_length() - 1, target, elem_bits)


def _tile_shape(sides: Sequence[SharedAccess]) -> tuple[int, ...]:
    if not sides:
        raise LayoutError("a shared buffer needs at least one side that writes or reads it")
    first = sides[0].layout
    rank = len(first.out_dims)
    dims = standard_out_dims(rank)
    if set(first.out_dims) != set(dims):
        raise LayoutError(f"tile dims must be named dim0..dim{rank - 1}, got {first.out_dims}")
    return tuple(first.out_dim_size(d) for d in dims)


def model_sides(
    sides: Sequence[SharedAccess], elem_bytes: int, target: Target
) -> tuple[tuple[int, ...], int, list[ModelledSide]]:
    """The tile shape, log2 of the element size, and each side modelled; refusals raised."""
    shape = _tile_shape(sides)
    elem_bits = log2_exact(elem_bytes, "element size")
    if elem_bytes > 16:
        raise LayoutError(f"{elem_bytes}-byte elements are wider than any shared access")
    return shape, elem_bits, [_model_side(s, shape, elem_bits, target) for s in sides]


def side_costs(
    modelled: Sequence[ModelledSide], inverse: Sequence[int]
) -> tuple[SideCost, ...] | None:
    """Every side's cost under the layout whose inverse columns are ``inverse`` (None: some
    fixed-row side cannot issue its instruction)."""
    costs = []
    for side in modelled:
        cost = side.cost(inverse)
        if cost is None:
            return None
        costs.append(cost)
    return tuple(costs)


def evaluate_shared_layout(
    sides: Sequence[SharedAccess], shared: LinearLayout, elem_bytes: int, target: Target
) -> tuple[SideCost, ...]:
    """What each side pays under ``shared``, by the F2 count (widest vector each side can use)."""
    shape, _, modelled = model_sides(sides, elem_bytes, target)
    if shared.in_dims != (OFFSET,) or shared.out_dim_sizes != dict(
        zip(standard_out_dims(len(shape)), shape, strict=True)
    ):
        raise LayoutError(f"the shared layout does not map {OFFSET!r} onto the {list(shape)} tile")
    inverse = f2.invert(shared.transpose_outs(standard_out_dims(len(shape))).flat_columns)
    if inverse is None:
        raise LayoutError("the shared layout is not a bijection: it has no address function")
    costs = side_costs(modelled, inverse)
    if costs is None:
        bad = next(s for s in modelled if s.cost(inverse) is None)
        raise LayoutError(
            f"side {bad.spec.label or bad.spec.kind.name} needs each lane's 16-byte row "
            "contiguous and in order, and this shared layout does not keep it so"
        )
    return costs
