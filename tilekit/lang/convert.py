"""Turn a kernel (and each helper it calls) into its rewritten twin, once per code object.

``tilekit.lang.rewrite`` says what the rewrite does to a syntax tree; this module finds the
tree (the function's source, as ``inspect`` reads it), checks that the source is the code
Python is running (a file edited after the import would otherwise be traced in its new
form), compiles the rewritten tree so that the new function shares the original's globals,
closure cells and defaults, and caches the result by code object.

``call`` is what rewritten code calls every callee through: a plain Python function the
user wrote comes back rewritten; everything else (builtins, classes, tilekit's and the
standard library's functions, functions whose source cannot be read) comes back as it is.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
import types
import warnings
from typing import Any

from tilekit.lang import rewrite

#: Top-level packages whose functions are never rewritten: they are not kernel helpers, and
#: tracing through them natively is what they expect.
_NOT_HELPERS = frozenset({
    "tilekit", "numpy", "torch", "cupy", "jax", "triton", "sympy", "llvmlite", "islpy",
    "ml_dtypes", "cuda", "hypothesis", "pytest", "_pytest",
}) | frozenset(getattr(sys, "stdlib_module_names", ()))

#: code object -> its rewritten function's code (None: this function is used as it is).
_REWRITTEN: dict[types.CodeType, types.CodeType | None] = {}
#: Code objects that are themselves rewrites (nested functions of a rewritten function
#: included): ``call`` hands their functions back unchanged.
_IS_REWRITE: set[types.CodeType] = set()
#: Why a function was not rewritten, for ``TILEKIT_DUMP``-style diagnostics and tests.
SKIPPED: dict[types.CodeType, str] = {}


def _hooks_cell() -> types.CellType:
    from tilekit.lang import flow

    return types.CellType(flow)


def rewritten(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` rewritten (``tilekit.lang.rewrite``), or ``fn`` itself when its source cannot be
    read or does not match its code (then a warning says so)."""
    code = fn.__code__
    if code in _IS_REWRITE:
        return fn
    try:
        new_code = _REWRITTEN[code]
    except KeyError:
        new_code = _rewrite_code(fn)
        _REWRITTEN[code] = new_code
    if new_code is None:
        return fn
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    cells[rewrite.HOOKS] = _hooks_cell()
    closure = tuple(cells[name] for name in new_code.co_freevars)
    new = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    functools.update_wrapper(new, fn, updated=())
    return new


def _rewrite_code(fn: types.FunctionType) -> types.CodeType | None:
    code = fn.__code__
    tree = _parse(fn)
    if tree is None:
        return None
    original = _compile(tree, fn, rewrite_it=False)
    if original is None or not _same_source(original, code):
        SKIPPED[code] = "its source does not match the code Python runs"
        warnings.warn(
            f"`{fn.__qualname__}` ({code.co_filename}:{code.co_firstlineno}): its source file "
            "differs from the code Python imported (edited since?); it is traced as written, "
            "without the rewrite that makes `return`/`break`/`continue` and Python numbers in "
            "tk.range/tk.when mean what they mean in Python", RuntimeWarning, stacklevel=3)
        return None
    tree = rewrite.rewrite_function(_parse(fn))  # type: ignore[arg-type]
    new = _compile(tree, fn, rewrite_it=True)
    if new is not None:
        _mark_rewrites(new)
        from tilekit.ir.passes import should_dump

        if should_dump("source"):
            sys.stderr.write(f"# ----- source: {fn.__qualname__} ({code.co_filename}:"
                             f"{code.co_firstlineno}), as the tracer runs it -----\n"
                             f"{ast.unparse(tree)}\n")
            sys.stderr.flush()
    return new


