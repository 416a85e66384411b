"""Hypothesis strategies for LinearLayouts, and brute-force reference checkers.

Other test modules import these: ``layouts()`` for arbitrary layouts (zero
bases included), ``invertible_layouts()``, ``injective_layouts()``,
``surjective_layouts()``, ``composable_pairs()`` and ``covered_pairs()`` for
the laws of composition and conversion. Matrices are drawn as lists of
column ints and split into bases here, independently of the code under test
(``LinearLayout.from_matrix`` is *tested* against this, never used by it).

The reference checkers (``reference_apply``, ``all_inputs``,
``reference_image``) read only a layout's raw bases and dim sizes and
evaluate by definition (XOR of the images of set bits), so they can serve
as oracles for ``apply``, injectivity, rank and the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence

from hypothesis import strategies as st

from tilekit.layout.linear import LinearLayout

IN_NAMES = ("register", "lane", "warp", "block")
OUT_NAMES = ("dim0", "dim1", "dim2")

DimBits = list[tuple[str, int]]  # (name, number of bits)


# ------------------------------------------------------------------------------ reference checkers


def reference_apply(layout: LinearLayout, inputs: Mapping[str, int]) -> dict[str, int]:
    """Evaluate by definition: XOR the images of the set input bits, per out dim."""
    outs = list(layout.out_dims)
    result = [0] * len(outs)
    for name, images in layout.bases.items():
        value = inputs.get(name, 0)
        for bit, image in enumerate(images):
            if value >> bit & 1:
                result = [r ^ x for r, x in zip(result, image, strict=True)]
    return dict(zip(outs, result, strict=True))


def all_inputs(layout: LinearLayout) -> Iterator[dict[str, int]]:
    """Every input point (first in dim fastest), by enumerating each dim's range."""
    names = list(layout.bases)
    ranges = [range(2 ** len(layout.bases[n])) for n in names]
    for values in itertools.product(*reversed(ranges)):
        yield dict(zip(names, reversed(values), strict=True))


def flat_input(layout: LinearLayout, point: Mapping[str, int]) -> int:
    """Flat index of an input point, first in dim minor (by arithmetic, not bits)."""
    flat, scale = 0, 1
    for name, images in layout.bases.items():
        flat += point[name] * scale
        scale *= 2 ** len(images)
    return flat


def flat_output(layout: LinearLayout, point: Mapping[str, int]) -> int:
    """Flat index of an output point, first out dim minor."""
    flat, scale = 0, 1
    for name in layout.out_dims:
        flat += point[name] * scale
        scale *= layout.out_dim_size(name)
    return flat


def reference_image(layout: LinearLayout) -> set[tuple[int, ...]]:
    """The set of all outputs, by enumeration."""
    return {tuple(reference_apply(layout, p).values()) for p in all_inputs(layout)}


# ------------------------------------------------------------------------- matrices as column ints


def _split_column(column: int, outs: DimBits) -> tuple[int, ...]:
    values = []
    for _, bits in outs:
        values.append(column & ((1 << bits) - 1))
        column >>= bits
    return tuple(values)


def layout_from_columns(ins: DimBits, outs: DimBits, columns: Sequence[int]) -> LinearLayout:
    """Bases from flat columns (first dims in the low bits), via the public constructor."""
    bases: dict[str, list[tuple[int, ...]]] = {}
    position = 0
    for name, bits in ins:
        bases[name] = [_split_column(c, outs) for c in columns[position:position + bits]]
        position += bits
    return LinearLayout(bases, [(name, 2**bits) for name, bits in outs])


def _mat_mul(left: Sequence[int], right: Sequence[int]) -> list[int]:
    """Columns of left @ right over F2 (matrices as column lists)."""
    product = []
    for column in right:
        acc = 0
        for i, left_column in enumerate(left):
            if column >> i & 1:
                acc ^= left_column
        product.append(acc)
    return product


@st.composite
def invertible_matrices(draw: st.DrawFn, n: int) -> list[int]:
    """A uniformly-structured invertible n x n F2 matrix: P @ L @ U (every one is)."""
    perm = draw(st.permutations(range(n)))
    permutation = [1 << perm[i] for i in range(n)]
    lower = [(1 << j) | (draw(st.integers(0, 2**n - 1)) & ~((2 << j) - 1)) for j in range(n)]
    upper = [(1 << j) | (draw(st.integers(0, 2**n - 1)) & ((1 << j) - 1)) for j in range(n)]
    return _mat_mul(permutation, _mat_mul(lower, upper))


@st.composite
def dim_bits(
    draw: st.DrawFn, names: Sequence[str], total: int, min_dims: int = 0
) -> DimBits:
    """A random subset of ``names`` (kept in order) sharing ``total`` bits; dims may be size 1."""
    min_dims = max(min_dims, 1 if total else 0)
    count = draw(st.integers(min(min_dims, len(names)), len(names)))
    chosen = sorted(draw(st.permutations(range(len(names))))[:count])
    if not chosen:
        return []
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=count - 1, max_size=count - 1)))
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return [(names[i], bits) for i, bits in zip(chosen, parts, strict=True)]


# ------------------------------------------------------------------------------- layout strategies


