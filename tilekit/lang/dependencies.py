"""What a kernel's trace reads besides its arguments: globals, closure variables, module
attributes, and the helper functions it calls, recursively.

A kernel is traced once per specialization and the trace keeps what the Python code saw
then: ``x * SCALE`` becomes a constant, a helper's body becomes ops. So the values a
trace read are part of what it was specialized for, as Triton's cache key includes the
globals and callees of a kernel. This module finds them and checks them cheaply:

* ``reads(code)``: where a function's code reads names from outside itself, from its
  bytecode (computed once per code object). Python's compiler has already resolved
  scopes there: ``LOAD_GLOBAL`` is a global (or a builtin), ``LOAD_DEREF`` of a free
  variable is a closure cell, and the ``LOAD_ATTR``/``LOAD_METHOD`` run right after such
  a load is an attribute chain (``cfg.SCALE``, ``mylib.helper``). Nested functions,
  lambdas and comprehensions are included; their reads of the enclosing function's own
  locals are not. The bytecode, not the source, because it is what runs: it needs no
  source file (a lambda, an ``exec``'d kernel, a file edited since it was imported),
  and no scope analysis of our own.
* ``snapshot(fn)``: the values those reads resolve to now, from the kernel down
  through every plain Python helper it names, directly or through a tuple, a
  ``functools.partial`` or a bound method (a function's own reads are followed, once
  each). Each read gives a *guard*, ``(namespace, name, object)``: the namespace is a
  dict (a function's ``__globals__``, a module's ``__dict__``) and the object is
  ``namespace[name]``, or the namespace is a closure cell, ``name`` is None and the
  object its contents. The snapshot's ``key`` is the values: numbers, strings, bytes,
  None, tilekit dtypes and numpy scalars by type and value (``1``, ``1.0`` and ``True``
  differ, so do ``0.0`` and ``-0.0``), tuples and frozensets of those by their items;
  anything else (a function, a class, a module, an object) by identity.
* ``Snapshot.holds()``: each guard's namespace still holds its object (identity only:
  a dict lookup or a cell read per guard). The launch fast path makes the same checks
  (``rt/fastpath.py``, ``rt/_fastlaunch.c``); when they fail, the slow path takes a new
  snapshot, and a different key empties the kernel's caches (it is traced again).

Not tracked, by design: names bound to tilekit's own modules and to numpy, math or
another standard-library module, with their attributes (they are the environment, fixed
in a process: a typical kernel has no guard at all); builtins; what changes *inside* an
object the kernel reads (an item of a list or dict, an element of an array, an
attribute of a class or instance: the object is tracked by identity, so assigning a new
one is seen, changing it in place is not); values reached through ``getattr`` with a
computed name or passed to a helper as an argument; the code of a callable object.
Checking the contents of a list or dict on every launch would cost what the fast path
saves, and refusing them would refuse a kernel that only writes into one (a test
recording what the trace saw); a value that must be read from a table belongs in a
tuple (tracked by value) or a ``tk.constexpr`` parameter.
"""

from __future__ import annotations

import dis
import enum
import functools
import sys
import types
from typing import Any

import numpy as np

from tilekit.record import Record

# Modules whose attributes are fixed for a given install (tilekit's own by its version):
# a name bound to one of them, or to a standard-library module, is not tracked.
FIXED_MODULES = frozenset({"tilekit", "numpy", "math", "cmath", "operator", "functools",
                           "itertools", "builtins", "typing", "ml_dtypes", "torch", "cupy"})

_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
_FREE_LOADS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"})
_ATTR_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_VALUES = (bool, int, str, bytes, type(None))


class Read(Record):
    """A name a function's code reads from outside itself: a global (``free`` False) or
    a closure variable (``free`` True), with the attributes read from it right after
    (``("SCALE",)`` for ``cfg.SCALE``)."""
    __slots__ = ()
    name: str
    free: bool
    attrs: tuple[str, ...]


@functools.lru_cache(maxsize=4096)
def reads(code: types.CodeType) -> tuple[Read, ...]:
    """The reads of a function's code and of the code nested in it (lambdas,
    comprehensions, inner functions), each (name, free, attrs) once."""
    return tuple(dict.fromkeys(_code_reads(code)))


def _code_reads(code: types.CodeType) -> list[Read]:
    out: list[Read] = []
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        if ins.opname in _GLOBAL_LOADS:
            free = False
        elif ins.opname in _FREE_LOADS and ins.argval in code.co_freevars:
            free = True
        else:
            continue
        attrs = []
        j = i + 1
        while j < len(instructions) and instructions[j].opname in _ATTR_LOADS:
            attrs.append(instructions[j].argval)
            j += 1
        out.append(Read(ins.argval, free, tuple(attrs)))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            # a nested code's free variable is ours (free here too) or one of our locals
            out += [r for r in _code_reads(const)
                    if not r.free or r.name not in code.co_cellvars]
    return out


