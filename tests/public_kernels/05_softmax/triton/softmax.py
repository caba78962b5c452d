"""Exercise 05 answered in the manner of Triton's fused-softmax tutorial.

Source of the design: https://github.com/triton-lang/triton/blob/main/python/tutorials/02-fused-softmax.py
(Triton, MIT license, Copyright 2018-2020 Philippe Tillet, 2020-2022 OpenAI). This file is not a
copy: it was written for the review's tests from the tutorial's documented algorithm, and uses
every construct the tutorial's kernel and launcher use (the active driver's device and its
properties, a kernel compiled ahead with `warmup`, its handles, registers and shared memory read
for the occupancy, persistent programs a grid-stride apart, `tl.range` with stages), with the glue
exercise 05 asks for (a backward, rows longer than one block). The review must find nothing here.
"""
import torch

import triton
import triton.language as tl
from triton.runtime import driver

DEVICE = triton.runtime.driver.active.get_active_torch_device()


def is_hip():
    return triton.runtime.driver.active.get_current_target().backend == "hip"


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    first = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(first, n_rows, step, num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(input_ptr + row * input_row_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        y = num / tl.sum(num, axis=0)
        tl.store(output_ptr + row * output_row_stride + cols, y.to(output_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def softmax_long_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                        BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    src = input_ptr + row * input_row_stride
    dst = output_ptr + row * output_row_stride
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((BLOCK_SIZE,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK_SIZE,), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        x = tl.load(src + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
        new_m = tl.maximum(m, x)
        safe = tl.where(new_m == -float("inf"), 0.0, new_m)
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        x = tl.load(src + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
        tl.store(dst + c, (tl.exp(x - row_max) / total).to(output_ptr.dtype.element_ty),
                 mask=c < n_cols)


@triton.jit
def softmax_backward_kernel(dx_ptr, y_ptr, dy_ptr, stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        y = tl.load(y_ptr + row * stride + c, mask=c < n_cols, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride + c, mask=c < n_cols, other=0.0).to(tl.float32)
        acc += y * dy
    dot = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        c = start + cols
        y = tl.load(y_ptr + row * stride + c, mask=c < n_cols, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride + c, mask=c < n_cols, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * stride + c, (y * (dy - dot)).to(dx_ptr.dtype.element_ty),
                 mask=c < n_cols)


ONE_BLOCK_MAX = 16384
kernels = {}


def _occupancy(kernel, num_warps):
    """Programs per multiprocessor, from the compiled kernel's registers and shared memory."""
    properties = driver.active.utils.get_device_properties(DEVICE.index)
    num_regs, size_smem = properties["max_num_regs"], properties["max_shared_mem"]
    warp_size = properties["warpSize"]
    kernel._init_handles()
    n_regs, shared = kernel.n_regs, kernel.metadata.shared
    occupancy = num_regs // max(n_regs * warp_size * num_warps, 1)
    if shared:
        occupancy = min(occupancy, size_smem // shared)
    return max(occupancy, 1) * properties["multiprocessor_count"]


def _forward(x2):
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    if n_cols > ONE_BLOCK_MAX or not x2.is_cuda:
        softmax_long_kernel[(n_rows,)](y, x2, x2.stride(0), y.stride(0), n_cols,
                                       BLOCK_SIZE=min(triton.next_power_of_2(n_cols), 4096))
        return y
    block = triton.next_power_of_2(n_cols)
    num_warps, num_stages = 8, 4 if not is_hip() else 2
    key = (block, num_stages, x2.dtype)
    if key not in kernels:
        kernel = softmax_kernel.warmup(y, x2, x2.stride(0), y.stride(0), n_rows, n_cols,
                                       BLOCK_SIZE=block, num_stages=num_stages,
                                       num_warps=num_warps, grid=(1,))
        kernels[key] = (kernel, _occupancy(kernel, num_warps))
    kernel, programs = kernels[key]
    kernel[(min(programs, n_rows), 1, 1)](y, x2, x2.stride(0), y.stride(0), n_rows, n_cols,
                                          block, num_stages)
    return y


class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = _forward(x2)
        ctx.save_for_backward(y)
        return y.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy2 = dy.reshape(y.shape).contiguous()
        dx = torch.empty_like(y)
        softmax_backward_kernel[(y.shape[0],)](dx, y, dy2, y.stride(0), y.shape[1],
                                               BLOCK_SIZE=min(triton.next_power_of_2(y.shape[1]),
                                                              4096))
        return dx.view_as(dy)


def softmax(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    return Softmax.apply(x)
