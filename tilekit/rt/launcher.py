"""Launching a kernel: arguments -> specialization -> IR -> a backend run.

``Launch`` is what ``kern[grid]`` returns. It checks the grid and the
arguments (with errors that name the caller's line), finds the kernel's
specialization for them, and runs it. The only backend so far is the CPU
interpreter, used when ``TILEKIT_INTERPRET=1`` or when no GPU backend is
available.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilekit.errors import LaunchError, SourceLoc, TilekitError, user_loc
from tilekit.ir.core import Function, Module, Value
from tilekit.ir.dtypes import DType, python_scalar_dtype
from tilekit.lang.kernel import (
    ConstSpec,
    KernelFunction,
    ParamKind,
    ScalarSpec,
    Specialization,
    TensorSpec,
)
from tilekit.rt import interpreter
from tilekit.rt.arrays import HostArray, is_array, to_host
from tilekit.rt.memory import TensorBinding

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def specialize_arguments(
    kernel: KernelFunction, bound: Mapping[str, Any], loc: SourceLoc | None
) -> tuple[Specialization, dict[str, Any]]:
    """The specialization for bound arguments, and each runtime argument's host form."""
    specs: list[tuple[str, Any]] = []
    runtime: dict[str, Any] = {}
    for param in kernel.params:
        value = bound[param.name]
        kind = param.kind
        if kind is ParamKind.CONSTEXPR:
            if value is inspect.Parameter.empty:
                raise LaunchError(f"missing constexpr `{param.name}` of kernel `{kernel.name}`",
                                  loc)
            if is_array(value) or not _hashable(value):
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
            host = to_host(value, param.name, loc)
            runtime[param.name] = host
            specs.append((param.name, TensorSpec(host.dtype, len(host.shape), host.index_dtype)))
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
    return tuple(out)


def _written_tensors(fn: Function) -> set[int]:
    written = set()
    for op in fn.walk():
        if op.name in ("store", "tile_store", "atomic"):
            written.add(id(op.operands[0]))
    return written


class Launch:
    """``kern[grid]``: call it with the kernel's arguments to run it."""

    def __init__(self, kernel: KernelFunction, grid: Any) -> None:
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        try:
            self._launch(args, kwargs)
        except TilekitError as exc:
            # The message already names the user's line; tilekit's frames would only add noise.
            raise exc.with_traceback(None) from None

    def _launch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        loc = user_loc()
        bound = self.kernel.bind(args, kwargs, loc)
        spec, runtime = specialize_arguments(self.kernel, bound, loc)
        grid = _resolve_grid(self.grid, {**spec.constexprs, **bound}, loc)
        module = self.kernel.specialize(spec)
        if math.prod(grid) == 0:
            return
        run_interpreted(module, grid, runtime, loc)


def run_interpreted(module: Module, grid: tuple[int, ...], runtime: Mapping[str, Any],
                    loc: SourceLoc | None) -> None:
    fn = module.kernel
    written = _written_tensors(fn)
    args: dict[Value, Any] = {}
    hosts: list[HostArray] = []
    for arg in fn.args:
        value = runtime[arg.name_hint]
        if isinstance(value, HostArray):
            if id(arg) in written and not value.array.flags.writeable:
                raise LaunchError(f"kernel `{fn.name}` writes to `{arg.name_hint}`, but that "
                                  "array is read-only", loc,
                                  hints=[f"pass a writable copy: {arg.name_hint}.copy()"])
            args[arg] = TensorBinding(arg.name_hint or "tensor", value)
            hosts.append(value)
        else:
            args[arg] = value
    interpreter.run(fn, grid, args)
    for host in hosts:
        if host.writeback is not None:
            host.writeback()

