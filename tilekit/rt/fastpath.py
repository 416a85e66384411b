"""The launch fast path: a cache-hit launch in a few dozen Python operations.

The full launch (``launcher.Launch._launch``: bind with ``inspect.Signature``, describe
the arrays, build the ``Specialization``, hash it, find the loaded kernel, check, pack)
costs ~100 us. After a successful CUDA launch whose arrays are all torch CUDA tensors,
``install`` records, per kernel, what a repeat of that call needs:

* a **dispatcher**, generated once per *profile* (the Python type of each argument and
  the call's shape: how many positional arguments, which keywords). It unpacks the
  arguments, checks their types, and computes a **cheap key** from fast attributes:
  per tensor ``(t.dtype, t.dim(), t.data_ptr() & 15, t.get_device())``, per unannotated
  integer whether it fits in int32, per constexpr its value. Every fact the
  specialization depends on is in the key (dtype, rank, the pointer's residue mod 16,
  which decides 16-byte alignment and element alignment, the device, the scalar widths,
  the constexprs, and whether each size fact ``(tensor, dim, n)`` that a specialization
  of this profile can use holds) or re-checked by the entry (the index width);
  ``test_fastpath_covers_the_specialization`` checks that a new ``TensorSpec`` or
  ``gpu.Variant`` field is added to the key.
* per key, an **entry**, generated once per (specialization, device): it checks the
  grid against the device's limits (int compares), reads each tensor's sizes and
  strides, re-checks that each tensor's index width is the one it was specialized for
  (a 32-bit kernel needs span, extents and strides below 2^31: exact, so a tensor that
  needs the other width misses to the next entry of the key, or to the slow path),
  packs every ABI slot with ONE ``struct.pack_into`` into the kernel's argument buffer
  (the ``void*[]`` of ``kernelParams`` points into it, built once) and makes ONE
  ``cuLaunchKernel`` through ctypes on torch's current stream
  (``torch._C._cuda_getCurrentRawStream``).

Anything unusual (another type, an unseen key, a grid out of range, a value that does
not fit its slot, a stream not seen before, a driver error such as no current context on
this thread) returns ``MISS`` *before* anything is queued, and the caller runs the full
slow path, which launches (and raises the precise error at the user's line) and
installs the new key. So the fast path never decides an error itself: it is a cache in
front of the slow path, and it is correct when every hit launches exactly what the slow
path would. No synchronization, allocation or copy happens on it (kernels with
``tk.device_assert`` read their status word after the launch, as on the slow path), so
launches can be captured in a CUDA graph.

What it skips, by design: the ``TILEKIT_INTERPRET`` environment variable is read when a
launch takes the slow path (``knobs.override(interpret=True)`` turns the fast path off
while active); numpy, cupy and other arrays always take the slow path.
"""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import keyword
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tilekit import knobs
from tilekit.codegen.artifact import SlotKind
from tilekit.codegen.size_facts import SizeFact
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import ConstSpec, ScalarSpec, Specialization, TensorSpec

MISS: Any = type("Miss", (), {"__repr__": lambda self: "MISS", "__slots__": ()})()

# The facts of a TensorSpec the key and the entries cover. A new field must be added to
# the key (``_tensor_key``) or to the entry's checks before it may be listed here.
COVERED_TENSOR_FACTS = frozenset({"dtype", "rank", "index", "aligned16", "unit_inner",
                                  "strides16"})
# The facts of a loaded kernel's variant (``gpu.Variant``) besides its specialization and
# device that the key covers: the size facts (``Dispatcher.cover``).
COVERED_VARIANT_FACTS = frozenset({"divisible"})

_I32 = 2**31 - 1

# struct formats of the ABI slot types (float16 as IEEE half: 'e' rounds like numpy;
# bfloat16 travels as its 16 bits, converted by _bf16_bits).
SLOT_FORMATS: dict[str, str] = {
    "bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B",
    "uint16": "H", "uint32": "I", "uint64": "Q", "float16": "e", "bfloat16": "H",
    "float32": "f", "float64": "d",
}


def slot_layout(dtypes: Sequence[str]) -> tuple[str, tuple[int, ...], int]:
    """The little-endian struct format that packs slots of these types one after the
    other, each at an offset aligned to its size; the offsets; the total size."""
    fmt, offsets, off = ["<"], [], 0
    for dtype in dtypes:
        code = SLOT_FORMATS[dtype]
        size = struct.calcsize("<" + code)
        pad = -off % size
        if pad:
            fmt.append(f"{pad}x")
        off += pad
        offsets.append(off)
        fmt.append(code)
        off += size
    return "".join(fmt), tuple(offsets), max(off, 8)


