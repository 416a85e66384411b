"""LinearLayout: construction, evaluation, and the algebraic laws, checked on generated layouts
against brute-force enumeration (``strategies.reference_apply`` and friends)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.layout.strategies import (
    all_inputs,
    composable_pairs,
    covered_pairs,
    flat_input,
    flat_output,
    injective_layouts,
    invertible_layouts,
    layouts,
    reference_apply,
    reference_image,
    surjective_layouts,
)
from tilekit.errors import LayoutError
from tilekit.layout.linear import LinearLayout

# The m16n8k16 accumulator fragment (PTX ISA): register bit 0 -> col + 1, bit 1 -> row + 8;
# lane = 4 * g + t with t -> col 2t, g -> row g.
MMA_ACC = LinearLayout(
    {"register": [[0, 1], [8, 0]], "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]},
    {"dim0": 16, "dim1": 8},
)


def _flat_preimages(layout: LinearLayout) -> dict[tuple[int, ...], int]:
    """For every reached output, the smallest flat input reaching it (brute force)."""
    smallest: dict[tuple[int, ...], int] = {}
    for point in all_inputs(layout):
        image = tuple(reference_apply(layout, point).values())
        flat = flat_input(layout, point)
        if image not in smallest or flat < smallest[image]:
            smallest[image] = flat
    return smallest


# ------------------------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("bases", "outs", "reason"),
    [
        ({"lane": [[1]]}, {"dim0": 3}, "positive power of two, got 3"),
        ({"lane": [[4]]}, {"dim0": 4}, "dim0 component 4 is outside [0, 4)"),
        ({"lane": [[-1]]}, {"dim0": 4}, "outside [0, 4)"),
        ({"lane": [[1, 0]]}, {"dim0": 4}, "has 2 components but the layout has 1 out dims"),
        ({"lane": [[1]]}, [("dim0", 4), ("dim0", 2)], "'dim0' is listed twice"),
        ({3: [[1]]}, {"dim0": 4}, "in dim names must be strings"),
        ({"lane": [[1]]}, {"dim0": 0}, "positive power of two, got 0"),
    ],
)
def test_construction_rejects_malformed_layouts(bases, outs, reason):
    with pytest.raises(LayoutError, match=None) as info:
        LinearLayout(bases, outs)
    assert reason in str(info.value)


def test_layouts_are_immutable_hashable_and_structural():
    same = LinearLayout(
        {"register": [(0, 1), (8, 0)], "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]},
        [("dim0", 16), ("dim1", 8)],
    )
    assert same == MMA_ACC and hash(same) == hash(MMA_ACC)
    assert len({same, MMA_ACC}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        MMA_ACC._ins = ()  # type: ignore[misc]
    reordered = MMA_ACC.transpose_ins(["lane", "register"])
    assert reordered != MMA_ACC and reordered.equivalent(MMA_ACC)


def test_dims_sizes_and_bases():
    assert MMA_ACC.in_dims == ("register", "lane")
    assert MMA_ACC.out_dims == ("dim0", "dim1")
    assert MMA_ACC.in_dim_size("lane") == 32 and MMA_ACC.in_dim_size_log2("lane") == 5
    assert MMA_ACC.out_dim_size("dim0") == 16 and MMA_ACC.out_dim_size_log2("dim1") == 3
    assert MMA_ACC.total_in_size == 128 == MMA_ACC.total_out_size
    assert MMA_ACC.basis("register", 1) == (8, 0)
    assert MMA_ACC.bases["lane"][2] == (1, 0)
    assert MMA_ACC.in_dim_sizes == {"register": 4, "lane": 32}
    with pytest.raises(LayoutError, match="'warp' is not an in dim"):
        MMA_ACC.in_dim_size("warp")
    with pytest.raises(LayoutError, match="there is no basis 2"):
        MMA_ACC.basis("register", 2)


# -------------------------------------------------------------------------------------- evaluation


def test_worked_example_mma_accumulator():
    # Lane 5 is g = 1, t = 1; register 3 is c3: row g + 8 = 9, col 2t + 1 = 3.
    assert MMA_ACC.apply({"register": 3, "lane": 5}) == {"dim0": 9, "dim1": 3}
    assert MMA_ACC.apply({"register": 0, "lane": 31}) == {"dim0": 7, "dim1": 6}
    owner = MMA_ACC.invert()
    assert owner.apply({"dim0": 9, "dim1": 3}) == {"register": 3, "lane": 5}


@given(layouts(max_in_bits=8))
def test_apply_matches_reference(layout):
    for point in all_inputs(layout):
        assert layout.apply(point) == reference_apply(layout, point)


def test_apply_rejects_bad_inputs():
    with pytest.raises(LayoutError, match=r"missing \['lane'\]"):
        MMA_ACC.apply({"register": 0})
    with pytest.raises(LayoutError, match=r"unknown \['warp'\]"):
        MMA_ACC.apply({"register": 0, "lane": 0, "warp": 0})
    with pytest.raises(LayoutError, match=r"lane=32 is outside \[0, 32\)"):
        MMA_ACC.apply({"register": 0, "lane": 32})
    with pytest.raises(LayoutError, match="outside"):
        MMA_ACC.apply_array({"register": np.arange(5), "lane": 0})


@given(layouts(max_in_bits=8), st.data())
def test_apply_array_matches_reference(layout, data):
    points = [
        {name: data.draw(st.integers(0, layout.in_dim_size(name) - 1)) for name in layout.in_dims}
        for _ in range(5)
    ]
    arrays = {name: np.array([p[name] for p in points]) for name in layout.in_dims}
    result = layout.apply_array(arrays)
    for k, point in enumerate(points):
        assert {name: int(result[name][k]) for name in layout.out_dims} == reference_apply(
            layout, point
        )


@given(layouts(max_in_bits=7))
def test_apply_all_is_indexed_by_flat_input(layout):
    table = layout.apply_all()
    for point in all_inputs(layout):
        flat = flat_input(layout, point)
        expected = reference_apply(layout, point)
        assert {name: int(table[name][flat]) for name in layout.out_dims} == expected
        assert layout.apply_flat(flat) == flat_output(layout, expected)


def test_apply_array_handles_65536_points_quickly():
    layout = LinearLayout.identity_1d(256, "register", "dim1") * LinearLayout.identity_1d(
        256, "lane", "dim0"
    )
    swizzle = LinearLayout(
        {"dim0": [[1 << i, 1 << i] for i in range(8)], "dim1": [[0, 1 << i] for i in range(8)]},
        {"dim0": 256, "dim1": 256},
    )
    layout = layout.compose(swizzle)
    reg, lane = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    start = time.perf_counter()
    out = layout.apply_array({"register": reg, "lane": lane})
    elapsed = time.perf_counter() - start
    assert np.array_equal(out["dim0"], lane) and np.array_equal(out["dim1"], reg ^ lane)
    assert elapsed < 1.0, f"apply_array took {elapsed:.3f} s for 2^16 points"


def test_apply_array_broadcasts_scalars():
    out = MMA_ACC.apply_array({"register": np.arange(4), "lane": 5})
    assert out["dim0"].tolist() == [1, 1, 9, 9] and out["dim1"].tolist() == [2, 3, 2, 3]


# ------------------------------------------------------------------------------------ constructors


def test_one_dimensional_constructors():
    identity = LinearLayout.identity_1d(8, "lane", "dim0")
    assert [identity.apply({"lane": x})["dim0"] for x in range(8)] == list(range(8))
    zeros = LinearLayout.zeros_1d(4, "register", "dim0")
    assert zeros.out_dim_size("dim0") == 1 and zeros.free_bases() == {"register": 0b11}
    strided = LinearLayout.strided_1d(4, 8, "offset", "byte")
    assert strided.out_dim_size("byte") == 32
    assert [strided.apply({"offset": x})["byte"] for x in range(4)] == [0, 8, 16, 24]
    assert LinearLayout.empty().in_dims == () and LinearLayout.empty().total_in_size == 1
    with pytest.raises(LayoutError, match="stride must be a positive power of two, got 3"):
        LinearLayout.strided_1d(4, 3, "offset", "byte")
    both = LinearLayout.identity({"dim0": 4, "dim1": 2})
    assert both.apply({"dim0": 3, "dim1": 1}) == {"dim0": 3, "dim1": 1}
    nothing = LinearLayout.zeros({"lane": 4}, {"dim0": 8})
    assert nothing.rank() == 0 and nothing.out_dim_size("dim0") == 8


# ----------------------------------------------------------------------------------------- product


@given(
    layouts(in_names=("register", "lane"), out_names=("dim0", "dim1"), max_in_bits=4),
    layouts(in_names=("warp", "block"), out_names=("dim2", "dim3"), max_in_bits=4),
)
def test_product_on_disjoint_dims_is_the_pair(left, right):
    product = left * right
    assert product.in_dims == left.in_dims + right.in_dims
    assert product.out_dims == left.out_dims + right.out_dims
    for point in all_inputs(product):
        expected = reference_apply(left, point) | reference_apply(right, point)
        assert product.apply(point) == expected


@given(
    layouts(in_names=("register", "lane"), out_names=("dim0", "dim1"), max_in_bits=4),
    layouts(in_names=("lane", "warp"), out_names=("dim1", "dim2"), max_in_bits=4),
)
def test_product_on_shared_dims_puts_the_left_factor_minor(left, right):
    product = left * right
    for name in set(left.out_dims) & set(right.out_dims):
        assert product.out_dim_size(name) == left.out_dim_size(name) * right.out_dim_size(name)
    for point in all_inputs(product):
        low = {n: point[n] % left.in_dim_size(n) for n in left.in_dims}
        high = {n: point[n] // left.in_dim_size(n) if n in left.in_dims else point[n]
                for n in right.in_dims}
        a, b = reference_apply(left, low), reference_apply(right, high)
        expected = {
            n: a.get(n, 0) + b.get(n, 0) * (left.out_dim_size(n) if n in a else 1)
            for n in product.out_dims
        }
        assert product.apply(point) == expected


@given(layouts())
def test_empty_is_the_unit_of_the_product(layout):
    assert layout * LinearLayout.empty() == layout == LinearLayout.empty() * layout


def test_product_rejects_inconsistent_dim_orders():
    left = LinearLayout.identity_1d(2, "x", "dim0") * LinearLayout.identity_1d(2, "y", "dim0")
    right = LinearLayout.identity_1d(2, "y", "dim0") * LinearLayout.identity_1d(2, "x", "dim0")
    with pytest.raises(LayoutError, match="opposite orders"):
        left * right


# ------------------------------------------------------------------------------------- composition


@given(composable_pairs())
def test_compose_is_function_composition(pair):
    inner, outer = pair
    composed = inner.compose(outer)
    assert composed.in_dims == inner.in_dims and composed.out_dims == outer.out_dims
    for point in all_inputs(inner):
        assert composed.apply(point) == reference_apply(outer, reference_apply(inner, point))


def test_compose_rejects_mismatched_dims():
    inner = LinearLayout.identity_1d(8, "lane", "dim0")
    with pytest.raises(LayoutError, match="'dim0' of the inner layout is not an in dim"):
        inner.compose(LinearLayout.identity_1d(8, "dim1", "x"))
    with pytest.raises(LayoutError, match="has size 8 but outer in dim 'dim0' has size 4"):
        inner.compose(LinearLayout.identity_1d(4, "dim0", "x"))


# ---------------------------------------------------------------------------------------- inverses


@given(invertible_layouts())
def test_invert_is_a_two_sided_inverse(layout):
    inverse = layout.invert()
    assert inverse.in_dims == layout.out_dims and inverse.out_dims == layout.in_dims
    for point in all_inputs(layout):
        assert reference_apply(inverse, reference_apply(layout, point)) == point
    for point in all_inputs(inverse):
        assert reference_apply(layout, reference_apply(inverse, point)) == point


@given(invertible_layouts(max_bits=6))
def test_compose_with_inverse_is_identity(layout):
    identity = LinearLayout.identity(layout.in_dim_sizes)
    assert layout.compose(layout.invert()) == identity


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        (LinearLayout({"lane": [[1], [0]]}, {"dim0": 4}),
         "not injective: lane bit 1 (basis [0]) maps to zero"),
        (LinearLayout({"lane": [[1], [2], [3]]}, {"dim0": 4}),
         "not injective: lane bit 2 (basis [3]) equals the XOR of lane bit 0 (basis [1]), "
         "lane bit 1 (basis [2])"),
        (LinearLayout({"lane": [[1]]}, {"dim0": 4}),
         "not surjective: rank 1 < 2 output bits; e.g. no input reaches {'dim0': 2}"),
    ],
)
def test_invert_says_why_it_cannot(layout, reason):
    with pytest.raises(LayoutError) as info:
        layout.invert()
    assert reason in str(info.value)


@given(surjective_layouts())
def test_pseudo_invert_is_the_smallest_right_inverse(layout):
    right = layout.pseudo_invert()
    smallest = _flat_preimages(layout)
    for point in all_inputs(right):
        preimage = reference_apply(right, point)
        assert reference_apply(layout, preimage) == point
        assert flat_input(layout, preimage) == smallest[tuple(point.values())]


def test_pseudo_invert_rejects_non_surjective_layouts():
    with pytest.raises(LayoutError, match="not surjective"):
        LinearLayout({"lane": [[1], [1]]}, {"dim0": 4}).pseudo_invert()


@given(covered_pairs())
def test_invert_and_compose_maps_source_to_target_indices(pair):
    target, source = pair
    conversion = target.invert_and_compose(source)
    assert conversion.in_dims == source.in_dims and conversion.out_dims == target.in_dims
    smallest = _flat_preimages(target)
    for point in all_inputs(source):
        where = reference_apply(conversion, point)
        value = reference_apply(source, point)
        assert reference_apply(target, where) == value
        ordered = tuple(value[n] for n in target.out_dims)
        assert flat_input(target, where) == smallest[ordered]


def test_invert_and_compose_rejects_uncovered_sources():
    target = LinearLayout({"lane": [[1], [0]]}, {"dim0": 4})
    source = LinearLayout({"register": [[2]]}, {"dim0": 4})
    with pytest.raises(LayoutError, match=r"register\[0\] .* maps to \{'dim0': 2\}"):
        target.invert_and_compose(source)
    with pytest.raises(LayoutError, match="same out dims"):
        target.invert_and_compose(LinearLayout({"x": [[1]]}, {"dim1": 2}))


# -------------------------------------------------------------------------------------- predicates


@given(layouts())
def test_rank_and_predicates_agree_with_enumeration(layout):
    image = reference_image(layout)
    assert 2 ** layout.rank() == len(image)
    assert layout.is_injective() == (len(image) == layout.total_in_size)
    assert layout.is_surjective() == (len(image) == layout.total_out_size)
    assert layout.is_bijective() == (layout.is_injective() and layout.is_surjective())


@given(invertible_layouts())
def test_invertible_strategy_is_bijective(layout):
    assert len(reference_image(layout)) == layout.total_in_size == layout.total_out_size


@given(injective_layouts())
def test_injective_strategy_is_injective(layout):
    assert len(reference_image(layout)) == layout.total_in_size
    assert layout.is_injective()


@given(surjective_layouts())
def test_surjective_strategy_is_surjective(layout):
    assert len(reference_image(layout)) == layout.total_out_size
    assert layout.is_surjective()


@given(layouts())
def test_free_and_redundant_bases(layout):
    free = layout.free_bases()
    redundant = layout.redundant_bases()
    seen: set[tuple[int, ...]] = {tuple(0 for _ in layout.out_dims)}
    for name, images in layout.bases.items():
        for bit, image in enumerate(images):
            assert bool(free[name] >> bit & 1) == (not any(image))
            assert bool(redundant[name] >> bit & 1) == (image in seen)
            seen |= {tuple(a ^ b for a, b in zip(s, image, strict=True)) for s in seen}


@given(layouts())
def test_remove_zero_bases_keeps_the_image(layout):
    trimmed = layout.remove_zero_bases()
    assert reference_image(trimmed) == reference_image(layout)
    for name in layout.in_dims:
        dropped = bin(layout.free_bases()[name]).count("1")
        assert trimmed.in_dim_size_log2(name) == layout.in_dim_size_log2(name) - dropped


# ------------------------------------------------------------------------------------- sub-layouts


@given(layouts(), st.data())
def test_sublayout_restricts_and_projects(layout, data):
    ins = (data.draw(st.lists(st.sampled_from(layout.in_dims), unique=True))
           if layout.in_dims else [])
    outs = (data.draw(st.lists(st.sampled_from(layout.out_dims), unique=True))
            if layout.out_dims else [])
    sub = layout.sublayout(ins, outs)
    assert sub.in_dims == tuple(n for n in layout.in_dims if n in ins)
    assert sub.out_dims == tuple(n for n in layout.out_dims if n in outs)
    zero = True
    for point in all_inputs(sub):
        full = reference_apply(layout, point)
        projected = {n: full[n] for n in sub.out_dims}
        assert sub.apply(point) == projected
        zero &= not any(projected.values())
    assert layout.sublayout_is_zero(ins, outs) == zero


def test_sublayout_rejects_unknown_dims():
    with pytest.raises(LayoutError, match="'warp' is not an in dim"):
        MMA_ACC.sublayout(["warp"], ["dim0"])
    with pytest.raises(LayoutError, match="'dim7' is not an out dim"):
        MMA_ACC.sublayout(["lane"], ["dim7"])
    assert MMA_ACC.sublayout_is_zero(["register"], ["dim0"]) is False
    assert MMA_ACC.sublayout(["register"], ["dim0"]).bases == {"register": ((0,), (8,))}


# --------------------------------------------------------------------------------------- reshaping


@given(layouts(), st.randoms(use_true_random=False))
def test_transposes_preserve_the_function(layout, rng):
    ins, outs = list(layout.in_dims), list(layout.out_dims)
    rng.shuffle(ins)
    rng.shuffle(outs)
    moved = layout.transpose_ins(ins).transpose_outs(outs)
    assert moved.in_dims == tuple(ins) and moved.out_dims == tuple(outs)
    assert moved.equivalent(layout)
    for point in all_inputs(layout):
        assert moved.apply(point) == reference_apply(layout, point)


def test_transpose_rejects_non_permutations():
    with pytest.raises(LayoutError, match="not a permutation of the in dims"):
        MMA_ACC.transpose_ins(["lane"])
    with pytest.raises(LayoutError, match="not a permutation of the out dims"):
        MMA_ACC.transpose_outs(["dim0", "dim0"])


@given(layouts(min_out_bits=1))
def test_flatten_outs_is_first_dim_minor(layout):
    flat = layout.flatten_outs()
    assert flat.out_dims == (layout.out_dims[0],)
    assert flat.out_dim_size(layout.out_dims[0]) == layout.total_out_size
    for point in all_inputs(layout):
        expected = flat_output(layout, reference_apply(layout, point))
        assert flat.apply(point) == {layout.out_dims[0]: expected}


@given(layouts(min_in_bits=1))
def test_flatten_ins_is_first_dim_minor(layout):
    flat = layout.flatten_ins("flat")
    for point in all_inputs(layout):
        assert flat.apply({"flat": flat_input(layout, point)}) == reference_apply(layout, point)


@given(layouts(), st.data())
def test_reshape_ins_and_outs_reindex_by_digits(layout, data):
    in_bits = layout.total_in_bits
    cut_in = data.draw(st.integers(0, in_bits))
    out_bits = layout.total_out_bits
    cut_out = data.draw(st.integers(0, out_bits))
    reshaped = layout.reshape_ins([("lo", 2**cut_in), ("hi", 2 ** (in_bits - cut_in))])
    reshaped = reshaped.reshape_outs([("a", 2**cut_out), ("b", 2 ** (out_bits - cut_out))])
    for point in all_inputs(layout):
        flat_in = flat_input(layout, point)
        flat_out = flat_output(layout, reference_apply(layout, point))
        got = reshaped.apply({"lo": flat_in % 2**cut_in, "hi": flat_in >> cut_in})
        assert got == {"a": flat_out % 2**cut_out, "b": flat_out >> cut_out}


def test_reshape_rejects_wrong_totals():
    with pytest.raises(LayoutError, match="have 64 points, the layout has 128"):
        MMA_ACC.reshape_ins([("x", 64)])
    with pytest.raises(LayoutError, match="have 256 points"):
        MMA_ACC.reshape_outs([("x", 256)])


def test_resize_and_rename():
    grown = MMA_ACC.resize_in_dim("register", 16)
    assert grown.bases["register"][2:] == ((0, 0), (0, 0))
    assert grown.resize_in_dim("register", 4) == MMA_ACC
    wider = MMA_ACC.resize_out_dim("dim1", 32)
    assert wider.out_dim_size("dim1") == 32 and wider.apply({"register": 1, "lane": 0})["dim1"] == 1
    with pytest.raises(LayoutError, match="cannot shrink out dim 'dim0' to 8"):
        MMA_ACC.resize_out_dim("dim0", 8)
    renamed = MMA_ACC.rename_ins({"lane": "thread"}).rename_outs({"dim0": "row", "dim1": "col"})
    assert renamed.apply({"register": 3, "thread": 5}) == {"row": 9, "col": 3}
    with pytest.raises(LayoutError, match="repeats a name"):
        MMA_ACC.rename_ins({"lane": "register"})


@given(
    layouts(in_names=("register", "lane"), out_names=("dim0", "dim1"), max_in_bits=4),
    st.data(),
)
def test_concat_ins_and_outs(layout, data):
    outs = [(n, layout.out_dim_size(n)) for n in layout.out_dims]
    extra_bits = data.draw(st.integers(0, 3))
    other = LinearLayout(
        {"warp": [[data.draw(st.integers(0, s - 1)) for _, s in outs] for _ in range(extra_bits)]},
        outs,
    )
    joined = layout.concat_ins(other)
    for point in all_inputs(joined):
        a, b = reference_apply(layout, point), reference_apply(other, point)
        assert joined.apply(point) == {n: a[n] ^ b[n] for n in layout.out_dims}
    side = LinearLayout.zeros(layout.in_dim_sizes, {"dim5": 2})
    wide = layout.concat_outs(side)
    for point in all_inputs(layout):
        assert wide.apply(point) == reference_apply(layout, point) | {"dim5": 0}


def test_concat_rejects_overlaps():
    with pytest.raises(LayoutError, match="disjoint in dims"):
        MMA_ACC.concat_ins(MMA_ACC)
    with pytest.raises(LayoutError, match="disjoint out dims"):
        MMA_ACC.concat_outs(MMA_ACC)


# ------------------------------------------------------------------------------ matrices, printing


@given(layouts())
def test_to_matrix_columns_are_images_of_unit_inputs(layout):
    matrix = layout.to_matrix()
    assert matrix.dtype == np.uint8
    assert matrix.shape == (layout.total_out_bits, layout.total_in_bits)
    col = 0
    for name, images in layout.bases.items():
        for bit in range(len(images)):
            point = {n: 0 for n in layout.in_dims} | {name: 1 << bit}
            flat = flat_output(layout, reference_apply(layout, point))
            assert [int(x) for x in matrix[:, col]] == [
                flat >> row & 1 for row in range(layout.total_out_bits)
            ]
            col += 1


@given(layouts())
def test_matrix_round_trip(layout):
    again = LinearLayout.from_matrix(
        layout.to_matrix(), layout.in_dim_sizes, layout.out_dim_sizes
    )
    assert again == layout


def test_from_matrix_rejects_bad_matrices():
    with pytest.raises(LayoutError, match=r"expected shape \(2, 1\)"):
        LinearLayout.from_matrix(np.zeros((1, 1)), {"x": 2}, {"y": 4})
    with pytest.raises(LayoutError, match="only 0 and 1"):
        LinearLayout.from_matrix([[2]], {"x": 2}, {"y": 2})


@given(layouts())
def test_repr_round_trips(layout):
    assert eval(repr(layout), {"LinearLayout": LinearLayout}) == layout


def test_str_prints_one_line_per_basis():
    layout = LinearLayout({"register": [[0, 1], [8, 0]], "warp": []}, {"dim0": 16, "dim1": 2})
    assert str(layout) == (
        "LinearLayout\n"
        " - register=1 -> (0, 1)\n"
        "   register=2 -> (8, 0)\n"
        " - warp is a size 1 dimension\n"
        "where out dims are: [dim0 (size 16), dim1 (size 2)]"
    )
