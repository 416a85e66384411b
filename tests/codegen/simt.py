"""An NVPTX kernel's LLVM IR run on the host, one OS thread per GPU thread: a check of the
generated code's logic (addresses, shuffles, predicates) without a GPU.

The kernel's IR (``lower_function``'s, optimized by the same O3 pipeline as for the GPU)
is retargeted to the host and JIT-compiled; what only a GPU has becomes a call into
Python: special registers (thread and block ids), ``shfl.sync``, ``vote.sync``,
``bar.sync`` (the threads of a warp or a block meet at a ``threading.Barrier``), and the
predicated ``st.global`` of inline asm. Shared memory is one buffer, and blocks run one
after another, so a test can run one block at a time and see exactly what it wrote.

It checks what the code computes, not how fast: no memory model (every store is seen at
once), no warp scheduling (a divergent ``shfl.sync``, undefined on a GPU, hangs here
until the barrier's timeout names it). Global memory is the host's: give it buffers
aligned as a device allocation is (256 bytes); an access the IR declares aligned that
is not faults (x86 aligned vector moves), as a misaligned access does on the GPU. x86
moves bfloat16 through float, so a signalling NaN comes out quiet. An intrinsic it does
not model (cp.async, mbarriers, wgmma, libdevice) is refused by name before anything runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import itertools
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

_TIMEOUT_S = 20.0
_SMEM_BYTES = 256 * 1024

_ST = re.compile(r'call void asm sideeffect "@\$0 st\.global\.([a-z0-9.]+) \[\$1\], '
                 r'[^"]*", "[^"]*"\(')
_SREG = re.compile(r'@"emu\.read\.ptx\.sreg\.([a-z.]+)"')


# x86 legalizes bfloat moves through float and back, and has no libgcc truncation: round
# to nearest even, a NaN stays a quiet NaN with its sign and high payload.
_BF16_LIBCALLS = """
define weak bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %hi = lshr i32 %bits, 16
  %lsb = and i32 %hi, 1
  %bias = add i32 %lsb, 32767
  %sum = add i32 %bits, %bias
  %rounded = lshr i32 %sum, 16
  %quiet = or i32 %hi, 64
  %nan = fcmp uno float %x, %x
  %pick = select i1 %nan, i32 %quiet, i32 %rounded
  %h = trunc i32 %pick to i16
  %r = bitcast i16 %h to bfloat
  ret bfloat %r
}
define weak bfloat @__truncdfbf2(double %x) {
  %f = fptrunc double %x to float
  %r = call bfloat @__truncsfbf2(float %f)
  ret bfloat %r
}
"""


def _host_ir(text: str, triple: str) -> str:
    """The NVPTX module text with the host's triple, plain function definitions, and
    every NVVM intrinsic and inline-asm store turned into a call of an ``emu.`` symbol."""
    text = re.sub(r'target triple = "[^"]*"', f'target triple = "{triple}"', text)
    text = re.sub(r'target datalayout = "[^"]*"', "", text)
    text = text.replace("define ptx_kernel ", "define ")
    text = re.sub(r'"target-(cpu|features)"="[^"]*"', "", text)
    text = text.replace('@"llvm.nvvm.', '@"emu.').replace("@llvm.nvvm.", '@"emu.')
    text = re.sub(r'@"emu\.([A-Za-z0-9._]+)(?=[\s(])', r'@"emu.\1"', text)
    text += _BF16_LIBCALLS
    kinds = sorted(set(_ST.findall(text)))
    text = _ST.sub(lambda m: f'call void @"emu.st.{m.group(1)}"(', text)
    for kind in kinds:
        text += f'\ndeclare void @"emu.st.{kind}"(i1, i64, {", ".join(_st_args(kind))})\n'
    return text


def _st_args(kind: str) -> list[str]:
    parts = kind.split(".")
    count = int(parts[0][1:]) if parts[0].startswith("v") else 1
    bits = int(parts[-1][1:])
    return [f"i{max(bits, 16) if bits < 32 else 32}"] * count


@dataclass
class _Block:
    """The threads of one block: their ids, barriers, and warp exchange slots."""

    threads: int
    warp_size: int
    ctaid: tuple[int, int, int]
    nctaid: tuple[int, int, int]
    cta: threading.Barrier = field(init=False)
    warps: list[threading.Barrier] = field(init=False)
    slots: list[list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.cta = threading.Barrier(self.threads, timeout=_TIMEOUT_S)
        nwarps = -(-self.threads // self.warp_size)
        self.warps = [threading.Barrier(self.warp_size, timeout=_TIMEOUT_S)
                      for _ in range(nwarps)]
        self.slots = [[0] * self.warp_size for _ in range(nwarps)]


class Emulator:
    """One compiled kernel, ready to run blocks on host memory."""

    def __init__(self, ir_text: str, kernel: str, warp_size: int = 32) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.warp_size = warp_size
        self.errors: list[BaseException] = []
        self._tls = threading.local()
        self._block: _Block | None = None
        self.smem = (ctypes.c_uint8 * _SMEM_BYTES)()
        text = _host_ir(ir_text, llvm.get_process_triple())
        self._callbacks = self._bind(llvm, text)
        missing = {name for name in re.findall(r'declare [^@]*@"(emu\.[^"]+)"', text)
                   if not llvm.address_of_symbol(name)}
        if missing:
            raise NotImplementedError(f"the host emulator has no {sorted(missing)}")
        libgcc = ctypes.util.find_library("gcc_s")
        if libgcc:
            llvm.load_library_permanently(libgcc)  # half-precision conversions
        mod = llvm.parse_assembly(text)
        mod.verify()
        tm = llvm.Target.from_default_triple().create_target_machine(opt=1)
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        signature = re.search(rf'define void @"?{re.escape(kernel)}"?\(([^)]*)\)', text)
        assert signature, f"no kernel {kernel} in the IR"
        types = [p.split()[0] for p in signature.group(1).split(",") if p.strip()]
        ctype = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "float": ctypes.c_float,
                 "double": ctypes.c_double, "ptr": ctypes.c_void_p}
        self.argtypes = [ctype[t] for t in types]
        address = self._engine.get_function_address(kernel)
        self._fn = ctypes.CFUNCTYPE(None, *self.argtypes)(address)

    # --- what only a GPU has -------------------------------------------------------------

    def _bind(self, llvm, text: str) -> list:
        keep = []

        def bind(name: str, restype, argtypes, fn: Callable) -> None:
            def safe(*args):
                try:
                    return fn(*args)
                except BaseException as e:  # noqa: BLE001  (reported after the launch)
                    self.errors.append(e)
                    return 0 if restype is not None else None
            cb = ctypes.CFUNCTYPE(restype, *argtypes)(safe)
            keep.append(cb)
            llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)

        i32, b1 = ctypes.c_int32, ctypes.c_bool
        for reg in set(_SREG.findall(text)):
            bind(f"emu.read.ptx.sreg.{reg}", i32, [], functools.partial(self._sreg, reg))
        bind("emu.shfl.sync.idx.i32", i32, [i32, i32, i32, i32],
             lambda mask, v, src, c: self._exchange(v, lambda lane: src & 31))
        bind("emu.shfl.sync.bfly.i32", i32, [i32, i32, i32, i32],
             lambda mask, v, m, c: self._exchange(v, lambda lane: lane ^ m))
        bind("emu.shfl.sync.up.i32", i32, [i32, i32, i32, i32],
             lambda mask, v, d, c: self._exchange(v, lambda lane: lane - d if lane >= d
                                                  else lane))
        bind("emu.shfl.sync.down.i32", i32, [i32, i32, i32, i32],
             lambda mask, v, d, c: self._exchange(v, lambda lane: lane + d if lane + d < 32
                                                  else lane))
        bind("emu.vote.all.sync", b1, [i32, b1], lambda mask, p: self._vote(p, all))
        bind("emu.vote.any.sync", b1, [i32, b1], lambda mask, p: self._vote(p, any))
        bind("emu.barrier.cta.sync.aligned.all", None, [i32], lambda _: self._barrier())
        bind("emu.barrier0", None, [], self._barrier)
        llvm.add_symbol("tk_smem", ctypes.addressof(self.smem))
        for kind in set(re.findall(r'@"emu\.st\.([a-z0-9.]+)"', text)):
            args = _st_args(kind)
            ct = [ctypes.c_uint32 if a == "i32" else ctypes.c_uint16 for a in args]
            nbytes = len(args) * (int(kind.split(".")[-1][1:]) // 8)
            bind(f"emu.st.{kind}", None, [b1, ctypes.c_uint64, *ct],
                 functools.partial(self._store, kind, nbytes))
        return keep

    def _sreg(self, reg: str) -> int:
        block, tid = self._block, self._tls.tid
        assert block is not None
        table = {"tid.x": tid, "tid.y": 0, "tid.z": 0, "ntid.x": block.threads,
                 "laneid": tid % self.warp_size, "warpid": tid // self.warp_size,
                 **{f"ctaid.{a}": block.ctaid[i] for i, a in enumerate("xyz")},
                 **{f"nctaid.{a}": block.nctaid[i] for i, a in enumerate("xyz")}}
        return table[reg]

    def _exchange(self, value: int, source: Callable[[int], int]) -> int:
        block, tid = self._block, self._tls.tid
        assert block is not None
        warp, lane = divmod(tid, self.warp_size)
        block.slots[warp][lane] = value
        block.warps[warp].wait()
        out = block.slots[warp][source(lane) % self.warp_size]
        block.warps[warp].wait()
        return out

    def _vote(self, pred: bool, how) -> bool:
        block, tid = self._block, self._tls.tid
        assert block is not None
        warp, lane = divmod(tid, self.warp_size)
        block.slots[warp][lane] = bool(pred)
        block.warps[warp].wait()
        out = how(block.slots[warp])
        block.warps[warp].wait()
        return out

    def _barrier(self) -> None:
        assert self._block is not None
        self._block.cta.wait()

    def _store(self, kind: str, nbytes: int, pred: bool, address: int, *values) -> None:
        if not pred:
            return
        if address % nbytes:
            raise AssertionError(f"st.global.{kind} at {address:#x}: not {nbytes}-byte "
                                 "aligned (a misaligned address fault on the GPU)")
        if nbytes == 1:
            ctypes.c_uint8.from_address(address).value = values[0] & 0xFF
            return
        width = nbytes // len(values)
        ct = {2: ctypes.c_uint16, 4: ctypes.c_uint32}[width]
        for i, v in enumerate(values):
            ct.from_address(address + i * width).value = v

    # --- launches ------------------------------------------------------------------------

    def run_block(self, ctaid: Sequence[int], grid: Sequence[int], threads: int,
                  args: Sequence[int | float]) -> None:
        """Run block ``ctaid`` of ``grid`` (x, y, z) with ``threads`` threads; raise the
        first error a thread met (a failed check, a barrier that timed out)."""
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        cta3 = tuple(ctaid) + (0,) * (3 - len(ctaid))
        self._block = _Block(threads, self.warp_size, cta3, grid3)  # type: ignore[arg-type]
        ctypes.memset(self.smem, 0, _SMEM_BYTES)
        self.errors = []

        def thread(tid: int) -> None:
            self._tls.tid = tid
            self._fn(*args)

        workers = [threading.Thread(target=thread, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if self.errors:
            raise self.errors[0]

    def run(self, grid: Sequence[int], threads: int, args: Sequence[int | float]) -> None:
        for ctaid in itertools.product(*(range(g) for g in reversed(list(grid)))):
            self.run_block(tuple(reversed(ctaid)), grid, threads, args)


def device_buffer(array: np.ndarray, offset_elems: int = 0, pad_elems: int = 64
                  ) -> tuple[np.ndarray, np.ndarray]:
    """A 256-byte aligned copy of ``array``'s bytes inside a larger buffer (``pad_elems``
    guard elements each side, the data ``offset_elems`` past the aligned start), as the
    runtime sees a device allocation; returns (the whole buffer, the view on the data)."""
    item = array.dtype.itemsize
    n = array.size + offset_elems + 2 * pad_elems
    raw = np.zeros(n * item + 256, np.uint8)
    start = (-raw.ctypes.data) % 256
    buf = raw[start:start + n * item].view(array.dtype)
    view = buf[pad_elems + offset_elems:pad_elems + offset_elems + array.size]
    view[...] = array.reshape(-1)
    return buf, view.reshape(array.shape)


@dataclass
class Compiled:
    """A kernel lowered for a GPU target and JIT-compiled for the host, with what a launch
    needs: its parameter slots, its block size, and a status word (asserts)."""

    emulator: Emulator
    slots: tuple
    threads: int
    status: np.ndarray = field(default_factory=lambda: np.zeros(1, np.uint64))


def compile_for_host(module, divisible=frozenset(), target: str = "sm_90a",
                     num_warps: int | None = None) -> Compiled:
    """``compile_module``'s steps up to LLVM's O3 pipeline (no libdevice), then the host
    emulator of the result."""
    from tilekit.codegen import driver, occupancy
    from tilekit.codegen.lower import lower_function
    from tilekit.codegen.target import get_target
    from tilekit.layout.propagate import LayoutOptions, assign_layouts

    tgt = get_target(target)
    fn = module.kernel
    warps = num_warps or occupancy.default_num_warps(module)
    laid = assign_layouts(module, LayoutOptions(warps, tgt.warp_size, tgt.bank_target))
    facts = [frozenset(getattr(fn, f, frozenset()))
             for f in ("aligned16", "unit_inner", "strides16")]
    lowering = lower_function(laid.kernel, tgt, warps, *facts, divisible)
    assert not lowering.math.used, "the host emulator links no libdevice"
    mod = driver.parse_ir(str(lowering.module), tgt, fn.name)
    driver.optimize(mod, tgt)
    return Compiled(Emulator(str(mod), fn.name, tgt.warp_size), tuple(lowering.slots),
                    lowering.block_warps * tgt.warp_size)


def launch_args(compiled: Compiled, arrays: dict[str, np.ndarray],
                scalars: dict[str, int | float] | None = None) -> list[int | float]:
    """The kernel's parameters for these arrays (numpy views on host memory) and scalars,
    in slot order."""
    from tilekit.codegen.artifact import SlotKind

    scalars = scalars or {}
    out: list[int | float] = []
    for slot in compiled.slots:
        if slot.kind is SlotKind.POINTER:
            out.append(arrays[slot.arg].ctypes.data)
        elif slot.kind is SlotKind.SIZE:
            out.append(arrays[slot.arg].shape[slot.axis])
        elif slot.kind is SlotKind.STRIDE:
            a = arrays[slot.arg]
            out.append(a.strides[slot.axis] // a.dtype.itemsize)
        elif slot.kind is SlotKind.STATUS:
            out.append(compiled.status.ctypes.data)
        elif slot.kind is SlotKind.SCALAR:
            out.append(scalars[slot.arg])
        else:
            raise NotImplementedError(f"the host emulator has no {slot.kind}")
    return out


def emulate_each_block(kernel, x, y_buffer, y, constexprs, grid, region, want,
                       num_warps: int | None = None):
    """Run ``kernel(X=x, Y=y)``'s GPU code on the host block by block, the whole buffer of
    ``y`` set to a sentinel before each: block ``b`` (a tuple of ``len(grid)`` indices)
    must write ``want`` at ``region(*b)`` of ``y``, and nothing else (no byte around its
    tile, in ``y`` or past it). The bucket's size facts are the arrays'."""
    from tilekit.codegen.size_facts import candidate_size_facts, size_facts_holding

    module = kernel.trace(x, y, **constexprs)
    facts = size_facts_holding(candidate_size_facts(module), {"X": x.shape, "Y": y.shape})
    compiled = compile_for_host(module, facts, num_warps=num_warps)
    args = launch_args(compiled, {"X": x, "Y": y})
    bits = np.dtype(f"u{y.dtype.itemsize}")
    raw, got, expected = y_buffer.view(bits), y.view(bits), want.view(bits)
    sentinel = np.iinfo(bits).max
    for block in itertools.product(*map(range, grid)):
        raw[...] = sentinel
        compiled.emulator.run_block(block, grid, compiled.threads, args)
        tile = region(*block)
        np.testing.assert_array_equal(got[tile], expected[tile], err_msg=f"block {block}")
        got[tile] = sentinel
        outside = np.flatnonzero(raw != sentinel)
        assert outside.size == 0, f"block {block} wrote outside its tile at buffer " \
            f"elements {outside[:4].tolist()}"


def sentinel_free_values(shape, dtype, seed=0):
    """Values with no bit pattern equal to ``emulate_each_block``'s sentinel (all ones)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
