"""The CUDA backend: compile (cached), load, check, pack the arguments, launch.

``compile_cached`` turns a specialized module into a linked kernel through the disk
cache (the compile function is injectable, for tests). A loaded kernel is one
``Variant``: a specialization, a device, and the call's size facts (which of the traced
kernel's candidate facts ``(tensor, dim, n)`` hold, ``tilekit.codegen.size_facts``).
``LoadedKernel`` is one kernel loaded on one device with its argument buffer built
once: a ctypes array of pointers into preallocated ctypes slots, one per ABI parameter
(``CompiledKernel.params``); a launch writes the pointers, sizes, strides, scalars and
TMA tensor maps (``tensor_maps``: 128 bytes each, in 64-byte aligned slots) into the
slots and makes one ``cuLaunchKernel``. ``launch`` is what ``kern[grid](...)`` runs on
the GPU.
"""

from __future__ import annotations

import ctypes
import math
import struct
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tilekit import knobs
from tilekit.codegen.artifact import CompiledKernel, ParamSlot, SlotKind
from tilekit.codegen.size_facts import SizeFact, size_facts_holding
from tilekit.errors import ExecutionError, PerformanceWarning, SourceLoc
from tilekit.ir.dtypes import DType
from tilekit.lang.kernel import ConstSpec, ScalarSpec, Specialization, TensorSpec
from tilekit.record import Record
from tilekit.rt import cache, checks, device_arrays, driver, fastpath
from tilekit.rt.device_arrays import DeviceArray, StagedArray

if TYPE_CHECKING:  # tensor_maps: imported by the kernels that have maps (TMA), when loaded
    from tilekit.ir.core import Module
    from tilekit.rt.cache_key import CacheKey
    from tilekit.rt.tensor_maps import MapSpec

# A staged array's device buffer (driver.alloc: cuMemAlloc) is at least this aligned.
_STAGING_ALIGN = 256

# compile_fn(module, arch, divisible): tilekit.codegen.compile_module, or a test's stand-in
CompileFn = Callable[["Module", str, frozenset[SizeFact]], CompiledKernel]


class Variant(Record):
    """What one loaded kernel was compiled for: the specialization (traced once), the
    device, the size facts that hold for the call (the candidates of the traced kernel
    that hold; facts no tile view uses are never in it, so calls that differ only in them
    share the variant), and whether it is checked (``TILEKIT_CHECK``)."""
    __slots__ = ()
    spec: Specialization
    device: int
    divisible: frozenset[SizeFact]
    checked: bool = False


# --- compile, through the cache -----------------------------------------------------------


def spec_text(spec: Specialization) -> str:
    """A canonical text of a specialization (stable across processes: no ids, no hashes)."""
    parts = []
    for name, arg in spec.args:
        if isinstance(arg, TensorSpec):
            parts.append(f"{name}:tensor<{arg.dtype.long},rank={arg.rank},"
                         f"index={arg.index.long},aligned16={int(arg.aligned16)},"
                         f"unit_inner={int(arg.unit_inner)},strides16={int(arg.strides16)}>")
        elif isinstance(arg, ScalarSpec):
            parts.append(f"{name}:scalar<{arg.dtype.long}>")
        else:
            assert isinstance(arg, ConstSpec)
            value = arg.value
            shown = value.long if hasattr(value, "long") else repr(value)
            parts.append(f"{name}=constexpr<{type(value).__name__}:{shown}>")
    return ";".join(parts)


def size_facts_text(divisible: frozenset[SizeFact]) -> str:
    """A canonical text of a call's size facts: ``X:1:64,Y:1:64`` (sorted)."""
    return ",".join(f"{name}:{dim}:{n}" for name, dim, n in sorted(divisible))


def cache_key(module: Module, spec: Specialization, arch: str,
              divisible: frozenset[SizeFact] = frozenset(), check: bool = False) -> CacheKey:
    from tilekit import knobs
    from tilekit.ir.printer import print_module
    from tilekit.rt.cache_key import CacheKey

    fn = module.kernel
    source = str(fn.loc.file) if fn.loc is not None else ""
    jitter = "|jitter" if knobs.JITTER.get() else ""
    jitter += "" if knobs.WGMMA.get() else "|no-wgmma"
    jitter += "|check" if check else ""
    return CacheKey.of(fn.name, print_module(module, with_locs=True),
                       f"{source}|{spec_text(spec)}|divisible={size_facts_text(divisible)}"
                       f"{jitter}", arch)


