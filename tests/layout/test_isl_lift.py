"""ISL lifting of every layout kind, equality across kinds, injectivity and set operations.

Every lifted map is enumerated point by point by ISL and compared with a reference evaluation
written here from the definitions (XOR of bases, colexicographic mixed radix, CuTe's swizzle
formula, the first matching piece), so a wrong encoding cannot hide behind a right answer.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence

import islpy as isl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.layout.strategies import all_inputs, reference_apply
from tests.layout.strategies import layouts as linear_layouts
from tilekit.errors import LayoutError
from tilekit.layout.isl_lift import (
    ComposedSpec,
    F2Spec,
    InputView,
    Lifted,
    Method,
    StridedSpec,
    SwizzleSpec,
    as_spec,
    cache_stats,
    clear_caches,
    compose,
    equal,
    image,
    intersect_domain,
    is_injective,
    lift,
    project,
    value_ranges,
)
from tilekit.layout.linear import LinearLayout
from tilekit.layout.piecewise import Affine, Domain, Piece, PiecewiseLayout, eq, ge, isl_context, lt

Point = tuple[int, ...]


# ------------------------------------------------------------------------- references (oracles)


def isl_points(s: isl.Set) -> set[Point]:
    n = s.dim(isl.dim_type.set)
    found: set[Point] = set()
    s.foreach_point(
        lambda p: found.add(
            tuple(int(p.get_coordinate_val(isl.dim_type.set, i).to_python()) for i in range(n))
        )
    )
    return found


def graph(lifted: Lifted) -> set[Point]:
    """The lifted map as the set of (inputs..., outputs...) tuples, enumerated by ISL."""
    return isl_points(lifted.relation.wrap())


def colex(index: int, sizes: Sequence[int]) -> list[int]:
    digits = []
    for size in sizes:
        digits.append(index % size)
        index //= size
    return digits


def ref_strided(modes: Sequence[Sequence[tuple[int, int]]], point: Point) -> int:
    total = 0
    for x, mode in zip(point, modes, strict=True):
        digits = colex(x, [s for s, _ in mode])
        total += sum(c * d for c, (_, d) in zip(digits, mode, strict=True))
    return total


def ref_index(leaves: Sequence[tuple[int, int]], index: int) -> int:
    """CuTe int -> int past the size: the last leaf of size > 1 takes the rest."""
    big = [k for k, (s, _) in enumerate(leaves) if s > 1]
    total = 0
    for k in big:
        size, stride = leaves[k]
        if k == big[-1]:
            return total + index * stride
        total += (index % size) * stride
        index //= size
    return total


def ref_swizzle(bits: int, base: int, shift: int, offset: int) -> int:
    """CuTe: offset ^ ((offset & yyy_mask) >> shift), a negative shift moving left."""
    yyy = ((1 << bits) - 1) << (base + max(0, shift))
    moved = offset & yyy
    moved = moved >> shift if shift >= 0 else moved << -shift
    return offset ^ moved


def box(sizes: Sequence[int]) -> list[Point]:
    return list(itertools.product(*(range(s) for s in sizes)))


def ref_graph(sizes: Sequence[int], fn: Callable[[Point], Point]) -> set[Point]:
    return {p + fn(p) for p in box(sizes)}


# -------------------------------------------------------------------------------- strategies

SIZES = st.sampled_from([1, 2, 3, 4, 5, 7, 8, 11, 13])
STRIDES = st.sampled_from([0, 1, 2, 3, 4, 7, 8, 16, 32, -1, -3])


@st.composite
def strided_specs(draw: st.DrawFn, max_points: int = 400, nonneg: bool = False) -> StridedSpec:
    """Shape:stride layouts with odd and prime sizes, nested modes, zero and negative strides."""
    strides = STRIDES.filter(lambda d: d >= 0) if nonneg else STRIDES
    modes = []
    for _ in range(draw(st.integers(1, 3))):
        leaves = draw(st.lists(st.tuples(SIZES, strides), min_size=1, max_size=2))
        modes.append(tuple(leaves))
    spec = StridedSpec(tuple(modes))
    if math.prod(spec.in_sizes) > max_points:
        return StridedSpec((((draw(SIZES), draw(strides)),),))
    return spec


@st.composite
def swizzles(draw: st.DrawFn) -> SwizzleSpec:
    bits = draw(st.integers(0, 3))
    shift = draw(st.integers(bits, bits + 3)) * draw(st.sampled_from([1, -1]))
    return SwizzleSpec(bits, draw(st.integers(0, 4)), shift)


@st.composite
def composed_specs(draw: st.DrawFn) -> ComposedSpec:
    inner = draw(strided_specs(max_points=256, nonneg=True))
    if draw(st.booleans()):
        return ComposedSpec(draw(swizzles()), draw(st.integers(0, 40)), inner)
    outer = StridedSpec((tuple(draw(st.lists(st.tuples(SIZES, STRIDES), min_size=1, max_size=3))),))
    return ComposedSpec(outer, draw(st.integers(-20, 20)), inner)


@st.composite
def piecewise_layouts(draw: st.DrawFn) -> PiecewiseLayout:
    """A box cut into row bands (a valid partition), an affine map per band."""
    rows, cols = draw(st.integers(1, 12)), draw(st.integers(1, 9))
    cuts = sorted(draw(st.sets(st.integers(1, rows - 1), max_size=3))) if rows > 1 else []
    bounds = [0, *cuts, rows]
    pieces = []
    for lo, hi in itertools.pairwise(bounds):
        a, b, c = (draw(st.integers(-4, 4)) for _ in range(3))
        pieces.append(
            Piece((ge("i", lo), lt("i", hi)), (Affine.var("i", a) + Affine.var("j", b) + c,))
        )
    return PiecewiseLayout(Domain.box((rows, cols), ("i", "j")), tuple(pieces), ("out",))


def ref_piecewise(layout: PiecewiseLayout, point: Point) -> Point:
    env = dict(zip(layout.domain.dims, point, strict=True))
    for piece in layout.pieces:  # guards are bands: the first holding piece is the only one
        if all(c.expr.evaluate(env) >= 0 for c in piece.guard):
            return tuple(o.evaluate(env) for o in piece.outputs)
    raise AssertionError("no piece")


def piecewise_sizes(layout: PiecewiseLayout) -> tuple[int, ...]:
    return tuple(hi + 1 for _, hi in layout.domain.bounding_box())  # type: ignore[union-attr]


# ------------------------------------------------------------------- the lift, point by point


@given(layout=linear_layouts(max_in_bits=6, max_out_bits=6, min_in_bits=1, min_out_bits=1))
def test_f2_lift_agrees_on_every_point(layout: LinearLayout) -> None:
    lifted = lift(layout)
    expected = {
        tuple(p.values()) + tuple(reference_apply(layout, p).values()) for p in all_inputs(layout)
    }
    assert graph(lifted) == expected


@given(spec=strided_specs())
def test_strided_lift_agrees_on_every_point(spec: StridedSpec) -> None:
    expected = ref_graph(spec.in_sizes, lambda p: (ref_strided(spec.modes, p),))
    assert graph(lift(spec)) == expected


@given(spec=strided_specs(max_points=200))
def test_index_view_is_the_colexicographic_function(spec: StridedSpec) -> None:
    size = math.prod(spec.in_sizes)
    leaves = [leaf for mode in spec.modes for leaf in mode]
    expected = {(x, ref_index(leaves, x)) for x in range(size)}
    assert graph(lift(spec, InputView.INDEX)) == expected


@given(spec=composed_specs())
def test_composed_lift_agrees_on_every_point(spec: ComposedSpec) -> None:
    def reference(p: Point) -> Point:
        y = spec.offset + ref_strided(spec.inner.modes, p)
        if isinstance(spec.outer, SwizzleSpec):
            return (ref_swizzle(spec.outer.bits, spec.outer.base, spec.outer.shift, y),)
        return (ref_index(spec.outer.modes[0], y),)

    points = box(spec.inner.in_sizes)
    if isinstance(spec.outer, StridedSpec):  # an index into a layout must be >= 0
        points = [p for p in points if spec.offset + ref_strided(spec.inner.modes, p) >= 0]
    assert graph(lift(spec)) == {p + reference(p) for p in points}


@given(layout=piecewise_layouts())
def test_piecewise_lift_agrees_on_every_point(layout: PiecewiseLayout) -> None:
    expected = ref_graph(piecewise_sizes(layout), lambda p: ref_piecewise(layout, p))
    assert graph(lift(layout)) == expected


def test_invalid_piecewise_layout_does_not_lift() -> None:
    dom = Domain.box((4,), ("i",))
    overlapping = PiecewiseLayout(
        dom, (Piece((lt("i", 3),), ("i",)), Piece((ge("i", 2),), ("i",))), ("o",)
    )
    with pytest.raises(LayoutError, match="overlap at"):
        lift(overlapping)


# ---------------------------------------------------------------------------------- equality

ROW_MAJOR_CUTE = StridedSpec.from_flat((4, 8), (8, 1))
ROW_MAJOR_F2 = F2Spec(
    (("dim0", 4), ("dim1", 8)), (("offset", 32),), (((8,), (16,)), ((1,), (2,), (4,)))
)
ROW_MAJOR_PIECEWISE = PiecewiseLayout.single(
    Domain.box((4, 8), ("r", "c")), [Affine.var("r", 8) + "c"], ["offset"]
)


def test_row_major_is_equal_in_all_three_kinds() -> None:
    kinds = (ROW_MAJOR_CUTE, ROW_MAJOR_F2, ROW_MAJOR_PIECEWISE)
    for a, b in itertools.product(kinds, repeat=2):
        verdict = equal(a, b)
        assert verdict, (a, b, verdict)
    assert equal(ROW_MAJOR_CUTE, ROW_MAJOR_PIECEWISE).decided_by is Method.ISL
    assert equal(ROW_MAJOR_F2, ROW_MAJOR_CUTE).decided_by is Method.F2_ALGEBRA


def test_column_major_is_not_row_major() -> None:
    col = StridedSpec.from_flat((4, 8), (1, 4))
    for other in (ROW_MAJOR_F2, ROW_MAJOR_PIECEWISE):
        verdict = equal(col, other)
        assert not verdict
        p = verdict.counterexample
        assert p is not None
        assert (ref_strided(col.modes, p),) == verdict.left
        assert (8 * p[0] + p[1],) == verdict.right != verdict.left


def test_cheap_rungs_answer_before_isl() -> None:
    clear_caches()
    col = StridedSpec.from_flat((4, 8), (1, 4))
    assert equal(col, ROW_MAJOR_PIECEWISE).decided_by is Method.SAMPLE
    assert cache_stats().isl_queries == 0


POW2_SIZES = st.sampled_from([1, 2, 4, 8])
POW2_STRIDES = st.sampled_from([0, 1, 2, 4, 8, 16])


@given(
    leaves=st.lists(st.tuples(POW2_SIZES, POW2_STRIDES), min_size=1, max_size=3),
    swizzle=st.one_of(st.none(), swizzles()),
)
def test_power_of_two_strides_are_f2_only_without_carries(
    leaves: list[tuple[int, int]], swizzle: SwizzleSpec | None
) -> None:
    """Sum equals XOR only when the strides' bit ranges never overlap: the F2 rung must not
    mistake a carrying layout for the XOR layout with the same bases."""
    strided = StridedSpec.from_flat([s for s, _ in leaves], [d for _, d in leaves])
    layout = strided if swizzle is None else ComposedSpec(swizzle, 0, strided)

    def xor_of_bits(p: Point) -> int:
        acc = 0
        for x, (size, stride) in zip(p, leaves, strict=True):
            for i in range(size.bit_length() - 1):
                if x >> i & 1:
                    acc ^= stride << i
        return acc

    def reference(p: Point) -> Point:
        y = ref_strided(strided.modes, p)
        return (
            y if swizzle is None else ref_swizzle(swizzle.bits, swizzle.base, swizzle.shift, y),
        )

    def xor_reference(p: Point) -> Point:
        y = xor_of_bits(p)
        return (
            y if swizzle is None else ref_swizzle(swizzle.bits, swizzle.base, swizzle.shift, y),
        )

    bases = tuple(
        tuple(
            xor_reference(tuple((1 << i) if k == d else 0 for k in range(len(leaves))))
            for i in range(size.bit_length() - 1)
        )
        for d, (size, _) in enumerate(leaves)
    )
    top = max([v for images in bases for (v,) in images] + [1]).bit_length()
    f2 = F2Spec(
        tuple((f"d{k}", s) for k, (s, _) in enumerate(leaves)), (("offset", 1 << top),), bases
    )
    sizes = strided.in_sizes
    same = all(reference(p) == xor_reference(p) for p in box(sizes))
    verdict = equal(layout, f2)
    assert bool(verdict) == same
    if not same:
        check_refutation(verdict, reference, xor_reference)


def check_refutation(
    verdict: object, left: Callable[[Point], Point], right: Callable[[Point], Point]
) -> None:
    assert not verdict
    p = verdict.counterexample  # type: ignore[attr-defined]
    assert p is not None
    assert left(p) != right(p)
    assert verdict.left == left(p) and verdict.right == right(p)  # type: ignore[attr-defined]


@given(spec=strided_specs(max_points=300), data=st.data())
def test_strided_equals_its_piecewise_spelling_and_not_a_perturbed_one(
    spec: StridedSpec, data: st.DataObject
) -> None:
    """The same function spelled as bands of a piecewise layout (flat modes) is proven equal;
    one band's map moved by one is refuted with a point where the values differ."""
    flat = StridedSpec.from_flat(
        [s for m in spec.modes for s, _ in m], [d for m in spec.modes for _, d in m]
    )
    sizes = flat.in_sizes
    names = tuple(f"x{k}" for k in range(len(sizes)))
    value = sum((Affine.var(n, d) for n, (_, d) in zip(names, flat.leaves, strict=True)), Affine())
    cut = data.draw(st.integers(0, sizes[0]))
    bands = [Piece((lt(names[0], cut),), (value,)), Piece((ge(names[0], cut),), (value,))]
    spelled = PiecewiseLayout(Domain.box(sizes, names), tuple(bands), ("offset",))
    assert equal(flat, spelled)
    moved = data.draw(st.integers(0, 1))
    bands[moved] = Piece(bands[moved].guard, (value + 1,))
    perturbed = PiecewiseLayout(Domain.box(sizes, names), tuple(bands), ("offset",))
    band_is_empty = (moved == 0 and cut == 0) or (moved == 1 and cut == sizes[0])
    verdict = equal(flat, perturbed)
    if band_is_empty:
        assert verdict
    else:
        check_refutation(
            verdict,
            lambda p: (ref_strided(flat.modes, p),),
            lambda p: ref_piecewise_any(perturbed, p),
        )


