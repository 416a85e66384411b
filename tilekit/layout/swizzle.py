"""Swizzle synthesis: the shared layout that the writers and readers of a buffer agree on.

Given the distributed layouts that write and read a shared buffer (each with
its instruction kind and widest access), the element size and the bank
model of a target, pick the shared layout (offset -> tile) that gives the
widest vectors first and the fewest wavefronts second. Candidates:

* unswizzled storage in every dim order;
* the classic XOR family (``shared.swizzled_shared``: vec, per_phase,
  max_phase) over every order;
* the TMA / wgmma 32/64/128-byte modes (``shared.nvidia_swizzle``), when
  asked for (``SwizzleFamily.HARDWARE``);
* the F2 construction of Linear Layouts (Zhou et al., arXiv 2505.23819,
  "optimal swizzling"), ``optimal_swizzle`` below.

Cost is counted by F2 algebra, not by enumeration: with the shared layout
``S`` (offset bits -> tile bits), a side's lanes in one phase form a coset of
a lane subspace (``banks.phase_basis``), so the distinct bank words of a
phase form an affine space and every bank holds ``2**e`` of them, ``e =
rank(words) - rank(bank bits of words)``. The same ``e`` holds for every
phase and instruction, so a candidate costs a few ranks of ~16-bit ints.
``evaluate_shared_layout`` exposes that count; the tests check it against
``banks.count_layout_transactions``, which enumerates lanes. The cost model
(``SharedAccess``, ``SideCost``, ``evaluate_shared_layout``) lives in
``swizzle_cost`` and is re-exported here; this module constructs and searches.

The construction: the lowest offset bits ``V`` are register bases the sides
share (the vector; also tried widened, tier by tier, to the registers of
the higher-ranked sides); the next bits up to one bank line (banks x bank
width) are "bank" bits; the rest, the segment ``Sigma``, pick the bank line.
Two lanes of a phase conflict exactly when their difference lies in ``V +
W + Sigma`` (``W``: offset bits inside one bank word), so ``Sigma`` is grown
one vector at a time, each outside ``D_k + V + W + Sigma`` for every side's
phase span ``D_k`` if possible (for two sides, ignoring the next rule, such
a vector exists while there is room: a space is never the union of two
proper subspaces, and ``a ^ b`` with ``a`` outside one and ``b`` outside the
other is outside both), else the one that raises the cheapest side's
conflicts. Each side's lanes and warps must keep their vector blocks
aligned, so ``Sigma`` may not bring a vector bit within their span. The
bank bits then complete a basis, the threads' directions first. This is a
heuristic past two sides; every candidate is costed exactly, so the search
never returns it when an XOR-family layout is cheaper.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tilekit.errors import LayoutError
from tilekit.layout import f2
from tilekit.layout.banks import Target, Vendor
from tilekit.layout.linear import OFFSET, LinearLayout, standard_out_dims
from tilekit.layout.shared import (
    Major,
    Operand,
    SwizzleMode,
    nvidia_swizzle,
    swizzled_shared,
    unswizzled,
)
from tilekit.layout.swizzle_cost import (
    ModelledSide,
    SharedAccess,
    SideCost,
    evaluate_shared_layout,
    model_sides,
    side_costs,
)

__all__ = [
    "Candidate",
    "ClassicSwizzle",
    "DEFAULT_FAMILIES",
    "SharedAccess",
    "SideCost",
    "SwizzleFamily",
    "SwizzlePlan",
    "evaluate_shared_layout",
    "optimal_swizzle",
    "synthesize_swizzle",
]


class SwizzleFamily(enum.Enum):
    """Where a candidate comes from; on equal cost the earlier family wins (it is simpler)."""

    UNSWIZZLED = enum.auto()
    HARDWARE = enum.auto()  # TMA / wgmma 32, 64, 128-byte modes
    CLASSIC = enum.auto()  # vec / per_phase / max_phase XOR swizzle
    OPTIMAL = enum.auto()  # the Linear Layouts F2 construction


DEFAULT_FAMILIES = frozenset({SwizzleFamily.UNSWIZZLED, SwizzleFamily.CLASSIC,
                              SwizzleFamily.OPTIMAL})


@dataclass(frozen=True)
class ClassicSwizzle:
    vec: int
    per_phase: int
    max_phase: int
    order: tuple[int, ...]


@dataclass(frozen=True)
class Candidate:
    """A shared layout that was considered, by the parameters that build it."""

    family: SwizzleFamily
    order: tuple[int, ...] | None = None  # UNSWIZZLED
    classic: ClassicSwizzle | None = None  # CLASSIC
    mode: SwizzleMode | None = None  # HARDWARE
    contiguous_dim: int | None = None  # HARDWARE
    widened_to: str | None = None  # OPTIMAL: the sides whose registers widen the shared vector

    def describe(self) -> str:
        if self.family is SwizzleFamily.UNSWIZZLED:
            return f"unswizzled, order {list(self.order or ())}"
        if self.family is SwizzleFamily.CLASSIC and self.classic is not None:
            c = self.classic
            return (f"XOR swizzle vec={c.vec} per_phase={c.per_phase} max_phase={c.max_phase}, "
                    f"order {list(c.order)}")
        if self.family is SwizzleFamily.HARDWARE and self.mode is not None:
            return f"{self.mode.value}-byte hardware swizzle, dim{self.contiguous_dim} contiguous"
        widened = f", vector widened to {self.widened_to}'s registers" if self.widened_to else ""
        return f"optimal F2 swizzle (Linear Layouts construction{widened})"


@dataclass(frozen=True)
class SwizzlePlan:
    """The chosen shared layout, what each side pays under it, and why it won."""

    shared: LinearLayout
    candidate: Candidate
    sides: tuple[SideCost, ...]
    reason: str
    considered: int

    @property
    def family(self) -> SwizzleFamily:
        return self.candidate.family

    @property
    def vector_bytes(self) -> tuple[int, ...]:
        return tuple(side.vector_bytes for side in self.sides)

    @property
    def wavefronts(self) -> tuple[int, ...]:
        return tuple(side.wavefronts for side in self.sides)

    @property
    def conflict_free(self) -> bool:
        return all(side.conflict_free for side in self.sides)


# --------------------------------------------------------------------------- the F2 construction


def _unit_order(shape: tuple[int, ...], first_dim: int) -> list[int]:
    """Tile bits in the order bank bits are taken: ``first_dim``'s, then the others, last first."""
    shifts = _shifts(shape)
    dims = [first_dim] + [d for d in reversed(range(len(shape))) if d != first_dim]
    return [1 << (shifts[d] + b) for d in dims for b in range(shape[d].bit_length() - 1)]


