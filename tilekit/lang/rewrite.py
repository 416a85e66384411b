"""The source rewrite that lets Python control flow mean, at run time, what it means in Python.

A kernel is traced by running its Python body once (``tracer``). Three things in an ordinary
body would then be decided by that one run, silently:

- ``return``, ``break`` and ``continue`` inside a runtime scope (``with tk.when(...)``, ``for
  ... in tk.range(...)``/``tk.pipeline(...)``) would end the *trace* of the rest of the body,
  for every program and every iteration;
- a Python name rebound inside a runtime scope (``off += B``, ``f = 1`` under ``tk.when``)
  would keep the value of that one run; only the kernel's own frame can rebind its names, so
  the tracer needs the frame's help;
- a helper function the kernel calls has the same two problems.

This module rewrites a function's syntax tree so that each of those becomes explicit:

1. ``return``/``break``/``continue`` that a runtime scope may enclose become flag assignments
   (``_tk_ret = True``), and the statements a flag may skip are guarded by it. A guard is
   ``if m != 1: with _tk.guard(m, flags): ...`` where ``m = _tk.guard_mode(flags)`` is 0 when
   every flag is a Python ``False`` (run natively), 1 when one is a Python ``True`` (skip) and
   2 when some are runtime values (then the guard is a ``tk.when``). Loops that may be left
   early guard their whole body and, when they are Python loops, stop natively.
2. Every ``for`` and ``with`` statement is bracketed by calls that hand the tracer the names
   its body assigns (``tilekit.lang.flow``): before a runtime loop, those bound to Python
   numbers are made runtime scalars; after a runtime scope, the frame rebinds the names whose
   values the scope changed.
3. Every call ``f(...)`` becomes ``_tk.call(f)(...)``, so helpers are rewritten too.

Nothing here runs user code or imports the tracer: the rewrite is a pure function of the
syntax tree. With Python values and Python loops every inserted hook is the identity, so a
rewritten function computes exactly what the original does. ``tilekit.lang.convert`` reads
sources, compiles and caches; ``tilekit.lang.flow`` holds the hooks.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: The name the rewritten code reads the hooks through (a closure cell, never a global).
HOOKS = "_tk"
#: Flags and values the rewrite introduces that the tracer carries like user names.
RET, RETVAL = "_tk_ret", "_tk_rv"
#: Temporaries (iterators, guard modes, hook results): never carried, never rebound.
TEMP = "_tk_t_"

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
#: Calls left alone: zero-argument ``super()`` needs its own frame's cell, the rest are the
#: rewrite's own hooks or builtins that read the caller's frame.
_UNWRAPPED_CALLS = {"super", "locals", "globals", "vars", "eval", "exec"}


def _name(id_: str, ctx: ast.expr_context | None = None) -> ast.Name:
    return ast.Name(id=id_, ctx=ctx or ast.Load())


def _hook(fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=_name(HOOKS), attr=fn, ctx=ast.Load()),
                    args=list(args), keywords=[])


def _assign(target: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_name(target, ast.Store())], value=value)


def _strings(names: Iterable[str]) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Constant(n) for n in sorted(names)], ctx=ast.Load())


def _header_span(at: ast.AST) -> tuple[int, int, int, int]:
    """The one-line span that stands for a statement: a loop's iterable or condition, a
    ``with``'s context manager, a ``def``'s keyword, or the statement itself when it fits on
    its line. (A span over several lines would make CPython place a generated method call at
    the end of the last one.)"""
    head: ast.AST | None = None
    if isinstance(at, ast.For):
        head = at.iter
    elif isinstance(at, ast.While):
        head = at.test
    elif isinstance(at, ast.With):
        head = at.items[0].context_expr
    line, col = at.lineno, at.col_offset  # type: ignore[attr-defined]
    if head is not None and head.lineno == head.end_lineno == line:  # type: ignore[attr-defined]
        return line, head.col_offset, line, head.end_col_offset  # type: ignore[attr-defined]
    if getattr(at, "end_lineno", None) == line and getattr(at, "end_col_offset", None) is not None:
        return line, col, line, at.end_col_offset  # type: ignore[attr-defined]
    keyword = 3 if isinstance(at, (ast.FunctionDef, ast.For)) else 1
    return line, col, line, col + keyword


def _located(nodes: list[ast.stmt], at: ast.AST) -> list[ast.stmt]:
    """Give generated statements the position of the user statement they stand for (its
    ``_header_span``), so that errors and the IR's locations name the user's line. User nodes
    inside them (they have a position already) keep theirs."""
    line, col, end_line, end_col = _header_span(at)
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if getattr(node, "lineno", None) is not None:
            continue
        if "lineno" in node._attributes:
            node.lineno, node.col_offset = line, col  # type: ignore[attr-defined]
            node.end_lineno, node.end_col_offset = end_line, end_col  # type: ignore[attr-defined]
        todo.extend(ast.iter_child_nodes(node))
    return nodes


# --- what a function body does ------------------------------------------------------------------

def _own_nodes(nodes: Sequence[ast.AST]) -> Iterable[ast.AST]:
    """Every node of these statements that belongs to this function's own scope: nested
    functions, classes, lambdas and comprehensions are not entered (their names are theirs)."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (*_SCOPES, *_COMPREHENSIONS)):
            continue
        todo.extend(ast.iter_child_nodes(node))


