"""The fuzzer's own representation of a kernel: expressions, statements, programs.

A program is data (frozen dataclasses), drawn by ``generate.py``, printed as a tilekit
kernel by ``render.py`` and evaluated without tilekit by ``reference.py``. Every
expression carries its static type (``Ty``), computed when the node is built by the
typing rules below, which restate the README's rules (``dtypes.promote``/``weak_promote``
and ``lang/semantics.py``) independently: the reference checks that the values it computes
have these types, so a disagreement between the rules and tilekit shows up as a mismatch,
not as a silently shared mistake.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tilekit.ir.dtypes import DType

Shape = tuple[int, ...]

FLOATS = (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64)
SIGNED = (DType.INT8, DType.INT16, DType.INT32, DType.INT64)
UNSIGNED = (DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)
INTS = SIGNED + UNSIGNED
ALL_DTYPES = (DType.BOOL,) + INTS + FLOATS


class Py(enum.Enum):
    """A Python number while tracing: weakly typed, folded by Python itself."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"


Elem = DType | Py


@dataclass(frozen=True)
class Ty:
    """A static type: an element type and a shape (``()`` for scalars and Python numbers)."""

    elem: Elem
    shape: Shape = ()

    @property
    def is_py(self) -> bool:
        return isinstance(self.elem, Py)

    @property
    def dtype(self) -> DType:
        assert isinstance(self.elem, DType), self
        return self.elem


def is_float(d: Elem) -> bool:
    return d in FLOATS or d is Py.FLOAT


def is_int(d: Elem) -> bool:
    """Integer element types (bool excluded)."""
    return d in INTS or d is Py.INT


def is_bool(d: Elem) -> bool:
    return d is DType.BOOL or d is Py.BOOL


def bits(d: DType) -> int:
    return d.bits


def int_range(d: DType) -> tuple[int, int]:
    if d is DType.BOOL:
        return 0, 1
    if d in UNSIGNED:
        return 0, 2 ** d.bits - 1
    return -(2 ** (d.bits - 1)), 2 ** (d.bits - 1) - 1


def _int_of(nbits: int, signed: bool) -> DType:
    return {(8, True): DType.INT8, (16, True): DType.INT16, (32, True): DType.INT32,
            (64, True): DType.INT64, (8, False): DType.UINT8, (16, False): DType.UINT16,
            (32, False): DType.UINT32, (64, False): DType.UINT64}[(nbits, signed)]


def promote(a: DType, b: DType) -> DType:
    """The README's promotion: bool < ints < floats; the wider float; f16 with bf16 is f32;
    mixed signedness takes the signed type of twice the unsigned width (up to int64)."""
    if a is b:
        return a
    if a is DType.BOOL:
        return b
    if b is DType.BOOL:
        return a
    if a in FLOATS or b in FLOATS:
        if a not in FLOATS:
            return b
        if b not in FLOATS:
            return a
        if {a, b} == {DType.FLOAT16, DType.BFLOAT16}:
            return DType.FLOAT32
        return a if a.bits > b.bits else b
    a_signed, b_signed = a in SIGNED, b in SIGNED
    if a_signed == b_signed:
        return a if a.bits > b.bits else b
    s, u = (a, b) if a_signed else (b, a)
    if s.bits > u.bits:
        return s
    return _int_of(min(64, 2 * u.bits), True)


def weak(tile: DType, py: Py) -> DType:
    """The type a Python number takes next to a tile of type ``tile``."""
    if py is Py.BOOL:
        return tile
    if py is Py.INT:
        return DType.INT32 if tile is DType.BOOL else tile
    return tile if tile in FLOATS else DType.FLOAT32


def standalone(py: Py, value: object) -> DType:
    """The type of a Python number on its own (a runtime argument, a `tk.where` of two
    numbers, a carried Python number)."""
    if py is Py.BOOL:
        return DType.BOOL
    if py is Py.INT:
        return DType.INT32 if -(2**31) <= int(value) < 2**31 else DType.INT64  # type: ignore
    return DType.FLOAT32


def operand_dtypes(elems: list[Elem], values: list[object] | None = None) -> list[DType]:
    """Python numbers typed weakly against the first tile operand (``semantics._operands``);
    with no tile at all, each number stands alone."""
    like = next((e for e in elems if isinstance(e, DType)), None)
    out = []
    for i, e in enumerate(elems):
        if isinstance(e, DType):
            out.append(e)
        elif like is not None:
            out.append(weak(like, e))
        else:
            out.append(standalone(e, values[i] if values else 0))
    return out


