"""Launching a kernel: arguments -> specialization -> IR -> a backend run.

The runtime owns the call path. ``tk.kernel`` builds a ``JITKernel`` (the front end's
``KernelFunction`` plus ``kern[grid]`` and ``kern.trace``); ``kern[grid]`` is a
``Launch``, whose call

1. binds the arguments (``stream=`` is the launch's own keyword unless the kernel has
   a parameter of that name) and picks the backend from the arrays
   (``device_arrays.choose_backend``);
2. computes the ``Specialization`` (constexprs, dtypes, ranks, index widths, 16-byte
   alignment, stride facts) and traces it once (``KernelFunction.specialize``);
3. interpreter: runs the IR on the host arrays through shadow memory (``shadow``: what the
   kernel wrote reaches the caller's arrays only when every program ran);
   CUDA: computes which of the traced kernel's size facts hold for the call's shapes
   (``size_candidates``: listed once per specialization), finds the loaded kernel in
   memory (per kernel, specialization, device and size facts: a ``gpu.Variant``), else
   the disk cache, else compiles it (``tilekit.codegen.compile_module``, which runs the
   layout pass and lowering), links the PTX (``link``), loads it (``driver``); checks the
   launch against the device (``checks``) before anything is queued; writes the argument
   slots and makes one ``cuLaunchKernel`` on the caller's stream.

Errors name the caller's line.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from types import MethodType
from typing import TYPE_CHECKING, Any

import numpy as np

from tilekit.errors import LaunchError, SourceLoc, TilekitError, user_loc
from tilekit.ir.dtypes import DType, python_scalar_dtype
from tilekit.lang.kernel import (
    ConstSpec,
    KernelFunction,
    ParamKind,
    ScalarSpec,
    Specialization,
    TensorSpec,
    stride_facts,
)
from tilekit.rt.checks import MAX_GRID, check_grid

if TYPE_CHECKING:  # the IR is imported when a kernel is first traced, not before
    from tilekit.codegen.size_facts import SizeFact
    from tilekit.ir.core import Function, Module, Value
    from tilekit.ir.passes import PassManager

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def hashable(value: Any) -> bool:
    """Whether ``value`` can key a cache (a constexpr's value must)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def specialize_arguments(
    kernel: KernelFunction, bound: Mapping[str, Any], loc: SourceLoc | None,
    describe: Callable[[Any, str, SourceLoc | None], Any] | None = None,
) -> tuple[Specialization, dict[str, Any]]:
    """The specialization for bound arguments, and each runtime argument's backend form
    (``describe(value, name, loc)`` for arrays: host views for the interpreter, the
    default ``arrays.to_host``, device descriptions for CUDA; 0-d numpy values for
    scalars)."""
    # Imported when first needed, not with tilekit: a launch of device arrays never
    # imports host arrays (``arrays``).
    from tilekit.rt.device_arrays import is_array

    if describe is None:
        from tilekit.rt.arrays import to_host

        describe = to_host
    specs: list[tuple[str, Any]] = []
    runtime: dict[str, Any] = {}
    for param in kernel.params:
        value = bound[param.name]
        kind = param.kind
        if kind is ParamKind.CONSTEXPR:
            if value is inspect.Parameter.empty:
                raise LaunchError(f"missing constexpr `{param.name}` of kernel `{kernel.name}`",
                                  loc)
            if is_array(value) or not hashable(value):
                raise LaunchError(
                    f"`{param.name}` is a tk.constexpr, so it must be a compile-time constant "
                    f"(int, float, bool, str, dtype or tuple), got {type(value).__name__}", loc,
                    hints=["remove the tk.constexpr annotation to pass it at run time"])
            specs.append((param.name, ConstSpec(value)))
        elif kind is ParamKind.TENSOR or (kind is ParamKind.ANY
                                          and not isinstance(value, _SCALARS)):
            if isinstance(value, _SCALARS):
                raise LaunchError(f"`{param.name}` is a tk.Tensor parameter, got the scalar "
                                  f"{value!r}", loc)
            arr = describe(value, param.name, loc)
            runtime[param.name] = arr
            unit, rows16 = stride_facts(arr.shape, arr.strides, arr.dtype.itemsize)
            specs.append((param.name, TensorSpec(arr.dtype, len(arr.shape), arr.index_dtype,
                                                 arr.aligned16, unit, rows16)))
        else:
            if not isinstance(value, _SCALARS):
                raise LaunchError(f"`{param.name}` is a scalar parameter, got "
                                  f"{type(value).__name__}", loc,
                                  hints=["annotate it tk.Tensor if it should be an array"])
            dtype = param.dtype or python_scalar_dtype(value)
            if param.dtype is None and isinstance(value, (int, np.integer)) and \
                    not isinstance(value, (bool, np.bool_)):
                dtype = DType.INT32 if -(2**31) <= int(value) < 2**31 else DType.INT64
            if dtype.is_int and isinstance(value, (int, np.integer)) and \
                    not isinstance(value, (bool, np.bool_)):
                info = np.iinfo(dtype.np)
                if not info.min <= int(value) <= info.max:  # no silent wraparound
                    raise LaunchError(
                        f"scalar `{param.name}` = {int(value)} does not fit in {dtype}", loc,
                        hints=[f"annotate it with a wider type, e.g. `{param.name}: tk.uint64`"
                               if param.dtype is None else
                               f"pass a value in [{info.min}, {info.max}]"])
                value = int(value)
            runtime[param.name] = np.asarray(value).astype(dtype.np)
            specs.append((param.name, ScalarSpec(dtype)))
    return Specialization(tuple(specs)), runtime