@st.composite
def layouts(
    draw: st.DrawFn,
    *,
    in_names: Sequence[str] = IN_NAMES,
    out_names: Sequence[str] = OUT_NAMES,
    max_in_bits: int = 7,
    max_out_bits: int = 7,
    min_in_bits: int = 0,
    min_out_bits: int = 0,
) -> LinearLayout:
    """Arbitrary layouts: random dims (size 1 allowed), random bases, often zero bases."""
    ins = draw(dim_bits(in_names, draw(st.integers(min_in_bits, max_in_bits))))
    outs = draw(dim_bits(out_names, draw(st.integers(min_out_bits, max_out_bits))))
    n_out = sum(b for _, b in outs)
    n_in = sum(b for _, b in ins)
    column = st.one_of(st.just(0), st.integers(0, 2**n_out - 1), st.sampled_from(
        [1 << b for b in range(n_out)] or [0]))
    columns = draw(st.lists(column, min_size=n_in, max_size=n_in))
    return layout_from_columns(ins, outs, columns)


@st.composite
def invertible_layouts(
    draw: st.DrawFn,
    *,
    in_names: Sequence[str] = IN_NAMES,
    out_names: Sequence[str] = OUT_NAMES,
    max_bits: int = 8,
) -> LinearLayout:
    """Bijective layouts: an invertible matrix with its bits spread over random dims."""
    n = draw(st.integers(0, max_bits))
    columns = draw(invertible_matrices(n))
    return layout_from_columns(
        draw(dim_bits(in_names, n)), draw(dim_bits(out_names, n)), columns
    )


@st.composite
def injective_layouts(
    draw: st.DrawFn,
    *,
    in_names: Sequence[str] = IN_NAMES,
    out_names: Sequence[str] = OUT_NAMES,
    max_out_bits: int = 8,
) -> LinearLayout:
    """Injective layouts: the first columns of an invertible matrix (every one arises so)."""
    m = draw(st.integers(0, max_out_bits))
    n = draw(st.integers(0, m))
    columns = draw(invertible_matrices(m))[:n]
    return layout_from_columns(
        draw(dim_bits(in_names, n)), draw(dim_bits(out_names, m)), columns
    )


@st.composite
def surjective_layouts(
    draw: st.DrawFn,
    *,
    in_names: Sequence[str] = IN_NAMES,
    out_names: Sequence[str] = OUT_NAMES,
    max_in_bits: int = 8,
) -> LinearLayout:
    """Surjective layouts: a basis of the out space plus arbitrary columns, shuffled."""
    n = draw(st.integers(0, max_in_bits))
    m = draw(st.integers(0, n))
    columns = draw(invertible_matrices(m))
    columns += draw(st.lists(st.integers(0, 2**m - 1), min_size=n - m, max_size=n - m))
    columns = draw(st.permutations(columns))
    return layout_from_columns(
        draw(dim_bits(in_names, n)), draw(dim_bits(out_names, m)), list(columns)
    )


@st.composite
def composable_pairs(
    draw: st.DrawFn, max_bits: int = 6
) -> tuple[LinearLayout, LinearLayout]:
    """(inner, outer) where inner's outs are outer's ins, each at least as large."""
    inner = draw(layouts(max_in_bits=max_bits, max_out_bits=max_bits, out_names=("a", "b", "c")))
    outer_ins = []
    for name in inner.out_dims:
        extra = draw(st.integers(0, 2))
        outer_ins.append((name, inner.out_dim_size_log2(name) + extra))
    if draw(st.booleans()):
        outer_ins.append(("unused", draw(st.integers(0, 2))))
    outer_ins = list(draw(st.permutations(outer_ins)))
    outs = draw(dim_bits(OUT_NAMES, draw(st.integers(0, max_bits))))
    n_in = sum(b for _, b in outer_ins)
    n_out = sum(b for _, b in outs)
    columns = draw(st.lists(st.integers(0, 2**n_out - 1), min_size=n_in, max_size=n_in))
    return inner, layout_from_columns(outer_ins, outs, columns)


@st.composite
def covered_pairs(draw: st.DrawFn, max_bits: int = 6) -> tuple[LinearLayout, LinearLayout]:
    """(target, source) over the same out dims where target reaches every source image."""
    target = draw(layouts(max_in_bits=max_bits, max_out_bits=max_bits, min_out_bits=1))
    t_columns = [
        sum(v << s for v, s in zip(image, _offsets(target), strict=True))
        for images in target.bases.values() for image in images
    ]
    source_ins = draw(dim_bits(("x", "y"), draw(st.integers(0, max_bits))))
    n = sum(b for _, b in source_ins)
    columns = []
    for _ in range(n):
        picks = draw(st.lists(st.booleans(), min_size=len(t_columns), max_size=len(t_columns)))
        acc = 0
        for pick, column in zip(picks, t_columns, strict=True):
            if pick:
                acc ^= column
        columns.append(acc)
    outs = [(name, target.out_dim_size_log2(name)) for name in target.out_dims]
    source = layout_from_columns(source_ins, outs, columns)
    if draw(st.booleans()):
        source = source.transpose_outs(list(reversed(source.out_dims)))
    return target, source


def _offsets(layout: LinearLayout) -> list[int]:
    offsets, position = [], 0
    for name in layout.out_dims:
        offsets.append(position)
        position += layout.out_dim_size_log2(name)
    return offsets
