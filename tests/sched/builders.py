"""Hand-built pipeline kernels for the schedule tests, and how to run them.

The kernels are built with ``tilekit.ir.builder.Builder`` (the ``tk.pipeline`` surface is
written concurrently); every op is at a line of this file, so error messages can be checked
for the line they name.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilekit.errors import SourceLoc
from tilekit.ir import Block, Builder, DType, Function, Module, Region, TensorType, TileType
from tilekit.ir.ops.asynchronous import StreamSpec
from tilekit.rt import interpreter
from tilekit.rt.arrays import to_host
from tilekit.rt.memory import TensorBinding

HERE = __file__


def here() -> SourceLoc:
    """The caller's line in this file (the pipeline op's 'user line')."""
    frame = inspect.currentframe().f_back  # type: ignore[union-attr]
    return SourceLoc(HERE, frame.f_lineno, 4)  # type: ignore[union-attr]


@dataclass
class Kernel:
    module: Module
    pipeline_line: int

    @property
    def fn(self) -> Function:
        return self.module.kernel


def _const(b: Builder, value: Any, dtype: DType, shape: tuple[int, ...] = ()) -> Any:
    return b.create("constant", attrs={"value": value, "dtype": dtype, "shape": shape}).result


def _facts(fn: Function, aligned16: Sequence[str], unit_inner: Sequence[str],
           strides16: Sequence[str]) -> None:
    fn.aligned16 = frozenset(aligned16)  # type: ignore[attr-defined]
    fn.unit_inner = frozenset(unit_inner)  # type: ignore[attr-defined]
    fn.strides16 = frozenset(strides16)  # type: ignore[attr-defined]


def row_sum(block: int = 8, dtype: DType = DType.FLOAT32, stages: int = 3,
            engine: str | None = None, roles: str | None = None, padding: float = 0,
            facts: tuple[Sequence[str], ...] = (("X",), ("X",), ("X",))) -> Kernel:
    """Y[r, :] = sum over the row's tiles of X (tiles (1, block) along dim 1), plus the
    iteration count times the tile index: every carried value, the index ``i`` and the
    stream's tiles reach the result. ``n`` (the trip count) is a runtime argument."""
    fn = Function("row_sum", Region([Block()]), {}, None)
    X = fn.entry.add_arg(TensorType(2, dtype), "X")
    Y = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "Y")
    n = fn.entry.add_arg(TileType((), DType.INT32), "n")
    b = Builder(fn.entry)
    r = b.create("program_id", attrs={"axis": 0}).result
    zero = _const(b, 0, DType.INT32)
    acc0 = _const(b, 0.0, DType.FLOAT32, (1, block))
    cnt0 = _const(b, 0, DType.INT32)
    tile_t = TileType((1, block), dtype)
    body = Block([TileType((), DType.INT32), tile_t, acc0.type, cnt0.type])
    i, x, acc, cnt = body.args
    with b.at_end_of(body):
        xf = b.create("cast", {"x": x}, {"dtype": DType.FLOAT32}).result if dtype is not \
            DType.FLOAT32 else x
        fi = b.create("cast", {"x": i}, {"dtype": DType.FLOAT32}).result
        fib = b.create("broadcast", {"x": fi}, {"shape": (1, block)}).result
        # acc += x * (i + 1): the order of tiles matters
        one = _const(b, 1.0, DType.FLOAT32, (1, block))
        w = b.create("add", {"lhs": fib, "rhs": one}).result
        acc2 = b.create("add", {"lhs": acc, "rhs": b.create("mul", {"lhs": xf, "rhs": w}).result
                                }).result
        cnt2 = b.create("add", {"lhs": cnt, "rhs": _const(b, 1, DType.INT32)}).result
        b.create("yield", {"values": [acc2, cnt2]})
    attrs = {"streams": (StreamSpec((1, block), 1, padding),), "stages": stages,
             "engine": engine, "roles": roles}
    loc = here()
    p = b.create("pipeline", {"count": n, "tensors": [X], "index": [r, zero],
                              "inits": [acc0, cnt0]}, attrs, [Region([body])], loc=loc)
    acc_out, cnt_out = p.results
    total = b.create("cast", {"x": cnt_out}, {"dtype": DType.FLOAT32}).result
    tb = b.create("broadcast", {"x": total}, {"shape": (1, block)}).result
    res = b.create("add", {"lhs": acc_out, "rhs": tb}).result
    b.create("tile_store", {"tensor": Y, "index": [r, zero], "value": res},
             {"shape": (1, block)})
    _facts(fn, *facts)
    return Kernel(Module([fn]), loc.line)


def row_sum_ref(x: np.ndarray, n: int, block: int, padding: float = 0) -> np.ndarray:
    rows, cols = x.shape
    padded = np.full((rows, max(n * block, cols)), padding, dtype=np.float64)
    padded[:, :cols] = x.astype(np.float64)
    out = np.zeros((rows, block))
    for i in range(n):
        out += padded[:, i * block:(i + 1) * block] * (i + 1)
    return out + n


