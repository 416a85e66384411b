"""The code generation pipeline for one kernel: layouts, lowering, LLVM, PTX/AMDGCN.

``compile_module`` runs, in order: ``schedule_pipelines`` when the kernel has a
``tk.pipeline`` (``tilekit.sched``: rings, mbarriers, asynchronous copies, warp roles;
``TILEKIT_DUMP=sched`` prints the schedule), ``assign_layouts`` (every tile gets a layout;
``TILEKIT_DUMP=layout`` prints the IR with them), ``lower_function`` (per-thread
LLVM IR; a row kernel also asks for the blocks per SM that keep its rows in flight,
``occupancy.row_blocks_per_sm``), libdevice linking when a transcendental needs it
(NVPTX; its bitcode is parsed on a worker thread meanwhile, ``LibdevicePrefetch``),
LLVM's O3 pipeline, and the target machine's assembly printer (PTX text) or object
emitter (AMDGCN). An LLVM verifier failure is a tilekit bug and is reported as a
``LoweringError`` naming the kernel, never as a raw LLVM message alone.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

from tilekit.codegen.artifact import CompiledKernel
from tilekit.codegen.occupancy import CALIBRATED_TARGETS, default_num_warps, row_blocks_per_sm
from tilekit.codegen.target import Target, get_target
from tilekit.errors import LoweringError
from tilekit.ir.core import Module
from tilekit.ir.passes import dump, should_dump, written_args

if TYPE_CHECKING:
    from collections.abc import Callable


@functools.cache
def _target_machine(target: Target):
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.features, opt=3,
        reloc="pic" if target.vendor == "amdgpu" else "default")



def parse_ir(text: str, tgt: Target, kernel: str, loc=None):  # -> llvm.ModuleRef
    """The kernel's LLVM IR text parsed and verified (its own code only: libdevice, linked
    later, is NVIDIA's verified bitcode; verifying it again cost ~20 ms per kernel). A
    verifier failure is a tilekit bug, reported as a ``LoweringError``."""
    import llvmlite.binding as llvm

    tm = _target_machine(tgt)
    try:
        mod = llvm.parse_assembly(text)
        mod.triple = tgt.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as exc:
        raise LoweringError(f"internal error: LLVM rejected the code for `{kernel}` on "
                            f"{tgt.name}: {exc}", loc,
                            hints=["please report this with TILEKIT_DUMP=layout,llvm output"]
                            ) from None
    return mod


# What the NVPTX lowering computes with libdevice (mathlib: everything but sqrt and rsqrt,
# which are LLVM intrinsics there); float // and % call floor and fmod, which it misses.
_LIBDEVICE_OPS = frozenset({"exp", "exp2", "log", "log2", "erf", "tanh", "sigmoid", "sin",
                            "cos", "floor", "ceil", "pow", "atan2", "fmod"})


#: Whether ``compile_module`` parses libdevice on a worker thread during the lowering
#: (``LibdevicePrefetch``); bench/compile.py --no-prefetch measures without it.
PREFETCH_LIBDEVICE = True


class LibdevicePrefetch:
    """libdevice's bitcode parsed on a worker thread while the kernel is laid out and
    lowered: parsing its ~500 functions is ~30 ms of C++ that releases the GIL, and the
    layouts and the lowering are pure Python (llvmlite.ir). The worker then trims the parse
    to ``kept``, the functions the kernel's math ops can call, and what they call (one
    internalize pass, the kept functions made external again, one GlobalDCE pass): linking
    all of libdevice into the kernel and dropping it there cost the compiling thread 15-20
    ms. The worker makes a handful of ffi calls and nothing else (finding and reading the
    file happen here, first): each return from C waits for the busy main thread to hand
    over the GIL. llvmlite runs ffi calls under one lock, so the main thread's first LLVM
    call waits for the worker to end. Started only for kernels whose IR has an op that
    libdevice computes on NVPTX, and only when libdevice is found (else ``link_libdevice``
    raises its error as before); joined before ``compile_module`` returns or raises. A
    lowering that calls a function outside ``kept`` links the whole of libdevice instead
    (``covers``)."""

    def __init__(self, bitcode: bytes, kept: frozenset[str] = frozenset(),
                 target: Target | None = None) -> None:
        if kept and target is None:
            raise ValueError("trimming libdevice to `kept` needs the target")
        self._module = None
        self._error: BaseException | None = None
        self.kept = kept  # empty: all of libdevice
        tm = _target_machine(target) if kept else None
        self._thread = threading.Thread(target=self._parse, args=(bitcode, tm), daemon=True,
                                        name="tilekit-libdevice")
        self._thread.start()

    @staticmethod
    def start(module: Module, tgt: Target) -> LibdevicePrefetch | None:
        ops = {op.name for op in module.walk() if op.name in _LIBDEVICE_OPS}
        if not (PREFETCH_LIBDEVICE and tgt.is_nvidia and ops):
            return None
        from pathlib import Path

        from tilekit.codegen import libdevice

        path = libdevice.find_libdevice()
        return None if path is None else LibdevicePrefetch(Path(path).read_bytes(),
                                                           libdevice_functions(ops), tgt)

    def covers(self, used: set[str]) -> bool:
        """Whether the parse holds every libdevice function in ``used``."""
        return not self.kept or used <= self.kept

    def _parse(self, bitcode: bytes, tm) -> None:  # tm: the target's llvm.TargetMachine
        import llvmlite.binding as llvm

        try:
            lib = llvm.parse_bitcode(bitcode)
            if self.kept:
                _keep_only(lib, self.kept, tm)
            self._module = lib
        except BaseException as exc:  # re-raised by result(), in the compiling thread
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self):  # -> llvm.ModuleRef: libdevice, to be linked into one kernel
        self.join()
        if self._error is not None:
            raise self._error
        return self._module


def libdevice_functions(ops: set[str]) -> frozenset[str]:
    """The libdevice functions that math ops (``_LIBDEVICE_OPS``) may call: ``MathLib``'s
    ``__nv_expf`` for float32 and ``__nv_exp`` for float64 (16-bit floats compute in
    float32); sigmoid computes with exp."""
    names = {"exp" if op == "sigmoid" else op for op in ops}
    return frozenset(f"__nv_{name}{suffix}" for name in names for suffix in ("f", ""))


def _keep_only(mod, names, tm) -> None:
    """Drop from ``mod`` every function that ``names``' functions do not call (names it
    lacks are skipped): everything made internal (one C++ pass, not one ffi call per
    function), the named functions external again, then GlobalDCE."""
    import llvmlite.binding as llvm

    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    internalize = llvm.create_new_module_pass_manager()
    internalize.add_internalize_pass()
    internalize.run(mod, pb)
    for name in sorted(names):
        try:
            mod.get_function(name).linkage = llvm.Linkage.external
        except NameError:
            pass
    dce = llvm.create_new_module_pass_manager()
    dce.add_global_dead_code_eliminate_pass()
    dce.run(mod, pb)


def link_math(mod, tgt: Target, kernel: str, loc=None,
              prefetched: LibdevicePrefetch | None = None) -> None:
    """Link libdevice into ``mod`` (the module ``prefetched`` parsed, when given), make
    everything but the kernel internal (libdevice's ~500 functions in one C++ pass, not one
    ffi call each) and drop what no one calls, so that ``optimize`` sees the few functions
    used."""
    from tilekit.codegen import libdevice

    tm = _target_machine(tgt)
    try:
        libdevice.link_libdevice(mod, tgt.triple, str(tm.target_data),
                                 prefetched.result() if prefetched is not None else None)
    except RuntimeError as exc:
        raise LoweringError(f"internal error: linking libdevice into `{kernel}` failed: "
                            f"{exc}", loc) from None
    _keep_only(mod, [kernel], tm)


#: LLVM's default pipeline at this speed level runs on every kernel (``default<O3>``).
#: Measured on softmax 1000x4097 (bench/compile.py --offline --llvm-opt N): O1 costs
#: ~15% less than O3 (35 vs 42 ms) but its SASS differs both ways (over ~1000 kernels of
#: the differential suite: 461 smaller, 376 larger, matmul and dot up to +56/+144
#: instructions), so O3 stays; the time goes to InstCombine and CVP on the lowered IR's
#: size, not to passes that could be dropped. The backend's own passes run at O3 too.
SPEED_LEVEL = 3


def optimize(mod, tgt: Target) -> None:
    """LLVM's ``default<O{SPEED_LEVEL}>`` module pipeline on ``mod``, in place (for NVPTX
    it includes NVVMReflect, which folds libdevice's ``__nvvm_reflect`` queries, and
    inlines the libdevice functions used)."""
    import llvmlite.binding as llvm

    pb = llvm.create_pass_builder(
        _target_machine(tgt), llvm.create_pipeline_tuning_options(speed_level=SPEED_LEVEL))
    pb.getModulePassManager().run(mod, pb)


def emit_code(mod, tgt: Target) -> tuple[bytes, str]:
    """The target machine's output for an optimized module: PTX text or an AMDGCN
    object, and its kind."""
    tm = _target_machine(tgt)
    if tgt.is_nvidia:
        return tm.emit_assembly(mod).encode(), "ptx"
    return tm.emit_object(mod), "elf"


def emit_binary(text: str, tgt: Target, kernel: str, uses_libdevice: bool,
                loc=None, prefetched: LibdevicePrefetch | None = None,
                while_llvm: Callable[[], object] | None = None) -> tuple[bytes, str, str]:
    """LLVM IR text of one kernel -> (PTX text or an AMDGCN object, its kind, the IR that
    ``TILEKIT_DUMP=llvm`` shows): ``parse_ir``, ``link_math`` when libdevice is used
    (NVPTX; the ``prefetched`` parse when there is one), ``optimize``, ``emit_code``.

    ``while_llvm`` is called just before ``optimize``: the optimizer and the code emission
    are most of a compile's time and run without the GIL, so Python work that the caller
    starts on a thread then (the runtime loads nvJitLink) overlaps them; started earlier,
    it would contend with the lowering, which is Python."""
    mod = parse_ir(text, tgt, kernel, loc)
    if tgt.is_nvidia and uses_libdevice:
        link_math(mod, tgt, kernel, loc, prefetched)
    llvm_text = str(mod) if should_dump("llvm") else text
    if while_llvm is not None:
        while_llvm()
    optimize(mod, tgt)
    binary, kind = emit_code(mod, tgt)
    return binary, kind, llvm_text


def schedule(module: Module, tgt: Target, num_warps: int,
             divisible: frozenset[tuple[str, int, int]]) -> Module:
    """The module with its pipelines scheduled for ``tgt`` (``tilekit.sched``); the module
    itself when it has none. Pipelines are lowered for NVIDIA targets only."""
    first = next((op for op in module.walk() if op.name == "pipeline"), None)
    if first is None:
        return module
    if not tgt.is_nvidia:
        from tilekit.codegen.lower_async import AMD_MESSAGE

        raise LoweringError(AMD_MESSAGE, first.loc,
                            hints=[f"{tgt.name} has no asynchronous copies modelled yet"])
    from tilekit.sched import schedule_pipelines

    scheduled = schedule_pipelines(module, tgt, num_warps=num_warps, divisible=divisible)
    return module if scheduled is None else scheduled


def _role_warps(module: Module, warps: int) -> int:
    """The warps tiles are laid out for: the consumer role's under warp roles."""
    roles = next((op for op in module.walk() if op.name == "warp_roles"), None)
    return warps if roles is None else int(roles.attrs["consumer_warps"])


