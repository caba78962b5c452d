"""Exercise 01 — vector_add, solved.

Napkin math (float32, n = 2^28): read x and y, write out: 3 * 4 B * 2^28 = 3.22 GB. At the
H200's measured copy bandwidth (~4.28 TB/s, reads + writes) that is ~750 us; on an H100
(~3.0 TB/s) ~1.07 ms. One add per 12 bytes: nowhere near the arithmetic units, so all that
matters is streaming memory: wide blocks, enough bytes in flight, nothing read twice.
"""
import torch
import triton
import triton.language as tl

# 4096 elements per program with 8 warps: 16 fp32 (64 B) per thread per tensor, four 16-byte
# loads of x and of y in flight per thread before it needs any. Measured on an H200 at n = 2^28
# (2026-11-21): 748 us, 101% of the copy ceiling; BLOCK=1024 with 4 warps streams just as well
# (738 us), while BLOCK=128 drops to 60% (1273 us): too few bytes per program to hide latency.
BLOCK = 4096
NUM_WARPS = 8


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    # int64 offsets: pid * BLOCK overflows int32 past 2^31 elements
    offsets = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last program runs past n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    # add in float32 and round once on the store, as PyTorch does for fp16/bf16
    out = x.to(tl.float32) + y.to(tl.float32)
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError("x and y must be tensors")
    if x.dim() != 1:
        raise ValueError(f"x must be 1-D, got shape {tuple(x.shape)}")
    if y.shape != x.shape:
        raise ValueError(f"y must have x's shape {tuple(x.shape)}, got {tuple(y.shape)}")
    if y.dtype != x.dtype:
        raise ValueError(f"y must have x's dtype {x.dtype}, got {y.dtype}")
    if y.device != x.device:
        raise ValueError(f"y must be on x's device {x.device}, got {y.device}")
    # The kernel walks memory with stride 1: a strided view would read the wrong elements.
    # Copying it costs an extra pass; refusing tells the caller where that pass would go.
    for name, t in (("x", x), ("y", y)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (got strides {t.stride()}); "
                             f"call .contiguous() first")
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    grid = (triton.cdiv(n, BLOCK),)
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out