def ref_piecewise_any(layout: PiecewiseLayout, point: Point) -> Point:
    env = dict(zip(layout.domain.dims, point, strict=True))
    (hit,) = [p for p in layout.pieces if all(c.holds(env) for c in p.guard)]
    return tuple(o.evaluate(env) for o in hit.outputs)


@given(spec=strided_specs(max_points=300), data=st.data())
def test_isl_finds_a_single_hidden_difference(spec: StridedSpec, data: st.DataObject) -> None:
    """A piecewise copy that differs at one point only: samples rarely see it; ISL must."""
    flat = StridedSpec.from_flat(
        [s for m in spec.modes for s, _ in m], [d for m in spec.modes for _, d in m]
    )
    sizes = flat.in_sizes
    names = tuple(f"x{k}" for k in range(len(sizes)))
    value = sum((Affine.var(n, d) for n, (_, d) in zip(names, flat.leaves, strict=True)), Affine())
    spot = tuple(data.draw(st.integers(0, s - 1)) for s in sizes)
    here = tuple(eq(n, v) for n, v in zip(names, spot, strict=True))
    pieces = [Piece(here, (value + 7,))]
    for k in range(len(names)):  # the complement of the spot, as disjoint pieces
        pieces.append(Piece((*here[:k], lt(names[k], spot[k])), (value,)))
        pieces.append(Piece((*here[:k], ge(names[k], spot[k] + 1)), (value,)))
    hidden = PiecewiseLayout(Domain.box(sizes, names), tuple(pieces), ("offset",))
    verdict = equal(flat, hidden)
    assert not verdict and verdict.counterexample == spot
    assert verdict.right == (verdict.left[0] + 7,)  # type: ignore[index]


