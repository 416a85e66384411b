"""A kernel's source fingerprint: what lets a portfolio serve a launch without tracing.

A portfolio variant is keyed by the IR hash of the traced kernel (``keys``), and tracing
costs the IR and the front end (tens of milliseconds of imports in a fresh process).
The fingerprint is a cheaper stand-in computed from the function object alone: a sha256
of the kernel's code (bytecode, constants, names; recursively its nested functions) and
of everything that code names and could read while tracing:

* the kernel's parameters (names, kinds, dtypes, defaults) and closure cells;
* each global it names: a number, string, bytes, None, a tilekit dtype, or a tuple or
  frozenset of those by value; a plain Python function by its own fingerprint
  (recursively); another tilekit kernel by its function's; a builtin function by name;
  a module by name and, for a user module (not tilekit, numpy, math or the standard
  library), each attribute the code names, fingerprinted the same way;
* the Python version (bytecode differs between versions) and tilekit's version.

Source locations are left out: the same file at another path matches, as the IR hash
does. Anything else the code names (a class instance, an array, a dict, a class) has no
fingerprint: then ``source_hash`` is None and a launch traces the kernel and matches the
IR hash, as before. A different fingerprint is never an error either (the IR hash may
still match); only equal fingerprints skip tracing, and equal fingerprints mean the same
code reading the same values, so the same IR. What the fingerprint cannot see, a kernel
must not depend on: values reached only through ``getattr`` with a computed name, or
module state changed after the portfolio was built.
"""

from __future__ import annotations

import builtins
import hashlib
import sys
import types
from typing import Any

from tilekit.lang.dependencies import FIXED_MODULES

_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MAX_DEPTH = 16


class _NoFingerprint(Exception):
    """The code names a value the fingerprint cannot describe."""


def source_hash(kern: Any) -> str | None:
    """The kernel's fingerprint (hex sha256), or None when it has none; computed once per
    kernel object and values of the globals it reads (``KernelFunction.globals_key``, as
    of the launch's ``check_globals``): a global changed in this process is a new
    fingerprint, as it is a new trace."""
    values = getattr(kern, "globals_key", ())
    found = getattr(kern, "_source_hash", None)
    if found is None or found[0] != values:
        try:
            digest = _compute(kern)
        except _NoFingerprint:
            digest = None
        found = kern._source_hash = (values, digest)
    return found[1]


def _compute(kern: Any) -> str:
    from tilekit import __version__

    h = hashlib.sha256()
    h.update(f"python {sys.version_info[0]}.{sys.version_info[1]}|tilekit {__version__}|"
             .encode())
    for p in kern.params:
        dtype = p.dtype.long if p.dtype is not None else ""
        default = "" if p.default is _empty() else _value(p.default, set(), 0)
        h.update(f"param {p.name} {p.kind.value} {dtype} {default}|".encode())
    h.update(_function(kern.fn, set(), 0).encode())
    return h.hexdigest()


def _empty() -> Any:
    import inspect

    return inspect.Parameter.empty


def _function(fn: types.FunctionType, seen: set[int], depth: int) -> str:
    """A plain Python function: its code, its closure, and the globals its code names."""
    if depth > _MAX_DEPTH:
        raise _NoFingerprint
    if id(fn) in seen:  # recursion: the name is enough, the code is hashed once
        return f"recursive {fn.__qualname__}"
    seen = seen | {id(fn)}
    code = fn.__code__
    parts = [_code(code)]
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            raise _NoFingerprint from None
        parts.append(f"closure {name}={_value(value, seen, depth + 1)}")
    for default in (fn.__defaults__ or ()):
        parts.append(f"default {_value(default, seen, depth + 1)}")
    for name, default in sorted((fn.__kwdefaults__ or {}).items()):
        parts.append(f"kwdefault {name}={_value(default, seen, depth + 1)}")
    names = _names(code)
    scope = fn.__globals__
    for name in sorted(names):
        if name in scope:
            parts.append(f"global {name}={_global(scope[name], names, seen, depth + 1)}")
        elif hasattr(builtins, name):
            parts.append(f"builtin {name}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _code(code: types.CodeType) -> str:
    """A code object without its locations (file, line numbers, position tables)."""
    consts = [_code(c) if isinstance(c, types.CodeType) else f"{type(c).__name__}:{c!r}"
              for c in code.co_consts]
    return "|".join([code.co_code.hex(), repr(consts), repr(code.co_names),
                     repr(code.co_varnames), repr(code.co_freevars), repr(code.co_cellvars),
                     f"{code.co_argcount},{code.co_kwonlyargcount},{code.co_flags}"])


def _names(code: types.CodeType) -> set[str]:
    """Every name the code (and its nested code) looks up: globals and attributes."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _global(value: Any, names: set[str], seen: set[int], depth: int) -> str:
    if isinstance(value, types.ModuleType):
        top = value.__name__.partition(".")[0]
        if top in FIXED_MODULES or top in sys.stdlib_module_names:
            return f"module {value.__name__}"
        # A user module: the attributes the code may read from it.
        attrs = [f"{n}={_value(getattr(value, n), seen, depth + 1)}" for n in sorted(names)
                 if n in vars(value)]
        return f"module {value.__name__} {{{', '.join(attrs)}}}"
    return _value(value, seen, depth)


def _value(value: Any, seen: set[int], depth: int) -> str:
    """A value the code may read, described by what it is; ``_NoFingerprint`` if unknown."""
    if depth > _MAX_DEPTH:
        raise _NoFingerprint
    if isinstance(value, _SCALARS):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, frozenset)):
        items = sorted(_value(v, seen, depth + 1) for v in value) \
            if isinstance(value, frozenset) else [_value(v, seen, depth + 1) for v in value]
        return f"{type(value).__name__}({', '.join(items)})"
    if isinstance(value, types.FunctionType):
        if (value.__module__ or "").startswith("tilekit."):  # tilekit's API: its version
            return f"tilekit {value.__module__}.{value.__qualname__}"
        return f"function {_function(value, seen, depth + 1)}"
    if isinstance(value, types.BuiltinFunctionType):
        return f"builtin {getattr(value, '__module__', '')}.{value.__qualname__}"
    module = type(value).__module__ or ""
    if module.startswith("tilekit"):
        long = getattr(value, "long", None)  # a tilekit dtype
        if isinstance(long, str) and type(value).__name__ == "DType":
            return f"dtype {long}"
        fn = getattr(value, "fn", None)  # another kernel, or an autotuned one
        if isinstance(fn, types.FunctionType):
            return f"kernel {_function(fn, seen, depth + 1)}"
        if isinstance(value, type) or callable(value):  # tilekit's own API (tk.constexpr, ...)
            return f"tilekit {module}.{getattr(value, '__qualname__', type(value).__name__)}"
    if isinstance(value, type) and (value.__module__ or "").partition(".")[0] in FIXED_MODULES:
        return f"class {value.__module__}.{value.__qualname__}"
    raise _NoFingerprint
