"""Runtime control flow: ``for i in tk.range(...)`` and ``with tk.when(cond):``.

Both trace their body once. The question is which tiles the body changes,
so they can become loop-carried values (``for``) or results (``when``). We
answer it by looking at the caller's local variables (and the lists, tuples
and dicts in them) when the body starts and when it ends:

- a tile rebound to a new value (``acc = acc + x``) or updated in place
  (``acc += x``) is carried;
- in a loop, each tile visible at the start is first pointed at a fresh
  block argument, so that reads inside the body see the value *of the
  current iteration*; arguments that turn out unchanged are replaced by the
  outer value again;
- tiles updated in place but not reachable from the locals (e.g. held by a
  caller's frame) are found through the mutation record kept by ``Tile``;
- a tile first assigned inside the body and used after it is marked so that
  the use raises a ``TraceError`` naming the variable and the fix.

``break`` and ``return`` inside a runtime loop leave the scope open; the
kernel's trace then fails with an error naming the loop.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from tilekit.errors import SourceLoc, TraceError, user_loc
from tilekit.ir.core import (
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Region,
    Value,
    replace_uses,
)
from tilekit.ir.dtypes import DType, promote
from tilekit.lang import semantics, tracer
from tilekit.lang.tile import Escaped, Tile

Path = tuple[Any, ...]


def _path_name(path: Path) -> str:
    head, *rest = path
    return str(head) + "".join(f"[{k!r}]" for k in rest)


def _snapshot(frame: FrameType) -> tuple[dict[Path, Tile], dict[Path, Any]]:
    """Tiles and Python numbers reachable from a frame's locals, by access path."""
    tiles: dict[Path, Tile] = {}
    numbers: dict[Path, Any] = {}

    def walk(obj: Any, path: Path, depth: int) -> None:
        if isinstance(obj, Tile):
            tiles[path] = obj
        elif isinstance(obj, (bool, int, float)):
            numbers[path] = obj
        elif depth < 3 and isinstance(obj, (list, tuple)) and len(obj) <= 256:
            for i, item in enumerate(obj):
                walk(item, path + (i,), depth + 1)
        elif depth < 3 and isinstance(obj, dict) and len(obj) <= 256:
            for k, item in list(obj.items()):
                walk(item, path + (k,), depth + 1)

    for name, obj in list(frame.f_locals.items()):
        walk(obj, (name,), 0)
    return tiles, numbers


def _defined_in(block: Block) -> set[int]:
    """Ids of every value defined inside ``block`` (results and nested block args)."""
    ids: set[int] = set()
    for top in block.ops:
        for op in top.walk():
            ids.update(id(r) for r in op.results)
            for region in op.regions:
                for inner in region.blocks:
                    ids.update(id(a) for a in inner.args)
    return ids


@dataclass
class _Carried:
    """One value threaded through a loop or out of a when block."""

    init: Value
    new: Value
    name: str
    exits: list[Tile]
    arg: BlockArgument | None = None


class _BodyScope:
    """What loops and when blocks share: opening a body block, finding what changed."""

    kind: tracer.ScopeKind  # set by each subclass

    def __init__(self, frame: FrameType, loc: SourceLoc | None) -> None:
        self.frame = frame
        self.loc = loc
        self.state = tracer.current()
        self.block = Block()
        self.scope = tracer.Scope(self.kind, loc, self.block)
        self.parent_block = self.state.builder.block
        self.marker: Operation | None = None

    def _open(self) -> None:
        # A placeholder keeps our position in the parent block while the body is traced.
        self.marker = self.state.builder.create("yield", {}, loc=self.loc)
        self.state.scopes.append(self.scope)
        self.state.builder.push(self.block)

    def _close(self) -> None:
        if not self.state.scopes or self.state.scopes[-1] is not self.scope:
            raise TraceError(f"a {self._what()} ended while an inner one was still open",
                             self.loc)
        self.state.scopes.pop()
        self.state.builder.pop()

    def _what(self) -> str:
        return self.kind.value

    def _place(self, op: Operation) -> None:
        assert self.marker is not None
        ops = self.parent_block.ops
        index = next(i for i, o in enumerate(ops) if o is self.marker)
        op.parent = self.parent_block
        ops[index] = op

    def _insert_before(self, op: Operation) -> None:
        ops = self.parent_block.ops
        index = next(i for i, o in enumerate(ops) if o is self.marker)
        op.parent = self.parent_block
        ops.insert(index, op)

    def _poison_escapes(self, exit_tiles: dict[Path, Tile], carried_exits: set[int]) -> None:
        """Tiles still holding body-only values after the scope: mark them."""
        inner = _defined_in(self.block)
        inner.update(id(a) for a in self.block.args)
        names: dict[int, str] = {}
        for path, t in exit_tiles.items():
            names.setdefault(id(t), _path_name(path))
        for t in self.scope.created + list(exit_tiles.values()):
            if id(t) in carried_exits or isinstance(t._value, Escaped):
                continue
            if id(t._value) in inner:
                t._value = Escaped(names.get(id(t)), self.kind, self.loc)

    def _type_check(self, name: str, before: Value, after: Value) -> None:
        if before.type != after.type:
            # Point at the body line that made the new value (the end of the body would
            # only name the loop header); name the loop's line in the message.
            loc = user_loc()
            if isinstance(after, OpResult) and after.owner.loc is not None and \
                    id(after) in _defined_in(self.block):
                loc = after.owner.loc
            line = f" (line {self.loc.line})" if self.loc else ""
            raise TraceError(
                f"`{name}` is {before.type} before the {self._what()}{line} and {after.type} "
                "inside it", loc,
                hints=["a carried value keeps its shape and type; cast with "
                       ".to(...) or broadcast before the body"])


