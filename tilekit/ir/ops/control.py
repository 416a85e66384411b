"""Control flow: counted loops with loop-carried values, guarded regions, yield.

``for`` runs its body for ``iv = lo, lo+step, ...`` while ``iv < hi`` (or
``> hi`` for a negative step), threading the carried values through block
arguments; its results are the values after the last iteration (the inits
when it runs zero times). ``when`` runs its body only if ``cond`` holds; its
results are the body's yields then, and its operands otherwise.
"""

from __future__ import annotations

import numpy as np

from tilekit.ir.opdef import Effect, OpTypeError, Signature, define
from tilekit.ir.ops.common import int_scalar, tile
from tilekit.ir.types import TileType, Type


class ZeroStepLoop(ArithmeticError):
    """A ``for`` loop with step 0 would never end; the interpreter reports the line."""


def _yield_types(op) -> list[Type]:
    term = op.regions[0].block.terminator
    if term is None or term.name != "yield":
        raise OpTypeError(f"the body of `{op.name}` must end with `yield`")
    return [v.type for v in term.operands]


# --- for -------------------------------------------------------------------------------------

def _infer_for(sig: Signature) -> list[Type]:
    lo = int_scalar(sig["lo"], "loop lower bound")
    for slot in ("hi", "step"):
        t = int_scalar(sig[slot], f"loop {slot}")
        if t.dtype is not lo.dtype:
            raise OpTypeError(f"loop bounds have different types: {lo.dtype} and {t.dtype}")
    return list(sig.variadic("inits"))


def _verify_for(op) -> None:
    body = op.regions[0].block
    inits = [v.type for v in op.variadic("inits")]
    arg_types = [a.type for a in body.args]
    if arg_types != [op.operand("lo").type, *inits]:
        raise OpTypeError(f"for body arguments {list(map(str, arg_types))} do not match the "
                          f"induction variable and inits")
    yields = _yield_types(op)
    if yields != inits:
        raise OpTypeError(f"for body yields {list(map(str, yields))}, carried values are "
                          f"{list(map(str, inits))}")


def _for_ref(ctx, op, args: list[np.ndarray]) -> list[np.ndarray]:
    lo, hi, step, *carried = args
    dtype = lo.dtype
    i, stop, inc = int(lo), int(hi), int(step)
    if inc == 0:
        raise ZeroStepLoop("loop step is 0")
    body = op.regions[0].block
    while (inc > 0 and i < stop) or (inc < 0 and i > stop):
        carried = ctx.run_block(body, [np.asarray(i, dtype=dtype), *carried])
        i += inc
    return list(carried)


def _print_for(p, op, indent: str) -> str:
    body = op.regions[0].block
    iv, *args = body.args
    head = f"for {p.name(iv)} = {p.name(op.operand('lo'))} to {p.name(op.operand('hi'))} " \
           f"step {p.name(op.operand('step'))}"
    inits = op.variadic("inits")
    if inits:
        pairs = ", ".join(f"{p.name(a)} = {p.name(v)}" for a, v in zip(args, inits))
        head += f" iter_args({pairs}) -> ({', '.join(str(v.type) for v in inits)})"
    return head + " " + p.block_text(body, indent)


define("for", ["lo", "hi", "step", "inits*"], _infer_for, _for_ref, effects=Effect.CONTROL,
       num_regions=1, verify=_verify_for, printer=_print_for,
       doc="counted loop with loop-carried values")


# --- when ------------------------------------------------------------------------------------

def _infer_when(sig: Signature) -> list[Type]:
    cond = tile(sig, "cond")
    if not (cond.is_scalar and cond.dtype.is_bool):
        raise OpTypeError(f"when condition must be a bool scalar, got {cond}")
    return list(sig.variadic("inits"))


def _verify_when(op) -> None:
    if op.regions[0].block.args:
        raise OpTypeError("the body of `when` takes no arguments")
    yields = _yield_types(op)
    inits = [v.type for v in op.variadic("inits")]
    if yields != inits:
        raise OpTypeError(f"when body yields {list(map(str, yields))}, expected "
                          f"{list(map(str, inits))}")


def _when_ref(ctx, op, args: list[np.ndarray]) -> list[np.ndarray]:
    cond, *inits = args
    if bool(cond):
        return list(ctx.run_block(op.regions[0].block, []))
    return inits


def _print_when(p, op, indent: str) -> str:
    head = f"when {p.name(op.operand('cond'))}"
    inits = op.variadic("inits")
    if inits:
        head += f" else({', '.join(p.name(v) for v in inits)}) -> " \
                f"({', '.join(str(v.type) for v in inits)})"
    return head + " " + p.block_text(op.regions[0].block, indent)


define("when", ["cond", "inits*"], _infer_when, _when_ref, effects=Effect.CONTROL,
       num_regions=1, verify=_verify_when, printer=_print_when,
       doc="run the body if cond holds; results are its yields, else the inits")


# --- yield -----------------------------------------------------------------------------------

def _infer_yield(sig: Signature) -> list[TileType]:
    return []


define("yield", ["values*"], _infer_yield, None, is_terminator=True,
       doc="end a region, passing values to the enclosing op")
