"""The tracing state: where ops go while a kernel's Python body runs.

A kernel is traced by calling its Python function once with proxy objects
(``Tile``, ``TensorArg``); every tilekit operation the body performs emits
IR at the current insertion point through ``emit``, stamped with the user's
source line. ``emit`` is also where a malformed op becomes a ``TraceError``
naming that line.

Open control-flow scopes (``tk.range`` loops, ``tk.when`` blocks) are kept on
a stack here so that the control module can find the tiles a body creates
or mutates; see ``control.py`` for how those become loop-carried values.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilekit.errors import SourceLoc, TraceError, user_loc
from tilekit.ir.builder import Builder
from tilekit.ir.core import Block, Function, Operation, Region, Value
from tilekit.ir.opdef import OpTypeError
from tilekit.ir.types import TileType


class ScopeKind(enum.Enum):
    LOOP = "`tk.range` loop"
    PIPELINE = "`tk.pipeline` loop"
    WHEN = "`tk.when` block"


@dataclass
class Scope:
    """An open ``tk.range`` or ``tk.when`` body."""

    kind: ScopeKind
    loc: SourceLoc | None
    block: Block
    # Tiles created while the body was traced (to fix up or poison at exit).
    created: list[Any] = field(default_factory=list)
    # Tiles updated in place while the body was traced: id -> (tile, value before).
    mutated: dict[int, tuple[Any, Value]] = field(default_factory=dict)


# The most elements one tile may have (Triton's limit too). A tile lives in one program's
# registers, and a CTA has 64 K 32-bit registers (tilekit.rt.driver.REGISTER_FILE): a tile
# of 2**20 float32 already needs 16 times that and lives in local memory. Past it no kernel
# is reasonable, and the interpreter would allocate gigabytes for every op.
MAX_TILE_ELEMENTS = 2**20


def _check_tile_size(type_: object, loc: SourceLoc | None) -> None:
    if isinstance(type_, TileType) and type_.numel > MAX_TILE_ELEMENTS:
        raise TraceError(
            f"a tile of shape {type_.shape} has {type_.numel:,} elements; a tile may have at "
            f"most {MAX_TILE_ELEMENTS:,} (2**20)", loc,
            hints=["a tile is held in one program's registers: loop over chunks of it with "
                   "`for k in tk.range(...)`, or give each program a smaller tile and launch "
                   "more programs"])


class TraceState:
    def __init__(self, function: Function) -> None:
        self.function = function
        self.builder = Builder(function.entry)
        self.scopes: list[Scope] = []
        self._tensor_scalars: dict[tuple[int, str, int], Value] = {}
        self._hoisted = 0
        #: Python loops unrolled while a ``break`` or ``return`` in them depends on a runtime
        #: value, by source line (``tilekit.lang.flow.static_stop`` caps them).
        self.guarded_unrolls: Counter[tuple[str, int]] = Counter()
        #: Zeros standing for names a scope's body binds first (``control``): a loop around
        #: that scope that carries the name replaces them with its previous iteration's value.
        self.unbound_zeros: list[tuple[Value, str]] = []

    def emit(
        self,
        op: str,
        operands: Mapping[str, Value | Sequence[Value] | None] | None = None,
        attrs: Mapping[str, Any] | None = None,
        regions: Sequence[Region] = (),
        loc: SourceLoc | None = None,
    ) -> Operation:
        loc = loc if loc is not None else user_loc()
        try:
            created = self.builder.create(op, operands, attrs, regions, loc)
        except OpTypeError as exc:
            raise TraceError(f"invalid `{op}`: {exc}", loc) from None
        for result in created.results:
            _check_tile_size(result.type, loc)
        return created

    def tensor_scalar(self, tensor: Value, kind: str, axis: int) -> Value:
        """A tensor's size or stride, emitted once at the top of the kernel so
        that every scope can read it."""
        key = (id(tensor), kind, axis)
        if key not in self._tensor_scalars:
            op = self.builder.create(kind, {"tensor": tensor}, {"axis": axis},
                                     loc=self.function.loc, insert=False)
            self.function.entry.insert(self._hoisted, op)
            self._hoisted += 1
            self._tensor_scalars[key] = op.result
        return self._tensor_scalars[key]

    # --- scope bookkeeping (used by Tile and control) ---------------------------------------

    def note_created(self, tile: Any) -> None:
        if self.scopes:
            self.scopes[-1].created.append(tile)

    def note_mutation(self, tile: Any, before: Value) -> None:
        for scope in self.scopes:
            scope.mutated.setdefault(id(tile), (tile, before))


_local = threading.local()


def current() -> TraceState:
    """The active trace, or a clear error when called outside a kernel."""
    state = getattr(_local, "state", None)
    if state is None:
        raise TraceError(
            "tilekit operations can only be used inside a @tilekit.kernel function while it "
            "is traced", user_loc(),
            hints=["call the kernel as kern[grid](args...) instead of calling it directly"])
    return state


def active() -> TraceState | None:
    return getattr(_local, "state", None)


class tracing:
    """Context manager installing a ``TraceState`` for the current thread."""

    def __init__(self, state: TraceState) -> None:
        self.state = state
        self._saved: TraceState | None = None

    def __enter__(self) -> TraceState:
        self._saved = getattr(_local, "state", None)
        _local.state = self.state
        return self.state

    def __exit__(self, *exc: object) -> None:
        _local.state = self._saved


def new_function(name: str, loc: SourceLoc | None, constexprs: dict[str, Any]) -> Function:
    return Function(name, Region([Block()]), constexprs, loc)
