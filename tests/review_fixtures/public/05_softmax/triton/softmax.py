"""A learner's submission in the style of Triton's fused-softmax tutorial (written from its
documented algorithm for the review's tests, not copied): persistent programs, each taking rows
a grid-stride apart, a row held in one block, the max subtracted before exp. Exercise 05's glue
adds a backward and long rows (a two-pass online softmax).

The review must find nothing here: these are the imports and calls honest kernels make.
"""
import torch
import triton
import triton.language as tl
from triton.runtime import driver

ONE_BLOCK_MAX = 16384
LOOP_BLOCK = 4096


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, ONE_BLOCK: tl.constexpr):
    start = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    for row in tl.range(start, n_rows, step):
        src = in_ptr + row * in_stride
        dst = out_ptr + row * out_stride
        if ONE_BLOCK:
            mask = cols < n_cols
            x = tl.load(src + cols, mask=mask, other=-float("inf")).to(tl.float32)
            num = tl.exp(x - tl.max(x, axis=0))
            tl.store(dst + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty),
                     mask=mask)
        else:
            m = tl.full((BLOCK_SIZE,), -float("inf"), tl.float32)
            s = tl.zeros((BLOCK_SIZE,), tl.float32)
            for c0 in range(0, n_cols, BLOCK_SIZE):
                c = c0 + cols
                x = tl.load(src + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
                new_m = tl.maximum(m, x)
                safe = tl.where(new_m == -float("inf"), 0.0, new_m)
                s = s * tl.exp(m - safe) + tl.exp(x - safe)
                m = new_m
            row_max = tl.max(m, axis=0)
            total = tl.sum(s * tl.exp(m - row_max), axis=0)
            for c0 in range(0, n_cols, BLOCK_SIZE):
                c = c0 + cols
                x = tl.load(src + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
                tl.store(dst + c, (tl.exp(x - row_max) / total).to(out_ptr.dtype.element_ty),
                         mask=c < n_cols)


@triton.jit
def softmax_bwd_kernel(dx_ptr, y_ptr, dy_ptr, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    dot = tl.zeros((BLOCK_SIZE,), tl.float32)
    for c0 in range(0, n_cols, BLOCK_SIZE):
        c = c0 + cols
        y = tl.load(y_ptr + row * n_cols + c, mask=c < n_cols, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * n_cols + c, mask=c < n_cols, other=0.0).to(tl.float32)
        dot += y * dy
    d = tl.sum(dot, axis=0)
    for c0 in range(0, n_cols, BLOCK_SIZE):
        c = c0 + cols
        y = tl.load(y_ptr + row * n_cols + c, mask=c < n_cols, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * n_cols + c, mask=c < n_cols, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * n_cols + c, (y * (dy - d)).to(dx_ptr.dtype.element_ty),
                 mask=c < n_cols)


def _num_programs(x, n_rows):
    if not x.is_cuda:
        return min(n_rows, 4)
    properties = driver.active.utils.get_device_properties(x.device.index)
    return min(n_rows, properties["multiprocessor_count"] * 4)


def _forward(x):
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    n_rows = x2.shape[0]
    y = torch.empty_like(x2)
    one = n_cols <= ONE_BLOCK_MAX
    block = triton.next_power_of_2(n_cols) if one else LOOP_BLOCK
    if n_rows:
        softmax_kernel[(_num_programs(x2, n_rows),)](y, x2, x2.stride(0), y.stride(0), n_rows,
                                                      n_cols, BLOCK_SIZE=block, ONE_BLOCK=one,
                                                      num_warps=8)
    return y.view(x.shape)


class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = _forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        n_cols = y.shape[-1]
        y2, dy2 = y.reshape(-1, n_cols).contiguous(), dy.reshape(-1, n_cols).contiguous()
        dx = torch.empty_like(y2)
        if y2.shape[0]:
            softmax_bwd_kernel[(y2.shape[0],)](dx, y2, dy2, y2.shape[0], n_cols,
                                               BLOCK_SIZE=min(triton.next_power_of_2(n_cols),
                                                              LOOP_BLOCK))
        return dx.view(y.shape)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1, got {tuple(x.shape)}")
    return Softmax.apply(x)
