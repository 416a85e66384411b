"""Random programs, drawn through a ``Draw`` so that they shrink.

``generate(draw, features)`` builds a ``Program`` by asking ``draw`` for small choices;
every choice's first option (``int``'s lower bound, ``choice``'s first item) is the
simplest, so a shrinker that lowers choices (hypothesis, or ``choices.shrink``) makes
programs smaller. Two drawers: ``HypothesisDraw`` (the CI test: hypothesis shrinks) and
``RandomDraw`` (the device runner: fast, reproducible from a seed, replayable from its
recorded choices).

The generator is type-directed: it keeps the static type of every name (``program.Ty``),
builds only programs tilekit accepts (literals that fit, in-place updates that keep their
type, integer divisors guarded against zero, loop-carried names that keep their type), and
keeps what must be exact exact: tile indices, offsets, masks of loads, loop bounds and
``tk.when`` conditions are computed from integers only ("pure" values), so the reference
can say which elements a program touches.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from tests.fuzz import refnum as R
from tests.fuzz.program import (
    ALL_DTYPES,
    BITWISE,
    COMPARE,
    FLOATS,
    INTS,
    MATH,
    SHIFTS,
    UNSIGNED,
    Arange,
    Assign,
    AugAssign,
    Bin,
    Bitcast,
    Break,
    BroadcastTo,
    Cast,
    Continue,
    Cumsum,
    Dim,
    Dot,
    Expr,
    Fma,
    Full,
    Lit,
    MaskedLoad,
    MaskedStore,
    Name,
    NewAxis,
    Program,
    ProgramId,
    Py,
    Range,
    Reduce,
    Return,
    ScalarSpec,
    Shape,
    StaticRange,
    Stmt,
    TensorSpec,
    TileLoad,
    TileStore,
    Transpose,
    Ty,
    Un,
    When,
    Where,
    binary_dtype,
    broadcast,
    cumsum_dtype,
    dot_dtypes,
    int_range,
    is_float,
    operand_dtypes,
    promote,
    reduce_dtype,
    standalone,
    unary_dtype,
)
from tilekit.ir.dtypes import DType

T = TypeVar("T")


# --- drawing choices --------------------------------------------------------------------------

class Draw(Protocol):
    def int(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``; ``lo`` is the simplest."""


def choice(d: Draw, options: Sequence[T]) -> T:
    return options[d.int(0, len(options) - 1)]


def chance(d: Draw, percent: int) -> bool:
    """True with about ``percent``% probability; False is the simpler answer."""
    return d.int(0, 99) >= 100 - percent


def weighted(d: Draw, options: Sequence[tuple[int, T]]) -> T:
    total = sum(w for w, _ in options)
    x = d.int(0, total - 1)
    for w, item in options:
        if x < w:
            return item
        x -= w
    raise AssertionError


class RandomDraw:
    """Choices from a seeded generator, recorded; ``replay`` plays a recorded list back
    (missing entries read as the simplest choice, so a shrinker can cut the list)."""

    def __init__(self, seed: int = 0, replay: list[int] | None = None) -> None:
        self.rng = random.Random(seed)
        self.replay = replay
        self.choices: list[int] = []

    def int(self, lo: int, hi: int) -> int:
        if self.replay is not None:
            i = len(self.choices)
            raw = self.replay[i] if i < len(self.replay) else 0
            v = min(max(lo + raw, lo), hi)
        else:
            v = self.rng.randint(lo, hi)
        self.choices.append(v - lo)
        return v


