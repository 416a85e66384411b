"""Shape:stride layouts over the integers (CuTe's layout algebra), for any sizes and nestings.

A :class:`Layout` ``S:D`` is the function ``c -> <c, D>`` from the coordinates of shape ``S``
(equivalently from 1-D colexicographic indices ``[0, size)``) to integers. It covers ragged,
odd-sized and prime tiles that F2-linear layouts cannot express. The operations are CuTe's
(pycute's), each a small pure function whose docstring states what it preserves:

* ``coalesce`` / ``filter``: simplify without changing the int -> int function (or its image);
* ``composition(A, B)``: the layout of ``c -> A(B(c))`` on ``B``'s domain;
* ``complement(A, M)``: an ordered layout of the "rest" of ``[0, M)`` that ``A`` does not reach;
* ``right_inverse`` / ``left_inverse``;
* divides (``logical``/``zipped``/``tiled``/``flat``) and products (``logical``/``zipped``/
  ``tiled``/``flat``/``blocked``/``raked``), by whole layout or by mode through a *tiler*;
* ``Swizzle`` and ``ComposedLayout`` (swizzle o offset o layout), defined in
  :mod:`tilekit.layout.cute_swizzle` and re-exported here; the operations above accept a
  ``ComposedLayout`` and act on its inner layout.

An integer index past ``size`` runs on into the last mode of size > 1 (see
:mod:`tilekit.layout.inttuple`); composition and the ragged divides rely on that extension.

Where CuTe's checks are static asserts this module raises :class:`LayoutError` naming the
mode and sizes. Composition accepts two cases CuTe rejects but that are exact (a walk that ends
inside a mode without crossing it) and rejects one case CuTe computes wrongly (modes of ``B``
whose digits in ``A``'s mixed radix add with a carry), so ``R(c) == A(B(c))`` always holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from tilekit.errors import LayoutError
from tilekit.layout.cute_swizzle import ComposedLayout, Swizzle
from tilekit.layout.inttuple import (
    IntTuple,
    as_int_tuple,
    ceil_div,
    congruent,
    crd2idx,
    depth,
    flatten,
    format_int_tuple,
    is_int,
    is_tuple,
    parse_int_tuple,
    prefix_product,
    product,
    product_each,
    rank,
    suffix_product,
    unflatten,
)

__all__ = [
    "ComposedLayout",
    "Layout",
    "Swizzle",
    "Tiler",
    "blocked_product",
    "coalesce",
    "column_major",
    "complement",
    "composition",
    "filter",
    "flat_divide",
    "flat_product",
    "is_compact",
    "is_injective",
    "is_tractable",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "make_layout",
    "make_ordered_layout",
    "raked_product",
    "right_inverse",
    "row_major",
    "slice_and_offset",
    "tiled_divide",
    "tiled_product",
    "zipped_divide",
    "zipped_product",
]

# Brute-force decisions (injectivity of layouts that fail the cheap tests) enumerate the domain.
_BRUTE_FORCE_LIMIT = 1 << 26


# --------------------------------------------------------------------------------------------
# Layout


@dataclass(frozen=True, init=False, repr=False)
class Layout:
    """An immutable, hashable ``shape:stride`` pair; calling it maps coordinates to offsets.

    ``Layout((4, 8))`` is column-major (compact, first mode fastest). Equality is structural:
    ``(2,2):(1,2)`` and ``4:1`` are the same function but different layouts.
    """

    shape: IntTuple
    stride: IntTuple

    def __init__(self, shape: object, stride: object | None = None) -> None:
        shape_t = as_int_tuple(shape, "layout shape")
        if any(leaf < 1 for leaf in flatten(shape_t)):
            raise LayoutError(
                f"layout shape {format_int_tuple(shape_t)} has a mode of size < 1",
                hints=["every mode needs at least one element; use size-1 modes for 'nothing'"],
            )
        stride_t = prefix_product(shape_t) if stride is None else as_int_tuple(stride, "stride")
        if not congruent(shape_t, stride_t):
            raise LayoutError(
                f"shape {format_int_tuple(shape_t)} and stride {format_int_tuple(stride_t)} "
                "do not have the same nesting",
                hints=["give one stride per mode, nested like the shape"],
            )
        object.__setattr__(self, "shape", shape_t)
        object.__setattr__(self, "stride", stride_t)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """Read CuTe's notation ``(4,(2,3)):(1,(4,8))``; without ``:stride`` it is column-major."""
        parts = text.split(":")
        if len(parts) > 2:
            raise LayoutError(f"cannot parse layout {text!r}: more than one ':'")
        shape = parse_int_tuple(parts[0])
        return cls(shape, parse_int_tuple(parts[1]) if len(parts) == 2 else None)

    # -- sizes ---------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of coordinates in the domain."""
        return product(self.shape)

    @property
    def cosize(self) -> int:
        """Span of the image: ``1 + sum((s-1)*|d|)``, i.e. ``max + 1`` for nonnegative strides."""
        return 1 + sum(
            (s - 1) * abs(d)
            for s, d in zip(flatten(self.shape), flatten(self.stride), strict=False)
        )

    @property
    def rank(self) -> int:
        return rank(self.shape)

    @property
    def depth(self) -> int:
        return depth(self.shape)

    # -- modes -----------------------------------------------------------------------------

    def modes(self) -> tuple[Layout, ...]:
        """The top-level modes as layouts (an int-shaped layout is its own single mode)."""
        if is_tuple(self.shape):
            return tuple(Layout(s, d) for s, d in zip(self.shape, self.stride, strict=False))  # type: ignore
        return (self,)

    def __getitem__(self, index: int | slice) -> Layout:
        """Mode ``i`` as a layout, or the layout of modes ``i:j`` (CuTe's ``take``)."""
        modes = self.modes()
        if isinstance(index, slice):
            picked = modes[index]
            return make_layout(*picked)
        try:
            return modes[index]
        except IndexError:
            raise IndexError(f"layout {self} has {len(modes)} mode(s), no mode {index}") from None

    def flat(self) -> Layout:
        """Same function, nesting removed (an int-shaped layout stays int-shaped)."""
        if not is_tuple(self.shape):
            return self
        return Layout(flatten(self.shape), flatten(self.stride))

    # -- evaluation ------------------------------------------------------------------------

    def __call__(self, *coord: object) -> int | Layout:  # type: ignore[override]
        """Offset of an int index, a coordinate or a nested coordinate.

        ``layout(5)``, ``layout(1, 2)``, ``layout((1, (0, 2)))``. A ``None`` in the coordinate
        keeps that mode and returns the sliced layout (offset dropped, as CuTe does).
        """
        crd: object = coord[0] if len(coord) == 1 else tuple(coord)
        if _has_none(crd):
            return slice_and_offset(self, crd)[0]
        return crd2idx(as_int_tuple(crd, "coordinate"), self.shape, self.stride)

    def to_table(self, *, flat: bool = False) -> np.ndarray:
        """The function over its whole domain as an int64 array.

        By default the array has one axis per top-level mode (``table[i, j] == layout(i, j)``
        with ``i``, ``j`` 1-D indices within the modes); ``flat=True`` gives
        ``table[k] == layout(k)`` for ``k < size``.
        """
        values = _evaluate_indices(flatten(self.shape), flatten(self.stride), np.arange(self.size))
        if flat:
            return values
        axes = product_each(self.shape)
        return values.reshape(axes if is_tuple(axes) else (axes,), order="F")  # type: ignore

    def __str__(self) -> str:
        return f"{format_int_tuple(self.shape)}:{format_int_tuple(self.stride)}"

    __repr__ = __str__