class _LoopTrace(_BodyScope):
    """A runtime loop's body, traced once: what ``tk.range`` and ``tk.pipeline`` share.

    The body block's arguments are the loop's own leading values (``_header_args``: the
    induction variable, a pipeline's tiles), then the carried values; ``_build`` makes the
    loop op around the finished body. The ``for`` statement receives ``_targets`` of the
    leading values.
    """

    kind = tracer.ScopeKind.LOOP
    construct = "`tk.range` loop"  # how messages name the loop

    def __init__(self, frame: FrameType, loc: SourceLoc | None) -> None:
        super().__init__(frame, loc)
        self.entered = False
        self.provisional: dict[int, tuple[Tile, Value, BlockArgument]] = {}
        self.entry_paths: dict[Path, Tile] = {}
        self.entry_numbers: dict[Path, Any] = {}

    # --- what each loop says -------------------------------------------------------------------

    def _header_args(self) -> list[BlockArgument]:
        """Add the body's leading block arguments (before any carried value)."""
        raise NotImplementedError

    def _targets(self, leading: list[Tile]) -> Any:
        """What the ``for`` statement binds, given tiles of the leading arguments."""
        raise NotImplementedError

    def _build(self, inits: list[Value], region: Region) -> Operation:
        """The loop op around the finished body (not inserted anywhere yet)."""
        raise NotImplementedError

    def _what(self) -> str:
        return self.construct

    # --- the iteration protocol: the body runs exactly once ---------------------------------

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if not self.entered:
            self.entered = True
            return self._enter()
        self._exit()
        raise StopIteration

    def _enter(self) -> Any:
        leading = self._header_args()
        self.entry_paths, self.entry_numbers = _snapshot(self.frame)
        for tile in self.entry_paths.values():
            if id(tile) in self.provisional or isinstance(tile._value, Escaped):
                continue
            outer = tile.value
            arg = self.block.add_arg(outer.type)
            self.provisional[id(tile)] = (tile, outer, arg)
            tile._assign(arg)
        self._open()
        return self._targets([Tile(a) for a in leading])  # created in the scope: poisoned after

    def _exit(self) -> None:
        self._close()
        exit_paths, exit_numbers = _snapshot(self.frame)
        carried: dict[int, _Carried] = {}  # by id of the provisional block argument
        for path, entry_tile in self.entry_paths.items():
            if id(entry_tile) not in self.provisional:
                continue
            _, outer, arg = self.provisional[id(entry_tile)]
            now = exit_paths.get(path)
            if now is None or isinstance(now._value, Escaped):
                continue
            new = now._value
            if new is arg:
                continue
            name = _path_name(path)
            self._type_check(name, outer, new)
            entry = carried.get(id(arg))
            if entry is None:
                carried[id(arg)] = _Carried(outer, new, name, [now], arg)
            elif entry.new is not new:
                raise TraceError(
                    f"`{entry.name}` and `{name}` are the same tile when the loop starts, but the "
                    "loop gives them different values", self.loc,
                    hints=["copy the tile before the loop, e.g. `b = a + 0`"])
            else:
                entry.exits.append(now)
        for path, number in self.entry_numbers.items():
            now = exit_paths.get(path)
            if now is not None and not isinstance(now._value, Escaped):
                name = _path_name(path)
                raise TraceError(
                    f"`{name}` is the Python number {number!r} when the {self._what()} starts "
                    "and a tile inside it; the body was traced with the number, so it cannot "
                    "carry the value between iterations", self.loc,
                    hints=[f"start with a tile: `{name} = tk.full((), {number!r}, tk.float32)` "
                           "(or tk.zeros)"])
        # Tiles updated in place but not visible in the locals (held elsewhere).
        body_defs = _defined_in(self.block)
        for tile, before in self.scope.mutated.values():
            if id(tile) in self.provisional or id(before) in body_defs:
                continue
            if any(tile in c.exits for c in carried.values()):
                continue
            arg = self.block.add_arg(before.type)
            replace_uses(self.block.ops, before, arg)
            carried[id(arg)] = _Carried(before, tile.value, "a tile", [tile], arg)
        # Unchanged provisional arguments read the outer value again.
        restore: dict[int, Value] = {}
        dead: list[BlockArgument] = []
        for _tile, outer, arg in self.provisional.values():
            if id(arg) not in carried:
                replace_uses(self.block.ops, arg, outer)
                dead.append(arg)
                restore[id(arg)] = outer
        for t in [p[0] for p in self.provisional.values()] + self.scope.created:
            if id(t._value) in restore:
                t._assign(restore[id(t._value)])
        self.block.remove_args(dead)
        order = [c for c in carried.values()]
        order.sort(key=lambda c: c.arg.index if c.arg is not None else 0)
        yield_op = self.state.builder.create("yield", {"values": [c.new for c in order]},
                                             loc=self.loc, insert=False)
        self.block.append(yield_op)
        try:
            op = self._build([c.init for c in order], Region([self.block]))
        except Exception as exc:  # pragma: no cover - a tracer bug, not a user error
            raise TraceError(f"internal error building a {self._what()}: {exc}",
                             self.loc) from exc
        self._place(op)
        exits: set[int] = set()
        for c, result in zip(order, op.results):
            for t in c.exits:
                t._assign(result)
                exits.add(id(t))
        # An entry tile rebound away from but still visible under another name keeps the
        # outer value; one still at its argument would read the carried value: ambiguous.
        for tile, outer, arg in self.provisional.values():
            if id(arg) in carried and tile._value is arg:
                visible = [p for p, t in exit_paths.items() if t is tile]
                if visible:
                    raise TraceError(
                        f"`{_path_name(visible[0])}` refers to the same tile as "
                        f"`{carried[id(arg)].name}`, which the loop reassigns", self.loc,
                        hints=["copy the tile before the loop, e.g. `b = a + 0`"])
                tile._assign(outer)
        self._poison_escapes(exit_paths, exits)


