"""A program as the source text of a tilekit kernel (a module with one ``@tk.kernel``).

The text is written to a real file and imported (``harness.load_kernel``), so tilekit reads
it with ``inspect`` like any user's kernel and its errors name the generated line.
"""

from __future__ import annotations

import math

from tests.fuzz.program import (
    SYMBOL,
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
    Range,
    Reduce,
    Return,
    StaticRange,
    Stmt,
    TileLoad,
    TileStore,
    Transpose,
    Un,
    When,
    Where,
)
from tilekit.ir.dtypes import DType

KERNEL = "fuzz_kernel"


def dtype(d: DType) -> str:
    return f"tk.{d.long}" if d is not DType.BOOL else "tk.bool_"


def number(x: bool | int | float) -> str:
    if isinstance(x, bool):
        return repr(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "math.nan"
        if math.isinf(x):
            return "math.inf" if x > 0 else "(-math.inf)"
        text = repr(x)
    else:
        text = repr(x)
    return f"({text})" if text.startswith("-") else text


def shape(s: tuple[int, ...]) -> str:
    return f"({s[0]},)" if len(s) == 1 else "(" + ", ".join(map(str, s)) + ")"


def expr(e: Expr) -> str:  # noqa: C901  (one case per node)
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Lit):
        return number(e.value)
    if isinstance(e, ProgramId):
        return f"tk.program_id({e.axis})"
    if isinstance(e, Dim):
        return f"{e.tensor}.shape[{e.axis}]" if e.what == "shape" else \
            f"{e.tensor}.stride({e.axis})"
    if isinstance(e, Arange):
        return f"tk.arange({e.n})" if e.n % 2 else f"tk.arange(0, {e.n})"
    if isinstance(e, Full):
        return f"tk.full({shape(e.shape)}, {number(e.value)}, {dtype(e.dtype)})"
    if isinstance(e, Bin):
        if e.spelling == "fn" or e.op in ("maximum", "minimum"):
            return f"tk.{e.op}({expr(e.a)}, {expr(e.b)})"
        return f"({expr(e.a)} {SYMBOL[e.op]} {expr(e.b)})"
    if isinstance(e, Un):
        if e.op == "neg":
            return f"(-{expr(e.a)})"
        if e.op == "not":
            return f"(~{expr(e.a)})"
        if e.op == "pynot":
            return f"(not {expr(e.a)})"
        if e.op == "abs":
            return f"abs({expr(e.a)})"
        return f"tk.{e.op}({expr(e.a)})"
    if isinstance(e, Cast):
        return f"{expr(e.a)}.to({dtype(e.dtype)})"
    if isinstance(e, Bitcast):
        return f"{expr(e.a)}.bitcast({dtype(e.dtype)})"
    if isinstance(e, Where):
        return f"tk.where({expr(e.cond)}, {expr(e.a)}, {expr(e.b)})"
    if isinstance(e, Fma):
        return f"tk.fma({expr(e.a)}, {expr(e.b)}, {expr(e.c)})"
    if isinstance(e, Reduce):
        keep = ", keepdims=True" if e.keepdims else ""
        if e.method and e.axis is not None and e.kind != "prod":
            return f"{expr(e.a)}.{e.kind}({e.axis}{keep})"
        axis = f", axis={e.axis}" if e.axis is not None else ""
        return f"tk.{e.kind}({expr(e.a)}{axis}{keep})"
    if isinstance(e, Cumsum):
        return f"tk.cumsum({expr(e.a)}, axis={e.axis})"
    if isinstance(e, NewAxis):
        return f"{expr(e.a)}[:, None]" if e.axis == 1 else f"{expr(e.a)}[None, :]"
    if isinstance(e, Transpose):
        return f"{expr(e.a)}.T"
    if isinstance(e, BroadcastTo):
        return f"tk.broadcast_to({expr(e.a)}, {shape(e.shape)})"
    if isinstance(e, Dot):
        acc = f", {expr(e.acc)}" if e.acc is not None else ""
        return f"tk.dot({expr(e.a)}, {expr(e.b)}{acc})"
    if isinstance(e, TileLoad):
        index = "(" + ", ".join(expr(i) for i in e.index) + ("," if len(e.index) == 1 else "") \
            + ")"
        other = number(e.other) if e.other is not None else ""
        return f"{e.tensor}.tile({shape(e.shape)}, {index}).load({other})"
    if isinstance(e, MaskedLoad):
        mask = f", mask={expr(e.mask)}" if e.mask is not None else ""
        other = f", other={number(e.other)}" if e.other is not None else ""
        return f"tk.load({e.tensor}, {expr(e.offsets)}{mask}{other})"
    raise AssertionError(f"cannot render {e!r}")


def stmts(body: tuple[Stmt, ...], indent: str) -> list[str]:
    out: list[str] = []
    for s in body:
        out += stmt(s, indent)
    return out or [indent + "pass"]


def stmt(s: Stmt, indent: str) -> list[str]:  # noqa: C901
    inner = indent + "    "
    if isinstance(s, Assign):
        return [f"{indent}{s.name} = {expr(s.value)}"]
    if isinstance(s, AugAssign):
        return [f"{indent}{s.name} {SYMBOL[s.op]}= {expr(s.value)}"]
    if isinstance(s, TileStore):
        index = "(" + ", ".join(expr(i) for i in s.index) + ("," if len(s.index) == 1 else "") \
            + ")"
        return [f"{indent}{s.tensor}.tile({shape(s.shape)}, {index}).store({expr(s.value)})"]
    if isinstance(s, MaskedStore):
        mask = f", mask={expr(s.mask)}" if s.mask is not None else ""
        return [f"{indent}tk.store({s.tensor}, {expr(s.offsets)}, {expr(s.value)}{mask})"]
    if isinstance(s, Range):
        return [f"{indent}for {s.var} in tk.range({expr(s.lo)}, {expr(s.hi)}, {expr(s.step)}):"] \
            + stmts(s.body, inner)
    if isinstance(s, StaticRange):
        return [f"{indent}for {s.var} in tk.static_range({s.n}):"] + stmts(s.body, inner)
    if isinstance(s, When):
        return [f"{indent}with tk.when({expr(s.cond)}):"] + stmts(s.body, inner)
    if isinstance(s, Return):
        return [f"{indent}return"]
    if isinstance(s, Break):
        return [f"{indent}break"]
    if isinstance(s, Continue):
        return [f"{indent}continue"]
    raise AssertionError(f"cannot render {s!r}")


def source(prog: Program, header: str = "") -> str:
    params = [t.name for t in prog.tensors] + [s.name for s in prog.scalars]
    lines = [f"# {line}" for line in header.splitlines()]
    lines += ["import math", "", "import tilekit as tk", "", "",
              "@tk.kernel", f"def {KERNEL}({', '.join(params)}):"]
    lines += stmts(prog.body, "    ")
    return "\n".join(lines) + "\n"
