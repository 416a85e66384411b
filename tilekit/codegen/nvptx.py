"""NVIDIA specifics for the lowering: special registers, barriers, shuffles, shared
memory, printf. Barriers and shuffles are the convergent NVVM intrinsics, never inline
asm, so that LLVM does not duplicate them into divergent branches.
"""

from __future__ import annotations

from llvmlite import ir

from tilekit.codegen.intrinsics import c32
from tilekit.codegen.intrinsics import call as _call

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
SHARED = 3
GLOBAL = 1


def _sreg(b: ir.IRBuilder, name: str) -> ir.Value:
    return _call(b, f"llvm.nvvm.read.ptx.sreg.{name}", I32, [])


class Vendor:
    name = "nvptx"
    shared_addrspace = SHARED
    private_addrspace = 0  # local variables: the generic space (allocas)
    global_addrspace = GLOBAL

    def kernel_function(self, module: ir.Module, name: str, param_types: list[ir.Type],
                        threads: int) -> ir.Function:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), param_types), name)
        fn.calling_convention = "ptx_kernel"
        fn.attributes.add("nounwind")
        # Tell ptxas the block size so it can budget registers (maxntid).
        ann = module.add_named_metadata("nvvm.annotations")
        ann.add(module.add_metadata([fn, "maxntidx", ir.Constant(I32, threads)]))
        # libdevice asks __nvvm_reflect("__CUDA_FTZ"): no flush-to-zero (IEEE denormals).
        flags = module.add_named_metadata("llvm.module.flags")
        flags.add(module.add_metadata([ir.Constant(I32, 4), "nvvm-reflect-ftz",
                                       ir.Constant(I32, 0)]))
        return fn

    def thread_id(self, b: ir.IRBuilder) -> ir.Value:
        return _sreg(b, "tid.x")

    def block_id(self, b: ir.IRBuilder, axis: int) -> ir.Value:
        return _sreg(b, "ctaid." + "xyz"[axis])

    def num_blocks(self, b: ir.IRBuilder, axis: int) -> ir.Value:
        return _sreg(b, "nctaid." + "xyz"[axis])

    # Barriers and shuffles through the NVVM intrinsics, which LLVM knows to be convergent:
    # an inline-asm `bar.sync` was duplicated into both arms of a branch (tail duplication),
    # and `bar.sync` is `.aligned`: the warp then hangs.
    def barrier(self, b: ir.IRBuilder) -> None:
        _call(b, "llvm.nvvm.barrier.cta.sync.aligned.all", ir.VoidType(), [c32(0)])

    def named_barrier(self, b: ir.IRBuilder, barrier_id: int, threads: int) -> None:
        """``bar.sync id, threads``: the ``threads`` threads of one warp role meet (whole
        warps; the other role never takes part)."""
        _call(b, "llvm.nvvm.barrier.cta.sync.aligned.count", ir.VoidType(),
              [c32(barrier_id), c32(threads)])

    def min_blocks_per_sm(self, module: ir.Module, fn: ir.Function, blocks: int) -> None:
        """``.minnctapersm``: with ``.maxntid`` it fixes the register count at entry, which
        ptxas needs to honour ``setmaxnreg`` (else it ignores it: "unable to determine
        register count at entry")."""
        ann = module.add_named_metadata("nvvm.annotations")
        ann.add(module.add_metadata([fn, "minctasm", ir.Constant(I32, blocks)]))

    def grid_constant(self, module: ir.Module, fn: ir.Function, params) -> None:
        """Mark byval parameters ``__grid_constant__`` (0-based indices): their address is
        the parameter's own (``cvta.param``), not that of a local copy, which is what a
        TMA instruction needs of its tensor map. LLVM reads the annotation's 1-based
        indices (it upgrades them to the ``nvvm.grid_constant`` attribute)."""
        ann = module.add_named_metadata("nvvm.annotations")
        indices = module.add_metadata([ir.Constant(I32, k + 1) for k in params])
        ann.add(module.add_metadata([fn, "grid_constant", indices]))

    def store_if(self, b: ir.IRBuilder, pred: ir.Value, address: ir.Value,
                 value: ir.Value, nbytes: int) -> None:
        """``st.global`` of ``value`` (``nbytes`` of 1, 2, 4, 8 or 16, any type of that
        size) at ``address`` (i64, aligned to ``nbytes``) where ``pred`` (i1) holds: one
        predicated instruction, never a branch, and never moved into one by LLVM (a
        sequence of conditional pieces came out of ptxas as branches around blocks)."""
        if nbytes >= 4:
            words = nbytes // 4
            v = b.bitcast(value, I32 if words == 1 else ir.VectorType(I32, words))
            regs = [v] if words == 1 else [b.extract_element(v, c32(i)) for i in range(words)]
            kind, cons = (f"v{words}.b32" if words > 1 else "b32"), "r"
        else:
            v = b.bitcast(value, ir.IntType(8 * nbytes))
            regs = [v if nbytes == 2 else b.zext(v, ir.IntType(16))]
            kind, cons = f"b{8 * nbytes}", "h"
        names = ", ".join(f"${i + 2}" for i in range(len(regs)))
        data = names if len(regs) == 1 else "{" + names + "}"
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(1), I64]
                                           + [r.type for r in regs]),
                           f"@$0 st.global.{kind} [$1], {data};",
                           ",".join(["b", "l"] + [cons] * len(regs)) + ",~{memory}",
                           side_effect=True)
        b.call(asm, [pred, address, *regs])

    def shuffle_xor(self, b: ir.IRBuilder, value: ir.Value, mask: int) -> ir.Value:
        """``value`` (i32) of the lane ``lane ^ mask`` (every lane of the warp takes part)."""
        return _call(b, "llvm.nvvm.shfl.sync.bfly.i32", I32,
                     [c32(-1), value, c32(mask), c32(0x1F)])

    def shuffle_idx(self, b: ir.IRBuilder, value: ir.Value, lane: ir.Value) -> ir.Value:
        return _call(b, "llvm.nvvm.shfl.sync.idx.i32", I32, [c32(-1), value, lane, c32(0x1F)])

    def vote_all(self, b: ir.IRBuilder, pred: ir.Value) -> ir.Value:
        """Whether ``pred`` (i1) holds in every lane of the warp (all take part)."""
        return _call(b, "llvm.nvvm.vote.all.sync", ir.IntType(1), [c32(-1), pred])

    def shared_base(self, module: ir.Module, nbytes: int) -> ir.GlobalVariable:
        """Dynamic shared memory (sized at launch, so > 48 KB works with the opt-in)."""
        g = ir.GlobalVariable(module, ir.ArrayType(I8, 0), "tk_smem", addrspace=SHARED)
        g.linkage = "external"
        g.align = 16
        return g

    def printf(self, b: ir.IRBuilder, fmt: str, args: list[ir.Value]) -> None:
        """``vprintf(fmt, buffer)``: CUDA's device printf, arguments packed 8-byte aligned."""
        module = b.module
        vprintf = module.globals.get("vprintf") or ir.Function(
            module, ir.FunctionType(I32, [ir.PointerType(I8), ir.PointerType(I8)]), "vprintf")
        data = bytearray(fmt.encode() + b"\0")
        const = ir.Constant(ir.ArrayType(I8, len(data)), data)
        name = f"tk_fmt{len(module.globals)}"
        g = ir.GlobalVariable(module, const.type, name, addrspace=4)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = const
        fmt_ptr = b.addrspacecast(b.gep(g, [ir.Constant(I32, 0), ir.Constant(I32, 0)]),
                                  ir.PointerType(I8))
        if args:
            struct = ir.LiteralStructType([a.type for a in args])
            buf = b.alloca(struct)
            for i, a in enumerate(args):
                b.store(a, b.gep(buf, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
            arg_ptr = b.bitcast(buf, ir.PointerType(I8))
        else:
            arg_ptr = ir.Constant(ir.PointerType(I8), None)
        b.call(vprintf, [fmt_ptr, arg_ptr])
