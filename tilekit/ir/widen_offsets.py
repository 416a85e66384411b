"""Exact offsets into tensors indexed in 64 bits: the ``widen_offsets`` pass.

The rule (the README's Numerics): an offset or tile coordinate into a tensor whose bucket
indexes it in 64 bits (``TensorType.index`` is int64: a span, an extent or a stride of
2^31 elements or more) is exact. The integer arithmetic that computes it, and the mask of
the access, run in int64: ``tk.program_id(0) * B + tk.arange(B)`` reaches past 2^31
instead of wrapping. A tensor indexed in 32 bits keeps its IR (and its code) unchanged:
each of its elements has an offset below 2^31, which ``+ - *`` in int32 reach exactly.

For each access to such a tensor (``load``, ``store``, ``atomic``: offsets and mask;
``tile_load``, ``tile_store``: the tile index; ``pipeline``: its streams' first tiles
and its trip count, which is computed from them), the pass builds the exact twin of the
value: the ops that compute it are copied with int64 operands next to the originals,
which keep their other uses (an offset that is also stored as data keeps its type
there). Where the chain starts, values are cast to int64, which keeps them: program ids,
loop counters, runtime scalars, sizes and strides of other tensors, integers read from
memory (the arithmetic after the load is int64); constants and ``arange`` are made as
int64 in the first place. A value carried through ``tk.range``, ``tk.when`` or
``tk.pipeline`` gets an int64 twin carried beside it, so a running offset is exact
across iterations (the original goes when nothing else reads it). Kept as written: a
cast the user wrote that narrows or leaves the integers (``.to(tk.int32)`` of an int64,
from a float, ``bitcast``), a dot's accumulator, and bool values carried through loops.
So nothing needs a run-time overflow check: every value in the chain is exact or what
the user asked for.
"""

from __future__ import annotations

from tilekit.errors import SourceLoc
from tilekit.ir.core import Block, BlockArgument, Function, Module, Operation, OpResult, Value
from tilekit.ir.dtypes import DType
from tilekit.ir.opdef import infer_types, lookup
from tilekit.ir.ops.elementwise import BINARY, COMPARE
from tilekit.ir.passes import Pass, eliminate_dead_code
from tilekit.ir.types import TensorType, TileType

#: Integer (and bool) ops whose exact result is the same op on exact operands.
_THROUGH = frozenset({*(n for n in BINARY if n not in ("div", "pow", "atan2")),
                      "neg", "abs", "not", *COMPARE, "select", "broadcast", "expand_dims",
                      "reshape", "permute", "reduce", "scan", "argreduce"})
#: Ops with regions whose results (and body arguments) are carried values.
_CARRIERS = frozenset({"for", "when", "pipeline"})

I64 = DType.INT64


def _fits(src: DType, dst: DType) -> bool:
    """Whether every value of integer (or bool) type ``src`` is a value of ``dst``."""
    if src.is_bool:
        return True
    if src.is_signed:
        return dst.is_signed and dst.bits >= src.bits
    return dst.bits > src.bits or (dst.is_unsigned and dst.bits == src.bits)


def wide_tensor(v: Value) -> bool:
    """Whether ``v`` is a tensor its bucket indexes in 64 bits."""
    return isinstance(v.type, TensorType) and v.type.index is I64


def exact_operands(op: Operation) -> list[int]:
    """The operand positions of ``op`` that the rule makes exact: offsets and mask of an
    access, the tile index of a tile view or of a pipeline stream (and the pipeline's trip
    count), on a 64-bit tensor."""
    if op.name in ("load", "store", "atomic"):
        if not wide_tensor(op.operands[0]):
            return []
        return [i for i, s in enumerate(op.slots) if s in ("offsets", "mask")]
    if op.name in ("tile_load", "tile_store"):
        if not wide_tensor(op.operands[0]):
            return []
        return [i for i, s in enumerate(op.slots) if s == "index"]
    if op.name == "pipeline":  # the first tiles of 64-bit streams, and the trip count
        out, at = [], op.slots.index("index") if "index" in op.slots else 0
        for t in op.variadic("tensors"):
            rank = t.type.rank
            if wide_tensor(t):
                out.extend(range(at, at + rank))
            at += rank
        # The count is made from the first tiles (int64, as a 64-bit stream makes it):
        # counted from a wrapped first tile, the loop would run 2^32 steps.
        count = op.slots.index("count")
        wide = op.operands[count].type.dtype is I64
        return [*([count] if wide else []), *out]
    return []


