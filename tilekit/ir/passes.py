"""Passes and the pass manager.

A pass is a named function ``Module -> Module``. A ``PassManager`` runs a
visible list of them; after each it verifies the module (knob
``TILEKIT_VERIFY_PASSES``) and dumps it when ``TILEKIT_DUMP`` names the pass
(or ``all``). The traced IR itself is dumped under the name ``ir``.

The passes that belong to no later stage live here: dead-code elimination.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from tilekit import knobs
from tilekit.ir.core import Block, BlockArgument, Function, Module, Operation, Value
from tilekit.ir.printer import print_module
from tilekit.ir.verifier import verify
from tilekit.record import Frozen


class Pass(Frozen):
    __slots__ = ("name", "run", "doc")
    name: str
    run: Callable[[Module], Module]
    doc: str
    _field_defaults = {"doc": ""}


def should_dump(name: str) -> bool:
    wanted = knobs.DUMP.get()
    return name in wanted or "all" in wanted


def dump(module: Module, name: str, stream: TextIO | None = None) -> None:
    out = stream if stream is not None else sys.stderr
    kernel = ", ".join(f.name for f in module.functions)
    out.write(f"// ----- {name}: {kernel} -----\n")
    out.write(print_module(module, with_locs=knobs.DUMP_LOCS.get()))
    out.flush()


class PassManager:
    def __init__(self, passes: Sequence[Pass]) -> None:
        self.passes = tuple(passes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.passes)

    def run(self, module: Module) -> Module:
        check = knobs.VERIFY_PASSES.get()
        for p in self.passes:
            module = p.run(module)
            if check:
                verify(module)
            if should_dump(p.name):
                dump(module, f"after {p.name}")
        return module


# --- dead-code elimination --------------------------------------------------------------------

def _used_ids(block: Block, used: set[int]) -> None:
    for op in block.ops:
        used.update(id(v) for v in op.operands)
        for region in op.regions:
            for inner in region.blocks:
                _used_ids(inner, used)


def _sweep(block: Block, used: set[int]) -> bool:
    changed = False
    kept = []
    for op in block.ops:
        for region in op.regions:
            for inner in region.blocks:
                changed |= _sweep(inner, used)
        dead = op.opdef.is_pure and not op.regions and not op.opdef.is_terminator and all(
            id(r) not in used for r in op.results)
        if dead:
            changed = True
        else:
            kept.append(op)
    block.ops = kept
    return changed


def _carried_args(op: Operation) -> list[BlockArgument] | None:
    """The block arguments of a loop's carried values (after the induction variable and a
    pipeline's tiles); ``[]`` for ``when`` (no arguments); None for other ops."""
    if op.name == "when":
        return []
    if op.name in ("for", "pipeline"):
        lead = 1 + (len(op.variadic("tensors")) if op.name == "pipeline" else 0)
        return op.regions[0].block.args[lead:]
    return None


def _live_values(fn: Function) -> set[int]:
    """The values a function's effects need, as ids: backward liveness from every op with
    an effect, through pure ops, and through carried values: a live result or carried
    argument of a ``for``/``pipeline``/``when`` makes its init and its body's yield at that
    place live, and nothing else does (so a value carried around a loop, or from an inner
    loop to an outer one, that no effect ever reads is dead, however it is threaded)."""
    producer: dict[int, tuple[Operation, int]] = {}  # pure op result -> (op, -1); carried
    slot: dict[int, tuple[Operation, int]] = {}      # result or argument -> (control op, j)
    live: set[int] = set()
    work: list[Value] = []

    def need(v: Value) -> None:
        if id(v) not in live:
            live.add(id(v))
            work.append(v)

    def visit(block: Block) -> None:
        for op in block.ops:
            args = _carried_args(op)
            if args is not None:
                for j, r in enumerate(op.results):
                    slot[id(r)] = (op, j)
                for j, a in enumerate(args):
                    slot[id(a)] = (op, j)
                for v, name in zip(op.operands, op.slots):
                    if name != "inits":
                        need(v)
            elif op.opdef.is_terminator:
                pass  # a yield is read through its op's slots
            elif op.opdef.is_pure and not op.regions:
                for r in op.results:
                    producer[id(r)] = (op, -1)
            else:
                for v in op.operands:
                    need(v)
            for region in op.regions:
                for inner in region.blocks:
                    visit(inner)

    visit(fn.entry)
    while work:
        v = work.pop()
        if id(v) in slot:
            op, j = slot[id(v)]
            need(op.variadic("inits")[j])
            term = op.regions[0].block.terminator
            assert term is not None
            need(term.operands[j])
        elif id(v) in producer:
            for operand in producer[id(v)][0].operands:
                need(operand)
    return live


def _prune_carried(block: Block, live: set[int]) -> bool:
    """Drop the carried values of ``for``/``pipeline``/``when`` ops that nothing live reads
    (``_live_values``): a name first bound in a loop and read after it is carried; when
    nothing reads it, the carried value goes."""
    changed = False
    for op in block.ops:
        for region in op.regions:
            for inner in region.blocks:
                changed |= _prune_carried(inner, live)
        args = _carried_args(op)
        if args is None or not op.results:
            continue
        dead = [j for j, result in enumerate(op.results)
                if id(result) not in live and (not args or id(args[j]) not in live)]
        if not dead:
            continue
        changed = True
        body = op.regions[0].block
        term = body.terminator
        assert term is not None
        keep = [j for j in range(len(op.results)) if j not in dead]
        inits = op.variadic("inits")
        head = [(v, s) for v, s in zip(op.operands, op.slots) if s != "inits"]
        op.operands = [v for v, _ in head] + [inits[j] for j in keep]
        op.slots = tuple(s for _, s in head) + ("inits",) * len(keep)
        op.results = [op.results[j] for j in keep]
        for i, r in enumerate(op.results):
            r.index = i
        term.operands = [term.operands[j] for j in keep]
        term.slots = tuple(term.slots[j] for j in keep)
        if args:
            body.remove_args([args[j] for j in dead])
    return changed


def eliminate_dead_code(module: Module) -> Module:
    """Drop pure ops whose results nobody reads, and carried values no effect needs
    (repeated until nothing changes).

    Effects (loads included, since they may fault) and control flow are kept.
    """
    for fn in module.functions:
        while True:
            pruned = _prune_carried(fn.entry, _live_values(fn))
            used: set[int] = set()
            _used_ids(fn.entry, used)
            if not _sweep(fn.entry, used) and not pruned:
                break
    return module


DCE = Pass("eliminate_dead_code", eliminate_dead_code, "drop unused pure ops")


def written_args(scope: Module | Function) -> tuple[str, ...]:
    """The tensor arguments a kernel may write (stores, atomics, bulk stores), sorted: the
    runtime copies those back, and the schedule never repacks them."""
    names = set()
    for op in scope.walk():
        if op.name in ("store", "tile_store", "atomic"):
            names.add(op.operands[0].name_hint)
        elif op.name == "copy_s2g":
            names.add(op.operand("tensor").name_hint)
    return tuple(sorted(n for n in names if n))
