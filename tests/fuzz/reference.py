"""The reference: a program evaluated per program id in plain Python/numpy.

It walks the fuzzer's own representation (``program.py``) the way the README says a kernel
means (each program runs its statements in order; ``tk.range`` and ``tk.when`` are loops
and branches *per program*; tile views read padding past a tensor's edge and drop stores
there), with the numerics of ``refnum.py``. It never calls tilekit's interpreter or op
references: only ``DType`` is shared, as a name.

Control flow as the front end defines it (README, and issue 27 for early exits): ``return``
ends the program, ``break``/``continue`` act on the innermost ``tk.range``; a Python number
rebound inside a runtime loop or branch is carried as a runtime scalar from the start of that
construct (int32, int64 when it does not fit, float32, bool), and a name first bound inside
one and read after it holds its last value, or zeros where the body never ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tests.fuzz import refnum as R
from tests.fuzz.program import (
    FLOATS,
    INTS,
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
    StaticRange,
    Stmt,
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
    operand_dtypes,
    promote,
    reduce_dtype,
    standalone,
    unary_dtype,
    weak,
)
from tilekit.ir.dtypes import DType

PyVal = bool | int | float
Value = R.V | PyVal


class Rejected(Exception):
    """tilekit must refuse this program while tracing (a literal that does not fit its
    type, an in-place update that changes a type): the harness expects a TraceError."""


class _Return(Exception):
    pass


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


@dataclass
class Memory:
    """One tensor as the reference sees it: the view the kernel gets, and error bounds of
    the same shape (outputs: 0 where the expected value is exact)."""

    view: np.ndarray
    err: np.ndarray
    dtype: DType
    offsets: dict[int, tuple[int, ...]] | None = None  # element offset -> index, built lazily

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s // self.view.itemsize for s in self.view.strides)

    def index_of(self, offset: int) -> tuple[int, ...] | None:
        if self.offsets is None:
            grid = np.indices(self.view.shape).reshape(self.view.ndim, -1).T
            self.offsets = {int(sum(int(i) * s for i, s in zip(idx, self.strides))): tuple(
                int(i) for i in idx) for idx in grid}
        return self.offsets.get(offset)


def _py_kind(x: PyVal) -> Py:
    return Py.BOOL if isinstance(x, bool) else Py.INT if isinstance(x, int) else Py.FLOAT


def elem_of(x: Value) -> DType | Py:
    return x.dtype if isinstance(x, R.V) else _py_kind(x)


def assigned_names(body: tuple[Stmt, ...]) -> set[str]:
    """Every name a block binds, at any depth (loop variables included)."""
    out: set[str] = set()
    for s in body:
        if isinstance(s, (Assign, AugAssign)):
            out.add(s.name)
        elif isinstance(s, Range):
            out.add(s.var)
            out |= assigned_names(s.body)
        elif isinstance(s, StaticRange):
            out.add(s.var)
            out |= assigned_names(s.body)
        elif isinstance(s, When):
            out |= assigned_names(s.body)
    return out


class Evaluator:
    """Runs one program instance; ``memory`` is shared by all instances of a launch."""

    def __init__(self, prog: Program, memory: dict[str, Memory],
                 scalars: dict[str, R.V], pid: tuple[int, int, int]) -> None:
        self.prog = prog
        self.memory = memory
        self.pid = pid
        self.env: dict[str, Value] = dict(scalars)
        self.types = dict(prog.var_types)
        self.steps = 0

    # --- values ----------------------------------------------------------------------------

    def tile(self, x: Value, like: DType | None = None) -> R.V:
        """``semantics.to_tile``: Python numbers become constants, weakly typed after
        ``like`` when given, else standing alone."""
        if isinstance(x, R.V):
            return x
        kind = _py_kind(x)
        d = weak(like, kind) if like is not None else standalone(kind, x)
        return self.constant(x, d)

    def constant(self, x: PyVal, d: DType) -> R.V:
        if not R.fits(x, d):
            raise Rejected(f"the constant {x!r} does not fit {d}")
        return R.V.exact(d, R.py_to(x, d))

    def operands(self, *xs: Value) -> list[R.V]:
        elems = [elem_of(x) for x in xs]
        dts = operand_dtypes(elems, list(xs))
        out = []
        for x, d in zip(xs, dts):
            out.append(x if isinstance(x, R.V) else self.constant(x, d))
        return out

    def as_type(self, x: Value, d: DType) -> R.V:
        """``semantics.cast``: a Python number becomes a constant of ``d`` (it must fit);
        a tile is converted."""
        return self.constant(x, d) if not isinstance(x, R.V) else self.to(x, d)

    @staticmethod
    def to(x: R.V, d: DType) -> R.V:
        return x if x.dtype is d else R.cast(x, d)

    # --- expressions -----------------------------------------------------------------------

    def ev(self, e: Expr) -> Value:
        v = self._ev(e)
        self._check_type(e, v)
        return v

    def _check_type(self, e: Expr, v: Value) -> None:
        got = Ty(elem_of(v), v.shape if isinstance(v, R.V) else ())
        if got != e.ty:
            raise AssertionError(f"reference computed {got} for {e!r}, generator said {e.ty}")

    def _ev(self, e: Expr) -> Value:  # noqa: C901  (one case per node)
        if isinstance(e, Name):
            if e.id in self.env:
                return self.env[e.id]
            ty = self.types[e.id]
            if not self.prog.control_flow or ty.is_py:
                raise R.Unreliable(f"`{e.id}` read before it is bound")
            return R.V.exact(ty.dtype, np.zeros(ty.shape, R.np_type(ty.dtype)))
        if isinstance(e, Lit):
            return e.value
        if isinstance(e, ProgramId):
            return R.V.exact(DType.INT32, np.asarray(self.pid[e.axis], dtype=np.int32))
        if isinstance(e, Dim):
            mem = self.memory[e.tensor]
            n = mem.view.shape[e.axis] if e.what == "shape" else mem.strides[e.axis]
            return R.V.exact(DType.INT32, np.asarray(n, dtype=np.int32))
        if isinstance(e, Arange):
            return R.V.exact(DType.INT32, np.arange(e.n, dtype=np.int32))
        if isinstance(e, Full):
            c = self.constant(e.value, e.dtype)
            return c.broadcast(e.shape)
        if isinstance(e, Bin):
            return self.binary(e.op, self.ev(e.a), self.ev(e.b))
        if isinstance(e, Un):
            return self.unary(e.op, self.ev(e.a))
        if isinstance(e, Cast):
            return self.as_type(self.ev(e.a), e.dtype)
        if isinstance(e, Bitcast):
            x = self.tile(self.ev(e.a))
            return x if x.dtype is e.dtype else R.bitcast(x, e.dtype)
        if isinstance(e, Where):
            c = self.tile(self.ev(e.cond))
            a, b = self.operands(self.ev(e.a), self.ev(e.b))
            d = promote(a.dtype, b.dtype)
            shape = broadcast(broadcast(c.shape, a.shape), b.shape)
            return R.where(c.broadcast(shape), self.to(a, d).broadcast(shape),
                           self.to(b, d).broadcast(shape))
        if isinstance(e, Fma):
            a, b, c = self.operands(self.ev(e.a), self.ev(e.b), self.ev(e.c))
            d = promote(promote(a.dtype, b.dtype), c.dtype)
            if d not in FLOATS:
                d = DType.FLOAT32
            shape = broadcast(broadcast(a.shape, b.shape), c.shape)
            return R.fma(*(self.to(x, d).broadcast(shape) for x in (a, b, c)))
        if isinstance(e, Reduce):
            return self.reduce(e.kind, self.tile(self.ev(e.a)), e.axis, e.keepdims)
        if isinstance(e, Cumsum):
            x = self.tile(self.ev(e.a))
            return R.cumsum(self.to(x, cumsum_dtype(x.dtype)), e.axis)
        if isinstance(e, NewAxis):
            x = self.tile(self.ev(e.a))
            return R.V(x.dtype, np.expand_dims(x.v, e.axis), np.expand_dims(x.e, e.axis))
        if isinstance(e, Transpose):
            x = self.tile(self.ev(e.a))
            return R.V(x.dtype, x.v.T, x.e.T)
        if isinstance(e, BroadcastTo):
            x = self.tile(self.ev(e.a))
            broadcast(x.shape, e.shape)
            return x.broadcast(e.shape)
        if isinstance(e, Dot):
            a, b = self.tile(self.ev(e.a)), self.tile(self.ev(e.b))
            acc = self.tile(self.ev(e.acc)) if e.acc is not None else None
            opd, accd = dot_dtypes(a.dtype, b.dtype, acc.dtype if acc is not None else None)
            shape = (a.shape[0], b.shape[1])
            if acc is None:
                acc = R.V.exact(accd, np.zeros(shape, R.np_type(accd)))
            return R.dot(self.to(a, opd), self.to(b, opd), acc)
        if isinstance(e, TileLoad):
            return self.tile_load(e)
        if isinstance(e, MaskedLoad):
            return self.masked_load(e)
        raise AssertionError(f"unknown expression {e!r}")

    def binary(self, op: str, x: Value, y: Value) -> Value:
        if not isinstance(x, R.V) and not isinstance(y, R.V):
            return _python_binary(op, x, y)
        a, b = self.operands(x, y)
        opd, _ = binary_dtype(op, a.dtype, b.dtype)
        shape = broadcast(a.shape, b.shape)
        try:
            return R.binary(op, self.to(a, opd).broadcast(shape), self.to(b, opd).broadcast(shape))
        except ZeroDivisionError as exc:
            raise R.Unreliable(str(exc)) from None

    def unary(self, op: str, x: Value) -> Value:
        if not isinstance(x, R.V) and op == "neg":
            return -x
        if op == "pynot":
            if isinstance(x, R.V):
                raise Rejected("Python `not` of a runtime value")
            return not x
        a = self.tile(x)
        opd, resd = unary_dtype(op, a.dtype)
        if op in ("floor", "ceil") and a.dtype not in FLOATS:
            return a
        if op == "isnan" and a.dtype not in FLOATS:
            return R.V.exact(DType.BOOL, np.zeros(a.shape, dtype=bool))
        if op == "abs" and a.dtype in INTS and a.dtype.name.startswith("UINT"):
            return a
        return R.unary(op, self.to(a, opd))

    def reduce(self, kind: str, x: R.V, axis: int | None, keepdims: bool) -> R.V:
        opd, _ = reduce_dtype(kind, x.dtype)
        if kind in ("sum", "prod"):
            x = self.to(x, opd)
        elif kind in ("argmax", "argmin") and x.dtype is DType.BOOL:
            x = self.to(x, DType.INT32)
        if x.v.ndim == 0:
            return x
        if axis is None:
            flat = R.V(x.dtype, x.v.reshape(-1), x.e.reshape(-1))
            out = R.reduce(kind, flat, 0)
            if keepdims:
                out = R.V(out.dtype, out.v.reshape((1,) * x.v.ndim),
                          out.e.reshape((1,) * x.v.ndim))
            return out
        out = R.reduce(kind, x, axis)
        if keepdims:
            out = R.V(out.dtype, np.expand_dims(out.v, axis), np.expand_dims(out.e, axis))
        return out

    # --- memory ------------------------------------------------------------------------------

    def _coords(self, index: tuple[Expr, ...]) -> list[int]:
        tiles = [self.tile(self.ev(i)) for i in index]
        common = tiles[0].dtype
        for t in tiles[1:]:
            common = promote(common, t.dtype)
        return [int(R.ints_of(self.to(t, common))) for t in tiles]

    def _box(self, mem: Memory, index: tuple[Expr, ...], shape: tuple[int, ...]
             ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """Each element's tensor index in a tile view, and whether it is inside."""
        coords = self._coords(index)
        grids = np.indices(shape, dtype=np.int64)
        idx = tuple(g + c * n for g, c, n in zip(grids, coords, shape))
        inside = np.ones(shape, dtype=bool)
        for d, i in enumerate(idx):
            inside &= (i >= 0) & (i < mem.view.shape[d])
        return idx, inside

    def tile_load(self, e: TileLoad) -> R.V:
        mem = self.memory[e.tensor]
        other = 0 if e.other is None else e.other
        if not R.fits(other, mem.dtype):
            raise Rejected(f"padding {other!r} does not fit {mem.dtype}")
        pad = R.py_to(other, mem.dtype)
        idx, inside = self._box(mem, e.index, e.shape)
        out = np.full(e.shape, pad, dtype=R.np_type(mem.dtype))
        safe = tuple(np.where(inside, i, 0) for i in idx)
        out[inside] = mem.view[safe][inside]
        return R.V.exact(mem.dtype, out)

    def _positions(self, mem: Memory, offsets: R.V, active: np.ndarray) -> list:
        offs = R.ints_of(offsets)
        positions = []
        for off, on in zip(offs.ravel(), active.ravel()):
            if not on:
                positions.append(None)
                continue
            where = mem.index_of(int(off))
            if where is None:
                raise R.Unreliable(f"offset {off} outside the tensor")
            positions.append(where)
        return positions

    def _access(self, offsets: Expr, mask: Expr | None) -> tuple[R.V, R.V | None]:
        offs = self.tile(self.ev(offsets))
        if offs.dtype not in INTS:
            raise AssertionError("offsets must be integers")
        if mask is None:
            return offs, None
        m = self.tile(self.ev(mask))
        shape = broadcast(offs.shape, m.shape)
        return offs.broadcast(shape), m.broadcast(shape)

    def masked_load(self, e: MaskedLoad) -> R.V:
        mem = self.memory[e.tensor]
        offs, m = self._access(e.offsets, e.mask)
        if m is not None and np.any(m.e > 0):
            raise R.Unreliable("a load mask computed from approximate values")
        active = np.ones(offs.shape, dtype=bool) if m is None else np.asarray(m.v, dtype=bool)
        if e.other is not None:
            other = self.as_type(e.other, mem.dtype)
            out = np.array(np.broadcast_to(other.v, offs.shape), dtype=R.np_type(mem.dtype))
        else:
            out = np.zeros(offs.shape, dtype=R.np_type(mem.dtype))
        for flat, where in enumerate(self._positions(mem, offs, active)):
            if where is not None:
                out.reshape(-1)[flat] = mem.view[where]
        return R.V.exact(mem.dtype, out)

    def _write(self, mem: Memory, where: tuple[int, ...], value: R.V, flat: int) -> None:
        mem.view[where] = value.v.reshape(-1)[flat]
        mem.err[where] = value.e.reshape(-1)[flat]

    def tile_store(self, s: TileStore) -> None:
        mem = self.memory[s.tensor]
        v = self.as_type(self.ev(s.value), mem.dtype)
        if broadcast(v.shape, s.shape) != s.shape:
            raise AssertionError("stored value does not fit the tile")
        v = v.broadcast(s.shape)
        idx, inside = self._box(mem, s.index, s.shape)
        for flat, pos in enumerate(zip(*(i.ravel() for i in idx))):
            if inside.reshape(-1)[flat]:
                self._write(mem, tuple(int(p) for p in pos), v, flat)

    def masked_store(self, s: MaskedStore) -> None:
        mem = self.memory[s.tensor]
        offs, m = self._access(s.offsets, s.mask)
        v = self.as_type(self.ev(s.value), mem.dtype)
        shape = broadcast(offs.shape, v.shape)
        offs = offs.broadcast(shape)
        m = m.broadcast(shape) if m is not None else None
        if broadcast(shape, v.shape) != shape:
            raise AssertionError("stored value does not fit the offsets")
        v = v.broadcast(shape)
        unsure = np.zeros(shape, dtype=bool) if m is None else (m.e > 0)
        active = np.ones(shape, dtype=bool) if m is None else np.asarray(m.v, dtype=bool)
        positions = self._positions(mem, offs, active | unsure)
        for flat, where in enumerate(positions):
            if where is None:
                continue
            if unsure.reshape(-1)[flat]:
                mem.err[where] = np.inf  # written or not: unknown
                if active.reshape(-1)[flat]:
                    mem.view[where] = v.v.reshape(-1)[flat]
            else:
                self._write(mem, where, v, flat)

    # --- statements --------------------------------------------------------------------------

    def run(self, body: tuple[Stmt, ...]) -> None:
        for s in body:
            self.stmt(s)

    def _carry_numbers(self, body: tuple[Stmt, ...]) -> dict[str, DType]:
        """Python numbers a loop's body rebinds become runtime scalars before the loop (and
        stay of that type: a number the body leaves in them is carried as a constant)."""
        carried: dict[str, DType] = {}
        if not self.prog.control_flow:
            return carried
        for name in assigned_names(body):
            x = self.env.get(name)
            if x is not None and not isinstance(x, R.V):
                d = standalone(_py_kind(x), x)
                self.env[name] = R.V.exact(d, R.py_to(x, d))
                carried[name] = d
            elif isinstance(x, R.V) and x.shape == ():
                carried[name] = x.dtype
        return carried

    def _settle(self, carried: dict[str, DType]) -> None:
        """At the end of an iteration, numbers left in carried names are constants of the
        carried type."""
        for name, d in carried.items():
            x = self.env.get(name)
            if x is not None and not isinstance(x, R.V):
                self.env[name] = self.constant(x, d)

    def _scalar_bool(self, x: Value) -> bool:
        c = self.tile(x)
        if c.v.shape != () or c.dtype is not DType.BOOL:
            raise AssertionError("a condition must be a bool scalar")
        if np.any(c.e > 0):
            raise R.Unreliable("a branch on an approximate value")
        return bool(c.v)

    def stmt(self, s: Stmt) -> None:  # noqa: C901
        self.steps += 1
        if self.steps > 20000:
            raise R.Unreliable("too many steps")
        if isinstance(s, Assign):
            self.env[s.name] = self.ev(s.value)
        elif isinstance(s, AugAssign):
            old = self.env.get(s.name)
            if old is None:
                old = self.ev(Name(s.name, self.types[s.name]))
            new = self.binary(s.op, old, self.ev(s.value))
            if isinstance(old, R.V) and isinstance(new, R.V) and \
                    (new.dtype is not old.dtype or new.shape != old.shape):
                raise Rejected(f"in-place {s.op} changes {s.name}")
            self.env[s.name] = new
        elif isinstance(s, TileStore):
            self.tile_store(s)
        elif isinstance(s, MaskedStore):
            self.masked_store(s)
        elif isinstance(s, Range):
            bounds = [self.ev(x) for x in (s.lo, s.hi, s.step)]  # before the loop converts
            carried = self._carry_numbers(s.body)
            d = DType.INT32
            for b in bounds:
                if isinstance(b, R.V):
                    d = promote(d, b.dtype)
                elif not -(2**31) <= b < 2**31:
                    d = promote(d, DType.INT64)
            lo, hi, step = (int(R.ints_of(self.to(self.tile(b), d))) for b in bounds)
            if step == 0:
                raise R.Unreliable("zero step")
            i = lo
            while (step > 0 and i < hi) or (step < 0 and i > hi):
                self.env[s.var] = R.V.exact(d, np.asarray(i, dtype=R.np_type(d)))
                try:
                    self.run(s.body)
                except _Break:
                    self._settle(carried)
                    break
                except _Continue:
                    pass
                self._settle(carried)
                i += step
        elif isinstance(s, StaticRange):
            for i in range(s.n):
                self.env[s.var] = i
                self.run(s.body)
        elif isinstance(s, When):
            if self._scalar_bool(self.ev(s.cond)):
                self.run(s.body)
            for name, ty in s.numbers:  # the runtime choice of the number's two values
                x = self.env[name]
                self.env[name] = x if isinstance(x, R.V) else self.constant(x, ty.dtype)
        elif isinstance(s, Return):
            raise _Return()
        elif isinstance(s, Break):
            raise _Break()
        elif isinstance(s, Continue):
            raise _Continue()
        else:
            raise AssertionError(f"unknown statement {s!r}")