def _resolve_grid(grid: Any, meta: Mapping[str, Any], loc: SourceLoc | None) -> tuple[int, ...]:
    """The grid as 1 to 3 ints, each within the limits every target device has
    (``checks.MAX_GRID``), checked before anything runs on either backend. A dimension of
    0 is allowed: the launch runs no program (``tk.cdiv(0, BLOCK)`` for an empty input)."""
    if callable(grid):
        grid = grid(dict(meta))
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise LaunchError(f"the grid must be an int or a tuple of 1 to 3 ints, got {grid!r}", loc)
    out = []
    for g in grid:
        if not isinstance(g, (int, np.integer)) or isinstance(g, bool) or g < 0:
            raise LaunchError(f"grid sizes must be non-negative ints, got {grid!r}", loc,
                              hints=["use tk.cdiv(n, BLOCK) to count blocks"])
        out.append(int(g))
    check_grid(out, MAX_GRID, loc)
    return tuple(out)


def _written_tensors(fn: Function) -> set[int]:
    written = set()
    for op in fn.walk():
        if op.name in ("store", "tile_store", "atomic"):
            written.add(id(op.operands[0]))
        elif op.name == "copy_s2g":  # as ir.passes.written_args
            written.add(id(op.operand("tensor")))
    return written


# --- the kernel object --------------------------------------------------------------------


class JITKernel(KernelFunction):
    """A ``@tk.kernel`` function that the runtime can launch: ``kern[grid](...)``."""

    def __init__(self, fn: Callable[..., Any], passes: PassManager | None = None) -> None:
        super().__init__(fn, passes)
        # The fast path's generated function (fastpath.Dispatcher.call) once it has an
        # entry: kern[grid] is then that function bound to the grid, else a Launch.
        self._fast_call: Callable[..., None] | None = None
        # gpu.Variant (specialization, device ordinal, size facts) -> the loaded kernel
        self._loaded = LoadedKernels(self)
        self._stream_is_param = any(p.name == "stream" for p in self.params)

    def _globals_changed(self, values: bool) -> None:
        """Other values: the loaded kernels go with the traces. Equal values held by other
        objects: the fast path's guards name the old objects, so its dispatchers go."""
        super()._globals_changed(values)
        if values:
            self._loaded.clear()
        else:
            self._loaded.forget_fast()

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        call = self._fast_call
        if call is None:
            return Launch(self, grid)
        return MethodType(call, grid)  # a method object: the cheapest callable to make

    def size_candidates(self, spec: Specialization) -> tuple[SizeFact, ...]:
        """The size facts ``(tensor, dim, n)`` the traced kernel of ``spec`` can use (its
        tile views'), listed once per specialization and kept with the traced IR; which
        of them hold is part of a GPU launch's variant. The interpreter needs none."""
        module = self.specialize(spec)
        found: tuple[SizeFact, ...] | None = getattr(module.kernel, "size_candidates", None)
        if found is None:
            from tilekit.codegen.size_facts import candidate_size_facts

            found = candidate_size_facts(module)
            module.kernel.size_candidates = found  # type: ignore[attr-defined]
        return found

    def trace(self, *args: Any, **kwargs: Any) -> Module:
        """The (optimized) IR for these example arguments, without running anything
        (device arrays are described in place, not copied)."""
        from tilekit.rt import device_arrays

        loc = user_loc()

        def describe(value: Any, name: str, at: SourceLoc | None) -> Any:
            if device_arrays.is_device_array(value):
                return device_arrays.describe(value, name, at)
            from tilekit.rt.arrays import to_host

            return to_host(value, name, at)

        spec, _ = specialize_arguments(self, self.bind(args, kwargs, loc), loc, describe)
        return self.specialize(spec)


def kernel(fn: Callable[..., Any] | None = None) -> Any:
    """Decorator: make ``fn`` a tilekit kernel (``@tk.kernel`` or ``@tk.kernel()``)."""
    if fn is None:
        return kernel
    return JITKernel(fn)