def _segment_pool(n: int, sides: int) -> list[int]:
    """Segment candidates: tile bits, then pairs (the paper's ``a ^ b``), triples for 3+ sides."""
    pool = [1 << b for b in range(n)]
    pool += [(1 << a) | (1 << b) for a, b in itertools.combinations(range(n), 2)]
    if sides > 2:
        pool += [sum(1 << b for b in trio) for trio in itertools.combinations(range(n), 3)]
    return pool


def _shared_vector(sides: Sequence[ModelledSide], widen: tuple[int, ...] = ()) -> list[int] | None:
    """The lowest offset bits: register images the sides share (a fixed-row side dictates them).

    ``widen`` ranks some sides: after what all sides share come the
    registers shared by the first ``k`` of them, for ``k`` falling to 1, so
    the higher-ranked sides vectorize further while the others stop short.
    """
    fixed = [s for s in sides if s.fixed]
    if fixed:
        vector = list(fixed[0].registers[:fixed[0].max_vector_bits])
        if 0 in vector or any(list(s.registers[:s.max_vector_bits]) != vector for s in fixed[1:]):
            return None
        return vector

    def shared_by(group: Sequence[ModelledSide]) -> list[int]:
        held = [set(s.registers) for s in group[1:]]
        return [r for r in group[0].registers if all(r in h for h in held)]

    vector = shared_by(sides)[:max(s.max_vector_bits for s in sides)]
    for size in range(len(widen), 0, -1):
        group = [sides[i] for i in widen[:size]]
        cap = min(s.max_vector_bits for s in group)
        vector = vector[:max(cap, len(vector) if size == len(widen) else 0)]
        vector += [r for r in shared_by(group) if r not in vector][:max(0, cap - len(vector))]
    span = f2.Span()
    return vector if all(span.add(v) for v in vector) else None


