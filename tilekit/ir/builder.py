"""Building IR: an insertion point and one ``create`` that checks every op.

``create`` runs the op definition's ``infer`` on the operands, so an
ill-typed op can never enter the IR; the caller decides how to report the
``OpTypeError`` (the tracer names the user's line).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tilekit.errors import SourceLoc
from tilekit.ir.core import Block, Operation, Region, Value
from tilekit.ir.opdef import Arity, OpDef, infer_types, lookup


class Builder:
    def __init__(self, block: Block) -> None:
        self._stack: list[Block] = [block]

    @property
    def block(self) -> Block:
        return self._stack[-1]

    def push(self, block: Block) -> None:
        """Insert at the end of ``block`` until the matching ``pop``."""
        self._stack.append(block)

    def pop(self) -> Block:
        return self._stack.pop()

    @contextmanager
    def at_end_of(self, block: Block) -> Iterator[Block]:
        self._stack.append(block)
        try:
            yield block
        finally:
            self._stack.pop()

    def create(
        self,
        op: str | OpDef,
        operands: Mapping[str, Value | Sequence[Value] | None] | None = None,
        attrs: Mapping[str, Any] | None = None,
        regions: Sequence[Region] = (),
        loc: SourceLoc | None = None,
        insert: bool = True,
    ) -> Operation:
        """Make an op from named operands (a list for a variadic slot, None for an absent
        optional one), check it, and append it at the insertion point."""
        opdef = lookup(op) if isinstance(op, str) else op
        values: list[Value] = []
        slots: list[str] = []
        given = dict(operands or {})
        for spec in opdef.operands:
            item = given.pop(spec.name, None)
            if spec.arity is Arity.VARIADIC:
                for v in item or ():
                    values.append(v)
                    slots.append(spec.name)
            elif item is not None:
                values.append(item)  # type: ignore[arg-type]
                slots.append(spec.name)
        if given:
            raise TypeError(f"{opdef.name}: unknown operands {sorted(given)}")
        attrs_d = dict(attrs or {})
        result_types = infer_types(opdef, slots, [v.type for v in values], attrs_d)
        operation = Operation(opdef, values, slots, result_types, attrs_d, regions, loc)
        if insert:
            self.block.append(operation)
        return operation