@functools.lru_cache(maxsize=4096)
def _names(code: types.CodeType) -> frozenset[str]:
    """Every name the code and its nested code look up (globals and attributes alike):
    a superset of its global reads, found without reading the bytecode."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return frozenset(out)


def _may_read(fn: types.FunctionType) -> bool:
    """Whether ``fn`` can read anything tracked: a closure, or a name it looks up bound
    to something other than a fixed module in its globals. Most kernels read only ``tk``
    and the like: their bytecode is then never read (a first launch from a portfolio
    pays nothing for this module)."""
    if fn.__code__.co_freevars:
        return True
    scope = fn.__globals__
    for name in _names(fn.__code__):
        value = scope.get(name, _ABSENT)
        if value is not _ABSENT and not (isinstance(value, types.ModuleType) and
                                         _is_fixed(value)):
            return True
    return False


def _is_fixed(module: types.ModuleType) -> bool:
    top = module.__name__.partition(".")[0]
    return top in FIXED_MODULES or top in sys.stdlib_module_names


def _is_tilekit(fn: types.FunctionType) -> bool:
    module = fn.__module__ or ""
    return module == "tilekit" or module.startswith("tilekit.")


def _value_key(value: Any, helpers: list[types.FunctionType]) -> Any:
    """What a trace may have depended on in ``value`` (see the module's docstring);
    plain functions found are appended to ``helpers``."""
    kind = type(value)
    if kind in _VALUES:
        return kind, value
    if kind is float or kind is complex:
        return kind, repr(value)  # repr tells 0.0 from -0.0, and nan equals nan
    if kind is types.FunctionType:
        if not _is_tilekit(value):
            helpers.append(value)
        return "id", id(value)
    if kind is functools.partial:  # its function, arguments and keywords are fixed
        return kind, _value_key(value.func, helpers), _value_key(value.args, helpers), \
            _value_key(tuple(sorted(value.keywords.items())), helpers)
    if kind is types.MethodType:  # a bound method: its function, and its object's identity
        return kind, _value_key(value.__func__, helpers), id(value.__self__)
    if isinstance(value, np.generic):
        return kind, value.tobytes()
    if isinstance(value, tuple):
        return kind, tuple(_value_key(v, helpers) for v in value)
    if isinstance(value, frozenset):
        return kind, frozenset(_value_key(v, helpers) for v in value)
    if isinstance(value, enum.Enum):  # tilekit dtypes: one member per value
        return kind, value.name
    return "id", id(value)  # the snapshot's guards hold it, so the id stays its own


# A guard: (a dict, a name, the object it holds) or (a cell, None, the object it holds).
Guard = tuple[Any, "str | None", Any]


_ABSENT = object()


class Snapshot:
    """The values a kernel's trace depends on: ``guards`` (what to check, by identity)
    and ``key`` (what they are: equal keys, equal traces)."""

    __slots__ = ("guards", "key")

    def __init__(self, guards: tuple[Guard, ...], key: tuple[Any, ...]) -> None:
        self.guards = guards
        self.key = key

    def holds(self) -> bool:
        """Whether every namespace still holds the object it held (identity)."""
        for where, name, value in self.guards:
            if name is None:
                try:
                    if where.cell_contents is not value:
                        return False
                except ValueError:  # the cell was emptied (`del`)
                    return False
            elif where.get(name, _ABSENT) is not value:
                return False
        return True

    def __repr__(self) -> str:
        names = ", ".join("<cell>" if n is None else n for _, n, _ in self.guards)
        return f"<Snapshot of {len(self.guards)} reads: {names}>"


def snapshot(fn: types.FunctionType) -> Snapshot:
    """The guards and key of what ``fn`` and the helpers it names read now."""
    guards: list[Guard] = []
    key: list[Any] = []
    seen_guards: set[tuple[int, str | None]] = set()
    todo = [fn]
    seen_functions = {id(fn)}

    def track(where: Any, name: str | None, value: Any, label: str) -> None:
        if (id(where), name) in seen_guards:
            return
        seen_guards.add((id(where), name))
        helpers: list[types.FunctionType] = []
        key.append((label, _value_key(value, helpers)))
        guards.append((where, name, value))
        for helper in helpers:
            if id(helper) not in seen_functions:
                seen_functions.add(id(helper))
                todo.append(helper)

    while todo:
        f = todo.pop()
        if not _may_read(f):
            continue
        code = f.__code__
        scope = f.__globals__
        for read in reads(code):
            if read.free:
                cell = (f.__closure__ or ())[code.co_freevars.index(read.name)]
                try:
                    value = cell.cell_contents
                except ValueError:  # not assigned yet: the trace cannot have read it
                    continue
                where, name = cell, None
            elif read.name in scope:
                where, name, value = scope, read.name, scope[read.name]
            else:  # a builtin, or a name the trace never reached (it would have failed)
                continue
            if isinstance(value, types.ModuleType) and _is_fixed(value):
                continue
            label = read.name
            track(where, name, value, label)
            for attr in read.attrs:  # through user modules only
                if not isinstance(value, types.ModuleType):
                    break
                namespace = vars(value)
                if attr not in namespace:  # a module __getattr__: not tracked
                    break
                value = namespace[attr]
                if isinstance(value, types.ModuleType) and _is_fixed(value):
                    break
                label = f"{label}.{attr}"
                track(namespace, attr, value, label)
    return Snapshot(tuple(guards), tuple(key))