@given(a=strided_specs(max_points=120), b=strided_specs(max_points=120))
def test_equal_agrees_with_tables(a: StridedSpec, b: StridedSpec) -> None:
    verdict = equal(a, b)
    same_shape = a.in_sizes == b.in_sizes
    same_table = same_shape and all(
        ref_strided(a.modes, p) == ref_strided(b.modes, p) for p in box(a.in_sizes)
    )
    assert bool(verdict) == same_table
    if not verdict and verdict.counterexample is not None and same_shape:
        check_refutation(
            verdict, lambda p: (ref_strided(a.modes, p),), lambda p: (ref_strided(b.modes, p),)
        )
    forced = equal(lift(a), lift(b))  # the ISL rung alone must agree
    assert bool(forced) == same_table


@given(spec=composed_specs(), data=st.data())
def test_swizzled_layouts_against_their_f2_form(spec: ComposedSpec, data: st.DataObject) -> None:
    """A swizzled power-of-two layout equals the F2 layout built bit by bit in the test."""
    if not isinstance(spec.outer, SwizzleSpec):
        return
    bits = [data.draw(st.integers(0, 3)) for _ in range(2)]
    inner = StridedSpec.from_flat([1 << bits[0], 1 << bits[1]], [1 << (bits[1] + 2), 1])
    sw = ComposedSpec(spec.outer, 0, inner)

    def reference(p: Point) -> Point:
        return (
            ref_swizzle(sw.outer.bits, sw.outer.base, sw.outer.shift, ref_strided(inner.modes, p)),
        )  # type: ignore[union-attr]

    bases = tuple(
        tuple(reference(tuple((1 << i) if k == d else 0 for k in range(2))) for i in range(bits[d]))
        for d in range(2)
    )
    top = max([v for images in bases for (v,) in images] + [1]).bit_length()
    f2 = F2Spec((("a", 1 << bits[0]), ("b", 1 << bits[1])), (("offset", 1 << top),), bases)
    assert equal(sw, f2) and equal(f2, sw)
    assert equal(lift(sw), lift(f2))
    if bits[0]:
        flipped = list(map(list, bases))
        flipped[0][0] = (bases[0][0][0] ^ 1,)
        wrong = F2Spec(f2.in_dims, (("offset", 1 << max(top, 1)),), tuple(map(tuple, flipped)))
        check_refutation(equal(sw, wrong), reference, wrong.evaluate)
        check_refutation(equal(lift(sw), lift(wrong)), reference, wrong.evaluate)


