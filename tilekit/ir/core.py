"""The IR's structure: values, operations, blocks, regions, functions.

Operations live in ordered blocks, because order is meaning for memory
effects, pipelines and barriers; regions nest blocks inside loop and branch
operations. Every value is defined once (SSA): an operation's result or a
block's argument. What an operation *means* is its ``OpDef`` (see
``opdef.py``); this module only holds the graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tilekit.errors import SourceLoc
from tilekit.ir.types import TensorType, TileType, Type

if TYPE_CHECKING:
    from tilekit.ir.opdef import OpDef


class Value:
    """An SSA value: defined once, by an op result or a block argument."""

    __slots__ = ("type", "name_hint")

    def __init__(self, type: Type, name_hint: str | None = None) -> None:
        self.type = type
        self.name_hint = name_hint

    @property
    def tile_type(self) -> TileType:
        assert isinstance(self.type, TileType), self.type
        return self.type

    @property
    def tensor_type(self) -> TensorType:
        assert isinstance(self.type, TensorType), self.type
        return self.type


class OpResult(Value):
    __slots__ = ("owner", "index")

    def __init__(self, type: Type, owner: Operation, index: int) -> None:
        super().__init__(type)
        self.owner = owner
        self.index = index


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: Block, index: int, name_hint: str | None = None) -> None:
        super().__init__(type, name_hint)
        self.block = block
        self.index = index


class Operation:
    """One instance of an ``OpDef``: operands, results, attributes, regions.

    Optional operands (a load's ``mask``) are absent from ``operands``;
    ``slots`` names the operand each position fills, so ``operand("mask")``
    answers ``None`` when there is none.
    """

    __slots__ = ("opdef", "operands", "slots", "results", "attrs", "regions", "loc", "parent")

    def __init__(
        self,
        opdef: OpDef,
        operands: Sequence[Value],
        slots: Sequence[str],
        result_types: Sequence[Type],
        attrs: dict[str, Any],
        regions: Sequence[Region] = (),
        loc: SourceLoc | None = None,
    ) -> None:
        self.opdef = opdef
        self.operands = list(operands)
        self.slots = tuple(slots)
        self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attrs = attrs
        self.regions = list(regions)
        for region in self.regions:
            region.parent = self
        self.loc = loc
        self.parent: Block | None = None

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def result(self) -> OpResult:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def operand(self, slot: str) -> Value | None:
        try:
            return self.operands[self.slots.index(slot)]
        except ValueError:
            return None

    def variadic(self, slot: str) -> list[Value]:
        """All operands in a variadic slot (named ``slot`` in ``slots``)."""
        return [v for v, s in zip(self.operands, self.slots) if s == slot]

    def walk(self) -> Iterator[Operation]:
        """This op, then every op nested in its regions, in program order."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    yield from op.walk()

    def __repr__(self) -> str:
        return f"<Operation {self.name} at {self.loc}>"


class Block:
    """A straight-line list of ops with typed arguments."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types: Sequence[Type] = (),
                 arg_names: Sequence[str | None] = ()) -> None:
        names = list(arg_names) + [None] * (len(arg_types) - len(arg_names))
        self.args = [BlockArgument(t, self, i, n) for i, (t, n) in enumerate(zip(arg_types, names))]
        self.ops: list[Operation] = []
        self.parent: Region | None = None

    def add_arg(self, type: Type, name: str | None = None) -> BlockArgument:
        arg = BlockArgument(type, self, len(self.args), name)
        self.args.append(arg)
        return arg

    def remove_args(self, dead: Sequence[BlockArgument]) -> None:
        gone = {id(a) for a in dead}
        self.args = [a for a in self.args if id(a) not in gone]
        for i, a in enumerate(self.args):
            a.index = i

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    def insert(self, index: int, op: Operation) -> Operation:
        op.parent = self
        self.ops.insert(index, op)
        return op

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops and self.ops[-1].opdef.is_terminator else None


class Region:
    """The blocks an op owns (one block for every op defined so far)."""

    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Sequence[Block] = ()) -> None:
        self.blocks = list(blocks)
        for b in self.blocks:
            b.parent = self
        self.parent: Operation | None = None

    @property
    def block(self) -> Block:
        assert len(self.blocks) == 1
        return self.blocks[0]


@dataclass
class Function:
    """A traced kernel: its arguments are the body's block arguments.

    ``constexprs`` are the compile-time values it was specialized for; they are
    printed with the function so that a dump says which specialization it is.
    """

    name: str
    body: Region
    constexprs: dict[str, Any] = field(default_factory=dict)
    loc: SourceLoc | None = None

    @property
    def args(self) -> list[BlockArgument]:
        return self.body.block.args

    @property
    def entry(self) -> Block:
        return self.body.block

    def walk(self) -> Iterator[Operation]:
        for op in self.entry.ops:
            yield from op.walk()


@dataclass
class Module:
    functions: list[Function] = field(default_factory=list)

    @property
    def kernel(self) -> Function:
        assert len(self.functions) == 1
        return self.functions[0]

    def walk(self) -> Iterator[Operation]:
        for f in self.functions:
            yield from f.walk()

    def __str__(self) -> str:
        from tilekit.ir.printer import print_module

        return print_module(self)


def replace_uses(ops: Sequence[Operation], old: Value, new: Value) -> None:
    """Replace ``old`` by ``new`` in the operands of ``ops`` and everything nested in them."""
    for top in ops:
        for op in top.walk():
            for i, v in enumerate(op.operands):
                if v is old:
                    op.operands[i] = new


def defining_block_ops(value: Value) -> Block | None:
    """The block a value is defined in (the block holding its op, or owning the argument)."""
    if isinstance(value, BlockArgument):
        return value.block
    if isinstance(value, OpResult):
        return value.owner.parent
    return None


def clone_module(module: Module) -> Module:
    """A deep copy of the module's ops, blocks and values (types and attributes are
    immutable and shared), so that a backend's passes never touch the cached IR."""
    mapping: dict[int, Value] = {}

    def block_copy(block: Block) -> Block:
        new = Block([a.type for a in block.args], [a.name_hint for a in block.args])
        for old_arg, new_arg in zip(block.args, new.args):
            mapping[id(old_arg)] = new_arg
        for op in block.ops:
            new.append(op_copy(op))
        return new

    def op_copy(op: Operation) -> Operation:
        regions = [Region([block_copy(b) for b in r.blocks]) for r in op.regions]
        operands = [mapping.get(id(v), v) for v in op.operands]
        new = Operation(op.opdef, operands, op.slots, [r.type for r in op.results],
                        dict(op.attrs), regions, op.loc)
        for old_r, new_r in zip(op.results, new.results):
            new_r.name_hint = old_r.name_hint
            mapping[id(old_r)] = new_r
        return new

    functions = []
    for fn in module.functions:
        body = Region([block_copy(b) for b in fn.body.blocks])
        functions.append(Function(fn.name, body, dict(fn.constexprs), fn.loc))
    return Module(functions)
