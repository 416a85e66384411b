"""``@tilekit.kernel``: a Python function that becomes a traced, specialized kernel.

The decorator reads the function's signature once. Parameters annotated
``tk.constexpr`` are compile-time values (part of the specialization);
``tk.Tensor`` parameters are arrays; others are arrays or runtime scalars,
decided by the value passed. Each distinct ``Specialization`` (constexpr
values, tensor dtypes/ranks/index widths, scalar dtypes) is traced once and
cached. The globals the kernel and its helpers read (``dependencies``) are part of the
specialization too: ``check_globals``, run by every launch that is not a fast-path hit,
empties the caches when one of them changed, so the next trace reads the new values.

This module is the front end only: it binds arguments, and traces and optimizes
a specialization. It imports nothing from ``tilekit.rt``, and imports the IR and the
tracer only when it first traces: a launch served by an AOT portfolio reads the
signature and builds the ``Specialization`` here, and never traces. The runtime owns the call
path: ``tk.kernel`` builds a ``tilekit.rt.launcher.JITKernel`` (a subclass adding
``kern[grid](*args, **kwargs)`` and ``kern.trace(*args)``), which turns arrays into a
``Specialization`` and calls ``specialize`` here.
"""

from __future__ import annotations

import ast
import enum
import inspect
import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tilekit.errors import LaunchError, SourceLoc, TraceError, frame_loc, user_frames, user_loc
from tilekit.ir.dtypes import DType
from tilekit.record import Record

if TYPE_CHECKING:
    from tilekit.ir.core import Module
    from tilekit.ir.passes import PassManager
    from tilekit.lang.dependencies import Guard, Snapshot


def default_passes() -> PassManager:
    """The pipeline every kernel runs before a backend sees it (the interpreter and the
    code generators alike, so both compute the same offsets)."""
    from tilekit.ir.cleanup import CSE, HOIST
    from tilekit.ir.passes import DCE, PassManager
    from tilekit.ir.widen_offsets import WIDEN

    return PassManager((WIDEN, CSE, HOIST, DCE))


class constexpr:  # noqa: N801  (used as an annotation: `BLOCK: tk.constexpr`)
    """Annotation: this parameter is a compile-time value (a specialization key)."""


class Tensor:
    """Annotation: this parameter is an array (numpy, torch, cupy, DLPack)."""


class ParamKind(enum.Enum):
    CONSTEXPR = "constexpr"
    TENSOR = "tensor"
    SCALAR = "scalar"
    ANY = "any"  # decided by the value passed


class Param(Record):
    __slots__ = ()
    name: str
    kind: ParamKind
    dtype: DType | None  # for scalars annotated with a tilekit dtype
    default: Any


class TensorSpec(Record):
    """A tensor argument's facts (its bucket): dtype, rank, index width (int32 when its
    span allows), whether its data pointer is 16-byte aligned, whether its last dim has
    unit stride (``unit_inner``), and whether every other stride is a multiple of 16
    bytes (``strides16``; both computed by ``stride_facts``). Code generation may assume
    exactly these facts: contiguous, aligned 16-byte vectors along the last dim."""
    __slots__ = ()
    dtype: DType
    rank: int
    index: DType
    aligned16: bool = True
    unit_inner: bool = False
    strides16: bool = False


def stride_facts(shape: tuple[int, ...], strides: tuple[int, ...],
                 itemsize: int) -> tuple[bool, bool]:
    """``(unit_inner, strides16)`` of a view (strides in elements). A dim of extent 1 has
    every property (its stride is never multiplied by anything but 0)."""
    if not shape:
        return True, True
    unit = shape[-1] == 1 or strides[-1] == 1
    aligned = all(n == 1 or (st * itemsize) % 16 == 0 for n, st in zip(shape[:-1], strides[:-1]))
    return unit, aligned


class ScalarSpec(Record):
    __slots__ = ()
    dtype: DType


class ConstSpec(Record):
    __slots__ = ()
    value: Any


ArgSpec = TensorSpec | ScalarSpec | ConstSpec


class Specialization(Record):
    """What one compiled version of a kernel may assume about its arguments.

    The specs are tuples, so equality is tuple equality: ``ScalarSpec(d) == ConstSpec(d)``.
    That never matters: a parameter is a constexpr (always a ``ConstSpec``) or not (never
    one), and specializations are only compared within one kernel."""
    __slots__ = ()
    args: tuple[tuple[str, ArgSpec], ...]

    @property
    def constexprs(self) -> dict[str, Any]:
        return {n: s.value for n, s in self.args if isinstance(s, ConstSpec)}


def _param_kind(annotation: Any) -> tuple[ParamKind, DType | None]:
    if annotation is constexpr or annotation == "constexpr" or annotation == "tk.constexpr":
        return ParamKind.CONSTEXPR, None
    if annotation is Tensor or annotation in ("Tensor", "tk.Tensor"):
        return ParamKind.TENSOR, None
    if isinstance(annotation, DType):
        return ParamKind.SCALAR, annotation
    if isinstance(annotation, str):  # `from __future__ import annotations`: "tk.float16"
        head, _, name = annotation.rpartition(".")
        if head in ("", "tk", "tilekit") and name.rstrip("_") in {d.long for d in DType}:
            return ParamKind.SCALAR, DType.parse(name.rstrip("_"))
    if annotation in (int, "int"):
        return ParamKind.SCALAR, None
    if annotation in (float, "float"):
        return ParamKind.SCALAR, DType.FLOAT32
    return ParamKind.ANY, None