def broadcast(a: Shape, b: Shape) -> Shape:
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + a
    pb = (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


# --- operators -------------------------------------------------------------------------------

ARITH = ("add", "sub", "mul", "floordiv", "mod", "maximum", "minimum")
FLOAT_ONLY = ("div", "pow")
BITWISE = ("and", "or", "xor")
SHIFTS = ("shl", "shr")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
BINARY = ARITH + FLOAT_ONLY + BITWISE + SHIFTS + COMPARE

SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
          "pow": "**", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>",
          "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "erf", "tanh", "sigmoid", "sin", "cos",
        "floor", "ceil", "isnan")
UNARY = ("neg", "not", "abs") + MATH  # (and "pynot": Python's `not` of a Python bool)

REDUCE = ("sum", "max", "min", "prod", "argmax", "argmin")


def binary_dtype(op: str, a: DType, b: DType) -> tuple[DType, DType]:
    """``(operand type, result type)`` of a binary op on tiles of types ``a`` and ``b``;
    ValueError where tilekit rejects the operands."""
    d = promote(a, b)
    if op in FLOAT_ONLY and d not in FLOATS:
        d = DType.FLOAT32
    if op in ARITH and d is DType.BOOL:
        d = DType.INT32
    if op in BITWISE and d in FLOATS:
        raise ValueError(f"{op} of floats")
    if op in SHIFTS and d not in INTS:
        raise ValueError(f"{op} of {d}")
    return d, (DType.BOOL if op in COMPARE else d)


def unary_dtype(op: str, a: DType) -> tuple[DType, DType]:
    """``(operand type after the front end's casts, result type)``."""
    if op in MATH:
        if a not in FLOATS:
            if op in ("floor", "ceil"):
                return a, a
            if op == "isnan":
                return a, DType.BOOL
            return DType.FLOAT32, DType.FLOAT32
        return a, (DType.BOOL if op == "isnan" else a)
    if op in ("neg", "abs") and a is DType.BOOL:
        return DType.INT32, DType.INT32
    if op == "not" and a in FLOATS:
        raise ValueError("~ of a float")
    return a, a


def reduce_dtype(kind: str, a: DType) -> tuple[DType, DType]:
    """``(operand type after the front end's cast, result type)`` of a reduction."""
    if kind in ("sum", "prod") and (a is DType.BOOL or (a in INTS and a.bits < 32)):
        a = DType.UINT32 if a in UNSIGNED else DType.INT32
    if kind in ("argmax", "argmin"):
        return (DType.INT32 if a is DType.BOOL else a), DType.INT32
    return a, a


def cumsum_dtype(a: DType) -> DType:
    if a is DType.BOOL or (a in INTS and a.bits < 32):
        return DType.INT32
    return a


def dot_dtypes(a: DType, b: DType, acc: DType | None) -> tuple[DType, DType]:
    """``(operand type, accumulator type)``."""
    d = promote(a, b)
    if d is DType.BOOL:
        raise ValueError("dot of bool")
    if acc is None:
        acc = DType.FLOAT64 if d is DType.FLOAT64 else DType.FLOAT32 if d in FLOATS \
            else DType.INT32
    if (d in FLOATS) != (acc in FLOATS) or acc is DType.BOOL:
        raise ValueError(f"dot of {d} into {acc}")
    return d, acc


# --- expressions -----------------------------------------------------------------------------

class Expr:
    """Base of expression nodes; every node has ``ty``."""

    ty: Ty


@dataclass(frozen=True)
class Name(Expr):
    id: str
    ty: Ty


@dataclass(frozen=True)
class Lit(Expr):
    """A Python number in the source (``3``, ``-0.5``, ``True``, ``float('nan')``)."""

    value: bool | int | float
    ty: Ty


@dataclass(frozen=True)
class ProgramId(Expr):
    axis: int
    ty: Ty = Ty(DType.INT32)


@dataclass(frozen=True)
class Dim(Expr):
    """``X.shape[axis]`` or ``X.stride(axis)`` (int32 for the fuzzer's small tensors)."""

    tensor: str
    axis: int
    what: str = "shape"
    ty: Ty = Ty(DType.INT32)


@dataclass(frozen=True)
class Arange(Expr):
    n: int
    ty: Ty


@dataclass(frozen=True)
class Full(Expr):
    shape: Shape
    value: bool | int | float
    dtype: DType
    ty: Ty


