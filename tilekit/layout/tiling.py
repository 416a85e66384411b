"""The core/tail split of a tiled ragged grid: which tiles need a guard, and how many there are.

Real shapes are ragged (1000 x 4097 tiled by 128 x 256). :func:`decompose_tiled` splits a
tiled ragged box into a few *classes* of tiles (interior, right edge, bottom edge, corner;
``2**rank`` at most), each with its count and the guard its kernel must apply. Core tiles need
no guard. Extents may be symbolic (:class:`SymbolicExtent`), with the facts a shape bucket knows
(divisible by the tile, at least one tile), so one decomposition serves every shape of the
bucket. A :class:`TiledDecomposition` is stated as a
:class:`~tilekit.layout.piecewise.PiecewiseLayout` (one piece per class) and proven with ISL to
partition the in-bounds points.

Split out of ``piecewise`` because tiling a grid is a use of piecewise layouts, not part of
them; ``piecewise`` keeps the Presburger vocabulary (affine expressions, constraints, domains,
pieces, the ISL plumbing) and re-exports :class:`Region`, :class:`SymbolicExtent`,
:class:`TileClass`, :class:`TiledDecomposition`, ``Extent`` and :func:`decompose_tiled`: the
same classes, the same classes of tiles, counts, guards and checks as before the split.
Preserved: every in-bounds point lies in exactly one tile of exactly one class, and within its
class's guard.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

import sympy

from tilekit.errors import LayoutError

__all__ = [
    "Extent",
    "Region",
    "SymbolicExtent",
    "TileClass",
    "TiledDecomposition",
    "decompose_tiled",
]


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


# ``piecewise`` re-exports this module's names, so each module imports the other at its bottom,
# once its own names exist: either can be imported first. Used at call time only.
from tilekit.layout.piecewise import (  # noqa: E402
    Affine,
    Constraint,
    Domain,
    Piece,
    PiecewiseLayout,
    _check_name,
    divisible,
    ge,
    gt,
    le,
    lt,
    not_divisible,
    run_isl,
)
