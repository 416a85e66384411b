"""Layouts as plain data: the specs ``isl_lift`` lifts, and what is known of them without ISL.

Every layout kind is first turned into a frozen, hashable value (:class:`F2Spec`,
:class:`StridedSpec`, :class:`SwizzleSpec`, :class:`ComposedSpec`, or a
:class:`~tilekit.layout.piecewise.PiecewiseLayout`) by :func:`as_spec`; caches key on these
values. What can be answered from the data alone lives here too: concrete evaluation at a point
(:func:`evaluate`), the input box and names of a spec, the F2 reading of a power-of-two strided
layout (:func:`as_f2`), and sound interval/congruence bounds of the outputs
(:func:`value_ranges`).

Split out of ``isl_lift`` (which keeps the lifting to ISL, the decision ladder and the caches,
and re-exports the specs, :class:`InputView`, :func:`as_spec`, :class:`ValueRange` and
:func:`value_ranges`): the same classes, checks and values as before the split. No ISL here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeAlias

from tilekit.errors import LayoutError
from tilekit.layout.piecewise import ConstraintKind, PiecewiseLayout

__all__ = [
    "ComposedSpec",
    "F2Spec",
    "InputView",
    "LayoutSpec",
    "StridedSpec",
    "SwizzleSpec",
    "ValueRange",
    "as_f2",
    "as_spec",
    "box_sizes",
    "evaluate",
    "in_names",
    "in_rank",
    "open_leaf",
    "out_names",
    "unit_point",
    "value_ranges",
    "view_sizes",
]

# ------------------------------------------------------------------------------- plain-data specs


def _is_pow2(n: int) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class F2Spec:
    """An F2-linear layout as plain data: ``bases[d][i]`` is the image of bit ``i`` of in dim
    ``d`` (one int per out dim); an input maps to the XOR of the images of its set bits."""

    in_dims: tuple[tuple[str, int], ...]
    out_dims: tuple[tuple[str, int], ...]
    bases: tuple[tuple[tuple[int, ...], ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "in_dims", tuple((str(n), int(s)) for n, s in self.in_dims))
        object.__setattr__(self, "out_dims", tuple((str(n), int(s)) for n, s in self.out_dims))
        object.__setattr__(
            self, "bases", tuple(tuple(tuple(int(x) for x in im) for im in d) for d in self.bases)
        )
        if len(self.bases) != len(self.in_dims):
            raise LayoutError(f"{len(self.bases)} basis lists for {len(self.in_dims)} in dims")
        for name, size in self.in_dims + self.out_dims:
            if not _is_pow2(size):
                raise LayoutError(f"dim {name!r} has size {size}; F2 layouts need powers of two")
        for (name, size), images in zip(self.in_dims, self.bases, strict=True):
            if len(images) != size.bit_length() - 1:
                raise LayoutError(
                    f"in dim {name!r} of size {size} needs {size.bit_length() - 1} bases, "
                    f"got {len(images)}"
                )
            for image in images:
                if len(image) != len(self.out_dims) or any(
                    not 0 <= x < s for x, (_, s) in zip(image, self.out_dims, strict=True)
                ):
                    raise LayoutError(
                        f"basis {image} of {name!r} does not fit out dims {self.out_dims}"
                    )

    @property
    def in_sizes(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.in_dims)

    def bit_images(self) -> list[tuple[int, ...]]:
        """Images of all input bits, first in dim's bits first (the flat column order)."""
        return [image for images in self.bases for image in images]

    def evaluate(self, point: Sequence[int]) -> tuple[int, ...]:
        out = [0] * len(self.out_dims)
        for value, images in zip(point, self.bases, strict=True):
            for i, image in enumerate(images):
                if value >> i & 1:
                    out = [o ^ x for o, x in zip(out, image, strict=True)]
        return tuple(out)