def mixed(block: int = 8, stages: int = 2, roles: str | None = None,
          engine: str | None = None) -> Kernel:
    """Two streams: A's row ``r`` in (1, block) tiles along dim 1 (float32) and B's column
    ``c`` in (block, 1) tiles along dim 0 (float16, reshaped to a row); Y[r, c-th tile] =
    sum_i A_i * B_i. A is TMA-friendly, B's 2-byte tile rows admit neither TMA nor
    cp.async: a ``full`` phase expects a TMA arrival and a plain one."""
    fn = Function("mixed", Region([Block()]), {}, None)
    A = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "A")
    B = fn.entry.add_arg(TensorType(2, DType.FLOAT16), "B")
    Y = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "Y")
    n = fn.entry.add_arg(TileType((), DType.INT32), "n")
    b = Builder(fn.entry)
    r = b.create("program_id", attrs={"axis": 0}).result
    c = b.create("program_id", attrs={"axis": 1}).result
    zero = _const(b, 0, DType.INT32)
    acc0 = _const(b, 0.0, DType.FLOAT32, (1, block))
    body = Block([TileType((), DType.INT32), TileType((1, block), DType.FLOAT32),
                  TileType((block, 1), DType.FLOAT16), acc0.type])
    _, a, bt, acc = body.args
    with b.at_end_of(body):
        bf = b.create("cast", {"x": bt}, {"dtype": DType.FLOAT32}).result
        brow = b.create("reshape", {"x": bf}, {"shape": (1, block)}).result
        prod = b.create("mul", {"lhs": a, "rhs": brow}).result
        b.create("yield", {"values": [b.create("add", {"lhs": acc, "rhs": prod}).result]})
    attrs = {"streams": (StreamSpec((1, block), 1), StreamSpec((block, 1), 0)),
             "stages": stages, "engine": engine, "roles": roles}
    loc = here()
    p = b.create("pipeline", {"count": n, "tensors": [A, B], "index": [r, zero, zero, c],
                              "inits": [acc0]}, attrs, [Region([body])], loc=loc)
    b.create("tile_store", {"tensor": Y, "index": [r, c], "value": p.result},
             {"shape": (1, block)})
    return Kernel(Module([fn]), loc.line)


def mixed_ref(a: np.ndarray, bm: np.ndarray, n: int, block: int) -> np.ndarray:
    rows, cols = a.shape[0], bm.shape[1]
    k = max(n * block, a.shape[1], bm.shape[0])
    pa = np.zeros((rows, k))
    pa[:, :a.shape[1]] = a
    pb = np.zeros((k, cols))
    pb[:bm.shape[0]] = bm.astype(np.float64)
    out = np.zeros((rows, cols * block))
    for c in range(cols):
        for i in range(n):
            out[:, c * block:(c + 1) * block] += pa[:, i * block:(i + 1) * block] * \
                pb[i * block:(i + 1) * block, c]
    return out


def sequential(block: int = 8, stages: tuple[int, int] = (2, 3), nested: bool = False
               ) -> Kernel:
    """Two pipelines over X's row: the second one after the first (they share shared
    memory), or inside its body (``nested``: they may not). Y = sum of X's tiles + the
    second pipeline's sum (scaled by 2)."""
    fn = Function("sequential", Region([Block()]), {}, None)
    X = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "X")
    Y = fn.entry.add_arg(TensorType(2, DType.FLOAT32), "Y")
    n = fn.entry.add_arg(TileType((), DType.INT32), "n")
    b = Builder(fn.entry)
    r = b.create("program_id", attrs={"axis": 0}).result
    zero = _const(b, 0, DType.INT32)
    acc0 = _const(b, 0.0, DType.FLOAT32, (1, block))
    tile_t = TileType((1, block), DType.FLOAT32)

    def summing(acc_in, scale: float, stage_count: int, inner=None):
        body = Block([TileType((), DType.INT32), tile_t, tile_t])
        _, x, acc = body.args
        with b.at_end_of(body):
            s = _const(b, scale, DType.FLOAT32, (1, block))
            new = b.create("add", {"lhs": acc, "rhs": b.create("mul", {"lhs": x, "rhs": s}
                                                               ).result}).result
            if inner is not None:
                new = inner(new)
            b.create("yield", {"values": [new]})
        attrs = {"streams": (StreamSpec((1, block), 1),), "stages": stage_count}
        loc = here()
        return b.create("pipeline", {"count": n, "tensors": [X], "index": [r, zero],
                                     "inits": [acc_in]}, attrs, [Region([body])], loc=loc)

    if nested:
        first = summing(acc0, 1.0, stages[0],
                        inner=lambda acc: summing(acc, 2.0, stages[1]).result)
        out = first.result
    else:
        first = summing(acc0, 1.0, stages[0])
        out = summing(first.result, 2.0, stages[1]).result
    b.create("tile_store", {"tensor": Y, "index": [r, zero], "value": out},
             {"shape": (1, block)})
    return Kernel(Module([fn]), first.loc.line)


def facts_of(kernel: Kernel, **arrays: np.ndarray) -> Kernel:
    """Set the kernel's bucket facts from real arrays, as ``tilekit.lang.kernel`` does."""
    from tilekit.lang.kernel import stride_facts

    sets: tuple[set[str], set[str], set[str]] = (set(), set(), set())
    for name, arr in arrays.items():
        host = to_host(arr, name, None)
        unit, rows16 = stride_facts(host.shape, host.strides, arr.dtype.itemsize)
        for s, holds in zip(sets, (host.aligned16, unit, rows16)):
            if holds:
                s.add(name)
    _facts(kernel.fn, *sets)
    return kernel


def run(module: Module, grid: Sequence[int], **arrays: Any) -> None:
    """Run ``module`` on the interpreter with numpy arrays and Python ints."""
    fn = module.kernel
    args: dict[Any, Any] = {}
    for a in fn.args:
        v = arrays[a.name_hint]
        if isinstance(v, np.ndarray):
            args[a] = TensorBinding(a.name_hint, to_host(v, a.name_hint, None))
        else:
            args[a] = np.asarray(v, dtype=a.type.dtype.np)
    interpreter.run(fn, grid, args)
