"""Cleanup passes every kernel gets: common subexpressions and loop invariants.

Tracing emits what the user's Python did, op by op: the same broadcast of a
bound in three places, a stride product recomputed inside a loop. These
passes remove that redundancy so later stages (and people reading dumps) see
each value once and loop bodies carry only loop work. Both touch only pure
ops without regions, and never move an op that can fault (integer ``//``
and ``%``) to where it would run more often than the user wrote.
"""

from __future__ import annotations

from typing import Any

from tilekit.ir.core import Block, Module, Operation, Value
from tilekit.ir.passes import Pass

_MAY_FAULT = frozenset({"floordiv", "mod"})


def _attr_key(value: Any) -> Any:
    # repr keeps 0.0 and -0.0 (and 1 and 1.0) apart; dict equality would merge them.
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    return (type(value).__name__, repr(value))


def _op_key(op: Operation) -> tuple:
    return (op.name, tuple(id(v) for v in op.operands), op.slots,
            tuple(sorted((k, _attr_key(v)) for k, v in op.attrs.items())),
            tuple(str(r.type) for r in op.results))


def _remap(op: Operation, replaced: dict[int, Value]) -> None:
    for i, v in enumerate(op.operands):
        new = replaced.get(id(v))
        if new is not None:
            op.operands[i] = new


def _cse_block(block: Block, visible: dict[tuple, Operation], replaced: dict[int, Value]) -> None:
    table = dict(visible)
    kept: list[Operation] = []
    for op in block.ops:
        _remap(op, replaced)
        for region in op.regions:
            for inner in region.blocks:
                _cse_block(inner, table, replaced)
        if op.opdef.is_pure and not op.regions and not op.opdef.is_terminator:
            key = _op_key(op)
            earlier = table.get(key)
            if earlier is not None:
                for old, new in zip(op.results, earlier.results):
                    replaced[id(old)] = new
                continue
            table[key] = op
        kept.append(op)
    block.ops = kept


def eliminate_common_subexpressions(module: Module) -> Module:
    """Replace a pure op that repeats an earlier visible one by the earlier result."""
    for fn in module.functions:
        _cse_block(fn.entry, {}, {})
    return module


def _defined_ids(block: Block) -> set[int]:
    ids = {id(a) for a in block.args}
    for top in block.ops:
        for op in top.walk():
            ids.update(id(r) for r in op.results)
            for region in op.regions:
                for inner in region.blocks:
                    ids.update(id(a) for a in inner.args)
    return ids


def _hoist_block(block: Block) -> None:
    index = 0
    while index < len(block.ops):
        op = block.ops[index]
        for region in op.regions:
            for inner in region.blocks:
                _hoist_block(inner)
        if op.name not in ("for", "pipeline"):
            index += 1
            continue
        body = op.regions[0].block
        inside = _defined_ids(body)
        moved: list[Operation] = []
        kept: list[Operation] = []
        for inner_op in body.ops:
            movable = (inner_op.opdef.is_pure and not inner_op.regions
                       and not inner_op.opdef.is_terminator and inner_op.name not in _MAY_FAULT
                       and all(id(v) not in inside for v in inner_op.operands))
            if movable:
                moved.append(inner_op)
                inside.difference_update(id(r) for r in inner_op.results)
            else:
                kept.append(inner_op)
        body.ops = kept
        for m in moved:
            m.parent = block
        block.ops[index:index] = moved
        index += len(moved) + 1


def hoist_loop_invariants(module: Module) -> Module:
    """Move pure ops whose operands come from outside a loop in front of the loop."""
    for fn in module.functions:
        _hoist_block(fn.entry)
    return module


CSE = Pass("eliminate_common_subexpressions", eliminate_common_subexpressions,
           "merge repeated pure ops")
HOIST = Pass("hoist_loop_invariants", hoist_loop_invariants,
             "move loop-invariant pure ops out of loops")
