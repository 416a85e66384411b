"""Mutants of scheduled IR, each breaking the pipeline protocol in one place.

``mutants(module)`` takes a module in the scheduled form of ``docs/pipelines.md`` (the
schedule solver's output, or one built by hand) and returns one mutant per site of each
kind below, every mutant a fresh copy of the module (``clone_module``) with one change:

- delete a fence (``fence_mbarrier_init``, ``fence_proxy_async``) or a ``cta_barrier``;
- flip an ``mbarrier_wait``'s parity (an ``xor`` with 1 inserted before it);
- drop an ``mbarrier_arrive`` or an ``mbarrier_expect_tx``;
- swap an ``mbarrier_wait`` with the ``smem_read`` after it in its block;
- shrink a ring by one: ``smem_alloc`` stages - 1, ``mbarrier_alloc`` count - 1 (none for a
  ring of one).

Ops are found by their position in ``walk()`` order, which ``clone_module`` keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilekit.ir import Builder, Module, Operation
from tilekit.ir.core import clone_module

DELETE = ("fence_mbarrier_init", "fence_proxy_async", "cta_barrier")
DROP = ("mbarrier_arrive", "mbarrier_expect_tx")

#: Every kind of mutant, in the order ``mutants`` makes them.
KINDS = (*(f"delete {n}" for n in DELETE), "flip parity", *(f"drop {n}" for n in DROP),
         "swap wait/read", "shrink smem_alloc", "shrink mbarrier_alloc")


@dataclass(frozen=True)
class Mutant:
    kind: str  # one of KINDS
    index: int  # which site of that kind, in program order
    where: str  # the op changed and its line
    module: Module

    @property
    def name(self) -> str:
        return f"{self.kind} #{self.index}"


def _where(op: Operation) -> str:
    return f"`{op.name}` at {op.loc.short if op.loc else '?'}"


def _delete(op: Operation) -> bool:
    op.parent.ops.remove(op)
    return True


def _flip(op: Operation) -> bool:
    parity = op.operand("parity")
    b = Builder(op.parent)
    one = b.create("constant", attrs={"value": 1, "dtype": parity.type.dtype, "shape": ()},
                   loc=op.loc, insert=False)
    flipped = b.create("xor", {"lhs": parity, "rhs": one.result}, loc=op.loc, insert=False)
    block = op.parent
    at = block.ops.index(op)
    block.insert(at, flipped)
    block.insert(at, one)
    op.operands[op.slots.index("parity")] = flipped.result
    return True


def _swap(op: Operation) -> bool:
    block = op.parent
    at = block.ops.index(op)
    for later in block.ops[at + 1:]:
        if later.name == "smem_read":
            there = block.ops.index(later)
            between = {id(r) for o in block.ops[at:there] for r in o.results}
            if any(id(v) in between for v in later.operands):
                return False  # the read needs a value made after the wait
            block.ops[at], block.ops[there] = later, op
            return True
    return False


def _shrink(attr: str) -> Callable[[Operation], bool]:
    def shrink(op: Operation) -> bool:
        if op.attrs[attr] <= 1:
            return False
        op.attrs[attr] -= 1
        result = op.results[0]
        result.type = result.type.replace(**{"stages" if attr == "stages" else "count":
                                             op.attrs[attr]})
        return True

    return shrink


_SITES: tuple[tuple[str, str, Callable[[Operation], bool]], ...] = (
    *((f"delete {n}", n, _delete) for n in DELETE),
    ("flip parity", "mbarrier_wait", _flip),
    *((f"drop {n}", n, _delete) for n in DROP),
    ("swap wait/read", "mbarrier_wait", _swap),
    ("shrink smem_alloc", "smem_alloc", _shrink("stages")),
    ("shrink mbarrier_alloc", "mbarrier_alloc", _shrink("count")),
)


def mutants(module: Module) -> list[Mutant]:
    """Every mutant of ``module``, kind by kind (see the module's docstring)."""
    ops = list(module.walk())
    out = []
    for kind, name, mutate in _SITES:
        index = 0
        for position, op in enumerate(ops):
            if op.name != name:
                continue
            copy = clone_module(module)
            target = list(copy.walk())[position]
            if mutate(target):
                out.append(Mutant(kind, index, _where(op), copy))
                index += 1
    return out