@dataclass(frozen=True)
class StridedSpec:
    """A CuTe shape:stride layout as plain data: one input per top-level mode, each mode a
    flattened list of ``(size, stride)`` leaves, first leaf fastest (colexicographic)."""

    modes: tuple[tuple[tuple[int, int], ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "modes", tuple(tuple((int(s), int(d)) for s, d in m) for m in self.modes)
        )
        if not self.modes or any(not m for m in self.modes):
            raise LayoutError("a shape:stride layout needs at least one mode with one leaf")
        if any(s < 1 for m in self.modes for s, _ in m):
            raise LayoutError(f"mode sizes must be >= 1: {self.modes}")

    @classmethod
    def from_flat(cls, shape: Sequence[int], stride: Sequence[int]) -> StridedSpec:
        """Each flat (size, stride) its own mode: a rank-len(shape) layout."""
        if len(shape) != len(stride):
            raise LayoutError(f"shape {tuple(shape)} and stride {tuple(stride)} differ in length")
        return cls(tuple(((s, d),) for s, d in zip(shape, stride, strict=True)))

    @property
    def in_sizes(self) -> tuple[int, ...]:
        return tuple(math.prod(s for s, _ in m) for m in self.modes)

    @property
    def leaves(self) -> tuple[tuple[int, int], ...]:
        return tuple(leaf for m in self.modes for leaf in m)

    def evaluate(self, point: Sequence[int]) -> tuple[int, ...]:
        return (sum(_digits_value(x, m) for x, m in zip(point, self.modes, strict=True)),)

    def evaluate_index(self, index: int) -> int:
        """CuTe's int -> int function, past ``size`` too (the last leaf of size > 1 is open)."""
        if index < 0:
            raise LayoutError(f"negative index {index} into a shape:stride layout")
        return _digits_value(index, self.leaves)


def open_leaf(leaves: Sequence[tuple[int, int]]) -> int:
    """The index of the last leaf of size > 1, which takes an index past ``size`` (-1: none)."""
    for i in range(len(leaves) - 1, -1, -1):
        if leaves[i][0] > 1:
            return i
    return -1


def _digits_value(index: int, leaves: Sequence[tuple[int, int]]) -> int:
    """Split ``index`` into mixed-radix digits over ``leaves`` and take the strided sum."""
    open_at, total, rest = open_leaf(leaves), 0, index
    for i, (size, stride) in enumerate(leaves):
        if i == open_at:
            return total + rest * stride
        if size > 1:
            total += (rest % size) * stride
            rest //= size
    return total


@dataclass(frozen=True)
class SwizzleSpec:
    """CuTe's ``Swizzle<bits, base, shift>``: bit ``j`` of the zzz field gets XOR-ed with bit
    ``j + shift``; a bijection of the integers."""

    bits: int
    base: int
    shift: int

    def __post_init__(self) -> None:
        if self.bits < 0 or self.base < 0 or abs(self.shift) < self.bits:
            raise LayoutError(
                f"Swizzle<{self.bits},{self.base},{self.shift}> is malformed: "
                "it needs |shift| >= bits >= 0 and base >= 0"
            )

    @property
    def flipped_bits(self) -> range:
        low = self.base - min(0, self.shift)
        return range(low, low + self.bits)

    def apply(self, offset: int) -> int:
        for j in self.flipped_bits:
            offset ^= ((offset >> (j + self.shift)) & 1) << j
        return offset


@dataclass(frozen=True)
class ComposedSpec:
    """``outer(offset + inner(x))``: CuTe's ComposedLayout; ``outer`` is a swizzle or a
    shape:stride layout read as an int -> int function."""

    outer: SwizzleSpec | StridedSpec
    offset: int
    inner: StridedSpec

    @property
    def in_sizes(self) -> tuple[int, ...]:
        return self.inner.in_sizes

    def evaluate(self, point: Sequence[int]) -> tuple[int, ...]:
        y = self.offset + self.inner.evaluate(point)[0]
        if isinstance(self.outer, SwizzleSpec):
            return (self.outer.apply(y),)
        return (self.outer.evaluate_index(y),)


LayoutSpec: TypeAlias = F2Spec | StridedSpec | ComposedSpec | PiecewiseLayout


class InputView(Enum):
    """How inputs are indexed: one index per in dim (mode), or one colexicographic index."""

    MODES = "one index per in dim / top-level mode"
    INDEX = "one 1-D index, first dim fastest"


# ---------------------------------------------------------------------------------- adapters


def as_spec(layout: object) -> LayoutSpec:
    """Plain data for any supported layout object (LinearLayout, CuTe Layout / ComposedLayout)."""
    if isinstance(layout, (F2Spec, StridedSpec, ComposedSpec, PiecewiseLayout)):
        return layout
    try:
        from tilekit.layout.linear import LinearLayout
    except ImportError:  # pragma: no cover - the module is written in parallel
        LinearLayout = None  # type: ignore[assignment,misc]
    if LinearLayout is not None and isinstance(layout, LinearLayout):
        return F2Spec(
            tuple(layout.in_dim_sizes.items()),
            tuple((n, layout.out_dim_size(n)) for n in layout.out_dims),
            tuple(layout.bases[n] for n in layout.in_dims),
        )
    try:
        from tilekit.layout import cute
    except ImportError:  # pragma: no cover
        cute = None  # type: ignore[assignment]
    if cute is not None:
        if isinstance(layout, cute.Layout):
            return _strided_from_cute(layout, cute)
        if isinstance(layout, cute.ComposedLayout):
            outer = layout.outer
            outer_spec: SwizzleSpec | StridedSpec = (
                SwizzleSpec(outer.bits, outer.base, outer.shift)
                if isinstance(outer, cute.Swizzle)
                else StridedSpec((_strided_from_cute(outer, cute).leaves,))
            )
            return ComposedSpec(
                outer_spec, int(layout.offset), _strided_from_cute(layout.inner, cute)
            )
        if isinstance(layout, cute.Swizzle):
            raise LayoutError(
                f"a bare {layout} has no domain to lift",
                hints=["compose it with a layout: ComposedLayout(swizzle, 0, layout)"],
            )
    raise LayoutError(f"cannot lift {type(layout).__name__} to an integer map")


def _strided_from_cute(layout: Any, cute: Any) -> StridedSpec:
    from tilekit.layout.inttuple import flatten

    modes = layout.modes()
    return StridedSpec(
        tuple(tuple(zip(flatten(m.shape), flatten(m.stride), strict=True)) for m in modes)
    )


def box_sizes(spec: LayoutSpec) -> tuple[int, ...] | None:
    """Input extents when the domain is the box ``[0, size)`` per dim (None: not a known box)."""
    if not isinstance(spec, PiecewiseLayout):
        return spec.in_sizes
    d = spec.domain
    if d.params or any(
        c.kind is not ConstraintKind.NONNEG or len(c.expr.terms) != 1 for c in d.constraints
    ):
        return None
    box = d.bounding_box()
    if box is None or any(lo != 0 for lo, _ in box):
        return None
    return tuple(hi + 1 for _, hi in box)


def in_names(spec: LayoutSpec) -> tuple[str, ...]:
    """The input dims' names (``m0``, ``m1``... for a shape:stride layout's modes)."""
    if isinstance(spec, F2Spec):
        return tuple(n for n, _ in spec.in_dims)
    if isinstance(spec, PiecewiseLayout):
        return spec.domain.dims
    return tuple(f"m{k}" for k in range(len(spec.in_sizes)))


def out_names(spec: LayoutSpec) -> tuple[str, ...]:
    """The output dims' names (a shape:stride or composed layout has one, ``offset``)."""
    if isinstance(spec, F2Spec):
        return tuple(n for n, _ in spec.out_dims)
    if isinstance(spec, PiecewiseLayout):
        return spec.out_dims
    return ("offset",)


def _unflatten(index: int, sizes: Sequence[int]) -> tuple[int, ...]:
    coords = []
    for size in sizes:
        coords.append(index % size)
        index //= size
    return tuple(coords)


def evaluate(spec: LayoutSpec, point: Sequence[int], view: InputView) -> tuple[int, ...]:
    """Concrete evaluation, independent of ISL (the sample pre-check)."""
    if view is InputView.INDEX:
        sizes = box_sizes(spec)
        assert sizes is not None
        point = _unflatten(point[0], sizes)
    if isinstance(spec, PiecewiseLayout):
        return spec(*point)
    return spec.evaluate(point)


def in_rank(spec: LayoutSpec, view: InputView) -> int:
    """The number of inputs in ``view``."""
    return 1 if view is InputView.INDEX else len(in_names(spec))


def view_sizes(spec: LayoutSpec, view: InputView) -> tuple[int, ...] | None:
    """The input extents in ``view`` (None: the domain is not a known box)."""
    sizes = box_sizes(spec)
    if sizes is None or view is InputView.MODES:
        return sizes
    return (math.prod(sizes),)


def unit_point(spec: F2Spec, flat_bit: int) -> tuple[int, ...]:
    """The input with only flat input bit ``flat_bit`` set (first in dim's bits lowest)."""
    point = [0] * len(spec.in_dims)
    for d, images in enumerate(spec.bases):
        if flat_bit < len(images):
            point[d] = 1 << flat_bit
            break
        flat_bit -= len(images)
    return tuple(point)


def as_f2(spec: LayoutSpec) -> F2Spec | None:
    """The same function as an F2 layout, when it is one: power-of-two sizes, power-of-two (or
    zero) strides whose bit ranges never overlap (so + never carries, + is XOR), no offset, and
    at most a swizzle on top (XOR-linear). Otherwise None."""
    if isinstance(spec, F2Spec):
        return spec
    swizzle = None
    if isinstance(spec, ComposedSpec):
        if not isinstance(spec.outer, SwizzleSpec) or spec.offset:
            return None
        swizzle, spec = spec.outer, spec.inner
    if not isinstance(spec, StridedSpec):
        return None
    used, bases = 0, []
    for mode in spec.modes:
        images = []
        for size, stride in mode:
            if not _is_pow2(size) or stride < 0 or (stride and not _is_pow2(stride)):
                return None
            for i in range(size.bit_length() - 1):
                image = stride << i
                if image & used:
                    return None
                used |= image
                images.append(image)
        bases.append(images)
    if swizzle is not None:
        bases = [[swizzle.apply(v) for v in images] for images in bases]
    top = max([v.bit_length() for images in bases for v in images] + [0])
    return F2Spec(
        tuple((f"m{k}", size) for k, size in enumerate(spec.in_sizes)),
        (("offset", 1 << top),),
        tuple(tuple((v,) for v in images) for images in bases),
    )


# -------------------------------------------------------------------- interval/congruence summary


@dataclass(frozen=True)
class ValueRange:
    """One output's values lie in ``[lo, hi]`` and are ``residue`` mod ``modulus``.

    ``exact`` when ``lo``/``hi`` are attained, at ``argmin``/``argmax``.
    """

    lo: int
    hi: int
    modulus: int
    residue: int
    exact: bool
    argmin: tuple[int, ...] | None = None
    argmax: tuple[int, ...] | None = None

    @property
    def count_bound(self) -> int:
        """At most this many distinct values."""
        return (self.hi - self.lo) // self.modulus + 1 if self.hi >= self.lo else 0


def _f2_ranges(spec: F2Spec) -> tuple[ValueRange, ...]:
    """Exact extremes of each output over the span of its bases (Gaussian elimination)."""
    flat = [(d, i) for d, images in enumerate(spec.bases) for i in range(len(images))]
    images = spec.bit_images()
    ranges = []
    for e in range(len(spec.out_dims)):
        pivots: dict[int, tuple[int, int]] = {}  # leading bit -> (vector, input-bit mask)
        for k, image in enumerate(images):
            v, mask = image[e], 1 << k
            while v:
                top = v.bit_length() - 1
                if top not in pivots:
                    pivots[top] = (v, mask)
                    break
                v, mask = v ^ pivots[top][0], mask ^ pivots[top][1]
        best, best_mask = 0, 0
        for top in sorted(pivots, reverse=True):
            v, mask = pivots[top]
            if best ^ v > best:
                best, best_mask = best ^ v, best_mask ^ mask
        point = [0] * len(spec.in_dims)
        for k, (d, i) in enumerate(flat):
            if best_mask >> k & 1:
                point[d] |= 1 << i
        low_bits = 0
        for image in images:
            low_bits |= image[e]
        modulus = (low_bits & -low_bits) or 1
        zero = (0,) * len(spec.in_dims)
        ranges.append(ValueRange(0, best, modulus, 0, True, zero, tuple(point)))
    return tuple(ranges)


def _strided_range(spec: StridedSpec) -> ValueRange:
    """Exact extremes of ``sum(c * d)`` over the box, and the gcd of the strides."""
    lo = hi = 0
    arg_lo, arg_hi = [], []
    g = 0
    for mode in spec.modes:
        lo_leaf, hi_leaf = [], []
        for size, stride in mode:
            lo += min(0, (size - 1) * stride)
            hi += max(0, (size - 1) * stride)
            lo_leaf.append(size - 1 if stride < 0 else 0)
            hi_leaf.append(size - 1 if stride > 0 else 0)
            if size > 1:
                g = math.gcd(g, stride)
        arg_lo.append(_colex(lo_leaf, [s for s, _ in mode]))
        arg_hi.append(_colex(hi_leaf, [s for s, _ in mode]))
    modulus = abs(g) or 1
    return ValueRange(lo, hi, modulus, lo % modulus, True, tuple(arg_lo), tuple(arg_hi))


def _colex(digits: Sequence[int], sizes: Sequence[int]) -> int:
    index, place = 0, 1
    for digit, size in zip(digits, sizes, strict=True):
        index += digit * place
        place *= size
    return index


def value_ranges(layout: object) -> tuple[ValueRange, ...] | None:
    """Sound interval/congruence bounds of every output, without ISL (None: not known)."""
    spec = as_spec(layout)
    if isinstance(spec, F2Spec):
        return _f2_ranges(spec)
    if isinstance(spec, StridedSpec):
        return (_strided_range(spec),)
    if isinstance(spec, ComposedSpec) and isinstance(spec.outer, SwizzleSpec):
        inner = _strided_range(spec.inner)
        flipped = spec.outer.flipped_bits
        span = sum(1 << j for j in flipped)
        modulus = math.gcd(inner.modulus, 1 << flipped.start) if flipped else inner.modulus
        lo, hi = inner.lo + spec.offset - span, inner.hi + spec.offset + span
        return (ValueRange(lo, hi, modulus, (inner.residue + spec.offset) % modulus, False),)
    if isinstance(spec, PiecewiseLayout) and not spec.domain.params:
        return _piecewise_ranges(spec)
    return None


def _piecewise_ranges(spec: PiecewiseLayout) -> tuple[ValueRange, ...] | None:
    """Interval arithmetic over each piece's bounding box, joined over the pieces."""
    per_out: list[tuple[int, int, int, int | None]] = [
        (math.inf, -math.inf, 0, None)
    ] * spec.out_rank  # type: ignore[list-item]
    for piece in spec.pieces:
        box = spec.domain.with_guards(*piece.guard).bounding_box()
        if box is None:
            return None
        bounds = dict(zip(spec.domain.dims, box, strict=True))
        for e, out in enumerate(piece.outputs):
            lo = hi = out.constant
            g = 0
            for name, coeff in out.terms:
                a, z = coeff * bounds[name][0], coeff * bounds[name][1]
                lo, hi = lo + min(a, z), hi + max(a, z)
                if bounds[name][0] != bounds[name][1]:
                    g = math.gcd(g, coeff)
            base = out.constant + sum(c * bounds[n][0] for n, c in out.terms)
            old_lo, old_hi, old_g, old_base = per_out[e]
            if old_base is not None:
                g = math.gcd(math.gcd(g, old_g), base - old_base)
            per_out[e] = (
                min(old_lo, lo),
                max(old_hi, hi),
                g,
                base if old_base is None else old_base,
            )
    ranges = []
    for lo, hi, g, base in per_out:
        modulus = abs(g) or 1
        ranges.append(ValueRange(int(lo), int(hi), modulus, int(base) % modulus, False))
    return tuple(ranges)