class LoadedKernels(dict):  # type: ignore[type-arg]
    """``gpu.Variant -> gpu.LoadedKernel`` for one kernel, and the fast
    path's dispatchers built on them (``fast``: profile -> ``fastpath.Dispatcher``).
    Clearing it drops both, so the next launch takes the slow path again."""

    def __init__(self, kernel: JITKernel) -> None:
        super().__init__()
        self.kernel = kernel
        self.fast: dict[Any, Any] = {}

    def activate(self, dispatcher: Any) -> None:
        """Make ``kern[grid](...)`` call ``dispatcher``'s generated function first."""
        self.kernel._fast_call = dispatcher.call

    def deactivate(self) -> None:
        """Back to the slow path for every launch (the entries stay)."""
        self.kernel._fast_call = None

    def forget_fast(self) -> None:
        """Drop the dispatchers (the loaded kernels stay): the next launch of each
        profile takes the slow path, which generates a new one."""
        self.fast.clear()
        self.kernel._fast_call = None

    def clear(self) -> None:
        super().clear()
        self.forget_fast()


class Launch:
    """``kern[grid]``: call it with the kernel's arguments to run it. ``stream=`` (an int
    handle or a torch/cupy stream) picks the CUDA stream; by default the launch goes on
    torch's (or cupy's) current stream when such arrays are passed.

    This class's ``__call__`` is the full (slow) path; once a launch of torch tensors
    succeeded, ``kern[grid]`` is instead the fast path's generated function bound to the
    grid (``tilekit.rt.fastpath``), which comes back to ``_miss`` when it cannot repeat
    the launch."""

    __slots__ = ("kernel", "grid")

    def __init__(self, kernel: JITKernel, grid: Any) -> None:
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        try:
            self._launch(args, kwargs)
        except TilekitError as exc:
            # The message already names the user's line; tilekit's frames would only add noise.
            raise exc.with_traceback(None) from None

    def _miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], missed: Any = None) -> None:
        """The fast path's dispatcher ``missed`` could not repeat this launch: try the
        kernel's other profiles, then the slow path."""
        from tilekit.rt.fastpath import MISS

        for dispatcher in list(self.kernel._loaded.fast.values()):
            if dispatcher is not missed and \
                    dispatcher.dispatch(self.grid, args, kwargs) is not MISS:
                return
        Launch.__call__(self, *args, **kwargs)

    def _launch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        loc = user_loc()
        kern = self.kernel
        kern.check_globals()  # before any cache is asked (a portfolio's too)
        stream = None
        if "stream" in kwargs and not getattr(kern, "_stream_is_param", False):
            stream = kwargs.pop("stream")
        bound = kern.bind(args, kwargs, loc)
        values = [bound[p.name] for p in kern.params]
        from tilekit.rt import device_arrays

        on_device = any(device_arrays.is_array(v) and device_arrays.is_device_array(v)
                        for v in values)
        backend = device_arrays.choose_backend(on_device)
        if backend.kind is device_arrays.BackendKind.CUDA:
            from tilekit.rt import gpu

            gpu.launch(kern, self.grid, bound, values, stream, loc, fast=True)
            return
        spec, runtime = specialize_arguments(kern, bound, loc)
        grid = _resolve_grid(self.grid, {**spec.constexprs, **bound}, loc)
        module = kern.specialize(spec)
        if math.prod(grid) == 0:
            return
        run_interpreted(module, grid, runtime, loc)


def run_interpreted(module: Module, grid: tuple[int, ...], runtime: Mapping[str, Any],
                    loc: SourceLoc | None) -> None:
    """Run on the interpreter against shadow copies of the memory the kernel writes
    (``tilekit.rt.shadow``), published only when every program ran: a failed launch
    (any error, or Ctrl-C) leaves the caller's arrays untouched."""
    from tilekit.rt import interpreter  # not needed by a GPU launch
    from tilekit.rt.arrays import HostArray
    from tilekit.rt.memory import TensorBinding
    from tilekit.rt.shadow import Shadows

    fn = module.kernel
    written = _written_tensors(fn)
    tensors = [a for a in fn.args if isinstance(runtime[a.name_hint], HostArray)]
    for arg in tensors:
        if id(arg) in written and not runtime[arg.name_hint].array.flags.writeable:
            raise LaunchError(f"kernel `{fn.name}` writes to `{arg.name_hint}`, but that "
                              "array is read-only", loc,
                              hints=[f"pass a writable copy: {arg.name_hint}.copy()"])
    shadows = Shadows([runtime[a.name_hint] for a in tensors], [id(a) in written for a in tensors])
    args: dict[Value, Any] = {a: runtime[a.name_hint] for a in fn.args}
    for arg, host in zip(tensors, shadows.hosts):
        args[arg] = TensorBinding(arg.name_hint or "tensor", host)
    interpreter.run(fn, grid, args)
    shadows.commit()
    for host in shadows.hosts:
        if host.writeback is not None:
            host.writeback()