def _bf16_bits(value: Any) -> int:
    import ml_dtypes

    return int(np.asarray(value).astype(ml_dtypes.bfloat16).view(np.uint16))


def fits_int32(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """The rule of ``device_arrays.index_dtype_for`` (int32 when every offset, extent and
    stride of the view fits)."""
    from tilekit.rt.device_arrays import index_dtype_for

    return index_dtype_for(tuple(shape), tuple(strides)) is DType.INT32


# --- streams ------------------------------------------------------------------------------

# Stream handle -> what cuLaunchKernel is passed (a ctypes pointer, None for stream 0).
# Filled by the slow path (``remember_stream``), so an unseen stream is a miss, not a
# branch on every call.
_streams: dict[int, Any] = {0: None}


def remember_stream(handle: int) -> None:
    if handle not in _streams:
        if len(_streams) > 256:  # graph captures make streams: keep this bounded
            _streams.clear()
            _streams[0] = None
        _streams[handle] = ctypes.c_void_p(handle)


# --- profiles -----------------------------------------------------------------------------

TENSOR, INT, SCALAR, CONST = "tensor", "int", "scalar", "const"


@dataclasses.dataclass(frozen=True)
class ArgPlan:
    """How the fast path reads one parameter: ``kind`` is TENSOR (a torch tensor of type
    ``type`` and rank ``rank``), INT (an unannotated integer of type ``type``: whether it
    fits in int32 is keyed), SCALAR (a scalar of type ``type`` and fixed dtype; ``bf16``
    when that dtype is bfloat16), or CONST (a constexpr: its value is keyed)."""

    name: str
    kind: str
    type: type | None
    has_default: bool
    rank: int = 0
    bf16: bool = False


@dataclasses.dataclass(frozen=True)
class Profile:
    args: tuple[ArgPlan, ...]
    npos: int  # positional arguments of the call
    kwnames: tuple[str, ...]  # keyword arguments of the call (parameters), in call order
    stream_kw: bool  # the call passed stream= (the launch option)


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr") and \
        hasattr(value, "get_device")


def profile_of(kern: Any, spec: Specialization, bound: Mapping[str, Any], npos: int,
               kwnames: Sequence[str], stream_kw: bool) -> Profile | None:
    """The profile of a call that the slow path just launched, or None when the fast
    path cannot repeat it (an array that is not a torch tensor, an odd scalar)."""
    facts = dict(spec.args)
    if {f.name for f in dataclasses.fields(TensorSpec)} != COVERED_TENSOR_FACTS:
        return None  # the specialization grew a fact the key does not cover
    plans = []
    for param in kern.params:
        if param.name.startswith("_tk_") or keyword.iskeyword(param.name):
            return None
        value = bound[param.name]
        fact = facts.get(param.name)
        has_default = param.default is not inspect.Parameter.empty
        if isinstance(fact, ConstSpec):
            plans.append(ArgPlan(param.name, CONST, None, has_default))
        elif isinstance(fact, TensorSpec):
            if not _is_torch_tensor(value) or value.get_device() < 0:
                return None
            plans.append(ArgPlan(param.name, TENSOR, type(value), has_default, fact.rank))
        elif isinstance(fact, ScalarSpec):
            t = type(value)
            if not (t in (int, float, bool) or issubclass(t, np.generic)):
                return None
            ranged = param.dtype is None and issubclass(t, (int, np.integer)) and \
                not issubclass(t, (bool, np.bool_))
            plans.append(ArgPlan(param.name, INT if ranged else SCALAR, t, has_default,
                                 bf16=fact.dtype is DType.BFLOAT16))
        else:
            return None
    if not any(p.kind == TENSOR for p in plans):
        return None
    return Profile(tuple(plans), npos, tuple(kwnames), stream_kw)


def canonical_slots(profile: Profile) -> list[tuple[SlotKind, str, int]]:
    """The ABI's slot order (``codegen/artifact.py``) for a profile's arguments: per
    tensor its pointer, sizes and strides; the scalars; the status word."""
    out: list[tuple[SlotKind, str, int]] = []
    for p in profile.args:
        if p.kind == TENSOR:
            out.append((SlotKind.POINTER, p.name, -1))
            out += [(SlotKind.SIZE, p.name, a) for a in range(p.rank)]
            out += [(SlotKind.STRIDE, p.name, a) for a in range(p.rank)]
    out += [(SlotKind.SCALAR, p.name, -1) for p in profile.args if p.kind in (INT, SCALAR)]
    out.append((SlotKind.STATUS, "", -1))
    return out


# --- the dispatcher (per kernel and profile) ----------------------------------------------


def _dispatch_source(kern: Any, profile: Profile, as_method: bool,
                     key_only: bool = False, facts: Sequence[SizeFact] = ()) -> str:
    """Python source of the dispatcher: ``_tk_dispatch(_tk_grid, args, kwargs)``, or as a
    ``__call__(self, *args, **kwargs)`` method of the kernel's launch class. Everything
    up to the launch is in one ``try``: any surprise is a miss, before anything is
    queued. ``facts`` are the size facts the key covers (whether each holds)."""
    plans = profile.args
    names = [p.name for p in plans]
    tensors = [p for p in plans if p.kind == TENSOR]
    body: list[str] = []
    b = body.append
    nkw = len(profile.kwnames) + (1 if profile.stream_kw else 0)
    b(f"if len(args) != {profile.npos} or len(kwargs) != {nkw} or "
      "_tk_overrides and _tk_overrides.get('TILEKIT_INTERPRET'):")
    b("    raise _tk_Miss")
    pos = names[:profile.npos]
    if pos:
        b(f"{', '.join(pos)}, = args")
    for name in names[profile.npos:]:
        if name in profile.kwnames:
            b(f"{name} = kwargs[{name!r}]")
        else:
            b(f"{name} = _tk_default_{name}")
    if profile.stream_kw:
        b("_tk_stream = kwargs['stream']")
    checks = [f"type({p.name}) is not _tk_type_{p.name}" for p in plans if p.kind != CONST]
    b(f"if {' or '.join(checks)}:")
    b("    raise _tk_Miss")
    key: list[str] = []
    values: list[str] = []
    for j, p in enumerate(tensors):
        b(f"_tk_p{j} = {p.name}.data_ptr()")
        if p.rank:  # unpacking checks the rank: another rank raises, a miss
            sizes = [f"_tk_n{j}_{a}" for a in range(p.rank)]
            strides = [f"_tk_s{j}_{a}" for a in range(p.rank)]
            b(f"{', '.join(sizes)}, = {p.name}.shape")
            b(f"{', '.join(strides)}, = {p.name}.stride()")
            if p.rank > 1:  # once per tensor, for the 16-byte row-stride fact
                b(f"_tk_e{j} = {p.name}.element_size()")
        else:
            sizes, strides = [], []
            b(f"if {p.name}.dim(): raise _tk_Miss")
        values += [f"_tk_p{j}", *sizes, *strides]
    b(f"_tk_d = {tensors[0].name}.get_device()")
    for p in plans:
        if p.kind == TENSOR:
            j = tensors.index(p)
            dev = "_tk_d" if j == 0 else f"{p.name}.get_device()"
            key += [f"{p.name}.dtype", f"_tk_p{j} & 15", dev]
            if p.rank:  # the span fits in int32 (torch strides are never negative)
                span = " + ".join(f"(_tk_n{j}_{a} - 1) * _tk_s{j}_{a}" for a in range(p.rank))
                key.append(f"{span} < {_I32}")
                # the stride facts, exactly as lang.kernel.stride_facts computes them
                last = p.rank - 1
                key.append(f"_tk_n{j}_{last} == 1 or _tk_s{j}_{last} == 1")
                if p.rank > 1:
                    rows = " and ".join(
                        f"(_tk_n{j}_{a} == 1 or (_tk_s{j}_{a} * _tk_e{j}) & 15 == 0)"
                        for a in range(last))
                    key.append(f"({rows})")
        elif p.kind == INT:
            key.append(f"-2147483648 <= {p.name} <= 2147483647")
        elif p.kind == CONST:
            key.append(p.name)
    index = {p.name: j for j, p in enumerate(tensors)}
    key += [f"_tk_n{index[name]}_{dim} % {n} == 0" for name, dim, n in facts]
    for p in plans:
        if p.kind in (INT, SCALAR):
            values.append(f"_tk_bf16({p.name})" if p.bf16 else p.name)
    if key_only:  # the key's cost alone (bench/dispatch.py), and the key of an install
        lines = ["def _tk_key(_tk_grid, args, kwargs):", "    try:"]
        lines += ["        " + line for line in body]
        lines += [f"        return ({', '.join(key)},)", "    except Exception:",
                  "        return None"]
        return "\n".join(lines) + "\n"
    b("(_tk_pack, _tk_buf, _tk_fh, _tk_threads, _tk_shared, _tk_params, _tk_status, _tk_mx, "
      f"_tk_my, _tk_mz, _tk_check) = _tk_table[({', '.join(key)},)]")
    # the grid: an int, a tuple of 1 to 3 ints, or a function of the arguments
    b("_tk_g = _tk_grid")
    b("if type(_tk_g) is int:")
    b("    _tk_gx = _tk_g; _tk_gy = _tk_gz = 1")
    b("else:")
    b("    if type(_tk_g) is not tuple:")
    meta = ", ".join(f"{n!r}: {n}" for n in names)
    b(f"        _tk_g = _tk_g({{{meta}}})")
    b("        if type(_tk_g) is int:")
    b("            _tk_g = (_tk_g,)")
    b("    _tk_n = len(_tk_g)")
    b("    if _tk_n == 1:")
    b("        _tk_gx, = _tk_g; _tk_gy = _tk_gz = 1")
    b("        if type(_tk_gx) is not int: raise _tk_Miss")
    b("    elif _tk_n == 2:")
    b("        _tk_gx, _tk_gy = _tk_g; _tk_gz = 1")
    b("        if type(_tk_gx) is not int or type(_tk_gy) is not int: raise _tk_Miss")
    b("    else:")
    b("        _tk_gx, _tk_gy, _tk_gz = _tk_g")
    b("        if type(_tk_gx) is not int or type(_tk_gy) is not int or "
      "type(_tk_gz) is not int: raise _tk_Miss")
    b("if not (0 < _tk_gx <= _tk_mx and 0 < _tk_gy <= _tk_my and 0 < _tk_gz <= _tk_mz):")
    b("    if _tk_gx >= 0 and _tk_gy >= 0 and _tk_gz >= 0 and "
      "not (_tk_gx and _tk_gy and _tk_gz):")
    b("        _tk_empty = True  # an empty grid: nothing to run")
    b("    else:")
    b("        raise _tk_Miss  # the slow path names the limit")
    b("else:")
    b("    _tk_empty = False")
    # the stream
    if profile.stream_kw:
        b("if _tk_stream is None:")
        b("    _tk_s = _tk_streams[_tk_current_stream(_tk_d)]")
        b("elif type(_tk_stream) is int:")
        b("    _tk_s = _tk_streams[_tk_stream]")
        b("else:")
        b("    _tk_s = _tk_streams[_tk_stream_handle(_tk_stream, None)]")
    else:
        b("_tk_s = _tk_streams[_tk_current_stream(_tk_d)]")
    # one pack into the argument buffer ('i' slots refuse values past int32: a miss)
    b(f"_tk_pack(_tk_buf, 0, {', '.join(values + ['_tk_status'])})")

    miss = "return self._miss(args, kwargs)" if as_method else "return _tk_MISS"
    lines = ["def __call__(self, *args, **kwargs):" if as_method else
             "def _tk_dispatch(_tk_grid, args, kwargs):"]
    if as_method:
        lines.append("    _tk_grid = self.grid")
    lines.append("    try:")
    lines += ["        " + line for line in body]
    lines += ["    except Exception:",
              f"        {miss}",
              "    if _tk_empty:",
              "        return None",
              "    try:",
              "        if _tk_launch(_tk_fh, _tk_gx, _tk_gy, _tk_gz, _tk_threads, 1, 1, "
              "_tk_shared, _tk_s, _tk_params, None):",
              f"            {miss}  # nothing was queued: the slow path retries, names errors",
              "    except _tk_ArgumentError:",
              f"        {miss}",
              "    if _tk_check is not None:  # tk.device_assert: read the status word",
              "        _tk_check_status(_tk_check, 0 if _tk_s is None else _tk_s.value, None)",
              "    return None"]
    return "\n".join(lines) + "\n"


class _Miss(Exception):
    pass


class Dispatcher:
    """The fast path of one kernel for one profile: a key -> entry table and the
    generated functions that read it. An entry is a tuple (see ``make_entry``)."""

    def __init__(self, kern: Any, profile: Profile, current_stream: Callable[[int], int],
                 stream_handle: Callable[[Any, Any], int], launch_fn: Any,
                 check_status: Callable[..., None]) -> None:
        self.kern = kern
        self.profile = profile
        self.table: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.specs: dict[tuple[Any, ...], Specialization] = {}
        self.facts: tuple[SizeFact, ...] = ()  # the size facts the key covers
        self.env: dict[str, Any] = {
            "_tk_Miss": _Miss, "_tk_MISS": MISS, "_tk_table": self.table,
            "_tk_streams": _streams, "_tk_overrides": knobs._overrides,
            "_tk_current_stream": current_stream, "_tk_stream_handle": stream_handle,
            "_tk_launch": launch_fn, "_tk_ArgumentError": ctypes.ArgumentError,
            "_tk_check_status": check_status, "_tk_bf16": _bf16_bits,
        }
        defaults = {p.name: p.default for p in kern.params}
        for plan in profile.args:
            self.env[f"_tk_type_{plan.name}"] = plan.type
            if plan.has_default:
                self.env[f"_tk_default_{plan.name}"] = defaults[plan.name]
        self._generate()

    def _generate(self) -> None:
        kern, profile, env, facts = self.kern, self.profile, self.env, self.facts
        self.source = _dispatch_source(kern, profile, as_method=False, facts=facts)
        exec(compile(self.source, f"<tilekit dispatch {kern.name}>", "exec"), env)
        key_source = _dispatch_source(kern, profile, as_method=False, key_only=True,
                                      facts=facts)
        exec(compile(key_source, f"<tilekit key {kern.name}>", "exec"), env)
        self.key_fn: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any] = env["_tk_key"]
        self.dispatch: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any] = \
            env["_tk_dispatch"]
        method = _dispatch_source(kern, profile, as_method=True, facts=facts)
        exec(compile(method, f"<tilekit launch {kern.name}>", "exec"), env)
        self.method: Callable[..., Any] = env["__call__"]
        self.launch_cls: Any = None  # made by LoadedKernels.activate

    def cover(self, candidates: Sequence[SizeFact]) -> bool:
        """Make the key say whether each of ``candidates`` holds (a specialization's size
        facts). The key covers the union over the specializations seen; a new fact
        regenerates the dispatcher and empties its table (keys of the old form are of no
        use: the entries come back as their calls miss once). True when it regenerated."""
        if set(candidates) <= set(self.facts):
            return False
        self.facts = tuple(sorted(set(self.facts) | set(candidates)))
        self.table.clear()
        self.specs.clear()
        self._generate()
        return True

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The key the dispatcher computes for a call (None when it would miss before)."""
        return self.key_fn(None, args, kwargs)

    def add(self, key: tuple[Any, ...], spec: Specialization, loaded: Any) -> bool:
        """Put an entry for ``loaded`` under ``key``, unless the key has one (the first
        stays: a key's facts decide its specialization but for degenerate views, e.g. an
        extent past 2^31 with stride 0, whose 64-bit kernel the slow path keeps running)."""
        if key in self.table:
            return False
        entry = make_entry(self.profile, loaded)
        if entry is None:
            return False
        self.table[key] = entry
        self.specs[key] = spec
        return True


def make_entry(profile: Profile, loaded: Any) -> tuple[Any, ...] | None:
    """What a hit needs of a loaded kernel, in the dispatcher's order: (pack, buffer,
    function, threads, shared bytes, kernelParams, status pointer, grid limits x y z,
    the loaded kernel when its status word must be read). None when the kernel's slots
    are not in the ABI's order (the slow path then serves it)."""
    compiled = loaded.compiled
    if compiled.prints:  # the slow path synchronizes to flush tk.device_print's output
        return None
    slots = [(p.kind, p.arg, p.axis if p.kind in (SlotKind.SIZE, SlotKind.STRIDE) else -1)
             for p in compiled.params]
    if slots != canonical_slots(profile):
        return None
    mx, my, mz = loaded.props.max_grid
    return (loaded.pack, loaded.buffer, ctypes.c_void_p(loaded.function.handle),
            compiled.block_threads, compiled.shared_bytes, ctypes.c_void_p(loaded.params_ptr),
            loaded.status_ptr, mx, my, mz, loaded if compiled.asserts else None)
