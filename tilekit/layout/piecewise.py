"""Piecewise-affine layouts over ragged integer domains.

Real shapes are ragged (1000 x 4097 tiled by 128 x 256): an F2 layout cannot say "only the
first 104 rows of the last tile exist", and masking every access costs what a kernel can least
afford. This module states raggedness exactly:

* a :class:`Domain` is a Presburger set: named integer dims, symbolic extents as parameters,
  and affine bounds, equalities and congruences (``N % 128 == 0``) as constraints;
* a :class:`PiecewiseLayout` is a list of :class:`Piece` s, each an affine map under a guard;
  it is valid when the guards partition the domain (disjoint and covering), which ISL decides
  for every value of the parameters at once.

The core/tail split of a tiled grid (:func:`decompose_tiled`, :class:`SymbolicExtent`,
:class:`TileClass`, :class:`TiledDecomposition`, :class:`Region`) is built on these and lives in
:mod:`tilekit.layout.tiling`; it is re-exported here, so it still imports from this module.

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


# The core/tail split of a tiled grid lives in ``tiling``, which imports this module;
# re-exported here, at the bottom, so that either module can be imported first.
from tilekit.layout.tiling import (  # noqa: E402, F401
    Extent,
    Region,
    SymbolicExtent,
    TileClass,
    TiledDecomposition,
    decompose_tiled,
)