def _has_none(crd: object) -> bool:
    if crd is None:
        return True
    return isinstance(crd, (tuple, list)) and any(_has_none(c) for c in crd)


def _evaluate_indices(leaves: Sequence[int], strides: Sequence[int], idx: np.ndarray) -> np.ndarray:
    """Vectorized int -> offset with the open last non-trivial leaf (see inttuple)."""
    rest = np.asarray(idx, dtype=np.int64).copy()
    out = np.zeros_like(rest)
    open_at = max((i for i, s in enumerate(leaves) if s > 1), default=-1)
    for i, (extent, step) in enumerate(zip(leaves, strides, strict=False)):
        if i == open_at:
            out += rest * step
            break
        if extent > 1:
            out += (rest % extent) * step
            rest //= extent
    return out


def slice_and_offset(layout: Layout, crd: object) -> tuple[Layout, int]:
    """Keep the modes where ``crd`` is ``None``; fix the others and return their offset.

    ``layout(crd) == sliced(rest) + offset`` for every coordinate ``rest`` of the kept modes.
    A top-level single kept mode is unwrapped (``(4,8):(1,4)`` sliced at ``(None, 2)`` is
    ``4:1`` with offset 8).
    """

    def walk(c: object, shape: IntTuple, stride: IntTuple) -> tuple[IntTuple | None, IntTuple, int]:
        if c is None:
            return shape, stride, 0
        if isinstance(c, (tuple, list)):
            if not is_tuple(shape) or len(c) != len(shape):  # type: ignore[arg-type]
                raise LayoutError(
                    f"coordinate {c!r} does not match shape {format_int_tuple(shape)}"
                )
            kept_s: list[IntTuple] = []
            kept_d: list[IntTuple] = []
            offset = 0
            for ci, si, di in zip(c, shape, stride, strict=False):  # type: ignore[arg-type]
                s, d, off = walk(ci, si, di)
                offset += off
                if s is not None:
                    kept_s.append(s)
                    kept_d.append(d)
            return tuple(kept_s), tuple(kept_d), offset
        return None, 0, crd2idx(as_int_tuple(c, "coordinate"), shape, stride)

    shape, stride, offset = walk(crd, layout.shape, layout.stride)
    if shape is None:
        return Layout(1, 0), offset
    if is_tuple(shape) and len(shape) == 1:  # type: ignore[arg-type]
        shape, stride = shape[0], stride[0]  # type: ignore[index]
    return Layout(shape, stride), offset


