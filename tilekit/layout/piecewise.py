"""Piecewise-affine layouts over ragged integer domains, and the core/tail split of a tiled grid.

Real shapes are ragged (1000 x 4097 tiled by 128 x 256): an F2 layout cannot say "only the
first 104 rows of the last tile exist", and masking every access costs what a kernel can least
afford. This module states raggedness exactly:

* a :class:`Domain` is a Presburger set: named integer dims, symbolic extents as parameters,
  and affine bounds, equalities and congruences (``N % 128 == 0``) as constraints;
* a :class:`PiecewiseLayout` is a list of :class:`Piece` s, each an affine map under a guard;
  it is valid when the guards partition the domain (disjoint and covering), which ISL decides
  for every value of the parameters at once;
* :func:`decompose_tiled` splits a tiled ragged domain into a few *classes* of tiles (interior,
  right edge, bottom edge, corner; ``2**rank`` at most), each with its count and the guard its
  kernel must apply. Core tiles need no guard. Extents may be symbolic, with the facts a shape
  bucket knows (divisible by the tile, at least one tile), so one decomposition serves every
  shape of the bucket.

ISL runs in a private context with an operation budget (seed 004 warns of exponential worst
cases), so a runaway query becomes a :class:`LayoutError` instead of a hang.
"""

from __future__ import annotations

import itertools
import keyword
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import TypeAlias, TypeVar

import islpy as isl
import sympy

from tilekit.errors import LayoutError

__all__ = [
    "Affine",
    "Constraint",
    "ConstraintKind",
    "Domain",
    "Gap",
    "ISL_MAX_OPERATIONS",
    "Overlap",
    "Piece",
    "PiecewiseLayout",
    "Region",
    "SymbolicExtent",
    "TileClass",
    "TiledDecomposition",
    "decompose_tiled",
    "divisible",
    "eq",
    "ge",
    "gt",
    "isl_context",
    "isl_sample",
    "le",
    "lt",
    "not_divisible",
    "run_isl",
]

T = TypeVar("T")

# ------------------------------------------------------------------------------------------ ISL


ISL_MAX_OPERATIONS = 5_000_000
"""ISL's budget per query, in its own operation count (~2 s of a hard query here)."""

_CONTEXT: list[isl.Context] = []


def isl_context() -> isl.Context:
    """The private ISL context all of ``tilekit.layout``'s sets and maps live in (made lazily)."""
    if not _CONTEXT:
        ctx = isl.Context()
        ctx.set_max_operations(ISL_MAX_OPERATIONS)
        _CONTEXT.append(ctx)
    return _CONTEXT[0]


def run_isl(question: str, query: Callable[[], T]) -> T:
    """Run one ISL query under the operation budget; a blown budget becomes a LayoutError."""
    isl_context().reset_operations()
    try:
        return query()
    except isl.Error as exc:
        raise LayoutError(
            f"ISL could not decide {question}: {exc}",
            hints=[
                "the question is too expensive in integer-set form; ask it in F2 or stride "
                "algebra, or split the domain into smaller pieces",
            ],
        ) from exc


# --------------------------------------------------------------------------- affine expressions

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ISL_WORDS = frozenset(
    "and or not mod exists floor ceil min max true false implies infty NaN cst domain range".split()
)


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or name in _ISL_WORDS:
        raise LayoutError(
            f"{what} name {name!r} is not usable",
            hints=["use a plain identifier (letters, digits, _) that is not an ISL keyword"],
        )
    if keyword.iskeyword(name):
        raise LayoutError(f"{what} name {name!r} is a Python keyword")