def test_signature_mismatches_are_refuted_without_isl() -> None:
    clear_caches()
    rank = equal(ROW_MAJOR_CUTE, StridedSpec.from_flat((32,), (1,)))
    assert not rank and rank.decided_by is Method.SIGNATURE and "2 input dims vs 1" in rank.reason
    sizes = equal(ROW_MAJOR_CUTE, StridedSpec.from_flat((4, 9), (9, 1)))
    assert (
        not sizes and sizes.counterexample == (0, 8) and sizes.left is None and sizes.right == (8,)
    )
    assert cache_stats().isl_queries == 0


def test_interval_rung_refutes_with_the_extreme_point() -> None:
    a = StridedSpec.from_flat((5, 3), (3, 1))
    b = StridedSpec.from_flat((5, 3), (3, 2))  # max 16 vs 14: (4, 2) tells them apart
    verdict = equal(a, b)
    assert verdict.decided_by is Method.INTERVAL and verdict.counterexample == (4, 2)
    assert verdict.left == (14,) and verdict.right == (16,)


def test_symbolic_piecewise_equality_names_the_parameter() -> None:
    dom = Domain.box(("N",), ("i",))
    whole = PiecewiseLayout.single(dom, ["i"], ["o"])
    split = PiecewiseLayout(
        dom, (Piece((lt("i", 64),), ("i",)), Piece((ge("i", 64),), ("i",))), ("o",)
    )
    off = PiecewiseLayout(
        dom, (Piece((lt("i", 64),), ("i",)), Piece((ge("i", 64),), (Affine.var("i") + 1,))), ("o",)
    )
    assert equal(whole, split)
    verdict = equal(whole, off)
    assert not verdict and verdict.counterexample[0] >= 64  # type: ignore[index]
    assert verdict.params["N"] > verdict.counterexample[0]  # type: ignore[index]
    assert verdict.right == (verdict.left[0] + 1,)  # type: ignore[index]
    with pytest.raises(LayoutError, match="needs a concrete box"):
        lift(whole, InputView.INDEX)