def _same_source(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects were compiled from the same source: the same names,
    constants and line numbers, nested functions included. (Not the same bytes: the
    compiler picks some instructions from what it knows of the whole module, e.g. an
    attribute of an imported module is loaded one way and of another object another.)"""
    if (a.co_name, a.co_varnames, a.co_freevars, a.co_argcount, a.co_kwonlyargcount) != \
            (b.co_name, b.co_varnames, b.co_freevars, b.co_argcount, b.co_kwonlyargcount):
        return False
    if set(a.co_names) != set(b.co_names) or _lines(a) != _lines(b):
        return False
    consts_a = [c for c in a.co_consts if not isinstance(c, types.CodeType)]
    consts_b = [c for c in b.co_consts if not isinstance(c, types.CodeType)]
    if consts_a != consts_b:
        return False
    nested_a = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    nested_b = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    return len(nested_a) == len(nested_b) and all(map(_same_source, nested_a, nested_b))


def _lines(code: types.CodeType) -> set[int]:
    return {line for _, _, line in code.co_lines() if line is not None}


def _parse(fn: types.FunctionType) -> ast.FunctionDef | None:
    """The function's definition, at its true lines and columns (decorators dropped)."""
    code = fn.__code__
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        SKIPPED[code] = "its source cannot be read"
        return None
    text = "".join(lines)
    indent = len(text) - len(text.lstrip(" \t"))
    try:
        module = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        SKIPPED[code] = "its source does not parse on its own"
        return None
    node = module.body[0] if module.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != code.co_name:
        SKIPPED[code] = "its source is not one `def` (a lambda?)"
        return None
    ast.increment_lineno(node, first - 1)
    if indent:
        for inner in ast.walk(node):
            for attr in ("col_offset", "end_col_offset"):
                if getattr(inner, attr, None) is not None:
                    setattr(inner, attr, getattr(inner, attr) + indent)
    if node.decorator_list:  # the code's first line is the first decorator's
        node.lineno = min(d.lineno for d in node.decorator_list)
        node.decorator_list = []
    return node


def _compile(node: ast.FunctionDef, fn: types.FunctionType,
             rewrite_it: bool) -> types.CodeType | None:
    """Compile the definition (rewritten already when ``rewrite_it``) inside ``def
    _tk_make(<free variables>, _tk): ...`` so that its free variables stay closure cells;
    return the inner function's code."""
    code = fn.__code__
    params = list(code.co_freevars) + ([rewrite.HOOKS] if rewrite_it else [])
    outer = ast.FunctionDef(
        name="_tk_make",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[node, ast.Return(value=ast.Name(id=node.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    if sys.version_info >= (3, 12):
        outer.type_params = []
    ast.copy_location(outer, node)
    module = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(module)
    flags = code.co_flags & _FUTURE_FLAGS
    try:
        compiled = compile(module, code.co_filename, "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, TypeError) as exc:  # pragma: no cover - a rewrite bug
        SKIPPED[code] = f"it did not compile after the rewrite: {exc}"
        return None
    make = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in make.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == code.co_name)
    return _requalified(inner, f"_tk_make.<locals>.{code.co_name}", fn.__qualname__)


def _requalified(code: types.CodeType, wrong: str, right: str) -> types.CodeType:
    """``code`` with the qualified names the wrapper ``_tk_make`` gave it (and its nested
    functions and classes) put back: ``_tk_make.<locals>.f.<locals>.g`` -> ``f.<locals>.g``."""
    def fix(name: str) -> str:
        return right + name[len(wrong):] if name.startswith(wrong) else name

    consts = tuple(_requalified(c, wrong, right) if isinstance(c, types.CodeType)
                   else fix(c) if isinstance(c, str) else c for c in code.co_consts)
    changes: dict[str, Any] = {"co_consts": consts}
    if hasattr(code, "co_qualname"):
        changes["co_qualname"] = fix(code.co_qualname)
    return code.replace(**changes)


_FUTURE_FLAGS = 0
for _feature in ("annotations", "generator_stop", "division", "absolute_import",
                 "with_statement", "print_function", "unicode_literals", "barry_as_FLUFL"):
    _FUTURE_FLAGS |= getattr(__import__("__future__"), _feature).compiler_flag


def _mark_rewrites(code: types.CodeType) -> None:
    _IS_REWRITE.add(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _mark_rewrites(const)


def _is_helper(fn: types.FunctionType) -> bool:
    """A function the user wrote: not tilekit's, the standard library's or a numeric
    library's, not a generator or coroutine, not a lambda (it holds no statements)."""
    module = (getattr(fn, "__module__", None) or "").partition(".")[0]
    if module in _NOT_HELPERS:
        return False
    code = fn.__code__
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                        inspect.CO_ASYNC_GENERATOR):
        return False
    return code.co_name != "<lambda>"


def call(f: Any) -> Any:
    """What a rewritten function calls in place of ``f``: the rewritten helper, or ``f``."""
    kind = type(f)
    if kind is types.FunctionType:
        return rewritten(f) if _is_helper(f) else f
    if kind is types.MethodType and type(f.__func__) is types.FunctionType and \
            _is_helper(f.__func__):
        return types.MethodType(rewritten(f.__func__), f.__self__)
    if kind is functools.partial and type(f.func) is types.FunctionType and _is_helper(f.func):
        return functools.partial(rewritten(f.func), *f.args, **f.keywords)
    return f


def kernel_body(fn: types.FunctionType) -> types.FunctionType:
    """The function a kernel's trace runs: ``fn`` rewritten (or as written, see
    ``rewritten``)."""
    return rewritten(fn)


def source_of(fn: types.FunctionType) -> str:
    """The rewritten source of ``fn``, for debugging and tests (``ast.unparse``)."""
    node = _parse(fn)
    if node is None:
        raise ValueError(SKIPPED.get(fn.__code__, "no source"))
    return ast.unparse(rewrite.rewrite_function(node))
