"""The hooks rewritten kernels call (``_tk.*`` in ``tilekit.lang.rewrite``'s output).

Each hook is the identity for Python values and Python loops, so a rewritten function
computes what the original does; with a runtime scope (``tk.range``, ``tk.pipeline``,
``tk.when``) they hand the tracer (``tilekit.lang.control``) the names the scope's body
assigns, and give the frame back the values to rebind after it:

- ``loop_enter(it, names, live, locals())``: before a ``for``. If ``it`` is a runtime loop,
  the names its body assigns that hold Python numbers become runtime scalars now (int ->
  int32, or int64 when the value needs it; float -> float32; bool -> bool), so that the body,
  traced once, reads the value of the current iteration and the loop carries it.
- ``loop_exit(it)`` / ``scope_exit(cm)``: the names to rebind after the scope (a number the
  body assigned, now the loop's or the branch's result; a name first bound in the body).
- ``guard_mode(*flags)`` / ``guard(mode, *flags)``: the statements a ``return``, ``break`` or
  ``continue`` may skip run natively (mode 0: every flag a Python False), not at all
  (mode 1: one a Python True), or under ``tk.when(~(flag | ...))`` (mode 2).
- ``static_stop(it, *flags)``: leave a Python loop natively once a flag is a Python True.
- ``check_outer(value, what)``: a tile or number stored where the tracer cannot follow it
  (an attribute, a global) inside a runtime scope is an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from tilekit.errors import TraceError, user_loc
from tilekit.lang import control, tracer
from tilekit.lang.convert import call  # noqa: F401  (the rewritten code's `_tk.call`)
from tilekit.lang.tile import Tile

_NOTHING: dict[str, Any] = {}


class _NoReturn:
    """The value a function's return slot holds before a ``return`` ran."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no return yet>"


NO_RETURN = _NoReturn()


def no_return() -> _NoReturn:
    return NO_RETURN


def final(value: Any) -> Any:
    """What a rewritten function returns: its return slot (None if no ``return`` ran)."""
    return None if value is NO_RETURN else value


def _runtime_loop(it: Any) -> bool:
    from tilekit.lang.pipeline import pipeline

    return isinstance(it, (control.range, pipeline))


def loop_enter(it: Any, names: tuple[str, ...], live: tuple[str, ...],
               local_vars: Mapping[str, Any]) -> dict[str, Any]:
    if not _runtime_loop(it) or tracer.active() is None:
        return _NOTHING
    it.flow = control.FlowNames(frozenset(names), frozenset(live))
    it.promoted = {}
    out: dict[str, Any] = {}
    for name in names:
        if name in local_vars:
            value = local_vars[name]
            promoted = control.promote_numbers(value)
            if promoted is not value:
                out[name] = promoted
                tiles = control.tiles_in(promoted)
                it.promoted[name] = (value, promoted, [(t, t._value) for t in tiles])
    return out


def loop_exit(it: Any) -> dict[str, Any]:
    if not _runtime_loop(it):
        return _NOTHING
    trace = getattr(it, "last_trace", None)
    return trace.rebind if trace is not None else _NOTHING


def scope_enter(cm: Any, names: tuple[str, ...], live: tuple[str, ...],
                local_vars: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(cm, control.when):
        cm.flow = control.FlowNames(frozenset(names), frozenset(live))
    return _NOTHING


def scope_exit(cm: Any) -> dict[str, Any]:
    if isinstance(cm, control.when):
        return cm.rebind
    return _NOTHING


def guard_mode(*flags: Any) -> int:
    """0: run (every flag a Python False), 1: skip (one a Python True), 2: a runtime guard."""
    runtime = False
    for f in flags:
        if isinstance(f, Tile):
            runtime = True
        elif f:
            return 1
    return 2 if runtime else 0


def guard(mode: int, *flags: Any) -> Any:
    if mode == 0:
        return contextlib.nullcontext()
    tiles: Iterable[Tile] = [f for f in flags if isinstance(f, Tile)]
    cond: Tile | None = None
    for t in tiles:
        cond = t if cond is None else cond | t
    assert cond is not None
    return control.when(~cond)


#: How many iterations a Python loop may unroll while its exit depends on a runtime value.
MAX_GUARDED_UNROLL = 1024


def static_stop(it: Any, *flags: Any) -> bool:
    """True when a Python loop must stop now: a flag is a Python True. A runtime loop never
    stops early (its remaining iterations run guarded); a Python loop whose exit depends on
    a runtime value unrolls guarded iterations, up to ``MAX_GUARDED_UNROLL`` (``while True``
    with a runtime ``break`` would never end)."""
    if _runtime_loop(it):
        return False
    if any(not isinstance(f, Tile) and bool(f) for f in flags):
        return True
    state = tracer.active()
    if state is not None and any(isinstance(f, Tile) for f in flags):
        loc = user_loc()
        key = (loc.file, loc.line) if loc is not None else ("?", 0)
        state.guarded_unrolls[key] += 1
        if state.guarded_unrolls[key] > MAX_GUARDED_UNROLL:
            raise TraceError(
                f"this Python loop has unrolled {MAX_GUARDED_UNROLL} iterations while its "
                "`break` or `return` depends on a runtime value; a Python loop is unrolled "
                "while tracing, so it must end on its own", loc,
                hints=["loop on the device instead: `for i in tk.range(n):` with the same "
                       "`break` under `tk.when`"])
    return False


def check_outer(value: Any, what: str) -> None:
    state = tracer.active()
    if state is None or not state.scopes:
        return
    if isinstance(value, Tile) or control.is_number(value):
        scope = state.scopes[-1]
        line = f" (line {scope.loc.line})" if scope.loc else ""
        kind = "tile" if isinstance(value, Tile) else "Python number"
        raise TraceError(
            f"`{what}` is assigned a {kind} inside a {scope.kind.value}{line}; the tracer "
            "follows only local names (and the lists, tuples and dicts they hold), so this "
            "store would keep the value of a single trace", user_loc(),
            hints=[f"assign to a local name inside the {scope.kind.value.strip('`')} and "
                   f"store it to `{what}` after it"])