def compile_module(module: Module, target: str | Target = "sm_90a",
                   num_warps: int | None = None,
                   divisible: frozenset[tuple[str, int, int]] = frozenset(),
                   while_llvm: Callable[[], object] | None = None,
                   check: bool = False) -> CompiledKernel:
    """Lower a traced module to a loadable binary for ``target``.

    The bucket's facts come from the specialization (``fn.aligned16``, ``unit_inner``,
    ``strides16``, set when it was traced) and from the call (``divisible``: triples
    ``(tensor, dim, n)`` whose size along ``dim`` is a positive multiple of ``n``; see
    ``tilekit.codegen.size_facts``). ``while_llvm``: see ``emit_binary``. A kernel with
    warp roles gets more warps than ``num_warps``: its producer warps
    (``CompiledKernel.num_warps`` says how many in all). ``check``: bounds-check every raw
    load, store and atomic (``TILEKIT_CHECK``; ``bounds_check``)."""
    from tilekit.codegen.lower import lower_function
    from tilekit.layout.propagate import LayoutOptions, assign_layouts

    tgt = target if isinstance(target, Target) else get_target(target)
    fn = module.kernel
    warps = num_warps or default_num_warps(module)
    if warps * tgt.warp_size > tgt.max_threads:
        raise LoweringError(f"{warps} warps of {tgt.warp_size} exceed {tgt.max_threads} "
                            f"threads per block on {tgt.name}", fn.loc)
    prefetch = LibdevicePrefetch.start(module, tgt)
    try:
        module = schedule(module, tgt, warps, divisible)
        pipeline_bytes = int(getattr(module.kernel, "pipeline_smem_bytes", 0) or 0)
        warps = _role_warps(module, warps)
        laid = assign_layouts(module, LayoutOptions(warps, tgt.warp_size, tgt.bank_target))
        if should_dump("layout"):
            dump(laid, "layout")
        # the scheduled function's facts: a repacked tensor (fn.repacked) is read only as
        # the runtime's aligned copy, which the schedule added to aligned16 and strides16
        scheduled = module.kernel
        aligned16, unit_inner, strides16 = (frozenset(getattr(scheduled, f, frozenset()))
                                            for f in ("aligned16", "unit_inner", "strides16"))
        lowering = lower_function(laid.kernel, tgt, warps, aligned16, unit_inner, strides16,
                                  divisible, pipeline_smem_bytes=pipeline_bytes, check=check)
        if lowering.shared_bytes > tgt.max_shared_bytes:
            what = "its pipelines' stages and barriers and " if pipeline_bytes else ""
            raise LoweringError(
                f"kernel `{fn.name}` needs {lowering.shared_bytes} bytes of shared memory "
                f"for {what}its layout conversions and reductions; {tgt.name} has "
                f"{tgt.max_shared_bytes}", fn.loc,
                hints=["use smaller tiles" + (" or fewer stages" if pipeline_bytes else "")])
        blocks = (row_blocks_per_sm(laid, warps, divisible, (aligned16, unit_inner, strides16))
                  if tgt.name in CALIBRATED_TARGETS else 1)
        if blocks > 1:
            lowering.vendor.min_blocks_per_sm(lowering.module, lowering.func, blocks)
        parsed = prefetch if prefetch is not None and prefetch.covers(lowering.math.used) \
            else None
        binary, kind, llvm_text = emit_binary(str(lowering.module), tgt, fn.name,
                                              bool(lowering.math.used), fn.loc, parsed,
                                              while_llvm)
    finally:
        if prefetch is not None:
            prefetch.join()  # no parse left running after an error, or for an unused result
    return CompiledKernel(
        name=fn.name, target=tgt.name, binary_kind=kind, binary=binary,
        num_warps=lowering.block_warps, warp_size=tgt.warp_size,
        shared_bytes=lowering.shared_bytes,
        params=tuple(lowering.slots), asserts=tuple(lowering.asserts),
        written_args=written_args(laid),
        prints=any(op.name == "print" for op in laid.walk()), llvm_ir=llvm_text,
        repacked=tuple(sorted(getattr(module.kernel, "repacked", ()))),
        checked=check, access_sites=tuple(lowering.access_sites))
