"""Shape:stride layouts: algebraic laws on generated layouts, CuTe's worked examples, errors.

Expected answers come from the brute-force references in ``cute_strategies`` (natural
coordinates enumerated by definition), never from the code under test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.layout.cute_strategies import (
    coalesced_layouts,
    compact_layouts,
    composable_pairs,
    cosize_bounds,
    interleaved_layouts,
    layouts,
    reference_coords,
    reference_eval,
    reference_flatten,
    reference_injective,
    reference_values,
    split_layouts,
    tile_layouts,
    tilers_for,
    tractable_layouts,
)
from tilekit.errors import LayoutError
from tilekit.layout.cute import (
    ComposedLayout,
    Layout,
    Swizzle,
    blocked_product,
    coalesce,
    column_major,
    complement,
    composition,
    filter,
    flat_divide,
    flat_product,
    is_compact,
    is_injective,
    is_tractable,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    make_ordered_layout,
    raked_product,
    right_inverse,
    row_major,
    slice_and_offset,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)

P = Layout.parse


def values(layout: Layout) -> list[int]:
    return reference_values(layout)


def same_function(a: Layout, b: Layout) -> bool:
    """Equal as int -> int functions on the (common) domain."""
    return a.size == b.size and values(a) == values(b)


def reference_compatible(a, b) -> bool:
    if isinstance(a, tuple):
        return (
            isinstance(b, tuple)
            and len(a) == len(b)
            and all(reference_compatible(x, y) for x, y in zip(a, b, strict=False))
        )
    return a == math.prod(reference_flatten(b))


def nonneg(layout: Layout) -> bool:
    return all(d >= 0 for d in reference_flatten(layout.stride))


# ---------------------------------------------------------------------------------------------
# The Layout object


def test_default_stride_is_column_major():
    assert Layout((4, (2, 3))).stride == (1, (4, 8))
    assert Layout(7).stride == 1
    assert column_major((2, 3)) == Layout((2, 3), (1, 2))


@pytest.mark.parametrize(
    ("shape", "stride", "message"),
    [
        ((4, 2), (1, (2, 3)), "do not have the same nesting"),
        ((4, 0), (1, 4), "size < 1"),
        ((4, True), None, "expected an int"),
        ("4", None, "expected an int"),
    ],
)
def test_malformed_layouts_are_rejected(shape, stride, message):
    with pytest.raises(LayoutError, match=message):
        Layout(shape, stride)


@given(layouts(negative=True))
def test_text_round_trip_and_hashing(layout):
    text = str(layout)
    again = Layout.parse(text)
    assert again == layout and hash(again) == hash(layout)
    assert repr(layout) == text


def test_cute_notation():
    assert str(P("(4,(2,3)):(1,(4,8))")) == "(4,(2,3)):(1,(4,8))"
    assert str(Layout((4,), (1,))) == "(4):(1)"
    assert P("(4):(1)") != P("4:1")
    assert P("(_8,_64):(_64,_1)") == Layout((8, 64), (64, 1))
    assert P("(4,8)") == Layout((4, 8))
    with pytest.raises(LayoutError, match="more than one ':'"):
        P("4:1:2")
    with pytest.raises(LayoutError, match="cannot parse"):
        P("(4,8):(1")


@given(layouts(negative=True))
def test_evaluation_matches_the_definition(layout):
    expected = values(layout)
    assert layout.to_table(flat=True).tolist() == expected
    coords = reference_coords(layout.shape)
    assert [layout(c) for c in coords] == expected
    assert [layout(i) for i in range(layout.size)] == expected
    assert layout.size == len(expected)
    assert layout.cosize == max(expected) - min(expected) + 1  # the span of the image


@given(layouts())
def test_by_mode_table(layout):
    table = layout.to_table()
    assert table.ndim == layout.rank
    for idx in itertools.product(*(range(n) for n in table.shape)):
        coord = idx if isinstance(layout.shape, tuple) else idx[0]
        assert table[idx] == layout(coord)


@given(layouts(), st.integers(0, 60))
def test_indices_past_the_size_extend_through_the_last_nontrivial_mode(layout, extra):
    index = layout.size + extra
    assert layout(index) == reference_eval(layout, index)


def test_call_accepts_ints_coordinates_and_nested_coordinates():
    layout = P("(4,(2,3)):(1,(4,8))")
    assert layout(1, (1, 2)) == layout((1, (1, 2))) == 1 + 4 + 16
    assert layout(1, 5) == 1 + 4 + 16  # an int for the (2,3) mode
    assert layout(1 + 4 * 5) == 21
    assert layout.rank == 2 and layout.depth == 2 and layout.size == 24 and layout.cosize == 24
    with pytest.raises(LayoutError, match="does not match shape"):
        layout(1, 2, 3)


def test_modes_and_slicing():
    layout = P("(4,(2,3),5):(1,(4,8),24)")
    assert layout[1] == P("(2,3):(4,8)")
    assert layout[-1] == P("5:24")
    assert layout[0:2] == P("(4,(2,3)):(1,(4,8))")
    assert P("7:3")[0] == P("7:3")
    assert layout.flat() == P("(4,2,3,5):(1,4,8,24)")
    with pytest.raises(IndexError, match="no mode 3"):
        layout[3]
    sliced, offset = slice_and_offset(P("(4,8):(1,4)"), (None, 2))
    assert (sliced, offset) == (P("4:1"), 8)
    assert P("(4,8):(1,4)")(None, 2) == P("4:1")
    assert P("(4,(2,3)):(1,(4,8))")(None, (None, 1)) == P("(4,(2)):(1,(4))")


@given(layouts(), st.data())
def test_slice_plus_offset_is_the_function(layout, data):
    assume(isinstance(layout.shape, tuple) and len(layout.shape) >= 2)
    keep = [data.draw(st.booleans()) for _ in layout.shape]
    fixed = [data.draw(st.integers(0, math.prod(reference_flatten(s)) - 1)) for s in layout.shape]
    crd = tuple(None if k else f for k, f in zip(keep, fixed, strict=False))
    sliced, offset = slice_and_offset(layout, crd)
    kept = [i for i, k in enumerate(keep) if k]
    sizes = [math.prod(reference_flatten(layout.shape[i])) for i in kept]
    for rest in itertools.product(*(range(n) for n in sizes)):
        full = list(fixed)
        for i, r in zip(kept, rest, strict=False):
            full[i] = r
        expected = layout(tuple(full))
        if not kept:
            got = offset
        elif len(kept) == 1:
            got = sliced(rest[0]) + offset
        else:
            got = sliced(rest) + offset
        assert got == expected


# ---------------------------------------------------------------------------------------------
# Coalesce and filter


def assert_coalesced(result: Layout) -> None:
    """coalesce's normal form: depth <= 1, no size-1 leaf but a lone ``1:0``, and no adjacent
    leaves ``s0:d0, s1:d1`` with ``d1 == s0 * d0`` (those would merge into ``s0*s1:d0``)."""
    shapes, strides = reference_flatten(result.shape), reference_flatten(result.stride)
    assert result.depth <= 1, f"{result} is nested"
    if result != Layout(1, 0):
        assert all(s > 1 for s in shapes), f"{result} keeps a size-1 leaf"
    mergeable = [
        k
        for k, (s0, d0, d1) in enumerate(zip(shapes, strides, strides[1:], strict=False))
        if d1 == s0 * d0
    ]
    assert not mergeable, f"{result}: leaves {mergeable} would merge with the next one"


@given(layouts(negative=True))
def test_coalesce_preserves_the_function_and_size(layout):
    result = coalesce(layout)
    assert result.size == layout.size
    for i in range(2 * layout.size + 3):
        assert reference_eval(result, i) == reference_eval(layout, i)
    assert_coalesced(result)


@given(coalesced_layouts(negative=True).flatmap(lambda c: st.tuples(st.just(c), split_layouts(c))))
def test_coalesce_merges_every_split_back(pair):
    """Random layouts rarely have mergeable neighbours; these are all made of them (stride-1,
    stride-0, negative and other strides, size-1 leaves between), so coalesce must undo every
    split to give the normal form it was split from."""
    coalesced, split = pair
    assert coalesce(split) == coalesced


@pytest.mark.parametrize("stride", [1, 0, 3, -2])
def test_coalesce_merges_every_pair_of_sizes(stride):
    for a, b in itertools.product(range(1, 17), repeat=2):
        merged = Layout(a * b, stride) if a * b > 1 else Layout(1, 0)
        assert coalesce(Layout((a, b), (stride, a * stride))) == merged
        assert coalesce(Layout((2, (a, b)), (5, (stride, a * stride))), (1, 1))[1] == merged


@given(layouts())
def test_by_mode_coalesce_keeps_the_modes(layout):
    assume(isinstance(layout.shape, tuple))
    profile = (1,) * len(layout.shape)
    result = coalesce(layout, profile)
    assert result.rank == layout.rank
    for mode, got in zip(layout.modes(), result.modes(), strict=False):
        assert same_function(mode, got)
        assert_coalesced(got)


@given(st.lists(coalesced_layouts(max_modes=3, negative=True), min_size=1, max_size=3), st.data())
def test_by_mode_coalesce_merges_every_split_mode_back(modes, data):
    split = make_layout(*(data.draw(split_layouts(m)) for m in modes))
    assert coalesce(split, (1,) * len(modes)) == make_layout(*modes)
    assert coalesce(split) == coalesce(make_layout(*modes))


def test_coalesce_examples_from_the_cute_docs():
    layout = P("(2,(1,6)):(1,(6,2))")
    assert coalesce(layout) == P("12:1")
    assert coalesce(layout, (1, 1)) == P("(2,6):(1,2)")
    assert coalesce(P("(2,4):(1,2)")) == P("8:1")
    assert coalesce(P("(1,1):(5,7)")) == P("1:0")
    with pytest.raises(LayoutError, match="more modes"):
        coalesce(P("(2,4):(1,2)"), (1, 1, 1))


@given(layouts())
def test_filter_keeps_the_image_and_the_nonzero_part(layout):
    result = filter(layout)
    assert set(values(result)) == set(values(layout))
    shapes, strides = reference_flatten(layout.shape), reference_flatten(layout.stride)
    restricted = [
        sum(c * d for c, d in zip(coord, strides, strict=False))
        for rev in itertools.product(*(range(n) for n in reversed(shapes)))
        for coord in [rev[::-1]]
        if all(c == 0 for c, d in zip(coord, strides, strict=False) if d == 0)
    ]
    assert values(result) == restricted
    if result != Layout(1, 0):
        assert 0 not in reference_flatten(result.stride)
        assert 1 not in reference_flatten(result.shape)


def test_filter_by_mode():
    layout = P("((2,3),(4,1)):((0,1),(3,9))")
    assert filter(layout) == P("12:1")
    assert filter(layout, (1, 1)) == P("(3,4):(1,3)")
    assert filter(P("(2,(4,5)):(0,(0,1))"), (1, 1)) == P("(1,5):(0,1)")


# ---------------------------------------------------------------------------------------------
# Composition


def check_composition(a: Layout, b: Layout, result: Layout) -> None:
    assert reference_compatible(b.shape, result.shape)
    assert values(result) == [reference_eval(a, bi) for bi in values(b)]


@given(composable_pairs())
def test_composition_is_function_composition(pair):
    a, b = pair
    check_composition(a, b, composition(a, b))


@settings(max_examples=50)
@given(composable_pairs(negative=True))
def test_composition_with_negative_strides_on_the_left(pair):
    a, b = pair
    check_composition(a, b, composition(a, b))


@given(layouts(max_leaves=3, max_size=64), layouts(max_leaves=3, max_size=64))
def test_composition_of_arbitrary_layouts_is_right_or_refused(a, b):
    try:
        result = composition(a, b)
    except LayoutError as err:
        assert "composition" in str(err) and "divisib" in str(err) or "carries" in str(err)
        return
    check_composition(a, b, result)


@given(layouts(max_size=128), st.data())
def test_composition_by_mode(a, data):
    tiler = data.draw(tilers_for(a))
    result = composition(a, tiler)
    assert result.rank == len(tiler)  # modes past the tiler are dropped
    for k, t in enumerate(tiler):
        mode = a.modes()[k]
        got = result.modes()[k]
        if t is None:
            assert got == mode
            continue
        tile = t if isinstance(t, Layout) else Layout(t, 1)
        check_composition(mode, tile, got)
    ints = tuple(t for t in tiler if isinstance(t, int))
    if len(ints) == len(tiler):
        assert result == composition(a, tuple(Layout(t, 1) for t in tiler))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("(6,2):(8,2)", "(4,3):(3,1)", "((2,2),3):((24,2),8)"),
        ("20:2", "(5,4):(4,1)", "(5,4):(8,2)"),
        ("(10,2):(16,4)", "(5,4):(1,5)", "(5,(2,2)):(16,(80,4))"),
        # (3,6,2,8):(w,x,y,z) o 16:9 = (1,2,2,4):(9w,3x,y,z), size-1 mode coalesced away
        ("(3,6,2,8):(1000,100,10,1)", "16:9", "(2,2,4):(300,10,1)"),
    ],
)
def test_composition_examples_from_the_cute_docs(a, b, expected):
    result = composition(P(a), P(b))
    assert result == P(expected)
    check_composition(P(a), P(b), result)


def test_composition_with_tilers_from_the_cute_docs():
    a = P("(12,(4,8)):(59,(13,1))")
    assert composition(a, (P("3:4"), P("8:2"))) == P("(3,(2,4)):(236,(26,1))")
    assert composition(a, (3, 8)) == P("(3,(4,2)):(59,(13,1))")
    assert composition(a, 5) == composition(a, P("5:1"))
    assert composition(a, (None, 8)) == make_layout(a[0], composition(a[1], 8))


def test_composition_refuses_misaligned_strides_and_sizes():
    a = P("(6,5):(1,10)")
    with pytest.raises(LayoutError, match=r"stride 4 .* mode 0 \(size 6\).*stride divisibility"):
        composition(a, P("3:4"))
    with pytest.raises(
        LayoutError, match=r"size 5 does not tile mode 0 \(size 6.*shape divisibility"
    ):
        composition(a, P("5:2"))
    with pytest.raises(LayoutError, match="negative stride"):
        composition(a, P("2:-1"))
    with pytest.raises(LayoutError, match="more modes"):
        composition(a, (2, 2, 2))
    with pytest.raises(LayoutError, match="expected a layout"):
        composition(a, "3:1")


def test_composition_refuses_modes_that_carry_into_each_other():
    # B = (3,2):(2,3) is injective (0,2,4,3,5,7), and each mode composes with A on its own;
    # CuTe returns (3,2):(2,3), but A(B(2,1)) = A(7) = A(1,1) = 11, not 7.
    a, b = P("(6,5):(1,10)"), P("(3,2):(2,3)")
    assert reference_eval(a, 7) == 11
    with pytest.raises(LayoutError, match="carries between modes"):
        composition(a, b)


def test_composition_accepts_walks_that_end_inside_a_mode():
    # CuTe's static checks reject these (2 and 3 do not divide each other), yet both are exact.
    a = P("(3,5):(1,10)")
    assert composition(a, P("2:1")) == P("2:1")
    assert composition(a, P("2:2")) == P("2:2")
    assert composition(a, P("(2,5):(1,3)")) == P("(2,5):(1,10)")


# ---------------------------------------------------------------------------------------------
# Complement


@pytest.mark.parametrize(
    ("a", "bound", "expected"),
    [
        ("4:1", 24, "6:4"),
        ("6:4", 24, "4:1"),
        ("(4,6):(1,4)", 24, "1:0"),
        ("4:2", 24, "(2,3):(1,8)"),
        ("(2,4):(1,6)", 24, "3:2"),
        ("(2,2):(1,6)", 24, "(3,2):(2,12)"),
    ],
)
def test_complement_examples_from_the_cute_docs(a, bound, expected):
    assert complement(P(a), bound) == P(expected)


def check_complement_core(a: Layout, bound: int, result: Layout) -> None:
    """CuTe's postconditions that hold for every injective layout: ordered, disjoint, injective."""
    rv, av = values(result), values(a)
    assert all(x < y for x, y in zip(rv, rv[1:], strict=False))  # ordered
    assert not set(rv[1:]) & set(av)  # disjoint codomains (except 0)
    assert reference_injective(values(make_layout(a, result)))
    assert nonneg(result)


