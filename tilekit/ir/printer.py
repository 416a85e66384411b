"""MLIR-like text for modules, with deterministic names.

Function arguments keep their Python parameter names (``%X``); every other
value is numbered in the order it is printed (``%0``, ``%1``...), so the same
kernel always prints the same text — which the golden tests rely on. Source
locations are printed as ``loc(file.py:line:col)`` (base name only, so dumps
do not depend on where the checkout lives).
"""

from __future__ import annotations

import enum

from tilekit.ir.core import Block, Function, Module, Operation, Value
from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import Arity


def format_attr(value: object) -> str:
    if isinstance(value, DType):
        return value.short
    if isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, tuple):
        inner = ", ".join(format_attr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


class Printer:
    def __init__(self, with_locs: bool = False) -> None:
        self.with_locs = with_locs
        self._names: dict[int, str] = {}
        self._taken: set[str] = set()
        self._counter = 0

    def name(self, value: Value) -> str:
        key = id(value)
        if key not in self._names:
            self._names[key] = self._fresh()
        return self._names[key]

    def _fresh(self) -> str:
        while f"%{self._counter}" in self._taken:
            self._counter += 1
        name = f"%{self._counter}"
        self._counter += 1
        self._taken.add(name)
        return name

    def _named(self, value: Value, hint: str) -> str:
        name = f"%{hint}"
        suffix = 1
        while name in self._taken:
            name = f"%{hint}_{suffix}"
            suffix += 1
        self._taken.add(name)
        self._names[id(value)] = name
        return name

    # --- text ------------------------------------------------------------------------------

    def function_text(self, fn: Function) -> str:
        params = ", ".join(f"{self._named(a, a.name_hint or 'arg')}: {a.type}" for a in fn.args)
        consts = ""
        if fn.constexprs:
            consts = " [" + ", ".join(f"{k} = {format_attr(v)}"
                                      for k, v in fn.constexprs.items()) + "]"
        return f"kernel @{fn.name}({params}){consts} " + self.block_text(fn.entry, "", args=False)

    def block_text(self, block: Block, indent: str, args: bool = False) -> str:
        inner = indent + "  "
        lines = ["{"]
        for op in block.ops:
            lines.append(inner + self.op_text(op, inner))
        lines.append(indent + "}")
        return "\n".join(lines)

    def op_text(self, op: Operation, indent: str) -> str:
        results = ", ".join(self.name(r) for r in op.results)
        prefix = f"{results} = " if results else ""
        if op.opdef.printer is not None:
            # Results are named before the body is printed, so they read top-down.
            body = op.opdef.printer(self, op, indent)
        else:
            body = self._generic(op)
        return prefix + body + self._loc(op)

    def _generic(self, op: Operation) -> str:
        optional = {s.name for s in op.opdef.operands if s.arity is Arity.OPTIONAL}
        parts = []
        for value, slot in zip(op.operands, op.slots):
            text = self.name(value)
            parts.append(f"{slot}={text}" if slot in optional else text)
        text = op.name
        if parts:
            text += " " + ", ".join(parts)
        if op.attrs:
            text += " {" + ", ".join(f"{k} = {format_attr(v)}" for k, v in op.attrs.items()) + "}"
        if op.results:
            text += " : " + ", ".join(str(r.type) for r in op.results)
        return text

    def _loc(self, op: Operation) -> str:
        if self.with_locs and op.loc is not None:
            return f"  loc({op.loc.short})"
        return ""


def print_function(fn: Function, with_locs: bool = False) -> str:
    return Printer(with_locs).function_text(fn)


def print_module(module: Module, with_locs: bool = False) -> str:
    return "\n\n".join(print_function(f, with_locs) for f in module.functions) + "\n"
