"""Before timing: what each config compiles to, and which configs cannot run well.

A probe compiles one config for the call's arguments without launching it and returns a
``Report``: on the GPU (``probe_gpu``) through the kernel cache and the driver (the
kernel is loaded, so timing it later compiles nothing), with the loaded function's
registers, spills and thread limit asked of the driver (``cuFuncGetAttribute``); on the
interpreter (``probe_interp``) the trace only. ``prune_reasons`` is the rule book, a
pure function of the reports, so tests feed it fake reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tilekit.errors import SourceLoc
from tilekit.ir.core import Module
from tilekit.rt.driver import (
    FUNC_LOCAL_SIZE_BYTES,
    FUNC_MAX_THREADS_PER_BLOCK,
    FUNC_NUM_REGS,
    REGISTER_FILE,
)


@dataclass(frozen=True)
class Report:
    """What one config compiled to, as far as pruning and restoring need. ``None``: not
    known on this backend (the interpreter knows only what the kernel writes)."""

    arch: str
    written: tuple[str, ...]  # tensor arguments the kernel may write
    threads: int | None = None  # per block
    shared_bytes: int | None = None  # dynamic shared memory per block
    max_shared: int | None = None  # what the device offers per block (opt-in)
    registers: int | None = None  # per thread
    local_bytes: int | None = None  # per thread: register spills (and local arrays)
    max_threads: int | None = None  # the most threads per block the compiled code can run


# probe(kernel, bound arguments with the config's constexprs, the user's line) -> Report
Probe = Callable[[Any, Mapping[str, Any], "SourceLoc | None"], Report]


def written_names(module: Module) -> tuple[str, ...]:
    """The tensor arguments a traced kernel stores to or updates atomically."""
    from tilekit.rt.launcher import _written_tensors

    fn = module.kernel
    written = _written_tensors(fn)
    return tuple(a.name_hint or "" for a in fn.args if id(a) in written)


def probe_interp(kern: Any, bound: Mapping[str, Any], loc: SourceLoc | None) -> Report:
    """Trace the config (trace errors surface here, before anything runs)."""
    from tilekit.rt.launcher import specialize_arguments

    spec, _ = specialize_arguments(kern, bound, loc)
    return Report("interp", written_names(kern.specialize(spec)))


def probe_gpu(kern: Any, bound: Mapping[str, Any], loc: SourceLoc | None) -> Report:
    """Compile and load the config for the device of the call's arrays (the variant a launch
    of these arguments would load), and read its resources."""
    from tilekit.codegen.size_facts import size_facts_holding
    from tilekit.rt import checks, device_arrays, driver, gpu
    from tilekit.rt.device_arrays import DeviceArray, StagedArray
    from tilekit.rt.launcher import specialize_arguments

    spec, runtime = specialize_arguments(kern, bound, loc, device_arrays.describe)
    tensors = {n: a for n, a in runtime.items() if isinstance(a, (DeviceArray, StagedArray))}
    device = checks.check_same_device(
        ((n, a.device) for n, a in tensors.items() if isinstance(a, DeviceArray)), loc)
    if device < 0:
        device = driver.current_device()
    driver.use_device(device, loc)
    divisible = size_facts_holding(kern.size_candidates(spec),
                                   {n: a.shape for n, a in tensors.items()})
    loaded = gpu._load(kern, gpu.Variant(spec, device, divisible), loc)
    compiled = loaded.compiled
    attrs = driver.function_attributes(loaded.function.handle)
    written = tuple(dict.fromkeys((*compiled.written_args,
                                   *written_names(kern.specialize(spec)))))
    return Report(loaded.props.arch, written, compiled.block_threads, compiled.shared_bytes,
                  loaded.props.max_shared_optin, attrs.get(FUNC_NUM_REGS),
                  attrs.get(FUNC_LOCAL_SIZE_BYTES), attrs.get(FUNC_MAX_THREADS_PER_BLOCK))


def prune_reasons(reports: Mapping[int, Report]) -> dict[int, str]:
    """Why each config that cannot run (or runs badly) on the device is dropped, by index:
    more shared memory than the device offers; more threads than the compiled code can
    launch with, or registers x threads past the register file (the launch would fail);
    and spills to local memory when some config that fits does not spill."""
    reasons: dict[int, str] = {}
    for i, r in reports.items():
        if r.shared_bytes is not None and r.max_shared is not None and \
                r.shared_bytes > r.max_shared:
            reasons[i] = (f"needs {r.shared_bytes} bytes of shared memory per block; the "
                          f"device offers {r.max_shared}")
        elif r.threads is not None and r.max_threads is not None and r.threads > r.max_threads:
            reasons[i] = (f"needs {r.threads} threads per block, but its compiled code can run "
                          f"at most {r.max_threads} (registers: {r.registers} per thread)")
        elif r.threads is not None and r.registers is not None and \
                r.registers * r.threads > REGISTER_FILE:
            reasons[i] = (f"needs {r.registers} registers x {r.threads} threads = "
                          f"{r.registers * r.threads}, more than the {REGISTER_FILE} registers "
                          "of an SM")
    fitting = {i: r for i, r in reports.items() if i not in reasons}
    if any(r.local_bytes == 0 for r in fitting.values()):
        for i, r in fitting.items():
            if r.local_bytes:
                reasons[i] = (f"spills {r.local_bytes} bytes per thread to local memory, and "
                              "a config that does not spill exists")
    return reasons