def _widenings(sides: Sequence[ModelledSide]) -> list[tuple[int, ...]]:
    """Rankings of sides that widen the shared vector tier by tier, one per distinct vector."""
    rankings = [(), *itertools.permutations(range(len(sides)))] if len(sides) > 1 else [()]
    seen: set[tuple[int, ...] | None] = set()
    distinct = []
    for ranking in rankings:
        vector = _shared_vector(sides, ranking)
        key = None if vector is None else tuple(vector)
        if key not in seen:
            seen.add(key)
            distinct.append(ranking)
    return distinct


def _vector_bits(side: ModelledSide, vector: Sequence[int]) -> int:
    """How much of ``vector`` (a prefix) ``side`` holds in registers, up to its widest access."""
    held = set(side.registers)
    bits = 0
    while bits < min(len(vector), side.max_vector_bits) and vector[bits] in held:
        bits += 1
    if side.fixed and bits < side.max_vector_bits:
        bits = side.max_vector_bits  # dictated; the evaluation refuses the layout if it fails
    return bits


def _threads(side: ModelledSide, bits: int) -> list[int]:
    """Images that must not move inside a vector block: lanes, warps, a fixed side's repeats."""
    images = [*side.lanes, *side.warp_images]
    if side.fixed:
        images += side.registers[bits:]
    return [t for t in images if t]


def _optimal_columns(
    sides: Sequence[ModelledSide], shape: tuple[int, ...], elem_bits: int, target: Target,
    widen: tuple[int, ...] = (),
) -> list[int] | None:
    """Offset-bit columns of the Linear Layouts swizzle (module docstring), or None.

    Besides staying out of the phase spans, the segment must keep each
    side's thread images (lanes, warps, a fixed-row side's repeats) free of
    that side's vector components, or its vectors would straddle blocks:
    with ``H`` their span and ``V`` the side's vector, ``H + Sigma`` must
    meet ``V`` only in 0; the bank bits then take the thread images first.
    """
    n = sum(s.bit_length() - 1 for s in shape)
    vector = _shared_vector(sides, widen)
    if vector is None:
        return None
    independent = f2.Span(vector)
    # One bank line (banks x bank width) of the narrowest-banked side: offset bits above it pick
    # the line; for a side with more banks they are a superset of its segment, so conflict-free
    # there is conflict-free for it too (gfx950 reads see 64 banks, its writes 32).
    line_bytes = min(target.bank_count(side.access(_vector_bits(side, vector))) for side in sides)
    line_bits = (line_bytes * target.bank_bytes).bit_length() - 1 - elem_bits
    segment_count = max(0, n - max(line_bits, len(vector)))
    first_dim = len(shape) - 1
    if vector:
        low = (vector[0] & -vector[0]).bit_length() - 1
        first_dim = max(d for d, shift in enumerate(_shifts(shape)) if shift <= low)
    units = _unit_order(shape, first_dim)
    # Offset bits below one bank word that the vector does not fill: lanes differing only
    # there share a word (a broadcast), so they must be fixed before the segment is chosen.
    word_bits = (target.bank_bytes.bit_length() - 1) - elem_bits
    within = []
    for unit in units:
        if len(vector) + len(within) >= min(word_bits, n):
            break
        if independent.add(unit):
            within.append(unit)

    hits, exponents, weights, guards = [], [], [], []
    order = sorted(sides, key=lambda side: -_vector_bits(side, vector))
    for side in sides:
        bits = _vector_bits(side, vector)
        images, phases = side.phase_span(bits)
        hits.append(f2.Span([*images, *vector[:bits], *within]))
        exponents.append(0)
        weights.append(side.warps * phases << max(0, side.live_registers - bits))
        reach = [*_threads(side, bits), *within]
        if bits and f2.rank(reach + vector[:bits]) == f2.rank(reach) + bits:
            guards.append((f2.Span(reach), f2.Span([*reach, *vector[:bits]])))

    segment: list[int] = []
    for _ in range(segment_count):
        best, best_cost = 0, -1
        for candidate in _segment_pool(n, len(sides)):
            if candidate in independent or any(
                candidate not in reach and candidate in reach_and_vector
                for reach, reach_and_vector in guards
            ):
                continue  # dependent, or it would put a vector bit within some threads' reach
            cost = sum(w << e for span, e, w in zip(hits, exponents, weights, strict=True)
                       if candidate in span)
            if best_cost < 0 or cost < best_cost:
                best, best_cost = candidate, cost
                if cost == 0:
                    break
        if best_cost < 0:
            return None
        segment.append(best)
        independent.add(best)
        for k, span in enumerate(hits):
            exponents[k] += best in span
            span.add(best)
        for reach, reach_and_vector in guards:
            reach.add(best)
            reach_and_vector.add(best)

    threads = [t for side in order for t in _threads(side, _vector_bits(side, vector))]
    reach = f2.Span([*threads, *within, *segment])
    bank = [u for u in units if u in reach and independent.add(u)]
    bank += [t for t in threads if independent.add(t)]
    bank += [u for u in units if independent.add(u)]
    segment.sort(key=lambda v: ((v & -v).bit_length(), v))
    return vector + within + bank + segment