class _Widener:
    """The exact twin of each value asked for, built once, next to its original."""

    def __init__(self) -> None:
        self.exact: dict[int, Value] = {}  # id(value) -> its exact twin
        self.casts: dict[int, Value] = {}  # id(value) -> the value cast to int64
        self.carried: dict[tuple[int, int], Value] = {}  # (id(op), k) -> result twin
        self.carriers: dict[int, Operation] = {}  # id(op) -> op, for the carries above

    # --- where new ops go ----------------------------------------------------------------

    @staticmethod
    def _place(op: Operation, after: Value) -> Operation:
        """Insert ``op`` right after the definition of ``after`` (first in the block for
        a block argument): it then sees what ``after`` sees."""
        if isinstance(after, OpResult):
            block = after.owner.parent
            assert block is not None
            block.insert(block.ops.index(after.owner) + 1, op)
        else:
            assert isinstance(after, BlockArgument)
            after.block.insert(0, op)
        return op

    @staticmethod
    def _make(name: str, operands: list[Value], slots: tuple[str, ...], attrs: dict,
              loc: SourceLoc | None) -> Operation:
        opdef = lookup(name)
        types = infer_types(opdef, slots, [v.type for v in operands], attrs)
        return Operation(opdef, operands, slots, types, attrs, (), loc)

    def as_i64(self, v: Value, loc: SourceLoc | None) -> Value:
        """``v`` cast to int64 (a bool or an integer of any type, its value kept; a uint64
        past 2^63, which no tensor reaches, is the exception)."""
        if _dtype(v) is I64:
            return v
        found = self.casts.get(id(v))
        if found is None:
            where = v.owner.loc if isinstance(v, OpResult) else loc
            found = self._place(self._make("cast", [v], ("x",), {"dtype": I64}, where),
                                v).result
            self.casts[id(v)] = found
        return found

    # --- the exact twin of a value -------------------------------------------------------

    def twin(self, v: Value, loc: SourceLoc | None) -> Value:
        """``v`` computed exactly: an int64 value for an integer (``v`` itself when it is
        already 64 bits wide and nothing it reads changed), a bool for a bool; anything
        else is returned as it is."""
        dtype = _dtype(v)
        if dtype is None or not (dtype.is_int or dtype.is_bool):
            return v
        found = self.exact.get(id(v))
        if found is None:
            found = self._twin(v, dtype, loc)
            self.exact[id(v)] = found
        return found

    def _leaf(self, v: Value, loc: SourceLoc | None) -> Value:
        """Where a chain starts: the value itself, widened (bools and uint64 as they are)."""
        dtype = _dtype(v)
        return v if dtype is DType.BOOL or dtype is DType.UINT64 else self.as_i64(v, loc)

    def _twin(self, v: Value, dtype: DType, loc: SourceLoc | None) -> Value:
        if dtype is DType.UINT64:
            return v
        if isinstance(v, BlockArgument):
            owner = v.block.parent.parent if v.block.parent is not None else None
            if owner is not None and owner.name in _CARRIERS and dtype.is_int \
                    and v.index >= _first_carried(owner):
                self._carry(owner, v.index - _first_carried(owner))
                return self.exact[id(v)]
            return self._leaf(v, loc)  # a kernel argument, a loop counter, a stream's tile
        assert isinstance(v, OpResult)
        op = v.owner
        if op.name in _CARRIERS:
            return self._carry(op, v.index) if dtype.is_int else v
        if op.name in ("constant", "arange") and not dtype.is_bool:  # made as int64
            attrs = {**op.attrs, "dtype": I64}
            return self._place(self._make(op.name, [], (), attrs, op.loc), v).result
        if op.name == "cast":
            src = op.operand("x")
            assert src is not None
            s = _dtype(src)
            assert s is not None
            if s.is_float or (dtype.is_int and not _fits(s, dtype)):
                return self._leaf(v, loc)  # from a float, or a narrowing the user wrote
            if dtype.is_bool:
                return self._clone(op, v)  # `x != 0` of the exact x
            inner = self.twin(src, op.loc)
            return self.as_i64(v if inner is src else inner, op.loc)
        if op.name in _THROUGH:
            return self._clone(op, v)
        return self._leaf(v, loc)  # program ids, aranges, loads, sizes, dots...

    def _clone(self, op: Operation, v: OpResult) -> Value:
        """``op`` on the exact twins of its operands (integers as int64), placed after it;
        ``v`` as a leaf when no operand changed."""
        twins = [self.twin(x, op.loc) for x in op.operands]
        if all(new is old for new, old in zip(twins, op.operands)):
            return self._leaf(v, op.loc)
        operands = [self.as_i64(x, op.loc) if _dtype(x) is not None and _dtype(x).is_int
                    else x for x in twins]
        new = self._place(self._make(op.name, operands, op.slots, dict(op.attrs), op.loc),
                          v).results[v.index]
        return self._leaf(new, op.loc)

    # --- carried values --------------------------------------------------------------------

    def _carry(self, op: Operation, k: int) -> Value:
        """The int64 twin of carried value ``k`` of a ``for``, ``when`` or ``pipeline``,
        carried beside the original: a body argument, an init, a yield and a result more.
        The twins of the body argument and the result are recorded first: the init and
        the yield, widened next, may read them. Returns the result's twin."""
        found = self.carried.get((id(op), k))
        if found is not None:
            return found
        body = op.regions[0].block
        wide = TileType(op.results[k].tile_type.shape, I64)
        if op.name != "when":
            self.exact[id(body.args[_first_carried(op) + k])] = body.add_arg(wide)
        result = OpResult(wide, op, len(op.results))
        op.results.append(result)
        self.exact[id(op.results[k])] = result
        self.carried[(id(op), k)] = result
        self.carriers[id(op)] = op
        init = op.variadic("inits")[k]
        op.operands.append(self.as_i64(self.twin(init, op.loc), op.loc))
        op.slots = (*op.slots, "inits")
        term = body.terminator
        assert term is not None
        term.operands.append(self.as_i64(self.twin(term.operands[k], term.loc), term.loc))
        term.slots = (*term.slots, "values")
        return result