def _codegen(module: Module, arch: str, divisible: frozenset[SizeFact],
             check: bool = False) -> CompiledKernel:
    from tilekit.codegen import compile_module
    from tilekit.rt import link

    # nvJitLink, which links the PTX next, is loaded while LLVM optimizes
    return compile_module(module, target=arch, divisible=divisible,
                          while_llvm=link.prefetch if arch.startswith("sm_") else None,
                          check=check)


def compile_cached(module: Module, spec: Specialization, arch: str,
                   loc: SourceLoc | None = None,
                   compile_fn: CompileFn | None = None,
                   divisible: frozenset[SizeFact] = frozenset(),
                   check: bool = False) -> cache.Entry:
    """The compiled and linked kernel for ``module`` on ``arch`` and the call's size facts
    ``divisible`` (bounds-checked with ``check``: ``TILEKIT_CHECK``): from the disk cache,
    or compiled (``compile_fn``, default ``tilekit.codegen.compile_module``), linked with
    nvJitLink when available, and stored."""
    dumps = knobs.DUMP.get()

    def build() -> cache.Entry:
        compiled = compile_fn(module, arch, divisible) if compile_fn is not None else \
            _codegen(module, arch, divisible, check)
        if "llvm" in dumps and compiled.llvm_ir:
            _dump(f"llvm: {compiled.name} ({arch})", compiled.llvm_ir)
        if compiled.llvm_ir:
            compiled = compiled._replace(llvm_ir="")  # not cached: equal to a cache hit
        image = b""
        from tilekit.rt import link  # nvJitLink: only when compiling

        if compiled.binary_kind == "ptx" and link.available():
            image = link.link_ptx(compiled.binary, arch, compiled.name,
                                  module.kernel.loc or loc)
        return cache.Entry(compiled, image)

    entry = cache.get_or_build(cache_key(module, spec, arch, divisible, check), build)
    if "ptx" in dumps and entry.kernel.binary_kind == "ptx":
        _dump(f"ptx: {entry.kernel.name} ({arch})", entry.kernel.binary.decode(errors="replace"))
    return entry


def _dump(title: str, text: str) -> None:
    sys.stderr.write(f"// ----- {title} -----\n{text.rstrip()}\n")
    sys.stderr.flush()


# --- a kernel loaded on a device, with its argument buffer --------------------------------