def _columns_to_layout(columns: Sequence[int], shape: tuple[int, ...]) -> LinearLayout:
    shifts = [sum(s.bit_length() - 1 for s in shape[:k]) for k in range(len(shape))]
    bases = [[(c >> shift) & (size - 1) for shift, size in zip(shifts, shape, strict=True)]
             for c in columns]
    return LinearLayout({OFFSET: bases}, list(zip(standard_out_dims(len(shape)), shape,
                                                  strict=True)))


def optimal_swizzle(
    sides: Sequence[SharedAccess], elem_bytes: int, target: Target
) -> LinearLayout:
    """The Linear Layouts optimal swizzle for these sides (offset -> tile), by F2 construction.

    Widest common vector first; then segment bits chosen to stay out of
    every side's phase span (conflict-free whenever that is possible for two
    sides), the bank bits completing the basis. The construction runs with
    the vector all sides share and with it widened to the registers of each
    proper group of sides; the cheapest result is returned. A ``LayoutError`` if the
    sides' fixed 16-byte rows (ldmatrix, wgmma) disagree.
    """
    shape, elem_bits, modelled = model_sides(sides, elem_bytes, target)
    best: tuple[tuple[int, int], list[int]] | None = None
    for widen in _widenings(modelled):
        columns = _optimal_columns(modelled, shape, elem_bits, target, widen)
        inverse = f2.invert(columns) if columns is not None else None
        costs = side_costs(modelled, inverse) if inverse is not None else None
        if columns is not None and costs is not None and (best is None or _score(costs) < best[0]):
            best = (_score(costs), columns)
    if best is None:
        raise LayoutError(
            "no F2 swizzle serves these sides: their fixed 16-byte rows (ldmatrix / wgmma) are "
            "not the same elements",
            hints=["a shared buffer can serve only matrix instructions whose rows agree"],
        )
    return _columns_to_layout(best[1], shape)


# --------------------------------------------------------------------------- the search


def _orders(rank: int) -> list[tuple[int, ...]]:
    """Dim orders tried, most minor first: row-major first, then every other (rank <= 3)."""
    row_major = tuple(reversed(range(rank)))
    others = itertools.permutations(range(rank)) if rank <= 3 else [tuple(range(rank))]
    return [row_major] + [o for o in others if o != row_major]


def _powers(limit: int) -> list[int]:
    return [1 << i for i in range(max(0, limit).bit_length()) if 1 << i <= limit]


