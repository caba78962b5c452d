"""Offline probe (Triton 3.6, sm_90a): can a Gluon kernel issue a TMA reduce-add
(cp.reduce.async.bulk.tensor ... .add.f32) through the builder's create_async_tma_reduce, which
Gluon 3.6's hopper `tma` module does not wrap? Compiles a tiny kernel and greps its PTX."""
import sys
sys.path.insert(0, "/work/main/tests"); sys.path.insert(0, "/work/main")
import torch
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
import test_ex13_flash_attention as t


@builtin
def async_reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA reduce-add of a shared-memory tile into global memory (the hopper tma module's
    async_copy_shared_to_global, adding instead of writing)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle,
                                              coord, src.handle)


@gluon.jit
def probe(src_desc, dst_desc, BLK: gl.constexpr):
    smem = gl.allocate_shared_memory(src_desc.dtype, [BLK, BLK], src_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()
    mbarrier.expect(bar, src_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(src_desc, [gl.program_id(0) * BLK, 0], bar, smem)
    mbarrier.wait(bar, 0)
    async_reduce_add(dst_desc, [0, 0], smem)   # every program adds its tile into the same one
    tma.store_wait(pendings=0)


layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float32)
x = torch.randn(256, 64)
y = torch.zeros(64, 64)
args = (TensorDescriptor.from_tensor(x, [64, 64], layout),
        TensorDescriptor.from_tensor(y, [64, 64], layout))
c = t._compile(probe, args, dict(BLK=64, num_warps=4), "fp32")
ptx = c.asm["ptx"]
hits = [l.strip() for l in ptx.splitlines() if "cp.reduce.async.bulk" in l]
print("\n".join(hits) or "no cp.reduce.async.bulk in the PTX")
print("sass has UTMAREDG:", "UTMAREDG" in (c.asm.get("sass") or ""), "(sass not always produced)")