class _RangeTrace(_LoopTrace):
    """``tk.range``: a ``for`` op whose body starts with the induction variable."""

    def __init__(self, frame: FrameType, loc: SourceLoc | None,
                 bounds: tuple[Tile, Tile, Tile]) -> None:
        super().__init__(frame, loc)
        self.bounds = bounds

    def _header_args(self) -> list[BlockArgument]:
        return [self.block.add_arg(self.bounds[0].type)]

    def _targets(self, leading: list[Tile]) -> Tile:
        return leading[0]

    def _build(self, inits: list[Value], region: Region) -> Operation:
        lo, hi, step = self.bounds
        return self.state.builder.create(
            "for", {"lo": lo.value, "hi": hi.value, "step": step.value, "inits": inits},
            regions=[region], loc=self.loc, insert=False)


class range:  # noqa: A001  (mirrors Python's range on purpose)
    """``for i in tk.range(lo, hi, step)``: a loop that runs on the device.

    The body is traced once into an IR loop. Bounds may be runtime scalars or
    Python ints. Tiles the body reassigns (``acc = acc + x``) or updates in
    place (``acc += x``) carry their value from one iteration to the next.
    For a loop unrolled at trace time, use ``tk.static_range``.
    """

    def __init__(self, start: Any, stop: Any = None, step: Any = 1) -> None:
        if stop is None:
            start, stop = 0, start
        self.args = (start, stop, step)
        self.loc = user_loc()

    def __iter__(self) -> _LoopTrace:
        return _RangeTrace(user_frame(), self.loc, _bounds(*self.args))