class LoadedKernel(Record):
    """One kernel loaded on one device, with its argument buffer: every ABI slot at a
    fixed, aligned offset of ``buffer`` (written by one ``pack`` call, a
    ``struct.Struct.pack_into``), and ``params`` the ``void*[]`` pointing at the slots.
    A kernel with TMA tensor maps (``map_slots``) has its buffer 64-byte aligned, so that
    each map's slot is."""
    __slots__ = ()
    compiled: CompiledKernel
    function: driver.LoadedFunction
    props: driver.DeviceProps
    status_ptr: int  # device int32[compiled.status_words] (when the kernel may fail)
    buffer: Any  # ctypes char array: the slots
    pack: Callable[..., None]  # pack(buffer, 0, *slot_values)
    params: Any  # ctypes array of void*: the kernelParams
    params_ptr: int
    map_slots: tuple[ParamSlot, ...] = ()  # the TENSOR_MAP slots

    @staticmethod
    def build(compiled: CompiledKernel, function: driver.LoadedFunction,
              props: driver.DeviceProps, status_ptr: int) -> LoadedKernel:
        fmt, offsets, size = fastpath.slot_layout([fastpath.slot_type(p)
                                                   for p in compiled.params])
        map_slots = tuple(p for p in compiled.params if p.kind is SlotKind.TENSOR_MAP)
        buffer = fastpath.aligned_buffer(size, 0) if map_slots else (ctypes.c_char * size)()
        base = ctypes.addressof(buffer)
        params = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        return LoadedKernel(compiled, function, props, status_ptr, buffer,
                            struct.Struct(fmt).pack_into, params, ctypes.addressof(params),
                            map_slots)

    def map_spec(self, slot: ParamSlot, dtype: DType) -> MapSpec:
        """What the map of a ``TENSOR_MAP`` slot depends on for a tensor of ``dtype``."""
        from tilekit.rt import tensor_maps

        return tensor_maps.map_spec(tensor_maps.arch_of(self.props.capability), dtype,
                                    slot.box, slot.swizzle)

    def check_maps(self, arrays: Mapping[str, Any], loc: SourceLoc | None) -> None:
        """Before anything is queued: a ``LaunchError`` if no tensor map describes one of
        the tensors the kernel copies by TMA. A device array's map is encoded (and cached
        for ``fill``); a staged array's is checked at the alignment its buffer will have."""
        from tilekit.rt import tensor_maps

        for slot in self.map_slots:
            arr = arrays[slot.arg]
            spec = self.map_spec(slot, arr.dtype)
            if isinstance(arr, DeviceArray):
                tensor_maps.tensor_map(spec, slot.arg, arr.ptr, arr.shape, arr.strides, loc)
            else:
                witness = arr.device_ptr(_STAGING_ALIGN) % _STAGING_ALIGN or _STAGING_ALIGN
                tensor_maps.check(spec, slot.arg, witness, arr.shape, arr.strides, loc)

    def fill(self, arrays: Mapping[str, Any], ptrs: Mapping[str, int],
             scalars: Mapping[str, np.ndarray], loc: SourceLoc | None = None) -> None:
        """Write this launch's values into the argument slots."""
        values: list[Any] = []
        for p in self.compiled.params:
            kind = p.kind
            if kind is SlotKind.POINTER:
                values.append(ptrs[p.arg])
            elif kind is SlotKind.SIZE:
                values.append(arrays[p.arg].shape[p.axis])
            elif kind is SlotKind.STRIDE:
                values.append(arrays[p.arg].strides[p.axis])
            elif kind is SlotKind.SCALAR:
                value = np.asarray(scalars[p.arg])
                if p.dtype == "bfloat16":
                    values.append(int(value.view(np.uint16)))
                else:
                    values.append(value.item())
            elif kind is SlotKind.TENSOR_MAP:
                from tilekit.rt import tensor_maps

                arr = arrays[p.arg]
                values.append(tensor_maps.tensor_map(self.map_spec(p, arr.dtype), p.arg,
                                                     ptrs[p.arg], arr.shape, arr.strides, loc))
            else:
                values.append(self.status_ptr)
        self.pack(self.buffer, 0, *values)


def _load(kern: Any, variant: Variant, loc: SourceLoc | None,
          untraced: Any = None) -> LoadedKernel:
    """The loaded kernel of ``variant``: in memory, else from a portfolio (``untraced``:
    the registry's group for this kernel source and specialization, found without
    tracing; else by the traced IR), else the disk cache, else compiled."""
    loaded = kern._loaded.get(variant)
    if loaded is not None:
        cache.count("memory_hits")
        return loaded
    spec, device, divisible, checked = variant
    props = driver.device_props(device)
    entry = None
    if untraced is not None and not checked:  # portfolios hold no checked kernels
        from tilekit.aot import registry

        entry = registry.take(untraced, size_facts_text(divisible))
    if entry is None:
        module = kern.specialize(spec)
        entry = None if checked else _prebuilt(module, spec, props.arch, divisible, loc)
        if entry is None:
            entry = compile_cached(module, spec, props.arch, loc, divisible=divisible,
                                   check=checked)
    compiled = entry.kernel
    checks.check_shared_memory(compiled.shared_bytes, props.max_shared_optin, compiled.name, loc)
    checks.check_block(compiled.block_threads, props.max_threads_per_block, loc)
    image = entry.image or compiled.binary  # no nvJitLink: the driver JITs the PTX
    function = driver.load_function(image, compiled.name, device, compiled.shared_bytes, loc)
    warn_if_spilling(compiled, driver.function_attributes(function.handle),
                     getattr(kern, "loc", None) or loc)
    status_ptr = 0
    if compiled.may_fail:
        status_ptr = driver.alloc(4 * compiled.status_words, loc)
        _reset_status(compiled, status_ptr, 0, loc)
        driver.synchronize(0, loc)
    loaded = LoadedKernel.build(compiled, function, props, status_ptr)
    kern._loaded[variant] = loaded
    return loaded