def _classic_params(
    shape: tuple[int, ...], elem_bytes: int, target: Target
) -> Iterator[ClassicSwizzle]:
    line = target.banks * target.bank_bytes
    for order in _orders(len(shape)):
        if len(shape) < 2:
            return
        cols, rows = shape[order[0]], shape[order[1]]
        row_bytes = cols * elem_bytes
        for vec in _powers(min(cols, max(1, 16 // elem_bytes))):
            for per_phase in _powers(min(rows, max(1, line // row_bytes))):
                limit = min(cols // vec, rows // per_phase, max(1, line // (vec * elem_bytes)))
                for max_phase in _powers(limit)[1:]:
                    yield ClassicSwizzle(vec, per_phase, max_phase, order)


def _hardware(shape: tuple[int, ...], elem_bytes: int, target: Target) -> Iterator[Candidate]:
    if target.vendor is not Vendor.NVIDIA:
        raise LayoutError(
            f"the 32/64/128-byte swizzle modes are NVIDIA's (TMA, wgmma); {target.name} has none",
            hints=["drop SwizzleFamily.HARDWARE for AMD targets"],
        )
    if len(shape) != 2:
        return
    for mode in (SwizzleMode.B128, SwizzleMode.B64, SwizzleMode.B32):  # widest TMA box first
        for contiguous in (1, 0):
            yield Candidate(SwizzleFamily.HARDWARE, mode=mode, contiguous_dim=contiguous)


def _shifts(shape: tuple[int, ...]) -> list[int]:
    return [sum(s.bit_length() - 1 for s in shape[:k]) for k in range(len(shape))]


def _fast_columns(candidate: Candidate, shape: tuple[int, ...]) -> list[int] | None:
    """Flat columns of an unswizzled or classic candidate, without building a LinearLayout.

    The same bases as ``shared.unswizzled`` / ``shared.swizzled_shared`` (the
    tests hold them equal); the search tries dozens of candidates, the
    winner alone is built by ``shared``.
    """
    shifts = _shifts(shape)

    def units(dim: int) -> list[int]:
        return [1 << (shifts[dim] + b) for b in range(shape[dim].bit_length() - 1)]

    if candidate.family is SwizzleFamily.UNSWIZZLED and candidate.order is not None:
        return [u for dim in candidate.order for u in units(dim)]
    if candidate.family is SwizzleFamily.CLASSIC and candidate.classic is not None:
        c = candidate.classic
        cols_dim, rows_dim = c.order[0], c.order[1]
        cols = shape[cols_dim]
        columns = units(cols_dim)
        for r, unit in enumerate(units(rows_dim)):
            xor = (c.vec * (((1 << r) // c.per_phase) % c.max_phase)) % cols
            columns.append(unit | xor << shifts[cols_dim])
        return columns + [u for dim in c.order[2:] for u in units(dim)]
    return None


def _build(candidate: Candidate, shape: tuple[int, ...], elem_bytes: int) -> LinearLayout:
    if candidate.family is SwizzleFamily.UNSWIZZLED:
        return unswizzled(shape, candidate.order)
    if candidate.family is SwizzleFamily.CLASSIC and candidate.classic is not None:
        c = candidate.classic
        return swizzled_shared(shape, elem_bytes, c.vec, c.per_phase, c.max_phase, c.order)
    if candidate.family is SwizzleFamily.HARDWARE and candidate.mode is not None:
        major = Major.K if candidate.contiguous_dim == 1 else Major.MN
        return nvidia_swizzle(candidate.mode, shape, elem_bytes, major, Operand.A)
    raise AssertionError("optimal candidates are built from columns")


def _score(costs: Sequence[SideCost]) -> tuple[int, int]:
    return sum(c.instructions for c in costs), sum(c.wavefronts for c in costs)


def _summary(costs: Sequence[SideCost]) -> str:
    widths = " / ".join(f"{c.vector_bytes} B" for c in costs)
    instructions, wavefronts = _score(costs)
    ideal = sum(c.ideal for c in costs)
    conflicts = ("conflict-free" if wavefronts == ideal
                 else f"{wavefronts - ideal} over the conflict-free {ideal}")
    return f"vectors {widths} ({instructions} instructions), {wavefronts} wavefronts ({conflicts})"


def synthesize_swizzle(
    sides: Sequence[SharedAccess],
    elem_bytes: int,
    target: Target,
    families: frozenset[SwizzleFamily] | set[SwizzleFamily] = DEFAULT_FAMILIES,
) -> SwizzlePlan:
    """The shared layout with the widest vectors, then the fewest wavefronts, for these sides.

    Deterministic: candidates are tried in family order (unswizzled,
    hardware, classic, optimal) and by parameters; equal cost keeps the
    earlier. Raises a ``LayoutError`` when no candidate lets every side
    issue its instruction (a fixed-row side whose rows no layout keeps).
    """
    shape, elem_bits, modelled = model_sides(sides, elem_bytes, target)
    families = frozenset(families)
    if not families:
        raise LayoutError("no swizzle family to choose from")
    candidates: list[tuple[Candidate, list[int] | None]] = []
    if SwizzleFamily.UNSWIZZLED in families:
        candidates += [(Candidate(SwizzleFamily.UNSWIZZLED, order=o), None)
                       for o in _orders(len(shape))]
    if SwizzleFamily.HARDWARE in families:
        candidates += [(c, None) for c in _hardware(shape, elem_bytes, target)]
    if SwizzleFamily.CLASSIC in families:
        candidates += [(Candidate(SwizzleFamily.CLASSIC, classic=p), None)
                       for p in _classic_params(shape, elem_bytes, target)]
    if SwizzleFamily.OPTIMAL in families:
        for widen in _widenings(modelled):
            columns = _optimal_columns(modelled, shape, elem_bits, target, widen)
            if columns is not None:
                label = " and ".join(sides[i].label or f"side {i}" for i in widen) or None
                candidates.append((Candidate(SwizzleFamily.OPTIMAL, widened_to=label), columns))

    seen: dict[tuple[int, ...], list[Candidate]] = {}
    best: tuple[tuple[int, int], int, Candidate, tuple[int, ...], tuple[SideCost, ...]] | None
    best = None
    best_by_family: dict[SwizzleFamily, tuple[tuple[int, int], Candidate,
                                             tuple[SideCost, ...]]] = {}
    considered = 0
    for index, (candidate, columns) in enumerate(candidates):
        if columns is None:
            columns = _fast_columns(candidate, shape)
        if columns is None:
            try:
                columns = list(_build(candidate, shape, elem_bytes).flat_columns)
            except LayoutError:
                continue  # e.g. a hardware mode wider than the tile's rows
        key = tuple(columns)
        if key in seen:
            seen[key].append(candidate)
            continue
        seen[key] = [candidate]
        considered += 1
        inverse = f2.invert(columns)
        costs = side_costs(modelled, inverse) if inverse is not None else None
        if costs is None:
            continue
        score = _score(costs)
        if candidate.family not in best_by_family or score < best_by_family[candidate.family][0]:
            best_by_family[candidate.family] = (score, candidate, costs)
        if best is None or (score, index) < (best[0], best[1]):
            best = (score, index, candidate, key, costs)
    if best is None:
        raise LayoutError(
            f"no shared layout among {considered} candidates lets every side issue its "
            "instruction",
            hints=["a fixed-row side (ldmatrix, wgmma) needs its 16-byte rows contiguous: add "
                   "SwizzleFamily.OPTIMAL or CLASSIC, or check that the sides' rows agree"],
        )
    score, _, candidate, key, costs = best
    if candidate.family is SwizzleFamily.OPTIMAL:
        shared = _columns_to_layout(key, shape)
    else:
        shared = _build(candidate, shape, elem_bytes)
    reason = [f"{candidate.describe()}: {_summary(costs)}"]
    if len(seen[key]) > 1:
        reason.append("the same layout as " + " and ".join(c.describe() for c in seen[key][1:]))
    for family, (other_score, other, other_costs) in best_by_family.items():
        if other is candidate:
            continue
        verdict = "ties; the simpler family wins" if other_score == score else "loses"
        reason.append(f"best {family.name.lower()} ({other.describe()}) {verdict}: "
                      f"{_summary(other_costs)}")
    return SwizzlePlan(shared, candidate, costs, "; ".join(reason), considered)