# --------------------------------------------------------------------------------------------
# Constructors


def make_layout(*layouts: Layout) -> Layout:
    """Concatenation ``(L0, L1, ...)``: mode ``i`` of the result is ``layouts[i]``."""
    for lay in layouts:
        if not isinstance(lay, Layout):
            raise LayoutError(f"make_layout takes layouts, got {lay!r}")
    return Layout(tuple(l.shape for l in layouts), tuple(l.stride for l in layouts))


def column_major(shape: IntTuple) -> Layout:
    """Compact layout, first leaf fastest (CuTe's LayoutLeft)."""
    return Layout(shape)


def row_major(shape: IntTuple) -> Layout:
    """Compact layout, last leaf fastest (CuTe's LayoutRight)."""
    shape_t = as_int_tuple(shape, "shape")
    return Layout(shape_t, suffix_product(shape_t))


def make_ordered_layout(shape: IntTuple, order: IntTuple | None = None) -> Layout:
    """Compact layout whose leaves get increasing strides in increasing ``order`` (ties: position).

    ``make_ordered_layout((2, 3, 4), (1, 2, 0))`` is ``(2,3,4):(4,8,1)``.
    """
    shape_t = as_int_tuple(shape, "shape")
    if order is None:
        return Layout(shape_t)
    order_t = as_int_tuple(order, "order")
    if not congruent(shape_t, order_t):
        raise LayoutError(
            f"order {format_int_tuple(order_t)} must be nested like shape "
            f"{format_int_tuple(shape_t)}"
        )
    leaves, keys = flatten(shape_t), flatten(order_t)
    strides = [0] * len(leaves)
    running = 1
    for i in sorted(range(len(leaves)), key=lambda i: (keys[i], i)):
        strides[i] = running
        running *= leaves[i]
    return Layout(shape_t, unflatten(strides, shape_t))


# --------------------------------------------------------------------------------------------
# Coalesce and filter


def _coalesce_leaves(shapes: Sequence[int], strides: Sequence[int]) -> Layout:
    """Drop size-1 leaves and merge ``s0:d0, s1:s0*d0`` into ``s0*s1:d0``; depth <= 1 result."""
    out_s: list[int] = []
    out_d: list[int] = []
    for s, d in zip(shapes, strides, strict=False):
        if s == 1:
            continue
        if out_s and out_s[-1] * out_d[-1] == d:
            out_s[-1] *= s
            continue
        out_s.append(s)
        out_d.append(d)
    if not out_s:
        return Layout(1, 0)
    if len(out_s) == 1:
        return Layout(out_s[0], out_d[0])
    return Layout(tuple(out_s), tuple(out_d))