_SPILL_WARNINGS: dict[Any, Any] = {}  # warnings' registry: once per source line


def register_cap(threads: int) -> int:
    """The most registers a thread of a ``threads``-thread block can be given (255, or
    fewer when one block of that size must fit the 64 K register file; allocated 8 at a
    time). Local memory in a kernel below its cap is an array, not a spill. (A row kernel
    whose blocks-per-SM request caps it lower, ``occupancy.row_blocks_per_sm``, is not
    judged by its own cap: that request is only made where the estimate says it fits.)"""
    return min(255, driver.REGISTER_FILE // max(1, threads) // 8 * 8)


def warn_if_spilling(compiled: CompiledKernel, attributes: dict[int, int],
                     loc: SourceLoc | None) -> None:
    """A ``PerformanceWarning`` at the kernel's source line when its loaded code spills
    (``attributes``: ``driver.function_attributes``; local memory at the register cap):
    tiles too large for the registers, typically a whole long row held across a
    reduction. Such a kernel runs, at a fraction of its speed; the fix is in the kernel,
    not the call."""
    import warnings

    spilled = attributes.get(driver.FUNC_LOCAL_SIZE_BYTES, 0)
    registers = attributes.get(driver.FUNC_NUM_REGS, 0)
    if spilled <= 0 or registers < register_cap(compiled.block_threads):
        return  # below the cap, local memory is an array (printf's arguments, sin's table)
    message = (
        f"kernel `{compiled.name}` spills {spilled} bytes per thread to local memory: its "
        f"tiles need more than the {registers} registers a thread of its "
        f"{compiled.num_warps} warps can have, and every access to a spilled value goes "
        "through the cache hierarchy. Hold less at once: loop over a long row in chunks "
        "(examples/layer_norm.py) or use smaller tiles. TILEKIT_DUMP=layout prints every "
        f"tile's layout (a (1, N) tile on {compiled.num_warps} warps holds about "
        f"N / {32 * compiled.num_warps} values per thread).")
    if loc is None:
        warnings.warn(message, PerformanceWarning, stacklevel=2)
    else:
        warnings.warn_explicit(message, PerformanceWarning, loc.file, loc.line,
                               module="tilekit", registry=_SPILL_WARNINGS)


def _untraced(kern: Any, spec: Specialization, device: int) -> Any:
    """A loaded portfolio's variants of this kernel source and specialization for the
    device's arch, found without tracing (``tilekit.aot.registry.untraced``), or None."""
    from tilekit.aot import registry

    if not registry.active():
        return None
    return registry.untraced(kern, spec_text(spec), driver.device_props(device).arch)


def _prebuilt(module: Module, spec: Specialization, arch: str,
              divisible: frozenset[SizeFact], loc: SourceLoc | None) -> cache.Entry | None:
    """The kernel from a loaded AOT portfolio (``tilekit.aot.registry``), before the disk
    cache: no compiler is imported for it."""
    from tilekit.aot import registry

    if not registry.active():
        return None
    return registry.find(module, spec_text(spec), size_facts_text(divisible), arch, loc)


def _record(kern: Any, spec: Specialization, runtime: Mapping[str, Any], arch: str) -> None:
    """``TILEKIT_RECORD``: one abstract call per variant this process loads (not on the
    fast path: only the slow path loads variants)."""
    path = knobs.RECORD.get()
    if path:
        from tilekit.aot import record

        record.append(path, kern, spec, runtime, arch)


def _reset_status(compiled: CompiledKernel, status_ptr: int, stream: int,
                  loc: SourceLoc | None) -> None:
    """Nothing recorded in the status buffer: zeros (and a checked kernel's key at its
    maximum, ``check_mode.initial_status``)."""
    if not compiled.checked:
        driver.memset32(status_ptr, 0, compiled.status_words, stream, loc)
        return
    from tilekit.rt import check_mode

    initial = check_mode.initial_status(compiled.status_words)
    driver.copy_to_device(status_ptr, initial.ctypes.data, initial.nbytes, stream, loc)
    driver.synchronize(stream, loc)  # the host buffer is a temporary


def _check_status(loaded: LoadedKernel, stream: int, loc: SourceLoc | None,
                  arrays: Mapping[str, Any] | None = None) -> None:
    """Raise what the launch recorded in its status buffer, then reset it: a checked
    kernel's out-of-bounds access (``arrays``: the launch's tensors, for the index and
    strides the message shows), else the failed ``tk.device_assert`` (or zero loop step)
    at its line."""
    compiled = loaded.compiled
    words = np.zeros(compiled.status_words, np.int32)
    driver.copy_to_host(words.ctypes.data, loaded.status_ptr, words.nbytes, stream, loc)
    driver.synchronize(stream, loc)
    fault = None
    if compiled.checked:
        from tilekit.rt import check_mode

        fault = check_mode.access_error(compiled, words, arrays or {})
    if fault is None and words[0] == 0:
        return
    _reset_status(compiled, loaded.status_ptr, stream, loc)
    if fault is not None:  # when an assert failed too, the access (which came first is
        raise fault  # not recorded)
    asserts = compiled.asserts
    index = int(words[0]) - 1
    pid = (int(words[1]), int(words[2]), int(words[3]))
    if not 0 <= index < len(asserts):
        raise ExecutionError(f"kernel `{compiled.name}` reported an unknown failure "
                             f"(status {int(words[0])}) in program {pid}", loc)
    site = asserts[index]
    raise ExecutionError(f"{site.message} (program {pid})",
                         SourceLoc(site.file, site.line, site.col))


# --- one launch ---------------------------------------------------------------------------


def launch(kern: Any, grid_spec: Any, bound: Mapping[str, Any], values: list[Any],
           stream_arg: Any, loc: SourceLoc | None, fast: bool = False) -> None:
    """Run ``kern`` on the GPU: every check before anything is queued; numpy arguments
    copied in, and back (only those the kernel writes, only when it succeeded). In check
    mode (``TILEKIT_CHECK``) the kernel is the checked one, and the device arrays it writes
    are copied too, and back only when it succeeded (``check_mode``).

    ``fast``: a successful launch of torch tensors installs its key in the kernel's fast
    path (not a checked one's)."""
    from tilekit.rt.launcher import _resolve_grid, specialize_arguments

    spec, runtime = specialize_arguments(kern, bound, loc, device_arrays.describe)
    tensors = {n: a for n, a in runtime.items() if isinstance(a, (DeviceArray, StagedArray))}
    scalars = {n: v for n, v in runtime.items() if n not in tensors}
    device = checks.check_same_device(
        ((n, a.device) for n, a in tensors.items() if isinstance(a, DeviceArray)), loc)
    grid = _resolve_grid(grid_spec, {**spec.constexprs, **bound}, loc)
    if math.prod(grid) == 0:
        kern.specialize(spec)  # trace errors still surface for an empty grid
        return
    if device < 0:  # host arrays only: the current context's device, else device 0
        device = driver.current_device()
    driver.use_device(device, loc)
    untraced = _untraced(kern, spec, device)
    candidates = untraced.candidates if untraced is not None else kern.size_candidates(spec)
    divisible = size_facts_holding(candidates, {n: a.shape for n, a in tensors.items()})
    variant = Variant(spec, device, divisible, knobs.CHECK.get())
    new = variant not in kern._loaded
    loaded = _load(kern, variant, loc, untraced)
    if new:
        _record(kern, spec, {**tensors, **scalars}, loaded.props.arch)
    compiled = loaded.compiled

    # Checks: nothing has been queued yet.
    checks.check_grid(grid, loaded.props.max_grid, loc)
    written = set(compiled.written_args)
    facts = dict(spec.args)
    for name, arr in tensors.items():
        tspec = facts[name]
        assert isinstance(tspec, TensorSpec)
        checks.check_writable(arr, name in written, loc)
        checks.check_index_width(arr, tspec.index, loc)
        if isinstance(arr, DeviceArray):
            checks.check_alignment(arr, arr.ptr, tspec.aligned16, loc)
    repacks = {}
    read = tensors  # what the kernel reads: the tensors, or copies the runtime makes
    if compiled.repacked:  # the kernel reads copies of these (tilekit.rt.repack)
        from tilekit.rt import repack

        indices = {n: t.index for n, t in facts.items() if isinstance(t, TensorSpec)}
        repacks = repack.plan(compiled.repacked, tensors, indices, device, loc)
        read = {**tensors, **repacks}
    if loaded.map_slots:
        loaded.check_maps(read, loc)
    stream = device_arrays.stream_handle(stream_arg, loc) if stream_arg is not None else \
        device_arrays.current_stream(list(tensors.values()), values, device)

    ptrs = {n: a.ptr for n, a in tensors.items() if isinstance(a, DeviceArray)}
    staged = [a for a in tensors.values() if isinstance(a, StagedArray)]
    scratch = None
    if compiled.checked and compiled.may_fail and written & ptrs.keys():
        from tilekit.rt import check_mode

        scratch = check_mode.Scratch({n: tensors[n] for n in ptrs}, written, stream,
                                     device, loc)
    buffers: list[int] = []
    ok = False
    try:
        if scratch is not None:
            ptrs.update(scratch.open())
        for s in staged:
            base = driver.alloc(s.nbytes, loc)
            buffers.append(base)
            ptrs[s.name] = s.device_ptr(base)
            driver.copy_to_device(base, s.upload_source(), s.nbytes, stream, loc)
        for name, r in repacks.items():
            ptrs[name] = r.fill(ptrs[name], stream, loc)
        loaded.fill(read, ptrs, scalars, loc)
        driver.launch(loaded.function, grid, compiled.block_threads, compiled.shared_bytes,
                      stream, loaded.params_ptr, loc)
        if compiled.may_fail:  # a checked kernel's fault names an index: the arrays' strides
            _check_status(loaded, stream, loc, *([tensors] if compiled.checked else []))
        elif compiled.prints:  # device printf is flushed when the launch completes
            driver.synchronize(stream, loc)
        backs = []
        for s, base in zip(staged, buffers):
            if s.name in written and s.nbytes:
                tmp = np.empty(s.nbytes, np.uint8)
                driver.copy_to_host(tmp.ctypes.data, base, s.nbytes, stream, loc)
                backs.append((s, tmp))
        if staged:
            driver.synchronize(stream, loc)
        for s, tmp in backs:
            s.copy_back(tmp)
        if scratch is not None:
            scratch.commit()
        ok = True
        if fast and not staged and not repacks and not compiled.checked:
            install(kern, spec, loaded, bound, candidates)
    finally:
        for r in repacks.values():  # freed once the launch is done (stream-ordered)
            r.free(stream)
        if scratch is not None:
            scratch.release()
        if buffers:
            if not ok:
                try:
                    driver.synchronize(stream)
                except Exception:  # the launch's own error is the one to report
                    pass
            for base in buffers:
                driver.free(base)


# --- the fast path's entries --------------------------------------------------------------


def install(kern: Any, spec: Specialization, loaded: LoadedKernel, bound: Mapping[str, Any],
            candidates: tuple[SizeFact, ...] = ()) -> bool:
    """Make the next launch like this one take the fast path (``fastpath``): find or
    generate the dispatcher of this call's profile, make its key cover the size facts
    ``candidates`` of this specialization, compute its key for these arguments, and put an
    entry for this variant under it. False when the call cannot be repeated on the fast
    path (numpy or cupy arrays, odd scalars, a driver without ``cuLaunchKernelEx``, a
    checked kernel: its launches copy and synchronize)."""
    if loaded.compiled.checked:
        return False
    profile = fastpath.profile_of(kern, spec, bound)
    launch_ex = driver.launch_ex_fn()
    if profile is None or launch_ex is None:
        return False
    fast = kern._loaded.fast
    dispatcher = fast.get(profile)
    if dispatcher is None:
        dispatcher = fastpath.Dispatcher(kern, profile, device_arrays.torch_current_stream(),
                                         device_arrays.stream_handle, launch_ex,
                                         _check_status, candidates)
        fast[profile] = dispatcher
    else:
        dispatcher.cover(candidates)  # may regenerate the dispatcher and empty its table
    for plan in profile.args:
        if plan.kind == fastpath.TENSOR and plan.rank > 1:  # the row-stride masks
            value = bound[plan.name]
            fastpath.note_dtype(value.dtype, value.element_size())
    key = dispatcher.key([bound[p.name] for p in kern.params])
    if key is None:
        return False
    dispatcher.add(key, spec, loaded)
    kern._loaded.activate(dispatcher)
    return True
