"""Piecewise layouts and the tiled core/tail decomposition, against brute-force enumeration.

References here are written from the definitions (a tile is cut when it reaches past the
extent; a point belongs to the pieces whose intervals contain it), never from the code under
test.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from tilekit.errors import LayoutError
from tilekit.layout.piecewise import (
    Affine,
    Constraint,
    ConstraintKind,
    Domain,
    Piece,
    PiecewiseLayout,
    Region,
    SymbolicExtent,
    decompose_tiled,
    divisible,
    eq,
    ge,
    lt,
    not_divisible,
)

PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 97, 127, 251, 257)


# ------------------------------------------------------------------------------ affine pieces


@given(
    coeffs=st.lists(st.integers(-9, 9), min_size=3, max_size=3),
    constant=st.integers(-50, 50),
    values=st.lists(st.integers(-20, 20), min_size=3, max_size=3),
)
def test_affine_evaluates_like_its_definition(
    coeffs: list[int], constant: int, values: list[int]
) -> None:
    names = ("a", "b", "c")
    expr = constant + sum((Affine.var(n) * k for n, k in zip(names, coeffs, strict=True)), Affine())
    env = dict(zip(names, values, strict=True))
    assert expr.evaluate(env) == constant + sum(k * v for k, v in zip(coeffs, values, strict=True))
    assert (expr - expr).terms == () and (expr - expr).constant == 0
    assert expr.names == frozenset(n for n, k in zip(names, coeffs, strict=True) if k)


@given(value=st.integers(-100, 100), modulus=st.integers(2, 9))
def test_constraints_hold_by_definition(value: int, modulus: int) -> None:
    env = {"x": value}
    assert ge("x", 3).holds(env) == (value >= 3)
    assert lt("x", 3).holds(env) == (value < 3)
    assert eq("x", 3).holds(env) == (value == 3)
    assert divisible("x", modulus).holds(env) == (value % modulus == 0)
    assert not_divisible("x", modulus).holds(env) == (value % modulus != 0)


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: Affine.var("mod"), "not usable"),
        (lambda: Affine.var("2x"), "not usable"),
        (lambda: Affine.var("x") * 1.5, "scaled by an int"),
        (lambda: Constraint(Affine.var("x"), ConstraintKind.DIVISIBLE, 1), "modulus >= 2"),
        (lambda: Constraint(Affine.var("x"), ConstraintKind.NONNEG, 4), "takes no modulus"),
        (lambda: Domain(("i",), (lt("j", 3),)), "neither a dim"),
        (lambda: Domain(("i", "i")), "repeat a name"),
        (lambda: Domain.box((0, 4)), "extents must be >= 1"),
        (lambda: Affine.var("x").evaluate({}), "needs a value for 'x'"),
    ],
)
def test_malformed_expressions_and_domains_are_rejected(build: object, reason: str) -> None:
    with pytest.raises(LayoutError, match=reason):
        build()  # type: ignore[operator]


@given(extents=st.lists(st.integers(1, 9), min_size=1, max_size=3))
def test_box_domain_holds_exactly_its_points(extents: list[int]) -> None:
    box = Domain.box(extents)
    expected = set(itertools.product(*(range(e) for e in extents)))
    assert set(box.points()) == expected
    assert box.size() == len(expected)
    outside = tuple(extents)
    assert not box.contains(outside)
    assert not box.contains(tuple(-1 if k == 0 else 0 for k in range(len(extents))))


def test_guarded_domain_size_and_points_by_enumeration() -> None:
    # a triangle cut by a congruence: 0 <= j <= i < 9, i + j even
    tri = Domain.box((9, 9), ("i", "j")).with_guards(
        ge("i", "j"), divisible(Affine.var("i") + "j", 2)
    )
    expected = {(i, j) for i in range(9) for j in range(9) if j <= i and (i + j) % 2 == 0}
    assert set(tri.points()) == expected
    assert tri.size() == len(expected)


def test_symbolic_domain_needs_its_parameters() -> None:
    dom = Domain.box(("N", 4))
    assert dom.params == ("N",)
    assert dom.size({"N": 5}) == 20
    assert dom.contains((4, 3), {"N": 5}) and not dom.contains((5, 3), {"N": 5})
    with pytest.raises(LayoutError, match=r"symbolic in \['N'\]"):
        dom.contains((0, 0))
    with pytest.raises(LayoutError, match=r"symbolic in \['N'\]"):
        dom.size()


# ------------------------------------------------------------------------- piecewise layouts


@st.composite
def interval_layouts(
    draw: st.DrawFn,
) -> tuple[PiecewiseLayout, list[tuple[int, int]], list[tuple[int, int, int]]]:
    """A 2-D box cut along dim 0 into intervals (maybe with a boundary nudged off by one),
    one random affine map per interval; returns the layout and its intervals and maps."""
    rows, cols = draw(st.integers(1, 14)), draw(st.integers(1, 6))
    cuts = sorted(draw(st.sets(st.integers(1, rows - 1), max_size=3))) if rows > 1 else []
    bounds = [0, *cuts, rows]
    intervals = [[bounds[k], bounds[k + 1]] for k in range(len(bounds) - 1)]
    if draw(st.booleans()):
        k = draw(st.integers(0, len(intervals) - 1))
        side = draw(st.integers(0, 1))
        intervals[k][side] += draw(st.sampled_from([-1, 1]))
    maps = [
        (draw(st.integers(-3, 3)), draw(st.integers(-3, 3)), draw(st.integers(-9, 9)))
        for _ in intervals
    ]
    pieces = tuple(
        Piece((ge("i", lo), lt("i", hi)), (Affine.var("i", a) + Affine.var("j", b) + c,))
        for (lo, hi), (a, b, c) in zip(intervals, maps, strict=True)
    )
    layout = PiecewiseLayout(Domain.box((rows, cols), ("i", "j")), pieces, ("out",))
    return layout, [tuple(iv) for iv in intervals], maps  # type: ignore[misc]


@given(case=interval_layouts())
def test_validation_agrees_with_enumeration(case: tuple) -> None:
    layout, intervals, maps = case
    rows, cols = layout.domain.bounding_box()[0][1] + 1, layout.domain.bounding_box()[1][1] + 1  # type: ignore[index]
    cover = {
        (i, j): [k for k, (lo, hi) in enumerate(intervals) if lo <= i < hi]
        for i in range(rows)
        for j in range(cols)
    }
    partition = all(len(ks) == 1 for ks in cover.values())
    overlaps, gap = layout.find_overlaps(), layout.find_gap()
    assert (not overlaps and gap is None) == partition
    for o in overlaps:  # every reported overlap is real
        assert set(o.pieces) <= set(cover[o.point])
    if gap is not None:
        assert cover[gap.point] == []
    assert (gap is None) == all(cover.values())
    if partition:
        layout.validate()
        for (i, j), (k,) in cover.items():
            a, b, c = maps[k]
            assert layout(i, j) == (a * i + b * j + c,)
    else:
        with pytest.raises(LayoutError, match="do not partition the domain"):
            layout.validate()


def test_congruence_guards_partition_by_parity() -> None:
    dom = Domain.box((10,), ("i",))
    even_odd = PiecewiseLayout(
        dom,
        (
            Piece((divisible("i", 2),), (Affine.var("i", 3),)),
            Piece((not_divisible("i", 2),), ("i",)),
        ),
        ("o",),
    )
    even_odd.validate()
    assert [even_odd(i)[0] for i in range(10)] == [3 * i if i % 2 == 0 else i for i in range(10)]
    by_two_three = PiecewiseLayout(
        dom, (Piece((divisible("i", 2),), ("i",)), Piece((divisible("i", 3),), ("i",))), ("o",)
    )
    (overlap,) = by_two_three.find_overlaps()
    assert overlap.point[0] % 6 == 0
    assert by_two_three.find_gap().point[0] % 2 and by_two_three.find_gap().point[0] % 3  # type: ignore[union-attr]
    with pytest.raises(LayoutError, match="no piece covers"):
        by_two_three(1)
    with pytest.raises(LayoutError, match=r"pieces \[0, 1\] all cover"):
        by_two_three(6)
    with pytest.raises(LayoutError, match="outside the domain"):
        even_odd(10)


def test_symbolic_validation_holds_for_every_parameter_value() -> None:
    dom = Domain.box(("N",), ("i",))
    split = PiecewiseLayout(
        dom,
        (Piece((lt("i", 100),), ("i",)), Piece((ge("i", 100),), (Affine.var("i") - 100,))),
        ("o",),
    )
    split.validate()
    assert split(150, params={"N": 200}) == (50,)
    holey = PiecewiseLayout(
        dom, (Piece((lt("i", 100),), ("i",)), Piece((ge("i", 101),), ("i",))), ("o",)
    )
    gap = holey.find_gap()
    assert gap is not None and gap.point == (100,) and gap.params["N"] >= 101
    with pytest.raises(LayoutError, match=r"no piece covers \(100,\) \(with N="):
        holey.validate()


def test_piece_arity_and_names_are_checked() -> None:
    dom = Domain.box((4,), ("i",))
    with pytest.raises(LayoutError, match="has 2 outputs for out dims"):
        PiecewiseLayout(dom, (Piece((), ("i", 1)),), ("o",))
    with pytest.raises(LayoutError, match=r"uses \['k'\]"):
        PiecewiseLayout(dom, (Piece((lt("k", 2),), ("i",)),), ("o",))
    with pytest.raises(LayoutError, match="at least one piece"):
        PiecewiseLayout(dom, (), ("o",))


# -------------------------------------------------------------------------- tiled decomposition


def brute_force_tiles(
    extents: tuple[int, ...], tile: tuple[int, ...]
) -> dict[tuple[int, ...], tuple[bool, ...]]:
    """Every tile of the grid and which dims it is cut short in (it reaches past the extent)."""
    grid = [math.ceil(e / t) for e, t in zip(extents, tile, strict=True)]
    return {
        index: tuple((i + 1) * t > e for i, t, e in zip(index, tile, extents, strict=True))
        for index in itertools.product(*(range(g) for g in grid))
    }


@st.composite
def tiled_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank = draw(st.integers(1, 3))
    tile_cap = (64, 24, 6)[rank - 1]
    tile = tuple(
        draw(
            st.one_of(
                st.integers(2, tile_cap), st.sampled_from([p for p in PRIMES if p <= tile_cap])
            )
        )
        for _ in range(rank)
    )
    # extents: any size, primes, and sizes below one tile; at most ~12 tiles per dim
    extents = tuple(
        draw(
            st.one_of(
                st.integers(1, 12 * t),
                st.sampled_from(PRIMES).filter(lambda p, t=t: p <= 12 * t),
                st.integers(1, t - 1),
            )
        )
        for t in tile
    )
    return extents, tile


@given(shape=tiled_shapes())
@example(shape=((1000, 4097), (128, 256)))
@example(shape=((7, 3), (8, 8)))
@example(shape=((257,), (64,)))
def test_classes_partition_the_tiles_and_counts_match(
    shape: tuple[tuple[int, ...], tuple[int, ...]],
) -> None:
    extents, tile = shape
    decomposition = decompose_tiled(extents, tile)
    tiles = brute_force_tiles(extents, tile)
    expected_counts: dict[tuple[bool, ...], int] = {}
    for mask in tiles.values():
        expected_counts[mask] = expected_counts.get(mask, 0) + 1
    assert decomposition.counts() == expected_counts
    assert {c.tail_mask for c in decomposition.classes} == set(expected_counts)
    assert len(decomposition.classes) <= 2 ** len(tile)
    assert decomposition.grid() == tuple(
        math.ceil(e / t) for e, t in zip(extents, tile, strict=True)
    )
    for c in decomposition.classes:
        assert (c.guard == ()) == c.is_core == (not any(c.tail_mask))
    if math.prod(decomposition.grid()) <= 400:
        for index, mask in tiles.items():
            assert decomposition.class_of(index).tail_mask == mask


@given(shape=tiled_shapes())
@example(shape=((100, 37), (32, 16)))
def test_guards_keep_exactly_the_in_bounds_points(
    shape: tuple[tuple[int, ...], tuple[int, ...]],
) -> None:
    """For the last tile of the grid (it has every cut): the class guard holds exactly at the
    local points inside the extents, and a core tile's every local point is inside."""
    extents, tile = shape
    assume(math.prod(tile) <= 1024)
    decomposition = decompose_tiled(extents, tile)
    last = tuple(math.ceil(e / t) - 1 for e, t in zip(extents, tile, strict=True))
    for index in {last, tuple(0 for _ in tile)}:
        cls = decomposition.class_of(index)
        env = dict(zip(decomposition.tile_dims, index, strict=True))
        for local in itertools.product(*(range(t) for t in tile)):
            env.update(zip(decomposition.local_dims, local, strict=True))
            inside = all(
                i * t + l < e for i, l, t, e in zip(index, local, tile, extents, strict=True)
            )
            assert all(g.holds(env) for g in cls.guard) == inside
            if cls.is_core:
                assert inside


