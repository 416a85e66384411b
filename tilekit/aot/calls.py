"""Abstract calls: a kernel call described without data, and the bucket it lands in.

A bucket (a ``Specialization`` and the call's size facts) is declared as the arguments a
call would pass, each array described by its dtype, shape, strides and base alignment.
``buckets_of`` hands those descriptions to ``specialize_arguments`` and
``size_facts_holding``, the functions a real launch runs, so the AOT builder, the
autotuner and the runtime cannot disagree about what a bucket is. JSON form (one object;
the autotuner's log lines carry it under ``"call"``)::

    {"kernel": {"module": "examples/softmax.py", "name": "softmax"},
     "args": {"X": {"tensor": "bfloat16", "shape": [4096, 4097], "strides": [4097, 1],
                    "align": 16},
              "n_cols": {"scalar": "int32", "value": 4097},
              "BLOCK": {"constexpr": 8192}},
     "arch": "sm_90a"}

``strides`` (in elements) defaults to contiguous, ``align`` (bytes the base pointer is a
multiple of) to 256, a scalar's ``value`` to a representative of its dtype; a constexpr is
an int, float, bool, str, null, list (a tuple) or ``{"dtype": "bfloat16"}``; ``arch`` is
optional. The compact form ``X=bf16[4096,4097] n_cols=i32 BLOCK=8192`` says the same.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tilekit.codegen.size_facts import SizeFact, size_facts_holding
from tilekit.errors import LaunchError, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import (
    ConstSpec,
    KernelFunction,
    ScalarSpec,
    Specialization,
    TensorSpec,
)

if TYPE_CHECKING:
    from tilekit.rt.launcher import JITKernel

DEFAULT_ALIGN = 256  # what cuMemAlloc and torch's allocator give


class CallError(LaunchError):
    """An abstract call is malformed or does not fit its kernel."""


@dataclass
class AbstractTensor:
    """What a launch reads of an array (``describe``'s answer), without the array. Not
    hashable, so that passing one where a constexpr goes is refused as an array would be."""

    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    align: int = DEFAULT_ALIGN
    name: str = ""

    @property
    def index_dtype(self) -> DType:
        from tilekit.rt.device_arrays import index_dtype_for

        return index_dtype_for(self.shape, self.strides)

    @property
    def aligned16(self) -> bool:
        return self.align % 16 == 0


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def alignment_of(address: int) -> int:
    """The largest power of two (at most ``DEFAULT_ALIGN``) that divides ``address``."""
    return DEFAULT_ALIGN if address % DEFAULT_ALIGN == 0 else address & -address


# --- JSON -> arguments ---------------------------------------------------------------------


def _dtype(name: Any, what: str, where: str, loc: SourceLoc | None) -> DType:
    try:
        return DType.parse(str(name))
    except ValueError:
        raise CallError(f"{where}{what}: unknown dtype {name!r}", loc,
                        hints=["dtypes: " + ", ".join(d.long for d in DType)]) from None


def _ints(value: Any, what: str, where: str, loc: SourceLoc | None,
          minimum: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                              for v in value):
        raise CallError(f"{where}{what} must be a list of integers, got {value!r}", loc)
    if minimum is not None and any(v < minimum for v in value):
        raise CallError(f"{where}{what} must not be below {minimum}, got {value!r}", loc)
    return tuple(value)


def decode_const(value: Any) -> Any:
    """A constexpr's JSON form -> its value (lists become tuples)."""
    if isinstance(value, list):
        return tuple(decode_const(v) for v in value)
    if isinstance(value, dict):
        if set(value) != {"dtype"}:
            raise ValueError(f"a constexpr object must be {{\"dtype\": name}}, got {value!r}")
        return DType.parse(str(value["dtype"]))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"unsupported constexpr {value!r}")