@dataclass(frozen=True)
class Affine:
    """An integer affine expression ``sum(coeff * name) + constant`` over dims and parameters.

    Canonical (terms sorted by name, no zero coefficients), so equal expressions are equal
    objects and hash alike.
    """

    terms: tuple[tuple[str, int], ...] = ()
    constant: int = 0

    def __post_init__(self) -> None:
        merged: dict[str, int] = {}
        for name, coeff in self.terms:
            _check_name(name, "variable")
            merged[name] = merged.get(name, 0) + int(coeff)
        object.__setattr__(
            self, "terms", tuple(sorted((n, c) for n, c in merged.items() if c != 0))
        )
        object.__setattr__(self, "constant", int(self.constant))

    @staticmethod
    def var(name: str, coeff: int = 1) -> Affine:
        return Affine(((name, coeff),))

    @staticmethod
    def of(value: AffineLike) -> Affine:
        """Promote an int (a constant) or a str (a variable)."""
        if isinstance(value, Affine):
            return value
        if isinstance(value, str):
            return Affine.var(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise LayoutError(f"cannot use {value!r} as an affine expression")
        return Affine((), value)

    def __add__(self, other: AffineLike) -> Affine:
        o = Affine.of(other)
        return Affine(self.terms + o.terms, self.constant + o.constant)

    __radd__ = __add__

    def __neg__(self) -> Affine:
        return self * -1

    def __sub__(self, other: AffineLike) -> Affine:
        return self + (-Affine.of(other))

    def __rsub__(self, other: AffineLike) -> Affine:
        return Affine.of(other) - self

    def __mul__(self, factor: int) -> Affine:
        if isinstance(factor, bool) or not isinstance(factor, int):
            raise LayoutError(f"an affine expression can only be scaled by an int, not {factor!r}")
        return Affine(tuple((n, c * factor) for n, c in self.terms), self.constant * factor)

    __rmul__ = __mul__

    @property
    def names(self) -> frozenset[str]:
        return frozenset(n for n, _ in self.terms)

    def coefficient(self, name: str) -> int:
        return dict(self.terms).get(name, 0)

    def evaluate(self, env: Mapping[str, int]) -> int:
        try:
            return self.constant + sum(c * int(env[n]) for n, c in self.terms)
        except KeyError as exc:
            raise LayoutError(f"{self} needs a value for {exc.args[0]!r}") from None

    def substitute(self, env: Mapping[str, int]) -> Affine:
        """Replace the named variables by values (the others stay symbolic)."""
        fixed = sum(c * int(env[n]) for n, c in self.terms if n in env)
        return Affine(tuple((n, c) for n, c in self.terms if n not in env), self.constant + fixed)

    def to_sympy(self, symbols: Mapping[str, sympy.Symbol]) -> sympy.Expr:
        return sympy.Integer(self.constant) + sum(
            (c * symbols[n] for n, c in self.terms), sympy.Integer(0)
        )

    def __str__(self) -> str:
        parts = [
            f"{c}*{n}" if c not in (1, -1) else (n if c == 1 else f"-{n}") for n, c in self.terms
        ]
        if self.constant or not parts:
            parts.append(str(self.constant))
        text = " + ".join(parts)
        return text.replace("+ -", "- ")


AffineLike: TypeAlias = "Affine | int | str"


class ConstraintKind(Enum):
    NONNEG = "expr >= 0"
    ZERO = "expr == 0"
    DIVISIBLE = "expr % modulus == 0"
    NOT_DIVISIBLE = "expr % modulus != 0"


@dataclass(frozen=True)
class Constraint:
    """One Presburger atom over named dims and parameters: a bound, an equality or a congruence."""

    expr: Affine
    kind: ConstraintKind
    modulus: int = 1

    def __post_init__(self) -> None:
        congruence = self.kind in (ConstraintKind.DIVISIBLE, ConstraintKind.NOT_DIVISIBLE)
        if congruence and self.modulus < 2:
            raise LayoutError(f"a congruence needs a modulus >= 2, got {self.modulus}")
        if not congruence and self.modulus != 1:
            raise LayoutError(f"{self.kind.name} takes no modulus (got {self.modulus})")

    @property
    def names(self) -> frozenset[str]:
        return self.expr.names

    def holds(self, env: Mapping[str, int]) -> bool:
        value = self.expr.evaluate(env)
        if self.kind is ConstraintKind.NONNEG:
            return value >= 0
        if self.kind is ConstraintKind.ZERO:
            return value == 0
        divides = value % self.modulus == 0
        return divides if self.kind is ConstraintKind.DIVISIBLE else not divides

    def substitute(self, env: Mapping[str, int]) -> Constraint:
        return Constraint(self.expr.substitute(env), self.kind, self.modulus)

    def isl(self) -> str:
        e = str(self.expr)
        if self.kind is ConstraintKind.NONNEG:
            return f"{e} >= 0"
        if self.kind is ConstraintKind.ZERO:
            return f"{e} = 0"
        relation = "=" if self.kind is ConstraintKind.DIVISIBLE else ">="
        return f"({e}) mod {self.modulus} {relation} {0 if relation == '=' else 1}"

    def __str__(self) -> str:
        e = str(self.expr)
        if self.kind is ConstraintKind.NONNEG:
            return f"{e} >= 0"
        if self.kind is ConstraintKind.ZERO:
            return f"{e} == 0"
        relation = "==" if self.kind is ConstraintKind.DIVISIBLE else "!="
        return f"({e}) % {self.modulus} {relation} 0"


def ge(a: AffineLike, b: AffineLike) -> Constraint:
    return Constraint(Affine.of(a) - b, ConstraintKind.NONNEG)


def le(a: AffineLike, b: AffineLike) -> Constraint:
    return ge(b, a)


def gt(a: AffineLike, b: AffineLike) -> Constraint:
    return Constraint(Affine.of(a) - b - 1, ConstraintKind.NONNEG)


def lt(a: AffineLike, b: AffineLike) -> Constraint:
    return gt(b, a)


def eq(a: AffineLike, b: AffineLike) -> Constraint:
    return Constraint(Affine.of(a) - b, ConstraintKind.ZERO)


def divisible(a: AffineLike, modulus: int) -> Constraint:
    return Constraint(Affine.of(a), ConstraintKind.DIVISIBLE, modulus)


def not_divisible(a: AffineLike, modulus: int) -> Constraint:
    return Constraint(Affine.of(a), ConstraintKind.NOT_DIVISIBLE, modulus)


def _conjunction(constraints: Sequence[Constraint]) -> str:
    return " and ".join(c.isl() for c in constraints) if constraints else "true"


def _single_var_bounds(
    constraints: Sequence[Constraint], dims: Sequence[str], env: Mapping[str, int]
) -> dict[str, list[float]]:
    """Interval bounds per dim from the constraints that involve one dim (params substituted).

    A sound over-approximation: the cheap box in front of ISL and of enumeration.
    """
    bounds = {d: [-math.inf, math.inf] for d in dims}
    for c in constraints:
        if c.kind not in (ConstraintKind.NONNEG, ConstraintKind.ZERO):
            continue
        expr = c.expr.substitute(env)
        if len(expr.terms) != 1 or expr.terms[0][0] not in bounds:
            continue
        ((name, coeff),) = expr.terms
        k = expr.constant  # coeff * x + k >= 0 (or == 0)
        lo_hi = bounds[name]
        if coeff > 0:
            lo_hi[0] = max(lo_hi[0], -(k // coeff))  # x >= ceil(-k / coeff)
            if c.kind is ConstraintKind.ZERO:
                lo_hi[1] = min(lo_hi[1], (-k) // coeff)
        else:
            lo_hi[1] = min(lo_hi[1], k // -coeff)  # x <= floor(k / -coeff)
            if c.kind is ConstraintKind.ZERO:
                lo_hi[0] = max(lo_hi[0], -(-k // -coeff))
    return bounds


def isl_sample(points: isl.Set, params: Sequence[str]) -> tuple[tuple[int, ...], dict[str, int]]:
    """One point of a non-empty set: its coordinates and the parameter values it holds under."""
    point = points.sample_point()
    coords = tuple(
        int(point.get_coordinate_val(isl.dim_type.set, i).to_python())
        for i in range(points.dim(isl.dim_type.set))
    )
    space = points.get_space()
    values = {}
    for name in params:
        k = space.find_dim_by_name(isl.dim_type.param, name)
        if k >= 0:
            values[name] = int(point.get_coordinate_val(isl.dim_type.param, k).to_python())
    return coords, values


# --------------------------------------------------------------------------------------- domains


@dataclass(frozen=True)
class Domain:
    """A Presburger set of integer points: named dims, parameters, and constraints over both.

    Constraints that mention only parameters are the facts the domain holds under (what a shape
    bucket knows). A box is the common case; guards cut it into ragged shapes.
    """

    dims: tuple[str, ...]
    constraints: tuple[Constraint, ...] = ()
    params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        object.__setattr__(self, "params", tuple(self.params))
        names = self.dims + self.params
        for name in self.dims:
            _check_name(name, "dim")
        for name in self.params:
            _check_name(name, "parameter")
        if len(set(names)) != len(names):
            raise LayoutError(
                f"domain dims {list(self.dims)} and params {list(self.params)} repeat a name"
            )
        for c in self.constraints:
            unknown = c.names - set(names)
            if unknown:
                raise LayoutError(
                    f"constraint {c} uses {sorted(unknown)}, which is neither a dim "
                    f"{list(self.dims)} nor a parameter {list(self.params)}",
                    hints=["declare symbolic extents as params of the domain"],
                )

    @classmethod
    def box(
        cls,
        extents: Sequence[int | str | Affine],
        dims: Sequence[str] | None = None,
        facts: Sequence[Constraint] = (),
    ) -> Domain:
        """``0 <= x_d < extent_d``; a str extent is a parameter (a symbolic size >= 1)."""
        names = tuple(dims) if dims is not None else tuple(f"i{k}" for k in range(len(extents)))
        if len(names) != len(extents):
            raise LayoutError(f"{len(extents)} extents for {len(names)} dims {list(names)}")
        params: list[str] = []
        constraints: list[Constraint] = []
        for name, extent in zip(names, extents, strict=True):
            e = Affine.of(extent)
            if not e.names and e.constant < 1:
                raise LayoutError(f"extent of {name!r} is {e.constant}; extents must be >= 1")
            for p in sorted(e.names):
                if p not in params:
                    params.append(p)
                    constraints.append(ge(p, 1))
            constraints += [ge(name, 0), lt(name, e)]
        for fact in facts:
            for p in sorted(fact.names):
                if p not in params:
                    params.append(p)
        return cls(names, tuple(constraints) + tuple(facts), tuple(params))

    @property
    def rank(self) -> int:
        return len(self.dims)

    def with_guards(self, *guards: Constraint) -> Domain:
        return Domain(self.dims, self.constraints + tuple(guards), self.params)

    def env(self, point: Sequence[int], params: Mapping[str, int] | None = None) -> dict[str, int]:
        if len(point) != self.rank:
            raise LayoutError(
                f"point {tuple(point)} has {len(point)} coordinates; the domain has {self.rank}"
            )
        values = dict(params or {})
        missing = [p for p in self.params if p not in values]
        if missing:
            raise LayoutError(f"the domain is symbolic in {missing}: give their values in params")
        values.update(zip(self.dims, (int(x) for x in point), strict=True))
        return values

    def contains(self, point: Sequence[int], params: Mapping[str, int] | None = None) -> bool:
        env = self.env(point, params)
        return all(c.holds(env) for c in self.constraints)

    def bounding_box(
        self, params: Mapping[str, int] | None = None
    ) -> tuple[tuple[int, int], ...] | None:
        """Per-dim [lo, hi] from single-dim constraints, or None where some dim is unbounded."""
        bounds = _single_var_bounds(self.constraints, self.dims, dict(params or {}))
        if any(math.isinf(b) for lo_hi in bounds.values() for b in lo_hi):
            return None
        return tuple((int(bounds[d][0]), int(bounds[d][1])) for d in self.dims)

    def points(self, params: Mapping[str, int] | None = None) -> Iterator[tuple[int, ...]]:
        """Every point (first dim slowest), by scanning the bounding box: for small domains."""
        box = self.bounding_box(params)
        if box is None:
            raise LayoutError("cannot enumerate a domain without a bound on every dim")
        for point in itertools.product(*(range(lo, hi + 1) for lo, hi in box)):
            if self.contains(point, params):
                yield point

    def isl_text(self, extra: Sequence[Constraint] = ()) -> str:
        prefix = f"[{', '.join(self.params)}] -> " if self.params else ""
        body = _conjunction(self.constraints + tuple(extra))
        return f"{prefix}{{ [{', '.join(self.dims)}] : {body} }}"

    def isl_set(self, extra: Sequence[Constraint] = ()) -> isl.Set:
        """The domain (optionally cut by more constraints) as an isl.Set in tilekit's context."""
        return isl.Set.read_from_str(isl_context(), self.isl_text(extra))

    @cached_property
    def _isl(self) -> isl.Set:
        return self.isl_set()

    def size(self, params: Mapping[str, int] | None = None) -> int:
        """Number of points (params fixed): a product for boxes, ISL's count otherwise."""
        values = dict(params or {})
        missing = [p for p in self.params if p not in values]
        if missing:
            raise LayoutError(f"the domain is symbolic in {missing}: give their values in params")
        fixed = tuple(c.substitute(values) for c in self.constraints)
        if any(not c.expr.terms and not c.holds({}) for c in fixed):
            return 0
        if all(c.kind is ConstraintKind.NONNEG and len(c.expr.terms) <= 1 for c in fixed):
            box = Domain(self.dims, fixed).bounding_box()
            if box is not None:
                return math.prod(max(0, hi - lo + 1) for lo, hi in box)
        domain = Domain(self.dims, fixed)
        return int(run_isl("the size of a domain", lambda: domain._isl.count_val()).to_python())

    def is_empty(self) -> bool:
        return run_isl("whether a domain is empty", lambda: self._isl.is_empty())

    def __str__(self) -> str:
        return self.isl_text()


# ---------------------------------------------------------------------------- piecewise layouts


@dataclass(frozen=True)
class Piece:
    """An affine map valid where its guard holds (conjunction; no constraints = everywhere)."""

    guard: tuple[Constraint, ...]
    outputs: tuple[Affine, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "guard", tuple(self.guard))
        object.__setattr__(self, "outputs", tuple(Affine.of(o) for o in self.outputs))

    def applies(self, env: Mapping[str, int]) -> bool:
        return all(c.holds(env) for c in self.guard)

    def apply(self, env: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(o.evaluate(env) for o in self.outputs)


@dataclass(frozen=True)
class Overlap:
    """Two pieces whose guards both hold at a point of the domain."""

    pieces: tuple[int, int]
    point: tuple[int, ...]
    params: dict[str, int] = field(hash=False, compare=False)


@dataclass(frozen=True)
class Gap:
    """A point of the domain that no piece covers."""

    point: tuple[int, ...]
    params: dict[str, int] = field(hash=False, compare=False)


@dataclass(frozen=True)
class PiecewiseLayout:
    """A layout defined by cases: on ``domain``, the first (and only) piece whose guard holds.

    Valid when the guards partition the domain; :meth:`validate` decides that with ISL for every
    value of the parameters. Outputs are affine in the dims and the parameters.
    """

    domain: Domain
    pieces: tuple[Piece, ...]
    out_dims: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "pieces", tuple(self.pieces))
        object.__setattr__(self, "out_dims", tuple(self.out_dims))
        if not self.pieces:
            raise LayoutError("a piecewise layout needs at least one piece")
        for name in self.out_dims:
            _check_name(name, "out dim")
        known = set(self.domain.dims) | set(self.domain.params)
        for k, piece in enumerate(self.pieces):
            if len(piece.outputs) != len(self.out_dims):
                raise LayoutError(
                    f"piece {k} has {len(piece.outputs)} outputs for out dims {list(self.out_dims)}"
                )
            used = set().union(*(c.names for c in piece.guard), *(o.names for o in piece.outputs))
            if used - known:
                raise LayoutError(
                    f"piece {k} uses {sorted(used - known)}, not a dim or parameter of the domain"
                )

    @classmethod
    def single(
        cls, domain: Domain, outputs: Sequence[AffineLike], out_dims: Sequence[str]
    ) -> PiecewiseLayout:
        """One unguarded affine piece over the whole domain."""
        return cls(domain, (Piece((), tuple(Affine.of(o) for o in outputs)),), tuple(out_dims))

    @property
    def in_rank(self) -> int:
        return self.domain.rank

    @property
    def out_rank(self) -> int:
        return len(self.out_dims)

    def piece_at(self, point: Sequence[int], params: Mapping[str, int] | None = None) -> int:
        """Index of the piece that defines the layout at ``point``."""
        env = self.domain.env(point, params)
        if not all(c.holds(env) for c in self.domain.constraints):
            raise LayoutError(f"point {tuple(point)} is outside the domain {self.domain}")
        hits = [k for k, p in enumerate(self.pieces) if p.applies(env)]
        if len(hits) != 1:
            what = "no piece covers" if not hits else f"pieces {hits} all cover"
            raise LayoutError(
                f"{what} point {tuple(point)}", hints=["call validate() to see every problem"]
            )
        return hits[0]

    def __call__(self, *point: int, params: Mapping[str, int] | None = None) -> tuple[int, ...]:
        k = self.piece_at(point, params)
        return self.pieces[k].apply(self.domain.env(point, params))

    # -- validation (ISL) -----------------------------------------------------------------

    def piece_set(self, k: int) -> isl.Set:
        return self.domain.isl_set(self.pieces[k].guard)

    def _boxes_disjoint(self, i: int, j: int) -> bool:
        """Interval pre-check: single-dim bounds of the two pieces do not meet (no ISL needed)."""
        a = _single_var_bounds(self.domain.constraints + self.pieces[i].guard, self.domain.dims, {})
        b = _single_var_bounds(self.domain.constraints + self.pieces[j].guard, self.domain.dims, {})
        return any(a[d][1] < b[d][0] or b[d][1] < a[d][0] for d in self.domain.dims)

    @cached_property
    def _problems(self) -> tuple[tuple[Overlap, ...], Gap | None]:
        def decide() -> tuple[tuple[Overlap, ...], Gap | None]:
            sets = [self.piece_set(k) for k in range(len(self.pieces))]
            overlaps = []
            for i, j in itertools.combinations(range(len(sets)), 2):
                if self._boxes_disjoint(i, j):
                    continue
                both = sets[i].intersect(sets[j])
                if not both.is_empty():
                    point, params = isl_sample(both, self.domain.params)
                    overlaps.append(Overlap((i, j), point, params))
            rest = self.domain._isl
            for s in sets:
                rest = rest.subtract(s)
            gap = None
            if not rest.is_empty():
                point, params = isl_sample(rest, self.domain.params)
                gap = Gap(point, params)
            return tuple(overlaps), gap

        return run_isl("whether the pieces partition the domain", decide)

    def find_overlaps(self) -> tuple[Overlap, ...]:
        return self._problems[0]

    def find_gap(self) -> Gap | None:
        return self._problems[1]

    def validate(self) -> None:
        """Raise unless the guards partition the domain (for all parameter values); ISL decides."""
        overlaps, gap = self._problems
        if not overlaps and gap is None:
            return
        problems = [
            f"pieces {o.pieces[0]} and {o.pieces[1]} overlap at {o.point}" + _params_text(o.params)
            for o in overlaps
        ]
        if gap is not None:
            problems.append(f"no piece covers {gap.point}" + _params_text(gap.params))
        raise LayoutError(
            "the pieces do not partition the domain: " + "; ".join(problems),
            hints=["tighten the guards so exactly one holds at every point of the domain"],
        )


def _params_text(params: Mapping[str, int]) -> str:
    return f" (with {', '.join(f'{k}={v}' for k, v in params.items())})" if params else ""


# ------------------------------------------------------------------------ tiled decomposition


@dataclass(frozen=True)
class SymbolicExtent:
    """An extent known only through a shape bucket's facts about it (None: not known).

    ``divisible``: the extent is a multiple of the tile along its dim; ``at_least_tile``: it is
    at least one tile long.
    """

    name: str
    divisible: bool | None = None
    at_least_tile: bool | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "extent")

    def facts(self, tile: int) -> tuple[Constraint, ...]:
        facts = [ge(self.name, 1)]
        if self.divisible is True:
            facts.append(divisible(self.name, tile) if tile > 1 else ge(self.name, 1))
        elif self.divisible is False:
            if tile == 1:
                raise LayoutError(f"{self.name} cannot be 'not divisible' by a tile of 1")
            facts.append(not_divisible(self.name, tile))
        if self.at_least_tile is True:
            facts.append(ge(self.name, tile))
        elif self.at_least_tile is False:
            if tile == 1:
                raise LayoutError(f"{self.name} >= 1 is always at least a tile of 1")
            facts.append(lt(self.name, tile))
        if self.divisible is True and self.at_least_tile is False:
            raise LayoutError(
                f"{self.name} cannot be both divisible by {tile} and smaller than it "
                "(extents are >= 1)"
            )
        return tuple(facts)


Extent: TypeAlias = int | SymbolicExtent


class Region(Enum):
    """The 2-D names of tile classes (dim 0 = rows, the last dim = columns)."""

    INTERIOR = "no tail"
    RIGHT_EDGE = "tail in the last dim"
    BOTTOM_EDGE = "tail in dim 0"
    CORNER = "tail in both dims"


@dataclass(frozen=True)
class TileClass:
    """All tiles that share which dims are cut short (``tail_mask``): one kernel specialization.

    ``tiles`` selects the class's tile indices (over ``t*`` and the parameters), ``guard`` is the
    in-bounds test its kernel must still apply to local coordinates ``l*`` (empty for core
    tiles), ``count`` the number of tiles (a sympy expression when extents are symbolic) and
    ``exists_when`` the parameter conditions under which the class has any tile.
    """

    tail_mask: tuple[bool, ...]
    count: int | sympy.Expr
    tiles: tuple[Constraint, ...]
    guard: tuple[Constraint, ...]
    exists_when: tuple[Constraint, ...] = ()

    @property
    def is_core(self) -> bool:
        return not any(self.tail_mask)

    @property
    def region(self) -> Region | None:
        """INTERIOR / RIGHT_EDGE / BOTTOM_EDGE / CORNER for rank 1 and 2; None above."""
        if len(self.tail_mask) == 1:
            return Region.RIGHT_EDGE if self.tail_mask[0] else Region.INTERIOR
        if len(self.tail_mask) == 2:
            rows, cols = self.tail_mask
            return {
                (False, False): Region.INTERIOR,
                (False, True): Region.RIGHT_EDGE,
                (True, False): Region.BOTTOM_EDGE,
                (True, True): Region.CORNER,
            }[(rows, cols)]
        return None

    def count_for(self, params: Mapping[str, int] | None = None) -> int:
        """The number of tiles for concrete parameter values (0 where the class is absent)."""
        env = dict(params or {})
        if not all(c.holds(env) for c in self.exists_when):
            return 0
        if isinstance(self.count, int):
            return self.count
        return int(
            self.count.subs(
                {sympy.Symbol(k, integer=True, positive=True): v for k, v in env.items()}
            )
        )


@dataclass(frozen=True)
class TiledDecomposition:
    """A ragged box ``[0, extents)`` cut into tiles, grouped into classes by tail mask.

    The launch domain is ``(t0.., l0..)``: tile indices and local coordinates, in bounds when
    ``tile_d * t_d + l_d < extent_d``. Each class is one piece of :meth:`to_piecewise`, which maps
    a (tile, local) pair to its global coordinate; :meth:`verify` proves with ISL that the
    classes partition the in-bounds points and that every guard suffices, for every extent the
    facts allow.
    """

    extents: tuple[Extent, ...]
    tile: tuple[int, ...]
    classes: tuple[TileClass, ...]

    @property
    def rank(self) -> int:
        return len(self.tile)

    @property
    def tile_dims(self) -> tuple[str, ...]:
        return tuple(f"t{d}" for d in range(self.rank))

    @property
    def local_dims(self) -> tuple[str, ...]:
        return tuple(f"l{d}" for d in range(self.rank))

    @property
    def params(self) -> tuple[str, ...]:
        names: list[str] = []
        for e in self.extents:
            if isinstance(e, SymbolicExtent) and e.name not in names:
                names.append(e.name)
        return tuple(names)

    @property
    def facts(self) -> tuple[Constraint, ...]:
        return tuple(
            f
            for e, t in zip(self.extents, self.tile, strict=True)
            if isinstance(e, SymbolicExtent)
            for f in e.facts(t)
        )

    def _extent(self, d: int) -> Affine:
        e = self.extents[d]
        return Affine.var(e.name) if isinstance(e, SymbolicExtent) else Affine.of(e)

    def _env(self, params: Mapping[str, int] | None) -> dict[str, int]:
        env = dict(params or {})
        missing = [p for p in self.params if p not in env]
        if missing:
            raise LayoutError(f"the extents are symbolic in {missing}: give their values in params")
        violated = [str(f) for f in self.facts if not f.holds(env)]
        if violated:
            raise LayoutError(f"params {env} break the bucket's facts: {violated}")
        return env

    def concrete_extents(self, params: Mapping[str, int] | None = None) -> tuple[int, ...]:
        env = self._env(params)
        return tuple(self._extent(d).evaluate(env) for d in range(self.rank))

    def grid(self, params: Mapping[str, int] | None = None) -> tuple[int, ...]:
        """Tiles per dim (ceil division), for concrete parameter values."""
        return tuple(
            -(-e // t) for e, t in zip(self.concrete_extents(params), self.tile, strict=True)
        )

    def domain(self) -> Domain:
        """The in-bounds (tile, local) points, under the extents' facts."""
        constraints: list[Constraint] = []
        for d in range(self.rank):
            t, l, size = self.tile_dims[d], self.local_dims[d], self.tile[d]
            constraints += [
                ge(t, 0),
                ge(l, 0),
                lt(l, size),
                lt(Affine.var(t, size) + l, self._extent(d)),
            ]
        return Domain(
            self.tile_dims + self.local_dims, tuple(constraints) + self.facts, self.params
        )

    def to_piecewise(self) -> PiecewiseLayout:
        """(tile, local) -> global coordinate, one piece per class (tile constraints + guard)."""
        outputs = tuple(
            Affine.var(t, size) + l
            for t, l, size in zip(self.tile_dims, self.local_dims, self.tile, strict=True)
        )
        pieces = tuple(Piece(c.tiles + c.guard, outputs) for c in self.classes)
        return PiecewiseLayout(self.domain(), pieces, tuple(f"x{d}" for d in range(self.rank)))

    def class_of(
        self, tile_index: Sequence[int], params: Mapping[str, int] | None = None
    ) -> TileClass:
        env = self._env(params)
        env.update(zip(self.tile_dims, tile_index, strict=True))
        for c in self.classes:
            if all(k.holds(env) for k in c.tiles):
                return c
        raise LayoutError(f"tile {tuple(tile_index)} is outside the grid {self.grid(params)}")

    def counts(self, params: Mapping[str, int] | None = None) -> dict[tuple[bool, ...], int]:
        """Tiles per class for concrete parameter values (absent classes omitted)."""
        env = self._env(params)
        found = {c.tail_mask: c.count_for(env) for c in self.classes}
        return {mask: n for mask, n in found.items() if n}

    def verify(self) -> None:
        """Prove, for every extent the facts allow, that the classes partition the domain,
        that each class's guard keeps its tiles in bounds, and that core classes need none."""
        self.to_piecewise().validate()
        domain = self.domain()
        full_tile = [
            c
            for d in range(self.rank)
            for c in (
                ge(self.tile_dims[d], 0),
                ge(self.local_dims[d], 0),
                lt(self.local_dims[d], self.tile[d]),
            )
        ]
        for c in self.classes:
            if c.is_core and c.guard:
                raise LayoutError(
                    f"core class {c.tail_mask} carries a guard {list(map(str, c.guard))}"
                )
            claimed = Domain(
                domain.dims, tuple(full_tile) + self.facts + c.tiles + c.guard, domain.params
            )
            inside = run_isl(
                "whether a tile class stays in bounds",
                lambda claimed=claimed: claimed._isl.is_subset(domain._isl),
            )
            if not inside:
                raise LayoutError(
                    f"tiles of class {c.tail_mask} under guard {list(map(str, c.guard))} "
                    "leave the domain"
                )


@dataclass(frozen=True)
class _DimPart:
    """One dim's full-tile part or its tail part; a tile class picks one part per dim."""

    is_tail: bool
    count: int | sympy.Expr
    tiles: tuple[Constraint, ...]
    guard: tuple[Constraint, ...]
    exists_when: tuple[Constraint, ...]


def _dim_parts(extent: Extent, tile: int, d: int) -> list[_DimPart]:
    """The parts of dim ``d`` that can exist, by value or by the bucket's facts."""
    t, l = f"t{d}", f"l{d}"
    full_count: int | sympy.Expr
    if isinstance(extent, SymbolicExtent):
        extent.facts(tile)  # reject contradictory facts early
        e = Affine.var(extent.name)
        full_count = sympy.floor(sympy.Symbol(extent.name, integer=True, positive=True) / tile)
        full_possible = extent.at_least_tile is not False
        full_when: tuple[Constraint, ...] = (ge(e, tile),) if extent.at_least_tile is None else ()
        tail_possible = extent.divisible is not True and tile > 1
        tail_when: tuple[Constraint, ...] = (
            (not_divisible(e, tile),) if extent.divisible is None else ()
        )
    else:
        if isinstance(extent, bool) or not isinstance(extent, int) or extent < 1:
            raise LayoutError(
                f"extent {extent!r} of dim {d} must be an int >= 1 or a SymbolicExtent"
            )
        e = Affine.of(extent)
        full_count = extent // tile
        full_possible, full_when = extent >= tile, ()
        tail_possible, tail_when = extent % tile != 0, ()
    parts = []
    if full_possible:
        # a full tile: t >= 0 and tile * (t + 1) <= extent; no guard
        tiles = (ge(t, 0), le(Affine.var(t, tile) + tile, e))
        parts.append(_DimPart(False, full_count, tiles, (), full_when))
    if tail_possible:
        # the one cut tile: tile * t < extent < tile * (t + 1); its guard: tile * t + l < extent
        tiles = (gt(e, Affine.var(t, tile)), lt(e, Affine.var(t, tile) + tile))
        guard = (lt(Affine.var(t, tile) + l, e),)
        parts.append(_DimPart(True, 1, tiles, guard, tail_when))
    return parts


def decompose_tiled(extents: Sequence[Extent], tile: Sequence[int]) -> TiledDecomposition:
    """Split ``[0, extents)`` tiled by ``tile`` into classes of core and tail tiles.

    Each dim contributes a full-tile part and (when the extent is not a multiple of the tile) a
    one-tile tail; a class is one choice per dim, so there are at most ``2**rank`` classes,
    whatever the extents. Preserved: every in-bounds point lies in exactly one tile of exactly one
    class, and within its class's guard.
    """
    extents_t, tile_t = tuple(extents), tuple(tile)
    if len(extents_t) != len(tile_t) or not tile_t:
        raise LayoutError(f"{len(extents_t)} extents for a tile of rank {len(tile_t)}")
    for size in tile_t:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise LayoutError(f"tile sizes must be ints >= 1, got {tile_t}")
    symbolic = [e.name for e in extents_t if isinstance(e, SymbolicExtent)]
    reserved = {f"{p}{d}" for p in "tl" for d in range(len(tile_t))}
    if reserved & set(symbolic):
        raise LayoutError(
            f"extent names {sorted(reserved & set(symbolic))} clash with tile/local dims"
        )
    per_dim = [
        _dim_parts(e, size, d) for d, (e, size) in enumerate(zip(extents_t, tile_t, strict=True))
    ]
    classes = []
    for choice in itertools.product(*per_dim):
        count: int | sympy.Expr = 1
        for part in choice:
            count = count * part.count
        if isinstance(count, int) and count == 0:
            continue
        classes.append(
            TileClass(
                tail_mask=tuple(part.is_tail for part in choice),
                count=count,
                tiles=tuple(c for part in choice for c in part.tiles),
                guard=tuple(c for part in choice for c in part.guard),
                exists_when=tuple(c for part in choice for c in part.exists_when),
            )
        )
    classes.sort(key=lambda c: sum(c.tail_mask))
    return TiledDecomposition(extents_t, tile_t, tuple(classes))
