"""Which size divisibility facts a traced kernel can use: the per-call half of its bucket.

A tile view ``X.tile(shape, index)`` is in bounds along dim ``d`` for every element when
the tensor's size along ``d`` is a positive multiple of ``shape[d]`` and the tile's start
is in bounds: one uniform compare instead of one per register, and no tail; at index 0 no
compare at all (a norm's weights: ``W.tile((N,), (0,))``). A size of 0 is a multiple of
every ``n`` but holds no tile, so it has no fact. Each tile view names candidate facts
``(tensor, dim, n)``; a call computes which of them hold (a compare and a modulo per fact,
on sizes it reads anyway) and those that hold are part of its bucket. Facts no tile view
can use are never computed, so arguments that differ only in them share code.

Pure IR inspection: importing this module imports no compiler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilekit.ir.core import Module

SizeFact = tuple[str, int, int]  # (tensor argument name, dim, divisor)


def candidate_size_facts(module: Module) -> tuple[SizeFact, ...]:
    """The facts ``(tensor, dim, n)`` the kernel's tile views and pipeline streams could
    use, sorted. Tiles of extent 1 along a dim need none (their one element is the start)."""
    found: set[SizeFact] = set()

    def add(name: str | None, shape: Sequence[int]) -> None:
        for dim, n in enumerate(shape):
            if name and n > 1:
                found.add((name, dim, n))

    for op in module.kernel.walk():
        if op.name in ("tile_load", "tile_store"):
            add(op.operands[0].name_hint, op.attrs["shape"])
        elif op.name == "pipeline":  # each stream's tiles: copies without edge guards
            for t, stream in zip(op.variadic("tensors"), op.attrs["streams"]):
                add(t.name_hint, stream.shape)
    return tuple(sorted(found))


def size_facts_holding(candidates: Sequence[SizeFact],
                       shapes: Mapping[str, Sequence[int]]) -> frozenset[SizeFact]:
    """The candidates that hold for tensors of these shapes (name -> sizes): the size is a
    positive multiple of ``n`` (the runtime's fast-path key computes the same)."""
    return frozenset(f for f in candidates if 0 < (size := shapes[f[0]][f[1]])
                     and size % f[2] == 0)