def user_frame() -> FrameType:
    """The innermost frame outside the tilekit package: the kernel body whose locals a loop
    or ``when`` block watches."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PKG):
        frame = frame.f_back  # type: ignore[assignment]
    return frame


_PKG = __file__.rsplit("/lang/", 1)[0]


def _bounds(start: Any, stop: Any, step: Any) -> tuple[Tile, Tile, Tile]:
    items = [start, stop, step]
    for x in items:
        if isinstance(x, Tile):
            if x.ndim != 0 or not x.dtype.is_int:
                raise TraceError(f"tk.range bounds must be integer scalars, got {x.type}",
                                 user_loc())
        elif not isinstance(x, int) or isinstance(x, bool):
            raise TraceError(f"tk.range bounds must be integers, got {x!r}", user_loc())
    if isinstance(step, int) and step == 0:
        raise TraceError("tk.range step must not be zero", user_loc())
    dtype = DType.INT32
    for x in items:
        if isinstance(x, Tile):
            dtype = promote(dtype, x.dtype)
        elif not -(2**31) <= x < 2**31:
            dtype = promote(dtype, DType.INT64)
    return tuple(semantics.cast(x, dtype) for x in items)  # type: ignore[return-value]


def static_range(*args: int) -> Any:
    """A loop unrolled while tracing (plain Python ``range``; arguments must be ints)."""
    for a in args:
        if isinstance(a, Tile):
            raise TraceError("tk.static_range needs compile-time ints, got a runtime value",
                             user_loc(), hints=["use tk.range for a loop with runtime bounds"])
    return builtins.range(*args)


class when(_BodyScope):
    """``with tk.when(cond):`` runs its body on the device only where ``cond`` (a scalar)
    is true. Tiles it reassigns keep their old value when ``cond`` is false."""

    kind = tracer.ScopeKind.WHEN

    def __init__(self, cond: Any) -> None:
        loc = user_loc()
        c = semantics.to_tile(cond)
        if c.ndim != 0:
            raise TraceError(
                f"tk.when needs a scalar condition, got a tile of shape {c.shape}", loc,
                hints=["for per-element choices use tk.where(cond, a, b), or a mask on "
                       "tk.load/tk.store"])
        if not c.dtype.is_bool:
            raise TraceError(f"tk.when needs a bool condition, got {c.dtype}", loc,
                             hints=["compare explicitly, e.g. `n != 0`"])
        super().__init__(user_frame(), loc)
        self.cond = c

    def __enter__(self) -> None:
        self.entry_paths, self.entry_numbers = _snapshot(self.frame)
        self.entry_values = {p: t._value for p, t in self.entry_paths.items()}
        self._open()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is not None:
            return False  # the trace is abandoned; nothing to tidy
        self._close()
        exit_paths, _ = _snapshot(self.frame)
        carried: dict[int, _Carried] = {}  # by id of the exit tile
        for path, before in self.entry_values.items():
            now = exit_paths.get(path)
            if now is None or isinstance(now._value, Escaped) or isinstance(before, Escaped):
                continue
            if now._value is before or id(now) in carried:
                continue
            name = _path_name(path)
            self._type_check(name, before, now._value)
            carried[id(now)] = _Carried(before, now._value, name, [now])
        for path, number in self.entry_numbers.items():
            now = exit_paths.get(path)
            if now is None or isinstance(now._value, Escaped) or id(now) in carried:
                continue
            init_op = self.state.builder.create(
                "constant", {}, {"value": number, "shape": now.shape, "dtype": now.dtype},
                loc=self.loc, insert=False)
            self._insert_before(init_op)
            carried[id(now)] = _Carried(init_op.result, now._value, _path_name(path), [now])
        body_defs = _defined_in(self.block)
        for tile, before in self.scope.mutated.values():
            if id(tile) in carried or id(before) in body_defs or tile._value is before:
                continue
            carried[id(tile)] = _Carried(before, tile._value, "a tile", [tile])
        order = list(carried.values())
        self.block.append(self.state.builder.create(
            "yield", {"values": [c.new for c in order]}, loc=self.loc, insert=False))
        op = self.state.builder.create(
            "when", {"cond": self.cond.value, "inits": [c.init for c in order]},
            regions=[Region([self.block])], loc=self.loc, insert=False)
        self._place(op)
        for c, result in zip(order, op.results):
            for t in c.exits:
                t._assign(result)
        self._poison_escapes(exit_paths, set(carried))
        return False


def check_closed(state: tracer.TraceState) -> None:
    """Called when the kernel body returns: every runtime scope must have ended."""
    if state.scopes:
        scope = state.scopes[-1]
        what = scope.kind.value
        raise TraceError(
            f"the {what} starting here was left early (by `break`, `return` or `continue` "
            "out of an enclosing loop)", scope.loc,
            hints=["runtime loops always run to their end: guard the rest of the body with "
                   "`tk.when(cond)` or masks instead of `break`/`return`"])

