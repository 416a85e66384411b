"""Every layout kind as an integer map (ISL), so kinds can be compared, composed and cut.

F2-linear layouts, CuTe shape:stride layouts, swizzled/composed layouts and piecewise layouts
are lifted to one form: an ``isl.PwMultiAff`` (a piecewise quasi-affine function) from input
indices (hardware indices or coordinates) to outputs (tensor coordinates or offsets). On that
common ground :func:`equal` decides equality across kinds with a counterexample, and
:func:`is_injective`, :func:`image`, :func:`project`, :func:`intersect_domain` and
:func:`compose` work on any kind.

ISL is the slow path (DESIGN.md, "What ISL costs"), so every question climbs a ladder and
stops at the first rung that answers it:

1. algebra of the kind: F2 vs F2 compares bases, F2 injectivity is a rank, a swizzle is a
   bijection, strides sorted by size prove a shape:stride layout injective;
2. interval/congruence summaries: exact min/max of each output (with the point attaining them)
   refute equality, a pigeonhole count refutes injectivity;
3. a few concrete sample points refute equality;
4. ISL, under an operation budget.

The encoding keeps ISL fast. XOR is bit-split: each input bit is its own quasi-affine
dimension ``floor(x / 2**i) mod 2``, each output bit ``(a + b + ...) mod 2`` and the bits are
recombined by an affine sum; ISL turns every ``floor`` into an existentially quantified variable
with its defining affine constraints. (Writing XOR as disjunctions, or the bits as free
existentials, makes ``is_equal`` take minutes.) The mixed-radix split of a CuTe index is the
same device: digit ``floor(x / P) mod s``.

Layouts come in as plain data first (:class:`F2Spec`, :class:`StridedSpec`,
:class:`ComposedSpec`, :class:`~tilekit.layout.piecewise.PiecewiseLayout`) and through
:func:`as_spec` from ``LinearLayout``, CuTe's ``Layout`` and ``ComposedLayout``; the specs,
their concrete evaluation and :func:`value_ranges` live in :mod:`tilekit.layout.specs` and are
re-exported here. Lifts and answers are cached by the specs' value (:func:`cache_stats`,
:func:`clear_caches`).
Comparisons are positional: the k-th input (output) dim of one layout is the k-th of the other,
whatever the names.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

import islpy as isl

from tilekit.errors import LayoutError
from tilekit.layout import specs
from tilekit.layout.piecewise import (
    Constraint,
    Domain,
    PiecewiseLayout,
    isl_context,
    isl_sample,
    run_isl,
)
from tilekit.layout.specs import (
    ComposedSpec,
    F2Spec,
    InputView,
    LayoutSpec,
    StridedSpec,
    SwizzleSpec,
    ValueRange,
    as_spec,
    value_ranges,
)

__all__ = [
    "CacheStats",
    "ComposedSpec",
    "Equivalence",
    "F2Spec",
    "InputView",
    "Injectivity",
    "Lifted",
    "Method",
    "StridedSpec",
    "SwizzleSpec",
    "ValueRange",
    "as_spec",
    "cache_stats",
    "clear_caches",
    "compose",
    "equal",
    "image",
    "intersect_domain",
    "is_injective",
    "lift",
    "project",
    "value_ranges",
]

T = TypeVar("T")

# -------------------------------------------------------------------------------- the lifting


@dataclass(frozen=True, eq=False)
class Lifted:
    """A layout as an ISL object: ``function`` (None once a projection made it a relation)."""

    relation: isl.Map
    function: isl.PwMultiAff | None
    in_dims: tuple[str, ...]
    out_dims: tuple[str, ...]

    @staticmethod
    def of_function(
        function: isl.PwMultiAff, in_dims: Sequence[str], out_dims: Sequence[str]
    ) -> Lifted:
        return Lifted(
            isl.Map.from_pw_multi_aff(function), function, tuple(in_dims), tuple(out_dims)
        )

    @property
    def domain(self) -> isl.Set:
        return self.relation.domain()

    def __str__(self) -> str:
        return str(self.function if self.function is not None else self.relation)


class _Builder:
    """Quasi-affine expressions over a box of input dims, in tilekit's ISL context."""

    def __init__(self, sizes: Sequence[int]) -> None:
        ctx = isl_context()
        names = [f"x{k}" for k in range(len(sizes))]
        self.space = isl.Space.create_from_names(ctx, set=names)
        self.local = isl.LocalSpace.from_space(self.space)
        bounds = " and ".join(f"0 <= {n} < {s}" for n, s in zip(names, sizes, strict=True))
        self.box = isl.Set.read_from_str(ctx, f"{{ [{', '.join(names)}] : {bounds} }}")

    def var(self, k: int) -> isl.Aff:
        return isl.Aff.var_on_domain(self.local, isl.dim_type.set, k)

    def const(self, value: int) -> isl.Aff:
        return isl.Aff.zero_on_domain(self.local).add_constant_val(value)

    def function(self, outputs: Sequence[isl.Aff], domain: isl.Set | None = None) -> isl.PwMultiAff:
        where = self.box if domain is None else domain
        pieces = [
            isl.PwMultiAff.from_pw_aff(isl.PwAff.from_aff(o).intersect_domain(where))
            for o in outputs
        ]
        result = pieces[0]
        for p in pieces[1:]:
            result = result.flat_range_product(p)
        return result


