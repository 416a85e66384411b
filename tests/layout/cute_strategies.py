"""Hypothesis strategies and brute-force references for shape:stride layouts.

Other test modules import these: generated shapes mix sizes 1, primes, odd and composite
numbers and nest up to depth 3; strides include 0 (broadcast) and repeats. Pairs for
composition and tilers for divides are built so the operation is defined *by construction*
(from the mixed-radix digits of the left layout's domain), not by filtering on the code under
test.

The ``reference_*`` functions evaluate layouts straight from the definition (natural
coordinates, colexicographic order) without calling ``tilekit.layout``'s evaluation.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st

from tilekit.layout.cute import Layout
from tilekit.layout.inttuple import IntTuple

# Sizes a leaf may take: 1, primes, odd and even composites.
LEAF_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16)
STRIDE_VALUES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 30, 64)


# ---------------------------------------------------------------------------------------------
# References (independent of the code under test)


def reference_flatten(t: IntTuple) -> list[int]:
    if isinstance(t, tuple):
        return [x for sub in t for x in reference_flatten(sub)]
    return [t]


def reference_values(layout: Layout) -> list[int]:
    """``[layout(i) for i in range(size)]``, enumerating natural coordinates in colex order."""
    shapes = reference_flatten(layout.shape)
    strides = reference_flatten(layout.stride)
    values = []
    for rev in itertools.product(*(range(n) for n in reversed(shapes))):
        coord = rev[::-1]
        values.append(sum(c * d for c, d in zip(coord, strides, strict=False)))
    return values


def reference_eval(layout: Layout, index: int) -> int:
    """``layout(index)`` ``index >= 0``; past the size the last leaf of size > 1 is open."""
    shapes = reference_flatten(layout.shape)
    strides = reference_flatten(layout.stride)
    nontrivial = [k for k, n in enumerate(shapes) if n > 1]
    if not nontrivial:
        return 0
    last = nontrivial[-1]
    value = 0
    for k in nontrivial:
        if k == last:
            return value + index * strides[k]
        value += (index % shapes[k]) * strides[k]
        index //= shapes[k]
    raise AssertionError("unreachable")


def reference_coords(shape: IntTuple) -> list[IntTuple]:
    """Natural coordinates of ``shape`` (nested like it) in colexicographic order."""
    leaves = reference_flatten(shape)

    def nest(flat: Sequence[int], profile: IntTuple) -> tuple[IntTuple, int]:
        if isinstance(profile, tuple):
            out, used = [], 0
            for sub in profile:
                part, n = nest(flat[used:], sub)
                out.append(part)
                used += n
            return tuple(out), used
        return flat[0], 1

    result = []
    for rev in itertools.product(*(range(n) for n in reversed(leaves))):
        result.append(nest(rev[::-1], shape)[0])
    return result


def reference_injective(values: Sequence[int]) -> bool:
    return len(set(values)) == len(values)


# ---------------------------------------------------------------------------------------------
# Shapes and layouts


@st.composite
def nestings(draw: st.DrawFn, leaves: Sequence[int], max_depth: int = 3) -> IntTuple:
    """A random nested tuple whose flattening is ``leaves`` (a single leaf may stay an int)."""
    if len(leaves) == 1 and (max_depth == 0 or draw(st.booleans())):
        return leaves[0]
    if max_depth == 0:
        return tuple(leaves)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(leaves) - 1)), max_size=len(leaves) - 1)))
    cuts = [c for c in cuts if 0 < c < len(leaves)]
    groups = [leaves[a:b] for a, b in zip([0, *cuts], [*cuts, len(leaves)], strict=False)]
    return tuple(draw(nestings(g, max_depth - 1)) for g in groups)


@st.composite
def leaf_lists(
    draw: st.DrawFn, max_leaves: int = 4, max_size: int = 256, min_leaves: int = 1
) -> list[int]:
    """Leaf sizes with a bounded product, so brute-force checks stay cheap."""
    count = draw(st.integers(min_leaves, max_leaves))
    leaves: list[int] = []
    budget = max_size
    for _ in range(count):
        choices = [n for n in LEAF_SIZES if n <= budget]
        leaf = draw(st.sampled_from(choices))
        leaves.append(leaf)
        budget //= leaf
    return leaves


@st.composite
def shapes(
    draw: st.DrawFn, max_leaves: int = 4, max_size: int = 256, max_depth: int = 3
) -> IntTuple:
    return draw(nestings(draw(leaf_lists(max_leaves, max_size)), max_depth))


def _like(shape: IntTuple, leaves: Sequence[int]) -> IntTuple:
    it = iter(leaves)

    def build(p: IntTuple) -> IntTuple:
        if isinstance(p, tuple):
            return tuple(build(s) for s in p)
        return next(it)

    return build(shape)


@st.composite
def layouts(
    draw: st.DrawFn,
    max_leaves: int = 4,
    max_size: int = 256,
    max_depth: int = 3,
    negative: bool = False,
) -> Layout:
    """Any layout: strides from a mix of 0, small, odd and power-of-two values (maybe negative)."""
    shape = draw(shapes(max_leaves, max_size, max_depth))
    n = len(reference_flatten(shape))
    values = st.sampled_from(STRIDE_VALUES)
    if negative:
        values = st.one_of(values, values.map(lambda v: -v))
    strides = draw(st.lists(values, min_size=n, max_size=n))
    return Layout(shape, _like(shape, strides))


@st.composite
def tractable_layouts(
    draw: st.DrawFn,
    max_leaves: int = 4,
    max_size: int = 256,
    max_depth: int = 3,
    compact: bool = False,
) -> Layout:
    """Injective layouts whose modes, sorted by stride, nest: ``s_i*d_i | d_{i+1}``.

    Modes are placed in a random order; gaps between them (and a first stride > 1) leave holes
    unless ``compact``. Size-1 modes get arbitrary strides.
    """
    leaves = draw(leaf_lists(max_leaves, max_size))
    order = draw(st.permutations(range(len(leaves))))
    gap = st.just(1) if compact else st.sampled_from((1, 1, 1, 2, 3, 5))
    strides = [0] * len(leaves)
    running = draw(gap)
    for k in order:
        if leaves[k] == 1:
            strides[k] = draw(st.sampled_from(STRIDE_VALUES))
            continue
        strides[k] = running
        running *= leaves[k] * draw(gap)
    shape = draw(nestings(leaves, max_depth))
    return Layout(shape, _like(shape, strides))


def compact_layouts(
    max_leaves: int = 4, max_size: int = 256, max_depth: int = 3
) -> st.SearchStrategy[Layout]:
    """Bijections onto ``[0, size)``: permuted mixed-radix strides."""
    return tractable_layouts(max_leaves, max_size, max_depth, compact=True)


@st.composite
def interleaved_layouts(draw: st.DrawFn) -> Layout:
    """Injective layouts whose strides do not nest, e.g. ``(2,2):(1,3)`` or ``(4,2):(1,10)``."""
    s0 = draw(st.sampled_from((2, 3, 4, 5)))
    s1 = draw(st.sampled_from((2, 3, 4)))
    d1 = draw(st.integers(s0 + 1, 3 * s0 + 2).filter(lambda d: d % s0 != 0))
    return Layout((s0, s1), (1, d1))


@st.composite
def coalesced_layouts(draw: st.DrawFn, max_modes: int = 4, negative: bool = False) -> Layout:
    """Layouts in coalesce's normal form: no size-1 leaf (``1:0`` stands for size 1), depth 1,
    and no adjacent leaves ``s0:d0, s1:d1`` with ``d1 == s0 * d0``."""
    count = draw(st.integers(0, max_modes))
    sizes = [n for n in LEAF_SIZES if n > 1]
    # Strides 1 and 0 (contiguous and broadcast) half the time: the merges that matter most.
    values = st.one_of(st.sampled_from((1, 1, 0)), st.sampled_from(STRIDE_VALUES))
    if negative:
        values = st.one_of(values, values.map(lambda v: -v))
    shapes: list[int] = []
    strides: list[int] = []
    for _ in range(count):
        s = draw(st.sampled_from(sizes))
        ban = shapes[-1] * strides[-1] if shapes else None
        strides.append(draw(values.filter(lambda d, ban=ban: d != ban)))
        shapes.append(s)
    if not shapes:
        return Layout(1, 0)
    if len(shapes) == 1:
        return Layout(shapes[0], strides[0])
    return Layout(tuple(shapes), tuple(strides))


@st.composite
def split_layouts(draw: st.DrawFn, coalesced: Layout, max_depth: int = 3) -> Layout:
    """The function of ``coalesced`` written with more modes: each leaf ``s:d`` split into
    ordered factors ``a:d, b:a*d, ...``, size-1 leaves of any stride put anywhere, nested at
    random. ``coalesce`` must give ``coalesced`` back."""
    leaves: list[tuple[int, int]] = []
    for s, d in zip(reference_flatten(coalesced.shape), reference_flatten(coalesced.stride),
                    strict=False):
        if s == 1:
            continue
        step = d
        for factor in draw(st.sampled_from(_factorizations(s))):
            leaves.append((factor, step))
            step *= factor
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(leaves)))
        leaves.insert(at, (1, draw(st.sampled_from(STRIDE_VALUES))))
    if not leaves:
        leaves.append((1, draw(st.sampled_from(STRIDE_VALUES))))
    shape = draw(nestings([s for s, _ in leaves], max_depth))
    return Layout(shape, _like(shape, [d for _, d in leaves]))


# ---------------------------------------------------------------------------------------------
# Composable pairs and tilers, built from the left layout's domain digits


def _factorizations(n: int) -> list[list[int]]:
    """Ordered factorizations of ``n`` into factors > 1 (``[[n]]`` for primes)."""
    if n == 1:
        return [[]]
    out = [[n]]
    for f in range(2, n):
        if n % f == 0:
            out.extend([f, *rest] for rest in _factorizations(n // f))
    return out


@st.composite
def refined_digits(draw: st.DrawFn, shape: IntTuple, overflow: bool) -> list[int]:
    """Split each leaf of ``shape`` into ordered factors: a finer mixed radix of the same domain.

    With ``overflow``, one extra digit stands for indices past the size (the open last mode).
    """
    digits: list[int] = []
    for leaf in reference_flatten(shape):
        if leaf > 1:
            digits.extend(draw(st.sampled_from(_factorizations(leaf))))
    if overflow:
        digits.append(draw(st.integers(2, 3)))
    return digits


@st.composite
def digit_runs(
    draw: st.DrawFn, digits: Sequence[int], injective: bool = True
) -> list[tuple[int, int]]:
    """Modes ``(size, stride)`` made of disjoint contiguous runs of ``digits``, shuffled.

    Strides are the prefix products at the run starts, so every mode walks whole digits.
    Optionally adds broadcast (stride-0) and size-1 modes.
    """
    prefix = [1]
    for d in digits:
        prefix.append(prefix[-1] * d)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(digits) - 1)), max_size=len(digits))))
    cuts = [c for c in cuts if 0 < c < len(digits)]
    runs = [(a, b) for a, b in zip([0, *cuts], [*cuts, len(digits)], strict=False) if b > a]
    chosen = [r for r in runs if draw(st.booleans())]
    modes = [(prefix[b] // prefix[a], prefix[a]) for a, b in chosen]
    if not injective and draw(st.booleans()):
        modes.append((draw(st.sampled_from((2, 3))), 0))
    if draw(st.booleans()):
        modes.append((1, draw(st.sampled_from(STRIDE_VALUES))))
    if not modes:
        modes.append((1, 0))
    return draw(st.permutations(modes))


@st.composite
def layout_from_modes(
    draw: st.DrawFn, modes: Sequence[tuple[int, int]], max_depth: int = 2
) -> Layout:
    shape = draw(nestings([m[0] for m in modes], max_depth))
    return Layout(shape, _like(shape, [m[1] for m in modes]))


@st.composite
def composable_pairs(
    draw: st.DrawFn, max_size: int = 128, negative: bool = False
) -> tuple[Layout, Layout]:
    """``(A, B)`` with ``composition(A, B)`` defined: B's modes walk disjoint digits of A's domain.

    B may reach past ``size(A)`` (into A's open last mode), broadcast (stride 0) and carry
    size-1 modes; A is any layout.
    """
    a = draw(layouts(max_leaves=4, max_size=max_size, negative=negative))
    digits = draw(refined_digits(a.shape, overflow=draw(st.booleans())))
    modes = draw(digit_runs(digits, injective=False))
    return a, draw(layout_from_modes(modes))


@st.composite
def tile_layouts(draw: st.DrawFn, mode: Layout) -> Layout:
    """An injective tile of ``mode``'s domain (disjoint digit runs): a divide tiler for it."""
    digits = draw(refined_digits(mode.shape, overflow=False))
    modes = draw(digit_runs(digits, injective=True))
    return draw(layout_from_modes(modes))


@st.composite
def tilers_for(draw: st.DrawFn, a: Layout) -> tuple[object, ...]:
    """A by-mode tiler for ``a``: per mode ``None``, an int or a tile layout of that mode.

    Ints divide nested modes evenly (a product of leading digits); an int-shaped mode takes
    any size up to a few past its own, so ragged edges appear.
    """
    modes = a.modes()
    count = draw(st.integers(1, len(modes)))
    tiler: list[object] = []
    for mode in modes[:count]:
        kind = draw(st.sampled_from(("none", "int", "layout", "layout")))
        if kind == "none":
            tiler.append(None)
        elif kind == "int":
            if isinstance(mode.shape, int):
                tiler.append(draw(st.integers(1, mode.shape + 3)))
            else:
                digits = draw(refined_digits(mode.shape, overflow=False))
                k = draw(st.integers(0, len(digits)))
                tiler.append(int(np.prod(digits[:k], dtype=np.int64)))
        else:
            tiler.append(draw(tile_layouts(mode)))
    return tuple(tiler)


def cosize_bounds() -> st.SearchStrategy[int]:
    return st.integers(1, 300)