def _by_mode(
    layout: Layout, profile: IntTuple, fn: Callable[[Layout, Any], Layout], what: str
) -> Layout:
    if len(profile) > layout.rank:  # type: ignore[arg-type]
        raise LayoutError(
            f"{what}: profile {format_int_tuple(profile)} has more modes than layout {layout}"
        )
    modes = layout.modes()
    done = [fn(modes[i], p) for i, p in enumerate(profile)]  # type: ignore[arg-type]
    return make_layout(*done, *modes[len(done) :])


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Fewest modes with the same int -> int function and size (also past ``size``).

    With a tuple ``profile``, coalesce each mode separately (values are only flags), keeping
    the layout's top-level rank: ``coalesce((2,(1,6)):(1,(6,2)), (1,1)) == (2,6):(1,2)``.
    """
    if profile is not None and is_tuple(profile):
        return _by_mode(layout, profile, coalesce, "coalesce")
    return _coalesce_leaves(flatten(layout.shape), flatten(layout.stride))


def filter(layout: Layout, profile: IntTuple | None = None) -> Layout:  # noqa: A001
    """Remove stride-0 and size-1 modes, then coalesce.

    Preserves the image and, on the coordinates whose stride-0 components are 0, the function
    (in colexicographic order of the remaining coordinates).
    """
    if profile is not None and is_tuple(profile):
        return _by_mode(layout, profile, filter, "filter")
    strides = flatten(layout.stride)
    shapes = [1 if d == 0 else s for s, d in zip(flatten(layout.shape), strides, strict=False)]
    return _coalesce_leaves(shapes, strides)


# --------------------------------------------------------------------------------------------
# Composition

Tiler: TypeAlias = Layout | int | None | tuple["Tiler", ...]


def _compose_mode(
    a_shapes: Sequence[int], a_strides: Sequence[int], s: int, d: int, a_text: str
) -> tuple[Layout, list[int]]:
    """``A o s:d`` for coalesced ``A`` and the largest digit the walk puts in each of A's modes.

    Divide ``d`` out of A's modes (stride divisibility), then keep ``s`` elements (shape
    divisibility); the last mode of ``A`` is open and needs neither.
    """
    usage = [0] * len(a_shapes)
    if s == 1 or d == 0:
        return Layout(s, 0), usage
    if len(a_shapes) == 1:
        return Layout(s, d * a_strides[0]), usage
    out_s: list[int] = []
    out_d: list[int] = []
    rest_stride, rest_shape = d, s
    for i in range(len(a_shapes) - 1):
        n, step = a_shapes[i], a_strides[i]
        if rest_stride % n == 0:  # the walk steps over this whole mode
            rest_stride //= n
            continue
        if n % rest_stride == 0:
            span = n // rest_stride
        elif (rest_shape - 1) * rest_stride < n:  # the whole walk ends inside this mode
            span = rest_shape
        else:
            raise LayoutError(
                f"composition {a_text} o {s}:{d}: stride {d} is not divisible by, and does not "
                f"divide into, mode {i} (size {n}) of the coalesced left layout "
                "(stride divisibility)",
                hints=[f"use a stride that is a multiple or a divisor of {n}"],
            )
        out_s.append(min(span, rest_shape))
        out_d.append(rest_stride * step)
        usage[i] = (min(span, rest_shape) - 1) * rest_stride
        if rest_shape <= span:
            break
        if rest_shape % span != 0:
            raise LayoutError(
                f"composition {a_text} o {s}:{d}: size {s} does not tile mode {i} "
                f"(size {n}, {span} element(s) left after the stride): {rest_shape} is not a "
                f"multiple of {span} (shape divisibility)",
                hints=[f"use a size that divides {span} or is a multiple of it"],
            )
        rest_shape //= span
        rest_stride = 1
    else:
        out_s.append(rest_shape)
        out_d.append(rest_stride * a_strides[-1])
    return _coalesce_leaves(out_s, out_d), usage


def composition(a: Layout | ComposedLayout | Swizzle, b: Tiler) -> Layout | ComposedLayout:
    """The layout ``R`` with ``R(c) == A(B(c))`` for every coordinate ``c`` of ``B``.

    ``R`` is compatible with ``B`` (same nesting and mode sizes). ``B`` may be a tiler: a tuple
    applies its entries to ``A``'s modes one by one (``None`` keeps a mode; modes of ``A`` past
    the tuple are dropped, as in current CuTe), and an int ``n`` means ``n:1``.
    """
    if isinstance(a, Swizzle):
        return ComposedLayout(a, 0, _as_tiler_layout(b, "composition"))
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.outer, a.offset, composition(a.inner, b))  # type: ignore[arg-type]
    if b is None:
        return a
    if isinstance(b, tuple):
        if len(b) > a.rank:
            raise LayoutError(f"composition: tiler {_tiler_text(b)} has more modes than {a}")
        modes = a.modes()
        return make_layout(*(composition(modes[i], t) for i, t in enumerate(b)))  # type: ignore
    b_lay = _as_tiler_layout(b, "composition")
    if any(d < 0 for d in flatten(b_lay.stride)):
        raise LayoutError(f"composition: the right layout {b_lay} has a negative stride")
    flat_a = coalesce(a)
    a_shapes, a_strides = flatten(flat_a.shape), flatten(flat_a.stride)
    a_text = str(a)
    usages: list[list[int]] = []

    def build(shape: IntTuple, stride: IntTuple) -> Layout:
        if is_tuple(shape):
            return make_layout(*(build(s, d) for s, d in zip(shape, stride, strict=False)))  # type: ignore
        lay, usage = _compose_mode(a_shapes, a_strides, shape, stride, a_text)  # type: ignore
        usages.append(usage)
        return lay

    result = build(b_lay.shape, b_lay.stride)
    for i in range(len(a_shapes) - 1):
        if sum(u[i] for u in usages) >= a_shapes[i]:
            raise LayoutError(
                f"composition {a} o {b_lay}: the modes of the right layout reach digits of "
                f"mode {i} (size {a_shapes[i]}) of the coalesced left layout {flat_a} that add "
                "up past its size, so A(B(c)) is not a layout (it carries between modes)",
                hints=[
                    "compose with each mode separately, or use a right layout whose modes "
                    "use disjoint parts of the left layout's modes"
                ],
            )
    return result


def _as_tiler_layout(b: object, what: str) -> Layout:
    if isinstance(b, Layout):
        return b
    if is_int(b):
        return Layout(int(b), 1)  # type: ignore[arg-type]
    raise LayoutError(f"{what}: expected a layout, an int, or a tuple of them; got {b!r}")


def _tiler_text(t: Tiler) -> str:
    if isinstance(t, tuple):
        return "<" + ",".join(_tiler_text(x) for x in t) + ">"
    return "_" if t is None else str(t)


# --------------------------------------------------------------------------------------------
# Complement and inverses


def _nonneg(layout: Layout, what: str) -> None:
    if any(d < 0 for d in flatten(layout.stride)):
        raise LayoutError(f"{what}: {layout} has a negative stride, which {what} does not support")


def complement(layout: Layout, cosize_bound: IntTuple | None = None) -> Layout:
    """An ordered layout of the offsets in ``[0, M)`` that ``layout`` does not reach.

    CuTe's postconditions, for ``R = complement(A, M)``: ``(A, R)`` is injective, ``R`` is
    strictly increasing, ``R(i) != A(j)`` for ``i >= 1``, ``cosize((A, R)) >= M`` and
    ``cosize(R) <= round_up(M, cosize(A))``. ``M`` defaults to ``cosize(filter(A))``; a tuple
    counts by its size. When ``filter(A)`` is tractable, ``(A, R)`` is compact: together they
    fill ``[0, size(A) * size(R))`` exactly; otherwise gaps between interleaved strides stay.
    """
    _nonneg(layout, "complement")
    flat = filter(layout)
    if cosize_bound is None:
        bound = flat.cosize
    else:
        bound = product(as_int_tuple(cosize_bound, "complement bound"))
        if bound < 1:
            raise LayoutError(f"complement: the bound {bound} must be at least 1")
    modes = sorted(
        (d, s)
        for s, d in zip(flatten(flat.shape), flatten(flat.stride), strict=False)
        if s > 1 and d != 0
    )
    out_s: list[int] = []
    out_d: list[int] = []
    covered = 1
    for d, s in modes:
        gap = d // covered
        if gap == 0:
            raise LayoutError(
                f"complement: {layout} is not injective or its modes interleave: stride {d} "
                f"falls inside the extent {covered} of the modes with smaller strides",
                hints=[
                    "complement needs layouts whose sorted modes do not overlap "
                    "(each stride >= the previous stride times its size)"
                ],
            )
        out_s.append(gap)
        out_d.append(covered)
        covered = s * d
    out_s.append(ceil_div(bound, covered))  # type: ignore[arg-type]
    out_d.append(covered)
    return _coalesce_leaves(out_s, out_d)


def right_inverse(layout: Layout) -> Layout:
    """A layout ``R`` with ``layout(R(i)) == i`` for ``i < size(R)``, as large as possible.

    It follows the chain of modes with strides ``1, s0, s0*s1, ...``: the contiguous run of
    offsets ``[0, size(R))`` that ``layout`` produces. ``1:0`` when 1 is not in the image.
    """
    _nonneg(layout, "right_inverse")
    flat = coalesce(layout)
    shapes, strides = flatten(flat.shape), flatten(flat.stride)
    positions = flatten(prefix_product(tuple(shapes)))
    out_s: list[int] = []
    out_d: list[int] = []
    want = 1
    while True:
        hit = next((i for i, d in enumerate(strides) if d == want and shapes[i] > 1), None)
        if hit is None:
            break
        out_s.append(shapes[hit])
        out_d.append(positions[hit])
        want = shapes[hit] * strides[hit]
    if not out_s:
        return Layout(1, 0)
    if len(out_s) == 1:
        return Layout(out_s[0], out_d[0])
    return Layout(tuple(out_s), tuple(out_d))


def left_inverse(layout: Layout) -> Layout:
    """A layout ``L`` with ``L(layout(i)) == i`` for every ``i < size(layout)``.

    Needs an injective layout whose filtered modes are tractable (so that ``(layout,
    complement(layout))`` is compact and ``L`` is its inverse).
    """
    _nonneg(layout, "left_inverse")
    for s, d in zip(flatten(layout.shape), flatten(layout.stride), strict=False):
        if s > 1 and d == 0:
            raise LayoutError(
                f"left_inverse: {layout} is not injective (a mode of size {s} has stride 0)"
            )
    if not is_tractable(filter(layout)):
        raise LayoutError(
            f"left_inverse: the modes of {layout} are not tractable (sorted by stride, some "
            "stride is not a multiple of the previous stride times its size), so no layout "
            "inverts it",
            hints=["reorder or pad the layout so that its strides nest"],
        )
    return right_inverse(make_layout(layout, complement(layout)))


# --------------------------------------------------------------------------------------------
# Predicates


def _nontrivial_leaves(layout: Layout) -> list[tuple[int, int]]:
    return [
        (s, d) for s, d in zip(flatten(layout.shape), flatten(layout.stride), strict=False) if s > 1
    ]


def is_injective(layout: Layout | ComposedLayout) -> bool:
    """Distinct coordinates map to distinct offsets (on the domain ``[0, size)``).

    Decided in O(rank log rank) when the strides, sorted by magnitude, each exceed everything
    the smaller ones can sum to; otherwise by enumerating the domain.
    """
    if isinstance(layout, ComposedLayout):
        if isinstance(layout.outer, Swizzle):  # a swizzle and a shift are bijections
            return is_injective(layout.inner)
        return _brute_force_injective(layout.to_table(flat=True))
    leaves = _nontrivial_leaves(layout)
    if any(d == 0 for _, d in leaves):
        return False
    reach = 0
    for s, d in sorted(leaves, key=lambda sd: abs(sd[1])):
        if abs(d) <= reach:
            return _brute_force_injective(layout.to_table(flat=True))
        reach += (s - 1) * abs(d)
    return True


def _brute_force_injective(values: np.ndarray) -> bool:
    if values.size > _BRUTE_FORCE_LIMIT:
        raise LayoutError(f"is_injective: a domain of {values.size} elements is too large to check")
    return np.unique(values).size == values.size


def is_compact(layout: Layout | ComposedLayout) -> bool:
    """The image is exactly ``[0, size)``, each offset hit once (a bijection onto it).

    For layouts this is a mixed-radix test: sorted by stride, the non-trivial modes have
    strides ``1, s0, s0*s1, ...`` (de Bruijn: every split of an interval into a direct sum of
    arithmetic progressions is of that form).
    """
    if isinstance(layout, ComposedLayout):
        values = layout.to_table(flat=True)
        return bool(np.array_equal(np.sort(values), np.arange(values.size)))
    expected = 1
    for s, d in sorted(_nontrivial_leaves(layout), key=lambda sd: sd[1]):
        if d != expected:
            return False
        expected = s * d
    return True


def is_tractable(layout: Layout) -> bool:
    """Tractable in the sense of Carlisle et al., "Categorical Foundations for CuTe Layouts".

    Flatten, give size-1 modes stride 0, sort by (stride, size); then for each consecutive pair
    with a nonzero lower stride, ``size_i * stride_i`` divides ``stride_{i+1}``. Tractable
    layouts are exactly those that come from morphisms of the category Tuple; complement is
    exact on them. Negative strides are never tractable.
    """
    pairs = [
        (0 if s == 1 else d, s)
        for s, d in zip(flatten(layout.shape), flatten(layout.stride), strict=False)
    ]
    if any(d < 0 for d, _ in pairs):
        return False
    pairs.sort()
    for (d_lo, s_lo), (d_hi, _) in zip(pairs, pairs[1:], strict=False):
        if d_lo != 0 and d_hi % (s_lo * d_lo) != 0:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Divide


def logical_divide(a: Layout | ComposedLayout, tiler: Tiler) -> Layout | ComposedLayout:
    """``A o (B, complement(B, size(A)))``: mode 0 is the tile ``B``, mode 1 walks the tiles.

    A tuple tiler divides mode by mode (``None`` keeps a mode; modes past the tuple are kept);
    an int ``n`` means ``n:1``, so ``(3, 5)`` tiles 3x5. When ``B`` does not divide ``A`` the
    last tile runs past ``size(A)`` through ``A``'s open last mode (a ragged edge).
    """
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.outer, a.offset, logical_divide(a.inner, tiler))  # type: ignore
    if tiler is None:
        return a
    if isinstance(tiler, tuple):
        return _by_mode_tiler(a, tiler, logical_divide, "logical_divide")
    tile = _as_tiler_layout(tiler, "logical_divide")
    return composition(a, make_layout(tile, complement(tile, a.size)))  # type: ignore[return-value]


def _by_mode_tiler(
    a: Layout, tiler: tuple[Tiler, ...], fn: Callable[[Layout, Any], Layout], what: str
) -> Layout:
    if len(tiler) > a.rank:
        raise LayoutError(f"{what}: tiler {_tiler_text(tiler)} has more modes than layout {a}")
    modes = a.modes()
    done = [fn(modes[i], t) for i, t in enumerate(tiler)]
    return make_layout(*done, *modes[len(done) :])


def _split_tiles(layout: Layout, tiler: Tiler, what: str) -> tuple[Layout, Layout]:
    """Gather the (tile, rest) pairs that a by-mode divide/product left at the tiler's leaves."""
    if isinstance(tiler, tuple):
        modes = layout.modes()
        tiles: list[Layout] = []
        rests: list[Layout] = []
        for i, sub in enumerate(tiler):
            tile, rest = _split_tiles(modes[i], sub, what)
            tiles.append(tile)
            rests.append(rest)
        return make_layout(*tiles), make_layout(*rests, *modes[len(tiler) :])
    if tiler is None:
        raise LayoutError(f"{what}: a None (keep) entry in the tiler has no tile to gather")
    return layout[0], layout[1]