def _bit(x: isl.Aff, i: int) -> isl.Aff:
    """Bit ``i`` of ``x`` (two's complement, so right for negative x too)."""
    return (x.scale_down_val(1 << i).floor() if i else x).mod_val(2)


def _digits(x: isl.Aff, leaves: Sequence[tuple[int, int]], b: _Builder) -> isl.Aff:
    """The strided sum of the mixed-radix digits of ``x`` (the last leaf of size > 1 open)."""
    open_at, total, place = specs.open_leaf(leaves), b.const(0), 1
    for i, (size, stride) in enumerate(leaves):
        if size == 1:
            continue
        quotient = x.scale_down_val(place).floor() if place > 1 else x
        digit = quotient if i == open_at else quotient.mod_val(size)
        total = total.add(digit.scale_val(stride))
        place *= size
    return total


def _swizzle(y: isl.Aff, sw: SwizzleSpec) -> isl.Aff:
    out = y
    for j in sw.flipped_bits:
        keep, flip = _bit(y, j), _bit(y, j + sw.shift)
        out = out.add(keep.add(flip).mod_val(2).sub(keep).scale_val(1 << j))
    return out


def _lift_f2(spec: F2Spec) -> isl.PwMultiAff:
    if not spec.in_dims or not spec.out_dims:
        raise LayoutError("an F2 layout needs at least one in dim and one out dim to be lifted")
    b = _Builder(spec.in_sizes)
    bits = [_bit(b.var(d), i) for d, images in enumerate(spec.bases) for i in range(len(images))]
    images = spec.bit_images()
    outputs = []
    for e, (_, size) in enumerate(spec.out_dims):
        total = b.const(0)
        for j in range(size.bit_length() - 1):
            chosen = [bits[k] for k, image in enumerate(images) if image[e] >> j & 1]
            if not chosen:
                continue
            parity = chosen[0]
            for extra in chosen[1:]:
                parity = parity.add(extra)
            if len(chosen) > 1:
                parity = parity.mod_val(2)
            total = total.add(parity.scale_val(1 << j))
        outputs.append(total)
    return b.function(outputs)


def _strided_offset(spec: StridedSpec, b: _Builder) -> isl.Aff:
    total = b.const(0)
    for k, mode in enumerate(spec.modes):
        total = total.add(_digits(b.var(k), mode, b))
    return total


def _lift_strided(spec: StridedSpec) -> isl.PwMultiAff:
    b = _Builder(spec.in_sizes)
    return b.function([_strided_offset(spec, b)])


def _lift_composed(spec: ComposedSpec) -> isl.PwMultiAff:
    b = _Builder(spec.in_sizes)
    y = _strided_offset(spec.inner, b).add_constant_val(spec.offset)
    if isinstance(spec.outer, SwizzleSpec):
        return b.function([_swizzle(y, spec.outer)])
    # an outer layout reads a 1-D index, defined for y >= 0 only
    defined = b.box.intersect(isl.PwAff.from_aff(y).nonneg_set())
    return b.function([_digits(y, spec.outer.leaves, b)], defined)