@given(tractable_layouts(), cosize_bounds())
def test_complement_of_a_tractable_layout_fills_the_bound(a, bound):
    result = complement(a, bound)
    check_complement_core(a, bound, result)
    completed = make_layout(a, result)
    covered = values(completed)
    # Together they are compact: every offset in [0, size(A) * size(R)) exactly once ...
    assert sorted(covered) == list(range(a.size * result.size))
    # ... which is the smallest multiple of A's extent E (its largest size*stride) reaching M.
    extent = max(
        [
            s * d
            for s, d in zip(reference_flatten(a.shape), reference_flatten(a.stride), strict=False)
            if s > 1
        ]
        or [1]
    )
    assert completed.cosize >= bound
    assert completed.cosize == -(-bound // extent) * extent


@given(st.one_of(interleaved_layouts(), layouts(max_leaves=3)), cosize_bounds())
def test_complement_of_any_injective_layout_is_ordered_and_disjoint(a, bound):
    assume(reference_injective(values(a)))
    try:
        result = complement(a, bound)
    except LayoutError as err:
        assert "interleave" in str(err)
        return
    check_complement_core(a, bound, result)


def test_complement_defaults_and_degenerate_layouts():
    assert complement(P("(2,4):(1,6)")) == complement(P("(2,4):(1,6)"), 1 + 1 + 18)
    assert complement(P("1:0"), 5) == P("5:1")
    assert complement(P("(3,1):(0,7)"), 4) == P("4:1")
    assert complement(P("4:1"), (2, 6)) == complement(P("4:1"), 12)


def test_complement_of_interleaved_layouts_keeps_cutes_floor():
    # Non-tractable: CuTe floors 8 / 6 to one gap and the concatenation falls short of the
    # bound, breaking CuTe's stated "cosize(A, R) >= M" (it only holds for tractable A).
    a = P("(2,3):(8,2)")
    result = complement(a, 160)
    assert result == P("(2,10):(1,16)")
    assert make_layout(a, result).cosize == 158
    check_complement_core(a, 160, result)


def test_cute_upper_bound_on_the_complement_is_not_general():
    # CuTe's docs also state cosize(R) <= round_up(M, cosize(A)); here cosize(A) = 33 and
    # round_up(289, 33) = 297, yet the (unique, ordered) complement reaches 303.
    a = P("3:16")
    result = complement(a, 289)
    assert result == P("(16,7):(1,48)")
    assert result.cosize == 1 + 15 + 6 * 48 > 297


@pytest.mark.parametrize(
    ("a", "message"),
    [
        ("(2,2):(4,4)", "not injective or its modes interleave"),
        ("(2,2):(2,3)", "stride 3 falls inside the extent 4"),
        ("(2,2):(1,-2)", "negative stride"),
    ],
)
def test_complement_refusals(a, message):
    with pytest.raises(LayoutError, match=message):
        complement(P(a), 24)


def test_complement_bound_must_be_positive():
    with pytest.raises(LayoutError, match="at least 1"):
        complement(P("4:1"), 0)


# ---------------------------------------------------------------------------------------------
# Inverses


@given(layouts())
def test_right_inverse_law(a):
    inverse = right_inverse(a)
    for i, x in enumerate(values(inverse)):
        assert reference_eval(a, x) == i


@given(compact_layouts())
def test_inverses_of_a_compact_layout_are_its_inverse_permutation(a):
    r, l = right_inverse(a), left_inverse(a)
    assert r.size == a.size
    av, rv, lv = values(a), values(r), values(l)
    assert [av[x] for x in rv] == list(range(a.size))
    assert [lv[x] for x in av] == list(range(a.size))


@given(tractable_layouts())
def test_left_inverse_law(a):
    inverse = left_inverse(a)
    for i, x in enumerate(values(a)):
        assert reference_eval(inverse, x) == i


def test_inverse_examples():
    assert right_inverse(P("(4,8):(8,1)")) == P("(8,4):(4,1)")
    assert right_inverse(P("(2,4):(0,1)")) == P("4:2")
    assert right_inverse(P("4:2")) == P("1:0")
    assert left_inverse(P("4:2")) == P("(2,4):(4,1)")
    assert left_inverse(P("(2,4):(1,6)")) == P("(2,3,4):(1,8,2)")


@pytest.mark.parametrize(
    ("a", "message"),
    [
        ("(2,3):(0,1)", "not injective"),
        ("(2,2):(1,3)", "not tractable"),
        ("4:-1", "negative stride"),
    ],
)
def test_left_inverse_refusals(a, message):
    with pytest.raises(LayoutError, match=message):
        left_inverse(P(a))


# ---------------------------------------------------------------------------------------------
# Predicates


@given(st.one_of(layouts(negative=True), interleaved_layouts(), tractable_layouts()))
def test_is_injective_matches_brute_force(a):
    assert is_injective(a) == reference_injective(values(a))


@given(st.one_of(layouts(), compact_layouts(), tractable_layouts()))
def test_is_compact_matches_brute_force(a):
    assert is_compact(a) == (sorted(values(a)) == list(range(a.size)))


@given(compact_layouts())
def test_generated_compact_layouts_are_compact(a):
    assert is_compact(a) and is_injective(a) and is_tractable(a)


def reference_tractable(a: Layout) -> bool:
    """Pairwise form: for distinct non-trivial modes i, j with 0 < d_i <= d_j, s_i*d_i | d_j."""
    modes = [
        (s, d)
        for s, d in zip(reference_flatten(a.shape), reference_flatten(a.stride), strict=False)
        if s > 1 and d != 0
    ]
    if any(d < 0 for _, d in modes):
        return False
    return all(
        dj % (si * di) == 0
        for (i, (si, di)), (j, (_, dj)) in itertools.permutations(enumerate(modes), 2)
        if di <= dj
    )


@given(st.one_of(layouts(), interleaved_layouts(), tractable_layouts()))
def test_is_tractable_matches_the_pairwise_definition(a):
    assert is_tractable(a) == reference_tractable(a)


@given(layouts())
def test_tractable_layouts_without_broadcast_are_injective(a):
    nontrivial = [
        d
        for s, d in zip(reference_flatten(a.shape), reference_flatten(a.stride), strict=False)
        if s > 1
    ]
    if is_tractable(a) and 0 not in nontrivial:
        assert reference_injective(values(a))


def test_tractability_examples():
    assert is_tractable(P("(2,4):(1,6)"))
    assert is_tractable(P("(4,1):(1,3)"))  # a size-1 mode's stride does not matter
    assert not is_tractable(P("(2,2):(1,3)"))
    assert not is_tractable(P("(4,2):(1,10)"))
    assert not is_tractable(P("(2,2):(4,4)"))
    assert is_tractable(P("(2,2):(0,0)"))


# ---------------------------------------------------------------------------------------------
# Divide


@given(layouts(max_size=128), st.data())
def test_logical_divide_by_a_layout(a, data):
    tile = data.draw(tile_layouts(a))
    rest = complement(tile, a.size)
    result = logical_divide(a, tile)
    assert result.rank == 2
    assert same_function(result, composition(a, make_layout(tile, rest)))
    check_composition(a, tile, result[0])
    check_composition(a, rest, result[1])
    assert result.size == tile.size * rest.size


def divide_views(a: Layout, tiler: tuple) -> None:
    """logical/zipped/tiled/flat divides are one function with regrouped modes."""
    logical = logical_divide(a, tiler)
    zipped, tiled, flat = zipped_divide(a, tiler), tiled_divide(a, tiler), flat_divide(a, tiler)
    k = len(tiler)
    extra = a.modes()[k:]
    tiles = [logical[i][0].size for i in range(k)]
    rests = [logical[i][1].size for i in range(k)]
    extras = [m.size for m in extra]
    assert zipped.rank == 2 and tiled.rank == 1 + k + len(extra)
    assert flat.rank == 2 * k + len(extra)
    assert sorted(
        zip(reference_flatten(logical.shape), reference_flatten(logical.stride), strict=False)
    ) == sorted(zip(reference_flatten(flat.shape), reference_flatten(flat.stride), strict=False))
    for t in itertools.product(*(range(n) for n in tiles)):
        for r in itertools.product(*(range(n) for n in rests)):
            for e in itertools.product(*(range(n) for n in extras)):
                expected = logical(tuple((ti, ri) for ti, ri in zip(t, r, strict=False)) + e)
                assert zipped(tuple(t), tuple(r) + e) == expected
                assert tiled(tuple(t), *r, *e) == expected
                assert flat(*t, *r, *e) == expected


@settings(max_examples=60)
@given(layouts(max_size=96), st.data())
def test_divide_by_mode_and_its_regroupings(a, data):
    tiler = data.draw(tilers_for(a))
    result = logical_divide(a, tiler)
    assert result.rank == a.rank
    for k, mode in enumerate(a.modes()):
        got = result.modes()[k]
        t = tiler[k] if k < len(tiler) else None
        if t is None:
            assert got == mode
            continue
        tile = t if isinstance(t, Layout) else Layout(t, 1)
        check_composition(mode, tile, got[0])
        assert got == logical_divide(mode, tile)
    if None not in tiler:
        divide_views(a, tiler)
        assert zipped_divide(a, tiler)[0] == composition(a, tiler)
        spelled = tuple(Layout(t, 1) if isinstance(t, int) else t for t in tiler)
        assert logical_divide(a, spelled) == result
        assert zipped_divide(a, spelled) == zipped_divide(a, tiler)


def test_integer_tiler_equals_its_layout_spelling():
    a = row_major((9, 20))
    assert logical_divide(a, (3, 5)) == logical_divide(a, (P("3:1"), P("5:1")))
    assert logical_divide(a, (3, 5)) == P("((3,3),(5,4)):((20,60),(1,5))")
    assert logical_divide(P("24:1"), 4) == logical_divide(P("24:1"), P("4:1"))


def test_ragged_divide_runs_past_the_edge():
    # 7 x 10 row-major, tiles of 3 x 4: three row tiles (the last 2 rows past the edge),
    # three column tiles; every element is where the open last mode puts it.
    a = row_major((7, 10))
    result = zipped_divide(a, (3, 4))
    assert result.shape == ((3, 4), (3, 3))
    for (ti, tj), (ri, rj) in itertools.product(
        itertools.product(range(3), range(4)), itertools.product(range(3), range(3))
    ):
        row, col = ti + 3 * ri, tj + 4 * rj
        assert result((ti, tj), (ri, rj)) == 10 * row + col
    assert logical_divide(P("10:1"), 3) == P("(3,4):(1,3)")


def test_divide_examples_from_the_cute_docs():
    assert logical_divide(P("(4,2,3):(2,1,8)"), P("4:2")) == P("((2,2),(2,3)):((4,1),(2,8))")
    a = P("(9,(4,8)):(59,(13,1))")
    tiler = (P("3:3"), P("(2,4):(1,8)"))
    ld = logical_divide(a, tiler)
    assert [[m.size for m in mode.modes()] for mode in ld.modes()] == [[3, 3], [8, 4]]
    assert make_layout(ld[0][0], ld[1][0]) == P("(3,(2,4)):(177,(13,2))")
    assert make_layout(ld[0][0], ld[1][0]) == composition(a, tiler)
    zd = zipped_divide(a, tiler)
    assert [[m.size for m in mode.modes()] for mode in zd.modes()] == [[3, 8], [3, 4]]
    assert zd[0] == composition(a, tiler)


def test_divide_refusals():
    with pytest.raises(LayoutError, match="more modes"):
        logical_divide(P("(4,4):(1,4)"), (2, 2, 2))
    with pytest.raises(LayoutError, match="None"):
        zipped_divide(P("(4,4):(1,4)"), (2, None))


# ---------------------------------------------------------------------------------------------
# Product


@given(tractable_layouts(max_size=32), layouts(max_leaves=3, max_size=16))
def test_logical_product_keeps_a_and_replicates_it(a, b):
    try:
        result = logical_product(a, b)
    except LayoutError as err:
        assert "composition" in str(err)
        return
    assert result[0] == a
    assert result.size == a.size * b.size
    assert reference_compatible(b.shape, result[1].shape)
    check_composition(complement(a, a.size * b.cosize), b, result[1])  # its definition
    if reference_injective(values(b)):
        assert reference_injective(values(result))


@given(compact_layouts(max_size=32), layouts(max_leaves=3, max_size=16))
def test_logical_product_of_a_compact_block_scales_b(a, b):
    result = logical_product(a, b)
    assert result[0] == a
    assert values(result[1]) == [a.size * x for x in values(b)]


def test_product_examples_from_the_cute_docs():
    a = P("(2,2):(4,1)")
    assert complement(a, 24) == P("(2,3):(2,8)")
    assert logical_product(a, P("6:1")) == P("((2,2),(2,3)):((4,1),(2,8))")
    assert logical_product(a, 6) == logical_product(a, P("6:1"))


def block_and_tiler():
    block = st.tuples(st.integers(1, 5), st.integers(1, 5), st.booleans()).map(
        lambda t: row_major(t[:2]) if t[2] else column_major(t[:2])
    )
    return block, layouts(max_leaves=3, max_size=24, max_depth=2).filter(
        lambda b: isinstance(b.shape, tuple) and len(b.shape) == 2
    )


@given(*block_and_tiler())
def test_blocked_and_raked_products_place_compact_blocks(a, b):
    blocked, raked = blocked_product(a, b), raked_product(a, b)
    a_sizes = [m.size for m in a.modes()]
    b_sizes = [m.size for m in b.modes()]
    assert [m.size for m in blocked.modes()] == [
        x * y for x, y in zip(a_sizes, b_sizes, strict=False)
    ]
    assert [m.size for m in raked.modes()] == [
        x * y for x, y in zip(a_sizes, b_sizes, strict=False)
    ]
    b_modes = [values(m) for m in b.modes()]
    a_table = np.array(values(a)).reshape(a_sizes, order="F")
    blocked_table, raked_table = blocked.to_table(), raked.to_table()
    for x0, x1 in itertools.product(
        *(range(x * y) for x, y in zip(a_sizes, b_sizes, strict=False))
    ):
        i, big = (x0 % a_sizes[0], x1 % a_sizes[1]), (x0 // a_sizes[0], x1 // a_sizes[1])
        expected = a_table[i] + a.size * (b_modes[0][big[0]] + b_modes[1][big[1]])
        assert blocked_table[x0, x1] == expected
        big, i = (x0 % b_sizes[0], x1 % b_sizes[1]), (x0 // b_sizes[0], x1 // b_sizes[1])
        expected = a_table[i] + a.size * (b_modes[0][big[0]] + b_modes[1][big[1]])
        assert raked_table[x0, x1] == expected
    last = tuple(n - 1 for n in blocked_table.shape)
    assert blocked(*last) == blocked_table[last] and raked(*last) == raked_table[last]


def test_blocked_product_from_the_cute_docs():
    # "A 2x5 row-major layout is arranged as a tile in a 3x4 column-major arrangement". The
    # docs show mode 0 coalesced to 6:5; CuTe's code has not coalesced since CUTLASS 3.8, and
    # these are the answers of its headers (tests/layout/cute_golden.json has more).
    block, tiler = row_major((2, 5)), column_major((3, 4))
    result = blocked_product(block, tiler)
    assert result == P("((2,3),(5,4)):((5,10),(1,30))")
    for r, c in itertools.product(range(6), range(20)):
        tile = (r // 2) + 3 * (c // 5)
        assert result(r, c) == 10 * tile + 5 * (r % 2) + c % 5
    assert raked_product(block, tiler) == P("((3,2),(4,5)):((10,5),(30,1))")
    assert blocked_product(block, (3, 4)) == result
    assert blocked_product(P("4:1"), P("3:1")) == P("((4,3)):((1,4))")


def test_rank_one_products_stay_rank_one_and_rake():
    """Issue 27: rank-1 blocked/raked products came out coalesced (``20:1``), of rank 2
    (``(8,2):(1,32)``) and, raked, in the blocked order; CuTe's answers."""
    assert raked_product(P("5:1"), P("4:1")) == P("((4,5)):((5,1))")
    table = raked_product(P("5:1"), P("4:1")).to_table(flat=True)
    assert table.tolist()[:6] == [0, 5, 10, 15, 1, 6]
    assert raked_product(P("8:1"), P("2:4")) == P("((2,8)):((32,1))")
    assert blocked_product(P("8:1"), P("2:4")) == P("((8,2)):((1,32))")
    assert blocked_product(P("(4):(1)"), P("(3,2):(1,3)")) == P("((4,3),(1,2)):((1,4),(0,12))")


def test_tiled_and_flat_keep_a_part_of_rank_one_whole():
    """CuTe slices a zipped result's parts with ``repeat<rank>(_)``: a part of rank 1 is one
    mode even when it is a 1-tuple; only parts of rank >= 2 are unpacked (CuTe's answers)."""
    assert tiled_divide(P("((5,8)):((2,6))"), (P("4:10"),)) == P("((4),((5,2))):((12),((2,6)))")
    assert flat_divide(P("((11,2)):((1,8))"), (P("(11,(2)):(1,(11))"),)) == P(
        "(((11,(2))),(1)):(((1,(8))),(0))"
    )
    assert tiled_product(P("(3,3):(6,1)"), P("(6):(16)")) == P("((3,3),(6)):((6,1),(144))")
    assert flat_product(P("((11,2)):((2,44))"), (1,)) == P("(((11,2)),(1)):(((2,44)),(0))")


def _padded_modes(layout: Layout, rank: int) -> list[Layout]:
    modes = list(layout.modes())
    return modes + [Layout(1, 0)] * (rank - len(modes))


@given(
    st.one_of(tractable_layouts(max_leaves=3, max_size=24, max_depth=2), st.builds(
        Layout, st.sampled_from((1, 2, 3, 5, 8)), st.sampled_from((1, 2, 3)))),
    layouts(max_leaves=3, max_size=12, max_depth=2),
)
def test_rank_sensitive_products_zip_a_logical_product(a, b):
    """``blocked_product(A, B)`` mode k is ``(A_k, B'_k)`` and ``raked_product`` mode k is
    ``(B'_k, A_k)``, with ``A``, ``B`` padded to rank ``max(rank A, rank B)`` and ``B' =
    complement(A, size(A) * cosize(B)) o B``: checked point by point against that definition
    (reference evaluation), with the rank, the sizes and, for compact blocks, the codomain."""
    try:
        blocked, raked = blocked_product(a, b), raked_product(a, b)
    except LayoutError as err:
        assert "composition" in str(err)
        return
    r = max(a.rank, b.rank)
    assert blocked.rank == raked.rank == r
    a_modes, b_modes = _padded_modes(a, r), _padded_modes(b, r)
    a_pad, b_pad = make_layout(*a_modes), make_layout(*b_modes)
    rest = complement(a_pad, a_pad.size * b_pad.cosize)
    a_sizes, b_sizes = [m.size for m in a_modes], [m.size for m in b_modes]
    assert [m.size for m in blocked.modes()] == [x * y for x, y in zip(a_sizes, b_sizes)]
    assert [m.size for m in raked.modes()] == [x * y for x, y in zip(a_sizes, b_sizes)]

    def flat(index: Sequence[int], sizes: Sequence[int]) -> int:
        return sum(i * math.prod(sizes[:k]) for k, i in enumerate(index))

    for i in itertools.product(*(range(n) for n in a_sizes)):
        a_value = reference_eval(a_pad, flat(i, a_sizes))
        for j in itertools.product(*(range(n) for n in b_sizes)):
            want = a_value + reference_eval(rest, reference_eval(b_pad, flat(j, b_sizes)))
            x = [ik + a_sizes[k] * jk for k, (ik, jk) in enumerate(zip(i, j))]
            y = [jk + b_sizes[k] * ik for k, (ik, jk) in enumerate(zip(i, j))]
            sizes = [p * q for p, q in zip(a_sizes, b_sizes)]
            assert reference_eval(blocked, flat(x, sizes)) == want
            assert reference_eval(raked, flat(y, sizes)) == want
    if is_compact(a) and nonneg(b):
        image = set(values(blocked))
        assert image == set(values(raked)) and max(image) < a.size * b.cosize
        if is_compact(b):
            assert sorted(values(blocked)) == list(range(a.size * b.size))


@settings(max_examples=60)
@given(layouts(max_leaves=3, max_size=24, max_depth=1), st.data())
def test_product_regroupings(a, data):
    count = data.draw(st.integers(1, a.rank))
    tiler = tuple(data.draw(st.integers(1, 3)) for _ in range(count))
    try:
        logical = logical_product(a, tiler)
    except LayoutError:
        return
    zipped, tiled, flat = zipped_product(a, tiler), tiled_product(a, tiler), flat_product(a, tiler)
    blocks = [logical[i][0].size for i in range(count)]
    reps = [logical[i][1].size for i in range(count)]
    extras = [m.size for m in a.modes()[count:]]
    for t in itertools.product(*(range(n) for n in blocks)):
        for r in itertools.product(*(range(n) for n in reps)):
            for e in itertools.product(*(range(n) for n in extras)):
                expected = logical(tuple(zip(t, r, strict=False)) + e)
                assert zipped(tuple(t), tuple(r) + e) == expected
                assert tiled(tuple(t), *r, *e) == expected
                assert flat(*t, *r, *e) == expected


def test_product_refusals():
    with pytest.raises(LayoutError, match="more modes"):
        logical_product(P("(2,2):(1,2)"), (2, 2, 2))
    with pytest.raises(LayoutError, match="expected a layout"):
        logical_product(ComposedLayout(Swizzle(1, 0, 1), 0, P("4:1")), 2)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Constructors


@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data())
def test_ordered_layouts_are_compact_in_the_requested_order(leaves, data):
    order = data.draw(st.permutations(range(len(leaves))))
    layout = make_ordered_layout(tuple(leaves), tuple(order))
    strides = reference_flatten(layout.stride)
    by_order = sorted(range(len(leaves)), key=lambda i: order[i])
    assert [strides[i] for i in by_order] == [
        math.prod(leaves[j] for j in by_order[:k]) for k in range(len(leaves))
    ]
    assert sorted(values(layout)) == list(range(math.prod(leaves)))


@given(st.lists(st.integers(1, 6), min_size=1, max_size=3))
def test_row_and_column_major_match_numpy(leaves):
    grid = np.arange(math.prod(leaves)).reshape(leaves)
    row, col = row_major(tuple(leaves)), column_major(tuple(leaves))
    for coord in itertools.product(*(range(n) for n in leaves)):
        assert row(coord) == grid[coord]
        assert col(coord) == np.ravel_multi_index(coord, leaves, order="F")


def test_ordered_layout_examples_and_errors():
    assert make_ordered_layout((2, 3, 4), (1, 2, 0)) == P("(2,3,4):(4,8,1)")
    assert make_ordered_layout((2, (3, 4)), (1, (1, 0))) == P("(2,(3,4)):(4,(8,1))")
    assert row_major((2, (3, 4))) == P("(2,(3,4)):(12,(4,1))")
    with pytest.raises(LayoutError, match="must be nested like shape"):
        make_ordered_layout((2, 3), (0, 1, 2))
    with pytest.raises(LayoutError, match="make_layout takes layouts"):
        make_layout(P("2:1"), 3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Swizzles and composed layouts


swizzles = st.integers(0, 4).flatmap(
    lambda bits: st.builds(
        Swizzle,
        st.just(bits),
        st.integers(0, 4),
        st.integers(bits, 6).flatmap(lambda s: st.sampled_from((s, -s) if s else (0,))),
    )
)


@given(swizzles)
def test_swizzle_is_an_involution_permuting_aligned_blocks(sw):
    top = sw.base + sw.bits + abs(sw.shift)
    block = np.arange(1 << top)
    once = np.asarray(sw(block))
    assert sorted(once.tolist()) == block.tolist()
    assert np.array_equal(np.asarray(sw(once)), block)
    assert all(sw(int(x)) == int(y) for x, y in zip(block[:64], once[:64], strict=False))


def test_swizzle_bits():
    sw = Swizzle(3, 4, 3)
    assert (sw.yyy_mask, sw.zzz_mask) == (0b1110000000, 0b0001110000)
    assert sw(0b0010000000) == 0b0010010000
    assert sw(0b1010000101) == 0b1011010101
    assert Swizzle(2, 1, -3)(0b0000110) == 0b0110110
    assert str(sw) == "Sw<3,4,3>"
    with pytest.raises(LayoutError, match=r"\|shift\| must be >= bits"):
        Swizzle(3, 0, 2)
    with pytest.raises(LayoutError, match="must be >= 0"):
        Swizzle(1, -1, 1)


def test_swizzled_128_byte_bf16_tile_spreads_each_column_over_all_banks():
    # 8 rows of 64 bf16 (128 B), swizzled in 16-byte chunks: the 8 rows of any chunk column
    # land in 8 different 16-byte bank groups, while the plain layout puts them in one.
    plain = row_major((8, 64))
    swizzled = composition(Swizzle(3, 3, 3), plain)
    assert str(swizzled) == "Sw<3,3,3> o 0 o (8,64):(64,1)"
    for col in range(0, 64, 8):
        groups = {(swizzled(r, col) * 2 // 16) % 8 for r in range(8)}
        plain_groups = {(plain(r, col) * 2 // 16) % 8 for r in range(8)}
        assert len(groups) == 8 and len(plain_groups) == 1
    assert is_injective(swizzled) and is_compact(swizzled)


@given(swizzles, layouts(max_size=64), st.integers(0, 16))
def test_composed_layout_is_swizzle_of_offset_plus_layout(sw, inner, offset):
    assume(nonneg(inner))
    composed = ComposedLayout(sw, offset, inner)
    expected = [sw(offset + v) for v in values(inner)]
    assert composed.to_table(flat=True).tolist() == expected
    assert [composed(i) for i in range(inner.size)] == expected
    assert composed.size == inner.size and composed.shape == inner.shape
    assert is_injective(composed) == reference_injective(expected)


def test_composed_layout_divides_and_slices_act_on_the_inner_layout():
    inner = row_major((8, 16))
    composed = ComposedLayout(Swizzle(2, 2, 3), 4, inner)
    tiled = zipped_divide(composed, (4, 8))
    assert tiled == ComposedLayout(Swizzle(2, 2, 3), 4, zipped_divide(inner, (4, 8)))
    assert tiled((1, 3), (1, 1)) == Swizzle(2, 2, 3)(4 + inner(5, 11))
    row = composed(3, None)
    assert isinstance(row, ComposedLayout) and row.offset == 4 + inner(3, 0)
    assert [row(j) for j in range(16)] == [composed(3, j) for j in range(16)]
    assert composition(composed, (2, 4)) == ComposedLayout(
        Swizzle(2, 2, 3), 4, composition(inner, (2, 4))
    )
    outer_layout = ComposedLayout(P("(4,4):(4,1)"), 0, P("16:1"))  # a transpose as the outer map
    assert not is_compact(ComposedLayout(P("16:2"), 0, P("16:1")))
    assert is_compact(outer_layout) and is_injective(outer_layout)
    assert outer_layout(5) == 4 * 1 + 1
    with pytest.raises(LayoutError, match="outer must be"):
        ComposedLayout(3, 0, inner)  # type: ignore[arg-type]