def zipped_divide(a: Layout | ComposedLayout, tiler: Tiler) -> Layout | ComposedLayout:
    """``((TileM,TileN,...), (RestM,RestN,...,L,...))``: ``logical_divide``'s modes, regrouped."""
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.outer, a.offset, zipped_divide(a.inner, tiler))  # type: ignore
    tile, rest = _split_tiles(logical_divide(a, tiler), tiler, "zipped_divide")  # type: ignore
    return make_layout(tile, rest)


def tiled_divide(a: Layout | ComposedLayout, tiler: Tiler) -> Layout | ComposedLayout:
    """``((TileM,TileN,...), RestM, RestN, ..., L, ...)``; a rest of rank 1 stays one mode."""
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.outer, a.offset, tiled_divide(a.inner, tiler))  # type: ignore
    zipped = zipped_divide(a, tiler)
    return make_layout(zipped[0], *_unpack(zipped[1]))  # type: ignore[index]


def flat_divide(a: Layout | ComposedLayout, tiler: Tiler) -> Layout | ComposedLayout:
    """``(TileM, TileN, ..., RestM, RestN, ..., L, ...)``; a part of rank 1 stays one mode."""
    if isinstance(a, ComposedLayout):
        return ComposedLayout(a.outer, a.offset, flat_divide(a.inner, tiler))  # type: ignore
    zipped = zipped_divide(a, tiler)
    return make_layout(*_unpack(zipped[0]), *_unpack(zipped[1]))  # type: ignore[index]


