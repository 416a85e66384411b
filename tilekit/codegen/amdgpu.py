"""AMD specifics for the lowering (gfx942, wave64): work-item ids, the dispatch packet
for grid sizes, ``s_barrier``, ``ds_bpermute`` shuffles, LDS. Emission is tested by
assembling for gfx942; no AMD GPU runs these kernels here.
"""

from __future__ import annotations

from llvmlite import ir

from tilekit.codegen.intrinsics import call as _intrinsic
from tilekit.errors import LoweringError

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
LDS = 3
GLOBAL = 1
CONSTANT = 4


class Vendor:
    name = "amdgpu"
    shared_addrspace = LDS
    private_addrspace = 5  # local variables: private memory (allocas)
    global_addrspace = GLOBAL

    def kernel_function(self, module: ir.Module, name: str, param_types: list[ir.Type],
                        threads: int) -> ir.Function:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), param_types), name)
        fn.calling_convention = "amdgpu_kernel"
        fn.attributes.add("nounwind")
        return fn

    def thread_id(self, b: ir.IRBuilder) -> ir.Value:
        return _intrinsic(b, "llvm.amdgcn.workitem.id.x", I32, [])

    def block_id(self, b: ir.IRBuilder, axis: int) -> ir.Value:
        return _intrinsic(b, "llvm.amdgcn.workgroup.id." + "xyz"[axis], I32, [])

    def num_blocks(self, b: ir.IRBuilder, axis: int) -> ir.Value:
        # hsa_kernel_dispatch_packet_t: workgroup_size_{x,y,z} u16 at 4, 6, 8; grid_size_* u32
        # at 12, 16, 20 (work-items, not groups).
        packet = _intrinsic(b, "llvm.amdgcn.dispatch.ptr", ir.PointerType(I8, CONSTANT), [])
        wg = b.load(b.bitcast(b.gep(packet, [ir.Constant(I64, 4 + 2 * axis)]),
                              ir.PointerType(I16, CONSTANT)))
        grid = b.load(b.bitcast(b.gep(packet, [ir.Constant(I64, 12 + 4 * axis)]),
                                ir.PointerType(I32, CONSTANT)))
        return b.udiv(grid, b.zext(wg, I32))

    def barrier(self, b: ir.IRBuilder) -> None:
        """HIP's ``__syncthreads``: ``s_barrier`` does not order memory by itself (LLVM may
        move LDS accesses across it), so workgroup fences go around it."""
        b.fence("release", "workgroup")
        _intrinsic(b, "llvm.amdgcn.s.barrier", ir.VoidType(), [])
        b.fence("acquire", "workgroup")

    def shuffle_xor(self, b: ir.IRBuilder, value: ir.Value, mask: int) -> ir.Value:
        lane = _intrinsic(b, "llvm.amdgcn.mbcnt.hi", I32, [
            ir.Constant(I32, -1), _intrinsic(b, "llvm.amdgcn.mbcnt.lo", I32, [
                ir.Constant(I32, -1), ir.Constant(I32, 0)])])
        return self.shuffle_idx(b, value, b.xor(lane, ir.Constant(I32, mask)))

    def shuffle_idx(self, b: ir.IRBuilder, value: ir.Value, lane: ir.Value) -> ir.Value:
        addr = b.shl(lane, ir.Constant(I32, 2))
        return _intrinsic(b, "llvm.amdgcn.ds.bpermute", I32, [addr, value])

    def shared_base(self, module: ir.Module, nbytes: int) -> ir.GlobalVariable:
        """Dynamic LDS (sized at dispatch, as HIP's ``extern __shared__``)."""
        g = ir.GlobalVariable(module, ir.ArrayType(I8, 0), "tk_smem", addrspace=LDS)
        g.linkage = "external"
        g.align = 16
        return g

    def printf(self, b: ir.IRBuilder, fmt: str, args: list[ir.Value]) -> None:
        raise LoweringError("tk.device_print is not supported on AMD targets yet",
                            hints=["remove the print, or run on the interpreter "
                                   "(TILEKIT_INTERPRET=1)"])
