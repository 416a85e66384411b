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

In a kernel rewritten by ``tilekit.lang.rewrite`` (every kernel whose source Python can
read), the frame also tells each scope which names its body assigns (``FlowNames``, through
``tilekit.lang.flow``): Python numbers among them become runtime scalars before a runtime
loop, a name that holds a number after the body is carried as a constant of its type, a
name first bound in the body and read after it is carried from a zero start, and the frame
rebinds the names whose values changed (``rebind``). Without that help (a function whose
source cannot be read), a Python number the body changes is an error rather than a value
frozen at trace time. ``break`` and ``return`` in such a function leave the scope open; the
kernel's trace then fails with an error naming the loop.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np

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
from tilekit.ir.dtypes import DType, promote, python_scalar_dtype
from tilekit.ir.types import TileType
from tilekit.lang import semantics, tracer
from tilekit.lang.rewrite import TEMP
from tilekit.lang.tile import Escaped, Tile

Path = tuple[Any, ...]



def _path_name(path: Path) -> str:
    head, *rest = path
    return str(head) + "".join(f"[{k!r}]" for k in rest)


def is_number(obj: Any) -> bool:
    """A Python (or numpy) number: what a runtime scope turns into a runtime scalar."""
    return isinstance(obj, (bool, int, float, np.bool_, np.integer, np.floating))


@dataclass
class _Snapshot:
    """What a frame's locals hold, by access path: tiles, numbers, the sizes of the lists
    and dicts (a body that appends to one changes it once per trace, not per iteration),
    and every other leaf object."""

    tiles: dict[Path, Tile] = field(default_factory=dict)
    numbers: dict[Path, Any] = field(default_factory=dict)
    sizes: dict[Path, int] = field(default_factory=dict)
    objects: dict[Path, Any] = field(default_factory=dict)


def _walk(obj: Any, path: Path, depth: int, snap: _Snapshot) -> None:
    if isinstance(obj, Tile):
        snap.tiles[path] = obj
    elif is_number(obj):
        snap.numbers[path] = obj
    elif depth < 3 and isinstance(obj, (list, tuple)) and len(obj) <= 256:
        if isinstance(obj, list):
            snap.sizes[path] = len(obj)
        for i, item in enumerate(obj):
            _walk(item, path + (i,), depth + 1, snap)
    elif depth < 3 and isinstance(obj, dict) and len(obj) <= 256:
        snap.sizes[path] = len(obj)
        for k, item in list(obj.items()):
            _walk(item, path + (k,), depth + 1, snap)
    else:
        snap.objects[path] = obj


def _snapshot(frame: FrameType) -> _Snapshot:
    """Tiles, Python numbers, container sizes and other objects reachable from a frame's
    locals, by access path."""
    snap = _Snapshot()
    for name, obj in list(frame.f_locals.items()):
        if not name.startswith(TEMP):  # the rewrite's temporaries hold copies
            _walk(obj, (name,), 0, snap)
    return snap


class PythonNumber(Tile):
    """A Python number made a runtime scalar for a runtime loop. Like the number it stands
    for, it is immutable: ``c += 1`` rebinds ``c`` to a new tile instead of updating this one
    in place (so ``total += x_f32`` on an int is the type change it is, not an in-place
    update error)."""

    __slots__ = ()

    def _update(self, new: Tile) -> Tile:
        return new