def _unpack(part: Layout) -> tuple[Layout, ...]:
    """The top-level modes of a zipped result's part, as CuTe slices them out with
    ``repeat<rank>(_)``: a part of rank 1 (``_``) is kept whole, ``(6):(1)`` included."""
    return part.modes() if part.rank > 1 else (part,)


# --------------------------------------------------------------------------------------------
# Product


def logical_product(a: Layout, tiler: Tiler) -> Layout:
    """``(A, complement(A, size(A)*cosize(B)) o B)``: mode 0 is ``A``, mode 1 places copies of it.

    Each element of ``B`` becomes a copy of ``A`` shifted into the room ``A`` leaves free. A
    tuple tiler multiplies mode by mode (``None`` keeps a mode); an int ``n`` means ``n:1``.
    """
    if not isinstance(a, Layout):
        raise LayoutError(f"logical_product: expected a layout, got {a!r}")
    if tiler is None:
        return a
    if isinstance(tiler, tuple):
        return _by_mode_tiler(a, tiler, logical_product, "logical_product")
    b = _as_tiler_layout(tiler, "logical_product")
    _nonneg(b, "logical_product")
    rest = complement(a, a.size * b.cosize)
    return make_layout(a, composition(rest, b))  # type: ignore[arg-type]


def zipped_product(a: Layout, tiler: Tiler) -> Layout:
    """``((M,N,...), (TileM,TileN,...,L,...))``."""
    block, rest = _split_tiles(logical_product(a, tiler), tiler, "zipped_product")
    return make_layout(block, rest)


