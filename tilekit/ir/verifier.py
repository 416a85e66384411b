"""The IR verifier: types, structure and SSA scoping, all findings at once.

Checks, for every op: its operands fill its definition's slots; re-inferred
result types equal the stored ones; its own structural check (``verify``)
passes; it has the declared number of regions; terminators end blocks and
appear nowhere else; and every operand is defined before use in an enclosing
scope (an op in a loop body may read values from outside the loop, but a
value defined inside may not leak out).
"""

from __future__ import annotations

from tilekit.diagnostic import Diagnostic
from tilekit.errors import IRError
from tilekit.ir.core import Block, Function, Module, Operation
from tilekit.ir.opdef import OpTypeError, infer_types
from tilekit.ir.types import TileType, strip_layout


def verify_function(fn: Function) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    visible: set[int] = {id(a) for a in fn.args}
    _verify_block(fn.entry, visible, problems, needs_terminator=False)
    return problems


def _verify_block(block: Block, visible: set[int], problems: list[Diagnostic],
                  needs_terminator: bool) -> None:
    scope = set(visible)
    scope.update(id(a) for a in block.args)
    for index, op in enumerate(block.ops):
        _verify_op(op, scope, problems)
        last = index == len(block.ops) - 1
        if op.opdef.is_terminator and not last:
            problems.append(Diagnostic(f"`{op.name}` must be the last op of its block", op.loc))
        if op.parent is not block:
            problems.append(Diagnostic(f"`{op.name}` has a stale parent link", op.loc))
        scope.update(id(r) for r in op.results)
    if needs_terminator and block.terminator is None:
        where = block.parent.parent if block.parent is not None else None
        problems.append(Diagnostic("region does not end with a terminator",
                                   where.loc if where is not None else None))


def _verify_op(op: Operation, scope: set[int], problems: list[Diagnostic]) -> None:
    for i, value in enumerate(op.operands):
        if id(value) not in scope:
            problems.append(Diagnostic(
                f"operand #{i} of `{op.name}` is used outside the scope that defines it", op.loc))
    try:
        inferred = [strip_layout(t) for t in
                    infer_types(op.opdef, op.slots, [strip_layout(v.type) for v in op.operands],
                                op.attrs)]
        stored = [strip_layout(r.type) for r in op.results]
        if inferred != stored:
            problems.append(Diagnostic(
                f"`{op.name}` results are {list(map(str, stored))}, its operands give "
                f"{list(map(str, inferred))}", op.loc))
        if len(op.regions) != op.opdef.num_regions:
            problems.append(Diagnostic(
                f"`{op.name}` has {len(op.regions)} regions, expected {op.opdef.num_regions}",
                op.loc))
        elif op.opdef.verify is not None:
            op.opdef.verify(op)
    except OpTypeError as exc:
        problems.append(Diagnostic(f"`{op.name}`: {exc}", op.loc))
    for region in op.regions:
        for block in region.blocks:
            _verify_block(block, scope, problems, needs_terminator=True)


def _missing_layouts(fn: Function) -> list[Diagnostic]:
    problems = []
    values = list(fn.args)
    for op in fn.walk():
        values.extend(op.results)
        for region in op.regions:
            for block in region.blocks:
                values.extend(block.args)
    for v in values:
        if isinstance(v.type, TileType) and v.type.layout is None:
            owner = getattr(v, "owner", None)
            where = f"`{owner.name}`" if owner is not None else "a block argument"
            problems.append(Diagnostic(f"a tile value of {where} has no layout",
                                       owner.loc if owner is not None else fn.loc))
    return problems


def verify(module: Module, *, layouts: bool = False) -> None:
    """Raise ``IRError`` listing every problem in the module, if there is any.

    ``layouts=True`` (after layout assignment) also requires every tile value to carry a
    layout; ops' type rules compare types without layouts.
    """
    problems = [p for fn in module.functions for p in verify_function(fn)]
    if layouts:
        problems += [p for fn in module.functions for p in _missing_layouts(fn)]
    if problems:
        first, *rest = problems
        raise IRError(f"invalid IR: {first.message}", first.loc, first.hints, rest)