@given(shape=tiled_shapes())
def test_isl_proves_the_decomposition(shape: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    decomposition = decompose_tiled(*shape)
    decomposition.verify()
    pw = decomposition.to_piecewise()
    index = tuple(math.ceil(e / t) - 1 for e, t in zip(*shape, strict=True))
    local = tuple(0 for _ in shape[1])
    assert pw(*index, *local) == tuple(i * t for i, t in zip(index, shape[1], strict=True))


def test_the_design_example_has_four_classes() -> None:
    d = decompose_tiled((1000, 4097), (128, 256))
    by_region = {c.region: c for c in d.classes}
    assert {r: c.count for r, c in by_region.items()} == {
        Region.INTERIOR: 7 * 16,
        Region.RIGHT_EDGE: 7,
        Region.BOTTOM_EDGE: 16,
        Region.CORNER: 1,
    }
    assert by_region[Region.INTERIOR].guard == ()
    right = by_region[Region.RIGHT_EDGE]
    # the right edge tile keeps columns 4096 only: local column 0 in, 1 out
    assert all(g.holds({"t0": 3, "t1": 16, "l0": 127, "l1": 0}) for g in right.guard)
    assert not all(g.holds({"t0": 3, "t1": 16, "l0": 127, "l1": 1}) for g in right.guard)
    d.verify()


def test_broken_guard_is_caught_by_verify() -> None:
    d = decompose_tiled((100,), (32,))
    core, tail = d.classes
    loose = type(tail)(tail.tail_mask, tail.count, tail.tiles, (), tail.exists_when)
    broken = type(d)(d.extents, d.tile, (core, loose))
    with pytest.raises(LayoutError, match="leave the domain"):
        broken.verify()


# ------------------------------------------------------------------------------ symbolic extents

FACT = st.sampled_from([True, False, None])


@st.composite
def bucket_and_shape(
    draw: st.DrawFn,
) -> tuple[tuple[SymbolicExtent, ...], tuple[int, ...], dict[str, int]]:
    """Symbolic extents with random facts, and one concrete shape those facts allow."""
    rank = draw(st.integers(1, 2))
    tile = tuple(draw(st.integers(2, 40)) for _ in range(rank))
    extents, values = [], {}
    for d, t in enumerate(tile):
        div, big = draw(FACT), draw(FACT)
        assume(not (div is True and big is False))
        name = "MN"[d]
        candidates = [
            n
            for n in range(1, 8 * t)
            if (div is None or (n % t == 0) == div) and (big is None or (n >= t) == big)
        ]
        extents.append(SymbolicExtent(name, div, big))
        values[name] = draw(st.sampled_from(candidates))
    return tuple(extents), tile, values


@given(case=bucket_and_shape())
def test_symbolic_counts_match_every_allowed_shape(case: tuple) -> None:
    extents, tile, values = case
    symbolic = decompose_tiled(extents, tile)
    concrete_extents = tuple(values[e.name] for e in extents)
    expected: dict[tuple[bool, ...], int] = {}
    for mask in brute_force_tiles(concrete_extents, tile).values():
        expected[mask] = expected.get(mask, 0) + 1
    assert symbolic.counts(values) == expected
    assert set(expected) <= {c.tail_mask for c in symbolic.classes}
    for d, e in enumerate(extents):  # facts drop the classes they rule out
        if e.divisible is True:
            assert not any(c.tail_mask[d] for c in symbolic.classes)
        if e.at_least_tile is False:
            assert all(c.tail_mask[d] for c in symbolic.classes)


@given(case=bucket_and_shape())
def test_isl_proves_symbolic_decompositions_for_all_extents(case: tuple) -> None:
    extents, tile, _ = case
    decompose_tiled(extents, tile).verify()


def test_symbolic_bucket_example() -> None:
    m = SymbolicExtent("M")  # nothing known
    n = SymbolicExtent("N", divisible=True, at_least_tile=True)
    d = decompose_tiled((m, n), (128, 256))
    assert [c.region for c in d.classes] == [Region.INTERIOR, Region.BOTTOM_EDGE]
    interior, bottom = d.classes
    assert [str(c) for c in interior.exists_when] == ["M - 128 >= 0"]
    assert [str(c) for c in bottom.exists_when] == ["(M) % 128 != 0"]
    assert d.counts({"M": 1000, "N": 4096}) == {(False, False): 7 * 16, (True, False): 16}
    assert d.counts({"M": 100, "N": 512}) == {(True, False): 2}
    with pytest.raises(LayoutError, match="break the bucket's facts"):
        d.counts({"M": 100, "N": 500})


@given(div=FACT, big=FACT, tile=st.integers(2, 12))
def test_extent_facts_hold_for_exactly_the_allowed_sizes(
    div: bool | None, big: bool | None, tile: int
) -> None:
    assume(not (div is True and big is False))
    facts = SymbolicExtent("M", div, big).facts(tile)
    for n in range(-3, 6 * tile):
        allowed = n >= 1 and div in (None, n % tile == 0) and big in (None, n >= tile)
        assert all(f.holds({"M": n}) for f in facts) == allowed


def test_facts_guard_instantiation_and_size() -> None:
    d = decompose_tiled((SymbolicExtent("M", divisible=False),), (64,))
    assert d.counts({"M": 65}) == {(False,): 1, (True,): 1}
    with pytest.raises(LayoutError, match="break the bucket's facts"):
        d.counts({"M": 128})
    even = Domain.box(("N",), ("i",), facts=(divisible("N", 2),))
    assert even.size({"N": 4}) == 4 and even.size({"N": 3}) == 0


@pytest.mark.parametrize(
    ("extents", "tile", "reason"),
    [
        (
            (SymbolicExtent("M", divisible=True, at_least_tile=False),),
            (64,),
            "both divisible by 64 and smaller",
        ),
        ((0,), (4,), "must be an int >= 1"),
        ((8,), (0,), "tile sizes must be ints >= 1"),
        ((8, 8), (4,), "2 extents for a tile of rank 1"),
        ((SymbolicExtent("t0"),), (4,), "clash with tile/local dims"),
        ((SymbolicExtent("M", divisible=False),), (1,), "cannot be 'not divisible' by a tile of 1"),
    ],
)
def test_bad_decompositions_are_rejected(extents: tuple, tile: tuple, reason: str) -> None:
    with pytest.raises(LayoutError, match=reason):
        decompose_tiled(extents, tile)