def tiled_product(a: Layout, tiler: Tiler) -> Layout:
    """``((M,N,...), TileM, TileN, ..., L, ...)``; a rest of rank 1 stays one mode."""
    zipped = zipped_product(a, tiler)
    return make_layout(zipped[0], *_unpack(zipped[1]))


def flat_product(a: Layout, tiler: Tiler) -> Layout:
    """``(M, N, ..., TileM, TileN, ..., L, ...)``; a part of rank 1 stays one mode."""
    zipped = zipped_product(a, tiler)
    return make_layout(*_unpack(zipped[0]), *_unpack(zipped[1]))


def _append_to_rank(layout: Layout, target: int) -> Layout:
    """CuTe's ``append<R>``: pad with ``1:0`` modes up to rank ``target`` (an int-shaped layout
    becomes a tuple only when padded)."""
    if layout.rank == target:
        return layout
    return make_layout(*layout.modes(), *([Layout(1, 0)] * (target - layout.rank)))


def _zip(first: Layout, second: Layout) -> Layout:
    """CuTe's ``zip`` of two layouts of rank ``r``: mode ``k`` is ``(first_k, second_k)``.

    At rank 1 an int-shaped ``first`` is paired whole with ``second`` whole (``5:1`` and
    ``4:5`` give ``((5,4)):((1,5))``), a 1-tuple by its single mode. Where CuTe refuses the
    ranks (a 1-tuple with an int, or a rank-1 product whose ``B'`` came out with more modes
    than the int-shaped ``B``) each side that is not a 1-tuple is taken whole.
    """
    if first.rank > 1 and second.rank == first.rank:
        return make_layout(*(make_layout(f, t) for f, t in zip(first.modes(), second.modes())))

    def single(x: Layout) -> Layout:
        return x[0] if is_tuple(x.shape) and x.rank == 1 else x

    pair = (single(first), single(second) if is_tuple(first.shape) else second)
    return make_layout(make_layout(*pair))


