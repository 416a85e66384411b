"""Vectorization: the widest contiguous, aligned access each thread can make (up to 16 bytes).

A thread that holds ``v`` elements at consecutive, ``v * elem_bytes``-aligned addresses in
*consecutive registers* loads or stores them with one instruction (``ld.global.v4.b32``,
``global_load_dwordx4``). This module answers, for a distributed layout and what is known about
the tensor (:class:`TensorFacts`), how wide that access is, which registers form it, why it is
not wider, and how wide the accesses at a ragged edge must be (:class:`VectorPlan`).

Three descriptions of "who holds what" are accepted:

* a power-of-two ``LinearLayout`` (``register``, ``lane``, ``warp``, ``block`` -> ``dim0``, ...):
  answered in F2 algebra: the first register bases must step the address by 1, 2, 4, ...
  elements (the inverse-layout method of the Linear Layouts paper), the other bases must leave
  those address bits alone, and every group start must be aligned. The few integer questions
  F2 cannot answer (strides that are not powers of two) are decided on the handful of bits that
  matter modulo 16 bytes, never by enumerating the tile;
* a :class:`ThreadValueLayout`: a CuTe ``(thread, value)`` layout over a padded tile, for tiles
  of any size (a row of 4097, 37 columns, 1000 x 37): composed with the tensor's strides,
  coalesced, and read from its leftmost stride-1 mode;
* an :class:`ElementTable`: an explicit per-thread element list, decided by enumeration.

The F2 path lives here with the facts, the plan and :func:`vector_width`; the last two paths
(and :func:`blocked_thread_values`) live in :mod:`tilekit.layout.vectorize_tables` and are
re-exported here, so they still import from this module.

Conventions: strides and sizes are in elements, alignments in bytes. A stride that is unknown
at compile time (``None``) is a positive multiple of its ``stride_divisor``; an unknown size a
positive multiple of its ``size_divisor``. ``base_align`` is the alignment of the address of
the tile's first element (the tensor's base plus the tile origin's offset). Tile origins are
multiples of the tile's extent in every dim, so a power-of-two tile never starts inside a
vector. The answer holds for every tensor the facts describe (worst case over the unknowns).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tilekit.errors import LayoutError
from tilekit.layout.linear import REGISTER, LinearLayout, log2_exact

__all__ = [
    "MAX_VECTOR_BYTES",
    "DimFacts",
    "ElementTable",
    "Limit",
    "RegisterOrder",
    "TensorFacts",
    "ThreadValueLayout",
    "VectorPlan",
    "blocked_thread_values",
    "renumber_registers_for_vectors",
    "vector_width",
]

#: The widest access a thread can make: 128-bit loads/stores on NVIDIA and AMD.
MAX_VECTOR_BYTES = 16

# The lowbit of zero: zero is divisible by every power of two.
_ZERO_LOWBIT = 1 << 62


def _lowbit(value: int) -> int:
    """The largest power of two dividing ``value`` (``_ZERO_LOWBIT`` for 0)."""
    value = abs(int(value))
    return value & -value if value else _ZERO_LOWBIT


# --------------------------------------------------------------------------------------------
# Facts


@dataclass(frozen=True)
class DimFacts:
    """What is known about one tensor dim: its stride and its size, exactly or by divisibility.

    A known value makes its divisor redundant (the divisor is then derived from it).
    """

    stride: int | None = None
    stride_divisor: int = 1
    size: int | None = None
    size_divisor: int = 1

    def __post_init__(self) -> None:
        for name in ("stride_divisor", "size_divisor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayoutError(f"{name} must be a positive int, got {value!r}")
        if self.stride is not None and not isinstance(self.stride, int):
            raise LayoutError(f"stride must be an int or None, got {self.stride!r}")
        if self.size is not None and (not isinstance(self.size, int) or self.size < 1):
            raise LayoutError(f"size must be a positive int or None, got {self.size!r}")

    @property
    def stride_alignment(self) -> int:
        """The largest power of two that surely divides the stride."""
        return _lowbit(self.stride) if self.stride is not None else _lowbit(self.stride_divisor)

    @property
    def size_alignment(self) -> int:
        """The largest power of two that surely divides the size."""
        return _lowbit(self.size) if self.size is not None else _lowbit(self.size_divisor)


@dataclass(frozen=True)
class TensorFacts:
    """What the compiler may assume about a tensor it accesses (a shape bucket's facts).

    ``contiguous_dim`` names the dim whose stride should be 1; by default it is the dim whose
    stride is known to be 1 (the last one if several are).
    """

    elem_bytes: int
    dims: tuple[DimFacts, ...]
    base_align: int = MAX_VECTOR_BYTES
    contiguous_dim: int | None = None

    def __post_init__(self) -> None:
        log2_exact(self.elem_bytes, "elem_bytes")
        log2_exact(self.base_align, "base_align (bytes)")
        if not self.dims:
            raise LayoutError("a tensor has at least one dim")
        if not all(isinstance(d, DimFacts) for d in self.dims):
            raise LayoutError("dims must be DimFacts")
        object.__setattr__(self, "dims", tuple(self.dims))
        if self.contiguous_dim is None:
            unit = [i for i, d in enumerate(self.dims) if d.stride == 1]
            if unit:
                object.__setattr__(self, "contiguous_dim", unit[-1])
        elif not 0 <= self.contiguous_dim < len(self.dims):
            raise LayoutError(
                f"contiguous_dim {self.contiguous_dim} is not a dim of a rank-{len(self.dims)} "
                "tensor"
            )

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def strides(self) -> tuple[int | None, ...]:
        return tuple(d.stride for d in self.dims)

    @classmethod
    def dense(
        cls,
        shape: Sequence[int],
        elem_bytes: int,
        base_align: int = MAX_VECTOR_BYTES,
        order: Sequence[int] | None = None,
    ) -> TensorFacts:
        """A packed tensor of known ``shape``: dims laid out in ``order`` (most minor first,
        default row-major), every stride and size known."""
        rank = len(shape)
        order = tuple(reversed(range(rank))) if order is None else tuple(order)
        if sorted(order) != list(range(rank)):
            raise LayoutError(f"order {list(order)} is not a permutation of the dims 0..{rank - 1}")
        strides = [0] * rank
        step = 1
        for d in order:
            strides[d] = step
            step *= shape[d]
        return cls(
            elem_bytes,
            tuple(DimFacts(stride=strides[d], size=int(shape[d])) for d in range(rank)),
            base_align,
            order[0],
        )


# --------------------------------------------------------------------------------------------
# The answer


class Limit(enum.Enum):
    """Why a vector is not wider (the first obstacle met when doubling it)."""

    BYTE_CAP = "a wider access would exceed 16 bytes"
    REGISTER_CONTIGUITY = "the next registers do not hold the next elements of the contiguous dim"
    STRIDE = "the strides break contiguity or the alignment of group starts"
    ALIGNMENT = "the base address is not aligned to the wider access"
    RAGGED_TAIL = "each thread's run along the contiguous dim is not a multiple of the wider access"


class RegisterOrder(enum.Enum):
    """Whether registers keep their numbering or may be renumbered to form wider vectors."""

    AS_IS = enum.auto()  # the vector is registers start .. start + v - 1
    RENUMBERED = enum.auto()  # any registers (an F2 change of register basis, free in codegen)


@dataclass(frozen=True)
class VectorPlan:
    """The widest access per thread, and what limits it.

    Vector element ``i`` of the group starting at register ``s`` is register ``s ^ X`` where
    ``X`` is the XOR of ``register_masks[j]`` over the set bits ``j`` of ``i`` (for consecutive
    registers the masks are 1, 2, 4, ...; a group start has those bits clear). Where the tensor
    (or a thread's run) ends inside a vector, the accesses there are ``tail_elements`` wide (or
    masked); ``tail_elements == elements`` means there is no tail.
    """

    elements: int
    elem_bytes: int
    register_masks: tuple[int, ...]
    limit: Limit
    tail_elements: int
    explanation: str = field(default="", compare=False)

    @property
    def bytes(self) -> int:
        return self.elements * self.elem_bytes

    @property
    def tail_bytes(self) -> int:
        return self.tail_elements * self.elem_bytes

    @property
    def has_tail(self) -> bool:
        return self.tail_elements < self.elements


# --------------------------------------------------------------------------------------------
# F2 layouts


Vec = tuple[int, ...]  # one coordinate per tensor dim (in facts' dim order)


def _xor(a: Vec, b: Vec) -> Vec:
    return tuple(x ^ y for x, y in zip(a, b, strict=True))


def _span(vectors: Sequence[Vec], rank: int) -> Iterator[Vec]:
    """Every XOR-combination of ``vectors`` (duplicates possible when they are dependent)."""
    acc: list[Vec] = [(0,) * rank]
    for vec in vectors:
        acc += [_xor(a, vec) for a in acc]
    return iter(acc)


def _independent(vectors: Sequence[Vec]) -> list[Vec]:
    """A basis of the span of ``vectors`` (each vector as one flat int, Gaussian elimination)."""
    if not vectors:
        return []
    pivots: dict[int, int] = {}
    shifts = _flat_shifts(vectors)
    basis: list[Vec] = []
    for vec in vectors:
        flat = sum(x << s for x, s in zip(vec, shifts, strict=True))
        while flat:
            top = flat.bit_length() - 1
            if top not in pivots:
                pivots[top] = flat
                basis.append(vec)
                break
            flat ^= pivots[top]
    return basis


def _flat_shifts(vectors: Sequence[Vec]) -> list[int]:
    """Bit offsets that pack one vector per int, dim by dim (wide enough for every vector)."""
    shifts, position = [], 0
    for d in range(len(vectors[0])):
        shifts.append(position)
        position += max(v[d] for v in vectors).bit_length()
    return shifts


class _Geometry:
    """A layout's bases as tensor-dim vectors in facts' dim order, and the address arithmetic."""

    def __init__(self, layout: LinearLayout, facts: TensorFacts) -> None:
        rank = facts.rank
        expected = {f"dim{k}" for k in range(rank)}
        if set(layout.out_dims) != expected:
            raise LayoutError(
                f"the layout's out dims {list(layout.out_dims)} do not match a rank-{rank} "
                f"tensor (expected {sorted(expected)})",
                hints=["give one DimFacts per tensor dim, dim0 first"],
            )
        positions = [layout.out_dims.index(f"dim{k}") for k in range(rank)]
        self.rank = rank
        self.facts = facts
        self.extents = tuple(layout.out_dim_size(f"dim{k}") for k in range(rank))
        bases = layout.bases
        self.registers: list[Vec] = [
            tuple(image[p] for p in positions) for image in bases.get(REGISTER, ())
        ]
        self.threads: list[Vec] = [
            tuple(image[p] for p in positions)
            for name, images in bases.items() if name != REGISTER
            for image in images
        ]
        self.strides = facts.strides
        self.unknown = [s is None for s in self.strides]
        self.divisors = [d.stride_divisor if d.stride is None else 0 for d in facts.dims]

    def address(self, vec: Vec) -> int:
        """Element offset of a coordinate whose unknown-stride components are zero."""
        return sum(x * s for x, s in zip(vec, self.strides, strict=True) if x)

    def contiguous(self, vector: Sequence[Vec], others: Sequence[Vec]) -> bool:
        """Whether element ``i`` of every group sits ``i`` elements after the group's first.

        ``a(g ^ q) = a(g) + a(q) - 2 * sum_d s_d * (g_d & q_d)``: the vector's own addresses
        must be 0, 1, 2, ... and the cross term must vanish for every group start ``g``.
        """
        rank = self.rank
        if any(vec[d] and self.unknown[d] for vec in vector for d in range(rank)):
            return False  # an unknown stride moves the address by an unknown amount
        for i, point in enumerate(_span(vector, rank)):
            if self.address(point) != i:
                return False
        support = [0] * rank
        for vec in vector:
            for d in range(rank):
                support[d] |= vec[d]
        live = [d for d in range(rank) if support[d] and not self.unknown[d] and self.strides[d]]
        if all(self.strides[d] > 0 for d in live):  # type: ignore[operator]
            # positive weights cannot cancel: the supports must be disjoint
            return not any(vec[d] & support[d] for vec in others for d in live)
        projected = _independent(
            [tuple(vec[d] & support[d] for d in range(rank)) for vec in others]
        )
        if len(projected) > 16:
            return False  # too many overlapping bits to enumerate: no vector (safe)
        for g in _span(projected, rank):
            for q in _span(vector, rank):
                if sum(self.strides[d] * (g[d] & q[d]) for d in live):  # type: ignore[operator]
                    return False
        return True

    def consecutive_coordinates(self, vector: Sequence[Vec], others: Sequence[Vec]) -> bool:
        """Whether every group holds consecutive elements of the contiguous dim, in order."""
        c = self.facts.contiguous_dim
        if c is None:
            return False
        for j, vec in enumerate(vector):
            if vec != tuple((1 << j) if d == c else 0 for d in range(self.rank)):
                return False
        span = (1 << len(vector)) - 1
        return not any(vec[c] & span for vec in others)

    def aligned(self, others: Sequence[Vec], v: int) -> bool:
        """Whether every group start's element offset is a multiple of ``v`` (all strides)."""
        rank = self.rank
        for vec in others:
            for d in range(rank):
                if self.unknown[d] and vec[d] and (vec[d] * self.divisors[d]) % v:
                    return False
        # Known strides: only bits whose weight s_d * 2**b is not a multiple of v matter.
        masks = []
        for d in range(rank):
            stride = self.strides[d]
            mask = 0
            if stride is not None and stride % v:
                for b in range(max(self.extents[d] - 1, 0).bit_length()):
                    if (stride << b) % v:
                        mask |= 1 << b
            masks.append(mask)
        projected = _independent(
            [p for p in (tuple(vec[d] & masks[d] for d in range(rank)) for vec in others) if any(p)]
        )
        return all(self.address(tuple(
            0 if self.unknown[d] else x for d, x in enumerate(g)
        )) % v == 0 for g in _span(projected, rank))

    def tail(self, vector: Sequence[Vec], others: Sequence[Vec]) -> int:
        """Widest sub-vector (over vector bits ``0 .. j-1``) that never straddles an edge.

        Tile origins are multiples of the tile, so in dim ``d`` the edge sits at ``p = size -
        origin`` of the last tile, in ``(0, extent]``; an unknown size puts it at any multiple
        of the size's known power of two. A sub-vector straddles the edge when one of the
        cosets it forms (a group start XOR the span of its bits) has coordinates on both sides.
        Dims are tested one at a time, so a basis that moves two dims at once can make the
        answer narrower than necessary, never wider.
        """
        width = 1
        for j in range(len(vector)):
            moving, starts = vector[:j + 1], list(vector[j + 1:]) + list(others)
            if any(self._straddles(d, moving, starts) for d in range(self.rank)):
                break
            width *= 2
        return width

    def _straddles(self, d: int, moving: Sequence[Vec], starts: Sequence[Vec]) -> bool:
        if not any(vec[d] for vec in moving):
            return False
        extent = self.extents[d]
        size = self.facts.dims[d].size
        if size is not None:
            cuts: Sequence[int] = [size - ((size - 1) // extent) * extent]
        else:
            step = min(self.facts.dims[d].size_alignment, extent)
            cuts = range(step, extent, step)
        cuts = [p for p in cuts if p < extent]
        if not cuts:
            return False
        origins = _closure([vec[d] for vec in starts])
        coset = _closure([vec[d] for vec in moving])
        for origin in origins:
            values = [origin ^ w for w in coset]
            first, last = min(values), max(values)
            if any(first < p <= last for p in cuts):
                return True
        return False


def _closure(values: Sequence[int]) -> set[int]:
    """Every XOR of a subset of ``values`` (at most the dim's extent many)."""
    span = {0}
    for value in values:
        if value not in span:
            span |= {a ^ value for a in span}
    return span


def _vector_width_f2(layout: LinearLayout, facts: TensorFacts) -> VectorPlan:
    geometry = _Geometry(layout, facts)
    registers = geometry.registers
    eb = facts.elem_bytes
    k = 0
    while True:
        wider = 2 << k
        vector, rest = registers[:k + 1], registers[k + 1:] + geometry.threads
        if wider * eb > MAX_VECTOR_BYTES:
            limit, why = Limit.BYTE_CAP, f"{wider} x {eb} bytes exceeds {MAX_VECTOR_BYTES}"
        elif k >= len(registers):
            limit, why = Limit.REGISTER_CONTIGUITY, f"each thread holds only {1 << k} register(s)"
        elif not geometry.contiguous(vector, rest):
            if geometry.consecutive_coordinates(vector, rest):
                limit = Limit.STRIDE
                why = (f"registers 0..{wider - 1} hold consecutive elements of the "
                       "contiguous dim, whose stride is not known to be 1")
            else:
                limit = Limit.REGISTER_CONTIGUITY
                why = (f"register {1 << k} holds {list(registers[k])}, not the next "
                       f"{1 << k} elements after register 0, or other bases overlap them")
        elif facts.base_align % (wider * eb):
            limit = Limit.ALIGNMENT
            why = f"the base is {facts.base_align}-byte aligned, {wider * eb} bytes needed"
        elif not geometry.aligned(rest, wider):
            limit = Limit.STRIDE
            why = f"some group starts are not multiples of {wider} elements (the strides)"
        else:
            k += 1
            continue
        break
    elements = 1 << k
    return VectorPlan(
        elements=elements,
        elem_bytes=eb,
        register_masks=tuple(1 << j for j in range(k)),
        limit=limit,
        tail_elements=geometry.tail(registers[:k], registers[k:] + geometry.threads),
        explanation=why,
    )


def renumber_registers_for_vectors(
    layout: LinearLayout, facts: TensorFacts
) -> tuple[LinearLayout, tuple[int, ...]]:
    """Renumber a layout's registers so the widest vector comes first.

    Returns the renumbered layout and, for each of its register bits, the old register index
    it is (an invertible F2 change of register basis: every thread holds the same elements).
    New register bit ``j`` steps the address by ``2**j`` elements for as long as some
    combination of registers does so; the remaining bits are cleared of those address bits.
    """
    geometry = _Geometry(layout, facts)
    if not layout.has_in_dim(REGISTER) or not geometry.registers:
        return layout, ()
    registers = geometry.registers
    rank = geometry.rank
    count = len(registers)

    def solve(target: Vec) -> int | None:
        """A register index whose image is ``target`` (Gaussian elimination on the images)."""
        shifts = _flat_shifts([*registers, target])

        def flat(vec: Vec) -> int:
            return sum(x << s for x, s in zip(vec, shifts, strict=True))

        rows: dict[int, tuple[int, int]] = {}
        for i, reg in enumerate(registers):
            value, combo = flat(reg), 1 << i
            while value:
                top = value.bit_length() - 1
                if top not in rows:
                    rows[top] = (value, combo)
                    break
                value ^= rows[top][0]
                combo ^= rows[top][1]
        value, combo = flat(target), 0
        while value:
            top = value.bit_length() - 1
            if top not in rows:
                return None
            value ^= rows[top][0]
            combo ^= rows[top][1]
        return combo

    def image(index: int) -> Vec:
        acc = (0,) * rank
        for i in range(count):
            if index >> i & 1:
                acc = _xor(acc, registers[i])
        return acc

    chosen: list[int] = []
    for j in range(count):
        target = _address_step_target(geometry, j)
        if target is None:
            break
        index = solve(target)
        if index is None:
            break
        chosen.append(index)
    # complete to a register basis with old bits, in order, independent of the chosen ones
    basis = list(chosen)
    for i in range(count):
        candidate = 1 << i
        if _index_rank(basis + [candidate]) > len(basis):
            basis.append(candidate)
    # clear the vector's coordinate bits from the rest (chosen images are distinct unit bits)
    cleared = list(basis[:len(chosen)])
    for index in basis[len(chosen):]:
        for c_index in chosen:
            target = image(c_index)
            d = next(d for d in range(rank) if target[d])
            if image(index)[d] & target[d]:
                index ^= c_index
        cleared.append(index)
    out_positions = [layout.out_dims.index(f"dim{k}") for k in range(rank)]
    new_images = []
    for index in cleared:
        vec = image(index)
        ordered = [0] * rank
        for k, p in enumerate(out_positions):
            ordered[p] = vec[k]
        new_images.append(tuple(ordered))
    bases = dict(layout.bases)
    bases[REGISTER] = tuple(new_images)
    renumbered = LinearLayout(
        {name: bases[name] for name in layout.in_dims},
        [(name, layout.out_dim_size(name)) for name in layout.out_dims],
    )
    return renumbered, tuple(cleared)


def _index_rank(indices: Sequence[int]) -> int:
    pivots: dict[int, int] = {}
    for value in indices:
        while value:
            top = value.bit_length() - 1
            if top not in pivots:
                pivots[top] = value
                break
            value ^= pivots[top]
    return len(pivots)


def _address_step_target(geometry: _Geometry, j: int) -> Vec | None:
    """The tile coordinate one step of ``2**j`` elements away from the origin, if any.

    Within the tile's extent of the contiguous dim it is that dim's bit ``j``; past it, the
    bit of another known-stride dim whose weight is exactly ``2**j`` (a packed tile).
    """
    c = geometry.facts.contiguous_dim
    step = 1 << j
    rank = geometry.rank
    if c is not None and step < geometry.extents[c]:
        return tuple(step if d == c else 0 for d in range(rank))
    for d in range(rank):
        stride = geometry.strides[d]
        if d == c or stride is None or stride <= 0 or step % stride:
            continue
        bit = step // stride
        if bit & (bit - 1) == 0 and bit < geometry.extents[d]:
            return tuple(bit if e == d else 0 for e in range(rank))
    return None


def _vector_width_renumbered(layout: LinearLayout, facts: TensorFacts) -> VectorPlan:
    renumbered, old_indices = renumber_registers_for_vectors(layout, facts)
    plan = _vector_width_f2(renumbered, facts)
    masks = tuple(old_indices[j] for j in range(len(plan.register_masks)))
    return VectorPlan(plan.elements, plan.elem_bytes, masks, plan.limit, plan.tail_elements,
                      plan.explanation)


# --------------------------------------------------------------------------------------------
# Entry point


def vector_width(
    layout: LinearLayout | ThreadValueLayout | ElementTable,
    facts: TensorFacts,
    order: RegisterOrder = RegisterOrder.AS_IS,
) -> VectorPlan:
    """The widest contiguous, aligned access per thread (at most 16 bytes) and its limit.

    The answer holds for every tensor ``facts`` describes. ``order=RENUMBERED`` lets the
    vector use any registers of an F2 layout (codegen renumbers registers for free); for the
    other descriptions registers are consecutive.
    """
    if not isinstance(facts, TensorFacts):
        raise LayoutError(f"facts must be TensorFacts, got {type(facts).__name__}")
    if isinstance(layout, LinearLayout):
        if order is RegisterOrder.RENUMBERED:
            return _vector_width_renumbered(layout, facts)
        return _vector_width_f2(layout, facts)
    if isinstance(layout, ThreadValueLayout):
        return _vector_width_tv(layout, facts)
    if isinstance(layout, ElementTable):
        return _vector_width_table(layout, facts)
    raise LayoutError(
        f"vector_width takes a LinearLayout, ThreadValueLayout or ElementTable, got "
        f"{type(layout).__name__}"
    )


# The thread-value and table paths live in ``vectorize_tables``, which imports this module;
# re-exported here (and dispatched to by ``vector_width``), at the bottom, so that either module
# can be imported first.
from tilekit.layout.vectorize_tables import (  # noqa: E402, F401
    ElementTable,
    ThreadValueLayout,
    _vector_width_table,
    _vector_width_tv,
    blocked_thread_values,
)