# ------------------------------------------------------------------------------- injectivity


def check_injectivity(verdict: object, fn: Callable[[Point], Point], sizes: Sequence[int]) -> None:
    values = [fn(p) for p in box(sizes)]
    assert bool(verdict) == (len(set(values)) == len(values))
    witness = verdict.witness  # type: ignore[attr-defined]
    if witness is not None:
        x, y = witness
        assert x != y and fn(x) == fn(y)


@given(spec=strided_specs(max_points=200))
def test_strided_injectivity_matches_enumeration(spec: StridedSpec) -> None:
    check_injectivity(is_injective(spec), lambda p: (ref_strided(spec.modes, p),), spec.in_sizes)


@given(layout=linear_layouts(max_in_bits=7, max_out_bits=7))
def test_f2_injectivity_matches_enumeration(layout: LinearLayout) -> None:
    spec = as_spec(layout)
    verdict = is_injective(layout)
    assert verdict.decided_by is Method.F2_ALGEBRA
    check_injectivity(verdict, spec.evaluate, spec.in_sizes)  # type: ignore[union-attr]


@given(spec=composed_specs())
def test_composed_injectivity_matches_enumeration(spec: ComposedSpec) -> None:
    def fn(p: Point) -> Point:
        y = spec.offset + ref_strided(spec.inner.modes, p)
        if isinstance(spec.outer, SwizzleSpec):
            return (ref_swizzle(spec.outer.bits, spec.outer.base, spec.outer.shift, y),)
        return (ref_index(spec.outer.modes[0], y),)

    if isinstance(spec.outer, StridedSpec) and spec.offset < 0:
        return  # partial domains are covered by the lift test
    check_injectivity(is_injective(spec), fn, spec.inner.in_sizes)