def _recursion_error(kernel: str, exc: RecursionError) -> TraceError:
    """Python's recursion limit, hit while tracing: the user's function that recursed (the
    one with the most frames), at the innermost call it made to itself, instead of a
    traceback through tilekit's internals."""
    from collections import Counter

    frames = user_frames(exc.__traceback__)
    if not frames:
        return TraceError(f"Python's recursion limit was hit while kernel `{kernel}` was "
                          "traced", None)
    code, depth = Counter(f.f_code for f in frames).most_common(1)[0]
    calls = [f for f in frames if f.f_code is code]
    innermost = calls[-2] if len(calls) > 1 else calls[-1]  # the last one was elsewhere
    return TraceError(
        f"`{code.co_name}` recursed {depth} levels deep while kernel `{kernel}` was traced, "
        "past Python's recursion limit", frame_loc(innermost),
        hints=["a helper runs while the kernel is traced, so its recursion must stop on a "
               "compile-time value (a Python int, a tk.constexpr), never on a tile",
               "for a loop at run time, use `for i in tk.range(...)`"])


def _unbound_error(kernel: str, exc: UnboundLocalError) -> TraceError:
    """A local read before anything bound it, while tracing: at the user's line, saying why
    that happens in a kernel (the binding is in code the trace skipped)."""
    frames = user_frames(exc.__traceback__)
    return TraceError(
        f"{exc} while kernel `{kernel}` was traced", frame_loc(frames[-1]) if frames else None,
        hints=["the statements that bind it did not run while tracing: they come after a "
               "`return`, `break` or `continue` that always runs, or sit under a Python `if` "
               "that is false; bind it before (e.g. `v = tk.zeros(...)`)"])