def encode_const(value: Any) -> Any:
    """A constexpr value -> its JSON form; ValueError for a value JSON cannot carry."""
    if isinstance(value, DType):
        return {"dtype": value.long}
    if isinstance(value, (tuple, list)):
        return [encode_const(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"a constexpr of type {type(value).__name__} has no JSON form")


def _representative(dtype: DType) -> Any:
    """A value a real call could pass for a scalar of ``dtype`` (an unannotated int
    parameter is int32 or int64 by magnitude, as ``specialize_arguments`` decides)."""
    if dtype.is_bool:
        return False
    if dtype.is_float:
        return 0.0
    return 2**31 if dtype is DType.INT64 else 0


def _argument(desc: Any, name: str, where: str, loc: SourceLoc | None) -> Any:
    what = f"argument `{name}`"
    if not isinstance(desc, dict):
        raise CallError(f"{where}{what} must be an object, got {desc!r}", loc,
                        hints=['e.g. {"tensor": "float32", "shape": [1024]}, '
                               '{"scalar": "int32"} or {"constexpr": 128}'])
    if "tensor" in desc:
        extra = set(desc) - {"tensor", "shape", "strides", "align"}
        if extra or "shape" not in desc:
            raise CallError(f"{where}{what}: a tensor has `tensor`, `shape` and optionally "
                            f"`strides` and `align`, got keys {sorted(desc)}", loc)
        dtype = _dtype(desc["tensor"], what, where, loc)
        shape = _ints(desc["shape"], f"{what}'s shape", where, loc, minimum=0)
        strides = contiguous_strides(shape) if desc.get("strides") is None else \
            _ints(desc["strides"], f"{what}'s strides", where, loc)
        if len(strides) != len(shape):
            raise CallError(f"{where}{what} has {len(shape)} sizes but {len(strides)} strides",
                            loc)
        align = desc.get("align", DEFAULT_ALIGN)
        if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or \
                align & (align - 1):
            raise CallError(f"{where}{what}'s align must be a power of two (the bytes its base "
                            f"address is a multiple of), got {align!r}", loc)
        return AbstractTensor(dtype, shape, strides, min(align, DEFAULT_ALIGN), name)
    if "scalar" in desc:
        if set(desc) - {"scalar", "value"}:
            raise CallError(f"{where}{what}: a scalar has `scalar` and optionally `value`, "
                            f"got keys {sorted(desc)}", loc)
        dtype = _dtype(desc["scalar"], what, where, loc)
        value = desc.get("value")
        if value is None:
            return _ScalarDecl(dtype, _representative(dtype))
        ok = isinstance(value, bool) if dtype.is_bool else \
            isinstance(value, (int, float)) and not isinstance(value, bool) and \
            (dtype.is_float or isinstance(value, int))
        if not ok:
            raise CallError(f"{where}{what}: {value!r} is not a {dtype.long} value", loc)
        return _ScalarDecl(dtype, value)
    if "constexpr" in desc:
        if set(desc) != {"constexpr"}:
            raise CallError(f"{where}{what}: a constexpr has only `constexpr`, got keys "
                            f"{sorted(desc)}", loc)
        try:
            return decode_const(desc["constexpr"])
        except ValueError as exc:
            raise CallError(f"{where}{what}: {exc}", loc) from None
    raise CallError(f"{where}{what} must have a `tensor`, `scalar` or `constexpr` key, got "
                    f"{sorted(desc)}", loc)


@dataclass(frozen=True)
class _ScalarDecl:
    dtype: DType
    value: Any


def _where(where: str) -> str:
    return f"{where}: " if where else ""


def kernel_name(call: Any, where: str = "", loc: SourceLoc | None = None) -> str:
    """The kernel a call names (``call["kernel"]["name"]``), or a clear error."""
    prefix = _where(where)
    if not isinstance(call, dict):
        raise CallError(f"{prefix}a call must be a JSON object, got {call!r}", loc)
    kernel = call.get("kernel")
    if not isinstance(kernel, dict) or not isinstance(kernel.get("name"), str):
        raise CallError(f"{prefix}a call needs \"kernel\": {{\"name\": ..., \"module\": ...}}",
                        loc)
    if not isinstance(call.get("args"), dict):
        raise CallError(f"{prefix}a call needs \"args\": {{parameter: description}}", loc)
    arch = call.get("arch")
    if arch is not None and not isinstance(arch, str):
        raise CallError(f"{prefix}\"arch\" must be a string like \"sm_90a\", got {arch!r}", loc)
    return kernel["name"]


def buckets_of(kern: JITKernel, call: Mapping[str, Any], where: str = "",
               loc: SourceLoc | None = None) -> tuple[Specialization, frozenset[SizeFact]]:
    """The specialization and size facts of the call ``call`` describes (the JSON form),
    computed by the code a real launch runs. ``where`` (e.g. ``calls.jsonl:3``) and
    ``loc`` say where the call was declared, for errors; trace errors name the kernel's
    line as usual."""
    from tilekit.rt.launcher import specialize_arguments

    prefix = _where(where)
    kernel_name(call, where, loc)
    params = {p.name: p for p in kern.params}
    unknown = sorted(set(call["args"]) - set(params))
    if unknown:
        raise CallError(f"{prefix}kernel `{kern.name}` has no parameter "
                        + ", ".join(f"`{n}`" for n in unknown), loc,
                        hints=[f"its parameters are ({', '.join(params)})"])
    kwargs: dict[str, Any] = {}
    declared: dict[str, DType] = {}
    for name, desc in call["args"].items():
        value = _argument(desc, name, prefix, loc)
        if isinstance(value, _ScalarDecl):
            declared[name] = value.dtype
            value = value.value
        kwargs[name] = value
    missing = [p.name for p in kern.params
               if p.name not in kwargs and p.default is inspect.Parameter.empty]
    if missing:
        raise CallError(f"{prefix}the call of `{kern.name}` does not describe "
                        + ", ".join(f"`{n}`" for n in missing), loc,
                        hints=[f"its parameters are ({', '.join(params)})"])
    bound = kern.bind((), kwargs, loc)

    def describe(value: Any, name: str, at: SourceLoc | None) -> AbstractTensor:
        if not isinstance(value, AbstractTensor):
            raise CallError(f"{prefix}`{name}` is an array parameter of `{kern.name}`: describe "
                            'it as {"tensor": dtype, "shape": [...]}', loc)
        return value

    try:
        spec, runtime = specialize_arguments(kern, bound, loc, describe)
    except CallError:
        raise
    except LaunchError as exc:  # the launch's own check, said about this declaration
        raise CallError(f"{prefix}{exc.message}", loc, hints=exc.hints) from None
    for name, arg in spec.args:
        if name in declared and isinstance(arg, ScalarSpec) and arg.dtype is not declared[name]:
            raise CallError(
                f"{prefix}scalar `{name}` is declared {declared[name].long}, but a call passing "
                f"such a value gets {arg.dtype.long} (the parameter has no dtype annotation)",
                loc, hints=[f'declare {{"scalar": "{arg.dtype.long}"}}, or annotate the '
                            f"parameter, e.g. `{name}: tk.{declared[name].long}`"])
    shapes = {n: a.shape for n, a in runtime.items() if isinstance(a, AbstractTensor)}
    return spec, size_facts_holding(kern.size_candidates(spec), shapes)


# --- real call -> JSON ---------------------------------------------------------------------


def module_path(kern: KernelFunction) -> str:
    """The file defining ``kern``: relative to the current directory when inside it."""
    path = kern.loc.file if kern.loc is not None else ""
    if path and os.path.isabs(path):
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return path


def _alignment(arr: Any) -> int:
    if isinstance(arr, AbstractTensor):
        return arr.align
    ptr = getattr(arr, "ptr", None)  # a device array
    if isinstance(ptr, int):
        return alignment_of(ptr)
    lo = getattr(arr, "lo", None)  # a staged array: a 256-aligned buffer minus ``lo``
    if isinstance(lo, int):
        return alignment_of(-lo)
    return alignment_of(int(arr.array.ctypes.data))  # a host array


def describe_runtime(kern: KernelFunction, spec: Specialization, runtime: Mapping[str, Any],
                     arch: str | None = None) -> dict[str, Any]:
    """The abstract call of a call already specialized (``specialize_arguments``'s two
    results); ValueError when a constexpr has no JSON form."""
    args: dict[str, Any] = {}
    for name, arg in spec.args:
        if isinstance(arg, ConstSpec):
            args[name] = {"constexpr": encode_const(arg.value)}
        elif isinstance(arg, ScalarSpec):
            value = runtime[name]
            item = value.item() if hasattr(value, "item") else value
            item = bool(item) if arg.dtype.is_bool else \
                float(item) if arg.dtype.is_float else int(item)
            args[name] = {"scalar": arg.dtype.long, "value": item}
        else:
            assert isinstance(arg, TensorSpec)
            arr = runtime[name]
            args[name] = {"tensor": arg.dtype.long, "shape": [int(n) for n in arr.shape],
                          "strides": [int(s) for s in arr.strides], "align": _alignment(arr)}
    doc: dict[str, Any] = {"kernel": {"module": module_path(kern), "name": kern.name},
                           "args": args}
    if arch:
        doc["arch"] = arch
    return doc


def describe_call(kern: KernelFunction, bound: Mapping[str, Any],
                  arch: str | None = None) -> dict[str, Any]:
    """The abstract call of a real call's bound arguments (``kern.bind(args, kwargs,
    loc)``), as a GPU launch of them sees it: device arrays in place, host arrays as the
    staged copies it would make (a 256-byte aligned buffer, whatever the host pointer)."""
    from tilekit.rt import device_arrays
    from tilekit.rt.launcher import specialize_arguments

    def describe(value: Any, name: str, at: SourceLoc | None) -> Any:
        if isinstance(value, AbstractTensor):
            return value
        return device_arrays.describe(value, name, at)

    spec, runtime = specialize_arguments(kern, bound, None, describe)
    return describe_runtime(kern, spec, runtime, arch)


def canonical(call: Mapping[str, Any]) -> str:
    """One line of JSON, keys sorted: the form files hold."""
    return json.dumps(call, sort_keys=True, separators=(",", ":"))


# --- the compact form ----------------------------------------------------------------------

_TENSOR = re.compile(r"(\w+)\[([\d,\s]*)\](?:\{([-\d,\s]*)\})?(?:@(\d+))?")
_SCALAR = re.compile(r"(\w+)(?::(.+))?")
_CONST_DTYPE = re.compile(r"dtype\((\w+)\)")


def _is_dtype(name: str) -> bool:
    try:
        DType.parse(name)
    except ValueError:
        return False
    return True


def parse_compact(text: str, module: str = "", kernel: str = "",
                  arch: str | None = None) -> dict[str, Any]:
    """``[kernel:] NAME=VALUE ...`` -> the JSON form. VALUE is ``dtype[d0,d1]`` (a tensor;
    ``{s0,s1}`` strides and ``@16`` base alignment may follow), ``dtype`` or
    ``dtype:value`` (a scalar), ``dtype(bf16)`` (a dtype constexpr), else a Python literal
    (a constexpr; a bare word is a string)."""
    tokens = text.split()
    if tokens and tokens[0].endswith(":") and "=" not in tokens[0]:
        kernel = tokens.pop(0)[:-1]
    args: dict[str, Any] = {}
    for token in tokens:
        name, eq, value = token.partition("=")
        if not eq or not name.isidentifier():
            raise CallError(f"call {text!r}: expected NAME=VALUE, got {token!r}",
                            hints=["e.g. X=bf16[4096,4097] n=i32 BLOCK=1024"])
        if name in args:
            raise CallError(f"call {text!r}: `{name}` is given twice")
        m = _TENSOR.fullmatch(value)
        if m and _is_dtype(m.group(1)):
            desc: dict[str, Any] = {
                "tensor": DType.parse(m.group(1)).long,
                "shape": [int(v) for v in m.group(2).split(",") if v.strip()]}
            if m.group(3) is not None:
                desc["strides"] = [int(v) for v in m.group(3).split(",") if v.strip()]
            if m.group(4) is not None:
                desc["align"] = int(m.group(4))
            args[name] = desc
            continue
        m = _SCALAR.fullmatch(value)
        if m and _is_dtype(m.group(1)):
            desc = {"scalar": DType.parse(m.group(1)).long}
            if m.group(2) is not None:
                desc["value"] = _literal(m.group(2), text)
            args[name] = desc
            continue
        m = _CONST_DTYPE.fullmatch(value)
        if m:
            args[name] = {"constexpr": {"dtype": m.group(1)}}
            continue
        args[name] = {"constexpr": encode_const(_literal(value, text))}
    if not kernel:
        raise CallError(f"call {text!r} names no kernel",
                        hints=["start it with the kernel's name: `softmax: X=f32[64,4097] ...`"])
    doc: dict[str, Any] = {"kernel": {"module": module, "name": kernel}, "args": args}
    if arch:
        doc["arch"] = arch
    return doc


def _literal(text: str, call: str) -> Any:
    try:
        value = ast.literal_eval(text)  # literals only: nothing is executed
    except (ValueError, SyntaxError):
        if text.isidentifier():
            return text
        raise CallError(f"call {call!r}: cannot read the value {text!r}") from None
    try:
        encode_const(value)
    except ValueError as exc:
        raise CallError(f"call {call!r}: {exc}") from None
    return value