@given(layout=piecewise_layouts())
def test_piecewise_injectivity_matches_enumeration(layout: PiecewiseLayout) -> None:
    check_injectivity(
        is_injective(layout), lambda p: ref_piecewise(layout, p), piecewise_sizes(layout)
    )


def test_injectivity_rungs() -> None:
    assert is_injective(StridedSpec.from_flat((2, 2), (3, 2))).decided_by is Method.STRIDES
    pigeon = is_injective(StridedSpec.from_flat((4, 4), (3, 6)))  # 16 points, 10 values
    assert not pigeon and pigeon.decided_by is Method.INTERVAL
    hard = is_injective(StridedSpec.from_flat((2, 3), (3, 2)))  # 0,2,4,3,5,7: needs ISL
    assert hard and hard.decided_by is Method.ISL
    clash = is_injective(StridedSpec.from_flat((3, 2, 2), (2, 4, 100)))  # (2,0,0) ~ (0,1,0)
    assert not clash and clash.decided_by is Method.ISL
    x, y = clash.witness  # type: ignore[misc]
    assert x != y and 2 * x[0] + 4 * x[1] + 100 * x[2] == 2 * y[0] + 4 * y[1] + 100 * y[2]


# ------------------------------------------------------------------------- set operations


@given(spec=strided_specs(max_points=200))
def test_image_is_the_set_of_values(spec: StridedSpec) -> None:
    assert isl_points(image(spec)) == {(ref_strided(spec.modes, p),) for p in box(spec.in_sizes)}