def _python_binary(op: str, x: PyVal, y: PyVal) -> PyVal:
    fn: dict[str, Callable[[PyVal, PyVal], PyVal]] = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    }
    if op not in fn:
        raise R.Unreliable(f"Python {op} of two numbers")
    return fn[op](x, y)


def scalar_value(spec_value: PyVal, dtype: DType | None) -> R.V:
    """A runtime scalar argument as the launch converts it."""
    if dtype is None or (dtype in INTS and not isinstance(spec_value, bool)):
        dtype = standalone(_py_kind(spec_value), spec_value)  # numpy ints too
    return R.V.exact(dtype, R.py_to(spec_value, dtype))


def evaluate(prog: Program, memory: dict[str, Memory]) -> None:
    """Run every program instance of the grid, writing to ``memory`` (outputs' views and
    error bounds). Raises ``Rejected`` or ``refnum.Unreliable``."""
    scalars = {s.name: scalar_value(s.value, s.dtype) for s in prog.scalars}
    grid = tuple(prog.grid) + (1,) * (3 - len(prog.grid))
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                ev = Evaluator(prog, memory, scalars, (x, y, z))
                try:
                    ev.run(prog.body)
                except _Return:
                    pass
                except (_Break, _Continue):
                    raise AssertionError("break or continue outside a tk.range") from None