def promote_numbers(value: Any, depth: int = 0) -> Any:
    """``value`` with its Python numbers made runtime scalars (constants: int32, int64 when
    the value needs it, float32 or bool), rebuilding the tuples and lists that hold them;
    ``value`` itself when it holds none."""
    if isinstance(value, Tile):
        return value
    if is_number(value):
        v = value.item() if isinstance(value, np.generic) else value
        scalar = semantics.constant(v, (), python_scalar_dtype(value))
        scalar.__class__ = PythonNumber
        return scalar
    if depth < 3 and isinstance(value, (list, tuple)) and len(value) <= 256:
        items = [promote_numbers(x, depth + 1) for x in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(items) if isinstance(value, list) or type(value) is tuple \
            else type(value)(*items)
    return value


def tiles_in(value: Any) -> list[Tile]:
    """The tiles a value holds (itself, or in its tuples, lists and dicts)."""
    snap = _Snapshot()
    _walk(value, ("",), 0, snap)
    return list(snap.tiles.values())


def _rebuilt(value: Any, path: Path, replaced: dict[Path, Tile]) -> Any:
    """``value`` (found at ``path``) with the leaves at the paths of ``replaced`` swapped."""
    if path in replaced:
        return replaced[path]
    if isinstance(value, (list, tuple)) and any(p[:len(path)] == path for p in replaced):
        items = [_rebuilt(x, path + (i,), replaced) for i, x in enumerate(value)]
        return list(items) if isinstance(value, list) else \
            tuple(items) if type(value) is tuple else type(value)(*items)
    return value


def _zero(t: TileType) -> Any:
    return False if t.dtype.is_bool else 0.0 if t.dtype.is_float else 0


@dataclass(frozen=True)
class FlowNames:
    """What the rewritten frame says of a scope's body: the names it assigns, and which of
    them are read after the scope (``live``; for a loop, also its own targets when they
    are read after it)."""

    names: frozenset[str]
    live: frozenset[str]


def _under(path: Path, names: frozenset[str]) -> bool:
    return path[0] in names


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - objects whose == raises are simply different
        return False


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


def _literal_like(number: Any, value: Value) -> str:
    """``number`` written as a literal of ``value``'s type, for hints."""
    t = value.tile_type
    if t.shape:
        return f"tk.full({t.shape}, {number!r}, tk.{t.dtype.long})"
    if t.dtype.is_float:
        return repr(float(number))
    if t.dtype.is_bool:
        return repr(bool(number))
    return f"tk.full((), {number!r}, tk.{t.dtype.long})"


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 40 else f"a {type(obj).__name__}"


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

    def __init__(self, frame: FrameType, loc: SourceLoc | None,
                 flow: FlowNames | None = None) -> None:
        self.frame = frame
        self.loc = loc
        self.state = tracer.current()
        self.block = Block()
        self.scope = tracer.Scope(self.kind, loc, self.block)
        self.parent_block = self.state.builder.block
        self.marker: Operation | None = None
        self.flow = flow
        #: name -> the value the rewritten frame binds to it after the scope
        self.rebind: dict[str, Any] = {}

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

    # --- Python values the body changed (see FlowNames) --------------------------------------

    def _follows(self, path: Path) -> bool:
        """Whether the rewritten frame rebinds the name at the head of ``path`` after us."""
        return self.flow is not None and path[0] in self.flow.names

    def _body_constant(self, value: Any, t: TileType) -> Tile:
        """``value`` as a constant tile of type ``t``, made at the end of the (closed) body."""
        self.state.builder.push(self.block)
        try:
            return semantics.constant(value, t.shape, t.dtype)
        finally:
            self.state.builder.pop()

    def _constant_before(self, value: Any, t: TileType) -> Value:
        """``value`` as a constant of type ``t`` in the parent block, before this scope."""
        semantics._check_fits(value, t.dtype)
        op = self.state.builder.create(
            "constant", {}, {"value": value.item() if isinstance(value, np.generic) else value,
                             "shape": t.shape, "dtype": t.dtype},
            loc=self.loc, insert=False)
        self._insert_before(op)
        return op.result

    def _unbound_zero(self, name: str, t: TileType) -> Value:
        """The value of a name not bound yet, before this scope: zero. Noted in the trace, so
        that a loop around us that carries the name reads its previous iteration instead."""
        value = self._constant_before(_zero(t), t)
        self.state.unbound_zeros.append((value, name))
        return value

    def _read_previous_iteration(self, name: str, arg: BlockArgument, body: set[int]) -> None:
        """Where a scope inside this loop's body took ``name`` as unbound (``_unbound_zero``),
        it now reads the value the previous iteration left (``arg``): in Python a name a loop
        binds stays bound in its later iterations."""
        for value, noted in self.state.unbound_zeros:
            if noted == name and id(value) in body and value.type == arg.type:
                replace_uses(self.block.ops, value, arg)

    def _cannot_follow(self, path: Path, before: Any, after: Any) -> TraceError:
        name = _path_name(path)
        line = f" (line {self.loc.line})" if self.loc else ""
        if len(path) > 1:
            where = "an element of a list, tuple or dict"
            fix = (f"keep the value in a plain variable (`v = {name}` before the "
                   f"{self._what()}, `v = ...` inside it) and store it back after it")
        else:
            where = "a name the tracer cannot rebind (its function's source cannot be read)"
            fix = (f"start with a tile: `{name} = tk.full((), {before!r}, tk.int32)` (or "
                   "tk.float32), or define the kernel in a file")
        return TraceError(
            f"`{name}` is {before!r} when the {self._what()}{line} starts and {after!r} after "
            f"its body, but it is {where}: the body is traced once, so the change would not "
            "depend on the runtime condition or iteration", self.loc, hints=[fix])

    def _check_unfollowed(self, entry: _Snapshot, exit_: _Snapshot,
                          numbers_followed: bool) -> None:
        """Numbers the body changed where no name is rebound (anywhere, unless
        ``numbers_followed``: a ``when`` merges numbers under the names it rebinds), and
        lists or dicts whose size it changed: errors."""
        for path, number in entry.numbers.items():
            if (numbers_followed and self._follows(path)) or path not in exit_.numbers:
                continue
            now = exit_.numbers[path]
            if not _same(now, number):
                raise self._cannot_follow(path, number, now)
        for path, size in entry.sizes.items():
            if self._follows(path) and self.flow is not None and \
                    path[0] not in self.flow.live:
                continue
            now_size = exit_.sizes.get(path)
            if now_size is not None and now_size != size:
                what = "list" if isinstance(self._lookup(path), list) else "dict"
                raise TraceError(
                    f"the {what} `{_path_name(path)}` has {size} items when the {self._what()} "
                    f"starts and {now_size} after its body; the body is traced once, so it "
                    "would change once, not once per iteration or only where the condition "
                    "holds", self.loc,
                    hints=["build Python lists outside runtime loops and branches, or keep "
                           "values in tiles (tk.where, a tile of results)"])

    def _lookup(self, path: Path) -> Any:
        obj: Any = self.frame.f_locals.get(path[0])
        for key in path[1:]:
            try:
                obj = obj[key]
            except Exception:  # noqa: BLE001
                return None
        return obj

    def _check_objects(self, entry: _Snapshot, exit_: _Snapshot) -> None:
        """A live name bound before the body to an object that is neither a tile nor a
        number, and rebound to a different one: its value would depend on the trace."""
        if self.flow is None:
            return
        for path, obj in exit_.objects.items():
            if path[0] not in self.flow.live or path not in entry.objects:
                continue
            if not _same(entry.objects[path], obj):
                line = f" (line {self.loc.line})" if self.loc else ""
                raise TraceError(
                    f"`{_path_name(path)}` is rebound inside the {self._what()}{line} from "
                    f"{_short(entry.objects[path])} to {_short(obj)} and read after it; only "
                    "tiles and Python numbers can take a different value at run time",
                    self.loc, hints=["give the value inside the body a name of its own"])

    def _new_live_tiles(self, entry: _Snapshot, exit_: _Snapshot,
                        inner: set[int]) -> list[tuple[Path, Tile]]:
        """Tiles computed in the body under names first bound there and read after it."""
        if self.flow is None:
            return []
        bound = {p[0] for p in (*entry.tiles, *entry.numbers, *entry.sizes, *entry.objects)}
        # a loop's own targets are live but not among the names its body assigns: whatever
        # they held before, the loop binds them anew
        new = {n for n in self.flow.live if n not in bound or n not in self.flow.names}
        seen: set[int] = set()
        out = []
        for path, t in exit_.tiles.items():
            if path[0] not in new or id(t) in seen:
                continue
            if isinstance(t._value, Escaped) or id(t._value) not in inner:
                continue
            seen.add(id(t))
            out.append((path, t))
        return out

    def _poison_escapes(self, exit_tiles: dict[Path, Tile], carried_exits: set[int],
                        others: Sequence[Tile] = ()) -> None:
        """Tiles still holding body-only values after the scope: mark them (``others``: a
        loop's entry tiles and the tiles the body updated in place, which the body may have
        rebound away from)."""
        inner = _defined_in(self.block)
        inner.update(id(a) for a in self.block.args)
        names: dict[int, str] = {}
        for path, t in exit_tiles.items():
            names.setdefault(id(t), _path_name(path))
        for t in self.scope.created + list(exit_tiles.values()) + list(others):
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
            promoted = getattr(self, "promoted", {}).get(name)
            if promoted is not None and not isinstance(promoted[0], (list, tuple)):
                number = promoted[0]
                raise TraceError(
                    f"`{name}` is the Python {type(number).__name__} {number!r} before the "
                    f"{self._what()}{line}, carried as a runtime {before.type}, and becomes "
                    f"a {after.type} inside it", loc,
                    hints=["a carried value keeps its type: start it with the type the loop "
                           f"gives it, e.g. `{name} = {_literal_like(number, after)}`"])
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

    def __init__(self, frame: FrameType, loc: SourceLoc | None,
                 flow: FlowNames | None = None) -> None:
        super().__init__(frame, loc, flow)
        self.entered = False
        self.provisional: dict[int, tuple[Tile, Value, BlockArgument]] = {}
        self.entry = _Snapshot()
        #: name -> (its Python value, the value with runtime scalars, [(scalar, its value)])
        self.promoted: dict[str, tuple[Any, Any, list[tuple[Tile, Value]]]] = {}

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
        self.entry = _snapshot(self.frame)
        for tile in self.entry.tiles.values():
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
        exit_ = _snapshot(self.frame)
        carried: dict[int, _Carried] = {}  # by id of the provisional block argument
        replaced: dict[Path, Tile] = {}  # numbers after the body, made constant tiles
        for path, entry_tile in self.entry.tiles.items():
            if id(entry_tile) not in self.provisional:
                continue
            _, outer, arg = self.provisional[id(entry_tile)]
            now = exit_.tiles.get(path)
            if now is None and path in exit_.numbers and self._follows(path):
                now = replaced[path] = self._body_constant(exit_.numbers[path], outer.type)
            elif now is None and path in exit_.numbers:
                raise self._cannot_follow(path, "a tile", exit_.numbers[path])
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
        for path, number in self.entry.numbers.items():
            now = exit_.tiles.get(path)
            if now is not None and not isinstance(now._value, Escaped):
                name = _path_name(path)
                raise TraceError(
                    f"`{name}` is the Python number {number!r} when the {self._what()} starts "
                    "and a tile inside it; the body was traced with the number, so it cannot "
                    "carry the value between iterations", self.loc,
                    hints=[f"start with a tile: `{name} = tk.full((), {number!r}, tk.float32)` "
                           "(or tk.zeros)"])
        self._check_unfollowed(self.entry, exit_, numbers_followed=False)
        self._check_objects(self.entry, exit_)
        # Tiles updated in place but not visible in the locals (held elsewhere).
        body_defs = _defined_in(self.block)
        for tile, before in self.scope.mutated.values():
            if id(tile) in self.provisional or id(before) in body_defs \
                    or isinstance(tile._value, Escaped):
                continue
            if any(tile in c.exits for c in carried.values()):
                continue
            arg = self.block.add_arg(before.type)
            replace_uses(self.block.ops, before, arg)
            carried[id(arg)] = _Carried(before, tile.value, "a tile", [tile], arg)
        # Names first bound in the body and read after it: carried from zero.
        inner = body_defs | {id(a) for a in self.block.args}
        already = {id(t) for c in carried.values() for t in c.exits}
        for path, tile in self._new_live_tiles(self.entry, exit_, inner):
            if id(tile) in already:  # also under a name the loop carries (`last = i`)
                continue
            t = tile.type
            arg = self.block.add_arg(t)
            name = _path_name(path)
            self._read_previous_iteration(name, arg, body_defs)
            carried[id(arg)] = _Carried(self._unbound_zero(name, t), tile.value, name,
                                        [tile], arg)
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
                visible = [p for p, t in exit_.tiles.items() if t is tile]
                if visible:
                    raise TraceError(
                        f"`{_path_name(visible[0])}` refers to the same tile as "
                        f"`{carried[id(arg)].name}`, which the loop reassigns", self.loc,
                        hints=["copy the tile before the loop, e.g. `b = a + 0`"])
                tile._assign(outer)
        self._poison_escapes(exit_.tiles, exits, [p[0] for p in self.provisional.values()]
                             + [t for t, _ in self.scope.mutated.values()])
        self._set_rebind(exit_, replaced)

    def _set_rebind(self, exit_: _Snapshot, replaced: dict[Path, Tile]) -> None:
        """The values the frame rebinds: numbers carried as tiles put back in their places;
        Python numbers made runtime scalars for the loop (``promoted``) that the loop left
        unchanged, back to the numbers."""
        if self.flow is None:
            return
        for name in {p[0] for p in replaced}:
            self.rebind[name] = _rebuilt(self.frame.f_locals.get(name), (name,), replaced)
        for name, (original, promoted, tiles) in self.promoted.items():
            if name in self.rebind or self.frame.f_locals.get(name) is not promoted:
                continue
            if all(t._value is v for t, v in tiles):
                self.rebind[name] = original

class _RangeTrace(_LoopTrace):
    """``tk.range``: a ``for`` op whose body starts with the induction variable."""

    def __init__(self, frame: FrameType, loc: SourceLoc | None,
                 bounds: tuple[Tile, Tile, Tile], flow: FlowNames | None = None) -> None:
        super().__init__(frame, loc, flow)
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
        self.flow: FlowNames | None = None  # set by tilekit.lang.flow.loop_enter
        self.promoted: dict[str, tuple[Any, Any, list[tuple[Tile, Value]]]] = {}
        self.last_trace: _LoopTrace | None = None

    def __iter__(self) -> _LoopTrace:
        trace = _RangeTrace(user_frame(), self.loc, _bounds(*self.args), self.flow)
        trace.promoted = self.promoted
        self.last_trace = trace
        return trace


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
        super().__init__(user_frame(), loc)  # flow: set by tilekit.lang.flow.scope_enter
        self.cond = c.value  # now: the body may update the condition's tile in place

    def __enter__(self) -> None:
        self.entry = _snapshot(self.frame)
        self.entry_values = {p: t._value for p, t in self.entry.tiles.items()}
        self._open()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is not None:
            return False  # the trace is abandoned; nothing to tidy
        self._close()
        exit_ = _snapshot(self.frame)
        carried: dict[int, _Carried] = {}  # by id of the exit tile
        replaced: dict[Path, Tile] = {}  # numbers after the body, made constant tiles
        for path, before in self.entry_values.items():
            now = exit_.tiles.get(path)
            if now is None and path in exit_.numbers and not isinstance(before, Escaped):
                if not self._follows(path):
                    raise self._cannot_follow(path, "a tile", exit_.numbers[path])
                now = replaced[path] = self._body_constant(exit_.numbers[path],
                                                           before.tile_type)
            if now is None or isinstance(now._value, Escaped) or isinstance(before, Escaped):
                continue
            if now._value is before or id(now) in carried:
                continue
            name = _path_name(path)
            self._type_check(name, before, now._value)
            carried[id(now)] = _Carried(before, now._value, name, [now])
        for path, number in self.entry.numbers.items():
            now = exit_.tiles.get(path)
            if now is None and path in exit_.numbers and self._follows(path):
                after = exit_.numbers[path]
                if _same(after, number):
                    continue
                t = TileType((), promote(python_scalar_dtype(number), python_scalar_dtype(after)))
                now = replaced[path] = self._body_constant(after, t)
                carried[id(now)] = _Carried(self._constant_before(number, t), now.value,
                                            _path_name(path), [now])
                continue
            if now is None or isinstance(now._value, Escaped) or id(now) in carried:
                continue
            carried[id(now)] = _Carried(self._constant_before(number, now.type), now._value,
                                        _path_name(path), [now])
        self._check_unfollowed(self.entry, exit_, numbers_followed=True)
        self._check_objects(self.entry, exit_)
        body_defs = _defined_in(self.block)
        for tile, before in self.scope.mutated.values():
            if id(tile) in carried or id(before) in body_defs or tile._value is before \
                    or isinstance(tile._value, Escaped):  # updated, then left in a loop
                continue
            carried[id(tile)] = _Carried(before, tile._value, "a tile", [tile])
        # Names first bound in the body and read after it: zero where the condition is false.
        already = {id(t) for c in carried.values() for t in c.exits}
        for path, tile in self._new_live_tiles(self.entry, exit_, body_defs):
            if id(tile) not in already:
                name = _path_name(path)
                carried[id(tile)] = _Carried(self._unbound_zero(name, tile.type), tile.value,
                                             name, [tile])
        order = list(carried.values())
        self.block.append(self.state.builder.create(
            "yield", {"values": [c.new for c in order]}, loc=self.loc, insert=False))
        op = self.state.builder.create(
            "when", {"cond": self.cond, "inits": [c.init for c in order]},
            regions=[Region([self.block])], loc=self.loc, insert=False)
        self._place(op)
        for c, result in zip(order, op.results):
            for t in c.exits:
                t._assign(result)
        # (a tile updated in place in the body, then left by its name, keeps a body value)
        self._poison_escapes(exit_.tiles, set(carried),
                             [t for t, _ in self.scope.mutated.values()])
        for name in {p[0] for p in replaced}:
            self.rebind[name] = _rebuilt(self.frame.f_locals.get(name), (name,), replaced)
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