MMA_ACC = LinearLayout(
    {"register": [[0, 1], [8, 0]], "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]},
    {"dim0": 16, "dim1": 8},
)


def test_project_keeps_what_was_asked() -> None:
    rows = project(MMA_ACC, keep_out=["dim0"])
    assert rows.function is not None and rows.out_dims == ("dim0",)
    full = {
        (r, l): reference_apply(MMA_ACC, {"register": r, "lane": l})
        for r in range(4)
        for l in range(32)
    }
    assert graph(rows) == {(r, l, v["dim0"]) for (r, l), v in full.items()}
    per_lane = project(MMA_ACC, keep_in=["lane"])
    assert per_lane.function is None and per_lane.in_dims == ("lane",)
    assert graph(per_lane) == {(l, v["dim0"], v["dim1"]) for (_, l), v in full.items()}
    with pytest.raises(LayoutError, match="'warp' is not an input dim"):
        project(MMA_ACC, keep_in=["warp"])


@given(spec=strided_specs(max_points=200), data=st.data())
def test_intersect_domain_keeps_the_guarded_points(spec: StridedSpec, data: st.DataObject) -> None:
    limit = data.draw(st.integers(0, spec.in_sizes[0]))
    cut = intersect_domain(spec, [lt("m0", limit)])
    expected = {p + (ref_strided(spec.modes, p),) for p in box(spec.in_sizes) if p[0] < limit}
    assert graph(cut) == expected
    as_domain = intersect_domain(spec, Domain.box([limit or 1, *spec.in_sizes[1:]]))
    assert graph(as_domain) == {
        p + (ref_strided(spec.modes, p),) for p in box(spec.in_sizes) if p[0] < max(limit, 1)
    }


@given(
    inner=linear_layouts(
        max_in_bits=5, max_out_bits=5, min_in_bits=1, min_out_bits=1, out_names=("dim0",)
    ),
    outer=strided_specs(max_points=64),
)
def test_compose_reads_the_offset_as_an_index(inner: LinearLayout, outer: StridedSpec) -> None:
    leaves = [leaf for mode in outer.modes for leaf in mode]
    size = math.prod(outer.in_sizes)
    composite = compose(outer, inner, outer_view=InputView.INDEX)
    expected = set()
    for p in all_inputs(inner):
        y = reference_apply(inner, p)["dim0"]
        if y < size:  # the index view's domain is [0, size)
            expected.add(tuple(p.values()) + (ref_index(leaves, y),))
    assert graph(composite) == expected


def test_compose_checks_arity() -> None:
    with pytest.raises(LayoutError, match="inner layout has 2 outputs, the outer 1 inputs"):
        compose(StridedSpec.from_flat((8,), (1,)), MMA_ACC)


# -------------------------------------------------------------------------------- adapters


def test_linear_layout_adapter_keeps_dims_and_bases() -> None:
    spec = as_spec(MMA_ACC)
    assert isinstance(spec, F2Spec)
    assert spec.in_dims == (("register", 4), ("lane", 32)) and spec.out_dims == (
        ("dim0", 16),
        ("dim1", 8),
    )
    assert all(
        spec.evaluate(tuple(p.values())) == tuple(reference_apply(MMA_ACC, p).values())
        for p in all_inputs(MMA_ACC)
    )


def test_cute_adapter() -> None:
    cute = pytest.importorskip("tilekit.layout.cute")
    nested = cute.Layout(((2, 3), 5), ((5, 10), 1))
    spec = as_spec(nested)
    assert spec == StridedSpec((((2, 5), (3, 10)), ((5, 1),)))
    assert equal(nested, StridedSpec((((2, 5), (3, 10)), ((5, 1),))))
    row_major = cute.Layout((4, 8), (8, 1))
    assert equal(
        row_major, LinearLayout({"dim0": [[8], [16]], "dim1": [[1], [2], [4]]}, {"offset": 32})
    )
    swizzled = cute.ComposedLayout(cute.Swizzle(2, 0, 3), 0, cute.Layout((4, 8), (8, 1)))
    assert graph(lift(swizzled)) == {
        (r, c, int(swizzled(r, c))) for r in range(4) for c in range(8)
    }
    with pytest.raises(LayoutError, match="has no domain to lift"):
        lift(cute.Swizzle(3, 3, 3))
    with pytest.raises(LayoutError, match="cannot lift str"):
        lift("row-major")


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: F2Spec((("a", 3),), (("o", 4),), (((1,),),)), "powers of two"),
        (lambda: F2Spec((("a", 4),), (("o", 4),), (((1,),),)), "needs 2 bases, got 1"),
        (lambda: F2Spec((("a", 2),), (("o", 4),), (((4,),),)), "does not fit out dims"),
        (lambda: StridedSpec(()), "at least one mode"),
        (lambda: StridedSpec((((0, 1),),)), "mode sizes must be >= 1"),
        (lambda: SwizzleSpec(3, 0, 2), "malformed"),
    ],
)
def test_malformed_specs_are_rejected(build: Callable[[], object], reason: str) -> None:
    with pytest.raises(LayoutError, match=reason):
        build()


# ------------------------------------------------------------------------------ cost and caches


def swizzle_128b_bf16() -> tuple[ComposedSpec, F2Spec]:
    """A 128 x 64 bf16 shared tile (128-byte rows) under the 128-byte swizzle, in two kinds:
    CuTe's Swizzle<3,3,3> o (128,64):(64,1), and the F2 layout written bit by bit."""

    def sw(offset: int) -> int:  # 16-byte chunk (bits 3-5) ^= row mod 8 (bits 6-8)
        return offset ^ ((offset >> 3) & 0b111000)

    cute = ComposedSpec(SwizzleSpec(3, 3, 3), 0, StridedSpec.from_flat((128, 64), (64, 1)))
    f2 = F2Spec(
        (("dim0", 128), ("dim1", 64)),
        (("offset", 8192),),
        (tuple((sw(64 << i),) for i in range(7)), tuple((sw(1 << i),) for i in range(6))),
    )
    return cute, f2