@dataclass(frozen=True)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr
    ty: Ty
    spelling: str = "op"  # "op" (a + b) or "fn" (tk.maximum(a, b)); maximum/minimum always fn


@dataclass(frozen=True)
class Un(Expr):
    op: str
    a: Expr
    ty: Ty


@dataclass(frozen=True)
class Cast(Expr):
    a: Expr
    dtype: DType
    ty: Ty


@dataclass(frozen=True)
class Bitcast(Expr):
    a: Expr
    dtype: DType
    ty: Ty


@dataclass(frozen=True)
class Where(Expr):
    cond: Expr
    a: Expr
    b: Expr
    ty: Ty


@dataclass(frozen=True)
class Fma(Expr):
    a: Expr
    b: Expr
    c: Expr
    ty: Ty


@dataclass(frozen=True)
class Reduce(Expr):
    kind: str
    a: Expr
    axis: int | None
    keepdims: bool
    ty: Ty
    method: bool = False  # x.sum(axis) instead of tk.sum(x, axis)


@dataclass(frozen=True)
class Cumsum(Expr):
    a: Expr
    axis: int
    ty: Ty


@dataclass(frozen=True)
class NewAxis(Expr):
    """``a[:, None]`` (axis 1) or ``a[None, :]`` (axis 0) of a 1-D tile."""

    a: Expr
    axis: int
    ty: Ty


@dataclass(frozen=True)
class Transpose(Expr):
    a: Expr
    ty: Ty


@dataclass(frozen=True)
class BroadcastTo(Expr):
    a: Expr
    shape: Shape
    ty: Ty


@dataclass(frozen=True)
class Dot(Expr):
    a: Expr
    b: Expr
    acc: Expr | None
    ty: Ty


@dataclass(frozen=True)
class TileLoad(Expr):
    """``X.tile(shape, index).load(other)``."""

    tensor: str
    shape: Shape
    index: tuple[Expr, ...]
    other: bool | int | float | None
    ty: Ty


@dataclass(frozen=True)
class MaskedLoad(Expr):
    """``tk.load(X, offsets, mask=mask, other=other)``."""

    tensor: str
    offsets: Expr
    mask: Expr | None
    other: bool | int | float | None
    ty: Ty


# --- statements --------------------------------------------------------------------------------

class Stmt:
    pass


@dataclass(frozen=True)
class Assign(Stmt):
    name: str
    value: Expr


@dataclass(frozen=True)
class AugAssign(Stmt):
    name: str
    op: str
    value: Expr


@dataclass(frozen=True)
class TileStore(Stmt):
    tensor: str
    shape: Shape
    index: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class MaskedStore(Stmt):
    tensor: str
    offsets: Expr
    value: Expr
    mask: Expr | None


@dataclass(frozen=True)
class Range(Stmt):
    var: str
    lo: Expr
    hi: Expr
    step: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class StaticRange(Stmt):
    var: str
    n: int
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class When(Stmt):
    """``with tk.when(cond):``. ``numbers``: the Python numbers its body changes, with the
    type of the runtime value each becomes after it (the choice of its two values)."""

    cond: Expr
    body: tuple[Stmt, ...]
    numbers: tuple[tuple[str, Ty], ...] = ()


@dataclass(frozen=True)
class Return(Stmt):
    pass


@dataclass(frozen=True)
class Break(Stmt):
    pass


@dataclass(frozen=True)
class Continue(Stmt):
    pass


# --- programs ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorSpec:
    """A tensor parameter: ``view`` is how the array is cut from a larger one ("" for a
    contiguous array, "step" for every other element of the last axis, "T" for a
    transposed 2-D array)."""

    name: str
    dtype: DType
    shape: Shape
    output: bool
    view: str = ""


@dataclass(frozen=True)
class ScalarSpec:
    """A runtime scalar parameter: a Python number, or a numpy scalar of ``dtype``."""

    name: str
    value: bool | int | float
    dtype: DType | None  # None: passed as a Python number
    ty: Ty = field(default=Ty(DType.INT32))


@dataclass(frozen=True)
class Program:
    tensors: tuple[TensorSpec, ...]
    scalars: tuple[ScalarSpec, ...]
    grid: tuple[int, ...]
    body: tuple[Stmt, ...]
    var_types: tuple[tuple[str, Ty], ...]  # every name the body binds, with its type
    data_seed: int
    control_flow: bool  # early exits and carried Python numbers in use (their semantics)

    def tensor(self, name: str) -> TensorSpec:
        return next(t for t in self.tensors if t.name == name)