def _dtype(v: Value) -> DType | None:
    return v.type.dtype if isinstance(v.type, TileType) else None


def _first_carried(op: Operation) -> int:
    """The index of the first carried value among the body's arguments."""
    if op.name == "for":
        return 1
    if op.name == "pipeline":
        return 1 + len(op.variadic("tensors"))
    return 0


def _live_carries(fn: Function, candidates: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The candidate carries ``(id(op), k)`` that something reads: their result or body
    argument is live. Liveness starts at every op with an effect or a region (a candidate
    carry's init and yield count only once the carry is live) and flows back through
    pure ops, to a fixed point."""
    ops = list(fn.walk())
    live: set[int] = set()
    carries: set[tuple[int, int]] = set()

    def counts(owner: Operation | None, k: int) -> bool:
        key = (id(owner), k)
        return key not in candidates or key in carries

    changed = True
    while changed:
        changed = False
        for op in ops:
            if op.opdef.is_pure and not op.regions and not op.opdef.is_terminator:
                wanted = any(id(r) in live for r in op.results)
                reads = op.operands if wanted else []
            elif op.opdef.is_terminator:
                region = op.parent.parent if op.parent is not None else None
                owner = region.parent if region is not None else None
                reads = [v for k, v in enumerate(op.operands) if counts(owner, k)]
            else:
                inits = [i for i, s in enumerate(op.slots) if s == "inits"]
                skip = {i for k, i in enumerate(inits) if not counts(op, k)}
                reads = [v for i, v in enumerate(op.operands) if i not in skip]
            for v in reads:
                if id(v) not in live:
                    live.add(id(v))
                    changed = True
        for op in ops:
            if op.name not in _CARRIERS:
                continue
            body = op.regions[0].block
            for k in range(len(op.variadic("inits"))):
                if (id(op), k) not in candidates or (id(op), k) in carries:
                    continue
                arg = body.args[_first_carried(op) + k] if op.name != "when" else None
                if id(op.results[k]) in live or (arg is not None and id(arg) in live):
                    carries.add((id(op), k))
                    changed = True
    return carries


def _drop_carry(op: Operation, k: int) -> None:
    """Remove carried value ``k`` of ``op``: its init, body argument, yield and result."""
    inits = [i for i, s in enumerate(op.slots) if s == "inits"]
    del op.operands[inits[k]]
    op.slots = op.slots[:inits[k]] + op.slots[inits[k] + 1:]
    body = op.regions[0].block
    if op.name != "when":
        body.remove_args([body.args[_first_carried(op) + k]])
    term = body.terminator
    assert term is not None
    del term.operands[k]
    term.slots = term.slots[:k] + term.slots[k + 1:]
    del op.results[k]
    for i, r in enumerate(op.results):
        r.index = i


def _accesses(block: Block) -> list[tuple[Operation, list[int]]]:
    found = []
    for top in block.ops:
        for op in top.walk():
            slots = exact_operands(op)
            if slots:
                found.append((op, slots))
    return found


def widen_offsets(module: Module) -> Module:
    """Make every offset, mask and tile index into a tensor indexed in 64 bits exact
    (int64 arithmetic); a kernel with no such tensor is returned untouched."""
    for fn in module.functions:
        if not any(wide_tensor(a) for a in fn.args):
            continue
        w = _Widener()
        for op, positions in _accesses(fn.entry):
            for i in positions:
                op.operands[i] = w.twin(op.operands[i], op.loc)
        # An original carried only to compute itself (a running offset the twin replaced)
        # goes, and with it the pure ops that read it. Decided over all of them at once:
        # DCE's rule, one carry at a time, keeps a carry that an inner `when` reads.
        dead = set(w.carried) - _live_carries(fn, set(w.carried))
        for key in sorted(dead, key=lambda c: -c[1]):
            _drop_carry(w.carriers[key[0]], key[1])
        if dead:
            eliminate_dead_code(module)
    return module


WIDEN = Pass("widen_offsets", widen_offsets,
             "offsets, masks and tile indices into tensors indexed in 64 bits, in int64")