class HypothesisDraw:
    """Choices from hypothesis's ``st.data()``: hypothesis shrinks each toward ``lo``."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self.data = data
        self.st = st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))


# --- what the generator may use ---------------------------------------------------------------

@dataclass(frozen=True)
class Features:
    """What programs may contain. ``control_flow``: early ``return``, ``break``/``continue``
    and Python numbers rebound inside runtime loops and branches, and names first bound
    there read after them (the front end's AST rewrite, issue 27)."""

    control_flow: bool = False
    # names first bound in a runtime construct nested in a runtime loop (an early exit in a
    # loop nests the rest of its body in a hidden tk.when), read after the construct; was a
    # silent wrong result until af1d69a (tests/lang/test_fuzz_regressions.py)
    first_bound_in_loops: bool = True
    max_stmts: int = 8
    max_depth: int = 3  # expression depth


@dataclass
class Var:
    name: str
    ty: Ty
    pure: bool  # computed from integers and bools only: exact, usable as an index
    mutable: bool = True
    hi: int = 0  # Python ints: an upper bound of the value while tracing (they are >= 0)
    data: bool = False  # an input's tile, never rebound: values that differ per element


# tile sizes: powers of two and ragged ones, mostly large enough to tell elements apart
TILE_1D = ((3, 16), (1, 1), (1, 2), (1, 3), (2, 5), (3, 7), (3, 8), (3, 17), (3, 32), (3, 33),
           (2, 13), (2, 64), (1, 100), (2, 128), (1, 129))
TILE_2D = ((3, 4), (1, 1), (1, 2), (2, 3), (2, 5), (3, 8), (3, 16), (2, 17), (2, 32), (2, 7),
           (2, 12))
SIZES_2D = (1, 2, 3, 4, 5, 8, 16, 17, 32, 7, 12)
DOT_K = (1, 2, 3, 4, 8, 16, 13, 32, 5)
# simplest first
DTYPES = (DType.FLOAT32, DType.INT32, DType.FLOAT16, DType.BOOL, DType.INT8, DType.BFLOAT16,
          DType.UINT8, DType.INT64, DType.FLOAT64, DType.UINT32, DType.INT16, DType.UINT16,
          DType.UINT64)
# tensors: half of them floats, where most numerics live
TENSOR_DTYPES = ((20, DType.FLOAT32), (10, DType.INT32), (12, DType.FLOAT16), (6, DType.BOOL),
                 (6, DType.INT8), (10, DType.BFLOAT16), (5, DType.UINT8), (6, DType.INT64),
                 (8, DType.FLOAT64), (5, DType.UINT32), (4, DType.INT16), (4, DType.UINT16),
                 (4, DType.UINT64))
FLOAT_LITERALS = (0.5, 1.0, -2.0, 0.0, -0.0, 3.25, 1e-3, 100.0, 1e30, -7.5, math.inf,
                  -math.inf, math.nan, 65504.0, 1e-40)
UNARY_OPS = ("neg", "abs", "not") + MATH


class Generator:
    def __init__(self, draw: Draw, features: Features) -> None:
        self.d = draw
        self.f = features
        self.vars: list[Var] = []
        self.var_types: dict[str, Ty] = {}
        self.counter = 0
        self.runtime_depth = 0  # open tk.range / tk.when constructs
        self.static_trips = 1  # product of the enclosing tk.static_range counts
        self.loops: list[str] = []  # "range" / "static", innermost last
        self.constructs: list[str] = []  # open runtime constructs: "range" / "when"
        self.loop_vars: set[str] = set()
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.unstored: list[TensorSpec] = []
        self.scalars: list[ScalarSpec] = []
        self.nest = 0  # open constructs of any kind
        # per open runtime construct: the Python numbers it rebinds (carried from its start)
        self.carried: list[list[Var]] = []
        self.carried_all: list[list[Var]] = []  # the same, before updates take them out

    # --- names -------------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def bind(self, name: str, ty: Ty, pure: bool, mutable: bool = True, hi: int = 0) -> Var:
        v = Var(name, ty, pure, mutable, hi)
        self.vars.append(v)
        self.var_types.setdefault(name, ty)
        return v

    def lookup(self, name: str) -> Var:
        return next(v for v in reversed(self.vars) if v.name == name)

    def name(self, v: Var) -> Name:
        return Name(v.name, v.ty)

    # --- the program -------------------------------------------------------------------------

    def program(self) -> Program:
        d = self.d
        two_d = chance(d, 40)
        if two_d:
            self.tile = (weighted(d, TILE_2D), weighted(d, TILE_2D))
            grid = (d.int(1, 3), d.int(1, 3))
        else:
            self.tile = (weighted(d, TILE_1D),)
            grid = (d.int(1, 5),)
        self.rank = len(self.tile)
        self.grid = grid
        # extents: ragged, sometimes shorter than the grid covers (whole tiles outside)
        out_extent = tuple(max(1, (g - d.int(0, 1)) * t - d.int(0, t - 1))
                           for g, t in zip(grid, self.tile))
        for i in range(d.int(1, 4)):
            self.inputs.append(self.tensor(f"X{i}", False, out_extent))
        for i in range(d.int(1, 2)):
            self.outputs.append(self.tensor(f"O{i}", True, out_extent))
        self.unstored = list(self.outputs)
        self.scalars.append(ScalarSpec("n0", d.int(0, 4), None, Ty(DType.INT32)))
        if chance(d, 50):
            value = choice(d, (0.5, -1.25, 3.0, 1e-3, 7.0))
            self.scalars.append(ScalarSpec("r0", value, None, Ty(DType.FLOAT32)))
        if chance(d, 30):
            dt = choice(d, (DType.INT8, DType.FLOAT16, DType.UINT16, DType.INT64))
            value = 3 if dt not in FLOATS else -1.5
            # numpy integer scalars become int32 (int64 when too large), as Python ints do
            self.scalars.append(ScalarSpec("s0", value, dt, Ty(dt if dt in FLOATS
                                                              else DType.INT32)))
        for s in self.scalars:
            self.bind(s.name, s.ty, pure=s.ty.dtype not in FLOATS, mutable=False)
        body: list[Stmt] = []
        pids = []
        for axis in range(self.rank):
            v = self.bind(f"pid{axis}", Ty(DType.INT32), pure=True, mutable=False)
            body.append(Assign(v.name, ProgramId(axis)))
            pids.append(v)
        self.pids = pids
        # element coordinates of this program's own tile: r (rows, 1-D: elements), c (cols)
        self.coords = []
        for axis, n in enumerate(self.tile):
            ar: Expr = Arange(n, Ty(DType.INT32, (n,)))
            if self.rank == 2:
                ar = NewAxis(ar, 1 - axis, Ty(DType.INT32, (n, 1) if axis == 0 else (1, n)))
            start = Bin("mul", self.name(pids[axis]), Lit(n, Ty(Py.INT)), Ty(DType.INT32))
            expr = Bin("add", start, ar, Ty(DType.INT32, ar.ty.shape))
            v = self.bind(("rows", "cols")[axis], expr.ty, pure=True, mutable=False)
            body.append(Assign(v.name, expr))
            self.coords.append(v)
        for t in self.inputs:  # this program's tile of some inputs: the data most values use
            if len(t.shape) == self.rank and chance(d, 70):
                e = self.tile_load(self.tile, t)
                v = self.bind(self.fresh("x"), e.ty, pure=t.dtype not in FLOATS, mutable=False)
                v.data = True
                body.append(Assign(v.name, e))
        body += self.block(self.f.max_stmts, top=True)
        for out in list(self.unstored):
            body.append(self.store(out))
        self.unstored = []
        return Program(tuple(self.inputs + self.outputs), tuple(self.scalars), tuple(grid),
                       tuple(body), tuple(self.var_types.items()), d.int(0, 2**31 - 1),
                       self.f.control_flow)

    def tensor(self, name: str, output: bool, extent: Shape) -> TensorSpec:
        d = self.d
        if output:
            shape = extent
        else:
            shape = tuple(max(1, e + d.int(-4, 4) * (d.int(0, 1))) for e in extent)
        dt = weighted(d, TENSOR_DTYPES)
        view = ""
        if chance(d, 15):
            view = "step" if self.rank == 1 or chance(d, 50) else "T"
        return TensorSpec(name, dt, shape, output, view)

    # --- statements --------------------------------------------------------------------------

    def block(self, n: int, top: bool = False) -> list[Stmt]:
        out: list[Stmt] = []
        for _ in range(self.d.int(1, n)):
            s = self.statement(top)
            if s is None:
                continue
            out.append(s)
            if _always_exits(s):
                break  # the rest of the block would be dead code
        return out

    def statement(self, top: bool) -> Stmt | None:
        d = self.d
        options: list[tuple[int, str]] = [(10, "assign")]
        if any(v.mutable and not v.ty.is_py for v in self.vars):
            options += [(4, "rebind"), (3, "aug")]
        if self.unstored and sum(1 for v in self.vars if v.mutable) >= 4:
            options.append((1, "store"))
        if self.nest < 3:
            options += [(3, "range"), (3, "when"), (1, "static")]
        if self.runtime_depth == 0:
            options.append((2, "number"))
        if any(v.ty.is_py and v.mutable for v in self.vars) and self.runtime_depth == 0:
            options.append((2, "count"))
        if self.f.control_flow:
            if self.carried and self.carried[-1]:
                options.append((3, "count_rt"))
            if self.runtime_depth > 0:
                options.append((1, "return"))
            if self.loops and self.loops[-1] == "range":
                options += [(1, "break"), (1, "continue")]
        elif top and len(self.unstored) < len(self.outputs):
            options.append((1, "return"))
        what = weighted(d, options)
        return getattr(self, "stmt_" + what)()

    def main_shape_or_sub(self) -> Shape:
        options: list[tuple[int, Shape]] = [(7, self.tile), (2, ())]
        if self.rank == 2:
            options += [(1, (self.tile[0], 1)), (1, (1, self.tile[1]))]
        return weighted(self.d, options)

    def fresh_value(self, e: Expr) -> Expr:
        """``e``, made a new value where tilekit would hand back an operand unchanged (a
        name, a cast to its own type...): two names of one tile are an error once a loop
        rebinds one of them."""
        if _may_alias(e):
            if e.ty.elem is DType.BOOL:
                return Bin("or", e, Lit(False, Ty(Py.BOOL)), e.ty)
            return Bin("add", e, Lit(0, Ty(Py.INT)), e.ty)
        return e

    def stmt_assign(self) -> Stmt:
        shape = self.main_shape_or_sub()
        e = self.fresh_value(self.expr(shape, self.f.max_depth))
        name = self.fresh("v")
        self.bind(name, e.ty, self.pure(e))
        return Assign(name, e)

    def _rebindable(self) -> list[Var]:
        return [v for v in self.vars if v.mutable and not v.ty.is_py]

    def stmt_rebind(self) -> Stmt:
        v = choice(self.d, self._rebindable())
        e = self.expr(v.ty.shape, self.f.max_depth)
        e = self.conform(e, v.ty)
        if v.pure and not self.pure(e):
            e = self.pure_expr(v.ty.shape, v.ty.dtype is DType.BOOL)
            e = self.conform(e, v.ty)
        return Assign(v.name, self.fresh_value(e))

    def stmt_aug(self) -> Stmt:
        v = choice(self.d, self._rebindable())
        dt = v.ty.dtype
        ops = ["add", "sub", "mul", "floordiv", "mod", "maximum", "minimum"]
        if dt in FLOATS:
            ops += ["div", "pow"]
        if dt in INTS:
            ops += ["and", "or", "xor", "shl", "shr"]
        if dt is DType.BOOL:
            ops = ["and", "or", "xor"]
        ops = [o for o in ops if o not in ("maximum", "minimum")]  # no in-place spelling
        op = choice(self.d, ops)
        shape = self.sub_of(v.ty.shape)
        if v.pure:
            rhs = self.pure_expr(shape, dt is DType.BOOL)
        else:
            rhs = self.expr(shape, self.f.max_depth - 1)
        rhs = self.conform(rhs, Ty(dt, rhs.ty.shape))
        if op in ("floordiv", "mod") and dt not in FLOATS:
            rhs = self.nonzero(rhs)
        return AugAssign(v.name, op, rhs)

    def sub_of(self, shape: Shape) -> Shape:
        """``shape`` or a shape that broadcasts to it."""
        options: list[Shape] = [shape, ()]
        if len(shape) == 2:
            options += [(shape[0], 1), (1, shape[1])]
        return choice(self.d, options)

    def stmt_store(self) -> Stmt:
        out = self.unstored.pop(self.d.int(0, len(self.unstored) - 1))
        return self.store(out)

    def store(self, out: TensorSpec) -> Stmt:
        d = self.d
        shape = self.main_shape_or_sub()
        value = self.sink(shape) if chance(d, 70) else self.expr(shape, self.f.max_depth + 1)
        if chance(d, 60) and not value.ty.is_py:  # mostly keep every bit of the value
            out = self.retype(out, value.ty.dtype)
        if chance(d, 3):
            value = self.literal_of(out.dtype)
        if chance(d, 60):
            return TileStore(out.name, self.tile, tuple(self.name(p) for p in self.pids), value)
        offsets, mask = self.own_offsets(out)
        if chance(d, 30):
            extra = self.expr(self.tile, 2, kind="bool")
            mask = Bin("and", mask, extra, Ty(DType.BOOL, broadcast(mask.ty.shape,
                                                                    extra.ty.shape)))
        if value.ty.shape and broadcast(value.ty.shape, offsets.ty.shape) != offsets.ty.shape:
            value = BroadcastTo(value, offsets.ty.shape, Ty(value.ty.elem, offsets.ty.shape))
        return MaskedStore(out.name, offsets, value, mask)

    def sink(self, shape: Shape) -> Expr:
        """A value that combines names computed so far (so that their values reach an
        output), or a fresh expression when there are none."""
        d = self.d
        cands = [v for v in self.vars if not v.ty.is_py and (v.mutable or v.data)
                 and broadcast(v.ty.shape, shape) == shape]
        full = [v for v in cands if v.ty.shape == shape]
        if full and chance(d, 80):
            cands = full
        if not cands:
            return self.expr(shape, self.f.max_depth + 1)
        pool = list(cands[-4:] if chance(d, 60) else cands)
        loads = [v for v in cands if v.data and v not in pool]
        if loads and chance(d, 60):
            pool.append(choice(d, loads))
        picked = []
        for _ in range(min(len(pool), d.int(1, 3))):
            picked.append(pool.pop(d.int(0, len(pool) - 1)))
        e: Expr = self.name(picked[0])
        for v in picked[1:]:
            b = self.name(v)
            op = choice(d, ("add", "mul", "sub", "maximum", "minimum", "where"))
            if op == "where":
                c = self.coerce(self._expr(self.sub_of(shape), 1), "bool")
                ty = Ty(promote(e.ty.dtype, b.ty.dtype), broadcast(broadcast(
                    c.ty.shape, e.ty.shape), b.ty.shape))
                e = Where(c, e, b, ty)
                continue
            e = Bin(op, e, b, self.bin_ty(op, e.ty, b.ty), "fn" if op in ("maximum", "minimum")
                    else "op")
        if chance(d, 20):
            e = self.x_unary_of(e)
        if e.ty.shape != shape:
            e = BroadcastTo(e, shape, Ty(e.ty.elem, shape))
        return e

    def x_unary_of(self, a: Expr) -> Expr:
        op = choice(self.d, [o for o in UNARY_OPS if o != "isnan"])
        if op == "not" and a.ty.elem in FLOATS:
            op = "neg"
        _, res = unary_dtype(op, a.ty.dtype)
        return Un(op, a, Ty(res, a.ty.shape))

    def retype(self, out: TensorSpec, dt: DType) -> TensorSpec:
        """The output ``out`` made of type ``dt`` (outputs' types are chosen at their store)."""
        new = replace(out, dtype=dt)
        self.outputs = [new if t.name == out.name else t for t in self.outputs]
        return new

    def own_offsets(self, t: TensorSpec, shift: tuple[int, ...] = ()) -> tuple[Expr, Expr]:
        """Element offsets of this program's tile of ``t`` (shifted by ``shift`` elements),
        and the mask of those inside ``t``."""
        offs: Expr | None = None
        mask: Expr | None = None
        for axis, v in enumerate(self.coords):
            pos: Expr = self.name(v)
            if shift and shift[axis]:
                pos = Bin("add", pos, Lit(shift[axis], Ty(Py.INT)), pos.ty)
            term = Bin("mul", pos, Dim(t.name, axis, "stride"), pos.ty)
            inside: Expr = Bin("lt", pos, Dim(t.name, axis), Ty(DType.BOOL, pos.ty.shape))
            if shift and shift[axis] < 0:
                nonneg = Bin("ge", pos, Lit(0, Ty(Py.INT)), Ty(DType.BOOL, pos.ty.shape))
                inside = Bin("and", inside, nonneg, inside.ty)
            if offs is None:
                offs, mask = term, inside
            else:
                shape = broadcast(offs.ty.shape, term.ty.shape)
                offs = Bin("add", offs, term, Ty(DType.INT32, shape))
                mask = Bin("and", mask, inside, Ty(DType.BOOL, shape))
        assert offs is not None and mask is not None
        return offs, mask

    def stmt_number(self) -> Stmt:
        """A Python number (a counter, a flag, a float) bound while tracing."""
        d = self.d
        kind = choice(d, (Py.INT, Py.BOOL, Py.FLOAT))
        if kind is Py.INT:
            value: Any = d.int(0, 5) if not chance(d, 5) else 3_000_000_000
        elif kind is Py.BOOL:
            value = chance(d, 50)
        else:
            value = choice(d, (0.5, 2.0, -1.5, 0.0))
        name = self.fresh("k")
        self.bind(name, Ty(kind), pure=kind is not Py.FLOAT, hi=int(value) if kind is Py.INT
                  else 0)
        return Assign(name, Lit(value, Ty(kind)))

    def stmt_count(self) -> Stmt | None:
        """A Python number updated while tracing (outside runtime constructs)."""
        d = self.d
        v = choice(d, [v for v in self.vars if v.ty.is_py and v.mutable])
        if v.ty.elem is Py.INT:
            k = d.int(0, 3)
            v.hi += k * self.static_trips
            return Assign(v.name, Bin("add", self.name(v), Lit(k, Ty(Py.INT)), Ty(Py.INT)))
        if v.ty.elem is Py.BOOL:
            return Assign(v.name, Lit(chance(d, 50), Ty(Py.BOOL)))
        return Assign(v.name, Bin("mul", self.name(v), Lit(0.5, Ty(Py.FLOAT)), Ty(Py.FLOAT)))

    def stmt_count_rt(self) -> Stmt | None:
        """A Python number carried by the innermost runtime construct, changed in it (once
        per ``tk.when``: two changes could give the number its old value back)."""
        d = self.d
        pool = self.carried[-1]
        v = pool[d.int(0, len(pool) - 1)]
        in_when = self._in_when()
        if in_when:
            pool.remove(v)
        return self.update_number(v, "when" if in_when else "range", touch=False)

    def _in_when(self) -> bool:
        """Whether the innermost runtime construct is a ``tk.when``."""
        return bool(self.constructs) and self.constructs[-1] == "when"

    def update_number(self, v: Var, construct: str, touch: bool) -> Stmt:
        """``v`` changed: a Python number stays one (``c + 2``, ``not flag``) or becomes a
        runtime value (``c + i``, ``flag | cond``); a runtime scalar keeps its type."""
        d = self.d
        literal = touch or chance(d, 50)
        if v.ty.is_py:
            if v.ty.elem is Py.BOOL:
                if literal:
                    return Assign(v.name, Un("pynot", self.name(v), Ty(Py.BOOL)))
                cond = self.pure_expr((), want_bool=True)
                if cond.ty.is_py:  # `flag | other_flag` of two Python bools stays Python
                    pid = self.name(self.pids[0])
                    cond = Bin("ge", pid, Lit(self.d.int(0, 2), Ty(Py.INT)), Ty(DType.BOOL))
                e = Bin("or", self.name(v), cond, self.bin_ty("or", v.ty, cond.ty))
                v.ty, v.pure = e.ty, True
                return Assign(v.name, e)
            if v.ty.elem is Py.INT:
                if literal:
                    k = d.int(1, 3)
                    v.hi += k * self.static_trips
                    return Assign(v.name, Bin("add", self.name(v), Lit(k, Ty(Py.INT)),
                                              Ty(Py.INT)))
                step = self.conform(self.pure_expr((), want_bool=False), Ty(DType.INT32))
                e = Bin("add", self.name(v), step, self.bin_ty("add", v.ty, step.ty))
                v.ty = e.ty
                return Assign(v.name, e)
            if literal:
                return Assign(v.name, Bin("add", self.name(v), Lit(1.5, Ty(Py.FLOAT)),
                                          Ty(Py.FLOAT)))
            x = self.conform(self._expr((), 1), Ty(DType.FLOAT32))
            e = Bin("add", self.name(v), x, self.bin_ty("add", v.ty, x.ty))
            v.ty, v.pure = e.ty, False
            return Assign(v.name, e)
        dt = v.ty.dtype
        if dt is DType.BOOL:
            if not touch and chance(d, 30) and construct == "range":
                v.ty = Ty(Py.BOOL)  # a Python bool until the end of the iteration
                return Assign(v.name, Lit(chance(d, 50), Ty(Py.BOOL)))
            if touch or chance(d, 50):
                return Assign(v.name, Un("not", self.name(v), v.ty))
            cond = self.pure_expr((), want_bool=True)
            return Assign(v.name, self.conform(Bin("or", self.name(v), cond, v.ty), v.ty))
        if dt in FLOATS:
            # a touch goes to the start of the body: it may not read the body's names
            x = Lit(1.0, Ty(Py.FLOAT)) if touch else self.conform(self._expr((), 1), Ty(dt))
            scaled = Bin("mul", self.name(v), Lit(0.5, Ty(Py.FLOAT)), v.ty)
            v.pure = False
            return Assign(v.name, self.conform(Bin("add", scaled, x, v.ty), v.ty))
        step = self.pure_expr((), want_bool=False) if chance(d, 40) and not touch else \
            Lit(d.int(1, 3), Ty(Py.INT))
        e = Bin("add", self.name(v), step, self.bin_ty("add", v.ty, step.ty))
        return Assign(v.name, self.conform(e, v.ty))

    def stmt_return(self) -> Stmt:
        return Return()

    def stmt_break(self) -> Stmt:
        return Break()

    def stmt_continue(self) -> Stmt:
        return Continue()

    def _scope(self, body_fn: Any, runtime: str | None) -> tuple[list[Stmt],
                                                                 list[tuple[str, Ty]]]:
        """Generate a nested block (``runtime``: "range", "when", or None for Python loops).

        Names bound inside are gone after it, except (control flow on) names first bound
        inside a runtime construct. With control flow on, a runtime construct may rebind
        Python numbers (README, "Control flow: one rule"): a loop makes them runtime scalars
        before it starts; a ``tk.when`` leaves them Python numbers inside and makes each it
        changed the runtime choice of its two values after it. Returns the body and, for a
        ``tk.when``, the numbers it changed with their types after it."""
        before = len(self.vars)
        carried: list[Var] = []
        entry: dict[str, tuple[Ty, int]] = {}
        if runtime and self.f.control_flow and "static" not in self.loops:
            # a construct inside another carries only what that one carries (tilekit converts
            # what any body rebinds, at any depth); none inside a tk.static_range (its copies
            # would start with different types)
            pool = self.carried_all[-1] if self.carried_all else self.vars
            carried = [v for v in pool if v.ty.is_py and v.mutable and chance(self.d, 40)]
        for v in carried:
            entry[v.name] = (v.ty, v.hi)
            if runtime == "range":
                v.ty = Ty(standalone(v.ty.elem, v.hi))  # type: ignore[arg-type]
                v.pure = v.pure and v.ty.dtype not in FLOATS
        self.nest += 1
        if runtime:
            self.runtime_depth += 1
            self.carried.append(list(carried))
            self.carried_all.append(list(carried))
            self.constructs.append(runtime)
        if runtime != "when":
            self.loops.append(runtime or "static")
        body = body_fn()
        if runtime != "when":
            self.loops.pop()
        if runtime:
            left = self.carried.pop()
            for v in left:  # the construct changes what it carries (at its start: always)
                now = v.ty
                start = entry[v.name][0]
                v.ty = Ty(standalone(start.elem, entry[v.name][1])) if runtime == "range" \
                    else start  # type: ignore[arg-type]
                body.insert(0, self.update_number(v, runtime, touch=True))
                v.ty = now
            self.runtime_depth -= 1
            self.constructs.pop()
            self.carried_all.pop()
        self.nest -= 1
        numbers: list[tuple[str, Ty]] = []
        for v in carried:
            if runtime == "when" and v.ty.is_py:  # still a number: the choice of two values
                before_ty, before_hi = entry[v.name]
                v.ty = Ty(promote(standalone(before_ty.elem, before_hi),  # type: ignore
                                  standalone(v.ty.elem, v.hi)))  # type: ignore[arg-type]
            elif v.ty.is_py:  # a loop carries a number left in it as its type
                v.ty = Ty(standalone(v.ty.elem, v.hi))  # type: ignore[arg-type]
            if runtime == "when":
                numbers.append((v.name, v.ty))
            v.pure = v.pure and v.ty.dtype not in FLOATS
        inner = self.vars[before:]
        del self.vars[before:]
        # (this construct is popped already.) An early exit in a loop guards the rest of its
        # body with a hidden tk.when: names first bound there are in a nested construct too
        in_loop = "range" in self.constructs or (runtime == "range" and _has_exit(body))
        if runtime and self.f.control_flow and (self.f.first_bound_in_loops or not in_loop):
            for v in inner:  # first bound inside, readable after
                if not v.ty.is_py and v.mutable and v.name not in {x.name for x in self.vars}:
                    self.vars.append(v)
        return body, numbers

    def stmt_range(self) -> Stmt:
        d = self.d
        lo_v = d.int(0, 2)
        lo: Expr = Lit(lo_v, Ty(Py.INT))
        step_v = weighted(d, [(8, 1), (1, 2), (1, -1)])
        trips = d.int(0, 3)
        kind = weighted(d, [(5, "lit"), (2, "n0"), (2, "pid"), (1, "expr")])
        if step_v < 0:
            lo = Lit(lo_v + trips, Ty(Py.INT))
            hi: Expr = Lit(lo_v, Ty(Py.INT))
        elif kind == "n0":
            hi = Name("n0", Ty(DType.INT32))
        elif kind == "pid":
            hi = Bin("add", self.name(self.pids[0]), Lit(trips, Ty(Py.INT)), Ty(DType.INT32))
            lo = self.name(self.pids[0]) if chance(d, 50) else lo
        elif kind == "expr":
            x = self.pure_expr((), want_bool=False)
            x = self.conform(x, Ty(DType.INT32))
            hi = Bin("add", lo, Bin("mod", x, Lit(4, Ty(Py.INT)), Ty(DType.INT32)),
                     Ty(DType.INT32))
        else:
            hi = Lit(lo_v + trips * step_v, Ty(Py.INT))
        var = self.fresh("i")

        def body() -> list[Stmt]:
            self.bind(var, Ty(DType.INT32), pure=True, mutable=False)
            self.loop_vars.add(var)
            return self.block(max(2, self.f.max_stmts // 2))

        stmts, _ = self._scope(body, "range")
        return Range(var, lo, hi, Lit(step_v, Ty(Py.INT)), tuple(stmts))

    def stmt_static(self) -> Stmt:
        n = self.d.int(1, 3)
        var = self.fresh("s")
        self.static_trips *= n

        def body() -> list[Stmt]:
            self.bind(var, Ty(Py.INT), pure=True, mutable=False, hi=n - 1)
            self.loop_vars.add(var)
            unstored = self.unstored
            self.unstored = []  # no stores in unrolled copies (two ops, one address)
            try:
                return self.block(max(2, self.f.max_stmts // 2))
            finally:
                self.unstored = unstored

        stmts, _ = self._scope(body, None)
        self.static_trips //= n
        return StaticRange(var, n, tuple(stmts))

    def stmt_when(self) -> Stmt:
        cond = self.pure_expr((), want_bool=True)
        stmts, numbers = self._scope(lambda: self.block(max(2, self.f.max_stmts // 2)), "when")
        return When(cond, tuple(stmts), tuple(numbers))

    # --- expressions -------------------------------------------------------------------------

    def pure(self, e: Expr) -> bool:
        """No float anywhere in ``e``, and every name pure: exact."""
        if isinstance(e, Name):
            return self.lookup(e.id).pure
        if is_float(e.ty.elem):
            return False
        for child in _children(e):
            if not self.pure(child):
                return False
        return True

    def bin_ty(self, op: str, a: Ty, b: Ty) -> Ty:
        if a.is_py and b.is_py:
            if op in COMPARE:
                return Ty(Py.BOOL)
            if Py.FLOAT in (a.elem, b.elem):
                return Ty(Py.FLOAT)
            if op in BITWISE and a.elem is Py.BOOL and b.elem is Py.BOOL:
                return Ty(Py.BOOL)
            return Ty(Py.INT)
        da, db = operand_dtypes([a.elem, b.elem])
        _, res = binary_dtype(op, da, db)
        return Ty(res, broadcast(a.shape, b.shape))

    def conform(self, e: Expr, ty: Ty) -> Expr:
        """``e`` cast to ``ty``'s dtype and broadcast to its shape."""
        if e.ty.is_py:
            e = self.tileify(e, ty.dtype)
        if e.ty.elem is not ty.elem:
            e = Cast(e, ty.dtype, Ty(ty.dtype, e.ty.shape))
        if e.ty.shape != ty.shape:
            e = BroadcastTo(e, ty.shape, Ty(ty.elem, ty.shape))
        return e

    def tileify(self, e: Expr, dt: DType) -> Expr:
        """A Python-number expression as a runtime value (``tk.full((), 0, dt) + e``: the
        number takes ``dt`` weakly, so it must fit)."""
        zero = Full((), 0, dt, Ty(dt))
        e = self._fit_number(e, dt)
        return Bin("add", zero, e, self.bin_ty("add", zero.ty, e.ty))

    def literal_for(self, dt: DType | None) -> Lit:
        """A Python literal that may stand next to a tile of ``dt`` (it must fit integers)."""
        d = self.d
        if dt is None or dt in FLOATS:
            kind = weighted(d, [(4, "int"), (4, "float"), (1, "bool")])
        elif dt is DType.BOOL:
            kind = weighted(d, [(3, "bool"), (2, "int"), (1, "float")])
        else:
            kind = weighted(d, [(8, "int"), (2, "float"), (1, "bool")])
        if kind == "bool":
            return Lit(chance(d, 50), Ty(Py.BOOL))
        if kind == "float":
            big = dt in (DType.FLOAT16, DType.BFLOAT16)  # 1e30 does not fit float16
            value = choice(d, FLOAT_LITERALS)
            if big and math.isfinite(value) and abs(value) > 60000.0 and dt is DType.FLOAT16:
                value = 65504.0
            return Lit(value, Ty(Py.FLOAT))
        if dt is not None and (dt in INTS or dt is DType.BOOL):
            # an int next to a bool tile is an int32
            lo, hi = int_range(dt if dt is not DType.BOOL else DType.INT32)
            if chance(d, 10):
                return Lit(choice(d, (lo, hi, hi // 2 + 1, lo + 1)), Ty(Py.INT))
            return Lit(max(lo, min(hi, d.int(0, 12) - 4)), Ty(Py.INT))
        if chance(d, 10):
            big = (2**31 - 1, -(2**31), 70000, 2**40) if dt is not DType.FLOAT16 else \
                (65504, -65504, 2049, 4097)
            return Lit(choice(d, big), Ty(Py.INT))
        return Lit(d.int(0, 12) - 4, Ty(Py.INT))

    def literal_of(self, dt: DType) -> Lit:
        """A Python literal that is a constant of ``dt`` itself (a store's value, a load's
        `other`): it must fit ``dt`` (integers exact, floats finite where finite)."""
        d = self.d
        if dt is DType.BOOL:
            return Lit(chance(d, 50), Ty(Py.BOOL))
        if dt in INTS:
            lo, hi = int_range(dt)
            value = choice(d, (0, 1, 2, lo, hi, 7)) if chance(d, 20) else \
                max(lo, min(hi, d.int(0, 12) - 4))
            return Lit(value, Ty(Py.INT))
        lit = self.literal_for(dt)
        if lit.ty.elem is Py.BOOL or R.fits(lit.value, dt):
            return lit
        return Lit(1.5, Ty(Py.FLOAT))

    def number_var(self, dt: DType | None) -> Expr | None:
        """A Python-number name that may stand next to a tile of ``dt``."""
        cands = []
        for v in self.vars:
            if not v.ty.is_py:
                continue
            if v.ty.elem is Py.INT and dt is not None and (dt in INTS or dt is DType.BOOL):
                lo, hi = int_range(dt if dt is not DType.BOOL else DType.INT32)
                if v.hi > hi or v.hi > 2**31:
                    continue
            cands.append(v)
        if not cands:
            return None
        return self.name(choice(self.d, cands))

    def expr(self, shape: Shape, depth: int, kind: str | None = None) -> Expr:
        """An expression of ``shape``; ``kind`` "bool" / "num" (not bool) / "float" / "int"
        constrains its element type."""
        e = self._expr(shape, depth)
        return self.coerce(e, kind)

    def coerce(self, e: Expr, kind: str | None) -> Expr:
        d = self.d
        if kind is None:
            return e
        elem = e.ty.elem
        if kind == "bool" and elem is not DType.BOOL:
            if is_float(elem) and chance(d, 30):
                return Un("isnan", e, Ty(DType.BOOL, e.ty.shape))
            lit = self.literal_for(e.ty.dtype)
            op = choice(d, COMPARE)
            return Bin(op, e, lit, self.bin_ty(op, e.ty, lit.ty))
        if kind == "num" and elem is DType.BOOL:
            return Cast(e, DType.INT32, Ty(DType.INT32, e.ty.shape))
        if kind == "float" and elem not in FLOATS:
            dt = choice(d, FLOATS)
            return Cast(e, dt, Ty(dt, e.ty.shape))
        if kind == "int" and elem not in INTS:
            dt = choice(d, INTS)
            return Cast(e, dt, Ty(dt, e.ty.shape))
        return e

    def _expr(self, shape: Shape, depth: int) -> Expr:
        d = self.d
        if depth <= 0:
            return self.leaf(shape)
        options: list[tuple[int, str]] = [(4, "leaf"), (12, "binary"), (5, "unary"),
                                          (2, "cast"), (3, "where")]
        options += [(1, "fma"), (1, "bitcast")]
        if len(shape) <= 1:
            options.append((3 if shape else 8, "reduce"))
        if len(shape) == 2:
            options += [(2, "reduce"), (3, "dot"), (1, "transpose")]
            if 1 in shape:
                options.append((2, "newaxis"))
        if shape:
            options.append((1, "cumsum"))
        what = weighted(d, options)
        return getattr(self, "x_" + what)(shape, depth - 1)

    def x_leaf(self, shape: Shape, depth: int) -> Expr:
        return self.leaf(shape)

    def leaf(self, shape: Shape) -> Expr:
        d = self.d
        names = [v for v in self.vars if v.ty.shape == shape and not v.ty.is_py]
        data = [v for v in names if v.mutable or v.data]
        options: list[tuple[int, str]] = [(1, "full")]
        if names:
            options.append((4, "name"))
        if data:
            options.append((8, "data"))
        if shape and any(len(t.shape) == len(shape) for t in self.inputs):
            options.append((6, "tile_load"))
        if shape == self.tile:
            options += [(3, "masked_load"), (2, "gather")]
        if len(shape) == 1:
            options.append((1, "arange"))
        if len(shape) == 2 and not any(len(t.shape) == 2 for t in self.inputs):
            options.append((5, "outer"))
        if shape == ():
            options.append((2, "name_scalar"))
        what = weighted(d, options)
        if what == "name":
            return self.name(choice(d, names))
        if what == "data":  # computed values, recent ones first
            return self.name(choice(d, data[-3:] if chance(d, 60) else data))
        if what == "name_scalar":
            cands = [v for v in self.vars if v.ty.shape == () and not v.ty.is_py]
            if cands:
                return self.name(choice(d, cands))
            what = "full"
        if what == "tile_load":
            return self.tile_load(shape)
        if what == "masked_load":
            return self.masked_load()
        if what == "gather":
            return self.gather()
        if what == "arange":
            return Arange(shape[0], Ty(DType.INT32, shape))
        if what == "outer":  # (n, 1) op (1, m)
            a = self.leaf((shape[0],))
            b = self.leaf((shape[1],))
            a = NewAxis(a, 1, Ty(a.ty.elem, (shape[0], 1)))
            b = NewAxis(b, 0, Ty(b.ty.elem, (1, shape[1])))
            op = choice(d, ("add", "mul", "maximum", "sub"))
            return Bin(op, a, b, self.bin_ty(op, a.ty, b.ty), "fn" if op == "maximum" else "op")
        dt = choice(d, DTYPES)
        lit = self.literal_for(dt)
        value = lit.value
        if dt is DType.BOOL and not isinstance(value, bool):
            value = bool(value)
        if dt in INTS and isinstance(value, float):
            value = 2.0  # an integral float fits an integer type
        return Full(shape, value, dt, Ty(dt, shape))

    def index_expr(self, axis: int) -> Expr:
        """A tile coordinate: mostly this program's, sometimes a neighbour's or a loop's."""
        d = self.d
        pid = self.name(self.pids[axis]) if axis < len(self.pids) else Lit(0, Ty(Py.INT))
        kind = weighted(d, [(6, "pid"), (2, "shift"), (2, "loop"), (1, "lit"), (1, "pure")])
        if kind == "pid":
            return pid
        if kind == "shift":
            k = choice(d, (1, -1, 2, 3))
            return Bin("add", pid, Lit(k, Ty(Py.INT)), self.bin_ty("add", pid.ty, Ty(Py.INT)))
        if kind == "loop":
            loops = [v for v in self.vars if v.name in self.loop_vars]
            if loops:
                v = choice(d, loops)
                return Bin("add", pid, self.name(v), self.bin_ty("add", pid.ty, v.ty))
            return pid
        if kind == "lit":
            return Lit(d.int(0, 3), Ty(Py.INT))
        x = self.conform(self.pure_expr((), want_bool=False), Ty(DType.INT32))
        return Bin("mod", x, Lit(3, Ty(Py.INT)), Ty(DType.INT32))

    def tile_load(self, shape: Shape, t: TensorSpec | None = None) -> Expr:
        d = self.d
        if t is None:
            t = choice(d, [t for t in self.inputs if len(t.shape) == len(shape)])
        index = tuple(self.index_expr(a) for a in range(len(shape)))
        other = None
        if chance(d, 30):
            other = self.literal_of(t.dtype).value
        return TileLoad(t.name, shape, index, other, Ty(t.dtype, shape))

    def masked_load(self) -> Expr:
        d = self.d
        t = choice(d, [t for t in self.inputs if len(t.shape) == self.rank])
        shift = tuple(choice(d, (0, 0, 1, -1, 3)) for _ in range(self.rank))
        offsets, mask = self.own_offsets(t, shift)
        if chance(d, 30):
            extra = self.pure_expr(self.tile, want_bool=True)
            mask = Bin("and", mask, extra, Ty(DType.BOOL, broadcast(mask.ty.shape,
                                                                    extra.ty.shape)))
        other = None
        if chance(d, 50):
            other = self.literal_of(t.dtype).value
        shape = broadcast(offsets.ty.shape, mask.ty.shape)
        return MaskedLoad(t.name, offsets, mask, other, Ty(t.dtype, shape))

    def gather(self) -> Expr:
        """A load at data-dependent offsets, wrapped into the tensor by ``%``."""
        d = self.d
        t = choice(d, [t for t in self.inputs if len(t.shape) == self.rank])
        offs: Expr | None = None
        for axis in range(self.rank):
            idx = self.pure_expr(self.tile, want_bool=False)
            wrapped = Bin("mod", idx, Dim(t.name, axis), self.bin_ty("mod", idx.ty,
                                                                     Ty(DType.INT32)))
            term = Bin("mul", wrapped, Dim(t.name, axis, "stride"),
                       self.bin_ty("mul", wrapped.ty, Ty(DType.INT32)))
            offs = term if offs is None else Bin("add", offs, term,
                                                 self.bin_ty("add", offs.ty, term.ty))
        assert offs is not None
        return MaskedLoad(t.name, offs, None, None, Ty(t.dtype, offs.ty.shape))

    def pure_expr(self, shape: Shape, want_bool: bool, depth: int = 2) -> Expr:
        """An exact integer (or bool) expression of ``shape``: pids, loop variables, integer
        arguments and loads, Python ints, and integer ops on them."""
        d = self.d
        names = [v for v in self.vars if v.pure and (v.ty.shape == shape or v.ty.shape == ())
                 and not is_float(v.ty.elem)]
        int_names = [v for v in names if v.ty.elem is not DType.BOOL and v.ty.elem is not Py.BOOL
                     and v.hi < 2**31]  # a Python int next to an int32 must fit it
        if want_bool:
            bools = [v for v in names if v.ty.elem in (DType.BOOL, Py.BOOL)
                     and v.ty.shape == shape]
            if bools and chance(d, 25):
                return self.name(choice(d, bools))
            a = self.pure_expr(shape, False, depth - 1)
            op = choice(d, COMPARE)
            b: Expr = Lit(d.int(0, 4), Ty(Py.INT)) if chance(d, 70) else \
                self.pure_expr((), False, 0)
            if a.ty.is_py and b.ty.is_py:
                a = self.tileify(a, DType.INT32)
            b = self._fit_literal(b, a)
            e: Expr = Bin(op, a, b, self.bin_ty(op, a.ty, b.ty))
            if e.ty.shape != shape:
                e = BroadcastTo(e, shape, Ty(DType.BOOL, shape))
            return e
        options: list[tuple[int, str]] = []
        if int_names:
            options.append((6, "name"))
        if shape and any(t.dtype not in FLOATS and len(t.shape) == len(shape)
                         for t in self.inputs):
            options.append((3, "load"))
        if depth > 0:
            options += [(4, "op")]
            if not shape:
                options.append((1, "reduce"))
        if not options or (shape and not any(v.ty.shape == shape for v in int_names)
                           and depth <= 0 and "load" not in [o for _, o in options]):
            options.append((1, "arange" if shape else "lit"))
        what = weighted(d, options)
        if what == "name":
            e = self.name(choice(d, int_names))
        elif what == "load":
            ts = [t for t in self.inputs if t.dtype not in FLOATS and len(t.shape) == len(shape)]
            t = choice(d, ts)
            index = tuple(self.index_expr(a) for a in range(len(shape)))
            e = TileLoad(t.name, shape, index, None, Ty(t.dtype, shape))
        elif what == "op":
            a = self.pure_expr(shape, False, depth - 1)
            op = choice(d, ("add", "sub", "mul", "floordiv", "mod", "maximum", "and", "xor",
                            "shl", "shr"))
            b = Lit(d.int(1, 5), Ty(Py.INT)) if chance(d, 60) else \
                self.pure_expr((), False, depth - 1)
            if a.ty.is_py and b.ty.is_py:
                a = self.tileify(a, DType.INT32)
            b = self._fit_literal(b, a)
            if op in SHIFTS and (a.ty.elem is DType.BOOL or b.ty.elem is DType.BOOL
                                 or a.ty.elem is Py.BOOL or b.ty.elem is Py.BOOL):
                op = "add"
            if op in ("floordiv", "mod"):
                b = self.nonzero(b)
            e = Bin(op, a, b, self.bin_ty(op, a.ty, b.ty))
            if op in ("and", "xor") and e.ty.elem is DType.BOOL:
                e = Cast(e, DType.INT32, Ty(DType.INT32, e.ty.shape))
        elif what == "reduce":
            src = self.pure_expr(self.tile, False, depth - 1)
            if src.ty.shape == ():
                e = src
            else:
                kind = choice(d, ("max", "min", "sum", "argmax"))
                _, res = reduce_dtype(kind, src.ty.dtype)
                e = Reduce(kind, src, None, False, Ty(res, ()))
        elif what == "arange":
            e = Arange(shape[0], Ty(DType.INT32, shape)) if len(shape) == 1 else \
                Full(shape, 1, DType.INT32, Ty(DType.INT32, shape))
        else:
            e = Lit(d.int(0, 4), Ty(Py.INT))
        if e.ty.shape != shape:
            if e.ty.is_py:
                e = self.tileify(e, DType.INT32)
            e = BroadcastTo(e, shape, Ty(e.ty.elem, shape))
        return e

    def _fit_literal(self, b: Expr, a: Expr) -> Expr:
        """A Python int ``b`` next to ``a``: unsigned and narrow types need small
        non-negative values."""
        if isinstance(b, Lit) and b.ty.elem is Py.INT and isinstance(a.ty.elem, DType) \
                and a.ty.elem in INTS:
            lo, hi = int_range(a.ty.elem)
            return Lit(max(lo, min(hi, b.value)), b.ty)  # type: ignore[arg-type]
        if isinstance(b, Name) and b.ty.is_py and isinstance(a.ty.elem, DType) \
                and a.ty.elem in INTS:
            if self.lookup(b.id).hi > int_range(a.ty.elem)[1]:
                return Lit(1, Ty(Py.INT))
        return b

    def nonzero(self, b: Expr) -> Expr:
        """An integer divisor that is never zero: a literal, or ``tk.where(b == 0, 1, b)``."""
        if isinstance(b, Lit):
            return b if b.value else Lit(1, Ty(Py.INT))
        if b.ty.is_py:
            b = self.tileify(b, DType.INT32)
        zero = Bin("eq", b, Lit(0, Ty(Py.INT)), self.bin_ty("eq", b.ty, Ty(Py.INT)))
        one = Lit(1, Ty(Py.INT))
        da, db = operand_dtypes([one.ty.elem, b.ty.elem])
        return Where(zero, one, b, Ty(promote(da, db), b.ty.shape))

    # composite expressions ---------------------------------------------------------------

    def operand(self, shape: Shape, depth: int, other: Ty | None = None) -> Expr:
        """A sub-expression of ``shape``, sometimes a Python literal or number name."""
        d = self.d
        if other is not None and chance(d, 25):
            dt = other.elem if isinstance(other.elem, DType) else None
            if chance(d, 20):
                named = self.number_var(dt)
                if named is not None:
                    return named
            return self.literal_for(dt)
        return self._expr(shape, depth)

    def _split(self, shape: Shape) -> tuple[Shape, Shape]:
        """Operand shapes that broadcast to ``shape`` (mostly ``shape`` itself)."""
        d = self.d
        options = [(6, (shape, shape)), (2, (shape, ())), (1, ((), shape))]
        if len(shape) == 2:
            options += [(1, ((shape[0], 1), (1, shape[1]))), (1, (shape, (1, shape[1]))),
                        (1, ((shape[0], 1), shape))]
        return weighted(d, options)

    def x_binary(self, shape: Shape, depth: int) -> Expr:
        d = self.d
        op = weighted(d, [(4, "add"), (3, "sub"), (4, "mul"), (3, "div"), (2, "floordiv"),
                          (2, "mod"), (2, "maximum"), (2, "minimum"), (1, "pow"), (2, "and"),
                          (2, "or"), (2, "xor"), (2, "shl"), (2, "shr"), (2, "eq"), (1, "ne"),
                          (2, "lt"), (1, "le"), (1, "gt"), (1, "ge")])
        sa, sb = self._split(shape)
        a = self._expr(sa, depth)
        b = self.operand(sb, depth, a.ty)
        if b.ty.is_py and a.ty.shape != shape:
            a = BroadcastTo(a, shape, Ty(a.ty.elem, shape))
        if chance(d, 15):
            a, b = b, a  # the literal (or the smaller tile) on the left
        a, b = self._fix_literals(a, b)
        da, db = operand_dtypes([a.ty.elem, b.ty.elem])
        opd = promote(da, db)
        if op in BITWISE and opd in FLOATS:
            a, b = self._to_int(a), self._to_int(b)
        if op in SHIFTS and (opd not in INTS or DType.BOOL in (a.ty.elem, b.ty.elem)
                             or Py.BOOL in (a.ty.elem, b.ty.elem)):
            a, b = self._to_int(a, strict=True), self._to_int(b, strict=True)
        a, b = self._fix_literals(a, b)
        if op in ("floordiv", "mod"):
            da, db = operand_dtypes([a.ty.elem, b.ty.elem])
            if binary_dtype(op, da, db)[0] not in FLOATS:
                b = self.nonzero(b)
        spelling = "fn" if op in ("maximum", "minimum") else "op"
        e = Bin(op, a, b, self.bin_ty(op, a.ty, b.ty), spelling)
        assert e.ty.shape == shape, (e, shape)
        return e

    def _fix_literals(self, a: Expr, b: Expr) -> tuple[Expr, Expr]:
        """Python numbers that must fit the tile's integer type do."""
        if a.ty.is_py and isinstance(b.ty.elem, DType):
            a = self._fit_number(a, b.ty.elem)
        elif b.ty.is_py and isinstance(a.ty.elem, DType):
            b = self._fit_number(b, a.ty.elem)
        return a, b

    def _fit_number(self, x: Expr, dt: DType) -> Expr:
        if dt is DType.BOOL:
            dt = DType.INT32  # an int next to a bool tile is an int32
        if x.ty.elem is not Py.INT or dt not in INTS:
            return x
        lo, hi = int_range(dt)
        if isinstance(x, Lit):
            if not lo <= x.value <= hi:  # type: ignore[operator]
                return Lit(max(lo, min(hi, x.value)), x.ty)  # type: ignore[type-var]
            return x
        if isinstance(x, Name) and self.lookup(x.id).hi > hi:
            return Lit(1, Ty(Py.INT))
        return x

    def _to_int(self, e: Expr, strict: bool = False) -> Expr:
        if e.ty.is_py:
            if e.ty.elem is Py.FLOAT or (strict and e.ty.elem is Py.BOOL):
                return Lit(self.d.int(0, 9), Ty(Py.INT))
            return e
        if e.ty.elem in FLOATS or (strict and e.ty.elem is DType.BOOL):
            dt = choice(self.d, INTS)
            return Cast(e, dt, Ty(dt, e.ty.shape))
        return e

    def x_unary(self, shape: Shape, depth: int) -> Expr:
        d = self.d
        op = choice(d, UNARY_OPS)
        a = self._expr(shape, depth)
        if op == "not" and a.ty.elem in FLOATS:
            op = "neg"
        _, res = unary_dtype(op, a.ty.dtype)
        return Un(op, a, Ty(res, shape))

    def x_cast(self, shape: Shape, depth: int) -> Expr:
        dt = weighted(self.d, TENSOR_DTYPES)
        a = self._expr(shape, depth)
        return Cast(a, dt, Ty(dt, shape))

    def x_bitcast(self, shape: Shape, depth: int) -> Expr:
        a = self._expr(shape, depth)
        if a.ty.elem is DType.BOOL:
            a = Cast(a, DType.UINT8, Ty(DType.UINT8, shape))
        same = [t for t in ALL_DTYPES if t is not DType.BOOL and t.bits == a.ty.dtype.bits]
        dt = choice(self.d, same)
        return Bitcast(a, dt, Ty(dt, shape))

    def x_where(self, shape: Shape, depth: int) -> Expr:
        d = self.d
        sc, sa = self._split(shape)
        c = self.expr(sc, depth, kind="bool")
        a = self._expr(sa, depth)
        sb = shape if broadcast(sc, sa) != shape else choice(d, [shape, ()])
        b = self.operand(sb, depth, a.ty)
        if a.ty.is_py and b.ty.is_py:
            a = self._expr(sa, 0)
        a, b = self._fix_literals(a, b)
        if broadcast(broadcast(c.ty.shape, a.ty.shape), b.ty.shape) != shape:
            b = self.conform(b, Ty(b.ty.elem if not b.ty.is_py else DType.INT32, shape))
        da, db = operand_dtypes([a.ty.elem, b.ty.elem], [getattr(a, "value", 0),
                                                          getattr(b, "value", 0)])
        return Where(c, a, b, Ty(promote(da, db), shape))

    def x_fma(self, shape: Shape, depth: int) -> Expr:
        a = self._expr(shape, depth)
        b = self.operand(self.sub_of(shape), depth, a.ty)
        c = self.operand(self.sub_of(shape), depth, a.ty)
        a, b = self._fix_literals(a, b)
        a, c = self._fix_literals(a, c)
        dts = operand_dtypes([a.ty.elem, b.ty.elem, c.ty.elem])
        dt = promote(promote(dts[0], dts[1]), dts[2])
        if dt not in FLOATS:
            dt = DType.FLOAT32
        return Fma(a, b, c, Ty(dt, shape))

    def x_reduce(self, shape: Shape, depth: int) -> Expr:
        d = self.d
        kind = weighted(d, [(4, "sum"), (3, "max"), (3, "min"), (1, "prod"), (2, "argmax"),
                            (2, "argmin")])
        method = chance(d, 20) and kind != "prod"
        if shape == ():
            src_shape = choice(d, [self.tile] + ([(self.tile[0],)] if self.rank == 2 else []))
            axis = None if len(src_shape) > 1 or chance(d, 50) else 0
            keep = False
        elif len(shape) == 1:
            m = choice(d, SIZES_2D)
            axis = d.int(0, 1)
            src_shape = (shape[0], m) if axis == 1 else (m, shape[0])
            keep = False
        else:
            n, m = shape
            if n == 1 and m == 1:
                src_shape = self.tile if self.rank == 2 else (choice(d, SIZES_2D),
                                                              choice(d, SIZES_2D))
                axis, keep = None, True
            elif m == 1:
                src_shape, axis, keep = (n, choice(d, SIZES_2D)), 1, True
            elif n == 1:
                src_shape, axis, keep = (choice(d, SIZES_2D), m), 0, True
            else:
                return self.leaf(shape)
        if kind in ("argmax", "argmin") and axis is None and len(src_shape) > 1:
            kind = "max"
        src = self._expr(src_shape, depth)
        if kind == "prod" and src.ty.elem in FLOATS and math.prod(src_shape) > 16:
            kind = "sum"
        _, res = reduce_dtype(kind, src.ty.dtype)
        return Reduce(kind, src, axis, keep, Ty(res, shape), method)

    def x_cumsum(self, shape: Shape, depth: int) -> Expr:
        a = self._expr(shape, depth)
        return Cumsum(a, self.d.int(0, len(shape) - 1), Ty(cumsum_dtype(a.ty.dtype), shape))

    def x_newaxis(self, shape: Shape, depth: int) -> Expr:
        if shape[1] == 1:
            a = self._expr((shape[0],), depth)
            return NewAxis(a, 1, Ty(a.ty.elem, shape))
        a = self._expr((shape[1],), depth)
        return NewAxis(a, 0, Ty(a.ty.elem, shape))

    def x_transpose(self, shape: Shape, depth: int) -> Expr:
        a = self._expr((shape[1], shape[0]), depth)
        return Transpose(a, Ty(a.ty.elem, shape))

    def x_dot(self, shape: Shape, depth: int) -> Expr:
        d = self.d
        n, m = shape
        k = choice(d, DOT_K)
        a = self._expr((n, k), depth)
        b = self._expr((k, m), depth)
        if a.ty.elem is DType.BOOL:
            a = Cast(a, DType.INT8, Ty(DType.INT8, a.ty.shape))
        if b.ty.elem is DType.BOOL:
            b = Cast(b, DType.INT8, Ty(DType.INT8, b.ty.shape))
        opd = promote(a.ty.dtype, b.ty.dtype)
        acc: Expr | None = None
        if chance(d, 40):
            acc_dt = choice(d, (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16) if opd in FLOATS
                            else (DType.INT32, DType.INT64))
            acc = self.conform(self._expr(shape, depth), Ty(acc_dt, shape))
        _, accd = dot_dtypes(a.ty.dtype, b.ty.dtype, acc.ty.dtype if acc is not None else None)
        return Dot(a, b, acc, Ty(accd, shape))


def _may_alias(e: Expr) -> bool:
    """Whether tilekit may return (one of) ``e``'s operand tiles as its value."""
    if isinstance(e, Name):
        return True
    if isinstance(e, Cast) or isinstance(e, Bitcast):
        return e.a.ty.elem is e.dtype or _may_alias(e.a) and False
    if isinstance(e, BroadcastTo):
        return e.a.ty.shape == e.shape
    if isinstance(e, Un):
        return (e.op in ("floor", "ceil") and e.a.ty.elem not in FLOATS) or \
            (e.op == "abs" and e.a.ty.elem in UNSIGNED)
    if isinstance(e, Reduce):
        return e.a.ty.shape == ()
    return False


def _children(e: Expr) -> list[Expr]:
    out = []
    for value in vars(e).values():
        if isinstance(value, Expr):
            out.append(value)
        elif isinstance(value, tuple):
            out += [x for x in value if isinstance(x, Expr)]
    return out


def _has_exit(body: list[Stmt] | tuple[Stmt, ...]) -> bool:
    """Whether a ``return``, ``break`` or ``continue`` is anywhere in ``body``."""
    for s in body:
        if isinstance(s, (Return, Break, Continue)):
            return True
        if isinstance(s, (Range, StaticRange, When)) and _has_exit(s.body):
            return True
    return False


def _always_exits(s: Stmt) -> bool:
    """Whether ``s`` leaves its block on every path while tracing (code after it is dead)."""
    if isinstance(s, (Return, Break, Continue)):
        return True
    if isinstance(s, StaticRange):
        return s.n > 0 and any(_always_exits(x) for x in s.body)
    return False


def _assigned(s: Stmt) -> set[str]:
    from tests.fuzz.reference import assigned_names

    return assigned_names((s,))


def _ends(body: list[Stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (Return, Break, Continue))


def generate(draw: Draw, features: Features = Features()) -> Program:
    return Generator(draw, features).program()


@dataclass
class Stats:
    """What a run saw (for the summary)."""

    programs: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n