def _lift_piecewise(spec: PiecewiseLayout) -> isl.PwMultiAff:
    spec.validate()
    d = spec.domain
    prefix = f"[{', '.join(d.params)}] -> " if d.params else ""
    parts = []
    for piece in spec.pieces:
        where = " and ".join(c.isl() for c in d.constraints + piece.guard) or "true"
        parts.append(
            f"[{', '.join(d.dims)}] -> [{', '.join(f'({o})' for o in piece.outputs)}] : {where}"
        )
    return isl.PwMultiAff.read_from_str(isl_context(), f"{prefix}{{ {'; '.join(parts)} }}")


def _lift_modes(spec: LayoutSpec) -> isl.PwMultiAff:
    if isinstance(spec, F2Spec):
        return _lift_f2(spec)
    if isinstance(spec, StridedSpec):
        return _lift_strided(spec)
    if isinstance(spec, ComposedSpec):
        return _lift_composed(spec)
    return _lift_piecewise(spec)


def _index_view(function: isl.PwMultiAff, sizes: Sequence[int]) -> isl.PwMultiAff:
    """Precompose with the colexicographic split of one index over ``sizes``."""
    b = _Builder((math.prod(sizes),))
    x, place, coords = b.var(0), 1, []
    for size in sizes:
        quotient = x.scale_down_val(place).floor() if place > 1 else x
        coords.append(quotient.mod_val(size))
        place *= size
    return function.pullback_pw_multi_aff(b.function(coords))


def lift(layout: object, view: InputView = InputView.MODES) -> Lifted:
    """The layout as an ISL function, cached by the layout's value."""
    if isinstance(layout, Lifted):
        return layout
    spec = as_spec(layout)
    key = (spec, view)
    cached = _LIFTS.get(key)
    if cached is not None:
        _STATS.lift_hits += 1
        return cached
    _STATS.lift_misses += 1
    if view is InputView.INDEX:
        sizes = specs.box_sizes(spec)
        if sizes is None:
            raise LayoutError("the index view needs a concrete box domain starting at 0")
        function = _isl("lifting a layout", lambda: _index_view(_lift_modes(spec), sizes))
        lifted = Lifted.of_function(function, ("index",), specs.out_names(spec))
    else:
        function = _isl("lifting a layout", lambda: _lift_modes(spec))
        lifted = Lifted.of_function(function, specs.in_names(spec), specs.out_names(spec))
    _LIFTS.put(key, lifted)
    return lifted


# ------------------------------------------------------------------------------------- caches


@dataclass
class CacheStats:
    """How often a lift or an answer came from the cache, and how many ISL queries ran."""

    lift_hits: int = 0
    lift_misses: int = 0
    answer_hits: int = 0
    answer_misses: int = 0
    isl_queries: int = 0