def assigned_names(body: Sequence[ast.stmt]) -> set[str]:
    """The names these statements bind in their own scope (assignments of every form, loop
    and ``with`` targets, imports, nested ``def``/``class`` names)."""
    names: set[str] = set()
    for node in _own_nodes(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    # comprehension targets in 3.12+ are inlined but still scoped to the comprehension;
    # walrus targets inside a comprehension bind in the enclosing scope:
    for node in _own_nodes(body):
        if isinstance(node, _COMPREHENSIONS):
            names.update(n.target.id for n in ast.walk(node)
                         if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name))
    return names


def _declared_outer(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names a function declares ``global`` or ``nonlocal``."""
    return {name for node in _own_nodes(fn.body)
            if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}


def _loads(nodes: Sequence[ast.AST]) -> Counter[str]:
    """How often each name is read in these nodes, nested scopes included (a closure that
    reads a name reads it too). ``x += y`` reads ``x`` (its target is a Store)."""
    return Counter(n.id for node in nodes for n in ast.walk(node)
                   if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)) + \
        Counter(n.target.id for node in nodes for n in ast.walk(node)
                if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name))


# --- which exits must become flags ----------------------------------------------------------------

@dataclass
class _Loop:
    """A loop being lowered, and the flags its body's exits became."""

    node: ast.For | ast.While
    key: int
    iterator: str | None  # the temporary holding a ``for`` loop's iterable

    @property
    def cont(self) -> str:
        return f"_tk_cont_{self.key}"

    @property
    def brk(self) -> str:
        return f"_tk_brk_{self.key}"


@dataclass
class _Where:
    """Where a statement sits: its innermost loop, whether a ``with`` lies between it and that
    loop, whether any loop or ``with`` lies between it and the function."""

    loop: _Loop | None = None
    with_since_loop: bool = False
    in_scope: bool = False

    def entering_loop(self, loop: _Loop) -> _Where:
        return _Where(loop, False, True)

    def entering_with(self) -> _Where:
        return _Where(self.loop, True, True)


def _returns_in_scopes(body: Sequence[ast.stmt]) -> tuple[bool, bool]:
    """(a ``return`` lies inside a loop or ``with`` of this function, some ``return`` gives a
    value)."""
    inside = valued = False

    def walk(nodes: Sequence[ast.AST], depth: int) -> None:
        nonlocal inside, valued
        for node in nodes:
            if isinstance(node, ast.Return):
                inside |= depth > 0
                valued |= node.value is not None
            if isinstance(node, (*_SCOPES, *_COMPREHENSIONS)):
                continue
            deeper = isinstance(node, (ast.For, ast.While, ast.With, ast.AsyncFor,
                                       ast.AsyncWith))
            walk(list(ast.iter_child_nodes(node)), depth + deeper)

    walk(list(body), 0)
    return inside, valued


# --- lowering one function ------------------------------------------------------------------------

@dataclass
class _FunctionLowering:
    """Lower one function's exits to flags and bracket its scopes with hooks (steps 1 and 2 of
    the module docstring); nested functions get their own lowering."""

    convert_returns: bool
    valued_returns: bool
    outer_names: set[str]
    counter: list[int] = field(default_factory=lambda: [0])

    def fresh(self) -> int:
        self.counter[0] += 1
        return self.counter[0]

    # -- statement lists

    def block(self, stmts: Sequence[ast.stmt], where: _Where) -> tuple[list[ast.stmt], set[str]]:
        """Lower a statement list; after a statement that may set a flag, the rest of the list
        runs under a guard on that flag. Returns the statements and the flags they may set."""
        out: list[ast.stmt] = []
        flags: set[str] = set()
        for i, stmt in enumerate(stmts):
            new, sets = self.stmt(stmt, where)
            out.extend(new)
            flags |= sets
            if sets and i + 1 < len(stmts):
                rest, rest_flags = self.block(stmts[i + 1:], where)
                flags |= rest_flags
                out.extend(self.guard(sets, rest, stmt))
                break
        return out, flags

    def guard(self, flags: set[str], body: list[ast.stmt], at: ast.AST) -> list[ast.stmt]:
        """``body`` runs only while none of ``flags`` is set (statically or at run time)."""
        if not body:
            return []
        mode = f"{TEMP}m{self.fresh()}"
        names = [_name(f) for f in sorted(flags)]
        head = _located([_assign(mode, _hook("guard_mode", *names))], at)
        test = ast.Compare(left=_name(mode), ops=[ast.NotEq()], comparators=[ast.Constant(1)])
        with_ = ast.With(items=[ast.withitem(context_expr=_hook("guard", _name(mode), *names))],
                         body=body)
        return head + _located([ast.If(test=test, body=[with_], orelse=[])], at)

    def stmt(self, node: ast.stmt, where: _Where) -> tuple[list[ast.stmt], set[str]]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return [lower_function(node, self.counter)], set()
        if isinstance(node, ast.Return) and self.convert_returns:
            value = node.value if node.value is not None else ast.Constant(None)
            out = [_assign(RET, ast.Constant(True))]
            if self.valued_returns:
                out.insert(0, _assign(RETVAL, value))
            return _located(out, node), {RET}
        if isinstance(node, ast.Continue) and where.loop is not None and where.with_since_loop:
            return _located([_assign(where.loop.cont, ast.Constant(True))], node), \
                {where.loop.cont}
        if isinstance(node, ast.Break) and where.loop is not None and (
                where.with_since_loop or isinstance(where.loop.node, ast.For)):
            return _located([_assign(where.loop.brk, ast.Constant(True))], node), \
                {where.loop.brk}
        if isinstance(node, (ast.For, ast.While)):
            return self.loop(node, where)
        if isinstance(node, ast.With):
            return self.with_(node, where)
        if isinstance(node, ast.If):
            body, f1 = self.block(node.body, where)
            orelse, f2 = self.block(node.orelse, where)
            node.body, node.orelse = body or [ast.Pass()], orelse
            return [node], f1 | f2
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            flags: set[str] = set()
            for attr in ("body", "orelse", "finalbody"):
                part, f = self.block(getattr(node, attr), where)
                setattr(node, attr, part if part or attr != "body" else [ast.Pass()])
                flags |= f
            for handler in node.handlers:  # type: ignore[attr-defined]
                part, f = self.block(handler.body, where)
                handler.body = part or [ast.Pass()]
                flags |= f
            return [node], flags
        if isinstance(node, ast.Match):
            flags = set()
            for case in node.cases:
                part, f = self.block(case.body, where)
                case.body = part or [ast.Pass()]
                flags |= f
            return [node], flags
        return [node], set()

    # -- loops

    def loop(self, node: ast.For | ast.While, where: _Where) -> tuple[list[ast.stmt], set[str]]:
        key = self.fresh()
        is_for = isinstance(node, ast.For)
        loop = _Loop(node, key, f"{TEMP}it{key}" if is_for else None)
        body, flags = self.block(node.body, where.entering_loop(loop))
        stops = {f for f in flags if f in (loop.brk, RET)}
        if loop.cont in flags:
            body = _located([_assign(loop.cont, ast.Constant(False))], node) + body
        if stops:
            body = self.guard(stops, body, node)
            iterator = _name(loop.iterator) if loop.iterator else ast.Constant(None)
            stop = ast.If(test=_hook("static_stop", iterator, *(_name(f) for f in sorted(stops))),
                          body=[ast.Break()], orelse=[])
            body += _located([stop], node)
        node.body = body or [ast.Pass()]
        orelse, else_flags = self.block(node.orelse, where)
        if loop.brk in flags and orelse:
            orelse = self.guard({loop.brk}, orelse, node)
        node.orelse = orelse
        before = _located([_assign(loop.brk, ast.Constant(False))], node) \
            if loop.brk in flags else []
        if is_for:
            node._tk_iterator = loop.iterator  # type: ignore[attr-defined]
        return before + [node], (flags - {loop.cont, loop.brk}) | else_flags

    def with_(self, node: ast.With, where: _Where) -> tuple[list[ast.stmt], set[str]]:
        if len(node.items) > 1:  # `with a, b:` is `with a: with b:`
            inner = ast.With(items=node.items[1:], body=node.body)
            ast.copy_location(inner, node)
            node.items, node.body = node.items[:1], [inner]
        body, flags = self.block(node.body, where.entering_with())
        node.body = body or [ast.Pass()]
        return [node], flags


def lower_function(fn: ast.FunctionDef | ast.AsyncFunctionDef,
                   counter: list[int] | None = None) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """Steps 1 and 2 of the module docstring for one function (and its nested functions)."""
    if isinstance(fn, ast.AsyncFunctionDef) or _is_generator(fn):
        return fn  # never a kernel or a helper the tracer can follow: left as written
    inside, valued = _returns_in_scopes(fn.body)
    lowering = _FunctionLowering(inside, valued, _declared_outer(fn),
                                 counter if counter is not None else [0])
    body, _ = lowering.block(fn.body, _Where())
    if inside:
        prologue = [_assign(RET, ast.Constant(False))]
        if valued:
            prologue.append(_assign(RETVAL, _hook("no_return")))
            body += _located([ast.Return(value=_hook("final", _name(RETVAL)))], fn)
        body = _located(prologue, fn) + body
    fn.body = body or [ast.Pass()]
    fn.body = _ScopeHooks(fn, lowering.outer_names).statements(fn.body)
    return fn


def _is_generator(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(fn.body))


# --- step 2: hooks around every for and with ------------------------------------------------

class _ScopeHooks:
    """Bracket each ``for`` and ``with`` of one function with the hooks of ``flow``.

    Before: ``p = _tk.loop_enter(it, names, live, locals())`` (or ``scope_enter``), then
    ``if 'x' in p: x = p['x']`` for each name the body assigns. After: the same with
    ``loop_exit``/``scope_exit``. ``names`` are the names the body assigns (less temporaries,
    the loop's own targets and names declared global or nonlocal); ``live`` those of them read
    anywhere outside the body (after it, or before it in an enclosing loop), or anywhere in an
    enclosing loop (its next iteration may read them before this body binds them again).
    """

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, outer: set[str]) -> None:
        self.loads = _loads(fn.body)
        self.outer = outer
        self.counter = 0
        # the loads of each enclosing loop's body: a name read there may be read after this
        # body through the loop's next iteration (a tk.static_range unrolls the body again)
        self.enclosing: list[Counter[str]] = []

    def statements(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for node in stmts:
            out.extend(self.statement(node))
        return out

    def statement(self, node: ast.stmt) -> list[ast.stmt]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [node]  # lowered on its own
        loop = isinstance(node, (ast.For, ast.While))
        if loop:
            self.enclosing.append(_loads(node.body + node.orelse))
        for attr in ("body", "orelse", "finalbody"):
            part = getattr(node, attr, None)
            if isinstance(part, list) and part and isinstance(part[0], ast.stmt):
                setattr(node, attr, self.statements(part))
        for handler in getattr(node, "handlers", []):
            handler.body = self.statements(handler.body)
        for case in getattr(node, "cases", []):
            case.body = self.statements(case.body)
        if loop:
            self.enclosing.pop()
        if isinstance(node, ast.For):
            return self.bracket(node, "loop", node.body + node.orelse, _targets(node.target))
        if isinstance(node, ast.With):
            targets = set()
            for item in node.items:
                if item.optional_vars is not None:
                    targets |= _targets(item.optional_vars)
            return self.bracket(node, "scope", node.body, targets)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            return [node] + self.outer_store_checks(node)
        return [node]

    def outer_store_checks(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign
                           ) -> list[ast.stmt]:
        """After a store the tracer cannot follow (an attribute, a name declared global or
        nonlocal): ``_tk.check_outer(target, 'text')``, an error when a runtime scope is open
        and the value is a tile or a Python number (it would keep the value of one trace)."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if isinstance(node, ast.AnnAssign) and node.value is None:
            return []
        checks: list[ast.stmt] = []
        for target in targets:
            for t in ast.walk(target):
                if not isinstance(getattr(t, "ctx", None), ast.Store):
                    continue
                outer_name = isinstance(t, ast.Name) and t.id in self.outer
                plain_attribute = isinstance(t, ast.Attribute) and _is_name_chain(t)
                if outer_name or plain_attribute:
                    read = _reload(t)
                    call = _hook("check_outer", read, ast.Constant(ast.unparse(read)))
                    checks.append(ast.Expr(value=call))
        return _located(checks, node)

    def bracket(self, node: ast.For | ast.With, kind: str, body: list[ast.stmt],
                targets: set[str]) -> list[ast.stmt]:
        self.counter += 1
        names = {n for n in assigned_names(body)
                 if not n.startswith(TEMP) and n not in self.outer and n not in targets}
        inner = _loads(body)
        # after a `with`, what is read outside its body; after a loop, what is read anywhere:
        # a later iteration may read a name the body binds before binding it again; and
        # what an enclosing loop reads (its next iteration, a tk.static_range's next copy)
        floor = {n: 0 for n in names | targets} if isinstance(node, ast.For) else inner
        live = {n for n in names | targets
                if self.loads[n] > floor[n] or any(enc[n] for enc in self.enclosing)}
        result = f"{TEMP}p{self.counter}"
        if isinstance(node, ast.For):
            subject = getattr(node, "_tk_iterator", None) or f"{TEMP}it{self.counter}x"
            before: list[ast.stmt] = [_assign(subject, node.iter)]
            node.iter = ast.copy_location(_name(subject), node.iter)
        else:
            subject = f"{TEMP}cm{self.counter}"
            expr = node.items[0].context_expr
            before = [_assign(subject, expr)]
            node.items[0].context_expr = ast.copy_location(_name(subject), expr)
        locals_call = ast.Call(func=_name("locals"), args=[], keywords=[])
        before.append(_assign(result, _hook(f"{kind}_enter", _name(subject), _strings(names),
                                            _strings(live), locals_call)))
        before += _rebind(result, names)
        after = [_assign(result, _hook(f"{kind}_exit", _name(subject)))]
        after += _rebind(result, names)
        return _located(before, node) + [node] + _located(after, node)


def _is_name_chain(node: ast.expr) -> bool:
    """``a.b.c``: attributes on a plain name (reading it again has no side effects)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _reload(node: ast.expr) -> ast.expr:
    """A load of the same name or attribute chain."""
    if isinstance(node, ast.Name):
        return _name(node.id)
    assert isinstance(node, ast.Attribute)
    return ast.Attribute(value=_reload(node.value), attr=node.attr, ctx=ast.Load())


def _targets(target: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _rebind(result: str, names: set[str]) -> list[ast.stmt]:
    """``if 'x' in p: x = p['x']`` for each name (a dict of the names a hook rebinds)."""
    out: list[ast.stmt] = []
    for n in sorted(names):
        test = ast.Compare(left=ast.Constant(n), ops=[ast.In()], comparators=[_name(result)])
        value = ast.Subscript(value=_name(result), slice=ast.Constant(n), ctx=ast.Load())
        out.append(ast.If(test=test, body=[_assign(n, value)], orelse=[]))
    return out


# --- step 3: calls through the hooks ---------------------------------------------------------

class _WrapCalls(ast.NodeTransformer):
    """``f(...)`` becomes ``_tk.call(f)(...)``: ``call`` returns the rewritten helper, or ``f``
    itself for anything it does not rewrite (builtins, tilekit's functions, classes)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in _UNWRAPPED_CALLS:
            return node
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
                func.value.id == HOOKS:
            return node
        wrapped = ast.Call(func=ast.Attribute(value=_name(HOOKS), attr="call", ctx=ast.Load()),
                           args=[func], keywords=[])
        ast.copy_location(wrapped, func)
        node.func = wrapped
        return node


def rewrite_function(fn: ast.FunctionDef) -> ast.FunctionDef:
    """The whole rewrite of one (top-level) function definition, in place."""
    lowered = lower_function(fn)
    _WrapCalls().visit(lowered)
    ast.fix_missing_locations(lowered)
    return lowered  # type: ignore[return-value]