def _rank_sensitive_product(a: Layout, b: Layout | IntTuple, raked: bool) -> Layout:
    if not isinstance(a, Layout):
        name = "raked_product" if raked else "blocked_product"
        raise LayoutError(f"{name}: expected a layout, got {a!r}")
    if not isinstance(b, Layout):
        b = Layout(as_int_tuple(b, "product tiler"))
    r = max(a.rank, b.rank)
    prod = logical_product(_append_to_rank(a, r), _append_to_rank(b, r))
    return _zip(prod[1], prod[0]) if raked else _zip(prod[0], prod[1])


def blocked_product(a: Layout, b: Layout | IntTuple) -> Layout:
    """Tile ``A`` as contiguous blocks arranged by ``B``: mode ``k`` is ``(A_k, B_k)``.

    ``logical_product`` of ``A`` and ``B``, both padded with ``1:0`` modes to rank ``max(rank
    A, rank B)``, its like modes zipped: rank ``max(rank A, rank B)``, so ``blocked_product(
    8:1, 2:4)`` is the rank-1 ``((8,2)):((1,32))``. A shape ``B`` means the column-major
    layout of that shape. Nothing is coalesced (CuTe coalesced each mode up to CUTLASS 3.7;
    its documentation still says so, its code has not since 3.8).
    """
    return _rank_sensitive_product(a, b, raked=False)


def raked_product(a: Layout, b: Layout | IntTuple) -> Layout:
    """Interleave copies of ``A`` by ``B`` (a cyclic distribution): mode ``k`` is
    ``(B_k, A_k)``, else as :func:`blocked_product`. ``raked_product(5:1, 4:1)`` is
    ``((4,5)):((5,1))``: index ``4*i + j`` holds element ``i`` of copy ``j`` (offset ``5*j +
    i``), where ``blocked_product`` has it at index ``5*j + i``."""
    return _rank_sensitive_product(a, b, raked=True)