class _Cache:
    """A small LRU map (layouts recur across passes; unbounded growth would not)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        if key in self.entries:
            self.entries.move_to_end(key)
            return self.entries[key]
        return None

    def put(self, key: Hashable, value: Any) -> None:
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


_LIFTS = _Cache()
_ANSWERS = _Cache()
_STATS = CacheStats()


def cache_stats() -> CacheStats:
    """A snapshot of the counters since the last :func:`clear_caches`."""
    return CacheStats(**vars(_STATS))


def clear_caches() -> None:
    _LIFTS.entries.clear()
    _ANSWERS.entries.clear()
    for name in vars(_STATS):
        setattr(_STATS, name, 0)


def _isl(question: str, query: Callable[[], T]) -> T:
    _STATS.isl_queries += 1
    return run_isl(question, query)


def _cached(key: Hashable, compute: Callable[[], T]) -> T:
    hit = _ANSWERS.get(key)
    if hit is not None:
        _STATS.answer_hits += 1
        return hit  # type: ignore[no-any-return]
    _STATS.answer_misses += 1
    answer = compute()
    _ANSWERS.put(key, answer)
    return answer


# ---------------------------------------------------------------------------------- equality


class Method(Enum):
    """Which rung of the ladder decided a question."""

    F2_ALGEBRA = "bases / rank over F2"
    STRIDES = "stride algebra"
    SIGNATURE = "domain shapes"
    INTERVAL = "interval/congruence summary"
    SAMPLE = "concrete sample points"
    ISL = "ISL"


@dataclass(frozen=True)
class Equivalence:
    """The verdict of :func:`equal`; truthy when equal.

    A refutation carries the input ``counterexample`` (and parameter values, for symbolic
    domains) and both layouts' values there (None where a layout is undefined).
    """

    equal: bool
    decided_by: Method
    counterexample: tuple[int, ...] | None = None
    left: tuple[int, ...] | None = None
    right: tuple[int, ...] | None = None
    params: dict[str, int] = field(default_factory=dict, hash=False, compare=False)
    reason: str = ""

    def __bool__(self) -> bool:
        return self.equal


def _equal_f2(a: F2Spec, b: F2Spec, view: InputView) -> Equivalence:
    same_domain = (
        a.in_sizes == b.in_sizes
        if view is InputView.MODES
        else (math.prod(a.in_sizes) == math.prod(b.in_sizes))
    )
    if not same_domain or len(a.out_dims) != len(b.out_dims):
        return _signature_mismatch(a, b, view)
    for k, (x, y) in enumerate(zip(a.bit_images(), b.bit_images(), strict=True)):
        if x != y:
            if view is InputView.INDEX:
                point: tuple[int, ...] = (1 << k,)
            else:
                point = specs.unit_point(a, k)
            return Equivalence(
                False, Method.F2_ALGEBRA, point, x, y, reason=f"input bit {k} maps differently"
            )
    return Equivalence(True, Method.F2_ALGEBRA)


def _signature_mismatch(a: LayoutSpec, b: LayoutSpec, view: InputView) -> Equivalence:
    ra, rb = specs.in_rank(a, view), specs.in_rank(b, view)
    if ra != rb:
        return Equivalence(False, Method.SIGNATURE, reason=f"{ra} input dims vs {rb}")
    oa, ob = len(specs.out_names(a)), len(specs.out_names(b))
    if oa != ob:
        return Equivalence(False, Method.SIGNATURE, reason=f"{oa} output dims vs {ob}")
    sa, sb = specs.view_sizes(a, view), specs.view_sizes(b, view)
    assert sa is not None and sb is not None
    d = next(k for k in range(ra) if sa[k] != sb[k])
    point = tuple(min(sa[d], sb[d]) if k == d else 0 for k in range(ra))
    inside_a = sa[d] > sb[d]
    value = specs.evaluate(a if inside_a else b, point, view)
    return Equivalence(
        False,
        Method.SIGNATURE,
        point,
        value if inside_a else None,
        None if inside_a else value,
        reason=f"input dim {d} has size {sa[d]} vs {sb[d]}",
    )


def _sample_points(sizes: Sequence[int], budget: int = 24) -> list[tuple[int, ...]]:
    """Corners, unit points at powers of two, and a few fixed pseudo-random points."""
    points = {tuple(0 for _ in sizes), tuple(s - 1 for s in sizes)}
    for d, size in enumerate(sizes):
        step = 1
        while step < size:
            points.add(tuple(step if k == d else 0 for k in range(len(sizes))))
            step *= 2
        points.add(tuple(size - 1 if k == d else 0 for k in range(len(sizes))))
    rng = random.Random(0x7173)
    for _ in range(budget):
        points.add(tuple(rng.randrange(s) for s in sizes))
    return sorted(points)


def _interval_refutation(a: LayoutSpec, b: LayoutSpec, view: InputView) -> Equivalence | None:
    """Exact extremes differ: the point attaining the larger max (smaller min) tells them apart."""
    if view is not InputView.MODES:
        return None
    ra, rb = value_ranges(a), value_ranges(b)
    if ra is None or rb is None:
        return None
    for x, y in zip(ra, rb, strict=True):
        if not (x.exact and y.exact):
            continue
        for point in (
            x.argmax if x.hi > y.hi else None,
            y.argmax if y.hi > x.hi else None,
            x.argmin if x.lo < y.lo else None,
            y.argmin if y.lo < x.lo else None,
        ):
            if point is not None:
                left, right = specs.evaluate(a, point, view), specs.evaluate(b, point, view)
                return Equivalence(
                    False, Method.INTERVAL, point, left, right, reason="the outputs' ranges differ"
                )
    return None


def _decide_equal(a: LayoutSpec, b: LayoutSpec, view: InputView) -> Equivalence:
    f2a, f2b = specs.as_f2(a), specs.as_f2(b)
    if f2a is not None and f2b is not None:
        return _equal_f2(f2a, f2b, view)
    sa, sb = specs.view_sizes(a, view), specs.view_sizes(b, view)
    if (
        specs.in_rank(a, view) != specs.in_rank(b, view)
        or len(specs.out_names(a)) != len(specs.out_names(b))
        or (sa is not None and sb is not None and sa != sb)
    ):
        return _signature_mismatch(a, b, view)
    refuted = _interval_refutation(a, b, view)
    if refuted is not None:
        return refuted
    if sa is not None and sb is not None:
        for point in _sample_points(sa):
            left, right = specs.evaluate(a, point, view), specs.evaluate(b, point, view)
            if left != right:
                return Equivalence(False, Method.SAMPLE, point, left, right, reason="values differ")
    return _equal_isl(lift(a, view), lift(b, view))


def _equal_isl(la: Lifted, lb: Lifted) -> Equivalence:
    fa, fb = la.function, lb.function
    if fa is None or fb is None:
        same = _isl("whether two relations are equal", lambda: la.relation.is_equal(lb.relation))
        return Equivalence(bool(same), Method.ISL, reason="" if same else "the relations differ")
    if fa.dim(isl.dim_type.out) != fb.dim(isl.dim_type.out) or fa.dim(isl.dim_type.in_) != fb.dim(
        isl.dim_type.in_
    ):
        return Equivalence(False, Method.SIGNATURE, reason="the maps' dimensions differ")
    params = sorted(
        {
            f.get_dim_name(isl.dim_type.param, k)
            for f in (fa, fb)
            for k in range(f.dim(isl.dim_type.param))
        }
    )

    def witness(where: isl.Set, reason: str) -> Equivalence:
        point, values = isl_sample(where, params)
        left = _value_at(la, point, values)
        right = _value_at(lb, point, values)
        return Equivalence(False, Method.ISL, point, left, right, values, reason)

    def decide() -> Equivalence:
        da, db = fa.domain(), fb.domain()
        only_a, only_b = da.subtract(db), db.subtract(da)
        if not only_a.is_empty():
            return witness(only_a, "only the first layout is defined there")
        if not only_b.is_empty():
            return witness(only_b, "only the second layout is defined there")
        for e in range(fa.dim(isl.dim_type.out)):
            differ = fa.get_pw_aff(e).sub(fb.get_pw_aff(e)).non_zero_set()
            if not differ.is_empty():
                return witness(differ, f"output {e} differs")
        return Equivalence(True, Method.ISL)

    return _isl("whether two layouts are equal", decide)


def _value_at(
    lifted: Lifted, point: Sequence[int], params: Mapping[str, int]
) -> tuple[int, ...] | None:
    """Evaluate a lifted function at a point by fixing the point in ISL (used for witnesses)."""
    assert lifted.function is not None
    rel = lifted.relation
    for name, value in params.items():
        k = rel.get_space().find_dim_by_name(isl.dim_type.param, name)
        if k >= 0:
            rel = rel.fix_val(isl.dim_type.param, k, value)
    for k, value in enumerate(point):
        rel = rel.fix_val(isl.dim_type.in_, k, value)
    image = rel.range()
    if image.is_empty():
        return None
    coords, _ = isl_sample(image, ())
    return coords


def equal(a: object, b: object, view: InputView = InputView.MODES) -> Equivalence:
    """Decide whether two layouts of any kinds are the same function (same domain, same values).

    F2 vs F2 compares bases; otherwise domain shapes, exact output ranges and sample points are
    tried before ISL. Answers are cached by the layouts' value.
    """
    if isinstance(a, Lifted) or isinstance(b, Lifted):
        return _equal_isl(lift(a, view), lift(b, view))
    sa, sb = as_spec(a), as_spec(b)
    return _cached(("equal", sa, sb, view), lambda: _decide_equal(sa, sb, view))


# ------------------------------------------------------------------------------- injectivity


@dataclass(frozen=True)
class Injectivity:
    """The verdict of :func:`is_injective`; truthy when injective. A refutation names two inputs
    with the same image when the deciding rung can produce them (pigeonhole cannot)."""

    injective: bool
    decided_by: Method
    witness: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def __bool__(self) -> bool:
        return self.injective


def _injective_f2(spec: F2Spec) -> Injectivity:
    pivots: dict[int, tuple[int, int]] = {}
    shifts, position = [], 0
    for _, size in spec.out_dims:
        shifts.append(position)
        position += size.bit_length() - 1
    for k, image in enumerate(spec.bit_images()):
        v = sum(x << s for x, s in zip(image, shifts, strict=True))
        mask = 1 << k
        while v:
            top = v.bit_length() - 1
            if top not in pivots:
                pivots[top] = (v, mask)
                break
            v, mask = v ^ pivots[top][0], mask ^ pivots[top][1]
        if not v:  # a nonzero combination of input bits maps to zero
            point = [0] * len(spec.in_dims)
            bit = 0
            for d, images in enumerate(spec.bases):
                for i in range(len(images)):
                    if mask >> bit & 1:
                        point[d] |= 1 << i
                    bit += 1
            zero = (0,) * len(spec.in_dims)
            return Injectivity(False, Method.F2_ALGEBRA, (zero, tuple(point)))
    return Injectivity(True, Method.F2_ALGEBRA)


def _injective_strided(spec: StridedSpec) -> Injectivity | None:
    """Zero strides refute; strides that each exceed the reach of all smaller ones prove."""
    leaves = []
    for k, mode in enumerate(spec.modes):
        place = 1
        for size, stride in mode:
            if size > 1:
                if stride == 0:
                    unit = tuple(place if j == k else 0 for j in range(len(spec.modes)))
                    return Injectivity(False, Method.STRIDES, ((0,) * len(spec.modes), unit))
                leaves.append((abs(stride), size))
            place *= size
    reach = 0
    for stride, size in sorted(leaves):
        if stride <= reach:
            break
        reach += (size - 1) * stride
    else:
        return Injectivity(True, Method.STRIDES)
    return None


def _pigeonhole(spec: LayoutSpec) -> Injectivity | None:
    ranges = value_ranges(spec)
    sizes = specs.box_sizes(spec)
    if ranges is None:
        return None
    points = (
        math.prod(sizes)
        if sizes is not None
        else (spec.domain.size() if isinstance(spec, PiecewiseLayout) else None)
    )
    if points is not None and points > math.prod(r.count_bound for r in ranges):
        return Injectivity(False, Method.INTERVAL)
    return None


def _injective_isl(lifted: Lifted) -> Injectivity:
    def decide() -> Injectivity:
        rel = lifted.relation
        if rel.is_injective():
            return Injectivity(True, Method.ISL)
        same_image = rel.apply_range(rel.reverse())
        distinct = same_image.subtract(isl.Map.identity(same_image.get_space()))
        pair = distinct.wrap()
        coords, _ = isl_sample(pair, ())
        n = len(coords) // 2
        return Injectivity(False, Method.ISL, (coords[:n], coords[n:]))

    return _isl("whether a layout is injective", decide)


def _decide_injective(spec: LayoutSpec) -> Injectivity:
    if isinstance(spec, F2Spec):
        return _injective_f2(spec)
    if isinstance(spec, StridedSpec):
        answer = _injective_strided(spec)
        if answer is not None:
            return answer
    if isinstance(spec, ComposedSpec) and isinstance(spec.outer, SwizzleSpec):
        # a swizzle is a bijection of the integers: it neither creates nor removes collisions
        inner = _decide_injective(spec.inner)
        return inner
    refuted = _pigeonhole(spec)
    if refuted is not None:
        return refuted
    return _injective_isl(lift(spec))


def is_injective(layout: object) -> Injectivity:
    """Whether distinct inputs always map to distinct outputs (cached)."""
    if isinstance(layout, Lifted):
        return _injective_isl(layout)
    spec = as_spec(layout)
    return _cached(("injective", spec), lambda: _decide_injective(spec))


# ------------------------------------------------------------------------- set operations


def image(layout: object, view: InputView = InputView.MODES) -> isl.Set:
    """The set of outputs the layout reaches."""
    lifted = lift(layout, view)
    return _isl("the image of a layout", lambda: lifted.relation.range())


def _positions(names: Sequence[str], keep: Sequence[int | str], what: str) -> list[int]:
    chosen = []
    for k in keep:
        if isinstance(k, str):
            if k not in names:
                raise LayoutError(f"{k!r} is not an {what} dim (have {list(names)})")
            k = names.index(k)
        if not 0 <= k < len(names):
            raise LayoutError(f"{what} dim {k} is out of range (have {len(names)})")
        chosen.append(k)
    return chosen


def project(
    layout: object,
    *,
    keep_in: Sequence[int | str] | None = None,
    keep_out: Sequence[int | str] | None = None,
    view: InputView = InputView.MODES,
) -> Lifted:
    """Forget some input and/or output dims (existentially). Dropping outputs keeps a function;
    dropping inputs generally gives a relation (which inputs reach which outputs)."""
    lifted = lift(layout, view)
    keep_i = (
        _positions(lifted.in_dims, keep_in, "input")
        if keep_in is not None
        else list(range(len(lifted.in_dims)))
    )
    keep_o = (
        _positions(lifted.out_dims, keep_out, "output")
        if keep_out is not None
        else list(range(len(lifted.out_dims)))
    )

    def run() -> Lifted:
        rel, fn = lifted.relation, lifted.function
        for k in reversed(range(len(lifted.out_dims))):
            if k not in keep_o:
                rel = rel.project_out(isl.dim_type.out, k, 1)
                fn = fn.drop_dims(isl.dim_type.out, k, 1) if fn is not None else None
        for k in reversed(range(len(lifted.in_dims))):
            if k not in keep_i:
                rel = rel.project_out(isl.dim_type.in_, k, 1)
                fn = None
        ins = tuple(n for k, n in enumerate(lifted.in_dims) if k in keep_i)
        outs = tuple(n for k, n in enumerate(lifted.out_dims) if k in keep_o)
        return Lifted(rel, fn, ins, outs)

    return _isl("a projection", run)


def intersect_domain(
    layout: object,
    where: Domain | isl.Set | Sequence[Constraint],
    view: InputView = InputView.MODES,
) -> Lifted:
    """The layout restricted to part of its domain (a ragged tile, a guard, a TMA box).

    Constraints name the layout's input dims; other names become parameters.
    """
    lifted = lift(layout, view)
    if isinstance(where, Domain):
        if where.rank != len(lifted.in_dims):
            raise LayoutError(
                f"a rank-{where.rank} domain cannot restrict {len(lifted.in_dims)} input dims"
            )
        region = where.isl_set()
    elif isinstance(where, isl.Set):
        region = isl.Set.read_from_str(isl_context(), str(where))
    else:
        constraints = tuple(where)
        names = set().union(*(c.names for c in constraints)) if constraints else set()
        params = tuple(sorted(names - set(lifted.in_dims)))
        region = Domain(lifted.in_dims, constraints, params).isl_set()

    def run() -> Lifted:
        fn = lifted.function.intersect_domain(region) if lifted.function is not None else None
        rel = lifted.relation.intersect_domain(region)
        return Lifted(rel, fn, lifted.in_dims, lifted.out_dims)

    return _isl("restricting a domain", run)


def compose(outer: object, inner: object, outer_view: InputView = InputView.MODES) -> Lifted:
    """``x -> outer(inner(x))`` on the inputs whose image lies in ``outer``'s domain.

    ``outer_view=INDEX`` reads the inner layout's single output (an offset) as the outer
    layout's 1-D index, CuTe's composition.
    """
    lo, li = lift(outer, outer_view), lift(inner)
    if len(li.out_dims) != len(lo.in_dims):
        raise LayoutError(
            f"cannot compose: the inner layout has {len(li.out_dims)} outputs, the outer "
            f"{len(lo.in_dims)} inputs"
        )

    def run() -> Lifted:
        if lo.function is not None and li.function is not None:
            return Lifted.of_function(
                lo.function.pullback_pw_multi_aff(li.function), li.in_dims, lo.out_dims
            )
        return Lifted(li.relation.apply_range(lo.relation), None, li.in_dims, lo.out_dims)

    return _isl("a composition", run)