class KernelFunction:
    """A ``@tilekit.kernel`` function."""

    def __init__(self, fn: Callable[..., Any], passes: PassManager | None = None) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.signature = inspect.signature(fn)
        code = fn.__code__
        self.loc = SourceLoc(code.co_filename, code.co_firstlineno)
        self.params: tuple[Param, ...] = tuple(self._params())
        self._passes = passes  # default_passes() when first traced
        self._cache: dict[Specialization, Module] = {}
        # What the traces in _cache read besides the arguments (check_globals)
        self._globals: Snapshot | None = None

    @property
    def passes(self) -> PassManager:
        if self._passes is None:
            self._passes = default_passes()
        return self._passes

    def _params(self) -> list[Param]:
        out = []
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TraceError(f"kernel `{self.name}` may not take *args or **kwargs",
                                 self.loc)
            kind, dtype = _param_kind(p.annotation)
            out.append(Param(p.name, kind, dtype, p.default))
        return out

    # --- launching (the runtime's subclass adds kern[grid] and trace) ----------------------

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._not_while_tracing(user_loc())
        raise LaunchError(f"kernel `{self.name}` was called without a grid", user_loc(),
                          hints=[f"launch it as {self.name}[grid](...), e.g. "
                                 f"{self.name}[(n_blocks,)](...)"])

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any],
             loc: SourceLoc | None) -> dict[str, Any]:
        """Match call arguments to parameters (defaults applied), or a clear LaunchError."""
        self._not_while_tracing(loc)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            expected = ", ".join(
                f"{p.name}: {p.kind.value}" + ("" if p.default is inspect.Parameter.empty
                                               else f" = {p.default!r}") for p in self.params)
            raise LaunchError(f"bad arguments for kernel `{self.name}`: {exc}", loc,
                              hints=[f"its parameters are ({expected})"]) from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def _not_while_tracing(self, loc: SourceLoc | None) -> None:
        """A kernel launched (or called) from the body of a kernel being traced: a
        TraceError, not a launch of the caller's proxy objects."""
        tracer = sys.modules.get("tilekit.lang.tracer")  # imported by the first trace
        state = tracer.active() if tracer is not None else None
        if state is None:
            return
        raise TraceError(
            f"kernel `{state.function.name}` calls kernel `{self.name}`, but a kernel cannot "
            "launch kernels", loc,
            hints=[f"move the body of `{self.name}` into a plain Python function (no "
                   "@tk.kernel) and call it from both kernels: a plain function is traced "
                   "inline, with the caller's tiles and tensors"])

    # --- the globals it reads ----------------------------------------------------------------

    def check_globals(self) -> None:
        """Make the caches agree with the globals, closure variables, module attributes and
        helpers the kernel reads now (``tilekit.lang.dependencies``). Each is compared by
        identity with what the last check saw; when one differs, a new snapshot decides:
        other values empty every cache (the next launch traces again), equal values (an
        equal number rebound, say) only the guards built on the old objects."""
        current = self._globals
        if current is not None and current.holds():
            return
        from tilekit.lang.dependencies import snapshot

        fresh = snapshot(self.fn)
        self._globals = fresh
        if current is not None:
            self._globals_changed(values=fresh.key != current.key)

    def _globals_changed(self, values: bool) -> None:
        """What was built from the old globals goes: the traces when their values differ
        (the runtime's subclass drops its loaded kernels and fast path too)."""
        if values:
            self._cache.clear()

    @property
    def globals_key(self) -> tuple[Any, ...]:
        """The values of what the kernel reads (``dependencies.Snapshot.key``) at the last
        ``check_globals``: equal keys, equal traces."""
        return self._globals.key if self._globals is not None else ()

    @property
    def globals_guards(self) -> tuple[Guard, ...]:
        """``(namespace, name, object)`` per global read, checked by identity on the
        launch fast path (``dependencies.Snapshot.guards``)."""
        return self._globals.guards if self._globals is not None else ()

    # --- specialization --------------------------------------------------------------------

    def specialize(self, spec: Specialization) -> Module:
        """Trace (once per specialization and values of the globals read) and run the pass
        pipeline."""
        self.check_globals()
        module = self._cache.get(spec)
        if module is None:
            from tilekit.ir.passes import dump, should_dump

            module = self._trace(spec)
            if should_dump("ir"):
                dump(module, "ir")
            module = self.passes.run(module)
            # The alignment facts, for code generation (vector widths): the names of the
            # tensor arguments whose data pointer is 16-byte aligned. Not part of the IR text.
            tensors = [(name, arg) for name, arg in spec.args if isinstance(arg, TensorSpec)]
            module.kernel.aligned16 = frozenset(  # type: ignore[attr-defined]
                name for name, arg in tensors if arg.aligned16)
            module.kernel.unit_inner = frozenset(  # type: ignore[attr-defined]
                name for name, arg in tensors if arg.unit_inner)
            module.kernel.strides16 = frozenset(  # type: ignore[attr-defined]
                name for name, arg in tensors if arg.strides16)
            self._cache[spec] = module
        return module

    def _trace(self, spec: Specialization) -> Module:
        from tilekit.ir.core import Module
        from tilekit.ir.types import TensorType, TileType
        from tilekit.ir.verifier import verify
        from tilekit.lang import control, convert, tracer
        from tilekit.lang.tensor import TensorArg
        from tilekit.lang.tile import Tile

        function = tracer.new_function(self.name, self.loc, spec.constexprs)
        state = tracer.TraceState(function)
        call_args: dict[str, Any] = {}
        for name, arg in spec.args:
            if isinstance(arg, ConstSpec):
                call_args[name] = arg.value
            elif isinstance(arg, TensorSpec):
                value = function.entry.add_arg(TensorType(arg.rank, arg.dtype, arg.index), name)
                call_args[name] = TensorArg(value, name)
            else:
                value = function.entry.add_arg(TileType((), arg.dtype), name)
                call_args[name] = value
        with tracer.tracing(state):
            for name, arg in spec.args:
                if isinstance(arg, ScalarSpec):
                    call_args[name] = Tile(call_args[name])
            try:
                result = convert.kernel_body(self.fn)(**call_args)
            except RecursionError as exc:
                raise _recursion_error(self.name, exc) from None
            except UnboundLocalError as exc:
                raise _unbound_error(self.name, exc) from None
            control.check_closed(state)
        if result is not None:
            raise TraceError(f"kernel `{self.name}` returned a value; kernels write their "
                             "results to tensor arguments", self._return_loc(),
                             hints=["store results with X.tile(...).store(v) or tk.store"])
        module = Module([function])
        verify(module)
        return module

    def _return_loc(self) -> SourceLoc:
        """The first `return <value>` statement of the kernel's source (for the error saying
        that kernels return nothing); the `def` line when the source cannot be read."""
        try:
            lines, first = inspect.getsourcelines(self.fn)
        except (OSError, TypeError):
            return self.loc
        text = "".join(lines)
        indent = len(lines[0]) - len(lines[0].lstrip())
        try:
            tree = ast.parse(textwrap.dedent(text))
        except SyntaxError:
            return self.loc
        found: list[ast.Return] = []
        todo: list[ast.AST] = list(getattr(tree.body[0], "body", [])) if tree.body else []
        while todo:  # every statement of the body, not descending into nested defs
            node = todo.pop()
            if isinstance(node, ast.Return) and node.value is not None:
                found.append(node)
            elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                       ast.Lambda)):
                todo.extend(ast.iter_child_nodes(node))
        if not found:
            return self.loc
        node = min(found, key=lambda r: (r.lineno, r.col_offset))
        end_line = node.end_lineno if node.end_lineno is not None else node.lineno
        end_col = node.end_col_offset + indent if node.end_col_offset is not None else None
        return SourceLoc(self.loc.file, first + node.lineno - 1, node.col_offset + indent,
                         end_col, first + end_line - 1)

    def __repr__(self) -> str:
        return f"<tilekit kernel {self.name} at {self.loc}>"