def test_swizzle_equality_costs_milliseconds_and_repeats_for_free() -> None:
    cute, f2 = swizzle_128b_bf16()
    clear_caches()
    start = time.perf_counter()
    fast = equal(cute, f2)
    algebra_s = time.perf_counter() - start
    assert fast and fast.decided_by is Method.F2_ALGEBRA  # both sides are F2: no ISL at all
    assert cache_stats().isl_queries == 0

    start = time.perf_counter()
    proven = equal(lift(cute), lift(f2))  # the ISL rung on its own, lifts included
    isl_s = time.perf_counter() - start
    assert proven and proven.decided_by is Method.ISL

    start = time.perf_counter()
    again = equal(cute, f2)
    cached_s = time.perf_counter() - start
    assert again == fast and cache_stats().answer_hits == 1
    lifts_before = cache_stats().lift_misses
    lift(cute), lift(f2)
    assert cache_stats().lift_misses == lifts_before and cache_stats().lift_hits >= 2
    print(
        f"\n128x64 bf16 SW128: F2 rung {algebra_s * 1e3:.3f} ms, ISL rung {isl_s * 1e3:.1f} ms, "
        f"cached {cached_s * 1e6:.1f} us"
    )
    assert algebra_s < 0.05 and isl_s < 1.0 and cached_s < 0.001

    # one flipped bit is refuted before ISL, and the witness is real
    broken = F2Spec(
        f2.in_dims, f2.out_dims, (f2.bases[0], ((f2.bases[1][0][0] ^ 1,), *f2.bases[1][1:]))
    )
    verdict = equal(cute, broken)
    assert not verdict and cute.evaluate(verdict.counterexample) != broken.evaluate(
        verdict.counterexample
    )  # type: ignore[arg-type]
    assert is_injective(cute).decided_by is Method.STRIDES  # a swizzle is a bijection: no ISL


def test_isl_budget_turns_a_runaway_query_into_a_layout_error() -> None:
    ctx = isl_context()
    limit = ctx.get_max_operations()
    cute, f2 = swizzle_128b_bf16()
    lifted_cute, lifted_f2 = lift(cute), lift(f2)
    ctx.set_max_operations(50)
    try:
        with pytest.raises(LayoutError, match="ISL could not decide whether two layouts are equal"):
            equal(lifted_cute, lifted_f2)
    finally:
        ctx.set_max_operations(limit)
    assert equal(lifted_cute, lifted_f2)


def test_value_ranges_are_sound() -> None:
    cute, f2 = swizzle_128b_bf16()
    values = [cute.evaluate(p)[0] for p in box((128, 64))]
    (r,) = value_ranges(cute)  # type: ignore[misc]
    assert r.lo <= min(values) and max(values) <= r.hi
    assert all((v - r.residue) % r.modulus == 0 for v in values)
    (exact,) = value_ranges(f2)  # type: ignore[misc]
    assert exact.exact and (exact.lo, exact.hi) == (0, 8191)
    assert f2.evaluate(exact.argmax) == (8191,)  # type: ignore[arg-type]


def test_tma_128b_swizzle_matches_cute_swizzle_across_modules() -> None:
    """shared.nvidia_swizzle (offset -> coordinates, F2) against CuTe's Swizzle<3,3,3> o
    (128,64):(64,1) (coordinates -> offset): inverse functions, so the composite is the
    identity on offsets."""
    cute = pytest.importorskip("tilekit.layout.cute")
    shared = pytest.importorskip("tilekit.layout.shared")
    tile = shared.nvidia_swizzle(shared.SwizzleMode.B128, (128, 64), 2)
    cute_tile = cute.ComposedLayout(cute.Swizzle(3, 3, 3), 0, cute.Layout((128, 64), (64, 1)))
    assert equal(cute_tile, tile.invert())
    assert equal(lift(cute_tile), lift(tile.invert()))
    assert equal(compose(cute_tile, tile), StridedSpec.from_flat((8192,), (1,)))
    wrong = cute.ComposedLayout(cute.Swizzle(2, 3, 3), 0, cute.Layout((128, 64), (64, 1)))
    verdict = equal(wrong, tile.invert())
    assert not verdict
    row, col = verdict.counterexample  # type: ignore[misc]
    assert tile.apply({"offset": verdict.right[0]}) == {"dim0": row, "dim1": col}  # type: ignore[index]
    assert tile.apply({"offset": verdict.left[0]}) != {"dim0": row, "dim1": col}  # type: ignore[index]
