"""Declaring and calling LLVM intrinsics by name: shared by the per-vendor modules."""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

I32 = ir.IntType(32)


def c32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def call(b: ir.IRBuilder, name: str, ret: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    """Call ``name`` (declared on first use, with the arguments' types)."""
    module = b.module
    fn = module.globals.get(name) or ir.Function(
        module, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, list(args))
