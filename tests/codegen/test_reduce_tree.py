"""A thread's part of a reduction is a balanced tree, not a left fold (offline).

A row kernel holds its loads back while it reduces: with a left fold, a thread's 64
elements of a 4097-wide bf16 row were a chain of 64 dependent adds (about 256 cycles per
reduction, twice per layer norm row). The tree has the same number of adds and a chain of
log2(64) = 6. Measured here on the PTX: the longest chain of dependent ``add``/``max``
instructions before the first shuffle, for ragged and friendly widths, sums and maxima.
The values are checked against the interpreter, kernel by kernel, by the differential
tests (``tests/lang/test_differential.py``: reductions and arg-reductions of every kind,
ragged shapes, on the GPU leg); here, on the interpreter, that a sum stays within a
pairwise bound of a float64 reference.
"""

# ruff: noqa: N803, N806  (tensor-like names)

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

import tilekit as tk
from tilekit.codegen import compile_module

bf16 = np.dtype(ml_dtypes.bfloat16)


@tk.kernel
def row_sum(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    x = X.tile((1, N), (r, 0)).load().to(tk.float32)
    Y.tile((1,), (r,)).store(tk.sum(x, axis=1))


@tk.kernel
def row_max(X, Y, N: tk.constexpr):
    r = tk.program_id(0)
    x = X.tile((1, N), (r, 0)).load().to(tk.float32)
    Y.tile((1,), (r,)).store(tk.max(x, axis=1))


_INSTR = re.compile(r"^\s*(?:@%p\d+\s+)?([A-Za-z.0-9]+)\s+(%\w+),\s*(.*);")


def longest_chain(ptx: str, opcode: str) -> tuple[int, int]:
    """(longest chain of dependent ``opcode`` instructions, how many there are) in the
    PTX before its first butterfly ``shfl`` (a thread's own part of the first reduction)."""
    depth: dict[str, int] = {}
    count = best = 0
    for line in ptx.splitlines():
        if "shfl.sync.bfly" in line:
            break
        m = _INSTR.match(line)
        if not m or not m.group(1).startswith(opcode):
            continue
        sources = re.findall(r"%\w+", m.group(3))
        d = 1 + max((depth.get(s, 0) for s in sources), default=0)
        depth[m.group(2)] = d
        count += 1
        best = max(best, d)
    return best, count


CASES = [(row_sum, "add.rn.f32", 4097), (row_sum, "add.rn.f32", 4096),
         (row_sum, "add.rn.f32", 1000), (row_max, "max.NaN", 4097)]


@pytest.mark.parametrize("kernel,opcode,cols", CASES,
                         ids=[f"{o.split('.')[0]}-{c}" for _, o, c in CASES])
def test_a_threads_part_is_a_tree(kernel, opcode, cols):
    x = np.zeros((64, cols), bf16)
    module = kernel.trace(x, np.zeros(64, np.float32), N=cols)
    ptx = compile_module(module, "sm_90a", 2).binary.decode()  # 64 threads per row
    per_thread = math.ceil(cols / 64)
    chain, count = longest_chain(ptx, opcode)
    assert count >= per_thread - 1, (count, per_thread)  # every element is combined
    # a tree: ceil(log2(n)) levels (an identity step may add one); a fold would be n - 1
    assert chain <= math.ceil(math.log2(per_thread)) + 1, (chain, per_thread)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 33, 64, 65])
def test_the_tree_combines_every_item_once_in_order_at_log_depth(n):
    """``lower_tiles._pairwise`` on symbolic items: an in-order walk of the tree it builds
    gives the items in their order, each once (so non-commutative steps, e.g. an
    argreduce's tie-break, see neighbours in order), and the tree is ceil(log2 n) deep."""
    from tilekit.codegen.lower_tiles import _pairwise

    def combine(a, b):
        return (("+", a[0], b[0]),)

    def walk(node):
        return walk(node[1]) + walk(node[2]) if isinstance(node, tuple) else [node]

    def depth(node):
        return 1 + max(depth(node[1]), depth(node[2])) if isinstance(node, tuple) else 0

    tree = _pairwise(combine, [(i,) for i in range(n)])[0]
    assert walk(tree) == list(range(n))
    assert depth(tree) == math.ceil(math.log2(n))
