"""Nested integer tuples: structure, colexicographic coordinates, division, spelling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.layout.cute_strategies import reference_coords, reference_flatten, shapes
from tilekit.errors import LayoutError
from tilekit.layout.inttuple import (
    as_int_tuple,
    ceil_div,
    compatible,
    congruent,
    crd2idx,
    depth,
    flatten,
    format_int_tuple,
    idx2crd,
    inner_product,
    iter_coords,
    parse_int_tuple,
    prefix_product,
    product,
    product_each,
    rank,
    repeat_like,
    shape_div,
    suffix_product,
    unflatten,
    weakly_congruent,
)

int_tuples = st.recursive(
    st.integers(-20, 40),
    lambda inner: st.lists(inner, max_size=4).map(tuple),
    max_leaves=12,
)


def _paren_depth(text: str) -> int:
    level = best = 0
    for ch in text:
        if ch == "(":
            level += 1
            best = max(best, level)
        elif ch == ")":
            level -= 1
    return best


# -- structure ---------------------------------------------------------------------------------


@given(int_tuples)
def test_flatten_unflatten_round_trip(t):
    leaves = flatten(t)
    assert list(leaves) == reference_flatten(t)
    assert unflatten(leaves, t) == t


@given(int_tuples)
def test_product_rank_depth_match_definitions(t):
    assert product(t) == math.prod(reference_flatten(t))
    assert rank(t) == (len(t) if isinstance(t, tuple) else 1)
    assert depth(t) == _paren_depth(format_int_tuple(t))


def test_depth_and_product_each_examples():
    assert depth(5) == 0 and depth(()) == 1 and depth((1, (2, (3,)))) == 3
    assert product_each((4, (2, 3), 5)) == (4, 6, 5)
    assert product_each(7) == 7
    assert product(()) == 1


@given(int_tuples)
def test_parse_inverts_format(t):
    assert parse_int_tuple(format_int_tuple(t)) == t


def test_format_spells_one_tuples_with_parentheses_and_parses_cute_statics():
    assert format_int_tuple((4,)) == "(4)"
    assert format_int_tuple((4, (2, 3))) == "(4,(2,3))"
    assert parse_int_tuple(" ( _4 , ( 2,_3 ) ) ") == (4, (2, 3))
    assert parse_int_tuple("-3") == -3


@pytest.mark.parametrize("text", ["(4,", "(4 5)", "4)", "", "(a)", "((1)"])
def test_parse_rejects_malformed_text(text):
    with pytest.raises(LayoutError, match="cannot parse"):
        parse_int_tuple(text)


def test_as_int_tuple_canonicalizes_and_rejects():
    assert as_int_tuple([np.int64(3), [1, np.int32(2)]]) == (3, (1, 2))
    assert type(as_int_tuple(np.int16(3))) is int
    for bad in (True, "4", 2.5, None, (1, "x")):
        with pytest.raises(LayoutError, match="expected an int"):
            as_int_tuple(bad)


# -- profiles ----------------------------------------------------------------------------------


@given(int_tuples, st.integers(0, 5))
def test_congruence_is_about_profile_only(t, v):
    assert congruent(t, repeat_like(t, v))
    assert not congruent(t, (t,))  # one more level of nesting is never the same profile


def test_congruence_weak_congruence_compatibility_examples():
    assert congruent((1, (2, 3)), (4, (5, 6)))
    assert not congruent((1, (2, 3)), (4, 5))
    assert not congruent(3, (3,))
    assert weakly_congruent((1, 2), (4, (5, 6)))
    assert weakly_congruent(1, ((2, 3), 4))
    assert not weakly_congruent((1, (2, 3)), (4, 5))
    assert not weakly_congruent((1, 2), (1, 2, 3))
    assert compatible(24, (4, (2, 3)))
    assert compatible((4, 6), (4, (2, 3)))
    assert not compatible((4, 6), (4, (2, 4)))
    assert not compatible((4, (2, 3)), (4, 6))
    assert inner_product((1, (2, 3)), (4, (5, 6))) == 4 + 10 + 18
    with pytest.raises(LayoutError, match="not congruent"):
        inner_product((1, 2), (1, (2, 3)))


@given(shapes(max_depth=3))
def test_prefix_and_suffix_products_are_compact_strides(shape):
    leaves = reference_flatten(shape)
    col = reference_flatten(prefix_product(shape))
    row = reference_flatten(suffix_product(shape))
    assert col == [math.prod(leaves[:k]) for k in range(len(leaves))]
    assert row == [math.prod(leaves[k + 1 :]) for k in range(len(leaves))]
    assert congruent(prefix_product(shape), shape) and congruent(suffix_product(shape), shape)


# -- coordinates -------------------------------------------------------------------------------


@given(shapes(max_size=120))
def test_idx2crd_enumerates_colexicographically(shape):
    size = math.prod(reference_flatten(shape))
    expected = reference_coords(shape)
    assert [idx2crd(i, shape) for i in range(size)] == expected
    assert list(iter_coords(shape)) == expected
    assert [crd2idx(c, shape) for c in expected] == list(range(size))


@given(shapes(max_size=120), st.integers(0, 400))
def test_index_past_size_runs_into_last_nontrivial_leaf(shape, idx):
    leaves = reference_flatten(shape)
    crd = reference_flatten(idx2crd(idx, shape))
    nontrivial = [k for k, n in enumerate(leaves) if n > 1]
    for k, (c, n) in enumerate(zip(crd, leaves, strict=False)):
        if n == 1:
            assert c == 0
        elif k != nontrivial[-1]:
            assert 0 <= c < n
    if nontrivial:
        assert crd2idx(idx2crd(idx, shape), shape) == idx
    else:
        assert all(c == 0 for c in crd)


def test_crd2idx_mixes_int_and_tuple_coordinates():
    shape, stride = (4, (2, 3)), (1, (4, 8))
    assert crd2idx((1, (1, 2)), shape, stride) == 1 + 4 + 16
    assert crd2idx((1, 5), shape, stride) == 1 + 4 + 16  # 5 -> (1, 2) in (2, 3)
    assert crd2idx(1 + 4 * 5, shape, stride) == 1 + 4 + 16
    assert crd2idx(9, 3, 2) == 18  # an int mode is open past its size
    with pytest.raises(LayoutError, match="does not match shape"):
        crd2idx((1, 2, 3), shape, stride)
    with pytest.raises(LayoutError, match="negative index"):
        idx2crd(-1, shape)


# -- division ----------------------------------------------------------------------------------


def test_shape_div_follows_cute():
    assert shape_div((4, 5, 6), 40) == (1, 1, 3)
    assert shape_div((6, 2), 3) == (2, 2)
    assert shape_div((3, 6, 2, 8), 72) == (1, 1, 1, 4)
    assert shape_div(3, 6) == 1
    assert shape_div((6, 4), (2, 4)) == (3, 1)
    with pytest.raises(LayoutError, match="neither of 6 and 4 divides the other"):
        shape_div(6, 4)
    with pytest.raises(LayoutError, match="neither of 5 and 2"):
        shape_div((4, 5), 8)


@given(st.integers(1, 100), st.integers(1, 30))
def test_ceil_div_of_ints(a, b):
    assert ceil_div(a, b) == -(-a // b)
    assert ceil_div(a, b) * b >= a > (ceil_div(a, b) - 1) * b


@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(1, 200))
def test_ceil_div_folds_an_int_through_a_tuple_like_shape_div(leaves, divisor):
    out = ceil_div(tuple(leaves), divisor)
    assert len(out) == len(leaves)
    assert all(1 <= o <= n for o, n in zip(out, leaves, strict=False))
    try:
        exact = shape_div(tuple(leaves), divisor)
    except LayoutError:
        return
    assert out == exact  # where the division is exact, rounding up changes nothing


def test_ceil_div_fold_rounds_the_divisor_up_as_cute_does():
    # 4 over (3, 2): 3 -> ceil(3/4) = 1 leaving ceil(4/3) = 2, then 2 -> 1.
    assert ceil_div((3, 2), 4) == (1, 1)
    assert ceil_div((8, 5), 3) == (3, 5)
    assert ceil_div((8, 5), (3, 2)) == (3, 3)


def test_unflatten_rejects_wrong_leaf_count():
    with pytest.raises(LayoutError, match="do not fit profile"):
        unflatten([1, 2, 3], (1, 2))


def test_iter_coords_of_an_int_shape():
    assert list(iter_coords(3)) == [0, 1, 2]
    assert list(iter_coords(())) == [()]
    assert list(itertools.islice(iter_coords((2, 2)), 3)) == [(0, 0), (1, 0), (0, 1)]
