"""The launch fast path: a cache-hit launch in a few dozen Python operations.

The full launch (``launcher.Launch._launch``: bind with ``inspect.Signature``, describe
the arrays, build the ``Specialization``, hash it, find the loaded kernel, check, pack)
costs ~100 us. After a successful CUDA launch whose arrays are all torch CUDA tensors,
``gpu.install`` records, per kernel, what a repeat of that call needs:

* a **dispatcher**, generated once per *profile* (the Python type of each argument, each
  tensor's rank). ``kern[grid]`` is then a bound method of its generated function, whose
  parameters are the kernel's own (so Python binds the call; defaults are the kernel's,
  anything else is a sentinel, extra arguments land in ``*``/``**`` catch-alls and miss).
  It checks the argument types and computes a **key** from torch's cheapest attributes:
  per tensor its dtype, ``data_ptr() & 15`` (16-byte and element alignment), device,
  whether its span fits in int32, the stride facts (unit last stride, 16-byte row
  strides), per unannotated integer whether it fits in int32, per constexpr its value,
  and whether each size fact ``(tensor, dim, n)`` that a specialization of this profile
  can use holds (``cover``). Every fact a loaded kernel's variant depends on is in the key
  or re-checked by packing (a 32-bit slot refuses a value past 2^31);
  ``test_fastpath_covers_the_specialization`` checks that a new ``TensorSpec`` or
  ``gpu.Variant`` field is added here. Before the key, it checks the kernel's
  ``globals_guards`` (``tilekit.lang.dependencies``): each global, closure variable or
  module attribute the trace read still holds the object it held, by identity (a dict
  lookup or a cell read each; a typical kernel has none). A changed one misses, and the
  slow path's ``check_globals`` drops the traces, loaded kernels and dispatchers built
  on the old values.
* per key, an **entry** (``make_entry``), built once per variant: its own buffer holding
  ``cuLaunchKernelEx``'s launch configuration (grid, block, shared bytes, stream) followed
  by the kernel's argument slots, the ``void*[]`` of ``kernelParams`` pointing into it,
  and the ``struct.pack_into`` that writes both. A hit checks the grid against the
  device's limits (int compares), packs everything with ONE ``pack_into`` and makes ONE
  ``cuLaunchKernelEx`` through ctypes with four pre-built arguments (the configuration,
  the function, the parameter array, NULL) on torch's current stream
  (``torch._C._cuda_getCurrentRawStream``) or ``stream=``.

Anything unusual (another type, an unseen key, a grid out of range, a value that does
not fit its slot, a driver error such as no current context on this thread) is a *miss*
*before* anything is queued, and the full slow path runs, which launches (and raises the
precise error at the user's line) and installs the new key. So the fast path never
decides an error itself: it is a cache in front of the slow path, and it is correct when
every hit launches exactly what the slow path would. No synchronization, allocation or
copy happens on it (kernels with ``tk.device_assert`` read their status word after the
launch, as on the slow path), so launches can be captured in a CUDA graph.

**TMA tensor maps.** An entry whose kernel has ``TENSOR_MAP`` slots packs through a
small function generated for it (``_map_packer``) instead of the bare ``pack_into``: it
looks each map up in ``tensor_maps``' LRU by the tensor's pointer, extents and strides
(already read for the key and the other slots) and passes the 128 bytes to the same single
``pack_into``, into a 64-byte aligned slot of the entry's buffer that the ``kernelParams``
entry points at. A map not cached yet costs one ``cuTensorMapEncodeTiled`` (host work, no
stream operation); the map travels by value, so a captured launch replays with the map it
was captured with. A map the driver cannot encode raises: a miss, and the slow path names
the argument and the violated rules. Kernels without tensor maps keep the bare
``pack_into``: their hits do no work for this (the generated code is the same).

**The native launcher.** When the C extension ``tilekit.rt._fastlaunch`` is built
(``native_module``; ``TILEKIT_NATIVE_LAUNCH=0`` turns it off) and ``cuLaunchKernelEx`` is
a C function (libcuda's, or a test's ctypes callback), a dispatcher's ``call`` is a
``_fastlaunch.Launcher`` instead of the generated ``_tk_call``: the same steps in C, reading
the same torch attributes into the same key, on the same table (an entry's last item is its
``_fastlaunch.Entry``: buffer, function and slot codes for C), writing the same bytes. It
hands any call it does not handle to ``_tk_call`` unchanged (a *decline*: an odd call shape,
a key not in the table, a value that is not a plain int where one is read), so which calls
hit is the generated code's decision; after a table hit, what ``_tk_call`` would miss on (a
grid past the limits, a value that does not fit its slot, a driver error) goes to
``_fallback`` as there. A grid that is a function of the arguments (or a list, numpy ints)
goes through ``_grid3``, ``stream=`` objects through ``stream_handle``, bfloat16 scalars
through ``_bf16_bits``: Python calls made from C. Profiles with numpy scalars, and
dispatchers with an entry packed by ``_map_packer`` (tensor maps), keep the generated
function. The GIL is held from the key to the launch's return (the launch included), so
two threads never write one entry's buffer at once.

What it skips, by design: the ``TILEKIT_INTERPRET`` and ``TILEKIT_CHECK`` environment
variables are read when a launch takes the slow path (``knobs.override(interpret=True)``
or ``check=True`` turns the fast path off while active: ``FAST_PATH_OFF``); numpy, cupy
and other arrays always take the slow path, and so do checked kernels.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import keyword
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from tilekit import knobs
from tilekit.codegen.artifact import ParamSlot, SlotKind
from tilekit.codegen.size_facts import SizeFact
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import ConstSpec, ScalarSpec, Specialization, TensorSpec
from tilekit.record import Record
from tilekit.rt.driver import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES

if TYPE_CHECKING:  # tensor_maps: imported when an entry has maps (TMA), not by every launch
    from tilekit.lang.dependencies import Guard
    from tilekit.rt.tensor_maps import MapSpec

    # (the map's spec, the index of its tensor's pointer among the packed values, its rank)
    MapSource = tuple[MapSpec, int, int]

MISS: Any = type("Miss", (), {"__repr__": lambda self: "MISS", "__slots__": ()})()

# The facts of a TensorSpec the key covers. A new field must be added to the key
# (``_source``) before it may be listed here.
COVERED_TENSOR_FACTS = frozenset({"dtype", "rank", "index", "aligned16", "unit_inner",
                                  "strides16"})
# The facts of a loaded kernel's variant (``gpu.Variant``) besides its specialization and
# device that the key covers: the size facts (``Dispatcher.cover``). ``checked`` needs no
# key: a checked kernel never has an entry (``make_entry``), and while
# ``knobs.override(check=True)`` is active every call misses (``FAST_PATH_OFF``).
COVERED_VARIANT_FACTS = frozenset({"divisible", "checked"})

# The knobs whose ``knobs.override`` turns the fast path off while it is active: they
# change what a launch runs (the interpreter; checked kernels). Read from the overrides
# only when there are overrides, so a hit without them pays one truth test.
FAST_PATH_OFF = ("TILEKIT_INTERPRET", "TILEKIT_CHECK")

_I32 = 2**31 - 1

# The slot type of a TENSOR_MAP slot (``slot_type``): a CUtensorMap by value, 128 bytes,
# 64-byte aligned.
TENSOR_MAP_TYPE = "tensor_map"

# struct formats of the ABI slot types (float16 as IEEE half: 'e' rounds like numpy;
# bfloat16 travels as its 16 bits, converted by _bf16_bits; a tensor map as its bytes).
SLOT_FORMATS: dict[str, str] = {
    "bool": "?", "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint8": "B",
    "uint16": "H", "uint32": "I", "uint64": "Q", "float16": "e", "bfloat16": "H",
    "float32": "f", "float64": "d", TENSOR_MAP_TYPE: f"{TENSOR_MAP_BYTES}s",
}
# Slot alignments other than the slot's size.
_SLOT_ALIGN = {TENSOR_MAP_TYPE: TENSOR_MAP_ALIGN}

# cuLaunchKernelEx's CUlaunchConfig (``driver.structs()``) as a struct format: grid x y
# z, block x y z, dynamic shared bytes, padding, the stream handle, then attrs = NULL and
# numAttrs = 0 (written as zero bytes). An entry's buffer is this configuration followed by
# the argument slots, so that one pack_into writes both.
CONFIG_FORMAT = "<7I4xQ16x"
CONFIG_BYTES = struct.calcsize(CONFIG_FORMAT)
CONFIG_VALUES = len(struct.unpack(CONFIG_FORMAT, bytes(CONFIG_BYTES)))


def slot_type(slot: ParamSlot) -> str:
    """The key of a slot in ``SLOT_FORMATS``: its dtype, or ``TENSOR_MAP_TYPE``."""
    return TENSOR_MAP_TYPE if slot.kind is SlotKind.TENSOR_MAP else slot.dtype


def slot_layout(dtypes: Sequence[str]) -> tuple[str, tuple[int, ...], int]:
    """The little-endian struct format that packs slots of these types (``slot_type``) one
    after the other, each at an offset aligned to its size (a tensor map: to 64 bytes);
    the offsets; the total size."""
    fmt, offsets, off = ["<"], [], 0
    for dtype in dtypes:
        code = SLOT_FORMATS[dtype]
        size = struct.calcsize("<" + code)
        pad = -off % _SLOT_ALIGN.get(dtype, size)
        if pad:
            fmt.append(f"{pad}x")
        off += pad
        offsets.append(off)
        fmt.append(code)
        off += size
    return "".join(fmt), tuple(offsets), max(off, 8)


def aligned_buffer(size: int, lead: int = 0) -> Any:
    """A zeroed ctypes char array of ``size`` bytes whose address plus ``lead`` is a
    multiple of 64 (the alignment of a tensor map; ctypes aligns to 16 at most): a view
    into a larger array, which it keeps alive."""
    raw = (ctypes.c_char * (size + TENSOR_MAP_ALIGN))()
    shift = -(ctypes.addressof(raw) + lead) % TENSOR_MAP_ALIGN
    return (ctypes.c_char * size).from_buffer(raw, shift)


# --- the native launcher ------------------------------------------------------------------
# Whether hits run in C (``tilekit.rt._fastlaunch``), and why not. The extension is optional
# (``setup.py`` builds it when a C compiler is there; a source checkout builds it with
# ``python3 setup.py build_ext --inplace``). Without it, or with ``TILEKIT_NATIVE_LAUNCH=0``,
# every hit takes the generated Python dispatcher, which decides the same hits and packs the
# same bytes.


@functools.cache
def _load_native() -> tuple[ModuleType | None, str]:
    """The extension module, or None and why it could not be imported."""
    try:
        from tilekit.rt import _fastlaunch  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"not built ({exc})"
    return _fastlaunch, ""


def native_module() -> ModuleType | None:
    """The extension when it is built and ``TILEKIT_NATIVE_LAUNCH`` is on, else None."""
    if not knobs.NATIVE_LAUNCH.get():
        return None
    return _load_native()[0]


def native_status() -> str:
    """One line for ``tilekit info``: which launcher serves fast-path hits."""
    lib, why = _load_native()
    if lib is None:
        return (f"python (the native launcher is {why}; build it with "
                "`python3 setup.py build_ext --inplace` or reinstall with a C compiler)")
    if not knobs.NATIVE_LAUNCH.get():
        return f"python (TILEKIT_NATIVE_LAUNCH=0; native launcher built: {lib.__file__})"
    return f"native ({lib.__file__})"


def function_address(fn: Any) -> int | None:
    """The C address of a ctypes function (libcuda's ``cuLaunchKernelEx``, a test's
    ``CFUNCTYPE`` callback), or None for anything else (e.g. a Python stand-in: that
    dispatcher stays in Python)."""
    if not isinstance(fn, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value or None


# --- helpers of the generated code --------------------------------------------------------


def _bf16_bits(value: Any) -> int:
    import ml_dtypes

    return int(np.asarray(value).astype(ml_dtypes.bfloat16).view(np.uint16))


def _grid3(grid: Any, meta: dict[str, Any], mx: int, my: int,
           mz: int) -> tuple[int, int, int] | None:
    """The grid as three ints within the device's limits, as ``launcher._resolve_grid``
    reads it (a function of the arguments, an int or a tuple or list of 1 to 3 ints, numpy
    ints too, no bools); None when it is empty (the slow path launches nothing). Anything
    else raises: a miss, and the slow path names the error."""
    if not isinstance(grid, (tuple, list, int, np.integer)):
        grid = grid(meta)
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise _Miss
    dims = []
    for g in grid:
        if not isinstance(g, (int, np.integer)) or isinstance(g, (bool, np.bool_)) or g < 0:
            raise _Miss
        dims.append(int(g))
    if 0 in dims:
        return None
    gx, gy, gz = (*dims, 1, 1)[:3]
    if not (gx <= mx and gy <= my and gz <= mz):
        raise _Miss
    return gx, gy, gz


# torch dtype -> the mask of a stride (in elements) whose bytes are a multiple of 16 when
# it is 0: 16 // gcd(itemsize, 16) - 1. Filled at install (``note_dtype``); a dtype not in
# it is a miss.
_row_masks: dict[Any, int] = {}


def note_dtype(dtype: Any, itemsize: int) -> None:
    _row_masks[dtype] = 16 // math.gcd(itemsize, 16) - 1


# --- profiles -----------------------------------------------------------------------------

TENSOR, INT, SCALAR, CONST = "tensor", "int", "scalar", "const"

# Names the generated code takes from the builtins: a parameter may not shadow them.
_BUILTINS = frozenset({"type", "len", "int", "tuple", "Exception", "None"})


class ArgPlan(Record):
    """How the fast path reads one parameter: ``kind`` is TENSOR (a torch tensor of type
    ``type`` and rank ``rank``), INT (an unannotated integer of type ``type``: whether it
    fits in int32 is keyed), SCALAR (a scalar of type ``type`` and fixed dtype; ``bf16``
    when that dtype is bfloat16), or CONST (a constexpr: its value is keyed)."""
    __slots__ = ()
    name: str
    kind: str
    type: type | None
    rank: int = 0
    bf16: bool = False


class Profile(Record):
    __slots__ = ()
    args: tuple[ArgPlan, ...]
    stream_option: bool  # ``stream=`` is the launch's option (no parameter of that name)


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr") and \
        hasattr(value, "get_device")


def profile_of(kern: Any, spec: Specialization, bound: Mapping[str, Any]) -> Profile | None:
    """The profile of a call that the slow path just launched, or None when the fast
    path cannot repeat it (an array that is not a torch tensor, an odd scalar)."""
    facts = dict(spec.args)
    if set(TensorSpec._fields) != COVERED_TENSOR_FACTS:
        return None  # the specialization grew a fact the key does not cover
    plans = []
    for param in kern.params:
        if param.name.startswith("_tk_") or keyword.iskeyword(param.name) or \
                param.name in _BUILTINS:
            return None
        value = bound[param.name]
        fact = facts.get(param.name)
        if isinstance(fact, ConstSpec):
            plans.append(ArgPlan(param.name, CONST, None))
        elif isinstance(fact, TensorSpec):
            if not _is_torch_tensor(value) or value.get_device() < 0:
                return None
            plans.append(ArgPlan(param.name, TENSOR, type(value), fact.rank))
        elif isinstance(fact, ScalarSpec):
            t = type(value)
            if not (t in (int, float, bool) or issubclass(t, np.generic)):
                return None
            ranged = param.dtype is None and issubclass(t, (int, np.integer)) and \
                not issubclass(t, (bool, np.bool_))
            plans.append(ArgPlan(param.name, INT if ranged else SCALAR, t,
                                 bf16=fact.dtype is DType.BFLOAT16))
        else:
            return None
    if not any(p.kind == TENSOR for p in plans):
        return None
    return Profile(tuple(plans), not getattr(kern, "_stream_is_param", False))


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


# --- the generated code -------------------------------------------------------------------

CALL, TRY, KEY = "call", "try", "key"


def _signature(kern: Any, profile: Profile) -> str:
    """``_tk_grid, /, <the kernel's parameters>, *_tk_more, [stream=,] **_tk_kw``: every
    parameter defaults to its own default or to the sentinel ``_tk_U``, so a call of any
    shape binds, and a wrong one misses (the slow path names the error)."""
    params = list(kern.signature.parameters.values())

    def one(p: inspect.Parameter) -> str:
        return f"{p.name}=" + ("_tk_U" if p.default is p.empty else f"_tk_default_{p.name}")

    posonly = [one(p) for p in params if p.kind is p.POSITIONAL_ONLY]
    normal = [one(p) for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    kwonly = [one(p) for p in params if p.kind is p.KEYWORD_ONLY]
    stream = ["stream=_tk_U"] if profile.stream_option else []
    return ", ".join(["_tk_grid", *posonly, "/", *normal, "*_tk_more", *kwonly, *stream,
                      "**_tk_kw"])


def _source(kern: Any, profile: Profile, facts: Sequence[SizeFact], mode: str,
            guards: Sequence[Guard] = ()) -> str:
    """Python source of one of the dispatcher's functions: ``_tk_call`` (what
    ``kern[grid](...)`` runs: a miss runs ``_tk_fallback``), ``_tk_try`` (the same, but a
    miss returns MISS) or ``_tk_key`` (the key of a call, or None). Everything up to the
    launch is in one ``try``: any surprise is a miss, before anything is queued. The
    ``guards`` (the kernel's ``globals_guards``) are checked first, by identity, against
    the env's ``_tk_gw<i>`` (a dict or a cell) and ``_tk_gv<i>`` (the object)."""
    plans = profile.args
    names = [p.name for p in plans]
    tensors = [p for p in plans if p.kind == TENSOR]
    body: list[str] = []
    b = body.append
    checks = [f"type({p.name}) is not _tk_type_{p.name}" for p in plans if p.kind != CONST]
    if mode != KEY:
        off = " or ".join(f"_tk_overrides.get({k!r})" for k in FAST_PATH_OFF)
        checks += ["_tk_more", "_tk_kw", f"_tk_overrides and ({off})"]
        # the globals the trace read still hold the same objects (a missing one raises)
        checks += [f"_tk_gw{i}.cell_contents is not _tk_gv{i}" if name is None else
                   f"_tk_gw{i}[{name!r}] is not _tk_gv{i}"
                   for i, (_, name, _) in enumerate(guards)]
    b(f"if {' or '.join(checks)}:")
    b("    raise _tk_Miss")
    key: list[str] = []
    values: list[str] = []
    for j, p in enumerate(tensors):
        b(f"_tk_p{j} = {p.name}.data_ptr()")
        dtype = f"{p.name}.dtype"
        if p.rank:  # unpacking checks the rank: another rank raises, a miss
            sizes = [f"_tk_n{j}_{a}" for a in range(p.rank)]
            strides = [f"_tk_s{j}_{a}" for a in range(p.rank)]
            b(f"{', '.join(sizes)}, = {p.name}.shape")
            b(f"{', '.join(strides)}, = {p.name}.stride()")
            if p.rank > 1:  # the dtype's row-stride mask, for the 16-byte row fact
                b(f"_tk_t{j} = {p.name}.dtype")
                b(f"_tk_m{j} = _tk_row_masks[_tk_t{j}]")
                dtype = f"_tk_t{j}"
        else:
            sizes, strides = [], []
            b(f"if {p.name}.dim(): raise _tk_Miss")
        values += [f"_tk_p{j}", *sizes, *strides]
        dev = "_tk_d" if j == 0 else f"{p.name}.get_device()"
        if j == 0:
            b(f"_tk_d = {p.name}.get_device()")
        key += [dtype, f"_tk_p{j} & 15", dev]
        if p.rank:  # the span fits in int32 (torch strides are never negative)
            span = " + ".join(f"(_tk_n{j}_{a} - 1) * _tk_s{j}_{a}" for a in range(p.rank))
            key.append(f"{span} < {_I32}")
            # the stride facts, exactly as lang.kernel.stride_facts computes them
            last = p.rank - 1
            key.append(f"_tk_n{j}_{last} == 1 or _tk_s{j}_{last} == 1")
            if p.rank > 1:
                rows = " and ".join(f"(_tk_n{j}_{a} == 1 or not _tk_s{j}_{a} & _tk_m{j})"
                                    for a in range(last))
                key.append(f"({rows})")
    for p in plans:
        if p.kind == INT:
            key.append(f"-2147483648 <= {p.name} <= 2147483647")
        elif p.kind == CONST:
            key.append(p.name)
    index = {p.name: j for j, p in enumerate(tensors)}
    for name, dim, n in facts:  # the size facts (size_facts_holding): positive multiples
        size = f"_tk_n{index[name]}_{dim}"
        key.append(f"0 < {size} and not {size} & {n - 1}" if n & (n - 1) == 0
                   else f"0 < {size} and {size} % {n} == 0")
    for p in plans:
        if p.kind in (INT, SCALAR):
            values.append(f"_tk_bf16({p.name})" if p.bf16 else p.name)

    if mode == KEY:  # the key of a call (gpu.install; bench/dispatch.py times it)
        lines = [f"def _tk_key({', '.join(names)}):", "    try:"]
        lines += ["        " + line for line in body]
        lines += [f"        return ({', '.join(key)},)", "    except Exception:",
                  "        return None"]
        return "\n".join(lines) + "\n"

    b("(_tk_pack, _tk_buf, _tk_fh, _tk_params, _tk_threads, _tk_shared, _tk_mx, _tk_my, "
      f"_tk_mz, _tk_check, _tk_native) = _tk_table[{', '.join(key)}]")
    # the grid: a 1-tuple or an int of range checked here; any other form (a function of
    # the arguments, 2 or 3 dims, numpy ints, a list, a value out of range) by _grid3
    meta = ", ".join(f"{n!r}: {n}" for n in names)
    b("_tk_g = _tk_grid")
    b("if type(_tk_g) is tuple and len(_tk_g) == 1:")
    b("    _tk_gx, = _tk_g")
    b("    _tk_gy = _tk_gz = 1")
    b("    if type(_tk_gx) is not int or not 0 < _tk_gx <= _tk_mx:")
    b("        _tk_gx = None")
    b("elif type(_tk_g) is int and 0 < _tk_g <= _tk_mx:")
    b("    _tk_gx = _tk_g")
    b("    _tk_gy = _tk_gz = 1")
    b("else:")
    b("    _tk_gx = None")
    b("if _tk_gx is None:")
    b(f"    _tk_g = _tk_grid3(_tk_g, {{{meta}}}, _tk_mx, _tk_my, _tk_mz)")
    b("    if _tk_g is None:")
    b("        return None  # an empty grid: nothing to run")
    b("    _tk_gx, _tk_gy, _tk_gz = _tk_g")
    # the stream: torch's current one on the tensors' device, or stream=
    if profile.stream_option:
        b("if stream is _tk_U or stream is None:")
        b("    _tk_s = _tk_current_stream(_tk_d)")
        b("elif type(stream) is int:")
        b("    _tk_s = stream")
        b("else:")
        b("    _tk_s = _tk_stream_handle(stream, None)")
    else:
        b("_tk_s = _tk_current_stream(_tk_d)")
    # one pack: the launch configuration, then every slot but the status word (written
    # once); 'i' slots refuse values past int32 (a miss)
    b("_tk_pack(_tk_buf, 0, _tk_gx, _tk_gy, _tk_gz, _tk_threads, 1, 1, _tk_shared, _tk_s, "
      f"{', '.join(values)})")

    stream_arg = "stream" if profile.stream_option else "_tk_U"
    miss = (f"return _tk_fallback(_tk_grid, ({', '.join(names)},), _tk_more, {stream_arg}, "
            "_tk_kw)" if mode == CALL else "return _tk_MISS")
    lines = [f"def _tk_{mode}({_signature(kern, profile)}):", "    try:"]
    lines += ["        " + line for line in body]
    lines += ["    except Exception:",
              f"        {miss}",
              "    if _tk_launch(_tk_buf, _tk_fh, _tk_params, None):",
              f"        {miss}  # nothing was queued: the slow path retries, names errors",
              "    if _tk_check is not None:  # tk.device_assert: read the status word",
              "        _tk_check_status(_tk_check, _tk_s, None)",
              "    return None"]
    return "\n".join(lines) + "\n"


class _Miss(Exception):
    pass


class _Sources(dict):  # type: ignore[type-arg]
    """A dispatcher's generated sources, mode -> text: asking for a mode not generated yet
    generates it (and its function)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        super().__init__()
        self.dispatcher = dispatcher

    def __missing__(self, mode: str) -> str:
        if mode not in (CALL, TRY, KEY):
            raise KeyError(mode)
        self.dispatcher._function(mode)
        return str(dict.__getitem__(self, mode))


class _Unset:
    """The default of a parameter the call did not pass (the slow path names the error)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


# --- the dispatcher (per kernel and profile) ----------------------------------------------


class Dispatcher:
    """The fast path of one kernel for one profile: a key -> entry table and the
    generated functions that read it. An entry is a tuple (see ``make_entry``). ``call``
    is what ``kern[grid]`` binds: the native launcher when it serves this profile
    (``native``), else the generated ``python_call``."""

    def __init__(self, kern: Any, profile: Profile, current_stream: Callable[[int], int],
                 stream_handle: Callable[[Any, Any], int], launch_fn: Any,
                 check_status: Callable[..., None], facts: Sequence[SizeFact] = ()) -> None:
        self.kern = kern
        self.profile = profile
        self.table: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.specs: dict[tuple[Any, ...], Specialization] = {}
        self.facts: tuple[SizeFact, ...] = tuple(sorted(set(facts)))  # what the key covers
        self.env: dict[str, Any] = {
            "_tk_Miss": _Miss, "_tk_MISS": MISS, "_tk_U": _UNSET, "_tk_table": self.table,
            "_tk_overrides": knobs._overrides, "_tk_row_masks": _row_masks,
            "_tk_current_stream": current_stream, "_tk_stream_handle": stream_handle,
            "_tk_launch": launch_fn, "_tk_check_status": check_status,
            "_tk_bf16": _bf16_bits, "_tk_grid3": _grid3,
            "_tk_fallback": self._fallback,
        }
        for name, param in kern.signature.parameters.items():
            if param.default is not param.empty:
                self.env[f"_tk_default_{name}"] = param.default
        for plan in profile.args:
            self.env[f"_tk_type_{plan.name}"] = plan.type
        # What the kernel's trace read besides its arguments, as (namespace, name, object):
        # a hit checks each by identity; a change misses, and the slow path retraces.
        self.guards: tuple[Guard, ...] = tuple(getattr(kern, "globals_guards", ()))
        for i, (where, _, value) in enumerate(self.guards):
            self.env[f"_tk_gw{i}"] = where
            self.env[f"_tk_gv{i}"] = value
        self._params = [(p.name, p.kind) for p in kern.signature.parameters.values()]
        self._native_ok = True  # False once an entry needs the Python pack (tensor maps)
        self._generate()

    def _generate(self) -> None:
        """(Re)generate what ``call`` runs for the current size facts: the native launcher
        when it serves this profile, else the generated ``_tk_call`` and ``_tk_key`` (in one
        compile: a first launch waits for it). Behind the native launcher nothing is
        compiled until it is needed: ``_tk_call`` when the launcher first declines a call
        (``python_call``), ``_tk_key`` when the launcher gives no key (``key``), ``_tk_try``
        when another profile's miss needs it."""
        self._functions: dict[str, Callable[..., Any]] = {}
        self.sources: dict[str, str] = _Sources(self)
        self.native: Any = self._native_launcher()
        if self.native is None:
            self._compile((CALL, KEY))
        # call(grid, *args, **kwargs): kern[grid] binds it to the grid (a method object)
        self.call: Callable[..., None] = self.python_call if self.native is None else \
            self.native

    def _compile(self, modes: tuple[str, ...]) -> None:
        kern, env = self.kern, self.env
        sources = {mode: _source(kern, self.profile, self.facts, mode, self.guards)
                   for mode in modes}
        exec(compile("\n".join(sources.values()), f"<tilekit fast path {kern.name}>", "exec"),
             env)
        for mode in modes:
            self._functions[mode] = env[f"_tk_{mode}"]
        self.sources.update(sources)

    def _function(self, mode: str) -> Callable[..., Any]:
        if mode not in self._functions:
            self._compile((mode,))
        return self._functions[mode]

    @property
    def python_call(self) -> Callable[..., None]:
        """The generated ``_tk_call(grid, *args, **kwargs)``: what ``call`` is without the
        native launcher, and what the native launcher hands the calls it declines."""
        return self._function(CALL)

    @property
    def key_fn(self) -> Callable[..., tuple[Any, ...] | None]:
        """The generated ``_tk_key(*values)``: the key of a call, or None."""
        return self._function(KEY)

    def _declined(self, *args: Any, **kwargs: Any) -> None:
        """The native launcher's ``python_call``: compiled on the first decline."""
        return self.python_call(*args, **kwargs)

    def _native_launcher(self) -> Any:
        """A ``_fastlaunch.Launcher`` for this profile, or None: the extension is not built
        or is off, ``cuLaunchKernelEx`` is no C function (a test's Python stand-in), the
        profile has numpy scalars, or an entry needed the Python pack (tensor maps)."""
        lib = native_module()
        launch = self.env["_tk_launch"]
        address = function_address(launch)
        plans = self.profile.args
        params = list(self.kern.signature.parameters.values())
        if lib is None or address is None or not self._native_ok or \
                [p.name for p in params] != [p.name for p in plans] or \
                any(p.kind in (INT, SCALAR) and p.type not in (int, float, bool) or
                    p.bf16 and p.kind != SCALAR for p in plans):
            return None
        kinds = {TENSOR: "T", INT: "I", SCALAR: "S", CONST: "C"}
        index = {p.name: i for i, p in enumerate(plans)}
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        try:
            return lib.Launcher(
                names=tuple(p.name for p in plans),
                kinds="".join("B" if p.bf16 else kinds[p.kind] for p in plans),
                types=tuple(p.type for p in plans), ranks=tuple(p.rank for p in plans),
                defaults=tuple(self.env.get(f"_tk_default_{p.name}", _UNSET) for p in plans),
                nposonly=sum(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params),
                npositional=sum(p.kind in positional for p in params),
                stream_option=self.profile.stream_option,
                facts=tuple((index[name], dim, n) for name, dim, n in self.facts),
                table=self.table, row_masks=_row_masks, overrides=knobs._overrides,
                python_call=self._declined, fallback=self._fallback,
                current_stream=self.env["_tk_current_stream"],
                stream_handle=self.env["_tk_stream_handle"], grid3=_grid3, bf16=_bf16_bits,
                check_status=self.env["_tk_check_status"], unset=_UNSET, launch=launch,
                launch_address=address, guards=self.guards)
        except (ValueError, TypeError, OverflowError):  # beyond its limits (64 parameters...)
            return None

    @property
    def try_fn(self) -> Callable[..., Any]:
        """``_tk_try(grid, *args, **kwargs)``: a launch on the fast path, or MISS."""
        return self._function(TRY)

    def cover(self, candidates: Sequence[SizeFact]) -> bool:
        """Make the key say whether each of ``candidates`` holds (a specialization's size
        facts). The key covers the union over the specializations seen; a new fact
        regenerates the dispatcher and empties its table (keys of the old form are of no
        use: the entries come back as their calls miss once). True when it regenerated."""
        if set(candidates) <= set(self.facts):
            return False
        self.facts = tuple(sorted(set(self.facts) | set(candidates)))
        if self.native is not None:  # a kept kern[grid] may still call it
            self.native.forget()
        self.table.clear()
        self.specs.clear()
        self._generate()
        return True

    def dispatch(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Launch on the fast path, or return MISS (having queued nothing)."""
        return self.try_fn(grid, *args, **kwargs)

    def key(self, values: Sequence[Any]) -> tuple[Any, ...] | None:
        """The key for a call with these parameter values (in the kernel's order), or None
        when such a call would miss before the table: the native launcher's when it gives
        one (then a first launch compiles nothing), else the generated ``key_fn``'s. The two
        agree (``tests/rt/test_fastlaunch.py``)."""
        if self.native is not None:
            try:
                key = self.native.key(*values)
            except Exception:  # as _tk_key: any surprise is no key
                key = None
            if key is not None:
                return key
        return self.key_fn(*values)

    def add(self, key: tuple[Any, ...], spec: Specialization, loaded: Any) -> bool:
        """Put an entry for ``loaded`` under ``key``, unless the key has one (the first
        stays: a key's facts decide its variant but for degenerate views, e.g. an extent
        past 2^31 with stride 0, whose 64-bit kernel the slow path keeps running)."""
        if key in self.table:
            return False
        entry = make_entry(self.profile, loaded, spec)
        if entry is None:
            return False
        if entry[-1] is None and self.native is not None:  # packed in Python (tensor maps)
            self._native_ok = False
            self.native = None
            self.call = self.python_call
        self.table[key] = entry
        self.specs[key] = spec
        return True

    def _fallback(self, grid: Any, values: tuple[Any, ...], more: tuple[Any, ...],
                  stream: Any, extra: dict[str, Any]) -> None:
        """A miss of the generated call: rebuild the call's arguments (positional-only
        parameters positionally, all of them when there were extra positional ones, the
        rest by keyword) and let the other profiles, then the slow path, run it."""
        from tilekit.rt.launcher import Launch

        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        positional = True
        for (name, kind), value in zip(self._params, values):
            if value is _UNSET:
                positional = False
            elif kind is inspect.Parameter.KEYWORD_ONLY:
                kwargs[name] = value
            elif more or (positional and kind is inspect.Parameter.POSITIONAL_ONLY):
                args.append(value)
            else:
                kwargs[name] = value
        args += more
        if stream is not _UNSET:
            kwargs["stream"] = stream
        kwargs.update(extra)
        Launch(self.kern, grid)._miss(tuple(args), kwargs, self)


def make_entry(profile: Profile, loaded: Any,
               spec: Specialization | None = None) -> tuple[Any, ...] | None:
    """What a hit needs of a loaded kernel, in the generated code's order: (pack, buffer,
    function, kernelParams, threads, shared bytes, grid limits x y z, the loaded kernel
    when its status word must be read, the native launcher's ``_fastlaunch.Entry`` of the
    same buffer or None). The buffer is the launch configuration followed by the slots,
    the status word written once. None when the kernel's slots are not in the ABI's order
    (the slow path then serves it). A kernel with tensor maps needs the variant's
    specialization ``spec`` (the element type of each map's tensor); its pack is
    ``_map_packer``'s and its slots start 64-byte aligned (the native launcher leaves it
    to the generated function)."""
    compiled = loaded.compiled
    if compiled.prints or compiled.checked:  # the slow path synchronizes (to flush
        return None  # tk.device_print's output; to read a checked kernel's status)
    slots = [(p.kind, p.arg, p.axis if p.kind in (SlotKind.SIZE, SlotKind.STRIDE) else -1)
             for p in compiled.params]
    maps = [p for p in compiled.params if p.kind is SlotKind.TENSOR_MAP]
    canonical = canonical_slots(profile)
    if slots != canonical[:-1] + [(SlotKind.TENSOR_MAP, p.arg, -1) for p in maps] + \
            canonical[-1:]:
        return None
    types = [slot_type(p) for p in compiled.params]
    _, offsets, size = slot_layout(types)
    per_call = struct.Struct(CONFIG_FORMAT + slot_layout(types[:-1])[0][1:])  # no status
    pack = per_call.pack_into
    if maps:
        sources = _map_sources(profile, loaded, spec, maps, canonical)
        if sources is None:
            return None
        pack = _map_packer(pack, len(canonical) - 1, sources)
        buffer = aligned_buffer(CONFIG_BYTES + size, CONFIG_BYTES)
    else:
        buffer = (ctypes.c_char * (CONFIG_BYTES + size))()
    struct.pack_into("<" + SLOT_FORMATS[types[-1]], buffer, CONFIG_BYTES + offsets[-1],
                     loaded.status_ptr)
    base = ctypes.addressof(buffer) + CONFIG_BYTES
    params = (ctypes.c_void_p * len(offsets))(*[base + o for o in offsets])
    mx, my, mz = loaded.props.max_grid
    native = None if maps else _native_entry(loaded, buffer, params, types[:-1], offsets[:-1])
    return (pack, buffer, ctypes.c_void_p(loaded.function.handle),
            params, compiled.block_threads, compiled.shared_bytes, mx, my, mz,
            loaded if compiled.asserts else None, native)


def _native_entry(loaded: Any, buffer: Any, params: Any, types: Sequence[str],
                  offsets: Sequence[int]) -> Any:
    """The entry as the native launcher reads it (the same buffer and parameter array;
    each per-call slot's struct code and offset), or None without the extension."""
    lib = native_module()
    if lib is None:
        return None
    compiled = loaded.compiled
    try:
        return lib.Entry(buffer=buffer, function=loaded.function.handle, params=params,
                         threads=compiled.block_threads, shared=compiled.shared_bytes,
                         limits=tuple(loaded.props.max_grid),
                         codes="".join(SLOT_FORMATS[t] for t in types).encode(),
                         offsets=tuple(CONFIG_BYTES + o for o in offsets))
    except (ValueError, TypeError, OverflowError):  # the Python pack serves it
        return None


def _map_sources(profile: Profile, loaded: Any, spec: Specialization | None,
                 maps: Sequence[ParamSlot],
                 canonical: Sequence[tuple[SlotKind, str, int]]) -> list[MapSource] | None:
    """Where each tensor map's tensor is among the values the generated code packs (its
    pointer, then its extents, then its strides: ``canonical_slots``), with the map's spec;
    None when a map's argument is not a tensor of the specialization."""
    from tilekit.rt import tensor_maps

    facts = dict(spec.args) if spec is not None else {}
    ranks = {p.name: p.rank for p in profile.args if p.kind == TENSOR}
    arch = tensor_maps.arch_of(loaded.props.capability)
    out = []
    for slot in maps:
        fact = facts.get(slot.arg)
        if not isinstance(fact, TensorSpec) or slot.arg not in ranks:
            return None
        at = canonical.index((SlotKind.POINTER, slot.arg, -1))
        out.append((tensor_maps.map_spec(arch, fact.dtype, slot.box, slot.swizzle), at,
                    ranks[slot.arg]))
    return out


def _map_packer(pack_into: Callable[..., None], count: int,
                sources: Sequence[MapSource]) -> Callable[..., None]:
    """A function with ``pack_into``'s arguments but the tensor maps (the launch
    configuration, then the ``count`` other slot values) that appends the maps, found in
    ``tensor_maps.encoded``'s LRU by values already among the arguments, and makes the one
    ``pack_into``. Generated: no loop, no ``*args`` per call."""
    from tilekit.rt import tensor_maps

    config = [f"c{i}" for i in range(CONFIG_VALUES)]
    values = [f"v{i}" for i in range(count)]
    env: dict[str, Any] = {"_tk_pack_into": pack_into, "_tk_map": tensor_maps.encoded}
    maps = []
    for j, (spec, at, rank) in enumerate(sources):
        env[f"_tk_spec{j}"] = spec
        maps.append(f"_tk_map(_tk_spec{j}, {', '.join(values[at:at + 1 + 2 * rank])})")
    head = ", ".join(["buf", "off", *config, *values])
    text = (f"def _tk_pack_maps({head}):\n"
            f"    _tk_pack_into({', '.join(['buf', 'off', *config, *values, *maps])})\n")
    exec(compile(text, "<tilekit fast path tensor maps>", "exec"), env)
    fn: Callable[..., None] = env["_tk_pack_maps"]
    return fn
